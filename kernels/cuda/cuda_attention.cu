/*
 * cuda_attention.cu — causal multi-head self-attention: cuBLAS strided-batched GEMMs for
 * the two products and a fused causal softmax kernel between them.
 *
 * Layout (as in ../cpu/cpu_attention.c): the row of token (b,t) in qkv (B,T,3C) is
 * [ q | k | v ], head h owning columns h*hs .. (h+1)*hs-1 of each, hs = C/NH.
 *
 * No permute and no scratch: for one batch element b, the NH heads' Q (or K, V) matrices
 * are (T, hs) views with row stride 3C that start hs floats apart — exactly the one
 * stride between consecutive batch items a strided-batched GEMM needs.  Consecutive b are
 * T*3C apart, a different stride, so each op loops over b (B launches of NH-batched
 * GEMMs each).  Outputs likewise: head h of out (B,T,C) is a (T, hs) view with row stride
 * C starting at h*hs; dq, dk, dv are views of dqkv with row stride 3C.
 *
 * Row-major vs cuBLAS's column-major: a row-major (r, c) view with row stride ld is the
 * column-major (c, r) matrix with leading dimension ld, so each product below is written
 * for the transposes (X^T = col-major view of row-major X).
 *
 * Types: every tensor here (qkv, att, datt, out, dqkv) is of the backend's activation type;
 * the GEMMs accumulate in fp32 and the softmax kernels compute in fp32, rounding once when
 * they store (with bf16, att holds bf16 probabilities, as PyTorch's math attention does).
 */
#include "cuda_common.cuh"

#include <math.h>

/* Element offset i of an activation array (its element size is the backend's). */
static inline const void *cel(const gpt_stream *s, const void *p, size_t i)
{
    return (const char *)p + i * gpt_dtype_size(s->be->dtype);
}
static inline void *el(const gpt_stream *s, void *p, size_t i)
{
    return (char *)p + i * gpt_dtype_size(s->be->dtype);
}

/* One NH-batched GEMM, column-major: C_i = alpha op(A_i) op(B_i) + beta C_i, all three of
 * the activation type, fp32 accumulation. */
static void batched_gemm(gpt_stream *s, cublasOperation_t opa, cublasOperation_t opb, int m,
                         int n, int k, float alpha, const void *A, int lda, long long sa,
                         const void *B, int ldb, long long sb, float beta, void *C, int ldc,
                         long long sc, int batch)
{
    const cudaDataType_t t = cu_act_type(s);
    OP_CHECK_CUBLAS(s, cublasGemmStridedBatchedEx(cu_stream(s)->blas, opa, opb, m, n, k,
                                                  &alpha, A, t, lda, sa, B, t, ldb, sb, &beta,
                                                  C, t, ldc, sc, batch, cu_compute_type(s),
                                                  CUBLAS_GEMM_DEFAULT));
}

/* ---- softmax ------------------------------------------------------------------------ */

static __device__ inline float warp_sum(float v)
{
    for (int off = 16; off > 0; off /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}
static __device__ inline float warp_max(float v)
{
    for (int off = 16; off > 0; off /= 2)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

/*
 * att (B*NH*T rows of T), in place: row t holds the scaled scores q_t . k_t2 / sqrt(hs)
 * for every t2 (the GEMM computed the future too); it becomes softmax over t2 <= t, with
 * exact zeros for t2 > t.  One warp per row: a row is at most a few thousand floats, so a
 * warp streams it with coalesced reads and reduces with shuffles (no shared memory).
 */
template <typename T_>
__global__ static void causal_softmax_forward_kernel(T_ *att, long long rows, int T)
{
    const long long row = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows)
        return;
    const int t = (int)(row % T); /* the query: keys 0..t are visible */
    T_ *x = att + row * T;

    float maxval = -INFINITY;
    for (int i = lane; i <= t; i += 32)
        maxval = fmaxf(maxval, ld_f32(x[i]));
    maxval = warp_max(maxval);

    /* Two reads of the scores, no intermediate store: with bf16 the exponentials are
     * never rounded before they are normalised. */
    float sum = 0.0f;
    for (int i = lane; i <= t; i += 32)
        sum += expf(ld_f32(x[i]) - maxval);
    sum = warp_sum(sum);
    const float inv_sum = 1.0f / sum; /* sum >= 1: the max term is exp(0) */
    for (int i = lane; i < T; i += 32)
        st_f32(&x[i], i <= t ? expf(ld_f32(x[i]) - maxval) * inv_sum : 0.0f);
}

/*
 * datt (B*NH*T rows of T), in place: on entry dP = dout . v for every (t, t2); on return
 * dS * scale = scale * P (dP - sum_j P_j dP_j) for t2 <= t and 0 above the diagonal (the
 * following GEMMs read whole rows and columns, so the future must be exact zeros).
 */
template <typename T_>
__global__ static void causal_softmax_backward_kernel(T_ *datt, const T_ *att, long long rows,
                                                      int T, float scale)
{
    const long long row = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows)
        return;
    const int t = (int)(row % T);
    T_ *d = datt + row * T;
    const T_ *p = att + row * T;

    float pdp = 0.0f;
    for (int i = lane; i <= t; i += 32)
        pdp += ld_f32(p[i]) * ld_f32(d[i]);
    pdp = warp_sum(pdp);
    for (int i = lane; i < T; i += 32)
        st_f32(&d[i], i <= t ? scale * (ld_f32(p[i]) * (ld_f32(d[i]) - pdp)) : 0.0f);
}

