/*
 * zero-offload — ZeRO-2 Offload (Ren et al., ATC'21), done exactly: every parameter on the
 * GPU, gradients, master parameters and Adam on the host; --dpu adds the paper's delayed
 * parameter update.
 *
 * Where things live (fp32, nothing on disk; with --dtype bf16 the GPU's parameters, inputs and
 * activations are bf16 — the working copy every op reads — and the host keeps a bf16 copy of
 * its shard beside the fp32 masters, written by the host Adam, which the copy-back moves up
 * in half the bytes; grads, masters and Adam state stay fp32, as megatron-lm --dtype bf16
 * keeps them; the micro-batches' gradient sums are fp32 adds (gpt_add_f32)):
 *   GPU   all parameters in the canonical layout [embed | layer 0 | ...] (model.h), the copy
 *         every op reads; the embed block's gradients (the tied embedding's grads accumulate
 *         from the head (its forward, chunk by chunk while the logits exist) and from the
 *         embedding backward at the end of backward, so they stay on the GPU throughout); nbuf = min(2, G) gradient
 *         buckets of BL whole layer blocks each; the checkpointed inputs x[0..L]; one layer's
 *         activations as --recompute keeps them (layer_work.h); backward scratch, head activations,
 *         residual gradient, ids, the L+1 squared block norms
 *   host  pinned: fp32 master parameters, gradients (two copies with --dpu, see below), the
 *         losses and norms read back; ordinary: Adam m and v
 *
 * Buckets: BL = min(L, max(1, ceil(E / P_L))) layers per bucket, E = 5e7 elements (the
 * artifact's reduce_bucket_size) unless engine_config.reduce_bucket_size says otherwise (read
 * by plan and init alike; tests force one layer per bucket at small shapes).  Group g
 * holds layers [max(0, hi - BL + 1), hi], hi = L - 1 - g BL (backward fills them from the
 * top), G = ceil(L / BL) groups per backward, group g in bucket g mod nbuf.
 *
 * Block k is the embed block for k = 0 and layer k - 1 otherwise.  One iteration, stream by
 * stream:
 *   compute   ids; zero the embed grads (once their last copy home is done); embed fwd,
 *             layers 0..L-1, head, each block first waiting for its updated params (below);
 *             read back the losses; head bwd; layers L-1..0 bwd with recompute (not L-1:
 *             its forward's activations are still there), each into
 *             its bucket (zeroed before the group's top layer, once the bucket's previous
 *             copy has left) and its squared norm right after; embed bwd and its norm; read
 *             back the norms
 *   d2h       each bucket, once its lowest layer's backward is done, to the pinned host
 *             grads; then the embed grads
 *   host Adam after backward: global norm, clip scale, then one job per block in the order
 *             embed, layer 0, 1, ..., each starting once its grads are home (events); with
 *             --clip-grad 0 nothing waits for the norm, so each bucket's layers are queued
 *             as soon as its copy is issued and update under the backward below them
 *   h2d       the copy-back, tile by tile (a tile is one block), issued during the NEXT
 *             step's forward: before block k's forward the host waits for k's Adam ticket
 *             and queues k's copy, on which the compute stream waits.  So copying block k
 *             overlaps the update of block k+1 and the forward of block k-1, in the order
 *             the forward needs them.  The first copy of a step waits for the previous
 *             backward to be done with the GPU params.
 * The host waits for the compute stream after forward and backward (phase timers, losses
 * and norms) and for the d2h stream at the end of the step (its busy spans).
 *
 * --dpu (delayed parameter update, the paper's section 5).  The first D = ZO_DPU_WARMUP
 * (5) steps run as above.  From step D + 1 on, step i's update is not submitted after its
 * backward: step i + 1's forward submits it block by block, right after it has copied the
 * previous update of that block back to the GPU, so the host Adam of step i overlaps step
 * i + 1's forward and backward and step i + 1 computes its gradients on the parameters
 * before step i's update (one step of lag: step i >= D + 2 uses theta_{i-2}, steps up to
 * D + 1 equal the baseline).  Why it is race-free:
 *   - GPU params: they are only written by the copy-back, issued in the next forward after
 *     the previous backward is done with them (h2d waits for that event), block k before
 *     block k's forward reads it; there is no second GPU copy.
 *   - host params: the job updating block k waits (its event) for the copy of the previous
 *     update of block k out of the host params; that copy's h2d stream first waited for the
 *     previous step's grads to be home, so the same event also says the grads are there.
 *   - host grads: double-buffered, step i writes copy i mod 2.  Step i's update reads copy
 *     i mod 2 during step i + 1; step i + 2, which overwrites it, first waits in its
 *     forward for every ticket of that update (it must, to copy its result back).
 * read_params applies a pending delayed update (so it returns every update so far); the
 * step after it then computes on those parameters.
 *
 * Skipped steps: a non-finite global norm skips the whole update, as the baseline does
 * (with --clip-grad 0 and no --dpu the layers were already updated during the backward;
 * only the embed block is skipped then, as in stronghold).
 *
 * Artifact differences: the artifact used PyTorch's AdamW on the CPU and had no DPU; ours
 * is the vectorised cpu_adam pool, bit-identical to the baseline's AdamW.
 *
 * N ranks (ZeRO-2, as DeepSpeed runs it): every GPU holds every parameter (each block padded
 * to N shards, runtime/dp.h), each rank's host only its 1/N shard of every block (master,
 * grads, m, v).  Replicated: the GPU parameters, the activations.  Sharded: the host state.
 *   collectives  each bucket, once its lowest layer's backward is done: every layer of it
 *                reduce-scattered in place (rank r's shard lands at r·S of the layer's
 *                slice) and the shard's squared norm taken; the embed block the same after
 *                the embedding's backward; before block k's forward (next step): the shard
 *                just copied up, all-gathered in place
 *   d2h          each layer's reduced shard (not the whole bucket: 1/N of the bytes)
 *   host Adam    this rank's shard of each block (1/N of the model, with the cores this
 *                rank has: on one machine the ranks split the host's bandwidth, not repeat
 *                the work)
 *   h2d          this rank's updated shard of block k; the gather completes the block
 * The global norm is the canonical (block, shard) one: each rank's L+1 shard norms are
 * gathered on the host after the backward.  --dpu on N ranks: the delayed update of block k
 * is queued once this rank's shard of k has been copied up and all-gathered (params_in[k] is
 * recorded on the collective stream after the gather, which itself waited for the copy), so
 * the race-freedom argument above holds shard by shard.
 */
#include "engine.h"
#include "runtime/predict.h"

