/*
 * engine_harness.h — drive any engine through engine.h the way the driver does, for tests:
 * a backend for cfg->device, unlimited (or given) budgets, the synthetic corpus, and on
 * close the check that the engine gave every byte back.  Include after <cmocka.h>.
 */
#ifndef AEBENCH_ENGINE_HARNESS_H
#define AEBENCH_ENGINE_HARNESS_H

#include "../cmd/data.h"
#include "../engines/engine.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct engine_harness {
    const engine_vtbl *eng;
    engine_config cfg;
    gpt_backend *be;
    dev_arena gpu;
    mem_budget host;
    data_source data;
    int32_t *tokens, *targets;
    void *state;
} engine_harness;

/* Returns what the engine's init returned (the harness itself asserts on its own needs). */
static inline int harness_open(engine_harness *h, const engine_vtbl *eng,
                               const engine_config *cfg, size_t gpu_limit)
{
    memset(h, 0, sizeof *h);
    h->eng = eng;
    h->cfg = *cfg;
    if (cfg->device == DEVICE_CUDA)
        assert_int_equal(gpt_cuda_backend_create_dtype(&h->be, 0, cfg->tf32,
                                                       cfg->bf16 ? GPT_BF16 : GPT_F32),
                         0);
    else
        assert_int_equal(gpt_cpu_backend_create(&h->be, cfg->threads), 0);
    dev_arena_init(&h->gpu, h->be, gpu_limit);
    mem_budget_init(&h->host, "host", SIZE_MAX);
    const gpt_shape *sh = &cfg->shape;
    data_open_synthetic(&h->data, sh->vocab, sh->batch, sh->seq, cfg->seed);
    const size_t N = (size_t)sh->batch * sh->seq;
    h->tokens = malloc(N * sizeof *h->tokens);
    h->targets = malloc(N * sizeof *h->targets);
    assert_non_null(h->tokens);
    assert_non_null(h->targets);
    engine_env env = {.cfg = &h->cfg, .be = h->be, .gpu = &h->gpu, .host = &h->host, .rank = 0,
                      .world = 1};
    return eng->init(&env, &h->state);
}

/* One iteration on the synthetic batch of that iteration. */
static inline void harness_step(engine_harness *h, int iteration, step_result *out)
{
    data_batch(&h->data, iteration, h->tokens, h->targets);
    assert_int_equal(h->eng->step(h->state, iteration, h->tokens, h->targets, out), 0);
}

static inline void harness_close(engine_harness *h)
{
    h->eng->free(h->state);
    assert_true(h->gpu.budget.in_use == 0); /* everything given back */
    assert_true(h->host.in_use == 0);
    free(h->tokens);
    free(h->targets);
    data_close(&h->data);
    if (h->cfg.device == DEVICE_CUDA) gpt_cuda_backend_destroy(h->be);
    else gpt_cpu_backend_destroy(h->be);
}

#endif
