/*
 * l2l — layer to layer (Pudipeddi et al. 2020): one transformer layer on the GPU at a time,
 * every layer's weights and optimizer state on the host ("eager param server"), done exactly.
 *
 * Where things live (fp32; with --dtype bf16 what the ops read is bf16 — the slot's params,
 * the inputs and activations, a working copy of the embedding and of every layer's params —
 * while grads, master params and Adam state stay fp32, as megatron-lm --dtype bf16 keeps
 * them; so the copies up move half the bytes and the grads go home in fp32):
 *   GPU   embed block: params, grads, Adam m, v (it updates on the GPU; bf16: and its working
 *         copy); ONE layer slot: params (bf16: the working copy) and grads; the checkpointed
 *         inputs x[0..L] of every layer (x[L] is the head's input); the layers' activations
 *         as --recompute keeps them (full: one layer's, recomputed in backward; selective:
 *         also each layer's GEMM outputs; none: every layer's), the backward scratch, the head's activations (one chunk
 *         of rows' logits at a time), the residual gradient, the token and target ids, the
 *         L+1 squared block norms
 *   host  pinned: every layer's params (bf16: its bf16 working copy, which the host Adam
 *         writes beside the fp32 params, then ordinary memory) and grads (what the copies
 *         read and write), the losses and norms read back; ordinary: every layer's Adam m
 *         and v, and a staging block for the embedding's initialisation (given back)
 *
 * One iteration, stream by stream (the slot is the only place a layer runs from, so each
 * layer's compute waits for its copy: no prefetch, which is what sets l2l apart from
 * stronghold):
 *   compute   ids; embed; fwd 0..L-1, each once its params are in; head; bwd head;
 *             bwd L-1..0 with recompute (not L-1: its forward's activations are still there),
 *             each once its params are in and the slot's grads are zeroed, each followed by
 *             its squared grad norm; embed bwd and norm; read back;
 *             GPU Adam of the embed block
 *   h2d       fwd: layer k's params into the slot once layer k-1's forward is done (and once
 *             k's host update from the previous step is done); bwd: layer j's params into the
 *             slot once layer j+1's backward is done (layer L-1's right after its forward,
 *             under the head)
 *   d2h       bwd: layer j's grads to the host once its backward is done, then the slot's
 *             grads zeroed for layer j-1
 *   host Adam layer j once its grads are home: with --clip-grad 0 queued right after the
 *             copy (it runs under the backward of the layers below); with clipping all L
 *             queued, ascending, once the global norm is known after backward (they run
 *             under the next forward, whose copy of layer k waits for k's update).
 * Events order every hand-off between streams.  The slot's params and grads are separate
 * buffers, so in backward layer j's grads leave (d2h) while layer j-1's params arrive
 * (h2d): both directions of the bus work at once, and the compute waits for both.
 *
 * Why the host Adam waits for the end of backward when clipping: Megatron clips with the
 * norm of *all* gradients, known only once the backward ends, so an update of layer j
 * before then cannot equal the baseline's (the artifact's l2l never clipped).  Without
 * clipping nothing waits for the norm and each layer updates as its grads arrive, still
 * equal to the baseline.  (There a non-finite gradient found at the end of backward can no
 * longer un-update the layers above it; the baseline would skip the whole step.)  With
 * clipping, --clip-speculate (default auto) updates the top K layers as their grads arrive
 * anyway, as if the norm will not clip, into a second copy of their params, m and v, and
 * again from the untouched current copy when it does (runtime/update_ahead.h; host: the
 * second copies, params pinned).
 *
 * Artifact bugs not copied: every tensor of a layer is updated (its l2l skipped biases and
 * LayerNorm and updated only the first rows of 2-D weights), and the update is clipped.
 *
 * N ranks: the embed block is replicated (all-reduced, GPU Adam on every rank); every
 * layer's host state (params, grads, m, v) is sharded: each rank keeps its 1/N of every
 * layer (runtime/dp.h) and the slot holds the layer padded to N shards.
 *   h2d          the copy in brings this rank's shard of the layer into its place in the slot
 *   collectives  ... all-gathered in place (params_in is recorded there); after a layer's
 *                backward its grads are reduce-scattered in place with this rank's entry of
 *                the (block, shard) norms; the embed grads all-reduced at the end
 *   d2h          this rank's reduced shard (1/N of the bytes)
 *   host Adam    this rank's shard of each layer
 * Each rank's norm table is gathered after the backward; entry (b, r) comes from rank r.
 * Why sharded and not replicas: measured on two H200 of one machine (README), replicas made
 * both ranks update the whole model with half the host's cores each, doubling the host Adam
 * (294 -> 566 ms at l32) and giving 1.27x at N = 2; sharded, each updates its half.
 */
#include "engine.h"
#include "step_bound.h"