#include "runtime/cpu_adam.h"
#include "runtime/dp.h"
#include "runtime/layer_work.h"
#include "runtime/offload_streams.h"
#include "runtime/spans.h"
#include "runtime/timer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Steps that update before the next forward, before --dpu starts lagging. */
enum { ZO_DPU_WARMUP = 5 };
/* Elements per gradient bucket unless engine_config.reduce_bucket_size says otherwise. */
static const uint64_t ZO_BUCKET_ELEMS = 50000000ull;

typedef struct zo_layout {
    int L;
    int BL;      /* layers per bucket */
    int groups;  /* buckets filled per backward: ceil(L / BL) */
    int nbuf;    /* bucket buffers on the GPU: min(2, groups) */
    int dpu;
    gpt_recompute rec; /* --recompute: what each layer's activations keep on the GPU */
    int M;            /* micro-batches per step */
    size_t PL, PE, P; /* floats of a layer block, the embed block, the model */
    size_t N, NC;     /* tokens per step; floats of one (N, C) activation */
    /* N ranks (runtime/dp.h): shards of Se / Sl floats of the embed / a layer block; the GPU
     * keeps each block padded to one shard per rank (Ppad floats in all), the host this
     * rank's shards (Pshard).  One rank: Se = PE, Sl = PL, Ppad = Pshard = P. */
    int world, rank;
    size_t Se, Sl, Ppad, Pshard;
    gpt_dtype dt;     /* what the ops read (--dtype): fp32, or bf16 with fp32 masters */
    size_t act;       /* ... its bytes per element */
} zo_layout;

/* The bucket size the config asks for, else the default. */
static uint64_t bucket_elems(const engine_config *cfg)
{
    return cfg->reduce_bucket_size > 0 ? cfg->reduce_bucket_size : ZO_BUCKET_ELEMS;
}

static zo_layout layout_for(const engine_config *cfg)
{
    const gpt_shape *sh = &cfg->shape;
    zo_layout z;
    z.L = sh->layers;
    z.PL = gpt_layer_layout_of(sh).total;
    z.PE = gpt_embed_layout_of(sh).total;
    z.P = (size_t)gpt_param_count(sh);
    z.N = (size_t)sh->batch * sh->seq;
    z.NC = z.N * (size_t)sh->hidden;
    z.rec = cfg->recompute;
    z.dpu = cfg->dpu;
    z.M = engine_micro_batches(cfg);
    uint64_t bl = (bucket_elems(cfg) + z.PL - 1) / z.PL;
    if (bl < 1) bl = 1;
    if (bl > (uint64_t)z.L) bl = (uint64_t)z.L;
    z.BL = (int)bl;
    z.groups = (z.L + z.BL - 1) / z.BL;
    z.nbuf = z.groups < 2 ? z.groups : 2;
    z.world = engine_world(cfg);
    z.rank = 0;
    z.Se = dp_shard_len(z.PE, z.world);
    z.Sl = dp_shard_len(z.PL, z.world);
    z.Ppad = (size_t)z.world * (z.Se + (size_t)z.L * z.Sl);
    z.Pshard = z.Se + (size_t)z.L * z.Sl;
    z.dt = cfg->bf16 ? GPT_BF16 : GPT_F32;
    z.act = gpt_dtype_size(z.dt);
    return z;
}

/* Bytes of every allocation; plan and init share them. */
typedef struct zo_bytes {
    size_t params, embed_grads, buckets, inputs;
    size_t host_work; /* bf16: this rank's shard's working copy (0 in fp32) */
    uint64_t work_gpu, work_host; /* layer_work: activations (--recompute), ... */
    size_t host_params, host_grads, host_mv;
    size_t staging; /* N ranks: one whole block, for initialisation (given back after) */
    int host_grad_copies;
} zo_bytes;

static zo_bytes bytes_for(const zo_layout *z, const gpt_shape *sh)
{
    const size_t f = sizeof(float);
    zo_bytes b;
    b.params = gpt_act_bytes(z->Ppad, z->dt);
    b.embed_grads = (size_t)z->world * z->Se * f;
    b.buckets = (size_t)z->nbuf * z->BL * z->world * z->Sl * f;
    b.inputs = gpt_act_bytes((size_t)(z->L + 1) * z->NC, z->dt);
    b.host_work = z->dt == GPT_BF16 ? gpt_act_bytes(z->Pshard, z->dt) : 0;
    b.work_gpu = layer_work_gpu_bytes(sh, z->rec, z->world, z->M, z->dt);
    b.work_host = layer_work_host_bytes(sh, z->world, z->M);
    b.host_params = b.host_grads = b.host_mv = z->Pshard * f;
    b.staging = z->world > 1 ? (z->PE > z->PL ? z->PE : z->PL) * f : 0;
    b.host_grad_copies = z->dpu ? 2 : 1;
    return b;
}

static void plan_of(const zo_layout *z, const gpt_shape *sh, const engine_config *cfg, engine_plan *out)
{
    zo_bytes b = bytes_for(z, sh);
    *out = (engine_plan){0};
    out->gpu_bytes = (uint64_t)b.params + b.embed_grads + b.buckets + b.inputs + b.work_gpu;
    out->host_bytes = (uint64_t)b.host_params + b.host_work + (uint64_t)b.host_grad_copies * b.host_grads +
                      2 * (uint64_t)b.host_mv + b.work_host + b.staging;
    out->disk_bytes = 0;
    engine_plan_add_comm(out, cfg, 1); /* (layer_work's gradients group, on N GPU ranks) */
}

static void zero_offload_plan(const engine_config *cfg, engine_plan *out)
{
    zo_layout z = layout_for(cfg);
    plan_of(&z, &cfg->shape, cfg, out);
}

/* ---- state ------------------------------------------------------------------------------ */

/* An update whose gradients are on the host but whose jobs are not submitted yet (--dpu). */
typedef struct zo_update {
    int active;
    int t;          /* Adam step */
    float lr, scale;
    int grad_copy;  /* which host grads copy holds its gradients */
} zo_update;

