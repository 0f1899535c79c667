/*
 * exit_codes.h — aebench's exit codes (and run_engine's).  A header of their own: the ranks'
 * notes (job_dir.c) need one of them, and run.c includes job_dir.h, so job_dir.c may not
 * include run.h (no include loop).  run.h includes this.
 */
#ifndef AEBENCH_EXIT_CODES_H
#define AEBENCH_EXIT_CODES_H

enum {
    EXIT_RUN_OK = 0,
    EXIT_RUN_ERROR = 1,
    EXIT_BAD_INPUT = 2,
    EXIT_RUN_OOM = 3,
    EXIT_RANK_LOST = 4, /* a rank died or hung (its watchdog, or the supervisor, ended the job) */
    /* 128 + n: aebench (a sweep, the supervisor) was ended by signal n */
};

#endif
