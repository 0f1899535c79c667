/*
 * model.h — the Megatron GPT of every engine, written once over the kernel API (gpt.h).
 *
 * Shapes and parameter layout.  The parameters live in blocks that each move with one copy:
 *
 *   embed block  [ wte (Vp,C) | wpe (T,C) || lnf_w (C) | lnf_b (C) ]
 *   layer block  [ qkv_w (3C,C) | proj_w (C,C) | fc_w (4C,C) | fcproj_w (C,4C) ||
 *                  ln1_w | ln1_b | qkv_b (3C) | proj_b | ln2_w | ln2_b | fc_b (4C) | fcproj_b ]
 *
 * The tensors before "||" take weight decay, those after do not (biases and LayerNorm, as
 * Megatron does), so AdamW is two calls per block.  Gradients and Adam's m and v use the same
 * layout, so a block's params, grads, m, v are four equal-length arrays.
 *
 * An engine decides where each block lives and in what order things run; this file only says
 * what one layer (or the embedding, or the head) computes, given device pointers.
 */
#ifndef AEBENCH_MODEL_H
#define AEBENCH_MODEL_H

#include "gpt.h"

#include <stdint.h>

typedef struct gpt_shape {
    int layers;       /* L */
    int hidden;       /* C */
    int heads;        /* NH */
    int seq;          /* T */
    int batch;        /* B (micro-batch per rank) */
    int vocab;        /* V: real vocabulary */
    int vocab_padded; /* Vp: V rounded up to a multiple of 128, as Megatron pads */
    /* Tensor-parallel ranks (0 or 1: none): with T > 1 the shape is one rank's share, and the
     * layouts, activations and buffers below are that rank's (model_tp.c's split). */
    int tp;
    /* With T > 1, sequence parallelism (Megatron's): the residual stream between the layers'
     * split parts is this rank's rows [r N / T, (r + 1) N / T) only (the layer inputs, the
     * LayerNorms' statistics, res2), gathered whole before the column-parallel matmuls and
     * reduce-scattered after the row-parallel ones. */
    int sp;
} gpt_shape;

/* sh->tp, 1 for none */
int gpt_tp_of(const gpt_shape *sh);
/* Rows of the word embedding a rank holds: Vp / T (its vocabulary-parallel share). */
int gpt_vocab_rows(const gpt_shape *sh);

/* Vocabulary padded as Megatron does (make-vocab-size-divisible-by 128). */
int gpt_pad_vocab(int vocab);

/* Offsets (in floats) of each tensor inside a layer block. */
typedef struct gpt_layer_layout {
    size_t qkv_w, proj_w, fc_w, fcproj_w;
    size_t ln1_w, ln1_b, qkv_b, proj_b, ln2_w, ln2_b, fc_b, fcproj_b;
    size_t n_decay; /* floats [0, n_decay) take weight decay */
    /* floats [0, n_split) are this rank's share of tensors split over the tensor-parallel
     * ranks, the rest (LayerNorms, the row-parallel biases) whole on every rank; with T > 1
     * the split biases qkv_b and fc_b come first after n_decay.  total without T. */
    size_t n_split;
    size_t total;   /* 12 C^2 + 13 C */
} gpt_layer_layout;

typedef struct gpt_embed_layout {
    size_t wte, wpe, lnf_w, lnf_b;
    size_t n_decay;
    size_t n_split; /* [0, n_split): the rank's rows of wte (T > 1); total without T */
    size_t total; /* Vp C + T C + 2 C */
} gpt_embed_layout;

gpt_layer_layout gpt_layer_layout_of(const gpt_shape *sh);
gpt_embed_layout gpt_embed_layout_of(const gpt_shape *sh);
/* P = Vp C + T C + L (12 C^2 + 13 C) + 2 C, as Megatron counts (padded vocabulary). */
uint64_t gpt_param_count(const gpt_shape *sh);
/* Model FLOPs of one iteration (forward + backward, no recompute): 6 P B T + 12 L B T^2 C. */
double gpt_model_flops(const gpt_shape *sh);

/* Deterministic initialisation on the host (Megatron's: normal(0, 0.02), output
 * projections normal(0, 0.02/sqrt(2L)), biases 0, LayerNorm weight 1 and bias 0).  A layer's
 * values depend only on (seed, layer index). */
