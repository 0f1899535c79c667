/*
 * calibrate.c — --calibrate (machine.h): the timing every measurement shares, one
 * micro-batch's pieces and the engine's step at a shape, the copies and the host Adam alone
 * and all at once, and machine_calibrate, which measures what the machine file lacks or has
 * stale and writes it.  The disk's measurements (calibrate_disk.c) and the collectives'
 * (calibrate_collectives.c) are their own files: each needs only the timing here
 * (calibrate.h), and this one would pass 700 lines with them.
 */
#include "machine.h"
#include "calibrate.h"
#include "machine_file.h"

#include "data.h"
#include "exit_codes.h"
#include "report.h"
#include "run.h"
#include "search.h"
#include "../engines/runtime/cpu_adam.h"
#include "../engines/runtime/membudget.h"
#include "../engines/runtime/timer.h"
#include "../kernels/host_pages.h"
#include "../kernels/model.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- measuring ----------------------------------------------------------------------------- */

/* How long one repetition of a host rate runs (ms): on a GPU machine about a step's length.
 * The host's rate there moves by 10-15% from one step to the next: one H200's host Adam took
 * 435-586 ms over the steps of one l2l run, and two calibrations of one 64 M block (16 ms a
 * repetition) 40 s apart said 0.231 and 0.265 ms per M parameters
 * (bench/results/2026-11-30h-h200-host-noise).  A snapshot that short draws one point of that
 * noise and every host-bound prediction follows it at once; a training step's median is over
 * seconds.  On the CPU backend a little over one block, so the tests take the same path. */
static double calibrate_host_rep_ms(int gpu) { return gpu ? 500.0 : 20.0; }

/* How many calls of one timed ms make a repetition of at least rep_ms (at least 1; the same on
 * every rank of `ranks`, so that all stay busy together: the largest).  A collective where
 * ranks is not NULL. */
static int calls_per_rep(double one_ms, double rep_ms, const comm_world *ranks, int *bad)
{
    int k = one_ms > 0 && rep_ms > one_ms ? (int)(rep_ms / one_ms + 0.999) : 1;
    int widest = k;
    if (ranks) *bad |= comm_max_int(ranks, k, &widest) != 0;
    return widest > 0 ? widest : 1;
}

/* REPS repetitions of run(ctx) (after one timed warm-up) into t, each as many calls as take at
 * least rep_ms (0: one call) and its ms the mean call's; *bad set when a call fails.  With
 * `ranks` (NULL: this one alone), every rank times each repetition at once, a barrier before
 * each (host_ms_in_step says why); every rank makes every barrier, a failed one too, so that
 * none waits for a rank that stopped. */
static void timed_reps(timed_fn run, void *ctx, int *bad, double t[REPS], const comm_world *ranks, double rep_ms)
{
    const double w0 = wall_ms();
    *bad |= run(ctx) != 0;
    const int calls = calls_per_rep(wall_ms() - w0, rep_ms, ranks, bad);
    for (int r = 0; r < REPS; r++) {
        *bad |= calibrate_in_step(ranks);
        t[r] = 0;
        if (*bad) continue;
        const double t0 = wall_ms();
        for (int c = 0; c < calls && !*bad; c++) *bad |= run(ctx) != 0;
        t[r] = (wall_ms() - t0) / calls;
    }
}

/* The median ms of REPS calls: the GPU's pieces, which repeat to the microsecond. */
double calibrate_median_ms(timed_fn run, void *ctx, int *bad)
{
    double t[REPS];
    timed_reps(run, ctx, bad, t, NULL, 0);
    return *bad ? 0 : median_of(t, REPS);
}

/* t = latency + bytes / rate from two timed sizes (ms for small and large bytes): the rate
 * (GB/s) from the slope, the latency (ms, at least 1 us) from the small one; without a
 * positive slope, the large size's rate and no latency to speak of. */
void calibrate_fit_latency_rate(double small, double large, double small_ms, double large_ms, double *lat_ms,
                                double *gbs)
{
    const double slope = (large_ms - small_ms) / (large - small); /* ms per byte */
    *gbs = slope > 0 ? 1.0 / (slope * 1e6) : large / (large_ms * 1e6);
    *lat_ms = small_ms - small / (*gbs * 1e6);
    if (*lat_ms < 1e-3) *lat_ms = 1e-3;
}

static double min_of(const double *t, int n)
{
    double m = t[0];
    for (int i = 1; i < n; i++) m = t[i] < m ? t[i] : m;
    return m;
}

/* Every repetition's ms behind a host rate, every rank's (samples[name] = [[rank 0's REPS],
 * [rank 1's], ...]; none when samples is NULL): the file says what each rate was made from, so
 * that another way of taking it (the slowest rank's median against the median of each
 * repetition's slowest) can be weighed against training later without a GPU.  A collective
 * where ranks is not NULL: every rank calls it at the same point.  0, or -1 when the gather or
 * the JSON failed. */
static int record_samples(cJSON *samples, const char *name, const double t[REPS], const comm_world *ranks)
{
    if (!samples) return 0;
    const int world = ranks ? ranks->world : 1;
    double *all = malloc((size_t)world * REPS * sizeof *all);
    int failed = calibrate_any_failed(ranks, all == NULL); /* (every rank gathers, or none) */
    if (!failed && ranks) failed = comm_all_gather(ranks, t, all, REPS * sizeof *t) != 0;
    else if (!failed) memcpy(all, t, REPS * sizeof *t);
    cJSON *by_rank = failed ? NULL : cJSON_AddArrayToObject(samples, name);
    for (int r = 0; by_rank && r < world; r++) {
        cJSON *reps = cJSON_CreateDoubleArray(all + (size_t)r * REPS, REPS);
        if (!reps || !cJSON_AddItemToArray(by_rank, reps)) failed = 1, by_rank = NULL;
    }
    free(all);
    return failed || !by_rank ? -1 : 0;
}

/* The host's rate (copies, host Adam) from REPS timed calls (ms), by `ranks` (NULL: this one
 * alone) timing each at once.  Alone, on a GPU machine the fastest: the noise of a shared
 * machine only ever slows a call (two calibrations of one H200 gave the host Adam 0.178 and
 * 0.216 ms per million parameters by their medians, while the runs after both ran at the
 * first); on the CPU backend the median: there compute, copies and the host Adam share the same
 * few cores in a run, and their typical rate describes it (its predictions came out 13-23%
 * short with the fastest).  With ranks, repetition r's time is the slowest rank's (a job's
 * ranks meet at every collective: a step waits for the slowest one's copies and update), and
 * the rate their median, not the fastest: under the other ranks' load a fast repetition is one
 * their work partly missed, not one that noise left alone (two H200 ranks' host Adam
 * calibrated at 0.275 ms per M parameters by the fastest, each repetition the slower rank's,
 * where zero-infinity's training updated both shards at 0.388; the calibration's own block
 * timed by two processes at once: 16.2 ms the fastest, 26.0 the median).  (Those were 16 ms
 * repetitions.  Over a step's length the rate moves both ways, 10-15% from one step to the
 * next on one H200 (calibrate_host_rep_ms): whether one rank's half-second repetitions are
 * better taken by the fastest or the median, no GPU call has measured yet.)  Every rank takes
 * part, a failed one too. */
static double host_rate_of(double t[REPS], int gpu, const comm_world *ranks, int *bad, cJSON *samples,
                           const char *name)
{
    *bad |= record_samples(samples, name, t, ranks) != 0;
    if (!ranks) return gpu ? min_of(t, REPS) : median_of(t, REPS);
    *bad |= comm_max_doubles(ranks, t, REPS) != 0;
    return median_of(t, REPS);
}

