/*
 * megatron_lm.h — what an engine built on megatron-lm's ZeRO stages (gemini) reaches inside it:
 * this rank's optimizer state, to checkpoint it after a step and to put it back on recovery.
 */
#ifndef AEBENCH_MEGATRON_LM_H
#define AEBENCH_MEGATRON_LM_H

#include "engine.h"

#include <stdint.h>

/* This rank's part of the model state at --zero-stage >= 1 (fp32): its shards of the master
 * parameters and of Adam's m and v (device, n floats each, the blocks' shards one after the
 * other), and the Adam step.  The optimizer writes them on `compute` at the end of a step;
 * they do not change again until the next step's optimizer. */
typedef struct megatron_shard_state {
    float *master, *adam_m, *adam_v;
    size_t n;
    int *adam_step;
    gpt_stream *compute;
} megatron_shard_state;

/* n above for a configuration, before any init (plans): the floats of this rank's shard of
 * every block (runtime/dp.h's padded shards, as megatron-lm lays them out). */
size_t megatron_shard_floats(const engine_config *cfg);
/* 0, or GPT_ERR_INVALID when the run keeps no fp32 shard of its own (stage 0, or bf16 at a
 * stage whose master is not the working copy). */
int megatron_shard_state_of(void *state, megatron_shard_state *out);

/* Where an engine built on megatron-lm joins its schedule (gemini interleaves its
 * checkpoint traffic with the training's collectives).  Each is called on the host as the
 * step issues its work; 0 or a gpt_status; NULL: not called. */
typedef struct megatron_hooks {
    void *ctx;
    /* a training collective is about to be issued on stream cs (its waits are issued), and
     * has just been issued there: the same index in every step, in issue order */
    int (*before_collective)(void *ctx, gpt_stream *cs);
    int (*after_collective)(void *ctx, gpt_stream *cs);
    /* the optimizer is about to be issued on compute: the master shard, m and v change
     * after what compute is made to wait for here */
    int (*before_optimizer)(void *ctx, gpt_stream *compute);
} megatron_hooks;
void megatron_set_hooks(void *state, const megatron_hooks *hooks);

/* Checksums riding on the optimizer (gemini's checkpoint of the step's state): the next
 * step's optimizer, unless the step is skipped, sets sums (device, one per chunk) to init's
 * (device: the terms of the words it does not write, the shards' padding), adds the terms of
 * every master, m and v word it writes, and folds them: the chunk checksums of [master | m |
 * v] (3 n words in chunks of chunk_floats), as gpt_checksum_chunks over the three would be,
 * without a pass of their own over the state.  Stage 3 fp32 only (else nothing is armed).
 * megatron_sums_done: whether the last step made them. */
void megatron_arm_sums(void *state, uint64_t *sums, const uint64_t *init, size_t chunk_floats);
int megatron_sums_done(const void *state);
/* The ranges [lo, hi) of this rank's n shard floats that no update writes (the padding of
 * blocks that do not divide by the ranks), 2 words a range into ranges (at most max_ranges
 * of them); their count. */
size_t megatron_shard_padding(const void *state, size_t *ranges, size_t max_ranges);

#endif
