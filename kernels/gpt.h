/*
 * gpt.h — the GPT kernel set: the whole API that the model code and the engines see.
 *
 * A backend (CPU reference, CUDA) is a table of function pointers (gpt_backend_ops) plus
 * its memory and stream primitives, in the manner of ggml's backends.  Every op is called
 * on a stream; the inline wrappers below (gpt_matmul_forward(s, ...)) dispatch through
 * the stream's backend, so model code never names a backend.
 *
 * Conventions (the same on every backend):
 *   - Tensors are row-major, contiguous; shapes are given in the comment of each op
 *     as (rows, cols) or (B, T, C) with the last index fastest.  N = B*T rows of tokens.
 *   - Element types.  A backend has one activation type, be->dtype (gpt_dtype): fp32, or
 *     bf16 for mixed precision (CUDA only).  Every argument typed void * / const void *
 *     holds elements of that type: activations, their gradients, and the parameters the
 *     ops read (with bf16, the GPU's bf16 working copy of the weights).  Arguments typed
 *     float * are always fp32 whatever the backend's type: parameter gradients (dw, db,
 *     dwte, ...), LayerNorm's saved mean and rstd, losses, AdamW's params / m / v (the
 *     fp32 master weights) and norms.  Reductions (LayerNorm statistics, softmax, the
 *     cross-entropy, norms) and matmul accumulation are fp32 (or wider) in every type.
 *     On an fp32 backend a float * passes for a void *: fp32 callers compile unchanged.
 *   - Pointers are the backend's "device" pointers (for the CPU backend: host memory).
 *   - forward ops overwrite their outputs.
 *   - backward ops ACCUMULATE (+=) into parameter gradients (dw, db, dwte, ...) so that a
 *     tied weight or a gradient-accumulation step simply adds; the linear layer's and the
 *     LayerNorm's backward OVERWRITE them instead when passed GPT_GRAD_OVERWRITE, which an
 *     engine whose gradient is written once per step uses in place of zeroing it first (the
 *     same values: 0 + x = x; a gradient of -0 may come out +0 one way and -0 the other,
 *     which no update can tell apart).  What they do to activation gradients is stated per
 *     op: "overwrites" or "accumulates".
 *   - Linear layers follow PyTorch's nn.Linear: weight is (OC, C), out = inp @ w^T + bias.
 *
 * Error handling: ops cannot fail on valid shapes (their buffers are allocated up front);
 * memory and copy primitives return 0 on success or a negative gpt_status.
 */
#ifndef AEBENCH_GPT_H
#define AEBENCH_GPT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum gpt_status {
    GPT_OK = 0,
    GPT_ERR_OOM = -1,     /* the allocation did not fit (budget or the device itself) */
    GPT_ERR_BACKEND = -2, /* a runtime/library call failed; the backend printed which */
    GPT_ERR_INVALID = -3, /* bad argument (e.g. a token id out of range) */
    GPT_ERR_IO = -4,      /* a disk-tier file operation failed; the runtime printed which */
} gpt_status;

/* Element type of a backend's activations (see Conventions). */
typedef enum gpt_dtype {
    GPT_F32 = 0,  /* IEEE binary32 */
    GPT_BF16 = 1, /* bfloat16: the high 16 bits of a binary32, rounded to nearest even */
} gpt_dtype;

/* How a backward op writes a parameter gradient (see the conventions above). */
typedef enum { GPT_GRAD_ACCUMULATE = 0, GPT_GRAD_OVERWRITE = 1 } gpt_grad_write;

/* Bytes per element of a dtype. */
static inline size_t gpt_dtype_size(gpt_dtype t) { return t == GPT_BF16 ? 2 : 4; }
static inline const char *gpt_dtype_name(gpt_dtype t) { return t == GPT_BF16 ? "bf16" : "fp32"; }

/* fp32 <-> bf16 on the host, exactly as the CUDA backend rounds (nearest, ties to even;
 * NaN stays a quiet NaN).  For tests and host-side staging. */
static inline uint16_t gpt_f32_to_bf16(float f)
{
    union { float f; uint32_t u; } v = {f};
    if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40u);
    v.u += 0x7fffu + ((v.u >> 16) & 1u);
    return (uint16_t)(v.u >> 16);
}
static inline float gpt_bf16_to_f32(uint16_t h)
{
    union { uint32_t u; float f; } v = {(uint32_t)h << 16};
    return v.f;
}

typedef struct gpt_backend gpt_backend;
typedef struct gpt_stream gpt_stream;
typedef struct gpt_event gpt_event;
typedef struct gpt_graph gpt_graph;
typedef struct gpt_backend_ops gpt_backend_ops;

/* A float array and its length: a piece of the sequence checksum_chunks covers. */
typedef struct gpt_float_span {
    const float *p;
    size_t n;
} gpt_float_span;
enum { GPT_CHECKSUM_PARTS = 4 };

