/*
 * test_ops.c — unit tests of the CPU reference backend's ops (kernels/cpu), with cmocka.
 *
 * For every op:
 *   - an independent double-precision reference forward, written here with plain loops;
 *   - the float forward is checked against it;
 *   - every gradient a backward produces is checked against central finite differences,
 *     in double, of the reference forward under the scalar objective L = sum(out * R) for
 *     a fixed random R (so the backward is called with dout = R);
 *   - the accumulate/overwrite semantics stated in gpt.h are checked: accumulating
 *     gradients are pre-filled and must be added to; overwritten outputs are pre-filled
 *     with NaN and must come out bit-identical to a run on zeroed buffers.
 * Plus: bit-identical results with 1 and 3 threads, AdamW against the formula in double,
 * norm_squared against a double sum, cross-entropy backward in place, and the backend's
 * memory and stream primitives.
 *
 * The error measure is normwise: max_i |got_i - ref_i| / max_i |ref_i|.  Each check
 * prints one line ("gradcheck <op> <which> max_rel_err=<value>") so the figures can be
 * quoted.
 *
 * Build (from the repository root): gcc -std=c11 -O3 -march=native -fopenmp -Wall -Wextra
 *     -Ikernels kernels/cpu/cpu_*.c tests/test_ops.c -lcmocka -lm -o test_ops
 * Under -fsanitize=address, run with ASAN_OPTIONS=allocator_may_return_null=1: the OOM
 * check in test_backend_primitives asks for an impossible allocation, which ASan would
 * otherwise treat as fatal.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../kernels/gpt.h"
#include "../kernels/checksum_element.h"

/* The small shapes of the gradient checks. */
enum { B = 2, T = 5, C = 8, NH = 2, V = 11, VP = 16, N = B * T };

/* Tolerances (normwise relative error, see the top comment).  Float rounding of the
 * analytic forward/backward is ~1e-7 relative for these short reductions, and the
 * double finite differences are accurate to ~1e-9, so 1e-6 holds for every op here;
 * only the long-reduction matmul check (test_matmul_large) needs a looser bound. */
#define FWD_TOL 1e-6
#define GRAD_TOL 1e-6
#define ACCUM_TOL 1e-6
#define FD_STEP 1e-6
#define PI 3.14159265358979323846

/* ======================================================================================
 * small helpers: RNG, buffers, error measures
 * ==================================================================================== */

/* splitmix64: a tiny, well-mixed generator; each test seeds its own. */
typedef struct rng {
    uint64_t state;
} rng;

static uint64_t rng_next(rng *r)
{
    uint64_t z = (r->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [-1, 1), with 24 random bits: exactly representable as a float. */
static float rng_uniform(rng *r)
{
    return (float)((double)(rng_next(r) >> 40) / (double)(1u << 23) - 1.0);
}

static int rng_int(rng *r, int n) /* uniform in [0, n) */
{
    return (int)(rng_next(r) % (uint64_t)n);
}

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes > 0 ? bytes : 1);
    assert_non_null(p);
    return p;
}

/* n floats: offset + scale * uniform[-1,1) */
static float *rand_floats(rng *r, size_t n, float scale, float offset)
{
    float *x = xmalloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = offset + scale * rng_uniform(r);
    return x;
}

static float *nan_floats(size_t n)
{
    float *x = xmalloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = NAN;
    return x;
}

static float *zero_floats(size_t n)
{
    float *x = xmalloc(n * sizeof *x);
    memset(x, 0, n * sizeof *x);
    return x;
}

static float *copy_floats(const float *src, size_t n)
{
    float *x = xmalloc(n * sizeof *x);
    memcpy(x, src, n * sizeof *x);
    return x;
}

/* Every float is exactly representable in double: the reference sees the very same
 * inputs as the kernel. */
static double *to_double(const float *x, size_t n)
{
    double *d = xmalloc(n * sizeof *d);
    for (size_t i = 0; i < n; i++)
        d[i] = (double)x[i];
    return d;
}

static double *zero_doubles(size_t n)
{
    double *d = xmalloc(n * sizeof *d);
    for (size_t i = 0; i < n; i++)
        d[i] = 0.0;
    return d;
}

/* max_i |got_i - ref_i| / max_i |ref_i| (0 when both are all zero) */
static double normwise_err(const float *got, const double *ref, size_t n)
{
    double maxdiff = 0.0, maxref = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)got[i] - ref[i]);
        /* NaN must fail: a comparison with NaN is false, so test it explicitly */
        if (isnan(d))
            return INFINITY;
        if (d > maxdiff)
            maxdiff = d;
        if (fabs(ref[i]) > maxref)
            maxref = fabs(ref[i]);
    }
    if (maxref == 0.0)
        return maxdiff == 0.0 ? 0.0 : INFINITY;
    return maxdiff / maxref;
}

static void check_forward(const char *op, const char *which, const float *got,
                          const double *ref, size_t n, double tol)
{
    const double err = normwise_err(got, ref, n);
    printf("fwdcheck %s %s max_rel_err=%.3e\n", op, which, err);
    assert_true(err <= tol);
}

static void check_grad(const char *op, const char *which, const float *analytic,
                       const double *fd, size_t n, double tol)
{
    const double err = normwise_err(analytic, fd, n);
    printf("gradcheck %s %s max_rel_err=%.3e\n", op, which, err);
    assert_true(err <= tol);
}

/* An accumulating gradient: after == before + fresh (fresh = the result from zero). */
static void check_accumulated(const char *op, const char *which, const float *before,
                              const float *fresh, const float *after, size_t n)
{
    double *expect = xmalloc(n * sizeof *expect);
    for (size_t i = 0; i < n; i++)
        expect[i] = (double)before[i] + (double)fresh[i];
    const double err = normwise_err(after, expect, n);
    printf("accumcheck %s %s max_rel_err=%.3e\n", op, which, err);
    assert_true(err <= ACCUM_TOL);
    free(expect);
}

/* An overwritten output: the run on NaN-filled buffers equals the run on zeroed ones. */
static void check_overwritten(const char *op, const char *which, const float *from_nan,
                              const float *from_zero, size_t n)
{
    const int same = memcmp(from_nan, from_zero, n * sizeof *from_nan) == 0;
    printf("overwritecheck %s %s %s\n", op, which, same ? "ok" : "DIFFERS");
    assert_true(same);
}

static void check_bitwise(const char *op, const char *which, const float *a, const float *b,
                          size_t n)
{
    const int same = memcmp(a, b, n * sizeof *a) == 0;
    printf("bitcheck %s %s %s\n", op, which, same ? "identical" : "DIFFERS");
    assert_true(same);
}

/* ======================================================================================
 * finite differences
 * ==================================================================================== */

/* The scalar objective of a gradient check, evaluated on the double reference; it reads
 * its inputs through ctx, some of which fd_gradient perturbs in place. */
typedef double (*objective_fn)(void *ctx);

/* g[i] = dL/dx[i] by central differences: (L(x + h e_i) - L(x - h e_i)) / 2h.  With
 * h = 1e-6 and L smooth and O(1..10), truncation (~h^2) and cancellation (~1e-16 |L| / h)
 * errors are both below 1e-9. */
static void fd_gradient(objective_fn L, void *ctx, double *x, size_t n, double *g)
{
    for (size_t i = 0; i < n; i++) {
        const double xi = x[i];
        x[i] = xi + FD_STEP;
        const double lp = L(ctx);
        x[i] = xi - FD_STEP;
        const double lm = L(ctx);
        x[i] = xi;
        g[i] = (lp - lm) / (2.0 * FD_STEP);
    }
}

/* ======================================================================================
 * double-precision reference forwards (straight from the definitions in gpt.h)
 * ==================================================================================== */

static void ref_encoder(double *out, const int32_t *tokens, const double *wte,
                        const double *wpe, int b_, int t_, int c_)
{
    for (int b = 0; b < b_; b++)
        for (int t = 0; t < t_; t++)
            for (int c = 0; c < c_; c++)
                out[(b * t_ + t) * c_ + c] =
                    wte[tokens[b * t_ + t] * c_ + c] + wpe[t * c_ + c];
}

static void ref_layernorm(double *out, double *mean, double *rstd, const double *inp,
                          const double *w, const double *b, int n_, int c_)
{
    for (int n = 0; n < n_; n++) {
        const double *x = inp + n * c_;
        double m = 0.0, v = 0.0;
        for (int c = 0; c < c_; c++)
            m += x[c];
        m /= c_;
        for (int c = 0; c < c_; c++)
            v += (x[c] - m) * (x[c] - m);
        v /= c_; /* biased */
        const double r = 1.0 / sqrt(v + 1e-5);
        for (int c = 0; c < c_; c++)
            out[n * c_ + c] = (x[c] - m) * r * w[c] + b[c];
        if (mean)
            mean[n] = m;
        if (rstd)
            rstd[n] = r;
    }
}

/* out (n,oc) = inp (n,c) @ w^T + bias, w (oc,c), bias may be NULL */
static void ref_matmul(double *out, const double *inp, const double *w, const double *bias,
                       int n_, int c_, int oc_)
{
    for (int n = 0; n < n_; n++)
        for (int o = 0; o < oc_; o++) {
            double s = bias ? bias[o] : 0.0;
            for (int c = 0; c < c_; c++)
                s += inp[n * c_ + c] * w[o * c_ + c];
            out[n * oc_ + o] = s;
        }
}

/* out, and (when lse is not NULL) each row's log softmax denominator, in double. */
static void ref_attention(double *out, double *lse, const double *qkv, int b_, int t_,
                          int c_, int nh_)
{
    const int hs = c_ / nh_;
    const double scale = 1.0 / sqrt((double)hs);
    double *score = xmalloc((size_t)t_ * sizeof *score);
    for (int b = 0; b < b_; b++)
        for (int h = 0; h < nh_; h++)
            for (int t = 0; t < t_; t++) {
                const double *q = qkv + (b * t_ + t) * 3 * c_ + h * hs;
                double maxs = -INFINITY;
                for (int t2 = 0; t2 <= t; t2++) {
                    const double *k = qkv + (b * t_ + t2) * 3 * c_ + c_ + h * hs;
                    double d = 0.0;
                    for (int i = 0; i < hs; i++)
                        d += q[i] * k[i];
                    score[t2] = d * scale;
                    maxs = fmax(maxs, score[t2]);
                }
                double sum = 0.0;
                for (int t2 = 0; t2 <= t; t2++)
                    sum += exp(score[t2] - maxs);
                if (lse)
                    lse[(b * nh_ + h) * t_ + t] = maxs + log(sum);
                double *o = out + (b * t_ + t) * c_ + h * hs;
                for (int i = 0; i < hs; i++)
                    o[i] = 0.0;
                for (int t2 = 0; t2 <= t; t2++) {
                    const double p = exp(score[t2] - maxs) / sum;
                    const double *v = qkv + (b * t_ + t2) * 3 * c_ + 2 * c_ + h * hs;
                    for (int i = 0; i < hs; i++)
                        o[i] += p * v[i];
                }
            }
    free(score);
}

