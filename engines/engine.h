/*
 * engine.h — the interface every offloading strategy implements.
 *
 * An engine owns the placement of every tensor and the schedule of one training iteration;
 * the model (kernels/model.h) says what is computed and the runtime (engines/runtime/)
 * gives it budgets, streams and copies.  Lifecycle, as the driver in cmd/ uses it:
 *
 *   plan   the bytes the run needs on GPU, host and disk — pure arithmetic, no allocation;
 *          the driver checks it against the budgets (and --dry-run prints it);
 *   init   allocate under the budgets and initialise the parameters (GPT_ERR_OOM with the
 *          budget's record when something does not fit);
 *   step   one iteration on one batch: returns loss, grad norm, lr and phase timings;
 *   free   release everything (safe on a partially initialised engine).
 */
#ifndef AEBENCH_ENGINE_H
#define AEBENCH_ENGINE_H

#include "../kernels/model.h"
#include "option_decl.h"
#include "runtime/membudget.h"

#include <stddef.h>
#include <stdint.h>

typedef enum device_kind { DEVICE_CPU = 0, DEVICE_CUDA = 1 } device_kind;

/* Where an offloading engine keeps what leaves the GPU (--offload): host memory, or the
 * optimizer state (and what else the engine says) in files under --nvme-dir. */
typedef enum offload_target { OFFLOAD_CPU = 0, OFFLOAD_NVME = 1 } offload_target;

/* What only some engines do (engine_vtbl.options); the driver refuses a run that asks one of
 * the others for it.  (The options only some engines take are their option tables:
 * engine_vtbl.own_options and .takes.) */
enum {
    ENGINE_OPT_RANKS = 1u << 3,        /* runs on N ranks (data parallel) */
    ENGINE_OPT_ACCUM = 1u << 4,        /* accumulates several micro-batches per step */
    ENGINE_OPT_FAULT_BACKWARD = 1u << 6,   /* marks FAULT_BACKWARD (--fail-phase backward) */
    ENGINE_OPT_FAULT_CHECKPOINT = 1u << 7, /* marks FAULT_CHECKPOINT (--fail-phase checkpoint) */
    ENGINE_OPT_RECOVERS = 1u << 8,     /* a job that lost ranks can be relaunched with
                                          --gemini-recover to go on from its checkpoints */
};
/* --graphs: auto (on where the engine, the backend and the run allow it), on (an error where
 * they do not), off */
enum { GRAPHS_AUTO = 0, GRAPHS_ON = 1, GRAPHS_OFF = 2 };

enum { ENGINE_PATH_MAX = 1024 };

