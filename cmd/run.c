/*
 * run.c — one training run of one engine, from its plan to its record.  One file past 1,000
 * lines because every section of it (setup, iterations, the watchdog's hooks, the profile
 * report, the log, the JSON) reads and writes the one run_state below.  Splitting
 * it would export that state to every part.
 */
#include "run.h"

#include "bound.h"
#include "../kernels/profile.h"
#include "job_dir.h"
#include "machine.h"
#include "report.h"

#include "../engines/runtime/gpu_clock.h"
#include "../engines/runtime/timer.h"
#include "../engines/runtime/watchdog.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/signalfd.h>
#include <sys/statvfs.h>
#include <unistd.h>

#ifndef AEBENCH_VERSION
#define AEBENCH_VERSION "0.1.0"
#endif

/* The GPU clock's sampling period: 20 samples a second, a few microseconds of NVML each. */
enum { RUN_CLOCK_PERIOD_MS = 50 };

/* Samples per optimizer step over all ranks, and per rank. */
static int global_batch_of(const engine_config *ec)
{
    return ec->shape.batch * engine_micro_batches(ec) * engine_world(ec);
}
static int rank_batch_of(const engine_config *ec)
{
    return ec->shape.batch * engine_micro_batches(ec);
}

/* Per-iteration record kept for the JSON (and the engine's report hooks). */
typedef engine_iteration iter_record;

/* Everything one run produces, gathered for the log, the JSON and stdout. */
typedef struct run_state {
    const run_config *rc;
    const engine_vtbl *eng;
    engine_config ec;
    engine_plan plan;
    uint64_t params;
    char window[16];
    char device_desc[160];
    FILE *log;               /* open while the run writes it; NULL on ranks other than 0 */
    int has_log;             /* this rank writes the log and JSON */
    char log_path[4200], json_path[4200];
    dev_arena gpu;
    mem_budget host;
    mem_budget disk;         /* free space of the --nvme-dir file system; used when has_disk */
    int has_disk;
    iter_record *iters;
    int done;                /* iterations completed */
    int first;               /* the first trained here, 0-based: an engine that recovered a
                                checkpoint resumes after the iterations an earlier job ran */
    char notes[16][512];     /* what the engine said (its choices, a recovery), for the JSON */
    int nnotes;
    double setup_ms;         /* the engine's init: allocation, pinning, initialisation */
    /* The budgets' set-up accounts as init left them (an engine may allocate later, e.g.
     * --clip-speculate auto's second copies: those are the run's, not its set-up's) */
    mem_budget host_at_setup, gpu_at_setup;
    double init_ms;          /* of which initialising the parameters (engine_env.init_ms) */
    engine_resume resume;    /* what the engine recovered (iteration 0: nothing) */
    machine_rates machine;   /* the calibrated machine of this shape, when there is one */
    char machine_path[4400];
    /* A recovered job's time lost (CLOCK_REALTIME seconds): the failure (from the supervisor),
     * this process's training start, and when it was back where the failed job was (the end
     * of the iteration before the failed one), 0 until then. */
    double failed_s, train_start_s, back_s;
    int back_iteration;
    int status;              /* EXIT_RUN_* */
    char message[512];       /* why, when status is not ok */
    int init_refused;        /* the engine's init failed (not out of memory) */
    const char *oom_device;  /* "GPU" or "host" when status is oom */
    const mem_budget *oom_budget;
    int world;
    int rank;
    const comm_world *comm;
    double (*rank_peaks)[2];  /* N ranks: each rank's GPU and host peak (bytes), for the JSON */
    int step_failed;          /* a step failed: the other ranks may be waiting in a collective */
    watchdog *dog;            /* this rank's (NULL: --hang-timeout 0) */
    int running;              /* the JSON being written is the record so far ("running") */
    char heartbeat_dir[4200]; /* the ranks' heartbeats, when this process made it ("" else) */
    gpt_profile *prof;        /* --profile: the timing backend the engine runs on (NULL: none) */
    gpu_clock *clock;         /* rank 0's GPU clock and power beside the steps (NULL: none) */
    char clock_why[300];      /* why there is none, on a CUDA backend */
    int clock_done;           /* sampled from the second iteration to the last, and stopped */
    int record_discarded;     /* the log and JSON were removed: the JSON could not be written */
    /* The record's writers (the log's lines, the JSON, the iterations and notes they read) take
     * record_lock: the signal watcher's record of an interruption, or the watchdog's of a hang,
     * is never written into the middle of another (recursive: a writer calls the others). */
    pthread_mutex_t record_lock;
    int record_final;         /* the last record is written: an interruption changes it no more */
    int interrupted_by;       /* the signal that stopped the run (its record says "interrupted") */
    char interrupted_why[160];
    int log_lock_fd;          /* holds a shared flock on the log while the run may still write
                                 it: a sweep's --resume removes no record of a run still going */
} run_state;

/* A write of the run's record failed (a full disk): the run ends at once, saying which file
 * and why, rather than train on and leave a record with nothing in it. */
static void record_failed(run_state *s, const char *path, int err)
{
    if (s->status != EXIT_RUN_OK) return;
    s->status = EXIT_RUN_ERROR;
    s->step_failed = 1; /* (the other ranks are ended with it: they would wait for this one) */
    snprintf(s->message, sizeof s->message, "%s writing %.400s", err == ENOSPC ? "disk full" : strerror(err), path);
}

/* record_lock, taken and given back (a failure is a bug: said, and the record written anyway) */
static void record_lock(run_state *s)
{
    const int e = pthread_mutex_lock(&s->record_lock);
    if (e) fprintf(stderr, "aebench: the run's record lock: %s\n", strerror(e));
}
static void record_unlock(run_state *s)
{
    const int e = pthread_mutex_unlock(&s->record_lock);
    if (e) fprintf(stderr, "aebench: the run's record lock: %s\n", strerror(e));
}

static void logline(run_state *s, const char *fmt, ...)
{
    record_lock(s);
    if (s->log) {
        va_list ap;
        va_start(ap, fmt);
        vfprintf(s->log, fmt, ap);
        va_end(ap);
        if (fputc('\n', s->log) == EOF || ferror(s->log)) record_failed(s, s->log_path, errno ? errno : EIO);
    }
    record_unlock(s);
}

/* engine_env.note: an engine's decision goes to the log and, on rank 0, to stdout. */
static void engine_said(void *ctx, const char *line)
{
    run_state *s = ctx;
    record_lock(s);
    logline(s, "%s", line);
    if (s->nnotes < (int)(sizeof s->notes / sizeof s->notes[0]))
        snprintf(s->notes[s->nnotes++], sizeof s->notes[0], "%s", line);
    record_unlock(s);
    if (s->rank == 0) {
        printf("  %s\n", line);
        fflush(stdout);
    }
}

/* engine_env.fault_point: the phase reached is progress for the watchdog; --fail-at's rank
 * dies where the engine says it is. */
static void engine_fault(void *ctx, int iteration, int phase)
{
    const run_state *s = ctx;
    static const char *const names[] = {"forward", "backward", "checkpoint"};
    watchdog_at(s->dog, iteration, phase >= 0 && phase <= FAULT_CHECKPOINT ? names[phase] : "step");
    if (s->rc->fail_at > 0) fault_maybe_die(s->rc, s->rank, iteration, phase);
}

/* The part of the engine's set-up that none of the measured phases covers (its own work:
 * streams, events, copies to the GPU, the -w auto probe). */
static double setup_rest_ms(const run_state *s)
{
    const double rest = s->setup_ms - s->host_at_setup.pinned_ms - s->gpu_at_setup.alloc_ms - s->host_at_setup.alloc_ms -
                        s->init_ms;
    return rest > 0 ? rest : 0;
}

/* Steps of this run whose norm the clip scaled (--clip-grad > 0; a skipped step is not
 * one): the clipped schedule is the one the offload engines run there. */
static int clipped_steps(const run_state *s)
{
    int n = 0;
    for (int i = s->first; i < s->done; i++)
        n += !s->iters[i].r.skipped && gpt_clip_scale(&s->ec.optim, s->iters[i].r.grad_norm) != 1.0f;
    return n;
}

/* Steps of this run that updated blocks ahead of the norm (--clip-speculate), and of those
 * the ones redone because the norm clipped. */
static void speculated_steps(const run_state *s, int *ahead, int *redone)
{
    *ahead = *redone = 0;
    for (int i = s->first; i < s->done; i++) {
        *ahead += s->iters[i].r.ahead_blocks > 0;
        *redone += s->iters[i].r.ahead_redone;
    }
}

/* Where the engine's set-up went: page-locking (and zeroing) host memory, the device and
 * other host allocations (host ones zeroed), initialising the parameters, and the rest. */
static void report_setup(run_state *s)
{
    s->host_at_setup = s->host;
    s->gpu_at_setup = s->gpu.budget;
    const double pinned = s->host.pinned_ms, dev = s->gpu.budget.alloc_ms + s->host.alloc_ms;
    char pb[32], db[32], hb[32], line[512];
    format_bytes((double)s->host.pinned_bytes, pb, sizeof pb);
    format_bytes((double)s->gpu.budget.alloc_bytes, db, sizeof db);
    format_bytes((double)s->host.alloc_bytes, hb, sizeof hb);
    snprintf(line, sizeof line, "setup: pinned host %s in %.2f s | GPU %s and host %s allocated in %.2f s | "
                                "parameters initialised in %.2f s | the rest %.2f s | total %.2f s",
             pb, pinned / 1e3, db, hb, dev / 1e3, s->init_ms / 1e3, setup_rest_ms(s) / 1e3, s->setup_ms / 1e3);
    logline(s, "%s", line);
    /* (on stdout too: start-up is part of what a run costs) */
    if (s->rank == 0) {
        printf("  %s\n", line);
        fflush(stdout);
    }
}

/* A set-up of many GiB takes seconds (9 s for an offload engine at l100 on the H100 machine):
 * say on stdout what is coming before it starts, from the engine's plan.  The threshold is
 * 8 GiB of GPU and host memory together, or AEBENCH_SETUP_NOTICE_MIB. */
static void announce_setup(const run_state *s, int rank)
{
    const char *env = getenv("AEBENCH_SETUP_NOTICE_MIB");
    const double threshold = (env && *env ? atof(env) : 8192.0) * (1 << 20);
    engine_plan plan = {0};
    s->eng->plan(&s->ec, &plan);
    if (rank != 0 || (double)(plan.gpu_bytes + plan.host_bytes) < threshold) return;
    char g[32], h[32];
    format_bytes((double)plan.gpu_bytes, g, sizeof g);
    format_bytes((double)plan.host_bytes, h, sizeof h);
    printf("  setting up: %s of GPU memory, %s of host memory (zeroed by every core), %.3f B parameters to "
           "initialise ...\n", g, h, (double)gpt_param_count(&s->ec.shape) / 1e9);
    fflush(stdout);
}

static void describe_shape(const engine_config *ec, char *buf, size_t len)
{
    const gpt_shape *sh = &ec->shape;
    snprintf(buf, len, "l%d h%d heads%d s%d b%d vocab%d", sh->layers, sh->hidden, sh->heads,
             sh->seq, sh->batch, sh->vocab);
}

/* Can a file be made in directory dir, opened with extra_flags (O_DIRECT: the disk tier's)?
 * Made and removed at once (access() says yes to root where the file system says no: /proc).
 * 0, or the errno (EINVAL: the file system refuses a flag). */
static int can_create_in(const char *dir, int extra_flags)
{
    char probe[PATH_MAX + 64];
    if (snprintf(probe, sizeof probe, "%s/.aebench-probe-%ld", dir, (long)getpid()) >= (int)sizeof probe)
        return ENAMETOOLONG;
    const int fd = open(probe, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | extra_flags, 0600);
    const int e = fd < 0 ? errno : 0;
    if (fd >= 0) close(fd);
    if (fd >= 0 || e == EINVAL) unlink(probe); /* (some file systems make the file, then refuse the flag) */
    return e;
}

