/*
 * megatron-lm — no offload: the baseline every other engine must reproduce; on N ranks,
 * data parallel with the ZeRO stages of DeepSpeed (--zero-stage 0-3).
 * (One file of ~1,000 lines: the four stages, the micro-batches and the graphs are one step
 * over one state, each a few branches of it; apart, each would repeat the schedule.)
 *
 * Blocks (kernels/model.h): block 0 is the embedding block, block 1+l is layer l.  On N ranks
 * each block of n floats is cut into N shards of S floats and padded to N·S (runtime/dp.h),
 * so that a reduce-scatter or an all-gather of a block is one in-place collective.  On one
 * rank S = n: no padding, and the arrays are exactly the canonical [embed | layer 0 | ...].
 *
 * Where things live (fp32; --dtype bf16 makes the activations and a working copy of the
 * weights bf16, with fp32 master weights, gradients and Adam state), per rank:
 *   stage 0 (DDP)  GPU: params, grads, Adam m and v, whole (padded) on every rank;
 *                  bf16: the whole working copy
 *   stage 1        GPU: whole params (fp32: they are the working weights; bf16: the whole
 *                  working copy, and the fp32 master only for this rank's shards), whole
 *                  grads; Adam m, v of this rank's shards
 *   stage 2        as 1, but the grads are this rank's shards plus, while they are being
 *                  produced, the whole embedding block's and two layer gradient slots
 *   stage 3        as 2, and the params too are this rank's shards (fp32 master; bf16 also
 *                  the shards of the working copy); the working weights are gathered into a
 *                  whole embedding slot (kept for the step) and two layer slots
 *   every stage    the embedding's own part of block 0's gradient (whole, padded: model.h's
 *                  tied embedding), the checkpointed layer inputs x[0..L], the layers' activations as
 *                  --recompute keeps them (full: one layer's working set; selective: that
 *                  set less the GEMM outputs, which every layer keeps; none: every layer's
 *                  all), the backward scratch, the head's activations (one chunk
 *                  of logits at a time), ids, (L+1)·N shard norms
 *   host           the ids of this rank's micro-batches (the driver's), losses and norms read
 *                  back, a staging block for initialisation
 *
 * One step, stream by stream (M micro-batches per rank; the global batch is M·B·N):
 *   compute    per micro-batch: ids in; embed; layers 0..L-1; head (losses and, chunk by
 *              chunk, the wte and dlnf gradients); head backward; layers L-1..0 (recompute
 *              each from x[l], but L-1, whose forward's activations are still there);
 *              embedding backward (into a block of its own, joined to the head's part
 *              of block 0 after the last micro-batch: model.h).  Gradients accumulate over micro-
 *              batches; each token's loss weighs 1/(B·T·M·N), so the sum is the mean.  The
 *              first micro-batch overwrites the layers' gradients (GPT_GRAD_OVERWRITE; a
 *              ZeRO-2/3 slot every time), so only the embedding block is zeroed a step.
 *              Then: the global norm (dp.h: the same bits at every stage) of the shard
 *              norms, clip, lr, AdamW on this rank's shards (all of it at stage 0).
 *   grad-comm  stage 0/1: each layer's gradient block all-reduced as soon as its backward
 *              of the last micro-batch is done (one bucket per layer, overlapped with the
 *              backward of the layers below it), the embedding block at the end;
 *              stage 2/3: each layer's gradient slot reduce-scattered into this rank's
 *              shard after every micro-batch's backward of it (the slot is then free for the
 *              layer two below); the embedding block's once, after the last micro-batch.
 *              Behind each block's last reduction: its shard norms (one rank: no reduction,
 *              the norms alone, under the backward of the layers below).
 *   param-comm stage 1/2: after AdamW, every block all-gathered in place (the working
 *              weights: fp32 params, or the bf16 copy); stage 3: the embedding block
 *              gathered at the start of the step, each layer gathered into a slot before
 *              its forward and again before its backward, one layer ahead (prefetch; the
 *              slots still holding the top two layers after the forward are reused).
 * Events order every hand-off between the streams; the host waits at the end of each phase
 * (that is what the phase timers measure; it reads the losses and norms back anyway).
 * --graphs (stage 0 or 1 on any number of ranks, no --tp/--pp, a backend with graphs; auto
 * unless --profile): each micro-batch's forward (after its ids' copy) and backward are issued
 * once more at the second step into a CUDA graph each, the last backward's with the gradient
 * stream's branch (its NCCL all-reduces and norms) taken back into compute at its end, and
 * replayed as one launch a phase from then on: the same kernels on the same pointers in the
 * same order, so the same bits; the optimizer stays eager (its learning rate and clip scale
 * change every step).  What watches a step still sees a replay: the busy spans' events are
 * stamps that the graph records (spans_move), and each group's captured collectives are
 * counted as issued at every launch with events the graph records after them (coll_replayed),
 * so a replay that hangs in an all-reduce is named by the watchdog as an eager one is.
 * Summation order: ranks change only the order of the reductions over ranks; at two ranks a
 * sum of two is the same either way, so every stage gives the same bits as DDP there
 * (multi-micro-batch stage 2/3 add per-micro-batch reductions: another order).
 */
#include "megatron_lm.h"
#include "step_bound.h"
#include "megatron_pipeline.h"

#include "runtime/collectives.h"
#include "runtime/dp.h"
#include "runtime/spans.h"
#include "runtime/predict.h"
#include "runtime/timer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One block's place in the padded whole arrays (off) and in the shard arrays (soff). */
typedef struct block_geom {
    size_t n, n_decay; /* real floats; weight decay on [0, n_decay) */
    size_t S;          /* shard length */
    size_t off, soff;
} block_geom;

/* Where the arrays are, per stage (NULL when the stage has none of it). */
typedef struct megatron_sizes {
    int world, stage, M, bf16;
    size_t padded_total, shard_total, padded_embed, padded_layer, shard_max;
    size_t params_full, params_shard;   /* fp32 master */
    size_t wparams_full, wparams_shard; /* bf16 working copy */
    size_t wslots;                      /* stage 3: embed slot + 2 layer slots (act type) */
    size_t grads_full, grads_embed, grads_slots, grads_shard, grads_tmp;
    size_t grads_lowp;                  /* --grad-reduce-dtype bf16: a block's gradient in bf16 */
    size_t grads_embed_in;              /* the embedding's own part of block 0's gradient */
    size_t adam;                        /* one of m, v */
    size_t inputs, layer_acts, scratch, head, dres, ids, norms, losses;
    size_t host_losses, host_norms, host_staging;
} megatron_sizes;

/* A micro-batch's phase as a CUDA graph: the graph, its collectives (each group's manifest:
 * counted again at every replay) and the busy spans it records [span_from, span_to). */
typedef struct phase_graph {
    gpt_graph *graph;
    coll_capture *grad_ops, *param_ops;
    int span_from, span_to;
} phase_graph;

static void phase_graph_free(phase_graph *p)
{
    gpt_graph_destroy(p->graph);
    coll_capture_free(p->grad_ops);
    coll_capture_free(p->param_ops);
    *p = (phase_graph){0};
}

typedef struct megatron_state {
    void *pipeline; /* --pp P > 1: the run is megatron_pipeline.c's (its state); else NULL */
    engine_env env;
    gpt_shape sh;
    megatron_sizes z;
    int world, rank, stage, M;
    gpt_stream *compute;
    coll_group *grad_comm, *param_comm;
    engine_allocs mem;
    block_geom *blocks; /* L+1 */

    float *params_full, *params_shard;
    void *wparams_full, *wparams_shard;
    void *eslot, *lslot[2];            /* stage 3 gathered working weights */
    int lslot_holds[2];                /* layer each slot holds (-1: none) */
    float *grads_full, *grads_embed, *gslot[2], *grads_shard, *grads_tmp;
    void *grads_lowp; /* --grad-reduce-dtype bf16: the block being reduced, in bf16 */
    float *grads_embed_in; /* the embedding backward's part of block 0 (model.h), joined after
                              the step's last micro-batch */
    float *adam_m, *adam_v;
    gpt_resident act;                  /* activations, checkpoints, head, dres, ids */
    int32_t *ids;
    float *block_norms; /* the shard norms, made behind each block's reduction (reduce_block) */
    float *losses;                     /* M x N: each micro-batch's per-token losses */
    float *host_losses, *host_norms, *norm_table;
    int adam_step;

    gpt_event *ev_grad_ready, *ev_comm_done, *ev_updated, *ev_params_ready, *ev_egathered;
    gpt_event *ev_gathered[2], *ev_slot_done[2], *ev_gslot_free[2];
    /* --graphs: replay (graphs 1) micro-batch k's forward and backward (M each, empty until
     * captured at the second step); the backward's capture joins the gradient stream back
     * into compute through ev_graph_join */
    int graphs, steps_done;
    phase_graph *fwd_graph, *bwd_graph;
    gpt_event *ev_graph_join;
    stream_spans spans;
    megatron_hooks hooks;    /* an engine built on this one (gemini); zeros: none */
    /* megatron_arm_sums: the next step's optimizer sums the shard state's checksums into
     * sums_dev (from sums_init's padding terms); sums_done: the last step did */
    uint64_t *sums_dev;
    const uint64_t *sums_init;
    size_t sums_chunk;
    int sums_done;
} megatron_state;

