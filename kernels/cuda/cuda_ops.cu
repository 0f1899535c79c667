/*
 * cuda_ops.cu — the small ops: encoder, layernorm, GELU, residual, cross-entropy, AdamW,
 * and the squared norm used for gradient clipping.  Same formulas, in the same
 * precisions, as ../cpu/cpu_ops.c (the reference they are tested against).
 *
 * Determinism: every reduction below has a fixed order that depends only on the shapes
 * (warp shuffles and shared-memory trees, a stable sort for the encoder's backward); no
 * float atomics anywhere, so a run repeats bit for bit.
 */
#include "cuda_common.cuh"
#include <cub/device/device_radix_sort.cuh>
#include "../crossentropy_combine.h"
#include "../adamw_element.h"
#include "../checksum_element.h"

#include <math.h>
#include <stdint.h>

static __device__ inline float warp_sum(float v)
{
    for (int off = 16; off > 0; off /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

/* A grid-stride loop over [0, n). */
#define GRID_STRIDE(i, n)                                                                  \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);                \
         i += (size_t)gridDim.x * blockDim.x)

#define EW_THREADS 256 /* threads per block of the elementwise kernels */

/* Rows handled one warp each: 8 warps per block. */
#define ROW_THREADS 256
#define ROWS_PER_BLOCK (ROW_THREADS / 32)
static inline unsigned row_blocks(long long rows)
{
    return (unsigned)((rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
}

/* ---- encoder ------------------------------------------------------------------------- */

/* out (B,T,C) = wte[tokens[b,t] - lo] + wpe[t];  wte (rows,C), wpe (>=T,C); a token outside
 * [lo, lo + rows) and a NULL wpe add 0 (gpt.h's vocabulary-parallel form). */
template <typename T_>
__global__ static void encoder_forward_kernel(T_ *out, const int32_t *tokens, const T_ *wte,
                                              const T_ *wpe, int T, int C, size_t total, int lo,
                                              int rows)
{
    GRID_STRIDE(i, total) {
        const size_t n = i / C;
        const int c = (int)(i % C), t = (int)(n % T);
        const int32_t tok = tokens[n];
        const float w = tok >= lo && tok - lo < rows ? ld_f32(wte[(size_t)(tok - lo) * C + c]) : 0.0f;
        st_f32(&out[i], w + (wpe ? ld_f32(wpe[(size_t)t * C + c]) : 0.0f));
    }
}

void cu_encoder_forward(gpt_stream *s, void *out, const int32_t *tokens, const void *wte,
                        const void *wpe, int B, int T, int C, int lo, int rows)
{
    const size_t total = (size_t)B * T * C;
    CU_DISPATCH(s, E,
                encoder_forward_kernel<E><<<grid_for(total, EW_THREADS), EW_THREADS, 0,
                                            cu_stream(s)->stream>>>(
                    (E *)out, tokens, (const E *)wte, (const E *)wpe, T, C, total, lo, rows));
    OP_CHECK_LAUNCH(s);
}

/* dwte[tokens[n]] += dout[n] without atomics, in the CPU reference's order.  A token may
 * occur many times in the batch; float atomics would add its rows in whatever order the
 * threads arrive (a different rounding every run), and the CPU's ordered walk over all N
 * rows per channel has only C-way parallelism.  Instead:
 *   1. the row indices 0..N-1 are sorted by token with CUB's radix sort, which is stable,
 *      so each token's rows stay in ascending n (the scratch is the stream's workspace);
 *   2. one thread per (sorted position i, channel c) whose i starts a run of equal tokens
 *      walks that run in order: acc = dwte[tok][c]; acc += dout[n][c] ...; store.
 * The additions are those of the CPU reference, in its order, so the result depends only
 * on the inputs (and equals the CPU's bit for bit in fp32). */
template <typename T_>
__global__ static void encoder_backward_wte_kernel(float *dwte, const T_ *dout,
                                                   const int32_t *sorted_tokens,
                                                   const int32_t *sorted_rows, int N, int C,
                                                   int lo, int rows)
{
    const size_t total = (size_t)N * C;
    GRID_STRIDE(idx, total) {
        const int i = (int)(idx / C), c = (int)(idx % C);
        const int32_t tok = sorted_tokens[i];
        if ((i > 0 && sorted_tokens[i - 1] == tok) || tok < lo || tok - lo >= rows)
            continue; /* not the start of tok's run, or a row another rank holds */
        float *w = &dwte[(size_t)(tok - lo) * C + c];
        float acc = *w;
        for (int j = i; j < N && sorted_tokens[j] == tok; j++)
            acc += ld_f32(dout[(size_t)sorted_rows[j] * C + c]);
        *w = acc;
    }
}

__global__ static void iota_kernel(int32_t *out, int n)
{
    GRID_STRIDE(i, (size_t)n) out[i] = (int32_t)i;
}

/* dwpe[t] += dout[b,t] for b in order (the CPU's order), one thread per (t, c). */
template <typename T_>
__global__ static void encoder_backward_wpe_kernel(float *dwpe, const T_ *dout, int B, int T,
                                                   int C)
{
    const size_t total = (size_t)T * C;
    GRID_STRIDE(i, total) {
        float acc = dwpe[i];
        for (int b = 0; b < B; b++)
            acc += ld_f32(dout[(size_t)b * T * C + i]);
        dwpe[i] = acc;
    }
}

/* Bytes of the stream workspace the sort needs for N rows (keys and rows out, rows in,
 * CUB's temporary storage after them, each 256-byte aligned); 0 if CUB fails. */
static size_t encoder_sort_bytes(int N, size_t *cub_bytes)
{
    *cub_bytes = 0;
    if (CUDA_FAILED(cub::DeviceRadixSort::SortPairs(NULL, *cub_bytes, (const int32_t *)NULL,
                                                     (int32_t *)NULL, (const int32_t *)NULL,
                                                     (int32_t *)NULL, N)))
        return 0;
    const size_t arr = ((size_t)N * sizeof(int32_t) + 255) & ~(size_t)255;
    return 3 * arr + *cub_bytes;
}

void cu_encoder_backward(gpt_stream *s, float *dwte, float *dwpe, const void *dout,
                         const int32_t *tokens, int B, int T, int C, int lo, int vocab_rows)
{
    cuda_stream_impl *si = cu_stream(s);
    cudaStream_t st = si->stream;
    const int N = B * T;
    const size_t total = (size_t)N * C, tc = (size_t)T * C;
    size_t cub_bytes = 0;
    const size_t need = encoder_sort_bytes(N, &cub_bytes);
    if (need == 0 || need > CUDA_WORKSPACE_BYTES) {
        fprintf(stderr, "aebench: encoder backward: sorting %d tokens needs %zu bytes of the "
                        "stream workspace (%zu)\n", N, need, (size_t)CUDA_WORKSPACE_BYTES);
        si->failed = 1;
        return;
    }
    const size_t arr = ((size_t)N * sizeof(int32_t) + 255) & ~(size_t)255;
    char *ws = (char *)si->workspace;
    int32_t *sorted_tokens = (int32_t *)ws, *sorted_rows = (int32_t *)(ws + arr),
            *rows = (int32_t *)(ws + 2 * arr);
    void *cub_tmp = ws + 3 * arr;
    iota_kernel<<<grid_for((size_t)N, EW_THREADS), EW_THREADS, 0, st>>>(rows, N);
    OP_CHECK_LAUNCH(s);
    /* Token ids are < 2^31; sorting only the bits a vocabulary needs would be faster, but
     * the vocabulary size is not an argument here, and N is small. */
    if (CUDA_FAILED(cub::DeviceRadixSort::SortPairs(cub_tmp, cub_bytes, tokens, sorted_tokens,
                                                     rows, sorted_rows, N, 0, 31, st))) {
        si->failed = 1;
        return;
    }
    CU_DISPATCH(s, E,
                encoder_backward_wte_kernel<E><<<grid_for(total, EW_THREADS), EW_THREADS, 0, st>>>(
                    dwte, (const E *)dout, sorted_tokens, sorted_rows, N, C, lo, vocab_rows));
    OP_CHECK_LAUNCH(s);
    if (dwpe == NULL) return;
    CU_DISPATCH(s, E,
                encoder_backward_wpe_kernel<E><<<grid_for(tc, EW_THREADS), EW_THREADS, 0, st>>>(
                    dwpe, (const E *)dout, B, T, C));
    OP_CHECK_LAUNCH(s);
}

/* ---- elementwise, vectorised ---------------------------------------------------------------
 * The elementwise kernels move 16 bytes per access (4 floats or 8 bf16) where every pointer
 * is 16-byte aligned, and element by element otherwise and for the tail: one kernel
 * template does both, with VEC = 16 / sizeof(T) or 1. */

static inline int aligned16(const void *p)
{
    return ((uintptr_t)p & 15u) == 0;
}

/* ---- layernorm --------------------------------------------------------------------------- */

#define LN_EPS 1e-5f
/* Row chunks of the parameter-gradient reduction's first stage. */
#define LN_ROW_CHUNKS 16

/* The row kernels read 16 bytes per access (VEC = 4 floats or 8 bf16) when C is a multiple
 * of VEC and the rows are 16-byte aligned, else one element (VEC = 1): one element per lane
 * per access leaves most of each memory transaction unused (H200, N = 4096, C = 2048: fp32
 * forward 0.040 -> 0.026 ms, backward 0.098 -> 0.084 ms; bf16 backward 0.38 -> 0.048 ms). */
static inline int ln_vec(const gpt_stream *s, int C, const void *a, const void *b,
                         const void *c, const void *d)
{
    const int vec = cu_is_bf16(s) ? 8 : 4;
    return C % vec == 0 && aligned16(a) && aligned16(b) && aligned16(c) && aligned16(d) ? vec : 1;
}

/* out (N,C) = (x - mean) * rstd * w + b; mean, rstd (N).  One warp per row, fp32 sums, two
 * passes (mean, then squared deviations) as the CPU does: no cancellation.  x = inp, or
 * with RES the residual sum: res = inp + res_b is stored (rounded to T_, as a separate
 * residual op would store it) in the first pass and the later passes read it back, so the
 * residual never makes its own round trip through memory.  res may alias inp or res_b
 * (each element is read and written by the same thread). */
template <typename T_, int VEC, bool RES>
__global__ static void layernorm_forward_kernel(T_ *out, float *mean, float *rstd,
                                                const T_ *inp, const T_ *w, const T_ *b, int N,
                                                int C, T_ *res, const T_ *res_b)
{
    typedef vec_t<T_, VEC> V;
    const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= N)
        return;
    const int CV = C / VEC;
    const size_t off = (size_t)row * C;
    float m = 0.0f;
    for (int c = lane; c < CV; c += 32) {
        V xv = ((const V *)(inp + off))[c];
        if constexpr (RES) {
            const V bv = ((const V *)(res_b + off))[c];
#pragma unroll
            for (int j = 0; j < VEC; j++)
                st_f32(&xv.v[j], ld_f32(xv.v[j]) + ld_f32(bv.v[j]));
            ((V *)(res + off))[c] = xv;
        }
#pragma unroll
        for (int j = 0; j < VEC; j++)
            m += ld_f32(xv.v[j]);
    }
    const V *x = (const V *)((RES ? (const T_ *)res : inp) + off);
    m = warp_sum(m) / (float)C;
    float v = 0.0f;
    for (int c = lane; c < CV; c += 32) {
        const V xv = x[c];
#pragma unroll
        for (int j = 0; j < VEC; j++) {
            const float d = ld_f32(xv.v[j]) - m;
            v += d * d;
        }
    }
    v = warp_sum(v) / (float)C;
    const float r = 1.0f / sqrtf(v + LN_EPS);
    V *o = (V *)(out + off);
    for (int c = lane; c < CV; c += 32) {
        const V xv = x[c], wv = ((const V *)w)[c], bv = ((const V *)b)[c];
        V ov;
#pragma unroll
        for (int j = 0; j < VEC; j++)
            st_f32(&ov.v[j], (ld_f32(xv.v[j]) - m) * r * ld_f32(wv.v[j]) + ld_f32(bv.v[j]));
        o[c] = ov;
    }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = r;
    }
}

/* The same op with the row in registers, for C = 32 NPL VEC (NPL vectors per lane): x (and
 * res_b) read once, the three passes over registers; every sum in the order of the kernel
 * above (so the same bits), and no read back of the stored residual. */
template <typename T_, int VEC, bool RES, int NPL>
__global__ static void layernorm_forward_regs_kernel(T_ *out, float *mean, float *rstd,
                                                     const T_ *inp, const T_ *w, const T_ *b,
                                                     int N, int C, T_ *res, const T_ *res_b)
{
    typedef vec_t<T_, VEC> V;
    const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= N)
        return;
    const size_t off = (size_t)row * C;
    /* every load before the first store: res may alias inp or res_b, so a load after a
     * store could not be moved above it, and the row would cost NPL memory latencies */
    V xv[NPL], bv[RES ? NPL : 1];
#pragma unroll
    for (int k = 0; k < NPL; k++) {
        xv[k] = ((const V *)(inp + off))[lane + 32 * k];
        if constexpr (RES)
            bv[k] = ((const V *)(res_b + off))[lane + 32 * k];
    }
    if constexpr (RES)
#pragma unroll
        for (int k = 0; k < NPL; k++) {
#pragma unroll
            for (int j = 0; j < VEC; j++)
                st_f32(&xv[k].v[j], ld_f32(xv[k].v[j]) + ld_f32(bv[k].v[j]));
            ((V *)(res + off))[lane + 32 * k] = xv[k];
        }
    float m = 0.0f;
#pragma unroll
    for (int k = 0; k < NPL; k++)
#pragma unroll
        for (int j = 0; j < VEC; j++)
            m += ld_f32(xv[k].v[j]);
    m = warp_sum(m) / (float)C;
    float v = 0.0f;
#pragma unroll
    for (int k = 0; k < NPL; k++)
#pragma unroll
        for (int j = 0; j < VEC; j++) {
            const float d = ld_f32(xv[k].v[j]) - m;
            v += d * d;
        }
    v = warp_sum(v) / (float)C;
    const float r = 1.0f / sqrtf(v + LN_EPS);
    V *o = (V *)(out + off);
#pragma unroll
    for (int k = 0; k < NPL; k++) {
        const V wv = ((const V *)w)[lane + 32 * k], bv = ((const V *)b)[lane + 32 * k];
        V ov;
#pragma unroll
        for (int j = 0; j < VEC; j++)
            st_f32(&ov.v[j], (ld_f32(xv[k].v[j]) - m) * r * ld_f32(wv.v[j]) + ld_f32(bv.v[j]));
        o[lane + 32 * k] = ov;
    }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = r;
    }
}

