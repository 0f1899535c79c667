/*
 * model_tp.c — the GPT of model.c split over T tensor-parallel ranks, as Megatron splits it.
 *
 * What each rank holds of a layer (C channels, c = C / T, the heads NH / T of its own):
 *   qkv_w   rows: its heads' q, k and v rows (3c, C)       column-parallel, qkv_b split the same
 *   proj_w  columns: its heads' channels (C, c)             row-parallel, proj_b whole
 *   fc_w    rows [r 4c, (r + 1) 4c) (4c, C)                 column-parallel, fc_b split the same
 *   fcproj_w columns [r 4c, (r + 1) 4c) (C, 4c)             row-parallel, fcproj_b whole
 *   ln1, ln2 whole (replicated)
 * and of the embedding block: rows [r Vp / T, (r + 1) Vp / T) of the tied wte (vocabulary
 * parallel), wpe and the final LayerNorm whole.  Every rank holds the whole residual stream
 * (N, C) and its LayerNorms' outputs.
 *
 * Communication (tp->all_reduce / all_gather, queued on the stream in its order):
 *   forward   the embedding's rows (each rank adds the rows it holds, zeros for the others, so
 *             the sum is exact); after the attention projection and after the MLP's second
 *             matmul, the partial products (the row-parallel sums), one all-reduce each
 *   backward  dL/d(ln2) after the MLP's first matmul and dL/d(ln1) after qkv's (the
 *             column-parallel inputs' gradients), one all-reduce each
 *   head      per chunk of rows: every rank's cross-entropy stats gathered (gpt.h's
 *             vocabulary-parallel cross-entropy), and dL/d(lnf) all-reduced
 * So the only arithmetic that differs from one rank is the order of the row-parallel sums,
 * the column-parallel input gradients and the cross-entropy's softmax denominator: the
 * partial sums of T slices added, where one rank adds the slices' terms in one run.  The
 * biases of row-parallel layers are added by rank 0 only, before the reduction.
 */
#include "model.h"

#include <string.h>

int gpt_tp_ranks(const gpt_tp *tp) { return tp && tp->world > 1 ? tp->world : 1; }

/* ---- the split of the parameters ------------------------------------------------------ */

/* n floats between the whole block and the rank's share, the way the copy goes. */
static void move(float *whole, float *part, size_t n, int to_part)
{
    if (to_part) memcpy(part, whole, n * sizeof(float));
    else memcpy(whole, part, n * sizeof(float));
}

/* Rows [r0, r0 + nr) of a (rows, cols) matrix (whole) <-> a (nr, cols) one (part). */
static void move_rows(float *whole, float *part, size_t r0, size_t nr, size_t cols, int to_part)
{
    move(whole + r0 * cols, part, nr * cols, to_part);
}

/* Columns [c0, c0 + nc) of a (rows, cols) matrix <-> a (rows, nc) one. */
static void move_cols(float *whole, float *part, size_t rows, size_t cols, size_t c0, size_t nc, int to_part)
{
    for (size_t i = 0; i < rows; i++) move(whole + i * cols + c0, part + i * nc, nc, to_part);
}

void gpt_tp_move_block(float *whole, float *part, const gpt_shape *sh, int rank, int embed, int to_part)
{
    gpt_shape one = *sh;
    one.tp = 0;
    const size_t C = (size_t)sh->hidden, c = C / (size_t)gpt_tp_of(sh), r = (size_t)rank;
    if (embed) {
        const gpt_embed_layout w = gpt_embed_layout_of(&one), p = gpt_embed_layout_of(sh);
        const size_t rows = (size_t)gpt_vocab_rows(sh);
        move_rows(whole + w.wte, part + p.wte, r * rows, rows, C, to_part);
        move(whole + w.wpe, part + p.wpe, w.total - w.wpe, to_part); /* wpe, lnf_w, lnf_b */
        return;
    }
    const gpt_layer_layout w = gpt_layer_layout_of(&one), p = gpt_layer_layout_of(sh);
    for (size_t part_of = 0; part_of < 3; part_of++) { /* q, k, v: each its heads' rows */
        move_rows(whole + w.qkv_w, part + p.qkv_w + part_of * c * C, part_of * C + r * c, c, C, to_part);
        move(whole + w.qkv_b + part_of * C + r * c, part + p.qkv_b + part_of * c, c, to_part);
    }
    move_cols(whole + w.proj_w, part + p.proj_w, C, C, r * c, c, to_part);
    move_rows(whole + w.fc_w, part + p.fc_w, r * 4 * c, 4 * c, C, to_part);
    move(whole + w.fc_b + r * 4 * c, part + p.fc_b, 4 * c, to_part);
    move_cols(whole + w.fcproj_w, part + p.fcproj_w, C, 4 * C, r * 4 * c, 4 * c, to_part);
    const size_t whole_of[] = {w.ln1_w, w.ln1_b, w.proj_b, w.ln2_w, w.ln2_b, w.fcproj_b};
    const size_t part_of_[] = {p.ln1_w, p.ln1_b, p.proj_b, p.ln2_w, p.ln2_b, p.fcproj_b};
    for (size_t i = 0; i < sizeof whole_of / sizeof whole_of[0]; i++)
        move(whole + whole_of[i], part + part_of_[i], C, to_part);
}

