/*
 * host_pages.h — large host blocks that start up fast: aligned, on transparent huge pages
 * where the kernel offers them, and zeroed by several threads at once.
 *
 * Why: an engine's host state (streamed parameters, Adam m and v, pinned slots) is tens of
 * GiB.  Left untouched, it is faulted in 4 KiB page by page on one thread — by a memset in
 * the engine or by cudaHostRegister in the driver — about a second per GiB (issue 14).
 * Zeroing it here on every core, 2 MiB at a time, costs what the memory bandwidth costs, and
 * the engines rely on the zeros (Adam's m and v start at zero) instead of writing them again.
 * Used by the host budget's allocations and by both backends' pinned allocations.
 */
#ifndef AEBENCH_HOST_PAGES_H
#define AEBENCH_HOST_PAGES_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Blocks from this size up are 2 MiB aligned, advised to use huge pages and zeroed in
 * parallel; smaller ones are zeroed by the caller's thread. */
#define HOST_PAGES_PARALLEL_MIN ((size_t)64 << 20)

/* bytes (> 0) of zeroed memory at *ptr, page aligned (64-byte aligned under a page); free
 * with free().  0, or -1 with *ptr NULL when the memory is not there. */
int host_pages_alloc_zeroed(void **ptr, size_t bytes);

/* Fault in every page of a shared file mapping (a memory file system's file: the gemini
 * store) on every core, writable, 2 MiB per thread at a time: a memory file system allocates
 * and zeroes its pages on first touch, one thread at ~4 GB/s otherwise (posix_fallocate, or
 * the driver's page-locking).  0; or the errno of a piece that failed: ENOSPC/EFAULT/ENOMEM
 * (no room: what would have been a SIGBUS later), EINVAL (a kernel without
 * MADV_POPULATE_WRITE, before Linux 5.14: the caller reserves the pages another way). */
int host_pages_populate(void *p, size_t bytes);

#ifdef __cplusplus
}
#endif

#endif
