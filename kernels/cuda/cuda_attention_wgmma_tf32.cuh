/*
 * cuda_attention_wgmma_tf32.cuh -- the causal attention in TF32 (fp32 storage, TF32 products)
 * on Hopper's warpgroup MMA, head size 128: forward, dq and dk/dv, warp-specialized
 * (FlashAttention-3's shape without TMA: a producer warpgroup that copies and prepares the
 * streamed tiles, two consumer warpgroups that multiply).  Single-warpgroup forms were slower
 * than the mma.sync kernels (bench/attn_wgmma_tf32.cu, bench/results/2026-11-27c-h100-tf32-wgmma):
 * the chain of each tile (copy, round, barrier, products, softmax) stays exposed there.
 *
 * The same results as the mma.sync kernels of attn_tiles<float> bit for bit: key (query) tiles of
 * 32, the same online softmax (wg_softmax_tile), every operand rounded to TF32 with cvt.rna
 * before the products as the mma.sync kernels round theirs, the products cut in the same k
 * steps of 8 in the same order.  bench/attn_wgmma_tf32.cu and test_cuda check it.
 *
 * What TF32 changes against the bf16 kernels (cuda_attention_wgmma.cuh):
 *  - wgmma takes TF32 operands K-major only (no transposed B): Q and K are K-major as they
 *    are (S = Q K^T), but P V needs V^T, the head dimension as rows and the keys contiguous.
 *  - P goes from the accumulator into the A operand: for a k step of 8 keys, the A layout holds
 *    key k at position k / 2 + 4 (k % 2) (a0 = c0, a1 = c2, a2 = c1, a3 = c3: mma_op<float>'s
 *    a_from_c), so V^T's columns hold the keys in that order within each group of 8.
 *  - wgmma reads fp32 words and uses their TF32 part, so every tile is rounded in shared memory
 *    before the products read it, and P as it is packed.
 *  - Key tiles of 32, as attn_tiles<float>::fwd, so the online softmax sees the same tiles:
 *    S is m64n32 (16 registers), P V four m64n128k8 steps.
 * Tiles: 64 x 128 fp32 as four 64 x 32 quarters (the head dimension split at 32: a row of a
 * quarter is one 128-byte swizzle row), 32-row tiles the same way, V^T 128 x 32.
 */
#ifndef AEBENCH_CUDA_ATTENTION_WGMMA_TF32_CUH
#define AEBENCH_CUDA_ATTENTION_WGMMA_TF32_CUH

#include "cuda_attention_wgmma.cuh"

#define T32_HS 128
#define T32_ROWS 64                 /* queries a block */
#define T32_KEYS 32                 /* keys a tile */
#define T32_Q_QUARTER (64 * 128)    /* bytes of a 64-row quarter */
#define T32_K_QUARTER (32 * 128)    /* bytes of a 32-row quarter */
#define T32_Q_BYTES (4 * T32_Q_QUARTER)
#define T32_K_BYTES (4 * T32_K_QUARTER)
#define T32_VT_BYTES (128 * 128)

#if WG_HAVE_WGMMA

static __device__ __forceinline__ float t32_round(float x)
{
    return __uint_as_float(mma_op<float>::tf32(x));
}

/* A tile of ROWS fp32 rows (wg_offset's parts of ROWS x 128 bytes) rounded to TF32 in place by
 * NT threads, each the chunks tid, tid + NT, ...: wg_tile_load's, so that a thread rounds what
 * it copied (its own copies are visible to it without a barrier; where they are not its own,
 * the caller waits for every copier first).  The caller's proxy fence and barrier make them
 * visible to wgmma and to the other threads. */
template <int ROWS, int NT = WG_THREADS>
static __device__ __forceinline__ void t32_round_in_place(unsigned tile, int tid = threadIdx.x)
{
#pragma unroll
    for (int i = 0; i < ROWS * 32 / NT; i++) {
        const int c = tid + NT * i, r = c >> 5, ch = c & 31;
        const unsigned a = tile + wg_offset(r, ch, ROWS * 128);
        float4 v;
        asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
                     : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                     : "r"(a));
        asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(a), "f"(t32_round(v.x)),
                     "f"(t32_round(v.y)), "f"(t32_round(v.z)), "f"(t32_round(v.w))
                     : "memory");
    }
}

#define WG_F16(a) WG_F8(a, 0), WG_F8(a, 8)

