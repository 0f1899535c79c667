/*
 * zero-infinity — ZeRO-3 with parameter and optimizer offload (Rajbhandari et al., SC'21), done
 * exactly, on one rank or on N (each rank's host keeps 1/N of every block: "N ranks" below),
 * with one micro-batch per step or several (their gradients summed).
 *
 * The GPU holds only what is being computed.  Every parameter's home is the host: a layer's
 * parameters are copied in just before it runs (forward, and again for its backward) into a
 * small ring of fetch buffers, its gradients leave through gradient buckets as soon as its
 * backward is done, and the whole optimizer runs on the host.
 *
 * Sizes, from the artifact's DeepSpeed settings (prefetch 5e7 elements ahead, at most 1e9
 * live, reduce bucket 9e7, optimizer sub-group 1e8):
 *   fetch ring     F = 1 + d buffers of one layer, d = ceil(5e7 / PL) layers of prefetch,
 *                  at least 1, at most 3 (beyond that the copies, serialised on one stream,
 *                  gain nothing; and a shape with small layers would otherwise hold the whole
 *                  model), and F * PL <= 1e9.  At the artifact's h2048 a layer is 5.04e7
 *                  floats: d = 1, F = 2.
 *   grad buckets   2 buffers of one whole layer (9e7 elements hold one h2048 layer; one layer
 *                  per bucket at every shape keeps GPU memory independent of L): one fills
 *                  while the other drains to the host.
 *   sub-groups     one block each (embed, layer k): at h2048 two layers would exceed 1e8.
 *   embed block    "persistent": fetched once per step and kept for the whole step (it is
 *                  used at both ends of both passes: embedding and tied head); its gradients
 *                  go home once, after the embedding's backward.
 *
 * Where things live (fp32; with --dtype bf16 what the ops read is bf16 — the fetched embedding
 * and layers, the inputs and activations — copied up from a bf16 working copy of every
 * block's params on the host, which the host Adam writes beside the fp32 params; grads,
 * master params and Adam state stay fp32, as megatron-lm --dtype bf16 keeps them; the
 * micro-batches' gradient sums are fp32 adds (gpt_add_f32)):
 *   GPU   embed block: params and grads; F fetch buffers (one layer's params each); 2 gradient
 *         buckets (one layer's grads each); the checkpointed inputs x[0..L] (x[L] the head's);
 *         the layers' activations as --recompute keeps them (full: one layer's, recomputed;
 *         selective: also each layer's GEMM outputs; none: every layer's), backward scratch, head activations (one
 *         chunk of rows' logits at a time), residual gradient, ids, the L+1 squared block norms
 *   host  --offload cpu (default): pinned: all parameters [embed | layer 0 | ...] (the fp32
 *         masters, and what the fetches copy), all gradients, the losses and norms read back;
 *         ordinary: Adam m and v of every block.  About 16 P bytes.
 *         --offload nvme: pinned: all parameters, 2 gradient staging blocks (what the buckets
 *         drain into before the disk write), losses and norms; ordinary: nvme_adam's staging
 *         (3 slots of m, v and grads of the largest block).  About 4 P bytes + buffers.
 *   disk  --offload nvme: every block's gradients and Adam m, v (nvme_adam): about 12 P.
 *
 * Fetch sequence of one step: i = 0..2L-1 is layer i (forward) for i < L and layer 2L-1-i
 * (backward) after; fetch i goes into buffer i mod F.  Stream by stream:
 *   h2d       embed params (once the host Adam of the embed block is done); fetch i once
 *             buffer i mod F's previous layer (fetch i-F) has run and, in the forward, once
 *             layer i's host update from the previous step is done
 *   compute   ids; zero embed grads; embed; fwd 0..L-1, each after its fetch; head; losses
 *             read back; bwd head; for j = L-1..0: zero bucket (L-1-j) mod 2 once its
 *             previous layer's grads have left, recompute (not L-1's: its forward's
 *             activations are still there) and backward of j into it, its
 *             squared norm; embed bwd and its norm; norms read back
 *   d2h       each layer's bucket once its backward is done; the embed grads after the
 *             embedding's backward (cpu: into the pinned grads; nvme: into a staging block,
 *             then nvme_adam writes them to disk once the copy is done)
 *   host Adam after the backward, once the global norm is known: blocks 0, embed, 1, ..., L-1
 *             (the forward's order, but layer 0's update first, covering the embed grads'
 *             trip home: post_norm_block), each gated on its grads being
 *             home; cpu: cpu_adam jobs; nvme: nvme_adam jobs, which read m, v (and grads)
 *             from disk, update, write m, v back, pipelined.  With --clip-grad 0 each block's
 *             update is queued as soon as its grads are on their way home and runs under the
 *             rest of the backward.
 * Events order every hand-off between streams; the host waits for a host-Adam ticket only
 * before issuing the fetch that needs that update, for the norms at the end of backward and,
 * in nvme mode, for a staging block's disk write before the next copy into it.
 *
 * Why the updates wait for the global norm when clipping: Megatron clips with the norm of
 * every gradient, known only once the backward ends (see stronghold.c).  Without clipping
 * nothing waits; a non-finite gradient found at the end of the backward can then no longer
 * un-update the blocks already updated (the baseline would skip the step).  The cost of
 * exactness: with clipping the host Adam overlaps only the next forward (whose fetch of layer
 * k waits for k's update), so a step takes at least max(forward, host Adam) + backward; without
 * it the Adam of the upper layers also hides under the backward.  --clip-speculate (default
 * auto) gets that back exactly: the top K layers are updated as their grads arrive, as if the
 * norm will not clip, into a second copy of their params, m and v, and again from the
 * untouched current copy when it does (runtime/update_ahead.h; host: the second copies,
 * params pinned; not with --offload nvme, whose m and v are on disk).  DeepSpeed itself keeps
 * the clipped schedule (its CPU Adam runs after the norm): going ahead is ours.
 *
 * Artifact differences: the artifact ran cpu mode only, with PyTorch's AdamW; ours has the
 * vectorised host Adam (bit-identical to the baseline's) and an nvme mode with O_DIRECT.
 *
 * N ranks (ZeRO-3): every rank's host keeps 1/N of every block (runtime/dp.h shards: master,
 * grads, m, v); the GPU buffers (embed block, fetch ring, buckets) hold whole blocks padded
 * to N shards.  Nothing is replicated but what is being computed.
 *   h2d          a fetch copies this rank's shard of the layer into its place in the buffer
 *   collectives  ... and all-gathers the layer in place (fetched[b] is recorded there); the
 *                embed block likewise once per step; after each layer's backward its bucket
 *                is reduce-scattered in place and the shard's norm taken; the embed grads
 *                the same after the embedding's backward
 *   d2h          this rank's reduced shard of each block (1/N of the bytes)
 *   host Adam    this rank's shard of each block
 * The global norm is the canonical (block, shard) one (each rank's shard norms gathered on
 * the host).  --offload nvme: each rank's disk tier holds its shard of every block's grads,
 * m and v (the machine's free disk split among its ranks).
 */
#include "engine.h"
#include "step_bound.h"

