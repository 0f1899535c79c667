/*
 * model.c — Megatron GPT over the kernel API: layout, initialisation, one layer's forward
 * and backward (with recompute), embedding and head, the optimizer's arithmetic glue.
 */
#include "model.h"

#include "rng.h"

#include <math.h>
#include <string.h>

int gpt_pad_vocab(int vocab)
{
    return (int)(((long long)vocab + 127) / 128 * 128); /* (in 64 bits: no wrap near INT_MAX) */
}

int gpt_tp_of(const gpt_shape *sh) { return sh->tp > 1 ? sh->tp : 1; }

gpt_layer_layout gpt_layer_layout_of(const gpt_shape *sh)
{
    const size_t C = (size_t)sh->hidden, T = (size_t)gpt_tp_of(sh), c = C / T;
    gpt_layer_layout l;
    size_t o = 0;
    /* 2-D weights first: they are the weight-decayed span (a rank's share of each under
     * tensor parallelism: the column-parallel qkv and fc by rows, the row-parallel proj and
     * fcproj by columns). */
    l.qkv_w = o;    o += 3 * c * C;
    l.proj_w = o;   o += C * c;
    l.fc_w = o;     o += 4 * c * C;
    l.fcproj_w = o; o += 4 * C * c;
    l.n_decay = o;
    if (T > 1) {
        /* the split biases next, then what every rank holds whole (model.h) */
        l.qkv_b = o;    o += 3 * c;
        l.fc_b = o;     o += 4 * c;
        l.n_split = o;
        l.ln1_w = o;    o += C; /* (the LayerNorms in one run: gpt_tp_norm_params) */
        l.ln1_b = o;    o += C;
        l.ln2_w = o;    o += C;
        l.ln2_b = o;    o += C;
        l.proj_b = o;   o += C;
        l.fcproj_b = o; o += C;
        l.total = o;
        return l;
    }
    l.ln1_w = o;    o += C;
    l.ln1_b = o;    o += C;
    l.qkv_b = o;    o += 3 * C;
    l.proj_b = o;   o += C;
    l.ln2_w = o;    o += C;
    l.ln2_b = o;    o += C;
    l.fc_b = o;     o += 4 * C;
    l.fcproj_b = o; o += C;
    l.total = o;
    l.n_split = o;
    return l;
}

gpt_embed_layout gpt_embed_layout_of(const gpt_shape *sh)
{
    const size_t C = (size_t)sh->hidden;
    gpt_embed_layout e;
    size_t o = 0;
    e.wte = o;   o += (size_t)gpt_vocab_rows(sh) * C;
    e.n_split = gpt_tp_of(sh) > 1 ? o : 0;
    e.wpe = o;   o += (size_t)sh->seq * C;
    e.n_decay = o;
    e.lnf_w = o; o += C;
    e.lnf_b = o; o += C;
    e.total = o;
    if (gpt_tp_of(sh) <= 1) e.n_split = o;
    return e;
}

int gpt_vocab_rows(const gpt_shape *sh) { return sh->vocab_padded / gpt_tp_of(sh); }

int gpt_stream_rows(const gpt_shape *sh)
{
    const int N = sh->batch * sh->seq;
    return sh->sp && gpt_tp_of(sh) > 1 ? N / gpt_tp_of(sh) : N;
}

uint64_t gpt_param_count(const gpt_shape *sh)
{
    return (uint64_t)gpt_embed_layout_of(sh).total +
           (uint64_t)sh->layers * (uint64_t)gpt_layer_layout_of(sh).total;
}

double gpt_model_flops(const gpt_shape *sh)
{
    double P = (double)gpt_param_count(sh);
    double B = sh->batch, T = sh->seq, C = sh->hidden, L = sh->layers;
    return 6.0 * P * B * T + 12.0 * L * B * T * T * C;
}

/* Each pair of normals takes exactly one draw and splitmix64's state only advances by a
 * constant per draw, so the generator can jump to any pair: the tensor is filled in parallel
 * chunks (of an even length) with the same values as one sequential pass, whatever the
 * thread count (a 2048-wide layer is 50 M normals, seconds in one thread). */
