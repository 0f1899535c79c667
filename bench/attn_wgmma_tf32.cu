/*
 * attn_wgmma_tf32.cu — issue 30 part 2 in TF32 (the artifact's math): the causal attention
 * (forward, dq, dk/dv) on wgmma with fp32 storage and TF32 products, head size 128, against the
 * backend's mma.sync TF32 kernels (cuda_attention_tc.cuh, attn_tiles<float>): every output bit
 * for bit against theirs (out, lse, dq, dk, dv, delta), repeatability, and each kernel's time.
 *
 *   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Ikernels \
 *       bench/attn_wgmma_tf32.cu -o attn_wgmma_tf32   (or PARTS=tf32 bash bench/attn_gpu.sh "$OUT")
 *   ./attn_wgmma_tf32 [B T C NH]       (default the l32 model's 4 1024 2048 16; C = 128 NH)
 *
 * Status (2026-11-27, one H100: bench/results/2026-11-27c-h100-tf32-wgmma): every variant is
 * the mma.sync kernels' bit for bit.  The warp-specialized forward (a producer warpgroup, two
 * consumers: kernels/cuda/cuda_attention_wgmma_tf32.cuh, which the backend now runs) is 1.58x
 * the mma.sync one (0.151 against 0.239 ms; with two producer warpgroups no faster).  The
 * single-warpgroup forms here are not faster than mma.sync (forward 0.248-0.261 ms: a serial
 * chain per tile, load, store, barrier, S, softmax, P V, with two warps a scheduler to hide it),
 * whether the next tile is fetched under this one's products (PIPE) or Q is held in registers
 * with K and V rounded on their way into shared memory (flash_forward_wgmma_tf32_rq); nor are
 * dq (Q, dO, K, V and K^T in shared memory, 113 KiB: 0.52 against 0.36 ms) and dk/dv (K, V, Q,
 * dO, Q^T, dO^T: 129 KiB, one block an SM: 0.63 against 0.42 ms), with the tiles of
 * attn_tiles<float> (dq: 64 queries, key tiles of 32; dk/dv: 64 keys, query tiles of 32).
 * Their transposed operands (K^T, Q^T, dO^T, and V^T in the single-warpgroup forwards) go
 * through registers: a warp's 32 lanes are the tile's 32 rows, so each row's 32 words land in
 * 32 banks.  The header says what TF32 changes against the bf16 kernels.
 */
#include "attn_bench.cuh"
#include "cuda/cuda_attention_wgmma_tf32.cuh"

#include <cmath>
#include <string.h>

/* the experiment's own helpers (the product's are in the header) */
#if WG_HAVE_WGMMA

static __device__ __forceinline__ void t32_copies_wait()
{
    asm volatile("cp.async.commit_group;" ::: "memory");
    asm volatile("cp.async.wait_group 0;" ::: "memory");
}

/* Rounded tiles (and the plain stores before it) visible to wgmma and to every thread */
static __device__ __forceinline__ void t32_tiles_ready()
{
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
}

/* 32 rows [k0, k0 + 32) of a (T, 128) view (keys of V or K, queries of dO or Q) into its
 * transpose (128 rows of the head dimension, 32 columns, one 128-byte swizzle row each),
 * rounded, row k of a group of 8 at column k / 2 + 4 (k % 2) of the group: the order in which
 * the A operand built from an accumulator holds them (the P Y products' k dimension).  Warp w,
 * lane = source row: float4 columns w, w + 4, ... of that row; rows past T are zeros.
 * In two halves, so that a pipelined kernel can fetch the next tile's rows into registers before
 * this tile's arithmetic and store them after it. */
struct t32_rows {
    float4 v[T32_HS / 16];
};
static __device__ __forceinline__ void t32_transposed_fetch(t32_rows &x, const float *vbase,
                                                            size_t stride, int k0, int T)
{
    const int warp = threadIdx.x / 32, key = threadIdx.x % 32;
    const bool in = k0 + key < T;
    const float4 *row = reinterpret_cast<const float4 *>(vbase + (size_t)(in ? k0 + key : 0) * stride);
#pragma unroll
    for (int i = 0; i < T32_HS / 16; i++) /* every load in flight before the first store */
        x.v[i] = in ? row[warp + 4 * i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
}
static __device__ __forceinline__ void t32_transposed_store(unsigned vt, const t32_rows &x)
{
    const int warp = threadIdx.x / 32, key = threadIdx.x % 32;
    const int pos = (key & ~7) | ((key >> 1) & 3) | ((key & 1) << 2);
#pragma unroll
    for (int i = 0; i < T32_HS / 16; i++) {
        const int d0 = 4 * (warp + 4 * i);
        const float e4[4] = {x.v[i].x, x.v[i].y, x.v[i].z, x.v[i].w};
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int d = d0 + e;
            const unsigned a = vt + d * 128 + ((((pos >> 2) ^ (d & 7)) << 4) | ((pos & 3) << 2));
            asm volatile("st.shared.f32 [%0], %1;" ::"r"(a), "f"(t32_round(e4[e])) : "memory");
        }
    }
}
static __device__ __forceinline__ void t32_transposed_load(unsigned vt, const float *vbase,
                                                           size_t stride, int k0, int T)
{
    t32_rows x;
    t32_transposed_fetch(x, vbase, stride, k0, T);
    t32_transposed_store(vt, x);
}


