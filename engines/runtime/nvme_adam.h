/*
 * nvme_adam.h — AdamW for parameter blocks whose optimizer state lives on disk.
 *
 * Each registered block has, in the disk tier, its Adam m and v (zero at the start) and,
 * when asked for, its fp32 gradients.  A job updates one block: its state is read into a
 * host staging slot, the cpu_adam pool updates the parameters (in host memory, where the
 * engine keeps them) and m, v, and m, v are written back.  Jobs run in submission order on
 * the component's own thread, pipelined over `depth` staging slots: while block i is being
 * updated, the state of block i+1 is being read and that of block i-1 written, so the disk
 * and the host Adam overlap.  The engine's thread only queues jobs and waits on tickets.
 *
 * The arithmetic is cpu_adam's, so the result is bit-identical to the in-memory update
 * (engines that keep m, v on disk still reproduce the baseline exactly).
 */
#ifndef AEBENCH_NVME_ADAM_H
#define AEBENCH_NVME_ADAM_H

#include "cpu_adam.h"
#include "disk_tier.h"
#include "membudget.h"

#include <stddef.h>
#include <stdint.h>

typedef struct nvme_adam nvme_adam;

/* Staging: depth (>= 2) slots of m, v (and gradients, when any block keeps them on disk)
 * for blocks of up to max_block floats, in host memory under the host budget (aligned for
 * O_DIRECT).  0, GPT_ERR_OOM or a negative gpt_status. */
int nvme_adam_create(nvme_adam **out, disk_tier *disk, cpu_adam *pool, mem_budget *host,
                     size_t max_block, int depth, int grads_on_disk);
/* Waits for every queued job, then frees the staging (the disk regions go with the tier). */
void nvme_adam_destroy(nvme_adam *na);
/* Host bytes the staging takes (for plans). */
size_t nvme_adam_staging_bytes(size_t max_block, int depth, int grads_on_disk);
/* Disk bytes one block of n floats takes (for plans). */
size_t nvme_adam_block_disk_bytes(size_t n, int grads_on_disk);

/* Register a block of n floats (<= max_block): reserve its m, v (and gradients) on disk and
 * write zeros to m, v.  *id names it in jobs. */
int nvme_adam_add_block(nvme_adam *na, size_t n, const char *what, int *id);

/* Write a block's gradients (n floats from src, a host buffer aligned to DISK_TIER_ALIGN)
 * to its disk region, after `after` (NULL: now).  Only for grads_on_disk components.  The
 * ticket completes when src may be reused (wait for it with nvme_adam_wait: puts and jobs
 * share one sequence of tickets, in submission order). */
int nvme_adam_put_grads(nvme_adam *na, int id, const float *src, gpt_event *after,
                        uint64_t *ticket);

typedef struct nvme_adam_job {
    int block;           /* from nvme_adam_add_block */
    float *params;       /* host, n floats; updated in place */
    const float *grads;  /* host, n floats; NULL: the block's gradients on disk */
    size_t n_decay;      /* weight decay on [0, n_decay) */
    gpt_optim optim;
    float lr;
    int t;               /* Adam step, >= 1 */
    float grad_scale;    /* the clipping scale */
    gpt_event *after;    /* NULL, or the update starts once this event has completed */
    uint16_t *params_bf16; /* NULL, or the updated params also go here in bf16 (cpu_adam_job's) */
} nvme_adam_job;

/* Queue one block's update; *ticket names it for nvme_adam_wait. */
int nvme_adam_submit(nvme_adam *na, const nvme_adam_job *job, uint64_t *ticket);
/* Block until that job (and every job before it) is done, its m and v written back.
 * GPT_OK or the first error among them (GPT_ERR_IO for a failed read or write). */
int nvme_adam_wait(nvme_adam *na, uint64_t ticket);

#endif
