/*
 * adam_jobs.c — the host Adam pool (engines/runtime/cpu_adam.h) on update jobs of several
 * sizes, as an offloading engine runs them: one region of TOTAL parameters (p, g, m, v fp32 and
 * a bf16 working copy, allocated and zeroed as the engines' host state is: host_pages), swept
 * job after job at each size.  Does a job cost something beyond its parameters (latency), and is
 * the rate per parameter the same for a layer of 25 M as of 101 M?  (--calibrate times one 64 M
 * block, and a quarter of it, for the latency.)  Started by several processes at once (START: a
 * Unix time to wait for), each its own pool, the ranks of a machine sharing its host memory.
 *
 *   build/bench/adam_jobs [--threads N] [--total-m M] [--sizes-m 16,25,64,101] [--start UNIX]
 *                         [--sweep-m S] [--fp32]
 * Prints, per size: jobs, ms per job (median and fastest of the sweeps), ms per M parameters.
 * --sweep-m: the jobs sweep only the region's first S M parameters (is it the region's size
 * or the part swept that sets the rate?); --fp32: the update without the bf16 copy (28 B a
 * parameter, not 30).  The host's available memory (MemAvailable) is printed before and after
 * the region is allocated: a calibration sizes its region by it.
 */
#include "../engines/runtime/cpu_adam.h"
#include "../engines/runtime/timer.h"
#include "../kernels/host_pages.h"
#include "../kernels/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { SWEEPS = 5, MAX_SIZES = 16 };

/* MemAvailable in GB (gpt_host_mem_info, as a calibration sizes its region), -1 where unknown */
static double mem_available_gb(void)
{
    size_t avail = 0;
    return gpt_host_mem_info(&avail, NULL) == 0 ? avail / 1e9 : -1;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    int threads = 0;
    double total_m = 1024, sweep_m = 0;
    long start = 0;
    int fp32 = 0;
    double sizes_m[MAX_SIZES] = {16, 25, 64, 101};
    int nsizes = 4;
    for (int i = 1; i < argc; i++) {
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--fp32") == 0) {
            fp32 = 1;
            continue;
        }
        if (!val) {
            fprintf(stderr, "adam_jobs: %s wants a value\n", argv[i]);
            return 2;
        }
        if (strcmp(argv[i], "--threads") == 0) threads = atoi(val);
        else if (strcmp(argv[i], "--total-m") == 0) total_m = atof(val);
        else if (strcmp(argv[i], "--start") == 0) start = atol(val);
        else if (strcmp(argv[i], "--sweep-m") == 0) sweep_m = atof(val);
        else if (strcmp(argv[i], "--sizes-m") == 0) {
            nsizes = 0;
            for (char *s = argv[i + 1], *tok; nsizes < MAX_SIZES && (tok = strtok(s, ",")); s = NULL)
                sizes_m[nsizes++] = atof(tok);
        } else {
            fprintf(stderr, "usage: %s [--threads N] [--total-m M] [--sizes-m A,B,...] [--start UNIX] [--sweep-m S] [--fp32]\n",
                    argv[0]);
            return 2;
        }
        i++;
    }
    const size_t total = (size_t)(total_m * 1e6);
    const size_t swept = sweep_m > 0 && sweep_m < total_m ? (size_t)(sweep_m * 1e6) : total;
    const double avail_before = mem_available_gb();
    float *p = NULL, *g = NULL, *m = NULL, *v = NULL;
    uint16_t *w = NULL;
    cpu_adam *pool = NULL;
    if (host_pages_alloc_zeroed((void **)&p, total * sizeof *p) || host_pages_alloc_zeroed((void **)&g, total * sizeof *g) ||
        host_pages_alloc_zeroed((void **)&m, total * sizeof *m) || host_pages_alloc_zeroed((void **)&v, total * sizeof *v) ||
        host_pages_alloc_zeroed((void **)&w, total * sizeof *w) || cpu_adam_create(&pool, threads) != 0) {
        fprintf(stderr, "adam_jobs: out of memory for %.0f M parameters, or no pool\n", total_m);
        return 1;
    }
    while (start > 0 && time(NULL) < start) usleep(10000);
    printf("pid %d: %d threads, a region of %.0f M parameters, %.0f M of it swept, %s; MemAvailable %.1f GB before, %.1f after\n",
           (int)getpid(), cpu_adam_threads(pool), total_m, swept / 1e6, fp32 ? "fp32" : "bf16 copy written", avail_before,
           mem_available_gb());
    printf("| job M params | jobs a sweep | ms a job, median | fastest | ms per M, median |\n|---|---|---|---|---|\n");
    int step = 1;
    for (int s = 0; s < nsizes; s++) {
        const size_t n = (size_t)(sizes_m[s] * 1e6);
        const size_t jobs = n > 0 ? swept / n : 0;
        if (jobs == 0) continue;
        double per_job[SWEEPS];
        for (int r = 0; r < SWEEPS; r++) {
            const double t0 = wall_ms();
            for (size_t k = 0; k < jobs; k++) {
                const size_t at = k * n;
                const cpu_adam_job job = {.params = p + at, .grads = g + at, .m = m + at, .v = v + at, .n = n,
                                          .n_decay = n / 2, .optim = gpt_optim_default(), .lr = 1e-4f, .t = step++,
                                          .grad_scale = 1.0f, .params_bf16 = fp32 ? NULL : w + at};
                if (cpu_adam_run(pool, &job) != 0) {
                    fprintf(stderr, "adam_jobs: the pool failed\n");
                    return 1;
                }
            }
            per_job[r] = (wall_ms() - t0) / (double)jobs;
        }
        qsort(per_job, SWEEPS, sizeof per_job[0], cmp_double);
        printf("| %.0f | %zu | %.3f | %.3f | %.4f |\n", sizes_m[s], jobs, per_job[SWEEPS / 2], per_job[0],
               per_job[SWEEPS / 2] / (n / 1e6));
    }
    cpu_adam_destroy(pool);
    free(p);
    free(g);
    free(m);
    free(v);
    free(w);
    return 0;
}
