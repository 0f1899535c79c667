/*
 * cpu_stream.c — the CPU backend's streams (one worker thread each, an in-order queue) and
 * its events (markers in those queues), so that the CPU backend orders work the way a GPU
 * does and a missing dependency is a wrong result in CI (see cpu_stream.h).
 *
 * Stream: a bounded ring of tasks under one mutex.  Issuing copies the task in and wakes
 * the worker; when the ring is full the issuer blocks until the worker makes room (a GPU's
 * launch queue does the same).  That cannot deadlock: a task only ever waits for markers
 * issued before it, so the oldest unfinished task can always run.  `issued` and `completed`
 * count tasks; stream_sync waits until `completed` reaches the `issued` it saw on entry.
 *
 * Event: a generation counter.  Each record takes the next generation and queues a marker
 * for it; the worker completes the marker when it reaches it.  A wait captures the latest
 * recorded generation at the time of the call and is satisfied once that generation has
 * completed — that record only, as with cudaStreamWaitEvent: generations can complete out
 * of order (an event re-recorded on another stream), so the event keeps the list of those
 * still pending.  A never-recorded event has generation 0, which is always complete.  Markers and queued waits hold a reference on the
 * event's state, so destroying an event with a record in flight is safe (as in CUDA).
 *
 * Errors: a failing pthread call is printed and becomes GPT_ERR_BACKEND.  Ops return void,
 * so an op that could not be queued latches the stream's error, which its next
 * stream_sync returns.  A worker that hits an error it cannot recover from marks the
 * stream dead and wakes everyone, so no caller blocks on it forever.
 */
#include "cpu_stream.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Tasks a stream can hold before its issuer blocks: deep enough for a whole layer's
 * forward and backward of queued ops (a few dozen each), small enough to stay in cache. */
#define QUEUE_CAPACITY 1024

static int pthread_failed(const char *what, int rc)
{
    fprintf(stderr, "aebench: cpu backend: %s failed: %s\n", what, strerror(rc));
    return GPT_ERR_BACKEND;
}

/* ---- events ------------------------------------------------------------------------------ */

typedef struct cpu_event_state {
    pthread_mutex_t lock;
    pthread_cond_t changed;   /* broadcast whenever a generation completes */
    atomic_int refs;          /* the gpt_event itself + queued markers and waits */
    uint64_t recorded;        /* generation of the latest record; 0: never recorded */
    uint64_t *pending;        /* generations recorded, not yet completed, ascending */
    size_t npending, pending_cap;
    uint64_t held;            /* generation taken by gpt_cpu_event_hold, 0 if none */
    uint64_t when_generation; /* which generation `when` belongs to (0: none yet) */
    struct timespec when;     /* monotonic time at which that generation completed */
} cpu_event_state;

static void event_unref(cpu_event_state *ev)
{
    if (atomic_fetch_sub(&ev->refs, 1) != 1)
        return;
    int rc = pthread_cond_destroy(&ev->changed);
    if (rc) pthread_failed("pthread_cond_destroy", rc);
    rc = pthread_mutex_destroy(&ev->lock);
    if (rc) pthread_failed("pthread_mutex_destroy", rc);
    free(ev->pending);
    free(ev);
}

int cpu_event_create(const gpt_backend *be, gpt_event **out)
{
    *out = NULL;
    gpt_event *e = calloc(1, sizeof *e);
    cpu_event_state *ev = calloc(1, sizeof *ev);
    if (e == NULL || ev == NULL) {
        free(e);
        free(ev);
        return GPT_ERR_OOM;
    }
    int rc = pthread_mutex_init(&ev->lock, NULL);
    if (rc) {
        free(e);
        free(ev);
        return pthread_failed("pthread_mutex_init", rc);
    }
    if ((rc = pthread_cond_init(&ev->changed, NULL))) {
        pthread_mutex_destroy(&ev->lock);
        free(e);
        free(ev);
        return pthread_failed("pthread_cond_init", rc);
    }
    atomic_init(&ev->refs, 1);
    e->be = be;
    e->impl = ev;
    *out = e;
    return GPT_OK;
}

void cpu_event_destroy(gpt_event *e)
{
    if (e == NULL)
        return;
    event_unref(e->impl);
    free(e);
}

/* Takes the next generation and adds it to the pending list; called with ev->lock held. */
static int event_begin_generation_locked(cpu_event_state *ev, uint64_t *generation)
{
    if (ev->npending == ev->pending_cap) {
        size_t cap = ev->pending_cap ? 2 * ev->pending_cap : 4;
        uint64_t *grown = realloc(ev->pending, cap * sizeof *grown);
        if (grown == NULL)
            return GPT_ERR_OOM;
        ev->pending = grown;
        ev->pending_cap = cap;
    }
    *generation = ++ev->recorded;
    ev->pending[ev->npending++] = *generation; /* generations only grow: stays sorted */
    return GPT_OK;
}

/* Whether a generation has completed; called with ev->lock held. */
static int event_done_locked(const cpu_event_state *ev, uint64_t generation)
{
    for (size_t i = 0; i < ev->npending; i++)
        if (ev->pending[i] == generation)
            return 0;
    return 1;
}

/* Marks one generation complete at time `when` and wakes the waiters. */
static int event_complete(cpu_event_state *ev, uint64_t generation, const struct timespec *when)
{
    int rc = pthread_mutex_lock(&ev->lock);
    if (rc)
        return pthread_failed("pthread_mutex_lock", rc);
    size_t i = 0;
    while (i < ev->npending && ev->pending[i] != generation)
        i++;
    if (i < ev->npending) {
        memmove(&ev->pending[i], &ev->pending[i + 1],
                (ev->npending - i - 1) * sizeof *ev->pending);
        ev->npending--;
    }
    if (generation == ev->recorded) {
        ev->when = *when;
        ev->when_generation = generation;
    }
    rc = pthread_cond_broadcast(&ev->changed);
    int rc2 = pthread_mutex_unlock(&ev->lock);
    if (rc)
        return pthread_failed("pthread_cond_broadcast", rc);
    if (rc2)
        return pthread_failed("pthread_mutex_unlock", rc2);
    return GPT_OK;
}

/* Blocks the calling thread until that generation has completed. */
static int event_wait_generation(cpu_event_state *ev, uint64_t generation)
{
    int rc = pthread_mutex_lock(&ev->lock);
    if (rc)
        return pthread_failed("pthread_mutex_lock", rc);
    while (!event_done_locked(ev, generation) && rc == 0)
        rc = pthread_cond_wait(&ev->changed, &ev->lock);
    int rc2 = pthread_mutex_unlock(&ev->lock);
    if (rc)
        return pthread_failed("pthread_cond_wait", rc);
    if (rc2)
        return pthread_failed("pthread_mutex_unlock", rc2);
    return GPT_OK;
}

/* The latest recorded generation, as a wait issued now must see it, and whether it has
 * already completed. */
