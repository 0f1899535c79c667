/*
 * test_cuda.c — the CUDA backend against the CPU reference (needs a GPU; on a machine
 * without one every test is skipped).
 *
 *  - every op, on fresh random inputs of two realistic small shapes (B=2, T=64 and T=128,
 *    C=128, NH=4, V=1000, Vp=1024), run through both backends; each output compared by the
 *    normwise relative error max|gpu - cpu| / max|cpu|, printed as
 *      cuda_vs_cpu <op> <output> math=<fp32|tf32> rel_err=<x> T=<T>
 *    Limits: strict fp32 (allow_tf32 = 0) 1e-5, TF32 2e-3, bf16 2e-2.  Accumulating outputs
 *    start from random values (not zeros), overwritten outputs from garbage, so an element
 *    that is not written, or overwritten instead of accumulated, shows.  In bf16 the
 *    activation-typed tensors (gpt.h: every void * argument) are bf16 on the GPU, and the
 *    CPU reference runs on the same values (each input rounded to bf16 once, on the host,
 *    before both backends see it); fp32-typed tensors (gradients, statistics) stay fp32.
 *  - the attention's wgmma kernels (Hopper, bf16, head size 128) equal to its mma.sync ones
 *    bit for bit;
 *  - the encoder's backward equal to the CPU's bit for bit (no atomics: the same additions
 *    in the same order);
 *  - the megatron-lm engine for 20 iterations on CPU and on CUDA in strict fp32: the
 *    per-iteration losses agree to 1e-5 relative; and in bf16 against the CPU's fp32
 *    losses to 1e-2 relative (see test_engine_bf16_vs_cpu for why that bound);
 *  - every offloading engine on the GPU: losses within 1e-5 of the CPU's, and losses and
 *    final parameters equal to megatron-lm's on the GPU bit for bit;
 *  - repeatability: two identical GPU runs equal bit for bit in fp32, TF32 and bf16;
 *  - --graphs: megatron-lm's phases replayed as CUDA graphs equal to its ops issued one by
 *    one, bit for bit, in every math mode, with one and two micro-batches;
 *  - TF32 weight gradients, the input transposed first (and, tf32_weight_grad_direct, not), within
 *    TF32's bound of a double reference, chunked and unaligned;
 *  - an absurd allocation is GPT_ERR_OOM and leaves the backend usable;
 *  - --profile's wrapping backend computes on the GPU what the CUDA backend does, and times
 *    and counts every op.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "engine_harness.h"
#include "../kernels/model.h"
#include "../kernels/checksum_element.h"
#include "../kernels/profile.h"
#include "../kernels/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FP32_LIMIT 1e-5
#define TF32_LIMIT 2e-3
#define BF16_LIMIT 2e-2

/* ---- the two backends ---------------------------------------------------------------- */

typedef struct pair {
    gpt_backend *cpu, *gpu;
    gpt_stream *cs, *gs;
    int tf32, bf16;
    const char *math;
    uint64_t seed; /* advanced per use: every check draws fresh inputs */
} pair;

static int have_gpu(void)
{
    gpt_backend *be = NULL;
    if (gpt_cuda_backend_create(&be, 0, 0) != 0) return 0;
    gpt_cuda_backend_destroy(be);
    return 1;
}

enum { MATH_FP32 = 0, MATH_TF32 = 1, MATH_BF16 = 2 };

/* The pair in a math mode, the GPU backend making the kernel choices kernels says (NULL: the
 * defaults). */
static void pair_open_kernels(pair *p, int math, const gpt_cuda_kernels *kernels)
{
    memset(p, 0, sizeof *p);
    p->tf32 = math == MATH_TF32;
    p->bf16 = math == MATH_BF16;
    assert_int_equal(gpt_cpu_backend_create(&p->cpu, 0), 0);
    assert_int_equal(p->cpu->ops->stream_create(p->cpu, &p->cs), 0);
    assert_int_equal(gpt_cuda_backend_create_kernels(&p->gpu, 0, p->tf32,
                                                     p->bf16 ? GPT_BF16 : GPT_F32, kernels),
                     0);
    assert_int_equal(p->gpu->ops->stream_create(p->gpu, &p->gs), 0);
    p->math = p->bf16 ? "bf16" : p->tf32 ? "tf32" : "fp32";
    p->seed = 1000 + (uint64_t)math;
}

static void pair_open(pair *p, int math)
{
    pair_open_kernels(p, math, NULL);
}

static void pair_close(pair *p)
{
    p->gpu->ops->stream_destroy(p->gs);
    gpt_cuda_backend_destroy(p->gpu);
    p->cpu->ops->stream_destroy(p->cs);
    gpt_cpu_backend_destroy(p->cpu);
}

/* A tensor in both places: cpu (host memory, the CPU backend's "device", fp32) and d (GPU).
 * act: the tensor has the activation type (bf16 on the GPU when the pair is bf16), else
 * it is fp32 on both sides. */
typedef struct buf {
    float *cpu;
    void *d;
    size_t n;
    int act;
    size_t esize; /* bytes per element of d */
} buf;

static buf buf_new(pair *p, size_t n, int act)
{
    buf b = {.n = n, .act = act};
    b.esize = act && p->bf16 ? 2 : sizeof(float);
    b.cpu = malloc(n * sizeof(float));
    assert_non_null(b.cpu);
    assert_int_equal(p->gpu->ops->dev_alloc(p->gpu, &b.d, n * b.esize), 0);
    return b;
}

/* Element i of the GPU copy. */
static void *dat(const buf *b, size_t i)
{
    return (char *)b->d + i * b->esize;
}

/* Copies the CPU values into the GPU copy (an input that came out of a CPU op).  A bf16
 * tensor: the CPU values are first rounded to bf16 themselves, so both backends go on from
 * exactly the same inputs. */
static void buf_push(pair *p, buf *b)
{
    assert_int_equal(gpt_stream_sync(p->cs), 0); /* the CPU op that wrote b has run */
    if (b->esize == 2) {
        uint16_t *h = malloc(b->n * sizeof(uint16_t));
        assert_non_null(h);
        for (size_t i = 0; i < b->n; i++) {
            h[i] = gpt_f32_to_bf16(b->cpu[i]);
            b->cpu[i] = gpt_bf16_to_f32(h[i]);
        }
        assert_int_equal(gpt_memcpy_h2d(p->gs, b->d, h, b->n * sizeof(uint16_t)), 0);
        assert_int_equal(gpt_stream_sync(p->gs), 0); /* before h goes */
        free(h);
        return;
    }
    assert_int_equal(gpt_memcpy_h2d(p->gs, b->d, b->cpu, b->n * sizeof(float)), 0);
}

/* Fresh values mean + std * normal in both copies (std 0 with mean 0 would be zeros, which
 * hide unwritten outputs: never used).  buf_rand: an activation-typed tensor; buf_randf:
 * always fp32 (gradients of parameters, statistics, optimizer state). */
static buf buf_rand_as(pair *p, size_t n, double mean, double std, int act)
{
    buf b = buf_new(p, n, act);
    rng r = rng_for(p->seed++, 11, 13);
    for (size_t i = 0; i < n; i++) b.cpu[i] = (float)(mean + std * rng_normal(&r));
    buf_push(p, &b);
    return b;
}
static buf buf_rand(pair *p, size_t n, double mean, double std)
{
    return buf_rand_as(p, n, mean, std, 1);
}
static buf buf_randf(pair *p, size_t n, double mean, double std)
{
    return buf_rand_as(p, n, mean, std, 0);
}

static void buf_free(pair *p, buf *b)
{
    assert_int_equal(gpt_stream_sync(p->cs), 0); /* no queued CPU op still uses b */
    free(b->cpu);
    p->gpu->ops->dev_free(p->gpu, b->d);
}

/* The GPU copy, as floats (malloc'd). */
static float *buf_fetch(pair *p, const buf *b)
{
    float *g = malloc(b->n * sizeof(float));
    assert_non_null(g);
    if (b->esize == 2) {
        uint16_t *h = malloc(b->n * sizeof(uint16_t));
        assert_non_null(h);
        assert_int_equal(gpt_memcpy_d2h(p->gs, h, b->d, b->n * sizeof(uint16_t)), 0);
        assert_int_equal(gpt_stream_sync(p->gs), 0);
        for (size_t i = 0; i < b->n; i++) g[i] = gpt_bf16_to_f32(h[i]);
        free(h);
    } else {
        assert_int_equal(gpt_memcpy_d2h(p->gs, g, b->d, b->n * sizeof(float)), 0);
        assert_int_equal(gpt_stream_sync(p->gs), 0);
    }
    return g;
}

static int32_t *ids_new(pair *p, int32_t **dev, size_t n, int below)
{
    int32_t *h = malloc(n * sizeof(int32_t));
    assert_non_null(h);
    rng r = rng_for(p->seed++, 17, 19);
    for (size_t i = 0; i < n; i++) h[i] = (int32_t)rng_below(&r, (uint32_t)below);
    /* repeated ids: the encoder's backward must add every occurrence */
    for (size_t i = 1; i < n; i += 7) h[i] = h[0];
    assert_int_equal(p->gpu->ops->dev_alloc(p->gpu, (void **)dev, n * sizeof(int32_t)), 0);
    assert_int_equal(gpt_memcpy_h2d(p->gs, *dev, h, n * sizeof(int32_t)), 0);
    return h;
}

/* Normwise relative error of the GPU's copy of b against the CPU's; prints and checks. */
static double check(pair *p, const char *op, const char *output, const buf *b, int T)
{
    float *g = buf_fetch(p, b);
    assert_int_equal(gpt_stream_sync(p->cs), 0); /* the CPU stream is async too */
    double maxdiff = 0, maxref = 0;
    int finite = 1;
    for (size_t i = 0; i < b->n; i++) {
        if (!isfinite(g[i])) finite = 0;
        double d = fabs((double)g[i] - (double)b->cpu[i]);
        if (d > maxdiff) maxdiff = d;
        if (fabs((double)b->cpu[i]) > maxref) maxref = fabs((double)b->cpu[i]);
    }
    free(g);
    double rel = finite ? (maxref > 0 ? maxdiff / maxref : maxdiff) : INFINITY;
    printf("cuda_vs_cpu %s %s math=%s rel_err=%.3e T=%d\n", op, output, p->math, rel, T);
    const double limit = p->bf16 ? BF16_LIMIT : p->tf32 ? TF32_LIMIT : FP32_LIMIT;
    if (!(rel <= limit))
        fail_msg("%s %s: rel_err %.3e over %.0e (math=%s)", op, output, rel, limit, p->math);
    return rel;
}

/* The GPU's copy of b must equal the CPU's bit for bit; prints the count of differing
 * elements. */
static void check_exact(pair *p, const char *op, const char *output, const buf *b, int T)
{
    float *g = buf_fetch(p, b);
    assert_int_equal(gpt_stream_sync(p->cs), 0);
    size_t differ = 0;
    for (size_t i = 0; i < b->n; i++)
        if (memcmp(&g[i], &b->cpu[i], sizeof(float)) != 0) differ++;
    free(g);
    printf("cuda_vs_cpu %s %s math=%s bitwise differing=%zu of %zu T=%d\n", op, output, p->math,
           differ, b->n, T);
    if (differ)
        fail_msg("%s %s: %zu of %zu elements differ from the CPU (math=%s)", op, output, differ,
                 b->n, p->math);
}

/* ---- the ops ---------------------------------------------------------------------------- */

enum { B_ = 2, C_ = 128, NH_ = 4, V_ = 1000, VP_ = 1024 };

