/*
 * calibrate_collectives.c — --calibrate under mpirun (machine_calibrate_collectives): the
 * collectives among the job's ranks, what they slow the compute beside them by, and the rates
 * each rank gets while every rank works at once, merged by rank 0 into the machine file.  Its
 * own file because it is the one measurement every rank of a job takes part in, in step.
 */
#include "machine.h"
#include "calibrate.h"
#include "machine_file.h"

#include "exit_codes.h"
#include "report.h"
#include "search.h"
#include "../engines/runtime/collectives.h"
#include "../engines/runtime/timer.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- the collectives (under mpirun) --------------------------------------------------------- */

/* What the collectives cost the compute beside them at one micro-batch (machine_rates'
 * compute_under_coll, compute_under_shard, compute_under_two). */
typedef struct beside_factors {
    int batch;
    double under, under_shard, under_two;
} beside_factors;

/* One collective of n floats (kind 0 all-reduce, 1 reduce-scatter, 2 all-gather) on g's
 * stream, until it is done; every rank calls it the same way. */
typedef struct coll_ctx {
    coll_group *g;
    float *buf;
    size_t n;
    int kind;
} coll_ctx;
static int issue_collective(const coll_ctx *c)
{
    const int world = coll_world(c->g), r = coll_rank(c->g);
    const size_t part = c->n / world;
    return c->kind == 0   ? coll_all_reduce_sum(c->g, c->buf, c->n)
           : c->kind == 1 ? coll_reduce_scatter_sum(c->g, c->buf + (size_t)r * part, c->buf, part)
                          : coll_all_gather(c->g, c->buf, c->buf + (size_t)r * part, part * sizeof(float));
}
static int run_collective(void *p)
{
    const coll_ctx *c = p;
    const int status = issue_collective(c);
    return status ? status : gpt_stream_sync(coll_stream(c->g));
}

/* A layer's backward (LAYER_COPIES of them, as measure_compute times it) beside collectives
 * of `coll->n` floats on the collectives' stream, the one timed while the other is queued to
 * outlast it; every rank runs it in step.  The ratio to the timed one's time alone, at least 1;
 * 0 on failure.
 *   timed_coll 0: the backward, against alone: how much the collectives' kernels (SMs and
 *     memory bandwidth taken from the compute) slow a data-parallel step's compute.  `shard`:
 *     reduce-scatters and all-gathers in turn (ZeRO-2/3's: on two H200s a backward beside them
 *     took 1.44x its time alone, beside all-reduces 1.56x; priced at the all-reduces' factor
 *     ZeRO-3 came out 4-13% slow), else coll's kind.
 *   timed_coll 1: the mirror, COLL_BESIDE collectives of coll's kind, against one alone (timed
 *     here, with the compute's buffers and stream open as beside it): what the compute costs
 *     them (measure_coll_under_compute).
 * coll_ms: one collective's time alone, which sizes the queue (timed_coll 1: measured here). */
