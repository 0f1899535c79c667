/*
 * ckpt_store.h — the in-memory checkpoint store of one rank (the gemini engine): a file on a
 * memory file system (default /dev/shm), mapped and page-locked for the copies, that outlives
 * the process, so that a rank killed mid-training leaves its machine's copies behind for the
 * relaunched job.
 *
 * Where: DIR/aebench-gemini-<uid>-<job>/ (mode 0700: another user of the machine reads no
 * one's model state), one file per rank, rank-<r>.ckpt (0600).  A file holds `slots` shards
 * (this rank's own and the peers' it keeps), each in two versions that alternate; a version
 * is a header page and the shard's data (`floats` floats, page aligned):
 *
 *   [slot 0: version 0 (header | data), version 1 (header | data)] [slot 1: ...] ...
 *
 * A version is written in three moves: begin (its header says "writing" and which
 * iteration), the data (by copies, from anywhere), complete (the checksum of every chunk of
 * the data, then "complete").  It is valid when it says complete and every checksum matches
 * the data: a rank that died mid-write leaves an invalid version, never a wrong one.
 */
#ifndef AEBENCH_CKPT_STORE_H
#define AEBENCH_CKPT_STORE_H

#include "../../kernels/gpt.h"
#include "private_dir.h"

#include <stddef.h>
#include <string.h>
#include <stdint.h>

enum { CKPT_VERSIONS = 2 };

/* The identity of a job's checkpoint: what a version must have been written by to be restored
 * (shape, dtype, ranks, copies, ...: n values the caller lists), kept in every header. */
uint64_t ckpt_identity(const uint64_t *values, int n);

typedef struct ckpt_store ckpt_store;

/* A job id made by this process: `who` ('s' the --ranks supervisor, 'p' rank 0 of a job
 * started by hand), its pid and the time; and the pid in an id made so (0 for one a user
 * gave), so that a store whose maker is gone can be called stale. */
void ckpt_job_id(char *out, size_t len, char who);
long ckpt_job_pid(const char *job);
/* The directory of job `job` under dir (no trailing slash), into out. */
int ckpt_store_dir(char *out, size_t len, const char *dir, const char *job);
/* --gemini-store with "%m" in it names a store per machine (each machine's memory: the
 * emulation of several machines on one host gives each its own): the pattern with every
 * "%m" replaced by `machine`, into out.  A pattern without one is copied.  -1: too long. */
int ckpt_store_for_machine(char *out, size_t len, const char *pattern, int machine);
static inline int ckpt_store_per_machine(const char *pattern) { return strstr(pattern, "%m") != NULL; }
/* Bytes of one rank's file: slots shards of `floats` floats. */
size_t ckpt_store_bytes(int slots, size_t floats);
/* Create (or, with reuse, open what a killed job left: a missing or short file is made
 * anew, empty) rank's file under the job's directory, map it and page-lock it on be.
 * The directory is made or accepted as private_dir.h says (ours, 0700, not a link), and this
 * rank's lock in it (rank-<r>.lock) is taken before its file is touched: a second job of the
 * same id is refused with the holder's pid.  owners[s] is the rank whose shard slot s holds;
 * identity (ckpt_identity) goes into every header and must match for a version to be valid.
 * 0, GPT_ERR_OOM when the file system has no room for it, or GPT_ERR_IO; why (whylen bytes)
 * says what went wrong. */
int ckpt_store_open(ckpt_store **out, const gpt_backend *be, const char *dir, const char *job,
                    int rank, int slots, const int *owners, size_t floats, size_t chunk_floats,
                    uint64_t identity, int reuse, char *why, size_t whylen);
/* Unmap; with remove, delete the file (and the directory when it is empty). */
void ckpt_store_close(ckpt_store *s, int remove);

/* Slot s's data of version v (floats floats, mapped memory the copies may use). */
float *ckpt_store_data(ckpt_store *s, int slot, int version);
/* The slot of owner's shard, or -1. */
int ckpt_store_slot_of(const ckpt_store *s, int owner);
/* Version v of slot s is being written for iteration it (adam_step with it). */
void ckpt_store_begin(ckpt_store *s, int slot, int version, int iteration, int adam_step);
/* Version v of slot s's chunk checksums (kernels/checksum_element.h; one per chunk of
 * chunk_floats, in the header page, mapped memory the copies may use): whoever writes the
 * data writes these, computed where the data came from (the backend's checksum_chunks). */
uint64_t *ckpt_store_sums(ckpt_store *s, int slot, int version);
/* The chunk size the store uses (the one asked for, or larger where a header page cannot hold
 * that many sums), and the number of chunks of a version. */
size_t ckpt_store_chunk_floats(const ckpt_store *s);
int ckpt_store_nchunks(const ckpt_store *s);
/* Its data and sums are all there: mark it complete (recovery checks the data against the
 * sums before it trusts a version). */
void ckpt_store_mark_complete(ckpt_store *s, int slot, int version);
/* The iteration version v of slot s holds when it is valid (complete; its header's own
 * checksum matches, and it names this slot's owner, this version and the store's identity;
 * the data's checksums match), else -1; *adam_step from its header. */
int ckpt_store_valid(ckpt_store *s, int slot, int version, int *adam_step);

