/*
 * cpu_ops.c — the small ops: encoder, layernorm, GELU, residual, cross-entropy, AdamW,
 * and the squared norm used for gradient clipping.
 *
 * Each forward/backward pair is written the plain way, one output element at a time.
 * Where a backward sums over rows into a parameter gradient (encoder, layernorm), the
 * loop is turned around: threads own blocks of columns and walk the rows in order, so
 * every sum has one owner and a fixed order (see cpu_ops.h on determinism).
 */
#include <assert.h>
#include <math.h>
#include <omp.h>
#include <stddef.h>
#include <string.h>

#include "cpu_ops.h"
#include "../checksum_element.h"
#include "../adamw_element.h"
#include "../crossentropy_combine.h"

/* Column block owned by one thread in the column-parallel reductions below: 64 floats
 * are 4 cache lines, wide enough for the inner loop to vectorise. */
#define COL_BLOCK 64

static inline int imin(int a, int b) { return a < b ? a : b; }

/* ---- encoder ---------------------------------------------------------------------------- */

/* out (B,T,C) = wte[tokens[b,t] - lo] + wpe[t];  wte (rows,C), wpe (>=T,C).  A token outside
 * [lo, lo + rows) and a NULL wpe add 0 (gpt.h's vocabulary-parallel form); lo 0 and rows past
 * every token is the whole embedding. */
void cpu_encoder_forward(gpt_stream *s, float *out, const int32_t *tokens, const float *wte,
                         const float *wpe, int B, int T, int C, int lo, int nrows)
{
    const int nt = cpu_nthreads(s);
#pragma omp parallel for collapse(2) schedule(static) num_threads(nt)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            const ptrdiff_t n = (ptrdiff_t)b * T + t;
            const int32_t tok = tokens[n];
            assert(tok >= 0 && "token ids are validated by the caller");
            const int held = tok >= lo && tok - lo < nrows;
            const float *wte_row = wte + (ptrdiff_t)(held ? tok - lo : 0) * C;
            const float *wpe_row = wpe ? wpe + (ptrdiff_t)t * C : NULL;
            float *o = out + n * C;
            for (int c = 0; c < C; c++)
                o[c] = (held ? wte_row[c] : 0.0f) + (wpe_row ? wpe_row[c] : 0.0f);
        }
    }
}

/* dwte[tokens[b,t] - lo] += dout[b,t] for the tokens of [lo, lo + rows);  dwpe[t] += dout[b,t]
 * unless dwpe is NULL (both accumulate).
 * A token may occur many times in the batch, so rows of dwte cannot be split between
 * threads by token position; instead each thread owns a block of channels of every row
 * and adds the occurrences in order of (b,t). */
void cpu_encoder_backward(gpt_stream *s, float *dwte, float *dwpe, const float *dout,
                          const int32_t *tokens, int B, int T, int C, int lo, int nrows)
{
    const int nt = cpu_nthreads(s);
    const int nblocks = (C + COL_BLOCK - 1) / COL_BLOCK;

#pragma omp parallel for schedule(static) num_threads(nt)
    for (int cb = 0; cb < nblocks; cb++) {
        const int c0 = cb * COL_BLOCK, c1 = imin(c0 + COL_BLOCK, C);
        for (ptrdiff_t n = 0; n < (ptrdiff_t)B * T; n++) {
            const int32_t tok = tokens[n];
            assert(tok >= 0 && "token ids are validated by the caller");
            if (tok < lo || tok - lo >= nrows) continue;
            float *dwte_row = dwte + (ptrdiff_t)(tok - lo) * C;
            const float *d = dout + n * C;
            for (int c = c0; c < c1; c++)
                dwte_row[c] += d[c];
        }
    }
    if (dwpe == NULL) return;

    /* Position t collects its B occurrences: rows of dwpe are independent. */
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int t = 0; t < T; t++) {
        float *dwpe_row = dwpe + (ptrdiff_t)t * C;
        for (int b = 0; b < B; b++) {
            const float *d = dout + ((ptrdiff_t)b * T + t) * C;
            for (int c = 0; c < C; c++)
                dwpe_row[c] += d[c];
        }
    }
}

/* ---- layernorm ------------------------------------------------------------------------- */