static int event_latest(cpu_event_state *ev, uint64_t *generation, int *done)
{
    int rc = pthread_mutex_lock(&ev->lock);
    if (rc)
        return pthread_failed("pthread_mutex_lock", rc);
    *generation = ev->recorded;
    *done = event_done_locked(ev, ev->recorded);
    if ((rc = pthread_mutex_unlock(&ev->lock)))
        return pthread_failed("pthread_mutex_unlock", rc);
    return GPT_OK;
}

int cpu_event_sync(gpt_event *e)
{
    cpu_event_state *ev = e->impl;
    uint64_t generation;
    int done;
    int rc = event_latest(ev, &generation, &done);
    if (rc)
        return rc;
    return done ? GPT_OK : event_wait_generation(ev, generation);
}

int cpu_event_elapsed_ms(float *ms, gpt_event *start, gpt_event *end)
{
    struct timespec t[2];
    gpt_event *both[2] = {start, end};
    for (int k = 0; k < 2; k++) {
        cpu_event_state *ev = both[k]->impl;
        int rc = pthread_mutex_lock(&ev->lock);
        if (rc)
            return pthread_failed("pthread_mutex_lock", rc);
        /* As cudaEventElapsedTime: both events' latest records must have completed. */
        const int ready = ev->recorded > 0 && ev->when_generation == ev->recorded;
        t[k] = ev->when;
        if ((rc = pthread_mutex_unlock(&ev->lock)))
            return pthread_failed("pthread_mutex_unlock", rc);
        if (!ready)
            return GPT_ERR_INVALID;
    }
    *ms = (float)((double)(t[1].tv_sec - t[0].tv_sec) * 1e3 +
                  (double)(t[1].tv_nsec - t[0].tv_nsec) * 1e-6);
    return GPT_OK;
}

int gpt_cpu_event_hold(gpt_event *e)
{
    cpu_event_state *ev = e->impl;
    int rc = pthread_mutex_lock(&ev->lock);
    if (rc)
        return pthread_failed("pthread_mutex_lock", rc);
    int status = GPT_ERR_INVALID; /* one hold at a time */
    if (ev->held == 0)
        status = event_begin_generation_locked(ev, &ev->held);
    if ((rc = pthread_mutex_unlock(&ev->lock)))
        return pthread_failed("pthread_mutex_unlock", rc);
    return status;
}

int gpt_cpu_event_release(gpt_event *e)
{
    cpu_event_state *ev = e->impl;
    int rc = pthread_mutex_lock(&ev->lock);
    if (rc)
        return pthread_failed("pthread_mutex_lock", rc);
    const uint64_t generation = ev->held;
    ev->held = 0;
    if ((rc = pthread_mutex_unlock(&ev->lock)))
        return pthread_failed("pthread_mutex_unlock", rc);
    if (generation == 0)
        return GPT_ERR_INVALID;
    struct timespec now;
    if (clock_gettime(CLOCK_MONOTONIC, &now) != 0)
        return GPT_ERR_BACKEND;
    return event_complete(ev, generation, &now);
}

/* ---- tasks ------------------------------------------------------------------------------ */

typedef enum cpu_task_kind {
    TASK_COPY,
    TASK_MEMSET_ZERO,
    TASK_EVENT_RECORD,
    TASK_EVENT_WAIT,
    TASK_ENCODER_FORWARD,
    TASK_ENCODER_BACKWARD,
    TASK_LAYERNORM_FORWARD,
    TASK_LAYERNORM_BACKWARD,
    TASK_MATMUL_FORWARD,
    TASK_MATMUL_BACKWARD,
    TASK_ATTENTION_FORWARD,
    TASK_ATTENTION_BACKWARD,
    TASK_GELU_FORWARD,
    TASK_GELU_BACKWARD,
    TASK_RESIDUAL_FORWARD,
    TASK_RESIDUAL_BACKWARD,
    TASK_CROSSENTROPY, /* forward and backward in one pass */
    TASK_CROSSENTROPY_STATS,
    TASK_CROSSENTROPY_PARALLEL,
    TASK_ADAMW_UPDATE,
    TASK_NORM_SQUARED,
    TASK_CHECKSUM_CHUNKS,
    TASK_CHECKSUM_FOLD,
    TASK_PARAMS_TO_ACT,
    TASK_ACT_TO_F32,
    TASK_ADD_F32,
    TASK_HOST_FN,
} cpu_task_kind;

/* One queued item: its kind and a copy of the arguments of the call that issued it. */
typedef struct cpu_task {
    cpu_task_kind kind;
    union {
        struct { void *dst; const void *src; size_t bytes; } copy;
        struct { void *dst; size_t bytes; } memset_zero;
        struct { cpu_event_state *ev; uint64_t generation; } event; /* record and wait */
        struct { float *out; const int32_t *tokens; const float *wte, *wpe; int B, T, C, lo, rows; }
            encoder_fwd;
        struct { float *dwte, *dwpe; const float *dout; const int32_t *tokens; int B, T, C, lo, rows; }
            encoder_bwd;
        /* res: the residual variant, res = res_a + res_b first (inp is then res) */
        struct {
            float *out, *mean, *rstd, *res;
            const float *inp, *w, *b, *res_a, *res_b;
            int N, C;
        } layernorm_fwd;
        struct {
            float *dinp, *dw, *db;
            const float *dout, *inp, *w, *mean, *rstd;
            int N, C;
            gpt_grad_write gw;
        } layernorm_bwd;
        /* gelu_out: the gelu variant (out is then the pre-activation); res: the residual
         * variant (res added to out after the product) */
        struct { float *out, *gelu_out; const float *inp, *w, *bias, *res; int N, C, OC; } matmul_fwd;
        /* gelu_pre: the gelu variant (dinp is carried through gelu'(gelu_pre)) */
        struct {
            float *dinp, *dw, *dbias;
            const float *dout, *inp, *w, *gelu_pre;
            int N, C, OC;
            gpt_grad_write gw;
        } matmul_bwd;
        struct { float *out, *lse; const float *qkv; int B, T, C, NH; } attention_fwd;
        struct {
            float *dqkv, *delta;
            const float *dout, *qkv, *out, *lse;
            int B, T, C, NH;
        } attention_bwd;
        struct { float *out; const float *inp; size_t n; } gelu_fwd;
        struct { float *dinp; const float *inp, *dout; size_t n; } gelu_bwd;
        struct { float *out; const float *a, *b; size_t n; } residual_fwd; /* and add_f32 */
        struct { float *da, *db; const float *dout; size_t n; } residual_bwd;
        struct {
            float *losses, *logits;
            const int32_t *targets;
            float dloss;
            int N, V, Vp;
        } crossentropy;
        /* the vocabulary-parallel pair: stats (parts 0) or the combining pass */
        struct {
            float *losses, *stats;
            void *logits;
            const int32_t *targets;
            float dloss;
            int parts, N, V, Vp, lo;
        } crossentropy_par;
        struct {
            float *param, *m, *v;
            void *param_act; /* NULL, or the working copy to refresh */
            const float *grad;
            size_t n;
            float lr, beta1, beta2, eps, weight_decay, grad_scale;
            int t;
            int has_acc;
            gpt_checksum_acc acc; /* has_acc: the checksum terms of what it writes */
        } adamw;
        struct { uint64_t *sums; size_t total, chunk_floats; } checksum_fold;
        struct { float *out; const float *x; size_t n; } norm_squared;
        struct {
            uint64_t *sums;
            gpt_float_span parts[GPT_CHECKSUM_PARTS];
            int nparts;
            size_t chunk_floats;
        } checksum;
        struct { void *dst; const float *src; size_t n; } params_to_act;
        struct { float *dst; const void *src; size_t n; } act_to_f32;
        struct {
            int (*fn)(void *arg);
            _Alignas(16) unsigned char arg[GPT_HOST_TASK_ARG_BYTES];
        } host_fn;
    } a;
} cpu_task;

