/*
 * run_state.h — inside one run (run.h): the state every part of it reads and writes, and
 * what the parts share.  Internal to the run's files:
 *   run.c          set-up, the training loop, run_engine, the watchdog's hooks
 *   run_log.c      the record's lock, the log's lines (set-up, intervals, the end) and stdout's
 *                  summary, and the figures over the steps they and the JSON report
 *   run_json.c     the JSON record (the record so far, the final one, an interruption's)
 *   run_profile.c  --profile's table and the GPU clock beside the steps, in the log and JSON
 *   run_signals.c  SIGINT and SIGTERM: the watcher, and the record of a run stopped by one
 */
#ifndef AEBENCH_RUN_STATE_H
#define AEBENCH_RUN_STATE_H

#include "run.h"

#include "../engines/runtime/gpu_clock.h"
#include "../engines/runtime/watchdog.h"
#include "../kernels/profile.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#ifndef AEBENCH_VERSION
#define AEBENCH_VERSION "0.1.0"
#endif

/* Samples per optimizer step over all ranks, and per rank. */
static inline int run_global_batch(const engine_config *ec)
{
    return ec->shape.batch * engine_micro_batches(ec) * engine_dp_world(ec);
}
/* The model FLOPs of one rank's step (per rank, as the artifact's figures are "per GPU"): its
 * micro-batches' forward and backward, of which one of the P x T ranks of a model copy does 1/(P T) (on average: the
 * stages differ by the embedding and the head). */
static inline double run_rank_model_flops(const engine_config *ec)
{
    return gpt_model_flops(&ec->shape) * engine_micro_batches(ec) / engine_model_ranks(ec);
}
static inline int run_rank_batch(const engine_config *ec)
{
    return ec->shape.batch * engine_micro_batches(ec);
}

/* Per-iteration record kept for the JSON (and the engine's report hooks). */
typedef engine_iteration iter_record;

/* One rank's figures at the end of an N-rank run: its GPU and host peaks and its own plan of
 * them (bytes; a pipeline's stages differ), and its median busy ms per resource (a job in step
 * waits for its slowest rank, which rank 0's own figures do not show; 0 where no step said). */
typedef struct rank_figures {
    double gpu_peak, host_peak, gpu_planned, host_planned;
    double busy_ms[BUSY_KINDS];
} rank_figures;

/* Everything one run produces, gathered for the log, the JSON and stdout. */
typedef struct run_state {
    const run_config *run_cfg;
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
    struct rank_figures *per_rank; /* N ranks: every rank's, for the JSON (NULL: not gathered) */
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

/* ---- run_log.c -------------------------------------------------------------------------- */

/* The record's writers (the log's lines, the JSON, the iterations and notes they read) take
 * s->record_lock (recursive) through these. */
void run_record_lock(run_state *s);
void run_record_unlock(run_state *s);
/* A write of the run's record failed (a full disk): the run ends at once, saying which file
 * and why (err, an errno). */
void run_record_failed(run_state *s, const char *path, int err);
/* One line of the log (its newline added); nothing on ranks without one. */
void run_logline(run_state *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* "l%d h%d heads%d s%d b%d vocab%d" of ec's shape into buf. */
void run_describe_shape(const engine_config *ec, char *buf, size_t len);
/* The engine's set-up, where it went: into the log and, on rank 0, stdout. */
void run_report_setup(run_state *s);
/* The part of the engine's set-up that none of the measured phases covers. */
double run_setup_rest_ms(const run_state *s);
/* Steps of this run whose norm the clip scaled; and those updated ahead of the norm
 * (--clip-speculate), and of them the ones redone. */
int run_clipped_steps(const run_state *s);
void run_speculated_steps(const run_state *s, int *ahead, int *redone);

/* What a median over the steps is of: their time, or their bound (engines/step_bound.h: the roofline, or
 * the clipped schedule's; only the steps that report busy times have one). */
enum { STEP_MS, STEP_ROOFLINE, STEP_SCHEDULE_BOUND, STEP_EXPOSED_COMM, STEP_BUSY /* + BUSY_*: that resource's busy ms */ };
/* The median of `what` over the measured iterations, the first left out when there are more;
 * 0 when no step has it.  run_median_iteration_ms: of STEP_MS. */
double run_median_over_steps(const run_state *s, int what);
double run_median_iteration_ms(const run_state *s);
/* The same over the iterations from the engine's steady state on (engine_steady_from: its
 * warm-up left out, e.g. --dpu's first undelayed steps); run_steady_median_ms: the median step
 * into *ms, and how many there were (0: none yet, *ms 0). */
double run_steady_median_over_steps(const run_state *s, int what);
int run_steady_median_ms(const run_state *s, double *ms);
/* The run so far, for the engine's report hooks (engine.h): its lines go to this run's log. */
engine_report run_report_of(run_state *s);

/* The artifact's lines for the interval (first, last] of iterations (memory_reported: the
 * [Rank r] memory lines were written, once). */
void run_log_interval(run_state *s, int first, int last, int *memory_reported);
/* A recovered job is back where the failed one was: the log says what the failure cost. */
void run_recovery_back(run_state *s);
/* The run's header: on stdout (rank 0) and in the log, the method, device, shape and plan. */
void run_log_header(run_state *s);
/* The log's lines at the end of the run: the peaks beside the plan and the watchdog's margin,
 * or why the run failed. */
void run_log_end(run_state *s);
/* The run's summary on stdout (rank 0). */
void run_print_summary(run_state *s);

/* ---- run_json.c ------------------------------------------------------------------------- */

/* The JSON: the record so far ("running"), the final one, or an interruption's.  0, or -1
 * with errno. */
int run_write_json(run_state *s);
/* The JSON could not be written: the log and any earlier JSON go too (the record is whole or
 * not there); err is the first write that failed, the run's message. */
void run_discard_record(run_state *s, int err);

/* ---- run_profile.c ---------------------------------------------------------------------- */

/* --profile's table: into the log (every rank's own) and, on rank 0, stdout; and the JSON's
 * "profile" (nothing without --profile or steps). */
void run_report_profile(run_state *s);
void run_json_profile(cJSON *root, const run_state *s);
/* Rank 0 of a CUDA run samples its GPU's clock and power (NVML); elsewhere, or without NVML,
 * the log says why not.  Its summary in the log and on stdout, and the JSON's "gpu_clock". */
void run_open_gpu_clock(run_state *s, gpt_backend *be);
void run_report_gpu_clock(run_state *s);
void run_json_gpu_clock(cJSON *root, const run_state *s);

/* ---- run_signals.c ---------------------------------------------------------------------- */

/* What the signal watcher calls on a signal (NULL fn: nothing, the process just ends by it). */
void run_signals_attach(run_signals *g, void (*fn)(void *ctx, int sig), void *ctx);
/* The watcher's record of the run (ctx, a run_state) stopped by sig (see run_signals.c). */
void run_interrupted(void *ctx, int sig);

#endif
