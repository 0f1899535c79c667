/*
 * test_ckpt_store.c — what recovery trusts, and the directories others could tamper with:
 *   - every byte of a version's header (the in-memory store's and the persistent file's) is
 *     checked: flipping any one of them, in turn, makes the version invalid, never a wrong
 *     one; restored, it is valid again;
 *   - a version written by another job's shape (its identity) is not restored;
 *   - private_dir: a link, a directory open to others or a file that is a link or has another
 *     link is refused, named, and left as it was; a second lock on a store is refused with
 *     the holder's pid, and free again once released;
 *   - what the --ranks supervisor reads before a relaunch: the newest iteration every rank's
 *     shard is complete at, in anyone's file, or none (a rank lost within the first checkpoint).
 * Everything goes under a fresh directory beside the test binary, removed at the end.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../engines/runtime/ckpt_store.h"
#include "../engines/runtime/private_dir.h"
#include "../kernels/checksum_element.h"
#include "../kernels/gpt.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

enum { PAGE = 4096 };

typedef struct store_ctx {
    char root[PATH_MAX];
    gpt_backend *be;
} store_ctx;

/* The meaningful bytes of a header page: its fields (64 bytes) and nchunks sums of 8. */
static size_t header_bytes(int nchunks) { return 64 + (size_t)nchunks * 8; }

static void fill(float *data, size_t n, float base)
{
    for (size_t i = 0; i < n; i++) data[i] = base + (float)i * 0.25f;
}

/* The chunks' checksums as the backends compute them (checksum_element.h). */
static void sums_for(uint64_t *sums, const float *data, size_t floats, size_t chunk, int nchunks)
{
    for (int c = 0; c < nchunks; c++) {
        const size_t at = (size_t)c * chunk, n = floats - at < chunk ? floats - at : chunk;
        sums[c] = gpt_checksum_fold(gpt_checksum_sum((const uint32_t *)(const void *)(data + at), n, 0), n);
    }
}

/* --gemini-store's "%m": every one becomes the machine's number; no "%m", the path as given;
 * a result that does not fit is refused, not cut. */
static void test_store_for_machine(void **state)
{
    (void)state;
    char out[32];
    assert_int_equal(ckpt_store_for_machine(out, sizeof out, "/dev/shm/m%m/x%m", 12), 0);
    assert_string_equal(out, "/dev/shm/m12/x12");
    assert_int_equal(ckpt_store_for_machine(out, sizeof out, "/dev/shm", 3), 0);
    assert_string_equal(out, "/dev/shm");
    assert_int_equal(ckpt_store_for_machine(out, sizeof out, "/a/%q%", 0), 0);
    assert_string_equal(out, "/a/%q%");
    assert_true(ckpt_store_per_machine("/s/m%m") && !ckpt_store_per_machine("/s/m%"));
    assert_int_equal(ckpt_store_for_machine(out, 17, "/dev/shm/m%m/x%m", 12), 0); /* 16 + NUL fits */
    assert_int_equal(ckpt_store_for_machine(out, 16, "/dev/shm/m%m/x%m", 12), -1);
    assert_int_equal(ckpt_store_for_machine(out, 17, "/dev/shm/m%m/x%m", 1), 0);
}

