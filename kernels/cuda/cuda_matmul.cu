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
 * epilogue's order is not the CPU's, and it cannot accumulate).  dw accumulates through
 * beta = 1 (or, GPT_GRAD_OVERWRITE, is overwritten with beta = 0), dinp is overwritten
 * with beta = 0.
 *
 * Types: fp32 backends use fp32 everywhere with CUBLAS_COMPUTE_32F_FAST_TF32 when the
 * backend allows TF32, else CUBLAS_COMPUTE_32F (strict fp32: what the CPU reference is
 * compared with).  bf16 backends give A and B in bf16 with fp32 accumulation
 * (CUBLAS_COMPUTE_32F); out and dinp are bf16 (the epilogue rounds once), while dw is
 * accumulated straight into the fp32 gradient (C/D fp32 with bf16 A/B), so that
 * gradients never pass through bf16.
 *
 * TF32 weight gradients: in dw^T above both operands have the tokens (K) as their slow
 * dimension, and TF32 tensor-core products on Hopper read only K-major operands: cuBLASLt then
 * runs them at ~245 TFLOP/s where the forward's run at 375 (bench/lt_probe.cu on the l32 layer,
 * one H100).  With the input transposed first into a stream scratch (rows: its columns; K
 * contiguous), the same product is TN-like and runs at 375-385: dw qkv 0.426 -> 0.273 ms, fc
 * 0.560 -> 0.355, fcproj 0.584 -> 0.372, for a transpose of N x C floats (~25 us at C = 2048).
 * A wide input goes in column chunks of at most CUDA_TRANSPOSE_BYTES (rows of dw^T: separate
 * products).  The chunking depends only on N and C, so every engine forms the same bits.
 * An input of more rows (tokens) than the scratch holds 64 columns of, and a backend made with
 * gpt_cuda_kernels.tf32_weight_grad_direct (test_cuda checks that path), keep the one product
 * (other bits, within TF32's bound).  bf16 products read either layout on wgmma and are left
 * as they are.
 *
 * Plans: the descriptors, layouts and the heuristic's algorithm depend only on the shape,
 * the types and the pointers' alignments, and a training step asks for the same dozen
 * shapes hundreds of times; each stream caches them (LT_PLAN_CACHE entries, refilled
 * round-robin) so a call costs one cublasLtMatmul, not a heuristic query and eight
 * create/destroy calls.  Only the bias pointer changes between calls: it is set on the
 * cached descriptor before each use (the host-side attribute is read at enqueue time).
 */
#include "cuda_common.cuh"

#include <stdint.h>
#include <string.h>

/* Largest power of two (up to 16) dividing the address: cuBLASLt's heuristic is told the
 * real alignment so it never picks a vectorised kernel that would fault on an offset
 * pointer (engines carve tensors out of blocks at arbitrary element offsets). */
/* What runs in a product's epilogue besides the optional bias. */
enum lt_epilogue {
    LT_EPI_NONE = 0,
    LT_EPI_GELU_AUX = 1, /* D = gelu(AB [+ bias]), aux = AB [+ bias] (the pre-activation) */
    LT_EPI_DGELU = 2,    /* D = AB * gelu'(aux) */
};

static uint32_t alignment_of(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    uint32_t al = 16;
    while (al > 2 && (a % al) != 0)
        al /= 2;
    return al;
}

static void plan_release(lt_plan *p)
{
    if (p->ld) CUBLAS_FAILED(cublasLtMatrixLayoutDestroy(p->ld));
    if (p->lb) CUBLAS_FAILED(cublasLtMatrixLayoutDestroy(p->lb));
    if (p->la) CUBLAS_FAILED(cublasLtMatrixLayoutDestroy(p->la));
    if (p->desc) CUBLAS_FAILED(cublasLtMatmulDescDestroy(p->desc));
    memset(p, 0, sizeof *p);
}

void cu_lt_plans_destroy(cuda_stream_impl *st)
{
    for (int i = 0; i < LT_PLAN_CACHE; i++)
        if (st->plans[i].valid || st->plans[i].desc)
            plan_release(&st->plans[i]);
}

/* Builds the plan for key into p (descriptors, layouts, heuristic); 0 on success. */
static int plan_build(cuda_stream_impl *st, lt_plan *p, const lt_plan_key *key)
{
    const cublasOperation_t opa = key->transa ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t opb = key->transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const size_t ws = CUDA_WORKSPACE_BYTES;
    const cudaDataType_t ab = (cudaDataType_t)key->ab_type, cd = (cudaDataType_t)key->cd_type;
    const int m = key->m, n = key->n, k = key->k;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0, rc = 1;
    memset(p, 0, sizeof *p);
    p->key = *key;
    if (CUBLAS_FAILED(cublasLtMatmulDescCreate(&p->desc, (cublasComputeType_t)key->compute,
                                               CUDA_R_32F)) ||
        CUBLAS_FAILED(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa,
                                                     sizeof opa)) ||
        CUBLAS_FAILED(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb,
                                                     sizeof opb)))
        goto out;
    if (key->bias || key->epi != LT_EPI_NONE) {
        /* The bias has D's type (bf16 working weights with bf16 D); so has the aux matrix
         * (cuBLASLt's default), which is laid out as D. */
        cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        if (key->epi == LT_EPI_GELU_AUX)
            epi = key->bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
        else if (key->epi == LT_EPI_DGELU)
            epi = CUBLASLT_EPILOGUE_DGELU;
        const int64_t aux_ld = key->ldc;
        if (CUBLAS_FAILED(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                         &epi, sizeof epi)) ||
            (key->epi != LT_EPI_NONE &&
             CUBLAS_FAILED(cublasLtMatmulDescSetAttribute(
                 p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld))))
            goto out;
    }
    if (CUBLAS_FAILED(cublasLtMatrixLayoutCreate(&p->la, ab, key->transa ? k : m,
                                                 key->transa ? m : k, key->lda)) ||
        CUBLAS_FAILED(cublasLtMatrixLayoutCreate(&p->lb, ab, key->transb ? n : k,
                                                 key->transb ? k : n, key->ldb)) ||
        CUBLAS_FAILED(cublasLtMatrixLayoutCreate(&p->ld, cd, m, n, key->ldc)) ||
        CUBLAS_FAILED(cublasLtMatmulPreferenceCreate(&pref)) ||
        CUBLAS_FAILED(cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws)) ||
        CUBLAS_FAILED(cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &key->al_a, sizeof key->al_a)) ||
        CUBLAS_FAILED(cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &key->al_b, sizeof key->al_b)) ||
        CUBLAS_FAILED(cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &key->al_c, sizeof key->al_c)) ||
        CUBLAS_FAILED(cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &key->al_d, sizeof key->al_d)))
        goto out;
    if (CUBLAS_FAILED(cublasLtMatmulAlgoGetHeuristic(st->lt, p->desc, p->la, p->lb, p->ld, p->ld,
                                                     pref, 1, &heur, &found)))
        goto out;
    if (found == 0) {
        fprintf(stderr,
                "aebench: CUDA error at %s:%d: cuBLASLt has no algorithm for m=%d n=%d k=%d "
                "transa=%d transb=%d bias=%d types=%d/%d\n",
                __FILE__, __LINE__, m, n, k, key->transa, key->transb, key->bias, key->ab_type,
                key->cd_type);
        goto out;
    }
    p->algo = heur.algo;
    p->valid = 1;
    rc = 0;
