/*
 * attn_wgmma.cu — the Hopper attention kernels (kernels/cuda/cuda_attention_wgmma.cuh: wgmma,
 * bf16, head size 128) against the backend's mma.sync ones (cuda_attention_tc.cuh) on the
 * same inputs, in each configuration of wg_config (the backend's first): the forward's out
 * and lse, the backward's dq, dk, dv and delta, each compared bit for bit (elements
 * differing) and as max |diff| / max |ref|, the repeatability, and each kernel's median time.
 * Exit 1 if any output differs or any run does not repeat.
 *
 *   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Ikernels bench/attn_wgmma.cu \
 *       -o attn_wgmma          (or PARTS=wgmma bash bench/attn_gpu.sh "$OUT")
 *   ./attn_wgmma [B T C NH]        (default the l32 model's 4 1024 2048 16; C = 128 NH)
 */
#include "attn_bench.cuh"
#include "cuda/cuda_attention_wgmma.cuh"

#include <string.h>

/* ---- the harness ---------------------------------------------------------------------- */

/* elements of a and ref whose bits differ, and max |diff| / max |ref|, over the elements
 * whose index i satisfies keep(i) */
template <typename E, typename K>
static void compare(const std::vector<E> &a, const std::vector<E> &ref, K keep, size_t *differ,
                    double *rel)
{
    double md = 0.0, mr = 0.0;
    *differ = 0;
    for (size_t i = 0; i < a.size(); i++) {
        if (!keep(i))
            continue;
        *differ += memcmp(&a[i], &ref[i], sizeof(E)) != 0;
        const double x = host_f32(a[i]), r = host_f32(ref[i]);
        md = std::max(md, fabs(x - r));
        mr = std::max(mr, fabs(r));
    }
    *rel = mr > 0.0 ? md / mr : md;
}

/*
 * An experiment: the bf16 forward warp-specialized (as cuda_attention_wgmma_tf32.cuh's TF32
 * kernels, which it shares its helpers with): bit for bit the others, but 0.084 against the
 * one-warpgroup kernel's 0.074 ms on an H100 (bench/results/2026-11-27c-h100-tf32-wgmma): in
 * bf16 there is no rounding or transposing to take off the consumers, and two or three
 * one-warpgroup blocks an SM already overlap one another.  384 threads, 128 queries
 * a block.  Warpgroup 0 copies each key tile's K and V (cp.async, WS_NS stages, the tile after
 * the stage's last reader is done) and hands the stage over; warpgroups 1 and 2 (64 queries
 * each, Q in shared memory) multiply and run the online softmax as flash_forward_wgmma does, so
 * that one's softmax runs under the other's products.  Named barriers: full[s] 1 + s (the
 * producer arrives, the consumers wait), empty[s] 1 + NS + s (the reverse), 1 + 2 NS + c
 * consumer c's.  Shared memory: per stage K, V (32 KiB); per consumer Q (16 KiB).
 */
