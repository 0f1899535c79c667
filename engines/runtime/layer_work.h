/*
 * layer_work.h — the working set every engine that runs the model layer by layer needs
 * besides its placement of the parameters (fp32):
 *
 *   GPU     (activations, the residual gradient and the head's of the activation type: fp32,
 *           or bf16 with --dtype bf16) the layers' activations as --recompute keeps them
 *           (gpt_layers_acts_bytes: full, one layer's working set, refilled by each layer's
 *           forward and recompute; selective, that working set less the GEMM outputs, which
 *           every layer keeps; none, every layer's all; the backward writes its gradients
 *           over them), the attention's backward scratch, the head's activations (one chunk
 *           of rows' logits at a time), the residual gradient (N, C), the token and target
 *           ids (2, N), the L+1 squared block norms; (fp32) the embedding's own part of the
 *           embedding block's gradient (model.h's tied embedding: layer_work_embed_backward)
 *   pinned  the per-token losses (M x N: every micro-batch's) and the block norms (L+1) read
 *           back each step
 *   GPU     M > 1: the landing block of micro-batch accumulation (one layer's shard, below)
 *
 * Micro-batches (M > 1, --global-batch > batch x ranks) accumulate in the order of megatron-lm
 * --zero-stage 2 (and DeepSpeed's ZeRO-2), which every offload engine then equals bit for bit:
 * a block whose gradient lives on the host is computed fresh in every micro-batch (its GPU
 * buffer zeroed), reduced over the ranks, and added to the sum of the earlier micro-batches,
 * which is copied up from the host for that (the landing block) — acc + fresh, then its norm
 * after the last one.  A block whose gradient stays on the GPU (the embedding) accumulates
 * in place and is reduced once, after the last micro-batch.
 *
 * Plans and init share the byte counts below, so that a plan still equals the peak.
 */
#ifndef AEBENCH_LAYER_WORK_H
#define AEBENCH_LAYER_WORK_H

#include "../../kernels/model.h"
#include "collectives.h"
#include "membudget.h"
#include "spans.h"

#include <stdint.h>

struct step_result;

typedef struct layer_work {
    gpt_dtype dtype;           /* the activation type (gpt.h): fp32, or bf16 (--dtype bf16) */
    gpt_recompute recompute;   /* what each layer keeps (--recompute) */
    void *acts_mem;            /* the layers' activations (layer_work_acts) */
    gpt_layer_scratch scratch;
    gpt_head_acts head;
    void *dres;                /* (N, C), of the activation type */
    int32_t *ids;              /* (2, N): tokens then targets */
    float *dev_norms;          /* (L + 1) */
    float *host_losses;        /* pinned (M x N) */
    float *host_norms;         /* pinned (L + 1) */
    /* N ranks: each block's gradient is reduced (all-reduced, or reduce-scattered when its
     * host state is sharded) on the group's stream as soon as it is complete, and its
     * (block, shard) norms are taken there (runtime/dp.h); the norms above are then
     * (L + 1) x world. */
    int world;
    coll_group *comm;          /* NULL on one rank */
    gpt_event *grads_done, *reduced;
    float *norms_gathered;     /* N ranks: (L + 1) x (world + 1) host floats */
    int micro_batches;         /* M per step */
    int micro;                 /* the micro-batch being computed (the engine sets it) */
    float *landing;            /* M > 1: one layer's shard, the earlier micro-batches' sum */
    float *embed_in_grads;     /* the embedding block's floats: its embedding backward's part */
} layer_work;

uint64_t layer_work_gpu_bytes(const gpt_shape *sh, gpt_recompute recompute, int world,
                              int micro_batches, gpt_dtype dtype);
uint64_t layer_work_host_bytes(const gpt_shape *sh, int world, int micro_batches);
/* Allocate (GPU and pinned, through the engine's list) and carve.  0 or a gpt_status. */
int layer_work_alloc(layer_work *w, engine_allocs *mem, const gpt_shape *sh,
                     gpt_recompute recompute, int world, int micro_batches, gpt_dtype dtype);
/* Micro-batch k of the step begins: its token and target ids are copied in on c (micro-batch
 * 0's are the step's first, offload_streams_begin_step), its losses will be read back into
 * their place. */
int layer_work_begin_micro(layer_work *w, gpt_stream *c, int k, const int32_t *tokens,
                           const int32_t *targets, const gpt_shape *sh);
/* One pass (forward or backward) of an engine over the micro-batch being computed. */
typedef int (*layer_work_pass)(void *engine, struct step_result *out);
/* The micro-batches of one step on compute stream c (the embedding's own gradient part zeroed
 * first): for each, its ids in (begin_micro),
 * forward, c synchronised, backward, c synchronised.  t[0..2] are then the phase marks that
 * offload_streams_end_step takes: t[2] the end of the last backward, t[2] - t[1] the backward
 * time and t[1] - t[0] the forward time, each summed over the micro-batches. */
