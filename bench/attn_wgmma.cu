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

int main(int argc, char **argv)
{
    int B, T, C, NH;
    if (!attn_bench_shape(argc, argv, "attn_wgmma", WG_HS, &B, &T, &C, &NH))
        return 2;
    int has = 0, *has_d;
    CK(cudaMalloc(&has_d, sizeof(int)));
    wgmma_probe<<<1, 1>>>(has_d);
    CK(cudaGetLastError());
    CK(cudaMemcpy(&has, has_d, sizeof(int), cudaMemcpyDeviceToHost));
    CK(cudaFree(has_d));
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
    CK(cudaMalloc(&qkv, n_qkv * sizeof(bf16)));
    CK(cudaMalloc(&dout, n_tok * sizeof(bf16)));
    for (int k = 0; k < 2; k++) {
        CK(cudaMalloc(&out[k], n_tok * sizeof(bf16)));
        CK(cudaMalloc(&dqkv[k], n_qkv * sizeof(bf16)));
        CK(cudaMalloc(&lse[k], n_stat * sizeof(float)));
        CK(cudaMalloc(&delta[k], n_stat * sizeof(float)));
    }
    unsigned long long seed = 12345;
    std::vector<bf16> h(n_qkv);
    for (bf16 &x : h)
        x = __float2bfloat16(host_uniform(&seed));
    CK(cudaMemcpy(qkv, h.data(), n_qkv * sizeof(bf16), cudaMemcpyHostToDevice));
    for (size_t i = 0; i < n_tok; i++)
        h[i] = __float2bfloat16(host_uniform(&seed));
    CK(cudaMemcpy(dout, h.data(), n_tok * sizeof(bf16), cudaMemcpyHostToDevice));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    /* outputs poisoned first (0xff: NaN), so an element a kernel fails to write shows; on the
     * kernels' stream (a non-blocking stream does not wait for the legacy stream's memset: a
     * kernel that writes early, as dq writes delta, could be overwritten by its own poison) */
    auto poison = [&](int k) {
        CK(cudaMemsetAsync(out[k], 0xff, n_tok * sizeof(bf16), st));
        CK(cudaMemsetAsync(dqkv[k], 0xff, n_qkv * sizeof(bf16), st));
        CK(cudaMemsetAsync(lse[k], 0xff, n_stat * sizeof(float), st));
        CK(cudaMemsetAsync(delta[k], 0xff, n_stat * sizeof(float), st));
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
    CK(ref_fwd());
    CK(ref_dq());
    CK(ref_dkv());
    CK(cudaStreamSynchronize(st));
    const std::vector<bf16> o0 = fetch(out[0], n_tok), g0 = fetch(dqkv[0], n_qkv);
    const std::vector<float> l0 = fetch(lse[0], n_stat), d0 = fetch(delta[0], n_stat);
    const double ref_ms[3] = {median_ms(st, 30, ref_fwd), median_ms(st, 30, ref_dq),
                              median_ms(st, 30, ref_dkv)};

    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
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
            CK(fwd());
            CK(dq());
            CK(dkv());
            CK(cudaStreamSynchronize(st));
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
    printf("\n%s\n", all_ok ? "every configuration bit-identical to the backend's mma.sync kernels, and repeatable"
                            : "SOME CONFIGURATION DIFFERS from the backend's mma.sync kernels, or does not repeat");
    CK(cudaStreamDestroy(st));
    CK(cudaFree(qkv));
    CK(cudaFree(dout));
    for (int k = 0; k < 2; k++) {
        CK(cudaFree(out[k]));
        CK(cudaFree(dqkv[k]));
        CK(cudaFree(lse[k]));
        CK(cudaFree(delta[k]));
    }
    return all_ok ? 0 : 1;
}
