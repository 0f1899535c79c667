/*
 * profile.c — --profile's timing backend (profile.h).  Why a wrapper and not timers in the
 * engines: every engine issues the same kernel set through one op table, so one table of
 * wrappers times every op of every engine, and the engines stay free of profiling code.
 */
#include "profile.h"

#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static const char *const family_names[PROF_OPS] = {
    "encoder_forward", "encoder_backward", "layernorm_forward", "layernorm_backward",
    "matmul_forward", "matmul_backward", "matmul_gelu_forward", "matmul_gelu_backward",
    "matmul_residual_forward",
    "attention_forward", "attention_backward", "gelu_forward", "gelu_backward",
    "residual_forward", "residual_backward", "residual_layernorm_forward", "crossentropy",
    "adamw", "norm_squared", "params_to_act", "checksum", "add_f32",
    "copy_h2d", "copy_d2h", "copy_d2d", "memset",
};

/* One timed op of this step: its events are pool[2 i] and pool[2 i + 1]. */
typedef struct mark {
    int family;
    int stream; /* index into gpt_profile.streams, or -1 beyond PROFILE_MAX_STREAMS */
    double flops, bytes;
} mark;

typedef struct totals {
    long long calls[PROF_OPS];
    double ms[PROF_OPS], flops[PROF_OPS], bytes[PROF_OPS];
    long long stream_ops[PROFILE_MAX_STREAMS];
    double stream_busy[PROFILE_MAX_STREAMS], stream_span[PROFILE_MAX_STREAMS];
} totals;

/* to += sign * t, every count and time */
static void totals_add(totals *to, const totals *t, int sign)
{
    for (int f = 0; f < PROF_OPS; f++) {
        to->calls[f] += sign * t->calls[f];
        to->ms[f] += sign * t->ms[f];
        to->flops[f] += sign * t->flops[f];
        to->bytes[f] += sign * t->bytes[f];
    }
    for (int k = 0; k < PROFILE_MAX_STREAMS; k++) {
        to->stream_ops[k] += sign * t->stream_ops[k];
        to->stream_busy[k] += sign * t->stream_busy[k];
        to->stream_span[k] += sign * t->stream_span[k];
    }
}

struct gpt_profile {
    gpt_backend be;        /* the engines' backend: inner's impl, name, dtype; ops below */
    gpt_backend_ops ops;   /* inner's table, the ops and copies wrapped */
    const gpt_backend *inner;
    pthread_mutex_t lock;  /* (marks are added by whichever thread issues an op) */
    mark *marks;
    gpt_event **pool;      /* 2 per mark, kept from step to step */
    const gpt_stream *streams[PROFILE_MAX_STREAMS]; /* in the order their first op came */
    int nstreams;
    int nmarks, cap, npool;
    long long untimed;
    int steps;
    totals all, first;     /* every step's, and the first step's (left out after it) */
};

static gpt_profile *profile_of(const gpt_stream *s)
{
    return (gpt_profile *)((char *)s->be - offsetof(gpt_profile, be));
}

/* Record the start of an op of `family` on s; the mark's index, or -1 (not timed). */
static int mark_begin(gpt_profile *p, gpt_stream *s, int family, double flops, double bytes)
{
    if (pthread_mutex_lock(&p->lock)) return -1;
    int m = -1;
    if (p->nmarks == p->cap) {
        const int cap = p->cap ? 2 * p->cap : 1024;
        mark *marks = realloc(p->marks, (size_t)cap * sizeof *marks);
        gpt_event **pool = marks ? realloc(p->pool, 2 * (size_t)cap * sizeof *pool) : NULL;
        if (marks) p->marks = marks;
        if (pool) p->pool = pool, p->cap = cap;
    }
    if (p->nmarks < p->cap) {
        m = p->nmarks;
        while (p->npool < 2 * (m + 1) && p->inner->ops->event_create(&p->be, &p->pool[p->npool]) == 0) p->npool++;
        if (p->npool < 2 * (m + 1) || p->inner->ops->event_record(p->pool[2 * m], s) != 0) m = -1;
    }
    if (m >= 0) {
        int k = 0;
        while (k < p->nstreams && p->streams[k] != s) k++;
        if (k == p->nstreams && k < PROFILE_MAX_STREAMS) p->streams[p->nstreams++] = s;
        p->marks[m] = (mark){.family = family, .stream = k < PROFILE_MAX_STREAMS ? k : -1, .flops = flops, .bytes = bytes};
        p->nmarks++;
    } else {
        p->untimed++;
    }
    pthread_mutex_unlock(&p->lock);
    return m;
}