/* What an AdamW update adds to a sequence's checksums (checksum_element.h) as it writes:
 * the terms of the param, m and v words it stores, element e of its call sitting at word
 * first[0] + e, first[1] + e, first[2] + e of the sequence, added into sums[] (device
 * memory, one per chunk of chunk_floats words, not yet folded: gpt_checksum_fold_chunks does
 * that once every word is in).  So a checkpoint's checksums ride on the optimizer's own pass over
 * the state instead of a pass of their own. */
typedef struct gpt_checksum_acc {
    uint64_t *sums;
    size_t chunk_floats;
    size_t first[3];
} gpt_checksum_acc;

/* A backend instance: its op table and private state (device id, library handles). */
struct gpt_backend {
    const gpt_backend_ops *ops;
    const char *name; /* "cpu", "cuda" */
    void *impl;
    gpt_dtype dtype;  /* the element type of every void * op argument (fixed at creation) */
};

/* An in-order queue of work on one backend.  Ops issued on one stream run in issue order,
 * asynchronously with respect to the host on every backend (on the CPU backend each stream
 * is a worker thread): synchronise before reading what a stream wrote, and keep the host
 * buffers of copies alive until then. */
struct gpt_stream {
    const gpt_backend *be;
    void *impl;
};

/* A marker in a stream's queue: recorded on one stream, waited on by another stream (the
 * device orders the two without the host) or by the host.  An event that was never recorded
 * counts as complete; recording it again moves the marker (as cudaEventRecord does). */
struct gpt_event {
    const gpt_backend *be;
    void *impl;
};

/* Work captured from a stream once and replayed as one launch (a CUDA graph): what a stream
 * was given between gpt_graph_capture_begin and _end, with the same pointers and arguments
 * every replay.  Only backends that have them (gpt_backend_has_graphs). */
struct gpt_graph {
    const gpt_backend *be;
    void *impl;
};

struct gpt_backend_ops {
    /* ---- memory -------------------------------------------------------------------- */
    int (*dev_alloc)(const gpt_backend *be, void **ptr, size_t bytes);
    void (*dev_free)(const gpt_backend *be, void *ptr);
    /* One line naming the device, e.g. "cpu (16 threads)" or "NVIDIA H100 80GB HBM3". */
    void (*describe)(const gpt_backend *be, char *buf, size_t len);
    /* Free and total bytes of the device, for the default budget. */
    int (*dev_mem_info)(const gpt_backend *be, size_t *free_bytes, size_t *total_bytes);
    int (*stream_create)(const gpt_backend *be, gpt_stream **out);
    void (*stream_destroy)(gpt_stream *s);
    int (*memcpy_h2d)(gpt_stream *s, void *dst, const void *src, size_t bytes);
    int (*memcpy_d2h)(gpt_stream *s, void *dst, const void *src, size_t bytes);
    int (*memcpy_d2d)(gpt_stream *s, void *dst, const void *src, size_t bytes);
    int (*memset_zero)(gpt_stream *s, void *dst, size_t bytes);
    int (*stream_sync)(gpt_stream *s);

    /* ---- events and host memory for transfers ----------------------------------------- */
    int (*event_create)(const gpt_backend *be, gpt_event **out);
    void (*event_destroy)(gpt_event *e);
    int (*event_record)(gpt_event *e, gpt_stream *s);
    int (*stream_wait_event)(gpt_stream *s, gpt_event *e);
    int (*event_sync)(gpt_event *e);
    int (*event_elapsed_ms)(float *ms, gpt_event *start, gpt_event *end);
    /* Page-locked host memory that copies on any stream can use asynchronously, zeroed
     * (page aligned: the disk tier does O_DIRECT I/O on it; registered with
     * cudaHostRegister on the GPU, aligned host memory on the CPU backend). */
    int (*host_alloc_pinned)(const gpt_backend *be, void **ptr, size_t bytes);
    void (*host_free_pinned)(const gpt_backend *be, void *ptr);
    /* The stream as the backend's own handle (a cudaStream_t on CUDA), for libraries that
     * take one (NCCL); NULL on the CPU backend. */
    void *(*stream_handle)(gpt_stream *s);
    /* fn(arg) runs on the host in the stream's order, after the work issued before it and
     * before the work issued after it (cudaLaunchHostFunc; on the CPU backend the stream's
     * worker thread runs it).  arg_bytes (<= GPT_HOST_TASK_ARG_BYTES) are copied at issue.
     * A nonzero return from fn is the stream's error (the next stream_sync returns it).
     * fn must not issue work on streams of this backend (CUDA forbids it in a host
     * function); it may block, e.g. in an MPI collective. */
    int (*stream_host_task)(gpt_stream *s, int (*fn)(void *arg), const void *arg,
                            size_t arg_bytes);
    /* Page-lock host memory the caller already has (e.g. a mapped file), page aligned, so
     * that copies use it asynchronously like host_alloc_pinned's (cudaHostRegister; nothing
     * on the CPU backend); unregister before unmapping it. */
    int (*host_register)(const gpt_backend *be, void *ptr, size_t bytes);
    void (*host_unregister)(const gpt_backend *be, void *ptr);

