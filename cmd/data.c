#include "data.h"

#include "../kernels/rng.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
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
    /* (O_NONBLOCK: a FIFO named here must not block the open; it is refused below) */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
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
    if (!S_ISREG(stt.st_mode)) {
        snprintf(err, errlen, "data file %s: not a regular file (a file of uint16 token ids was expected)", path);
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
    d->tokens = malloc(ntokens * sizeof *d->tokens);
    if (!d->tokens) {
        snprintf(err, errlen, "data file %s: out of host memory for its %zu tokens", path, ntokens);
        close(fd);
        return -1;
    }
    /* Read to the size fstat said; a file that shrank meanwhile is said so, not faulted on. */
    size_t got = 0;
    char *dst = (char *)d->tokens;
    while (got < ntokens * 2) {
        const ssize_t n = read(fd, dst + got, ntokens * 2 - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            snprintf(err, errlen, "data file %s: %s after %zu of its %zu bytes", path,
                     n < 0 ? strerror(errno) : "it ended (changed while read)", got, ntokens * 2);
            close(fd);
            data_close(d);
            return -1;
        }
        got += (size_t)n;
    }
    close(fd);
    d->ntokens = ntokens;
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
    free(d->tokens);
    d->tokens = NULL;
}
