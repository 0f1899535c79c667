/*
 * cpu_adam.c — the host AdamW pool: pthreads, a FIFO of jobs, SIMD kernels chosen at run
 * time (AVX-512, AVX2, scalar), bit-identical to gpt_block_adamw on the CPU backend.
 *
 * Threads: thread 0 of the pool leads.  It takes the oldest queued job, waits for its
 * `after` event (the host side of "the grads are home"), computes the bias corrections,
 * then publishes the job; every pool thread (the leader too) claims fixed-size chunks of
 * the job from a shared counter until none are left.  The last thread to finish its
 * chunks tells the leader, which retires the ticket and takes the next job.  One job at a
 * time, in submission order.
 *
 * Exactness: AdamW is elementwise, so who computes which chunk cannot change a bit.  The
 * SIMD kernels evaluate kernels/adamw_element.h's expression in the same order with
 * separate IEEE multiply, add, divide and square root (correctly rounded, like the scalar
 * ones; no reciprocal approximations).  The build's -ffp-contract=off keeps the compiler
 * from fusing mul+add into FMA here as in the scalar code; test_runtime checks bit
 * equality for every ISA the machine has.
 *
 * Stores are ordinary: every line written was read a moment before (p, m, v are updated
 * in place), so it is already in cache and non-temporal stores would save no
 * read-for-ownership traffic; they would only force the write-back earlier.
 */
#include "cpu_adam.h"

#include "../../kernels/adamw_element.h"
#include "timer.h"

#include <errno.h>
#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Elements per chunk: 16 Ki floats = 64 KiB per array, 256 KiB for the four: large
 * enough that claiming a chunk costs nothing, small enough to balance the threads. */
#define CHUNK_ELEMS ((size_t)16384)

typedef enum adam_isa { ISA_SCALAR, ISA_AVX2, ISA_AVX512 } adam_isa;
static const char *const isa_names[] = {"scalar", "avx2", "avx512"};

/* The per-job constants every chunk needs, computed once by the leader. */
typedef struct adam_consts {
    float lr, beta1, beta2, eps, weight_decay, bias_corr1, bias_corr2, grad_scale;
} adam_consts;

typedef struct queued_job {
    cpu_adam_job job;
    uint64_t ticket;
} queued_job;

struct cpu_adam {
    int nthreads;
    adam_isa isa;
    pthread_t *threads;
    int nstarted;

    pthread_mutex_t lock;
    pthread_cond_t queue_changed; /* leader: a job was queued, or stopping */
    pthread_cond_t ticket_done;   /* waiters: finished_ticket advanced */
    pthread_cond_t phase_changed; /* helpers: a new job is published, or stopping */
    pthread_cond_t chunks_done;   /* leader: every thread finished its chunks */

    /* the queue: a growable ring */
    queued_job *ring;
    size_t ring_cap, head, count;
    uint64_t next_ticket;     /* last ticket handed out */
    uint64_t finished_ticket; /* every ticket <= this one has finished */
    int first_error;          /* first failed job's status, and its ticket */
    uint64_t error_ticket;
    int stopping;             /* destroy: the leader drains the queue, then stops */
    int helpers_stop;         /* set by the leader once no job will come any more */
    double busy_ms;

    /* the job being computed; the leader waits for every thread before the next one */
    uint64_t phase;           /* bumped once per published job */
    const cpu_adam_job *current;
    adam_consts consts;
    size_t nchunks;
    atomic_size_t next_chunk;
    int threads_finished;     /* of the current phase */
};

static int pthread_failed(const char *what, int rc)
{
    fprintf(stderr, "aebench: cpu adam: %s failed: %s\n", what, strerror(rc));
    return GPT_ERR_BACKEND;
}

/* ---- kernels ------------------------------------------------------------------------------ */

/* One block's update from (p_in, m_in, v_in) into (p, m, v): the same arrays in place, or
 * another copy of the state (cpu_adam_job's *_out), reading and writing each once. */
typedef struct adam_arrays {
    float *p, *m, *v;
    const float *p_in, *m_in, *v_in, *g;
    uint16_t *w; /* NULL, or the updated params rounded to bf16 here too (cpu_adam_job's
                  * params_bf16), in the same pass: a second pass over p would read every
                  * element again and convert it one at a time (measured 20% slower updates) */
} adam_arrays;