/* Every collective of a step is issued between these two (its busy span; the hooks). */
static int comm_begin(megatron_state *st, gpt_stream *cs, int *span)
{
    int rc;
    if (st->hooks.before_collective && (rc = st->hooks.before_collective(st->hooks.ctx, cs))) return rc;
    return span_begin(&st->spans, cs, BUSY_COMM, span);
}
/* On N ranks a piece of compute (issued after whatever it waits for) is a busy span of the
 * compute stream too: the collectives' spans are set against them (spans_exposed: what of the
 * communication the compute did not hide). */
static int compute_begin(megatron_state *st, int *span)
{
    *span = -1;
    return st->world > 1 ? span_begin(&st->spans, st->compute, BUSY_COMPUTE, span) : GPT_OK;
}
static int compute_end(megatron_state *st, int span) { return span_end(&st->spans, st->compute, span); }

static int comm_end(megatron_state *st, gpt_stream *cs, int span)
{
    int rc = span_end(&st->spans, cs, span);
    if (!rc && st->hooks.after_collective) rc = st->hooks.after_collective(st->hooks.ctx, cs);
    return rc;
}

static void geometry(const gpt_shape *sh, int world, block_geom *b)
{
    const gpt_embed_layout e = gpt_embed_layout_of(sh);
    const gpt_layer_layout l = gpt_layer_layout_of(sh);
    size_t off = 0, soff = 0;
    for (int i = 0; i <= sh->layers; i++) {
        b[i].n = i == 0 ? e.total : l.total;
        b[i].n_decay = i == 0 ? e.n_decay : l.n_decay;
        b[i].S = dp_shard_len(b[i].n, world);
        b[i].off = off;
        b[i].soff = soff;
        off += b[i].S * (size_t)world;
        soff += b[i].S;
    }
}

static megatron_sizes sizes_of(const engine_config *cfg)
{
    const gpt_shape *sh = &cfg->shape;
    const size_t N = (size_t)sh->batch * sh->seq, C = (size_t)sh->hidden, L = (size_t)sh->layers;
    const size_t f = sizeof(float);
    const gpt_dtype dt = cfg->bf16 ? GPT_BF16 : GPT_F32;
    const int world = engine_world(cfg), stage = cfg->zero_stage;
    megatron_sizes z;
    memset(&z, 0, sizeof z);
    z.world = world;
    z.stage = stage;
    z.M = engine_micro_batches(cfg);
    z.bf16 = cfg->bf16;
    block_geom *b = malloc((L + 1) * sizeof *b);
    if (!b) return z; /* all zero: the plan says nothing, init reports the OOM */
    geometry(sh, world, b);
    z.padded_total = b[L].off + b[L].S * (size_t)world;
    z.shard_total = b[L].soff + b[L].S;
    z.padded_embed = b[0].S * (size_t)world;
    z.padded_layer = L > 0 ? b[1].S * (size_t)world : 0;
    z.shard_max = b[0].S > (L > 0 ? b[1].S : 0) ? b[0].S : b[1].S;
    free(b);

    const int master_sharded = stage == 3 || (stage >= 1 && cfg->bf16);
    z.params_full = stage <= 2 && !cfg->bf16 ? z.padded_total * f : 0;
    z.params_shard = stage >= 1 && master_sharded ? z.shard_total * f : 0;
    if (stage == 0) z.params_full = z.padded_total * f;
    z.wparams_full = cfg->bf16 && stage <= 2 ? gpt_act_bytes(z.padded_total, dt) : 0;
    z.wparams_shard = cfg->bf16 && stage == 3 ? gpt_act_bytes(z.shard_total, dt) : 0;
    z.wslots = stage == 3 ? gpt_act_bytes(z.padded_embed + 2 * z.padded_layer, dt) : 0;
    z.grads_full = stage <= 1 ? z.padded_total * f : 0;
    z.grads_embed = stage >= 2 ? z.padded_embed * f : 0;
    z.grads_slots = stage >= 2 ? 2 * z.padded_layer * f : 0;
    z.grads_shard = stage >= 2 ? z.shard_total * f : 0;
    z.grads_tmp = stage >= 2 && z.M > 1 ? z.shard_max * f : 0;
    /* (one block at a time: the gradient stream reduces them in turn) */
    z.grads_lowp = cfg->grad_reduce_bf16 && world > 1
                       ? gpt_act_bytes(z.padded_embed > z.padded_layer ? z.padded_embed : z.padded_layer, GPT_BF16)
                       : 0;
    z.grads_embed_in = z.padded_embed * f;
    z.adam = (stage == 0 ? z.padded_total : z.shard_total) * f;
    z.inputs = gpt_act_bytes((L + 1) * N * C, dt);
    z.layer_acts = gpt_layers_acts_bytes(sh, dt, cfg->recompute, (int)L);
    z.scratch = gpt_layer_scratch_bytes(sh, dt);
    z.head = gpt_head_acts_bytes(sh, dt);
    z.dres = gpt_act_bytes(N * C, dt);
    z.ids = 2 * N * sizeof(int32_t);
    z.norms = (L + 1) * (size_t)world * f;
    z.losses = (size_t)z.M * N * f;
    z.host_losses = (size_t)z.M * N * f;
    /* this rank's read-back, every rank's (gathered), the (block, shard) table */
    z.host_norms = (1 + 2 * (size_t)world) * (L + 1) * f;
    const size_t block_max = z.padded_embed > z.padded_layer ? z.padded_embed : z.padded_layer;
    z.host_staging = block_max * f;
    return z;
}

static void megatron_plan(const engine_config *cfg, engine_plan *out)
{
    if (engine_model_ranks(cfg) > 1) {
        megatron_pipeline_plan(cfg, out);
        return;
    }
    megatron_sizes z = sizes_of(cfg);
    *out = (engine_plan){0};
    out->gpu_bytes = (uint64_t)z.params_full + z.params_shard + z.wparams_full + z.wparams_shard +
                     z.wslots + z.grads_full + z.grads_embed + z.grads_slots + z.grads_shard +
                     z.grads_tmp + z.grads_lowp + z.grads_embed_in + 2 * (uint64_t)z.adam + z.inputs + z.layer_acts + z.scratch +
                     z.head + z.dres + z.ids + z.norms + z.losses;
    engine_plan_add_comm(out, cfg, 2); /* (grad_comm, param_comm) */
    out->host_bytes = (uint64_t)z.host_losses + z.host_norms + z.host_staging;
    out->disk_bytes = 0;
}

/* ---- where each block's tensors are -------------------------------------------------- */

static size_t act_size(const megatron_state *st) { return gpt_dtype_size(st->env.be->dtype); }

/* The working weights the ops read for block b (stage 3: its gathered slot). */
static const void *work_params(const megatron_state *st, int b)
{
    if (st->stage == 3) return b == 0 ? st->eslot : st->lslot[(b - 1) % 2];
    const size_t off = st->blocks[b].off;
    if (st->wparams_full) return (const char *)st->wparams_full + off * act_size(st);
    return st->params_full + off;
}

/* The gradient buffer the backward accumulates block b into (whole, padded). */
static float *grad_buffer(const megatron_state *st, int b)
{
    if (st->stage <= 1) return st->grads_full + st->blocks[b].off;
    return b == 0 ? st->grads_embed : st->gslot[(b - 1) % 2];
}

/* This rank's fp32 master shard of block b. */
static float *master_shard(const megatron_state *st, int b)
{
    const block_geom *g = &st->blocks[b];
    if (st->params_shard) return st->params_shard + g->soff;
    return st->params_full + g->off + (size_t)st->rank * g->S;
}

/* This rank's shard of block b's working copy (bf16), or NULL (fp32: the master is it). */
static void *work_shard(const megatron_state *st, int b)
{
    const block_geom *g = &st->blocks[b];
    if (st->wparams_shard) return (char *)st->wparams_shard + g->soff * act_size(st);
    if (st->wparams_full)
        return (char *)st->wparams_full + (g->off + (size_t)st->rank * g->S) * act_size(st);
    return NULL;
}

/* This rank's reduced gradient shard of block b. */
static float *grad_shard(const megatron_state *st, int b)
{
    const block_geom *g = &st->blocks[b];
    if (st->grads_shard) return st->grads_shard + g->soff;
    return st->grads_full + g->off + (size_t)st->rank * g->S;
}

/* ---- lifetime --------------------------------------------------------------------------- */

static int alloc_dev(megatron_state *st, void **ptr, size_t bytes, const char *what)
{
    if (bytes == 0) {
        *ptr = NULL;
        return GPT_OK;
    }
    return engine_alloc(&st->mem, MEM_GPU, ptr, bytes, what);
}

static int alloc_host(megatron_state *st, void **ptr, size_t bytes, const char *what)
{
    return engine_alloc(&st->mem, MEM_HOST, ptr, bytes, what);
}

