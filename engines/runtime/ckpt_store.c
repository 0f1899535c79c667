#include "ckpt_store.h"

#include "../../kernels/host_pages.h"
#include "../../kernels/checksum_element.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { PAGE = 4096, MAX_CHUNKS = (PAGE - 64) / 8 };
static const uint64_t CKPT_MAGIC = 0x32544b4347454141ull; /* "AAEGCKT2": checksum_element.h sums */
enum { STATE_EMPTY = 0, STATE_WRITING = 1, STATE_COMPLETE = 2 };

/* The header page of a version (the rest of the page holds the chunks' checksums). */
typedef struct version_header {
    uint64_t magic;
    int32_t owner, iteration, adam_step, nchunks;
    uint64_t floats, chunk_floats;
    _Atomic int32_t state;
    int32_t pad;
    uint64_t sums[MAX_CHUNKS];
} version_header;

struct ckpt_store {
    const gpt_backend *be;
    char dir[1024], path[1100];
    char *map;
    size_t bytes, floats, chunk_floats, version_bytes;
    int slots, nchunks, registered;
    int *owners;
};

static size_t round_page(size_t b) { return (b + PAGE - 1) / PAGE * PAGE; }

void ckpt_job_id(char *out, size_t len, char who)
{
    snprintf(out, len, "%c%ld-%ld", who, (long)getpid(), (long)time(NULL));
}

long ckpt_job_pid(const char *job)
{
    long pid = 0;
    if ((job[0] == 's' || job[0] == 'p') && sscanf(job + 1, "%ld-", &pid) == 1 && pid > 0) return pid;
    return 0;
}