/* The run's outputs can be written: said now, before any training, not after it (issue 29).
 * --save-params's file must be a regular file we can write, or one we can create (made and
 * removed here); then the results directory is made (where the run writes first) and must
 * take files — or, without make_results_dir, the deepest existing part of its path must. */
int run_outputs_refused(const run_config *rc, int make_results_dir, char *err, size_t errlen)
{
    if (rc->save_params[0]) {
        const char *p = rc->save_params;
        struct stat st;
        if (strcmp(p, rc->results_dir) == 0) {
            snprintf(err, errlen, "--save-params %.500s: that is the results directory", p);
            return -1;
        }
        int fd = -1, made = 0, e = 0;
        if (stat(p, &st) == 0 && !S_ISREG(st.st_mode)) {
            snprintf(err, errlen, "--save-params %.500s: not a regular file (a file to write the parameters to "
                     "was expected)", p);
            return -1;
        }
        fd = open(p, O_WRONLY | O_CLOEXEC | O_NONBLOCK); /* (no O_TRUNC: the file is replaced at the end) */
        if (fd < 0 && errno == ENOENT) {
            fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
            made = fd >= 0;
        }
        e = fd < 0 ? errno : 0;
        if (fd >= 0) close(fd);
        if (made) unlink(p);
        if (e) {
            snprintf(err, errlen, "--save-params %.500s: cannot write there: %s", p, strerror(e));
            return -1;
        }
    }
    if (rc->eng.offload == OFFLOAD_NVME && rc->eng.nvme_dir[0]) {
        /* the disk tier's directory: a directory that takes files opened with O_DIRECT */
        struct stat st;
        const char *d = rc->eng.nvme_dir;
        if (stat(d, &st) != 0 || !S_ISDIR(st.st_mode)) {
            snprintf(err, errlen, "--nvme-dir %.500s: %s (a directory on the disk to swap to was expected)", d,
                     stat(d, &st) != 0 ? strerror(errno) : "not a directory");
            return -1;
        }
        const int e = can_create_in(d, O_DIRECT);
        if (e == EINVAL)
            snprintf(err, errlen, "--nvme-dir %.500s: its file system takes no O_DIRECT I/O (the disk tier needs it)",
                     d);
        else if (e)
            snprintf(err, errlen, "--nvme-dir %.500s: no file can be made there (%s)", d, strerror(e));
        if (e) return -1;
    }
    if (make_results_dir) {
        if (report_make_dirs(rc->results_dir, err, errlen) != 0) return -1;
        const int e = can_create_in(rc->results_dir, 0);
        if (e) {
            snprintf(err, errlen, "--results %.500s: no file can be made there: %s", rc->results_dir, strerror(e));
            return -1;
        }
        return 0;
    }
    /* Not made yet (the --ranks supervisor: its ranks may still refuse the run, which must then
     * leave nothing, not an empty directory): the deepest part of the path that exists must be
     * a directory that takes files, so that rank 0 can make the rest. */
    char existing[PATH_MAX];
    if (snprintf(existing, sizeof existing, "%s", rc->results_dir) >= (int)sizeof existing) {
        snprintf(err, errlen, "--results: the path is too long");
        return -1;
    }
    struct stat st;
    while (stat(existing, &st) != 0) {
        if (errno != ENOENT) {
            snprintf(err, errlen, "--results %.500s: %s", existing, strerror(errno));
            return -1;
        }
        char *slash = strrchr(existing, '/');
        while (slash && slash > existing && slash[1] == '\0') { /* (a trailing '/') */
            *slash = '\0';
            slash = strrchr(existing, '/');
        }
        if (!slash) snprintf(existing, sizeof existing, ".");
        else if (slash == existing) existing[1] = '\0'; /* ("/") */
        else *slash = '\0';
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "--results %.500s: %.500s is not a directory", rc->results_dir, existing);
        return -1;
    }
    const int e = can_create_in(existing, 0);
    if (e) {
        snprintf(err, errlen, "--results %.500s: no file can be made in %.500s: %s", rc->results_dir, existing,
                 strerror(e));
        return -1;
    }
    return 0;
}

void run_dry(const run_config *rc, const engine_vtbl *eng)
{
    engine_plan plan;
    eng->plan(&rc->eng, &plan);
    uint64_t P = gpt_param_count(&rc->eng.shape);
    char shape[128], g[32], h[32], d[32], line[256];
    describe_shape(&rc->eng, shape, sizeof shape);
    format_bytes((double)plan.gpu_bytes, g, sizeof g);
    format_bytes((double)plan.host_bytes, h, sizeof h);
    format_bytes((double)plan.disk_bytes, d, sizeof d);
    fmt_params_line(line, sizeof line, P);
    printf("%s\n", line);
    printf("%s | %s | %.3f B parameters (%llu) | recompute %s\n", eng->name, shape,
           (double)P / 1e9, (unsigned long long)P, gpt_recompute_name(rc->eng.recompute));
    printf("plan: GPU %s (%llu bytes) | host %s (%llu bytes) | disk %s (%llu bytes)\n", g,
           (unsigned long long)plan.gpu_bytes, h, (unsigned long long)plan.host_bytes, d,
           (unsigned long long)plan.disk_bytes);
}

/* Record an out-of-memory outcome from a budget's record. */
static void set_oom(run_state *s, const mem_budget *b)
{
    s->status = EXIT_RUN_OOM;
    s->oom_device = b->device;
    s->oom_budget = b;
    mem_budget_oom_message(b, s->message, sizeof s->message);
}

/* The plan must fit the budgets before anything is allocated. */
static int check_plan(run_state *s)
{
    mem_budget probe;
    mem_budget_init(&probe, "GPU", s->gpu.budget.limit);
    if (mem_budget_take(&probe, s->plan.gpu_bytes, "the run (its plan)")) {
        s->gpu.budget = probe; /* keep the record for the report */
        set_oom(s, &s->gpu.budget);
        return -1;
    }
    mem_budget_init(&probe, "host", s->host.limit);
    if (mem_budget_take(&probe, s->plan.host_bytes, "the run (its plan)")) {
        s->host = probe;
        set_oom(s, &s->host);
        return -1;
    }
    if (s->has_disk) {
        mem_budget_init(&probe, "disk", s->disk.limit);
        if (mem_budget_take(&probe, s->plan.disk_bytes, "the run (its plan)")) {
            s->disk = probe;
            set_oom(s, &s->disk);
            return -1;
        }
    }
    return 0;
}

static cJSON *json_budget(const mem_budget *b, uint64_t planned)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "limit_bytes", (double)b->limit);
    cJSON_AddNumberToObject(o, "planned_bytes", (double)planned);
    cJSON_AddNumberToObject(o, "peak_bytes", (double)b->peak);
    /* How far the measured peak is from the plan: engines are held to 10%. */
    cJSON_AddNumberToObject(o, "peak_over_plan", planned ? (double)b->peak / (double)planned : 0);
    return o;
}

/* What a median over the steps is of: their time, or their bound (bound.h: the roofline, or
 * the clipped schedule's; only the steps that report busy times have one). */
enum { STEP_MS, STEP_ROOFLINE, STEP_SCHEDULE_BOUND };

/* The median of `what` over the measured iterations, leaving out the first (it carries
 * one-time costs: first touch of memory, library warm-up) whenever there is more than one;
 * 0 when no step has it. */
static double median_over_steps(const run_state *s, int what)
{
    const int n = s->done - s->first, skip = n > 1;
    if (n <= 0) return 0;
    double *v = malloc(sizeof(double) * (size_t)n);
    if (!v) return what == STEP_MS ? s->iters[s->done - 1].ms : 0;
    int m = 0;
    for (int i = skip; i < n; i++) {
        const iter_record *it = &s->iters[s->first + i];
        if (what == STEP_MS) v[m++] = it->ms;
        else if (it->r.has_busy)
            v[m++] = what == STEP_ROOFLINE ? bound_roofline_ms(it->r.busy_ms)
                                           : bound_schedule_ms(s->eng, &s->ec, it->r.busy_ms);
    }
    const double med = m ? median_of(v, m) : 0;
    free(v);
    return med;
}

static double median_iteration_ms(const run_state *s) { return median_over_steps(s, STEP_MS); }

/* The run so far, for the engine's report hooks (engine.h): its lines go to this run's log. */
static void report_line(void *ctx, const char *text) { logline(ctx, "%s", text); }
static engine_report report_of(run_state *s)
{
    return (engine_report){.cfg = &s->ec, .iters = s->iters, .first = s->first, .done = s->done,
                           .line = report_line, .line_ctx = s};
}

/* ---- --profile: where a step goes, op family by family (kernels/profile.h) -------------------- */

/* The mean step (ms) over the steps the profile counts (those after the first). */
static double profiled_step_ms(const run_state *s)
{
    const int n = s->done - s->first, skip = n > 1;
    double sum = 0;
    for (int i = s->first + skip; i < s->done; i++) sum += s->iters[i].ms;
    return n - skip > 0 ? sum / (n - skip) : 0;
}

/* Each op family that ran, in the table's order (the most time first), into rows; how many. */
static int profile_rows(const run_state *s, gpt_profile_family rows[PROF_OPS])
{
    int n = 0;
    for (int f = 0; f < PROF_OPS; f++) {
        gpt_profile_family_of(s->prof, (gpt_profile_op)f, &rows[n]);
        if (rows[n].calls > 0) n++;
    }
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && rows[j].ms > rows[j - 1].ms; j--) {
            const gpt_profile_family t = rows[j];
            rows[j] = rows[j - 1], rows[j - 1] = t;
        }
    return n;
}

/* The table, into the log (every rank's own) and, on rank 0, stdout. */
static void report_profile(run_state *s)
{
    if (!s->prof || s->done <= s->first) return;
    gpt_profile_family rows[PROF_OPS];
    const int n = profile_rows(s, rows), steps = gpt_profile_steps(s->prof);
    const double step = profiled_step_ms(s);
    double ops = 0;
    for (int i = 0; i < n; i++) ops += rows[i].ms;
    ops /= steps > 0 ? steps : 1;
    logline(s, "profile | %d step%s | step %.2f ms | ops' device time %.2f ms/step (every stream) | untimed ops: %lld",
            steps, steps == 1 ? "" : "s", step, ops, gpt_profile_untimed(s->prof));
    if (s->rank == 0)
        printf("  profile (%d step%s, %.2f ms each; ops' device time on every stream %.2f ms):\n"
               "    %-28s %10s %10s %8s %10s %8s\n", steps, steps == 1 ? "" : "s", step, ops, "op", "calls/step",
               "ms/step", "of step", "TFLOP/s", "GB/s");
    for (int i = 0; i < n; i++) {
        const gpt_profile_family *r = &rows[i];
        const double per = r->ms / steps, tflops = r->ms > 0 && r->flops > 0 ? r->flops / (r->ms * 1e-3) / 1e12 : 0,
                     gbps = r->ms > 0 && r->bytes > 0 ? r->bytes / (r->ms * 1e-3) / 1e9 : 0;
        logline(s, "profile op | %s | calls/step: %.1f | ms/step: %.3f | of step: %.1f%% | TFLOP/s: %.2f | GB/s: %.2f",
                r->name, (double)r->calls / steps, per, step > 0 ? 100 * per / step : 0, tflops, gbps);
        if (s->rank == 0)
            printf("    %-28s %10.1f %10.3f %7.1f%% %10.2f %8.2f\n", r->name, (double)r->calls / steps, per,
                   step > 0 ? 100 * per / step : 0, tflops, gbps);
    }
    /* each stream: its ops' time and the gaps between them (launches, waits) */
    for (int k = 0; k < gpt_profile_nstreams(s->prof); k++) {
        gpt_profile_stream st;
        gpt_profile_stream_of(s->prof, k, &st);
        if (st.ops == 0) continue;
        const double busy = st.busy_ms / steps, span = st.span_ms / steps;
        logline(s, "profile stream | %d | ops/step: %.1f | busy ms/step: %.3f | gaps ms/step: %.3f | span ms/step: %.3f",
                k + 1, (double)st.ops / steps, busy, span - busy, span);
        if (s->rank == 0)
            printf("    stream %d: %.1f ops/step, busy %.3f ms, gaps %.3f ms between them (span %.3f ms)\n", k + 1,
                   (double)st.ops / steps, busy, span - busy, span);
    }
}

