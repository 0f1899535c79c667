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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct engine_harness {
    const engine_vtbl *eng;
    engine_config cfg;
    gpt_backend *be;
    dev_arena gpu;
    mem_budget host;
    mem_budget disk; /* env.disk (unlimited unless harness_open_disk gives a limit) */
    data_source data;
    int32_t *tokens, *targets;
    void *state;
} engine_harness;

/* Returns what the engine's init returned (the harness itself asserts on its own needs); the
 * engine's notes go to note(note_ctx, line) (NULL: nowhere); on the GPU the backend makes the
 * kernel choices kernels says (NULL: the defaults, aebench's). */
static inline int harness_open_kernels(engine_harness *h, const engine_vtbl *eng, const engine_config *cfg,
                                       size_t gpu_limit, size_t disk_limit,
                                       void (*note)(void *ctx, const char *line), void *note_ctx,
                                       const gpt_cuda_kernels *kernels)
{
    memset(h, 0, sizeof *h);
    h->eng = eng;
    h->cfg = *cfg;
    if (cfg->device == DEVICE_CUDA)
        assert_int_equal(gpt_cuda_backend_create_kernels(&h->be, 0, cfg->tf32,
                                                         cfg->bf16 ? GPT_BF16 : GPT_F32, kernels),
                         0);
    else
        assert_int_equal(gpt_cpu_backend_create_dtype(&h->be, cfg->threads, cfg->bf16 ? GPT_BF16 : GPT_F32), 0);
    dev_arena_init(&h->gpu, h->be, gpu_limit);
    mem_budget_init(&h->host, "host", SIZE_MAX);
    mem_budget_init(&h->disk, "disk", disk_limit);
    const gpt_shape *sh = &cfg->shape;
    data_open_synthetic(&h->data, sh->vocab, sh->batch, sh->seq, cfg->seed);
    const size_t N = (size_t)sh->batch * sh->seq;
    h->tokens = malloc(N * sizeof *h->tokens);
    h->targets = malloc(N * sizeof *h->targets);
    assert_non_null(h->tokens);
    assert_non_null(h->targets);
    engine_env env = {.cfg = &h->cfg, .be = h->be, .gpu = &h->gpu, .host = &h->host,
                      .disk = &h->disk, .rank = 0, .world = 1, .note = note, .note_ctx = note_ctx};
    return eng->init(&env, &h->state);
}

static inline int harness_open_noted(engine_harness *h, const engine_vtbl *eng, const engine_config *cfg,
                                     size_t gpu_limit, size_t disk_limit,
                                     void (*note)(void *ctx, const char *line), void *note_ctx)
{
    return harness_open_kernels(h, eng, cfg, gpu_limit, disk_limit, note, note_ctx, NULL);
}

static inline int harness_open_disk(engine_harness *h, const engine_vtbl *eng,
                                    const engine_config *cfg, size_t gpu_limit, size_t disk_limit)
{
    return harness_open_noted(h, eng, cfg, gpu_limit, disk_limit, NULL, NULL);
}

static inline int harness_open(engine_harness *h, const engine_vtbl *eng,
                               const engine_config *cfg, size_t gpu_limit)
{
    return harness_open_disk(h, eng, cfg, gpu_limit, SIZE_MAX);
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
    assert_true(h->disk.in_use == 0);
    free(h->tokens);
    free(h->targets);
    data_close(&h->data);
    if (h->cfg.device == DEVICE_CUDA) gpt_cuda_backend_destroy(h->be);
    else gpt_cpu_backend_destroy(h->be);
}

/* ---- trajectories: what "equals the baseline" means ------------------------------------- */

enum { ITERS = 20 };

/* A small model on the CPU backend (2 threads) whose training visibly moves in 20 steps. */

static inline engine_config small_config(int layers)
{
    engine_config c;
    memset(&c, 0, sizeof c);
    c.shape = (gpt_shape){.layers = layers, .hidden = 32, .heads = 2, .seq = 16, .batch = 2,
                          .vocab = 200, .vocab_padded = gpt_pad_vocab(200)};
    c.recompute = GPT_RECOMPUTE_FULL;
    c.optim = gpt_optim_default();
    /* A learning rate that moves the parameters visibly within 20 steps, and a clip that
     * binds (norms are ~1-5 here), so clipping is exercised on every layer. */
    c.optim.lr = 3e-3;
    c.optim.min_lr = 3e-4;
    c.optim.decay_iters = 100;
    c.optim.clip = 0.5;
    c.seed = 77;
    c.device = DEVICE_CPU;
    c.threads = 2;
    return c;
}

