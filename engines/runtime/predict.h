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
#include <string.h>

/* The host-memory users (copies each way, the host Adam): the resources whose pieces slow each
 * other.  They and the compute stream (which slows the collectives beside it) are the resources
 * whose busy spans a walk keeps, to see which ran beside which; the host users first. */
enum { PRED_HOST_USERS = 3, PRED_TRACKED = 4, PRED_SPANS = 512 };
static const int pred_host_user[PRED_HOST_USERS] = {BUSY_H2D, BUSY_D2H, BUSY_HOST_ADAM};

/* One resource's busy spans [lo, hi), in time order (a resource runs one piece at a time, each
 * after the last): back-to-back pieces are one span; when PRED_SPANS are in use, neighbours are
 * merged pairwise (the gaps between them then count as busy: coarser, never dropped). */
typedef struct pred_spans { /* (engine.h: struct pred_spans) */
    int n;
    double lo[PRED_SPANS], hi[PRED_SPANS];
} pred_spans;

typedef struct pred_timeline {
    double free_at[BUSY_KINDS]; /* when each resource is next free (ms) */
    double busy[BUSY_KINDS];    /* its busy time in the step being walked */
    double coll_shard;          /* of busy[BUSY_COMM], reduce-scatters' and all-gathers' */
    /* each kind's collectives in the step: their time alone, and how much of it the compute ran
     * beside in the walk before (engine_prediction.coll_beside) */
    double coll_alone[PRED_COLL_KINDS], coll_cover[PRED_COLL_KINDS];
    pred_spans spans[PRED_TRACKED];
    /* the compute's spans from the host Adam's first piece on (pred_done: the share of the Adam's
     * time the compute ran beside; apart from spans[], whose compute the collectives read) */
    pred_spans compute_by_adam;
    /* where pred_done leaves the compute's spans (m->compute_beside), set by the walk's first
     * collective that asks: the compute is tracked from then on (a collective runs beside the
     * compute walked after it, mostly; the pieces walked before the first are not kept) */
    pred_spans *record_compute;
    /* where a walk with two collective streams (megatron-lm's) keeps each stream's spans
     * while the compute is tracked and the two are priced apart (m->compute_under_two; NULL:
     * none kept, the other engines' walks, whose timelines stay small to clear), and after
     * pred_join_comm the compute's time with both streams beside it */
    pred_spans *coll_spans;
    double compute_beside_two;
    /* after pred_join_comm: the busier collective stream's time (0: one stream, busy[BUSY_COMM]'s) */
    double comm_one_stream;
} pred_timeline;

static inline double pred_max(double a, double b) { return a > b ? a : b; }
static inline double pred_min(double a, double b) { return a < b ? a : b; }

/* The index of resource r among the tracked resources (the host users as pred_host_user, then
 * the compute), or -1 (pred_run asks it of every piece: a table, not a search). */
static const int pred_tracked_of[BUSY_KINDS] = {[BUSY_COMPUTE] = 3, [BUSY_H2D] = 0, [BUSY_D2H] = 1,
                                                [BUSY_HOST_ADAM] = 2, [BUSY_DISK] = -1, [BUSY_COMM] = -1};
static inline int pred_tracked_index(int r) { return pred_tracked_of[r]; }

static inline void pred_span_add(pred_spans *s, double lo, double hi)
{
    if (hi <= lo) return;
    if (s->n > 0 && lo <= s->hi[s->n - 1]) {
        s->hi[s->n - 1] = pred_max(s->hi[s->n - 1], hi);
        return;
    }
    if (s->n == PRED_SPANS) {
        for (int i = 0; i < PRED_SPANS / 2; i++) s->lo[i] = s->lo[2 * i], s->hi[i] = s->hi[2 * i + 1];
        s->n = PRED_SPANS / 2;
    }
    s->lo[s->n] = lo, s->hi[s->n] = hi;
    s->n++;
}