size_t gpt_tp_norm_params(const gpt_shape *sh, int embed, size_t *at)
{
    const size_t C = (size_t)sh->hidden;
    *at = embed ? gpt_embed_layout_of(sh).lnf_w : gpt_layer_layout_of(sh).ln1_w;
    return embed ? 2 * C : 4 * C; /* (lnf_w, lnf_b; ln1_w, ln1_b, ln2_w, ln2_b: one run each) */
}

/* ---- compute ------------------------------------------------------------------------- */

static int seq_parallel(const gpt_tp *tp) { return gpt_tp_ranks(tp) > 1 && tp->sequence; }

/* This rank's rows of a whole (N, C) activation (all of it without sequence parallelism). */
static void *my_rows(gpt_stream *s, const gpt_shape *sh, const gpt_tp *tp, void *whole)
{
    return seq_parallel(tp) ? gpt_act_el(s, whole, (size_t)tp->rank * gpt_stream_rows(sh) * sh->hidden) : whole;
}

/* whole (N, C) = every rank's rows, from this rank's `mine` (which may be its place in whole):
 * the input of a column-parallel matmul under sequence parallelism.  Nothing without it. */
static int gather_rows(gpt_stream *s, const gpt_shape *sh, const gpt_tp *tp, void *whole, const void *mine)
{
    if (!seq_parallel(tp)) return GPT_OK;
    const size_t bytes = gpt_act_bytes((size_t)gpt_stream_rows(sh) * sh->hidden, gpt_stream_dtype(s));
    return tp->all_gather(tp->ctx, s, whole, mine, bytes);
}

/* The sum over the ranks of partial (N, C) products, into dest: the whole of it (all-reduce,
 * dest == partial) or this rank's rows of it (sequence parallelism: reduce-scatter, dest of
 * gpt_stream_rows rows; partial may be where dest's rows are). */
static int sum_rows(gpt_stream *s, const gpt_shape *sh, const gpt_tp *tp, void *dest, void *partial)
{
    const size_t C = (size_t)sh->hidden;
    if (seq_parallel(tp)) return tp->reduce_scatter(tp->ctx, s, dest, partial, (size_t)gpt_stream_rows(sh) * C);
    return tp->all_reduce(tp->ctx, s, partial, (size_t)sh->batch * sh->seq * C);
}

int gpt_embed_forward_tp(gpt_stream *s, const gpt_shape *sh, const gpt_tp *tp, const void *ep,
                         const int32_t *tokens, void *x0, const gpt_layer_scratch *sc)
{
    if (gpt_tp_ranks(tp) == 1) {
        gpt_embed_forward(s, sh, ep, tokens, x0);
        return GPT_OK;
    }
    const gpt_embed_layout e = gpt_embed_layout_of(sh);
    const int rows = gpt_vocab_rows(sh);
    void *whole = seq_parallel(tp) ? sc->full : x0;
    /* the positions once (rank 0), each token's row from the rank that holds it */
    gpt_encoder_forward_vocab(s, whole, tokens, gpt_act_cel(s, ep, e.wte), tp->rank == 0 ? gpt_act_cel(s, ep, e.wpe) : NULL,
                              sh->batch, sh->seq, sh->hidden, tp->rank * rows, rows);
    return sum_rows(s, sh, tp, x0, whole);
}

