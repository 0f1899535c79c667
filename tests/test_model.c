/*
 * test_model.c — the model and the baseline engine on the CPU backend.
 *
 *  - the whole model's gradient (every parameter of a tiny GPT) against central finite
 *    differences of an independent double-precision forward written here;
 *  - activation checkpointing changes nothing (bit-identical gradients and losses);
 *  - parameter counts against hand values (Megatron's 1716588544 for l32 h2048);
 *  - the learning-rate schedule (4.687E-07 at iteration 10 of the artifact's run);
 *  - the megatron-lm engine: loss falls on the synthetic corpus; an impossible GPU budget
 *    is an OOM with a record of what did not fit.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "engine_harness.h"
#include "../kernels/model.h"
#include "../kernels/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- a double-precision reference GPT ------------------------------------------------- */

static void ref_layernorm(double *out, const double *x, const double *w, const double *b, int N,
                          int C)
{
    for (int n = 0; n < N; n++) {
        const double *r = x + (size_t)n * C;
        double mean = 0, var = 0;
        for (int c = 0; c < C; c++) mean += r[c];
        mean /= C;
        for (int c = 0; c < C; c++) var += (r[c] - mean) * (r[c] - mean);
        var /= C;
        double rstd = 1.0 / sqrt(var + 1e-5);
        for (int c = 0; c < C; c++) out[(size_t)n * C + c] = (r[c] - mean) * rstd * w[c] + b[c];
    }
}

/* out (N,OC) = x (N,C) @ w^T + b */
static void ref_linear(double *out, const double *x, const double *w, const double *b, int N,
                       int C, int OC)
{
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double acc = b ? b[o] : 0.0;
            for (int c = 0; c < C; c++) acc += x[(size_t)n * C + c] * w[(size_t)o * C + c];
            out[(size_t)n * OC + o] = acc;
        }
}

static void ref_attention(double *out, const double *qkv, int B, int T, int C, int NH)
{
    const int hs = C / NH;
    const double scale = 1.0 / sqrt((double)hs);
    double *p = malloc(sizeof(double) * (size_t)T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const double *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
                double mx = -INFINITY;
                for (int u = 0; u <= t; u++) {
                    const double *k = qkv + ((size_t)b * T + u) * 3 * C + C + h * hs;
                    double d = 0;
                    for (int i = 0; i < hs; i++) d += q[i] * k[i];
                    p[u] = d * scale;
                    if (p[u] > mx) mx = p[u];
                }
                double sum = 0;
                for (int u = 0; u <= t; u++) sum += (p[u] = exp(p[u] - mx));
                double *o = out + ((size_t)b * T + t) * C + h * hs;
                for (int i = 0; i < hs; i++) o[i] = 0;
                for (int u = 0; u <= t; u++) {
                    const double *v = qkv + ((size_t)b * T + u) * 3 * C + 2 * C + h * hs;
                    for (int i = 0; i < hs; i++) o[i] += p[u] / sum * v[i];
                }
            }
    free(p);
}