static void ref_gelu(double *out, const double *inp, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const double x = inp[i];
        out[i] = 0.5 * x * (1.0 + tanh(sqrt(2.0 / PI) * (x + 0.044715 * x * x * x)));
    }
}

static void ref_residual(double *out, const double *a, const double *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = a[i] + b[i];
}

/* losses (n) over the first v_ of vp_ columns */
static void ref_crossentropy(double *losses, const double *logits, const int32_t *targets,
                             int n_, int v_, int vp_)
{
    for (int n = 0; n < n_; n++) {
        const double *row = logits + n * vp_;
        double m = -INFINITY, s = 0.0;
        for (int v = 0; v < v_; v++)
            m = fmax(m, row[v]);
        for (int v = 0; v < v_; v++)
            s += exp(row[v] - m);
        losses[n] = log(s) + m - row[targets[n]];
    }
}

/* ======================================================================================
 * fixture: a 2-thread backend for the checks, 1- and 3-thread ones for determinism
 * ==================================================================================== */

typedef struct fixture {
    gpt_backend *be, *be1, *be3;
    gpt_stream *s, *s1, *s3;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    if (f == NULL)
        return -1;
    if (gpt_cpu_backend_create(&f->be, 2) != GPT_OK ||
        gpt_cpu_backend_create(&f->be1, 1) != GPT_OK ||
        gpt_cpu_backend_create(&f->be3, 3) != GPT_OK)
        return -1;
    if (f->be->ops->stream_create(f->be, &f->s) != GPT_OK ||
        f->be1->ops->stream_create(f->be1, &f->s1) != GPT_OK ||
        f->be3->ops->stream_create(f->be3, &f->s3) != GPT_OK)
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    f->be->ops->stream_destroy(f->s);
    f->be1->ops->stream_destroy(f->s1);
    f->be3->ops->stream_destroy(f->s3);
    gpt_cpu_backend_destroy(f->be);
    gpt_cpu_backend_destroy(f->be1);
    gpt_cpu_backend_destroy(f->be3);
    free(f);
    return 0;
}

/* Streams run their work on a worker thread: wait for it before reading results. */
static void sync_ok(gpt_stream *s)
{
    assert_int_equal(gpt_stream_sync(s), GPT_OK);
}

/* ======================================================================================
 * encoder
 * ==================================================================================== */

typedef struct encoder_ctx {
    const int32_t *tokens;
    double *wte, *wpe, *out;
    const double *R;
} encoder_ctx;

static double encoder_objective(void *p)
{
    encoder_ctx *x = p;
    ref_encoder(x->out, x->tokens, x->wte, x->wpe, B, T, C);
    double s = 0.0;
    for (int i = 0; i < N * C; i++)
        s += x->out[i] * x->R[i];
    return s;
}

static void test_encoder(void **state)
{
    fixture *f = *state;
    rng r = {101};
    int32_t tokens[N];
    for (int i = 0; i < N; i++)
        tokens[i] = rng_int(&r, V);
    /* repeated tokens, also across batch rows: their gradients must add up */
    tokens[3] = tokens[0];
    tokens[T + 1] = tokens[0];
    tokens[T + 4] = tokens[2];

    float *wte = rand_floats(&r, VP * C, 1.0f, 0.0f);
    float *wpe = rand_floats(&r, T * C, 1.0f, 0.0f);
    float *Rf = rand_floats(&r, N * C, 1.0f, 0.0f);

    /* forward */
    float *out = nan_floats(N * C);
    gpt_encoder_forward(f->s, out, tokens, wte, wpe, B, T, C);
    sync_ok(f->s);
    double *wte_d = to_double(wte, VP * C), *wpe_d = to_double(wpe, T * C);
    double *R = to_double(Rf, N * C), *out_d = zero_doubles(N * C);
    ref_encoder(out_d, tokens, wte_d, wpe_d, B, T, C);
    check_forward("encoder", "out", out, out_d, N * C, FWD_TOL);

    /* backward vs finite differences */
    float *dwte = zero_floats(VP * C), *dwpe = zero_floats(T * C);
    gpt_encoder_backward(f->s, dwte, dwpe, Rf, tokens, B, T, C);
    sync_ok(f->s);
    encoder_ctx ctx = {tokens, wte_d, wpe_d, out_d, R};
    double *g_wte = zero_doubles(VP * C), *g_wpe = zero_doubles(T * C);
    fd_gradient(encoder_objective, &ctx, wte_d, VP * C, g_wte);
    fd_gradient(encoder_objective, &ctx, wpe_d, T * C, g_wpe);
    check_grad("encoder", "dwte", dwte, g_wte, VP * C, GRAD_TOL);
    check_grad("encoder", "dwpe", dwpe, g_wpe, T * C, GRAD_TOL);

    /* the repeated token: its row holds the sum of all of its (>= 3) occurrences */
    for (int c = 0; c < C; c++) {
        double expect = 0.0;
        for (int n = 0; n < N; n++)
            if (tokens[n] == tokens[0])
                expect += Rf[n * C + c];
        assert_true(fabs(dwte[tokens[0] * C + c] - expect) <= 1e-6 * (1.0 + fabs(expect)));
    }

    /* both gradients accumulate */
    float *dwte0 = rand_floats(&r, VP * C, 1.0f, 0.0f), *dwpe0 = rand_floats(&r, T * C, 1.0f, 0.0f);
    float *dwte1 = copy_floats(dwte0, VP * C), *dwpe1 = copy_floats(dwpe0, T * C);
    gpt_encoder_backward(f->s, dwte1, dwpe1, Rf, tokens, B, T, C);
    sync_ok(f->s);
    check_accumulated("encoder", "dwte", dwte0, dwte, dwte1, VP * C);
    check_accumulated("encoder", "dwpe", dwpe0, dwpe, dwpe1, T * C);

    free(wte); free(wpe); free(Rf); free(out); free(wte_d); free(wpe_d); free(R);
    free(out_d); free(dwte); free(dwpe); free(g_wte); free(g_wpe); free(dwte0);
    free(dwpe0); free(dwte1); free(dwpe1);
}

/* ======================================================================================
 * layernorm
 * ==================================================================================== */

typedef struct layernorm_ctx {
    double *inp, *w, *b, *out;
    const double *R;
} layernorm_ctx;

static double layernorm_objective(void *p)
{
    layernorm_ctx *x = p;
    ref_layernorm(x->out, NULL, NULL, x->inp, x->w, x->b, N, C);
    double s = 0.0;
    for (int i = 0; i < N * C; i++)
        s += x->out[i] * x->R[i];
    return s;
}

static void test_layernorm(void **state)
{
    fixture *f = *state;
    rng r = {202};
    /* rows with a non-zero mean, weights around 1 */
    float *inp = rand_floats(&r, N * C, 1.5f, 0.7f);
    float *w = rand_floats(&r, C, 0.5f, 1.0f);
    float *b = rand_floats(&r, C, 0.5f, 0.0f);
    float *Rf = rand_floats(&r, N * C, 1.0f, 0.0f);

    /* forward */
    float *out = nan_floats(N * C), *mean = nan_floats(N), *rstd = nan_floats(N);
    gpt_layernorm_forward(f->s, out, mean, rstd, inp, w, b, N, C);
    sync_ok(f->s);
    double *inp_d = to_double(inp, N * C), *w_d = to_double(w, C), *b_d = to_double(b, C);
    double *R = to_double(Rf, N * C);
    double *out_d = zero_doubles(N * C), *mean_d = zero_doubles(N), *rstd_d = zero_doubles(N);
    ref_layernorm(out_d, mean_d, rstd_d, inp_d, w_d, b_d, N, C);
    check_forward("layernorm", "out", out, out_d, N * C, FWD_TOL);
    check_forward("layernorm", "mean", mean, mean_d, N, FWD_TOL);
    check_forward("layernorm", "rstd", rstd, rstd_d, N, FWD_TOL);

    /* backward vs finite differences */
    float *dinp = zero_floats(N * C), *dw = zero_floats(C), *db = zero_floats(C);
    gpt_layernorm_backward(f->s, dinp, dw, db, Rf, inp, w, mean, rstd, N, C, GPT_GRAD_ACCUMULATE);
    sync_ok(f->s);
    layernorm_ctx ctx = {inp_d, w_d, b_d, out_d, R};
    double *g_inp = zero_doubles(N * C), *g_w = zero_doubles(C), *g_b = zero_doubles(C);
    fd_gradient(layernorm_objective, &ctx, inp_d, N * C, g_inp);
    fd_gradient(layernorm_objective, &ctx, w_d, C, g_w);
    fd_gradient(layernorm_objective, &ctx, b_d, C, g_b);
    check_grad("layernorm", "dinp", dinp, g_inp, N * C, GRAD_TOL);
    check_grad("layernorm", "dw", dw, g_w, C, GRAD_TOL);
    check_grad("layernorm", "db", db, g_b, C, GRAD_TOL);

    /* dinp, dw, db all accumulate */
    float *dinp0 = rand_floats(&r, N * C, 1.0f, 0.0f);
    float *dw0 = rand_floats(&r, C, 1.0f, 0.0f), *db0 = rand_floats(&r, C, 1.0f, 0.0f);
    float *dinp1 = copy_floats(dinp0, N * C), *dw1 = copy_floats(dw0, C), *db1 = copy_floats(db0, C);
    gpt_layernorm_backward(f->s, dinp1, dw1, db1, Rf, inp, w, mean, rstd, N, C, GPT_GRAD_ACCUMULATE);
    sync_ok(f->s);
    check_accumulated("layernorm", "dinp", dinp0, dinp, dinp1, N * C);
    check_accumulated("layernorm", "dw", dw0, dw, dw1, C);
    check_accumulated("layernorm", "db", db0, db, db1, C);

    /* GPT_GRAD_OVERWRITE: dw, db come out as from zeros whatever they held (NaN here: a
     * read of them would show); dinp still accumulates */
    float *dinp2 = copy_floats(dinp0, N * C), *dw2 = nan_floats(C), *db2 = nan_floats(C);
    gpt_layernorm_backward(f->s, dinp2, dw2, db2, Rf, inp, w, mean, rstd, N, C, GPT_GRAD_OVERWRITE);
    sync_ok(f->s);
    check_bitwise("layernorm", "dw_overwrite", dw2, dw, C);
    check_bitwise("layernorm", "db_overwrite", db2, db, C);
    check_bitwise("layernorm", "dinp_with_overwrite", dinp2, dinp1, N * C);

    free(inp); free(w); free(b); free(Rf); free(out); free(mean); free(rstd); free(inp_d);
    free(w_d); free(b_d); free(R); free(out_d); free(mean_d); free(rstd_d); free(dinp);
    free(dw); free(db); free(g_inp); free(g_w); free(g_b); free(dinp0); free(dw0); free(db0);
    free(dinp1); free(dw1); free(db1); free(dinp2); free(dw2); free(db2);
}

