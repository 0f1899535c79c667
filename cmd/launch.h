/*
 * launch.h — aebench --ranks N: the job on this machine, started and supervised.
 *
 * `aebench --ranks N ARGS` (not under an MPI world) runs `mpiexec -n N aebench ARGS` (ARGS
 * without --ranks) as a child and waits for it, as a sweep waits for its runs: the job's
 * report lines (the log and JSON of rank 0) pass through to whoever supervises this process
 * (a sweep), and when the job ends abnormally (a rank killed, crashed, or aborted after an
 * error) the supervisor says so in rank 0's log and JSON, naming the rank where a rank left
 * a note.  Ranks leave notes (fault_note) in a private directory the supervisor makes
 * (AEBENCH_JOB_NOTES) before they end the job on purpose: --fail-at, or an error that
 * leaves the other ranks waiting in a collective.
 */
#ifndef AEBENCH_LAUNCH_H
#define AEBENCH_LAUNCH_H

#include "cli.h"

/* Runs the job and returns the exit code to leave with (2: no mpiexec on the PATH). */
int launch_ranks(int argc, char **argv, const run_config *rc);

/* A rank's note for the supervisor (one line: why this rank ends the job); nothing when the
 * job has no supervisor. */
void fault_note(int rank, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A rank of a supervised job is past MPI's start-up (the ranks found each other): the
 * supervisor's start-up deadline is met; and should the rank then exit 2 (it refused its
 * configuration), it leaves the note LAUNCH_NOTE_REFUSED.  Best effort; nothing outside a
 * supervised job. */
void launch_note_started(void);

/* The note a rank leaves in the supervisor's notes directory when it exits 2 (it refused its
 * configuration): only then is the launcher's exit 2 a refusal (launch_status.h). */
#define LAUNCH_NOTE_REFUSED "refused"

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

/* --fail-at: rank --fail-rank leaves a note and SIGKILLs itself at iteration `iteration`. */
void fault_maybe_die(const run_config *rc, int rank, int iteration, int phase);

#endif