    /* ---- ops (see the wrappers below for shapes and semantics; void *: be->dtype) ---- */
    void (*encoder_forward)(gpt_stream *s, void *out, const int32_t *tokens, const void *wte,
                            const void *wpe, int B, int T, int C, int vocab_lo, int vocab_rows);
    void (*encoder_backward)(gpt_stream *s, float *dwte, float *dwpe, const void *dout,
                             const int32_t *tokens, int B, int T, int C, int vocab_lo,
                             int vocab_rows);
    void (*layernorm_forward)(gpt_stream *s, void *out, float *mean, float *rstd,
                              const void *inp, const void *w, const void *b, int N, int C);
    void (*layernorm_backward)(gpt_stream *s, void *dinp, float *dw, float *db,
                               const void *dout, const void *inp, const void *w,
                               const float *mean, const float *rstd, int N, int C,
                               gpt_grad_write gw);
    void (*matmul_forward)(gpt_stream *s, void *out, const void *inp, const void *w,
                           const void *bias, int N, int C, int OC);
    void (*matmul_backward)(gpt_stream *s, void *dinp, float *dw, float *dbias,
                            const void *dout, const void *inp, const void *w, int N, int C,
                            int OC, gpt_grad_write gw);
    void (*matmul_forward_gelu)(gpt_stream *s, void *out, void *pre, const void *inp,
                                const void *w, const void *bias, int N, int C, int OC);
    void (*matmul_forward_residual)(gpt_stream *s, void *out, const void *inp, const void *w,
                                    const void *bias, const void *res, int N, int C, int OC);
    void (*matmul_backward_gelu)(gpt_stream *s, void *dinp, float *dw, float *dbias,
                                 const void *dout, const void *inp, const void *w,
                                 const void *pre, int N, int C, int OC, gpt_grad_write gw);
    void (*attention_forward)(gpt_stream *s, void *out, float *lse, const void *qkv, int B,
                              int T, int C, int NH);
    void (*attention_backward)(gpt_stream *s, void *dqkv, float *delta, const void *dout,
                               const void *qkv, const void *out, const float *lse, int B,
                               int T, int C, int NH);
    void (*gelu_forward)(gpt_stream *s, void *out, const void *inp, size_t n);
    void (*gelu_backward)(gpt_stream *s, void *dinp, const void *inp, const void *dout,
                          size_t n);
    void (*residual_forward)(gpt_stream *s, void *out, const void *a, const void *b, size_t n);
    void (*residual_backward)(gpt_stream *s, void *da, void *db, const void *dout, size_t n);
    void (*residual_layernorm_forward)(gpt_stream *s, void *res, void *out, float *mean,
                                       float *rstd, const void *a, const void *res_b,
                                       const void *w, const void *b, int N, int C);
    void (*crossentropy_forward_backward)(gpt_stream *s, float *losses, void *logits,
                                          const int32_t *targets, float dloss, int N, int V,
                                          int Vp);
    void (*crossentropy_stats)(gpt_stream *s, float *stats, const void *logits,
                               const int32_t *targets, int N, int V, int Vp, int vocab_lo);
    void (*crossentropy_parallel)(gpt_stream *s, float *losses, void *logits,
                                  const int32_t *targets, const float *stats, int parts,
                                  float dloss, int N, int V, int Vp, int vocab_lo);
    void (*adamw_update)(gpt_stream *s, float *param, void *param_act, const float *grad,
                         float *m, float *v, size_t n, float lr, float beta1, float beta2,
                         float eps, float weight_decay, int t, float grad_scale,
                         const gpt_checksum_acc *acc);
    void (*norm_squared)(gpt_stream *s, float *out, const float *x, size_t n);
    void (*params_to_act)(gpt_stream *s, void *dst, const float *src, size_t n);
    void (*act_to_f32)(gpt_stream *s, float *dst, const void *src, size_t n);
    /* Checksums (checksum_element.h) of the chunks of chunk_floats words of the arrays
     * parts[0..nparts) taken one after the other (nparts <= GPT_CHECKSUM_PARTS; the last
     * chunk may be shorter): sums[c] (device memory, nchunks entries) for each chunk. */
    void (*checksum_chunks)(gpt_stream *s, uint64_t *sums, const gpt_float_span *parts, int nparts,
                            size_t chunk_floats);
    /* sums[c] = fold(sums[c], chunk c's length) for the chunks of a sequence of total words:
     * the checksums from the raw sums an update with a gpt_checksum_acc left */
    void (*checksum_fold)(gpt_stream *s, uint64_t *sums, size_t total, size_t chunk_floats);
    /* out = a + b on n fp32 elements whatever be->dtype (gradient sums) */
    void (*add_f32)(gpt_stream *s, float *out, const float *a, const float *b, size_t n);

