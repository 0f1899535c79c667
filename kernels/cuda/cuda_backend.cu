/*
 * cuda_backend.cu — the CUDA backend: device memory, streams and the op table.
 *
 * A gpt_stream is a cudaStream_t with its own cuBLASLt and cuBLAS handles, a cuBLAS
 * workspace and the norm's partials (cuda_common.cuh lists that memory: it is outside the
 * engines' arena budget).  Copies and memsets are async on the stream; the host pointer of
 * a copy must stay valid until the stream is synchronised (pageable memory makes
 * cudaMemcpyAsync synchronous with respect to the host, pinned memory does not).
 *
 * Errors: creation fails quietly (GPT_ERR_BACKEND, nothing printed) when no device is
 * usable, so the CLI can probe and fall back to the CPU backend; every other failing CUDA
 * or cuBLAS call is reported on stderr with file:line and the library's message.
 *
 * Per-op times: `aebench --profile` (kernels/profile.h) wraps any backend's op table with
 * events; this backend has no profiler of its own.
 *
 * GELU epilogues: which of the MLP's GELU passes run inside cuBLASLt's epilogue
 * (matmul_forward_gelu: GELU_AUX_BIAS; matmul_backward_gelu: DGELU) rather than as kernels
 * of their own.  Default: both in bf16, none with fp32 storage — measured on an H200 at l16
 * h2048 b4 (bench/results/2026-11-21-h200-flash): bf16 66.2 -> 65.0 ms with both, TF32
 * 129.9 -> 130.8 (fwd) and 133.7 (both), cuBLASLt's epilogue kernels for fp32 outputs being
 * slower than the GEMM plus a GELU pass.  A test may ask for off or both
 * (gpt_cuda_kernels.gelu_epilogue: test_cuda checks the fused paths in TF32, and --recompute's
 * modes bit for bit with them off); DGELU is never used in strict fp32 (its derivative is
 * 1.2e-5 off the reference's, above the strict tolerance).
 *
 * Attention kernels: on a device that runs the sm_90a build (Hopper), bf16 with head size 128
 * uses the wgmma kernels (cuda_attention_wgmma.cuh), bit for bit the mma.sync kernels'
 * results and faster (bench/results/2026-11-27b-h100-wgmma); gpt_cuda_kernels.attention_mma
 * keeps the mma.sync kernels, for comparing the two (test_cuda does).
 *
 * Nothing here reads the environment (issue 48): aebench creates the backend with the
 * defaults, and only tests ask for another choice, through gpt_cuda_backend_create_kernels.
 */
#include "cuda_common.cuh"
#include "../host_pages.h"

#include <stdlib.h>
#include <string.h>

/* ---- memory -------------------------------------------------------------------------- */

/* What an allocation's result means to the caller.  Running out (of device memory, or of
 * host memory the system will pin) is not a failure of the backend: the budget's OOM record
 * says what did not fit; the error is cleared so that the next call does not see it. */
static int alloc_status(cudaError_t e, const char *call, int line)
{
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        return GPT_ERR_OOM;
    }
    return cuda_report(e, call, __FILE__, line) ? GPT_ERR_BACKEND : GPT_OK;
}

static int cuda_dev_alloc(const gpt_backend *be, void **ptr, size_t bytes)
{
    const cuda_backend_impl *impl = (const cuda_backend_impl *)be->impl;
    *ptr = NULL;
    if (CUDA_FAILED(cudaSetDevice(impl->device)))
        return GPT_ERR_BACKEND;
    void *p = NULL;
    const int rc = alloc_status(cudaMalloc(&p, bytes > 0 ? bytes : 256), "cudaMalloc", __LINE__);
    if (rc == GPT_OK)
        *ptr = p;
    return rc;
}

static void cuda_dev_free(const gpt_backend *be, void *ptr)
{
    (void)be;
    if (ptr != NULL)
        CUDA_FAILED(cudaFree(ptr));
}

