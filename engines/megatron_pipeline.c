/*
 * megatron_pipeline.c — megatron-lm's model parallelism: pipeline stages (--pp P), the
 * micro-batches through them in the 1F1B schedule (PipeDream-Flush, as Megatron runs it), and
 * each layer split over T tensor-parallel ranks (--tp T, kernels/model_tp.c).  megatron_lm.c
 * hands its run here when P > 1 or T > 1 (megatron_pipeline.h).
 *
 * Ranks: world = T x P x D, laid out as Megatron lays them out, the tensor-parallel rank
 * innermost and the stage outermost: rank = (stage x D + data rank) x T + tensor rank.  D model
 * copies side by side, data parallel (DDP: each rank keeps its blocks, its share of them with
 * T > 1, whole, their gradients all-reduced over the D ranks of the same stage and tensor rank;
 * or --zero-stage 1: Adam's state sharded over those D ranks, the params gathered after the
 * update; with one stage also --zero-stage 2, the gradients sharded too, and 3, the params
 * too, gathered for each use).  With T > 1 every block below is the rank's share (model_tp.c
 * says which part of each tensor), and a group of the T ranks (tp-comm) carries the layers'
 * collectives, ordered on the compute stream by events (tp_collective).
 * Stage s holds layers [l0, l1) = [s L / P, (s + 1) L / P); the first stage also the
 * embedding, the last the head, which reads the same (tied) embedding block: both stages keep
 * a copy of block 0, its gradient and its Adam state, and make the same update of it.
 *
 * Where things live, per rank (fp32; --dtype bf16: the activations and a working copy of the
 * weights bf16, with fp32 master weights, gradients and Adam state):
 *   GPU   its blocks' params, grads (each block padded to D shards with ZeRO), Adam m and v
 *         (block 0 first where it has it, then its layers; with ZeRO its shards only), the
 *         bf16 working copy; ZeRO-2/3: the layers' gradients as shards (Adam's layout), two
 *         layer gradient slots the backward writes, block 0's gradient whole, a landing shard
 *         with M > 1; ZeRO-3: the params and the bf16 copy as shards too, and the gathered
 *         working weights: block 0's slot and two layer slots; per in-flight micro-batch
 *         (S = min(P - s, M) slots) the stage's checkpointed layer inputs x[l0..l1] and the
 *         activations --recompute keeps of its layers, and the ids; one working set, the
 *         backward scratch (with --sequence-parallel also a whole (N, C) buffer for the
 *         row-parallel products and the gathered residual gradient), the residual gradient
 *         dres (n, C: n = N, or N / T with --sequence-parallel, as the layer inputs); the
 *         first stage the embedding's own part of block 0's gradient (model.h), the last the
 *         head's activations (with T > 1 every rank's cross-entropy stats of a chunk) and the
 *         M x N losses; the (L + 1) block norms (per block D shards, twice with T > 1: its
 *         split and its whole tensors; each rank makes its own shard's)
 *   host  the losses and norms read back, every rank's norms, initialisation staging
 *
 * One step, stream by stream, on stage s (warm-up w = min(P - s - 1, M) forwards, then one
 * forward and one backward in turn, then the backwards left: F0 .. F(w-1), (F(w+j), Bj) ...):
 *   fwd-comm  Fk's input x[l0] received from stage s - 1 into micro-batch k's slot (once the
 *             slot's last user, B(k - S), is done); Fk's output x[l1] sent to s + 1
 *   bwd-comm  Bk's dres received from s + 1 (once the backward before it is done with
 *             dres); dL/dx[l0] sent to s - 1 after Bk
 *   compute   Fk: (first) ids in, embedding; layers l0 .. l1-1; (last) head: losses and the
 *             head's part of block 0's gradient.  Bk: (last) head backward; layers l1-1 ..
 *             l0 (recomputed from their inputs as --recompute says, but the model's last
 *             layer, whose forward is just before); (first) embedding backward into the
 *             embedding's part.  A layer's gradient is overwritten by B0 and accumulated by
 *             the rest, in micro-batch order, as one rank accumulates them.
 *   tie-comm  after BM-1: the first and last stage swap their parts of block 0's gradient
 *             (the embedding's, the head's) and each adds them, head's + embedding's, the
 *             sum one rank makes (model.h's tied embedding)
 *   dp-comm   (D > 1) each of its blocks' gradients all-reduced over the stage's D ranks, and
 *             this rank's (block, shard) norms taken behind it (runtime/dp.h), as megatron-lm's
 *             DDP: a layer's as soon as B(M-1)'s backward of it is done (its gradient is final),
 *             beside the backward of the layers below (--sequence-parallel: its LayerNorms'
 *             gradients summed over the tensor-parallel ranks first, on tp-comm); block 0's
 *             after the tie's join.  ZeRO-2/3: every Bk's gradient of a layer reduce-scattered
 *             from its slot into the shard (added after B0's), the slot then free for the
 *             layer two below; block 0's once, after the join
 *   param-comm (ZeRO-3) block 0's working weights all-gathered into its slot at the start of
 *             the step (after the update); each layer's into slot l % 2 before its forward and
 *             its backward, one layer ahead (once the slot's last user is done; a layer still
 *             in its slot is used again)
 *   tie-comm  the block norms and the loss gathered on the host: every rank combines the same
 *             table, in the model's block order, so the global norm is D ranks' DDP's to the bit
 *   compute   clip, lr, AdamW of its blocks (ZeRO: its shards; at 1 and 2 dp-comm then
 *             gathers them).
 *   tp-comm   (T > 1) inside the compute steps above: per layer two all-reduces in the
 *             forward and two in the backward (--sequence-parallel: all-gathers before the
 *             column-parallel matmuls, reduce-scatters after the row-parallel ones), the
 *             embedding's sum, per head chunk the stats' gather and dL/d(lnf)'s sum; compute
 *             waits on each (the next op needs it); with --sequence-parallel the LayerNorms'
 *             gradients summed once, before dp-comm.
 * So --pp P with M micro-batches gives the losses and parameters of one rank with the same M
 * (--global-batch M x B), bit for bit: the same ops on the same values in the same order; and
 * ZeRO 1-3 over the copies those of their DDP (2 and 3: with M = 1; with more micro-batches
 * their reductions are per micro-batch, another order).
 */
#include "megatron_pipeline.h"

#include "runtime/collectives.h"
#include "runtime/dp.h"
#include "runtime/predict.h"
#include "runtime/timer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What a stage holds, from the configuration alone (plans and init share it). */
typedef struct pipe_layout {
    int P, stage, M, slots;    /* stages, this one, micro-batches, in-flight slots */
    int T, tp_rank;            /* tensor-parallel ranks, this one's place among them */
    int stride;                /* ranks between a rank and its peer in the next stage: D T */
    int norm_row;              /* norms per block: D shards (of its split and its whole part with T > 1) */
    int l0, l1, Ls;            /* its layers [l0, l1) */
    int first, last, has_embed;
    size_t PE, PL, nparams;    /* floats: the embedding block, a layer block, its blocks */
    int zero;                  /* --zero-stage over the D data-parallel ranks (0 with D = 1) */
    int zero1;                 /* zero >= 1: Adam's state sharded */
    int shard_grads;           /* zero >= 2: the gradients too (one pipeline stage only) */
    int shard_params;          /* zero == 3: the params too, gathered into slots for each use */
    size_t SE, SL;             /* floats of this rank's Adam shard of the embedding block, a layer's
                                * (dp.h's shards; the whole block without ZeRO) */
    size_t XE, XL;             /* floats between blocks in the params and grads: the block padded
                                * to D shards with ZeRO (so that the all-gather is in place) */
    size_t nshards;            /* floats of its blocks' shards (SE + layers x SL): Adam's layout */
    size_t NC;                 /* floats of one (N, C) activation */
    size_t act;                /* bytes of one activation element */
    /* bytes of each allocation */
    int dpw, dp_rank;          /* the data-parallel ranks of a stage, this one's place */
    size_t params, wparams, grads, adam, embed_in, inputs, layer_acts, scratch, head, dres, ids, norms,
        losses, host_losses, host_norms, host_staging;
    size_t wslots;             /* ZeRO-3: the gathered working weights, block 0's and two layers' */
    size_t grad_shards, grad_slots, grad_tmp; /* ZeRO-2/3: the reduced shards, two layer slots the
                                * backward writes, the landing of a later micro-batch's reduction */
} pipe_layout;

/* Stage s's layers [*l0, *l1): --pp-layers' counts where given (checked: P positive counts
 * summing to L), else balanced, s L / P to (s + 1) L / P. */
int megatron_pipeline_layer_counts(const char *text, int *counts, int max)
{
    int n = 0;
    for (const char *at = text; *at; n++) {
        char *end;
        const long v = *at >= '1' && *at <= '9' ? strtol(at, &end, 10) : 0;
        if (v < 1 || v > 1 << 20 || (*end != ',' && *end != '\0') || (*end == ',' && end[1] == '\0')) return -1;
        if (counts && n < max) counts[n] = (int)v;
        at = *end == ',' ? end + 1 : end;
    }
    return n;
}

static void stage_layers(const engine_config *cfg, int s, int *l0, int *l1)
{
    const int P = engine_pp(cfg), L = cfg->shape.layers;
    int counts[4096];
    if (!cfg->pp_layers[0] || megatron_pipeline_layer_counts(cfg->pp_layers, counts, 4096) != P) {
        *l0 = (int)((long long)s * L / P);
        *l1 = (int)((long long)(s + 1) * L / P);
        return;
    }
    *l0 = 0;
    for (int i = 0; i < s; i++) *l0 += counts[i];
    *l1 = *l0 + counts[s];
}

int megatron_pipeline_stage_of_layer(const engine_config *cfg, int layer)
{
    for (int s = 0; s < engine_pp(cfg); s++) {
        int l0, l1;
        stage_layers(cfg, s, &l0, &l1);
        if (layer < l1) return s;
    }
    return engine_pp(cfg) - 1;
}

/* One rank's shape: the model's, split over the tensor-parallel ranks (model.h). */
static gpt_shape rank_shape(const engine_config *cfg)
{
    gpt_shape sh = cfg->shape;
    sh.tp = engine_tp(cfg);
    sh.sp = engine_tp(cfg) > 1 && cfg->sequence_parallel;
    return sh;
}

