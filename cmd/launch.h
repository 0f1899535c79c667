/*
 * launch.h — aebench --ranks N: the job on this machine, started and supervised.
 *
 * `aebench --ranks N ARGS` (not under an MPI world) runs `mpiexec -n N aebench ARGS` (ARGS
 * without --ranks) as a child and waits for it, as a sweep waits for its runs: the job's
 * report lines (the log and JSON of rank 0) pass through to whoever supervises this process
 * (a sweep), and when the job ends abnormally (a rank killed, crashed, or aborted after an
 * error) the supervisor says so in rank 0's log and JSON, naming the rank where a rank left
 * a note.  Ranks leave notes (fault_note) in a private directory the supervisor makes
 * (--job-notes on their command line) before they end the job on purpose: --fail-at, or an error that
 * leaves the other ranks waiting in a collective.  The ranks' side, and the job's private
 * directories, are job_dir.h's (included: main calls launch_note_started).
 */
#ifndef AEBENCH_LAUNCH_H
#define AEBENCH_LAUNCH_H

#include "cli.h"
#include "job_dir.h"

/* Runs the job and returns the exit code to leave with (2: no mpiexec on the PATH). */
int launch_ranks(int argc, char **argv, const run_config *run_cfg);

#endif