static double ref_gelu(double x)
{
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

/* Mean cross-entropy of the GPT with parameters p (gpt layout) on tokens/targets. */
static double ref_loss(const gpt_shape *sh, const double *p, const int32_t *tok,
                       const int32_t *tgt)
{
    const int B = sh->batch, T = sh->seq, C = sh->hidden, N = B * T, V = sh->vocab;
    gpt_embed_layout e = gpt_embed_layout_of(sh);
    gpt_layer_layout l = gpt_layer_layout_of(sh);
    double *x = malloc(sizeof(double) * N * C), *ln = malloc(sizeof(double) * N * C);
    double *qkv = malloc(sizeof(double) * N * 3 * C), *att = malloc(sizeof(double) * N * C);
    double *tmp = malloc(sizeof(double) * N * C), *h = malloc(sizeof(double) * N * 4 * C);
    double *logits = malloc(sizeof(double) * N * sh->vocab_padded);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++)
            x[n * C + c] = p[e.wte + (size_t)tok[n] * C + c] + p[e.wpe + (size_t)(n % T) * C + c];
    for (int layer = 0; layer < sh->layers; layer++) {
        const double *q = p + e.total + (size_t)layer * l.total;
        ref_layernorm(ln, x, q + l.ln1_w, q + l.ln1_b, N, C);
        ref_linear(qkv, ln, q + l.qkv_w, q + l.qkv_b, N, C, 3 * C);
        ref_attention(att, qkv, B, T, C, sh->heads);
        ref_linear(tmp, att, q + l.proj_w, q + l.proj_b, N, C, C);
        for (int i = 0; i < N * C; i++) x[i] += tmp[i];
        ref_layernorm(ln, x, q + l.ln2_w, q + l.ln2_b, N, C);
        ref_linear(h, ln, q + l.fc_w, q + l.fc_b, N, C, 4 * C);
        for (int i = 0; i < N * 4 * C; i++) h[i] = ref_gelu(h[i]);
        ref_linear(tmp, h, q + l.fcproj_w, q + l.fcproj_b, N, 4 * C, C);
        for (int i = 0; i < N * C; i++) x[i] += tmp[i];
    }
    ref_layernorm(ln, x, p + e.lnf_w, p + e.lnf_b, N, C);
    ref_linear(logits, ln, p + e.wte, NULL, N, C, V); /* padded rows never matter */
    double loss = 0;
    for (int n = 0; n < N; n++) {
        const double *r = logits + (size_t)n * V;
        double mx = -INFINITY, sum = 0;
        for (int v = 0; v < V; v++) mx = r[v] > mx ? r[v] : mx;
        for (int v = 0; v < V; v++) sum += exp(r[v] - mx);
        loss += -(r[tgt[n]] - mx - log(sum));
    }
    free(x), free(ln), free(qkv), free(att), free(tmp), free(h), free(logits);
    return loss / N;
}

/* ---- the float model on the CPU backend ------------------------------------------------ */

typedef struct cpu_model {
    gpt_backend *be;
    gpt_stream *s;
    gpt_resident r;
    float *mem;
    float *norms;
    int32_t ids[2 * 64];
} cpu_model;

/* head_rows: rows per head chunk, 0 for the default. */
static void cpu_model_open_rows(cpu_model *m, const gpt_shape *sh, int ckpt, const float *params,
                                int head_rows)
{
    if (head_rows == 0) head_rows = gpt_head_chunk_rows(sh, GPT_F32);
    const size_t head_floats = gpt_head_acts_bytes_rows(sh, GPT_F32, head_rows) / sizeof(float);
    assert_int_equal(gpt_cpu_backend_create(&m->be, 2), 0);
    assert_int_equal(m->be->ops->stream_create(m->be, &m->s), 0);
    const size_t P = (size_t)gpt_param_count(sh), N = (size_t)sh->batch * sh->seq;
    const gpt_recompute mode = ckpt ? GPT_RECOMPUTE_FULL : GPT_RECOMPUTE_NONE;
    const size_t acts = gpt_layers_acts_bytes(sh, GPT_F32, mode, sh->layers) / sizeof(float);
    const size_t total = 2 * P + gpt_embed_layout_of(sh).total + (sh->layers + 1) * N * sh->hidden + acts +
                         gpt_layer_scratch_floats(sh) + head_floats + N * sh->hidden +
                         (size_t)sh->layers + 1;
    m->mem = calloc(total, sizeof(float));
    assert_non_null(m->mem);
    float *p = m->mem;
    m->r.params = p;          p += P;
    m->r.grads = p;           p += P;
    m->r.embed_in_grads = p;  p += gpt_embed_layout_of(sh).total;
    m->r.layer_inputs = p;    p += (sh->layers + 1) * N * sh->hidden;
    m->r.layer_acts = p;      p += acts;
    gpt_layer_scratch_carve(&m->r.scratch, p, sh); p += gpt_layer_scratch_floats(sh);
    gpt_head_acts_carve_rows(&m->r.head, p, sh, GPT_F32, head_rows); p += head_floats;
    m->r.dres = p;            p += N * sh->hidden;
    m->norms = p;
    m->r.wparams = NULL; /* fp32: the ops read the params themselves */
    m->r.recompute = mode;
    m->r.tokens = m->ids;
    m->r.targets = m->ids + N;
    memcpy(m->r.params, params, P * sizeof(float));
}