static void cuda_describe(const gpt_backend *be, char *buf, size_t len)
{
    const cuda_backend_impl *impl = (const cuda_backend_impl *)be->impl;
    snprintf(buf, len, "%s", impl->desc);
}

static int cuda_dev_mem_info(const gpt_backend *be, size_t *free_bytes, size_t *total_bytes)
{
    const cuda_backend_impl *impl = (const cuda_backend_impl *)be->impl;
    size_t f = 0, t = 0;
    if (CUDA_FAILED(cudaSetDevice(impl->device)) || CUDA_FAILED(cudaMemGetInfo(&f, &t)))
        return GPT_ERR_BACKEND;
    if (free_bytes)
        *free_bytes = f;
    if (total_bytes)
        *total_bytes = t;
    return GPT_OK;
}

/* ---- streams -------------------------------------------------------------------------- */

static void cuda_stream_destroy(gpt_stream *s)
{
    if (s == NULL)
        return;
    cuda_stream_impl *st = (cuda_stream_impl *)s->impl;
    if (st != NULL) {
        if (st->stream)
            CUDA_FAILED(cudaStreamSynchronize(st->stream));
        cu_lt_plans_destroy(st);
        if (st->lt)
            CUBLAS_FAILED(cublasLtDestroy(st->lt));
        if (st->norm_partials)
            CUDA_FAILED(cudaFree(st->norm_partials));
        if (st->workspace)
            CUDA_FAILED(cudaFree(st->workspace));
        if (st->transposed)
            CUDA_FAILED(cudaFree(st->transposed));
        if (st->stream)
            CUDA_FAILED(cudaStreamDestroy(st->stream));
        free(st);
    }
    free(s);
}

static int cuda_stream_create(const gpt_backend *be, gpt_stream **out)
{
    const cuda_backend_impl *impl = (const cuda_backend_impl *)be->impl;
    *out = NULL;
    gpt_stream *s = (gpt_stream *)calloc(1, sizeof *s);
    cuda_stream_impl *st = (cuda_stream_impl *)calloc(1, sizeof *st);
    if (s == NULL || st == NULL) {
        free(s);
        free(st);
        return GPT_ERR_OOM;
    }
    s->be = be;
    s->impl = st;
    int rc = GPT_ERR_BACKEND;
    if (CUDA_FAILED(cudaSetDevice(impl->device)) ||
        CUDA_FAILED(cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking)))
        goto fail;
    {
        cudaError_t e = cudaMalloc(&st->workspace, CUDA_WORKSPACE_BYTES);
        if (e == cudaSuccess)
            e = cudaMalloc((void **)&st->norm_partials, NORM_BLOCKS * sizeof(double));
        if (e == cudaErrorMemoryAllocation) {
            (void)cudaGetLastError();
            rc = GPT_ERR_OOM;
            goto fail;
        }
        if (CUDA_FAILED(e))
            goto fail;
    }
    if (CUBLAS_FAILED(cublasLtCreate(&st->lt)))
        goto fail;
    *out = s;
    return GPT_OK;
fail:
    cuda_stream_destroy(s);
    return rc;
}

/* cuBLAS and the kernels share one workspace: that is safe because everything on a stream
 * runs in issue order. */

static int cuda_memcpy(gpt_stream *s, void *dst, const void *src, size_t bytes,
                       cudaMemcpyKind kind)
{
    if (bytes == 0)
        return GPT_OK;
    if (CUDA_FAILED(cudaMemcpyAsync(dst, src, bytes, kind, cu_stream(s)->stream)))
        return GPT_ERR_BACKEND;
    return GPT_OK;
}
static int cuda_memcpy_h2d(gpt_stream *s, void *dst, const void *src, size_t bytes)
{
    return cuda_memcpy(s, dst, src, bytes, cudaMemcpyHostToDevice);
}
static int cuda_memcpy_d2h(gpt_stream *s, void *dst, const void *src, size_t bytes)
{
    return cuda_memcpy(s, dst, src, bytes, cudaMemcpyDeviceToHost);
}
static int cuda_memcpy_d2d(gpt_stream *s, void *dst, const void *src, size_t bytes)
{
    return cuda_memcpy(s, dst, src, bytes, cudaMemcpyDeviceToDevice);
}

