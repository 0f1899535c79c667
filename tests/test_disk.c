/*
 * test_disk.c — the disk tier (O_DIRECT swap file, requests in flight, in-order tickets),
 * the nvme Adam pipeline (bit-identical to the in-memory AdamW), and stronghold with
 * --offload nvme (the baseline's trajectory, plan == peaks on GPU, host and disk).
 *
 * The swap directories go under <test binary's dir>/disk-tmp/<test> (a disk file system:
 * O_DIRECT works there, unlike tmpfs); every test checks that nothing is left behind.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "engine_harness.h"

#include "../engines/runtime/disk_tier.h"
#include "../engines/runtime/nvme_adam.h"
#include "../kernels/rng.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- helpers ----------------------------------------------------------------------------- */

/* Where the test directories go (set by main from argv[0]); passed as the tests' state. */
typedef struct disk_ctx {
    char root[PATH_MAX];
} disk_ctx;

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static int entries_in(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

/* A fresh, empty parent directory for one test. */
static void parent_dir(void **state, const char *name, char *out, size_t len)
{
    const disk_ctx *ctx = *state;
    assert_true(mkdir(ctx->root, 0755) == 0 || errno == EEXIST);
    assert_true(snprintf(out, len, "%s/%s", ctx->root, name) < (int)len);
    assert_true(mkdir(out, 0755) == 0 || errno == EEXIST);
    assert_int_equal(entries_in(out), 0);
}

/* The test's parent must be empty: then it goes. */
static void parent_done(const char *dir)
{
    assert_int_equal(entries_in(dir), 0);
    assert_int_equal(rmdir(dir), 0);
}

static void *page_buffer(size_t bytes)
{
    void *p = NULL;
    assert_int_equal(posix_memalign(&p, DISK_TIER_ALIGN, bytes), 0);
    return p;
}

static void fill_random(uint32_t *x, size_t words, uint64_t seed)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < words; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        x[i] = (uint32_t)s;
    }
}

/* ---- the disk tier ------------------------------------------------------------------------ */

/* Many writes then many reads in flight at once, of random sizes at their regions; a read
 * issued right behind a write of the same region sees it; bytes, busy time and the budget
 * are counted; nothing is left after close. */
static void test_disk_round_trip(void **state)
{
    char dir[PATH_MAX];
    parent_dir(state, "round_trip", dir, sizeof dir);
    mem_budget budget;
    mem_budget_init(&budget, "disk", SIZE_MAX);
    disk_tier *t;
    assert_int_equal(disk_tier_open(&t, dir, &budget, 6), GPT_OK);
    enum { REGIONS = 48 };
    size_t bytes[REGIONS], total = 0;
    uint64_t off[REGIONS];
    uint32_t *out[REGIONS], *in[REGIONS];
    uint32_t sizes_seed[1];
    fill_random(sizes_seed, 1, 5);
    for (int i = 0; i < REGIONS; i++) {
        uint32_t r;
        fill_random(&r, 1, (uint64_t)i + 11);
        bytes[i] = (size_t)(1 + r % 40) * DISK_TIER_ALIGN;
        assert_int_equal(disk_tier_reserve(t, bytes[i], "test region", &off[i]), GPT_OK);
        assert_true(off[i] % DISK_TIER_ALIGN == 0);
        total += bytes[i];
        out[i] = page_buffer(bytes[i]);
        in[i] = page_buffer(bytes[i]);
        fill_random(out[i], bytes[i] / 4, (uint64_t)i + 100);
        memset(in[i], 0, bytes[i]);
    }
    assert_int_equal(budget.in_use, total);
    /* Writes in a shuffled order, all queued before any wait. */
    uint64_t last = 0, ticket;
    for (int k = 0; k < REGIONS; k++) {
        const int i = (k * 17) % REGIONS;
        assert_int_equal(disk_tier_write(t, off[i], out[i], bytes[i], NULL, &ticket), GPT_OK);
        assert_true(ticket == last + 1);
        last = ticket;
    }
    assert_int_equal(disk_tier_wait(t, last), GPT_OK);
    for (int k = 0; k < REGIONS; k++) {
        const int i = (k * 29) % REGIONS;
        assert_int_equal(disk_tier_read(t, off[i], in[i], bytes[i], &ticket), GPT_OK);
    }
    assert_int_equal(disk_tier_drain(t), GPT_OK);
    for (int i = 0; i < REGIONS; i++) assert_memory_equal(in[i], out[i], bytes[i]);
    double busy, rd, wr;
    disk_tier_take_stats(t, &busy, &rd, &wr);
    assert_true(rd == (double)total && wr == (double)total);
    assert_true(busy > 0);
    disk_tier_take_stats(t, &busy, &rd, &wr);
    assert_true(busy == 0 && rd == 0 && wr == 0);

    /* Write new data then read it back with no wait between: the read sees the write. */
    for (int i = 0; i < REGIONS; i++) {
        fill_random(out[i], bytes[i] / 4, (uint64_t)i + 7000);
        assert_int_equal(disk_tier_write(t, off[i], out[i], bytes[i], NULL, &ticket), GPT_OK);
        assert_int_equal(disk_tier_read(t, off[i], in[i], bytes[i], &ticket), GPT_OK);
    }
    assert_int_equal(disk_tier_wait(t, ticket), GPT_OK);
    for (int i = 0; i < REGIONS; i++) assert_memory_equal(in[i], out[i], bytes[i]);

    /* The names were gone from the start. */
    struct stat sb;
    assert_int_equal(stat(disk_tier_path(t), &sb), -1);
    assert_int_equal(entries_in(dir), 0);
    disk_tier_close(t);
    assert_int_equal(budget.in_use, 0);
    assert_int_equal(budget.peak, total);
    for (int i = 0; i < REGIONS; i++) {
        free(out[i]);
        free(in[i]);
    }
    parent_done(dir);
}