int ckpt_store_dir(char *out, size_t len, const char *dir, const char *job)
{
    int n = snprintf(out, len, "%s/aebench-gemini-%u-%s", dir, (unsigned)getuid(), job);
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

static size_t chunks_of(size_t floats, size_t chunk_floats)
{
    return (floats + chunk_floats - 1) / chunk_floats;
}

size_t ckpt_store_bytes(int slots, size_t floats)
{
    return (size_t)slots * CKPT_VERSIONS * (PAGE + round_page(floats * sizeof(float)));
}

static version_header *header(ckpt_store *s, int slot, int version)
{
    return (version_header *)(s->map + ((size_t)slot * CKPT_VERSIONS + (size_t)version) * s->version_bytes);
}

float *ckpt_store_data(ckpt_store *s, int slot, int version)
{
    return (float *)((char *)header(s, slot, version) + PAGE);
}

int ckpt_store_slot_of(const ckpt_store *s, int owner)
{
    for (int i = 0; i < s->slots; i++)
        if (s->owners[i] == owner) return i;
    return -1;
}

/* A chunk's checksum (kernels/checksum_element.h): the same function as the backends'
 * checksum_chunks op, which computes a version's sums where its data is (the GPU), so that
 * what lands here can be checked against them. */
static uint64_t checksum(const float *data, size_t floats)
{
    return gpt_checksum_fold(gpt_checksum_sum((const uint32_t *)(const void *)data, floats, 0), floats);
}

/* The chunks' checksums of a version's data into its header (write), or whether they match
 * it (check): chunks in parallel, so a shard of GBs goes at memory speed, not one core's. */
static void sums_of(version_header *h, const float *data)
{
#pragma omp parallel for schedule(dynamic, 1)
    for (int c = 0; c < h->nchunks; c++) {
        const size_t at = (size_t)c * h->chunk_floats;
        const size_t n = h->floats - at < h->chunk_floats ? h->floats - at : h->chunk_floats;
        h->sums[c] = checksum(data + at, n);
    }
}
static int sums_match(const version_header *h, const float *data)
{
    int bad = 0;
#pragma omp parallel for schedule(dynamic, 1) reduction(| : bad)
    for (int c = 0; c < h->nchunks; c++) {
        const size_t at = (size_t)c * h->chunk_floats;
        const size_t n = h->floats - at < h->chunk_floats ? h->floats - at : h->chunk_floats;
        bad |= h->sums[c] != checksum(data + at, n);
    }
    return !bad;
}

/* A failed system call on the store: its gpt_status (no room: OOM), and the reason in why. */
static int tell(char *why, size_t whylen, const char *path, const char *what, int err)
{
    snprintf(why, whylen, "gemini store %.300s: %s: %s", path, what, strerror(err));
    return err == ENOSPC || err == ENOMEM ? GPT_ERR_OOM : GPT_ERR_IO;
}

/* The same, said on stderr (the persistent checkpoint's writes). */
static int say(const char *path, const char *what, int err)
{
    char why[600];
    const int rc = tell(why, sizeof why, path, what, err);
    fprintf(stderr, "aebench: %s\n", why);
    return rc;
}

int ckpt_store_open(ckpt_store **out, const gpt_backend *be, const char *dir, const char *job,
                    int rank, int slots, const int *owners, size_t floats, size_t chunk_floats,
                    int reuse, char *why, size_t whylen)
{
    *out = NULL;
    snprintf(why, whylen, "gemini store: out of host memory");
    if (chunks_of(floats, chunk_floats) > MAX_CHUNKS) chunk_floats = (floats + MAX_CHUNKS - 1) / MAX_CHUNKS;
    ckpt_store *s = calloc(1, sizeof *s);
    if (!s) return GPT_ERR_OOM;
    s->be = be;
    s->slots = slots;
    s->floats = floats;
    s->chunk_floats = chunk_floats;
    s->nchunks = (int)chunks_of(floats, chunk_floats);
    s->version_bytes = PAGE + round_page(floats * sizeof(float));
    s->bytes = ckpt_store_bytes(slots, floats);
    s->owners = malloc((size_t)slots * sizeof *s->owners);
    if (!s->owners || ckpt_store_dir(s->dir, sizeof s->dir, dir, job) ||
        snprintf(s->path, sizeof s->path, "%s/rank-%d.ckpt", s->dir, rank) >= (int)sizeof s->path) {
        snprintf(why, whylen, "gemini store under %.200s: its path is too long (or out of host memory)", dir);
        ckpt_store_close(s, 0);
        return GPT_ERR_INVALID;
    }
    memcpy(s->owners, owners, (size_t)slots * sizeof *owners);
    if (mkdir(s->dir, 0700) != 0 && errno != EEXIST) {
        int rc = tell(why, whylen, s->dir, "cannot make the directory", errno);
        ckpt_store_close(s, 0);
        return rc;
    }
    /* (an existing directory must be ours, a directory (not a link to one) and private: it
     * holds model state; the file in it is never a link either) */
    struct stat st;
    if (lstat(s->dir, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 077)) {
        snprintf(why, whylen, "gemini store %s: not a private directory of this user (a link, another user's, or "
                 "open to others)", s->dir);
        ckpt_store_close(s, 0);
        return GPT_ERR_IO;
    }
    int fd = open(s->path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | (reuse ? 0 : O_TRUNC), 0600);
    if (fd < 0) {
        int rc = tell(why, whylen, s->path, "cannot open", errno);
        ckpt_store_close(s, 0);
        return rc;
    }
    struct stat fst;
    const int fresh = fstat(fd, &fst) != 0 || (size_t)fst.st_size != s->bytes;
    if (fresh && (ftruncate(fd, 0) != 0 || ftruncate(fd, (off_t)s->bytes) != 0)) {
        int rc = tell(why, whylen, s->path, "cannot size", errno);
        close(fd);
        unlink(s->path);
        ckpt_store_close(s, 0);
        return rc;
    }
    s->map = mmap(NULL, s->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (s->map == MAP_FAILED) {
        s->map = NULL;
        int rc = tell(why, whylen, s->path, "cannot map", errno);
        close(fd);
        ckpt_store_close(s, 0);
        return rc;
    }
    /* The pages now, on every core (host_pages_populate; 0.26 s per GB on one thread made a
     * replaced rank 5.6 s late to its recovery on two H100s), and reserved: too little room is
     * said here, not as a SIGBUS in the middle of a copy.  A kernel without it: the file
     * system reserves them (posix_fallocate, one thread). */
    int err = host_pages_populate(s->map, s->bytes);
    if (err == EINVAL) err = posix_fallocate(fd, 0, (off_t)s->bytes);
    close(fd);
    if (err) {
        int rc = tell(why, whylen, s->path, "cannot reserve its bytes", err == EFAULT ? ENOSPC : err);
        if (fresh) unlink(s->path);
        ckpt_store_close(s, 0);
        return rc;
    }
    if (gpt_host_register(be, s->map, s->bytes) != GPT_OK) {
        snprintf(why, whylen, "gemini store %s: cannot page-lock its %zu bytes", s->path, s->bytes);
        ckpt_store_close(s, 0);
        return GPT_ERR_OOM;
    }
    s->registered = 1;
    *out = s;
    return GPT_OK;
}

void ckpt_store_close(ckpt_store *s, int remove)
{
    if (!s) return;
    if (s->map) {
        if (s->registered) gpt_host_unregister(s->be, s->map);
        munmap(s->map, s->bytes);
    }
    if (remove && s->path[0]) {
        unlink(s->path);
        rmdir(s->dir); /* fails, as it should, while other ranks' files are there */
    }
    free(s->owners);
    free(s);
}

void ckpt_store_begin(ckpt_store *s, int slot, int version, int iteration, int adam_step)
{
    version_header *h = header(s, slot, version);
    atomic_store(&h->state, STATE_WRITING);
    h->magic = CKPT_MAGIC;
    h->owner = s->owners[slot];
    h->iteration = iteration;
    h->adam_step = adam_step;
    h->floats = s->floats;
    h->chunk_floats = s->chunk_floats;
    h->nchunks = s->nchunks;
}

uint64_t *ckpt_store_sums(ckpt_store *s, int slot, int version)
{
    return header(s, slot, version)->sums;
}

size_t ckpt_store_chunk_floats(const ckpt_store *s) { return s->chunk_floats; }
int ckpt_store_nchunks(const ckpt_store *s) { return s->nchunks; }

void ckpt_store_mark_complete(ckpt_store *s, int slot, int version)
{
    atomic_store(&header(s, slot, version)->state, STATE_COMPLETE);
}

int ckpt_store_valid(ckpt_store *s, int slot, int version, int *adam_step)
{
    version_header *h = header(s, slot, version);
    if (h->magic != CKPT_MAGIC || atomic_load(&h->state) != STATE_COMPLETE ||
        h->owner != s->owners[slot] || h->floats != s->floats || h->chunk_floats != s->chunk_floats ||
        h->nchunks != s->nchunks || !sums_match(h, ckpt_store_data(s, slot, version)))
        return -1;
    *adam_step = h->adam_step;
    return h->iteration;
}

/* ---- the persistent checkpoint -------------------------------------------------------------- */

static int file_path(char *out, size_t len, const char *dir, const char *job, int rank, char *dir_out,
                     size_t dir_len)
{
    int n = snprintf(dir_out, dir_len, "%s/aebench-ckpt-%u-%s", dir, (unsigned)getuid(), job);
    if (n < 0 || (size_t)n >= dir_len) return -1;
    n = snprintf(out, len, "%s/rank-%d.ckpt", dir_out, rank);
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

/* O_DIRECT where the file system takes it (it bypasses the page cache, as a checkpoint of
 * many GB should), plain I/O where it does not (tmpfs says EINVAL). */
static int open_direct(const char *path, int flags)
{
    int fd = open(path, flags | O_DIRECT | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EINVAL) fd = open(path, flags | O_CLOEXEC, 0600);
    return fd;
}

static int full_io(int fd, void *buf, size_t bytes, off_t at, int write_it)
{
    char *p = buf;
    while (bytes) {
        const size_t n = bytes < (1u << 30) ? bytes : (1u << 30);
        ssize_t r = write_it ? pwrite(fd, p, n, at) : pread(fd, p, n, at);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        p += r, at += r, bytes -= (size_t)r;
    }
    return 0;
}

int ckpt_file_write(const char *dir, const char *job, int rank, int version, int iteration,
                    int adam_step, const float *data, size_t floats, size_t chunk_floats)
{
    char path[1200], d[1100];
    if (chunks_of(floats, chunk_floats) > MAX_CHUNKS) chunk_floats = (floats + MAX_CHUNKS - 1) / MAX_CHUNKS;
    if (file_path(path, sizeof path, dir, job, rank, d, sizeof d)) return GPT_ERR_INVALID;
    if (mkdir(d, 0700) != 0 && errno != EEXIST) return say(d, "cannot make the directory", errno);
    version_header *h = NULL;
    if (posix_memalign((void **)&h, PAGE, PAGE) != 0) return GPT_ERR_OOM;
    memset(h, 0, PAGE);
    const size_t data_bytes = round_page(floats * sizeof(float));
    const off_t at = (off_t)version * (off_t)(PAGE + data_bytes);
    int rc = GPT_OK;
    int fd = open_direct(path, O_RDWR | O_CREAT);
    if (fd < 0) rc = say(path, "cannot open", errno);
    h->magic = CKPT_MAGIC;
    h->owner = rank;
    h->iteration = iteration;
    h->adam_step = adam_step;
    h->floats = floats;
    h->chunk_floats = chunk_floats;
    h->nchunks = (int)chunks_of(floats, chunk_floats);
    atomic_store(&h->state, STATE_WRITING);
    if (!rc && (full_io(fd, h, PAGE, at, 1) || fdatasync(fd) ||
                full_io(fd, (void *)data, data_bytes, at + PAGE, 1) || fdatasync(fd)))
        rc = say(path, "cannot write", errno);
    if (!rc) {
        sums_of(h, data);
        atomic_store(&h->state, STATE_COMPLETE);
        if (full_io(fd, h, PAGE, at, 1) || fdatasync(fd)) rc = say(path, "cannot write", errno);
    }
    if (fd >= 0) close(fd);
    free(h);
    return rc;
}

/* Open the rank's file and read version v's header into h (a page, page aligned): the open
 * descriptor when the header says complete and fits, else -1. */
static int open_version(const char *dir, const char *job, int rank, int version, size_t floats,
                        size_t *chunk_floats, version_header *h, off_t *data_at)
{
    char path[1200], d[1100];
    if (chunks_of(floats, *chunk_floats) > MAX_CHUNKS) *chunk_floats = (floats + MAX_CHUNKS - 1) / MAX_CHUNKS;
    if (file_path(path, sizeof path, dir, job, rank, d, sizeof d)) return -1;
    const off_t at = (off_t)version * (off_t)(PAGE + round_page(floats * sizeof(float)));
    int fd = open_direct(path, O_RDONLY);
    if (fd >= 0 && full_io(fd, h, PAGE, at, 0) == 0 && h->magic == CKPT_MAGIC &&
        atomic_load(&h->state) == STATE_COMPLETE && h->owner == rank && h->floats == floats &&
        h->chunk_floats == *chunk_floats && h->nchunks == (int)chunks_of(floats, *chunk_floats)) {
        *data_at = at + PAGE;
        return fd;
    }
    if (fd >= 0) close(fd);
    return -1;
}

int ckpt_file_header(const char *dir, const char *job, int rank, int version, size_t floats,
                     size_t chunk_floats, int *adam_step)
{
    version_header *h = NULL;
    if (posix_memalign((void **)&h, PAGE, PAGE) != 0) return -1;
    off_t data_at = 0;
    const int fd = open_version(dir, job, rank, version, floats, &chunk_floats, h, &data_at);
    const int it = fd >= 0 ? h->iteration : -1;
    if (fd >= 0) {
        *adam_step = h->adam_step;
        close(fd);
    }
    free(h);
    return it;
}

int ckpt_file_read(const char *dir, const char *job, int rank, int version, float *data,
                   size_t floats, size_t chunk_floats, int *adam_step)
{
    version_header *h = NULL;
    if (posix_memalign((void **)&h, PAGE, PAGE) != 0) return -1;
    off_t data_at = 0;
    const int fd = open_version(dir, job, rank, version, floats, &chunk_floats, h, &data_at);
    int it = -1;
    if (fd >= 0 && full_io(fd, data, round_page(floats * sizeof(float)), data_at, 0) == 0 && sums_match(h, data)) {
        it = h->iteration;
        *adam_step = h->adam_step;
    }
    if (fd >= 0) close(fd);
    free(h);
    return it;
}

void ckpt_file_remove(const char *dir, const char *job, int rank)
{
    char path[1200], d[1100];
    if (file_path(path, sizeof path, dir, job, rank, d, sizeof d)) return;
    unlink(path);
    rmdir(d); /* the last rank's succeeds */
}

/* One file: [header page | data] versions one after the other (the store's slots, or the
 * persistent file's two); any header that is ours and says complete? */
static int file_has_complete(int dirfd, const char *name)
{
    const int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return 0;
    struct stat st;
    int found = 0;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        version_header h;
        for (off_t at = 0; !found && at + (off_t)sizeof h <= st.st_size;) {
            if (pread(fd, &h, sizeof h, at) != (ssize_t)sizeof h || h.magic != CKPT_MAGIC || h.floats == 0 ||
                h.floats > (uint64_t)st.st_size)
                break;
            found = atomic_load(&h.state) == STATE_COMPLETE;
            at += (off_t)(PAGE + round_page((size_t)h.floats * sizeof(float)));
        }
    }
    close(fd);
    return found;
}

int ckpt_job_has_complete(const char *dir, const char *job, int persistent)
{
    char path[1200];
    const int n = persistent ? snprintf(path, sizeof path, "%s/aebench-ckpt-%u-%s", dir, (unsigned)getuid(), job)
                             : ckpt_store_dir(path, sizeof path, dir, job) == 0 ? (int)strlen(path) : -1;
    if (n < 0 || (size_t)n >= sizeof path) return 0;
    const int dirfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dirfd < 0) return 0;
    DIR *d = fdopendir(dirfd);
    if (!d) {
        close(dirfd);
        return 0;
    }
    int found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d))) {
        int r;
        char tail;
        if (sscanf(e->d_name, "rank-%d.ckp%c", &r, &tail) == 2 && tail == 't') found = file_has_complete(dirfd, e->d_name);
    }
    closedir(d);
    return found;
}
