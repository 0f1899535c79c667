/*
 * cuda_attention.cu — causal multi-head self-attention, fused (flash-attention style): the
 * (T, T) scores and probabilities live only in registers, a tile at a time.  The forward
 * keeps, per query row, the log-sum-exp of its scaled scores (lse); the backward recomputes
 * every probability from it.  Memory: O(B NH T) instead of two (B, NH, T, T) buffers, and
 * the T^2 traffic through HBM is gone.
 *
 * Layout (as in ../cpu/cpu_attention.c): the row of token (b,t) in qkv (B,T,3C) is
 * [ q | k | v ], head h owning columns h*hs .. (h+1)*hs-1 of each, hs = C/NH; out and
 * dout are (B,T,C), lse and delta (B,NH,T).
 *
 * Three implementations of the same three kernels (forward; backward dq; backward dk, dv):
 *
 *  - Hopper warpgroup MMA (wgmma, sm_90a; cuda_attention_wgmma.cuh): bf16, head size 128, on a
 *    device that runs the sm_90a build (cu_attention_wgmma_available); the operands stay in
 *    shared memory.  TF32 with head size 128: warp-specialized kernels (a producer warpgroup,
 *    two consumers; cuda_attention_wgmma_tf32.cuh).  The same results as the mma.sync
 *    kernels, bit for bit.
 *  - tensor cores (mma.sync, sm_80+; cuda_attention_tc.cuh): TF32 for fp32 storage when TF32
 *    is allowed, bf16 for the bf16 backend; head sizes 32, 64, 128.  Blocks of 4 warps owning
 *    16 or 32 rows each (the forward, dq) or of 4-8 warps of 16 keys (dk, dv); the other
 *    operand streams through shared memory in tiles copied while the previous is used.
 *  - SIMT fp32 FMA: --math fp32 (strict: no tensor cores), and any other head size.  Four
 *    threads per row, each owning every 4th element of the head dimension.
 *
 * The backward is deterministic (no atomics): one kernel per block of queries forms dq
 * (walking the keys), one per block of keys forms dk and dv (walking the queries); each recomputes
 * the probabilities it needs.  That is 7 products instead of the 5 of an atomic dq, for
 * run-to-run identical gradients.  The dq kernel runs first and stores delta = dout . out
 * per row, which the dk/dv kernel reads.
 *
 * Causality: tiles entirely above the diagonal are never visited; a block of queries only
 * walks keys up to its last query, and query blocks are scheduled longest first.
 */
#include "cuda_attention_wgmma_tf32.cuh"

/* ======================================================================================
 * SIMT fp32 kernels (strict fp32, and head sizes without a tensor-core instantiation).
 * A block is 128 threads = 32 rows x 4 threads; thread `sub` of a row owns the contiguous
 * slice d = sub*DPT + i, i < DPT, of the head dimension (so hs <= 4 DPT; elements past hs
 * are zeros in registers and in shared memory, so no loop needs a guard).  The streamed
 * operand goes through shared memory as fp32 in tiles of 32 rows.  In a tile row, slice
 * `sub` starts at float sub*(DPT+4): the four slices fall in different banks, so a warp's
 * float4 read (eight rows of threads x the same four addresses) is one wavefront, and each
 * shared load feeds four FMAs.
 * ==================================================================================== */

#define SIMT_ROWS 32
#define SIMT_TILE 32

template <int DPT> struct simt_row {
    static constexpr int SLICE = DPT + 4; /* floats per slice, padded */
    static constexpr int RS = 4 * SLICE;  /* floats per tile row */
};

/* rows [row0, row0 + SIMT_TILE) of a (T, hs) view into an fp32 tile in the sliced layout;
 * zeros past T and past hs */
template <typename E, int DPT>
static __device__ __forceinline__ void simt_tile_load(float *dst, const E *src, size_t stride,
                                                      int row0, int T, int hs)
{
    typedef simt_row<DPT> L;
    /* loads in batches of 8, then their stores: through generic pointers the compiler
     * cannot prove a store does not feed the next load, and would otherwise pay one memory
     * latency per element (8 keeps the registers the kernels need for their rows) */
    constexpr int PER_THREAD = SIMT_TILE * 4 * DPT / 128, BATCH = PER_THREAD < 8 ? PER_THREAD : 8;
#pragma unroll 1
    for (int k0 = 0; k0 < PER_THREAD; k0 += BATCH) {
        float v[BATCH];
#pragma unroll
        for (int k = 0; k < BATCH; k++) {
            const int c = threadIdx.x + 128 * (k0 + k), r = c / (4 * DPT), d = c % (4 * DPT);
            v[k] = row0 + r < T && d < hs ? ld_f32(src[(size_t)(row0 + r) * stride + d]) : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < BATCH; k++) {
            const int c = threadIdx.x + 128 * (k0 + k), r = c / (4 * DPT), d = c % (4 * DPT);
            dst[r * L::RS + (d / DPT) * L::SLICE + d % DPT] = v[k];
        }
    }
}