/* s (64 x 32) += Q (64 x 8, K-major) K^T (K 32 x 8, K-major), TF32; scale_d 0 starts from 0 */
static __device__ __forceinline__ void t32_m64n32k8_ss(float (&s)[16], uint64_t dq, uint64_t dk,
                                                       int scale_d)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
                 "%16, %17, p, 1, 1;\n}\n"
                 : WG_F16(s)
                 : "l"(dq), "l"(dk), "r"(scale_d));
}

/* o (64 x 128) += P (64 x 8, registers) V (8 x 128, as V^T: K-major), TF32 */
static __device__ __forceinline__ void t32_m64n128k8_rs(float (&o)[64], const uint32_t (&p)[4],
                                                        uint64_t dv)
{
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 " WG_D64 ", "
                 "{%64, %65, %66, %67}, %68, 1, 1, 1;\n"
                 : WG_F64(o)
                 : "r"(p[0]), "r"(p[1]), "r"(p[2]), "r"(p[3]), "l"(dv));
}

/* s (64 x 32) = X Y^T over the head dimension: X a tile of 64-row quarters, Y of 32-row
 * quarters, both rounded; committed, not waited for */
static __device__ __forceinline__ void t32_product_xyt(float (&s)[16], unsigned x, unsigned y)
{
#pragma unroll
    for (int kk = 0; kk < T32_HS / 8; kk++) {
        const unsigned off = (kk & 3) * 32; /* 8 elements of 4 bytes a step */
        t32_m64n32k8_ss(s, wg_desc(x + (kk >> 2) * T32_Q_QUARTER + off, 16, 1024),
                        wg_desc(y + (kk >> 2) * T32_K_QUARTER + off, 16, 1024), kk > 0);
    }
}

/* acc (64 x 128) += P Y over 32 rows of Y, Y given as its transpose yt (t32_transposed_load) */
static __device__ __forceinline__ void t32_product_py(float (&acc)[64],
                                                      const uint32_t (&p)[T32_KEYS / 8][4],
                                                      unsigned yt)
{
#pragma unroll
    for (int j = 0; j < T32_KEYS / 8; j++)
        t32_m64n128k8_rs(acc, p[j], wg_desc(yt + j * 32, 16, 1024));
}

/* Chunk j (8 columns, the accumulator's order) of values v into the A operand of k step j:
 * a0 = c0, a1 = c2, a2 = c1, a3 = c3 (mma_op<float>::a_from_c), rounded to TF32 */
static __device__ __forceinline__ void t32_pack_chunk(uint32_t (&p)[T32_KEYS / 8][4], int j,
                                                      const float (&v)[4])
{
    p[j][0] = mma_op<float>::tf32(v[0]);
    p[j][1] = mma_op<float>::tf32(v[2]);
    p[j][2] = mma_op<float>::tf32(v[1]);
    p[j][3] = mma_op<float>::tf32(v[3]);
}

/* The forward's step after S = Q K^T of key tile k0: the online softmax of s, O rescaled
 * (SKIP_UNIT: not where no row of the warp has a new max, x 1 being exact), O += P V over the
 * tile (vt: V^T); waited for */
template <bool SKIP_UNIT>
static __device__ __forceinline__ void t32_forward_tile(float (&o)[64], float (&m)[2], float (&l)[2],
                                                        float (&s)[16], unsigned vt, int k0, int wrow0,
                                                        int g, int t, float scale_log2)
{
    float alpha[2];
    uint32_t p[T32_KEYS / 8][4];
    wg_softmax_tile<T32_KEYS>(s, m, l, alpha, k0, wrow0, g, t, scale_log2,
                              [&](int j, const float(&pv)[4]) { t32_pack_chunk(p, j, pv); });
    if (!SKIP_UNIT || __any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f))
        wg_rescale(o, alpha);
    wg_fence();
    t32_product_py(o, p, vt);
    wg_commit_and_wait();
}

/* dq's step after S = Q K^T and dP = dO V^T of key tile k0: dS = P (dP - delta), rounded
 * into the A operand, and dQ += dS K over the tile (kt: K^T); waited for */
static __device__ __forceinline__ void t32_dq_tile(float (&dq)[64], const float (&s)[16], const float (&dp)[16],
                                                   unsigned kt, int k0, int wrow0, int g, int t,
                                                   const float (&ls)[2], const float (&dl)[2], float scale_log2)
{
    const bool diag = k0 + T32_KEYS - 1 > wrow0;
    uint32_t ds[T32_KEYS / 8][4];
#pragma unroll
    for (int j = 0; j < T32_KEYS / 8; j++) {
        float v[4];
        wg_ds_chunk(v, s, dp, j, k0, wrow0, g, t, diag, ls, dl, scale_log2);
        t32_pack_chunk(ds, j, v);
    }
    wg_fence();
    t32_product_py(dq, ds, kt);
    wg_commit_and_wait();
}