void gpt_init_embed(float *embed_block, const gpt_shape *sh, uint64_t seed);
void gpt_init_layer(float *layer_block, const gpt_shape *sh, int layer, uint64_t seed);

/* ---- activations ----------------------------------------------------------------------
 * Tensors typed void * hold the backend's activation type (gpt.h: be->dtype, fp32 or
 * bf16); float * members are fp32 in every type.  Sizes come from the *_bytes functions,
 * which know the type; each tensor of a carve starts on a 256-byte boundary. */

/* What a layer keeps from its forward for its backward (--recompute, Megatron's names).
 * Every mode keeps each layer's input x[l]; the backward of every mode computes the same
 * bits (what it recomputes, it recomputes with the same ops on the same inputs). */
typedef enum gpt_recompute {
    GPT_RECOMPUTE_FULL = 0,      /* nothing: the backward reruns the layer's forward (less its
                                    output projection), into one layer's working set (the
                                    artifact's activation checkpointing; the default, and what
                                    a zeroed configuration says) */
    GPT_RECOMPUTE_NONE = 1,      /* every activation, every layer: 15 N C + stats each */
    GPT_RECOMPUTE_SELECTIVE = 2, /* the GEMM outputs (qkv, res2, fch: 8 N C each layer); the
                                    backward recomputes the LayerNorms, the attention core and
                                    the GELU (cheap ops, no GEMM) into one working set */
    GPT_RECOMPUTE_MODES
} gpt_recompute;
/* "none", "full", "selective" */
const char *gpt_recompute_name(gpt_recompute r);
/* 0 and the mode named, or -1 when text names none. */
int gpt_recompute_parse(const char *text, gpt_recompute *out);

/* What one layer's forward keeps for its backward (N = B T rows): with --recompute full the
 * whole struct is one working set that every layer's recompute refills; with selective,
 * qkv, res2 and fch are the layer's own and the rest the shared working set; with none all
 * of it is the layer's own. */
typedef struct gpt_layer_acts {
    void *ln1;                        /* (N,C) */
    float *ln1_mean, *ln1_rstd;       /* (N), (N) */
    void *qkv;                        /* (N,3C) */
    float *att_lse;                   /* (B,NH,T) each query row's softmax log-denominator */
    void *atty;                       /* (N,C) attention output before the projection */
    void *res2;                       /* (N,C) x + attention projection */
    void *ln2;                        /* (N,C) */
    float *ln2_mean, *ln2_rstd;       /* (N), (N) */
    void *fch, *fch_gelu;             /* (N,4C) each */
    /* the mode the carve was for (gpt_layers_acts_carve; full for gpt_layer_acts_carve_as):
     * what the backward recomputes; under selective the forward's GELU is also an op of its
     * own rather than the GEMM's epilogue (the backward's recompute of fch_gelu from fch must
     * give the forward's bits, and a GPU GEMM epilogue's GELU cannot be rerun without its
     * GEMM) */
    gpt_recompute recompute;
} gpt_layer_acts;

/* Scratch for a layer's backward; shared by all layers.  The backward's activation
 * gradients need no buffers of their own: each goes where a forward activation that is
 * dead by then was (gpt_layer_backward), so a layer's backward needs its acts and this. */
typedef struct gpt_layer_scratch {
    float *att_delta; /* (B,NH,T) fp32: the attention backward's row terms */
    void *full;       /* (N,C) with sequence parallelism: a row-parallel product before its
                       * reduce-scatter, a gathered residual gradient (NULL without) */
} gpt_layer_scratch;

/* The head: final LayerNorm, tied logits, cross-entropy.  The logits are made, turned into
 * their gradient and consumed a chunk of rows at a time, so that no (N, Vp) buffer exists:
 * at GPT-2's vocabulary that buffer would be N x 201 KB in fp32 (786 MiB at b4 s1024). */
typedef struct gpt_head_acts {
    void *lnf;                        /* (N,C); after the forward, dL/dlnf (written over each
                                       * chunk's rows once its wte gradient has read them) */
    float *lnf_mean, *lnf_rstd;       /* (N), (N) */
    void *logits;                     /* (chunk_rows, Vp): one chunk's logits, then gradient */
    int chunk_rows;                   /* rows of tokens per chunk (the last may be shorter) */
    float *losses;                    /* (N) */
    float *ce_stats;                  /* (T, chunk_rows, 3) with T > 1 tensor-parallel ranks */
    /* Micro-batches (over all ranks) whose summed gradients make the step's: each token's
     * loss weighs 1/(N grad_divisor) in the gradient, so the sum is the mean (as Megatron
     * divides by micro-batches and data-parallel ranks).  The carve sets 1. */
    int grad_divisor;
} gpt_head_acts;

