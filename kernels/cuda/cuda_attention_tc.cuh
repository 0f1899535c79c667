/*
 * cuda_attention_tc.cuh — the tensor-core (mma.sync) kernels of the fused causal attention
 * (see cuda_attention.cu for the algorithm, the layout and the SIMT fallback), their tile
 * configurations and launchers on a raw stream.  A header so that bench/attn_sweep.cu can
 * time every configuration of the same code; cuda_attention.cu is its one product user.
 *
 * TF32 m16n8k8 for fp32 storage when TF32 is allowed, bf16 m16n8k16 for the bf16 backend;
 * fp32 accumulation, softmax and statistics in fp32.  Head sizes 32, 64, 128 (compile-time,
 * so the fragments are registers).  A block of the forward and of dq is 4 warps, each owning
 * MT tiles of 16 rows (so a K or V fragment loaded from shared memory feeds MT products); a
 * block of dk/dv is WARPS warps of 16 keys sharing each streamed query tile.  The streamed
 * tiles are copied with cp.async, either before each tile is used or (PIPE, STAGES 2) while
 * the previous one is.  In bf16 the probabilities (and dS) are rounded to bf16 before their
 * products, as FlashAttention does.
 *
 * Every configuration is deterministic (no atomics, fixed reduction orders); the tile sizes
 * change the summation order of the online softmax and of dq (key tiles) and dk, dv (query
 * tiles), so they are fixed per element type in attn_tiles below.
 */
#ifndef AEBENCH_CUDA_ATTENTION_TC_CUH
#define AEBENCH_CUDA_ATTENTION_TC_CUH

#include "cuda_common.cuh"

#include <math.h>
#include <stdint.h>

#define LOG2E_F 1.4426950408889634f
#define LN2_F 0.6931471805599453f

static __device__ inline float quad_sum(float v)
{
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    v += __shfl_xor_sync(0xffffffffu, v, 2);
    return v;
}
static __device__ inline float quad_max(float v)
{
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
    return v;
}

/* ======================================================================================
 * Tensor-core fragments.
 *
 * One mma computes C (16 x 8, fp32) += A (16 x KS) B (KS x 8) per warp.  With g = lane/4
 * and t = lane%4 (PTX ISA, "matrix fragments for mma.m16n8k8 / m16n8k16"):
 *   C:            c0 (g, 2t)  c1 (g, 2t+1)  c2 (g+8, 2t)  c3 (g+8, 2t+1)
 *   A tf32 k8:    a0 (g, t)   a1 (g+8, t)   a2 (g, t+4)   a3 (g+8, t+4)
 *   B tf32 k8:    b0 (k t, n g)             b1 (k t+4, n g)
 *   A bf16 k16:   reg r holds the pair (row g + 8 (r%2), k 2t + 8 (r/2) .. +1)
 *   B bf16 k16:   reg r holds the pair (k 2t + 8r .. +1, n g)
 * A product only needs A's and B's k index to mean the same thing, so for TF32 the
 * k slots may be permuted consistently.  Operands come from shared-memory tiles in two
 * orientations:
 *   "nk": rows are the m (or n) index, k runs along the row (Q, K, V, dO for the products
 *         over the head dimension);
 *   "kn": rows are the k index, n runs along the row (V in P V, K in dS K, Q and dO in the
 *         dk / dv products);
 * and A can come from a previous product's C registers (P, dS: the k index of the next
 * product is the n index of the last).  For TF32, nk loads use the natural slots and
 * C-to-A and kn loads use slot t <-> k 2t, slot t+4 <-> k 2t+1, which is where c0/c1 sit.
 * For bf16 every mapping is the natural one: C pairs are exactly A pairs.
 *
 * Shared-memory rows are padded by 16 bytes (4 floats, 8 bf16), which makes every load
 * pattern below conflict-free for the head sizes used (row stride = 4 banks mod 32).
 * ==================================================================================== */

/* ldmatrix: four 8 x 8 matrices of 16-bit elements from shared memory; lane l gives the
 * address of row l%8 of matrix l/8, and receives in r[i] the elements (row l/4, columns
 * 2(l%4), 2(l%4)+1) of matrix i (with .trans: (rows 2(l%4), 2(l%4)+1, column l/4)).  On fp32
 * data a "row" of 8 b16 is 4 floats and lane l receives float l%4 of row l/4: exactly the
 * TF32 fragment layout, so the same instruction loads both types. */
