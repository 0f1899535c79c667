/*
 * cuda_common.cuh — private to the CUDA backend (kernels/cuda).
 *
 * The backend's and a stream's private state, the error-checking macros, and the op
 * entry points that cuda_backend.cu puts into the op table.  Every op has exactly the
 * signature of its gpt_backend_ops entry (see ../gpt.h for shapes and semantics) and
 * launches its work on the op's stream only.
 *
 * No global mutable state: handles, workspaces and scratch live in the stream impl, the
 * profiler's table in the backend impl.
 *
 * Memory outside the engines' dev_arena budget (stated here so it can be counted):
 *   per stream   the cuBLASLt/cuBLAS workspace (CUDA_WORKSPACE_BYTES, 32 MiB) and the
 *                norm_squared partials (NORM_BLOCKS doubles, 4 KiB);
 *   per backend  nothing beyond the CUDA context and the library handles.
 */
#ifndef AEBENCH_CUDA_COMMON_CUH
#define AEBENCH_CUDA_COMMON_CUH

#include "../gpt.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>

/* cuBLASLt workspace per stream: large enough for the split-K and stream-K algorithms
 * the heuristic likes for the tall-skinny weight-gradient products. */
#define CUDA_WORKSPACE_BYTES ((size_t)32 << 20)
/* norm_squared's first stage: a fixed grid, so that the reduction order depends only on
 * n (the same result on every call), and one double partial per block. */
#define NORM_BLOCKS 512
#define NORM_THREADS 256

/* Reports a failed CUDA runtime call with where it happened; evaluates to 1 on error. */
static inline int cuda_report(cudaError_t e, const char *what, const char *file, int line)
{
    if (e == cudaSuccess)
        return 0;
    fprintf(stderr, "aebench: CUDA error at %s:%d: %s: %s\n", file, line, what,
            cudaGetErrorString(e));
    return 1;
}
static inline int cublas_report(cublasStatus_t e, const char *what, const char *file, int line)
{
    if (e == CUBLAS_STATUS_SUCCESS)
        return 0;
    fprintf(stderr, "aebench: cuBLAS error at %s:%d: %s: %s\n", file, line, what,
            cublasGetStatusString(e));
    return 1;
}
#define CUDA_FAILED(call) cuda_report((call), #call, __FILE__, __LINE__)
#define CUBLAS_FAILED(call) cublas_report((call), #call, __FILE__, __LINE__)

/* The op indices of the profiler's table (same order as the names in cuda_backend.cu). */
enum cuda_op_id {
    OP_ENCODER_FWD, OP_ENCODER_BWD, OP_LAYERNORM_FWD, OP_LAYERNORM_BWD, OP_MATMUL_FWD,
    OP_MATMUL_BWD, OP_ATTENTION_FWD, OP_ATTENTION_BWD, OP_GELU_FWD, OP_GELU_BWD,
    OP_RESIDUAL_FWD, OP_RESIDUAL_BWD, OP_CROSSENTROPY_FWD, OP_CROSSENTROPY_BWD, OP_ADAMW,
    OP_NORM_SQUARED, OP_COUNT
};

typedef struct cuda_backend_impl {
    int device;
    int allow_tf32;
    char desc[320];
    /* opt-in per-op profiler (AEBENCH_PROFILE_OPS=1 at creation) */
    int profile;
    pthread_mutex_t prof_lock; /* streams may be driven from several host threads */
    long long prof_calls[OP_COUNT];
    double prof_ms[OP_COUNT];
} cuda_backend_impl;

typedef struct cuda_stream_impl {
    cudaStream_t stream;
    cublasLtHandle_t lt;
    cublasHandle_t blas;        /* attention's strided-batched GEMMs */
    void *workspace;            /* CUDA_WORKSPACE_BYTES, shared by cuBLASLt and cuBLAS */
    double *norm_partials;      /* NORM_BLOCKS */
    cudaEvent_t prof_start, prof_end; /* created only when profiling */
    int failed;                 /* an op failed since the last stream_sync: report it there */
} cuda_stream_impl;