static adam_arrays arrays_at(const adam_arrays *a, size_t i)
{
    return (adam_arrays){a->p + i, a->m + i, a->v + i, a->p_in + i, a->m_in + i, a->v_in + i, a->g + i,
                         a->w ? a->w + i : NULL};
}

static void adam_scalar(const adam_arrays *a, size_t n, const adam_consts *c, float wd)
{
    for (size_t i = 0; i < n; i++) {
        float p = a->p_in[i], m = a->m_in[i], v = a->v_in[i];
        gpt_adamw_element(&p, a->g[i], &m, &v, c->lr, c->beta1, c->beta2, c->eps, wd,
                          c->bias_corr1, c->bias_corr2, c->grad_scale);
        a->p[i] = p, a->m[i] = m, a->v[i] = v;
        if (a->w) a->w[i] = gpt_f32_to_bf16(p);
    }
}

/* gpt_f32_to_bf16 on 8 or 16 lanes, bit for bit: round to nearest, ties to even, on the
 * bits; a NaN keeps its top half and becomes quiet. */
__attribute__((target("avx2"))) static __m128i bf16_of_avx2(__m256 x)
{
    const __m256i u = _mm256_castps_si256(x);
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)),
                         _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1))), 16);
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    const __m256i h = _mm256_blendv_epi8(rounded, quiet, nan); /* (each lane < 2^16) */
    /* pack the eight 32-bit lanes to 16 bits: packus works per 128-bit half */
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(h, h), 0x08);
    return _mm256_castsi256_si128(packed);
}

__attribute__((target("avx512f"))) static __m256i bf16_of_avx512(__m512 x)
{
    const __m512i u = _mm512_castps_si512(x);
    const __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)),
                         _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1))), 16);
    const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                  _mm512_set1_epi32(0x7f800000));
    return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, quiet));
}

/* Out of place (into another copy of the state), the SIMD paths store past the caches:
 * a store that fills a whole line then needs no read of what it overwrites, so an update
 * into another copy moves the bytes one in place does (28 per element, not 40).  That needs
 * p, m, v aligned alike (they are: equal offsets into blocks that start on a huge page);
 * the elements before the first aligned one take the scalar path.  0 when not streaming,
 * else how many elements come first. */
static int stream_head(const adam_arrays *a, size_t n, size_t align, size_t *head)
{
    const uintptr_t mask = align - 1, at = (uintptr_t)a->p & mask;
    if (a->p == a->p_in || ((uintptr_t)a->m & mask) != at || ((uintptr_t)a->v & mask) != at || at % sizeof(float))
        return 0;
    *head = ((align - at) & mask) / sizeof(float);
    if (*head > n) *head = n;
    return 1;
}

/* Each step below is one operation of gpt_adamw_element, in its order:
 *   g = grad * gs;  mi = b1*m + (1-b1)*g;  vi = b2*v + ((1-b2)*g)*g;
 *   p -= lr * ((mi/bc1) / (sqrt(vi/bc2) + eps) + wd*p)                                   */
