/*
 * megatron_pipeline.h — megatron-lm's pipeline parallelism (--pp P > 1), which megatron_lm.c
 * hands a run to: the engine vtable's plan, check, init, chosen plan, step, read_params and
 * free for it (megatron_pipeline.c says where everything lives and the schedule).
 */
#ifndef AEBENCH_MEGATRON_PIPELINE_H
#define AEBENCH_MEGATRON_PIPELINE_H

#include "engine.h"

void megatron_pipeline_plan(const engine_config *cfg, engine_plan *out);
int megatron_pipeline_check(const engine_config *cfg, char *err, size_t errlen);
int megatron_pipeline_init(const engine_env *env, void **state);
void megatron_pipeline_chosen_plan(void *state, engine_plan *out);
int megatron_pipeline_step(void *state, int iteration, const int32_t *tokens, const int32_t *targets,
                           step_result *out);
int megatron_pipeline_read_params(void *state, float *host_params);
void megatron_pipeline_free(void *state);
/* --pp-layers' text "A,B,...": the number of positive counts it lists (the first max into
 * counts, which may be NULL), or -1 when it is not such a list. */
int megatron_pipeline_layer_counts(const char *text, int *counts, int max);
/* The step's prediction on machine m (megatron-lm's predict for --tp / --pp, with its pieces
 * scaled as its own): the 1F1B schedule over the stages, the layer split's collectives, the
 * sends, the tie's swap, the data-parallel reduction and AdamW. */
void megatron_pipeline_predict(const engine_config *cfg, const machine_rates *m, engine_prediction *out);
/* The stage that holds layer `layer` (0 ..) under cfg's split. */
int megatron_pipeline_stage_of_layer(const engine_config *cfg, int layer);

#endif