#include "runtime/cpu_adam.h"
#include "runtime/dp.h"
#include "runtime/layer_work.h"
#include "runtime/offload_streams.h"
#include "runtime/spans.h"
#include "runtime/update_ahead.h"
#include "runtime/timer.h"
#include "runtime/predict.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Floats of the blocks and activations that every size below derives from. */
typedef struct l2l_layout {
    int L;
    size_t PL, PE; /* one layer block, the embed block */
    size_t N, NC;  /* tokens per step; one (N, C) activation */
    int world, rank;   /* ranks: every layer's host state is sharded (runtime/dp.h) */
    int M;         /* micro-batches per step */
    int K;         /* --clip-speculate: the top K layers are updated ahead of the norm */
    size_t Sl, SP; /* a layer's shard, and the slot's floats (world·Sl: the layer padded) */
    gpt_dtype dt;  /* what the ops read (--dtype): fp32, or bf16 with fp32 master weights */
    size_t act;    /* ... its bytes per element */
    gpt_recompute rec; /* --recompute: what each layer's activations keep on the GPU */
} l2l_layout;

static l2l_layout layout_for(const gpt_shape *sh, int bf16, gpt_recompute rec)
{
    l2l_layout z;
    z.rec = rec;
    z.dt = bf16 ? GPT_BF16 : GPT_F32;
    z.act = gpt_dtype_size(z.dt);
    z.L = sh->layers;
    z.PL = gpt_layer_layout_of(sh).total;
    z.PE = gpt_embed_layout_of(sh).total;
    z.N = (size_t)sh->batch * sh->seq;
    z.NC = z.N * (size_t)sh->hidden;
    z.world = 1;
    z.rank = 0;
    z.M = 1;
    z.K = 0;
    z.Sl = z.SP = z.PL;
    return z;
}

static void set_ranks(l2l_layout *z, int world, int rank, int M)
{
    z->M = M;
    z->world = world;
    z->rank = rank;
    z->Sl = dp_shard_len(z->PL, world);
    z->SP = (size_t)world * z->Sl;
}

/* Bytes of every allocation; plan and init share them. */
typedef struct l2l_bytes {
    size_t embed, slot, inputs, host_layers, staging;
    size_t embed_work, slot_work, host_work; /* the ops' copies: bf16 (0 in fp32: the params) */
    uint64_t work_gpu, work_host; /* layer_work: activations (--recompute), ids, norms, ... */
} l2l_bytes;

static l2l_bytes bytes_for(const l2l_layout *z, const gpt_shape *sh)
{
    const size_t f = sizeof(float);
    l2l_bytes b;
    b.embed = z->PE * f;                          /* each of params, grads, m, v */
    b.slot = z->SP * f;                           /* grads (fp32 params: also them) */
    b.inputs = (size_t)(z->L + 1) * z->NC * z->act;
    b.host_layers = (size_t)z->L * z->Sl * f;     /* each of params, grads, m, v */
    const int bf16 = z->dt == GPT_BF16;
    b.embed_work = bf16 ? gpt_act_bytes(z->PE, z->dt) : 0;
    b.slot_work = gpt_act_bytes(z->SP, z->dt);    /* the slot's params, as the ops read them */
    b.host_work = bf16 ? gpt_act_bytes((size_t)z->L * z->Sl, z->dt) : 0;
    b.work_gpu = layer_work_gpu_bytes(sh, z->rec, z->world, z->M, z->dt);
    b.work_host = layer_work_host_bytes(sh, z->world, z->M);
    /* (N ranks: also each layer whole, before its shard is kept) */
    b.staging = (z->world > 1 && z->PL > z->PE ? z->PL : z->PE) * f;
    return b;
}

/* GPU ~ 16 P_E + 8 P_L + activations; host ~ 16 (P - P_E) (bf16: GPU ~ 18 P_E + 6 P_L and
 * half the activations; host ~ 18 (P - P_E)).  The staging block is the last
 * host allocation and is given back after init, but it counts in the peak. */
static void plan_of(const l2l_layout *z, const gpt_shape *sh, const engine_config *cfg, engine_plan *out)
{
    l2l_bytes b = bytes_for(z, sh);
    *out = (engine_plan){0};
    out->gpu_bytes = 4 * (uint64_t)b.embed + b.embed_work + b.slot + b.slot_work + b.inputs + b.work_gpu;
    out->host_bytes = 4 * (uint64_t)b.host_layers + b.host_work + b.work_host + b.staging +
                      update_ahead_bytes(z->K, z->Sl);
    out->disk_bytes = 0;
    engine_plan_add_comm(out, cfg, 1); /* (layer_work's gradients group, on N GPU ranks) */
}

/* --clip-speculate: how many layers, from the top, are updated ahead of the norm
 * (runtime/update_ahead.h; not built on N ranks or with micro-batches).  bf16: the update
 * ahead writes the one working copy (nothing reads it before the layer's next copy in, which
 * waits for the update, or for its redo when the norm clipped); a skipped step rounds it
 * again from the params it keeps (restore_working_copies). */
static int ahead_layers(const engine_config *cfg, const l2l_layout *z, const gpt_shape *sh)
{
    l2l_layout base = *z;
    base.K = 0;
    engine_plan p;
    plan_of(&base, sh, cfg, &p);
    return update_ahead_blocks(cfg, z->world == 1 && z->M == 1, 1, z->L, p.host_bytes, z->Sl);
}

static void l2l_plan(const engine_config *cfg, engine_plan *out)
{
    l2l_layout z = layout_for(&cfg->shape, cfg->bf16, cfg->recompute);
    set_ranks(&z, engine_world(cfg), 0, engine_micro_batches(cfg));
    z.K = ahead_layers(cfg, &z, &cfg->shape);
    plan_of(&z, &cfg->shape, cfg, out);
    if (cfg->clip_speculate < 0) out->host_while_ahead = update_ahead_bytes(z.K, z.Sl);
}