static void check_encoder(pair *p, int T)
{
    const size_t N = (size_t)B_ * T;
    int32_t *dtok;
    int32_t *tok = ids_new(p, &dtok, N, V_);
    buf wte = buf_rand(p, (size_t)VP_ * C_, 0, 0.5), wpe = buf_rand(p, (size_t)T * C_, 0, 0.5);
    buf out = buf_rand(p, N * C_, 7, 1);
    gpt_encoder_forward(p->cs, out.cpu, tok, wte.cpu, wpe.cpu, B_, T, C_);
    gpt_encoder_forward(p->gs, out.d, dtok, wte.d, wpe.d, B_, T, C_);
    check(p, "encoder_forward", "out", &out, T);

    buf dout = buf_rand(p, N * C_, 0, 1);
    buf dwte = buf_randf(p, (size_t)VP_ * C_, 0, 1), dwpe = buf_randf(p, (size_t)T * C_, 0, 1);
    gpt_encoder_backward(p->cs, dwte.cpu, dwpe.cpu, dout.cpu, tok, B_, T, C_);
    gpt_encoder_backward(p->gs, dwte.d, dwpe.d, dout.d, dtok, B_, T, C_);
    /* The same additions in the same order on both backends (no atomics): equal bit for
     * bit in every math mode (in bf16 both add the same bf16 values in fp32). */
    check_exact(p, "encoder_backward", "dwte", &dwte, T);
    check_exact(p, "encoder_backward", "dwpe", &dwpe, T);

    /* the vocabulary-parallel forms: the second half of the rows, no positions (a tensor-
     * parallel rank past the first), dwpe NULL */
    const int half = VP_ / 2;
    gpt_encoder_forward_vocab(p->cs, out.cpu, tok, wte.cpu, NULL, B_, T, C_, half, half);
    gpt_encoder_forward_vocab(p->gs, out.d, dtok, wte.d, NULL, B_, T, C_, half, half);
    check(p, "encoder_forward_vocab", "out", &out, T);
    gpt_encoder_backward_vocab(p->cs, dwte.cpu, NULL, dout.cpu, tok, B_, T, C_, half, half);
    gpt_encoder_backward_vocab(p->gs, dwte.d, NULL, dout.d, dtok, B_, T, C_, half, half);
    check_exact(p, "encoder_backward_vocab", "dwte", &dwte, T);

    buf *all[] = {&wte, &wpe, &out, &dout, &dwte, &dwpe};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) buf_free(p, all[i]);
    p->gpu->ops->dev_free(p->gpu, dtok);
    free(tok);
}

/* N rows of C channels.  The GPU takes one pass per row block when C / (16 bytes) makes
 * whole warps (C = 128 fp32, 2048 both types), two kernels otherwise (C = 128 bf16, 200). */
static void check_layernorm_case(pair *p, int N, int C, int T)
{
    const size_t NC = (size_t)N * C;
    buf inp = buf_rand(p, NC, 0.5, 2), w = buf_rand(p, C, 1, 0.2), b = buf_rand(p, C, 0, 0.2);
    buf out = buf_rand(p, NC, 9, 1), mean = buf_randf(p, N, 9, 1), rstd = buf_randf(p, N, 9, 1);
    gpt_layernorm_forward(p->cs, out.cpu, mean.cpu, rstd.cpu, inp.cpu, w.cpu, b.cpu, N, C);
    gpt_layernorm_forward(p->gs, out.d, mean.d, rstd.d, inp.d, w.d, b.d, N, C);
    check(p, "layernorm_forward", "out", &out, T);
    check(p, "layernorm_forward", "mean", &mean, T);
    check(p, "layernorm_forward", "rstd", &rstd, T);

    /* the fused residual + layernorm, its sum written over its second input as the layer
     * does (res2 = x + res2) */
    buf x = buf_rand(p, NC, 0, 1), res = buf_rand(p, NC, 0.5, 1), out2 = buf_rand(p, NC, 9, 1);
    buf mean2 = buf_randf(p, N, 9, 1), rstd2 = buf_randf(p, N, 9, 1);
    gpt_residual_layernorm_forward(p->cs, res.cpu, out2.cpu, mean2.cpu, rstd2.cpu, x.cpu,
                                   res.cpu, w.cpu, b.cpu, N, C);
    gpt_residual_layernorm_forward(p->gs, res.d, out2.d, mean2.d, rstd2.d, x.d, res.d, w.d, b.d,
                                   N, C);
    check(p, "residual_layernorm_forward", "res", &res, T);
    check(p, "residual_layernorm_forward", "out", &out2, T);
    check(p, "residual_layernorm_forward", "mean", &mean2, T);
    check(p, "residual_layernorm_forward", "rstd", &rstd2, T);
    buf *fused[] = {&x, &res, &out2, &mean2, &rstd2};
    for (size_t i = 0; i < sizeof fused / sizeof *fused; i++) buf_free(p, fused[i]);

    /* backward from the CPU's saved statistics, so that only the backward is measured */
    buf_push(p, &mean);
    buf_push(p, &rstd);
    buf dout = buf_rand(p, NC, 0, 1), dinp = buf_rand(p, NC, 0, 1);
    buf dw = buf_randf(p, C, 0, 1), db = buf_randf(p, C, 0, 1);
    gpt_layernorm_backward(p->cs, dinp.cpu, dw.cpu, db.cpu, dout.cpu, inp.cpu, w.cpu, mean.cpu,
                           rstd.cpu, N, C, GPT_GRAD_ACCUMULATE);
    gpt_layernorm_backward(p->gs, dinp.d, dw.d, db.d, dout.d, inp.d, w.d, mean.d, rstd.d, N, C,
                           GPT_GRAD_ACCUMULATE);
    check(p, "layernorm_backward", "dinp", &dinp, T);
    check(p, "layernorm_backward", "dw", &dw, T);
    check(p, "layernorm_backward", "db", &db, T);
    /* overwriting dw, db that hold garbage (the CPU zeroes, then accumulates) */
    buf dw_o = buf_randf(p, C, 5, 1), db_o = buf_randf(p, C, 5, 1);
    gpt_layernorm_backward(p->cs, dinp.cpu, dw_o.cpu, db_o.cpu, dout.cpu, inp.cpu, w.cpu,
                           mean.cpu, rstd.cpu, N, C, GPT_GRAD_OVERWRITE);
    gpt_layernorm_backward(p->gs, dinp.d, dw_o.d, db_o.d, dout.d, inp.d, w.d, mean.d, rstd.d, N,
                           C, GPT_GRAD_OVERWRITE);
    check(p, "layernorm_backward[overwrite]", "dw", &dw_o, T);
    check(p, "layernorm_backward[overwrite]", "db", &db_o, T);
    buf_free(p, &dw_o);
    buf_free(p, &db_o);

    buf *all[] = {&inp, &w, &b, &out, &mean, &rstd, &dout, &dinp, &dw, &db};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) buf_free(p, all[i]);
}

static void check_layernorm(pair *p, int T)
{
    check_layernorm_case(p, B_ * T, C_, T);
    /* the model's width, rows not a multiple of the 16-row blocks */
    check_layernorm_case(p, 3 * T + 5, 2048, T);
    check_layernorm_case(p, B_ * T, 200, T);
}

/* One linear layer (N, C) -> (N, OC), forward and backward.  bias_offset: the bias starts
 * that many floats into its buffer (1: not 16-byte aligned, the unfused path). */
static void check_matmul_case(pair *p, int T, int C, int OC, int with_bias, int bias_offset,
                              int with_dinp)
{
    const int N = B_ * T;
    char op[64];
    snprintf(op, sizeof op, "matmul_forward[C=%d,OC=%d%s%s]", C, OC, with_bias ? ",bias" : "",
             bias_offset ? "+1" : "");
    buf inp = buf_rand(p, (size_t)N * C, 0, 1), w = buf_rand(p, (size_t)OC * C, 0, 0.1);
    buf bias = buf_rand(p, (size_t)OC + 1, 0, 1);
    buf out = buf_rand(p, (size_t)N * OC, 5, 1);
    gpt_matmul_forward(p->cs, out.cpu, inp.cpu, w.cpu, with_bias ? bias.cpu + bias_offset : NULL,
                       N, C, OC);
    gpt_matmul_forward(p->gs, out.d, inp.d, w.d, with_bias ? dat(&bias, (size_t)bias_offset) : NULL,
                       N, C, OC);
    check(p, op, "out", &out, T);

    snprintf(op, sizeof op, "matmul_backward[C=%d,OC=%d%s%s]", C, OC, with_bias ? ",dbias" : "",
             with_dinp ? "" : ",no-dinp");
    buf dout = buf_rand(p, (size_t)N * OC, 0, 1), dinp = buf_rand(p, (size_t)N * C, 5, 1);
    buf dw = buf_randf(p, (size_t)OC * C, 0, 1), dbias = buf_randf(p, (size_t)OC, 0, 1);
    gpt_matmul_backward(p->cs, with_dinp ? dinp.cpu : NULL, dw.cpu, with_bias ? dbias.cpu : NULL,
                        dout.cpu, inp.cpu, w.cpu, N, C, OC, GPT_GRAD_ACCUMULATE);
    gpt_matmul_backward(p->gs, with_dinp ? dinp.d : NULL, dw.d, with_bias ? dbias.d : NULL,
                        dout.d, inp.d, w.d, N, C, OC, GPT_GRAD_ACCUMULATE);
    if (with_dinp) check(p, op, "dinp", &dinp, T);
    check(p, op, "dw", &dw, T);
    if (with_bias) check(p, op, "dbias", &dbias, T);
    /* overwriting dw, dbias that hold garbage (beta 0; the CPU zeroes, then accumulates) */
    snprintf(op, sizeof op, "matmul_backward[C=%d,OC=%d%s,overwrite]", C, OC,
             with_bias ? ",dbias" : "");
    buf dw_o = buf_randf(p, (size_t)OC * C, 5, 1), dbias_o = buf_randf(p, (size_t)OC, 5, 1);
    gpt_matmul_backward(p->cs, NULL, dw_o.cpu, with_bias ? dbias_o.cpu : NULL, dout.cpu, inp.cpu,
                        w.cpu, N, C, OC, GPT_GRAD_OVERWRITE);
    gpt_matmul_backward(p->gs, NULL, dw_o.d, with_bias ? dbias_o.d : NULL, dout.d, inp.d, w.d, N,
                        C, OC, GPT_GRAD_OVERWRITE);
    check(p, op, "dw", &dw_o, T);
    if (with_bias) check(p, op, "dbias", &dbias_o, T);
    buf_free(p, &dw_o);
    buf_free(p, &dbias_o);

    buf *all[] = {&inp, &w, &bias, &out, &dout, &dinp, &dw, &dbias};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) buf_free(p, all[i]);
}

/* The MLP's fused pair: forward (C -> 4C, GELU in the epilogue; pre-activation stored) and
 * backward (4C -> C with dinp carried through gelu'(pre)).  bias_offset 1: an unaligned
 * bias takes the two-pass path. */
static void check_matmul_gelu(pair *p, int T, int bias_offset)
{
    const int N = B_ * T, C = C_, OC = 4 * C_;
    char op[64];
    snprintf(op, sizeof op, "matmul_forward_gelu[C=%d,OC=%d%s]", C, OC, bias_offset ? ",bias+1" : "");
    buf inp = buf_rand(p, (size_t)N * C, 0, 1), w = buf_rand(p, (size_t)OC * C, 0, 0.1);
    buf bias = buf_rand(p, (size_t)OC + 1, 0, 1);
    buf out = buf_rand(p, (size_t)N * OC, 5, 1), pre = buf_rand(p, (size_t)N * OC, 5, 1);
    gpt_matmul_forward_gelu(p->cs, out.cpu, pre.cpu, inp.cpu, w.cpu, bias.cpu + bias_offset, N, C,
                            OC);
    gpt_matmul_forward_gelu(p->gs, out.d, pre.d, inp.d, w.d, dat(&bias, (size_t)bias_offset), N, C,
                            OC);
    check(p, op, "out", &out, T);
    check(p, op, "pre", &pre, T);

    /* backward of the next layer (OC -> C) from the CPU's activations */
    snprintf(op, sizeof op, "matmul_backward_gelu[C=%d,OC=%d]", OC, C);
    buf_push(p, &out);
    buf_push(p, &pre);
    buf w2 = buf_rand(p, (size_t)C * OC, 0, 0.1), dout = buf_rand(p, (size_t)N * C, 0, 1);
    buf dinp = buf_rand(p, (size_t)N * OC, 5, 1);
    buf dw = buf_randf(p, (size_t)C * OC, 0, 1), dbias = buf_randf(p, (size_t)C, 0, 1);
    gpt_matmul_backward_gelu(p->cs, dinp.cpu, dw.cpu, dbias.cpu, dout.cpu, out.cpu, w2.cpu,
                             pre.cpu, N, OC, C, GPT_GRAD_ACCUMULATE);
    gpt_matmul_backward_gelu(p->gs, dinp.d, dw.d, dbias.d, dout.d, out.d, w2.d, pre.d, N, OC, C,
                             GPT_GRAD_ACCUMULATE);
    check(p, op, "dinp", &dinp, T);
    check(p, op, "dw", &dw, T);
    check(p, op, "dbias", &dbias, T);

    buf *all[] = {&inp, &w, &bias, &out, &pre, &w2, &dout, &dinp, &dw, &dbias};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) buf_free(p, all[i]);
}