#define LN_EPS 1e-5f

/* out (N,C) = (inp - mean) * rstd * w + b per row; mean, rstd (N) saved for backward.
 * var is the biased variance (divide by C), rstd = 1/sqrt(var + 1e-5). */
void cpu_layernorm_forward(gpt_stream *s, float *out, float *mean, float *rstd,
                           const float *inp, const float *w, const float *b, int N, int C)
{
    const int nt = cpu_nthreads(s);
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (ptrdiff_t)n * C;
        float m = 0.0f;
        for (int c = 0; c < C; c++)
            m += x[c];
        m /= (float)C;
        /* two passes (mean, then squared deviations): no cancellation in the variance */
        float v = 0.0f;
        for (int c = 0; c < C; c++) {
            const float d = x[c] - m;
            v += d * d;
        }
        v /= (float)C;
        const float r = 1.0f / sqrtf(v + LN_EPS);

        float *o = out + (ptrdiff_t)n * C;
        for (int c = 0; c < C; c++) {
            const float norm = (x[c] - m) * r;
            o[c] = norm * w[c] + b[c];
        }
        mean[n] = m;
        rstd[n] = r;
    }
}

/*
 * dinp (N,C) += , dw (C) += , db (C) += , from dout (N,C) and the forward's mean, rstd.
 * With norm = (x - mean) * rstd and dnorm = w * dout, per row:
 *   dinp = rstd * (dnorm - mean_c(dnorm) - norm * mean_c(dnorm * norm))
 *   dw  += sum_n dout * norm,   db += sum_n dout.
 */
void cpu_layernorm_backward(gpt_stream *s, float *dinp, float *dw, float *db,
                            const float *dout, const float *inp, const float *w,
                            const float *mean, const float *rstd, int N, int C)
{
    const int nt = cpu_nthreads(s);

    /* rows: dinp */
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (ptrdiff_t)n * C;
        const float *d = dout + (ptrdiff_t)n * C;
        const float m = mean[n], r = rstd[n];

        float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
        for (int c = 0; c < C; c++) {
            const float norm = (x[c] - m) * r;
            const float dnorm = w[c] * d[c];
            dnorm_mean += dnorm;
            dnorm_norm_mean += dnorm * norm;
        }
        dnorm_mean /= (float)C;
        dnorm_norm_mean /= (float)C;

        float *di = dinp + (ptrdiff_t)n * C;
        for (int c = 0; c < C; c++) {
            const float norm = (x[c] - m) * r;
            const float dnorm = w[c] * d[c];
            di[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * r;
        }
    }

    /* columns: dw, db.  Each thread owns a block of channels and walks all rows in order;
     * the step's sums are formed from zero and then added to the old gradient. */
    const int nblocks = (C + COL_BLOCK - 1) / COL_BLOCK;
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int cb = 0; cb < nblocks; cb++) {
        const int c0 = cb * COL_BLOCK, width = imin(COL_BLOCK, C - c0);
        float dw_sum[COL_BLOCK] = {0}, db_sum[COL_BLOCK] = {0};
        for (int n = 0; n < N; n++) {
            const float *x = inp + (ptrdiff_t)n * C + c0;
            const float *d = dout + (ptrdiff_t)n * C + c0;
            const float m = mean[n], r = rstd[n];
            for (int j = 0; j < width; j++) {
                const float norm = (x[j] - m) * r;
                dw_sum[j] += d[j] * norm;
                db_sum[j] += d[j];
            }
        }
        for (int j = 0; j < width; j++) {
            dw[c0 + j] += dw_sum[j];
            db[c0 + j] += db_sum[j];
        }
    }
}

/* ---- GELU (tanh approximation) ----------------------------------------------------------- */

#define GELU_K 0.044715f
#define GELU_SQRT_2_OVER_PI 0.7978845608028654f /* sqrt(2/pi) */

