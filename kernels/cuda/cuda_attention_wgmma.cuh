/*
 * cuda_attention_wgmma.cuh — the causal attention's three kernels (forward; backward dq;
 * backward dk, dv) on Hopper's warpgroup MMA (wgmma, sm_90a), bf16 with head size 128: the
 * l32 model's shape.  Same algorithm, layout and results as the mma.sync kernels of
 * cuda_attention_tc.cuh (cuda_attention.cu says what they compute); what changes is where the
 * products read their operands.  mma.sync needs every operand in registers, loaded from shared
 * memory by ldmatrix, and Nsight Compute found those loads and their latency binding the
 * mma.sync kernels (bench/results/2026-11-27-h100-attention).  wgmma reads the shared-memory
 * operands itself, through descriptors, for a whole warpgroup (4 warps) at once.
 *
 * Why the results are the mma.sync kernels' bit for bit: both accumulate every product in k
 * steps of 16 into fp32 registers, in the same order (the head dimension from 0; keys, or
 * queries, tile after tile from the first), and round P and dS to bf16 the same way; the
 * mma.sync kernels' smaller tiles only cut the same sequence of k steps elsewhere.
 * bench/attn_wgmma.cu and test_cuda check it.
 *
 * A block is one warpgroup (128 threads) and 64 rows (queries: forward, dq; keys: dk/dv);
 * warp w owns rows 16w..16w+15, and an accumulator of m64nN is, per warp, mma.sync's m16n8
 * layout repeated over N / 8 columns: acc[4j + e] is (row g + 8 (e / 2), column 8j + 2t + e % 2),
 * g = lane / 4, t = lane % 4.  That is also the layout of an A operand in registers, so P and
 * dS go from accumulator to operand without shared memory (as in the mma.sync kernels).
 *
 * Shared memory: 64 x 128 bf16 tiles (16 KiB), each two 64 x 64 halves (the head dimension
 * split at 64) in the 128-byte swizzle (16-byte chunk c of row r at chunk c ^ (r % 8)),
 * 1024-byte aligned, copied by cp.async (generic proxy) and read by wgmma (async proxy): a
 * proxy fence between.  The products, all bf16 in, fp32 accumulation:
 *   X Y^T   (S = Q K^T; dP = dO V^T; S^T = K Q^T; dP^T = V dO^T): m64n64k16, both operands
 *           K-major from shared memory (8 steps over the head dimension);
 *   P Y     (O += P V; dQ += dS K; dV += P^T dO; dK += dS^T Q): m64n128k16, P from registers,
 *           Y from shared memory MN-major (its rows are the k dimension: transposed; 4 steps
 *           over the 64 keys or queries).
 * A block copies its tiles, waits, multiplies, waits; with PIPE the next tile's copies run
 * under this one's arithmetic (a second buffer).  Two or three blocks an SM (shared memory,
 * registers) overlap one another's copies and arithmetic besides.
 *
 * Compiled only for sm_90a (the `a` features: wgmma): every other device pass compiles the
 * kernels to a trap, and cu_attention_wgmma_available() (cuda_attention.cu) asks the device
 * which build it runs before the backend chooses them.
 */
#ifndef AEBENCH_CUDA_ATTENTION_WGMMA_CUH
#define AEBENCH_CUDA_ATTENTION_WGMMA_CUH

#include "cuda_attention_tc.cuh"

/* 1 where wgmma exists: sm_90a device passes, and the host pass (which sees the kernels'
 * signatures only) */
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WG_HAVE_WGMMA 0
#else
#define WG_HAVE_WGMMA 1
#endif

#define WG_HS 128            /* head size */
#define WG_ROWS 64           /* rows a block, rows a streamed tile */
#define WG_THREADS 128       /* one warpgroup */
#define WG_HALF_BYTES 8192   /* one 64 x 64 bf16 half tile */
#define WG_TILE_BYTES 16384  /* a 64 x 128 tile */
#define WG_STEP_BYTES 2048   /* 16 rows of a half: one k step of an MN-major operand */


#if WG_HAVE_WGMMA

/* ---- shared memory: the swizzled tiles ---------------------------------------------------- */

/* Byte offset of (row, 16-byte chunk ch) in a tile whose head dimension is cut into parts of
 * 128 bytes a row (64 bf16 or 32 fp32 elements; a part is part_bytes = rows x 128): part ch / 8,
 * then the row's 128 bytes with its chunk index XORed by row % 8 (the 128-byte swizzle, which
 * the hardware applies on address bits 4-6 ^ 7-9: hence the 1024-byte alignment of each
 * part).  bf16 tiles of 64 rows: two halves of WG_HALF_BYTES. */