#endif /* WG_HAVE_WGMMA */

/*
 * The forward, warp-specialized (FlashAttention-3's shape without TMA): 384 threads, 128
 * queries a block.  Warpgroup 0 is the producer: it copies each key tile's K and V (cp.async,
 * NS tiles ahead, into the stage's raw buffers), rounds K in place and writes V^T rounded, and
 * hands the stage over; warpgroups 1 and 2 are consumers, 64 queries each (Q rounded in shared
 * memory), that multiply and run the online softmax exactly as the other forwards do, so that
 * one's softmax runs under the other's products and neither waits for memory.  (Q in registers
 * does not fit: ptxas gives every thread the launch's 168 registers whatever setmaxnreg says.)
 * Named barriers hand the stages over: full[s] (1 + s: the producer arrives, the consumers
 * wait) and empty[s] (1 + NS + s: the consumers arrive, the producer waits); 1 + 2 NS is the
 * producer's own, 2 + 2 NS + c consumer c's.
 * Shared memory: per stage K (raw, then rounded in place), V raw, V^T: 48 KiB; each consumer's
 * Q 32 KiB.
 */
#define T32_WS_NS 3
#define T32_WS_STAGE (2 * T32_K_BYTES + T32_VT_BYTES)
#define T32_WS_SMEM (T32_WS_NS * T32_WS_STAGE + 2 * T32_Q_BYTES + 1024)

#if WG_HAVE_WGMMA

/* The producer's PT threads (thread p): a key tile's K and V rows into a stage's K and raw-V
 * buffers (cp.async, joining the open group; zeros past T) */
template <int PT>
static __device__ __forceinline__ void t32_ws_copy(unsigned st, const float *qbase, size_t C3,
                                                   int C, int k0, int T, int p)
{
    wg_tile_load<T32_KEYS, PT>(st, qbase + C, C3, k0, T, p);
    wg_tile_load<T32_KEYS, PT>(st + T32_K_BYTES, qbase + 2 * C, C3, k0, T, p);
}

/* A 32-row tile (quarters, raw) into its transpose dst (128 rows of 32 columns, rounded, row k
 * of each group of 8 at column k / 2 + 4 (k % 2): the A operand's order, as in the P Y products),
 * by the producer's PT threads: warp w, lane = row, 16-byte chunks w, w + PT / 32, ... (each
 * transposed row's 32 words land in 32 banks).  WRITE_BACK: the rounded chunks also back into
 * src, by the thread that read them (so src is rounded too, with no barrier between). */
template <int PT, bool WRITE_BACK>
static __device__ __forceinline__ void t32_transpose(unsigned src, unsigned dst, int p)
{
    constexpr int W = PT / 32;
    const int warp = p / 32, key = p % 32;
    const int pos = (key & ~7) | ((key >> 1) & 3) | ((key & 1) << 2);
    float4 x[T32_HS / 4 / W];
#pragma unroll
    for (int i = 0; i < T32_HS / 4 / W; i++) {
        const unsigned a = src + wg_offset(key, warp + W * i, T32_K_QUARTER);
        asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
                     : "=f"(x[i].x), "=f"(x[i].y), "=f"(x[i].z), "=f"(x[i].w)
                     : "r"(a));
        x[i] = make_float4(t32_round(x[i].x), t32_round(x[i].y), t32_round(x[i].z),
                           t32_round(x[i].w));
        if (WRITE_BACK)
            asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(a), "f"(x[i].x),
                         "f"(x[i].y), "f"(x[i].z), "f"(x[i].w)
                         : "memory");
    }
#pragma unroll
    for (int i = 0; i < T32_HS / 4 / W; i++) {
        const int d0 = 4 * (warp + W * i);
        const float e4[4] = {x[i].x, x[i].y, x[i].z, x[i].w};
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int d = d0 + e;
            const unsigned a = dst + d * 128 + ((((pos >> 2) ^ (d & 7)) << 4) | ((pos & 3) << 2));
            asm volatile("st.shared.f32 [%0], %1;" ::"r"(a), "f"(e4[e]) : "memory");
        }
    }
}

/* ... and, once every producer thread's copies are in: K rounded in place, V^T written rounded */
template <int PT>
static __device__ __forceinline__ void t32_ws_prepare(unsigned st, int p)
{
    t32_round_in_place<T32_KEYS, PT>(st, p);
    t32_transpose<PT, false>(st + T32_K_BYTES, st + 2 * T32_K_BYTES, p);
}