static void megatron_free(void *state)
{
    megatron_state *st = state;
    if (!st) return;
    if (st->pipeline) {
        megatron_pipeline_free(st->pipeline);
        free(st);
        return;
    }
    /* Destroying the streams drains them: after a failed step, queued work may still use
     * the buffers freed below (a replayed graph is the compute stream's work).  The graphs go
     * first, drained, while the communicators their NCCL kernels use are still there. */
    if (st->compute) (void)gpt_stream_sync(st->compute);
    for (int k = 0; k < st->M && st->fwd_graph; k++) phase_graph_free(&st->fwd_graph[k]);
    for (int k = 0; k < st->M && st->bwd_graph; k++) phase_graph_free(&st->bwd_graph[k]);
    free(st->fwd_graph);
    free(st->bwd_graph);
    coll_close(st->grad_comm);
    coll_close(st->param_comm);
    if (st->compute) st->env.be->ops->stream_destroy(st->compute);
    gpt_event *evs[] = {st->ev_grad_ready, st->ev_comm_done, st->ev_updated, st->ev_params_ready,
                        st->ev_egathered, st->ev_gathered[0], st->ev_gathered[1],
                        st->ev_slot_done[0], st->ev_slot_done[1], st->ev_gslot_free[0],
                        st->ev_gslot_free[1], st->ev_graph_join};
    for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++) gpt_event_destroy(evs[i]);
    spans_free(&st->spans);
    engine_free_all(&st->mem);
    free(st->blocks);
    free(st);
}

/* Initialise every block on the host and copy it in, block by block: the whole block where
 * the stage keeps it whole, this rank's shard where it keeps a shard. */
static int init_params(megatron_state *st, float *staging)
{
    const gpt_shape *sh = &st->sh;
    const uint64_t seed = st->env.cfg->seed;
    gpt_stream *s = st->compute;
    const megatron_sizes *z = &st->z;
    /* Padding and Adam state start at zero. */
    int rc = 0;
    if (st->params_full) rc = gpt_stream_memset_zero(s, st->params_full, z->params_full);
    if (!rc && st->params_shard) rc = gpt_stream_memset_zero(s, st->params_shard, z->params_shard);
    if (!rc && st->wparams_full) rc = gpt_stream_memset_zero(s, st->wparams_full, z->wparams_full);
    if (!rc && st->wparams_shard) rc = gpt_stream_memset_zero(s, st->wparams_shard, z->wparams_shard);
    if (!rc) rc = gpt_stream_memset_zero(s, st->adam_m, z->adam);
    if (!rc) rc = gpt_stream_memset_zero(s, st->adam_v, z->adam);
    /* The layers' gradients are overwritten by each step's first backward, never zeroed
     * again: their padding (past a block's own floats, reduced with them) is zeroed here. */
    if (!rc && st->grads_full) rc = gpt_stream_memset_zero(s, st->grads_full, z->grads_full);
    if (!rc && st->gslot[0]) rc = gpt_stream_memset_zero(s, st->gslot[0], z->grads_slots);
    for (int b = 0; rc == 0 && b <= sh->layers; b++) {
        const block_geom *g = &st->blocks[b];
        if (b == 0) engine_init_embed(&st->env, staging, sh, seed);
        else engine_init_layer(&st->env, staging, sh, b - 1, seed);
        const size_t mine = dp_shard_real(g->n, g->S, st->rank);
        const float *my_part = staging + (size_t)st->rank * g->S;
        if (st->params_full)
            rc = gpt_memcpy_h2d(s, st->params_full + g->off, staging, g->n * sizeof(float));
        if (!rc && st->params_shard && mine)
            rc = gpt_memcpy_h2d(s, st->params_shard + g->soff, my_part, mine * sizeof(float));
        if (!rc && st->wparams_full) {
            /* The whole block's working copy from its fp32 values, converted on the device
             * in the block's gradient buffer (zeroed before every step). */
            float *tmp = grad_buffer(st, b);
            rc = gpt_memcpy_h2d(s, tmp, staging, g->n * sizeof(float));
            if (!rc)
                gpt_params_to_act(s, (char *)st->wparams_full + g->off * act_size(st), tmp, g->n);
        }
        if (!rc && st->wparams_shard && mine)
            gpt_params_to_act(s, work_shard(st, b), st->params_shard + g->soff, mine);
        /* Each copy must finish before the staging block is refilled: copies are async. */
        if (!rc) rc = gpt_stream_sync(s);
    }
    return rc;
}

/* Why the configuration allows no graphs (NULL: it does).  The step must be the same work on
 * the same pointers every time: data parallel at ZeRO stage 0 or 1, whose collectives (the
 * last micro-batch's all-reduces) are captured with the backward (stages 2-3 reduce into slots
 * between micro-batches, and stage 3 gathers weights by host-side slot state; gemini, built on
 * stage 3, with its hooks, is thereby out too); not --tp/--pp, whose steps wait on their
 * neighbours' collectives between phases. */
static const char *graphs_unavailable(const engine_config *cfg)
{
    return engine_model_ranks(cfg) > 1 ? "not with --tp/--pp: a step waits on its neighbours' collectives"
           : cfg->zero_stage > 1       ? "ZeRO stages 0-1 only: stages 2-3 reduce into slots between micro-"
                                         "batches, and stage 3 gathers weights by host-side state"
           : cfg->device != DEVICE_CUDA ? "CUDA graphs need --device cuda"
                                        : NULL;
}

/* --graphs on where the configuration allows none: refused before the run writes anything. */
static int megatron_check(const engine_config *cfg, char *err, size_t errlen)
{
    if (engine_model_ranks(cfg) > 1 && megatron_pipeline_check(cfg, err, errlen)) return -1;
    if (cfg->grad_reduce_bf16 && !cfg->bf16) {
        snprintf(err, errlen, "--grad-reduce-dtype bf16 goes with --dtype bf16 (an fp32 model's gradients are reduced "
                 "in fp32)");
        return -1;
    }
    if (cfg->grad_reduce_bf16 && engine_model_ranks(cfg) > 1) {
        snprintf(err, errlen, "--grad-reduce-dtype bf16 with --tp/--pp: their copies reduce in fp32 so far");
        return -1;
    }
    if (engine_tp(cfg) <= 1 && cfg->sequence_parallel) {
        snprintf(err, errlen, "--sequence-parallel goes with --tp T > 1 (it splits the rows between the T ranks)");
        return -1;
    }
    if (engine_pp(cfg) <= 1 && cfg->pp_layers[0]) {
        snprintf(err, errlen, "--pp-layers %s goes with --pp P (the stages it splits the layers into)", cfg->pp_layers);
        return -1;
    }
    const char *why = cfg->graphs == GRAPHS_ON ? graphs_unavailable(cfg) : NULL;
    if (!why) return 0;
    snprintf(err, errlen, "--graphs on: %s", why);
    return -1;
}

/* --graphs: whether this run replays its phases; said in the log where a run could have had
 * them (on the GPU: not in every CI run).  A GPU backend without graphs is --profile's. */
static int graphs_choose(megatron_state *st)
{
    const engine_env *env = &st->env;
    const int want = env->cfg->graphs;
    const char *unavailable = graphs_unavailable(env->cfg);
    const char *why = want == GRAPHS_OFF                 ? "--graphs off"
                      : unavailable                      ? unavailable
                      : !gpt_backend_has_graphs(env->be) ? "--profile times each op"
                                                         : NULL;
    if (why) {
        if (want == GRAPHS_ON) return engine_fail(env, GPT_ERR_INVALID, "--graphs on: not here (%s)", why);
        if (env->cfg->device == DEVICE_CUDA) engine_note(env, "graphs: off (%s)", why);
        return GPT_OK;
    }
    st->fwd_graph = calloc((size_t)st->M, sizeof *st->fwd_graph); /* (all empty) */
    st->bwd_graph = calloc((size_t)st->M, sizeof *st->bwd_graph);
    if (!st->fwd_graph || !st->bwd_graph) return GPT_ERR_OOM;
    st->graphs = 1;
    engine_note(env, "graphs: on (each micro-batch's forward and backward captured at the second step, then "
                "replayed: one launch a phase%s)", st->world > 1 ? ", the backward's collectives with it" : "");
    return GPT_OK;
}