/* A linear layer C -> C with the residual added (the MLP's output projection shape, 4C -> C):
 * bias_offset 1: an unaligned bias takes the two-op path; with_bias 0: no bias at all. */
static void check_matmul_residual(pair *p, int T, int bias_offset, int with_bias)
{
    const int N = B_ * T, C = 4 * C_, OC = C_;
    char op[80];
    snprintf(op, sizeof op, "matmul_forward_residual[C=%d,OC=%d%s]", C, OC,
             !with_bias ? ",nobias" : bias_offset ? ",bias+1" : "");
    buf inp = buf_rand(p, (size_t)N * C, 0, 1), w = buf_rand(p, (size_t)OC * C, 0, 0.1);
    buf bias = buf_rand(p, (size_t)OC + 1, 0, 1), res = buf_rand(p, (size_t)N * OC, 0, 2);
    buf out = buf_rand(p, (size_t)N * OC, 5, 1);
    gpt_matmul_forward_residual(p->cs, out.cpu, inp.cpu, w.cpu,
                                with_bias ? bias.cpu + bias_offset : NULL, res.cpu, N, C, OC);
    gpt_matmul_forward_residual(p->gs, out.d, inp.d, w.d,
                                with_bias ? dat(&bias, (size_t)bias_offset) : NULL, res.d, N, C,
                                OC);
    check(p, op, "out", &out, T);
    buf *all[] = {&inp, &w, &bias, &res, &out};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) buf_free(p, all[i]);
}

static void check_matmul(pair *p, int T)
{
    check_matmul_gelu(p, T, 0);
    check_matmul_gelu(p, T, 1);
    check_matmul_residual(p, T, 0, 1);
    check_matmul_residual(p, T, 1, 1);
    check_matmul_residual(p, T, 0, 0);
    check_matmul_case(p, T, C_, 3 * C_, 1, 0, 1);  /* qkv */
    check_matmul_case(p, T, C_, 3 * C_, 1, 1, 1);  /* unaligned bias */
    check_matmul_case(p, T, 4 * C_, C_, 1, 0, 1);  /* fcproj */
    check_matmul_case(p, T, C_, VP_, 0, 0, 1);     /* logits: no bias */
    check_matmul_case(p, T, C_, 4 * C_, 1, 0, 0);  /* no dinp */
}

/* One attention shape: forward (out, lse) and backward (dqkv; delta = dout . out per row)
 * from the CPU's out and lse.  The op name carries the head size, which picks the kernel:
 * 32, 64, 128 run on the tensor cores (TF32, bf16), any other on the SIMT path; strict
 * fp32 is SIMT always.  Outputs start as garbage, so an unwritten row shows. */
static void check_attention_shape(pair *p, int T, int C, int NH)
{
    const size_t N = (size_t)B_ * T, rows = (size_t)B_ * NH * T;
    char fwd[64], bwd[64];
    snprintf(fwd, sizeof fwd, "attention_forward[hs=%d]", C / NH);
    snprintf(bwd, sizeof bwd, "attention_backward[hs=%d]", C / NH);
    buf qkv = buf_rand(p, N * 3 * C, 0, 1);
    buf out = buf_rand(p, N * C, 5, 1), lse = buf_randf(p, rows, 5, 1);
    gpt_attention_forward(p->cs, out.cpu, lse.cpu, qkv.cpu, B_, T, C, NH);
    gpt_attention_forward(p->gs, out.d, lse.d, qkv.d, B_, T, C, NH);
    check(p, fwd, "out", &out, T);
    check(p, fwd, "lse", &lse, T);

    buf_push(p, &out); /* the backward from the CPU's forward */
    buf_push(p, &lse);
    buf dout = buf_rand(p, N * C, 0, 1), dqkv = buf_rand(p, N * 3 * C, 5, 1);
    buf delta = buf_randf(p, rows, 5, 1);
    gpt_attention_backward(p->cs, dqkv.cpu, delta.cpu, dout.cpu, qkv.cpu, out.cpu, lse.cpu, B_,
                           T, C, NH);
    gpt_attention_backward(p->gs, dqkv.d, delta.d, dout.d, qkv.d, out.d, lse.d, B_, T, C, NH);
    check(p, bwd, "dqkv", &dqkv, T);
    check(p, bwd, "delta", &delta, T);

    buf *all[] = {&qkv, &out, &lse, &dout, &dqkv, &delta};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) buf_free(p, all[i]);
}

static void check_attention(pair *p, int T)
{
    check_attention_shape(p, T, C_, NH_);     /* hs 32 */
    check_attention_shape(p, T, C_, 2);       /* hs 64 */
    check_attention_shape(p, T, 2 * C_, 2);   /* hs 128, the real model's */
    check_attention_shape(p, T + 37, 2 * C_, 2); /* T not a multiple of any tile */
    check_attention_shape(p, 4 * T + 5, 2 * C_, 2); /* several key / query tiles in flight */
    check_attention_shape(p, T - 5, 96, 4);   /* hs 24: no tensor-core instantiation */
}

/* ---- the attention's two tensor-core implementations ------------------------------------ */

/* n random bf16 values (normal, std 1) */
static uint16_t *bf16_random(uint64_t seed, size_t n)
{
    uint16_t *h = malloc(n * sizeof *h);
    assert_non_null(h);
    rng r = rng_for(seed, 23, 29);
    for (size_t i = 0; i < n; i++) h[i] = gpt_f32_to_bf16((float)rng_normal(&r));
    return h;
}

static float *rand_normal_floats(uint64_t seed, size_t n)
{
    float *h = malloc(n * sizeof *h);
    assert_non_null(h);
    rng r = rng_for(seed, 23, 29);
    for (size_t i = 0; i < n; i++) h[i] = (float)rng_normal(&r);
    return h;
}

/* bytes of device memory set to 0xff (NaN as bf16 and as fp32) */
static void dev_poison(gpt_stream *s, void *d, size_t bytes)
{
    unsigned char *h = malloc(bytes);
    assert_non_null(h);
    memset(h, 0xff, bytes);
    assert_int_equal(gpt_memcpy_h2d(s, d, h, bytes), 0);
    assert_int_equal(gpt_stream_sync(s), 0); /* before h goes */
    free(h);
}

/* One backend's attention, forward then backward on its own forward's out and lse; every
 * output starts as NaN bits (0xff), so an element left unwritten shows. */
typedef struct attn_run {
    void *qkv, *dout, *out, *dqkv;
    float *lse, *delta;
} attn_run;

/* host qkv and dout in the backend's activation type (es bytes an element) */
static void attn_run_once(gpt_backend *be, gpt_stream *s, attn_run *r, const void *qkv,
                          const void *dout, int T, int C, int NH)
{
    const size_t N = (size_t)B_ * T, rows = (size_t)B_ * NH * T, es = gpt_dtype_size(be->dtype);
    assert_int_equal(be->ops->dev_alloc(be, &r->qkv, N * 3 * C * es), 0);
    assert_int_equal(be->ops->dev_alloc(be, &r->dout, N * C * es), 0);
    assert_int_equal(be->ops->dev_alloc(be, &r->out, N * C * es), 0);
    assert_int_equal(be->ops->dev_alloc(be, &r->dqkv, N * 3 * C * es), 0);
    assert_int_equal(be->ops->dev_alloc(be, (void **)&r->lse, rows * sizeof(float)), 0);
    assert_int_equal(be->ops->dev_alloc(be, (void **)&r->delta, rows * sizeof(float)), 0);
    assert_int_equal(gpt_memcpy_h2d(s, r->qkv, qkv, N * 3 * C * es), 0);
    assert_int_equal(gpt_memcpy_h2d(s, r->dout, dout, N * C * es), 0);
    dev_poison(s, r->out, N * C * es);
    dev_poison(s, r->dqkv, N * 3 * C * es);
    dev_poison(s, r->lse, rows * sizeof(float));
    dev_poison(s, r->delta, rows * sizeof(float));
    gpt_attention_forward(s, r->out, r->lse, r->qkv, B_, T, C, NH);
    gpt_attention_backward(s, r->dqkv, r->delta, r->dout, r->qkv, r->out, r->lse, B_, T, C, NH);
    assert_int_equal(gpt_stream_sync(s), 0);
}

static void attn_run_free(gpt_backend *be, attn_run *r)
{
    void *all[] = {r->qkv, r->dout, r->out, r->dqkv, r->lse, r->delta};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) be->ops->dev_free(be, all[i]);
}

/* bytes of a and b (device) that differ, as elements of esize bytes */
static size_t elements_differing(gpt_stream *sa, const void *a, gpt_stream *sb, const void *b,
                                 size_t n, size_t esize)
{
    unsigned char *ha = malloc(n * esize), *hb = malloc(n * esize);
    assert_non_null(ha);
    assert_non_null(hb);
    assert_int_equal(gpt_memcpy_d2h(sa, ha, a, n * esize), 0);
    assert_int_equal(gpt_memcpy_d2h(sb, hb, b, n * esize), 0);
    assert_int_equal(gpt_stream_sync(sa), 0);
    assert_int_equal(gpt_stream_sync(sb), 0);
    size_t differ = 0;
    for (size_t i = 0; i < n; i++) differ += memcmp(ha + i * esize, hb + i * esize, esize) != 0;
    free(ha);
    free(hb);
    return differ;
}

/* The wgmma kernels (bf16, head size 128, a device running the sm_90a build: the default
 * backend's description says "attention on wgmma") against the mma.sync kernels
 * (gpt_cuda_kernels.attention_mma) on the same inputs: out, lse, dqkv and delta equal bit for bit
 * (cuda_attention_wgmma.cuh says why they must be), on shapes of one tile, of partial tiles
 * and of many.  Where the device has no wgmma both backends run mma.sync: the line says so. */
/* The wgmma attention (bf16: forward and backward; TF32: the warp-specialized forward) against
 * the mma.sync kernels (gpt_cuda_kernels.attention_mma) on four shapes: the same bits in every output.
 * On a device without wgmma both run mma.sync (and the check still runs). */