static void json_profile(cJSON *root, const run_state *s)
{
    if (!s->prof || s->done <= s->first) return;
    gpt_profile_family rows[PROF_OPS];
    const int n = profile_rows(s, rows), steps = gpt_profile_steps(s->prof);
    cJSON *p = cJSON_AddObjectToObject(root, "profile");
    cJSON_AddNumberToObject(p, "steps", steps);
    cJSON_AddNumberToObject(p, "step_ms", profiled_step_ms(s));
    cJSON_AddNumberToObject(p, "untimed_ops", (double)gpt_profile_untimed(s->prof));
    cJSON *ops = cJSON_AddArrayToObject(p, "ops");
    for (int i = 0; i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "op", rows[i].name);
        cJSON_AddNumberToObject(o, "calls_per_step", (double)rows[i].calls / steps);
        cJSON_AddNumberToObject(o, "ms_per_step", rows[i].ms / steps);
        cJSON_AddNumberToObject(o, "flops_per_step", rows[i].flops / steps);
        cJSON_AddNumberToObject(o, "bytes_per_step", rows[i].bytes / steps);
        cJSON_AddItemToArray(ops, o);
    }
    cJSON *streams = cJSON_AddArrayToObject(p, "streams");
    for (int k = 0; k < gpt_profile_nstreams(s->prof); k++) {
        gpt_profile_stream st;
        gpt_profile_stream_of(s->prof, k, &st);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "stream", k + 1);
        cJSON_AddNumberToObject(o, "ops_per_step", (double)st.ops / steps);
        cJSON_AddNumberToObject(o, "busy_ms_per_step", st.busy_ms / steps);
        cJSON_AddNumberToObject(o, "gaps_ms_per_step", (st.span_ms - st.busy_ms) / steps);
        cJSON_AddItemToArray(streams, o);
    }
}

/* ---- the GPU's clock and power beside the steps (engines/runtime/gpu_clock.h) ------------------- */

/* Rank 0 of a CUDA run samples its GPU through NVML; elsewhere, or without NVML, the log says
 * why not. */
static void open_gpu_clock(run_state *s, gpt_backend *be)
{
    if (s->rank != 0 || strcmp(be->name, "cuda") != 0) return;
    char bus[64];
    if (gpt_cuda_backend_pci_bus_id(be, bus, (int)sizeof bus) != GPT_OK) {
        snprintf(s->clock_why, sizeof s->clock_why, "the GPU's PCI bus id is unknown");
        return;
    }
    if (gpu_clock_open_nvml(&s->clock, "libnvidia-ml.so.1", bus, RUN_CLOCK_PERIOD_MS, s->clock_why,
                            sizeof s->clock_why) != 0)
        s->clock = NULL;
}

static void report_gpu_clock(run_state *s)
{
    if (s->clock == NULL) {
        if (s->clock_why[0]) logline(s, "gpu clock | not sampled: %s", s->clock_why);
        return;
    }
    gpu_clock_summary c;
    gpu_clock_summarize(s->clock, &c);
    if (c.busy == 0) {
        logline(s, "gpu clock | no busy samples (%d samples, %d failed reads: too few iterations?)", c.samples,
                c.read_errors);
        return;
    }
    logline(s, "gpu clock | iterations %d-%d, every %d ms: %d samples, %d busy | SM MHz median %u, min %u, max %u "
            "(highest allowed %u) | power W median %.0f of %.0f (limit) | of the busy samples: power cap %.0f%%, "
            "thermal slowdown %.0f%%, hardware slowdown %.0f%%",
            s->first + 2, s->done, c.period_ms, c.samples, c.busy, c.sm_mhz_median, c.sm_mhz_min, c.sm_mhz_max,
            c.sm_mhz_allowed, c.power_w_median, c.power_limit_w, 100 * c.power_cap_share, 100 * c.thermal_share,
            100 * c.hw_slowdown_share);
    printf("  gpu clock: SM %u MHz median (highest allowed %u) | power %.0f W of %.0f | power-capped %.0f%% of the "
           "busy samples\n", c.sm_mhz_median, c.sm_mhz_allowed, c.power_w_median, c.power_limit_w,
           100 * c.power_cap_share);
}

static void json_gpu_clock(cJSON *root, const run_state *s)
{
    if (s->clock == NULL && !s->clock_why[0]) return; /* (not a CUDA run) */
    if (s->clock != NULL && !s->clock_done) return;   /* (a record written while the steps run) */
    cJSON *o = cJSON_AddObjectToObject(root, "gpu_clock");
    if (o == NULL) return;
    if (s->clock == NULL) {
        cJSON_AddBoolToObject(o, "sampled", 0);
        cJSON_AddStringToObject(o, "why", s->clock_why);
        return;
    }
    gpu_clock_summary c;
    gpu_clock_summarize(s->clock, &c);
    cJSON_AddBoolToObject(o, "sampled", c.busy > 0);
    const struct {
        const char *key;
        double value;
    } fields[] = {
        {"period_ms", c.period_ms},           {"samples", c.samples},
        {"busy_samples", c.busy},             {"failed_reads", c.read_errors},
        {"sm_mhz_median", c.sm_mhz_median},   {"sm_mhz_min", c.sm_mhz_min},
        {"sm_mhz_max", c.sm_mhz_max},         {"sm_mhz_allowed", c.sm_mhz_allowed},
        {"power_w_median", c.power_w_median}, {"power_limit_w", c.power_limit_w},
        {"power_cap_share", c.power_cap_share}, {"thermal_share", c.thermal_share},
        {"hw_slowdown_share", c.hw_slowdown_share},
    };
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++)
        cJSON_AddNumberToObject(o, fields[i].key, fields[i].value);
}

static int write_json_locked(run_state *s);

/* The JSON: the record so far ("running"), the final one, or an interruption's. */
static int write_json(run_state *s)
{
    record_lock(s);
    const int rc = write_json_locked(s);
    record_unlock(s);
    return rc;
}