static int megatron_init(const engine_env *env, void **state)
{
    *state = NULL;
    int rc = engine_init_check(&engine_megatron_lm, env);
    if (rc) return rc;
    megatron_state *st = calloc(1, sizeof *st);
    if (!st) return GPT_ERR_OOM;
    st->env = *env;
    if (engine_model_ranks(env->cfg) > 1) {
        *state = st;
        return megatron_pipeline_init(env, &st->pipeline);
    }
    engine_allocs_init(&st->mem, env->gpu, env->host, env->be);
    st->sh = env->cfg->shape;
    *state = st;
    st->z = sizes_of(env->cfg);
    const megatron_sizes *z = &st->z;
    st->world = env->world;
    st->rank = env->rank;
    st->stage = env->cfg->zero_stage;
    st->M = z->M;
    const int L = st->sh.layers;
    st->blocks = malloc((size_t)(L + 1) * sizeof *st->blocks);
    if (!st->blocks) return GPT_ERR_OOM;
    geometry(&st->sh, st->world, st->blocks);
    st->lslot_holds[0] = st->lslot_holds[1] = -1;

    gpt_backend *be = env->be;
    if ((rc = be->ops->stream_create(be, &st->compute)) ||
        (rc = coll_open(&st->grad_comm, be, env->rank, env->world)) ||
        (rc = coll_open(&st->param_comm, be, env->rank, env->world)) ||
        (rc = coll_watch(st->grad_comm, env->dog, "gradients") ? GPT_ERR_INVALID : GPT_OK) ||
        (rc = coll_watch(st->param_comm, env->dog, "parameters") ? GPT_ERR_INVALID : GPT_OK) ||
        (rc = spans_init(&st->spans, be, st->M * (5 * L + 6) + 8)))
        return rc;
    gpt_event **evs[] = {&st->ev_grad_ready, &st->ev_comm_done, &st->ev_updated,
                         &st->ev_params_ready, &st->ev_egathered, &st->ev_gathered[0],
                         &st->ev_gathered[1], &st->ev_slot_done[0], &st->ev_slot_done[1],
                         &st->ev_gslot_free[0], &st->ev_gslot_free[1], &st->ev_graph_join};
    for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++)
        if ((rc = gpt_event_create(be, evs[i]))) return rc;
    if ((rc = graphs_choose(st))) return rc;

    gpt_resident *m = &st->act;
    void *scratch_mem = NULL, *head_mem = NULL, *staging = NULL, *wslots = NULL, *gslots = NULL;
    if ((rc = alloc_dev(st, (void **)&st->params_full, z->params_full, "parameters")) ||
        (rc = alloc_dev(st, (void **)&st->params_shard, z->params_shard, "parameter shards")) ||
        (rc = alloc_dev(st, &st->wparams_full, z->wparams_full, "bf16 working weights")) ||
        (rc = alloc_dev(st, &st->wparams_shard, z->wparams_shard, "bf16 working weight shards")) ||
        (rc = alloc_dev(st, &wslots, z->wslots, "gathered weight slots")) ||
        (rc = alloc_dev(st, (void **)&st->grads_full, z->grads_full, "gradients")) ||
        (rc = alloc_dev(st, (void **)&st->grads_embed, z->grads_embed, "embedding gradients")) ||
        (rc = alloc_dev(st, &gslots, z->grads_slots, "layer gradient slots")) ||
        (rc = alloc_dev(st, (void **)&st->grads_shard, z->grads_shard, "gradient shards")) ||
        (rc = alloc_dev(st, (void **)&st->grads_tmp, z->grads_tmp, "reduce-scatter landing")) ||
        (rc = alloc_dev(st, &st->grads_lowp, z->grads_lowp, "a block's gradient in bf16 (--grad-reduce-dtype)")) ||
        (rc = alloc_dev(st, (void **)&st->adam_m, z->adam, "Adam m")) ||
        (rc = alloc_dev(st, (void **)&st->adam_v, z->adam, "Adam v")) ||
        (rc = alloc_dev(st, (void **)&st->grads_embed_in, z->grads_embed_in, "embedding's own gradients")) ||
        (rc = alloc_dev(st, &m->layer_inputs, z->inputs, "checkpointed layer inputs")) ||
        (rc = alloc_dev(st, &m->layer_acts, z->layer_acts, "layer activations")) ||
        (rc = alloc_dev(st, &scratch_mem, z->scratch, "backward scratch")) ||
        (rc = alloc_dev(st, &head_mem, z->head, "logits and head activations")) ||
        (rc = alloc_dev(st, &m->dres, z->dres, "residual gradient")) ||
        (rc = alloc_dev(st, (void **)&st->ids, z->ids, "token ids")) ||
        (rc = alloc_dev(st, (void **)&st->block_norms, z->norms, "block norms")) ||
        (rc = alloc_dev(st, (void **)&st->losses, z->losses, "per-token losses")) ||
        (rc = alloc_host(st, (void **)&st->host_losses, z->host_losses, "losses read-back")) ||
        (rc = alloc_host(st, (void **)&st->host_norms, z->host_norms, "norms read-back")) ||
        (rc = alloc_host(st, &staging, z->host_staging, "initialisation staging")))
        return rc;
    st->norm_table = st->host_norms + (size_t)(L + 1) * (1 + st->world);
    if (wslots) {
        st->eslot = wslots;
        st->lslot[0] = (char *)wslots + z->padded_embed * act_size(st);
        st->lslot[1] = (char *)st->lslot[0] + z->padded_layer * act_size(st);
    }
    if (gslots) {
        st->gslot[0] = gslots;
        st->gslot[1] = (float *)gslots + z->padded_layer;
    }
    m->recompute = env->cfg->recompute;
    m->tokens = st->ids;
    m->targets = st->ids + (size_t)st->sh.batch * st->sh.seq;
    gpt_layer_scratch_carve_as(&m->scratch, scratch_mem, &st->sh, be->dtype);
    gpt_head_acts_carve_as(&m->head, head_mem, &st->sh, be->dtype);
    m->head.grad_divisor = st->M * st->world;

    rc = init_params(st, staging);
    /* The staging block is only needed here: give it back (it is the last allocation). */
    engine_free_last(&st->mem);
    if (rc == 0 && st->world > 1) {
        static const char *const what[] = {
            "DDP: everything replicated, gradients all-reduced per layer during the backward",
            "ZeRO-1: Adam state sharded, gradients all-reduced, params all-gathered after the step",
            "ZeRO-2: Adam state and gradients sharded (reduce-scattered per layer), params all-gathered after the step",
            "ZeRO-3: params, gradients and Adam state sharded; each layer all-gathered before its forward and its backward",
        };
        engine_note(env, "megatron-lm on %d ranks, %d micro-batch%s each: %s", st->world, st->M,
                    st->M > 1 ? "es" : "", what[st->stage]);
    }
    return rc;
}

/* ---- the step ----------------------------------------------------------------------------- */

/* Stage 3: make sure layer l's working weights are (being) gathered into its slot, after
 * the compute stream is done with what the slot held. */
static int gather_layer(megatron_state *st, int l)
{
    if (st->stage != 3 || l < 0 || l >= st->sh.layers) return GPT_OK;
    const int slot = l % 2;
    if (st->lslot_holds[slot] == l) return GPT_OK;
    const block_geom *g = &st->blocks[1 + l];
    gpt_stream *cs = coll_stream(st->param_comm);
    const void *mine = work_shard(st, 1 + l);
    if (!mine) mine = master_shard(st, 1 + l);
    int rc, span;
    if ((rc = gpt_stream_wait_event(cs, st->ev_slot_done[slot])) ||
        (rc = comm_begin(st, cs, &span)) ||
        (rc = coll_all_gather(st->param_comm, st->lslot[slot], mine, g->S * act_size(st))) ||
        (rc = comm_end(st, cs, span)) ||
        (rc = gpt_event_record(st->ev_gathered[slot], cs)))
        return rc;
    st->lslot_holds[slot] = l;
    return GPT_OK;
}

/* Before the compute stream uses layer l's weights: wait for its gather. */
static int use_layer(megatron_state *st, int l)
{
    if (st->stage != 3) return GPT_OK;
    return gpt_stream_wait_event(st->compute, st->ev_gathered[l % 2]);
}

/* After the compute stream is done with layer l's weights. */
static int done_with_layer(megatron_state *st, int l)
{
    if (st->stage != 3) return GPT_OK;
    return gpt_event_record(st->ev_slot_done[l % 2], st->compute);
}

/* --grad-reduce-dtype bf16: block b's gradient rounded to bf16, reduced in bf16 (half the bytes),
 * widened back into the fp32 gradient (ZeRO 0-1: the block; 2-3: this rank's shard, added to
 * the running sum after the first micro-batch), all on the gradient stream.  The sum differs
 * from the fp32 reduction's only by the roundings to bf16 (tests/test_dp.sh bounds them). */
static int reduce_block_bf16(megatron_state *st, int b)
{
    const block_geom *g = &st->blocks[b];
    gpt_stream *cs = coll_stream(st->grad_comm);
    const size_t all = g->S * (size_t)st->world;
    char *mine = (char *)st->grads_lowp + gpt_act_bytes(g->S * (size_t)st->rank, GPT_BF16);
    int rc;
    gpt_params_to_act(cs, st->grads_lowp, grad_buffer(st, b), all);
    if (st->stage <= 1) {
        if ((rc = coll_all_reduce_sum_act(st->grad_comm, st->grads_lowp, all, GPT_BF16))) return rc;
        gpt_act_to_f32(cs, grad_buffer(st, b), st->grads_lowp, all);
        return GPT_OK;
    }
    if ((rc = coll_reduce_scatter_sum_act(st->grad_comm, mine, st->grads_lowp, g->S, GPT_BF16))) return rc;
    if (st->M == 1 || b == 0) {
        gpt_act_to_f32(cs, grad_shard(st, b), mine, g->S);
    } else {
        gpt_act_to_f32(cs, st->grads_tmp, mine, g->S);
        gpt_add_f32(cs, grad_shard(st, b), grad_shard(st, b), st->grads_tmp, g->S);
    }
    return GPT_OK;
}