out:
    if (pref) CUBLAS_FAILED(cublasLtMatmulPreferenceDestroy(pref));
    if (rc) plan_release(p);
    return rc;
}

/* The cached plan for key, built on first use; NULL when it cannot be built. */
static lt_plan *plan_get(cuda_stream_impl *st, const lt_plan_key *key)
{
    for (int i = 0; i < LT_PLAN_CACHE; i++)
        if (st->plans[i].valid && memcmp(&st->plans[i].key, key, sizeof *key) == 0)
            return &st->plans[i];
    lt_plan *p = &st->plans[st->next_plan];
    st->next_plan = (st->next_plan + 1) % LT_PLAN_CACHE;
    /* Safe to drop an older plan now: cublasLtMatmul does not keep descriptors after it
     * has enqueued the work. */
    if (p->valid) plan_release(p);
    return plan_build(st, p, key) == 0 ? p : NULL;
}

/* D (m,n col-major, ldc) = alpha op(A) op(B) + beta C  (+ bias[m] per row when given), C
 * laid out as D: D itself where C is NULL.  A is stored (transa ? k x m : m x k) with lda, B
 * (transb ? n x k : k x n) with ldb; A and B are of the stream's activation type, C and D of
 * cd_type (the activation type, or fp32 for the weight gradients). */
