/*
 * child.h — one run of aebench as a child process, and what it left behind.
 *
 * Sweeps (-m all, run-list configs, --find-max) run every run as a child: fork, then exec
 * of this very binary (/proc/self/exe) with the run's options, so an out-of-memory abort, a
 * CUDA error that poisons the context, or a crash ends that run only.  The child tells the
 * parent the paths it wrote (and, for a --dry-run probe, how it resolved the configuration)
 * through a pipe child_run names on its command line (--report-fd FD, first after argv[0];
 * report_to_parent in report.h).
 */
#ifndef AEBENCH_CHILD_H
#define AEBENCH_CHILD_H

#include "cli.h"

#include <stddef.h>

typedef struct child_result {
    int exited;          /* 1: exited with exit_code; 0: killed by signal */
    int exit_code;
    int signal;
    char log[PATH_MAX];  /* reported by the child; empty if it never got that far */
    char json[PATH_MAX];
    /* A --dry-run child reports how it resolved the run: */
    int probed;
    char backend[8];     /* "cpu" or "cuda" */
    int preset;          /* the CPU preset replaced the shape */
    int shape[6];        /* layers hidden heads seq batch vocab */
    size_t budget_gpu, budget_host;
    size_t budget_disk;  /* --offload nvme: free bytes under --nvme-dir; 0 otherwise */
    char machine[PATH_MAX]; /* the machine file --predict would read (--machine, or this
                               host's and backend's default) */
} child_result;

/* What stdout and stderr of the child get. */
typedef enum child_output {
    CHILD_SHOW = 0,      /* both pass through */
    CHILD_QUIET_OUT = 1, /* stdout to /dev/null */
    CHILD_QUIET = 2,     /* both to /dev/null */
} child_output;

/* Runs exe with argv (argv[0] is the name it sees) and waits for it.  Returns 0 when the
 * child ran (whatever its outcome, in *out), -1 with err when it could not be started. */
int child_run(const char *exe, char *const argv[], child_output output, child_result *out,
              char *err, size_t errlen);

/* The path of this binary, for child_run: /proc/self/exe resolved now, so that a rebuild
 * during a long sweep does not mix binaries... unless it replaced the file in place. */
int child_self_exe(char *buf, size_t len, char *err, size_t errlen);

/* "SIGSEGV" for SIGSEGV, "signal 77" for an unnamed one. */
void child_signal_name(int sig, char *buf, size_t len);

/* What a run's JSON (written by run_json.c) says, for summaries and --resume. */
typedef struct run_outcome {
    int have;             /* the JSON was read */
    char status[16];      /* "ok", "oom", "error" */
    char message[512];
    char method[64];
    char log[PATH_MAX];
    int layers, hidden, heads, seq, batch, vocab, iters;
    gpt_recompute recompute; /* its "recompute" (JSON from before it: "ckpt" false is none) */
    char window[16], backend[8], dtype[8];
    char fingerprint[24]; /* cli_fingerprint of its options, hex ("" in JSON from before it) */
    int world;
    double params;
    double median_ms, samples_per_s, model_tflops, effective_tflops;
    double steady_median_ms; /* over the engine's steady state (0: none, or JSON from before it) */
    double peak_gpu, peak_host, plan_gpu, plan_host;
    char oom_memory[8];   /* "GPU" or "host" */
    double oom_requested, oom_in_use, oom_limit;
} run_outcome;

int run_outcome_read(const char *json_path, run_outcome *o);

#endif
