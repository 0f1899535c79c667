// What a device-to-host copy beside the training costs the training (issue 30 part 6: gemini's
// own copy alone slows an interleaved step by 1.7%, far more than its HBM bytes explain).
// A workload on one stream (TF32 GEMMs, or a streaming kernel at HBM rate) is timed alone and
// with a copy of COPY_GB running beside it on a second stream, into each kind of host memory:
//   pinned     cudaMallocHost
//   reg4k      anonymous mmap, transparent huge pages refused (madvise NOHUGEPAGE), registered
//   reg2m      anonymous mmap, 2 MiB aligned, MADV_HUGEPAGE, registered (THP if the kernel has it)
//   shm        a file on /dev/shm mapped shared and registered: gemini's store
//   peer_host  (two GPUs) GPU 1's memory to shm-like host memory by GPU 0's copy engine (read)
//   peer_dev   (two GPUs) GPU 1's memory to GPU 0's memory (the staged read's first hop)
// and the copy's own rate.  Prints a markdown table.
//   nvcc -O2 -arch=sm_90 -o build/copy_interference bench/copy_interference.cu -lcublas
//   ./build/copy_interference [COPY_GB]
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bench_check.cuh"

__global__ void stream_kernel(float4 *dst, const float4 *src, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float4 v = src[i];
        v.x = v.x * 0.5f + 1.0f;
        dst[i] = v;
    }
}

typedef struct {
    cublasHandle_t h;
    cudaStream_t work, copy;
    float *a, *b, *c;
    float4 *s_src, *s_dst;
    size_t s_n;
    int n;
} ctx;

// One workload pass: reps GEMMs (n x n x n, TF32) or reps streaming passes.
static void workload(ctx *x, int kind, int reps)
{
    const float one = 1.0f, zero = 0.0f;
    for (int r = 0; r < reps; r++) {
        if (kind == 0)
            CHECK_CUBLAS(cublasGemmEx(x->h, CUBLAS_OP_N, CUBLAS_OP_N, x->n, x->n, x->n, &one, x->a, CUDA_R_32F, x->n, x->b,
                            CUDA_R_32F, x->n, &zero, x->c, CUDA_R_32F, x->n, CUBLAS_COMPUTE_32F_FAST_TF32,
                            CUBLAS_GEMM_DEFAULT));
        else
            stream_kernel<<<132 * 8, 256, 0, x->work>>>(x->s_dst, x->s_src, x->s_n);
    }
    CHECK_CUDA(cudaGetLastError());
}

static float timed(ctx *x, int kind, int reps, void *dst, const void *src, size_t bytes, int copies, float *copy_ms)
{
    cudaEvent_t e0, e1, c0, c1;
    CHECK_CUDA(cudaEventCreate(&e0));
    CHECK_CUDA(cudaEventCreate(&e1));
    CHECK_CUDA(cudaEventCreate(&c0));
    CHECK_CUDA(cudaEventCreate(&c1));
    CHECK_CUDA(cudaDeviceSynchronize());
    CHECK_CUDA(cudaEventRecord(c0, x->copy));
    for (int i = 0; i < copies; i++) CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, x->copy));
    CHECK_CUDA(cudaEventRecord(c1, x->copy));
    CHECK_CUDA(cudaEventRecord(e0, x->work));
    workload(x, kind, reps);
    CHECK_CUDA(cudaEventRecord(e1, x->work));
    CHECK_CUDA(cudaDeviceSynchronize());
    float ms = 0, cms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    CHECK_CUDA(cudaEventElapsedTime(&cms, c0, c1));
    if (copy_ms) *copy_ms = cms;
    CHECK_CUDA(cudaEventDestroy(e0));
    CHECK_CUDA(cudaEventDestroy(e1));
    CHECK_CUDA(cudaEventDestroy(c0));
    CHECK_CUDA(cudaEventDestroy(c1));
    return ms;
}