/* Layer l's (block b's) gradient leaves for the other ranks once its backward is issued. */
static int reduce_block(megatron_state *st, int b, int last_micro)
{
    const block_geom *g = &st->blocks[b];
    gpt_stream *cs = coll_stream(st->grad_comm);
    int rc, span;
    if (st->stage <= 1 && !last_micro) return GPT_OK; /* accumulate locally first */
    if (st->stage >= 2 && b == 0 && !last_micro) return GPT_OK; /* the embedding: once */
    if ((rc = gpt_event_record(st->ev_grad_ready, st->compute)) ||
        (rc = gpt_stream_wait_event(cs, st->ev_grad_ready)) ||
        (rc = comm_begin(st, cs, &span)))
        return rc;
    if (st->grads_lowp) {
        rc = reduce_block_bf16(st, b);
    } else if (st->stage <= 1) {
        rc = coll_all_reduce_sum(st->grad_comm, grad_buffer(st, b), g->S * (size_t)st->world);
    } else if (st->M == 1 || b == 0) {
        rc = coll_reduce_scatter_sum(st->grad_comm, grad_shard(st, b), grad_buffer(st, b), g->S);
    } else {
        /* several micro-batches: land the reduced shard, then add it to the running sum
         * (fp32 backend: a residual add is an fp32 add) on the same stream */
        rc = coll_reduce_scatter_sum(st->grad_comm, st->grads_tmp, grad_buffer(st, b), g->S);
        if (!rc) gpt_add_f32(cs, grad_shard(st, b), grad_shard(st, b), st->grads_tmp, g->S);
    }
    if (rc || (rc = comm_end(st, cs, span))) return rc;
    if (st->stage >= 2 && b > 0 && (rc = gpt_event_record(st->ev_gslot_free[(b - 1) % 2], cs))) return rc;
    /* The block's squared norms as soon as its gradient is final, behind its reduction on this
     * stream, under the backward of the blocks below: a pass over every gradient (2.7 ms of a
     * bf16 l32 step on an H100) that the optimizer no longer waits for.  The same kernel on the
     * same floats as after the backward: the same bits (bench/results/2026-11-27d-h100-update:
     * no slower than one pass after the backward, which this replaced). */
    if (last_micro) {
        if (st->stage <= 1)
            dp_block_shard_norms(cs, grad_buffer(st, b), g->n, st->world, st->block_norms + (size_t)b * st->world);
        else dp_shard_norm(cs, grad_shard(st, b), g->n, st->world, st->rank, st->block_norms + b);
    }
    return GPT_OK;
}

/* x[l]: layer l's checkpointed input (x[L]: the head's). */
static void *layer_input(megatron_state *st, int l)
{
    const size_t NC = (size_t)st->sh.batch * st->sh.seq * st->sh.hidden;
    return (char *)st->act.layer_inputs + (size_t)l * NC * act_size(st);
}

/* The activations layer l's forward fills (gpt_layers_acts_carve: what --recompute keeps). */
static gpt_layer_acts layer_acts(megatron_state *st, int l)
{
    gpt_layer_acts a;
    gpt_layers_acts_carve(&a, st->act.layer_acts, &st->sh, st->env.be->dtype, st->act.recompute, l);
    return a;
}

/* The same for layer l's backward (gpt_layers_acts_carve_backward: the last layer's recompute
 * nothing). */
static gpt_layer_acts layer_acts_backward(megatron_state *st, int l)
{
    gpt_layer_acts a;
    gpt_layers_acts_carve_backward(&a, st->act.layer_acts, &st->sh, st->env.be->dtype, st->act.recompute, l);
    return a;
}

/* The micro-batch's ids in (before its forward: the host arrays change every step, so they
 * stay out of a graph). */
static int ids_in(megatron_state *st, const int32_t *tokens, const int32_t *targets)
{
    const size_t N = (size_t)st->sh.batch * st->sh.seq;
    int rc = gpt_memcpy_h2d(st->compute, st->ids, tokens, N * sizeof(int32_t));
    return rc ? rc : gpt_memcpy_h2d(st->compute, st->ids + N, targets, N * sizeof(int32_t));
}

static int forward_micro(megatron_state *st)
{
    const gpt_shape *sh = &st->sh;
    gpt_stream *s = st->compute;
    gpt_resident *m = &st->act;
    const int L = sh->layers;
    int rc, span;
    if ((rc = gather_layer(st, 0)) || (rc = compute_begin(st, &span))) return rc;
    gpt_embed_forward(s, sh, work_params(st, 0), m->tokens, m->layer_inputs);
    if ((rc = compute_end(st, span))) return rc;
    for (int l = 0; l < L; l++) {
        if ((rc = gather_layer(st, l + 1)) || (rc = use_layer(st, l)) || (rc = compute_begin(st, &span))) return rc;
        gpt_layer_acts a = layer_acts(st, l);
        gpt_layer_forward(s, sh, work_params(st, 1 + l), layer_input(st, l), layer_input(st, l + 1), &a);
        if ((rc = compute_end(st, span)) || (rc = done_with_layer(st, l))) return rc;
    }
    if ((rc = compute_begin(st, &span))) return rc;
    gpt_head_forward(s, sh, work_params(st, 0), grad_buffer(st, 0), layer_input(st, L), m->targets,
                     &m->head);
    return compute_end(st, span);
}

/* first_micro: the step's first backward, which overwrites the layers' gradients instead of
 * adding to zeros (no pass zeroing 4 bytes a parameter; the same values) */
static int backward_micro(megatron_state *st, int first_micro, int last_micro)
{
    const gpt_shape *sh = &st->sh;
    gpt_stream *s = st->compute;
    gpt_resident *m = &st->act;
    const int L = sh->layers;
    int rc, span;
    if ((rc = compute_begin(st, &span))) return rc;
    gpt_head_backward(s, sh, work_params(st, 0), grad_buffer(st, 0), layer_input(st, L), &m->head,
                      m->dres);
    if ((rc = compute_end(st, span))) return rc;
    for (int l = L - 1; l >= 0; l--) {
        if ((rc = gather_layer(st, l)) || (rc = gather_layer(st, l - 1)) || (rc = use_layer(st, l)))
            return rc;
        float *gbuf = grad_buffer(st, 1 + l);
        /* a slot (ZeRO-2, 3) holds one micro-batch's layer: always overwritten */
        gpt_grad_write gw = first_micro || st->stage >= 2 ? GPT_GRAD_OVERWRITE : GPT_GRAD_ACCUMULATE;
        if (st->stage >= 2) {
            /* the slot is free once the reduce-scatter of the layer two above has read it */
            if ((rc = gpt_stream_wait_event(s, st->ev_gslot_free[l % 2]))) return rc;
        }
        gpt_layer_acts a = layer_acts_backward(st, l);
        if ((rc = compute_begin(st, &span))) return rc;
        gpt_layer_backward(s, sh, work_params(st, 1 + l), gbuf, layer_input(st, l), m->dres, &a,
                           &m->scratch, gw);
        if ((rc = compute_end(st, span)) || (rc = done_with_layer(st, l)) || (rc = reduce_block(st, 1 + l, last_micro)))
            return rc;
    }
    if ((rc = compute_begin(st, &span))) return rc;
    gpt_embed_backward(s, sh, st->grads_embed_in, m->dres, m->tokens);
    if (last_micro) gpt_embed_grads_join(s, grad_buffer(st, 0), st->grads_embed_in, st->z.padded_embed);
    if ((rc = compute_end(st, span))) return rc;
    return reduce_block(st, 0, last_micro);
}

/* Micro-batch k's forward (phase 0) or backward (1), op by op. */
static int phase_ops(megatron_state *st, int phase, int k)
{
    return phase == 0 ? forward_micro(st) : backward_micro(st, k == 0, k == st->M - 1);
}

/* A captured phase run: its spans and its collectives counted as issued now. */
static int launch_phase(megatron_state *st, const phase_graph *p)
{
    int rc = gpt_graph_launch(p->graph, st->compute);
    if (!rc && spans_move(&st->spans, p->span_from, p->span_to))
        return engine_fail(&st->env, GPT_ERR_INVALID, "graphs: a replay's busy spans are not where its capture's were");
    if (!rc) rc = coll_replayed(st->grad_comm, p->grad_ops);
    return rc ? rc : coll_replayed(st->param_comm, p->param_ops);
}

/* Micro-batch k's phase on the compute stream: as ops, or, with graphs, captured at the second step
 * and replayed from then on.  A capture that fails (a call it does not allow) ends the replays:
 * --graphs on stops the run, auto says why in the log and goes on as ops, issuing the phase
 * again. */
static int issue_phase(megatron_state *st, int phase, int k)
{
    gpt_stream *s = st->compute;
    phase_graph *p = phase == 0 ? &st->fwd_graph[k] : &st->bwd_graph[k];
    if (st->graphs && p->graph) return launch_phase(st, p);
    if (!st->graphs || st->steps_done == 0) return phase_ops(st, phase, k);
    int rc = gpt_graph_capture_begin(s);
    if (rc) return rc;
    p->span_from = spans_count(&st->spans);
    int issued = coll_capture_begin(st->grad_comm);
    if (!issued) issued = coll_capture_begin(st->param_comm);
    if (!issued) issued = phase_ops(st, phase, k);
    /* the gradient stream's branch (the last micro-batch's: stages 0-1 reduce once, after it)
     * must end inside the graph; an earlier micro-batch's backward has drawn no other stream
     * in, and waiting on one not captured would break the capture */
    if (!issued && phase == 1 && k == st->M - 1 &&
        !(issued = gpt_event_record(st->ev_graph_join, coll_stream(st->grad_comm))))
        issued = gpt_stream_wait_event(s, st->ev_graph_join);
    p->grad_ops = coll_capture_end(st->grad_comm);
    p->param_ops = coll_capture_end(st->param_comm);
    p->span_to = spans_count(&st->spans);
    rc = gpt_graph_capture_end(s, &p->graph);
    /* the capture's span ids taken back: its first launch, or the ops below, begin them again */
    if (spans_move(&st->spans, p->span_to, p->span_from)) return GPT_ERR_INVALID;
    if (!issued && !rc) return launch_phase(st, p);
    phase_graph_free(p);
    if (st->env.cfg->graphs == GRAPHS_ON)
        return engine_fail(&st->env, issued ? issued : rc, "--graphs on: micro-batch %d's %s could not be captured",
                           k, phase == 0 ? "forward" : "backward");
    st->graphs = 0;
    engine_note(&st->env, "graphs: off from step %d (micro-batch %d's %s could not be captured: error %d)",
                st->steps_done + 1, k, phase == 0 ? "forward" : "backward", issued ? issued : rc);
    return phase_ops(st, phase, k);
}