typedef struct zo_state {
    engine_env env;
    gpt_shape sh;
    zo_layout z;
    offload_streams io; /* compute, h2d and d2h streams, host Adam pool, busy spans */
    engine_allocs mem;

    /* GPU */
    void *params;    /* every block, as the ops read them (bf16: the working copy) */
    float *embed_g, *buckets;
    void *inputs;
    layer_work work; /* activations, scratch, head, ids, norms (+ pinned read-backs) */
    /* host */
    float *host_p, *host_g[2], *host_m, *host_v; /* this rank's shards (all on one rank) */
    uint16_t *host_w;        /* bf16: the shards' working copy (what the copy-back moves) */
    gpt_event *shard_up;     /* N ranks: h2d: this rank's shard of a block is on the GPU */

    gpt_event **params_in;   /* L+1: h2d: block k's copy-back is on the GPU */
    gpt_event **group_home;  /* groups: d2h: group g's grads are on the host */
    gpt_event **bucket_full; /* nbuf: compute: the bucket's group has run backward */
    gpt_event **bucket_free; /* nbuf: d2h: the bucket's last copy home is done */
    gpt_event *embed_ready;  /* compute: the embed grads are final */
    gpt_event *embed_home;   /* d2h: the embed grads are on the host (the step's last copy) */
    gpt_event *bwd_done;     /* compute: the backward no longer reads the GPU params */
    /* L+1: block k's host update whose result is not on the GPU yet (0: the GPU is current) */
    uint64_t *ticket;
    zo_update pending;
    int h2d_ordered;         /* this step's h2d stream already waits for the previous step */
    int adam_step, steps;
} zo_state;

/* Block k on the GPU (padded to one shard per rank), and this rank's shard of it on the host. */
static size_t block_off(const zo_state *st, int k)
{
    return k == 0 ? 0 : (size_t)st->z.world * (st->z.Se + (size_t)(k - 1) * st->z.Sl);
}
static size_t host_off(const zo_state *st, int k)
{
    return k == 0 ? 0 : st->z.Se + (size_t)(k - 1) * st->z.Sl;
}
static size_t block_len(const zo_state *st, int k) { return k == 0 ? st->z.PE : st->z.PL; }
static size_t shard_len(const zo_state *st, int k) { return k == 0 ? st->z.Se : st->z.Sl; }
/* Real floats of this rank's shard of block k. */
static size_t shard_real(const zo_state *st, int k)
{
    return dp_shard_real(block_len(st, k), shard_len(st, k), st->z.rank);
}
static size_t block_decay(const zo_state *st, int k)
{
    return k == 0 ? gpt_embed_layout_of(&st->sh).n_decay : gpt_layer_layout_of(&st->sh).n_decay;
}
/* The group of layer j, and its layers [lo, hi]. */
static int group_of(const zo_state *st, int j) { return (st->z.L - 1 - j) / st->z.BL; }
static int group_hi(const zo_state *st, int g) { return st->z.L - 1 - g * st->z.BL; }
static int group_lo(const zo_state *st, int g)
{
    const int lo = group_hi(st, g) - st->z.BL + 1;
    return lo > 0 ? lo : 0;
}
static float *bucket_of(zo_state *st, int g)
{
    return st->buckets + (size_t)(g % st->z.nbuf) * st->z.BL * st->z.world * st->z.Sl;
}
static void *input_of(zo_state *st, int l) { return (char *)st->inputs + (size_t)l * st->z.NC * st->z.act; }
/* Block k on the GPU, and this rank's shard's place in it. */
static void *gpu_block(zo_state *st, int k) { return (char *)st->params + block_off(st, k) * st->z.act; }
static void *gpu_shard(zo_state *st, int k)
{
    return (char *)gpu_block(st, k) + (size_t)st->z.rank * shard_len(st, k) * st->z.act;
}
/* What the copy-back of block k moves up: this rank's shard of its working copy (bf16) or
 * of its masters. */
static const void *copy_back_source(const zo_state *st, int k)
{
    return st->host_w ? (const void *)(st->host_w + host_off(st, k)) : (const void *)(st->host_p + host_off(st, k));
}

static int alloc_in(zo_state *st, void **ptr, size_t bytes, mem_where where, const char *what)
{
    return engine_alloc(&st->mem, where, ptr, bytes, what);
}

static int wait_all_adam(zo_state *st)
{
    int rc = GPT_OK;
    for (int k = 0; st->ticket && k <= st->z.L; k++) {
        int r = st->ticket[k] ? cpu_adam_wait(st->io.host_adam, st->ticket[k]) : GPT_OK;
        if (!rc) rc = r;
    }
    return rc;
}

static void zero_offload_free(void *state)
{
    zo_state *st = state;
    if (!st) return;
    if (st->io.host_adam) (void)wait_all_adam(st);
    /* Waits for the host Adam pool and drains the streams: after a failed step, queued
     * work may still use the buffers freed below. */
    offload_streams_close(&st->io);
    layer_work_close_comm(&st->work);
    gpt_event_destroy(st->shard_up);
    event_array_destroy(st->params_in, st->z.L + 1);
    event_array_destroy(st->group_home, st->z.groups);
    event_array_destroy(st->bucket_full, st->z.nbuf);
    event_array_destroy(st->bucket_free, st->z.nbuf);
    gpt_event_destroy(st->embed_ready);
    gpt_event_destroy(st->embed_home);
    gpt_event_destroy(st->bwd_done);
    free(st->ticket);
    engine_free_all(&st->mem);
    free(st);
}

/* Parameters initialised on the host (the master copy), then copied to the GPU. */
static int init_params(zo_state *st, float *staging)
{
    const gpt_shape *sh = &st->sh;
    const zo_layout *z = &st->z;
    const uint64_t seed = st->env.cfg->seed;
    if (z->world > 1) {
        /* Each block whole on the GPU (padding zero), this rank's shard of it on the host
         * (whose padding, m and v are the allocation's zeros). */
        int rc = gpt_stream_memset_zero(st->io.compute, st->params, gpt_act_bytes(z->Ppad, z->dt));
        for (int k = 0; rc == 0 && k <= z->L; k++) {
            if (k == 0) engine_init_embed(&st->env, staging, sh, seed);
            else engine_init_layer(&st->env, staging, sh, k - 1, seed);
            memcpy(st->host_p + host_off(st, k), staging + (size_t)z->rank * shard_len(st, k),
                   shard_real(st, k) * sizeof(float));
            if (st->host_w) cpu_round_bf16_in_place(staging, block_len(st, k)); /* (bf16: the block as the GPU keeps it) */
            rc = gpt_memcpy_h2d(st->io.compute, gpu_block(st, k), staging, block_len(st, k) * z->act);
            if (rc == 0) rc = gpt_stream_sync(st->io.compute);
        }
        if (rc == 0 && st->host_w) cpu_round_bf16(st->host_w, st->host_p, z->Pshard);
        return rc;
    }
    engine_init_embed(&st->env, st->host_p, sh, seed);
    for (int l = 0; l < z->L; l++)
        engine_init_layer(&st->env, st->host_p + z->PE + (size_t)l * z->PL, sh, l, seed);
    /* (m and v: the allocation's zeros; bf16: the working copy, rounded as the backends do) */
    if (st->host_w) cpu_round_bf16(st->host_w, st->host_p, z->P);
    int rc = gpt_memcpy_h2d(st->io.compute, st->params, copy_back_source(st, 0), z->P * z->act);
    return rc ? rc : gpt_stream_sync(st->io.compute);
}

