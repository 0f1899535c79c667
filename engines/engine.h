/*
 * engine.h — the interface every offloading strategy implements.
 *
 * An engine owns the placement of every tensor and the schedule of one training iteration;
 * the model (kernels/model.h) says what is computed and the runtime (engines/runtime/)
 * gives it budgets, streams and copies.  Lifecycle, as the driver in cmd/ uses it:
 *
 *   plan   the bytes the run needs on GPU, host and disk — pure arithmetic, no allocation;
 *          the driver checks it against the budgets (and --dry-run prints it);
 *   init   allocate under the budgets and initialise the parameters (GPT_ERR_OOM with the
 *          budget's record when something does not fit);
 *   step   one iteration on one batch: returns loss, grad norm, lr and phase timings;
 *   free   release everything (safe on a partially initialised engine).
 */
#ifndef AEBENCH_ENGINE_H
#define AEBENCH_ENGINE_H

#include "../kernels/model.h"
#include "runtime/membudget.h"

#include <stdint.h>

typedef enum device_kind { DEVICE_CPU = 0, DEVICE_CUDA = 1 } device_kind;

/* What an engine needs to know about the run. */
typedef struct engine_config {
    gpt_shape shape;
    int window;    /* windowed engines: layers in the GPU window; 0 = choose automatically */
    int ckpt;      /* activation checkpointing of every layer */
    gpt_optim optim;
    uint64_t seed;
    device_kind device;
    int bf16;      /* --dtype bf16 */
    int tf32;      /* --math tf32 (default): fp32 matmuls on TF32 tensor cores */
    int threads;   /* CPU threads for the CPU backend and host-side work; 0 = all */
} engine_config;

typedef struct engine_plan {
    uint64_t gpu_bytes;
    uint64_t host_bytes;
    uint64_t disk_bytes;
} engine_plan;

/* What an engine gets from the driver; it must not outlive the engine. */
typedef struct engine_env {
    const engine_config *cfg;
    gpt_backend *be;    /* the compute backend ("GPU"; the CPU backend in CI) */
    dev_arena *gpu;     /* device memory under --gpu-mem-limit */
    mem_budget *host;   /* host memory under --cpu-mem-limit */
    int rank, world;
} engine_env;

typedef struct step_result {
    double loss;        /* mean cross-entropy of the batch */
    double grad_norm;   /* global norm before clipping */
    double lr;          /* learning rate used by this step */
    int skipped;        /* 1 when the update was skipped (non-finite gradients) */
    double ms_forward, ms_backward, ms_optimizer;
} step_result;

typedef struct engine_vtbl {
    const char *name;
    const char *alias;       /* another accepted name, or NULL */
    const char *description; /* one line for --help */
    int uses_window;
    /* 1 when the engine implements --dtype bf16 (a backend of type GPT_BF16: bf16 working
     * weights and activations on the GPU, fp32 master weights, grads and Adam state); the
     * driver refuses bf16 for an engine that leaves this 0. */
    int supports_bf16;
    void (*plan)(const engine_config *cfg, engine_plan *out);
    int (*init)(const engine_env *env, void **state);
    /* tokens and targets: host arrays of B*T ids; iteration is 1-based. */
    int (*step)(void *state, int iteration, const int32_t *tokens, const int32_t *targets,
                step_result *out);
    void (*free)(void *state);
} engine_vtbl;

/* The registry (engines/registry.c). */
const engine_vtbl *engine_find(const char *name);
int engine_count(void);
const engine_vtbl *engine_at(int i);

extern const engine_vtbl engine_megatron_lm;

#endif