/* x[i] (registers, this thread's slice) . tile row `slice` (shared, float4 reads) */
template <int DPT>
static __device__ __forceinline__ float slice_dot(const float (&x)[DPT], const float *slice)
{
    const float4 *s4 = reinterpret_cast<const float4 *>(slice);
    /* four independent sums: one chain of DPT dependent FMAs would stall on FMA latency */
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
#pragma unroll
    for (int i = 0; i < DPT / 4; i++) {
        const float4 v = s4[i];
        a0 += x[4 * i] * v.x;
        a1 += x[4 * i + 1] * v.y;
        a2 += x[4 * i + 2] * v.z;
        a3 += x[4 * i + 3] * v.w;
    }
    return (a0 + a1) + (a2 + a3);
}
/* y[i] += a * tile row slice */
template <int DPT>
static __device__ __forceinline__ void slice_axpy(float (&y)[DPT], float a, const float *slice)
{
    const float4 *s4 = reinterpret_cast<const float4 *>(slice);
#pragma unroll
    for (int i = 0; i < DPT / 4; i++) {
        const float4 v = s4[i];
        y[4 * i] += a * v.x;
        y[4 * i + 1] += a * v.y;
        y[4 * i + 2] += a * v.z;
        y[4 * i + 3] += a * v.w;
    }
}
/* this thread's slice of a global row (zeros past hs or for an invalid row) */
template <typename E, int DPT>
static __device__ __forceinline__ void slice_load(float (&x)[DPT], const E *row, bool valid,
                                                  int sub, int hs, float scale)
{
#pragma unroll
    for (int i = 0; i < DPT; i++) {
        const int d = sub * DPT + i;
        x[i] = valid && d < hs ? ld_f32(row[d]) * scale : 0.0f;
    }
}
template <typename E, int DPT>
static __device__ __forceinline__ void slice_store(E *row, const float (&x)[DPT], int sub, int hs,
                                                   float scale)
{
#pragma unroll
    for (int i = 0; i < DPT; i++)
        if (sub * DPT + i < hs)
            st_f32(&row[sub * DPT + i], x[i] * scale);
}

template <typename E, int DPT>
__global__ static void __launch_bounds__(128)
flash_forward_simt(E *out, float *lse, const E *qkv, int T, int C, int NH, float scale_log2)
{
    typedef simt_row<DPT> L;
    extern __shared__ float4 simt_smem4[];
    float *Ks = reinterpret_cast<float *>(simt_smem4), *Vs = Ks + SIMT_TILE * L::RS;
    const int hs = C / NH;
    const head_rows hr = head_of_block(T, C, NH, hs);
    const int q0 = (gridDim.x - 1 - blockIdx.x) * SIMT_ROWS;
    const int sub = threadIdx.x & 3, q = q0 + threadIdx.x / 4;
    const size_t C3 = hr.C3;
    const E *qbase = qkv + hr.qkv_off;

    float qr[DPT], o[DPT];
    slice_load<E, DPT>(qr, qbase + (size_t)q * C3, q < T, sub, hs, scale_log2);
#pragma unroll
    for (int i = 0; i < DPT; i++)
        o[i] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    const int kend = min(T, q0 + SIMT_ROWS);
    for (int k0 = 0; k0 < kend; k0 += SIMT_TILE) {
        __syncthreads();
        simt_tile_load<E, DPT>(Ks, qbase + C, C3, k0, T, hs);
        simt_tile_load<E, DPT>(Vs, qbase + 2 * C, C3, k0, T, hs);
        __syncthreads();
        const int nk = min(SIMT_TILE, kend - k0);
        for (int j = 0; j < nk; j++) {
            const float s = quad_sum(slice_dot<DPT>(qr, Ks + j * L::RS + sub * L::SLICE));
            if (k0 + j > q)
                continue;
            if (s > m) { /* a new max: rescale what was summed so far (0 on the first key) */
                const float alpha = exp2f(m - s);
                l *= alpha;
#pragma unroll
                for (int i = 0; i < DPT; i++)
                    o[i] *= alpha;
                m = s;
            }
            const float p = exp2f(s - m);
            l += p;
            slice_axpy<DPT>(o, p, Vs + j * L::RS + sub * L::SLICE);
        }
    }
    if (q >= T)
        return;
    slice_store<E, DPT>(out + hr.tok_off + (size_t)q * C, o, sub, hs, 1.0f / l);
    if (sub == 0)
        lse[hr.stat_off + q] = (m + log2f(l)) * LN2_F;
}

