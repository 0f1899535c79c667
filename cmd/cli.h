/*
 * cli.h — the command line and JSON configs.
 *
 * Every option has a long name; a config file (--config FILE.json) is an object whose keys
 * are those long names ("layers", "gpu-mem-limit", ...).  The config is applied first and
 * the command line overrides it.  A config with "runs" is a run list (an artifact case):
 * see cli_load_runlist and cmd/sweep.h.  Anything wrong — unknown option or key, wrong type,
 * non-numeric or non-positive size, hidden not divisible by heads — is one line naming the
 * problem; the caller exits 2 before anything is written.
 */
#ifndef AEBENCH_CLI_H
#define AEBENCH_CLI_H

#include "../engines/engine.h"

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifndef PATH_MAX
#define PATH_MAX 4096
#endif

enum { FAIL_SOFTWARE = 0, FAIL_HARDWARE = 1, FAIL_STOP = 2 };

/* The most options there may be: the driver's (options.h) and the engines' (their tables, put
 * together at start-up; cli_check_options refuses more).  Arrays of one entry per option (the
 * per-option hashes the ranks compare, run_config.given's bits) are this long. */
enum { CLI_OPTIONS_MAX = 128 };

/* The largest JSON input read (a config, a run list, a machine file): each is read whole and
 * parsed in memory, several times its size, so a larger file is refused before it is read.
 * The largest of ours (a machine file of many shapes) is tens of KiB. */
enum { CLI_JSON_MAX_BYTES = 1 << 20 };

/* How the job a relaunch recovers from ended (--relaunch-of "RAN_S FAILED_S FAILED_AT NOTE"):
 * the --ranks supervisor (launch.c) passes it on the relaunched ranks' command line, and the
 * recovered job's log and JSON "recovery" record it (run.c, run_json.c).  given 0: none. */
typedef struct relaunch_account {
    int given;
    double ran_s;    /* seconds the job before ran (recovery.previous_job_seconds) */
    double failed_s; /* when it failed, CLOCK_REALTIME seconds: where recovery.time_lost_s counts from */
    int failed_at;   /* the iteration an injected fault (--fail-at) struck; 0: a real crash names none */
    char note[1024]; /* one line: the job before, its time, how it ended, the relaunch */
} relaunch_account;

/* The record a rerun runs again (--rerun-of "FINGERPRINT PATH"): --rerun (rerun.c) puts it on
 * the command line it runs, so the run and, under --ranks, its ranks name that record in their
 * JSON's "rerun_of".  fingerprint "": not a rerun. */
typedef struct rerun_source {
    char fingerprint[32]; /* the record's config fingerprint, 16 hex digits */
    char path[PATH_MAX];  /* the record's absolute path */
} rerun_source;

