/*
 * gemini — a checkpoint of the whole training state in CPU memory every iteration, kept by
 * the rank itself and by m - 1 peers, and recovery from it when ranks die (Wang et al.,
 * SOSP'23).  It trains exactly as megatron-lm --zero-stage 3 (whose engine it runs); what it
 * adds is the checkpoint and the recovery.
 *
 * Where things live, per rank (besides megatron-lm ZeRO-3's own, engines/megatron_lm.c):
 *   GPU   two staging chunks (min(64 MiB, the shard) each): what a peer's shard arrives in
 *   host  the store (runtime/ckpt_store.h): a file on a memory file system (--gemini-store,
 *         default /dev/shm), mapped and page-locked, holding m shards in two alternating
 *         versions: slot 0 this rank's shard, slot d its d-th peer's; a shard is this rank's
 *         fp32 master parameters, Adam m and v (3 x the shard's floats), with the iteration
 *         and the Adam step in its header.  It outlives the process.
 *
 * Placement (--gemini-placement): group: ranks in groups of m (r / m), each holding its
 * whole group's shards; ring: rank r holds r, r - 1, ..., r - m + 1.  Either way, in round
 * d = 1 .. m-1 of a checkpoint rank r sends its shard to `to_d` and receives `from_d`'s:
 * ring (r + d), (r - d); group the same within the group.
 *
 * One step, stream by stream (--gemini-mode naive; none: megatron-lm's step only):
 *   compute   megatron-lm ZeRO-3's step (forward, backward, optimizer)
 *   ckpt-comm after the optimizer (an event): per round, per chunk of the shard's three
 *             arrays, a send of the chunk straight from the GPU arrays to to_d with the
 *             receive of from_d's chunk into staging[k mod 2] (one sendrecv), each waiting
 *             until the d2h stream has emptied that staging chunk
 *   d2h       after the optimizer: this rank's arrays into its slot's version (it mod 2);
 *             each received chunk into from_d's slot once it is in; after a slot's last
 *             copy, a host task checksums it and marks the version complete
 * naive: the host waits for both streams before the step returns (all of the checkpoint is
 * exposed).  A version is begun (marked "writing") before its first copy, so a rank that
 * dies mid-checkpoint leaves that version invalid and the other one, the step before's,
 * valid.
 *
 * Recovery (--gemini-recover, --gemini-job ID; `aebench --ranks N` relaunches a job that lost
 * a rank with both): every rank validates the versions in its store (header and checksums),
 * the ranks gather what each holds, and take the newest iteration whose shard every owner
 * has somewhere.  A rank whose own copy is valid loads it (host to device); one without (its
 * machine was replaced: --fail-kind hardware deletes its file) gets it from the lowest rank
 * that holds it: that rank copies it up chunk by chunk into its staging and sends it, this
 * rank receives straight into its arrays.  Then the Adam step is the stored one and the
 * driver goes on from the iteration after the restored one: with the same global batch, the
 * losses are the ones of a run that never failed, bit for bit on the CPU backend.  No version
 * that every shard has (every holder of a shard lost): exit 1, saying so.
 */
#include "engine.h"
#include "megatron_lm.h"

#include "runtime/ckpt_store.h"
#include "runtime/collectives.h"
#include "runtime/dp.h"
#include "runtime/timer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

/* Bytes of a staging chunk (the shard's arrays are sent in pieces of at most this). */
enum { GEMINI_CHUNK_BYTES = 64 << 20, GEMINI_MAX_REPLICAS = 16 };

typedef struct gemini_placement {
    int W, rank, m;
    int to[GEMINI_MAX_REPLICAS], from[GEMINI_MAX_REPLICAS]; /* rounds 1 .. m-1 */
    int owners[GEMINI_MAX_REPLICAS];                        /* slot s holds owners[s]'s shard */
} gemini_placement;

/* m: --gemini-replicas, by default 2 (1 on one rank: its own copy only). */
static int replicas_of(const engine_config *cfg)
{
    if (cfg->gemini_replicas > 0) return cfg->gemini_replicas;
    return engine_world(cfg) > 1 ? 2 : 1;
}