static void cpu_model_open(cpu_model *m, const gpt_shape *sh, int ckpt, const float *params)
{
    cpu_model_open_rows(m, sh, ckpt, params, 0);
}

static void cpu_model_close(cpu_model *m)
{
    m->be->ops->stream_destroy(m->s); /* drains the stream before its buffers go */
    free(m->mem);
    gpt_cpu_backend_destroy(m->be);
}

/* Forward + backward; returns the mean loss (grads are zeroed first). */
static double cpu_model_grad(cpu_model *m, const gpt_shape *sh)
{
    memset(m->r.grads, 0, gpt_param_count(sh) * sizeof(float));
    gpt_resident_forward(m->s, sh, &m->r);
    assert_int_equal(gpt_stream_sync(m->s), 0); /* the losses are read on the host */
    double loss = gpt_mean_loss(m->r.head.losses, sh->batch * sh->seq);
    assert_int_equal(gpt_resident_backward(m->s, sh, &m->r), GPT_OK);
    assert_int_equal(gpt_stream_sync(m->s), 0);
    return loss;
}

static gpt_shape tiny_shape(void)
{
    gpt_shape sh = {.layers = 2, .hidden = 8, .heads = 2, .seq = 5, .batch = 2, .vocab = 11};
    sh.vocab_padded = gpt_pad_vocab(sh.vocab);
    return sh;
}

/* Random parameters of a size that makes every nonlinearity matter (the 0.02 init would
 * leave LayerNorm and GELU nearly linear). */
static float *random_params(const gpt_shape *sh, uint64_t seed)
{
    const size_t P = (size_t)gpt_param_count(sh);
    float *p = malloc(P * sizeof(float));
    rng r = rng_for(seed, 1, 2);
    for (size_t i = 0; i < P; i++) p[i] = (float)(0.3 * rng_normal(&r));
    gpt_embed_layout e = gpt_embed_layout_of(sh);
    gpt_layer_layout l = gpt_layer_layout_of(sh);
    for (int c = 0; c < sh->hidden; c++) p[e.lnf_w + c] += 1.0f;
    for (int layer = 0; layer < sh->layers; layer++) {
        float *q = p + e.total + (size_t)layer * l.total;
        for (int c = 0; c < sh->hidden; c++) q[l.ln1_w + c] += 1.0f, q[l.ln2_w + c] += 1.0f;
    }
    return p;
}

static void fill_ids(int32_t *ids, const gpt_shape *sh, uint64_t seed)
{
    const int N = sh->batch * sh->seq;
    rng r = rng_for(seed, 7, 7);
    for (int i = 0; i < 2 * N; i++) ids[i] = (int32_t)rng_below(&r, (uint32_t)sh->vocab);
}

