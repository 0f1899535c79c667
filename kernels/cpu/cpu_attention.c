/*
 * cpu_attention.c — causal multi-head self-attention, forward and backward, without the
 * (T, T) matrix: the forward keeps one number per query row (the log-sum-exp of its
 * scaled scores) and the backward recomputes each probability from it, exactly as the
 * CUDA backend's fused kernels do.
 *
 * Layout: the row of token (b,t) in qkv (B,T,3C) is [ q (C) | k (C) | v (C) ]; head h
 * owns columns h*hs .. (h+1)*hs-1 of each of the three, hs = C/NH.  lse and delta are
 * (B,NH,T): entry (b,h,t) belongs to query t of head h.
 *
 * Plain loops, O(B * NH * T^2 * hs).  Every output is owned by one thread and each of its
 * sums runs over t2 (or t) in increasing order, so the results do not depend on the
 * number of threads.
 */
#include <math.h>
#include <stddef.h>

#include "cpu_ops.h"

static float dot(const float *a, const float *b, int n)
{
    float sum = 0.0f;
    for (int i = 0; i < n; i++)
        sum += a[i] * b[i];
    return sum;
}

/*
 * out (B,T,C), lse (B,NH,T) from qkv (B,T,3C), with s(t,t2) = q[t] . k[t2] / sqrt(hs):
 *   lse[b,h,t] = log sum_{t2 <= t} exp s(t,t2)
 *   out[b,t,h] = sum_{t2 <= t} exp(s(t,t2) - lse) v[t2]
 * One pass over the keys with a running max (online softmax): the partial sums are
 * rescaled whenever the max grows, so no score is stored.
 */
void cpu_attention_forward(gpt_stream *s, float *out, float *lse, const float *qkv, int B,
                           int T, int C, int NH)
{
    const int nt = cpu_nthreads(s);
    const int hs = C / NH;
    const ptrdiff_t C3 = 3 * (ptrdiff_t)C;
    const float scale = 1.0f / sqrtf((float)hs);

    /* One (b, t, h) = one query row: independent of every other. */
#pragma omp parallel for collapse(3) schedule(static) num_threads(nt)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            for (int h = 0; h < NH; h++) {
                const float *q = qkv + ((ptrdiff_t)b * T + t) * C3 + (ptrdiff_t)h * hs;
                float *o = out + ((ptrdiff_t)b * T + t) * C + (ptrdiff_t)h * hs;
                for (int i = 0; i < hs; i++)
                    o[i] = 0.0f;
                float maxval = -INFINITY, sum = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *k = qkv + ((ptrdiff_t)b * T + t2) * C3 + C + (ptrdiff_t)h * hs;
                    const float *v = k + C;
                    const float score = dot(q, k, hs) * scale;
                    if (score > maxval) {
                        /* exp(-inf) = 0 on the first key: nothing to rescale yet */
                        const float rescale = expf(maxval - score);
                        sum *= rescale;
                        for (int i = 0; i < hs; i++)
                            o[i] *= rescale;
                        maxval = score;
                    }
                    const float p = expf(score - maxval);
                    sum += p;
                    for (int i = 0; i < hs; i++)
                        o[i] += p * v[i];
                }
                const float inv_sum = 1.0f / sum; /* sum >= 1: the max term is exp(0) */
                for (int i = 0; i < hs; i++)
                    o[i] *= inv_sum;
                lse[((ptrdiff_t)b * NH + h) * T + t] = maxval + logf(sum);
            }
        }
    }
}