/*
 * The stage hand-over of every warp-specialized kernel here, in one place.  NS stages; named
 * barriers full[s] = 1 + s (the producer arrives, the consumers wait), empty[s] = 1 + NS + s
 * (the reverse), the producer's own 1 + 2 NS; PT producer threads, ALL threads in the block.
 *
 * The producer: the prologue copies tiles 0 .. NS-1 (a cp.async group each, empty past the
 * last); per tile it: wait for its copies (groups: the prologue's NS, then one an iteration,
 * iteration i copying tile i + NS - 1 or nothing: tile it is in group it (it < NS) or it + 1,
 * so all but the newest NS - 2 must be complete), the producer's barrier (every thread's copies
 * in), prepare(s, it) (rounding, transposes: plain stores), the proxy fence (for wgmma), arrive
 * on full[s]; then the previous tile's stage, once the consumers are done with it, takes tile
 * it - 1 + NS: tile it was made ready while they worked on it - 1 (waiting for tile it itself
 * there would leave them idle while the next one is prepared).  copy(s, tile) issues one tile's
 * copies into stage s, joining the open group.
 */
template <int NS, int PT, int ALL, typename Copy, typename Prepare>
static __device__ __forceinline__ void t32_ws_produce(int ntiles, Copy copy, Prepare prepare)
{
    for (int j = 0; j < NS; j++) {
        if (j < ntiles)
            copy(j, j);
        asm volatile("cp.async.commit_group;" ::: "memory");
    }
    for (int it = 0; it < ntiles; it++) {
        const int s = it % NS;
        asm volatile("cp.async.wait_group %0;" ::"n"(NS - 2) : "memory");
        named_sync(1 + 2 * NS, PT);
        prepare(s, it);
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        named_arrive(1 + s, ALL);
        const int prev = it - 1, next = prev + NS;
        if (prev >= 0 && next < ntiles) {
            named_sync(1 + NS + prev % NS, ALL);
            copy(prev % NS, next);
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
    }
}

/* The consumers' side: per tile, wait for its stage, body(s, it), then hand the stage back
 * unless no tile is left to take it (the producer waits for exactly those) */
template <int NS, int ALL, typename Body>
static __device__ __forceinline__ void t32_ws_consume(int ntiles, Body body)
{
    for (int it = 0; it < ntiles; it++) {
        const int s = it % NS;
        named_sync(1 + s, ALL);
        body(s, it);
        if (it + NS < ntiles)
            named_arrive(1 + NS + s, ALL);
    }
}

#endif /* WG_HAVE_WGMMA */

/* PW producer warpgroups, then two consumers */
template <int PW>
__global__ static void __launch_bounds__((PW + 2) * WG_THREADS, 1)
flash_forward_wgmma_tf32_ws(float *out, float *lse, const float *qkv, int T, int C, int NH,
                            float scale_log2)
{
#if WG_HAVE_WGMMA
    constexpr int PT = PW * WG_THREADS, ALL = (PW + 2) * WG_THREADS;
    const unsigned base = wg_smem_base();
    /* stage s: K at + 0, V raw at + K_BYTES, V^T at + 2 K_BYTES */
    const head_rows hr = head_of_block(T, C, NH, T32_HS);
    const int q0 = (gridDim.x - 1 - blockIdx.x) * 2 * T32_ROWS;
    const size_t C3 = hr.C3;
    const float *qbase = qkv + hr.qkv_off;
    const int ntiles = (min(T, q0 + 2 * T32_ROWS) + T32_KEYS - 1) / T32_KEYS;

    if ((int)threadIdx.x < PT) { /* the producer */
        const int p = threadIdx.x;
        t32_ws_produce<T32_WS_NS, PT, ALL>(
            ntiles,
            [&](int s, int tile) {
                t32_ws_copy<PT>(base + s * T32_WS_STAGE, qbase, C3, C, tile * T32_KEYS, T, p);
            },
            [&](int s, int) { t32_ws_prepare<PT>(base + s * T32_WS_STAGE, p); });
        return;
    }

    /* consumer 0 or 1, through a shuffle so that the compiler knows it is the same in the whole
     * warp: the tiles' addresses and so the wgmma descriptors stay in uniform registers (no
     * R2UR per wgmma: 8% of the instructions and 12% of the stall samples before) */
    const int wg = __shfl_sync(0xffffffffu, (int)threadIdx.x / WG_THREADS, 0) - PW;
    const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
    const int crow0 = q0 + wg * T32_ROWS, wrow0 = crow0 + warp * 16;
    const int kend = min(T, crow0 + T32_ROWS);
    const unsigned Qs = base + T32_WS_NS * T32_WS_STAGE + wg * T32_Q_BYTES;
    wg_tile_load<T32_ROWS>(Qs, qbase, C3, crow0, T, threadIdx.x % WG_THREADS);
    asm volatile("cp.async.commit_group;" ::: "memory");
    asm volatile("cp.async.wait_group 0;" ::: "memory");
    t32_round_in_place<T32_ROWS>(Qs, threadIdx.x % WG_THREADS);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    named_sync(2 + 2 * T32_WS_NS + wg, WG_THREADS);

    float o[64];
#pragma unroll
    for (int i = 0; i < 64; i++)
        o[i] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}; /* m in raw score units */

    t32_ws_consume<T32_WS_NS, ALL>(ntiles, [&](int s, int it) {
        const int k0 = it * T32_KEYS;
        const unsigned st = base + s * T32_WS_STAGE;
        if (k0 < kend) {
            float sc[16];
            wg_fence();
            t32_product_xyt(sc, Qs, st);
            wg_commit_and_wait();
            t32_forward_tile<true>(o, m, l, sc, st + 2 * T32_K_BYTES, k0, wrow0, g, t, scale_log2);
        }
    });
    wg_forward_store(out, lse, hr, o, m, l, wrow0, g, t, T, C, scale_log2);
#else
    __trap();
#endif
}