/* The (block, shard) squared norms (reduce_block made them on the gradient stream, which the
 * compute stream has waited for) in canonical order into st->norm_table. */
static int shard_norms(megatron_state *st)
{
    const int L = st->sh.layers, world = st->world, nb = L + 1;
    gpt_stream *s = st->compute;
    int rc;
    if (st->stage <= 1) {
        if ((rc = gpt_memcpy_d2h(s, st->norm_table, st->block_norms, (size_t)nb * world * sizeof(float))) ||
            (rc = gpt_stream_sync(s)))
            return rc;
        return GPT_OK;
    }
    if ((rc = gpt_memcpy_d2h(s, st->host_norms, st->block_norms, (size_t)nb * sizeof(float))) ||
        (rc = gpt_stream_sync(s)))
        return rc;
    /* gathered rank-major: [rank][block]; the canonical table is [block][rank] */
    float *gathered = st->host_norms + (size_t)nb; /* nb·world floats after this rank's nb */
    if ((rc = coll_host_all_gather(st->grad_comm, gathered, st->host_norms, (size_t)nb * sizeof(float))))
        return rc;
    for (int r = 0; r < world; r++)
        for (int b = 0; b < nb; b++) st->norm_table[(size_t)b * world + r] = gathered[(size_t)r * nb + b];
    return GPT_OK;
}

static int optimizer(megatron_state *st, int iteration, step_result *out)
{
    const gpt_shape *sh = &st->sh;
    const engine_config *cfg = st->env.cfg;
    gpt_stream *s = st->compute;
    const int L = sh->layers, N = sh->batch * sh->seq;
    int rc;
    /* the step's losses come home with the norms (shard_norms waits for both) */
    if ((rc = gpt_memcpy_d2h(s, st->host_losses, st->losses, (size_t)st->M * N * sizeof(float))) ||
        (rc = gpt_event_record(st->ev_comm_done, coll_stream(st->grad_comm))) ||
        (rc = gpt_stream_wait_event(s, st->ev_comm_done)) || (rc = shard_norms(st)))
        return rc;
    double local = 0;
    for (int k = 0; k < st->M; k++) local += gpt_mean_loss(st->host_losses + (size_t)k * N, N);
    if ((rc = dp_global_loss(st->grad_comm, local, st->M, &out->loss))) return rc;
    out->grad_norm = gpt_combine_norms(st->norm_table, (L + 1) * st->world);
    /* Non-finite gradients would poison m and v for good: the update is skipped, as
     * Megatron's loss scaler does, and counted in the log's "number of nan iterations". */
    out->skipped = !isfinite(out->grad_norm);
    out->lr = gpt_lr_at(&cfg->optim, iteration);
    /* (armed sums are for this step only, and only an update makes them) */
    uint64_t *sums = st->sums_dev;
    st->sums_dev = NULL;
    st->sums_done = 0;
    if (out->skipped) return GPT_OK;
    const float lr = (float)out->lr, scale = gpt_clip_scale(&cfg->optim, out->grad_norm);
    if (st->hooks.before_optimizer && (rc = st->hooks.before_optimizer(st->hooks.ctx, s))) return rc;
    const size_t n_shard = st->z.shard_total;
    const size_t nchunks = sums ? (3 * n_shard + st->sums_chunk - 1) / st->sums_chunk : 0;
    /* (after the hook: the sums may still be read by what it made compute wait for) */
    if (sums && (rc = gpt_memcpy_d2d(s, sums, st->sums_init, nchunks * sizeof(uint64_t)))) return rc;
    const int t = ++st->adam_step;
    int adam_span;
    if ((rc = compute_begin(st, &adam_span))) return rc;
    for (int b = 0; b <= L; b++) {
        const block_geom *g = &st->blocks[b];
        if (st->stage == 0) {
            void *act = st->wparams_full ? (char *)st->wparams_full + g->off * act_size(st) : NULL;
            gpt_block_adamw_act(s, st->params_full + g->off, act, grad_buffer(st, b),
                                st->adam_m + g->off, st->adam_v + g->off, g->n, g->n_decay,
                                &cfg->optim, lr, t, scale);
        } else {
            const gpt_checksum_acc acc = {sums, st->sums_chunk, {g->soff, n_shard + g->soff, 2 * n_shard + g->soff}};
            dp_shard_adamw(s, master_shard(st, b), work_shard(st, b), grad_shard(st, b),
                           st->adam_m + g->soff, st->adam_v + g->soff, g->n, g->n_decay, st->world,
                           st->rank, &cfg->optim, lr, t, scale, sums ? &acc : NULL);
        }
    }
    if ((rc = compute_end(st, adam_span))) return rc;
    if (sums) {
        gpt_checksum_fold_chunks(s, sums, 3 * n_shard, st->sums_chunk);
        st->sums_done = 1;
    }
    if (st->stage == 1 || st->stage == 2) {
        /* every rank's updated shards to everyone: the whole working weights again */
        gpt_stream *cs = coll_stream(st->param_comm);
        int span;
        if ((rc = gpt_event_record(st->ev_updated, s)) || (rc = gpt_stream_wait_event(cs, st->ev_updated)) ||
            (rc = comm_begin(st, cs, &span)))
            return rc;
        for (int b = 0; b <= L && rc == 0; b++) {
            void *whole = st->wparams_full ? (char *)st->wparams_full + st->blocks[b].off * act_size(st)
                                           : (void *)(st->params_full + st->blocks[b].off);
            void *mine = work_shard(st, b) ? work_shard(st, b) : (void *)master_shard(st, b);
            rc = coll_all_gather(st->param_comm, whole, mine, st->blocks[b].S * act_size(st));
        }
        if (rc || (rc = comm_end(st, cs, span)) ||
            (rc = gpt_event_record(st->ev_params_ready, cs)) ||
            (rc = gpt_stream_wait_event(s, st->ev_params_ready)))
            return rc;
    }
    if (st->stage == 3) {
        /* the slots hold the old weights now */
        st->lslot_holds[0] = st->lslot_holds[1] = -1;
    }
    return GPT_OK;
}

static int megatron_step(void *state, int iteration, const int32_t *tokens,
                         const int32_t *targets, step_result *out)
{
    megatron_state *st = state;
    if (st->pipeline) return megatron_pipeline_step(st->pipeline, iteration, tokens, targets, out);
    const gpt_shape *sh = &st->sh;
    gpt_stream *s = st->compute;
    const int N = sh->batch * sh->seq;
    int rc = spans_reset(&st->spans);
    coll_take_bytes(st->grad_comm);
    coll_take_bytes(st->param_comm);

    double fwd_ms = 0, bwd_ms = 0;
    /* the embedding block only: the layers' blocks are overwritten (backward_micro) */
    if (!rc && st->grads_full) rc = gpt_stream_memset_zero(s, grad_buffer(st, 0), st->z.padded_embed * sizeof(float));
    if (!rc && st->grads_embed) rc = gpt_stream_memset_zero(s, st->grads_embed, st->z.grads_embed);
    if (!rc) rc = gpt_stream_memset_zero(s, st->grads_embed_in, st->z.grads_embed_in);
    if (!rc && st->grads_shard && st->M > 1) rc = gpt_stream_memset_zero(s, st->grads_shard, st->z.grads_shard);
    if (!rc && st->stage == 3) {
        /* the embedding block, gathered once for the whole step (the head reads it too) */
        gpt_stream *cs = coll_stream(st->param_comm);
        const void *mine = work_shard(st, 0) ? work_shard(st, 0) : (const void *)master_shard(st, 0);
        int span;
        if ((rc = comm_begin(st, cs, &span)) ||
            (rc = coll_all_gather(st->param_comm, st->eslot, mine, st->blocks[0].S * act_size(st))) ||
            (rc = comm_end(st, cs, span)) || (rc = gpt_event_record(st->ev_egathered, cs)) ||
            (rc = gpt_stream_wait_event(s, st->ev_egathered)))
            return rc;
    }
    if (rc) return rc;
    for (int k = 0; k < st->M; k++) {
        double f0 = wall_ms();
        /* Each micro-batch's losses stay on the GPU until the optimizer reads them all: a
         * read-back here would queue behind whatever else crosses to the host meanwhile
         * (gemini's checkpoint: +88 ms per step on two H100s, bench/results/
         * 2026-11-25-h100x2-gemini), and the host, waiting, would issue nothing. */
        st->act.head.losses = st->losses + (size_t)k * N;
        if ((rc = ids_in(st, tokens + (size_t)k * N, targets + (size_t)k * N)) || (rc = issue_phase(st, 0, k)) ||
            (rc = gpt_stream_sync(s)))
            return rc;
        double f1 = wall_ms();
        if (k == 0) engine_fault_point(&st->env, iteration, FAULT_BACKWARD);
        if ((rc = issue_phase(st, 1, k)) || (rc = gpt_stream_sync(s))) return rc;
        fwd_ms += f1 - f0;
        bwd_ms += wall_ms() - f1;
    }
    double t2 = wall_ms();
    if ((rc = optimizer(st, iteration, out)) || (rc = gpt_stream_sync(s)) || (rc = gpt_stream_sync(coll_stream(st->grad_comm))) ||
        (rc = gpt_stream_sync(coll_stream(st->param_comm))))
        return rc;
    double t3 = wall_ms();
    st->steps_done++;
    out->ms_forward = fwd_ms;
    out->ms_backward = bwd_ms;
    out->ms_optimizer = t3 - t2;
    if (st->world > 1) {
        for (int k = 0; k < BUSY_KINDS; k++) out->busy_ms[k] = 0;
        if ((rc = spans_sum(&st->spans, out->busy_ms, BUSY_KINDS))) return rc;
        if ((rc = spans_exposed(&st->spans, BUSY_COMM, BUSY_COMPUTE, &out->exposed_comm_ms))) return rc;
        out->has_comm = 1;
        out->bytes_comm = coll_take_bytes(st->grad_comm) + coll_take_bytes(st->param_comm);
    }
    return GPT_OK;
}