__attribute__((target("avx2"))) static void adam_avx2(const adam_arrays *a, size_t n,
                                                       const adam_consts *c, float wd)
{
    float *p = a->p, *m = a->m, *v = a->v;
    const float *g = a->g, *p_in = a->p_in, *m_in = a->m_in, *v_in = a->v_in;
    const __m256 gs = _mm256_set1_ps(c->grad_scale), b1 = _mm256_set1_ps(c->beta1),
                 b2 = _mm256_set1_ps(c->beta2), omb1 = _mm256_set1_ps(1.0f - c->beta1),
                 omb2 = _mm256_set1_ps(1.0f - c->beta2), bc1 = _mm256_set1_ps(c->bias_corr1),
                 bc2 = _mm256_set1_ps(c->bias_corr2), eps = _mm256_set1_ps(c->eps),
                 lr = _mm256_set1_ps(c->lr), wdv = _mm256_set1_ps(wd);
    size_t i = 0;
    const int stream = stream_head(a, n, 32, &i);
    if (stream) adam_scalar(a, i, c, wd);
    for (; i + 8 <= n; i += 8) {
        const __m256 gi = _mm256_mul_ps(_mm256_loadu_ps(g + i), gs);
        const __m256 mi = _mm256_add_ps(_mm256_mul_ps(b1, _mm256_loadu_ps(m_in + i)),
                                        _mm256_mul_ps(omb1, gi));
        const __m256 vi = _mm256_add_ps(_mm256_mul_ps(b2, _mm256_loadu_ps(v_in + i)),
                                        _mm256_mul_ps(_mm256_mul_ps(omb2, gi), gi));
        const __m256 m_hat = _mm256_div_ps(mi, bc1);
        const __m256 v_hat = _mm256_div_ps(vi, bc2);
        if (stream) {
            _mm256_stream_ps(m + i, mi);
            _mm256_stream_ps(v + i, vi);
        } else {
            _mm256_storeu_ps(m + i, mi);
            _mm256_storeu_ps(v + i, vi);
        }
        const __m256 pi = _mm256_loadu_ps(p_in + i);
        const __m256 step = _mm256_add_ps(
            _mm256_div_ps(m_hat, _mm256_add_ps(_mm256_sqrt_ps(v_hat), eps)),
            _mm256_mul_ps(wdv, pi));
        const __m256 pn = _mm256_sub_ps(pi, _mm256_mul_ps(lr, step));
        if (stream) _mm256_stream_ps(p + i, pn);
        else _mm256_storeu_ps(p + i, pn);
        if (a->w) _mm_storeu_si128((__m128i *)(a->w + i), bf16_of_avx2(pn));
    }
    if (stream) _mm_sfence(); /* (streamed stores are ordered before the job is seen done) */
    const adam_arrays rest = arrays_at(a, i);
    adam_scalar(&rest, n - i, c, wd);
}

__attribute__((target("avx512f"))) static void adam_avx512(const adam_arrays *a, size_t n,
                                                            const adam_consts *c, float wd)
{
    float *p = a->p, *m = a->m, *v = a->v;
    const float *g = a->g, *p_in = a->p_in, *m_in = a->m_in, *v_in = a->v_in;
    const __m512 gs = _mm512_set1_ps(c->grad_scale), b1 = _mm512_set1_ps(c->beta1),
                 b2 = _mm512_set1_ps(c->beta2), omb1 = _mm512_set1_ps(1.0f - c->beta1),
                 omb2 = _mm512_set1_ps(1.0f - c->beta2), bc1 = _mm512_set1_ps(c->bias_corr1),
                 bc2 = _mm512_set1_ps(c->bias_corr2), eps = _mm512_set1_ps(c->eps),
                 lr = _mm512_set1_ps(c->lr), wdv = _mm512_set1_ps(wd);
    size_t i = 0;
    const int stream = stream_head(a, n, 64, &i);
    if (stream) adam_scalar(a, i, c, wd);
    for (; i + 16 <= n; i += 16) {
        const __m512 gi = _mm512_mul_ps(_mm512_loadu_ps(g + i), gs);
        const __m512 mi = _mm512_add_ps(_mm512_mul_ps(b1, _mm512_loadu_ps(m_in + i)),
                                        _mm512_mul_ps(omb1, gi));
        const __m512 vi = _mm512_add_ps(_mm512_mul_ps(b2, _mm512_loadu_ps(v_in + i)),
                                        _mm512_mul_ps(_mm512_mul_ps(omb2, gi), gi));
        const __m512 m_hat = _mm512_div_ps(mi, bc1);
        const __m512 v_hat = _mm512_div_ps(vi, bc2);
        if (stream) {
            _mm512_stream_ps(m + i, mi);
            _mm512_stream_ps(v + i, vi);
        } else {
            _mm512_storeu_ps(m + i, mi);
            _mm512_storeu_ps(v + i, vi);
        }
        const __m512 pi = _mm512_loadu_ps(p_in + i);
        const __m512 step = _mm512_add_ps(
            _mm512_div_ps(m_hat, _mm512_add_ps(_mm512_sqrt_ps(v_hat), eps)),
            _mm512_mul_ps(wdv, pi));
        const __m512 pn = _mm512_sub_ps(pi, _mm512_mul_ps(lr, step));
        if (stream) _mm512_stream_ps(p + i, pn);
        else _mm512_storeu_ps(p + i, pn);
        if (a->w) _mm256_storeu_si256((__m256i *)(a->w + i), bf16_of_avx512(pn));
    }
    if (stream) _mm_sfence(); /* (streamed stores are ordered before the job is seen done) */
    const adam_arrays rest = arrays_at(a, i);
    adam_scalar(&rest, n - i, c, wd);
}