int gpt_embed_backward_tp(gpt_stream *s, const gpt_shape *sh, const gpt_tp *tp, float *eg, const void *dx0,
                          const int32_t *tokens, const gpt_layer_scratch *sc)
{
    if (gpt_tp_ranks(tp) == 1) {
        gpt_embed_backward(s, sh, eg, dx0, tokens);
        return GPT_OK;
    }
    const gpt_embed_layout e = gpt_embed_layout_of(sh);
    const int rows = gpt_vocab_rows(sh);
    int rc;
    if (seq_parallel(tp)) {
        if ((rc = gather_rows(s, sh, tp, sc->full, dx0))) return rc;
        dx0 = sc->full;
    }
    /* (dx0 is whole on every rank: every rank makes the same wpe gradient) */
    gpt_encoder_backward_vocab(s, eg + e.wte, eg + e.wpe, dx0, tokens, sh->batch, sh->seq, sh->hidden,
                               tp->rank * rows, rows);
    return GPT_OK;
}

/* A LayerNorm of this rank's rows of the stream into its rows of ln, then ln gathered whole. */
static int norm_and_gather(gpt_stream *s, const gpt_shape *sh, const gpt_tp *tp, void *ln, float *mean, float *rstd,
                           const void *x, const void *w, const void *b)
{
    void *mine = my_rows(s, sh, tp, ln);
    gpt_layernorm_forward(s, mine, mean, rstd, x, w, b, gpt_stream_rows(sh), sh->hidden);
    return gather_rows(s, sh, tp, ln, mine);
}

int gpt_layer_forward_tp(gpt_stream *s, const gpt_shape *sh, const gpt_tp *tp, const void *p, const void *x_in,
                         void *x_out, gpt_layer_acts *a, const gpt_layer_scratch *sc)
{
    if (gpt_tp_ranks(tp) == 1) {
        gpt_layer_forward(s, sh, p, x_in, x_out, a);
        return GPT_OK;
    }
    const int T = gpt_tp_ranks(tp), B = sh->batch, S = sh->seq, C = sh->hidden, c = C / T, N = B * S;
    const int n = gpt_stream_rows(sh), sp = seq_parallel(tp);
    const gpt_layer_layout l = gpt_layer_layout_of(sh);
    int rc;
    if ((rc = norm_and_gather(s, sh, tp, a->ln1, a->ln1_mean, a->ln1_rstd, x_in, gpt_act_cel(s, p, l.ln1_w),
                              gpt_act_cel(s, p, l.ln1_b))))
        return rc;
    gpt_matmul_forward(s, a->qkv, a->ln1, gpt_act_cel(s, p, l.qkv_w), gpt_act_cel(s, p, l.qkv_b), N, C, 3 * c);
    gpt_attention_forward(s, a->atty, a->att_lse, a->qkv, B, S, c, sh->heads / T);
    /* the projection's partial product (res2 itself without sequence parallelism) */
    void *proj = sp ? sc->full : a->res2;
    gpt_matmul_forward(s, proj, a->atty, gpt_act_cel(s, p, l.proj_w), tp->rank == 0 ? gpt_act_cel(s, p, l.proj_b) : NULL, N, c, C);
    if ((rc = sum_rows(s, sh, tp, a->res2, proj))) return rc;
    void *ln2_mine = my_rows(s, sh, tp, a->ln2);
    gpt_residual_layernorm_forward(s, a->res2, ln2_mine, a->ln2_mean, a->ln2_rstd, x_in, a->res2, gpt_act_cel(s, p, l.ln2_w),
                                   gpt_act_cel(s, p, l.ln2_b), n, C);
    if ((rc = gather_rows(s, sh, tp, a->ln2, ln2_mine))) return rc;
    if (a->recompute == GPT_RECOMPUTE_SELECTIVE) {
        gpt_matmul_forward(s, a->fch, a->ln2, gpt_act_cel(s, p, l.fc_w), gpt_act_cel(s, p, l.fc_b), N, C, 4 * c);
        gpt_gelu_forward(s, a->fch_gelu, a->fch, (size_t)N * 4 * c);
    } else {
        gpt_matmul_forward_gelu(s, a->fch_gelu, a->fch, a->ln2, gpt_act_cel(s, p, l.fc_w), gpt_act_cel(s, p, l.fc_b), N, C, 4 * c);
    }
    if (x_out == NULL) return GPT_OK;
    void *mlp = sp ? sc->full : x_out;
    gpt_matmul_forward(s, mlp, a->fch_gelu, gpt_act_cel(s, p, l.fcproj_w), tp->rank == 0 ? gpt_act_cel(s, p, l.fcproj_b) : NULL, N,
                       4 * c, C);
    if ((rc = sum_rows(s, sh, tp, x_out, mlp))) return rc;
    gpt_residual_forward(s, x_out, a->res2, x_out, (size_t)n * C);
    return GPT_OK;
}

/* Selective recompute of a rank's share: the LayerNorms (gathered again under sequence
 * parallelism), its heads' attention, its GELU. */