static __device__ __forceinline__ void ldsm_x4(uint32_t r[4], const void *p)
{
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
static __device__ __forceinline__ void ldsm_x4_trans(uint32_t r[4], const void *p)
{
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

template <typename E> struct mma_op;

/* Threads per block of the forward and dq kernels: 4 warps. */
#define TC_THREADS 128

/* nk loads, the same for both types (VEC = elements per 16 bytes):
 *   a_nk  A (16 x KS) at tile[row0..][k0..]: matrices (rows 0-7 | 8-15) x (k bytes 0-15 |
 *         16-31) -> a0..a3;
 *   b_nk2 B for two n-tiles (n0, n0+8) x KS at tile[n0..][k0..]: (n rows 0-7, bytes 0-15),
 *         (0-7, 16-31) -> tile n0; (8-15, ...) -> tile n0+8. */
template <typename E>
static __device__ __forceinline__ void a_nk(uint32_t a[4], const E *tile, int ld, int row0,
                                            int k0, int lane)
{
    constexpr int VEC = 16 / (int)sizeof(E);
    uint32_t r[4];
    ldsm_x4(r, tile + (row0 + (lane & 7) + 8 * ((lane >> 3) & 1)) * ld + k0 + VEC * (lane >> 4));
    mma_op<E>::round(r);
    a[0] = r[0];
    a[1] = r[1];
    a[2] = r[2];
    a[3] = r[3];
}
template <typename E>
static __device__ __forceinline__ void b_nk2(uint32_t b0[2], uint32_t b1[2], const E *tile,
                                             int ld, int n0, int k0, int lane)
{
    constexpr int VEC = 16 / (int)sizeof(E);
    uint32_t r[4];
    ldsm_x4(r, tile + (n0 + (lane & 7) + 8 * (lane >> 4)) * ld + k0 + VEC * ((lane >> 3) & 1));
    mma_op<E>::round(r);
    b0[0] = r[0];
    b0[1] = r[1];
    b1[0] = r[2];
    b1[1] = r[3];
}

template <> struct mma_op<float> {
    static constexpr int KS = 8;   /* k per mma */
    static constexpr int PAD = 4;  /* elements of padding per shared-memory row */
    static __device__ __forceinline__ uint32_t tf32(float x)
    {
        uint32_t r;
        asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
        return r;
    }
    /* ldmatrix delivers fp32 bits; the mma wants them rounded to TF32 */
    template <int N> static __device__ __forceinline__ void round(uint32_t (&r)[N])
    {
#pragma unroll
        for (int i = 0; i < N; i++)
            r[i] = tf32(__uint_as_float(r[i]));
    }
    /* B for two n-tiles (n0, n0+8) x 8 at tile[k0..][n0..] of a kn tile (slots permuted:
     * t <-> k 2t, t+4 <-> k 2t+1, matching a_from_c) */
    static __device__ __forceinline__ void b_kn2(uint32_t b0[2], uint32_t b1[2], const float *tile,
                                                 int ld, int k0, int n0, int lane)
    {
        const int g = lane >> 2, t = lane & 3;
        const uint32_t *r = reinterpret_cast<const uint32_t *>(tile) + (k0 + 2 * t) * ld + n0 + g;
        b0[0] = tf32(__uint_as_float(r[0]));
        b0[1] = tf32(__uint_as_float(r[ld]));
        b1[0] = tf32(__uint_as_float(r[8]));
        b1[1] = tf32(__uint_as_float(r[ld + 8]));
    }
    /* A (16 x 8) from the C registers of the 8 columns kstep*8.. of a previous product
     * (same permutation as b_kn2). */
    static __device__ __forceinline__ void a_from_c(uint32_t a[4], const float (*c)[4], int kstep)
    {
        a[0] = tf32(c[kstep][0]);
        a[1] = tf32(c[kstep][2]);
        a[2] = tf32(c[kstep][1]);
        a[3] = tf32(c[kstep][3]);
    }
    static __device__ __forceinline__ void mma(float c[4], const uint32_t a[4], const uint32_t b[2])
    {
        asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
};

template <> struct mma_op<bf16> {
    static constexpr int KS = 16;
    static constexpr int PAD = 8;
    template <int N> static __device__ __forceinline__ void round(uint32_t (&)[N]) {}
    static __device__ __forceinline__ uint32_t pack(float lo, float hi)
    {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi); /* .x (low half) = lo */
        return *reinterpret_cast<uint32_t *>(&v);
    }
    /* B for two n-tiles x 16 at tile[k0..][n0..] of a kn tile: transposing ldmatrix over
     * (k rows 0-7 | 8-15) x (n bytes 0-15 | 16-31) */
    static __device__ __forceinline__ void b_kn2(uint32_t b0[2], uint32_t b1[2], const bf16 *tile,
                                                 int ld, int k0, int n0, int lane)
    {
        uint32_t r[4];
        ldsm_x4_trans(r, tile + (k0 + (lane & 7) + 8 * ((lane >> 3) & 1)) * ld + n0 +
                             8 * (lane >> 4));
        b0[0] = r[0];
        b0[1] = r[1];
        b1[0] = r[2];
        b1[1] = r[3];
    }
    /* A (16 x 16) from the C registers of columns kstep*16.. (two 8-column C tiles) */
    static __device__ __forceinline__ void a_from_c(uint32_t a[4], const float (*c)[4], int kstep)
    {
        const float *lo = c[2 * kstep], *hi = c[2 * kstep + 1];
        a[0] = pack(lo[0], lo[1]);
        a[1] = pack(lo[2], lo[3]);
        a[2] = pack(hi[0], hi[1]);
        a[3] = pack(hi[2], hi[3]);
    }
    static __device__ __forceinline__ void mma(float c[4], const uint32_t a[4], const uint32_t b[2])
    {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
};

/* Two consecutive elements (columns 2t, 2t+1 of a C fragment) to global memory. */
static __device__ __forceinline__ void store_pair(float *p, float x, float y)
{
    *reinterpret_cast<float2 *>(p) = make_float2(x, y);
}
static __device__ __forceinline__ void store_pair(bf16 *p, float x, float y)
{
    *reinterpret_cast<__nv_bfloat162 *>(p) = __floats2bfloat162_rn(x, y);
}

/* rows [row0, row0 + ROWS) of a (T, HS) view with row stride `stride` (elements) into a
 * shared tile with row stride HS + PAD; rows at or past T become zeros.  16-byte cp.async
 * copies by the block's NT threads (the caller checked that the view is 16-byte aligned), all
 * in flight at once: the tile costs one memory latency, not one per chunk.  The copies join
 * this thread's open group: cp_async_commit() closes it, tile_wait<N>() waits for it. */
template <typename E, int ROWS, int HS, int NT = TC_THREADS>
static __device__ __forceinline__ void tile_load(E *dst, const E *src, size_t stride, int row0,
                                                 int T)
{
    constexpr int VEC = 16 / (int)sizeof(E), CPR = HS / VEC, LD = HS + mma_op<E>::PAD;
#pragma unroll
    for (int c = threadIdx.x; c < ROWS * CPR; c += NT) {
        const int r = c / CPR, cc = c % CPR;
        const bool in = row0 + r < T;
        /* a row past T reads 0 bytes (and a valid address) and zero-fills */
        const E *from = src + (size_t)(in ? row0 + r : 0) * stride + cc * VEC;
        const unsigned to = (unsigned)__cvta_generic_to_shared(dst + r * LD + cc * VEC);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(to), "l"(from),
                     "r"(in ? 16 : 0));
    }
}
static __device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;" ::: "memory");
}
/* Waits until at most PENDING of this thread's committed groups are still in flight (the
 * newest ones: groups complete in order), then for every thread of the block. */
template <int PENDING> static __device__ __forceinline__ void tile_wait()
{
    asm volatile("cp.async.wait_group %0;" ::"n"(PENDING) : "memory");
    __syncthreads();
}

/* acc (MT row tiles of 16 x HS, C registers) += X (per row tile 16 x NK: the C registers of
 * the previous product, P or dS) times the tile B (NK x HS, kn: rows are X's columns); each
 * B fragment feeds MT products.  Forward: O += P V; dq: dQ += dS K. */
template <typename E, int HS, int NK, int MT>
static __device__ __forceinline__ void accumulate_product(float (&acc)[MT][HS / 8][4],
                                                          const float (&x)[MT][NK / 8][4],
                                                          const E *B, int lane)
{
    typedef mma_op<E> M;
    constexpr int LD = HS + M::PAD;
#pragma unroll
    for (int kk = 0; kk < NK / M::KS; kk++) {
        uint32_t a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
            M::a_from_c(a[mt], x[mt], kk);
#pragma unroll
        for (int i = 0; i < HS / 8; i += 2) {
            uint32_t b0[2], b1[2];
            M::b_kn2(b0, b1, B, LD, kk * M::KS, i * 8, lane);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                M::mma(acc[mt][i], a[mt], b0);
                M::mma(acc[mt][i + 1], a[mt], b1);
            }
        }
    }
}

