/*
 * disk_tier.c — the swap file behind disk_tier.h: O_DIRECT pread/pwrite on a small pool of
 * pthreads, several requests in flight, tickets that complete in order.
 *
 * Nothing outlives the process, without any global state: disk_tier_open makes the private
 * directory (mkdtemp: mode 0700), creates the swap file in it (O_CREAT|O_EXCL, 0600) and at
 * once unlinks the file and removes the directory.  The open descriptor keeps the file's
 * space until it is closed, and the kernel closes it however the process ends — normal
 * exit, SIGINT, SIGTERM, SIGKILL or a crash — so no signal handler and no registry of files
 * to clean is needed, and nobody else can open the file by name meanwhile.  (For a test of
 * the names' modes, disk_tier_open_keeping_names leaves them in place until disk_tier_close;
 * then a killed process does leave them behind.)
 *
 * Requests: a growable ring indexed by ticket.  Workers take requests in ticket order (the
 * head of the queue), so they start in order and finish in any order; "wait for t" returns
 * once every request <= t is done.  A request does not start while an earlier one that is
 * still running conflicts with it: the same file bytes with a write among the two, or the
 * same memory with a read (which fills memory) among the two.  So issue order is the only
 * order a caller has to think about (a read issued after a write of the same region sees
 * that write; a buffer refilled by a read after a write from it waits for the write).
 *
 * A request with an `after` event waits for it on its worker (gpt_event_sync) before its
 * I/O: the copy that filled the buffer.  Busy time is the wall time with at least one pread
 * or pwrite running (not the time spent waiting for events).
 */
#include "disk_tier.h"

#include "timer.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

enum { DEFAULT_INFLIGHT = 8, MAX_INFLIGHT = 64 };

typedef enum req_state { REQ_QUEUED, REQ_RUNNING, REQ_DONE } req_state;

typedef struct disk_request {
    uint64_t ticket;
    uint64_t offset;
    char *buf;
    size_t bytes;
    int is_write;
    gpt_event *after;
    req_state state;
} disk_request;

struct disk_tier {
    int fd;
    int keep_names; /* disk_tier_open_keeping_names: names removed at close, not at open */
    char dir[PATH_MAX];
    char file[PATH_MAX];
    mem_budget *budget;
    uint64_t file_bytes; /* reserved so far (the end of the last region) */

    pthread_t *workers;
    int nworkers;
    pthread_mutex_t lock;
    pthread_cond_t work_changed; /* workers: a request queued, one finished, or stopping */
    pthread_cond_t done_changed; /* waiters: completed_upto advanced */
    int stopping;

    disk_request *ring; /* tickets (completed_upto, next_ticket], at ticket & (cap - 1) */
    size_t cap;
    uint64_t next_ticket;   /* last ticket handed out */
    uint64_t next_dispatch; /* first ticket no worker has taken */
    uint64_t completed_upto;
    uint64_t error_ticket; /* first failed request (0: none) */
    int error_status;

    int io_running;
    double busy_since, busy_ms;
    double bytes_read, bytes_written;
};

static int say(const char *dir, const char *fmt, const char *detail)
{
    fprintf(stderr, "aebench: disk tier: %s: ", dir);
    fprintf(stderr, fmt, detail);
    fputc('\n', stderr);
    return GPT_ERR_IO;
}

static int pthread_failed(const char *what, int rc)
{
    fprintf(stderr, "aebench: disk tier: %s failed: %s\n", what, strerror(rc));
    return GPT_ERR_BACKEND;
}

/* Locking a mutex we initialised cannot fail unless memory is corrupt: stop there. */
static void lock(disk_tier *t)
{
    int rc = pthread_mutex_lock(&t->lock);
    if (rc) {
        pthread_failed("pthread_mutex_lock", rc);
        abort();
    }
}
static void unlock(disk_tier *t)
{
    int rc = pthread_mutex_unlock(&t->lock);
    if (rc) {
        pthread_failed("pthread_mutex_unlock", rc);
        abort();
    }
}
static void wait_on(pthread_cond_t *c, disk_tier *t)
{
    int rc = pthread_cond_wait(c, &t->lock);
    if (rc) {
        pthread_failed("pthread_cond_wait", rc);
        abort();
    }
}

static disk_request *req_at(disk_tier *t, uint64_t ticket)
{
    return &t->ring[ticket & (t->cap - 1)];
}

/* ---- conflicts ---------------------------------------------------------------------------- */

static int ranges_overlap(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen)
{
    return a < b + blen && b < a + alen;
}