static void fill_normal(float *x, size_t n, double std, rng *r)
{
    enum { CHUNK = 1 << 16 };
    const uint64_t start = r->state;
    const float s = (float)std;
    const ptrdiff_t nchunks = (ptrdiff_t)((n + CHUNK - 1) / CHUNK);
#pragma omp parallel for schedule(static)
    for (ptrdiff_t c = 0; c < nchunks; c++) {
        const size_t lo = (size_t)c * CHUNK, hi = lo + CHUNK < n ? lo + CHUNK : n;
        rng local = {start + (uint64_t)(lo / 2) * RNG_GOLDEN};
        for (size_t i = lo; i < hi; i += 2) {
            float a, b;
            rng_normal_pair_f(&local, &a, &b);
            x[i] = s * a;
            if (i + 1 < hi) x[i + 1] = s * b;
        }
    }
    r->state = start + (uint64_t)((n + 1) / 2) * RNG_GOLDEN;
}

static void fill_value(float *x, size_t n, float v)
{
    for (size_t i = 0; i < n; i++) x[i] = v;
}

/* Stream ids of rng_for(seed, block, tensor): block 0 is the embedding, 1 + l layer l. */
enum { TENSOR_WTE, TENSOR_WPE, TENSOR_QKV, TENSOR_PROJ, TENSOR_FC, TENSOR_FCPROJ };

void gpt_init_embed(float *p, const gpt_shape *sh, uint64_t seed)
{
    const size_t C = (size_t)sh->hidden;
    gpt_embed_layout e = gpt_embed_layout_of(sh);
    rng r = rng_for(seed, 0, TENSOR_WTE);
    fill_normal(p + e.wte, (size_t)sh->vocab_padded * C, 0.02, &r);
    r = rng_for(seed, 0, TENSOR_WPE);
    fill_normal(p + e.wpe, (size_t)sh->seq * C, 0.02, &r);
    fill_value(p + e.lnf_w, C, 1.0f);
    fill_value(p + e.lnf_b, C, 0.0f);
}

void gpt_init_layer(float *p, const gpt_shape *sh, int layer, uint64_t seed)
{
    const size_t C = (size_t)sh->hidden;
    const uint64_t block = 1 + (uint64_t)layer;
    /* Megatron scales the init of the projections that feed the residual stream by
     * 1/sqrt(2L) so the stream's variance does not grow with depth. */
    const double std = 0.02, std_out = 0.02 / sqrt(2.0 * sh->layers);
    gpt_layer_layout l = gpt_layer_layout_of(sh);
    rng r = rng_for(seed, block, TENSOR_QKV);
    fill_normal(p + l.qkv_w, 3 * C * C, std, &r);
    r = rng_for(seed, block, TENSOR_PROJ);
    fill_normal(p + l.proj_w, C * C, std_out, &r);
    r = rng_for(seed, block, TENSOR_FC);
    fill_normal(p + l.fc_w, 4 * C * C, std, &r);
    r = rng_for(seed, block, TENSOR_FCPROJ);
    fill_normal(p + l.fcproj_w, 4 * C * C, std_out, &r);
    fill_value(p + l.n_decay, l.total - l.n_decay, 0.0f);
    fill_value(p + l.ln1_w, C, 1.0f);
    fill_value(p + l.ln2_w, C, 1.0f);
}

/* ---- activations ------------------------------------------------------------------- */

static size_t rows(const gpt_shape *sh) { return (size_t)sh->batch * sh->seq; }
/* One float per (batch, head, query): the attention's softmax statistics. */
static size_t att_rows(const gpt_shape *sh)
{
    return (size_t)sh->batch * (sh->heads / gpt_tp_of(sh)) * sh->seq;
}

/* Each carved tensor starts on this boundary: vector loads and cuBLASLt's fastest kernels
 * want 16 bytes at least, whatever the element type and the shape. */
#define CARVE_ALIGN ((size_t)256)
static size_t round_up(size_t bytes) { return (bytes + CARVE_ALIGN - 1) / CARVE_ALIGN * CARVE_ALIGN; }

/* A bump allocator over a block: with base NULL it only counts (the *_bytes functions),
 * so that sizes and carves come from one list and cannot disagree. */
typedef struct carver {
    char *base;
    size_t used;
} carver;

static void *take(carver *c, size_t bytes)
{
    void *p = c->base ? c->base + c->used : NULL;
    c->used += round_up(bytes);
    return p;
}

/* A layer's activations from two carvers: the ones a layer keeps under selective
 * recompute (the GEMM outputs) from kept, the others from work; one carver for both gives
 * the whole struct in one block (the order of the members within each part is fixed). */
