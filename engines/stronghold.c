/*
 * stronghold — a working window of layers on the GPU (Sun et al., SC'22), done exactly.
 *
 * R layers are resident: they never move and update on the GPU.  The other Ls = L - R are
 * streamed through a ring of S layer slots, and their optimizer runs on the host (the
 * paper's W is our R; with -w W the ring has min(W, L-W) slots, its layout; -w auto picks S
 * from measured copy and compute times and then makes every layer that still fits
 * resident, so a model that fits entirely runs exactly like megatron-lm).
 *
 * Placement (--placement): the resident layers are 0..R-1 (bottom, the paper's window), or
 * spread between the streamed ones (streamed layer i is layer ceil((i + 1) L / Ls) - 1).
 * Why spread: a layer's params take longer to come up than its forward takes (at h2048 b4 on
 * an H100, 4.7 ms of copy under the host's load against 1.5 ms of forward), so with the
 * window at the bottom the forward of the streamed layers waits for every prefetch once the
 * S slots run dry.  Resident layers between them give each copy their forward's time.  It
 * pays where the streamed layers' updates are done by the next forward (no clipping, or all
 * updated ahead of the norm); where they wait for the norm, the window at the bottom gives the
 * first updates its forward's time, so auto spreads only then (-w auto; -w W keeps the
 * paper's).  Below, "layer R" and "R..L-1" read "the lowest streamed layer" and "the streamed
 * layers in order": the ring, the host blocks and the updates ahead go by streamed index.
 *
 * Where things live (fp32; with --dtype bf16 what the ops read is bf16 — the slots' params,
 * a working copy of the embedding and of each resident layer (refreshed by their GPU Adam),
 * every input and activation — and the host keeps a bf16 working copy of each streamed layer
 * beside its fp32 params, written by the host Adam (also through the disk tier's jobs), which
 * the prefetches copy up; grads, master params and Adam state stay fp32, as megatron-lm
 * --dtype bf16 keeps them; the micro-batches' gradient sums are fp32 adds (gpt_add_f32)):
 *   GPU   embed block: params, grads, Adam m, v; resident layers: params, grads, m, v and
 *         their checkpointed inputs; S slots, each: one layer's params, grads and input;
 *         M > 1: two layer blocks for a resident layer's micro-batch gradient, in turn;
 *         the head input x[L]; the layers' activations as --recompute keeps them (full:
 *         one layer's, recomputed; selective and none keep every layer's GEMM outputs or
 *         all on the GPU too, streamed layers included: their memory grows with L), backward scratch, head
 *         activations (one chunk of rows' logits at a time), residual gradient, ids, the L+1
 *         squared block norms
 *   host  pinned: streamed layers' params and grads, the checkpointed inputs of streamed
 *         layers that leave the ring (all but the top S), losses and norms read-back, a
 *         staging block; ordinary: streamed layers' Adam m and v (not with --offload nvme)
 *   disk  --offload nvme: streamed layers' Adam m and v, one block per layer in the disk
 *         tier's swap file under --nvme-dir; the host keeps NVME_DEPTH staging slots (m, v of
 *         one layer each, page aligned) instead
 *
 * Slot of streamed layer k: (its streamed index) mod S.  One iteration, stream by stream:
 *   compute   ids; embed; fwd 0..L-1 (a streamed layer waits for its params); head;
 *             bwd head, L-1..0 with recompute (not L-1: its forward's activations are
 *             still there; a streamed layer below the top S waits for
 *             its params and input), each streamed layer's squared grad norm right after
 *             its backward; embed bwd; norms of embed and resident blocks; read back;
 *             GPU Adam of embed and resident layers
 *   h2d       fwd: layer k+S's params into k's slot once k's forward is done (and once the
 *             host Adam of k+S from the previous step is done); bwd: layer j-S's params and
 *             input into j's slot once j's grads have left, and its grads zeroed
 *   d2h       fwd: each streamed layer's input, once its forward is done (not the top S:
 *             they stay in their slots until their backward); bwd: each streamed layer's
 *             grads once its backward is done
 *   host Adam layer R, R+1, ..., L-1 as soon as the global norm is known (after backward),
 *             each after its grads are home; it runs while the next step's forward runs,
 *             whose prefetch of layer k waits for k's update.
 *   disk      (--offload nvme) the same jobs go through nvme_adam: layer k's m, v are read
 *             into a staging slot while layer k-1 is updated and k-2's are written back
 *             (engines/runtime/nvme_adam.c); params and grads stay in pinned host memory, so
 *             the GPU side is unchanged, and the forward's prefetch of layer k waits for k's
 *             update and write-back.
 * Events order every hand-off between streams; the host only waits for a host-Adam ticket
 * before issuing the copy of a layer whose forward is next (a prefetch whose update is done
 * goes at once, in streamed order: issue_prefetches), and for the norms at the end of
 * backward.
 *
 * Why the host Adam starts after backward and not as each layer's grads arrive (as the
 * paper does): Megatron clips with the norm of *all* gradients, known only once backward
 * ends.  Updating layer j earlier cannot give the baseline's result (the artifact updated
 * those layers unclipped).  So with clipping the host update overlaps the next forward.
 * Without clipping (--clip-grad 0) nothing waits for the norm: layer j's host update is
 * queued as soon as its grads are on their way home and runs under the backward of the
 * layers below, the paper's schedule, still equal to the baseline.  (One difference
 * remains there: a non-finite gradient found at the end of the backward can no longer
 * un-update the layers above it; the baseline would skip the whole step.)
 * With clipping, --clip-speculate (default auto) gets most of that back exactly: the top K
 * streamed layers are updated as their grads arrive, as if the norm will not clip, into a
 * second copy of their params, m and v, and again from the untouched current copy when the
 * norm clips (runtime/update_ahead.h).  host: the second copies (params pinned); host Adam:
 * layer j >= L-K after its grads are home (out of place), the others after the norm.
 *
 * Artifact bugs not copied: the lr schedule, clipping and the norm cover every layer.
 *
 * N ranks: the resident layers and the embed block are replicated (each rank runs their GPU
 * Adam on all-reduced grads: layer_work_reduce, on the collectives' stream); the streamed
 * layers' host state (params, grads, m, v) is sharded: each rank keeps its 1/N of every
 * streamed layer (runtime/dp.h), and a slot holds the layer padded to N shards.
 *   h2d          a prefetch copies this rank's shard of the layer into its place in the slot
 *   collectives  ... and all-gathers the layer in place (the slot's `ready` is recorded
 *                there); after a streamed layer's backward its grads are reduce-scattered in
 *                place, this rank's entry of the (block, shard) norms taken; after a resident
 *                layer's (and the embedding's) they are all-reduced, every entry taken
 *   d2h          this rank's reduced shard of a streamed layer (1/N of the bytes)
 *   host Adam    this rank's shard of each streamed layer
 * Each rank's norm table is gathered after the backward; entry (b, r) comes from rank r.
 * Why sharded and not replicas with all-reduce: measured on two H200 of one machine (README,
 * bench/results/2026-11-24-h200x2-dp), replicas made both ranks update the whole model on
 * one host with half its cores each, doubling the host Adam (152 -> 313 ms at l32 -w 15) and
 * giving 1.38x at N = 2; zero-offload's sharded host Adam kept its time (2.01x).  Sharding
 * also halves the PCIe bytes and the host memory per rank.  --offload nvme: each rank's disk
 * tier holds the m, v of its shard of each streamed layer.
 */
#include "engine.h"
#include "step_bound.h"

#include "runtime/cpu_adam.h"
#include "runtime/dp.h"
#include "runtime/layer_work.h"
#include "runtime/offload_streams.h"
#include "runtime/disk_tier.h"
#include "runtime/nvme_adam.h"
#include "runtime/spans.h"
#include "runtime/update_ahead.h"
#include "runtime/timer.h"
#include "runtime/predict.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --offload nvme: staging slots of the disk pipeline: one block read ahead, one updated,
 * one written back. */
enum { NVME_DEPTH = 3 };

/* The shape of the placement: R resident layers, S slots for the Ls = L - R others. */
typedef struct sh_layout {
    int L, R, S, Ls;
    int nvme;        /* --offload nvme: the streamed layers' m, v on disk */
    int n_ckpt;      /* streamed layers whose input goes to the host: max(0, Ls - S) */
    int world, rank;     /* ranks: the streamed layers' host state is sharded (runtime/dp.h) */
    int M;           /* micro-batches per step */
    int K;           /* --clip-speculate: the top K streamed layers are updated ahead of the
                        norm (ahead_layers) */
    int spread;      /* the resident layers spread between the streamed ones (else 0..R-1) */
    size_t Sl, SP;   /* a layer's shard, and a slot's floats (world·Sl: the layer padded) */
    size_t PL, PE;   /* floats of one layer block and of the embed block */
    size_t NC, N;    /* floats of one (N, C) activation; tokens per step */
    gpt_dtype dt;    /* what the ops read (--dtype): fp32, or bf16 with fp32 master weights */
    size_t act;      /* ... its bytes per element */
    gpt_recompute rec; /* --recompute: what each layer's activations keep on the GPU */
} sh_layout;

static sh_layout layout_for(const gpt_shape *sh, int R, int S, int bf16, gpt_recompute rec)
{
    sh_layout z;
    z.rec = rec;
    z.dt = bf16 ? GPT_BF16 : GPT_F32;
    z.act = gpt_dtype_size(z.dt);
    z.L = sh->layers;
    z.R = R;
    z.S = S;
    z.Ls = z.L - R;
    z.nvme = 0;
    z.M = 1;
    z.K = 0;
    z.spread = 0;
    z.world = 1;
    z.rank = 0;
    z.Sl = z.SP = gpt_layer_layout_of(sh).total;
    z.n_ckpt = z.Ls > S ? z.Ls - S : 0;
    z.PL = gpt_layer_layout_of(sh).total;
    z.PE = gpt_embed_layout_of(sh).total;
    z.N = (size_t)sh->batch * sh->seq;
    z.NC = z.N * (size_t)sh->hidden;
    return z;
}

/* Where the layers are.  Bottom: layers 0..R-1 resident, R..L-1 streamed.  Spread: streamed
 * layer i is layer ceil((i + 1) L / Ls) - 1, so the top layer streams and the resident ones
 * fall evenly between (at most ceil(R / Ls) together).  Either way the streamed layers keep
 * their order: streamed index i (0..Ls-1) counts the streamed layers below, and the ring,
 * the host blocks and the updates ahead go by it; resident index r (0..R-1) places a
 * resident layer in the contiguous resident blocks. */
static int streamed_below(const sh_layout *z, int k) /* streamed layers among 0..k-1 */
{
    if (!z->spread) return k > z->R ? k - z->R : 0;
    return (int)(((long long)k * z->Ls) / z->L);
}
static int is_streamed(const sh_layout *z, int k) { return streamed_below(z, k + 1) > streamed_below(z, k); }
static int streamed_index(const sh_layout *z, int k) { return streamed_below(z, k); }
static int resident_index(const sh_layout *z, int k) { return k - streamed_below(z, k); }
static int streamed_layer(const sh_layout *z, int i)
{
    if (!z->spread) return z->R + i;
    return (int)(((long long)(i + 1) * z->L + z->Ls - 1) / z->Ls) - 1;
}

/* N ranks: each streamed layer's host state is this rank's shard of it, and a slot holds
 * the layer padded to one shard per rank (so that a gather fills it in place). */
static void set_ranks(sh_layout *z, int world, int rank)
{
    z->world = world;
    z->rank = rank;
    z->Sl = dp_shard_len(z->PL, world);
    z->SP = (size_t)world * z->Sl;
}

