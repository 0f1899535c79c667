/*
 * calibrate_disk.c — --calibrate's disks: the disk tier at --nvme-dir (--offload nvme) and
 * the persistent checkpoint at --ckpt-dir (an engine's with persistent_ckpt), alone or with every rank of a job writing at
 * once.  Its own file because these measure files and a directory's disk, not the GPU and host
 * memory of calibrate.c, and share nothing with it but the timing (calibrate.h).
 */
#include "calibrate.h"

#include "exit_codes.h"
#include "../engines/runtime/ckpt_store.h"
#include "../engines/runtime/disk_tier.h"
#include "../kernels/host_pages.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- the disk tier (--offload nvme) ----------------------------------------------------- */

/* One pass over `bytes` at `off` of the tier in pieces, several in flight (as the engines'
 * jobs queue theirs), writing or reading. */
typedef struct disk_ctx {
    disk_tier *t;
    uint64_t off;
    char *buf;
    size_t bytes, piece;
    int write;
} disk_ctx;
static int run_disk(void *p)
{
    const disk_ctx *d = p;
    uint64_t ticket = 0;
    int status = GPT_OK;
    for (size_t at = 0; !status && at < d->bytes; at += d->piece)
        status = d->write ? disk_tier_write(d->t, d->off + at, d->buf + at, d->piece, NULL, &ticket)
                      : disk_tier_read(d->t, d->off + at, d->buf + at, d->piece, &ticket);
    return status ? status : disk_tier_wait(d->t, ticket);
}

/* The disk tier at --nvme-dir, each way: a block the size of a large layer's m and v (1 GiB;
 * 64 MiB on the CPU backend) in 8 MiB requests, into entry. */
int calibrate_measure_disk(const run_config *run_cfg, gpt_backend *be, cJSON *entry)
{
    (void)be; /* (the tier's I/O threads read and write host memory) */
    const int gpu = run_cfg->eng.device == DEVICE_CUDA;
    const size_t bytes = (size_t)(gpu ? 1024 : 64) << 20, piece = (size_t)8 << 20;
    disk_tier *t = NULL;
    char *buf = NULL;
    uint64_t off = 0;
    int bad = disk_tier_open(&t, run_cfg->eng.nvme_dir, NULL, 0) != 0 ||
              disk_tier_reserve(t, bytes, "--calibrate's disk block", &off) != 0 ||
              host_pages_alloc_zeroed((void **)&buf, bytes) != 0;
    double wr = 0, rd = 0;
    if (!bad) {
        disk_ctx w = {t, off, buf, bytes, piece, 1}, r = {t, off, buf, bytes, piece, 0};
        wr = bytes / (calibrate_host_ms(run_disk, &w, &bad, gpu) * 1e6);
        rd = bytes / (calibrate_host_ms(run_disk, &r, &bad, gpu) * 1e6);
    }
    free(buf);
    disk_tier_close(t);
    if (bad) {
        fprintf(stderr, "aebench: --calibrate: the disk tier at --nvme-dir %s could not be measured\n", run_cfg->eng.nvme_dir);
        return EXIT_RUN_ERROR;
    }
    cJSON_AddStringToObject(entry, "dir", run_cfg->eng.nvme_dir);
    cJSON_AddNumberToObject(entry, "read_gbs", rd);
    cJSON_AddNumberToObject(entry, "write_gbs", wr);
    return 0;
}

/* The persistent checkpoint (--ckpt-dir) as an engine writes it: ckpt_file_write of a state
 * block (header, data, checksums, each synced: O_DIRECT), timed, then the file removed. */
typedef struct ckpt_write_ctx {
    const private_dir *dir;
    const float *data;
    size_t floats, chunk;
} ckpt_write_ctx;
static int run_ckpt_write(void *p)
{
    const ckpt_write_ctx *c = p;
    return ckpt_file_write(c->dir, 0, 0, 0, 1, 1, c->data, c->floats, c->chunk);
}
/* What the persistent checkpoint does first (but after a naive checkpoint, which did it): the
 * state's checksums on the device and its copy home, on one stream. */