#include "runtime/cpu_adam.h"
#include "runtime/dp.h"
#include "runtime/layer_work.h"
#include "runtime/offload_streams.h"
#include "runtime/nvme_adam.h"
#include "runtime/spans.h"
#include "runtime/update_ahead.h"
#include "runtime/timer.h"
#include "runtime/predict.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* DeepSpeed's stage-3 settings in the artifact's JSON (elements). */
#define ZI_PREFETCH_ELEMS 5e7
#define ZI_MAX_LIVE_ELEMS 1e9
enum { ZI_MAX_PREFETCH_LAYERS = 3, ZI_BUCKETS = 2 };
/* --offload nvme: nvme_adam's staging slots (one block read ahead, one updated, one written
 * back), and the host blocks the gradient buckets drain into before their disk write. */
enum { ZI_NVME_DEPTH = 3, ZI_GRAD_STAGES = 2 };

typedef struct zi_layout {
    int L;
    int F;              /* fetch buffers */
    int nvme;           /* --offload nvme */
    size_t PL, PE, P;   /* floats of one layer block, of the embed block, of the model */
    size_t NC, N;       /* floats of one (N, C) activation; tokens per step */
    /* N ranks (runtime/dp.h): shards of Se / Sl floats; GPU buffers hold a block padded to one
     * shard per rank, the host this rank's shard of every block (Pshard floats).  One rank:
     * Se = PE, Sl = PL, Pshard = P. */
    int world, rank;
    size_t Se, Sl, Pshard;
    gpt_dtype dt;       /* what the ops read (--dtype): fp32, or bf16 with fp32 master weights */
    gpt_recompute rec;  /* --recompute: what each layer's activations keep on the GPU */
    size_t act;         /* ... its bytes per element */
    int M;              /* micro-batches per step */
    int K;              /* --clip-speculate: the top K layers are updated ahead of the norm */
} zi_layout;

/* Prefetch depth from DeepSpeed's element counts (see the top comment). */
static int fetch_buffers(size_t PL)
{
    double depth = ceil(ZI_PREFETCH_ELEMS / (double)PL);
    if (depth < 1) depth = 1;
    if (depth > ZI_MAX_PREFETCH_LAYERS) depth = ZI_MAX_PREFETCH_LAYERS;
    while (depth > 1 && (depth + 1) * (double)PL > ZI_MAX_LIVE_ELEMS) depth--;
    return 1 + (int)depth;
}

static zi_layout layout_for(const engine_config *cfg)
{
    const gpt_shape *sh = &cfg->shape;
    zi_layout z;
    z.L = sh->layers;
    z.nvme = cfg->offload == OFFLOAD_NVME;
    z.PL = gpt_layer_layout_of(sh).total;
    z.PE = gpt_embed_layout_of(sh).total;
    z.P = z.PE + (size_t)z.L * z.PL;
    z.F = fetch_buffers(z.PL);
    z.N = (size_t)sh->batch * sh->seq;
    z.NC = z.N * (size_t)sh->hidden;
    z.world = engine_world(cfg);
    z.rank = 0;
    z.Se = dp_shard_len(z.PE, z.world);
    z.Sl = dp_shard_len(z.PL, z.world);
    z.Pshard = z.Se + (size_t)z.L * z.Sl;
    z.M = engine_micro_batches(cfg);
    z.K = 0;
    z.dt = cfg->bf16 ? GPT_BF16 : GPT_F32;
    z.rec = cfg->recompute;
    z.act = gpt_dtype_size(z.dt);
    return z;
}

/* Where this rank's shard of block b (0: embed, 1+k: layer k) starts in the host arrays (on
 * one rank: the block, in the canonical layout), the block's length, its shard length and
 * the real floats of this rank's shard. */
static size_t block_offset(const zi_layout *z, int b)
{
    return b == 0 ? 0 : z->Se + (size_t)(b - 1) * z->Sl;
}
static size_t block_floats(const zi_layout *z, int b) { return b == 0 ? z->PE : z->PL; }
static size_t shard_len(const zi_layout *z, int b) { return b == 0 ? z->Se : z->Sl; }
static size_t shard_real(const zi_layout *z, int b)
{
    return dp_shard_real(block_floats(z, b), shard_len(z, b), z->rank);
}

/* Bytes of every allocation; plan and init share them. */
typedef struct zi_bytes {
    size_t embed, fetch, buckets, inputs;
    size_t embed_params;  /* the fetched embedding, as the ops read it */
    size_t host_work;     /* bf16: the working copy of every block (0 in fp32) */
    size_t host_params, host_grads, host_mv;
    size_t staging;       /* N ranks: one whole block, for initialisation (given back) */
    uint64_t work_gpu, work_host; /* layer_work: activations (--recompute), ids, norms, ... */
    /* --offload nvme */
    size_t grad_stage;    /* one staging block, rounded for O_DIRECT */
    size_t grad_stages;   /* ZI_GRAD_STAGES of them */
    size_t nvme_staging;  /* nvme_adam's own, under the host budget */
    size_t disk;          /* every block's grads, m, v */
} zi_bytes;

static zi_bytes bytes_for(const zi_layout *z, const gpt_shape *sh)
{
    const size_t f = sizeof(float);
    zi_bytes b;
    b.embed = (size_t)z->world * z->Se * f;            /* grads */
    b.embed_params = gpt_act_bytes((size_t)z->world * z->Se, z->dt);
    b.fetch = gpt_act_bytes((size_t)z->F * z->world * z->Sl, z->dt);
    b.buckets = (size_t)ZI_BUCKETS * z->world * z->Sl * f;
    b.inputs = gpt_act_bytes((size_t)(z->L + 1) * z->NC, z->dt);
    b.host_work = z->dt == GPT_BF16 ? gpt_act_bytes(z->Pshard, z->dt) : 0;
    b.work_gpu = layer_work_gpu_bytes(sh, z->rec, z->world, z->M, z->dt);
    b.work_host = layer_work_host_bytes(sh, z->world, z->M);
    b.host_params = z->Pshard * f;
    /* nvme: the grads go to disk, but with micro-batches their sum is kept in pinned memory
     * until the last one (its sum is what is written) */
    b.host_grads = z->nvme && z->M == 1 ? 0 : z->Pshard * f;
    b.host_mv = z->nvme ? 0 : z->Pshard * f;       /* each of m, v */
    const size_t max_block = z->PE > z->PL ? z->PE : z->PL;
    b.staging = z->world > 1 ? max_block * f : 0;
    b.grad_stage = b.grad_stages = b.nvme_staging = b.disk = 0;
    if (z->nvme) {
        /* this rank's shard of every block on its disk (N ranks of one machine: N tiers,
         * each under the machine's disk budget split N ways, run.c) */
        const size_t max_shard = z->Se > z->Sl ? z->Se : z->Sl;
        b.grad_stage = disk_tier_round(max_shard * f);
        b.grad_stages = ZI_GRAD_STAGES * b.grad_stage;
        b.nvme_staging = nvme_adam_staging_bytes(max_shard, ZI_NVME_DEPTH, 1);
        b.disk = nvme_adam_block_disk_bytes(shard_real(z, 0), 1);
        for (int k = 1; k <= z->L; k++) b.disk += nvme_adam_block_disk_bytes(shard_real(z, k), 1);
    }
    return b;
}