template <typename E, int DPT>
__global__ static void __launch_bounds__(128)
flash_backward_dq_simt(E *dqkv, float *delta, const E *dout, const E *qkv, const E *out,
                       const float *lse, int T, int C, int NH, float scale, float scale_log2)
{
    typedef simt_row<DPT> L;
    extern __shared__ float4 simt_smem4[];
    float *Ks = reinterpret_cast<float *>(simt_smem4), *Vs = Ks + SIMT_TILE * L::RS;
    const int hs = C / NH;
    const head_rows hr = head_of_block(T, C, NH, hs);
    const int q0 = (gridDim.x - 1 - blockIdx.x) * SIMT_ROWS;
    const int sub = threadIdx.x & 3, q = q0 + threadIdx.x / 4;
    const size_t C3 = hr.C3;
    const E *qbase = qkv + hr.qkv_off;
    const size_t tok = hr.tok_off + (size_t)q * C;

    float qr[DPT], dor[DPT], orow[DPT], dq[DPT];
    slice_load<E, DPT>(qr, qbase + (size_t)q * C3, q < T, sub, hs, 1.0f);
    slice_load<E, DPT>(dor, dout + tok, q < T, sub, hs, 1.0f);
    slice_load<E, DPT>(orow, out + tok, q < T, sub, hs, 1.0f);
    float part = 0.0f;
#pragma unroll
    for (int i = 0; i < DPT; i++) {
        part += dor[i] * orow[i];
        dq[i] = 0.0f;
    }
    const float D = quad_sum(part);
    if (q < T && sub == 0)
        delta[hr.stat_off + q] = D;
    const float ls = q < T ? lse[hr.stat_off + q] * LOG2E_F : INFINITY;

    const int kend = min(T, q0 + SIMT_ROWS);
    for (int k0 = 0; k0 < kend; k0 += SIMT_TILE) {
        __syncthreads();
        simt_tile_load<E, DPT>(Ks, qbase + C, C3, k0, T, hs);
        simt_tile_load<E, DPT>(Vs, qbase + 2 * C, C3, k0, T, hs);
        __syncthreads();
        const int nk = min(SIMT_TILE, kend - k0);
        for (int j = 0; j < nk; j++) {
            const float *kj = Ks + j * L::RS + sub * L::SLICE;
            const float s = quad_sum(slice_dot<DPT>(qr, kj));
            const float dp = quad_sum(slice_dot<DPT>(dor, Vs + j * L::RS + sub * L::SLICE));
            if (k0 + j > q)
                continue;
            slice_axpy<DPT>(dq, exp2f(s * scale_log2 - ls) * (dp - D), kj);
        }
    }
    if (q < T)
        slice_store<E, DPT>(dqkv + hr.qkv_off + (size_t)q * C3, dq, sub, hs, scale);
}