/* The real floats of this rank's shard of a layer (all of it on one rank). */
static size_t layout_shard_real(const sh_layout *z)
{
    return dp_shard_real(z->PL, z->Sl, z->rank);
}

/* Bytes of every allocation; plan, init and the -w auto choice share them. */
typedef struct sh_bytes {
    size_t embed, resident, slots, res_inputs, slot_inputs, x_out;
    uint64_t work_gpu, work_host; /* layer_work: activations (--recompute), ids, norms, ... */
    size_t host_params, host_grads, host_mv, host_ckpt, staging;
    size_t host_ahead; /* --clip-speculate: the second copies of params (pinned), m and v
                          of the K layers updated ahead, in all */
    size_t nvme_staging, disk_mv; /* --offload nvme: host staging; disk m, v of all streamed */
    size_t res_fresh; /* M > 1: two blocks, a resident layer's gradient of one micro-batch in
                         each in turn (with one, each resident layer's backward of micro-batches
                         after the first waited for the all-reduce of the layer above) */
    size_t embed_work, host_work; /* bf16: the embedding's and the streamed layers' working
                                     copies (0 in fp32) */
} sh_bytes;

static sh_bytes bytes_for(const sh_layout *z, const gpt_shape *sh)
{
    const size_t f = sizeof(float);
    sh_bytes b;
    b.embed = z->PE * f;                      /* each of params, grads, m, v */
    b.resident = (size_t)z->R * z->PL * f;    /* each of params, grads, m, v */
    b.slots = (size_t)z->S * z->SP * f;       /* grads (fp32: params too) */
    b.res_inputs = (size_t)z->R * z->NC * z->act;
    b.slot_inputs = (size_t)z->S * z->NC * z->act;
    b.x_out = z->NC * z->act;
    const int bf16 = z->dt == GPT_BF16;
    b.embed_work = bf16 ? gpt_act_bytes(z->PE, z->dt) : 0;
    b.host_work = bf16 ? gpt_act_bytes((size_t)z->Ls * z->Sl, z->dt) : 0;
    b.work_gpu = layer_work_gpu_bytes(sh, z->rec, z->world, z->M, z->dt);
    b.work_host = layer_work_host_bytes(sh, z->world, z->M);
    b.res_fresh = z->M > 1 ? 2 * z->PL * f : 0;
    b.host_params = b.host_grads = b.host_mv = (size_t)z->Ls * z->Sl * f;
    b.nvme_staging = b.disk_mv = 0;
    if (z->nvme && z->Ls) {
        b.host_mv = 0;
        /* this rank's shard of each streamed layer (N ranks of one machine: N tiers, each
         * under the machine's free disk split N ways, run.c) */
        b.nvme_staging = nvme_adam_staging_bytes(z->Sl, NVME_DEPTH, 0);
        b.disk_mv = (size_t)z->Ls * nvme_adam_block_disk_bytes(layout_shard_real(z), 0);
    }
    b.host_ckpt = (size_t)z->n_ckpt * z->NC * z->act;
    b.host_ahead = update_ahead_bytes(z->K, z->Sl);
    /* The staging block also serves -w auto's probe copies of one input. */
    size_t st = z->PE > z->PL ? z->PE : z->PL;
    b.staging = (st > z->NC ? st : z->NC) * f;
    return b;
}

/* Everything but the resident layers and the slots. */
static uint64_t gpu_common(const sh_bytes *b)
{
    return 4 * (uint64_t)b->embed + b->embed_work + b->x_out + b->work_gpu + b->res_fresh;
}
/* A resident layer: params, grads, m, v (fp32), its working copy (bf16) and its input. */
static uint64_t gpu_per_resident(const sh_layout *z)
{
    return 4 * z->PL * sizeof(float) + (z->dt == GPT_BF16 ? z->PL * z->act : 0) + z->NC * z->act;
}
/* A slot: params as the ops read them, grads (fp32) and the input. */
static uint64_t gpu_per_slot(const sh_layout *z)
{
    return z->SP * z->act + z->SP * sizeof(float) + z->NC * z->act;
}

static void plan_of(const sh_layout *z, const gpt_shape *sh, const engine_config *cfg, engine_plan *out)
{
    sh_bytes b = bytes_for(z, sh);
    *out = (engine_plan){0};
    out->gpu_bytes = gpu_common(&b) + (uint64_t)z->R * gpu_per_resident(z) +
                     (uint64_t)z->S * gpu_per_slot(z);
    out->host_bytes = 2 * (uint64_t)b.host_params + b.host_work + 2 * (uint64_t)b.host_mv + b.host_ckpt +
                      b.work_host + b.staging + b.nvme_staging + b.host_ahead;
    out->disk_bytes = b.disk_mv;
    engine_plan_add_comm(out, cfg, 1); /* (layer_work's gradients group, on N GPU ranks) */
}

/* --clip-speculate: how many streamed layers, from the top, are updated ahead of the norm
 * (runtime/update_ahead.h; not built with the disk tier, on N ranks or with micro-batches). */
static int ahead_layers(const engine_config *cfg, const sh_layout *z, const gpt_shape *sh)
{
    sh_layout base = *z;
    base.K = 0;
    engine_plan p;
    plan_of(&base, sh, cfg, &p);
    return update_ahead_blocks(cfg, !z->nvme && z->world == 1 && z->M == 1, 1, z->Ls, p.host_bytes, z->Sl);
}

/* The layout a run of cfg has with R resident layers and S slots, as `rank` (0 for plans):
 * its disk tier, micro-batches, shards and updates ahead; the placement is the caller's. */
static sh_layout run_layout(const engine_config *cfg, int R, int S, int rank)
{
    sh_layout z = layout_for(&cfg->shape, R, S, cfg->bf16, cfg->recompute);
    z.nvme = cfg->offload == OFFLOAD_NVME;
    z.M = engine_micro_batches(cfg);
    set_ranks(&z, engine_world(cfg), rank);
    z.K = ahead_layers(cfg, &z, &cfg->shape);
    return z;
}

/* -w W: the paper's layout (W resident, min(W, L-W) slots).  W >= L: every layer
 * resident.  At least two slots when two or more layers stream: with one, a layer's output
 * would overwrite its own input in the slot before that input is saved to the host. */
static void fixed_window(const gpt_shape *sh, int W, int *R, int *S)
{
    const int L = sh->layers;
    *R = W < L ? W : L;
    const int Ls = L - *R;
    *S = W < Ls ? W : Ls;
    if (*S < 2 && Ls >= 2) *S = 2;
}

/* -w auto's memory rule: with S slots, as many resident layers as `left` bytes of GPU
 * memory hold after a headroom for what the arena does not see: library workspaces and
 * allocator rounding (a twentieth of what is left, at most 512 MiB), and on N GPU ranks the
 * gradients group's NCCL memory (engine_comm_group_bytes: a window that filled the arena
 * failed its first all-gather on two H200s).  Every layer resident when they all fit.
 * Returns 0 when not even the S slots fit. */
static int auto_layout(const engine_config *cfg, uint64_t left, int S, int *R_out, int *S_out)
{
    const gpt_shape *sh = &cfg->shape;
    const int L = sh->layers;
    sh_layout z = layout_for(sh, 0, 0, cfg->bf16, GPT_RECOMPUTE_FULL); /* (the per-layer sizes only) */
    const uint64_t headroom =
        (left / 20 < (512ull << 20) ? left / 20 : (512ull << 20)) + engine_comm_group_bytes(cfg);
    if (left <= headroom) return 0;
    const uint64_t usable = left - headroom;
    const uint64_t per_res = gpu_per_resident(&z), per_slot = gpu_per_slot(&z);
    if ((uint64_t)L * per_res <= usable) {
        *R_out = L;
        *S_out = 0;
        return 1;
    }
    if (S > L) S = L;
    if ((uint64_t)S * per_slot > usable) return 0;
    uint64_t R = (usable - (uint64_t)S * per_slot) / per_res;
    if (R > (uint64_t)(L - S)) R = (uint64_t)(L - S);
    *R_out = (int)R;
    *S_out = S;
    return 1;
}

static void stronghold_plan(const engine_config *cfg, engine_plan *out)
{
    const gpt_shape *sh = &cfg->shape;
    int R = 0, S = sh->layers < 2 ? sh->layers : 2;
    if (cfg->window > 0) {
        fixed_window(sh, cfg->window, &R, &S);
    } else if (cfg->gpu_budget) {
        /* -w auto: the layout its memory rule gives under this budget, with the three slots
         * that hide the copies at the paper's shapes (init measures the real number). */
        sh_layout z0 = layout_for(sh, 0, 0, cfg->bf16, cfg->recompute);
        z0.M = engine_micro_batches(cfg);
        sh_bytes b0 = bytes_for(&z0, sh);
        const uint64_t common = gpu_common(&b0);
        if (cfg->gpu_budget <= common || !auto_layout(cfg, cfg->gpu_budget - common, 3, &R, &S)) {
            R = 0;
            S = sh->layers < 2 ? sh->layers : 2;
        }
    }
    /* (-w auto without a budget: the least it can run with, every layer streamed.) */
    const sh_layout z = run_layout(cfg, R, S, 0);
    plan_of(&z, sh, cfg, out);
    if (cfg->clip_speculate < 0) out->host_while_ahead = update_ahead_bytes(z.K, z.Sl);
}

/* ---- state ------------------------------------------------------------------------------ */

typedef struct slot_events {
    gpt_event *ready;     /* h2d: the slot holds its layer's params (and input, zeroed grads) */
    gpt_event *fwd_done;  /* compute: the slot's layer has run forward */
    gpt_event *x_off;     /* d2h: the slot's input has been saved to the host */
    gpt_event *bwd_done;  /* compute: the slot's layer has run backward */
} slot_events;

typedef struct stronghold_state {
    engine_env env;
    gpt_shape sh;
    sh_layout z;
    offload_streams io; /* compute, h2d and d2h streams, host Adam pool, busy spans */
    disk_tier *disk;      /* --offload nvme */
    nvme_adam *nvme;      /* --offload nvme: the host Adam of the streamed layers */
    int *nvme_block;      /* L: streamed layer k's block in nvme */
    engine_allocs mem;

    /* GPU */
    float *embed_p, *embed_g, *embed_m, *embed_v;
    void *embed_w;                        /* bf16: the embedding's working copy (fp32: embed_p) */
    float *res_p, *res_g, *res_m, *res_v; /* R layer blocks each */
    void *res_w;                          /* bf16: their working copies (fp32: res_p) */
    float *res_fresh;                     /* M > 1: two layer blocks (a micro-batch's grads) */
    gpt_event *res_fresh_free[2];         /* M > 1: block i has been added, may be reused */
    void *slot_p;                         /* S layer blocks each: params as the ops read them */
    float *slot_g;                        /* ... and grads */
    void *res_x, *slot_x, *x_out;         /* inputs: R, S, 1 of (N, C) */
    layer_work work;                      /* one layer's activations, scratch, head, ids,
                                             norms (+ pinned read-backs) */
    /* host */
    float *host_p, *host_g, *host_m, *host_v; /* Ls layer blocks each (m, v: not with nvme);
                                                 N ranks: this rank's shard of each */
    gpt_event *shard_up;      /* N ranks: h2d: this rank's shard of a slot's layer is up */
    uint16_t *host_w;                         /* bf16: the streamed layers' working copies */
    void *host_ckpt;                          /* n_ckpt (N, C) inputs */
    float *staging;

    slot_events *slot_ev;     /* S */
    gpt_event **grads_home;   /* L: layer k's grads are on the host */
    uint64_t *adam_ticket;    /* L: host Adam of layer k (0: none pending); nvme's with nvme */
    int adam_step;
    /* the forward's prefetches, in streamed order: issued up to (not including) streamed index
     * pf_next, allowed up to pf_want (the slots hold S ahead of the layer computing) */
    int pf_next, pf_want;
    /* --clip-speculate: the top K streamed layers' second copies (runtime/update_ahead.h) */
    update_ahead ahead; /* the top K layers, by layer index */
} stronghold_state;