static void test_model_gradient_vs_finite_differences(void **state)
{
    (void)state;
    const gpt_shape sh = tiny_shape();
    const size_t P = (size_t)gpt_param_count(&sh);
    const int N = sh.batch * sh.seq;
    float *pf = random_params(&sh, 42);
    cpu_model m;
    cpu_model_open(&m, &sh, 1, pf);
    fill_ids(m.ids, &sh, 3);
    double loss_f = cpu_model_grad(&m, &sh);

    double *pd = malloc(P * sizeof(double));
    assert_non_null(pd);
    for (size_t i = 0; i < P; i++) pd[i] = pf[i];
    const double loss_d = ref_loss(&sh, pd, m.ids, m.ids + N);
    const double h = 1e-5;
    double max_err = 0, max_fd = 0;
    size_t checked = 0;
    for (size_t i = 0; i < P; i++) {
        gpt_embed_layout e = gpt_embed_layout_of(&sh);
        /* wte rows of padded ids never enter the model: their gradient must be exactly 0. */
        if (i >= e.wte + (size_t)sh.vocab * sh.hidden && i < e.wpe) {
            assert_true(m.r.grads[i] == 0.0f);
            continue;
        }
        const double saved = pd[i];
        pd[i] = saved + h;
        double up = ref_loss(&sh, pd, m.ids, m.ids + N);
        pd[i] = saved - h;
        double down = ref_loss(&sh, pd, m.ids, m.ids + N);
        pd[i] = saved;
        double fd = (up - down) / (2 * h);
        double err = fabs(fd - (double)m.r.grads[i]);
        if (err > max_err) max_err = err;
        if (fabs(fd) > max_fd) max_fd = fabs(fd);
        checked++;
    }
    double rel = max_err / max_fd;
    printf("gradcheck model (%zu parameters, l%d h%d) max_rel_err=%.3e  loss float %.9f double %.9f\n",
           checked, sh.layers, sh.hidden, rel, loss_f, loss_d);
    assert_true(fabs(loss_f - loss_d) / loss_d < 1e-6);
    /* fp32 backward over a 2-layer model: rounding accumulates through ~20 ops. */
    assert_true(rel < 1e-5);
    free(pd);
    free(pf);
    cpu_model_close(&m);
}

static void test_checkpointing_changes_nothing(void **state)
{
    (void)state;
    gpt_shape sh = tiny_shape();
    sh.layers = 3;
    const size_t P = (size_t)gpt_param_count(&sh);
    float *pf = random_params(&sh, 9);
    cpu_model a, b;
    cpu_model_open(&a, &sh, 1, pf);
    cpu_model_open(&b, &sh, 0, pf);
    fill_ids(a.ids, &sh, 5);
    fill_ids(b.ids, &sh, 5);
    double la = cpu_model_grad(&a, &sh), lb = cpu_model_grad(&b, &sh);
    assert_true(la == lb);
    assert_memory_equal(a.r.grads, b.r.grads, P * sizeof(float));
    cpu_model_close(&a);
    cpu_model_close(&b);
    free(pf);
}

/* The head in chunks of rows gives the losses and every gradient but the tied wte's bit for
 * bit (each row's logits, loss and dlnf are computed alone either way); wte's gradient sums
 * the chunks' contributions in another order, so it agrees to rounding. */
static void test_head_chunks_change_only_the_wte_sum_order(void **state)
{
    (void)state;
    gpt_shape sh = tiny_shape();
    const size_t P = (size_t)gpt_param_count(&sh);
    const int N = sh.batch * sh.seq;
    assert_int_equal(gpt_head_chunk_rows(&sh, GPT_F32), N); /* tiny: one chunk by default */
    float *pf = random_params(&sh, 11);
    cpu_model whole, chunked;
    cpu_model_open(&whole, &sh, 1, pf);
    cpu_model_open_rows(&chunked, &sh, 1, pf, 3); /* 3 + 3 + 3 + 1 rows */
    fill_ids(whole.ids, &sh, 6);
    fill_ids(chunked.ids, &sh, 6);
    const double lw = cpu_model_grad(&whole, &sh), lc = cpu_model_grad(&chunked, &sh);
    assert_true(lw == lc);
    assert_memory_equal(whole.r.head.losses, chunked.r.head.losses, (size_t)N * sizeof(float));
    gpt_embed_layout e = gpt_embed_layout_of(&sh);
    const size_t wte_n = (size_t)sh.vocab_padded * sh.hidden;
    assert_memory_equal(whole.r.grads + e.wpe, chunked.r.grads + e.wpe,
                        (P - e.wpe) * sizeof(float));
    double max_err = 0, max_g = 0;
    for (size_t i = 0; i < wte_n; i++) {
        max_err = fmax(max_err, fabs((double)whole.r.grads[e.wte + i] - chunked.r.grads[e.wte + i]));
        max_g = fmax(max_g, fabs((double)whole.r.grads[e.wte + i]));
    }
    assert_true(max_g > 0);
    assert_true(max_err <= 1e-6 * max_g);
    cpu_model_close(&whole);
    cpu_model_close(&chunked);
    free(pf);

    /* GPT-2's vocabulary at b4 s1024: fp32 logits in four chunks of 1024 rows, bf16 in two
     * of 2048, each within the chunk budget. */
    gpt_shape big = {.layers = 1, .hidden = 2048, .heads = 16, .seq = 1024, .batch = 4,
                     .vocab = 50257};
    big.vocab_padded = gpt_pad_vocab(big.vocab);
    assert_int_equal(gpt_head_chunk_rows(&big, GPT_F32), 1024);
    assert_int_equal(gpt_head_chunk_rows(&big, GPT_BF16), 2048);
    assert_true((size_t)1024 * big.vocab_padded * 4 <= GPT_HEAD_CHUNK_BYTES);
}