/* The (batch, head) a block works on (blockIdx.y = b NH + h) and where that head's rows
 * start, in elements: token t's q at qkv_off + t C3 of qkv (k, v at + C, + 2C; dq, dk, dv
 * at the same places of dqkv), its head slice of out / dout at tok_off + t C, its lse /
 * delta entry at stat_off + t. */
struct head_rows {
    size_t C3, qkv_off, tok_off, stat_off;
};
static __device__ __forceinline__ head_rows head_of_block(int T, int C, int NH, int hs)
{
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    head_rows r;
    r.C3 = 3 * (size_t)C;
    r.qkv_off = (size_t)b * T * r.C3 + (size_t)h * hs;
    r.tok_off = (size_t)b * T * C + (size_t)h * hs;
    r.stat_off = (size_t)bh * T;
    return r;
}

/* ---- forward ------------------------------------------------------------------------- */

/* 2^x on the special-function unit (ex2.approx, flushing subnormal results to 0): the
 * library exp2f adds a range fix-up for results below 2^-126, which a probability there
 * cannot use.  exp2_fast(-inf) = 0. */
static __device__ __forceinline__ float exp2_fast(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/*
 * Grid (ceil(T/BQ), B*NH), 128 threads, BQ = 64 MT.  Block: BQ queries of one (b, h), the
 * longest (last) first; warp w owns the MT 16-row tiles at w*16*MT, so every K or V fragment
 * it loads from shared memory feeds MT products.  Shared: Q (BQ x HS), one K and one V tile
 * (BK x HS).  PIPE 0: each key tile's K and V are copied together, then used; PIPE 1: the
 * copies run under the arithmetic (K of tile j+1 arrives while P V of tile j is formed, V of
 * tile j+1 while S of tile j+1 is), for two more barriers a tile.
 *
 * S (16 x BK) and O (16 x HS) per row tile in registers.  Online softmax in the log2 domain
 * with the running max m kept in raw score units: p = 2^(s c - m c) is one FMA and one ex2
 * (c = log2(e) / sqrt(hs)); rows' running sum l per thread, summed over the quad at the end.
 * O is rescaled only when some row of the warp's tile has a new max (alpha = 1 otherwise,
 * and x * 1 = x: the same bits either way).  A warp whose rows all precede a key tile skips it
 * (it only joins the block's barriers); only tiles that reach past the warp's first query
 * test keys against queries.
 */
template <typename E, int HS, int MT, int BK, int PIPE>
__global__ static void __launch_bounds__(TC_THREADS)
flash_forward_tc(E *out, float *lse, const E *qkv, int T, int C, int NH, float scale_log2)
{
    typedef mma_op<E> M;
    constexpr int WR = 16 * MT, BQ = 4 * WR, LD = HS + M::PAD;
    static_assert(PIPE == 0 || PIPE == 1, "copies before or under the arithmetic");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    E *Qs = reinterpret_cast<E *>(smem_raw), *Ks = Qs + BQ * LD, *Vs = Ks + BK * LD;

    const head_rows hr = head_of_block(T, C, NH, HS);
    const int q0 = (gridDim.x - 1 - blockIdx.x) * BQ;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
    const int wrow0 = q0 + warp * WR; /* the warp's first query */
    const size_t C3 = hr.C3;
    const E *qbase = qkv + hr.qkv_off;

    tile_load<E, BQ, HS>(Qs, qbase, C3, q0, T);
    if (PIPE) { /* groups in flight: (Q, K0), then V0 */
        tile_load<E, BK, HS>(Ks, qbase + C, C3, 0, T);
        cp_async_commit();
        tile_load<E, BK, HS>(Vs, qbase + 2 * C, C3, 0, T);
    }
    cp_async_commit();

    float o[MT][HS / 8][4];
    float m[MT][2], l[MT][2]; /* m: raw score units */
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int i = 0; i < HS / 8; i++)
            o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.0f;
        m[mt][0] = m[mt][1] = -INFINITY;
        l[mt][0] = l[mt][1] = 0.0f;
    }

    const int nkt = (min(T, q0 + BQ) + BK - 1) / BK; /* key tiles up to the block's last query */
    for (int kt = 0; kt < nkt; kt++) {
        const int k0 = kt * BK;
        const bool more = kt + 1 < nkt;
        /* the warp's rows see some key of this tile, and some see a future one */
        const bool live = k0 <= wrow0 + WR - 1, diag = k0 + BK - 1 > wrow0;
        if (PIPE) {
            tile_wait<1>(); /* K of this tile (V may still be arriving) */
        } else {
            __syncthreads(); /* the previous tile's readers are done */
            tile_load<E, BK, HS>(Ks, qbase + C, C3, k0, T);
            tile_load<E, BK, HS>(Vs, qbase + 2 * C, C3, k0, T);
            cp_async_commit();
            tile_wait<0>();
        }

        float sc[MT][BK / 8][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int j = 0; j < BK / 8; j++)
                sc[mt][j][0] = sc[mt][j][1] = sc[mt][j][2] = sc[mt][j][3] = 0.0f;
        if (live) {
#pragma unroll
            for (int kk = 0; kk < HS / M::KS; kk++) {
                uint32_t a[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
                    a_nk(a[mt], Qs, LD, warp * WR + mt * 16, kk * M::KS, lane);
#pragma unroll
                for (int j = 0; j < BK / 8; j += 2) {
                    uint32_t b0[2], b1[2];
                    b_nk2(b0, b1, Ks, LD, j * 8, kk * M::KS, lane);
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
                        M::mma(sc[mt][j], a[mt], b0);
                        M::mma(sc[mt][j + 1], a[mt], b1);
                    }
                }
            }
        }
        if (PIPE) {
            __syncthreads(); /* every warp is done with K: the next tile may land there */
            if (more) {
                tile_load<E, BK, HS>(Ks, qbase + C, C3, k0 + BK, T);
                cp_async_commit();
            }
        }

        if (live) {
            bool rescale = false;
            float alpha[MT][2];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                const int row[2] = {wrow0 + mt * 16 + g, wrow0 + mt * 16 + g + 8};
                float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
                for (int j = 0; j < BK / 8; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        if (diag && k0 + j * 8 + 2 * t + (e & 1) > row[e >> 1])
                            sc[mt][j][e] = -INFINITY; /* the future */
                        mx[e >> 1] = fmaxf(mx[e >> 1], sc[mt][j][e]);
                    }
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    /* every row sees key 0 on tile 0, so mnew is finite from there on */
                    const float mnew = fmaxf(m[mt][r], quad_max(mx[r]));
                    const bool moved = mnew != m[mt][r];
                    alpha[mt][r] = moved ? exp2_fast((m[mt][r] - mnew) * scale_log2) : 1.0f;
                    rescale |= moved;
                    m[mt][r] = mnew;
                    l[mt][r] *= alpha[mt][r];
                }
                const float mc[2] = {m[mt][0] * scale_log2, m[mt][1] * scale_log2};
#pragma unroll
                for (int j = 0; j < BK / 8; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const float p = exp2_fast(fmaf(sc[mt][j][e], scale_log2, -mc[e >> 1]));
                        sc[mt][j][e] = p;
                        l[mt][e >> 1] += p;
                    }
            }
            if (__any_sync(0xffffffffu, rescale)) {
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
#pragma unroll
                    for (int i = 0; i < HS / 8; i++) {
                        o[mt][i][0] *= alpha[mt][0];
                        o[mt][i][1] *= alpha[mt][0];
                        o[mt][i][2] *= alpha[mt][1];
                        o[mt][i][3] *= alpha[mt][1];
                    }
            }
        }

        if (PIPE) {
            if (more)
                tile_wait<1>(); /* V of this tile (the next K may still be arriving) */
            else
                tile_wait<0>();
        }
        if (live) /* O += P V: the probabilities go from the S registers into A fragments */
            accumulate_product<E, HS, BK, MT>(o, sc, Vs, lane);
        if (PIPE) {
            __syncthreads(); /* every warp is done with V */
            if (more) {
                tile_load<E, BK, HS>(Vs, qbase + 2 * C, C3, k0 + BK, T);
                cp_async_commit();
            }
        }
    }