static void layer_acts_carve_split(gpt_layer_acts *a, carver *kept, carver *work,
                                   const gpt_shape *sh, gpt_dtype dt)
{
    const size_t N = rows(sh), C = (size_t)sh->hidden, e = gpt_dtype_size(dt);
    const size_t c = C / (size_t)gpt_tp_of(sh); /* a rank's channels of the heads and the MLP */
    const size_t n = (size_t)gpt_stream_rows(sh); /* its rows of the residual stream */
    a->ln1 = take(work, N * C * e);
    a->ln1_mean = take(work, n * sizeof(float));
    a->ln1_rstd = take(work, n * sizeof(float));
    a->qkv = take(kept, 3 * N * c * e);
    a->att_lse = take(work, att_rows(sh) * sizeof(float));
    a->atty = take(work, N * c * e);
    a->res2 = take(kept, n * C * e);
    a->ln2 = take(work, N * C * e);
    a->ln2_mean = take(work, n * sizeof(float));
    a->ln2_rstd = take(work, n * sizeof(float));
    a->fch = take(kept, 4 * N * c * e);
    a->fch_gelu = take(work, 4 * N * c * e);
    a->recompute = GPT_RECOMPUTE_FULL;
}

static size_t layer_acts_carve(gpt_layer_acts *a, void *base, const gpt_shape *sh, gpt_dtype dt)
{
    carver c = {base, 0};
    layer_acts_carve_split(a, &c, &c, sh, dt);
    return c.used;
}

/* Bytes of the selective split: *kept (a layer's own), *work (the working set). */
static void selective_bytes(const gpt_shape *sh, gpt_dtype dt, size_t *kept, size_t *work)
{
    gpt_layer_acts a;
    carver k = {NULL, 0}, w = {NULL, 0};
    layer_acts_carve_split(&a, &k, &w, sh, dt);
    *kept = k.used;
    *work = w.used;
}

/* att_delta fp32 whatever the element type; full (sequence parallelism only) of it. */
static size_t layer_scratch_carve(gpt_layer_scratch *a, void *base, const gpt_shape *sh,
                                  gpt_dtype dt)
{
    carver c = {base, 0};
    a->att_delta = take(&c, att_rows(sh) * sizeof(float));
    a->full = gpt_stream_rows(sh) < (int)rows(sh) ? take(&c, rows(sh) * (size_t)sh->hidden * gpt_dtype_size(dt)) : NULL;
    return c.used;
}

int gpt_head_chunk_rows(const gpt_shape *sh, gpt_dtype dt)
{
    const size_t N = rows(sh), row_bytes = (size_t)gpt_vocab_rows(sh) * gpt_dtype_size(dt);
    const size_t chunks = (N * row_bytes + GPT_HEAD_CHUNK_BYTES - 1) / GPT_HEAD_CHUNK_BYTES;
    /* Equal chunks, rounded up to 64 rows (the GEMMs' tiles) but never past N. */
    size_t r = (N + chunks - 1) / chunks;
    r = (r + 63) / 64 * 64;
    return (int)(r < N ? r : N);
}

static size_t head_acts_carve(gpt_head_acts *a, void *base, const gpt_shape *sh, gpt_dtype dt,
                              int chunk_rows)
{
    const size_t N = rows(sh), C = (size_t)sh->hidden, e = gpt_dtype_size(dt);
    carver c = {base, 0};
    a->lnf = take(&c, N * C * e);
    a->lnf_mean = take(&c, N * sizeof(float));
    a->lnf_rstd = take(&c, N * sizeof(float));
    a->losses = take(&c, N * sizeof(float));
    a->logits = take(&c, (size_t)chunk_rows * (size_t)gpt_vocab_rows(sh) * e);
    /* every rank's cross-entropy stats of a chunk (gpt_crossentropy_stats) */
    a->ce_stats = gpt_tp_of(sh) > 1 ? take(&c, (size_t)gpt_tp_of(sh) * chunk_rows * 3 * sizeof(float)) : NULL;
    a->chunk_rows = chunk_rows;
    a->grad_divisor = 1;
    return c.used;
}

size_t gpt_layer_acts_bytes(const gpt_shape *sh, gpt_dtype dtype)
{
    gpt_layer_acts a;
    return layer_acts_carve(&a, NULL, sh, dtype);
}

const char *gpt_recompute_name(gpt_recompute r)
{
    return r == GPT_RECOMPUTE_NONE ? "none" : r == GPT_RECOMPUTE_SELECTIVE ? "selective" : "full";
}

int gpt_recompute_parse(const char *text, gpt_recompute *out)
{
    for (int m = 0; m < GPT_RECOMPUTE_MODES; m++)
        if (text && strcmp(text, gpt_recompute_name((gpt_recompute)m)) == 0) {
            *out = (gpt_recompute)m;
            return 0;
        }
    return -1;
}

