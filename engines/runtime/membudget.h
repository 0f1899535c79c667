/*
 * membudget.h — byte budgets for the GPU ("device") and host memory of one run, and the
 * device arena that allocates under its budget.
 *
 * Every engine allocation goes through here, so (1) a run that does not fit stops with a
 * record of what was being allocated, how much, the budget and what was in use — never a
 * crash — and (2) the log's memory line (allocated / max allocated) is exact.
 *
 * The arena hands each request to the backend's allocator (cudaMalloc on the GPU); it keeps
 * no cache, so "reserved" equals "allocated" in the Megatron memory line.
 */
#ifndef AEBENCH_MEMBUDGET_H
#define AEBENCH_MEMBUDGET_H

#include "../../kernels/gpt.h"

#include <stddef.h>

typedef struct mem_budget {
    const char *device; /* "GPU" or "host": names the budget in messages */
    size_t limit;       /* bytes */
    size_t in_use;
    size_t peak;
    /* The first request that failed, kept for the report. */
    int oom;
    int oom_by_device;  /* 1: the budget had room but the device allocator said no */
    char oom_what[64];
    size_t oom_bytes;
    size_t oom_in_use;
    /* Set-up time: bytes allocated and the milliseconds the allocator took for them, pinned
     * host memory (page-locking) apart from the rest (for the log's setup line). */
    size_t pinned_bytes, alloc_bytes;
    double pinned_ms, alloc_ms;
} mem_budget;

void mem_budget_init(mem_budget *b, const char *device, size_t limit);
/* Account for bytes; GPT_ERR_OOM (and the record) when they would exceed the limit. */
int mem_budget_take(mem_budget *b, size_t bytes, const char *what);
void mem_budget_give(mem_budget *b, size_t bytes);
/* Record a failure of the underlying allocator for a request the budget allowed. */
void mem_budget_device_failed(mem_budget *b, size_t bytes, const char *what);
/* One line saying which memory ran out and by how much (for log, stdout and JSON). */
void mem_budget_oom_message(const mem_budget *b, char *buf, size_t len);

/* Device memory of the compute backend under a budget. */
typedef struct dev_arena {
    const gpt_backend *be;
    mem_budget budget;
} dev_arena;

void dev_arena_init(dev_arena *a, const gpt_backend *be, size_t limit);
int dev_arena_alloc(dev_arena *a, void **ptr, size_t bytes, const char *what);
void dev_arena_free(dev_arena *a, void *ptr, size_t bytes);

/* Ordinary host memory under the host budget, zeroed (engines rely on it: Adam's state
 * starts at zero), 64-byte aligned, page-aligned from a page up (for O_DIRECT). */
int host_alloc(mem_budget *b, void **ptr, size_t bytes, const char *what);
void host_free(mem_budget *b, void *ptr, size_t bytes);

/* Page-locked host memory (the backend's host_alloc_pinned, zeroed) under the host budget:
 * what transfers overlapping compute copy from and to.  A request the budget allows but the
 * system cannot pin is an OOM record like any other (oom_by_device set), never a crash. */
int pinned_alloc(mem_budget *b, const gpt_backend *be, void **ptr, size_t bytes,
                 const char *what);
void pinned_free(mem_budget *b, const gpt_backend *be, void *ptr, size_t bytes);

/* Everything one engine allocated, wherever it lives, so that free (also after a failed
 * init) gives back each block to the budget it came from, newest first. */
typedef enum mem_where { MEM_GPU, MEM_HOST, MEM_PINNED } mem_where;
enum { ENGINE_MAX_ALLOCS = 48 };
typedef struct engine_allocs {
    dev_arena *gpu;
    mem_budget *host;
    const gpt_backend *be; /* for pinned memory */
    struct {
        void *ptr;
        size_t bytes;
        mem_where where;
    } list[ENGINE_MAX_ALLOCS];
    int n;
} engine_allocs;

void engine_allocs_init(engine_allocs *a, dev_arena *gpu, mem_budget *host,
                        const gpt_backend *be);
/* Allocate under the budget of `where` and remember it; 0 or a negative gpt_status. */
int engine_alloc(engine_allocs *a, mem_where where, void **ptr, size_t bytes, const char *what);
/* Give back the most recent allocation (a temporary one). */
void engine_free_last(engine_allocs *a);
/* Give back everything, newest first. */
void engine_free_all(engine_allocs *a);

/* Human-readable size: "1.50 GiB", "12.0 MiB", "512 B". */
void format_bytes(double bytes, char *buf, size_t len);
/* Parse "32G", "512M", "90GiB", "1e9", "1048576" (binary units; K M G T) into bytes.
 * Returns 0 on success, -1 on anything else. */
int parse_bytes(const char *text, size_t *out);

#endif