static void lt_gemm(gpt_stream *s, int transa, int transb, int m, int n, int k,
                    const void *A, int lda, const void *B, int ldb, const void *C, void *D,
                    int ldc, cudaDataType_t cd_type, const void *bias, int epi, const void *aux,
                    float alpha, float beta)
{
    if (C == NULL)
        C = D;
    cuda_stream_impl *st = cu_stream(s);
    lt_plan_key key;
    memset(&key, 0, sizeof key); /* compared with memcmp: no stray padding bytes */
    key.transa = transa;
    key.transb = transb;
    key.m = m;
    key.n = n;
    key.k = k;
    key.lda = lda;
    key.ldb = ldb;
    key.ldc = ldc;
    key.ab_type = (int)cu_act_type(s);
    key.cd_type = (int)cd_type;
    key.compute = (int)cu_compute_type(s);
    key.bias = bias != NULL;
    key.epi = epi;
    key.al_a = alignment_of(A);
    key.al_b = alignment_of(B);
    key.al_c = alignment_of(C);
    key.al_d = alignment_of(D);
    lt_plan *p = plan_get(st, &key);
    if (p == NULL) {
        st->failed = 1;
        return;
    }
    if (bias != NULL &&
        CUBLAS_FAILED(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                     &bias, sizeof bias))) {
        st->failed = 1;
        return;
    }
    if (epi != LT_EPI_NONE &&
        CUBLAS_FAILED(cublasLtMatmulDescSetAttribute(
            p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux))) {
        st->failed = 1;
        return;
    }
    if (CUBLAS_FAILED(cublasLtMatmul(st->lt, p->desc, &alpha, A, p->la, B, p->lb, &beta, C, p->ld,
                                     D, p->ld, &p->algo, st->workspace, CUDA_WORKSPACE_BYTES,
                                     st->stream)))
        st->failed = 1;
}

/* The BIAS epilogue reads the bias with vector loads: it needs a 16-byte aligned vector.
 * Otherwise: the product without bias, then this kernel adds it.
 * out (N,OC) += bias (OC) per row. */
template <typename T>
__global__ static void add_bias_kernel(T *out, const T *bias, size_t rows, int OC)
{
    const size_t total = rows * (size_t)OC;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x)
        st_f32(&out[i], ld_f32(out[i]) + ld_f32(bias[i % OC]));
}

/* out (N,OC) = inp (N,C) @ w^T (w (OC,C)) + bias (OC, may be NULL). */
void cu_matmul_forward(gpt_stream *s, void *out, const void *inp, const void *w,
                       const void *bias, int N, int C, int OC)
{
    const int fused = bias != NULL && alignment_of(bias) == 16;
    lt_gemm(s, 1, 0, OC, N, C, w, C, inp, C, NULL, out, OC, cu_act_type(s), fused ? bias : NULL,
            LT_EPI_NONE, NULL, 1.0f, 0.0f);
    if (bias != NULL && !fused) {
        const size_t total = (size_t)N * OC;
        CU_DISPATCH(s, T,
                    add_bias_kernel<T><<<grid_for(total, 256), 256, 0, cu_stream(s)->stream>>>(
                        (T *)out, (const T *)bias, (size_t)N, OC));
        OP_CHECK_LAUNCH(s);
    }
}

/* out (N,OC) = res + (inp @ w^T + bias), out aliasing neither: res as the product's C with
 * beta 1, so the epilogue adds it (one pass over out instead of the product's write and the
 * residual kernel's three).
 * With a bias the BIAS epilogue cannot read, the two ops, as the CPU backend runs them (within
 * a rounding of the fused add: bench/results/2026-11-27c-h100-tf32-wgmma measured both). */
void cu_matmul_forward_residual(gpt_stream *s, void *out, const void *inp, const void *w,
                                const void *bias, const void *res, int N, int C, int OC)
{
    if (bias != NULL && alignment_of(bias) != 16) {
        cu_matmul_forward(s, out, inp, w, bias, N, C, OC);
        cu_residual_forward(s, out, res, out, (size_t)N * OC);
        return;
    }
    lt_gemm(s, 1, 0, OC, N, C, w, C, inp, C, res, out, OC, cu_act_type(s), bias, LT_EPI_NONE, NULL,
            1.0f, 1.0f);
}

