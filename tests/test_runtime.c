/*
 * test_runtime.c — the runtime under the engines: the CPU backend's streams (worker threads)
 * and events, and the CPU Adam pool (engines/runtime/cpu_adam.h).
 *
 * Streams and events (each test fails if the ordering it names were missing):
 *   - a wait on another stream's event orders a copy after long work on that stream, and
 *     the same copy without the wait sees the old value (so the test has teeth);
 *   - with a held event (gpt_cpu_event_hold) as a gate: a stream without a wait runs ahead,
 *     a stream with a wait stays blocked until the gate opens;
 *   - re-recording moves the marker: waits see the latest record only;
 *   - a never-recorded event is complete; event_sync blocks the host until the marker ran;
 *   - elapsed_ms is >= 0, ordered, and covers a known gap; it refuses pending events;
 *   - stream_sync drains more tasks than the queue holds; many streams; destroy drains
 *     queued work; an event destroyed while its record is pending is safe.
 * CPU Adam: bit-identical to gpt_block_adamw for every ISA this machine has and several
 * thread counts; jobs wait for their `after` event; tickets; destroy with queued jobs.
 * The watchdog: its auto limit; it fires once naming where; progress keeps it quiet; it
 * names a rank whose heartbeat stopped, and kills a stopped rank of this machine only where
 * the launcher would wait on it (Open MPI's, not Hydra's).
 * The GPU clock monitor (engines/runtime/gpu_clock.h), on a scripted source: its counts,
 * medians and reason shares; one sample even when stopped at once; no second start; without
 * NVML it says so.
 *
 * A test that would otherwise hang (a stream blocked on a gate the code never opens) is
 * turned into a failure by a watchdog that opens the gate after a few seconds.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../engines/runtime/collectives.h"
#include "../engines/runtime/comm.h"
#include "../engines/runtime/cpu_adam.h"
#include "../engines/runtime/gpu_clock.h"
#include "../engines/runtime/predict.h"
#include "../engines/runtime/spans.h"
#include "../engines/runtime/timer.h"
#include "../engines/runtime/watchdog.h" /* (tested at the end; the gate_guard above is this file's own) */
#include "../kernels/gpt.h"
#include "../kernels/model.h"
#include "../kernels/rng.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- helpers ----------------------------------------------------------------------------- */

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static gpt_stream *stream_new(gpt_backend *be)
{
    gpt_stream *s = NULL;
    assert_int_equal(be->ops->stream_create(be, &s), GPT_OK);
    return s;
}

static gpt_event *event_new(gpt_backend *be)
{
    gpt_event *e = NULL;
    assert_int_equal(gpt_event_create(be, &e), GPT_OK);
    return e;
}

static float *floats_new(size_t n, float value)
{
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < n; i++) x[i] = value;
    return x;
}

/* Work that keeps a stream busy for a while (~0.1-0.5 s here): matmuls over (n,n) tiles. */
typedef struct long_work {
    float *a, *w, *out;
    int n, reps;
} long_work;

static long_work long_work_new(void)
{
    long_work lw = {.n = 256, .reps = 40};
    const size_t nn = (size_t)lw.n * lw.n;
    lw.a = floats_new(nn, 0.5f);
    lw.w = floats_new(nn, 0.25f);
    lw.out = floats_new(nn, 0.0f);
    return lw;
}

static void long_work_issue(const long_work *lw, gpt_stream *s)
{
    for (int r = 0; r < lw->reps; r++)
        gpt_matmul_forward(s, lw->out, lw->a, lw->w, NULL, lw->n, lw->n, lw->n);
}

static void long_work_free(long_work *lw)
{
    free(lw->a);
    free(lw->w);
    free(lw->out);
}

/* Opens a gate (a held event) after a timeout unless stopped first, so that a test whose
 * stream never gets released fails instead of hanging. */
typedef struct gate_guard {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t stop;
    int stopped, fired;
    gpt_event *gate;
} gate_guard;