static void wgmma_vs_mma(gpt_dtype dtype, int allow_tf32, const char *wgmma_desc)
{
    gpt_backend *be[2];
    gpt_stream *st[2];
    const gpt_cuda_kernels mma = {.attention_mma = 1};
    assert_int_equal(gpt_cuda_backend_create_dtype(&be[0], 0, allow_tf32, dtype), 0);
    assert_int_equal(gpt_cuda_backend_create_kernels(&be[1], 0, allow_tf32, dtype, &mma), 0);
    char desc[2][400];
    for (int k = 0; k < 2; k++) {
        assert_int_equal(be[k]->ops->stream_create(be[k], &st[k]), 0);
        be[k]->ops->describe(be[k], desc[k], sizeof desc[k]);
    }
    const int wgmma = strstr(desc[0], wgmma_desc) != NULL;
    assert_null(strstr(desc[1], "wgmma")); /* attention_mma is obeyed */
    const int bf16 = dtype == GPT_BF16;
    const size_t es = gpt_dtype_size(dtype);
    const int C = 2 * C_, NH = 2; /* head size 128 */
    static const int Ts[] = {64, 101, 261, 1029};
    for (size_t i = 0; i < sizeof Ts / sizeof *Ts; i++) {
        const int T = Ts[i];
        const size_t N = (size_t)B_ * T, rows = (size_t)B_ * NH * T;
        void *qkv, *dout;
        if (bf16) {
            qkv = bf16_random(4000 + i, N * 3 * C);
            dout = bf16_random(5000 + i, N * C);
        } else {
            qkv = rand_normal_floats(4000 + i, N * 3 * C);
            dout = rand_normal_floats(5000 + i, N * C);
        }
        attn_run r[2];
        for (int k = 0; k < 2; k++) attn_run_once(be[k], st[k], &r[k], qkv, dout, T, C, NH);
        const size_t d_out = elements_differing(st[0], r[0].out, st[1], r[1].out, N * C, es);
        const size_t d_lse = elements_differing(st[0], r[0].lse, st[1], r[1].lse, rows, 4);
        const size_t d_dqkv = elements_differing(st[0], r[0].dqkv, st[1], r[1].dqkv, N * 3 * C, es);
        const size_t d_delta = elements_differing(st[0], r[0].delta, st[1], r[1].delta, rows, 4);
        printf("attention %s vs mma.sync %s hs=128 T=%d: differing out %zu, lse %zu, dqkv %zu, "
               "delta %zu\n", wgmma ? "wgmma" : "mma.sync (no wgmma on this device)",
               bf16 ? "bf16" : "tf32", T, d_out, d_lse, d_dqkv, d_delta);
        assert_int_equal(d_out, 0);
        assert_int_equal(d_lse, 0);
        assert_int_equal(d_dqkv, 0);
        assert_int_equal(d_delta, 0);
        for (int k = 0; k < 2; k++) attn_run_free(be[k], &r[k]);
        free(qkv);
        free(dout);
    }
    for (int k = 0; k < 2; k++) {
        be[k]->ops->stream_destroy(st[k]);
        gpt_cuda_backend_destroy(be[k]);
    }
}

static void test_attention_wgmma_vs_mma(void **state)
{
    (void)state;
    if (!have_gpu()) skip();
    wgmma_vs_mma(GPT_BF16, 0, "attention on wgmma");
    wgmma_vs_mma(GPT_F32, 1, "TF32 attention on wgmma");
}

/* The bias gradient's column sums with 16-byte loads (what a 16-byte aligned dout of a width
 * that 8 bf16 / 4 fp32 divide gets) against one element a thread (the same dout one element
 * off its alignment): the same bits, accumulating and overwriting, on widths of whole 32-lane
 * groups and not (OC 8192, 2048, 200 bf16 / 100 fp32: a partial last group) and row counts
 * short of a chunk's multiple.  (check_matmul_case compares dbias with the CPU.) */
static void test_column_sum_vec(void **state)
{
    (void)state;
    if (!have_gpu()) skip();
    static const gpt_dtype dtypes[] = {GPT_BF16, GPT_F32};
    for (size_t t = 0; t < 2; t++) {
        const int bf16 = dtypes[t] == GPT_BF16;
        const size_t es = gpt_dtype_size(dtypes[t]);
        gpt_backend *be;
        gpt_stream *st;
        assert_int_equal(gpt_cuda_backend_create_dtype(&be, 0, 0, dtypes[t]), 0);
        assert_int_equal(be->ops->stream_create(be, &st), 0);
        static const int shapes[][2] = {{4096, 8192}, {1000, 2048}, {77, 200}, {333, 100}};
        for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
            const int N = shapes[i][0], OC = shapes[i][1];
            const size_t n = (size_t)N * OC;
            void *h_dout = bf16 ? (void *)bf16_random(8000 + i, n) : (void *)rand_normal_floats(8000 + i, n);
            float *h_db = rand_normal_floats(8100 + i, OC);
            for (int gw = 0; gw < 2; gw++) {
                /* [0]: dout at the allocation's start (16-byte aligned: the vector kernel);
                 * [1]: the same values one element further on (the scalar kernel) */
                void *dout[2];
                float *db[2];
                for (int k = 0; k < 2; k++) {
                    assert_int_equal(be->ops->dev_alloc(be, &dout[k], (n + 1) * es), 0);
                    assert_int_equal(be->ops->dev_alloc(be, (void **)&db[k], OC * sizeof(float)), 0);
                    void *at = (char *)dout[k] + (size_t)k * es;
                    assert_int_equal(gpt_memcpy_h2d(st, at, h_dout, n * es), 0);
                    assert_int_equal(gpt_memcpy_h2d(st, db[k], h_db, OC * sizeof(float)), 0);
                    gpt_matmul_backward(st, NULL, NULL, db[k], at, NULL, NULL, N, 0, OC,
                                        gw ? GPT_GRAD_OVERWRITE : GPT_GRAD_ACCUMULATE);
                    assert_int_equal(gpt_stream_sync(st), 0);
                }
                const size_t differ = elements_differing(st, db[0], st, db[1], OC, 4);
                printf("column sums %s N=%d OC=%d%s: 16-byte loads vs one element a thread differing %zu of %d\n",
                       bf16 ? "bf16" : "fp32", N, OC, gw ? ", overwrite" : "", differ, OC);
                assert_int_equal(differ, 0);
                for (int k = 0; k < 2; k++) {
                    be->ops->dev_free(be, dout[k]);
                    be->ops->dev_free(be, db[k]);
                }
            }
            free(h_dout);
            free(h_db);
        }
        be->ops->stream_destroy(st);
        gpt_cuda_backend_destroy(be);
    }
}

/* TF32 weight gradients (cuda_matmul.cu: the input transposed first, in column chunks of at
 * most 64 MiB) against a double-precision reference, and the one product on the operands as
 * they are (gpt_cuda_kernels.tf32_weight_grad_direct) against the same: every element within TF32's bound
 * (2^-9 of the sum of |dout| |inp| over its products), accumulating onto a gradient and
 * overwriting it; shapes of one chunk, of two with a partial last (C = 4160 at N = 4096: 4096
 * columns and 64), and an input one element off its alignment. */
static void test_tf32_weight_gradient(void **state)
{
    (void)state;
    if (!have_gpu()) skip();
    static const int shapes[][3] = {{4096, 4160, 96}, {300, 200, 130}, {129, 64, 40}};
    for (int direct = 0; direct < 2; direct++) {
        const gpt_cuda_kernels kernels = {.tf32_weight_grad_direct = direct};
        gpt_backend *be;
        gpt_stream *st;
        assert_int_equal(gpt_cuda_backend_create_kernels(&be, 0, 1, GPT_F32, &kernels), 0);
        assert_int_equal(be->ops->stream_create(be, &st), 0);
        for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
            const int N = shapes[i][0], C = shapes[i][1], OC = shapes[i][2], off = i == 2;
            float *h_inp = rand_normal_floats(9000 + i, (size_t)N * C), *h_dout = rand_normal_floats(9100 + i, (size_t)N * OC);
            float *h_dw0 = rand_normal_floats(9200 + i, (size_t)OC * C), *h_dw = malloc((size_t)OC * C * sizeof(float));
            assert_non_null(h_dw);
            void *inp, *dout, *dw;
            assert_int_equal(be->ops->dev_alloc(be, &inp, ((size_t)N * C + 1) * sizeof(float)), 0);
            assert_int_equal(be->ops->dev_alloc(be, &dout, (size_t)N * OC * sizeof(float)), 0);
            assert_int_equal(be->ops->dev_alloc(be, &dw, (size_t)OC * C * sizeof(float)), 0);
            /* the reference: sums and magnitudes in double, row by row (cache-friendly) */
            double *ref = calloc((size_t)OC * C, sizeof(double)), *mag = calloc((size_t)OC * C, sizeof(double));
            assert_non_null(ref);
            assert_non_null(mag);
            for (int n = 0; n < N; n++)
                for (int o = 0; o < OC; o++) {
                    const double d = h_dout[(size_t)n * OC + o];
                    const float *x = h_inp + (size_t)n * C;
                    double *r = ref + (size_t)o * C, *m = mag + (size_t)o * C;
                    for (int c = 0; c < C; c++) r[c] += d * x[c], m[c] += fabs(d * x[c]);
                }
            float *inp_at = (float *)inp + off;
            assert_int_equal(gpt_memcpy_h2d(st, inp_at, h_inp, (size_t)N * C * sizeof(float)), 0);
            assert_int_equal(gpt_memcpy_h2d(st, dout, h_dout, (size_t)N * OC * sizeof(float)), 0);
            for (int gw = 0; gw < 2; gw++) {
                assert_int_equal(gpt_memcpy_h2d(st, dw, h_dw0, (size_t)OC * C * sizeof(float)), 0);
                gpt_matmul_backward(st, NULL, dw, NULL, dout, inp_at, NULL, N, C, OC,
                                    gw ? GPT_GRAD_OVERWRITE : GPT_GRAD_ACCUMULATE);
                assert_int_equal(gpt_memcpy_d2h(st, h_dw, dw, (size_t)OC * C * sizeof(float)), 0);
                assert_int_equal(gpt_stream_sync(st), 0);
                size_t bad = 0;
                double worst = 0;
                for (size_t e = 0; e < (size_t)OC * C; e++) {
                    const double want = ref[e] + (gw ? 0.0 : h_dw0[e]);
                    const double err = fabs(h_dw[e] - want), tol = mag[e] / 512.0 + 1e-5;
                    if (err > tol) bad++;
                    if (err / tol > worst) worst = err / tol;
                }
                printf("tf32 weight gradient (%s) N=%d C=%d OC=%d%s%s: %zu of %d outside TF32's bound (worst at "
                       "%.3f of it)\n", direct ? "direct" : "transposed", N, C, OC, gw ? ", overwrite" : "",
                       off ? ", input unaligned" : "", bad, OC * C, worst);
                assert_int_equal(bad, 0);
            }
            be->ops->dev_free(be, inp);
            be->ops->dev_free(be, dout);
            be->ops->dev_free(be, dw);
            free(h_inp);
            free(h_dout);
            free(h_dw0);
            free(h_dw);
            free(ref);
            free(mag);
        }
        be->ops->stream_destroy(st);
        gpt_cuda_backend_destroy(be);
    }
}

static void check_elementwise(pair *p, int T)
{
    const size_t n = (size_t)B_ * T * 4 * C_ + 3; /* odd: no vector-width assumptions */
    buf inp = buf_rand(p, n, 0, 2), out = buf_rand(p, n, 5, 1);
    gpt_gelu_forward(p->cs, out.cpu, inp.cpu, n);
    gpt_gelu_forward(p->gs, out.d, inp.d, n);
    check(p, "gelu_forward", "out", &out, T);

    buf dout = buf_rand(p, n, 0, 1), dinp = buf_rand(p, n, 5, 1);
    gpt_gelu_backward(p->cs, dinp.cpu, inp.cpu, dout.cpu, n);
    gpt_gelu_backward(p->gs, dinp.d, inp.d, dout.d, n);
    check(p, "gelu_backward", "dinp", &dinp, T);
    /* in place, as the model calls it */
    gpt_gelu_backward(p->cs, dout.cpu, inp.cpu, dout.cpu, n);
    gpt_gelu_backward(p->gs, dout.d, inp.d, dout.d, n);
    check(p, "gelu_backward[in-place]", "dinp", &dout, T);

    buf a = buf_rand(p, n, 0, 1), b = buf_rand(p, n, 0, 1);
    gpt_residual_forward(p->cs, out.cpu, a.cpu, b.cpu, n);
    gpt_residual_forward(p->gs, out.d, a.d, b.d, n);
    check(p, "residual_forward", "out", &out, T);
    buf d = buf_rand(p, n, 0, 1);
    gpt_residual_backward(p->cs, a.cpu, b.cpu, d.cpu, n);
    gpt_residual_backward(p->gs, a.d, b.d, d.d, n);
    check(p, "residual_backward", "da", &a, T);
    check(p, "residual_backward", "db", &b, T);

    buf *all[] = {&inp, &out, &dout, &dinp, &a, &b, &d};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) buf_free(p, all[i]);
}

