/*
 * megatron_lm.h — what an engine built on megatron-lm's ZeRO stages (gemini) reaches inside it:
 * this rank's optimizer state, to checkpoint it after a step and to put it back on recovery.
 */
#ifndef AEBENCH_MEGATRON_LM_H
#define AEBENCH_MEGATRON_LM_H

#include "engine.h"

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

/* 0, or GPT_ERR_INVALID when the run keeps no fp32 shard of its own (stage 0, or bf16 at a
 * stage whose master is not the working copy). */
int megatron_shard_state_of(void *state, megatron_shard_state *out);

#endif