static gemini_placement placement_of(const engine_config *cfg, int rank)
{
    gemini_placement p;
    memset(&p, 0, sizeof p);
    p.W = engine_world(cfg);
    p.rank = rank;
    p.m = replicas_of(cfg);
    p.owners[0] = rank;
    for (int d = 1; d < p.m; d++) {
        if (cfg->gemini_placement == GEMINI_RING) {
            p.to[d] = (rank + d) % p.W;
            p.from[d] = (rank - d + p.W) % p.W;
        } else {
            const int base = rank / p.m * p.m, pos = rank % p.m;
            p.to[d] = base + (pos + d) % p.m;
            p.from[d] = base + (pos - d + p.m) % p.m;
        }
        p.owners[d] = p.from[d];
    }
    return p;
}

/* The run as megatron-lm sees it: ZeRO-3. */
static engine_config megatron_config(const engine_config *cfg)
{
    engine_config c = *cfg;
    c.zero_stage = 3;
    return c;
}

/* Floats of this rank's shard of the training state (master, m, v): the blocks' shards as
 * megatron-lm lays them out (runtime/dp.h). */
static size_t state_floats(const engine_config *cfg)
{
    const gpt_shape *sh = &cfg->shape;
    const int W = engine_world(cfg);
    const size_t S = dp_shard_len(gpt_embed_layout_of(sh).total, W) +
                     (size_t)sh->layers * dp_shard_len(gpt_layer_layout_of(sh).total, W);
    return 3 * S;
}

static size_t chunk_floats_of(size_t floats)
{
    const size_t c = GEMINI_CHUNK_BYTES / sizeof(float);
    return floats < c ? floats : c;
}

static void gemini_plan(const engine_config *cfg, engine_plan *out)
{
    engine_config c = megatron_config(cfg);
    engine_megatron_lm.plan(&c, out);
    if (cfg->gemini_mode == GEMINI_NONE) return;
    const size_t floats = state_floats(cfg), chunk = chunk_floats_of(floats / 3);
    const int m = replicas_of(cfg);
    out->gpu_bytes += 2 * (uint64_t)chunk * sizeof(float);
    out->host_bytes += ckpt_store_bytes(m, floats, chunk);
}

static int gemini_check(const engine_config *cfg, char *err, size_t errlen)
{
    const int W = engine_world(cfg), m = replicas_of(cfg);
    if (cfg->gemini_mode == GEMINI_INTERLEAVE) {
        snprintf(err, errlen, "gemini --gemini-mode interleave is not implemented yet (none or naive)");
        return -1;
    }
    if (m < 1 || m > W || m > GEMINI_MAX_REPLICAS) {
        snprintf(err, errlen, "--gemini-replicas %d: must be between 1 and the ranks (%d)", m, W);
        return -1;
    }
    if (cfg->gemini_placement == GEMINI_GROUP && W % m != 0) {
        snprintf(err, errlen, "--gemini-placement group: %d ranks do not make groups of %d "
                 "(--gemini-replicas); use a divisor or --gemini-placement ring", W, m);
        return -1;
    }
    /* The store's file system: there, writable, and room for every rank of this machine. */
    struct statvfs fs;
    if (cfg->gemini_mode != GEMINI_NONE || cfg->gemini_recover) {
        if (statvfs(cfg->gemini_store, &fs) != 0 || access(cfg->gemini_store, W_OK | X_OK) != 0) {
            snprintf(err, errlen, "--gemini-store %.400s: %s", cfg->gemini_store, strerror(errno));
            return -1;
        }
        const size_t floats = state_floats(cfg);
        const double need = (double)ckpt_store_bytes(m, floats, chunk_floats_of(floats / 3)) *
                            engine_local_world(cfg);
        const double have = (double)fs.f_bavail * (double)fs.f_frsize;
        if (!cfg->gemini_recover && have < need) {
            char h[32], n[32];
            format_bytes(have, h, sizeof h);
            format_bytes(need, n, sizeof n);
            snprintf(err, errlen, "--gemini-store %.400s has %s free; the checkpoints of this machine's "
                     "%d rank%s need %s", cfg->gemini_store, h, engine_local_world(cfg),
                     engine_local_world(cfg) == 1 ? "" : "s", n);
            return -1;
        }
    }
    return engine_megatron_lm.check ? engine_megatron_lm.check(cfg, err, errlen) : 0;
}