static int cuda_memset_zero(gpt_stream *s, void *dst, size_t bytes)
{
    if (bytes == 0)
        return GPT_OK;
    if (CUDA_FAILED(cudaMemsetAsync(dst, 0, bytes, cu_stream(s)->stream)))
        return GPT_ERR_BACKEND;
    return GPT_OK;
}

/* Waits for the stream; also where an op's earlier failure (ops cannot return errors)
 * comes out as GPT_ERR_BACKEND. */
static int cuda_stream_sync(gpt_stream *s)
{
    cuda_stream_impl *st = cu_stream(s);
    int rc = GPT_OK;
    if (CUDA_FAILED(cudaStreamSynchronize(st->stream)))
        rc = GPT_ERR_BACKEND;
    if (st->failed) {
        rc = st->failed == CU_FAILED_OOM && rc == GPT_OK ? GPT_ERR_OOM : GPT_ERR_BACKEND;
        st->failed = 0;
    }
    return rc;
}

/* ---- events and pinned host memory ------------------------------------------------- */

static int cuda_event_create(const gpt_backend *be, gpt_event **out)
{
    const cuda_backend_impl *impl = (const cuda_backend_impl *)be->impl;
    *out = NULL;
    gpt_event *e = (gpt_event *)calloc(1, sizeof *e);
    if (e == NULL)
        return GPT_ERR_OOM;
    cudaEvent_t ev;
    if (CUDA_FAILED(cudaSetDevice(impl->device)) || CUDA_FAILED(cudaEventCreate(&ev))) {
        free(e);
        return GPT_ERR_BACKEND;
    }
    e->be = be;
    e->impl = (void *)ev;
    *out = e;
    return GPT_OK;
}

static void cuda_event_destroy(gpt_event *e)
{
    if (e == NULL)
        return;
    CUDA_FAILED(cudaEventDestroy((cudaEvent_t)e->impl));
    free(e);
}

static int cuda_event_record(gpt_event *e, gpt_stream *s)
{
    if (CUDA_FAILED(cudaEventRecord((cudaEvent_t)e->impl, cu_stream(s)->stream)))
        return GPT_ERR_BACKEND;
    return GPT_OK;
}

/* Outside a capture a record like any other; inside one an event-record node (external: the
 * replay records the event where the node runs, for its time; it orders no stream of the
 * capture, which an internal record would do instead of recording anything). */
static int cuda_event_stamp(gpt_event *e, gpt_stream *s)
{
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    cudaStream_t stream = cu_stream(s)->stream;
    if (CUDA_FAILED(cudaStreamIsCapturing(stream, &status))) return GPT_ERR_BACKEND;
    const unsigned flags = status == cudaStreamCaptureStatusActive ? cudaEventRecordExternal : cudaEventRecordDefault;
    if (CUDA_FAILED(cudaEventRecordWithFlags((cudaEvent_t)e->impl, stream, flags))) return GPT_ERR_BACKEND;
    return GPT_OK;
}

static int cuda_stream_wait_event(gpt_stream *s, gpt_event *e)
{
    if (CUDA_FAILED(cudaStreamWaitEvent(cu_stream(s)->stream, (cudaEvent_t)e->impl, 0)))
        return GPT_ERR_BACKEND;
    return GPT_OK;
}

static int cuda_event_sync(gpt_event *e)
{
    if (CUDA_FAILED(cudaEventSynchronize((cudaEvent_t)e->impl)))
        return GPT_ERR_BACKEND;
    return GPT_OK;
}

