/*
 * profile.h — where a step goes, op by op (--profile): a backend that is another backend
 * with an event pair recorded around every op and copy issued on its streams.
 *
 * gpt_profile_create wraps a backend: the engines get gpt_profile_backend()'s, which shares
 * the inner backend's state (impl, name, dtype) and has the inner op table behind timing
 * wrappers, so streams, events and memory made through it are the inner backend's own and
 * the ops compute exactly what they compute unwrapped (the wrapper only records events).
 * After each step, gpt_profile_step_end waits for the step's last recorded event and adds
 * each op's device time (CUDA events; on the CPU backend the stream worker's clock) to its
 * family's total.  The timing itself slows the step a little (two event records per op,
 * and the host waits at the step's end), so a profiled run's step time is not the
 * unprofiled one; the shares are what the table is for.
 *
 * Model FLOPs per call follow the model's count (gpt_model_flops): a linear layer's forward
 * 2 N C OC, its backward 4 N C OC; attention 4 B T^2 C forward and 8 B T^2 C backward (no
 * causal discount, as the MFU formula); so a family's TFLOP/s is comparable with the run's.
 */
#ifndef AEBENCH_PROFILE_H
#define AEBENCH_PROFILE_H

#include "gpt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum gpt_profile_op {
    PROF_ENCODER_FORWARD, PROF_ENCODER_BACKWARD, PROF_LAYERNORM_FORWARD, PROF_LAYERNORM_BACKWARD,
    PROF_MATMUL_FORWARD, PROF_MATMUL_BACKWARD, PROF_MATMUL_GELU_FORWARD, PROF_MATMUL_GELU_BACKWARD,
    PROF_MATMUL_RESIDUAL_FORWARD,
    PROF_ATTENTION_FORWARD, PROF_ATTENTION_BACKWARD, PROF_GELU_FORWARD, PROF_GELU_BACKWARD,
    PROF_RESIDUAL_FORWARD, PROF_RESIDUAL_BACKWARD, PROF_RESIDUAL_LAYERNORM_FORWARD, PROF_CROSSENTROPY,
    PROF_ADAMW, PROF_NORM_SQUARED, PROF_PARAMS_TO_ACT, PROF_CHECKSUM, PROF_ADD_F32,
    PROF_COPY_H2D, PROF_COPY_D2H, PROF_COPY_D2D, PROF_MEMSET,
    PROF_OPS
} gpt_profile_op;

/* One family's totals over the profiled steps. */
typedef struct gpt_profile_family {
    const char *name;   /* e.g. "matmul_forward", "copy_h2d" */
    long long calls;
    double ms;          /* device time, summed over its calls */
    double flops;       /* model FLOPs of its calls (0: not a FLOP op) */
    double bytes;       /* bytes moved (copies, memset; 0 for the others) */
} gpt_profile_family;

/* One stream's totals over the profiled steps: its ops, their time, and the span from its
 * first op's start to its last op's end in each step; span - busy is the stream's gaps (no
 * op of it running: launch overhead, waits on other streams or the host). */
typedef struct gpt_profile_stream {
    long long ops;
    double busy_ms, span_ms;
} gpt_profile_stream;
enum { PROFILE_MAX_STREAMS = 16 };

typedef struct gpt_profile gpt_profile;

/* A profiler around inner (which must outlive it); 0 or a negative gpt_status. */
int gpt_profile_create(gpt_profile **out, const gpt_backend *inner);
/* The backend to give the engines in inner's place. */
gpt_backend *gpt_profile_backend(gpt_profile *p);
/* The step is over: wait for what it recorded and add it up (counted: the steps after the
 * first, which carries one-time costs; with one step, that one).  0 or a gpt_status. */
int gpt_profile_step_end(gpt_profile *p);
/* Steps counted, and family f's totals over them. */
int gpt_profile_steps(const gpt_profile *p);
void gpt_profile_family_of(const gpt_profile *p, gpt_profile_op f, gpt_profile_family *out);
/* Streams seen (in the order of their first op; at most PROFILE_MAX_STREAMS), and stream k's
 * totals. */
int gpt_profile_nstreams(const gpt_profile *p);
void gpt_profile_stream_of(const gpt_profile *p, int k, gpt_profile_stream *out);
/* Ops issued that could not be timed (no event could be made): 0 in a whole profile. */
long long gpt_profile_untimed(const gpt_profile *p);
void gpt_profile_destroy(gpt_profile *p);

#ifdef __cplusplus
}
#endif
#endif