static void test_store_header_flips(void **state)
{
    store_ctx *ctx = *state;
    const size_t floats = 3000, chunk = 1024;
    const int owners[2] = {0, 1};
    const uint64_t ident[] = {2, 64, 4, 32, 512};
    const uint64_t identity = ckpt_identity(ident, 5);
    ckpt_store *s = NULL;
    char why[1200];
    assert_int_equal(ckpt_store_open(&s, ctx->be, ctx->root, "flips", 0, 2, owners, floats, chunk, identity, 0,
                                     why, sizeof why), 0);
    const int nchunks = ckpt_store_nchunks(s);
    assert_int_equal(nchunks, 3);
    /* version 1 of slot 1 (the peer's copy): iteration 7, Adam step 6 */
    ckpt_store_begin(s, 1, 1, 7, 6);
    float *data = ckpt_store_data(s, 1, 1);
    fill(data, floats, 1.5f);
    sums_for(ckpt_store_sums(s, 1, 1), data, floats, chunk, nchunks);
    ckpt_store_mark_complete(s, 1, 1);
    int step = -1;
    assert_int_equal(ckpt_store_valid(s, 1, 1, &step), 7);
    assert_int_equal(step, 6);
    /* the header page sits just before the data */
    unsigned char *h = (unsigned char *)data - PAGE;
    for (size_t b = 0; b < header_bytes(nchunks); b++) {
        for (int bit = 0; bit < 8; bit += 3) {
            h[b] ^= (unsigned char)(1u << bit);
            int st2 = -1;
            const int it = ckpt_store_valid(s, 1, 1, &st2);
            if (it != -1) fail_msg("store header byte %zu bit %d flipped: still valid (iteration %d)", b, bit, it);
            h[b] ^= (unsigned char)(1u << bit);
        }
    }
    assert_int_equal(ckpt_store_valid(s, 1, 1, &step), 7);
    /* the data too (a flip in the last chunk) */
    ((unsigned char *)data)[floats * sizeof(float) - 1] ^= 4;
    assert_int_equal(ckpt_store_valid(s, 1, 1, &step), -1);
    ((unsigned char *)data)[floats * sizeof(float) - 1] ^= 4;
    /* a version in slot 1 is not one for slot 0 (its owner), nor version 0 */
    assert_int_equal(ckpt_store_valid(s, 0, 1, &step), -1);
    ckpt_store_close(s, 1);

    /* Reopened (what a relaunch does) by a job of another shape: the version is not its. */
    assert_int_equal(ckpt_store_open(&s, ctx->be, ctx->root, "flips", 0, 2, owners, floats, chunk, identity, 0,
                                     why, sizeof why), 0);
    ckpt_store_begin(s, 0, 0, 3, 3);
    fill(ckpt_store_data(s, 0, 0), floats, 2.0f);
    sums_for(ckpt_store_sums(s, 0, 0), ckpt_store_data(s, 0, 0), floats, chunk, nchunks);
    ckpt_store_mark_complete(s, 0, 0);
    ckpt_store_close(s, 0); /* (left, as a killed rank leaves it) */
    const uint64_t other[] = {2, 64, 4, 32, 513};
    assert_int_equal(ckpt_store_open(&s, ctx->be, ctx->root, "flips", 0, 2, owners, floats, chunk,
                                     ckpt_identity(other, 5), 1, why, sizeof why), 0);
    assert_int_equal(ckpt_store_valid(s, 0, 0, &step), -1);
    ckpt_store_close(s, 0);
    assert_int_equal(ckpt_store_open(&s, ctx->be, ctx->root, "flips", 0, 2, owners, floats, chunk, identity, 1,
                                     why, sizeof why), 0);
    assert_int_equal(ckpt_store_valid(s, 0, 0, &step), 3);
    ckpt_store_close(s, 1);
}