static inline cuda_stream_impl *cu_stream(const gpt_stream *s)
{
    return (cuda_stream_impl *)s->impl;
}
static inline const cuda_backend_impl *cu_backend(const gpt_stream *s)
{
    return (const cuda_backend_impl *)s->be->impl;
}
/* cuBLAS compute type of this backend's fp32 products. */
static inline cublasComputeType_t cu_compute_type(const gpt_stream *s)
{
    return cu_backend(s)->allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

/* An op cannot return an error (gpt.h): it reports on stderr and marks the stream, whose
 * next stream_sync returns GPT_ERR_BACKEND. */
#define OP_CHECK_CUDA(s, call)                                                             \
    do {                                                                                   \
        if (CUDA_FAILED(call))                                                             \
            cu_stream(s)->failed = 1;                                                      \
    } while (0)
#define OP_CHECK_CUBLAS(s, call)                                                           \
    do {                                                                                   \
        if (CUBLAS_FAILED(call))                                                           \
            cu_stream(s)->failed = 1;                                                      \
    } while (0)
/* After a kernel launch: a bad configuration shows up here, not later. */
#define OP_CHECK_LAUNCH(s) OP_CHECK_CUDA(s, cudaGetLastError())

/* Blocks for a grid-stride elementwise kernel over n items: enough to fill the GPU,
 * never more than the items need. */
static inline unsigned grid_for(size_t n, unsigned threads)
{
    size_t blocks = (n + threads - 1) / threads;
    if (blocks > 132 * 16)
        blocks = 132 * 16;
    return blocks > 0 ? (unsigned)blocks : 1u;
}

/* cuda_matmul.cu */
void cu_matmul_forward(gpt_stream *s, float *out, const float *inp, const float *w,
                       const float *bias, int N, int C, int OC);
void cu_matmul_backward(gpt_stream *s, float *dinp, float *dw, float *dbias, const float *dout,
                        const float *inp, const float *w, int N, int C, int OC);

/* cuda_attention.cu */
void cu_attention_forward(gpt_stream *s, float *out, float *att, const float *qkv, int B,
                          int T, int C, int NH);
void cu_attention_backward(gpt_stream *s, float *dqkv, float *datt, const float *dout,
                           const float *qkv, const float *att, int B, int T, int C, int NH);

/* cuda_ops.cu */
void cu_encoder_forward(gpt_stream *s, float *out, const int32_t *tokens, const float *wte,
                        const float *wpe, int B, int T, int C);
void cu_encoder_backward(gpt_stream *s, float *dwte, float *dwpe, const float *dout,
                         const int32_t *tokens, int B, int T, int C);
void cu_layernorm_forward(gpt_stream *s, float *out, float *mean, float *rstd,
                          const float *inp, const float *w, const float *b, int N, int C);
void cu_layernorm_backward(gpt_stream *s, float *dinp, float *dw, float *db,
                           const float *dout, const float *inp, const float *w,
                           const float *mean, const float *rstd, int N, int C);
void cu_gelu_forward(gpt_stream *s, float *out, const float *inp, size_t n);
void cu_gelu_backward(gpt_stream *s, float *dinp, const float *inp, const float *dout,
                      size_t n);
void cu_residual_forward(gpt_stream *s, float *out, const float *a, const float *b, size_t n);
void cu_residual_backward(gpt_stream *s, float *da, float *db, const float *dout, size_t n);
void cu_crossentropy_forward(gpt_stream *s, float *losses, const float *logits,
                             const int32_t *targets, int N, int V, int Vp);
void cu_crossentropy_backward(gpt_stream *s, float *dlogits, const float *logits,
                              const int32_t *targets, float dloss, int N, int V, int Vp);
void cu_adamw_update(gpt_stream *s, float *param, const float *grad, float *m, float *v,
                     size_t n, float lr, float beta1, float beta2, float eps,
                     float weight_decay, int t, float grad_scale);
void cu_norm_squared(gpt_stream *s, float *out, const float *x, size_t n);

/* Column sums (deterministic): out[o] += sum_n in[n][o] over in (N,OC).  Shared by the
 * matmul's dbias. */
void cu_column_sum_acc(gpt_stream *s, float *out, const float *in, int N, int OC);

#endif
