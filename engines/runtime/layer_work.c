#include "layer_work.h"

#include "../engine.h" /* the busy kinds */
#include "dp.h"
#include "timer.h"

#include <stdio.h>
#include <string.h>

static size_t acts_bytes(const gpt_shape *sh, gpt_recompute recompute, gpt_dtype dt)
{
    return gpt_layers_acts_bytes(sh, dt, recompute, sh->layers);
}
/* (block, shard) squared norms: (L+1) x world (runtime/dp.h) */
static size_t norms_bytes(const gpt_shape *sh, int world)
{
    return (size_t)(sh->layers + 1) * (size_t)(world > 1 ? world : 1) * sizeof(float);
}
static size_t tokens(const gpt_shape *sh) { return (size_t)sh->batch * sh->seq; }

/* M > 1: the landing block holds one layer's shard (the embedding accumulates in place) */
static size_t landing_bytes(const gpt_shape *sh, int world, int micro_batches)
{
    if (micro_batches <= 1) return 0;
    return dp_shard_len(gpt_layer_layout_of(sh).total, world > 1 ? world : 1) * sizeof(float);
}

/* the embedding's own part of its block's gradient (model.h) */
static size_t embed_in_bytes(const gpt_shape *sh) { return gpt_embed_layout_of(sh).total * sizeof(float); }

uint64_t layer_work_gpu_bytes(const gpt_shape *sh, gpt_recompute recompute, int world,
                              int micro_batches, gpt_dtype dt)
{
    return (uint64_t)acts_bytes(sh, recompute, dt) + gpt_layer_scratch_bytes(sh, dt) +
           gpt_head_acts_bytes(sh, dt) + gpt_act_bytes(tokens(sh) * (size_t)sh->hidden, dt) +
           2 * tokens(sh) * sizeof(int32_t) + norms_bytes(sh, world) +
           landing_bytes(sh, world, micro_batches) + embed_in_bytes(sh);
}

/* N ranks: every rank's norms gathered: (L + 1) x (world + 1) for the shard columns, world
 * tables of (L + 1) x world for the whole tables; room for either */
static size_t gathered_bytes(const gpt_shape *sh, int world)
{
    return world > 1 ? (size_t)(sh->layers + 1) * (size_t)(world + 1) * (size_t)world * sizeof(float) : 0;
}

static int micro_count(int micro_batches) { return micro_batches > 1 ? micro_batches : 1; }

uint64_t layer_work_host_bytes(const gpt_shape *sh, int world, int micro_batches)
{
    return (uint64_t)micro_count(micro_batches) * tokens(sh) * sizeof(float) +
           norms_bytes(sh, world) + gathered_bytes(sh, world);
}

int layer_work_alloc(layer_work *w, engine_allocs *mem, const gpt_shape *sh,
                     gpt_recompute recompute, int world, int micro_batches, gpt_dtype dt)
{
    w->dtype = dt;
    w->recompute = recompute;
    w->world = world > 1 ? world : 1;
    w->micro_batches = micro_count(micro_batches);
    w->micro = 0;
    w->landing = NULL;
    const size_t f = sizeof(float), N = tokens(sh);
    void *scratch = NULL, *head = NULL;
    int rc;
    if ((rc = engine_alloc(mem, MEM_GPU, &w->acts_mem, acts_bytes(sh, recompute, dt), "layer activations")) ||
        (rc = engine_alloc(mem, MEM_GPU, &scratch, gpt_layer_scratch_bytes(sh, dt), "backward scratch")) ||
        (rc = engine_alloc(mem, MEM_GPU, &head, gpt_head_acts_bytes(sh, dt), "logits and head activations")) ||
        (rc = engine_alloc(mem, MEM_GPU, &w->dres, gpt_act_bytes(N * (size_t)sh->hidden, dt), "residual gradient")) ||
        (rc = engine_alloc(mem, MEM_GPU, (void **)&w->ids, 2 * N * sizeof(int32_t), "token ids")) ||
        (rc = engine_alloc(mem, MEM_GPU, (void **)&w->embed_in_grads, embed_in_bytes(sh), "embedding's own gradients")) ||
        (rc = engine_alloc(mem, MEM_GPU, (void **)&w->dev_norms, norms_bytes(sh, world), "block norms")) ||
        (rc = engine_alloc(mem, MEM_PINNED, (void **)&w->host_losses, (size_t)w->micro_batches * N * f,
                           "losses read-back")) ||
        (w->micro_batches > 1 &&
         (rc = engine_alloc(mem, MEM_GPU, (void **)&w->landing, landing_bytes(sh, world, micro_batches),
                            "earlier micro-batches' gradients (landing)"))) ||
        (rc = engine_alloc(mem, MEM_PINNED, (void **)&w->host_norms, norms_bytes(sh, world),
                           "norms read-back")) ||
        (w->world > 1 && (rc = engine_alloc(mem, MEM_HOST, (void **)&w->norms_gathered,
                                            gathered_bytes(sh, world), "every rank's norms"))))
        return rc;
    gpt_layer_scratch_carve_as(&w->scratch, scratch, sh, dt);
    gpt_head_acts_carve_as(&w->head, head, sh, dt);
    /* each token's loss weighs 1/(B T M N): the sum over micro-batches and ranks is the mean */
    w->head.grad_divisor = w->world * w->micro_batches;
    return GPT_OK;
}