int layer_work_micro_batches(layer_work *w, gpt_stream *c, const int32_t *tokens,
                             const int32_t *targets, const gpt_shape *sh, layer_work_pass forward,
                             layer_work_pass backward, void *engine, struct step_result *out,
                             double t[3]);
/* The embedding's backward of the micro-batch being computed on c, from w->dres and the
 * tokens, into the embedding's own part (zeroed at the step's start by
 * layer_work_micro_batches), which after the step's last micro-batch is added to the head's
 * part in embed_grads (model.h: the tied embedding's two parts). */
void layer_work_embed_backward(layer_work *w, gpt_stream *c, const gpt_shape *sh, float *embed_grads);
/* Is the micro-batch being computed the step's last? */
static inline int layer_work_last_micro(const layer_work *w)
{ return w->micro == w->micro_batches - 1; }
/* Micro-batch k > 0 (nothing for k = 0): on s, once `home` (the earlier micro-batches' sum's
 * copy to host_sum) is done, that sum copied up into the landing block and added to this
 * micro-batch's reduced gradient `mine` (n floats): mine = sum + mine.  The copy counts as
 * h2d traffic and busy time. */
int layer_work_add_earlier(layer_work *w, stream_spans *spans, gpt_stream *s, float *mine,
                           const float *host_sum, size_t n, gpt_event *home, struct step_result *out);
/* A block whose gradient goes home (to host_sum: this rank's shard of it, `home` marks its
 * last arrival): on one rank, the earlier micro-batches added (add_earlier) and after the
 * last its squared norm, on c; on N ranks it is reduce-scattered in place on the group's
 * stream, the earlier micro-batches added to this rank's shard and after the last this
 * rank's entry of its (block, shard) norms taken there.  *final is the stream that did it. */
int layer_work_reduce_home(layer_work *w, stream_spans *spans, gpt_stream *c, int block,
                           float *grads, size_t n, const float *host_sum, gpt_event *home,
                           struct step_result *out, gpt_stream **final);
/* N ranks: the gradient group and its events (nothing on one rank); close is safe always. */
int layer_work_open_comm(layer_work *w, gpt_backend *be, int rank, int world, struct watchdog *dog);
void layer_work_close_comm(layer_work *w);
/* Block b's gradient (n floats on the GPU, complete once what is issued on c has run): on
 * one rank its squared norm on c, and *final = c; on N ranks it is all-reduced and its N
 * shard norms taken on the gradient group's stream, and *final is that stream.  Whatever
 * reads the reduced gradient (the copy home, an update) waits on an event recorded on
 * *final. */
int layer_work_reduce(layer_work *w, stream_spans *spans, gpt_stream *c, int block, float *grads,
                      size_t n, gpt_stream **final);
/* A block whose gradient sum stays on the GPU (acc, n floats) but is reduced in every
 * micro-batch (stronghold's resident layers, micro-batches after the first): this micro-
 * batch's gradient `fresh` (complete on c) all-reduced in place over the ranks, then added,
 * acc = acc + fresh, and after the last micro-batch acc's (block, shard) norms taken; on the
 * group's stream on N ranks, on c on one.  *final is that stream. */
int layer_work_reduce_add(layer_work *w, stream_spans *spans, gpt_stream *c, int block,
                          float *fresh, float *acc, size_t n, gpt_stream **final);
/* After the norms are read back (c synchronised) on N ranks: every rank's table gathered,
 * entry (b, r) from rank r (exact for all-reduced blocks, whose every entry each rank has, and
 * for reduce-scattered ones, whose entry r only rank r has). */
int layer_work_gather_norm_tables(layer_work *w, const gpt_shape *sh);
/* c waits for every reduction issued so far (nothing on one rank). */
int layer_work_wait_reduced(layer_work *w, gpt_stream *c);
/* Queue on c, after every reduction, the copy of all the block norms to host_norms. */
int layer_work_read_norms(layer_work *w, gpt_stream *c, const gpt_shape *sh);
/* Engines that reduce-scatter: host_norms[0..L] hold this rank's shard norms of each block
 * (read back, c synchronised); this gathers every rank's and lays them out as the canonical
 * (block, shard) table layer_work_outcome reads.  Host-side, blocking. */
int layer_work_gather_shard_norms(layer_work *w, const gpt_shape *sh);
/* After c is synchronised: the step's loss (global over ranks), grad norm and skip. */
int layer_work_outcome(layer_work *w, const gpt_shape *sh, struct step_result *out);
/* Layer l's activations as --recompute keeps them (gpt_layers_acts_carve): its forward fills
 * them, its backward (with the same mode) reads and consumes them. */
gpt_layer_acts layer_work_acts(const layer_work *w, const gpt_shape *sh, int layer);
/* The activations of layer `layer` for its backward (gpt_layers_acts_carve_backward: the last
 * layer's recompute nothing). */
gpt_layer_acts layer_work_backward_acts(const layer_work *w, const gpt_shape *sh, int layer);

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