/* ======================================================================================
 * matmul
 * ==================================================================================== */

typedef struct matmul_ctx {
    double *inp, *w, *bias, *out;
    const double *R;
    int n, c, oc;
} matmul_ctx;

static double matmul_objective(void *p)
{
    matmul_ctx *x = p;
    ref_matmul(x->out, x->inp, x->w, x->bias, x->n, x->c, x->oc);
    double s = 0.0;
    for (int i = 0; i < x->n * x->oc; i++)
        s += x->out[i] * x->R[i];
    return s;
}

/* Gradient check of one shape; the second shape has edges in every dimension of the
 * kernel's tiling (rows not a multiple of 6, columns not a multiple of 16). */
static void matmul_gradcheck(gpt_stream *s, int n, int c, int oc, uint64_t seed,
                             const char *name)
{
    rng r = {seed};
    float *inp = rand_floats(&r, (size_t)n * c, 1.0f, 0.0f);
    float *w = rand_floats(&r, (size_t)oc * c, 1.0f, 0.0f);
    float *bias = rand_floats(&r, oc, 1.0f, 0.0f);
    float *Rf = rand_floats(&r, (size_t)n * oc, 1.0f, 0.0f);
    double *inp_d = to_double(inp, (size_t)n * c), *w_d = to_double(w, (size_t)oc * c);
    double *bias_d = to_double(bias, oc), *R = to_double(Rf, (size_t)n * oc);
    double *out_d = zero_doubles((size_t)n * oc);

    /* forward, with and without bias */
    float *out = nan_floats((size_t)n * oc);
    gpt_matmul_forward(s, out, inp, w, bias, n, c, oc);
    sync_ok(s);
    ref_matmul(out_d, inp_d, w_d, bias_d, n, c, oc);
    check_forward(name, "out", out, out_d, (size_t)n * oc, FWD_TOL);
    gpt_matmul_forward(s, out, inp, w, NULL, n, c, oc);
    sync_ok(s);
    ref_matmul(out_d, inp_d, w_d, NULL, n, c, oc);
    check_forward(name, "out_nobias", out, out_d, (size_t)n * oc, FWD_TOL);

    /* the fused GELU pair: exactly the separate ops, in order */
    {
        float *pre = nan_floats((size_t)n * oc), *act = nan_floats((size_t)n * oc);
        float *pre2 = nan_floats((size_t)n * oc), *act2 = nan_floats((size_t)n * oc);
        gpt_matmul_forward_gelu(s, act, pre, inp, w, bias, n, c, oc);
        gpt_matmul_forward(s, pre2, inp, w, bias, n, c, oc);
        gpt_gelu_forward(s, act2, pre2, (size_t)n * oc);
        sync_ok(s);
        check_bitwise(name, "gelu_pre", pre, pre2, (size_t)n * oc);
        check_bitwise(name, "gelu_out", act, act2, (size_t)n * oc);
        /* backward of a layer oc -> c whose input was gelu(pre) */
        float *dout2 = rand_floats(&r, (size_t)n * c, 1.0f, 0.0f);
        float *dinp1 = nan_floats((size_t)n * oc), *dinp2 = nan_floats((size_t)n * oc);
        float *dw1 = zero_floats((size_t)c * oc), *dw2 = zero_floats((size_t)c * oc);
        float *db1 = zero_floats(c), *db2 = zero_floats(c);
        gpt_matmul_backward_gelu(s, dinp1, dw1, db1, dout2, act, w, pre, n, oc, c, GPT_GRAD_ACCUMULATE);
        gpt_matmul_backward(s, dinp2, dw2, db2, dout2, act, w, n, oc, c, GPT_GRAD_ACCUMULATE);
        gpt_gelu_backward(s, dinp2, pre, dinp2, (size_t)n * oc);
        sync_ok(s);
        check_bitwise(name, "gelu_dinp", dinp1, dinp2, (size_t)n * oc);
        check_bitwise(name, "gelu_dw", dw1, dw2, (size_t)c * oc);
        check_bitwise(name, "gelu_dbias", db1, db2, c);
        free(pre); free(act); free(pre2); free(act2); free(dout2); free(dinp1); free(dinp2);
        free(dw1); free(dw2); free(db1); free(db2);
    }

    /* the fused residual: exactly the separate ops, in order */
    {
        float *res = rand_floats(&r, (size_t)n * oc, 2.0f, -1.0f);
        float *sum = nan_floats((size_t)n * oc), *sum2 = nan_floats((size_t)n * oc);
        gpt_matmul_forward_residual(s, sum, inp, w, bias, res, n, c, oc);
        gpt_matmul_forward(s, sum2, inp, w, bias, n, c, oc);
        gpt_residual_forward(s, sum2, res, sum2, (size_t)n * oc);
        sync_ok(s);
        check_bitwise(name, "residual_out", sum, sum2, (size_t)n * oc);
        /* and it is the sum: res + the product, against the double reference */
        double *sum_d = zero_doubles((size_t)n * oc);
        ref_matmul(sum_d, inp_d, w_d, bias_d, n, c, oc);
        for (size_t i = 0; i < (size_t)n * oc; i++) sum_d[i] += res[i];
        check_forward(name, "residual_ref", sum, sum_d, (size_t)n * oc, FWD_TOL);
        free(res); free(sum); free(sum2); free(sum_d);
    }

    /* backward vs finite differences */
    float *dinp = zero_floats((size_t)n * c), *dw = zero_floats((size_t)oc * c);
    float *dbias = zero_floats(oc);
    gpt_matmul_backward(s, dinp, dw, dbias, Rf, inp, w, n, c, oc, GPT_GRAD_ACCUMULATE);
    sync_ok(s);
    matmul_ctx ctx = {inp_d, w_d, bias_d, out_d, R, n, c, oc};
    double *g_inp = zero_doubles((size_t)n * c), *g_w = zero_doubles((size_t)oc * c);
    double *g_bias = zero_doubles(oc);
    fd_gradient(matmul_objective, &ctx, inp_d, (size_t)n * c, g_inp);
    fd_gradient(matmul_objective, &ctx, w_d, (size_t)oc * c, g_w);
    fd_gradient(matmul_objective, &ctx, bias_d, oc, g_bias);
    check_grad(name, "dinp", dinp, g_inp, (size_t)n * c, GRAD_TOL);
    check_grad(name, "dw", dw, g_w, (size_t)oc * c, GRAD_TOL);
    check_grad(name, "dbias", dbias, g_bias, oc, GRAD_TOL);

    /* dinp is overwritten; dw, dbias accumulate */
    float *dinp1 = nan_floats((size_t)n * c);
    float *dw0 = rand_floats(&r, (size_t)oc * c, 1.0f, 0.0f), *dbias0 = rand_floats(&r, oc, 1.0f, 0.0f);
    float *dw1 = copy_floats(dw0, (size_t)oc * c), *dbias1 = copy_floats(dbias0, oc);
    gpt_matmul_backward(s, dinp1, dw1, dbias1, Rf, inp, w, n, c, oc, GPT_GRAD_ACCUMULATE);
    sync_ok(s);
    check_overwritten(name, "dinp", dinp1, dinp, (size_t)n * c);
    check_accumulated(name, "dw", dw0, dw, dw1, (size_t)oc * c);
    check_accumulated(name, "dbias", dbias0, dbias, dbias1, oc);

    /* NULL dinp and dbias are skipped; dw is unaffected by their absence */
    float *dw2 = zero_floats((size_t)oc * c);
    gpt_matmul_backward(s, NULL, dw2, NULL, Rf, inp, w, n, c, oc, GPT_GRAD_ACCUMULATE);
    sync_ok(s);
    check_bitwise(name, "dw_without_dinp_dbias", dw2, dw, (size_t)oc * c);

    /* GPT_GRAD_OVERWRITE: dw, dbias come out as from zeros whatever they held (NaN: a read
     * of them would show) */
    float *dw3 = nan_floats((size_t)oc * c), *dbias3 = nan_floats(oc);
    gpt_matmul_backward(s, NULL, dw3, dbias3, Rf, inp, w, n, c, oc, GPT_GRAD_OVERWRITE);
    sync_ok(s);
    check_bitwise(name, "dw_overwrite", dw3, dw, (size_t)oc * c);
    check_bitwise(name, "dbias_overwrite", dbias3, dbias, oc);
    free(dw3); free(dbias3);

    free(inp); free(w); free(bias); free(Rf); free(inp_d); free(w_d); free(bias_d); free(R);
    free(out_d); free(out); free(dinp); free(dw); free(dbias); free(g_inp); free(g_w);
    free(g_bias); free(dinp1); free(dw0); free(dbias0); free(dw1); free(dbias1); free(dw2);
}

static void test_matmul(void **state)
{
    fixture *f = *state;
    matmul_gradcheck(f->s, N, C, 4 * C, 303, "matmul");
    matmul_gradcheck(f->s, 7, 13, 19, 304, "matmul_edges");
}

/* Shapes larger than every cache block of the kernel (rows > MC = 48, reductions >
 * KC = 256), against double products.  The reductions here are K = 300 terms long and
 * the kernel sums them serially in float, so the rounding error grows with K: about
 * sqrt(K) * 2^-24 ~ 1e-6 relative to the partial sums (measured: up to 7e-7).  1e-6
 * would sit on the edge of that, so this check allows 2e-6; the short-reduction checks
 * in test_matmul hold 1e-6. */