static int zero_offload_init(const engine_env *env, void **state)
{
    *state = NULL;
    int rc = engine_init_check(&engine_zero_offload, env);
    if (rc) return rc;
    zo_state *st = calloc(1, sizeof *st);
    if (!st) return GPT_ERR_OOM;
    st->env = *env;
    engine_allocs_init(&st->mem, env->gpu, env->host, env->be);
    st->sh = env->cfg->shape;
    st->z = layout_for(env->cfg);
    st->z.rank = env->rank;
    *state = st;
    const gpt_shape *sh = &st->sh;
    const zo_layout *z = &st->z;
    zo_bytes b = bytes_for(z, sh);
    /* Spans per step: compute 2L + 4, h2d L + 1, d2h groups + 1; N ranks: collectives
     * groups + L + 2. */
    if ((rc = offload_streams_open(&st->io, env->be, env->cfg, 6 * z->L + 20))) return rc;

    if ((rc = alloc_in(st, &st->params, b.params, MEM_GPU, "parameters")) ||
        (rc = alloc_in(st, (void **)&st->embed_g, b.embed_grads, MEM_GPU, "embedding gradients")) ||
        (rc = alloc_in(st, (void **)&st->buckets, b.buckets, MEM_GPU, "gradient buckets")) ||
        (rc = alloc_in(st, &st->inputs, b.inputs, MEM_GPU, "checkpointed layer inputs")) ||
        (rc = layer_work_alloc(&st->work, &st->mem, sh, z->rec, z->world, z->M, z->dt)) ||
        (rc = layer_work_open_comm(&st->work, env->be, env->rank, env->world, env->dog)) ||
        /* (bf16: the copy-back reads the working copy, so the masters need no pinning) */
        (rc = alloc_in(st, (void **)&st->host_p, b.host_params, b.host_work ? MEM_HOST : MEM_PINNED,
                       "master parameters")) ||
        (b.host_work && (rc = alloc_in(st, (void **)&st->host_w, b.host_work, MEM_PINNED,
                                       "the masters' working copy (bf16)"))) ||
        (rc = alloc_in(st, (void **)&st->host_g[0], b.host_grads, MEM_PINNED, "gradients")) ||
        (b.host_grad_copies > 1 &&
         (rc = alloc_in(st, (void **)&st->host_g[1], b.host_grads, MEM_PINNED,
                        "gradients (second copy, --dpu)"))) ||
        (rc = alloc_in(st, (void **)&st->host_m, b.host_mv, MEM_HOST, "Adam m")) ||
        (rc = alloc_in(st, (void **)&st->host_v, b.host_mv, MEM_HOST, "Adam v")))
        return rc;

    st->ticket = calloc((size_t)z->L + 1, sizeof *st->ticket);
    if (!st->ticket) return GPT_ERR_OOM;
    if (z->world > 1 && (rc = gpt_event_create(env->be, &st->shard_up))) return rc;
    if ((rc = event_array_create(env->be, &st->params_in, z->L + 1)) ||
        (rc = event_array_create(env->be, &st->group_home, z->groups)) ||
        (rc = event_array_create(env->be, &st->bucket_full, z->nbuf)) ||
        (rc = event_array_create(env->be, &st->bucket_free, z->nbuf)) ||
        (rc = gpt_event_create(env->be, &st->embed_ready)) ||
        (rc = gpt_event_create(env->be, &st->embed_home)) ||
        (rc = gpt_event_create(env->be, &st->bwd_done)))
        return rc;

    engine_plan p;
    plan_of(z, sh, env->cfg, &p);
    char g[32], h[32];
    format_bytes((double)p.gpu_bytes, g, sizeof g);
    format_bytes((double)p.host_bytes, h, sizeof h);
    engine_note(env, "zero-offload plan: GPU %s (%d bucket%s of %d layer%s, %d per backward), "
                     "host %s; host Adam: %s%s",
                g, z->nbuf, z->nbuf > 1 ? "s" : "", z->BL, z->BL > 1 ? "s" : "", z->groups, h,
                cpu_adam_isa(st->io.host_adam),
                z->dpu ? "; --dpu: updates lag one step after 5 warm-up steps" : "");
    if (z->world > 1)
        engine_note(env, "zero-offload on %d ranks (ZeRO-2): each bucket's gradients reduce-scattered on the "
                         "GPU, this rank's shard home, its host Adam on 1/%d of the model, the shard "
                         "copied up and all-gathered", z->world, z->world);
    void *staging = NULL;
    if (b.staging && (rc = alloc_in(st, &staging, b.staging, MEM_HOST, "initialisation staging")))
        return rc;
    rc = init_params(st, staging);
    if (staging) engine_free_last(&st->mem); /* the last allocation */
    return rc;
}

static void zero_offload_chosen_plan(void *state, engine_plan *out)
{
    zo_state *st = state;
    plan_of(&st->z, &st->sh, st->env.cfg, out);
}

/* ---- one step -------------------------------------------------------------------------------- */

/* Queue block k's part of update u (its grads in host grads copy u->grad_copy). */
static int submit_block(zo_state *st, int k, const zo_update *u, gpt_event *after,
                        step_result *out)
{
    const size_t off = host_off(st, k), real = shard_real(st, k);
    /* this rank's shard [r S, r S + real) of the block against its decay range [0, n_decay) */
    const size_t lo = (size_t)st->z.rank * shard_len(st, k), decay = block_decay(st, k);
    const size_t n_decay = decay <= lo ? 0 : decay - lo < real ? decay - lo : real;
    cpu_adam_job job = {
        .params = st->host_p + off, .grads = st->host_g[u->grad_copy] + off,
        .m = st->host_m + off, .v = st->host_v + off, .n = real,
        .n_decay = n_decay, .optim = st->env.cfg->optim, .lr = u->lr, .t = u->t,
        .grad_scale = u->scale, .after = after, .params_bf16 = st->host_w ? st->host_w + off : NULL,
    };
    out->host_adam_params += (double)real;
    return cpu_adam_submit(st->io.host_adam, &job, &st->ticket[k]);
}

