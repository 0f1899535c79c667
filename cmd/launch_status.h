/*
 * launch_status.h — what a `--ranks N` job's ending means: the launcher's wait status, what the
 * ranks left behind (a refusal note, rank 0's JSON) and what the kernel says of each rank's
 * exit, mapped to aebench's exit code and one reason.  A pure function: no I/O, so that every
 * status MPICH's and Open MPI's launchers produce is tested (tests/test_launch_status.c).
 *
 * What the launchers return (from their sources):
 *   MPICH's Hydra ORs the raw wait(2) statuses of all ranks.  When a signal bit is set it
 *   returns that ORed status itself (the exit status is its low byte: the ORed signal numbers,
 *   0x80 when a core was dumped); otherwise the ORed exit codes.  So a rank killed by SIGINT
 *   gives 2 — the code of bad input — and SIGINT on one rank with SIGKILL on the other (the
 *   proxy's clean-up) gives 2 | 9 = 11, which reads as SIGSEGV.
 *   Open MPI's mpirun (ORTE, PRRTE) returns the first failed rank's exit code, and 128 + the
 *   signal for a rank killed by one.
 */
#ifndef AEBENCH_LAUNCH_STATUS_H
#define AEBENCH_LAUNCH_STATUS_H

#include <stddef.h>

typedef enum launcher_kind { LAUNCHER_MPICH = 0, LAUNCHER_OPEN_MPI = 1 } launcher_kind;

/* What rank 0's JSON said at the end (its "status"). */
typedef enum rank0_record {
    RANK0_NONE = 0,    /* no JSON (it never got there, or it could not be read) */
    RANK0_RUNNING,     /* the record so far: it did not get to say how it ended */
    RANK0_OK,
    RANK0_OOM,         /* it said it ran out of memory (exit 3) */
    RANK0_FAILED,      /* "error", "interrupted", ...: it said why in its message */
} rank0_record;

enum { LAUNCH_RANKS_MAX = 64 };

typedef struct launch_outcome {
    launcher_kind launcher;
    int reaped;             /* the launcher was waited for: status is its wait(2) status */
    int status;
    int forwarded_signal;   /* a signal we were sent and passed on to the job (0: none) */
    int start_timeout;      /* no rank got past MPI's start-up by the deadline; the job was ended */
    int refusal_noted;      /* a rank refused its configuration and said so (exit 2, one line) */
    int calibrate;          /* the job writes no run JSON (--calibrate): exit 0 is enough */
    rank0_record rank0;
    int ranks;              /* the ranks whose exits the kernel may know, 0 .. ranks - 1 */
    unsigned long long known; /* ranks whose wait(2) status is in rank_status[] */
    int rank_status[LAUNCH_RANKS_MAX];
    unsigned long long first; /* the ranks seen to exit first (prefer them when naming one) */
} launch_outcome;

typedef struct launch_ending {
    int code;               /* 0, 1, 2, 3, 4 or 128 + signal */
    int said;               /* the ranks said why themselves (a refusal, rank 0's JSON): the
                               reason is only for the log */
    char reason[400];       /* one line, without "aebench: --ranks N: " ("" for 0) */
} launch_ending;

/* The ending of a job from what was seen of it. */
launch_ending launch_ending_of(const launch_outcome *o);

/* What a launcher's exit code says of its ranks, one phrase into out: "a rank killed by
 * SIGINT (MPICH reports a rank's signal as its exit code)", "MPICH ORs its ranks' statuses: a
 * rank killed by a signal, e.g. SIGINT|SIGKILL or SIGSEGV".  Empty for 0. */
void launch_decode_exit(launcher_kind launcher, int exit_code, char *out, size_t len);

#endif
