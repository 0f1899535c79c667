// Does a pinned copy's rate depend on how much host memory the copies sweep?  (2026-11-30: on
// two H200 machines, one-GPU zero-infinity and stronghold at l48 h4096 moved their layers
// host-to-GPU at 44 and 40 GB/s over 166 and 41 GB of pinned memory, where --calibrate's
// copies, one 256 MiB buffer again and again, gave 50-55.)
// Host memory is made as the engines make it (kernels/host_pages.c: 2 MiB aligned, huge-page
// advice, zeroed by every core, then cudaHostRegister).  For each region size, chunks of
// CHUNK_MB go host-to-GPU, GPU-to-host, both ways at once (two streams), and host-to-GPU on
// two streams at once (up2: their sum; does a second copy engine add upward bandwidth, as a
// micro-batch's gradient sum coming up beside a layer's fetch asks?), the chunks walking the
// region in order, each measurement at least a second, three of each.  Prints a markdown
// table, GB/s of each repetition, and the huge pages the region got.
//   gcc -O2 -fopenmp -Ikernels -c kernels/host_pages.c -o build/host_pages.o
//   nvcc -O2 -arch=sm_90 -Ikernels -Xcompiler -fopenmp -o build/copy_region bench/copy_region.cu build/host_pages.o
//   ./build/copy_region DEVICE CHUNK_MB GB [GB ...]      e.g. ./build/copy_region 0 256 0.25 4 32 160
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "bench_check.cuh"
extern "C" {
#include "host_pages.h"
}

enum { REPS = 3 };

static double wall_s(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return tv.tv_sec + tv.tv_usec * 1e-6;
}

typedef struct {
    char *host;         // the region
    size_t chunks;      // CHUNK_MB pieces in it
    size_t chunk;       // bytes a copy
    void *dev_in, *dev_out, *dev_in2;
    cudaStream_t in, out, in2;
    cudaEvent_t ev[6];
} region_ctx;

// copies: `n` chunks each way asked for (in, out or both), walking the region from `next`;
// returns GB/s of each direction run
static void one_rep(region_ctx *r, int h2d, int d2h, size_t n, size_t *next, double *gbs_in, double *gbs_out)
{
    if (h2d) CHECK_CUDA(cudaEventRecord(r->ev[0], r->in));
    if (d2h) CHECK_CUDA(cudaEventRecord(r->ev[1], r->out));
    for (size_t k = 0; k < n; k++) {
        // (both ways: the GPU-to-host chunk is the one half a region away, not the one read)
        const size_t at = *next % r->chunks, away = (at + r->chunks / 2) % r->chunks;
        if (h2d) CHECK_CUDA(cudaMemcpyAsync(r->dev_in, r->host + at * r->chunk, r->chunk, cudaMemcpyHostToDevice, r->in));
        if (d2h) CHECK_CUDA(cudaMemcpyAsync(r->host + (h2d ? away : at) * r->chunk, r->dev_out, r->chunk,
                                            cudaMemcpyDeviceToHost, r->out));
        (*next)++;
    }
    if (h2d) CHECK_CUDA(cudaEventRecord(r->ev[2], r->in));
    if (d2h) CHECK_CUDA(cudaEventRecord(r->ev[3], r->out));
    CHECK_CUDA(cudaDeviceSynchronize());
    float ms = 0;
    if (h2d) {
        CHECK_CUDA(cudaEventElapsedTime(&ms, r->ev[0], r->ev[2]));
        *gbs_in = n * (double)r->chunk / (ms * 1e6);
    }
    if (d2h) {
        CHECK_CUDA(cudaEventElapsedTime(&ms, r->ev[1], r->ev[3]));
        *gbs_out = n * (double)r->chunk / (ms * 1e6);
    }
}