/*
 * Column sums, deterministic: out[o] += sum_n in[n][o],  in (N,OC).  Two stages, so that
 * the grid fills the GPU (OC/32 blocks alone are 64 at OC = 2048): stage 1, block (x, chunk)
 * owns 32 lanes' columns (lane x's VEC, coalesced row reads) and the chunk-th of CS_ROW_CHUNKS row
 * ranges; row y of its 32 x 32 threads walks that range with stride 32 in order, and the 32
 * partials are added in a fixed tree in shared memory into part[chunk][o].  Stage 2 adds the
 * chunks in order.  The result depends only on the shape, never on scheduling; no atomics;
 * fp32 sums whatever the input type.
 */
#define CS_ROW_CHUNKS 16

/*
 * VEC columns a thread: 16-byte loads (VEC = 8 bf16 / 4 fp32) whenever dout is 16-byte aligned
 * and OC a multiple of VEC (every layer of the model), so a warp reads 512 contiguous bytes of
 * a row instead of 64 and the grid is VEC times smaller; VEC = 1 for any other dout.  On an
 * H100 the bf16 l32 step's matmul_backward went 30.4 -> 29.3 ms and the step 118.2 -> 117.1 ms
 * against VEC = 1 everywhere (bench/results/2026-11-27e-h100-batch).  Each column's sum runs in
 * the same order at every VEC (row y: n0 + y, n0 + y + 32, ..., then the same tree over y), so
 * the partials are the same bits (test_cuda, test_column_sum_vec).  The tree is [j][y][x]: lane
 * x's VEC columns in VEC planes, so a warp's shared accesses stay conflict-free.
 */
template <typename T, int VEC>
__global__ static void column_sum_partials(float *part, const T *in, int N, int OC)
{
    typedef vec_t<T, VEC> V;
    __shared__ float acc[VEC][32][33];
    const int o = (blockIdx.x * 32 + threadIdx.x) * VEC; /* the first of this thread's VEC */
    const int per = (N + CS_ROW_CHUNKS - 1) / CS_ROW_CHUNKS;
    const int n0 = blockIdx.y * per, n1 = min(N, n0 + per);
    float sum[VEC];
#pragma unroll
    for (int j = 0; j < VEC; j++) sum[j] = 0.0f;
    if (o < OC)
        for (int n = n0 + threadIdx.y; n < n1; n += 32) {
            const V v = *(const V *)(in + (size_t)n * OC + o);
#pragma unroll
            for (int j = 0; j < VEC; j++) sum[j] += ld_f32(v.v[j]);
        }
#pragma unroll
    for (int j = 0; j < VEC; j++) acc[j][threadIdx.y][threadIdx.x] = sum[j];
    __syncthreads();
    for (int stride = 16; stride > 0; stride /= 2) {
        if (threadIdx.y < stride)
#pragma unroll
            for (int j = 0; j < VEC; j++)
                acc[j][threadIdx.y][threadIdx.x] += acc[j][threadIdx.y + stride][threadIdx.x];
        __syncthreads();
    }
    if (threadIdx.y == 0 && o < OC)
#pragma unroll
        for (int j = 0; j < VEC; j++) part[(size_t)blockIdx.y * OC + o + j] = acc[j][0][threadIdx.x];
}

__global__ static void column_sum_finish(float *out, const float *part, int OC, int overwrite)
{
    for (int o = blockIdx.x * blockDim.x + threadIdx.x; o < OC; o += gridDim.x * blockDim.x) {
        float sum = 0.0f;
        for (int k = 0; k < CS_ROW_CHUNKS; k++)
            sum += part[(size_t)k * OC + o];
        out[o] = overwrite ? sum : out[o] + sum;
    }
}