/* Elements [lo, hi) of job j: decay on the part below n_decay, none above. */
static void adam_range(adam_isa isa, const cpu_adam_job *j, const adam_consts *c, size_t lo,
                       size_t hi)
{
    const adam_arrays all = {j->params_out ? j->params_out : j->params, j->m_out ? j->m_out : j->m,
                             j->v_out ? j->v_out : j->v, j->params, j->m, j->v, j->grads, j->params_bf16};
    const size_t split = j->n_decay < lo ? lo : j->n_decay > hi ? hi : j->n_decay;
    const struct { size_t lo, hi; float wd; } parts[2] = {{lo, split, c->weight_decay},
                                                          {split, hi, 0.0f}};
    for (int k = 0; k < 2; k++) {
        const size_t a = parts[k].lo, n = parts[k].hi - parts[k].lo;
        if (n == 0)
            continue;
        const adam_arrays at = arrays_at(&all, a);
        switch (isa) {
        case ISA_AVX512: adam_avx512(&at, n, c, parts[k].wd); break;
        case ISA_AVX2: adam_avx2(&at, n, c, parts[k].wd); break;
        case ISA_SCALAR: adam_scalar(&at, n, c, parts[k].wd); break;
        }
    }
}

/* ---- the pool -------------------------------------------------------------------------- */

typedef struct thread_arg {
    cpu_adam *pool;
    int index;
} thread_arg;

/* Claims chunks of the current job until none are left. */
static void work_chunks(cpu_adam *pool)
{
    const cpu_adam_job *j = pool->current;
    for (;;) {
        const size_t k = atomic_fetch_add(&pool->next_chunk, 1);
        if (k >= pool->nchunks)
            break;
        const size_t lo = k * CHUNK_ELEMS;
        const size_t hi = lo + CHUNK_ELEMS < j->n ? lo + CHUNK_ELEMS : j->n;
        adam_range(pool->isa, j, &pool->consts, lo, hi);
    }
}

/* Called with the lock held by a thread that has run out of chunks. */
static int finish_chunks_locked(cpu_adam *pool)
{
    if (++pool->threads_finished == pool->nthreads) {
        int rc = pthread_cond_signal(&pool->chunks_done);
        if (rc)
            return pthread_failed("pthread_cond_signal", rc);
    }
    return GPT_OK;
}

static void *helper_main(void *arg)
{
    cpu_adam *pool = ((thread_arg *)arg)->pool;
    free(arg);
    int rc = pthread_mutex_lock(&pool->lock);
    if (rc) {
        pthread_failed("pthread_mutex_lock (adam helper)", rc);
        return NULL;
    }
    uint64_t seen_phase = 0;
    for (;;) {
        /* Not `stopping`: the leader may still publish queued jobs after destroy began,
         * and it waits for every thread on each of them. */
        while (pool->phase == seen_phase && !pool->helpers_stop && rc == 0)
            rc = pthread_cond_wait(&pool->phase_changed, &pool->lock);
        if (rc) {
            pthread_failed("pthread_cond_wait (adam helper)", rc);
            break;
        }
        if (pool->phase == seen_phase) /* the leader is done: no job will come */
            break;
        seen_phase = pool->phase;
        pthread_mutex_unlock(&pool->lock);
        work_chunks(pool);
        if ((rc = pthread_mutex_lock(&pool->lock))) {
            pthread_failed("pthread_mutex_lock (adam helper)", rc);
            return NULL;
        }
        finish_chunks_locked(pool);
    }
    pthread_mutex_unlock(&pool->lock);
    return NULL;
}