/* One pass: the losses, and the logits overwritten by their gradient, for N rows of Vp. */
static void check_crossentropy_case(pair *p, int N, int V, int Vp, int T)
{
    int32_t *dtgt;
    int32_t *tgt = ids_new(p, &dtgt, (size_t)N, V);
    buf logits = buf_rand(p, (size_t)N * Vp, 0, 3), losses = buf_randf(p, (size_t)N, 5, 1);
    const float dloss = 1.0f / (float)N;
    gpt_crossentropy_forward_backward(p->cs, losses.cpu, logits.cpu, tgt, dloss, N, V, Vp);
    gpt_crossentropy_forward_backward(p->gs, losses.d, logits.d, dtgt, dloss, N, V, Vp);
    check(p, "crossentropy", "losses", &losses, T);
    check(p, "crossentropy", "dlogits", &logits, T);
    buf_free(p, &logits);
    buf_free(p, &losses);
    p->gpu->ops->dev_free(p->gpu, dtgt);
    free(tgt);
}

/* The vocabulary-parallel pair on two ranks' halves of Vp (the second with V - Vp/2 real
 * columns): each half's stats, then the second half's losses and gradient from both. */
static void check_crossentropy_parallel(pair *p, int N, int T)
{
    const int half = VP_ / 2;
    int32_t *dtgt;
    int32_t *tgt = ids_new(p, &dtgt, (size_t)N, V_);
    buf first = buf_rand(p, (size_t)N * half, 0, 3), second = buf_rand(p, (size_t)N * half, 0, 3);
    buf stats = buf_randf(p, (size_t)2 * N * 3, 5, 1), losses = buf_randf(p, (size_t)N, 5, 1);
    gpt_crossentropy_stats(p->cs, stats.cpu, first.cpu, tgt, N, half, half, 0);
    gpt_crossentropy_stats(p->gs, stats.d, first.d, dtgt, N, half, half, 0);
    gpt_crossentropy_stats(p->cs, stats.cpu + (size_t)N * 3, second.cpu, tgt, N, V_ - half, half, half);
    gpt_crossentropy_stats(p->gs, (float *)stats.d + (size_t)N * 3, second.d, dtgt, N, V_ - half, half, half);
    check(p, "crossentropy_stats", "stats", &stats, T);
    buf_push(p, &stats); /* (the same stats on both sides from here) */
    gpt_crossentropy_parallel(p->cs, losses.cpu, second.cpu, tgt, stats.cpu, 2, 1.0f / N, N, V_ - half, half, half);
    gpt_crossentropy_parallel(p->gs, losses.d, second.d, dtgt, stats.d, 2, 1.0f / N, N, V_ - half, half, half);
    check(p, "crossentropy_parallel", "losses", &losses, T);
    check(p, "crossentropy_parallel", "dlogits", &second, T);
    buf *all[] = {&first, &second, &stats, &losses};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) buf_free(p, all[i]);
    p->gpu->ops->dev_free(p->gpu, dtgt);
    free(tgt);
}

static void check_crossentropy(pair *p, int T)
{
    check_crossentropy_parallel(p, B_ * T, T);
    /* the model's case: rows staged in shared memory */
    check_crossentropy_case(p, B_ * T, V_, VP_, T);
    /* rows too long for shared memory (fp32 512 KB, bf16 256 KB): read twice from DRAM */
    check_crossentropy_case(p, 3, 130000, 131072, T);
    /* rows that are not whole 16-byte vectors: element by element */
    check_crossentropy_case(p, B_ * T, 999, 1001, T);
}

/* Raw bytes of a GPU range (malloc'd). */
static void *fetch_bytes(pair *p, const void *d, size_t bytes)
{
    void *h = malloc(bytes);
    assert_non_null(h);
    assert_int_equal(gpt_memcpy_d2h(p->gs, h, d, bytes), 0);
    assert_int_equal(gpt_stream_sync(p->gs), 0);
    return h;
}

/* AdamW that refreshes the working copy in its pass equals, bit for bit on the GPU, the
 * plain update followed by params_to_act, on elements [off, n) of the given state. */
static void check_adamw_act(pair *p, const buf *param, const buf *grad, const buf *m,
                            const buf *v, size_t off)
{
    const size_t n = param->n - off, f = sizeof(float);
    const size_t esize = p->bf16 ? 2 : 4;
    void *state[2][3], *act[2];
    for (int k = 0; k < 2; k++) {
        const buf *src[3] = {param, m, v};
        for (int j = 0; j < 3; j++) {
            assert_int_equal(p->gpu->ops->dev_alloc(p->gpu, &state[k][j], param->n * f), 0);
            assert_int_equal(gpt_memcpy_d2d(p->gs, state[k][j], src[j]->d, param->n * f), 0);
        }
        assert_int_equal(p->gpu->ops->dev_alloc(p->gpu, &act[k], param->n * esize), 0);
    }
    float *g = (float *)grad->d + off;
    float *p0 = (float *)state[0][0] + off, *m0 = (float *)state[0][1] + off,
          *v0 = (float *)state[0][2] + off;
    float *p1 = (float *)state[1][0] + off, *m1 = (float *)state[1][1] + off,
          *v1 = (float *)state[1][2] + off;
    void *a0 = (char *)act[0] + off * esize, *a1 = (char *)act[1] + off * esize;
    gpt_adamw_update(p->gs, p0, g, m0, v0, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 4, 0.9f);
    gpt_params_to_act(p->gs, a0, p0, n);
    gpt_adamw_update_act(p->gs, p1, a1, g, m1, v1, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 4,
                         0.9f);
    void *want[4] = {fetch_bytes(p, p0, n * f), fetch_bytes(p, m0, n * f),
                     fetch_bytes(p, v0, n * f), fetch_bytes(p, a0, n * esize)};
    void *got[4] = {fetch_bytes(p, p1, n * f), fetch_bytes(p, m1, n * f),
                    fetch_bytes(p, v1, n * f), fetch_bytes(p, a1, n * esize)};
    const size_t bytes[4] = {n * f, n * f, n * f, n * esize};
    for (int i = 0; i < 4; i++) {
        assert_memory_equal(want[i], got[i], bytes[i]);
        free(want[i]);
        free(got[i]);
    }
    printf("bitcheck adamw_update_act math=%s offset=%zu: params, m, v, working copy identical\n",
           p->math, off);
    for (int k = 0; k < 2; k++) {
        for (int j = 0; j < 3; j++) p->gpu->ops->dev_free(p->gpu, state[k][j]);
        p->gpu->ops->dev_free(p->gpu, act[k]);
    }
}

static void check_optimizer(pair *p, int T)
{
    const size_t n = (size_t)B_ * T * 811 + 5;
    buf param = buf_randf(p, n, 0, 0.1), grad = buf_randf(p, n, 0, 0.01);
    buf m = buf_randf(p, n, 0, 0.001), v = buf_randf(p, n, 0, 1e-5);
    for (size_t i = 0; i < n; i++) v.cpu[i] = fabsf(v.cpu[i]); /* a second moment */
    buf_push(p, &v);
    gpt_adamw_update(p->cs, param.cpu, grad.cpu, m.cpu, v.cpu, n, 1e-3f, 0.9f, 0.999f, 1e-8f,
                     0.01f, 3, 0.7f);
    gpt_adamw_update(p->gs, param.d, grad.d, m.d, v.d, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 3,
                     0.7f);
    check(p, "adamw_update", "param", &param, T);
    check(p, "adamw_update", "m", &m, T);
    check(p, "adamw_update", "v", &v, T);

    buf out = buf_randf(p, 1, 5, 1);
    gpt_norm_squared(p->cs, out.cpu, grad.cpu, n);
    gpt_norm_squared(p->gs, out.d, grad.d, n);
    check(p, "norm_squared", "out", &out, T);
    /* deterministic: the same input gives the same bits */
    float first = 0, again = 0;
    assert_int_equal(gpt_memcpy_d2h(p->gs, &first, out.d, sizeof(float)), 0);
    gpt_norm_squared(p->gs, out.d, grad.d, n);
    assert_int_equal(gpt_memcpy_d2h(p->gs, &again, out.d, sizeof(float)), 0);
    assert_int_equal(gpt_stream_sync(p->gs), 0);
    assert_true(memcmp(&first, &again, sizeof(float)) == 0);

    /* the working copy of the updated params, in the activation type */
    buf work = buf_rand(p, n, 5, 1);
    gpt_params_to_act(p->cs, work.cpu, param.cpu, n);
    gpt_params_to_act(p->gs, work.d, param.d, n);
    assert_int_equal(gpt_stream_sync(p->cs), 0); /* before the host overwrites work.cpu */
    if (work.esize == 2) /* round to nearest even, as gpt_f32_to_bf16 does: exactly */
        for (size_t i = 0; i < n; i++) work.cpu[i] = gpt_bf16_to_f32(gpt_f32_to_bf16(param.cpu[i]));
    check(p, "params_to_act", "dst", &work, T);
    /* and back (--grad-reduce-dtype bf16's widening): exact on both backends */
    buf wide = buf_randf(p, n, 5, 1);
    gpt_act_to_f32(p->cs, wide.cpu, work.cpu, n);
    gpt_act_to_f32(p->gs, wide.d, work.d, n);
    check_exact(p, "act_to_f32", "dst", &wide, T);
    buf_free(p, &wide);
    check_adamw_act(p, &param, &grad, &m, &v, 0);
    check_adamw_act(p, &param, &grad, &m, &v, 1); /* odd offsets: the element-wise path */

    buf *all[] = {&param, &grad, &m, &v, &out, &work};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) buf_free(p, all[i]);
}

static void run_all_ops(int math)
{
    if (!have_gpu()) skip();
    pair p;
    /* both GELU epilogues where the backend allows them (TF32, bf16): the fused paths are
     * the ones checked; strict fp32 keeps the backward's GELU a kernel of its own */
    const gpt_cuda_kernels both = {.gelu_epilogue = GPT_GELU_EPILOGUE_BOTH};
    pair_open_kernels(&p, math, &both);
    char desc[256];
    p.gpu->ops->describe(p.gpu, desc, sizeof desc);
    printf("device: %s, math=%s\n", desc, p.math);
    const int Ts[] = {64, 128};
    for (size_t i = 0; i < sizeof Ts / sizeof *Ts; i++) {
        check_encoder(&p, Ts[i]);
        check_layernorm(&p, Ts[i]);
        check_matmul(&p, Ts[i]);
        check_attention(&p, Ts[i]);
        check_elementwise(&p, Ts[i]);
        check_crossentropy(&p, Ts[i]);
        check_optimizer(&p, Ts[i]);
    }
    assert_int_equal(gpt_stream_sync(p.gs), 0);
    pair_close(&p);
}

static void test_ops_fp32(void **state)
{
    (void)state;
    run_all_ops(MATH_FP32);
}

static void test_ops_tf32(void **state)
{
    (void)state;
    run_all_ops(MATH_TF32);
}

static void test_ops_bf16(void **state)
{
    (void)state;
    run_all_ops(MATH_BF16);
}

/* ---- the engine ------------------------------------------------------------------------ */

/* The small model of the engine tests: h128, 4 heads, s64, b2, vocab 1000, checkpointing,
 * lr 1e-3 decaying over 200 iterations, strict fp32 math. */
static engine_config small_engine_config(int layers, uint64_t seed, device_kind device)
{
    engine_config cfg = {0};
    cfg.shape = (gpt_shape){.layers = layers, .hidden = 128, .heads = 4, .seq = 64, .batch = 2,
                            .vocab = 1000};
    cfg.shape.vocab_padded = gpt_pad_vocab(cfg.shape.vocab);
    cfg.recompute = GPT_RECOMPUTE_FULL;
    cfg.optim = gpt_optim_default();
    cfg.optim.lr = 1e-3;
    cfg.optim.decay_iters = 200;
    cfg.seed = seed;
    cfg.tf32 = 0;
    cfg.device = device;
    return cfg;
}

/* megatron-lm for `iters` iterations on the CPU (fp32) and on the GPU (gpu_cfg, the same
 * model and seed), step by step: the largest relative difference of the losses and of the
 * grad norms, and the GPU's first and last loss.  Every GPU step must be finite and taken. */
typedef struct trajectory_diff {
    double max_rel, max_norm_rel, first, last;
} trajectory_diff;