static void test_matmul_large(void **state)
{
    fixture *f = *state;
    const int n = 300, c = 300, oc = 83;
    const double tol = 2e-6;
    rng r = {305};
    float *inp = rand_floats(&r, (size_t)n * c, 1.0f, 0.0f);
    float *w = rand_floats(&r, (size_t)oc * c, 1.0f, 0.0f);
    float *bias = rand_floats(&r, oc, 1.0f, 0.0f);
    float *dout = rand_floats(&r, (size_t)n * oc, 1.0f, 0.0f);
    double *inp_d = to_double(inp, (size_t)n * c), *w_d = to_double(w, (size_t)oc * c);
    double *bias_d = to_double(bias, oc), *dout_d = to_double(dout, (size_t)n * oc);

    float *out = nan_floats((size_t)n * oc);
    double *out_d = zero_doubles((size_t)n * oc);
    gpt_matmul_forward(f->s, out, inp, w, bias, n, c, oc);
    sync_ok(f->s);
    ref_matmul(out_d, inp_d, w_d, bias_d, n, c, oc);
    check_forward("matmul_large", "out", out, out_d, (size_t)n * oc, tol);

    float *dinp = nan_floats((size_t)n * c), *dw = zero_floats((size_t)oc * c);
    float *dbias = zero_floats(oc);
    gpt_matmul_backward(f->s, dinp, dw, dbias, dout, inp, w, n, c, oc, GPT_GRAD_ACCUMULATE);
    sync_ok(f->s);
    double *dinp_d = zero_doubles((size_t)n * c), *dw_d = zero_doubles((size_t)oc * c);
    double *dbias_d = zero_doubles(oc);
    for (int i = 0; i < n; i++)
        for (int o = 0; o < oc; o++) {
            const double d = dout_d[i * oc + o];
            dbias_d[o] += d;
            for (int k = 0; k < c; k++) {
                dinp_d[i * c + k] += d * w_d[o * c + k];
                dw_d[o * c + k] += d * inp_d[i * c + k];
            }
        }
    check_forward("matmul_large", "dinp", dinp, dinp_d, (size_t)n * c, tol);
    check_forward("matmul_large", "dw", dw, dw_d, (size_t)oc * c, tol);
    check_forward("matmul_large", "dbias", dbias, dbias_d, oc, tol);

    free(inp); free(w); free(bias); free(dout); free(inp_d); free(w_d); free(bias_d);
    free(dout_d); free(out); free(out_d); free(dinp); free(dw); free(dbias); free(dinp_d);
    free(dw_d); free(dbias_d);
}

/* ======================================================================================
 * attention
 * ==================================================================================== */

typedef struct attention_ctx {
    double *qkv, *out;
    const double *R;
} attention_ctx;

static double attention_objective(void *p)
{
    attention_ctx *x = p;
    ref_attention(x->out, NULL, x->qkv, B, T, C, NH);
    double s = 0.0;
    for (int i = 0; i < N * C; i++)
        s += x->out[i] * x->R[i];
    return s;
}

static void test_attention(void **state)
{
    fixture *f = *state;
    rng r = {404};
    const size_t nqkv = (size_t)N * 3 * C, nrows = (size_t)B * NH * T;
    float *qkv = rand_floats(&r, nqkv, 1.5f, 0.0f);
    float *Rf = rand_floats(&r, N * C, 1.0f, 0.0f);

    /* forward: out and each row's log-sum-exp */
    float *out = nan_floats(N * C), *lse = nan_floats(nrows);
    gpt_attention_forward(f->s, out, lse, qkv, B, T, C, NH);
    sync_ok(f->s);
    double *qkv_d = to_double(qkv, nqkv), *R = to_double(Rf, N * C);
    double *out_d = zero_doubles(N * C), *lse_d = zero_doubles(nrows);
    ref_attention(out_d, lse_d, qkv_d, B, T, C, NH);
    check_forward("attention", "out", out, out_d, N * C, FWD_TOL);
    check_forward("attention", "lse", lse, lse_d, nrows, FWD_TOL);

    /* backward vs finite differences (delta is scratch: NaN-filled, written before read) */
    float *dqkv = zero_floats(nqkv), *delta = nan_floats(nrows);
    gpt_attention_backward(f->s, dqkv, delta, Rf, qkv, out, lse, B, T, C, NH);
    sync_ok(f->s);
    attention_ctx ctx = {qkv_d, out_d, R};
    double *g_qkv = zero_doubles(nqkv);
    fd_gradient(attention_objective, &ctx, qkv_d, nqkv, g_qkv);
    check_grad("attention", "dqkv", dqkv, g_qkv, nqkv, GRAD_TOL);
    /* per part, so that a wrong dq, dk or dv cannot hide behind a larger other part */
    const char *part_name[3] = {"dq", "dk", "dv"};
    for (int part = 0; part < 3; part++) {
        float part_a[N * C];
        double part_fd[N * C];
        for (int n = 0; n < N; n++)
            for (int c = 0; c < C; c++) {
                part_a[n * C + c] = dqkv[n * 3 * C + part * C + c];
                part_fd[n * C + c] = g_qkv[n * 3 * C + part * C + c];
            }
        check_grad("attention", part_name[part], part_a, part_fd, N * C, GRAD_TOL);
    }
    /* delta holds dout . out per (b, h, t), as documented */
    double *delta_d = zero_doubles(nrows);
    const int hs = C / NH;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++)
                for (int i = 0; i < hs; i++)
                    delta_d[(b * NH + h) * T + t] +=
                        R[(b * T + t) * C + h * hs + i] * out_d[(b * T + t) * C + h * hs + i];
    check_forward("attention", "delta", delta, delta_d, nrows, FWD_TOL);

    /* dqkv is overwritten */
    float *dqkv1 = nan_floats(nqkv);
    gpt_attention_backward(f->s, dqkv1, delta, Rf, qkv, out, lse, B, T, C, NH);
    sync_ok(f->s);
    check_overwritten("attention", "dqkv", dqkv1, dqkv, nqkv);

    free(qkv); free(Rf); free(out); free(lse); free(qkv_d); free(R); free(out_d);
    free(lse_d); free(dqkv); free(delta); free(g_qkv); free(dqkv1); free(delta_d);
}

/* ======================================================================================
 * GELU, residual
 * ==================================================================================== */

enum { NELEM = 37 };

typedef struct gelu_ctx {
    double *inp, *out;
    const double *R;
} gelu_ctx;

static double gelu_objective(void *p)
{
    gelu_ctx *x = p;
    ref_gelu(x->out, x->inp, NELEM);
    double s = 0.0;
    for (int i = 0; i < NELEM; i++)
        s += x->out[i] * x->R[i];
    return s;
}

static void test_gelu(void **state)
{
    fixture *f = *state;
    rng r = {505};
    float *inp = rand_floats(&r, NELEM, 4.0f, 0.0f); /* covers both tails */
    float *Rf = rand_floats(&r, NELEM, 1.0f, 0.0f);

    float *out = nan_floats(NELEM);
    gpt_gelu_forward(f->s, out, inp, NELEM);
    sync_ok(f->s);
    double *inp_d = to_double(inp, NELEM), *R = to_double(Rf, NELEM);
    double *out_d = zero_doubles(NELEM);
    ref_gelu(out_d, inp_d, NELEM);
    check_forward("gelu", "out", out, out_d, NELEM, FWD_TOL);

    float *dinp = zero_floats(NELEM);
    gpt_gelu_backward(f->s, dinp, inp, Rf, NELEM);
    sync_ok(f->s);
    gelu_ctx ctx = {inp_d, out_d, R};
    double *g_inp = zero_doubles(NELEM);
    fd_gradient(gelu_objective, &ctx, inp_d, NELEM, g_inp);
    check_grad("gelu", "dinp", dinp, g_inp, NELEM, GRAD_TOL);

    /* overwritten, and in place (dinp == dout) gives the same */
    float *dinp1 = nan_floats(NELEM);
    gpt_gelu_backward(f->s, dinp1, inp, Rf, NELEM);
    sync_ok(f->s);
    check_overwritten("gelu", "dinp", dinp1, dinp, NELEM);
    float *inplace = copy_floats(Rf, NELEM);
    gpt_gelu_backward(f->s, inplace, inp, inplace, NELEM);
    sync_ok(f->s);
    check_bitwise("gelu", "dinp_inplace", inplace, dinp, NELEM);

    free(inp); free(Rf); free(out); free(inp_d); free(R); free(out_d); free(dinp);
    free(g_inp); free(dinp1); free(inplace);
}

typedef struct residual_ctx {
    double *a, *b, *out;
    const double *R;
} residual_ctx;

static double residual_objective(void *p)
{
    residual_ctx *x = p;
    ref_residual(x->out, x->a, x->b, NELEM);
    double s = 0.0;
    for (int i = 0; i < NELEM; i++)
        s += x->out[i] * x->R[i];
    return s;
}

static void test_residual(void **state)
{
    fixture *f = *state;
    rng r = {606};
    float *a = rand_floats(&r, NELEM, 1.0f, 0.0f), *b = rand_floats(&r, NELEM, 1.0f, 0.0f);
    float *Rf = rand_floats(&r, NELEM, 1.0f, 0.0f);

    float *out = nan_floats(NELEM);
    gpt_residual_forward(f->s, out, a, b, NELEM);
    sync_ok(f->s);
    double *a_d = to_double(a, NELEM), *b_d = to_double(b, NELEM), *R = to_double(Rf, NELEM);
    double *out_d = zero_doubles(NELEM);
    ref_residual(out_d, a_d, b_d, NELEM);
    check_forward("residual", "out", out, out_d, NELEM, FWD_TOL);

    float *da = zero_floats(NELEM), *db = zero_floats(NELEM);
    gpt_residual_backward(f->s, da, db, Rf, NELEM);
    sync_ok(f->s);
    residual_ctx ctx = {a_d, b_d, out_d, R};
    double *g_a = zero_doubles(NELEM), *g_b = zero_doubles(NELEM);
    fd_gradient(residual_objective, &ctx, a_d, NELEM, g_a);
    fd_gradient(residual_objective, &ctx, b_d, NELEM, g_b);
    check_grad("residual", "da", da, g_a, NELEM, GRAD_TOL);
    check_grad("residual", "db", db, g_b, NELEM, GRAD_TOL);

    /* both accumulate */
    float *da0 = rand_floats(&r, NELEM, 1.0f, 0.0f), *db0 = rand_floats(&r, NELEM, 1.0f, 0.0f);
    float *da1 = copy_floats(da0, NELEM), *db1 = copy_floats(db0, NELEM);
    gpt_residual_backward(f->s, da1, db1, Rf, NELEM);
    sync_ok(f->s);
    check_accumulated("residual", "da", da0, da, da1, NELEM);
    check_accumulated("residual", "db", db0, db, db1, NELEM);

    free(a); free(b); free(Rf); free(out); free(a_d); free(b_d); free(R); free(out_d);
    free(da); free(db); free(g_a); free(g_b); free(da0); free(db0); free(da1); free(db1);
}

