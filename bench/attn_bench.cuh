/*
 * attn_bench.cuh — what the attention bench programs (attn_sweep.cu, attn_wgmma.cu) share: a
 * failing CUDA call ends the program with its name, the inputs' generator, reading results
 * back, comparing them, and timing a launch.
 */
#ifndef AEBENCH_ATTN_BENCH_CUH
#define AEBENCH_ATTN_BENCH_CUH

#include "bench_check.cuh"
#include "cuda/cuda_attention_tc.cuh"

#include <algorithm>
#include <stdio.h>
#include <stdlib.h>
#include <vector>

/* uniform in [-1, 1), a fixed LCG: the same inputs on every machine */
static float host_uniform(unsigned long long *state)
{
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*state >> 40) & 0xffffff) / (float)0x1000000 * 2.0f - 1.0f;
}
static float host_f32(float x) { return x; }
static float host_f32(bf16 x) { return __bfloat162float(x); }

template <typename E> static std::vector<E> fetch(const E *d, size_t n)
{
    std::vector<E> h(n);
    CHECK_CUDA(cudaMemcpy(h.data(), d, n * sizeof(E), cudaMemcpyDeviceToHost));
    return h;
}

/* max |a - ref| / max |ref| */
template <typename E> static double rel_diff(const std::vector<E> &a, const std::vector<E> &ref)
{
    double md = 0.0, mr = 0.0;
    for (size_t i = 0; i < a.size(); i++) {
        const double x = host_f32(a[i]), r = host_f32(ref[i]);
        md = std::max(md, fabs(x - r));
        mr = std::max(mr, fabs(r));
    }
    return mr > 0.0 ? md / mr : md;
}

/* The shape from the command line ([B T C NH], default the l32 model's 4 1024 2048 16) for a
 * program whose kernels need head size hs; false (after saying why) when it is not one. */
static bool attn_bench_shape(int argc, char **argv, const char *prog, int hs, int *B, int *T,
                             int *C, int *NH)
{
    *B = 4, *T = 1024, *C = 2048, *NH = 16;
    if (argc == 5) {
        *B = atoi(argv[1]);
        *T = atoi(argv[2]);
        *C = atoi(argv[3]);
        *NH = atoi(argv[4]);
    } else if (argc != 1) {
        fprintf(stderr, "usage: %s [B T C NH]\n", prog);
        return false;
    }
    if (*B < 1 || *T < 1 || *NH < 1 || *C != *NH * hs) {
        fprintf(stderr, "%s: needs head size %d (C = NH x %d)\n", prog, hs, hs);
        return false;
    }
    return true;
}

/* median ms of `reps` launches of fn (after 3 untimed), each timed by its own events */
template <typename F> static double median_ms(cudaStream_t st, int reps, F fn)
{
    cudaEvent_t a, b;
    CHECK_CUDA(cudaEventCreate(&a));
    CHECK_CUDA(cudaEventCreate(&b));
    for (int i = 0; i < 3; i++)
        CHECK_CUDA(fn());
    std::vector<float> ms(reps);
    for (int i = 0; i < reps; i++) {
        CHECK_CUDA(cudaEventRecord(a, st));
        CHECK_CUDA(fn());
        CHECK_CUDA(cudaEventRecord(b, st));
        CHECK_CUDA(cudaEventSynchronize(b));
        CHECK_CUDA(cudaEventElapsedTime(&ms[i], a, b));
    }
    CHECK_CUDA(cudaEventDestroy(a));
    CHECK_CUDA(cudaEventDestroy(b));
    std::sort(ms.begin(), ms.end());
    return ms[reps / 2];
}

#endif
