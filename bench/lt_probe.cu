/*
 * lt_probe.cu — how far is cuBLASLt's first heuristic choice from the fastest of its
 * candidates, on the products of one megatron-lm layer (h2048 b4 s1024) and the head?
 *
 * For each product (written as cuda_matmul.cu writes it: column-major transposes) and each
 * math mode (TF32, bf16, strict fp32), it asks the heuristic for up to 16 algorithms, times each (median
 * of 7 runs after 2 warm-ups, CUDA events) on scratch buffers, and prints the heuristic's
 * first choice against the best.  The head's products appear twice: on one chunk of 1024
 * rows (what the model runs, four times per iteration) and on all 4096 rows at once.  A measurement tool for deciding whether aebench should
 * tune its plans; it is not part of aebench.
 *
 * Those timings are short bursts on constant operands (every byte 0x3c).  `--sustain S` asks
 * what a GEMM keeps up for S seconds, as in a training step: the bf16 fc product (the model's
 * largest, m 8192 n 4096 k 2048, heuristic #0) back to back, first on the constant operands,
 * then on random ones (bits that toggle draw more power), one line per batch of 40 products
 * (`sustain DATA T_S TFLOPS`, T_S from the start of that data's run, whose wall-clock time
 * `sustain_start DATA EPOCH_S` gives); bench/clocks_gpu.sh samples the clock and the power
 * beside it.
 *
 * `--sustain-algos S`: on random operands, each of the heuristic's first 8 candidates for a
 * few products, S seconds each: whether another than #0 is faster under the power cap.
 *
 *   nvcc -O2 -arch=sm_90 bench/lt_probe.cu -lcublasLt -o lt_probe && ./lt_probe [--mode M | --sustain S]
 */
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <ctime>
#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench_check.cuh"

struct product {
    const char *name;
    int transa, transb, m, n, k, lda, ldb, ldc;
    int bias;    /* BIAS epilogue */
    int d_fp32;  /* D in fp32 whatever the inputs (weight gradients) */
    float beta;
};

static const int N = 4096, C = 2048, Vp = 50304, rows = 1024;
static const product prods[] = {
    /* forward: out^T (OC,N) = w^T-as-stored . inp^T */
    {"fwd qkv", 1, 0, 3 * C, N, C, C, C, 3 * C, 1, 0, 0.0f},
    {"fwd proj", 1, 0, C, N, C, C, C, C, 1, 0, 0.0f},
    {"fwd fc", 1, 0, 4 * C, N, C, C, C, 4 * C, 1, 0, 0.0f},
    {"fwd fcproj", 1, 0, C, N, 4 * C, 4 * C, 4 * C, C, 1, 0, 0.0f},
    {"fwd logits", 1, 0, Vp, rows, C, C, C, Vp, 0, 0, 0.0f},
    {"fwd logits x4", 1, 0, Vp, N, C, C, C, Vp, 0, 0, 0.0f},
    /* dinp^T (C,N) = w . dout^T */
    {"dinp qkv", 0, 0, C, N, 3 * C, C, 3 * C, C, 0, 0, 0.0f},
    {"dinp proj", 0, 0, C, N, C, C, C, C, 0, 0, 0.0f},
    {"dinp fc", 0, 0, C, N, 4 * C, C, 4 * C, C, 0, 0, 0.0f},
    {"dinp fcproj", 0, 0, 4 * C, N, C, 4 * C, C, 4 * C, 0, 0, 0.0f},
    {"dinp logits", 0, 0, C, rows, Vp, C, Vp, C, 0, 0, 0.0f},
    {"dinp logits x4", 0, 0, C, N, Vp, C, Vp, C, 0, 0, 0.0f},
    /* dw^T (C,OC) += inp^T . dout */
    {"dw qkv", 0, 1, C, 3 * C, N, C, 3 * C, C, 0, 1, 1.0f},
    {"dw proj", 0, 1, C, C, N, C, C, C, 0, 1, 1.0f},
    {"dw fc", 0, 1, C, 4 * C, N, C, 4 * C, C, 0, 1, 1.0f},
    {"dw fcproj", 0, 1, 4 * C, C, N, 4 * C, C, 4 * C, 0, 1, 1.0f},
    {"dw logits", 0, 1, C, Vp, rows, C, Vp, C, 0, 1, 1.0f},
    {"dw logits x4", 0, 1, C, Vp, N, C, Vp, C, 0, 1, 1.0f},
    /* the same weight gradients with one operand transposed first (row-major (C, N) or (OC, N):
     * its K, the tokens, contiguous): TF32 tensor cores take only K-major operands, and the
     * products above have both operands MN-major */
    {"dw qkv inT", 1, 1, C, 3 * C, N, N, 3 * C, C, 0, 1, 1.0f},
    {"dw qkv doutT", 0, 0, C, 3 * C, N, C, N, C, 0, 1, 1.0f},
    {"dw proj inT", 1, 1, C, C, N, N, C, C, 0, 1, 1.0f},
    {"dw proj doutT", 0, 0, C, C, N, C, N, C, 0, 1, 1.0f},
    {"dw fc inT", 1, 1, C, 4 * C, N, N, 4 * C, C, 0, 1, 1.0f},
    {"dw fc doutT", 0, 0, C, 4 * C, N, C, N, C, 0, 1, 1.0f},
    {"dw fcproj inT", 1, 1, 4 * C, C, N, N, C, 4 * C, 0, 1, 1.0f},
    {"dw fcproj doutT", 0, 0, 4 * C, C, N, 4 * C, N, 4 * C, 0, 1, 1.0f},
    {"dw logits inT", 1, 1, C, Vp, rows, rows, Vp, C, 0, 1, 1.0f},
};

