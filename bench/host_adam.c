/*
 * host_adam.c — what the host side of an offloading engine can do, measured in one run:
 *
 *   1. host memory bandwidth: STREAM-style copy (a = b) and triad (a = b + s c) over arrays
 *      far larger than the last-level cache, multi-threaded (OpenMP, static schedule, the
 *      arrays first touched by the threads that use them).  GB/s in STREAM's convention:
 *      bytes the kernel names (copy 8 B, triad 12 B per float), write-allocate not counted;
 *      and an in-place update (a = a + s b, 12 B), whose traffic is all counted, as Adam's
 *      is: the fair ceiling for an in-place kernel (triad really moves 16 B per float).
 *   2. the CPU Adam pool (engines/runtime/cpu_adam.h) per ISA and thread count: G params/s
 *      and GB/s at 28 B/param (reads p, g, m, v; writes p, m, v — in place, so there is no
 *      write-allocate traffic to leave out), and that GB/s as a fraction of the triad's
 *      (the target of the shared design doc PERFORMANCE.md, not in this repository: >= 90%).
 *   3. a bit-exactness check of every SIMD path against the scalar one (the unit test does
 *      this in CI; here it covers the ISAs of the machine the bench runs on).
 *   4. with CUDA (AEBENCH_HAVE_CUDA): pinned host<->GPU copies through the backend's
 *      streams, 1 GiB each way, and both directions at once on two streams.
 *
 *   build/bench/host_adam [--gib N] [--threads N] [--reps N]
 *     --gib      working set of the bandwidth and Adam runs, GiB (default 4)
 *     --threads  the most threads to use (default: online cores); also runs 1, 2, 4, ...
 *     --reps     timed repetitions; the best is reported (default 5)
 */
#include "../engines/runtime/cpu_adam.h"
#include "../engines/runtime/timer.h"
#include "../kernels/gpt.h"
#include "../kernels/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct bench_options {
    double gib;
    int max_threads;
    int reps;
} bench_options;

static int parse_options(int argc, char **argv, bench_options *o)
{
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    o->gib = 4.0;
    o->max_threads = online > 0 ? (int)online : 1;
    o->reps = 5;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(arg, "--gib") == 0 && val) {
            o->gib = atof(val);
            i++;
        } else if (strcmp(arg, "--threads") == 0 && val) {
            o->max_threads = atoi(val);
            i++;
        } else if (strcmp(arg, "--reps") == 0 && val) {
            o->reps = atoi(val);
            i++;
        } else {
            fprintf(stderr, "usage: %s [--gib N] [--threads N] [--reps N]\n", argv[0]);
            return -1;
        }
    }
    if (!(o->gib > 0) || o->max_threads < 1 || o->reps < 1) {
        fprintf(stderr, "host_adam: --gib, --threads and --reps must be positive\n");
        return -1;
    }
    return 0;
}

static float *alloc_floats(size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, n * sizeof(float)) != 0) {
        fprintf(stderr, "host_adam: cannot allocate %.2f GiB\n",
                (double)n * sizeof(float) / (1u << 30));
        exit(1);
    }
    return p;
}

/* ---- 1. host memory bandwidth ------------------------------------------------------------ */

typedef struct stream_result {
    double copy_gbs, triad_gbs, update_gbs;
} stream_result;

static stream_result measure_stream(size_t n, int threads, int reps)
{
    float *a = alloc_floats(n), *b = alloc_floats(n), *c = alloc_floats(n);
#pragma omp parallel for schedule(static) num_threads(threads)
    for (size_t i = 0; i < n; i++) {
        a[i] = 0.0f;
        b[i] = 1.0f;
        c[i] = 2.0f;
    }
    double best_copy = 1e30, best_triad = 1e30, best_update = 1e30;
    const float scalar = 3.0f;
    for (int r = 0; r < reps; r++) {
        double t0 = wall_ms();
#pragma omp parallel for schedule(static) num_threads(threads)
        for (size_t i = 0; i < n; i++)
            a[i] = b[i];
        double t1 = wall_ms();
#pragma omp parallel for schedule(static) num_threads(threads)
        for (size_t i = 0; i < n; i++)
            a[i] = b[i] + scalar * c[i];
        double t2 = wall_ms();
#pragma omp parallel for schedule(static) num_threads(threads)
        for (size_t i = 0; i < n; i++)
            a[i] = a[i] + scalar * c[i];
        double t3 = wall_ms();
        if (t1 - t0 < best_copy) best_copy = t1 - t0;
        if (t2 - t1 < best_triad) best_triad = t2 - t1;
        if (t3 - t2 < best_update) best_update = t3 - t2;
    }
    /* read a value so the compiler cannot drop the loops */
    volatile float sink = a[n / 2];
    (void)sink;
    free(a);
    free(b);
    free(c);
    stream_result res = {8.0 * (double)n / (best_copy * 1e6), 12.0 * (double)n / (best_triad * 1e6),
                         12.0 * (double)n / (best_update * 1e6)};
    return res;
}