int layer_work_begin_micro(layer_work *w, gpt_stream *c, int k, const int32_t *tokens_all,
                           const int32_t *targets_all, const gpt_shape *sh)
{
    const size_t N = tokens(sh);
    w->micro = k;
    if (k == 0) return GPT_OK; /* offload_streams_begin_step copied them */
    int rc;
    if ((rc = gpt_memcpy_h2d(c, w->ids, tokens_all + (size_t)k * N, N * sizeof(int32_t))) ||
        (rc = gpt_memcpy_h2d(c, w->ids + N, targets_all + (size_t)k * N, N * sizeof(int32_t))))
        return rc;
    return GPT_OK;
}

int layer_work_micro_batches(layer_work *w, gpt_stream *c, const int32_t *tokens,
                             const int32_t *targets, const gpt_shape *sh, layer_work_pass forward,
                             layer_work_pass backward, void *engine, step_result *out, double t[3])
{
    double fwd_ms = 0, bwd_ms = 0, end = wall_ms();
    int rc = gpt_stream_memset_zero(c, w->embed_in_grads, embed_in_bytes(sh));
    if (rc) return rc;
    for (int k = 0; k < w->micro_batches; k++) {
        const double f0 = wall_ms();
        if ((rc = layer_work_begin_micro(w, c, k, tokens, targets, sh)) || (rc = forward(engine, out)) ||
            (rc = gpt_stream_sync(c)))
            return rc;
        const double f1 = wall_ms();
        if ((rc = backward(engine, out)) || (rc = gpt_stream_sync(c))) return rc;
        end = wall_ms();
        fwd_ms += f1 - f0;
        bwd_ms += end - f1;
    }
    t[2] = end;
    t[1] = end - bwd_ms;
    t[0] = t[1] - fwd_ms;
    return GPT_OK;
}

void layer_work_embed_backward(layer_work *w, gpt_stream *c, const gpt_shape *sh, float *embed_grads)
{
    gpt_embed_backward(c, sh, w->embed_in_grads, w->dres, w->ids);
    if (layer_work_last_micro(w))
        gpt_embed_grads_join(c, embed_grads, w->embed_in_grads, gpt_embed_layout_of(sh).total);
}

int layer_work_add_earlier(layer_work *w, stream_spans *spans, gpt_stream *s, float *mine,
                           const float *host_sum, size_t n, gpt_event *home, step_result *out)
{
    if (w->micro == 0) return GPT_OK;
    int rc, span;
    if ((rc = gpt_stream_wait_event(s, home)) || (rc = span_begin(spans, s, BUSY_H2D, &span)) ||
        (rc = gpt_memcpy_h2d(s, w->landing, host_sum, n * sizeof(float))) ||
        (rc = span_end(spans, s, span)))
        return rc;
    out->bytes_h2d += (double)n * sizeof(float);
    /* an fp32 add (gradients are fp32 in bf16 too): the same op megatron-lm's stage 2 adds its
     * reduce-scattered shards with */
    gpt_add_f32(s, mine, w->landing, mine, n);
    return GPT_OK;
}