static __device__ __forceinline__ unsigned wg_offset(int row, int ch,
                                                     unsigned part_bytes = WG_HALF_BYTES)
{
    return (unsigned)((ch >> 3) * part_bytes + row * 128 + (((ch & 7) ^ (row & 7)) << 4));
}

/* Rows [row0, row0 + ROWS) of a (T, 128) view of E (row stride `stride` elements) into a tile
 * (wg_offset's parts of ROWS x 128 bytes); rows at or past T become zeros.  16-byte cp.async
 * copies by NT threads (tid: this thread's index among them), joining each one's open group. */
template <int ROWS = WG_ROWS, int NT = WG_THREADS, typename E>
static __device__ __forceinline__ void wg_tile_load(unsigned tile, const E *src, size_t stride,
                                                    int row0, int T, int tid = threadIdx.x)
{
    constexpr int CPR = WG_HS * (int)sizeof(E) / 16, CPR_LOG2 = CPR == 16 ? 4 : 5; /* chunks a row */
    static_assert(CPR == 1 << CPR_LOG2, "16 (bf16) or 32 (fp32) chunks a row");
#pragma unroll
    for (int i = 0; i < ROWS * CPR / NT; i++) {
        const int c = tid + NT * i, r = c >> CPR_LOG2, ch = c & (CPR - 1);
        const bool in = row0 + r < T;
        const E *from = src + (size_t)(in ? row0 + r : 0) * stride + ch * (16 / (int)sizeof(E));
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(
                         tile + wg_offset(r, ch, ROWS * 128)),
                     "l"(from), "r"(in ? 16 : 0));
    }
}

/* Closes the copy group, waits until at most PENDING of this thread's groups are in flight
 * (0: all done; 1: all but the one just closed, the next tile's), makes the copies visible to
 * the async proxy (wgmma), then waits for every thread of the block (and so for their copies
 * and plain shared stores). */
template <int PENDING> static __device__ __forceinline__ void wg_copies_ready()
{
    asm volatile("cp.async.commit_group;" ::: "memory");
    asm volatile("cp.async.wait_group %0;" ::"n"(PENDING) : "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
}

/* Named barriers (1..15; 0 is __syncthreads): bar.sync waits until `count` threads (a multiple
 * of 32) have arrived, bar.arrive arrives without waiting; the writes before either are seen by
 * the threads that wait.  The warp-specialized kernels hand their stages over with them. */
static __device__ __forceinline__ void named_sync(int id, int count)
{
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}
static __device__ __forceinline__ void named_arrive(int id, int count)
{
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(count) : "memory");
}

/* The block's dynamic shared memory as a 1024-byte aligned shared-window address. */
static __device__ __forceinline__ unsigned wg_smem_base()
{
    extern __shared__ __align__(1024) unsigned char wg_smem_raw[];
    return ((unsigned)__cvta_generic_to_shared(wg_smem_raw) + 1023u) & ~1023u;
}

/* ---- the streamed tiles ---------------------------------------------------------------- */

/* Iteration `it` of a walk over tiles of 64 rows (this one at row j0, the walk ending at jend):
 * makes this tile's operands ready in shared memory and returns their buffer.  Without PIPE,
 * one buffer: wait for every thread to finish with it, copy, wait.  With PIPE, two: the next
 * tile's copies (into the other buffer, whose readers passed wg_tile_done's barrier) start
 * before this one's are waited for; the walk's first tile was copied by the caller, in a group of
 * its own.  load(b, row0) copies a tile's operands into buffer b (joining the open group). */
template <int PIPE, typename Load>
static __device__ __forceinline__ int wg_tile_next(int it, int j0, int jend, Load load)
{
    const int b = PIPE ? it & 1 : 0;
    if (!PIPE) {
        __syncthreads(); /* every thread has waited for the previous tile's products */
        load(0, j0);
        wg_copies_ready<0>();
    } else if (j0 + WG_ROWS < jend) {
        load(b ^ 1, j0 + WG_ROWS);
        wg_copies_ready<1>();
    } else {
        wg_copies_ready<0>();
    }
    return b;
}
/* The end of an iteration: with PIPE, every thread is done with this buffer before the
 * iteration after next refills it. */
template <int PIPE> static __device__ __forceinline__ void wg_tile_done()
{
    if (PIPE)
        __syncthreads();
}

/* The K and V tiles of a walk over a head's keys (the forward, dq): buffer b's K at tile 2b of
 * kv, its V at 2b + 1.  keys(b, k0) copies key rows k0.. into buffer b (wg_tile_next's load). */