static int conflicts(const disk_request *a, const disk_request *b)
{
    if ((a->is_write || b->is_write) && ranges_overlap(a->offset, a->bytes, b->offset, b->bytes))
        return 1;
    return (!a->is_write || !b->is_write) &&
           ranges_overlap((uint64_t)(uintptr_t)a->buf, a->bytes, (uint64_t)(uintptr_t)b->buf,
                          b->bytes);
}

/* The head of the queue may start: every earlier request is done or does not conflict. */
static int head_may_start(disk_tier *t)
{
    if (t->next_dispatch > t->next_ticket) return 0;
    const disk_request *head = req_at(t, t->next_dispatch);
    for (uint64_t k = t->completed_upto + 1; k < t->next_dispatch; k++) {
        const disk_request *r = req_at(t, k);
        if (r->state == REQ_RUNNING && conflicts(head, r)) return 0;
    }
    return 1;
}

/* ---- the workers -------------------------------------------------------------------------- */

/* All of [buf, buf + bytes) at offset, through short transfers and signals. */
static int transfer(disk_tier *t, const disk_request *r)
{
    size_t done = 0;
    while (done < r->bytes) {
        const off_t at = (off_t)(r->offset + done);
        ssize_t n = r->is_write ? pwrite(t->fd, r->buf + done, r->bytes - done, at)
                                : pread(t->fd, r->buf + done, r->bytes - done, at);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            char what[160];
            snprintf(what, sizeof what, "%s of %zu bytes at offset %llu failed: %%s",
                     r->is_write ? "write" : "read", r->bytes, (unsigned long long)at);
            return say(t->dir, what, n == 0 ? "unexpected end of file" : strerror(errno));
        }
        done += (size_t)n;
    }
    return GPT_OK;
}

static void io_started(disk_tier *t)
{
    if (t->io_running++ == 0) t->busy_since = wall_ms();
}

static void io_ended(disk_tier *t)
{
    if (--t->io_running == 0) t->busy_ms += wall_ms() - t->busy_since;
}

static void *worker_main(void *arg)
{
    disk_tier *t = arg;
    lock(t);
    for (;;) {
        /* Stopping: the queue is drained first. */
        while (!head_may_start(t) && !(t->stopping && t->next_dispatch > t->next_ticket))
            wait_on(&t->work_changed, t);
        if (!head_may_start(t)) break;
        const uint64_t ticket = t->next_dispatch++;
        disk_request *slot = req_at(t, ticket);
        slot->state = REQ_RUNNING;
        const disk_request r = *slot; /* the ring may grow while we run */
        /* The next worker may be able to take the new head. */
        pthread_cond_signal(&t->work_changed);
        unlock(t);

        int status = r.after ? gpt_event_sync(r.after) : GPT_OK;
        if (status == GPT_OK) {
            lock(t);
            io_started(t);
            unlock(t);
            status = transfer(t, &r);
            lock(t);
            io_ended(t);
        } else {
            fprintf(stderr, "aebench: disk tier: %s: waiting for the event before a %s failed\n",
                    t->dir, r.is_write ? "write" : "read");
            lock(t);
        }
        req_at(t, ticket)->state = REQ_DONE;
        if (status == GPT_OK) {
            if (r.is_write) t->bytes_written += (double)r.bytes;
            else t->bytes_read += (double)r.bytes;
        } else if (!t->error_ticket || ticket < t->error_ticket) {
            t->error_ticket = ticket;
            t->error_status = status;
        }
        while (t->completed_upto < t->next_dispatch - 1 &&
               req_at(t, t->completed_upto + 1)->state == REQ_DONE)
            t->completed_upto++;
        pthread_cond_broadcast(&t->done_changed);
        pthread_cond_broadcast(&t->work_changed);
    }
    unlock(t);
    return NULL;
}

/* ---- open, reserve, close ----------------------------------------------------------------- */

static int open_failed(const char *dir, int err, const char *step)
{
    char why[256];
    switch (err) {
    case ENOENT: snprintf(why, sizeof why, "%s: the directory does not exist", step); break;
    case EACCES:
    case EPERM: snprintf(why, sizeof why, "%s: not writable (permission denied)", step); break;
    case EROFS: snprintf(why, sizeof why, "%s: read-only file system", step); break;
    case ENOSPC: snprintf(why, sizeof why, "%s: no space left on the device", step); break;
    case EINVAL:
        snprintf(why, sizeof why, "%s: the file system does not support O_DIRECT (tmpfs, for one); "
                 "give --nvme-dir on a disk file system", step);
        break;
    default: snprintf(why, sizeof why, "%s: %s", step, strerror(err)); break;
    }
    return say(dir, "%s", why);
}

