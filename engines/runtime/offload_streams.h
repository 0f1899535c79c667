/*
 * offload_streams.h — what every offloading engine runs on: a compute stream, a host-to-GPU
 * and a GPU-to-host copy stream, the host Adam pool, and the busy spans of one step.
 *
 * One place for their lifetime and for the per-step report, so that the engines differ
 * only in their schedules: open in init; offload_streams_begin_step at the start of a step,
 * offload_streams_sync and offload_streams_busy at its end; offload_streams_close in free
 * (after the engine has waited for its own tickets and closed what runs on the pool, before
 * it frees the memory that queued work uses).
 */
#ifndef AEBENCH_OFFLOAD_STREAMS_H
#define AEBENCH_OFFLOAD_STREAMS_H

#include "../engine.h"
#include "cpu_adam.h"
#include "spans.h"

typedef struct offload_streams {
    gpt_backend *be;
    gpt_stream *compute, *h2d, *d2h;
    cpu_adam *host_adam;
    stream_spans spans;
} offload_streams;

/* Create the three streams, a host Adam pool of cfg->threads (0: all cores) and room for the
 * busy spans of a step: spans_per_micro_batch for each of cfg's micro-batches, an estimate
 * (on two ranks, at 12 and 24 layers, a layer took about 8.5 in l2l and zero-infinity, 9.5 in
 * stronghold: each way its copy up, gather and compute, its reduce-scatter, the sum so far
 * after the first micro-batch, its copy home).  A step out of room reports no busy times
 * (offload_streams_busy) and the next has room for all it began (spans_reset).  On failure
 * what was made is kept for close. */
int offload_streams_open(offload_streams *o, gpt_backend *be, const engine_config *cfg, int spans_per_micro_batch);
/* Wait for the host Adam's queued jobs and the streams, then release them all (safe on a
 * partially opened or zeroed set). */
void offload_streams_close(offload_streams *o);
/* Start of a step: a new span record, out's byte counters at zero, and the batch's token and
 * target ids (N each, host) copied into ids (2N, GPU: tokens then targets) on compute. */
int offload_streams_begin_step(offload_streams *o, step_result *out, int32_t *ids,
                               const int32_t *tokens, const int32_t *targets, size_t N);
/* End of a step whose phase marks are phases[0..2] (wall_ms, as layer_work_micro_batches
 * gives them: forward from [0] to [1], backward to [2]): wait for the streams, fill out's
 * phase times and busy times (offload_streams_sync, _busy). */
int offload_streams_end_step(offload_streams *o, step_result *out, const double phases[3]);

/* n events (an array the caller frees with event_array_destroy, also when this fails). */
int event_array_create(const gpt_backend *be, gpt_event ***out, int n);
void event_array_destroy(gpt_event **ev, int n);
/* Wait until the three streams are idle (end of a step: every span complete). */
int offload_streams_sync(offload_streams *o);
/* The step's busy time per stream into out (has_busy set; BUSY_DISK left at 0): the spans
 * since spans_reset and the host Adam pool's time since the previous call. */
int offload_streams_busy(offload_streams *o, step_result *out);

#endif