struct wg_key_tiles {
    unsigned kv;
    const bf16 *qbase; /* the head's q of token 0 in qkv: k at + C, v at + 2C */
    size_t C3;
    int C, T;
    __device__ unsigned k(int b) const { return kv + 2 * b * WG_TILE_BYTES; }
    __device__ unsigned v(int b) const { return k(b) + WG_TILE_BYTES; }
    __device__ void operator()(int b, int k0) const
    {
        wg_tile_load(k(b), qbase + C, C3, k0, T);
        wg_tile_load(v(b), qbase + 2 * C, C3, k0, T);
    }
};

/* ---- wgmma ------------------------------------------------------------------------------ */

/* A shared-memory matrix descriptor: start address >> 4 (bits 0-13), leading-dimension byte
 * offset >> 4 (16-29), stride-dimension byte offset >> 4 (32-45), base offset 0 (the halves
 * are 1024-byte aligned), swizzle mode 1 = 128 bytes (62-63). */
static __device__ __forceinline__ uint64_t wg_desc(unsigned addr, unsigned lbo, unsigned sbo)
{
    return (uint64_t)((addr >> 4) & 0x3fff) | (uint64_t)((lbo >> 4) & 0x3fff) << 16 |
           (uint64_t)((sbo >> 4) & 0x3fff) << 32 | (uint64_t)1 << 62;
}
/* K-major (X, Y of X Y^T), k step kk of 16 over the head dimension: half kk / 4, 32 bytes a
 * step within the row; rows of 128 bytes, 8-row groups 1024 bytes apart (the leading offset
 * is unused inside a 128-byte swizzle atom). */
static __device__ __forceinline__ uint64_t wg_desc_kmajor(unsigned tile, int kk)
{
    return wg_desc(tile + (kk >> 2) * WG_HALF_BYTES + (kk & 3) * 32, 16, 1024);
}
/* MN-major (Y of P Y: the head dimension contiguous, N = 128), k step kk of 16 rows: the
 * leading offset steps between the two 64-column halves, the stride between 8-row groups. */
static __device__ __forceinline__ uint64_t wg_desc_mnmajor(unsigned tile, int kk)
{
    return wg_desc(tile + kk * WG_STEP_BYTES, WG_HALF_BYTES, 1024);
}

static __device__ __forceinline__ void wg_fence()
{
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
static __device__ __forceinline__ void wg_commit_and_wait()
{
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
}

/* The 32 accumulator operands of m64n64 and the 64 of m64n128, as asm operand lists. */
#define WG_F8(a, i)                                                                         \
    "+f"(a[i]), "+f"(a[i + 1]), "+f"(a[i + 2]), "+f"(a[i + 3]), "+f"(a[i + 4]),             \
        "+f"(a[i + 5]), "+f"(a[i + 6]), "+f"(a[i + 7])
#define WG_F32(a) WG_F8(a, 0), WG_F8(a, 8), WG_F8(a, 16), WG_F8(a, 24)
#define WG_F64(a) WG_F32(a), WG_F8(a, 32), WG_F8(a, 40), WG_F8(a, 48), WG_F8(a, 56)
/* ... and their places in the instruction's text: %0 .. %31, %0 .. %63 */
#define WG_D32                                                                              \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "               \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define WG_D64                                                                              \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "               \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "      \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "      \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"

/* s (64 x 64) += X (64 x 16, K-major) Y^T (Y 64 x 16, K-major); scale_d 0 starts from zero */
static __device__ __forceinline__ void wg_m64n64k16_ss(float (&s)[32], uint64_t dx, uint64_t dy,
                                                       int scale_d)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " WG_D32 ", "
                 "%32, %33, p, 1, 1, 0, 0;\n}\n"
                 : WG_F32(s)
                 : "l"(dx), "l"(dy), "r"(scale_d));
}

/* acc (64 x 128) += P (64 x 16, registers: the accumulator layout, bf16 pairs) Y (16 x 128,
 * MN-major, transposed) */
static __device__ __forceinline__ void wg_m64n128k16_rs(float (&acc)[64], const uint32_t (&p)[4],
                                                        uint64_t dy)
{
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " WG_D64 ", "
                 "{%64, %65, %66, %67}, %68, 1, 1, 1, 1;\n"
                 : WG_F64(acc)
                 : "r"(p[0]), "r"(p[1]), "r"(p[2]), "r"(p[3]), "l"(dy));
}

/* s (64 x 64) = X Y^T over the head dimension (tiles X, Y), committed, not waited for */
static __device__ __forceinline__ void wg_product_xyt(float (&s)[32], unsigned x, unsigned y)
{
#pragma unroll
    for (int kk = 0; kk < WG_HS / 16; kk++)
        wg_m64n64k16_ss(s, wg_desc_kmajor(x, kk), wg_desc_kmajor(y, kk), kk > 0);
}