static int write_json_locked(run_state *s)
{
    const run_config *rc = s->rc;
    const engine_config *ec = &s->ec;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "aebench_version", AEBENCH_VERSION);
    cJSON_AddStringToObject(root, "status", s->interrupted_by            ? "interrupted"
                                            : s->running                 ? "running"
                                            : s->status == EXIT_RUN_OK  ? "ok"
                                            : s->status == EXIT_RUN_OOM ? "oom"
                                                                        : "error");
    if (s->interrupted_by) cJSON_AddStringToObject(root, "message", s->interrupted_why);
    else if (s->status != EXIT_RUN_OK) cJSON_AddStringToObject(root, "message", s->message);
    /* (the supervisor relaunches no job whose engine refused to start: it would again) */
    if (s->status != EXIT_RUN_OK && s->init_refused) cJSON_AddStringToObject(root, "failed_in", "initialisation");
    cJSON_AddStringToObject(root, "method", s->eng->name);
    cJSON_AddStringToObject(root, "device", s->device_desc);
    cJSON_AddNumberToObject(root, "world", s->world);
    cJSON_AddNumberToObject(root, "global_batch", global_batch_of(ec));
    cJSON_AddNumberToObject(root, "micro_batches", engine_micro_batches(ec));

    cJSON *cfg = cJSON_AddObjectToObject(root, "config");
    cJSON_AddNumberToObject(cfg, "layers", ec->shape.layers);
    cJSON_AddNumberToObject(cfg, "hidden", ec->shape.hidden);
    cJSON_AddNumberToObject(cfg, "heads", ec->shape.heads);
    cJSON_AddNumberToObject(cfg, "seq", ec->shape.seq);
    cJSON_AddNumberToObject(cfg, "batch", ec->shape.batch);
    cJSON_AddNumberToObject(cfg, "global_batch", global_batch_of(ec));
    cJSON_AddNumberToObject(cfg, "zero_stage", ec->zero_stage);
    cJSON_AddNumberToObject(cfg, "vocab", ec->shape.vocab);
    cJSON_AddNumberToObject(cfg, "vocab_padded", ec->shape.vocab_padded);
    cJSON_AddStringToObject(cfg, "window", s->window);
    cJSON_AddNumberToObject(cfg, "iters", rc->iters);
    cJSON_AddNumberToObject(cfg, "log_interval", rc->log_interval);
    cJSON_AddNumberToObject(cfg, "seed", (double)ec->seed);
    report_json_recompute(cfg, ec->recompute);
    /* as asked: what the engine made of it is its note ("graphs: on ...", engine_notes) */
    cJSON_AddStringToObject(cfg, "graphs", ec->graphs == GRAPHS_ON ? "on" : ec->graphs == GRAPHS_OFF ? "off" : "auto");
    char fingerprint[24];
    snprintf(fingerprint, sizeof fingerprint, "%016llx", (unsigned long long)cli_fingerprint(rc));
    cJSON_AddStringToObject(cfg, "fingerprint", fingerprint);
    if (s->ec.machine) cJSON_AddStringToObject(cfg, "machine_file", s->machine_path);
    cJSON_AddStringToObject(cfg, "dtype", ec->bf16 ? "bf16" : "fp32");
    cJSON_AddStringToObject(cfg, "math", ec->device == DEVICE_CPU ? "fp32" : ec->tf32 ? "tf32" : "fp32");
    cJSON_AddStringToObject(cfg, "backend", ec->device == DEVICE_CUDA ? "cuda" : "cpu");
    cJSON_AddStringToObject(cfg, "data", rc->data_path[0] ? rc->data_path : "synthetic");
    cJSON_AddNumberToObject(cfg, "lr", ec->optim.lr);
    cJSON_AddNumberToObject(cfg, "min_lr", ec->optim.min_lr);
    cJSON_AddNumberToObject(cfg, "lr_decay_iters", ec->optim.decay_iters);
    cJSON_AddNumberToObject(cfg, "lr_warmup_fraction", ec->optim.warmup_fraction);
    cJSON_AddNumberToObject(cfg, "weight_decay", ec->optim.weight_decay);
    cJSON_AddNumberToObject(cfg, "clip_grad", ec->optim.clip);
    cJSON_AddNumberToObject(cfg, "clip_speculate", ec->clip_speculate);
    cJSON_AddStringToObject(cfg, "placement", ec->placement == PLACE_SPREAD ? "spread" : ec->placement == PLACE_BOTTOM ? "bottom" : "auto");
    cJSON_AddNumberToObject(cfg, "threads", ec->threads);
    cJSON_AddBoolToObject(cfg, "dpu", ec->dpu);
    cJSON_AddStringToObject(cfg, "offload", ec->offload == OFFLOAD_NVME ? "nvme" : "cpu");
    if (ec->offload == OFFLOAD_NVME) cJSON_AddStringToObject(cfg, "nvme_dir", ec->nvme_dir);
    cJSON_AddBoolToObject(cfg, "cpu_preset", rc->cpu_preset);

    cJSON_AddNumberToObject(root, "parameters", (double)s->params);
    watchdog_margin wm;
    if (watchdog_get_margin(s->dog, &wm) == 0) {
        /* (this rank's: how near its watchdog came to a false alarm) */
        cJSON *wd = cJSON_AddObjectToObject(root, "watchdog");
        cJSON_AddStringToObject(wd, "hang_timeout", rc->hang_timeout_s > 0 ? "fixed" : "auto");
        cJSON_AddNumberToObject(wd, "limit_s", wm.limit_s);
        cJSON_AddNumberToObject(wd, "closest_idle_s", wm.closest_idle_s);
        cJSON_AddNumberToObject(wd, "closest_limit_s", wm.closest_limit_s);
        cJSON_AddStringToObject(wd, "closest_phase", wm.closest_phase);
        cJSON_AddNumberToObject(wd, "closest_iteration", wm.closest_iteration);
    }
    cJSON *plan = cJSON_AddObjectToObject(root, "plan");
    cJSON_AddNumberToObject(plan, "gpu_bytes", (double)s->plan.gpu_bytes);
    cJSON_AddNumberToObject(plan, "host_bytes", (double)s->plan.host_bytes);
    cJSON_AddNumberToObject(plan, "disk_bytes", (double)s->plan.disk_bytes);
    if (engine_world(ec) > 1) {
        /* (the plan above is one rank's; a machine's ranks share its host memory and disk) */
        const double local = engine_local_world(ec);
        cJSON *pm = cJSON_AddObjectToObject(plan, "per_machine");
        cJSON_AddNumberToObject(pm, "ranks", local);
        cJSON_AddNumberToObject(pm, "gpu_bytes", local * (double)s->plan.gpu_bytes);
        cJSON_AddNumberToObject(pm, "host_bytes", local * (double)s->plan.host_bytes);
        cJSON_AddNumberToObject(pm, "disk_bytes", local * (double)s->plan.disk_bytes);
    }
    cJSON *mem = cJSON_AddObjectToObject(root, "memory");
    if (s->rank_peaks) {
        cJSON *ranks = cJSON_AddArrayToObject(mem, "per_rank");
        for (int r = 0; r < s->world; r++) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "rank", r);
            cJSON_AddNumberToObject(o, "gpu_peak_bytes", s->rank_peaks[r][0]);
            cJSON_AddNumberToObject(o, "host_peak_bytes", s->rank_peaks[r][1]);
            cJSON_AddItemToArray(ranks, o);
        }
    }
    cJSON_AddItemToObject(mem, "gpu", json_budget(&s->gpu.budget, s->plan.gpu_bytes));
    cJSON *host = json_budget(&s->host, s->plan.host_bytes);
    cJSON_AddNumberToObject(host, "planned_while_ahead_bytes", (double)s->plan.host_while_ahead);
    cJSON_AddItemToObject(mem, "host", host);
    if (s->has_disk) cJSON_AddItemToObject(mem, "disk", json_budget(&s->disk, s->plan.disk_bytes));
    if (s->status == EXIT_RUN_OOM && s->oom_budget) {
        cJSON *oom = cJSON_AddObjectToObject(root, "oom");
        cJSON_AddStringToObject(oom, "memory", s->oom_device);
        cJSON_AddStringToObject(oom, "allocating", s->oom_budget->oom_what);
        cJSON_AddNumberToObject(oom, "requested_bytes", (double)s->oom_budget->oom_bytes);
        cJSON_AddNumberToObject(oom, "in_use_bytes", (double)s->oom_budget->oom_in_use);
        cJSON_AddNumberToObject(oom, "limit_bytes", (double)s->oom_budget->limit);
    }

    cJSON *setup = cJSON_AddObjectToObject(root, "setup");
    cJSON_AddNumberToObject(setup, "total_ms", s->setup_ms);
    cJSON_AddNumberToObject(setup, "pinned_host_bytes", (double)s->host_at_setup.pinned_bytes);
    cJSON_AddNumberToObject(setup, "pinned_host_ms", s->host_at_setup.pinned_ms);
    cJSON_AddNumberToObject(setup, "allocation_ms", s->gpu_at_setup.alloc_ms + s->host_at_setup.alloc_ms);
    cJSON_AddNumberToObject(setup, "host_bytes", (double)s->host_at_setup.alloc_bytes);
    cJSON_AddNumberToObject(setup, "init_ms", s->init_ms);
    cJSON_AddNumberToObject(setup, "rest_ms", setup_rest_ms(s));
    if (s->resume.iteration > 0) {
        /* the recovery: what was restored, how, and (from --ranks) how the job before ended */
        cJSON *rec = cJSON_AddObjectToObject(root, "recovery");
        cJSON_AddNumberToObject(rec, "restored_iteration", s->resume.iteration);
        cJSON_AddStringToObject(rec, "from", s->resume.from_disk ? "persistent checkpoint" : "memory");
        cJSON_AddNumberToObject(rec, "ms", s->resume.ms);
        cJSON_AddNumberToObject(rec, "fetched_bytes", s->resume.fetched_bytes);
        const char *why = getenv("AEBENCH_RECOVERY");
        if (why && *why) cJSON_AddStringToObject(rec, "previous_job", why);
        const char *at = getenv("AEBENCH_RECOVERY_FAILED_AT");
        if (at && *at) {
            cJSON_AddNumberToObject(rec, "failed_at_iteration", atoi(at));
            cJSON_AddNumberToObject(rec, "iterations_redone", atoi(at) - 1 - s->resume.iteration);
        }
        const char *lost = getenv("AEBENCH_RECOVERY_LOST_S");
        if (lost && *lost) cJSON_AddNumberToObject(rec, "previous_job_seconds", atof(lost));
        if (s->failed_s > 0 && s->back_s > 0) {
            /* from the failure to being back where the failed job was (the part of the failed
             * iteration done before the failure is not counted) */
            cJSON_AddNumberToObject(rec, "back_at_iteration", s->back_iteration);
            cJSON_AddNumberToObject(rec, "time_lost_s", s->back_s - s->failed_s);
            cJSON_AddNumberToObject(rec, "relaunch_s", s->train_start_s - s->failed_s);
            cJSON_AddNumberToObject(rec, "setup_s", s->setup_ms / 1e3);
            cJSON_AddNumberToObject(rec, "redo_s", s->back_s - s->train_start_s - s->setup_ms / 1e3);
        }
    }
    cJSON *notes = cJSON_AddArrayToObject(root, "engine_notes");
    for (int i = 0; notes && i < s->nnotes; i++) cJSON_AddItemToArray(notes, cJSON_CreateString(s->notes[i]));
    cJSON *its = cJSON_AddArrayToObject(root, "iterations");
    const engine_report rep = report_of(s);
    for (int i = s->first; i < s->done; i++) {
        const iter_record *r = &s->iters[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "iteration", i + 1);
        cJSON_AddNumberToObject(o, "loss", r->r.loss);
        cJSON_AddNumberToObject(o, "grad_norm", r->r.grad_norm);
        cJSON_AddNumberToObject(o, "lr", r->r.lr);
        cJSON_AddNumberToObject(o, "ms", r->ms);
        cJSON_AddNumberToObject(o, "forward_ms", r->r.ms_forward);
        cJSON_AddNumberToObject(o, "backward_ms", r->r.ms_backward);
        cJSON_AddNumberToObject(o, "optimizer_ms", r->r.ms_optimizer);
        cJSON_AddBoolToObject(o, "skipped", r->r.skipped);
        if (s->ec.optim.clip > 0 && (s->eng->options & ENGINE_OPT_CLIP_SPECULATE)) {
            cJSON_AddNumberToObject(o, "ahead_blocks", r->r.ahead_blocks);
            cJSON_AddBoolToObject(o, "ahead_redone", r->r.ahead_redone);
        }
        if (r->r.has_busy) {
            cJSON *b = cJSON_AddObjectToObject(o, "busy_ms");
            cJSON_AddNumberToObject(b, "compute", r->r.busy_ms[BUSY_COMPUTE]);
            cJSON_AddNumberToObject(b, "h2d", r->r.busy_ms[BUSY_H2D]);
            cJSON_AddNumberToObject(b, "d2h", r->r.busy_ms[BUSY_D2H]);
            cJSON_AddNumberToObject(b, "host_adam", r->r.busy_ms[BUSY_HOST_ADAM]);
            cJSON_AddNumberToObject(b, "disk", r->r.busy_ms[BUSY_DISK]);
            cJSON_AddNumberToObject(o, "roofline_ms", bound_roofline_ms(r->r.busy_ms));
            const double sched = bound_schedule_ms(s->eng, ec, r->r.busy_ms);
            if (bound_waits_for_norm(s->eng, ec)) cJSON_AddNumberToObject(o, "clipped_bound_ms", sched);
            cJSON_AddNumberToObject(o, "schedule_bound_ms", sched);
            cJSON_AddNumberToObject(o, "bytes_h2d", r->r.bytes_h2d);
            cJSON_AddNumberToObject(o, "bytes_d2h", r->r.bytes_d2h);
            cJSON_AddNumberToObject(o, "host_adam_params", r->r.host_adam_params);
            cJSON_AddNumberToObject(o, "bytes_disk_read", r->r.bytes_disk_read);
            cJSON_AddNumberToObject(o, "bytes_disk_write", r->r.bytes_disk_write);
        }
        if (r->r.has_comm) {
            cJSON_AddNumberToObject(o, "collectives_busy_ms", r->r.busy_ms[BUSY_COMM]);
            cJSON_AddNumberToObject(o, "bytes_collectives", r->r.bytes_comm);
        }
        if (s->eng->report_iteration_json) s->eng->report_iteration_json(&rep, i + 1, o);
        cJSON_AddItemToArray(its, o);
    }
    if (s->eng->report_json) s->eng->report_json(&rep, root);
    /* (the profile is the main thread's, in the middle of a step when a signal comes) */
    if (!s->interrupted_by) json_profile(root, s);
    json_gpu_clock(root, s);
    cJSON *sum = cJSON_AddObjectToObject(root, "summary");
    cJSON_AddNumberToObject(sum, "iterations_run", s->done - s->first);
    if (s->first > 0) cJSON_AddNumberToObject(sum, "resumed_after", s->first);
    if (s->done > s->first) {
        const double med = median_iteration_ms(s);
        const int global_batch = global_batch_of(ec);
        cJSON_AddNumberToObject(sum, "median_ms", med);
        cJSON_AddNumberToObject(sum, "median_excludes_first", s->done - s->first > 1);
        cJSON_AddNumberToObject(sum, "samples_per_second", global_batch * 1000.0 / med);
        /* per rank, as the artifact's "per GPU" figures */
        cJSON_AddNumberToObject(sum, "model_tflops",
                                gpt_model_flops(&ec->shape) * engine_micro_batches(ec) / (med * 1e-3) / 1e12);
        cJSON_AddNumberToObject(sum, "effective_tflops",
                                effective_tflops(s->params, rank_batch_of(ec), ec->shape.seq, med * 1e-3));
        cJSON_AddNumberToObject(sum, "first_loss", s->iters[s->first].r.loss);
        cJSON_AddNumberToObject(sum, "final_loss", s->iters[s->done - 1].r.loss);
    }
    /* The bounds of its steps beside the measured time (bound.h) */
    if (s->done > s->first && s->iters[s->done - 1].r.has_busy) {
        const double med = median_iteration_ms(s), roof = median_over_steps(s, STEP_ROOFLINE);
        cJSON_AddNumberToObject(sum, "roofline_ms", roof);
        const double bound = median_over_steps(s, STEP_SCHEDULE_BOUND);
        if (bound_waits_for_norm(s->eng, ec)) cJSON_AddNumberToObject(sum, "clipped_bound_ms", bound);
        cJSON_AddNumberToObject(sum, "schedule_bound_ms", bound);
        cJSON_AddStringToObject(sum, "schedule_bound_is", bound_schedule_name(s->eng, ec));
        if (bound > 0) cJSON_AddNumberToObject(sum, "ms_over_bound", med / bound);
    }
    /* (the clip the run trained with, and how many of its steps it bound) */
    cJSON_AddNumberToObject(sum, "clip_grad", ec->optim.clip);
    cJSON_AddNumberToObject(sum, "clipped_steps", clipped_steps(s));
    if (ec->optim.clip > 0 && (s->eng->options & ENGINE_OPT_CLIP_SPECULATE)) {
        int ahead = 0, redone = 0;
        speculated_steps(s, &ahead, &redone);
        cJSON_AddNumberToObject(sum, "steps_updated_ahead", ahead);
        cJSON_AddNumberToObject(sum, "steps_redone", redone);
    }
    cJSON_AddStringToObject(root, "log", s->log_path);

    char *text = report_json_text(root);
    cJSON_Delete(root);
    if (!text) return -1;
    const int rc_ = report_write_text(s->json_path, text);
    const int e = errno;
    cJSON_free(text);
    errno = e;
    return rc_;
}