static int cuda_event_elapsed_ms(float *ms, gpt_event *start, gpt_event *end)
{
    *ms = 0.0f;
    if (CUDA_FAILED(cudaEventElapsedTime(ms, (cudaEvent_t)start->impl, (cudaEvent_t)end->impl)))
        return GPT_ERR_BACKEND;
    return GPT_OK;
}

/* Page-locked host memory, page aligned and a whole number of pages: the disk tier reads
 * and writes pinned buffers with O_DIRECT, which needs that alignment.  cudaHostAlloc gives
 * small requests from a sub-allocator (not page aligned), so the memory comes from
 * posix_memalign and is then registered with the driver (the same page-locked memory for
 * the copies).
 *
 * Start-up: registering untouched memory makes the driver fault in and pin it 4 KiB page by
 * page on one thread (about a second per GiB, issue 14).  The block therefore comes from
 * host_pages_alloc_zeroed (2 MiB aligned on huge pages, zeroed by every core) and is
 * registered only then: the pages exist, and huge ones pin 512 at a time.  The zeros are
 * part of the contract (gpt.h): engines do not write them again. */
static int cuda_host_alloc_pinned(const gpt_backend *be, void **ptr, size_t bytes)
{
    const cuda_backend_impl *impl = (const cuda_backend_impl *)be->impl;
    *ptr = NULL;
    if (CUDA_FAILED(cudaSetDevice(impl->device)))
        return GPT_ERR_BACKEND;
    const size_t page = 4096;
    const size_t rounded = bytes == 0 ? page : (bytes + page - 1) / page * page;
    void *p = NULL;
    if (host_pages_alloc_zeroed(&p, rounded) != 0)
        return GPT_ERR_OOM;
    const int rc = alloc_status(cudaHostRegister(p, rounded, cudaHostRegisterPortable),
                                "cudaHostRegister", __LINE__);
    if (rc != GPT_OK) {
        free(p);
        return rc;
    }
    *ptr = p;
    return GPT_OK;
}

static int cuda_host_register(const gpt_backend *be, void *ptr, size_t bytes)
{
    const cuda_backend_impl *impl = (const cuda_backend_impl *)be->impl;
    if (CUDA_FAILED(cudaSetDevice(impl->device)))
        return GPT_ERR_BACKEND;
    return alloc_status(cudaHostRegister(ptr, bytes, cudaHostRegisterPortable), "cudaHostRegister",
                        __LINE__);
}

static void cuda_host_unregister(const gpt_backend *be, void *ptr)
{
    (void)be;
    if (ptr != NULL)
        (void)CUDA_FAILED(cudaHostUnregister(ptr));
}

static void cuda_host_free_pinned(const gpt_backend *be, void *ptr)
{
    (void)be;
    if (ptr == NULL)
        return;
    CUDA_FAILED(cudaHostUnregister(ptr));
    free(ptr);
}

static void *cuda_stream_handle(gpt_stream *s)
{
    return (void *)cu_stream(s)->stream;
}

/* A host task's function and its own copy of the argument, freed by the callback. */
typedef struct cuda_host_task {
    int (*fn)(void *arg);
    alignas(16) unsigned char arg[GPT_HOST_TASK_ARG_BYTES];
} cuda_host_task;

static void CUDART_CB cuda_host_task_run(void *p)
{
    cuda_host_task *t = (cuda_host_task *)p;
    /* A host function cannot report to the stream: say so where it happens. */
    if (t->fn(t->arg) != 0) fprintf(stderr, "aebench: cuda backend: a host task failed\n");
    free(t);
}

static int cuda_stream_host_task(gpt_stream *s, int (*fn)(void *arg), const void *arg,
                                 size_t arg_bytes)
{
    if (arg_bytes > GPT_HOST_TASK_ARG_BYTES) return GPT_ERR_INVALID;
    cuda_host_task *t = (cuda_host_task *)malloc(sizeof *t);
    if (t == NULL) return GPT_ERR_OOM;
    t->fn = fn;
    if (arg_bytes > 0) memcpy(t->arg, arg, arg_bytes);
    if (CUDA_FAILED(cudaLaunchHostFunc(cu_stream(s)->stream, cuda_host_task_run, t))) {
        free(t);
        return GPT_ERR_BACKEND;
    }
    return GPT_OK;
}