static pipe_layout layout_of(const engine_config *cfg, int rank)
{
    const gpt_shape rank_sh = rank_shape(cfg), *sh = &rank_sh;
    gpt_shape one = cfg->shape;
    one.tp = 0;
    const gpt_dtype dt = cfg->bf16 ? GPT_BF16 : GPT_F32;
    const size_t f = sizeof(float), N = (size_t)sh->batch * sh->seq;
    pipe_layout z;
    memset(&z, 0, sizeof z);
    z.P = engine_pp(cfg);
    z.stage = engine_pp_stage(cfg, rank);
    z.dpw = engine_dp_world(cfg);
    z.dp_rank = engine_dp_rank(cfg, rank);
    z.T = engine_tp(cfg);
    z.tp_rank = engine_tp_rank(cfg, rank);
    z.stride = z.dpw * z.T;
    z.norm_row = z.dpw * (z.T > 1 ? 2 : 1);
    z.M = engine_micro_batches(cfg);
    z.slots = z.P - z.stage < z.M ? z.P - z.stage : z.M;
    stage_layers(cfg, z.stage, &z.l0, &z.l1);
    z.Ls = z.l1 - z.l0;
    z.first = z.stage == 0;
    z.last = z.stage == z.P - 1;
    z.has_embed = z.first || z.last;
    z.PE = gpt_embed_layout_of(sh).total;
    z.PL = gpt_layer_layout_of(sh).total;
    z.zero = z.dpw > 1 ? cfg->zero_stage : 0;
    z.zero1 = z.zero >= 1;
    z.shard_grads = z.zero >= 2;
    z.shard_params = z.zero == 3;
    z.SE = z.zero1 ? dp_shard_len(z.PE, z.dpw) : z.PE;
    z.SL = z.zero1 ? dp_shard_len(z.PL, z.dpw) : z.PL;
    z.XE = z.zero1 ? z.SE * (size_t)z.dpw : z.PE;
    z.XL = z.zero1 ? z.SL * (size_t)z.dpw : z.PL;
    z.nparams = (z.has_embed ? z.XE : 0) + (size_t)z.Ls * z.XL;
    z.nshards = (z.has_embed ? z.SE : 0) + (size_t)z.Ls * z.SL;
    z.NC = (size_t)gpt_stream_rows(sh) * (size_t)sh->hidden; /* (a rank's rows with --sequence-parallel) */
    z.act = gpt_dtype_size(dt);
    /* (ZeRO-3: the fp32 master and the bf16 working copy as shards, block 0's and the layers'
     * gathered into slots of the working type; ZeRO-2/3: the layers' gradients reduced into
     * shards from two slots the backward writes, block 0's whole for the step: both end stages'
     * parts accumulate into it, with one stage) */
    const size_t held = z.shard_params ? z.nshards : z.nparams;
    z.params = held * f;
    z.wparams = cfg->bf16 ? gpt_act_bytes(held, dt) : 0;
    z.wslots = z.shard_params ? gpt_act_bytes(z.XE + 2 * z.XL, dt) : 0;
    z.grads = (z.shard_grads ? z.XE : z.nparams) * f;
    z.grad_shards = z.shard_grads ? z.nshards * f : 0;
    z.grad_slots = z.shard_grads ? 2 * z.XL * f : 0;
    z.grad_tmp = z.shard_grads && z.M > 1 ? (z.SE > z.SL ? z.SE : z.SL) * f : 0;
    z.adam = z.nshards * f;
    /* (the first stage's own part; the last stage's copy of it, received for the join) */
    z.embed_in = z.has_embed && z.P > 1 ? z.PE * f : z.first ? z.PE * f : 0;
    z.inputs = gpt_act_bytes((size_t)z.slots * (size_t)(z.Ls + 1) * z.NC, dt);
    z.layer_acts = gpt_layers_acts_bytes(sh, dt, cfg->recompute, z.slots * z.Ls);
    z.scratch = gpt_layer_scratch_bytes(sh, dt);
    z.head = z.last ? gpt_head_acts_bytes(sh, dt) : 0;
    z.dres = gpt_act_bytes(z.NC, dt);
    z.ids = (size_t)z.slots * 2 * N * sizeof(int32_t);
    z.norms = (size_t)(sh->layers + 1) * (size_t)z.norm_row * f;
    z.losses = z.last ? (size_t)z.M * N * f : 0;
    z.host_losses = z.last ? (size_t)z.M * N * f : 0;
    /* this rank's table, then every rank's */
    /* this rank's table, every rank's, then the combined one (a block's shards of each
     * tensor-parallel rank, and of its whole part once) */
    z.host_norms = (size_t)(sh->layers + 1) *
                   ((size_t)z.norm_row * (1 + (size_t)engine_world(cfg)) + (size_t)z.dpw * (z.T + (z.T > 1))) * f;
    /* a block as one rank makes it; with T > 1 also this rank's share of it */
    const size_t whole_e = gpt_embed_layout_of(&one).total, whole_l = gpt_layer_layout_of(&one).total;
    z.host_staging = ((whole_e > whole_l ? whole_e : whole_l) + (z.T > 1 ? (z.PE > z.PL ? z.PE : z.PL) : 0)) * f;
    return z;
}

/* A rank's plan: its tensors, and the communicators it opens (pipe_init), each with NCCL's
 * memory on N GPU ranks: the pipeline's three, and its data-parallel, tensor-parallel and
 * ZeRO-3 gather groups where it has them. */
static void plan_of(const pipe_layout *z, const engine_config *cfg, engine_plan *out)
{
    *out = (engine_plan){0};
    out->gpu_bytes = (uint64_t)z->params + z->wparams + z->wslots + z->grads + z->grad_shards + z->grad_slots +
                     z->grad_tmp + 2 * (uint64_t)z->adam + z->embed_in + z->inputs + z->layer_acts + z->scratch +
                     z->head + z->dres + z->ids + z->norms + z->losses;
    out->host_bytes = (uint64_t)z->host_losses + z->host_norms + z->host_staging;
    engine_plan_add_comm(out, cfg, 3 + (z->dpw > 1) + (z->T > 1) + (z->shard_params != 0));
}

void megatron_pipeline_plan(const engine_config *cfg, engine_plan *out)
{
    /* (before the ranks start, the plan is the largest stage's: each rank's own replaces it
     * once it is made, megatron_pipeline_chosen_plan) */
    memset(out, 0, sizeof *out);
    const int P = engine_pp(cfg), per_stage = engine_dp_world(cfg);
    for (int s = 0; s < P; s++) {
        engine_plan p;
        const pipe_layout z = layout_of(cfg, s * per_stage);
        plan_of(&z, cfg, &p);
        if (p.gpu_bytes > out->gpu_bytes) out->gpu_bytes = p.gpu_bytes, out->gpu_comm_bytes = p.gpu_comm_bytes;
        if (p.host_bytes > out->host_bytes) out->host_bytes = p.host_bytes;
    }
}

/* --tp T's own conditions: T splits the heads and the padded vocabulary evenly, and a tensor-
 * parallel group stays on one machine (its ranks are neighbours, rank = ... x T + t). */
static int check_tp(const engine_config *cfg, char *err, size_t errlen)
{
    const int T = engine_tp(cfg), local = engine_local_world(cfg);
    if (T == 1) return 0;
    if (cfg->shape.heads % T != 0) {
        snprintf(err, errlen, "--tp %d: the %d heads do not split evenly over %d ranks", T, cfg->shape.heads, T);
        return -1;
    }
    if (cfg->shape.vocab_padded % T != 0) {
        snprintf(err, errlen, "--tp %d: the padded vocabulary (%d) does not split evenly over %d ranks", T,
                 cfg->shape.vocab_padded, T);
        return -1;
    }
    if (cfg->sequence_parallel && (cfg->shape.batch * cfg->shape.seq) % T != 0) {
        snprintf(err, errlen, "--tp %d --sequence-parallel: the %d x %d rows of a micro-batch do not split evenly over "
                 "%d ranks", T, cfg->shape.batch, cfg->shape.seq, T);
        return -1;
    }
    /* (local_world 0: not known yet, e.g. a sweep's check before its children start) */
    if (engine_world(cfg) > 1 && cfg->local_world > 0 && local % T != 0) {
        snprintf(err, errlen, "--tp %d: %d rank%s on a machine, not a whole number of tensor-parallel groups (a group "
                 "stays within one machine)", T, local, local == 1 ? "" : "s");
        return -1;
    }
    return 0;
}

int megatron_pipeline_check(const engine_config *cfg, char *err, size_t errlen)
{
    const int P = engine_pp(cfg), T = engine_tp(cfg), L = cfg->shape.layers, per_copy = P * T;
    char what[64];
    if (T > 1 && P > 1) snprintf(what, sizeof what, "--tp %d --pp %d", T, P);
    else if (T > 1) snprintf(what, sizeof what, "--tp %d", T);
    else snprintf(what, sizeof what, "--pp %d", P);
    if (engine_world(cfg) % per_copy != 0) {
        snprintf(err, errlen, "%s: %d rank%s, not a whole number of model copies of %d ranks (--ranks or mpirun -np "
                 "a multiple of %d)", what, engine_world(cfg), engine_world(cfg) > 1 ? "s" : "", per_copy, per_copy);
        return -1;
    }
    if (P > L) {
        snprintf(err, errlen, "--pp %d: more stages than layers (%d)", P, L);
        return -1;
    }
    if (cfg->pp_layers[0]) {
        int counts[4096], sum = 0;
        const int n = megatron_pipeline_layer_counts(cfg->pp_layers, counts, 4096);
        for (int i = 0; i < n && i < 4096; i++) sum += counts[i];
        if (n != P || sum != L) {
            snprintf(err, errlen, "--pp-layers %s: %d stage%s of %d layers, not --pp %d of -l %d", cfg->pp_layers, n,
                     n == 1 ? "" : "s", sum, P, L);
            return -1;
        }
    }
    if (check_tp(cfg, err, errlen)) return -1;
    if (cfg->zero_stage > 1 && P > 1) {
        /* (a stage's layers' gradients accumulate over micro-batches whose backwards interleave
         * with forwards of others: DeepSpeed, too, takes ZeRO-1 only with a pipeline) */
        snprintf(err, errlen, "%s with --zero-stage %d: a pipeline takes ZeRO-1 (Adam's state sharded over the "
                 "data-parallel copies), not stages 2 and 3 (as DeepSpeed)", what, cfg->zero_stage);
        return -1;
    }
    if (cfg->zero_stage >= 1 && engine_dp_world(cfg) == 1) {
        snprintf(err, errlen, "%s with --zero-stage %d on %d rank%s: one model copy, no data-parallel ranks to shard "
                 "over (world / (T x P) must be above 1)", what, cfg->zero_stage, engine_world(cfg),
                 engine_world(cfg) == 1 ? "" : "s");
        return -1;
    }
    if (cfg->graphs == GRAPHS_ON) {
        snprintf(err, errlen, "--graphs on with %s: a step waits on its neighbours' collectives", what);
        return -1;
    }
    return 0;
}