#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int row = wrow0 + mt * 16 + g + 8 * r;
            const float sum = quad_sum(l[mt][r]);
            if (row >= T)
                continue;
            const float inv = 1.0f / sum;
            E *orow = out + hr.tok_off + (size_t)row * C;
#pragma unroll
            for (int i = 0; i < HS / 8; i++)
                store_pair(orow + i * 8 + 2 * t, o[mt][i][2 * r] * inv, o[mt][i][2 * r + 1] * inv);
            if (t == 0)
                lse[hr.stat_off + row] = (m[mt][r] * scale_log2 + log2f(sum)) * LN2_F;
        }
}

/* The backward's two products over the head dimension, for MT 16-row tiles of the A tiles
 * (the warp's, at row0, row0 + 16, ...) against all NC rows of the B tiles: x = A1 B1^T,
 * y = A2 B2^T (16 x NC each per row tile, in C registers).  dq kernel: (Q, K) and (dO, V);
 * dk/dv kernel: (K, Q) and (V, dO). */
template <typename E, int HS, int NC, int MT>
static __device__ __forceinline__ void head_products(float (&x)[MT][NC / 8][4],
                                                     float (&y)[MT][NC / 8][4], const E *A1,
                                                     const E *B1, const E *A2, const E *B2,
                                                     int row0, int lane)
{
    typedef mma_op<E> M;
    constexpr int LD = HS + M::PAD;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int j = 0; j < NC / 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                x[mt][j][e] = y[mt][j][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < HS / M::KS; kk++) {
        uint32_t a1[MT][4], a2[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            a_nk(a1[mt], A1, LD, row0 + 16 * mt, kk * M::KS, lane);
            a_nk(a2[mt], A2, LD, row0 + 16 * mt, kk * M::KS, lane);
        }
#pragma unroll
        for (int j = 0; j < NC / 8; j += 2) {
            uint32_t b10[2], b11[2], b20[2], b21[2];
            b_nk2(b10, b11, B1, LD, j * 8, kk * M::KS, lane);
            b_nk2(b20, b21, B2, LD, j * 8, kk * M::KS, lane);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                M::mma(x[mt][j], a1[mt], b10);
                M::mma(x[mt][j + 1], a1[mt], b11);
                M::mma(y[mt][j], a2[mt], b20);
                M::mma(y[mt][j + 1], a2[mt], b21);
            }
        }
    }
}