/* ---- state ------------------------------------------------------------------------------ */

typedef struct l2l_state {
    engine_env env;
    gpt_shape sh;
    l2l_layout z;
    offload_streams io; /* compute, h2d and d2h streams, host Adam pool, busy spans */
    engine_allocs mem;

    /* GPU */
    float *embed_p, *embed_g, *embed_m, *embed_v;
    void *embed_w;             /* bf16: the embedding's working copy (fp32: embed_p) */
    void *slot_p;              /* the one layer slot: its params as the ops read them ... */
    float *slot_g;             /* ... and its grads */
    void *inputs;              /* (L+1, N, C): x[k] is layer k's input */
    layer_work work;           /* one layer's activations, scratch, head, ids, norms (+ pinned
                                  read-backs) */
    /* host */
    float *host_p, *host_g, *host_m, *host_v; /* L layer blocks each (N ranks: this rank's
                                                 shard of each) */
    uint16_t *host_w;          /* bf16: L blocks of the working copy the copies up read */
    gpt_event *shard_up;       /* N ranks: h2d: this rank's shard of the slot's layer is up */

    /* The slot's hand-offs; each is re-recorded for every layer, after the waits on its
     * previous recording have been issued. */
    gpt_event *params_in;     /* h2d: the slot holds the next layer's params */
    gpt_event *slot_done;     /* compute: the slot's layer has run (fwd or bwd) */
    gpt_event *grads_zeroed;  /* d2h: the slot's grads are zero for the next backward */
    gpt_event **grads_home;   /* L: layer k's grads are on the host (host Adam waits) */
    uint64_t *adam_ticket;    /* L: host Adam of layer k (0: none pending) */
    update_ahead ahead;       /* --clip-speculate: the top K layers' second copies */
    int adam_step;
} l2l_state;

static int alloc_in(l2l_state *st, void **ptr, size_t bytes, mem_where where, const char *what)
{
    return engine_alloc(&st->mem, where, ptr, bytes, what);
}

/* Wait for every pending host update (0 or the first error). */
static int wait_all_adam(l2l_state *st)
{
    int first = GPT_OK;
    if (!st->adam_ticket) return GPT_OK;
    for (int k = 0; k < st->z.L; k++) {
        if (!st->adam_ticket[k]) continue;
        int rc = cpu_adam_wait(st->io.host_adam, st->adam_ticket[k]);
        if (rc && !first) first = rc;
        st->adam_ticket[k] = 0;
    }
    return first;
}

static void l2l_free(void *state)
{
    l2l_state *st = state;
    if (!st) return;
    update_ahead_note_result(&st->ahead, &st->env, "l2l");
    if (st->io.host_adam) (void)wait_all_adam(st);
    /* Waits for the host Adam pool and drains the streams: after a failed step, queued
     * work may still use the buffers freed below. */
    offload_streams_close(&st->io);
    layer_work_close_comm(&st->work);
    gpt_event_destroy(st->shard_up);
    gpt_event_destroy(st->params_in);
    gpt_event_destroy(st->slot_done);
    gpt_event_destroy(st->grads_zeroed);
    event_array_destroy(st->grads_home, st->z.L);
    free(st->adam_ticket);
    update_ahead_close(&st->ahead);
    engine_free_all(&st->mem);
    free(st);
}

/* Layer k's input on the GPU; k == L is the head's input. */
static void *input_of(l2l_state *st, int k) { return (char *)st->inputs + (size_t)k * st->z.NC * st->z.act; }
/* The embedding as the ops read it: its bf16 working copy, or the fp32 params. */
static void *embed_work(l2l_state *st) { return st->embed_w ? st->embed_w : (void *)st->embed_p; }
/* This rank's shard's place in the slot. */
static void *slot_shard(l2l_state *st) { return (char *)st->slot_p + (size_t)st->z.rank * st->z.Sl * st->z.act; }
/* Offset of layer k's block in the host arrays. */
static size_t host_block(const l2l_state *st, int k) { return (size_t)k * st->z.Sl; }

/* Layer k's host state: the copy that is current (other = 0), or, for the top K layers
 * under --clip-speculate, the one an update ahead of the norm writes (other = 1). */
static ahead_state state_of(const l2l_state *st, int k, int other)
{
    const size_t off = host_block(st, k);
    return update_ahead_state(&st->ahead, k, st->host_p + off, st->host_m + off, st->host_v + off, other);
}
/* Real floats of this rank's shard of a layer (the layer on one rank). */
static size_t shard_real(const l2l_state *st) { return dp_shard_real(st->z.PL, st->z.Sl, st->z.rank); }

/* ---- init ----------------------------------------------------------------------------------- */

/* Layers initialise straight into their host blocks; the embed block goes through the
 * staging block (the last allocation, given back here). */
