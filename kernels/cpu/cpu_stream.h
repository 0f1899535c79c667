/*
 * cpu_stream.h — private to the CPU backend: streams as worker threads, and events.
 *
 * Each gpt_stream of the CPU backend owns one worker thread that runs the stream's work in
 * issue order from a bounded FIFO.  Issuing an op, copy, memset, event record or wait only
 * copies its arguments into the queue and returns; the worker runs it later.  So on the CPU
 * backend, exactly as on a GPU, the host must synchronise (stream_sync, event_sync) before
 * it reads what a stream wrote, and a stream must wait on an event before it reads what
 * another stream wrote.  A missing dependency then shows up as a wrong result in CI.
 *
 * The functions below fill the CPU backend's op table (cpu_backend.c).
 */
#ifndef AEBENCH_CPU_STREAM_H
#define AEBENCH_CPU_STREAM_H

#include "cpu_ops.h"

int cpu_stream_create(const gpt_backend *be, gpt_stream **out);
void cpu_stream_destroy(gpt_stream *s);
int cpu_stream_sync(gpt_stream *s);
int cpu_memcpy_async(gpt_stream *s, void *dst, const void *src, size_t bytes);
int cpu_memset_zero_async(gpt_stream *s, void *dst, size_t bytes);
int cpu_stream_host_task(gpt_stream *s, int (*fn)(void *arg), const void *arg, size_t arg_bytes);
void *cpu_stream_handle(gpt_stream *s);

int cpu_event_create(const gpt_backend *be, gpt_event **out);
void cpu_event_destroy(gpt_event *e);
int cpu_event_record(gpt_event *e, gpt_stream *s);
int cpu_stream_wait_event(gpt_stream *s, gpt_event *e);
int cpu_event_sync(gpt_event *e);
int cpu_event_elapsed_ms(float *ms, gpt_event *start, gpt_event *end);

/* The ops, queued, with gpt_backend_ops' signatures: every void * holds fp32 on this
 * backend (be->dtype is always GPT_F32), which is what cpu_ops.h's kernels take. */
void cpu_q_encoder_forward(gpt_stream *s, void *out, const int32_t *tokens, const void *wte,
                           const void *wpe, int B, int T, int C, int lo, int rows);
void cpu_q_encoder_backward(gpt_stream *s, float *dwte, float *dwpe, const void *dout,
                            const int32_t *tokens, int B, int T, int C, int lo, int rows);
void cpu_q_layernorm_forward(gpt_stream *s, void *out, float *mean, float *rstd,
                             const void *inp, const void *w, const void *b, int N, int C);
void cpu_q_layernorm_backward(gpt_stream *s, void *dinp, float *dw, float *db,
                              const void *dout, const void *inp, const void *w,
                              const float *mean, const float *rstd, int N, int C,
                              gpt_grad_write gw);
void cpu_q_matmul_forward(gpt_stream *s, void *out, const void *inp, const void *w,
                          const void *bias, int N, int C, int OC);
void cpu_q_matmul_forward_residual(gpt_stream *s, void *out, const void *inp, const void *w,
                                   const void *bias, const void *res, int N, int C, int OC);
void cpu_q_matmul_forward_gelu(gpt_stream *s, void *out, void *pre, const void *inp,
                               const void *w, const void *bias, int N, int C, int OC);
void cpu_q_matmul_backward_gelu(gpt_stream *s, void *dinp, float *dw, float *dbias,
                                const void *dout, const void *inp, const void *w,
                                const void *pre, int N, int C, int OC, gpt_grad_write gw);
void cpu_q_matmul_backward(gpt_stream *s, void *dinp, float *dw, float *dbias,
                           const void *dout, const void *inp, const void *w, int N, int C,
                           int OC, gpt_grad_write gw);
void cpu_q_attention_forward(gpt_stream *s, void *out, float *lse, const void *qkv, int B,
                             int T, int C, int NH);
void cpu_q_attention_backward(gpt_stream *s, void *dqkv, float *delta, const void *dout,
                              const void *qkv, const void *out, const float *lse, int B,
                              int T, int C, int NH);
void cpu_q_gelu_forward(gpt_stream *s, void *out, const void *inp, size_t n);
void cpu_q_gelu_backward(gpt_stream *s, void *dinp, const void *inp, const void *dout,
                         size_t n);
void cpu_q_residual_layernorm_forward(gpt_stream *s, void *res, void *out, float *mean,
                                      float *rstd, const void *a, const void *res_b,
                                      const void *w, const void *b, int N, int C);
void cpu_q_add_f32(gpt_stream *s, float *out, const float *a, const float *b, size_t n);
void cpu_q_residual_forward(gpt_stream *s, void *out, const void *a, const void *b,
                            size_t n);
void cpu_q_residual_backward(gpt_stream *s, void *da, void *db, const void *dout, size_t n);
void cpu_q_crossentropy_forward_backward(gpt_stream *s, float *losses, void *logits,
                                         const int32_t *targets, float dloss, int N, int V,
                                         int Vp);
void cpu_q_crossentropy_stats(gpt_stream *s, float *stats, const void *logits, const int32_t *targets,
                              int N, int V, int Vp, int lo);
void cpu_q_crossentropy_parallel(gpt_stream *s, float *losses, void *logits, const int32_t *targets,
                                 const float *stats, int parts, float dloss, int N, int V, int Vp,
                                 int lo);
void cpu_q_adamw_update(gpt_stream *s, float *param, void *param_act, const float *grad,
                        float *m, float *v, size_t n, float lr, float beta1, float beta2,
                        float eps, float weight_decay, int t, float grad_scale,
                        const gpt_checksum_acc *acc);
void cpu_q_norm_squared(gpt_stream *s, float *out, const float *x, size_t n);
void cpu_q_checksum_chunks(gpt_stream *s, uint64_t *sums, const gpt_float_span *parts, int nparts,
                           size_t chunk_floats);
void cpu_q_checksum_fold(gpt_stream *s, uint64_t *sums, size_t total, size_t chunk_floats);
void cpu_q_params_to_act(gpt_stream *s, void *dst, const float *src, size_t n);
void cpu_q_act_to_f32(gpt_stream *s, float *dst, const void *src, size_t n);

#endif
