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

/* Element i of an array of the stream's activation type. */
static const void *cel(const gpt_stream *s, const void *base, size_t i)
{
    return (const char *)base + i * gpt_dtype_size(gpt_stream_dtype(s));
}
static void *el(const gpt_stream *s, void *base, size_t i)
{
    return (char *)base + i * gpt_dtype_size(gpt_stream_dtype(s));
}

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

/* ---- compute ------------------------------------------------------------------------- */

int gpt_embed_forward_tp(gpt_stream *s, const gpt_shape *sh, const gpt_tp *tp, const void *ep,
                         const int32_t *tokens, void *x0)
{
    if (gpt_tp_ranks(tp) == 1) {
        gpt_embed_forward(s, sh, ep, tokens, x0);
        return GPT_OK;
    }
    const gpt_embed_layout e = gpt_embed_layout_of(sh);
    const int rows = gpt_vocab_rows(sh);
    /* the positions once (rank 0), each token's row from the rank that holds it */
    gpt_encoder_forward_vocab(s, x0, tokens, cel(s, ep, e.wte), tp->rank == 0 ? cel(s, ep, e.wpe) : NULL,
                              sh->batch, sh->seq, sh->hidden, tp->rank * rows, rows);
    return tp->all_reduce(tp->ctx, s, x0, (size_t)sh->batch * sh->seq * sh->hidden);
}

void gpt_embed_backward_tp(gpt_stream *s, const gpt_shape *sh, const gpt_tp *tp, float *eg,
                           const void *dx0, const int32_t *tokens)
{
    if (gpt_tp_ranks(tp) == 1) {
        gpt_embed_backward(s, sh, eg, dx0, tokens);
        return;
    }
    const gpt_embed_layout e = gpt_embed_layout_of(sh);
    const int rows = gpt_vocab_rows(sh);
    /* (dx0 is whole on every rank: every rank makes the same wpe gradient) */
    gpt_encoder_backward_vocab(s, eg + e.wte, eg + e.wpe, dx0, tokens, sh->batch, sh->seq, sh->hidden,
                               tp->rank * rows, rows);
}

int gpt_layer_forward_tp(gpt_stream *s, const gpt_shape *sh, const gpt_tp *tp, const void *p,
                         const void *x_in, void *x_out, gpt_layer_acts *a)
{
    if (gpt_tp_ranks(tp) == 1) {
        gpt_layer_forward(s, sh, p, x_in, x_out, a);
        return GPT_OK;
    }
    const int T = gpt_tp_ranks(tp), B = sh->batch, S = sh->seq, C = sh->hidden, c = C / T, N = B * S;
    const gpt_layer_layout l = gpt_layer_layout_of(sh);
    const size_t NC = (size_t)N * C;
    int rc;
    gpt_layernorm_forward(s, a->ln1, a->ln1_mean, a->ln1_rstd, x_in, cel(s, p, l.ln1_w), cel(s, p, l.ln1_b), N, C);
    gpt_matmul_forward(s, a->qkv, a->ln1, cel(s, p, l.qkv_w), cel(s, p, l.qkv_b), N, C, 3 * c);
    gpt_attention_forward(s, a->atty, a->att_lse, a->qkv, B, S, c, sh->heads / T);
    gpt_matmul_forward(s, a->res2, a->atty, cel(s, p, l.proj_w), tp->rank == 0 ? cel(s, p, l.proj_b) : NULL, N, c,
                       C);
    if ((rc = tp->all_reduce(tp->ctx, s, a->res2, NC))) return rc;
    gpt_residual_layernorm_forward(s, a->res2, a->ln2, a->ln2_mean, a->ln2_rstd, x_in, a->res2, cel(s, p, l.ln2_w),
                                   cel(s, p, l.ln2_b), N, C);
    if (a->recompute == GPT_RECOMPUTE_SELECTIVE) {
        gpt_matmul_forward(s, a->fch, a->ln2, cel(s, p, l.fc_w), cel(s, p, l.fc_b), N, C, 4 * c);
        gpt_gelu_forward(s, a->fch_gelu, a->fch, (size_t)N * 4 * c);
    } else {
        gpt_matmul_forward_gelu(s, a->fch_gelu, a->fch, a->ln2, cel(s, p, l.fc_w), cel(s, p, l.fc_b), N, C, 4 * c);
    }
    if (x_out == NULL) return GPT_OK;
    gpt_matmul_forward(s, x_out, a->fch_gelu, cel(s, p, l.fcproj_w), tp->rank == 0 ? cel(s, p, l.fcproj_b) : NULL,
                       N, 4 * c, C);
    if ((rc = tp->all_reduce(tp->ctx, s, x_out, NC))) return rc;
    gpt_residual_forward(s, x_out, a->res2, x_out, NC);
    return GPT_OK;
}