int layer_work_reduce_home(layer_work *w, stream_spans *spans, gpt_stream *c, int block,
                           float *grads, size_t n, const float *host_sum, gpt_event *home,
                           step_result *out, gpt_stream **final)
{
    const int last = layer_work_last_micro(w);
    int rc;
    if (!w->comm) {
        if ((rc = layer_work_add_earlier(w, spans, c, grads, host_sum, n, home, out))) return rc;
        if (last) dp_block_shard_norms(c, grads, n, 1, w->dev_norms + block);
        *final = c;
        return GPT_OK;
    }
    gpt_stream *cs = coll_stream(w->comm);
    const int rank = coll_rank(w->comm);
    const size_t S = dp_shard_len(n, w->world);
    float *mine = grads + (size_t)rank * S;
    int span;
    if ((rc = gpt_event_record(w->grads_done, c)) || (rc = gpt_stream_wait_event(cs, w->grads_done)) ||
        (rc = span_begin(spans, cs, BUSY_COMM, &span)) ||
        (rc = coll_reduce_scatter_sum(w->comm, mine, grads, S)) || (rc = span_end(spans, cs, span)) ||
        (rc = layer_work_add_earlier(w, spans, cs, mine, host_sum, dp_shard_real(n, S, rank), home, out)))
        return rc;
    if (last) dp_shard_norm(cs, mine, n, w->world, rank, w->dev_norms + (size_t)block * w->world + rank);
    if ((rc = gpt_event_record(w->reduced, cs))) return rc;
    *final = cs;
    return GPT_OK;
}

int layer_work_open_comm(layer_work *w, gpt_backend *be, int rank, int world, struct watchdog *dog)
{
    if (world <= 1) return GPT_OK;
    int rc;
    if ((rc = coll_open(&w->comm, be, rank, world)) || (rc = gpt_event_create(be, &w->grads_done)) ||
        (rc = gpt_event_create(be, &w->reduced)))
        return rc;
    if (coll_watch(w->comm, dog, "gradients")) return GPT_ERR_INVALID;
    return GPT_OK;
}

void layer_work_close_comm(layer_work *w)
{
    coll_close(w->comm);
    gpt_event_destroy(w->grads_done);
    gpt_event_destroy(w->reduced);
    w->comm = NULL;
    w->grads_done = w->reduced = NULL;
}

int layer_work_reduce(layer_work *w, stream_spans *spans, gpt_stream *c, int block, float *grads,
                      size_t n, gpt_stream **final)
{
    float *norms = w->dev_norms + (size_t)block * w->world;
    if (!w->comm) {
        dp_block_shard_norms(c, grads, n, 1, norms);
        *final = c;
        return GPT_OK;
    }
    gpt_stream *cs = coll_stream(w->comm);
    int rc, span;
    if ((rc = gpt_event_record(w->grads_done, c)) || (rc = gpt_stream_wait_event(cs, w->grads_done)) ||
        (rc = span_begin(spans, cs, BUSY_COMM, &span)) ||
        (rc = coll_all_reduce_sum(w->comm, grads, n)))
        return rc;
    dp_block_shard_norms(cs, grads, n, w->world, norms);
    if ((rc = span_end(spans, cs, span)) || (rc = gpt_event_record(w->reduced, cs))) return rc;
    *final = cs;
    return GPT_OK;
}

int layer_work_reduce_add(layer_work *w, stream_spans *spans, gpt_stream *c, int block,
                          float *fresh, float *acc, size_t n, gpt_stream **final)
{
    float *norms = w->dev_norms + (size_t)block * w->world;
    gpt_stream *s = c;
    int rc, span;
    if (w->comm) {
        s = coll_stream(w->comm);
        if ((rc = gpt_event_record(w->grads_done, c)) || (rc = gpt_stream_wait_event(s, w->grads_done)) ||
            (rc = span_begin(spans, s, BUSY_COMM, &span)) ||
            (rc = coll_all_reduce_sum(w->comm, fresh, n)) || (rc = span_end(spans, s, span)))
            return rc;
    }
    gpt_add_f32(s, acc, acc, fresh, n);
    if (layer_work_last_micro(w)) dp_block_shard_norms(s, acc, n, w->world, norms);
    if (w->comm && (rc = gpt_event_record(w->reduced, s))) return rc;
    *final = s;
    return GPT_OK;
}