typedef struct pipe_state {
    engine_env env;
    gpt_shape sh;
    pipe_layout z;
    int rank, world;
    gpt_stream *compute;
    coll_group *fwd_comm, *bwd_comm, *tie_comm, *dp_comm, *tp_comm;
    gpt_tp tp;                 /* the layer split's collectives (tp_comm; one rank: none) */
    gpt_event *ev_tp_in, *ev_tp_out;
    gpt_event *ev_grad_ready, *ev_norms_summed; /* a layer's last gradient to dp-comm (beside the backward) */
    engine_allocs mem;
    float *params, *grads, *adam_m, *adam_v, *embed_in, *norms, *losses, *host_losses, *host_norms;
    void *wparams, *inputs, *layer_acts, *dres;
    int32_t *ids;
    gpt_layer_scratch scratch;
    gpt_head_acts head;
    gpt_event *ev_x_in, *ev_x_out, *ev_dres_in, *ev_bwd_done, *ev_dres_sent, *ev_slot_free[64], *ev_x_sent[64];
    int adam_step;
    /* ZeRO-2/3 (one stage): the layers' gradients reduced into shards from two slots */
    float *grad_shards, *grad_slot[2], *grad_tmp;
    gpt_event *ev_grad_slot_free[2]; /* on dp-comm: slot i's reduction has read it */
    /* ZeRO-3: the working weights gathered on param-comm into block 0's slot (for the step) and
     * two layer slots (layer l in slot l % 2, kept while no other layer needs the slot) */
    coll_group *param_comm;
    void *embed_slot, *layer_slot[2];
    int layer_slot_holds[2];          /* the layer each holds (-1: none, or stale after an update) */
    gpt_event *ev_gathered[2], *ev_slot_used[2], *ev_embed_gathered, *ev_step_start;
} pipe_state;

/* ---- where things are ---------------------------------------------------------------------- */

/* Offset (floats) of model block b in this stage's arrays (block 0 first where it has it). */
static size_t block_off(const pipe_state *st, int b)
{
    const pipe_layout *z = &st->z;
    if (b == 0) return 0;
    return (z->has_embed ? z->XE : 0) + (size_t)(b - 1 - z->l0) * z->XL;
}

/* Offset (floats) of block b's Adam state (its shard with ZeRO-1) in adam_m and adam_v. */
static size_t adam_off(const pipe_state *st, int b)
{
    const pipe_layout *z = &st->z;
    if (b == 0) return 0;
    return (z->has_embed ? z->SE : 0) + (size_t)(b - 1 - z->l0) * z->SL;
}

static size_t block_len(const pipe_state *st, int b) { return b == 0 ? st->z.PE : st->z.PL; }

/* Does this rank hold model block b (0: the embedding block, 1 + l: layer l)? */
static int holds_block(const pipe_state *st, int b)
{
    const pipe_layout *z = &st->z;
    return b == 0 ? z->has_embed : b - 1 >= z->l0 && b - 1 < z->l1;
}

/* Offset (floats) of block b in params and wparams: its place among the whole blocks, or with
 * ZeRO-3 among the shards (Adam's layout). */
static size_t param_off(const pipe_state *st, int b) { return st->z.shard_params ? adam_off(st, b) : block_off(st, b); }

/* The working weights the ops read for block b (ZeRO-3: its slot, gathered: gather_layer). */
static const void *work_params(const pipe_state *st, int b)
{
    if (st->z.shard_params) return b == 0 ? st->embed_slot : st->layer_slot[(b - 1) % 2];
    if (st->wparams) return (const char *)st->wparams + block_off(st, b) * st->z.act;
    return st->params + block_off(st, b);
}

/* Where the backward writes block b's gradient (b > 0): its place in the whole gradients, or
 * with ZeRO-2/3 its layer's slot. */
static float *grad_target(const pipe_state *st, int b)
{
    return st->z.shard_grads ? st->grad_slot[(b - 1) % 2] : st->grads + block_off(st, b);
}

/* x[l] of micro-batch k's slot (l from l0 to l1). */
static void *slot_input(const pipe_state *st, int k, int l)
{
    const pipe_layout *z = &st->z;
    const size_t at = ((size_t)(k % z->slots) * (size_t)(z->Ls + 1) + (size_t)(l - z->l0)) * z->NC;
    return (char *)st->inputs + at * z->act;
}

static int32_t *slot_ids(const pipe_state *st, int k)
{
    const size_t N = (size_t)st->sh.batch * st->sh.seq;
    return st->ids + (size_t)(k % st->z.slots) * 2 * N;
}

/* The rank at data-parallel place dp and tensor-parallel place tp that owns model block b
 * (block 0: the first stage's copy, the one whose norm counts): of the stage whose [l0, l1)
 * holds layer b - 1. */
static int owner_of_block(const pipe_state *st, int b, int dp, int tp)
{
    const int s = b == 0 ? 0 : megatron_pipeline_stage_of_layer(st->env.cfg, b - 1);
    return (s * st->z.dpw + dp) * st->z.T + tp;
}

/* Layer l's activations in micro-batch k's slot; for its backward, the model's last layer
 * keeps what its forward made (the head alone ran between them, on the last stage). */
static gpt_layer_acts slot_acts(const pipe_state *st, int k, int l, int backward)
{
    const pipe_layout *z = &st->z;
    gpt_layer_acts a;
    gpt_layers_acts_carve(&a, st->layer_acts, &st->sh, st->env.be->dtype, st->env.cfg->recompute,
                          (k % z->slots) * z->Ls + (l - z->l0));
    if (backward && l == st->sh.layers - 1) a.recompute = GPT_RECOMPUTE_NONE;
    return a;
}

/* ---- lifetime ------------------------------------------------------------------------------ */

void megatron_pipeline_free(void *state)
{
    pipe_state *st = state;
    if (!st) return;
    coll_close(st->fwd_comm);
    coll_close(st->bwd_comm);
    coll_close(st->tie_comm);
    coll_close(st->dp_comm);
    coll_close(st->tp_comm);
    coll_close(st->param_comm);
    for (int i = 0; i < 2; i++) {
        gpt_event_destroy(st->ev_grad_slot_free[i]);
        gpt_event_destroy(st->ev_gathered[i]);
        gpt_event_destroy(st->ev_slot_used[i]);
    }
    gpt_event_destroy(st->ev_embed_gathered);
    gpt_event_destroy(st->ev_step_start);
    gpt_event_destroy(st->ev_tp_in);
    gpt_event_destroy(st->ev_tp_out);
    gpt_event_destroy(st->ev_grad_ready);
    gpt_event_destroy(st->ev_norms_summed);
    if (st->compute) st->env.be->ops->stream_destroy(st->compute);
    gpt_event_destroy(st->ev_x_in);
    gpt_event_destroy(st->ev_x_out);
    gpt_event_destroy(st->ev_dres_in);
    gpt_event_destroy(st->ev_bwd_done);
    gpt_event_destroy(st->ev_dres_sent);
    for (int i = 0; i < 64; i++) gpt_event_destroy(st->ev_slot_free[i]), gpt_event_destroy(st->ev_x_sent[i]);
    engine_free_all(&st->mem);
    free(st);
}

static int alloc_dev(pipe_state *st, void **ptr, size_t bytes, const char *what)
{
    *ptr = NULL;
    return bytes ? engine_alloc(&st->mem, MEM_GPU, ptr, bytes, what) : GPT_OK;
}

static int alloc_host(pipe_state *st, void **ptr, size_t bytes, const char *what)
{
    *ptr = NULL;
    return bytes ? engine_alloc(&st->mem, MEM_HOST, ptr, bytes, what) : GPT_OK;
}

/* Its blocks from the model's initialisation (the same values one rank makes), block by block
 * through the staging block; the bf16 working copy converted from them on the device. */
static int init_params(pipe_state *st, float *staging)
{
    const pipe_layout *z = &st->z;
    gpt_stream *s = st->compute;
    int rc = gpt_stream_memset_zero(s, st->adam_m, z->adam);
    if (!rc) rc = gpt_stream_memset_zero(s, st->adam_v, z->adam);
    if (!rc) rc = gpt_stream_memset_zero(s, st->grads, z->grads);
    /* (the shards' and slots' padding is summed and gathered, never read as a value: zero) */
    if (!rc && z->shard_params) rc = gpt_stream_memset_zero(s, st->params, z->params);
    if (!rc && z->shard_grads) rc = gpt_stream_memset_zero(s, st->grad_shards, z->grad_shards);
    if (!rc && z->shard_grads) rc = gpt_stream_memset_zero(s, st->grad_slot[0], z->grad_slots);
    for (int b = 0; !rc && b <= st->sh.layers; b++) {
        if (!holds_block(st, b)) continue;
        if (b == 0) engine_init_embed(&st->env, staging, &st->env.cfg->shape, st->env.cfg->seed);
        else engine_init_layer(&st->env, staging, &st->env.cfg->shape, b - 1, st->env.cfg->seed);
        float *mine = st->params + param_off(st, b), *share = staging;
        if (z->T > 1) { /* (this rank's share, after the whole block in the staging) */
            const size_t whole = b == 0 ? gpt_embed_layout_of(&st->env.cfg->shape).total
                                        : gpt_layer_layout_of(&st->env.cfg->shape).total;
            share = staging + whole;
            gpt_tp_move_block(staging, share, &st->sh, z->tp_rank, b == 0, 1);
        }
        /* (ZeRO-3: this data-parallel rank's shard of it; its padding stays zero) */
        const size_t S = b == 0 ? z->SE : z->SL, from = z->shard_params ? (size_t)z->dp_rank * S : 0,
                     count = z->shard_params ? dp_shard_real(block_len(st, b), S, z->dp_rank) : block_len(st, b);
        if (count) rc = gpt_memcpy_h2d(s, mine, share + from, count * sizeof(float));
        if (!rc && st->wparams)
            gpt_params_to_act(s, (char *)st->wparams + param_off(st, b) * z->act, mine, z->shard_params ? S : block_len(st, b));
        if (!rc) rc = gpt_stream_sync(s); /* (the staging block is refilled next) */
    }
    return rc;
}