    /* ---- graphs (NULL where the backend has none: the CPU backend, --profile's) ----------- */
    /* From capture_begin on, what is issued on s (and on streams that wait on an event it
     * records) is recorded, not run; capture_end ends it (every stream drawn in must have
     * been waited on by s again) and makes the graph.  A capture that a call inside it broke
     * (one that is not allowed while capturing) ends with GPT_ERR_BACKEND and no graph. */
    int (*graph_capture_begin)(gpt_stream *s);
    int (*graph_capture_end)(gpt_stream *s, gpt_graph **out);
    /* The captured work, run on s in its order (asynchronously, as the ops). */
    int (*graph_launch)(gpt_graph *g, gpt_stream *s);
    void (*graph_destroy)(gpt_graph *g);
    /* Records e on s for its time (a busy span's end, a watchdog's probe), also inside a
     * capture, where it becomes a node that every replay records (CUDA: an external event
     * record) rather than the capture's own ordering; not for waits between streams.  NULL:
     * event_record does (a backend without graphs). */
    int (*event_stamp)(gpt_event *e, gpt_stream *s);
};

/* ---- memory and ordering on a stream (return 0 or a negative gpt_status) ------------ */
static inline int gpt_memcpy_h2d(gpt_stream *s, void *dst, const void *src, size_t bytes)
{ return s->be->ops->memcpy_h2d(s, dst, src, bytes); }
static inline int gpt_memcpy_d2h(gpt_stream *s, void *dst, const void *src, size_t bytes)
{ return s->be->ops->memcpy_d2h(s, dst, src, bytes); }
static inline int gpt_memcpy_d2d(gpt_stream *s, void *dst, const void *src, size_t bytes)
{ return s->be->ops->memcpy_d2d(s, dst, src, bytes); }
static inline int gpt_stream_memset_zero(gpt_stream *s, void *dst, size_t bytes)
{ return s->be->ops->memset_zero(s, dst, bytes); }
static inline int gpt_stream_sync(gpt_stream *s)
{ return s->be->ops->stream_sync(s); }

/* Events.  record: the event completes when everything issued on s before it has run.
 * wait: work issued on s after this call starts only once e has completed (the host does
 * not block).  sync: the host blocks until e has completed.  elapsed: milliseconds between
 * two completed events (for per-stream busy times; both must have been recorded). */
static inline int gpt_event_create(const gpt_backend *be, gpt_event **out)
{ return be->ops->event_create(be, out); }
static inline void gpt_event_destroy(gpt_event *e)
{ if (e) e->be->ops->event_destroy(e); }
static inline int gpt_event_record(gpt_event *e, gpt_stream *s)
{ return s->be->ops->event_record(e, s); }
static inline int gpt_stream_wait_event(gpt_stream *s, gpt_event *e)
{ return s->be->ops->stream_wait_event(s, e); }
static inline int gpt_event_sync(gpt_event *e)
{ return e->be->ops->event_sync(e); }
static inline int gpt_event_elapsed_ms(float *ms, gpt_event *start, gpt_event *end)
{ return start->be->ops->event_elapsed_ms(ms, start, end); }
static inline int gpt_host_alloc_pinned(const gpt_backend *be, void **ptr, size_t bytes)
{ return be->ops->host_alloc_pinned(be, ptr, bytes); }
static inline void gpt_host_free_pinned(const gpt_backend *be, void *ptr)
{ be->ops->host_free_pinned(be, ptr); }

/* Bytes of argument a host task carries (see gpt_backend_ops.stream_host_task). */
#define GPT_HOST_TASK_ARG_BYTES 96
static inline int gpt_host_register(const gpt_backend *be, void *ptr, size_t bytes)
{ return be->ops->host_register(be, ptr, bytes); }
static inline void gpt_host_unregister(const gpt_backend *be, void *ptr)
{ be->ops->host_unregister(be, ptr); }
static inline int gpt_stream_host_task(gpt_stream *s, int (*fn)(void *arg), const void *arg,
                                       size_t arg_bytes)
{ return s->be->ops->stream_host_task(s, fn, arg, arg_bytes); }
static inline void *gpt_stream_handle(gpt_stream *s)
{ return s->be->ops->stream_handle(s); }

/* Graphs (see gpt_backend_ops.graph_capture_begin); GPT_ERR_INVALID on a backend without. */
static inline int gpt_backend_has_graphs(const gpt_backend *be)
{ return be->ops->graph_capture_begin != NULL; }
static inline int gpt_graph_capture_begin(gpt_stream *s)
{ return s->be->ops->graph_capture_begin ? s->be->ops->graph_capture_begin(s) : GPT_ERR_INVALID; }
static inline int gpt_graph_capture_end(gpt_stream *s, gpt_graph **out)
{ *out = NULL; return s->be->ops->graph_capture_end ? s->be->ops->graph_capture_end(s, out) : GPT_ERR_INVALID; }
static inline int gpt_graph_launch(gpt_graph *g, gpt_stream *s)
{ return s->be->ops->graph_launch(g, s); }
static inline void gpt_graph_destroy(gpt_graph *g)
{ if (g) g->be->ops->graph_destroy(g); }
static inline int gpt_event_stamp(gpt_event *e, gpt_stream *s)
{ return s->be->ops->event_stamp ? s->be->ops->event_stamp(e, s) : s->be->ops->event_record(e, s); }

/* ======================================================================================
 * The ops.  B batch, T sequence, C channels (hidden), NH heads, V vocab, Vp padded vocab,
 * N rows (= B*T), OC output channels.
 * ==================================================================================== */