/* Record the end of mark m on s (after the op was issued). */
static void mark_end(gpt_profile *p, gpt_stream *s, int m)
{
    if (m < 0) return;
    if (p->inner->ops->event_record(p->pool[2 * m + 1], s) != 0) {
        pthread_mutex_lock(&p->lock);
        p->marks[m].family = -1; /* (its end was never recorded: not counted) */
        p->untimed++;
        pthread_mutex_unlock(&p->lock);
    }
}

/* ---- the wrappers: one per op and copy of gpt_backend_ops ---------------------------------- */

/* One wrapper per op of gpt_backend_ops: mark, call the inner op, mark.  PARAMS is the op's
 * parameter list (the stream first), ARGS its names; FLOPS and BYTES (expressions over
 * them) what the call does. */
#define WRAP_OP(name, family, flops, bytes, params, args)                                       \
    static void wrap_##name params                                                             \
    {                                                                                          \
        gpt_profile *p = profile_of(s);                                                        \
        const int mk = mark_begin(p, s, family, flops, bytes);                                 \
        p->inner->ops->name args;                                                              \
        mark_end(p, s, mk);                                                                    \
    }
#define WRAP_COPY(name, family, params, args)                                                  \
    static int wrap_##name params                                                              \
    {                                                                                          \
        gpt_profile *p = profile_of(s);                                                        \
        const int mk = mark_begin(p, s, family, 0, (double)bytes);                             \
        const int rc = p->inner->ops->name args;                                               \
        mark_end(p, s, mk);                                                                    \
        return rc;                                                                             \
    }

WRAP_OP(encoder_forward, PROF_ENCODER_FORWARD, 0, 0,
        (gpt_stream *s, void *out, const int32_t *tokens, const void *wte, const void *wpe, int B, int T, int C, int lo, int rows),
        (s, out, tokens, wte, wpe, B, T, C, lo, rows))
WRAP_OP(encoder_backward, PROF_ENCODER_BACKWARD, 0, 0,
        (gpt_stream *s, float *dwte, float *dwpe, const void *dout, const int32_t *tokens, int B, int T, int C, int lo, int rows),
        (s, dwte, dwpe, dout, tokens, B, T, C, lo, rows))
WRAP_OP(layernorm_forward, PROF_LAYERNORM_FORWARD, 0, 0,
        (gpt_stream *s, void *out, float *mean, float *rstd, const void *inp, const void *w, const void *b, int N, int C),
        (s, out, mean, rstd, inp, w, b, N, C))
WRAP_OP(layernorm_backward, PROF_LAYERNORM_BACKWARD, 0, 0,
        (gpt_stream *s, void *dinp, float *dw, float *db, const void *dout, const void *inp, const void *w, const float *mean, const float *rstd, int N, int C, gpt_grad_write gw),
        (s, dinp, dw, db, dout, inp, w, mean, rstd, N, C, gw))
WRAP_OP(matmul_forward, PROF_MATMUL_FORWARD, 2.0 * N * C * OC, 0,
        (gpt_stream *s, void *out, const void *inp, const void *w, const void *bias, int N, int C, int OC),
        (s, out, inp, w, bias, N, C, OC))
WRAP_OP(matmul_backward, PROF_MATMUL_BACKWARD, (dinp ? 4.0 : 2.0) * N * C * OC, 0,
        (gpt_stream *s, void *dinp, float *dw, float *dbias, const void *dout, const void *inp, const void *w, int N, int C, int OC, gpt_grad_write gw),
        (s, dinp, dw, dbias, dout, inp, w, N, C, OC, gw))
WRAP_OP(matmul_forward_gelu, PROF_MATMUL_GELU_FORWARD, 2.0 * N * C * OC, 0,
        (gpt_stream *s, void *out, void *pre, const void *inp, const void *w, const void *bias, int N, int C, int OC),
        (s, out, pre, inp, w, bias, N, C, OC))