/* The layer split's collectives (gpt_tp): the group's stream waits for what s was given, the
 * operation (reductions in the activations' type), s waits for it. */
enum { TP_ALL_REDUCE, TP_REDUCE_SCATTER, TP_ALL_GATHER };
static int tp_collective(pipe_state *st, gpt_stream *s, int op, void *out, const void *in, size_t n)
{
    gpt_stream *ts = coll_stream(st->tp_comm);
    const gpt_dtype dt = st->env.be->dtype;
    int rc;
    if ((rc = gpt_event_record(st->ev_tp_in, s)) || (rc = gpt_stream_wait_event(ts, st->ev_tp_in))) return rc;
    rc = op == TP_ALL_REDUCE       ? coll_all_reduce_sum_act(st->tp_comm, out, n, dt)
         : op == TP_REDUCE_SCATTER ? coll_reduce_scatter_sum_act(st->tp_comm, out, in, n, dt)
                                   : coll_all_gather(st->tp_comm, out, in, n);
    if (rc || (rc = gpt_event_record(st->ev_tp_out, ts))) return rc;
    return gpt_stream_wait_event(s, st->ev_tp_out);
}
static int tp_all_reduce(void *ctx, gpt_stream *s, void *buf, size_t n)
{ return tp_collective(ctx, s, TP_ALL_REDUCE, buf, buf, n); }
static int tp_reduce_scatter(void *ctx, gpt_stream *s, void *out, const void *in, size_t n)
{ return tp_collective(ctx, s, TP_REDUCE_SCATTER, out, in, n); }
static int tp_all_gather(void *ctx, gpt_stream *s, void *out, const void *in, size_t bytes)
{ return tp_collective(ctx, s, TP_ALL_GATHER, out, in, bytes); }

int megatron_pipeline_init(const engine_env *env, void **state)
{
    *state = NULL;
    pipe_state *st = calloc(1, sizeof *st);
    if (!st) return GPT_ERR_OOM;
    *state = st;
    st->env = *env;
    st->sh = rank_shape(env->cfg);
    st->rank = env->rank;
    st->world = env->world;
    st->z = layout_of(env->cfg, env->rank);
    const pipe_layout *z = &st->z;
    if (z->slots > 64) return engine_fail(env, GPT_ERR_INVALID, "--pp: more than 64 micro-batches in flight");
    engine_allocs_init(&st->mem, env->gpu, env->host, env->be);
    gpt_backend *be = env->be;
    int rc;
    if ((rc = be->ops->stream_create(be, &st->compute)) ||
        (rc = coll_open(&st->fwd_comm, be, env->rank, env->world)) ||
        (rc = coll_open(&st->bwd_comm, be, env->rank, env->world)) ||
        (rc = coll_open(&st->tie_comm, be, env->rank, env->world)) ||
        /* (every rank opens its stage's group: collective over the job) */
        (z->dpw > 1 && (rc = coll_open_split(&st->dp_comm, be, z->stage * z->T + z->tp_rank, z->dp_rank, z->dpw))) ||
        (z->T > 1 && (rc = coll_open_split(&st->tp_comm, be, z->stage * z->dpw + z->dp_rank, z->tp_rank, z->T))) ||
        (z->T > 1 && (rc = coll_watch(st->tp_comm, env->dog, "tensor-parallel activations") ? GPT_ERR_INVALID : GPT_OK)) ||
        (z->dpw > 1 && (rc = coll_watch(st->dp_comm, env->dog, "stage gradients") ? GPT_ERR_INVALID : GPT_OK)) ||
        (z->shard_params && (rc = coll_open_split(&st->param_comm, be, z->stage * z->T + z->tp_rank, z->dp_rank, z->dpw))) ||
        (z->shard_params && (rc = coll_watch(st->param_comm, env->dog, "ZeRO-3 weight gathers") ? GPT_ERR_INVALID : GPT_OK)) ||
        (rc = coll_watch(st->fwd_comm, env->dog, "pipeline activations") ? GPT_ERR_INVALID : GPT_OK) ||
        (rc = coll_watch(st->bwd_comm, env->dog, "pipeline gradients") ? GPT_ERR_INVALID : GPT_OK) ||
        (rc = coll_watch(st->tie_comm, env->dog, "tied embedding") ? GPT_ERR_INVALID : GPT_OK))
        return rc;
    gpt_event **evs[] = {&st->ev_x_in, &st->ev_x_out, &st->ev_dres_in, &st->ev_bwd_done, &st->ev_dres_sent,
                         &st->ev_tp_in, &st->ev_tp_out, &st->ev_grad_ready, &st->ev_norms_summed,
                         &st->ev_grad_slot_free[0], &st->ev_grad_slot_free[1], &st->ev_gathered[0],
                         &st->ev_gathered[1], &st->ev_slot_used[0], &st->ev_slot_used[1], &st->ev_embed_gathered,
                         &st->ev_step_start};
    for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++)
        if ((rc = gpt_event_create(be, evs[i]))) return rc;
    for (int i = 0; i < z->slots; i++)
        if ((rc = gpt_event_create(be, &st->ev_slot_free[i])) || (rc = gpt_event_create(be, &st->ev_x_sent[i])))
            return rc;
    void *scratch = NULL, *head = NULL, *staging = NULL;
    if ((rc = alloc_dev(st, (void **)&st->params, z->params, "parameters")) ||
        (rc = alloc_dev(st, &st->wparams, z->wparams, "bf16 working weights")) ||
        (rc = alloc_dev(st, &st->embed_slot, z->wslots, "gathered working weights (block 0, two layers)")) ||
        (rc = alloc_dev(st, (void **)&st->grads, z->grads, z->shard_grads ? "block 0's gradient" : "gradients")) ||
        (rc = alloc_dev(st, (void **)&st->grad_shards, z->grad_shards, "gradient shards")) ||
        (rc = alloc_dev(st, (void **)&st->grad_slot[0], z->grad_slots, "layer gradient slots")) ||
        (rc = alloc_dev(st, (void **)&st->grad_tmp, z->grad_tmp, "reduce-scatter landing")) ||
        (rc = alloc_dev(st, (void **)&st->adam_m, z->adam, "Adam m")) ||
        (rc = alloc_dev(st, (void **)&st->adam_v, z->adam, "Adam v")) ||
        (rc = alloc_dev(st, (void **)&st->embed_in, z->embed_in, "embedding's own gradients")) ||
        (rc = alloc_dev(st, &st->inputs, z->inputs, "checkpointed layer inputs (per micro-batch in flight)")) ||
        (rc = alloc_dev(st, &st->layer_acts, z->layer_acts, "layer activations")) ||
        (rc = alloc_dev(st, &scratch, z->scratch, "backward scratch")) ||
        (rc = alloc_dev(st, &head, z->head, "logits and head activations")) ||
        (rc = alloc_dev(st, &st->dres, z->dres, "residual gradient")) ||
        (rc = alloc_dev(st, (void **)&st->ids, z->ids, "token ids")) ||
        (rc = alloc_dev(st, (void **)&st->norms, z->norms, "block norms")) ||
        (rc = alloc_dev(st, (void **)&st->losses, z->losses, "per-token losses")) ||
        (rc = alloc_host(st, (void **)&st->host_losses, z->host_losses, "losses read-back")) ||
        (rc = alloc_host(st, (void **)&st->host_norms, z->host_norms, "norms read-back")) ||
        (rc = alloc_host(st, &staging, z->host_staging, "initialisation staging")))
        return rc;
    gpt_layer_scratch_carve_as(&st->scratch, scratch, &st->sh, be->dtype);
    if (z->shard_grads) st->grad_slot[1] = st->grad_slot[0] + z->XL;
    if (z->shard_params) {
        st->layer_slot[0] = (char *)st->embed_slot + z->XE * z->act;
        st->layer_slot[1] = (char *)st->layer_slot[0] + z->XL * z->act;
    }
    st->layer_slot_holds[0] = st->layer_slot_holds[1] = -1;
    if (head) {
        gpt_head_acts_carve_as(&st->head, head, &st->sh, be->dtype);
        st->head.grad_divisor = z->M * z->dpw;
    }
    rc = init_params(st, staging);
    engine_free_last(&st->mem); /* (the staging block: the last allocation) */
    if (!rc && (rc = gpt_stream_memset_zero(st->compute, st->norms, z->norms))) return rc;
    st->tp = (gpt_tp){.rank = z->tp_rank, .world = z->T, .sequence = st->sh.sp, .all_reduce = tp_all_reduce,
                      .all_gather = tp_all_gather, .reduce_scatter = tp_reduce_scatter, .ctx = st};
    if (!rc && z->P > 1)
        engine_note(env, "megatron-lm pipeline: stage %d of %d, layers %d-%d%s%s, %d micro-batch%s, %d in flight (1F1B)",
                    z->stage, z->P, z->l0, z->l1 - 1, z->first ? ", the embedding" : "", z->last ? ", the head" : "",
                    z->M, z->M > 1 ? "es" : "", z->slots);
    if (!rc && z->T > 1)
        engine_note(env, "megatron-lm tensor parallel: rank %d of %d, heads %d-%d, vocabulary rows %d-%d", z->tp_rank, z->T,
                    z->tp_rank * (st->sh.heads / z->T), (z->tp_rank + 1) * (st->sh.heads / z->T) - 1,
                    z->tp_rank * gpt_vocab_rows(&st->sh), (z->tp_rank + 1) * gpt_vocab_rows(&st->sh) - 1);
    return rc;
}