void cu_column_sum(gpt_stream *s, float *out, const void *in, int N, int OC, int overwrite)
{
    cuda_stream_impl *st = cu_stream(s);
    /* The partials live in the stream's cuBLASLt workspace: work on one stream runs in
     * issue order, so no product uses it while these two kernels do. */
    if ((size_t)CS_ROW_CHUNKS * OC * sizeof(float) > CUDA_WORKSPACE_BYTES) {
        fprintf(stderr, "aebench: column sum: OC = %d too large for the workspace\n", OC);
        st->failed = 1;
        return;
    }
    float *part = (float *)st->workspace;
    const int vec = cu_is_bf16(s) ? 8 : 4; /* 16 bytes */
    const int wide = OC % vec == 0 && alignment_of(in) == 16;
    const dim3 grid((unsigned)((OC / (wide ? vec : 1) + 31) / 32), CS_ROW_CHUNKS), block(32, 32);
    if (wide && vec == 8)
        column_sum_partials<bf16, 8><<<grid, block, 0, st->stream>>>(part, (const bf16 *)in, N, OC);
    else if (wide)
        column_sum_partials<float, 4><<<grid, block, 0, st->stream>>>(part, (const float *)in, N, OC);
    else
        CU_DISPATCH(s, T, column_sum_partials<T, 1><<<grid, block, 0, st->stream>>>(part, (const T *)in, N, OC));
    OP_CHECK_LAUNCH(s);
    column_sum_finish<<<(OC + 255) / 256, 256, 0, st->stream>>>(out, part, OC, overwrite);
    OP_CHECK_LAUNCH(s);
}

/* out (cols, N) = in[:, c0 .. c0 + cols)^T, in (N, C) fp32 row-major: 32 x 32 tiles through
 * shared memory (padded a column against bank conflicts), read along a row of in and written
 * along a row of out, each a warp's 128 contiguous bytes.  Block (32, 8): each thread moves 4
 * elements of the tile. */
__global__ static void transpose_columns(float *out, const float *in, int N, int C, int c0, int cols)
{
    __shared__ float tile[32][33];
    const int n0 = blockIdx.x * 32, k0 = blockIdx.y * 32;
#pragma unroll
    for (int j = threadIdx.y; j < 32; j += 8) {
        const int n = n0 + j, k = k0 + threadIdx.x;
        if (n < N && k < cols) tile[j][threadIdx.x] = in[(size_t)n * C + c0 + k];
    }
    __syncthreads();
#pragma unroll
    for (int j = threadIdx.y; j < 32; j += 8) {
        const int k = k0 + j, n = n0 + threadIdx.x;
        if (k < cols && n < N) out[(size_t)k * N + n] = tile[threadIdx.x][j];
    }
}

/* The stream's transposed-input scratch, at least `floats` (made, or made larger, on first
 * need: a training step's first iteration runs every shape it has, before any capture); NULL,
 * the stream failed and said why, when it does not fit. */
static float *transposed_scratch(gpt_stream *s, size_t floats)
{
    cuda_stream_impl *st = cu_stream(s);
    if (st->transposed_floats >= floats) return st->transposed;
    if (st->transposed) {
        if (CUDA_FAILED(cudaStreamSynchronize(st->stream)) || CUDA_FAILED(cudaFree(st->transposed))) {
            st->failed = CU_FAILED;
            return NULL;
        }
        st->transposed = NULL;
        st->transposed_floats = 0;
    }
    const cudaError_t e = cudaMalloc((void **)&st->transposed, floats * sizeof(float));
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        fprintf(stderr, "aebench: out of GPU memory: the TF32 weight gradients' transposed input (%zu MiB a "
                        "stream, outside --gpu-mem-limit): %s\n", (floats * sizeof(float)) >> 20, cudaGetErrorString(e));
        st->transposed = NULL;
        st->failed = e == cudaErrorMemoryAllocation ? CU_FAILED_OOM : CU_FAILED;
        return NULL;
    }
    st->transposed_floats = floats;
    return st->transposed;
}

/* dw (OC,C) += dout^T @ inp (fp32; = with beta 0): as one product on the operands as they are,
 * or, TF32, with inp transposed first, column chunk by column chunk (see the top). */
static void weight_gradient(gpt_stream *s, float *dw, const void *dout, const void *inp, int N, int C,
                            int OC, float beta)
{
    const int transpose = !cu_is_bf16(s) && cu_backend(s)->allow_tf32 && cu_backend(s)->tf32_dw_transpose;
    /* columns a chunk: all of them, or as many multiples of 64 as the scratch holds */
    const size_t most = CUDA_TRANSPOSE_BYTES / sizeof(float) / (size_t)N / 64 * 64;
    if (!transpose || most == 0) {
        lt_gemm(s, 0, 1, C, OC, N, inp, C, dout, OC, NULL, dw, C, CUDA_R_32F, NULL, LT_EPI_NONE, NULL, 1.0f,
                beta);
        return;
    }
    const int chunk = (size_t)C <= most ? C : (int)most;
    float *t = transposed_scratch(s, (size_t)chunk * N);
    if (t == NULL) return;
    cuda_stream_impl *st = cu_stream(s);
    for (int c0 = 0; c0 < C; c0 += chunk) {
        const int cols = C - c0 < chunk ? C - c0 : chunk;
        const dim3 grid((unsigned)((N + 31) / 32), (unsigned)((cols + 31) / 32)), block(32, 8);
        transpose_columns<<<grid, block, 0, st->stream>>>(t, (const float *)inp, N, C, c0, cols);
        OP_CHECK_LAUNCH(s);
        /* dw^T rows c0 .. c0 + cols (C x OC col-major, ld C) = t^T (cols x N: t is (N x cols)
         * col-major, ld N, op T) . dout (N x OC: (OC x N) col-major, ld OC, op T) */
        lt_gemm(s, 1, 1, cols, OC, N, t, N, dout, OC, NULL, dw + c0, C, CUDA_R_32F, NULL, LT_EPI_NONE, NULL,
                1.0f, beta);
    }
}