/* acc (64 x 128) += P Y over the tile's 64 rows: p[kk] the A operand of rows 16 kk.. */
static __device__ __forceinline__ void wg_product_py(float (&acc)[64], const uint32_t (&p)[4][4],
                                                     unsigned y)
{
#pragma unroll
    for (int kk = 0; kk < WG_ROWS / 16; kk++)
        wg_m64n128k16_rs(acc, p[kk], wg_desc_mnmajor(y, kk));
}

/* Values v (4 a chunk: the accumulator's e order) of column chunk j (8 columns) into the A
 * operand of k step j / 2: chunk j is its low (j even) or high (j odd) 8 columns. */
static __device__ __forceinline__ void wg_pack_chunk(uint32_t (&p)[4][4], int j, const float (&v)[4])
{
    p[j >> 1][2 * (j & 1)] = mma_op<bf16>::pack(v[0], v[1]);
    p[j >> 1][2 * (j & 1) + 1] = mma_op<bf16>::pack(v[2], v[3]);
}

/* (row g + 8 r of the warp, columns 8j + 2t, +1 for j < 16) of a 64 x 128 accumulator, times
 * `mult`, to the row at `dst` */
template <typename E>
static __device__ __forceinline__ void wg_store_row(E *dst, const float (&acc)[64], int r, int t,
                                                    float mult)
{
#pragma unroll
    for (int j = 0; j < 16; j++)
        store_pair(dst + 8 * j + 2 * t, acc[4 * j + 2 * r] * mult, acc[4 * j + 2 * r + 1] * mult);
}

#endif /* WG_HAVE_WGMMA */

/* ---- forward ----------------------------------------------------------------------------- */

#if WG_HAVE_WGMMA
/* The online softmax of key tile k0 (KEYS keys) on its scores s (the accumulator of S = Q K^T,
 * raw units): keys past a row masked where the tile reaches past the warp's first row; the
 * running max m (raw units) and sum l updated; alpha[r], the factor row g + 8r's O must be
 * scaled by before this tile's P V is added; P = exp2(s c - m c) (c = scale_log2), handed a
 * chunk of 8 keys at a time to pack(j, p[4]), which makes the A operands of P V (bf16 pairs,
 * or TF32 in the experiment of bench/attn_wgmma_tf32.cu).  O is rescaled by the caller: the
 * same factor, whenever O is not in flight. */
template <int KEYS, typename Pack>
static __device__ __forceinline__ void wg_softmax_tile(float (&s)[KEYS / 2], float (&m)[2],
                                                       float (&l)[2], float (&alpha)[2], int k0,
                                                       int wrow0, int g, int t, float scale_log2,
                                                       Pack pack)
{
    const bool diag = k0 + KEYS - 1 > wrow0; /* some key of the tile follows some row */
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < KEYS / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int row = wrow0 + g + 8 * (e >> 1), key = k0 + 8 * j + 2 * t + (e & 1);
            if (diag && key > row)
                s[4 * j + e] = -INFINITY;
            mx[e >> 1] = fmaxf(mx[e >> 1], s[4 * j + e]);
        }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const float mnew = fmaxf(m[r], quad_max(mx[r]));
        alpha[r] = mnew != m[r] ? exp2_fast((m[r] - mnew) * scale_log2) : 1.0f;
        m[r] = mnew;
        l[r] *= alpha[r];
    }
    const float mc[2] = {m[0] * scale_log2, m[1] * scale_log2};
#pragma unroll
    for (int j = 0; j < KEYS / 8; j++) {
        float pv[4];
#pragma unroll
        for (int e = 0; e < 4; e++) {
            pv[e] = exp2_fast(fmaf(s[4 * j + e], scale_log2, -mc[e >> 1]));
            l[e >> 1] += pv[e];
        }
        pack(j, pv);
    }
}

/* o[4j + e] (row g + 8 (e / 2)) *= alpha of its row */
static __device__ __forceinline__ void wg_rescale(float (&o)[64], const float (&alpha)[2])
{
#pragma unroll
    for (int i = 0; i < 64; i++)
        o[i] *= alpha[(i >> 1) & 1];
}