/* ---- streams ---------------------------------------------------------------------------- */

typedef struct cpu_stream_state {
    pthread_t worker;
    pthread_mutex_t lock;
    pthread_cond_t work_ready; /* the worker sleeps on it: queue empty and not stopping */
    pthread_cond_t progress;   /* issuers and syncs sleep on it: a task finished */
    cpu_task ring[QUEUE_CAPACITY];
    size_t head, count;          /* the oldest queued task, and how many are queued */
    uint64_t issued, completed;  /* tasks ever queued / ever finished */
    int stopping;                /* destroy: finish the queue, then exit */
    int dead;                    /* the worker exited on an error: nothing will run */
    atomic_int error;            /* first error since the last stream_sync (0: none) */
} cpu_stream_state;

static void latch_error(cpu_stream_state *q, int status)
{
    int none = 0;
    atomic_compare_exchange_strong(&q->error, &none, status);
}

/* ---- the activation type ----------------------------------------------------------------
 * The ops below are fp32 (cpu_ops.h).  On a bf16 backend (gpt_cpu_backend_create_dtype) the
 * arguments typed void * in gpt.h hold bf16: an op's scope widens each such input into an
 * fp32 scratch copy, runs the fp32 op on the copies, and rounds each output back to bf16
 * (nearest even, gpt_f32_to_bf16: what the CUDA backend stores).  That is the GPU's bf16
 * arithmetic in kind — loads widened, fp32 math, one rounding per stored tensor — and the
 * same bits on every run and thread count, so that engines that issue the same ops in bf16
 * equal each other bit for bit here.  Ops that the GPU fuses (residual + LayerNorm, matmul +
 * GELU) run as their two parts, each rounding its output, as the fp32 backend runs them.
 * Every input is widened before the op writes any output, so an output may alias an input
 * as gpt.h allows.  On an fp32 backend a scope hands the pointers through unchanged. */
enum { ACT_MAX_ARGS = 6 };
typedef struct act_scope {
    int bf16, failed, k;
    struct { float *wide; void *act; size_t n; int out; } arg[ACT_MAX_ARGS];
} act_scope;

static act_scope act_begin(const gpt_stream *s)
{
    act_scope a;
    memset(&a, 0, sizeof a);
    a.bf16 = s->be->dtype == GPT_BF16;
    return a;
}

/* An fp32 view of n elements at p (NULL for NULL): p itself on fp32; on bf16 a scratch copy,
 * widened if `in`, rounded back into p at act_end if `out`. */
static float *act_view(act_scope *a, const void *p, size_t n, int in, int out)
{
    if (!a->bf16 || p == NULL) return (float *)p;
    if (a->k == ACT_MAX_ARGS || (a->arg[a->k].wide = malloc((n ? n : 1) * sizeof(float))) == NULL) {
        a->failed = 1;
        return NULL;
    }
    float *w = a->arg[a->k].wide;
    const uint16_t *h = p;
    if (in)
        for (size_t i = 0; i < n; i++) w[i] = gpt_bf16_to_f32(h[i]);
    a->arg[a->k].act = (void *)p;
    a->arg[a->k].n = n;
    a->arg[a->k].out = out;
    a->k++;
    return w;
}
static const float *act_in(act_scope *a, const void *p, size_t n) { return act_view(a, p, n, 1, 0); }
static float *act_out(act_scope *a, void *p, size_t n) { return act_view(a, p, n, 0, 1); }
static float *act_inout(act_scope *a, void *p, size_t n) { return act_view(a, p, n, 1, 1); }

/* Did every view get its memory?  (Run the op only then.) */
static int act_ready(const act_scope *a) { return !a->failed; }

/* Round the outputs back and free the copies; 0, or GPT_ERR_OOM if a copy had no memory. */
static int act_end(act_scope *a)
{
    for (int i = 0; i < a->k; i++) {
        if (a->arg[i].out && !a->failed) {
            uint16_t *h = a->arg[i].act;
            for (size_t j = 0; j < a->arg[i].n; j++) h[j] = gpt_f32_to_bf16(a->arg[i].wide[j]);
        }
        free(a->arg[i].wide);
    }
    return a->failed ? GPT_ERR_OOM : GPT_OK;
}

/* The rows of wte (from id lo, rows of them held) an encoder forward reads: up to the largest
 * token id it holds. */
static size_t encoder_rows(const int32_t *tokens, size_t n, int lo, int rows)
{
    int32_t top = 0;
    for (size_t i = 0; i < n; i++)
        if (tokens[i] >= lo && tokens[i] - lo < rows && tokens[i] - lo > top) top = tokens[i] - lo;
    return (size_t)top + 1;
}