static int megatron_read_params(void *state, float *host_params)
{
    megatron_state *st = state;
    if (st->pipeline) return megatron_pipeline_read_params(st->pipeline, host_params);
    gpt_stream *s = st->compute;
    int rc = gpt_stream_sync(coll_stream(st->param_comm));
    size_t at = 0;
    for (int b = 0; rc == 0 && b <= st->sh.layers; b++) {
        const block_geom *g = &st->blocks[b];
        const float *whole = st->params_full ? st->params_full + g->off : NULL;
        if (!whole) {
            /* gather the fp32 master shards into the block's gradient buffer (scratch now) */
            float *tmp = grad_buffer(st, b);
            rc = coll_all_gather(st->param_comm, tmp, master_shard(st, b), g->S * sizeof(float));
            if (!rc) rc = gpt_stream_sync(coll_stream(st->param_comm));
            whole = tmp;
        }
        if (!rc) rc = gpt_memcpy_d2h(s, host_params + at, whole, g->n * sizeof(float));
        if (!rc) rc = gpt_stream_sync(s);
        at += g->n;
    }
    return rc;
}

/* The step on machine m, in the order of the top comment.  One rank: every micro-batch's
 * embedding, layers, head and backward on the compute stream, then the device AdamW.  N ranks
 * (collectives calibrated at that world): stage 0/1 all-reduce each layer's grads after its
 * last backward, stage 2/3 reduce-scatter them after every micro-batch's, on the grad-comm
 * stream beside the backward; stage 3 gathers each layer into one of two slots before its
 * forward and before its backward (the top two reused), on the param-comm stream; AdamW on
 * this rank's shard after the reductions, and stage 1/2 gather every block after it. */
static void megatron_predict(const engine_config *cfg, const machine_rates *measured, engine_prediction *out)
{
    memset(out, 0, sizeof *out);
    const machine_rates scaled = pred_scaled(measured), *m = &scaled;
    const int world = engine_world(cfg), stage = world > 1 ? cfg->zero_stage : 0, L = cfg->shape.layers;
    const int M = engine_micro_batches(cfg);
    if (engine_model_ranks(cfg) > 1) {
        megatron_pipeline_predict(cfg, m, out);
        return;
    }
    if (pred_no_collectives(cfg, m, out)) return;
    const double PL = (double)gpt_layer_layout_of(&cfg->shape).total, PE = (double)gpt_embed_layout_of(&cfg->shape).total;
    const double P = PE + L * PL;
    /* slot_free[k]: layer k's weight slot free for the layer two away (stage 3: its compute
     * done); grad_free[k]: its gradient slot (stages 2-3: its reduce-scatter done) */
    double *slot_free = pred_arrays(out, (size_t)L + 2, 2);
    if (!slot_free) return;
    double *grad_free = slot_free + L + 2;
    /* t: compute and grad-comm; pcomm: the param-comm stream (its busy time counts as
     * collectives too) */
    pred_timeline t = {0}, pcomm = {0};
    /* (stage 3: the two streams' spans, for the compute both run beside: pred_join_comm) */
    const int two_streams = stage == 3 && m->compute_under_two > 1;
    pred_spans *stream_spans = two_streams ? calloc(2, sizeof *stream_spans) : NULL;
    if (two_streams && !stream_spans) {
        snprintf(out->why, sizeof out->why, "out of memory");
        free(slot_free);
        return;
    }
    t.coll_spans = stream_spans, pcomm.coll_spans = stream_spans ? stream_spans + 1 : NULL;
    double pc = 0, c = 0, gc = 0;
    /* what the collectives move per parameter, in floats: the gathers move the working
     * weights (bf16: half a float each, as the engine's act_size), the reductions the fp32
     * gradient (--grad-reduce-dtype bf16: rounded to half).  (Gathers priced at a float each
     * put bf16 ZeRO-2 at +15.1% and ZeRO-3 at +5.9..10.3% on two H200s, 2026-11-29l.) */
    const double param_floats = (double)gpt_dtype_size(cfg->bf16 ? GPT_BF16 : GPT_F32) / sizeof(float);
    const double grad_floats = cfg->grad_reduce_bf16 && world > 1 ? 0.5 : 1.0;
    const double gather_layer = world > 1 ? pred_coll_ms(m->ag_ms, m->ag_gbs, param_floats * PL) : 0;
    /* a block's gradient reduction: reduce-scattered at stages 2-3, else all-reduced */
    const int shard_grads = stage >= 2;
    const double reduce_lat = shard_grads ? m->rs_ms : m->ar_ms, reduce_gbs = shard_grads ? m->rs_gbs : m->ar_gbs;
    const int reduce_kind = shard_grads ? PRED_REDUCE_SCATTER : PRED_ALL_REDUCE;
    const double reduce_layer = pred_coll_ms(reduce_lat, reduce_gbs, grad_floats * PL),
                 reduce_embed = pred_coll_ms(reduce_lat, reduce_gbs, grad_floats * PE);
    const double gather_embed = pred_coll_ms(m->ag_ms, m->ag_gbs, param_floats * PE);
    if (stage == 3) {
        pc = pred_run_coll(&pcomm, m, PRED_ALL_GATHER, gather_embed, 0);
        /* (the compute beside pcomm's gathers is t's: tracked from the first, the forward's
         * included, where t's own first collective comes only in the backward) */
        t.record_compute = pcomm.record_compute;
    }
    for (int i = 0; i < M; i++) {
        const int last = i == M - 1;
        c = pred_run(&t, BUSY_COMPUTE, m->embed_fwd_ms, pred_max(c, stage == 3 ? pc : 0));
        for (int k = 0; k < L; k++) {
            double ready = c;
            if (stage == 3) { /* into slot k mod 2, once layer k - 2 is done with it */
                pc = pred_run_coll(&pcomm, m, PRED_ALL_GATHER, gather_layer, k >= 2 ? slot_free[k - 2] : c);
                ready = pred_max(c, pc);
            }
            c = pred_run(&t, BUSY_COMPUTE, m->layer_fwd_ms, ready);
            slot_free[k] = c;
        }
        c = pred_run(&t, BUSY_COMPUTE, m->head_ms, c);
        for (int j = L - 1; j >= 0; j--) {
            double ready = c;
            if (stage == 3 && j < L - 2) {
                /* issued before layer j + 1's backward, once j + 2's is done with the slot:
                 * beside j + 1's backward */
                pc = pred_run_coll(&pcomm, m, PRED_ALL_GATHER, gather_layer, slot_free[j + 2]);
                ready = pred_max(c, pc);
            }
            if (shard_grads && j < L - 2) ready = pred_max(ready, grad_free[j + 2]); /* its grad slot */
            c = pred_run(&t, BUSY_COMPUTE, pred_layer_bwd_ms(m, cfg, j), ready);
            slot_free[j] = c;
            if (world > 1 && (shard_grads || last)) {
                gc = pred_run_coll(&t, m, reduce_kind, reduce_layer, c);
                if (shard_grads) grad_free[j] = gc;
            }
        }
        c = pred_run(&t, BUSY_COMPUTE, m->embed_bwd_ms, c);
    }
    if (world > 1) gc = pred_run_coll(&t, m, reduce_kind, reduce_embed, c);
    c = pred_run(&t, BUSY_COMPUTE, pred_gpu_adam_ms(m, stage == 0 ? P : P / world), pred_max(c, gc));
    double end = c;
    if (stage == 1 || stage == 2) /* every block gathered after the update */
        end = pred_run_coll(&pcomm, m, PRED_ALL_GATHER, gather_embed + L * gather_layer, c);
    pred_join_comm(&t, &pcomm);
    pred_done(out, &t, 0, end);
    free(stream_spans);
    free(slot_free);
}

/* Its bound (step_bound.h): the roofline, the collectives' time halved at ZeRO-3 on N ranks: its
 * gathers and reduce-scatters run on two streams at once, so their summed busy time bounds
 * nothing, but the busier stream's, at least half of it, does (pred_done). */
static void megatron_bound(const engine_config *cfg, const double busy[BUSY_KINDS], engine_bound *out)
{
    double b[BUSY_KINDS];
    memcpy(b, busy, sizeof b);
    if (engine_world(cfg) > 1 && cfg->zero_stage == 3 && engine_model_ranks(cfg) == 1) b[BUSY_COMM] /= 2;
    step_bound_schedule(cfg, b, 0, 0, out);
}

/* --zero-stage: an integer option's checks, then a stage there is. */
static int zero_stage_check(const char *opt, const char *value, char *err, size_t errlen)
{
    if (strtol(value, NULL, 10) <= 3) return 0;
    snprintf(err, errlen, "%s: '%s' is not a ZeRO stage (0, 1, 2 or 3)", opt, value);
    return -1;
}