/* out (B,T,C) = wte[tokens[b,t], :] + wpe[t, :]          wte (Vp,C), wpe (>=T,C) */
static inline void gpt_encoder_forward(gpt_stream *s, void *out, const int32_t *tokens,
                                       const void *wte, const void *wpe, int B, int T, int C)
{ s->be->ops->encoder_forward(s, out, tokens, wte, wpe, B, T, C, 0, INT32_MAX); }

/* dwte[tokens[b,t]] += dout[b,t];  dwpe[t] += dout[b,t]   (both accumulate) */
static inline void gpt_encoder_backward(gpt_stream *s, float *dwte, float *dwpe,
                                        const void *dout, const int32_t *tokens, int B, int T,
                                        int C)
{ s->be->ops->encoder_backward(s, dwte, dwpe, dout, tokens, B, T, C, 0, INT32_MAX); }

/* The vocabulary-parallel forms (tensor parallelism: each rank holds the rows [vocab_lo,
 * vocab_lo + vocab_rows) of the word embedding): out = (wte[tok - vocab_lo] where tok is one
 * of those rows, else 0) + (wpe[t], or 0 with wpe NULL); the backward adds dout into the rows
 * of dwte it holds only, and into dwpe unless it is NULL.  The ranks' outputs summed are the
 * whole embedding, exactly (one rank adds a row, the others zeros). */
static inline void gpt_encoder_forward_vocab(gpt_stream *s, void *out, const int32_t *tokens,
                                             const void *wte, const void *wpe, int B, int T,
                                             int C, int vocab_lo, int vocab_rows)
{ s->be->ops->encoder_forward(s, out, tokens, wte, wpe, B, T, C, vocab_lo, vocab_rows); }
static inline void gpt_encoder_backward_vocab(gpt_stream *s, float *dwte, float *dwpe,
                                              const void *dout, const int32_t *tokens, int B,
                                              int T, int C, int vocab_lo, int vocab_rows)
{ s->be->ops->encoder_backward(s, dwte, dwpe, dout, tokens, B, T, C, vocab_lo, vocab_rows); }

/* out (N,C) = (inp - mean) * rstd * w + b per row, eps 1e-5; mean, rstd (N) are saved. */
static inline void gpt_layernorm_forward(gpt_stream *s, void *out, float *mean, float *rstd,
                                         const void *inp, const void *w, const void *b,
                                         int N, int C)
{ s->be->ops->layernorm_forward(s, out, mean, rstd, inp, w, b, N, C); }

/* dinp (N,C) accumulates (it is the residual stream's gradient); dw, db (C) accumulate
 * (gw GPT_GRAD_ACCUMULATE) or are overwritten (GPT_GRAD_OVERWRITE). */
static inline void gpt_layernorm_backward(gpt_stream *s, void *dinp, float *dw, float *db,
                                          const void *dout, const void *inp, const void *w,
                                          const float *mean, const float *rstd, int N, int C,
                                          gpt_grad_write gw)
{ s->be->ops->layernorm_backward(s, dinp, dw, db, dout, inp, w, mean, rstd, N, C, gw); }

/* out (N,OC) = inp (N,C) @ w^T (w is (OC,C)) + bias (OC, may be NULL). */
static inline void gpt_matmul_forward(gpt_stream *s, void *out, const void *inp,
                                      const void *w, const void *bias, int N, int C, int OC)
{ s->be->ops->matmul_forward(s, out, inp, w, bias, N, C, OC); }

/* dinp (N,C) = dout @ w (overwrites; skipped if NULL); dw (OC,C) += dout^T @ inp;
 * dbias (OC) += column sums of dout (skipped if NULL); with gw GPT_GRAD_OVERWRITE, dw and
 * dbias are = instead of +=.  dinp may alias inp (same shape): dw is taken first, so a
 * layer's backward can put dinp where its dead input was. */
static inline void gpt_matmul_backward(gpt_stream *s, void *dinp, float *dw, float *dbias,
                                       const void *dout, const void *inp, const void *w,
                                       int N, int C, int OC, gpt_grad_write gw)
{ s->be->ops->matmul_backward(s, dinp, dw, dbias, dout, inp, w, N, C, OC, gw); }

/* The MLP's first linear layer and its GELU in one op: pre (N,OC) = inp @ w^T + bias,
 * out (N,OC) = gelu(pre) (pre is what the backward's GELU derivative reads).  On the GPU the
 * GELU runs in the GEMM's epilogue (no separate pass over the (N, 4C) activations); the CPU
 * backend computes exactly matmul_forward into pre, then gelu_forward(out, pre). */
static inline void gpt_matmul_forward_gelu(gpt_stream *s, void *out, void *pre,
                                           const void *inp, const void *w, const void *bias,
                                           int N, int C, int OC)
{ s->be->ops->matmul_forward_gelu(s, out, pre, inp, w, bias, N, C, OC); }

/* A linear layer and the residual connection after it in one op: out (N,OC) = res (N,OC) +
 * (inp @ w^T + bias).  On the GPU the residual is added in the GEMM's epilogue (beta 1 with res
 * as C: no separate pass over the (N, OC) activations; one rounding of the sum instead of two,
 * so within a rounding of the two ops); the CPU backend computes exactly matmul_forward into
 * out, then residual_forward(out, res, out).  out must alias neither inp nor res (the CPU
 * backend's product would overwrite res before it is added). */