/* calibrate_host_ms with every rank of `ranks` (NULL: this one alone) timing each of its REPS
 * calls at once: a barrier before each.  Started together only once, the ranks drifted apart
 * and the fastest call was one a rank had partly to itself: two H200 ranks' host Adam
 * calibrated at 0.31 ms per M parameters where both updating at once ran at 0.40 in training
 * (and bench/adam_jobs.c's two processes at 0.39-0.41). */
static double host_ms_in_step(timed_fn run, void *ctx, int *bad, int gpu, const comm_world *ranks, cJSON *samples,
                              const char *name)
{
    double t[REPS];
    timed_reps(run, ctx, bad, t, ranks, calibrate_host_rep_ms(gpu));
    const double ms = host_rate_of(t, gpu, ranks, bad, samples, name);
    return *bad ? 0 : ms;
}
/* (the disk's: each call already writes or reads a file of its own size) */
double calibrate_host_ms(timed_fn run, void *ctx, int *bad, int gpu)
{
    double t[REPS];
    timed_reps(run, ctx, bad, t, NULL, 0);
    const double ms = host_rate_of(t, gpu, NULL, bad, NULL, NULL);
    return *bad ? 0 : ms;
}

/* What `issue` puts on stream s, until s has done it. */
typedef struct on_stream {
    gpt_stream *s;
    issue_fn issue;
    void *ctx;
} on_stream;
static int run_on_stream(void *p)
{
    const on_stream *o = p;
    o->issue(o->ctx);
    return gpt_stream_sync(o->s);
}
double calibrate_time_ms(gpt_stream *s, issue_fn issue, void *ctx, int *bad)
{
    on_stream o = {s, issue, ctx};
    return calibrate_median_ms(run_on_stream, &o, bad);
}

/* Layers timed in turn, each with its own weights and gradients, so that a layer's time
 * includes fetching its weights from memory as in a model of many layers (on the CPU backend
 * one layer timed alone stays in cache). */
enum { LAYER_COPIES = 4 };

static void run_embed_fwd(void *p)
{
    compute_ctx *c = p;
    gpt_embed_forward(c->s, c->sh, c->ep, c->tokens, c->x_in);
}
static const void *layer_params(const compute_ctx *c, int k)
{
    return (const char *)c->lp + (size_t)k * gpt_act_bytes(c->PL, gpt_stream_dtype(c->s));
}
/* (a layer whole, or c->tp's share of it: the _tp ops run the whole layer for one rank) */
static void run_layer_fwd(void *p)
{
    compute_ctx *c = p;
    for (int k = 0; k < LAYER_COPIES; k++)
        gpt_layer_forward_tp(c->s, c->sh, c->tp, layer_params(c, k), c->x_in, c->x_out, &c->acts, &c->scratch);
}
/* A layer's backward recomputing as `mode` does, and what a step does per layer besides: its
 * gradients zeroed and their squared norm taken.  (c->acts carved whole serve every mode: full
 * reruns the forward into them; none reads them as its forward saved them, (N, 15C) and more,
 * far past a GPU's L2 at the shapes --predict is asked about, so from memory as a step does.) */
static void run_layer_bwd_as(compute_ctx *c, gpt_recompute mode)
{
    gpt_layer_acts acts = c->acts;
    acts.recompute = mode;
    for (int k = 0; k < LAYER_COPIES; k++) {
        float *g = c->lg + (size_t)k * c->PL;
        gpt_stream_memset_zero(c->s, g, c->PL * sizeof(float));
        gpt_layer_backward_tp(c->s, c->sh, c->tp, layer_params(c, k), g, c->x_in, c->dres, &acts, &c->scratch,
                              GPT_GRAD_ACCUMULATE);
        gpt_norm_squared(c->s, c->norm_out, g, c->PL);
    }
}
void calibrate_run_layer_bwd(void *p) { run_layer_bwd_as(p, GPT_RECOMPUTE_FULL); }
/* --recompute none's backward: recomputing nothing. */
static void run_layer_bwd_none(void *p) { run_layer_bwd_as(p, GPT_RECOMPUTE_NONE); }
/* --recompute selective's recompute of a layer, alone (what its backward adds to none's). */
static void run_layer_recompute_selective(void *p)
{
    compute_ctx *c = p;
    for (int k = 0; k < LAYER_COPIES; k++)
        gpt_layer_recompute(c->s, c->sh, layer_params(c, k), c->x_in, &c->acts, GPT_RECOMPUTE_SELECTIVE);
}
static void run_head(void *p)
{
    compute_ctx *c = p;
    gpt_stream_memset_zero(c->s, c->eg, gpt_embed_layout_of(c->sh).total * sizeof(float));
    gpt_head_forward(c->s, c->sh, c->ep, c->eg, c->x_out, c->targets, &c->head);
    gpt_head_backward(c->s, c->sh, c->ep, c->eg, c->x_out, &c->head, c->dres);
}
static void run_embed_bwd(void *p)
{
    compute_ctx *c = p;
    gpt_embed_backward(c->s, c->sh, c->eg, c->dres, c->tokens);
    gpt_norm_squared(c->s, c->norm_out, c->eg, gpt_embed_layout_of(c->sh).total);
}
static void run_adam(void *p)
{
    compute_ctx *c = p;
    gpt_block_adamw(c->s, c->master, c->lg, c->lm, c->lv, c->PL, c->PL / 2, &c->optim, 1e-4f, 1, 1.0f);
}

/* The buffers of one micro-batch's pieces at run_cfg's shape, on the backend (zeros everywhere:
 * the times do not depend on the values, and zeros keep the CPU free of denormals), and a
 * stream to time them on.  0, or EXIT_RUN_ERROR said on stderr (calibrate_compute_ctx_close
 * either way). */