static const size_t WS = (size_t)32 << 20;

/* Median time in ms of one algorithm on the product; < 0 if it fails to run. */
static float time_algo(cublasLtHandle_t lt, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t la,
                       cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t ld,
                       const cublasLtMatmulAlgo_t *algo, const void *A, const void *B, void *D,
                       float beta, void *ws, cudaStream_t st)
{
    const float alpha = 1.0f;
    cudaEvent_t e0, e1;
    CHECK_CUDA(cudaEventCreate(&e0));
    CHECK_CUDA(cudaEventCreate(&e1));
    std::vector<float> ms;
    for (int r = 0; r < 9; r++) {
        CHECK_CUDA(cudaEventRecord(e0, st));
        cublasStatus_t s = cublasLtMatmul(lt, desc, &alpha, A, la, B, lb, &beta, D, ld, D, ld,
                                          algo, ws, WS, st);
        CHECK_CUDA(cudaEventRecord(e1, st));
        if (s != CUBLAS_STATUS_SUCCESS) return -1.0f;
        CHECK_CUDA(cudaEventSynchronize(e1));
        float t;
        CHECK_CUDA(cudaEventElapsedTime(&t, e0, e1));
        if (r >= 2) ms.push_back(t);
    }
    CHECK_CUDA(cudaEventDestroy(e0));
    CHECK_CUDA(cudaEventDestroy(e1));
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

/* Random bf16 in [-1, 1) (a hash of the index: no state, the same values every run). */
__global__ static void fill_random_bf16(unsigned short *x, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 2654435761u ^ (unsigned)(i >> 32) * 40503u;
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
        const float f = (float)(h >> 8) / 8388608.0f - 1.0f;
        x[i] = (unsigned short)(__float_as_uint(f) >> 16);
    }
}

/* Product p as cuda_matmul.cu writes it, in A/B type ab with compute type ct: its descriptor,
 * layouts and the heuristic's first `want` candidates (at most 16) into heur/found. */
struct plan {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulHeuristicResult_t heur[16];
    int found;
};

static void plan_make(plan &q, cublasLtHandle_t lt, const product &p, cudaDataType_t ab,
                      cublasComputeType_t ct, const void *bias, int want)
{
    const cudaDataType_t cd = p.d_fp32 ? CUDA_R_32F : ab;
    const cublasOperation_t opa = p.transa ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t opb = p.transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    CHECK_CUBLAS(cublasLtMatmulDescCreate(&q.desc, ct, CUDA_R_32F));
    CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(q.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(q.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    if (p.bias) {
        const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(q.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
        CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(q.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    }
    CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&q.la, ab, p.transa ? p.k : p.m, p.transa ? p.m : p.k, p.lda));
    CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&q.lb, ab, p.transb ? p.n : p.k, p.transb ? p.k : p.n, p.ldb));
    CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&q.ld, cd, p.m, p.n, p.ldc));
    cublasLtMatmulPreference_t pref;
    CHECK_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
    CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &WS, sizeof WS));
    q.found = 0;
    CHECK_CUBLAS(cublasLtMatmulAlgoGetHeuristic(lt, q.desc, q.la, q.lb, q.ld, q.ld, pref, want < 16 ? want : 16,
                                            q.heur, &q.found));
    cublasLtMatmulPreferenceDestroy(pref);
}