/* The register kernel for C = 32 npl VEC, npl a power of two up to NPL (the first call's
 * 16); false if none fits. */
template <typename T_, int VEC, bool RES, int NPL = 16>
static bool layernorm_forward_regs(cudaStream_t st, T_ *out, float *mean, float *rstd,
                                   const T_ *inp, const T_ *w, const T_ *b, int N, int C,
                                   T_ *res, const T_ *res_b)
{
    if (C == 32 * NPL * VEC) {
        layernorm_forward_regs_kernel<T_, VEC, RES, NPL><<<row_blocks(N), ROW_THREADS, 0, st>>>(
            out, mean, rstd, inp, w, b, N, C, res, res_b);
        return true;
    }
    if constexpr (NPL > 1)
        return layernorm_forward_regs<T_, VEC, RES, NPL / 2>(st, out, mean, rstd, inp, w, b, N, C,
                                                             res, res_b);
    return false;
}

template <bool RES>
static void layernorm_forward_launch(gpt_stream *s, void *out, float *mean, float *rstd,
                                     const void *inp, const void *w, const void *b, int N,
                                     int C, void *res, const void *res_b)
{
    cudaStream_t st = cu_stream(s)->stream;
    int vec = ln_vec(s, C, out, inp, w, b);
    if (RES && ln_vec(s, C, res, res_b, out, out) == 1)
        vec = 1;
    /* fp32: the row in registers where C allows, else the three-pass kernel.  (bf16 keeps
     * the three-pass kernel: its row in registers measured 0.15 ms a step slower at l32 on an
     * H100, TF32's 0.36 faster; bench/results/2026-11-27-h100-attention/NOTES.md) */
    bool done = false;
    if (vec == 4)
        done = layernorm_forward_regs<float, 4, RES>(st, (float *)out, mean, rstd,
                                                     (const float *)inp, (const float *)w,
                                                     (const float *)b, N, C, (float *)res,
                                                     (const float *)res_b);
    if (!done) {
        if (vec == 8)
            layernorm_forward_kernel<bf16, 8, RES><<<row_blocks(N), ROW_THREADS, 0, st>>>(
                (bf16 *)out, mean, rstd, (const bf16 *)inp, (const bf16 *)w, (const bf16 *)b, N, C,
                (bf16 *)res, (const bf16 *)res_b);
        else if (vec == 4)
            layernorm_forward_kernel<float, 4, RES><<<row_blocks(N), ROW_THREADS, 0, st>>>(
                (float *)out, mean, rstd, (const float *)inp, (const float *)w, (const float *)b, N,
                C, (float *)res, (const float *)res_b);
        else
            CU_DISPATCH(s, E,
                        layernorm_forward_kernel<E, 1, RES><<<row_blocks(N), ROW_THREADS, 0, st>>>(
                            (E *)out, mean, rstd, (const E *)inp, (const E *)w, (const E *)b, N, C,
                            (E *)res, (const E *)res_b));
    }
    OP_CHECK_LAUNCH(s);
}

void cu_layernorm_forward(gpt_stream *s, void *out, float *mean, float *rstd, const void *inp,
                          const void *w, const void *b, int N, int C)
{
    if (N <= 0) return;
    layernorm_forward_launch<false>(s, out, mean, rstd, inp, w, b, N, C, NULL, NULL);
}

void cu_residual_layernorm_forward(gpt_stream *s, void *res, void *out, float *mean, float *rstd,
                                   const void *a, const void *res_b, const void *w,
                                   const void *b, int N, int C)
{
    if (N <= 0) return;
    layernorm_forward_launch<true>(s, out, mean, rstd, a, w, b, N, C, res, res_b);
}

/* dinp (N,C) += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = w*dout.
 * One warp per row. */