static void test_file_header_flips(void **state)
{
    store_ctx *ctx = *state;
    const size_t floats = 5000, chunk = 2048;
    const int nchunks = 3;
    const uint64_t identity = 0x1234567;
    private_dir d;
    char why[1200];
    assert_int_equal(ckpt_dir_open(&d, ctx->root, "pflips", 1, why, sizeof why), 0);
    float *data = NULL, *back = NULL;
    assert_int_equal(posix_memalign((void **)&data, PAGE, 5 * PAGE), 0);
    assert_int_equal(posix_memalign((void **)&back, PAGE, 5 * PAGE), 0);
    fill(data, floats, -3.0f);
    assert_int_equal(ckpt_file_write(&d, 1, 1, identity, 12, 11, data, floats, chunk), 0);
    int step = -1;
    assert_int_equal(ckpt_file_read(&d, 1, 1, identity, back, floats, chunk, &step), 12);
    assert_int_equal(step, 11);
    assert_memory_equal(back, data, floats * sizeof(float));
    /* version 1 sits after version 0's header page and data */
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/rank-1.ckpt", d.path);
    const int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    const off_t at = PAGE + (off_t)((floats * sizeof(float) + PAGE - 1) / PAGE * PAGE);
    for (size_t b = 0; b < header_bytes(nchunks); b++) {
        unsigned char byte;
        assert_int_equal(pread(fd, &byte, 1, at + (off_t)b), 1);
        byte ^= 0x10;
        assert_int_equal(pwrite(fd, &byte, 1, at + (off_t)b), 1);
        const int h = ckpt_file_header(&d, 1, 1, identity, floats, chunk, &step);
        const int r = ckpt_file_read(&d, 1, 1, identity, back, floats, chunk, &step);
        if (h != -1 || r != -1) fail_msg("file header byte %zu flipped: header says %d, read says %d", b, h, r);
        byte ^= 0x10;
        assert_int_equal(pwrite(fd, &byte, 1, at + (off_t)b), 1);
    }
    close(fd);
    assert_int_equal(ckpt_file_header(&d, 1, 1, identity, floats, chunk, &step), 12);
    /* another job's shape, or version 0 (never written): nothing */
    assert_int_equal(ckpt_file_header(&d, 1, 1, identity + 1, floats, chunk, &step), -1);
    assert_int_equal(ckpt_file_header(&d, 1, 0, identity, floats, chunk, &step), -1);
    /* what the supervisor reads before a relaunch finds version 1 behind the never written 0
     * (--ckpt-every 2 writes 1 first): rank 1's shard at iteration 12 */
    ckpt_holdings held = {0};
    int newest = -1, missing = -1;
    assert_int_equal(ckpt_job_holdings(ctx->root, "pflips", 1, &held), 0);
    assert_int_equal(held.n, 1);
    assert_int_equal(held.held[0].owner, 1);
    assert_int_equal(held.held[0].iteration, 12);
    assert_int_equal(ckpt_newest_whole(held.held, held.n, 2, &newest, &missing), -1);
    assert_int_equal(missing, 0);
    ckpt_holdings_free(&held);
    ckpt_file_remove(&d, 1);
    struct stat st;
    assert_int_equal(lstat(path, &st), -1);
    free(data);
    free(back);
}