/* The block's rows of out (O / l) and lse */
template <typename E>
static __device__ __forceinline__ void wg_forward_store(E *out, float *lse, const head_rows &hr,
                                                        const float (&o)[64], const float (&m)[2],
                                                        const float (&l)[2], int wrow0, int g,
                                                        int t, int T, int C, float scale_log2)
{
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = wrow0 + g + 8 * r;
        const float sum = quad_sum(l[r]);
        if (row >= T)
            continue;
        wg_store_row(out + hr.tok_off + (size_t)row * C, o, r, t, 1.0f / sum);
        if (t == 0)
            lse[hr.stat_off + row] = (m[r] * scale_log2 + log2f(sum)) * LN2_F;
    }
}
#endif

/*
 * Grid (ceil(T/64), B*NH), 128 threads.  Block: 64 queries of one (b, h), the longest first.
 * Shared: Q, and 1 + PIPE K and V tiles: with PIPE, tile j+1 is copied while tile j is used.
 * Per key tile up to the diagonal: S = Q K^T; the online softmax on S in registers (log2
 * domain, running max in raw units, O rescaled only when a row's max moves: as
 * flash_forward_tc); O += P V.
 */
template <int PIPE>
__global__ static void __launch_bounds__(WG_THREADS)
flash_forward_wgmma(bf16 *out, float *lse, const bf16 *qkv, int T, int C, int NH, float scale_log2)
{
#if WG_HAVE_WGMMA
    const unsigned Qs = wg_smem_base(), KVs = Qs + WG_TILE_BYTES; /* K, V of buffer b at 2b */
    const head_rows hr = head_of_block(T, C, NH, WG_HS);
    const int q0 = (gridDim.x - 1 - blockIdx.x) * WG_ROWS;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
    const int wrow0 = q0 + warp * 16;
    const size_t C3 = hr.C3;
    const bf16 *qbase = qkv + hr.qkv_off;
    const wg_key_tiles keys = {KVs, qbase, C3, C, T};

    wg_tile_load(Qs, qbase, C3, q0, T); /* joins the first key tile's copies */
    if (PIPE) { /* a group of their own, so that waiting for all but the newest waits for them */
        keys(0, 0);
        asm volatile("cp.async.commit_group;" ::: "memory");
    }

    float o[64];
#pragma unroll
    for (int i = 0; i < 64; i++)
        o[i] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}; /* m in raw score units */

    const int kend = min(T, q0 + WG_ROWS);
    for (int k0 = 0, it = 0; k0 < kend; k0 += WG_ROWS, it++) {
        const int b = wg_tile_next<PIPE>(it, k0, kend, keys);
        const unsigned Ks = keys.k(b), Vs = keys.v(b);

        float s[32];
        wg_fence();
        wg_product_xyt(s, Qs, Ks);
        wg_commit_and_wait();

        float alpha[2];
        uint32_t p[4][4];
        wg_softmax_tile<WG_ROWS>(s, m, l, alpha, k0, wrow0, g, t, scale_log2,
                                 [&](int j, const float(&pv)[4]) { wg_pack_chunk(p, j, pv); });
        wg_rescale(o, alpha);

        wg_fence();
        wg_product_py(o, p, Vs);
        wg_commit_and_wait();
        wg_tile_done<PIPE>();
    }
    wg_forward_store(out, lse, hr, o, m, l, wrow0, g, t, T, C, scale_log2);
#else
    __trap();
#endif
}

/* ---- backward: dq (and delta) ------------------------------------------------------------ */

#if WG_HAVE_WGMMA
/* dS of column chunk j (keys k0 + 8j ..) of the warp's rows from S and dP (accumulators of N):
 * P = exp2(S c - lse'), 0 where the key follows the row (tested only where the tile crosses
 * the diagonal), dS = P (dP - delta); ls, dl: lse' (log2 units) and delta of rows g, g + 8 */
template <int N>
static __device__ __forceinline__ void wg_ds_chunk(float (&v)[4], const float (&s)[N],
                                                   const float (&dp)[N], int j, int k0, int wrow0,
                                                   int g, int t, bool diag, const float (&ls)[2],
                                                   const float (&dl)[2], float scale_log2)
{
#pragma unroll
    for (int e = 0; e < 4; e++) {
        const int r = e >> 1, row = wrow0 + g + 8 * r, key = k0 + 8 * j + 2 * t + (e & 1);
        float p = exp2_fast(fmaf(s[4 * j + e], scale_log2, -ls[r]));
        if (diag && key > row)
            p = 0.0f;
        v[e] = p * (dp[4 * j + e] - dl[r]);
    }
}

/* The dq kernels' per-row statistics of the warp's rows g, g + 8: delta from drows (the block's
 * delta in shared memory, from the warp's first row) and lse' (log2 units; rows past T:
 * probability 0, exp2(-inf)) */