typedef struct run_config {
    char method[64];       /* an engine name, an alias, or "all" */
    engine_config eng;
    int iters;
    int log_interval;
    char results_dir[PATH_MAX];
    char data_path[PATH_MAX]; /* empty: the synthetic corpus */
    char config_path[PATH_MAX];
    size_t gpu_mem_limit;  /* bytes; 0: the device's free memory */
    size_t cpu_mem_limit;  /* bytes; 0: the host's available memory */
    int dry_run;
    int setup_notice_mib;  /* a set-up this large (MiB, GPU and host) is announced on stdout first */
    int device_given;      /* --device was set (else: CUDA when usable, CPU otherwise) */
    uint64_t given[CLI_OPTIONS_MAX / 64]; /* bit per option: set by the config or the command line */
    int cpu_preset;        /* the small CPU preset was applied */
    int find_max;          /* --find-max: bisect for the largest layer count that trains */
    int resume;            /* --resume: sweeps skip runs already done */
    int calibrate;         /* --calibrate: measure the machine for --predict */
    int predict;           /* --predict: print predictions from the machine file, train nothing */
    char machine_path[PATH_MAX]; /* --machine FILE ("": the default for this host and device) */
    int config_runs;       /* --config named a run list (a case), run by the sweep driver */
    int ranks;             /* --ranks N: start mpiexec -n N (0: not given) */
    int profile;           /* --profile: every op of every step timed (kernels/profile.h) */
    char hosts_path[PATH_MAX]; /* --hosts FILE: mpiexec's hostfile for those ranks ("": this machine) */
    int ranks_per_machine;     /* from --hosts: the most of the N ranks on one machine (0: all N) */
    double hang_timeout_s;   /* --hang-timeout: > 0 seconds, 0 never, < 0 auto (watchdog.h) */
    char save_params[PATH_MAX]; /* --save-params FILE: the final parameters ("" none) */
    int fail_at;             /* --fail-at I --fail-rank R[,R...]: those ranks SIGKILL themselves */
    unsigned long long fail_ranks; /* at iteration I: bit r for rank r (default rank 0) */
    char fail_ranks_text[64];      /* as given, for messages */
    int fail_kind;           /* --fail-kind: FAIL_SOFTWARE (the process dies), FAIL_HARDWARE (its
                                machine too: its in-memory checkpoints deleted before a relaunch),
                                FAIL_STOP (the process stops, SIGSTOP: a hang) */
    int fail_phase;          /* --fail-phase: FAULT_FORWARD (the iteration's start),
                                FAULT_BACKWARD, FAULT_CHECKPOINT */
    /* --search (cmd/search.h): every configuration planned and predicted, the best printed */
    int search;
    int search_largest;        /* --largest: the largest -l any configuration trains */
    double min_samples_per_s;  /* --min-samples-per-s: ... that still trains this fast (0: any) */
    int search_top;            /* --top K: how many to print (default 5) */
    char search_out[PATH_MAX]; /* --out FILE: the winner as a config ("" none) */
    int search_verify;         /* --verify K: train the top K and K random ones (0: none) */
    char rerun_path[PATH_MAX]; /* --rerun FILE.json: run what that record says (cmd/rerun.h) */
    relaunch_account relaunch; /* --relaunch-of: set by the --ranks supervisor on a relaunch */
    char job_notes[PATH_MAX];  /* --job-notes DIR: the --ranks supervisor's private directory,
                                  set for its ranks ("": no supervisor) */
    rerun_source rerun_of;     /* --rerun-of: set by --rerun for the run it starts */
    int report_fd;             /* --report-fd FD: the pipe a sweep's child reports to (child.c);
                                  0: none (a pipe the sweep passes is never stdio) */
    /* How the run was made (its settings; provenance.h), for its log and JSON: set by main
     * before a run trains; NULL elsewhere */
    const struct run_provenance *provenance;
} run_config;

/* One run of a run-list config after expansion: the options it gives its child process. */
typedef struct cli_run {
    char **args;           /* "--method", NAME, "--layers", "15", ...; NULL-terminated */
    int nargs;
    char where[32];        /* "runs[3]": where it came from, for messages */
    char method[64];
    char layers_from[64];  /* "": layers as given; else the engine whose --find-max result
                              (in the results directory) gives this run's layer count */
    int find_max;          /* run --find-max for this method and shape instead of training */
} cli_run;

typedef struct cli_runlist {
    cli_run *runs;
    int n;
    char description[256];
} cli_runlist;

typedef enum cli_outcome {
    CLI_RUN = 0,   /* run with the parsed config */
    CLI_DONE = 1,  /* --help or --version was printed */
    CLI_ERROR = 2, /* err holds the one-line reason */
} cli_outcome;

/* Defaults, then --config, then the command line. */
cli_outcome cli_parse(int argc, char **argv, run_config *run_cfg, char *err, size_t errlen);
/* With no model shape given, the CPU backend uses a small preset (returns 1 if applied). */
int cli_apply_cpu_preset(run_config *run_cfg);
/* The one-line description of the CPU preset (for the notice and --help). */
const char *cli_cpu_preset_text(void);
void cli_usage(FILE *out);

/* A run-list config (an object with "runs" and optional "defaults" and "description"): each
 * run's keys are checked (known key, type, value) and merged over the defaults, lists are
 * expanded.  Errors name the file and the JSON path ("config F: runs[3].layers: ...").
 * Cross-option checks (hidden vs heads, window vs layers) are the caller's, with cli_parse
 * on each run's full command line. */
int cli_load_runlist(const char *path, cli_runlist *out, char *err, size_t errlen);
void cli_runlist_free(cli_runlist *l);

