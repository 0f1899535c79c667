/*
 * dp.h — what data-parallel engines share: how a block is cut into rank shards, the
 * canonical global norm, the shard-wise AdamW and the step's global loss.
 *
 * Shards.  A block of n floats (the embedding block or one layer, model.h) is cut into
 * `world` shards of S floats each, S = n on one rank and otherwise n / world rounded up to
 * a multiple of 64 (256 bytes, so every shard starts aligned); the block is padded to
 * world·S, so that reduce-scatter and all-gather (equal counts per rank) work on it in
 * place.  Rank r owns [r·S, r·S + real) where real = min(S, n − r·S) (0 or more).
 *
 * The canonical global norm.  Whatever each rank holds, every engine computes the squared
 * norm of every (block, shard) pair over the same elements with the same op, and combines
 * the (L+1)·world values in (block, shard) order (gpt_combine_norms).  An engine holding the
 * whole reduced gradient computes all of them; a sharding engine computes its own and
 * all-gathers them.  So at one world size every engine and every ZeRO stage gets the same
 * bits, and on one rank it is exactly the per-block norm of the single-rank engines.
 */
#ifndef AEBENCH_DP_H
#define AEBENCH_DP_H

#include "../../kernels/model.h"
#include "collectives.h"

#include <stddef.h>

/* Shard length S of a block of n floats over world ranks (see above). */
static inline size_t dp_shard_len(size_t n, int world)
{
    if (world <= 1) return n;
    const size_t per = (n + (size_t)world - 1) / (size_t)world;
    return (per + 63) / 64 * 64;
}
/* Real (unpadded) floats of shard r of a block of n floats with shard length S. */
static inline size_t dp_shard_real(size_t n, size_t S, int r)
{
    const size_t lo = (size_t)r * S;
    if (lo >= n) return 0;
    return n - lo < S ? n - lo : S;
}

/* Squared norms of the world shards of one block's gradient, grads holding the whole
 * block (n real floats): out[r] for r in [0, world) (device floats). */
void dp_block_shard_norms(gpt_stream *s, const float *grads, size_t n, int world, float *out);
/* The squared norm of this rank's shard of one block (grad_shard holds its real floats). */
void dp_shard_norm(gpt_stream *s, const float *grad_shard, size_t n, int world, int rank,
                   float *out);

/* AdamW on rank's shard of one block: params, params_act (NULL: none), grads, m, v point at
 * the shard's first element; weight decay on the block's [0, n_decay) only, as
 * gpt_block_adamw_act does for the whole block (AdamW is elementwise: the same bits).  acc
 * (NULL: none): the checksum terms of the shard's real elements (its padding is not
 * written), acc->first[] the words of its first element. */
void dp_shard_adamw(gpt_stream *s, float *params, void *params_act, const float *grads,
                    float *m, float *v, size_t n, size_t n_decay, int world, int rank,
                    const gpt_optim *o, float lr, int t, float grad_scale,
                    const gpt_checksum_acc *acc);

/* The canonical layout [embed | layer 0 | ...] of every parameter (out: the model's count)
 * from every rank's shards: `shards` holds this rank's, block after block (the embed
 * block's Se floats, then each layer's Sl: the layout dp_shard_len gives); host-side,
 * blocking.  0 or a gpt_status. */
int dp_gather_blocks(const coll_group *g, const float *shards, size_t PE, size_t PL, int L,
                     float *out);

/* n layer blocks of PL floats each (out, canonical, n·PL floats) from every rank's shards of
 * them (`shards`: this rank's, dp_shard_len(PL, world) floats per layer); host-side. */
int dp_gather_layers(const coll_group *g, const float *shards, size_t PL, int n, float *out);

/* The step's loss: the mean over this rank's micro-batches of their mean token losses
 * (local_sum = their sum), averaged over ranks; 0 or a gpt_status. */
int dp_global_loss(const coll_group *g, double local_sum, int micro_batches, double *loss);

#endif