static int alloc_in(stronghold_state *st, void **ptr, size_t bytes, mem_where where,
                    const char *what)
{
    return engine_alloc(&st->mem, where, ptr, bytes, what);
}

/* Wait for the host update with this ticket (in memory, or through the disk). */
static int wait_adam(stronghold_state *st, uint64_t ticket)
{
    return st->nvme ? nvme_adam_wait(st->nvme, ticket) : cpu_adam_wait(st->io.host_adam, ticket);
}

/* Whether layer k's host update of the step before is done (no wait).  The disk tier's
 * updates are taken as done: their prefetches are issued in order as before, waiting. */
static int adam_done_now(stronghold_state *st, int k)
{
    return !st->adam_ticket[k] || st->nvme || cpu_adam_done(st->io.host_adam, st->adam_ticket[k]);
}

static int wait_all_adam(stronghold_state *st)
{
    int rc = GPT_OK, r;
    for (int k = 0; k < st->z.L; k++)
        if (st->adam_ticket && st->adam_ticket[k] && (r = wait_adam(st, st->adam_ticket[k])) && !rc)
            rc = r;
    return rc;
}

static void stronghold_free(void *state)
{
    stronghold_state *st = state;
    if (!st) return;
    update_ahead_note_result(&st->ahead, &st->env, "stronghold");
    if (st->io.host_adam) {
        (void)wait_all_adam(st);
        nvme_adam_destroy(st->nvme); /* (its jobs run on the pool) */
    }
    disk_tier_close(st->disk);
    free(st->nvme_block);
    /* Waits for the host Adam pool and drains the streams: after a failed step, queued
     * work may still use the buffers freed below. */
    offload_streams_close(&st->io);
    layer_work_close_comm(&st->work);
    gpt_event_destroy(st->shard_up);
    gpt_event_destroy(st->res_fresh_free[0]);
    gpt_event_destroy(st->res_fresh_free[1]);
    if (st->slot_ev)
        for (int s = 0; s < st->z.S; s++) {
            gpt_event_destroy(st->slot_ev[s].ready);
            gpt_event_destroy(st->slot_ev[s].fwd_done);
            gpt_event_destroy(st->slot_ev[s].x_off);
            gpt_event_destroy(st->slot_ev[s].bwd_done);
        }
    if (st->grads_home)
        for (int k = 0; k < st->z.L; k++) gpt_event_destroy(st->grads_home[k]);
    free(st->slot_ev);
    update_ahead_close(&st->ahead);
    free(st->grads_home);
    free(st->adam_ticket);
    engine_free_all(&st->mem);
    free(st);
}

/* ---- where layer k's tensors are --------------------------------------------------------- */

static int streamed(const stronghold_state *st, int k) { return is_streamed(&st->z, k); }
/* Streamed layer k's slot: by its streamed index, round the ring. */
static int slot_of(const stronghold_state *st, int k) { return streamed_index(&st->z, k) % st->z.S; }
/* Offset of resident layer k's block among the resident blocks. */
static size_t resident_off(const stronghold_state *st, int k) { return (size_t)resident_index(&st->z, k) * st->z.PL; }

/* Layer k's params as the ops read them (bf16: the working copy). */
static void *params_of(stronghold_state *st, int k)
{
    const size_t act = st->z.act;
    if (!streamed(st, k)) return st->res_w ? (char *)st->res_w + resident_off(st, k) * act : (void *)(st->res_p + resident_off(st, k));
    return (char *)st->slot_p + (size_t)slot_of(st, k) * st->z.SP * act;
}
/* This rank's shard's place in streamed layer k's slot. */
static void *slot_shard(stronghold_state *st, int k)
{
    return (char *)params_of(st, k) + (size_t)st->z.rank * st->z.Sl * st->z.act;
}
/* The embedding as the ops read it. */
static void *embed_work(stronghold_state *st) { return st->embed_w ? st->embed_w : (void *)st->embed_p; }
static float *grads_of(stronghold_state *st, int k)
{
    return !streamed(st, k) ? st->res_g + resident_off(st, k)
                            : st->slot_g + (size_t)slot_of(st, k) * st->z.SP;
}
/* Layer k's input on the GPU; k == L is the head's input. */
static void *input_of(stronghold_state *st, int k)
{
    if (k == st->z.L) return st->x_out;
    const size_t bytes = st->z.NC * st->z.act;
    return !streamed(st, k) ? (char *)st->res_x + (size_t)resident_index(&st->z, k) * bytes
                            : (char *)st->slot_x + (size_t)slot_of(st, k) * bytes;
}
/* Streamed layer k's input kept on the host (input_leaves). */
static void *host_input(stronghold_state *st, int k)
{
    return (char *)st->host_ckpt + (size_t)streamed_index(&st->z, k) * st->z.NC * st->z.act;
}
/* Host copies of streamed layer k, by its streamed index. */
static size_t host_block(const stronghold_state *st, int k) { return (size_t)streamed_index(&st->z, k) * st->z.Sl; }

/* Streamed layer k's host state: the copy that is current (other = 0), or, for the top K
 * layers under --clip-speculate, the one an update ahead of the norm writes (other = 1). */
static ahead_state state_of(const stronghold_state *st, int k, int other)
{
    const size_t off = host_block(st, k);
    return update_ahead_state(&st->ahead, streamed_index(&st->z, k), st->host_p + off, st->host_m ? st->host_m + off : NULL,
                              st->host_v ? st->host_v + off : NULL, other);
}
/* Real floats of this rank's shard of a layer (the layer on one rank). */
static size_t shard_real(const stronghold_state *st) { return layout_shard_real(&st->z); }
/* What a prefetch of streamed layer k copies up: its working copy (bf16), or its params. */
static const void *prefetch_source(const stronghold_state *st, int k)
{
    if (st->host_w) return st->host_w + host_block(st, k);
    return state_of(st, k, 0).p;
}
/* Streamed layers below the top S keep their input on the host between fwd and bwd. */
static int input_leaves(const stronghold_state *st, int k)
{
    return streamed(st, k) && streamed_index(&st->z, k) < st->z.Ls - st->z.S;
}
/* The streamed layer i places above (i + S: the slot's next in the forward) or below
 * (i - S: in the backward) streamed layer k, or -1. */
static int ring_next(const stronghold_state *st, int k, int by)
{
    const int i = streamed_index(&st->z, k) + by;
    return i >= 0 && i < st->z.Ls ? streamed_layer(&st->z, i) : -1;
}

/* ---- -w auto ----------------------------------------------------------------------------- */

static void predict_layout(const engine_config *cfg, const machine_rates *m, int R, int S, int spread,
                           engine_prediction *out);

/* pred_walk_fn of a layout (ctx: its R, S and placement), and that layout's prediction with
 * host memory's load settled (what --predict gives for it). */
static void walk_layout(const engine_config *cfg, const machine_rates *m, const void *ctx, engine_prediction *out)
{
    const int *rs = ctx;
    predict_layout(cfg, m, rs[0], rs[1], rs[2], out);
}
static void predict_settled(const engine_config *cfg, const machine_rates *m, int R, int S, int spread,
                            engine_prediction *out)
{
    const int rs[3] = {R, S, spread};
    pred_settle(cfg, m, walk_layout, rs, out);
}

/* --placement: whether layout (R, S) spreads its resident layers between the streamed ones.
 * As the flag says; auto: -w W keeps the paper's window at the bottom; -w auto spreads them
 * where every streamed layer's host update runs during the backward (no clipping, or all of
 * them updated ahead of the norm).  Then what the forward waits for is its prefetches — a
 * layer's params take longer to come up than its forward takes — and the forward of the
 * resident layers between the streamed ones gives each copy time.  Where the updates wait
 * for the norm, the forward's first streamed layer waits for its update, and a window at the
 * bottom gives the updates the time of its forward.  (With a machine file and no clipping,
 * -w auto predicts both and takes the faster: spread_choices.) */
static int spread_rule(const engine_config *cfg, int R, int S)
{
    const gpt_shape *sh = &cfg->shape;
    if (R <= 0 || R >= sh->layers) return 0;
    if (cfg->placement != PLACE_AUTO) return cfg->placement == PLACE_SPREAD;
    if (cfg->window > 0) return 0;
    if (cfg->optim.clip <= 0) return 1;
    const sh_layout z = run_layout(cfg, R, S, 0);
    return z.K >= z.Ls;
}
/* The placements a machine model chooses between for layout (R, S): both under --placement
 * auto with -w auto and no clipping (where the model walks what the run does: with clipping
 * it takes every step to clip, and a run whose norm stays under the clip updates ahead of
 * it), else the one spread_rule gives (n of them into `out`). */
static int spread_choices(const engine_config *cfg, int R, int S, int out[2])
{
    if (cfg->placement == PLACE_AUTO && cfg->window <= 0 && cfg->optim.clip <= 0 && R > 0 && R < cfg->shape.layers) {
        out[0] = 0;
        out[1] = 1;
        return 2;
    }
    out[0] = spread_rule(cfg, R, S);
    return 1;
}

/* Slots that hide a slot's copies: it is refilled (grads out, then params and input in) while
 * the layers in the other S - 1 slots compute, so S - 1 >= copies / compute, and at least 2.
 * -w auto's rule, from a probe (choose_window) or a machine's rates (predicted_layout). */
static int slots_to_hide(double copies_ms, double layer_ms)
{
    const int S = 1 + (int)ceil(copies_ms / (layer_ms > 1e-3 ? layer_ms : 1e-3));
    return S < 2 ? 2 : S;
}

/* Whether layout (R, S)'s host plan fits the host budget the run has (no budget: it fits).
 * -w auto's plan takes three slots; a choice with more slots holds fewer layers resident
 * and so streams more of them through the host: it must fit there too. */
static int layout_fits_host(const engine_config *cfg, int R, int S)
{
    if (!cfg->host_budget) return 1;
    const sh_layout z = run_layout(cfg, R, S, 0);
    engine_plan p;
    plan_of(&z, &cfg->shape, cfg, &p);
    return p.host_bytes <= cfg->host_budget;
}

/* auto_layout with s slots, no more slots than streamed layers; 0 where s slots do not fit
 * `left` or every layer is resident (no slots). */
static int layout_with_slots(const engine_config *cfg, uint64_t left, int s, int *R, int *S)
{
    const int L = cfg->shape.layers;
    if (!auto_layout(cfg, left, s, R, S) || *S == 0) return 0;
    if (*S > L - *R) *S = L - *R;
    return 1;
}

/* -w auto's choice, the same in a run (S_need from its probe, m the calibrated machine or
 * NULL) and in a prediction (S_need from m's rates): the copy rule (S_need slots, as many
 * resident layers as `left` bytes of GPU memory hold), with fewer slots (more resident) where
 * the host budget does not hold that many streamed layers; then, with a machine, the slot
 * count and placement whose layout the engine's own schedule predicts fastest among those that
 * fit GPU and host (more slots hide more copies but leave room for fewer resident layers).
 * Returns 0 when not even the copy rule's slots fit `left`; rule_ms/best_ms (may be NULL) get
 * the rule's and the choice's predicted times (0 without a machine). */