/* The fused residual + LayerNorm is exactly the two ops, bit for bit, with its sum written
 * over its second input as the layer does (res2 = x + res2). */
static void test_residual_layernorm(void **state)
{
    fixture *f = *state;
    rng r = {616};
    float *x = rand_floats(&r, N * C, 1.0f, 0.0f), *proj = rand_floats(&r, N * C, 1.0f, 0.0f);
    float *w = rand_floats(&r, C, 1.0f, 1.0f), *b = rand_floats(&r, C, 0.5f, 0.0f);

    float *res_ref = nan_floats(N * C), *out_ref = nan_floats(N * C);
    float *mean_ref = nan_floats(N), *rstd_ref = nan_floats(N);
    gpt_residual_forward(f->s, res_ref, x, proj, N * C);
    gpt_layernorm_forward(f->s, out_ref, mean_ref, rstd_ref, res_ref, w, b, N, C);

    float *res = copy_floats(proj, N * C), *out = nan_floats(N * C);
    float *mean = nan_floats(N), *rstd = nan_floats(N);
    gpt_residual_layernorm_forward(f->s, res, out, mean, rstd, x, res, w, b, N, C);
    sync_ok(f->s);
    check_bitwise("residual_layernorm", "res", res, res_ref, N * C);
    check_bitwise("residual_layernorm", "out", out, out_ref, N * C);
    check_bitwise("residual_layernorm", "mean", mean, mean_ref, N);
    check_bitwise("residual_layernorm", "rstd", rstd, rstd_ref, N);

    free(x); free(proj); free(w); free(b); free(res_ref); free(out_ref); free(mean_ref);
    free(rstd_ref); free(res); free(out); free(mean); free(rstd);
}

/* ======================================================================================
 * cross-entropy
 * ==================================================================================== */

typedef struct crossentropy_ctx {
    double *logits, *losses;
    const int32_t *targets;
    double dloss;
} crossentropy_ctx;

/* The backward takes one scalar dloss for every row, so the objective is
 * L = dloss * sum_n losses[n]. */
static double crossentropy_objective(void *p)
{
    crossentropy_ctx *x = p;
    ref_crossentropy(x->losses, x->logits, x->targets, N, V, VP);
    double s = 0.0;
    for (int n = 0; n < N; n++)
        s += x->losses[n];
    return x->dloss * s;
}

static void test_crossentropy(void **state)
{
    fixture *f = *state;
    rng r = {707};
    int32_t targets[N];
    for (int n = 0; n < N; n++)
        targets[n] = rng_int(&r, V);
    float *logits = rand_floats(&r, N * VP, 3.0f, 0.0f);
    /* large values in the padded columns: any leak into the softmax would show */
    for (int n = 0; n < N; n++)
        for (int v = V; v < VP; v++)
            logits[n * VP + v] = 40.0f + (float)v;
    const float dloss = 0.37f;

    /* One op: the losses, and the logits overwritten by their gradient. */
    float *losses = nan_floats(N);
    float *dlogits = copy_floats(logits, N * VP);
    gpt_crossentropy_forward_backward(f->s, losses, dlogits, targets, dloss, N, V, VP);
    sync_ok(f->s);
    double *logits_d = to_double(logits, N * VP), *losses_d = zero_doubles(N);
    ref_crossentropy(losses_d, logits_d, targets, N, V, VP);
    check_forward("crossentropy", "losses", losses, losses_d, N, FWD_TOL);

    crossentropy_ctx ctx = {logits_d, losses_d, targets, (double)dloss};
    double *g_logits = zero_doubles(N * VP); /* padded columns: FD gives exactly 0 */
    fd_gradient(crossentropy_objective, &ctx, logits_d, N * VP, g_logits);
    check_grad("crossentropy", "dlogits", dlogits, g_logits, N * VP, GRAD_TOL);
    for (int n = 0; n < N; n++)
        for (int v = V; v < VP; v++)
            assert_true(dlogits[n * VP + v] == 0.0f);

    /* Rows are independent: the op on one row alone gives that row's result bit for bit
     * (the head runs it on chunks of rows). */
    const int row = N / 2;
    float one_loss = NAN, *one_row = copy_floats(logits + (size_t)row * VP, VP);
    gpt_crossentropy_forward_backward(f->s, &one_loss, one_row, targets + row, dloss, 1, V, VP);
    sync_ok(f->s);
    check_bitwise("crossentropy", "loss_one_row", &one_loss, losses + row, 1);
    check_bitwise("crossentropy", "dlogits_one_row", one_row, dlogits + (size_t)row * VP, VP);

    free(logits); free(losses); free(logits_d); free(losses_d); free(dlogits);
    free(g_logits); free(one_row);
}

/* The vocabulary-parallel forms (tensor parallelism): T "ranks" of VP / T rows or columns each,
 * T = 2 (the second rank 3 real columns of 8) and T = 4 (the last rank all padding). */
static void test_vocab_parallel(void **state)
{
    fixture *f = *state;
    rng r = {909};
    int32_t tokens[N];
    for (int i = 0; i < N; i++)
        tokens[i] = rng_int(&r, V);
    float *wte = rand_floats(&r, VP * C, 1.0f, 0.0f), *wpe = rand_floats(&r, T * C, 1.0f, 0.0f);
    float *dout = rand_floats(&r, N * C, 1.0f, 0.0f);
    float *logits = rand_floats(&r, N * VP, 3.0f, 0.0f);
    float *whole_out = nan_floats(N * C), *whole_dwte = zero_floats(VP * C), *whole_dwpe = zero_floats(T * C);
    float *whole_losses = nan_floats(N), *whole_grad = copy_floats(logits, N * VP);
    const float dloss = 0.37f;
    gpt_encoder_forward(f->s, whole_out, tokens, wte, wpe, B, T, C);
    gpt_encoder_backward(f->s, whole_dwte, whole_dwpe, dout, tokens, B, T, C);
    gpt_crossentropy_forward_backward(f->s, whole_losses, whole_grad, tokens, dloss, N, V, VP);
    sync_ok(f->s);
    for (int ranks = 2; ranks <= 4; ranks *= 2) {
        const int rows = VP / ranks;
        float *sum = zero_floats(N * C), *stats = nan_floats((size_t)ranks * N * 3);
        float *part_logits[4], *part_losses[4];
        for (int k = 0; k < ranks; k++) {
            /* the embedding: the ranks' outputs add up to the whole one exactly */
            float *out = nan_floats(N * C), *dwte = zero_floats((size_t)rows * C), *dwpe = zero_floats(T * C);
            gpt_encoder_forward_vocab(f->s, out, tokens, wte + (size_t)k * rows * C, k == 0 ? wpe : NULL, B, T, C,
                                      k * rows, rows);
            gpt_encoder_backward_vocab(f->s, dwte, k == 0 ? dwpe : NULL, dout, tokens, B, T, C, k * rows, rows);
            sync_ok(f->s);
            for (int i = 0; i < N * C; i++) sum[i] += out[i];
            check_bitwise("encoder_vocab", "dwte rows", dwte, whole_dwte + (size_t)k * rows * C, (size_t)rows * C);
            if (k == 0) check_bitwise("encoder_vocab", "dwpe", dwpe, whole_dwpe, T * C);
            for (int i = 0; k > 0 && i < T * C; i++) assert_true(dwpe[i] == 0.0f); /* (NULL: untouched) */
            free(out); free(dwte); free(dwpe);
            /* the cross-entropy's stats of this rank's columns */
            const int real = V - k * rows < 0 ? 0 : V - k * rows < rows ? V - k * rows : rows;
            part_logits[k] = nan_floats((size_t)N * rows);
            for (int n = 0; n < N; n++)
                memcpy(part_logits[k] + (size_t)n * rows, logits + (size_t)n * VP + (size_t)k * rows, rows * sizeof(float));
            gpt_crossentropy_stats(f->s, stats + (size_t)k * N * 3, part_logits[k], tokens, N, real, rows, k * rows);
        }
        sync_ok(f->s);
        check_bitwise("encoder_vocab", "sum of the ranks", sum, whole_out, N * C);
        for (int k = 0; k < ranks; k++) {
            const int real = V - k * rows < 0 ? 0 : V - k * rows < rows ? V - k * rows : rows;
            part_losses[k] = nan_floats(N);
            gpt_crossentropy_parallel(f->s, part_losses[k], part_logits[k], tokens, stats, ranks, dloss, N, real, rows,
                                      k * rows);
        }
        sync_ok(f->s);
        for (int k = 0; k < ranks; k++) {
            /* every rank the same losses, those of the whole row within rounding; its columns
             * of the whole gradient */
            check_bitwise("crossentropy_parallel", "losses on every rank", part_losses[k], part_losses[0], N);
            for (int n = 0; n < N; n++) {
                assert_true(fabsf(part_losses[k][n] - whole_losses[n]) <= 1e-6f * fabsf(whole_losses[n]));
                for (int v = 0; v < rows; v++)
                    assert_true(fabsf(part_logits[k][(size_t)n * rows + v] - whole_grad[(size_t)n * VP + k * rows + v]) <=
                                1e-7f);
            }
        }
        for (int k = 0; k < ranks; k++) free(part_logits[k]), free(part_losses[k]);
        free(sum); free(stats);
    }
    free(wte); free(wpe); free(dout); free(logits); free(whole_out); free(whole_dwte); free(whole_dwpe);
    free(whole_losses); free(whole_grad);
}

/* ======================================================================================
 * AdamW, norm_squared
 * ==================================================================================== */

