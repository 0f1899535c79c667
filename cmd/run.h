/*
 * run.h — one training run of one engine: plan, budgets, init, iterations, log and JSON.
 */
#ifndef AEBENCH_RUN_H
#define AEBENCH_RUN_H

#include "cli.h"
#include "data.h"
#include "exit_codes.h" /* (aebench's exit codes, and run_engine's) */

#include "../engines/runtime/comm.h"

/* SIGINT and SIGTERM, watched from the start of main: blocked in the calling thread, so in
 * every thread started after it (the OpenMP pool, the CPU backend's and MPI's threads, the
 * watchdog: a thread that did not block them would take one and the process would die with no
 * record), and read by a thread of their own (a signalfd).  On one, the run attached by
 * run_engine writes its record of the interruption; then the process ends by that signal
 * (exit status 128 + n, as without).  A signal the process was started ignoring stays ignored.
 * run_signals_stop before anything that handles them its own way or starts other programs
 * (they would inherit the mask): a sweep, --search, the --ranks supervisor. */
typedef struct run_signals run_signals;
/* 0, or -1 (said on stderr; then nothing is blocked) */
int run_signals_start(run_signals **out);
/* Stops the watcher and restores the mask (NULL: nothing): a signal that came since ends the
 * process now. */
void run_signals_stop(run_signals *sig);

/* Runs eng with run_cfg on backend be; returns an exit code above.  Writes the log and JSON
 * under run_cfg->results_dir (rank 0 only) and a short summary on stdout.  sig (may be NULL): a
 * SIGINT or SIGTERM meanwhile ends the run with an "ERROR: interrupted (SIG...)" line in its
 * log and a JSON with status "interrupted", the record so far, then the process by it. */
int run_engine(const run_config *run_cfg, const engine_vtbl *eng, gpt_backend *be,
               const data_source *data, const comm_world *comm, run_signals *sig);

/* The budgets a run gets: --gpu-mem-limit / --cpu-mem-limit, or the device's free memory
 * and the host's available memory (SIZE_MAX when unknown). */
void run_resolve_budgets(const run_config *run_cfg, gpt_backend *be, size_t *gpu, size_t *host);
/* --offload nvme: fill in ec->nvme_dir (the results directory when not given) and the free
 * bytes of its file system, the disk budget.  -1 with err set when the directory is missing
 * or not writable (the results directory must then exist already: the caller creates it). */
int run_resolve_disk_budget(engine_config *ec, const char *results_dir, size_t *free_bytes,
                            char *err, size_t errlen);

/* --dry-run: the plan and the parameter count, no allocation, nothing written. */
void run_dry(const run_config *run_cfg, const engine_vtbl *eng);

/* The run's outputs can be written (--save-params, --results, --nvme-dir), found before any
 * training: 0, or -1 with the reason (bad input: nothing is written but the results
 * directory, made last).  Rank 0's check (make_results_dir 1), or the --ranks supervisor's (0:
 * its ranks may still refuse the run, and a refused run leaves no directory). */
int run_outputs_refused(const run_config *run_cfg, int make_results_dir, char *err, size_t errlen);

#endif