/* out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
void cpu_gelu_forward(gpt_stream *s, float *out, const float *inp, size_t n)
{
    const int nt = cpu_nthreads(s);
    const float sqrt_2_over_pi = GELU_SQRT_2_OVER_PI;
#pragma omp parallel for schedule(static) num_threads(nt)
    for (size_t i = 0; i < n; i++) {
        const float x = inp[i];
        const float u = sqrt_2_over_pi * (x + GELU_K * x * x * x);
        out[i] = 0.5f * x * (1.0f + tanhf(u));
    }
}

/* dinp = gelu'(inp) * dout, overwritten; dinp may alias dout (each element is read before
 * it is written, by the same iteration).
 *   gelu'(x) = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2) */
void cpu_gelu_backward(gpt_stream *s, float *dinp, const float *inp, const float *dout,
                       size_t n)
{
    const int nt = cpu_nthreads(s);
    const float sqrt_2_over_pi = GELU_SQRT_2_OVER_PI;
#pragma omp parallel for schedule(static) num_threads(nt)
    for (size_t i = 0; i < n; i++) {
        const float x = inp[i];
        const float u = sqrt_2_over_pi * (x + GELU_K * x * x * x);
        const float th = tanhf(u);
        /* sech^2 u as 1 - tanh^2 u: no cosh, which overflows for large |u| */
        const float sech2 = 1.0f - th * th;
        const float local_grad = 0.5f * (1.0f + th) +
                                 0.5f * x * sech2 * sqrt_2_over_pi * (1.0f + 3.0f * GELU_K * x * x);
        dinp[i] = local_grad * dout[i];
    }
}

/* ---- residual ------------------------------------------------------------------------------ */

/* out = a + b */
void cpu_residual_forward(gpt_stream *s, float *out, const float *a, const float *b,
                          size_t n)
{
    const int nt = cpu_nthreads(s);
#pragma omp parallel for schedule(static) num_threads(nt)
    for (size_t i = 0; i < n; i++)
        out[i] = a[i] + b[i];
}

/* da += dout, db += dout */
void cpu_residual_backward(gpt_stream *s, float *da, float *db, const float *dout, size_t n)
{
    const int nt = cpu_nthreads(s);
#pragma omp parallel for schedule(static) num_threads(nt)
    for (size_t i = 0; i < n; i++) {
        da[i] += dout[i];
        db[i] += dout[i];
    }
}

/* ---- cross-entropy --------------------------------------------------------------------------- */

/* The max of the first V logits of a row, and sum_v exp(logit_v - max).  The sum is
 * accumulated in double: it runs over the whole vocabulary (50k terms for GPT-2), where
 * a float sum would lose ~1e-5 of relative accuracy to rounding. */
static void softmax_stats(const float *row, int V, float *maxval, double *sum)
{
    float m = -INFINITY;
    for (int v = 0; v < V; v++)
        if (row[v] > m)
            m = row[v];
    double s = 0.0;
    for (int v = 0; v < V; v++)
        s += (double)expf(row[v] - m);
    *maxval = m;
    *sum = s;
}

/* losses (N) = -log softmax(logits[n, 0..V-1])[targets[n]]; then the row becomes its
 * gradient: logits (N,Vp) = dloss * (softmax - onehot(target)) over the first V columns, 0 in
 * the padded columns V..Vp-1.  One row at a time: its max and sum are taken first, the loss
 * next (it reads the target's logit), and only then is the row overwritten. */
void cpu_crossentropy_forward_backward(gpt_stream *s, float *losses, float *logits,
                                       const int32_t *targets, float dloss, int N, int V, int Vp)
{
    const int nt = cpu_nthreads(s);
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int n = 0; n < N; n++) {
        float *row = logits + (ptrdiff_t)n * Vp;
        const int32_t target = targets[n];
        assert(target >= 0 && target < V && "target out of range: a caller bug");
        float maxval;
        double sum;
        softmax_stats(row, V, &maxval, &sum);
        /* -log(exp(x_t - max) / sum) = log(sum) - (x_t - max), without forming the
         * probability (which may underflow to 0) */
        losses[n] = (float)(log(sum) - (double)(row[target] - maxval));
        const float inv_sum = (float)(1.0 / sum);
        for (int v = 0; v < V; v++) {
            const float p = expf(row[v] - maxval) * inv_sum;
            const float indicator = v == target ? 1.0f : 0.0f;
            row[v] = dloss * (p - indicator);
        }
        for (int v = V; v < Vp; v++)
            row[v] = 0.0f;
    }
}