/* ---- 2. the Adam pool ----------------------------------------------------------------------- */

typedef struct adam_arrays {
    float *p, *g, *m, *v;
    uint16_t *w; /* the bf16 working copy the bf16 engines' host Adam also writes */
    size_t n;
} adam_arrays;

static adam_arrays adam_arrays_new(size_t n, int threads)
{
    adam_arrays a = {alloc_floats(n), alloc_floats(n), alloc_floats(n), alloc_floats(n),
                     (uint16_t *)(void *)alloc_floats(n / 2 + 1), n}; /* (w: n halves) */
#pragma omp parallel for schedule(static) num_threads(threads)
    for (size_t i = 0; i < n; i++) {
        a.p[i] = 0.01f * (float)(i % 97);
        a.g[i] = 1e-3f * (float)(i % 89) - 0.04f;
        a.m[i] = 0.0f;
        a.v[i] = 0.0f;
        a.w[i] = 0;
    }
    return a;
}

static void adam_arrays_free(adam_arrays *a)
{
    free(a->p);
    free(a->g);
    free(a->m);
    free(a->v);
    free(a->w);
}

static cpu_adam_job job_over(adam_arrays *a, size_t lo, size_t n, int t)
{
    cpu_adam_job j = {.params = a->p + lo, .grads = a->g + lo, .m = a->m + lo, .v = a->v + lo,
                      .n = n, .n_decay = n - n / 100, .optim = gpt_optim_default(),
                      .lr = 1e-4f, .t = t, .grad_scale = 0.9f, .after = NULL};
    return j;
}

/* Best time of `reps` updates over the whole array, ms; negative on failure.  bf16: the
 * update also writes the bf16 working copy (params_bf16). */
static double time_adam(const char *isa, int threads, adam_arrays *a, int reps, int bf16)
{
    cpu_adam *pool;
    if (cpu_adam_create_isa(&pool, threads, isa) != GPT_OK)
        return -1.0;
    double best = 1e30;
    for (int r = 0; r <= reps; r++) { /* r = 0 warms up */
        cpu_adam_job j = job_over(a, 0, a->n, r + 1);
        if (bf16) j.params_bf16 = a->w;
        double t0 = wall_ms();
        if (cpu_adam_run(pool, &j) != GPT_OK) {
            cpu_adam_destroy(pool);
            return -1.0;
        }
        double ms = wall_ms() - t0;
        if (r > 0 && ms < best) best = ms;
    }
    cpu_adam_destroy(pool);
    return best;
}

/* ---- 3. exactness of every SIMD path ------------------------------------------------------ */

static int check_exact(const char *isa, int threads)
{
    const size_t n = 1000003; /* odd: every path has a scalar tail */
    adam_arrays want = adam_arrays_new(n, 1), got = adam_arrays_new(n, 1);
    cpu_adam *scalar_pool, *pool;
    int ok = cpu_adam_create_isa(&scalar_pool, 1, "scalar") == GPT_OK &&
             cpu_adam_create_isa(&pool, threads, isa) == GPT_OK;
    for (int t = 1; ok && t <= 3; t++) {
        cpu_adam_job jw = job_over(&want, 0, n, t), jg = job_over(&got, 0, n, t);
        jw.n_decay = jg.n_decay = 777773; /* an unaligned boundary */
        ok = cpu_adam_run(scalar_pool, &jw) == GPT_OK && cpu_adam_run(pool, &jg) == GPT_OK;
    }
    ok = ok && memcmp(want.p, got.p, n * sizeof(float)) == 0 &&
         memcmp(want.m, got.m, n * sizeof(float)) == 0 &&
         memcmp(want.v, got.v, n * sizeof(float)) == 0;
    if (scalar_pool) cpu_adam_destroy(scalar_pool);
    if (pool) cpu_adam_destroy(pool);
    adam_arrays_free(&want);
    adam_arrays_free(&got);
    return ok;
}