/* Before block k's forward: bring its last host update to the GPU (waiting for that
 * update first), and, with a delayed update pending, queue the next update of block k to
 * start once that copy has left the host params. */
static int bring_in(zo_state *st, int k, step_result *out)
{
    /* Only the step's first micro-batch: every micro-batch of a step computes on the same
     * parameters.  (The tickets a later one would find are --dpu's update of this very
     * step, queued by the first: bringing it in would make the step's micro-batches see two
     * parameter versions, and serialise their forward with the host Adam.) */
    if (st->work.micro > 0) return GPT_OK;
    if (!st->ticket[k] && !st->pending.active) return GPT_OK;
    int rc, span;
    if (!st->h2d_ordered) {
        /* The previous backward must be done reading the GPU params, and (for the delayed
         * update's jobs, which wait on this stream's events) its grads must be home. */
        if ((rc = gpt_stream_wait_event(st->io.h2d, st->bwd_done)) ||
            (rc = gpt_stream_wait_event(st->io.h2d, st->embed_home)))
            return rc;
        st->h2d_ordered = 1;
    }
    if (st->ticket[k]) {
        /* this rank's shard (all of the block on one rank) */
        const size_t bytes = shard_real(st, k) * st->z.act;
        void *dst = gpu_shard(st, k);
        if ((rc = cpu_adam_wait(st->io.host_adam, st->ticket[k]))) return rc;
        st->ticket[k] = 0;
        if ((rc = span_begin(&st->io.spans, st->io.h2d, BUSY_H2D, &span)) ||
            (rc = gpt_memcpy_h2d(st->io.h2d, dst, copy_back_source(st, k), bytes)) ||
            (rc = span_end(&st->io.spans, st->io.h2d, span)))
            return rc;
        out->bytes_h2d += (double)bytes;
        if (st->z.world > 1) {
            /* ... and every rank's updated shard to everyone, in place */
            gpt_stream *cs = coll_stream(st->work.comm);
            if ((rc = gpt_event_record(st->shard_up, st->io.h2d)) ||
                (rc = gpt_stream_wait_event(cs, st->shard_up)) ||
                (rc = span_begin(&st->io.spans, cs, BUSY_COMM, &span)) ||
                (rc = coll_all_gather(st->work.comm, gpu_block(st, k), dst, shard_len(st, k) * st->z.act)) ||
                (rc = span_end(&st->io.spans, cs, span)) ||
                (rc = gpt_event_record(st->params_in[k], cs)) ||
                (rc = gpt_stream_wait_event(st->io.compute, st->params_in[k])))
                return rc;
            goto queued;
        }
    }
    if ((rc = gpt_event_record(st->params_in[k], st->io.h2d)) ||
        (rc = gpt_stream_wait_event(st->io.compute, st->params_in[k])))
        return rc;
queued:
    if (st->pending.active && (rc = submit_block(st, k, &st->pending, st->params_in[k], out)))
        return rc;
    return GPT_OK;
}

static int forward(zo_state *st, step_result *out)
{
    const gpt_shape *sh = &st->sh;
    const zo_layout *z = &st->z;
    gpt_stream *c = st->io.compute;
    int rc, span;
    st->h2d_ordered = 0;
    if ((rc = bring_in(st, 0, out)) || (rc = span_begin(&st->io.spans, c, BUSY_COMPUTE, &span)))
        return rc;
    gpt_embed_forward(c, sh, gpu_block(st, 0), st->work.ids, input_of(st, 0));
    if ((rc = span_end(&st->io.spans, c, span))) return rc;
    for (int l = 0; l < z->L; l++) {
        if ((rc = bring_in(st, 1 + l, out)) ||
            (rc = span_begin(&st->io.spans, c, BUSY_COMPUTE, &span)))
            return rc;
        gpt_layer_acts a = layer_work_acts(&st->work, sh, l);
        gpt_layer_forward(c, sh, gpu_block(st, 1 + l), input_of(st, l),
                          input_of(st, l + 1), &a);
        if ((rc = span_end(&st->io.spans, c, span))) return rc;
    }
    /* Every block of the delayed update is queued now. */
    st->pending.active = 0;
    return layer_work_head_forward(&st->work, &st->io.spans, c, sh, gpu_block(st, 0), st->embed_g,
                                   input_of(st, z->L));
}

/* N ranks: group g's bucket, once its lowest layer's backward is done, reduce-scattered in
 * place layer by layer (each rank's shard of each layer lands at its place r·Sl in the
 * layer's slice), the shard norms taken there; then each layer's shard goes home. */
static int bucket_home_sharded(zo_state *st, int g, int grad_copy, step_result *out)
{
    const zo_layout *z = &st->z;
    const int lo = group_lo(st, g), hi = group_hi(st, g), b = g % z->nbuf;
    gpt_stream *cs = coll_stream(st->work.comm);
    int rc, span;
    if ((rc = gpt_event_record(st->bucket_full[b], st->io.compute)) ||
        (rc = gpt_stream_wait_event(cs, st->bucket_full[b])) ||
        (rc = span_begin(&st->io.spans, cs, BUSY_COMM, &span)))
        return rc;
    for (int l = lo; l <= hi; l++) {
        float *slice = bucket_of(st, g) + (size_t)(l - lo) * z->world * z->Sl;
        float *mine = slice + (size_t)z->rank * z->Sl;
        /* micro-batches after the first add the earlier ones' sum (runtime/layer_work.h) */
        if ((rc = coll_reduce_scatter_sum(st->work.comm, mine, slice, z->Sl)) ||
            (rc = layer_work_add_earlier(&st->work, &st->io.spans, cs, mine,
                                         st->host_g[grad_copy] + host_off(st, 1 + l),
                                         shard_real(st, 1 + l), st->group_home[g], out)))
            return rc;
        if (layer_work_last_micro(&st->work))
            dp_shard_norm(cs, mine, z->PL, z->world, z->rank, st->work.dev_norms + 1 + l);
    }
    if ((rc = span_end(&st->io.spans, cs, span)) || (rc = gpt_event_record(st->bucket_full[b], cs)) ||
        (rc = gpt_stream_wait_event(st->io.d2h, st->bucket_full[b])) ||
        (rc = span_begin(&st->io.spans, st->io.d2h, BUSY_D2H, &span)))
        return rc;
    for (int l = lo; l <= hi; l++) {
        const float *mine = bucket_of(st, g) + (size_t)(l - lo) * z->world * z->Sl + (size_t)z->rank * z->Sl;
        const size_t bytes = shard_real(st, 1 + l) * sizeof(float);
        if ((rc = gpt_memcpy_d2h(st->io.d2h, st->host_g[grad_copy] + host_off(st, 1 + l), mine, bytes)))
            return rc;
        out->bytes_d2h += (double)bytes;
    }
    if ((rc = span_end(&st->io.spans, st->io.d2h, span)) ||
        (rc = gpt_event_record(st->bucket_free[b], st->io.d2h)) ||
        (rc = gpt_event_record(st->group_home[g], st->io.d2h)))
        return rc;
    return GPT_OK;
}