/* What an engine needs to know about the run. */
typedef struct engine_config {
    gpt_shape shape;
    int window;    /* windowed engines: layers in the GPU window; 0 = choose automatically */
    /* stronghold with clipping: streamed layers updated on the host as their grads arrive,
     * before the global norm is known, and redone when it says otherwise (-1: as many as
     * the host budget holds the undo copies of, 0: none) */
    int clip_speculate;
    /* stronghold: where its resident layers sit among the streamed ones (PLACE_*) */
    int placement;
    /* --recompute: what each layer keeps of its forward for its backward (full: activation
     * checkpointing, the artifact's; selective: the GEMM outputs; none: everything) */
    gpt_recompute recompute;
    /* --graphs (GRAPHS_*): each step's forward and backward issued once into a CUDA graph and
     * replayed after (megatron-lm on one rank) */
    int graphs;
    gpt_optim optim;
    uint64_t seed;
    device_kind device;
    int bf16;      /* --dtype bf16 */
    int tf32;      /* --math tf32 (default): fp32 matmuls on TF32 tensor cores */
    int threads;   /* CPU threads for the CPU backend and host-side work; 0 = all */
    /* The budgets the run will have (bytes; 0 = unknown), for plans that adapt to them
     * (stronghold -w auto keeps as many layers resident as the GPU holds). */
    size_t gpu_budget, host_budget;
    /* N ranks' collectives go through NCCL, whose communicators take GPU memory outside the
     * arena (engine_comm_group_bytes): the GPU backend's runs, and predictions from a GPU
     * machine's file.  The driver sets it. */
    int nccl;
    int dpu;                 /* --dpu: delayed parameter update (zero-offload) */
    /* zero-offload: elements per gradient bucket, DeepSpeed's reduce_bucket_size (--reduce-bucket-size;
     * 0: 5e7, the artifact's).  It was the environment's AEBENCH_ZO_BUCKET_ELEMS; tests force
     * one or two layers per bucket at small shapes. */
    uint64_t reduce_bucket_size;
    offload_target offload;  /* --offload cpu|nvme */
    /* --nvme-dir: where the disk tier makes its private directory (the driver fills in the
     * results directory when none is given) */
    char nvme_dir[ENGINE_PATH_MAX];
    /* --global-batch: samples per optimizer step over all ranks (0: batch x world).  Each
     * rank runs global_batch / (batch x world) micro-batches and accumulates their grads. */
    int global_batch;
    int zero_stage;          /* --zero-stage 0-3 (megatron-lm on N ranks) */
    /* --pp P (megatron-lm): pipeline stages; 0 or 1: none.  The ranks are laid out as
     * Megatron lays them out, the stage outermost: rank = stage x (world / P) + data rank, so
     * that world / P ranks train each stage data parallel (engine_dp_world). */
    int pp;
    /* --pp-layers A,B,...: the layers of each stage, first to last (empty: balanced, s L / P) */
    char pp_layers[256];
    /* --tp T (megatron-lm): tensor-parallel ranks; 0 or 1: none.  Innermost in the layout, as
     * Megatron lays them out: rank = (stage x D + data rank) x T + tensor rank, so that the T
     * ranks of a layer's split are neighbours (on one machine). */
    int tp;
    /* --sequence-parallel (with --tp T): the residual stream's rows split over the T ranks */
    int sequence_parallel;
    /* --grad-reduce-dtype bf16 (megatron-lm with --dtype bf16): the data-parallel gradient
     * reductions in bf16; 0: fp32, as Megatron-LM does for bf16 models unless told otherwise */
    int grad_reduce_bf16;
    /* Set by the driver from MPI and --global-batch (plans depend on them): the ranks, the
     * ranks on this machine (they share its host memory and disk), and the micro-batches
     * each rank runs per step.  1, 1, 1 on one rank without --global-batch. */
    int world;
    int local_world;
    int micro_batches;
    /* The machines the ranks are on (comm.h): how many, this rank's (0 ..), and each rank's
     * (world entries; NULL: one machine, or not known, as in a plan made without ranks).
     * gemini puts a shard's copies on other machines where there are enough. */
    int hosts, host_index;
    const int *rank_host;
    /* gemini: the checkpoint mode, the copies of each shard (this rank's and m - 1 peers'),
     * where they are kept, the store's directory and the job's id (the store's name; the
     * driver makes one when none is given), and whether this run recovers that job. */
    int gemini_mode;        /* GEMINI_NONE, GEMINI_NAIVE, GEMINI_INTERLEAVE */
    int gemini_replicas;    /* m (0: 2, or 1 on one rank) */
    int gemini_placement;   /* GEMINI_GROUP, GEMINI_RING */
    int gemini_transport;   /* the peers' copies: GEMINI_PEER_AUTO, _SENDRECV, _READ */
    char gemini_store[ENGINE_PATH_MAX];
    char gemini_job[64];
    int gemini_recover;
    /* gemini: the first iteration that is checkpointed (1: all; the Gemini artifact's runs
     * train some steps without checkpoints first, to compare) */
    int gemini_ckpt_from;
    /* gemini: an in-memory checkpoint every K iterations from gemini_ckpt_from (1: every one;
     * -1 auto: chosen once interleave has measured the step, see gemini.c) */
    int gemini_every;
    /* gemini --gemini-every auto: the share of the step's time a checkpoint may expose per
     * iteration, which sets the interval (--gemini-every-share; 0: 0.01).  It was the
     * environment's AEBENCH_GEMINI_EVERY_SHARE; tests/test_gemini.sh needs a small one. */
    double gemini_every_share;
    /* gemini interleave: the share of each idle span between the training's collectives the
     * plan fills with the checkpoint's transfer, at the measured rate (0: 0.9; half changed
     * nothing in bench/results/2026-11-24-h200x2-gemini/ab).  --gemini-fill (it was
     * AEBENCH_GEMINI_FILL); tests/test_gemini.sh needs a tiny one, so a checkpoint cannot hide. */
    double gemini_fill;
    /* The calibrated machine of this run's shape (cmd/machine.h), when the results directory
     * has one: -w auto sizes its window with the engine's prediction.  NULL: none. */
    const struct machine_rates *machine;
    /* gemini: the persistent checkpoint (--ckpt-dir, every --ckpt-every iterations; 0: none),
     * what recovery falls back to when every in-memory copy of some shard is lost */
    char ckpt_dir[ENGINE_PATH_MAX];
    int ckpt_every;
    /* Values of an engine's own options that need no named field (OPTION_FIELD(own_values[i])
     * in its table; no two options share one: the option tables' check says so at start-up). */
    long long own_values[8];
} engine_config;

enum { GEMINI_NONE = 0, GEMINI_NAIVE = 1, GEMINI_INTERLEAVE = 2 };
/* gemini with a checkpoint every `every` iterations: the iterations of work a failure loses on
 * average (a naive checkpoint is whole at its step's end, an interleaved one a step later). */
static inline double gemini_lost_iterations(int every, int mode)
{
    return every / 2.0 + (mode == GEMINI_INTERLEAVE ? 1.0 : 0.0);
}
enum { GEMINI_GROUP = 0, GEMINI_RING = 1 };
/* gemini --gemini-transport: how a peer's shard reaches the rank that keeps it: read by
 * that rank's copy engines where it can (auto), always sent and received (NCCL kernels / MPI
 * send-recv), or always read (an error where the ranks cannot read each other). */
enum { GEMINI_PEER_AUTO = 0, GEMINI_PEER_SENDRECV = 1, GEMINI_PEER_READ = 2 };
/* stronghold --placement: auto (-w auto: the faster by the machine model, or by the rule in
 * stronghold.c; -w W: bottom), the resident layers at the bottom (0 .. R-1, the paper's
 * window), or spread evenly between the streamed ones. */