/* What rank's file of job `job`'s store under dir holds, by its headers alone, without
 * creating, locking or changing anything (gemini --gemini-recover checks what it would restore
 * before it writes anything): iterations[s * CKPT_VERSIONS + v] is the iteration version v of
 * slot s says when its header is whole, complete and ours (owners[s], identity, sizes: what
 * ckpt_store_valid checks before the data), else -1.  0 (a missing store or file holds
 * nothing), -1 out of memory. */
int ckpt_store_peek(const char *dir, const char *job, int rank, int slots, const int *owners, size_t floats,
                    size_t chunk_floats, uint64_t identity, int *iterations);

/* ---- the persistent checkpoint (gemini --ckpt-dir): a version of this rank's shard in a
 * file on disk, DIR/aebench-ckpt-<uid>-<job>/rank-<r>.ckpt (0700 / 0600), two versions that
 * alternate, each a header page (as the store's) and the data; written with O_DIRECT (plain
 * writes where the file system refuses it, e.g. tmpfs), the header first ("writing"), then the
 * data, then the header with its checksums ("complete"), each made durable (fdatasync). */

/* The job's checkpoint directory under dir, made or accepted as private_dir.h says, with this
 * rank's lock (rank-<r>.lock) taken for as long as d is open.  0; 1 when another job holds the
 * lock; -1 (why says what, in either case). */
int ckpt_dir_open(private_dir *d, const char *dir, const char *job, int rank, char *why, size_t whylen);
/* Write floats floats at data (page aligned, as the store's data is) as version v of the
 * rank's file in d.  0, GPT_ERR_OOM (no room: "disk full writing FILE"), or GPT_ERR_IO; the
 * reason in why (ckpt_file_write: on stderr).  A file this call made and could not write is
 * removed; one that was there is left (its other version is still whole). */
int ckpt_file_write_why(const private_dir *d, int rank, int version, uint64_t identity, int iteration,
                        int adam_step, const float *data, size_t floats, size_t chunk_floats, char *why,
                        size_t whylen);
int ckpt_file_write(const private_dir *d, int rank, int version, uint64_t identity, int iteration,
                    int adam_step, const float *data, size_t floats, size_t chunk_floats);
/* Bytes of a rank's persistent file of a shard of `floats` floats (its versions). */
size_t ckpt_file_bytes(size_t floats);
/* Bytes the files of job `job`'s persistent checkpoint under dir take on its disk now (what a
 * check of the room they need counts as theirs already). */
uint64_t ckpt_job_file_bytes(const char *dir, const char *job);
/* The same for the persistent checkpoint: iterations[v] what ckpt_file_header says of version
 * v of rank's file of job `job` under dir (the --ckpt-dir), -1 where none; nothing is created
 * or locked.  0. */
int ckpt_file_peek(const char *dir, const char *job, int rank, uint64_t identity, size_t floats,
                   size_t chunk_floats, int *iterations);
/* Read version v of the rank's file into data (page aligned, room for floats rounded up to
 * a page); its iteration when it is complete, its header whole and ours (identity) and every
 * checksum matches, else -1. */
int ckpt_file_read(const private_dir *d, int rank, int version, uint64_t identity, float *data,
                   size_t floats, size_t chunk_floats, int *adam_step);
/* Version v's header alone: its iteration when it is complete, whole (its checksum) and ours
 * (owner, version, identity, sizes), else -1.  Recovery reads only the data of the version it
 * chooses. */
int ckpt_file_header(const private_dir *d, int rank, int version, uint64_t identity, size_t floats,
                     size_t chunk_floats, int *adam_step);
/* What a relaunch could recover from, headers only (recovery checks the data): each version
 * that is whole and says complete, as (whose shard, which iteration), of every rank's file of
 * the job under dir (the store's directory; or, with persistent, the checkpoint's) added to h
 * (zeroed at first; several directories, e.g. one store per machine, may add to one).  0, or
 * -1 out of memory. */
typedef struct ckpt_held {
    int owner, iteration;
} ckpt_held;
typedef struct ckpt_holdings {
    ckpt_held *held;
    int n, cap;
} ckpt_holdings;
int ckpt_job_holdings(const char *dir, const char *job, int persistent, ckpt_holdings *h);
/* The newest iteration at which the n versions of held (whose shard, which iteration; one
 * below 0 holds nothing) hold every owner 0..ranks-1's shard: what a recovery restores (gemini's
 * restore() from the stores and from --ckpt-dir, and the --ranks supervisor deciding whether to
 * relaunch, all ask it here), else -1, and then *newest the newest iteration any shard is held
 * at (-1: none) and *missing a rank whose shard it lacks. */
int ckpt_newest_whole(const ckpt_held *held, int n, int ranks, int *newest, int *missing);
void ckpt_holdings_free(ckpt_holdings *h);
/* Whether a job's store or checkpoint directory (its path) is in use: 1 when a rank's lock in
 * it is held (*holder that rank's pid), 0 when none is (a stale one: its job is gone), -1 when
 * it is not a private directory of ours. */
int ckpt_dir_in_use(const char *path, long *holder);
/* Remove a job's store or checkpoint directory (path) that is ours and that no process uses:
 * every rank's file and lock, then the directory.  One in use, not ours or not private is left
 * as it was. */
void ckpt_dir_remove(const char *path);
/* Remove this rank's file of the persistent checkpoint, release its lock and close d (the
 * directory goes with the last rank's). */
void ckpt_file_remove(private_dir *d, int rank);

#endif
