/*
 * megatron-lm — no offload: the baseline every other engine must reproduce.
 *
 * Where things live (fp32; with --dtype bf16 the activations are bf16 and so is a working
 * copy of the weights, as Megatron's mixed precision keeps them):
 *   GPU   all parameters (fp32 master), gradients (fp32), Adam m and v (fp32), as one array
 *         each laid out [embed block | layer 0 | layer 1 | ... ] (kernels/model.h);
 *         bf16 only: the bf16 working copy of the parameters, in the same layout, which
 *         every op reads (refreshed from the master after each AdamW);
 *         the checkpointed layer inputs x[0..L] (x[L] is the last layer's output);
 *         one layer's activations with checkpointing (L layers' without, --no-ckpt);
 *         the backward scratch, the head's activations (one chunk of rows' logits at a
 *         time, model.h), the token and target ids, L+1 squared block norms
 *   host  the batch's ids, the per-token losses and block norms read back each step, and
 *         a staging block for initialisation
 *
 * One iteration, one stream (compute), as Megatron does:
 *   forward    ids in; zero grads; embed; layers 0..L-1 (each writes x[l+1]); head (losses,
 *              and, chunk by chunk while the logits exist, their gradient into wte and dlnf)
 *   backward   head (final LayerNorm: dres = dL/dx[L]); layers L-1..0 (recompute each from x[l] when
 *              checkpointing); embedding
 *   optimizer  squared norm per block; read them back; global norm; clip scale; lr of this
 *              iteration; AdamW per block (decay on weights, none on biases and LayerNorm);
 *              (bf16: the same pass rounds the updated master weights into the working copy)
 * The host waits on the stream at the end of each phase: that is what the phase timers
 * measure, and the losses and norms it reads back need it anyway.
 */
#include "engine.h"

#include "runtime/timer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


typedef struct megatron_state {
    engine_env env;
    gpt_shape sh;
    gpt_stream *compute;
    engine_allocs mem;

    size_t nparams;
    gpt_resident model;    /* params, grads and activations, all on the GPU */
    float *adam_m, *adam_v;
    int32_t *ids;          /* (2, N): tokens then targets */
    float *block_norms;    /* (L+1) */
    float *host_losses;    /* (N) */
    float *host_norms;     /* (L+1) */
    int adam_step;
} megatron_state;

/* Sizes, in bytes, of everything the engine allocates; plan and init share them. */
typedef struct megatron_sizes {
    size_t params;      /* one of params, grads, m, v */
    size_t wparams;     /* the bf16 working copy (0 in fp32) */
    size_t inputs, layer_acts, scratch, head, dres, ids, norms;
    size_t host_losses, host_norms, host_staging;
} megatron_sizes;

static megatron_sizes sizes_of(const engine_config *cfg)
{
    const gpt_shape *sh = &cfg->shape;
    const size_t N = (size_t)sh->batch * sh->seq, C = (size_t)sh->hidden, L = (size_t)sh->layers;
    const size_t f = sizeof(float);
    const gpt_dtype dt = cfg->bf16 ? GPT_BF16 : GPT_F32;
    gpt_embed_layout e = gpt_embed_layout_of(sh);
    gpt_layer_layout l = gpt_layer_layout_of(sh);
    megatron_sizes z;
    z.params = (size_t)gpt_param_count(sh) * f;
    z.wparams = cfg->bf16 ? gpt_act_bytes((size_t)gpt_param_count(sh), dt) : 0;
    z.inputs = gpt_act_bytes((L + 1) * N * C, dt);
    z.layer_acts = (cfg->ckpt ? 1 : L) * gpt_layer_acts_bytes(sh, dt);
    z.scratch = gpt_layer_scratch_bytes(sh, dt);
    z.head = gpt_head_acts_bytes(sh, dt);
    z.dres = gpt_act_bytes(N * C, dt);
    z.ids = 2 * N * sizeof(int32_t);
    z.norms = (L + 1) * f;
    z.host_losses = N * f;
    z.host_norms = (L + 1) * f;
    z.host_staging = (e.total > l.total ? e.total : l.total) * f;
    return z;
}