size_t gpt_layer_kept_bytes(const gpt_shape *sh, gpt_dtype dtype, gpt_recompute mode)
{
    size_t kept, work;
    if (mode == GPT_RECOMPUTE_FULL) return 0;
    if (mode == GPT_RECOMPUTE_NONE) return gpt_layer_acts_bytes(sh, dtype);
    selective_bytes(sh, dtype, &kept, &work);
    return kept;
}

/* The working set's bytes under mode (0 with none). */
static size_t layers_work_bytes(const gpt_shape *sh, gpt_dtype dtype, gpt_recompute mode)
{
    size_t kept, work;
    if (mode == GPT_RECOMPUTE_NONE) return 0;
    if (mode == GPT_RECOMPUTE_FULL) return gpt_layer_acts_bytes(sh, dtype);
    selective_bytes(sh, dtype, &kept, &work);
    return work;
}

size_t gpt_layers_acts_bytes(const gpt_shape *sh, gpt_dtype dtype, gpt_recompute mode, int layers)
{
    return layers_work_bytes(sh, dtype, mode) + (size_t)layers * gpt_layer_kept_bytes(sh, dtype, mode);
}

void gpt_layers_acts_carve(gpt_layer_acts *a, void *base, const gpt_shape *sh, gpt_dtype dtype,
                           gpt_recompute mode, int layer)
{
    char *own = (char *)base + layers_work_bytes(sh, dtype, mode) +
                (size_t)layer * gpt_layer_kept_bytes(sh, dtype, mode);
    if (mode != GPT_RECOMPUTE_SELECTIVE) {
        layer_acts_carve(a, mode == GPT_RECOMPUTE_FULL ? base : own, sh, dtype);
    } else {
        carver kept = {own, 0}, work = {base, 0};
        layer_acts_carve_split(a, &kept, &work, sh, dtype);
    }
    a->recompute = mode;
}

void gpt_layers_acts_carve_backward(gpt_layer_acts *a, void *base, const gpt_shape *sh,
                                    gpt_dtype dtype, gpt_recompute mode, int layer)
{
    gpt_layers_acts_carve(a, base, sh, dtype, mode, layer);
    if (layer == sh->layers - 1) a->recompute = GPT_RECOMPUTE_NONE;
}

size_t gpt_layer_scratch_bytes(const gpt_shape *sh, gpt_dtype dtype)
{
    gpt_layer_scratch a;
    return layer_scratch_carve(&a, NULL, sh, dtype);
}
size_t gpt_head_acts_bytes(const gpt_shape *sh, gpt_dtype dtype)
{
    return gpt_head_acts_bytes_rows(sh, dtype, gpt_head_chunk_rows(sh, dtype));
}
size_t gpt_head_acts_bytes_rows(const gpt_shape *sh, gpt_dtype dtype, int chunk_rows)
{
    gpt_head_acts a;
    return head_acts_carve(&a, NULL, sh, dtype, chunk_rows);
}
void gpt_layer_acts_carve_as(gpt_layer_acts *a, void *base, const gpt_shape *sh, gpt_dtype dtype)
{
    layer_acts_carve(a, base, sh, dtype);
}
void gpt_layer_scratch_carve_as(gpt_layer_scratch *a, void *base, const gpt_shape *sh,
                                gpt_dtype dtype)
{
    layer_scratch_carve(a, base, sh, dtype);
}
void gpt_head_acts_carve_as(gpt_head_acts *a, void *base, const gpt_shape *sh, gpt_dtype dtype)
{
    head_acts_carve(a, base, sh, dtype, gpt_head_chunk_rows(sh, dtype));
}
void gpt_head_acts_carve_rows(gpt_head_acts *a, void *base, const gpt_shape *sh, gpt_dtype dtype,
                              int chunk_rows)
{
    head_acts_carve(a, base, sh, dtype, chunk_rows);
}

/* fp32 forms: the byte sizes are multiples of CARVE_ALIGN, so whole floats. */
size_t gpt_layer_acts_floats(const gpt_shape *sh)
{
    return gpt_layer_acts_bytes(sh, GPT_F32) / sizeof(float);
}
size_t gpt_layer_scratch_floats(const gpt_shape *sh)
{
    return gpt_layer_scratch_bytes(sh, GPT_F32) / sizeof(float);
}
size_t gpt_head_acts_floats(const gpt_shape *sh)
{
    return gpt_head_acts_bytes(sh, GPT_F32) / sizeof(float);
}
void gpt_layer_acts_carve(gpt_layer_acts *a, float *base, const gpt_shape *sh)
{
    layer_acts_carve(a, base, sh, GPT_F32);
}
void gpt_layer_scratch_carve(gpt_layer_scratch *a, float *base, const gpt_shape *sh)
{
    layer_scratch_carve(a, base, sh, GPT_F32);
}
void gpt_head_acts_carve(gpt_head_acts *a, float *base, const gpt_shape *sh)
{
    head_acts_carve(a, base, sh, GPT_F32, gpt_head_chunk_rows(sh, GPT_F32));
}