static int layer_recompute_selective_tp(gpt_stream *s, const gpt_shape *sh, const gpt_tp *tp, const void *p,
                                        const void *x_in, gpt_layer_acts *a)
{
    const int T = gpt_tp_ranks(tp), B = sh->batch, S = sh->seq, C = sh->hidden, c = C / T, N = B * S;
    const gpt_layer_layout l = gpt_layer_layout_of(sh);
    int rc;
    if ((rc = norm_and_gather(s, sh, tp, a->ln1, a->ln1_mean, a->ln1_rstd, x_in, gpt_act_cel(s, p, l.ln1_w),
                              gpt_act_cel(s, p, l.ln1_b))))
        return rc;
    gpt_attention_forward(s, a->atty, a->att_lse, a->qkv, B, S, c, sh->heads / T);
    if ((rc = norm_and_gather(s, sh, tp, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, gpt_act_cel(s, p, l.ln2_w),
                              gpt_act_cel(s, p, l.ln2_b))))
        return rc;
    gpt_gelu_forward(s, a->fch_gelu, a->fch, (size_t)N * 4 * c);
    return GPT_OK;
}

int gpt_layer_backward_tp(gpt_stream *s, const gpt_shape *sh, const gpt_tp *tp, const void *p, float *g,
                          const void *x_in, void *dres, gpt_layer_acts *a, const gpt_layer_scratch *sc,
                          gpt_grad_write gw)
{
    if (gpt_tp_ranks(tp) == 1) {
        gpt_layer_backward(s, sh, p, g, x_in, dres, a, sc, gw);
        return GPT_OK;
    }
    const int T = gpt_tp_ranks(tp), B = sh->batch, S = sh->seq, C = sh->hidden, c = C / T, N = B * S;
    const int n = gpt_stream_rows(sh), sp = seq_parallel(tp);
    const gpt_layer_layout l = gpt_layer_layout_of(sh);
    int rc;
    if (a->recompute == GPT_RECOMPUTE_FULL && (rc = gpt_layer_forward_tp(s, sh, tp, p, x_in, NULL, a, sc))) return rc;
    if (a->recompute == GPT_RECOMPUTE_SELECTIVE && (rc = layer_recompute_selective_tp(s, sh, tp, p, x_in, a)))
        return rc;
    /* Where the gradients go (each over an activation dead by then): d_fch in fch_gelu; the
     * whole-width dL/d(ln2) and dL/d(ln1) over ln2 and ln1 themselves (a matmul's dinp may be
     * its inp: gpt.h), which the reduction needs whole; datty (N, c) and dqkv (N, 3c) in fch;
     * under sequence parallelism the gathered residual gradient in the scratch's full buffer. */
    void *d_fch = a->fch_gelu, *d_att = a->fch, *d_qkv = gpt_act_el(s, a->fch, (size_t)N * c);
    const void *dout = dres;
    if (sp && (rc = gather_rows(s, sh, tp, sc->full, dres))) return rc;
    if (sp) dout = sc->full;
    gpt_matmul_backward_gelu(s, d_fch, g + l.fcproj_w, g + l.fcproj_b, dout, a->fch_gelu, gpt_act_cel(s, p, l.fcproj_w),
                             a->fch, N, 4 * c, C, gw);
    gpt_matmul_backward(s, a->ln2, g + l.fc_w, g + l.fc_b, d_fch, a->ln2, gpt_act_cel(s, p, l.fc_w), N, C, 4 * c, gw);
    void *d_ln2 = my_rows(s, sh, tp, a->ln2);
    if ((rc = sum_rows(s, sh, tp, d_ln2, a->ln2))) return rc;
    gpt_layernorm_backward(s, dres, g + l.ln2_w, g + l.ln2_b, d_ln2, a->res2, gpt_act_cel(s, p, l.ln2_w), a->ln2_mean,
                           a->ln2_rstd, n, C, gw);
    if (sp && (rc = gather_rows(s, sh, tp, sc->full, dres))) return rc;
    gpt_matmul_backward(s, d_att, g + l.proj_w, g + l.proj_b, dout, a->atty, gpt_act_cel(s, p, l.proj_w), N, c, C, gw);
    gpt_attention_backward(s, d_qkv, sc->att_delta, d_att, a->qkv, a->atty, a->att_lse, B, S, c, sh->heads / T);
    gpt_matmul_backward(s, a->ln1, g + l.qkv_w, g + l.qkv_b, d_qkv, a->ln1, gpt_act_cel(s, p, l.qkv_w), N, C, 3 * c, gw);
    void *d_ln1 = my_rows(s, sh, tp, a->ln1);
    if ((rc = sum_rows(s, sh, tp, d_ln1, a->ln1))) return rc;
    gpt_layernorm_backward(s, dres, g + l.ln1_w, g + l.ln1_b, d_ln1, x_in, gpt_act_cel(s, p, l.ln1_w), a->ln1_mean,
                           a->ln1_rstd, n, C, gw);
    return GPT_OK;
}

