/*
 * rng.h — a small deterministic random generator (splitmix64) for initialisation and the
 * synthetic corpus.  Every consumer derives its own generator from (seed, stream ids), so a
 * value never depends on the order in which an engine happens to initialise things:
 * layer 7's weights are the same whether they are made on the GPU, in pinned host memory
 * or on another rank.
 */
#ifndef AEBENCH_RNG_H
#define AEBENCH_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct rng {
    uint64_t state;
} rng;

/* The state advances by this constant per draw (so a generator can jump ahead). */
#define RNG_GOLDEN 0x9E3779B97F4A7C15ULL

static inline uint64_t rng_next_u64(rng *r)
{
    uint64_t z = (r->state += RNG_GOLDEN);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* A generator for stream (a, b) of a seed: mixing each id through the generator keeps
 * nearby ids (layer 3 and layer 4) far apart in state space. */
static inline rng rng_for(uint64_t seed, uint64_t a, uint64_t b)
{
    rng r = {seed};
    r.state ^= rng_next_u64(&r) + a * 0xD1B54A32D192ED03ULL;
    r.state ^= rng_next_u64(&r) + b * 0x8CB92BA72F3D8DD7ULL;
    (void)rng_next_u64(&r);
    return r;
}

/* Uniform in [0, 1) with 53 random bits. */
static inline double rng_uniform(rng *r)
{
    return (double)(rng_next_u64(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* Uniform integer in [0, n), n > 0 (the modulo bias is below 2^-40 for n < 2^24). */
static inline uint32_t rng_below(rng *r, uint32_t n)
{
    return (uint32_t)(rng_next_u64(r) % n);
}

/* Standard normal by Box-Muller in double; one value per call keeps the stream simple. */
static inline double rng_normal(rng *r)
{
    double u1 = rng_uniform(r), u2 = rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* Two standard normals from one draw, by Box-Muller in float: two 24-bit uniforms, u1 in
 * (0, 1] (so the logarithm is finite: |z| < 5.8) and u2 in [0, 1).  Four times the speed of
 * rng_normal, which is what initialising billions of parameters needs; the tails beyond
 * 5.8 sigma do not matter for an initialisation of std 0.02. */
static inline void rng_normal_pair_f(rng *r, float *a, float *b)
{
    const uint64_t z = rng_next_u64(r);
    const float u1 = (float)((z >> 40) + 1) * (1.0f / 16777216.0f);
    const float u2 = (float)(z & 0xFFFFFFu) * (1.0f / 16777216.0f);
    const float m = sqrtf(-2.0f * logf(u1)), t = 6.28318530718f * u2;
    *a = m * cosf(t);
    *b = m * sinf(t);
}

#endif