/* ---- backward: dq (and delta) ---------------------------------------------------------- */

/* delta = dO . O for the block's rows q0 .. q0 + blockDim.x / TPR - 1 of its head: TPR (1 or 2)
 * threads a row, each a contiguous part of the head dimension, read 16 bytes at a time with
 * BATCH vectors of each in flight (one memory latency a batch, not one an element), summed in
 * element order (so the batch changes no bit).  Into Dsh[row - q0], and delta for rows < T;
 * the caller's barrier makes Dsh visible.  Shared by the mma.sync and the wgmma dq kernels.
 * tid: the thread's index among those that share the rows (a warp-specialized kernel's
 * consumer warpgroup counts from its own first thread). */
template <typename E, int HS, int TPR, int BATCH>
static __device__ __forceinline__ void rows_delta(float *Dsh, float *delta, const E *dout,
                                                  const E *out, const head_rows &hr, int q0,
                                                  int T, int C, int tid = threadIdx.x)
{
    constexpr int VEC = 16 / (int)sizeof(E), NV = HS / TPR / VEC;
    static_assert(TPR == 1 || TPR == 2, "one or two threads per row of delta");
    static_assert(NV % BATCH == 0, "whole batches of vectors");
    const int r = tid / TPR, part = tid % TPR, qr = q0 + r;
    float acc = 0.0f;
    if (qr < T) {
        const size_t off = hr.tok_off + (size_t)qr * C + part * (HS / TPR);
        const uint4 *d4 = reinterpret_cast<const uint4 *>(dout + off),
                    *o4 = reinterpret_cast<const uint4 *>(out + off);
#pragma unroll
        for (int v0 = 0; v0 < NV; v0 += BATCH) {
            uint4 dv[BATCH], ov[BATCH];
#pragma unroll
            for (int v = 0; v < BATCH; v++) {
                dv[v] = d4[v0 + v];
                ov[v] = o4[v0 + v];
            }
#pragma unroll
            for (int v = 0; v < BATCH; v++) {
                const E *de = reinterpret_cast<const E *>(&dv[v]),
                        *oe = reinterpret_cast<const E *>(&ov[v]);
#pragma unroll
                for (int k = 0; k < VEC; k++)
                    acc += ld_f32(de[k]) * ld_f32(oe[k]);
            }
        }
    }
    if (TPR == 2)
        acc += __shfl_xor_sync(0xffffffffu, acc, 1);
    if (part == 0) {
        Dsh[r] = acc;
        if (qr < T)
            delta[hr.stat_off + qr] = acc;
    }
}

/*
 * Grid (ceil(T/BQ), B*NH), 128 threads, BQ = 64 MT (warp w: MT row tiles at w*16*MT).  Block:
 * BQ queries, walking key tiles of BK up to the diagonal.  Shared: Q, dO (BQ x HS), STAGES
 * buffers of K, V (BK x HS): with two, tile j+1 is copied while tile j is used.  First
 * delta = dO . O per row (stored for the dk/dv kernel); then per key tile S = Q K^T,
 * dP = dO V^T (registers), P = exp2(S' - lse'), dS = P (dP - delta), dQ += dS K.
 * dq = scale * dQ.
 */
/* (MT 1: at least three blocks an SM, i.e. <= 170 registers; left to itself the compiler
 * takes 196 and the SM holds two) */