#define WG_WS_NS 3
#define WG_WS_SMEM ((size_t)(2 * WG_WS_NS + 2) * WG_TILE_BYTES + 1024)
__global__ static void __launch_bounds__(3 * WG_THREADS, 1)
flash_forward_wgmma_ws(bf16 *out, float *lse, const bf16 *qkv, int T, int C, int NH,
                       float scale_log2)
{
#if WG_HAVE_WGMMA
    constexpr int NS = WG_WS_NS, ALL = 3 * WG_THREADS;
    const unsigned base = wg_smem_base(); /* stage s: K at 2s tiles, V at 2s + 1 */
    const head_rows hr = head_of_block(T, C, NH, WG_HS);
    const int q0 = (gridDim.x - 1 - blockIdx.x) * 2 * WG_ROWS;
    const size_t C3 = hr.C3;
    const bf16 *qbase = qkv + hr.qkv_off;
    const int ntiles = (min(T, q0 + 2 * WG_ROWS) + WG_ROWS - 1) / WG_ROWS;
    const wg_key_tiles keys = {base, qbase, C3, C, T};

    if (threadIdx.x < WG_THREADS) { /* the producer */
        for (int j = 0; j < NS; j++) { /* a group per stage, empty past the last tile */
            if (j < ntiles)
                keys(j, j * WG_ROWS);
            asm volatile("cp.async.commit_group;" ::: "memory");
        }
        for (int it = 0; it < ntiles; it++) {
            /* tile it is in group it (it < NS) or it + 1: all but the newest NS - 2 complete;
             * each thread's copies then visible to wgmma, and the consumers wait for all */
            asm volatile("cp.async.wait_group %0;" ::"n"(NS - 2) : "memory");
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            named_arrive(1 + it % NS, ALL);
            /* the previous tile's stage, once the consumers are done with it, takes tile
             * it - 1 + NS */
            const int prev = it - 1, next = prev + NS;
            if (prev >= 0 && next < ntiles) {
                named_sync(1 + NS + prev % NS, ALL);
                keys(prev % NS, next * WG_ROWS);
            }
            asm volatile("cp.async.commit_group;" ::: "memory");
        }
        return;
    }

    /* consumer 0 or 1, warp-uniform (a shuffle: the descriptors stay in uniform registers) */
    const int wg = __shfl_sync(0xffffffffu, (int)threadIdx.x / WG_THREADS, 0) - 1;
    const int tid = threadIdx.x % WG_THREADS;
    const int warp = tid / 32, lane = tid % 32, g = lane >> 2, t = lane & 3;
    const int crow0 = q0 + wg * WG_ROWS, wrow0 = crow0 + warp * 16;
    const int kend = min(T, crow0 + WG_ROWS);
    const unsigned Qs = base + (2 * NS + wg) * WG_TILE_BYTES;
    wg_tile_load(Qs, qbase, C3, crow0, T, tid);
    asm volatile("cp.async.commit_group;" ::: "memory");
    asm volatile("cp.async.wait_group 0;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    named_sync(1 + 2 * NS + wg, WG_THREADS);

    float o[64];
#pragma unroll
    for (int i = 0; i < 64; i++)
        o[i] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}; /* m in raw score units */

    for (int it = 0; it < ntiles; it++) {
        const int s = it % NS, k0 = it * WG_ROWS;
        named_sync(1 + s, ALL);
        if (k0 < kend) {
            float sc[32];
            wg_fence();
            wg_product_xyt(sc, Qs, keys.k(s));
            wg_commit_and_wait();

            float alpha[2];
            uint32_t p[4][4];
            wg_softmax_tile<WG_ROWS>(sc, m, l, alpha, k0, wrow0, g, t, scale_log2,
                                     [&](int j, const float(&pv)[4]) { wg_pack_chunk(p, j, pv); });
            /* x 1 is exact: only where some row of the warp has a new max */
            if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f))
                wg_rescale(o, alpha);

            wg_fence();
            wg_product_py(o, p, keys.v(s));
            wg_commit_and_wait();
        }
        if (it + NS < ntiles)
            named_arrive(1 + NS + s, ALL);
    }
    wg_forward_store(out, lse, hr, o, m, l, wrow0, g, t, T, C, scale_log2);
#else
    __trap();
#endif
}