/* ---- 4. PCIe through the backend -------------------------------------------------------- */

#ifdef AEBENCH_HAVE_CUDA
static int measure_pcie(int reps)
{
    gpt_backend *be;
    if (gpt_cuda_backend_create(&be, 0, 1) != GPT_OK) {
        printf("\npcie: no usable CUDA device\n");
        return 0;
    }
    const size_t bytes = (size_t)1 << 30;
    void *host_in = NULL, *host_out = NULL, *dev_in = NULL, *dev_out = NULL;
    gpt_stream *h2d = NULL, *d2h = NULL;
    gpt_event *e0 = NULL, *e1 = NULL, *f0 = NULL, *f1 = NULL;
    int rc = gpt_host_alloc_pinned(be, &host_in, bytes);
    if (!rc) rc = gpt_host_alloc_pinned(be, &host_out, bytes);
    if (!rc) rc = be->ops->dev_alloc(be, &dev_in, bytes);
    if (!rc) rc = be->ops->dev_alloc(be, &dev_out, bytes);
    if (!rc) rc = be->ops->stream_create(be, &h2d);
    if (!rc) rc = be->ops->stream_create(be, &d2h);
    if (!rc) rc = gpt_event_create(be, &e0);
    if (!rc) rc = gpt_event_create(be, &e1);
    if (!rc) rc = gpt_event_create(be, &f0);
    if (!rc) rc = gpt_event_create(be, &f1);
    if (!rc) {
        memset(host_in, 1, bytes);
        memset(host_out, 2, bytes);
    }
    double best_h2d = 1e30, best_d2h = 1e30, best_both = 1e30;
    for (int r = 0; !rc && r <= reps; r++) {
        float ms_h2d = 0, ms_d2h = 0;
        /* one direction at a time, timed by events on the stream */
        if ((rc = gpt_event_record(e0, h2d)) || (rc = gpt_memcpy_h2d(h2d, dev_in, host_in, bytes)) ||
            (rc = gpt_event_record(e1, h2d)) || (rc = gpt_event_sync(e1)) ||
            (rc = gpt_event_elapsed_ms(&ms_h2d, e0, e1)))
            break;
        if ((rc = gpt_event_record(f0, d2h)) || (rc = gpt_memcpy_d2h(d2h, host_out, dev_out, bytes)) ||
            (rc = gpt_event_record(f1, d2h)) || (rc = gpt_event_sync(f1)) ||
            (rc = gpt_event_elapsed_ms(&ms_d2h, f0, f1)))
            break;
        /* both at once, on two streams: wall time from issue to both done */
        double t0 = wall_ms();
        if ((rc = gpt_memcpy_h2d(h2d, dev_in, host_in, bytes)) ||
            (rc = gpt_memcpy_d2h(d2h, host_out, dev_out, bytes)) ||
            (rc = gpt_stream_sync(h2d)) || (rc = gpt_stream_sync(d2h)))
            break;
        double ms_both = wall_ms() - t0;
        if (r == 0) continue; /* warm-up */
        if (ms_h2d < best_h2d) best_h2d = ms_h2d;
        if (ms_d2h < best_d2h) best_d2h = ms_d2h;
        if (ms_both < best_both) best_both = ms_both;
    }
    char desc[256];
    be->ops->describe(be, desc, sizeof desc);
    if (rc == 0) {
        const double gb = (double)bytes / 1e9;
        printf("\npcie (%s), pinned, 1 GiB copies, best of %d\n", desc, reps);
        printf("  host->gpu          %7.1f GB/s\n", gb / (best_h2d * 1e-3));
        printf("  gpu->host          %7.1f GB/s\n", gb / (best_d2h * 1e-3));
        printf("  both at once       %7.1f GB/s total\n", 2 * gb / (best_both * 1e-3));
    } else {
        printf("\npcie: failed (%d)\n", rc);
    }
    gpt_event_destroy(e0);
    gpt_event_destroy(e1);
    gpt_event_destroy(f0);
    gpt_event_destroy(f1);
    if (h2d) be->ops->stream_destroy(h2d);
    if (d2h) be->ops->stream_destroy(d2h);
    if (dev_in) be->ops->dev_free(be, dev_in);
    if (dev_out) be->ops->dev_free(be, dev_out);
    if (host_in) gpt_host_free_pinned(be, host_in);
    if (host_out) gpt_host_free_pinned(be, host_out);
    gpt_cuda_backend_destroy(be);
    return rc;
}
#endif