template <typename T_, int VEC>
__global__ static void layernorm_backward_dinp_kernel(T_ *dinp, const T_ *dout, const T_ *inp,
                                                      const T_ *w, const float *mean,
                                                      const float *rstd, int N, int C)
{
    typedef vec_t<T_, VEC> V;
    const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= N)
        return;
    const int CV = C / VEC;
    const V *x = (const V *)(inp + (size_t)row * C), *d = (const V *)(dout + (size_t)row * C);
    const V *wv = (const V *)w;
    const float m = mean[row], r = rstd[row];
    float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
    for (int c = lane; c < CV; c += 32) {
        const V xv = x[c], dv = d[c], ww = wv[c];
#pragma unroll
        for (int j = 0; j < VEC; j++) {
            const float norm = (ld_f32(xv.v[j]) - m) * r;
            const float dnorm = ld_f32(ww.v[j]) * ld_f32(dv.v[j]);
            dnorm_mean += dnorm;
            dnorm_norm_mean += dnorm * norm;
        }
    }
    dnorm_mean = warp_sum(dnorm_mean) / (float)C;
    dnorm_norm_mean = warp_sum(dnorm_norm_mean) / (float)C;
    V *di = (V *)(dinp + (size_t)row * C);
    for (int c = lane; c < CV; c += 32) {
        const V xv = x[c], dv = d[c], ww = wv[c];
        V acc = di[c];
#pragma unroll
        for (int j = 0; j < VEC; j++) {
            const float norm = (ld_f32(xv.v[j]) - m) * r;
            const float dnorm = ld_f32(ww.v[j]) * ld_f32(dv.v[j]);
            st_f32(&acc.v[j],
                   ld_f32(acc.v[j]) + (dnorm - dnorm_mean - norm * dnorm_norm_mean) * r);
        }
        di[c] = acc;
    }
}

/* The 32 x 32 threads of a column-sum block each hold one partial of two sums (sw, sb) for
 * column threadIdx.x; a fixed shared-memory tree adds the 32 rows, leaving the column totals
 * in row 0 of pw and pb (the same order on every call). */
static __device__ void column_pair_tree(float (*pw)[33], float (*pb)[33], float sw, float sb)
{
    pw[threadIdx.y][threadIdx.x] = sw;
    pb[threadIdx.y][threadIdx.x] = sb;
    __syncthreads();
    for (int stride = 16; stride > 0; stride /= 2) {
        if (threadIdx.y < stride) {
            pw[threadIdx.y][threadIdx.x] += pw[threadIdx.y + stride][threadIdx.x];
            pb[threadIdx.y][threadIdx.x] += pb[threadIdx.y + stride][threadIdx.x];
        }
        __syncthreads();
    }
}

/* dw (C) += sum_n dout * norm, db (C) += sum_n dout: column sums over N rows, deterministic
 * and in two stages, so that the grid has enough blocks to fill the GPU (C/32 blocks alone
 * are only 64 at C = 2048).  Stage 1: block (x, chunk) owns 32 channels (lane x,
 * coalesced) and the chunk-th of LN_ROW_CHUNKS row ranges; its 32 rows of threads walk
 * that range with stride 32 in order, and the 32 partials are added in a fixed
 * shared-memory tree into part[chunk][c].  Stage 2 adds the chunks in order.  No atomics:
 * the result depends only on the shape. */
template <typename T_>
__global__ static void layernorm_backward_params_kernel(float *part_w, float *part_b,
                                                        const T_ *dout, const T_ *inp,
                                                        const float *mean, const float *rstd,
                                                        int N, int C)
{
    __shared__ float pw[32][33], pb[32][33];
    const int c = blockIdx.x * 32 + threadIdx.x;
    const int per = (N + LN_ROW_CHUNKS - 1) / LN_ROW_CHUNKS;
    const int n0 = blockIdx.y * per, n1 = min(N, n0 + per);
    float sw = 0.0f, sb = 0.0f;
    if (c < C)
        for (int n = n0 + threadIdx.y; n < n1; n += 32) {
            const size_t i = (size_t)n * C + c;
            const float norm = (ld_f32(inp[i]) - mean[n]) * rstd[n];
            const float d = ld_f32(dout[i]);
            sw += d * norm;
            sb += d;
        }
    column_pair_tree(pw, pb, sw, sb);
    if (threadIdx.y == 0 && c < C) {
        part_w[(size_t)blockIdx.y * C + c] = pw[0][threadIdx.x];
        part_b[(size_t)blockIdx.y * C + c] = pb[0][threadIdx.x];
    }
}

__global__ static void layernorm_backward_params_sum(float *dw, float *db, const float *part_w,
                                                     const float *part_b, int C, int overwrite)
{
    GRID_STRIDE(c, (size_t)C) {
        float sw = 0.0f, sb = 0.0f;
        for (int k = 0; k < LN_ROW_CHUNKS; k++) {
            sw += part_w[(size_t)k * C + c];
            sb += part_b[(size_t)k * C + c];
        }
        dw[c] = overwrite ? sw : dw[c] + sw;
        db[c] = overwrite ? sb : db[c] + sb;
    }
}

/*
 * The whole backward in one pass over the rows, for the common widths: block g owns rows
 * [g*rows, (g+1)*rows) in order; thread t owns channels (k*blockDim + t)*VEC + j (k < KPT,
 * j < VEC) of every row, so w and its share of dw, db stay in registers from row to row, and
 * x and dout are read once from DRAM (the two-kernel path below reads them twice).  Per
 * row: the two row sums (warp shuffles, then the warps' partials in warp order), then dinp
 * and the dw, db contributions.  Each block writes its dw, db partials; a second kernel adds
 * the blocks' partials in a fixed order.  No atomics: the result depends only on the shape.
 */
#define LNB_MAX_THREADS 256
/* Rows a block takes.  Measured on an H100, the kernel's time in a bf16 l32 step
 * (bench/results/2026-11-27d-h100-update, 2026-11-27e-h100-batch): 4 rows 4.79 ms (four times
 * the partials to write and add), 16 rows 2.80-2.86, 32 rows 3.40 (half the blocks in flight);
 * loading 2 or 4 rows of a block at once was slower too (3.18, 4.22). */
#define LN_BACKWARD_ROWS 16

template <typename T_, int VEC, int KPT>
__global__ static void __launch_bounds__(LNB_MAX_THREADS)
    layernorm_backward_rows_kernel(T_ *dinp, float *part_w, float *part_b, const T_ *dout,
                                   const T_ *inp, const T_ *w, const float *mean,
                                   const float *rstd, int N, int C, int rows_per_block)
{
    typedef vec_t<T_, VEC> V;
    /* [row parity][sum][warp]: alternate rows use alternate halves, so one barrier per row
     * suffices (a row's writes come after every thread has passed the previous barrier,
     * hence after the reads of the row that used the same half). */
    __shared__ float red[2][2][LNB_MAX_THREADS / 32];
    const int nwarps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int r0 = blockIdx.x * rows_per_block, r1 = min(N, r0 + rows_per_block);
    float wf[KPT][VEC], acc_w[KPT][VEC], acc_b[KPT][VEC];
#pragma unroll
    for (int k = 0; k < KPT; k++) {
        const V wv = ((const V *)w)[k * blockDim.x + threadIdx.x];
#pragma unroll
        for (int j = 0; j < VEC; j++) {
            wf[k][j] = ld_f32(wv.v[j]);
            acc_w[k][j] = acc_b[k][j] = 0.0f;
        }
    }
    /* Row n + 1's x and dout are loaded while row n is reduced and written, and row n's
     * dinp before its barrier: each row costs one memory latency, not two, per block. */
    V xn[KPT], dn[KPT];
    if (r0 < r1)
#pragma unroll
        for (int k = 0; k < KPT; k++) {
            xn[k] = ((const V *)(inp + (size_t)r0 * C))[k * blockDim.x + threadIdx.x];
            dn[k] = ((const V *)(dout + (size_t)r0 * C))[k * blockDim.x + threadIdx.x];
        }
    for (int n = r0; n < r1; n++) {
        V xv[KPT], dv[KPT], acc[KPT];
        V *di = (V *)(dinp + (size_t)n * C);
#pragma unroll
        for (int k = 0; k < KPT; k++) {
            xv[k] = xn[k];
            dv[k] = dn[k];
            acc[k] = di[k * blockDim.x + threadIdx.x];
        }
        if (n + 1 < r1)
#pragma unroll
            for (int k = 0; k < KPT; k++) {
                xn[k] = ((const V *)(inp + (size_t)(n + 1) * C))[k * blockDim.x + threadIdx.x];
                dn[k] = ((const V *)(dout + (size_t)(n + 1) * C))[k * blockDim.x + threadIdx.x];
            }
        const float m = mean[n], r = rstd[n];
        float norm[KPT][VEC], dy[KPT][VEC], s1 = 0.0f, s2 = 0.0f;
#pragma unroll
        for (int k = 0; k < KPT; k++) {
#pragma unroll
            for (int j = 0; j < VEC; j++) {
                norm[k][j] = (ld_f32(xv[k].v[j]) - m) * r;
                dy[k][j] = ld_f32(dv[k].v[j]);
                const float dnorm = wf[k][j] * dy[k][j];
                s1 += dnorm;
                s2 += dnorm * norm[k][j];
            }
        }
        s1 = warp_sum(s1);
        s2 = warp_sum(s2);
        const int half = (n - r0) & 1;
        if (lane == 0) {
            red[half][0][warp] = s1;
            red[half][1][warp] = s2;
        }
        __syncthreads();
        float t1 = 0.0f, t2 = 0.0f;
        for (int i = 0; i < nwarps; i++) {
            t1 += red[half][0][i];
            t2 += red[half][1][i];
        }
        const float dnorm_mean = t1 / (float)C, dnorm_norm_mean = t2 / (float)C;
#pragma unroll
        for (int k = 0; k < KPT; k++) {
#pragma unroll
            for (int j = 0; j < VEC; j++) {
                const float dnorm = wf[k][j] * dy[k][j];
                st_f32(&acc[k].v[j], ld_f32(acc[k].v[j]) +
                                         (dnorm - dnorm_mean - norm[k][j] * dnorm_norm_mean) * r);
                acc_w[k][j] += dy[k][j] * norm[k][j];
                acc_b[k][j] += dy[k][j];
            }
            di[k * blockDim.x + threadIdx.x] = acc[k];
        }
    }
#pragma unroll
    for (int k = 0; k < KPT; k++)
#pragma unroll
        for (int j = 0; j < VEC; j++) {
            const size_t c = (size_t)(k * blockDim.x + threadIdx.x) * VEC + j;
            part_w[(size_t)blockIdx.x * C + c] = acc_w[k][j];
            part_b[(size_t)blockIdx.x * C + c] = acc_b[k][j];
        }
}

