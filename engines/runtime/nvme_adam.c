/*
 * nvme_adam.c — AdamW for blocks whose m, v (and gradients) live in the disk tier.
 *
 * One thread consumes a queue of items in submission order: jobs (update one block) and
 * gradient puts (write one block's gradients to disk).  It runs two cursors over the queue:
 *   issue  ahead of the updates: a put's write is queued to the disk tier as soon as the
 *          cursor reaches it; a job's reads (m, v, and the gradients when they are on disk)
 *          into its staging slot as soon as a slot is free — job j uses slot j mod depth,
 *          which job j - depth held, so up to depth - 1 jobs read ahead of the update;
 *   update waits for the job's reads, for its `after` event, runs cpu_adam_run on the
 *          slot, then queues the write-back of m and v and moves on without waiting for it.
 * So while block i is updated, the state of blocks i+1 .. i+depth-1 is read and that of i-1
 * written.  The disk tier orders what conflicts: a slot refilled by a read waits for the
 * write-back from it, a put of the gradients waits for the previous read of them.
 *
 * Tickets are queue positions.  nvme_adam_wait(t) returns once every item <= t has issued
 * its last disk request and those requests are complete (the write-back of a job, the
 * write of a put).  The staging is host memory under the host budget, page aligned.  Each
 * array goes to the tier in 4 MiB pieces, so a large block keeps several I/O workers busy.
 */
#include "nvme_adam.h"


#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { QUEUE_CAP = 256 };
/* Requests to the disk tier are cut into pieces of this size, so that one large block keeps
 * several of the tier's workers (and the device's queues) busy at once. */
#define IO_PIECE ((size_t)4 << 20)

typedef struct na_block {
    size_t n;
    uint64_t off_m, off_v, off_g; /* off_g: only with gradients on disk */
} na_block;

typedef struct na_item {
    int is_job;
    na_block block;     /* copied at submission, so the thread never reads the block list */
    nvme_adam_job job;  /* jobs */
    const float *src;   /* puts */
    gpt_event *after;   /* puts */
    int slot;           /* jobs, once their reads are issued */
    uint64_t read_ticket, final_ticket;
} na_item;

struct nvme_adam {
    disk_tier *disk;
    cpu_adam *pool;
    mem_budget *host;
    size_t max_block, array_bytes; /* array_bytes: one staging array, rounded for O_DIRECT */
    int depth, grads_on_disk;
    char *staging;
    size_t staging_bytes;
    na_block *blocks;
    int nblocks, blocks_cap;

    pthread_t thread;
    int thread_started;
    pthread_mutex_t lock;
    pthread_cond_t queued;   /* the thread: an item was queued, or stopping */
    pthread_cond_t progress; /* callers: final_upto advanced */
    int stopping;
    na_item ring[QUEUE_CAP]; /* items (final_upto, last_item], at item % QUEUE_CAP */
    uint64_t last_item;      /* the last ticket handed out */
    uint64_t final_upto;     /* every item <= this one has issued its last disk request */
    uint64_t tier_hi;        /* the highest disk ticket among those requests */
    uint64_t error_item;     /* the first failed item (0: none) and its status */
    int error_status;

    /* the thread's own cursors */
    uint64_t issue_next, jobs_issued, jobs_done;
};

static void fail_hard(const char *what, int rc)
{
    fprintf(stderr, "aebench: nvme adam: %s failed: %s\n", what, strerror(rc));
    abort();
}
/* Locking a mutex we initialised cannot fail unless memory is corrupt: stop there. */
static void lock(nvme_adam *na)
{
    int rc = pthread_mutex_lock(&na->lock);
    if (rc) fail_hard("pthread_mutex_lock", rc);
}
static void unlock(nvme_adam *na)
{
    int rc = pthread_mutex_unlock(&na->lock);
    if (rc) fail_hard("pthread_mutex_unlock", rc);
}
static void wait_on(pthread_cond_t *c, nvme_adam *na)
{
    int rc = pthread_cond_wait(c, &na->lock);
    if (rc) fail_hard("pthread_cond_wait", rc);
}