int calibrate_compute_ctx_open(const run_config *run_cfg, gpt_backend *be, compute_bufs *b)
{
    const gpt_shape *sh = &run_cfg->eng.shape;
    const gpt_dtype dt = run_cfg->eng.bf16 ? GPT_BF16 : GPT_F32;
    const size_t N = (size_t)sh->batch * sh->seq, C = (size_t)sh->hidden;
    memset(b, 0, sizeof *b);
    compute_ctx *c = &b->c;
    c->sh = sh;
    c->PL = gpt_layer_layout_of(sh).total;
    c->optim = gpt_optim_default();
    const size_t PE = gpt_embed_layout_of(sh).total;
    const struct { void **p; size_t bytes; } bufs[COMPUTE_BUFS] = {
        {&c->lp, LAYER_COPIES * gpt_act_bytes(c->PL, dt)}, {&c->ep, gpt_act_bytes(PE, dt)}, {&c->x_in, gpt_act_bytes(N * C, dt)},
        {&c->x_out, gpt_act_bytes(N * C, dt)}, {&c->dres, gpt_act_bytes(N * C, dt)},
        {&c->acts_base, gpt_layer_acts_bytes(sh, dt)}, {&c->scratch_base, gpt_layer_scratch_bytes(sh, dt)},
        {&c->head_base, gpt_head_acts_bytes(sh, dt)}, {(void **)&c->lg, LAYER_COPIES * c->PL * sizeof(float)},
        {(void **)&c->norm_out, sizeof(float)},
        {(void **)&c->eg, PE * sizeof(float)}, {(void **)&c->lm, c->PL * sizeof(float)},
        {(void **)&c->lv, c->PL * sizeof(float)}, {(void **)&c->master, c->PL * sizeof(float)},
        {(void **)&c->tokens, N * sizeof(int32_t)}, {(void **)&c->targets, N * sizeof(int32_t)},
    };
    if (be->ops->stream_create(be, &c->s)) {
        fprintf(stderr, "aebench: --calibrate: cannot create a stream\n");
        return EXIT_RUN_ERROR;
    }
    int status = 0;
    for (b->n = 0; b->n < COMPUTE_BUFS && !status; b->n++) {
        b->ptr[b->n] = bufs[b->n].p;
        status = be->ops->dev_alloc(be, bufs[b->n].p, bufs[b->n].bytes);
        if (!status) status = gpt_stream_memset_zero(c->s, *bufs[b->n].p, bufs[b->n].bytes);
    }
    if (status) {
        fprintf(stderr, "aebench: --calibrate: the shape's buffers do not fit on the device (%s)\n",
                status == GPT_ERR_OOM ? "out of memory" : "backend error");
        return EXIT_RUN_ERROR;
    }
    gpt_layer_acts_carve_as(&c->acts, c->acts_base, sh, dt);
    gpt_layer_scratch_carve_as(&c->scratch, c->scratch_base, sh, dt);
    gpt_head_acts_carve_as(&c->head, c->head_base, sh, dt);
    return 0;
}
void calibrate_compute_ctx_close(gpt_backend *be, compute_bufs *b)
{
    for (int i = b->n - 1; i >= 0; i--)
        if (*b->ptr[i]) be->ops->dev_free(be, *b->ptr[i]);
    if (b->c.s) be->ops->stream_destroy(b->c.s);
}

/* --tp T's split layer timed alone (one process: its collectives do nothing, so what is timed
 * is a rank's share of the compute; the collectives' time comes from their own calibration). */
static int tp_no_reduce(void *ctx, gpt_stream *s, void *buf, size_t n)
{
    (void)ctx, (void)s, (void)buf, (void)n;
    return 0;
}
static int tp_no_gather(void *ctx, gpt_stream *s, void *out, const void *in, size_t bytes)
{
    (void)ctx, (void)s, (void)out, (void)in, (void)bytes;
    return 0;
}
static int tp_no_scatter(void *ctx, gpt_stream *s, void *out, const void *in, size_t n)
{
    (void)ctx, (void)s, (void)out, (void)in, (void)n;
    return 0;
}

/* The tensor-parallel splits --search may try (T of 2, 4, 8 dividing the heads and the padded
 * vocabulary): each one's layer forward and backward (with recompute, as layer_*_ms) into
 * entry's "tp" list.  0, or EXIT_RUN_ERROR. */
static int measure_tp_layers(const run_config *run_cfg, gpt_backend *be, cJSON *entry)
{
    cJSON *list = cJSON_AddArrayToObject(entry, "tp");
    for (int T = 2; T <= 8; T *= 2) {
        const gpt_shape *sh = &run_cfg->eng.shape;
        if (sh->heads % T || gpt_pad_vocab(sh->vocab) % T) continue;
        run_config *at = malloc(sizeof *at);
        if (!at) return EXIT_RUN_ERROR;
        *at = *run_cfg;
        at->eng.shape.tp = T;
        at->eng.shape.sp = 0;
        compute_bufs b;
        int bad = 0;
        if (calibrate_compute_ctx_open(at, be, &b) == 0) {
            const gpt_tp split = {.rank = 0, .world = T, .sequence = 0, .all_reduce = tp_no_reduce,
                                  .all_gather = tp_no_gather, .reduce_scatter = tp_no_scatter, .ctx = NULL};
            b.c.tp = &split;
            const double f = calibrate_time_ms(b.c.s, run_layer_fwd, &b.c, &bad) / LAYER_COPIES;
            const double w = calibrate_time_ms(b.c.s, calibrate_run_layer_bwd, &b.c, &bad) / LAYER_COPIES;
            const double none = calibrate_time_ms(b.c.s, run_layer_bwd_none, &b.c, &bad) / LAYER_COPIES;
            if (!bad) {
                cJSON *e = cJSON_CreateObject();
                cJSON_AddNumberToObject(e, "t", T);
                cJSON_AddNumberToObject(e, "layer_fwd_ms", f);
                cJSON_AddNumberToObject(e, "layer_bwd_ms", w);
                cJSON_AddNumberToObject(e, "layer_bwd_none_ms", none);
                cJSON_AddItemToArray(list, e);
            }
        } else {
            bad = 1;
        }
        calibrate_compute_ctx_close(be, &b);
        free(at);
        if (bad) {
            fprintf(stderr, "aebench: --calibrate: the layer split over %d ranks could not be timed\n", T);
            return EXIT_RUN_ERROR;
        }
    }
    return 0;
}

/* One micro-batch's pieces at run_cfg's shape. */
static int measure_compute(const run_config *run_cfg, gpt_backend *be, cJSON *entry)
{
    compute_bufs b;
    int bad = 0;
    if (calibrate_compute_ctx_open(run_cfg, be, &b) == 0) {
        compute_ctx *c = &b.c;
        /* (per_layer: the piece runs LAYER_COPIES layers, and one layer's time is recorded) */
        const struct { const char *name; issue_fn fn; int per_layer; } parts[] = {
            {"embed_fwd_ms", run_embed_fwd, 0}, {"layer_fwd_ms", run_layer_fwd, 1},
            {"layer_bwd_ms", calibrate_run_layer_bwd, 1}, {"head_ms", run_head, 0}, {"embed_bwd_ms", run_embed_bwd, 0},
            {"layer_recompute_selective_ms", run_layer_recompute_selective, 1},
            {"layer_bwd_none_ms", run_layer_bwd_none, 1},
        };
        for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
            cJSON_AddNumberToObject(entry, parts[i].name, calibrate_time_ms(c->s, parts[i].fn, c, &bad) /
                                                              (parts[i].per_layer ? LAYER_COPIES : 1));
        cJSON_AddNumberToObject(entry, "gpu_adam_ms_per_mparam",
                                calibrate_time_ms(c->s, run_adam, c, &bad) / (c->PL / 1e6));
        if (bad) fprintf(stderr, "aebench: --calibrate: a timed op failed on the backend\n");
    } else {
        bad = 1;
    }
    calibrate_compute_ctx_close(be, &b);
    if (bad) return EXIT_RUN_ERROR;
    return measure_tp_layers(run_cfg, be, entry);
}

/* The median step (ms, the first left out) of megatron-lm with `layers` layers at run_cfg's shape,
 * through the engine itself: what the pieces above miss (the step's own ops and waits).  With
 * quiet_oom, a depth that does not fit the GPU returns STEP_DOES_NOT_FIT unsaid (the caller
 * takes a shallower one). */