/* dw (C) += sum_g part_w[g], db likewise: block x owns 32 channels; its 32 rows of threads
 * take the partials g = y, y + 32, ... in order, then a fixed shared-memory tree. */
__global__ static void layernorm_backward_rows_finish(float *dw, float *db, const float *part_w,
                                                      const float *part_b, int G, int C,
                                                      int overwrite)
{
    __shared__ float pw[32][33], pb[32][33];
    const int c = blockIdx.x * 32 + threadIdx.x;
    float sw = 0.0f, sb = 0.0f;
    if (c < C)
        for (int g = threadIdx.y; g < G; g += 32) {
            sw += part_w[(size_t)g * C + c];
            sb += part_b[(size_t)g * C + c];
        }
    column_pair_tree(pw, pb, sw, sb);
    if (threadIdx.y == 0 && c < C) {
        dw[c] = overwrite ? pw[0][threadIdx.x] : dw[c] + pw[0][threadIdx.x];
        db[c] = overwrite ? pb[0][threadIdx.x] : db[c] + pb[0][threadIdx.x];
    }
}

template <typename E, int VEC, int KPT>
static void layernorm_backward_rows(gpt_stream *s, void *dinp, float *dw, float *db,
                                    const void *dout, const void *inp, const void *w,
                                    const float *mean, const float *rstd, int N, int C,
                                    int overwrite)
{
    cuda_stream_impl *cs = cu_stream(s);
    const int threads = C / VEC / KPT;
    /* Enough rows per block that the partials (two floats per channel per block) fit the
     * stream's workspace; nothing else on this stream uses it until the finish has run. */
    const size_t max_blocks = CUDA_WORKSPACE_BYTES / (2 * (size_t)C * sizeof(float));
    int rows = LN_BACKWARD_ROWS; /* (more when the partials would not fit) */
    if ((size_t)(N + rows - 1) / rows > max_blocks)
        rows = (int)((N + max_blocks - 1) / max_blocks);
    const int G = (N + rows - 1) / rows;
    float *part_w = (float *)cs->workspace, *part_b = part_w + (size_t)G * C;
    layernorm_backward_rows_kernel<E, VEC, KPT><<<G, threads, 0, cs->stream>>>(
        (E *)dinp, part_w, part_b, (const E *)dout, (const E *)inp, (const E *)w, mean, rstd, N,
        C, rows);
    OP_CHECK_LAUNCH(s);
    layernorm_backward_rows_finish<<<(C + 31) / 32, dim3(32, 32), 0, cs->stream>>>(
        dw, db, part_w, part_b, G, C, overwrite);
    OP_CHECK_LAUNCH(s);
}

/* The instance for a KPT chosen at run time (ln_rows_kpt). */
template <typename E, int VEC>
static void layernorm_backward_rows_kpt(gpt_stream *s, int kpt, void *dinp, float *dw, float *db,
                                        const void *dout, const void *inp, const void *w,
                                        const float *mean, const float *rstd, int N, int C,
                                        int overwrite)
{
    if (kpt == 1)
        layernorm_backward_rows<E, VEC, 1>(s, dinp, dw, db, dout, inp, w, mean, rstd, N, C,
                                         overwrite);
    else if (kpt == 2)
        layernorm_backward_rows<E, VEC, 2>(s, dinp, dw, db, dout, inp, w, mean, rstd, N, C,
                                         overwrite);
    else if (kpt == 4)
        layernorm_backward_rows<E, VEC, 4>(s, dinp, dw, db, dout, inp, w, mean, rstd, N, C,
                                         overwrite);
    else
        layernorm_backward_rows<E, VEC, 8>(s, dinp, dw, db, dout, inp, w, mean, rstd, N, C,
                                         overwrite);
}

/* The fused path's threads per row, KPT: the fewest vectors per thread that give whole
 * warps and at most LNB_MAX_THREADS threads; 0 when no KPT <= 8 does. */
static int ln_rows_kpt(int C, int vec)
{
    if (vec == 1 || C % vec != 0) return 0;
    const int nv = C / vec;
    for (int kpt = 1; kpt <= 8; kpt *= 2)
        if (nv % kpt == 0 && (nv / kpt) % 32 == 0 && nv / kpt <= LNB_MAX_THREADS) return kpt;
    return 0;
}

void cu_layernorm_backward(gpt_stream *s, void *dinp, float *dw, float *db, const void *dout,
                           const void *inp, const void *w, const float *mean,
                           const float *rstd, int N, int C, gpt_grad_write gw)
{
    const int overwrite = gw == GPT_GRAD_OVERWRITE;
    cuda_stream_impl *cs = cu_stream(s);
    cudaStream_t st = cs->stream;
    const int vec = ln_vec(s, C, dinp, dout, inp, w);
    if (N <= 0) { /* no rows: the sums are 0 */
        if (overwrite) {
            OP_CHECK_CUDA(s, cudaMemsetAsync(dw, 0, (size_t)C * sizeof(float), st));
            OP_CHECK_CUDA(s, cudaMemsetAsync(db, 0, (size_t)C * sizeof(float), st));
        }
        return;
    }
    const int kpt = vec == 1 ? 0 : ln_rows_kpt(C, vec);
    if (kpt != 0) {
        if (vec == 8)
            layernorm_backward_rows_kpt<bf16, 8>(s, kpt, dinp, dw, db, dout, inp, w, mean, rstd,
                                                 N, C, overwrite);
        else
            layernorm_backward_rows_kpt<float, 4>(s, kpt, dinp, dw, db, dout, inp, w, mean, rstd,
                                                  N, C, overwrite);
        return;
    }
    /* other widths: two kernels */
    if (vec == 8)
        layernorm_backward_dinp_kernel<bf16, 8><<<row_blocks(N), ROW_THREADS, 0, st>>>(
            (bf16 *)dinp, (const bf16 *)dout, (const bf16 *)inp, (const bf16 *)w, mean, rstd, N,
            C);
    else if (vec == 4)
        layernorm_backward_dinp_kernel<float, 4><<<row_blocks(N), ROW_THREADS, 0, st>>>(
            (float *)dinp, (const float *)dout, (const float *)inp, (const float *)w, mean, rstd,
            N, C);
    else
        CU_DISPATCH(s, E,
                    layernorm_backward_dinp_kernel<E, 1><<<row_blocks(N), ROW_THREADS, 0, st>>>(
                        (E *)dinp, (const E *)dout, (const E *)inp, (const E *)w, mean, rstd, N,
                        C));
    OP_CHECK_LAUNCH(s);
    /* The partials live in the stream's cuBLAS workspace: nothing else on this stream uses
     * it between these two launches (a stream runs in issue order). */
    if ((size_t)2 * LN_ROW_CHUNKS * C * sizeof(float) > CUDA_WORKSPACE_BYTES) {
        fprintf(stderr, "aebench: layernorm_backward: C = %d too large for the workspace\n", C);
        cs->failed = 1;
        return;
    }
    float *part_w = (float *)cs->workspace, *part_b = part_w + (size_t)LN_ROW_CHUNKS * C;
    CU_DISPATCH(s, E,
                layernorm_backward_params_kernel<E>
                <<<dim3((C + 31) / 32, LN_ROW_CHUNKS), dim3(32, 32), 0, st>>>(
                    part_w, part_b, (const E *)dout, (const E *)inp, mean, rstd, N, C));
    OP_CHECK_LAUNCH(s);
    layernorm_backward_params_sum<<<grid_for((size_t)C, EW_THREADS), EW_THREADS, 0, st>>>(
        dw, db, part_w, part_b, C, overwrite);
    OP_CHECK_LAUNCH(s);
}

/* ---- GELU (tanh form) ------------------------------------------------------------------- */

#define GELU_K 0.044715f
#define GELU_SQRT_2_OVER_PI 0.7978845608028654f

static __device__ __forceinline__ float gelu_f(float x)
{
    const float u = GELU_SQRT_2_OVER_PI * (x + GELU_K * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
}

static __device__ __forceinline__ float gelu_grad_f(float x)
{
    const float u = GELU_SQRT_2_OVER_PI * (x + GELU_K * x * x * x);
    const float th = tanhf(u);
    const float sech2 = 1.0f - th * th; /* no cosh: it overflows for large |u| */
    return 0.5f * (1.0f + th) +
           0.5f * x * sech2 * GELU_SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_K * x * x);
}

/* Elementwise kernels over nv = n / VEC vectors (the caller does the tail with VEC = 1).
 * Aliasing (out == inp, dinp == dout, out == a or b) is allowed: each element is read and
 * then written by the same thread. */
template <typename T_, int VEC>
__global__ static void gelu_forward_kernel(T_ *out, const T_ *inp, size_t nv)
{
    typedef vec_t<T_, VEC> V;
    GRID_STRIDE(i, nv) {
        const V x = ((const V *)inp)[i];
        V o;
#pragma unroll
        for (int j = 0; j < VEC; j++)
            st_f32(&o.v[j], gelu_f(ld_f32(x.v[j])));
        ((V *)out)[i] = o;
    }
}