static void test_adamw(void **state)
{
    fixture *f = *state;
    rng r = {808};
    const float lr = 1e-2f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, wd = 0.1f;
    const float grad_scale = 0.5f;
    float *param = rand_floats(&r, NELEM, 1.0f, 0.0f);
    float *m = zero_floats(NELEM), *v = zero_floats(NELEM);
    double *param_d = to_double(param, NELEM), *m_d = zero_doubles(NELEM);
    double *v_d = zero_doubles(NELEM);

    for (int t = 1; t <= 3; t++) {
        float *grad = rand_floats(&r, NELEM, 2.0f, 0.0f);
        gpt_adamw_update(f->s, param, grad, m, v, NELEM, lr, beta1, beta2, eps, wd, t,
                         grad_scale);
        sync_ok(f->s);
        /* the formula of gpt.h, in double, with the same float hyperparameters */
        const double b1 = beta1, b2 = beta2;
        for (int i = 0; i < NELEM; i++) {
            const double g = (double)grad[i] * grad_scale;
            m_d[i] = b1 * m_d[i] + (1.0 - b1) * g;
            v_d[i] = b2 * v_d[i] + (1.0 - b2) * g * g;
            const double m_hat = m_d[i] / (1.0 - pow(b1, t));
            const double v_hat = v_d[i] / (1.0 - pow(b2, t));
            param_d[i] -= (double)lr * (m_hat / (sqrt(v_hat) + eps) + (double)wd * param_d[i]);
        }
        char which[32];
        snprintf(which, sizeof which, "param_t%d", t);
        check_forward("adamw", which, param, param_d, NELEM, FWD_TOL);
        snprintf(which, sizeof which, "m_t%d", t);
        check_forward("adamw", which, m, m_d, NELEM, FWD_TOL);
        snprintf(which, sizeof which, "v_t%d", t);
        check_forward("adamw", which, v, v_d, NELEM, FWD_TOL);
        free(grad);
    }

    /* the update itself (param_t3 - param_t0), not just the parameters: an error in
     * the step would otherwise be diluted by |param| >> |step| */
    rng r0 = {808};
    float *param0 = rand_floats(&r0, NELEM, 1.0f, 0.0f);
    float step[NELEM];
    double step_d[NELEM];
    for (int i = 0; i < NELEM; i++) {
        step[i] = param[i] - param0[i];
        step_d[i] = param_d[i] - (double)param0[i];
    }
    /* the float step inherits the rounding of the stored param (2^-24 |param| ~ 6e-8 per
     * step, |param| <= 1) against a total step of ~3 lr = 0.03: up to ~1e-5 relative
     * (measured 2.6e-6) */
    check_forward("adamw", "step", step, step_d, NELEM, 1e-5);

    /* the variant that refreshes a working copy: the same update, and the copy (fp32 on the
     * CPU backend) equals the updated params */
    float *param2 = copy_floats(param, NELEM), *m2 = copy_floats(m, NELEM);
    float *v2 = copy_floats(v, NELEM), *work = nan_floats(NELEM);
    float *grad = rand_floats(&r, NELEM, 2.0f, 0.0f);
    gpt_adamw_update(f->s, param, grad, m, v, NELEM, lr, beta1, beta2, eps, wd, 4, grad_scale);
    gpt_adamw_update_act(f->s, param2, work, grad, m2, v2, NELEM, lr, beta1, beta2, eps, wd, 4,
                         grad_scale);
    sync_ok(f->s);
    check_bitwise("adamw_act", "param", param2, param, NELEM);
    check_bitwise("adamw_act", "m", m2, m, NELEM);
    check_bitwise("adamw_act", "v", v2, v, NELEM);
    check_bitwise("adamw_act", "working_copy", work, param, NELEM);

    free(param); free(m); free(v); free(param_d); free(m_d); free(v_d); free(param0);
    free(param2); free(m2); free(v2); free(work); free(grad);
}

static void test_norm_squared(void **state)
{
    fixture *f = *state;
    rng r = {909};
    const size_t sizes[] = {0, 1, 5, 63, 64, 65, 1000, 100003};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const size_t n = sizes[k];
        float *x = rand_floats(&r, n, 1.0f, 0.0f);
        float out = NAN;
        gpt_norm_squared(f->s, &out, x, n);
        sync_ok(f->s);
        double ref = 0.0;
        for (size_t i = 0; i < n; i++)
            ref += (double)x[i] * (double)x[i];
        /* accumulated in double: only the final rounding to float (2^-24) remains */
        const double err = ref == 0.0 ? fabs((double)out) : fabs((double)out - ref) / ref;
        printf("normcheck norm_squared n=%zu rel_err=%.3e\n", n, err);
        assert_true(err <= 6.0e-8);
        free(x);
    }
}

/* checksum_chunks: three parts whose boundaries fall inside chunks, against the formula over
 * the concatenated words; each chunk's sum changes when one of its words does, and when two
 * of its words swap, and no other chunk's does; 1 and 3 threads agree. */
static uint64_t chunk_sum_ref(const uint32_t *w, size_t n)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++) sum += gpt_checksum_term(w[i], i);
    return gpt_checksum_fold(sum, n);
}

static void test_checksum_chunks(void **state)
{
    fixture *f = *state;
    rng r = {4242};
    const size_t n0 = 1000, n1 = 77, n2 = 2345, total = n0 + n1 + n2, chunk = 256;
    const size_t nchunks = (total + chunk - 1) / chunk;
    float *all = rand_floats(&r, total, 1.0f, 0.0f);
    const gpt_float_span parts[3] = {{all, n0}, {all + n0, n1}, {all + n0 + n1, n2}};
    uint64_t *got = calloc(nchunks, sizeof *got), *got3 = calloc(nchunks, sizeof *got3);
    uint64_t *after = calloc(nchunks, sizeof *after);
    assert_non_null(got);
    assert_non_null(got3);
    assert_non_null(after);
    gpt_checksum_chunks(f->s1, got, parts, 3, chunk);
    sync_ok(f->s1);
    gpt_checksum_chunks(f->s3, got3, parts, 3, chunk);
    sync_ok(f->s3);
    for (size_t c = 0; c < nchunks; c++) {
        const size_t n = total - c * chunk < chunk ? total - c * chunk : chunk;
        assert_true(got[c] == chunk_sum_ref((const uint32_t *)(const void *)(all + c * chunk), n));
        assert_true(got3[c] == got[c]);
    }
    /* one word of chunk 4 (in the third part) changes: only chunk 4's sum does */
    const uint32_t one_bit = 1u;
    uint32_t bits;
    memcpy(&bits, &all[4 * chunk + 17], 4);
    bits ^= one_bit;
    memcpy(&all[4 * chunk + 17], &bits, 4);
    gpt_checksum_chunks(f->s1, after, parts, 3, chunk);
    sync_ok(f->s1);
    for (size_t c = 0; c < nchunks; c++) assert_true((after[c] != got[c]) == (c == 4));
    /* two words of chunk 1 swap (the sum of their words is the same) */
    const float t = all[chunk + 3];
    all[chunk + 3] = all[chunk + 200];
    all[chunk + 200] = t;
    uint64_t before1 = after[1];
    gpt_checksum_chunks(f->s1, after, parts, 3, chunk);
    sync_ok(f->s1);
    assert_true(after[1] != before1);
    printf("checksum_chunks: %zu chunks over 3 parts = the formula; a flipped bit and a swap show in their chunk only\n",
           nchunks);
    free(all);
    free(got);
    free(got3);
    free(after);
}

/* AdamW with the checksum terms of what it writes (gpt_checksum_acc), as megatron-lm's
 * ZeRO-3 optimizer makes them for gemini: a shard of three blocks, each updated in two calls
 * (the weight-decay split), each block's shard with padding that no update writes; the raw
 * sums started from the padding's terms and folded afterwards equal checksum_chunks over
 * [param | m | v] after the update, on 1 and 3 threads, with chunks that end inside the
 * calls; and the updated state is the same bits as without the sums. */
static void test_adamw_checksum_sums(void **state)
{
    fixture *f = *state;
    rng r = {5150};
    const size_t S[3] = {700, 333, 1201}, real[3] = {690, 333, 1190}, chunk = 128;
    const size_t n = S[0] + S[1] + S[2], total = 3 * n, nchunks = (total + chunk - 1) / chunk;
    float *state0 = rand_floats(&r, 3 * n, 0.5f, 0.0f); /* [param | m | v] */
    for (size_t i = 2 * n; i < 3 * n; i++) state0[i] = fabsf(state0[i]);
    size_t off = 0;
    for (int b = 0; b < 3; b++, off += S[b - 1])
        for (int a = 0; a < 3; a++)
            for (size_t i = real[b]; i < S[b]; i++) state0[a * n + off + i] = 0.0f; /* padding */
    float *grad = rand_floats(&r, n, 1.0f, 0.0f);
    uint64_t *want = calloc(nchunks, sizeof *want), *init = calloc(nchunks, sizeof *init);
    uint64_t *got = calloc(nchunks, sizeof *got);
    float *plain = copy_floats(state0, 3 * n), *summed = copy_floats(state0, 3 * n);
    assert_non_null(want); assert_non_null(init); assert_non_null(got);
    /* the padding's terms, as gemini starts the sums */
    off = 0;
    for (int b = 0; b < 3; b++, off += S[b - 1])
        for (int a = 0; a < 3; a++)
            for (size_t w = a * n + off + real[b]; w < a * n + off + S[b]; w++)
                init[w / chunk] += gpt_checksum_term(0, w % chunk);
    for (int threads = 1; threads <= 3; threads += 2) {
        gpt_stream *s = threads == 1 ? f->s1 : f->s3;
        memcpy(plain, state0, 3 * n * sizeof(float));
        memcpy(summed, state0, 3 * n * sizeof(float));
        memcpy(got, init, nchunks * sizeof *got);
        off = 0;
        for (int b = 0; b < 3; b++, off += S[b - 1]) {
            const size_t split = real[b] / 3; /* weight decay on the first third */
            for (int part = 0; part < 2; part++) {
                const size_t lo = part ? split : 0, len = part ? real[b] - split : split;
                const float wd = part ? 0.0f : 0.1f;
                const gpt_checksum_acc acc = {got, chunk, {off + lo, n + off + lo, 2 * n + off + lo}};
                gpt_adamw_update(s, plain + off + lo, grad + off + lo, plain + n + off + lo, plain + 2 * n + off + lo,
                                 len, 1e-2f, 0.9f, 0.95f, 1e-8f, wd, 3, 0.5f);
                gpt_adamw_update_sums(s, summed + off + lo, NULL, grad + off + lo, summed + n + off + lo,
                                      summed + 2 * n + off + lo, len, 1e-2f, 0.9f, 0.95f, 1e-8f, wd, 3, 0.5f, &acc);
            }
        }
        gpt_checksum_fold_chunks(s, got, total, chunk);
        const gpt_float_span parts[3] = {{summed, n}, {summed + n, n}, {summed + 2 * n, n}};
        gpt_checksum_chunks(s, want, parts, 3, chunk);
        sync_ok(s);
        check_bitwise("adamw_sums", "state", summed, plain, 3 * n);
        for (size_t c = 0; c < nchunks; c++)
            if (got[c] != want[c]) fail_msg("%d threads: chunk %zu of %zu: %016llx, a pass says %016llx", threads, c,
                                            nchunks, (unsigned long long)got[c], (unsigned long long)want[c]);
    }
    /* and they are not the sums of the state before the update */
    const gpt_float_span before[3] = {{state0, n}, {state0 + n, n}, {state0 + 2 * n, n}};
    gpt_checksum_chunks(f->s1, want, before, 3, chunk);
    sync_ok(f->s1);
    assert_true(memcmp(want, got, nchunks * sizeof *got) != 0);
    printf("adamw sums: %zu chunks of [param | m | v] summed by the update = a pass after it (1 and 3 threads)\n",
           nchunks);
    free(state0); free(grad); free(want); free(init); free(got); free(plain); free(summed);
}