static trajectory_diff megatron_cpu_vs_gpu(const engine_config *gpu_cfg, int iters,
                                           const char *label)
{
    engine_config cpu_cfg = *gpu_cfg;
    cpu_cfg.device = DEVICE_CPU;
    cpu_cfg.bf16 = 0;
    engine_harness cpu, gpu;
    assert_int_equal(harness_open(&cpu, &engine_megatron_lm, &cpu_cfg, SIZE_MAX), 0);
    assert_int_equal(harness_open(&gpu, &engine_megatron_lm, gpu_cfg, SIZE_MAX), 0);
    trajectory_diff d = {0};
    for (int it = 1; it <= iters; it++) {
        step_result a, b;
        harness_step(&cpu, it, &a);
        harness_step(&gpu, it, &b);
        const double rel = fabs(b.loss - a.loss) / fabs(a.loss);
        const double nrel = fabs(b.grad_norm - a.grad_norm) / fabs(a.grad_norm);
        if (rel > d.max_rel) d.max_rel = rel;
        if (nrel > d.max_norm_rel) d.max_norm_rel = nrel;
        if (it == 1) d.first = b.loss;
        d.last = b.loss;
        printf("engine %s it %2d  loss cpu %.7f cuda %.7f rel %.2e  grad_norm cpu %.6f cuda "
               "%.6f\n",
               label, it, a.loss, b.loss, rel, a.grad_norm, b.grad_norm);
        assert_true(isfinite(b.loss) && !b.skipped);
    }
    harness_close(&gpu);
    harness_close(&cpu);
    return d;
}

static void test_engine_cpu_vs_cuda(void **state)
{
    (void)state;
    if (!have_gpu()) skip();
    const engine_config cfg = small_engine_config(2, 4321, DEVICE_CUDA);
    const int iters = 20;
    const trajectory_diff d = megatron_cpu_vs_gpu(&cfg, iters, "fp32");
    printf("cuda_vs_cpu engine megatron-lm losses math=fp32 iterations=%d max_rel_err=%.3e "
           "(grad norm max_rel_err=%.3e)\n",
           iters, d.max_rel, d.max_norm_rel);
    assert_true(d.max_rel <= 1e-5);
}

/*
 * The same 20 iterations with --dtype bf16 on the GPU against the CPU's fp32 losses.
 * Bound 1e-2 relative: bf16 keeps 8 significant bits (unit roundoff 2^-9 = 2e-3), and
 * each of the ~30 ops on the path to the loss rounds its output once; the loss is a mean
 * over N = 128 tokens whose rounding errors are independent, so it lands near the unit
 * roundoff (~1e-3), while 1e-2 (5 bf16 ulps) still fails a real bug (a wrong operand or a
 * missed accumulation moves the loss by far more, and the losses fall by ~5e-2 per
 * iteration here, so a broken update shows too).  The master weights and Adam are fp32 on
 * both sides, so the error does not compound through the optimizer beyond the gradients'.
 */
static void test_engine_bf16_vs_cpu(void **state)
{
    (void)state;
    if (!have_gpu()) skip();
    engine_config cfg = small_engine_config(2, 4321, DEVICE_CUDA);
    cfg.bf16 = 1;
    const int iters = 20;
    const trajectory_diff d = megatron_cpu_vs_gpu(&cfg, iters, "bf16");
    printf("cuda_vs_cpu engine megatron-lm losses math=bf16 iterations=%d max_rel_err=%.3e "
           "(grad norm max_rel_err=%.3e; loss %.4f -> %.4f)\n",
           iters, d.max_rel, d.max_norm_rel, d.first, d.last);
    assert_true(d.max_rel <= 1e-2);
    assert_true(d.last < d.first); /* it trains */
}

/* One run on one backend: its per-iteration losses and final parameters. */
typedef struct run_record {
    double *loss; /* iters */
    float *params; /* gpt_param_count */
} run_record;

static run_record record_new(const engine_config *cfg, int iters)
{
    run_record t = {malloc((size_t)iters * sizeof(double)),
                    malloc((size_t)gpt_param_count(&cfg->shape) * sizeof(float))};
    assert_non_null(t.loss);
    assert_non_null(t.params);
    return t;
}

static void record_free(run_record *t)
{
    free(t->loss);
    free(t->params);
}

/* Runs eng for iters iterations into t, the backend making the kernel choices kernels says
 * (NULL: the defaults). */
static void run_trajectory_kernels(const engine_vtbl *eng, const engine_config *cfg, size_t gpu_limit,
                                   int iters, run_record *t, const gpt_cuda_kernels *kernels)
{
    engine_harness h;
    assert_int_equal(harness_open_kernels(&h, eng, cfg, gpu_limit, SIZE_MAX, NULL, NULL, kernels), 0);
    for (int it = 1; it <= iters; it++) {
        step_result r = {0};
        harness_step(&h, it, &r);
        t->loss[it - 1] = r.loss;
    }
    assert_int_equal(eng->read_params(h.state, t->params), 0);
    harness_close(&h);
}

/* Runs eng for iters iterations into t (the default kernels). */
static void run_trajectory(const engine_vtbl *eng, const engine_config *cfg, size_t gpu_limit,
                           int iters, run_record *t)
{
    run_trajectory_kernels(eng, cfg, gpu_limit, iters, t, NULL);
}

/* Iterations whose losses differ bitwise, and parameters that do. */
static void record_compare(const run_record *a, const run_record *b, int iters, size_t P,
                               int *loss_differ, size_t *params_differ)
{
    *loss_differ = 0;
    *params_differ = 0;
    for (int i = 0; i < iters; i++)
        if (memcmp(&a->loss[i], &b->loss[i], sizeof(double)) != 0) (*loss_differ)++;
    for (size_t i = 0; i < P; i++)
        if (memcmp(&a->params[i], &b->params[i], sizeof(float)) != 0) (*params_differ)++;
}

/* One engine on the GPU (real async streams and events) against megatron-lm: losses within
 * 1e-5 of the CPU reference's, and losses and final parameters equal to megatron-lm's on
 * the GPU bit for bit (the CPU backend says these engines compute exactly what megatron-lm
 * does, and every GPU kernel is deterministic). */
static void check_engine_on_gpu(const engine_vtbl *eng, const engine_config *g, size_t gpu_limit,
                                const char *label, const double *cpu_loss,
                                const run_record *gpu_ref, int iters)
{
    const size_t P = (size_t)gpt_param_count(&g->shape);
    run_record t = record_new(g, iters);
    run_trajectory(eng, g, gpu_limit, iters, &t);
    double max_rel = 0;
    for (int it = 0; it < iters; it++) {
        const double rel = fabs(t.loss[it] - cpu_loss[it]) / fabs(cpu_loss[it]);
        if (rel > max_rel) max_rel = rel;
    }
    int loss_differ;
    size_t params_differ;
    record_compare(&t, gpu_ref, iters, P, &loss_differ, &params_differ);
    printf("cuda_vs_cpu engine %s %s losses math=fp32 iterations=%d max_rel_err=%.3e; vs "
           "megatron-lm on the GPU: losses differing %d, params differing %zu of %zu\n",
           eng->name, label, iters, max_rel, loss_differ, params_differ, P);
    assert_true(max_rel <= 1e-5);
    assert_int_equal(loss_differ, 0);
    assert_int_equal(params_differ, 0);
    record_free(&t);
}

/* A windowed engine (stronghold) on the GPU, as check_engine_on_gpu: -w W for W in {1, 2, 3, L}
 * and -w auto under a budget that makes it stream (room for about 60% of the layers), -w 2
 * without clipping, and -w 2 --placement spread with and without. */
static void check_windowed_engine_on_gpu(const engine_vtbl *eng, const engine_config *clip,
                                         const engine_config *noclip, const run_record *cpu,
                                         const run_record *cpu_noclip, const run_record *ref,
                                         const run_record *ref_noclip, int iters)
{
    engine_config g = *clip, gn = *noclip;
    const int L = g.shape.layers;
    engine_plan all;
    g.window = L;
    eng->plan(&g, &all);
    const int windows[] = {1, 2, 3, L, 0};
    for (int w = 0; w < 5; w++) {
        char label[32];
        snprintf(label, sizeof label, "-w %d", windows[w]);
        g.window = windows[w];
        /* -w auto: room for about half the layers, so it streams. */
        const size_t limit = windows[w] == 0 ? (size_t)(all.gpu_bytes * 0.6) : SIZE_MAX;
        check_engine_on_gpu(eng, &g, limit, label, cpu->loss, ref, iters);
    }
    g.window = gn.window = 2;
    check_engine_on_gpu(eng, &gn, SIZE_MAX, "-w 2 --clip-grad 0", cpu_noclip->loss, ref_noclip, iters);
    /* --placement spread: at l6 -w 2 layers 0 and 3 resident, 1, 2, 4, 5 streamed */
    g.placement = gn.placement = PLACE_SPREAD;
    check_engine_on_gpu(eng, &g, SIZE_MAX, "-w 2 --placement spread", cpu->loss, ref, iters);
    check_engine_on_gpu(eng, &gn, SIZE_MAX, "-w 2 --placement spread --clip-grad 0", cpu_noclip->loss,
                        ref_noclip, iters);
}

/* Every offloading engine of the registry (harness_offload_engine: -m all's but megatron-lm)
 * on the GPU against megatron-lm (losses: on the CPU; final parameters: on the GPU): a windowed
 * one (stronghold) as check_windowed_engine_on_gpu, the others (l2l, zero-offload,
 * zero-infinity) clipped and with --clip-grad 0; then the disk tier (--offload nvme) of each
 * that has it (zero-infinity; stronghold -w 2). */
static void test_offload_engines_cuda_vs_cpu(void **state)
{
    (void)state;
    if (!have_gpu()) skip();
    assert_registry_populated();
    enum { ITERS = 20 };
    engine_config cfg = small_engine_config(6, 99, DEVICE_CPU);
    cfg.optim.clip = 0.5;
    engine_config noclip = cfg;
    noclip.optim.clip = 0;
    /* Losses from the CPU reference; losses and final parameters from megatron-lm on the GPU. */
    run_record cpu = record_new(&cfg, ITERS), cpu_noclip = record_new(&cfg, ITERS);
    run_record ref = record_new(&cfg, ITERS), ref_noclip = record_new(&cfg, ITERS);
    run_trajectory(&engine_megatron_lm, &cfg, SIZE_MAX, ITERS, &cpu);
    run_trajectory(&engine_megatron_lm, &noclip, SIZE_MAX, ITERS, &cpu_noclip);
    engine_config g = cfg, gn = noclip;
    g.device = gn.device = DEVICE_CUDA;
    run_trajectory(&engine_megatron_lm, &g, SIZE_MAX, ITERS, &ref);
    run_trajectory(&engine_megatron_lm, &gn, SIZE_MAX, ITERS, &ref_noclip);
    for (int e = 0; e < engine_count(); e++) {
        const engine_vtbl *eng = engine_at(e);
        if (!harness_offload_engine(eng)) continue;
        if (eng->uses_window) {
            check_windowed_engine_on_gpu(eng, &g, &gn, &cpu, &cpu_noclip, &ref, &ref_noclip, ITERS);
            continue;
        }
        check_engine_on_gpu(eng, &g, SIZE_MAX, "clip 0.5", cpu.loss, &ref, ITERS);
        check_engine_on_gpu(eng, &gn, SIZE_MAX, "--clip-grad 0", cpu_noclip.loss, &ref_noclip, ITERS);
    }
    /* The disk tier: swap files in the working directory (the machine's disk). */
    g.offload = OFFLOAD_NVME;
    snprintf(g.nvme_dir, sizeof g.nvme_dir, ".");
    for (int e = 0; e < engine_count(); e++) {
        const engine_vtbl *eng = engine_at(e);
        if (!harness_offload_engine(eng) || !engine_takes_option(eng, "offload")) continue;
        g.window = eng->uses_window ? 2 : 0;
        check_engine_on_gpu(eng, &g, SIZE_MAX, eng->uses_window ? "-w 2 --offload nvme" : "--offload nvme", cpu.loss,
                            &ref, ITERS);
    }
    record_free(&cpu);
    record_free(&cpu_noclip);
    record_free(&ref);
    record_free(&ref_noclip);
}

