/*
 * cpu_backend.c — the CPU reference backend: memory and the op table.
 *
 * "Device" memory is host memory, so the copies are memcpy.  Streams are worker threads
 * with in-order queues and events are markers in them (cpu_stream.c): every op, copy and
 * memset is queued and runs later on the stream's thread (each op may fork an OpenMP team
 * of the backend's thread count there), so a caller must synchronise before it reads a
 * result, exactly as on a GPU.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "../host_pages.h"
#include "cpu_stream.h"

/* ---- memory ------------------------------------------------------------------------- */

/* 64-byte alignment: one cache line, and whole AVX-512 vectors. */
#define CPU_ALIGN 64

static int cpu_dev_alloc(const gpt_backend *be, void **ptr, size_t bytes)
{
    (void)be;
    *ptr = NULL;
    /* posix_memalign(0) may legitimately return NULL; hand out a real block instead so
     * that a NULL pointer always means failure to the caller. */
    if (bytes == 0)
        bytes = CPU_ALIGN;
    void *p = NULL;
    if (posix_memalign(&p, CPU_ALIGN, bytes) != 0 || p == NULL)
        return GPT_ERR_OOM;
    *ptr = p;
    return GPT_OK;
}

static void cpu_dev_free(const gpt_backend *be, void *ptr)
{
    (void)be;
    free(ptr);
}

/* Reads "Key:  <n> kB" from /proc/meminfo; returns 0 and the value in bytes if found. */
static int meminfo_read(const char *key, size_t *bytes)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (f == NULL)
        return -1;
    char line[256];
    size_t keylen = strlen(key);
    int found = -1;
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, key, keylen) == 0 && line[keylen] == ':') {
            unsigned long long kb = 0;
            if (sscanf(line + keylen + 1, "%llu", &kb) == 1) {
                *bytes = (size_t)kb * 1024u;
                found = 0;
            }
            break;
        }
    }
    fclose(f);
    return found;
}

int gpt_host_mem_info(size_t *free_bytes, size_t *total_bytes)
{
    size_t avail = 0, total = 0;
    if (meminfo_read("MemAvailable", &avail) != 0 || meminfo_read("MemTotal", &total) != 0) {
        /* No /proc (or an old kernel without MemAvailable): ask the C library. */
        long page = sysconf(_SC_PAGESIZE);
        long avphys = sysconf(_SC_AVPHYS_PAGES);
        long phys = sysconf(_SC_PHYS_PAGES);
        if (page <= 0 || avphys < 0 || phys <= 0)
            return GPT_ERR_BACKEND;
        avail = (size_t)avphys * (size_t)page;
        total = (size_t)phys * (size_t)page;
    }
    if (free_bytes)
        *free_bytes = avail;
    if (total_bytes)
        *total_bytes = total;
    return GPT_OK;
}

/* The CPU backend's "device" memory is the host's. */
static int cpu_dev_mem_info(const gpt_backend *be, size_t *free_bytes, size_t *total_bytes)
{
    (void)be;
    return gpt_host_mem_info(free_bytes, total_bytes);
}

/* "Pinned" memory on the CPU backend is ordinary host memory, zeroed as the CUDA backend's
 * is; blocks of a page or more start on a page, as cudaHostAlloc's do, so the disk tier can
 * do O_DIRECT on them. */
static int cpu_host_alloc_pinned(const gpt_backend *be, void **ptr, size_t bytes)
{
    (void)be;
    return host_pages_alloc_zeroed(ptr, bytes ? bytes : 1) ? GPT_ERR_OOM : GPT_OK;
}

/* The CPU backend's copies are memcpy on its stream threads: any host memory will do. */
static int cpu_host_register(const gpt_backend *be, void *ptr, size_t bytes)
{
    (void)be, (void)ptr, (void)bytes;
    return GPT_OK;
}

static void cpu_host_unregister(const gpt_backend *be, void *ptr) { (void)be, (void)ptr; }

static void cpu_host_free_pinned(const gpt_backend *be, void *ptr)
{
    cpu_dev_free(be, ptr);
}

static void cpu_describe(const gpt_backend *be, char *buf, size_t len)
{
    const cpu_backend_impl *impl = be->impl;
    snprintf(buf, len, "cpu (%d threads)", impl->nthreads);
}

/* ---- the backend ------------------------------------------------------------------------ */