/* Run a piece of `ms` on resource r once r is free and `after` has passed; its end. */
static inline double pred_run(pred_timeline *t, int r, double ms, double after)
{
    const double start = t->free_at[r] > after ? t->free_at[r] : after;
    t->free_at[r] = start + ms;
    t->busy[r] += ms;
    /* (the compute's spans only where a collective asks for them: a fifth of --search's time;
     * and, apart, once the host Adam has run: the compute beside it slows it, pred_done) */
    const int h = pred_tracked_index(r);
    if (h >= 0 && (h < PRED_HOST_USERS || t->record_compute)) pred_span_add(&t->spans[h], start, start + ms);
    if (r == BUSY_COMPUTE && t->spans[pred_tracked_index(BUSY_HOST_ADAM)].n > 0)
        pred_span_add(&t->compute_by_adam, start, start + ms);
    return start + ms;
}

/* The time within [from, to) that s covers (s in time order: the first span that ends after
 * `from` found by bisection; a collective asks it of the compute's spans). */
static inline double pred_spans_cover(const pred_spans *s, double from, double to)
{
    int lo = 0, hi = s->n;
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (s->hi[mid] <= from) lo = mid + 1;
        else hi = mid;
    }
    double sum = 0;
    for (int i = lo; i < s->n && s->lo[i] < to; i++) sum += pred_min(s->hi[i], to) - pred_max(s->lo[i], from);
    return sum;
}

/* A collective on the collectives' stream (pred_run on BUSY_COMM) of `ms` alone, by kind: a
 * reduce-scatter or all-gather slows the compute beside it less than an all-reduce
 * (machine_rates.compute_under_shard), and each kind is slowed by the compute beside it by its
 * own factor (ar_under_compute, ...), for the share of that kind's time the compute runs
 * beside (m->coll_load: what pred_settle's second walk found its pieces beside, in the first
 * walk's compute).  By kind, not one share for all: one factor on every collective put ZeRO-1/2
 * up to 10% long on two H200s where it brought ZeRO-3 in, their gathers after the update
 * running alone. */
static inline double pred_run_coll(pred_timeline *t, const machine_rates *m, int kind, double ms, double after)
{
    const double f = kind == PRED_ALL_REDUCE       ? m->ar_under_compute
                     : kind == PRED_REDUCE_SCATTER ? m->rs_under_compute
                                                   : m->ag_under_compute;
    const int two = m->compute_under_two > 1;
    if ((f > 1 || two) && ms > 0 && m->compute_beside) { /* (the walks that settle: pred_settle) */
        t->record_compute = m->compute_beside;
        const double start = pred_max(t->free_at[BUSY_COMM], after);
        t->coll_alone[kind] += ms;
        t->coll_cover[kind] += pred_min(ms, pred_spans_cover(m->compute_beside, start, start + ms));
    }
    if (f > 1 && ms > 0) ms *= 1 + (f - 1) * m->coll_load[kind];
    if (kind != PRED_ALL_REDUCE) t->coll_shard += ms;
    const double end = pred_run(t, BUSY_COMM, ms, after);
    if (two && t->record_compute && t->coll_spans) pred_span_add(t->coll_spans, end - ms, end);
    return end;
}

/* A second collectives' stream walked on its own timeline (`other`: megatron-lm's param-comm,
 * whose compute is t's) into t: its busy time, and where t's compute spans go if only it ran
 * collectives. */
static inline void pred_join_comm(pred_timeline *t, const pred_timeline *other)
{
    /* the compute's time with both streams' collectives beside it: within each stretch both
     * run, what the compute's spans cover (the spans are kept only where they are priced) */
    const pred_spans *a = t->coll_spans, *b = other->coll_spans, *c = &t->spans[pred_tracked_index(BUSY_COMPUTE)];
    t->compute_beside_two = 0;
    for (int i = 0, j = 0; a && b && i < a->n && j < b->n;) {
        const double lo = pred_max(a->lo[i], b->lo[j]), hi = pred_min(a->hi[i], b->hi[j]);
        if (hi > lo) t->compute_beside_two += pred_spans_cover(c, lo, hi);
        if (a->hi[i] < b->hi[j]) i++;
        else j++;
    }
    t->comm_one_stream = pred_max(t->busy[BUSY_COMM], other->busy[BUSY_COMM]);
    t->busy[BUSY_COMM] += other->busy[BUSY_COMM];
    t->coll_shard += other->coll_shard;
    for (int k = 0; k < PRED_COLL_KINDS; k++)
        t->coll_alone[k] += other->coll_alone[k], t->coll_cover[k] += other->coll_cover[k];
    if (!t->record_compute) t->record_compute = other->record_compute;
}