/* stats (N,3) of this rank's logits (N,Vp), its first V columns real, column 0 being vocabulary
 * id lo (gpt.h): the max, the sum of exp(logit - max) (in double, stored fp32), the target's
 * logit where this rank has it, else 0. */
void cpu_crossentropy_stats(gpt_stream *s, float *stats, const float *logits,
                            const int32_t *targets, int N, int V, int Vp, int lo)
{
    const int nt = cpu_nthreads(s);
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int n = 0; n < N; n++) {
        const float *row = logits + (ptrdiff_t)n * Vp;
        float maxval;
        double sum;
        softmax_stats(row, V, &maxval, &sum);
        const int32_t local = targets[n] - lo;
        stats[3 * n] = maxval;
        stats[3 * n + 1] = (float)sum;
        stats[3 * n + 2] = local >= 0 && local < V ? row[local] : 0.0f;
    }
}

/* The whole rows' max, sum and target logit from every rank's stats (parts of them, in rank
 * order: every rank combines the same numbers the same way), then the losses and this rank's
 * columns of the gradient (gpt.h). */
void cpu_crossentropy_parallel(gpt_stream *s, float *losses, float *logits,
                               const int32_t *targets, const float *stats, int parts,
                               float dloss, int N, int V, int Vp, int lo)
{
    const int nt = cpu_nthreads(s);
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int n = 0; n < N; n++) {
        float maxval, inv_sum;
        losses[n] = gpt_ce_combine_row(stats, parts, N, n, &maxval, &inv_sum);
        float *row = logits + (ptrdiff_t)n * Vp;
        const int32_t local = targets[n] - lo;
        for (int v = 0; v < V; v++) {
            const float p = expf(row[v] - maxval) * inv_sum;
            row[v] = dloss * (p - (v == local ? 1.0f : 0.0f));
        }
        for (int v = V; v < Vp; v++)
            row[v] = 0.0f;
    }
}

/* ---- AdamW ---------------------------------------------------------------------------------- */

/* One AdamW step (t >= 1) on n elements, exactly the formula in gpt.h:
 *   g = grad * grad_scale;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
 *   param -= lr * ( (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + weight_decay * param ) */
/* One stream of words (param, m or v) a thread adds to the raw chunk sums: the chunk being
 * summed and its sum so far, added to sums[] when the words cross into the next chunk. */
typedef struct sum_run {
    size_t chunk, next; /* chunk index; the word where the next one starts */
    uint64_t acc;
} sum_run;

static void sum_run_add(sum_run *r, uint64_t *sums, size_t chunk_floats, size_t word, float value)
{
    if (word >= r->next) { /* (next 0: the run's first word) */
        if (r->acc) {
#pragma omp atomic
            sums[r->chunk] += r->acc;
        }
        r->chunk = word / chunk_floats;
        r->next = (r->chunk + 1) * chunk_floats;
        r->acc = 0;
    }
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    r->acc += gpt_checksum_term(bits, word - r->chunk * chunk_floats);
}

void cpu_adamw_update(gpt_stream *s, float *param, const float *grad, float *m, float *v,
                      size_t n, float lr, float beta1, float beta2, float eps,
                      float weight_decay, int t, float grad_scale, const gpt_checksum_acc *acc)
{
    const int nt = cpu_nthreads(s);
    const float bias_corr1 = 1.0f - powf(beta1, (float)t);
    const float bias_corr2 = 1.0f - powf(beta2, (float)t);
    /* acc: the checksum terms of the words written, in the same pass; each thread takes a
     * contiguous range, its three runs of words added to their chunks' sums as they end
     * (integer sums: the order they arrive in does not change the bits) */
#pragma omp parallel num_threads(nt)
    {
        const size_t nth = (size_t)omp_get_num_threads(), me = (size_t)omp_get_thread_num();
        const size_t lo = n * me / nth, hi = n * (me + 1) / nth;
        sum_run run[3];
        memset(run, 0, sizeof run);
        for (size_t i = lo; i < hi; i++) {
            gpt_adamw_element(&param[i], grad[i], &m[i], &v[i], lr, beta1, beta2, eps, weight_decay,
                              bias_corr1, bias_corr2, grad_scale);
            if (!acc) continue;
            sum_run_add(&run[0], acc->sums, acc->chunk_floats, acc->first[0] + i, param[i]);
            sum_run_add(&run[1], acc->sums, acc->chunk_floats, acc->first[1] + i, m[i]);
            sum_run_add(&run[2], acc->sums, acc->chunk_floats, acc->first[2] + i, v[i]);
        }
        for (int k = 0; acc && k < 3; k++)
            if (run[k].acc) {
#pragma omp atomic
                acc->sums[run[k].chunk] += run[k].acc;
            }
    }
}