static void test_private_dir_refusals(void **state)
{
    store_ctx *ctx = *state;
    char victim[PATH_MAX + 64], link_path[PATH_MAX + 64], open_dir[PATH_MAX + 64], why[1200];
    /* a victim's private directory with a file in it, and a link to it where our store goes */
    snprintf(victim, sizeof victim, "%s/victim", ctx->root);
    assert_int_equal(mkdir(victim, 0700), 0);
    char victim_file[PATH_MAX + 128];
    snprintf(victim_file, sizeof victim_file, "%s/rank-0.ckpt", victim);
    FILE *f = fopen(victim_file, "w");
    assert_non_null(f);
    fputs("the victim's", f);
    fclose(f);
    assert_true(ckpt_store_dir(link_path, sizeof link_path, ctx->root, "planted") == 0);
    assert_int_equal(symlink(victim, link_path), 0);
    ckpt_store *s = NULL;
    const int owners[1] = {0};
    assert_int_not_equal(ckpt_store_open(&s, ctx->be, ctx->root, "planted", 0, 1, owners, 100, 64, 1, 0, why,
                                         sizeof why), 0);
    assert_null(s);
    assert_non_null(strstr(why, "a symbolic link"));
    struct stat st;
    assert_int_equal(lstat(link_path, &st), 0); /* the link left as it was */
    assert_true(S_ISLNK(st.st_mode));
    assert_int_equal(stat(victim_file, &st), 0); /* the victim's file untouched */
    assert_int_equal(st.st_size, 12);

    /* a directory open to others (the planted --ckpt-dir of the issue) */
    snprintf(open_dir, sizeof open_dir, "%s/aebench-ckpt-%u-open", ctx->root, (unsigned)getuid());
    assert_int_equal(mkdir(open_dir, 0700), 0);
    assert_int_equal(chmod(open_dir, 0777), 0);
    char in_open[PATH_MAX + 128];
    snprintf(in_open, sizeof in_open, "%s/rank-0.ckpt", open_dir);
    assert_int_equal(symlink(victim_file, in_open), 0);
    private_dir d;
    assert_int_not_equal(ckpt_dir_open(&d, ctx->root, "open", 0, why, sizeof why), 0);
    assert_non_null(strstr(why, "not a private directory of this user"));
    assert_non_null(strstr(why, "mode 0777"));
    assert_int_equal(lstat(open_dir, &st), 0); /* never removed */
    assert_int_equal(stat(victim_file, &st), 0);
    assert_int_equal(st.st_size, 12);

    /* our own private directory, a link planted in it (or a second hard link): not followed */
    assert_int_equal(ckpt_dir_open(&d, ctx->root, "ours", 0, why, sizeof why), 0);
    char in_ours[PATH_MAX + 128];
    snprintf(in_ours, sizeof in_ours, "%s/rank-0.ckpt", d.path);
    assert_int_equal(symlink(victim_file, in_ours), 0);
    float *data = NULL;
    assert_int_equal(posix_memalign((void **)&data, PAGE, PAGE), 0);
    memset(data, 0, PAGE);
    assert_int_not_equal(ckpt_file_write(&d, 0, 0, 1, 1, 1, data, 16, 16), 0);
    assert_int_equal(unlink(in_ours), 0);
    assert_int_equal(link(victim_file, in_ours), 0);
    assert_int_not_equal(ckpt_file_write(&d, 0, 0, 1, 1, 1, data, 16, 16), 0);
    assert_int_equal(stat(victim_file, &st), 0);
    assert_int_equal(st.st_size, 12);
    assert_int_equal(unlink(in_ours), 0);
    ckpt_file_remove(&d, 0);
    free(data);
}

static void test_store_lock(void **state)
{
    store_ctx *ctx = *state;
    const int owners[1] = {0};
    char why[1200], path[PATH_MAX + 64];
    ckpt_store *first = NULL, *second = NULL;
    assert_int_equal(ckpt_store_open(&first, ctx->be, ctx->root, "locked", 0, 1, owners, 256, 64, 9, 0, why,
                                     sizeof why), 0);
    ckpt_store_begin(first, 0, 0, 4, 4);
    float *data = ckpt_store_data(first, 0, 0);
    fill(data, 256, 0.5f);
    sums_for(ckpt_store_sums(first, 0, 0), data, 256, 64, 4);
    ckpt_store_mark_complete(first, 0, 0);
    /* a second job of the same id: refused with our pid, the first's version untouched */
    assert_int_not_equal(ckpt_store_open(&second, ctx->be, ctx->root, "locked", 0, 1, owners, 256, 64, 9, 0, why,
                                         sizeof why), 0);
    char expect[64];
    snprintf(expect, sizeof expect, "pid %ld holds rank-0.lock", (long)getpid());
    if (!strstr(why, expect)) fail_msg("second job's refusal: %s", why);
    int step = 0;
    assert_int_equal(ckpt_store_valid(first, 0, 0, &step), 4);
    assert_true(ckpt_store_dir(path, sizeof path, ctx->root, "locked") == 0);
    long holder = 0;
    assert_int_equal(ckpt_dir_in_use(path, &holder), 1);
    assert_int_equal(holder, (long)getpid());
    ckpt_store_close(first, 0); /* (a killed rank's: its files stay, its lock goes) */
    assert_int_equal(ckpt_dir_in_use(path, &holder), 0);
    assert_int_equal(ckpt_store_open(&second, ctx->be, ctx->root, "locked", 0, 1, owners, 256, 64, 9, 1, why,
                                     sizeof why), 0);
    assert_int_equal(ckpt_store_valid(second, 0, 0, &step), 4);
    ckpt_store_close(second, 1);
    struct stat st;
    assert_int_equal(lstat(path, &st), -1); /* the last rank's close removed the directory */
}