static void plan_of(const zi_layout *z, const gpt_shape *sh, const engine_config *cfg, engine_plan *out)
{
    zi_bytes b = bytes_for(z, sh);
    *out = (engine_plan){0};
    out->gpu_bytes = (uint64_t)b.embed_params + b.embed + b.fetch + b.buckets + b.inputs + b.work_gpu;
    out->host_bytes = (uint64_t)b.host_params + b.host_work + b.host_grads + 2 * (uint64_t)b.host_mv +
                      b.work_host + b.grad_stages + b.nvme_staging + b.staging + update_ahead_bytes(z->K, z->Sl);
    out->disk_bytes = b.disk;
    engine_plan_add_comm(out, cfg, 1); /* (layer_work's gradients group, on N GPU ranks) */
}

/* --clip-speculate: how many layers, from the top, are updated ahead of the norm
 * (runtime/update_ahead.h; not with m and v on disk, on N ranks or with micro-batches).  Only
 * when asked for (N): not by default.  Measured on the H100 at l32 (bench/clip_gpu.sh),
 * waiting for the norm costs this engine nothing (525.7 ms against 527.3 unclipped: its host
 * Adam hides under the next forward's fetches), while going ahead made the host Adam compete
 * with the backward's traffic (562.5 ms). */
static int ahead_layers(const engine_config *cfg, const zi_layout *z, const gpt_shape *sh)
{
    zi_layout base = *z;
    base.K = 0;
    engine_plan p;
    plan_of(&base, sh, cfg, &p);
    return update_ahead_blocks(cfg, !z->nvme && z->world == 1 && z->M == 1 && z->dt == GPT_F32, 0, z->L, p.host_bytes,
                               z->Sl);
}

static void zero_infinity_plan(const engine_config *cfg, engine_plan *out)
{
    zi_layout z = layout_for(cfg);
    z.K = ahead_layers(cfg, &z, &cfg->shape);
    plan_of(&z, &cfg->shape, cfg, out);
}

/* ---- state ------------------------------------------------------------------------------ */

typedef struct zi_state {
    engine_env env;
    gpt_shape sh;
    zi_layout z;
    offload_streams io; /* compute, h2d and d2h streams, host Adam pool, busy spans */
    engine_allocs mem;
    /* --offload nvme */
    disk_tier *tier;
    nvme_adam *nvme;
    int *disk_block;            /* L+1, by block: its nvme_adam id */
    float *grad_stage[ZI_GRAD_STAGES];
    uint64_t stage_ticket[ZI_GRAD_STAGES]; /* the disk write from that stage (0: none) */
    int next_stage;

    /* GPU */
    void *embed_p;         /* the fetched embedding, as the ops read it (bf16: the working copy) */
    float *embed_g;
    void *fetch;           /* F layer blocks, as the ops read them */
    float *buckets;        /* ZI_BUCKETS layer blocks */
    void *x;               /* (L+1) (N, C) checkpointed inputs */
    layer_work work;       /* one layer's activations, scratch, head, ids, norms (+ pinned
                              read-backs) */
    /* host, in the canonical layout [embed | layer 0 | ...] */
    float *host_p, *host_g, *host_m, *host_v;
    uint16_t *host_w;        /* bf16: every block's working copy (what the fetches copy up) */

    gpt_event **fetched;     /* F: h2d filled buffer b */
    gpt_event **consumed;    /* F: compute is done with buffer b */
    gpt_event **bucket_full; /* ZI_BUCKETS: compute wrote a layer's grads into bucket b */
    gpt_event *embed_ready, *embed_bwd_done;
    gpt_event *shard_up;     /* N ranks: h2d: this rank's shard is on the GPU (then gathered) */
    gpt_event **grads_home;  /* L+1, by block (0: embed, 1+k: layer k): grads are home */
    uint64_t *adam_ticket;   /* L+1, by block: host Adam pending (0: none) */
    update_ahead ahead;      /* --clip-speculate: the top K layers' second copies, by block */
    int adam_step;
} zi_state;

/* Block b's host state: the copy that is current (other = 0), or, for the top K layers under
 * --clip-speculate, the one an update ahead of the norm writes (other = 1). */
static ahead_state state_of(const zi_state *st, int b, int other)
{
    const size_t off = block_offset(&st->z, b);
    return update_ahead_state(&st->ahead, b, st->host_p + off, st->host_m ? st->host_m + off : NULL,
                              st->host_v ? st->host_v + off : NULL, other);
}

static int alloc_in(zi_state *st, void **ptr, size_t bytes, mem_where where, const char *what)
{
    return engine_alloc(&st->mem, where, ptr, bytes, what);
}

static int wait_adam(zi_state *st, int b)
{
    if (!st->adam_ticket || !st->adam_ticket[b]) return GPT_OK;
    int rc = st->nvme ? nvme_adam_wait(st->nvme, st->adam_ticket[b])
                      : cpu_adam_wait(st->io.host_adam, st->adam_ticket[b]);
    st->adam_ticket[b] = 0;
    return rc;
}

static int wait_all_adam(zi_state *st)
{
    int first = GPT_OK;
    for (int b = 0; b <= st->z.L; b++) {
        int rc = wait_adam(st, b);
        if (rc && !first) first = rc;
    }
    return first;
}

static void zero_infinity_free(void *state)
{
    zi_state *st = state;
    if (!st) return;
    update_ahead_note_result(&st->ahead, &st->env, "zero-infinity");
    (void)wait_all_adam(st);
    /* nvme_adam waits for its jobs and disk writes; it uses the pool and the tier. */
    nvme_adam_destroy(st->nvme);
    disk_tier_close(st->tier);
    /* Waits for the host Adam pool and drains the streams: after a failed step, queued
     * work may still use the buffers freed below. */
    offload_streams_close(&st->io);
    layer_work_close_comm(&st->work);
    gpt_event_destroy(st->shard_up);
    event_array_destroy(st->fetched, st->z.F);
    event_array_destroy(st->consumed, st->z.F);
    event_array_destroy(st->bucket_full, ZI_BUCKETS);
    event_array_destroy(st->grads_home, st->z.L + 1);
    gpt_event_destroy(st->embed_ready);
    gpt_event_destroy(st->embed_bwd_done);
    free(st->adam_ticket);
    update_ahead_close(&st->ahead);
    free(st->disk_block);
    engine_free_all(&st->mem);
    free(st);
}

/* ---- init ----------------------------------------------------------------------------------- */

/* --offload nvme: the tier under --nvme-dir, nvme_adam over it and the pool (every block's
 * grads, m and v on disk), and the pinned blocks the buckets drain into. */