static __device__ __forceinline__ void wg_row_stats(float (&dl)[2], float (&ls)[2], const float *drows,
                                                    const float *lse, const head_rows &hr, int wrow0,
                                                    int g, int T)
{
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = wrow0 + g + 8 * r;
        dl[r] = drows[g + 8 * r];
        ls[r] = row < T ? lse[hr.stat_off + row] * LOG2E_F : INFINITY;
    }
}

/* The warp's rows of dq (scale dQ) into dqkv */
template <typename E>
static __device__ __forceinline__ void wg_store_dq(E *dqkv, const head_rows &hr, const float (&dq)[64],
                                                   int wrow0, int g, int t, int T, float scale)
{
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = wrow0 + g + 8 * r;
        if (row < T)
            wg_store_row(dqkv + hr.qkv_off + (size_t)row * hr.C3, dq, r, t, scale);
    }
}
#endif

/*
 * Grid (ceil(T/64), B*NH), 128 threads, at least MINB blocks an SM (registers).  Block: 64
 * queries, the longest first, walking key tiles up to the diagonal.  Shared: Q, dO, and
 * 1 + PIPE K and V tiles (with PIPE, tile j+1 copied while tile j is used).  First
 * delta = dO . O per row (two threads a row, from global while the tiles arrive; stored for the
 * dk/dv kernel); then per key tile S = Q K^T and dP = dO V^T, P = exp2(S' - lse'),
 * dS = P (dP - delta) (0 above the diagonal), dQ += dS K.  dq = scale * dQ.
 */
template <int PIPE, int MINB>
__global__ static void __launch_bounds__(WG_THREADS, MINB)
flash_backward_dq_wgmma(bf16 *dqkv, float *delta, const bf16 *dout, const bf16 *qkv,
                        const bf16 *out, const float *lse, int T, int C, int NH, float scale,
                        float scale_log2)
{
#if WG_HAVE_WGMMA
    const unsigned Qs = wg_smem_base(), dOs = Qs + WG_TILE_BYTES,
                   KVs = dOs + WG_TILE_BYTES; /* K, V of buffer b at 2b */
    __shared__ float Dsh[WG_ROWS];
    const head_rows hr = head_of_block(T, C, NH, WG_HS);
    const int q0 = (gridDim.x - 1 - blockIdx.x) * WG_ROWS;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
    const int wrow0 = q0 + warp * 16;
    const size_t C3 = hr.C3;
    const bf16 *qbase = qkv + hr.qkv_off;
    const wg_key_tiles keys = {KVs, qbase, C3, C, T};

    wg_tile_load(Qs, qbase, C3, q0, T); /* join the first key tile's copies */
    wg_tile_load(dOs, dout + hr.tok_off, C, q0, T);
    if (PIPE) { /* a group of their own, so that waiting for all but the newest waits for them */
        keys(0, 0);
        asm volatile("cp.async.commit_group;" ::: "memory");
    }

    /* delta: two threads a row, every 16-byte vector of each in flight at once */
    rows_delta<bf16, WG_HS, 2, WG_HS / 2 / 8>(Dsh, delta, dout, out, hr, q0, T, C);
    __syncthreads();
    float dl[2], ls[2];
    wg_row_stats(dl, ls, Dsh + warp * 16, lse, hr, wrow0, g, T);

    float dq[64];
#pragma unroll
    for (int i = 0; i < 64; i++)
        dq[i] = 0.0f;

    const int kend = min(T, q0 + WG_ROWS); /* keys past the block's last query: all masked */
    for (int k0 = 0, it = 0; k0 < kend; k0 += WG_ROWS, it++) {
        const int b = wg_tile_next<PIPE>(it, k0, kend, keys);
        const unsigned Ks = keys.k(b), Vs = keys.v(b);

        float s[32], dp[32];
        wg_fence();
        wg_product_xyt(s, Qs, Ks);
        wg_product_xyt(dp, dOs, Vs);
        wg_commit_and_wait();

        const bool diag = k0 + WG_ROWS - 1 > wrow0;
        uint32_t ds[4][4];
#pragma unroll
        for (int j = 0; j < 8; j++) {
            float v[4];
            wg_ds_chunk(v, s, dp, j, k0, wrow0, g, t, diag, ls, dl, scale_log2);
            wg_pack_chunk(ds, j, v);
        }
        wg_fence();
        wg_product_py(dq, ds, Ks);
        wg_commit_and_wait();
        wg_tile_done<PIPE>();
    }

    wg_store_dq(dqkv, hr, dq, wrow0, g, t, T, scale);
#else
    __trap();
#endif
}

/* ---- backward: dk, dv -------------------------------------------------------------------- */