/* Selective recompute of a rank's share: the LayerNorms, its heads' attention, its GELU. */
static void layer_recompute_selective_tp(gpt_stream *s, const gpt_shape *sh, int T, const void *p,
                                         const void *x_in, gpt_layer_acts *a)
{
    const int B = sh->batch, S = sh->seq, C = sh->hidden, c = C / T, N = B * S;
    const gpt_layer_layout l = gpt_layer_layout_of(sh);
    gpt_layernorm_forward(s, a->ln1, a->ln1_mean, a->ln1_rstd, x_in, cel(s, p, l.ln1_w), cel(s, p, l.ln1_b), N, C);
    gpt_attention_forward(s, a->atty, a->att_lse, a->qkv, B, S, c, sh->heads / T);
    gpt_layernorm_forward(s, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, cel(s, p, l.ln2_w), cel(s, p, l.ln2_b), N,
                          C);
    gpt_gelu_forward(s, a->fch_gelu, a->fch, (size_t)N * 4 * c);
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
    const gpt_layer_layout l = gpt_layer_layout_of(sh);
    const size_t NC = (size_t)N * C;
    int rc;
    if (a->recompute == GPT_RECOMPUTE_FULL && (rc = gpt_layer_forward_tp(s, sh, tp, p, x_in, NULL, a))) return rc;
    if (a->recompute == GPT_RECOMPUTE_SELECTIVE) layer_recompute_selective_tp(s, sh, T, p, x_in, a);
    /* Where the gradients go (each over an activation dead by then): d_fch in fch_gelu; the
     * whole-width dL/d(ln2) and dL/d(ln1) over ln2 and ln1 themselves (a matmul's dinp may be
     * its inp: gpt.h), which the all-reduce needs whole; datty (N, c) and dqkv (N, 3c) in fch. */
    void *d_fch = a->fch_gelu, *d_att = a->fch, *d_qkv = el(s, a->fch, (size_t)N * c);
    gpt_matmul_backward_gelu(s, d_fch, g + l.fcproj_w, g + l.fcproj_b, dres, a->fch_gelu, cel(s, p, l.fcproj_w),
                             a->fch, N, 4 * c, C, gw);
    gpt_matmul_backward(s, a->ln2, g + l.fc_w, g + l.fc_b, d_fch, a->ln2, cel(s, p, l.fc_w), N, C, 4 * c, gw);
    if ((rc = tp->all_reduce(tp->ctx, s, a->ln2, NC))) return rc;
    gpt_layernorm_backward(s, dres, g + l.ln2_w, g + l.ln2_b, a->ln2, a->res2, cel(s, p, l.ln2_w), a->ln2_mean,
                           a->ln2_rstd, N, C, gw);
    gpt_matmul_backward(s, d_att, g + l.proj_w, g + l.proj_b, dres, a->atty, cel(s, p, l.proj_w), N, c, C, gw);
    gpt_attention_backward(s, d_qkv, sc->att_delta, d_att, a->qkv, a->atty, a->att_lse, B, S, c, sh->heads / T);
    gpt_matmul_backward(s, a->ln1, g + l.qkv_w, g + l.qkv_b, d_qkv, a->ln1, cel(s, p, l.qkv_w), N, C, 3 * c, gw);
    if ((rc = tp->all_reduce(tp->ctx, s, a->ln1, NC))) return rc;
    gpt_layernorm_backward(s, dres, g + l.ln1_w, g + l.ln1_b, a->ln1, x_in, cel(s, p, l.ln1_w), a->ln1_mean,
                           a->ln1_rstd, N, C, gw);
    return GPT_OK;
}

int gpt_head_forward_tp(gpt_stream *s, const gpt_shape *sh, const gpt_tp *tp, const void *ep, float *eg,
                        const void *xL, const int32_t *targets, gpt_head_acts *h)
{
    if (gpt_tp_ranks(tp) == 1) {
        gpt_head_forward(s, sh, ep, eg, xL, targets, h);
        return GPT_OK;
    }
    const int N = sh->batch * sh->seq, C = sh->hidden, T = gpt_tp_ranks(tp);
    const int Vr = gpt_vocab_rows(sh), lo = tp->rank * Vr;
    /* this rank's real columns: the vocabulary's ids from lo, up to V (none on a rank of padding) */
    const int Vreal = sh->vocab - lo < 0 ? 0 : sh->vocab - lo < Vr ? sh->vocab - lo : Vr;
    const gpt_embed_layout e = gpt_embed_layout_of(sh);
    int rc;
    gpt_layernorm_forward(s, h->lnf, h->lnf_mean, h->lnf_rstd, xL, cel(s, ep, e.lnf_w), cel(s, ep, e.lnf_b), N, C);
    for (int r0 = 0; r0 < N; r0 += h->chunk_rows) {
        const int rows_here = N - r0 < h->chunk_rows ? N - r0 : h->chunk_rows;
        const size_t at = (size_t)r0 * C, stats = (size_t)rows_here * 3;
        gpt_matmul_forward(s, h->logits, cel(s, h->lnf, at), cel(s, ep, e.wte), NULL, rows_here, C, Vr);
        gpt_crossentropy_stats(s, h->ce_stats + (size_t)tp->rank * stats, h->logits, targets + r0, rows_here, Vreal,
                               Vr, lo);
        if ((rc = tp->all_gather(tp->ctx, s, h->ce_stats, h->ce_stats + (size_t)tp->rank * stats,
                                 stats * sizeof(float))))
            return rc;
        const float dloss = h->grad_divisor <= 1 ? 1.0f / (float)N : (float)(1.0 / ((double)N * h->grad_divisor));
        gpt_crossentropy_parallel(s, h->losses + r0, h->logits, targets + r0, h->ce_stats, T, dloss, rows_here, Vreal,
                                  Vr, lo);
        gpt_matmul_backward(s, el(s, h->lnf, at), eg + e.wte, NULL, h->logits, cel(s, h->lnf, at), cel(s, ep, e.wte),
                            rows_here, C, Vr, GPT_GRAD_ACCUMULATE);
        if ((rc = tp->all_reduce(tp->ctx, s, el(s, h->lnf, at), (size_t)rows_here * C))) return rc;
    }
    return GPT_OK;
}