static void megatron_plan(const engine_config *cfg, engine_plan *out)
{
    megatron_sizes z = sizes_of(cfg);
    out->gpu_bytes = 4 * (uint64_t)z.params + z.wparams + z.inputs + z.layer_acts + z.scratch + z.head +
                     z.dres + z.ids + z.norms;
    out->host_bytes = (uint64_t)z.host_losses + z.host_norms + z.host_staging;
    out->disk_bytes = 0;
}

static int alloc_dev(megatron_state *st, void **ptr, size_t bytes, const char *what)
{
    return engine_alloc(&st->mem, MEM_GPU, ptr, bytes, what);
}

static int alloc_host(megatron_state *st, void **ptr, size_t bytes, const char *what)
{
    return engine_alloc(&st->mem, MEM_HOST, ptr, bytes, what);
}

static void megatron_free(void *state)
{
    megatron_state *st = state;
    if (!st) return;
    /* Destroying the stream drains it: after a failed step, queued work may still use the
     * buffers freed below. */
    if (st->compute) st->env.be->ops->stream_destroy(st->compute);
    engine_free_all(&st->mem);
    free(st);
}

/* Initialise every block on the host and copy it in, block by block. */
static int init_params(megatron_state *st, float *staging)
{
    const gpt_shape *sh = &st->sh;
    const uint64_t seed = st->env.cfg->seed;
    gpt_embed_layout e = gpt_embed_layout_of(sh);
    gpt_layer_layout l = gpt_layer_layout_of(sh);
    gpt_init_embed(staging, sh, seed);
    /* Each copy must finish before the staging block is refilled: copies are async. */
    int rc = gpt_memcpy_h2d(st->compute, st->model.params, staging, e.total * sizeof(float));
    if (rc == 0) rc = gpt_stream_sync(st->compute);
    for (int layer = 0; rc == 0 && layer < sh->layers; layer++) {
        gpt_init_layer(staging, sh, layer, seed);
        rc = gpt_memcpy_h2d(st->compute, st->model.params + e.total + (size_t)layer * l.total, staging,
                            l.total * sizeof(float));
        if (rc == 0) rc = gpt_stream_sync(st->compute);
    }
    if (rc == 0 && st->model.wparams)
        gpt_params_to_act(st->compute, st->model.wparams, st->model.params, st->nparams);
    if (rc == 0) rc = gpt_stream_memset_zero(st->compute, st->adam_m, st->nparams * sizeof(float));
    if (rc == 0) rc = gpt_stream_memset_zero(st->compute, st->adam_v, st->nparams * sizeof(float));
    if (rc == 0) rc = gpt_stream_sync(st->compute);
    return rc;
}

static int megatron_init(const engine_env *env, void **state)
{
    *state = NULL;
    int rc = engine_init_check(&engine_megatron_lm, env);
    if (rc) return rc;
    megatron_state *st = calloc(1, sizeof *st);
    if (!st) return GPT_ERR_OOM;
    st->env = *env;
    engine_allocs_init(&st->mem, env->gpu, env->host, env->be);
    st->sh = env->cfg->shape;
    *state = st;
    megatron_sizes z = sizes_of(env->cfg);
    st->nparams = (size_t)gpt_param_count(&st->sh);

    rc = env->be->ops->stream_create(env->be, &st->compute);
    if (rc) return rc;
    gpt_resident *m = &st->model;
    void *scratch_mem = NULL, *head_mem = NULL, *staging = NULL;
    if ((rc = alloc_dev(st, (void **)&m->params, z.params, "parameters")) ||
        (rc = alloc_dev(st, (void **)&m->grads, z.params, "gradients")) ||
        (rc = alloc_dev(st, (void **)&st->adam_m, z.params, "Adam m")) ||
        (rc = alloc_dev(st, (void **)&st->adam_v, z.params, "Adam v")) ||
        (z.wparams && (rc = alloc_dev(st, &m->wparams, z.wparams, "bf16 working weights"))) ||
        (rc = alloc_dev(st, &m->layer_inputs, z.inputs, "checkpointed layer inputs")) ||
        (rc = alloc_dev(st, &m->layer_acts, z.layer_acts, "layer activations")) ||
        (rc = alloc_dev(st, &scratch_mem, z.scratch, "backward scratch")) ||
        (rc = alloc_dev(st, &head_mem, z.head, "logits and head activations")) ||
        (rc = alloc_dev(st, &m->dres, z.dres, "residual gradient")) ||
        (rc = alloc_dev(st, (void **)&st->ids, z.ids, "token ids")) ||
        (rc = alloc_dev(st, (void **)&st->block_norms, z.norms, "block norms")) ||
        (rc = alloc_host(st, (void **)&st->host_losses, z.host_losses, "losses read-back")) ||
        (rc = alloc_host(st, (void **)&st->host_norms, z.host_norms, "norms read-back")) ||
        (rc = alloc_host(st, &staging, z.host_staging, "initialisation staging")))
        return rc;
    m->ckpt = env->cfg->ckpt;
    m->tokens = st->ids;
    m->targets = st->ids + (size_t)st->sh.batch * st->sh.seq;
    gpt_layer_scratch_carve_as(&m->scratch, scratch_mem, &st->sh, env->be->dtype);
    gpt_head_acts_carve_as(&m->head, head_mem, &st->sh, env->be->dtype);

    rc = init_params(st, staging);
    /* The staging block is only needed here: give it back (it is the last allocation). */
    engine_free_last(&st->mem);
    return rc;
}

