#include "data.h"

#include "../kernels/rng.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

enum { SYNTHETIC_ACTIVE_MAX = 256, SYNTHETIC_STREAM = 0x5D17A };

void data_open_synthetic(data_source *d, int vocab, int batch, int seq, uint64_t seed)
{
    memset(d, 0, sizeof *d);
    d->vocab = vocab;
    d->batch = batch;
    d->seq = seq;
    d->seed = seed;
    d->active = vocab < SYNTHETIC_ACTIVE_MAX ? vocab : SYNTHETIC_ACTIVE_MAX;
    rng r = rng_for(seed, SYNTHETIC_STREAM, 0);
    for (int a = 0; a < d->active; a++) d->successor[a] = (uint16_t)rng_below(&r, (uint32_t)d->active);
}

int data_open_file(data_source *d, const char *path, int vocab, int batch, int seq, char *err,
                   size_t errlen)
{
    memset(d, 0, sizeof *d);
    d->vocab = vocab;
    d->batch = batch;
    d->seq = seq;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "cannot open data file %s: %s", path, strerror(errno));
        return -1;
    }
    struct stat stt;
    if (fstat(fd, &stt) != 0) {
        snprintf(err, errlen, "cannot stat data file %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    const size_t need = (size_t)batch * seq + 1;
    const size_t ntokens = (size_t)stt.st_size / 2;
    if (stt.st_size % 2 != 0) {
        snprintf(err, errlen, "data file %s has an odd size (%lld bytes): not uint16 tokens", path,
                 (long long)stt.st_size);
        close(fd);
        return -1;
    }
    if (ntokens < need) {
        snprintf(err, errlen,
                 "data file %s holds %zu tokens, fewer than one batch needs (%zu = B*T+1)", path,
                 ntokens, need);
        close(fd);
        return -1;
    }
    void *map = mmap(NULL, (size_t)stt.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd);
    if (map == MAP_FAILED) {
        snprintf(err, errlen, "cannot map data file %s: %s", path, strerror(map_errno));
        return -1;
    }
    d->tokens = map;
    d->ntokens = ntokens;
    d->map_bytes = (size_t)stt.st_size;
    /* Check every token now: a bad id found mid-run would waste the run (and on a GPU
     * index out of the embedding). The file is little-endian, like the machines we run on. */
    for (size_t i = 0; i < ntokens; i++) {
        if (d->tokens[i] >= vocab) {
            snprintf(err, errlen, "data file %s: token %u at position %zu is not below the vocabulary size %d",
                     path, d->tokens[i], i, vocab);
            data_close(d);
            return -1;
        }
    }
    return 0;
}

static void synthetic_row(const data_source *d, int iteration, int b, int32_t *row, int len)
{
    rng r = rng_for(d->seed, (uint64_t)iteration, (uint64_t)b + 1);
    uint32_t cur = rng_below(&r, (uint32_t)d->active);
    for (int t = 0; t < len; t++) {
        row[t] = (int32_t)cur;
        cur = rng_uniform(&r) < 0.9 ? d->successor[cur] : rng_below(&r, (uint32_t)d->active);
    }
}

void data_rows(const data_source *d, int iteration, int global_rows, int first, int nrows,
               int32_t *tokens, int32_t *targets)
{
    const int T = d->seq;
    int32_t row[T + 1];
    for (int i = 0; i < nrows; i++) {
        const int b = first + i;
        if (d->tokens) {
            size_t start = (((size_t)(iteration - 1) * global_rows + b) * T) % d->ntokens;
            for (int t = 0; t <= T; t++) row[t] = d->tokens[(start + t) % d->ntokens];
        } else {
            synthetic_row(d, iteration, b, row, T + 1);
        }
        memcpy(tokens + (size_t)i * T, row, (size_t)T * sizeof(int32_t));
        memcpy(targets + (size_t)i * T, row + 1, (size_t)T * sizeof(int32_t));
    }
}

void data_batch(const data_source *d, int iteration, int32_t *tokens, int32_t *targets)
{
    data_rows(d, iteration, d->batch, 0, d->batch, tokens, targets);
}

void data_close(data_source *d)
{
    if (d->tokens) munmap((void *)d->tokens, d->map_bytes);
    d->tokens = NULL;
}
