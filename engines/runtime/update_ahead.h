/*
 * update_ahead.h — host updates ahead of the clipping norm (--clip-speculate), for the offload
 * engines whose host Adam otherwise waits for the global norm: stronghold, l2l, zero-infinity.
 *
 * Megatron clips with the norm of all gradients, known only when the backward ends, so an
 * engine that updates its blocks on the host waits for it and overlaps the updates with the
 * next forward alone.  Here the top blocks are updated as their grads arrive anyway, as if
 * the norm will not clip (scale 1: bit for bit what the step gives when it does not).  Each
 * such block has a second copy of its params, m and v: the update ahead reads the current copy
 * and writes the other (cpu_adam's out-of-place job, at the traffic of one in place), so the
 * current copy is still there when the norm comes.  If it clipped, the block is updated again
 * from the current copy with the scale; if a gradient was not finite (a skipped step), the copy
 * written ahead is dropped.  Otherwise, and after a redo, the copies swap.  After a step that
 * clips the next waits for the norm (where every step clips, ahead would be redone every
 * time) until a step does not clip.
 *
 * --clip-speculate auto holds the second copies only while they pay (`adaptive`): none at
 * start (so a run whose every step clips, as early training with the artifact's clip 1.0 often
 * does, neither pins nor carries them: at l100 -w 15 they were 40 GiB and most of a doubled
 * start-up); allocated at the start of the step after one that did not clip; given back after
 * UPDATE_AHEAD_GIVE_BACK_AFTER clipped steps in a row (the blocks whose current state is in
 * the second copy copied home first).  The plan still counts them: they may come back at any
 * step, and a run must never find its host memory short halfway.  N (a number) holds them
 * from init to the end, as asked.
 *
 * Block indices are the engine's (a layer, or 1 + layer where block 0 is the embedding); the
 * copies cover blocks first .. first + count - 1.  The second copy of the params is pinned (the
 * copies to the GPU read whichever is current), of m and v ordinary host memory.
 */
#ifndef AEBENCH_UPDATE_AHEAD_H
#define AEBENCH_UPDATE_AHEAD_H

#include "../engine.h"
#include "cpu_adam.h"
#include "membudget.h"

#include <stddef.h>
#include <stdint.h>

/* auto: clipped steps in a row after which the second copies are given back */
enum { UPDATE_AHEAD_GIVE_BACK_AFTER = 3 };

typedef struct update_ahead {
    int first, count;        /* blocks with a second copy */
    size_t block;            /* floats of one block's copy */
    float *p, *m, *v;        /* the second copies, `count` blocks each (NULL while not held) */
    unsigned char *swapped;  /* count: the block's current state is its second copy */
    int now, next;           /* this step updates ahead; the next may */
    int steps, redone;       /* steps that did; of those, redone or dropped */
    /* The copies' memory (from the host budget, outside the engine's allocation list: with
     * auto they come and go with the clipping) */
    int adaptive;
    mem_budget *host;
    const gpt_backend *be;
    int clipped_run;         /* clipped (or skipped) steps in a row */
    int steps_seen, clipped; /* every step; those whose norm clipped or that were skipped */
    int taken, given_back;   /* times the copies were allocated, given back */
    double take_ms;          /* allocating (pinning) them, in all */
} update_ahead;

/* How many blocks (at most `blocks`, from the top) are updated ahead: none without clipping,
 * when the engine cannot here (`eligible` 0: N ranks, micro-batches, m and v on disk) or with
 * --clip-speculate 0; N as asked; auto: none where the engine does not go ahead by default
 * (`by_default` 0: its waiting for the norm was measured to cost nothing), else as many as the
 * host budget holds beside the plan's other `host_plan` bytes with a twentieth of it to spare
 * (all with no budget known), so that updating ahead never makes a model that fits not fit. */
int update_ahead_blocks(const engine_config *cfg, int eligible, int by_default, int blocks, uint64_t host_plan,
                        size_t block_floats);
/* Host bytes of `count` blocks' second copies (params, m, v). */
uint64_t update_ahead_bytes(int count, size_t block_floats);

/* The second copies for blocks first .. first + count - 1 (count 0: nothing), from mem's host
 * budget: with N (cfg->clip_speculate > 0) allocated now; with auto only when a step does not
 * clip (update_ahead_begin_step).  0 or a gpt_status. */
int update_ahead_open(update_ahead *a, engine_allocs *mem, const engine_config *cfg, int first, int count,
                      size_t block_floats);
/* Frees what is held. */
void update_ahead_close(update_ahead *a);

/* Block b's state: the current copy (other = 0) or the one an update ahead writes (other =
 * 1), given its home copy (home_m, home_v may be NULL where the engine keeps none). */
typedef struct ahead_state {
    float *p, *m, *v;
} ahead_state;
ahead_state update_ahead_state(const update_ahead *a, int b, float *home_p, float *home_m, float *home_v,
                               int other);
/* Point job's state at block b's: in place on the current copy, or (ahead) from the current
 * copy into the other (cpu_adam's *_out). */
void update_ahead_job(const update_ahead *a, int b, float *home_p, float *home_m, float *home_v, int ahead,
                      cpu_adam_job *job);
/* b is among the blocks updated ahead in this step. */
static inline int update_ahead_now(const update_ahead *a, int b)
{
    return a->now && b >= a->first && b < a->first + a->count;
}

/* At the start of a step: whether it updates ahead (auto: the copies allocated first where
 * it will and they are not held; a gpt_status when they cannot be). */
int update_ahead_begin_step(update_ahead *a);
/* Once the norm is known (not for a skipped step): after b was updated again if needed, its
 * copies swap. */
void update_ahead_swap(update_ahead *a, int b);
/* At the end of a step (out: its skipped, and the speculation it reports, ahead_blocks and
 * ahead_redone): count it, and decide whether the next goes ahead.  Returns 1 when (auto) the
 * copies are to be given back: once no host update, copy up or other reader uses them, the
 * engine calls update_ahead_give_back. */
int update_ahead_end_step(update_ahead *a, step_result *out, float clip_scale);
/* Every block whose current state is in its second copy copied home, then the copies freed.
 * The home copies: block b's at home_p/m/v + b * block_floats (stronghold's streamed layers,
 * l2l's layers: the engines whose auto goes ahead). */
void update_ahead_give_back(update_ahead *a, float *home_p, float *home_m, float *home_v);
/* The log's lines: what is updated ahead (at init), and how it went (at the end). */
void update_ahead_note_plan(const update_ahead *a, const engine_env *env, const char *engine, int of_blocks);
void update_ahead_note_result(const update_ahead *a, const engine_env *env, const char *engine);

#endif