/* With the names kept (disk_tier_open_keeping_names) the directory is 0700 and the file 0600;
 * close removes both.  Without it nothing is visible even while the tier is open. */
static void test_disk_private_dir(void **state)
{
    char dir[PATH_MAX];
    parent_dir(state, "private", dir, sizeof dir);
    disk_tier *t;
    assert_int_equal(disk_tier_open_keeping_names(&t, dir, NULL, 2), GPT_OK);
    const char *path = disk_tier_path(t);
    assert_non_null(strstr(path, "/aebench-swap-"));
    assert_true(strncmp(path, dir, strlen(dir)) == 0);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_true(S_ISDIR(sb.st_mode));
    assert_int_equal(sb.st_mode & 07777, 0700);
    char file[PATH_MAX + 8];
    snprintf(file, sizeof file, "%s/swap", path);
    assert_int_equal(stat(file, &sb), 0);
    assert_int_equal(sb.st_mode & 07777, 0600);
    disk_tier_close(t);
    assert_int_equal(entries_in(dir), 0);

    assert_int_equal(disk_tier_open(&t, dir, NULL, 2), GPT_OK);
    assert_int_equal(entries_in(dir), 0);
    disk_tier_close(t);
    parent_done(dir);
}

/* A process killed with SIGTERM or SIGKILL while it holds a tier leaves nothing behind. */
static void test_disk_killed_child_leaves_nothing(void **state)
{
    char dir[PATH_MAX];
    parent_dir(state, "killed", dir, sizeof dir);
    const int sigs[] = {SIGTERM, SIGKILL};
    for (int s = 0; s < 2; s++) {
        int fds[2];
        assert_int_equal(pipe(fds), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(fds[0]);
            disk_tier *t;
            uint64_t off, ticket;
            void *buf = NULL;
            if (disk_tier_open(&t, dir, NULL, 2) || disk_tier_reserve(t, 1 << 20, "child", &off) ||
                posix_memalign(&buf, DISK_TIER_ALIGN, 1 << 20))
                _exit(1);
            memset(buf, 0x5a, 1 << 20);
            if (disk_tier_write(t, off, buf, 1 << 20, NULL, &ticket) || disk_tier_wait(t, ticket))
                _exit(1);
            if (write(fds[1], "r", 1) != 1) _exit(1);
            for (;;) pause();
        }
        close(fds[1]);
        char c = 0;
        assert_int_equal(read(fds[0], &c, 1), 1); /* the child holds its tier now */
        close(fds[0]);
        assert_int_equal(entries_in(dir), 0);
        assert_int_equal(kill(pid, sigs[s]), 0);
        int status = 0;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFSIGNALED(status) && WTERMSIG(status) == sigs[s]);
        assert_int_equal(entries_in(dir), 0);
    }
    parent_done(dir);
}

