/*
 * layer_work.h — the working set every engine that runs the model layer by layer needs
 * besides its placement of the parameters (fp32):
 *
 *   GPU     the activations of acts_layers layers (1 with checkpointing: the layer being
 *           computed or recomputed; the backward writes its gradients over them), the
 *           attention's backward scratch, the head's activations (one chunk of rows' logits
 *           at a time), the residual gradient (N, C), the token and target ids (2, N), the
 *           L+1 squared block norms
 *   pinned  the per-token losses (N) and the block norms (L+1) read back each step
 *
 * Plans and init share the byte counts below, so that a plan still equals the peak.
 */
#ifndef AEBENCH_LAYER_WORK_H
#define AEBENCH_LAYER_WORK_H

#include "../../kernels/model.h"
#include "membudget.h"
#include "spans.h"

#include <stdint.h>

typedef struct layer_work {
    float *acts_mem;           /* acts_layers layers' activations */
    gpt_layer_acts acts;       /* the first of them */
    gpt_layer_scratch scratch;
    gpt_head_acts head;
    float *dres;               /* (N, C) */
    int32_t *ids;              /* (2, N): tokens then targets */
    float *dev_norms;          /* (L + 1) */
    float *host_losses;        /* pinned (N) */
    float *host_norms;         /* pinned (L + 1) */
} layer_work;

uint64_t layer_work_gpu_bytes(const gpt_shape *sh, int acts_layers);
uint64_t layer_work_host_bytes(const gpt_shape *sh);
/* Allocate (GPU and pinned, through the engine's list) and carve.  0 or a gpt_status. */
int layer_work_alloc(layer_work *w, engine_allocs *mem, const gpt_shape *sh, int acts_layers);
/* The activations of layer slot i (< acts_layers): without checkpointing each layer keeps
 * its own. */
gpt_layer_acts layer_work_acts(const layer_work *w, const gpt_shape *sh, int i);

/* The head on stream c, each as one compute span.  Forward: the head's forward from the last
 * layer's output xL (with its gradient into embed_grads, chunk by chunk: model.h), then the
 * per-token losses queued into host_losses.  Backward: dres = dL/dxL.  0 or a gpt_status. */
int layer_work_head_forward(layer_work *w, stream_spans *spans, gpt_stream *c,
                            const gpt_shape *sh, const void *embed_params, float *embed_grads,
                            const void *xL);
int layer_work_head_backward(layer_work *w, stream_spans *spans, gpt_stream *c,
                             const gpt_shape *sh, const void *embed_params, float *embed_grads,
                             const void *xL);

#endif