enum { STEP_DOES_NOT_FIT = -1 };
static int measure_step(const run_config *run_cfg, gpt_backend *be, int layers, double *ms, int quiet_oom)
{
    enum { STEPS = 9, SETTLE_MS = 2000 };
    engine_config cfg = run_cfg->eng;
    cfg.shape.layers = layers;
    cfg.micro_batches = 1;
    cfg.world = cfg.local_world = 1;
    cfg.zero_stage = 0;
    dev_arena gpu;
    mem_budget host;
    /* (the GPU budget a run has, --gpu-mem-limit or the free memory: a depth that would not
     * fit a run does not fit here) */
    size_t gpu_budget = 0, host_budget = 0;
    run_resolve_budgets(run_cfg, be, &gpu_budget, &host_budget);
    dev_arena_init(&gpu, be, gpu_budget);
    mem_budget_init(&host, "host", SIZE_MAX);
    data_source data;
    const gpt_shape *sh = &cfg.shape;
    data_open_synthetic(&data, sh->vocab, sh->batch, sh->seq, cfg.seed);
    const size_t N = (size_t)sh->batch * sh->seq;
    int32_t *tokens = malloc(N * sizeof *tokens), *targets = malloc(N * sizeof *targets);
    engine_env env = {.cfg = &cfg, .be = be, .gpu = &gpu, .host = &host, .rank = 0, .world = 1};
    void *state = NULL;
    int status = !tokens || !targets ? GPT_ERR_OOM : engine_megatron_lm.init(&env, &state);
    double t[STEPS];
    /* On the GPU, untimed steps first, for SETTLE_MS: a long step runs its GEMMs at the clock
     * the power cap holds them to (two H200s in bf16: SM median 1620-1695 MHz, against 1980 in
     * a short burst), and these short steps timed from a cool start predicted long bf16 steps
     * 4-13% fast (settled: within 0.9-9.2%, bench/results/2026-11-29j-h200x2-settled-calibration).
     * The pieces measured before are scaled to these steps (layer_scale, rest_scale), so they
     * inherit the settled clock. */
    const double settle_until = wall_ms() + (run_cfg->eng.device == DEVICE_CUDA ? SETTLE_MS : 0);
    for (int it = 1, k = 0; !status && k < STEPS; it++) {
        data_batch(&data, it, tokens, targets);
        step_result r;
        memset(&r, 0, sizeof r);
        const double t0 = wall_ms();
        status = engine_megatron_lm.step(state, it, tokens, targets, &r);
        if (t0 >= settle_until) t[k++] = wall_ms() - t0;
    }
    if (state) engine_megatron_lm.free(state);
    free(tokens);
    free(targets);
    data_close(&data);
    if (status == GPT_ERR_OOM && quiet_oom) return STEP_DOES_NOT_FIT;
    if (status) {
        fprintf(stderr, "aebench: --calibrate: megatron-lm at l%d %s\n", layers,
                status == GPT_ERR_OOM ? "does not fit" : "failed");
        return EXIT_RUN_ERROR;
    }
    *ms = median_of(t + 1, STEPS - 1); /* (the first step carries one-time costs) */
    return 0;
}

/* One direction of pinned copies on its stream, or both at once (the streams NULL where not);
 * second_up: the second stream (d2h) copies host-to-GPU instead (h_out to d_out), two upward
 * copies at once on two copy engines. */
typedef struct copy_ctx {
    gpt_stream *h2d, *d2h;
    void *d_in, *h_in, *h_out, *d_out;
    size_t bytes;
    int second_up;
} copy_ctx;
static int run_copies(void *p)
{
    const copy_ctx *c = p;
    return (c->h2d && gpt_memcpy_h2d(c->h2d, c->d_in, c->h_in, c->bytes)) ||
           (c->d2h && (c->second_up ? gpt_memcpy_h2d(c->d2h, c->d_out, c->h_out, c->bytes)
                                    : gpt_memcpy_d2h(c->d2h, c->h_out, c->d_out, c->bytes))) ||
           (c->h2d && gpt_stream_sync(c->h2d)) || (c->d2h && gpt_stream_sync(c->d2h));
}

/* The host Adam pool on one block of a region (calibrate_host_region_params), and a copy of its
 * size: each call takes the region's next block, wrapping, as an engine's updates go layer by
 * layer through its host state. */
typedef struct host_ctx {
    cpu_adam *pool;
    cpu_adam_job job;     /* the block's: its pointers set by each call */
    float *p, *g, *m, *v; /* the region */
    uint16_t *w;          /* its bf16 working copy (NULL: the fp32 update alone) */
    size_t region, at;    /* parameters in the region; the next block's first */
} host_ctx;
static void next_block(host_ctx *h)
{
    if (h->at + h->job.n > h->region) h->at = 0;
    h->job.params = h->p + h->at, h->job.grads = h->g + h->at, h->job.m = h->m + h->at, h->job.v = h->v + h->at;
    h->job.params_bf16 = h->w ? h->w + h->at : NULL;
    h->at += h->job.n;
}
static int run_host_adam(void *p)
{
    host_ctx *h = p;
    next_block(h);
    return cpu_adam_run(h->pool, &h->job);
}
static int run_host_copy(void *p)
{
    host_ctx *h = p;
    next_block(h);
    memcpy((void *)h->job.grads, h->job.params, h->job.n * sizeof(float));
    return 0;
}

/* The host Adam's rate (ms per M parameters) on h's blocks from where h is: fp32, then bf16
 * (the bf16 engines' update, writing the working copy w too: 30 B a parameter, not 28), each
 * timed by every rank at once. */
static void host_adam_rates(host_ctx h, uint16_t *w, int *bad, int gpu, const comm_world *ranks, cJSON *samples,
                            const char *fp32_name, const char *bf16_name, double *fp32, double *bf16)
{
    const double mparams = h.job.n / 1e6;
    h.w = NULL;
    *bad |= calibrate_in_step(ranks);
    *fp32 = host_ms_in_step(run_host_adam, &h, bad, gpu, ranks, samples, fp32_name) / mparams;
    h.w = w;
    *bad |= calibrate_in_step(ranks);
    *bf16 = host_ms_in_step(run_host_adam, &h, bad, gpu, ranks, samples, bf16_name) / mparams;
}

static size_t host_adam_block(int gpu) { return (size_t)(gpu ? 64 : 16) << 20; }

/* How many parameters the host Adam's measurement sweeps on a GPU machine: the run's shard of
 * the model (every parameter on one rank, 1/N on N), in whole blocks (host_adam_block), at least one,
 * at most what 60% of the host's available memory holds for each of its ranks (18 B a
 * parameter: p, g, m, v and the bf16 copy).  The rate depends on it: two H200 processes' host
 * Adam ran 0.44-0.47 ms per M parameters swept over 858 M each (l32's shard) and 0.31-0.32 over
 * 4,930 M (l48's), jobs of 25 M or 101 M alike (bench/adam_footprint_gpu.sh), as zero-offload
 * (0.47 and 0.33) and zero-infinity (0.41 and 0.32) did in training on that machine; one 64 M
 * block timed again and again said 0.41 for both.  On the CPU backend one block: its runs are
 * small, and the region is the test machine's memory. */
static size_t calibrate_host_region_params(const run_config *run_cfg, const comm_world *ranks)
{
    const size_t block = host_adam_block(run_cfg->eng.device == DEVICE_CUDA);
    if (run_cfg->eng.device != DEVICE_CUDA) return block;
    const int world = ranks ? ranks->world : 1, local = ranks ? ranks->local_world : 1;
    uint64_t shard = (gpt_param_count(&run_cfg->eng.shape) + (uint64_t)world - 1) / (uint64_t)world;
    size_t avail = 0;
    if (gpt_host_mem_info(&avail, NULL) == 0) {
        const uint64_t cap = (uint64_t)(avail / 10 * 6) / (uint64_t)(local > 0 ? local : 1) / 18;
        if (shard > cap) shard = cap;
    }
    const uint64_t blocks = shard / block;
    return (size_t)(blocks > 1 ? blocks : 1) * block;
}