/* ======================================================================================
 * determinism: 1 thread vs 3 threads, and call to call
 * ==================================================================================== */

static void test_determinism(void **state)
{
    fixture *f = *state;
    gpt_stream *s1 = f->s1, *s3 = f->s3;
    rng r = {1001};

    { /* matmul, shapes that split into several tiles in every dimension */
        const int n = 67, c = 48, oc = 80;
        float *inp = rand_floats(&r, (size_t)n * c, 1.0f, 0.0f);
        float *w = rand_floats(&r, (size_t)oc * c, 1.0f, 0.0f);
        float *bias = rand_floats(&r, oc, 1.0f, 0.0f);
        float *dout = rand_floats(&r, (size_t)n * oc, 1.0f, 0.0f);
        float *dw0 = rand_floats(&r, (size_t)oc * c, 1.0f, 0.0f);
        float *db0 = rand_floats(&r, oc, 1.0f, 0.0f);
        float *out1 = nan_floats((size_t)n * oc), *out3 = nan_floats((size_t)n * oc);
        float *dinp1 = nan_floats((size_t)n * c), *dinp3 = nan_floats((size_t)n * c);
        float *dw1 = copy_floats(dw0, (size_t)oc * c), *dw3 = copy_floats(dw0, (size_t)oc * c);
        float *db1 = copy_floats(db0, oc), *db3 = copy_floats(db0, oc);
        gpt_matmul_forward(s1, out1, inp, w, bias, n, c, oc);
        sync_ok(s1);
        gpt_matmul_forward(s3, out3, inp, w, bias, n, c, oc);
        sync_ok(s3);
        gpt_matmul_backward(s1, dinp1, dw1, db1, dout, inp, w, n, c, oc, GPT_GRAD_ACCUMULATE);
        sync_ok(s1);
        gpt_matmul_backward(s3, dinp3, dw3, db3, dout, inp, w, n, c, oc, GPT_GRAD_ACCUMULATE);
        sync_ok(s3);
        check_bitwise("matmul_forward", "out_1vs3threads", out1, out3, (size_t)n * oc);
        check_bitwise("matmul_backward", "dinp_1vs3threads", dinp1, dinp3, (size_t)n * c);
        check_bitwise("matmul_backward", "dw_1vs3threads", dw1, dw3, (size_t)oc * c);
        check_bitwise("matmul_backward", "dbias_1vs3threads", db1, db3, oc);
        /* call to call */
        gpt_matmul_forward(s3, out1, inp, w, bias, n, c, oc);
        sync_ok(s3);
        check_bitwise("matmul_forward", "out_repeat", out1, out3, (size_t)n * oc);
        free(inp); free(w); free(bias); free(dout); free(dw0); free(db0); free(out1);
        free(out3); free(dinp1); free(dinp3); free(dw1); free(dw3); free(db1); free(db3);
    }

    { /* layernorm backward; C spans several column blocks of the dw/db reduction */
        const int n = 67, c = 200;
        float *inp = rand_floats(&r, (size_t)n * c, 1.0f, 0.3f);
        float *w = rand_floats(&r, c, 0.5f, 1.0f), *b = rand_floats(&r, c, 0.5f, 0.0f);
        float *dout = rand_floats(&r, (size_t)n * c, 1.0f, 0.0f);
        float *out = nan_floats((size_t)n * c), *mean = nan_floats(n), *rstd = nan_floats(n);
        gpt_layernorm_forward(s1, out, mean, rstd, inp, w, b, n, c);
        sync_ok(s1);
        float *di0 = rand_floats(&r, (size_t)n * c, 1.0f, 0.0f);
        float *di1 = copy_floats(di0, (size_t)n * c), *di3 = copy_floats(di0, (size_t)n * c);
        float *dw1 = zero_floats(c), *dw3 = zero_floats(c);
        float *db1 = zero_floats(c), *db3 = zero_floats(c);
        gpt_layernorm_backward(s1, di1, dw1, db1, dout, inp, w, mean, rstd, n, c, GPT_GRAD_ACCUMULATE);
        sync_ok(s1);
        gpt_layernorm_backward(s3, di3, dw3, db3, dout, inp, w, mean, rstd, n, c, GPT_GRAD_ACCUMULATE);
        sync_ok(s3);
        check_bitwise("layernorm_backward", "dinp_1vs3threads", di1, di3, (size_t)n * c);
        check_bitwise("layernorm_backward", "dw_1vs3threads", dw1, dw3, c);
        check_bitwise("layernorm_backward", "db_1vs3threads", db1, db3, c);
        free(inp); free(w); free(b); free(dout); free(out); free(mean); free(rstd);
        free(di0); free(di1); free(di3); free(dw1); free(dw3); free(db1); free(db3);
    }

    { /* attention backward */
        const int b = 2, t = 33, c = 48, nh = 3;
        const size_t nqkv = (size_t)b * t * 3 * c, nrows = (size_t)b * nh * t;
        float *qkv = rand_floats(&r, nqkv, 1.0f, 0.0f);
        float *dout = rand_floats(&r, (size_t)b * t * c, 1.0f, 0.0f);
        float *out = nan_floats((size_t)b * t * c), *lse = nan_floats(nrows);
        gpt_attention_forward(s1, out, lse, qkv, b, t, c, nh);
        sync_ok(s1);
        float *lse3 = nan_floats(nrows), *out3 = nan_floats((size_t)b * t * c);
        gpt_attention_forward(s3, out3, lse3, qkv, b, t, c, nh);
        sync_ok(s3);
        check_bitwise("attention_forward", "out_1vs3threads", out, out3, (size_t)b * t * c);
        check_bitwise("attention_forward", "lse_1vs3threads", lse, lse3, nrows);
        float *dqkv1 = nan_floats(nqkv), *dqkv3 = nan_floats(nqkv);
        float *delta1 = nan_floats(nrows), *delta3 = nan_floats(nrows);
        gpt_attention_backward(s1, dqkv1, delta1, dout, qkv, out, lse, b, t, c, nh);
        sync_ok(s1);
        gpt_attention_backward(s3, dqkv3, delta3, dout, qkv, out, lse, b, t, c, nh);
        sync_ok(s3);
        check_bitwise("attention_backward", "dqkv_1vs3threads", dqkv1, dqkv3, nqkv);
        free(qkv); free(dout); free(out); free(lse); free(lse3); free(out3); free(dqkv1);
        free(dqkv3); free(delta1); free(delta3);
    }

    { /* norm_squared, and call to call */
        const size_t n = 100003;
        float *x = rand_floats(&r, n, 1.0f, 0.0f);
        float o1 = NAN, o3 = NAN, o3b = NAN;
        gpt_norm_squared(s1, &o1, x, n);
        sync_ok(s1);
        gpt_norm_squared(s3, &o3, x, n);
        sync_ok(s3);
        gpt_norm_squared(s3, &o3b, x, n);
        sync_ok(s3);
        check_bitwise("norm_squared", "1vs3threads", &o1, &o3, 1);
        check_bitwise("norm_squared", "repeat", &o3, &o3b, 1);
        free(x);
    }

    { /* encoder backward with many repeats, columns over several blocks */
        const int b = 3, t = 29, c = 200, vp = 7;
        int32_t tokens[3 * 29];
        for (int i = 0; i < b * t; i++)
            tokens[i] = rng_int(&r, vp);
        float *dout = rand_floats(&r, (size_t)b * t * c, 1.0f, 0.0f);
        float *dwte1 = zero_floats((size_t)vp * c), *dwte3 = zero_floats((size_t)vp * c);
        float *dwpe1 = zero_floats((size_t)t * c), *dwpe3 = zero_floats((size_t)t * c);
        gpt_encoder_backward(s1, dwte1, dwpe1, dout, tokens, b, t, c);
        sync_ok(s1);
        gpt_encoder_backward(s3, dwte3, dwpe3, dout, tokens, b, t, c);
        sync_ok(s3);
        check_bitwise("encoder_backward", "dwte_1vs3threads", dwte1, dwte3, (size_t)vp * c);
        check_bitwise("encoder_backward", "dwpe_1vs3threads", dwpe1, dwpe3, (size_t)t * c);
        free(dout); free(dwte1); free(dwte3); free(dwpe1); free(dwpe3);
    }
}

/* ======================================================================================
 * the backend's memory and stream primitives
 * ==================================================================================== */

