/*
 * rerun.h — aebench --rerun FILE.json: run again exactly the run a result's JSON records.
 *
 * The record's "settings" (provenance.h) become the command line: the same engine, options,
 * seed, shape, iterations and ranks (a --ranks N record reruns with --ranks N; one written by
 * N ranks under plain mpirun asks to be rerun under the same mpirun), with --method and
 * --device pinned to the record's where its settings left them to the defaults (so a CPU run
 * reruns on the CPU on a machine with a GPU).  Beside --rerun only --results (where the new
 * log and JSON go; default: the record's own results directory), --device (another backend:
 * the record's GPU may be missing here) and --hosts (the machines of a --ranks job) may be
 * given.  Before the run starts it prints what differs between the record and this machine
 * and build: the commit, the build configuration, the device, the MPI, NCCL and CUDA
 * versions, the CPU, aebench's version, and the fingerprint of the settings as this build
 * parses them (another fingerprint: the defaults changed between the two builds).  The new
 * run's JSON says "rerun_of": the record's path and fingerprint.
 *
 * A file that is not an aebench run record (not JSON, no settings, a symbolic link, larger
 * than CLI_JSON_MAX_BYTES) is refused: one line, exit 2, nothing written.
 */
#ifndef AEBENCH_RERUN_H
#define AEBENCH_RERUN_H

/* The command line a rerun runs (argv[0] the program's, NULL-terminated). */
typedef struct rerun_plan {
    char **argv;
    int argc;
} rerun_plan;

/* rerun_prepare's answers that are not exit codes. */
enum {
    RERUN_NONE = -1,  /* argv asks no rerun (or is bad input the ordinary parse names): run argv */
    RERUN_READY = -2, /* plan holds the rerun's command line: run it */
};

/* When argv asks --rerun FILE: reads FILE, says what differs here, and makes plan's command
 * line (RERUN_READY); or says why not and returns the exit code (2); 0 after --help. */
int rerun_prepare(int argc, char **argv, rerun_plan *plan);
void rerun_plan_free(rerun_plan *plan);

#endif
