/*
 * job_dir.h — a job's private temporary directories, and the notes a rank leaves in its
 * supervisor's (the ranks' side of aebench --ranks, launch.h).
 *
 * The --ranks supervisor makes a private directory (job_dir_make) and names it to its ranks with
 * --job-notes DIR (run_config.job_notes) on their command line; a rank notes there that it started, that it refused its configuration,
 * and why it ends the job on purpose (fault_note: --fail-at, or an error that leaves the other
 * ranks waiting in a collective).  The run (run.c) makes its heartbeat directory here too.
 * Both the run and the supervisor include this; it includes neither.
 */
#ifndef AEBENCH_JOB_DIR_H
#define AEBENCH_JOB_DIR_H

#include "cli.h"

#include <stddef.h>

/* A rank's note for the supervisor in its notes directory (one line: why this rank ends the
 * job); nothing when the job has no supervisor (notes ""). */
void fault_note(const char *notes, int rank, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A rank of a supervised job is past MPI's start-up (the ranks found each other): the
 * supervisor's start-up deadline is met; and should the rank then exit 2 (it refused its
 * configuration), it leaves the note LAUNCH_NOTE_REFUSED.  Best effort; nothing outside a
 * supervised job. */
void launch_note_started(const char *notes);

/* The note a rank leaves in the supervisor's notes directory when it exits 2 (it refused its
 * configuration): only then is the launcher's exit 2 a refusal (launch_status.h). */
#define LAUNCH_NOTE_REFUSED "refused"

/* --fail-at: rank --fail-rank leaves a note and SIGKILLs itself at iteration `iteration`. */
void fault_maybe_die(const run_config *run_cfg, int rank, int iteration, int phase);

/* Where a job's temporary directories go: TMPDIR, or /tmp without it (the very string
 * getenv("TMPDIR") returned when it is TMPDIR). */
const char *job_tmp(void);
/* The directory job_dir_make makes its directories in (TMPDIR, else /tmp) is there and
 * writable: 0, or -1 with one line naming it and TMPDIR (bad input, before anything is
 * written). */
int job_tmp_refused(char *err, size_t errlen);

/* A private temporary directory of a job (TMPDIR or /tmp, PREFIX.XXXXXX by mkdtemp: 0700, a
 * name nobody had), holding a file "pid" with ours; first, every such directory of ours (the
 * same prefix, our uid) whose pid is gone is named on stderr as stale, with the command that
 * removes it.  0, or -1 with errno. */
int job_dir_make(char *out, size_t len, const char *prefix);
/* Remove a job directory made so: its "pid", then it (the caller removed what else it put there). */
void job_dir_remove(const char *dir);

#endif