static int auto_choice(const engine_config *cfg, const machine_rates *m, uint64_t left, int S_need, int *R_out,
                       int *S_out, int *spread_out, double *rule_ms, double *best_ms)
{
    const gpt_shape *sh = &cfg->shape;
    const int L = sh->layers;
    int R = 0, S = 0;
    if (!auto_layout(cfg, left, S_need, &R, &S)) return 0;
    if (S > L - R) S = L - R;
    /* Where the host does not hold the rule's layout: the nearest slot count whose layout
     * fits GPU and host (fewer slots first: more resident layers, fewer streamed; then more:
     * fewer inputs that leave a slot for the host). */
    for (int d = 1; S > 0 && !layout_fits_host(cfg, R, S) && d <= 32; d++) {
        for (int sign = -1; sign <= 1; sign += 2) {
            const int s = S_need + sign * d;
            int r2, t2;
            if (s < 2 || s > L || !layout_with_slots(cfg, left, s, &r2, &t2)) continue;
            if (layout_fits_host(cfg, r2, t2)) {
                R = r2;
                S = t2;
                break;
            }
        }
    }
    int spread = spread_rule(cfg, R, S);
    double rule = 0, best_t = 0;
    engine_prediction p;
    if (m && S > 0 && !pred_no_disk(cfg, m, &p) && !pred_no_collectives(cfg, m, &p)) {
        predict_settled(cfg, m, R, S, spread, &p);
        rule = best_t = p.ms;
        for (int s2 = 2; s2 <= L && s2 <= 32; s2++) {
            int r2, t2, choice[2];
            if (!layout_with_slots(cfg, left, s2, &r2, &t2) || !layout_fits_host(cfg, r2, t2)) continue;
            for (int c = 0, n = spread_choices(cfg, r2, t2, choice); c < n; c++) {
                predict_settled(cfg, m, r2, t2, choice[c], &p);
                if (p.modelled && p.ms < best_t * 0.995) best_t = p.ms, R = r2, S = t2, spread = choice[c];
            }
        }
    }
    *R_out = R;
    *S_out = S;
    *spread_out = spread;
    if (rule_ms) *rule_ms = rule;
    if (best_ms) *best_ms = best_t;
    return 1;
}

/* Time (ms) of what a host-GPU pair of calls did on a stream, measured with two events. */
static int timed(gpt_stream *s, gpt_event *a, gpt_event *b, float *ms)
{
    int rc = gpt_event_record(b, s);
    if (!rc) rc = gpt_stream_sync(s);
    if (!rc) rc = gpt_event_elapsed_ms(ms, a, b);
    return rc;
}

/* Measure one layer's compute and copies on a temporary slot, then choose S (enough
 * slots that a slot's copies finish while the layers in the other slots compute) and R (as
 * many resident layers as the GPU memory left holds). */
static int choose_window(stronghold_state *st, int *R_out, int *S_out, int *spread_out)
{
    const gpt_shape *sh = &st->sh;
    const int L = sh->layers;
    const int bf16 = st->env.cfg->bf16;
    sh_layout z = layout_for(sh, 0, 0, bf16, st->env.cfg->recompute);
    const mem_budget *gb = &st->env.gpu->budget;
    const uint64_t left = gb->limit > gb->in_use ? gb->limit - gb->in_use : 0;
    const uint64_t per_res = gpu_per_resident(&z);
    char a[32], b[32];
    format_bytes((double)left, a, sizeof a);

    int R = 0, S = 0;
    if (auto_layout(st->env.cfg, left, 2, &R, &S) && S == 0) {
        format_bytes((double)L * per_res, b, sizeof b);
        engine_note(&st->env, "stronghold -w auto: all %d layers fit on the GPU (%s of %s left): "
                              "every layer resident with GPU Adam, no transfers", L, b, a);
        *R_out = L;
        *S_out = 0;
        *spread_out = 0;
        return GPT_OK;
    }

    /* The probe: one slot, one layer's params from the staging block. */
    char *probe = NULL;
    const size_t act = z.act;
    int rc = alloc_in(st, (void **)&probe, z.PL * act + z.PL * sizeof(float) + z.NC * act, MEM_GPU,
                      "-w auto probe slot");
    if (rc) return rc;
    void *pp = probe, *px = probe + z.PL * act + z.PL * sizeof(float);
    float *pg = (float *)(probe + z.PL * act);
    gpt_event *e0 = NULL, *e1 = NULL;
    float ms_h2d = 0, ms_x = 0, ms_d2h = 0, ms_layer = 0;
    if ((rc = gpt_event_create(st->env.be, &e0)) || (rc = gpt_event_create(st->env.be, &e1)))
        goto out;
    engine_init_layer(&st->env, st->staging, sh, 0, st->env.cfg->seed);
    if (act != sizeof(float)) cpu_round_bf16_in_place(st->staging, z.PL);
    for (int rep = 0; rep < 2 && !rc; rep++) { /* the first round warms up the libraries */
        if ((rc = gpt_event_record(e0, st->io.h2d)) ||
            (rc = gpt_memcpy_h2d(st->io.h2d, pp, st->staging, z.PL * act)) ||
            (rc = timed(st->io.h2d, e0, e1, &ms_h2d)))
            break;
        if ((rc = gpt_event_record(e0, st->io.h2d)) ||
            (rc = gpt_memcpy_h2d(st->io.h2d, px, st->staging, z.NC * act)) ||
            (rc = timed(st->io.h2d, e0, e1, &ms_x)))
            break;
        if ((rc = gpt_stream_memset_zero(st->io.compute, pg, z.PL * sizeof(float))) ||
            (rc = gpt_stream_memset_zero(st->io.compute, st->work.dres, z.NC * act)) ||
            (rc = gpt_event_record(e0, st->io.compute)))
            break;
        gpt_layer_acts acts = layer_work_acts(&st->work, sh, 0);
        gpt_layer_forward(st->io.compute, sh, pp, px, st->x_out, &acts);
        gpt_layer_backward(st->io.compute, sh, pp, pg, px, st->work.dres, &acts, &st->work.scratch,
                           GPT_GRAD_ACCUMULATE);
        if ((rc = timed(st->io.compute, e0, e1, &ms_layer))) break;
        if ((rc = gpt_event_record(e0, st->io.d2h)) ||
            (rc = gpt_memcpy_d2h(st->io.d2h, st->staging, pg, z.PL * sizeof(float))) ||
            (rc = timed(st->io.d2h, e0, e1, &ms_d2h)))
            break;
    }
out:
    gpt_event_destroy(e0);
    gpt_event_destroy(e1);
    engine_free_last(&st->mem);
    if (rc) return rc;

    const int S_need = slots_to_hide((double)ms_d2h + ms_h2d + ms_x, ms_layer);
    const engine_config *cfg = st->env.cfg;
    int spread = 0;
    double rule_ms = 0, best_ms = 0;
    if (!auto_choice(cfg, cfg->machine, left, S_need, &R, &S, &spread, &rule_ms, &best_ms)) {
        /* Not even the ring fits: say so through the budget's record. */
        void *p = NULL;
        rc = alloc_in(st, &p, (size_t)S_need * gpu_per_slot(&z) + (size_t)left / 20,
                      MEM_GPU, "-w auto: the layer slots");
        if (rc == 0) engine_free_last(&st->mem);
        return rc ? rc : GPT_ERR_OOM;
    }
    if (best_ms < rule_ms)
        engine_note(&st->env, "stronghold -w auto: the machine model predicts %.1f ms with %d resident (%s) + %d slots "
                    "against %.1f ms with the copy rule's: taking the model's", best_ms, R,
                    spread ? "spread" : "bottom", S, rule_ms);
    format_bytes((double)per_res, b, sizeof b);
    engine_note(&st->env,
                "stronghold -w auto: one layer: compute %.2f ms (fwd, recompute %s, bwd), params in "
                "%.2f ms, input in %.2f ms, grads out %.2f ms -> %d slots hide the copies; %s of GPU "
                "memory left holds %d resident layers (%s each) -> window %d resident + %d slots of %d layers",
                ms_layer, gpt_recompute_name(st->work.recompute), ms_h2d, ms_x, ms_d2h, S, a, R, b, R, S, L);
    *R_out = R;
    *S_out = S;
    *spread_out = spread;
    return GPT_OK;
}

/* ---- init ----------------------------------------------------------------------------------- */

static int init_params(stronghold_state *st)
{
    const gpt_shape *sh = &st->sh;
    const sh_layout *z = &st->z;
    const uint64_t seed = st->env.cfg->seed;
    gpt_stream *s = st->io.compute;
    int rc;
    engine_init_embed(&st->env, st->staging, sh, seed);
    if ((rc = gpt_memcpy_h2d(s, st->embed_p, st->staging, z->PE * sizeof(float)))) return rc;
    if (st->embed_w) gpt_params_to_act(s, st->embed_w, st->embed_p, z->PE);
    if ((rc = gpt_stream_sync(s))) return rc;
    for (int k = 0; k < z->L; k++) {
        if (streamed(st, k)) continue;
        engine_init_layer(&st->env, st->staging, sh, k, seed);
        float *master = st->res_p + resident_off(st, k);
        if ((rc = gpt_memcpy_h2d(s, master, st->staging, z->PL * sizeof(float)))) return rc;
        if (st->res_w) gpt_params_to_act(s, params_of(st, k), master, z->PL);
        if ((rc = gpt_stream_sync(s))) return rc;
    }
    for (int k = 0; k < z->L; k++) {
        if (!streamed(st, k)) continue;
        if (z->world == 1) {
            engine_init_layer(&st->env, st->host_p + host_block(st, k), sh, k, seed);
            continue;
        }
        /* this rank's shard of the layer (padding: the allocation's zeros) */
        engine_init_layer(&st->env, st->staging, sh, k, seed);
        memcpy(st->host_p + host_block(st, k), st->staging + (size_t)z->rank * z->Sl,
               shard_real(st) * sizeof(float));
    }
    /* bf16: the streamed layers' working copies, rounded as the backends round */
    if (st->host_w) cpu_round_bf16(st->host_w, st->host_p, (size_t)z->Ls * z->Sl);
    /* host m and v: the allocations' zeros (with nvme, zeros on disk) */
    if ((rc = gpt_stream_memset_zero(s, st->embed_m, z->PE * sizeof(float))) ||
        (rc = gpt_stream_memset_zero(s, st->embed_v, z->PE * sizeof(float))))
        return rc;
    if (z->R) {
        const size_t res = (size_t)z->R * z->PL * sizeof(float);
        if ((rc = gpt_stream_memset_zero(s, st->res_m, res)) ||
            (rc = gpt_stream_memset_zero(s, st->res_v, res)))
            return rc;
    }
    return gpt_stream_sync(s);
}

/* --offload nvme: the disk tier under --nvme-dir, the pipeline, and a block (m, v, zeros)
 * for each streamed layer. */
