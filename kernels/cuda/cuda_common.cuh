/*
 * cuda_common.cuh — private to the CUDA backend (kernels/cuda).
 *
 * The backend's and a stream's private state, the error-checking macros, and the op
 * entry points that cuda_backend.cu puts into the op table.  Every op has exactly the
 * signature of its gpt_backend_ops entry (see ../gpt.h for shapes and semantics) and
 * launches its work on the op's stream only.
 *
 * No global mutable state: handles, workspaces and scratch live in the stream impl.
 *
 * Element types: every void * argument of an op holds the backend's activation type
 * (be->dtype: fp32 or bf16; see ../gpt.h).  Kernels are templates over that type T and read
 * and write it through ld_f32 / st_f32, doing all arithmetic in fp32; an op picks the
 * instantiation with CU_DISPATCH.
 *
 * Memory outside the engines' dev_arena budget (stated here so it can be counted):
 *   per stream   the cuBLASLt workspace (CUDA_WORKSPACE_BYTES, 32 MiB; also the partial
 *                sums of the layernorm and bias-gradient reductions) and the
 *                norm_squared partials (NORM_BLOCKS doubles, 4 KiB); on a stream that forms
 *                a TF32 weight gradient, from its first one: the transposed input
 *                (N x the layer's input width floats, at most CUDA_TRANSPOSE_BYTES, 64 MiB:
 *                cuda_matmul.cu);
 *   per backend  nothing beyond the CUDA context and the library handles.
 */
#ifndef AEBENCH_CUDA_COMMON_CUH
#define AEBENCH_CUDA_COMMON_CUH

#include "../gpt.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>

/* cuBLASLt workspace per stream: large enough for the split-K and stream-K algorithms
 * the heuristic likes for the tall-skinny weight-gradient products. */
#define CUDA_WORKSPACE_BYTES ((size_t)32 << 20)
/* The most a stream's transposed TF32 weight-gradient operand takes (cuda_matmul.cu): a
 * wider input is transposed and multiplied in column chunks of at most this. */
#define CUDA_TRANSPOSE_BYTES ((size_t)64 << 20)
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

/* cuBLASLt plans cached per stream (see cuda_matmul.cu). */
#define LT_PLAN_CACHE 64

typedef struct lt_plan_key {
    int transa, transb, m, n, k, lda, ldb, ldc;
    int ab_type, cd_type, compute, bias; /* cudaDataType / cublasComputeType_t values */
    int epi;                             /* lt_epilogue (cuda_matmul.cu) */
    unsigned al_a, al_b, al_c, al_d; /* al_c: C's, where C is not D */
} lt_plan_key;

typedef struct lt_plan {
    lt_plan_key key;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
    int valid;
} lt_plan;

typedef struct cuda_backend_impl {
    int device;
    int allow_tf32;
    int smem_per_block_optin; /* the most dynamic shared memory one block may opt in to */
    /* run the MLP's GELU / GELU-derivative in the GEMM epilogue (gpt_cuda_kernels.gelu_epilogue) */
    int gelu_fwd_epilogue, gelu_bwd_epilogue;
    /* TF32 weight gradients with the input transposed first (the default; not with
     * gpt_cuda_kernels.tf32_weight_grad_direct) */
    int tf32_dw_transpose;
    /* the attention's bf16 head-size-128 kernels on wgmma (cuda_attention_wgmma.cuh): the
     * device runs the sm_90a build, and gpt_cuda_kernels.attention_mma is not set */
    int attn_wgmma;
    char desc[320];
} cuda_backend_impl;

/* cuda_stream_impl.failed: an op's failure, and one for want of device memory (the next
 * stream_sync says GPT_ERR_OOM, which a run reports as out of memory, not as an error) */
enum { CU_FAILED = 1, CU_FAILED_OOM = 2 };

typedef struct cuda_stream_impl {
    cudaStream_t stream;
    cublasLtHandle_t lt;
    void *workspace;            /* CUDA_WORKSPACE_BYTES, cuBLASLt's */
    double *norm_partials;      /* NORM_BLOCKS */
    lt_plan plans[LT_PLAN_CACHE]; /* cuBLASLt descriptors + heuristic choice per shape */
    int next_plan;              /* round-robin slot to refill when the cache is full */
    int failed;                 /* an op failed since the last stream_sync: report it there
                                   (CU_FAILED_OOM: for want of memory) */
    float *transposed;          /* a TF32 weight gradient's input, transposed (lazily made) */
    size_t transposed_floats;
} cuda_stream_impl;

static inline cuda_stream_impl *cu_stream(const gpt_stream *s)
{
    return (cuda_stream_impl *)s->impl;
}
static inline const cuda_backend_impl *cu_backend(const gpt_stream *s)
{
    return (const cuda_backend_impl *)s->be->impl;
}
static inline int cu_is_bf16(const gpt_stream *s)
{
    return s->be->dtype == GPT_BF16;
}
/* cuBLAS type of the activations of this backend. */
static inline cudaDataType_t cu_act_type(const gpt_stream *s)
{
    return cu_is_bf16(s) ? CUDA_R_16BF : CUDA_R_32F;
}
/* cuBLAS compute type of this backend's products: fp32 accumulation always; fp32 inputs
 * may run on TF32 tensor cores when allowed; bf16 inputs use the bf16 tensor cores. */