/* --pp-layers: positive layer counts separated by commas (their number and sum are checked
 * against --pp and -l with the run: megatron_pipeline_check). */
static int pp_layers_check(const char *opt, const char *value, char *err, size_t errlen)
{
    if (megatron_pipeline_layer_counts(value, NULL, 0) > 0 && strlen(value) < sizeof(((engine_config *)0)->pp_layers))
        return 0;
    snprintf(err, errlen, "%s: '%s' is not a list of layer counts (e.g. 9,8,8,7)", opt, value);
    return -1;
}

/* The options only megatron-lm takes (engines/option_decl.h). */
static const option_decl megatron_options[] = {
    {.name = "zero-stage", .kind = ARG_INT, .arg = "0-3", .set = SET_INT, OPTION_FIELD(zero_stage), .lo = 0,
     .hi = 2147483647, .check = zero_stage_check, .dflt = "0", .scope = SCOPE_RESULT, .slot = 25,
     .use = OPTION_CFG | OPTION_KID, .flags = OPTION_LAYOUT, .refusal = REFUSED_ALWAYS, .lacks = "shards as its own system does",
     OPTION_INERT(0), OPTION_SEARCH(0, 1, 2, 3), .search_when = SEARCH_WITH_RANKS,
     .help = "on N ranks: 0 DDP, 1 sharded Adam state, 2 + sharded grads, 3 + sharded params (default 0)"},
    {.name = "graphs", .kind = ARG_TEXT, .arg = "auto|on|off", .set = SET_WORDS, OPTION_FIELD(graphs),
     OPTION_WORDS({"auto", GRAPHS_AUTO}, {"on", GRAPHS_ON}, {"off", GRAPHS_OFF}), .dflt = "auto",
     .scope = SCOPE_RESULT_SET, .slot = 9, .use = OPTION_CFG | OPTION_KID, .refusal = REFUSED_GIVEN,
     .lacks = "has no CUDA graphs", OPTION_INERT(GRAPHS_AUTO, GRAPHS_OFF),
     .help = "replay each step's forward and backward as CUDA graphs, captured at the second step (default auto: "
             "on on the GPU for one rank or data parallel at ZeRO-0/1, unless --profile; on: an error where it cannot)"},
    /* (the same results as without: in the fingerprint only where given, so that a pipeline's
     * record is told apart from one rank's.  Refused always by the others, a sweep's children
     * included: the driver lays the ranks and their rows out by it) */
    {.name = "pp", .kind = ARG_INT, .arg = "P", .set = SET_INT, OPTION_FIELD(pp), .lo = 1, .hi = 4096, .dflt = "1",
     .scope = SCOPE_RESULT_SET, .slot = 55, .use = OPTION_CFG | OPTION_KID, .flags = OPTION_LAYOUT, .refusal = REFUSED_ALWAYS,
     .lacks = "has no pipeline stages", OPTION_INERT(0, 1), OPTION_SEARCH(1, 2, 4, 8), .search_when = SEARCH_WITH_RANKS,
     .help = "pipeline parallelism: the layers in P stages (1F1B), world / P ranks each, data parallel; the "
             "micro-batches (--global-batch) flow through them (default 1: none)"},
    {.name = "pp-layers", .kind = ARG_TEXT, .arg = "A,B,...", .set = SET_TEXT, OPTION_FIELD(pp_layers),
     .check = pp_layers_check, .scope = SCOPE_RESULT_SET, .slot = 56, .use = OPTION_CFG | OPTION_KID,
     .refusal = REFUSED_GIVEN, .lacks = "has no pipeline stages",
     .help = "with --pp P: the layers of each of the P stages, first to last, summing to -l (default: balanced)"},
    /* (as --pp: refused always by the others, the driver lays the ranks out by it) */
    {.name = "tp", .kind = ARG_INT, .arg = "T", .set = SET_INT, OPTION_FIELD(tp), .lo = 1, .hi = 4096, .dflt = "1",
     .scope = SCOPE_RESULT_SET, .slot = 57, .use = OPTION_CFG | OPTION_KID, .flags = OPTION_LAYOUT, .refusal = REFUSED_ALWAYS,
     .lacks = "has no tensor parallelism", OPTION_INERT(0, 1), OPTION_SEARCH(1, 2, 4, 8), .search_when = SEARCH_WITH_RANKS,
     .help = "tensor parallelism: each layer's heads and MLP, and the vocabulary, split over T neighbouring ranks of "
             "one machine (Megatron's column- and row-parallel matmuls); world / (T P) copies data parallel "
             "(default 1: none)"},
    {.name = "sequence-parallel", .kind = ARG_NONE, .set = SET_FLAG, OPTION_FIELD(sequence_parallel),
     .scope = SCOPE_RESULT_SET, .slot = 58, .use = OPTION_CFG | OPTION_KID, .refusal = REFUSED_GIVEN,
     .lacks = "has no tensor parallelism", OPTION_INERT(0), OPTION_SEARCH(0, 1), .search_when = SEARCH_WITH_RANKS,
     .help = "with --tp T: the residual stream's rows split over the T ranks between the layers' split parts "
             "(Megatron's sequence parallelism: reduce-scatter and all-gather in place of the all-reduces)"},
    /* (fp32 by default, as Megatron-LM's arguments.py makes it for --bf16: "bfloat16 requires
     * gradient accumulation and all-reduce to be done in fp32" unless --grad-reduce-in-bf16) */
    {.name = "grad-reduce-dtype", .kind = ARG_TEXT, .arg = "fp32|bf16", .set = SET_WORDS, OPTION_FIELD(grad_reduce_bf16),
     OPTION_WORDS({"fp32", 0}, {"bf16", 1}), .dflt = "fp32", .scope = SCOPE_RESULT_SET, .slot = 59,
     .use = OPTION_CFG | OPTION_KID, .refusal = REFUSED_GIVEN, .lacks = "reduces its gradients in fp32 only",
     OPTION_INERT(0),
     .help = "with --dtype bf16 on N ranks: the data-parallel gradient reductions in bf16 (half the bytes; each "
             "rank's gradient rounded to bf16 before the sum) or fp32 (default, as Megatron-LM for bf16 models)"},
};

/* The plan of what init made: the pipeline's stage's own (its plan beforehand is the largest
 * stage's); one rank's or a data-parallel rank's is the plan. */
static void megatron_chosen_plan(void *state, engine_plan *out)
{
    const megatron_state *st = state;
    if (st->pipeline) megatron_pipeline_chosen_plan(st->pipeline, out);
    else megatron_plan(st->env.cfg, out);
}

/* Its steady state: from the third step where the second captures the graphs (a capture
 * issues the phase, then replays it), else from the second. */
static int megatron_steady_from(const engine_config *cfg)
{
    return cfg->graphs != GRAPHS_OFF && !graphs_unavailable(cfg) ? 3 : 2;
}

const engine_vtbl engine_megatron_lm = {
    .name = "megatron-lm",
    .alias = "baseline",
    .description = "no offload: everything on the GPU (the baseline); N ranks: DDP or ZeRO-1/2/3",
    .uses_window = 0,
    .supports_bf16 = 1,
    .options = ENGINE_OPT_RANKS | ENGINE_OPT_ACCUM | ENGINE_OPT_FAULT_BACKWARD,
    .steady_from = megatron_steady_from,
    .plan = megatron_plan,
    .check = megatron_check,
    .init = megatron_init,
    .chosen_plan = megatron_chosen_plan,
    .step = megatron_step,
    .free = megatron_free,
    .read_params = megatron_read_params,
    .predict = megatron_predict,
    .bound = megatron_bound,
    OWN_OPTIONS(megatron_options),
};

int megatron_shard_state_of(void *state, megatron_shard_state *out)
{
    megatron_state *st = state;
    /* stage 3 fp32: the sharded master is the only copy of the weights, so putting it back
     * puts the model back (every layer is gathered from it before use) */
    if (st->stage != 3 || st->wparams_shard || !st->params_shard) return GPT_ERR_INVALID;
    out->master = st->params_shard;
    out->adam_m = st->adam_m;
    out->adam_v = st->adam_v;
    out->n = st->z.shard_total;
    out->adam_step = &st->adam_step;
    out->compute = st->compute;
    return GPT_OK;
}

void megatron_set_hooks(void *state, const megatron_hooks *hooks)
{
    ((megatron_state *)state)->hooks = *hooks;
}

void megatron_arm_sums(void *state, uint64_t *sums, const uint64_t *init, size_t chunk_floats)
{
    megatron_state *st = state;
    st->sums_dev = st->stage == 3 && st->params_shard && !st->wparams_shard ? sums : NULL;
    st->sums_init = init;
    st->sums_chunk = chunk_floats;
}

int megatron_sums_done(const void *state) { return ((const megatron_state *)state)->sums_done; }

size_t megatron_shard_padding(const void *state, size_t *ranges, size_t max_ranges)
{
    const megatron_state *st = state;
    size_t count = 0;
    for (int b = 0; b <= st->sh.layers; b++) {
        const block_geom *g = &st->blocks[b];
        const size_t real = dp_shard_real(g->n, g->S, st->rank);
        if (real >= g->S) continue;
        if (count < max_ranges) {
            ranges[2 * count] = g->soff + real;
            ranges[2 * count + 1] = g->soff + g->S;
        }
        count++;
    }
    return count;
}

size_t megatron_shard_floats(const engine_config *cfg)
{
    return sizes_of(cfg).shard_total;
}
