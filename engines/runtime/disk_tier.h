/*
 * disk_tier.h — the disk as a memory tier: one swap file under --nvme-dir, read and
 * written with O_DIRECT in aligned blocks, several requests in flight.
 *
 * Interface contract (engines/runtime/disk_tier.c implements it):
 *   - disk_tier_open makes a private directory (mode 0700, mkdtemp "aebench-swap-XXXXXX")
 *     under dir and the swap file in it; nothing of it outlives the process: removed by
 *     disk_tier_close, at exit and on SIGINT/SIGTERM (and after a crash where the platform
 *     allows: see the .c for how).  A directory that is missing, not writable, or on a file
 *     system without O_DIRECT is a clear one-line error (GPT_ERR_IO, message printed to
 *     stderr naming the directory and the reason), and nothing is left behind.
 *   - Regions are reserved up front (disk_tier_reserve) and counted in the disk budget
 *     (mem_budget "disk"); the space is allocated in the file then (fallocate), so a disk that
 *     is too full fails at reservation with an OOM record of the disk budget
 *     (GPT_ERR_OOM) or GPT_ERR_IO with the reason, never half-way through training.
 *   - Reads and writes are asynchronous: each returns a ticket; disk_tier_wait(ticket)
 *     blocks until that request (and every request issued before it) is complete and
 *     returns its status.  Buffers must be aligned to DISK_TIER_ALIGN and sizes are rounded
 *     up to it by the caller (disk_tier_round); offsets come from disk_tier_reserve.
 *   - A request may also wait for a gpt_event first (the copy that filled its buffer).
 *   - Busy time (any request in flight) and bytes moved are counted for the step report.
 */
#ifndef AEBENCH_DISK_TIER_H
#define AEBENCH_DISK_TIER_H

#include "../../kernels/gpt.h"
#include "membudget.h"

#include <stddef.h>
#include <stdint.h>

enum { DISK_TIER_ALIGN = 4096 };

typedef struct disk_tier disk_tier;

/* Size rounded up to DISK_TIER_ALIGN. */
static inline size_t disk_tier_round(size_t bytes)
{
    return (bytes + DISK_TIER_ALIGN - 1) / DISK_TIER_ALIGN * DISK_TIER_ALIGN;
}

/* Open the tier under dir with `inflight` I/O workers (<= 0: a default); budget is the run's
 * disk budget (may be NULL in tests: no limit).  0, GPT_ERR_IO or GPT_ERR_OOM. */
int disk_tier_open(disk_tier **out, const char *dir, mem_budget *budget, int inflight);
/* The same, for tests: the directory's and the file's names are left in place until
 * disk_tier_close (so a test can check their modes; a killed process leaves them behind). */
int disk_tier_open_keeping_names(disk_tier **out, const char *dir, mem_budget *budget, int inflight);
/* Close: wait for every request, remove the file and the directory, give the bytes back to
 * the budget.  Safe on NULL. */
void disk_tier_close(disk_tier *t);
/* The private directory (for messages and tests); its name is already removed unless the
 * tier was opened with disk_tier_open_keeping_names. */
const char *disk_tier_path(const disk_tier *t);

/* Reserve `bytes` (rounded up) of the file for `what`; *offset is where it starts. */
int disk_tier_reserve(disk_tier *t, size_t bytes, const char *what, uint64_t *offset);

/* Queue a write of buf[0, bytes) to offset (after `after` completes, if not NULL). */
int disk_tier_write(disk_tier *t, uint64_t offset, const void *buf, size_t bytes,
                    gpt_event *after, uint64_t *ticket);
/* Queue a read of [offset, offset + bytes) into buf. */
int disk_tier_read(disk_tier *t, uint64_t offset, void *buf, size_t bytes, uint64_t *ticket);
/* Wait for the request with this ticket and all before it; GPT_OK or GPT_ERR_IO (first
 * failure among them, e.g. ENOSPC, already printed). */
int disk_tier_wait(disk_tier *t, uint64_t ticket);
/* Wait for everything queued. */
int disk_tier_drain(disk_tier *t);

/* Since the previous call: ms with at least one request in flight, bytes read, written. */
void disk_tier_take_stats(disk_tier *t, double *busy_ms, double *bytes_read, double *bytes_written);

#endif
