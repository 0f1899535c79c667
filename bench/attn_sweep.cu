/*
 * attn_sweep.cu — times every tile configuration of the tensor-core attention kernels
 * (kernels/cuda/cuda_attention_tc.cuh, the same code the CUDA backend runs) on one shape,
 * and checks each against the first configuration of its kind and against itself.
 *
 *   nvcc -O3 -std=c++17 -arch=sm_90 -Ikernels bench/attn_sweep.cu -o attn_sweep
 *   ./attn_sweep [B T C NH]          (default 4 1024 2048 16: the l32 h2048 model, b4 s1024)
 *
 * Prints, per element type (bf16, then fp32 storage with TF32 products), one markdown row
 * per configuration of each kernel: median ms of 30 launches, the causal TFLOP/s (products
 * over the key/query pairs that are not masked: forward 2, dq 3, dk/dv 4 products of
 * 2 hs flops per pair), the largest difference from the first configuration relative to its
 * largest magnitude (tile sizes change summation orders, so this is small, not 0), and
 * whether two launches gave the same bits.  The configuration the backend uses is marked.
 */
#include "attn_bench.cuh"

#include <string.h>

struct shape {
    int B, T, C, NH;
    float scale, scale_log2;
    double pairs; /* unmasked (query, key) pairs over all heads */
};

template <typename E> struct buffers {
    E *qkv, *out, *dout, *dqkv;
    float *lse, *delta;
    size_t n_tok, n_qkv, n_stat;
};

