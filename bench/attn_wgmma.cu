/*
 * attn_wgmma.cu — the Hopper attention kernels (kernels/cuda/cuda_attention_wgmma.cuh: wgmma,
 * bf16, head size 128) against the backend's mma.sync ones (cuda_attention_tc.cuh) on the
 * same inputs: the forward's out and lse, the backward's dq, dk, dv and delta, each compared
 * bit for bit (elements differing) and as max |diff| / max |ref|, each kernel's repeatability,
 * and each kernel's median time.  Exit 1 if any output differs or any run does not repeat.
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

    /* [0] the backend's mma.sync kernels, [1] wgmma */
    bf16 *qkv, *dout, *out[2], *dqkv[2];
    float *lse[2], *delta[2];
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

    /* both backwards read the reference forward's out and lse, so that they are compared on
     * the same inputs even if the forwards differed */
    auto fwd = [&](int k) {
        return k == 0 ? attn_forward_launch<bf16, WG_HS, tiles::fwd>(st, out[0], lse[0], qkv, B,
                                                                      T, C, NH, scale_log2)
                      : attn_wgmma_forward_launch(st, out[1], lse[1], qkv, B, T, C, NH,
                                                  scale_log2);
    };
    auto dq = [&](int k) {
        return k == 0 ? attn_dq_launch<bf16, WG_HS, tiles::dq>(st, dqkv[0], delta[0], dout, qkv,
                                                               out[0], lse[0], B, T, C, NH, scale,
                                                               scale_log2)
                      : attn_wgmma_dq_launch(st, dqkv[1], delta[1], dout, qkv, out[0], lse[0], B,
                                             T, C, NH, scale, scale_log2);
    };
    auto dkv = [&](int k) {
        return k == 0 ? attn_dkv_launch<bf16, WG_HS, tiles::dkv>(st, dqkv[0], delta[0], dout, qkv,
                                                                 lse[0], B, T, C, NH, scale,
                                                                 scale_log2)
                      : attn_wgmma_dkv_launch(st, dqkv[1], delta[1], dout, qkv, lse[0], B, T, C,
                                              NH, scale, scale_log2);
    };
    auto all = [&](int k) {
        CK(fwd(k));
        CK(dq(k));
        CK(dkv(k));
        CK(cudaStreamSynchronize(st));
    };
    /* outputs poisoned first (0xff: NaN), so an element a kernel fails to write shows */
    for (int k = 0; k < 2; k++) {
        CK(cudaMemset(out[k], 0xff, n_tok * sizeof(bf16)));
        CK(cudaMemset(dqkv[k], 0xff, n_qkv * sizeof(bf16)));
        CK(cudaMemset(lse[k], 0xff, n_stat * sizeof(float)));
        CK(cudaMemset(delta[k], 0xff, n_stat * sizeof(float)));
    }
    all(0);
    all(1);
    const std::vector<bf16> o0 = fetch(out[0], n_tok), o1 = fetch(out[1], n_tok);
    const std::vector<bf16> g0 = fetch(dqkv[0], n_qkv), g1 = fetch(dqkv[1], n_qkv);
    const std::vector<float> l0 = fetch(lse[0], n_stat), l1 = fetch(lse[1], n_stat);
    const std::vector<float> d0 = fetch(delta[0], n_stat), d1 = fetch(delta[1], n_stat);
    all(1);
    const bool repeat = fetch(out[1], n_tok) == o1 && fetch(dqkv[1], n_qkv) == g1 &&
                        fetch(lse[1], n_stat) == l1 && fetch(delta[1], n_stat) == d1;

    struct row {
        const char *name;
        size_t differ, n;
        double rel;
    } rows[6];
    auto every = [](size_t) { return true; };
    rows[0] = {"out", 0, n_tok, 0};
    compare(o1, o0, every, &rows[0].differ, &rows[0].rel);
    rows[1] = {"lse", 0, n_stat, 0};
    compare(l1, l0, every, &rows[1].differ, &rows[1].rel);
    const char *part_name[3] = {"dq", "dk", "dv"};
    for (int part = 0; part < 3; part++) {
        rows[2 + part] = {part_name[part], 0, n_tok, 0};
        compare(g1, g0, [&](size_t i) { return (int)(i % (3 * (size_t)C) / C) == part; },
                &rows[2 + part].differ, &rows[2 + part].rel);
    }
    rows[5] = {"delta", 0, n_stat, 0};
    compare(d1, d0, every, &rows[5].differ, &rows[5].rel);

    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("# attention, wgmma (cuda_attention_wgmma.cuh) against the backend's mma.sync, %s, "
           "bf16 B %d T %d C %d heads %d\n\n", prop.name, B, T, C, NH);
    printf("| output | elements | bits differing | max rel. diff |\n|---|---|---|---|\n");
    bool close = true, identical = true;
    for (const row &r : rows) {
        printf("| %s | %zu | %zu | %.2e |\n", r.name, r.n, r.differ, r.rel);
        close = close && r.rel < 2e-2;
        identical = identical && r.differ == 0;
    }
    printf("\nwgmma repeatable (a second run, bit for bit): %s\n\n", repeat ? "yes" : "NO");

    /* causal FLOPs: the forward 2 products, dq 3 (S, dP, dQ), dk/dv 4 (S, dP, dV, dK) */
    const double pair = (double)B * NH * T * (T + 1) / 2.0 * 2 * WG_HS;
    printf("| kernel | mma.sync ms | wgmma ms | speedup | wgmma TFLOP/s |\n|---|---|---|---|---|\n");
    const char *kname[3] = {"forward", "dq (+delta)", "dk, dv"};
    const double kflops[3] = {2 * pair, 3 * pair, 4 * pair};
    double total[2] = {0, 0};
    for (int i = 0; i < 3; i++) {
        double ms[2];
        for (int k = 0; k < 2; k++) {
            ms[k] = median_ms(st, 30, [&]() { return i == 0 ? fwd(k) : i == 1 ? dq(k) : dkv(k); });
            total[k] += ms[k];
        }
        printf("| %s | %.4f | %.4f | %.2fx | %.1f |\n", kname[i], ms[0], ms[1], ms[0] / ms[1],
               kflops[i] / ms[1] / 1e9);
    }
    printf("| all three | %.4f | %.4f | %.2fx | %.1f |\n", total[0], total[1], total[0] / total[1],
           9 * pair / total[1] / 1e9);
    const bool ok = close && repeat;
    printf("\n%s\n", !ok ? "DISAGREES with the backend, or does not repeat"
                     : identical ? "bit-identical to the backend's mma.sync kernels"
                                 : "agrees with the backend to the bf16 bound, not bit for bit");
    CK(cudaStreamDestroy(st));
    CK(cudaFree(qkv));
    CK(cudaFree(dout));
    for (int k = 0; k < 2; k++) {
        CK(cudaFree(out[k]));
        CK(cudaFree(dqkv[k]));
        CK(cudaFree(lse[k]));
        CK(cudaFree(delta[k]));
    }
    return ok ? 0 : 1;
}