/* ---- graphs: a stream's work captured once, replayed as one launch ----------------------- */

/* Thread-local capture: the rank's other threads (the clock sampler, the watchdog, a host
 * task's MPI) are not this capture's; a call this thread makes that a capture does not allow
 * (a synchronisation, a copy from pageable memory) breaks it, and capture_end says so. */
static int cuda_graph_capture_begin(gpt_stream *s)
{
    cuda_stream_impl *st = cu_stream(s);
    if (CUDA_FAILED(cudaStreamBeginCapture(st->stream, cudaStreamCaptureModeThreadLocal)))
        return GPT_ERR_BACKEND;
    return GPT_OK;
}

static int cuda_graph_capture_end(gpt_stream *s, gpt_graph **out)
{
    cuda_stream_impl *st = cu_stream(s);
    *out = NULL;
    cudaGraph_t graph = NULL;
    const cudaError_t e = cudaStreamEndCapture(st->stream, &graph);
    /* an op that failed while capturing latched the stream: its launch is not in the graph */
    const int op_failed = st->failed;
    st->failed = 0;
    if (e != cudaSuccess || graph == NULL || op_failed) {
        if (e != cudaSuccess) {
            fprintf(stderr, "aebench: cuda backend: the capture did not make a graph: %s\n", cudaGetErrorString(e));
            (void)cudaGetLastError();
        } else if (op_failed) {
            fprintf(stderr, "aebench: cuda backend: an op failed while its stream was captured\n");
        }
        if (graph) (void)CUDA_FAILED(cudaGraphDestroy(graph));
        return GPT_ERR_BACKEND;
    }
    cudaGraphExec_t exec = NULL;
    const int bad = CUDA_FAILED(cudaGraphInstantiate(&exec, graph, 0));
    (void)CUDA_FAILED(cudaGraphDestroy(graph)); /* the executable keeps what it needs */
    if (bad) return GPT_ERR_BACKEND;
    gpt_graph *g = (gpt_graph *)calloc(1, sizeof *g);
    if (g == NULL) {
        (void)CUDA_FAILED(cudaGraphExecDestroy(exec));
        return GPT_ERR_OOM;
    }
    g->be = s->be;
    g->impl = (void *)exec;
    *out = g;
    return GPT_OK;
}

static int cuda_graph_launch(gpt_graph *g, gpt_stream *s)
{
    if (CUDA_FAILED(cudaGraphLaunch((cudaGraphExec_t)g->impl, cu_stream(s)->stream)))
        return GPT_ERR_BACKEND;
    return GPT_OK;
}

static void cuda_graph_destroy(gpt_graph *g)
{
    if (g == NULL) return;
    (void)CUDA_FAILED(cudaGraphExecDestroy((cudaGraphExec_t)g->impl));
    free(g);
}