static int arrays_of(int grads_on_disk) { return grads_on_disk ? 3 : 2; }

size_t nvme_adam_staging_bytes(size_t max_block, int depth, int grads_on_disk)
{
    return (size_t)depth * (size_t)arrays_of(grads_on_disk) * disk_tier_round(max_block * sizeof(float));
}

size_t nvme_adam_block_disk_bytes(size_t n, int grads_on_disk)
{
    return (size_t)arrays_of(grads_on_disk) * disk_tier_round(n * sizeof(float));
}

/* Staging slot s: m, v, then the gradients. */
static float *slot_array(nvme_adam *na, int slot, int which)
{
    return (float *)(na->staging + ((size_t)slot * (size_t)arrays_of(na->grads_on_disk) + (size_t)which) *
                                       na->array_bytes);
}

/* ---- the thread ----------------------------------------------------------------------------- */

/* One array's read or write, in pieces; *ticket: the last piece's. */
static int queue_io(nvme_adam *na, int is_write, uint64_t offset, void *buf, size_t bytes,
                    gpt_event *after, uint64_t *ticket)
{
    int rc = GPT_OK;
    for (size_t done = 0; done < bytes && !rc; done += IO_PIECE) {
        const size_t piece = bytes - done < IO_PIECE ? bytes - done : IO_PIECE;
        rc = is_write ? disk_tier_write(na->disk, offset + done, (char *)buf + done, piece, after, ticket)
                      : disk_tier_read(na->disk, offset + done, (char *)buf + done, piece, ticket);
    }
    return rc;
}

/* Queue the reads of a job into its slot. */
static int issue_reads(nvme_adam *na, na_item *it)
{
    const size_t bytes = disk_tier_round(it->block.n * sizeof(float));
    it->slot = (int)(na->jobs_issued % (uint64_t)na->depth);
    int rc;
    if ((rc = queue_io(na, 0, it->block.off_m, slot_array(na, it->slot, 0), bytes, NULL,
                       &it->read_ticket)) ||
        (rc = queue_io(na, 0, it->block.off_v, slot_array(na, it->slot, 1), bytes, NULL,
                       &it->read_ticket)))
        return rc;
    if (!it->job.grads &&
        (rc = queue_io(na, 0, it->block.off_g, slot_array(na, it->slot, 2), bytes, NULL,
                       &it->read_ticket)))
        return rc;
    return GPT_OK;
}

static void record_error(nvme_adam *na, uint64_t item, int rc)
{
    lock(na);
    if (!na->error_item || item < na->error_item) {
        na->error_item = item;
        na->error_status = rc;
    }
    unlock(na);
}

/* Move the issue cursor as far as the slots allow, up to the last queued item. */
static void issue_ahead(nvme_adam *na, uint64_t last)
{
    for (; na->issue_next <= last; na->issue_next++) {
        na_item *it = &na->ring[na->issue_next % QUEUE_CAP];
        int rc;
        if (it->is_job) {
            if (na->jobs_issued >= na->jobs_done + (uint64_t)na->depth) return;
            rc = issue_reads(na, it);
            na->jobs_issued++;
        } else {
            const size_t bytes = disk_tier_round(it->block.n * sizeof(float));
            rc = queue_io(na, 1, it->block.off_g, (void *)(uintptr_t)it->src, bytes, it->after,
                          &it->final_ticket);
        }
        if (rc) {
            it->read_ticket = it->final_ticket = 0;
            record_error(na, na->issue_next, rc);
        }
    }
}