WRAP_OP(matmul_forward_residual, PROF_MATMUL_RESIDUAL_FORWARD, 2.0 * N * C * OC, 0,
        (gpt_stream *s, void *out, const void *inp, const void *w, const void *bias, const void *res, int N, int C, int OC),
        (s, out, inp, w, bias, res, N, C, OC))
WRAP_OP(matmul_backward_gelu, PROF_MATMUL_GELU_BACKWARD, (dinp ? 4.0 : 2.0) * N * C * OC, 0,
        (gpt_stream *s, void *dinp, float *dw, float *dbias, const void *dout, const void *inp, const void *w, const void *pre, int N, int C, int OC, gpt_grad_write gw),
        (s, dinp, dw, dbias, dout, inp, w, pre, N, C, OC, gw))
WRAP_OP(attention_forward, PROF_ATTENTION_FORWARD, 4.0 * B * T * T * C, 0,
        (gpt_stream *s, void *out, float *lse, const void *qkv, int B, int T, int C, int NH),
        (s, out, lse, qkv, B, T, C, NH))
WRAP_OP(attention_backward, PROF_ATTENTION_BACKWARD, 8.0 * B * T * T * C, 0,
        (gpt_stream *s, void *dqkv, float *delta, const void *dout, const void *qkv, const void *out, const float *lse, int B, int T, int C, int NH),
        (s, dqkv, delta, dout, qkv, out, lse, B, T, C, NH))
WRAP_OP(gelu_forward, PROF_GELU_FORWARD, 0, 0,
        (gpt_stream *s, void *out, const void *inp, size_t n),
        (s, out, inp, n))
WRAP_OP(gelu_backward, PROF_GELU_BACKWARD, 0, 0,
        (gpt_stream *s, void *dinp, const void *inp, const void *dout, size_t n),
        (s, dinp, inp, dout, n))
WRAP_OP(residual_forward, PROF_RESIDUAL_FORWARD, 0, 0,
        (gpt_stream *s, void *out, const void *a, const void *b, size_t n),
        (s, out, a, b, n))
WRAP_OP(residual_backward, PROF_RESIDUAL_BACKWARD, 0, 0,
        (gpt_stream *s, void *da, void *db, const void *dout, size_t n),
        (s, da, db, dout, n))
WRAP_OP(residual_layernorm_forward, PROF_RESIDUAL_LAYERNORM_FORWARD, 0, 0,
        (gpt_stream *s, void *res, void *out, float *mean, float *rstd, const void *a, const void *res_b, const void *w, const void *b, int N, int C),
        (s, res, out, mean, rstd, a, res_b, w, b, N, C))
WRAP_OP(crossentropy_forward_backward, PROF_CROSSENTROPY, 0, 0,
        (gpt_stream *s, float *losses, void *logits, const int32_t *targets, float dloss, int N, int V, int Vp),
        (s, losses, logits, targets, dloss, N, V, Vp))
WRAP_OP(crossentropy_stats, PROF_CROSSENTROPY, 0, 0,
        (gpt_stream *s, float *stats, const void *logits, const int32_t *targets, int N, int V, int Vp, int lo),
        (s, stats, logits, targets, N, V, Vp, lo))
WRAP_OP(crossentropy_parallel, PROF_CROSSENTROPY, 0, 0,
        (gpt_stream *s, float *losses, void *logits, const int32_t *targets, const float *stats, int parts, float dloss, int N, int V, int Vp, int lo),
        (s, losses, logits, targets, stats, parts, dloss, N, V, Vp, lo))
WRAP_OP(adamw_update, PROF_ADAMW, 0, 0,
        (gpt_stream *s, float *param, void *param_act, const float *grad, float *m, float *v, size_t n, float lr, float beta1, float beta2, float eps, float weight_decay, int t, float grad_scale, const gpt_checksum_acc *acc),
        (s, param, param_act, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, t, grad_scale, acc))
WRAP_OP(norm_squared, PROF_NORM_SQUARED, 0, 0,
        (gpt_stream *s, float *out, const float *x, size_t n),
        (s, out, x, n))