template <typename E, int HS, int MT, int BK, int STAGES>
__global__ static void __launch_bounds__(TC_THREADS, MT == 1 ? 3 : 1)
flash_backward_dq_tc(E *dqkv, float *delta, const E *dout, const E *qkv, const E *out,
                     const float *lse, int T, int C, int NH, float scale, float scale_log2)
{
    typedef mma_op<E> M;
    constexpr int WR = 16 * MT, BQ = 4 * WR, LD = HS + M::PAD, TPR = TC_THREADS / BQ;
    static_assert(STAGES == 1 || STAGES == 2, "one or two K, V buffers");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    E *Qs = reinterpret_cast<E *>(smem_raw), *dOs = Qs + BQ * LD, *KVs = dOs + BQ * LD;
    __shared__ float Dsh[BQ];

    const head_rows hr = head_of_block(T, C, NH, HS);
    const int q0 = (gridDim.x - 1 - blockIdx.x) * BQ;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
    const int wrow0 = q0 + warp * WR;
    const size_t C3 = hr.C3;
    const E *qbase = qkv + hr.qkv_off;
    const E *dobase = dout + hr.tok_off;
    const int kend = min(T, q0 + BQ); /* keys past the block's last query are all masked */

    tile_load<E, BQ, HS>(Qs, qbase, C3, q0, T);
    tile_load<E, BQ, HS>(dOs, dobase, C, q0, T);
    cp_async_commit();
    if (STAGES == 2) {
        tile_load<E, BK, HS>(KVs, qbase + C, C3, 0, T);
        tile_load<E, BK, HS>(KVs + BK * LD, qbase + 2 * C, C3, 0, T);
        cp_async_commit();
    }

    /* delta from global, while the tiles arrive: up to 4 vectors of each operand in flight */
    constexpr int DELTA_VECS = HS / TPR / (16 / (int)sizeof(E));
    rows_delta<E, HS, TPR, DELTA_VECS < 4 ? DELTA_VECS : 4>(Dsh, delta, dout, out, hr, q0, T, C);
    __syncthreads();
    float dl[MT][2], ls[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int row = wrow0 + mt * 16 + g + 8 * r;
            dl[mt][r] = Dsh[warp * WR + mt * 16 + g + 8 * r];
            ls[mt][r] = row < T ? lse[hr.stat_off + row] * LOG2E_F : INFINITY;
        }

    float dq[MT][HS / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int i = 0; i < HS / 8; i++)
            dq[mt][i][0] = dq[mt][i][1] = dq[mt][i][2] = dq[mt][i][3] = 0.0f;

    for (int k0 = 0, it = 0; k0 < kend; k0 += BK, it++) {
        E *Ks = KVs + (STAGES == 2 ? (it & 1) : 0) * 2 * BK * LD, *Vs = Ks + BK * LD;
        if (STAGES == 1) {
            __syncthreads(); /* the previous tile's readers are done */
            tile_load<E, BK, HS>(Ks, qbase + C, C3, k0, T);
            tile_load<E, BK, HS>(Vs, qbase + 2 * C, C3, k0, T);
            cp_async_commit();
            tile_wait<0>();
        } else if (k0 + BK < kend) {
            /* the other buffer's readers finished at the end of the last iteration */
            E *Kn = KVs + ((it + 1) & 1) * 2 * BK * LD;
            tile_load<E, BK, HS>(Kn, qbase + C, C3, k0 + BK, T);
            tile_load<E, BK, HS>(Kn + BK * LD, qbase + 2 * C, C3, k0 + BK, T);
            cp_async_commit();
            tile_wait<1>();
        } else {
            tile_wait<0>();
        }

        if (k0 <= wrow0 + WR - 1) { /* some row of the warp sees a key of the tile */
            const bool diag = k0 + BK - 1 > wrow0; /* and some row a future key */
            float sc[MT][BK / 8][4], dp[MT][BK / 8][4]; /* S = Q K^T, dP = dO V^T */
            head_products<E, HS, BK, MT>(sc, dp, Qs, Ks, dOs, Vs, warp * WR, lane);
            /* dS = P (dP - delta), 0 above the diagonal; kept in sc */
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int j = 0; j < BK / 8; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int r = e >> 1, row = wrow0 + mt * 16 + g + 8 * r,
                                  key = k0 + j * 8 + 2 * t + (e & 1);
                        float p = exp2_fast(fmaf(sc[mt][j][e], scale_log2, -ls[mt][r]));
                        if (diag && key > row)
                            p = 0.0f;
                        sc[mt][j][e] = p * (dp[mt][j][e] - dl[mt][r]);
                    }
            accumulate_product<E, HS, BK, MT>(dq, sc, Ks, lane); /* dQ += dS K */
        }
        if (STAGES == 2)
            __syncthreads(); /* done with this buffer: the iteration after next refills it */
    }

#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int row = wrow0 + mt * 16 + g + 8 * r;
            if (row >= T)
                continue;
            E *drow = dqkv + hr.qkv_off + (size_t)row * C3;
#pragma unroll
            for (int i = 0; i < HS / 8; i++)
                store_pair(drow + i * 8 + 2 * t, dq[mt][i][2 * r] * scale,
                           dq[mt][i][2 * r + 1] * scale);
        }
}

/* ---- backward: dk, dv ----------------------------------------------------------------- */

/*
 * Grid (ceil(T/BK), B*NH), 32 WARPS threads, BK = 16 WARPS.  Block: BK keys (the first
 * keys, which see the most queries, first), walking query tiles of BQ from the diagonal to
 * T; more warps share each streamed tile.  Shared: K, V (BK x HS), STAGES buffers of Q, dO
 * (BQ x HS) and the tile's lse and delta: with two, tile j+1 is copied while tile j is used.
 * Per query tile, transposed: S^T = K Q^T, dP^T = V dO^T, P^T, dS^T; dV += P^T dO,
 * dK += dS^T Q.  dk = scale * dK.
 */