/* s (64 x 32) += Q (64 x 8, registers: a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4)
 * of the warp's 16 rows) K^T (K 32 x 8, K-major), TF32; scale_d 0 starts from 0 */
static __device__ __forceinline__ void t32_m64n32k8_rs(float (&s)[16], const uint32_t (&a)[4],
                                                       uint64_t dk, int scale_d)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
                 "{%16, %17, %18, %19}, %20, p, 1, 1;\n}\n"
                 : WG_F16(s)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(dk), "r"(scale_d));
}

/* The warp's 16 rows [row0, row0 + 16) of a (T, 128) view as the A operands of the 16 k steps
 * over the head dimension, rounded to TF32; rows past T zeros */
static __device__ __forceinline__ void t32_rows_to_a(uint32_t (&a)[T32_HS / 8][4], const float *src,
                                                     size_t stride, int row0, int T)
{
    const int lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = row0 + g + 8 * r;
        const float *p = src + (size_t)(row < T ? row : 0) * stride;
#pragma unroll
        for (int kk = 0; kk < T32_HS / 8; kk++) {
            a[kk][r] = row < T ? mma_op<float>::tf32(p[8 * kk + t]) : 0u;
            a[kk][2 + r] = row < T ? mma_op<float>::tf32(p[8 * kk + t + 4]) : 0u;
        }
    }
}

/* s (64 x 32) = Q K^T over the head dimension, Q in registers (t32_rows_to_a), K a tile of
 * 32-row quarters; committed, not waited for */
static __device__ __forceinline__ void t32_product_rkt(float (&s)[16],
                                                       const uint32_t (&a)[T32_HS / 8][4],
                                                       unsigned y)
{
#pragma unroll
    for (int kk = 0; kk < T32_HS / 8; kk++)
        t32_m64n32k8_rs(s, a[kk], wg_desc(y + (kk >> 2) * T32_K_QUARTER + (kk & 3) * 32, 16, 1024),
                        kk > 0);
}

/* 32 rows of a (T, 128) view through registers into a tile of 32-row quarters, rounded (no
 * read-back pass): fetch, then store */
struct t32_krows {
    float4 v[T32_KEYS * 32 / WG_THREADS];
};
static __device__ __forceinline__ void t32_krows_fetch(t32_krows &x, const float *src,
                                                       size_t stride, int row0, int T)
{
#pragma unroll
    for (int i = 0; i < T32_KEYS * 32 / WG_THREADS; i++) {
        const int c = threadIdx.x + WG_THREADS * i, r = c >> 5, ch = c & 31;
        x.v[i] = row0 + r < T ? *reinterpret_cast<const float4 *>(src + (size_t)(row0 + r) * stride + ch * 4)
                              : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
}
static __device__ __forceinline__ void t32_krows_store(unsigned tile, const t32_krows &x)
{
#pragma unroll
    for (int i = 0; i < T32_KEYS * 32 / WG_THREADS; i++) {
        const int c = threadIdx.x + WG_THREADS * i, r = c >> 5, ch = c & 31;
        asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(tile + wg_offset(r, ch, T32_K_QUARTER)),
                     "f"(t32_round(x.v[i].x)), "f"(t32_round(x.v[i].y)), "f"(t32_round(x.v[i].z)),
                     "f"(t32_round(x.v[i].w))
                     : "memory");
    }
}

#endif /* WG_HAVE_WGMMA */

/*
 * Grid (ceil(T/64), B*NH), 128 threads.  Block: 64 queries, the longest first; per key tile of
 * 32 up to the diagonal: K copied and rounded, V transposed and rounded, S = Q K^T (16 k steps
 * of 8 over the head dimension), the online softmax (the bf16 kernels' wg_softmax_tile, on
 * flash_forward_tc's tiles), O += P V (4 k steps of 8 keys).
 * PIPE: two K and two V^T buffers (96 KiB, two blocks an SM); the next tile's K copies and V
 * rows (into registers) are issued before this tile's products, and rounded / stored after
 * them, so that their latency hides under the arithmetic.
 */