static void plan_free(plan &q)
{
    cublasLtMatrixLayoutDestroy(q.la);
    cublasLtMatrixLayoutDestroy(q.lb);
    cublasLtMatrixLayoutDestroy(q.ld);
    cublasLtMatmulDescDestroy(q.desc);
}

/* Product p in bf16 with the heuristic's candidate `rank` (of up to 8), back to back for
 * `seconds` on A, B as they are: one line per batch of 40 (`sustain LABEL T_S TFLOPS`) when
 * `lines`; returns the median TFLOP/s of the batches in the last half (0 when the heuristic
 * has no such candidate or it fails to run). */
static double sustain_run(cublasLtHandle_t lt, const product &p, int rank, const char *label,
                          double seconds, int lines, const void *A, const void *B, void *D,
                          const void *bias, void *ws, cudaStream_t st)
{
    plan q;
    plan_make(q, lt, p, CUDA_R_16BF, CUBLAS_COMPUTE_32F, bias, 8);
    std::vector<double> late;
    if (rank < q.found) {
        cudaEvent_t e0, e1;
        CHECK_CUDA(cudaEventCreate(&e0));
        CHECK_CUDA(cudaEventCreate(&e1));
        const float alpha = 1.0f;
        const double flop = 2.0 * p.m * p.n * p.k * 40;
        double elapsed = 0.0;
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now); /* for the clock samples beside it (clocks_gpu.sh) */
        if (lines) printf("sustain_start %s %.3f\n", label, (double)now.tv_sec + now.tv_nsec * 1e-9);
        while (elapsed < seconds) {
            CHECK_CUDA(cudaEventRecord(e0, st));
            bool ran = true;
            for (int r = 0; r < 40 && ran; r++)
                ran = cublasLtMatmul(lt, q.desc, &alpha, A, q.la, B, q.lb, &p.beta, D, q.ld, D, q.ld,
                                     &q.heur[rank].algo, ws, WS, st) == CUBLAS_STATUS_SUCCESS;
            CHECK_CUDA(cudaEventRecord(e1, st));
            CHECK_CUDA(cudaEventSynchronize(e1));
            if (!ran) {
                late.clear();
                break;
            }
            float ms;
            CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
            const double tflops = flop / (ms * 1e-3) / 1e12;
            if (lines) printf("sustain %s %.3f %.1f\n", label, elapsed, tflops);
            if (elapsed >= seconds / 2) late.push_back(tflops);
            elapsed += ms * 1e-3;
        }
        CHECK_CUDA(cudaEventDestroy(e0));
        CHECK_CUDA(cudaEventDestroy(e1));
    }
    fflush(stdout);
    plan_free(q);
    if (late.empty()) return 0.0;
    std::sort(late.begin(), late.end());
    return late[late.size() / 2];
}

/* The product named `name` (of prods). */
static const product &product_named(const char *name)
{
    for (const product &p : prods)
        if (std::string(p.name) == name) return p;
    fprintf(stderr, "no product %s\n", name);
    exit(1);
}

