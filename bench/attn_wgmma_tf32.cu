/*
 * attn_wgmma_tf32.cu — an experiment toward issue 30 part 2 in TF32 (the artifact's math):
 * the causal attention forward on wgmma with fp32 storage and TF32 products, head size 128,
 * against the backend's mma.sync TF32 forward (cuda_attention_tc.cuh, attn_tiles<float>: key
 * tiles of 32).  Not part of the product yet: it checks itself bit for bit against that forward
 * (out and lse, and its own repeatability) and times both.
 *
 *   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Ikernels \
 *       bench/attn_wgmma_tf32.cu -o attn_wgmma_tf32   (or PARTS=tf32 bash bench/attn_gpu.sh "$OUT")
 *   ./attn_wgmma_tf32 [B T C NH]       (default the l32 model's 4 1024 2048 16; C = 128 NH)
 *
 * Status: written and compiled without a GPU (2026-11-27); not yet run.
 *
 * What TF32 changes against the bf16 kernels (cuda_attention_wgmma.cuh):
 *  - wgmma takes TF32 operands K-major only (no transposed B): Q and K are K-major as they
 *    are (S = Q K^T), but P V needs V^T, the head dimension as rows and the keys contiguous.
 *    V is read through registers and written transposed (a warp's 32 lanes are the tile's 32
 *    keys, so each row's 32 words land in 32 banks).
 *  - P goes from the accumulator into the A operand: for a k step of 8 keys, the A layout holds
 *    key k at position k / 2 + 4 (k % 2) (a0 = c0, a1 = c2, a2 = c1, a3 = c3: mma_op<float>'s
 *    a_from_c), so V^T's columns hold the keys in that order within each group of 8.
 *  - wgmma reads fp32 words and uses their TF32 part; the mma.sync kernels round every operand
 *    to TF32 (cvt.rna) first.  So every tile is rounded in shared memory before the fence (Q and
 *    K in place by the thread that copied each chunk, V^T on its way through registers), and P
 *    as it is packed: the same products as the mma.sync kernels.
 *  - Key tiles of 32, as attn_tiles<float>::fwd, so the online softmax sees the same tiles:
 *    S is m64n32 (16 registers), P V four m64n128k8 steps.
 * Shared memory: Q 64 x 128 fp32 as four 64 x 32 quarters (the head dimension split at 32: a
 * row of a quarter is one 128-byte swizzle row), K 32 x 128 the same way, V^T 128 x 32: 64 KiB.
 */
#include "attn_bench.cuh"
#include "cuda/cuda_attention_wgmma.cuh"

#include <cmath>
#include <string.h>

#define T32_HS 128
#define T32_ROWS 64                 /* queries a block */
#define T32_KEYS 32                 /* keys a tile */
#define T32_Q_QUARTER (64 * 128)    /* bytes of a 64-row quarter */
#define T32_K_QUARTER (32 * 128)    /* bytes of a 32-row quarter */
#define T32_Q_BYTES (4 * T32_Q_QUARTER)
#define T32_K_BYTES (4 * T32_K_QUARTER)
#define T32_VT_BYTES (128 * 128)
#define T32_SMEM (T32_Q_BYTES + T32_K_BYTES + T32_VT_BYTES + 1024)

#if WG_HAVE_WGMMA

/* Byte offset of (row, 16-byte chunk ch of a row's 32) in a tile of quarters of quarter_bytes:
 * quarter ch / 8, the row's 128 bytes, chunk index XORed by row % 8 (128-byte swizzle). */
static __device__ __forceinline__ unsigned t32_offset(int row, int ch, unsigned quarter_bytes)
{
    return (unsigned)((ch >> 3) * quarter_bytes + row * 128 + (((ch & 7) ^ (row & 7)) << 4));
}

static __device__ __forceinline__ float t32_round(float x)
{
    return __uint_as_float(mma_op<float>::tf32(x));
}

/* ROWS rows of a (T, 128) fp32 view into a tile of quarters (cp.async; zeros past T), then, once
 * this thread's copies have landed, each of its chunks rounded to TF32 in place.  The caller's
 * fence and barrier make them visible to wgmma and to the other threads. */