template <typename E, int HS, int WARPS, int BQ, int STAGES>
__global__ static void __launch_bounds__(32 * WARPS)
flash_backward_dkv_tc(E *dqkv, const float *delta, const E *dout, const E *qkv,
                      const float *lse, int T, int C, int NH, float scale, float scale_log2)
{
    typedef mma_op<E> M;
    constexpr int NT = 32 * WARPS, BK = 16 * WARPS, LD = HS + M::PAD;
    static_assert(STAGES == 1 || STAGES == 2, "one or two Q, dO buffers");
    static_assert(BK % BQ == 0, "query tiles start on the block's first key");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    E *Ks = reinterpret_cast<E *>(smem_raw), *Vs = Ks + BK * LD, *QdOs = Vs + BK * LD;
    float *Stats = reinterpret_cast<float *>(QdOs + STAGES * 2 * BQ * LD); /* lse', delta */

    const head_rows hr = head_of_block(T, C, NH, HS);
    const int k0 = blockIdx.x * BK;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
    const int wkey0 = k0 + warp * 16; /* the warp's first key */
    const size_t C3 = hr.C3;
    const E *qbase = qkv + hr.qkv_off;
    const E *dobase = dout + hr.tok_off;

    /* one query tile's operands into buffer b (copies joining the open group; the stats as
     * plain stores, visible after the next barrier) */
    auto load_queries = [&](int b, int q0) {
        E *Qs = QdOs + b * 2 * BQ * LD;
        tile_load<E, BQ, HS, NT>(Qs, qbase, C3, q0, T);
        tile_load<E, BQ, HS, NT>(Qs + BQ * LD, dobase, C, q0, T);
        if (threadIdx.x < BQ) {
            const int q = q0 + threadIdx.x;
            float *st = Stats + b * 2 * BQ;
            /* queries past T: probability 0 (exp2(-inf)), and no delta */
            st[threadIdx.x] = q < T ? lse[hr.stat_off + q] * LOG2E_F : INFINITY;
            st[BQ + threadIdx.x] = q < T ? delta[hr.stat_off + q] : 0.0f;
        }
    };

    tile_load<E, BK, HS, NT>(Ks, qbase + C, C3, k0, T);
    tile_load<E, BK, HS, NT>(Vs, qbase + 2 * C, C3, k0, T);
    if (STAGES == 2)
        load_queries(0, k0);
    cp_async_commit();

    float dk[HS / 8][4], dv[HS / 8][4];
#pragma unroll
    for (int i = 0; i < HS / 8; i++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            dk[i][e] = dv[i][e] = 0.0f;
    const int key[2] = {wkey0 + g, wkey0 + g + 8};

    for (int q0 = k0, it = 0; q0 < T; q0 += BQ, it++) {
        const int b = STAGES == 2 ? (it & 1) : 0;
        if (STAGES == 1) {
            __syncthreads(); /* the previous tile's readers are done */
            load_queries(0, q0);
            cp_async_commit();
            tile_wait<0>();
        } else if (q0 + BQ < T) {
            /* the other buffer's readers finished at the end of the last iteration */
            load_queries(b ^ 1, q0 + BQ);
            cp_async_commit();
            tile_wait<1>();
        } else {
            tile_wait<0>();
        }
        const E *Qs = QdOs + b * 2 * BQ * LD, *dOs = Qs + BQ * LD;
        const float *Ls = Stats + b * 2 * BQ, *Ds = Ls + BQ;

        if (q0 + BQ - 1 >= wkey0) { /* some query of the tile sees a key of the warp */
            float sc[1][BQ / 8][4], dp[1][BQ / 8][4]; /* S^T = K Q^T, dP^T = V dO^T */
            head_products<E, HS, BQ, 1>(sc, dp, Ks, Qs, Vs, dOs, warp * 16, lane);
            /* P^T into sc, dS^T into dp; 0 where the query precedes the key (only tested
             * where some query of the tile precedes the warp's last key) */
            const bool diag = q0 < wkey0 + 15;
#pragma unroll
            for (int j = 0; j < BQ / 8; j++) {
                /* this thread's two queries of the 8: adjacent, one 8-byte load each */
                const int qi = j * 8 + 2 * t;
                const float2 ls2 = *reinterpret_cast<const float2 *>(Ls + qi),
                             ds2 = *reinterpret_cast<const float2 *>(Ds + qi);
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const float lq = e & 1 ? ls2.y : ls2.x, dq = e & 1 ? ds2.y : ds2.x;
                    float p = exp2_fast(fmaf(sc[0][j][e], scale_log2, -lq));
                    if (diag && q0 + qi + (e & 1) < key[e >> 1])
                        p = 0.0f;
                    sc[0][j][e] = p;
                    dp[0][j][e] = p * (dp[0][j][e] - dq);
                }
            }
            /* dV += P^T dO,  dK += dS^T Q */
#pragma unroll
            for (int kk = 0; kk < BQ / M::KS; kk++) {
                uint32_t ap[4], as[4];
                M::a_from_c(ap, sc[0], kk);
                M::a_from_c(as, dp[0], kk);
#pragma unroll
                for (int i = 0; i < HS / 8; i += 2) {
                    uint32_t bd0[2], bd1[2], bq0[2], bq1[2];
                    M::b_kn2(bd0, bd1, dOs, LD, kk * M::KS, i * 8, lane);
                    M::b_kn2(bq0, bq1, Qs, LD, kk * M::KS, i * 8, lane);
                    M::mma(dv[i], ap, bd0);
                    M::mma(dv[i + 1], ap, bd1);
                    M::mma(dk[i], as, bq0);
                    M::mma(dk[i + 1], as, bq1);
                }
            }
        }
        if (STAGES == 2)
            __syncthreads(); /* done with this buffer: the iteration after next refills it */
    }

#pragma unroll
    for (int r = 0; r < 2; r++) {
        if (key[r] >= T)
            continue;
        E *krow = dqkv + hr.qkv_off + (size_t)key[r] * C3 + C;
#pragma unroll
        for (int i = 0; i < HS / 8; i++) {
            store_pair(krow + i * 8 + 2 * t, dk[i][2 * r] * scale, dk[i][2 * r + 1] * scale);
            store_pair(krow + C + i * 8 + 2 * t, dv[i][2 * r], dv[i][2 * r + 1]);
        }
    }
}