static const gpt_backend_ops cuda_ops = {
    /* .dev_alloc = */ cuda_dev_alloc,
    /* .dev_free = */ cuda_dev_free,
    /* .describe = */ cuda_describe,
    /* .dev_mem_info = */ cuda_dev_mem_info,
    /* .stream_create = */ cuda_stream_create,
    /* .stream_destroy = */ cuda_stream_destroy,
    /* .memcpy_h2d = */ cuda_memcpy_h2d,
    /* .memcpy_d2h = */ cuda_memcpy_d2h,
    /* .memcpy_d2d = */ cuda_memcpy_d2d,
    /* .memset_zero = */ cuda_memset_zero,
    /* .stream_sync = */ cuda_stream_sync,
    /* .event_create = */ cuda_event_create,
    /* .event_destroy = */ cuda_event_destroy,
    /* .event_record = */ cuda_event_record,
    /* .stream_wait_event = */ cuda_stream_wait_event,
    /* .event_sync = */ cuda_event_sync,
    /* .event_elapsed_ms = */ cuda_event_elapsed_ms,
    /* .host_alloc_pinned = */ cuda_host_alloc_pinned,
    /* .host_free_pinned = */ cuda_host_free_pinned,
    /* .stream_handle = */ cuda_stream_handle,
    /* .stream_host_task = */ cuda_stream_host_task,
    /* .host_register = */ cuda_host_register,
    /* .host_unregister = */ cuda_host_unregister,

    /* .encoder_forward = */ cu_encoder_forward,
    /* .encoder_backward = */ cu_encoder_backward,
    /* .layernorm_forward = */ cu_layernorm_forward,
    /* .layernorm_backward = */ cu_layernorm_backward,
    /* .matmul_forward = */ cu_matmul_forward,
    /* .matmul_backward = */ cu_matmul_backward,
    /* .matmul_forward_gelu = */ cu_matmul_forward_gelu,
    /* .matmul_forward_residual = */ cu_matmul_forward_residual,
    /* .matmul_backward_gelu = */ cu_matmul_backward_gelu,
    /* .attention_forward = */ cu_attention_forward,
    /* .attention_backward = */ cu_attention_backward,
    /* .gelu_forward = */ cu_gelu_forward,
    /* .gelu_backward = */ cu_gelu_backward,
    /* .residual_forward = */ cu_residual_forward,
    /* .residual_backward = */ cu_residual_backward,
    /* .residual_layernorm_forward = */ cu_residual_layernorm_forward,
    /* .crossentropy_forward_backward = */ cu_crossentropy_forward_backward,
    /* .crossentropy_stats = */ cu_crossentropy_stats,
    /* .crossentropy_parallel = */ cu_crossentropy_parallel,
    /* .adamw_update = */ cu_adamw_update,
    /* .norm_squared = */ cu_norm_squared,
    /* .params_to_act = */ cu_params_to_act,
    /* .act_to_f32 = */ cu_act_to_f32,
    /* .checksum_chunks = */ cu_checksum_chunks,
    /* .checksum_fold = */ cu_checksum_fold,
    /* .add_f32 = */ cu_add_f32,

    /* .graph_capture_begin = */ cuda_graph_capture_begin,
    /* .graph_capture_end = */ cuda_graph_capture_end,
    /* .graph_launch = */ cuda_graph_launch,
    /* .graph_destroy = */ cuda_graph_destroy,
    /* .event_stamp = */ cuda_event_stamp,
};

extern "C" int gpt_cuda_backend_create(gpt_backend **out, int device, int allow_tf32)
{
    return gpt_cuda_backend_create_dtype(out, device, allow_tf32, GPT_F32);
}

extern "C" int gpt_cuda_backend_pci_bus_id(const gpt_backend *be, char *buf, int len)
{
    const cuda_backend_impl *impl = (const cuda_backend_impl *)be->impl;
    return CUDA_FAILED(cudaDeviceGetPCIBusId(buf, len, impl->device)) ? GPT_ERR_BACKEND : GPT_OK;
}

extern "C" int gpt_cuda_versions(int *runtime, int *driver)
{
    *runtime = 0;
    *driver = 0;
    /* (neither call makes a context; with no driver installed the driver's is 0) */
    if (cudaRuntimeGetVersion(runtime) != cudaSuccess || cudaDriverGetVersion(driver) != cudaSuccess) {
        (void)cudaGetLastError();
        return GPT_ERR_BACKEND;
    }
    return GPT_OK;
}

extern "C" int gpt_cuda_device_name(int device, char *buf, int len)
{
    cudaDeviceProp prop;
    if (len > 0) buf[0] = '\0';
    if (len <= 0 || cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
        (void)cudaGetLastError(); /* no driver or no such device: quietly */
        return GPT_ERR_BACKEND;
    }
    snprintf(buf, (size_t)len, "%s", prop.name);
    return GPT_OK;
}