int layer_work_gather_norm_tables(layer_work *w, const gpt_shape *sh)
{
    if (!w->comm) return GPT_OK;
    const int world = w->world;
    const size_t n = (size_t)(sh->layers + 1) * world;
    int rc = coll_host_all_gather(w->comm, w->norms_gathered, w->host_norms, n * sizeof(float));
    if (rc) return rc;
    for (size_t b = 0; b <= (size_t)sh->layers; b++)
        for (int r = 0; r < world; r++) w->host_norms[b * world + r] = w->norms_gathered[(size_t)r * n + b * world + r];
    return GPT_OK;
}

int layer_work_wait_reduced(layer_work *w, gpt_stream *c)
{
    return w->comm ? gpt_stream_wait_event(c, w->reduced) : GPT_OK;
}

int layer_work_read_norms(layer_work *w, gpt_stream *c, const gpt_shape *sh)
{
    int rc = layer_work_wait_reduced(w, c);
    if (rc) return rc;
    return gpt_memcpy_d2h(c, w->host_norms, w->dev_norms, norms_bytes(sh, w->world));
}

int layer_work_gather_shard_norms(layer_work *w, const gpt_shape *sh)
{
    if (!w->comm) return GPT_OK;
    const int nb = sh->layers + 1, world = w->world;
    float *all = w->norms_gathered + nb;
    memcpy(w->norms_gathered, w->host_norms, (size_t)nb * sizeof(float));
    int rc = coll_host_all_gather(w->comm, all, w->norms_gathered, (size_t)nb * sizeof(float));
    if (rc) return rc;
    /* rank-major as gathered; the table is block-major */
    for (int r = 0; r < world; r++)
        for (int b = 0; b < nb; b++) w->host_norms[(size_t)b * world + r] = all[(size_t)r * nb + b];
    return GPT_OK;
}

int layer_work_outcome(layer_work *w, const gpt_shape *sh, step_result *out)
{
    const int N = (int)tokens(sh), M = w->micro_batches;
    engine_step_outcome(out, w->host_losses, N, w->host_norms, (sh->layers + 1) * w->world);
    /* the loss as megatron-lm takes it: the mean of the micro-batches' means, over ranks */
    double local = out->loss;
    for (int k = 1; k < M; k++) local += gpt_mean_loss(w->host_losses + (size_t)k * N, N);
    if (!w->comm) {
        if (M > 1) out->loss = local / M;
        return GPT_OK;
    }
    out->has_comm = 1;
    out->bytes_comm = coll_take_bytes(w->comm);
    return dp_global_loss(w->comm, local, M, &out->loss);
}

gpt_layer_acts layer_work_acts(const layer_work *w, const gpt_shape *sh, int layer)
{
    gpt_layer_acts a;
    gpt_layers_acts_carve(&a, w->acts_mem, sh, w->dtype, w->recompute, layer);
    return a;
}

gpt_layer_acts layer_work_backward_acts(const layer_work *w, const gpt_shape *sh, int layer)
{
    gpt_layer_acts a;
    gpt_layers_acts_carve_backward(&a, w->acts_mem, sh, w->dtype, w->recompute, layer);
    return a;
}

int layer_work_head_forward(layer_work *w, stream_spans *spans, gpt_stream *c,
                            const gpt_shape *sh, const void *embed_params, float *embed_grads,
                            const void *xL)
{
    const size_t N = tokens(sh);
    int rc, span;
    if ((rc = span_begin(spans, c, BUSY_COMPUTE, &span))) return rc;
    gpt_head_forward(c, sh, embed_params, embed_grads, xL, w->ids + N, &w->head);
    if ((rc = span_end(spans, c, span))) return rc;
    return gpt_memcpy_d2h(c, w->host_losses + (size_t)w->micro * N, w->head.losses, N * sizeof(float));
}

int layer_work_head_backward(layer_work *w, stream_spans *spans, gpt_stream *c,
                             const gpt_shape *sh, const void *embed_params, float *embed_grads,
                             const void *xL)
{
    int rc, span;
    if ((rc = span_begin(spans, c, BUSY_COMPUTE, &span))) return rc;
    gpt_head_backward(c, sh, embed_params, embed_grads, xL, &w->head, w->dres);
    return span_end(spans, c, span);
}