/* The run's JSON could not be written (a full disk): the record is whole or not there, so the
 * log (cut short, or empty) and any earlier JSON (a "running" one) go too, and nothing names
 * them; the reason, the first write that failed, is the run's message. */
static void discard_record(run_state *s, int err)
{
    record_failed(s, s->json_path, err);
    if (unlink(s->log_path) != 0 && errno != ENOENT)
        fprintf(stderr, "aebench: cannot remove %s: %s\n", s->log_path, strerror(errno));
    if (unlink(s->json_path) != 0 && errno != ENOENT)
        fprintf(stderr, "aebench: cannot remove %s: %s\n", s->json_path, strerror(errno));
    s->has_log = 0;
    s->record_discarded = 1;
}

/* The artifact's lines for the interval (first, last] of iterations. */
static void log_interval(run_state *s, int first, int last, int *memory_reported)
{
    const engine_config *ec = &s->ec;
    const int n = last - first;
    double ms = 0, loss = 0, fwd = 0, bwd = 0, opt = 0;
    int skipped = 0, nans = 0;
    for (int i = first; i < last; i++) {
        const iter_record *r = &s->iters[i];
        ms += r->ms;
        loss += r->r.loss;
        fwd += r->r.ms_forward;
        bwd += r->r.ms_backward;
        opt += r->r.ms_optimizer;
        skipped += r->r.skipped;
        nans += !isfinite(r->r.loss) || !isfinite(r->r.grad_norm);
    }
    ms /= n, loss /= n, fwd /= n, bwd /= n, opt /= n;
    const iter_record *cur = &s->iters[last - 1];
    const int global_batch = global_batch_of(ec);
    char line[1024];
    fmt_iteration_line(line, sizeof line, last, s->rc->iters, ms, cur->r.lr, global_batch, loss,
                       cur->r.grad_norm, skipped, nans);
    logline(s, "%s", line);
    fmt_tflops_line(line, sizeof line, effective_tflops(s->params, rank_batch_of(ec), ec->shape.seq, ms * 1e-3),
                    s->params);
    logline(s, "%s", line);
    fmt_throughput_line(line, sizeof line, s->world, global_batch, ms * 1e-3, global_batch * 1000.0 / ms);
    logline(s, "%s", line);
    if (!*memory_reported) {
        /* As Megatron: once, after the first logged interval.  The arena keeps no cache,
         * so reserved equals allocated. */
        const mem_budget *g = &s->gpu.budget;
        /* One line per rank, as Megatron prints [Rank r]: rank 0 gathers them (every rank is
         * here at the same iteration). */
        double mine[2] = {(double)g->in_use, (double)g->peak};
        double *all = calloc((size_t)s->world * 2, sizeof *all);
        if (all && comm_all_gather(s->comm, mine, all, sizeof mine) == 0) {
            for (int r = 0; r < s->world; r++) {
                fmt_memory_line(line, sizeof line, r, last, all[2 * r], all[2 * r + 1], all[2 * r],
                                all[2 * r + 1]);
                logline(s, "%s", line);
            }
        } else {
            fmt_memory_line(line, sizeof line, s->rank, last, mine[0], mine[1], mine[0], mine[1]);
            logline(s, "%s", line);
        }
        free(all);
        *memory_reported = 1;
    }
    static const char *const names[] = {"e2e-time", "forward-compute", "backward-compute", "optimizer"};
    const double values[] = {ms, fwd, bwd, opt};
    fmt_timers_line(line, sizeof line, 4, names, values);
    logline(s, "%s", line);
    if (cur->r.has_busy) {
        /* The last iteration's busy time per stream and bytes moved: the bottleneck. */
        logline(s, "stream busy (ms) | compute: %.1f | h2d: %.1f | d2h: %.1f | host-adam: %.1f | "
                   "disk: %.1f | h2d GB: %.3f | d2h GB: %.3f | host-adam M params: %.1f | "
                   "disk read GB: %.3f | disk write GB: %.3f",
                cur->r.busy_ms[BUSY_COMPUTE], cur->r.busy_ms[BUSY_H2D], cur->r.busy_ms[BUSY_D2H],
                cur->r.busy_ms[BUSY_HOST_ADAM], cur->r.busy_ms[BUSY_DISK], cur->r.bytes_h2d / 1e9,
                cur->r.bytes_d2h / 1e9, cur->r.host_adam_params / 1e6, cur->r.bytes_disk_read / 1e9,
                cur->r.bytes_disk_write / 1e9);
    }
    if (cur->r.has_busy) {
        if (bound_has_schedule(s->eng, ec))
            logline(s, "bound (ms, last iteration) | roofline: %.1f | %s: %.1f | measured: %.1f",
                    bound_roofline_ms(cur->r.busy_ms), bound_schedule_name(s->eng, ec),
                    bound_schedule_ms(s->eng, ec, cur->r.busy_ms), cur->ms);
        else
            logline(s, "bound (ms, last iteration) | roofline: %.1f | measured: %.1f", bound_roofline_ms(cur->r.busy_ms),
                    cur->ms);
    }
    if (cur->r.has_comm)
        logline(s, "collectives (rank 0, last iteration) | busy ms: %.1f | GB handed to them: %.3f",
                cur->r.busy_ms[BUSY_COMM], cur->r.bytes_comm / 1e9);
    if (s->eng->report_interval) {
        const engine_report rep = report_of(s);
        s->eng->report_interval(&rep, last);
    }
    if (s->rank == 0) {
        printf("  iter %6d/%d | loss %.4f | grad norm %.3f | %.1f ms/it\n", last, s->rc->iters,
               loss, cur->r.grad_norm, ms);
        fflush(stdout);
    }
}

static void print_summary(run_state *s)
{
    if (s->rank != 0) return;
    char g[32], h[32];
    format_bytes((double)s->gpu.budget.peak, g, sizeof g);
    format_bytes((double)s->host.peak, h, sizeof h);
    if (s->status == EXIT_RUN_OK && s->done > s->first) {
        const double med = median_iteration_ms(s);
        const int global_batch = global_batch_of(&s->ec);
        printf("  done: median %.1f ms/it | %.2f samples/s | %.3f TFLOP/s (model) | peak GPU %s, "
               "host %s | loss %.4f -> %.4f\n",
               med, global_batch * 1000.0 / med,
               gpt_model_flops(&s->ec.shape) * engine_micro_batches(&s->ec) / (med * 1e-3) / 1e12,
               g, h, s->iters[s->first].r.loss, s->iters[s->done - 1].r.loss);
        if (s->ec.optim.clip > 0 && (s->eng->options & ENGINE_OPT_CLIP_SPECULATE)) {
            int ahead = 0, redone = 0;
            speculated_steps(s, &ahead, &redone);
            printf("  clip-grad %g: %d of %d steps clipped; %d updated ahead of the norm, %d of them redone\n",
                   s->ec.optim.clip, clipped_steps(s), s->done - s->first, ahead, redone);
        } else if (s->ec.optim.clip > 0) {
            printf("  clip-grad %g: %d of %d steps clipped\n", s->ec.optim.clip, clipped_steps(s), s->done - s->first);
        }
        const double roof = median_over_steps(s, STEP_ROOFLINE);
        if (roof > 0) {
            const double sched = median_over_steps(s, STEP_SCHEDULE_BOUND);
            char why[200];
            bound_schedule_why(s->eng, &s->ec, roof, why, sizeof why);
            printf("  bound: %.1f ms/it (%s) | measured %.2fx of it\n", sched, why, med / sched);
        }
    } else if (s->record_discarded) {
        /* (stdout names no file that is not there: the message, on stderr, names the one) */
        printf("  FAILED: the run's log and JSON could not be written in %s, and neither is kept (see stderr)\n",
               s->rc->results_dir);
    } else if (s->status == EXIT_RUN_OK) {
        /* (a recovered job whose checkpoint is its last iteration: done before it started) */
        printf("  done: nothing left to train: iterations 1-%d were trained by the job this one recovers\n",
               s->first);
    } else {
        printf("  %s: %s\n", s->status == EXIT_RUN_OOM ? "OUT OF MEMORY" : "FAILED",
               s->message[0] ? s->message : "(no reason was recorded: a bug, please report it)");
    }
    if (s->has_log) printf("  log:  %s\n  json: %s\n", s->log_path, s->json_path);
    fflush(stdout);
}

/* The budget whose record says what ran out. */
static const mem_budget *oom_budget(const run_state *s)
{
    if (s->gpu.budget.oom) return &s->gpu.budget;
    if (s->has_disk && s->disk.oom) return &s->disk;
    return &s->host;
}

/* --offload nvme: the disk budget, from the --nvme-dir file system (see run.h). */
static int open_disk_budget(run_state *s)
{
    if (s->ec.offload != OFFLOAD_NVME) return 0;
    size_t free_bytes = 0;
    if (run_resolve_disk_budget(&s->ec, s->rc->results_dir, &free_bytes, s->message,
                                sizeof s->message)) {
        s->status = EXIT_RUN_ERROR;
        return -1;
    }
    /* The ranks of one machine share its disk as they share its host memory: each takes its
     * share (ranks on other machines see their own --nvme-dir). */
    free_bytes /= (size_t)engine_local_world(&s->ec);
    mem_budget_init(&s->disk, "disk", free_bytes);
    s->has_disk = 1;
    return 0;
}

/* --save-params: every rank takes part (a sharded engine gathers), rank 0 writes the file
 * (whole or not at all: written aside, then renamed). */
static void save_params(run_state *s, void *state)
{
    const size_t P = (size_t)gpt_param_count(&s->ec.shape);
    float *params = malloc(P * sizeof *params);
    int rc_ = params ? s->eng->read_params(state, params) : GPT_ERR_OOM, save_errno = 0;
    if (rc_ == 0 && s->rank == 0) {
        char tmp[PATH_MAX + 8];
        snprintf(tmp, sizeof tmp, "%s.tmp", s->rc->save_params);
        unlink(tmp); /* (a link planted under its name goes, not its target) */
        const int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
        if (!f && fd >= 0) close(fd);
        int ok = f && fwrite(params, sizeof *params, P, f) == P;
        if (f) ok = (fclose(f) == 0) && ok;
        if (!ok || rename(tmp, s->rc->save_params) != 0) {
            save_errno = errno ? errno : EIO;
            unlink(tmp);
            rc_ = GPT_ERR_IO;
        }
    }
    free(params);
    if (rc_) {
        s->status = EXIT_RUN_ERROR;
        snprintf(s->message, sizeof s->message, "cannot save the parameters to %.400s%s%s", s->rc->save_params,
                 save_errno ? ": " : "", save_errno == ENOSPC ? "disk full" : save_errno ? strerror(save_errno) : "");
    }
}

/* N ranks: every rank says how it stands; when one has failed, every rank takes the first
 * failure (its status and message, "rank R: ...") so that no rank goes on into a collective
 * that the failed one will never join.  1 when every rank is fine. */
static int ranks_agree(run_state *s)
{
    if (s->world == 1) return s->status == EXIT_RUN_OK;
    typedef struct { int status, init_refused; char message[512]; } rank_state;
    rank_state mine = {.status = s->status, .init_refused = s->init_refused};
    snprintf(mine.message, sizeof mine.message, "%s", s->message);
    rank_state *all = calloc((size_t)s->world, sizeof *all);
    watchdog_waits_on(s->dog, "the other ranks' state (an all-gather)");
    if (!all || comm_all_gather(s->comm, &mine, all, sizeof mine) != 0) {
        free(all);
        fprintf(stderr, "aebench: rank %d: cannot exchange its state with the other ranks\n", s->rank);
        comm_abort(s->comm, EXIT_RUN_ERROR);
        return 0;
    }
    int ok = 1;
    for (int r = 0; r < s->world && ok; r++) {
        if (all[r].status == EXIT_RUN_OK) continue;
        ok = 0;
        if (r != s->rank) {
            s->status = all[r].status;
            s->init_refused = all[r].init_refused;
            s->oom_budget = NULL; /* the record is that rank's */
            s->oom_device = NULL;
            snprintf(s->message, sizeof s->message, "rank %d: %.480s", r, all[r].message);
        }
    }
    free(all);
    watchdog_waits_on(s->dog, NULL);
    return ok;
}

