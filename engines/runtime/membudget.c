#include "membudget.h"
#include "timer.h"
#include "../../kernels/host_pages.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void mem_budget_init(mem_budget *b, const char *device, size_t limit)
{
    memset(b, 0, sizeof *b);
    b->device = device;
    b->limit = limit;
}

static void record_oom(mem_budget *b, size_t bytes, const char *what, int by_device)
{
    if (b->oom) return; /* the first failure is the one that explains the run */
    b->oom = 1;
    b->oom_by_device = by_device;
    snprintf(b->oom_what, sizeof b->oom_what, "%s", what);
    b->oom_bytes = bytes;
    b->oom_in_use = b->in_use;
}

int mem_budget_take(mem_budget *b, size_t bytes, const char *what)
{
    if (bytes > b->limit || b->in_use > b->limit - bytes) {
        record_oom(b, bytes, what, 0);
        return GPT_ERR_OOM;
    }
    b->in_use += bytes;
    if (b->in_use > b->peak) b->peak = b->in_use;
    return GPT_OK;
}

void mem_budget_give(mem_budget *b, size_t bytes)
{
    b->in_use = bytes > b->in_use ? 0 : b->in_use - bytes;
}

void mem_budget_device_failed(mem_budget *b, size_t bytes, const char *what)
{
    record_oom(b, bytes, what, 1);
}

void mem_budget_oom_message(const mem_budget *b, char *buf, size_t len)
{
    char req[32], lim[32], use[32], short_by[32];
    format_bytes((double)b->oom_bytes, req, sizeof req);
    format_bytes((double)b->limit, lim, sizeof lim);
    format_bytes((double)b->oom_in_use, use, sizeof use);
    double need = (double)b->oom_in_use + (double)b->oom_bytes - (double)b->limit;
    format_bytes(need > 0 ? need : 0, short_by, sizeof short_by);
    if (b->oom_by_device)
        snprintf(buf, len,
                 "out of %s memory: allocating %s for %s failed in the %s allocator "
                 "(in use %s, budget %s)",
                 b->device, req, b->oom_what, b->device, use, lim);
    else
        snprintf(buf, len,
                 "out of %s memory: %s for %s does not fit (in use %s, budget %s, short by %s)",
                 b->device, req, b->oom_what, use, lim, short_by);
}

void dev_arena_init(dev_arena *a, const gpt_backend *be, size_t limit)
{
    a->be = be;
    mem_budget_init(&a->budget, "GPU", limit);
}

int dev_arena_alloc(dev_arena *a, void **ptr, size_t bytes, const char *what)
{
    *ptr = NULL;
    int rc = mem_budget_take(&a->budget, bytes, what);
    if (rc) return rc;
    const double t0 = wall_ms();
    rc = a->be->ops->dev_alloc(a->be, ptr, bytes ? bytes : 1);
    a->budget.alloc_ms += wall_ms() - t0;
    a->budget.alloc_bytes += bytes;
    if (rc) {
        mem_budget_give(&a->budget, bytes);
        if (rc == GPT_ERR_OOM) mem_budget_device_failed(&a->budget, bytes, what);
        *ptr = NULL;
        return rc;
    }
    return GPT_OK;
}

void dev_arena_free(dev_arena *a, void *ptr, size_t bytes)
{
    if (!ptr) return;
    a->be->ops->dev_free(a->be, ptr);
    mem_budget_give(&a->budget, bytes);
}

int host_alloc(mem_budget *b, void **ptr, size_t bytes, const char *what)
{
    *ptr = NULL;
    int rc = mem_budget_take(b, bytes, what);
    if (rc) return rc;
    /* Blocks of a page or more start on a page, so the disk tier can do O_DIRECT I/O on
     * them (as on pinned memory); large ones are zeroed by every core (host_pages.h). */
    const double t0 = wall_ms();
    const int failed = host_pages_alloc_zeroed(ptr, bytes ? bytes : 1) != 0;
    b->alloc_ms += wall_ms() - t0;
    b->alloc_bytes += bytes;
    if (failed) {
        mem_budget_give(b, bytes);
        mem_budget_device_failed(b, bytes, what);
        *ptr = NULL;
        return GPT_ERR_OOM;
    }
    return GPT_OK;
}