#define T32_FWD_SMEM(PIPE) (T32_Q_BYTES + (1 + (PIPE)) * (T32_K_BYTES + T32_VT_BYTES) + 1024)
template <int PIPE>
__global__ static void __launch_bounds__(WG_THREADS, 1 + PIPE)
flash_forward_wgmma_tf32(float *out, float *lse, const float *qkv, int T, int C, int NH,
                         float scale_log2)
{
#if WG_HAVE_WGMMA
    /* buffer b: K at Ks0 + b K_BYTES, V^T at Vt0 + b VT_BYTES */
    const unsigned Qs = wg_smem_base(), Ks0 = Qs + T32_Q_BYTES,
                   Vt0 = Ks0 + (1 + PIPE) * T32_K_BYTES;
    const head_rows hr = head_of_block(T, C, NH, T32_HS);
    const int q0 = (gridDim.x - 1 - blockIdx.x) * T32_ROWS;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
    const int wrow0 = q0 + warp * 16;
    const size_t C3 = hr.C3;
    const float *qbase = qkv + hr.qkv_off;
    const int kend = min(T, q0 + T32_ROWS);

    wg_tile_load<T32_ROWS>(Qs, qbase, C3, q0, T);
    if (PIPE) { /* the first key tile with Q */
        wg_tile_load<T32_KEYS>(Ks0, qbase + C, C3, 0, T);
        t32_transposed_load(Vt0, qbase + 2 * C, C3, 0, T);
    }
    t32_copies_wait();
    t32_round_in_place<T32_ROWS>(Qs); /* made visible with the first key tile */
    if (PIPE) {
        t32_round_in_place<T32_KEYS>(Ks0);
        t32_tiles_ready();
    }

    float o[64];
#pragma unroll
    for (int i = 0; i < 64; i++)
        o[i] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}; /* m in raw score units */

    for (int k0 = 0, it = 0; k0 < kend; k0 += T32_KEYS, it++) {
        const int b = PIPE ? it & 1 : 0;
        const unsigned Ks = Ks0 + b * T32_K_BYTES, Vt = Vt0 + b * T32_VT_BYTES;
        const bool next = PIPE && k0 + T32_KEYS < kend;
        t32_rows vnext;
        if (!PIPE) {
            __syncthreads(); /* every thread has waited for the previous tile's products */
            wg_tile_load<T32_KEYS>(Ks, qbase + C, C3, k0, T);
            t32_transposed_load(Vt, qbase + 2 * C, C3, k0, T); /* while K's copies fly */
            t32_copies_wait();
            t32_round_in_place<T32_KEYS>(Ks);
            t32_tiles_ready();
        } else if (next) {
            /* the other buffer's readers (the previous tile's products) have all waited for
             * them before the barrier that ended that iteration */
            wg_tile_load<T32_KEYS>(Ks0 + (b ^ 1) * T32_K_BYTES, qbase + C, C3, k0 + T32_KEYS, T);
            asm volatile("cp.async.commit_group;" ::: "memory");
            t32_transposed_fetch(vnext, qbase + 2 * C, C3, k0 + T32_KEYS, T);
        }

        float s[16];
        wg_fence();
        t32_product_xyt(s, Qs, Ks);
        wg_commit_and_wait();

        t32_forward_tile<false>(o, m, l, s, Vt, k0, wrow0, g, t, scale_log2);

        if (next) {
            asm volatile("cp.async.wait_group 0;" ::: "memory");
            t32_round_in_place<T32_KEYS>(Ks0 + (b ^ 1) * T32_K_BYTES);
            t32_transposed_store(Vt0 + (b ^ 1) * T32_VT_BYTES, vnext);
            t32_tiles_ready();
        }
    }

    wg_forward_store(out, lse, hr, o, m, l, wrow0, g, t, T, C, scale_log2);
#else
    __trap();
#endif
}

/*
 * The forward with Q in registers (the A operand of S = Q K^T: no shared-memory reads of Q,
 * which the SS form re-reads for every key tile) and K, V through registers into shared memory
 * rounded on the way (no cp.async and no read-back pass): Nsight Compute found the SS kernel
 * bound by the shared-memory pipe.  Shared memory: K and V^T, 32 KiB.
 */
#define T32_FWD_RQ_SMEM (T32_K_BYTES + T32_VT_BYTES + 1024)
__global__ static void __launch_bounds__(WG_THREADS, 2)
flash_forward_wgmma_tf32_rq(float *out, float *lse, const float *qkv, int T, int C, int NH,
                            float scale_log2)
{
#if WG_HAVE_WGMMA
    const unsigned Ks = wg_smem_base(), Vt = Ks + T32_K_BYTES;
    const head_rows hr = head_of_block(T, C, NH, T32_HS);
    const int q0 = (gridDim.x - 1 - blockIdx.x) * T32_ROWS;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
    const int wrow0 = q0 + warp * 16;
    const size_t C3 = hr.C3;
    const float *qbase = qkv + hr.qkv_off;
    const int kend = min(T, q0 + T32_ROWS);

    uint32_t qa[T32_HS / 8][4];
    t32_rows_to_a(qa, qbase, C3, wrow0, T);

    float o[64];
#pragma unroll
    for (int i = 0; i < 64; i++)
        o[i] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}; /* m in raw score units */

    for (int k0 = 0; k0 < kend; k0 += T32_KEYS) {
        {
            t32_krows kx;
            t32_rows vx;
            t32_krows_fetch(kx, qbase + C, C3, k0, T);
            t32_transposed_fetch(vx, qbase + 2 * C, C3, k0, T);
            __syncthreads(); /* every thread has waited for the previous tile's products */
            t32_krows_store(Ks, kx);
            t32_transposed_store(Vt, vx);
            t32_tiles_ready();
        }

        float s[16];
        wg_fence();
        t32_product_rkt(s, qa, Ks);
        wg_commit_and_wait();

        t32_forward_tile<false>(o, m, l, s, Vt, k0, wrow0, g, t, scale_log2);
    }

    wg_forward_store(out, lse, hr, o, m, l, wrow0, g, t, T, C, scale_log2);
#else
    __trap();
#endif
}


/*
 * dq (and delta), as flash_backward_dq_tc<float, 128, 1, 32, 1>: 64 queries, key tiles of 32.
 * Shared: Q, dO (64-row quarters), K, V (32-row quarters) and K^T (for dQ += dS K), all
 * rounded: 112 KiB.  Per key tile: S = Q K^T, dP = dO V^T, dS = P (dP - delta), dQ += dS K.
 */