/* Send group g's bucket home once its lowest layer's backward is done. */
static int bucket_home(zo_state *st, int g, int grad_copy, step_result *out)
{
    if (st->z.world > 1) return bucket_home_sharded(st, g, grad_copy, out);
    const int lo = group_lo(st, g), b = g % st->z.nbuf;
    const size_t bytes = (size_t)(group_hi(st, g) - lo + 1) * st->z.PL * sizeof(float);
    int rc, span;
    if ((rc = gpt_event_record(st->bucket_full[b], st->io.compute)) ||
        (rc = gpt_stream_wait_event(st->io.d2h, st->bucket_full[b])) ||
        (rc = span_begin(&st->io.spans, st->io.d2h, BUSY_D2H, &span)) ||
        (rc = gpt_memcpy_d2h(st->io.d2h, st->host_g[grad_copy] + block_off(st, 1 + lo),
                             bucket_of(st, g), bytes)) ||
        (rc = span_end(&st->io.spans, st->io.d2h, span)) ||
        (rc = gpt_event_record(st->bucket_free[b], st->io.d2h)) ||
        (rc = gpt_event_record(st->group_home[g], st->io.d2h)))
        return rc;
    out->bytes_d2h += (double)bytes;
    return GPT_OK;
}

/* early: the update u of the layers is queued as each bucket's copy is issued (no clipping:
 * nothing waits for the global norm). */
static int backward(zo_state *st, int grad_copy, const zo_update *early, step_result *out)
{
    const gpt_shape *sh = &st->sh;
    const zo_layout *z = &st->z;
    gpt_stream *c = st->io.compute;
    const int last = layer_work_last_micro(&st->work);
    int rc, span;
    if ((rc = layer_work_head_backward(&st->work, &st->io.spans, c, sh, gpu_block(st, 0), st->embed_g,
                                       input_of(st, z->L))))
        return rc;
    for (int j = z->L - 1; j >= 0; j--) {
        const int g = group_of(st, j), lo = group_lo(st, g);
        float *bucket = bucket_of(st, g);
        const size_t group_bytes = (size_t)(j - lo + 1) * z->world * z->Sl * sizeof(float);
        if (j == group_hi(st, g) &&
            ((rc = gpt_stream_wait_event(c, st->bucket_free[g % z->nbuf])) ||
             (rc = gpt_stream_memset_zero(c, bucket, group_bytes))))
            return rc;
        float *grads = bucket + (size_t)(j - lo) * z->world * z->Sl;
        gpt_layer_acts a = layer_work_backward_acts(&st->work, sh, j);
        if ((rc = span_begin(&st->io.spans, c, BUSY_COMPUTE, &span))) return rc;
        gpt_layer_backward(c, sh, gpu_block(st, 1 + j), grads, input_of(st, j),
                           st->work.dres, &a, &st->work.scratch, GPT_GRAD_ACCUMULATE);
        if ((rc = span_end(&st->io.spans, c, span))) return rc;
        /* (N ranks: each shard's norm once it is reduced, in bucket_home; one rank: here, after
         * the earlier micro-batches' sum is added) */
        if (z->world == 1 &&
            (rc = layer_work_add_earlier(&st->work, &st->io.spans, c, grads,
                                         st->host_g[grad_copy] + host_off(st, 1 + j), z->PL,
                                         st->group_home[g], out)))
            return rc;
        if (z->world == 1 && last) gpt_norm_squared(c, st->work.dev_norms + 1 + j, grads, z->PL);
        if (j != lo) continue;
        if ((rc = bucket_home(st, g, grad_copy, out))) return rc;
        for (int l = lo; early && last && l <= group_hi(st, g); l++)
            if ((rc = submit_block(st, 1 + l, early, st->group_home[g], out))) return rc;
    }
    if ((rc = span_begin(&st->io.spans, c, BUSY_COMPUTE, &span))) return rc;
    layer_work_embed_backward(&st->work, c, sh, st->embed_g);
    if (z->world == 1 && last) gpt_norm_squared(c, st->work.dev_norms, st->embed_g, z->PE);
    if ((rc = span_end(&st->io.spans, c, span)) || (rc = gpt_event_record(st->bwd_done, c)) ||
        (rc = gpt_event_record(st->embed_ready, c)))
        return rc;
    /* the embedding's grads accumulate in place over the micro-batches: they go once */
    if (!last) return GPT_OK;
    float *embed_mine = st->embed_g + (size_t)z->rank * z->Se;
    if (z->world > 1) {
        /* the embedding's gradient reduce-scattered in place, its shard norm */
        gpt_stream *cs = coll_stream(st->work.comm);
        if ((rc = gpt_stream_wait_event(cs, st->embed_ready)) ||
            (rc = span_begin(&st->io.spans, cs, BUSY_COMM, &span)) ||
            (rc = coll_reduce_scatter_sum(st->work.comm, embed_mine, st->embed_g, z->Se)))
            return rc;
        dp_shard_norm(cs, embed_mine, z->PE, z->world, z->rank, st->work.dev_norms);
        if ((rc = span_end(&st->io.spans, cs, span)) || (rc = gpt_event_record(st->embed_ready, cs)) ||
            (rc = gpt_stream_wait_event(c, st->embed_ready)))
            return rc;
    }
    const size_t embed_bytes = shard_real(st, 0) * sizeof(float);
    if ((rc = gpt_stream_wait_event(st->io.d2h, st->embed_ready)) ||
        (rc = span_begin(&st->io.spans, st->io.d2h, BUSY_D2H, &span)) ||
        (rc = gpt_memcpy_d2h(st->io.d2h, st->host_g[grad_copy], embed_mine, embed_bytes)) ||
        (rc = span_end(&st->io.spans, st->io.d2h, span)) ||
        (rc = gpt_event_record(st->embed_home, st->io.d2h)))
        return rc;
    out->bytes_d2h += (double)embed_bytes;
    /* (N ranks: this rank's L+1 shard norms; every rank's are gathered after the sync) */
    return gpt_memcpy_d2h(c, st->work.host_norms, st->work.dev_norms, (size_t)(z->L + 1) * sizeof(float));
}