static int init_params(l2l_state *st, float *staging)
{
    const gpt_shape *sh = &st->sh;
    const l2l_layout *z = &st->z;
    const uint64_t seed = st->env.cfg->seed;
    gpt_stream *s = st->io.compute;
    int rc;
    for (int k = 0; k < z->L; k++) {
        if (z->world == 1) {
            engine_init_layer(&st->env, st->host_p + host_block(st, k), sh, k, seed);
            continue;
        }
        engine_init_layer(&st->env, staging, sh, k, seed); /* this rank's shard of it (padding: zeros) */
        memcpy(st->host_p + host_block(st, k), staging + (size_t)z->rank * z->Sl,
               shard_real(st) * sizeof(float));
    }
    /* bf16: the working copy the copies up read, rounded as the backends round */
    if (st->host_w) cpu_round_bf16(st->host_w, st->host_p, (size_t)z->L * z->Sl);
    /* (host m and v: the allocations' zeros) */
    engine_init_embed(&st->env, staging, sh, seed);
    if ((rc = gpt_memcpy_h2d(s, st->embed_p, staging, z->PE * sizeof(float))) ||
        (rc = gpt_stream_memset_zero(s, st->embed_m, z->PE * sizeof(float))) ||
        (rc = gpt_stream_memset_zero(s, st->embed_v, z->PE * sizeof(float))))
        return rc;
    if (st->embed_w) gpt_params_to_act(s, st->embed_w, st->embed_p, z->PE);
    if ((rc = gpt_stream_sync(s))) return rc;
    engine_free_last(&st->mem);
    return GPT_OK;
}

static int l2l_init(const engine_env *env, void **state)
{
    *state = NULL;
    int rc = engine_init_check(&engine_l2l, env);
    if (rc) return rc;
    l2l_state *st = calloc(1, sizeof *st);
    if (!st) return GPT_ERR_OOM;
    st->env = *env;
    engine_allocs_init(&st->mem, env->gpu, env->host, env->be);
    st->sh = env->cfg->shape;
    st->z = layout_for(&st->sh, env->cfg->bf16, env->cfg->recompute);
    set_ranks(&st->z, engine_world(env->cfg), env->rank, engine_micro_batches(env->cfg));
    st->z.K = ahead_layers(env->cfg, &st->z, &st->sh);
    *state = st;
    const gpt_shape *sh = &st->sh;
    const int L = sh->layers;
    /* Spans per micro-batch: fwd and bwd of every layer, embed, head and optimizer on compute;
     * two copies in and one out per layer; on N ranks each copy in's gather, each layer's
     * reduce-scatter and (after the first micro-batch) its sum so far. */
    if ((rc = offload_streams_open(&st->io, env->be, env->cfg, 9 * L + 18))) return rc;

    l2l_bytes b = bytes_for(&st->z, sh);
    void *staging = NULL;
    if ((rc = alloc_in(st, (void **)&st->embed_p, b.embed, MEM_GPU, "embedding parameters")) ||
        (rc = alloc_in(st, (void **)&st->embed_g, b.embed, MEM_GPU, "embedding gradients")) ||
        (rc = alloc_in(st, (void **)&st->embed_m, b.embed, MEM_GPU, "embedding Adam m")) ||
        (rc = alloc_in(st, (void **)&st->embed_v, b.embed, MEM_GPU, "embedding Adam v")) ||
        (b.embed_work && (rc = alloc_in(st, &st->embed_w, b.embed_work, MEM_GPU, "embedding working copy (bf16)"))) ||
        (rc = alloc_in(st, &st->slot_p, b.slot_work, MEM_GPU, "layer slot parameters")) ||
        (rc = alloc_in(st, (void **)&st->slot_g, b.slot, MEM_GPU, "layer slot gradients")) ||
        (rc = alloc_in(st, &st->inputs, b.inputs, MEM_GPU, "checkpointed layer inputs")) ||
        (rc = layer_work_alloc(&st->work, &st->mem, sh, st->z.rec, st->z.world, st->z.M, st->z.dt)) ||
        (rc = layer_work_open_comm(&st->work, env->be, env->rank, env->world, env->dog)) ||
        /* (bf16: the copies up read the working copy, so the fp32 params need no pinning) */
        (rc = alloc_in(st, (void **)&st->host_p, b.host_layers, b.host_work ? MEM_HOST : MEM_PINNED,
                       "layer parameters")) ||
        (b.host_work &&
         (rc = alloc_in(st, (void **)&st->host_w, b.host_work, MEM_PINNED, "layer working copies (bf16)"))) ||
        (rc = alloc_in(st, (void **)&st->host_g, b.host_layers, MEM_PINNED, "layer gradients")) ||
        (rc = alloc_in(st, (void **)&st->host_m, b.host_layers, MEM_HOST, "layer Adam m")) ||
        (rc = alloc_in(st, (void **)&st->host_v, b.host_layers, MEM_HOST, "layer Adam v")) ||
        (rc = update_ahead_open(&st->ahead, &st->mem, env->cfg, L - st->z.K, st->z.K, st->z.Sl)) ||
        (rc = alloc_in(st, &staging, b.staging, MEM_HOST, "embedding staging")))
        return rc;
    update_ahead_note_plan(&st->ahead, env, "l2l", L);

    st->adam_ticket = calloc((size_t)L, sizeof *st->adam_ticket);
    if (!st->adam_ticket) return GPT_ERR_OOM;
    if ((rc = gpt_event_create(env->be, &st->params_in)) ||
        (rc = gpt_event_create(env->be, &st->slot_done)) ||
        (rc = gpt_event_create(env->be, &st->grads_zeroed)) ||
        (rc = event_array_create(env->be, &st->grads_home, L)) ||
        (st->z.world > 1 && (rc = gpt_event_create(env->be, &st->shard_up))))
        return rc;

    engine_plan p;
    plan_of(&st->z, sh, st->env.cfg, &p);
    char g[32], h[32];
    format_bytes((double)p.gpu_bytes, g, sizeof g);
    format_bytes((double)p.host_bytes, h, sizeof h);
    engine_note(env, "l2l plan: GPU %s (one layer slot for %d layers), host %s; host Adam: %s", g, L, h,
                cpu_adam_isa(st->io.host_adam));
    return init_params(st, staging);
}