/* ---- compute ----------------------------------------------------------------------- */

void gpt_embed_forward(gpt_stream *s, const gpt_shape *sh, const void *ep,
                       const int32_t *tokens, void *x0)
{
    gpt_embed_layout e = gpt_embed_layout_of(sh);
    gpt_encoder_forward(s, x0, tokens, gpt_act_cel(s, ep, e.wte), gpt_act_cel(s, ep, e.wpe), sh->batch, sh->seq,
                        sh->hidden);
}

void gpt_embed_backward(gpt_stream *s, const gpt_shape *sh, float *eg, const void *dx0,
                        const int32_t *tokens)
{
    gpt_embed_layout e = gpt_embed_layout_of(sh);
    gpt_encoder_backward(s, eg + e.wte, eg + e.wpe, dx0, tokens, sh->batch, sh->seq,
                         sh->hidden);
}

void gpt_embed_grads_join(gpt_stream *s, float *embed_grads, const float *embed_in_grads, size_t n)
{
    gpt_add_f32(s, embed_grads, embed_grads, embed_in_grads, n);
}

void gpt_layer_forward(gpt_stream *s, const gpt_shape *sh, const void *p, const void *x_in,
                       void *x_out, gpt_layer_acts *a)
{
    const int B = sh->batch, T = sh->seq, C = sh->hidden, NH = sh->heads, N = B * T;
    gpt_layer_layout l = gpt_layer_layout_of(sh);

    gpt_layernorm_forward(s, a->ln1, a->ln1_mean, a->ln1_rstd, x_in, gpt_act_cel(s, p, l.ln1_w),
                          gpt_act_cel(s, p, l.ln1_b), N, C);
    gpt_matmul_forward(s, a->qkv, a->ln1, gpt_act_cel(s, p, l.qkv_w), gpt_act_cel(s, p, l.qkv_b), N, C, 3 * C);
    gpt_attention_forward(s, a->atty, a->att_lse, a->qkv, B, T, C, NH);
    /* The projection lands in res2 and the residual is added in place: no buffer for the
     * projection itself, which the backward never needs. */
    gpt_matmul_forward(s, a->res2, a->atty, gpt_act_cel(s, p, l.proj_w), gpt_act_cel(s, p, l.proj_b), N, C, C);
    gpt_residual_layernorm_forward(s, a->res2, a->ln2, a->ln2_mean, a->ln2_rstd, x_in, a->res2,
                                   gpt_act_cel(s, p, l.ln2_w), gpt_act_cel(s, p, l.ln2_b), N, C);
    if (a->recompute == GPT_RECOMPUTE_SELECTIVE) {
        gpt_matmul_forward(s, a->fch, a->ln2, gpt_act_cel(s, p, l.fc_w), gpt_act_cel(s, p, l.fc_b), N, C, 4 * C);
        gpt_gelu_forward(s, a->fch_gelu, a->fch, (size_t)N * 4 * C);
    } else {
        gpt_matmul_forward_gelu(s, a->fch_gelu, a->fch, a->ln2, gpt_act_cel(s, p, l.fc_w),
                                gpt_act_cel(s, p, l.fc_b), N, C, 4 * C);
    }
    /* A recompute needs the activations only: the output projection (a third of the
     * layer's matmul FLOPs) would be thrown away. */
    if (x_out == NULL) return;
    gpt_matmul_forward_residual(s, x_out, a->fch_gelu, gpt_act_cel(s, p, l.fcproj_w),
                                gpt_act_cel(s, p, l.fcproj_b), a->res2, N, 4 * C, C);
}

/* Selective recompute: what the forward computed from x_in and the kept GEMM outputs, by
 * the same ops on the same inputs (ln2 from res2 as the fused residual + LayerNorm made it:
 * that op normalises the sum it stored, gpt.h), so the same bits. */