static int init_disk(zi_state *st, const zi_bytes *b)
{
    const zi_layout *z = &st->z;
    const size_t max_block = z->Se > z->Sl ? z->Se : z->Sl; /* this rank's shards */
    int rc;
    char *stages = NULL;
    if ((rc = disk_tier_open(&st->tier, st->env.cfg->nvme_dir, st->env.disk, 0)) ||
        (rc = nvme_adam_create(&st->nvme, st->tier, st->io.host_adam, st->env.host, max_block,
                               ZI_NVME_DEPTH, 1)) ||
        (rc = alloc_in(st, (void **)&stages, b->grad_stages, MEM_PINNED, "gradient staging (host)")))
        return rc;
    /* Pinned blocks of a page or more are page aligned (membudget.h), as O_DIRECT needs. */
    if ((uintptr_t)stages % DISK_TIER_ALIGN) {
        return engine_fail(&st->env, GPT_ERR_INVALID, "zero-infinity: pinned staging not aligned for O_DIRECT");
    }
    for (int s = 0; s < ZI_GRAD_STAGES; s++)
        st->grad_stage[s] = (float *)(stages + (size_t)s * b->grad_stage);
    st->disk_block = calloc((size_t)z->L + 1, sizeof *st->disk_block);
    if (!st->disk_block) return GPT_ERR_OOM;
    for (int blk = 0; blk <= z->L; blk++) {
        char what[48];
        if (blk == 0) snprintf(what, sizeof what, "embedding grads, Adam m, v");
        else snprintf(what, sizeof what, "layer %d grads, Adam m, v", blk - 1);
        if ((rc = nvme_adam_add_block(st->nvme, shard_real(z, blk), what, &st->disk_block[blk])))
            return rc;
    }
    return GPT_OK;
}

static int zero_infinity_init(const engine_env *env, void **state)
{
    *state = NULL;
    int rc = engine_init_check(&engine_zero_infinity, env);
    if (rc) return rc;
    zi_state *st = calloc(1, sizeof *st);
    if (!st) return GPT_ERR_OOM;
    st->env = *env;
    engine_allocs_init(&st->mem, env->gpu, env->host, env->be);
    st->sh = env->cfg->shape;
    st->z = layout_for(env->cfg);
    st->z.rank = env->rank;
    st->z.K = ahead_layers(env->cfg, &st->z, &st->sh);
    *state = st;
    const gpt_shape *sh = &st->sh;
    const zi_layout *z = &st->z;
    const int L = z->L;
    /* Spans per micro-batch: compute 2L + 4, h2d 2L + 1, d2h L + 1; N ranks: collectives
     * 3L + 2, and after the first micro-batch each layer's sum so far. */
    if ((rc = offload_streams_open(&st->io, env->be, env->cfg, 9 * L + 20))) return rc;

    zi_bytes b = bytes_for(z, sh);
    if ((rc = alloc_in(st, &st->embed_p, b.embed_params, MEM_GPU, "embedding parameters")) ||
        (rc = alloc_in(st, (void **)&st->embed_g, b.embed, MEM_GPU, "embedding gradients")) ||
        (rc = alloc_in(st, &st->fetch, b.fetch, MEM_GPU, "layer fetch buffers")) ||
        (rc = alloc_in(st, (void **)&st->buckets, b.buckets, MEM_GPU, "gradient buckets")) ||
        (rc = alloc_in(st, &st->x, b.inputs, MEM_GPU, "checkpointed layer inputs")) ||
        (rc = layer_work_alloc(&st->work, &st->mem, sh, z->rec, z->world, z->M, z->dt)) ||
        (rc = layer_work_open_comm(&st->work, env->be, env->rank, env->world, env->dog)) ||
        /* (bf16: the fetches read the working copy, so the fp32 params need no pinning) */
        (rc = alloc_in(st, (void **)&st->host_p, b.host_params, b.host_work ? MEM_HOST : MEM_PINNED,
                       "parameters (host)")) ||
        (b.host_work &&
         (rc = alloc_in(st, (void **)&st->host_w, b.host_work, MEM_PINNED, "parameters' working copy (bf16, host)"))))
        return rc;
    if (b.host_grads &&
        (rc = alloc_in(st, (void **)&st->host_g, b.host_grads, MEM_PINNED, "gradients (host)")))
        return rc;
    if (z->nvme) {
        if ((rc = init_disk(st, &b))) return rc;
    } else if ((rc = alloc_in(st, (void **)&st->host_m, b.host_mv, MEM_HOST, "Adam m (host)")) ||
               (rc = alloc_in(st, (void **)&st->host_v, b.host_mv, MEM_HOST, "Adam v (host)"))) {
        return rc;
    }
    if ((rc = update_ahead_open(&st->ahead, &st->mem, env->cfg, 1 + L - z->K, z->K, z->Sl))) return rc;
    update_ahead_note_plan(&st->ahead, env, "zero-infinity", L);

    st->adam_ticket = calloc((size_t)L + 1, sizeof *st->adam_ticket);
    if (!st->adam_ticket) return GPT_ERR_OOM;
    if ((rc = event_array_create(env->be, &st->fetched, z->F)) ||
        (rc = event_array_create(env->be, &st->consumed, z->F)) ||
        (rc = event_array_create(env->be, &st->bucket_full, ZI_BUCKETS)) ||
        (rc = event_array_create(env->be, &st->grads_home, L + 1)) ||
        (rc = gpt_event_create(env->be, &st->embed_ready)) ||
        (rc = gpt_event_create(env->be, &st->embed_bwd_done)) ||
        (z->world > 1 && (rc = gpt_event_create(env->be, &st->shard_up))))
        return rc;

    /* The masters start on the host (this rank's shards of them); m, v and the shards'
     * padding are the allocations' zeros. */
    const uint64_t seed = env->cfg->seed;
    if (z->world == 1) {
        engine_init_embed(env, st->host_p, sh, seed);
        for (int k = 0; k < L; k++) engine_init_layer(env, st->host_p + block_offset(z, 1 + k), sh, k, seed);
    } else {
        float *staging = NULL;
        if ((rc = alloc_in(st, (void **)&staging, b.staging, MEM_HOST, "initialisation staging")))
            return rc;
        for (int blk = 0; blk <= L; blk++) {
            if (blk == 0) engine_init_embed(env, staging, sh, seed);
            else engine_init_layer(env, staging, sh, blk - 1, seed);
            memcpy(st->host_p + block_offset(z, blk), staging + (size_t)z->rank * shard_len(z, blk),
                   shard_real(z, blk) * sizeof(float));
        }
        engine_free_last(&st->mem); /* the staging block, the last allocation */
    }
    /* bf16: the working copy the fetches read, rounded as the backends round */
    if (st->host_w) cpu_round_bf16(st->host_w, st->host_p, z->Pshard);

    engine_plan p;
    plan_of(z, sh, env->cfg, &p);
    char g[32], h[32], d[32];
    format_bytes((double)p.gpu_bytes, g, sizeof g);
    format_bytes((double)p.host_bytes, h, sizeof h);
    format_bytes((double)p.disk_bytes, d, sizeof d);
    engine_note(env, "zero-infinity plan: GPU %s (%d fetch buffers, %d gradient buckets of one "
                     "layer), host %s, disk %s (offload %s%s); host Adam: %s",
                g, z->F, ZI_BUCKETS, h, d, z->nvme ? "nvme in " : "cpu",
                z->nvme ? disk_tier_path(st->tier) : "", cpu_adam_isa(st->io.host_adam));
    if (z->world > 1)
        engine_note(env, "zero-infinity on %d ranks (ZeRO-3): each rank keeps 1/%d of every block on the "
                         "host; a fetch copies this rank's shard up and all-gathers the layer; gradients "
                         "reduce-scattered, this rank's shard home; host Adam on 1/%d",
                    z->world, z->world, z->world);
    return GPT_OK;
}