/* ---- one step -------------------------------------------------------------------------------- */

/* Copy layer k's params into the slot once the slot's previous layer has run (and, for the
 * forward, once k's host update is done). */
static int copy_in(l2l_state *st, int k, step_result *out)
{
    int rc, span;
    if (st->adam_ticket[k]) {
        if ((rc = cpu_adam_wait(st->io.host_adam, st->adam_ticket[k]))) return rc;
        st->adam_ticket[k] = 0;
    }
    const size_t bytes = shard_real(st) * st->z.act;
    const void *src = st->host_w ? (const void *)(st->host_w + host_block(st, k)) : (const void *)state_of(st, k, 0).p;
    if ((rc = gpt_stream_wait_event(st->io.h2d, st->slot_done)) ||
        (rc = span_begin(&st->io.spans, st->io.h2d, BUSY_H2D, &span)) ||
        (rc = gpt_memcpy_h2d(st->io.h2d, slot_shard(st), src, bytes)) ||
        (rc = span_end(&st->io.spans, st->io.h2d, span)))
        return rc;
    out->bytes_h2d += (double)bytes;
    if (st->z.world == 1) return gpt_event_record(st->params_in, st->io.h2d);
    /* N ranks: every rank's shard of the layer, gathered into the slot in place */
    gpt_stream *cs = coll_stream(st->work.comm);
    if ((rc = gpt_event_record(st->shard_up, st->io.h2d)) || (rc = gpt_stream_wait_event(cs, st->shard_up)) ||
        (rc = span_begin(&st->io.spans, cs, BUSY_COMM, &span)) ||
        (rc = coll_all_gather(st->work.comm, st->slot_p, slot_shard(st), st->z.Sl * st->z.act)) ||
        (rc = span_end(&st->io.spans, cs, span)))
        return rc;
    return gpt_event_record(st->params_in, cs);
}

/* Queue layer k's host update, to start once its grads are home: in place, or (ahead,
 * --clip-speculate) from the current copy of its state into the other.  It uses the Adam step
 * the coming optimizer phase will count (st->adam_step + 1). */
static int submit_host_adam(l2l_state *st, int k, step_result *out, float scale, int ahead)
{
    /* this rank's shard [r Sl, r Sl + n) of the layer against its decay range */
    const size_t off = host_block(st, k), n = shard_real(st), lo = (size_t)st->z.rank * st->z.Sl;
    const size_t decay = gpt_layer_layout_of(&st->sh).n_decay;
    cpu_adam_job job = {
        .grads = st->host_g + off, .n = n, .n_decay = decay <= lo ? 0 : decay - lo < n ? decay - lo : n,
        .optim = st->env.cfg->optim, .lr = (float)out->lr, .t = st->adam_step + 1,
        .grad_scale = scale, .after = st->grads_home[k],
        .params_bf16 = st->host_w ? st->host_w + off : NULL,
    };
    out->host_adam_params += (double)n;
    update_ahead_job(&st->ahead, k, st->host_p + off, st->host_m + off, st->host_v + off, ahead, &job);
    return cpu_adam_submit(st->io.host_adam, &job, &st->adam_ticket[k]);
}

static int forward(l2l_state *st, step_result *out)
{
    const gpt_shape *sh = &st->sh;
    const l2l_layout *z = &st->z;
    gpt_stream *c = st->io.compute;
    int rc, span;
    if ((rc = span_begin(&st->io.spans, c, BUSY_COMPUTE, &span))) return rc;
    gpt_embed_forward(c, sh, embed_work(st), st->work.ids, input_of(st, 0));
    if ((rc = span_end(&st->io.spans, c, span))) return rc;
    for (int k = 0; k < z->L; k++) {
        if ((rc = copy_in(st, k, out)) || (rc = gpt_stream_wait_event(c, st->params_in)) ||
            (rc = span_begin(&st->io.spans, c, BUSY_COMPUTE, &span)))
            return rc;
        gpt_layer_acts acts = layer_work_acts(&st->work, sh, k);
        gpt_layer_forward(c, sh, st->slot_p, input_of(st, k), input_of(st, k + 1), &acts);
        if ((rc = span_end(&st->io.spans, c, span)) || (rc = gpt_event_record(st->slot_done, c)))
            return rc;
    }
    /* The backward starts with layer L-1: its copy in runs under the head. */
    if ((rc = copy_in(st, z->L - 1, out))) return rc;
    return layer_work_head_forward(&st->work, &st->io.spans, c, sh, embed_work(st), st->embed_g,
                                   input_of(st, z->L));
}