template <typename T_, int VEC>
__global__ static void gelu_backward_kernel(T_ *dinp, const T_ *inp, const T_ *dout, size_t nv)
{
    typedef vec_t<T_, VEC> V;
    GRID_STRIDE(i, nv) {
        const V x = ((const V *)inp)[i], d = ((const V *)dout)[i];
        V o;
#pragma unroll
        for (int j = 0; j < VEC; j++)
            st_f32(&o.v[j], gelu_grad_f(ld_f32(x.v[j])) * ld_f32(d.v[j]));
        ((V *)dinp)[i] = o;
    }
}

template <typename T_, int VEC>
__global__ static void residual_forward_kernel(T_ *out, const T_ *a, const T_ *b, size_t nv)
{
    typedef vec_t<T_, VEC> V;
    GRID_STRIDE(i, nv) {
        const V x = ((const V *)a)[i], y = ((const V *)b)[i];
        V o;
#pragma unroll
        for (int j = 0; j < VEC; j++)
            st_f32(&o.v[j], ld_f32(x.v[j]) + ld_f32(y.v[j]));
        ((V *)out)[i] = o;
    }
}

/* da += dout, db += dout */
template <typename T_, int VEC>
__global__ static void residual_backward_kernel(T_ *da, T_ *db, const T_ *dout, size_t nv)
{
    typedef vec_t<T_, VEC> V;
    GRID_STRIDE(i, nv) {
        const V d = ((const V *)dout)[i];
        V x = ((V *)da)[i], y = ((V *)db)[i];
#pragma unroll
        for (int j = 0; j < VEC; j++) {
            st_f32(&x.v[j], ld_f32(x.v[j]) + ld_f32(d.v[j]));
            st_f32(&y.v[j], ld_f32(y.v[j]) + ld_f32(d.v[j]));
        }
        ((V *)da)[i] = x;
        ((V *)db)[i] = y;
    }
}

/* Launches KERNEL<E, VEC> over the vector body and KERNEL<E, 1> over the tail, for element
 * type E.  ALIGNED: whether every pointer argument is 16-byte aligned; then the pointer
 * arguments, advanced by `off` elements (a variable of the launch). */
#define EW_LAUNCH_AS(s, E, KERNEL, n, ALIGNED, ...)                                         \
    do {                                                                                    \
        cudaStream_t st_ = cu_stream(s)->stream;                                            \
        constexpr int VEC = 16 / (int)sizeof(E);                                            \
        const size_t nv = (ALIGNED) ? (n) / VEC : 0, done = nv * VEC;                       \
        if (nv > 0) {                                                                       \
            const size_t off = 0;                                                           \
            KERNEL<E, VEC><<<grid_for(nv, EW_THREADS), EW_THREADS, 0, st_>>>(__VA_ARGS__, nv); \
            OP_CHECK_LAUNCH(s);                                                             \
        }                                                                                   \
        if ((n) > done) {                                                                   \
            const size_t off = done;                                                        \
            KERNEL<E, 1><<<grid_for((n) - done, EW_THREADS), EW_THREADS, 0, st_>>>(         \
                __VA_ARGS__, (n) - done);                                                   \
            OP_CHECK_LAUNCH(s);                                                             \
        }                                                                                   \
    } while (0)
/* The same in the stream's activation type (E: float or bf16). */
#define EW_LAUNCH(s, KERNEL, n, ALIGNED, ARGS) \
    CU_DISPATCH(s, E, EW_LAUNCH_AS(s, E, KERNEL, n, ALIGNED, ARGS))

void cu_gelu_forward(gpt_stream *s, void *out, const void *inp, size_t n)
{
#define ARGS ((E *)out) + off, ((const E *)inp) + off
    EW_LAUNCH(s, gelu_forward_kernel, n, aligned16(out) && aligned16(inp), ARGS);
#undef ARGS
}

void cu_gelu_backward(gpt_stream *s, void *dinp, const void *inp, const void *dout, size_t n)
{
#define ARGS ((E *)dinp) + off, ((const E *)inp) + off, ((const E *)dout) + off
    EW_LAUNCH(s, gelu_backward_kernel, n, aligned16(dinp) && aligned16(inp) && aligned16(dout),
              ARGS);
#undef ARGS
}

/* ---- residual ----------------------------------------------------------------------------- */

void cu_residual_forward(gpt_stream *s, void *out, const void *a, const void *b, size_t n)
{
#define ARGS ((E *)out) + off, ((const E *)a) + off, ((const E *)b) + off
    EW_LAUNCH(s, residual_forward_kernel, n, aligned16(out) && aligned16(a) && aligned16(b),
              ARGS);
#undef ARGS
}

/* fp32 whatever the activation type: the residual kernel instantiated for float */
void cu_add_f32(gpt_stream *s, float *out, const float *a, const float *b, size_t n)
{
#define ARGS out + off, a + off, b + off
    EW_LAUNCH_AS(s, float, residual_forward_kernel, n, aligned16(out) && aligned16(a) && aligned16(b), ARGS);
#undef ARGS
}

void cu_residual_backward(gpt_stream *s, void *da, void *db, const void *dout, size_t n)
{
#define ARGS ((E *)da) + off, ((E *)db) + off, ((const E *)dout) + off
    EW_LAUNCH(s, residual_backward_kernel, n, aligned16(da) && aligned16(db) && aligned16(dout),
              ARGS);
#undef ARGS
}

/* ---- fp32 master weights to the working copy ------------------------------------------------ */

template <int VEC>
__global__ static void params_to_act_kernel(bf16 *dst, const float *src, size_t nv)
{
    typedef vec_t<float, VEC> VF;
    typedef vec_t<bf16, VEC> VB;
    GRID_STRIDE(i, nv) {
        const VF f = ((const VF *)src)[i];
        VB o;
#pragma unroll
        for (int j = 0; j < VEC; j++)
            st_f32(&o.v[j], f.v[j]);
        ((VB *)dst)[i] = o;
    }
}

void cu_params_to_act(gpt_stream *s, void *dst, const float *src, size_t n)
{
    if (n == 0)
        return;
    if (!cu_is_bf16(s)) {
        if (dst != (const void *)src)
            OP_CHECK_CUDA(s, cudaMemcpyAsync(dst, src, n * sizeof(float),
                                             cudaMemcpyDeviceToDevice, cu_stream(s)->stream));
        return;
    }
    cudaStream_t st = cu_stream(s)->stream;
    /* 16-byte reads, 8-byte writes where both pointers allow; the tail element-wise. */
    const size_t nv = aligned16(src) && ((uintptr_t)dst & 7u) == 0 ? n / 4 : 0, done = nv * 4;
    if (nv > 0) {
        params_to_act_kernel<4><<<grid_for(nv, EW_THREADS), EW_THREADS, 0, st>>>((bf16 *)dst, src,
                                                                               nv);
        OP_CHECK_LAUNCH(s);
    }
    if (n > done) {
        params_to_act_kernel<1><<<grid_for(n - done, EW_THREADS), EW_THREADS, 0, st>>>(
            (bf16 *)dst + done, src + done, n - done);
        OP_CHECK_LAUNCH(s);
    }
}

/* The working type back to fp32 (exact: a bf16 value widens to the same number). */
__global__ static void act_to_f32_kernel(float *dst, const bf16 *src, size_t n)
{
    GRID_STRIDE(i, n) dst[i] = ld_f32(src[i]);
}

void cu_act_to_f32(gpt_stream *s, float *dst, const void *src, size_t n)
{
    if (n == 0)
        return;
    if (!cu_is_bf16(s)) {
        if ((const void *)dst != src)
            OP_CHECK_CUDA(s, cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice,
                                             cu_stream(s)->stream));
        return;
    }
    act_to_f32_kernel<<<grid_for(n, EW_THREADS), EW_THREADS, 0, cu_stream(s)->stream>>>(dst, (const bf16 *)src, n);
    OP_CHECK_LAUNCH(s);
}

/* ---- cross-entropy ------------------------------------------------------------------------- */

/*
 * Forward and backward in one kernel, one block per row of logits (rows, Vp):
 *   1. stage: the row is copied into shared memory with cp.async (all of a thread's 16-byte
 *      loads in flight at once), when it fits; otherwise the passes below read it from
 *      global memory (a larger vocabulary: two reads instead of one);
 *   2. the max of the first V logits, a block reduction;
 *   3. sum_v exp(x_v - max) in double, as the CPU does (50k terms would lose ~1e-5 in
 *      float), a block reduction in a fixed order: the result does not vary run to run;
 *   4. the loss log(sum) - (x_target - max), then the row is overwritten by its gradient
 *      dloss * (softmax - onehot), 0 in the padding.
 * The logits are read from DRAM once and written once: the op is bound by those two
 * streams.  VEC elements move per access: 16 bytes when the rows allow it, else 1.
 */
#define CE_THREADS 512
#define CE_WARPS (CE_THREADS / 32)