static void to_device(float *d, const std::vector<float> &h)
{
    CHECK_CUDA(cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
}
static void to_device(bf16 *d, const std::vector<float> &h)
{
    std::vector<bf16> b(h.size());
    for (size_t i = 0; i < h.size(); i++)
        b[i] = __float2bfloat16(h[i]);
    CHECK_CUDA(cudaMemcpy(d, b.data(), b.size() * sizeof(bf16), cudaMemcpyHostToDevice));
}
struct row_state {
    bool have_ref;
    std::vector<unsigned char> ref; /* the first configuration's result bytes */
};

static void print_row(const char *kind, const char *cfg, bool chosen, size_t smem, double ms,
                      double flops, double rel, bool repeat)
{
    printf("| %s | %s%s | %zu | %.4f | %.1f | %.2e | %s |\n", kind, cfg, chosen ? " (used)" : "",
           smem / 1024, ms, flops / (ms * 1e-3) / 1e12, rel, repeat ? "yes" : "NO");
}

/* One row: the configuration run twice (its result must repeat bit for bit), compared with
 * the first configuration of its kind (rs), then timed.  run launches it; result / n: what it
 * writes (zeroed first); flops: its products' causal flops. */
template <typename E, typename F>
static void sweep_one(const char *kind, const char *name, bool chosen, size_t smem,
                      double flops, cudaStream_t st, row_state &rs, E *result, size_t n, F run)
{
    if (smem > 227 * 1024) {
        printf("| %s | %s | %zu | - | - | - | over the 227 KiB of shared memory |\n", kind, name,
               smem / 1024);
        return;
    }
    CHECK_CUDA(cudaMemsetAsync(result, 0, n * sizeof(E), st));
    CHECK_CUDA(run());
    CHECK_CUDA(cudaStreamSynchronize(st));
    std::vector<E> r1 = fetch(result, n);
    CHECK_CUDA(run());
    CHECK_CUDA(cudaStreamSynchronize(st));
    std::vector<E> r2 = fetch(result, n);
    const bool repeat = memcmp(r1.data(), r2.data(), n * sizeof(E)) == 0;
    if (!rs.have_ref) {
        rs.ref.assign((unsigned char *)r1.data(), (unsigned char *)(r1.data() + n));
        rs.have_ref = true;
    }
    std::vector<E> ref(n);
    memcpy(ref.data(), rs.ref.data(), rs.ref.size());
    const double ms = median_ms(st, 30, run);
    print_row(kind, name, chosen, smem, ms, flops, rel_diff(r1, ref), repeat);
}

/* products of 2 hs flops per unmasked (query, key) pair: forward 2, dq 3, dk/dv 4 */
template <typename E, int HS, typename F>
static void sweep_forward(const shape &sh, buffers<E> &bu, cudaStream_t st, row_state &rs,
                          const char *name)
{
    sweep_one("forward", name, std::is_same<F, typename attn_tiles<E>::fwd>::value,
              attn_forward_smem<E, HS, F>(), sh.pairs * 2 * 2 * HS, st, rs, bu.out, bu.n_tok,
              [&]() {
                  return attn_forward_launch<E, HS, F>(st, bu.out, bu.lse, bu.qkv, sh.B, sh.T,
                                                       sh.C, sh.NH, sh.scale_log2);
              });
}

/* dq needs lse from the forward (done once before); dk/dv needs delta from dq */
template <typename E, int HS, typename D>
static void sweep_dq(const shape &sh, buffers<E> &bu, cudaStream_t st, row_state &rs,
                     const char *name)
{
    sweep_one("dq", name, std::is_same<D, typename attn_tiles<E>::dq>::value,
              attn_dq_smem<E, HS, D>(), sh.pairs * 3 * 2 * HS, st, rs, bu.dqkv, bu.n_qkv, [&]() {
                  return attn_dq_launch<E, HS, D>(st, bu.dqkv, bu.delta, bu.dout, bu.qkv, bu.out,
                                                  bu.lse, sh.B, sh.T, sh.C, sh.NH, sh.scale,
                                                  sh.scale_log2);
              });
}

template <typename E, int HS, typename K>
static void sweep_dkv(const shape &sh, buffers<E> &bu, cudaStream_t st, row_state &rs,
                      const char *name)
{
    sweep_one("dk, dv", name, std::is_same<K, typename attn_tiles<E>::dkv>::value,
              attn_dkv_smem<E, HS, K>(), sh.pairs * 4 * 2 * HS, st, rs, bu.dqkv, bu.n_qkv, [&]() {
                  return attn_dkv_launch<E, HS, K>(st, bu.dqkv, bu.delta, bu.dout, bu.qkv, bu.lse,
                                                   sh.B, sh.T, sh.C, sh.NH, sh.scale,
                                                   sh.scale_log2);
              });
}

template <typename E> static void sweep_type(const shape &sh, const char *type_name)
{
    constexpr int HS = 128;
    if (sh.C / sh.NH != HS) {
        fprintf(stderr, "attn_sweep: head size %d; this sweep is built for %d\n", sh.C / sh.NH,
                HS);
        exit(2);
    }
    buffers<E> bu;
    bu.n_tok = (size_t)sh.B * sh.T * sh.C;
    bu.n_qkv = 3 * bu.n_tok;
    bu.n_stat = (size_t)sh.B * sh.NH * sh.T;
    CHECK_CUDA(cudaMalloc(&bu.qkv, bu.n_qkv * sizeof(E)));
    CHECK_CUDA(cudaMalloc(&bu.dqkv, bu.n_qkv * sizeof(E)));
    CHECK_CUDA(cudaMalloc(&bu.out, bu.n_tok * sizeof(E)));
    CHECK_CUDA(cudaMalloc(&bu.dout, bu.n_tok * sizeof(E)));
    CHECK_CUDA(cudaMalloc(&bu.lse, bu.n_stat * sizeof(float)));
    CHECK_CUDA(cudaMalloc(&bu.delta, bu.n_stat * sizeof(float)));
    unsigned long long seed = 12345;
    std::vector<float> h(bu.n_qkv);
    for (auto &x : h)
        x = host_uniform(&seed);
    to_device(bu.qkv, h);
    h.resize(bu.n_tok);
    for (auto &x : h)
        x = host_uniform(&seed) * 0.1f;
    to_device(bu.dout, h);
    cudaStream_t st;
    CHECK_CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));

    printf("\n%s, B %d T %d C %d heads %d (hs %d)\n\n", type_name, sh.B, sh.T, sh.C, sh.NH, HS);
    printf("| kernel | tiles | smem KiB | ms | causal TFLOP/s | rel. diff from first | "
           "repeatable |\n|---|---|---|---|---|---|---|\n");
    row_state rs = {false, {}};
    sweep_forward<E, HS, fwd_tiles<1, 64, 0>>(sh, bu, st, rs, "MT 1 BK 64 copies first");
    sweep_forward<E, HS, fwd_tiles<1, 64, 1>>(sh, bu, st, rs, "MT 1 BK 64 pipelined");
    sweep_forward<E, HS, fwd_tiles<1, 32, 0>>(sh, bu, st, rs, "MT 1 BK 32 copies first");
    sweep_forward<E, HS, fwd_tiles<2, 32, 0>>(sh, bu, st, rs, "MT 2 BK 32 copies first");
    sweep_forward<E, HS, fwd_tiles<2, 32, 1>>(sh, bu, st, rs, "MT 2 BK 32 pipelined");
    sweep_forward<E, HS, fwd_tiles<2, 64, 0>>(sh, bu, st, rs, "MT 2 BK 64 copies first");
    /* the backward reads the chosen forward's out and lse */
    CHECK_CUDA((attn_forward_launch<E, HS, typename attn_tiles<E>::fwd>(
        st, bu.out, bu.lse, bu.qkv, sh.B, sh.T, sh.C, sh.NH, sh.scale_log2)));
    rs = {false, {}};
    sweep_dq<E, HS, dq_tiles<1, 32, 1>>(sh, bu, st, rs, "MT 1 BK 32 stages 1");
    sweep_dq<E, HS, dq_tiles<1, 32, 2>>(sh, bu, st, rs, "MT 1 BK 32 stages 2");
    sweep_dq<E, HS, dq_tiles<1, 64, 2>>(sh, bu, st, rs, "MT 1 BK 64 stages 2");
    sweep_dq<E, HS, dq_tiles<2, 16, 2>>(sh, bu, st, rs, "MT 2 BK 16 stages 2");
    sweep_dq<E, HS, dq_tiles<2, 32, 1>>(sh, bu, st, rs, "MT 2 BK 32 stages 1");
    sweep_dq<E, HS, dq_tiles<2, 32, 2>>(sh, bu, st, rs, "MT 2 BK 32 stages 2");
    /* dk/dv reads the chosen dq's delta */
    CHECK_CUDA((attn_dq_launch<E, HS, typename attn_tiles<E>::dq>(st, bu.dqkv, bu.delta, bu.dout, bu.qkv,
                                                          bu.out, bu.lse, sh.B, sh.T, sh.C,
                                                          sh.NH, sh.scale, sh.scale_log2)));
    rs = {false, {}};
    sweep_dkv<E, HS, dkv_tiles<4, 32, 1>>(sh, bu, st, rs, "warps 4 BQ 32 stages 1");
    sweep_dkv<E, HS, dkv_tiles<4, 32, 2>>(sh, bu, st, rs, "warps 4 BQ 32 stages 2");
    sweep_dkv<E, HS, dkv_tiles<4, 16, 2>>(sh, bu, st, rs, "warps 4 BQ 16 stages 2");
    sweep_dkv<E, HS, dkv_tiles<8, 32, 1>>(sh, bu, st, rs, "warps 8 BQ 32 stages 1");
    sweep_dkv<E, HS, dkv_tiles<8, 32, 2>>(sh, bu, st, rs, "warps 8 BQ 32 stages 2");
    sweep_dkv<E, HS, dkv_tiles<8, 64, 2>>(sh, bu, st, rs, "warps 8 BQ 64 stages 2");

    CHECK_CUDA(cudaStreamDestroy(st));
    CHECK_CUDA(cudaFree(bu.qkv));
    CHECK_CUDA(cudaFree(bu.dqkv));
    CHECK_CUDA(cudaFree(bu.out));
    CHECK_CUDA(cudaFree(bu.dout));
    CHECK_CUDA(cudaFree(bu.lse));
    CHECK_CUDA(cudaFree(bu.delta));
}

int main(int argc, char **argv)
{
    shape sh = {4, 1024, 2048, 16, 0, 0, 0};
    if (argc == 5) {
        sh.B = atoi(argv[1]);
        sh.T = atoi(argv[2]);
        sh.C = atoi(argv[3]);
        sh.NH = atoi(argv[4]);
    } else if (argc != 1) {
        fprintf(stderr, "usage: attn_sweep [B T C NH]\n");
        return 2;
    }
    if (sh.B < 1 || sh.T < 1 || sh.NH < 1 || sh.C % sh.NH != 0) {
        fprintf(stderr, "attn_sweep: bad shape\n");
        return 2;
    }
    const int hs = sh.C / sh.NH;
    sh.scale = 1.0f / sqrtf((float)hs);
    sh.scale_log2 = sh.scale * LOG2E_F;
    sh.pairs = (double)sh.B * sh.NH * sh.T * (sh.T + 1) / 2.0;
    cudaDeviceProp prop;
    CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
    printf("# attention tile sweep on %s (%d SMs)\n", prop.name, prop.multiProcessorCount);
    sweep_type<bf16>(sh, "bf16");
    sweep_type<float>(sh, "fp32 storage, TF32 products");
    return 0;
}