WRAP_OP(act_to_f32, PROF_PARAMS_TO_ACT, 0, 0,
        (gpt_stream *s, float *dst, const void *src, size_t n),
        (s, dst, src, n))
WRAP_OP(params_to_act, PROF_PARAMS_TO_ACT, 0, 0,
        (gpt_stream *s, void *dst, const float *src, size_t n),
        (s, dst, src, n))
WRAP_OP(checksum_chunks, PROF_CHECKSUM, 0, 0,
        (gpt_stream *s, uint64_t *sums, const gpt_float_span *parts, int nparts, size_t chunk_floats),
        (s, sums, parts, nparts, chunk_floats))
WRAP_OP(checksum_fold, PROF_CHECKSUM, 0, 0,
        (gpt_stream *s, uint64_t *sums, size_t total, size_t chunk_floats),
        (s, sums, total, chunk_floats))
WRAP_OP(add_f32, PROF_ADD_F32, 0, 0,
        (gpt_stream *s, float *out, const float *a, const float *b, size_t n),
        (s, out, a, b, n))
WRAP_COPY(memcpy_h2d, PROF_COPY_H2D, (gpt_stream *s, void *dst, const void *src, size_t bytes), (s, dst, src, bytes))
WRAP_COPY(memcpy_d2h, PROF_COPY_D2H, (gpt_stream *s, void *dst, const void *src, size_t bytes), (s, dst, src, bytes))
WRAP_COPY(memcpy_d2d, PROF_COPY_D2D, (gpt_stream *s, void *dst, const void *src, size_t bytes), (s, dst, src, bytes))
WRAP_COPY(memset_zero, PROF_MEMSET, (gpt_stream *s, void *dst, size_t bytes), (s, dst, bytes))

static void wrap_ops(gpt_backend_ops *ops)
{
    ops->encoder_forward = wrap_encoder_forward;
    ops->encoder_backward = wrap_encoder_backward;
    ops->layernorm_forward = wrap_layernorm_forward;
    ops->layernorm_backward = wrap_layernorm_backward;
    ops->matmul_forward = wrap_matmul_forward;
    ops->matmul_backward = wrap_matmul_backward;
    ops->matmul_forward_gelu = wrap_matmul_forward_gelu;
    ops->matmul_forward_residual = wrap_matmul_forward_residual;
    ops->matmul_backward_gelu = wrap_matmul_backward_gelu;
    ops->attention_forward = wrap_attention_forward;
    ops->attention_backward = wrap_attention_backward;
    ops->gelu_forward = wrap_gelu_forward;
    ops->gelu_backward = wrap_gelu_backward;
    ops->residual_forward = wrap_residual_forward;
    ops->residual_backward = wrap_residual_backward;
    ops->residual_layernorm_forward = wrap_residual_layernorm_forward;
    ops->crossentropy_forward_backward = wrap_crossentropy_forward_backward;
    ops->crossentropy_stats = wrap_crossentropy_stats;
    ops->crossentropy_parallel = wrap_crossentropy_parallel;
    ops->adamw_update = wrap_adamw_update;
    ops->norm_squared = wrap_norm_squared;
    ops->params_to_act = wrap_params_to_act;
    ops->act_to_f32 = wrap_act_to_f32;
    ops->checksum_chunks = wrap_checksum_chunks;
    ops->checksum_fold = wrap_checksum_fold;
    ops->add_f32 = wrap_add_f32;
    ops->memcpy_h2d = wrap_memcpy_h2d;
    ops->memcpy_d2h = wrap_memcpy_d2h;
    ops->memcpy_d2d = wrap_memcpy_d2d;
    ops->memset_zero = wrap_memset_zero;
}


/* ---- the profiler ---------------------------------------------------------------------------- */

int gpt_profile_create(gpt_profile **out, const gpt_backend *inner)
{
    *out = NULL;
    gpt_profile *p = calloc(1, sizeof *p);
    if (!p) return GPT_ERR_OOM;
    if (pthread_mutex_init(&p->lock, NULL)) {
        free(p);
        return GPT_ERR_BACKEND;
    }
    p->inner = inner;
    p->ops = *inner->ops;
    wrap_ops(&p->ops);
    /* no graphs: a replay would run the ops without their events, and time nothing */
    p->ops.graph_capture_begin = NULL;
    p->ops.graph_capture_end = NULL;
    p->ops.graph_launch = NULL;
    p->ops.graph_destroy = NULL;
    p->be = *inner;
    p->be.ops = &p->ops;
    *out = p;
    return GPT_OK;
}