/* A directory that is missing, not a directory, or (when not root) not writable: GPT_ERR_IO
 * and nothing made. */
static void test_disk_unusable_dir(void **state)
{
    char dir[PATH_MAX], bad[PATH_MAX + 16];
    parent_dir(state, "unusable", dir, sizeof dir);
    disk_tier *t = (disk_tier *)1;
    snprintf(bad, sizeof bad, "%s/missing", dir);
    assert_int_equal(disk_tier_open(&t, bad, NULL, 2), GPT_ERR_IO);
    assert_null(t);
    snprintf(bad, sizeof bad, "%s/a-file", dir);
    FILE *f = fopen(bad, "w");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(disk_tier_open(&t, bad, NULL, 2), GPT_ERR_IO);
    assert_int_equal(unlink(bad), 0);
    if (geteuid() != 0) { /* root writes anywhere */
        snprintf(bad, sizeof bad, "%s/read-only", dir);
        assert_int_equal(mkdir(bad, 0500), 0);
        assert_int_equal(disk_tier_open(&t, bad, NULL, 2), GPT_ERR_IO);
        assert_int_equal(entries_in(bad), 0);
        assert_int_equal(rmdir(bad), 0);
    }
    parent_done(dir);
}

/* A reservation beyond the disk budget: GPT_ERR_OOM with the budget's record; what was
 * reserved before is given back at close. */
static void test_disk_budget_too_small(void **state)
{
    char dir[PATH_MAX];
    parent_dir(state, "budget", dir, sizeof dir);
    mem_budget budget;
    mem_budget_init(&budget, "disk", 1 << 20);
    disk_tier *t;
    assert_int_equal(disk_tier_open(&t, dir, &budget, 2), GPT_OK);
    uint64_t off;
    assert_int_equal(disk_tier_reserve(t, 600 << 10, "first half", &off), GPT_OK);
    assert_int_equal(disk_tier_reserve(t, 600 << 10, "Adam state of layer 7", &off), GPT_ERR_OOM);
    assert_true(budget.oom);
    assert_false(budget.oom_by_device);
    assert_string_equal(budget.oom_what, "Adam state of layer 7");
    assert_int_equal(budget.oom_bytes, 600 << 10);
    assert_int_equal(budget.oom_in_use, 600 << 10);
    char msg[256];
    mem_budget_oom_message(&budget, msg, sizeof msg);
    assert_non_null(strstr(msg, "out of disk memory"));
    disk_tier_close(t);
    assert_int_equal(budget.in_use, 0);
    parent_done(dir);
}

/* Unaligned buffer, size or offset, or a range outside the reservation: GPT_ERR_INVALID. */
static void test_disk_unaligned(void **state)
{
    char dir[PATH_MAX];
    parent_dir(state, "unaligned", dir, sizeof dir);
    disk_tier *t;
    assert_int_equal(disk_tier_open(&t, dir, NULL, 2), GPT_OK);
    uint64_t off, ticket;
    assert_int_equal(disk_tier_reserve(t, 3 * DISK_TIER_ALIGN, "r", &off), GPT_OK);
    char *buf = page_buffer(4 * DISK_TIER_ALIGN);
    memset(buf, 1, 4 * DISK_TIER_ALIGN);
    assert_int_equal(disk_tier_write(t, off, buf + 64, DISK_TIER_ALIGN, NULL, &ticket), GPT_ERR_INVALID);
    assert_int_equal(disk_tier_read(t, off, buf + 64, DISK_TIER_ALIGN, &ticket), GPT_ERR_INVALID);
    assert_int_equal(disk_tier_write(t, off, buf, 100, NULL, &ticket), GPT_ERR_INVALID);
    assert_int_equal(disk_tier_write(t, off + 512, buf, DISK_TIER_ALIGN, NULL, &ticket), GPT_ERR_INVALID);
    assert_int_equal(disk_tier_write(t, off, buf, 4 * DISK_TIER_ALIGN, NULL, &ticket), GPT_ERR_INVALID);
    assert_int_equal(disk_tier_write(t, off, buf, 3 * DISK_TIER_ALIGN, NULL, &ticket), GPT_OK);
    assert_int_equal(disk_tier_wait(t, ticket), GPT_OK);
    /* host_alloc hands out page-aligned blocks from a page up, so its buffers are usable. */
    mem_budget host;
    mem_budget_init(&host, "host", SIZE_MAX);
    void *hb;
    assert_int_equal(host_alloc(&host, &hb, DISK_TIER_ALIGN + 4, "x"), GPT_OK);
    assert_true((uintptr_t)hb % DISK_TIER_ALIGN == 0);
    host_free(&host, hb, DISK_TIER_ALIGN + 4);
    disk_tier_close(t);
    free(buf);
    parent_done(dir);
}