/* ---- state --------------------------------------------------------------------------------- */

typedef struct gemini_state {
    engine_env env, menv;
    engine_config mcfg;      /* megatron-lm's: ZeRO-3 */
    void *mega;
    megatron_shard_state shard;
    gemini_placement p;
    engine_allocs mem;       /* the staging chunks */
    coll_group *comm;        /* the checkpoint's own communicator and stream */
    gpt_stream *d2h;
    gpt_event *ev_step, *ev_recv[2], *ev_free[2];
    float *staging[2];
    size_t chunk;            /* floats of a staging chunk */
    ckpt_store *store;
    size_t store_bytes;      /* taken from the host budget (the memory file system is RAM) */
    char job[64];
    int resumed;             /* the iteration recovered (0: none) */
} gemini_state;

static void gemini_free(void *state)
{
    gemini_state *st = state;
    if (!st) return;
    if (st->d2h) (void)gpt_stream_sync(st->d2h);
    coll_close(st->comm);
    if (st->mega) engine_megatron_lm.free(st->mega);
    /* An orderly end (or a failed step: the job ends anyway) removes the store; a rank that
     * was killed never gets here, so its copies stay for the relaunch. */
    ckpt_store_close(st->store, 1);
    if (st->store_bytes) mem_budget_give(st->env.host, st->store_bytes);
    gpt_event_destroy(st->ev_step);
    for (int i = 0; i < 2; i++) {
        gpt_event_destroy(st->ev_recv[i]);
        gpt_event_destroy(st->ev_free[i]);
    }
    if (st->d2h) st->env.be->ops->stream_destroy(st->d2h);
    engine_free_all(&st->mem);
    free(st);
}

/* The array a float offset of the state (master | m | v, n each) falls in. */
static float *state_at(const megatron_shard_state *s, size_t off)
{
    if (off < s->n) return s->master + off;
    if (off < 2 * s->n) return s->adam_m + (off - s->n);
    return s->adam_v + (off - 2 * s->n);
}

/* The pieces of a transfer of the state: chunk k covers [at, at + len) within one array. */
typedef struct state_piece {
    size_t at, len;
} state_piece;
static int next_piece(const gemini_state *st, size_t *at, state_piece *out)
{
    const size_t total = 3 * st->shard.n;
    if (*at >= total) return 0;
    const size_t array_end = (*at / st->shard.n + 1) * st->shard.n;
    out->at = *at;
    out->len = array_end - *at < st->chunk ? array_end - *at : st->chunk;
    *at += out->len;
    return 1;
}

typedef struct complete_task {
    ckpt_store *store;
    int slot, version;
} complete_task;
static int complete_run(void *arg)
{
    const complete_task *t = arg;
    ckpt_store_complete(t->store, t->slot, t->version);
    return 0;
}

/* ---- recovery ------------------------------------------------------------------------------- */

/* What a rank holds, for the agreement: per slot and version, the owner and the iteration
 * (-1: not valid) and the Adam step. */
typedef struct held_version {
    int owner, iteration, adam_step;
} held_version;

