/*
 * cpu_backend.c — the CPU reference backend: memory, streams and the op table.
 *
 * "Device" memory is host memory, so the copies are memcpy and a stream is only a handle:
 * a CPU stream executes every op synchronously in the calling thread (each op may fork an
 * OpenMP team of the backend's thread count internally), so stream_sync has nothing to
 * wait for.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu_ops.h"

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

/* ---- streams -------------------------------------------------------------------------- */

static int cpu_stream_create(const gpt_backend *be, gpt_stream **out)
{
    *out = NULL;
    gpt_stream *s = calloc(1, sizeof *s);
    if (s == NULL)
        return GPT_ERR_OOM;
    s->be = be;
    s->impl = NULL; /* nothing to queue: ops run synchronously */
    *out = s;
    return GPT_OK;
}

static void cpu_stream_destroy(gpt_stream *s)
{
    free(s);
}

/* All three copy directions are host-to-host. */
static int cpu_memcpy(gpt_stream *s, void *dst, const void *src, size_t bytes)
{
    (void)s;
    if (bytes > 0) /* memcpy with a NULL pointer is undefined even for 0 bytes */
        memcpy(dst, src, bytes);
    return GPT_OK;
}

static int cpu_memset_zero(gpt_stream *s, void *dst, size_t bytes)
{
    (void)s;
    if (bytes > 0)
        memset(dst, 0, bytes);
    return GPT_OK;
}

static int cpu_stream_sync(gpt_stream *s)
{
    (void)s;
    return GPT_OK;
}

/* ---- events -------------------------------------------------------------------------- */

/* With synchronous streams an event is complete as soon as it is recorded; it keeps the
 * time of its recording for elapsed_ms. */
typedef struct cpu_event_impl {
    struct timespec when;
} cpu_event_impl;

static int cpu_event_create(const gpt_backend *be, gpt_event **out)
{
    *out = NULL;
    gpt_event *e = calloc(1, sizeof *e);
    cpu_event_impl *ev = calloc(1, sizeof *ev);
    if (e == NULL || ev == NULL) {
        free(e);
        free(ev);
        return GPT_ERR_OOM;
    }
    e->be = be;
    e->impl = ev;
    *out = e;
    return GPT_OK;
}

static void cpu_event_destroy(gpt_event *e)
{
    if (e == NULL)
        return;
    free(e->impl);
    free(e);
}

static int cpu_event_record(gpt_event *e, gpt_stream *s)
{
    (void)s;
    cpu_event_impl *ev = e->impl;
    if (clock_gettime(CLOCK_MONOTONIC, &ev->when) != 0)
        return GPT_ERR_BACKEND;
    return GPT_OK;
}

static int cpu_stream_wait_event(gpt_stream *s, gpt_event *e)
{
    (void)s;
    (void)e;
    return GPT_OK;
}

static int cpu_event_sync(gpt_event *e)
{
    (void)e;
    return GPT_OK;
}

static int cpu_event_elapsed_ms(float *ms, gpt_event *start, gpt_event *end)
{
    const cpu_event_impl *a = start->impl, *b = end->impl;
    *ms = (float)((double)(b->when.tv_sec - a->when.tv_sec) * 1e3 +
                  (double)(b->when.tv_nsec - a->when.tv_nsec) * 1e-6);
    return GPT_OK;
}

/* "Pinned" memory on the CPU backend is ordinary aligned host memory. */
static int cpu_host_alloc_pinned(const gpt_backend *be, void **ptr, size_t bytes)
{
    return cpu_dev_alloc(be, ptr, bytes);
}

static void cpu_host_free_pinned(const gpt_backend *be, void *ptr)
{
    cpu_dev_free(be, ptr);
}

static void cpu_describe(const gpt_backend *be, char *buf, size_t len)
{
    const cpu_backend_impl *impl = be->impl;
    snprintf(buf, len, "cpu (%d threads)", impl->nthreads);
}

/* ---- the op table's signatures ------------------------------------------------------- */

/* The reference ops (cpu_ops.h) are written over float *, which is what every void *
 * argument of the table holds on this backend (be->dtype is always GPT_F32): these
 * adapters only give them the table's types. */
