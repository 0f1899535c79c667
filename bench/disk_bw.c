/*
 * disk_bw.c — the disk ceiling of an nvme-offloading run, measured through the disk tier
 * itself (engines/runtime/disk_tier.h): write then read a file of the given size in
 * O_DIRECT requests of 1 MiB with 16 in flight (as DeepSpeed's aio config: block_size 1 MiB,
 * queue_depth 16), then the same with 4 MiB requests.
 * GB/s = bytes / wall time from the first request to the last completion.  The page cache
 * plays no part (O_DIRECT), so the read really comes from the device.
 *
 *   build/bench/disk_bw DIR [GiB]    (default 4 GiB; DIR on the file system to measure)
 *
 * The zero-infinity and stronghold --offload nvme benchmarks compare their disk time with
 * bytes / this bandwidth.
 */
#include "../engines/runtime/disk_tier.h"
#include "../engines/runtime/timer.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { INFLIGHT = 16 };

/* Write (or read) [0, total) in requests of `req` bytes over INFLIGHT buffers; GB/s. */
static int sweep(disk_tier *t, uint64_t base, size_t total, size_t req, char *bufs, int write,
                 double *gbps, double *busy_ms)
{
    const size_t nreq = total / req;
    uint64_t *tickets = calloc(nreq, sizeof *tickets);
    if (!tickets) return GPT_ERR_OOM;
    double rd, wr, b;
    disk_tier_take_stats(t, &b, &rd, &wr);
    int rc = GPT_OK;
    const double t0 = wall_ms();
    for (size_t r = 0; r < nreq && !rc; r++) {
        char *buf = bufs + (r % INFLIGHT) * req;
        /* The buffer's previous request must be done before it is reused. */
        if (r >= INFLIGHT && (rc = disk_tier_wait(t, tickets[r - INFLIGHT]))) break;
        rc = write ? disk_tier_write(t, base + r * req, buf, req, NULL, &tickets[r])
                   : disk_tier_read(t, base + r * req, buf, req, &tickets[r]);
    }
    if (!rc) rc = disk_tier_drain(t);
    const double ms = wall_ms() - t0;
    disk_tier_take_stats(t, busy_ms, &rd, &wr);
    free(tickets);
    *gbps = (double)(nreq * req) / (ms * 1e6);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: %s DIR [GiB]\n", argv[0]);
        return 2;
    }
    const double gib = argc == 3 ? atof(argv[2]) : 4.0;
    if (!(gib > 0)) {
        fprintf(stderr, "%s: the size must be a positive number of GiB\n", argv[0]);
        return 2;
    }
    const size_t sizes[] = {1u << 20, 4u << 20};
    const size_t biggest = sizes[1];
    size_t total = (size_t)(gib * (double)(1ull << 30));
    total = total / biggest * biggest;
    if (total < biggest * INFLIGHT) total = biggest * INFLIGHT;

    char *bufs = NULL;
    if (posix_memalign((void **)&bufs, DISK_TIER_ALIGN, biggest * INFLIGHT) != 0) {
        fprintf(stderr, "%s: out of memory for the buffers\n", argv[0]);
        return 1;
    }
    /* Data that no layer below could compress or skip. */
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < biggest * INFLIGHT / sizeof s; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        memcpy(bufs + i * sizeof s, &s, sizeof s);
    }
    disk_tier *t = NULL;
    int rc = disk_tier_open(&t, argv[1], NULL, INFLIGHT);
    uint64_t base = 0;
    if (!rc) rc = disk_tier_reserve(t, total, "disk_bw file", &base);
    if (rc) {
        fprintf(stderr, "%s: cannot open a %.2f GiB swap file under %s (see above)\n", argv[0],
                (double)total / (1ull << 30), argv[1]);
        disk_tier_close(t);
        free(bufs);
        return 1;
    }
    printf("disk_bw: %s, %.2f GiB, O_DIRECT, %d requests in flight\n", argv[1],
           (double)total / (1ull << 30), INFLIGHT);
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0] && !rc; k++) {
        double w_gbps = 0, r_gbps = 0, w_busy = 0, r_busy = 0;
        if ((rc = sweep(t, base, total, sizes[k], bufs, 1, &w_gbps, &w_busy)) ||
            (rc = sweep(t, base, total, sizes[k], bufs, 0, &r_gbps, &r_busy)))
            break;
        printf("  %zu MiB requests: write %.2f GB/s, read %.2f GB/s\n", sizes[k] >> 20, w_gbps,
               r_gbps);
    }
    disk_tier_close(t);
    free(bufs);
    if (rc) fprintf(stderr, "%s: I/O failed (see above)\n", argv[0]);
    return rc ? 1 : 0;
}
