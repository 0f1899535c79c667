/*
 * crossentropy_combine.h — the vocabulary-parallel cross-entropy's combining of every rank's
 * row stats (gpt.h: gpt_crossentropy_parallel), shared by the CPU and CUDA backends so that it
 * exists once and both combine in the same order: the max over the ranks, the target logit
 * summed in rank order, then the softmax denominator sum_r s_r exp(m_r - M) in double.
 */
#ifndef AEBENCH_CROSSENTROPY_COMBINE_H
#define AEBENCH_CROSSENTROPY_COMBINE_H

#include <math.h>
#include <stddef.h>

#ifdef __CUDACC__
#define GPT_CE_HOST_DEVICE __host__ __device__
#else
#define GPT_CE_HOST_DEVICE
#endif

/* Row n of N: stats (parts, N, 3) = per rank (max, sum of exp(logit - max), target logit or 0).
 * The row's loss; *maxval and *inv_sum for its gradient, dloss (exp(logit - max) inv_sum -
 * onehot).  A rank with no real columns (max -inf, sum 0) adds nothing. */
static inline GPT_CE_HOST_DEVICE float gpt_ce_combine_row(const float *stats, int parts, int N, int n, float *maxval,
                                                         float *inv_sum)
{
    float m = -INFINITY, target_logit = 0.0f;
    for (int r = 0; r < parts; r++) {
        const float *st = stats + ((size_t)r * N + n) * 3;
        if (st[0] > m) m = st[0];
        target_logit += st[2];
    }
    double sum = 0.0;
    for (int r = 0; r < parts; r++) {
        const float *st = stats + ((size_t)r * N + n) * 3;
        if (st[1] > 0.0f) sum += (double)st[1] * exp((double)st[0] - (double)m);
    }
    *maxval = m;
    *inv_sum = (float)(1.0 / sum);
    return (float)(log(sum) - (double)(target_logit - m));
}

#endif
