/*
 * checksum_element.h — the checkpoint checksum, one term per 32-bit word, shared by the host
 * (ckpt_store.c, the CPU backend) and the GPU (cuda_ops.cu), so that a version's checksums
 * can be computed where its data is (on the GPU, beside training, instead of a pass over
 * gigabytes of host memory every step) and checked where it lands (on the host, at recovery).
 *
 * A chunk of n words w_0 .. w_{n-1} (float bit patterns) sums to
 *     fold(n, sum_i term(w_i, i))      (mod 2^64)
 * with term a bijective 64-bit mix of (i, w_i): a changed word changes its term, a word
 * moved changes two, and the sum does not depend on the order it is added in, so threads may
 * add their terms in any order (integer addition: the same bits every time).
 */
#ifndef AEBENCH_CHECKSUM_ELEMENT_H
#define AEBENCH_CHECKSUM_ELEMENT_H

#include <stdint.h>

#ifdef __CUDACC__
#define GPT_CHECKSUM_HD __host__ __device__
#else
#define GPT_CHECKSUM_HD
#endif

/* SplitMix64's finaliser: a bijection on 64-bit values. */
static inline GPT_CHECKSUM_HD uint64_t gpt_checksum_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Word `bits` at index i (< 2^32) of its chunk. */
static inline GPT_CHECKSUM_HD uint64_t gpt_checksum_term(uint32_t bits, uint64_t i)
{
    return gpt_checksum_mix((i << 32 | bits) + 0x9e3779b97f4a7c15ull);
}

/* The sum of the terms of words w[0 .. n), which sit at indices i0 .. i0 + n of their chunk. */
static inline GPT_CHECKSUM_HD uint64_t gpt_checksum_sum(const uint32_t *w, uint64_t n, uint64_t i0)
{
    uint64_t sum = 0;
    for (uint64_t i = 0; i < n; i++) sum += gpt_checksum_term(w[i], i0 + i);
    return sum;
}

/* The chunk's checksum from the sum of its n terms. */
static inline GPT_CHECKSUM_HD uint64_t gpt_checksum_fold(uint64_t sum, uint64_t n)
{
    return gpt_checksum_mix(sum ^ gpt_checksum_mix(n));
}

#endif