static int open_nvme(stronghold_state *st)
{
    const engine_env *env = &st->env;
    const sh_layout *z = &st->z;
    int rc;
    if ((rc = disk_tier_open(&st->disk, env->cfg->nvme_dir, env->disk, 0)) ||
        (rc = nvme_adam_create(&st->nvme, st->disk, st->io.host_adam, env->host, z->Sl, NVME_DEPTH, 0)))
        return rc;
    st->nvme_block = calloc((size_t)z->L, sizeof *st->nvme_block);
    if (!st->nvme_block) return GPT_ERR_OOM;
    for (int k = 0; k < z->L; k++) {
        if (!streamed(st, k)) continue;
        char what[64];
        snprintf(what, sizeof what, "Adam m, v of layer %d", k);
        if ((rc = nvme_adam_add_block(st->nvme, layout_shard_real(z), what, &st->nvme_block[k])))
            return rc;
    }
    /* The zeros written here are not a step's traffic. */
    double busy, rd, wr;
    disk_tier_take_stats(st->disk, &busy, &rd, &wr);
    char d[32];
    format_bytes((double)z->Ls * nvme_adam_block_disk_bytes(layout_shard_real(z), 0), d, sizeof d);
    engine_note(env, "stronghold --offload nvme: Adam m, v of the %d streamed layers on disk (%s) in "
                "%s (O_DIRECT, names removed at once), %d staging slots",
                z->Ls, d, disk_tier_path(st->disk), NVME_DEPTH);
    return GPT_OK;
}

static int stronghold_init(const engine_env *env, void **state)
{
    *state = NULL;
    int rc = engine_init_check(&engine_stronghold, env);
    if (rc) return rc;
    stronghold_state *st = calloc(1, sizeof *st);
    if (!st) return GPT_ERR_OOM;
    st->env = *env;
    engine_allocs_init(&st->mem, env->gpu, env->host, env->be);
    st->sh = env->cfg->shape;
    *state = st;
    const gpt_shape *sh = &st->sh;
    const int L = sh->layers;
    /* Spans per micro-batch: fwd and bwd of every layer on compute, head and optimizer; one
     * h2d and one d2h per streamed layer and direction; on N ranks each layer's collectives
     * and (after the first micro-batch) its sum so far. */
    if ((rc = offload_streams_open(&st->io, env->be, env->cfg, 10 * L + 18))) return rc;

    /* What every placement needs, then the window, then the rest. */
    sh_layout z0 = layout_for(sh, 0, 0, env->cfg->bf16, env->cfg->recompute);
    z0.M = engine_micro_batches(env->cfg);
    sh_bytes b0 = bytes_for(&z0, sh);
    if ((b0.res_fresh && (rc = alloc_in(st, (void **)&st->res_fresh, b0.res_fresh, MEM_GPU,
                                        "a resident layer's micro-batch gradient (two blocks)"))) ||
        (rc = alloc_in(st, (void **)&st->embed_p, b0.embed, MEM_GPU, "embedding parameters")) ||
        (rc = alloc_in(st, (void **)&st->embed_g, b0.embed, MEM_GPU, "embedding gradients")) ||
        (rc = alloc_in(st, (void **)&st->embed_m, b0.embed, MEM_GPU, "embedding Adam m")) ||
        (rc = alloc_in(st, (void **)&st->embed_v, b0.embed, MEM_GPU, "embedding Adam v")) ||
        (b0.embed_work && (rc = alloc_in(st, &st->embed_w, b0.embed_work, MEM_GPU, "embedding working copy (bf16)"))) ||
        (rc = alloc_in(st, &st->x_out, b0.x_out, MEM_GPU, "last layer output")) ||
        (rc = layer_work_alloc(&st->work, &st->mem, sh, z0.rec, engine_world(env->cfg), z0.M, z0.dt)) ||
        (rc = layer_work_open_comm(&st->work, env->be, env->rank, env->world, env->dog)) ||
        (rc = alloc_in(st, (void **)&st->staging, b0.staging, MEM_PINNED, "staging block")))
        return rc;

    int R = 0, S = 0, spread = 0; /* (choose_window sets them; gcc cannot see it) */
    if (env->cfg->window > 0) {
        fixed_window(sh, env->cfg->window, &R, &S);
        spread = spread_rule(env->cfg, R, S);
        engine_note(env, "stronghold -w %d: %d resident layers, %d slots for the other %d%s",
                    env->cfg->window, R, S, L - R, env->cfg->window > L ? " (window > layers)" : "");
    } else if ((rc = choose_window(st, &R, &S, &spread))) {
        return rc;
    }
    st->z = run_layout(env->cfg, R, S, env->rank);
    st->z.spread = spread;
    if (R > 0 && R < L)
        engine_note(env, "stronghold placement: %s", spread ? "the resident layers spread between the streamed ones "
                    "(streamed layer i is layer ceil((i + 1) L / Ls) - 1)" : "the resident layers at the bottom (0 .. R-1)");
    sh_bytes b = bytes_for(&st->z, sh);
    if (R && ((rc = alloc_in(st, (void **)&st->res_p, b.resident, MEM_GPU, "resident layers' parameters")) ||
              (rc = alloc_in(st, (void **)&st->res_g, b.resident, MEM_GPU, "resident layers' gradients")) ||
              (rc = alloc_in(st, (void **)&st->res_m, b.resident, MEM_GPU, "resident layers' Adam m")) ||
              (rc = alloc_in(st, (void **)&st->res_v, b.resident, MEM_GPU, "resident layers' Adam v")) ||
              (st->z.dt == GPT_BF16 && (rc = alloc_in(st, &st->res_w, gpt_act_bytes((size_t)R * st->z.PL, st->z.dt), MEM_GPU,
                                              "resident layers' working copies (bf16)"))) ||
              (rc = alloc_in(st, &st->res_x, b.res_inputs, MEM_GPU, "resident layers' inputs"))))
        return rc;
    if (S && ((rc = alloc_in(st, &st->slot_p, gpt_act_bytes((size_t)S * st->z.SP, st->z.dt), MEM_GPU,
                             "layer slots' parameters")) ||
              (rc = alloc_in(st, (void **)&st->slot_g, b.slots, MEM_GPU, "layer slots' gradients")) ||
              (rc = alloc_in(st, &st->slot_x, b.slot_inputs, MEM_GPU, "layer slots' inputs")) ||
              /* (bf16: the prefetches read the working copy, so the fp32 params need no pinning) */
              (rc = alloc_in(st, (void **)&st->host_p, b.host_params, b.host_work ? MEM_HOST : MEM_PINNED,
                             "streamed layers' parameters")) ||
              (b.host_work && (rc = alloc_in(st, (void **)&st->host_w, b.host_work, MEM_PINNED,
                                             "streamed layers' working copies (bf16)"))) ||
              (rc = alloc_in(st, (void **)&st->host_g, b.host_grads, MEM_PINNED, "streamed layers' gradients"))))
        return rc;
    if (b.host_mv && ((rc = alloc_in(st, (void **)&st->host_m, b.host_mv, MEM_HOST, "streamed layers' Adam m")) ||
                      (rc = alloc_in(st, (void **)&st->host_v, b.host_mv, MEM_HOST, "streamed layers' Adam v"))))
        return rc;
    if (b.host_ckpt &&
        (rc = alloc_in(st, &st->host_ckpt, b.host_ckpt, MEM_PINNED, "streamed layers' inputs")))
        return rc;
    /* (by streamed index: the top K streamed layers) */
    if ((rc = update_ahead_open(&st->ahead, &st->mem, env->cfg, st->z.Ls - st->z.K, st->z.K, st->z.Sl))) return rc;
    update_ahead_note_plan(&st->ahead, env, "stronghold", st->z.Ls);

    st->slot_ev = calloc((size_t)(S ? S : 1), sizeof *st->slot_ev);
    st->grads_home = calloc((size_t)L, sizeof *st->grads_home);
    st->adam_ticket = calloc((size_t)L, sizeof *st->adam_ticket);
    if (!st->slot_ev || !st->grads_home || !st->adam_ticket) return GPT_ERR_OOM;
    if (st->z.world > 1) {
        if ((rc = gpt_event_create(env->be, &st->shard_up))) return rc;
    }
    for (int i = 0; i < 2 && st->res_fresh; i++)
        if ((rc = gpt_event_create(env->be, &st->res_fresh_free[i]))) return rc;
    for (int s = 0; s < S; s++)
        if ((rc = gpt_event_create(env->be, &st->slot_ev[s].ready)) ||
            (rc = gpt_event_create(env->be, &st->slot_ev[s].fwd_done)) ||
            (rc = gpt_event_create(env->be, &st->slot_ev[s].x_off)) ||
            (rc = gpt_event_create(env->be, &st->slot_ev[s].bwd_done)))
            return rc;
    for (int k = 0; k < L; k++)
        if (streamed(st, k) && (rc = gpt_event_create(env->be, &st->grads_home[k]))) return rc;
    if (b.disk_mv && (rc = open_nvme(st))) return rc;

    engine_plan p;
    plan_of(&st->z, sh, st->env.cfg, &p);
    char g[32], h[32];
    format_bytes((double)p.gpu_bytes, g, sizeof g);
    format_bytes((double)p.host_bytes, h, sizeof h);
    char dk[32];
    format_bytes((double)p.disk_bytes, dk, sizeof dk);
    engine_note(env, "stronghold plan: GPU %s (%d resident layers, %d slots), host %s, disk %s; host Adam: %s",
                g, R, S, h, dk, cpu_adam_isa(st->io.host_adam));
    return init_params(st);
}

static void stronghold_chosen_plan(void *state, engine_plan *out)
{
    stronghold_state *st = state;
    plan_of(&st->z, &st->sh, st->env.cfg, out);
    if (st->ahead.adaptive) out->host_while_ahead = update_ahead_bytes(st->ahead.count, st->ahead.block);
}

/* ---- one step -------------------------------------------------------------------------------- */

/* What the h2d stream put into layer k's slot is complete: on one rank at once; on N ranks
 * once every rank's shard of the layer is gathered into it (on the collectives' stream). */
static int slot_filled(stronghold_state *st, int k)
{
    slot_events *ev = &st->slot_ev[slot_of(st, k)];
    if (st->z.world == 1) return gpt_event_record(ev->ready, st->io.h2d);
    gpt_stream *cs = coll_stream(st->work.comm);
    int rc, span;
    if ((rc = gpt_event_record(st->shard_up, st->io.h2d)) || (rc = gpt_stream_wait_event(cs, st->shard_up)) ||
        (rc = span_begin(&st->io.spans, cs, BUSY_COMM, &span)) ||
        (rc = coll_all_gather(st->work.comm, params_of(st, k), slot_shard(st, k), st->z.Sl * st->z.act)) ||
        (rc = span_end(&st->io.spans, cs, span)))
        return rc;
    return gpt_event_record(ev->ready, cs);
}

/* Bring streamed layer k's params into its slot for the forward, once the slot's previous
 * layer has run forward and k's host update (from the previous step) is done. */
static int prefetch_forward(stronghold_state *st, int k, step_result *out)
{
    slot_events *ev = &st->slot_ev[slot_of(st, k)];
    int rc, span;
    if (st->adam_ticket[k] && (rc = wait_adam(st, st->adam_ticket[k]))) return rc;
    st->adam_ticket[k] = 0;
    if (ring_next(st, k, -st->z.S) >= 0 && (rc = gpt_stream_wait_event(st->io.h2d, ev->fwd_done))) return rc;
    const size_t bytes = shard_real(st) * st->z.act;
    if ((rc = span_begin(&st->io.spans, st->io.h2d, BUSY_H2D, &span)) ||
        (rc = gpt_memcpy_h2d(st->io.h2d, slot_shard(st, k), prefetch_source(st, k), bytes)) ||
        (rc = span_end(&st->io.spans, st->io.h2d, span)))
        return rc;
    out->bytes_h2d += (double)bytes;
    return slot_filled(st, k);
}