template <int ROWS>
static __device__ __forceinline__ void t32_tile_load_rounded(unsigned tile, const float *src,
                                                             size_t stride, int row0, int T)
{
    constexpr unsigned QB = ROWS * 128;
    constexpr int PER_THREAD = ROWS * 32 / WG_THREADS;
#pragma unroll
    for (int i = 0; i < PER_THREAD; i++) {
        const int c = threadIdx.x + WG_THREADS * i, r = c >> 5, ch = c & 31;
        const bool in = row0 + r < T;
        const float *from = src + (size_t)(in ? row0 + r : 0) * stride + ch * 4;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(
                         tile + t32_offset(r, ch, QB)),
                     "l"(from), "r"(in ? 16 : 0));
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
    asm volatile("cp.async.wait_group 0;" ::: "memory");
#pragma unroll
    for (int i = 0; i < PER_THREAD; i++) {
        const int c = threadIdx.x + WG_THREADS * i, r = c >> 5, ch = c & 31;
        const unsigned a = tile + t32_offset(r, ch, QB);
        float4 v;
        asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
                     : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                     : "r"(a));
        asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(a), "f"(t32_round(v.x)),
                     "f"(t32_round(v.y)), "f"(t32_round(v.z)), "f"(t32_round(v.w))
                     : "memory");
    }
}

/* The 32 keys' V rows [k0, k0 + 32) into V^T (128 rows of the head dimension, 32 key columns,
 * one 128-byte swizzle row each), rounded, key k of a group of 8 at column k / 2 + 4 (k % 2)
 * of the group.  Warp w, lane = key: float4 columns w, w + 4, ... of the key's row. */
static __device__ __forceinline__ void t32_vt_load(unsigned vt, const float *vbase, size_t stride,
                                                   int k0, int T)
{
    const int warp = threadIdx.x / 32, key = threadIdx.x % 32;
    const bool in = k0 + key < T;
    const float4 *row = reinterpret_cast<const float4 *>(vbase + (size_t)(in ? k0 + key : 0) * stride);
    const int pos = (key & ~7) | ((key >> 1) & 3) | ((key & 1) << 2);
    float4 v[T32_HS / 4 / 4];
#pragma unroll
    for (int i = 0; i < T32_HS / 16; i++) /* every load in flight before the first store */
        v[i] = in ? row[warp + 4 * i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int i = 0; i < T32_HS / 16; i++) {
        const int d0 = 4 * (warp + 4 * i);
        const float x[4] = {v[i].x, v[i].y, v[i].z, v[i].w};
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int d = d0 + e;
            const unsigned a = vt + d * 128 + ((((pos >> 2) ^ (d & 7)) << 4) | ((pos & 3) << 2));
            asm volatile("st.shared.f32 [%0], %1;" ::"r"(a), "f"(t32_round(x[e])) : "memory");
        }
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
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
                 "{%64, %65, %66, %67}, %68, 1, 1, 1;\n"
                 : WG_F64(o)
                 : "r"(p[0]), "r"(p[1]), "r"(p[2]), "r"(p[3]), "l"(dv));
}

#endif /* WG_HAVE_WGMMA */

/*
 * Grid (ceil(T/64), B*NH), 128 threads.  Block: 64 queries, the longest first; per key tile of
 * 32 up to the diagonal: K copied and rounded, V transposed and rounded, S = Q K^T (16 k steps
 * of 8 over the head dimension), the online softmax (flash_forward_tc's, the same tiles),
 * O += P V (4 k steps of 8 keys).
 */
