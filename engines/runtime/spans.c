#include "spans.h"

#include <stdlib.h>

int spans_init(stream_spans *sp, const gpt_backend *be, int cap)
{
    sp->be = be;
    sp->cap = 0;
    sp->n = 0;
    sp->overflow = 0;
    sp->events = calloc((size_t)cap * 2, sizeof *sp->events);
    sp->kind = calloc((size_t)cap, sizeof *sp->kind);
    if (!sp->events || !sp->kind) {
        spans_free(sp);
        return GPT_ERR_OOM;
    }
    for (int i = 0; i < 2 * cap; i++) {
        int rc = gpt_event_create(be, &sp->events[i]);
        if (rc) {
            sp->cap = i / 2 + 1; /* so spans_free destroys what exists */
            spans_free(sp);
            return rc;
        }
    }
    sp->cap = cap;
    return GPT_OK;
}

void spans_free(stream_spans *sp)
{
    if (sp->events)
        for (int i = 0; i < 2 * sp->cap; i++) gpt_event_destroy(sp->events[i]);
    free(sp->events);
    free(sp->kind);
    sp->events = NULL;
    sp->kind = NULL;
    sp->cap = sp->n = 0;
}

void spans_reset(stream_spans *sp)
{
    sp->n = 0;
    sp->overflow = 0;
}

int span_begin(stream_spans *sp, gpt_stream *s, int kind, int *id)
{
    *id = -1;
    if (sp->n >= sp->cap) {
        sp->overflow++;
        return GPT_OK;
    }
    *id = sp->n++;
    sp->kind[*id] = kind;
    /* Until its end is recorded the span counts as empty (end = begin). */
    int rc = gpt_event_record(sp->events[2 * *id], s);
    return rc ? rc : gpt_event_record(sp->events[2 * *id + 1], s);
}

int span_end(stream_spans *sp, gpt_stream *s, int id)
{
    if (id < 0) return GPT_OK; /* its begin did not fit */
    return gpt_event_record(sp->events[2 * id + 1], s);
}

int spans_sum(stream_spans *sp, double *busy_ms, int nkinds)
{
    for (int i = 0; i < sp->n; i++) {
        float ms = 0;
        int rc = gpt_event_elapsed_ms(&ms, sp->events[2 * i], sp->events[2 * i + 1]);
        if (rc) return rc;
        if (sp->kind[i] >= 0 && sp->kind[i] < nkinds) busy_ms[sp->kind[i]] += ms;
    }
    return GPT_OK;
}