/*
 * dq (and delta), warp-specialized as the forward, with PW producer warpgroups (the backend's:
 * two, 1.56x the mma.sync kernel against one's 1.40x: the producer is what binds), 128 queries
 * a block, key tiles of 32 (attn_tiles<float>::dq's, so the same sums as
 * flash_backward_dq_tc<float, ...>).  The
 * producer copies each tile's K and V (cp.async, DQ_NS stages), rounds V in place and K both in
 * place and into K^T (the B operand of dQ += dS K: TF32 wgmma takes K-major operands only).
 * Consumer c (64 queries) holds its Q and dO rounded in shared memory and its rows' delta
 * (dO . O, stored for the dk/dv kernel) and lse; per tile S = Q K^T, dP = dO V^T,
 * dS = P (dP - delta) (0 above the diagonal), dQ += dS K.  dq = scale dQ.
 * Barriers as the forward's: full[s] 1 + s, empty[s] 1 + NS + s, the producer's 1 + 2 NS,
 * consumer c's 2 + 2 NS + c.  Shared memory: per stage K, V, K^T (48 KiB), per consumer Q and
 * dO (64 KiB): 224 KiB with two stages.
 */
#define T32_DQ_NS 2
#define T32_DQ_STAGE (3 * T32_K_BYTES)
#define T32_DQ_SMEM (T32_DQ_NS * T32_DQ_STAGE + 4 * T32_Q_BYTES + 1024)

