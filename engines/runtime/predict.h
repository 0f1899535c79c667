/*
 * predict.h — what the engines' predict functions (engine.h) build their schedules from: the
 * calibrated costs of the pieces (machine_rates, engine.h) and a resource timeline.
 *
 * A prediction walks the engine's step in its own dependency order, one piece at a time:
 * each piece runs on one resource (the compute stream, a copy direction, the host Adam pool,
 * ...) once that resource is free and once what it waits for has ended (pred_run).  Steps
 * are walked until they repeat (an engine whose updates overlap the next step reaches its
 * steady state after two), and the last step's length is the prediction.
 */
#ifndef AEBENCH_PREDICT_H
#define AEBENCH_PREDICT_H

#include "../engine.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct pred_timeline {
    double free_at[BUSY_KINDS]; /* when each resource is next free (ms) */
    double busy[BUSY_KINDS];    /* its busy time in the step being walked */
} pred_timeline;

/* Run a piece of `ms` on resource r once r is free and `after` has passed; its end. */
static inline double pred_run(pred_timeline *t, int r, double ms, double after)
{
    const double start = t->free_at[r] > after ? t->free_at[r] : after;
    t->free_at[r] = start + ms;
    t->busy[r] += ms;
    return start + ms;
}

static inline double pred_max(double a, double b) { return a > b ? a : b; }

/* ms of a pinned copy of n floats each way (both: while the other way runs too). */
static inline double pred_h2d_ms(const machine_rates *m, double floats, int both)
{
    return floats * 4.0 / ((both ? m->both_h2d_gbs : m->h2d_gbs) * 1e6);
}
static inline double pred_d2h_ms(const machine_rates *m, double floats, int both)
{
    return floats * 4.0 / ((both ? m->both_d2h_gbs : m->d2h_gbs) * 1e6);
}
static inline double pred_host_adam_ms(const machine_rates *m, double params)
{
    return params / 1e6 * m->host_adam_ms_per_mparam;
}
static inline double pred_gpu_adam_ms(const machine_rates *m, double params)
{
    return params / 1e6 * m->gpu_adam_ms_per_mparam;
}
/* A collective over the run's ranks of `floats` floats (the full buffer). */
static inline double pred_coll_ms(double lat_ms, double gbs, double floats)
{
    return lat_ms + floats * 4.0 / (gbs * 1e6);
}

/* A layer's backward: calibrated with the recompute of a checkpointed layer; without
 * checkpointing (--no-ckpt) that recompute (about a forward) is not done. */
static inline double pred_layer_bwd_ms(const machine_rates *m, const engine_config *cfg)
{
    return cfg->ckpt ? m->layer_bwd_ms : pred_max(m->layer_bwd_ms - m->layer_fwd_ms, 0.0);
}

/* The resource with the most busy time: what the step is bound by when its pieces overlap. */
static inline int pred_bound(const pred_timeline *t)
{
    int b = 0;
    for (int k = 1; k < BUSY_KINDS; k++)
        if (t->busy[k] > t->busy[b]) b = k;
    return b;
}

/* Start a new step at time `at`: busy times count from here, and the compute stream starts
 * no earlier (the host issues the step then; copies and host Adam may still be running). */
static inline void pred_step(pred_timeline *t, double at)
{
    for (int k = 0; k < BUSY_KINDS; k++) t->busy[k] = 0;
    t->free_at[BUSY_COMPUTE] = pred_max(t->free_at[BUSY_COMPUTE], at);
}

/* What a predict function does not model yet (PRED_* bits it cannot take): 1 and out->why
 * set when cfg asks for one of them, else 0. */
enum { PRED_RANKS = 1, PRED_MICRO = 2, PRED_NVME = 4, PRED_DPU = 8 };
static inline int pred_unmodelled(const engine_config *cfg, unsigned cannot, engine_prediction *out)
{
    const char *what = (cannot & PRED_RANKS) && engine_world(cfg) > 1              ? "N ranks are"
                       : (cannot & PRED_MICRO) && engine_micro_batches(cfg) > 1    ? "micro-batches are"
                       : (cannot & PRED_NVME) && cfg->offload == OFFLOAD_NVME      ? "--offload nvme is"
                       : (cannot & PRED_DPU) && cfg->dpu                          ? "--dpu is"
                                                                                   : NULL;
    if (what) snprintf(out->why, sizeof out->why, "%s not modelled yet", what);
    return what != NULL;
}

/* n doubles per array, `count` arrays in one zeroed block (free the first); NULL and out->why
 * set when there is no memory. */
static inline double *pred_arrays(engine_prediction *out, size_t n, int count)
{
    double *a = calloc(n * (size_t)count, sizeof *a);
    if (!a) snprintf(out->why, sizeof out->why, "out of memory");
    return a;
}

/* The prediction's fields from a walked step [start, end). */
static inline void pred_done(engine_prediction *out, const pred_timeline *t, double start, double end)
{
    /* In the steady state no resource can be busier per step than a step is long (a walk of a
     * few steps may not have reached it when one resource lags): the step is at least that. */
    out->ms = end - start;
    for (int k = 0; k < BUSY_KINDS; k++)
        if (t->busy[k] > out->ms) out->ms = t->busy[k];
    for (int k = 0; k < BUSY_KINDS; k++) out->busy_ms[k] = t->busy[k];
    out->bound = pred_bound(t);
    out->modelled = 1;
}

#endif