/* Runs one task in the worker thread; returns 0 or a gpt_status. */
static int task_run(gpt_stream *s, const cpu_task *t)
{
    act_scope a = act_begin(s);
    switch (t->kind) {
    case TASK_COPY:
        if (t->a.copy.bytes > 0) /* memcpy with a NULL pointer is undefined even for 0 */
            memcpy(t->a.copy.dst, t->a.copy.src, t->a.copy.bytes);
        return GPT_OK;
    case TASK_MEMSET_ZERO:
        if (t->a.memset_zero.bytes > 0)
            memset(t->a.memset_zero.dst, 0, t->a.memset_zero.bytes);
        return GPT_OK;
    case TASK_EVENT_RECORD: {
        struct timespec now;
        int rc = clock_gettime(CLOCK_MONOTONIC, &now) != 0 ? GPT_ERR_BACKEND : GPT_OK;
        /* Complete the marker even if the clock failed: waiters must never hang. */
        int rc2 = event_complete(t->a.event.ev, t->a.event.generation, &now);
        event_unref(t->a.event.ev);
        return rc ? rc : rc2;
    }
    case TASK_EVENT_WAIT: {
        int rc = event_wait_generation(t->a.event.ev, t->a.event.generation);
        event_unref(t->a.event.ev);
        return rc;
    }
    case TASK_ENCODER_FORWARD: {
        const __typeof__(t->a.encoder_fwd) *x = &t->a.encoder_fwd;
        const size_t N = (size_t)x->B * x->T, C = (size_t)x->C;
        float *out = act_out(&a, x->out, N * C);
        const float *wte = act_in(&a, x->wte, encoder_rows(x->tokens, N, x->lo, x->rows) * C);
        const float *wpe = act_in(&a, x->wpe, (size_t)x->T * C);
        if (act_ready(&a)) cpu_encoder_forward(s, out, x->tokens, wte, wpe, x->B, x->T, x->C, x->lo, x->rows);
        return act_end(&a);
    }
    case TASK_ENCODER_BACKWARD: {
        const __typeof__(t->a.encoder_bwd) *x = &t->a.encoder_bwd;
        const float *dout = act_in(&a, x->dout, (size_t)x->B * x->T * x->C);
        if (act_ready(&a)) cpu_encoder_backward(s, x->dwte, x->dwpe, dout, x->tokens, x->B, x->T, x->C, x->lo, x->rows);
        return act_end(&a);
    }
    case TASK_LAYERNORM_FORWARD: {
        const __typeof__(t->a.layernorm_fwd) *x = &t->a.layernorm_fwd;
        const size_t NC = (size_t)x->N * x->C;
        if (x->res != NULL) { /* the two ops, in order: the same bits (res stored, then read) */
            float *res = act_out(&a, x->res, NC);
            const float *ra = act_in(&a, x->res_a, NC), *rb = act_in(&a, x->res_b, NC);
            if (act_ready(&a)) cpu_residual_forward(s, res, ra, rb, NC);
            int rc = act_end(&a);
            if (rc) return rc;
            a = act_begin(s);
        }
        float *out = act_out(&a, x->out, NC);
        const float *inp = act_in(&a, x->inp, NC), *w = act_in(&a, x->w, (size_t)x->C), *b = act_in(&a, x->b, (size_t)x->C);
        if (act_ready(&a)) cpu_layernorm_forward(s, out, x->mean, x->rstd, inp, w, b, x->N, x->C);
        return act_end(&a);
    }
    case TASK_LAYERNORM_BACKWARD: {
        const __typeof__(t->a.layernorm_bwd) *x = &t->a.layernorm_bwd;
        const size_t NC = (size_t)x->N * x->C;
        float *dinp = act_inout(&a, x->dinp, NC);
        const float *dout = act_in(&a, x->dout, NC), *inp = act_in(&a, x->inp, NC), *w = act_in(&a, x->w, (size_t)x->C);
        if (act_ready(&a)) {
            /* overwrite = zero, then the one accumulating kernel: the same bits */
            if (x->gw == GPT_GRAD_OVERWRITE) {
                memset(x->dw, 0, (size_t)x->C * sizeof(float));
                memset(x->db, 0, (size_t)x->C * sizeof(float));
            }
            cpu_layernorm_backward(s, dinp, x->dw, x->db, dout, inp, w, x->mean, x->rstd, x->N, x->C);
        }
        return act_end(&a);
    }
    case TASK_MATMUL_FORWARD: {
        const __typeof__(t->a.matmul_fwd) *x = &t->a.matmul_fwd;
        const size_t NOC = (size_t)x->N * x->OC;
        float *out = act_out(&a, x->out, NOC);
        const float *inp = act_in(&a, x->inp, (size_t)x->N * x->C), *w = act_in(&a, x->w, (size_t)x->OC * x->C);
        const float *bias = act_in(&a, x->bias, (size_t)x->OC);
        if (act_ready(&a)) cpu_matmul_forward(s, out, inp, w, bias, x->N, x->C, x->OC);
        int rc = act_end(&a);
        if (!rc && x->res != NULL) {
            /* the two ops, in order: the same bits (the product stored, then read) */
            a = act_begin(s);
            float *sum = act_inout(&a, x->out, NOC);
            const float *res = act_in(&a, x->res, NOC);
            if (act_ready(&a)) cpu_residual_forward(s, sum, res, sum, NOC);
            return act_end(&a);
        }
        if (rc || x->gelu_out == NULL) return rc;
        /* the two ops, in order: the same bits (the pre-activation stored, then read) */
        a = act_begin(s);
        float *g = act_out(&a, x->gelu_out, NOC);
        const float *pre = act_in(&a, x->out, NOC);
        if (act_ready(&a)) cpu_gelu_forward(s, g, pre, NOC);
        return act_end(&a);
    }
    case TASK_MATMUL_BACKWARD: {
        const __typeof__(t->a.matmul_bwd) *x = &t->a.matmul_bwd;
        const size_t NC = (size_t)x->N * x->C;
        float *dinp = act_out(&a, x->dinp, NC);
        const float *dout = act_in(&a, x->dout, (size_t)x->N * x->OC), *inp = act_in(&a, x->inp, NC);
        const float *w = act_in(&a, x->w, (size_t)x->OC * x->C);
        if (act_ready(&a)) {
            if (x->gw == GPT_GRAD_OVERWRITE) {
                if (x->dw) memset(x->dw, 0, (size_t)x->OC * x->C * sizeof(float));
                if (x->dbias) memset(x->dbias, 0, (size_t)x->OC * sizeof(float));
            }
            cpu_matmul_backward(s, dinp, x->dw, x->dbias, dout, inp, w, x->N, x->C, x->OC);
        }
        int rc = act_end(&a);
        if (rc || x->gelu_pre == NULL || x->dinp == NULL) return rc;
        a = act_begin(s);
        float *d = act_inout(&a, x->dinp, NC);
        const float *pre = act_in(&a, x->gelu_pre, NC);
        if (act_ready(&a)) cpu_gelu_backward(s, d, pre, d, NC);
        return act_end(&a);
    }
    case TASK_ATTENTION_FORWARD: {
        const __typeof__(t->a.attention_fwd) *x = &t->a.attention_fwd;
        const size_t NC = (size_t)x->B * x->T * x->C;
        float *out = act_out(&a, x->out, NC);
        const float *qkv = act_in(&a, x->qkv, 3 * NC);
        if (act_ready(&a)) cpu_attention_forward(s, out, x->lse, qkv, x->B, x->T, x->C, x->NH);
        return act_end(&a);
    }
    case TASK_ATTENTION_BACKWARD: {
        const __typeof__(t->a.attention_bwd) *x = &t->a.attention_bwd;
        const size_t NC = (size_t)x->B * x->T * x->C;
        float *dqkv = act_out(&a, x->dqkv, 3 * NC);
        const float *dout = act_in(&a, x->dout, NC), *qkv = act_in(&a, x->qkv, 3 * NC), *out = act_in(&a, x->out, NC);
        if (act_ready(&a)) cpu_attention_backward(s, dqkv, x->delta, dout, qkv, out, x->lse, x->B, x->T, x->C, x->NH);
        return act_end(&a);
    }
    case TASK_GELU_FORWARD: {
        const size_t n = t->a.gelu_fwd.n;
        float *out = act_out(&a, t->a.gelu_fwd.out, n);
        const float *inp = act_in(&a, t->a.gelu_fwd.inp, n);
        if (act_ready(&a)) cpu_gelu_forward(s, out, inp, n);
        return act_end(&a);
    }
    case TASK_GELU_BACKWARD: {
        const size_t n = t->a.gelu_bwd.n;
        float *dinp = act_out(&a, t->a.gelu_bwd.dinp, n);
        const float *inp = act_in(&a, t->a.gelu_bwd.inp, n), *dout = act_in(&a, t->a.gelu_bwd.dout, n);
        if (act_ready(&a)) cpu_gelu_backward(s, dinp, inp, dout, n);
        return act_end(&a);
    }
    case TASK_RESIDUAL_FORWARD: {
        const size_t n = t->a.residual_fwd.n;
        float *out = act_out(&a, t->a.residual_fwd.out, n);
        const float *x1 = act_in(&a, t->a.residual_fwd.a, n), *x2 = act_in(&a, t->a.residual_fwd.b, n);
        if (act_ready(&a)) cpu_residual_forward(s, out, x1, x2, n);
        return act_end(&a);
    }
    case TASK_ADD_F32: /* fp32 whatever the activation type */
        cpu_residual_forward(s, t->a.residual_fwd.out, t->a.residual_fwd.a, t->a.residual_fwd.b, t->a.residual_fwd.n);
        return GPT_OK;
    case TASK_RESIDUAL_BACKWARD: {
        const size_t n = t->a.residual_bwd.n;
        float *da = act_inout(&a, t->a.residual_bwd.da, n), *db = act_inout(&a, t->a.residual_bwd.db, n);
        const float *dout = act_in(&a, t->a.residual_bwd.dout, n);
        if (act_ready(&a)) cpu_residual_backward(s, da, db, dout, n);
        return act_end(&a);
    }
    case TASK_CROSSENTROPY: {
        const __typeof__(t->a.crossentropy) *x = &t->a.crossentropy;
        float *logits = act_inout(&a, x->logits, (size_t)x->N * x->Vp);
        if (act_ready(&a)) cpu_crossentropy_forward_backward(s, x->losses, logits, x->targets, x->dloss, x->N, x->V, x->Vp);
        return act_end(&a);
    }
    case TASK_CROSSENTROPY_STATS: {
        const __typeof__(t->a.crossentropy_par) *x = &t->a.crossentropy_par;
        const float *logits = act_in(&a, x->logits, (size_t)x->N * x->Vp);
        if (act_ready(&a)) cpu_crossentropy_stats(s, x->stats, logits, x->targets, x->N, x->V, x->Vp, x->lo);
        return act_end(&a);
    }
    case TASK_CROSSENTROPY_PARALLEL: {
        const __typeof__(t->a.crossentropy_par) *x = &t->a.crossentropy_par;
        float *logits = act_inout(&a, x->logits, (size_t)x->N * x->Vp);
        if (act_ready(&a))
            cpu_crossentropy_parallel(s, x->losses, logits, x->targets, x->stats, x->parts, x->dloss, x->N, x->V,
                                      x->Vp, x->lo);
        return act_end(&a);
    }
    case TASK_ADAMW_UPDATE: {
        const __typeof__(t->a.adamw) *x = &t->a.adamw;
        cpu_adamw_update(s, x->param, x->grad, x->m, x->v, x->n, x->lr, x->beta1, x->beta2,
                         x->eps, x->weight_decay, x->t, x->grad_scale, x->has_acc ? &x->acc : NULL);
        /* the working copy: the updated params in the activation type (a copy on fp32) */
        float *act = act_out(&a, x->param_act, x->n);
        if (act_ready(&a) && act != NULL && act != x->param && x->n > 0)
            memmove(act, x->param, x->n * sizeof(float));
        return act_end(&a);
    }
    case TASK_NORM_SQUARED:
        cpu_norm_squared(s, t->a.norm_squared.out, t->a.norm_squared.x, t->a.norm_squared.n);
        return GPT_OK;
    case TASK_CHECKSUM_CHUNKS:
        cpu_checksum_chunks(s, t->a.checksum.sums, t->a.checksum.parts, t->a.checksum.nparts,
                            t->a.checksum.chunk_floats);
        return GPT_OK;
    case TASK_CHECKSUM_FOLD:
        cpu_checksum_fold(s, t->a.checksum_fold.sums, t->a.checksum_fold.total, t->a.checksum_fold.chunk_floats);
        return GPT_OK;
    case TASK_PARAMS_TO_ACT: {
        /* fp32 to the activation type (a copy on fp32; memmove: callers may pass one array) */
        const size_t n = t->a.params_to_act.n;
        float *dst = act_out(&a, t->a.params_to_act.dst, n);
        if (act_ready(&a) && dst != t->a.params_to_act.src && n > 0)
            memmove(dst, t->a.params_to_act.src, n * sizeof(float));
        return act_end(&a);
    }
    case TASK_ACT_TO_F32: {
        const size_t n = t->a.act_to_f32.n;
        const float *src = act_in(&a, t->a.act_to_f32.src, n);
        if (act_ready(&a) && src != t->a.act_to_f32.dst && n > 0) memmove(t->a.act_to_f32.dst, src, n * sizeof(float));
        return act_end(&a);
    }
    case TASK_HOST_FN: {
        /* The task is the worker's own copy (stream_worker copies it out of the ring), so
         * fn may write into its argument. */
        cpu_task *own = (cpu_task *)t;
        return own->a.host_fn.fn(own->a.host_fn.arg) ? GPT_ERR_BACKEND : GPT_OK;
    }
    }
    return GPT_ERR_INVALID;
}