void megatron_pipeline_chosen_plan(void *state, engine_plan *out)
{
    const pipe_state *st = state;
    plan_of(&st->z, st->env.cfg, out);
}

/* ---- ZeRO-3: the working weights gathered for each use ------------------------------------- */

/* Layer l's working weights (the bf16 copy, or the fp32 params) all-gathered from the D ranks'
 * shards into slot l % 2 on param-comm, once the slot's last user is done (ev_slot_used) and
 * after the step's update (param-comm waited for ev_step_start); a layer still in its slot is
 * not gathered again.  Compute waits for it in use_layer.  (Not ZeRO-3, or no such layer
 * here: nothing.) */
static int gather_layer(pipe_state *st, int l)
{
    const pipe_layout *z = &st->z;
    const int i = l % 2;
    if (!z->shard_params || l < z->l0 || l >= z->l1 || st->layer_slot_holds[i] == l) return GPT_OK;
    gpt_stream *ps = coll_stream(st->param_comm);
    const char *from = st->wparams ? (const char *)st->wparams : (const char *)st->params;
    int rc;
    if ((rc = gpt_stream_wait_event(ps, st->ev_slot_used[i])) ||
        (rc = coll_all_gather(st->param_comm, st->layer_slot[i], from + param_off(st, 1 + l) * z->act, z->SL * z->act)) ||
        (rc = gpt_event_record(st->ev_gathered[i], ps)))
        return rc;
    st->layer_slot_holds[i] = l;
    return GPT_OK;
}

/* Before layer l's op on compute: its gathered weights (ZeRO-3). */
static int use_layer(pipe_state *st, int l)
{
    return st->z.shard_params ? gpt_stream_wait_event(st->compute, st->ev_gathered[l % 2]) : GPT_OK;
}

/* After layer l's op on compute: its slot may be gathered into again (ZeRO-3). */
static int layer_used(pipe_state *st, int l)
{
    return st->z.shard_params ? gpt_event_record(st->ev_slot_used[l % 2], st->compute) : GPT_OK;
}

/* At the start of a step (ZeRO-3): the update is done on compute, so the slots' layers are
 * stale; block 0's working weights gathered into its slot for the step, compute waits. */
static int gather_embedding(pipe_state *st)
{
    const pipe_layout *z = &st->z;
    if (!z->shard_params) return GPT_OK;
    gpt_stream *ps = coll_stream(st->param_comm);
    const char *from = st->wparams ? (const char *)st->wparams : (const char *)st->params;
    st->layer_slot_holds[0] = st->layer_slot_holds[1] = -1;
    int rc;
    if ((rc = gpt_event_record(st->ev_step_start, st->compute)) || (rc = gpt_stream_wait_event(ps, st->ev_step_start)) ||
        (rc = coll_all_gather(st->param_comm, st->embed_slot, from + param_off(st, 0) * z->act, z->SE * z->act)) ||
        (rc = gpt_event_record(st->ev_embed_gathered, ps)))
        return rc;
    return gpt_stream_wait_event(st->compute, st->ev_embed_gathered);
}

/* ---- the step ------------------------------------------------------------------------------ */

/* Micro-batch k's forward on this stage. */
static int forward(pipe_state *st, int k, const int32_t *tokens, const int32_t *targets)
{
    const pipe_layout *z = &st->z;
    const gpt_shape *sh = &st->sh;
    gpt_stream *c = st->compute;
    const size_t N = (size_t)sh->batch * sh->seq;
    int32_t *ids = slot_ids(st, k);
    int rc;
    /* (the slot's ids, input and activations were B(k - S)'s: free once it is done, and once
     * F(k - S)'s output has left for the next stage) */
    if (k >= z->slots && ((rc = gpt_stream_wait_event(c, st->ev_slot_free[k % z->slots])) ||
                          (!z->last && (rc = gpt_stream_wait_event(c, st->ev_x_sent[k % z->slots])))))
        return rc;
    if ((rc = gpt_memcpy_h2d(c, ids, tokens + (size_t)k * N, N * sizeof(int32_t))) ||
        (rc = gpt_memcpy_h2d(c, ids + N, targets + (size_t)k * N, N * sizeof(int32_t))))
        return rc;
    if (z->first) {
        if ((rc = gpt_embed_forward_tp(c, sh, &st->tp, work_params(st, 0), ids, slot_input(st, k, z->l0), &st->scratch)))
            return rc;
    } else {
        gpt_stream *fs = coll_stream(st->fwd_comm);
        if ((k >= z->slots && (rc = gpt_stream_wait_event(fs, st->ev_slot_free[k % z->slots]))) ||
            (rc = coll_recv(st->fwd_comm, slot_input(st, k, z->l0), z->NC * z->act, st->rank - z->stride)) ||
            (rc = gpt_event_record(st->ev_x_in, fs)) || (rc = gpt_stream_wait_event(c, st->ev_x_in)))
            return rc;
    }
    for (int l = z->l0; l < z->l1; l++) {
        gpt_layer_acts a = slot_acts(st, k, l, 0);
        if ((rc = gather_layer(st, l)) || (rc = gather_layer(st, l + 1)) || (rc = use_layer(st, l)) ||
            (rc = gpt_layer_forward_tp(c, sh, &st->tp, work_params(st, 1 + l), slot_input(st, k, l),
                                       slot_input(st, k, l + 1), &a, &st->scratch)) ||
            (rc = layer_used(st, l)))
            return rc;
    }
    if (z->last) {
        st->head.losses = st->losses + (size_t)k * N;
        return gpt_head_forward_tp(c, sh, &st->tp, work_params(st, 0), st->grads, slot_input(st, k, z->l1), ids + N,
                                   &st->head);
    }
    gpt_stream *fs = coll_stream(st->fwd_comm);
    if ((rc = gpt_event_record(st->ev_x_out, c)) || (rc = gpt_stream_wait_event(fs, st->ev_x_out)))
        return rc;
    if ((rc = coll_send(st->fwd_comm, slot_input(st, k, z->l1), z->NC * z->act, st->rank + z->stride)))
        return rc;
    return gpt_event_record(st->ev_x_sent[k % z->slots], fs);
}

static int reduce_layer(pipe_state *st, int b, int k);

/* Micro-batch k's backward on this stage. */
static int backward(pipe_state *st, int k)
{
    const pipe_layout *z = &st->z;
    const gpt_shape *sh = &st->sh;
    gpt_stream *c = st->compute, *bs = coll_stream(st->bwd_comm);
    const int step = z->stride;
    int rc;
    if (z->last) {
        /* (dres is the head's output: written once B(k-1)'s dres has left for the stage before) */
        if (k > 0 && !z->first && (rc = gpt_stream_wait_event(c, st->ev_dres_sent))) return rc;
        gpt_head_backward_tp(c, sh, &st->tp, work_params(st, 0), st->grads, slot_input(st, k, z->l1), &st->head,
                             st->dres);
    } else if ((k > 0 && (rc = gpt_stream_wait_event(bs, st->ev_bwd_done))) ||
               (rc = coll_recv(st->bwd_comm, st->dres, z->NC * z->act, st->rank + step)) ||
               (rc = gpt_event_record(st->ev_dres_in, bs)) || (rc = gpt_stream_wait_event(c, st->ev_dres_in))) {
        return rc;
    }
    for (int l = z->l1 - 1; l >= z->l0; l--) {
        gpt_layer_acts a = slot_acts(st, k, l, 1);
        /* (ZeRO-3: the layer's weights, and the next one's prefetched; ZeRO-2/3: its gradient
         * slot once the reduction of the layer two above has read it) */
        if ((rc = gather_layer(st, l)) || (rc = gather_layer(st, l - 1)) || (rc = use_layer(st, l)) ||
            (z->shard_grads && (rc = gpt_stream_wait_event(c, st->ev_grad_slot_free[l % 2]))))
            return rc;
        if ((rc = gpt_layer_backward_tp(c, sh, &st->tp, work_params(st, 1 + l), grad_target(st, 1 + l),
                                        slot_input(st, k, l), st->dres, &a, &st->scratch,
                                        k == 0 || z->shard_grads ? GPT_GRAD_OVERWRITE : GPT_GRAD_ACCUMULATE)) ||
            (rc = layer_used(st, l)))
            return rc;
        /* (its reduction starts now, beside the backward of the layers below: DDP's and ZeRO-1's
         * after the last micro-batch, when the gradient is final) */
        if (st->dp_comm && (rc = reduce_layer(st, 1 + l, k))) return rc;
    }
    if (z->first && (rc = gpt_embed_backward_tp(c, sh, &st->tp, st->embed_in, st->dres, slot_ids(st, k), &st->scratch)))
        return rc;
    if ((rc = gpt_event_record(st->ev_bwd_done, c)) || (rc = gpt_event_record(st->ev_slot_free[k % z->slots], c)))
        return rc;
    if (z->first) return GPT_OK;
    if ((rc = gpt_stream_wait_event(bs, st->ev_bwd_done)) ||
        (rc = coll_send(st->bwd_comm, st->dres, z->NC * z->act, st->rank - step)))
        return rc;
    return gpt_event_record(st->ev_dres_sent, bs);
}

/* After the last backward, on the first and last stage: block 0's two parts swapped (the first
 * sends the embedding's and gets the head's into its block 0, the last the other way round)
 * and joined, head's + embedding's, as one rank joins them (model.h). */
static int join_embedding(pipe_state *st)
{
    const pipe_layout *z = &st->z;
    gpt_stream *c = st->compute, *ts = coll_stream(st->tie_comm);
    if (!z->has_embed) return GPT_OK;
    if (!(z->first && z->last)) {
        /* (the same data and tensor-parallel place in the other end stage) */
        const int peer = z->first ? st->rank + (z->P - 1) * z->stride : st->rank - (z->P - 1) * z->stride;
        float *send = z->first ? st->embed_in : st->grads, *recv = z->first ? st->grads : st->embed_in;
        int rc;
        if ((rc = gpt_event_record(st->ev_bwd_done, c)) || (rc = gpt_stream_wait_event(ts, st->ev_bwd_done)) ||
            (rc = coll_sendrecv(st->tie_comm, send, peer, recv, peer, z->PE * sizeof(float))) ||
            (rc = gpt_event_record(st->ev_x_in, ts)) || (rc = gpt_stream_wait_event(c, st->ev_x_in)))
            return rc;
    }
    gpt_embed_grads_join(c, st->grads, st->embed_in, z->PE);
    return GPT_OK;
}