gpt_backend *gpt_profile_backend(gpt_profile *p) { return &p->be; }

int gpt_profile_step_end(gpt_profile *p)
{
    if (pthread_mutex_lock(&p->lock)) return GPT_ERR_BACKEND;
    totals step;
    memset(&step, 0, sizeof step);
    int rc = GPT_OK, ref = -1;
    /* each stream's first op start and last op end, from the step's first timed op's start
     * (the ops of one stream run in issue order: its busy time is the sum of theirs, its
     * gaps the rest of its span) */
    double first[PROFILE_MAX_STREAMS], last[PROFILE_MAX_STREAMS];
    int seen[PROFILE_MAX_STREAMS] = {0};
    for (int m = 0; m < p->nmarks && rc == GPT_OK; m++) {
        const mark *k = &p->marks[m];
        if (k->family < 0) continue;
        float ms = 0, t0 = 0, t1 = 0;
        if ((rc = p->inner->ops->event_sync(p->pool[2 * m + 1])) ||
            (rc = p->inner->ops->event_elapsed_ms(&ms, p->pool[2 * m], p->pool[2 * m + 1])))
            break;
        if (ref < 0) ref = m;
        if (k->stream >= 0 &&
            ((rc = p->inner->ops->event_elapsed_ms(&t0, p->pool[2 * ref], p->pool[2 * m])) ||
             (rc = p->inner->ops->event_elapsed_ms(&t1, p->pool[2 * ref], p->pool[2 * m + 1]))))
            break;
        step.calls[k->family]++;
        step.ms[k->family] += ms;
        step.flops[k->family] += k->flops;
        step.bytes[k->family] += k->bytes;
        if (k->stream >= 0) {
            step.stream_ops[k->stream]++;
            step.stream_busy[k->stream] += ms;
            if (!seen[k->stream] || t0 < first[k->stream]) first[k->stream] = t0;
            if (!seen[k->stream] || t1 > last[k->stream]) last[k->stream] = t1;
            seen[k->stream] = 1;
        }
    }
    for (int k = 0; k < PROFILE_MAX_STREAMS; k++)
        if (seen[k]) step.stream_span[k] = last[k] - first[k];
    p->nmarks = 0;
    if (rc == GPT_OK) {
        totals_add(&p->all, &step, 1);
        if (p->steps == 0) p->first = step;
        p->steps++;
    }
    pthread_mutex_unlock(&p->lock);
    return rc;
}

int gpt_profile_steps(const gpt_profile *p) { return p->steps > 1 ? p->steps - 1 : p->steps; }

/* What the profile counts: every step's totals, less the first step's (one-time costs) when
 * there is more than one. */
static totals counted(const gpt_profile *p)
{
    totals c = p->all;
    if (p->steps > 1) totals_add(&c, &p->first, -1);
    return c;
}

void gpt_profile_family_of(const gpt_profile *p, gpt_profile_op f, gpt_profile_family *out)
{
    const totals c = counted(p);
    out->name = family_names[f];
    out->calls = c.calls[f], out->ms = c.ms[f], out->flops = c.flops[f], out->bytes = c.bytes[f];
}

int gpt_profile_nstreams(const gpt_profile *p) { return p->nstreams; }

void gpt_profile_stream_of(const gpt_profile *p, int k, gpt_profile_stream *out)
{
    const totals c = counted(p);
    out->ops = c.stream_ops[k], out->busy_ms = c.stream_busy[k], out->span_ms = c.stream_span[k];
}

long long gpt_profile_untimed(const gpt_profile *p) { return p->untimed; }

void gpt_profile_destroy(gpt_profile *p)
{
    if (!p) return;
    for (int i = 0; i < p->npool; i++) p->inner->ops->event_destroy(p->pool[i]);
    free(p->pool);
    free(p->marks);
    pthread_mutex_destroy(&p->lock);
    free(p);
}