/* Runs one job on every thread of the pool; called by the leader without the lock. */
static int run_job(cpu_adam *pool, const cpu_adam_job *job)
{
    if (job->after) {
        int rc = gpt_event_sync(job->after);
        if (rc)
            return rc;
    }
    const double t0 = wall_ms();
    adam_consts c;
    c.lr = job->lr;
    c.beta1 = (float)job->optim.beta1;
    c.beta2 = (float)job->optim.beta2;
    c.eps = (float)job->optim.eps;
    c.weight_decay = (float)job->optim.weight_decay;
    /* exactly as cpu_adamw_update (kernels/cpu/cpu_ops.c) */
    c.bias_corr1 = 1.0f - powf(c.beta1, (float)job->t);
    c.bias_corr2 = 1.0f - powf(c.beta2, (float)job->t);
    c.grad_scale = job->grad_scale;

    int rc = pthread_mutex_lock(&pool->lock);
    if (rc)
        return pthread_failed("pthread_mutex_lock", rc);
    pool->current = job;
    pool->consts = c;
    pool->nchunks = (job->n + CHUNK_ELEMS - 1) / CHUNK_ELEMS;
    atomic_store(&pool->next_chunk, 0);
    pool->threads_finished = 0;
    pool->phase++;
    if (pool->nthreads > 1 && (rc = pthread_cond_broadcast(&pool->phase_changed))) {
        pthread_mutex_unlock(&pool->lock);
        return pthread_failed("pthread_cond_broadcast", rc);
    }
    pthread_mutex_unlock(&pool->lock);

    work_chunks(pool);

    if ((rc = pthread_mutex_lock(&pool->lock)))
        return pthread_failed("pthread_mutex_lock", rc);
    int status = finish_chunks_locked(pool);
    while (status == 0 && pool->threads_finished < pool->nthreads)
        if ((rc = pthread_cond_wait(&pool->chunks_done, &pool->lock)))
            status = pthread_failed("pthread_cond_wait", rc);
    pool->current = NULL;
    pool->busy_ms += wall_ms() - t0;
    pthread_mutex_unlock(&pool->lock);
    return status;
}

static void *leader_main(void *arg)
{
    cpu_adam *pool = ((thread_arg *)arg)->pool;
    free(arg);
    int rc = pthread_mutex_lock(&pool->lock);
    if (rc) {
        pthread_failed("pthread_mutex_lock (adam leader)", rc);
        return NULL;
    }
    for (;;) {
        while (pool->count == 0 && !pool->stopping && rc == 0)
            rc = pthread_cond_wait(&pool->queue_changed, &pool->lock);
        if (rc) {
            pthread_failed("pthread_cond_wait (adam leader)", rc);
            break;
        }
        if (pool->count == 0) /* stopping, queue drained */
            break;
        const queued_job q = pool->ring[pool->head];
        pool->head = (pool->head + 1) % pool->ring_cap;
        pool->count--;
        pthread_mutex_unlock(&pool->lock);

        const int status = run_job(pool, &q.job);

        if ((rc = pthread_mutex_lock(&pool->lock))) {
            pthread_failed("pthread_mutex_lock (adam leader)", rc);
            return NULL;
        }
        if (status && pool->first_error == 0) {
            pool->first_error = status;
            pool->error_ticket = q.ticket;
        }
        pool->finished_ticket = q.ticket;
        if ((rc = pthread_cond_broadcast(&pool->ticket_done)))
            pthread_failed("pthread_cond_broadcast", rc);
    }
    /* Tell the helpers there will be no more jobs. */
    pool->helpers_stop = 1;
    if ((rc = pthread_cond_broadcast(&pool->phase_changed)))
        pthread_failed("pthread_cond_broadcast", rc);
    pthread_mutex_unlock(&pool->lock);
    return NULL;
}

static int isa_from_name(const char *name, adam_isa *isa)
{
    for (int k = 0; k < 3; k++)
        if (strcmp(name, isa_names[k]) == 0) {
            *isa = (adam_isa)k;
            return 0;
        }
    return -1;
}

static int isa_supported(adam_isa isa)
{
    __builtin_cpu_init();
    switch (isa) {
    case ISA_AVX512: return __builtin_cpu_supports("avx512f");
    case ISA_AVX2: return __builtin_cpu_supports("avx2");
    case ISA_SCALAR: return 1;
    }
    return 0;
}

int cpu_adam_create(cpu_adam **out, int nthreads)
{
    return cpu_adam_create_isa(out, nthreads, NULL);
}