/* A write after an event does not start before it: the buffer is filled by a copy on a
 * stream held behind a gate; the write must carry the copy's data, not the old one. */
static void test_disk_write_waits_for_event(void **state)
{
    char dir[PATH_MAX];
    parent_dir(state, "event", dir, sizeof dir);
    gpt_backend *be;
    assert_int_equal(gpt_cpu_backend_create(&be, 1), GPT_OK);
    gpt_stream *s = NULL;
    assert_int_equal(be->ops->stream_create(be, &s), GPT_OK);
    gpt_event *gate = NULL, *filled = NULL;
    assert_int_equal(gpt_event_create(be, &gate), GPT_OK);
    assert_int_equal(gpt_event_create(be, &filled), GPT_OK);
    const size_t bytes = 8 * DISK_TIER_ALIGN;
    uint32_t *buf = page_buffer(bytes), *fresh = page_buffer(bytes), *back = page_buffer(bytes);
    memset(buf, 0, bytes);
    fill_random(fresh, bytes / 4, 3);

    disk_tier *t;
    assert_int_equal(disk_tier_open(&t, dir, NULL, 4), GPT_OK);
    uint64_t off, ticket;
    assert_int_equal(disk_tier_reserve(t, bytes, "gated", &off), GPT_OK);
    assert_int_equal(gpt_cpu_event_hold(gate), GPT_OK);
    assert_int_equal(gpt_stream_wait_event(s, gate), GPT_OK);
    assert_int_equal(gpt_memcpy_d2h(s, buf, fresh, bytes), GPT_OK);
    assert_int_equal(gpt_event_record(filled, s), GPT_OK);
    assert_int_equal(disk_tier_write(t, off, buf, bytes, filled, &ticket), GPT_OK);
    sleep_ms(50);
    double busy, rd, wr;
    disk_tier_take_stats(t, &busy, &rd, &wr);
    assert_true(wr == 0); /* still waiting */
    assert_int_equal(gpt_cpu_event_release(gate), GPT_OK);
    assert_int_equal(disk_tier_wait(t, ticket), GPT_OK);
    assert_int_equal(disk_tier_read(t, off, back, bytes, &ticket), GPT_OK);
    assert_int_equal(disk_tier_wait(t, ticket), GPT_OK);
    assert_memory_equal(back, fresh, bytes);
    disk_tier_close(t);
    assert_int_equal(gpt_stream_sync(s), GPT_OK);
    gpt_event_destroy(gate);
    gpt_event_destroy(filled);
    be->ops->stream_destroy(s);
    gpt_cpu_backend_destroy(be);
    free(buf);
    free(fresh);
    free(back);
    parent_done(dir);
}

/* ---- nvme adam ------------------------------------------------------------------------------ */

typedef struct ref_block {
    size_t n, n_decay;
    float *p, *rp, *g, *rm, *rv; /* p: nvme's params; rp, rm, rv: the reference's */
    int id;
    uint64_t ticket;
} ref_block;

/* Blocks of several sizes over several steps, gradients in memory or on disk, depth 2 and
 * 3: the parameters equal gpt_block_adamw's (CPU backend) bit for bit; staging and disk
 * bytes are what the plan helpers say. */