/* VEC consecutive elements of a row as floats, and back. */
template <typename T_, int VEC>
static __device__ __forceinline__ void ce_load(float (&x)[VEC], const T_ *p)
{
    if constexpr (VEC == 1) {
        x[0] = ld_f32(*p);
    } else {
        static_assert(VEC * sizeof(T_) == 16, "vector accesses are 16 bytes");
        __align__(16) T_ e[VEC];
        *reinterpret_cast<uint4 *>(e) = *reinterpret_cast<const uint4 *>(p);
#pragma unroll
        for (int k = 0; k < VEC; k++)
            x[k] = ld_f32(e[k]);
    }
}
template <typename T_, int VEC>
static __device__ __forceinline__ void ce_store(T_ *p, const float (&x)[VEC])
{
    if constexpr (VEC == 1) {
        st_f32(p, x[0]);
    } else {
        __align__(16) T_ e[VEC];
#pragma unroll
        for (int k = 0; k < VEC; k++)
            st_f32(&e[k], x[k]);
        *reinterpret_cast<uint4 *>(p) = *reinterpret_cast<const uint4 *>(e);
    }
}

/* Block-wide max and double sum: warps shuffle, then warp 0 folds the warps' partials in
 * warp order.  Every thread gets the result; the trailing barrier also orders the scratch
 * for the next call. */
static __device__ float ce_block_max(float v, float *scratch)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
    __syncthreads();
    float r = scratch[0];
    for (int w = 1; w < CE_WARPS; w++)
        r = fmaxf(r, scratch[w]);
    __syncthreads();
    return r;
}
static __device__ double ce_block_sum(double v, double *scratch)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
    __syncthreads();
    double r = 0.0;
    for (int w = 0; w < CE_WARPS; w++)
        r += scratch[w];
    __syncthreads();
    return r;
}

template <typename T_, int VEC, bool STAGED>
__global__ static void __launch_bounds__(CE_THREADS)
    crossentropy_kernel(float *losses, T_ *logits, const int32_t *targets, float dloss, int V,
                        int Vp)
{
    extern __shared__ __align__(16) unsigned char ce_smem[];
    __shared__ float red_max[CE_WARPS];
    __shared__ double red_sum[CE_WARPS];
    const int n = blockIdx.x, nvec = Vp / VEC;
    T_ *row = logits + (size_t)n * Vp;
    const T_ *src = row;
    if constexpr (STAGED) {
        T_ *staged = reinterpret_cast<T_ *>(ce_smem);
        for (int i = threadIdx.x; i < nvec; i += CE_THREADS) {
            const unsigned dst = (unsigned)__cvta_generic_to_shared(staged + (size_t)i * VEC);
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst),
                         "l"(row + (size_t)i * VEC));
        }
        asm volatile("cp.async.wait_all;\n" ::: "memory");
        __syncthreads();
        src = staged;
    }

    float m = -INFINITY;
    for (int i = threadIdx.x; i < nvec; i += CE_THREADS) {
        float x[VEC];
        ce_load<T_, VEC>(x, src + (size_t)i * VEC);
#pragma unroll
        for (int k = 0; k < VEC; k++)
            if (i * VEC + k < V) m = fmaxf(m, x[k]);
    }
    const float maxval = ce_block_max(m, red_max);

    double sum = 0.0;
    for (int i = threadIdx.x; i < nvec; i += CE_THREADS) {
        float x[VEC];
        ce_load<T_, VEC>(x, src + (size_t)i * VEC);
#pragma unroll
        for (int k = 0; k < VEC; k++)
            if (i * VEC + k < V) sum += (double)expf(x[k] - maxval);
    }
    const int target = targets[n];
    /* Read before the reduction's barriers: after them the row is being overwritten. */
    const float x_target = threadIdx.x == 0 ? ld_f32(src[target]) : 0.0f;
    const double total = ce_block_sum(sum, red_sum);
    if (threadIdx.x == 0) losses[n] = (float)(log(total) - (double)(x_target - maxval));

    const float inv_sum = (float)(1.0 / total);
    for (int i = threadIdx.x; i < nvec; i += CE_THREADS) {
        float x[VEC];
        ce_load<T_, VEC>(x, src + (size_t)i * VEC);
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            const int v = i * VEC + k;
            x[k] = v < V ? dloss * (expf(x[k] - maxval) * inv_sum - (v == target ? 1.0f : 0.0f))
                         : 0.0f;
        }
        ce_store<T_, VEC>(row + (size_t)i * VEC, x);
    }
}

template <typename E, int VEC, bool STAGED>
static void crossentropy_launch(gpt_stream *s, float *losses, E *logits, const int32_t *targets,
                                float dloss, int N, int V, int Vp, size_t smem)
{
    if (smem > 48 * 1024)
        OP_CHECK_CUDA(s, cudaFuncSetAttribute(crossentropy_kernel<E, VEC, STAGED>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              (int)smem));
    crossentropy_kernel<E, VEC, STAGED><<<N, CE_THREADS, smem, cu_stream(s)->stream>>>(
        losses, logits, targets, dloss, V, Vp);
    OP_CHECK_LAUNCH(s);
}

void cu_crossentropy_forward_backward(gpt_stream *s, float *losses, void *logits,
                                      const int32_t *targets, float dloss, int N, int V, int Vp)
{
    if (N <= 0) return;
    CU_DISPATCH(s, E, {
        constexpr int VEC = 16 / sizeof(E);
        const size_t row_bytes = (size_t)Vp * sizeof(E);
        /* Rows start 16-byte aligned only if the buffer does and a row is whole vectors. */
        const bool vectors = ((uintptr_t)logits % 16) == 0 && row_bytes % 16 == 0;
        /* The static reductions' scratch shares the block's shared memory with the row. */
        const size_t room = (size_t)cu_backend(s)->smem_per_block_optin - 1024;
        if (vectors && row_bytes <= room)
            crossentropy_launch<E, VEC, true>(s, losses, (E *)logits, targets, dloss, N, V, Vp,
                                              row_bytes);
        else if (vectors)
            crossentropy_launch<E, VEC, false>(s, losses, (E *)logits, targets, dloss, N, V, Vp, 0);
        else
            crossentropy_launch<E, 1, false>(s, losses, (E *)logits, targets, dloss, N, V, Vp, 0);
    });
}

/* The vocabulary-parallel pair (gpt.h), one block per row, element by element (the head's
 * GEMMs dominate it; the row of a rank is 1/T of the vocabulary). */
template <typename T_>
__global__ static void __launch_bounds__(CE_THREADS)
    crossentropy_stats_kernel(float *stats, const T_ *logits, const int32_t *targets, int V, int Vp, int lo)
{
    __shared__ float red_max[CE_WARPS];
    __shared__ double red_sum[CE_WARPS];
    const int n = blockIdx.x;
    const T_ *row = logits + (size_t)n * Vp;
    float m = -INFINITY;
    for (int v = threadIdx.x; v < V; v += CE_THREADS) m = fmaxf(m, ld_f32(row[v]));
    const float maxval = ce_block_max(m, red_max);
    double sum = 0.0;
    for (int v = threadIdx.x; v < V; v += CE_THREADS) sum += (double)expf(ld_f32(row[v]) - maxval);
    const double total = ce_block_sum(sum, red_sum);
    if (threadIdx.x == 0) {
        const int local = targets[n] - lo;
        stats[3 * (size_t)n] = maxval;
        stats[3 * (size_t)n + 1] = (float)total;
        stats[3 * (size_t)n + 2] = local >= 0 && local < V ? ld_f32(row[local]) : 0.0f;
    }
}

template <typename T_>
__global__ static void __launch_bounds__(CE_THREADS)
    crossentropy_parallel_kernel(float *losses, T_ *logits, const int32_t *targets, const float *stats, int parts,
                                 float dloss, int N, int V, int Vp, int lo)
{
    __shared__ float row_max, row_inv_sum;
    const int n = blockIdx.x;
    if (threadIdx.x == 0) {
        /* every rank combines the same stats in rank order: the same numbers everywhere */
        losses[n] = gpt_ce_combine_row(stats, parts, N, n, &row_max, &row_inv_sum);
    }
    __syncthreads();
    T_ *row = logits + (size_t)n * Vp;
    const int local = targets[n] - lo;
    for (int v = threadIdx.x; v < Vp; v += CE_THREADS) {
        const float g = v < V ? dloss * (expf(ld_f32(row[v]) - row_max) * row_inv_sum - (v == local ? 1.0f : 0.0f))
                              : 0.0f;
        st_f32(&row[v], g);
    }
}

void cu_crossentropy_stats(gpt_stream *s, float *stats, const void *logits, const int32_t *targets, int N, int V,
                           int Vp, int lo)
{
    if (N <= 0) return;
    CU_DISPATCH(s, E,
                crossentropy_stats_kernel<E><<<N, CE_THREADS, 0, cu_stream(s)->stream>>>(
                    stats, (const E *)logits, targets, V, Vp, lo));
    OP_CHECK_LAUNCH(s);
}

void cu_crossentropy_parallel(gpt_stream *s, float *losses, void *logits, const int32_t *targets, const float *stats,
                              int parts, float dloss, int N, int V, int Vp, int lo)
{
    if (N <= 0) return;
    CU_DISPATCH(s, E,
                crossentropy_parallel_kernel<E><<<N, CE_THREADS, 0, cu_stream(s)->stream>>>(
                    losses, (E *)logits, targets, stats, parts, dloss, N, V, Vp, lo));
    OP_CHECK_LAUNCH(s);
}

/* ---- AdamW ------------------------------------------------------------------------------------ */

/* The formula of gpt.h, elementwise; the bias corrections come from the host, computed
 * exactly as the CPU backend computes them.  VEC = 4: the four arrays move as float4 (28
 * bytes per parameter at HBM speed; scalar accesses reached ~70% of it), for the n / 4
 * leading vectors; VEC = 1 for the tail or unaligned arrays.  act (bf16, may be NULL)
 * receives the updated params rounded as params_to_act rounds them: 2 more bytes per
 * parameter here instead of a separate 6-byte pass.  adamw_vector: vector i of it, loaded,
 * updated and stored, the stored param, m and v into *p, *mm, *vv (what adamw_sums_kernel
 * checksums as well). */