enum { COLL_BESIDE = 8 };
static double measure_beside(const run_config *run_cfg, gpt_backend *be, const coll_ctx *coll,
                             const coll_ctx *second, int shard, double coll_ms, int timed_coll,
                             const comm_world *comm)
{
    compute_bufs b;
    int bad = calibrate_compute_ctx_open(run_cfg, be, &b) != 0;
    double bwd = 0, t[REPS];
    if (!bad) bwd = calibrate_time_ms(b.c.s, calibrate_run_layer_bwd, &b.c, &bad);
    if (!bad && timed_coll) coll_ms = calibrate_median_ms(run_collective, (void *)coll, &bad);
    /* enough of the other queued to outlast the timed one, slowed as it is (twice its time
     * for collectives, three times for backwards); every rank must queue as many (the most any
     * rank wants), or none if one cannot */
    bad = calibrate_any_failed(comm, bad || bwd <= 0 || coll_ms <= 0);
    const int want = bad ? 1 : timed_coll ? (int)(3 * COLL_BESIDE * coll_ms / bwd) + 1 : (int)(2 * bwd / coll_ms) + 2;
    int queued = want;
    if (!bad && comm_max_int(comm, want, &queued) != 0) bad = 1;
    for (int r = 0; r < REPS && !bad; r++) {
        /* (in step: a rank still queuing would count as the other's slowing) */
        bad |= gpt_stream_sync(b.c.s) != 0 || gpt_stream_sync(coll_stream(coll->g)) != 0 ||
               (second && gpt_stream_sync(coll_stream(second->g)) != 0) || calibrate_in_step(comm);
        double t0 = 0;
        if (timed_coll) {
            for (int k = 0; k < queued; k++) calibrate_run_layer_bwd(&b.c);
            t0 = wall_ms();
            for (int k = 0; k < COLL_BESIDE && !bad; k++) bad |= issue_collective(coll) != 0;
            bad |= gpt_stream_sync(coll_stream(coll->g)) != 0;
            t[r] = (wall_ms() - t0) / COLL_BESIDE;
        } else {
            for (int k = 0; k < queued && !bad; k++) {
                const coll_ctx one = {coll->g, coll->buf, coll->n, shard ? 1 + k % 2 : coll->kind};
                bad |= issue_collective(&one) != 0 || (second && issue_collective(second) != 0);
            }
            t0 = wall_ms();
            calibrate_run_layer_bwd(&b.c);
            bad |= gpt_stream_sync(b.c.s) != 0;
            t[r] = wall_ms() - t0;
        }
        bad |= gpt_stream_sync(b.c.s) != 0 || gpt_stream_sync(coll_stream(coll->g)) != 0 ||
               (second && gpt_stream_sync(coll_stream(second->g)) != 0);
    }
    calibrate_compute_ctx_close(be, &b);
    if (bad) return 0;
    const double alone = timed_coll ? coll_ms : bwd, with = median_of(t, REPS);
    return with > alone ? with / alone : 1.0;
}

/* measure_beside's mirror for one `kind` of collective, each of a layer's parameters in the
 * run's dtype (what ZeRO-3 and the offload engines move at a time).  The model without it had
 * l48 ZeRO-3 at two micro-batches 16% fast on two H200s.  Sized 128 MiB, they came out
 * 2.1-2.2x at h4096 where a layer's (402 MB) were 1.15-1.45x, and those put the searches'
 * trained runs within 10% (bench/results/2026-11-30b-h200x2-collectives-beside-compute).  The
 * ratio, at least 1; 0 on failure. */
static double measure_coll_under_compute(const run_config *run_cfg, gpt_backend *be, coll_group *g, int kind,
                                         const comm_world *comm)
{
    const int world = coll_world(g);
    const size_t layer = gpt_act_bytes(gpt_layer_layout_of(&run_cfg->eng.shape).total,
                                       run_cfg->eng.bf16 ? GPT_BF16 : GPT_F32) / sizeof(float);
    const size_t n = (layer + (size_t)world - 1) / (size_t)world * (size_t)world;
    float *buf = NULL;
    int bad = be->ops->dev_alloc(be, (void **)&buf, n * sizeof(float)) ||
              gpt_stream_memset_zero(coll_stream(g), buf, n * sizeof(float));
    const coll_ctx coll = {g, buf, n, kind};
    const double f = calibrate_any_failed(comm, bad) ? 0 : measure_beside(run_cfg, be, &coll, NULL, 0, 0, 1, comm);
    if (buf) be->ops->dev_free(be, buf);
    return f;
}

/* A layer's backward with ZeRO-3's two collective streams beside it at once, as megatron-lm
 * runs them: the next layer's all-gather of its parameters in the run's dtype on one (g), this
 * layer's reduce-scatter of its fp32 gradients on a second group's stream.  l48 ZeRO-3 at two
 * micro-batches a rank, whose collectives run beside nearly all of its backward, was 15% slower
 * on two H200s than the compute priced with one stream's factor (compute_under_shard, the two
 * kinds in turn on one stream).  The ratio to alone, at least 1; 0 on failure. */