/* Releases the event references held by tasks that will never run (dead stream). */
static void task_abandon(const cpu_task *t)
{
    if (t->kind == TASK_EVENT_RECORD) {
        /* Complete the marker anyway: a waiter on it must not hang on a dead stream. */
        struct timespec now = {0, 0};
        clock_gettime(CLOCK_MONOTONIC, &now);
        event_complete(t->a.event.ev, t->a.event.generation, &now);
        event_unref(t->a.event.ev);
    } else if (t->kind == TASK_EVENT_WAIT) {
        event_unref(t->a.event.ev);
    }
}

/* Marks the stream dead (called with q->lock held): its queued tasks are dropped, their
 * markers completed, and every sleeper woken, so no thread waits on it forever. */
static void stream_die_locked(cpu_stream_state *q, int status)
{
    latch_error(q, status);
    q->dead = 1;
    while (q->count > 0) {
        task_abandon(&q->ring[q->head]);
        q->head = (q->head + 1) % QUEUE_CAPACITY;
        q->count--;
        q->completed++;
    }
    pthread_cond_broadcast(&q->progress);
}

static void *stream_worker(void *arg)
{
    gpt_stream *s = arg;
    cpu_stream_state *q = s->impl;
    int rc = pthread_mutex_lock(&q->lock);
    if (rc) {
        /* Without the lock nothing can be queued or drained safely: report and give up;
         * issuers see `dead` only under the lock, so latch the error for stream_sync. */
        latch_error(q, pthread_failed("pthread_mutex_lock (stream worker)", rc));
        return NULL;
    }
    for (;;) {
        while (q->count == 0 && !q->stopping) {
            if ((rc = pthread_cond_wait(&q->work_ready, &q->lock))) {
                stream_die_locked(q, pthread_failed("pthread_cond_wait (stream worker)", rc));
                pthread_mutex_unlock(&q->lock);
                return NULL;
            }
        }
        if (q->count == 0) /* stopping, and the queue is drained */
            break;
        const cpu_task task = q->ring[q->head];
        q->head = (q->head + 1) % QUEUE_CAPACITY;
        q->count--;
        if ((rc = pthread_mutex_unlock(&q->lock))) {
            latch_error(q, pthread_failed("pthread_mutex_unlock (stream worker)", rc));
            return NULL;
        }

        const int status = task_run(s, &task);

        if ((rc = pthread_mutex_lock(&q->lock))) {
            latch_error(q, pthread_failed("pthread_mutex_lock (stream worker)", rc));
            return NULL;
        }
        if (status)
            latch_error(q, status);
        q->completed++;
        /* Wakes both issuers waiting for room and syncs waiting for `completed`. */
        if ((rc = pthread_cond_broadcast(&q->progress))) {
            stream_die_locked(q, pthread_failed("pthread_cond_broadcast (stream worker)", rc));
            break;
        }
    }
    if ((rc = pthread_mutex_unlock(&q->lock)))
        latch_error(q, pthread_failed("pthread_mutex_unlock (stream worker)", rc));
    return NULL;
}