static inline void gpt_matmul_forward_residual(gpt_stream *s, void *out, const void *inp,
                                               const void *w, const void *bias, const void *res,
                                               int N, int C, int OC)
{ s->be->ops->matmul_forward_residual(s, out, inp, w, bias, res, N, C, OC); }

/* The backward of a linear layer whose input was gelu(pre): as matmul_backward, with dinp
 * (N,C) = gelu'(pre) * (dout @ w) (overwrites; pre (N,C)), i.e. the gradient already carried
 * through the GELU to pre.  dinp may alias inp, as in matmul_backward.  The CPU backend
 * computes exactly matmul_backward then gelu_backward(dinp, pre, dinp). */
static inline void gpt_matmul_backward_gelu(gpt_stream *s, void *dinp, float *dw, float *dbias,
                                            const void *dout, const void *inp, const void *w,
                                            const void *pre, int N, int C, int OC,
                                            gpt_grad_write gw)
{ s->be->ops->matmul_backward_gelu(s, dinp, dw, dbias, dout, inp, w, pre, N, C, OC, gw); }

/* Causal multi-head self-attention, fused: the (T, T) probabilities are never stored.
 * qkv (B,T,3C) holds q | k | v, each split into NH heads of hs = C/NH; with the scores
 * s(t,t2) = q[t] . k[t2] / sqrt(hs) for t2 <= t, out (B,T,C) is the heads' outputs
 * concatenated, out[t] = sum_t2 softmax(s(t,.))[t2] v[t2], and lse (B,NH,T, fp32) the log of
 * each row's softmax denominator, log sum_t2 exp s(t,t2), which the backward needs. */
static inline void gpt_attention_forward(gpt_stream *s, void *out, float *lse,
                                         const void *qkv, int B, int T, int C, int NH)
{ s->be->ops->attention_forward(s, out, lse, qkv, B, T, C, NH); }

/* dqkv (B,T,3C) overwritten from dout (B,T,C) and the forward's qkv, out and lse (the
 * probabilities are recomputed); delta (B,NH,T, fp32) is scratch (it receives
 * dout[t] . out[t] per head, the softmax backward's row term). */
static inline void gpt_attention_backward(gpt_stream *s, void *dqkv, float *delta,
                                          const void *dout, const void *qkv, const void *out,
                                          const float *lse, int B, int T, int C, int NH)
{ s->be->ops->attention_backward(s, dqkv, delta, dout, qkv, out, lse, B, T, C, NH); }

/* GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).  dinp overwritten;
 * dinp may alias dout. */
static inline void gpt_gelu_forward(gpt_stream *s, void *out, const void *inp, size_t n)
{ s->be->ops->gelu_forward(s, out, inp, n); }
static inline void gpt_gelu_backward(gpt_stream *s, void *dinp, const void *inp,
                                     const void *dout, size_t n)
{ s->be->ops->gelu_backward(s, dinp, inp, dout, n); }

/* out = a + b;  da += dout, db += dout. */
static inline void gpt_residual_forward(gpt_stream *s, void *out, const void *a,
                                        const void *b, size_t n)
{ s->be->ops->residual_forward(s, out, a, b, n); }
/* A residual add and the LayerNorm that follows it, in one op: res (N,C) = a + res_b (res may
 * alias either; stored in the activation type), then out = layernorm(res) with mean, rstd
 * saved, exactly as gpt_residual_forward then gpt_layernorm_forward(out, .., res, ..) (the
 * CPU backend runs those two); on the GPU the sum is normalised from the pass that writes it
 * instead of being read back from memory once more. */
static inline void gpt_residual_layernorm_forward(gpt_stream *s, void *res, void *out,
                                                  float *mean, float *rstd, const void *a,
                                                  const void *res_b, const void *w,
                                                  const void *b, int N, int C)
{ s->be->ops->residual_layernorm_forward(s, res, out, mean, rstd, a, res_b, w, b, N, C); }
static inline void gpt_residual_backward(gpt_stream *s, void *da, void *db,
                                         const void *dout, size_t n)
{ s->be->ops->residual_backward(s, da, db, dout, n); }

/* Softmax cross-entropy over the first V of Vp logits per row (the padded columns are
 * never part of the softmax), forward and backward in one pass over the logits:
 *   losses (N) = -log softmax(logits[n])[targets[n]];
 *   logits (N,Vp) is overwritten by its gradient dloss * (softmax - onehot(target)), 0 in
 *   the padded columns.
 * One op because the model always needs both, back to back: a row is read once for its
 * statistics and written once, and only one (rows, Vp) buffer ever exists. */
static inline void gpt_crossentropy_forward_backward(gpt_stream *s, float *losses,
                                                     void *logits, const int32_t *targets,
                                                     float dloss, int N, int V, int Vp)
{ s->be->ops->crossentropy_forward_backward(s, losses, logits, targets, dloss, N, V, Vp); }

