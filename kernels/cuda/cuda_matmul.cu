/*
 * cuda_matmul.cu — the linear layer, out = inp @ w^T + bias, and its backward, through
 * cuBLASLt.
 *
 * cuBLASLt is column-major; our tensors are row-major.  A row-major (r, c) matrix with
 * row stride ld is, read as column-major, its transpose (c, r) with leading dimension ld.
 * So every product is written for the transposes:
 *
 *   forward   out^T (OC,N)  = w (OC,C as col-major C x OC, op T) . inp^T (C,N)
 *   dinp      dinp^T (C,N)  = w^T (C,OC, op N)                   . dout^T (OC,N)
 *   dw        dw^T (C,OC)  += inp^T (C,N, op N)                  . dout (N,OC, op T)
 *
 * The bias rides in the forward's BIAS epilogue (added per row of the column-major output,
 * i.e. per output channel); dbias is a deterministic column-sum kernel (the BGRADB
 * epilogue would overwrite, and dbias must accumulate).  dw accumulates through beta = 1,
 * dinp is overwritten with beta = 0.
 *
 * Compute type: CUBLAS_COMPUTE_32F_FAST_TF32 when the backend allows TF32, otherwise
 * CUBLAS_COMPUTE_32F (strict fp32: what the CPU reference is compared with).
 */
#include "cuda_common.cuh"

#include <stdint.h>

/* Largest power of two (up to 16) dividing the address: cuBLASLt's heuristic is told the
 * real alignment so it never picks a vectorised kernel that would fault on an offset
 * pointer (engines carve tensors out of blocks at arbitrary float offsets). */
static uint32_t alignment_of(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    uint32_t al = 16;
    while (al > 4 && (a % al) != 0)
        al /= 2;
    return al;
}

/* D (m,n col-major, ldc) = alpha op(A) op(B) + beta D  (+ bias[m] per row when given).
 * A is stored (transa ? k x m : m x k) with lda, B (transb ? n x k : k x n) with ldb. */
static void lt_gemm(gpt_stream *s, int transa, int transb, int m, int n, int k,
                    const float *A, int lda, const float *B, int ldb, float *D, int ldc,
                    const float *bias, float alpha, float beta)
{
    cuda_stream_impl *st = cu_stream(s);
    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    const cublasOperation_t opa = transa ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t opb = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const size_t ws = CUDA_WORKSPACE_BYTES;
    const uint32_t al_a = alignment_of(A), al_b = alignment_of(B), al_d = alignment_of(D);
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;

    if (CUBLAS_FAILED(cublasLtMatmulDescCreate(&desc, cu_compute_type(s), CUDA_R_32F)) ||
        CUBLAS_FAILED(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa,
                                                     sizeof opa)) ||
        CUBLAS_FAILED(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb,
                                                     sizeof opb)))
        goto fail;
    if (bias != NULL) {
        const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        if (CUBLAS_FAILED(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                         &epi, sizeof epi)) ||
            CUBLAS_FAILED(cublasLtMatmulDescSetAttribute(
                desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias)))
            goto fail;
    }
    if (CUBLAS_FAILED(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, transa ? k : m,
                                                 transa ? m : k, lda)) ||
        CUBLAS_FAILED(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, transb ? n : k,
                                                 transb ? k : n, ldb)) ||
        CUBLAS_FAILED(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, m, n, ldc)) ||
        CUBLAS_FAILED(cublasLtMatmulPreferenceCreate(&pref)) ||
        CUBLAS_FAILED(cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws)) ||
        CUBLAS_FAILED(cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a)) ||
        CUBLAS_FAILED(cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b)) ||
        CUBLAS_FAILED(cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof al_d)) ||
        CUBLAS_FAILED(cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof al_d)))
        goto fail;
    if (CUBLAS_FAILED(cublasLtMatmulAlgoGetHeuristic(st->lt, desc, la, lb, ld, ld, pref, 1,
                                                     &heur, &found)))
        goto fail;
    if (found == 0) {
        fprintf(stderr,
                "aebench: CUDA error at %s:%d: cuBLASLt has no algorithm for m=%d n=%d k=%d "
                "transa=%d transb=%d bias=%d\n",
                __FILE__, __LINE__, m, n, k, transa, transb, bias != NULL);
        goto fail;
    }
    if (CUBLAS_FAILED(cublasLtMatmul(st->lt, desc, &alpha, A, la, B, lb, &beta, D, ld, D, ld,
                                     &heur.algo, st->workspace, ws, st->stream)))
        goto fail;
    goto done;
