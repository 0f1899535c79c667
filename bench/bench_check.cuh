/*
 * bench_check.cuh — what the stand-alone bench programs (lt_probe.cu, copy_interference.cu)
 * share: a failing CUDA or cuBLAS(Lt) call ends the program, naming the call and where.
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

#endif