/* The command-line options to hand on to child runs: argv[1..] without --resume,
 * --find-max and the --search options, without --config when drop_config (a run list: its
 * runs give their options explicitly), without --method when drop_method.  *out is
 * NULL-terminated (strv.h). */
int cli_child_args(int argc, char **argv, int drop_config, int drop_method, char ***out, int *nout);

/* The long names of the options whose value is an iteration of the run (OPTION_ITERATION) into
 * names, NULL-terminated (at most max - 1 of them): refused beyond --iters, and not handed to
 * --find-max's probes, which train 2 iterations whatever --iters says.  Returns how many. */
int cli_iteration_options(const char **names, int max);

/* The option tables checked together: the driver's (options.h), the ones several engines take
 * (registry.c) and engines[0..n)'s own: no name or letter twice, the hash slots 0, 1, 2, ...
 * with no gap, each setter on a field of its type, an engine's own field set by no other
 * option, every name an engine takes a shared option.  0, or -1 with the first contradiction
 * in err.  (cli_parse checks the registry's and aborts on one: a bug of the build.) */
int cli_check_options(const engine_vtbl *const *engines, int n, char *err, size_t errlen);

/* args (options that cli_parse accepted, without argv[0]) without the options of those long
 * names (a NULL-terminated list), in whatever form they were typed (-l 8, --layers=8).  *out
 * NULL-terminated (strv.h); 0, or -1 out of memory. */
int cli_args_without(char *const *args, int nargs, const char *const *names, char ***out, int *nout);

/* Format a one-line error into err; returns -1 (for `return cli_fail(...)`). */
int cli_fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Fill in the ranks (world, and those on this machine) and the micro-batches per rank that
 * --global-batch asks for; -1 with the reason when it is not a multiple of batch x world. */
int cli_resolve_ranks(run_config *run_cfg, int world, int local_world, char *err, size_t errlen);
/* --hosts FILE, read and checked (bad input: -1 and err, before anything is written) into
 * the ranks each machine takes.  Only where this process starts the ranks (not under
 * mpirun: there each rank learns its machine from MPI, and FILE may not be on its machine). */
int cli_resolve_hosts(run_config *run_cfg, char *err, size_t errlen);
/* The ranks of --ranks N that share one machine: N, or fewer with --hosts. */
int cli_ranks_per_machine(const run_config *run_cfg);

/* A hash of every parsed value a run acts on, per option (names[i] its long name), so that
 * ranks can check they were all given the same configuration; returns how many, at most
 * CLI_OPTIONS_MAX (-1, and nothing written, when max is less than that many). */
int cli_option_hashes(const run_config *run_cfg, uint64_t *hashes, const char **names, int max);
/* One hash of every option that changes what a run computes or measures (not where it
 * writes, how often it logs, its threads, or a job id): --resume takes a finished JSON with
 * the same fingerprint as this run's. */
uint64_t cli_fingerprint(const run_config *run_cfg);
/* Whether the len bytes at text are a fingerprint as the JSON writes one ("%016llx": 16
 * lower-case hex digits). */
int cli_is_fingerprint(const char *text, size_t len);

/* Whether a run of this shape (vocab_padded set) stays within what the index arithmetic can
 * address; validate() refuses the others, and the size searches stop below them.  Its
 * parameter and row counts into params and rows (either may be NULL). */
int cli_shape_addressable(const gpt_shape *sh, double *params, double *rows);

/* Was the option with this long name given? */
int cli_given(const run_config *run_cfg, const char *long_name);
/* Whether engine eng takes the option of this long name (every driver option; an engine's
 * option where eng declares or takes it): 0 for a name that is no option. */
int cli_option_taken_by(const char *long_name, const engine_vtbl *eng);
/* Whether the option names one job's state (OPTION_ONE_JOB): a rerun leaves it out. */
int cli_option_one_job(const char *long_name);

/* The options of args (a command line's tokens after argv[0], as cli_child_args gives them,
 * without the options only typed by hand) as a config object that --config reads back to
 * the same run: a --config among them is read first (the command line overrides it), every
 * option by its long name and type.  NULL with err set. */
struct cJSON *cli_args_config(char *const *args, int nargs, char *err, size_t errlen);

#endif