static void tier_free(disk_tier *t)
{
    if (t->fd >= 0) close(t->fd);
    if (t->keep_names && ((t->file[0] && unlink(t->file) != 0) || (t->dir[0] && rmdir(t->dir) != 0)))
        fprintf(stderr, "aebench: disk tier: %s: cannot remove: %s\n", t->dir, strerror(errno));
    pthread_cond_destroy(&t->done_changed);
    pthread_cond_destroy(&t->work_changed);
    pthread_mutex_destroy(&t->lock);
    free(t->ring);
    free(t->workers);
    free(t);
}

/* The directory and the file; their names are gone again when this returns (unless kept). */
static int make_file(disk_tier *t, const char *dir)
{
    if (snprintf(t->dir, sizeof t->dir, "%s/aebench-swap-XXXXXX", dir) >= (int)sizeof t->dir)
        return say(dir, "%s", "the path is too long");
    if (!mkdtemp(t->dir)) {
        const int err = errno;
        t->dir[0] = '\0';
        return open_failed(dir, err, "cannot make the swap directory");
    }
    if (snprintf(t->file, sizeof t->file, "%s/swap", t->dir) >= (int)sizeof t->file) {
        rmdir(t->dir);
        t->dir[0] = '\0';
        return say(dir, "%s", "the path is too long");
    }
    t->fd = open(t->file, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_DIRECT | O_CLOEXEC, 0600);
    if (t->fd < 0) {
        const int err = errno;
        t->file[0] = '\0';
        rmdir(t->dir);
        t->dir[0] = '\0';
        return open_failed(dir, err, "cannot open the swap file with O_DIRECT");
    }
    if (t->keep_names) return GPT_OK;
    if (unlink(t->file) != 0 || rmdir(t->dir) != 0) {
        const int err = errno;
        unlink(t->file);
        rmdir(t->dir);
        return open_failed(dir, err, "cannot remove the swap file's name");
    }
    return GPT_OK;
}

/* disk_tier_open, the names kept until close or not. */
static int tier_open(disk_tier **out, const char *dir, mem_budget *budget, int inflight, int keep_names)
{
    *out = NULL;
    if (!dir || !dir[0]) return GPT_ERR_INVALID;
    disk_tier *t = calloc(1, sizeof *t);
    if (!t) return GPT_ERR_OOM;
    t->fd = -1;
    t->budget = budget;
    t->keep_names = keep_names;
    t->nworkers = inflight <= 0 ? DEFAULT_INFLIGHT : inflight > MAX_INFLIGHT ? MAX_INFLIGHT : inflight;
    t->cap = 64;
    t->ring = calloc(t->cap, sizeof *t->ring);
    t->workers = calloc((size_t)t->nworkers, sizeof *t->workers);
    if (!t->ring || !t->workers) {
        free(t->ring);
        free(t->workers);
        free(t);
        return GPT_ERR_OOM;
    }
    int rc;
    if ((rc = pthread_mutex_init(&t->lock, NULL))) {
        free(t->ring);
        free(t->workers);
        free(t);
        return pthread_failed("pthread_mutex_init", rc);
    }
    if ((rc = pthread_cond_init(&t->work_changed, NULL)) ||
        (rc = pthread_cond_init(&t->done_changed, NULL))) {
        /* (destroying a condition that was never made is harmless on glibc, but avoid it) */
        pthread_mutex_destroy(&t->lock);
        free(t->ring);
        free(t->workers);
        free(t);
        return pthread_failed("pthread_cond_init", rc);
    }
    if ((rc = make_file(t, dir))) {
        tier_free(t);
        return rc;
    }
    const int want = t->nworkers;
    t->nworkers = 0; /* the ones started, for close */
    for (int i = 0; i < want; i++) {
        if ((rc = pthread_create(&t->workers[i], NULL, worker_main, t))) {
            disk_tier_close(t);
            return pthread_failed("pthread_create", rc);
        }
        t->nworkers++;
    }
    *out = t;
    return GPT_OK;
}

int disk_tier_open(disk_tier **out, const char *dir, mem_budget *budget, int inflight)
{
    return tier_open(out, dir, budget, inflight, 0);
}

int disk_tier_open_keeping_names(disk_tier **out, const char *dir, mem_budget *budget, int inflight)
{
    return tier_open(out, dir, budget, inflight, 1);
}

void disk_tier_close(disk_tier *t)
{
    if (!t) return;
    lock(t);
    t->stopping = 1;
    pthread_cond_broadcast(&t->work_changed);
    unlock(t);
    for (int i = 0; i < t->nworkers; i++) {
        int rc = pthread_join(t->workers[i], NULL);
        if (rc) pthread_failed("pthread_join", rc);
    }
    if (t->budget) mem_budget_give(t->budget, (size_t)t->file_bytes);
    tier_free(t);
}