static void zero_infinity_chosen_plan(void *state, engine_plan *out)
{
    zi_state *st = state;
    plan_of(&st->z, &st->sh, st->env.cfg, out);
}

/* ---- one step -------------------------------------------------------------------------------- */

/* Layer of fetch i (0..2L-1) and the buffer it goes into. */
static int layer_of_fetch(const zi_layout *z, int i) { return i < z->L ? i : 2 * z->L - 1 - i; }
static void *buffer_of_fetch(zi_state *st, int i)
{
    return (char *)st->fetch + (size_t)(i % st->z.F) * st->z.world * st->z.Sl * st->z.act;
}
/* This rank's shard's place in a whole block (of shards of S elements) as the ops read it. */
static void *shard_in(const zi_state *st, void *whole, size_t S)
{
    return (char *)whole + (size_t)st->z.rank * S * st->z.act;
}
/* What a fetch of block b copies up: its working copy (bf16), or its current params. */
static const void *fetch_source(const zi_state *st, int b)
{
    if (st->host_w) return st->host_w + block_offset(&st->z, b);
    return state_of(st, b, 0).p;
}

/* N ranks: this rank's shard (just copied up on h2d) gathered into the whole block at
 * `whole` on the collectives' stream; `ready` is recorded after it. */
static int gather_block(zi_state *st, void *whole, size_t S, gpt_event *ready)
{
    gpt_stream *cs = coll_stream(st->work.comm);
    int rc, span;
    if ((rc = gpt_event_record(st->shard_up, st->io.h2d)) || (rc = gpt_stream_wait_event(cs, st->shard_up)) ||
        (rc = span_begin(&st->io.spans, cs, BUSY_COMM, &span)) ||
        (rc = coll_all_gather(st->work.comm, whole, shard_in(st, whole, S), S * st->z.act)) ||
        (rc = span_end(&st->io.spans, cs, span)))
        return rc;
    return gpt_event_record(ready, cs);
}

/* N ranks: block b's gradient (whole, padded, at grads; complete on compute at `done`)
 * reduce-scattered in place and this rank's shard norm taken, on the collectives' stream;
 * `done` is recorded again there (what waits on it then sees the reduced shard). */
static int reduce_block(zi_state *st, int b, float *grads, gpt_event *done, step_result *out)
{
    gpt_stream *cs = coll_stream(st->work.comm);
    const size_t S = shard_len(&st->z, b);
    float *mine = grads + (size_t)st->z.rank * S;
    int rc, span;
    if ((rc = gpt_stream_wait_event(cs, done)) || (rc = span_begin(&st->io.spans, cs, BUSY_COMM, &span)) ||
        (rc = coll_reduce_scatter_sum(st->work.comm, mine, grads, S)) ||
        (rc = span_end(&st->io.spans, cs, span)))
        return rc;
    /* micro-batches after the first add the earlier ones' sum (a layer's: the embedding's
     * accumulates in place and is reduced only after the last) */
    if (b > 0 && (rc = layer_work_add_earlier(&st->work, &st->io.spans, cs, mine,
                                              st->host_g + block_offset(&st->z, b),
                                              shard_real(&st->z, b), st->grads_home[b], out)))
        return rc;
    if (layer_work_last_micro(&st->work))
        dp_shard_norm(cs, mine, block_floats(&st->z, b), st->z.world, st->z.rank, st->work.dev_norms + b);
    return gpt_event_record(done, cs);
}

/* Issue fetch i on h2d: after the buffer's previous layer (fetch i-F) has run and, in the
 * forward, after the layer's host update from the previous step. */
static int issue_fetch(zi_state *st, int i, step_result *out)
{
    const zi_layout *z = &st->z;
    const int k = layer_of_fetch(z, i), buf = i % z->F;
    int rc, span;
    if (i < z->L && (rc = wait_adam(st, 1 + k))) return rc;
    if (i >= z->F && (rc = gpt_stream_wait_event(st->io.h2d, st->consumed[buf]))) return rc;
    const size_t bytes = shard_real(z, 1 + k) * z->act;
    if ((rc = span_begin(&st->io.spans, st->io.h2d, BUSY_H2D, &span)) ||
        (rc = gpt_memcpy_h2d(st->io.h2d, shard_in(st, buffer_of_fetch(st, i), z->Sl), fetch_source(st, 1 + k), bytes)) ||
        (rc = span_end(&st->io.spans, st->io.h2d, span)))
        return rc;
    out->bytes_h2d += (double)bytes;
    if (z->world > 1) return gather_block(st, buffer_of_fetch(st, i), z->Sl, st->fetched[buf]);
    return gpt_event_record(st->fetched[buf], st->io.h2d);
}

/* Compute waits for fetch i before using its buffer. */
static int wait_fetch(zi_state *st, int i)
{
    return gpt_stream_wait_event(st->io.compute, st->fetched[i % st->z.F]);
}

/* Compute is done with fetch i's buffer: hand it to fetch i+F. */
static int release_fetch(zi_state *st, int i, step_result *out)
{
    int rc = gpt_event_record(st->consumed[i % st->z.F], st->io.compute);
    if (rc) return rc;
    return i + st->z.F < 2 * st->z.L ? issue_fetch(st, i + st->z.F, out) : GPT_OK;
}

/* The host Adam's order after the global norm (with clipping): block b of the j-th update.
 * Layer 0 first, then the embed block, then layers 1 .. L-1.  The next forward needs the embed
 * block first, but its grads are the last to come home (after the embedding's backward, the
 * step's last compute): taken first, its update would keep the pool idle for their copy (the
 * whole embedding, ~7 ms at h2048 on PCIe 5) while layer 0's grads have long been home.  So
 * layer 0's update covers that copy, and the embed block's is done by the time the forward
 * starts all the same.  (The model walks the same order: zero_infinity_predict.) */
static int post_norm_block(int j, int L)
{
    if (L < 1) return j;
    return j == 0 ? 1 : j == 1 ? 0 : j;
}

/* Queue block b's host update, to start once its grads are home: in place, or (ahead,
 * --clip-speculate) from the current copy of its state into the other.  It uses the Adam step
 * the coming optimizer phase will count (st->adam_step + 1). */