void cpu_checksum_fold(gpt_stream *s, uint64_t *sums, size_t total, size_t chunk_floats)
{
    (void)s;
    const size_t nchunks = (total + chunk_floats - 1) / chunk_floats;
    for (size_t c = 0; c < nchunks; c++) {
        const size_t n = total - c * chunk_floats < chunk_floats ? total - c * chunk_floats : chunk_floats;
        sums[c] = gpt_checksum_fold(sums[c], n);
    }
}

/* ---- squared L2 norm -------------------------------------------------------------------------- */

/* The input is cut into NORM_CHUNKS chunks whose boundaries depend only on n; each chunk
 * is summed by one thread into NORM_LANES interleaved double accumulators (lane j takes
 * the elements j, j+LANES, ... of the chunk: independent sums, so the loop vectorises
 * without reassociation), and the lanes, then the chunks, are added in order. */
#define NORM_CHUNKS 64
#define NORM_LANES 8

/* *out = sum_i x[i]^2, accumulated in double, stored as float. */
void cpu_norm_squared(gpt_stream *s, float *out, const float *x, size_t n)
{
    const int nt = cpu_nthreads(s);
    const size_t chunk = (n + NORM_CHUNKS - 1) / NORM_CHUNKS;
    double partial[NORM_CHUNKS];

#pragma omp parallel for schedule(static) num_threads(nt)
    for (int ci = 0; ci < NORM_CHUNKS; ci++) {
        const size_t start = (size_t)ci * chunk;
        const size_t end = start + chunk < n ? start + chunk : n;
        double lane[NORM_LANES] = {0};
        size_t i = start;
        for (; i + NORM_LANES <= end; i += NORM_LANES)
            for (int j = 0; j < NORM_LANES; j++)
                lane[j] += (double)x[i + j] * (double)x[i + j];
        for (int j = 0; i < end; i++, j++) /* the chunk's tail, lane by lane */
            lane[j] += (double)x[i] * (double)x[i];
        double sum = 0.0;
        for (int j = 0; j < NORM_LANES; j++)
            sum += lane[j];
        partial[ci] = sum;
    }

    double total = 0.0;
    for (int ci = 0; ci < NORM_CHUNKS; ci++)
        total += partial[ci];
    *out = (float)total;
}

/* ---- checkpoint checksums ------------------------------------------------------------------ */

/* Chunks in parallel, each a sum of its words' terms (checksum_element.h): the same values as
 * the GPU's, whatever the order. */
void cpu_checksum_chunks(gpt_stream *s, uint64_t *sums, const gpt_float_span *parts, int nparts,
                         size_t chunk_floats)
{
    size_t total = 0;
    for (int k = 0; k < nparts; k++) total += parts[k].n;
    const ptrdiff_t nchunks = (ptrdiff_t)((total + chunk_floats - 1) / chunk_floats);
    const int nt = cpu_nthreads(s);
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
    for (ptrdiff_t c = 0; c < nchunks; c++) {
        const size_t first = (size_t)c * chunk_floats;
        const size_t n = total - first < chunk_floats ? total - first : chunk_floats;
        /* the parts' pieces inside [first, first + n), each at its index in the chunk */
        uint64_t sum = 0;
        size_t base = 0;
        for (int k = 0; k < nparts; k++) {
            const size_t end = base + parts[k].n;
            const size_t lo = first > base ? first : base, hi = first + n < end ? first + n : end;
            if (lo < hi)
                sum += gpt_checksum_sum((const uint32_t *)(const void *)parts[k].p + (lo - base), hi - lo, lo - first);
            base = end;
        }
        sums[c] = gpt_checksum_fold(sum, n);
    }
}