static int megatron_step(void *state, int iteration, const int32_t *tokens,
                         const int32_t *targets, step_result *out)
{
    megatron_state *st = state;
    const gpt_shape *sh = &st->sh;
    const engine_config *cfg = st->env.cfg;
    gpt_stream *s = st->compute;
    gpt_resident *m = &st->model;
    const int N = sh->batch * sh->seq, L = sh->layers;
    int rc;

    double t0 = wall_ms();
    if ((rc = gpt_memcpy_h2d(s, st->ids, tokens, (size_t)N * sizeof(int32_t))) ||
        (rc = gpt_memcpy_h2d(s, st->ids + N, targets, (size_t)N * sizeof(int32_t))) ||
        (rc = gpt_stream_memset_zero(s, m->grads, st->nparams * sizeof(float))))
        return rc;
    gpt_resident_forward(s, sh, m);
    if ((rc = gpt_memcpy_d2h(s, st->host_losses, m->head.losses, (size_t)N * sizeof(float))) ||
        (rc = gpt_stream_sync(s)))
        return rc;
    double t1 = wall_ms();

    gpt_resident_backward(s, sh, m);
    if ((rc = gpt_stream_sync(s))) return rc;
    double t2 = wall_ms();

    gpt_resident_block_norms(s, sh, m->grads, st->block_norms);
    if ((rc = gpt_memcpy_d2h(s, st->host_norms, st->block_norms, (size_t)(L + 1) * sizeof(float))) ||
        (rc = gpt_stream_sync(s)))
        return rc;
    /* Non-finite gradients would poison m and v for good: the update is skipped, as
     * Megatron's loss scaler does, and counted in the log's "number of nan iterations". */
    engine_step_outcome(out, st->host_losses, N, st->host_norms, L + 1);
    out->lr = gpt_lr_at(&cfg->optim, iteration);
    if (!out->skipped)
        gpt_resident_adamw(s, sh, m->params, m->wparams, m->grads, st->adam_m, st->adam_v,
                           &cfg->optim, (float)out->lr, ++st->adam_step,
                           gpt_clip_scale(&cfg->optim, out->grad_norm));
    if ((rc = gpt_stream_sync(s))) return rc;
    double t3 = wall_ms();
    out->ms_forward = t1 - t0;
    out->ms_backward = t2 - t1;
    out->ms_optimizer = t3 - t2;
    return GPT_OK;
}

static int megatron_read_params(void *state, float *host_params)
{
    megatron_state *st = state;
    int rc = gpt_memcpy_d2h(st->compute, host_params, st->model.params,
                            st->nparams * sizeof(float));
    return rc ? rc : gpt_stream_sync(st->compute);
}

const engine_vtbl engine_megatron_lm = {
    .name = "megatron-lm",
    .alias = "baseline",
    .description = "no offload: everything on the GPU (the baseline)",
    .uses_window = 0,
    .supports_bf16 = 1,
    .options = ENGINE_OPT_NO_CKPT,
    .plan = megatron_plan,
    .init = megatron_init,
    .step = megatron_step,
    .free = megatron_free,
    .read_params = megatron_read_params,
};
