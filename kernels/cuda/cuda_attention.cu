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
 * Two implementations of the same three kernels (forward; backward dq; backward dk, dv):
 *
 *  - tensor cores (mma.sync, sm_80+): TF32 m16n8k8 for fp32 storage when TF32 is allowed,
 *    bf16 m16n8k16 for the bf16 backend; fp32 accumulation, softmax and statistics in fp32.
 *    Head sizes 32, 64, 128 (compile-time, so the fragments are registers).  A block is 4
 *    warps, each owning 16 rows of a 64-row tile; the other operand streams through shared
 *    memory in tiles.  In bf16 the probabilities (and dS) are rounded to bf16 before their
 *    products, as FlashAttention does.
 *  - SIMT fp32 FMA: --math fp32 (strict: no tensor cores), and any other head size.  Four
 *    threads per row, each owning every 4th element of the head dimension.
 *
 * The backward is deterministic (no atomics): one kernel per 64 queries forms dq (walking
 * the keys), one per 64 (or 32) keys forms dk and dv (walking the queries); each recomputes
 * the probabilities it needs.  That is 7 products instead of the 5 of an atomic dq, for
 * run-to-run identical gradients.  The dq kernel runs first and stores delta = dout . out
 * per row, which the dk/dv kernel reads.
 *
 * Causality: tiles entirely above the diagonal are never visited; a block of queries only
 * walks keys up to its last query, and query blocks are scheduled longest first.
 */
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

/* Threads per block of every tensor-core kernel: 4 warps of 16 rows each. */
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
 * copies (the caller checked that the view is 16-byte aligned), all in flight at once: the
 * tile costs one memory latency, not one per chunk.  Call tile_wait() before reading. */
template <typename E, int ROWS, int HS>
static __device__ __forceinline__ void tile_load(E *dst, const E *src, size_t stride, int row0,
                                                 int T)
{
    constexpr int VEC = 16 / (int)sizeof(E), CPR = HS / VEC, LD = HS + mma_op<E>::PAD;
#pragma unroll
    for (int c = threadIdx.x; c < ROWS * CPR; c += TC_THREADS) {
        const int r = c / CPR, cc = c % CPR;
        const bool in = row0 + r < T;
        /* a row past T reads 0 bytes (and a valid address) and zero-fills */
        const E *from = src + (size_t)(in ? row0 + r : 0) * stride + cc * VEC;
        const unsigned to = (unsigned)__cvta_generic_to_shared(dst + r * LD + cc * VEC);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(to), "l"(from),
                     "r"(in ? 16 : 0));
    }
    asm volatile("cp.async.commit_group;");
}
/* Waits for this thread's copies, then for everybody's. */
static __device__ __forceinline__ void tile_wait()
{
    asm volatile("cp.async.wait_group 0;" ::: "memory");
    __syncthreads();
}

/* acc (16 x HS, C registers) += X (16 x NK: the C registers of the previous product, P or
 * dS) times the tile B (NK x HS, kn: rows are X's columns).  Forward: O += P V; dq: dQ += dS K. */
