/*
 * sweep.h — many runs, each in its own child process: -m all, run-list configs (the
 * artifact's cases, configs/caseN.json) and --find-max.
 *
 * A sweep checks every run before it starts any (bad input: exit 2, nothing written), then
 * runs them one by one with a progress line and an ETA, and ends with a summary table.
 * Exit code: 0 when every run was ok (or skipped by --resume); 1 when any run failed or
 * crashed; else 3 when any run (or a whole --find-max) ran out of memory; 2 for bad input.
 */
#ifndef AEBENCH_SWEEP_H
#define AEBENCH_SWEEP_H

#include "child.h"
#include "cli.h"

/* Runs the sweep that run_cfg describes (parsed from argc/argv); returns the exit code. */
int sweep_main(int argc, char **argv, const run_config *run_cfg);

/* ---- --find-max (cmd/findmax.c) ---------------------------------------------------------- */

typedef struct findmax_result {
    int status;             /* EXIT_RUN_OK; EXIT_RUN_OOM: not even the smallest size fits;
                               EXIT_RUN_ERROR */
    int max_layers;         /* the largest layer count that trained (0: none) */
    int plan_max;           /* the largest that the engine's plan fits in the budgets */
    double params;          /* parameters at max_layers */
    int next_layers;        /* max_layers + 1, the size that did not train */
    char next_memory[8];    /* what stopped it: "GPU", "host", or "" (an error, see reason) */
    double next_short;      /* by how many bytes */
    char reason[512];       /* one line on what stopped the next size */
    run_outcome best;       /* the largest run's 2-iteration result */
    char log[PATH_MAX], json[PATH_MAX];
} findmax_result;

/* Bisects for the largest layer count of argv's method and shape that trains: the upper
 * bound from the engine's plan against the budgets, then child runs of 2 iterations (their
 * logs under RESULTS/probes/).  Writes RESULTS/findmax_{method}_l-{max}_h-{H}_bs-{B}_ws-{W}_
 * {date}.{epoch}.txt and .json unless --dry-run (then the plan bound only). */
int findmax_run(const char *exe, char *const argv[], int argc, const run_config *run_cfg,
                findmax_result *out, char *err, size_t errlen);

/* The newest find-max result in dir for this method, shape (hidden heads seq batch vocab),
 * window (-1: any), backend and memory-limit options (0: not given); 0 when found. */
int findmax_lookup(const char *dir, const char *method, const int shape5[5], int window, const char *backend,
                   size_t gpu_limit_opt, size_t cpu_limit_opt, findmax_result *out);

#endif