/* The host Adam's time with the GPU's compute beside it, over its time alone: `runs` updates
 * queued on the pool, alone and then while this thread issues one layer's backward
 * after another on the compute stream and waits for each, as an engine's host thread waits on
 * the GPU in a step (CUDA's default wait spins on a core); each timed by the pool's busy time,
 * every rank in step.  Two H200 machines measured 1.04 and 1.01
 * (bench/results/2026-11-30g-h200x2-confirm): there the compute costs the update little; a
 * replay on another machine's rates had asked for 1.3-1.5.  At least 1; 0 on failure. */
static double measure_adam_under_compute(const run_config *run_cfg, gpt_backend *be, host_ctx *h, int runs, int gpu,
                                         const comm_world *ranks, cJSON *samples)
{
    compute_bufs b;
    int bad = calibrate_any_failed(ranks, calibrate_compute_ctx_open(run_cfg, be, &b) != 0);
    double alone[REPS] = {0}, beside[REPS] = {0};
    for (int r = 0; r < REPS; r++) /* (a rank that failed still makes every barrier) */
        for (int with_compute = 0; with_compute < 2; with_compute++) {
            bad |= calibrate_in_step(ranks);
            if (bad) continue;
            (void)cpu_adam_take_busy_ms(h->pool);
            uint64_t ticket = 0;
            for (int k = 0; k < runs && !bad; k++) {
                next_block(h);
                bad |= cpu_adam_submit(h->pool, &h->job, &ticket) != 0;
            }
            while (!bad && with_compute && !cpu_adam_done(h->pool, ticket)) {
                calibrate_run_layer_bwd(&b.c);
                bad |= gpt_stream_sync(b.c.s) != 0;
            }
            bad |= cpu_adam_wait(h->pool, ticket) != 0;
            (with_compute ? beside : alone)[r] = cpu_adam_take_busy_ms(h->pool);
        }
    calibrate_compute_ctx_close(be, &b);
    const double alone_ms = host_rate_of(alone, gpu, ranks, &bad, samples, "host_adam_alone"),
                 beside_ms = host_rate_of(beside, gpu, ranks, &bad, samples, "host_adam_beside_compute");
    if (bad || alone_ms <= 0) return 0;
    return beside_ms > alone_ms ? beside_ms / alone_ms : 1.0;
}

/* The offload engines' steady state: copies and the host Adam at once, drawing on host
 * memory's bandwidth (on the H100 machine each of the three was about 1.4x slower than alone,
 * which is what predictions from the separate rates missed).  `copies` go in flight on each
 * of c's streams (both directions, or the one that is not NULL), `reps` host Adam runs
 * meanwhile; the Adam's wall time and each direction's (events) give the rates under that
 * load (of REPS rounds, as calibrate_host_ms).  A direction not run leaves its rate alone. */
static int measure_busy(gpt_backend *be, const copy_ctx *c, host_ctx *h, int copies, int reps, int gpu,
                        const comm_world *ranks, int failed_before, cJSON *samples, const char *name, double *h2d_gbs,
                        double *d2h_gbs, double *adam_ms_per_mparam)
{
    gpt_event *ev[4] = {NULL, NULL, NULL, NULL};
    int bad = failed_before; /* (a rank that failed before still makes every barrier) */
    for (int i = 0; i < 4 && !bad; i++) bad |= gpt_event_create(be, &ev[i]) != 0;
    double in[REPS] = {0}, out[REPS] = {0}, adam[REPS] = {0};
    for (int r = 0; r < REPS; r++) {
        bad |= calibrate_in_step(ranks); /* (every round at once on every rank: host_ms_in_step) */
        if (bad) continue;
        bad |= (c->h2d && gpt_event_record(ev[0], c->h2d)) || (c->d2h && gpt_event_record(ev[1], c->d2h));
        for (int k = 0; k < copies && !bad; k++)
            bad |= (c->h2d && gpt_memcpy_h2d(c->h2d, c->d_in, c->h_in, c->bytes)) ||
                   (c->d2h && gpt_memcpy_d2h(c->d2h, c->h_out, c->d_out, c->bytes));
        bad |= (c->h2d && gpt_event_record(ev[2], c->h2d)) || (c->d2h && gpt_event_record(ev[3], c->d2h));
        const double t0 = wall_ms();
        for (int k = 0; k < reps && !bad; k++) bad |= run_host_adam(h) != 0;
        adam[r] = (wall_ms() - t0) / reps;
        float ms_in = 0, ms_out = 0;
        bad |= (c->h2d && (gpt_stream_sync(c->h2d) || gpt_event_elapsed_ms(&ms_in, ev[0], ev[2]))) ||
               (c->d2h && (gpt_stream_sync(c->d2h) || gpt_event_elapsed_ms(&ms_out, ev[1], ev[3])));
        in[r] = ms_in, out[r] = ms_out;
    }
    for (int i = 0; i < 4; i++) gpt_event_destroy(ev[i]);
    char in_name[48], out_name[48], adam_name[48];
    snprintf(in_name, sizeof in_name, "%s_h2d", name);
    snprintf(out_name, sizeof out_name, "%s_d2h", name);
    snprintf(adam_name, sizeof adam_name, "%s_host_adam", name);
    const double in_ms = host_rate_of(in, gpu, ranks, &bad, c->h2d ? samples : NULL, in_name),
                 out_ms = host_rate_of(out, gpu, ranks, &bad, c->d2h ? samples : NULL, out_name),
                 adam_ms = host_rate_of(adam, gpu, ranks, &bad, samples, adam_name);
    if (bad) return -1;
    if (c->h2d) *h2d_gbs = (double)copies * c->bytes / (in_ms * 1e6);
    if (c->d2h) *d2h_gbs = (double)copies * c->bytes / (out_ms * 1e6);
    *adam_ms_per_mparam = adam_ms / (h->job.n / 1e6);
    return 0;
}

/* Every rank of the job here before the next measurement (none: nothing to wait for); 1 if
 * the barrier failed. */
int calibrate_in_step(const comm_world *ranks)
{
    return ranks && comm_barrier(ranks) != 0;
}

/* Whether any rank of the job failed so far (`bad`: this one): every rank calls it at the
 * same point, so that either all go on to the barriers and collectives that follow or none
 * does (one rank out of memory would otherwise leave the others waiting for it). */
int calibrate_any_failed(const comm_world *ranks, int bad)
{
    if (!ranks) return bad;
    int any = 1;
    return comm_max_int(ranks, bad != 0, &any) != 0 || any;
}

/* Pinned copies each way, and both ways at once on two streams; the host Adam pool with the
 * run's threads; host copies; and all of them at once (measure_busy).  With `ranks` (not
 * NULL), every rank of the job measures at once, each its own GPU's copies and its own pool,
 * in step (a barrier before each measurement): the rates one rank gets while the others
 * share the machine's host memory and cores. */