template <typename E, int HS, int NK>
static __device__ __forceinline__ void accumulate_product(float (&acc)[HS / 8][4],
                                                          const float (&x)[NK / 8][4],
                                                          const E *B, int lane)
{
    typedef mma_op<E> M;
    constexpr int LD = HS + M::PAD;
#pragma unroll
    for (int kk = 0; kk < NK / M::KS; kk++) {
        uint32_t a[4];
        M::a_from_c(a, x, kk);
#pragma unroll
        for (int i = 0; i < HS / 8; i += 2) {
            uint32_t b0[2], b1[2];
            M::b_kn2(b0, b1, B, LD, kk * M::KS, i * 8, lane);
            M::mma(acc[i], a, b0);
            M::mma(acc[i + 1], a, b1);
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

/*
 * Grid (ceil(T/64), B*NH), 128 threads.  Block: 64 queries of one (b, h), longest (last)
 * first.  Shared: Q (64 x HS), K and V tiles (64 x HS).  Per warp: 16 queries; S (16 x 64)
 * and O (16 x HS) in registers; online softmax in the log2 domain (exp2 of pre-scaled
 * scores), rows' running max m and sum l per thread, summed over the quad at the end.
 */
template <typename E, int HS>
__global__ static void __launch_bounds__(TC_THREADS)
flash_forward_tc(E *out, float *lse, const E *qkv, int T, int C, int NH, float scale_log2)
{
    typedef mma_op<E> M;
    constexpr int BQ = 64, BK = 64, LD = HS + M::PAD;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    E *Qs = reinterpret_cast<E *>(smem_raw), *Ks = Qs + BQ * LD, *Vs = Ks + BK * LD;

    const head_rows hr = head_of_block(T, C, NH, HS);
    const int qblk = gridDim.x - 1 - blockIdx.x, q0 = qblk * BQ;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
    const size_t C3 = hr.C3;
    const E *qbase = qkv + hr.qkv_off;

    tile_load<E, BQ, HS>(Qs, qbase, C3, q0, T);

    float o[HS / 8][4];
#pragma unroll
    for (int i = 0; i < HS / 8; i++)
        o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    const int row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};

    const int nkt = qblk + 1; /* key tiles 0 .. qblk hold every key <= the block's queries */
    for (int kt = 0; kt < nkt; kt++) {
        const int k0 = kt * BK;
        __syncthreads(); /* the previous tile's readers are done */
        tile_load<E, BK, HS>(Ks, qbase + C, C3, k0, T);
        tile_load<E, BK, HS>(Vs, qbase + 2 * C, C3, k0, T);
        tile_wait();

        float sc[BK / 8][4];
#pragma unroll
        for (int j = 0; j < BK / 8; j++)
            sc[j][0] = sc[j][1] = sc[j][2] = sc[j][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < HS / M::KS; kk++) {
            uint32_t a[4];
            a_nk(a, Qs, LD, warp * 16, kk * M::KS, lane);
#pragma unroll
            for (int j = 0; j < BK / 8; j += 2) {
                uint32_t b0[2], b1[2];
                b_nk2(b0, b1, Ks, LD, j * 8, kk * M::KS, lane);
                M::mma(sc[j], a, b0);
                M::mma(sc[j + 1], a, b1);
            }
        }

        /* scale into the log2 domain; the future (key > query) is -inf on the diagonal tile */
        const bool diag = kt == qblk;
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int j = 0; j < BK / 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int key = k0 + j * 8 + 2 * t + (e & 1);
                float v = sc[j][e] * scale_log2;
                if (diag && key > row[e >> 1])
                    v = -INFINITY;
                sc[j][e] = v;
                mx[e >> 1] = fmaxf(mx[e >> 1], v);
            }
        float alpha[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const float mnew = fmaxf(m[r], quad_max(mx[r]));
            /* every row sees key 0 on tile 0, so mnew is finite from there on */
            alpha[r] = exp2f(m[r] - mnew);
            m[r] = mnew;
            l[r] *= alpha[r];
        }
#pragma unroll
        for (int j = 0; j < BK / 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float p = exp2f(sc[j][e] - m[e >> 1]);
                sc[j][e] = p;
                l[e >> 1] += p;
            }
#pragma unroll
        for (int i = 0; i < HS / 8; i++) {
            o[i][0] *= alpha[0];
            o[i][1] *= alpha[0];
            o[i][2] *= alpha[1];
            o[i][3] *= alpha[1];
        }

        /* O += P V: the probabilities go from the S registers straight into A fragments */
        accumulate_product<E, HS, BK>(o, sc, Vs, lane);
    }

#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] = quad_sum(l[r]);
        if (row[r] >= T)
            continue;
        const float inv = 1.0f / l[r];
        E *orow = out + hr.tok_off + (size_t)row[r] * C;
#pragma unroll
        for (int i = 0; i < HS / 8; i++)
            store_pair(orow + i * 8 + 2 * t, o[i][2 * r] * inv, o[i][2 * r + 1] * inv);
        if (t == 0)
            lse[hr.stat_off + row[r]] = (m[r] + log2f(l[r])) * LN2_F;
    }
}

/* The backward's two products over the head dimension, for the warp's 16 rows (row0) of the
 * A tiles against all NC rows of the B tiles: x = A1 B1^T, y = A2 B2^T (16 x NC each, in C
 * registers).  dq kernel: (Q, K) and (dO, V); dk/dv kernel: (K, Q) and (V, dO). */