int main(int argc, char **argv)
{
    int B, T, C, NH;
    if (!attn_bench_shape(argc, argv, "attn_wgmma", WG_HS, &B, &T, &C, &NH))
        return 2;
    int has = 0, *has_d;
    CHECK_CUDA(cudaMalloc(&has_d, sizeof(int)));
    wgmma_probe<<<1, 1>>>(has_d);
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaMemcpy(&has, has_d, sizeof(int), cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaFree(has_d));
    if (!has) {
        fprintf(stderr, "attn_wgmma: this device does not run the sm_90a build\n");
        return 2;
    }
    const size_t n_tok = (size_t)B * T * C, n_qkv = 3 * n_tok, n_stat = (size_t)B * NH * T;
    const float scale = 1.0f / sqrtf((float)WG_HS), scale_log2 = LOG2E_F * scale;
    typedef attn_tiles<bf16> tiles;

    /* the reference: the backend's mma.sync kernels */
    bf16 *qkv, *dout, *out[2], *dqkv[2];
    float *lse[2], *delta[2]; /* [0] mma.sync, [1] the wgmma configuration under test */
    CHECK_CUDA(cudaMalloc(&qkv, n_qkv * sizeof(bf16)));
    CHECK_CUDA(cudaMalloc(&dout, n_tok * sizeof(bf16)));
    for (int k = 0; k < 2; k++) {
        CHECK_CUDA(cudaMalloc(&out[k], n_tok * sizeof(bf16)));
        CHECK_CUDA(cudaMalloc(&dqkv[k], n_qkv * sizeof(bf16)));
        CHECK_CUDA(cudaMalloc(&lse[k], n_stat * sizeof(float)));
        CHECK_CUDA(cudaMalloc(&delta[k], n_stat * sizeof(float)));
    }
    unsigned long long seed = 12345;
    std::vector<bf16> h(n_qkv);
    for (bf16 &x : h)
        x = __float2bfloat16(host_uniform(&seed));
    CHECK_CUDA(cudaMemcpy(qkv, h.data(), n_qkv * sizeof(bf16), cudaMemcpyHostToDevice));
    for (size_t i = 0; i < n_tok; i++)
        h[i] = __float2bfloat16(host_uniform(&seed));
    CHECK_CUDA(cudaMemcpy(dout, h.data(), n_tok * sizeof(bf16), cudaMemcpyHostToDevice));
    cudaStream_t st;
    CHECK_CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    /* outputs poisoned first (0xff: NaN), so an element a kernel fails to write shows; on the
     * kernels' stream (a non-blocking stream does not wait for the legacy stream's memset: a
     * kernel that writes early, as dq writes delta, could be overwritten by its own poison) */
    auto poison = [&](int k) {
        CHECK_CUDA(cudaMemsetAsync(out[k], 0xff, n_tok * sizeof(bf16), st));
        CHECK_CUDA(cudaMemsetAsync(dqkv[k], 0xff, n_qkv * sizeof(bf16), st));
        CHECK_CUDA(cudaMemsetAsync(lse[k], 0xff, n_stat * sizeof(float), st));
        CHECK_CUDA(cudaMemsetAsync(delta[k], 0xff, n_stat * sizeof(float), st));
    };

    /* every backward reads the reference forward's out and lse, so that the backwards are
     * compared on the same inputs even if a forward differed */
    auto ref_fwd = [&]() {
        return attn_forward_launch<bf16, WG_HS, tiles::fwd>(st, out[0], lse[0], qkv, B, T, C, NH,
                                                             scale_log2);
    };
    auto ref_dq = [&]() {
        return attn_dq_launch<bf16, WG_HS, tiles::dq>(st, dqkv[0], delta[0], dout, qkv, out[0],
                                                      lse[0], B, T, C, NH, scale, scale_log2);
    };
    auto ref_dkv = [&]() {
        return attn_dkv_launch<bf16, WG_HS, tiles::dkv>(st, dqkv[0], delta[0], dout, qkv, lse[0],
                                                        B, T, C, NH, scale, scale_log2);
    };
    poison(0);
    CHECK_CUDA(ref_fwd());
    CHECK_CUDA(ref_dq());
    CHECK_CUDA(ref_dkv());
    CHECK_CUDA(cudaStreamSynchronize(st));
    const std::vector<bf16> o0 = fetch(out[0], n_tok), g0 = fetch(dqkv[0], n_qkv);
    const std::vector<float> l0 = fetch(lse[0], n_stat), d0 = fetch(delta[0], n_stat);
    const double ref_ms[3] = {median_ms(st, 30, ref_fwd), median_ms(st, 30, ref_dq),
                              median_ms(st, 30, ref_dkv)};

    cudaDeviceProp prop;
    CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
    printf("# attention, wgmma (cuda_attention_wgmma.cuh) against the backend's mma.sync, %s, "
           "bf16 B %d T %d C %d heads %d\n\n", prop.name, B, T, C, NH);
    printf("Each configuration's outputs against mma.sync's (elements whose bits differ; max "
           "|diff| / max |ref| over all six outputs), its repeatability (a second run, bit for "
           "bit), and each kernel's median of 30 launches.  Configuration: PIPE of the forward, "
           "dq, dk/dv (copies of the next tile under this one's arithmetic) and dq's minimum "
           "blocks an SM.\n\n");
    /* causal FLOPs: the forward 2 products, dq 3 (S, dP, dQ), dk/dv 4 (S, dP, dV, dK) */
    const double pair = (double)B * NH * T * (T + 1) / 2.0 * 2 * WG_HS;
    const double kflops[3] = {2 * pair, 3 * pair, 4 * pair};
    printf("| kernels | out, lse, dq, dk, dv, delta: bits differing | max rel. diff | repeatable "
           "| forward ms | dq ms | dk/dv ms | all three ms | TFLOP/s |\n");
    printf("|---|---|---|---|---|---|---|---|---|\n");
    printf("| mma.sync (backend) | - | - | - | %.4f | %.4f | %.4f | %.4f | %.1f |\n", ref_ms[0],
           ref_ms[1], ref_ms[2], ref_ms[0] + ref_ms[1] + ref_ms[2],
           9 * pair / (ref_ms[0] + ref_ms[1] + ref_ms[2]) / 1e9);
    (void)kflops;

    bool all_ok = true;
    auto measure = [&](auto config, const char *name) {
        typedef decltype(config) W;
        auto fwd = [&]() {
            return attn_wgmma_forward_launch<W>(st, out[1], lse[1], qkv, B, T, C, NH, scale_log2);
        };
        auto dq = [&]() {
            return attn_wgmma_dq_launch<W>(st, dqkv[1], delta[1], dout, qkv, out[0], lse[0], B, T,
                                           C, NH, scale, scale_log2);
        };
        auto dkv = [&]() {
            return attn_wgmma_dkv_launch<W>(st, dqkv[1], delta[1], dout, qkv, lse[0], B, T, C, NH,
                                            scale, scale_log2);
        };
        auto all = [&]() {
            CHECK_CUDA(fwd());
            CHECK_CUDA(dq());
            CHECK_CUDA(dkv());
            CHECK_CUDA(cudaStreamSynchronize(st));
        };
        poison(1);
        all();
        const std::vector<bf16> o1 = fetch(out[1], n_tok), g1 = fetch(dqkv[1], n_qkv);
        const std::vector<float> l1 = fetch(lse[1], n_stat), d1 = fetch(delta[1], n_stat);
        poison(1);
        all();
        const bool repeat = fetch(out[1], n_tok) == o1 && fetch(dqkv[1], n_qkv) == g1 &&
                            fetch(lse[1], n_stat) == l1 && fetch(delta[1], n_stat) == d1;
        size_t differ[6];
        double rel[6], worst = 0.0;
        auto every = [](size_t) { return true; };
        compare(o1, o0, every, &differ[0], &rel[0]);
        compare(l1, l0, every, &differ[1], &rel[1]);
        for (int part = 0; part < 3; part++)
            compare(g1, g0, [&](size_t i) { return (int)(i % (3 * (size_t)C) / C) == part; },
                    &differ[2 + part], &rel[2 + part]);
        compare(d1, d0, every, &differ[5], &rel[5]);
        for (double r : rel)
            worst = std::max(worst, r);
        const double ms[3] = {median_ms(st, 30, fwd), median_ms(st, 30, dq),
                              median_ms(st, 30, dkv)};
        printf("| wgmma %s | %zu, %zu, %zu, %zu, %zu, %zu | %.2e | %s | %.4f | %.4f | %.4f | %.4f "
               "| %.1f |\n", name, differ[0], differ[1], differ[2], differ[3], differ[4],
               differ[5], worst, repeat ? "yes" : "NO", ms[0], ms[1], ms[2], ms[0] + ms[1] + ms[2],
               9 * pair / (ms[0] + ms[1] + ms[2]) / 1e9);
        all_ok = all_ok && repeat && worst < 2e-2;
        for (size_t d : differ)
            all_ok = all_ok && d == 0;
    };
    measure(wg_chosen(), "(the backend's)");
    measure(wg_config<0, 0, 1, 0>(), "PIPE 0, 0, 0");
    measure(wg_config<1, 1, 1, 1>(), "PIPE 1, 1, 1");
    /* the warp-specialized forward (a producer warpgroup, two consumers): ten runs against
     * mma.sync's, bit for bit, and its time beside the backend's wgmma forward's */
    {
        auto ws = [&]() {
            return launch_with_smem(flash_forward_wgmma_ws, attn_grid(B, T, NH, 2 * WG_ROWS),
                                    3 * WG_THREADS, WG_WS_SMEM, st, out[1], lse[1], qkv, T, C, NH,
                                    scale_log2);
        };
        auto one = [&]() {
            return attn_wgmma_forward_launch<wg_chosen>(st, out[1], lse[1], qkv, B, T, C, NH,
                                                        scale_log2);
        };
        int same = 0;
        size_t worst_differ = 0;
        for (int rep = 0; rep < 10; rep++) {
            poison(1);
            CHECK_CUDA(ws());
            CHECK_CUDA(cudaStreamSynchronize(st));
            size_t dout_, dlse;
            double r0, r1;
            auto every = [](size_t) { return true; };
            compare(fetch(out[1], n_tok), o0, every, &dout_, &r0);
            compare(fetch(lse[1], n_stat), l0, every, &dlse, &r1);
            same += dout_ == 0 && dlse == 0;
            worst_differ = std::max(worst_differ, dout_ + dlse);
        }
        const double ms_ws = median_ms(st, 30, ws), ms_one = median_ms(st, 30, one);
        printf("\nThe warp-specialized forward (flash_forward_wgmma_ws): %d of 10 runs bit for bit "
               "mma.sync's (at most %zu elements differing); %.4f ms against the backend's wgmma "
               "forward's %.4f (%.2fx), %.1f TFLOP/s\n", same, worst_differ, ms_ws, ms_one,
               ms_one / ms_ws, 2 * pair / ms_ws / 1e9);
        all_ok = all_ok && same == 10;
    }
    printf("\n%s\n", all_ok ? "every configuration bit-identical to the backend's mma.sync kernels, and repeatable"
                            : "SOME CONFIGURATION DIFFERS from the backend's mma.sync kernels, or does not repeat");
    CHECK_CUDA(cudaStreamDestroy(st));
    CHECK_CUDA(cudaFree(qkv));
    CHECK_CUDA(cudaFree(dout));
    for (int k = 0; k < 2; k++) {
        CHECK_CUDA(cudaFree(out[k]));
        CHECK_CUDA(cudaFree(dqkv[k]));
        CHECK_CUDA(cudaFree(lse[k]));
        CHECK_CUDA(cudaFree(delta[k]));
    }
    return all_ok ? 0 : 1;
}