int cpu_adam_create_isa(cpu_adam **out, int nthreads, const char *isa_name)
{
    *out = NULL;
    adam_isa isa = isa_supported(ISA_AVX512) ? ISA_AVX512
                   : isa_supported(ISA_AVX2) ? ISA_AVX2 : ISA_SCALAR;
    if (isa_name != NULL && isa_name[0] != '\0') {
        if (isa_from_name(isa_name, &isa) != 0) {
            fprintf(stderr, "aebench: cpu adam: unknown ISA '%s' (scalar, avx2, avx512)\n",
                    isa_name);
            return GPT_ERR_INVALID;
        }
        if (!isa_supported(isa)) {
            fprintf(stderr, "aebench: cpu adam: this CPU has no %s\n", isa_name);
            return GPT_ERR_INVALID;
        }
    }
    if (nthreads <= 0) {
        long online = sysconf(_SC_NPROCESSORS_ONLN);
        nthreads = online > 0 ? (int)online : 1;
    }
    cpu_adam *pool = calloc(1, sizeof *pool);
    if (pool == NULL)
        return GPT_ERR_OOM;
    pool->nthreads = nthreads;
    pool->isa = isa;
    pool->ring_cap = 64;
    pool->ring = calloc(pool->ring_cap, sizeof *pool->ring);
    pool->threads = calloc((size_t)nthreads, sizeof *pool->threads);
    if (pool->ring == NULL || pool->threads == NULL) {
        free(pool->ring);
        free(pool->threads);
        free(pool);
        return GPT_ERR_OOM;
    }
    atomic_init(&pool->next_chunk, 0);
    int rc;
    if ((rc = pthread_mutex_init(&pool->lock, NULL)) ||
        (rc = pthread_cond_init(&pool->queue_changed, NULL)) ||
        (rc = pthread_cond_init(&pool->ticket_done, NULL)) ||
        (rc = pthread_cond_init(&pool->phase_changed, NULL)) ||
        (rc = pthread_cond_init(&pool->chunks_done, NULL))) {
        /* These cannot fail with default attributes on Linux; if one did, the objects
         * initialised before it are leaked rather than destroyed uninitialised. */
        free(pool->ring);
        free(pool->threads);
        free(pool);
        return pthread_failed("pthread mutex/cond init", rc);
    }
    for (int i = 0; i < nthreads; i++) {
        thread_arg *a = malloc(sizeof *a);
        if (a == NULL) {
            rc = ENOMEM;
            break;
        }
        *a = (thread_arg){pool, i};
        if ((rc = pthread_create(&pool->threads[i], NULL, i == 0 ? leader_main : helper_main,
                                 a))) {
            free(a);
            break;
        }
        pool->nstarted++;
    }
    if (pool->nstarted < nthreads) {
        /* Stop what started: no job was queued, so the leader (thread 0, started first)
         * stops at once and releases the helpers. */
        pthread_failed("pthread_create", rc);
        cpu_adam_destroy(pool);
        return GPT_ERR_BACKEND;
    }
    *out = pool;
    return GPT_OK;
}

void cpu_adam_destroy(cpu_adam *pool)
{
    if (pool == NULL)
        return;
    int rc = pthread_mutex_lock(&pool->lock);
    if (rc == 0) {
        /* The leader drains the queue before it honours `stopping`. */
        pool->stopping = 1;
        if ((rc = pthread_cond_broadcast(&pool->queue_changed)))
            pthread_failed("pthread_cond_broadcast", rc);
        pthread_mutex_unlock(&pool->lock);
    } else {
        pthread_failed("pthread_mutex_lock", rc);
    }
    for (int i = 0; i < pool->nstarted; i++)
        if ((rc = pthread_join(pool->threads[i], NULL)))
            pthread_failed("pthread_join", rc);
    pthread_cond_destroy(&pool->chunks_done);
    pthread_cond_destroy(&pool->phase_changed);
    pthread_cond_destroy(&pool->ticket_done);
    pthread_cond_destroy(&pool->queue_changed);
    pthread_mutex_destroy(&pool->lock);
    free(pool->ring);
    free(pool->threads);
    free(pool);
}