static int submit_host_adam(zi_state *st, int b, step_result *out, float scale, int ahead)
{
    const zi_layout *z = &st->z;
    const size_t off = block_offset(z, b), n = shard_real(z, b);
    const size_t decay = b == 0 ? gpt_embed_layout_of(&st->sh).n_decay
                                : gpt_layer_layout_of(&st->sh).n_decay;
    /* this rank's shard [r S, r S + n) of the block against its decay range */
    const size_t lo = (size_t)z->rank * shard_len(z, b);
    const size_t n_decay = decay <= lo ? 0 : decay - lo < n ? decay - lo : n;
    out->host_adam_params += (double)n;
    if (st->nvme) {
        /* Its grads are on disk (their write was queued before): read with m and v, which
         * are written back. */
        nvme_adam_job job = {
            .block = st->disk_block[b], .params = st->host_p + off, .grads = NULL,
            .n_decay = n_decay, .optim = st->env.cfg->optim, .lr = (float)out->lr,
            .t = st->adam_step + 1, .grad_scale = scale, .after = NULL,
            .params_bf16 = st->host_w ? st->host_w + off : NULL,
        };
        const double bytes = (double)disk_tier_round(n * sizeof(float));
        out->bytes_disk_read += 3 * bytes;
        out->bytes_disk_write += 2 * bytes;
        return nvme_adam_submit(st->nvme, &job, &st->adam_ticket[b]);
    }
    cpu_adam_job job = {
        .grads = st->host_g + off, .n = n, .n_decay = n_decay, .optim = st->env.cfg->optim,
        .lr = (float)out->lr, .t = st->adam_step + 1, .grad_scale = scale,
        .after = st->grads_home[b], .params_bf16 = st->host_w ? st->host_w + off : NULL,
    };
    update_ahead_job(&st->ahead, b, st->host_p + off, st->host_m + off, st->host_v + off, ahead, &job);
    return cpu_adam_submit(st->io.host_adam, &job, &st->adam_ticket[b]);
}

/* Send block b's grads (n floats at src on the GPU, written by compute up to `done`) home on
 * d2h; grads_home[b] marks their arrival. */
static int send_grads_home(zi_state *st, int b, const float *src, gpt_event *done,
                           step_result *out)
{
    const zi_layout *z = &st->z;
    const size_t n = shard_real(z, b);
    const int last = layer_work_last_micro(&st->work);
    int rc, span;
    /* nvme: the last micro-batch's (the sum's) into the next staging block, once the disk
     * write from it is done; the earlier ones' sums stay in the pinned host grads */
    const int stage = st->next_stage, to_disk = st->nvme && last;
    float *dst = to_disk ? st->grad_stage[stage] : st->host_g + block_offset(z, b);
    if (to_disk) {
        st->next_stage = (stage + 1) % ZI_GRAD_STAGES;
        if (st->stage_ticket[stage] && (rc = nvme_adam_wait(st->nvme, st->stage_ticket[stage])))
            return rc;
        st->stage_ticket[stage] = 0;
    }
    if ((rc = gpt_stream_wait_event(st->io.d2h, done)) ||
        (rc = span_begin(&st->io.spans, st->io.d2h, BUSY_D2H, &span)) ||
        (rc = gpt_memcpy_d2h(st->io.d2h, dst, src, n * sizeof(float))) ||
        (rc = span_end(&st->io.spans, st->io.d2h, span)) ||
        (rc = gpt_event_record(st->grads_home[b], st->io.d2h)))
        return rc;
    out->bytes_d2h += (double)n * sizeof(float);
    if (to_disk) {
        if ((rc = nvme_adam_put_grads(st->nvme, st->disk_block[b], dst, st->grads_home[b],
                                      &st->stage_ticket[stage])))
            return rc;
        out->bytes_disk_write += (double)disk_tier_round(n * sizeof(float));
    }
    if (st->env.cfg->optim.clip <= 0 && last) return submit_host_adam(st, b, out, 1.0f, 0);
    /* --clip-speculate: as if the norm will not clip (runtime/update_ahead.h) */
    if (update_ahead_now(&st->ahead, b)) return submit_host_adam(st, b, out, 1.0f, 1);
    return GPT_OK;
}

static void *input_of(zi_state *st, int k) { return (char *)st->x + (size_t)k * st->z.NC * st->z.act; }

static int forward(zi_state *st, step_result *out)
{
    const gpt_shape *sh = &st->sh;
    const zi_layout *z = &st->z;
    gpt_stream *c = st->io.compute;
    int rc, span;
    /* The embed block first (the first thing compute needs; it stays for the step's later
     * micro-batches), then the first F layers. */
    const size_t embed_bytes = shard_real(z, 0) * z->act;
    if (st->work.micro > 0) goto layers;
    if ((rc = wait_adam(st, 0)) ||
        (rc = span_begin(&st->io.spans, st->io.h2d, BUSY_H2D, &span)) ||
        (rc = gpt_memcpy_h2d(st->io.h2d, shard_in(st, st->embed_p, z->Se), fetch_source(st, 0), embed_bytes)) ||
        (rc = span_end(&st->io.spans, st->io.h2d, span)) ||
        (rc = z->world > 1 ? gather_block(st, st->embed_p, z->Se, st->embed_ready)
                       : gpt_event_record(st->embed_ready, st->io.h2d)))
        return rc;
    out->bytes_h2d += (double)embed_bytes;
layers:
    for (int i = 0; i < z->F && i < 2 * z->L; i++)
        if ((rc = issue_fetch(st, i, out))) return rc;

    if ((rc = gpt_stream_wait_event(c, st->embed_ready)) ||
        (rc = span_begin(&st->io.spans, c, BUSY_COMPUTE, &span)))
        return rc;
    gpt_embed_forward(c, sh, st->embed_p, st->work.ids, input_of(st, 0));
    if ((rc = span_end(&st->io.spans, c, span))) return rc;
    for (int k = 0; k < z->L; k++) {
        if ((rc = wait_fetch(st, k)) || (rc = span_begin(&st->io.spans, c, BUSY_COMPUTE, &span)))
            return rc;
        gpt_layer_acts acts = layer_work_acts(&st->work, sh, k);
        gpt_layer_forward(c, sh, buffer_of_fetch(st, k), input_of(st, k), input_of(st, k + 1), &acts);
        if ((rc = span_end(&st->io.spans, c, span)) || (rc = release_fetch(st, k, out))) return rc;
    }
    return layer_work_head_forward(&st->work, &st->io.spans, c, sh, st->embed_p, st->embed_g,
                                   input_of(st, z->L));
}