/* One version of slot `slot` of s written whole (complete) or begun only, for iteration it. */
static void put_version(ckpt_store *s, int slot, int version, int it, int complete)
{
    const size_t floats = 512, chunk = 128;
    ckpt_store_begin(s, slot, version, it, it);
    float *data = ckpt_store_data(s, slot, version);
    fill(data, floats, (float)(it + slot));
    if (!complete) return;
    sums_for(ckpt_store_sums(s, slot, version), data, floats, chunk, ckpt_store_nchunks(s));
    ckpt_store_mark_complete(s, slot, version);
}

/* What the --ranks supervisor asks before it relaunches: is there an iteration whose shard is
 * complete for every rank, in anyone's file?  Three ranks in a ring of 2 (rank r holds r and
 * r - 1).  Rank 2 dies in the middle of the first checkpoint (iteration 1): the two others'
 * shards are whole, its own nowhere (what the fault campaign hit): none.  Once iteration 2 is
 * whole everywhere and 3 is again missing rank 2's: 2.  A store with nothing: none at all. */
static void test_holdings(void **state)
{
    store_ctx *ctx = *state;
    const size_t floats = 512, chunk = 128;
    ckpt_store *r[3] = {NULL, NULL, NULL};
    char why[1200];
    for (int k = 0; k < 3; k++) {
        const int owners[2] = {k, (k + 2) % 3};
        assert_int_equal(ckpt_store_open(&r[k], ctx->be, ctx->root, "held", k, 2, owners, floats, chunk, 5, 0, why,
                                         sizeof why), 0);
    }
    ckpt_holdings h = {0};
    int newest = 0, missing = 0;
    assert_int_equal(ckpt_job_holdings(ctx->root, "held", 0, &h), 0);
    assert_int_equal(ckpt_newest_whole(h.held, h.n, 3, &newest, &missing), -1);
    assert_int_equal(newest, -1);
    ckpt_holdings_free(&h);
    /* iteration 1: ranks 0 and 1 have their own shards whole, and rank 1 its copy of rank 0's;
     * rank 2 (dead) began its own, and rank 0's copy of it was begun, never finished */
    put_version(r[0], 0, 0, 1, 1);
    put_version(r[1], 0, 0, 1, 1);
    put_version(r[1], 1, 0, 1, 1); /* (rank 1's copy of rank 0's shard) */
    put_version(r[0], 1, 0, 1, 0); /* (rank 0's copy of rank 2's: begun only) */
    put_version(r[2], 0, 0, 1, 0);
    assert_int_equal(ckpt_job_holdings(ctx->root, "held", 0, &h), 0);
    assert_int_equal(h.n, 3);
    assert_int_equal(ckpt_newest_whole(h.held, h.n, 3, &newest, &missing), -1);
    assert_int_equal(newest, 1);
    assert_int_equal(missing, 2);
    /* two ranks' jobs would find it whole (the ranks count matters) */
    assert_int_equal(ckpt_newest_whole(h.held, h.n, 2, &newest, &missing), 1);
    assert_int_equal(missing, -1);
    ckpt_holdings_free(&h);
    /* iteration 2 whole: rank 2's shard only in rank 0's copy; 3 begun, rank 2's again not */
    put_version(r[0], 1, 1, 2, 1);
    put_version(r[1], 0, 1, 2, 1);
    put_version(r[0], 0, 1, 2, 1);
    put_version(r[0], 0, 0, 3, 1);
    put_version(r[1], 0, 0, 3, 1);
    assert_int_equal(ckpt_job_holdings(ctx->root, "held", 0, &h), 0);
    assert_int_equal(ckpt_newest_whole(h.held, h.n, 3, &newest, &missing), 2);
    assert_int_equal(newest, 2);
    assert_int_equal(missing, -1);
    ckpt_holdings_free(&h);
    /* a job id with no directory holds nothing */
    assert_int_equal(ckpt_job_holdings(ctx->root, "none", 0, &h), 0);
    assert_int_equal(h.n, 0);
    for (int k = 0; k < 3; k++) ckpt_store_close(r[k], 1);
}