void host_free(mem_budget *b, void *ptr, size_t bytes)
{
    if (!ptr) return;
    free(ptr);
    mem_budget_give(b, bytes);
}

int pinned_alloc(mem_budget *b, const gpt_backend *be, void **ptr, size_t bytes,
                 const char *what)
{
    *ptr = NULL;
    int rc = mem_budget_take(b, bytes, what);
    if (rc) return rc;
    const double t0 = wall_ms();
    rc = gpt_host_alloc_pinned(be, ptr, bytes ? bytes : 1);
    b->pinned_ms += wall_ms() - t0;
    b->pinned_bytes += bytes;
    if (rc) {
        mem_budget_give(b, bytes);
        if (rc == GPT_ERR_OOM) mem_budget_device_failed(b, bytes, what);
        *ptr = NULL;
        return rc;
    }
    return GPT_OK;
}

void pinned_free(mem_budget *b, const gpt_backend *be, void *ptr, size_t bytes)
{
    if (!ptr) return;
    gpt_host_free_pinned(be, ptr);
    mem_budget_give(b, bytes);
}

void engine_allocs_init(engine_allocs *a, dev_arena *gpu, mem_budget *host,
                        const gpt_backend *be)
{
    a->gpu = gpu;
    a->host = host;
    a->be = be;
    a->n = 0;
}

int engine_alloc(engine_allocs *a, mem_where where, void **ptr, size_t bytes, const char *what)
{
    *ptr = NULL;
    if (a->n == ENGINE_MAX_ALLOCS) return GPT_ERR_INVALID; /* raise the constant */
    int rc = where == MEM_GPU    ? dev_arena_alloc(a->gpu, ptr, bytes, what)
             : where == MEM_HOST ? host_alloc(a->host, ptr, bytes, what)
                                 : pinned_alloc(a->host, a->be, ptr, bytes, what);
    if (rc == 0) {
        a->list[a->n].ptr = *ptr;
        a->list[a->n].bytes = bytes;
        a->list[a->n].where = where;
        a->n++;
    }
    return rc;
}

void engine_free_last(engine_allocs *a)
{
    if (a->n == 0) return;
    a->n--;
    void *ptr = a->list[a->n].ptr;
    const size_t bytes = a->list[a->n].bytes;
    switch (a->list[a->n].where) {
    case MEM_GPU: dev_arena_free(a->gpu, ptr, bytes); break;
    case MEM_HOST: host_free(a->host, ptr, bytes); break;
    case MEM_PINNED: pinned_free(a->host, a->be, ptr, bytes); break;
    }
}

void engine_free_all(engine_allocs *a)
{
    while (a->n > 0) engine_free_last(a);
}

void format_bytes(double bytes, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int u = 0;
    while (bytes >= 1024.0 && u < 5) {
        bytes /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%.0f B", bytes);
    else
        snprintf(buf, len, "%.*f %s", bytes < 10 ? 2 : bytes < 100 ? 1 : 0, bytes, units[u]);
}

int parse_bytes(const char *text, size_t *out)
{
    if (!text || !*text) return -1;
    errno = 0;
    char *end = NULL;
    double v = strtod(text, &end);
    if (errno || end == text || !isfinite(v) || v <= 0) return -1;
    /* An optional binary unit K, M, G or T, written bare, with "B" or with "iB". */
    double mult = 1;
    const char *unit = strchr("KMGT", toupper((unsigned char)*end));
    if (*end && unit) {
        for (const char *u = "KMGT"; u <= unit; u++) mult *= 1024.0;
        end++;
        if (strcasecmp(end, "iB") == 0 || strcasecmp(end, "B") == 0) end += strlen(end);
    } else if (strcasecmp(end, "B") == 0) {
        end++;
    }
    if (*end) return -1;
    double bytes = v * mult;
    if (bytes < 1 || bytes > 9.0e18) return -1;
    *out = (size_t)bytes;
    return 0;
}

