/*
 * bound.h — the lower bounds of a step from what each resource had to do in it (the busy
 * milliseconds an offload engine reports per step, or --predict's), printed beside the
 * measured or predicted time.
 *
 *   roofline         max(compute, h2d, d2h, host Adam, disk, collectives): every resource
 *                    at once, nothing waiting on anything;
 *   clipped schedule (the engines whose host Adam otherwise runs as grads arrive: stronghold,
 *                    l2l, zero-infinity, with --clip-grad > 0) the update waits for the
 *                    global norm, known when the backward ends, so the host Adam of the
 *                    step overlaps only the next step's forward: max(roofline, compute +
 *                    max(0, host Adam - forward compute)).  The forward's share of the
 *                    compute is its FLOPs': 1 of 3 (forward, backward's two), of 4 with
 *                    activation checkpointing (its recompute is a second forward).
 *
 * A run whose speculation (--clip-speculate) kept its updates ahead can beat the clipped
 * bound; nothing beats the roofline.
 */
#ifndef AEBENCH_BOUND_H
#define AEBENCH_BOUND_H

#include "../engines/engine.h"

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

static inline double bound_clipped_ms(const double busy[BUSY_KINDS], int ckpt)
{
    const double roof = bound_roofline_ms(busy), compute = busy[BUSY_COMPUTE];
    const double forward = compute / (ckpt ? 4.0 : 3.0), uncovered = busy[BUSY_HOST_ADAM] - forward;
    const double clipped = compute + (uncovered > 0 ? uncovered : 0);
    return clipped > roof ? clipped : roof;
}

#endif
