/*
 * cpu_matmul.c — the linear layer, out = inp @ w^T + bias, and its backward.
 *
 * All three products (forward, dinp, dw) are one routine, gemm_acc: C += A @ B, where A
 * and B are addressed through strides so that a transposed operand costs nothing to
 * express.  gemm_acc is cache-blocked the usual way:
 *
 *   - C is cut into tiles of MC rows x NR columns; a tile is one OpenMP work item, so
 *     every element of C is produced by exactly one thread.
 *   - the reduction dimension is cut into blocks of KC; for each block the KC x NR slice
 *     of B is copied ("packed") into a small contiguous buffer that stays in L1 while the
 *     tile's rows stream past it.
 *   - a micro-kernel keeps an MR x NR block of C in registers and, for each p of the
 *     reduction, adds A[i][p] * B[p][0..NR-1] to row i: the inner loop runs over NR
 *     independent outputs, so the compiler vectorises it without reassociating anything.
 *
 * Determinism: each element C[i][j] is computed as ((C[i][j] + A[i][0] B[0][j]) +
 * A[i][1] B[1][j]) + ... strictly in order of p: the blocking changes only which
 * registers and buffers the partial sum lives in, never the order of the additions, and
 * the tiling depends only on the shapes.  The result is therefore bit-identical for any
 * number of threads.
 */
#include <stddef.h>

#include "cpu_ops.h"

/* Register block of the micro-kernel: MR rows x NR columns of C.  6 x 16 floats are 12
 * AVX registers of accumulators (or 6 AVX-512 ones), leaving room for B and a broadcast. */
#define MR 6
#define NR 16
/* Cache blocks: a tile of C is MC rows (a multiple of MR); the packed KC x NR slice of B
 * is 16 KiB, which fits in L1 next to the MR rows of A being read. */
#define MC (8 * MR)
#define KC 256

static inline int imin(int a, int b) { return a < b ? a : b; }

/* Copies B[k0 .. k0+kc-1][j0 .. j0+nr-1] into bp (kc x NR, row-major), zero-filling the
 * columns nr..NR-1 so the micro-kernel can always run full width. */
static void pack_b(float *bp, const float *b, ptrdiff_t b_ks, ptrdiff_t b_js, int k0, int kc,
                   int j0, int nr)
{
    for (int p = 0; p < kc; p++) {
        const float *src = b + (ptrdiff_t)(k0 + p) * b_ks + (ptrdiff_t)j0 * b_js;
        float *dst = bp + (ptrdiff_t)p * NR;
        for (int j = 0; j < nr; j++)
            dst[j] = src[(ptrdiff_t)j * b_js];
        for (int j = nr; j < NR; j++)
            dst[j] = 0.0f;
    }
}

/* c (mr x nr, row stride ldc) += A (mr x kc) @ bp (kc x NR packed), for mr <= MR and
 * nr <= NR.  arow[r] points at A[r][0] of this k-block; element p is arow[r][p * a_ks].
 * Rows mr..MR-1 of arow repeat a valid row: they are computed and thrown away, which
 * keeps a single code path (and a single rounding behaviour) for edge tiles. */
static void micro_kernel(float *c, ptrdiff_t ldc, int mr, int nr, const float *arow[MR],
                         ptrdiff_t a_ks, const float *bp, int kc)
{
    float acc[MR][NR];
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < NR; j++)
            acc[r][j] = (r < mr && j < nr) ? c[r * ldc + j] : 0.0f;

    for (int p = 0; p < kc; p++) {
        const float *bv = bp + (ptrdiff_t)p * NR;
        for (int r = 0; r < MR; r++) {
            const float av = arow[r][(ptrdiff_t)p * a_ks];
            for (int j = 0; j < NR; j++)
                acc[r][j] += av * bv[j];
        }
    }

    for (int r = 0; r < mr; r++)
        for (int j = 0; j < nr; j++)
            c[r * ldc + j] = acc[r][j];
}

/* C (m x n, row-major, row stride ldc) += A (m x k) @ B (k x n), where
 *   A[i][p] = a[i * a_rs + p * a_ks]   and   B[p][j] = b[p * b_ks + j * b_js].
 * Parallel over the (MC x NR) tiles of C. */