int calibrate_measure_rates(const run_config *run_cfg, gpt_backend *be, cJSON *rates, const comm_world *ranks)
{
    const int gpu = run_cfg->eng.device == DEVICE_CUDA;
    const size_t bytes = (size_t)(gpu ? 256 : 32) << 20;
    /* the host Adam on blocks of a layer's size (64 M parameters, 1 GiB of p, g, m, v: out of
     * every cache, as a streamed layer is; 16 M on the CPU backend), swept over the region the
     * run's host state spans (calibrate_host_region_params) */
    const size_t n = host_adam_block(gpu), region = calibrate_host_region_params(run_cfg, ranks);
    if (region > n && (!ranks || ranks->rank == 0)) {
        printf("calibrate: the host Adam swept over %.0f M parameters%s (the run's shard: the rate depends on the region)\n",
               region / 1e6, ranks ? " a rank" : "");
        fflush(stdout);
    }
    void *h1 = NULL, *h2 = NULL, *d1 = NULL, *d2 = NULL;
    float *p = NULL, *g = NULL, *m = NULL, *v = NULL;
    uint16_t *w = NULL;
    gpt_stream *s1 = NULL, *s2 = NULL;
    cpu_adam *pool = NULL;
    int bad = be->ops->stream_create(be, &s1) || be->ops->stream_create(be, &s2) ||
              gpt_host_alloc_pinned(be, &h1, bytes) || gpt_host_alloc_pinned(be, &h2, bytes) ||
              be->ops->dev_alloc(be, &d1, bytes) || be->ops->dev_alloc(be, &d2, bytes) ||
              host_pages_alloc_zeroed((void **)&p, region * sizeof *p) || host_pages_alloc_zeroed((void **)&g, region * sizeof *g) ||
              host_pages_alloc_zeroed((void **)&m, region * sizeof *m) || host_pages_alloc_zeroed((void **)&v, region * sizeof *v) ||
              host_pages_alloc_zeroed((void **)&w, region * sizeof *w) ||
              cpu_adam_create(&pool, run_cfg->eng.threads);
    /* each rate's repetitions (record_samples), with the work each repetition timed */
    cJSON *samples = cJSON_CreateObject();
    bad |= !samples || !cJSON_AddNumberToObject(samples, "copy_bytes", (double)bytes) ||
           !cJSON_AddNumberToObject(samples, "host_adam_mparams", n / 1e6) ||
           !cJSON_AddNumberToObject(samples, "repetition_ms", calibrate_host_rep_ms(gpu));
    bad = calibrate_any_failed(ranks, bad);
    double h2d = 0, d2h = 0, both = 0, up2 = 0, adam = 0, adam_bf16 = 0, copy = 0, busy_h2d = 0, busy_d2h = 0, busy_adam = 0;
    double adam_h2d = 0, adam_d2h = 0, adam_with_h2d = 0, adam_with_d2h = 0, unused = 0;
    double adam_block = 0, adam_bf16_block = 0, adam_under_compute = 0;
    if (!bad) {
        copy_ctx in = {s1, NULL, d1, h1, NULL, NULL, bytes, 0}, out = {NULL, s1, NULL, NULL, h2, d2, bytes, 0};
        copy_ctx both_ways = {s1, s2, d1, h1, h2, d2, bytes, 0}, two_up = {s1, s2, d1, h1, h2, d2, bytes, 1};
        /* each way moves `bytes` in its time; both ways at once, each way moves `bytes` too */
        bad |= calibrate_in_step(ranks);
        const double both_ms = host_ms_in_step(run_copies, &both_ways, &bad, gpu, ranks, samples, "both");
        /* two upward copies at once, 2 x `bytes` together: whether a second copy engine adds
         * upward bandwidth beside the first (a micro-batch's gradient sum coming up beside a
         * layer's fetch: pred_add_earlier) */
        bad |= calibrate_in_step(ranks);
        up2 = 2.0 * bytes / (host_ms_in_step(run_copies, &two_up, &bad, gpu, ranks, samples, "up2") * 1e6);
        bad |= calibrate_in_step(ranks);
        h2d = bytes / (host_ms_in_step(run_copies, &in, &bad, gpu, ranks, samples, "h2d") * 1e6);
        bad |= calibrate_in_step(ranks);
        d2h = bytes / (host_ms_in_step(run_copies, &out, &bad, gpu, ranks, samples, "d2h") * 1e6);
        both = bytes / (both_ms * 1e6);
        host_ctx h = {pool,
                      {.n = n, .n_decay = n / 2, .optim = gpt_optim_default(), .lr = 1e-4f, .t = 1, .grad_scale = 1.0f},
                      p, g, m, v, NULL, region, 0};
        host_adam_rates(h, w, &bad, gpu, ranks, samples, "host_adam", "host_adam_bf16", &adam, &adam_bf16);
        /* for the record, the same on one block timed again and again (the region one block):
         * what every calibration measured before the region, and which rate each engine's
         * update follows is for a GPU call to show (on two H200s at l48 zero-infinity's, over
         * its whole shard, ran 0.30 ms per M, stronghold's, over 1,007 M, 0.39, the block
         * 0.38) */
        host_ctx one_block = h;
        one_block.region = n;
        host_adam_rates(one_block, w, &bad, gpu, ranks, samples, "host_adam_block", "host_adam_bf16_block", &adam_block,
                        &adam_bf16_block);
        bad |= calibrate_in_step(ranks);
        copy = n * sizeof *p / (host_ms_in_step(run_host_copy, &h, &bad, gpu, ranks, samples, "host_copy") * 1e6);
        /* Adam runs for a repetition's length (at least three), and as many copies each way as
         * they take alone, so the two overlap */
        int busy_runs = calls_per_rep(adam * (n / 1e6), calibrate_host_rep_ms(gpu), ranks, &bad);
        busy_runs = busy_runs > 3 ? busy_runs : 3;
        int copies = both_ms > 0 ? (int)(busy_runs * adam * (n / 1e6) / both_ms + 0.5) : 1;
        copies = copies > 0 ? copies : 1;
        bad |= !cJSON_AddNumberToObject(samples, "busy_copies", copies);
        bad |= calibrate_in_step(ranks);
        bad |= measure_busy(be, &both_ways, &h, copies, busy_runs, gpu, ranks, bad, samples, "busy",
                            &busy_h2d, &busy_d2h, &busy_adam) != 0;
        /* and each direction with the host Adam alone beside it (as many copies as the Adam
         * runs take: one way at a time moves about as fast as each of both ways) */
        bad |= calibrate_in_step(ranks);
        bad |= measure_busy(be, &in, &h, copies, busy_runs, gpu, ranks, bad, samples, "beside_h2d",
                            &adam_h2d, &unused, &adam_with_h2d) != 0;
        bad |= calibrate_in_step(ranks);
        bad |= measure_busy(be, &out, &h, copies, busy_runs, gpu, ranks, bad, samples, "beside_d2h",
                            &unused, &adam_d2h, &adam_with_d2h) != 0;
        bad |= calibrate_any_failed(ranks, bad);
        if (!bad) adam_under_compute = measure_adam_under_compute(run_cfg, be, &h, busy_runs, gpu, ranks, samples);
        bad |= adam_under_compute <= 0;
    }
    const int threads = pool ? cpu_adam_threads(pool) : 0;
    if (pool) cpu_adam_destroy(pool);
    free(p);
    free(g);
    free(m);
    free(v);
    free(w);
    if (d2) be->ops->dev_free(be, d2);
    if (d1) be->ops->dev_free(be, d1);
    if (h2) gpt_host_free_pinned(be, h2);
    if (h1) gpt_host_free_pinned(be, h1);
    if (s2) be->ops->stream_destroy(s2);
    if (s1) be->ops->stream_destroy(s1);
    if (bad) {
        cJSON_Delete(samples);
        fprintf(stderr, "aebench: --calibrate: the copy and host Adam measurement failed\n");
        return EXIT_RUN_ERROR;
    }
    cJSON_AddNumberToObject(rates, "h2d_gbs", h2d);
    cJSON_AddNumberToObject(rates, "d2h_gbs", d2h);
    cJSON_AddNumberToObject(rates, "both_h2d_gbs", both);
    cJSON_AddNumberToObject(rates, "both_d2h_gbs", both);
    cJSON_AddNumberToObject(rates, "up2_h2d_gbs", up2);
    cJSON_AddNumberToObject(rates, "host_adam_ms_per_mparam", adam);
    cJSON_AddNumberToObject(rates, "host_adam_bf16_ms_per_mparam", adam_bf16);
    cJSON_AddNumberToObject(rates, "host_threads", threads);
    cJSON_AddNumberToObject(rates, "busy_h2d_gbs", busy_h2d);
    cJSON_AddNumberToObject(rates, "busy_d2h_gbs", busy_d2h);
    cJSON_AddNumberToObject(rates, "busy_host_adam_ms_per_mparam", busy_adam);
    cJSON_AddNumberToObject(rates, "adam_h2d_gbs", adam_h2d);
    cJSON_AddNumberToObject(rates, "adam_d2h_gbs", adam_d2h);
    cJSON_AddNumberToObject(rates, "host_adam_h2d_ms_per_mparam", adam_with_h2d);
    cJSON_AddNumberToObject(rates, "host_adam_d2h_ms_per_mparam", adam_with_d2h);
    cJSON_AddNumberToObject(rates, "host_copy_gbs", copy);
    cJSON_AddNumberToObject(rates, "host_adam_region_mparams", region / 1e6);
    cJSON_AddNumberToObject(rates, "host_adam_block_ms_per_mparam", adam_block);
    cJSON_AddNumberToObject(rates, "host_adam_bf16_block_ms_per_mparam", adam_bf16_block);
    cJSON_AddNumberToObject(rates, "host_adam_under_compute", adam_under_compute);
    cJSON_AddItemToObject(rates, "samples_ms", samples);
    /* the memory a run could plan with: the device's free memory and 90% of the host's
     * available memory (the run's defaults, run_resolve_budgets) */
    size_t gfree = 0, gtotal = 0, havail = 0;
    if (be->ops->dev_mem_info(be, &gfree, &gtotal) != 0 || gpt_host_mem_info(&havail, NULL) != 0) {
        fprintf(stderr, "aebench: --calibrate: cannot read the free memory\n");
        return EXIT_RUN_ERROR;
    }
    cJSON_AddNumberToObject(rates, "gpu_bytes", (double)gfree);
    cJSON_AddNumberToObject(rates, "host_bytes", (double)(havail / 10 * 9));
    return 0;
}