/* The time within [from, to) that spans a cover, and that both a and b cover. */
static inline double pred_spans_within(const pred_spans *a, double from, double to)
{
    double sum = 0;
    for (int i = 0; i < a->n; i++) sum += pred_max(0.0, pred_min(a->hi[i], to) - pred_max(a->lo[i], from));
    return sum;
}
static inline double pred_spans_both(const pred_spans *a, const pred_spans *b, double from, double to)
{
    double sum = 0;
    for (int i = 0, j = 0; i < a->n && j < b->n;) {
        const double lo = pred_max(pred_max(a->lo[i], b->lo[j]), from), hi = pred_min(pred_min(a->hi[i], b->hi[j]), to);
        sum += pred_max(0.0, hi - lo);
        if (a->hi[i] < b->hi[j]) i++;
        else j++;
    }
    return sum;
}

/* A micro-batch after the first: a layer's gradient sum so far comes up from the host once the
 * one before sent it home (`after`), on the stream layer_work_reduce_home has
 * layer_work_add_earlier issue it on: one rank's compute stream, which waits for it (*compute
 * moves to its end); N ranks' collectives stream behind the layer's reduce-scatter, which it
 * holds (the next collectives, the prefetches' all-gathers among them, queue behind it).
 * (Walked beside the reduce-scatter, the stream free, it left stronghold and l2l with 2-4
 * micro-batches on two H200s 9-16% fast.)  Its end: the layer's gradient final.
 *
 * It goes on another copy engine than the h2d stream's fetches; whether that engine adds
 * upward bandwidth is the machine's (pred_landing_link_share): the share of the landing's time
 * the upward link carries for it alone is charged to the h2d timeline (the fetches walked
 * after it queue behind that), and its stream waits until the link has carried it.  Which of a
 * landing and the next fetch goes first on the link the walk does not place (the next fetch is
 * walked after it, and in the engine runs beside the layer's backward): the link's time is
 * charged in walk order.  Its whole time counts as h2d's busy time either way. */
static inline double pred_landing_link_share(const machine_rates *m)
{
    /* two upward copies at once move up2 together, one alone h2d: a second engine's copy takes
     * the link's time for (2 h2d - up2) / h2d of its own (1: one link; 0: it adds a whole
     * copy's bandwidth; a file without up2: 0, as before it).  Replayed at 1, one-GPU
     * zero-infinity at l48 with eight micro-batches on an H200, where one copy fills the link
     * at 55 GB/s, came -5.7% where 0 gave -15.0%; the H100's one-GPU stronghold runs with 2-4
     * micro-batches came -3..-13% at 0 and +9..+27% at 1 (bench/results/2026-11-30m). */
    if (m->up2_h2d_gbs <= 0 || m->h2d_gbs <= 0) return 0;
    return pred_max(0.0, pred_min(1.0, (2 * m->h2d_gbs - m->up2_h2d_gbs) / m->h2d_gbs));
}
static inline double pred_add_earlier(pred_timeline *t, const machine_rates *m, double ms, int world,
                                      double *compute, double after)
{
    const double share = pred_landing_link_share(m);
    const double start = world == 1 ? after : pred_max(t->free_at[BUSY_COMM], after);
    const double link_end = share > 0 ? pred_run(t, BUSY_H2D, share * ms, start) : 0;
    t->busy[BUSY_H2D] += (1 - share) * ms;
    if (world == 1) return *compute = pred_max(pred_max(*compute, after) + ms, link_end);
    t->free_at[BUSY_COMM] = pred_max(start + ms, link_end);
    return t->free_at[BUSY_COMM];
}