/* This rank's data-parallel shard (dp.h's shards of the block) of block b's gradient g, held
 * whole: its first float. */
static const float *own_shard(const pipe_state *st, int b, const float *g)
{
    return g + (size_t)st->z.dp_rank * dp_shard_len(block_len(st, b), st->z.dpw);
}

/* Block b's norms from this rank's data-parallel shard of its reduced gradient (`shard`: the
 * shard's first float, whether the rank holds the block whole or the shard alone), into entry
 * dp_rank of the block's row: the canonical (block, shard) norm of dp.h, and with T > 1 the
 * shard's part in the split tensors there and its part in the whole ones in entry D + dp_rank
 * (counted from tensor-parallel rank 0 only: every rank holds the same).  outcome() takes
 * entry j from data-parallel rank j, so DDP and ZeRO 1-3 combine the same values. */
static void shard_norms(pipe_state *st, gpt_stream *ds, int b, const float *shard)
{
    const pipe_layout *z = &st->z;
    const size_t n = block_len(st, b), S = dp_shard_len(n, z->dpw), lo = (size_t)z->dp_rank * S,
                 real = dp_shard_real(n, S, z->dp_rank);
    float *row = st->norms + (size_t)b * z->norm_row;
    if (z->T == 1) {
        dp_shard_norm(ds, shard, n, z->dpw, z->dp_rank, row + z->dp_rank);
        return;
    }
    const size_t split = b == 0 ? gpt_embed_layout_of(&st->sh).n_split : gpt_layer_layout_of(&st->sh).n_split;
    const size_t cut = split <= lo ? 0 : split - lo < real ? split - lo : real; /* (its floats in the split part) */
    /* (dp.h's norm of a piece as one whole shard: its floats, or 0 for none) */
    dp_shard_norm(ds, shard, cut, 1, 0, row + z->dp_rank);
    dp_shard_norm(ds, shard + cut, real - cut, 1, 0, row + z->dpw + z->dp_rank);
}

/* --sequence-parallel: each rank's gradient of its blocks' LayerNorm parameters covers its rows
 * of the stream only; summed over the tensor-parallel ranks (on their group's stream, compute
 * waiting), after which every rank holds the whole, the same.  Blocks 0 .. last_block that it
 * holds (with D > 1 the layers' are summed in reduce_layer). */
static int sum_norm_grads(pipe_state *st, int last_block)
{
    gpt_stream *c = st->compute, *ts = st->tp_comm ? coll_stream(st->tp_comm) : NULL;
    int rc;
    if (!st->sh.sp) return GPT_OK;
    if ((rc = gpt_event_record(st->ev_tp_in, c)) || (rc = gpt_stream_wait_event(ts, st->ev_tp_in))) return rc;
    for (int b = 0; b <= last_block; b++) {
        if (!holds_block(st, b)) continue;
        size_t at;
        const size_t n = gpt_tp_norm_params(&st->sh, b == 0, &at);
        if ((rc = coll_all_reduce_sum(st->tp_comm, st->grads + block_off(st, b) + at, n))) return rc;
    }
    if ((rc = gpt_event_record(st->ev_tp_out, ts))) return rc;
    return gpt_stream_wait_event(c, st->ev_tp_out);
}

/* D > 1: layer block b's gradient, once micro-batch k's backward of it is done, reduced over
 * the stage's D ranks on dp-comm while the compute stream goes on with the layers below
 * (--sequence-parallel: its LayerNorms' gradients summed over the tensor-parallel ranks first,
 * on their group's stream), and its norms taken behind the last micro-batch's reduction.
 * DDP and ZeRO-1 reduce it once, after the last micro-batch (the backwards accumulated it
 * whole), all-reduced: the same sums, the same bits as after the backward.  ZeRO-2/3 reduce-
 * scatter each micro-batch's from the layer's slot into this rank's shard (the first's
 * overwrites it, the rest are added), then free the slot for the layer two below. */
static int reduce_layer(pipe_state *st, int b, int k)
{
    const pipe_layout *z = &st->z;
    gpt_stream *c = st->compute, *ds = coll_stream(st->dp_comm);
    float *g = grad_target(st, b);
    int rc;
    if (!z->shard_grads && k < z->M - 1) return GPT_OK;
    if (st->sh.sp) {
        gpt_stream *ts = coll_stream(st->tp_comm);
        size_t at;
        const size_t n = gpt_tp_norm_params(&st->sh, 0, &at);
        if ((rc = gpt_event_record(st->ev_tp_in, c)) || (rc = gpt_stream_wait_event(ts, st->ev_tp_in)) ||
            (rc = coll_all_reduce_sum(st->tp_comm, g + at, n)) || (rc = gpt_event_record(st->ev_norms_summed, ts)) ||
            (rc = gpt_stream_wait_event(ds, st->ev_norms_summed)))
            return rc;
    } else if ((rc = gpt_event_record(st->ev_grad_ready, c)) || (rc = gpt_stream_wait_event(ds, st->ev_grad_ready))) {
        return rc;
    }
    if (!z->shard_grads) {
        if ((rc = coll_all_reduce_sum(st->dp_comm, g, block_len(st, b)))) return rc;
        shard_norms(st, ds, b, own_shard(st, b, g));
        return GPT_OK;
    }
    float *shard = st->grad_shards + adam_off(st, b);
    if (k == 0) {
        rc = coll_reduce_scatter_sum(st->dp_comm, shard, g, z->SL);
    } else if (!(rc = coll_reduce_scatter_sum(st->dp_comm, st->grad_tmp, g, z->SL))) {
        gpt_add_f32(ds, shard, shard, st->grad_tmp, z->SL);
    }
    if (rc || (rc = gpt_event_record(st->ev_grad_slot_free[(b - 1) % 2], ds))) return rc;
    if (k == z->M - 1) shard_norms(st, ds, b, shard);
    return GPT_OK;
}

static int reduce_blocks(pipe_state *st)
{
    const pipe_layout *z = &st->z;
    gpt_stream *c = st->compute, *ds = st->dp_comm ? coll_stream(st->dp_comm) : c;
    int rc;
    /* (D > 1: the layers were reduced during the last backward, reduce_layer; block 0 is left,
     * once its two parts are joined) */
    if (!st->dp_comm && (rc = sum_norm_grads(st, z->l1))) return rc;
    if (st->dp_comm && z->has_embed && (rc = sum_norm_grads(st, 0))) return rc;
    if (st->dp_comm && ((rc = gpt_event_record(st->ev_bwd_done, c)) || (rc = gpt_stream_wait_event(ds, st->ev_bwd_done))))
        return rc;
    for (int b = 0; b <= (st->dp_comm ? 0 : z->l1); b++) {
        if (!holds_block(st, b)) continue;
        float *g = st->grads + block_off(st, b);
        /* (ZeRO-2/3: block 0, accumulated whole over the micro-batches, reduce-scattered once) */
        const float *shard = z->shard_grads ? st->grad_shards : own_shard(st, b, g);
        if (st->dp_comm && (rc = z->shard_grads ? coll_reduce_scatter_sum(st->dp_comm, st->grad_shards, g, z->SE)
                                                : coll_all_reduce_sum(st->dp_comm, g, block_len(st, b))))
            return rc;
        if (b > 0 || z->first) shard_norms(st, ds, b, shard);
    }
    if (st->dp_comm && ((rc = gpt_event_record(st->ev_x_in, ds)) || (rc = gpt_stream_wait_event(c, st->ev_x_in))))
        return rc;
    return GPT_OK;
}

/* The step's loss, its blocks' norms, every rank's norms gathered and combined in the model's
 * block order (the owner's entry of each: block 0's from the first stage), as one rank does. */
static int outcome(pipe_state *st, step_result *out)
{
    const pipe_layout *z = &st->z;
    const int L = st->sh.layers, N = st->sh.batch * st->sh.seq;
    gpt_stream *c = st->compute;
    const size_t row = (size_t)z->norm_row;
    int rc;
    if ((rc = reduce_blocks(st))) return rc;
    if ((rc = gpt_memcpy_d2h(c, st->host_norms, st->norms, (size_t)(L + 1) * row * sizeof(float))) ||
        (z->last && (rc = gpt_memcpy_d2h(c, st->host_losses, st->losses, (size_t)z->M * N * sizeof(float)))) ||
        (rc = gpt_stream_sync(c)))
        return rc;
    double local = 0;
    for (int k = 0; z->last && z->tp_rank == 0 && k < z->M; k++)
        local += gpt_mean_loss(st->host_losses + (size_t)k * N, N);
    /* (the last stage's sum, from tensor-parallel rank 0: the others have the same losses; every
     * other rank adds 0, which changes no bit) */
    if ((rc = coll_host_sum_doubles(st->tie_comm, &local, 1))) return rc;
    out->loss = z->M == 1 && z->dpw == 1 ? local : local / ((double)z->M * z->dpw);
    float *all = st->host_norms + (L + 1) * row, *table = all + (size_t)st->world * (L + 1) * row;
    if ((rc = coll_host_all_gather(st->tie_comm, all, st->host_norms, (size_t)(L + 1) * row * sizeof(float))))
        return rc;
    /* per block: each tensor-parallel rank's share of the split tensors in rank order, then
     * the whole ones once (one rank's table without T); shard j's entry from data-parallel
     * rank j, which made it (shard_norms) */
    size_t at = 0;
    for (int b = 0; b <= L; b++) {
        for (int r = 0; r < z->T; r++)
            for (int j = 0; j < z->dpw; j++)
                table[at++] = all[((size_t)owner_of_block(st, b, j, r) * (L + 1) + b) * row + (size_t)j];
        for (int j = 0; z->T > 1 && j < z->dpw; j++)
            table[at++] = all[((size_t)owner_of_block(st, b, j, 0) * (L + 1) + b) * row + (size_t)(z->dpw + j)];
    }
    out->grad_norm = gpt_combine_norms(table, (int)at);
    out->skipped = !isfinite(out->grad_norm);
    return GPT_OK;
}

