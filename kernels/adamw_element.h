/*
 * adamw_element.h — one element of the AdamW update, shared by every backend (C and CUDA),
 * so the formula exists once and the CPU and GPU updates round identically:
 *   g = grad * grad_scale;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
 *   param -= lr * ( (m / bias_corr1) / (sqrt(v / bias_corr2) + eps) + weight_decay * param )
 * with bias_corr1 = 1 - b1^t and bias_corr2 = 1 - b2^t computed once per call.
 */
#ifndef AEBENCH_ADAMW_ELEMENT_H
#define AEBENCH_ADAMW_ELEMENT_H

#include <math.h>

#ifdef __CUDACC__
#define GPT_HOST_DEVICE __host__ __device__
#else
#define GPT_HOST_DEVICE
#endif

/* Every operation rounded on its own, on both sides: nvcc contracts a * b + c into one fused
 * multiply-add by default (one rounding instead of two), and the host is built with
 * -ffp-contract=off, so a plain expression would round differently on the GPU and the CPU
 * Adam of the offloading engines would drift from megatron-lm's GPU Adam by an ulp per
 * step.  The _rn intrinsics are never contracted.  Division and sqrtf are IEEE-rounded on
 * both (nvcc's default -prec-div=true -prec-sqrt=true; no --use_fast_math). */
#ifdef __CUDA_ARCH__
#define ADAMW_MUL(a, b) __fmul_rn((a), (b))
#define ADAMW_ADD(a, b) __fadd_rn((a), (b))
#define ADAMW_SUB(a, b) __fsub_rn((a), (b))
#else
#define ADAMW_MUL(a, b) ((a) * (b))
#define ADAMW_ADD(a, b) ((a) + (b))
#define ADAMW_SUB(a, b) ((a) - (b))
#endif

static inline GPT_HOST_DEVICE void gpt_adamw_element(float *param, float grad, float *m, float *v,
                                                     float lr, float beta1, float beta2, float eps,
                                                     float weight_decay, float bias_corr1,
                                                     float bias_corr2, float grad_scale)
{
    const float g = ADAMW_MUL(grad, grad_scale);
    const float mi = ADAMW_ADD(ADAMW_MUL(beta1, *m), ADAMW_MUL(ADAMW_SUB(1.0f, beta1), g));
    const float vi =
        ADAMW_ADD(ADAMW_MUL(beta2, *v), ADAMW_MUL(ADAMW_MUL(ADAMW_SUB(1.0f, beta2), g), g));
    const float m_hat = mi / bias_corr1;
    const float v_hat = vi / bias_corr2;
    *m = mi;
    *v = vi;
    const float update =
        ADAMW_ADD(m_hat / ADAMW_ADD(sqrtf(v_hat), eps), ADAMW_MUL(weight_decay, *param));
    *param = ADAMW_SUB(*param, ADAMW_MUL(lr, update));
}

#endif
