/*
 * data.h — where the batches come from.
 *
 * synthetic (default): a deterministic corpus made on the fly.  Every row is a noisy chain
 *   over the first min(V, 256) token ids: a fixed random successor table (from the seed)
 *   gives the next token with probability 0.9, otherwise a uniformly drawn one.  A model
 *   first learns the 256-token unigram (loss ln V -> ln 256), then the chain (about 0.9
 *   nats), so the loss falls visibly within tens of iterations even for a tiny model.
 *   Row b of iteration i depends only on (seed, i, b): every engine and rank sees the same.
 * file (--data FILE): a flat file of little-endian uint16 token ids (as GPT-2 corpora are
 *   commonly stored).  Row b of iteration i (global batch G rows) is the window of T+1
 *   tokens starting at ((i-1) G + b) T, wrapping around the file.  The file is read whole
 *   into memory at the start (and every id checked): one that is rewritten or truncated while
 *   the run goes on changes nothing (a mapping of it would fault); a FIFO or device is refused.
 */
#ifndef AEBENCH_DATA_H
#define AEBENCH_DATA_H

#include <stddef.h>
#include <stdint.h>

typedef struct data_source {
    int vocab, batch, seq;
    uint64_t seed;
    /* synthetic */
    int active;               /* ids in use: min(vocab, 256) */
    uint16_t successor[256];
    /* file */
    uint16_t *tokens;         /* the file's ids (our copy), NULL when synthetic */
    size_t ntokens;
} data_source;

void data_open_synthetic(data_source *d, int vocab, int batch, int seq, uint64_t seed);
/* Map and validate the whole file; on error returns -1 with a one-line reason in err. */
int data_open_file(data_source *d, const char *path, int vocab, int batch, int seq, char *err,
                   size_t errlen);
/* tokens, targets: B*T ids each; targets are the tokens shifted left by one. */
void data_batch(const data_source *d, int iteration, int32_t *tokens, int32_t *targets);
/* Rows [first, first + nrows) of iteration's global batch of global_rows rows (tokens,
 * targets: nrows*T ids each).  Row g depends only on (seed or file, iteration, global_rows,
 * g): a rank takes its own rows of the global batch, so runs with the same global batch see
 * the same tokens whatever the ranks and micro-batch size.  data_batch is the global batch
 * of B rows, all of it. */
void data_rows(const data_source *d, int iteration, int global_rows, int first, int nrows,
               int32_t *tokens, int32_t *targets);
void data_close(data_source *d);

#endif
