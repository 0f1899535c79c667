/*
 * bench_check.cuh — what the stand-alone bench programs (lt_probe.cu, copy_interference.cu,
 * copy_region.cu) share: a failing CUDA or cuBLAS(Lt) call ends the program, naming the call and
 * where; the huge pages /proc/meminfo counts.
 */
#ifndef AEBENCH_BENCH_CHECK_CUH
#define AEBENCH_BENCH_CHECK_CUH

#include <cublas_api.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK_CUDA(x)                                                                          \
    do {                                                                                       \
        cudaError_t e_ = (x);                                                                  \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)
/* cuBLAS and cuBLASLt calls both return a cublasStatus_t */
#define CHECK_CUBLAS(x)                                                                        \
    do {                                                                                       \
        cublasStatus_t s_ = (x);                                                               \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                     \
            fprintf(stderr, "%s:%d %s: status %d\n", __FILE__, __LINE__, #x, (int)s_);         \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

/* AnonHugePages of /proc/meminfo, kB (-1: not read): how much of a region made since got huge
 * pages (copy_interference.cu, copy_region.cu) */
static inline long bench_anon_huge_kb(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "AnonHugePages: %ld kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb;
}

#endif