enum { PLACE_AUTO = 0, PLACE_BOTTOM = 1, PLACE_SPREAD = 2 };

/* world and micro_batches with 0 read as 1 (a config built field by field, as tests do). */
static inline int engine_world(const engine_config *c) { return c->world > 1 ? c->world : 1; }
static inline int engine_local_world(const engine_config *c)
{ return c->local_world > 1 ? c->local_world : 1; }
static inline int engine_micro_batches(const engine_config *c)
{ return c->micro_batches > 1 ? c->micro_batches : 1; }
/* The pipeline's stages (1: none), the data-parallel ranks (world / stages: those that train
 * different data), and where rank r is in that layout. */
static inline int engine_pp(const engine_config *c) { return c->pp > 1 ? c->pp : 1; }
static inline int engine_tp(const engine_config *c) { return c->tp > 1 ? c->tp : 1; }
/* The ranks that hold one copy of the model: the stages times the tensor-parallel ranks. */
static inline int engine_model_ranks(const engine_config *c) { return engine_pp(c) * engine_tp(c); }
static inline int engine_dp_world(const engine_config *c)
{
    return engine_world(c) % engine_model_ranks(c) == 0 ? engine_world(c) / engine_model_ranks(c) : engine_world(c);
}
static inline int engine_tp_rank(const engine_config *c, int rank) { return rank % engine_tp(c); }
static inline int engine_dp_rank(const engine_config *c, int rank)
{ return rank / engine_tp(c) % engine_dp_world(c); }
static inline int engine_pp_stage(const engine_config *c, int rank)
{ return rank / engine_tp(c) / engine_dp_world(c); }

/* The GPU memory one communicator takes outside the arena on N ranks on the GPU: NCCL's
 * buffers and work queues, which NCCL allocates itself at its first collectives (MPI on the
 * CPU backend: none).  Each engine's plan adds it for every group it opens, and stronghold's
 * -w auto leaves it free: a window that filled the arena (less its headroom) failed its first
 * all-gather on two H200s; with 1 GiB kept, the same run used 1.5 GiB beyond the arena's
 * peak, CUDA's context and cuBLAS's workspaces with NCCL's one group
 * (bench/results/2026-11-30a-h200x2-confirm-search). */
#define COMM_GROUP_GPU_BYTES (1024ull << 20)
static inline uint64_t engine_comm_group_bytes(const engine_config *c)
{
    return engine_world(c) > 1 && c->nccl ? COMM_GROUP_GPU_BYTES : 0;
}

typedef struct engine_plan {
    uint64_t gpu_bytes; /* with gpu_comm_bytes */
    uint64_t host_bytes;
    uint64_t disk_bytes;
    /* of host_bytes, what --clip-speculate auto holds only while steps do not clip (its
     * second copies, runtime/update_ahead.h): a run whose every step clips peaks this much
     * under its plan */
    uint64_t host_while_ahead;
    /* of gpu_bytes, the communicators' own memory (engine_comm_group_bytes a group): NCCL
     * allocates it, so the arena's peak is held against gpu_bytes less this */
    uint64_t gpu_comm_bytes;
} engine_plan;

/* The GPU plan the arena's peak is held against: the communicators' reserve is NCCL's. */
static inline uint64_t engine_plan_arena_gpu(const engine_plan *p) { return p->gpu_bytes - p->gpu_comm_bytes; }

/* A plan's reserve for `groups` communicators (each engine's plan, once per group it opens). */
static inline void engine_plan_add_comm(engine_plan *p, const engine_config *c, int groups)
{
    const uint64_t bytes = (uint64_t)groups * engine_comm_group_bytes(c);
    p->gpu_bytes += bytes;
    p->gpu_comm_bytes += bytes;
}

/* What an engine gets from the driver; it must not outlive the engine. */
typedef struct engine_env {
    const engine_config *cfg;
    gpt_backend *be;    /* the compute backend ("GPU"; the CPU backend in CI) */
    dev_arena *gpu;     /* device memory under --gpu-mem-limit */
    mem_budget *host;   /* host memory under --cpu-mem-limit */
    /* disk bytes under the free space of the --nvme-dir file system (the disk tier takes
     * from it); NULL when the run plans no disk bytes */
    mem_budget *disk;
    int rank, world;
    /* Where an engine says what it decided and why (one line, no newline): the driver puts
     * it in the log and on stdout.  NULL: the engine stays silent. */
    void (*note)(void *ctx, const char *line);
    void *note_ctx;
    /* Fault injection (--fail-at/--fail-rank/--fail-phase): an engine calls it where the
     * phase of an iteration is reached (engine_fault_point); the driver's kills the rank
     * when they are the ones asked for.  NULL: no faults. */
    void (*fault_point)(void *ctx, int iteration, int phase);
    void *fault_ctx;
    /* Where engine_init_embed/engine_init_layer add the milliseconds spent initialising
     * parameters (for the log's setup line).  NULL: not timed. */
    double *init_ms;
    /* The rank's watchdog (NULL: none): every collective group an engine opens is named to it
     * (coll_watch), so that a hang says which operation it is stuck in. */
    struct watchdog *dog;
    /* Where engine_fail writes why init (or a step) failed (one line; the first reason
     * stays), for the log's and the JSON's message.  NULL: stderr only. */
    char *why;
    size_t why_len;
} engine_env;