static void t_encoder_forward(gpt_stream *s, void *out, const int32_t *tokens, const void *wte,
                              const void *wpe, int B, int T, int C)
{ cpu_encoder_forward(s, out, tokens, wte, wpe, B, T, C); }
static void t_encoder_backward(gpt_stream *s, float *dwte, float *dwpe, const void *dout,
                               const int32_t *tokens, int B, int T, int C)
{ cpu_encoder_backward(s, dwte, dwpe, dout, tokens, B, T, C); }
static void t_layernorm_forward(gpt_stream *s, void *out, float *mean, float *rstd,
                                const void *inp, const void *w, const void *b, int N, int C)
{ cpu_layernorm_forward(s, out, mean, rstd, inp, w, b, N, C); }
static void t_layernorm_backward(gpt_stream *s, void *dinp, float *dw, float *db,
                                 const void *dout, const void *inp, const void *w,
                                 const float *mean, const float *rstd, int N, int C)
{ cpu_layernorm_backward(s, dinp, dw, db, dout, inp, w, mean, rstd, N, C); }
static void t_matmul_forward(gpt_stream *s, void *out, const void *inp, const void *w,
                             const void *bias, int N, int C, int OC)
{ cpu_matmul_forward(s, out, inp, w, bias, N, C, OC); }
static void t_matmul_backward(gpt_stream *s, void *dinp, float *dw, float *dbias,
                              const void *dout, const void *inp, const void *w, int N, int C,
                              int OC)
{ cpu_matmul_backward(s, dinp, dw, dbias, dout, inp, w, N, C, OC); }
static void t_attention_forward(gpt_stream *s, void *out, void *att, const void *qkv, int B,
                                int T, int C, int NH)
{ cpu_attention_forward(s, out, att, qkv, B, T, C, NH); }
static void t_attention_backward(gpt_stream *s, void *dqkv, void *datt, const void *dout,
                                 const void *qkv, const void *att, int B, int T, int C, int NH)
{ cpu_attention_backward(s, dqkv, datt, dout, qkv, att, B, T, C, NH); }
static void t_gelu_forward(gpt_stream *s, void *out, const void *inp, size_t n)
{ cpu_gelu_forward(s, out, inp, n); }
static void t_gelu_backward(gpt_stream *s, void *dinp, const void *inp, const void *dout,
                            size_t n)
{ cpu_gelu_backward(s, dinp, inp, dout, n); }
static void t_residual_forward(gpt_stream *s, void *out, const void *a, const void *b, size_t n)
{ cpu_residual_forward(s, out, a, b, n); }
static void t_residual_backward(gpt_stream *s, void *da, void *db, const void *dout, size_t n)
{ cpu_residual_backward(s, da, db, dout, n); }
static void t_crossentropy_forward(gpt_stream *s, float *losses, const void *logits,
                                   const int32_t *targets, int N, int V, int Vp)
{ cpu_crossentropy_forward(s, losses, logits, targets, N, V, Vp); }
static void t_crossentropy_backward(gpt_stream *s, void *dlogits, const void *logits,
                                    const int32_t *targets, float dloss, int N, int V, int Vp)
{ cpu_crossentropy_backward(s, dlogits, logits, targets, dloss, N, V, Vp); }
/* fp32 to fp32: a copy (memmove: callers may pass the same array). */
static void t_params_to_act(gpt_stream *s, void *dst, const float *src, size_t n)
{
    (void)s;
    if (dst != src) memmove(dst, src, n * sizeof(float));
}

/* ---- the backend ------------------------------------------------------------------------ */

static const gpt_backend_ops cpu_ops = {
    .dev_alloc = cpu_dev_alloc,
    .dev_free = cpu_dev_free,
    .describe = cpu_describe,
    .dev_mem_info = cpu_dev_mem_info,
    .stream_create = cpu_stream_create,
    .stream_destroy = cpu_stream_destroy,
    .memcpy_h2d = cpu_memcpy,
    .memcpy_d2h = cpu_memcpy,
    .memcpy_d2d = cpu_memcpy,
    .memset_zero = cpu_memset_zero,
    .stream_sync = cpu_stream_sync,
    .event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_event_record,
    .stream_wait_event = cpu_stream_wait_event,
    .event_sync = cpu_event_sync,
    .event_elapsed_ms = cpu_event_elapsed_ms,
    .host_alloc_pinned = cpu_host_alloc_pinned,
    .host_free_pinned = cpu_host_free_pinned,

    .encoder_forward = t_encoder_forward,
    .encoder_backward = t_encoder_backward,
    .layernorm_forward = t_layernorm_forward,
    .layernorm_backward = t_layernorm_backward,
    .matmul_forward = t_matmul_forward,
    .matmul_backward = t_matmul_backward,
    .attention_forward = t_attention_forward,
    .attention_backward = t_attention_backward,
    .gelu_forward = t_gelu_forward,
    .gelu_backward = t_gelu_backward,
    .residual_forward = t_residual_forward,
    .residual_backward = t_residual_backward,
    .crossentropy_forward = t_crossentropy_forward,
    .crossentropy_backward = t_crossentropy_backward,
    .adamw_update = cpu_adamw_update,
    .norm_squared = cpu_norm_squared,
    .params_to_act = t_params_to_act,
};

int gpt_cpu_backend_create(gpt_backend **out, int nthreads)
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
    be->dtype = GPT_F32;
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