int main(int argc, char **argv)
{
    double sustain = 0.0;
    int algos = 0; /* --sustain-algos: each candidate of a few products, sustained */
    int only_mode = -1; /* --mode tf32|bf16|fp32: that math mode's table only */
    if (argc == 3 && std::string(argv[1]) == "--mode") {
        const std::string m = argv[2];
        only_mode = m == "tf32" ? 0 : m == "bf16" ? 1 : m == "fp32" ? 2 : -2;
        if (only_mode < 0) {
            fprintf(stderr, "--mode: tf32, bf16 or fp32, not %s\n", argv[2]);
            return 2;
        }
    } else if (argc == 3 && (std::string(argv[1]) == "--sustain" || std::string(argv[1]) == "--sustain-algos")) {
        sustain = atof(argv[2]);
        algos = std::string(argv[1]) == "--sustain-algos";
        if (!(sustain > 0.0 && sustain <= 120.0)) {
            fprintf(stderr, "%s: seconds from 0 to 120, not %s\n", argv[1], argv[2]);
            return 2;
        }
    } else if (argc != 1) {
        fprintf(stderr, "usage: %s [--mode tf32|bf16|fp32 | --sustain SECONDS | --sustain-algos SECONDS]\n", argv[0]);
        return 2;
    }
    cublasLtHandle_t lt;
    CHECK_CUBLAS(cublasLtCreate(&lt));
    cudaStream_t st;
    CHECK_CUDA(cudaStreamCreate(&st));
    void *ws;
    CHECK_CUDA(cudaMalloc(&ws, WS));
    const size_t most = (size_t)Vp * N * 4; /* the largest operand (all rows' logits), bytes */
    void *A, *B, *D, *bias;
    CHECK_CUDA(cudaMalloc(&A, most));
    CHECK_CUDA(cudaMalloc(&B, most));
    CHECK_CUDA(cudaMalloc(&D, most));
    CHECK_CUDA(cudaMalloc(&bias, (size_t)Vp * 4));
    /* small values (bytes 0x3c: ~0.01 in fp32, ~0.0115 in bf16 pairs) so nothing overflows */
    CHECK_CUDA(cudaMemset(A, 0x3c, most));
    CHECK_CUDA(cudaMemset(B, 0x3c, most));
    CHECK_CUDA(cudaMemset(D, 0, most));
    CHECK_CUDA(cudaMemset(bias, 0, (size_t)Vp * 4));
    if (sustain > 0.0) {
        const product &fc = product_named("fwd fc");
        if (!algos) /* constant operands first, as the table below times them */
            sustain_run(lt, fc, 0, "constant", sustain, 1, A, B, D, bias, ws, st);
        CHECK_CUDA(cudaDeviceSynchronize());
        fill_random_bf16<<<1024, 256, 0, st>>>((unsigned short *)A, most / 2);
        fill_random_bf16<<<1024, 256, 0, st>>>((unsigned short *)B, most / 2);
        CHECK_CUDA(cudaGetLastError());
        CHECK_CUDA(cudaStreamSynchronize(st));
        if (!algos) {
            sleep(1); /* so that the power reading of the first run decays */
            sustain_run(lt, fc, 0, "random", sustain, 1, A, B, D, bias, ws, st);
            return 0;
        }
        /* Under the power cap the heuristic's first choice (ranked for an unthrottled clock)
         * need not be the fastest: each of up to 8 candidates for `sustain` seconds on random
         * operands, and the first again at the end (how far the GPU's state drifted). */
        printf("| product | m n k | sustained TFLOP/s of candidates #0..#7, then #0 again |\n|---|---|---|\n");
        static const char *const names[] = {"fwd fc", "fwd qkv", "dinp fc", "dw fc", "fwd fcproj"};
        for (const char *name : names) {
            const product &p = product_named(name);
            printf("| %s | %d %d %d |", name, p.m, p.n, p.k);
            for (int r = 0; r <= 8; r++) {
                const double t = sustain_run(lt, p, r % 8, name, sustain, 0, A, B, D, bias, ws, st);
                printf(" %.0f", t);
                fflush(stdout);
            }
            printf(" |\n");
        }
        return 0;
    }
    printf("| math | product | m n k | heuristic #0 ms | best ms (rank) | gain |\n");
    printf("|---|---|---|---|---|---|\n");
    const char *const mode_name[3] = {"tf32", "bf16", "fp32"};
    for (int mode = 0; mode < 3; mode++) { /* TF32, bf16, strict fp32 */
        if (only_mode >= 0 && mode != only_mode) continue;
        const cudaDataType_t ab = mode == 1 ? CUDA_R_16BF : CUDA_R_32F;
        const cublasComputeType_t ct = mode == 0 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
        for (const product &p : prods) {
            plan q;
            plan_make(q, lt, p, ab, ct, bias, 16);
            const int found = q.found;
            float first = -1, best = 1e30f;
            int best_rank = -1;
            for (int i = 0; i < found; i++) {
                const float t = time_algo(lt, q.desc, q.la, q.lb, q.ld, &q.heur[i].algo, A, B, D,
                                          p.beta, ws, st);
                if (i == 0) first = t;
                if (t > 0 && t < best) best = t, best_rank = i;
            }
            printf("| %s | %s | %d %d %d | %.4f | %.4f (#%d of %d) | %.1f%% |\n",
                   mode_name[mode], p.name, p.m, p.n, p.k, first, best, best_rank, found,
                   100.0 * (first - best) / first);
            plan_free(q);
        }
    }
    return 0;
}