/* --dtype bf16 in every offloading engine on the GPU: each equals megatron-lm bf16 on the GPU
 * (losses and final parameters bit for bit: the same kernels in the same order, and the host's
 * rounding of the working copies is the GPU's), and megatron-lm bf16 on the GPU is within the
 * bf16 bound of the CPU backend's bf16 emulation. */
static void test_offload_engines_bf16(void **state)
{
    (void)state;
    if (!have_gpu()) skip();
    assert_registry_populated();
    enum { ITERS = 12 };
    engine_config cfg = small_engine_config(6, 4242, DEVICE_CPU);
    cfg.bf16 = 1;
    cfg.optim.clip = 0.5;
    run_record cpu = record_new(&cfg, ITERS), ref = record_new(&cfg, ITERS);
    run_trajectory(&engine_megatron_lm, &cfg, SIZE_MAX, ITERS, &cpu);
    engine_config g = cfg;
    g.device = DEVICE_CUDA;
    run_trajectory(&engine_megatron_lm, &g, SIZE_MAX, ITERS, &ref);
    double max_rel = 0;
    for (int it = 0; it < ITERS; it++) {
        const double rel = fabs(ref.loss[it] - cpu.loss[it]) / fabs(cpu.loss[it]);
        if (rel > max_rel) max_rel = rel;
    }
    printf("cuda_vs_cpu engine megatron-lm bf16 against the CPU's bf16 emulation: losses max_rel_err=%.3e\n",
           max_rel);
    assert_true(max_rel <= 1e-2);
    const size_t P = (size_t)gpt_param_count(&g.shape);
    /* every offloading engine of the registry (harness_offload_engine); a windowed one
     * (stronghold) in each of these, the others as they come */
    static const struct { int window; double budget; int placement; } windowed[] = {
        {1, 0, 0}, {2, 0, 0}, {0, 0.6, 0}, {2, 0, PLACE_SPREAD}};
    for (int e = 0; e < engine_count(); e++) {
        const engine_vtbl *eng = engine_at(e);
        if (!harness_offload_engine(eng)) continue;
        engine_plan all;
        g.window = g.shape.layers;
        g.placement = PLACE_AUTO;
        eng->plan(&g, &all);
        const size_t nruns = eng->uses_window ? sizeof windowed / sizeof windowed[0] : 1;
        for (size_t r = 0; r < nruns; r++) {
            g.window = eng->uses_window ? windowed[r].window : 0;
            g.placement = eng->uses_window ? windowed[r].placement : PLACE_AUTO;
            const double budget = eng->uses_window ? windowed[r].budget : 0;
            run_record t = record_new(&g, ITERS);
            run_trajectory(eng, &g, budget > 0 ? (size_t)(all.gpu_bytes * budget) : SIZE_MAX, ITERS, &t);
            int loss_differ;
            size_t params_differ;
            record_compare(&t, &ref, ITERS, P, &loss_differ, &params_differ);
            printf("cuda engine %s -w %d%s bf16 vs megatron-lm bf16 on the GPU: losses differing %d, params differing "
                   "%zu of %zu\n", eng->name, g.window, g.placement ? " --placement spread" : "", loss_differ,
                   params_differ, P);
            assert_int_equal(loss_differ, 0);
            assert_int_equal(params_differ, 0);
            record_free(&t);
        }
    }
    record_free(&cpu);
    record_free(&ref);
}

/* --recompute on the GPU.  With the GELU epilogues off (full's forward then computes the GELU
 * by the op selective's forward and recompute use), full, selective and none give the same
 * losses and parameters bit for bit, in TF32 and bf16: what selective recomputes (the
 * LayerNorms, the attention, the GELU) it recomputes exactly.  With the default epilogues,
 * every engine under selective equals megatron-lm under selective bit for bit. */
static void test_recompute_modes_on_gpu(void **state)
{
    (void)state;
    if (!have_gpu()) skip();
    assert_registry_populated();
    enum { ITERS = 8 };
    static const gpt_recompute modes[] = {GPT_RECOMPUTE_FULL, GPT_RECOMPUTE_SELECTIVE, GPT_RECOMPUTE_NONE};
    for (int m = 0; m < 2; m++) {
        engine_config g = small_engine_config(3, 31337, DEVICE_CUDA);
        g.optim.clip = 0.5;
        g.tf32 = m == 0;
        g.bf16 = m == 1;
        const size_t P = (size_t)gpt_param_count(&g.shape);
        const gpt_cuda_kernels epilogues_off = {.gelu_epilogue = GPT_GELU_EPILOGUE_OFF};
        run_record ref = record_new(&g, ITERS);
        run_trajectory_kernels(&engine_megatron_lm, &g, SIZE_MAX, ITERS, &ref, &epilogues_off);
        for (int k = 1; k < 3; k++) {
            engine_config c = g;
            c.recompute = modes[k];
            run_record t = record_new(&c, ITERS);
            run_trajectory_kernels(&engine_megatron_lm, &c, SIZE_MAX, ITERS, &t, &epilogues_off);
            int loss_differ;
            size_t params_differ;
            record_compare(&t, &ref, ITERS, P, &loss_differ, &params_differ);
            printf("cuda recompute %s vs full (%s, GELU epilogues off): losses differing %d, params differing %zu of "
                   "%zu\n", gpt_recompute_name(modes[k]), m ? "bf16" : "tf32", loss_differ, params_differ, P);
            assert_int_equal(loss_differ, 0);
            assert_int_equal(params_differ, 0);
            record_free(&t);
        }
        record_free(&ref);
        engine_config c = g;
        c.recompute = GPT_RECOMPUTE_SELECTIVE;
        run_record sel = record_new(&c, ITERS);
        run_trajectory(&engine_megatron_lm, &c, SIZE_MAX, ITERS, &sel);
        /* every offloading engine of the registry; a windowed one (stronghold) with -w 1 */
        for (int e = 0; e < engine_count(); e++) {
            const engine_vtbl *eng = engine_at(e);
            if (!harness_offload_engine(eng)) continue;
            c.window = eng->uses_window ? 1 : 0;
            run_record t = record_new(&c, ITERS);
            run_trajectory(eng, &c, SIZE_MAX, ITERS, &t);
            int loss_differ;
            size_t params_differ;
            record_compare(&t, &sel, ITERS, P, &loss_differ, &params_differ);
            printf("cuda %s --recompute selective vs megatron-lm selective (%s): losses differing %d, params "
                   "differing %zu of %zu\n", eng->name, m ? "bf16" : "tf32", loss_differ, params_differ, P);
            assert_int_equal(loss_differ, 0);
            assert_int_equal(params_differ, 0);
            record_free(&t);
        }
        record_free(&sel);
    }
}

/* Two identical GPU runs give the same losses and parameters bit for bit, in every math
 * mode.  Batch 8 of 64 tokens over a vocabulary of 1000 repeats many tokens three and more
 * times, where a float-atomic embedding gradient would add in a varying order. */
static void test_repeatable_runs(void **state)
{
    (void)state;
    if (!have_gpu()) skip();
    enum { ITERS = 8 };
    static const char *const names[] = {"fp32", "tf32", "bf16"};
    for (int m = 0; m < 3; m++) {
        engine_config g = small_engine_config(2, 777, DEVICE_CUDA);
        g.shape.batch = 8;
        g.optim.clip = 1.0;
        g.tf32 = m == 1;
        g.bf16 = m == 2;
        const size_t P = (size_t)gpt_param_count(&g.shape);
        run_record a = record_new(&g, ITERS), b = record_new(&g, ITERS);
        run_trajectory(&engine_megatron_lm, &g, SIZE_MAX, ITERS, &a);
        run_trajectory(&engine_megatron_lm, &g, SIZE_MAX, ITERS, &b);
        int loss_differ;
        size_t params_differ;
        record_compare(&a, &b, ITERS, P, &loss_differ, &params_differ);
        printf("repeat megatron-lm math=%s iterations=%d: losses differing %d, params differing "
               "%zu of %zu (last loss %.9f)\n",
               names[m], ITERS, loss_differ, params_differ, P, a.loss[ITERS - 1]);
        assert_int_equal(loss_differ, 0);
        assert_int_equal(params_differ, 0);
        record_free(&a);
        record_free(&b);
    }
}

/* --graphs: megatron-lm's forward and backward captured at the second step and replayed after
 * give the same losses, norms and final parameters bit for bit as the ops issued one by one,
 * in every math mode, with one and two micro-batches (one graph each per phase), with full and
 * no recompute.  --graphs on fails the run where a capture fails, so a run that trains has
 * replayed graphs from its third step on; and the run's note says they are on. */
static void graphs_note(void *ctx, const char *line)
{
    if (strncmp(line, "graphs: on", 10) == 0) *(int *)ctx = 1;
}

static void test_graphs_same_bits(void **state)
{
    (void)state;
    if (!have_gpu()) skip();
    static const char *const names[] = {"fp32", "tf32", "bf16"};
    for (int m = 0; m < 3; m++)
        for (int copies = 1; copies <= 2; copies++)
            for (int r = 0; r < 2; r++) {
                engine_config g = small_engine_config(3, 4242, DEVICE_CUDA);
                g.optim.clip = 0.5;
                g.tf32 = m == 1;
                g.bf16 = m == 2;
                g.recompute = r ? GPT_RECOMPUTE_NONE : GPT_RECOMPUTE_FULL;
                engine_config on = g;
                g.graphs = GRAPHS_OFF;
                on.graphs = GRAPHS_ON;
                trajectory eager, replayed;
                run_engine_copies(&engine_megatron_lm, &g, SIZE_MAX, copies, &eager);
                run_engine_copies(&engine_megatron_lm, &on, SIZE_MAX, copies, &replayed);
                size_t params_differ = 0;
                for (size_t i = 0; i < eager.nparams; i++)
                    if (memcmp(&eager.params[i], &replayed.params[i], sizeof(float)) != 0) params_differ++;
                printf("graphs megatron-lm math=%s micro-batches=%d recompute=%s: params differing %zu of %zu "
                       "(last loss %.9f)\n", names[m], copies, gpt_recompute_name(g.recompute), params_differ,
                       eager.nparams, eager.loss[ITERS - 1]);
                assert_same_trajectory(&replayed, &eager, "graphs on vs off");
                assert_int_equal(params_differ, 0);
                free(eager.params);
                free(replayed.params);
            }
    /* the run says so */
    engine_config c = small_engine_config(2, 1, DEVICE_CUDA);
    c.graphs = GRAPHS_ON;
    engine_harness h;
    int said_on = 0;
    assert_int_equal(harness_open_noted(&h, &engine_megatron_lm, &c, SIZE_MAX, SIZE_MAX, graphs_note, &said_on), 0);
    assert_true(said_on);
    harness_close(&h);
}

/* ---- memory ---------------------------------------------------------------------------- */

static void test_oom_then_usable(void **state)
{
    (void)state;
    if (!have_gpu()) skip();
    gpt_backend *be;
    assert_int_equal(gpt_cuda_backend_create(&be, 0, 0), 0);
    size_t free_b = 0, total_b = 0;
    assert_int_equal(be->ops->dev_mem_info(be, &free_b, &total_b), 0);
    assert_true(free_b > 0 && total_b >= free_b);
    void *huge = (void *)1;
    assert_int_equal(be->ops->dev_alloc(be, &huge, (size_t)1 << 50), GPT_ERR_OOM);
    assert_null(huge);
    /* still usable: allocate, clear, read back */
    gpt_stream *s;
    assert_int_equal(be->ops->stream_create(be, &s), 0);
    float *d = NULL, h[1024];
    assert_int_equal(be->ops->dev_alloc(be, (void **)&d, sizeof h), 0);
    for (int i = 0; i < 1024; i++) h[i] = 1.0f;
    assert_int_equal(gpt_stream_memset_zero(s, d, sizeof h), 0);
    assert_int_equal(gpt_memcpy_d2h(s, h, d, sizeof h), 0);
    assert_int_equal(gpt_stream_sync(s), 0);
    for (int i = 0; i < 1024; i++) assert_true(h[i] == 0.0f);
    printf("OOM: dev_alloc(1 PiB) = GPT_ERR_OOM, backend usable afterwards (%.1f of %.1f GiB free)\n",
           free_b / 1073741824.0, total_b / 1073741824.0);
    be->ops->dev_free(be, d);
    be->ops->stream_destroy(s);
    gpt_cuda_backend_destroy(be);
}

