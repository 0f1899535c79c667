/*
 * step_bound.h — the lower bounds of a step from what each resource had to do in it (the busy
 * milliseconds an offload engine reports per step, or --predict's), which the driver prints
 * beside the measured or predicted time.  An engine says which bound its schedule has
 * (engine_vtbl.bound) from the shapes below; one without the hook has the roofline.
 *
 *   roofline         max(compute, h2d, d2h, host Adam, disk, collectives): every resource
 *                    at once, nothing waiting on anything;
 *   one slot         each layer's copy in starts once the layer before it has run and its
 *                    compute waits for it, so the copies do not overlap the compute:
 *                    compute + h2d, less the one copy per pass and micro-batch that runs
 *                    under the head (a fraction 1/(2L) of them);
 *   clipped schedule (an engine whose host Adam otherwise runs as grads arrive, with
 *                    --clip-grad > 0) the update waits for the global norm, known when the
 *                    backward ends, so the host Adam of the step overlaps only the next
 *                    step's forward: the step's schedule (the compute, or one slot's compute
 *                    + copies) + max(0, host Adam - what the forward takes of it).  The
 *                    forward's share of the compute is its FLOPs': 1 of 3 (forward,
 *                    backward's two), of 4 with activation checkpointing (its recompute is a
 *                    second forward); of one slot's copies, half (each layer is copied in once
 *                    per pass).
 * The schedule's bound is the clipped schedule's when the update waits for the norm, else one
 * slot's, else the roofline; never below the roofline.  A run whose speculation
 * (--clip-speculate) kept its updates ahead can beat the clipped bound; nothing beats the
 * roofline.
 */
#ifndef AEBENCH_STEP_BOUND_H
#define AEBENCH_STEP_BOUND_H

#include "engine.h"

/* max over the resources: every one busy at once. */
double step_bound_roofline_ms(const double busy[BUSY_KINDS]);

/* The bound of a schedule under cfg: with one layer slot (its copies add to its compute) or
 * not, and a host Adam that waits for the norm under --clip-grad > 0 or not (see the top). */
void step_bound_schedule(const engine_config *cfg, const double busy[BUSY_KINDS], int one_slot,
                         int adam_waits_for_norm, engine_bound *out);

/* The bound of eng's schedule under cfg: its hook's, or the roofline. */
void step_bound_of(const engine_vtbl *eng, const engine_config *cfg, const double busy[BUSY_KINDS],
                   engine_bound *out);

#endif