int cpu_adam_submit(cpu_adam *pool, const cpu_adam_job *job, uint64_t *ticket)
{
    *ticket = 0;
    int rc = pthread_mutex_lock(&pool->lock);
    if (rc)
        return pthread_failed("pthread_mutex_lock", rc);
    int status = GPT_OK;
    if (pool->count == pool->ring_cap) {
        /* grow, unrolling the ring into the front of the new array */
        queued_job *grown = malloc(2 * pool->ring_cap * sizeof *grown);
        if (grown == NULL) {
            status = GPT_ERR_OOM;
        } else {
            for (size_t i = 0; i < pool->count; i++)
                grown[i] = pool->ring[(pool->head + i) % pool->ring_cap];
            free(pool->ring);
            pool->ring = grown;
            pool->ring_cap *= 2;
            pool->head = 0;
        }
    }
    if (status == GPT_OK) {
        queued_job *q = &pool->ring[(pool->head + pool->count) % pool->ring_cap];
        q->job = *job;
        q->ticket = ++pool->next_ticket;
        pool->count++;
        *ticket = q->ticket;
        if ((rc = pthread_cond_signal(&pool->queue_changed)))
            status = pthread_failed("pthread_cond_signal", rc);
    }
    if ((rc = pthread_mutex_unlock(&pool->lock)))
        return pthread_failed("pthread_mutex_unlock", rc);
    return status;
}

int cpu_adam_wait(cpu_adam *pool, uint64_t ticket)
{
    int rc = pthread_mutex_lock(&pool->lock);
    if (rc)
        return pthread_failed("pthread_mutex_lock", rc);
    int status = GPT_OK;
    if (ticket > pool->next_ticket) {
        status = GPT_ERR_INVALID; /* never handed out: waiting would never end */
    } else {
        while (pool->finished_ticket < ticket && rc == 0)
            rc = pthread_cond_wait(&pool->ticket_done, &pool->lock);
        if (rc)
            status = pthread_failed("pthread_cond_wait", rc);
        else if (pool->first_error && pool->error_ticket <= ticket)
            status = pool->first_error;
    }
    if ((rc = pthread_mutex_unlock(&pool->lock)))
        return pthread_failed("pthread_mutex_unlock", rc);
    return status;
}

int cpu_adam_done(cpu_adam *pool, uint64_t ticket)
{
    if (pthread_mutex_lock(&pool->lock)) return 0; /* (then the caller waits, and hears why) */
    const int done = pool->finished_ticket >= ticket;
    pthread_mutex_unlock(&pool->lock);
    return done;
}

int cpu_adam_run(cpu_adam *pool, const cpu_adam_job *job)
{
    uint64_t ticket;
    int rc = cpu_adam_submit(pool, job, &ticket);
    return rc ? rc : cpu_adam_wait(pool, ticket);
}

double cpu_adam_take_busy_ms(cpu_adam *pool)
{
    double ms = 0.0;
    int rc = pthread_mutex_lock(&pool->lock);
    if (rc) {
        pthread_failed("pthread_mutex_lock", rc);
        return 0.0;
    }
    ms = pool->busy_ms;
    pool->busy_ms = 0.0;
    pthread_mutex_unlock(&pool->lock);
    return ms;
}

const char *cpu_adam_isa(const cpu_adam *pool)
{
    return isa_names[pool->isa];
}

int cpu_adam_threads(const cpu_adam *pool)
{
    return pool->nthreads;
}

void cpu_round_bf16(uint16_t *dst, const float *src, size_t n)
{
    const ptrdiff_t blocks = (ptrdiff_t)((n + CHUNK_ELEMS - 1) / CHUNK_ELEMS);
#pragma omp parallel for schedule(static)
    for (ptrdiff_t b = 0; b < blocks; b++) {
        const size_t lo = (size_t)b * CHUNK_ELEMS, hi = lo + CHUNK_ELEMS < n ? lo + CHUNK_ELEMS : n;
        for (size_t i = lo; i < hi; i++) dst[i] = gpt_f32_to_bf16(src[i]);
    }
}

void cpu_round_bf16_in_place(void *buf, size_t n)
{
    const float *src = buf;
    uint16_t *dst = buf;
    for (size_t i = 0; i < n; i++) dst[i] = gpt_f32_to_bf16(src[i]);
}