template <typename E, int DPT>
__global__ static void __launch_bounds__(128)
flash_backward_dkv_simt(E *dqkv, const float *delta, const E *dout, const E *qkv,
                        const float *lse, int T, int C, int NH, float scale, float scale_log2)
{
    typedef simt_row<DPT> L;
    extern __shared__ float4 simt_smem4[];
    float *Qs = reinterpret_cast<float *>(simt_smem4), *dOs = Qs + SIMT_TILE * L::RS,
          *Ls = dOs + SIMT_TILE * L::RS, *Ds = Ls + SIMT_TILE;
    const int hs = C / NH;
    const head_rows hr = head_of_block(T, C, NH, hs);
    const int k0 = blockIdx.x * SIMT_ROWS;
    const int sub = threadIdx.x & 3, key = k0 + threadIdx.x / 4;
    const size_t C3 = hr.C3;
    const E *qbase = qkv + hr.qkv_off;
    const E *dobase = dout + hr.tok_off;

    float kr[DPT], vr[DPT], dk[DPT], dv[DPT];
    slice_load<E, DPT>(kr, qbase + (size_t)key * C3 + C, key < T, sub, hs, 1.0f);
    slice_load<E, DPT>(vr, qbase + (size_t)key * C3 + 2 * C, key < T, sub, hs, 1.0f);
#pragma unroll
    for (int i = 0; i < DPT; i++)
        dk[i] = dv[i] = 0.0f;
    for (int q0 = k0; q0 < T; q0 += SIMT_TILE) {
        __syncthreads();
        simt_tile_load<E, DPT>(Qs, qbase, C3, q0, T, hs);
        simt_tile_load<E, DPT>(dOs, dobase, C, q0, T, hs);
        if (threadIdx.x < SIMT_TILE) {
            const int qq = q0 + threadIdx.x;
            Ls[threadIdx.x] = qq < T ? lse[hr.stat_off + qq] * LOG2E_F : INFINITY;
            Ds[threadIdx.x] = qq < T ? delta[hr.stat_off + qq] : 0.0f;
        }
        __syncthreads();
        const int nq = min(SIMT_TILE, T - q0);
        for (int j = 0; j < nq; j++) {
            const float *qj = Qs + j * L::RS + sub * L::SLICE;
            const float *doj = dOs + j * L::RS + sub * L::SLICE;
            const float s = quad_sum(slice_dot<DPT>(kr, qj));
            const float dp = quad_sum(slice_dot<DPT>(vr, doj));
            if (q0 + j < key)
                continue;
            const float p = exp2f(s * scale_log2 - Ls[j]);
            slice_axpy<DPT>(dv, p, doj);
            slice_axpy<DPT>(dk, p * (dp - Ds[j]), qj);
        }
    }
    if (key >= T)
        return;
    E *krow = dqkv + hr.qkv_off + (size_t)key * C3 + C;
    slice_store<E, DPT>(krow, dk, sub, hs, scale);
    slice_store<E, DPT>(krow + C, dv, sub, hs, 1.0f);
}

/* ======================================================================================
 * dispatch
 * ==================================================================================== */

/* Largest head dimension the SIMT kernels hold in registers (4 threads x 64). */
#define SIMT_MAX_HS 256

static bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* The tensor-core kernels: TF32 allowed (or bf16), a head size with an instantiation, and
 * 16-byte aligned rows for the vector tile loads. */
static bool use_tensor_cores(const gpt_stream *s, int hs, int C, const void *qkv,
                             const void *dout)
{
    if (!cu_is_bf16(s) && !cu_backend(s)->allow_tf32)
        return false;
    if (hs != 32 && hs != 64 && hs != 128)
        return false;
    const size_t esize = gpt_dtype_size(s->be->dtype);
    return aligned16(qkv) && (dout == NULL || aligned16(dout)) && (C * esize) % 16 == 0;
}

template <typename E, int HS>
static void forward_tc(gpt_stream *s, E *out, float *lse, const E *qkv, int B, int T, int C,
                       int NH, float scale_log2)
{
    OP_CHECK_CUDA(s, (attn_forward_launch<E, HS, typename attn_tiles<E>::fwd>(
                         cu_stream(s)->stream, out, lse, qkv, B, T, C, NH, scale_log2)));
}

template <typename E, int HS>
static void backward_tc(gpt_stream *s, E *dqkv, float *delta, const E *dout, const E *qkv,
                        const E *out, const float *lse, int B, int T, int C, int NH,
                        float scale, float scale_log2)
{
    cudaStream_t st = cu_stream(s)->stream;
    OP_CHECK_CUDA(s, (attn_dq_launch<E, HS, typename attn_tiles<E>::dq>(
                         st, dqkv, delta, dout, qkv, out, lse, B, T, C, NH, scale, scale_log2)));
    OP_CHECK_CUDA(s, (attn_dkv_launch<E, HS, typename attn_tiles<E>::dkv>(
                         st, dqkv, delta, dout, qkv, lse, B, T, C, NH, scale, scale_log2)));
}

/* The wgmma kernels: chosen at the backend's creation (cuda_backend.cu), bf16, their head
 * size, and the same alignment as the mma.sync kernels. */