int cpu_stream_create(const gpt_backend *be, gpt_stream **out)
{
    *out = NULL;
    gpt_stream *s = calloc(1, sizeof *s);
    cpu_stream_state *q = calloc(1, sizeof *q);
    if (s == NULL || q == NULL) {
        free(s);
        free(q);
        return GPT_ERR_OOM;
    }
    s->be = be;
    s->impl = q;
    atomic_init(&q->error, 0);
    int rc, inited = 0; /* 1 lock, 2 + work_ready, 3 + progress */
    if ((rc = pthread_mutex_init(&q->lock, NULL)) == 0 && ++inited &&
        (rc = pthread_cond_init(&q->work_ready, NULL)) == 0 && ++inited &&
        (rc = pthread_cond_init(&q->progress, NULL)) == 0 && ++inited &&
        (rc = pthread_create(&q->worker, NULL, stream_worker, s)) == 0) {
        *out = s;
        return GPT_OK;
    }
    if (inited >= 3) pthread_cond_destroy(&q->progress);
    if (inited >= 2) pthread_cond_destroy(&q->work_ready);
    if (inited >= 1) pthread_mutex_destroy(&q->lock);
    free(q);
    free(s);
    return pthread_failed(inited < 3 ? "pthread mutex/cond init" : "pthread_create", rc);
}

void cpu_stream_destroy(gpt_stream *s)
{
    if (s == NULL)
        return;
    cpu_stream_state *q = s->impl;
    /* The worker finishes what is queued before it sees `stopping` (it exits only on an
     * empty queue), so destroy drains, then joins. */
    int rc = pthread_mutex_lock(&q->lock);
    if (rc == 0) {
        q->stopping = 1;
        if ((rc = pthread_cond_signal(&q->work_ready)))
            pthread_failed("pthread_cond_signal", rc);
        if ((rc = pthread_mutex_unlock(&q->lock)))
            pthread_failed("pthread_mutex_unlock", rc);
    } else {
        pthread_failed("pthread_mutex_lock", rc);
    }
    if ((rc = pthread_join(q->worker, NULL))) {
        /* The worker may still use the state: leak it rather than free it under it. */
        pthread_failed("pthread_join", rc);
        return;
    }
    pthread_cond_destroy(&q->progress);
    pthread_cond_destroy(&q->work_ready);
    pthread_mutex_destroy(&q->lock);
    free(q);
    free(s);
}

/* Queues one task (blocking while the ring is full); 0 or a gpt_status. */
static int stream_push(gpt_stream *s, const cpu_task *t)
{
    cpu_stream_state *q = s->impl;
    int rc = pthread_mutex_lock(&q->lock);
    if (rc)
        return pthread_failed("pthread_mutex_lock", rc);
    while (q->count == QUEUE_CAPACITY && !q->dead && rc == 0)
        rc = pthread_cond_wait(&q->progress, &q->lock);
    int status = GPT_OK;
    if (rc) {
        status = pthread_failed("pthread_cond_wait", rc);
    } else if (q->dead) {
        status = GPT_ERR_BACKEND;
    } else {
        q->ring[(q->head + q->count) % QUEUE_CAPACITY] = *t;
        q->count++;
        q->issued++;
        if ((rc = pthread_cond_signal(&q->work_ready))) {
            /* Queued but the worker may sleep on: it would never run. */
            stream_die_locked(q, pthread_failed("pthread_cond_signal", rc));
            status = GPT_ERR_BACKEND;
        }
    }
    if ((rc = pthread_mutex_unlock(&q->lock)))
        return pthread_failed("pthread_mutex_unlock", rc);
    return status;
}

/* For the ops, which return void: a task that could not be queued latches the stream's
 * error so the next stream_sync reports it. */
static void stream_push_op(gpt_stream *s, const cpu_task *t)
{
    int status = stream_push(s, t);
    if (status)
        latch_error(s->impl, status);
}

int cpu_stream_sync(gpt_stream *s)
{
    cpu_stream_state *q = s->impl;
    int rc = pthread_mutex_lock(&q->lock);
    if (rc)
        return pthread_failed("pthread_mutex_lock", rc);
    const uint64_t target = q->issued;
    while (q->completed < target && !q->dead && rc == 0)
        rc = pthread_cond_wait(&q->progress, &q->lock);
    const int dead = q->dead;
    int rc2 = pthread_mutex_unlock(&q->lock);
    if (rc)
        return pthread_failed("pthread_cond_wait", rc);
    if (rc2)
        return pthread_failed("pthread_mutex_unlock", rc2);
    /* Report (and clear) the first error of the work this sync covered. */
    int status = atomic_exchange(&q->error, 0);
    if (status == 0 && dead)
        status = GPT_ERR_BACKEND;
    return status;
}

int cpu_memcpy_async(gpt_stream *s, void *dst, const void *src, size_t bytes)
{
    cpu_task t = {.kind = TASK_COPY};
    t.a.copy.dst = dst;
    t.a.copy.src = src;
    t.a.copy.bytes = bytes;
    return stream_push(s, &t);
}

int cpu_stream_host_task(gpt_stream *s, int (*fn)(void *arg), const void *arg, size_t arg_bytes)
{
    if (arg_bytes > GPT_HOST_TASK_ARG_BYTES)
        return GPT_ERR_INVALID;
    cpu_task t = {.kind = TASK_HOST_FN};
    t.a.host_fn.fn = fn;
    if (arg_bytes > 0)
        memcpy(t.a.host_fn.arg, arg, arg_bytes);
    return stream_push(s, &t);
}

void *cpu_stream_handle(gpt_stream *s)
{
    (void)s;
    return NULL;
}

int cpu_memset_zero_async(gpt_stream *s, void *dst, size_t bytes)
{
    cpu_task t = {.kind = TASK_MEMSET_ZERO};
    t.a.memset_zero.dst = dst;
    t.a.memset_zero.bytes = bytes;
    return stream_push(s, &t);
}