static int setup(void **state)
{
    store_ctx *ctx = *state;
    return gpt_cpu_backend_create(&ctx->be, 1);
}

static int teardown(void **state)
{
    store_ctx *ctx = *state;
    gpt_cpu_backend_destroy(ctx->be);
    return 0;
}

/* What gemini --gemini-recover reads before anything is written (issue 47): a store's and a
 * persistent file's versions by their headers, for the job's shape and owners, making, locking
 * and changing nothing; and a persistent write that cannot finish removes only a file it made,
 * as the failure's cleanup removes only the lock file and directory this process made. */
static void test_peek_and_cleanup(void **state)
{
    store_ctx *ctx = *state;
    const size_t floats = 512, chunk = 128;
    const int owners[2] = {1, 0};
    char why[1200], path[PATH_MAX + 64];
    int its[2 * CKPT_VERSIONS], file_its[CKPT_VERSIONS];
    /* no store, no checkpoint directory: nothing held, nothing made */
    assert_int_equal(ckpt_store_peek(ctx->root, "peek", 1, 2, owners, floats, chunk, 9, its), 0);
    for (int i = 0; i < 2 * CKPT_VERSIONS; i++) assert_int_equal(its[i], -1);
    assert_int_equal(ckpt_file_peek(ctx->root, "peek", 1, 9, floats, chunk, file_its), 0);
    assert_int_equal(file_its[0], -1);
    assert_int_equal(ckpt_store_dir(path, sizeof path, ctx->root, "peek"), 0);
    struct stat st;
    assert_int_not_equal(lstat(path, &st), 0);
    /* rank 1's store: slot 1 (rank 0's copy) version 1 whole at iteration 7, slot 0 begun only */
    ckpt_store *s = NULL;
    assert_int_equal(ckpt_store_open(&s, ctx->be, ctx->root, "peek", 1, 2, owners, floats, chunk, 9, 0, why, sizeof why),
                     0);
    put_version(s, 1, 1, 7, 1);
    put_version(s, 0, 0, 8, 0);
    assert_int_equal(ckpt_store_peek(ctx->root, "peek", 1, 2, owners, floats, chunk, 9, its), 0);
    const int want[2 * CKPT_VERSIONS] = {-1, -1, -1, 7};
    for (int i = 0; i < 2 * CKPT_VERSIONS; i++) assert_int_equal(its[i], want[i]);
    /* another job's shape (identity) or other owners: not what a recovery would restore */
    assert_int_equal(ckpt_store_peek(ctx->root, "peek", 1, 2, owners, floats, chunk, 10, its), 0);
    assert_int_equal(its[3], -1);
    const int swapped[2] = {0, 1};
    assert_int_equal(ckpt_store_peek(ctx->root, "peek", 1, 2, swapped, floats, chunk, 9, its), 0);
    assert_int_equal(its[3], -1);
    ckpt_store_close(s, 1);
    /* the persistent file: its written version's iteration; no lock taken by the peek */
    private_dir d;
    assert_int_equal(ckpt_dir_open(&d, ctx->root, "peek", 1, why, sizeof why), 0);
    assert_true(d.made && d.lock_made);
    float *data = NULL;
    assert_int_equal(posix_memalign((void **)&data, PAGE, floats * sizeof(float)), 0);
    fill(data, floats, 3);
    assert_int_equal(ckpt_file_write_why(&d, 1, 1, 9, 12, 12, data, floats, chunk, why, sizeof why), 0);
    assert_int_equal(ckpt_file_peek(ctx->root, "peek", 1, 9, floats, chunk, file_its), 0);
    assert_int_equal(file_its[0], -1);
    assert_int_equal(file_its[1], 12);
    /* a write that cannot finish (a file size limit: its header goes in, its data not): a file
     * it made goes; one that was there stays, its other version whole */
    snprintf(path, sizeof path, "%s/rank-1.ckpt", d.path);
    char made_path[PATH_MAX + 64];
    snprintf(made_path, sizeof made_path, "%s/rank-2.ckpt", d.path);
    struct rlimit was, small = {6000, 6000};
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &was), 0);
    small.rlim_max = was.rlim_max;
    void (*was_xfsz)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
    const int made_rc = ckpt_file_write_why(&d, 2, 0, 9, 14, 14, data, floats, chunk, why, sizeof why);
    const int there_rc = ckpt_file_write_why(&d, 1, 0, 9, 14, 14, data, floats, chunk, why, sizeof why);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &was), 0);
    signal(SIGXFSZ, was_xfsz);
    assert_int_equal(made_rc, GPT_ERR_IO);
    assert_int_equal(there_rc, GPT_ERR_IO);
    assert_non_null(strstr(why, "cannot write "));
    assert_int_not_equal(lstat(made_path, &st), 0);
    assert_int_equal(ckpt_file_peek(ctx->root, "peek", 1, 9, floats, chunk, file_its), 0);
    assert_int_equal(file_its[0], -1);
    assert_int_equal(file_its[1], 12);
    /* the failure's cleanup: the lock file and directory this process made, not the file left */
    char lock[PATH_MAX + 64], dir[PATH_MAX + 64];
    snprintf(lock, sizeof lock, "%s/rank-1.lock", d.path);
    snprintf(dir, sizeof dir, "%s", d.path);
    private_dir_close_made(&d);
    assert_int_not_equal(lstat(lock, &st), 0);
    assert_int_equal(lstat(dir, &st), 0); /* (its file keeps it) */
    /* opened again: made by no one now, and its lock file then there already is kept */
    assert_int_equal(ckpt_dir_open(&d, ctx->root, "peek", 1, why, sizeof why), 0);
    assert_true(!d.made && d.lock_made);
    private_dir_close(&d, 0);
    assert_int_equal(ckpt_dir_open(&d, ctx->root, "peek", 1, why, sizeof why), 0);
    assert_true(!d.made && !d.lock_made);
    private_dir_close_made(&d);
    assert_int_equal(lstat(lock, &st), 0);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(unlink(lock), 0);
    assert_int_equal(rmdir(dir), 0);
    free(data);
}

