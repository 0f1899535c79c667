#include "ckpt_store.h"

#include "private_dir.h"

#include "../../kernels/host_pages.h"
#include "../../kernels/checksum_element.h"

#include <dirent.h>
#include <errno.h>
#include <stddef.h>
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
static const uint64_t CKPT_MAGIC = 0x33544b4347454141ull; /* "AAEGCKT3": the header inside a checksum */
enum { STATE_EMPTY = 0, STATE_WRITING = 1, STATE_COMPLETE = 2 };

/* The header page of a version (the rest of the page holds the chunks' checksums).  Every
 * byte recovery trusts is under header_sum: the fields before state, and the chunks' sums
 * (which cover the data); state is the one field written apart ("complete" last). */
typedef struct version_header {
    uint64_t magic;
    int32_t owner, iteration, adam_step, nchunks;
    uint64_t floats, chunk_floats;
    uint64_t identity; /* the job's shape, dtype, ranks and copies (ckpt_identity) */
    int32_t version;   /* which of the CKPT_VERSIONS it is */
    _Atomic int32_t state;
    uint64_t header_sum;
    uint64_t sums[MAX_CHUNKS];
} version_header;
_Static_assert(sizeof(version_header) == PAGE, "a version's header is one page");

struct ckpt_store {
    const gpt_backend *be;
    private_dir dir; /* the job's directory, this rank's lock held */
    char name[64];   /* this rank's file in it */
    char *map;
    size_t bytes, floats, chunk_floats, version_bytes;
    int slots, nchunks, registered;
    uint64_t identity;
    int *owners;
};

uint64_t ckpt_identity(const uint64_t *values, int n)
{
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < n; i++) h = gpt_checksum_mix(h ^ gpt_checksum_mix(values[i] + (uint64_t)i));
    return h;
}

/* The checksum of a header: its fields before state and its chunks' sums (nchunks must have
 * been checked against MAX_CHUNKS). */
static uint64_t header_sum_of(const version_header *h)
{
    const uint64_t a = gpt_checksum_sum((const uint32_t *)(const void *)h, offsetof(version_header, state) / 4, 0);
    const uint64_t b = gpt_checksum_sum((const uint32_t *)(const void *)h->sums, (uint64_t)h->nchunks * 2, 1u << 20);
    return gpt_checksum_fold(a + b, (uint64_t)h->nchunks * 2 + offsetof(version_header, state) / 4);
}

/* Does header h say a complete version that is what we expect (the owner, the version, the
 * job's identity and sizes), and are its bytes what were written (header_sum)? */
static int header_ok(const version_header *h, int owner, int version, uint64_t identity, size_t floats,
                     size_t chunk_floats, int nchunks)
{
    return h->magic == CKPT_MAGIC && atomic_load(&h->state) == STATE_COMPLETE && h->nchunks == nchunks &&
           nchunks >= 0 && nchunks <= MAX_CHUNKS && h->header_sum == header_sum_of(h) && h->owner == owner &&
           h->version == version && h->identity == identity && h->floats == floats &&
           h->chunk_floats == chunk_floats && h->iteration >= 0 && h->adam_step >= 0;
}

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