static void *gate_guard_main(void *arg)
{
    gate_guard *w = arg;
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 10;
    pthread_mutex_lock(&w->lock);
    int rc = 0;
    while (!w->stopped && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&w->stop, &w->lock, &deadline);
    if (!w->stopped) {
        w->fired = 1;
        fprintf(stderr, "watchdog: the gate was never opened by the test; opening it\n");
        gpt_cpu_event_release(w->gate);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

static void gate_guard_start(gate_guard *w, gpt_event *gate)
{
    memset(w, 0, sizeof *w);
    w->gate = gate;
    assert_int_equal(pthread_mutex_init(&w->lock, NULL), 0);
    assert_int_equal(pthread_cond_init(&w->stop, NULL), 0);
    assert_int_equal(pthread_create(&w->thread, NULL, gate_guard_main, w), 0);
}

/* Returns whether the watchdog had to open the gate (a failure of the code under test). */
static int gate_guard_stop(gate_guard *w)
{
    pthread_mutex_lock(&w->lock);
    w->stopped = 1;
    pthread_cond_signal(&w->stop);
    pthread_mutex_unlock(&w->lock);
    assert_int_equal(pthread_join(w->thread, NULL), 0);
    pthread_cond_destroy(&w->stop);
    pthread_mutex_destroy(&w->lock);
    return w->fired;
}

/* ---- streams and events ------------------------------------------------------------------- */

static void test_wait_orders_copy_after_long_work(void **state)
{
    (void)state;
    gpt_backend *be;
    assert_int_equal(gpt_cpu_backend_create(&be, 2), GPT_OK);
    gpt_stream *a = stream_new(be), *b = stream_new(be), *c = stream_new(be);
    gpt_event *done_a = event_new(be);
    long_work lw = long_work_new();
    float *flag = floats_new(1, 1.0f); /* the old value */
    const float final_value = 2.0f;
    float seen_with_wait = 0.0f, seen_without_wait = 0.0f;

    long_work_issue(&lw, a);
    assert_int_equal(gpt_memcpy_h2d(a, flag, &final_value, sizeof(float)), GPT_OK);
    assert_int_equal(gpt_event_record(done_a, a), GPT_OK);
    /* c reads without ordering: it must get there long before a's work is done, which is
     * what makes the ordered read on b mean something */
    assert_int_equal(gpt_memcpy_d2h(c, &seen_without_wait, flag, sizeof(float)), GPT_OK);
    assert_int_equal(gpt_stream_wait_event(b, done_a), GPT_OK);
    assert_int_equal(gpt_memcpy_d2h(b, &seen_with_wait, flag, sizeof(float)), GPT_OK);
    assert_int_equal(gpt_stream_sync(b), GPT_OK);
    assert_int_equal(gpt_stream_sync(c), GPT_OK);
    assert_true(seen_with_wait == final_value);
    assert_true(seen_without_wait == 1.0f);
    assert_int_equal(gpt_stream_sync(a), GPT_OK);

    gpt_event_destroy(done_a);
    be->ops->stream_destroy(a);
    be->ops->stream_destroy(b);
    be->ops->stream_destroy(c);
    long_work_free(&lw);
    free(flag);
    gpt_cpu_backend_destroy(be);
}

static void test_gate_blocks_only_the_waiting_stream(void **state)
{
    (void)state;
    gpt_backend *be;
    assert_int_equal(gpt_cpu_backend_create(&be, 1), GPT_OK);
    gpt_stream *a = stream_new(be), *b = stream_new(be), *c = stream_new(be);
    gpt_event *gate = event_new(be), *written = event_new(be);
    assert_int_equal(gpt_cpu_event_hold(gate), GPT_OK);
    assert_int_equal(gpt_cpu_event_hold(gate), GPT_ERR_INVALID); /* one hold at a time */
    gate_guard wd;
    gate_guard_start(&wd, gate);

    float *flag = floats_new(1, 1.0f);
    const float final_value = 3.0f;
    float ran_ahead = 0.0f, ordered = 0.0f;
    /* a: blocked at the gate, then writes; issuing all this returns at once */
    assert_int_equal(gpt_stream_wait_event(a, gate), GPT_OK);
    assert_int_equal(gpt_memcpy_h2d(a, flag, &final_value, sizeof(float)), GPT_OK);
    assert_int_equal(gpt_event_record(written, a), GPT_OK);
    /* c: no wait, so it completes while a is still blocked */
    assert_int_equal(gpt_memcpy_d2h(c, &ran_ahead, flag, sizeof(float)), GPT_OK);
    assert_int_equal(gpt_stream_sync(c), GPT_OK);
    assert_true(ran_ahead == 1.0f);
    /* b: waits for a's write; it must still be waiting after a while */
    assert_int_equal(gpt_stream_wait_event(b, written), GPT_OK);
    assert_int_equal(gpt_memcpy_d2h(b, &ordered, flag, sizeof(float)), GPT_OK);
    sleep_ms(50);
    assert_true(*(volatile float *)&ordered == 0.0f);
    assert_true(*(volatile float *)flag == 1.0f);

    assert_int_equal(gpt_cpu_event_release(gate), GPT_OK);
    assert_int_equal(gpt_stream_sync(b), GPT_OK);
    assert_true(ordered == final_value);
    assert_int_equal(gpt_cpu_event_release(gate), GPT_ERR_INVALID); /* no hold left */
    assert_false(gate_guard_stop(&wd));

    gpt_event_destroy(gate);
    gpt_event_destroy(written);
    be->ops->stream_destroy(a);
    be->ops->stream_destroy(b);
    be->ops->stream_destroy(c);
    free(flag);
    gpt_cpu_backend_destroy(be);
}

static void test_rerecord_moves_the_marker(void **state)
{
    (void)state;
    gpt_backend *be;
    assert_int_equal(gpt_cpu_backend_create(&be, 1), GPT_OK);
    gpt_stream *blocked = stream_new(be), *free_run = stream_new(be), *b = stream_new(be);
    gpt_event *gate = event_new(be), *e = event_new(be);
    assert_int_equal(gpt_cpu_event_hold(gate), GPT_OK);
    gate_guard wd;
    gate_guard_start(&wd, gate);
    float *x = floats_new(1, 1.0f);
    const float two = 2.0f;
    float seen = 0.0f;

    /* 1. e recorded where it completes, then re-recorded behind the gate: a wait issued
     *    now must wait for the second record, not be satisfied by the first. */
    assert_int_equal(gpt_event_record(e, free_run), GPT_OK);
    assert_int_equal(gpt_stream_sync(free_run), GPT_OK);
    assert_int_equal(gpt_stream_wait_event(blocked, gate), GPT_OK);
    assert_int_equal(gpt_memcpy_h2d(blocked, x, &two, sizeof(float)), GPT_OK);
    assert_int_equal(gpt_event_record(e, blocked), GPT_OK);
    float ms = 0;
    assert_int_equal(gpt_event_elapsed_ms(&ms, e, e), GPT_ERR_INVALID); /* latest is pending */
    assert_int_equal(gpt_stream_wait_event(b, e), GPT_OK);
    assert_int_equal(gpt_memcpy_d2h(b, &seen, x, sizeof(float)), GPT_OK);
    sleep_ms(30);
    assert_true(*(volatile float *)&seen == 0.0f);

    /* 2. re-recorded again where it completes at once: a wait captured now (and the host's
     *    event_sync) sees only this newest record, although the one behind the gate is
     *    still pending — the marker moved, as with cudaEventRecord. */
    assert_int_equal(gpt_event_record(e, free_run), GPT_OK);
    assert_int_equal(gpt_event_sync(e), GPT_OK);
    float seen_after_move = 0.0f;
    gpt_stream *d = stream_new(be);
    assert_int_equal(gpt_stream_wait_event(d, e), GPT_OK);
    assert_int_equal(gpt_memcpy_d2h(d, &seen_after_move, x, sizeof(float)), GPT_OK);
    assert_int_equal(gpt_stream_sync(d), GPT_OK);
    assert_true(seen_after_move == 1.0f); /* ran without waiting for the gate */
    assert_true(*(volatile float *)&seen == 0.0f); /* b still waits for its own record */

    assert_int_equal(gpt_cpu_event_release(gate), GPT_OK);
    assert_int_equal(gpt_stream_sync(b), GPT_OK);
    assert_true(seen == 2.0f);
    assert_false(gate_guard_stop(&wd));

    be->ops->stream_destroy(blocked);
    be->ops->stream_destroy(free_run);
    be->ops->stream_destroy(b);
    be->ops->stream_destroy(d);
    gpt_event_destroy(gate);
    gpt_event_destroy(e);
    free(x);
    gpt_cpu_backend_destroy(be);
}

static void test_never_recorded_event_is_complete(void **state)
{
    (void)state;
    gpt_backend *be;
    assert_int_equal(gpt_cpu_backend_create(&be, 1), GPT_OK);
    gpt_stream *s = stream_new(be);
    gpt_event *e = event_new(be), *other = event_new(be);
    assert_int_equal(gpt_event_sync(e), GPT_OK);
    assert_int_equal(gpt_stream_wait_event(s, e), GPT_OK);
    float *x = floats_new(1, 0.0f);
    const float one = 1.0f;
    assert_int_equal(gpt_memcpy_h2d(s, x, &one, sizeof(float)), GPT_OK);
    assert_int_equal(gpt_stream_sync(s), GPT_OK);
    assert_true(*x == 1.0f);
    float ms = 0;
    assert_int_equal(gpt_event_record(other, s), GPT_OK);
    assert_int_equal(gpt_stream_sync(s), GPT_OK);
    assert_int_equal(gpt_event_elapsed_ms(&ms, e, other), GPT_ERR_INVALID); /* e: no time */
    be->ops->stream_destroy(s);
    gpt_event_destroy(e);
    gpt_event_destroy(other);
    free(x);
    gpt_cpu_backend_destroy(be);
}

static void test_event_sync_blocks_host_until_marker(void **state)
{
    (void)state;
    gpt_backend *be;
    assert_int_equal(gpt_cpu_backend_create(&be, 2), GPT_OK);
    gpt_stream *s = stream_new(be);
    gpt_event *e = event_new(be);
    long_work lw = long_work_new();
    float *x = floats_new(1, 1.0f);
    const float final_value = 5.0f;
    long_work_issue(&lw, s);
    assert_int_equal(gpt_memcpy_h2d(s, x, &final_value, sizeof(float)), GPT_OK);
    assert_int_equal(gpt_event_record(e, s), GPT_OK);
    assert_true(*(volatile float *)x == 1.0f); /* issuing returned before the work ran */
    assert_int_equal(gpt_event_sync(e), GPT_OK);
    assert_true(*x == final_value);
    be->ops->stream_destroy(s);
    gpt_event_destroy(e);
    long_work_free(&lw);
    free(x);
    gpt_cpu_backend_destroy(be);
}

static void test_elapsed_ms(void **state)
{
    (void)state;
    gpt_backend *be;
    assert_int_equal(gpt_cpu_backend_create(&be, 2), GPT_OK);
    gpt_stream *s = stream_new(be);
    gpt_event *e0 = event_new(be), *e1 = event_new(be), *e2 = event_new(be);
    gpt_event *gate = event_new(be);
    long_work lw = long_work_new();

    assert_int_equal(gpt_cpu_event_hold(gate), GPT_OK);
    gate_guard wd;
    gate_guard_start(&wd, gate);
    assert_int_equal(gpt_event_record(e0, s), GPT_OK);
    assert_int_equal(gpt_stream_wait_event(s, gate), GPT_OK);
    assert_int_equal(gpt_event_record(e1, s), GPT_OK);
    long_work_issue(&lw, s);
    assert_int_equal(gpt_event_record(e2, s), GPT_OK);
    /* e0 has completed before the gap starts, e1 after it ends: elapsed covers it */
    assert_int_equal(gpt_event_sync(e0), GPT_OK);
    sleep_ms(40);
    assert_int_equal(gpt_cpu_event_release(gate), GPT_OK);
    assert_int_equal(gpt_stream_sync(s), GPT_OK);
    assert_false(gate_guard_stop(&wd));

    float ms01 = -1, ms02 = -1, ms12 = -1, ms00 = -1;
    assert_int_equal(gpt_event_elapsed_ms(&ms01, e0, e1), GPT_OK);
    assert_int_equal(gpt_event_elapsed_ms(&ms02, e0, e2), GPT_OK);
    assert_int_equal(gpt_event_elapsed_ms(&ms12, e1, e2), GPT_OK);
    assert_int_equal(gpt_event_elapsed_ms(&ms00, e0, e0), GPT_OK);
    printf("elapsed: gap %.2f ms, long work %.2f ms, total %.2f ms\n", ms01, ms12, ms02);
    assert_true(ms00 == 0.0f);
    assert_true(ms01 >= 39.0f);
    assert_true(ms12 > 0.0f);
    assert_true(ms02 >= ms01 && ms02 >= ms12);

    be->ops->stream_destroy(s);
    gpt_event_destroy(e0);
    gpt_event_destroy(e1);
    gpt_event_destroy(e2);
    gpt_event_destroy(gate);
    long_work_free(&lw);
    gpt_cpu_backend_destroy(be);
}

/* Counting with one residual add per task: out = out + one, so the count tells how many
 * tasks ran, in order (each reads the previous one's result). */
static void count_issue(gpt_stream *s, float *counter, const float *one, int tasks)
{
    for (int i = 0; i < tasks; i++)
        gpt_residual_forward(s, counter, counter, one, 1);
}

static void test_stream_sync_drains_more_than_a_queue(void **state)
{
    (void)state;
    gpt_backend *be;
    assert_int_equal(gpt_cpu_backend_create(&be, 1), GPT_OK);
    gpt_stream *s = stream_new(be);
    float *counter = floats_new(1, 0.0f), *one = floats_new(1, 1.0f);
    const int tasks = 5000; /* several times the queue's capacity: the issuer must block */
    count_issue(s, counter, one, tasks);
    assert_int_equal(gpt_stream_sync(s), GPT_OK);
    assert_true(*counter == (float)tasks);
    /* sync on an idle stream returns at once */
    assert_int_equal(gpt_stream_sync(s), GPT_OK);
    be->ops->stream_destroy(s);
    free(counter);
    free(one);
    gpt_cpu_backend_destroy(be);
}

static void test_many_streams_and_destroy_with_queued_work(void **state)
{
    (void)state;
    gpt_backend *be;
    assert_int_equal(gpt_cpu_backend_create(&be, 1), GPT_OK);
    enum { STREAMS = 12, TASKS = 700 };
    gpt_stream *s[STREAMS];
    float *counter[STREAMS];
    float *one = floats_new(1, 1.0f);
    gpt_event *gate = event_new(be), *pending = event_new(be);
    assert_int_equal(gpt_cpu_event_hold(gate), GPT_OK);
    gate_guard wd;
    gate_guard_start(&wd, gate);
    for (int i = 0; i < STREAMS; i++) {
        s[i] = stream_new(be);
        counter[i] = floats_new(1, 0.0f);
    }
    /* stream 0 is blocked behind the gate and records `pending` after its work; the others
     * chain on it in a ring of waits, each on the previous stream's event */
    gpt_event *done[STREAMS];
    for (int i = 0; i < STREAMS; i++) {
        done[i] = event_new(be);
        if (i == 0)
            assert_int_equal(gpt_stream_wait_event(s[0], gate), GPT_OK);
        else
            assert_int_equal(gpt_stream_wait_event(s[i], done[i - 1]), GPT_OK);
        count_issue(s[i], counter[i], one, TASKS);
        assert_int_equal(gpt_event_record(done[i], s[i]), GPT_OK);
    }
    assert_int_equal(gpt_event_record(pending, s[STREAMS - 1]), GPT_OK);
    /* An event destroyed while its record is still queued: the marker keeps it alive. */
    gpt_event_destroy(pending);
    for (int i = 0; i < STREAMS; i++)
        assert_true(*(volatile float *)counter[i] == 0.0f); /* all held up by the gate */
    assert_int_equal(gpt_cpu_event_release(gate), GPT_OK);
    /* Destroy without syncing, last stream first (it waits on the others): destroy must
     * drain every queue before it returns. */
    for (int i = STREAMS - 1; i >= 0; i--)
        be->ops->stream_destroy(s[i]);
    for (int i = 0; i < STREAMS; i++) {
        assert_true(*counter[i] == (float)TASKS);
        free(counter[i]);
        gpt_event_destroy(done[i]);
    }
    assert_false(gate_guard_stop(&wd));
    gpt_event_destroy(gate);
    free(one);
    gpt_cpu_backend_destroy(be);
}

/* ---- CPU Adam --------------------------------------------------------------------------- */

static float *random_floats(size_t n, uint64_t seed, float scale, int positive)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    assert_non_null(x);
    rng r = rng_for(seed, 3, 5);
    for (size_t i = 0; i < n; i++) {
        float v = (float)(scale * rng_normal(&r));
        x[i] = positive ? fabsf(v) : v;
    }
    return x;
}

/* One block's state: params, grads, m, v, and a copy of each for the reference. */
typedef struct adam_block {
    size_t n, n_decay;
    float *p, *g, *m, *v;
    float *rp, *rm, *rv;
} adam_block;

static adam_block adam_block_new(size_t n, size_t n_decay, uint64_t seed)
{
    adam_block b = {.n = n, .n_decay = n_decay};
    b.p = random_floats(n, seed, 0.1f, 0);
    b.g = random_floats(n, seed + 1, 0.01f, 0);
    b.m = random_floats(n, seed + 2, 0.001f, 0);
    b.v = random_floats(n, seed + 3, 1e-5f, 1);
    /* a few special values: zeros, a huge gradient, a tiny second moment */
    if (n > 7) {
        b.g[3] = 0.0f;
        b.m[3] = 0.0f;
        b.v[3] = 0.0f;
        b.g[5] = 1e4f;
        b.v[7] = 1e-30f;
    }
    b.rp = malloc((n ? n : 1) * sizeof(float));
    b.rm = malloc((n ? n : 1) * sizeof(float));
    b.rv = malloc((n ? n : 1) * sizeof(float));
    assert_true(b.rp && b.rm && b.rv);
    memcpy(b.rp, b.p, n * sizeof(float));
    memcpy(b.rm, b.m, n * sizeof(float));
    memcpy(b.rv, b.v, n * sizeof(float));
    return b;
}

static void adam_block_free(adam_block *b)
{
    free(b->p); free(b->g); free(b->m); free(b->v);
    free(b->rp); free(b->rm); free(b->rv);
}

static cpu_adam_job adam_job_of(adam_block *b, const gpt_optim *o, float lr, int t,
                                float grad_scale)
{
    cpu_adam_job j = {.params = b->p, .grads = b->g, .m = b->m, .v = b->v, .n = b->n,
                      .n_decay = b->n_decay, .optim = *o, .lr = lr, .t = t,
                      .grad_scale = grad_scale, .after = NULL};
    return j;
}

/* The reference: gpt_block_adamw on the CPU backend, on the reference copies. */
static void adam_reference(gpt_stream *s, adam_block *b, const gpt_optim *o, float lr, int t,
                           float grad_scale)
{
    gpt_block_adamw(s, b->rp, b->g, b->rm, b->rv, b->n, b->n_decay, o, lr, t, grad_scale);
    assert_int_equal(gpt_stream_sync(s), GPT_OK);
}

static void adam_assert_identical(const adam_block *b, const char *what)
{
    if (memcmp(b->p, b->rp, b->n * sizeof(float)) != 0 ||
        memcmp(b->m, b->rm, b->n * sizeof(float)) != 0 ||
        memcmp(b->v, b->rv, b->n * sizeof(float)) != 0) {
        size_t i = 0;
        while (i < b->n && b->p[i] == b->rp[i] && b->m[i] == b->rm[i] && b->v[i] == b->rv[i])
            i++;
        fail_msg("%s: first difference at %zu of %zu: p %.9g vs %.9g, m %.9g vs %.9g, v %.9g "
                 "vs %.9g", what, i, b->n, b->p[i], b->rp[i], b->m[i], b->rm[i], b->v[i],
                 b->rv[i]);
    }
}

static int isa_supported(const char *isa)
{
    __builtin_cpu_init();
    if (strcmp(isa, "avx512") == 0) return __builtin_cpu_supports("avx512f");
    if (strcmp(isa, "avx2") == 0) return __builtin_cpu_supports("avx2");
    return 1;
}

static uint32_t float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* w is p rounded as gpt_f32_to_bf16 rounds, element for element. */
static void assert_bf16_copy(const float *p, const uint16_t *w, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (w[i] != gpt_f32_to_bf16(p[i]))
            fail_msg("%s: bf16 copy of element %zu (%a, bits 0x%08x) is 0x%04x, not 0x%04x", what, i,
                     (double)p[i], (unsigned)float_bits(p[i]), w[i], gpt_f32_to_bf16(p[i]));
}

/* The bf16 copy the SIMD paths write, on the values where rounding can go wrong: ties to
 * even and odd, values that round up into the next exponent and to infinity, infinities,
 * NaNs of both signs with payloads, denormals, zeros.  lr = 0 and no decay leave every
 * finite parameter as it was, so the ties reach the rounding as ties; each special value
 * sits at every lane position of a vector. */
static void test_cpu_adam_bf16_rounding(void **state)
{
    (void)state;
    static const uint32_t specials[] = {
        0x3f808000u, 0x3f818000u, 0xbf808000u, 0xbf818000u, /* ties: even stays, odd goes up */
        0x3f807fffu, 0x3f808001u, 0x3fffffffu, 0x7f7fffffu, /* below/above a tie, carry, to inf */
        0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc12345u, /* infinities, NaNs */
        0x7f800001u, 0x7fffffffu, 0xffffffffu, /* sNaN; NaNs that rounding would carry out of */
        0x00000001u, 0x80008000u, 0x00000000u, 0x80000000u, /* denormals, zeros */
    };
    const size_t nspec = sizeof specials / sizeof *specials, n = 16 * nspec + 7; /* (a tail) */
    const char *isas[] = {"scalar", "avx2", "avx512"};
    gpt_optim o = gpt_optim_default();
    o.weight_decay = 0.0f;
    int tested = 0;
    for (size_t k = 0; k < sizeof isas / sizeof *isas; k++) {
        if (!isa_supported(isas[k]))
            continue;
        cpu_adam *pool;
        assert_int_equal(cpu_adam_create_isa(&pool, 2, isas[k]), GPT_OK);
        adam_block b = adam_block_new(n, 0, 7);
        for (size_t i = 0; i < n; i++) {
            const uint32_t bits = specials[(i + i / nspec) % nspec]; /* (shifts lane every round) */
            memcpy(&b.p[i], &bits, sizeof bits);
        }
        memcpy(b.rp, b.p, n * sizeof(float));
        uint16_t *w = malloc(n * sizeof *w);
        assert_non_null(w);
        cpu_adam_job j = adam_job_of(&b, &o, 0.0f, 1, 1.0f);
        j.params_bf16 = w;
        assert_int_equal(cpu_adam_run(pool, &j), GPT_OK);
        size_t ties_kept = 0;
        for (size_t i = 0; i < n; i++) {
            const uint32_t in = float_bits(b.rp[i]);
            if ((in & 0x7f800000u) != 0x7f800000u && (in & 0x7fffffffu) != 0) {
                /* (finite and not zero: unchanged by lr = 0; a zero may change sign) */
                assert_int_equal(float_bits(b.p[i]), in);
                ties_kept += (in & 0xffffu) == 0x8000u;
            }
        }
        assert_true(ties_kept >= 4 * 16);
        char what[64];
        snprintf(what, sizeof what, "bf16 rounding, isa %s", isas[k]);
        assert_bf16_copy(b.p, w, n, what);
        free(w);
        adam_block_free(&b);
        cpu_adam_destroy(pool);
        tested++;
    }
    assert_true(tested >= 2);
}

static void test_cpu_adam_bit_identical(void **state)
{
    (void)state;
    gpt_backend *be;
    assert_int_equal(gpt_cpu_backend_create(&be, 2), GPT_OK);
    gpt_stream *s = stream_new(be);
    gpt_optim o = gpt_optim_default();
    o.weight_decay = 0.1; /* large enough that the decay term shows in every bit */
    const char *isas[] = {"scalar", "avx2", "avx512"};
    const int threads[] = {1, 3, 4};
    /* odd lengths, n_decay at unaligned boundaries (and the two extremes) */
    const size_t sizes[][2] = {{1, 0}, {1, 1}, {17, 5}, {1000, 999}, {4099, 1237},
                               {100003, 77777}, {33, 33}, {64, 0}};
    int tested = 0;
    for (size_t k = 0; k < sizeof isas / sizeof *isas; k++) {
        if (!isa_supported(isas[k])) {
            printf("cpu_adam: %s not supported here, skipped\n", isas[k]);
            continue;
        }
        for (size_t ti = 0; ti < sizeof threads / sizeof *threads; ti++) {
            cpu_adam *pool;
            assert_int_equal(cpu_adam_create_isa(&pool, threads[ti], isas[k]), GPT_OK);
            assert_string_equal(cpu_adam_isa(pool), isas[k]);
            for (size_t z = 0; z < sizeof sizes / sizeof *sizes; z++) {
                adam_block b = adam_block_new(sizes[z][0], sizes[z][1], 100 + z);
                for (int t = 1; t <= 3; t++) {
                    const float lr = 1e-3f * (float)t, scale = t == 2 ? 1.0f : 0.37f;
                    cpu_adam_job j = adam_job_of(&b, &o, lr, t, scale);
                    /* every run also writes the bf16 working copy (the bf16 engines' host
                     * Adam), in place and out of place */
                    uint16_t *w = malloc((b.n ? b.n : 1) * sizeof *w);
                    assert_non_null(w);
                    j.params_bf16 = w;
                    /* t = 2 out of place (into another copy of the state, the input left as
                     * it was), copied back afterwards */
                    const size_t bytes = (b.n ? b.n : 1) * sizeof(float);
                    float *out = t == 2 ? malloc(3 * bytes) : NULL, *kept = t == 2 ? malloc(3 * bytes) : NULL;
                    if (t == 2) {
                        assert_true(out && kept);
                        j.params_out = out, j.m_out = out + b.n, j.v_out = out + 2 * b.n;
                        memcpy(kept, b.p, b.n * sizeof(float));
                        memcpy(kept + b.n, b.m, b.n * sizeof(float));
                        memcpy(kept + 2 * b.n, b.v, b.n * sizeof(float));
                    }
                    if (t == 3) { /* also through the queue */
                        uint64_t ticket;
                        assert_int_equal(cpu_adam_submit(pool, &j, &ticket), GPT_OK);
                        assert_int_equal(cpu_adam_wait(pool, ticket), GPT_OK);
                    } else {
                        assert_int_equal(cpu_adam_run(pool, &j), GPT_OK);
                    }
                    if (t == 2) {
                        assert_memory_equal(kept, b.p, b.n * sizeof(float));
                        assert_memory_equal(kept + b.n, b.m, b.n * sizeof(float));
                        assert_memory_equal(kept + 2 * b.n, b.v, b.n * sizeof(float));
                        memcpy(b.p, out, b.n * sizeof(float));
                        memcpy(b.m, out + b.n, b.n * sizeof(float));
                        memcpy(b.v, out + 2 * b.n, b.n * sizeof(float));
                        free(out);
                        free(kept);
                    }
                    adam_reference(s, &b, &o, lr, t, scale);
                    char what[96];
                    snprintf(what, sizeof what, "isa %s threads %d n %zu n_decay %zu t %d",
                             isas[k], threads[ti], b.n, b.n_decay, t);
                    adam_assert_identical(&b, what);
                    assert_bf16_copy(b.p, w, b.n, what);
                    free(w);
                }
                adam_block_free(&b);
                tested++;
            }
            cpu_adam_destroy(pool);
        }
    }
    assert_true(tested >= 2 * 3 * 8); /* at least scalar and one SIMD path everywhere */
    be->ops->stream_destroy(s);
    gpt_cpu_backend_destroy(be);
}

/* The pool's default path is the widest the machine has. */
static void test_cpu_adam_picks_widest_isa(void **state)
{
    (void)state;
    /* (whatever the environment says: the variable that once chose the path is not read,
     * issue 48) */
    assert_int_equal(setenv("AEBENCH_CPU_ADAM_ISA", "scalar", 1), 0);
    cpu_adam *pool;
    assert_int_equal(cpu_adam_create(&pool, 0), GPT_OK);
    assert_int_equal(unsetenv("AEBENCH_CPU_ADAM_ISA"), 0);
    const char *want = isa_supported("avx512") ? "avx512"
                       : isa_supported("avx2") ? "avx2" : "scalar";
    assert_string_equal(cpu_adam_isa(pool), want);
    cpu_adam_destroy(pool);
}

/* A job whose grads are written by a stream behind a gate: the job must wait for the
 * event recorded after that write, and use the final grads. */
static void test_cpu_adam_waits_for_after_event(void **state)
{
    (void)state;
    gpt_backend *be;
    assert_int_equal(gpt_cpu_backend_create(&be, 2), GPT_OK);
    gpt_stream *copy = stream_new(be), *ref = stream_new(be);
    gpt_event *gate = event_new(be), *grads_home = event_new(be);
    gpt_optim o = gpt_optim_default();
    const size_t n = 50001;
    adam_block b = adam_block_new(n, 30011, 7);
    float *final_grads = random_floats(n, 99, 0.02f, 0);
    long_work lw = long_work_new();

    cpu_adam *pool;
    assert_int_equal(cpu_adam_create(&pool, 2), GPT_OK);
    assert_int_equal(cpu_adam_take_busy_ms(pool) == 0.0, 1);
    assert_int_equal(gpt_cpu_event_hold(gate), GPT_OK);
    gate_guard wd;
    gate_guard_start(&wd, gate);
    /* the "d2h of the grads": long work, the gate, then the copy, then the event */
    long_work_issue(&lw, copy);
    assert_int_equal(gpt_stream_wait_event(copy, gate), GPT_OK);
    assert_int_equal(gpt_memcpy_d2h(copy, b.g, final_grads, n * sizeof(float)), GPT_OK);
    assert_int_equal(gpt_event_record(grads_home, copy), GPT_OK);

    cpu_adam_job j = adam_job_of(&b, &o, 2e-3f, 1, 0.5f);
    j.after = grads_home;
    uint64_t t1 = 0, t2 = 0;
    assert_int_equal(cpu_adam_submit(pool, &j, &t1), GPT_OK);
    /* a second job on another block, queued behind the first */
    adam_block b2 = adam_block_new(999, 500, 8);
    cpu_adam_job j2 = adam_job_of(&b2, &o, 2e-3f, 1, 0.5f);
    assert_int_equal(cpu_adam_submit(pool, &j2, &t2), GPT_OK);
    assert_true(t2 == t1 + 1);
    sleep_ms(30);
    /* nothing has run: the first job waits for the event, the second for the first; and
     * cpu_adam_done says so without waiting */
    assert_true(memcmp(b.p, b.rp, n * sizeof(float)) == 0);
    assert_true(memcmp(b2.p, b2.rp, b2.n * sizeof(float)) == 0);
    assert_false(cpu_adam_done(pool, t1));
    assert_false(cpu_adam_done(pool, t2));

    assert_int_equal(gpt_cpu_event_release(gate), GPT_OK);
    assert_int_equal(cpu_adam_wait(pool, t2), GPT_OK); /* covers t1 too */
    assert_true(cpu_adam_done(pool, t1) && cpu_adam_done(pool, t2));
    assert_false(cpu_adam_done(pool, t2 + 1)); /* never handed out */
    assert_false(gate_guard_stop(&wd));
    assert_true(cpu_adam_take_busy_ms(pool) > 0.0);
    /* the reference on the final grads (b.g now holds them) */
    adam_reference(ref, &b, &o, 2e-3f, 1, 0.5f);
    adam_assert_identical(&b, "after-event job");
    adam_reference(ref, &b2, &o, 2e-3f, 1, 0.5f);
    adam_assert_identical(&b2, "queued job");
    assert_int_equal(gpt_stream_sync(copy), GPT_OK);

    cpu_adam_destroy(pool);
    adam_block_free(&b);
    adam_block_free(&b2);
    free(final_grads);
    long_work_free(&lw);
    gpt_event_destroy(gate);
    gpt_event_destroy(grads_home);
    be->ops->stream_destroy(copy);
    be->ops->stream_destroy(ref);
    gpt_cpu_backend_destroy(be);
}

/* Jobs run in submission order: two jobs on the same block at steps 1 and 2 give the
 * result of step 1 then step 2; waiting on a ticket returns once it and all before it are
 * done; destroy with jobs still queued runs them all first. */
static void test_cpu_adam_order_tickets_destroy(void **state)
{
    (void)state;
    gpt_backend *be;
    assert_int_equal(gpt_cpu_backend_create(&be, 1), GPT_OK);
    gpt_stream *ref = stream_new(be);
    gpt_optim o = gpt_optim_default();
    gpt_event *gate = event_new(be);
    enum { BLOCKS = 6, STEPS = 4 };
    adam_block b[BLOCKS];
    for (int i = 0; i < BLOCKS; i++) b[i] = adam_block_new(3001 + 17 * i, 1001 + 3 * i, 50 + i);

    cpu_adam *pool;
    assert_int_equal(cpu_adam_create(&pool, 3), GPT_OK);
    assert_int_equal(cpu_adam_wait(pool, 0), GPT_OK); /* nothing submitted: returns */
    assert_int_equal(gpt_cpu_event_hold(gate), GPT_OK);
    gate_guard wd;
    gate_guard_start(&wd, gate);
    uint64_t last = 0;
    for (int t = 1; t <= STEPS; t++)
        for (int i = 0; i < BLOCKS; i++) {
            cpu_adam_job j = adam_job_of(&b[i], &o, 1e-3f, t, 1.0f);
            if (t == 1 && i == 0) j.after = gate; /* holds the whole queue back */
            uint64_t ticket;
            assert_int_equal(cpu_adam_submit(pool, &j, &ticket), GPT_OK);
            assert_true(ticket == last + 1);
            last = ticket;
        }
    sleep_ms(20);
    assert_true(memcmp(b[BLOCKS - 1].p, b[BLOCKS - 1].rp, b[BLOCKS - 1].n * sizeof(float)) == 0);
    assert_int_equal(gpt_cpu_event_release(gate), GPT_OK);
    /* the first step's tickets: every block has had step 1 (and maybe more) */
    assert_int_equal(cpu_adam_wait(pool, BLOCKS), GPT_OK);
    for (int i = 0; i < BLOCKS; i++)
        assert_true(memcmp(b[i].m, b[i].rm, b[i].n * sizeof(float)) != 0);
    /* destroy with the later steps possibly still queued: it runs them all */
    cpu_adam_destroy(pool);
    assert_false(gate_guard_stop(&wd));
    for (int t = 1; t <= STEPS; t++)
        for (int i = 0; i < BLOCKS; i++) adam_reference(ref, &b[i], &o, 1e-3f, t, 1.0f);
    for (int i = 0; i < BLOCKS; i++) {
        adam_assert_identical(&b[i], "ordered steps");
        adam_block_free(&b[i]);
    }
    gpt_event_destroy(gate);
    be->ops->stream_destroy(ref);
    gpt_cpu_backend_destroy(be);
}

/* ---- the watchdog (watchdog.h) ----------------------------------------------------------- */

typedef struct fired {
    pthread_mutex_t lock;
    int count;
    char line[2048];
} fired;

static void record_fire(void *ctx, const char *why)
{
    fired *f = ctx;
    pthread_mutex_lock(&f->lock);
    f->count++;
    snprintf(f->line, sizeof f->line, "%s", why);
    pthread_mutex_unlock(&f->lock);
}

static int fire_count(fired *f)
{
    pthread_mutex_lock(&f->lock);
    const int n = f->count;
    pthread_mutex_unlock(&f->lock);
    return n;
}

/* Rank 0 of `world`'s watchdog with a fixed timeout, its firings recorded in f. */
static watchdog *watched(fired *f, double timeout_s, int world, const char *heartbeat_dir)
{
    watchdog *w = NULL;
    const watchdog_config c = {.timeout_s = timeout_s, .rank = 0, .world = world, .heartbeat_dir = heartbeat_dir,
                               .fire = record_fire, .fire_ctx = f};
    assert_int_equal(watchdog_start(&w, &c), 0);
    assert_non_null(w);
    return w;
}

/* Waits (up to a minute: a busy machine) until the watchdog fired. */
static void wait_fired(fired *f)
{
    for (int i = 0; i < 6000 && fire_count(f) == 0; i++) sleep_ms(10);
    assert_int_equal(fire_count(f), 1);
}

/* auto: the set-up allowance until two steps are measured, then 10 median steps, at least
 * the floor; a fixed timeout is itself; 0 starts nothing. */
static void test_watchdog_auto_limit(void **state)
{
    (void)state;
    watchdog *w = NULL;
    watchdog_config c = {.timeout_s = -1, .rank = 0, .world = 1};
    assert_int_equal(watchdog_start(&w, &c), 0);
    assert_non_null(w);
    assert_true(watchdog_limit_s(w) == WATCHDOG_SETUP_S);
    watchdog_step(w, 1, 100.0);
    assert_true(watchdog_limit_s(w) == WATCHDOG_SETUP_S); /* one step: still setting up */
    watchdog_step(w, 2, 100.0);
    assert_true(watchdog_limit_s(w) == WATCHDOG_MIN_S); /* 10 x 0.1 s is under the floor */
    for (int i = 3; i < 8; i++) watchdog_step(w, i, 5000.0);
    assert_true(fabs(watchdog_limit_s(w) - WATCHDOG_STEPS * 5.0) < 1e-9); /* median 5 s */
    watchdog_step(w, 8, 1e6); /* one slow step does not move the median */
    assert_true(fabs(watchdog_limit_s(w) - WATCHDOG_STEPS * 5.0) < 1e-9);
    watchdog_stop(w);
    c.timeout_s = 7;
    assert_int_equal(watchdog_start(&w, &c), 0);
    assert_true(watchdog_limit_s(w) == 7);
    watchdog_stop(w);
    c.timeout_s = 0;
    assert_int_equal(watchdog_start(&w, &c), 0);
    assert_null(w);
    double t;
    assert_int_equal(watchdog_parse_timeout("auto", &t), 0);
    assert_true(t < 0);
    assert_int_equal(watchdog_parse_timeout("2.5", &t), 0);
    assert_true(t == 2.5);
    assert_int_equal(watchdog_parse_timeout("-1", &t), -1);
    assert_int_equal(watchdog_parse_timeout("soon", &t), -1);
}

/* No progress: it fires once, naming the phase, the iteration and what the rank waits on. */
static void test_watchdog_fires_naming_where(void **state)
{
    (void)state;
    fired f = {.lock = PTHREAD_MUTEX_INITIALIZER};
    watchdog *w = watched(&f, 0.5, 1, NULL);
    watchdog_at(w, 3, "backward");
    watchdog_waits_on(w, "an all-reduce of the gradients");
    wait_fired(&f);
    sleep_ms(600); /* (it does not fire again) */
    assert_int_equal(fire_count(&f), 1);
    if (!strstr(f.line, "in the backward of iteration 3, waiting on an all-reduce of the gradients"))
        fail_msg("the line does not say where: %s", f.line);
    watchdog_stop(w);
}

/* Progress, however slow the step, keeps it quiet. */
static void test_watchdog_quiet_while_progressing(void **state)
{
    (void)state;
    fired f = {.lock = PTHREAD_MUTEX_INITIALIZER};
    watchdog *w = watched(&f, 3, 1, NULL);
    for (int i = 0; i < 200; i++) { /* 4 s of phases 20 ms apart: longer than the limit */
        watchdog_at(w, 1, i % 2 ? "backward" : "forward");
        sleep_ms(20);
    }
    assert_int_equal(fire_count(&f), 0);
    watchdog_stop(w);
}

/* A heartbeat for rank 1 in dir, 100 s old, of pid on host, last in the backward of
 * iteration 7. */
static void write_stale_heartbeat(const char *dir, long pid, const char *host)
{
    char path[128], rec[512];
    snprintf(path, sizeof path, "%s/heartbeat-1", dir);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    memset(rec, ' ', sizeof rec);
    int n = snprintf(rec, sizeof rec, "beat %.3f progress %.3f pid %ld iteration 7 phase backward host %s waits -",
                     (double)now.tv_sec - 100, (double)now.tv_sec - 101, pid, host);
    rec[n] = ' ';
    rec[sizeof rec - 1] = '\n';
    FILE *hb = fopen(path, "w");
    assert_non_null(hb);
    assert_int_equal(fwrite(rec, 1, sizeof rec, hb), sizeof rec);
    assert_int_equal(fclose(hb), 0);
}

static void remove_beats(const char *dir)
{
    char path[128];
    snprintf(path, sizeof path, "%s/heartbeat-1", dir);
    unlink(path);
    assert_int_equal(rmdir(dir), 0);
}

/* With the ranks' heartbeats: a rank whose heartbeat stopped is named, with where it was. */
static void test_watchdog_names_the_stopped_rank(void **state)
{
    (void)state;
    char dir[] = "/tmp/aebench-test-beats.XXXXXX";
    assert_non_null(mkdtemp(dir));
    write_stale_heartbeat(dir, 4242, "node7");
    fired f = {.lock = PTHREAD_MUTEX_INITIALIZER};
    watchdog *w = watched(&f, 0.5, 2, dir);
    char path[128];
    snprintf(path, sizeof path, "%s/heartbeat-0", dir);
    assert_int_equal(access(path, F_OK), 0); /* its own heartbeat */
    watchdog_at(w, 8, "forward");
    wait_fired(&f);
    if (!strstr(f.line, "rank 1 (pid 4242 on node7) stopped") || !strstr(f.line, "in the backward of iteration 7") ||
        !strstr(f.line, "no progress for") || !strstr(f.line, "in the forward of iteration 8"))
        fail_msg("the line does not name the stopped rank: %s", f.line);
    watchdog_stop(w);
    assert_int_equal(access(path, F_OK), -1); /* its heartbeat removed */
    remove_beats(dir);
}

/* A stopped rank on this machine (a child of ours, SIGSTOPped) is killed when, and only when,
 * the launcher would wait on it (kill_stopped): under Hydra the launcher kills it, and a rank
 * we killed first would make the job's exit code its signal. */
static void test_watchdog_kills_a_stopped_rank_only_when_asked(void **state)
{
    (void)state;
    char host[128];
    watchdog_hostname(host, sizeof host);
    for (int kill_stopped = 0; kill_stopped <= 1; kill_stopped++) {
        const pid_t child = fork();
        assert_true(child >= 0);
        if (child == 0) {
            raise(SIGSTOP);
            _exit(0);
        }
        siginfo_t si = {0};
        assert_int_equal(waitid(P_PID, (id_t)child, &si, WSTOPPED | WNOWAIT), 0); /* it is stopped */
        char dir[] = "/tmp/aebench-test-beats.XXXXXX";
        assert_non_null(mkdtemp(dir));
        write_stale_heartbeat(dir, (long)child, host);
        fired f = {.lock = PTHREAD_MUTEX_INITIALIZER};
        watchdog *w = NULL;
        const watchdog_config c = {.timeout_s = 0.5, .rank = 0, .world = 2, .heartbeat_dir = dir,
                                   .kill_stopped = kill_stopped, .fire = record_fire, .fire_ctx = &f};
        assert_int_equal(watchdog_start(&w, &c), 0);
        watchdog_at(w, 8, "forward");
        wait_fired(&f);
        char named[256];
        snprintf(named, sizeof named, "rank 1 (pid %ld on %s) stopped", (long)child, host);
        if (!strstr(f.line, named)) fail_msg("the stopped rank is not named: %s", f.line);
        if (!strstr(f.line, "(killed:") != !kill_stopped) fail_msg("kill_stopped %d, but: %s", kill_stopped, f.line);
        watchdog_kill_stopped(w);
        int status = 0;
        if (kill_stopped) {
            assert_int_equal(waitpid(child, &status, 0), child);
            assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        } else {
            sleep_ms(100);
            assert_int_equal(waitpid(child, &status, WNOHANG), 0); /* still there, stopped */
            assert_int_equal(kill(child, SIGKILL), 0);
            assert_int_equal(waitpid(child, &status, 0), child);
        }
        watchdog_stop(w);
        remove_beats(dir);
    }
}

/* Which launchers wait on a stopped rank (Open MPI's: ours must kill it) and which kill the
 * job themselves (a PMI launcher: Hydra, Slurm), from the environment each sets. */
static void test_launcher_waits_on_stopped(void **state)
{
    (void)state;
    const char *vars[] = {"PMI_SIZE", "PMI_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
                          "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_RANK"};
    char *saved[6];
    for (int i = 0; i < 6; i++) {
        const char *v = getenv(vars[i]);
        saved[i] = v ? strdup(v) : NULL;
        unsetenv(vars[i]);
    }
    assert_int_equal(comm_launcher_waits_on_stopped(), 0); /* no launcher */
    setenv("PMI_SIZE", "2", 1);
    setenv("PMI_RANK", "1", 1);
    assert_int_equal(comm_launcher_waits_on_stopped(), 0); /* Hydra */
    unsetenv("PMI_SIZE");
    unsetenv("PMI_RANK");
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    setenv("OMPI_COMM_WORLD_RANK", "1", 1);
    assert_int_equal(comm_launcher_waits_on_stopped(), 1); /* Open MPI */
    for (int i = 0; i < 6; i++) {
        if (saved[i]) setenv(vars[i], saved[i], 1);
        else unsetenv(vars[i]);
        free(saved[i]);
    }
}

/* ---- the GPU clock monitor ----------------------------------------------------------------- */

/* A scripted source: the samples of the script in order, then failed reads. */
typedef struct clock_script {
    const gpu_clock_sample *samples;
    int n;
    atomic_int calls;
} clock_script;

static int scripted_read(void *ctx, gpu_clock_sample *out)
{
    clock_script *c = ctx;
    const int i = atomic_fetch_add(&c->calls, 1);
    if (i >= c->n) return -1;
    *out = c->samples[i];
    return 0;
}

static void test_gpu_clock_summary(void **state)
{
    (void)state;
    /* two idle samples at the top clock (left out of the clock and power figures), eight busy:
     * clocks 1365 1620 1700 1710 1710 1725 1845 1980 sorted (lower median 1710), power 600-695 W
     * (median 686), the power cap in six, a thermal reason in one, a hardware slowdown in one */
    static const gpu_clock_sample script[] = {
        {1980, 120.0, GPU_CLOCK_IDLE},
        {1710, 686.2, GPU_CLOCK_SW_POWER_CAP},
        {1725, 690.0, GPU_CLOCK_SW_POWER_CAP},
        {1365, 695.0, GPU_CLOCK_SW_POWER_CAP | GPU_CLOCK_HW_SLOWDOWN},
        {1980, 110.0, GPU_CLOCK_IDLE | GPU_CLOCK_SW_POWER_CAP},
        {1845, 600.0, 0},
        {1710, 686.4, GPU_CLOCK_SW_POWER_CAP},
        {1620, 689.0, GPU_CLOCK_SW_POWER_CAP | GPU_CLOCK_SW_THERMAL},
        {1980, 650.0, 0},
        {1700, 680.0, GPU_CLOCK_SW_POWER_CAP},
    };
    clock_script c = {script, 10, 0};
    gpu_clock *g = NULL;
    assert_int_equal(gpu_clock_open_source(&g, scripted_read, &c, 1, 1980, 700.0), 0);
    assert_int_equal(gpu_clock_start(g), 0);
    assert_int_equal(gpu_clock_start(g), -1); /* one thread at a time */
    /* every scripted sample read, and a failed read after them (a wait, not a timing) */
    for (int waited = 0; atomic_load(&c.calls) < 12 && waited < 60000; waited += 5) sleep_ms(5);
    gpu_clock_stop(g);
    assert_true(atomic_load(&c.calls) >= 12);
    gpu_clock_summary sum;
    gpu_clock_summarize(g, &sum);
    assert_int_equal(sum.samples, 10);
    assert_int_equal(sum.busy, 8);
    assert_true(sum.read_errors >= 2);
    assert_int_equal(sum.period_ms, 1);
    assert_int_equal(sum.sm_mhz_median, 1710);
    assert_int_equal(sum.sm_mhz_min, 1365);
    assert_int_equal(sum.sm_mhz_max, 1980);
    assert_int_equal(sum.sm_mhz_allowed, 1980);
    assert_true(sum.power_w_median == 686.0);
    assert_true(sum.power_limit_w == 700.0);
    assert_true(fabs(sum.power_cap_share - 6.0 / 8) < 1e-12);
    assert_true(fabs(sum.thermal_share - 1.0 / 8) < 1e-12);
    assert_true(fabs(sum.hw_slowdown_share - 1.0 / 8) < 1e-12);
    gpu_clock_close(g);
}

static void test_gpu_clock_stopped_at_once_and_without_nvml(void **state)
{
    (void)state;
    static const gpu_clock_sample one[] = {{1500, 300.0, 0}};
    clock_script c = {one, 1, 0};
    gpu_clock *g = NULL;
    /* a period longer than the test: the one sample is the one taken at start */
    assert_int_equal(gpu_clock_open_source(&g, scripted_read, &c, 60000, 0, 0.0), 0);
    gpu_clock_summary sum;
    gpu_clock_summarize(g, &sum);
    assert_int_equal(sum.samples, 0); /* never started */
    assert_int_equal(gpu_clock_start(g), 0);
    gpu_clock_stop(g); /* (ends the minute's wait at once) */
    gpu_clock_summarize(g, &sum);
    assert_int_equal(sum.samples, 1);
    assert_int_equal(sum.sm_mhz_median, 1500);
    assert_true(sum.power_w_median == 300.0);
    gpu_clock_close(g);
    /* bad arguments */
    assert_int_equal(gpu_clock_open_source(&g, NULL, NULL, 50, 0, 0.0), -1);
    assert_int_equal(gpu_clock_open_source(&g, scripted_read, &c, 0, 0, 0.0), -1);
    /* no NVML library: an error that says so, and no monitor */
    char why[300] = "";
    g = (gpu_clock *)&c; /* (must come back NULL) */
    assert_int_equal(gpu_clock_open_nvml(&g, "libaebench-no-such-nvml.so.1", "0000:00:00.0", 50, why, sizeof why), -1);
    assert_null(g);
    printf("gpu_clock without NVML: %s\n", why);
    assert_non_null(strstr(why, "no NVML"));
}

/* ---- the prediction's host-memory contention (engines/runtime/predict.h) ------------------- */

/* A piece's time by what ran beside it: alone, beside one other user or the other, beside
 * both, and bilinear between; a pair not calibrated is halfway between alone and all three. */
static void test_predict_contended_corners(void **state)
{
    (void)state;
    assert_true(pred_contended_ms(10, 12, 15, 20, 0, 0) == 10);
    assert_true(pred_contended_ms(10, 12, 15, 20, 1, 0) == 12);
    assert_true(pred_contended_ms(10, 12, 15, 20, 0, 1) == 15);
    assert_true(pred_contended_ms(10, 12, 15, 20, 1, 1) == 20);
    assert_true(fabs(pred_contended_ms(10, 12, 15, 20, 0.5, 0.5) - (10 + 12 + 15 + 20) / 4.0) < 1e-12);
    assert_true(pred_contended_ms(10, 0, 0, 20, 1, 0) == 15);
    assert_true(pred_contended_ms(10, 0, 0, 0, 1, 1) == 10); /* (nothing under load calibrated) */
}

/* The walk's spans give each user's share of its busy time beside each other one; spans over
 * before a step starts are dropped; a full list merges neighbours and loses no busy time. */
static void test_predict_overlap_from_spans(void **state)
{
    (void)state;
    pred_timeline t = {0};
    engine_prediction out;
    memset(&out, 0, sizeof out);
    pred_run(&t, BUSY_H2D, 10, 0);     /* [0, 10) */
    pred_run(&t, BUSY_H2D, 10, 20);    /* [20, 30) */
    pred_run(&t, BUSY_HOST_ADAM, 20, 5); /* [5, 25) */
    pred_run(&t, BUSY_COMPUTE, 30, 0);
    pred_done(&out, &t, 0, 30);
    assert_true(fabs(out.overlap[BUSY_HOST_ADAM][BUSY_H2D] - 0.5) < 1e-12);
    assert_true(fabs(out.overlap[BUSY_H2D][BUSY_HOST_ADAM] - 0.5) < 1e-12);
    assert_true(out.overlap[BUSY_H2D][BUSY_D2H] == 0 && out.overlap[BUSY_D2H][BUSY_H2D] == 0);
    /* the next step from 26: the H2D span [0, 10) is dropped, [20, 30) kept */
    pred_step(&t, 26);
    assert_int_equal(t.spans[0].n, 1);
    assert_true(t.spans[0].lo[0] == 20 && t.spans[0].hi[0] == 30);
    /* back-to-back pieces are one span; more disjoint ones than the list holds merge */
    pred_timeline u = {0};
    for (int i = 0; i < 3 * PRED_SPANS; i++) pred_run(&u, BUSY_D2H, 1, 2.0 * i);
    assert_true(u.spans[1].n <= PRED_SPANS);
    const double covered = pred_spans_within(&u.spans[1], 0, 1e9);
    assert_true(covered >= 3 * PRED_SPANS && u.spans[1].lo[0] == 0 && u.spans[1].hi[u.spans[1].n - 1] == 6.0 * PRED_SPANS - 1);
    pred_timeline v = {0};
    pred_run(&v, BUSY_D2H, 1, 0);
    pred_run(&v, BUSY_D2H, 1, 0);
    assert_int_equal(v.spans[1].n, 1);
}

/* A micro-batch's landing (a layer's sum so far, up from the host) and the upward link: where
 * two upward copies at once move no more than one (up2 = h2d), its time is the link's too: on
 * one rank the compute, which issues it, waits until the link carried the fetch before it and
 * it, and the next fetch queues behind; on N ranks the collectives' stream is held until then.
 * Where a second engine adds a whole copy's bandwidth (up2 = 2 h2d), or the file has no up2,
 * it goes beside the fetches as if the link were free; between, that share of its time. */
static void test_predict_landing_and_the_link(void **state)
{
    (void)state;
    machine_rates one_link = {0}, two = {0}, unknown = {0}, half = {0};
    one_link.h2d_gbs = two.h2d_gbs = unknown.h2d_gbs = half.h2d_gbs = 50;
    one_link.up2_h2d_gbs = 50, two.up2_h2d_gbs = 100, half.up2_h2d_gbs = 75;
    assert_true(pred_landing_link_share(&one_link) == 1 && pred_landing_link_share(&two) == 0);
    assert_true(pred_landing_link_share(&unknown) == 0 && fabs(pred_landing_link_share(&half) - 0.5) < 1e-12);
    pred_timeline t = {0};
    pred_run(&t, BUSY_H2D, 10, 0); /* a fetch on the link, [0, 10) */
    double compute = 2;
    assert_true(pred_add_earlier(&t, &one_link, 10, 1, &compute, 0) == 20 && compute == 20);
    assert_true(t.busy[BUSY_H2D] == 20 && pred_run(&t, BUSY_H2D, 5, 0) == 25);
    pred_timeline f = {0};
    pred_run(&f, BUSY_H2D, 10, 0);
    double free_compute = 2;
    assert_true(pred_add_earlier(&f, &two, 10, 1, &free_compute, 0) == 12 && free_compute == 12);
    assert_true(f.busy[BUSY_H2D] == 20 && pred_run(&f, BUSY_H2D, 5, 0) == 15);
    pred_timeline h = {0};
    pred_run(&h, BUSY_H2D, 10, 0);
    double half_compute = 2;
    assert_true(pred_add_earlier(&h, &half, 10, 1, &half_compute, 0) == 15 && h.busy[BUSY_H2D] == 20);
    /* N ranks: the collectives' stream (free at 5) waits for the link (busy until 12) */
    pred_timeline n = {0};
    pred_run(&n, BUSY_H2D, 12, 0);
    n.free_at[BUSY_COMM] = 5;
    double unused = 0;
    assert_true(pred_add_earlier(&n, &one_link, 10, 2, &unused, 0) == 22 && n.free_at[BUSY_COMM] == 22);
    pred_timeline nf = {0};
    pred_run(&nf, BUSY_H2D, 12, 0);
    nf.free_at[BUSY_COMM] = 5;
    assert_true(pred_add_earlier(&nf, &unknown, 10, 2, &unused, 0) == 15 && nf.busy[BUSY_H2D] == 22 && unused == 0);
}

/* A step of one host Adam run (100 ms alone) and one H2D copy (100 ms alone), both issued at
 * once: the Adam beside a copy takes 150 ms, the copy beside the Adam 200 ms, all three at
 * once 300 ms.  Settled, the Adam runs beside the copy throughout (150 ms: its pair's rate,
 * not all three's, as no D2H runs), and the copy beside the Adam for f of its time, where
 * f = 150 / (100 + 100 f): f = (sqrt(7) - 1) / 2. */
static void walk_adam_beside_copy(const engine_config *cfg, const machine_rates *m, const void *ctx,
                                  engine_prediction *out)
{
    (void)cfg, (void)ctx;
    memset(out, 0, sizeof *out);
    pred_timeline t = {0};
    pred_step(&t, 0);
    const double h = pred_run(&t, BUSY_H2D, pred_h2d_ms(m, 25e6), 0);
    const double a = pred_run(&t, BUSY_HOST_ADAM, pred_host_adam_ms(m, 100e6), 0);
    pred_done(out, &t, 0, pred_max(h, a));
}
static void test_predict_settles_on_pairs(void **state)
{
    (void)state;
    machine_rates m;
    memset(&m, 0, sizeof m);
    m.h2d_gbs = 1, m.d2h_gbs = 1, m.host_adam_ms_per_mparam = 1;
    m.adam_h2d_gbs = 0.5, m.host_adam_h2d_ms_per_mparam = 1.5;
    m.busy_h2d_gbs = 1 / 3.0, m.busy_d2h_gbs = 1 / 3.0, m.busy_host_adam_ms_per_mparam = 3;
    engine_config cfg;
    memset(&cfg, 0, sizeof cfg);
    engine_prediction out;
    pred_settle(&cfg, &m, walk_adam_beside_copy, NULL, &out);
    const double f = (sqrt(7.0) - 1) / 2;
    printf("settled: adam %.2f ms (150), h2d %.2f ms (%.2f)\n", out.busy_ms[BUSY_HOST_ADAM], out.busy_ms[BUSY_H2D],
           100 + 100 * f);
    assert_true(fabs(out.busy_ms[BUSY_HOST_ADAM] - 150) < 1.0);
    assert_true(fabs(out.busy_ms[BUSY_H2D] - (100 + 100 * f)) < 2.0);
}

/* Exposed communication: kind 1's time (the collectives, here on two streams that overlap
 * each other) with no kind 0 (compute) beside it. */
static void test_spans_exposed(void **state)
{
    (void)state;
    /* compute [0, 10) [12, 20); comm [5, 15) and [14, 25) on another stream: comm's union
     * [5, 25) = 20 ms, of which [10, 12) and [20, 25) had no compute: 7 ms */
    const double lo[] = {0, 12, 5, 14}, hi[] = {10, 20, 15, 25};
    const int kind[] = {0, 0, 1, 1};
    assert_true(fabs(spans_exposed_of(lo, hi, kind, 4, 1, 0) - 7) < 1e-12);
    /* and the compute with no collectives beside it: [0, 5) = 5 ms */
    assert_true(fabs(spans_exposed_of(lo, hi, kind, 4, 0, 1) - 5) < 1e-12);
    /* none of the other kind: all of it; none of its own: nothing */
    assert_true(fabs(spans_exposed_of(lo, hi, kind, 4, 1, 2) - 20) < 1e-12);
    assert_true(spans_exposed_of(lo, hi, kind, 4, 3, 0) == 0);
    /* from real spans on two CPU streams: what was exposed is within what was busy */
    gpt_backend *be = NULL;
    assert_int_equal(gpt_cpu_backend_create(&be, 1), GPT_OK);
    stream_spans sp;
    assert_int_equal(spans_init(&sp, be, 8), GPT_OK);
    gpt_stream *a = NULL, *b = NULL;
    assert_int_equal(be->ops->stream_create(be, &a), GPT_OK);
    assert_int_equal(be->ops->stream_create(be, &b), GPT_OK);
    int ia, ib;
    assert_int_equal(span_begin(&sp, a, 0, &ia), GPT_OK);
    assert_int_equal(span_end(&sp, a, ia), GPT_OK);
    assert_int_equal(span_begin(&sp, b, 1, &ib), GPT_OK);
    assert_int_equal(span_end(&sp, b, ib), GPT_OK);
    assert_int_equal(gpt_stream_sync(a), GPT_OK);
    assert_int_equal(gpt_stream_sync(b), GPT_OK);
    double busy[2] = {0, 0}, exposed = -1;
    assert_int_equal(spans_sum(&sp, busy, 2), GPT_OK);
    assert_int_equal(spans_exposed(&sp, 1, 0, &exposed), GPT_OK);
    assert_true(exposed >= 0 && exposed <= busy[1] + 1e-6);
    spans_free(&sp);
    be->ops->stream_destroy(a);
    be->ops->stream_destroy(b);
    gpt_cpu_backend_destroy(be);
}

/* A CPU backend, a record of cap spans and one stream on it (the spans tests' setting), and its
 * release. */
static void spans_on_one_stream(gpt_backend **be, stream_spans *sp, int cap, gpt_stream **s)
{
    assert_int_equal(gpt_cpu_backend_create(be, 1), GPT_OK);
    assert_int_equal(spans_init(sp, *be, cap), GPT_OK);
    assert_int_equal((*be)->ops->stream_create(*be, s), GPT_OK);
}
static void spans_on_one_stream_close(gpt_backend *be, stream_spans *sp, gpt_stream *s)
{
    spans_free(sp);
    be->ops->stream_destroy(s);
    gpt_cpu_backend_destroy(be);
}

/* A step that began more spans than the record had room for counts only those that fit (its
 * busy times are then not reported: offload_streams_busy); the next step's reset makes room for
 * all it began, and those it begins are all counted. */
static void test_spans_grow(void **state)
{
    (void)state;
    gpt_backend *be = NULL;
    stream_spans sp;
    gpt_stream *s = NULL;
    spans_on_one_stream(&be, &sp, 2, &s);
    for (int step = 0; step < 3; step++) {
        assert_int_equal(spans_reset(&sp), GPT_OK);
        int ids[5];
        for (int i = 0; i < 5; i++) {
            assert_int_equal(span_begin(&sp, s, i % 2, &ids[i]), GPT_OK);
            assert_int_equal(span_end(&sp, s, ids[i]), GPT_OK);
        }
        assert_int_equal(gpt_stream_sync(s), GPT_OK);
        double busy[2] = {0, 0};
        assert_int_equal(spans_sum(&sp, busy, 2), GPT_OK);
        /* the first step: 2 of 5 (ids -1 past them), 3 over; then all 5 in room for 5 */
        assert_int_equal(spans_count(&sp), step == 0 ? 2 : 5);
        assert_int_equal(sp.overflow, step == 0 ? 3 : 0);
        assert_int_equal(ids[4], step == 0 ? -1 : 4);
        assert_int_equal(sp.cap, step == 0 ? 2 : 5);
        assert_true(busy[0] >= 0 && busy[1] >= 0);
    }
    spans_on_one_stream_close(be, &sp, s);
}

/* Graphs: a replay records the spans its capture began (same ids), so the record moves past
 * them (spans_move) only from where the capture began it; and a group's operations captured
 * with a graph count their bytes at each replay (coll_replayed), not at the capture.  (One
 * rank: the group's operations are local copies, which the CPU backend cannot capture, but
 * the manifest is kept the same way; NCCL's captures run on the two-GPU machine,
 * bench/dp_scaling_gpu.sh.) */
static void test_spans_move_and_replayed_collectives(void **state)
{
    (void)state;
    gpt_backend *be = NULL;
    stream_spans sp;
    gpt_stream *s = NULL;
    spans_on_one_stream(&be, &sp, 4, &s);
    int id;
    assert_int_equal(span_begin(&sp, s, 0, &id), GPT_OK);
    assert_int_equal(span_end(&sp, s, id), GPT_OK);
    assert_int_equal(spans_count(&sp), 1);
    assert_int_equal(spans_move(&sp, 1, 3), GPT_OK);
    assert_int_equal(spans_count(&sp), 3);
    /* not where the capture began: refused, the record unmoved */
    assert_int_equal(spans_move(&sp, 1, 2), GPT_ERR_INVALID);
    assert_int_equal(spans_count(&sp), 3);
    /* beyond the record's room: refused */
    assert_int_equal(spans_move(&sp, 3, 5), GPT_ERR_INVALID);
    assert_int_equal(spans_move(&sp, 3, 1), GPT_OK); /* back, as after a failed capture */
    assert_int_equal(span_begin(&sp, s, 1, &id), GPT_OK);
    assert_int_equal(id, 1);
    assert_int_equal(span_end(&sp, s, id), GPT_OK);

    coll_group *g = NULL;
    assert_int_equal(coll_open(&g, be, 0, 1), GPT_OK);
    float *buf = NULL;
    assert_int_equal(be->ops->dev_alloc(be, (void **)&buf, 64 * sizeof(float)), GPT_OK);
    assert_int_equal(coll_capture_begin(g), GPT_OK);
    assert_int_equal(coll_capture_begin(g), GPT_ERR_INVALID); /* one at a time */
    assert_int_equal(coll_all_reduce_sum(g, buf, 16), GPT_OK);
    assert_int_equal(coll_all_gather(g, buf, buf, 8), GPT_OK);
    coll_capture *c = coll_capture_end(g);
    assert_non_null(c);
    assert_null(coll_capture_end(g));
    assert_true(coll_take_bytes(g) == 0); /* captured: not counted yet */
    assert_int_equal(coll_replayed(g, c), GPT_OK);
    assert_int_equal(coll_replayed(g, c), GPT_OK);
    assert_true(coll_take_bytes(g) == 2 * (16 * 4 + 8));
    assert_int_equal(coll_all_reduce_sum(g, buf, 16), GPT_OK); /* eager again: at once */
    assert_true(coll_take_bytes(g) == 16 * 4);
    coll_capture_free(c);
    assert_int_equal(gpt_stream_sync(s), GPT_OK);
    coll_close(g);
    be->ops->dev_free(be, buf);
    spans_on_one_stream_close(be, &sp, s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wait_orders_copy_after_long_work),
        cmocka_unit_test(test_gate_blocks_only_the_waiting_stream),
        cmocka_unit_test(test_rerecord_moves_the_marker),
        cmocka_unit_test(test_never_recorded_event_is_complete),
        cmocka_unit_test(test_event_sync_blocks_host_until_marker),
        cmocka_unit_test(test_elapsed_ms),
        cmocka_unit_test(test_stream_sync_drains_more_than_a_queue),
        cmocka_unit_test(test_many_streams_and_destroy_with_queued_work),
        cmocka_unit_test(test_cpu_adam_bit_identical),
        cmocka_unit_test(test_cpu_adam_picks_widest_isa),
        cmocka_unit_test(test_cpu_adam_bf16_rounding),
        cmocka_unit_test(test_cpu_adam_waits_for_after_event),
        cmocka_unit_test(test_cpu_adam_order_tickets_destroy),
        cmocka_unit_test(test_watchdog_auto_limit),
        cmocka_unit_test(test_watchdog_fires_naming_where),
        cmocka_unit_test(test_watchdog_quiet_while_progressing),
        cmocka_unit_test(test_watchdog_names_the_stopped_rank),
        cmocka_unit_test(test_watchdog_kills_a_stopped_rank_only_when_asked),
        cmocka_unit_test(test_launcher_waits_on_stopped),
        cmocka_unit_test(test_gpu_clock_summary),
        cmocka_unit_test(test_gpu_clock_stopped_at_once_and_without_nvml),
        cmocka_unit_test(test_predict_contended_corners),
        cmocka_unit_test(test_predict_overlap_from_spans),
        cmocka_unit_test(test_predict_landing_and_the_link),
        cmocka_unit_test(test_predict_settles_on_pairs),
        cmocka_unit_test(test_spans_exposed),
        cmocka_unit_test(test_spans_grow),
        cmocka_unit_test(test_spans_move_and_replayed_collectives),
    };
    return cmocka_run_group_tests_name("runtime", tests, NULL, NULL);
}