static void test_backend_primitives(void **state)
{
    fixture *f = *state;
    const gpt_backend *be = f->be;
    const gpt_backend_ops *ops = be->ops;
    assert_string_equal(be->name, "cpu");

    size_t free_b = 0, total_b = 0;
    assert_int_equal(ops->dev_mem_info(be, &free_b, &total_b), GPT_OK);
    assert_true(total_b > 0 && free_b <= total_b);

    gpt_stream *s = NULL;
    assert_int_equal(ops->stream_create(be, &s), GPT_OK);
    assert_ptr_equal(s->be, be);

    const size_t n = 1000;
    void *a = NULL, *b = NULL, *z = NULL;
    assert_int_equal(ops->dev_alloc(be, &a, n * sizeof(float)), GPT_OK);
    assert_int_equal(ops->dev_alloc(be, &b, n * sizeof(float)), GPT_OK);
    assert_int_equal(ops->dev_alloc(be, &z, 0), GPT_OK);
    assert_non_null(a);
    assert_non_null(z);
    assert_int_equal((uintptr_t)a % 64, 0);
    assert_int_equal((uintptr_t)b % 64, 0);

    /* an impossible allocation reports OOM rather than crashing */
    void *huge = NULL;
    assert_int_equal(ops->dev_alloc(be, &huge, SIZE_MAX / 2), GPT_ERR_OOM);
    assert_null(huge);

    rng r = {1111};
    float *h = rand_floats(&r, n, 1.0f, 0.0f), *back = nan_floats(n);
    assert_int_equal(ops->memcpy_h2d(s, a, h, n * sizeof(float)), GPT_OK);
    assert_int_equal(ops->memcpy_d2d(s, b, a, n * sizeof(float)), GPT_OK);
    assert_int_equal(ops->memcpy_d2h(s, back, b, n * sizeof(float)), GPT_OK);
    assert_int_equal(ops->stream_sync(s), GPT_OK);
    assert_memory_equal(back, h, n * sizeof(float));
    assert_int_equal(ops->memset_zero(s, b, n * sizeof(float)), GPT_OK);
    assert_int_equal(ops->stream_sync(s), GPT_OK);
    for (size_t i = 0; i < n; i++)
        assert_true(((float *)b)[i] == 0.0f);

    ops->dev_free(be, a);
    ops->dev_free(be, b);
    ops->dev_free(be, z);
    ops->stream_destroy(s);
    free(h);
    free(back);
}

/* ======================================================================================
 * bf16 emulation (gpt_cpu_backend_create_dtype GPT_BF16): every tensor of the activation type
 * is widened for the op and rounded to nearest even when stored.  Checked against the fp32
 * backend run on the widened values: each bf16 output equals the rounded fp32 output bit for
 * bit — overwritten (matmul), stored and then read again (matmul + GELU, residual +
 * LayerNorm), accumulated into (LayerNorm backward's dinp), and the working copies written
 * by params_to_act and AdamW.
 * ==================================================================================== */

/* n values rounded to bf16, and the same values widened back to fp32. */
static uint16_t *to_bf16(const float *x, size_t n, float **wide)
{
    uint16_t *h = xmalloc(n * sizeof *h);
    *wide = xmalloc(n * sizeof **wide);
    for (size_t i = 0; i < n; i++) {
        h[i] = gpt_f32_to_bf16(x[i]);
        (*wide)[i] = gpt_bf16_to_f32(h[i]);
    }
    return h;
}

/* How many of n bf16 values differ from the rounded fp32 ones. */
static size_t bf16_differ(const uint16_t *got, const float *want, size_t n)
{
    size_t d = 0;
    for (size_t i = 0; i < n; i++) d += got[i] != gpt_f32_to_bf16(want[i]);
    return d;
}

static void test_bf16_emulation(void **state)
{
    fixture *f = *state;
    gpt_backend *be = NULL;
    gpt_stream *s = NULL;
    assert_int_equal(gpt_cpu_backend_create_dtype(&be, 2, GPT_BF16), GPT_OK);
    assert_int_equal(be->dtype, GPT_BF16);
    assert_int_equal(be->ops->stream_create(be, &s), GPT_OK);
    rng r = {4242};
    const int n = N, c = C, oc = 3 * C;
    float *inp_f = rand_floats(&r, (size_t)n * c, 2.0f, -1.0f), *w_f = rand_floats(&r, (size_t)oc * c, 0.5f, -0.25f);
    float *bias_f = rand_floats(&r, oc, 0.2f, -0.1f), *inp_w, *w_w, *bias_w;
    uint16_t *inp = to_bf16(inp_f, (size_t)n * c, &inp_w), *w = to_bf16(w_f, (size_t)oc * c, &w_w);
    uint16_t *bias = to_bf16(bias_f, oc, &bias_w);

    /* matmul + GELU: the pre-activation rounded when stored, the GELU of the stored value */
    uint16_t *pre = xmalloc((size_t)n * oc * sizeof *pre), *act = xmalloc((size_t)n * oc * sizeof *act);
    float *pre32 = nan_floats((size_t)n * oc), *act32 = nan_floats((size_t)n * oc), *pre_w = nan_floats((size_t)n * oc);
    gpt_matmul_forward_gelu(s, act, pre, inp, w, bias, n, c, oc);
    sync_ok(s);
    gpt_matmul_forward(f->s, pre32, inp_w, w_w, bias_w, n, c, oc);
    sync_ok(f->s);
    for (int i = 0; i < n * oc; i++) pre_w[i] = gpt_bf16_to_f32(pre[i]);
    gpt_gelu_forward(f->s, act32, pre_w, (size_t)n * oc);
    sync_ok(f->s);
    assert_int_equal(bf16_differ(pre, pre32, (size_t)n * oc), 0);
    assert_int_equal(bf16_differ(act, act32, (size_t)n * oc), 0);

    /* matmul + residual: the product rounded when stored, then the sum of the stored values */
    {
        float *res_f = rand_floats(&r, (size_t)n * oc, 2.0f, -1.0f), *res_w;
        uint16_t *res = to_bf16(res_f, (size_t)n * oc, &res_w);
        uint16_t *sum = xmalloc((size_t)n * oc * sizeof *sum);
        float *prod_w = nan_floats((size_t)n * oc), *sum32 = nan_floats((size_t)n * oc);
        gpt_matmul_forward_residual(s, sum, inp, w, bias, res, n, c, oc);
        sync_ok(s);
        for (int i = 0; i < n * oc; i++) prod_w[i] = gpt_bf16_to_f32(pre[i]); /* the stored product */
        gpt_residual_forward(f->s, sum32, res_w, prod_w, (size_t)n * oc);
        sync_ok(f->s);
        assert_int_equal(bf16_differ(sum, sum32, (size_t)n * oc), 0);
        free(res_f); free(res_w); free(res); free(sum); free(prod_w); free(sum32);
    }

    /* LayerNorm backward: dinp accumulates into the stored bf16 values */
    float *g_f = rand_floats(&r, (size_t)n * c, 1.0f, -0.5f), *d0_f = rand_floats(&r, (size_t)n * c, 1.0f, -0.5f);
    float *lw_f = rand_floats(&r, c, 1.0f, 0.5f), *g_w, *d0_w, *lw_w;
    uint16_t *g = to_bf16(g_f, (size_t)n * c, &g_w), *dinp = to_bf16(d0_f, (size_t)n * c, &d0_w), *lw = to_bf16(lw_f, c, &lw_w);
    float *mean = nan_floats(n), *rstd = nan_floats(n), *dw = zero_floats(c), *db = zero_floats(c);
    float *mean32 = nan_floats(n), *rstd32 = nan_floats(n), *dw32 = zero_floats(c), *db32 = zero_floats(c);
    uint16_t *ln = xmalloc((size_t)n * c * sizeof *ln);
    float *ln32 = nan_floats((size_t)n * c);
    gpt_layernorm_forward(s, ln, mean, rstd, inp, lw, bias, n, c);
    gpt_layernorm_backward(s, dinp, dw, db, g, inp, lw, mean, rstd, n, c, GPT_GRAD_ACCUMULATE);
    sync_ok(s);
    gpt_layernorm_forward(f->s, ln32, mean32, rstd32, inp_w, lw_w, bias_w, n, c);
    gpt_layernorm_backward(f->s, d0_w, dw32, db32, g_w, inp_w, lw_w, mean32, rstd32, n, c, GPT_GRAD_ACCUMULATE);
    sync_ok(f->s);
    assert_int_equal(bf16_differ(ln, ln32, (size_t)n * c), 0);
    assert_int_equal(bf16_differ(dinp, d0_w, (size_t)n * c), 0);
    assert_memory_equal(dw, dw32, c * sizeof(float)); /* (fp32 in both) */

    /* the working copies: params_to_act and AdamW's param_act, the fp32 params rounded */
    float *p = rand_floats(&r, NELEM, 1.0f, -0.5f), *grad = rand_floats(&r, NELEM, 1.0f, -0.5f);
    float *m = zero_floats(NELEM), *v = zero_floats(NELEM);
    uint16_t work[NELEM], copy[NELEM];
    gpt_params_to_act(s, copy, p, NELEM);
    gpt_adamw_update_act(s, p, work, grad, m, v, NELEM, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 1.0f);
    sync_ok(s);
    size_t bad = 0;
    for (int i = 0; i < NELEM; i++) bad += work[i] != gpt_f32_to_bf16(p[i]);
    assert_int_equal(bad, 0);
    assert_int_not_equal(memcmp(copy, work, sizeof work), 0); /* (the update moved them) */

    /* add_f32: fp32 in, fp32 out on a bf16 backend (gradient sums), not rounded */
    float sum[NELEM], want[NELEM];
    for (int i = 0; i < NELEM; i++) want[i] = grad[i] + p[i];
    gpt_add_f32(s, sum, grad, p, NELEM);
    sync_ok(s);
    assert_memory_equal(sum, want, sizeof sum);

    be->ops->stream_destroy(s);
    gpt_cpu_backend_destroy(be);
    float *fl[] = {inp_f, w_f, bias_f, inp_w, w_w, bias_w, pre32, act32, pre_w, g_f, d0_f, lw_f, g_w, d0_w, lw_w,
                   mean, rstd, dw, db, mean32, rstd32, dw32, db32, ln32, p, grad, m, v};
    for (size_t i = 0; i < sizeof fl / sizeof fl[0]; i++) free(fl[i]);
    uint16_t *hl[] = {inp, w, bias, pre, act, g, dinp, lw, ln};
    for (size_t i = 0; i < sizeof hl / sizeof hl[0]; i++) free(hl[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_backend_primitives),
        cmocka_unit_test(test_encoder),
        cmocka_unit_test(test_layernorm),
        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_matmul_large),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_gelu),
        cmocka_unit_test(test_residual),
        cmocka_unit_test(test_crossentropy),
        cmocka_unit_test(test_vocab_parallel),
        cmocka_unit_test(test_residual_layernorm),
        cmocka_unit_test(test_adamw),
        cmocka_unit_test(test_norm_squared),
        cmocka_unit_test(test_checksum_chunks),
        cmocka_unit_test(test_adamw_checksum_sums),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_bf16_emulation),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