/* Each carve must fit in the size its *_bytes function gives, in every element type, with
 * its tensors in order and apart: an undercounted size lets one buffer run into the next,
 * which only a wrong gradient would reveal. */
static void check_in_order(const char *base, size_t bytes, const void *const *ptrs,
                           const size_t *sizes, int n)
{
    const char *end = base;
    for (int i = 0; i < n; i++) {
        const char *p = ptrs[i];
        assert_true(p >= end);         /* after the previous tensor */
        assert_true((size_t)(p - base) % 256 == 0);
        end = p + sizes[i];
    }
    assert_true(end <= base + bytes);  /* inside the size */
    assert_true(end + 256 > base + bytes); /* and the size has no slack beyond alignment */
}

static void test_activation_carves_fit(void **state)
{
    (void)state;
    gpt_shape sh = tiny_shape();
    const size_t N = (size_t)sh.batch * sh.seq, C = (size_t)sh.hidden;
    const size_t att_rows = (size_t)sh.batch * sh.heads * sh.seq, f = sizeof(float);
    const gpt_dtype types[] = {GPT_F32, GPT_BF16};
    for (int t = 0; t < 2; t++) {
        const gpt_dtype dt = types[t];
        const size_t e = gpt_dtype_size(dt);
        const size_t most = gpt_layer_acts_bytes(&sh, dt) + gpt_layer_scratch_bytes(&sh, dt) +
                            gpt_head_acts_bytes(&sh, dt);
        char *base = malloc(most);
        assert_non_null(base);
        gpt_layer_acts a;
        gpt_layer_acts_carve_as(&a, base, &sh, dt);
        const void *pa[] = {a.ln1, a.ln1_mean, a.ln1_rstd, a.qkv, a.att_lse, a.atty, a.res2,
                            a.ln2, a.ln2_mean, a.ln2_rstd, a.fch, a.fch_gelu};
        const size_t sa[] = {N * C * e, N * f, N * f, 3 * N * C * e, att_rows * f, N * C * e,
                             N * C * e, N * C * e, N * f, N * f, 4 * N * C * e, 4 * N * C * e};
        check_in_order(base, gpt_layer_acts_bytes(&sh, dt), pa, sa, 12);
        gpt_layer_scratch sc;
        gpt_layer_scratch_carve_as(&sc, base, &sh, dt);
        const void *ps[] = {sc.att_delta};
        const size_t ss[] = {att_rows * f};
        check_in_order(base, gpt_layer_scratch_bytes(&sh, dt), ps, ss, 1);
        gpt_head_acts h;
        gpt_head_acts_carve_as(&h, base, &sh, dt);
        const void *ph[] = {h.lnf, h.lnf_mean, h.lnf_rstd, h.losses, h.logits};
        const size_t sz[] = {N * C * e, N * f, N * f, N * f,
                             (size_t)h.chunk_rows * sh.vocab_padded * e};
        check_in_order(base, gpt_head_acts_bytes(&sh, dt), ph, sz, 5);
        free(base);
    }
    /* the fp32 forms are the same carves */
    assert_int_equal(gpt_layer_acts_floats(&sh) * f, gpt_layer_acts_bytes(&sh, GPT_F32));
    assert_int_equal(gpt_head_acts_floats(&sh) * f, gpt_head_acts_bytes(&sh, GPT_F32));
}

