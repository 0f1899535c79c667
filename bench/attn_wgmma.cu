/*
 * attn_wgmma.cu — an experiment toward issue 30 part 2: the causal attention forward with
 * Hopper's warpgroup MMA (wgmma), whose operands come from shared memory through descriptors
 * instead of through ldmatrix into registers (what binds the mma.sync kernels: Nsight Compute,
 * bench/results/2026-11-27-h100-attention).  Not part of the product: it checks itself against
 * the backend's forward (kernels/cuda/cuda_attention_tc.cuh) and times both.
 *
 *   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Ikernels bench/attn_wgmma.cu \
 *       -o attn_wgmma          (or PARTS=wgmma bash bench/attn_gpu.sh "$OUT")
 *   ./attn_wgmma [B T C NH]        (bf16, head size 128; default the l32 model's 4 1024 2048 16)
 *
 * Status: written and compiled without a GPU (2026-11-27: 156 registers, no spills); not yet
 * run.  Its output says whether it agrees with the backend (max |diff| / max |ref| of out and
 * of lse; exit 1 if not).  Where it would disagree, the least certain parts first: the
 * MN-major descriptor of V (leading and stride offsets swapped?), then its transpose flag.
 *
 * The kernel: one warpgroup (128 threads) per 64 queries of one (b, h), longest first.  Shared:
 * Q, K, V tiles of 64 x 128 bf16, each as two 64 x 64 halves (the head dimension split at 64)
 * in the 128-byte swizzle (16-byte chunk c of row r at chunk c ^ (r % 8)), 1024-byte aligned.
 * Per key tile: S (64 x 64, fp32, 32 registers a thread) = Q K^T by 8 wgmma m64n64k16 with
 * both operands K-major from shared memory; the online softmax in registers (the accumulator
 * layout is mma.sync's m16n8 one per warp: warp w owns rows 16w..16w+15); O (64 x 128, 64
 * registers) += P V by 4 wgmma m64n128k16 with P from registers (bf16, the accumulator's own
 * layout) and V from shared memory, MN-major (transposed).  cp.async writes shared memory
 * through the generic proxy, wgmma reads it through the async proxy: a proxy fence between.
 */
#include "attn_bench.cuh"

#include <string.h>

#define WG_HS 128
#define WG_ROWS 64           /* queries a block, keys a tile */
#define WG_HALF_BYTES 8192   /* one 64 x 64 bf16 half tile */
#define WG_TILE_BYTES 16384  /* a 64 x 128 tile */

/* ---- shared memory: the swizzled tiles ---------------------------------------------------- */

/* Byte offset of (row, 16-byte chunk ch of 16) in a 64 x 128 bf16 tile: half ch / 8, then the
 * row's 128 bytes with its chunk index XORed by row % 8 (the 128-byte swizzle, which the
 * hardware applies on address bits 4-6 ^ 7-9: hence the 1024-byte alignment of each half). */
static __device__ __forceinline__ unsigned wg_offset(int row, int ch)
{
    return (unsigned)((ch >> 3) * WG_HALF_BYTES + row * 128 + (((ch & 7) ^ (row & 7)) << 4));
}

/* rows [row0, row0 + 64) of a (T, 128) bf16 view (row stride `stride` elements) into a tile;
 * rows at or past T become zeros.  16-byte cp.async copies, 8 per thread, one group. */
static __device__ __forceinline__ void wg_tile_load(unsigned tile, const bf16 *src, size_t stride,
                                                    int row0, int T)
{
#pragma unroll
    for (int i = 0; i < WG_ROWS * 16 / 128; i++) {
        const int c = threadIdx.x + 128 * i, r = c >> 4, ch = c & 15;
        const bool in = row0 + r < T;
        const bf16 *from = src + (size_t)(in ? row0 + r : 0) * stride + ch * 8;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(tile + wg_offset(r, ch)),
                     "l"(from), "r"(in ? 16 : 0));
    }
}

/* Waits for this thread's copies, makes them visible to the async proxy (wgmma), then for
 * every thread of the block. */