typedef struct ckpt_home_ctx {
    gpt_stream *s;
    uint64_t *sums;
    const float *dev;
    void *host;
    size_t floats, chunk;
} ckpt_home_ctx;
static int run_ckpt_home(void *p)
{
    const ckpt_home_ctx *c = p;
    const gpt_float_span part = {c->dev, c->floats};
    gpt_checksum_chunks(c->s, c->sums, &part, 1, c->chunk);
    return gpt_memcpy_d2h(c->s, c->host, c->dev, c->floats * sizeof(float)) || gpt_stream_sync(c->s);
}
static int measure_ckpt_home(const run_config *run_cfg, gpt_backend *be, size_t bytes, size_t chunk, double *gbs)
{
    const int gpu = run_cfg->eng.device == DEVICE_CUDA;
    gpt_stream *s = NULL;
    float *dev = NULL;
    uint64_t *sums = NULL;
    void *host = NULL;
    const size_t floats = bytes / sizeof(float), nchunks = (floats + chunk - 1) / chunk;
    int bad = be->ops->stream_create(be, &s) || be->ops->dev_alloc(be, (void **)&dev, bytes) ||
              be->ops->dev_alloc(be, (void **)&sums, nchunks * sizeof(uint64_t)) ||
              gpt_host_alloc_pinned(be, &host, bytes) || gpt_stream_memset_zero(s, dev, bytes);
    if (!bad) {
        ckpt_home_ctx c = {s, sums, dev, host, floats, chunk};
        *gbs = bytes / (calibrate_host_ms(run_ckpt_home, &c, &bad, gpu) * 1e6);
    }
    if (host) gpt_host_free_pinned(be, host);
    if (sums) be->ops->dev_free(be, sums);
    if (dev) be->ops->dev_free(be, dev);
    if (s) be->ops->stream_destroy(s);
    return bad;
}

/* With `ranks` (not NULL), every rank of the job measures at once, in step, each writing its
 * own file: what one rank gets while the others write to the machine's disk too. */
int calibrate_measure_ckpt_dir_ranks(const run_config *run_cfg, gpt_backend *be, cJSON *entry, const comm_world *ranks)
{
    /* two sizes, so that the fixed cost (open, three syncs) and the rate come apart:
     * t = latency + bytes / rate.  The large one 4 GiB on a GPU machine and the median of
     * the writes after a first: the rate a checkpoint of several GB sustains.  (1 GiB and
     * the fastest of five measured 3.1-3.7 GB/s per rank on the H100 machines' virtual disk,
     * whose cache takes such bursts, while the run's 5.5 GB per rank went at 1.2: 2026-11-25.) */
    const int gpu = run_cfg->eng.device == DEVICE_CUDA;
    const size_t large = (size_t)(gpu ? 4096 : 64) << 20, small = large / 16;
    char job[64];
    ckpt_job_id(job, sizeof job, 'c');
    float *data = NULL;
    private_dir dir;
    private_dir_init(&dir);
    char why[1200] = "";
    int bad = calibrate_any_failed(ranks, host_pages_alloc_zeroed((void **)&data, large) != 0 ||
                                              ckpt_dir_open(&dir, run_cfg->eng.ckpt_dir, job, 0, why, sizeof why) != 0);
    if (why[0]) fprintf(stderr, "aebench: --calibrate: --ckpt-dir: %s\n", why);
    double wr = 0, lat = 0, home = 0;
    if (!bad) {
        /* (chunks of 64 MiB, as the engine's; zeros: the time does not depend on the values) */
        const size_t chunk = ((size_t)64 << 20) / sizeof(float);
        ckpt_write_ctx cs = {&dir, data, small / sizeof(float), chunk},
                       cl = {&dir, data, large / sizeof(float), chunk};
        bad |= calibrate_in_step(ranks);
        const double a = calibrate_median_ms(run_ckpt_write, &cs, &bad);
        bad |= calibrate_in_step(ranks);
        const double b = calibrate_median_ms(run_ckpt_write, &cl, &bad);
        calibrate_fit_latency_rate((double)small, (double)large, a, b, &lat, &wr);
        ckpt_file_remove(&dir, 0);
        bad |= calibrate_in_step(ranks);
        bad |= measure_ckpt_home(run_cfg, be, large, chunk, &home);
    }
    if (dir.fd >= 0) ckpt_file_remove(&dir, 0); /* (a rank that failed before its writes) */
    free(data);
    if (bad) {
        fprintf(stderr, "aebench: --calibrate: the persistent checkpoint at --ckpt-dir %s could not be measured\n",
                run_cfg->eng.ckpt_dir);
        return EXIT_RUN_ERROR;
    }
    cJSON_AddStringToObject(entry, "dir", run_cfg->eng.ckpt_dir);
    cJSON_AddNumberToObject(entry, "write_ms", lat);
    cJSON_AddNumberToObject(entry, "write_gbs", wr);
    cJSON_AddNumberToObject(entry, "home_gbs", home);
    if (!ranks || ranks->rank == 0)
        printf("calibrate: the persistent checkpoint at %s%s: the state home (checksums, copy) at %.2f GB/s, then "
               "written in %.2f ms + %.2f GB/s\n", run_cfg->eng.ckpt_dir, ranks ? ", every rank at once, each" : "", home,
               lat, wr);
    return 0;
}
int calibrate_measure_ckpt_dir(const run_config *run_cfg, gpt_backend *be, cJSON *entry)
{
    return calibrate_measure_ckpt_dir_ranks(run_cfg, be, entry, NULL);
}

int calibrate_ckpt_dir_asked(const run_config *run_cfg)
{
    const engine_vtbl *eng = run_cfg->eng.ckpt_dir[0] ? engine_find(run_cfg->method) : NULL;
    return eng && eng->persistent_ckpt;
}