static void remove_heartbeat_dir(run_state *s);

/* The watchdog's end of the job, from its thread: the training is stuck, so nothing else
 * writes the record now.  The note for the supervisor, the log's ERROR line and the JSON with
 * the iterations done (rank 0), then every rank ends with EXIT_RANK_LOST. */
static void run_hung(void *ctx, const char *why)
{
    run_state *s = ctx;
    /* the note is "rank R <rest>" to the supervisor: without our own "rank R " */
    const char *rest = why;
    if (strncmp(why, "rank ", 5) == 0 && strchr(why + 5, ' ')) rest = strchr(why + 5, ' ') + 1;
    fault_note(s->rank, "%s", rest);
    record_lock(s);
    if (s->has_log && s->log && !s->record_final) {
        s->status = EXIT_RANK_LOST;
        snprintf(s->message, sizeof s->message, "%.500s", why);
        logline(s, "ERROR: %s", why);
        if (fclose(s->log) != 0) fprintf(stderr, "aebench: error closing %s\n", s->log_path);
        s->log = NULL;
        if (write_json(s) == 0) report_to_parent("json %s", s->json_path);
        else fprintf(stderr, "aebench: cannot write %s: %s\n", s->json_path, strerror(errno));
        s->record_final = 1;
    }
    record_unlock(s);
    remove_heartbeat_dir(s);
    fflush(stdout);
    fflush(stderr);
    watchdog_kill_stopped(s->dog);
    comm_abort(s->comm, EXIT_RANK_LOST);
}

/* Where the ranks' heartbeats go: the supervisor's private notes directory (--ranks), or,
 * when every rank is on this machine, a private one that rank 0 makes (mkdtemp: 0700, a fresh
 * name) and shares; none otherwise (each rank still watches itself).  0, or -1 when the ranks
 * could not share it. */
static int heartbeat_dir(run_state *s, char *dir, size_t len)
{
    dir[0] = '\0';
    const char *notes = getenv("AEBENCH_JOB_NOTES");
    if (notes && *notes) {
        snprintf(dir, len, "%s", notes);
        return 0;
    }
    if (s->world == 1 || s->comm->local_world != s->world) return 0;
    enum { PATH_BYTES = 4096 };
    char mine[PATH_BYTES] = "";
    if (s->rank == 0 && job_dir_make(mine, sizeof mine, "aebench-heartbeats") != 0) {
        fprintf(stderr, "aebench: no heartbeat directory (%s): %s; each rank still watches itself\n", mine,
                strerror(errno));
        mine[0] = '\0';
    }
    char *all = calloc((size_t)s->world, PATH_BYTES);
    if (!all || comm_all_gather(s->comm, mine, all, PATH_BYTES) != 0) {
        free(all);
        return -1;
    }
    snprintf(dir, len, "%.4000s", all);
    /* (every rank knows it: whichever rank's watchdog ends the job removes it) */
    snprintf(s->heartbeat_dir, sizeof s->heartbeat_dir, "%.4000s", all);
    free(all);
    return 0;
}

/* The heartbeat directory rank 0 made (not the supervisor's), the ranks' files in it first:
 * by rank 0 at the end, or by the rank whose watchdog ends the job. */
static void remove_heartbeat_dir(run_state *s)
{
    if (!s->heartbeat_dir[0]) return;
    char path[4400];
    for (int r = 0; r < s->world; r++) {
        snprintf(path, sizeof path, "%.4200s/heartbeat-%d", s->heartbeat_dir, r);
        unlink(path);
    }
    job_dir_remove(s->heartbeat_dir);
    s->heartbeat_dir[0] = '\0';
}

/* A recovered job is back where the failed one was: say what the failure cost. */
static void recovery_back(run_state *s)
{
    s->back_s = epoch_s();
    if (s->failed_s <= 0) return;
    const int redone = s->back_iteration - s->resume.iteration;
    logline(s, "recovery: back at iteration %d %.2f s after the failure | relaunch %.2f s | setup and restore "
            "%.2f s (restore %.2f s) | %d iteration%s redone in %.2f s", s->back_iteration,
            s->back_s - s->failed_s, s->train_start_s - s->failed_s, s->setup_ms / 1e3, s->resume.ms / 1e3,
            redone, redone == 1 ? "" : "s", s->back_s - s->train_start_s - s->setup_ms / 1e3);
}

static void train(run_state *s, gpt_backend *be, const data_source *data, const comm_world *comm)
{
    s->train_start_s = epoch_s();
    const run_config *rc = s->rc;
    char init_why[600] = ""; /* what the engine said when it refused (engine_fail) */
    engine_env env = {
        .cfg = &s->ec, .be = be, .gpu = &s->gpu, .host = &s->host,
        .disk = s->has_disk ? &s->disk : NULL, .rank = comm->rank,
        .world = comm->world, .note = engine_said, .note_ctx = s,
        .fault_point = engine_fault, .fault_ctx = s,
        .init_ms = &s->init_ms, .dog = s->dog, .why = init_why, .why_len = sizeof init_why,
    };
    void *state = NULL;
    announce_setup(s, comm->rank);
    const double setup0 = wall_ms();
    int rc_ = s->eng->init(&env, &state);
    s->setup_ms = wall_ms() - setup0;
    if (rc_ == GPT_OK) report_setup(s);
    if (rc_ == GPT_OK && s->eng->report_header) {
        const engine_report rep = report_of(s);
        s->eng->report_header(&rep);
    }
    if (rc_ == GPT_ERR_OOM) {
        set_oom(s, oom_budget(s));
    } else if (rc_ == GPT_ERR_IO) {
        s->status = EXIT_RUN_ERROR;
        if (init_why[0]) snprintf(s->message, sizeof s->message, "%s: %.440s", s->eng->name, init_why);
        else snprintf(s->message, sizeof s->message, "%s: disk tier under %.400s failed (see stderr)",
                      s->eng->name, s->ec.nvme_dir);
    } else if (rc_) {
        s->status = EXIT_RUN_ERROR;
        s->init_refused = 1;
        if (init_why[0]) snprintf(s->message, sizeof s->message, "%s: initialisation failed: %.420s", s->eng->name, init_why);
        else snprintf(s->message, sizeof s->message, "%s: initialisation failed (%s)", s->eng->name,
                      rc_ == GPT_ERR_INVALID ? "invalid configuration, see stderr" : "backend error, see stderr");
    }
    /* every rank initialised, or none trains */
    (void)ranks_agree(s);
    if (s->status == EXIT_RUN_OK && s->eng->chosen_plan) {
        /* What the engine chose (e.g. -w auto) replaces the pre-check's plan, so the memory
         * lines compare the peak with the plan of what actually ran. */
        s->eng->chosen_plan(state, &s->plan);
    }
    /* This rank's rows of the global batch: its micro-batches, one after the other. */
    const int M = engine_micro_batches(&s->ec), rank_rows = rank_batch_of(&s->ec);
    const size_t N = (size_t)M * s->ec.shape.batch * s->ec.shape.seq;
    int32_t *tokens = NULL, *targets = NULL;
    if (s->status == EXIT_RUN_OK) {
        tokens = malloc(N * sizeof *tokens);
        targets = malloc(N * sizeof *targets);
        if (!tokens || !targets) {
            s->status = EXIT_RUN_ERROR;
            snprintf(s->message, sizeof s->message, "out of host memory for the batch ids");
        }
    }
    /* An engine that recovered a checkpoint goes on from the iteration after it. */
    engine_resume rs = {0};
    const int resumed = s->status == EXIT_RUN_OK && s->eng->resumed ? s->eng->resumed(state, &rs) : 0;
    s->resume = rs;
    if (resumed > rc->iters) {
        /* (recovery_refused read the headers; the data of the version they named failed its
         * checksums and restore fell back to --ckpt-dir's, which is newer: its file stays) */
        s->status = EXIT_RUN_ERROR;
        snprintf(s->message, sizeof s->message, "%s: the recovery restored iteration %d, past --iters %d: nothing "
                 "trained or saved", s->eng->name, resumed, rc->iters);
    } else if (resumed > 0) {
        s->first = s->done = resumed;
        logline(s, "resumed: iterations 1-%d were trained by the job this one recovers", s->first);
        /* the supervisor's account of the failure (--ranks relaunches set it) */
        const char *why = getenv("AEBENCH_RECOVERY");
        if (why && *why) engine_said(s, why);
        const char *failed_s = getenv("AEBENCH_RECOVERY_FAILED_S"), *at = getenv("AEBENCH_RECOVERY_FAILED_AT");
        s->failed_s = failed_s && *failed_s ? atof(failed_s) : 0;
        /* back where the failed job was: the end of the iteration before the failed one (a
         * crash that names no iteration: where this job resumes) */
        s->back_iteration = at && *at && atoi(at) - 1 > s->first ? atoi(at) - 1 : s->first;
        if (s->back_iteration > rc->iters) s->back_iteration = rc->iters;
        if (s->back_iteration <= s->first) recovery_back(s);
    }
    int memory_reported = 0, last_logged = s->first;
    for (int it = s->first + 1; s->status == EXIT_RUN_OK && it <= rc->iters; it++) {
        data_rows(data, it, global_batch_of(&s->ec), comm->rank * rank_rows, rank_rows, tokens,
                  targets);
        watchdog_at(s->dog, it, "forward");
        fault_maybe_die(rc, comm->rank, it, FAULT_FORWARD);
        step_result r = {0};
        double t0 = wall_ms();
        rc_ = s->eng->step(state, it, tokens, targets, &r);
        double t1 = wall_ms();
        watchdog_step(s->dog, it, t1 - t0);
        if (rc_) {
            if (rc_ == GPT_ERR_OOM) {
                set_oom(s, oom_budget(s));
            } else if (rc_ == GPT_ERR_IO && init_why[0]) {
                /* (what the engine said, engine_fail: a checkpoint's disk full) */
                s->status = EXIT_RUN_ERROR;
                snprintf(s->message, sizeof s->message, "%s: iteration %d: %.440s", s->eng->name, it, init_why);
            } else if (rc_ == GPT_ERR_IO) {
                s->status = EXIT_RUN_ERROR;
                snprintf(s->message, sizeof s->message, "%s: iteration %d: disk I/O under %.400s failed "
                         "(see stderr)", s->eng->name, it, s->ec.nvme_dir);
            } else {
                s->status = EXIT_RUN_ERROR;
                snprintf(s->message, sizeof s->message, "%s: iteration %d failed (backend error, see stderr)",
                         s->eng->name, it);
            }
            s->step_failed = 1;
            break;
        }
        /* --profile: the step's ops timed once it is over (the wait is after t1) */
        if (s->prof && gpt_profile_step_end(s->prof) != GPT_OK) {
            s->status = EXIT_RUN_ERROR;
            snprintf(s->message, sizeof s->message, "--profile: iteration %d's op times could not be read (backend "
                     "error, see stderr)", it);
            break;
        }
        record_lock(s);
        s->iters[it - 1] = (iter_record){.r = r, .ms = t1 - t0};
        s->done = it;
        record_unlock(s);
        /* the clock beside the steps the medians count (all but the first) */
        if (s->clock && it == s->first + 1 && it < rc->iters && gpu_clock_start(s->clock) != 0) {
            snprintf(s->clock_why, sizeof s->clock_why, "its sampling thread could not start");
            gpu_clock_close(s->clock);
            s->clock = NULL;
        }
        if (s->resume.iteration > 0 && it == s->back_iteration && s->back_s == 0) recovery_back(s);
        if (it % rc->log_interval == 0 || it == rc->iters) {
            log_interval(s, last_logged, it, &memory_reported);
            last_logged = it;
            if (s->has_log && it < rc->iters) {
                /* the record so far, "running": a job that loses a rank keeps the iterations it
                 * completed (the supervisor marks it failed); the final one replaces it */
                record_lock(s);
                if (s->log && (fflush(s->log) != 0 || ferror(s->log)))
                    record_failed(s, s->log_path, errno ? errno : EIO);
                s->running = 1;
                if (s->status == EXIT_RUN_OK && write_json(s) != 0) record_failed(s, s->json_path, errno ? errno : EIO);
                s->running = 0;
                record_unlock(s);
            }
            /* ... and no rank starts the next iteration before that record is on disk: a rank
             * lost at the next iteration's start (the step's last collective is behind it) had
             * the launcher kill rank 0 in the middle of writing it, and the job's record kept
             * none of its iterations (seen once in CI on a busy machine) */
            if (it < rc->iters && comm->world > 1) watchdog_at(s->dog, it, "the barrier after its record");
            if (it < rc->iters && comm_barrier(comm) != 0 && s->status == EXIT_RUN_OK) {
                s->status = EXIT_RUN_ERROR;
                snprintf(s->message, sizeof s->message, "iteration %d: the ranks' barrier after its record "
                         "failed (see stderr)", it);
            }
        }
    }
    free(tokens);
    free(targets);
    if (s->clock) {
        gpu_clock_stop(s->clock);
        s->clock_done = 1;
    }
    watchdog_at(s->dog, s->done, "end of training");
    if (s->eng->report_summary) {
        const engine_report rep = report_of(s);
        s->eng->report_summary(&rep);
    }
    if (s->status == EXIT_RUN_OK && rc->save_params[0]) save_params(s, state);
    s->eng->free(state);
}