static double measure_compute_under_two_streams(const run_config *run_cfg, gpt_backend *be, coll_group *g,
                                                const comm_world *comm)
{
    const int world = coll_world(g);
    const size_t params = gpt_layer_layout_of(&run_cfg->eng.shape).total;
    const size_t dtype_floats = gpt_act_bytes(params, run_cfg->eng.bf16 ? GPT_BF16 : GPT_F32) / sizeof(float);
    const size_t gather_n = (dtype_floats + (size_t)world - 1) / (size_t)world * (size_t)world,
                 reduce_n = (params + (size_t)world - 1) / (size_t)world * (size_t)world;
    coll_group *g2 = NULL;
    float *gather_buf = NULL, *reduce_buf = NULL;
    int bad = coll_open(&g2, be, comm->rank, world) ||
              be->ops->dev_alloc(be, (void **)&gather_buf, gather_n * sizeof(float)) ||
              be->ops->dev_alloc(be, (void **)&reduce_buf, reduce_n * sizeof(float)) ||
              gpt_stream_memset_zero(coll_stream(g), gather_buf, gather_n * sizeof(float)) ||
              gpt_stream_memset_zero(coll_stream(g2), reduce_buf, reduce_n * sizeof(float));
    const coll_ctx gather = {g, gather_buf, gather_n, PRED_ALL_GATHER},
                   reduce = {g2, reduce_buf, reduce_n, PRED_REDUCE_SCATTER};
    /* (the queue sized by the shorter of the two, so that both outlast the backward) */
    double gather_ms = 0, reduce_ms = 0;
    if (!calibrate_any_failed(comm, bad)) {
        gather_ms = calibrate_median_ms(run_collective, (void *)&gather, &bad);
        reduce_ms = calibrate_median_ms(run_collective, (void *)&reduce, &bad);
    }
    const double shorter = gather_ms < reduce_ms ? gather_ms : reduce_ms;
    const double f =
        calibrate_any_failed(comm, bad) ? 0 : measure_beside(run_cfg, be, &gather, &reduce, 0, shorter, 0, comm);
    if (gather_buf) be->ops->dev_free(be, gather_buf);
    if (reduce_buf) be->ops->dev_free(be, reduce_buf);
    if (g2) coll_close(g2);
    return f;
}

