#include "spans.h"

#include <stdlib.h>
#include <string.h>

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

/* Room for cap spans: the new slots' events created (on a failure those made are destroyed
 * and the record keeps its room). */
static int spans_grow(stream_spans *sp, int cap)
{
    gpt_event **events = realloc(sp->events, (size_t)cap * 2 * sizeof *events);
    if (!events) return GPT_ERR_OOM;
    sp->events = events;
    int *kind = realloc(sp->kind, (size_t)cap * sizeof *kind);
    if (!kind) return GPT_ERR_OOM;
    sp->kind = kind;
    for (int i = 2 * sp->cap; i < 2 * cap; i++) {
        events[i] = NULL;
        int rc = gpt_event_create(sp->be, &events[i]);
        if (rc) {
            while (i-- > 2 * sp->cap) gpt_event_destroy(events[i]);
            return rc;
        }
    }
    sp->cap = cap;
    return GPT_OK;
}

int spans_reset(stream_spans *sp)
{
    /* The step before began more spans than there was room for (an engine's count of its
     * spans is an estimate: l2l's on two ranks left out its gathers, and no step had busy
     * times): room for all of them from this step on. */
    const int rc = sp->overflow > 0 ? spans_grow(sp, sp->cap + sp->overflow) : GPT_OK;
    sp->n = 0;
    sp->overflow = 0;
    return rc;
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
    int rc = gpt_event_stamp(sp->events[2 * *id], s);
    return rc ? rc : gpt_event_stamp(sp->events[2 * *id + 1], s);
}

int span_end(stream_spans *sp, gpt_stream *s, int id)
{
    if (id < 0) return GPT_OK; /* its begin did not fit */
    return gpt_event_stamp(sp->events[2 * id + 1], s);
}

int spans_count(const stream_spans *sp) { return sp->n; }

int spans_move(stream_spans *sp, int from, int to)
{
    if (sp->n != from || to < 0 || to > sp->cap) return GPT_ERR_INVALID;
    sp->n = to;
    return GPT_OK;
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

/* [lo, hi) spans sorted by lo, for the union sweeps below. */
typedef struct span_at {
    double lo, hi;
} span_at;
static int span_at_cmp(const void *pa, const void *pb)
{
    const span_at *a = pa, *b = pb;
    return a->lo < b->lo ? -1 : a->lo > b->lo;
}

/* The spans of kind k merged into disjoint intervals, in time order, into out (n at most):
 * their count. */
static int merged_of(const double *lo, const double *hi, const int *kind, int n, int k, span_at *out)
{
    int m = 0;
    for (int i = 0; i < n; i++)
        if (kind[i] == k && hi[i] > lo[i]) out[m++] = (span_at){lo[i], hi[i]};
    qsort(out, (size_t)m, sizeof *out, span_at_cmp);
    int u = 0;
    for (int i = 0; i < m; i++) {
        if (u > 0 && out[i].lo <= out[u - 1].hi) {
            if (out[i].hi > out[u - 1].hi) out[u - 1].hi = out[i].hi;
        } else {
            out[u++] = out[i];
        }
    }
    return u;
}

double spans_exposed_of(const double *lo, const double *hi, const int *kind, int n, int a, int b)
{
    span_at *sa = malloc(sizeof *sa * (size_t)(n > 0 ? n : 1)), *sb = malloc(sizeof *sb * (size_t)(n > 0 ? n : 1));
    double exposed = 0;
    if (!sa || !sb) {
        free(sa), free(sb);
        return 0;
    }
    const int na = merged_of(lo, hi, kind, n, a, sa), nb = merged_of(lo, hi, kind, n, b, sb);
    /* each of a's intervals less its overlap with b's (both disjoint and sorted: one sweep) */
    for (int i = 0, j = 0; i < na; i++) {
        double covered = 0;
        while (j < nb && sb[j].hi <= sa[i].lo) j++;
        for (int k = j; k < nb && sb[k].lo < sa[i].hi; k++) {
            const double l = sb[k].lo > sa[i].lo ? sb[k].lo : sa[i].lo, h = sb[k].hi < sa[i].hi ? sb[k].hi : sa[i].hi;
            if (h > l) covered += h - l;
        }
        exposed += sa[i].hi - sa[i].lo - covered;
    }
    free(sa), free(sb);
    return exposed;
}

int spans_exposed(stream_spans *sp, int a, int b, double *ms)
{
    *ms = 0;
    if (sp->n == 0) return GPT_OK;
    double *lo = malloc(sizeof *lo * (size_t)sp->n * 2);
    if (!lo) return GPT_ERR_OOM;
    double *hi = lo + sp->n;
    int rc = GPT_OK;
    /* (each span's place: its events' times from the first span's begin, which may come after
     * another stream's) */
    for (int i = 0; i < sp->n && !rc; i++) {
        float s = 0, e = 0;
        rc = gpt_event_elapsed_ms(&s, sp->events[0], sp->events[2 * i]);
        if (!rc) rc = gpt_event_elapsed_ms(&e, sp->events[0], sp->events[2 * i + 1]);
        lo[i] = s, hi[i] = e;
    }
    if (!rc) *ms = spans_exposed_of(lo, hi, sp->kind, sp->n, a, b);
    free(lo);
    return rc;
}