const char *disk_tier_path(const disk_tier *t)
{
    return t->dir;
}

int disk_tier_reserve(disk_tier *t, size_t bytes, const char *what, uint64_t *offset)
{
    *offset = 0;
    const size_t rounded = disk_tier_round(bytes ? bytes : 1);
    int rc;
    if (t->budget && (rc = mem_budget_take(t->budget, rounded, what))) return rc;
    const uint64_t at = t->file_bytes;
    int err = fallocate(t->fd, 0, (off_t)at, (off_t)rounded) == 0 ? 0 : errno;
    if (err == EOPNOTSUPP || err == ENOSYS) err = posix_fallocate(t->fd, (off_t)at, (off_t)rounded);
    if (err) {
        if (t->budget) mem_budget_give(t->budget, rounded);
        char step[128];
        snprintf(step, sizeof step, "cannot reserve %zu bytes for %.64s", rounded, what);
        return open_failed(t->dir, err, step);
    }
    t->file_bytes = at + rounded;
    *offset = at;
    return GPT_OK;
}

/* ---- requests ----------------------------------------------------------------------------- */

/* Double the ring, keeping every live ticket at ticket & (cap - 1). */
static int grow_ring(disk_tier *t)
{
    const size_t cap = t->cap * 2;
    disk_request *ring = calloc(cap, sizeof *ring);
    if (!ring) return GPT_ERR_OOM;
    for (uint64_t k = t->completed_upto + 1; k <= t->next_ticket; k++)
        ring[k & (cap - 1)] = *req_at(t, k);
    free(t->ring);
    t->ring = ring;
    t->cap = cap;
    return GPT_OK;
}

static int enqueue(disk_tier *t, uint64_t offset, void *buf, size_t bytes, int is_write,
                   gpt_event *after, uint64_t *ticket)
{
    *ticket = 0;
    if (((uintptr_t)buf % DISK_TIER_ALIGN) || bytes == 0 || bytes % DISK_TIER_ALIGN ||
        offset % DISK_TIER_ALIGN || offset + bytes > t->file_bytes) {
        fprintf(stderr, "aebench: disk tier: %s of %zu bytes at offset %llu from %p: buffer, size "
                "and offset must be %d-byte aligned and inside a reserved region\n",
                is_write ? "write" : "read", bytes, (unsigned long long)offset, buf, DISK_TIER_ALIGN);
        return GPT_ERR_INVALID;
    }
    int rc;
    lock(t);
    if (t->next_ticket - t->completed_upto + 1 > t->cap && (rc = grow_ring(t))) {
        unlock(t);
        return rc;
    }
    const uint64_t k = ++t->next_ticket;
    *req_at(t, k) = (disk_request){.ticket = k, .offset = offset, .buf = buf, .bytes = bytes,
                                   .is_write = is_write, .after = after, .state = REQ_QUEUED};
    pthread_cond_signal(&t->work_changed);
    unlock(t);
    *ticket = k;
    return GPT_OK;
}

int disk_tier_write(disk_tier *t, uint64_t offset, const void *buf, size_t bytes,
                    gpt_event *after, uint64_t *ticket)
{
    /* (the buffer is only read from; the request keeps one pointer type for both kinds) */
    return enqueue(t, offset, (void *)(uintptr_t)buf, bytes, 1, after, ticket);
}

int disk_tier_read(disk_tier *t, uint64_t offset, void *buf, size_t bytes, uint64_t *ticket)
{
    return enqueue(t, offset, buf, bytes, 0, NULL, ticket);
}

int disk_tier_wait(disk_tier *t, uint64_t ticket)
{
    lock(t);
    if (ticket > t->next_ticket) {
        unlock(t);
        return GPT_ERR_INVALID;
    }
    while (t->completed_upto < ticket) wait_on(&t->done_changed, t);
    const int rc = t->error_ticket && t->error_ticket <= ticket ? t->error_status : GPT_OK;
    unlock(t);
    return rc;
}

int disk_tier_drain(disk_tier *t)
{
    lock(t);
    const uint64_t last = t->next_ticket;
    unlock(t);
    return disk_tier_wait(t, last);
}

void disk_tier_take_stats(disk_tier *t, double *busy_ms, double *bytes_read, double *bytes_written)
{
    *busy_ms = *bytes_read = *bytes_written = 0;
    lock(t);
    if (t->io_running) { /* the part of the running period that is already over */
        const double now = wall_ms();
        t->busy_ms += now - t->busy_since;
        t->busy_since = now;
    }
    *busy_ms = t->busy_ms;
    *bytes_read = t->bytes_read;
    *bytes_written = t->bytes_written;
    t->busy_ms = t->bytes_read = t->bytes_written = 0;
    unlock(t);
}