static void nvme_adam_case(void **state, int depth, int grads_on_disk)
{
    char dir[PATH_MAX], name[64];
    snprintf(name, sizeof name, "nvme_%d_%d", depth, grads_on_disk);
    parent_dir(state, name, dir, sizeof dir);
    gpt_backend *be;
    assert_int_equal(gpt_cpu_backend_create(&be, 2), GPT_OK);
    gpt_stream *ref = NULL;
    assert_int_equal(be->ops->stream_create(be, &ref), GPT_OK);
    mem_budget host, disk;
    mem_budget_init(&host, "host", SIZE_MAX);
    mem_budget_init(&disk, "disk", SIZE_MAX);
    disk_tier *t;
    assert_int_equal(disk_tier_open(&t, dir, &disk, 4), GPT_OK);
    cpu_adam *pool;
    assert_int_equal(cpu_adam_create(&pool, 2), GPT_OK);
    enum { BLOCKS = 5, STEPS = 4 };
    /* (the largest goes to the tier in several pieces) */
    const size_t sizes[BLOCKS] = {30011, 1000, 4099, 1, 1100003}, max_block = 1100003;
    nvme_adam *na;
    assert_int_equal(nvme_adam_create(&na, t, pool, &host, max_block, depth, grads_on_disk), GPT_OK);
    assert_int_equal(host.in_use, nvme_adam_staging_bytes(max_block, depth, grads_on_disk));
    ref_block b[BLOCKS];
    size_t disk_bytes = 0;
    for (int i = 0; i < BLOCKS; i++) {
        b[i].n = sizes[i];
        b[i].n_decay = sizes[i] * 2 / 3;
        const size_t bytes = disk_tier_round(sizes[i] * sizeof(float));
        b[i].p = page_buffer(bytes);
        b[i].rp = page_buffer(bytes);
        b[i].g = page_buffer(bytes);
        b[i].rm = calloc(sizes[i], sizeof(float));
        b[i].rv = calloc(sizes[i], sizeof(float));
        assert_non_null(b[i].rm);
        assert_non_null(b[i].rv);
        for (size_t k = 0; k < sizes[i]; k++)
            b[i].p[k] = b[i].rp[k] = 0.02f * (float)((int)(k * 7 + (size_t)i) % 201 - 100);
        b[i].ticket = 0;
        assert_int_equal(nvme_adam_add_block(na, sizes[i], "test block", &b[i].id), GPT_OK);
        disk_bytes += nvme_adam_block_disk_bytes(sizes[i], grads_on_disk);
    }
    assert_int_equal(disk.in_use, disk_bytes);
    assert_true(disk_bytes >= BLOCKS * 2 * sizeof(float)); /* (non-trivial) */
    uint64_t dummy;
    if (!grads_on_disk) assert_int_equal(nvme_adam_put_grads(na, 0, b[0].g, NULL, &dummy), GPT_ERR_INVALID);

    gpt_optim o = gpt_optim_default();
    for (int step = 1; step <= STEPS; step++) {
        const float lr = 1e-3f * (float)step, scale = step == 2 ? 0.37f : 1.0f;
        for (int i = 0; i < BLOCKS; i++) {
            /* This block's previous update has used its gradients. */
            assert_int_equal(nvme_adam_wait(na, b[i].ticket), GPT_OK);
            fill_random((uint32_t *)b[i].g, b[i].n, (uint64_t)(step * 100 + i));
            for (size_t k = 0; k < b[i].n; k++) /* small finite gradients from the bits */
                b[i].g[k] = (float)((int32_t)((uint32_t *)b[i].g)[k] >> 12) * 1e-6f;
            gpt_block_adamw(ref, b[i].rp, b[i].g, b[i].rm, b[i].rv, b[i].n, b[i].n_decay, &o, lr,
                            step, scale);
            assert_int_equal(gpt_stream_sync(ref), GPT_OK);
            nvme_adam_job job = {.block = b[i].id, .params = b[i].p, .grads = b[i].g,
                                 .n_decay = b[i].n_decay, .optim = o, .lr = lr, .t = step,
                                 .grad_scale = scale};
            if (grads_on_disk) {
                job.grads = NULL;
                assert_int_equal(nvme_adam_put_grads(na, b[i].id, b[i].g, NULL, &dummy), GPT_OK);
            }
            assert_int_equal(nvme_adam_submit(na, &job, &b[i].ticket), GPT_OK);
        }
    }
    assert_int_equal(nvme_adam_wait(na, b[BLOCKS - 1].ticket), GPT_OK);
    assert_true(cpu_adam_take_busy_ms(pool) > 0); /* the updates ran on the pool */
    for (int i = 0; i < BLOCKS; i++) {
        if (memcmp(b[i].p, b[i].rp, b[i].n * sizeof(float)) != 0)
            fail_msg("depth %d, grads on disk %d: block %d differs from gpt_block_adamw", depth,
                     grads_on_disk, i);
        assert_true(b[i].p[0] != 0.02f * (float)(i % 201 - 100)); /* (it moved) */
    }
    /* Every step read and wrote m, v (and read the gradients) of every block. */
    double busy, rd, wr;
    disk_tier_take_stats(t, &busy, &rd, &wr);
    double state_bytes = 0;
    for (int i = 0; i < BLOCKS; i++) state_bytes += (double)disk_tier_round(b[i].n * sizeof(float));
    assert_true(rd == STEPS * state_bytes * (grads_on_disk ? 3 : 2));
    assert_true(wr == STEPS * state_bytes * (grads_on_disk ? 3 : 2) + 2 * state_bytes);

    nvme_adam_destroy(na);
    assert_int_equal(host.in_use, 0);
    cpu_adam_destroy(pool);
    disk_tier_close(t);
    assert_int_equal(disk.in_use, 0);
    for (int i = 0; i < BLOCKS; i++) {
        free(b[i].p);
        free(b[i].rp);
        free(b[i].g);
        free(b[i].rm);
        free(b[i].rv);
    }
    be->ops->stream_destroy(ref);
    gpt_cpu_backend_destroy(be);
    parent_done(dir);
}