static void layer_recompute_selective(gpt_stream *s, const gpt_shape *sh, const void *p,
                                      const void *x_in, gpt_layer_acts *a)
{
    const int B = sh->batch, T = sh->seq, C = sh->hidden, NH = sh->heads, N = B * T;
    gpt_layer_layout l = gpt_layer_layout_of(sh);
    gpt_layernorm_forward(s, a->ln1, a->ln1_mean, a->ln1_rstd, x_in, gpt_act_cel(s, p, l.ln1_w),
                          gpt_act_cel(s, p, l.ln1_b), N, C);
    gpt_attention_forward(s, a->atty, a->att_lse, a->qkv, B, T, C, NH);
    gpt_layernorm_forward(s, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, gpt_act_cel(s, p, l.ln2_w),
                          gpt_act_cel(s, p, l.ln2_b), N, C);
    gpt_gelu_forward(s, a->fch_gelu, a->fch, (size_t)N * 4 * C);
}

void gpt_layer_recompute(gpt_stream *s, const gpt_shape *sh, const void *p, const void *x_in,
                         gpt_layer_acts *a, gpt_recompute mode)
{
    /* (full: the recomputed output is not needed, so it is not computed) */
    if (mode == GPT_RECOMPUTE_FULL) gpt_layer_forward(s, sh, p, x_in, NULL, a);
    if (mode == GPT_RECOMPUTE_SELECTIVE) layer_recompute_selective(s, sh, p, x_in, a);
}

void gpt_layer_backward(gpt_stream *s, const gpt_shape *sh, const void *p, float *g,
                        const void *x_in, void *dres, gpt_layer_acts *a,
                        const gpt_layer_scratch *sc, gpt_grad_write gw)
{
    const int B = sh->batch, T = sh->seq, C = sh->hidden, NH = sh->heads, N = B * T;
    gpt_layer_layout l = gpt_layer_layout_of(sh);

    gpt_layer_recompute(s, sh, p, x_in, a, a->recompute);

    /* The activation gradients live in activations that are dead when they are written
     * (each is read for the last time by the op before, or, for fch_gelu, by the dw of the
     * same op, which runs before its dinp: gpt.h):
     *   d_fch (N,4C)  in fch_gelu   the MLP gradient, carried through the GELU to fch
     *   d_c   (N,C)   in fch[0, NC)   dln2, then datty, then dln1
     *   d_qkv (N,3C)  in fch[NC, 4NC)
     * so the backward needs no (N,4C) or (N,3C) buffer beside the layer's activations. */
    const size_t NC = (size_t)N * C;
    void *d_fch = a->fch_gelu, *d_c = a->fch, *d_qkv = gpt_act_el(s, a->fch, NC);

    /* dres flows unchanged through both residual connections; each branch adds to it. */
    gpt_matmul_backward_gelu(s, d_fch, g + l.fcproj_w, g + l.fcproj_b, dres, a->fch_gelu,
                             gpt_act_cel(s, p, l.fcproj_w), a->fch, N, 4 * C, C, gw);
    gpt_matmul_backward(s, d_c, g + l.fc_w, g + l.fc_b, d_fch, a->ln2, gpt_act_cel(s, p, l.fc_w), N, C,
                        4 * C, gw);
    gpt_layernorm_backward(s, dres, g + l.ln2_w, g + l.ln2_b, d_c, a->res2, gpt_act_cel(s, p, l.ln2_w),
                           a->ln2_mean, a->ln2_rstd, N, C, gw);
    gpt_matmul_backward(s, d_c, g + l.proj_w, g + l.proj_b, dres, a->atty, gpt_act_cel(s, p, l.proj_w),
                        N, C, C, gw);
    gpt_attention_backward(s, d_qkv, sc->att_delta, d_c, a->qkv, a->atty, a->att_lse, B, T, C,
                           NH);
    gpt_matmul_backward(s, d_c, g + l.qkv_w, g + l.qkv_b, d_qkv, a->ln1, gpt_act_cel(s, p, l.qkv_w), N,
                        C, 3 * C, gw);
    gpt_layernorm_backward(s, dres, g + l.ln1_w, g + l.ln1_b, d_c, x_in, gpt_act_cel(s, p, l.ln1_w),
                           a->ln1_mean, a->ln1_rstd, N, C, gw);
}

