#include "host_pages.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

enum { HUGE_PAGE = 2 << 20 };

/* Each thread zeroes whole 2 MiB pieces, so a huge page is faulted in (and zeroed by the
 * kernel) by one thread only. */
static void zero_parallel(char *p, size_t bytes)
{
    const ptrdiff_t pieces = (ptrdiff_t)((bytes + HUGE_PAGE - 1) / HUGE_PAGE);
#pragma omp parallel for schedule(static)
    for (ptrdiff_t i = 0; i < pieces; i++) {
        const size_t at = (size_t)i * HUGE_PAGE;
        memset(p + at, 0, bytes - at < HUGE_PAGE ? bytes - at : HUGE_PAGE);
    }
}

int host_pages_alloc_zeroed(void **ptr, size_t bytes)
{
    *ptr = NULL;
    if (bytes == 0) return -1;
    const int big = bytes >= HOST_PAGES_PARALLEL_MIN;
    const size_t align = big ? HUGE_PAGE : bytes >= 4096 ? 4096 : 64;
    void *p = NULL;
    if (posix_memalign(&p, align, bytes) != 0 || p == NULL) return -1;
    if (big) {
        /* (advice only: without transparent huge pages the parallel zeroing still helps) */
        (void)madvise(p, bytes, MADV_HUGEPAGE);
        zero_parallel(p, bytes);
    } else {
        memset(p, 0, bytes);
    }
    *ptr = p;
    return 0;
}

int host_pages_populate(void *p, size_t bytes)
{
#ifdef MADV_POPULATE_WRITE
    const ptrdiff_t pieces = (ptrdiff_t)((bytes + HUGE_PAGE - 1) / HUGE_PAGE);
    int failed = 0;
#pragma omp parallel for schedule(static) reduction(max : failed)
    for (ptrdiff_t i = 0; i < pieces; i++) {
        const size_t at = (size_t)i * HUGE_PAGE;
        if (madvise((char *)p + at, bytes - at < HUGE_PAGE ? bytes - at : HUGE_PAGE, MADV_POPULATE_WRITE) != 0 &&
            errno > failed)
            failed = errno;
    }
    return failed;
#else
    (void)p;
    (void)bytes;
    return EINVAL;
#endif
}