__global__ static void __launch_bounds__(WG_THREADS)
flash_forward_wgmma_tf32(float *out, float *lse, const float *qkv, int T, int C, int NH,
                         float scale_log2)
{
#if WG_HAVE_WGMMA
    const unsigned Qs = wg_smem_base(), Ks = Qs + T32_Q_BYTES, Vt = Ks + T32_K_BYTES;
    const head_rows hr = head_of_block(T, C, NH, T32_HS);
    const int q0 = (gridDim.x - 1 - blockIdx.x) * T32_ROWS;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
    const int wrow0 = q0 + warp * 16;
    const size_t C3 = hr.C3;
    const float *qbase = qkv + hr.qkv_off;

    t32_tile_load_rounded<T32_ROWS>(Qs, qbase, C3, q0, T);

    float o[64];
#pragma unroll
    for (int i = 0; i < 64; i++)
        o[i] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}; /* m in raw score units */

    const int kend = min(T, q0 + T32_ROWS);
    for (int k0 = 0; k0 < kend; k0 += T32_KEYS) {
        __syncthreads(); /* every thread has waited for the previous tile's products */
        t32_tile_load_rounded<T32_KEYS>(Ks, qbase + C, C3, k0, T);
        t32_vt_load(Vt, qbase + 2 * C, C3, k0, T);
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncthreads();

        float s[16];
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < T32_HS / 8; kk++) {
            const unsigned off = (kk & 3) * 32; /* 8 elements of 4 bytes a step */
            t32_m64n32k8_ss(s, wg_desc(Qs + (kk >> 2) * T32_Q_QUARTER + off, 16, 1024),
                            wg_desc(Ks + (kk >> 2) * T32_K_QUARTER + off, 16, 1024), kk > 0);
        }
        wg_commit_and_wait();

        /* the online softmax: s[4j + e] is (row g + 8 (e / 2), key k0 + 8j + 2t + e % 2) */
        const bool diag = k0 + T32_KEYS - 1 > wrow0;
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int j = 0; j < T32_KEYS / 8; j++)
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
        uint32_t p[T32_KEYS / 8][4];
#pragma unroll
        for (int j = 0; j < T32_KEYS / 8; j++) {
            float pv[4];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                pv[e] = exp2_fast(fmaf(s[4 * j + e], scale_log2, -mc[e >> 1]));
                l[e >> 1] += pv[e];
            }
            /* the A operand of k step j: a0 = c0, a1 = c2, a2 = c1, a3 = c3 */
            p[j][0] = mma_op<float>::tf32(pv[0]);
            p[j][1] = mma_op<float>::tf32(pv[2]);
            p[j][2] = mma_op<float>::tf32(pv[1]);
            p[j][3] = mma_op<float>::tf32(pv[3]);
        }
        wg_rescale(o, alpha);

        wg_fence();
#pragma unroll
        for (int j = 0; j < T32_KEYS / 8; j++)
            t32_m64n128k8_rs(o, p[j], wg_desc(Vt + j * 32, 16, 1024));
        wg_commit_and_wait();
    }

#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = wrow0 + g + 8 * r;
        const float sum = quad_sum(l[r]);
        if (row >= T)
            continue;
        const float inv = 1.0f / sum;
        float *orow = out + hr.tok_off + (size_t)row * C;
#pragma unroll
        for (int j = 0; j < 16; j++)
            store_pair(orow + 8 * j + 2 * t, o[4 * j + 2 * r] * inv, o[4 * j + 2 * r + 1] * inv);
        if (t == 0)
            lse[hr.stat_off + row] = (m[r] * scale_log2 + log2f(sum)) * LN2_F;
    }
#else
    __trap();
#endif
}