int run_resolve_disk_budget(engine_config *ec, const char *results_dir, size_t *free_bytes,
                            char *err, size_t errlen)
{
    if (!ec->nvme_dir[0] && strlen(results_dir) < sizeof ec->nvme_dir)
        memcpy(ec->nvme_dir, results_dir, strlen(results_dir) + 1);
    if (!ec->nvme_dir[0]) {
        snprintf(err, errlen, "--offload nvme: the results directory's path is too long for the "
                 "swap directory; give --nvme-dir");
        return -1;
    }
    struct statvfs fs;
    if (statvfs(ec->nvme_dir, &fs) != 0 || access(ec->nvme_dir, W_OK | X_OK) != 0) {
        snprintf(err, errlen, "--nvme-dir %.400s: %s", ec->nvme_dir, strerror(errno));
        return -1;
    }
    *free_bytes = (size_t)fs.f_bavail * (size_t)fs.f_frsize;
    return 0;
}

void run_resolve_budgets(const run_config *rc, gpt_backend *be, size_t *gpu, size_t *host)
{
    size_t gpu_limit = rc->gpu_mem_limit, host_limit = rc->cpu_mem_limit;
    if (!gpu_limit) {
        size_t free_b = 0, total_b = 0;
        if (be->ops->dev_mem_info(be, &free_b, &total_b) == 0) gpu_limit = free_b;
    }
    if (!host_limit && gpt_host_mem_info(&host_limit, NULL) == 0) {
        /* Not all of it: the kernel, the CUDA driver and page tables need some, and a run
         * planned to the last byte of MemAvailable is killed by the OOM killer (seen at
         * l330 on a 125 GiB host) instead of being reported. */
        host_limit = host_limit / 10 * 9;
    }
    /* The ranks of one machine share its host memory (and, on the CPU backend, the free
     * memory that stands for a device's): each takes its share of the machine's budget.  A
     * --gpu-mem-limit is per rank (each has its own GPU); a --cpu-mem-limit is the machine's. */
    const size_t local = (size_t)engine_local_world(&rc->eng);
    if (local > 1) {
        host_limit /= local;
        if (!rc->gpu_mem_limit && strcmp(be->name, "cpu") == 0) gpu_limit /= local;
    }
    *gpu = gpu_limit ? gpu_limit : SIZE_MAX;
    *host = host_limit ? host_limit : SIZE_MAX;
}

/* ---- SIGINT and SIGTERM: a run stopped by one ends with its record saying so ---------------- */

struct run_signals {
    sigset_t old_mask;   /* the calling thread's mask before: run_signals_stop restores it */
    sigset_t watched;    /* SIGINT and SIGTERM, less any that the process was started ignoring */
    int signal_fd;       /* reads the watched signals (every thread blocks them) */
    int stop_fd;         /* an eventfd: run_signals_stop's word to the watcher */
    pthread_t watcher;
    pthread_mutex_t lock; /* over on_signal: set, cleared and called under it */
    void (*on_signal)(void *ctx, int sig); /* the run's record of the interruption (NULL: none) */
    void *ctx;
};

/* The process ends by sig, as it would have without the watcher (a shell sees 128 + sig):
 * its default action, unblocked in this thread only, and raised here. */
static void die_by(int sig)
{
    fflush(stdout);
    fflush(stderr);
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigset_t just;
    if (sigemptyset(&dfl.sa_mask) != 0 || sigaction(sig, &dfl, NULL) != 0 || sigemptyset(&just) != 0 ||
        sigaddset(&just, sig) != 0 || pthread_sigmask(SIG_UNBLOCK, &just, NULL) != 0 || raise(sig) != 0)
        fprintf(stderr, "aebench: cannot end by signal %d: %s\n", sig, strerror(errno));
    _exit(128 + sig); /* (only when the signal did not end the process) */
}

static void *watch_signals(void *arg)
{
    run_signals *g = arg;
    struct pollfd p[2] = {{.fd = g->signal_fd, .events = POLLIN}, {.fd = g->stop_fd, .events = POLLIN}};
    struct signalfd_siginfo si;
    for (;;) {
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR) continue;
            fprintf(stderr, "aebench: waiting for SIGINT and SIGTERM: %s (they are not handled now)\n", strerror(errno));
            return NULL;
        }
        if (p[1].revents) return NULL; /* (run_signals_stop) */
        if (!(p[0].revents & POLLIN)) continue;
        const ssize_t n = read(g->signal_fd, &si, sizeof si);
        if (n == (ssize_t)sizeof si) break;
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        fprintf(stderr, "aebench: reading a signal: %s\n", n < 0 ? strerror(errno) : "short read");
        return NULL;
    }
    const int sig = (int)si.ssi_signo;
    /* (the lock is kept: the run attached cannot go away, nor another attach, while it writes;
     * a second signal meanwhile stays pending, blocked, and ends nothing half-written) */
    const int e = pthread_mutex_lock(&g->lock);
    if (e) fprintf(stderr, "aebench: the signal watcher's lock: %s\n", strerror(e));
    else if (g->on_signal) g->on_signal(g->ctx, sig);
    die_by(sig);
    return NULL;
}

int run_signals_start(run_signals **out)
{
    *out = NULL;
    run_signals *g = calloc(1, sizeof *g);
    if (!g) {
        fprintf(stderr, "aebench: out of host memory for the signal watcher\n");
        return -1;
    }
    g->signal_fd = g->stop_fd = -1;
    /* (a signal the process was started ignoring, SIGINT of a shell's background job, stays
     * ignored: blocked, it would be queued and read) */
    static const int sigs[] = {SIGINT, SIGTERM};
    int e = sigemptyset(&g->watched) != 0 ? errno : 0;
    for (size_t i = 0; !e && i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction now;
        if (sigaction(sigs[i], NULL, &now) != 0 || (now.sa_handler != SIG_IGN && sigaddset(&g->watched, sigs[i]) != 0))
            e = errno;
    }
    if (!e) e = pthread_sigmask(SIG_BLOCK, &g->watched, &g->old_mask);
    if (e) {
        fprintf(stderr, "aebench: cannot block SIGINT and SIGTERM: %s\n", strerror(e));
        free(g);
        return -1;
    }
    if ((g->signal_fd = signalfd(-1, &g->watched, SFD_CLOEXEC)) < 0 ||
        (g->stop_fd = eventfd(0, EFD_CLOEXEC)) < 0) {
        e = errno;
    } else if ((e = pthread_mutex_init(&g->lock, NULL)) == 0 &&
               (e = pthread_create(&g->watcher, NULL, watch_signals, g)) != 0) {
        pthread_mutex_destroy(&g->lock);
    }
    if (e) {
        fprintf(stderr, "aebench: cannot watch for SIGINT and SIGTERM: %s\n", strerror(e));
        if (g->signal_fd >= 0) close(g->signal_fd);
        if (g->stop_fd >= 0) close(g->stop_fd);
        if (pthread_sigmask(SIG_SETMASK, &g->old_mask, NULL) != 0)
            fprintf(stderr, "aebench: cannot unblock SIGINT and SIGTERM\n");
        free(g);
        return -1;
    }
    *out = g;
    return 0;
}

void run_signals_stop(run_signals *g)
{
    if (!g) return;
    const uint64_t one = 1;
    if (write(g->stop_fd, &one, sizeof one) != (ssize_t)sizeof one)
        fprintf(stderr, "aebench: cannot stop the signal watcher: %s\n", strerror(errno));
    else if ((errno = pthread_join(g->watcher, NULL)) != 0)
        fprintf(stderr, "aebench: the signal watcher: %s\n", strerror(errno));
    if (close(g->signal_fd) != 0 || close(g->stop_fd) != 0)
        fprintf(stderr, "aebench: closing the signal watcher: %s\n", strerror(errno));
    pthread_mutex_destroy(&g->lock);
    /* (a signal that came since is delivered now: the process ends by it) */
    if (pthread_sigmask(SIG_SETMASK, &g->old_mask, NULL) != 0)
        fprintf(stderr, "aebench: cannot unblock SIGINT and SIGTERM\n");
    free(g);
}

/* What the watcher calls on a signal (NULL fn: nothing, the process just ends by it). */
static void run_signals_attach(run_signals *g, void (*fn)(void *ctx, int sig), void *ctx)
{
    if (!g) return;
    const int e = pthread_mutex_lock(&g->lock);
    if (e) {
        fprintf(stderr, "aebench: the signal watcher's lock: %s\n", strerror(e));
        return;
    }
    g->on_signal = fn;
    g->ctx = ctx;
    if (pthread_mutex_unlock(&g->lock) != 0) fprintf(stderr, "aebench: the signal watcher's lock\n");
}

/* The watcher's record of a run stopped by sig (rank 0, which writes the log and JSON; the
 * other ranks end by it at once): the log's ERROR line, the JSON the record so far with status
 * "interrupted", and its path to a parent sweep.  Unless the run's last record is written
 * already (it is then what the run did). */
static void run_interrupted(void *ctx, int sig)
{
    run_state *s = ctx;
    record_lock(s); /* (kept: the process ends by sig, and nothing is written after) */
    if (!s->has_log || s->record_final) return;
    s->interrupted_by = sig;
    const char *name = sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal";
    if (s->done > s->first)
        snprintf(s->interrupted_why, sizeof s->interrupted_why, "interrupted (%s): the run was stopped at iteration "
                 "%d of %d, after %d completed", name, s->done + 1 <= s->rc->iters ? s->done + 1 : s->done,
                 s->rc->iters, s->done);
    else
        snprintf(s->interrupted_why, sizeof s->interrupted_why, "interrupted (%s): the run was stopped before its "
                 "first iteration completed", name);
    logline(s, "ERROR: %s", s->interrupted_why);
    if (s->log && fclose(s->log) != 0) fprintf(stderr, "aebench: error closing %s\n", s->log_path);
    s->log = NULL;
    if (write_json(s) == 0) report_to_parent("json %s", s->json_path);
    s->record_final = 1;
    fprintf(stderr, "aebench: %s\n", s->interrupted_why);
}

