/*
 * spans.h — how long each stream was busy during one iteration.
 *
 * An engine brackets each piece of work it issues (a layer's compute, one layer's copy)
 * with span_begin / span_end on the stream that runs it; both are events, so nothing
 * waits.  After the iteration (once the streams are synchronised) spans_sum adds up, per
 * kind of stream, the time between each pair.  A span begun after a stream_wait_event
 * starts when the wait is satisfied, so the sums are busy time, not waiting time.
 */
#ifndef AEBENCH_SPANS_H
#define AEBENCH_SPANS_H

#include "../../kernels/gpt.h"

typedef struct stream_spans {
    const gpt_backend *be;
    gpt_event **events; /* 2 per span */
    int *kind;          /* per span */
    int cap, n;         /* spans */
    int overflow;       /* spans that did not fit (their time is not counted) */
} stream_spans;

int spans_init(stream_spans *sp, const gpt_backend *be, int cap);
void spans_free(stream_spans *sp);
/* Start a new iteration's record; if the one before overflowed, with room for all it began
 * (GPT_ERR_OOM or the event's error if that room could not be made). */
int spans_reset(stream_spans *sp);
/* Bracket work on s: begin gives the span's id (-1 when the record is full: that span is
 * then not counted), end takes it.  Spans on different streams may interleave. */
int span_begin(stream_spans *sp, gpt_stream *s, int kind, int *id);
int span_end(stream_spans *sp, gpt_stream *s, int id);
/* Graphs: a span's events are stamps (gpt_event_stamp), so a replayed capture records the spans
 * begun while it was captured, with the same ids (a step begins its spans in the same order
 * every time).  spans_count before and after the capture gives them; each replay moves the
 * record past them with spans_move(from, to) (and a capture that failed moves it back), which
 * is GPT_ERR_INVALID when the record is not at `from`: the step's spans were begun in another
 * order. */
int spans_count(const stream_spans *sp);
int spans_move(stream_spans *sp, int from, int to);
/* busy_ms[k] += total ms of the spans of kind k (all recorded events must be complete). */
int spans_sum(stream_spans *sp, double *busy_ms, int nkinds);
/* *ms = the time spans of kind `a` were busy while no span of kind `b` was (e.g. the
 * collectives exposed beside the compute: what of them the compute did not hide), from the
 * recorded spans' places in time (all events complete). */
int spans_exposed(stream_spans *sp, int a, int b, double *ms);
/* The same from spans given as [lo, hi) times (ms) and kinds, n of them: what spans_exposed
 * computes once it has their places. */
double spans_exposed_of(const double *lo, const double *hi, const int *kind, int n, int a, int b);

#endif