int main(int argc, char **argv)
{
    int B = 4, T = 1024, C = 2048, NH = 16;
    if (argc == 5) {
        B = atoi(argv[1]);
        T = atoi(argv[2]);
        C = atoi(argv[3]);
        NH = atoi(argv[4]);
    } else if (argc != 1) {
        fprintf(stderr, "usage: attn_wgmma_tf32 [B T C NH]\n");
        return 2;
    }
    if (B < 1 || T < 1 || NH < 1 || C != NH * T32_HS) {
        fprintf(stderr, "attn_wgmma_tf32: needs head size %d (C = NH x %d)\n", T32_HS, T32_HS);
        return 2;
    }
    const size_t n_tok = (size_t)B * T * C, n_qkv = 3 * n_tok, n_stat = (size_t)B * NH * T;
    const float scale_log2 = LOG2E_F / sqrtf((float)T32_HS);
    float *qkv, *out[2], *lse[2]; /* [0] the backend's mma.sync, [1] wgmma */
    CK(cudaMalloc(&qkv, n_qkv * sizeof(float)));
    for (int k = 0; k < 2; k++) {
        CK(cudaMalloc(&out[k], n_tok * sizeof(float)));
        CK(cudaMalloc(&lse[k], n_stat * sizeof(float)));
        CK(cudaMemset(out[k], 0xff, n_tok * sizeof(float)));
        CK(cudaMemset(lse[k], 0xff, n_stat * sizeof(float)));
    }
    std::vector<float> h(n_qkv);
    unsigned long long seed = 12345;
    for (float &x : h)
        x = host_uniform(&seed);
    CK(cudaMemcpy(qkv, h.data(), n_qkv * sizeof(float), cudaMemcpyHostToDevice));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));

    auto run_ref = [&]() {
        return attn_forward_launch<float, T32_HS, attn_tiles<float>::fwd>(
            st, out[0], lse[0], qkv, B, T, C, NH, scale_log2);
    };
    auto run_wg = [&]() {
        return launch_with_smem(flash_forward_wgmma_tf32, attn_grid(B, T, NH, T32_ROWS),
                                WG_THREADS, (size_t)T32_SMEM, st, out[1], lse[1], qkv, T, C, NH,
                                scale_log2);
    };
    CK(run_ref());
    CK(run_wg());
    CK(cudaStreamSynchronize(st));
    const std::vector<float> o0 = fetch(out[0], n_tok), o1 = fetch(out[1], n_tok);
    const std::vector<float> l0 = fetch(lse[0], n_stat), l1 = fetch(lse[1], n_stat);
    size_t d_out = 0, d_lse = 0;
    for (size_t i = 0; i < n_tok; i++)
        d_out += memcmp(&o0[i], &o1[i], sizeof(float)) != 0;
    for (size_t i = 0; i < n_stat; i++)
        d_lse += memcmp(&l0[i], &l1[i], sizeof(float)) != 0;
    const double r_out = rel_diff(o1, o0), r_lse = rel_diff(l1, l0);
    size_t not_finite = 0; /* NaN (an element never written) escapes rel_diff's max */
    for (float x : o1)
        not_finite += !std::isfinite(x);
    for (float x : l1)
        not_finite += !std::isfinite(x);
    CK(cudaMemset(out[1], 0xff, n_tok * sizeof(float)));
    CK(run_wg());
    CK(cudaStreamSynchronize(st));
    const bool repeat = fetch(out[1], n_tok) == o1;

    const double ms_ref = median_ms(st, 30, run_ref), ms_wg = median_ms(st, 30, run_wg);
    const double flops = (double)B * NH * T * (T + 1) / 2.0 * 2 * 2 * T32_HS;
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("# attention forward in TF32, wgmma against the backend's mma.sync, %s, B %d T %d C %d "
           "heads %d\n\n", prop.name, B, T, C, NH);
    printf("| kernel | ms | causal TFLOP/s | out: bits differing | lse: bits differing | max rel. "
           "diff out, lse | repeatable |\n|---|---|---|---|---|---|---|\n");
    printf("| mma.sync (backend) | %.4f | %.1f | - | - | - | - |\n", ms_ref, flops / ms_ref / 1e9);
    printf("| wgmma | %.4f | %.1f | %zu of %zu | %zu of %zu | %.2e, %.2e | %s |\n", ms_wg,
           flops / ms_wg / 1e9, d_out, n_tok, d_lse, n_stat, r_out, r_lse, repeat ? "yes" : "NO");
    if (not_finite)
        printf("\n%zu outputs of the wgmma forward are not finite\n", not_finite);
    const bool ok = r_out < 2e-3 && r_lse < 1e-4 && repeat && not_finite == 0;
    printf("\n%s\n", !ok ? "DISAGREES with the backend, or does not repeat"
                     : d_out == 0 && d_lse == 0 ? "bit-identical to the backend's mma.sync forward"
                                                : "agrees to the TF32 bound, not bit for bit");
    CK(cudaStreamDestroy(st));
    CK(cudaFree(qkv));
    for (int k = 0; k < 2; k++) {
        CK(cudaFree(out[k]));
        CK(cudaFree(lse[k]));
    }
    return ok ? 0 : 1;
}