/* Update one block: its reads, its event, the Adam, the write-back. */
static void run_job(nvme_adam *na, uint64_t item, na_item *it)
{
    const nvme_adam_job *j = &it->job;
    int rc = it->read_ticket ? disk_tier_wait(na->disk, it->read_ticket) : GPT_ERR_IO;
    if (!rc && j->after) rc = gpt_event_sync(j->after);
    if (!rc) {
        cpu_adam_job aj = {
            .params = j->params, .grads = j->grads ? j->grads : slot_array(na, it->slot, 2),
            .m = slot_array(na, it->slot, 0), .v = slot_array(na, it->slot, 1), .n = it->block.n,
            .n_decay = j->n_decay, .optim = j->optim, .lr = j->lr, .t = j->t,
            .grad_scale = j->grad_scale, .after = NULL, .params_bf16 = j->params_bf16,
        };
        rc = cpu_adam_run(na->pool, &aj); /* (the pool counts its busy time) */
    }
    const size_t bytes = disk_tier_round(it->block.n * sizeof(float));
    uint64_t ticket = 0;
    if (!rc && !(rc = queue_io(na, 1, it->block.off_m, slot_array(na, it->slot, 0), bytes, NULL,
                                &ticket)))
        rc = queue_io(na, 1, it->block.off_v, slot_array(na, it->slot, 1), bytes, NULL, &ticket);
    it->final_ticket = ticket;
    if (rc) record_error(na, item, rc);
}

static void *thread_main(void *arg)
{
    nvme_adam *na = arg;
    uint64_t next = 1; /* the item to update (or to retire, for a put) */
    lock(na);
    for (;;) {
        while (!na->stopping && next > na->last_item) wait_on(&na->queued, na);
        if (next > na->last_item) break; /* stopping, and everything is done */
        const uint64_t last = na->last_item;
        unlock(na);

        issue_ahead(na, last);
        na_item *it = &na->ring[next % QUEUE_CAP];
        if (it->is_job) {
            run_job(na, next, it);
            na->jobs_done++;
        }
        lock(na);
        na->final_upto = next;
        if (it->final_ticket > na->tier_hi) na->tier_hi = it->final_ticket;
        pthread_cond_broadcast(&na->progress);
        next++;
    }
    unlock(na);
    return NULL;
}

/* ---- the interface -------------------------------------------------------------------------- */

int nvme_adam_create(nvme_adam **out, disk_tier *disk, cpu_adam *pool, mem_budget *host,
                     size_t max_block, int depth, int grads_on_disk)
{
    *out = NULL;
    if (!disk || !pool || !host || max_block == 0 || depth < 2) return GPT_ERR_INVALID;
    nvme_adam *na = calloc(1, sizeof *na);
    if (!na) return GPT_ERR_OOM;
    na->disk = disk;
    na->pool = pool;
    na->host = host;
    na->max_block = max_block;
    na->array_bytes = disk_tier_round(max_block * sizeof(float));
    na->depth = depth;
    na->grads_on_disk = grads_on_disk != 0;
    na->issue_next = 1;
    na->staging_bytes = nvme_adam_staging_bytes(max_block, depth, na->grads_on_disk);
    int rc = host_alloc(host, (void **)&na->staging, na->staging_bytes, "nvme adam staging");
    if (rc) {
        free(na);
        return rc;
    }
    if ((uintptr_t)na->staging % DISK_TIER_ALIGN) { /* host_alloc page-aligns large blocks */
        host_free(host, na->staging, na->staging_bytes);
        free(na);
        return GPT_ERR_INVALID;
    }
    if ((rc = pthread_mutex_init(&na->lock, NULL))) {
        host_free(host, na->staging, na->staging_bytes);
        free(na);
        fprintf(stderr, "aebench: nvme adam: pthread_mutex_init failed: %s\n", strerror(rc));
        return GPT_ERR_BACKEND;
    }
    if ((rc = pthread_cond_init(&na->queued, NULL)) || (rc = pthread_cond_init(&na->progress, NULL)) ||
        (rc = pthread_create(&na->thread, NULL, thread_main, na))) {
        fprintf(stderr, "aebench: nvme adam: starting the thread failed: %s\n", strerror(rc));
        nvme_adam_destroy(na);
        return GPT_ERR_BACKEND;
    }
    na->thread_started = 1;
    *out = na;
    return GPT_OK;
}

