/*
 * cpu_ops.h — private to the CPU reference backend (kernels/cpu).
 *
 * The ops below have exactly the signatures of gpt_backend_ops (see ../gpt.h for every
 * op's shapes and semantics); cpu_backend.c puts them into the backend's op table.
 *
 * Determinism rule followed by every op in this directory: the result is bit-identical
 * whatever the number of OpenMP threads and from call to call.  Work is parallelised only
 * over independent outputs; each output is produced by one thread with a serial reduction
 * whose order depends only on the shapes, never on the thread count.  There are no
 * reduction() clauses and no floating-point atomics.
 */
#ifndef AEBENCH_CPU_OPS_H
#define AEBENCH_CPU_OPS_H

#include "../gpt.h"

/* The backend's private state (gpt_backend.impl). */
typedef struct cpu_backend_impl {
    int nthreads; /* OpenMP threads per op (>= 1) */
} cpu_backend_impl;

/* Number of OpenMP threads an op issued on stream s may use (for num_threads clauses). */
static inline int cpu_nthreads(const gpt_stream *s)
{
    const cpu_backend_impl *impl = (const cpu_backend_impl *)s->be->impl;
    return impl->nthreads;
}

/* cpu_matmul.c */
void cpu_matmul_forward(gpt_stream *s, float *out, const float *inp, const float *w,
                        const float *bias, int N, int C, int OC);
void cpu_matmul_backward(gpt_stream *s, float *dinp, float *dw, float *dbias,
                         const float *dout, const float *inp, const float *w, int N, int C,
                         int OC);

/* cpu_attention.c */
void cpu_attention_forward(gpt_stream *s, float *out, float *lse, const float *qkv, int B,
                           int T, int C, int NH);
void cpu_attention_backward(gpt_stream *s, float *dqkv, float *delta, const float *dout,
                            const float *qkv, const float *out, const float *lse, int B,
                            int T, int C, int NH);

/* cpu_ops.c */
void cpu_encoder_forward(gpt_stream *s, float *out, const int32_t *tokens, const float *wte,
                         const float *wpe, int B, int T, int C, int lo, int nrows);
void cpu_encoder_backward(gpt_stream *s, float *dwte, float *dwpe, const float *dout,
                          const int32_t *tokens, int B, int T, int C, int lo, int nrows);
void cpu_layernorm_forward(gpt_stream *s, float *out, float *mean, float *rstd,
                           const float *inp, const float *w, const float *b, int N, int C);
void cpu_layernorm_backward(gpt_stream *s, float *dinp, float *dw, float *db,
                            const float *dout, const float *inp, const float *w,
                            const float *mean, const float *rstd, int N, int C);
void cpu_gelu_forward(gpt_stream *s, float *out, const float *inp, size_t n);
void cpu_gelu_backward(gpt_stream *s, float *dinp, const float *inp, const float *dout,
                       size_t n);
void cpu_residual_forward(gpt_stream *s, float *out, const float *a, const float *b,
                          size_t n);
void cpu_residual_backward(gpt_stream *s, float *da, float *db, const float *dout, size_t n);
void cpu_crossentropy_forward_backward(gpt_stream *s, float *losses, float *logits,
                                       const int32_t *targets, float dloss, int N, int V, int Vp);
void cpu_crossentropy_stats(gpt_stream *s, float *stats, const float *logits,
                            const int32_t *targets, int N, int V, int Vp, int lo);
void cpu_crossentropy_parallel(gpt_stream *s, float *losses, float *logits,
                               const int32_t *targets, const float *stats, int parts,
                               float dloss, int N, int V, int Vp, int lo);
void cpu_adamw_update(gpt_stream *s, float *param, const float *grad, float *m, float *v,
                      size_t n, float lr, float beta1, float beta2, float eps,
                      float weight_decay, int t, float grad_scale, const gpt_checksum_acc *acc);
void cpu_checksum_fold(gpt_stream *s, uint64_t *sums, size_t total, size_t chunk_floats);
void cpu_norm_squared(gpt_stream *s, float *out, const float *x, size_t n);
void cpu_checksum_chunks(gpt_stream *s, uint64_t *sums, const gpt_float_span *parts, int nparts,
                         size_t chunk_floats);

#endif