static void gemm_acc(int nthreads, float *c, ptrdiff_t ldc, const float *a, ptrdiff_t a_rs,
                     ptrdiff_t a_ks, const float *b, ptrdiff_t b_ks, ptrdiff_t b_js, int m,
                     int n, int k)
{
    const int row_tiles = (m + MC - 1) / MC;
    const int col_tiles = (n + NR - 1) / NR;

#pragma omp parallel for collapse(2) schedule(static) num_threads(nthreads)
    for (int ti = 0; ti < row_tiles; ti++) {
        for (int tj = 0; tj < col_tiles; tj++) {
            const int i0 = ti * MC, i1 = imin(i0 + MC, m);
            const int j0 = tj * NR, nr = imin(NR, n - j0);
            float bp[KC * NR]; /* this thread's packed slice of B */

            for (int k0 = 0; k0 < k; k0 += KC) {
                const int kc = imin(KC, k - k0);
                pack_b(bp, b, b_ks, b_js, k0, kc, j0, nr);
                for (int i = i0; i < i1; i += MR) {
                    const int mr = imin(MR, i1 - i);
                    const float *arow[MR];
                    for (int r = 0; r < MR; r++)
                        arow[r] = a + (ptrdiff_t)(i + imin(r, mr - 1)) * a_rs +
                                  (ptrdiff_t)k0 * a_ks;
                    micro_kernel(c + (ptrdiff_t)i * ldc + j0, ldc, mr, nr, arow, a_ks, bp,
                                 kc);
                }
            }
        }
    }
}

/*
 * out (N,OC) = inp (N,C) @ w^T + bias,   w (OC,C), bias (OC) or NULL.
 * out[n][o] = bias[o] + sum_c inp[n][c] w[o][c], summed in order of c.
 */
void cpu_matmul_forward(gpt_stream *s, float *out, const float *inp, const float *w,
                        const float *bias, int N, int C, int OC)
{
    const int nt = cpu_nthreads(s);

    /* out starts as the bias (forward overwrites), then the product is added to it. */
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int n = 0; n < N; n++) {
        float *row = out + (ptrdiff_t)n * OC;
        for (int o = 0; o < OC; o++)
            row[o] = bias != NULL ? bias[o] : 0.0f;
    }

    /* A = inp (rows n, reduction c);  B[c][o] = w[o][c]  (w read transposed). */
    gemm_acc(nt, out, OC, inp, C, 1, w, 1, C, N, OC, C);
}

/*
 * Backward of out = inp @ w^T + bias, given dout (N,OC):
 *   dinp  (N,C)  = dout @ w             overwritten (skipped if dinp is NULL)
 *   dw    (OC,C) += dout^T @ inp        accumulated (skipped if dw is NULL)
 *   dbias (OC)   += sum_n dout[n][:]    accumulated (skipped if dbias is NULL)
 * Each is a serial sum, in order, over its reduction index (o for dinp, n for dw, dbias).
 * dinp comes last, so that it may alias inp (gpt.h).
 */
void cpu_matmul_backward(gpt_stream *s, float *dinp, float *dw, float *dbias,
                         const float *dout, const float *inp, const float *w, int N, int C,
                         int OC)
{
    const int nt = cpu_nthreads(s);

    if (dw != NULL) {
        /* dw[o][c] += sum_n dout[n][o] inp[n][c]:  A[o][n] = dout[n][o] (dout read
         * transposed), B = inp (as stored). */
        gemm_acc(nt, dw, C, dout, 1, OC, inp, C, 1, OC, C, N);
    }

    if (dbias != NULL) {
        /* Column sums of dout.  Each thread owns a block of columns and walks all rows,
         * so the inner loop is over contiguous independent columns (vectorisable) and
         * each column's sum runs over n in order. */
        const int nblocks = (OC + NR - 1) / NR;
#pragma omp parallel for schedule(static) num_threads(nt)
        for (int bj = 0; bj < nblocks; bj++) {
            const int o0 = bj * NR, width = imin(NR, OC - o0);
            float sum[NR] = {0};
            for (int n = 0; n < N; n++) {
                const float *row = dout + (ptrdiff_t)n * OC + o0;
                for (int j = 0; j < width; j++)
                    sum[j] += row[j];
            }
            for (int j = 0; j < width; j++)
                dbias[o0 + j] += sum[j];
        }
    }

    if (dinp != NULL) {
#pragma omp parallel for schedule(static) num_threads(nt)
        for (int n = 0; n < N; n++) {
            float *row = dinp + (ptrdiff_t)n * C;
            for (int c = 0; c < C; c++)
                row[c] = 0.0f;
        }
        /* dinp[n][c] = sum_o dout[n][o] w[o][c]:  A = dout, B = w (as stored). */
        gemm_acc(nt, dinp, C, dout, OC, 1, w, C, 1, N, C, OC);
    }
}