static int restore(gemini_state *st)
{
    const gemini_placement *p = &st->p;
    const int W = p->W, per = p->m * CKPT_VERSIONS;
    held_version *mine = calloc((size_t)per, sizeof *mine);
    held_version *all = calloc((size_t)per * (size_t)W, sizeof *all);
    int rc = (!mine || !all) ? GPT_ERR_OOM : GPT_OK;
    for (int s = 0; !rc && s < p->m; s++)
        for (int v = 0; v < CKPT_VERSIONS; v++) {
            held_version *h = &mine[s * CKPT_VERSIONS + v];
            h->owner = p->owners[s];
            h->iteration = ckpt_store_valid(st->store, s, v, &h->adam_step);
        }
    if (!rc) rc = coll_host_all_gather(st->comm, all, mine, (size_t)per * sizeof *mine);
    /* the newest iteration every owner's shard has somewhere */
    int best = -1, best_step = 0;
    for (int i = 0; !rc && i < per * W; i++) {
        const int it = all[i].iteration;
        if (it <= best) continue;
        int everyone = 1;
        for (int o = 0; o < W && everyone; o++) {
            int found = 0;
            for (int j = 0; j < per * W && !found; j++)
                found = all[j].owner == o && all[j].iteration == it;
            everyone = found;
        }
        if (everyone) best = it, best_step = all[i].adam_step;
    }
    if (!rc && best < 0) {
        if (p->rank == 0)
            fprintf(stderr, "aebench: gemini: job %s: no checkpoint version that every rank's shard has "
                            "(every holder of some shard was lost); nothing to recover\n", st->job);
        rc = GPT_ERR_INVALID;
    }
    double t0 = wall_ms();
    gpt_stream *cs = rc ? NULL : coll_stream(st->comm);
    for (int o = 0; !rc && o < W; o++) {
        /* o's own copy if it is valid, else the lowest rank that holds one */
        int holder = -1, hslot = -1, hversion = -1;
        for (int r = 0; r < W && holder != o; r++)
            for (int i = 0; i < per; i++) {
                const held_version *h = &all[(size_t)r * per + i];
                if (h->owner == o && h->iteration == best && (holder < 0 || r == o)) {
                    holder = r, hslot = i / CKPT_VERSIONS, hversion = i % CKPT_VERSIONS;
                    break;
                }
            }
        if (holder == o && o == p->rank) {
            const float *src = ckpt_store_data(st->store, hslot, hversion);
            size_t at = 0;
            state_piece pc;
            while (!rc && next_piece(st, &at, &pc))
                rc = gpt_memcpy_h2d(cs, state_at(&st->shard, pc.at), src + pc.at, pc.len * sizeof(float));
        } else if (holder != o && (holder == p->rank || o == p->rank)) {
            const float *src = holder == p->rank ? ckpt_store_data(st->store, hslot, hversion) : NULL;
            size_t at = 0;
            state_piece pc;
            while (!rc && next_piece(st, &at, &pc)) {
                const size_t bytes = pc.len * sizeof(float);
                if (holder == p->rank) {
                    rc = gpt_memcpy_h2d(cs, st->staging[0], src + pc.at, bytes);
                    if (!rc) rc = coll_send(st->comm, st->staging[0], bytes, o);
                } else {
                    rc = coll_recv(st->comm, state_at(&st->shard, pc.at), bytes, holder);
                }
            }
        }
        /* (every rank knows every pair: rank 0, whose notes are logged, names them all) */
        if (!rc && holder != o)
            engine_note(&st->env, "gemini: rank %d's shard of iteration %d fetched from rank %d's copy "
                        "(%.1f MiB)", o, best, holder, 3.0 * (double)st->shard.n * sizeof(float) / 1048576.0);
    }
    if (!rc) rc = gpt_stream_sync(cs);
    if (!rc) {
        *st->shard.adam_step = best_step;
        st->resumed = best;
        engine_note(&st->env, "gemini: job %s recovered at iteration %d (Adam step %d) in %.1f ms; "
                    "training goes on from iteration %d", st->job, best, best_step, wall_ms() - t0,
                    best + 1);
    }
    free(mine);
    free(all);
    return rc;
}

/* ---- init ----------------------------------------------------------------------------------- */