extern "C" int gpt_cuda_device_count(void)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        (void)cudaGetLastError(); /* no driver or no device: none, quietly */
        return 0;
    }
    return count;
}

extern "C" int gpt_cuda_backend_create_dtype(gpt_backend **out, int device, int allow_tf32,
                                             gpt_dtype dtype)
{
    return gpt_cuda_backend_create_kernels(out, device, allow_tf32, dtype, NULL);
}

extern "C" int gpt_cuda_backend_create_kernels(gpt_backend **out, int device, int allow_tf32,
                                               gpt_dtype dtype, const gpt_cuda_kernels *kernels)
{
    const gpt_cuda_kernels defaults = {GPT_GELU_EPILOGUE_DEFAULT, 0, 0};
    const gpt_cuda_kernels *k = kernels != NULL ? kernels : &defaults;
    *out = NULL;
    /* The probe: no driver, no device, or a driver too old are all "no CUDA here", said
     * quietly; clear the error so it does not linger in the runtime. */
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count <= 0) {
        (void)cudaGetLastError();
        return GPT_ERR_BACKEND;
    }
    if (device < 0 || device >= count) {
        fprintf(stderr, "aebench: CUDA device %d does not exist (%d device%s)\n", device, count,
                count == 1 ? "" : "s");
        return GPT_ERR_BACKEND;
    }
    cudaDeviceProp prop;
    if (CUDA_FAILED(cudaSetDevice(device)) ||
        CUDA_FAILED(cudaGetDeviceProperties(&prop, device)))
        return GPT_ERR_BACKEND;
    if (dtype == GPT_BF16 && prop.major < 8) {
        /* bf16 tensor cores and cuBLAS's bf16 GEMMs start with Ampere. */
        fprintf(stderr, "aebench: --dtype bf16 needs compute capability 8.0 or newer (%s is %d.%d)\n",
                prop.name, prop.major, prop.minor);
        return GPT_ERR_BACKEND;
    }

    gpt_backend *be = (gpt_backend *)calloc(1, sizeof *be);
    cuda_backend_impl *impl = (cuda_backend_impl *)calloc(1, sizeof *impl);
    if (be == NULL || impl == NULL) {
        free(be);
        free(impl);
        return GPT_ERR_OOM;
    }
    impl->device = device;
    impl->allow_tf32 = allow_tf32 != 0;
    impl->smem_per_block_optin = (int)prop.sharedMemPerBlockOptin;
    if (k->gelu_epilogue == GPT_GELU_EPILOGUE_DEFAULT) {
        impl->gelu_fwd_epilogue = impl->gelu_bwd_epilogue = dtype == GPT_BF16;
    } else {
        const int both = k->gelu_epilogue == GPT_GELU_EPILOGUE_BOTH;
        impl->gelu_fwd_epilogue = both;
        impl->gelu_bwd_epilogue = both && (dtype == GPT_BF16 || impl->allow_tf32);
    }
    impl->tf32_dw_transpose = !k->tf32_weight_grad_direct;
    impl->attn_wgmma = !k->attention_mma && prop.major == 9 && cu_attention_wgmma_available();
    snprintf(impl->desc, sizeof impl->desc, "%s (sm_%d%d, %d SMs%s)", prop.name, prop.major,
             prop.minor, prop.multiProcessorCount,
             !impl->attn_wgmma ? ""
             : dtype == GPT_BF16 ? ", attention on wgmma"
             : impl->allow_tf32 ? ", TF32 attention on wgmma" : "");
    be->ops = &cuda_ops;
    be->name = "cuda";
    be->impl = impl;
    be->dtype = dtype;
    *out = be;
    return GPT_OK;
}

extern "C" void gpt_cuda_backend_destroy(gpt_backend *be)
{
    if (be == NULL)
        return;
    cuda_backend_impl *impl = (cuda_backend_impl *)be->impl;
    if (impl != NULL) {
        free(impl);
    }
    free(be);
}