static __device__ __forceinline__ void wg_tiles_ready()
{
    asm volatile("cp.async.wait_group 0;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
}

/* ---- wgmma ------------------------------------------------------------------------------ */

/* A shared-memory matrix descriptor: start address >> 4 (bits 0-13), leading-dimension byte
 * offset >> 4 (16-29), stride-dimension byte offset >> 4 (32-45), base offset 0 (the halves
 * are 1024-byte aligned), swizzle mode 1 = 128 bytes (62-63).
 *   K-major (Q, K for S = Q K^T): rows of 128 bytes, 8-row groups 1024 bytes apart (SBO); the
 *     leading offset is unused within a 128-byte swizzle atom (1).
 *   MN-major (V for O += P V, N = the head dimension contiguous): LBO = the step between the
 *     two 64-column halves (8192 bytes), SBO = between 8-key groups (1024 bytes). */
static __device__ __forceinline__ uint64_t wg_desc(unsigned addr, unsigned lbo, unsigned sbo)
{
    return (uint64_t)((addr >> 4) & 0x3fff) | (uint64_t)((lbo >> 4) & 0x3fff) << 16 |
           (uint64_t)((sbo >> 4) & 0x3fff) << 32 | (uint64_t)1 << 62;
}

static __device__ __forceinline__ void wg_fence()
{
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
static __device__ __forceinline__ void wg_commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
static __device__ __forceinline__ void wg_wait_all()
{
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
}

/* The 32 accumulator operands of m64n64 and the 64 of m64n128, as asm operand lists. */
#define WG_F8(a, i)                                                                         \
    "+f"(a[i]), "+f"(a[i + 1]), "+f"(a[i + 2]), "+f"(a[i + 3]), "+f"(a[i + 4]),             \
        "+f"(a[i + 5]), "+f"(a[i + 6]), "+f"(a[i + 7])
#define WG_F32(a) WG_F8(a, 0), WG_F8(a, 8), WG_F8(a, 16), WG_F8(a, 24)
#define WG_F64(a) WG_F32(a), WG_F8(a, 32), WG_F8(a, 40), WG_F8(a, 48), WG_F8(a, 56)

/* s (64 x 64) += A (64 x 16, K-major desc) B^T (B 64 x 16, K-major desc); scale_d 0 starts
 * from zero */
static __device__ __forceinline__ void wg_m64n64k16_ss(float (&s)[32], uint64_t da, uint64_t db,
                                                       int scale_d)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                 "%32, %33, p, 1, 1, 0, 0;\n}\n"
                 : WG_F32(s)
                 : "l"(da), "l"(db), "r"(scale_d));
}

/* o (64 x 128) += P (64 x 16, registers: the m16n8k16 A fragment per warp) V (16 x 128,
 * MN-major desc, transposed) */