int machine_calibrate_collectives(const run_config *run_cfg, gpt_backend *be, const char *path, const comm_world *comm)
{
    const int rank = comm->rank, world = comm->world;
    /* two sizes, so that latency and rate come apart: t = latency + bytes / rate */
    const size_t small = (size_t)world << 18, large = (size_t)world << (run_cfg->eng.device == DEVICE_CPU ? 21 : 24);
    coll_group *g = NULL;
    float *buf = NULL;
    int bad = coll_open(&g, be, rank, world) || be->ops->dev_alloc(be, (void **)&buf, large * sizeof(float));
    if (!bad) bad = gpt_stream_memset_zero(coll_stream(g), buf, large * sizeof(float)) != 0;
    bad = calibrate_any_failed(comm, bad);
    double lat[3] = {0}, gbs[3] = {0}, large_ms[3] = {0};
    for (int k = 0; k < 3 && !bad; k++) {
        coll_ctx cs = {g, buf, small, k}, cl = {g, buf, large, k};
        const double a = calibrate_median_ms(run_collective, &cs, &bad),
                     b = calibrate_median_ms(run_collective, &cl, &bad);
        calibrate_fit_latency_rate((double)small * sizeof(float), (double)large * sizeof(float), a, b, &lat[k],
                                   &gbs[k]);
        large_ms[k] = b;
    }
    /* what the collectives cost the compute beside them, at every micro-batch --search may
     * pick (a smaller backward loses more to the SMs the collectives' kernels take: l48 ZeRO-3
     * at micro-batch 2 was 15% slower on two H200s than priced with micro-batch 4's factors) */
    int sizes[MACHINE_BESIDE_BATCHES];
    char why[200];
    const int nsizes = bad ? 0
                           : search_micro_batch_sizes(run_cfg, run_cfg->eng.shape.batch, sizes,
                                                      MACHINE_BESIDE_BATCHES, why, sizeof why);
    if (nsizes < 0 && rank == 0) fprintf(stderr, "aebench: --calibrate: %s\n", why);
    if (nsizes <= 0) bad = 1;
    beside_factors at_batch_factors[MACHINE_BESIDE_BATCHES] = {{0}};
    run_config *at_batch = malloc(sizeof *at_batch);
    bad = calibrate_any_failed(comm, bad || !at_batch);
    const coll_ctx beside = {g, buf, large, 0};
    for (int i = 0; i < nsizes && !bad; i++) {
        *at_batch = *run_cfg;
        at_batch->eng.shape.batch = sizes[i];
        at_batch_factors[i].batch = sizes[i];
        at_batch_factors[i].under = measure_beside(at_batch, be, &beside, NULL, 0, large_ms[0], 0, comm);
        at_batch_factors[i].under_shard = calibrate_any_failed(comm, at_batch_factors[i].under <= 0)
                                ? 0
                                : measure_beside(at_batch, be, &beside, NULL, 1, (large_ms[1] + large_ms[2]) / 2, 0, comm);
        at_batch_factors[i].under_two = calibrate_any_failed(comm, at_batch_factors[i].under_shard <= 0)
                              ? 0
                              : measure_compute_under_two_streams(at_batch, be, g, comm);
        bad = calibrate_any_failed(comm, at_batch_factors[i].under_two <= 0);
    }
    free(at_batch);
    if (buf) be->ops->dev_free(be, buf);
    /* (the entry's own factors: the run's micro-batch's, else the largest measured) */
    int own = nsizes - 1;
    for (int i = 0; i < nsizes; i++)
        if (sizes[i] == run_cfg->eng.shape.batch) own = i;
    const double under = nsizes > 0 ? at_batch_factors[own].under : 0, under_shard = nsizes > 0 ? at_batch_factors[own].under_shard : 0,
                 under_two = bad ? 0 : at_batch_factors[own].under_two;
    /* and the collectives beside the compute, each kind (what a step's overlap costs them) */
    double beside_compute[PRED_COLL_KINDS] = {0};
    for (int k = 0; k < PRED_COLL_KINDS; k++)
        beside_compute[k] = calibrate_any_failed(comm, under_two <= 0 || (k > 0 && beside_compute[k - 1] <= 0))
                                ? 0
                                : measure_coll_under_compute(run_cfg, be, g, k, comm);
    coll_close(g);
    cJSON *shared = cJSON_CreateObject();
    if (calibrate_any_failed(comm, !shared || under <= 0 || under_shard <= 0 || beside_compute[2] <= 0) ||
        calibrate_measure_rates(run_cfg, be, shared, comm) != 0) {
        if (rank == 0) fprintf(stderr, "aebench: --calibrate: the collectives failed\n");
        cJSON_Delete(shared);
        return EXIT_RUN_ERROR;
    }
    /* --ckpt-dir: the persistent checkpoint with every rank writing at once (two H100s
     * writing to one disk got 0.94 GB/s each where one alone got 2.8) */
    cJSON *ckpt = NULL;
    if (calibrate_ckpt_dir_asked(run_cfg)) {
        ckpt = cJSON_CreateObject();
        if (calibrate_any_failed(comm, !ckpt) || calibrate_measure_ckpt_dir_ranks(run_cfg, be, ckpt, comm) != 0) {
            cJSON_Delete(shared);
            cJSON_Delete(ckpt);
            return EXIT_RUN_ERROR;
        }
    }
    if (rank != 0) {
        cJSON_Delete(shared);
        cJSON_Delete(ckpt);
        return 0;
    }
    char err[600] = "";
    const int existed = access(path, F_OK) == 0;
    cJSON *root = existed ? machine_file_read_json(path, err, sizeof err) : cJSON_CreateObject();
    if (root && existed && machine_file_version_refused(root, path, err, sizeof err)) {
        cJSON_Delete(root);
        root = NULL;
    }
    if (root && !existed) cJSON_AddNumberToObject(root, "aebench_machine", MACHINE_FORMAT);
    if (!root) {
        fprintf(stderr, "aebench: %s\n", err);
        cJSON_Delete(shared);
        cJSON_Delete(ckpt);
        return EXIT_BAD_INPUT;
    }
    cJSON *list = machine_file_array_in(root, "collectives");
    int at = 0, found = -1;
    const cJSON *e;
    cJSON_ArrayForEach(e, list) {
        const cJSON *w_ = cJSON_GetObjectItemCaseSensitive(e, "world");
        if (cJSON_IsNumber(w_) && w_->valueint == world) found = at;
        at++;
    }
    if (found >= 0) cJSON_DeleteItemFromArray(list, found);
    cJSON *entry = cJSON_CreateObject();
    cJSON_AddNumberToObject(entry, "world", world);
    static const char *const names[] = {"all_reduce", "reduce_scatter", "all_gather"};
    for (int k = 0; k < 3; k++) {
        char key[40];
        snprintf(key, sizeof key, "%s_ms", names[k]);
        cJSON_AddNumberToObject(entry, key, lat[k]);
        snprintf(key, sizeof key, "%s_gbs", names[k]);
        cJSON_AddNumberToObject(entry, key, gbs[k]);
        snprintf(key, sizeof key, "%s_under_compute", names[k]);
        cJSON_AddNumberToObject(entry, key, beside_compute[k]);
        printf("calibrate: %s among %d ranks: %.3f ms + %.2f GB/s; beside a layer's backward %.3fx its time alone\n",
               names[k], world, lat[k], gbs[k], beside_compute[k]);
    }
    cJSON_AddNumberToObject(entry, "compute_under_collectives", under);
    cJSON_AddNumberToObject(entry, "compute_under_sharded_collectives", under_shard);
    cJSON_AddNumberToObject(entry, "compute_under_two_collective_streams", under_two);
    cJSON *per_batch = cJSON_AddArrayToObject(entry, "compute_beside_at");
    for (int i = 0; i < nsizes; i++) {
        cJSON *b = cJSON_CreateObject();
        cJSON_AddNumberToObject(b, "batch", at_batch_factors[i].batch);
        cJSON_AddNumberToObject(b, "compute_under_collectives", at_batch_factors[i].under);
        cJSON_AddNumberToObject(b, "compute_under_sharded_collectives", at_batch_factors[i].under_shard);
        cJSON_AddNumberToObject(b, "compute_under_two_collective_streams", at_batch_factors[i].under_two);
        cJSON_AddItemToArray(per_batch, b);
        printf("calibrate: b%d: a layer's backward with all-reduces beside it: %.3fx its time alone; with "
               "reduce-scatters and all-gathers: %.3fx; with a layer's all-gathers and its reduce-scatters on two "
               "streams at once: %.3fx\n", at_batch_factors[i].batch, at_batch_factors[i].under, at_batch_factors[i].under_shard, at_batch_factors[i].under_two);
    }
    /* (the memory a run could plan with is the single-rank entry's) */
    cJSON_DeleteItemFromObject(shared, "gpu_bytes");
    cJSON_DeleteItemFromObject(shared, "host_bytes");
    cJSON_AddItemToObject(entry, "rates", shared);
    if (ckpt) {
        /* (one directory per world entry: the one calibrated last) */
        cJSON_AddNumberToObject(ckpt, "measured", (double)time(NULL));
        cJSON_AddItemToObject(entry, "checkpoint_dir", ckpt);
    }
    printf("calibrate: every rank at once, each: host->gpu %.1f GB/s, gpu->host %.1f GB/s, host Adam %.3f ms per M "
           "params (%d threads; %.2fx beside a layer's backward)\n", cJSON_GetObjectItem(shared, "h2d_gbs")->valuedouble,
           cJSON_GetObjectItem(shared, "d2h_gbs")->valuedouble,
           cJSON_GetObjectItem(shared, "host_adam_ms_per_mparam")->valuedouble,
           cJSON_GetObjectItem(shared, "host_threads")->valueint,
           cJSON_GetObjectItem(shared, "host_adam_under_compute")->valuedouble);
    cJSON_AddNumberToObject(entry, "measured", (double)time(NULL));
    cJSON_AddItemToArray(list, entry);
    const int code = machine_file_write(root, path);
    cJSON_Delete(root);
    return code;
}