template <int PW> /* producer warpgroups */
__global__ static void __launch_bounds__((PW + 2) * WG_THREADS, 1)
flash_backward_dq_wgmma_tf32_ws(float *dqkv, float *delta, const float *dout, const float *qkv,
                                const float *out, const float *lse, int T, int C, int NH,
                                float scale, float scale_log2)
{
#if WG_HAVE_WGMMA
    constexpr int NS = T32_DQ_NS, PT = PW * WG_THREADS, ALL = (PW + 2) * WG_THREADS;
    __shared__ float Dsh[2][T32_ROWS];
    const unsigned base = wg_smem_base();
    /* stage s: K at + 0, V at + K_BYTES, K^T at + 2 K_BYTES */
    const head_rows hr = head_of_block(T, C, NH, T32_HS);
    const int q0 = (gridDim.x - 1 - blockIdx.x) * 2 * T32_ROWS;
    const size_t C3 = hr.C3;
    const float *qbase = qkv + hr.qkv_off;
    const int ntiles = (min(T, q0 + 2 * T32_ROWS) + T32_KEYS - 1) / T32_KEYS;

    if ((int)threadIdx.x < PT) { /* the producer */
        const int p = threadIdx.x;
        t32_ws_produce<NS, PT, ALL>(
            ntiles,
            [&](int s, int tile) {
                t32_ws_copy<PT>(base + s * T32_DQ_STAGE, qbase, C3, C, tile * T32_KEYS, T, p);
            },
            [&](int s, int) {
                const unsigned st = base + s * T32_DQ_STAGE;
                t32_round_in_place<T32_KEYS, PT>(st + T32_K_BYTES, p);
                t32_transpose<PT, true>(st, st + 2 * T32_K_BYTES, p);
            });
        return;
    }

    /* consumer 0 or 1, warp-uniform (a shuffle: the compiler then keeps the tiles' addresses,
     * and so the wgmma descriptors, in uniform registers) */
    const int wg = __shfl_sync(0xffffffffu, (int)threadIdx.x / WG_THREADS, 0) - PW;
    const int tid = threadIdx.x % WG_THREADS;
    const int warp = tid / 32, lane = tid % 32, g = lane >> 2, t = lane & 3;
    const int crow0 = q0 + wg * T32_ROWS, wrow0 = crow0 + warp * 16;
    const int kend = min(T, crow0 + T32_ROWS); /* keys past the last query: all masked */
    const unsigned Qs = base + NS * T32_DQ_STAGE + wg * 2 * T32_Q_BYTES, dOs = Qs + T32_Q_BYTES;
    wg_tile_load<T32_ROWS>(Qs, qbase, C3, crow0, T, tid);
    wg_tile_load<T32_ROWS>(dOs, dout + hr.tok_off, C, crow0, T, tid);
    asm volatile("cp.async.commit_group;" ::: "memory");
    rows_delta<float, T32_HS, 2, 4>(Dsh[wg], delta, dout, out, hr, crow0, T, C, tid); /* meanwhile */
    asm volatile("cp.async.wait_group 0;" ::: "memory");
    t32_round_in_place<T32_ROWS>(Qs, tid);
    t32_round_in_place<T32_ROWS>(dOs, tid);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    named_sync(2 + 2 * NS + wg, WG_THREADS);
    float dl[2], ls[2];
    wg_row_stats(dl, ls, Dsh[wg] + warp * 16, lse, hr, wrow0, g, T);
    float dq[64];
#pragma unroll
    for (int i = 0; i < 64; i++)
        dq[i] = 0.0f;

    t32_ws_consume<NS, ALL>(ntiles, [&](int s, int it) {
        const int k0 = it * T32_KEYS;
        const unsigned st = base + s * T32_DQ_STAGE;
        if (k0 < kend) {
            float sc[16], dp[16];
            wg_fence();
            t32_product_xyt(sc, Qs, st);
            t32_product_xyt(dp, dOs, st + T32_K_BYTES);
            wg_commit_and_wait();

            t32_dq_tile(dq, sc, dp, st + 2 * T32_K_BYTES, k0, wrow0, g, t, ls, dl, scale_log2);
        }
    });
    wg_store_dq(dqkv, hr, dq, wrow0, g, t, T, scale);
#else
    __trap();
#endif
}

/* Grid (ceil(T / 128), B NH), two producer warpgroups and two consumers; before dk/dv (dq
 * stores delta, which they read) */
static cudaError_t attn_wgmma_tf32_dq_launch(cudaStream_t st, float *dqkv, float *delta,
                                             const float *dout, const float *qkv,
                                             const float *out, const float *lse, int B, int T,
                                             int C, int NH, float scale, float scale_log2)
{
    return launch_with_smem(flash_backward_dq_wgmma_tf32_ws<2>, attn_grid(B, T, NH, 2 * T32_ROWS),
                            4 * WG_THREADS, (size_t)T32_DQ_SMEM, st, dqkv, delta, dout, qkv, out,
                            lse, T, C, NH, scale, scale_log2);
}

/*
 * dk, dv, warp-specialized with PW producer warpgroups (the backend's: two, 1.40x the mma.sync
 * kernel against one's 1.11x: the producer's rounding and two transposes a tile bind), 64 keys
 * a block (the first keys, which see the most queries, first), query tiles of 32 from the block's first key (attn_tiles<float>::dkv's, so
 * the same sums as flash_backward_dkv_tc<float, ...>).  The producer copies K and V once and
 * then each query tile's Q and dO (cp.async, DKV_NS stages), rounds Q and dO both in place and
 * into Q^T and dO^T (the B operands of dK += dS^T Q and dV += P^T dO), and puts the tile's lse'
 * (log2 units) and delta beside them.  The two consumers share the block's keys and split the
 * gradients (so that neither holds both accumulators: with two producers the launch gives every
 * thread 128 registers): consumer 0 forms S^T = K Q^T and P^T, hands P^T (fp32) to consumer 1 through shared
 * memory, and adds dV += P^T dO; consumer 1 forms dP^T = V dO^T, takes P^T, and adds
 * dK += dS^T Q, dS^T = P^T (dP^T - delta).  (Both forming S^T, five products a tile instead of
 * four, measured 1.09x the mma.sync kernel.)  Barriers as the forward's, and P^T's hand-over
 * per stage 2 + 2 NS + s (consumer 0 arrives, consumer 1 waits).  Shared memory: K, V
 * (64 KiB), per stage Q, dO, Q^T, dO^T (64 KiB), P^T (8 KiB), lse' and delta: 208 KiB with two
 * stages.
 */