/* The cross-entropy over a vocabulary split between ranks (Megatron's vocab-parallel one):
 * this rank's logits (N,Vp) are the columns [vocab_lo, vocab_lo + Vp) of the whole, of which
 * its first V are real (V may be 0: a rank of padding only).  Two ops with an all-gather of
 * the small stats between them, so that no rank ever holds a whole row:
 *   stats (N,3, fp32) = per row: the max of its V real logits (-inf for none), the sum of
 *     exp(logit - that max) over them, and the target's logit where the target is one of
 *     this rank's columns (else 0);
 *   crossentropy_parallel: with every rank's stats, stats (parts,N,3) in rank order, combines
 *     the max M, the sum S = sum_r s_r exp(m_r - M) and the target logit x_t in that order
 *     (the same on every rank), writes losses (N) = log S - (x_t - M) and overwrites the
 *     logits with dloss (exp(logit - M) / S - onehot(target)), 0 in the padded columns. */
static inline void gpt_crossentropy_stats(gpt_stream *s, float *stats, const void *logits,
                                          const int32_t *targets, int N, int V, int Vp,
                                          int vocab_lo)
{ s->be->ops->crossentropy_stats(s, stats, logits, targets, N, V, Vp, vocab_lo); }
static inline void gpt_crossentropy_parallel(gpt_stream *s, float *losses, void *logits,
                                             const int32_t *targets, const float *stats,
                                             int parts, float dloss, int N, int V, int Vp,
                                             int vocab_lo)
{ s->be->ops->crossentropy_parallel(s, losses, logits, targets, stats, parts, dloss, N, V, Vp,
                                    vocab_lo); }

/* AdamW (decoupled weight decay), step t >= 1, on n contiguous elements:
 *   g = grad * grad_scale;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
 *   param -= lr * ( (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + weight_decay * param ) */
static inline void gpt_adamw_update(gpt_stream *s, float *param, const float *grad, float *m,
                                    float *v, size_t n, float lr, float beta1, float beta2,
                                    float eps, float weight_decay, int t, float grad_scale)
{ s->be->ops->adamw_update(s, param, NULL, grad, m, v, n, lr, beta1, beta2, eps, weight_decay,
                           t, grad_scale, NULL); }

/* The same update, which also writes the updated params into param_act (n elements of
 * be->dtype) exactly as gpt_params_to_act(param_act, param, n) would: the bf16 working copy
 * refreshed in the same pass, without reading the params again. */
static inline void gpt_adamw_update_act(gpt_stream *s, float *param, void *param_act,
                                        const float *grad, float *m, float *v, size_t n,
                                        float lr, float beta1, float beta2, float eps,
                                        float weight_decay, int t, float grad_scale)
{ s->be->ops->adamw_update(s, param, param_act, grad, m, v, n, lr, beta1, beta2, eps,
                           weight_decay, t, grad_scale, NULL); }

/* The same update adding the checksum terms of what it writes (acc NULL: none). */
static inline void gpt_adamw_update_sums(gpt_stream *s, float *param, void *param_act,
                                         const float *grad, float *m, float *v, size_t n,
                                         float lr, float beta1, float beta2, float eps,
                                         float weight_decay, int t, float grad_scale,
                                         const gpt_checksum_acc *acc)
{ s->be->ops->adamw_update(s, param, param_act, grad, m, v, n, lr, beta1, beta2, eps,
                           weight_decay, t, grad_scale, acc); }

/* *out (one float in device memory) = sum of x[i]^2, reduced in at least fp32 with a
 * fixed order (the same result on every call with the same input). */
static inline void gpt_norm_squared(gpt_stream *s, float *out, const float *x, size_t n)
{ s->be->ops->norm_squared(s, out, x, n); }
static inline void gpt_checksum_chunks(gpt_stream *s, uint64_t *sums, const gpt_float_span *parts,
                                       int nparts, size_t chunk_floats)
{ s->be->ops->checksum_chunks(s, sums, parts, nparts, chunk_floats); }
static inline void gpt_checksum_fold_chunks(gpt_stream *s, uint64_t *sums, size_t total, size_t chunk_floats)
{ s->be->ops->checksum_fold(s, sums, total, chunk_floats); }

/* out = a + b, n fp32 elements, on a backend of any activation type (out may alias either): the
 * sum of gradients of micro-batches, which stay fp32 in bf16 training.  The same bits as
 * gpt_residual_forward on an fp32 backend. */
static inline void gpt_add_f32(gpt_stream *s, float *out, const float *a, const float *b, size_t n)
{ s->be->ops->add_f32(s, out, a, b, n); }

/* dst (n elements of be->dtype) = src (fp32), rounded to nearest even: the working copy of
 * fp32 master weights that the ops read.  On an fp32 backend a copy (nothing when dst ==
 * src). */
static inline void gpt_params_to_act(gpt_stream *s, void *dst, const float *src, size_t n)
{ s->be->ops->params_to_act(s, dst, src, n); }

