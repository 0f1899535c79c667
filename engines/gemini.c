/*
 * gemini — a checkpoint of the whole training state in CPU memory every iteration, kept by
 * the rank itself and by m - 1 peers, and recovery from it when ranks die (Wang et al.,
 * SOSP'23).  It trains exactly as megatron-lm --zero-stage 3 (whose engine it runs); what it
 * adds is the checkpoint and the recovery.
 *
 * Where things live, per rank (besides megatron-lm ZeRO-3's own, engines/megatron_lm.c):
 *   GPU   two staging chunks (min(64 MiB, the shard) each): what a peer's shard arrives in;
 *         m rows of chunk checksums (this rank's, and each round's peer's), a row of the
 *         shard padding's terms (where the optimizer's sums start) and one for checking
 *         them; m tokens (read);
 *         with --gemini-transport read, this rank's three arrays are also windows its peers
 *         map (CUDA IPC: no copy, their copy engines read them in place)
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
 * How a peer's shard crosses (--gemini-transport): sendrecv: NCCL kernels (MPI send/recv on
 * the CPU backend), one sendrecv per chunk; read: the keeping rank's copy engines read it
 * from the owner's GPU over NVLink (CUDA IPC; MPI one-sided gets on the CPU backend), with
 * no kernel on either side, so nothing takes SMs from the training beside it (2x H100, case
 * 6's shape: interleave 1.042-1.052x of none with NCCL kernels, 1.016-1.025x read).  A read has no matching, so
 * two tokens order it against the owner: "ready" (the owner's checksums, sent once its
 * arrays are the step's and summed) before the first read, and "done" (one word back from
 * each reader after its last read) before the owner's optimizer.  auto: read where every
 * rank is on one machine and the GPUs reach each other (coll_window_open), else sendrecv.
 *
 * One checkpoint, stream by stream (the training itself is megatron-lm ZeRO-3's, on compute
 * and its two collective streams):
 *   own-d2h   after the step's optimizer (an event on compute): the chunk checksums of this
 *             rank's arrays, which that optimizer summed as it wrote them (megatron_arm_sums:
 *             no pass of their own over the state; checked against one at the first
 *             checkpoint), or computed here (checksum_chunks) where its update was skipped;
 *             then the arrays and the checksums into its slot's version (it mod 2); a stream of its own, so
 *             that the peers' chunks below never queue behind these gigabytes
 *   ckpt-comm per round d, per chunk of the shard's three arrays: one sendrecv, this rank's
 *             chunk straight from the GPU arrays to to_d and from_d's into staging[k mod 2],
 *             each waiting until d2h has emptied that staging chunk; after a round's last
 *             chunk, the checksums (this rank's to to_d, from_d's into their GPU row).
 *             read: first (after this rank's checksums) "ready": the checksums each round's
 *             way; then per chunk a read of from_d's arrays into staging[k mod 2] (the same
 *             waits); after the last, "done": a token to each from_d, one from each to_d.
 *             (A read straight from from_d's GPU into the page-locked store, no staging, was
 *             measured slower: 2x H100, l16, 1.033-1.035x of none against 1.026-1.032x; 2x
 *             H200 505.8 against 491.0 ms under --profile: the read holds NVLink at PCIe's pace.
 *             bench/results/2026-11-28-h100x2-gemini-read.)
 *   d2h       each peer chunk received, once it is in, into that peer's slot; its checksums
 *   verify    after a slot's last copy (an event): a host task marks its version complete
 *             (recovery checks the data against the checksums before it trusts a version);
 *             a version is marked "writing" only after the other version's marks (the
 *             host waits on their event), so one version is always complete
 * When (--gemini-mode):
 *   none        never (megatron-lm's step; --ckpt-dir alone is traditional checkpointing)
 *   (any mode trains the iterations before --gemini-ckpt-from as none: the artifact's runs
 *   compare steps without and with checkpoints in one job)
 *   naive       right after the step; the host waits for all three streams (all of it exposed)
 *   interleave  3 steps as naive, measuring (hooks in megatron-lm's step, megatron_lm.h) when
 *               each training collective starts and ends, the idle spans between them (both
 *               collective streams idle) up to the optimizer, and a chunk's time alone; then
 *               rank 0's plan (every rank takes it, so that each sendrecv meets its peers' in
 *               the same span) puts into each span what 90% of it carries at the measured
 *               rate, cut into pieces of at most a staging chunk (at least 1 MiB).  Each
 *               checkpoint is sent during the next step: begun at its start (the local copy
 *               at once, on own-d2h, which the training does not use: megatron-lm reads
 *               nothing back before its optimizer), its chunks issued behind the
 *               collective that opens each span, the rest just before the optimizer, which
 *               waits for all of it (that wait is the exposed time): the arrays must not change
 *               while they are read.  A failure during that step finds the version before.
 * A version is begun (marked "writing") before its first copy, so a rank that dies mid-
 * checkpoint leaves that version invalid and the other one valid.
 * --ckpt-dir DIR, every --ckpt-every K: after the step, this rank's own slot (taken now if
 * the naive checkpoint did not) is written to a file under DIR (ckpt_store.h), the host
 * waiting; it survives anything the store does not.
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
 * that every shard has (every holder of a shard lost): the persistent checkpoint's newest
 * version that every rank's file has, else exit 1, saying so.
 */
#include "megatron_lm.h"

#include "runtime/ckpt_store.h"
#include "runtime/collectives.h"
#include "runtime/comm.h"
#include "runtime/predict.h"
#include "runtime/timer.h"
#include "../kernels/checksum_element.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

/* Bytes of a staging chunk (the shard's arrays are sent in pieces of at most this). */
enum { GEMINI_CHUNK_BYTES = 64 << 20, GEMINI_MAX_REPLICAS = 16 };
/* interleave: steps checkpointed naively first, measuring from the second on */
enum { GEMINI_WARMUP = 3 };

typedef struct gemini_placement {
    int world, rank, m;
    int to[GEMINI_MAX_REPLICAS], from[GEMINI_MAX_REPLICAS]; /* rounds 1 .. m-1 */
    int owners[GEMINI_MAX_REPLICAS];                        /* slot s holds owners[s]'s shard */
    int across;  /* the copies are placed by machine: every peer on another machine */
} gemini_placement;

/* m: --gemini-replicas, by default 2 (1 on one rank: its own copy only). */
static int replicas_of(const engine_config *cfg)
{
    if (cfg->gemini_replicas > 0) return cfg->gemini_replicas;
    return engine_world(cfg) > 1 ? 2 : 1;
}

/* Ranks on several machines, each with as many: rank r's machine and its index among that
 * machine's ranks.  0 where the ranks are on one machine, or the machines hold different
 * numbers of them. */
static int machine_grid(const engine_config *cfg, int r, int *host, int *local)
{
    const int world = engine_world(cfg), H = cfg->hosts;
    if (!cfg->rank_host || H < 2 || world % H != 0) return 0;
    for (int h = 0; h < H; h++) {
        int n = 0;
        for (int q = 0; q < world; q++) n += cfg->rank_host[q] == h;
        if (n != world / H) return 0;
    }
    *local = 0;
    for (int q = 0; q < r; q++) *local += cfg->rank_host[q] == cfg->rank_host[r];
    *host = cfg->rank_host[r];
    return 1;
}

/* The rank with index `local` among machine `host`'s ranks. */
static int rank_on(const engine_config *cfg, int host, int local)
{
    for (int q = 0, seen = 0; q < engine_world(cfg); q++)
        if (cfg->rank_host[q] == host && seen++ == local) return q;
    return -1;
}

/* Where rank's shard's copies go, and whose it keeps.  On several machines with as many
 * ranks each, by machine (what the Gemini paper places: losing a machine loses its memory, so
 * a copy on the same machine is no copy): group, machines in groups of m, rank (h, i)
 * exchanging with rank i of each other machine of its group; ring, with rank i of the machines
 * h + d and h - d.  Where there are too few machines for that (ring: m > machines; group: m
 * does not divide them) or the ranks, by rank as on one machine: group, ranks in groups of m;
 * ring, r + d and r - d. */