int cpu_event_record(gpt_event *e, gpt_stream *s)
{
    cpu_event_state *ev = e->impl;
    cpu_task t = {.kind = TASK_EVENT_RECORD};
    t.a.event.ev = ev;
    int rc = pthread_mutex_lock(&ev->lock);
    if (rc)
        return pthread_failed("pthread_mutex_lock", rc);
    /* The generation is taken at issue time, so a wait issued after this call (from any
     * thread) waits for this marker even before the worker reaches it. */
    int status = event_begin_generation_locked(ev, &t.a.event.generation);
    if ((rc = pthread_mutex_unlock(&ev->lock)))
        return pthread_failed("pthread_mutex_unlock", rc);
    if (status)
        return status;
    atomic_fetch_add(&ev->refs, 1); /* the marker's reference, dropped by the worker */
    status = stream_push(s, &t);
    if (status) {
        /* Never queued: complete the generation now so no waiter hangs on it. */
        struct timespec now = {0, 0};
        clock_gettime(CLOCK_MONOTONIC, &now);
        event_complete(ev, t.a.event.generation, &now);
        event_unref(ev);
    }
    return status;
}

int cpu_stream_wait_event(gpt_stream *s, gpt_event *e)
{
    cpu_event_state *ev = e->impl;
    uint64_t generation;
    int done;
    int rc = event_latest(ev, &generation, &done);
    if (rc)
        return rc;
    if (done) /* already complete (or never recorded): nothing to order */
        return GPT_OK;
    cpu_task t = {.kind = TASK_EVENT_WAIT};
    t.a.event.ev = ev;
    t.a.event.generation = generation;
    atomic_fetch_add(&ev->refs, 1); /* the wait's reference, dropped by the worker */
    rc = stream_push(s, &t);
    if (rc)
        event_unref(ev);
    return rc;
}

/* ---- the ops, queued ---------------------------------------------------------------------- */

void cpu_q_encoder_forward(gpt_stream *s, void *out, const int32_t *tokens, const void *wte,
                           const void *wpe, int B, int T, int C, int lo, int rows)
{
    cpu_task t = {.kind = TASK_ENCODER_FORWARD, .a.encoder_fwd = {.out = out, .tokens = tokens,
        .wte = wte, .wpe = wpe, .B = B, .T = T, .C = C, .lo = lo, .rows = rows}};
    stream_push_op(s, &t);
}

void cpu_q_encoder_backward(gpt_stream *s, float *dwte, float *dwpe, const void *dout,
                            const int32_t *tokens, int B, int T, int C, int lo, int rows)
{
    cpu_task t = {.kind = TASK_ENCODER_BACKWARD, .a.encoder_bwd = {.dwte = dwte, .dwpe = dwpe,
        .dout = dout, .tokens = tokens, .B = B, .T = T, .C = C, .lo = lo, .rows = rows}};
    stream_push_op(s, &t);
}

/* One push for the plain and the residual variant (res NULL: plain). */
static void push_layernorm_forward(gpt_stream *s, void *out, float *mean, float *rstd,
                                   const void *inp, const void *w, const void *b, int N, int C,
                                   void *res, const void *res_a, const void *res_b)
{
    cpu_task t = {.kind = TASK_LAYERNORM_FORWARD, .a.layernorm_fwd = {.out = out, .mean = mean,
        .rstd = rstd, .inp = inp, .w = w, .b = b, .N = N, .C = C, .res = res, .res_a = res_a,
        .res_b = res_b}};
    stream_push_op(s, &t);
}

void cpu_q_layernorm_forward(gpt_stream *s, void *out, float *mean, float *rstd,
                             const void *inp, const void *w, const void *b, int N, int C)
{
    push_layernorm_forward(s, out, mean, rstd, inp, w, b, N, C, NULL, NULL, NULL);
}

void cpu_q_residual_layernorm_forward(gpt_stream *s, void *res, void *out, float *mean,
                                      float *rstd, const void *a, const void *res_b,
                                      const void *w, const void *b, int N, int C)
{
    /* the layernorm reads the sum it follows */
    push_layernorm_forward(s, out, mean, rstd, res, w, b, N, C, res, a, res_b);
}

void cpu_q_layernorm_backward(gpt_stream *s, void *dinp, float *dw, float *db,
                              const void *dout, const void *inp, const void *w,
                              const float *mean, const float *rstd, int N, int C,
                              gpt_grad_write gw)
{
    cpu_task t = {.kind = TASK_LAYERNORM_BACKWARD, .a.layernorm_bwd = {.gw = gw, .dinp = dinp,
        .dw = dw, .db = db, .dout = dout, .inp = inp, .w = w, .mean = mean, .rstd = rstd, .N = N,
        .C = C}};
    stream_push_op(s, &t);
}

/* The matmul tasks; gelu_out / gelu_pre select the fused GELU variants (NULL: plain). */
static void push_matmul_forward(gpt_stream *s, void *out, void *gelu_out, const void *res,
                                const void *inp, const void *w, const void *bias, int N, int C,
                                int OC)
{
    cpu_task t = {.kind = TASK_MATMUL_FORWARD, .a.matmul_fwd = {.out = out, .gelu_out = gelu_out,
        .res = res, .inp = inp, .w = w, .bias = bias, .N = N, .C = C, .OC = OC}};
    stream_push_op(s, &t);
}

static void push_matmul_backward(gpt_stream *s, void *dinp, float *dw, float *dbias,
                                 const void *dout, const void *inp, const void *w,
                                 const void *gelu_pre, int N, int C, int OC, gpt_grad_write gw)
{
    cpu_task t = {.kind = TASK_MATMUL_BACKWARD, .a.matmul_bwd = {.gw = gw, .dinp = dinp, .dw = dw,
        .dbias = dbias, .dout = dout, .inp = inp, .w = w, .gelu_pre = gelu_pre, .N = N, .C = C,
        .OC = OC}};
    stream_push_op(s, &t);
}

void cpu_q_matmul_forward(gpt_stream *s, void *out, const void *inp, const void *w,
                          const void *bias, int N, int C, int OC)
{
    push_matmul_forward(s, out, NULL, NULL, inp, w, bias, N, C, OC);
}

/* out gets the product, then res + it */
void cpu_q_matmul_forward_residual(gpt_stream *s, void *out, const void *inp, const void *w,
                                   const void *bias, const void *res, int N, int C, int OC)
{
    push_matmul_forward(s, out, NULL, res, inp, w, bias, N, C, OC);
}

/* pre gets the product, out its GELU */
void cpu_q_matmul_forward_gelu(gpt_stream *s, void *out, void *pre, const void *inp,
                               const void *w, const void *bias, int N, int C, int OC)
{
    push_matmul_forward(s, pre, out, NULL, inp, w, bias, N, C, OC);
}

void cpu_q_matmul_backward_gelu(gpt_stream *s, void *dinp, float *dw, float *dbias,
                                const void *dout, const void *inp, const void *w,
                                const void *pre, int N, int C, int OC, gpt_grad_write gw)
{
    push_matmul_backward(s, dinp, dw, dbias, dout, inp, w, pre, N, C, OC, gw);
}

void cpu_q_matmul_backward(gpt_stream *s, void *dinp, float *dw, float *dbias,
                           const void *dout, const void *inp, const void *w, int N, int C,
                           int OC, gpt_grad_write gw)
{
    push_matmul_backward(s, dinp, dw, dbias, dout, inp, w, NULL, N, C, OC, gw);
}

