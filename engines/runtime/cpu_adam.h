/*
 * cpu_adam.h — AdamW on the host, for the layers whose optimizer state lives there.
 *
 * A pool of worker threads runs jobs in submission order, one job at a time, each job split
 * over all the pool's threads.  A job can first wait for a gpt_event (the copy that brings
 * the gradients home), so the engine's thread only queues work and never blocks on the hot
 * path; it waits on a ticket just before it issues work that needs the updated parameters.
 *
 * The result is bit-identical to gpt_block_adamw on the CPU backend (kernels/adamw_element.h,
 * same bias corrections), whatever the thread count or the SIMD width, so an engine that
 * updates some layers here and some on the device still reproduces the baseline exactly.
 */
#ifndef AEBENCH_CPU_ADAM_H
#define AEBENCH_CPU_ADAM_H

#include "../../kernels/model.h"

#include <stddef.h>
#include <stdint.h>

typedef struct cpu_adam cpu_adam;

/* One block's update: weight decay on [0, n_decay), none on [n_decay, n). */
typedef struct cpu_adam_job {
    float *params;
    const float *grads;
    float *m, *v;
    size_t n, n_decay;
    gpt_optim optim;
    float lr;
    int t;            /* Adam step, >= 1 */
    float grad_scale; /* the clipping scale */
    gpt_event *after; /* NULL, or the job starts only once this event has completed */
    /* NULL: update params, m, v in place.  Otherwise the updated state goes here and the
     * one read is left as it was (an update that may have to be done again: stronghold's
     * ahead of the clipping norm).  Same traffic as in place. */
    float *params_out, *m_out, *v_out;
    /* NULL, or the updated params also go here rounded to bf16 (nearest even, as the
     * backends' params_to_act): the working copy a bf16 engine copies up, written while each
     * piece of the update is still in cache. */
    uint16_t *params_bf16;
} cpu_adam_job;

/* nthreads <= 0: one per online core.  0 or a negative gpt_status. */
int cpu_adam_create(cpu_adam **out, int nthreads);
/* Waits for every queued job, then stops the threads. */
void cpu_adam_destroy(cpu_adam *pool);

/* Run one job now, on the pool's threads, and return when it is done. */
int cpu_adam_run(cpu_adam *pool, const cpu_adam_job *job);
/* Queue a job; *ticket (1, 2, ...) names it for cpu_adam_wait. */
int cpu_adam_submit(cpu_adam *pool, const cpu_adam_job *job, uint64_t *ticket);
/* Block until the job with this ticket and every job before it have finished.  Returns
 * GPT_OK, or the first error of those jobs (a failed event wait). */
int cpu_adam_wait(cpu_adam *pool, uint64_t ticket);
/* Whether the job with this ticket and every job before it have finished (without waiting;
 * a job that failed counts as finished: cpu_adam_wait says how). */
int cpu_adam_done(cpu_adam *pool, uint64_t ticket);
/* Milliseconds the pool spent running jobs since the previous call (its busy time, for the
 * per-stream table of an iteration). */
double cpu_adam_take_busy_ms(cpu_adam *pool);
/* Which code path the updates use: "avx512", "avx2" or "scalar". */
const char *cpu_adam_isa(const cpu_adam *pool);

/* As cpu_adam_create, with the code path named ("scalar", "avx2", "avx512"; NULL or "":
 * the widest the CPU has, which is what cpu_adam_create takes).  Every path gives the same
 * bits (test_runtime); naming one is for tests and bench/host_adam.c, which compare them.
 * GPT_ERR_INVALID for an unknown name or one the CPU lacks. */
int cpu_adam_create_isa(cpu_adam **out, int nthreads, const char *isa);
/* dst[i] = src[i] rounded to bf16 (nearest even, as the backends' params_to_act), on every core
 * (OpenMP): an engine's bf16 working copy of its host params, made at start-up (billions of
 * them at the largest sizes) or again after a dropped update.  dst must not overlap src. */
void cpu_round_bf16(uint16_t *dst, const float *src, size_t n);
/* The same in place: n floats at buf become n bf16 values at its start (one block staged for a
 * copy up).  On one thread, front to back: element i's two bytes land where elements before i
 * were read, never past its own four. */
void cpu_round_bf16_in_place(void *buf, size_t n);

/* The number of threads the pool runs (after resolving nthreads <= 0). */
int cpu_adam_threads(const cpu_adam *pool);

#endif
