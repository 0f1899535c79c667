#include "layer_work.h"

#include "../engine.h" /* the busy kinds */

static size_t acts_bytes(const gpt_shape *sh, int acts_layers)
{
    return (size_t)acts_layers * gpt_layer_acts_floats(sh) * sizeof(float);
}
static size_t norms_bytes(const gpt_shape *sh) { return (size_t)(sh->layers + 1) * sizeof(float); }
static size_t tokens(const gpt_shape *sh) { return (size_t)sh->batch * sh->seq; }

uint64_t layer_work_gpu_bytes(const gpt_shape *sh, int acts_layers)
{
    const size_t f = sizeof(float);
    return (uint64_t)acts_bytes(sh, acts_layers) + gpt_layer_scratch_floats(sh) * f +
           gpt_head_acts_floats(sh) * f + tokens(sh) * (size_t)sh->hidden * f +
           2 * tokens(sh) * sizeof(int32_t) + norms_bytes(sh);
}

uint64_t layer_work_host_bytes(const gpt_shape *sh)
{
    return (uint64_t)tokens(sh) * sizeof(float) + norms_bytes(sh);
}

int layer_work_alloc(layer_work *w, engine_allocs *mem, const gpt_shape *sh, int acts_layers)
{
    const size_t f = sizeof(float), N = tokens(sh);
    void *scratch = NULL, *head = NULL;
    int rc;
    if ((rc = engine_alloc(mem, MEM_GPU, (void **)&w->acts_mem, acts_bytes(sh, acts_layers),
                           "layer activations")) ||
        (rc = engine_alloc(mem, MEM_GPU, &scratch, gpt_layer_scratch_floats(sh) * f,
                           "backward scratch")) ||
        (rc = engine_alloc(mem, MEM_GPU, &head, gpt_head_acts_floats(sh) * f,
                           "logits and head activations")) ||
        (rc = engine_alloc(mem, MEM_GPU, (void **)&w->dres, N * (size_t)sh->hidden * f,
                           "residual gradient")) ||
        (rc = engine_alloc(mem, MEM_GPU, (void **)&w->ids, 2 * N * sizeof(int32_t), "token ids")) ||
        (rc = engine_alloc(mem, MEM_GPU, (void **)&w->dev_norms, norms_bytes(sh), "block norms")) ||
        (rc = engine_alloc(mem, MEM_PINNED, (void **)&w->host_losses, N * f, "losses read-back")) ||
        (rc = engine_alloc(mem, MEM_PINNED, (void **)&w->host_norms, norms_bytes(sh),
                           "norms read-back")))
        return rc;
    gpt_layer_acts_carve(&w->acts, w->acts_mem, sh);
    gpt_layer_scratch_carve(&w->scratch, scratch, sh);
    gpt_head_acts_carve(&w->head, head, sh);
    return GPT_OK;
}

gpt_layer_acts layer_work_acts(const layer_work *w, const gpt_shape *sh, int i)
{
    gpt_layer_acts a;
    gpt_layer_acts_carve(&a, w->acts_mem + (size_t)i * gpt_layer_acts_floats(sh), sh);
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
    return gpt_memcpy_d2h(c, w->host_losses, w->head.losses, N * sizeof(float));
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