static int backward(l2l_state *st, step_result *out)
{
    const gpt_shape *sh = &st->sh;
    const l2l_layout *z = &st->z;
    gpt_stream *c = st->io.compute;
    int rc, span;
    if ((rc = layer_work_head_backward(&st->work, &st->io.spans, c, sh, embed_work(st), st->embed_g,
                                       input_of(st, z->L))))
        return rc;
    for (int j = z->L - 1; j >= 0; j--) {
        /* The slot's grads accumulate: zero them behind the previous layer's copy out. */
        if ((rc = gpt_stream_memset_zero(st->io.d2h, st->slot_g, z->SP * sizeof(float))) ||
            (rc = gpt_event_record(st->grads_zeroed, st->io.d2h)))
            return rc;
        if (j < z->L - 1 && (rc = copy_in(st, j, out))) return rc;
        if ((rc = gpt_stream_wait_event(c, st->params_in)) ||
            (rc = gpt_stream_wait_event(c, st->grads_zeroed)) ||
            (rc = span_begin(&st->io.spans, c, BUSY_COMPUTE, &span)))
            return rc;
        gpt_layer_acts acts = layer_work_backward_acts(&st->work, sh, j);
        gpt_layer_backward(c, sh, st->slot_p, st->slot_g, input_of(st, j), st->work.dres, &acts,
                           &st->work.scratch, GPT_GRAD_ACCUMULATE);
        /* N ranks: the slot's grads are reduce-scattered before they go home; micro-batches
         * after the first add the earlier ones' sum (fin: the stream that did it). */
        gpt_stream *fin;
        if ((rc = span_end(&st->io.spans, c, span)) ||
            (rc = layer_work_reduce_home(&st->work, &st->io.spans, c, 1 + j, st->slot_g, z->PL,
                                         st->host_g + host_block(st, j), st->grads_home[j], out,
                                         &fin)) ||
            (rc = gpt_event_record(st->slot_done, fin)) ||
            (rc = gpt_stream_wait_event(st->io.d2h, st->slot_done)) ||
            (rc = span_begin(&st->io.spans, st->io.d2h, BUSY_D2H, &span)) ||
            (rc = gpt_memcpy_d2h(st->io.d2h, st->host_g + host_block(st, j),
                                 st->slot_g + (size_t)z->rank * z->Sl, shard_real(st) * sizeof(float))) ||
            (rc = span_end(&st->io.spans, st->io.d2h, span)) ||
            (rc = gpt_event_record(st->grads_home[j], st->io.d2h)))
            return rc;
        out->bytes_d2h += (double)shard_real(st) * sizeof(float);
        if (st->env.cfg->optim.clip <= 0 && layer_work_last_micro(&st->work) &&
            (rc = submit_host_adam(st, j, out, 1.0f, 0)))
            return rc;
        /* --clip-speculate: as if the norm will not clip (runtime/update_ahead.h) */
        if (update_ahead_now(&st->ahead, j) && (rc = submit_host_adam(st, j, out, 1.0f, 1))) return rc;
    }
    if ((rc = span_begin(&st->io.spans, c, BUSY_COMPUTE, &span))) return rc;
    layer_work_embed_backward(&st->work, c, sh, st->embed_g);
    if ((rc = span_end(&st->io.spans, c, span))) return rc;
    /* the embedding's grads accumulate in place over the micro-batches: reduced once */
    if (!layer_work_last_micro(&st->work)) return GPT_OK;
    gpt_stream *fin;
    if ((rc = layer_work_reduce(&st->work, &st->io.spans, c, 0, st->embed_g, z->PE, &fin)))
        return rc;
    /* (the compute stream waits for every reduction: the embed's Adam reads its grads) */
    return layer_work_read_norms(&st->work, c, sh);
}

static int optimizer(l2l_state *st, step_result *out)
{
    const l2l_layout *z = &st->z;
    const gpt_optim *o = &st->env.cfg->optim;
    gpt_stream *c = st->io.compute;
    int rc, span;
    const float scale = gpt_clip_scale(o, out->grad_norm);
    if ((rc = span_begin(&st->io.spans, c, BUSY_COMPUTE, &span))) return rc;
    /* (bf16: the working copy refreshed in the same pass) */
    gpt_block_adamw_act(c, st->embed_p, st->embed_w, st->embed_g, st->embed_m, st->embed_v, z->PE,
                        gpt_embed_layout_of(&st->sh).n_decay, o, (float)out->lr, st->adam_step + 1, scale);
    if ((rc = span_end(&st->io.spans, c, span))) return rc;
    /* Ascending, so that the next forward, which needs layer 0 first, waits least.
     * (Without clipping they were queued during the backward; with --clip-speculate the top
     * K were too, as if the norm would not clip: done again from their current copy when it
     * did; then their copies swap.) */
    if (o->clip > 0)
        for (int k = 0; k < z->L; k++) {
            const int ahead = update_ahead_now(&st->ahead, k);
            if ((!ahead || scale != 1.0f) && (rc = submit_host_adam(st, k, out, scale, ahead))) return rc;
            if (ahead) update_ahead_swap(&st->ahead, k);
        }
    return GPT_OK;
}