#define T32_DQ1_SMEM (2 * T32_Q_BYTES + 3 * T32_K_BYTES + 1024)
__global__ static void __launch_bounds__(WG_THREADS)
flash_backward_dq_wgmma_tf32(float *dqkv, float *delta, const float *dout, const float *qkv,
                             const float *out, const float *lse, int T, int C, int NH,
                             float scale, float scale_log2)
{
#if WG_HAVE_WGMMA
    const unsigned Qs = wg_smem_base(), dOs = Qs + T32_Q_BYTES, Ks = dOs + T32_Q_BYTES,
                   Vs = Ks + T32_K_BYTES, Kt = Vs + T32_K_BYTES;
    __shared__ float Dsh[T32_ROWS];
    const head_rows hr = head_of_block(T, C, NH, T32_HS);
    const int q0 = (gridDim.x - 1 - blockIdx.x) * T32_ROWS;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
    const int wrow0 = q0 + warp * 16;
    const size_t C3 = hr.C3;
    const float *qbase = qkv + hr.qkv_off;

    wg_tile_load<T32_ROWS>(Qs, qbase, C3, q0, T);
    wg_tile_load<T32_ROWS>(dOs, dout + hr.tok_off, C, q0, T);
    rows_delta<float, T32_HS, 2, 4>(Dsh, delta, dout, out, hr, q0, T, C); /* while they fly */
    t32_copies_wait();
    t32_round_in_place<T32_ROWS>(Qs); /* made visible with the first key tile */
    t32_round_in_place<T32_ROWS>(dOs);
    __syncthreads();
    float dl[2], ls[2];
    wg_row_stats(dl, ls, Dsh + warp * 16, lse, hr, wrow0, g, T);
    float dq[64];
#pragma unroll
    for (int i = 0; i < 64; i++)
        dq[i] = 0.0f;

    const int kend = min(T, q0 + T32_ROWS);
    for (int k0 = 0; k0 < kend; k0 += T32_KEYS) {
        __syncthreads(); /* every thread has waited for the previous tile's products */
        wg_tile_load<T32_KEYS>(Ks, qbase + C, C3, k0, T);
        wg_tile_load<T32_KEYS>(Vs, qbase + 2 * C, C3, k0, T);
        t32_transposed_load(Kt, qbase + C, C3, k0, T); /* while K's and V's copies fly */
        t32_copies_wait();
        t32_round_in_place<T32_KEYS>(Ks);
        t32_round_in_place<T32_KEYS>(Vs);
        t32_tiles_ready();

        float s[16], dp[16];
        wg_fence();
        t32_product_xyt(s, Qs, Ks);
        t32_product_xyt(dp, dOs, Vs);
        wg_commit_and_wait();

        t32_dq_tile(dq, s, dp, Kt, k0, wrow0, g, t, ls, dl, scale_log2);
    }
    wg_store_dq(dqkv, hr, dq, wrow0, g, t, T, scale);
#else
    __trap();
#endif
}

/*
 * dk, dv, as flash_backward_dkv_tc<float, 128, 4, 32, 1>: 64 keys, query tiles of 32 from the
 * block's first key.  Shared: K, V (64-row quarters), Q, dO (32-row quarters), Q^T and dO^T
 * (for dK += dS^T Q, dV += P^T dO), all rounded: 128 KiB (one block an SM).  Per query tile:
 * S^T = K Q^T, dP^T = V dO^T, P^T, dS^T; dV += P^T dO, dK += dS^T Q.
 */