int gpt_head_forward_tp(gpt_stream *s, const gpt_shape *sh, const gpt_tp *tp, const void *ep, float *eg,
                        const void *xL, const int32_t *targets, gpt_head_acts *h)
{
    if (gpt_tp_ranks(tp) == 1) {
        gpt_head_forward(s, sh, ep, eg, xL, targets, h);
        return GPT_OK;
    }
    const int N = sh->batch * sh->seq, C = sh->hidden, T = gpt_tp_ranks(tp), sp = seq_parallel(tp);
    const int Vr = gpt_vocab_rows(sh), lo = tp->rank * Vr;
    /* this rank's real columns: the vocabulary's ids from lo, up to V (none on a rank of padding) */
    const int Vreal = sh->vocab - lo < 0 ? 0 : sh->vocab - lo < Vr ? sh->vocab - lo : Vr;
    const gpt_embed_layout e = gpt_embed_layout_of(sh);
    int rc;
    if ((rc = norm_and_gather(s, sh, tp, h->lnf, h->lnf_mean, h->lnf_rstd, xL, gpt_act_cel(s, ep, e.lnf_w),
                              gpt_act_cel(s, ep, e.lnf_b))))
        return rc;
    for (int r0 = 0; r0 < N; r0 += h->chunk_rows) {
        const int rows_here = N - r0 < h->chunk_rows ? N - r0 : h->chunk_rows;
        const size_t at = (size_t)r0 * C, stats = (size_t)rows_here * 3;
        gpt_matmul_forward(s, h->logits, gpt_act_cel(s, h->lnf, at), gpt_act_cel(s, ep, e.wte), NULL, rows_here, C, Vr);
        gpt_crossentropy_stats(s, h->ce_stats + (size_t)tp->rank * stats, h->logits, targets + r0, rows_here, Vreal,
                               Vr, lo);
        if ((rc = tp->all_gather(tp->ctx, s, h->ce_stats, h->ce_stats + (size_t)tp->rank * stats,
                                 stats * sizeof(float))))
            return rc;
        const float dloss = h->grad_divisor <= 1 ? 1.0f / (float)N : (float)(1.0 / ((double)N * h->grad_divisor));
        gpt_crossentropy_parallel(s, h->losses + r0, h->logits, targets + r0, h->ce_stats, T, dloss, rows_here, Vreal,
                                  Vr, lo);
        gpt_matmul_backward(s, gpt_act_el(s, h->lnf, at), eg + e.wte, NULL, h->logits, gpt_act_cel(s, h->lnf, at), gpt_act_cel(s, ep, e.wte),
                            rows_here, C, Vr, GPT_GRAD_ACCUMULATE);
        if (!sp && (rc = tp->all_reduce(tp->ctx, s, gpt_act_el(s, h->lnf, at), (size_t)rows_here * C))) return rc;
    }
    /* (sequence parallelism: dL/d(lnf) summed once, each rank its rows) */
    return sp ? sum_rows(s, sh, tp, my_rows(s, sh, tp, h->lnf), h->lnf) : GPT_OK;
}

void gpt_head_backward_tp(gpt_stream *s, const gpt_shape *sh, const gpt_tp *tp, const void *ep, float *eg,
                          const void *xL, gpt_head_acts *h, void *dres)
{
    if (!seq_parallel(tp)) {
        gpt_head_backward(s, sh, ep, eg, xL, h, dres);
        return;
    }
    const int n = gpt_stream_rows(sh), C = sh->hidden;
    const gpt_embed_layout e = gpt_embed_layout_of(sh);
    gpt_stream_memset_zero(s, dres, gpt_act_bytes((size_t)n * C, gpt_stream_dtype(s)));
    gpt_layernorm_backward(s, dres, eg + e.lnf_w, eg + e.lnf_b, my_rows(s, sh, tp, h->lnf), xL, gpt_act_cel(s, ep, e.lnf_w),
                           h->lnf_mean, h->lnf_rstd, n, C, GPT_GRAD_ACCUMULATE);
}