/* Issue the forward's pending prefetches in streamed order: each whose layer's host update
 * is done, and (need >= 0) every one up to streamed index `need`, waiting for their updates.
 * Why not wait for each as it comes: where the updates wait for the clipping norm they finish
 * during this forward, and the host thread that waits cannot queue the compute behind it.
 * When the S prefetches of the slots were issued first, waiting, no forward was queued until
 * S updates were done: the resident layers' forward, which could have run beside them, ran
 * after (stronghold l32 -w 15 at the artifact's clip: 1.10x of its clipped bound). */
static int issue_prefetches(stronghold_state *st, int need, step_result *out)
{
    while (st->pf_next < st->pf_want) {
        const int k = streamed_layer(&st->z, st->pf_next);
        if (st->pf_next > need && !adam_done_now(st, k)) break;
        const int rc = prefetch_forward(st, k, out);
        if (rc) return rc;
        st->pf_next++;
    }
    return GPT_OK;
}

/* Bring streamed layer j's params and input into its slot for the backward, once the
 * slot's previous layer (S streamed layers above) has sent its grads home; zero the slot's
 * grads. */
static int prefetch_backward(stronghold_state *st, int j, step_result *out)
{
    int rc, span;
    const size_t bytes = shard_real(st) * st->z.act, input_bytes = st->z.NC * st->z.act;
    if ((rc = gpt_stream_wait_event(st->io.h2d, st->grads_home[ring_next(st, j, st->z.S)])) ||
        (rc = span_begin(&st->io.spans, st->io.h2d, BUSY_H2D, &span)) ||
        (rc = gpt_memcpy_h2d(st->io.h2d, slot_shard(st, j), prefetch_source(st, j), bytes)) ||
        (rc = gpt_memcpy_h2d(st->io.h2d, input_of(st, j), host_input(st, j), input_bytes)) ||
        (rc = gpt_stream_memset_zero(st->io.h2d, grads_of(st, j), st->z.SP * sizeof(float))) ||
        (rc = span_end(&st->io.spans, st->io.h2d, span)))
        return rc;
    out->bytes_h2d += (double)bytes + (double)input_bytes;
    return slot_filled(st, j);
}

/* Queue layer k's host update with the clipping scale, to start once its grads are home: in
 * place, or (ahead: the top K layers under --clip-speculate) from the current copy of its
 * state into the other.  It uses the Adam step the coming optimizer phase will count
 * (st->adam_step + 1). */
static int submit_host_adam(stronghold_state *st, int k, step_result *out, float scale, int ahead)
{
    const size_t off = host_block(st, k);
    /* this rank's shard [r Sl, r Sl + n) of the layer against its decay range */
    const size_t n = shard_real(st), lo = (size_t)st->z.rank * st->z.Sl;
    const size_t decay = gpt_layer_layout_of(&st->sh).n_decay;
    const size_t n_decay = decay <= lo ? 0 : decay - lo < n ? decay - lo : n;
    if (st->nvme) {
        nvme_adam_job job = {
            .block = st->nvme_block[k], .params = st->host_p + off, .grads = st->host_g + off,
            .n_decay = n_decay, .optim = st->env.cfg->optim,
            .lr = (float)out->lr, .t = st->adam_step + 1, .grad_scale = scale,
            .after = st->grads_home[k], .params_bf16 = st->host_w ? st->host_w + off : NULL,
        };
        out->host_adam_params += (double)n;
        return nvme_adam_submit(st->nvme, &job, &st->adam_ticket[k]);
    }
    cpu_adam_job job = {
        .grads = st->host_g + off, .n = n, .n_decay = n_decay,
        .optim = st->env.cfg->optim, .lr = (float)out->lr, .t = st->adam_step + 1,
        .grad_scale = scale, .after = st->grads_home[k], .params_bf16 = st->host_w ? st->host_w + off : NULL,
    };
    update_ahead_job(&st->ahead, streamed_index(&st->z, k), st->host_p + off, st->host_m + off, st->host_v + off, ahead, &job);
    out->host_adam_params += (double)n;
    return cpu_adam_submit(st->io.host_adam, &job, &st->adam_ticket[k]);
}

static int forward(stronghold_state *st, step_result *out)
{
    const gpt_shape *sh = &st->sh;
    const sh_layout *z = &st->z;
    gpt_stream *c = st->io.compute;
    int rc, span;
    /* The first S streamed layers: in micro-batches after the first they are in their slots
     * still, from the backward before (whose last prefetches brought them; no update since). */
    const int first = z->S < z->Ls ? z->S : z->Ls;
    st->pf_next = st->work.micro == 0 ? 0 : first;
    st->pf_want = first;
    if ((rc = issue_prefetches(st, -1, out))) return rc;

    if ((rc = span_begin(&st->io.spans, c, BUSY_COMPUTE, &span))) return rc;
    gpt_embed_forward(c, sh, embed_work(st), st->work.ids, input_of(st, 0));
    if ((rc = span_end(&st->io.spans, c, span))) return rc;
    for (int k = 0; k < z->L; k++) {
        slot_events *ev = streamed(st, k) ? &st->slot_ev[slot_of(st, k)] : NULL;
        /* (its own prefetch now, waiting for its update if need be; the host queued all
         * before without waiting) */
        if (ev && (rc = issue_prefetches(st, streamed_index(z, k), out))) return rc;
        if (ev && (rc = gpt_stream_wait_event(c, ev->ready))) return rc;
        /* The output goes into the next layer's slot: its previous layer's input must have
         * been saved first. */
        const int next = k + 1;
        if (next < z->L && streamed(st, next) && ring_next(st, next, -z->S) >= 0 &&
            (rc = gpt_stream_wait_event(c, st->slot_ev[slot_of(st, next)].x_off)))
            return rc;
        if ((rc = span_begin(&st->io.spans, c, BUSY_COMPUTE, &span))) return rc;
        gpt_layer_acts acts = layer_work_acts(&st->work, sh, k);
        gpt_layer_forward(c, sh, params_of(st, k), input_of(st, k), input_of(st, next), &acts);
        if ((rc = span_end(&st->io.spans, c, span))) return rc;
        if (!ev) {
            if ((rc = issue_prefetches(st, -1, out))) return rc;
            continue;
        }
        if ((rc = gpt_event_record(ev->fwd_done, c))) return rc;
        if (input_leaves(st, k)) {
            if ((rc = gpt_stream_wait_event(st->io.d2h, ev->fwd_done)) ||
                (rc = span_begin(&st->io.spans, st->io.d2h, BUSY_D2H, &span)) ||
                (rc = gpt_memcpy_d2h(st->io.d2h, host_input(st, k), input_of(st, k), z->NC * z->act)) ||
                (rc = span_end(&st->io.spans, st->io.d2h, span)) ||
                (rc = gpt_event_record(ev->x_off, st->io.d2h)))
                return rc;
            out->bytes_d2h += (double)z->NC * z->act;
        }
        /* its slot may take the streamed layer S above */
        if (ring_next(st, k, z->S) >= 0) st->pf_want = streamed_index(z, k) + z->S + 1;
        if ((rc = issue_prefetches(st, -1, out))) return rc;
    }
    return layer_work_head_forward(&st->work, &st->io.spans, c, sh, embed_work(st), st->embed_g,
                                   st->x_out);
}

static int backward(stronghold_state *st, step_result *out)
{
    const gpt_shape *sh = &st->sh;
    const sh_layout *z = &st->z;
    gpt_stream *c = st->io.compute;
    int rc, span;
    if ((rc = layer_work_head_backward(&st->work, &st->io.spans, c, sh, embed_work(st), st->embed_g,
                                       st->x_out)))
        return rc;
    const int micro = st->work.micro;
    for (int j = z->L - 1, fresh = 0; j >= 0; j--) {
        const int is_str = streamed(st, j);
        slot_events *ev = is_str ? &st->slot_ev[slot_of(st, j)] : NULL;
        /* A resident layer's grads of micro-batches after the first go into a res_fresh block
         * (the two in turn, once the resident layer two above is done with it), to be reduced
         * and added to its sum. */
        const int into_fresh = !is_str && micro > 0, block = into_fresh ? fresh++ % 2 : 0;
        float *grads = into_fresh ? st->res_fresh + (size_t)block * z->PL : grads_of(st, j);
        if (is_str) {
            /* The top S layers are still in their slots from the forward; the slot's last
             * layer in the micro-batch before (streamed index: its slot) must have sent its
             * grads home. */
            if (streamed_index(z, j) < z->Ls - z->S) {
                if ((rc = gpt_stream_wait_event(c, ev->ready))) return rc;
            } else if ((micro > 0 &&
                        (rc = gpt_stream_wait_event(c, st->grads_home[streamed_layer(z, slot_of(st, j))]))) ||
                       (rc = gpt_stream_memset_zero(c, grads, z->SP * sizeof(float)))) {
                return rc;
            }
        } else if (micro > 0 && ((rc = gpt_stream_wait_event(c, st->res_fresh_free[block])) ||
                                 (rc = gpt_stream_memset_zero(c, grads, z->PL * sizeof(float))))) {
            return rc;
        }
        if ((rc = span_begin(&st->io.spans, c, BUSY_COMPUTE, &span))) return rc;
        gpt_layer_acts acts = layer_work_backward_acts(&st->work, sh, j);
        gpt_layer_backward(c, sh, params_of(st, j), grads, input_of(st, j), st->work.dres, &acts,
                           &st->work.scratch, GPT_GRAD_ACCUMULATE);
        /* N ranks: a resident layer's grads are all-reduced (every rank runs its GPU Adam); a
         * streamed layer's are reduce-scattered and only this rank's shard goes home (fin:
         * the stream on which they are final).  Micro-batches after the first add the
         * earlier ones' sum (runtime/layer_work.h). */
        gpt_stream *fin = c;
        if ((rc = span_end(&st->io.spans, c, span))) return rc;
        if (!is_str) {
            if (micro == 0) {
                rc = layer_work_reduce(&st->work, &st->io.spans, c, 1 + j, grads, z->PL, &fin);
            } else if (!(rc = layer_work_reduce_add(&st->work, &st->io.spans, c, 1 + j, grads,
                                                    grads_of(st, j), z->PL, &fin))) {
                rc = gpt_event_record(st->res_fresh_free[block], fin);
            }
            if (rc) return rc;
            continue;
        }
        if ((rc = layer_work_reduce_home(&st->work, &st->io.spans, c, 1 + j, grads, z->PL,
                                         st->host_g + host_block(st, j), st->grads_home[j], out,
                                         &fin)))
            return rc;
        const size_t bytes = shard_real(st) * sizeof(float);
        if ((rc = gpt_event_record(ev->bwd_done, fin)) ||
            (rc = gpt_stream_wait_event(st->io.d2h, ev->bwd_done)) ||
            (rc = span_begin(&st->io.spans, st->io.d2h, BUSY_D2H, &span)) ||
            (rc = gpt_memcpy_d2h(st->io.d2h, st->host_g + host_block(st, j),
                                 grads_of(st, j) + (size_t)z->rank * z->Sl, bytes)) ||
            (rc = span_end(&st->io.spans, st->io.d2h, span)) ||
            (rc = gpt_event_record(st->grads_home[j], st->io.d2h)))
            return rc;
        out->bytes_d2h += (double)bytes;
        if (st->env.cfg->optim.clip <= 0 && layer_work_last_micro(&st->work) &&
            (rc = submit_host_adam(st, j, out, 1.0f, 0)))
            return rc;
        /* --clip-speculate: as if the norm will not clip (scale 1, bit for bit what the step
         * gives when it does not), into the other copy of the layer's state */
        if (update_ahead_now(&st->ahead, streamed_index(z, j)) && (rc = submit_host_adam(st, j, out, 1.0f, 1)))
            return rc;
        const int down = ring_next(st, j, -z->S);
        if (down >= 0 && (rc = prefetch_backward(st, down, out))) return rc;
    }
    if ((rc = span_begin(&st->io.spans, c, BUSY_COMPUTE, &span))) return rc;
    layer_work_embed_backward(&st->work, c, sh, st->embed_g);
    if ((rc = span_end(&st->io.spans, c, span))) return rc;
    /* the embedding's grads accumulate in place over the micro-batches: reduced once; the
     * resident layers' additions must be done before the next micro-batch reuses res_fresh's blocks
     * (the compute stream waits for every reduction at the last) */
    if (!layer_work_last_micro(&st->work)) return GPT_OK;
    gpt_stream *fin;
    if ((rc = layer_work_reduce(&st->work, &st->io.spans, c, 0, st->embed_g, z->PE, &fin)))
        return rc;
    /* (the compute stream waits for every reduction: the GPU Adam reads those grads) */
    return layer_work_read_norms(&st->work, c, sh);
}