/* ZeRO-1/2: every block's params (and bf16 working copy) gathered from the D ranks' updated
 * shards, on the data-parallel group's stream after compute's updates; compute waits. */
static int gather_shards(pipe_state *st)
{
    const pipe_layout *z = &st->z;
    gpt_stream *c = st->compute, *ds = coll_stream(st->dp_comm);
    int rc;
    if ((rc = gpt_event_record(st->ev_bwd_done, c)) || (rc = gpt_stream_wait_event(ds, st->ev_bwd_done))) return rc;
    for (int b = 0; b <= z->l1; b++) {
        if (!holds_block(st, b)) continue;
        const size_t off = block_off(st, b), S = b == 0 ? z->SE : z->SL, mine = (size_t)z->dp_rank * S;
        if ((rc = coll_all_gather(st->dp_comm, st->params + off, st->params + off + mine, S * sizeof(float))))
            return rc;
        char *wp = st->wparams;
        if (wp && (rc = coll_all_gather(st->dp_comm, wp + off * z->act, wp + (off + mine) * z->act, S * z->act)))
            return rc;
    }
    if ((rc = gpt_event_record(st->ev_x_in, ds))) return rc;
    return gpt_stream_wait_event(c, st->ev_x_in);
}

static int optimizer(pipe_state *st, int iteration, step_result *out)
{
    const pipe_layout *z = &st->z;
    const engine_config *cfg = st->env.cfg;
    out->lr = gpt_lr_at(&cfg->optim, iteration);
    if (out->skipped) return GPT_OK;
    const float lr = (float)out->lr, scale = gpt_clip_scale(&cfg->optim, out->grad_norm);
    const int t = ++st->adam_step;
    for (int b = 0; b <= z->l1; b++) {
        if (!holds_block(st, b)) continue;
        const size_t off = block_off(st, b), aoff = adam_off(st, b);
        void *act = st->wparams ? (char *)st->wparams + off * z->act : NULL;
        const size_t n_decay = b == 0 ? gpt_embed_layout_of(&st->sh).n_decay : gpt_layer_layout_of(&st->sh).n_decay;
        if (z->zero1) {
            /* (this rank's shard of the block: AdamW is elementwise, the same bits as the whole;
             * its params and gradient where the stage keeps them, whole or as shards) */
            const size_t mine = (size_t)z->dp_rank * (b == 0 ? z->SE : z->SL);
            const size_t pat = z->shard_params ? aoff : off + mine;
            dp_shard_adamw(st->compute, st->params + pat, st->wparams ? (char *)st->wparams + pat * z->act : NULL,
                           z->shard_grads ? st->grad_shards + aoff : st->grads + off + mine, st->adam_m + aoff,
                           st->adam_v + aoff, block_len(st, b), n_decay, z->dpw, z->dp_rank, &cfg->optim, lr, t,
                           scale, NULL);
        } else {
            gpt_block_adamw_act(st->compute, st->params + off, act, st->grads + off, st->adam_m + aoff,
                                st->adam_v + aoff, block_len(st, b), n_decay, &cfg->optim, lr, t, scale);
        }
    }
    /* (ZeRO-3 gathers each block when it is next used) */
    return z->zero1 && !z->shard_params ? gather_shards(st) : GPT_OK;
}

int megatron_pipeline_step(void *state, int iteration, const int32_t *tokens, const int32_t *targets,
                           step_result *out)
{
    pipe_state *st = state;
    const pipe_layout *z = &st->z;
    gpt_stream *c = st->compute;
    int rc = GPT_OK;
    const double t0 = wall_ms();
    /* block 0's parts accumulate: the head's (last stage) in its gradient, the embedding's
     * (first) in its own; the layers' are overwritten by the first backward */
    if (z->last) rc = gpt_stream_memset_zero(c, st->grads, z->PE * sizeof(float));
    if (!rc && z->first) rc = gpt_stream_memset_zero(c, st->embed_in, z->embed_in);
    if (!rc) rc = gather_embedding(st);
    if (rc) return rc;
    const int warm = z->P - z->stage - 1 < z->M ? z->P - z->stage - 1 : z->M;
    int nf = 0, nb = 0;
    while (nf < warm)
        if ((rc = forward(st, nf++, tokens, targets))) return rc;
    while (nf < z->M) {
        if ((rc = forward(st, nf++, tokens, targets))) return rc;
        if (nb == 0) engine_fault_point(&st->env, iteration, FAULT_BACKWARD);
        if ((rc = backward(st, nb++))) return rc;
    }
    while (nb < z->M) {
        if (nb == 0) engine_fault_point(&st->env, iteration, FAULT_BACKWARD);
        if ((rc = backward(st, nb++))) return rc;
    }
    if ((rc = join_embedding(st)) || (rc = gpt_stream_sync(coll_stream(st->fwd_comm))) ||
        (rc = gpt_stream_sync(coll_stream(st->bwd_comm))) || (rc = outcome(st, out)))
        return rc;
    const double t1 = wall_ms();
    if ((rc = optimizer(st, iteration, out))) return rc;
    if ((rc = gpt_stream_sync(c)) || (rc = gpt_stream_sync(coll_stream(st->tie_comm))) ||
        (st->param_comm && (rc = gpt_stream_sync(coll_stream(st->param_comm)))))
        return rc;
    /* (the forwards and backwards interleave: their time is the backward's) */
    out->ms_forward = 0;
    out->ms_backward = t1 - t0;
    out->ms_optimizer = wall_ms() - t1;
    return GPT_OK;
}

int megatron_pipeline_read_params(void *state, float *host_params)
{
    pipe_state *st = state;
    const pipe_layout *z = &st->z;
    const int L = st->sh.layers;
    const size_t total = z->PE + (size_t)L * z->PL;
    /* (for tests and --save-params: host arrays outside the budget, every rank's whole model) */
    float *mine = calloc(total, sizeof(float)), *all = malloc(total * (size_t)st->world * sizeof(float));
    int rc = mine && all ? GPT_OK : GPT_ERR_OOM;
    if (!rc && z->shard_params) {
        /* (ZeRO-3, one stage: its blocks put together from the data-parallel ranks' shards,
         * which are Adam's layout, dp_gather_blocks') */
        float *shards = malloc(z->params);
        rc = shards ? gpt_memcpy_d2h(st->compute, shards, st->params, z->params) : GPT_ERR_OOM;
        if (!rc) rc = gpt_stream_sync(st->compute);
        if (!rc) rc = dp_gather_blocks(st->dp_comm, shards, z->PE, z->PL, L, mine);
        free(shards);
    }
    for (int b = 0; !rc && !z->shard_params && b <= L; b++) {
        if (!holds_block(st, b)) continue;
        const size_t at = b == 0 ? 0 : z->PE + (size_t)(b - 1) * z->PL;
        rc = gpt_memcpy_d2h(st->compute, mine + at, st->params + block_off(st, b), block_len(st, b) * sizeof(float));
    }
    if (!rc) rc = gpt_stream_sync(st->compute);
    if (!rc) rc = coll_host_all_gather(st->tie_comm, all, mine, total * sizeof(float));
    /* (blocks at the model's offsets: with T > 1 each put together from the ranks' shares) */
    const size_t whole_e = gpt_embed_layout_of(&st->env.cfg->shape).total,
                 whole_l = gpt_layer_layout_of(&st->env.cfg->shape).total;
    for (int b = 0; !rc && b <= L; b++) {
        const size_t at = b == 0 ? 0 : z->PE + (size_t)(b - 1) * z->PL;
        const size_t whole_at = b == 0 ? 0 : whole_e + (size_t)(b - 1) * whole_l;
        for (int r = 0; r < z->T; r++) {
            float *share = all + (size_t)owner_of_block(st, b, z->dp_rank, r) * total + at;
            if (z->T == 1) memcpy(host_params + whole_at, share, block_len(st, b) * sizeof(float));
            else gpt_tp_move_block(host_params + whole_at, share, &st->sh, r, b == 0, 0);
        }
    }
    free(mine);
    free(all);
    return rc;
}

/* ---- the prediction (megatron-lm's predict hands --tp / --pp here) -------------------------- */

/* A collective over a group of g ranks, `bytes` its full buffer, from the rates calibrated at
 * the run's world W: in a ring each rank moves (g - 1) / g of the buffer (twice that in an
 * all-reduce), so the world's per-byte time is scaled by that share against the world's. */
static double group_coll_ms(double lat_ms, double gbs, double bytes, int g, int W)
{
    if (g <= 1) return 0;
    const double share = W > 1 ? ((double)(g - 1) / g) / ((double)(W - 1) / W) : 1;
    return lat_ms + bytes * share / (gbs * 1e6);
}

/* One stage's pieces of a micro-batch (ms): its forward and backward on the compute stream,
 * the tensor-parallel collectives the compute waits on included. */
typedef struct stage_cost {
    double fwd, bwd, tp_comm; /* (tp_comm: of fwd + bwd, the layer split's collectives) */
    double bwd_layer;         /* of bwd, one layer's (the layers' mean) */
    double param_comm;        /* ZeRO-3: a micro-batch's layer gathers (busy, mostly hidden) */
    double gather_shown;      /* of fwd + bwd, what of them the compute does not hide */
    size_t params;            /* floats of its blocks (this rank's share with T > 1) */
    size_t layer_params;      /* floats of one layer block (this rank's share) */
    int layers, has_embed;
} stage_cost;