void gpt_head_forward(gpt_stream *s, const gpt_shape *sh, const void *ep, float *eg,
                      const void *xL, const int32_t *targets, gpt_head_acts *h)
{
    const int N = sh->batch * sh->seq, C = sh->hidden, Vp = sh->vocab_padded;
    gpt_embed_layout e = gpt_embed_layout_of(sh);
    gpt_layernorm_forward(s, h->lnf, h->lnf_mean, h->lnf_rstd, xL, gpt_act_cel(s, ep, e.lnf_w),
                          gpt_act_cel(s, ep, e.lnf_b), N, C);
    for (int r0 = 0; r0 < N; r0 += h->chunk_rows) {
        const int rows_here = N - r0 < h->chunk_rows ? N - r0 : h->chunk_rows;
        const size_t at = (size_t)r0 * C;
        gpt_matmul_forward(s, h->logits, gpt_act_cel(s, h->lnf, at), gpt_act_cel(s, ep, e.wte), NULL, rows_here,
                           C, Vp);
        /* loss = mean(losses): each token's loss weighs 1/N in it, and 1/(N D) in the mean
         * over the D micro-batches (of every rank) whose gradients are summed. */
        const float dloss = h->grad_divisor <= 1 ? 1.0f / (float)N
                                                 : (float)(1.0 / ((double)N * h->grad_divisor));
        gpt_crossentropy_forward_backward(s, h->losses + r0, h->logits, targets + r0, dloss,
                                          rows_here, sh->vocab, Vp);
        /* dlnf over lnf's rows: the op reads them for wte's gradient before writing */
        gpt_matmul_backward(s, gpt_act_el(s, h->lnf, at), eg + e.wte, NULL, h->logits,
                            gpt_act_cel(s, h->lnf, at), gpt_act_cel(s, ep, e.wte), rows_here, C, Vp,
                            GPT_GRAD_ACCUMULATE);
    }
}

void gpt_head_backward(gpt_stream *s, const gpt_shape *sh, const void *ep, float *eg,
                       const void *xL, gpt_head_acts *h, void *dres)
{
    const int N = sh->batch * sh->seq, C = sh->hidden;
    gpt_embed_layout e = gpt_embed_layout_of(sh);
    gpt_stream_memset_zero(s, dres, gpt_act_bytes((size_t)N * C, gpt_stream_dtype(s)));
    gpt_layernorm_backward(s, dres, eg + e.lnf_w, eg + e.lnf_b, h->lnf, xL, gpt_act_cel(s, ep, e.lnf_w),
                           h->lnf_mean, h->lnf_rstd, N, C, GPT_GRAD_ACCUMULATE);
}

/* ---- optimizer ----------------------------------------------------------------------- */

gpt_optim gpt_optim_default(void)
{
    gpt_optim o = {
        .lr = 1.5e-4,
        .min_lr = 1.0e-5,
        .decay_iters = 320000,
        .warmup_fraction = 0.01,
        .beta1 = 0.9,
        .beta2 = 0.999,
        .eps = 1e-8,
        .weight_decay = 0.01,
        .clip = 1.0,
    };
    return o;
}

double gpt_lr_at(const gpt_optim *o, int it)
{
    const double warmup = o->warmup_fraction * o->decay_iters;
    if (warmup > 0 && it <= warmup) return o->lr * it / warmup;
    if (it > o->decay_iters) return o->min_lr;
    const double ratio = (it - warmup) / (o->decay_iters - warmup);
    const double coeff = 0.5 * (cos(M_PI * ratio) + 1.0);
    return o->min_lr + coeff * (o->lr - o->min_lr);
}

float gpt_clip_scale(const gpt_optim *o, double grad_norm)
{
    if (o->clip <= 0) return 1.0f;
    double coeff = o->clip / (grad_norm + 1.0e-6);
    return coeff < 1.0 ? (float)coeff : 1.0f;
}

void gpt_block_adamw(gpt_stream *s, float *p, const float *g, float *m, float *v, size_t n,
                     size_t n_decay, const gpt_optim *o, float lr, int t, float grad_scale)
{
    gpt_block_adamw_act(s, p, NULL, g, m, v, n, n_decay, o, lr, t, grad_scale);
}

void gpt_block_adamw_act(gpt_stream *s, float *p, void *p_act, const float *g, float *m,
                         float *v, size_t n, size_t n_decay, const gpt_optim *o, float lr, int t,
                         float grad_scale)
{
    gpt_adamw_update_act(s, p, p_act, g, m, v, n_decay, lr, (float)o->beta1, (float)o->beta2,
                         (float)o->eps, (float)o->weight_decay, t, grad_scale);
    gpt_adamw_update_act(s, p + n_decay, p_act ? gpt_act_el(s, p_act, n_decay) : NULL, g + n_decay,
                         m + n_decay, v + n_decay, n - n_decay, lr, (float)o->beta1,
                         (float)o->beta2, (float)o->eps, 0.0f, t, grad_scale);
}

double gpt_combine_norms(const float *sq, int nblocks)
{
    double sum = 0.0;
    for (int i = 0; i < nblocks; i++) sum += (double)sq[i];
    return sqrt(sum);
}