/* ======================================================================================
 * Tile configurations and launchers (raw streams; the op entry points in
 * cuda_attention.cu wrap them, bench/attn_sweep.cu times every configuration).
 * ==================================================================================== */

/* forward: MT row tiles per warp (BQ = 64 MT queries a block), key tiles of BK, copies
 * before (PIPE 0) or under (1) the arithmetic */
template <int MT_, int BK_, int PIPE_> struct fwd_tiles {
    static constexpr int MT = MT_, BK = BK_, PIPE = PIPE_;
};
/* dq: MT row tiles per warp (BQ = 64 MT), key tiles of BK, STAGES K/V buffers */
template <int MT_, int BK_, int STAGES_> struct dq_tiles {
    static constexpr int MT = MT_, BK = BK_, STAGES = STAGES_;
};
/* dk/dv: WARPS warps of 16 keys (BK = 16 WARPS), query tiles of BQ, STAGES Q/dO buffers */
template <int WARPS_, int BQ_, int STAGES_> struct dkv_tiles {
    static constexpr int WARPS = WARPS_, BQ = BQ_, STAGES = STAGES_;
};

/* Launches kernel with `smem` bytes of dynamic shared memory (above 48 KiB a kernel must opt
 * in first) and returns the launch's error.  Every attention launcher goes through it, the
 * SIMT ones of cuda_attention.cu too. */
template <typename... Params, typename... Args>
static cudaError_t launch_with_smem(void (*kernel)(Params...), dim3 grid, int threads,
                                    size_t smem, cudaStream_t st, Args... args)
{
    if (smem > 48 * 1024) {
        const cudaError_t e =
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess)
            return e;
    }
    kernel<<<grid, threads, smem, st>>>(args...);
    return cudaGetLastError();
}

template <typename E, int HS, typename F> static size_t attn_forward_smem()
{
    return (size_t)(64 * F::MT + 2 * F::BK) * (HS + mma_op<E>::PAD) * sizeof(E);
}
template <typename E, int HS, typename D> static size_t attn_dq_smem()
{
    return (size_t)(2 * 64 * D::MT + D::STAGES * 2 * D::BK) * (HS + mma_op<E>::PAD) * sizeof(E);
}
template <typename E, int HS, typename K> static size_t attn_dkv_smem()
{
    return (size_t)(2 * 16 * K::WARPS + K::STAGES * 2 * K::BQ) * (HS + mma_op<E>::PAD) *
               sizeof(E) +
           (size_t)K::STAGES * 2 * K::BQ * sizeof(float);
}

/* Grid (ceil(T / rows a block), B NH) for blocks of `rows` queries or keys. */
static inline dim3 attn_grid(int B, int T, int NH, int rows)
{
    return dim3((unsigned)((T + rows - 1) / rows), (unsigned)(B * NH));
}

template <typename E, int HS, typename F>
static cudaError_t attn_forward_launch(cudaStream_t st, E *out, float *lse, const E *qkv, int B,
                                       int T, int C, int NH, float scale_log2)
{
    return launch_with_smem(flash_forward_tc<E, HS, F::MT, F::BK, F::PIPE>,
                            attn_grid(B, T, NH, 64 * F::MT), TC_THREADS,
                            attn_forward_smem<E, HS, F>(), st, out, lse, qkv, T, C, NH,
                            scale_log2);
}

/* dq (which also stores delta) first, then dk, dv (which read delta) */
template <typename E, int HS, typename D>
static cudaError_t attn_dq_launch(cudaStream_t st, E *dqkv, float *delta, const E *dout,
                                  const E *qkv, const E *out, const float *lse, int B, int T,
                                  int C, int NH, float scale, float scale_log2)
{
    return launch_with_smem(flash_backward_dq_tc<E, HS, D::MT, D::BK, D::STAGES>,
                            attn_grid(B, T, NH, 64 * D::MT), TC_THREADS,
                            attn_dq_smem<E, HS, D>(), st, dqkv, delta, dout, qkv, out, lse, T, C,
                            NH, scale, scale_log2);
}
template <typename E, int HS, typename K>
static cudaError_t attn_dkv_launch(cudaStream_t st, E *dqkv, const float *delta, const E *dout,
                                   const E *qkv, const float *lse, int B, int T, int C, int NH,
                                   float scale, float scale_log2)
{
    return launch_with_smem(flash_backward_dkv_tc<E, HS, K::WARPS, K::BQ, K::STAGES>,
                            attn_grid(B, T, NH, 16 * K::WARPS), 32 * K::WARPS,
                            attn_dkv_smem<E, HS, K>(), st, dqkv, delta, dout, qkv, lse, T, C, NH,
                            scale, scale_log2);
}

/* The configuration the op entry points use, per element type: the fastest of
 * bench/attn_sweep.cu's table on an H100 (bench/results/2026-11-27-h100-attention).  Copies
 * under the arithmetic (PIPE, STAGES 2) bought nothing there but in TF32's forward: the
 * kernels are bound by shared-memory reads into fragments and by latency at 2-3 blocks an
 * SM, not by the copies (Nsight Compute in the same folder). */
template <typename E> struct attn_tiles;
template <> struct attn_tiles<bf16> {
    typedef fwd_tiles<2, 64, 0> fwd;
    typedef dq_tiles<1, 32, 1> dq;
    typedef dkv_tiles<4, 32, 1> dkv;
};
template <> struct attn_tiles<float> {
    typedef fwd_tiles<2, 32, 1> fwd;
    typedef dq_tiles<1, 32, 1> dq;
    typedef dkv_tiles<4, 32, 1> dkv;
};

#endif