/* bf16, a skipped step: the layers updated ahead wrote their working copies, and their updates
 * are dropped: round the params they keep into them again (once those jobs are done). */
static int restore_working_copies(l2l_state *st)
{
    for (int k = 0; st->host_w && k < st->z.L; k++) {
        if (!update_ahead_now(&st->ahead, k)) continue;
        int rc;
        if (st->adam_ticket[k] && (rc = cpu_adam_wait(st->io.host_adam, st->adam_ticket[k]))) return rc;
        st->adam_ticket[k] = 0;
        const float *p = state_of(st, k, 0).p;
        cpu_round_bf16(st->host_w + host_block(st, k), p, shard_real(st));
    }
    return GPT_OK;
}

/* One micro-batch's forward and backward (layer_work_micro_batches runs them). */
static int forward_pass(void *engine, step_result *out) { return forward(engine, out); }
static int backward_pass(void *engine, step_result *out) { return backward(engine, out); }

static int l2l_step(void *state, int iteration, const int32_t *tokens, const int32_t *targets,
                    step_result *out)
{
    l2l_state *st = state;
    const l2l_layout *z = &st->z;
    const engine_config *cfg = st->env.cfg;
    gpt_stream *c = st->io.compute;
    int rc;
    if ((rc = offload_streams_begin_step(&st->io, out, st->work.ids, tokens, targets, z->N)))
        return rc;
    out->lr = gpt_lr_at(&cfg->optim, iteration);
    if ((rc = update_ahead_begin_step(&st->ahead))) return rc;

    if ((rc = gpt_stream_memset_zero(c, st->embed_g, z->PE * sizeof(float))))
        return rc;
    double phases[3]; /* (layer_work_micro_batches: the phase marks) */
    if ((rc = layer_work_micro_batches(&st->work, c, tokens, targets, &st->sh, forward_pass,
                                       backward_pass, st, out, phases)))
        return rc;

    if ((rc = layer_work_gather_norm_tables(&st->work, &st->sh)) ||
        (rc = layer_work_outcome(&st->work, &st->sh, out)))
        return rc;
    if (!out->skipped && (rc = optimizer(st, out))) return rc;
    if (out->skipped && (rc = restore_working_copies(st))) return rc;
    const int give_back = update_ahead_end_step(&st->ahead, out, gpt_clip_scale(&cfg->optim, out->grad_norm));
    /* Without clipping the layers were already updated with this step number. */
    if (!out->skipped || cfg->optim.clip <= 0) st->adam_step++;
    /* The copies are done by now (the compute waited for each); syncing their streams keeps
     * every buffer's owner obvious at the step boundary.  The host Adam goes on. */
    if ((rc = offload_streams_end_step(&st->io, out, phases))) return rc;
    /* --clip-speculate auto after clipped steps in a row: the second copies go (the copies of
     * the step are done; its host updates, which may write them, are waited for first) */
    if (give_back) {
        if ((rc = wait_all_adam(st))) return rc;
        update_ahead_give_back(&st->ahead, st->host_p, st->host_m, st->host_v);
    }
    return GPT_OK;
}

static int l2l_read_params(void *state, float *host_params)
{
    l2l_state *st = state;
    const l2l_layout *z = &st->z;
    int rc;
    if ((rc = wait_all_adam(st)) ||
        (rc = gpt_memcpy_d2h(st->io.compute, host_params, st->embed_p, z->PE * sizeof(float))) ||
        (rc = gpt_stream_sync(st->io.compute)))
        return rc;
    if (z->world > 1) return dp_gather_layers(st->work.comm, st->host_p, z->PL, z->L, host_params + z->PE);
    for (int k = 0; k < z->L; k++)
        memcpy(host_params + z->PE + (size_t)k * z->PL, state_of(st, k, 0).p, z->PL * sizeof(float));
    return GPT_OK;
}

static void l2l_chosen_plan(void *state, engine_plan *out)
{
    l2l_state *st = state;
    plan_of(&st->z, &st->sh, st->env.cfg, out);
    if (st->ahead.adaptive) out->host_while_ahead = update_ahead_bytes(st->ahead.count, st->ahead.block);
}

/* The step on machine m, in the order of l2l_step: one slot, so each
 * layer's copy in waits for the layer before to be done with the slot (and, in the forward,
 * for its host Adam of the step before: the host waits there); in the backward each layer's
 * grads go home before the next one's backward reuses the slot's grads; the host Adam after
 * the global norm (with clipping) or as each layer's grads arrive.  N ranks (the collectives
 * calibrated at that world): each layer's shard comes up and is all-gathered in the slot, its
 * grads are reduce-scattered there before its shard goes home, the embedding's all-reduced;
 * each rank updates its 1/N of every layer on the host (the ranks of one machine splitting it
 * when their pools take every core, as zero-offload's).  Micro-batches: each runs the whole
 * forward and backward again; from the second on, each layer's sum so far comes up from the
 * host to be added before its grads go home; the host Adam after the last.  Three steps
 * walked: the last is the steady one. */