fail:
    st->failed = 1;
done:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (ld) cublasLtMatrixLayoutDestroy(ld);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (desc) cublasLtMatmulDescDestroy(desc);
}

/* The BIAS epilogue reads the bias with vector loads: it needs a 16-byte aligned vector.
 * Otherwise: the product without bias, then this kernel adds it.
 * out (N,OC) += bias (OC) per row. */
__global__ static void add_bias_kernel(float *out, const float *bias, size_t rows, int OC)
{
    const size_t total = rows * (size_t)OC;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] += bias[i % OC];
}

/* out (N,OC) = inp (N,C) @ w^T (w (OC,C)) + bias (OC, may be NULL). */
void cu_matmul_forward(gpt_stream *s, float *out, const float *inp, const float *w,
                       const float *bias, int N, int C, int OC)
{
    const int fused = bias != NULL && alignment_of(bias) == 16;
    lt_gemm(s, 1, 0, OC, N, C, w, C, inp, C, out, OC, fused ? bias : NULL, 1.0f, 0.0f);
    if (bias != NULL && !fused) {
        const size_t total = (size_t)N * OC;
        add_bias_kernel<<<grid_for(total, 256), 256, 0, cu_stream(s)->stream>>>(out, bias,
                                                                               (size_t)N, OC);
        OP_CHECK_LAUNCH(s);
    }
}

/*
 * Column sums, deterministic: out[o] += sum_n in[n][o],  in (N,OC).
 * A block owns 32 columns; its 32 x 32 threads: lane x a column (coalesced row reads),
 * row y of the block walks the rows y, y+32, ... in order.  The 32 partial sums of a
 * column are then added in a fixed tree in shared memory, so the result depends only on
 * the shape, never on scheduling.  No atomics.
 */
__global__ static void column_sum_kernel(float *out, const float *in, int N, int OC)
{
    __shared__ float part[32][33]; /* +1: no bank conflicts reading a column */
    const int o = blockIdx.x * 32 + threadIdx.x;
    float sum = 0.0f;
    if (o < OC)
        for (int n = threadIdx.y; n < N; n += 32)
            sum += in[(size_t)n * OC + o];
    part[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    for (int stride = 16; stride > 0; stride /= 2) {
        if (threadIdx.y < stride)
            part[threadIdx.y][threadIdx.x] += part[threadIdx.y + stride][threadIdx.x];
        __syncthreads();
    }
    if (threadIdx.y == 0 && o < OC)
        out[o] += part[0][threadIdx.x];
}

void cu_column_sum_acc(gpt_stream *s, float *out, const float *in, int N, int OC)
{
    column_sum_kernel<<<(OC + 31) / 32, dim3(32, 32), 0, cu_stream(s)->stream>>>(out, in, N,
                                                                                 OC);
    OP_CHECK_LAUNCH(s);
}

/* dinp (N,C) = dout @ w (overwrites; skipped if NULL); dw (OC,C) += dout^T @ inp;
 * dbias (OC) += column sums of dout (skipped if NULL). */
void cu_matmul_backward(gpt_stream *s, float *dinp, float *dw, float *dbias, const float *dout,
                        const float *inp, const float *w, int N, int C, int OC)
{
    if (dinp != NULL)
        lt_gemm(s, 0, 0, C, N, OC, w, C, dout, OC, dinp, C, NULL, 1.0f, 0.0f);
    if (dw != NULL)
        lt_gemm(s, 0, 1, C, OC, N, inp, C, dout, OC, dw, C, NULL, 1.0f, 1.0f);
    if (dbias != NULL)
        cu_column_sum_acc(s, dbias, dout, N, OC);
}