int main(int argc, char **argv)
{
    (void)argc;
    static store_ctx ctx;
    /* a fresh directory beside the binary (a disk: O_DIRECT as the persistent file uses) */
    char self[PATH_MAX];
    snprintf(self, sizeof self, "%s", argv[0]);
    char *slash = strrchr(self, '/');
    if (slash) *slash = '\0';
    else snprintf(self, sizeof self, ".");
    if (snprintf(ctx.root, sizeof ctx.root, "%.4000s/ckpt-store-tmp.XXXXXX", self) >= (int)sizeof ctx.root) return 1;
    if (!mkdtemp(ctx.root)) {
        perror("mkdtemp");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_store_for_machine),
        cmocka_unit_test_prestate_setup_teardown(test_store_header_flips, setup, teardown, &ctx),
        cmocka_unit_test_prestate_setup_teardown(test_file_header_flips, setup, teardown, &ctx),
        cmocka_unit_test_prestate_setup_teardown(test_private_dir_refusals, setup, teardown, &ctx),
        cmocka_unit_test_prestate_setup_teardown(test_store_lock, setup, teardown, &ctx),
        cmocka_unit_test_prestate_setup_teardown(test_holdings, setup, teardown, &ctx),
        cmocka_unit_test_prestate_setup_teardown(test_peek_and_cleanup, setup, teardown, &ctx),
    };
    const int failed = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[PATH_MAX + 32];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", ctx.root);
    if (system(cmd) != 0) fprintf(stderr, "test_ckpt_store: could not remove %s\n", ctx.root);
    return failed;
}