static int backward(zi_state *st, step_result *out)
{
    const gpt_shape *sh = &st->sh;
    const zi_layout *z = &st->z;
    gpt_stream *c = st->io.compute;
    int rc, span;
    if ((rc = layer_work_head_backward(&st->work, &st->io.spans, c, sh, st->embed_p,
                                       st->embed_g,
                                       input_of(st, z->L))))
        return rc;
    for (int j = z->L - 1; j >= 0; j--) {
        const int i = 2 * z->L - 1 - j, seq = z->L - 1 - j, bk = seq % ZI_BUCKETS;
        float *bucket = st->buckets + (size_t)bk * z->world * z->Sl;
        /* The bucket's previous layer (j + ZI_BUCKETS, or in the micro-batch before, the
         * lowest layer that used it) must have left before it is zeroed. */
        const int prev = seq >= ZI_BUCKETS ? j + ZI_BUCKETS
                         : st->work.micro > 0 ? (z->L - 1 - seq) % ZI_BUCKETS : -1;
        if (prev >= 0 && prev < z->L && (rc = gpt_stream_wait_event(c, st->grads_home[1 + prev])))
            return rc;
        if ((rc = wait_fetch(st, i)) ||
            (rc = span_begin(&st->io.spans, c, BUSY_COMPUTE, &span)) ||
            (rc = gpt_stream_memset_zero(c, bucket, z->world * z->Sl * sizeof(float))))
            return rc;
        gpt_layer_acts acts = layer_work_backward_acts(&st->work, sh, j);
        gpt_layer_backward(c, sh, buffer_of_fetch(st, i), bucket, input_of(st, j), st->work.dres,
                           &acts, &st->work.scratch, GPT_GRAD_ACCUMULATE);
        if ((rc = span_end(&st->io.spans, c, span))) return rc;
        /* one rank: the earlier micro-batches' sum added here, then the norm after the last */
        if (z->world == 1 &&
            (rc = layer_work_add_earlier(&st->work, &st->io.spans, c, bucket,
                                         st->host_g + block_offset(z, 1 + j), z->PL,
                                         st->grads_home[1 + j], out)))
            return rc;
        if (z->world == 1 && layer_work_last_micro(&st->work))
            gpt_norm_squared(c, st->work.dev_norms + 1 + j, bucket, z->PL);
        if ((rc = gpt_event_record(st->bucket_full[bk], c)) ||
            (rc = release_fetch(st, i, out)) ||
            (z->world > 1 && (rc = reduce_block(st, 1 + j, bucket, st->bucket_full[bk], out))) ||
            (rc = send_grads_home(st, 1 + j, bucket + (size_t)z->rank * z->Sl, st->bucket_full[bk], out)))
            return rc;
    }
    if ((rc = span_begin(&st->io.spans, c, BUSY_COMPUTE, &span))) return rc;
    layer_work_embed_backward(&st->work, c, sh, st->embed_g);
    if ((rc = span_end(&st->io.spans, c, span))) return rc;
    /* the embedding's grads accumulate in place over the micro-batches: they go once */
    if (!layer_work_last_micro(&st->work)) return GPT_OK;
    if (z->world == 1) gpt_norm_squared(c, st->work.dev_norms, st->embed_g, z->PE);
    if ((rc = gpt_event_record(st->embed_bwd_done, c)) ||
        (z->world > 1 && ((rc = reduce_block(st, 0, st->embed_g, st->embed_bwd_done, out)) ||
                      /* the norms read back below come from the collectives' stream */
                      (rc = gpt_stream_wait_event(c, st->embed_bwd_done)))) ||
        (rc = send_grads_home(st, 0, st->embed_g + (size_t)z->rank * z->Se, st->embed_bwd_done, out)))
        return rc;
    return gpt_memcpy_d2h(c, st->work.host_norms, st->work.dev_norms, (size_t)(z->L + 1) * sizeof(float));
}

/* One micro-batch's forward and backward (layer_work_micro_batches runs them). */
static int forward_pass(void *engine, step_result *out) { return forward(engine, out); }
static int backward_pass(void *engine, step_result *out) { return backward(engine, out); }

static int zero_infinity_step(void *state, int iteration, const int32_t *tokens,
                              const int32_t *targets, step_result *out)
{
    zi_state *st = state;
    const zi_layout *z = &st->z;
    const engine_config *cfg = st->env.cfg;
    gpt_stream *c = st->io.compute;
    int rc;
    if ((rc = offload_streams_begin_step(&st->io, out, st->work.ids, tokens, targets, z->N)))
        return rc;
    if ((rc = update_ahead_begin_step(&st->ahead))) return rc;
    out->lr = gpt_lr_at(&cfg->optim, iteration);

    if ((rc = gpt_stream_memset_zero(c, st->embed_g, z->PE * sizeof(float))))
        return rc;
    double phases[3]; /* (layer_work_micro_batches: the phase marks) */
    if ((rc = layer_work_micro_batches(&st->work, c, tokens, targets, &st->sh, forward_pass,
                                       backward_pass, st, out, phases)))
        return rc;

    if ((rc = layer_work_gather_shard_norms(&st->work, &st->sh)) ||
        (rc = layer_work_outcome(&st->work, &st->sh, out)))
        return rc;
    if (!out->skipped && cfg->optim.clip > 0) {
        /* In the order the next forward needs them (post_norm_block) */
        const float scale = gpt_clip_scale(&cfg->optim, out->grad_norm);
        for (int j = 0; j <= z->L; j++) {
            const int b = post_norm_block(j, z->L);
            /* (--clip-speculate: the top K were updated ahead; again from their current copy
             * when the norm clipped; then their copies swap) */
            const int ahead = update_ahead_now(&st->ahead, b);
            if ((!ahead || scale != 1.0f) && (rc = submit_host_adam(st, b, out, scale, ahead))) return rc;
            if (ahead) update_ahead_swap(&st->ahead, b);
        }
    }
    /* (nothing to give back: only a number of blocks, which holds its copies throughout, goes
     * ahead here; auto does not, see ahead_layers) */
    (void)update_ahead_end_step(&st->ahead, out, gpt_clip_scale(&cfg->optim, out->grad_norm));
    /* Without clipping every block was already updated with this step number. */
    if (!out->skipped || cfg->optim.clip <= 0) st->adam_step++;
    /* The copies of this step are done by now or nearly; waiting for them keeps every
     * buffer's owner obvious at the step boundary.  The host Adam goes on. */
    if ((rc = offload_streams_end_step(&st->io, out, phases))) return rc;
    if (st->nvme) { /* (the pool's busy time above includes nvme_adam's updates) */
        double disk_read, disk_written; /* the schedule's counts above are per step */
        disk_tier_take_stats(st->tier, &out->busy_ms[BUSY_DISK], &disk_read, &disk_written);
    }
    return GPT_OK;
}

static int zero_infinity_read_params(void *state, float *host_params)
{
    zi_state *st = state;
    int rc = wait_all_adam(st);
    if (rc) return rc;
    if (st->z.world > 1) return dp_gather_blocks(st->work.comm, st->host_p, st->z.PE, st->z.PL, st->z.L, host_params);
    memcpy(host_params, st->host_p, st->z.PE * sizeof(float));
    for (int b = 1; b <= st->z.L; b++)
        memcpy(host_params + block_offset(&st->z, b), state_of(st, b, 0).p, st->z.PL * sizeof(float));
    return GPT_OK;
}

/* The step on machine m (one micro-batch, --offload cpu), in the order of the top comment:
 * the embedding fetched once (after its host Adam), fetch i of the 2L (forward, then
 * backward's layers) into buffer i mod F once that buffer's layer before has run and, in the
 * forward, once the layer's host Adam of the step before is done (the host waits there); each
 * layer's grads go home from one of two buckets after its backward; the host Adam of every
 * block after the global norm (with clipping) or as its grads arrive.  N ranks (ZeRO-3, the
 * collectives calibrated at that world, on their one stream): each fetch brings this rank's
 * shard up and all-gathers the block in place; each bucket is reduce-scattered before its
 * shard goes home; each rank updates its shard of every block (pred_host_share).
 * Micro-batches: each fetches the 2L layers again (the embedding stays); from the second on,
 * each layer's sum so far comes up to be added before its grads go home; the embedding's
 * grads go home after the last, and the host Adam follows.  Three steps walked: the last is
 * the steady one.  --offload nvme (the disk tier calibrated at --nvme-dir): each block's grads
 * go on from the host to disk, and its update reads them with m and v and writes m and v back
 * (nvme_adam's pipeline, on the disk beside the host Adam). */