static void test_nvme_adam_bit_identical(void **state)
{
    nvme_adam_case(state, 2, 0);
    nvme_adam_case(state, 3, 0);
    nvme_adam_case(state, 2, 1);
    nvme_adam_case(state, 4, 1);
}

/* A job with an `after` event does not update before the event; later jobs queue behind. */
static void test_nvme_adam_waits_for_after(void **state)
{
    char dir[PATH_MAX];
    parent_dir(state, "nvme_after", dir, sizeof dir);
    gpt_backend *be;
    assert_int_equal(gpt_cpu_backend_create(&be, 1), GPT_OK);
    gpt_event *gate = NULL;
    assert_int_equal(gpt_event_create(be, &gate), GPT_OK);
    mem_budget host;
    mem_budget_init(&host, "host", SIZE_MAX);
    disk_tier *t;
    assert_int_equal(disk_tier_open(&t, dir, NULL, 2), GPT_OK);
    cpu_adam *pool;
    assert_int_equal(cpu_adam_create(&pool, 1), GPT_OK);
    nvme_adam *na;
    assert_int_equal(nvme_adam_create(&na, t, pool, &host, 2048, 2, 0), GPT_OK);
    const size_t n = 2048;
    float *p = page_buffer(n * 4), *g = page_buffer(n * 4), *p2 = page_buffer(n * 4);
    for (size_t k = 0; k < n; k++) {
        p[k] = p2[k] = 1.0f;
        g[k] = 0.5f;
    }
    int id, id2;
    assert_int_equal(nvme_adam_add_block(na, n, "a", &id), GPT_OK);
    assert_int_equal(nvme_adam_add_block(na, n, "b", &id2), GPT_OK);
    assert_int_equal(gpt_cpu_event_hold(gate), GPT_OK);
    nvme_adam_job job = {.block = id, .params = p, .grads = g, .n_decay = n, .optim = gpt_optim_default(),
                         .lr = 1e-2f, .t = 1, .grad_scale = 1.0f, .after = gate};
    uint64_t t1, t2;
    assert_int_equal(nvme_adam_submit(na, &job, &t1), GPT_OK);
    job.block = id2;
    job.params = p2;
    job.after = NULL;
    assert_int_equal(nvme_adam_submit(na, &job, &t2), GPT_OK);
    sleep_ms(50);
    assert_true(p[0] == 1.0f && p2[0] == 1.0f);
    assert_int_equal(gpt_cpu_event_release(gate), GPT_OK);
    assert_int_equal(nvme_adam_wait(na, t2), GPT_OK);
    assert_true(p[0] < 1.0f && p2[0] < 1.0f);
    assert_true(p[0] == p2[0]);
    nvme_adam_destroy(na);
    cpu_adam_destroy(pool);
    disk_tier_close(t);
    gpt_event_destroy(gate);
    gpt_cpu_backend_destroy(be);
    free(p);
    free(p2);
    free(g);
    parent_done(dir);
}