/* One micro-batch's forward and backward (layer_work_micro_batches runs them), with the
 * step's gradient copy and early update. */
typedef struct zo_passes {
    zo_state *st;
    int grad_copy;
    const zo_update *early;
} zo_passes;
static int forward_pass(void *p, step_result *out) { return forward(((zo_passes *)p)->st, out); }
static int backward_pass(void *p, step_result *out)
{
    const zo_passes *a = p;
    return backward(a->st, a->grad_copy, a->early, out);
}

static int zero_offload_step(void *state, int iteration, const int32_t *tokens,
                             const int32_t *targets, step_result *out)
{
    zo_state *st = state;
    const zo_layout *z = &st->z;
    const gpt_optim *o = &st->env.cfg->optim;
    gpt_stream *c = st->io.compute;
    int rc;
    if ((rc = offload_streams_begin_step(&st->io, out, st->work.ids, tokens, targets, z->N)))
        return rc;
    out->lr = gpt_lr_at(o, iteration);
    st->steps++;
    const int delayed = z->dpu && st->steps > ZO_DPU_WARMUP;
    /* Unclipped and not delayed: the layers update as their buckets arrive. */
    const int early = !z->dpu && o->clip <= 0;
    const int grad_copy = z->dpu ? st->steps % 2 : 0;
    zo_update u = {.active = 1, .t = st->adam_step + 1, .lr = (float)out->lr, .scale = 1.0f,
                   .grad_copy = grad_copy};

    /* The embed grads are zeroed once their previous copy home is done. */
    if ((rc = gpt_stream_wait_event(c, st->embed_home)) ||
        (rc = gpt_stream_memset_zero(c, st->embed_g, z->PE * sizeof(float))))
        return rc;
    zo_passes passes = {.st = st, .grad_copy = grad_copy, .early = early ? &u : NULL};
    double phases[3]; /* (layer_work_micro_batches: the phase marks) */
    if ((rc = layer_work_micro_batches(&st->work, c, tokens, targets, &st->sh, forward_pass,
                                       backward_pass, &passes, out, phases)))
        return rc;

    if ((rc = layer_work_gather_shard_norms(&st->work, &st->sh)) ||
        (rc = layer_work_outcome(&st->work, &st->sh, out)))
        return rc;
    if (!out->skipped) {
        u.scale = gpt_clip_scale(o, out->grad_norm);
        if (delayed) {
            st->pending = u; /* submitted block by block by the next forward */
        } else {
            /* Forward order, so the next forward waits least; the layers of an early update
             * are queued already. */
            if ((rc = submit_block(st, 0, &u, st->embed_home, out))) return rc;
            for (int l = 0; !early && l < z->L; l++)
                if ((rc = submit_block(st, 1 + l, &u, st->group_home[group_of(st, l)], out)))
                    return rc;
        }
    }
    if (!out->skipped || early) st->adam_step++;
    /* The last copies home finish about now; the spans need them complete. */
    if ((rc = offload_streams_end_step(&st->io, out, phases))) return rc;
    return GPT_OK;
}

/* The master parameters after every update so far, a delayed one included (it is applied
 * here; the GPU gets it in the next forward). */
static int zero_offload_read_params(void *state, float *host_params)
{
    zo_state *st = state;
    const zo_layout *z = &st->z;
    int rc;
    if ((rc = wait_all_adam(st))) return rc;
    if (st->pending.active) {
        /* No copy may still read the host params, and the grads must be home. */
        if ((rc = gpt_stream_sync(st->io.h2d)) || (rc = gpt_stream_sync(st->io.d2h))) return rc;
        step_result ignored;
        memset(&ignored, 0, sizeof ignored);
        for (int k = 0; k <= z->L; k++)
            if ((rc = submit_block(st, k, &st->pending, NULL, &ignored))) return rc;
        st->pending.active = 0;
        if ((rc = wait_all_adam(st))) return rc;
    }
    if (z->world == 1) {
        memcpy(host_params, st->host_p, z->P * sizeof(float));
        return GPT_OK;
    }
    /* every rank's master shards, into the canonical layout */
    return dp_gather_blocks(st->work.comm, st->host_p, z->PE, z->PL, z->L, host_params);
}

/* The step on machine m, in the order of zero_offload_step: the forward waits for
 * each block's copy back (issued once its host Adam of the step before is done), the backward
 * sends each bucket home after its lowest layer, and the host Adam updates the blocks in order
 * (embed, layer 0, ...) once the global norm is known (with --clip-grad 0, each once its grads
 * are home).  N ranks (the collectives calibrated at that world): each bucket's layers are
 * reduce-scattered on the collectives' stream before their shards go home, the embedding's
 * after its backward, and each block's updated shard is all-gathered after its copy up; each
 * rank updates its 1/N of every block on the host, and when the ranks' pools take every core
 * (no --threads) the ranks of one machine split its host, so a shard takes as long as the
 * whole block on one rank.  --dpu, after its warm-up: nothing waits for the update after the
 * backward; each block's update of the step before is queued in the forward once its copy up
 * has left and runs under the step.  Walked for three steps: the last is the steady one. */