/*
 * Grid (ceil(T/64), B*NH), 128 threads.  Block: 64 keys (the first keys, which see the most
 * queries, first), walking query tiles from the diagonal to T.  Shared: K, V, and 1 + PIPE
 * sets of a Q and a dO tile and the tile's lse' and delta (with PIPE, tile j+1 copied while
 * tile j is used).  Per query tile, transposed: S^T = K Q^T and dP^T = V dO^T, P^T, dS^T (0
 * where the query precedes the key); dV += P^T dO, dK += dS^T Q.  dk = scale * dK.  The dV
 * products are issued before dS^T is formed (they read P^T's registers, not dS^T's), so
 * they run under that arithmetic.
 */
template <int PIPE>
__global__ static void __launch_bounds__(WG_THREADS)
flash_backward_dkv_wgmma(bf16 *dqkv, const float *delta, const bf16 *dout, const bf16 *qkv,
                         const float *lse, int T, int C, int NH, float scale, float scale_log2)
{
#if WG_HAVE_WGMMA
    const unsigned Ks = wg_smem_base(), Vs = Ks + WG_TILE_BYTES,
                   QdOs = Vs + WG_TILE_BYTES; /* Q, dO of buffer b at 2b */
    /* per buffer, the query tile's lse' (log2 units) and delta */
    __shared__ float Ls[1 + PIPE][WG_ROWS], Ds[1 + PIPE][WG_ROWS];
    const head_rows hr = head_of_block(T, C, NH, WG_HS);
    const int k0 = blockIdx.x * WG_ROWS;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
    const int wkey0 = k0 + warp * 16;
    const size_t C3 = hr.C3;
    const bf16 *qbase = qkv + hr.qkv_off;
    const bf16 *dobase = dout + hr.tok_off;
    /* copies joining the open group; the stats as plain stores, seen after the next barrier */
    auto load_queries = [&](int b, int q0) {
        wg_tile_load(QdOs + 2 * b * WG_TILE_BYTES, qbase, C3, q0, T);
        wg_tile_load(QdOs + (2 * b + 1) * WG_TILE_BYTES, dobase, C, q0, T);
        if (threadIdx.x < WG_ROWS) {
            const int q = q0 + threadIdx.x;
            /* queries past T: probability 0 (exp2(-inf)), and no delta */
            Ls[b][threadIdx.x] = q < T ? lse[hr.stat_off + q] * LOG2E_F : INFINITY;
            Ds[b][threadIdx.x] = q < T ? delta[hr.stat_off + q] : 0.0f;
        }
    };

    wg_tile_load(Ks, qbase + C, C3, k0, T); /* join the first query tile's copies */
    wg_tile_load(Vs, qbase + 2 * C, C3, k0, T);
    if (PIPE) { /* a group of their own, so that waiting for all but the newest waits for them */
        load_queries(0, k0);
        asm volatile("cp.async.commit_group;" ::: "memory");
    }

    float dk[64], dv[64];
#pragma unroll
    for (int i = 0; i < 64; i++)
        dk[i] = dv[i] = 0.0f;
    const int key[2] = {wkey0 + g, wkey0 + g + 8};

    for (int q0 = k0, it = 0; q0 < T; q0 += WG_ROWS, it++) {
        const int b = wg_tile_next<PIPE>(it, q0, T, load_queries);
        const unsigned Qs = QdOs + 2 * b * WG_TILE_BYTES, dOs = Qs + WG_TILE_BYTES;

        float st[32], dpt[32]; /* S^T, dP^T */
        wg_fence();
        wg_product_xyt(st, Ks, Qs);
        wg_product_xyt(dpt, Vs, dOs);
        wg_commit_and_wait();

        const bool diag = q0 < wkey0 + 15; /* some query of the tile precedes some key */
        uint32_t pt[4][4], dst[4][4];
#pragma unroll
        for (int j = 0; j < 8; j++) { /* P^T, kept in st for dS^T */
            const int qi = 8 * j + 2 * t; /* this thread's two adjacent queries */
            const float2 ls2 = *reinterpret_cast<const float2 *>(&Ls[b][qi]);
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float p = exp2_fast(fmaf(st[4 * j + e], scale_log2, e & 1 ? -ls2.y : -ls2.x));
                if (diag && q0 + qi + (e & 1) < key[e >> 1])
                    p = 0.0f;
                st[4 * j + e] = p;
            }
            const float v[4] = {st[4 * j], st[4 * j + 1], st[4 * j + 2], st[4 * j + 3]};
            wg_pack_chunk(pt, j, v);
        }
        wg_fence();
        wg_product_py(dv, pt, dOs); /* runs while dS^T is formed */
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const float2 ds2 = *reinterpret_cast<const float2 *>(&Ds[b][8 * j + 2 * t]);
            float d[4];
#pragma unroll
            for (int e = 0; e < 4; e++)
                d[e] = st[4 * j + e] * (dpt[4 * j + e] - (e & 1 ? ds2.y : ds2.x));
            wg_pack_chunk(dst, j, d);
        }
        wg_fence();
        wg_product_py(dk, dst, Qs);
        wg_commit_and_wait();
        wg_tile_done<PIPE>();
    }