/* ---- stronghold --offload nvme ---------------------------------------------------------- */

static engine_config nvme_config(int layers, const char *dir)
{
    engine_config c = small_config(layers);
    c.offload = OFFLOAD_NVME;
    snprintf(c.nvme_dir, sizeof c.nvme_dir, "%s", dir);
    return c;
}

/* With the cold layers' m, v on disk, stronghold still equals megatron-lm bit for bit:
 * clipped (-w 1, -w 2, -w auto under a GPU budget that streams some layers) and unclipped
 * (updates during the backward). */
static void test_stronghold_nvme_equals_baseline(void **state)
{
    char dir[PATH_MAX];
    parent_dir(state, "stronghold_equal", dir, sizeof dir);
    const int L = 8;
    engine_config cfg = nvme_config(L, dir);
    assert_true(engine_takes_option(&engine_stronghold, "offload"));
    trajectory base;
    run_baseline(&cfg, &base);
    assert_true(base.loss[ITERS - 1] < base.loss[0] - 0.3);
    const int windows[] = {1, 2};
    for (int i = 0; i < 2; i++) {
        engine_config c = cfg;
        c.window = windows[i];
        trajectory t;
        run_engine(&engine_stronghold, &c, SIZE_MAX, &t);
        assert_same_trajectory(&base, &t, windows[i] == 1 ? "nvme -w 1" : "nvme -w 2");
        free_trajectory(&t);
        assert_int_equal(entries_in(dir), 0);
    }
    /* -w auto under a budget for about half the layers resident. */
    engine_config c = cfg;
    engine_plan all, some;
    c.window = L;
    engine_stronghold.plan(&c, &all);
    c.window = 0;
    const size_t limit = (size_t)(all.gpu_bytes * 0.6);
    engine_harness h;
    assert_int_equal(harness_open(&h, &engine_stronghold, &c, limit), 0);
    engine_stronghold.chosen_plan(h.state, &some);
    assert_true(some.gpu_bytes < all.gpu_bytes);
    assert_true(some.disk_bytes > 0);
    assert_int_equal(h.disk.in_use, some.disk_bytes);
    harness_close(&h);
    trajectory t;
    run_engine(&engine_stronghold, &c, limit, &t);
    assert_same_trajectory(&base, &t, "nvme -w auto under a budget");
    free_trajectory(&t);
    free_trajectory(&base);

    cfg.optim.clip = 0;
    cfg.optim.lr = 1e-3;
    run_baseline(&cfg, &base);
    cfg.window = 1;
    run_engine(&engine_stronghold, &cfg, SIZE_MAX, &t);
    assert_same_trajectory(&base, &t, "nvme unclipped -w 1");
    free_trajectory(&t);
    free_trajectory(&base);
    parent_done(dir);
}

/* The plan moves the streamed layers' m, v from host to disk; the measured peaks of GPU,
 * host and disk equal it; each step reads and writes every streamed layer's m and v. */