#define T32_DKV1_SMEM (2 * T32_Q_BYTES + 4 * T32_K_BYTES + 1024)
__global__ static void __launch_bounds__(WG_THREADS)
flash_backward_dkv_wgmma_tf32(float *dqkv, const float *delta, const float *dout,
                              const float *qkv, const float *lse, int T, int C, int NH,
                              float scale, float scale_log2)
{
#if WG_HAVE_WGMMA
    const unsigned Ks = wg_smem_base(), Vs = Ks + T32_Q_BYTES, Qs = Vs + T32_Q_BYTES,
                   dOs = Qs + T32_K_BYTES, Qt = dOs + T32_K_BYTES, dOt = Qt + T32_K_BYTES;
    __shared__ float Ls[T32_KEYS], Ds[T32_KEYS]; /* the query tile's lse' and delta */
    const head_rows hr = head_of_block(T, C, NH, T32_HS);
    const int k0 = blockIdx.x * T32_ROWS;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
    const int wkey0 = k0 + warp * 16;
    const size_t C3 = hr.C3;
    const float *qbase = qkv + hr.qkv_off, *dobase = dout + hr.tok_off;

    wg_tile_load<T32_ROWS>(Ks, qbase + C, C3, k0, T);
    wg_tile_load<T32_ROWS>(Vs, qbase + 2 * C, C3, k0, T);
    t32_copies_wait();
    t32_round_in_place<T32_ROWS>(Ks); /* made visible with the first query tile */
    t32_round_in_place<T32_ROWS>(Vs);
    float dk[64], dv[64];
#pragma unroll
    for (int i = 0; i < 64; i++)
        dk[i] = dv[i] = 0.0f;
    const int key[2] = {wkey0 + g, wkey0 + g + 8};

    for (int q0 = k0; q0 < T; q0 += T32_KEYS) {
        __syncthreads(); /* every thread has waited for the previous tile's products */
        wg_tile_load<T32_KEYS>(Qs, qbase, C3, q0, T);
        wg_tile_load<T32_KEYS>(dOs, dobase, C, q0, T);
        t32_transposed_load(Qt, qbase, C3, q0, T); /* while Q's and dO's copies fly */
        t32_transposed_load(dOt, dobase, C, q0, T);
        if (threadIdx.x < T32_KEYS) {
            const int q = q0 + threadIdx.x;
            /* queries past T: probability 0 (exp2(-inf)), and no delta */
            Ls[threadIdx.x] = q < T ? lse[hr.stat_off + q] * LOG2E_F : INFINITY;
            Ds[threadIdx.x] = q < T ? delta[hr.stat_off + q] : 0.0f;
        }
        t32_copies_wait();
        t32_round_in_place<T32_KEYS>(Qs);
        t32_round_in_place<T32_KEYS>(dOs);
        t32_tiles_ready();

        float st[16], dpt[16]; /* S^T, dP^T: rows the warp's keys, columns the tile's queries */
        wg_fence();
        t32_product_xyt(st, Ks, Qs);
        t32_product_xyt(dpt, Vs, dOs);
        wg_commit_and_wait();

        const bool diag = q0 < wkey0 + 15; /* some query of the tile precedes some key */
        uint32_t pt[T32_KEYS / 8][4], dst[T32_KEYS / 8][4];
#pragma unroll
        for (int j = 0; j < T32_KEYS / 8; j++) {
            const int qi = 8 * j + 2 * t;
            float p[4], d[4];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float lq = Ls[qi + (e & 1)], dq = Ds[qi + (e & 1)];
                p[e] = exp2_fast(fmaf(st[4 * j + e], scale_log2, -lq));
                if (diag && q0 + qi + (e & 1) < key[e >> 1])
                    p[e] = 0.0f;
                d[e] = p[e] * (dpt[4 * j + e] - dq);
            }
            t32_pack_chunk(pt, j, p);
            t32_pack_chunk(dst, j, d);
        }
        wg_fence();
        t32_product_py(dv, pt, dOt);
        t32_product_py(dk, dst, Qt);
        wg_commit_and_wait();
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        if (key[r] >= T)
            continue;
        float *krow = dqkv + hr.qkv_off + (size_t)key[r] * C3 + C;
        wg_store_row(krow, dk, r, t, scale);
        wg_store_row(krow + C, dv, r, t, 1.0f);
    }
#else
    __trap();
#endif
}

/* elements whose bits differ, and those of a that are not finite */
static void count_differing(const std::vector<float> &a, const std::vector<float> &ref,
                            size_t first, size_t count, size_t step, size_t *differ,
                            size_t *not_finite)
{
    *differ = *not_finite = 0;
    for (size_t i = first; i < a.size(); i += step)
        for (size_t k = i; k < i + count && k < a.size(); k++) {
            *differ += memcmp(&a[k], &ref[k], sizeof(float)) != 0;
            *not_finite += !std::isfinite(a[k]);
        }
}