static void launch_rows(long long rows, unsigned *blocks, unsigned *threads)
{
    *threads = 256; /* 8 warps = 8 rows per block */
    *blocks = (unsigned)((rows + 7) / 8);
}

/* ---- the ops ------------------------------------------------------------------------- */

/*
 * out (B,T,C), att (B,NH,T,T) from qkv (B,T,3C).  Per (b, h):
 *   S   (T,T)  = Q K^T * scale      col-major: S^T  = K (op T on K^T view) . Q^T
 *   P          = causal softmax(S)  in place in att
 *   out (T,hs) = P V                col-major: out^T = V^T . P^T
 */
void cu_attention_forward(gpt_stream *s, void *out, void *att, const void *qkv, int B, int T,
                          int C, int NH)
{
    const int hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
    const long long TT = (long long)T * T;
    for (int b = 0; b < B; b++) {
        const void *q = cel(s, qkv, (size_t)b * T * C3);
        const void *k = cel(s, q, C);
        void *att_b = el(s, att, (size_t)b * NH * TT);
        batched_gemm(s, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, scale, k, C3, hs, q, C3, hs, 0.0f,
                     att_b, T, TT, NH);
    }
    const long long rows = (long long)B * NH * T;
    unsigned blocks, threads;
    launch_rows(rows, &blocks, &threads);
    CU_DISPATCH(s, E,
                causal_softmax_forward_kernel<E><<<blocks, threads, 0, cu_stream(s)->stream>>>(
                    (E *)att, rows, T));
    OP_CHECK_LAUNCH(s);
    for (int b = 0; b < B; b++) {
        const void *v = cel(s, qkv, (size_t)b * T * C3 + 2 * C);
        const void *att_b = cel(s, att, (size_t)b * NH * TT);
        batched_gemm(s, CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, 1.0f, v, C3, hs, att_b, T, TT, 0.0f,
                     el(s, out, (size_t)b * T * C), C, hs, NH);
    }
}

/*
 * dqkv (B,T,3C) overwritten, datt scratch.  Per (b, h), with P = att, dO = dout:
 *   dP (T,T)  = dO V^T               col-major: dP^T = V (op T) . dO^T
 *   dS*scale  = softmax backward      in place in datt (0 above the diagonal)
 *   dV (T,hs) = P^T dO               col-major: dV^T = dO^T . P (op T on P^T)
 *   dQ (T,hs) = dS K  (scale folded)  col-major: dQ^T = K^T . dS^T
 *   dK (T,hs) = dS^T Q                col-major: dK^T = Q^T . dS (op T on dS^T)
 * Every element of dqkv is written by exactly one of the three (beta = 0).
 */
void cu_attention_backward(gpt_stream *s, void *dqkv, void *datt, const void *dout,
                           const void *qkv, const void *att, int B, int T, int C, int NH)
{
    const int hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
    const long long TT = (long long)T * T;
    for (int b = 0; b < B; b++) {
        const void *v = cel(s, qkv, (size_t)b * T * C3 + 2 * C);
        const void *dO = cel(s, dout, (size_t)b * T * C);
        void *datt_b = el(s, datt, (size_t)b * NH * TT);
        const void *att_b = cel(s, att, (size_t)b * NH * TT);
        void *dv = el(s, dqkv, (size_t)b * T * C3 + 2 * C);
        batched_gemm(s, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, 1.0f, v, C3, hs, dO, C, hs, 0.0f,
                     datt_b, T, TT, NH);
        batched_gemm(s, CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, 1.0f, dO, C, hs, att_b, T, TT,
                     0.0f, dv, C3, hs, NH);
    }
    const long long rows = (long long)B * NH * T;
    unsigned blocks, threads;
    launch_rows(rows, &blocks, &threads);
    CU_DISPATCH(s, E,
                causal_softmax_backward_kernel<E><<<blocks, threads, 0, cu_stream(s)->stream>>>(
                    (E *)datt, (const E *)att, rows, T, scale));
    OP_CHECK_LAUNCH(s);
    for (int b = 0; b < B; b++) {
        const void *q = cel(s, qkv, (size_t)b * T * C3);
        const void *k = cel(s, q, C);
        const void *dS = cel(s, datt, (size_t)b * NH * TT);
        void *dq = el(s, dqkv, (size_t)b * T * C3);
        void *dk = el(s, dq, C);
        batched_gemm(s, CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, 1.0f, k, C3, hs, dS, T, TT, 0.0f,
                     dq, C3, hs, NH);
        batched_gemm(s, CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, 1.0f, q, C3, hs, dS, T, TT, 0.0f,
                     dk, C3, hs, NH);
    }
}