/*
 * dqkv (B,T,3C) overwritten, from dout (B,T,C), qkv, and the forward's out and lse; delta
 * (B,NH,T) is scratch.  With P[t][t2] = exp(s(t,t2) - lse[t]), dO = dout, O = out:
 *
 *   D[t]       = dO[t] . O[t]            (= sum_j P[t][j] dP[t][j], the softmax's term)
 *   dP[t][t2]  = dO[t] . v[t2]                                  (t2 <= t)
 *   dS[t][t2]  = P[t][t2] (dP[t][t2] - D[t])                    (softmax backward)
 *   dq[t]  = scale sum_{t2 <= t} dS[t][t2] k[t2]
 *   dk[t2] = scale sum_{t >= t2} dS[t][t2] q[t]
 *   dv[t2] =       sum_{t >= t2} P[t][t2]  dO[t]
 *
 * dq is a sum along a row, dk and dv along a column, so two passes, each parallel over
 * independent outputs: pass 1 (per query row) forms D into delta and dq; pass 2 (per key)
 * recomputes P and dS from lse and delta and forms dk and dv.
 */
void cpu_attention_backward(gpt_stream *s, float *dqkv, float *delta, const float *dout,
                            const float *qkv, const float *out, const float *lse, int B,
                            int T, int C, int NH)
{
    const int nt = cpu_nthreads(s);
    const int hs = C / NH;
    const ptrdiff_t C3 = 3 * (ptrdiff_t)C;
    const float scale = 1.0f / sqrtf((float)hs);

    /* pass 1: rows.  delta[b,h,t] := D[t];  dq[b,t,h]. */
#pragma omp parallel for collapse(3) schedule(static) num_threads(nt)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            for (int h = 0; h < NH; h++) {
                const ptrdiff_t row = ((ptrdiff_t)b * NH + h) * T + t;
                const ptrdiff_t tok = ((ptrdiff_t)b * T + t) * C + (ptrdiff_t)h * hs;
                const float *q = qkv + ((ptrdiff_t)b * T + t) * C3 + (ptrdiff_t)h * hs;
                const float *dO = dout + tok;
                const float D = dot(dO, out + tok, hs);
                delta[row] = D;

                float *dq = dqkv + ((ptrdiff_t)b * T + t) * C3 + (ptrdiff_t)h * hs;
                for (int i = 0; i < hs; i++)
                    dq[i] = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *k = qkv + ((ptrdiff_t)b * T + t2) * C3 + C + (ptrdiff_t)h * hs;
                    const float *v = k + C;
                    const float p = expf(dot(q, k, hs) * scale - lse[row]);
                    const float ds = scale * (p * (dot(dO, v, hs) - D));
                    for (int i = 0; i < hs; i++)
                        dq[i] += ds * k[i];
                }
            }
        }
    }

    /* pass 2: columns.  dk[b,t2,h] and dv[b,t2,h] sum over the queries t >= t2 that saw
     * key t2 (pass 1 has finished: the parallel loop above ends with a barrier). */
#pragma omp parallel for collapse(3) schedule(static) num_threads(nt)
    for (int b = 0; b < B; b++) {
        for (int t2 = 0; t2 < T; t2++) {
            for (int h = 0; h < NH; h++) {
                const float *k = qkv + ((ptrdiff_t)b * T + t2) * C3 + C + (ptrdiff_t)h * hs;
                const float *v = k + C;
                float *dk = dqkv + ((ptrdiff_t)b * T + t2) * C3 + C + (ptrdiff_t)h * hs;
                float *dv = dk + C;
                for (int i = 0; i < hs; i++) {
                    dk[i] = 0.0f;
                    dv[i] = 0.0f;
                }
                for (int t = t2; t < T; t++) {
                    const ptrdiff_t row = ((ptrdiff_t)b * NH + h) * T + t;
                    const float *q = qkv + ((ptrdiff_t)b * T + t) * C3 + (ptrdiff_t)h * hs;
                    const float *dO = dout + ((ptrdiff_t)b * T + t) * C + (ptrdiff_t)h * hs;
                    const float p = expf(dot(q, k, hs) * scale - lse[row]);
                    const float ds = scale * (p * (dot(dO, v, hs) - delta[row]));
                    for (int i = 0; i < hs; i++) {
                        dk[i] += ds * q[i];
                        dv[i] += p * dO[i];
                    }
                }
            }
        }
    }
}