/* dst (n fp32) = src (n elements of be->dtype), exactly (a bf16 value widens to the same
 * number): a gradient reduced in bf16 (--grad-reduce-dtype bf16) back to fp32.  A copy on fp32
 * (nothing when dst == src). */
static inline void gpt_act_to_f32(gpt_stream *s, float *dst, const void *src, size_t n)
{ s->be->ops->act_to_f32(s, dst, src, n); }

/* The element type of the ops issued on s. */
static inline gpt_dtype gpt_stream_dtype(const gpt_stream *s) { return s->be->dtype; }

/* Available and total memory of this host (MemAvailable/MemTotal, else sysconf): the CPU
 * backend's "device" memory and the default host budget. 0 or GPT_ERR_BACKEND. */
int gpt_host_mem_info(size_t *free_bytes, size_t *total_bytes);

/* ---- backends ---------------------------------------------------------------------- */

/* The CPU reference backend (kernels/cpu), fp32.  nthreads <= 0: OpenMP's default. */
int gpt_cpu_backend_create(gpt_backend **out, int nthreads);
/* The same with an activation type: GPT_BF16 emulates the CUDA backend's mixed precision
 * (bf16 activations and working weights, widened to fp32 for each op and rounded to nearest
 * even when stored; fp32 gradients and optimizer): slower, for tests and references. */
int gpt_cpu_backend_create_dtype(gpt_backend **out, int nthreads, gpt_dtype dtype);
void gpt_cpu_backend_destroy(gpt_backend *be);

/* CPU backend only, for tests: hold puts e into "recorded, not yet complete" without any
 * stream (as if recorded behind work that never ends); release completes it.  A stream
 * that waits on a held event stops there until the test releases it, so a test can prove
 * deterministically that work did (or did not) wait.  One hold at a time per event;
 * GPT_ERR_INVALID for a second hold or a release without a hold. */
int gpt_cpu_event_hold(gpt_event *e);
int gpt_cpu_event_release(gpt_event *e);

/* The CUDA backend (kernels/cuda); returns GPT_ERR_BACKEND when the binary was built
 * without CUDA or no device is usable (quietly: the caller decides whether that is an
 * error).  allow_tf32: fp32 matmuls may run on TF32 tensor cores (--math tf32, the
 * default); 0 keeps them strict fp32 (--math fp32). */
int gpt_cuda_backend_create(gpt_backend **out, int device, int allow_tf32);
/* The same with an activation type: GPT_BF16 for mixed precision (bf16 activations and
 * working weights, fp32 accumulation, fp32 gradients and optimizer). */
int gpt_cuda_backend_create_dtype(gpt_backend **out, int device, int allow_tf32,
                                  gpt_dtype dtype);
/* The CUDA backend's kernel choices that tests (test_cuda) compare with the defaults: all
 * zeros is the default, the only choice aebench itself makes (no option or environment
 * variable changes it; issue 48).  cuda_backend.cu says what each default is and why. */
typedef enum gpt_gelu_epilogue {
    GPT_GELU_EPILOGUE_DEFAULT = 0, /* both in bf16, neither with fp32 storage */
    GPT_GELU_EPILOGUE_OFF = 1,     /* the MLP's GELU and its derivative as kernels of their own */
    GPT_GELU_EPILOGUE_BOTH = 2,    /* both in cuBLASLt's epilogues (the derivative not in strict fp32) */
} gpt_gelu_epilogue;
typedef struct gpt_cuda_kernels {
    gpt_gelu_epilogue gelu_epilogue;
    /* 1: the mma.sync attention where the wgmma kernels would run (the same bits) */
    int attention_mma;
    /* 1: TF32 weight gradients as one product on the operands as they are, not with the input
     * transposed first (as an input of more tokens than the transpose's scratch holds takes
     * them anyway: other bits, within TF32's bound) */
    int tf32_weight_grad_direct;
} gpt_cuda_kernels;
/* gpt_cuda_backend_create_dtype with those choices (NULL: the defaults). */
int gpt_cuda_backend_create_kernels(gpt_backend **out, int device, int allow_tf32, gpt_dtype dtype,
                                    const gpt_cuda_kernels *kernels);
void gpt_cuda_backend_destroy(gpt_backend *be);
/* CUDA devices this process can use (0 without CUDA, a driver or a device). */
int gpt_cuda_device_count(void);
/* The PCI bus id of a CUDA backend's device ("0000:1b:00.0", as NVML takes it) into buf;
 * GPT_ERR_BACKEND without CUDA. */
int gpt_cuda_backend_pci_bus_id(const gpt_backend *be, char *buf, int len);
/* What a result's record says it ran on (cmd/provenance.c), asked without making a context:
 * the CUDA runtime this build links and the newest the installed driver supports, as CUDA
 * numbers them (1000 x major + 10 x minor; driver 0: none installed); GPT_ERR_BACKEND in a
 * build without CUDA. */
int gpt_cuda_versions(int *runtime, int *driver);
/* Device `device`'s name ("NVIDIA H200") into buf; GPT_ERR_BACKEND without CUDA or that device. */
int gpt_cuda_device_name(int device, char *buf, int len);

#ifdef __cplusplus
}
#endif
#endif