static void *map_anon(size_t bytes, int huge)
{
    const size_t align = 2u << 20;
    char *p = (char *)mmap(NULL, bytes + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    char *q = (char *)(((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1));
    // (advice: a kernel without transparent huge pages refuses it, and the table's
    // AnonHugePages line says what came)
    if (madvise(q, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE))
        fprintf(stderr, "madvise(%s): refused\n", huge ? "HUGEPAGE" : "NOHUGEPAGE");
    memset(q, 0, bytes);
    return q;
}

static void *map_shm(size_t bytes)
{
    char name[64];
    snprintf(name, sizeof name, "/dev/shm/copy_interference.%d", (int)getpid());
    int fd = open(name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW, 0600);
    if (fd < 0) return NULL;
    if (unlink(name)) { // (the file lives on in its mapping alone)
        close(fd);
        return NULL;
    }
    if (ftruncate(fd, (off_t)bytes)) {
        close(fd);
        return NULL;
    }
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (close(fd)) return NULL;
    if (p == MAP_FAILED) return NULL;
    memset(p, 0, bytes);
    return p;
}

int main(int argc, char **argv)
{
    const double copy_gb = argc > 1 ? atof(argv[1]) : 1.0;
    const size_t bytes = (size_t)(copy_gb * 1e9) & ~(size_t)((2u << 20) - 1);
    int ngpu = 0;
    CHECK_CUDA(cudaGetDeviceCount(&ngpu));
    ctx x;
    memset(&x, 0, sizeof x);
    CHECK_CUDA(cudaSetDevice(0));
    x.n = 4096;
    CHECK_CUDA(cudaMalloc(&x.a, (size_t)x.n * x.n * 4));
    CHECK_CUDA(cudaMalloc(&x.b, (size_t)x.n * x.n * 4));
    CHECK_CUDA(cudaMalloc(&x.c, (size_t)x.n * x.n * 4));
    CHECK_CUDA(cudaMemset(x.a, 0, (size_t)x.n * x.n * 4));
    CHECK_CUDA(cudaMemset(x.b, 0, (size_t)x.n * x.n * 4));
    x.s_n = (512u << 20) / 16;
    CHECK_CUDA(cudaMalloc(&x.s_src, x.s_n * 16));
    CHECK_CUDA(cudaMalloc(&x.s_dst, x.s_n * 16));
    CHECK_CUDA(cudaMemset(x.s_src, 0, x.s_n * 16));
    CHECK_CUDA(cudaStreamCreateWithFlags(&x.work, cudaStreamNonBlocking));
    CHECK_CUDA(cudaStreamCreateWithFlags(&x.copy, cudaStreamNonBlocking));
    CHECK_CUBLAS(cublasCreate(&x.h));
    CHECK_CUBLAS(cublasSetStream(x.h, x.work));
    void *src0 = NULL, *dev_dst = NULL, *src1 = NULL;
    CHECK_CUDA(cudaMalloc(&src0, bytes));
    CHECK_CUDA(cudaMemset(src0, 1, bytes));
    CHECK_CUDA(cudaMalloc(&dev_dst, bytes));
    if (ngpu > 1) {
        int can = 0;
        CHECK_CUDA(cudaDeviceCanAccessPeer(&can, 0, 1));
        if (can) {
            CHECK_CUDA(cudaDeviceEnablePeerAccess(1, 0));
            CHECK_CUDA(cudaSetDevice(1));
            CHECK_CUDA(cudaMalloc(&src1, bytes));
            CHECK_CUDA(cudaMemset(src1, 2, bytes));
            CHECK_CUDA(cudaSetDevice(0));
        }
    }
    void *pinned = NULL;
    CHECK_CUDA(cudaMallocHost(&pinned, bytes));
    void *reg4k = map_anon(bytes, 0);
    long before = bench_anon_huge_kb();
    void *reg2m = map_anon(bytes, 1);
    long after = bench_anon_huge_kb();
    void *shm = map_shm(bytes);
    if (!reg4k || !reg2m || !shm) {
        fprintf(stderr, "host memory: mmap failed\n");
        return 1;
    }
    CHECK_CUDA(cudaHostRegister(reg4k, bytes, cudaHostRegisterDefault));
    CHECK_CUDA(cudaHostRegister(reg2m, bytes, cudaHostRegisterDefault));
    CHECK_CUDA(cudaHostRegister(shm, bytes, cudaHostRegisterDefault));
    void *shm2 = map_shm(bytes); // peer reads land here (gemini's store is a shm file)
    if (!shm2) return 1;
    CHECK_CUDA(cudaHostRegister(shm2, bytes, cudaHostRegisterDefault));
    printf("GPUs %d; copy %.2f GB a pass; AnonHugePages %ld -> %ld kB after the 2 MiB mapping\n\n", ngpu,
           bytes / 1e9, before, after);

    struct {
        const char *name;
        void *dst;
        const void *src;
    } kinds[] = {{"pinned", pinned, src0},  {"reg4k", reg4k, src0},      {"reg2m", reg2m, src0},
                 {"shm", shm, src0},        {"peer_host", shm2, src1},   {"peer_dev", dev_dst, src1}};
    const char *wname[2] = {"TF32 GEMM 4096^3", "streaming kernel (1 GiB a pass)"};
    for (int kind = 0; kind < 2; kind++) {
        const int reps = kind == 0 ? 400 : 300;
        timed(&x, kind, reps / 4, NULL, NULL, 0, 0, NULL); // warm
        float alone[3];
        for (int i = 0; i < 3; i++) alone[i] = timed(&x, kind, reps, NULL, NULL, 0, 0, NULL);
        float base = alone[0] < alone[1] ? alone[0] : alone[1];
        base = base < alone[2] ? base : alone[2];
        printf("### %s x %d: alone %.1f / %.1f / %.1f ms\n\n", wname[kind], reps, alone[0], alone[1], alone[2]);
        printf("| copy into | workload ms (copy beside) | slowdown | copies issued | copy GB/s |\n|---|---|---|---|---|\n");
        for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
            if (!kinds[k].src) continue;
            // as many copies as cover the workload at ~50 GB/s
            const int copies = (int)(base / 1e3 * 50e9 / bytes) + 1;
            float cms = 0, best = 1e30f;
            for (int i = 0; i < 2; i++) {
                float ms = timed(&x, kind, reps, kinds[k].dst, kinds[k].src, bytes, copies, &cms);
                best = ms < best ? ms : best;
            }
            float alone_copy = 0;
            timed(&x, kind, 0, kinds[k].dst, kinds[k].src, bytes, 1, &alone_copy);
            printf("| %s | %.1f | %.3f | %d | %.1f (alone %.1f) |\n", kinds[k].name, best, best / base, copies,
                   copies * bytes / 1e6 / cms, bytes / 1e6 / alone_copy);
        }
        printf("\n");
    }
    return 0;
}