static bool use_wgmma(const gpt_stream *s, int hs, int C, const void *qkv, const void *dout)
{
    return cu_backend(s)->attn_wgmma && cu_is_bf16(s) && hs == WG_HS &&
           use_tensor_cores(s, hs, C, qkv, dout);
}

/* The TF32 wgmma kernels: fp32 storage with TF32 allowed, head size 128, the same alignment,
 * and a device that lets a block have their shared memory (the most, dq's: 225 KiB dynamic,
 * 1 KiB static) */
static bool use_wgmma_tf32(const gpt_stream *s, int hs, int C, const void *qkv, const void *dout)
{
    return cu_backend(s)->attn_wgmma && !cu_is_bf16(s) && cu_backend(s)->allow_tf32 &&
           hs == WG_HS && cu_backend(s)->smem_per_block_optin >= (int)T32_DQ_SMEM + 1024 &&
           use_tensor_cores(s, hs, C, qkv, dout);
}

int cu_attention_wgmma_available(void)
{
    int *has_d = NULL, has = 0;
    if (CUDA_FAILED(cudaMalloc(&has_d, sizeof(int))))
        return 0;
    wgmma_probe<<<1, 1>>>(has_d);
    const bool ok = !CUDA_FAILED(cudaGetLastError()) &&
                    !CUDA_FAILED(cudaMemcpy(&has, has_d, sizeof(int), cudaMemcpyDeviceToHost));
    (void)CUDA_FAILED(cudaFree(has_d));
    return ok && has == 1;
}

template <typename E, int DPT>
static void forward_simt(gpt_stream *s, E *out, float *lse, const E *qkv, int B, int T, int C,
                         int NH, float scale_log2)
{
    const size_t smem = 2 * (size_t)SIMT_TILE * simt_row<DPT>::RS * sizeof(float);
    OP_CHECK_CUDA(s, launch_with_smem(flash_forward_simt<E, DPT>, attn_grid(B, T, NH, SIMT_ROWS),
                                      128, smem, cu_stream(s)->stream, out, lse, qkv, T, C, NH,
                                      scale_log2));
}

template <typename E, int DPT>
static void backward_simt(gpt_stream *s, E *dqkv, float *delta, const E *dout, const E *qkv,
                          const E *out, const float *lse, int B, int T, int C, int NH,
                          float scale, float scale_log2)
{
    cudaStream_t st = cu_stream(s)->stream;
    const dim3 grid = attn_grid(B, T, NH, SIMT_ROWS);
    const size_t smem_dq = 2 * (size_t)SIMT_TILE * simt_row<DPT>::RS * sizeof(float);
    OP_CHECK_CUDA(s, launch_with_smem(flash_backward_dq_simt<E, DPT>, grid, 128, smem_dq, st, dqkv,
                                      delta, dout, qkv, out, lse, T, C, NH, scale, scale_log2));
    const size_t smem_dkv = smem_dq + 2 * SIMT_TILE * sizeof(float);
    OP_CHECK_CUDA(s, launch_with_smem(flash_backward_dkv_simt<E, DPT>, grid, 128, smem_dkv, st,
                                      dqkv, delta, dout, qkv, lse, T, C, NH, scale, scale_log2));
}

/* Picks the smallest SIMT instantiation that holds hs in registers. */
#define SIMT_DISPATCH(hs, DPT, ...)                                                        \
    do {                                                                                   \
        if ((hs) <= 32) {                                                                  \
            constexpr int DPT = 8;                                                         \
            __VA_ARGS__;                                                                   \
        } else if ((hs) <= 64) {                                                           \
            constexpr int DPT = 16;                                                        \
            __VA_ARGS__;                                                                   \
        } else if ((hs) <= 128) {                                                          \
            constexpr int DPT = 32;                                                        \
            __VA_ARGS__;                                                                   \
        } else {                                                                           \
            constexpr int DPT = 64;                                                        \
            __VA_ARGS__;                                                                   \
        }                                                                                  \
    } while (0)

#define HS_DISPATCH(hs, HS, ...)                                                           \
    do {                                                                                   \
        if ((hs) == 32) {                                                                  \
            constexpr int HS = 32;                                                         \
            __VA_ARGS__;                                                                   \
        } else if ((hs) == 64) {                                                           \
            constexpr int HS = 64;                                                         \
            __VA_ARGS__;                                                                   \
        } else {                                                                           \
            constexpr int HS = 128;                                                        \
            __VA_ARGS__;                                                                   \
        }                                                                                  \
    } while (0)