int run_engine(const run_config *rc, const engine_vtbl *eng, gpt_backend *be,
               const data_source *data, const comm_world *comm, run_signals *sig)
{
    run_state s;
    memset(&s, 0, sizeof s);
    s.log_lock_fd = -1;
    {
        pthread_mutexattr_t recursive;
        int e = pthread_mutexattr_init(&recursive);
        if (!e && (e = pthread_mutexattr_settype(&recursive, PTHREAD_MUTEX_RECURSIVE)) == 0)
            e = pthread_mutex_init(&s.record_lock, &recursive);
        if (e) {
            fprintf(stderr, "aebench: the run's record lock: %s\n", strerror(e));
            return EXIT_RUN_ERROR;
        }
        pthread_mutexattr_destroy(&recursive);
    }
    s.rc = rc;
    s.eng = eng;
    s.ec = rc->eng;
    s.world = comm->world;
    s.comm = comm;
    s.rank = comm->rank;
    s.params = gpt_param_count(&s.ec.shape);
    if (s.ec.window) snprintf(s.window, sizeof s.window, "%d", s.ec.window);
    else snprintf(s.window, sizeof s.window, "auto");
    be->ops->describe(be, s.device_desc, sizeof s.device_desc);

    size_t gpu_limit, host_limit;
    run_resolve_budgets(rc, be, &gpu_limit, &host_limit);
    s.ec.gpu_budget = gpu_limit;
    s.ec.host_budget = host_limit;
    /* A machine file of this shape (--machine, or the results directory's for this host and
     * device) lets -w auto size its window with the engine's prediction (machine.h). */
    {
        char err[600];
        if (rc->machine_path[0]) snprintf(s.machine_path, sizeof s.machine_path, "%s", rc->machine_path);
        else if (machine_default_path(s.machine_path, sizeof s.machine_path, rc->results_dir, be) != 0)
            s.machine_path[0] = '\0';
        if (s.machine_path[0] && access(s.machine_path, R_OK) == 0 &&
            machine_load(s.machine_path, &s.ec, &s.machine, err, sizeof err) == 0)
            s.ec.machine = &s.machine;
        else
            s.machine_path[0] = '\0';
    }
    eng->plan(&s.ec, &s.plan);
    dev_arena_init(&s.gpu, be, gpu_limit);
    mem_budget_init(&s.host, "host", host_limit);

    s.iters = calloc((size_t)rc->iters, sizeof *s.iters);
    if (!s.iters) {
        /* (before the log is made: nothing is written; out of memory, as a budget short would be) */
        char need[32];
        format_bytes((double)rc->iters * (double)sizeof *s.iters, need, sizeof need);
        fprintf(stderr, "aebench: out of host memory: %d iteration records (--iters) need %s\n", rc->iters, need);
        return EXIT_RUN_OOM;
    }
    /* SIGINT or SIGTERM from here on: the record says so (rank 0's), and the run ends by it */
    run_signals_attach(sig, run_interrupted, &s);
    if (comm->rank == 0) {
        char err[512];
        record_lock(&s);
        s.log = report_create_log(rc->results_dir, eng->name, s.ec.shape.layers, s.ec.shape.hidden,
                                  s.ec.shape.batch, s.window, s.log_path, sizeof s.log_path,
                                  s.json_path, sizeof s.json_path, err, sizeof err);
        s.has_log = s.log != NULL;
        record_unlock(&s);
        if (!s.log) {
            fprintf(stderr, "aebench: %s\n", err);
            run_signals_attach(sig, NULL, NULL);
            free(s.iters);
            return EXIT_RUN_ERROR;
        }
        /* (a shared lock while the run may write its record: a sweep's --resume takes a record
         * that says "running" or "interrupted" for one to replace only when no run holds it) */
        if ((s.log_lock_fd = fcntl(fileno(s.log), F_DUPFD_CLOEXEC, 0)) < 0 || flock(s.log_lock_fd, LOCK_SH) != 0)
            fprintf(stderr, "aebench: cannot lock %s: %s\n", s.log_path, strerror(errno));
        report_to_parent("log %s", s.log_path);
        /* (which file it is: a --ranks supervisor appends to this one only, not to a link or
         * another file planted under its name since) */
        struct stat log_st;
        if (fstat(fileno(s.log), &log_st) == 0)
            report_to_parent("log-id %llu %llu", (unsigned long long)log_st.st_dev, (unsigned long long)log_st.st_ino);
    }

    char shape[128], line[512], g[32], h[32], d[32];
    describe_shape(&s.ec, shape, sizeof shape);
    format_bytes((double)s.plan.gpu_bytes, g, sizeof g);
    format_bytes((double)s.plan.host_bytes, h, sizeof h);
    format_bytes((double)s.plan.disk_bytes, d, sizeof d);
    if (s.rank == 0) {
        printf("aebench %s | %s | %s | %.6g M parameters | recompute %s%s\n", eng->name,
               s.device_desc, shape, (double)s.params / 1e6, gpt_recompute_name(s.ec.recompute),
               rc->cpu_preset ? " | CPU preset" : "");
        printf("  plan%s: GPU %s | host %s | disk %s\n", s.world > 1 ? " per rank" : "", g, h, d);
        fflush(stdout);
    }
    logline(&s, "aebench %s: method %s, %s, %s, window %s, dtype %s, recompute %s, data %s",
            AEBENCH_VERSION, eng->name, s.device_desc, shape, s.window, s.ec.bf16 ? "bf16" : "fp32",
            gpt_recompute_name(s.ec.recompute), rc->data_path[0] ? rc->data_path : "synthetic");
    fmt_params_line(line, sizeof line, s.params);
    logline(&s, "%s", line);
    char gl[32], hl[32];
    format_bytes((double)s.gpu.budget.limit, gl, sizeof gl);
    format_bytes((double)s.host.limit, hl, sizeof hl);
    logline(&s, "memory plan%s | GPU: %s of %s | host: %s of %s | disk: %s", s.world > 1 ? " per rank" : "",
            g, gl, h, hl, d);
    if (s.world > 1) {
        const int local = engine_local_world(&s.ec);
        char mh[32], md[32];
        format_bytes((double)local * (double)s.plan.host_bytes, mh, sizeof mh);
        format_bytes((double)local * (double)s.plan.disk_bytes, md, sizeof md);
        logline(&s, "memory plan per machine (%d ranks) | host: %s | disk: %s", local, mh, md);
        if (s.rank == 0) printf("  plan per machine (%d ranks): host %s | disk %s\n", local, mh, md);
    }

    /* From here on every rank watches its own progress (watchdog.h): a job always ends. */
    char beats[4200];
    if (heartbeat_dir(&s, beats, sizeof beats) != 0) {
        fprintf(stderr, "aebench: rank %d: cannot share the heartbeat directory with the other ranks\n", s.rank);
        comm_abort(comm, EXIT_RUN_ERROR);
    }
    const watchdog_config wc = {.timeout_s = rc->hang_timeout_s, .rank = s.rank, .world = s.world,
                                .heartbeat_dir = beats, .kill_stopped = comm_launcher_waits_on_stopped(),
                                .fire = run_hung, .fire_ctx = &s};
    if (watchdog_start(&s.dog, &wc) != 0) {
        run_signals_attach(sig, NULL, NULL);
        if (s.has_log) fclose(s.log);
        if (s.log_lock_fd >= 0) close(s.log_lock_fd);
        free(s.iters);
        return EXIT_RUN_ERROR;
    }
    if (open_disk_budget(&s) == 0) check_plan(&s);
    if (rc->profile && gpt_profile_create(&s.prof, be) != GPT_OK) {
        s.status = EXIT_RUN_ERROR;
        snprintf(s.message, sizeof s.message, "--profile: out of memory");
    }
    open_gpu_clock(&s, be);
    if (s.status == EXIT_RUN_OK && ranks_agree(&s)) train(&s, s.prof ? gpt_profile_backend(s.prof) : be, data, comm);
    if (s.status == EXIT_RUN_OK) report_profile(&s);
    if (s.status == EXIT_RUN_OK) report_gpu_clock(&s);
    if (s.world > 1 && s.status == EXIT_RUN_OK) {
        /* every rank's peaks for the JSON (each rank reaches here after its last step) */
        double mine[2] = {(double)s.gpu.budget.peak, (double)s.host.peak};
        s.rank_peaks = calloc((size_t)s.world, sizeof *s.rank_peaks);
        if (s.rank_peaks && comm_all_gather(comm, mine, s.rank_peaks, sizeof mine) != 0) {
            free(s.rank_peaks);
            s.rank_peaks = NULL;
        }
    }

    if (s.status == EXIT_RUN_OK) {
        char pg[32], ph[32], pd[32];
        format_bytes((double)s.gpu.budget.peak, pg, sizeof pg);
        format_bytes((double)s.host.peak, ph, sizeof ph);
        format_bytes((double)s.disk.peak, pd, sizeof pd);
        format_bytes((double)s.plan.gpu_bytes, g, sizeof g);
        format_bytes((double)s.plan.host_bytes, h, sizeof h);
        format_bytes((double)s.plan.disk_bytes, d, sizeof d);
        logline(&s, "memory peak | GPU: %s (plan %s) | host: %s (plan %s) | disk: %s (plan %s)", pg, g,
                ph, h, pd, d);
        if (s.plan.host_while_ahead) {
            char wa[32];
            format_bytes((double)s.plan.host_while_ahead, wa, sizeof wa);
            logline(&s, "memory peak | of the host plan, %s held only while steps do not clip (--clip-speculate auto)", wa);
        }
        watchdog_margin wm;
        if (watchdog_get_margin(s.dog, &wm) == 0 && wm.closest_limit_s > 0)
            logline(&s, "watchdog | limit at the end: %.0f s (%s) | closest call: %.1f s idle of %.0f s (%.0f%%), in "
                    "the %s of iteration %d", wm.limit_s, rc->hang_timeout_s > 0 ? "fixed" : "auto", wm.closest_idle_s,
                    wm.closest_limit_s, 100 * wm.closest_idle_s / wm.closest_limit_s, wm.closest_phase,
                    wm.closest_iteration);
    } else {
        logline(&s, "%s: %s", s.status == EXIT_RUN_OOM ? "OUT OF MEMORY" : "ERROR", s.message);
    }
    if (s.has_log) {
        /* (one piece: an interruption sees the log open and no final JSON, or both done; the
         * log's last lines reach the disk at its close: a full disk can say so there) */
        record_lock(&s);
        if (fclose(s.log) != 0) record_failed(&s, s.log_path, errno ? errno : EIO);
        s.log = NULL;
        if (write_json(&s) == 0) report_to_parent("json %s", s.json_path);
        else discard_record(&s, errno ? errno : EIO);
        s.record_final = 1;
        record_unlock(&s);
        if (s.log_lock_fd >= 0 && close(s.log_lock_fd) != 0) fprintf(stderr, "aebench: closing %s\n", s.log_path);
        s.log_lock_fd = -1;
    }
    if (s.rank == 0 && s.status != EXIT_RUN_OK)
        fprintf(stderr, "aebench: %s\n", s.message);
    if (s.world > 1 && s.step_failed) {
        /* The other ranks may wait for this one in a collective forever: end the job (its
         * log and JSON, on rank 0, are written by now). */
        if (s.rank != 0) fprintf(stderr, "aebench: rank %d: %s\n", s.rank, s.message);
        fault_note(s.rank, "failed: %s", s.message);
        print_summary(&s);
        comm_abort(comm, s.status);
    }
    if (s.world > 1) {
        /* every rank is done with the heartbeats before rank 0 removes them (watched: a rank
         * that never comes still ends the job) */
        watchdog_at(s.dog, s.done, "the end of the job");
        watchdog_waits_on(s.dog, "the other ranks at the end of the job (a barrier)");
        if (comm_barrier(comm) != 0) s.status = s.status ? s.status : EXIT_RUN_ERROR;
    }
    watchdog_stop(s.dog);
    s.dog = NULL;
    if (s.rank == 0) remove_heartbeat_dir(&s);
    print_summary(&s);
    gpt_profile_destroy(s.prof);
    gpu_clock_close(s.clock);
    /* (the run's state goes with this function: the watcher no longer writes its record) */
    run_signals_attach(sig, NULL, NULL);
    free(s.iters);
    free(s.rank_peaks);
    pthread_mutex_destroy(&s.record_lock);
    return s.status;
}