/* Rows per head chunk: the fewest chunks whose logits fit in GPT_HEAD_CHUNK_BYTES (each
 * chunk re-reads and re-writes the (Vp, C) wte gradient, so fewer is faster). */
#define GPT_HEAD_CHUNK_BYTES ((size_t)256 << 20)
int gpt_head_chunk_rows(const gpt_shape *sh, gpt_dtype dtype);

size_t gpt_layer_acts_bytes(const gpt_shape *sh, gpt_dtype dtype);
size_t gpt_layer_scratch_bytes(const gpt_shape *sh, gpt_dtype dtype);
size_t gpt_head_acts_bytes(const gpt_shape *sh, gpt_dtype dtype);
/* The head's buffers for chunks of chunk_rows rows (tests pick small chunks with it). */
size_t gpt_head_acts_bytes_rows(const gpt_shape *sh, gpt_dtype dtype, int chunk_rows);
/* Bytes of n activation elements (a layer's input (N,C), the residual gradient, ...). */
static inline size_t gpt_act_bytes(size_t n, gpt_dtype dtype) { return n * gpt_dtype_size(dtype); }
/* The activations of a model's layers under a recompute mode, in one block:
 * [ the working set the recompute refills | layer 0's own | layer 1's own | ... ]
 * (full: only the working set; none: only the layers' own; selective: both). */
size_t gpt_layers_acts_bytes(const gpt_shape *sh, gpt_dtype dtype, gpt_recompute mode, int layers);
/* Bytes each layer keeps of its own under mode (0 with full). */
size_t gpt_layer_kept_bytes(const gpt_shape *sh, gpt_dtype dtype, gpt_recompute mode);
/* Layer l's activations inside such a block (base: gpt_layers_acts_bytes of them), carved
 * for mode (acts->recompute: what their backward recomputes). */
void gpt_layers_acts_carve(gpt_layer_acts *a, void *base, const gpt_shape *sh, gpt_dtype dtype,
                           gpt_recompute mode, int layer);
/* The same for layer l's backward: the last layer's are taken as its forward left them, its
 * backward recomputing nothing (the same bits).  Every engine runs that backward right after
 * the layer's forward and the head, whose buffers are its own, so the working set still holds
 * what the forward made. */
void gpt_layers_acts_carve_backward(gpt_layer_acts *a, void *base, const gpt_shape *sh,
                                    gpt_dtype dtype, gpt_recompute mode, int layer);
/* Point the struct's members into base (which must hold the matching number of bytes). */
void gpt_layer_acts_carve_as(gpt_layer_acts *a, void *base, const gpt_shape *sh, gpt_dtype dtype);
void gpt_layer_scratch_carve_as(gpt_layer_scratch *a, void *base, const gpt_shape *sh,
                                gpt_dtype dtype);
void gpt_head_acts_carve_as(gpt_head_acts *a, void *base, const gpt_shape *sh, gpt_dtype dtype);
void gpt_head_acts_carve_rows(gpt_head_acts *a, void *base, const gpt_shape *sh, gpt_dtype dtype,
                              int chunk_rows);

/* The fp32 forms (sizes in floats), kept for fp32 callers. */
size_t gpt_layer_acts_floats(const gpt_shape *sh);
size_t gpt_layer_scratch_floats(const gpt_shape *sh);
size_t gpt_head_acts_floats(const gpt_shape *sh);
void gpt_layer_acts_carve(gpt_layer_acts *a, float *base, const gpt_shape *sh);
void gpt_layer_scratch_carve(gpt_layer_scratch *a, float *base, const gpt_shape *sh);
void gpt_head_acts_carve(gpt_head_acts *a, float *base, const gpt_shape *sh);

/* Element i of an array of the stream's activation type (parameters' working copies and
 * activations are addressed by element offsets, whatever their type). */