static void zero_offload_predict(const engine_config *cfg, const machine_rates *m, engine_prediction *out)
{
    memset(out, 0, sizeof *out);
    const zo_layout z = layout_for(cfg);
    const int L = z.L, clip = cfg->optim.clip > 0, world = z.world, dpu = z.dpu;
    if (pred_no_collectives(cfg, m, out)) return;
    const double host_share = pred_host_share(cfg, m);
    double *adam_done = pred_arrays(out, (size_t)L + 1, 2);
    if (!adam_done) return;
    double *home = adam_done + L + 1;
    pred_timeline t = {0};
    double start = 0, end = 0;
    for (int s = 0; s < 3; s++) {
        start = end;
        pred_step(&t, start);
        double c = start;
        for (int k = 0; k <= L; k++) { /* block k: the embed (0) or layer k - 1 */
            /* (bf16: the working copy moves up in half the bytes) */
            const double shard = k == 0 ? (double)z.Se : (double)z.Sl, up = shard * z.act / sizeof(float);
            double copied = s == 0 ? start : pred_run(&t, BUSY_H2D, pred_h2d_ms(m, up), adam_done[k]);
            if (world > 1 && s > 0)
                copied = pred_run_coll(&t, m, PRED_ALL_GATHER, pred_coll_ms(m->ag_ms, m->ag_gbs, world * up), copied);
            /* --dpu (after its warm-up): the step before's update of block k, queued once its copy
             * of the update before has left, runs under this step */
            if (dpu && s > 0)
                adam_done[k] = pred_run(&t, BUSY_HOST_ADAM,
                                        host_share * pred_host_adam_ms(m, k == 0 ? (double)z.Se : (double)z.Sl),
                                        pred_max(copied, home[k]));
            c = pred_run(&t, BUSY_COMPUTE, k == 0 ? m->embed_fwd_ms : m->layer_fwd_ms, pred_max(c, copied));
        }
        for (int i = 0; i < z.M; i++) {
            if (i > 0) c = pred_run(&t, BUSY_COMPUTE, m->embed_fwd_ms + L * m->layer_fwd_ms, c);
            c = pred_run(&t, BUSY_COMPUTE, m->head_ms, c);
            for (int l = L - 1; l >= 0; l--) {
                c = pred_run(&t, BUSY_COMPUTE, pred_layer_bwd_ms(m, cfg, l), c);
                /* micro-batches after the first add the earlier ones' sum, brought up from the
                 * host once the micro-batch before sent it home (layer_work_add_earlier): on one
                 * rank on the compute stream itself, which waits for it.  Queued behind the
                 * h2d stream's copy-backs here (they share the way up), where the other
                 * engines' take the link's time by the machine's up2 rate (pred_add_earlier):
                 * so each came out nearest its measured steps on the H100 (l80 b 2 --dpu:
                 * 1391 ms queued, 1086 not, 1427-1654 measured) */
                if (world == 1 && i > 0)
                    c = pred_run(&t, BUSY_H2D, pred_h2d_ms(m, (double)z.Sl), pred_max(c, home[l + 1]));
                /* a group of BL layers goes home after its lowest layer, every micro-batch */
                const int hi = L - 1 - ((L - 1 - l) / z.BL) * z.BL, lo = hi - z.BL + 1 > 0 ? hi - z.BL + 1 : 0;
                if (l == lo) {
                    double reduced = c;
                    for (int j = lo; world > 1 && j <= hi; j++) {
                        reduced =
                            pred_run_coll(&t, m, PRED_REDUCE_SCATTER, pred_coll_ms(m->rs_ms, m->rs_gbs, (double)world * z.Sl), reduced);
                        /* (N ranks: the earlier sum of the shard comes up on the collectives' stream) */
                        if (i > 0) reduced = pred_run(&t, BUSY_H2D, pred_h2d_ms(m, (double)z.Sl), pred_max(reduced, home[j + 1]));
                    }
                    const double done = pred_run(&t, BUSY_D2H, pred_d2h_ms(m, (double)(hi - lo + 1) * z.Sl), reduced);
                    for (int j = lo; j <= hi; j++) home[j + 1] = done;
                }
            }
            c = pred_run(&t, BUSY_COMPUTE, m->embed_bwd_ms, c);
        }
        double embed_reduced = c;
        if (world > 1)
            embed_reduced = pred_run_coll(&t, m, PRED_REDUCE_SCATTER, pred_coll_ms(m->rs_ms, m->rs_gbs, (double)world * z.Se), c);
        home[0] = pred_run(&t, BUSY_D2H, pred_d2h_ms(m, (double)z.Se), embed_reduced);
        double norm = c; /* the norms are read back with the backward */
        for (int k = 0; k <= L; k++) norm = pred_max(norm, home[k]);
        for (int k = 0; !dpu && k <= L; k++)
            adam_done[k] = pred_run(&t, BUSY_HOST_ADAM,
                                    host_share * pred_host_adam_ms(m, k == 0 ? (double)z.Se : (double)z.Sl),
                                    clip ? pred_max(norm, home[k]) : home[k]);
        /* the step returns when compute and the copies home are done */
        end = pred_max(c, home[0]);
    }
    pred_done(out, &t, start, end);
    free(adam_done);
}

/* The option only zero-offload takes (engines/option_decl.h). */
static const option_decl zero_offload_options[] = {
    {.name = "dpu", .kind = ARG_NONE, .set = SET_FLAG, OPTION_FIELD(dpu), .scope = SCOPE_RESULT, .slot = 21,
     .use = OPTION_CFG | OPTION_KID, .refusal = REFUSED_ALWAYS, .lacks = "has no delayed parameter update",
     OPTION_INERT(0), OPTION_SEARCH(0, 1),
     .help = "delayed parameter update (step i's CPU Adam overlaps step i+1)"},
    /* (slot 52: it was the environment's AEBENCH_ZO_BUCKET_ELEMS, issue 48; it changes the
     * buckets, so the memory plan and the copies' overlap, not the result's bits) */
    {.name = "reduce-bucket-size", .kind = ARG_INT, .arg = "N", .set = SET_INT, OPTION_FIELD(reduce_bucket_size),
     .lo = 1, .hi = 1LL << 40, .dflt = "50000000", .scope = SCOPE_RESULT_SET, .slot = 52,
     .use = OPTION_CFG | OPTION_KID, .refusal = REFUSED_GIVEN, .lacks = "has no gradient buckets",
     .help = "elements per gradient bucket, DeepSpeed's reduce_bucket_size (default 50000000)"},
};

/* Its steady state: with --dpu, from the third delayed step on; without, from the second step.
 * An update without delay is paid for in the next step's forward (its blocks' copy-back waits
 * for it), so step D + 1, the first delayed, still waits for step D's; step D + 2 waits for
 * none (step D + 1's runs beside it) and is short: on two H200s at l48 830 ms against 1.6-2.0 s
 * (taken as steady, it pulled the median of a 10-step run 5% short). */
static int zero_offload_steady_from(const engine_config *cfg)
{
    return cfg->dpu ? ZO_DPU_WARMUP + 3 : 2;
}

const engine_vtbl engine_zero_offload = {
    .name = "zero-offload",
    .alias = NULL,
    .description = "ZeRO-2 Offload: params on the GPU, grads and Adam on the host (--dpu)",
    .uses_window = 0,
    .supports_bf16 = 1,
    .options = ENGINE_OPT_RANKS | ENGINE_OPT_ACCUM,
    .steady_from = zero_offload_steady_from,
    .plan = zero_offload_plan,
    .init = zero_offload_init,
    .chosen_plan = zero_offload_chosen_plan,
    .step = zero_offload_step,
    .free = zero_offload_free,
    .read_params = zero_offload_read_params,
    .predict = zero_offload_predict,
    OWN_OPTIONS(zero_offload_options),
};