template <int VEC>
static __device__ __forceinline__ void adamw_vector(float *param, bf16 *act, const float *grad, float *m,
                                                    float *v, size_t i, float lr, float beta1, float beta2,
                                                    float eps, float weight_decay, float bias_corr1,
                                                    float bias_corr2, float grad_scale, vec_t<float, VEC> *p,
                                                    vec_t<float, VEC> *mm, vec_t<float, VEC> *vv)
{
    typedef vec_t<float, VEC> V;
    typedef vec_t<bf16, VEC> VB;
    *p = ((V *)param)[i], *mm = ((V *)m)[i], *vv = ((V *)v)[i];
    const V g = ((const V *)grad)[i];
#pragma unroll
    for (int j = 0; j < VEC; j++)
        gpt_adamw_element(&p->v[j], g.v[j], &mm->v[j], &vv->v[j], lr, beta1, beta2, eps, weight_decay,
                          bias_corr1, bias_corr2, grad_scale);
    ((V *)param)[i] = *p;
    ((V *)m)[i] = *mm;
    ((V *)v)[i] = *vv;
    if (act != NULL) {
        VB o;
#pragma unroll
        for (int j = 0; j < VEC; j++)
            st_f32(&o.v[j], p->v[j]);
        ((VB *)act)[i] = o;
    }
}

template <int VEC>
__global__ static void adamw_kernel(float *param, bf16 *act, const float *grad, float *m,
                                    float *v, size_t n, float lr, float beta1, float beta2,
                                    float eps, float weight_decay, float bias_corr1,
                                    float bias_corr2, float grad_scale)
{
    vec_t<float, VEC> p, mm, vv;
    GRID_STRIDE(i, n / VEC)
        adamw_vector<VEC>(param, act, grad, m, v, i, lr, beta1, beta2, eps, weight_decay, bias_corr1, bias_corr2,
                          grad_scale, &p, &mm, &vv);
}

static void adamw_sums_launch(gpt_stream *s, int vec, float *param, bf16 *act, const float *grad,
                              float *m, float *v, size_t n, float lr, float beta1, float beta2,
                              float eps, float weight_decay, float bias_corr1, float bias_corr2,
                              float grad_scale, const gpt_checksum_acc *acc, size_t at);

void cu_adamw_update(gpt_stream *s, float *param, void *param_act, const float *grad, float *m,
                     float *v, size_t n, float lr, float beta1, float beta2, float eps,
                     float weight_decay, int t, float grad_scale, const gpt_checksum_acc *acc)
{
    if (n == 0)
        return;
    const float bias_corr1 = 1.0f - powf(beta1, (float)t);
    const float bias_corr2 = 1.0f - powf(beta2, (float)t);
    cudaStream_t st = cu_stream(s)->stream;
    /* bf16: the working copy is written by the kernel; fp32: it is a copy, made after */
    bf16 *act = cu_is_bf16(s) ? (bf16 *)param_act : NULL;
    size_t head = 0; /* elements done as float4 (and 8-byte bf16 vectors) */
    if (aligned16(param) && aligned16(grad) && aligned16(m) && aligned16(v) &&
        ((uintptr_t)act & 7u) == 0 && n >= 4) {
        head = n / 4 * 4;
        if (acc) {
            adamw_sums_launch(s, 4, param, act, grad, m, v, head, lr, beta1, beta2, eps, weight_decay,
                              bias_corr1, bias_corr2, grad_scale, acc, 0);
        } else {
            adamw_kernel<4><<<grid_for(head / 4, EW_THREADS), EW_THREADS, 0, st>>>(
                param, act, grad, m, v, head, lr, beta1, beta2, eps, weight_decay, bias_corr1,
                bias_corr2, grad_scale);
            OP_CHECK_LAUNCH(s);
        }
    }
    if (head < n) {
        if (acc) {
            adamw_sums_launch(s, 1, param + head, act ? act + head : NULL, grad + head, m + head, v + head,
                              n - head, lr, beta1, beta2, eps, weight_decay, bias_corr1, bias_corr2,
                              grad_scale, acc, head);
        } else {
            adamw_kernel<1><<<grid_for(n - head, EW_THREADS), EW_THREADS, 0, st>>>(
                param + head, act ? act + head : NULL, grad + head, m + head, v + head, n - head, lr,
                beta1, beta2, eps, weight_decay, bias_corr1, bias_corr2, grad_scale);
            OP_CHECK_LAUNCH(s);
        }
    }
    if (!cu_is_bf16(s) && param_act != NULL && param_act != (void *)param)
        OP_CHECK_CUDA(s, cudaMemcpyAsync(param_act, param, n * sizeof(float),
                                         cudaMemcpyDeviceToDevice, st));
}

/* ---- squared L2 norm ---------------------------------------------------------------------------- */

/* Sum of sh[0..blockDim.x) (a power of two) by a fixed pairwise tree: the same order on
 * every call.  Every thread of the block must call it; all get the sum. */
__device__ static double block_tree_sum(double *sh)
{
    __syncthreads();
    for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride)
            sh[threadIdx.x] += sh[threadIdx.x + stride];
        __syncthreads();
    }
    return sh[0];
}

/* Stage 1: NORM_BLOCKS blocks (a fixed grid: the order depends only on n); each thread
 * sums x^2 over its grid-stride elements in double, the block adds its threads in a fixed
 * tree and writes one double partial. */
template <int VEC>
__global__ static void norm_squared_stage1(double *partials, const float *x, size_t n)
{
    typedef vec_t<float, VEC> V;
    __shared__ double sh[NORM_THREADS];
    double sum = 0.0;
    const size_t nv = n / VEC;
    GRID_STRIDE(i, nv) {
        const V xv = ((const V *)x)[i];
#pragma unroll
        for (int j = 0; j < VEC; j++) {
            const double xi = (double)xv.v[j];
            sum += xi * xi;
        }
    }
    /* the last n % VEC elements, one each to the first threads of the grid */
    const size_t tail = nv * VEC + blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (tail < n) {
        const double xi = (double)x[tail];
        sum += xi * xi;
    }
    sh[threadIdx.x] = sum;
    const double block_sum = block_tree_sum(sh);
    if (threadIdx.x == 0)
        partials[blockIdx.x] = block_sum;
}

/* Stage 2: one block of NORM_BLOCKS threads adds the partials in a fixed tree and writes
 * the float result (no atomics). */
__global__ static void norm_squared_stage2(float *out, const double *partials)
{
    __shared__ double sh[NORM_BLOCKS];
    sh[threadIdx.x] = partials[threadIdx.x];
    const double total = block_tree_sum(sh);
    if (threadIdx.x == 0)
        *out = (float)total;
}

void cu_norm_squared(gpt_stream *s, float *out, const float *x, size_t n)
{
    cuda_stream_impl *st = cu_stream(s);
    /* 16-byte loads when x allows them: the norm reads every gradient once per step. */
    if (aligned16(x))
        norm_squared_stage1<4><<<NORM_BLOCKS, NORM_THREADS, 0, st->stream>>>(st->norm_partials, x,
                                                                            n);
    else
        norm_squared_stage1<1><<<NORM_BLOCKS, NORM_THREADS, 0, st->stream>>>(st->norm_partials, x,
                                                                            n);
    OP_CHECK_LAUNCH(s);
    norm_squared_stage2<<<1, NORM_BLOCKS, 0, st->stream>>>(out, st->norm_partials);
    OP_CHECK_LAUNCH(s);
}

/* ---- checkpoint checksums (checksum_element.h) ---------------------------------------------
 * sums[c] = fold(n_c, sum of the terms of chunk c's words).  The chunks' words are the parts
 * one after the other.  Each chunk is cut into `per_chunk` contiguous runs, one thread block
 * each: its threads add the terms of their words in registers, the block adds its threads'
 * sums, and one 64-bit integer atomic per block adds that into its chunk's sum (integer
 * addition: the order does not change the bits).  One atomic per warp instead, all warps of a
 * chunk on one address, serialised in L2 for ~20 ms per 5 GB on an H100, beside the training
 * (bench/results/2026-11-25-h100x2-gemini).  A second kernel folds each sum with its chunk's
 * length. */
struct checksum_parts {
    const uint32_t *p[GPT_CHECKSUM_PARTS];
    size_t end[GPT_CHECKSUM_PARTS]; /* where each part ends in the sequence */
    int nparts;
};

enum { CHECKSUM_THREADS = 256 };

__global__ static void __launch_bounds__(CHECKSUM_THREADS)
checksum_terms_kernel(unsigned long long *sums, checksum_parts parts, size_t total, size_t chunk_floats,
                      unsigned per_chunk)
{
    __shared__ unsigned long long warp_sums[CHECKSUM_THREADS / 32];
    const size_t chunk = blockIdx.x / per_chunk, run = blockIdx.x % per_chunk;
    const size_t c0 = chunk * chunk_floats, c1 = c0 + chunk_floats < total ? c0 + chunk_floats : total;
    const size_t len = (c1 - c0 + per_chunk - 1) / per_chunk;
    const size_t from = c0 + run * len, to = from + len < c1 ? from + len : c1;
    uint64_t acc = 0;
    int k = 0;
    for (size_t g = from + threadIdx.x; g < to; g += CHECKSUM_THREADS) {
        while (k + 1 < parts.nparts && g >= parts.end[k]) k++;
        const size_t start = k ? parts.end[k - 1] : 0;
        acc += gpt_checksum_term(parts.p[k][g - start], g - c0);
    }
    for (int off = 16; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x / 32] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        uint64_t block = 0;
        for (int w = 0; w < CHECKSUM_THREADS / 32; w++) block += warp_sums[w];
        atomicAdd(&sums[chunk], (unsigned long long)block);
    }
}

