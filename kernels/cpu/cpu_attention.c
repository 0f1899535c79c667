/*
 * cpu_attention.c — causal multi-head self-attention, forward and backward.
 *
 * Layout: the row of token (b,t) in qkv (B,T,3C) is [ q (C) | k (C) | v (C) ]; head h
 * owns columns h*hs .. (h+1)*hs-1 of each of the three, hs = C/NH.  att (B,NH,T,T) holds,
 * for each (b,h), the T x T matrix of softmax probabilities: row t is query t, column t2
 * key t2, and entries with t2 > t (the future) are 0.
 *
 * Plain loops, O(B * NH * T^2 * hs).  Every output is owned by one thread and each of its
 * sums runs over t2 (or t) in increasing order, so the results do not depend on the
 * number of threads.
 */
#include <math.h>
#include <stddef.h>

#include "cpu_ops.h"

/*
 * out (B,T,C), att (B,NH,T,T) from qkv (B,T,3C):
 *   att[b,h,t,t2] = softmax over t2 <= t of (q[b,t,h] . k[b,t2,h]) / sqrt(hs)
 *   out[b,t,h]    = sum_{t2 <= t} att[b,h,t,t2] v[b,t2,h]
 */
void cpu_attention_forward(gpt_stream *s, float *out, float *att, const float *qkv, int B,
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
                float *att_row = att + (((ptrdiff_t)b * NH + h) * T + t) * T;

                /* scores q.k * scale for the visible keys, and their max (for a softmax
                 * that cannot overflow) */
                float maxval = -INFINITY;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *k =
                        qkv + ((ptrdiff_t)b * T + t2) * C3 + C + (ptrdiff_t)h * hs;
                    float dot = 0.0f;
                    for (int i = 0; i < hs; i++)
                        dot += q[i] * k[i];
                    dot *= scale;
                    att_row[t2] = dot;
                    if (dot > maxval)
                        maxval = dot;
                }

                /* softmax over t2 <= t; the future gets probability 0 */
                float sum = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float e = expf(att_row[t2] - maxval);
                    att_row[t2] = e;
                    sum += e;
                }
                const float inv_sum = 1.0f / sum; /* sum >= 1: the max term is exp(0) */
                for (int t2 = 0; t2 <= t; t2++)
                    att_row[t2] *= inv_sum;
                for (int t2 = t + 1; t2 < T; t2++)
                    att_row[t2] = 0.0f;

                /* weighted sum of the values */
                float *o = out + ((ptrdiff_t)b * T + t) * C + (ptrdiff_t)h * hs;
                for (int i = 0; i < hs; i++)
                    o[i] = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *v =
                        qkv + ((ptrdiff_t)b * T + t2) * C3 + 2 * (ptrdiff_t)C + (ptrdiff_t)h * hs;
                    const float a = att_row[t2];
                    for (int i = 0; i < hs; i++)
                        o[i] += a * v[i];
                }
            }
        }
    }
}

/*
 * dqkv (B,T,3C) overwritten, from dout (B,T,C), qkv and the forward's att.  datt
 * (B,NH,T,T) is scratch.  With P = att, S the scaled scores, dO = dout:
 *
 *   dP[t][t2] = dO[t] . v[t2]                                  (t2 <= t)
 *   dS[t][t2] = P[t][t2] (dP[t][t2] - sum_j P[t][j] dP[t][j])  (softmax backward)
 *   dq[t]  = scale sum_{t2 <= t} dS[t][t2] k[t2]
 *   dk[t2] = scale sum_{t >= t2} dS[t][t2] q[t]
 *   dv[t2] =       sum_{t >= t2} P[t][t2]  dO[t]
 *
 * Only P is needed (not the pre-softmax scores).  dq is a sum along a row of dS, dk and
 * dv along a column, so the work is done in two passes, each parallel over independent
 * outputs: pass 1 (per query row t) forms scale*dS into datt and dq; pass 2 (per key t2)
 * forms dk and dv.
 */
void cpu_attention_backward(gpt_stream *s, float *dqkv, float *datt, const float *dout,
                            const float *qkv, const float *att, int B, int T, int C, int NH)
{
    const int nt = cpu_nthreads(s);
    const int hs = C / NH;
    const ptrdiff_t C3 = 3 * (ptrdiff_t)C;
    const float scale = 1.0f / sqrtf((float)hs);

    /* pass 1: rows.  datt[b,h,t,t2] := scale * dS[t][t2] for t2 <= t;  dq[b,t,h]. */
#pragma omp parallel for collapse(3) schedule(static) num_threads(nt)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            for (int h = 0; h < NH; h++) {
                const ptrdiff_t row = (((ptrdiff_t)b * NH + h) * T + t) * T;
                const float *att_row = att + row;
                float *datt_row = datt + row;
                const float *dO = dout + ((ptrdiff_t)b * T + t) * C + (ptrdiff_t)h * hs;

                /* dP and sum_j P dP */
                float pdp = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *v =
                        qkv + ((ptrdiff_t)b * T + t2) * C3 + 2 * (ptrdiff_t)C + (ptrdiff_t)h * hs;
                    float dot = 0.0f;
                    for (int i = 0; i < hs; i++)
                        dot += dO[i] * v[i];
                    datt_row[t2] = dot;
                    pdp += att_row[t2] * dot;
                }
                /* softmax backward, with the 1/sqrt(hs) of the scores folded in */
                for (int t2 = 0; t2 <= t; t2++)
                    datt_row[t2] = scale * (att_row[t2] * (datt_row[t2] - pdp));

                /* dq[t] = sum_{t2 <= t} dS[t][t2] k[t2] */
                float *dq = dqkv + ((ptrdiff_t)b * T + t) * C3 + (ptrdiff_t)h * hs;
                for (int i = 0; i < hs; i++)
                    dq[i] = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *k =
                        qkv + ((ptrdiff_t)b * T + t2) * C3 + C + (ptrdiff_t)h * hs;
                    const float d = datt_row[t2];
                    for (int i = 0; i < hs; i++)
                        dq[i] += d * k[i];
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
                const ptrdiff_t bh = ((ptrdiff_t)b * NH + h) * T * T;
                float *dk = dqkv + ((ptrdiff_t)b * T + t2) * C3 + C + (ptrdiff_t)h * hs;
                float *dv = dk + C;
                for (int i = 0; i < hs; i++) {
                    dk[i] = 0.0f;
                    dv[i] = 0.0f;
                }
                for (int t = t2; t < T; t++) {
                    const float *q = qkv + ((ptrdiff_t)b * T + t) * C3 + (ptrdiff_t)h * hs;
                    const float *dO = dout + ((ptrdiff_t)b * T + t) * C + (ptrdiff_t)h * hs;
                    const float ds = datt[bh + (ptrdiff_t)t * T + t2];
                    const float p = att[bh + (ptrdiff_t)t * T + t2];
                    for (int i = 0; i < hs; i++) {
                        dk[i] += ds * q[i];
                        dv[i] += p * dO[i];
                    }
                }
            }
        }
    }
}