static inline cublasComputeType_t cu_compute_type(const gpt_stream *s)
{
    if (cu_is_bf16(s))
        return CUBLAS_COMPUTE_32F;
    return cu_backend(s)->allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

/* ---- element types in kernels ---------------------------------------------------------- */

typedef __nv_bfloat16 bf16;

/* VEC elements moved as one access (16 bytes for the full vector width). */
template <typename T_, int VEC> struct alignas(sizeof(T_) * VEC) vec_t {
    T_ v[VEC];
};

static __device__ __forceinline__ float ld_f32(float x) { return x; }
static __device__ __forceinline__ float ld_f32(bf16 x) { return __bfloat162float(x); }
static __device__ __forceinline__ void st_f32(float *p, float v) { *p = v; }
static __device__ __forceinline__ void st_f32(bf16 *p, float v) { *p = __float2bfloat16_rn(v); }

/* Runs the statements with T the stream's activation type (float or bf16). */
#define CU_DISPATCH(s, T, ...)                                                             \
    do {                                                                                   \
        if (cu_is_bf16(s)) {                                                               \
            typedef bf16 T;                                                                \
            __VA_ARGS__;                                                                   \
        } else {                                                                           \
            typedef float T;                                                               \
            __VA_ARGS__;                                                                   \
        }                                                                                  \
    } while (0)

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
void cu_matmul_forward(gpt_stream *s, void *out, const void *inp, const void *w,
                       const void *bias, int N, int C, int OC);
void cu_matmul_backward(gpt_stream *s, void *dinp, float *dw, float *dbias, const void *dout,
                        const void *inp, const void *w, int N, int C, int OC,
                        gpt_grad_write gw);
void cu_matmul_forward_gelu(gpt_stream *s, void *out, void *pre, const void *inp, const void *w,
                            const void *bias, int N, int C, int OC);
void cu_matmul_forward_residual(gpt_stream *s, void *out, const void *inp, const void *w,
                                const void *bias, const void *res, int N, int C, int OC);
void cu_matmul_backward_gelu(gpt_stream *s, void *dinp, float *dw, float *dbias,
                             const void *dout, const void *inp, const void *w, const void *pre,
                             int N, int C, int OC, gpt_grad_write gw);
void cu_lt_plans_destroy(cuda_stream_impl *st);

/* cuda_attention.cu */
/* 1 when the current device runs this build's sm_90a code (wgmma) */
int cu_attention_wgmma_available(void);
void cu_attention_forward(gpt_stream *s, void *out, float *lse, const void *qkv, int B,
                          int T, int C, int NH);
void cu_attention_backward(gpt_stream *s, void *dqkv, float *delta, const void *dout,
                           const void *qkv, const void *out, const float *lse, int B, int T,
                           int C, int NH);

/* cuda_ops.cu */
void cu_encoder_forward(gpt_stream *s, void *out, const int32_t *tokens, const void *wte,
                        const void *wpe, int B, int T, int C, int lo, int rows);
void cu_encoder_backward(gpt_stream *s, float *dwte, float *dwpe, const void *dout,
                         const int32_t *tokens, int B, int T, int C, int lo, int rows);
void cu_layernorm_forward(gpt_stream *s, void *out, float *mean, float *rstd,
                          const void *inp, const void *w, const void *b, int N, int C);
void cu_layernorm_backward(gpt_stream *s, void *dinp, float *dw, float *db,
                           const void *dout, const void *inp, const void *w,
                           const float *mean, const float *rstd, int N, int C,
                           gpt_grad_write gw);
void cu_gelu_forward(gpt_stream *s, void *out, const void *inp, size_t n);
void cu_gelu_backward(gpt_stream *s, void *dinp, const void *inp, const void *dout, size_t n);
void cu_residual_forward(gpt_stream *s, void *out, const void *a, const void *b, size_t n);
void cu_add_f32(gpt_stream *s, float *out, const float *a, const float *b, size_t n);
void cu_residual_layernorm_forward(gpt_stream *s, void *res, void *out, float *mean, float *rstd,
                                   const void *a, const void *res_b, const void *w,
                                   const void *b, int N, int C);
void cu_residual_backward(gpt_stream *s, void *da, void *db, const void *dout, size_t n);
void cu_crossentropy_forward_backward(gpt_stream *s, float *losses, void *logits,
                                      const int32_t *targets, float dloss, int N, int V, int Vp);
void cu_crossentropy_stats(gpt_stream *s, float *stats, const void *logits, const int32_t *targets, int N, int V,
                           int Vp, int lo);
void cu_crossentropy_parallel(gpt_stream *s, float *losses, void *logits, const int32_t *targets, const float *stats,
                              int parts, float dloss, int N, int V, int Vp, int lo);
void cu_adamw_update(gpt_stream *s, float *param, void *param_act, const float *grad, float *m,
                     float *v, size_t n, float lr, float beta1, float beta2, float eps,
                     float weight_decay, int t, float grad_scale, const gpt_checksum_acc *acc);
void cu_norm_squared(gpt_stream *s, float *out, const float *x, size_t n);
void cu_checksum_chunks(gpt_stream *s, uint64_t *sums, const gpt_float_span *parts, int nparts,
                        size_t chunk_floats);
void cu_checksum_fold(gpt_stream *s, uint64_t *sums, size_t total, size_t chunk_floats);
void cu_params_to_act(gpt_stream *s, void *dst, const float *src, size_t n);
void cu_act_to_f32(gpt_stream *s, float *dst, const void *src, size_t n);

/* Column sums (deterministic): out[o] += sum_n in[n][o] over in (N,OC) of the activation
 * type.  Shared by the matmul's dbias. */
/* out (OC) += (or, overwrite, =) the column sums of in (N,OC) */
void cu_column_sum(gpt_stream *s, float *out, const void *in, int N, int OC, int overwrite);

#endif