static void test_parameter_counts(void **state)
{
    (void)state;
    gpt_shape sh = {.layers = 32, .hidden = 2048, .heads = 16, .seq = 1024, .batch = 4, .vocab = 50257};
    sh.vocab_padded = gpt_pad_vocab(sh.vocab);
    assert_int_equal(sh.vocab_padded, 50304);
    assert_int_equal(gpt_layer_layout_of(&sh).total, 50358272);
    assert_true(gpt_param_count(&sh) == 1716588544ULL);
    sh.layers = 100;
    char b[32];
    snprintf(b, sizeof b, "%.3f", (double)gpt_param_count(&sh) / 1e9);
    assert_string_equal(b, "5.141");
    /* layout: the decayed span is exactly the four weight matrices */
    gpt_layer_layout l = gpt_layer_layout_of(&sh);
    assert_true(l.n_decay == 12ULL * 2048 * 2048);
    assert_true(l.total - l.n_decay == 13ULL * 2048);
    gpt_embed_layout e = gpt_embed_layout_of(&sh);
    assert_true(e.n_decay == (50304ULL + 1024) * 2048);
}

/* The tensor-parallel split (model_tp.c): T shares of a block hold every float of it once (the
 * split tensors) or on every rank (the whole ones), the shares put back together give the block
 * bit for bit, and a layer's share is laid out as model.h says (split part first). */
static void test_tensor_parallel_split_covers_the_block(void **state)
{
    (void)state;
    gpt_shape one = tiny_shape();
    one.heads = 4;
    one.hidden = 16;
    for (int T = 2; T <= 4; T *= 2) {
        gpt_shape sh = one;
        sh.tp = T;
        for (int embed = 0; embed <= 1; embed++) {
            const size_t whole = embed ? gpt_embed_layout_of(&one).total : gpt_layer_layout_of(&one).total;
            const size_t part = embed ? gpt_embed_layout_of(&sh).total : gpt_layer_layout_of(&sh).total;
            const size_t split = embed ? gpt_embed_layout_of(&sh).n_split : gpt_layer_layout_of(&sh).n_split;
            /* each split float on one rank, each whole one on all */
            assert_int_equal(T * split + (part - split), whole);
            float *block = malloc(whole * sizeof(float)), *back = malloc(whole * sizeof(float));
            float *share = malloc(part * sizeof(float));
            assert_non_null(block); assert_non_null(back); assert_non_null(share);
            for (size_t i = 0; i < whole; i++) block[i] = (float)i + 0.5f, back[i] = NAN;
            for (int r = 0; r < T; r++) {
                for (size_t i = 0; i < part; i++) share[i] = NAN;
                gpt_tp_move_block(block, share, &sh, r, embed, 1);
                for (size_t i = 0; i < part; i++) assert_false(isnan(share[i]));
                gpt_tp_move_block(back, share, &sh, r, embed, 0);
                if (!embed) { /* rank r's first q row is row r c of the whole qkv_w */
                    const size_t c = (size_t)one.hidden / T;
                    assert_true(share[gpt_layer_layout_of(&sh).qkv_w] == block[r * c * one.hidden]);
                }
            }
            assert_memory_equal(back, block, whole * sizeof(float));
            free(block); free(back); free(share);
        }
    }
}

static void test_lr_schedule(void **state)
{
    (void)state;
    gpt_optim o = gpt_optim_default();
    char b[32];
    snprintf(b, sizeof b, "%.3E", gpt_lr_at(&o, 10));
    assert_string_equal(b, "4.687E-07");
    assert_true(fabs(gpt_lr_at(&o, 3200) - 1.5e-4) < 1e-18); /* end of warm-up: the peak */
    assert_true(gpt_lr_at(&o, 3201) < 1.5e-4);
    assert_true(fabs(gpt_lr_at(&o, 161600) - (1e-5 + 0.5 * (1.5e-4 - 1e-5))) < 1e-12); /* halfway */
    assert_true(gpt_lr_at(&o, 400000) == 1e-5);
    assert_true(gpt_clip_scale(&o, 0.5) == 1.0f);
    assert_true(fabs(gpt_clip_scale(&o, 4.0) - 0.25f) < 1e-6);
}