static void zero_infinity_predict(const engine_config *cfg, const machine_rates *m, engine_prediction *out)
{
    memset(out, 0, sizeof *out);
    if (pred_no_disk(cfg, m, out) || pred_no_collectives(cfg, m, out)) return;
    const zi_layout z = layout_for(cfg);
    const int world = z.world, M = z.M, nvme = z.nvme;
    const double share = pred_host_share(cfg, m);
    /* (bf16: the working copies move up in half the bytes; grads come home in fp32) */
    const double per_float = (double)z.act / sizeof(float);
    /* (one rank: the shards are the blocks, and no collective runs) */
    const double gather_ms = world > 1 ? pred_coll_ms(m->ag_ms, m->ag_gbs, per_float * world * z.Sl) : 0;
    const double reduce_ms = world > 1 ? pred_coll_ms(m->rs_ms, m->rs_gbs, (double)world * z.Sl) : 0;
    const int L = z.L, F = z.F, clip = cfg->optim.clip > 0;
    /* adam_done/home: block b = 0 the embedding, 1 + k layer k; used: fetch i's layer done
     * (2L of them: four arrays of L + 1) */
    double *adam_done = pred_arrays(out, (size_t)L + 1, 4);
    if (!adam_done) return;
    double *home = adam_done + L + 1, *used = home + L + 1;
    const double in_ms = pred_h2d_ms(m, per_float * z.Sl), out_ms = pred_d2h_ms(m, (double)z.Sl);
    const double landing_ms = pred_h2d_ms(m, (double)z.Sl); /* (micro-batches: the sum so far, up) */
    pred_timeline t = {0};
    double start = 0, end = 0;
    for (int step = 0; step < 3; step++) {
        start = end;
        pred_step(&t, start);
        double host = pred_max(start, adam_done[0]);
        double embed_in = pred_run(&t, BUSY_H2D, pred_h2d_ms(m, per_float * z.Se), host);
        if (world > 1)
            embed_in = pred_run_coll(&t, m, PRED_ALL_GATHER, pred_coll_ms(m->ag_ms, m->ag_gbs, per_float * world * z.Se), embed_in);
        double c = start, prev = start; /* prev: the micro-batch before's last layer (fetch buffers) */
        for (int k = 0; k < M; k++) {
            const int last = k == M - 1;
            c = pred_run(&t, BUSY_COMPUTE, m->embed_fwd_ms, pred_max(c, embed_in));
            double bucket_free[2] = {prev, prev};
            for (int i = 0; i < 2 * L; i++) {
                const int fwd = i < L, layer = fwd ? i : 2 * L - 1 - i;
                if (fwd && k == 0) host = pred_max(host, adam_done[1 + layer]);
                double in = pred_run(&t, BUSY_H2D, in_ms, pred_max(host, i >= F ? used[i - F] : prev));
                if (world > 1) in = pred_run_coll(&t, m, PRED_ALL_GATHER, gather_ms, in);
                if (i == L) c = pred_run(&t, BUSY_COMPUTE, m->head_ms, c);
                if (fwd) {
                    c = pred_run(&t, BUSY_COMPUTE, m->layer_fwd_ms, pred_max(c, in));
                } else {
                    const int b = (L - 1 - layer) % 2;
                    c = pred_run(&t, BUSY_COMPUTE, pred_layer_bwd_ms(m, cfg, layer),
                                 pred_max(c, pred_max(in, bucket_free[b])));
                    double reduced = world > 1 ? pred_run_coll(&t, m, PRED_REDUCE_SCATTER, reduce_ms, c) : c;
                    /* micro-batches after the first: the layer's sum so far comes up to be added */
                    if (k > 0) reduced = pred_add_earlier(&t, m, landing_ms, world, &c, home[1 + layer]);
                    bucket_free[b] = home[1 + layer] = pred_run(&t, BUSY_D2H, out_ms, reduced);
                    /* nvme: the sum goes on to disk, which the update reads it back from */
                    if (nvme && last) home[1 + layer] = pred_run(&t, BUSY_DISK, pred_disk_write_ms(m, (double)z.Sl), home[1 + layer]);
                    if (!clip && last)
                        adam_done[1 + layer] = pred_host_update(&t, m, share * pred_host_adam_ms(m, (double)z.Sl),
                                                                nvme ? 3.0 * z.Sl : 0, nvme ? 2.0 * z.Sl : 0, home[1 + layer]);
                }
                used[i] = c;
            }
            c = pred_run(&t, BUSY_COMPUTE, m->embed_bwd_ms, c);
            prev = c;
        }
        /* the embedding's grads accumulate in place: reduced and sent home after the last */
        const double embed_reduced =
            world > 1 ? pred_run_coll(&t, m, PRED_REDUCE_SCATTER, pred_coll_ms(m->rs_ms, m->rs_gbs, (double)world * z.Se), c) : c;
        home[0] = pred_run(&t, BUSY_D2H, pred_d2h_ms(m, (double)z.Se), embed_reduced);
        if (nvme) home[0] = pred_run(&t, BUSY_DISK, pred_disk_write_ms(m, (double)z.Se), home[0]);
        host = pred_max(host, pred_max(c, embed_reduced)); /* the norms read back (the shards' after their reductions) */
        for (int j = 0; j <= L; j++) {
            const int b = clip ? post_norm_block(j, L) : j;
            if (clip || b == 0) {
                const double n = b == 0 ? (double)z.Se : (double)z.Sl;
                adam_done[b] = pred_host_update(&t, m, share * pred_host_adam_ms(m, n), nvme ? 3 * n : 0, nvme ? 2 * n : 0,
                                                pred_max(clip ? host : start, home[b]));
            }
        }
        end = pred_max(c, home[0]);
    }
    pred_done(out, &t, start, end);
    free(adam_done);
}

/* Its bound (step_bound.h): its copies beside the compute, and a host Adam that waits for the norm under --clip-grad. */
static void zero_infinity_bound(const engine_config *cfg, const double busy[BUSY_KINDS], engine_bound *out)
{
    step_bound_schedule(cfg, busy, 0, 1, out);
}

const engine_vtbl engine_zero_infinity = {
    .name = "zero-infinity",
    .alias = NULL,
    .description = "ZeRO-3: every layer's params fetched per use, grads out, host Adam "
                   "(--offload cpu|nvme)",
    .uses_window = 0,
    .supports_bf16 = 1,
    .options = ENGINE_OPT_RANKS | ENGINE_OPT_ACCUM,
    .bound = zero_infinity_bound,
    .plan = zero_infinity_plan,
    .init = zero_infinity_init,
    .chosen_plan = zero_infinity_chosen_plan,
    .step = zero_infinity_step,
    .free = zero_infinity_free,
    .read_params = zero_infinity_read_params,
    .predict = zero_infinity_predict,
    .takes = (const char *const[]){"offload", "nvme-dir", "clip-speculate", NULL},
};