/* ---- checkpoint checksums ------------------------------------------------------------------ */

/* checksum_chunks on the GPU equals the CPU's bit for bit (the store checks the GPU's sums of
 * a checkpoint against its host copy at recovery): three parts of odd sizes, chunks that
 * straddle them, a chunk size that is not a multiple of a warp. */
static void checksum_case(const size_t n[3], size_t chunk)
{
    pair p;
    pair_open(&p, MATH_FP32);
    buf b[3];
    gpt_float_span cpu_parts[3], gpu_parts[3];
    size_t total = 0;
    for (int k = 0; k < 3; k++) {
        b[k] = buf_randf(&p, n[k], 0, 1);
        cpu_parts[k] = (gpt_float_span){b[k].cpu, n[k]};
        gpu_parts[k] = (gpt_float_span){(const float *)b[k].d, n[k]};
        total += n[k];
    }
    const size_t nchunks = (total + chunk - 1) / chunk;
    uint64_t *cpu = calloc(nchunks, sizeof *cpu), *got = calloc(nchunks, sizeof *got), *dev = NULL;
    assert_non_null(cpu);
    assert_non_null(got);
    assert_int_equal(p.gpu->ops->dev_alloc(p.gpu, (void **)&dev, nchunks * sizeof *dev), 0);
    gpt_checksum_chunks(p.cs, cpu, cpu_parts, 3, chunk);
    gpt_checksum_chunks(p.gs, dev, gpu_parts, 3, chunk);
    assert_int_equal(gpt_memcpy_d2h(p.gs, got, dev, nchunks * sizeof *dev), 0);
    assert_int_equal(gpt_stream_sync(p.gs), 0);
    assert_int_equal(gpt_stream_sync(p.cs), 0);
    size_t differ = 0;
    for (size_t c = 0; c < nchunks; c++) differ += got[c] != cpu[c];
    printf("cuda_vs_cpu checksum_chunks: %zu of %zu chunk sums differ (%zu words, 3 parts, chunks of %zu)\n",
           differ, nchunks, total, chunk);
    assert_int_equal(differ, 0);
    p.gpu->ops->dev_free(p.gpu, dev);
    free(cpu);
    free(got);
    for (int k = 0; k < 3; k++) buf_free(&p, &b[k]);
    pair_close(&p);
}

/* checksum_chunks on the GPU equals the CPU's bit for bit (the store checks the GPU's sums of
 * a checkpoint against its host copy at recovery): three parts of odd sizes, chunks that
 * straddle them, a chunk size that is not a multiple of a warp; small chunks (many blocks'
 * runs capped by the chunk) and large ones (hundreds of runs per chunk, one of them short). */
static void test_checksum_gpu_vs_cpu(void **state)
{
    (void)state;
    if (!have_gpu()) skip();
    const size_t small[3] = {1000003, 77, 2345679}, large[3] = {5000011, 3, 6000001};
    checksum_case(small, 65536 + 17);
    checksum_case(large, (4 << 20) + 3);
}

/* AdamW with its checksum terms (gpt_checksum_acc: gemini's sums riding on the optimizer) on
 * the GPU: a shard [param | m | v] of three blocks updated in calls that start at odd
 * elements (the float4 body and the scalar tail both), chunks that end inside them and a
 * chunk size not a multiple of a warp, the raw sums started from the padding's terms: the
 * folded sums equal the CPU's pass over the state the GPU wrote, and that state equals a
 * plain GPU update's bit for bit. */
static void test_adamw_sums_gpu_vs_cpu(void **state)
{
    (void)state;
    if (!have_gpu()) skip();
    pair p;
    pair_open(&p, MATH_FP32);
    const size_t S[3] = {1000003, 77, 2400011}, pad[3] = {0, 5, 3}, chunk = 65536 + 17;
    const size_t n = S[0] + S[1] + S[2], total = 3 * n, nchunks = (total + chunk - 1) / chunk;
    float *host = malloc(total * sizeof *host), *grad = malloc(n * sizeof *grad);
    float *back = malloc(total * sizeof *back), *plain_back = malloc(total * sizeof *plain_back);
    uint64_t *init = calloc(nchunks, sizeof *init), *got = calloc(nchunks, sizeof *got);
    uint64_t *want = calloc(nchunks, sizeof *want);
    assert_true(host && grad && back && plain_back && init && got && want);
    uint64_t seed = 99;
    for (size_t i = 0; i < total; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        const float u = (float)((seed >> 40) & 0xffffff) / 16777216.0f;
        host[i] = i >= 2 * n ? u * 0.01f : u - 0.5f; /* v >= 0 */
    }
    for (size_t i = 0; i < n; i++) grad[i] = host[(i * 7) % n] * 2.0f;
    size_t off = 0;
    for (int b = 0; b < 3; b++) {
        for (int a = 0; a < 3; a++)
            for (size_t w = a * n + off + S[b] - pad[b]; w < a * n + off + S[b]; w++) {
                host[w] = 0.0f;
                init[w / chunk] += gpt_checksum_term(0, w % chunk);
            }
        off += S[b];
    }
    float *state_d = NULL, *plain_d = NULL, *grad_d = NULL;
    uint64_t *sums_d = NULL;
    assert_int_equal(p.gpu->ops->dev_alloc(p.gpu, (void **)&state_d, total * sizeof(float)), 0);
    assert_int_equal(p.gpu->ops->dev_alloc(p.gpu, (void **)&plain_d, total * sizeof(float)), 0);
    assert_int_equal(p.gpu->ops->dev_alloc(p.gpu, (void **)&grad_d, n * sizeof(float)), 0);
    assert_int_equal(p.gpu->ops->dev_alloc(p.gpu, (void **)&sums_d, nchunks * sizeof(uint64_t)), 0);
    assert_int_equal(gpt_memcpy_h2d(p.gs, state_d, host, total * sizeof(float)), 0);
    assert_int_equal(gpt_memcpy_h2d(p.gs, plain_d, host, total * sizeof(float)), 0);
    assert_int_equal(gpt_memcpy_h2d(p.gs, grad_d, grad, n * sizeof(float)), 0);
    assert_int_equal(gpt_memcpy_h2d(p.gs, sums_d, init, nchunks * sizeof(uint64_t)), 0);
    off = 0;
    for (int b = 0; b < 3; b++) {
        const size_t real = S[b] - pad[b], split = real / 3 + 1; /* (the second call starts at an odd element) */
        for (int part = 0; part < 2; part++) {
            const size_t lo = off + (part ? split : 0), len = part ? real - split : split;
            const float wd = part ? 0.0f : 0.1f;
            const gpt_checksum_acc acc = {sums_d, chunk, {lo, n + lo, 2 * n + lo}};
            gpt_adamw_update(p.gs, plain_d + lo, grad_d + lo, plain_d + n + lo, plain_d + 2 * n + lo, len, 1e-2f,
                             0.9f, 0.95f, 1e-8f, wd, 2, 0.5f);
            gpt_adamw_update_sums(p.gs, state_d + lo, NULL, grad_d + lo, state_d + n + lo, state_d + 2 * n + lo, len,
                                  1e-2f, 0.9f, 0.95f, 1e-8f, wd, 2, 0.5f, &acc);
        }
        off += S[b];
    }
    gpt_checksum_fold_chunks(p.gs, sums_d, total, chunk);
    assert_int_equal(gpt_memcpy_d2h(p.gs, back, state_d, total * sizeof(float)), 0);
    assert_int_equal(gpt_memcpy_d2h(p.gs, plain_back, plain_d, total * sizeof(float)), 0);
    assert_int_equal(gpt_memcpy_d2h(p.gs, got, sums_d, nchunks * sizeof(uint64_t)), 0);
    assert_int_equal(gpt_stream_sync(p.gs), 0);
    const gpt_float_span parts[3] = {{back, n}, {back + n, n}, {back + 2 * n, n}};
    gpt_checksum_chunks(p.cs, want, parts, 3, chunk);
    assert_int_equal(gpt_stream_sync(p.cs), 0);
    size_t differ = 0, state_differ = 0;
    for (size_t c = 0; c < nchunks; c++) differ += got[c] != want[c];
    for (size_t i = 0; i < total; i++) state_differ += memcmp(&back[i], &plain_back[i], sizeof(float)) != 0;
    printf("cuda adamw with checksum sums: %zu of %zu chunk sums differ from the CPU's pass, %zu of %zu state words "
           "differ from a plain update\n", differ, nchunks, state_differ, total);
    assert_int_equal(differ, 0);
    assert_int_equal(state_differ, 0);
    p.gpu->ops->dev_free(p.gpu, sums_d);
    p.gpu->ops->dev_free(p.gpu, grad_d);
    p.gpu->ops->dev_free(p.gpu, plain_d);
    p.gpu->ops->dev_free(p.gpu, state_d);
    free(host); free(grad); free(back); free(plain_back); free(init); free(got); free(want);
    pair_close(&p);
}

/* ---- --profile's wrapper on the GPU ---------------------------------------------------------- */

/* The ops issued through the profiling backend (kernels/profile.h) on the GPU: they compute
 * what the CUDA backend computes (the same checks against the CPU as unwrapped), and every
 * one of them is timed and counted in its family with its model FLOPs. */
static void test_profile_wrapper(void **state)
{
    (void)state;
    if (!have_gpu()) skip();
    pair p;
    pair_open(&p, MATH_TF32);
    gpt_profile *prof = NULL;
    assert_int_equal(gpt_profile_create(&prof, p.gpu), 0);
    gpt_backend *wrapped = gpt_profile_backend(prof);
    gpt_stream *plain = p.gs, *ws = NULL;
    assert_int_equal(wrapped->ops->stream_create(wrapped, &ws), 0);
    p.gs = ws;
    check_elementwise(&p, 64);
    check_matmul_case(&p, 64, C_, 3 * C_, 1, 0, 1);
    assert_int_equal(gpt_profile_step_end(prof), 0);
    assert_int_equal(gpt_profile_untimed(prof), 0);
    assert_int_equal(gpt_profile_steps(prof), 1);
    gpt_profile_family f;
    gpt_profile_family_of(prof, PROF_MATMUL_FORWARD, &f);
    assert_true(f.calls >= 1);
    assert_true(f.ms >= 0);
    assert_true(f.flops == f.calls * 2.0 * B_ * 64 * C_ * 3 * C_);
    gpt_profile_family_of(prof, PROF_COPY_H2D, &f);
    assert_true(f.calls >= 1 && f.bytes > 0);
    p.gs = plain;
    wrapped->ops->stream_destroy(ws);
    gpt_profile_destroy(prof);
    pair_close(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ops_fp32),
        cmocka_unit_test(test_ops_tf32),
        cmocka_unit_test(test_ops_bf16),
        cmocka_unit_test(test_attention_wgmma_vs_mma),
        cmocka_unit_test(test_column_sum_vec),
        cmocka_unit_test(test_tf32_weight_gradient),
        cmocka_unit_test(test_engine_cpu_vs_cuda),
        cmocka_unit_test(test_engine_bf16_vs_cpu),
        cmocka_unit_test(test_offload_engines_cuda_vs_cpu),
        cmocka_unit_test(test_offload_engines_bf16),
        cmocka_unit_test(test_repeatable_runs),
        cmocka_unit_test(test_recompute_modes_on_gpu),
        cmocka_unit_test(test_graphs_same_bits),
        cmocka_unit_test(test_checksum_gpu_vs_cpu),
        cmocka_unit_test(test_adamw_sums_gpu_vs_cpu),
        cmocka_unit_test(test_oom_then_usable),
        cmocka_unit_test(test_profile_wrapper),
    };
    /* AEBENCH_CUDA_TESTS=pattern runs only the tests whose names match (cmocka's filter) */
    const char *only = getenv("AEBENCH_CUDA_TESTS");
    if (only && only[0]) cmocka_set_test_filter(only);
    return cmocka_run_group_tests_name("cuda", tests, NULL, NULL);
}