/* ms of a pinned copy of n floats each way, and of the host Adam on n parameters.  The two
 * copy directions and the host Adam share host memory's bandwidth, and each piece is costed
 * by what ran beside it in the walk (m->overlap, from pred_settle): its time alone, with one
 * other user (each pair calibrated: measure_busy in cmd/calibrate.c), or with both, taken
 * bilinearly between those four by the shares fa, fb of its time each other user was busy.
 * (Before, the load was each other user's share of the whole step, and all three slowed each
 * other alike: on the H200 machine that predicted the host-Adam-bound runs 6-15% long, as the
 * Adam ran at its rate alone beside the copies.)  A pair not calibrated (0: older files) is
 * taken halfway between alone and all three; all three not calibrated, as alone. */
static inline double pred_contended_ms(double alone_ms, double with_a_ms, double with_b_ms, double all_ms, double fa,
                                       double fb)
{
    if (all_ms <= 0) all_ms = alone_ms;
    if (with_a_ms <= 0) with_a_ms = (alone_ms + all_ms) / 2;
    if (with_b_ms <= 0) with_b_ms = (alone_ms + all_ms) / 2;
    return alone_ms + fa * (with_a_ms - alone_ms) + fb * (with_b_ms - alone_ms) +
           fa * fb * (all_ms - with_a_ms - with_b_ms + alone_ms);
}
/* bytes at gbs, in ms (0 where the rate is not known) */
static inline double pred_bytes_ms(double bytes, double gbs) { return gbs > 0 ? bytes / (gbs * 1e6) : 0; }
static inline double pred_h2d_ms(const machine_rates *m, double floats)
{
    const double bytes = floats * 4.0;
    return pred_contended_ms(pred_bytes_ms(bytes, m->h2d_gbs), pred_bytes_ms(bytes, m->both_h2d_gbs),
                             pred_bytes_ms(bytes, m->adam_h2d_gbs), pred_bytes_ms(bytes, m->busy_h2d_gbs),
                             m->overlap[BUSY_H2D][BUSY_D2H], m->overlap[BUSY_H2D][BUSY_HOST_ADAM]);
}
static inline double pred_d2h_ms(const machine_rates *m, double floats)
{
    const double bytes = floats * 4.0;
    return pred_contended_ms(pred_bytes_ms(bytes, m->d2h_gbs), pred_bytes_ms(bytes, m->both_d2h_gbs),
                             pred_bytes_ms(bytes, m->adam_d2h_gbs), pred_bytes_ms(bytes, m->busy_d2h_gbs),
                             m->overlap[BUSY_D2H][BUSY_H2D], m->overlap[BUSY_D2H][BUSY_HOST_ADAM]);
}
/* The host Adam is also slowed by the GPU's compute beside it (m->host_adam_under_compute, by the
 * share of its time the compute ran beside it in the walk).  Calibrated on two H200 machines at
 * 1.04 and 1.01 (bench/results/2026-11-30g-h200x2-confirm): there it hardly matters, and a
 * machine where the host thread's wait on the GPU costs the pool more pays it here. */