#pragma unroll
    for (int r = 0; r < 2; r++) {
        if (key[r] >= T)
            continue;
        bf16 *krow = dqkv + hr.qkv_off + (size_t)key[r] * C3 + C;
        wg_store_row(krow, dk, r, t, scale);
        wg_store_row(krow + C, dv, r, t, 1.0f);
    }
#else
    __trap();
#endif
}

/* ---- availability, configurations and launchers ------------------------------------------ */

/* *has = 1 in an sm_90a build running on its device, 0 in any other device pass */
__global__ static void wgmma_probe(int *has)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    *has = 1;
#else
    *has = 0;
#endif
}

/* A configuration of the three kernels: copies under the arithmetic (PIPE) in each, and the
 * blocks an SM dq's registers must allow.  None changes a result (the tiles are the same).
 * (A forward with its softmax under the products as well -- S_{j+1} and P_{j-1} V_{j-1} issued
 * before P_j is formed, FlashAttention-3's overlap within a warpgroup, 214 registers -- ran no
 * faster than PIPE 1 on an H100, 0.0759 against 0.0728 ms, and was not kept.) */
template <int FWD_PIPE_, int DQ_PIPE_, int DQ_MINB_, int DKV_PIPE_> struct wg_config {
    static constexpr int FWD_PIPE = FWD_PIPE_, DQ_PIPE = DQ_PIPE_, DQ_MINB = DQ_MINB_,
                         DKV_PIPE = DKV_PIPE_;
};

/* dynamic shared memory: the tiles, and the slack that aligns them to 1024 bytes */
static constexpr size_t wg_smem_bytes(int fixed_tiles, int pipe)
{
    return (size_t)(fixed_tiles + 2 * (1 + pipe)) * WG_TILE_BYTES + 1024;
}

template <typename W>
static cudaError_t attn_wgmma_forward_launch(cudaStream_t st, bf16 *out, float *lse,
                                             const bf16 *qkv, int B, int T, int C, int NH,
                                             float scale_log2)
{
    return launch_with_smem(flash_forward_wgmma<W::FWD_PIPE>, attn_grid(B, T, NH, WG_ROWS),
                            WG_THREADS, wg_smem_bytes(1, W::FWD_PIPE), st, out, lse, qkv, T, C,
                            NH, scale_log2);
}

/* dq (which also stores delta) first, then dk, dv (which read delta) */
template <typename W>
static cudaError_t attn_wgmma_dq_launch(cudaStream_t st, bf16 *dqkv, float *delta,
                                        const bf16 *dout, const bf16 *qkv, const bf16 *out,
                                        const float *lse, int B, int T, int C, int NH,
                                        float scale, float scale_log2)
{
    return launch_with_smem(flash_backward_dq_wgmma<W::DQ_PIPE, W::DQ_MINB>,
                     attn_grid(B, T, NH, WG_ROWS), WG_THREADS, wg_smem_bytes(2, W::DQ_PIPE), st, dqkv, delta,
                     dout, qkv, out, lse, T, C, NH, scale, scale_log2);
}
template <typename W>
static cudaError_t attn_wgmma_dkv_launch(cudaStream_t st, bf16 *dqkv, const float *delta,
                                         const bf16 *dout, const bf16 *qkv, const float *lse,
                                         int B, int T, int C, int NH, float scale,
                                         float scale_log2)
{
    return launch_with_smem(flash_backward_dkv_wgmma<W::DKV_PIPE>, attn_grid(B, T, NH, WG_ROWS),
                     WG_THREADS, wg_smem_bytes(2, W::DKV_PIPE), st, dqkv, delta, dout, qkv, lse, T, C, NH,
                     scale, scale_log2);
}

/* The configuration the backend uses: the fastest of bench/attn_wgmma.cu's tables on an H100
 * (bench/results/2026-11-27b-h100-wgmma): the forward's copies under its arithmetic (0.0768 ->
 * 0.0726 ms and 0.0755 -> 0.0728 in two calls), dq allowed 168 registers (0.107 -> 0.102 ms);
 * copies under the arithmetic in dq and dk/dv bought nothing (within 1%, either way). */
typedef wg_config<1, 0, 3, 0> wg_chosen;

#endif
