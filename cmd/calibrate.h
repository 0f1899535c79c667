/*
 * calibrate.h — what --calibrate's files share: calibrate.c (the timing, the compute, the
 * copies and the host Adam, and machine_calibrate, which runs them all), calibrate_disk.c (the
 * disk tier, an engine's persistent checkpoint) and calibrate_collectives.c (under mpirun).
 * Internal to those files: the rest of cmd/ calibrates through machine.h.
 */
#ifndef AEBENCH_CALIBRATE_H
#define AEBENCH_CALIBRATE_H

#include "cli.h"
#include "../engines/runtime/comm.h"
#include "../kernels/model.h"

#include <cjson/cJSON.h>
#include <stddef.h>

/* ---- timing (calibrate.c) ------------------------------------------------------------------ */

/* How many timed calls every measurement takes (after one untimed warm-up). */
enum { REPS = 5 };
/* What is timed: 0, or an error. */
typedef int (*timed_fn)(void *ctx);
/* The median ms of REPS calls of run(ctx); *bad set when a call fails. */
double calibrate_median_ms(timed_fn run, void *ctx, int *bad);
/* The ms of REPS calls of run(ctx) a host rate is taken from: the fastest on a GPU machine,
 * the median on the CPU backend (calibrate.c says why); *bad set when a call fails. */
double calibrate_host_ms(timed_fn run, void *ctx, int *bad, int gpu);
/* A latency (ms) and a rate (GB/s) from two timed sizes: t = latency + bytes / rate. */
void calibrate_fit_latency_rate(double small, double large, double small_ms, double large_ms, double *lat_ms,
                                double *gbs);
/* The median ms of what `issue` puts on stream s, until s has done it. */
typedef void (*issue_fn)(void *ctx);
double calibrate_time_ms(gpt_stream *s, issue_fn issue, void *ctx, int *bad);

/* ---- one micro-batch's pieces (calibrate.c) ------------------------------------------------ */

/* The buffers of the pieces at a run's shape and the stream they are timed on. */
typedef struct compute_ctx {
    gpt_stream *s;
    const gpt_shape *sh;
    void *lp, *ep, *x_in, *x_out, *dres, *acts_base, *scratch_base, *head_base;
    float *lg, *eg, *lm, *lv, *master, *norm_out;
    int32_t *tokens, *targets;
    gpt_layer_acts acts;
    gpt_layer_scratch scratch;
    gpt_head_acts head;
    size_t PL;
    gpt_optim optim;
    const gpt_tp *tp; /* the layer split the layer pieces run (NULL: the whole layer) */
} compute_ctx;
enum { COMPUTE_BUFS = 16 };
typedef struct compute_bufs {
    compute_ctx c;
    void **ptr[COMPUTE_BUFS]; /* where each allocation's pointer is (in c) */
    int n;                    /* how many were tried */
} compute_bufs;
/* Open b at run_cfg's shape on the backend: 0, or EXIT_RUN_ERROR said on stderr; close it either
 * way. */
int calibrate_compute_ctx_open(const run_config *run_cfg, gpt_backend *be, compute_bufs *b);
void calibrate_compute_ctx_close(gpt_backend *be, compute_bufs *b);
/* A layer's backward with recompute as a step does it (p: a compute_ctx, as an issue_fn's ctx). */
void calibrate_run_layer_bwd(void *p);

/* ---- the job's ranks in step (calibrate.c) ------------------------------------------------- */

/* A barrier of ranks (NULL: none); 1 if it failed. */
int calibrate_in_step(const comm_world *ranks);
/* Whether any rank failed so far (`bad`: this one); every rank calls it at the same point. */
int calibrate_any_failed(const comm_world *ranks, int bad);

/* ---- what is measured ---------------------------------------------------------------------- */

/* The copies, the host Adam and host memory into rates (ranks: every rank of the job at
 * once, in step; NULL: this process alone).  calibrate.c.  0, or EXIT_RUN_ERROR. */
int calibrate_measure_rates(const run_config *run_cfg, gpt_backend *be, cJSON *rates, const comm_world *ranks);
/* The disk tier at run_cfg's --nvme-dir into entry.  calibrate_disk.c.  0, or EXIT_RUN_ERROR. */
int calibrate_measure_disk(const run_config *run_cfg, gpt_backend *be, cJSON *entry);
/* the persistent checkpoint at run_cfg's --ckpt-dir into entry, by this process alone, or
 * (_ranks, not NULL) by every rank of the job at once.  calibrate_disk.c.  0, or
 * EXIT_RUN_ERROR. */
int calibrate_measure_ckpt_dir(const run_config *run_cfg, gpt_backend *be, cJSON *entry);
int calibrate_measure_ckpt_dir_ranks(const run_config *run_cfg, gpt_backend *be, cJSON *entry, const comm_world *ranks);
/* Whether --calibrate measures the persistent checkpoint at --ckpt-dir: given, and the run's
 * engine writes one there (engine_vtbl.persistent_ckpt; -m all: none).  calibrate_disk.c. */
int calibrate_ckpt_dir_asked(const run_config *run_cfg);

#endif