static inline double pred_host_adam_ms(const machine_rates *m, double params)
{
    const double mp = params / 1e6;
    const double beside_compute =
        m->host_adam_under_compute > 1 ? 1 + m->overlap[BUSY_HOST_ADAM][BUSY_COMPUTE] * (m->host_adam_under_compute - 1) : 1;
    return beside_compute * pred_contended_ms(mp * m->host_adam_ms_per_mparam, mp * m->host_adam_h2d_ms_per_mparam,
                                              mp * m->host_adam_d2h_ms_per_mparam, mp * m->busy_host_adam_ms_per_mparam,
                                              m->overlap[BUSY_HOST_ADAM][BUSY_H2D], m->overlap[BUSY_HOST_ADAM][BUSY_D2H]);
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

/* Layer `layer`'s backward: calibrated with the recompute of --recompute full (a forward less
 * its output projection) and without any (none: --calibrate times it over the saved
 * activations; a machine file from before that has none, and the one with recompute less a
 * forward stands in: it came out 4.6-6.6% short of megatron-lm's none steps on H200s, the
 * projection's GEMM and the saved activations' reads missing); selective adds only its own
 * recompute (timed alone; a file from before that has none, and a forward bounds it).  The
 * last layer recomputes nothing in any mode (gpt_layers_acts_carve_backward: every engine runs
 * its backward right after its forward and the head). */
static inline double pred_layer_bwd_ms(const machine_rates *m, const engine_config *cfg, int layer)
{
    const double bare =
        m->layer_bwd_none_ms > 0 ? m->layer_bwd_none_ms : pred_max(m->layer_bwd_ms - m->layer_fwd_ms, 0.0);
    if (cfg->recompute == GPT_RECOMPUTE_NONE || layer == cfg->shape.layers - 1) return bare;
    if (cfg->recompute == GPT_RECOMPUTE_SELECTIVE)
        return bare + (m->layer_recompute_selective_ms > 0 ? m->layer_recompute_selective_ms : m->layer_fwd_ms);
    return m->layer_bwd_ms;
}

/* How long resource k is busy a step as a bound counts it: two collective streams are two
 * resources (pred_done), their busier one's time. */
static inline double pred_resource_ms(const pred_timeline *t, int k)
{
    return k == BUSY_COMM && t->comm_one_stream > 0 ? t->comm_one_stream : t->busy[k];
}

/* The resource with the most busy time: what the step is bound by when its pieces overlap. */
static inline int pred_bound(const pred_timeline *t)
{
    int b = 0;
    for (int k = 1; k < BUSY_KINDS; k++)
        if (pred_resource_ms(t, k) > pred_resource_ms(t, b)) b = k;
    return b;
}

/* s without its spans over by `at`. */
static inline void pred_spans_drop_before(pred_spans *s, double at)
{
    int keep = 0;
    while (keep < s->n && s->hi[keep] <= at) keep++;
    for (int i = keep; i < s->n; i++) s->lo[i - keep] = s->lo[i], s->hi[i - keep] = s->hi[i];
    s->n -= keep;
}

/* Start a new step at time `at`: busy times count from here, and the compute stream starts
 * no earlier (the host issues the step then; copies and host Adam may still be running). */
static inline void pred_step(pred_timeline *t, double at)
{
    for (int k = 0; k < BUSY_KINDS; k++) t->busy[k] = 0;
    t->coll_shard = 0;
    for (int k = 0; k < PRED_COLL_KINDS; k++) t->coll_alone[k] = t->coll_cover[k] = 0;
    t->free_at[BUSY_COMPUTE] = pred_max(t->free_at[BUSY_COMPUTE], at);
    /* (the spans over before it: no longer beside anything this step or later runs) */
    for (int h = 0; h < PRED_TRACKED; h++) pred_spans_drop_before(&t->spans[h], at);
    pred_spans_drop_before(&t->compute_by_adam, at);
    if (t->coll_spans) pred_spans_drop_before(t->coll_spans, at);
}

/* N ranks need the collectives calibrated at that world: 1 and out->why set when they are not. */
static inline int pred_no_collectives(const engine_config *cfg, const machine_rates *m, engine_prediction *out)
{
    const int world = engine_world(cfg);
    if (world <= 1 || m->coll_world == world) return 0;
    snprintf(out->why, sizeof out->why, "no collectives calibrated at %d ranks (aebench --calibrate --ranks %d)", world,
             world);
    return 1;
}

/* --offload nvme needs the disk tier calibrated at the run's --nvme-dir: 1 and out->why set
 * when it is not. */
static inline int pred_no_disk(const engine_config *cfg, const machine_rates *m, engine_prediction *out)
{
    if (cfg->offload != OFFLOAD_NVME || (m->disk_read_gbs > 0 && m->disk_write_gbs > 0)) return 0;
    snprintf(out->why, sizeof out->why, "no disk calibrated at --nvme-dir %.60s (aebench --calibrate --offload nvme "
             "--nvme-dir DIR)", cfg->nvme_dir);
    return 1;
}
/* ms of the disk tier reading and writing n floats (O_DIRECT, several requests in flight). */
static inline double pred_disk_read_ms(const machine_rates *m, double floats) { return floats * 4.0 / (m->disk_read_gbs * 1e6); }
static inline double pred_disk_write_ms(const machine_rates *m, double floats) { return floats * 4.0 / (m->disk_write_gbs * 1e6); }

/* A block's host update once `after`: in memory (read_floats and write_floats 0), or through
 * the disk tier (--offload nvme): its state read from disk, updated, m and v written back; the
 * block is done when they are (nvme_adam_wait). */
static inline double pred_host_update(pred_timeline *t, const machine_rates *m, double adam_ms, double read_floats,
                                      double write_floats, double after)
{
    if (read_floats > 0) after = pred_run(t, BUSY_DISK, pred_disk_read_ms(m, read_floats), after);
    const double done = pred_run(t, BUSY_HOST_ADAM, adam_ms, after);
    return write_floats > 0 ? pred_run(t, BUSY_DISK, pred_disk_write_ms(m, write_floats), done) : done;
}

/* How many times its rate the host Adam of one rank takes: 1 on one rank, with --threads
 * (each rank's pool its own cores, as calibrated), or where the machine file has the rates
 * one rank gets while every rank works at once (m->rates_world); else local_world (the
 * machine's cores and host memory shared by the ranks on it: a rank's update of its 1/N
 * then takes local_world times its rate alone). */
static inline double pred_host_share(const engine_config *cfg, const machine_rates *m)
{
    const int world = engine_world(cfg);
    return world > 1 && cfg->threads <= 0 && m->rates_world != world ? engine_local_world(cfg) : 1;
}

/* n doubles per array, `count` arrays in one zeroed block (free the first); NULL and out->why
 * set when there is no memory. */
static inline double *pred_arrays(engine_prediction *out, size_t n, int count)
{
    double *a = calloc(n * (size_t)count, sizeof *a);
    if (!a) snprintf(out->why, sizeof out->why, "out of memory");
    return a;
}

/* The measured pieces as megatron-lm's step pays them (machine_rates.layer_scale, rest_scale),
 * for an engine whose compute stream runs that step's per-layer work (gradient zeroing, norms,
 * the GPU Adam) on every layer: megatron-lm, and stronghold's resident and slot layers. */
static inline machine_rates pred_scaled(const machine_rates *measured)
{
    machine_rates s = *measured;
    const double ls = measured->layer_scale > 0 ? measured->layer_scale : 1;
    const double rs = measured->rest_scale > 0 ? measured->rest_scale : 1;
    s.layer_fwd_ms *= ls, s.layer_bwd_ms *= ls, s.layer_bwd_none_ms *= ls, s.gpu_adam_ms_per_mparam *= ls;
    for (int i = 0; i < s.ntp_split && i < MACHINE_TP_SPLITS; i++)
        s.tp_split[i].layer_fwd_ms *= ls, s.tp_split[i].layer_bwd_ms *= ls, s.tp_split[i].layer_bwd_none_ms *= ls;
    s.embed_fwd_ms *= rs, s.head_ms *= rs, s.embed_bwd_ms *= rs;
    return s;
}

/* One walk of an engine's step with rates m (its predict function, or a layout of it). */
typedef void (*pred_walk_fn)(const engine_config *cfg, const machine_rates *m, const void *ctx,
                             engine_prediction *out);

/* m's compute pieces with all-reduces beside the share `share` of them and reduce-scatters or
 * all-gathers beside `shard` (m->compute_under_coll, compute_under_shard: each piece
 * stretched by the same expected amount; the collectives run beside the backward mostly, but
 * which piece pays is not modelled, only how much in all). */
static inline void pred_compute_loaded(machine_rates *loaded, const machine_rates *m, double share, double shard,
                                       double two)
{
    const double fr = m->compute_under_coll > 1 ? m->compute_under_coll : 1;
    const double fs = m->compute_under_shard > 0 ? (m->compute_under_shard > 1 ? m->compute_under_shard : 1) : fr;
    /* with two streams priced apart (m->compute_under_two), `shard` counts the time both run
     * twice: what one alone runs beside is the rest */
    const double f2 = m->compute_under_two > 1 ? m->compute_under_two : 0;
    const double one = f2 > 0 ? pred_max(0.0, pred_min(shard - 2 * two, 1 - two)) : shard;
    const double f = 1 + (fr - 1) * share + (fs - 1) * one + (f2 > 0 ? (f2 - 1) * two : 0);
    loaded->compute_load = share, loaded->compute_load_shard = shard, loaded->compute_load_two = two;
    loaded->embed_fwd_ms = m->embed_fwd_ms * f, loaded->layer_fwd_ms = m->layer_fwd_ms * f;
    loaded->layer_bwd_ms = m->layer_bwd_ms * f, loaded->layer_bwd_none_ms = m->layer_bwd_none_ms * f;
    loaded->head_ms = m->head_ms * f;
    loaded->embed_bwd_ms = m->embed_bwd_ms * f, loaded->gpu_adam_ms_per_mparam = m->gpu_adam_ms_per_mparam * f;
}

/* The walk with host memory's load settled: walk alone, then again with each host-memory
 * user's rate set from what ran beside it in the last walk (out->overlap: the share of its
 * busy time each other user was busy too), until the shares move by less than 1% (a few
 * walks: each share is what the walk before found, undamped; halving each step toward it had
 * taken 9.4 walks a configuration where this takes 5.6, for the same predictions within 1% on
 * the searches of bench/results/2026-11-30c, and cut the l48 search from 1.11 s to 0.5 s).
 * An engine without host traffic (megatron-lm) walks once more and is unchanged.  On N ranks the compute's load is
 * settled alike: the share of the compute stream's busy time the collectives' busy time
 * beside it covers (they run beside the backward; out->coll_idle_ms not), which stretches the
 * compute pieces; and each kind of collective is slowed by the share of it the compute runs
 * beside, as the second walk finds it (the first walk's compute spans kept here:
 * pred_run_coll). */
/* pred_settle's step for one share: resource i's share beside j as the last walk found it, into
 * `loaded` for the next; *moved, the most any share moved. */
static inline void pred_take_share(machine_rates *loaded, const engine_prediction *out, int i, int j, double *moved)
{
    const double want = out->overlap[i][j], old = loaded->overlap[i][j];
    loaded->overlap[i][j] = want;
    *moved = pred_max(*moved, want > old ? want - old : old - want);
}

static inline void pred_settle(const engine_config *cfg, const machine_rates *m, pred_walk_fn walk, const void *ctx,
                               engine_prediction *out)
{
    machine_rates loaded = *m;
    memset(loaded.overlap, 0, sizeof loaded.overlap);
    pred_compute_loaded(&loaded, m, 0, 0, 0);
    pred_spans *compute_beside = calloc(1, sizeof *compute_beside);
    if (!compute_beside) {
        memset(out, 0, sizeof *out);
        snprintf(out->why, sizeof out->why, "out of memory");
        return;
    }
    loaded.compute_beside = compute_beside; /* (empty: the first walk's collectives as alone) */
    for (int k = 0; k < PRED_COLL_KINDS; k++) loaded.coll_load[k] = 0;
    walk(cfg, &loaded, ctx, out);
    for (int it = 0; it < 12 && out->modelled && out->ms > 0; it++) {
        double moved = 0;
        for (int a = 0; a < PRED_HOST_USERS; a++)
            for (int b = 0; b < PRED_HOST_USERS; b++)
                if (a != b) pred_take_share(&loaded, out, pred_host_user[a], pred_host_user[b], &moved);
        /* (the host Adam beside the compute: pred_host_adam_ms) */
        if (m->host_adam_under_compute > 1) pred_take_share(&loaded, out, BUSY_HOST_ADAM, BUSY_COMPUTE, &moved);
        /* (the collectives beside the compute by kind: what runs while the compute is idle is
         * gemini's naive sends, none of them a reduce-scatter or all-gather) */
        const double busy_c = out->busy_ms[BUSY_COMPUTE], beside = out->busy_ms[BUSY_COMM] - out->coll_idle_ms;
        const double shard = pred_min(out->coll_shard_ms, beside);
        const double cover = busy_c > 0 ? pred_min(beside / busy_c, 1) : 0;
        const double want_c = beside > 0 ? cover - cover * shard / beside : 0;
        /* (two streams priced apart: the reduce-scatters' and all-gathers' time beside the
         * compute over its time, both streams' counted, and the share of the compute both ran
         * beside, as the walks that track the compute find it and then kept) */
        const int apart = m->compute_under_two > 1;
        const double want_s = beside <= 0 || busy_c <= 0 ? 0 : apart ? shard / busy_c : cover * shard / beside;
        const double two = apart && loaded.compute_beside && busy_c > 0 ? pred_min(out->compute_two_ms / busy_c, 1)
                                                                        : loaded.compute_load_two;
        const double old_c = loaded.compute_load, old_s = loaded.compute_load_shard;
        pred_compute_loaded(&loaded, m, want_c, want_s, two);
        /* each kind's collectives slowed by the share of them the compute ran beside, as the
         * second walk found them beside the first's compute, and then kept: the share hardly
         * moves with the slowing, and settled walk by walk against the walk before it swung
         * (most of l48's searched configurations walked 12 times: 1 s became 3) */
        const int slowed = m->ar_under_compute > 1 || m->rs_under_compute > 1 || m->ag_under_compute > 1;
        if (it == 0 && slowed && out->busy_ms[BUSY_COMM] > 0) moved = 1; /* (walk 1 is to come) */
        if (it == 1) {
            for (int k = 0; k < PRED_COLL_KINDS; k++) {
                const double want = out->coll_beside[k];
                moved = pred_max(moved, want - loaded.coll_load[k]);
                loaded.coll_load[k] = want;
            }
            loaded.compute_beside = NULL; /* (nothing more to find) */
        }
        /* (a share of a few percent still moves the step by its whole collectives' time:
         * settled to 0.1%) */
        moved = pred_max(moved, 10 * pred_max(want_c > old_c ? want_c - old_c : old_c - want_c,
                                              want_s > old_s ? want_s - old_s : old_s - want_s));
        walk(cfg, &loaded, ctx, out);
        if (moved < 0.01) break;
    }
    free(compute_beside);
}

/* The prediction's fields from a walked step [start, end). */
static inline void pred_done(engine_prediction *out, const pred_timeline *t, double start, double end)
{
    /* In the steady state no resource can be busier per step than a step is long (a walk of a
     * few steps may not have reached it when one resource lags): the step is at least that.
     * Two collective streams are two resources: ZeRO-3's gathers and reduce-scatters run at
     * once, and their sum bounds nothing (l48 h4096 on two H200s at micro-batch 1: 879 ms of
     * them a step, whose steps took 789). */
    out->ms = end - start;
    for (int k = 0; k < BUSY_KINDS; k++)
        if (pred_resource_ms(t, k) > out->ms) out->ms = pred_resource_ms(t, k);
    for (int k = 0; k < BUSY_KINDS; k++) out->busy_ms[k] = t->busy[k];
    out->coll_shard_ms = t->coll_shard;
    out->compute_two_ms = t->compute_beside_two;
    out->bound = pred_bound(t);
    out->modelled = 1;
    if (t->record_compute) *t->record_compute = t->spans[pred_tracked_index(BUSY_COMPUTE)];
    for (int k = 0; k < PRED_COLL_KINDS; k++)
        out->coll_beside[k] = t->coll_alone[k] > 0 ? pred_min(1.0, t->coll_cover[k] / t->coll_alone[k]) : 0;
    /* what ran beside each host-memory user within the step (a steady step's window holds a
     * whole period of every resource's work) */
    memset(out->overlap, 0, sizeof out->overlap);
    for (int a = 0; a < PRED_HOST_USERS; a++) {
        const double own = pred_spans_within(&t->spans[a], start, end);
        if (own <= 0) continue;
        for (int b = 0; b < PRED_HOST_USERS; b++)
            if (b != a)
                out->overlap[pred_host_user[a]][pred_host_user[b]] =
                    pred_min(1.0, pred_spans_both(&t->spans[a], &t->spans[b], start, end) / own);
    }
    /* and of the host Adam's, the share the compute ran beside (pred_host_adam_ms) */
    const int adam = pred_tracked_index(BUSY_HOST_ADAM);
    const double adam_own = pred_spans_within(&t->spans[adam], start, end);
    if (adam_own > 0)
        out->overlap[BUSY_HOST_ADAM][BUSY_COMPUTE] =
            pred_min(1.0, pred_spans_both(&t->spans[adam], &t->compute_by_adam, start, end) / adam_own);
}

#endif