static int optimizer(stronghold_state *st, step_result *out)
{
    const sh_layout *z = &st->z;
    const gpt_optim *o = &st->env.cfg->optim;
    gpt_stream *c = st->io.compute;
    int rc, span;
    const float lr = (float)out->lr, scale = gpt_clip_scale(o, out->grad_norm);
    const int t = st->adam_step + 1;
    gpt_layer_layout ll = gpt_layer_layout_of(&st->sh);
    gpt_embed_layout el = gpt_embed_layout_of(&st->sh);
    if ((rc = span_begin(&st->io.spans, c, BUSY_COMPUTE, &span))) return rc;
    /* (bf16: the working copies refreshed in the same pass) */
    gpt_block_adamw_act(c, st->embed_p, st->embed_w, st->embed_g, st->embed_m, st->embed_v, z->PE, el.n_decay, o,
                    lr, t, scale);
    for (int k = 0; k < z->L; k++) {
        if (streamed(st, k)) continue;
        const size_t off = resident_off(st, k);
        gpt_block_adamw_act(c, st->res_p + off, st->res_w ? params_of(st, k) : NULL, st->res_g + off, st->res_m + off,
                            st->res_v + off, z->PL, ll.n_decay, o, lr, t, scale);
    }
    if ((rc = span_end(&st->io.spans, c, span))) return rc;
    /* Ascending, so that the next forward, which needs the lowest streamed layer first,
     * waits least.
     * (Without clipping they were queued during the backward; with --clip-speculate the top
     * K were too, as if the norm would not clip: done again from the current copy when it
     * did, overwriting the other; then the other copy is the current one.) */
    if (o->clip > 0) {
        for (int i = 0; i < z->Ls; i++) {
            const int k = streamed_layer(z, i), ahead = update_ahead_now(&st->ahead, i);
            if ((!ahead || scale != 1.0f) && (rc = submit_host_adam(st, k, out, scale, ahead))) return rc;
            if (ahead) update_ahead_swap(&st->ahead, i);
        }
    }
    return GPT_OK;
}

/* bf16, a skipped step: the streamed layers updated ahead wrote their working copies, and their
 * updates are dropped: round the params they keep into them again (once those jobs are done;
 * nothing reads a working copy before the layer's next prefetch, which waits for them). */
static int restore_working_copies(stronghold_state *st)
{
    for (int i = 0; st->host_w && i < st->z.Ls; i++) {
        const int k = streamed_layer(&st->z, i);
        if (!update_ahead_now(&st->ahead, i)) continue;
        int rc;
        if (st->adam_ticket[k] && (rc = wait_adam(st, st->adam_ticket[k]))) return rc;
        st->adam_ticket[k] = 0;
        const float *p = state_of(st, k, 0).p;
        cpu_round_bf16(st->host_w + host_block(st, k), p, shard_real(st));
    }
    return GPT_OK;
}

/* One micro-batch's forward and backward (layer_work_micro_batches runs them). */
static int forward_pass(void *engine, step_result *out) { return forward(engine, out); }
static int backward_pass(void *engine, step_result *out) { return backward(engine, out); }

static int stronghold_step(void *state, int iteration, const int32_t *tokens,
                           const int32_t *targets, step_result *out)
{
    stronghold_state *st = state;
    const sh_layout *z = &st->z;
    const engine_config *cfg = st->env.cfg;
    gpt_stream *c = st->io.compute;
    int rc;
    if ((rc = offload_streams_begin_step(&st->io, out, st->work.ids, tokens, targets, z->N)))
        return rc;
    out->lr = gpt_lr_at(&cfg->optim, iteration);
    if ((rc = update_ahead_begin_step(&st->ahead))) return rc;

    if ((rc = gpt_stream_memset_zero(c, st->embed_g, z->PE * sizeof(float))) ||
        (z->R && (rc = gpt_stream_memset_zero(c, st->res_g, (size_t)z->R * z->PL * sizeof(float)))))
        return rc;
    double phases[3]; /* (layer_work_micro_batches: the phase marks) */
    if ((rc = layer_work_micro_batches(&st->work, c, tokens, targets, &st->sh, forward_pass,
                                       backward_pass, st, out, phases)))
        return rc;

    /* (a streamed layer's norm entries are each rank's own: the tables are gathered) */
    if ((z->Ls && (rc = layer_work_gather_norm_tables(&st->work, &st->sh))) ||
        (rc = layer_work_outcome(&st->work, &st->sh, out)))
        return rc;
    if (!out->skipped && (rc = optimizer(st, out))) return rc;
    if (out->skipped && (rc = restore_working_copies(st))) return rc;
    /* (a skipped step, a gradient not finite: the copies written ahead are dropped, the
     * current ones stay current) */
    const int give_back = update_ahead_end_step(&st->ahead, out, gpt_clip_scale(&cfg->optim, out->grad_norm));
    /* Without clipping the streamed layers were already updated with this step number. */
    if (!out->skipped || cfg->optim.clip <= 0) st->adam_step++;
    /* The copies of this step are done by now or nearly; waiting for them keeps every
     * buffer's owner obvious at the step boundary.  The host Adam goes on. */
    if ((rc = offload_streams_end_step(&st->io, out, phases))) return rc;
    /* --clip-speculate auto after clipped steps in a row: the second copies go (the copies of
     * the step are done; its host updates, which may write them, are waited for first) */
    if (give_back) {
        if ((rc = wait_all_adam(st))) return rc;
        update_ahead_give_back(&st->ahead, st->host_p, st->host_m, st->host_v);
    }
    out->bytes_disk_read = out->bytes_disk_write = 0;
    if (st->disk) {
        disk_tier_take_stats(st->disk, &out->busy_ms[BUSY_DISK], &out->bytes_disk_read,
                             &out->bytes_disk_write);
    }
    return GPT_OK;
}

static int stronghold_read_params(void *state, float *host_params)
{
    stronghold_state *st = state;
    const sh_layout *z = &st->z;
    int rc;
    if ((rc = wait_all_adam(st))) return rc;
    for (int k = 0; k < z->L; k++) st->adam_ticket[k] = 0;
    if ((rc = gpt_memcpy_d2h(st->io.compute, host_params, st->embed_p, z->PE * sizeof(float)))) return rc;
    for (int k = 0; k < z->L; k++) {
        float *dst = host_params + z->PE + (size_t)k * z->PL;
        if (!streamed(st, k)) {
            if ((rc = gpt_memcpy_d2h(st->io.compute, dst, st->res_p + resident_off(st, k), z->PL * sizeof(float))))
                return rc;
        } else if (z->world == 1) {
            memcpy(dst, state_of(st, k, 0).p, z->PL * sizeof(float));
        } else if ((rc = dp_gather_layers(st->work.comm, st->host_p + host_block(st, k), z->PL, 1, dst))) {
            /* N ranks: every rank's shards of the layer */
            return rc;
        }
    }
    return gpt_stream_sync(st->io.compute);
}

/* ---- prediction --------------------------------------------------------------------------- */

/* The layout on machine m: -w W the paper's; -w auto init's rule with the slot count that
 * hides a slot's copies (choose_window), from the machine's rates instead of a probe. */
static void predicted_layout(const engine_config *cfg, const machine_rates *m, int *R, int *S, int *spread)
{
    const gpt_shape *sh = &cfg->shape;
    if (cfg->window > 0) {
        fixed_window(sh, cfg->window, R, S);
        *spread = spread_rule(cfg, *R, *S);
        return;
    }
    sh_layout z0 = layout_for(sh, 0, 0, cfg->bf16, cfg->recompute);
    const double per_float = (double)z0.act / sizeof(float); /* (bf16: the copies up move half) */
    const int S_need = slots_to_hide(pred_d2h_ms(m, (double)z0.PL) + pred_h2d_ms(m, per_float * ((double)z0.PL + z0.NC)),
                                     m->layer_fwd_ms + pred_layer_bwd_ms(m, cfg, 0)); /* (a streamed layer) */
    sh_bytes b0 = bytes_for(&z0, sh);
    const uint64_t common = gpu_common(&b0);
    if (!cfg->gpu_budget || cfg->gpu_budget <= common ||
        !auto_choice(cfg, m, cfg->gpu_budget - common, S_need, R, S, spread, NULL, NULL)) {
        *R = 0;
        *S = sh->layers < 2 ? sh->layers : S_need;
        if (*S > sh->layers) *S = sh->layers;
        *spread = spread_rule(cfg, *R, *S);
    }
}

/* The forward's prefetches in the model, as issue_prefetches issues them (streamed indices
 * next .. want - 1 pending; in the first micro-batch each waits for its layer's update). */
typedef struct pred_prefetches {
    const sh_layout *z;
    const int *layer_of; /* each streamed index's layer (streamed_layer) */
    pred_timeline *t;
    const machine_rates *m;
    int S, world, first_mb, next, want;
    const double *adam_done, *fwd_done;
    double *ready, layer_h2d, gather_ms;
} pred_prefetches;

static void pred_issue_prefetches(pred_prefetches *pf, int need, double *host)
{
    while (pf->next < pf->want) {
        const int i = pf->next, k = pf->layer_of[i];
        const double update = pf->first_mb ? pf->adam_done[k] : 0;
        if (i > need && update > *host) break;
        *host = pred_max(*host, update);
        /* (the slot's layer before, S streamed layers below, must have run forward) */
        const double slot_free = i >= pf->S ? pf->fwd_done[pf->layer_of[i - pf->S]] : 0;
        pf->ready[k] = pred_run(pf->t, BUSY_H2D, pf->layer_h2d, pred_max(*host, slot_free));
        if (pf->world > 1) pf->ready[k] = pred_run_coll(pf->t, pf->m, PRED_ALL_GATHER, pf->gather_ms, pf->ready[k]);
        pf->next++;
    }
}

/* The step on machine m (one micro-batch, --offload cpu), in the order of forward, backward
 * and optimizer above: a streamed layer's forward waits for its prefetch, which the host
 * issues in streamed order once that layer's host Adam of the step before is done, waiting
 * for it only when that layer's forward is next (pred_issue_prefetches); its input leaves after its forward, and the
 * slot's next layer comes in; in the backward each streamed layer's grads go home and the
 * slot's layer S below comes in; the host Adam runs after the global norm (with clipping) or
 * as each layer's grads arrive.  N ranks (the collectives calibrated at that world, on their
 * one stream): a prefetch brings this rank's shard up and all-gathers the layer in the slot; a
 * streamed layer's grads are reduce-scattered before its shard goes home, a resident layer's
 * and the embedding's all-reduced, and the GPU Adam waits for them all; each rank updates its
 * shard of every streamed layer on the host (pred_host_share).  Micro-batches: each runs the
 * forward and backward again (the first S streamed layers still in their slots); from the
 * second on each streamed layer's sum so far comes up before its grads go home; the host Adam
 * after the last.  Walked for three steps: the last is the steady one.  (This is the step with R resident layers and S slots;
 * stronghold_predict picks them.) */