/* ---- the calibration: an entry kept while fresh, else measured anew ---------------------- */

/* Whether a file's rates were measured over a host region like this run's (within 2x; none
 * said: a file from before the region, measured again on a GPU machine). */
static int region_covers(const cJSON *rates, const run_config *run_cfg)
{
    const int gpu = run_cfg->eng.device == DEVICE_CUDA;
    const double want = calibrate_host_region_params(run_cfg, NULL) / 1e6;
    const cJSON *had = cJSON_GetObjectItemCaseSensitive(rates, "host_adam_region_mparams");
    if (!cJSON_IsNumber(had)) return !gpu;
    return machine_region_near(had->valuedouble, want);
}

static int fresh(const cJSON *o, time_t now)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "measured");
    return cJSON_IsNumber(t) && now - (time_t)t->valuedouble < (time_t)MACHINE_FRESH_DAYS * 86400;
}

/* The entry for directory `dir` in root's array `list`: kept when fresh, else measured
 * (`measure` fills a new entry, which replaces the old one; *measured set). */
typedef int (*dir_measure_fn)(const run_config *run_cfg, gpt_backend *be, cJSON *entry);
static int calibrate_dir(cJSON *root, const char *list, const char *what, const char *dir, dir_measure_fn measure,
                         const run_config *run_cfg, gpt_backend *be, time_t now, int *measured)
{
    cJSON *entries = machine_file_array_in(root, list);
    int where = -1, i = 0;
    const cJSON *d;
    cJSON_ArrayForEach(d, entries) {
        if (machine_file_entry_of_dir(d, dir)) where = i;
        i++;
    }
    if (where >= 0 && fresh(cJSON_GetArrayItem(entries, where), now)) {
        printf("calibrate: %s at %s is fresh: kept\n", what, dir);
        return 0;
    }
    printf("calibrate: %s at %s ...\n", what, dir);
    fflush(stdout);
    cJSON *entry = cJSON_CreateObject();
    if (!entry) return EXIT_RUN_ERROR;
    cJSON_AddNumberToObject(entry, "measured", (double)now);
    const int code = measure(run_cfg, be, entry);
    if (code) {
        cJSON_Delete(entry);
        return code;
    }
    if (where >= 0) cJSON_DeleteItemFromArray(entries, where);
    cJSON_AddItemToArray(entries, entry);
    *measured = 1;
    return 0;
}

/* The compute entry at run_cfg's shape (its micro-batch), into the machine file's list: kept
 * when fresh, else measured (one layer, the embedding, the head and AdamW alone, and the
 * engine's step at two depths for the scales --predict applies).  0 or an exit code. */