static inline const void *gpt_act_cel(const gpt_stream *s, const void *base, size_t i)
{
    return (const char *)base + i * gpt_dtype_size(gpt_stream_dtype(s));
}
static inline void *gpt_act_el(const gpt_stream *s, void *base, size_t i)
{
    return (char *)base + i * gpt_dtype_size(gpt_stream_dtype(s));
}

/* ---- compute ------------------------------------------------------------------------------
 * Every function takes the element type from the stream's backend (gpt_stream_dtype):
 * params here are the working copy the ops read (fp32 master weights on an fp32 backend,
 * their bf16 copy on a bf16 one), grads are always fp32. */

/* x0 (N,C) = token + position embeddings. */
void gpt_embed_forward(gpt_stream *s, const gpt_shape *sh, const void *embed_params,
                       const int32_t *tokens, void *x0);
/* Embedding gradients += from dx0 (N,C).
 *
 * The tied word embedding's gradient has two parts, which every engine keeps apart over a
 * step, as Megatron does under pipeline parallelism (the embedding on the first stage, the
 * head on the last): the head's (gpt_head_forward/backward accumulate the logits' and the
 * final LayerNorm's into the embedding block's gradient) and the embedding's (this function:
 * the tokens' rows and the positions), accumulated over the step's micro-batches in a block of
 * its own and added to the head's once, after the last (gpt_embed_grads_join).  So the sum is
 * the same whether both parts live on one rank or on two pipeline stages. */
void gpt_embed_backward(gpt_stream *s, const gpt_shape *sh, float *embed_grads,
                        const void *dx0, const int32_t *tokens);

/* One transformer layer: x_out (N,C) = layer(x_in); fills acts for the backward.  x_out
 * NULL: only the activations the backward reads (the output projection is skipped: the
 * recompute of a checkpointed layer). */
/* After the step's last embedding backward: embed_grads (the head's part) += embed_in_grads
 * (the embedding's), n floats (the block, or its padded length: padding is zero in both). */
void gpt_embed_grads_join(gpt_stream *s, float *embed_grads, const float *embed_in_grads, size_t n);

void gpt_layer_forward(gpt_stream *s, const gpt_shape *sh, const void *layer_params,
                       const void *x_in, void *x_out, gpt_layer_acts *acts);
/* What the backward of mode recomputes before it runs (full: the forward less its output
 * projection; selective: the LayerNorms, the attention core and the GELU; none: nothing), into
 * acts; gpt_layer_backward does it first.  --calibrate times it alone. */
void gpt_layer_recompute(gpt_stream *s, const gpt_shape *sh, const void *layer_params,
                         const void *x_in, gpt_layer_acts *acts, gpt_recompute mode);
/* One layer's backward.  dres (N,C) holds dL/dx_out on entry and dL/dx_in on return;
 * layer_grads accumulate (gw GPT_GRAD_ACCUMULATE) or are overwritten, every one of them
 * (GPT_GRAD_OVERWRITE: the first micro-batch of an engine that would otherwise zero them
 * first; the padding past the layer's own floats is not touched).  acts must hold what acts->recompute kept of this layer's forward
 * of x_in: full reruns the forward into acts first, selective recomputes the LayerNorms, the
 * attention and the GELU from the kept GEMM outputs, none recomputes nothing.  The backward
 * consumes acts: its activation gradients are written over them. */
void gpt_layer_backward(gpt_stream *s, const gpt_shape *sh, const void *layer_params,
                        float *layer_grads, const void *x_in, void *dres, gpt_layer_acts *acts,
                        const gpt_layer_scratch *scratch, gpt_grad_write gw);

/* Head forward, and the part of its backward that needs the logits, chunk by chunk of
 * rows: final LayerNorm of xL; per chunk, logits = lnf wte^T, the per-token losses and the
 * logits' gradient for loss = mean(losses) (one cross-entropy pass), dlnf = dlogits wte (in
 * place of lnf, which the chunk no longer needs), and the tied wte's gradient, accumulated
 * into embed_grads (which must hold zeros or earlier contributions: every engine zeroes its
 * embedding grads before the forward).  The same FLOPs as a forward then backward, with one
 * chunk of logits alive instead of all of them. */
void gpt_head_forward(gpt_stream *s, const gpt_shape *sh, const void *embed_params,
                      float *embed_grads, const void *xL, const int32_t *targets,
                      gpt_head_acts *head);