static void predict_layout(const engine_config *cfg, const machine_rates *measured, int R, int S, int spread,
                           engine_prediction *out)
{
    memset(out, 0, sizeof *out);
    const machine_rates scaled = pred_scaled(measured), *m = &scaled; /* (its GPU does megatron-lm's per-layer work) */
    sh_layout z = layout_for(&cfg->shape, R, S, cfg->bf16, cfg->recompute);
    const int world = engine_world(cfg), M = engine_micro_batches(cfg);
    set_ranks(&z, world, 0);
    z.spread = spread;
    /* (with clipping every step is taken to clip, as at --clip-grad 1.0 on the synthetic
     * corpus: --clip-speculate's updates ahead are redone and the next step waits for the
     * norm.  A run whose norm stays under its clip runs as predicted for --clip-grad 0.) */
    const int L = z.L, clip = cfg->optim.clip > 0;
    /* --offload nvme: each streamed layer's m and v read from disk and written back */
    const double mv = cfg->offload == OFFLOAD_NVME ? 2.0 * z.Sl : 0;
    double *adam_done = pred_arrays(out, (size_t)L, 4);
    /* each layer's streamed index (-1: resident), and each streamed index's layer: looked up
     * every layer of every walk, their divisions were a fifth of --search's time */
    int *streamed_at = adam_done ? malloc(2 * (size_t)L * sizeof *streamed_at) : NULL;
    if (!streamed_at) {
        free(adam_done);
        snprintf(out->why, sizeof out->why, "out of memory");
        return;
    }
    int *layer_of = streamed_at + L;
    for (int k = 0; k < L; k++) streamed_at[k] = is_streamed(&z, k) ? streamed_index(&z, k) : -1;
    for (int i = 0; i < z.Ls; i++) layer_of[i] = streamed_layer(&z, i);
    double *home = adam_done + L, *ready = home + L, *fwd_done = ready + L;
    const double per_float = (double)z.act / sizeof(float); /* (bf16: params and inputs move in half the bytes) */
    const double layer_h2d = pred_h2d_ms(m, per_float * z.Sl), input_h2d = pred_h2d_ms(m, per_float * z.NC);
    const double grads_d2h = pred_d2h_ms(m, (double)z.Sl), input_d2h = pred_d2h_ms(m, per_float * z.NC);
    const double adam_ms = pred_host_share(cfg, m) * pred_host_adam_ms(m, (double)z.Sl);
    const double gather_ms = world > 1 ? pred_coll_ms(m->ag_ms, m->ag_gbs, per_float * z.SP) : 0;
    const double reduce_ms = world > 1 ? pred_coll_ms(m->rs_ms, m->rs_gbs, (double)z.SP) : 0;
    const double layer_ar_ms = world > 1 ? pred_coll_ms(m->ar_ms, m->ar_gbs, (double)z.PL) : 0;
    const double embed_ar_ms = world > 1 ? pred_coll_ms(m->ar_ms, m->ar_gbs, (double)z.PE) : 0;
    const double landing_ms = pred_h2d_ms(m, (double)z.Sl); /* (micro-batches: the sum so far, up) */
    pred_timeline t = {0};
    double start = 0, end = 0;
    for (int step = 0; step < 3; step++) {
        start = end;
        pred_step(&t, start);
        double host = start, c = start; /* the host thread's issue clock; compute */
        double reduced = start; /* the collectives' stream: the last reduction's end */
        double res_fresh_free[2] = {start, start}; /* M > 1, N ranks: each res_fresh block added */
        for (int mb = 0; mb < M; mb++) {
            const int last = mb == M - 1;
            /* the first S streamed layers: later micro-batches find them in their slots still
             * (the backward before brought them); the prefetches as issue_prefetches issues
             * them: in streamed order, each once its update is done by the host's clock, and
             * a layer's own before its forward, the host waiting for its update there */
            pred_prefetches pf = {.z = &z, .layer_of = layer_of, .t = &t, .m = m, .S = S, .world = world, .first_mb = mb == 0, .adam_done = adam_done,
                                  .fwd_done = fwd_done, .ready = ready, .layer_h2d = layer_h2d, .gather_ms = gather_ms};
            pf.next = mb == 0 ? 0 : (S < z.Ls ? S : z.Ls);
            pf.want = S < z.Ls ? S : z.Ls;
            pred_issue_prefetches(&pf, -1, &host);
            c = pred_run(&t, BUSY_COMPUTE, m->embed_fwd_ms, pred_max(c, host));
            for (int k = 0; k < L; k++) {
                const int i = streamed_at[k], streamed = i >= 0;
                if (streamed) pred_issue_prefetches(&pf, i, &host);
                c = pred_run(&t, BUSY_COMPUTE, m->layer_fwd_ms, pred_max(host, streamed ? pred_max(c, ready[k]) : c));
                if (!streamed) {
                    pred_issue_prefetches(&pf, -1, &host);
                    continue;
                }
                fwd_done[k] = c;
                if (i < z.Ls - S) pred_run(&t, BUSY_D2H, input_d2h, c);
                if (i + S < z.Ls) pf.want = i + S + 1;
                pred_issue_prefetches(&pf, -1, &host);
            }
            c = pred_run(&t, BUSY_COMPUTE, m->head_ms, pred_max(c, host));
            for (int j = L - 1, fresh = 0; j >= 0; j--) {
                const int i = streamed_at[j], streamed = i >= 0;
                /* a resident layer of a micro-batch after the first takes a res_fresh block in
                 * turn: on N ranks its backward waits for the all-reduce and addition of the
                 * resident layer two above (with one block, of the layer above: compute and
                 * all-reduces alternated, l32 b2 -w 25 M 2 on two H200s 208.2 ms) */
                const int block = !streamed && mb > 0 ? fresh++ % 2 : 0;
                const double res_wait = !streamed && mb > 0 && world > 1 ? res_fresh_free[block] : c;
                c = pred_run(&t, BUSY_COMPUTE, pred_layer_bwd_ms(m, cfg, j),
                             streamed && i < z.Ls - S ? pred_max(c, ready[j]) : pred_max(c, res_wait));
                if (!streamed) {
                    if (world > 1) reduced = pred_run_coll(&t, m, PRED_ALL_REDUCE, layer_ar_ms, c);
                    if (mb > 0) res_fresh_free[block] = reduced;
                    continue;
                }
                double grads_final = world > 1 ? (reduced = pred_run_coll(&t, m, PRED_REDUCE_SCATTER, reduce_ms, c)) : c;
                /* micro-batches after the first: the layer's sum so far comes up to be added,
                 * on the stream the grads are final on (layer_work_add_earlier): on one rank
                 * the compute stream itself, on N ranks the collectives', behind the
                 * reduce-scatter (the prefetches' gathers queue behind it there).  Its share of
                 * the upward link is the machine's (pred_add_earlier: up2_h2d_gbs): on the H100
                 * of b 1-2 at l80/l96, walked beside the prefetches, -11..+4% of measured,
                 * queued behind them +11..+27%; zero-offload queues its own, see there */
                if (mb > 0) grads_final = reduced = pred_add_earlier(&t, m, landing_ms, world, &c, home[j]);
                home[j] = pred_run(&t, BUSY_D2H, grads_d2h, grads_final);
                if (!clip && last) adam_done[j] = pred_host_update(&t, m, adam_ms, mv, mv, home[j]);
                if (i - S >= 0) {
                    const int down = layer_of[i - S];
                    ready[down] = pred_run(&t, BUSY_H2D, layer_h2d + input_h2d, home[j]);
                    if (world > 1) ready[down] = pred_run_coll(&t, m, PRED_ALL_GATHER, gather_ms, ready[down]);
                }
            }
            c = pred_run(&t, BUSY_COMPUTE, m->embed_bwd_ms, c);
        }
        /* the embedding's grads accumulate in place: reduced once, after the last */
        if (world > 1) c = pred_max(c, pred_run_coll(&t, m, PRED_ALL_REDUCE, embed_ar_ms, c));
        c = pred_max(c, reduced);
        /* the norms are read back (the host waits for compute), then the GPU Adam of the
         * embedding and the resident layers, and the host Adam of the streamed ones */
        host = pred_max(host, c);
        c = pred_run(&t, BUSY_COMPUTE, pred_gpu_adam_ms(m, (double)z.PE + (double)R * z.PL), c);
        if (clip)
            for (int i = 0; i < z.Ls; i++) {
                const int k = layer_of[i];
                adam_done[k] = pred_host_update(&t, m, adam_ms, mv, mv, pred_max(host, home[k]));
            }
        end = c;
    }
    pred_done(out, &t, start, end);
    free(streamed_at);
    free(adam_done);
}

static void stronghold_predict(const engine_config *cfg, const machine_rates *m, engine_prediction *out)
{
    memset(out, 0, sizeof *out);
    if (pred_no_disk(cfg, m, out) || pred_no_collectives(cfg, m, out)) return;
    int R = 0, S = 0, spread = 0; /* (predicted_layout sets them) */
    predicted_layout(cfg, m, &R, &S, &spread);
    predict_layout(cfg, m, R, S, spread, out);
}

/* The option only stronghold takes (engines/option_decl.h). */
static const option_decl stronghold_options[] = {
    {.name = "placement", .kind = ARG_TEXT, .arg = "bottom|spread|auto", .set = SET_WORDS, OPTION_FIELD(placement),
     OPTION_WORDS({"bottom", PLACE_BOTTOM}, {"spread", PLACE_SPREAD}, {"auto", PLACE_AUTO}), .dflt = "auto",
     .scope = SCOPE_RESULT, .slot = 51, .use = OPTION_CFG | OPTION_KID, .refusal = REFUSED_ALWAYS,
     .lacks = "has no resident layers to place", OPTION_INERT(PLACE_AUTO),
     .help = "its resident layers at the bottom of the model (the paper's window) or spread between the streamed "
             "ones, which hides the forward's copies (default auto: -w auto takes the faster, -w W bottom)"},
};

/* Its bound (step_bound.h): its copies beside the compute, and a host Adam that waits for the norm under --clip-grad. */
static void stronghold_bound(const engine_config *cfg, const double busy[BUSY_KINDS], engine_bound *out)
{
    step_bound_schedule(cfg, busy, 0, 1, out);
}

const engine_vtbl engine_stronghold = {
    .name = "stronghold",
    .alias = NULL,
    .description = "a window of layers on the GPU, the rest streamed with host Adam (-w W|auto)",
    .uses_window = 1,
    .supports_bf16 = 1,
    .options = ENGINE_OPT_RANKS | ENGINE_OPT_ACCUM,
    .bound = stronghold_bound,
    .plan = stronghold_plan,
    .init = stronghold_init,
    .chosen_plan = stronghold_chosen_plan,
    .step = stronghold_step,
    .free = stronghold_free,
    .read_params = stronghold_read_params,
    .predict = stronghold_predict,
    OWN_OPTIONS(stronghold_options),
    .takes = (const char *const[]){"window", "offload", "nvme-dir", "clip-speculate", NULL},
};