#define T32_DKV_NS 2
#define T32_DKV_STAGE (4 * T32_K_BYTES)
#define T32_DKV_P_BYTES (WG_THREADS * 16 * 4) /* 16 floats a consumer thread */
#define T32_DKV_SMEM                                                                        \
    (2 * T32_Q_BYTES + T32_DKV_NS * (T32_DKV_STAGE + T32_DKV_P_BYTES) + 1024)


template <int PW> /* producer warpgroups */
__global__ static void __launch_bounds__((PW + 2) * WG_THREADS, 1)
flash_backward_dkv_wgmma_tf32_ws(float *dqkv, const float *delta, const float *dout,
                                 const float *qkv, const float *lse, int T, int C, int NH,
                                 float scale, float scale_log2)
{
#if WG_HAVE_WGMMA
    constexpr int NS = T32_DKV_NS, PT = PW * WG_THREADS, ALL = (PW + 2) * WG_THREADS;
    __shared__ float Ls[NS][T32_KEYS], Ds[NS][T32_KEYS]; /* each stage's lse' and delta */
    const unsigned Ks = wg_smem_base(), Vs = Ks + T32_Q_BYTES, stages = Vs + T32_Q_BYTES,
                   pbufs = stages + NS * T32_DKV_STAGE;
    /* stage s: Q at + 0, dO at + K_BYTES, Q^T at + 2 K_BYTES, dO^T at + 3 K_BYTES; its P^T at
     * pbufs + s P_BYTES, float4 c of consumer thread i at (c WG_THREADS + i) 16 */
    const head_rows hr = head_of_block(T, C, NH, T32_HS);
    const int k0 = blockIdx.x * T32_ROWS;
    const size_t C3 = hr.C3;
    const float *qbase = qkv + hr.qkv_off, *dobase = dout + hr.tok_off;
    const int ntiles = (T - k0 + T32_KEYS - 1) / T32_KEYS;

    if ((int)threadIdx.x < PT) { /* the producer */
        const int p = threadIdx.x;
        wg_tile_load<T32_ROWS, PT>(Ks, qbase + C, C3, k0, T, p); /* with tile 0's group */
        wg_tile_load<T32_ROWS, PT>(Vs, qbase + 2 * C, C3, k0, T, p);
        t32_ws_produce<NS, PT, ALL>(
            ntiles,
            [&](int s, int tile) {
                const unsigned st = stages + s * T32_DKV_STAGE;
                wg_tile_load<T32_KEYS, PT>(st, qbase, C3, k0 + tile * T32_KEYS, T, p);
                wg_tile_load<T32_KEYS, PT>(st + T32_K_BYTES, dobase, C, k0 + tile * T32_KEYS, T, p);
            },
            [&](int s, int it) {
                const unsigned st = stages + s * T32_DKV_STAGE;
                if (it == 0) { /* K and V, once */
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        t32_round_in_place<T32_KEYS, PT>(Ks + h * T32_K_BYTES, p);
                        t32_round_in_place<T32_KEYS, PT>(Ks + 2 * T32_K_BYTES + h * T32_K_BYTES, p);
                    }
                }
                t32_transpose<PT, true>(st, st + 2 * T32_K_BYTES, p);
                t32_transpose<PT, true>(st + T32_K_BYTES, st + 3 * T32_K_BYTES, p);
                if (p < T32_KEYS) {
                    const int q = k0 + it * T32_KEYS + p;
                    /* queries past T: probability 0 (exp2(-inf)), and no delta */
                    Ls[s][p] = q < T ? lse[hr.stat_off + q] * LOG2E_F : INFINITY;
                    Ds[s][p] = q < T ? delta[hr.stat_off + q] : 0.0f;
                }
            });
        return;
    }

    /* consumer 0 (dV) or 1 (dK), warp-uniform (a shuffle: descriptors in uniform registers) */
    const int wg = __shfl_sync(0xffffffffu, (int)threadIdx.x / WG_THREADS, 0) - PW;
    const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
    const int wkey0 = k0 + warp * 16;
    const int key[2] = {wkey0 + g, wkey0 + g + 8};
    float acc[64]; /* dV (consumer 0) or dK (consumer 1) */
