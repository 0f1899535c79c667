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

static inline GPT_HOST_DEVICE void gpt_adamw_element(float *param, float grad, float *m, float *v,
                                                     float lr, float beta1, float beta2, float eps,
                                                     float weight_decay, float bias_corr1,
                                                     float bias_corr2, float grad_scale)
{
    const float g = grad * grad_scale;
    const float mi = beta1 * *m + (1.0f - beta1) * g;
    const float vi = beta2 * *v + (1.0f - beta2) * g * g;
    const float m_hat = mi / bias_corr1;
    const float v_hat = vi / bias_corr2;
    *m = mi;
    *v = vi;
    *param -= lr * (m_hat / (sqrtf(v_hat) + eps) + weight_decay * *param);
}

#endif