static __device__ __forceinline__ void wg_m64n128k16_rs(float (&o)[64], const uint32_t (&a)[4],
                                                        uint64_t db)
{
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
                 "{%64, %65, %66, %67}, %68, 1, 1, 1, 1;\n"
                 : WG_F64(o)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

/* ---- the kernel ----------------------------------------------------------------------- */

__global__ static void __launch_bounds__(128)
flash_forward_wgmma(bf16 *out, float *lse, const bf16 *qkv, int T, int C, int NH, float scale_log2)
{
    extern __shared__ __align__(1024) unsigned char wg_smem_raw[];
    /* 1024-byte alignment of the halves, whatever the dynamic base */
    const unsigned base0 = (unsigned)__cvta_generic_to_shared(wg_smem_raw);
    const unsigned base = (base0 + 1023u) & ~1023u;
    const unsigned Qs = base, Ks = base + WG_TILE_BYTES, Vs = base + 2 * WG_TILE_BYTES;

    const head_rows hr = head_of_block(T, C, NH, WG_HS);
    const int q0 = (gridDim.x - 1 - blockIdx.x) * WG_ROWS;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
    const int wrow0 = q0 + warp * 16;
    const size_t C3 = hr.C3;
    const bf16 *qbase = qkv + hr.qkv_off;

    wg_tile_load(Qs, qbase, C3, q0, T);
    asm volatile("cp.async.commit_group;" ::: "memory");

    float o[64];
#pragma unroll
    for (int i = 0; i < 64; i++)
        o[i] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}; /* m in raw score units */

    const int nkt = (min(T, q0 + WG_ROWS) + WG_ROWS - 1) / WG_ROWS;
    for (int kt = 0; kt < nkt; kt++) {
        const int k0 = kt * WG_ROWS;
        __syncthreads(); /* the previous tile's wgmmas have completed (waited) everywhere */
        wg_tile_load(Ks, qbase + C, C3, k0, T);
        wg_tile_load(Vs, qbase + 2 * C, C3, k0, T);
        asm volatile("cp.async.commit_group;" ::: "memory");
        wg_tiles_ready();

        /* S = Q K^T: k over the head dimension, 16 at a time: half kk / 4, 32 bytes a step */
        float s[32];
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < WG_HS / 16; kk++) {
            const unsigned off = (kk >> 2) * WG_HALF_BYTES + (kk & 3) * 32;
            wg_m64n64k16_ss(s, wg_desc(Qs + off, 16, 1024), wg_desc(Ks + off, 16, 1024), kk > 0);
        }
        wg_commit();
        wg_wait_all();

        /* the online softmax on the accumulator: s[4j + e] is (row g + 8 (e / 2), key
         * k0 + 8j + 2t + e % 2) of the warp's 16 rows */
        const bool diag = k0 + WG_ROWS - 1 > wrow0;
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int row = wrow0 + g + 8 * (e >> 1), key = k0 + 8 * j + 2 * t + (e & 1);
                if (diag && key > row)
                    s[4 * j + e] = -INFINITY;
                mx[e >> 1] = fmaxf(mx[e >> 1], s[4 * j + e]);
            }
        float alpha[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const float mnew = fmaxf(m[r], quad_max(mx[r]));
            alpha[r] = mnew != m[r] ? exp2_fast((m[r] - mnew) * scale_log2) : 1.0f;
            m[r] = mnew;
            l[r] *= alpha[r];
        }
        const float mc[2] = {m[0] * scale_log2, m[1] * scale_log2};
#pragma unroll
        for (int i = 0; i < 64; i++) /* o[4j + e]: row g + 8 (e / 2) */
            o[i] *= alpha[(i >> 1) & 1];
        uint32_t p[4][4]; /* P as the A fragments of the 4 key steps of 16 */
#pragma unroll
        for (int j = 0; j < 8; j++) {
            float pv[4];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                pv[e] = exp2_fast(fmaf(s[4 * j + e], scale_log2, -mc[e >> 1]));
                l[e >> 1] += pv[e];
            }
            /* chunk j is the low (j even) or high (j odd) 8 keys of step j / 2 */
            p[j >> 1][2 * (j & 1)] = mma_op<bf16>::pack(pv[0], pv[1]);
            p[j >> 1][2 * (j & 1) + 1] = mma_op<bf16>::pack(pv[2], pv[3]);
        }

        /* O += P V: k over the keys, 16 at a time (two 8-key groups: 2048 bytes a step) */
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < WG_ROWS / 16; kk++)
            wg_m64n128k16_rs(o, p[kk], wg_desc(Vs + kk * 2048, WG_HALF_BYTES, 1024));
        wg_commit();
        wg_wait_all();
    }

#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = wrow0 + g + 8 * r;
        const float sum = quad_sum(l[r]);
        if (row >= T)
            continue;
        const float inv = 1.0f / sum;
        bf16 *orow = out + hr.tok_off + (size_t)row * C;
#pragma unroll
        for (int j = 0; j < 16; j++)
            store_pair(orow + 8 * j + 2 * t, o[4 * j + 2 * r] * inv, o[4 * j + 2 * r + 1] * inv);
        if (t == 0)
            lse[hr.stat_off + row] = (m[r] * scale_log2 + log2f(sum)) * LN2_F;
    }
}