static int isa_available(const char *isa)
{
    __builtin_cpu_init();
    if (strcmp(isa, "avx512") == 0) return __builtin_cpu_supports("avx512f");
    if (strcmp(isa, "avx2") == 0) return __builtin_cpu_supports("avx2");
    return 1;
}

/* ---- the table ------------------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    bench_options o;
    if (parse_options(argc, argv, &o) != 0)
        return 2;
    const size_t bytes = (size_t)(o.gib * (double)(1u << 30));
    const size_t stream_n = bytes / (3 * sizeof(float)); /* three arrays */
    const size_t adam_n = bytes / (4 * sizeof(float));   /* four arrays */

    /* thread counts: 1, 2, 4, ... below the maximum, and the maximum */
    int counts[32], ncounts = 0;
    for (int t = 1; t < o.max_threads && ncounts < 31; t *= 2) counts[ncounts++] = t;
    counts[ncounts++] = o.max_threads;

    printf("host_adam: working set %.2f GiB, up to %d threads, best of %d\n", o.gib,
           o.max_threads, o.reps);
    printf("\nhost memory (copy 8 B, triad 12 B, in-place update 12 B per float)\n");
    printf("  threads   copy GB/s  triad GB/s  update GB/s\n");
    double triad_at[32], update_at[32];
    for (int k = 0; k < ncounts; k++) {
        stream_result sr = measure_stream(stream_n, counts[k], o.reps);
        triad_at[k] = sr.triad_gbs;
        update_at[k] = sr.update_gbs;
        printf("  %7d   %9.1f  %10.1f  %11.1f\n", counts[k], sr.copy_gbs, sr.triad_gbs,
               sr.update_gbs);
    }

    printf("\ncpu_adam: %.3f G params per update (28 B/param), best of %d\n",
           (double)adam_n / 1e9, o.reps);
    printf("  isa      threads  G params/s     GB/s  of triad  of update  bit-identical\n");
    const char *isas[] = {"scalar", "avx2", "avx512"};
    adam_arrays arrays = adam_arrays_new(adam_n, o.max_threads);
    for (int i = 0; i < 3; i++) {
        if (!isa_available(isas[i])) {
            printf("  %-8s (not on this CPU)\n", isas[i]);
            continue;
        }
        const int exact = check_exact(isas[i], o.max_threads);
        for (int k = 0; k < ncounts; k++) {
            double ms = time_adam(isas[i], counts[k], &arrays, o.reps, 0);
            if (ms < 0) {
                printf("  %-8s %7d  failed\n", isas[i], counts[k]);
                continue;
            }
            const double gps = (double)adam_n / (ms * 1e6);
            const double gbs = 28.0 * gps;
            printf("  %-8s %7d  %10.3f  %7.1f  %7.0f%%  %8.0f%%  %s\n", isas[i], counts[k], gps,
                   gbs, 100.0 * gbs / triad_at[k], 100.0 * gbs / update_at[k],
                   exact ? "yes" : "NO");
        }
    }
    /* the bf16 engines' update: the same, and the bf16 working copy written (30 B/param) */
    printf("\ncpu_adam with the bf16 working copy written too (30 B/param), %d threads\n", o.max_threads);
    printf("  isa      G params/s     GB/s  of update  vs fp32 only\n");
    for (int i = 1; i < 3; i++) {
        if (!isa_available(isas[i]))
            continue;
        const double ms32 = time_adam(isas[i], o.max_threads, &arrays, o.reps, 0);
        const double ms16 = time_adam(isas[i], o.max_threads, &arrays, o.reps, 1);
        if (ms32 < 0 || ms16 < 0) {
            printf("  %-8s failed\n", isas[i]);
            continue;
        }
        const double gps = (double)adam_n / (ms16 * 1e6);
        printf("  %-8s %10.3f  %7.1f  %8.0f%%  %9.2fx time\n", isas[i], gps, 30.0 * gps,
               100.0 * 30.0 * gps / update_at[ncounts - 1], ms16 / ms32);
    }
    adam_arrays_free(&arrays);

#ifdef AEBENCH_HAVE_CUDA
    if (measure_pcie(o.reps) != 0)
        return 1;
#endif
    return 0;
}