// two host-to-GPU streams at once, each `n` chunks (the second half a region away): GB/s of
// both together, from the first start to the last end
static double up2_rep(region_ctx *r, size_t n, size_t *next)
{
    CHECK_CUDA(cudaEventRecord(r->ev[0], r->in));
    CHECK_CUDA(cudaEventRecord(r->ev[4], r->in2));
    for (size_t k = 0; k < n; k++) {
        const size_t at = *next % r->chunks, away = (at + r->chunks / 2) % r->chunks;
        CHECK_CUDA(cudaMemcpyAsync(r->dev_in, r->host + at * r->chunk, r->chunk, cudaMemcpyHostToDevice, r->in));
        CHECK_CUDA(cudaMemcpyAsync(r->dev_in2, r->host + away * r->chunk, r->chunk, cudaMemcpyHostToDevice, r->in2));
        (*next)++;
    }
    CHECK_CUDA(cudaEventRecord(r->ev[2], r->in));
    CHECK_CUDA(cudaEventRecord(r->ev[5], r->in2));
    CHECK_CUDA(cudaDeviceSynchronize());
    float a = 0, b = 0, c = 0, d = 0;
    CHECK_CUDA(cudaEventElapsedTime(&a, r->ev[0], r->ev[2]));
    CHECK_CUDA(cudaEventElapsedTime(&b, r->ev[4], r->ev[5]));
    CHECK_CUDA(cudaEventElapsedTime(&c, r->ev[0], r->ev[5])); // (in's start to in2's end)
    CHECK_CUDA(cudaEventElapsedTime(&d, r->ev[4], r->ev[2])); // (in2's start to in's end)
    float span = a > b ? a : b;
    if (c > span) span = c;
    if (d > span) span = d;
    return 2.0 * n * (double)r->chunk / (span * 1e6);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s DEVICE CHUNK_MB GB [GB ...]\n", argv[0]);
        return 2;
    }
    const int device = atoi(argv[1]);
    const size_t chunk = (size_t)atol(argv[2]) << 20;
    if (chunk == 0) {
        fprintf(stderr, "copy_region: CHUNK_MB must be positive\n");
        return 2;
    }
    CHECK_CUDA(cudaSetDevice(device));
    region_ctx r;
    memset(&r, 0, sizeof r);
    r.chunk = chunk;
    CHECK_CUDA(cudaMalloc(&r.dev_in, chunk));
    CHECK_CUDA(cudaMalloc(&r.dev_out, chunk));
    CHECK_CUDA(cudaMalloc(&r.dev_in2, chunk));
    CHECK_CUDA(cudaStreamCreateWithFlags(&r.in2, cudaStreamNonBlocking));
    CHECK_CUDA(cudaStreamCreateWithFlags(&r.in, cudaStreamNonBlocking));
    CHECK_CUDA(cudaStreamCreateWithFlags(&r.out, cudaStreamNonBlocking));
    for (int i = 0; i < 6; i++) CHECK_CUDA(cudaEventCreate(&r.ev[i]));
    printf("| GPU | region GB | chunk MB | huge pages GB | alloc + register s | h2d GB/s | d2h GB/s | both: h2d / d2h GB/s | up2: two h2d streams, GB/s together |\n");
    printf("|---|---|---|---|---|---|---|---|---|\n");
    for (int a = 3; a < argc; a++) {
        const double gb = atof(argv[a]);
        size_t chunks = (size_t)(gb * 1e9 / chunk);
        if (chunks < 1) chunks = 1;
        const size_t bytes = chunks * chunk;
        const long hp0 = bench_anon_huge_kb();
        const double t0 = wall_s();
        void *p = NULL;
        if (host_pages_alloc_zeroed(&p, bytes) != 0) {
            printf("| %d | %.2f | %zu | out of host memory | | | | | |\n", device, bytes / 1e9, chunk >> 20);
            continue;
        }
        CHECK_CUDA(cudaHostRegister(p, bytes, cudaHostRegisterPortable));
        const double setup_s = wall_s() - t0;
        const long hp1 = bench_anon_huge_kb();
        r.host = (char *)p;
        r.chunks = chunks;
        size_t next = 0;
        double warm_in = 0, warm_out = 0;
        one_rep(&r, 1, 0, 2, &next, &warm_in, &warm_out);
        // copies a repetition: at least a second at 60 GB/s, and the whole region at least once
        size_t n = (size_t)(60e9 / chunk);
        if (n < chunks) n = chunks;
        char col[4][160];
        for (int mode = 0; mode < 3; mode++) {
            int len = 0;
            col[mode][0] = 0;
            for (int rep = 0; rep < REPS; rep++) {
                double in = 0, out = 0;
                one_rep(&r, mode != 1, mode != 0, n, &next, &in, &out);
                if (mode == 2)
                    len += snprintf(col[mode] + len, sizeof col[mode] - len, "%s%.1f / %.1f", rep ? ", " : "", in, out);
                else
                    len += snprintf(col[mode] + len, sizeof col[mode] - len, "%s%.1f", rep ? ", " : "", mode == 0 ? in : out);
            }
        }
        {
            int len = 0;
            col[3][0] = 0;
            for (int rep = 0; rep < REPS; rep++)
                len += snprintf(col[3] + len, sizeof col[3] - len, "%s%.1f", rep ? ", " : "", up2_rep(&r, (n + 1) / 2, &next));
        }
        printf("| %d | %.2f | %zu | %.1f | %.1f | %s | %s | %s | %s |\n", device, bytes / 1e9, chunk >> 20,
               hp0 >= 0 && hp1 >= 0 ? (hp1 - hp0) / 1048576.0 : -1.0, setup_s, col[0], col[1], col[2], col[3]);
        fflush(stdout);
        CHECK_CUDA(cudaHostUnregister(p));
        free(p);
    }
    return 0;
}