int main(int argc, char **argv)
{
    int B, T, C, NH;
    if (!attn_bench_shape(argc, argv, "attn_wgmma_tf32", T32_HS, &B, &T, &C, &NH))
        return 2;
    const size_t n_tok = (size_t)B * T * C, n_qkv = 3 * n_tok, n_stat = (size_t)B * NH * T;
    const float scale = 1.0f / sqrtf((float)T32_HS), scale_log2 = LOG2E_F * scale;
    typedef attn_tiles<float> tiles;
    /* [0] the backend's mma.sync kernels, [1] wgmma */
    float *qkv, *dout, *out[2], *lse[2], *dqkv[2], *delta[2];
    CHECK_CUDA(cudaMalloc(&qkv, n_qkv * sizeof(float)));
    CHECK_CUDA(cudaMalloc(&dout, n_tok * sizeof(float)));
    for (int k = 0; k < 2; k++) {
        CHECK_CUDA(cudaMalloc(&out[k], n_tok * sizeof(float)));
        CHECK_CUDA(cudaMalloc(&lse[k], n_stat * sizeof(float)));
        CHECK_CUDA(cudaMalloc(&dqkv[k], n_qkv * sizeof(float)));
        CHECK_CUDA(cudaMalloc(&delta[k], n_stat * sizeof(float)));
    }
    std::vector<float> h(n_qkv);
    unsigned long long seed = 12345;
    for (float &x : h)
        x = host_uniform(&seed);
    CHECK_CUDA(cudaMemcpy(qkv, h.data(), n_qkv * sizeof(float), cudaMemcpyHostToDevice));
    for (size_t i = 0; i < n_tok; i++)
        h[i] = host_uniform(&seed);
    CHECK_CUDA(cudaMemcpy(dout, h.data(), n_tok * sizeof(float), cudaMemcpyHostToDevice));
    cudaStream_t st;
    CHECK_CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    /* outputs poisoned (0xff: NaN) first, so an element a kernel leaves unwritten shows; on the
     * kernels' stream (a non-blocking stream does not wait for the legacy stream's memset: a
     * kernel that writes early, as dq writes delta, could be overwritten by its own poison) */
    auto poison = [&](int k) {
        CHECK_CUDA(cudaMemsetAsync(out[k], 0xff, n_tok * sizeof(float), st));
        CHECK_CUDA(cudaMemsetAsync(lse[k], 0xff, n_stat * sizeof(float), st));
        CHECK_CUDA(cudaMemsetAsync(dqkv[k], 0xff, n_qkv * sizeof(float), st));
        CHECK_CUDA(cudaMemsetAsync(delta[k], 0xff, n_stat * sizeof(float), st));
    };

    /* both backwards read the reference forward's out and lse */
    /* k 0: mma.sync; 1: wgmma; 2: wgmma pipelined; 3: Q in registers; 4, 5: warp-specialized
     * with one or two producer warpgroups (2-5 into out[1], lse[1]) */
    auto fwd = [&](int k) {
        return k == 0 ? attn_forward_launch<float, T32_HS, tiles::fwd>(st, out[0], lse[0], qkv, B,
                                                                        T, C, NH, scale_log2)
               : k == 1 ? launch_with_smem(flash_forward_wgmma_tf32<0>,
                                           attn_grid(B, T, NH, T32_ROWS), WG_THREADS,
                                           (size_t)T32_FWD_SMEM(0), st, out[1], lse[1], qkv, T, C,
                                           NH, scale_log2)
               : k == 4 ? launch_with_smem(flash_forward_wgmma_tf32_ws<1>,
                                           attn_grid(B, T, NH, 2 * T32_ROWS), 3 * WG_THREADS,
                                           (size_t)T32_WS_SMEM, st, out[1], lse[1], qkv, T, C, NH,
                                           scale_log2)
               : k == 5 ? launch_with_smem(flash_forward_wgmma_tf32_ws<2>,
                                           attn_grid(B, T, NH, 2 * T32_ROWS), 4 * WG_THREADS,
                                           (size_t)T32_WS_SMEM, st, out[1], lse[1], qkv, T, C, NH,
                                           scale_log2)
               : k == 2 ? launch_with_smem(flash_forward_wgmma_tf32<1>,
                                           attn_grid(B, T, NH, T32_ROWS), WG_THREADS,
                                           (size_t)T32_FWD_SMEM(1), st, out[1], lse[1], qkv, T, C,
                                           NH, scale_log2)
                        : launch_with_smem(flash_forward_wgmma_tf32_rq,
                                           attn_grid(B, T, NH, T32_ROWS), WG_THREADS,
                                           (size_t)T32_FWD_RQ_SMEM, st, out[1], lse[1], qkv, T, C,
                                           NH, scale_log2);
    };
    /* k 0: mma.sync; 1: wgmma; 2: warp-specialized, 3: with two producer warpgroups (into
     * dqkv[1], delta[1]) */
    auto dq = [&](int k) {
        return k == 0 ? attn_dq_launch<float, T32_HS, tiles::dq>(st, dqkv[0], delta[0], dout, qkv,
                                                                 out[0], lse[0], B, T, C, NH,
                                                                 scale, scale_log2)
               : k == 2 ? attn_wgmma_tf32_dq_launch(st, dqkv[1], delta[1], dout, qkv, out[0],
                                                    lse[0], B, T, C, NH, scale, scale_log2)
               : k == 3 ? launch_with_smem(flash_backward_dq_wgmma_tf32_ws<2>,
                                           attn_grid(B, T, NH, 2 * T32_ROWS), 4 * WG_THREADS,
                                           (size_t)T32_DQ_SMEM, st, dqkv[1], delta[1], dout, qkv,
                                           out[0], lse[0], T, C, NH, scale, scale_log2)
                      : launch_with_smem(flash_backward_dq_wgmma_tf32,
                                         attn_grid(B, T, NH, T32_ROWS), WG_THREADS,
                                         (size_t)T32_DQ1_SMEM, st, dqkv[1], delta[1], dout, qkv,
                                         out[0], lse[0], T, C, NH, scale, scale_log2);
    };
    /* k 0: mma.sync; 1: wgmma; 2: warp-specialized (the backend's: two producer warpgroups),
     * 3: with one (into dqkv[1]; all read delta[0]) */
    auto dkv = [&](int k) {
        return k == 0 ? attn_dkv_launch<float, T32_HS, tiles::dkv>(st, dqkv[0], delta[0], dout,
                                                                   qkv, lse[0], B, T, C, NH,
                                                                   scale, scale_log2)
               : k == 2 ? attn_wgmma_tf32_dkv_launch(st, dqkv[1], delta[0], dout, qkv, lse[0], B,
                                                     T, C, NH, scale, scale_log2)
               : k == 3 ? launch_with_smem(flash_backward_dkv_wgmma_tf32_ws<1>,
                                           attn_grid(B, T, NH, T32_ROWS), 3 * WG_THREADS,
                                           (size_t)T32_DKV_SMEM, st, dqkv[1], delta[0], dout, qkv,
                                           lse[0], T, C, NH, scale, scale_log2)
                      : launch_with_smem(flash_backward_dkv_wgmma_tf32,
                                         attn_grid(B, T, NH, T32_ROWS), WG_THREADS,
                                         (size_t)T32_DKV1_SMEM, st, dqkv[1], delta[1], dout, qkv,
                                         lse[0], T, C, NH, scale, scale_log2);
    };
    auto all = [&](int k) {
        CHECK_CUDA(fwd(k));
        CHECK_CUDA(dq(k));
        CHECK_CUDA(dkv(k));
        CHECK_CUDA(cudaStreamSynchronize(st));
    };
    for (int k = 0; k < 2; k++) {
        poison(k);
        all(k);
    }
    const std::vector<float> o0 = fetch(out[0], n_tok), o1 = fetch(out[1], n_tok);
    const std::vector<float> l0 = fetch(lse[0], n_stat), l1 = fetch(lse[1], n_stat);
    const std::vector<float> g0 = fetch(dqkv[0], n_qkv), g1 = fetch(dqkv[1], n_qkv);
    const std::vector<float> d0 = fetch(delta[0], n_stat), d1 = fetch(delta[1], n_stat);
    poison(1);
    all(1);
    const bool repeat = fetch(out[1], n_tok) == o1 && fetch(lse[1], n_stat) == l1 &&
                        fetch(dqkv[1], n_qkv) == g1 && fetch(delta[1], n_stat) == d1;
    /* the pipelined forward */
    poison(1);
    CHECK_CUDA(fwd(2));
    CHECK_CUDA(cudaStreamSynchronize(st));
    const std::vector<float> op = fetch(out[1], n_tok), lp = fetch(lse[1], n_stat);
    poison(1);
    CHECK_CUDA(fwd(3));
    CHECK_CUDA(cudaStreamSynchronize(st));
    const std::vector<float> orq = fetch(out[1], n_tok), lrq = fetch(lse[1], n_stat);
    /* the warp-specialized forwards, whose stages are handed over by barriers: run 10 times
     * each, every run compared with the first (a race shows as a run that differs) */
    auto ws_runs = [&](int k, std::vector<float> &o_first, std::vector<float> &l_first) {
        int same = 0;
        for (int rep = 0; rep < 10; rep++) {
            poison(1);
            CHECK_CUDA(fwd(k));
            CHECK_CUDA(cudaStreamSynchronize(st));
            std::vector<float> o = fetch(out[1], n_tok), l = fetch(lse[1], n_stat);
            if (rep == 0) {
                o_first = o;
                l_first = l;
            }
            same += o == o_first && l == l_first;
        }
        return same;
    };
    std::vector<float> ows, lws, ows2, lws2;
    const int ws_same = ws_runs(4, ows, lws), ws2_same = ws_runs(5, ows2, lws2);
    /* the warp-specialized dq, 10 times, each run against the first */
    std::vector<float> gws, dws;
    int dq_same = 0;
    std::vector<float> gws2;
    for (int rep = 0; rep < 20; rep++) { /* 10 runs each of k 2 and 3, against k 2's first */
        poison(1);
        CHECK_CUDA(dq(2 + rep % 2));
        CHECK_CUDA(cudaStreamSynchronize(st));
        std::vector<float> gq = fetch(dqkv[1], n_qkv), dd = fetch(delta[1], n_stat);
        if (rep == 0) {
            gws = gq;
            dws = dd;
        }
        if (rep == 1)
            gws2 = gq;
        /* bit for bit (memcmp: the k and v columns are the poison's NaNs, which == never equals) */
        const bool same = memcmp(gq.data(), gws.data(), gq.size() * sizeof(float)) == 0 &&
                          memcmp(dd.data(), dws.data(), dd.size() * sizeof(float)) == 0;
        dq_same += same;
        if (!same) { /* where: elements of dq and delta against the mma.sync kernel's */
            size_t dg, dn, dd2, dn2, first = (size_t)-1;
            count_differing(gq, g0, 0, (size_t)C, 3 * (size_t)C, &dg, &dn);
            count_differing(dd, d0, 0, n_stat, n_stat, &dd2, &dn2);
            for (size_t i = 0; i < gq.size() && first == (size_t)-1; i += 3 * (size_t)C)
                for (size_t k = i; k < i + (size_t)C; k++)
                    if (memcmp(&gq[k], &g0[k], 4) != 0) { first = k; break; }
            printf("dq run %d: %zu dq elements differ (%zu not finite), %zu delta; first at token %zu "
                   "column %zu\n", rep, dg, dn, dd2, first == (size_t)-1 ? 0 : first / (3 * (size_t)C),
                   first == (size_t)-1 ? 0 : first % (3 * (size_t)C));
        }
    }

    /* the warp-specialized dk/dv, 10 times, each run against the first */
    std::vector<float> gkv, gkv2;
    int dkv_same = 0;
    for (int rep = 0; rep < 20; rep++) { /* 10 runs each of k 2 and 3, against k 2's first */
        poison(1);
        CHECK_CUDA(dkv(2 + rep % 2));
        CHECK_CUDA(cudaStreamSynchronize(st));
        std::vector<float> g = fetch(dqkv[1], n_qkv);
        if (rep == 0)
            gkv = g;
        if (rep == 1)
            gkv2 = g;
        dkv_same += memcmp(g.data(), gkv.data(), g.size() * sizeof(float)) == 0;
    }

    cudaDeviceProp prop;
    CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
    printf("# attention in TF32, wgmma (bench/attn_wgmma_tf32.cu) against the backend's mma.sync, "
           "%s, B %d T %d C %d heads %d\n\n", prop.name, B, T, C, NH);
    printf("| output | elements | bits differing | not finite | max rel. diff |\n"
           "|---|---|---|---|---|\n");
    struct row {
        const char *name;
        const std::vector<float> *a, *ref;
        size_t first, count, step;
    } rows[] = {{"out", &o1, &o0, 0, n_tok, n_tok},
                {"lse", &l1, &l0, 0, n_stat, n_stat},
                {"out (pipelined)", &op, &o0, 0, n_tok, n_tok},
                {"lse (pipelined)", &lp, &l0, 0, n_stat, n_stat},
                {"out (Q in registers)", &orq, &o0, 0, n_tok, n_tok},
                {"lse (Q in registers)", &lrq, &l0, 0, n_stat, n_stat},
                {"out (warp-specialized)", &ows, &o0, 0, n_tok, n_tok},
                {"lse (warp-specialized)", &lws, &l0, 0, n_stat, n_stat},
                {"out (two producers)", &ows2, &o0, 0, n_tok, n_tok},
                {"lse (two producers)", &lws2, &l0, 0, n_stat, n_stat},
                {"dq", &g1, &g0, 0, (size_t)C, 3 * (size_t)C},
                {"dq (warp-specialized)", &gws, &g0, 0, (size_t)C, 3 * (size_t)C},
                {"delta (warp-specialized)", &dws, &d0, 0, n_stat, n_stat},
                {"dq (two producers)", &gws2, &g0, 0, (size_t)C, 3 * (size_t)C},
                {"dk", &g1, &g0, (size_t)C, (size_t)C, 3 * (size_t)C},
                {"dv", &g1, &g0, 2 * (size_t)C, (size_t)C, 3 * (size_t)C},
                {"dk (warp-specialized)", &gkv, &g0, (size_t)C, (size_t)C, 3 * (size_t)C},
                {"dv (warp-specialized)", &gkv, &g0, 2 * (size_t)C, (size_t)C, 3 * (size_t)C},
                {"dk (one producer)", &gkv2, &g0, (size_t)C, (size_t)C, 3 * (size_t)C},
                {"dv (one producer)", &gkv2, &g0, 2 * (size_t)C, (size_t)C, 3 * (size_t)C},
                {"delta", &d1, &d0, 0, n_stat, n_stat}};
    bool close = true, identical = true;
    for (const row &r : rows) {
        size_t differ, not_finite;
        count_differing(*r.a, *r.ref, r.first, r.count, r.step, &differ, &not_finite);
        const double rel = rel_diff(*r.a, *r.ref);
        const size_t n = r.a->size() / r.step * r.count;
        printf("| %s | %zu | %zu | %zu | %.2e |\n", r.name, n, differ, not_finite, rel);
        close = close && not_finite == 0 && rel < 2e-3;
        identical = identical && differ == 0;
    }
    printf("\nwgmma repeatable (a second run, bit for bit): %s; warp-specialized: %d of 10 runs as "
           "the first, two producers: %d of 10, warp-specialized dq (both): %d of 20, dk/dv (both): %d of "
           "20\n\n", repeat ? "yes" : "NO", ws_same, ws2_same, dq_same, dkv_same);

    const double pair = (double)B * NH * T * (T + 1) / 2.0 * 2 * T32_HS;
    const double kflops[11] = {2 * pair, 2 * pair, 2 * pair, 2 * pair, 2 * pair, 3 * pair,
                               3 * pair, 3 * pair, 4 * pair, 4 * pair, 4 * pair};
    const char *kname[11] = {"forward", "forward (pipelined)", "forward (Q in registers)",
                             "forward (warp-specialized)", "forward (two producers)",
                             "dq (+delta)", "dq (+delta, warp-specialized)",
                             "dq (+delta, two producers)", "dk, dv",
                             "dk, dv (warp-specialized)", "dk, dv (one producer)"};
    printf("| kernel | mma.sync ms | wgmma ms | speedup | wgmma TFLOP/s |\n|---|---|---|---|---|\n");
    for (int i = 0; i < 11; i++) {
        double ms[2];
        for (int k = 0; k < 2; k++)
            ms[k] = median_ms(st, 30, [&]() {
                return i <= 4 ? fwd(k ? i + 1 : 0)
                       : i == 5 ? dq(k)
                       : i == 6 ? dq(2 * k)
                       : i == 7 ? dq(3 * k)
                       : i == 8 ? dkv(k)
                       : i == 9 ? dkv(2 * k)
                                : dkv(3 * k);
            });
        printf("| %s | %.4f | %.4f | %.2fx | %.1f |\n", kname[i], ms[0], ms[1], ms[0] / ms[1],
               kflops[i] / ms[1] / 1e9);
    }
    const bool ok = close && repeat && ws_same == 10 && ws2_same == 10 && dq_same == 20 &&
                    dkv_same == 20;
    printf("\n%s\n", !ok ? "DISAGREES with the backend, or does not repeat"
                     : identical ? "bit-identical to the backend's mma.sync kernels"
                                 : "agrees to the TF32 bound, not bit for bit");
    CHECK_CUDA(cudaStreamDestroy(st));
    CHECK_CUDA(cudaFree(qkv));
    CHECK_CUDA(cudaFree(dout));
    for (int k = 0; k < 2; k++) {
        CHECK_CUDA(cudaFree(out[k]));
        CHECK_CUDA(cudaFree(lse[k]));
        CHECK_CUDA(cudaFree(dqkv[k]));
        CHECK_CUDA(cudaFree(delta[k]));
    }
    return ok ? 0 : 1;
}