double gpt_mean_loss(const float *losses, int n)
{
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += (double)losses[i];
    return sum / n;
}

/* ---- the whole model in one place ----------------------------------------------------- */

static gpt_layer_acts resident_acts(gpt_stream *s, const gpt_shape *sh, gpt_resident *r,
                                    int layer)
{
    gpt_layer_acts a;
    gpt_layers_acts_carve(&a, r->layer_acts, sh, gpt_stream_dtype(s), r->recompute, layer);
    return a;
}

/* The parameters the ops read: the working copy when there is one. */
static const void *resident_wparams(const gpt_resident *r)
{
    return r->wparams ? r->wparams : (const void *)r->params;
}

void gpt_resident_forward(gpt_stream *s, const gpt_shape *sh, gpt_resident *r)
{
    const size_t NC = rows(sh) * (size_t)sh->hidden;
    const size_t lsize = gpt_layer_layout_of(sh).total, etotal = gpt_embed_layout_of(sh).total;
    const void *wp = resident_wparams(r);
    gpt_embed_forward(s, sh, wp, r->tokens, r->layer_inputs);
    for (int l = 0; l < sh->layers; l++) {
        gpt_layer_acts a = resident_acts(s, sh, r, l);
        gpt_layer_forward(s, sh, gpt_act_cel(s, wp, etotal + (size_t)l * lsize),
                          gpt_act_el(s, r->layer_inputs, (size_t)l * NC),
                          gpt_act_el(s, r->layer_inputs, (size_t)(l + 1) * NC), &a);
    }
    gpt_head_forward(s, sh, wp, r->grads, gpt_act_el(s, r->layer_inputs, (size_t)sh->layers * NC),
                     r->targets, &r->head);
}

int gpt_resident_backward(gpt_stream *s, const gpt_shape *sh, gpt_resident *r)
{
    const size_t NC = rows(sh) * (size_t)sh->hidden;
    const size_t lsize = gpt_layer_layout_of(sh).total, etotal = gpt_embed_layout_of(sh).total;
    const void *wp = resident_wparams(r);
    gpt_head_backward(s, sh, wp, r->grads, gpt_act_el(s, r->layer_inputs, (size_t)sh->layers * NC),
                      &r->head, r->dres);
    for (int l = sh->layers - 1; l >= 0; l--) {
        gpt_layer_acts a = resident_acts(s, sh, r, l);
        gpt_layer_backward(s, sh, gpt_act_cel(s, wp, etotal + (size_t)l * lsize),
                           r->grads + etotal + (size_t)l * lsize,
                           gpt_act_el(s, r->layer_inputs, (size_t)l * NC), r->dres, &a, &r->scratch,
                           GPT_GRAD_ACCUMULATE);
    }
    /* (one micro-batch: the embedding's part of this backward alone, joined to the head's) */
    const int rc = gpt_stream_memset_zero(s, r->embed_in_grads, etotal * sizeof(float));
    if (rc != GPT_OK) return rc;
    gpt_embed_backward(s, sh, r->embed_in_grads, r->dres, r->tokens);
    gpt_embed_grads_join(s, r->grads, r->embed_in_grads, etotal);
    return GPT_OK;
}

void gpt_resident_block_norms(gpt_stream *s, const gpt_shape *sh, const float *grads,
                              float *block_norms)
{
    const size_t lsize = gpt_layer_layout_of(sh).total, etotal = gpt_embed_layout_of(sh).total;
    gpt_norm_squared(s, block_norms, grads, etotal);
    for (int l = 0; l < sh->layers; l++)
        gpt_norm_squared(s, block_norms + 1 + l, grads + etotal + (size_t)l * lsize, lsize);
}

void gpt_resident_adamw(gpt_stream *s, const gpt_shape *sh, float *params, void *wparams,
                        const float *grads, float *m, float *v, const gpt_optim *o, float lr,
                        int t, float grad_scale)
{
    gpt_layer_layout ll = gpt_layer_layout_of(sh);
    gpt_embed_layout e = gpt_embed_layout_of(sh);
    gpt_block_adamw_act(s, params, wparams, grads, m, v, e.total, e.n_decay, o, lr, t,
                        grad_scale);
    for (int l = 0; l < sh->layers; l++) {
        size_t off = e.total + (size_t)l * ll.total;
        gpt_block_adamw_act(s, params + off, wparams ? gpt_act_el(s, wparams, off) : NULL, grads + off,
                            m + off, v + off, ll.total, ll.n_decay, o, lr, t, grad_scale);
    }
}