/* ---- the harness ---------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    int B = 4, T = 1024, C = 2048, NH = 16;
    if (argc == 5) {
        B = atoi(argv[1]);
        T = atoi(argv[2]);
        C = atoi(argv[3]);
        NH = atoi(argv[4]);
    } else if (argc != 1) {
        fprintf(stderr, "usage: attn_wgmma [B T C NH]\n");
        return 2;
    }
    if (B < 1 || T < 1 || NH < 1 || C != NH * WG_HS) {
        fprintf(stderr, "attn_wgmma: needs head size %d (C = NH x %d)\n", WG_HS, WG_HS);
        return 2;
    }
    const size_t n_tok = (size_t)B * T * C, n_qkv = 3 * n_tok, n_stat = (size_t)B * NH * T;
    const float scale_log2 = LOG2E_F / sqrtf((float)WG_HS);
    bf16 *qkv, *out_ref, *out_wg;
    float *lse_ref, *lse_wg;
    CK(cudaMalloc(&qkv, n_qkv * sizeof(bf16)));
    CK(cudaMalloc(&out_ref, n_tok * sizeof(bf16)));
    CK(cudaMalloc(&out_wg, n_tok * sizeof(bf16)));
    CK(cudaMalloc(&lse_ref, n_stat * sizeof(float)));
    CK(cudaMalloc(&lse_wg, n_stat * sizeof(float)));
    std::vector<bf16> h(n_qkv);
    unsigned long long seed = 12345;
    for (bf16 &x : h)
        x = __float2bfloat16(host_uniform(&seed));
    CK(cudaMemcpy(qkv, h.data(), n_qkv * sizeof(bf16), cudaMemcpyHostToDevice));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));

    const size_t smem = 3 * WG_TILE_BYTES + 1024;
    auto run_ref = [&]() {
        return attn_forward_launch<bf16, WG_HS, attn_tiles<bf16>::fwd>(
            st, out_ref, lse_ref, qkv, B, T, C, NH, scale_log2);
    };
    auto run_wg = [&]() {
        return launch_with_smem(flash_forward_wgmma, attn_grid(B, T, NH, WG_ROWS), 128, smem, st,
                                out_wg, lse_wg, qkv, T, C, NH, scale_log2);
    };
    CK(run_ref());
    CK(run_wg());
    CK(cudaStreamSynchronize(st));
    std::vector<bf16> o_ref(n_tok), o_wg(n_tok);
    std::vector<float> l_ref(n_stat), l_wg(n_stat);
    CK(cudaMemcpy(o_ref.data(), out_ref, n_tok * sizeof(bf16), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(o_wg.data(), out_wg, n_tok * sizeof(bf16), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(l_ref.data(), lse_ref, n_stat * sizeof(float), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(l_wg.data(), lse_wg, n_stat * sizeof(float), cudaMemcpyDeviceToHost));
    const double d_out = rel_diff(o_wg, o_ref), d_lse = rel_diff(l_wg, l_ref);
    CK(run_wg());
    CK(cudaStreamSynchronize(st));
    std::vector<bf16> o_again(n_tok);
    CK(cudaMemcpy(o_again.data(), out_wg, n_tok * sizeof(bf16), cudaMemcpyDeviceToHost));
    const bool repeat = memcmp(o_again.data(), o_wg.data(), n_tok * sizeof(bf16)) == 0;

    const double ms_ref = median_ms(st, 30, run_ref), ms_wg = median_ms(st, 30, run_wg);
    const double flops = (double)B * NH * T * (T + 1) / 2.0 * 2 * 2 * WG_HS;
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("# attention forward, wgmma against the backend's mma.sync, %s, bf16 B %d T %d C %d "
           "heads %d\n\n", prop.name, B, T, C, NH);
    printf("| kernel | ms | causal TFLOP/s | out rel. diff | lse rel. diff | repeatable |\n");
    printf("|---|---|---|---|---|---|\n");
    printf("| mma.sync (backend) | %.4f | %.1f | - | - | - |\n", ms_ref, flops / ms_ref / 1e9);
    printf("| wgmma | %.4f | %.1f | %.2e | %.2e | %s |\n", ms_wg, flops / ms_wg / 1e9, d_out,
           d_lse, repeat ? "yes" : "NO");
    const bool ok = d_out < 2e-2 && d_lse < 1e-3 && repeat;
    printf("\n%s\n", ok ? "agrees with the backend (bf16 bound)" : "DISAGREES with the backend");
    CK(cudaStreamDestroy(st));
    CK(cudaFree(qkv));
    CK(cudaFree(out_ref));
    CK(cudaFree(out_wg));
    CK(cudaFree(lse_ref));
    CK(cudaFree(lse_wg));
    return ok ? 0 : 1;
}