static int gemini_init(const engine_env *env, void **state)
{
    *state = NULL;
    gemini_state *st = calloc(1, sizeof *st);
    if (!st) return GPT_ERR_OOM;
    *state = st;
    st->env = *env;
    st->mcfg = megatron_config(env->cfg);
    st->menv = *env;
    st->menv.cfg = &st->mcfg;
    st->p = placement_of(env->cfg, env->rank);
    engine_allocs_init(&st->mem, env->gpu, env->host, env->be);
    /* The store's bytes first (the memory file system is RAM): with megatron-lm's peak, which
     * comes during its init, that makes this run's peak its plan. */
    const int checkpoints = env->cfg->gemini_mode != GEMINI_NONE || env->cfg->gemini_recover;
    const size_t floats = state_floats(env->cfg);
    st->chunk = chunk_floats_of(floats / 3);
    if (checkpoints) {
        const size_t store_bytes = ckpt_store_bytes(st->p.m, floats, st->chunk);
        if (mem_budget_take(env->host, store_bytes, "gemini checkpoint store")) return GPT_ERR_OOM;
        st->store_bytes = store_bytes;
    }
    int rc = engine_megatron_lm.init(&st->menv, &st->mega);
    if (rc) return rc;
    if ((rc = megatron_shard_state_of(st->mega, &st->shard))) return rc;
    if ((rc = coll_open(&st->comm, env->be, env->rank, env->world))) return rc;

    /* The job's id: given, or rank 0's (pid and time), the same on every rank. */
    char id[64] = "";
    if (env->cfg->gemini_job[0]) snprintf(id, sizeof id, "%s", env->cfg->gemini_job);
    else snprintf(id, sizeof id, "p%ld-%ld", (long)getpid(), (long)time(NULL));
    char *ids = calloc((size_t)env->world, sizeof id);
    if (!ids) return GPT_ERR_OOM;
    rc = coll_host_all_gather(st->comm, ids, id, sizeof id);
    if (!rc) snprintf(st->job, sizeof st->job, "%s", ids);
    free(ids);
    if (rc) return rc;
    if (!checkpoints) {
        engine_note(env, "gemini --gemini-mode none: megatron-lm ZeRO-3, no checkpoint");
        return GPT_OK;
    }
    if (floats != 3 * st->shard.n) return GPT_ERR_INVALID; /* (the plan's rule is megatron's) */
    if ((rc = engine_alloc(&st->mem, MEM_GPU, (void **)&st->staging[0], 2 * st->chunk * sizeof(float),
                           "gemini staging chunks")))
        return rc;
    st->staging[1] = st->staging[0] + st->chunk;
    if ((rc = env->be->ops->stream_create(env->be, &st->d2h)) || (rc = gpt_event_create(env->be, &st->ev_step)))
        return rc;
    for (int i = 0; i < 2; i++)
        if ((rc = gpt_event_create(env->be, &st->ev_recv[i])) || (rc = gpt_event_create(env->be, &st->ev_free[i])))
            return rc;
    if ((rc = ckpt_store_open(&st->store, env->be, env->cfg->gemini_store, st->job, env->rank, st->p.m,
                              st->p.owners, floats, st->chunk, env->cfg->gemini_recover)))
        return rc == GPT_ERR_IO ? GPT_ERR_INVALID : rc; /* (the reason is on stderr) */
    char where[1100];
    ckpt_store_dir(where, sizeof where, env->cfg->gemini_store, st->job);
    engine_note(env, "gemini: job %s, a checkpoint every iteration (%s), %d cop%s of each shard (%s), "
                "store %s (%.1f MiB per rank)", st->job,
                env->cfg->gemini_mode == GEMINI_NAIVE ? "naive: after the step" : "none",
                st->p.m, st->p.m == 1 ? "y" : "ies",
                env->cfg->gemini_placement == GEMINI_RING ? "ring" : "group", where,
                (double)ckpt_store_bytes(st->p.m, floats, st->chunk) / 1048576.0);
    if (env->cfg->gemini_recover && (rc = restore(st))) return rc;
    return GPT_OK;
}

static void gemini_chosen_plan(void *state, engine_plan *out)
{
    gemini_plan(((gemini_state *)state)->env.cfg, out);
}

static int gemini_resume_iteration(void *state) { return ((gemini_state *)state)->resumed; }

/* ---- one step ---------------------------------------------------------------------------- */