static void l2l_predict(const engine_config *cfg, const machine_rates *m, engine_prediction *out)
{
    memset(out, 0, sizeof *out);
    l2l_layout z = layout_for(&cfg->shape, cfg->bf16, cfg->recompute);
    const int world = engine_world(cfg), M = engine_micro_batches(cfg);
    set_ranks(&z, world, 0, M);
    if (pred_no_collectives(cfg, m, out)) return;
    const int L = z.L, clip = cfg->optim.clip > 0;
    const double host_share = pred_host_share(cfg, m);
    double *adam_done = pred_arrays(out, (size_t)L + 1, 2);
    if (!adam_done) return;
    double *home = adam_done + L + 1;
    /* (bf16: the working copy moves up in half the bytes; grads come home in fp32) */
    const double per_float = (double)z.act / sizeof(float);
    const double in_ms = pred_h2d_ms(m, per_float * z.Sl), out_ms = pred_d2h_ms(m, (double)z.Sl);
    const double gather_ms = world > 1 ? pred_coll_ms(m->ag_ms, m->ag_gbs, per_float * z.SP) : 0;
    const double reduce_ms = world > 1 ? pred_coll_ms(m->rs_ms, m->rs_gbs, (double)z.SP) : 0;
    const double adam_ms = host_share * pred_host_adam_ms(m, (double)z.Sl);
    const double landing_ms = pred_h2d_ms(m, (double)z.Sl); /* (micro-batches: the sum so far, up) */
    pred_timeline t = {0};
    double start = 0, end = 0;
    for (int step = 0; step < 3; step++) {
        start = end;
        pred_step(&t, start);
        double host = start, c = start, in = start;
        for (int i = 0; i < M; i++) {
            const int last = i == M - 1;
            c = pred_run(&t, BUSY_COMPUTE, m->embed_fwd_ms, c);
            for (int k = 0; k < L; k++) {
                if (i == 0) host = pred_max(host, adam_done[k]);
                in = pred_run(&t, BUSY_H2D, in_ms, pred_max(host, c)); /* (c: the layer before is done) */
                if (world > 1) in = pred_run_coll(&t, m, PRED_ALL_GATHER, gather_ms, in);
                c = pred_run(&t, BUSY_COMPUTE, m->layer_fwd_ms, pred_max(c, in));
            }
            in = pred_run(&t, BUSY_H2D, in_ms, c); /* layer L-1 again, under the head */
            if (world > 1) in = pred_run_coll(&t, m, PRED_ALL_GATHER, gather_ms, in);
            c = pred_run(&t, BUSY_COMPUTE, m->head_ms, c);
            home[L] = start;
            for (int j = L - 1; j >= 0; j--) {
                c = pred_run(&t, BUSY_COMPUTE, pred_layer_bwd_ms(m, cfg, j),
                             pred_max(c, pred_max(in, home[j + 1])));
                double reduced = world > 1 ? pred_run_coll(&t, m, PRED_REDUCE_SCATTER, reduce_ms, c) : c;
                /* micro-batches after the first: the earlier ones' sum comes up and is added */
                if (i > 0) reduced = pred_add_earlier(&t, m, landing_ms, world, &c, home[j]);
                home[j] = pred_run(&t, BUSY_D2H, out_ms, reduced);
                if (!clip && last) adam_done[j] = pred_run(&t, BUSY_HOST_ADAM, adam_ms, home[j]);
                if (j > 0) {
                    in = pred_run(&t, BUSY_H2D, in_ms, c);
                    if (world > 1) in = pred_run_coll(&t, m, PRED_ALL_GATHER, gather_ms, pred_max(in, reduced));
                }
            }
            c = pred_run(&t, BUSY_COMPUTE, m->embed_bwd_ms, c);
        }
        if (world > 1) c = pred_run_coll(&t, m, PRED_ALL_REDUCE, pred_coll_ms(m->ar_ms, m->ar_gbs, (double)z.PE), c);
        host = pred_max(host, c); /* the norms read back */
        c = pred_run(&t, BUSY_COMPUTE, pred_gpu_adam_ms(m, (double)z.PE), c);
        if (clip)
            for (int k = 0; k < L; k++)
                adam_done[k] = pred_run(&t, BUSY_HOST_ADAM, adam_ms, pred_max(host, home[k]));
        end = c;
    }
    pred_done(out, &t, start, end);
    free(adam_done);
}

/* Its bound (step_bound.h): one layer slot (each layer's copy in waits for the compute before it, its compute for the copy), and a host Adam that waits for the norm under --clip-grad. */
static void l2l_bound(const engine_config *cfg, const double busy[BUSY_KINDS], engine_bound *out)
{
    step_bound_schedule(cfg, busy, 1, 1, out);
}

const engine_vtbl engine_l2l = {
    .name = "l2l",
    .alias = NULL,
    .description = "layer to layer: one layer on the GPU at a time, weights and Adam on the host",
    .uses_window = 0,
    .supports_bf16 = 1,
    .options = ENGINE_OPT_RANKS | ENGINE_OPT_ACCUM,
    .bound = l2l_bound,
    .plan = l2l_plan,
    .init = l2l_init,
    .chosen_plan = l2l_chosen_plan,
    .step = l2l_step,
    .free = l2l_free,
    .read_params = l2l_read_params,
    .predict = l2l_predict,
    /* (issue 48's hooks: its one layer slot, for its bound) */
    .takes = (const char *const[]){"clip-speculate", NULL},
};