__global__ static void checksum_fold_kernel(unsigned long long *sums, size_t nchunks, size_t total,
                                            size_t chunk_floats)
{
    const size_t c = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= nchunks) return;
    const size_t n = total - c * chunk_floats < chunk_floats ? total - c * chunk_floats : chunk_floats;
    sums[c] = gpt_checksum_fold(sums[c], n);
}

void cu_checksum_fold(gpt_stream *s, uint64_t *sums, size_t total, size_t chunk_floats)
{
    const size_t nchunks = chunk_floats ? (total + chunk_floats - 1) / chunk_floats : 0;
    if (nchunks == 0) return;
    checksum_fold_kernel<<<(unsigned)((nchunks + 255) / 256), 256, 0, cu_stream(s)->stream>>>(
        (unsigned long long *)sums, nchunks, total, chunk_floats);
    OP_CHECK_LAUNCH(s);
}

/* AdamW adding the checksum terms of the words it writes (gpt_checksum_acc): the blocks take
 * contiguous runs of the elements (not a grid stride), so that a block's words of each array
 * lie in one chunk, or two where a chunk ends inside the run.  A thread adds its terms in
 * registers, a run per array (added out with an atomic when its words cross into the next
 * chunk, which a block's run does at most once or twice); at the end the warps add theirs
 * (lanes of another chunk add theirs out alone), and one thread per array adds the block's
 * warps' sums, one atomic per chunk they span: a few per block, as the checksum kernels
 * below do (one per warp costs ~20 ms per 5 GB, serialised in L2).  The Adam arithmetic is
 * adamw_kernel's, so the parameters are the same bits with or without the sums. */
struct sum_run {
    size_t chunk, next; /* the chunk being summed (SIZE_MAX: none yet); where the next starts */
    unsigned long long acc;
};

static __device__ __forceinline__ void sum_run_add(sum_run *r, unsigned long long *sums, size_t chunk_floats,
                                                   size_t word, float value)
{
    if (word >= r->next) {
        if (r->chunk != SIZE_MAX && r->acc) atomicAdd(&sums[r->chunk], r->acc);
        r->chunk = word / chunk_floats;
        r->next = (r->chunk + 1) * chunk_floats;
        r->acc = 0;
    }
    r->acc += gpt_checksum_term(__float_as_uint(value), word - r->chunk * chunk_floats);
}

template <int VEC>
__global__ static void __launch_bounds__(CHECKSUM_THREADS)
adamw_sums_kernel(float *param, bf16 *act, const float *grad, float *m, float *v, size_t nvec, size_t per_block,
                  float lr, float beta1, float beta2, float eps, float weight_decay, float bias_corr1,
                  float bias_corr2, float grad_scale, unsigned long long *sums, size_t chunk_floats, size_t first0,
                  size_t first1, size_t first2)
{
    typedef vec_t<float, VEC> V;
    __shared__ unsigned long long warp_acc[3][CHECKSUM_THREADS / 32];
    __shared__ size_t warp_chunk[3][CHECKSUM_THREADS / 32];
    const size_t from = blockIdx.x * per_block, to = from + per_block < nvec ? from + per_block : nvec;
    const size_t first[3] = {first0, first1, first2};
    sum_run run[3];
#pragma unroll
    for (int k = 0; k < 3; k++) run[k] = sum_run{SIZE_MAX, 0, 0};
    for (size_t i = from + threadIdx.x; i < to; i += CHECKSUM_THREADS) {
        V p, mm, vv;
        adamw_vector<VEC>(param, act, grad, m, v, i, lr, beta1, beta2, eps, weight_decay, bias_corr1, bias_corr2,
                          grad_scale, &p, &mm, &vv);
#pragma unroll
        for (int j = 0; j < VEC; j++) {
            const size_t e = i * VEC + j;
            sum_run_add(&run[0], sums, chunk_floats, first[0] + e, p.v[j]);
            sum_run_add(&run[1], sums, chunk_floats, first[1] + e, mm.v[j]);
            sum_run_add(&run[2], sums, chunk_floats, first[2] + e, vv.v[j]);
        }
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
#pragma unroll
    for (int k = 0; k < 3; k++) {
        /* lanes in another chunk than lane 0's (a chunk boundary inside the warp's last
         * stride) add theirs out alone; the rest are summed over the warp */
        const size_t lead = __shfl_sync(0xffffffffu, run[k].chunk, 0);
        unsigned long long a = run[k].acc;
        if (run[k].chunk != lead && run[k].chunk != SIZE_MAX && a) {
            atomicAdd(&sums[run[k].chunk], a);
            a = 0;
        }
        for (int off = 16; off > 0; off /= 2) a += __shfl_xor_sync(0xffffffffu, a, off);
        if (lane == 0) {
            warp_acc[k][warp] = a;
            warp_chunk[k][warp] = lead;
        }
    }
    __syncthreads();
    if (threadIdx.x < 3) {
        const int k = threadIdx.x;
        size_t chunk = SIZE_MAX;
        unsigned long long a = 0;
        for (int w = 0; w < CHECKSUM_THREADS / 32; w++) {
            if (warp_chunk[k][w] == SIZE_MAX) continue;
            if (warp_chunk[k][w] != chunk) {
                if (chunk != SIZE_MAX && a) atomicAdd(&sums[chunk], a);
                chunk = warp_chunk[k][w];
                a = 0;
            }
            a += warp_acc[k][w];
        }
        if (chunk != SIZE_MAX && a) atomicAdd(&sums[chunk], a);
    }
}

/* n elements (VEC each a vector) from element `at` of the update's call: about two blocks per
 * SM, each a contiguous run of at least 16 vectors per thread. */
static void adamw_sums_launch(gpt_stream *s, int vec, float *param, bf16 *act, const float *grad,
                              float *m, float *v, size_t n, float lr, float beta1, float beta2,
                              float eps, float weight_decay, float bias_corr1, float bias_corr2,
                              float grad_scale, const gpt_checksum_acc *acc, size_t at)
{
    const size_t nvec = n / (size_t)vec;
    size_t blocks = (nvec + 16 * CHECKSUM_THREADS - 1) / (16 * CHECKSUM_THREADS);
    if (blocks > 2 * 132) blocks = 2 * 132;
    if (blocks < 1) blocks = 1;
    const size_t per_block = (nvec + blocks - 1) / blocks;
    cudaStream_t st = cu_stream(s)->stream;
    unsigned long long *sums = (unsigned long long *)acc->sums;
    if (vec == 4)
        adamw_sums_kernel<4><<<(unsigned)blocks, CHECKSUM_THREADS, 0, st>>>(
            param, act, grad, m, v, nvec, per_block, lr, beta1, beta2, eps, weight_decay, bias_corr1, bias_corr2,
            grad_scale, sums, acc->chunk_floats, acc->first[0] + at, acc->first[1] + at, acc->first[2] + at);
    else
        adamw_sums_kernel<1><<<(unsigned)blocks, CHECKSUM_THREADS, 0, st>>>(
            param, act, grad, m, v, nvec, per_block, lr, beta1, beta2, eps, weight_decay, bias_corr1, bias_corr2,
            grad_scale, sums, acc->chunk_floats, acc->first[0] + at, acc->first[1] + at, acc->first[2] + at);
    OP_CHECK_LAUNCH(s);
}

void cu_checksum_chunks(gpt_stream *s, uint64_t *sums, const gpt_float_span *parts, int nparts,
                        size_t chunk_floats)
{
    cudaStream_t st = cu_stream(s)->stream;
    checksum_parts cp;
    memset(&cp, 0, sizeof cp);
    size_t total = 0;
    if (nparts < 1 || nparts > GPT_CHECKSUM_PARTS || chunk_floats < 32) {
        fprintf(stderr, "aebench: checksum_chunks: %d parts, chunks of %zu words\n", nparts, chunk_floats);
        cu_stream(s)->failed = 1;
        return;
    }
    for (int k = 0; k < nparts; k++) {
        cp.p[k] = (const uint32_t *)(const void *)parts[k].p;
        total += parts[k].n;
        cp.end[k] = total;
    }
    cp.nparts = nparts;
    const size_t nchunks = (total + chunk_floats - 1) / chunk_floats;
    OP_CHECK_CUDA(s, cudaMemsetAsync(sums, 0, nchunks * sizeof(uint64_t), st));
    if (total == 0) return;
    /* about 2048 blocks in all (16 per SM), each run at least 16 words per thread */
    size_t per_chunk = (2048 + nchunks - 1) / nchunks;
    const size_t max_runs = (chunk_floats + 16 * CHECKSUM_THREADS - 1) / (16 * CHECKSUM_THREADS);
    if (per_chunk > max_runs) per_chunk = max_runs;
    if (per_chunk < 1) per_chunk = 1;
    checksum_terms_kernel<<<(unsigned)(nchunks * per_chunk), CHECKSUM_THREADS, 0, st>>>(
        (unsigned long long *)sums, cp, total, chunk_floats, (unsigned)per_chunk);
    OP_CHECK_LAUNCH(s);
    checksum_fold_kernel<<<(unsigned)((nchunks + 255) / 256), 256, 0, st>>>((unsigned long long *)sums, nchunks,
                                                                            total, chunk_floats);
    OP_CHECK_LAUNCH(s);
}