/* The checkpoint of iteration it into version it mod 2 of every slot (see the top comment). */
static int checkpoint(gemini_state *st, int it, step_result *out)
{
    const gemini_placement *p = &st->p;
    const int v = it % CKPT_VERSIONS, step = *st->shard.adam_step;
    gpt_stream *cs = coll_stream(st->comm);
    int rc;
    if ((rc = gpt_event_record(st->ev_step, st->shard.compute)) || (rc = gpt_stream_wait_event(cs, st->ev_step)) ||
        (rc = gpt_stream_wait_event(st->d2h, st->ev_step)))
        return rc;
    /* this rank's own copy */
    ckpt_store_begin(st->store, 0, v, it, step);
    float *mine = ckpt_store_data(st->store, 0, v);
    size_t at = 0;
    state_piece pc;
    while (next_piece(st, &at, &pc))
        if ((rc = gpt_memcpy_d2h(st->d2h, mine + pc.at, state_at(&st->shard, pc.at), pc.len * sizeof(float))))
            return rc;
    complete_task t0 = {.store = st->store, .slot = 0, .version = v};
    if ((rc = gpt_stream_host_task(st->d2h, complete_run, &t0, sizeof t0))) return rc;
    out->ckpt_bytes += 3.0 * (double)st->shard.n * sizeof(float);
    /* the peers' */
    int k = 0;
    for (int d = 1; d < p->m; d++) {
        ckpt_store_begin(st->store, d, v, it, step);
        float *theirs = ckpt_store_data(st->store, d, v);
        at = 0;
        while (next_piece(st, &at, &pc)) {
            const int b = k % 2;
            const size_t bytes = pc.len * sizeof(float);
            if ((k >= 2 && (rc = gpt_stream_wait_event(cs, st->ev_free[b]))) ||
                (rc = coll_sendrecv(st->comm, state_at(&st->shard, pc.at), p->to[d], st->staging[b],
                                    p->from[d], bytes)) ||
                (rc = gpt_event_record(st->ev_recv[b], cs)) || (rc = gpt_stream_wait_event(st->d2h, st->ev_recv[b])) ||
                (rc = gpt_memcpy_d2h(st->d2h, theirs + pc.at, st->staging[b], bytes)) ||
                (rc = gpt_event_record(st->ev_free[b], st->d2h)))
                return rc;
            out->ckpt_bytes += (double)bytes;
            k++;
        }
        complete_task td = {.store = st->store, .slot = d, .version = v};
        if ((rc = gpt_stream_host_task(st->d2h, complete_run, &td, sizeof td))) return rc;
    }
    return GPT_OK;
}

static int gemini_step(void *state, int iteration, const int32_t *tokens, const int32_t *targets,
                       step_result *out)
{
    gemini_state *st = state;
    int rc = engine_megatron_lm.step(st->mega, iteration, tokens, targets, out);
    if (rc || st->env.cfg->gemini_mode == GEMINI_NONE) return rc;
    const double t0 = wall_ms();
    out->has_ckpt = 1;
    out->ckpt_bytes = 0;
    if ((rc = checkpoint(st, iteration, out)) || (rc = gpt_stream_sync(coll_stream(st->comm))) ||
        (rc = gpt_stream_sync(st->d2h)))
        return rc;
    /* naive: the training waited for all of it */
    out->ckpt_ms = out->ckpt_exposed_ms = wall_ms() - t0;
    out->ms_optimizer += out->ckpt_ms;
    return GPT_OK;
}

static int gemini_read_params(void *state, float *host_params)
{
    return engine_megatron_lm.read_params(((gemini_state *)state)->mega, host_params);
}

const engine_vtbl engine_gemini = {
    .name = "gemini",
    .alias = NULL,
    .description = "megatron-lm ZeRO-3 with an in-memory checkpoint every iteration on m ranks, and recovery",
    .uses_window = 0,
    .not_in_all = 1,
    .supports_bf16 = 0,
    .options = ENGINE_OPT_RANKS | ENGINE_OPT_ACCUM,
    .plan = gemini_plan,
    .check = gemini_check,
    .init = gemini_init,
    .chosen_plan = gemini_chosen_plan,
    .step = gemini_step,
    .free = gemini_free,
    .read_params = gemini_read_params,
    .resume_iteration = gemini_resume_iteration,
};