#pragma unroll
    for (int i = 0; i < 64; i++)
        acc[i] = 0.0f;

    t32_ws_consume<NS, ALL>(ntiles, [&](int s, int it) {
        const int q0 = k0 + it * T32_KEYS;
        const unsigned st = stages + s * T32_DKV_STAGE;
        const bool diag = q0 < wkey0 + 15; /* some query of the tile precedes some key */
        const unsigned pbuf = pbufs + s * T32_DKV_P_BYTES + (threadIdx.x % WG_THREADS) * 16;
        if (wg == 0) {
            float sct[16]; /* S^T: rows the warp's keys, columns the tile's queries */
            wg_fence();
            t32_product_xyt(sct, Ks, st);
            wg_commit_and_wait();
            uint32_t pt[T32_KEYS / 8][4];
#pragma unroll
            for (int j = 0; j < T32_KEYS / 8; j++) {
                const int qi = 8 * j + 2 * t;
                float pr[4];
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    pr[e] = exp2_fast(fmaf(sct[4 * j + e], scale_log2, -Ls[s][qi + (e & 1)]));
                    if (diag && q0 + qi + (e & 1) < key[e >> 1])
                        pr[e] = 0.0f;
                }
                /* to consumer 1, which holds the same accumulator positions */
                asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(
                                 pbuf + j * WG_THREADS * 16),
                             "f"(pr[0]), "f"(pr[1]), "f"(pr[2]), "f"(pr[3])
                             : "memory");
                t32_pack_chunk(pt, j, pr);
            }
            named_arrive(2 + 2 * NS + s, 2 * WG_THREADS);
            wg_fence();
            t32_product_py(acc, pt, st + 3 * T32_K_BYTES); /* dV += P^T dO */
            wg_commit_and_wait();
        } else {
            float dpt[16];
            wg_fence();
            t32_product_xyt(dpt, Vs, st + T32_K_BYTES);
            wg_commit_and_wait();
            named_sync(2 + 2 * NS + s, 2 * WG_THREADS); /* consumer 0's P^T */
            uint32_t dst[T32_KEYS / 8][4];
#pragma unroll
            for (int j = 0; j < T32_KEYS / 8; j++) {
                const int qi = 8 * j + 2 * t;
                float pr[4], d[4];
                asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
                             : "=f"(pr[0]), "=f"(pr[1]), "=f"(pr[2]), "=f"(pr[3])
                             : "r"(pbuf + j * WG_THREADS * 16));
#pragma unroll
                for (int e = 0; e < 4; e++)
                    d[e] = pr[e] * (dpt[4 * j + e] - Ds[s][qi + (e & 1)]);
                t32_pack_chunk(dst, j, d);
            }
            wg_fence();
            t32_product_py(acc, dst, st + 2 * T32_K_BYTES); /* dK += dS^T Q */
            wg_commit_and_wait();
        }
    });
#pragma unroll
    for (int r = 0; r < 2; r++) {
        if (key[r] >= T)
            continue;
        float *krow = dqkv + hr.qkv_off + (size_t)key[r] * C3 + C;
        if (wg == 0)
            wg_store_row(krow + C, acc, r, t, 1.0f);
        else
            wg_store_row(krow, acc, r, t, scale);
    }
#else
    __trap();
#endif
}

/* Grid (ceil(T / 64), B NH), two producer warpgroups and two consumers; after dq (which stores
 * delta) */
static cudaError_t attn_wgmma_tf32_dkv_launch(cudaStream_t st, float *dqkv, const float *delta,
                                              const float *dout, const float *qkv,
                                              const float *lse, int B, int T, int C, int NH,
                                              float scale, float scale_log2)
{
    return launch_with_smem(flash_backward_dkv_wgmma_tf32_ws<2>, attn_grid(B, T, NH, T32_ROWS),
                            4 * WG_THREADS, (size_t)T32_DKV_SMEM, st, dqkv, delta, dout, qkv, lse,
                            T, C, NH, scale, scale_log2);
}

/* Grid (ceil(T / 128), B NH), three warpgroups; T32_WS_SMEM bytes of dynamic shared memory
 * (209 KiB: the device must allow a block that much) */
static cudaError_t attn_wgmma_tf32_forward_launch(cudaStream_t st, float *out, float *lse,
                                                  const float *qkv, int B, int T, int C, int NH,
                                                  float scale_log2)
{
    return launch_with_smem(flash_forward_wgmma_tf32_ws<1>, attn_grid(B, T, NH, 2 * T32_ROWS),
                            3 * WG_THREADS, (size_t)T32_WS_SMEM, st, out, lse, qkv, T, C, NH,
                            scale_log2);
}

#endif