static void test_stronghold_nvme_plan_equals_peaks(void **state)
{
    char dir[PATH_MAX];
    parent_dir(state, "stronghold_plan", dir, sizeof dir);
    const int L = 8;
    engine_config c = nvme_config(L, dir);
    c.window = 2;
    engine_plan p, in_memory;
    engine_stronghold.plan(&c, &p);
    c.offload = OFFLOAD_CPU;
    engine_stronghold.plan(&c, &in_memory);
    c.offload = OFFLOAD_NVME;
    const int Ls = L - 2;
    const size_t PL = (size_t)gpt_layer_layout_of(&c.shape).total;
    const size_t block = disk_tier_round(PL * sizeof(float));
    assert_int_equal(p.disk_bytes, (uint64_t)Ls * 2 * block);
    assert_int_equal(in_memory.disk_bytes, 0);
    assert_int_equal(p.gpu_bytes, in_memory.gpu_bytes);
    assert_int_equal(p.host_bytes + (uint64_t)Ls * 2 * PL * sizeof(float),
                     in_memory.host_bytes + nvme_adam_staging_bytes(PL, 3, 0));

    engine_harness h;
    assert_int_equal(harness_open_disk(&h, &engine_stronghold, &c, SIZE_MAX, p.disk_bytes), 0);
    double rd = 0, wr = 0;
    for (int it = 1; it <= 4; it++) {
        step_result r;
        memset(&r, 0, sizeof r);
        harness_step(&h, it, &r);
        assert_true(r.has_busy);
        assert_true(r.host_adam_params == (double)Ls * PL);
        rd += r.bytes_disk_read;
        wr += r.bytes_disk_write;
    }
    /* Step s's updates overlap step s+1: after 4 steps at least 3 steps' worth is counted. */
    const double per_step = (double)Ls * 2 * block;
    assert_true(rd >= 3 * per_step && rd <= 4 * per_step);
    assert_true(wr >= 3 * per_step && wr <= 4 * per_step);
    assert_int_equal(h.gpu.budget.peak, p.gpu_bytes);
    assert_int_equal(h.host.peak, p.host_bytes);
    assert_int_equal(h.disk.peak, p.disk_bytes);
    assert_int_equal(entries_in(dir), 0);
    harness_close(&h);
    parent_done(dir);
}

/* A disk budget one byte short of the plan: GPT_ERR_OOM with the disk budget's record,
 * everything given back. */
static void test_stronghold_nvme_disk_oom(void **state)
{
    char dir[PATH_MAX];
    parent_dir(state, "stronghold_oom", dir, sizeof dir);
    engine_config c = nvme_config(6, dir);
    c.window = 1;
    engine_plan p;
    engine_stronghold.plan(&c, &p);
    engine_harness h;
    assert_int_equal(harness_open_disk(&h, &engine_stronghold, &c, SIZE_MAX, p.disk_bytes - 1),
                     GPT_ERR_OOM);
    assert_true(h.disk.oom);
    assert_non_null(strstr(h.disk.oom_what, "Adam m, v of layer"));
    assert_false(h.gpu.budget.oom);
    harness_close(&h);
    parent_done(dir);
}

int main(int argc, char **argv)
{
    (void)argc;
    static disk_ctx ctx; /* read-only once set: the tests' state */
    const char *slash = strrchr(argv[0], '/');
    if (slash)
        snprintf(ctx.root, sizeof ctx.root, "%.*s/disk-tmp", (int)(slash - argv[0]), argv[0]);
    else
        snprintf(ctx.root, sizeof ctx.root, "disk-tmp");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate(test_disk_round_trip, &ctx),
        cmocka_unit_test_prestate(test_disk_private_dir, &ctx),
        cmocka_unit_test_prestate(test_disk_killed_child_leaves_nothing, &ctx),
        cmocka_unit_test_prestate(test_disk_unusable_dir, &ctx),
        cmocka_unit_test_prestate(test_disk_budget_too_small, &ctx),
        cmocka_unit_test_prestate(test_disk_unaligned, &ctx),
        cmocka_unit_test_prestate(test_disk_write_waits_for_event, &ctx),
        cmocka_unit_test_prestate(test_nvme_adam_bit_identical, &ctx),
        cmocka_unit_test_prestate(test_nvme_adam_waits_for_after, &ctx),
        cmocka_unit_test_prestate(test_stronghold_nvme_equals_baseline, &ctx),
        cmocka_unit_test_prestate(test_stronghold_nvme_plan_equals_peaks, &ctx),
        cmocka_unit_test_prestate(test_stronghold_nvme_disk_oom, &ctx),
    };
    int failed = cmocka_run_group_tests_name("disk", tests, NULL, NULL);
    if (rmdir(ctx.root) != 0 && errno != ENOENT) failed++; /* something was left behind */
    return failed;
}