/* Head backward: overwrites dres (N,C) with dL/dxL (the final LayerNorm's backward of the
 * dlnf the forward left in head->lnf) and accumulates the LayerNorm's grads into embed_grads. */
void gpt_head_backward(gpt_stream *s, const gpt_shape *sh, const void *embed_params,
                       float *embed_grads, const void *xL, gpt_head_acts *head, void *dres);

/* ---- tensor parallelism (model_tp.c) ------------------------------------------------------
 * The same model split over T ranks (sh->tp = T: every size above is one rank's).  Where the
 * split needs the other ranks the functions call the group's collectives, queued on s in its
 * order; they return 0 or what a collective returned.  tp NULL or of one rank: exactly the
 * functions above. */
typedef struct gpt_tp {
    int rank, world;
    int sequence; /* sequence parallelism (sh->sp): the rows of the residual stream split */
    /* buf (n elements of the stream's activation type) = the sum of every rank's buf */
    int (*all_reduce)(void *ctx, gpt_stream *s, void *buf, size_t n);
    /* out (world x bytes) = every rank's in, in rank order (in may be out + rank x bytes) */
    int (*all_gather)(void *ctx, gpt_stream *s, void *out, const void *in, size_t bytes);
    /* out (n elements of the activation type) = the sum over the ranks of in's block rank
     * (in: world x n; out may be in + rank x n) */
    int (*reduce_scatter)(void *ctx, gpt_stream *s, void *out, const void *in, size_t n);
    void *ctx;
} gpt_tp;
/* Rows of the residual stream a rank holds: N, or N / T with sequence parallelism. */
int gpt_stream_rows(const gpt_shape *sh);

/* tp's ranks, 1 for NULL */
int gpt_tp_ranks(const gpt_tp *tp);
/* Block (embed: the embedding block, else a layer's) between its whole form (whole, the
 * layout of one rank) and rank's share of it (part, sh's layout): to_part 1 copies whole's
 * values into part, 0 part's into whole (the tensors every rank holds whole as well). */
void gpt_tp_move_block(float *whole, float *part, const gpt_shape *sh, int rank, int embed, int to_part);
/* (sc: the layers' scratch, whose full buffer sequence parallelism needs) */
int gpt_embed_forward_tp(gpt_stream *s, const gpt_shape *sh, const gpt_tp *tp, const void *embed_params,
                         const int32_t *tokens, void *x0, const gpt_layer_scratch *sc);
int gpt_embed_backward_tp(gpt_stream *s, const gpt_shape *sh, const gpt_tp *tp, float *embed_grads,
                          const void *dx0, const int32_t *tokens, const gpt_layer_scratch *sc);
int gpt_layer_forward_tp(gpt_stream *s, const gpt_shape *sh, const gpt_tp *tp, const void *layer_params,
                         const void *x_in, void *x_out, gpt_layer_acts *acts, const gpt_layer_scratch *scratch);
/* (recomputes as acts->recompute says, the forward's collectives included) */
int gpt_layer_backward_tp(gpt_stream *s, const gpt_shape *sh, const gpt_tp *tp, const void *layer_params,
                          float *layer_grads, const void *x_in, void *dres, gpt_layer_acts *acts,
                          const gpt_layer_scratch *scratch, gpt_grad_write gw);
/* The head's forward (and its logits' backward) with the vocabulary split: gpt_head_forward's
 * work on this rank's columns, the cross-entropy from every rank's stats, dL/d(lnf) summed.
 * gpt_head_backward follows as without tensor parallelism (the final LayerNorm is whole). */
int gpt_head_forward_tp(gpt_stream *s, const gpt_shape *sh, const gpt_tp *tp, const void *embed_params,
                        float *embed_grads, const void *xL, const int32_t *targets, gpt_head_acts *head);
/* The head's backward: gpt_head_backward, on this rank's rows with sequence parallelism. */
void gpt_head_backward_tp(gpt_stream *s, const gpt_shape *sh, const gpt_tp *tp, const void *embed_params,
                          float *embed_grads, const void *xL, gpt_head_acts *head, void *dres);
/* Floats of a block's LayerNorm parameters, one run from offset *at (the layer's ln1 and ln2,
 * the embedding block's final one): with sequence parallelism each rank's gradient of them
 * covers its rows only, and the engine sums them over the ranks once a step. */