/* Where in an iteration a fault can strike: its start (the driver's own point), the start
 * of its backward, the middle of its checkpoint (gemini). */
enum { FAULT_FORWARD = 0, FAULT_BACKWARD = 1, FAULT_CHECKPOINT = 2 };
static inline void engine_fault_point(const engine_env *env, int iteration, int phase)
{
    if (env->fault_point) env->fault_point(env->fault_ctx, iteration, phase);
}

/* gpt_init_embed / gpt_init_layer, timed into env->init_ms. */
void engine_init_embed(const engine_env *env, float *p, const gpt_shape *sh, uint64_t seed);
void engine_init_layer(const engine_env *env, float *p, const gpt_shape *sh, int layer, uint64_t seed);

/* printf-style engine_env.note. */
void engine_note(const engine_env *env, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* An engine cannot go on (it cannot run as configured, or a step failed: gemini's
 * --ckpt-dir full, a --graphs on capture): says why (printf-style, one line) on stderr and
 * into env->why, and returns rc (the gpt_status init or step returns). */
int engine_fail(const engine_env *env, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Streams whose busy time an engine reports per iteration (to show the bottleneck). */
enum { BUSY_COMPUTE, BUSY_H2D, BUSY_D2H, BUSY_HOST_ADAM, BUSY_DISK, BUSY_COMM, BUSY_KINDS };
/* The kinds of collective (a prediction slows each by the compute beside it by its own
 * calibrated factor: machine_rates.ar_under_compute, ...). */
enum { PRED_ALL_REDUCE, PRED_REDUCE_SCATTER, PRED_ALL_GATHER, PRED_COLL_KINDS };

typedef struct step_result {
    double loss;        /* mean cross-entropy of the batch */
    double grad_norm;   /* global norm before clipping */
    double lr;          /* learning rate used by this step */
    int skipped;        /* 1 when the update was skipped (non-finite gradients) */
    /* --clip-speculate: blocks this step updated ahead of the norm (0: it waited for it), and
     * whether those updates were redone (the norm clipped) or dropped (skipped) */
    int ahead_blocks, ahead_redone;
    double ms_forward, ms_backward, ms_optimizer;
    /* Offloading engines: milliseconds each stream was busy during this step (has_busy), and
     * the bytes the step moved, for the roofline bound. */
    int has_busy;
    double busy_ms[BUSY_KINDS];
    double bytes_h2d, bytes_d2h, host_adam_params;
    double bytes_disk_read, bytes_disk_write;
    /* N ranks: the collective streams' busy time (busy_ms[BUSY_COMM]) and the bytes this rank
     * handed to collectives during the step (has_comm set). */
    int has_comm;
    double bytes_comm;
    /* of busy_ms[BUSY_COMM], the time no compute ran beside it: the communication the step's
     * compute did not hide (has_comm; spans_exposed) */
    double exposed_comm_ms;
    /* gemini: the checkpoint of this step (has_ckpt): the bytes this rank moved for it (its
     * local copy and what it sent to its peers), the time from the end of the optimizer to
     * the checkpoint being complete, and how much of that the training waited for. */
    int has_ckpt;
    double ckpt_bytes, ckpt_ms, ckpt_exposed_ms;
    double ckpt_idle_ms;  /* interleave: the training collectives' idle time its plan used */
    int ckpt_warmup;      /* interleave: a step checkpointed naively while it measures */
    int ckpt_every;       /* gemini: the checkpoint interval in effect (--gemini-every; auto's
                             choice once made); 0: not said */
} step_result;

struct engine_resume;

/* How many tensor-parallel widths one machine file entry may time the split layer at (--calibrate
 * times T = 2, 4 and 8). */
#define MACHINE_TP_SPLITS 4

/* A calibrated machine (cmd/machine.h: --calibrate writes it, --predict reads it): what one
 * step's pieces cost at one model shape, math mode and dtype, and the machine's rates. */
typedef struct machine_rates {
    /* compute, one micro-batch of the shape (ms) */
    double embed_fwd_ms, layer_fwd_ms, layer_bwd_ms /* with recompute */, head_ms /* fwd + bwd */;
    double embed_bwd_ms;
    double layer_recompute_selective_ms; /* --recompute selective's recompute alone (0: the file
                                            predates it) */
    double layer_bwd_none_ms; /* the backward of --recompute none, over the activations its forward
                                 saved (0: the file predates it; then the backward with recompute
                                 less a forward) */
    double gpu_adam_ms_per_mparam; /* the device AdamW, ms per million parameters */
    /* --tp T's split layer at each T the file has, a rank's share timed alone (its collectives
     * apart), forward and backward with recompute as layer_*_ms (machine_tp_split looks one up).
     * Every T is kept, not only the run's: --search predicts every T from one load. */
    struct machine_tp_split {
        int t;
        double layer_fwd_ms, layer_bwd_ms, layer_bwd_none_ms; /* (none's: 0 in a file from before) */
    } tp_split[MACHINE_TP_SPLITS];
    int ntp_split;
    /* megatron-lm's step against the sum of those pieces: per layer (its gradient zeroing,
     * norm and clipping go with each layer's Adam) and for the rest.  Only megatron-lm's
     * prediction applies them: an offload engine's compute stream runs the pieces as
     * measured (its busy time matched their sum on the H100 and H200, where the scaled
     * pieces came out 6-8% long). */
    double layer_scale, rest_scale;
    /* pinned copies, GB/s, each way alone */
    double h2d_gbs, d2h_gbs;
    double host_adam_ms_per_mparam; /* the host Adam pool, with `host_threads` threads */
    /* the same three at once (both copy directions and the host Adam: the offload engines'
     * steady state, where they share host memory's bandwidth) */
    double busy_h2d_gbs, busy_d2h_gbs, busy_host_adam_ms_per_mparam;
    /* Two at once (0: a file from before they were measured; predict.h then takes each pair
     * halfway between alone and all three): each copy direction while the other runs, each
     * while the host Adam runs, and the host Adam while one direction runs.  The users do not
     * slow each other alike: on the H200 machine a copy beside the host Adam slowed, the Adam
     * beside a copy hardly (its rate in the offload runs was the rate alone). */
    double both_h2d_gbs, both_d2h_gbs, adam_h2d_gbs, adam_d2h_gbs;
    double host_adam_h2d_ms_per_mparam, host_adam_d2h_ms_per_mparam;
    /* two host-to-GPU copies at once on two copy engines, GB/s together (0: a file from before
     * it was measured): whether a micro-batch's gradient sum coming up beside a layer's fetch
     * shares the upward link with it (pred_add_earlier) */
    double up2_h2d_gbs;
    /* Of resource i's busy time, the share during which resource j is busy too (the host-memory
     * users: copies, host Adam; and the compute beside the host Adam), as the step's walk has
     * them side by side: pred_settle finds it, and each piece's rate follows from it
     * (pred_contended_ms, pred_host_adam_ms). */
    double overlap[BUSY_KINDS][BUSY_KINDS];
    int host_threads;
    double host_copy_gbs;
    /* the host Adam's time with the (GPU's) compute running beside it, over its time alone (0: a
     * file from before it was measured: not applied): pred_host_adam_ms */
    double host_adam_under_compute;
    /* the parameters a rank's host Adam was swept over when these rates were measured (0: not
     * recorded: a file from before, or the CPU backend's one block): machine_region_note */
    double host_adam_region_mparams;
    double gpu_bytes, host_bytes; /* what a run could plan with there (free GPU, 90% of host) */
    int gpu_backend; /* the file is a GPU machine's ("backend": "cuda"): its ranks talk by NCCL */
    /* the collectives among coll_world ranks (0: none calibrated for the run's world): each
     * as latency + bytes / rate, bytes the full buffer (all-reduce: the buffer; reduce-scatter:
     * its input; all-gather: its output) */
    int coll_world;
    double ar_ms, ar_gbs, rs_ms, rs_gbs, ag_ms, ag_gbs;
    /* Calibrated at coll_world too (0: an older file without them):
     *   rates_world           == coll_world when the copy and host Adam rates above are one
     *                         rank's own while every rank of the machine works at once (its
     *                         GPU's copies, its share of the cores: pred_host_share is then 1)
     *   compute_under_coll    a compute piece's time with all-reduces running beside it, over
     *                         its time alone (their kernels take SMs and memory bandwidth)
     *   compute_under_shard   the same beside reduce-scatters and all-gathers (ZeRO-2/3's,
     *                         the offload engines' shards), which load the compute less per
     *                         busy millisecond (0: a file from before: as all-reduces) */
    int rates_world;
    double compute_under_coll, compute_under_shard;
    /* a compute piece's time with two collective streams beside it at once, ZeRO-3's: a
     * layer's all-gathers on one and its reduce-scatters on the other (0: a file from before:
     * as compute_under_shard) */
    double compute_under_two;
    /* the mirror: each kind of collective's time with a layer's backward beside it, over its
     * time alone (0: a file from before: as alone); each kind is slowed by the share of its time
     * the compute runs beside it (coll_load) */
    double ar_under_compute, rs_under_compute, ag_under_compute;
    /* pred_settle's: the compute stream's busy spans in its last walk (NULL outside its first
     * two walks), and of each kind's collectives the share of their time the compute ran
     * beside (engine_prediction.coll_beside, from the second walk) */
    struct pred_spans *compute_beside;
    double coll_load[PRED_COLL_KINDS];
    /* the share of the compute stream's time that all-reduces, and reduce-scatters and
     * all-gathers, run beside: pred_settle */
    double compute_load, compute_load_shard;
    /* the share of the compute stream's time that two collective streams run beside at once
     * (compute_under_two; pred_settle) */
    double compute_load_two;
    /* the disk tier at the run's --nvme-dir, GB/s each way (0: not calibrated there) */
    double disk_read_gbs, disk_write_gbs;
    /* gemini's persistent checkpoint at the run's --ckpt-dir (0: not calibrated there): the
     * state's checksums on the device and its copy home (GB/s), then its file written, as
     * latency (ms) + bytes / rate (GB/s), the host's checksums and syncs included */
    double ckpt_home_gbs, ckpt_write_ms, ckpt_write_gbs;
    int ckpt_world; /* == the run's world: measured with every rank of the machine writing */
} machine_rates;

/* The split layer timed at tensor-parallel width t, or NULL where the file has none. */
static inline const struct machine_tp_split *machine_tp_split(const machine_rates *m, int t)
{
    for (int i = 0; i < m->ntp_split && i < MACHINE_TP_SPLITS; i++)
        if (m->tp_split[i].t == t) return &m->tp_split[i];
    return NULL;
}

/* What an engine predicts for one step: ms on each resource (busy time, as step_result's
 * busy_ms), the step's length from its schedule, and the resource that bounds it. */
typedef struct engine_prediction {
    double ms;                  /* per iteration */
    double busy_ms[BUSY_KINDS]; /* per resource */
    int bound;                  /* BUSY_* that the schedule waits on most (its critical path) */
    int modelled;               /* 0: the engine has no model for this configuration */
    /* of busy_ms[BUSY_COMM], what runs while the compute stream is idle (it slows no compute:
     * machine_rates.compute_under_coll); the rest runs beside the compute */
    double coll_idle_ms;
    /* of busy_ms[BUSY_COMM], the reduce-scatters' and all-gathers' (pred_run_coll) */
    double coll_shard_ms;
    /* of the compute's busy time, what ran with two collective streams beside it at once
     * (megatron-lm ZeRO-3's gathers and reduce-scatters: pred_join_comm) */
    double compute_two_ms;
    /* of each kind's collectives, the share of their time the compute ran beside them
     * (machine_rates.coll_load) */
    double coll_beside[PRED_COLL_KINDS];
    /* of resource i's busy time in the step, the share resource j was busy too (the host-memory
     * users, and the compute beside the host Adam: predict.h's pred_done; machine_rates.overlap) */
    double overlap[BUSY_KINDS][BUSY_KINDS];
    char why[160];              /* when not modelled: why */
} engine_prediction;

struct comm_world; /* (runtime/comm.h: the ranks, for refused_before_writing's collective) */

/* ---- What engine_vtbl's hooks of issue 48 get and give (see the block at its end) ------------- */

struct cJSON; /* (<cjson/cJSON.h>: the run's JSON, which an engine's report hooks add to) */

/* One iteration as the driver recorded it: what step returned, and the step's wall time. */
typedef struct engine_iteration {
    step_result r;
    double ms;
} engine_iteration;

/* The run so far, for an engine's sections of the log and JSON. */
typedef struct engine_report {
    const engine_config *cfg;
    /* iters[i] is iteration i + 1; this run trained iters[first .. done - 1] (first > 0: it
     * went on from a checkpoint of the job it recovers) */
    const engine_iteration *iters;
    int first, done;
    /* one line into the run's log (no newline; rank 0's log: nothing on the other ranks) */
    void (*line)(void *ctx, const char *text);
    void *line_ctx;
} engine_report;

/* printf-style engine_report.line. */
void engine_report_line(const engine_report *rep, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The median of n >= 1 values (v is left as it is). */
double engine_median(const double *v, int n);

/* How the --ranks supervisor goes on with a job that lost ranks, as the engine says
 * (engine_vtbl.recovery fills it, every function; cmd/launch.c follows it without knowing the
 * engine).  The strings and `state` are the engine's until close. */
typedef struct engine_recovery {
    const char *job;          /* the job's id (its relaunches' too), for the supervisor's messages */
    int relaunches;           /* relaunches at most, one after another */
    const char *first_args[3]; /* added to the first launch's arguments (NULL-terminated) */
    const char *relaunch_arg; /* added to every relaunch's: what makes it recover */
    /* options (names without "--") a relaunch does not pass on besides the injected fault's:
     * the engine's own recover flag, which relaunch_arg adds (NULL-terminated) */
    const char *const *not_passed_on;
    /* what the relaunch message and the recovered job's note add when machines were lost
     * (machines_lost was called) */
    const char *lost_said, *lost_noted;
    void *state;
    /* 1 when what the job would recover from is another job's now (why: one phrase) */
    int (*in_use)(void *state, char *why, size_t len);
    /* the machines of the ranks in `ranks` (a bit per rank, ranks 0-63) were replaced: what
     * they held is gone (the engine deletes it, as a replaced machine would have lost it) */
    void (*machines_lost)(void *state, unsigned long long ranks);
    /* Whether a relaunch would find something to recover: 1 and what it would recover from
     * into `said` ("its ... in ..."; a relaunch is tried too where only the ranks can tell),
     * or 0 and why not (a sentence) into `said`.  seen_all: every machine's part of the job is
     * visible here; lost: the ranks whose machines were replaced. */
    int (*recoverable)(void *state, int seen_all, unsigned long long lost, char *said, size_t len);
    /* `state` goes; with `remove`, what the job kept too (it is over: done, or not relaunched
     * again; 0: it never started) */
    void (*close)(void *state, int remove);
} engine_recovery;

/* engine_vtbl.bound's answer: the lower bound of a step of the engine's schedule from what
 * each resource was busy in it (step_bound.h has the shapes and says how each is made). */
typedef struct engine_bound {
    double ms;          /* the schedule's bound, never below the roofline */
    double roofline_ms; /* every resource busy at once */
    const char *name;   /* what the log, stdout and --predict call it: "roofline", "one slot",
                           "clipped schedule" */
    int own_schedule;   /* 1: a bound of its schedule's above the roofline model (ms may still
                           equal roofline_ms) */
    int waits_for_norm; /* its host Adam waits for the global norm (the JSON's clipped_bound_ms) */
    char why[200];      /* why it is what it is, for stdout (the roofline's figure apart) */
} engine_bound;

typedef struct engine_vtbl {
    const char *name;
    const char *alias;       /* another accepted name, or NULL */
    const char *description; /* one line for --help */
    int uses_window;
    /* 1: -m all (and "all" in a config) leaves it out: it answers another question than the
     * offload engines' comparison (gemini: the cost of checkpointing, case 6); -m NAME runs it */
    int not_in_all;
    /* 1 when the engine implements --dtype bf16 (a backend of type GPT_BF16: bf16 working
     * weights and activations on the GPU, fp32 master weights, grads and Adam state); the
     * driver refuses bf16 for an engine that leaves this 0. */
    int supports_bf16;
    unsigned options;        /* ENGINE_OPT_* it implements */
    void (*plan)(const engine_config *cfg, engine_plan *out);
    /* Optional: reject a configuration the engine cannot run (one line into err; the driver
     * exits 2 before writing anything).  0 when fine. */
    int (*check)(const engine_config *cfg, char *err, size_t errlen);
    int (*init)(const engine_env *env, void **state);
    /* Optional: the plan of what init actually chose (e.g. the window of -w auto). */
    void (*chosen_plan)(void *state, engine_plan *out);
    /* Copy every parameter, in the canonical layout [embed | layer 0 | ... ] (model.h), to
     * host memory (gpt_param_count floats), after all pending updates.  For tests. */
    int (*read_params)(void *state, float *host_params);
    /* tokens and targets: host arrays of micro_batches x B*T ids (this rank's micro-batches
     * of the step, one after the other); iteration is 1-based.  The host arrays stay alive
     * and unchanged until step returns. */
    int (*step)(void *state, int iteration, const int32_t *tokens, const int32_t *targets,
                step_result *out);
    void (*free)(void *state);
    /* Optional: what init recovered (an engine that restored a checkpoint): the driver trains
     * from the iteration after out->iteration and records the rest.  0 (or absent): none. */
    int (*resumed)(void *state, struct engine_resume *out);
    /* Optional: the step's time on machine m, from the engine's own schedule (the same
     * dependency order as step); absent or out->modelled 0: not modelled. */
    void (*predict)(const engine_config *cfg, const machine_rates *m, engine_prediction *out);
    /* Optional, a collective (every rank of comm calls it, after check and before the driver
     * writes anything): what the engine finds outside the configuration says a run of `iters`
     * iterations cannot be made (gemini: a recovery whose checkpoint is past them).  0 fine;
     * else the exit code, the reason said on stderr (by rank 0 when every rank agrees). */
    int (*refused_before_writing)(const engine_config *cfg, int iters, const struct comm_world *comm);

    /* ---- Issue 48: what the engine owns of the run's record, of a job's recovery and of its
     * bound.  Every member is optional (0 / NULL: the engine adds nothing, recovers no job,
     * overlaps its copies, writes no persistent checkpoint); the driver calls them where
     * present and names no engine. ---- */
    /* The engine's lines in the log after the set-up line, once init succeeded (no iterations
     * yet: rep->done == rep->first == 0). */
    void (*report_header)(const engine_report *rep);
    /* Its lines of a logged interval, after the driver's, of the interval's last iteration
     * (1-based; done == last). */
    void (*report_interval)(const engine_report *rep, int last);
    /* What it adds at the end of iteration `iteration`'s object in the JSON's "iterations". */
    void (*report_iteration_json)(const engine_report *rep, int iteration, struct cJSON *obj);
    /* Its lines in the log when training ends (every rank calls it, whatever the outcome). */
    void (*report_summary)(const engine_report *rep);
    /* Its own part of the JSON (after "iterations"), in every record the driver writes: while
     * running, interrupted, failed or done. */
    void (*report_json)(const engine_report *rep, struct cJSON *root);
    /* A --ranks job of cfg on `ranks` ranks that loses ranks is relaunched to go on as *out
     * says: 0.  Anything else: it is not (a plain launch, as an engine without the hook). */
    int (*recovery)(const engine_config *cfg, int ranks, engine_recovery *out);
    /* The bound of a step of its schedule under cfg, from what each resource was busy (ms,
     * BUSY_*): a shape of step_bound.h.  NULL: the roofline (its copies run beside its compute). */
    void (*bound)(const engine_config *cfg, const double busy[BUSY_KINDS], engine_bound *out);
    /* 1: it writes a persistent checkpoint (runtime/ckpt_store.h's files) under cfg->ckpt_dir,
     * whose cost --calibrate measures there */
    int persistent_ckpt;
    /* The first iteration (1-based) of its steady state under cfg: the ones before carry its
     * warm-up (a graph's capture, --dpu's undelayed steps and its first delayed ones), which
     * the JSON's steady median and --search --verify leave out.  NULL: 2 (the first step
     * carries every engine's first touch of memory and the libraries' warm-up). */
    int (*steady_from)(const engine_config *cfg);

    /* ---- options (issue 48: an engine declares the options only it takes) ---------------
     * own_options: declared in its file (OWN_OPTIONS(table)); takes: the names of the options
     * several engines take (registry.c) that it takes, NULL-terminated (NULL: none).  The
     * driver parses, documents, hashes and refuses from these (engine_option_refused). */
    const option_decl *own_options;
    int n_own_options;
    const char *const *takes;
    /* Optional: what its options become on machine `machine` (0 ..) of the job, before its
     * checks (gemini: --gemini-store's %m, a store per machine).  0, or -1 with one line in
     * err (bad input). */
    int (*for_machine)(engine_config *cfg, int machine, char *err, size_t errlen);
    /* ---- (end of the options) ---------------------------------------------------------- */
} engine_vtbl;

/* A recovery, as the engine that made it tells the driver. */
typedef struct engine_resume {
    int iteration;          /* restored: training goes on from the next one */
    double ms;              /* finding and loading it */
    double fetched_bytes;   /* what ranks received from peers' copies */
    int from_disk;          /* 1: the persistent checkpoint, not memory */
} engine_resume;

/* The registry (engines/registry.c). */
const engine_vtbl *engine_find(const char *name);
/* Whether eng refuses cfg: --dtype bf16, the options it does not take whose value asks it for
 * something whatever was given (REFUSED_ALWAYS), ranks and micro-batches against what it
 * implements, then its own check.  0 when it can run cfg; else one line in err (the driver
 * exits 2, nothing is written). */
int engine_config_refused(const engine_vtbl *eng, const engine_config *cfg, char *err, size_t errlen);
/* The checks every single-rank engine's init starts with: engine_config_refused, one rank,
 * and a backend of the configured type (fp32, or bf16 for --dtype bf16).  GPT_OK, or
 * GPT_ERR_INVALID with the reason on stderr (tests call init without the driver). */
int engine_init_check(const engine_vtbl *eng, const engine_env *env);
/* After the backward: the step's mean loss (N per-token losses read back), its global grad
 * norm (nblocks squared block norms read back) and, as Megatron, skipped when that norm is
 * not finite (no update at all). */
void engine_step_outcome(step_result *out, const float *host_losses, int N,
                         const float *host_norms, int nblocks);
int engine_count(void);
const engine_vtbl *engine_at(int i);
/* ---- the engines' options (option_decl.h) ---------------------------------------------- */
/* The options several engines take (window, offload, ...), declared in registry.c: *n of them. */
const option_decl *engine_shared_options(int *n);
/* Every engine option: each engine's own (registry order), then the shared ones; the i-th
 * (0 ..) and in *owner (may be NULL) the engine whose own it is (NULL: a shared one).  NULL
 * past the end. */
int engine_option_count(void);
const option_decl *engine_option_at(int i, const engine_vtbl **owner);
/* The engine option of this long name (the first that declares it), or NULL. */
const option_decl *engine_option_named(const char *name);
/* The first iteration of eng's steady state under cfg (engine_vtbl.steady_from; 2 without). */
int engine_steady_from(const engine_vtbl *eng, const engine_config *cfg);
/* Whether eng takes the option of this long name: its own, or a shared one its takes lists. */
int engine_takes_option(const engine_vtbl *eng, const char *name);
/* The engines that take it, in registry order: "a", "a and b", "a, b and c"; possessive:
 * "a's, b's and c's".  "" when none. */
void engine_option_takers(const char *name, int possessive, char *buf, size_t len);
/* The engines that have capability bit (ENGINE_OPT_*), as engine_option_takers says them. */
void engine_names_with(unsigned bit, char *buf, size_t len);
/* An integer option's value in cfg (SET_INT, SET_INT_OR_AUTO, SET_WORDS, SET_FLAG; 0 for the
 * others), and v stored into cfg. */
long long engine_option_value(const option_decl *d, const engine_config *cfg);
void engine_option_store(const option_decl *d, engine_config *cfg, long long v);
/* Value v of an integer option as the option takes it: its word, "auto", or the number. */
void engine_option_value_text(const option_decl *d, long long v, char *buf, size_t len);
/* Whether eng refuses an option it does not take (option_decl.refusal): one of REFUSED_ALWAYS
 * whose value in cfg is not inert; with given (whether the option of that name was given;
 * ctx its argument), also one of REFUSED_GIVEN given with a value not inert.  0, or -1 with
 * one line in err naming the option, what eng lacks, and the engines whose option it is. */
int engine_option_refused(const engine_vtbl *eng, const engine_config *cfg,
                          int (*given)(const void *ctx, const char *name), const void *ctx, char *err,
                          size_t errlen);
/* Whether -m all (a sweep of every engine) runs it. */
static inline int engine_in_all(const engine_vtbl *e) { return !e->not_in_all; }

extern const engine_vtbl engine_megatron_lm;
extern const engine_vtbl engine_l2l;
extern const engine_vtbl engine_zero_offload;
extern const engine_vtbl engine_zero_infinity;
extern const engine_vtbl engine_stronghold;
extern const engine_vtbl engine_gemini;

#endif