void nvme_adam_destroy(nvme_adam *na)
{
    if (!na) return;
    if (na->thread_started) {
        lock(na);
        na->stopping = 1;
        pthread_cond_signal(&na->queued);
        unlock(na);
        int rc = pthread_join(na->thread, NULL);
        if (rc) fprintf(stderr, "aebench: nvme adam: pthread_join failed: %s\n", strerror(rc));
        /* The last write-backs read from the staging. */
        if (na->tier_hi) (void)disk_tier_wait(na->disk, na->tier_hi);
    }
    pthread_cond_destroy(&na->progress);
    pthread_cond_destroy(&na->queued);
    pthread_mutex_destroy(&na->lock);
    host_free(na->host, na->staging, na->staging_bytes);
    free(na->blocks);
    free(na);
}

/* Queue one item; the caller filled everything but the thread's fields. */
static int enqueue(nvme_adam *na, const na_item *item, uint64_t *ticket)
{
    lock(na);
    while (na->last_item - na->final_upto >= QUEUE_CAP) wait_on(&na->progress, na);
    const uint64_t k = ++na->last_item;
    na->ring[k % QUEUE_CAP] = *item;
    pthread_cond_signal(&na->queued);
    unlock(na);
    *ticket = k;
    return GPT_OK;
}

int nvme_adam_add_block(nvme_adam *na, size_t n, const char *what, int *id)
{
    *id = -1;
    if (n == 0 || n > na->max_block) return GPT_ERR_INVALID;
    if (na->nblocks == na->blocks_cap) {
        const int cap = na->blocks_cap ? 2 * na->blocks_cap : 16;
        na_block *grown = realloc(na->blocks, (size_t)cap * sizeof *grown);
        if (!grown) return GPT_ERR_OOM;
        na->blocks = grown;
        na->blocks_cap = cap;
    }
    const size_t bytes = disk_tier_round(n * sizeof(float));
    uint64_t off;
    int rc;
    if ((rc = disk_tier_reserve(na->disk, nvme_adam_block_disk_bytes(n, na->grads_on_disk), what, &off)))
        return rc;
    na_block b = {.n = n, .off_m = off, .off_v = off + bytes, .off_g = off + 2 * bytes};
    /* Zeros from staging slot 0, once every queued item is through with the staging. */
    uint64_t ticket;
    if ((rc = nvme_adam_wait(na, na->last_item))) return rc;
    float *zeros = slot_array(na, 0, 0);
    memset(zeros, 0, bytes);
    if ((rc = queue_io(na, 1, b.off_m, zeros, bytes, NULL, &ticket)) ||
        (rc = queue_io(na, 1, b.off_v, zeros, bytes, NULL, &ticket)) ||
        (rc = disk_tier_wait(na->disk, ticket)))
        return rc;
    na->blocks[na->nblocks] = b;
    *id = na->nblocks++;
    return GPT_OK;
}

int nvme_adam_put_grads(nvme_adam *na, int id, const float *src, gpt_event *after,
                        uint64_t *ticket)
{
    *ticket = 0;
    if (!na->grads_on_disk || id < 0 || id >= na->nblocks || (uintptr_t)src % DISK_TIER_ALIGN)
        return GPT_ERR_INVALID;
    na_item it = {.is_job = 0, .block = na->blocks[id], .src = src, .after = after};
    return enqueue(na, &it, ticket);
}

int nvme_adam_submit(nvme_adam *na, const nvme_adam_job *job, uint64_t *ticket)
{
    *ticket = 0;
    if (job->block < 0 || job->block >= na->nblocks || !job->params || job->t < 1 ||
        (!job->grads && !na->grads_on_disk))
        return GPT_ERR_INVALID;
    na_item it = {.is_job = 1, .block = na->blocks[job->block], .job = *job};
    return enqueue(na, &it, ticket);
}

int nvme_adam_wait(nvme_adam *na, uint64_t ticket)
{
    lock(na);
    if (ticket > na->last_item) {
        unlock(na);
        return GPT_ERR_INVALID;
    }
    while (na->final_upto < ticket) wait_on(&na->progress, na);
    const uint64_t hi = na->tier_hi;
    const int rc = na->error_item && na->error_item <= ticket ? na->error_status : GPT_OK;
    unlock(na);
    if (rc) return rc;
    return hi ? disk_tier_wait(na->disk, hi) : GPT_OK;
}