size_t gpt_tp_norm_params(const gpt_shape *sh, int embed, size_t *at);

/* ---- optimizer ----------------------------------------------------------------------- */

typedef struct gpt_optim {
    double lr;              /* peak learning rate */
    double min_lr;          /* floor of the cosine decay */
    int decay_iters;        /* cosine decay length, in iterations */
    double warmup_fraction; /* of decay_iters, linear warm-up */
    double beta1, beta2, eps;
    double weight_decay;
    double clip; /* global-norm clipping threshold; <= 0 disables */
} gpt_optim;

/* The artifact's: lr 1.5e-4, min 1e-5, cosine over 320000 with 1% warm-up, AdamW (0.9,
 * 0.999, 1e-8), weight decay 0.01, clip 1.0. */
gpt_optim gpt_optim_default(void);
/* Learning rate used by iteration it (1-based): it/warmup * lr during warm-up, then cosine
 * from lr to min_lr, then min_lr. */
double gpt_lr_at(const gpt_optim *o, int it);
/* Megatron's clipping: scale = clip / (norm + 1e-6) when that is < 1, else 1. */
float gpt_clip_scale(const gpt_optim *o, double grad_norm);
/* AdamW over one block: weight decay on [0, n_decay), none on [n_decay, n). */
void gpt_block_adamw(gpt_stream *s, float *params, const float *grads, float *m, float *v,
                     size_t n, size_t n_decay, const gpt_optim *o, float lr, int t,
                     float grad_scale);
/* The same, refreshing params_act (n elements of the stream's type: the block's working copy)
 * from the updated params as gpt_params_to_act would. */
void gpt_block_adamw_act(gpt_stream *s, float *params, void *params_act, const float *grads,
                         float *m, float *v, size_t n, size_t n_decay, const gpt_optim *o,
                         float lr, int t, float grad_scale);
/* The global norm from per-block squared norms, summed in block order in double, so that
 * every engine (whatever device each block's norm came from) combines them identically. */
double gpt_combine_norms(const float *block_norm_squared, int nblocks);
/* Mean of per-token losses, summed in order in double. */
double gpt_mean_loss(const float *losses, int n);

/* ---- the whole model in one place ----------------------------------------------------- */

/* A model whose blocks all lie in one array [embed | layer 0 | layer 1 | ...] on one
 * device, as the baseline keeps it (and the tests use it). */
typedef struct gpt_resident {
    float *params, *grads;         /* gpt_param_count floats each (fp32 master, fp32 grads) */
    float *embed_in_grads;         /* the embedding block's floats: its input side's gradient
                                    * (gpt_embed_backward), zeroed and joined to grads' by
                                    * gpt_resident_backward */
    void *wparams;                 /* the working copy the ops read, in the backend's type
                                    * (gpt_params_to_act of params); NULL: params itself
                                    * (fp32 backends) */
    void *layer_inputs;            /* (L+1, N, C): x[l] is layer l's input, x[L] the output */
    void *layer_acts;              /* gpt_layers_acts_bytes(.., recompute, L) */
    gpt_recompute recompute;
    gpt_layer_scratch scratch;
    gpt_head_acts head;
    void *dres;                    /* (N, C) */
    const int32_t *tokens, *targets; /* (N) device ids */
} gpt_resident;

/* Embedding, layers 0..L-1, head: per-token losses land in r->head.losses. */
void gpt_resident_forward(gpt_stream *s, const gpt_shape *sh, gpt_resident *r);
/* Head, layers L-1..0 (recomputed as r->recompute says), embedding; grads accumulate (the
 * embedding's part in r->embed_in_grads, then joined).  GPT_OK, or the stream's error. */
int gpt_resident_backward(gpt_stream *s, const gpt_shape *sh, gpt_resident *r);
/* Squared norm of each block's gradient into block_norms[0..L] (embed first). */
void gpt_resident_block_norms(gpt_stream *s, const gpt_shape *sh, const float *grads,
                              float *block_norms);
/* AdamW over every block; wparams (the working copy, NULL for none) is refreshed from the
 * updated params in the same pass. */
void gpt_resident_adamw(gpt_stream *s, const gpt_shape *sh, float *params, void *wparams,
                        const float *grads, float *m, float *v, const gpt_optim *o, float lr,
                        int t, float grad_scale);

#endif