static gemini_placement placement_of(const engine_config *cfg, int rank)
{
    gemini_placement p;
    memset(&p, 0, sizeof p);
    p.world = engine_world(cfg);
    p.rank = rank;
    p.m = replicas_of(cfg);
    p.owners[0] = rank;
    int host = 0, local = 0;
    const int H = cfg->hosts, ring = cfg->gemini_placement == GEMINI_RING;
    p.across = p.m > 1 && machine_grid(cfg, rank, &host, &local) &&
               (ring ? p.m <= H : H % p.m == 0);
    for (int d = 1; d < p.m; d++) {
        if (p.across && ring) {
            p.to[d] = rank_on(cfg, (host + d) % H, local);
            p.from[d] = rank_on(cfg, (host - d + H) % H, local);
        } else if (p.across) {
            const int base = host / p.m * p.m, pos = host % p.m;
            p.to[d] = rank_on(cfg, base + (pos + d) % p.m, local);
            p.from[d] = rank_on(cfg, base + (pos - d + p.m) % p.m, local);
        } else if (ring) {
            p.to[d] = (rank + d) % p.world;
            p.from[d] = (rank - d + p.world) % p.world;
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

/* Floats of this rank's shard of the training state (master, m, v), as megatron-lm keeps it. */
static size_t state_floats(const engine_config *cfg)
{
    engine_config c = megatron_config(cfg);
    return 3 * megatron_shard_floats(&c);
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
    engine_plan_add_comm(out, cfg, 1); /* (its checkpoint group) */
    if (cfg->gemini_mode == GEMINI_NONE && !cfg->ckpt_dir[0]) return;
    const size_t floats = state_floats(cfg), chunk = chunk_floats_of(floats / 3);
    const int m = replicas_of(cfg);
    out->gpu_bytes += 2 * (uint64_t)chunk * sizeof(float);
    if (m > 1 && cfg->gemini_mode != GEMINI_NONE) out->gpu_bytes += GEMINI_MAX_REPLICAS * sizeof(uint64_t);
    out->host_bytes += ckpt_store_bytes(m, floats);
}

static int gemini_check(const engine_config *cfg, char *err, size_t errlen)
{
    const int world = engine_world(cfg), m = replicas_of(cfg);
    if (m < 1 || m > world || m > GEMINI_MAX_REPLICAS) {
        snprintf(err, errlen, "--gemini-replicas %d: must be between 1 and the ranks (%d)", m, world);
        return -1;
    }
    if (cfg->gemini_placement == GEMINI_GROUP && world % m != 0) {
        snprintf(err, errlen, "--gemini-placement group: %d ranks do not make groups of %d "
                 "(--gemini-replicas); use a divisor or --gemini-placement ring", world, m);
        return -1;
    }
    if (cfg->gemini_every < 0 && cfg->gemini_mode != GEMINI_INTERLEAVE) {
        snprintf(err, errlen, "--gemini-every auto chooses the interval from interleave's measurements of the step: "
                 "it goes with --gemini-mode interleave (naive: give the interval)");
        return -1;
    }
    if (cfg->gemini_transport == GEMINI_PEER_READ && cfg->hosts > 1) {
        snprintf(err, errlen, "--gemini-transport read: the ranks are on %d machines, whose GPUs cannot read "
                 "each other's memory; use sendrecv (or auto)", cfg->hosts);
        return -1;
    }
    /* The store's file system: there, writable, and room for every rank of this machine. */
    struct statvfs fs;
    if (cfg->ckpt_dir[0] && (access(cfg->ckpt_dir, W_OK | X_OK) != 0 || statvfs(cfg->ckpt_dir, &fs) != 0)) {
        snprintf(err, errlen, "--ckpt-dir %.400s: %s", cfg->ckpt_dir, strerror(errno));
        return -1;
    }
    if (cfg->ckpt_dir[0]) {
        /* The persistent checkpoints too (both versions of each of this machine's ranks' files,
         * less what the job's files there already take: a recovery's), as the store below: a
         * disk that cannot hold them is said now, not at the first write after minutes of
         * training; a bad input (exit 2, nothing written), as the store's. */
        const double need = (double)ckpt_file_bytes(state_floats(cfg)) * engine_local_world(cfg) -
                            (cfg->gemini_job[0] ? (double)ckpt_job_file_bytes(cfg->ckpt_dir, cfg->gemini_job) : 0);
        const double have = (double)fs.f_bavail * (double)fs.f_frsize;
        if (have < need) {
            char h[32], n[32];
            format_bytes(have, h, sizeof h);
            format_bytes(need, n, sizeof n);
            snprintf(err, errlen, "--ckpt-dir %.400s: the persistent checkpoints do not fit: they need %s (two "
                     "versions of the shard of each of this machine's %d rank%s), %s free", cfg->ckpt_dir, n,
                     engine_local_world(cfg), engine_local_world(cfg) == 1 ? "" : "s", h);
            return -1;
        }
    }
    if (cfg->gemini_mode != GEMINI_NONE || cfg->gemini_recover || cfg->ckpt_dir[0]) {
        if (statvfs(cfg->gemini_store, &fs) != 0 || access(cfg->gemini_store, W_OK | X_OK) != 0) {
            snprintf(err, errlen, "--gemini-store %.400s: %s", cfg->gemini_store, strerror(errno));
            return -1;
        }
        const size_t floats = state_floats(cfg);
        const double need = (double)ckpt_store_bytes(m, floats) *
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
    const engine_config zero3 = megatron_config(cfg);
    return engine_megatron_lm.check ? engine_megatron_lm.check(&zero3, err, errlen) : 0;
}

/* What a version must have been written by to be restored: the shape, the dtype, the ranks
 * and how they keep each other's copies, the shard's size. */
static uint64_t identity_of(const engine_config *cfg, const gemini_placement *p, size_t floats)
{
    const gpt_shape *sh = &cfg->shape;
    const uint64_t ident[] = {(uint64_t)sh->layers, (uint64_t)sh->hidden, (uint64_t)sh->heads, (uint64_t)sh->seq,
                              (uint64_t)sh->vocab, (uint64_t)cfg->bf16, (uint64_t)p->world, (uint64_t)p->m,
                              (uint64_t)cfg->gemini_placement, (uint64_t)floats};
    return ckpt_identity(ident, (int)(sizeof ident / sizeof ident[0]));
}

/* The iteration a recovery of job cfg->gemini_job would restore, as restore() chooses it (the
 * newest iteration every rank's shard has in the stores, else in --ckpt-dir: *from_disk), but
 * from the versions' headers alone and before anything is made, locked or changed.  restore()
 * then checks the data, which can only make the iteration older.  A collective: every rank
 * gets the same answer.  -1: nothing to recover (or no --gemini-recover, or no --gemini-job: a
 * new id names no store); -2: out of memory, or the ranks could not exchange what they hold. */
static int gemini_recovery_point(const engine_config *cfg, const comm_world *comm, int *from_disk)
{
    *from_disk = 0;
    if (!cfg->gemini_recover || !cfg->gemini_job[0]) return -1; /* (a job id made now names no store) */
    const gemini_placement p = placement_of(cfg, comm->rank);
    const size_t floats = state_floats(cfg), chunk = chunk_floats_of(floats / 3);
    const uint64_t identity = identity_of(cfg, &p, floats);
    /* per rank: its store file's slots and versions, then its persistent file's versions (what
     * restore() gathers, and restore_persistent() after it) */
    const int per = p.m * CKPT_VERSIONS, row = per + CKPT_VERSIONS, world = p.world;
    int *mine = calloc((size_t)row, sizeof *mine), *all = calloc((size_t)row * (size_t)world, sizeof *all);
    ckpt_held *held = calloc((size_t)per * (size_t)world, sizeof *held);
    int best = -2, newest, missing;
    if (mine && all && held &&
        ckpt_store_peek(cfg->gemini_store, cfg->gemini_job, p.rank, p.m, p.owners, floats, chunk, identity, mine) == 0 &&
        (!cfg->ckpt_dir[0] || ckpt_file_peek(cfg->ckpt_dir, cfg->gemini_job, p.rank, identity, floats, chunk,
                                             mine + per) == 0) &&
        comm_all_gather(comm, mine, all, (size_t)row * sizeof *mine) == 0) {
        if (!cfg->ckpt_dir[0])
            for (int r = 0; r < world; r++)
                for (int v = 0; v < CKPT_VERSIONS; v++) all[r * row + per + v] = -1;
        for (int r = 0; r < world; r++) {
            const gemini_placement q = placement_of(cfg, r);
            for (int i = 0; i < per; i++) held[r * per + i] = (ckpt_held){q.owners[i / CKPT_VERSIONS], all[r * row + i]};
        }
        best = ckpt_newest_whole(held, per * world, world, &newest, &missing);
        if (best < 0) {
            for (int r = 0; r < world; r++)
                for (int v = 0; v < CKPT_VERSIONS; v++) held[r * CKPT_VERSIONS + v] = (ckpt_held){r, all[r * row + per + v]};
            best = ckpt_newest_whole(held, world * CKPT_VERSIONS, world, &newest, &missing);
            *from_disk = best >= 0;
        }
    }
    free(mine);
    free(all);
    free(held);
    return best;
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
    gpt_stream *d2h;         /* the peers' chunks, staging to their slots (at recovery: a held
                                shard up into staging, to be sent to its owner) */
    gpt_stream *own_d2h;     /* this rank's own arrays to its slot: a stream of their own, so
                                that the staging chunks never wait behind them */
    gpt_stream *verify;      /* the versions' checksums (host tasks), off the copies' path */
    gpt_event *ev_step, *ev_recv[2], *ev_free[2];
    gpt_event *ev_copied, *ev_verified[CKPT_VERSIONS];
    float *staging[2];
    size_t chunk;            /* floats of a staging chunk */
    uint64_t *dev_sums;      /* GPU: m x nchunks chunk checksums: [0] this rank's shard's, [d]
                                the one received from round d's peer with its shard; then a
                                row of the padding's terms (sums_init) and one for the check */
    uint64_t *sums_init;     /* GPU: the raw sums of the words no update writes (the shards'
                                padding, zeros), where the optimizer's sums start */
    /* This rank's checksums ride on the optimizer (megatron_arm_sums) of a due step: the
     * iteration whose sums it made (0: none), and whether they are trusted (checked once
     * against a pass of their own at the first checkpoint; a disagreement goes back to the
     * pass for good) */
    int fused_it, fused_checked, fused_off;
    gpt_event *ev_sums;      /* this rank's checksums are computed */
    /* --gemini-transport read: this rank's arrays (master, m, v) as windows its peers read,
     * NULL where the peers' chunks are sent (sendrecv); the tokens of the checkpoint's end */
    coll_window *window[3];
    uint64_t *dev_tokens;    /* GPU: [0] what this rank sends, [d] what round d's peer sent */
    int reading;             /* a checkpoint read from the peers is under way (its end owed) */
    gpt_event *ev_ready;     /* the peers' checksums are in (read: their arrays may be read) */
    ckpt_store *store;
    size_t store_bytes;      /* taken from the host budget (the memory file system is RAM) */
    private_dir ckpt;        /* --ckpt-dir: the job's directory there, this rank's lock held */
    uint64_t identity;       /* what every checkpoint header of the job must name (ckpt_identity) */
    char job[64];
    engine_resume resume;    /* what was recovered (iteration 0: nothing) */
    /* the checkpoint being sent: its version, the round (peer) and where in the arrays */
    int version, round, chunk_no;
    size_t round_at;
    step_result *out;        /* the step being run (the hooks count its bytes) */
    int iteration;           /* ... and its number */
    /* interleave */
    int warm, planned, interleaving, pending; /* pending: the iteration whose checkpoint the
                                                 next step carries (0: none) */
    int ncoll, cap, plan_len; /* collectives issued this step; events allocated; planned */
    gpt_event **ev_cstart, **ev_cend; /* per collective of a step: its start and end */
    size_t *floats_after;    /* the plan: floats sent after collective j */
    double *gap_ms;          /* idle span after collective j (the tightest measured) */
    double idle_ms, ms_per_float; /* the step's idle collective time; the transfer's rate */
    gpt_event *ev_opt, *ev_ck_start, *ev_ck_done, *ev_d2h_done;
    gpt_event *ev_own_start, *ev_own_done; /* around this rank's own copy home */
    double ms_per_d2h_float;               /* its rate (warm-up: the PCIe bound) */
    double fill;             /* the share of a span the plan fills (engine_config.gemini_fill: 0.9) */
    /* --gemini-every: the interval (auto: 1 until the plan chooses it), the next iteration
     * due, the version the last checkpoint began (versions alternate by checkpoint, not by
     * iteration: with an even interval they would not) and the training step's own time
     * (naive steps: what auto weighs the checkpoint against) */
    int every, next_due, last_version;
    double step_wall_ms, every_share;
    int naive_it;            /* the iteration a naive checkpoint last took (persist reuses it) */
} gemini_state;

static void gemini_free(void *state)
{
    gemini_state *st = state;
    if (!st) return;
    if (st->d2h) (void)gpt_stream_sync(st->d2h);
    if (st->own_d2h) (void)gpt_stream_sync(st->own_d2h);
    if (st->verify) (void)gpt_stream_sync(st->verify);
    if (st->comm) (void)gpt_stream_sync(coll_stream(st->comm));
    for (int a = 0; a < 3; a++) coll_window_close(st->window[a]);
    coll_close(st->comm);
    if (st->mega) engine_megatron_lm.free(st->mega);
    /* An orderly end (or a failed step: the job ends anyway) removes the store; a rank that
     * was killed never gets here, so its copies stay for the relaunch. */
    ckpt_store_close(st->store, 1);
    private_dir_close(&st->ckpt, 0); /* (the persistent checkpoint stays: that is what it is for) */
    if (st->store_bytes) mem_budget_give(st->env.host, st->store_bytes);
    gpt_event_destroy(st->ev_step);
    gpt_event_destroy(st->ev_opt);
    gpt_event_destroy(st->ev_ck_start);
    gpt_event_destroy(st->ev_ck_done);
    gpt_event_destroy(st->ev_d2h_done);
    gpt_event_destroy(st->ev_own_start);
    gpt_event_destroy(st->ev_own_done);
    for (int i = 0; i < st->cap; i++) {
        gpt_event_destroy(st->ev_cstart[i]);
        gpt_event_destroy(st->ev_cend[i]);
    }
    free(st->ev_cstart);
    free(st->ev_cend);
    free(st->floats_after);
    free(st->gap_ms);
    for (int i = 0; i < 2; i++) {
        gpt_event_destroy(st->ev_recv[i]);
        gpt_event_destroy(st->ev_free[i]);
    }
    if (st->d2h) st->env.be->ops->stream_destroy(st->d2h);
    if (st->own_d2h) st->env.be->ops->stream_destroy(st->own_d2h);
    if (st->verify) st->env.be->ops->stream_destroy(st->verify);
    gpt_event_destroy(st->ev_copied);
    gpt_event_destroy(st->ev_sums);
    gpt_event_destroy(st->ev_ready);
    for (int v = 0; v < CKPT_VERSIONS; v++) gpt_event_destroy(st->ev_verified[v]);
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
/* The next piece from *at of at most max floats (and a staging chunk, and within one
 * array); 0 at the end (or with max 0). */
static int next_piece_max(const gemini_state *st, size_t *at, size_t max, state_piece *out)
{
    const size_t total = 3 * st->shard.n;
    if (*at >= total || max == 0) return 0;
    const size_t array_end = (*at / st->shard.n + 1) * st->shard.n;
    size_t len = array_end - *at < st->chunk ? array_end - *at : st->chunk;
    if (len > max) len = max;
    out->at = *at;
    out->len = len;
    *at += len;
    return 1;
}
static int next_piece(const gemini_state *st, size_t *at, state_piece *out)
{
    return next_piece_max(st, at, st->chunk, out);
}

typedef struct complete_task {
    ckpt_store *store;
    int slot, version;
} complete_task;
static int complete_run(void *arg)
{
    const complete_task *t = arg;
    ckpt_store_mark_complete(t->store, t->slot, t->version);
    return 0;
}

/* Slot s's copies of version v, and of its checksums, are issued on `copies`: its "complete"
 * mark follows on the verify stream (a host task), so that nothing else waits for it. */
static int complete_slot(gemini_state *st, int slot, int version, gpt_stream *copies)
{
    complete_task t = {.store = st->store, .slot = slot, .version = version};
    int rc;
    if ((rc = gpt_event_record(st->ev_copied, copies)) || (rc = gpt_stream_wait_event(st->verify, st->ev_copied)) ||
        (rc = gpt_stream_host_task(st->verify, complete_run, &t, sizeof t)) ||
        (rc = gpt_event_record(st->ev_verified[version], st->verify)))
        return rc;
    return GPT_OK;
}

/* The persistent checkpoint's newest version that every rank has, loaded into the arrays;
 * *best stays -1 when there is none.  The ranks agree on the newest iteration every rank's
 * headers name, then each reads and checks that version's data alone (one read of the shard,
 * not one per version); a rank whose data fails its checksums drops it and they agree again. */
static int restore_persistent(gemini_state *st, int *best, int *best_step)
{
    const int world = st->p.world;
    float *buf = ckpt_store_data(st->store, 0, 0); /* (page aligned; invalid anyway now) */
    const size_t floats = 3 * st->shard.n;
    int mine[2 * CKPT_VERSIONS], *all = calloc((size_t)world * 2 * CKPT_VERSIONS, sizeof *all), rc = GPT_OK;
    ckpt_held *held = calloc((size_t)world * CKPT_VERSIONS, sizeof *held);
    if (!all || !held) {
        free(all);
        free(held);
        return GPT_ERR_OOM;
    }
    for (int v = 0; v < CKPT_VERSIONS; v++)
        mine[2 * v] = ckpt_file_header(&st->ckpt, st->p.rank, v, st->identity, floats, st->chunk, &mine[2 * v + 1]);
    for (int attempt = 0; !rc && attempt < CKPT_VERSIONS; attempt++) {
        *best = -1;
        if ((rc = coll_host_all_gather(st->comm, all, mine, sizeof mine))) break;
        /* (rank r's file holds versions r CKPT_VERSIONS .. of its own shard) */
        int newest, missing;
        for (int i = 0; i < world * CKPT_VERSIONS; i++) held[i] = (ckpt_held){i / CKPT_VERSIONS, all[2 * i]};
        *best = ckpt_newest_whole(held, world * CKPT_VERSIONS, world, &newest, &missing);
        for (int i = 0; *best >= 0 && i < world * CKPT_VERSIONS; i++)
            if (all[2 * i] == *best) {
                *best_step = all[2 * i + 1];
                break;
            }
        if (*best < 0) break;
        int v = 0, step = 0;
        while (v + 1 < CKPT_VERSIONS && mine[2 * v] != *best) v++;
        const int ok = ckpt_file_read(&st->ckpt, st->p.rank, v, st->identity, buf, floats, st->chunk, &step) == *best;
        if (!ok) mine[2 * v] = -1;
        double oks = ok; /* (how many ranks read it whole) */
        if ((rc = coll_host_sum_doubles(st->comm, &oks, 1)) || oks == world) break;
        *best = -1; /* (a rank's copy of it was damaged: the next newest) */
    }
    free(all);
    free(held);
    if (rc || *best < 0) return rc;
    gpt_stream *cs = coll_stream(st->comm);
    size_t at = 0;
    state_piece pc;
    while (!rc && next_piece(st, &at, &pc))
        rc = gpt_memcpy_h2d(cs, state_at(&st->shard, pc.at), buf + pc.at, pc.len * sizeof(float));
    return rc ? rc : gpt_stream_sync(cs);
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
    const int world = p->world, per = p->m * CKPT_VERSIONS;
    const double t0 = wall_ms();
    held_version *mine = calloc((size_t)per, sizeof *mine);
    held_version *all = calloc((size_t)per * (size_t)world, sizeof *all);
    ckpt_held *held = calloc((size_t)per * (size_t)world, sizeof *held);
    int rc = (!mine || !all || !held) ? GPT_ERR_OOM : GPT_OK;
    for (int s = 0; !rc && s < p->m; s++)
        for (int v = 0; v < CKPT_VERSIONS; v++) {
            held_version *h = &mine[s * CKPT_VERSIONS + v];
            h->owner = p->owners[s];
            h->iteration = ckpt_store_valid(st->store, s, v, &h->adam_step);
        }
    const double t_valid = wall_ms();
    if (!rc) rc = coll_host_all_gather(st->comm, all, mine, (size_t)per * sizeof *mine);
    const double t_agreed = wall_ms();
    /* the newest iteration every owner's shard has somewhere */
    int best = -1, best_step = 0;
    if (!rc) {
        int newest, missing;
        for (int i = 0; i < per * world; i++) held[i] = (ckpt_held){all[i].owner, all[i].iteration};
        best = ckpt_newest_whole(held, per * world, world, &newest, &missing);
        for (int i = 0; best >= 0 && i < per * world; i++)
            if (all[i].iteration == best) {
                best_step = all[i].adam_step;
                break;
            }
    }
    int from_disk = 0;
    if (!rc && best < 0 && st->env.cfg->ckpt_dir[0]) {
        rc = restore_persistent(st, &best, &best_step);
        from_disk = best >= 0;
    }
    if (!rc && best < 0) {
        /* (every rank knows it; rank 0 says it on stderr, every rank into its record) */
        char whyn[400];
        snprintf(whyn, sizeof whyn, "gemini: job %s: no checkpoint version that every rank's shard has (every "
                 "holder of some shard was lost)%s; nothing to recover", st->job,
                 st->env.cfg->ckpt_dir[0] ? ", in memory or under --ckpt-dir" : " and no --ckpt-dir");
        if (p->rank == 0) rc = engine_fail(&st->env, GPT_ERR_INVALID, "%s", whyn);
        else if (st->env.why && st->env.why_len && !st->env.why[0])
            snprintf(st->env.why, st->env.why_len, "%s", whyn), rc = GPT_ERR_INVALID;
        else rc = GPT_ERR_INVALID;
    }
    gpt_stream *cs = rc ? NULL : coll_stream(st->comm);
    for (int o = 0; !rc && !from_disk && o < world; o++) {
        /* o's own copy if it is valid, else the lowest rank that holds one */
        int holder = -1, hslot = -1, hversion = -1;
        for (int r = 0; r < world && holder != o; r++)
            for (int i = 0; i < per; i++) {
                const held_version *h = &all[(size_t)r * per + i];
                if (h->owner == o && h->iteration == best && (holder < 0 || r == o)) {
                    holder = r, hslot = i / CKPT_VERSIONS, hversion = i % CKPT_VERSIONS;
                    break;
                }
            }
        if (holder == o && o == p->rank) {
            /* (the next checkpoint writes the other version: this one is the newest whole) */
            st->last_version = hversion;
            const float *src = ckpt_store_data(st->store, hslot, hversion);
            size_t at = 0;
            state_piece pc;
            while (!rc && next_piece(st, &at, &pc))
                rc = gpt_memcpy_h2d(cs, state_at(&st->shard, pc.at), src + pc.at, pc.len * sizeof(float));
        } else if (holder != o && (holder == p->rank || o == p->rank)) {
            const float *src = holder == p->rank ? ckpt_store_data(st->store, hslot, hversion) : NULL;
            size_t at = 0;
            state_piece pc;
            for (int k = 0; !rc && next_piece(st, &at, &pc); k++) {
                const size_t bytes = pc.len * sizeof(float);
                if (holder == p->rank) {
                    /* up into staging chunk k mod 2 on the copy stream while the chunk before
                     * is sent: the fetch runs at the slower of the two links, not their sum */
                    const int b = k % 2;
                    if ((k >= 2 && (rc = gpt_stream_wait_event(st->d2h, st->ev_free[b]))) ||
                        (rc = gpt_memcpy_h2d(st->d2h, st->staging[b], src + pc.at, bytes)) ||
                        (rc = gpt_event_record(st->ev_recv[b], st->d2h)) || (rc = gpt_stream_wait_event(cs, st->ev_recv[b])) ||
                        (rc = coll_send(st->comm, st->staging[b], bytes, o)) || (rc = gpt_event_record(st->ev_free[b], cs)))
                        break;
                } else {
                    rc = coll_recv(st->comm, state_at(&st->shard, pc.at), bytes, holder);
                }
            }
        }
        /* (every rank knows every pair: rank 0, whose notes are logged, names them all) */
        if (!rc && holder != o) st->resume.fetched_bytes += 3.0 * (double)st->shard.n * sizeof(float);
        if (!rc && holder != o)
            engine_note(&st->env, "gemini: rank %d's shard of iteration %d fetched from rank %d's copy "
                        "(%.1f MiB)", o, best, holder, 3.0 * (double)st->shard.n * sizeof(float) / 1048576.0);
    }
    if (!rc && cs) rc = gpt_stream_sync(cs);
    if (!rc) {
        /* where the time went: checking this rank's versions (its checksums), agreeing on the
         * version (waiting for the slowest rank's check), loading or fetching */
        const double mine_ms[3] = {t_valid - t0, t_agreed - t_valid, wall_ms() - t_agreed};
        enum { NOTED_RANKS = 8 }; /* (the log names the first few ranks' breakdowns) */
        double every[64 * 3];
        if (world <= 64 && !(rc = coll_host_all_gather(st->comm, every, mine_ms, sizeof mine_ms)))
            for (int r = 0; r < world && r < NOTED_RANKS; r++)
                engine_note(&st->env, "gemini: recovery on rank %d: its versions checked in %.1f ms, the version "
                            "agreed in %.1f ms, the state loaded or fetched in %.1f ms", r, every[3 * r],
                            every[3 * r + 1], every[3 * r + 2]);
    }
    if (!rc) {
        *st->shard.adam_step = best_step;
        st->resume.iteration = best;
        st->resume.ms = wall_ms() - t0;
        st->resume.from_disk = from_disk;
        engine_note(&st->env, "gemini: job %s recovered at iteration %d (Adam step %d)%s in %.1f ms; "
                    "training goes on from iteration %d", st->job, best, best_step,
                    from_disk ? " from its persistent checkpoint (every in-memory copy of some shard was lost)" : "",
                    wall_ms() - t0, best + 1);
    }
    free(mine);
    free(all);
    free(held);
    return rc;
}

/* Rank 0 names the stores of other jobs of this user under dir: a killed supervisor (or a
 * job started by hand that was killed) leaves its store behind; the ids aebench makes carry
 * the pid of the process that made them, so a store whose process is gone is named stale. */
static void name_stale_stores(const gemini_state *st, const char *dir)
{
    char prefix[64];
    snprintf(prefix, sizeof prefix, "aebench-gemini-%u-", (unsigned)getuid());
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, prefix, strlen(prefix)) != 0) continue;
        const char *job = e->d_name + strlen(prefix);
        if (strcmp(job, st->job) == 0) continue;
        /* (stale: no rank holds its lock; a store not private to us is not ours to name) */
        char path[PRIVATE_DIR_PATH];
        long holder = 0;
        if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path ||
            ckpt_dir_in_use(path, &holder) != 0)
            continue;
        engine_note(&st->env, "gemini: the stale store of job %s is in %s (no process holds its locks); remove it "
                    "with: rm -rf %s", job, path, path);
    }
    closedir(d);
}

/* interleave's hooks inside megatron-lm's step (below) */
static int hook_before_collective(void *ctx, gpt_stream *cs);
static int hook_after_collective(void *ctx, gpt_stream *cs);
static int hook_before_optimizer(void *ctx, gpt_stream *compute);

/* ---- init ----------------------------------------------------------------------------------- */

/* The raw chunk sums of the words of [master | m | v] that no update writes (the padding of
 * the blocks' shards, always zero), on the host once, up to the row of dev_sums the
 * optimizer's sums start from (megatron_arm_sums). */
static int padding_sums(gemini_state *st)
{
    const size_t n = st->shard.n, chunk = ckpt_store_chunk_floats(st->store);
    const size_t nchunks = (size_t)ckpt_store_nchunks(st->store);
    const size_t nranges = megatron_shard_padding(st->mega, NULL, 0);
    size_t *ranges = malloc((2 * nranges + 1) * sizeof *ranges);
    uint64_t *sums = calloc(nchunks, sizeof *sums);
    int rc = ranges && sums ? GPT_OK : GPT_ERR_OOM;
    if (!rc) {
        megatron_shard_padding(st->mega, ranges, nranges);
        for (size_t r = 0; r < nranges; r++)
            for (int a = 0; a < 3; a++)
                for (size_t w = a * n + ranges[2 * r]; w < a * n + ranges[2 * r + 1]; w++)
                    sums[w / chunk] += gpt_checksum_term(0, w % chunk);
        st->sums_init = st->dev_sums + ((size_t)st->p.m) * nchunks;
        gpt_stream *s = st->shard.compute;
        if (!(rc = gpt_memcpy_h2d(s, st->sums_init, sums, nchunks * sizeof *sums))) rc = gpt_stream_sync(s);
    }
    free(ranges);
    free(sums);
    return rc;
}

/* --gemini-transport: this rank's three arrays as windows its peers read (all ranks decide
 * together, coll_window_open), or none: the chunks are sent.  auto reads where it can. */
static int open_windows(gemini_state *st)
{
    const engine_config *cfg = st->env.cfg;
    if (st->p.m < 2 || cfg->gemini_mode == GEMINI_NONE) return GPT_OK;
    /* (the tokens whatever the transport: the plan cannot know what auto finds) */
    int rc = engine_alloc(&st->mem, MEM_GPU, (void **)&st->dev_tokens, GEMINI_MAX_REPLICAS * sizeof(uint64_t),
                          "gemini tokens");
    if (rc || cfg->gemini_transport == GEMINI_PEER_SENDRECV) return rc;
    /* Between machines a peer's arrays are not in reach (CUDA IPC is one machine's): sent.
     * (Every rank decides alike: the machines are every rank's.) */
    if (cfg->hosts > 1) { /* (read is refused there: gemini_check) */
        engine_note(&st->env, "gemini: the peers' chunks are sent (NCCL / MPI send-recv): the ranks are on %d machines",
                    cfg->hosts);
        return GPT_OK;
    }
    float *arrays[3] = {st->shard.master, st->shard.adam_m, st->shard.adam_v};
    char why[256] = "";
    int all = 1;
    for (int a = 0; a < 3 && all; a++) {
        rc = coll_window_open(&st->window[a], st->comm, arrays[a], st->shard.n * sizeof(float), why, sizeof why);
        if (rc) return rc;
        all = st->window[a] != NULL;
    }
    if (!all) { /* (every rank got the same answers: all three arrays read, or none) */
        for (int a = 0; a < 3; a++) {
            coll_window_close(st->window[a]);
            st->window[a] = NULL;
        }
        if (cfg->gemini_transport == GEMINI_PEER_READ) {
            return engine_fail(&st->env, GPT_ERR_INVALID, "--gemini-transport read: %s; use sendrecv (or auto)", why);
        }
        engine_note(&st->env, "gemini: the peers' chunks are sent (NCCL / MPI send-recv): %s", why);
        return GPT_OK;
    }
    engine_note(&st->env, "gemini: the peers' chunks are read by the keeping rank's copy engines (%s)",
                coll_window_kind(st->window[0]));
    return GPT_OK;
}

/* The log's line on where the copies are: by machine, or by rank (and whether a copy shares
 * its owner's machine, where a lost machine takes both). */
static void note_placement(const gemini_state *st)
{
    const engine_config *cfg = st->env.cfg;
    const gemini_placement *p = &st->p;
    const char *how = cfg->gemini_placement == GEMINI_RING ? "ring" : "group";
    if (p->m < 2) return;
    if (p->across) {
        engine_note(&st->env, "gemini --gemini-placement %s by machine (%d machines of %d ranks): every shard's %d "
                    "peer cop%s on other machines (rank %d's on rank %d, machine %d)", how, cfg->hosts,
                    engine_world(cfg) / cfg->hosts, p->m - 1, p->m == 2 ? "y" : "ies", p->rank, p->to[1],
                    cfg->rank_host[p->to[1]]);
        return;
    }
    int same = 0; /* (this rank's copies that share its machine) */
    for (int d = 1; d < p->m && cfg->rank_host; d++) same += cfg->rank_host[p->to[d]] == cfg->rank_host[p->rank];
    if (cfg->hosts > 1)
        engine_note(&st->env, "gemini --gemini-placement %s by rank: %d machines cannot hold %d copies of each shard "
                    "apart (ring: at most one per machine; group: machines in groups of %d), so %s",
                    how, cfg->hosts, p->m, p->m, same ? "some copies share their owner's machine: losing it loses both" :
                                                        "the copies are placed by rank");
}

static int gemini_init(const engine_env *env, void **state)
{
    *state = NULL;
    gemini_state *st = calloc(1, sizeof *st);
    if (!st) return GPT_ERR_OOM;
    *state = st;
    private_dir_init(&st->ckpt);
    st->env = *env;
    st->mcfg = megatron_config(env->cfg);
    st->menv = *env;
    st->menv.cfg = &st->mcfg;
    st->p = placement_of(env->cfg, env->rank);
    note_placement(st);
    st->every = env->cfg->gemini_every > 1 ? env->cfg->gemini_every : 1;
    st->next_due = env->cfg->gemini_ckpt_from > 1 ? env->cfg->gemini_ckpt_from : 1;
    st->last_version = CKPT_VERSIONS - 1; /* (the first checkpoint writes version 0) */
    engine_allocs_init(&st->mem, env->gpu, env->host, env->be);
    /* The store's bytes first (the memory file system is RAM): with megatron-lm's peak, which
     * comes during its init, that makes this run's peak its plan. */
    const int checkpoints = env->cfg->gemini_mode != GEMINI_NONE || env->cfg->gemini_recover ||
                            env->cfg->ckpt_dir[0];
    const size_t floats = state_floats(env->cfg);
    st->chunk = chunk_floats_of(floats / 3);
    if (checkpoints) {
        const size_t store_bytes = ckpt_store_bytes(st->p.m, floats);
        if (mem_budget_take(env->host, store_bytes, "gemini checkpoint store")) return GPT_ERR_OOM;
        st->store_bytes = store_bytes;
    }
    int rc = engine_megatron_lm.init(&st->menv, &st->mega);
    if (rc) return rc;
    if ((rc = megatron_shard_state_of(st->mega, &st->shard))) return rc;
    /* The checkpoint's sendrecvs run beside the training's kernels, and NCCL's default takes
     * many SMs for them: 4 thread blocks carry a chunk faster than the PCIe copy that follows
     * it, and cost the training less (bench/results/2026-11-24-h200x2-gemini: 1.123-1.138x of
     * the step without checkpoints against 1.144-1.156x; bench/results/2026-11-25-h100x2-gemini/ab
     * call 5: 1 block too few, 2 and 8 within the noise of 4).  The plan fills 90% of each idle span and
     * --gemini-every auto lets a checkpoint expose 1% of the step, unless the config says
     * otherwise (engine_config: gemini_fill, gemini_every_share). */
    const int nccl_ctas = 4;
    const double fill = env->cfg->gemini_fill, share = env->cfg->gemini_every_share;
    st->fill = fill > 0 && fill <= 1 ? fill : 0.9;
    st->every_share = share > 0 && share <= 1 ? share : 0.01;
    if ((rc = coll_open_capped(&st->comm, env->be, env->rank, env->world, nccl_ctas))) return rc;
    if (coll_watch(st->comm, env->dog, "checkpoint")) return GPT_ERR_INVALID;

    /* The job's id: given, or rank 0's (pid and time), the same on every rank. */
    char id[64] = "";
    if (env->cfg->gemini_job[0]) snprintf(id, sizeof id, "%s", env->cfg->gemini_job);
    else ckpt_job_id(id, sizeof id, 'p');
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
    if ((rc = env->be->ops->stream_create(env->be, &st->d2h)) ||
        (rc = env->be->ops->stream_create(env->be, &st->own_d2h)) ||
        (rc = env->be->ops->stream_create(env->be, &st->verify)) || (rc = gpt_event_create(env->be, &st->ev_copied)) ||
        (rc = gpt_event_create(env->be, &st->ev_verified[0])) || (rc = gpt_event_create(env->be, &st->ev_verified[1])) ||
        (rc = gpt_event_create(env->be, &st->ev_step)) ||
        (rc = gpt_event_create(env->be, &st->ev_opt)) || (rc = gpt_event_create(env->be, &st->ev_ck_start)) ||
        (rc = gpt_event_create(env->be, &st->ev_ck_done)) || (rc = gpt_event_create(env->be, &st->ev_d2h_done)) ||
        (rc = gpt_event_create(env->be, &st->ev_own_start)) || (rc = gpt_event_create(env->be, &st->ev_own_done)))
        return rc;
    if (env->cfg->gemini_mode == GEMINI_INTERLEAVE) {
        megatron_hooks h = {.ctx = st, .before_collective = hook_before_collective,
                            .after_collective = hook_after_collective,
                            .before_optimizer = hook_before_optimizer};
        megatron_set_hooks(st->mega, &h);
    }
    for (int i = 0; i < 2; i++)
        if ((rc = gpt_event_create(env->be, &st->ev_recv[i])) || (rc = gpt_event_create(env->be, &st->ev_free[i])))
            return rc;
    st->identity = identity_of(env->cfg, &st->p, floats);
    char why[1200];
    if ((rc = ckpt_store_open(&st->store, env->be, env->cfg->gemini_store, st->job, env->rank, st->p.m,
                              st->p.owners, floats, st->chunk, st->identity, env->cfg->gemini_recover, why,
                              sizeof why)))
        return engine_fail(env, rc == GPT_ERR_IO ? GPT_ERR_INVALID : rc, "%s", why);
    if (env->cfg->ckpt_dir[0] && ckpt_dir_open(&st->ckpt, env->cfg->ckpt_dir, st->job, env->rank, why, sizeof why))
        return engine_fail(env, GPT_ERR_INVALID, "--ckpt-dir: %s", why);
    /* the chunk checksums on the GPU, and the event that says this rank's are ready */
    const size_t nchunks = (size_t)ckpt_store_nchunks(st->store);
    if ((rc = engine_alloc(&st->mem, MEM_GPU, (void **)&st->dev_sums,
                           ((size_t)st->p.m + 2) * nchunks * sizeof(uint64_t), "gemini checksums")) ||
        (rc = gpt_event_create(env->be, &st->ev_sums)) || (rc = gpt_event_create(env->be, &st->ev_ready)) ||
        (rc = open_windows(st)) || (rc = padding_sums(st)))
        return rc;
    char where[1100];
    ckpt_store_dir(where, sizeof where, env->cfg->gemini_store, st->job);
    if (env->rank == 0) name_stale_stores(st, env->cfg->gemini_store);
    char every[96];
    if (env->cfg->gemini_every < 0)
        snprintf(every, sizeof every, "an interval chosen once interleave has measured the step");
    else if (st->every > 1)
        snprintf(every, sizeof every, "a checkpoint every %d iterations (a failure loses about %.1f)", st->every,
                 gemini_lost_iterations(st->every, env->cfg->gemini_mode));
    else
        snprintf(every, sizeof every, "a checkpoint every iteration");
    engine_note(env, "gemini: job %s, %s (%s), %d cop%s of each shard (%s), "
                "store %s (%.1f MiB per rank)", st->job, every,
                env->cfg->gemini_mode == GEMINI_NAIVE        ? "naive: after the step"
                : env->cfg->gemini_mode == GEMINI_INTERLEAVE ? "interleave: in the next step's idle spans"
                                                             : "none: recovery only",
                st->p.m, st->p.m == 1 ? "y" : "ies",
                env->cfg->gemini_placement == GEMINI_RING ? "ring" : "group", where,
                (double)ckpt_store_bytes(st->p.m, floats) / 1048576.0);
    if (env->cfg->gemini_recover && (rc = restore(st))) return rc;
    return GPT_OK;
}

static void gemini_chosen_plan(void *state, engine_plan *out)
{
    gemini_plan(((gemini_state *)state)->env.cfg, out);
}

static int gemini_resumed(void *state, engine_resume *out)
{
    *out = ((gemini_state *)state)->resume;
    return out->iteration;
}

static int gemini_step_memory(void *state, int iteration, const int32_t *tokens, const int32_t *targets,
                              step_result *out);

/* ---- one step ---------------------------------------------------------------------------- */

/* This rank's arrays into its own slot's version v, on stream s (after what it waits for). */
static int copy_own_home(gemini_state *st, int v, gpt_stream *s)
{
    float *mine = ckpt_store_data(st->store, 0, v);
    size_t at = 0;
    state_piece pc;
    int rc;
    while (next_piece(st, &at, &pc))
        if ((rc = gpt_memcpy_d2h(s, mine + pc.at, state_at(&st->shard, pc.at), pc.len * sizeof(float))))
            return rc;
    return GPT_OK;
}

/* The chunk checksums of this rank's state [master | m | v] by a pass over it on s, into sums. */
static void sums_pass(gemini_state *st, gpt_stream *s, uint64_t *sums)
{
    const gpt_float_span parts[3] = {{st->shard.master, st->shard.n}, {st->shard.adam_m, st->shard.n},
                                     {st->shard.adam_v, st->shard.n}};
    gpt_checksum_chunks(s, sums, parts, 3, ckpt_store_chunk_floats(st->store));
}

/* This rank's chunk checksums of iteration it's state into dev_sums' row 0, ready on
 * own_d2h (which waits for the step): the ones the optimizer summed as it wrote the state
 * (megatron_arm_sums), or a pass over the arrays of their own (a step whose update was
 * skipped, or the optimizer's sums were found wrong).  The first time the optimizer's are
 * used they are checked against a pass, the host waiting (once, in the first checkpoint). */
static int own_sums(gemini_state *st, int it)
{
    const size_t nchunks = (size_t)ckpt_store_nchunks(st->store);
    const int fused = st->fused_it == it && !st->fused_off;
    st->fused_it = 0;
    if (!fused) {
        sums_pass(st, st->own_d2h, st->dev_sums);
        return GPT_OK;
    }
    if (st->fused_checked) return GPT_OK;
    uint64_t *check = st->dev_sums + ((size_t)st->p.m + 1) * nchunks;
    sums_pass(st, st->own_d2h, check);
    uint64_t *host = malloc(2 * nchunks * sizeof *host);
    if (!host) return GPT_ERR_OOM;
    int rc;
    /* (every rank checks at the same checkpoint: a skipped step is every rank's, so the
     * ranks agree here, and each one's verdict is counted for the log, which rank 0 writes) */
    double differ = 0;
    if (!(rc = gpt_memcpy_d2h(st->own_d2h, host, st->dev_sums, nchunks * sizeof *host)) &&
        !(rc = gpt_memcpy_d2h(st->own_d2h, host + nchunks, check, nchunks * sizeof *host)) &&
        !(rc = gpt_stream_sync(st->own_d2h))) {
        differ = memcmp(host, host + nchunks, nchunks * sizeof *host) != 0;
        rc = coll_host_sum_doubles(st->comm, &differ, 1);
    }
    free(host);
    if (rc) return rc;
    st->fused_checked = 1;
    if (differ == 0) {
        engine_note(&st->env, "gemini: the checkpoint checksums ride on the optimizer (summed as it writes the "
                    "state, no pass of their own): equal to a pass on every rank at the first checkpoint");
        return GPT_OK;
    }
    st->fused_off = 1;
    engine_note(&st->env, "gemini: the optimizer's checksums differ from a pass over the state on %.0f rank%s at the "
                "first checkpoint: a pass of their own from now on", differ, differ == 1 ? "" : "s");
    return gpt_memcpy_d2d(st->own_d2h, st->dev_sums, check, nchunks * sizeof(uint64_t));
}

/* Begin the checkpoint of iteration it (into version it mod 2 of every slot): after what
 * compute has issued (that iteration's optimizer), this rank's arrays go home on d2h, and
 * the peers' rounds are set up for ckpt_chunks. */
static int ckpt_begin(gemini_state *st, int it, step_result *out)
{
    const int v = (st->last_version + 1) % CKPT_VERSIONS, step = *st->shard.adam_step;
    st->last_version = v;
    gpt_stream *cs = coll_stream(st->comm);
    int rc;
    /* the version before must be marked complete before version v is marked "writing":
     * otherwise a failure in between finds neither version valid (seen on a busy 2-core
     * machine, where the verify stream's host task trailed the copies it follows).  The
     * verify stream runs in order, so this also covers version v's own last marks; the host
     * waits only if the marking falls behind the copies, which the step before waited for */
    if ((rc = gpt_event_sync(st->ev_verified[(v + CKPT_VERSIONS - 1) % CKPT_VERSIONS]))) return rc;
    if ((rc = gpt_event_record(st->ev_step, st->shard.compute)) || (rc = gpt_stream_wait_event(cs, st->ev_step)) ||
        (rc = gpt_stream_wait_event(st->d2h, st->ev_step)) || (rc = gpt_stream_wait_event(st->own_d2h, st->ev_step)))
        return rc;
    for (int d = 0; d < st->p.m; d++) ckpt_store_begin(st->store, d, v, it, step);
    /* this rank's chunk checksums, on the GPU (the optimizer's, or a pass at memory speed
     * there: own_sums), go home with the data and to the peers with its last piece
     * (ckpt_chunks) */
    if ((rc = own_sums(st, it))) return rc;
    if ((rc = gpt_event_record(st->ev_sums, st->own_d2h)) ||
        (rc = gpt_event_record(st->ev_own_start, st->own_d2h)) || (rc = copy_own_home(st, v, st->own_d2h)) ||
        (rc = gpt_memcpy_d2h(st->own_d2h, ckpt_store_sums(st->store, 0, v), st->dev_sums,
                             (size_t)ckpt_store_nchunks(st->store) * sizeof(uint64_t))) ||
        (rc = gpt_event_record(st->ev_own_done, st->own_d2h)) || (rc = complete_slot(st, 0, v, st->own_d2h)))
        return rc;
    out->ckpt_bytes += 3.0 * (double)st->shard.n * sizeof(float);
    if (st->window[0]) {
        /* read: this rank's arrays are the step's and its checksums computed, so its peers
         * may read them; the checksums go each round's way as the token that says so (from_d's
         * into row d, then home), and this rank reads from_d's arrays only after it */
        const int nchunks = ckpt_store_nchunks(st->store);
        const size_t sum_bytes = (size_t)nchunks * sizeof(uint64_t);
        if ((rc = gpt_stream_wait_event(cs, st->ev_sums))) return rc;
        for (int a = 0; a < 3; a++)
            if ((rc = coll_window_expose(st->window[a], cs))) return rc;
        for (int d = 1; d < st->p.m; d++)
            if ((rc = coll_sendrecv(st->comm, st->dev_sums, st->p.to[d], st->dev_sums + (size_t)d * nchunks,
                                    st->p.from[d], sum_bytes)))
                return rc;
        if ((rc = gpt_event_record(st->ev_ready, cs)) || (rc = gpt_stream_wait_event(st->d2h, st->ev_ready)))
            return rc;
        for (int d = 1; d < st->p.m; d++)
            if ((rc = gpt_memcpy_d2h(st->d2h, ckpt_store_sums(st->store, d, v), st->dev_sums + (size_t)d * nchunks,
                                     sum_bytes)))
                return rc;
        st->reading = 1;
    }
    st->version = v;
    st->round = 1;
    st->round_at = 0;
    st->chunk_no = 0;
    return GPT_OK;
}

/* Pieces smaller than this are not cut to fit a span (NCCL's per-call cost would dominate). */
enum { GEMINI_MIN_PIECE_FLOATS = 256 * 1024 };

/* Issue up to `budget` floats (SIZE_MAX: all) of the begun checkpoint's remaining transfer on
 * the ckpt-comm stream, in pieces of at most a staging chunk (and their copies home on d2h);
 * a round's last piece is followed by its slot's verification.  The pieces follow from the
 * budgets alone, which every rank shares (rank 0's plan), so each sendrecv meets its peers'
 * whenever each rank issues it. */
static int ckpt_chunks(gemini_state *st, size_t budget, step_result *out)
{
    const gemini_placement *p = &st->p;
    gpt_stream *cs = coll_stream(st->comm);
    int rc;
    while (st->round < p->m && budget > 0) {
        const int d = st->round;
        if (st->round_at >= 3 * st->shard.n && st->window[0]) {
            /* read: the round's shard is all read (its checksums came first, ckpt_begin) */
            if ((rc = complete_slot(st, d, st->version, st->d2h))) return rc;
            st->round++;
            st->round_at = 0;
            continue;
        }
        if (st->round_at >= 3 * st->shard.n) {
            /* the round's shard is all sent: its checksums follow it (this rank's, computed in
             * ckpt_begin, to to_d; from_d's into its row of dev_sums, then home) */
            const size_t sum_bytes = (size_t)ckpt_store_nchunks(st->store) * sizeof(uint64_t);
            uint64_t *theirs_sums = st->dev_sums + (size_t)d * ckpt_store_nchunks(st->store);
            if ((rc = gpt_stream_wait_event(cs, st->ev_sums)) ||
                (rc = coll_sendrecv(st->comm, st->dev_sums, p->to[d], theirs_sums, p->from[d], sum_bytes)) ||
                (rc = gpt_event_record(st->ev_recv[0], cs)) || (rc = gpt_stream_wait_event(st->d2h, st->ev_recv[0])) ||
                (rc = gpt_memcpy_d2h(st->d2h, ckpt_store_sums(st->store, d, st->version), theirs_sums, sum_bytes)) ||
                (rc = complete_slot(st, d, st->version, st->d2h)))
                return rc;
            st->round++;
            st->round_at = 0;
            continue;
        }
        /* (a piece is not cut below the minimum unless the array ends there) */
        state_piece pc = {0, 0};
        size_t probe_at = st->round_at;
        if (!next_piece(st, &probe_at, &pc)) continue; /* (not reached: round_at < the end) */
        if (budget < pc.len && budget < GEMINI_MIN_PIECE_FLOATS) break;
        if (!next_piece_max(st, &st->round_at, budget, &pc)) break;
        const int b = st->chunk_no % 2;
        const size_t bytes = pc.len * sizeof(float);
        float *theirs = ckpt_store_data(st->store, d, st->version);
        const size_t array = pc.at / st->shard.n;
        if ((st->chunk_no >= 2 && (rc = gpt_stream_wait_event(cs, st->ev_free[b]))) ||
            (rc = st->window[0] ? coll_window_get(st->window[array], cs, st->staging[b], p->from[d],
                                                  (pc.at - array * st->shard.n) * sizeof(float), bytes)
                                : coll_sendrecv(st->comm, state_at(&st->shard, pc.at), p->to[d], st->staging[b],
                                                p->from[d], bytes)) ||
            (rc = gpt_event_record(st->ev_recv[b], cs)) || (rc = gpt_stream_wait_event(st->d2h, st->ev_recv[b])) ||
            (rc = gpt_memcpy_d2h(st->d2h, theirs + pc.at, st->staging[b], bytes)) ||
            (rc = gpt_event_record(st->ev_free[b], st->d2h)))
            return rc;
        out->ckpt_bytes += (double)bytes;
        st->chunk_no++;
        if (budget != SIZE_MAX) budget -= pc.len;
    }
    return GPT_OK;
}

/* read: after this rank's last read of the checkpoint (on the stream), a token to each peer
 * it read from, and one from each peer that reads it: once in, no one reads its arrays any
 * more and the optimizer may change them.  Nothing in sendrecv mode (the sends were that). */
static int ckpt_release(gemini_state *st)
{
    if (!st->reading) return GPT_OK;
    st->reading = 0;
    int rc;
    for (int d = 1; d < st->p.m; d++)
        if ((rc = coll_sendrecv(st->comm, st->dev_tokens, st->p.from[d], st->dev_tokens + d, st->p.to[d],
                                sizeof(uint64_t))))
            return rc;
    return GPT_OK;
}

/* Floats a whole checkpoint sends (every round). */
static size_t floats_total(const gemini_state *st) { return 3 * st->shard.n * (size_t)(st->p.m - 1); }

/* --- interleave: the hooks inside megatron-lm's step ---------------------------------------- */

static int grow_events(gemini_state *st)
{
    if (st->ncoll < st->cap) return GPT_OK;
    const int cap = st->cap ? 2 * st->cap : 64;
    gpt_event **a = realloc(st->ev_cstart, (size_t)cap * sizeof *a);
    if (!a) return GPT_ERR_OOM;
    st->ev_cstart = a;
    gpt_event **b = realloc(st->ev_cend, (size_t)cap * sizeof *b);
    if (!b) return GPT_ERR_OOM;
    st->ev_cend = b;
    size_t *c = realloc(st->floats_after, (size_t)cap * sizeof *c);
    if (!c) return GPT_ERR_OOM;
    st->floats_after = c;
    for (int i = st->cap; i < cap; i++) {
        st->ev_cstart[i] = st->ev_cend[i] = NULL;
        st->floats_after[i] = 0;
        int rc;
        if ((rc = gpt_event_create(st->env.be, &st->ev_cstart[i])) || (rc = gpt_event_create(st->env.be, &st->ev_cend[i])))
            return rc;
    }
    st->cap = cap;
    return GPT_OK;
}

static int hook_before_collective(void *ctx, gpt_stream *cs)
{
    gemini_state *st = ctx;
    int rc = grow_events(st);
    return rc ? rc : gpt_event_record(st->ev_cstart[st->ncoll], cs);
}

/* After training collective j: its end is marked; in an interleaved step, the chunks the
 * plan puts into the idle span after it are issued behind it. */
static int hook_after_collective(void *ctx, gpt_stream *cs)
{
    gemini_state *st = ctx;
    const int j = st->ncoll++;
    int rc = gpt_event_record(st->ev_cend[j], cs);
    if (rc || !st->interleaving || !st->planned || j >= st->plan_len || st->floats_after[j] == 0) return rc;
    gpt_stream *ck = coll_stream(st->comm);
    if ((rc = gpt_stream_wait_event(ck, st->ev_cend[j]))) return rc;
    return ckpt_chunks(st, st->floats_after[j], st->out);
}

/* Before the optimizer overwrites the arrays: what is left of the checkpoint is issued, and
 * compute waits for all of it (that wait is the exposed part). */
static int hook_before_optimizer(void *ctx, gpt_stream *compute)
{
    gemini_state *st = ctx;
    int rc;
    if ((rc = gpt_event_record(st->ev_opt, compute))) return rc;
    if (!st->interleaving) return GPT_OK;
    if ((rc = ckpt_chunks(st, SIZE_MAX, st->out)) || (rc = ckpt_release(st))) return rc;
    /* --fail-phase checkpoint: with the carried checkpoint's copies in flight */
    if (st->pending) engine_fault_point(&st->env, st->iteration, FAULT_CHECKPOINT);
    if ((rc = gpt_event_record(st->ev_ck_done, coll_stream(st->comm))) ||
        (rc = gpt_event_record(st->ev_d2h_done, st->d2h)) || (rc = gpt_stream_wait_event(compute, st->ev_ck_done)) ||
        (rc = gpt_stream_wait_event(compute, st->ev_d2h_done)) || (rc = gpt_stream_wait_event(compute, st->ev_own_done)))
        return rc;
    return GPT_OK;
}

/* After a warm-up step (all synchronised): the idle spans of the training's collectives
 * (both its streams idle) between the first collective's start and the optimizer, each
 * after the collective whose end opens it; kept if it is the step's first measurement or
 * shorter than before (the plan must fit the tightest). */
static int measure_idle(gemini_state *st)
{
    const int n = st->ncoll;
    if (n == 0) return GPT_OK;
    float *s0 = malloc((size_t)n * sizeof *s0), *e0 = malloc((size_t)n * sizeof *e0);
    int *order = malloc((size_t)n * sizeof *order);
    int rc = (!s0 || !e0 || !order) ? GPT_ERR_OOM : GPT_OK;
    float opt = 0;
    for (int j = 0; !rc && j < n; j++) {
        if ((rc = gpt_event_elapsed_ms(&s0[j], st->ev_cstart[0], st->ev_cstart[j])) ||
            (rc = gpt_event_elapsed_ms(&e0[j], st->ev_cstart[0], st->ev_cend[j])))
            break;
        order[j] = j;
    }
    if (!rc) rc = gpt_event_elapsed_ms(&opt, st->ev_cstart[0], st->ev_opt);
    if (!rc) {
        /* by start time (insertion sort: a step has some hundreds of collectives) */
        for (int i = 1; i < n; i++)
            for (int k = i; k > 0 && s0[order[k]] < s0[order[k - 1]]; k--) {
                const int t = order[k];
                order[k] = order[k - 1];
                order[k - 1] = t;
            }
        double *gap = calloc((size_t)n, sizeof *gap);
        if (!gap) rc = GPT_ERR_OOM;
        float end = e0[order[0]];
        int last = order[0];
        double idle = 0;
        for (int i = 1; !rc && i < n; i++) {
            const int j = order[i];
            if (s0[j] > end) {
                gap[last] += s0[j] - end;
                idle += s0[j] - end;
            }
            if (e0[j] > end) end = e0[j], last = j;
        }
        if (!rc && opt > end) {
            gap[last] += opt - end;
            idle += opt - end;
        }
        if (!rc) {
            if (!st->gap_ms || st->plan_len != n) {
                free(st->gap_ms);
                st->gap_ms = gap;
                st->plan_len = n;
            } else {
                for (int j = 0; j < n; j++)
                    if (gap[j] < st->gap_ms[j]) st->gap_ms[j] = gap[j];
                free(gap);
            }
            st->idle_ms = idle;
        }
    }
    free(s0);
    free(e0);
    free(order);
    return rc;
}

/* --gemini-every auto (the Gemini paper's trade of checkpoint frequency against overhead):
 * what a checkpoint costs the step, from the plan (what goes before the optimizer at the
 * measured rate) and the copy home (what outlasts the training step), against the step's own
 * time measured in the warm-up; the interval is the fewest iterations that keep it under 1% of
 * the step, the largest any rank needs (every rank checkpoints the same iterations, or their
 * sends would not meet).  The log says what a failure then costs: with interleave a checkpoint
 * is complete one step after its iteration, so about K / 2 + 1 iterations of work. */
enum { GEMINI_AUTO_MAX_EVERY = 10000 };
static int choose_interval(gemini_state *st, double before_optimizer_ms, double copy_home_ms)
{
    const double step = st->step_wall_ms > 0 ? st->step_wall_ms : 1;
    const double home_over = copy_home_ms > step ? copy_home_ms - step : 0;
    const double exposed = before_optimizer_ms > home_over ? before_optimizer_ms : home_over;
    const double k = ceil(exposed / (st->every_share * step));
    int mine = k < 1 ? 1 : k > GEMINI_AUTO_MAX_EVERY ? GEMINI_AUTO_MAX_EVERY : (int)k;
    int *all = calloc((size_t)st->p.world, sizeof *all);
    if (!all) return GPT_ERR_OOM;
    int rc = coll_host_all_gather(st->comm, all, &mine, sizeof mine);
    int every = 1;
    for (int r = 0; !rc && r < st->p.world; r++)
        if (all[r] > every) every = all[r];
    free(all);
    if (rc) return rc;
    st->every = every;
    st->next_due = st->iteration + every;
    engine_note(&st->env, "gemini --gemini-every auto: a checkpoint exposes %.1f ms of a %.1f ms step (%.1f%%); "
                "a checkpoint every %d iteration%s keeps that under %g%% of the step; a failure then loses about "
                "%.1f iterations of work (%.1f s)", exposed, step, 100 * exposed / step, every, every == 1 ? "" : "s",
                100 * st->every_share,
                gemini_lost_iterations(every, GEMINI_INTERLEAVE), gemini_lost_iterations(every, GEMINI_INTERLEAVE) * step / 1e3);
    return GPT_OK;
}

/* The plan: each idle span takes what fits in 90% of it at the measured rate (at least a
 * minimum piece), in time order, until the checkpoint's transfer is all placed (the rest goes
 * before the optimizer, exposed).  Every rank takes rank 0's plan, so that their pieces are
 * the same and go in the same spans. */
static int make_plan(gemini_state *st)
{
    const size_t total = floats_total(st);
    const int n = st->plan_len;
    size_t left = total;
    int spans = 0;
    for (int j = 0; j < st->cap; j++) st->floats_after[j] = 0;
    for (int j = 0; j < n && left > 0; j++) {
        double fit = st->ms_per_float > 0 ? st->fill * st->gap_ms[j] / st->ms_per_float : (double)left;
        size_t f = fit >= (double)left ? left : (size_t)fit;
        if (f < GEMINI_MIN_PIECE_FLOATS && f < left) f = 0;
        st->floats_after[j] = f;
        left -= f;
        spans += f > 0;
    }
    size_t *all = calloc((size_t)st->p.world * (size_t)n, sizeof *all);
    if (!all) return GPT_ERR_OOM;
    int rc = coll_host_all_gather(st->comm, all, st->floats_after, (size_t)n * sizeof *all);
    if (!rc) memcpy(st->floats_after, all, (size_t)n * sizeof *all);
    free(all);
    if (rc) return rc;
    left = total;
    spans = 0;
    for (int j = 0; j < n; j++) {
        left -= st->floats_after[j] < left ? st->floats_after[j] : left;
        spans += st->floats_after[j] > 0;
    }
    st->planned = 1;
    const double mib = sizeof(float) / 1048576.0;
    engine_note(&st->env, "gemini interleave: %.1f ms of the step's collectives idle (%d collectives); the "
                "transfer runs at %.1f GB/s; %.1f of %.1f MiB placed in %d idle spans, %.1f MiB before the "
                "optimizer", st->idle_ms, n, st->ms_per_float > 0 ? sizeof(float) / st->ms_per_float / 1e6 : 0.0,
                (double)(total - left) * mib, (double)total * mib, spans, (double)left * mib);
    /* every byte of it (this rank's own and the peers' it keeps) crosses to the host: a bound
     * no interleaving goes below */
    const double d2h_floats = 3.0 * (double)st->shard.n * st->p.m;
    engine_note(&st->env, "gemini: each checkpoint copies %.2f GB device to host per rank at %.1f GB/s (measured): "
                "at least %.1f ms of copying per step, hidden only where the step is longer",
                d2h_floats * sizeof(float) / 1e9,
                st->ms_per_d2h_float > 0 ? sizeof(float) / st->ms_per_d2h_float / 1e6 : 0.0,
                d2h_floats * st->ms_per_d2h_float);
    return st->env.cfg->gemini_every < 0 ? choose_interval(st, (double)left * st->ms_per_float,
                                                           d2h_floats * st->ms_per_d2h_float) : GPT_OK;
}

/* --ckpt-dir, every --ckpt-every iterations, after the step (traditional checkpointing: the
 * training waits): this rank's state of iteration it, from its own slot of the store (taken
 * now unless the naive checkpoint just did), written to its file's version (it / K) mod 2. */
static int persist(gemini_state *st, int it, step_result *out)
{
    const engine_config *cfg = st->env.cfg;
    if (!cfg->ckpt_dir[0] || cfg->ckpt_every <= 0 || it % cfg->ckpt_every != 0) return GPT_OK;
    /* the naive checkpoint of this iteration is in the version it began; else this rank's
     * state goes into the version the next in-memory checkpoint will write (which rewrites it
     * with the same iteration's, or a later, state), so the newest whole one stays whole */
    const int taken = st->naive_it == it;
    const int v = taken ? st->last_version : (st->last_version + 1) % CKPT_VERSIONS, step = *st->shard.adam_step;
    const double t0 = wall_ms();
    int rc;
    if (!taken) {
        if ((rc = gpt_event_sync(st->ev_verified[v])) || (rc = gpt_event_record(st->ev_step, st->shard.compute)) ||
            (rc = gpt_stream_wait_event(st->d2h, st->ev_step)))
            return rc;
        ckpt_store_begin(st->store, 0, v, it, step);
        sums_pass(st, st->d2h, st->dev_sums);
        if ((rc = copy_own_home(st, v, st->d2h)) ||
            (rc = gpt_memcpy_d2h(st->d2h, ckpt_store_sums(st->store, 0, v), st->dev_sums,
                                 (size_t)ckpt_store_nchunks(st->store) * sizeof(uint64_t))) ||
            (rc = gpt_stream_sync(st->d2h)))
            return rc;
        ckpt_store_mark_complete(st->store, 0, v);
    }
    const int fv = (it / cfg->ckpt_every) % CKPT_VERSIONS;
    char why[1200];
    if ((rc = ckpt_file_write_why(&st->ckpt, st->p.rank, fv, st->identity, it, step, ckpt_store_data(st->store, 0, v),
                                  3 * st->shard.n, st->chunk, why, sizeof why))) {
        /* (the disk filled after gemini_check found room: another process took it.  Not out
         * of memory: a run error, said; what this rank made there goes, the lock file and the
         * directory with a file it could not fill, never what was there before) */
        private_dir_close_made(&st->ckpt);
        return engine_fail(&st->env, GPT_ERR_IO, "--ckpt-dir: %s", why);
    }
    const double ms = wall_ms() - t0;
    out->has_ckpt = 1;
    out->ckpt_bytes += 3.0 * (double)st->shard.n * sizeof(float);
    out->ckpt_ms += ms;
    out->ckpt_exposed_ms += ms;
    out->ms_optimizer += ms;
    return GPT_OK;
}

static int gemini_step(void *state, int iteration, const int32_t *tokens, const int32_t *targets,
                       step_result *out)
{
    int rc = gemini_step_memory(state, iteration, tokens, targets, out);
    return rc ? rc : persist(state, iteration, out);
}

static int gemini_step_memory(void *state, int iteration, const int32_t *tokens, const int32_t *targets,
                              step_result *out)
{
    gemini_state *st = state;
    const int mode = st->env.cfg->gemini_mode;
    /* none, and the steps before --gemini-ckpt-from: megatron-lm's step alone */
    if (mode == GEMINI_NONE || iteration < st->env.cfg->gemini_ckpt_from)
        return engine_megatron_lm.step(st->mega, iteration, tokens, targets, out);
    st->out = out;
    st->iteration = iteration;
    st->ncoll = 0;
    out->has_ckpt = 1;
    out->ckpt_bytes = 0;
    int rc;
    /* (--gemini-every: this step's state is checkpointed; every rank decides alike) */
    const int due = iteration >= st->next_due;
    if (due) st->next_due = iteration + st->every;
    /* its checksums summed by its optimizer as it writes the state (own_sums) */
    if (due && !st->fused_off)
        megatron_arm_sums(st->mega, st->dev_sums, st->sums_init, ckpt_store_chunk_floats(st->store));
    out->ckpt_every = st->every;
    st->interleaving = mode == GEMINI_INTERLEAVE && st->planned;
    if (st->interleaving) {
        /* the checkpoint of the iteration before goes during this one */
        if (st->pending && (rc = ckpt_begin(st, st->pending, out))) return rc;
        if (!st->pending) st->round = st->p.m; /* nothing to send this step */
        if ((rc = engine_megatron_lm.step(st->mega, iteration, tokens, targets, out))) return rc;
        st->fused_it = megatron_sums_done(st->mega) ? iteration : 0;
        float exposed = 0;
        if (st->pending) {
            float a = 0, b = 0, c = 0;
            if ((rc = gpt_event_elapsed_ms(&a, st->ev_opt, st->ev_ck_done)) ||
                (rc = gpt_event_elapsed_ms(&b, st->ev_opt, st->ev_d2h_done)) ||
                (rc = gpt_event_elapsed_ms(&c, st->ev_opt, st->ev_own_done)))
                return rc;
            exposed = a > b ? a : b;
            if (c > exposed) exposed = c;
            if (exposed < 0) exposed = 0;
        }
        /* the time the checkpoint's traffic took: its chunks at the measured rate, and the
         * local copy (the same bytes over PCIe, on its own stream) */
        out->ckpt_ms = st->pending ? (double)floats_total(st) * st->ms_per_float : 0;
        out->ckpt_exposed_ms = exposed;
        out->ckpt_idle_ms = st->idle_ms;
        /* the plan's first step has nothing to send (the last naive step sent its own) */
        out->ckpt_warmup = !st->pending;
        /* (--gemini-every K > 1: a step that sends nothing is a step without a checkpoint) */
        if (!st->pending && st->every > 1) out->has_ckpt = out->ckpt_warmup = 0;
        st->pending = due ? iteration : 0;
        return GPT_OK;
    }
    /* naive, and interleave's warm-up: everything after the step, its checksums too, the
     * training waits (a step not due: the training alone) */
    const double s0 = wall_ms();
    if ((rc = engine_megatron_lm.step(st->mega, iteration, tokens, targets, out))) return rc;
    st->fused_it = megatron_sums_done(st->mega) ? iteration : 0;
    st->step_wall_ms = wall_ms() - s0;
    if (!due) {
        out->has_ckpt = 0;
        return GPT_OK;
    }
    const double t0 = wall_ms();
    gpt_stream *cs = coll_stream(st->comm);
    st->naive_it = iteration;
    if ((rc = ckpt_begin(st, iteration, out)) || (rc = gpt_event_record(st->ev_ck_start, cs)) ||
        (rc = ckpt_chunks(st, (floats_total(st) + 1) / 2, out)))
        return rc;
    /* --fail-phase checkpoint: half of it issued, none of it known to be in */
    engine_fault_point(&st->env, iteration, FAULT_CHECKPOINT);
    if ((rc = ckpt_chunks(st, SIZE_MAX, out)) || (rc = ckpt_release(st)) || (rc = gpt_event_record(st->ev_ck_done, cs)) ||
        (rc = gpt_stream_sync(cs)) || (rc = gpt_stream_sync(st->d2h)) || (rc = gpt_stream_sync(st->own_d2h)) ||
        (rc = gpt_stream_sync(st->verify)))
        return rc;
    out->ckpt_ms = out->ckpt_exposed_ms = wall_ms() - t0;
    out->ms_optimizer += out->ckpt_ms;
    if (mode == GEMINI_INTERLEAVE) {
        out->ckpt_warmup = 1;
        /* warm-up: from the second step on (the first carries one-time costs), the idle spans
         * and a chunk's time alone; the plan after GEMINI_WARMUP steps */
        st->warm++;
        if (st->warm >= 2) {
            float ms = 0;
            const size_t total = floats_total(st);
            if ((rc = measure_idle(st)) || (rc = gpt_event_elapsed_ms(&ms, st->ev_ck_start, st->ev_ck_done)))
                return rc;
            const double per = total ? ms / (double)total : 0;
            if (st->ms_per_float == 0 || per > st->ms_per_float) st->ms_per_float = per; /* the slowest */
            float own = 0;
            if ((rc = gpt_event_elapsed_ms(&own, st->ev_own_start, st->ev_own_done))) return rc;
            const double d2h = own / (3.0 * (double)st->shard.n);
            if (st->ms_per_d2h_float == 0 || d2h > st->ms_per_d2h_float) st->ms_per_d2h_float = d2h;
        }
        if (st->warm >= GEMINI_WARMUP && (rc = make_plan(st))) return rc;
    }
    return GPT_OK;
}

static int gemini_read_params(void *state, float *host_params)
{
    return engine_megatron_lm.read_params(((gemini_state *)state)->mega, host_params);
}

/* ---- prediction ---------------------------------------------------------------------------- */

/* The in-memory checkpoint's part of gemini_predict (naive, interleave) on top of the step in
 * out: its copies home and its sends, and what of them the step does not hide. */
static void in_memory_checkpoint(const engine_config *cfg, const machine_rates *m, double shard,
                                 engine_prediction *out)
{
    const int world = engine_world(cfg), reps = replicas_of(cfg);
    const double home_ms = pred_d2h_ms(m, shard * reps);
    /* a sendrecv of `shard` floats each way: an all-gather in which each rank sends as much */
    const double net_ms = world > 1 ? (reps - 1) * pred_coll_ms(m->ag_ms, m->ag_gbs, shard * world / (world - 1)) : 0;
    const double step_ms = out->ms; /* (the training step, without the persistent checkpoint) */
    const double each = cfg->gemini_mode == GEMINI_NAIVE ? (home_ms > net_ms ? home_ms : net_ms)
                                                         : (home_ms > step_ms ? home_ms - step_ms : 0);
    /* --gemini-every K: one checkpoint in K steps, its cost spread over them (auto: as every
     * step, the bound it starts from) */
    const double K = cfg->gemini_every > 1 ? cfg->gemini_every : 1, exposed = each / K;
    out->ms += exposed;
    out->busy_ms[BUSY_D2H] += home_ms / K;
    out->busy_ms[BUSY_COMM] += net_ms / K;
    /* naive sends after the step, beside no compute; interleave's fill the step's idle spans
     * of the collectives' stream, beside the compute, which they slow */
    if (cfg->gemini_mode == GEMINI_NAIVE) out->coll_idle_ms += net_ms / K;
    if (cfg->gemini_mode == GEMINI_NAIVE && exposed > step_ms) out->bound = home_ms >= net_ms ? BUSY_D2H : BUSY_COMM;
}

/* The step on machine m: megatron-lm ZeRO-3's (its own predict), and the checkpoint that
 * --gemini-mode adds.  Every byte of a checkpoint crosses to the host on the device-to-host
 * copies — this rank's shard (master, m, v) and each of the m - 1 shards it keeps for its
 * peers, their own copy and the staging drains sharing the link — and the peers' shards first
 * cross the GPU network, one sendrecv per round (at the calibrated all-gather's rate for the
 * bytes each rank sends).  naive: after the step the host waits for all of it (the copies home
 * and the network in parallel, the slower of the two).  interleave: during the next step, on
 * streams the training does not use, the network part in the idle collective time; only
 * copying that outlasts the step is exposed, and its sends slow the compute beside them
 * (pred_settle's compute load: the calibrated compute_under_coll; naive's sends run beside
 * no compute: coll_idle_ms).  The persistent checkpoint (--ckpt-dir, every K iterations):
 * after that step the training waits while (but in naive mode, whose copy is there already)
 * this rank's shard is checksummed and comes home, and is written, each at what --calibrate
 * measured for that directory (the ranks of a machine sharing its disk: measured with every
 * rank writing, under mpirun, or one rank's rate shared); the prediction is the mean
 * iteration, that wait over K (a median of the steps leaves it out for K > 2). */
static void gemini_predict(const engine_config *cfg, const machine_rates *m, engine_prediction *out)
{
    const engine_config zero3 = megatron_config(cfg);
    engine_megatron_lm.predict(&zero3, m, out);
    if (!out->modelled) return;
    const double shard = (double)state_floats(cfg);
    if (cfg->ckpt_dir[0] && !(m->ckpt_write_gbs > 0)) {
        memset(out, 0, sizeof *out);
        snprintf(out->why, sizeof out->why, "no checkpoint directory calibrated at --ckpt-dir %.60s (aebench "
                 "--calibrate -m gemini --ckpt-dir DIR)", cfg->ckpt_dir);
        return;
    }
    if (cfg->gemini_mode != GEMINI_NONE) in_memory_checkpoint(cfg, m, shard, out);
    if (cfg->ckpt_dir[0]) {
        const double own_ms = cfg->gemini_mode == GEMINI_NAIVE ? 0 : shard * 4.0 / (m->ckpt_home_gbs * 1e6);
        /* (the ranks of a machine write their files at once, to its one disk: as measured so,
         * or one rank's rate shared) */
        const double share = m->ckpt_world == engine_world(cfg) ? 1 : engine_local_world(cfg);
        const double write_ms = m->ckpt_write_ms + share * shard * 4.0 / (m->ckpt_write_gbs * 1e6);
        const double K = cfg->ckpt_every > 0 ? cfg->ckpt_every : 1;
        out->ms += (own_ms + write_ms) / K;
        out->busy_ms[BUSY_D2H] += own_ms / K;
        out->busy_ms[BUSY_DISK] += write_ms / K;
    }
}

/* --gemini-recover of a job whose checkpoint is past --iters would train nothing and save that
 * later state under this run's name, and its orderly end would delete the store: refused (exit
 * 2, every rank alike: the answer is a collective's) while the store is whole.  One at --iters
 * is a job done (its last checkpoint made, the failure after it): nothing left to train. */
static int gemini_refused_before_writing(const engine_config *cfg, int iters, const comm_world *comm)
{
    if (!cfg->gemini_recover) return 0;
    int from_disk = 0;
    const int at = gemini_recovery_point(cfg, comm, &from_disk);
    if (at == -2) {
        fprintf(stderr, "aebench: rank %d: --gemini-recover: the ranks could not compare what they hold of job "
                "%s (out of memory, or see above)\n", comm->rank, cfg->gemini_job);
        return 1;
    }
    if (at <= iters) return 0;
    if (comm->rank == 0)
        fprintf(stderr, "aebench: --gemini-recover: job %s would recover iteration %d (its %s), past --iters "
                "%d; nothing was written and the store is kept (give --iters %d or more to go on from it)\n",
                cfg->gemini_job, at, from_disk ? "persistent checkpoint under --ckpt-dir" : "newest whole checkpoint",
                iters, at);
    return 2;
}

/* ---- gemini's part of the run's record (engine_vtbl's report hooks) ---------------------------
 * The Gemini artifact's comparison in one job (--gemini-ckpt-from): its runs train some warm-up
 * steps, then 10 without checkpoints, then the rest with, and keep every step time
 * (results.json).  Ours: the iterations before --gemini-ckpt-from are without; the first
 * min(8, half of them) are the warm-up; interleave's first checkpointed steps are its measuring
 * warm-up (checkpointed naively).  scripts/case6_extract.sh reads the lines and keys below. */

static const char *const MODE_NAMES[] = {"none", "naive", "interleave"};

static int warmup_steps(const engine_config *cfg)
{
    const int before = cfg->gemini_ckpt_from - 1;
    return before / 2 < 8 ? before / 2 : 8;
}

/* The checkpoint interval in effect at the last step (--gemini-every K, or auto's choice). */
static int every_at_end(const engine_report *rep)
{
    if (rep->done <= rep->first) return 1;
    const int every = rep->iters[rep->done - 1].r.ckpt_every;
    return every > 0 ? every : 1;
}

/* A step's phase in the artifact's comparison.  With --gemini-every K > 1 the steps between
 * two checkpoints are "checkpoint" steps too: the overhead is the interval's, shared by its K
 * steps (what a job checkpointing every K iterations pays per step), not one sending step's. */
static const char *step_phase(const engine_config *cfg, int iteration, const step_result *r)
{
    if (iteration <= warmup_steps(cfg)) return "warmup";
    if (iteration < cfg->gemini_ckpt_from || (!r->has_ckpt && r->ckpt_every <= 1)) return "no_checkpoint";
    return r->ckpt_warmup ? "checkpoint_warmup" : "checkpoint";
}

/* Mean and standard deviation of the step times (ms) of one phase; how many. */
static int phase_stats(const engine_report *rep, const char *phase, double *mean, double *sd)
{
    double sum = 0, sq = 0;
    int n = 0;
    for (int i = rep->first; i < rep->done; i++) {
        if (strcmp(step_phase(rep->cfg, i + 1, &rep->iters[i].r), phase) != 0) continue;
        sum += rep->iters[i].ms;
        sq += rep->iters[i].ms * rep->iters[i].ms;
        n++;
    }
    *mean = n ? sum / n : 0;
    *sd = n > 1 ? sqrt((sq - sum * sum / n) / (n - 1) > 0 ? (sq - sum * sum / n) / (n - 1) : 0) : 0;
    return n;
}

/* What a checkpoint costs, paired with the steps beside it: the "with / without" means compare
 * steps minutes apart, and where the step drifts by more than a checkpoint costs per step
 * (NCCL on sockets: 430 -> 525 ms over minutes with no checkpoint in flight, bench/results/
 * 2026-11-27-h200x2-gemini-net) they cannot resolve an interval's 1%.  A step is clean when it
 * is past the warm-up and neither it nor the step before it took a checkpoint (an interleaved
 * checkpoint may spill into the next step).  Each checkpoint's cost is its step's time, and the
 * next step's when that one is not a checkpoint, less as many times the median of the clean
 * steps within PAIR_REACH of it; a checkpoint with none beside it (every step checkpoints:
 * then the with / without means are all there is) is not paired.  The steady checkpoints are
 * taken if there are any, else interleave's measuring ones.  The log's line and the JSON's
 * gemini.paired both come from here. */
typedef struct paired_cost {
    int checkpoints;   /* how many were paired (0: none could be) */
    int measuring;     /* they were interleave's measuring checkpoints */
    double extra_ms;   /* the mean cost of one */
    double clean_ms;   /* the clean steps' median */
    double overhead;   /* a step's time at one checkpoint every `every`, over a clean step's */
} paired_cost;
enum { PAIR_REACH = 4 };
static paired_cost paired_cost_of(const engine_report *rep, int every)
{
    paired_cost p = {0};
    const engine_iteration *it = rep->iters;
    const int warm = warmup_steps(rep->cfg), first = rep->first, done = rep->done, n = done - first;
    double *v = n > 0 ? malloc(2 * (size_t)n * sizeof *v) : NULL;
    if (!v) return p;
    double *near = v, *all = v + n;
#define CKPT(i) (it[i].r.has_ckpt)
#define COUNTED(i) (CKPT(i) && (i) + 1 >= rep->cfg->gemini_ckpt_from && (i) + 1 > warm)
#define CLEAN(i) ((i) + 1 > warm && !CKPT(i) && ((i) == first || !CKPT((i) - 1)))
    int nclean = 0;
    p.measuring = 1;
    for (int i = first; i < done; i++) {
        if (CLEAN(i)) all[nclean++] = it[i].ms;
        if (COUNTED(i) && !it[i].r.ckpt_warmup) p.measuring = 0;
    }
    double sum = 0;
    for (int i = first; i < done && nclean > 0; i++) {
        if (!COUNTED(i) || !it[i].r.ckpt_warmup != !p.measuring) continue;
        const int spill = i + 1 < done && !CKPT(i + 1), last = i + spill;
        int k = 0;
        for (int j = i - PAIR_REACH; j <= last + PAIR_REACH; j++)
            if (j >= first && j < done && (j < i || j > last) && CLEAN(j)) near[k++] = it[j].ms;
        if (k == 0) continue;
        sum += it[i].ms + (spill ? it[i + 1].ms : 0) - (1 + spill) * engine_median(near, k);
        p.checkpoints++;
    }
#undef CLEAN
#undef COUNTED
#undef CKPT
    if (p.checkpoints > 0) {
        p.clean_ms = engine_median(all, nclean);
        p.extra_ms = sum / p.checkpoints;
        p.overhead = 1 + p.extra_ms / (every * p.clean_ms);
    }
    free(v);
    return p;
}

/* The log's header line: what case 6's extract reads the phases of the step lines from. */
static void gemini_report_header(const engine_report *rep)
{
    const engine_config *cfg = rep->cfg;
    char every[16];
    if (cfg->gemini_every < 0) snprintf(every, sizeof every, "auto");
    else snprintf(every, sizeof every, "%d", cfg->gemini_every > 0 ? cfg->gemini_every : 1);
    engine_report_line(rep, "gemini | mode: %s | checkpoint from iteration: %d | warm-up steps: %d | every: %s",
                       MODE_NAMES[cfg->gemini_mode], cfg->gemini_ckpt_from, warmup_steps(cfg), every);
}

/* A logged interval: the checkpoint of its last step, when it took one. */
static void gemini_report_interval(const engine_report *rep, int last)
{
    const step_result *r = &rep->iters[last - 1].r;
    if (!r->has_ckpt) return;
    engine_report_line(rep, "checkpoint (rank 0, last iteration) | GB: %.3f | ms: %.1f | exposed ms: %.1f | "
                            "hidden ms: %.1f | collectives' idle ms: %.1f | phase: %s", r->ckpt_bytes / 1e9,
                       r->ckpt_ms, r->ckpt_exposed_ms, r->ckpt_ms - r->ckpt_exposed_ms, r->ckpt_idle_ms,
                       step_phase(rep->cfg, last, r));
}

/* An iteration's checkpoint, when it took one, and its phase. */
static void gemini_report_iteration_json(const engine_report *rep, int iteration, cJSON *o)
{
    const step_result *r = &rep->iters[iteration - 1].r;
    if (r->has_ckpt) {
        cJSON *c = cJSON_AddObjectToObject(o, "checkpoint");
        cJSON_AddNumberToObject(c, "bytes", r->ckpt_bytes);
        cJSON_AddNumberToObject(c, "ms", r->ckpt_ms);
        cJSON_AddNumberToObject(c, "exposed_ms", r->ckpt_exposed_ms);
        cJSON_AddNumberToObject(c, "idle_ms", r->ckpt_idle_ms);
    }
    cJSON_AddStringToObject(o, "phase", step_phase(rep->cfg, iteration, r));
}

/* The end of training: the artifact's Figure 7 comparison, when this job has both kinds of
 * steps; the interval in effect at the end (auto's choice) and what a failure then costs, as
 * the JSON's gemini.every and expected_lost_iterations; a checkpoint's paired cost. */
static void gemini_report_summary(const engine_report *rep)
{
    const engine_config *cfg = rep->cfg;
    double base, base_sd, with, with_sd;
    const int nb = phase_stats(rep, "no_checkpoint", &base, &base_sd), nw = phase_stats(rep, "checkpoint", &with, &with_sd);
    if (nb > 0 && nw > 0)
        engine_report_line(rep, "gemini: steps without checkpoints %.1f ms (sd %.1f, %d steps), with %.1f ms (sd %.1f, "
                                "%d steps): %.3fx", base, base_sd, nb, with, with_sd, nw, with / base);
    if (cfg->gemini_mode == GEMINI_NONE || rep->done <= rep->first) return;
    const int every = every_at_end(rep);
    engine_report_line(rep, "gemini: a checkpoint every %d iteration%s (%s) | iterations a failure loses, expected: %.1f",
                       every, every == 1 ? "" : "s", cfg->gemini_every < 0 ? "auto" : "fixed",
                       gemini_lost_iterations(every, cfg->gemini_mode));
    const paired_cost p = paired_cost_of(rep, every);
    if (p.checkpoints > 0)
        engine_report_line(rep, "gemini: a checkpoint adds %.1f ms to its step and the next, paired with the clean "
                                "steps beside it (%d %s checkpoint%s; clean steps %.1f ms) | at one every %d: %.4fx",
                           p.extra_ms, p.checkpoints, p.measuring ? "measuring" : "steady",
                           p.checkpoints == 1 ? "" : "s", p.clean_ms, every, p.overhead);
}

/* The steady checkpoints' medians (size, times) and idle time, into g; -1 out of memory. */
static int json_checkpoint_medians(const engine_report *rep, cJSON *g)
{
    const int done = rep->done;
    double *v = malloc(3 * (size_t)(done > 0 ? done : 1) * sizeof *v);
    if (!v) return -1;
    double *bytes = v, *ms = v + done, *exposed = v + 2 * done, idle = 0;
    int n = 0;
    for (int i = rep->first; i < done; i++) {
        const step_result *r = &rep->iters[i].r;
        if (!r->has_ckpt || strcmp(step_phase(rep->cfg, i + 1, r), "checkpoint") != 0) continue;
        bytes[n] = r->ckpt_bytes;
        ms[n] = r->ckpt_ms;
        exposed[n] = r->ckpt_exposed_ms;
        idle = r->ckpt_idle_ms;
        n++;
    }
    if (n > 0) {
        const double ck = engine_median(ms, n) / 1e3;
        cJSON_AddNumberToObject(g, "checkpoint_size", engine_median(bytes, n));
        cJSON_AddNumberToObject(g, "idle_time", idle / 1e3);
        cJSON_AddNumberToObject(g, "checkpoint_time", ck);
        cJSON_AddNumberToObject(g, "exposed_time", engine_median(exposed, n) / 1e3);
        cJSON_AddNumberToObject(g, "gemini_idle_time", idle / 1e3 - ck);
    }
    free(v);
    return 0;
}

/* The artifact's results.json for this job, and our comparison: the JSON's "gemini". */
static void gemini_report_json(const engine_report *rep, cJSON *root)
{
    const engine_config *cfg = rep->cfg;
    cJSON *g = cJSON_AddObjectToObject(root, "gemini");
    cJSON_AddStringToObject(g, "mode", MODE_NAMES[cfg->gemini_mode]);
    cJSON_AddNumberToObject(g, "checkpoint_from", cfg->gemini_ckpt_from);
    cJSON_AddNumberToObject(g, "warmup_steps", warmup_steps(cfg));
    /* --gemini-every: the interval at the end (auto's choice), and the iterations of work a
     * failure loses on average with it (a naive checkpoint is whole at its step's end, an
     * interleaved one a step later) */
    const int every = every_at_end(rep);
    cJSON_AddStringToObject(g, "every_asked", cfg->gemini_every < 0 ? "auto" : "fixed");
    if (cfg->gemini_mode == GEMINI_NONE) {
        /* (no checkpoint: no interval, and a failure loses the whole job) */
        cJSON_AddNumberToObject(g, "every", 0);
        cJSON_AddNullToObject(g, "expected_lost_iterations");
    } else {
        cJSON_AddNumberToObject(g, "every", every);
        cJSON_AddNumberToObject(g, "expected_lost_iterations", gemini_lost_iterations(every, cfg->gemini_mode));
    }
    cJSON *times = cJSON_AddArrayToObject(g, "step_times");
    for (int i = rep->first; i < rep->done; i++) cJSON_AddItemToArray(times, cJSON_CreateNumber(rep->iters[i].ms / 1e3));
    if (json_checkpoint_medians(rep, g) != 0) return;
    double mean, sd;
    int k = phase_stats(rep, "no_checkpoint", &mean, &sd);
    if (k > 0) {
        cJSON_AddNumberToObject(g, "no_checkpoint_steps", k);
        cJSON_AddNumberToObject(g, "no_checkpoint_ms", mean);
        cJSON_AddNumberToObject(g, "no_checkpoint_sd_ms", sd);
    }
    const double base = mean;
    k = phase_stats(rep, "checkpoint", &mean, &sd);
    if (k > 0) {
        cJSON_AddNumberToObject(g, "checkpoint_steps", k);
        cJSON_AddNumberToObject(g, "checkpoint_ms", mean);
        cJSON_AddNumberToObject(g, "checkpoint_sd_ms", sd);
        if (base > 0) cJSON_AddNumberToObject(g, "slowdown", mean / base);
    }
    /* the paired cost of a checkpoint, and what it makes of a step at the interval in effect */
    const paired_cost p = paired_cost_of(rep, every);
    if (p.checkpoints > 0) {
        cJSON *pc = cJSON_AddObjectToObject(g, "paired");
        cJSON_AddNumberToObject(pc, "checkpoints", p.checkpoints);
        cJSON_AddStringToObject(pc, "of", p.measuring ? "measuring" : "steady");
        cJSON_AddNumberToObject(pc, "extra_ms", p.extra_ms);
        cJSON_AddNumberToObject(pc, "clean_step_ms", p.clean_ms);
        cJSON_AddNumberToObject(pc, "overhead_at_every", p.overhead);
    }
}

/* ---- a --ranks job that loses ranks: relaunched to recover (engine_vtbl.recovery) -------------
 * The job gets an id (its store's name: --gemini-job, or one made here and added to its first
 * launch) that its relaunches use too; each relaunch adds --gemini-recover.  It is relaunched
 * while its stores (one, or with "%m" in --gemini-store one per machine) or --ckpt-dir hold a
 * checkpoint of every rank's shard, at most GEMINI_RELAUNCHES times. */
enum { GEMINI_RELAUNCHES = 3 };

/* What a relaunch does not pass on: a recover flag (the relaunch adds its own). */
static const char *const GEMINI_NOT_PASSED_ON[] = {"gemini-recover", NULL};

/* The supervisor's view of a job's checkpoints: its store directories, machines 0 .. n - 1
 * (no more machines than ranks), and --ckpt-dir. */
typedef struct gemini_job {
    char id[64];
    char store[PATH_MAX]; /* (as the messages name it: the pattern's) */
    char ckpt_dir[ENGINE_PATH_MAX];
    int ranks;
    int n;
    char (*dir)[PATH_MAX];
    char (*root)[PATH_MAX];
} gemini_job;

static void gemini_job_free(gemini_job *j)
{
    free(j->dir);
    free(j->root);
    free(j);
}

static int gemini_job_stores(gemini_job *j, const char *pattern)
{
    const int n = ckpt_store_per_machine(pattern) ? j->ranks : 1;
    j->dir = calloc((size_t)n, sizeof *j->dir);
    j->root = calloc((size_t)n, sizeof *j->root);
    if (!j->dir || !j->root) return -1;
    for (int i = 0; i < n; i++)
        if (ckpt_store_for_machine(j->root[i], sizeof j->root[i], pattern, i) ||
            ckpt_store_dir(j->dir[i], sizeof j->dir[i], j->root[i], j->id))
            return -1;
    j->n = n;
    return 0;
}

static int gemini_job_in_use(void *state, char *why, size_t len)
{
    const gemini_job *j = state;
    long holder = 0;
    for (int i = 0; i < j->n; i++)
        if (ckpt_dir_in_use(j->dir[i], &holder) == 1) {
            snprintf(why, len, "its store is in use by another job");
            return 1;
        }
    return 0;
}

/* Their machines were replaced: their copies are gone, a peer's must serve.  (Best effort, as
 * the loss it stands for: a copy that cannot be removed is one the ranks still check.) */
static void gemini_job_machines_lost(void *state, unsigned long long ranks)
{
    const gemini_job *j = state;
    char path[PATH_MAX + 32];
    for (int r = 0; r < 64; r++) {
        if (!((ranks >> r) & 1)) continue;
        for (int i = 0; i < j->n; i++) {
            snprintf(path, sizeof path, "%s/rank-%d.ckpt", j->dir[i], r);
            (void)unlink(path);
        }
    }
}

/* The iteration a relaunch would recover (as restore() chooses: the newest that every rank's
 * shard is held complete at in the machines' stores, else in --ckpt-dir), by the headers alone
 * (the ranks check the data); *on_disk says where.  -1: none, and then *newest the newest
 * iteration any shard is held at (-1 none) and *missing a rank it lacks; -2: the ranks must
 * decide (out of memory; or, `seen_all` 0, the other machines' stores are not here, and this
 * one's holds something). */
static int gemini_job_newest(const gemini_job *j, int seen_all, int *on_disk, int *newest, int *missing)
{
    ckpt_holdings h = {0};
    int it = -1, disk_newest = -1, disk_missing = -1;
    *on_disk = 0, *newest = *missing = -1;
    for (int i = 0; i < j->n && it != -2; i++)
        if (ckpt_job_holdings(j->root[i], j->id, 0, &h)) it = -2;
    if (it != -2) {
        it = ckpt_newest_whole(h.held, h.n, j->ranks, newest, missing);
        if (!seen_all && h.n > 0) it = -2;
    }
    if (it == -1 && j->ckpt_dir[0]) {
        ckpt_holdings_free(&h);
        if (ckpt_job_holdings(j->ckpt_dir, j->id, 1, &h)) it = -2;
        else if ((it = ckpt_newest_whole(h.held, h.n, j->ranks, &disk_newest, &disk_missing)) >= 0) *on_disk = 1;
        else if (!seen_all && h.n > 0) it = -2;
        else if (disk_newest > *newest) *newest = disk_newest, *missing = disk_missing;
    }
    ckpt_holdings_free(&h);
    return it;
}

/* (a relaunch that could find nothing to restore would only refuse to start: a rank lost in
 * the middle of the first checkpoint leaves its peers' shards complete and its own nowhere) */
static int gemini_job_recoverable(void *state, int seen_all, unsigned long long lost, char *said, size_t len)
{
    const gemini_job *j = state;
    int on_disk = 0, newest = -1, missing = -1;
    const int from = gemini_job_newest(j, seen_all, &on_disk, &newest, &missing);
    if (from == -1) {
        if (newest < 0)
            snprintf(said, len, "it ended before its first complete checkpoint (%s%s%s holds none), so there is "
                     "nothing to recover", j->store, j->ckpt_dir[0] ? ", nor does " : "", j->ckpt_dir);
        else
            snprintf(said, len, "no checkpoint holds every rank's shard (the newest, of iteration %d, lacks rank %d's, "
                     "and none before it holds them all%s), so there is nothing to recover", newest, missing,
                     missing >= 0 && missing < 64 && (lost >> missing & 1) ? ": every copy of it was on a lost machine"
                                                                           : "");
        return 0;
    }
    char what[64] = "";
    if (from >= 0) snprintf(what, sizeof what, " (iteration %d)", from);
    snprintf(said, len, "its %s%s in %s", on_disk ? "persistent checkpoint" : "in-memory checkpoints", what,
             on_disk ? j->ckpt_dir : j->store);
    return 1;
}

/* (what a job that ended, was interrupted or failed for good left in its stores goes) */
static void gemini_job_close(void *state, int remove)
{
    gemini_job *j = state;
    for (int i = 0; remove && i < j->n; i++) ckpt_dir_remove(j->dir[i]);
    gemini_job_free(j);
}

/* A job with checkpoints (in memory, or --ckpt-dir's) to recover from is relaunched. */
static int gemini_recovery(const engine_config *cfg, int ranks, engine_recovery *out)
{
    if (cfg->gemini_mode == GEMINI_NONE && !cfg->ckpt_dir[0]) return -1;
    gemini_job *j = calloc(1, sizeof *j);
    if (!j) return -1;
    j->ranks = ranks;
    snprintf(j->ckpt_dir, sizeof j->ckpt_dir, "%s", cfg->ckpt_dir);
    if (cfg->gemini_job[0]) snprintf(j->id, sizeof j->id, "%s", cfg->gemini_job);
    else ckpt_job_id(j->id, sizeof j->id, 's');
    if (gemini_job_stores(j, cfg->gemini_store) || ckpt_store_dir(j->store, sizeof j->store, cfg->gemini_store, j->id)) {
        gemini_job_free(j);
        return -1;
    }
    *out = (engine_recovery){
        .job = j->id, .relaunches = GEMINI_RELAUNCHES, .relaunch_arg = "--gemini-recover",
        .not_passed_on = GEMINI_NOT_PASSED_ON, .lost_said = " (rank's own copies deleted: hardware failure)",
        .lost_noted = ", the lost rank's in-memory copies deleted", .state = j, .in_use = gemini_job_in_use,
        .machines_lost = gemini_job_machines_lost, .recoverable = gemini_job_recoverable, .close = gemini_job_close,
    };
    if (!cfg->gemini_job[0]) {
        out->first_args[0] = "--gemini-job";
        out->first_args[1] = j->id;
    }
    return 0;
}

/* --gemini-job: it names the job's store (a directory), so letters, digits, _ and - only. */
static int gemini_job_check(const char *opt, const char *value, char *err, size_t errlen)
{
    const size_t most = sizeof(((engine_config *)0)->gemini_job) - 1;
    if (*value && strlen(value) <= most &&
        strspn(value, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") == strlen(value))
        return 0;
    snprintf(err, errlen, "%s: '%s' is not a job id (letters, digits, _ and -, at most %zu)", opt, value, most);
    return -1;
}

/* --gemini-store's "%m" (a store per machine) made this machine's, in place. */
static int gemini_for_machine(engine_config *cfg, int machine, char *err, size_t errlen)
{
    char store[sizeof cfg->gemini_store];
    if (ckpt_store_for_machine(store, sizeof store, cfg->gemini_store, machine)) {
        snprintf(err, errlen, "--gemini-store %.200s: too long with its machine", cfg->gemini_store);
        return -1;
    }
    memcpy(cfg->gemini_store, store, sizeof store);
    return 0;
}

/* --gemini-fill, --gemini-every-share: a share above 0 (0 would read as the default). */
static int gemini_share_check(const char *opt, const char *value, char *err, size_t errlen)
{
    char *end = NULL;
    const double v = strtod(value, &end);
    if (end != value && v > 0 && v <= 1) return 0;
    snprintf(err, errlen, "%s: '%s' is not a share in (0, 1]", opt, value);
    return -1;
}

/* The options only gemini takes (engines/option_decl.h); given to another engine, each is
 * refused: that engine takes no checkpoints. */
#define GEMINI_OPTION .use = OPTION_CFG | OPTION_KID, .refusal = REFUSED_GIVEN, .lacks = "takes no checkpoints"
static const option_decl gemini_options[] = {
    {.name = "gemini-mode", .kind = ARG_TEXT, .arg = "none|naive|interleave", .set = SET_WORDS,
     OPTION_FIELD(gemini_mode),
     OPTION_WORDS({"none", GEMINI_NONE}, {"naive", GEMINI_NAIVE}, {"interleave", GEMINI_INTERLEAVE}),
     .dflt = "interleave", .scope = SCOPE_RESULT, .slot = 39, GEMINI_OPTION,
     .help = "no checkpoint; every iteration's right after its step; or sent during the next step in the idle "
             "spans of its collectives (default interleave)"},
    {.name = "gemini-replicas", .kind = ARG_INT, .arg = "M", .set = SET_INT, OPTION_FIELD(gemini_replicas), .lo = 1,
     .hi = 2147483647, .scope = SCOPE_RESULT, .slot = 40, GEMINI_OPTION,
     .help = "copies of each rank's checkpoint, its own and M-1 peers' (default 2, or 1 on one rank)"},
    {.name = "gemini-placement", .kind = ARG_TEXT, .arg = "group|ring", .set = SET_WORDS,
     OPTION_FIELD(gemini_placement), OPTION_WORDS({"group", GEMINI_GROUP}, {"ring", GEMINI_RING}), .dflt = "group",
     .scope = SCOPE_RESULT, .slot = 41, GEMINI_OPTION,
     .help = "ranks in groups of M holding the group's checkpoints, or rank r holding r-1 ... r-M+1 (default "
             "group)"},
    {.name = "gemini-transport", .kind = ARG_TEXT, .arg = "auto|sendrecv|read", .set = SET_WORDS,
     OPTION_FIELD(gemini_transport),
     OPTION_WORDS({"auto", GEMINI_PEER_AUTO}, {"sendrecv", GEMINI_PEER_SENDRECV}, {"read", GEMINI_PEER_READ}),
     .dflt = "auto", .scope = SCOPE_RESULT, .slot = 42, GEMINI_OPTION,
     .help = "how a peer's shard reaches the rank that keeps it: read by that rank's copy engines (CUDA IPC; MPI "
             "one-sided on the CPU backend), sent by NCCL kernels (MPI send/recv), or read where every rank is on "
             "one machine and can (default auto)"},
    {.name = "gemini-store", .kind = ARG_TEXT, .arg = "DIR", .set = SET_PATH, OPTION_FIELD(gemini_store),
     .what = "directory", .dflt = "/dev/shm", .scope = SCOPE_AGREE, .slot = 43, GEMINI_OPTION,
     .help = "the memory file system the checkpoints live in (default /dev/shm)"},
    {.name = "gemini-job", .kind = ARG_TEXT, .arg = "ID", .set = SET_TEXT, OPTION_FIELD(gemini_job),
     .check = gemini_job_check, .scope = SCOPE_AGREE, .slot = 44, .flags = OPTION_ONE_JOB, GEMINI_OPTION,
     .help = "the job's id, which names its store (default: made at start)"},
    {.name = "gemini-recover", .kind = ARG_NONE, .set = SET_FLAG, OPTION_FIELD(gemini_recover),
     .scope = SCOPE_AGREE, .slot = 45, .flags = OPTION_ONE_JOB, GEMINI_OPTION,
     .help = "restore job --gemini-job from its store (the newest version every rank has) and go on"},
    {.name = "ckpt-dir", .kind = ARG_TEXT, .arg = "DIR", .set = SET_PATH, OPTION_FIELD(ckpt_dir),
     .what = "directory", .scope = SCOPE_RESULT, .slot = 46, GEMINI_OPTION,
     .help = "also a persistent checkpoint on disk there (O_DIRECT), what recovery falls back to when every copy "
             "of a shard is lost"},
    {.name = "gemini-ckpt-from", .kind = ARG_INT, .arg = "I", .set = SET_INT, OPTION_FIELD(gemini_ckpt_from),
     .lo = 1, .hi = OPTION_MAX_ITERS, .dflt = "1", .scope = SCOPE_RESULT, .slot = 48, .flags = OPTION_ITERATION,
     GEMINI_OPTION,
     .help = "checkpoint from iteration I on, train the ones before without (the artifact's comparison; default "
             "1)"},
    {.name = "ckpt-every", .kind = ARG_INT, .arg = "K", .set = SET_INT, OPTION_FIELD(ckpt_every), .lo = 1,
     .hi = OPTION_MAX_ITERS, .dflt = "10", .scope = SCOPE_RESULT, .slot = 47, .goes_with = "ckpt-dir",
     GEMINI_OPTION, .help = "a persistent checkpoint every K iterations (default 10; only with --ckpt-dir)"},
    {.name = "gemini-every", .kind = ARG_TEXT, .arg = "K|auto", .set = SET_INT_OR_AUTO, OPTION_FIELD(gemini_every),
     .lo = 1, .hi = OPTION_MAX_ITERS, .auto_value = -1, .what = "an interval (1 or more iterations)", .dflt = "1",
     .scope = SCOPE_RESULT, .slot = 49, .flags = OPTION_ITERATION, GEMINI_OPTION,
     .help = "an in-memory checkpoint every K iterations (auto: the fewest that keep the checkpoints' exposed "
             "time under 1% of the step, chosen from interleave's measurements; default 1)"},
    /* (slots 53, 54: they were the environment's AEBENCH_GEMINI_EVERY_SHARE and _FILL, issue 48;
     * a fingerprint holds them only where they differ from the default) */
    {.name = "gemini-every-share", .kind = ARG_NUM, .arg = "F", .set = SET_NUM, OPTION_FIELD(gemini_every_share),
     .rule = NUM_POSITIVE, .check = gemini_share_check, .dflt = "0.01", .scope = SCOPE_RESULT_SET, .slot = 53,
     GEMINI_OPTION,
     .help = "--gemini-every auto: the share of the step a checkpoint may expose, which sets the interval "
             "(default 0.01)"},
    {.name = "gemini-fill", .kind = ARG_NUM, .arg = "F", .set = SET_NUM, OPTION_FIELD(gemini_fill),
     .rule = NUM_POSITIVE, .check = gemini_share_check, .dflt = "0.9", .scope = SCOPE_RESULT_SET, .slot = 54,
     GEMINI_OPTION,
     .help = "interleave: the share of each idle span between the training's collectives its plan fills with "
             "the checkpoint's transfer (default 0.9)"},
};
#undef GEMINI_OPTION

/* Its steady state: checkpointing, from the step after its first checkpointed one
 * (--gemini-ckpt-from; the steps before train without, the artifact's comparison). */
static int gemini_steady_from(const engine_config *cfg)
{
    return cfg->gemini_ckpt_from + 1 > 2 ? cfg->gemini_ckpt_from + 1 : 2;
}

const engine_vtbl engine_gemini = {
    .name = "gemini",
    .alias = NULL,
    .description = "megatron-lm ZeRO-3 with an in-memory checkpoint every iteration on m ranks, and recovery",
    .uses_window = 0,
    .not_in_all = 1,
    .supports_bf16 = 0,
    .steady_from = gemini_steady_from,
    .options = ENGINE_OPT_RANKS | ENGINE_OPT_ACCUM | ENGINE_OPT_FAULT_BACKWARD | ENGINE_OPT_FAULT_CHECKPOINT |
               ENGINE_OPT_RECOVERS,
    .plan = gemini_plan,
    .check = gemini_check,
    .init = gemini_init,
    .chosen_plan = gemini_chosen_plan,
    .step = gemini_step,
    .free = gemini_free,
    .read_params = gemini_read_params,
    .resumed = gemini_resumed,
    .predict = gemini_predict,
    .refused_before_writing = gemini_refused_before_writing,
    /* (issue 48's hooks: its record, its jobs' recovery, its persistent checkpoint) */
    .report_header = gemini_report_header,
    .report_interval = gemini_report_interval,
    .report_iteration_json = gemini_report_iteration_json,
    .report_summary = gemini_report_summary,
    .report_json = gemini_report_json,
    .recovery = gemini_recovery,
    .persistent_ckpt = 1,
    OWN_OPTIONS(gemini_options),
    .for_machine = gemini_for_machine,
};
