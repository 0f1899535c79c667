/*
 * provenance.h — how a result was made, as its log and JSON say it (issue 48: "every result
 * says how it was made"), and what --rerun (rerun.h) compares with this machine:
 *
 *   build     the commit (git HEAD at build time, "-dirty" when the tree had changes;
 *             "unknown" outside a git checkout), the Makefile's build configuration (CC, MPI,
 *             CUDA, flags), and the libraries the run finds: MPI's version, NCCL's, the CUDA
 *             runtime and driver, and the CPU's model (what -march=native built for)
 *   settings  the run's options as a config object that --config reads back to the same run:
 *             for a run typed by hand its command line without the options only typed by hand
 *             (--resume, --rerun, --search's), for a sweep's child or a --ranks rank the
 *             command line it was started with (a rank's with --ranks N, which its supervisor
 *             took off); what differs from the defaults, in the log as one line
 *             "settings: --layers 8 --hidden 64 ..."
 *   rerun_of  for a run started by --rerun: the record it reruns and that record's fingerprint
 *             (--rerun-of on its command line: --rerun adds it, and --ranks hands it on to the ranks)
 */
#ifndef AEBENCH_PROVENANCE_H
#define AEBENCH_PROVENANCE_H

#include <limits.h>
#include <stddef.h>

#ifndef PATH_MAX
#define PATH_MAX 4096
#endif

typedef struct cJSON cJSON;

/* The build and the libraries it runs with (strings: "none" where the build has no such
 * library). */
typedef struct build_info {
    char commit[64];
    const char *config;
    char mpi[256];        /* the first line of MPI_Get_library_version's */
    char nccl[32];        /* "2.28.9" */
    char cuda_runtime[16]; /* "12.9" */
    char cuda_driver[16];  /* the newest CUDA the driver runs ("none": no driver) */
    char cpu[128];         /* /proc/cpuinfo's model name */
} build_info;

/* This process's build and libraries (asks MPI, NCCL and CUDA their versions; makes no CUDA
 * context and needs no MPI_Init). */
void provenance_build(build_info *b);
/* b as the JSON's "build" object (NULL: out of memory). */
cJSON *provenance_build_json(const build_info *b);

/* How one run was made (main fills it in before the run trains; run.c writes it). */
typedef struct run_provenance {
    build_info build;
    cJSON *settings;               /* NULL when they could not be had (said on stderr) */
    char *settings_line;           /* the settings as options, "" for none (malloc'd) */
    const char *started_by;        /* "the command line", "a sweep", "--ranks", "mpirun" */
    char rerun_of[PATH_MAX];       /* "" unless a rerun */
    char rerun_fingerprint[32];
} run_provenance;

struct run_config;
/* The provenance of the run that argv (the process's own, after MPI_Init) starts, on a world
 * of `world` ranks, argv parsed into run_cfg (who started it: its --job-notes; what it reruns:
 * its --rerun-of).  Never fails the run: settings that cannot be had (out of memory, a --config
 * file gone since it was read) are left out, saying so on stderr. */
void provenance_of_run(run_provenance *p, int argc, char **argv, int world, const struct run_config *run_cfg);
void provenance_free(run_provenance *p);
/* The log's lines of p ("build: ...", "build config: ...", "settings: ...", and for a rerun
 * "rerun of: ..."), newline-separated, without the last newline (malloc'd; NULL: out of memory). */
char *provenance_log_lines(const run_provenance *p);
/* p into the run's JSON: "build", "settings", "started_by" and, for a rerun, "rerun_of". */
void provenance_add_json(cJSON *root, const run_provenance *p);

/* A config object's options as command-line tokens (--name VALUE; a switch --name when true,
 * nothing when false), in its order: 0, or -1 with err (a value that is no switch, number or
 * string; out of memory).  *out NULL-terminated (strv.h). */
int provenance_config_args(const cJSON *config, char ***out, int *nout, char *err, size_t errlen);
/* The same tokens as one line, each quoted for a POSIX shell where it needs it (malloc'd;
 * NULL with err). */
char *provenance_config_line(const cJSON *config, char *err, size_t errlen);
/* Command-line tokens as one line, quoted so (malloc'd; NULL: out of memory). */
char *provenance_args_line(char *const *args, int n);

#endif