template <typename E, int HS, int NC>
static __device__ __forceinline__ void head_products(float (&x)[NC / 8][4], float (&y)[NC / 8][4],
                                                     const E *A1, const E *B1, const E *A2,
                                                     const E *B2, int row0, int lane)
{
    typedef mma_op<E> M;
    constexpr int LD = HS + M::PAD;
#pragma unroll
    for (int j = 0; j < NC / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            x[j][e] = y[j][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < HS / M::KS; kk++) {
        uint32_t a1[4], a2[4];
        a_nk(a1, A1, LD, row0, kk * M::KS, lane);
        a_nk(a2, A2, LD, row0, kk * M::KS, lane);
#pragma unroll
        for (int j = 0; j < NC / 8; j += 2) {
            uint32_t b10[2], b11[2], b20[2], b21[2];
            b_nk2(b10, b11, B1, LD, j * 8, kk * M::KS, lane);
            b_nk2(b20, b21, B2, LD, j * 8, kk * M::KS, lane);
            M::mma(x[j], a1, b10);
            M::mma(x[j + 1], a1, b11);
            M::mma(y[j], a2, b20);
            M::mma(y[j + 1], a2, b21);
        }
    }
}

/* ---- backward: dq (and delta) ---------------------------------------------------------- */

/*
 * Grid (ceil(T/64), B*NH), 128 threads.  Block: 64 queries, walking key tiles of 32 up to
 * the diagonal.  Shared: Q, dO (64 x HS), K, V (32 x HS).  First delta = dO . O per row
 * (stored for the dk/dv kernel); then per key tile S = Q K^T, dP = dO V^T (registers),
 * P = exp2(S' - lse'), dS = P (dP - delta), dQ += dS K.  dq = scale * dQ.
 */
template <typename E, int HS>
__global__ static void __launch_bounds__(TC_THREADS)
flash_backward_dq_tc(E *dqkv, float *delta, const E *dout, const E *qkv, const E *out,
                     const float *lse, int T, int C, int NH, float scale, float scale_log2)
{
    typedef mma_op<E> M;
    constexpr int BQ = 64, BK = 32, LD = HS + M::PAD;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    E *Qs = reinterpret_cast<E *>(smem_raw), *dOs = Qs + BQ * LD, *Ks = dOs + BQ * LD,
      *Vs = Ks + BK * LD;

    const head_rows hr = head_of_block(T, C, NH, HS);
    const int qblk = gridDim.x - 1 - blockIdx.x, q0 = qblk * BQ;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
    const size_t C3 = hr.C3;
    const E *qbase = qkv + hr.qkv_off;
    const E *dobase = dout + hr.tok_off;

    __shared__ float Dsh[BQ];
    tile_load<E, BQ, HS>(Qs, qbase, C3, q0, T);
    tile_load<E, BQ, HS>(dOs, dobase, C, q0, T);

    /* delta = dO . O per row, from global (while the tiles arrive): two threads per row,
     * each half of the head dimension */
    {
        const int r = threadIdx.x / 2, half = threadIdx.x % 2, qr = q0 + r;
        float acc = 0.0f;
        if (qr < T) {
            const size_t off = hr.tok_off + (size_t)qr * C + half * (HS / 2);
#pragma unroll 8
            for (int i = 0; i < HS / 2; i++)
                acc += ld_f32(dout[off + i]) * ld_f32(out[off + i]);
        }
        acc += __shfl_xor_sync(0xffffffffu, acc, 1);
        if (half == 0) {
            Dsh[r] = acc;
            if (qr < T)
                delta[hr.stat_off + qr] = acc;
        }
    }
    tile_wait();
    const int row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
    float dl[2] = {Dsh[warp * 16 + g], Dsh[warp * 16 + g + 8]}, ls[2] = {INFINITY, INFINITY};
    for (int r = 0; r < 2; r++)
        if (row[r] < T)
            ls[r] = lse[hr.stat_off + row[r]] * LOG2E_F;

    float dq[HS / 8][4];
#pragma unroll
    for (int i = 0; i < HS / 8; i++)
        dq[i][0] = dq[i][1] = dq[i][2] = dq[i][3] = 0.0f;

    const int kend = min(T, q0 + BQ); /* keys past the block's last query are all masked */
    for (int k0 = 0; k0 < kend; k0 += BK) {
        __syncthreads();
        tile_load<E, BK, HS>(Ks, qbase + C, C3, k0, T);
        tile_load<E, BK, HS>(Vs, qbase + 2 * C, C3, k0, T);
        tile_wait();

        float sc[BK / 8][4], dp[BK / 8][4]; /* S = Q K^T, dP = dO V^T */
        head_products<E, HS, BK>(sc, dp, Qs, Ks, dOs, Vs, warp * 16, lane);
        /* dS = P (dP - delta), 0 above the diagonal; kept in sc */
#pragma unroll
        for (int j = 0; j < BK / 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = e >> 1, key = k0 + j * 8 + 2 * t + (e & 1);
                const float p = key <= row[r] ? exp2f(sc[j][e] * scale_log2 - ls[r]) : 0.0f;
                sc[j][e] = p * (dp[j][e] - dl[r]);
            }
        accumulate_product<E, HS, BK>(dq, sc, Ks, lane); /* dQ += dS K */
    }

#pragma unroll
    for (int r = 0; r < 2; r++) {
        if (row[r] >= T)
            continue;
        E *drow = dqkv + hr.qkv_off + (size_t)row[r] * C3;
#pragma unroll
        for (int i = 0; i < HS / 8; i++)
            store_pair(drow + i * 8 + 2 * t, dq[i][2 * r] * scale, dq[i][2 * r + 1] * scale);
    }
}

/* ---- backward: dk, dv ----------------------------------------------------------------- */

/*
 * Grid (ceil(T/64), B*NH), 128 threads.  Block: 64 keys (the first keys, which see the most
 * queries, first), walking query tiles of 32 from the diagonal to T.  Shared: K, V (64 x
 * HS), Q, dO (32 x HS), the tile's lse and delta.  Per query tile, transposed: S^T = K Q^T,
 * dP^T = V dO^T, P^T, dS^T; dV += P^T dO, dK += dS^T Q.  dk = scale * dK.
 */
template <typename E, int HS>
__global__ static void __launch_bounds__(TC_THREADS)
flash_backward_dkv_tc(E *dqkv, const float *delta, const E *dout, const E *qkv,
                      const float *lse, int T, int C, int NH, float scale, float scale_log2)
{
    typedef mma_op<E> M;
    constexpr int BK = 64, BQ = 32, LD = HS + M::PAD;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    E *Ks = reinterpret_cast<E *>(smem_raw), *Vs = Ks + BK * LD, *Qs = Vs + BK * LD,
      *dOs = Qs + BQ * LD;
    float *Ls = reinterpret_cast<float *>(dOs + BQ * LD), *Ds = Ls + BQ;

    const head_rows hr = head_of_block(T, C, NH, HS);
    const int k0 = blockIdx.x * BK;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
    const size_t C3 = hr.C3;
    const E *qbase = qkv + hr.qkv_off;
    const E *dobase = dout + hr.tok_off;

    tile_load<E, BK, HS>(Ks, qbase + C, C3, k0, T);
    tile_load<E, BK, HS>(Vs, qbase + 2 * C, C3, k0, T);

    float dk[HS / 8][4], dv[HS / 8][4];
#pragma unroll
    for (int i = 0; i < HS / 8; i++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            dk[i][e] = dv[i][e] = 0.0f;
    const int key[2] = {k0 + warp * 16 + g, k0 + warp * 16 + g + 8};

    for (int q0 = k0; q0 < T; q0 += BQ) {
        __syncthreads();
        tile_load<E, BQ, HS>(Qs, qbase, C3, q0, T);
        tile_load<E, BQ, HS>(dOs, dobase, C, q0, T);
        if (threadIdx.x < BQ) {
            const int q = q0 + threadIdx.x;
            /* queries past T: probability 0 (exp2(-inf)), and no delta */
            Ls[threadIdx.x] = q < T ? lse[hr.stat_off + q] * LOG2E_F : INFINITY;
            Ds[threadIdx.x] = q < T ? delta[hr.stat_off + q] : 0.0f;
        }
        tile_wait();

        float sc[BQ / 8][4], dp[BQ / 8][4]; /* S^T = K Q^T, dP^T = V dO^T */
        head_products<E, HS, BQ>(sc, dp, Ks, Qs, Vs, dOs, warp * 16, lane);
        /* P^T into sc, dS^T into dp; 0 where the query precedes the key */
#pragma unroll
        for (int j = 0; j < BQ / 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int qi = j * 8 + 2 * t + (e & 1);
                const float p =
                    q0 + qi >= key[e >> 1] ? exp2f(sc[j][e] * scale_log2 - Ls[qi]) : 0.0f;
                sc[j][e] = p;
                dp[j][e] = p * (dp[j][e] - Ds[qi]);
            }
        /* dV += P^T dO,  dK += dS^T Q */
#pragma unroll
        for (int kk = 0; kk < BQ / M::KS; kk++) {
            uint32_t ap[4], as[4];
            M::a_from_c(ap, sc, kk);
            M::a_from_c(as, dp, kk);
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

/* Dynamic shared memory above 48 KiB needs an opt-in per kernel; set it before launch. */
template <typename K>
static void allow_smem(gpt_stream *s, K kernel, size_t bytes)
{
    if (bytes > 48 * 1024)
        OP_CHECK_CUDA(s, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              (int)bytes));
}

template <typename E, int HS>
static void forward_tc(gpt_stream *s, E *out, float *lse, const E *qkv, int B, int T, int C,
                       int NH, float scale_log2)
{
    constexpr int LD = HS + mma_op<E>::PAD;
    const size_t smem = (size_t)(64 + 64 + 64) * LD * sizeof(E);
    allow_smem(s, flash_forward_tc<E, HS>, smem);
    const dim3 grid((unsigned)((T + 63) / 64), (unsigned)(B * NH));
    flash_forward_tc<E, HS><<<grid, TC_THREADS, smem, cu_stream(s)->stream>>>(out, lse, qkv, T, C,
                                                                              NH, scale_log2);
    OP_CHECK_LAUNCH(s);
}

template <typename E, int HS>
static void backward_tc(gpt_stream *s, E *dqkv, float *delta, const E *dout, const E *qkv,
                        const E *out, const float *lse, int B, int T, int C, int NH,
                        float scale, float scale_log2)
{
    constexpr int LD = HS + mma_op<E>::PAD;
    const dim3 grid((unsigned)((T + 63) / 64), (unsigned)(B * NH));
    const size_t smem_dq = (size_t)(64 + 64 + 32 + 32) * LD * sizeof(E);
    allow_smem(s, flash_backward_dq_tc<E, HS>, smem_dq);
    flash_backward_dq_tc<E, HS><<<grid, TC_THREADS, smem_dq, cu_stream(s)->stream>>>(
        dqkv, delta, dout, qkv, out, lse, T, C, NH, scale, scale_log2);
    OP_CHECK_LAUNCH(s);
    const size_t smem_dkv = (size_t)(64 + 64 + 32 + 32) * LD * sizeof(E) + 2 * 32 * sizeof(float);
    allow_smem(s, flash_backward_dkv_tc<E, HS>, smem_dkv);
    flash_backward_dkv_tc<E, HS><<<grid, TC_THREADS, smem_dkv, cu_stream(s)->stream>>>(
        dqkv, delta, dout, qkv, lse, T, C, NH, scale, scale_log2);
    OP_CHECK_LAUNCH(s);
}

template <typename E, int DPT>
static void forward_simt(gpt_stream *s, E *out, float *lse, const E *qkv, int B, int T, int C,
                         int NH, float scale_log2)
{
    const size_t smem = 2 * (size_t)SIMT_TILE * simt_row<DPT>::RS * sizeof(float);
    allow_smem(s, flash_forward_simt<E, DPT>, smem);
    const dim3 grid((unsigned)((T + SIMT_ROWS - 1) / SIMT_ROWS), (unsigned)(B * NH));
    flash_forward_simt<E, DPT><<<grid, 128, smem, cu_stream(s)->stream>>>(out, lse, qkv, T, C,
                                                                          NH, scale_log2);
    OP_CHECK_LAUNCH(s);
}

template <typename E, int DPT>
static void backward_simt(gpt_stream *s, E *dqkv, float *delta, const E *dout, const E *qkv,
                          const E *out, const float *lse, int B, int T, int C, int NH,
                          float scale, float scale_log2)
{
    const dim3 grid((unsigned)((T + SIMT_ROWS - 1) / SIMT_ROWS), (unsigned)(B * NH));
    const size_t smem_dq = 2 * (size_t)SIMT_TILE * simt_row<DPT>::RS * sizeof(float);
    allow_smem(s, flash_backward_dq_simt<E, DPT>, smem_dq);
    flash_backward_dq_simt<E, DPT><<<grid, 128, smem_dq, cu_stream(s)->stream>>>(
        dqkv, delta, dout, qkv, out, lse, T, C, NH, scale, scale_log2);
    OP_CHECK_LAUNCH(s);
    const size_t smem_dkv = smem_dq + 2 * SIMT_TILE * sizeof(float);
    allow_smem(s, flash_backward_dkv_simt<E, DPT>, smem_dkv);
    flash_backward_dkv_simt<E, DPT><<<grid, 128, smem_dkv, cu_stream(s)->stream>>>(
        dqkv, delta, dout, qkv, lse, T, C, NH, scale, scale_log2);
    OP_CHECK_LAUNCH(s);
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
    if (use_tensor_cores(s, hs, C, qkv, NULL))
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
    if (use_tensor_cores(s, hs, C, qkv, dout))
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
