/*
 * bound.h — the lower bounds of a step from what each resource had to do in it (the busy
 * milliseconds an offload engine reports per step, or --predict's), printed beside the
 * measured or predicted time.
 *
 *   roofline         max(compute, h2d, d2h, host Adam, disk, collectives): every resource
 *                    at once, nothing waiting on anything;
 *   one slot         (an engine whose pipeline is ENGINE_PIPELINE_ONE_SLOT, engine.h) each
 *                    layer's copy in starts once the layer before it has run and its
 *                    compute waits for it, so the copies do not overlap the compute:
 *                    compute + h2d, less the one copy per pass and micro-batch that runs
 *                    under the head (a fraction 1/(2L) of them);
 *   clipped schedule (the engines whose host Adam otherwise runs as grads arrive, those of
 *                    ENGINE_OPT_CLIP_SPECULATE, with --clip-grad > 0) the update waits for the
 *                    global norm, known when the backward ends, so the host Adam of the
 *                    step overlaps only the next step's forward: the step's schedule (the
 *                    compute, or one slot's compute + copies) + max(0, host Adam - what the
 *                    forward takes of it).  The forward's share of the compute is its
 *                    FLOPs': 1 of 3 (forward, backward's two), of 4 with activation
 *                    checkpointing (its recompute is a second forward); of one slot's
 *                    copies, half (each layer is copied in once per pass).
 * The schedule bound (bound_schedule_ms) is the one that applies to the run: the clipped
 * schedule's when its update waits for the norm, else one slot's, else the roofline; never
 * below the roofline.
 *
 * A run whose speculation (--clip-speculate) kept its updates ahead can beat the clipped
 * bound; nothing beats the roofline.
 */
#ifndef AEBENCH_BOUND_H
#define AEBENCH_BOUND_H

#include "../engines/engine.h"

#include <stdio.h>

static inline double bound_roofline_ms(const double busy[BUSY_KINDS])
{
    double b = 0;
    for (int k = 0; k < BUSY_KINDS; k++)
        if (busy[k] > b) b = busy[k];
    return b;
}

/* Whether the engine's host Adam waits for the norm under cfg's clip (the clipped schedule). */
static inline int bound_waits_for_norm(const engine_vtbl *eng, const engine_config *cfg)
{
    return cfg->optim.clip > 0 && (eng->options & ENGINE_OPT_CLIP_SPECULATE);
}

/* Whether the engine has one layer slot (its pipeline, as it says). */
static inline int bound_one_slot(const engine_vtbl *eng) { return eng->pipeline == ENGINE_PIPELINE_ONE_SLOT; }

/* The bound of the engine's own schedule under cfg (see the top of this file). */
static inline double bound_schedule_ms(const engine_vtbl *eng, const engine_config *cfg, const double busy[BUSY_KINDS])
{
    const double roof = bound_roofline_ms(busy), compute = busy[BUSY_COMPUTE];
    const int one_slot = bound_one_slot(eng), clipped = bound_waits_for_norm(eng, cfg);
    if (!one_slot && !clipped) return roof;
    const double L = cfg->shape.layers > 0 ? cfg->shape.layers : 1;
    const double copies = one_slot ? busy[BUSY_H2D] * (1 - 1 / (2 * L)) : 0;
    double b = compute + copies;
    if (clipped) {
        /* (the forward: a quarter of the compute with a full recompute, a third without; selective's
         * recompute is small beside a layer) */
        const double fwd_share = cfg->recompute == GPT_RECOMPUTE_FULL ? 4.0 : 3.0;
        const double forward = compute / fwd_share + copies / 2, uncovered = busy[BUSY_HOST_ADAM] - forward;
        b += uncovered > 0 ? uncovered : 0;
    }
    return b > roof ? b : roof;
}

/* Whether the engine's schedule has a bound of its own above the roofline under cfg. */
static inline int bound_has_schedule(const engine_vtbl *eng, const engine_config *cfg)
{
    return bound_waits_for_norm(eng, cfg) || bound_one_slot(eng);
}

/* What bound_schedule_ms's bound is called in the log, stdout and --predict. */
static inline const char *bound_schedule_name(const engine_vtbl *eng, const engine_config *cfg)
{
    return bound_waits_for_norm(eng, cfg) ? "clipped schedule" : bound_has_schedule(eng, cfg) ? "one slot" : "roofline";
}

/* Why the schedule's bound is what it is, in a sentence for stdout (roof: the roofline). */
static inline void bound_schedule_why(const engine_vtbl *eng, const engine_config *cfg, double roof, char *buf,
                                      size_t len)
{
    const char *one_slot = "one slot: each layer's copy in, then its compute";
    if (bound_waits_for_norm(eng, cfg))
        snprintf(buf, len, "the clipped schedule: the host Adam waits for the norm%s%s; roofline %.1f",
                 bound_one_slot(eng) ? ", " : "", bound_one_slot(eng) ? one_slot : "", roof);
    else if (bound_has_schedule(eng, cfg))
        snprintf(buf, len, "%s; roofline %.1f", one_slot, roof);
    else
        snprintf(buf, len, "roofline: every resource busy at once");
}

#endif