static bool head_size_ok(gpt_stream *s, int hs)
{
    if (hs >= 1 && hs <= SIMT_MAX_HS)
        return true;
    fprintf(stderr, "aebench: attention: head size %d not supported by the CUDA backend (at most "
                    "%d)\n", hs, SIMT_MAX_HS);
    cu_stream(s)->failed = 1;
    return false;
}

void cu_attention_forward(gpt_stream *s, void *out, float *lse, const void *qkv, int B, int T,
                          int C, int NH)
{
    const int hs = C / NH;
    if (!head_size_ok(s, hs))
        return;
    const float scale_log2 = LOG2E_F / sqrtf((float)hs);
    if (use_wgmma(s, hs, C, qkv, NULL))
        OP_CHECK_CUDA(s, attn_wgmma_forward_launch<wg_chosen>(cu_stream(s)->stream, (bf16 *)out, lse,
                                                   (const bf16 *)qkv, B, T, C, NH, scale_log2));
    else if (use_wgmma_tf32(s, hs, C, qkv, NULL))
        OP_CHECK_CUDA(s, attn_wgmma_tf32_forward_launch(cu_stream(s)->stream, (float *)out, lse,
                                                        (const float *)qkv, B, T, C, NH,
                                                        scale_log2));
    else if (use_tensor_cores(s, hs, C, qkv, NULL))
        CU_DISPATCH(s, E, HS_DISPATCH(hs, HS,
                                      forward_tc<E, HS>(s, (E *)out, lse, (const E *)qkv, B, T,
                                                        C, NH, scale_log2)));
    else
        CU_DISPATCH(s, E, SIMT_DISPATCH(hs, DPT,
                                        forward_simt<E, DPT>(s, (E *)out, lse, (const E *)qkv,
                                                             B, T, C, NH, scale_log2)));
}

void cu_attention_backward(gpt_stream *s, void *dqkv, float *delta, const void *dout,
                           const void *qkv, const void *out, const float *lse, int B, int T,
                           int C, int NH)
{
    const int hs = C / NH;
    if (!head_size_ok(s, hs))
        return;
    const float scale = 1.0f / sqrtf((float)hs), scale_log2 = scale * LOG2E_F;
    if (use_wgmma(s, hs, C, qkv, dout)) {
        cudaStream_t st = cu_stream(s)->stream;
        OP_CHECK_CUDA(s, attn_wgmma_dq_launch<wg_chosen>(st, (bf16 *)dqkv, delta, (const bf16 *)dout,
                                              (const bf16 *)qkv, (const bf16 *)out, lse, B, T, C,
                                              NH, scale, scale_log2));
        OP_CHECK_CUDA(s, attn_wgmma_dkv_launch<wg_chosen>(st, (bf16 *)dqkv, delta, (const bf16 *)dout,
                                               (const bf16 *)qkv, lse, B, T, C, NH, scale,
                                               scale_log2));
    } else if (use_wgmma_tf32(s, hs, C, qkv, dout)) {
        /* dq (which stores delta), then dk, dv: both warp-specialized on wgmma */
        cudaStream_t st = cu_stream(s)->stream;
        OP_CHECK_CUDA(s, attn_wgmma_tf32_dq_launch(st, (float *)dqkv, delta, (const float *)dout,
                                                   (const float *)qkv, (const float *)out, lse, B,
                                                   T, C, NH, scale, scale_log2));
        OP_CHECK_CUDA(s, attn_wgmma_tf32_dkv_launch(st, (float *)dqkv, delta, (const float *)dout,
                                                    (const float *)qkv, lse, B, T, C, NH, scale,
                                                    scale_log2));
    } else if (use_tensor_cores(s, hs, C, qkv, dout))
        CU_DISPATCH(s, E, HS_DISPATCH(hs, HS,
                                      backward_tc<E, HS>(s, (E *)dqkv, delta, (const E *)dout,
                                                         (const E *)qkv, (const E *)out, lse, B,
                                                         T, C, NH, scale, scale_log2)));
    else
        CU_DISPATCH(s, E, SIMT_DISPATCH(hs, DPT,
                                        backward_simt<E, DPT>(s, (E *)dqkv, delta,
                                                              (const E *)dout, (const E *)qkv,
                                                              (const E *)out, lse, B, T, C, NH,
                                                              scale, scale_log2)));
}