void cpu_q_attention_forward(gpt_stream *s, void *out, float *lse, const void *qkv, int B,
                             int T, int C, int NH)
{
    cpu_task t = {.kind = TASK_ATTENTION_FORWARD, .a.attention_fwd = {.out = out, .lse = lse,
        .qkv = qkv, .B = B, .T = T, .C = C, .NH = NH}};
    stream_push_op(s, &t);
}

void cpu_q_attention_backward(gpt_stream *s, void *dqkv, float *delta, const void *dout,
                              const void *qkv, const void *out, const float *lse, int B, int T,
                              int C, int NH)
{
    cpu_task t = {.kind = TASK_ATTENTION_BACKWARD, .a.attention_bwd = {.dqkv = dqkv, .delta = delta,
        .dout = dout, .qkv = qkv, .out = out, .lse = lse, .B = B, .T = T, .C = C, .NH = NH}};
    stream_push_op(s, &t);
}

void cpu_q_gelu_forward(gpt_stream *s, void *out, const void *inp, size_t n)
{
    cpu_task t = {.kind = TASK_GELU_FORWARD, .a.gelu_fwd = {.out = out, .inp = inp, .n = n}};
    stream_push_op(s, &t);
}

void cpu_q_gelu_backward(gpt_stream *s, void *dinp, const void *inp, const void *dout,
                         size_t n)
{
    cpu_task t = {.kind = TASK_GELU_BACKWARD, .a.gelu_bwd = {.dinp = dinp, .inp = inp, .dout = dout,
        .n = n}};
    stream_push_op(s, &t);
}

void cpu_q_residual_forward(gpt_stream *s, void *out, const void *a, const void *b,
                            size_t n)
{
    cpu_task t = {.kind = TASK_RESIDUAL_FORWARD, .a.residual_fwd = {.out = out, .a = a, .b = b,
        .n = n}};
    stream_push_op(s, &t);
}

void cpu_q_residual_backward(gpt_stream *s, void *da, void *db, const void *dout, size_t n)
{
    cpu_task t = {.kind = TASK_RESIDUAL_BACKWARD, .a.residual_bwd = {.da = da, .db = db,
        .dout = dout, .n = n}};
    stream_push_op(s, &t);
}

void cpu_q_crossentropy_forward_backward(gpt_stream *s, float *losses, void *logits,
                                         const int32_t *targets, float dloss, int N, int V,
                                         int Vp)
{
    cpu_task t = {.kind = TASK_CROSSENTROPY, .a.crossentropy = {.losses = losses, .logits = logits,
        .targets = targets, .dloss = dloss, .N = N, .V = V, .Vp = Vp}};
    stream_push_op(s, &t);
}

void cpu_q_crossentropy_stats(gpt_stream *s, float *stats, const void *logits, const int32_t *targets,
                              int N, int V, int Vp, int lo)
{
    cpu_task t = {.kind = TASK_CROSSENTROPY_STATS, .a.crossentropy_par = {.stats = stats,
        .logits = (void *)logits, .targets = targets, .N = N, .V = V, .Vp = Vp, .lo = lo}};
    stream_push_op(s, &t);
}

void cpu_q_crossentropy_parallel(gpt_stream *s, float *losses, void *logits, const int32_t *targets,
                                 const float *stats, int parts, float dloss, int N, int V, int Vp,
                                 int lo)
{
    cpu_task t = {.kind = TASK_CROSSENTROPY_PARALLEL, .a.crossentropy_par = {.losses = losses,
        .stats = (float *)stats, .logits = logits, .targets = targets, .dloss = dloss, .parts = parts,
        .N = N, .V = V, .Vp = Vp, .lo = lo}};
    stream_push_op(s, &t);
}

void cpu_q_adamw_update(gpt_stream *s, float *param, void *param_act, const float *grad,
                        float *m, float *v, size_t n, float lr, float beta1, float beta2,
                        float eps, float weight_decay, int t_step, float grad_scale,
                        const gpt_checksum_acc *acc)
{
    cpu_task t = {.kind = TASK_ADAMW_UPDATE};
    t.a.adamw.param = param;
    t.a.adamw.param_act = param_act;
    t.a.adamw.grad = grad;
    t.a.adamw.m = m;
    t.a.adamw.v = v;
    t.a.adamw.n = n;
    t.a.adamw.lr = lr;
    t.a.adamw.beta1 = beta1;
    t.a.adamw.beta2 = beta2;
    t.a.adamw.eps = eps;
    t.a.adamw.weight_decay = weight_decay;
    t.a.adamw.t = t_step;
    t.a.adamw.grad_scale = grad_scale;
    t.a.adamw.has_acc = acc != NULL;
    if (acc) t.a.adamw.acc = *acc;
    stream_push_op(s, &t);
}

void cpu_q_checksum_fold(gpt_stream *s, uint64_t *sums, size_t total, size_t chunk_floats)
{
    cpu_task t = {.kind = TASK_CHECKSUM_FOLD};
    assert(chunk_floats > 0);
    t.a.checksum_fold.sums = sums;
    t.a.checksum_fold.total = total;
    t.a.checksum_fold.chunk_floats = chunk_floats;
    stream_push_op(s, &t);
}

void cpu_q_norm_squared(gpt_stream *s, float *out, const float *x, size_t n)
{
    cpu_task t = {.kind = TASK_NORM_SQUARED, .a.norm_squared = {.out = out, .x = x, .n = n}};
    stream_push_op(s, &t);
}

void cpu_q_checksum_chunks(gpt_stream *s, uint64_t *sums, const gpt_float_span *parts, int nparts,
                           size_t chunk_floats)
{
    cpu_task t = {.kind = TASK_CHECKSUM_CHUNKS};
    assert(nparts >= 1 && nparts <= GPT_CHECKSUM_PARTS && chunk_floats > 0);
    t.a.checksum.sums = sums;
    for (int k = 0; k < nparts; k++) t.a.checksum.parts[k] = parts[k];
    t.a.checksum.nparts = nparts;
    t.a.checksum.chunk_floats = chunk_floats;
    stream_push_op(s, &t);
}

void cpu_q_add_f32(gpt_stream *s, float *out, const float *a, const float *b, size_t n)
{
    cpu_task t = {.kind = TASK_ADD_F32, .a.residual_fwd = {.out = out, .a = a, .b = b, .n = n}};
    stream_push_op(s, &t);
}

void cpu_q_act_to_f32(gpt_stream *s, float *dst, const void *src, size_t n)
{
    cpu_task t = {.kind = TASK_ACT_TO_F32, .a.act_to_f32 = {.dst = dst, .src = src, .n = n}};
    stream_push_op(s, &t);
}

void cpu_q_params_to_act(gpt_stream *s, void *dst, const float *src, size_t n)
{
    cpu_task t = {.kind = TASK_PARAMS_TO_ACT, .a.params_to_act = {.dst = dst, .src = src, .n = n}};
    stream_push_op(s, &t);
}