int ckpt_store_for_machine(char *out, size_t len, const char *pattern, int machine)
{
    size_t n = 0;
    for (const char *p = pattern; *p; p++) {
        char num[16];
        const char *piece = num;
        size_t k;
        if (p[0] == '%' && p[1] == 'm') {
            snprintf(num, sizeof num, "%d", machine);
            k = strlen(num);
            p++;
        } else {
            piece = p;
            k = 1;
        }
        if (n + k >= len) return -1;
        memcpy(out + n, piece, k);
        n += k;
    }
    if (len == 0) return -1;
    out[n] = '\0';
    return 0;
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

int ckpt_store_open(ckpt_store **out, const gpt_backend *be, const char *dir, const char *job,
                    int rank, int slots, const int *owners, size_t floats, size_t chunk_floats,
                    uint64_t identity, int reuse, char *why, size_t whylen)
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
    s->identity = identity;
    private_dir_init(&s->dir);
    char path[1100];
    s->owners = malloc((size_t)slots * sizeof *s->owners);
    if (!s->owners || ckpt_store_dir(path, sizeof path, dir, job) ||
        snprintf(s->name, sizeof s->name, "rank-%d.ckpt", rank) >= (int)sizeof s->name) {
        snprintf(why, whylen, "gemini store under %.200s: its path is too long (or out of host memory)", dir);
        ckpt_store_close(s, 0);
        return GPT_ERR_INVALID;
    }
    memcpy(s->owners, owners, (size_t)slots * sizeof *owners);
    /* (private_dir.h: ours and 0700, or refused and left alone; this rank's lock before its
     * file is touched: a second job of the same id is refused, not given a truncated store) */
    char lock[64];
    long holder = 0;
    snprintf(lock, sizeof lock, "rank-%d.lock", rank);
    if (private_dir_open(&s->dir, path, 1, why, whylen) != 0) {
        ckpt_store_close(s, 0);
        return GPT_ERR_IO;
    }
    if (private_dir_lock(&s->dir, lock, &holder, why, whylen) != 0) {
        ckpt_store_close(s, 0);
        return GPT_ERR_IO;
    }
    int fd = private_dir_openat(&s->dir, s->name, O_RDWR | O_CREAT, why, whylen);
    if (fd < 0) {
        ckpt_store_close(s, 0);
        return errno == ENOSPC ? GPT_ERR_OOM : GPT_ERR_IO;
    }
    if (!reuse && ftruncate(fd, 0) != 0) {
        int rc = tell(why, whylen, path, "cannot empty its file", errno);
        close(fd);
        ckpt_store_close(s, 0);
        return rc;
    }
    struct stat fst;
    const int fresh = fstat(fd, &fst) != 0 || (size_t)fst.st_size != s->bytes;
    if (fresh && (ftruncate(fd, 0) != 0 || ftruncate(fd, (off_t)s->bytes) != 0)) {
        int rc = tell(why, whylen, s->dir.path, "cannot size its file", errno);
        close(fd);
        private_dir_unlink(&s->dir, s->name);
        ckpt_store_close(s, 0);
        return rc;
    }
    s->map = mmap(NULL, s->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (s->map == MAP_FAILED) {
        s->map = NULL;
        int rc = tell(why, whylen, s->dir.path, "cannot map its file", errno);
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
        int rc = tell(why, whylen, s->dir.path, "cannot reserve its file's bytes", err == EFAULT ? ENOSPC : err);
        if (fresh) private_dir_unlink(&s->dir, s->name);
        ckpt_store_close(s, 0);
        return rc;
    }
    if (fresh)
        /* every version's header says whose it is and its sizes, empty: what reads the file
         * without knowing the job's shape (ckpt_job_holdings) steps over versions never written */
        for (int slot = 0; slot < slots; slot++)
            for (int v = 0; v < CKPT_VERSIONS; v++) {
                ckpt_store_begin(s, slot, v, -1, 0);
                atomic_store(&header(s, slot, v)->state, STATE_EMPTY);
            }
    if (gpt_host_register(be, s->map, s->bytes) != GPT_OK) {
        snprintf(why, whylen, "gemini store %s: cannot page-lock its %zu bytes", s->dir.path, s->bytes);
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
    if (remove && s->dir.fd >= 0) private_dir_unlink(&s->dir, s->name);
    private_dir_close(&s->dir, remove); /* (the directory goes with the last rank's file) */
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
    h->identity = s->identity;
    h->version = version;
}

uint64_t *ckpt_store_sums(ckpt_store *s, int slot, int version)
{
    return header(s, slot, version)->sums;
}

size_t ckpt_store_chunk_floats(const ckpt_store *s) { return s->chunk_floats; }
int ckpt_store_nchunks(const ckpt_store *s) { return s->nchunks; }

void ckpt_store_mark_complete(ckpt_store *s, int slot, int version)
{
    version_header *h = header(s, slot, version);
    h->header_sum = header_sum_of(h); /* (the sums are in by now) */
    atomic_store(&h->state, STATE_COMPLETE);
}

int ckpt_store_valid(ckpt_store *s, int slot, int version, int *adam_step)
{
    version_header *h = header(s, slot, version);
    if (!header_ok(h, s->owners[slot], version, s->identity, s->floats, s->chunk_floats, s->nchunks) ||
        !sums_match(h, ckpt_store_data(s, slot, version)))
        return -1;
    *adam_step = h->adam_step;
    return h->iteration;
}

/* The chunk size a store of `floats` uses for the one asked (ckpt_store_open's rule: no more
 * chunks than a header page holds sums of). */
static size_t store_chunk_floats(size_t floats, size_t chunk_floats)
{
    return chunks_of(floats, chunk_floats) > MAX_CHUNKS ? (floats + MAX_CHUNKS - 1) / MAX_CHUNKS : chunk_floats;
}

int ckpt_store_peek(const char *dir, const char *job, int rank, int slots, const int *owners, size_t floats,
                    size_t chunk_floats, uint64_t identity, int *iterations)
{
    for (int i = 0; i < slots * CKPT_VERSIONS; i++) iterations[i] = -1;
    chunk_floats = store_chunk_floats(floats, chunk_floats);
    char path[PRIVATE_DIR_PATH], name[64], why[64];
    if (ckpt_store_dir(path, sizeof path, dir, job) ||
        snprintf(name, sizeof name, "rank-%d.ckpt", rank) >= (int)sizeof name)
        return 0;
    private_dir pd;
    if (private_dir_open(&pd, path, 0, why, sizeof why) != 0) return 0; /* (none, or not ours: nothing held) */
    const int fd = private_dir_openat(&pd, name, O_RDONLY, why, sizeof why);
    version_header *h = fd >= 0 ? malloc(sizeof *h) : NULL;
    const int oom = fd >= 0 && !h;
    const size_t version_bytes = PAGE + round_page(floats * sizeof(float));
    for (int slot = 0; h && slot < slots; slot++)
        for (int v = 0; v < CKPT_VERSIONS; v++) {
            const off_t at = (off_t)(((size_t)slot * CKPT_VERSIONS + (size_t)v) * version_bytes);
            if (pread(fd, h, sizeof *h, at) == (ssize_t)sizeof *h &&
                header_ok(h, owners[slot], v, identity, floats, chunk_floats, (int)chunks_of(floats, chunk_floats)))
                iterations[slot * CKPT_VERSIONS + v] = h->iteration;
        }
    free(h);
    if (fd >= 0) close(fd);
    private_dir_close(&pd, 0);
    return oom ? -1 : 0;
}

/* ---- the persistent checkpoint -------------------------------------------------------------- */

int ckpt_dir_open(private_dir *d, const char *dir, const char *job, int rank, char *why, size_t whylen)
{
    char path[PRIVATE_DIR_PATH], lock[64];
    const int n = snprintf(path, sizeof path, "%s/aebench-ckpt-%u-%s", dir, (unsigned)getuid(), job);
    if (n < 0 || (size_t)n >= sizeof path) {
        private_dir_init(d);
        snprintf(why, whylen, "--ckpt-dir %.200s: the path is too long", dir);
        return -1;
    }
    snprintf(lock, sizeof lock, "rank-%d.lock", rank);
    long holder = 0;
    if (private_dir_open(d, path, 1, why, whylen) != 0) return -1;
    const int rc = private_dir_lock(d, lock, &holder, why, whylen);
    if (rc != 0) private_dir_close(d, 0);
    return rc;
}

/* O_DIRECT where the file system takes it (it bypasses the page cache, as a checkpoint of
 * many GB should), plain I/O where it does not (tmpfs on older kernels says EINVAL). */
static int open_direct(const private_dir *d, const char *name, int flags, char *why, size_t whylen)
{
    int fd = private_dir_openat(d, name, flags | O_DIRECT, why, whylen);
    if (fd < 0 && errno == EINVAL) fd = private_dir_openat(d, name, flags, why, whylen);
    return fd;
}

static int full_io(int fd, void *buf, size_t bytes, off_t at, int write_it)
{
    char *p = buf;
    while (bytes) {
        const size_t n = bytes < (1u << 30) ? bytes : (1u << 30);
        ssize_t r = write_it ? pwrite(fd, p, n, at) : pread(fd, p, n, at);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            if (r == 0) errno = write_it ? ENOSPC : EIO; /* (a short file: what was written is not there) */
            return -1;
        }
        p += r, at += r, bytes -= (size_t)r;
    }
    return 0;
}

static void rank_file(char *out, size_t len, int rank) { snprintf(out, len, "rank-%d.ckpt", rank); }

size_t ckpt_file_bytes(size_t floats)
{
    return CKPT_VERSIONS * (PAGE + round_page(floats * sizeof(float)));
}

uint64_t ckpt_job_file_bytes(const char *dir, const char *job)
{
    char path[PRIVATE_DIR_PATH], why[64];
    const int n = snprintf(path, sizeof path, "%s/aebench-ckpt-%u-%s", dir, (unsigned)getuid(), job);
    private_dir pd;
    if (n < 0 || (size_t)n >= sizeof path || private_dir_open(&pd, path, 0, why, sizeof why) != 0) return 0;
    const int list_fd = dup(pd.fd); /* (closedir closes it) */
    DIR *d = list_fd >= 0 ? fdopendir(list_fd) : NULL;
    uint64_t bytes = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        int r;
        char tail[8] = "";
        struct stat st;
        if (sscanf(e->d_name, "rank-%d.%7s", &r, tail) == 2 && strcmp(tail, "ckpt") == 0 &&
            fstatat(pd.fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
            bytes += (uint64_t)st.st_blocks * 512;
    }
    if (d) closedir(d);
    else if (list_fd >= 0) close(list_fd);
    private_dir_close(&pd, 0);
    return bytes;
}

/* A failed write of the persistent checkpoint: GPT_ERR_OOM when the disk is full, else
 * GPT_ERR_IO, and the reason in why. */
static int write_failed(char *why, size_t whylen, const private_dir *d, const char *name, int err)
{
    if (err == ENOSPC || err == EDQUOT) {
        snprintf(why, whylen, "disk full writing %.900s/%s", d->path, name);
        return GPT_ERR_OOM;
    }
    snprintf(why, whylen, "cannot write %.900s/%s: %s", d->path, name, strerror(err));
    return GPT_ERR_IO;
}

int ckpt_file_write_why(const private_dir *d, int rank, int version, uint64_t identity, int iteration,
                        int adam_step, const float *data, size_t floats, size_t chunk_floats, char *why,
                        size_t whylen)
{
    char name[64];
    if (chunks_of(floats, chunk_floats) > MAX_CHUNKS) chunk_floats = (floats + MAX_CHUNKS - 1) / MAX_CHUNKS;
    rank_file(name, sizeof name, rank);
    version_header *h = NULL;
    if (posix_memalign((void **)&h, PAGE, PAGE) != 0) {
        snprintf(why, whylen, "out of host memory for a checkpoint header");
        return GPT_ERR_OOM;
    }
    memset(h, 0, PAGE);
    const size_t data_bytes = round_page(floats * sizeof(float));
    const off_t at = (off_t)version * (off_t)(PAGE + data_bytes);
    int rc = GPT_OK;
    /* (made here, or an earlier checkpoint's: a file this write made and could not fill holds
     * nothing, and goes; one that was there keeps its other version, what recovery reads) */
    int fd = open_direct(d, name, O_RDWR, why, whylen), made = 0;
    if (fd < 0 && errno == ENOENT) made = (fd = open_direct(d, name, O_RDWR | O_CREAT | O_EXCL, why, whylen)) >= 0;
    if (fd < 0) rc = errno == ENOSPC || errno == EDQUOT ? write_failed(why, whylen, d, name, errno) : GPT_ERR_IO;
    h->magic = CKPT_MAGIC;
    h->owner = rank;
    h->iteration = iteration;
    h->adam_step = adam_step;
    h->floats = floats;
    h->chunk_floats = chunk_floats;
    h->nchunks = (int)chunks_of(floats, chunk_floats);
    h->identity = identity;
    h->version = version;
    atomic_store(&h->state, STATE_WRITING);
    if (!rc && (full_io(fd, h, PAGE, at, 1) || fdatasync(fd) ||
                full_io(fd, (void *)data, data_bytes, at + PAGE, 1) || fdatasync(fd)))
        rc = write_failed(why, whylen, d, name, errno);
    if (!rc) {
        sums_of(h, data);
        h->header_sum = header_sum_of(h);
        atomic_store(&h->state, STATE_COMPLETE);
        if (full_io(fd, h, PAGE, at, 1) || fdatasync(fd)) rc = write_failed(why, whylen, d, name, errno);
    }
    if (fd >= 0) close(fd);
    if (rc && made) (void)private_dir_unlink(d, name);
    free(h);
    return rc;
}

int ckpt_file_write(const private_dir *d, int rank, int version, uint64_t identity, int iteration,
                    int adam_step, const float *data, size_t floats, size_t chunk_floats)
{
    char why[1200];
    const int rc = ckpt_file_write_why(d, rank, version, identity, iteration, adam_step, data, floats, chunk_floats,
                                       why, sizeof why);
    if (rc) fprintf(stderr, "aebench: %s\n", why);
    return rc;
}

/* Open the rank's file and read version v's header into h (a page, page aligned): the open
 * descriptor when the header is whole, complete and ours (header_ok), else -1. */
static int open_version(const private_dir *d, int rank, int version, uint64_t identity, size_t floats,
                        size_t *chunk_floats, version_header *h, off_t *data_at)
{
    char name[64], why[1200];
    if (chunks_of(floats, *chunk_floats) > MAX_CHUNKS) *chunk_floats = (floats + MAX_CHUNKS - 1) / MAX_CHUNKS;
    rank_file(name, sizeof name, rank);
    const off_t at = (off_t)version * (off_t)(PAGE + round_page(floats * sizeof(float)));
    int fd = open_direct(d, name, O_RDONLY, why, sizeof why);
    if (fd >= 0 && full_io(fd, h, PAGE, at, 0) == 0 &&
        header_ok(h, rank, version, identity, floats, *chunk_floats, (int)chunks_of(floats, *chunk_floats))) {
        *data_at = at + PAGE;
        return fd;
    }
    if (fd >= 0) close(fd);
    return -1;
}

int ckpt_file_header(const private_dir *d, int rank, int version, uint64_t identity, size_t floats,
                     size_t chunk_floats, int *adam_step)
{
    version_header *h = NULL;
    if (posix_memalign((void **)&h, PAGE, PAGE) != 0) return -1;
    off_t data_at = 0;
    const int fd = open_version(d, rank, version, identity, floats, &chunk_floats, h, &data_at);
    const int it = fd >= 0 ? h->iteration : -1;
    if (fd >= 0) {
        *adam_step = h->adam_step;
        close(fd);
    }
    free(h);
    return it;
}

int ckpt_file_peek(const char *dir, const char *job, int rank, uint64_t identity, size_t floats,
                   size_t chunk_floats, int *iterations)
{
    for (int v = 0; v < CKPT_VERSIONS; v++) iterations[v] = -1;
    char path[PRIVATE_DIR_PATH], why[64];
    const int n = snprintf(path, sizeof path, "%s/aebench-ckpt-%u-%s", dir, (unsigned)getuid(), job);
    private_dir pd;
    if (n < 0 || (size_t)n >= sizeof path || private_dir_open(&pd, path, 0, why, sizeof why) != 0) return 0;
    int step = 0;
    for (int v = 0; v < CKPT_VERSIONS; v++)
        iterations[v] = ckpt_file_header(&pd, rank, v, identity, floats, chunk_floats, &step);
    private_dir_close(&pd, 0);
    return 0;
}

int ckpt_file_read(const private_dir *d, int rank, int version, uint64_t identity, float *data,
                   size_t floats, size_t chunk_floats, int *adam_step)
{
    version_header *h = NULL;
    if (posix_memalign((void **)&h, PAGE, PAGE) != 0) return -1;
    off_t data_at = 0;
    const int fd = open_version(d, rank, version, identity, floats, &chunk_floats, h, &data_at);
    int it = -1;
    if (fd >= 0 && full_io(fd, data, round_page(floats * sizeof(float)), data_at, 0) == 0 && sums_match(h, data)) {
        it = h->iteration;
        *adam_step = h->adam_step;
    }
    if (fd >= 0) close(fd);
    free(h);
    return it;
}

void ckpt_file_remove(private_dir *d, int rank)
{
    char name[64];
    rank_file(name, sizeof name, rank);
    if (d->fd >= 0) private_dir_unlink(d, name);
    private_dir_close(d, 1); /* (the directory goes with the last rank's file) */
}

/* One file: [header page | data] versions one after the other (the store's slots, or the
 * persistent file's two); each header that is whole and says complete goes into h. */
static int file_holdings(int dirfd, const char *name, int persistent, ckpt_holdings *h)
{
    const int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return 0;
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        version_header v;
        off_t stride = 0; /* (a version's bytes, from the last header read; all are alike) */
        for (off_t at = 0; !rc && at + (off_t)sizeof v <= st.st_size; at += stride) {
            if (pread(fd, &v, sizeof v, at) != (ssize_t)sizeof v) break;
            if (v.magic != CKPT_MAGIC || v.floats == 0 || v.floats > (uint64_t)st.st_size) {
                /* (never begun: the next.  The store's headers are all written when it is made;
                 * the persistent file's version 1 may come first, --ckpt-every 2 writes it at
                 * iteration 2, and then it ends the file: half of it) */
                if (!stride && persistent && st.st_size % (CKPT_VERSIONS * PAGE) == 0)
                    stride = st.st_size / CKPT_VERSIONS;
                if (stride) continue;
                break;
            }
            stride = (off_t)(PAGE + round_page((size_t)v.floats * sizeof(float)));
            if (atomic_load(&v.state) == STATE_COMPLETE && v.nchunks >= 0 && v.nchunks <= MAX_CHUNKS &&
                v.header_sum == header_sum_of(&v) && v.owner >= 0 && v.iteration >= 0) {
                if (h->n == h->cap) {
                    const int cap = h->cap ? 2 * h->cap : 16;
                    ckpt_held *grown = realloc(h->held, (size_t)cap * sizeof *grown);
                    if (!grown) {
                        rc = -1;
                        break;
                    }
                    h->held = grown, h->cap = cap;
                }
                h->held[h->n++] = (ckpt_held){v.owner, v.iteration};
            }
        }
    }
    close(fd);
    return rc;
}

/* What a job directory holds: rank-<r>.ckpt (its files) and rank-<r>.lock (their locks).
 * Calls fn for each (is_lock says which) until fn returns nonzero, which is returned. */
typedef int (*rank_file_fn)(const private_dir *pd, const char *name, int is_lock, void *ctx);
static int each_rank_file(const private_dir *pd, rank_file_fn fn, void *ctx)
{
    const int list_fd = dup(pd->fd); /* (closedir closes it; pd keeps its own) */
    DIR *d = list_fd >= 0 ? fdopendir(list_fd) : NULL;
    if (!d) {
        if (list_fd >= 0) close(list_fd);
        return 0;
    }
    int rc = 0;
    for (struct dirent *e; !rc && (e = readdir(d));) {
        int r;
        char tail[8] = "";
        if (sscanf(e->d_name, "rank-%d.%7s", &r, tail) != 2) continue;
        if (strcmp(tail, "ckpt") == 0 || strcmp(tail, "lock") == 0) rc = fn(pd, e->d_name, tail[0] == 'l', ctx);
    }
    closedir(d);
    return rc;
}

typedef struct ckpt_holdings_ctx {
    int persistent;
    ckpt_holdings *h;
} ckpt_holdings_ctx;

static int file_holdings_of(const private_dir *pd, const char *name, int is_lock, void *ctx)
{
    const ckpt_holdings_ctx *c = ctx;
    return is_lock ? 0 : file_holdings(pd->fd, name, c->persistent, c->h);
}

int ckpt_job_holdings(const char *dir, const char *job, int persistent, ckpt_holdings *h)
{
    char path[1200];
    const int n = persistent ? snprintf(path, sizeof path, "%s/aebench-ckpt-%u-%s", dir, (unsigned)getuid(), job)
                             : ckpt_store_dir(path, sizeof path, dir, job) == 0 ? (int)strlen(path) : -1;
    if (n < 0 || (size_t)n >= sizeof path) return 0;
    private_dir pd;
    char why[64];
    if (private_dir_open(&pd, path, 0, why, sizeof why) != 0) return 0; /* (not ours and private: nothing of ours) */
    ckpt_holdings_ctx c = {persistent, h};
    const int rc = each_rank_file(&pd, file_holdings_of, &c);
    private_dir_close(&pd, 0);
    return rc;
}

int ckpt_newest_whole(const ckpt_held *held, int n, int ranks, int *newest, int *missing)
{
    int best = -1;
    *newest = -1, *missing = -1;
    for (int i = 0; i < n; i++) {
        const int it = held[i].iteration;
        if (it <= best) continue;
        int lacking = -1;
        for (int o = 0; o < ranks && lacking < 0; o++) {
            int found = 0;
            for (int j = 0; j < n && !found; j++) found = held[j].owner == o && held[j].iteration == it;
            if (!found) lacking = o;
        }
        if (lacking < 0) best = it;
        else if (it > *newest) *newest = it, *missing = lacking;
    }
    if (best >= 0) *newest = best, *missing = -1;
    return best;
}

void ckpt_holdings_free(ckpt_holdings *h)
{
    free(h->held);
    *h = (ckpt_holdings){0};
}

static int held_lock(const private_dir *pd, const char *name, int is_lock, void *holder)
{
    return is_lock && private_dir_lock_held(pd->path, name, holder) == 1;
}

int ckpt_dir_in_use(const char *path, long *holder)
{
    *holder = 0;
    private_dir pd;
    char why[64];
    if (private_dir_open(&pd, path, 0, why, sizeof why) != 0) return -1;
    const int held = each_rank_file(&pd, held_lock, holder);
    private_dir_close(&pd, 0);
    return held;
}

static int unlink_rank_file(const private_dir *pd, const char *name, int is_lock, void *ctx)
{
    (void)is_lock, (void)ctx;
    (void)private_dir_unlink(pd, name); /* (a link: the link) */
    return 0;
}

void ckpt_dir_remove(const char *path)
{
    long holder = 0;
    if (ckpt_dir_in_use(path, &holder) != 0) return; /* (another job's, or not ours and private) */
    private_dir pd;
    char why[64];
    if (private_dir_open(&pd, path, 0, why, sizeof why) != 0) return;
    (void)each_rank_file(&pd, unlink_rank_file, NULL);
    private_dir_close(&pd, 1);
}