/* ---- the engine ------------------------------------------------------------------------ */

static engine_config model_test_config(void)
{
    engine_config c = {0};
    c.shape = (gpt_shape){.layers = 2, .hidden = 64, .heads = 4, .seq = 32, .batch = 4, .vocab = 512};
    c.shape.vocab_padded = gpt_pad_vocab(c.shape.vocab);
    c.recompute = GPT_RECOMPUTE_FULL;
    c.optim = gpt_optim_default();
    c.optim.lr = 2e-3;
    c.optim.min_lr = 1e-4;
    c.optim.decay_iters = 500;
    c.seed = 1234;
    return c;
}

static void test_loss_falls_on_synthetic_corpus(void **state)
{
    (void)state;
    engine_config cfg = model_test_config();
    engine_harness r;
    assert_int_equal(harness_open(&r, &engine_megatron_lm, &cfg, SIZE_MAX), 0);
    const int iters = 40;
    double first = 0, last = 0;
    for (int it = 1; it <= iters; it++) {
        step_result res;
        harness_step(&r, it, &res);
        assert_true(isfinite(res.loss) && isfinite(res.grad_norm) && !res.skipped);
        if (it <= 3) first += res.loss / 3;
        if (it > iters - 3) last += res.loss / 3;
    }
    printf("loss on the synthetic corpus: %.3f (iterations 1-3) -> %.3f (%d-%d); ln V = %.3f\n",
           first, last, iters - 2, iters, log(cfg.shape.vocab));
    assert_true(fabs(first - log(cfg.shape.vocab)) < 0.5); /* starts near uniform */
    assert_true(last < first - 1.5);                       /* and falls visibly */
    harness_close(&r);
}

static void test_engine_oom_is_recorded(void **state)
{
    (void)state;
    engine_config cfg = model_test_config();
    engine_plan plan;
    engine_megatron_lm.plan(&cfg, &plan);
    engine_harness r;
    /* Room for the parameters and gradients, not for Adam's state. */
    size_t params = (size_t)gpt_param_count(&cfg.shape) * sizeof(float);
    assert_int_equal(harness_open(&r, &engine_megatron_lm, &cfg, 2 * params + params / 2),
                     GPT_ERR_OOM);
    assert_true(r.gpu.budget.oom);
    assert_string_equal(r.gpu.budget.oom_what, "Adam m");
    assert_true(r.gpu.budget.oom_bytes == params);
    assert_true(r.gpu.budget.oom_in_use == 2 * params);
    harness_close(&r);
}

static void test_engine_plan_matches_allocation(void **state)
{
    (void)state;
    static const gpt_recompute modes[] = {GPT_RECOMPUTE_FULL, GPT_RECOMPUTE_SELECTIVE, GPT_RECOMPUTE_NONE};
    for (int i = 0; i < 3; i++) {
        engine_config cfg = model_test_config();
        cfg.recompute = modes[i];
        engine_plan plan;
        engine_megatron_lm.plan(&cfg, &plan);
        engine_harness r;
        assert_int_equal(harness_open(&r, &engine_megatron_lm, &cfg, SIZE_MAX), 0);
        /* The baseline's plan is its allocation list: exact. */
        assert_true(r.gpu.budget.peak == plan.gpu_bytes);
        assert_true(r.host.peak == plan.host_bytes);
        harness_close(&r);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_gradient_vs_finite_differences),
        cmocka_unit_test(test_checkpointing_changes_nothing),
        cmocka_unit_test(test_head_chunks_change_only_the_wte_sum_order),
        cmocka_unit_test(test_activation_carves_fit),
        cmocka_unit_test(test_parameter_counts),
        cmocka_unit_test(test_tensor_parallel_split_covers_the_block),
        cmocka_unit_test(test_lr_schedule),
        cmocka_unit_test(test_loss_falls_on_synthetic_corpus),
        cmocka_unit_test(test_engine_oom_is_recorded),
        cmocka_unit_test(test_engine_plan_matches_allocation),
    };
    return cmocka_run_group_tests_name("model", tests, NULL, NULL);
}