static int calibrate_compute_entry(const run_config *run_cfg, gpt_backend *be, cJSON *list, time_t now, int *measured)
{
    int code = 0;
    const gpt_shape *sh = &run_cfg->eng.shape;
    int at = 0, found = -1;
    const cJSON *e;
    cJSON_ArrayForEach(e, list) {
        if (machine_file_same_entry(e, &run_cfg->eng, run_cfg->eng.device == DEVICE_CPU ? "cpu" : "cuda")) found = at;
        at++;
    }
    if (!code && found >= 0 && fresh(cJSON_GetArrayItem(list, found), now)) {
        printf("calibrate: the entry for h%d heads%d s%d b%d vocab%d %s %s is fresh: kept\n", sh->hidden,
               sh->heads, sh->seq, sh->batch, sh->vocab, machine_file_math_of(&run_cfg->eng),
               machine_file_dtype_of(&run_cfg->eng));
    } else if (!code) {
        printf("calibrate: one layer, the embedding, the head and AdamW at h%d heads%d s%d b%d vocab%d %s %s ...\n",
               sh->hidden, sh->heads, sh->seq, sh->batch, sh->vocab, machine_file_math_of(&run_cfg->eng),
               machine_file_dtype_of(&run_cfg->eng));
        fflush(stdout);
        cJSON *entry = cJSON_CreateObject();
        cJSON_AddNumberToObject(entry, "hidden", sh->hidden);
        cJSON_AddNumberToObject(entry, "heads", sh->heads);
        cJSON_AddNumberToObject(entry, "seq", sh->seq);
        cJSON_AddNumberToObject(entry, "batch", sh->batch);
        cJSON_AddNumberToObject(entry, "vocab", sh->vocab);
        cJSON_AddStringToObject(entry, "math", machine_file_math_of(&run_cfg->eng));
        cJSON_AddStringToObject(entry, "dtype", machine_file_dtype_of(&run_cfg->eng));
        cJSON_AddNumberToObject(entry, "measured", (double)now);
        code = measure_compute(run_cfg, be, entry);
        *measured = 1;
        /* The per-layer slope from l2 and a deeper step, STEP_DEEP layers where that fits
         * (else 4): over two layers, one step's noise of a millisecond moved the slope by 5%
         * (two H200s at h4096 b4: layer_scale 1.08 and 1.14 on two machines, and a 24-layer
         * run 6% slower than the 1.08 predicted).  The two depths in turn, twice, each
         * depth's mean kept: a drift of the machine between them cancels, where keeping the
         * faster of each (as before) kept the luckiest clock and predicted fast. */
        enum { STEP_SHALLOW = 2, STEP_DEEP = 8, STEP_REPS = 2 };
        int deep = STEP_DEEP;
        double t2 = 0, tdeep = 0;
        for (int rep = 0; rep < STEP_REPS && !code; rep++) {
            double a = 0, b = 0;
            code = measure_step(run_cfg, be, STEP_SHALLOW, &a, 0);
            if (!code) code = measure_step(run_cfg, be, deep, &b, deep > 4);
            if (code == STEP_DOES_NOT_FIT && rep == 0) {
                printf("calibrate: megatron-lm at l%d does not fit the GPU: the per-layer slope from l4\n", deep);
                deep = 4;
                code = measure_step(run_cfg, be, deep, &b, 0);
            } else if (code == STEP_DOES_NOT_FIT) { /* (a depth that fit once: both reps at one depth) */
                fprintf(stderr, "aebench: --calibrate: megatron-lm at l%d fit, then did not\n", deep);
                code = EXIT_RUN_ERROR;
            }
            t2 += a / STEP_REPS, tdeep += b / STEP_REPS;
        }
        if (!code) {
            /* the pieces against the engine's step, per layer ((tdeep - t2) over the layers
             * between) and for the rest: the scales --predict applies to the pieces */
            const double num = cJSON_GetObjectItemCaseSensitive(entry, "layer_fwd_ms")->valuedouble +
                               cJSON_GetObjectItemCaseSensitive(entry, "layer_bwd_ms")->valuedouble,
                         adam = cJSON_GetObjectItemCaseSensitive(entry, "gpu_adam_ms_per_mparam")->valuedouble;
            const double PL = (double)gpt_layer_layout_of(sh).total, PE = (double)gpt_embed_layout_of(sh).total;
            const double per_layer = num + adam * PL / 1e6;
            const double rest = cJSON_GetObjectItemCaseSensitive(entry, "embed_fwd_ms")->valuedouble +
                                cJSON_GetObjectItemCaseSensitive(entry, "head_ms")->valuedouble +
                                cJSON_GetObjectItemCaseSensitive(entry, "embed_bwd_ms")->valuedouble + adam * PE / 1e6;
            const double layer_step = (tdeep - t2) / (deep - STEP_SHALLOW), rest_step = t2 - STEP_SHALLOW * layer_step;
            cJSON_AddNumberToObject(entry, "step_l2_ms", t2);
            cJSON_AddNumberToObject(entry, "step_deep_ms", tdeep);
            cJSON_AddNumberToObject(entry, "step_deep_layers", deep);
            cJSON_AddNumberToObject(entry, "layer_scale", layer_step > 0 ? layer_step / per_layer : 1.0);
            cJSON_AddNumberToObject(entry, "rest_scale", rest_step > 0 ? rest_step / rest : 1.0);
        }
        if (!code) {
            if (found >= 0) cJSON_DeleteItemFromArray(list, found);
            cJSON_AddItemToArray(list, entry);
        } else {
            cJSON_Delete(entry);
        }
    }
    return code;
}

int machine_calibrate(const run_config *run_cfg, gpt_backend *be, const char *path)
{
    const time_t now = time(NULL);
    char err[600] = "";
    cJSON *root = NULL;
    if (access(path, F_OK) == 0) {
        root = machine_file_read_json(path, err, sizeof err);
        if (root && machine_file_version_refused(root, path, err, sizeof err)) {
            cJSON_Delete(root);
            root = NULL;
        }
        if (!root) {
            fprintf(stderr, "aebench: %s (move it away to calibrate anew)\n", err);
            return EXIT_BAD_INPUT;
        }
    } else {
        root = cJSON_CreateObject();
    }
    char desc[320] = "", host[64] = "";
    be->ops->describe(be, desc, sizeof desc);
    if (gethostname(host, sizeof host) != 0) host[0] = '\0';
    host[sizeof host - 1] = '\0';
    cJSON_DeleteItemFromObjectCaseSensitive(root, "aebench_machine");
    cJSON_AddNumberToObject(root, "aebench_machine", MACHINE_FORMAT);
    cJSON_DeleteItemFromObjectCaseSensitive(root, "host");
    cJSON_AddStringToObject(root, "host", host);
    cJSON_DeleteItemFromObjectCaseSensitive(root, "device");
    cJSON_AddStringToObject(root, "device", desc);
    cJSON_DeleteItemFromObjectCaseSensitive(root, "backend");
    cJSON_AddStringToObject(root, "backend", run_cfg->eng.device == DEVICE_CUDA ? "cuda" : "cpu");
    int code = 0, measured = 0;
    const cJSON *rates_old = cJSON_GetObjectItemCaseSensitive(root, "rates");
    if (rates_old && fresh(rates_old, now) && machine_file_has_every_rate(rates_old) &&
        region_covers(rates_old, run_cfg)) {
        printf("calibrate: the machine's rates in %s are fresh (under %d days): kept\n", path, MACHINE_FRESH_DAYS);
    } else {
        cJSON *rates = cJSON_CreateObject();
        printf("calibrate: copies, host Adam, host memory ...\n");
        fflush(stdout);
        code = calibrate_measure_rates(run_cfg, be, rates, NULL);
        measured = 1;
        cJSON_AddNumberToObject(rates, "measured", (double)now);
        cJSON_DeleteItemFromObjectCaseSensitive(root, "rates");
        cJSON_AddItemToObject(root, "rates", rates);
    }
    /* every micro-batch size --search may pick (search_micro_batch_sizes), each an entry */
    cJSON *list = machine_file_array_in(root, "compute");
    int sizes[64];
    char why[200];
    const int nsizes = code ? 0 : search_micro_batch_sizes(run_cfg, run_cfg->eng.shape.batch, sizes, 64, why, sizeof why);
    if (nsizes < 0) {
        fprintf(stderr, "aebench: --calibrate: %s\n", why);
        code = EXIT_BAD_INPUT;
    }
    if (nsizes > 1) {
        printf("calibrate: micro-batches");
        for (int i = 0; i < nsizes; i++) printf("%s%d", i ? ", " : " ", sizes[i]);
        printf(" (each --search may pick: -b fixes one)\n");
    }
    run_config *at_batch = nsizes > 0 ? malloc(sizeof *at_batch) : NULL;
    if (nsizes > 0 && !at_batch) code = EXIT_RUN_ERROR;
    for (int i = 0; !code && i < nsizes; i++) {
        *at_batch = *run_cfg;
        at_batch->eng.shape.batch = sizes[i];
        code = calibrate_compute_entry(at_batch, be, list, now, &measured);
    }
    free(at_batch);
    /* --offload nvme: the disk tier at --nvme-dir; --ckpt-dir of an engine that writes its persistent
     * checkpoint there (an entry per directory) */
    if (!code && run_cfg->eng.offload == OFFLOAD_NVME)
        code = calibrate_dir(root, "disks", "the disk tier", run_cfg->eng.nvme_dir, calibrate_measure_disk, run_cfg, be, now,
                             &measured);
    if (!code && calibrate_ckpt_dir_asked(run_cfg))
        code = calibrate_dir(root, "checkpoint_dirs", "the persistent checkpoint", run_cfg->eng.ckpt_dir,
                             calibrate_measure_ckpt_dir, run_cfg, be, now, &measured);
    if (!code && !measured) printf("calibrate: nothing to measure: %s kept as it is\n", path);
    if (!code && measured) code = machine_file_write(root, path);
    cJSON_Delete(root);
    return code;
}