/* dinp (N,C) = dout @ w [* gelu'(pre) when pre is given] (overwrites; skipped if NULL);
 * dw (OC,C) += dout^T @ inp (fp32); dbias (OC) += column sums of dout (skipped if NULL);
 * = for both with GPT_GRAD_OVERWRITE (beta 0: the old dw is not read, and the step needs no
 * pass zeroing it).  dinp is written last (one stream runs in issue order), so that it may
 * alias inp. */
static void matmul_backward(gpt_stream *s, void *dinp, float *dw, float *dbias,
                            const void *dout, const void *inp, const void *w, const void *pre,
                            int N, int C, int OC, gpt_grad_write gw)
{
    const int overwrite = gw == GPT_GRAD_OVERWRITE;
    if (dw != NULL) weight_gradient(s, dw, dout, inp, N, C, OC, overwrite ? 0.0f : 1.0f);
    if (dbias != NULL)
        cu_column_sum(s, dbias, dout, N, OC, overwrite);
    if (dinp != NULL) {
        /* the DGELU epilogue reads pre laid out as dinp: 16-byte aligned, ld % 8 == 0 */
        const int fused = pre != NULL && cu_backend(s)->gelu_bwd_epilogue &&
                          alignment_of(pre) == 16 && C % 8 == 0;
        lt_gemm(s, 0, 0, C, N, OC, w, C, dout, OC, NULL, dinp, C, cu_act_type(s), NULL,
                fused ? LT_EPI_DGELU : LT_EPI_NONE, fused ? pre : NULL, 1.0f, 0.0f);
        if (pre != NULL && !fused)
            cu_gelu_backward(s, dinp, pre, dinp, (size_t)N * C);
    }
}

void cu_matmul_backward(gpt_stream *s, void *dinp, float *dw, float *dbias, const void *dout,
                        const void *inp, const void *w, int N, int C, int OC,
                        gpt_grad_write gw)
{
    matmul_backward(s, dinp, dw, dbias, dout, inp, w, NULL, N, C, OC, gw);
}

void cu_matmul_backward_gelu(gpt_stream *s, void *dinp, float *dw, float *dbias,
                             const void *dout, const void *inp, const void *w, const void *pre,
                             int N, int C, int OC, gpt_grad_write gw)
{
    matmul_backward(s, dinp, dw, dbias, dout, inp, w, pre, N, C, OC, gw);
}

/* pre (N,OC) = inp @ w^T + bias, out = gelu(pre): one GEMM whose epilogue applies the bias
 * and the GELU and also stores the pre-activation (GELU_AUX_BIAS; cuBLASLt's GELU is the tanh
 * form of gpt.h).  Unaligned operands take the two-pass path. */
void cu_matmul_forward_gelu(gpt_stream *s, void *out, void *pre, const void *inp, const void *w,
                            const void *bias, int N, int C, int OC)
{
    const int fused = cu_backend(s)->gelu_fwd_epilogue &&
                      (bias == NULL || alignment_of(bias) == 16) && alignment_of(pre) == 16 &&
                      OC % 8 == 0;
    if (!fused) {
        cu_matmul_forward(s, pre, inp, w, bias, N, C, OC);
        cu_gelu_forward(s, out, pre, (size_t)N * OC);
        return;
    }
    lt_gemm(s, 1, 0, OC, N, C, w, C, inp, C, NULL, out, OC, cu_act_type(s), bias, LT_EPI_GELU_AUX,
            pre, 1.0f, 0.0f);
}