static stage_cost stage_cost_of(const engine_config *cfg, const machine_rates *m, int s)
{
    const int W = engine_world(cfg), T = engine_tp(cfg);
    const pipe_layout z = layout_of(cfg, s * engine_dp_world(cfg) * T);
    const double full = (double)cfg->shape.batch * cfg->shape.seq * cfg->shape.hidden * (double)z.act;
    /* per sub-layer: an all-reduce of the (N, C) output, or with --sequence-parallel an all-gather
     * before and a reduce-scatter after (the same bytes each way) */
    const double sub = cfg->sequence_parallel
                           ? group_coll_ms(m->ag_ms, m->ag_gbs, full, T, W) + group_coll_ms(m->rs_ms, m->rs_gbs, full, T, W)
                           : group_coll_ms(m->ar_ms, m->ar_gbs, full, T, W);
    stage_cost c = {0, 0, 0, 0, 0, 0, (z.has_embed ? z.PE : 0) + (size_t)z.Ls * z.PL, z.PL, z.Ls, z.has_embed};
    /* The split layer as --calibrate timed it at T (a rank's share, its collectives apart);
     * where it has not (a file from before, or a T it did not try), 1/T of the whole layer: its
     * matmuls and attention split, its LayerNorms and residual adds (a few percent) not.  The
     * vocabulary-parallel embedding and head: 1/T of theirs. */
    machine_rates split = *m;
    const struct machine_tp_split *timed = T > 1 ? machine_tp_split(m, T) : NULL;
    if (timed && timed->layer_fwd_ms > 0 && timed->layer_bwd_ms > 0) {
        split.layer_fwd_ms = timed->layer_fwd_ms, split.layer_bwd_ms = timed->layer_bwd_ms;
        split.layer_bwd_none_ms = timed->layer_bwd_none_ms; /* (0 in a file from before: as there) */
        /* (selective's recompute alone is not timed split: its share of the whole layer's) */
        split.layer_recompute_selective_ms = m->layer_recompute_selective_ms * timed->layer_fwd_ms / m->layer_fwd_ms;
    } else if (T > 1) {
        split.layer_fwd_ms = m->layer_fwd_ms / T, split.layer_bwd_ms = m->layer_bwd_ms / T;
        split.layer_bwd_none_ms = m->layer_bwd_none_ms / T;
        split.layer_recompute_selective_ms = m->layer_recompute_selective_ms / T;
    }
    for (int l = z.l0; l < z.l1; l++) {
        /* two sub-layers each way; a full recompute runs the forward's two again (not the
         * model's last layer: it recomputes nothing) */
        const int bwd_subs = cfg->recompute == GPT_RECOMPUTE_FULL && l < cfg->shape.layers - 1 ? 4 : 2;
        c.fwd += split.layer_fwd_ms + 2 * sub;
        c.bwd += pred_layer_bwd_ms(&split, cfg, l) + bwd_subs * sub;
        c.tp_comm += (2 + bwd_subs) * sub;
    }
    /* ZeRO-3: each layer's weights gathered over the D copies before its forward and its
     * backward, one layer ahead on a stream of their own: what a gather takes beyond the
     * compute it hides behind shows (the layers a pass starts with are still in their slots) */
    if (z.shard_params) {
        const double gather = group_coll_ms(m->ag_ms, m->ag_gbs, (double)z.PL * (double)z.act, z.dpw, W);
        const double f1 = z.Ls > 0 ? c.fwd / z.Ls : 0, b1 = z.Ls > 0 ? c.bwd / z.Ls : 0;
        c.gather_shown = (z.Ls > 2 ? z.Ls - 2 : 0) * (pred_max(0, gather - f1) + pred_max(0, gather - b1));
        c.fwd += (z.Ls > 2 ? z.Ls - 2 : 0) * pred_max(0, gather - f1);
        c.bwd += (z.Ls > 2 ? z.Ls - 2 : 0) * pred_max(0, gather - b1);
        c.param_comm = 2.0 * (z.Ls > 2 ? z.Ls - 2 : 0) * gather;
    }
    c.bwd_layer = z.Ls > 0 ? c.bwd / z.Ls : 0;
    if (z.first) c.fwd += m->embed_fwd_ms / T + sub, c.bwd += m->embed_bwd_ms / T, c.tp_comm += sub;
    /* the head (fwd + bwd, vocabulary-parallel): every rank's cross-entropy stats gathered and
     * dL/d(lnf) summed */
    if (z.last) {
        const double stats = group_coll_ms(m->ag_ms, m->ag_gbs, 3.0 * sizeof(float) * cfg->shape.batch * cfg->shape.seq * T,
                                           T, W);
        c.fwd += m->head_ms / T + stats + sub;
        c.tp_comm += stats + sub;
    }
    return c;
}

/* The step on machine m (pred_scaled's pieces), in the order of the top comment: each stage's
 * 1F1B order walked against the others' (a forward waits for the stage before's output and
 * its send, a backward for the stage after's dres and its send; the bubble follows), then on
 * every stage the tied embedding's swap, the data-parallel all-reduce of its blocks (ZeRO-1:
 * the same, and the params gathered after the update), the norms' gather (every stage waits
 * for the last), and AdamW.  The layer split's collectives lie on the compute stream's path
 * (each op needs the one before's sum).  A send is the all-gather's per-rank rate. */
void megatron_pipeline_predict(const engine_config *cfg, const machine_rates *m, engine_prediction *out)
{
    memset(out, 0, sizeof *out);
    if (pred_no_collectives(cfg, m, out)) return;
    const int W = engine_world(cfg), P = engine_pp(cfg), D = engine_dp_world(cfg), M = engine_micro_batches(cfg);
    const int zero = D > 1 ? cfg->zero_stage : 0, zero1 = zero >= 1;
    const pipe_layout z0 = layout_of(cfg, 0);
    const double link_gbs = W > 1 ? m->ag_gbs * (W - 1) / W : 0;
    const double send = P > 1 ? m->ag_ms + (double)z0.NC * (double)z0.act / (link_gbs * 1e6) : 0;
    stage_cost *sc = calloc((size_t)P, sizeof *sc);
    double *f_end = pred_arrays(out, (size_t)P * (size_t)M, 2);
    int *next = calloc((size_t)P, sizeof *next);
    double *free_at = calloc((size_t)P, sizeof *free_at);
    if (!sc || !f_end || !next || !free_at) {
        snprintf(out->why, sizeof out->why, "out of memory");
        free(sc), free(f_end), free(next), free(free_at);
        return;
    }
    double *b_end = f_end + (size_t)P * M;
    for (int s = 0; s < P; s++) sc[s] = stage_cost_of(cfg, m, s);
    /* list scheduling: each stage runs its ops in 1F1B order as their inputs arrive (the
     * order is deadlock-free, so every pass places at least one) */
    for (int placed = 0; placed < 2 * P * M;) {
        int progress = 0;
        for (int s = 0; s < P; s++) {
            const int w = P - s - 1 < M ? P - s - 1 : M;
            while (next[s] < 2 * M) {
                const int i = next[s];
                int fwd, k;
                if (i < w) fwd = 1, k = i;
                else if (i < w + 2 * (M - w)) fwd = (i - w) % 2 == 0, k = fwd ? w + (i - w) / 2 : (i - w) / 2;
                else fwd = 0, k = M - 2 * M + i; /* (the backwards left: M - w .. M - 1) */
                double ready;
                if (fwd) {
                    if (s > 0 && f_end[(size_t)(s - 1) * M + k] <= 0) break;
                    ready = s > 0 ? f_end[(size_t)(s - 1) * M + k] + send : 0;
                } else {
                    if (s < P - 1 && b_end[(size_t)(s + 1) * M + k] <= 0) break;
                    ready = s < P - 1 ? b_end[(size_t)(s + 1) * M + k] + send : 0;
                }
                const double start = pred_max(free_at[s], ready);
                free_at[s] = start + (fwd ? sc[s].fwd : sc[s].bwd);
                (fwd ? f_end : b_end)[(size_t)s * M + k] = free_at[s];
                next[s]++, placed++, progress = 1;
            }
        }
        if (!progress) break;
    }
    /* the data-parallel reduction: each layer's as the last backward finishes it (the layers
     * in the backward's order, one after another on dp-comm; ZeRO-2/3: every micro-batch's,
     * reduce-scattered), block 0's after the tie's swap; the norms then wait for every stage;
     * then AdamW and (ZeRO-1/2) the gather */
    const double PE = (double)z0.PE;
    const double reduce_gbs = zero >= 2 ? m->rs_gbs : m->ar_gbs, reduce_lat = zero >= 2 ? m->rs_ms : m->ar_ms;
    double norms_at = 0, busy_comm = 0, crit_compute = 0, step = 0;
    for (int s = 0; s < P; s++) {
        double dp = 0;
        for (int k = zero >= 2 ? 0 : M - 1; D > 1 && k < M; k++) {
            const double bwd_start = b_end[(size_t)s * M + k] - sc[s].bwd;
            for (int i = 0; i < sc[s].layers; i++)
                dp = pred_max(dp, bwd_start + (i + 1) * sc[s].bwd_layer) +
                     group_coll_ms(reduce_lat, reduce_gbs, (double)sc[s].layer_params * sizeof(float), D, W);
        }
        double t = free_at[s];
        if (P > 1 && sc[s].has_embed) t += m->ag_ms + PE * sizeof(float) / (link_gbs * 1e6);
        if (sc[s].has_embed) t = pred_max(t, dp) + group_coll_ms(reduce_lat, reduce_gbs, PE * sizeof(float), D, W);
        norms_at = pred_max(norms_at, pred_max(t, dp));
    }
    for (int s = 0; s < P; s++) {
        const double n = (double)sc[s].params, adam = pred_gpu_adam_ms(m, zero1 ? n / D : n);
        const double gather = zero == 1 || zero == 2
                                  ? group_coll_ms(m->ag_ms, m->ag_gbs, n * (sizeof(float) + (cfg->bf16 ? 2 : 0)), D, W)
                                  : 0;
        /* (ZeRO-3: block 0's and the first layers' gathers open the step) */
        const double first = zero == 3 ? group_coll_ms(m->ag_ms, m->ag_gbs, (PE + 2.0 * (double)z0.PL) * z0.act, D, W) : 0;
        step = pred_max(step, first + norms_at + adam + gather);
        const double compute = M * (sc[s].fwd + sc[s].bwd - sc[s].tp_comm - sc[s].gather_shown) + adam;
        if (compute > crit_compute) {
            crit_compute = compute;
            busy_comm = M * (sc[s].tp_comm + sc[s].param_comm) + 2.0 * M * send + first + gather +
                        (zero >= 2 ? M : 1) * group_coll_ms(reduce_lat, reduce_gbs, n * sizeof(float), D, W);
        }
    }
    out->ms = step;
    out->busy_ms[BUSY_COMPUTE] = crit_compute;
    out->busy_ms[BUSY_COMM] = busy_comm;
    out->bound = busy_comm > crit_compute ? BUSY_COMM : BUSY_COMPUTE;
    out->modelled = 1;
    free(sc), free(f_end), free(next), free(free_at);
}
