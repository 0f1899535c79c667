/*
 * gemini.h — what the driver asks of the gemini engine outside its vtable (engine.h).
 */
#ifndef AEBENCH_GEMINI_H
#define AEBENCH_GEMINI_H

#include "engine.h"
#include "runtime/comm.h"

/* gemini --gemini-recover: the iteration a recovery of job cfg->gemini_job would restore, as
 * its restore() chooses it (the newest iteration every rank's shard has in the stores, else in
 * --ckpt-dir: *from_disk), but from the versions' headers alone and before anything is made,
 * locked or changed, so that the driver can refuse a recovery it cannot use (one past --iters)
 * while the store is still whole.  restore() then checks the data, which can only make the
 * iteration older.  A collective: every rank calls it, and every rank gets the same answer.
 * -1: nothing to recover (or no --gemini-recover, or no --gemini-job: a new id names no
 * store); -2: out of memory, or the ranks could not exchange what they hold. */
int gemini_recovery_point(const engine_config *cfg, const comm_world *comm, int *from_disk);

#endif