/* The baseline's trajectory, computed once per shape. */
typedef struct trajectory {
    double loss[ITERS], norm[ITERS];
    float *params;
    size_t nparams;
} trajectory;

/* eng's trajectory with `copies` micro-batches per step, each holding the step's synthetic
 * batch (1: the plain run). */
static inline void run_engine_copies(const engine_vtbl *eng, const engine_config *cfg, size_t gpu_limit, int copies,
                                     trajectory *out)
{
    engine_config c = *cfg;
    c.micro_batches = copies;
    engine_harness h;
    assert_int_equal(harness_open(&h, eng, &c, gpu_limit), 0);
    const size_t N = (size_t)cfg->shape.batch * cfg->shape.seq;
    int32_t *tok = malloc((size_t)copies * N * sizeof *tok), *tgt = malloc((size_t)copies * N * sizeof *tgt);
    assert_non_null(tok);
    assert_non_null(tgt);
    for (int it = 1; it <= ITERS; it++) {
        data_batch(&h.data, it, h.tokens, h.targets);
        for (int m = 0; m < copies; m++) {
            memcpy(tok + (size_t)m * N, h.tokens, N * sizeof *tok);
            memcpy(tgt + (size_t)m * N, h.targets, N * sizeof *tgt);
        }
        step_result r;
        memset(&r, 0, sizeof r);
        assert_int_equal(h.eng->step(h.state, it, tok, tgt, &r), 0);
        assert_false(r.skipped);
        out->loss[it - 1] = r.loss;
        out->norm[it - 1] = r.grad_norm;
    }
    out->nparams = (size_t)gpt_param_count(&cfg->shape);
    out->params = malloc(out->nparams * sizeof(float));
    assert_non_null(out->params);
    assert_int_equal(eng->read_params(h.state, out->params), 0);
    free(tok);
    free(tgt);
    harness_close(&h);
}

static inline void run_engine(const engine_vtbl *eng, const engine_config *cfg, size_t gpu_limit,
                       trajectory *out)
{
    run_engine_copies(eng, cfg, gpu_limit, 1, out);
}

/* megatron-lm's trajectory for the model and optimizer of cfg: the options that only
 * offloading engines have (--dpu, --offload nvme) are left out, as the driver would refuse
 * them for the baseline. */
static inline void run_baseline(const engine_config *cfg, trajectory *out)
{
    engine_config base = *cfg;
    base.dpu = 0;
    base.offload = OFFLOAD_CPU;
    base.nvme_dir[0] = '\0';
    run_engine(&engine_megatron_lm, &base, SIZE_MAX, out);
}

static inline void assert_same_trajectory(const trajectory *a, const trajectory *b, const char *what)
{
    for (int i = 0; i < ITERS; i++) {
        if (a->loss[i] != b->loss[i] || a->norm[i] != b->norm[i])
            fail_msg("%s: iteration %d: loss %.17g vs %.17g, norm %.17g vs %.17g", what, i + 1,
                     a->loss[i], b->loss[i], a->norm[i], b->norm[i]);
    }
    assert_int_equal(a->nparams, b->nparams);
    size_t differ = 0, first = 0;
    for (size_t i = 0; i < a->nparams; i++)
        if (memcmp(&a->params[i], &b->params[i], sizeof(float)) != 0 && differ++ == 0) first = i;
    if (differ) fail_msg("%s: %zu final parameters differ (first at %zu)", what, differ, first);
}

static inline void free_trajectory(trajectory *t) { free(t->params); }

/* ---- the registry's engines: what the cross-engine tests loop over (issue 48) -------------
 * A test that says "every engine" takes engine_count() / engine_at() (engines/registry.c), so
 * that an engine added there is in it without the test naming it.  HARNESS_MIN_ENGINES: the
 * registry holds at least the six engines of the artifacts, so a loop over a registry that
 * lost its entries fails instead of checking nothing. */
enum { HARNESS_MIN_ENGINES = 6 };

static inline void assert_registry_populated(void)
{
    if (engine_count() < HARNESS_MIN_ENGINES)
        fail_msg("the registry holds %d engines, want at least %d", engine_count(), HARNESS_MIN_ENGINES);
}

/* The offloading engines: those -m all compares with the baseline (every engine it runs but
 * megatron-lm, which keeps everything on the GPU and is what they are checked against). */
static inline int harness_offload_engine(const engine_vtbl *eng)
{
    return engine_in_all(eng) && eng != &engine_megatron_lm;
}

#endif