static const gpt_backend_ops cpu_ops = {
    .dev_alloc = cpu_dev_alloc,
    .dev_free = cpu_dev_free,
    .describe = cpu_describe,
    .dev_mem_info = cpu_dev_mem_info,
    .stream_create = cpu_stream_create,
    .stream_destroy = cpu_stream_destroy,
    .memcpy_h2d = cpu_memcpy_async,
    .memcpy_d2h = cpu_memcpy_async,
    .memcpy_d2d = cpu_memcpy_async,
    .memset_zero = cpu_memset_zero_async,
    .stream_sync = cpu_stream_sync,
    .event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_event_record,
    .stream_wait_event = cpu_stream_wait_event,
    .event_sync = cpu_event_sync,
    .event_elapsed_ms = cpu_event_elapsed_ms,
    .host_alloc_pinned = cpu_host_alloc_pinned,
    .host_free_pinned = cpu_host_free_pinned,
    .stream_handle = cpu_stream_handle,
    .stream_host_task = cpu_stream_host_task,
    .host_register = cpu_host_register,
    .host_unregister = cpu_host_unregister,

    .encoder_forward = cpu_q_encoder_forward,
    .encoder_backward = cpu_q_encoder_backward,
    .layernorm_forward = cpu_q_layernorm_forward,
    .layernorm_backward = cpu_q_layernorm_backward,
    .matmul_forward = cpu_q_matmul_forward,
    .matmul_forward_gelu = cpu_q_matmul_forward_gelu,
    .matmul_forward_residual = cpu_q_matmul_forward_residual,
    .matmul_backward_gelu = cpu_q_matmul_backward_gelu,
    .matmul_backward = cpu_q_matmul_backward,
    .attention_forward = cpu_q_attention_forward,
    .attention_backward = cpu_q_attention_backward,
    .gelu_forward = cpu_q_gelu_forward,
    .gelu_backward = cpu_q_gelu_backward,
    .residual_forward = cpu_q_residual_forward,
    .residual_layernorm_forward = cpu_q_residual_layernorm_forward,
    .residual_backward = cpu_q_residual_backward,
    .crossentropy_forward_backward = cpu_q_crossentropy_forward_backward,
    .crossentropy_stats = cpu_q_crossentropy_stats,
    .crossentropy_parallel = cpu_q_crossentropy_parallel,
    .adamw_update = cpu_q_adamw_update,
    .norm_squared = cpu_q_norm_squared,
    .params_to_act = cpu_q_params_to_act,
    .act_to_f32 = cpu_q_act_to_f32,
    .checksum_chunks = cpu_q_checksum_chunks,
    .checksum_fold = cpu_q_checksum_fold,
    .add_f32 = cpu_q_add_f32,
    /* no graphs: a worker thread per stream has no launch cost to save */
    .graph_capture_begin = NULL,
    .graph_capture_end = NULL,
    .graph_launch = NULL,
    .graph_destroy = NULL,
};

int gpt_cpu_backend_create(gpt_backend **out, int nthreads)
{
    return gpt_cpu_backend_create_dtype(out, nthreads, GPT_F32);
}

int gpt_cpu_backend_create_dtype(gpt_backend **out, int nthreads, gpt_dtype dtype)
{
    *out = NULL;
    gpt_backend *be = calloc(1, sizeof *be);
    cpu_backend_impl *impl = calloc(1, sizeof *impl);
    if (be == NULL || impl == NULL) {
        free(be);
        free(impl);
        return GPT_ERR_OOM;
    }
#ifdef _OPENMP
    /* Resolve "OpenMP's default" once, here, so that every op of this backend uses the
     * same team size (and no op ever changes OpenMP's global settings). */
    impl->nthreads = nthreads > 0 ? nthreads : omp_get_max_threads();
#else
    impl->nthreads = 1;
    (void)nthreads;
#endif
    if (impl->nthreads < 1)
        impl->nthreads = 1;
    be->ops = &cpu_ops;
    be->name = "cpu";
    be->impl = impl;
    be->dtype = dtype; /* (bf16: the stream tasks widen and round, cpu_stream.c) */
    *out = be;
    return GPT_OK;
}

void gpt_cpu_backend_destroy(gpt_backend *be)
{
    if (be == NULL)
        return;
    free(be->impl);
    free(be);
}
