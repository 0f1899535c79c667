#include "dp.h"

#include <stdlib.h>
#include <string.h>

void dp_block_shard_norms(gpt_stream *s, const float *grads, size_t n, int world, float *out)
{
    const size_t S = dp_shard_len(n, world);
    for (int r = 0; r < world; r++) dp_shard_norm(s, grads + (size_t)r * S, n, world, r, out + r);
}

void dp_shard_norm(gpt_stream *s, const float *grad_shard, size_t n, int world, int rank,
                   float *out)
{
    const size_t real = dp_shard_real(n, dp_shard_len(n, world), rank);
    if (real > 0) gpt_norm_squared(s, out, grad_shard, real);
    else gpt_stream_memset_zero(s, out, sizeof(float));
}

void dp_shard_adamw(gpt_stream *s, float *params, void *params_act, const float *grads,
                    float *m, float *v, size_t n, size_t n_decay, int world, int rank,
                    const gpt_optim *o, float lr, int t, float grad_scale,
                    const gpt_checksum_acc *acc)
{
    const size_t S = dp_shard_len(n, world);
    const size_t lo = (size_t)rank * S, real = dp_shard_real(n, S, rank);
    if (real == 0) return;
    const size_t hi = lo + real;
    const size_t esz = gpt_dtype_size(gpt_stream_dtype(s));
    /* [lo, hi) against the decay range [0, n_decay) */
    const size_t split = n_decay <= lo ? 0 : n_decay >= hi ? real : n_decay - lo;
    /* (the second call's first element is the split's) */
    gpt_checksum_acc rest = acc ? *acc : (gpt_checksum_acc){0};
    for (int k = 0; k < 3; k++) rest.first[k] += split;
    if (split > 0)
        gpt_adamw_update_sums(s, params, params_act, grads, m, v, split, lr, (float)o->beta1,
                              (float)o->beta2, (float)o->eps, (float)o->weight_decay, t, grad_scale, acc);
    if (split < real)
        gpt_adamw_update_sums(s, params + split,
                              params_act ? (char *)params_act + split * esz : NULL, grads + split,
                              m + split, v + split, real - split, lr, (float)o->beta1,
                              (float)o->beta2, (float)o->eps, 0.0f, t, grad_scale, acc ? &rest : NULL);
}

int dp_global_loss(const coll_group *g, double local_sum, int micro_batches, double *loss)
{
    double v = local_sum;
    int rc = coll_host_sum_doubles(g, &v, 1);
    if (rc) return rc;
    const int world = coll_world(g);
    /* One rank, one micro-batch: the mean itself (no division that could round). */
    *loss = (micro_batches == 1 && world == 1) ? v : v / ((double)micro_batches * world);
    return 0;
}

int dp_gather_blocks(const coll_group *g, const float *shards, size_t PE, size_t PL, int L,
                     float *out)
{
    const int world = coll_world(g);
    const size_t Se = dp_shard_len(PE, world), Sl = dp_shard_len(PL, world);
    const size_t per_rank = Se + (size_t)L * Sl;
    float *all = malloc((size_t)world * per_rank * sizeof(float));
    if (!all) return GPT_ERR_OOM;
    int rc = coll_host_all_gather(g, all, shards, per_rank * sizeof(float));
    size_t at = 0, soff = 0;
    for (int b = 0; rc == 0 && b <= L; b++) {
        const size_t n = b == 0 ? PE : PL, S = b == 0 ? Se : Sl;
        for (int r = 0; r < world; r++)
            memcpy(out + at + (size_t)r * S, all + (size_t)r * per_rank + soff,
                   dp_shard_real(n, S, r) * sizeof(float));
        at += n;
        soff += S;
    }
    free(all);
    return rc;
}

int dp_gather_layers(const coll_group *g, const float *shards, size_t PL, int n, float *out)
{
    const int world = coll_world(g);
    const size_t Sl = dp_shard_len(PL, world), per_rank = (size_t)n * Sl;
    float *all = malloc((size_t)world * per_rank * sizeof(float));
    if (!all) return GPT_ERR_OOM;
    int rc = coll_host_all_gather(g, all, shards, per_rank * sizeof(float));
    for (int l = 0; rc == 0 && l < n; l++)
        for (int r = 0; r < world; r++)
            memcpy(out + (size_t)l * PL + (size_t)r * Sl, all + (size_t)r * per_rank + (size_t)l * Sl,
                   dp_shard_real(PL, Sl, r) * sizeof(float));
    free(all);
    return rc;
}
