/*
 * collectives.c — coll_group over NCCL (CUDA backend) or MPI (CPU backend); see the header.
 *
 * MPI path: each operation is a host task on the group's stream (gpt_stream_host_task): the
 * stream's worker thread makes the blocking MPI call when the stream reaches it, so the
 * call starts only after the events the stream waits on, exactly as NCCL's kernel would on
 * a GPU stream.  Each group has two communicators duplicated from MPI_COMM_WORLD (or split from
 * it, for a group of some of the ranks: coll_open_split): one for
 * the stream's operations and one for the host-side helpers, because two threads must
 * never run collectives on one communicator at the same time (their order would be
 * undefined).  MPI counts are ints: the reductions go in rounds (ordered_all_reduce);
 * larger gathers are refused (the CPU backend trains small models).
 *
 * NCCL path: ncclCommInitRank with a unique id that rank 0 makes and broadcasts over MPI;
 * operations are enqueued on the group's cudaStream_t.  NCCL's results are checked at issue;
 * an asynchronous failure (a peer gone) ends the job through the launcher.
 */
#include "collectives.h"

#include "comm.h"
#include "watchdog.h"

#include <limits.h>
#include <pthread.h>
#include <time.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef AEBENCH_HAVE_MPI
#include <mpi.h>
#endif
#if defined(AEBENCH_HAVE_CUDA) && defined(AEBENCH_HAVE_MPI)
#define COLL_HAVE_NCCL 1
#include <cuda_runtime.h>
#include <nccl.h>
#endif

/* The last COLL_TRACKED operations issued on a group, for coll_pending: which is the oldest not
 * complete.  Completion is known from the stream's own order: the MPI path's host task marks
 * its sequence number when its call returns; the NCCL path records an event after each
 * operation (a ring of them, queried only when a watchdog asks). */
enum { COLL_TRACKED = 64 };
typedef struct coll_issued {
    int op;
    double bytes;
    double at;  /* CLOCK_MONOTONIC s when issued */
    void *done; /* NCCL path: the cudaEvent_t recorded after it (the ring's, or a graph's) */
} coll_issued;

/* An operation captured into a graph (coll_capture_begin): replayed with the graph, each time
 * counted as issued again (coll_replayed). */
typedef struct captured_op {
    int op;
    double bytes;
    void *done; /* NCCL path: the cudaEvent_t the graph records after it (NULL on one rank) */
} captured_op;
struct coll_capture {
    captured_op *ops;
    int n, cap;
};

struct coll_group {
    gpt_backend *be;
    gpt_stream *stream;
    int rank, world;
    double bytes; /* handed to operations since coll_take_bytes */
    /* tracking (only with more than one rank), under track_lock */
    pthread_mutex_t track_lock;
    int have_track_lock;
    unsigned long issued;    /* operations issued; #k is the k-th (1-based) */
    unsigned long started;   /* MPI path: the last whose call began */
    unsigned long completed; /* MPI path: the last whose call returned; NCCL path: the last seen complete */
    coll_issued ring[COLL_TRACKED];
    const char *host_call;   /* a host-side helper in progress (NULL none), since host_call_at */
    double host_call_at;
    struct watchdog *dog;
    const char *label;
    coll_capture *capture; /* the graph being captured from the stream (NULL: none) */
#ifdef AEBENCH_HAVE_MPI
    MPI_Comm comm;      /* the stream's operations (MPI path) */
    MPI_Comm host_comm; /* host-side helpers, from the calling thread */
    int have_comm, have_host_comm;
#endif
#ifdef COLL_HAVE_NCCL
    ncclComm_t nccl; /* NULL on the MPI path or on one rank */
    cudaEvent_t done[COLL_TRACKED]; /* recorded after operation k in done[k % COLL_TRACKED] */
    int have_done;
#endif
};

static double mono_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static const char *op_name(int op, int nccl)
{
    static const char *const mpi[] = {"all-reduce (MPI_Alltoall, MPI_Allgather)", "reduce-scatter (MPI_Alltoall)", "MPI_Allgather", "MPI_Bcast",
                                      "MPI_Send", "MPI_Recv", "MPI_Sendrecv", "bf16 all-reduce (MPI_Alltoall, MPI_Allgather)",
                                      "bf16 reduce-scatter (MPI_Alltoall)"};
    static const char *const nc[] = {"ncclAllReduce", "ncclReduceScatter", "ncclAllGather", "ncclBroadcast",
                                     "ncclSend", "ncclRecv", "ncclSend/ncclRecv", "ncclAllReduce (bf16)",
                                     "ncclReduceScatter (bf16)"};
    return op >= 0 && op <= 8 ? (nccl ? nc : mpi)[op] : "?";
}

#ifdef AEBENCH_HAVE_MPI
/* Operation k issued (under track_lock): its record; the caller then queues it.  done: the
 * event recorded after it (NULL: the ring's own for k, on the NCCL path). */
static unsigned long track_issue(coll_group *g, int op, double bytes, void *done)
{
    pthread_mutex_lock(&g->track_lock);
    const unsigned long k = ++g->issued;
#ifdef COLL_HAVE_NCCL
    if (!done && g->have_done) done = (void *)g->done[k % COLL_TRACKED];
#endif
    g->ring[k % COLL_TRACKED] = (coll_issued){.op = op, .bytes = bytes, .at = mono_now(), .done = done};
    pthread_mutex_unlock(&g->track_lock);
    return k;
}
#endif

enum coll_op {
    OP_ALL_REDUCE, OP_REDUCE_SCATTER, OP_ALL_GATHER, OP_BROADCAST, OP_SEND, OP_RECV, OP_SENDRECV,
    OP_ALL_REDUCE_BF16, OP_REDUCE_SCATTER_BF16 /* (bf16 elements: activations under --dtype bf16) */
};

gpt_stream *coll_stream(coll_group *g) { return g->stream; }
int coll_rank(const coll_group *g) { return g->rank; }
int coll_world(const coll_group *g) { return g->world; }

double coll_take_bytes(coll_group *g)
{
    double b = g->bytes;
    g->bytes = 0;
    return b;
}

#ifdef AEBENCH_HAVE_MPI
static int mpi_failed(int rc, const char *what) { return comm_mpi_failed(rc, what); }

/* What a host task needs to make one MPI call (copied into the task). */
typedef struct mpi_task {
    coll_group *g;
    unsigned long seq; /* its number on the group (coll_pending) */
    int op;
    void *out;
    const void *in;
    size_t n;  /* floats (reductions) or bytes */
    int peer;  /* root, or the peer of a send/recv (sendrecv: the one sent to) */
    int from;  /* sendrecv: the peer received from */
} mpi_task;

static int mpi_call(const mpi_task *t);

/* The MPI path's reductions sum every element over the ranks in rank order, ((x0 + x1) + x2)
 * + ..., whichever operation it is: an all-reduce and a reduce-scatter of the same data give
 * the same bits at any world.  (MPI's own reductions pick their order by algorithm and size:
 * at 3 ranks and more DDP's all-reduce and ZeRO's reduce-scatter differed in the last bits,
 * and so every sharded engine from megatron-lm ZeRO-0.)  Each is an all-to-all of blocks
 * (every rank gets its block of every rank's data), the ordered sum, and for the all-reduce
 * an all-gather of the sums: a ring's bytes, plus copies through scratch of at most
 * ORDERED_ROUND floats a round. */
enum { ORDERED_ROUND = 1 << 20 };

/* out[i] = blocks[i] + blocks[n + i] + ... + blocks[(world - 1) n + i], summed in that order */
static void sum_in_rank_order(float *out, const float *blocks, size_t n, int world)
{
    memmove(out, blocks, n * sizeof(float));
    for (int r = 1; r < world; r++) {
        const float *b = blocks + (size_t)r * n;
        for (size_t i = 0; i < n; i++) out[i] += b[i];
    }
}

/* One round: every rank's `now` floats for each rank in send (world blocks), exchanged, and
 * this rank's summed in rank order into out (recv: world blocks of scratch). */
static int exchange_and_sum(coll_group *g, float *out, const float *send, float *recv, size_t now)
{
    if (mpi_failed(MPI_Alltoall(send, (int)now, MPI_FLOAT, recv, (int)now, MPI_FLOAT, g->comm), "MPI_Alltoall"))
        return -1;
    sum_in_rank_order(out, recv, now, g->world);
    return 0;
}

/* in: world blocks of n floats; out: this rank's block summed (out may be in's own block). */
static int ordered_reduce_scatter(coll_group *g, float *out, const float *in, size_t n)
{
    const int world = g->world;
    const size_t c = n < ORDERED_ROUND / (size_t)world ? n : ORDERED_ROUND / (size_t)world;
    float *send = malloc(sizeof(float) * (size_t)world * (c ? c : 1)),
          *recv = malloc(sizeof(float) * (size_t)world * (c ? c : 1));
    int rc = send && recv ? 0 : -1;
    if (rc)
        fprintf(stderr, "aebench: a reduce-scatter's scratch (%zu floats): out of host memory\n", 2 * (size_t)world * c);
    for (size_t done = 0; !rc && done < n;) {
        const size_t now = n - done < c ? n - done : c;
        /* (every block's part of this round is copied before this rank's part of out is
         * written: out may be in's block of this rank, read in this round only) */
        for (int r = 0; r < world; r++) memcpy(send + (size_t)r * now, in + (size_t)r * n + done, now * sizeof(float));
        rc = exchange_and_sum(g, out + done, send, recv, now);
        done += now;
    }
    free(send);
    free(recv);
    return rc;
}

/* buf (n floats) summed over the ranks, in place: rank r sums block r (ceil(n / world)
 * floats; the last ones short, their padding never written back), everyone gathers. */
static int ordered_all_reduce(coll_group *g, float *buf, size_t n)
{
    const int world = g->world;
    const size_t per = (n + (size_t)world - 1) / (size_t)world;
    const size_t c = per < ORDERED_ROUND / (size_t)world ? per : ORDERED_ROUND / (size_t)world;
    const size_t scratch = (size_t)world * (c ? c : 1);
    float *send = malloc(sizeof(float) * scratch), *recv = malloc(sizeof(float) * scratch),
          *mine = malloc(sizeof(float) * (c ? c : 1));
    int rc = send && recv && mine ? 0 : -1;
    if (rc) fprintf(stderr, "aebench: an all-reduce's scratch (%zu floats): out of host memory\n", 2 * scratch + c);
    for (size_t done = 0; !rc && done < per;) {
        const size_t now = per - done < c ? per - done : c;
        for (int r = 0; r < world; r++) {
            const size_t at = (size_t)r * per + done;
            const size_t have = at >= n ? 0 : (n - at < now ? n - at : now);
            if (have) memcpy(send + (size_t)r * now, buf + at, have * sizeof(float));
            memset(send + (size_t)r * now + have, 0, (now - have) * sizeof(float));
        }
        if (exchange_and_sum(g, mine, send, recv, now) ||
            mpi_failed(MPI_Allgather(mine, (int)now, MPI_FLOAT, recv, (int)now, MPI_FLOAT, g->comm), "MPI_Allgather")) {
            rc = -1;
            break;
        }
        for (int r = 0; r < world; r++) {
            const size_t at = (size_t)r * per + done;
            const size_t have = at >= n ? 0 : (n - at < now ? n - at : now);
            if (have) memcpy(buf + at, recv + (size_t)r * now, have * sizeof(float));
        }
        done += now;
    }
    free(send);
    free(recv);
    free(mine);
    return rc;
}

static int mpi_task_run(void *arg)
{
    const mpi_task *t = arg;
    coll_group *g = t->g;
    pthread_mutex_lock(&g->track_lock);
    g->started = t->seq;
    pthread_mutex_unlock(&g->track_lock);
    const int rc = mpi_call(t);
    pthread_mutex_lock(&g->track_lock);
    g->completed = t->seq;
    pthread_mutex_unlock(&g->track_lock);
    return rc;
}

/* The bf16 reductions on the CPU backend: widened to fp32, summed as the fp32 ones (in rank
 * order), rounded once (NCCL's result on two ranks, which rounds the one sum the same way). */
static int bf16_reduction(coll_group *g, int op, void *out, const void *in, size_t n)
{
    const size_t nin = op == OP_ALL_REDUCE_BF16 ? n : n * (size_t)g->world;
    float *wide = malloc((nin ? nin : 1) * sizeof(float));
    if (!wide) {
        fprintf(stderr, "aebench: a bf16 reduction's scratch (%zu floats): out of host memory\n", nin);
        return -1;
    }
    const uint16_t *src = in;
    for (size_t i = 0; i < nin; i++) wide[i] = gpt_bf16_to_f32(src[i]);
    const int rc = op == OP_ALL_REDUCE_BF16 ? ordered_all_reduce(g, wide, n) : ordered_reduce_scatter(g, wide, wide, n);
    uint16_t *dst = out;
    for (size_t i = 0; !rc && i < n; i++) dst[i] = gpt_f32_to_bf16(wide[i]);
    free(wide);
    return rc;
}

static int mpi_call(const mpi_task *t)
{
    coll_group *g = t->g;
    switch (t->op) {
    case OP_ALL_REDUCE_BF16:
    case OP_REDUCE_SCATTER_BF16:
        return bf16_reduction(g, t->op, t->out, t->in, t->n);
    case OP_ALL_REDUCE:
        return ordered_all_reduce(g, t->out, t->n);
    case OP_REDUCE_SCATTER:
        return ordered_reduce_scatter(g, t->out, t->in, t->n);
    case OP_ALL_GATHER: {
        char *out = t->out;
        const void *in = t->in;
        const void *send = in == out + (size_t)g->rank * t->n ? MPI_IN_PLACE : in;
        return mpi_failed(MPI_Allgather(send, (int)t->n, MPI_BYTE, out, (int)t->n, MPI_BYTE, g->comm),
                          "MPI_Allgather");
    }
    case OP_BROADCAST:
        return mpi_failed(MPI_Bcast(t->out, (int)t->n, MPI_BYTE, t->peer, g->comm), "MPI_Bcast");
    case OP_SEND:
        return mpi_failed(MPI_Send(t->in, (int)t->n, MPI_BYTE, t->peer, 0, g->comm), "MPI_Send");
    case OP_RECV:
        return mpi_failed(MPI_Recv(t->out, (int)t->n, MPI_BYTE, t->peer, 0, g->comm,
                                   MPI_STATUS_IGNORE), "MPI_Recv");
    case OP_SENDRECV:
        return mpi_failed(MPI_Sendrecv(t->in, (int)t->n, MPI_BYTE, t->peer, 0, t->out, (int)t->n,
                                       MPI_BYTE, t->from, 0, g->comm, MPI_STATUS_IGNORE),
                          "MPI_Sendrecv");
    }
    return -1;
}
#endif

#ifdef COLL_HAVE_NCCL
static int nccl_failed(ncclResult_t rc, const char *what)
{
    if (rc == ncclSuccess) return 0;
    fprintf(stderr, "aebench: %s failed: %s\n", what, ncclGetErrorString(rc));
    return -1;
}
#endif

/* What an operation of `bytes` per rank moves as coll_take_bytes counts it (a gather and a
 * reduce-scatter: every rank's part). */
static double moved_bytes(const coll_group *g, int op, double bytes)
{
    return bytes * (op == OP_ALL_GATHER || op == OP_REDUCE_SCATTER || op == OP_REDUCE_SCATTER_BF16 ? g->world : 1);
}

/* c's next operation (op, its bytes per rank); NULL when out of memory. */
static captured_op *capture_add(coll_capture *c, int op, double bytes)
{
    if (c->n == c->cap) {
        const int cap = c->cap ? 2 * c->cap : 64;
        captured_op *grown = realloc(c->ops, sizeof *grown * (size_t)cap);
        if (!grown) return NULL;
        c->ops = grown;
        c->cap = cap;
    }
    captured_op *o = &c->ops[c->n++];
    *o = (captured_op){.op = op, .bytes = bytes, .done = NULL};
    return o;
}

/* One operation: a local copy on one rank, else NCCL or an MPI host task. */
static int issue(coll_group *g, int op, void *out, const void *in, size_t n, int peer, int from)
{
    const int bf16 = op == OP_ALL_REDUCE_BF16 || op == OP_REDUCE_SCATTER_BF16;
    const size_t elem = (op == OP_ALL_REDUCE || op == OP_REDUCE_SCATTER) ? sizeof(float) : bf16 ? 2 : 1;
    captured_op *captured = NULL;
    if (g->capture) { /* counted by each replay (coll_replayed), not now */
        if (!(captured = capture_add(g->capture, op, (double)n * (double)elem))) return GPT_ERR_OOM;
    } else {
        g->bytes += moved_bytes(g, op, (double)n * (double)elem);
    }
    if (g->world == 1) {
        if (op == OP_SEND || op == OP_RECV || op == OP_SENDRECV) {
            fprintf(stderr, "aebench: send/recv on one rank (no peer)\n");
            return GPT_ERR_INVALID;
        }
        /* all-reduce and broadcast leave the buffer as it is; scatter/gather copy. */
        if ((op == OP_REDUCE_SCATTER || op == OP_REDUCE_SCATTER_BF16 || op == OP_ALL_GATHER) && out != in)
            return gpt_memcpy_d2d(g->stream, out, in, n * elem);
        return GPT_OK;
    }
#ifdef COLL_HAVE_NCCL
    if (g->nccl) {
        cudaStream_t s = (cudaStream_t)gpt_stream_handle(g->stream);
        /* (captured: issued at each replay, coll_replayed) */
        const unsigned long seq = captured ? 0 : track_issue(g, op, (double)n * (double)elem, NULL);
        ncclResult_t rc = ncclSuccess;
        const char *what = "";
        switch (op) {
        case OP_ALL_REDUCE:
            rc = ncclAllReduce(out, out, n, ncclFloat32, ncclSum, g->nccl, s), what = "ncclAllReduce";
            break;
        case OP_REDUCE_SCATTER:
            rc = ncclReduceScatter(in, out, n, ncclFloat32, ncclSum, g->nccl, s),
            what = "ncclReduceScatter";
            break;
        case OP_ALL_REDUCE_BF16:
            rc = ncclAllReduce(out, out, n, ncclBfloat16, ncclSum, g->nccl, s), what = "ncclAllReduce (bf16)";
            break;
        case OP_REDUCE_SCATTER_BF16:
            rc = ncclReduceScatter(in, out, n, ncclBfloat16, ncclSum, g->nccl, s), what = "ncclReduceScatter (bf16)";
            break;
        case OP_ALL_GATHER:
            rc = ncclAllGather(in, out, n, ncclUint8, g->nccl, s), what = "ncclAllGather";
            break;
        case OP_BROADCAST:
            rc = ncclBroadcast(out, out, n, ncclUint8, peer, g->nccl, s), what = "ncclBroadcast";
            break;
        case OP_SEND: rc = ncclSend(in, n, ncclUint8, peer, g->nccl, s), what = "ncclSend"; break;
        case OP_RECV: rc = ncclRecv(out, n, ncclUint8, peer, g->nccl, s), what = "ncclRecv"; break;
        case OP_SENDRECV:
            /* one group: NCCL posts both before either must match */
            what = "ncclSend/ncclRecv";
            if ((rc = ncclGroupStart()) == ncclSuccess) {
                ncclResult_t a = ncclSend(in, n, ncclUint8, peer, g->nccl, s);
                ncclResult_t b = a == ncclSuccess ? ncclRecv(out, n, ncclUint8, from, g->nccl, s) : a;
                rc = ncclGroupEnd();
                if (b != ncclSuccess) rc = b;
            }
            break;
        }
        if (nccl_failed(rc, what)) return GPT_ERR_BACKEND;
        /* (its slot's event may still be pending from COLL_TRACKED operations ago: recording
         * it again only moves it later; a graph's operation has an event of its own, which
         * every replay records, an external record: coll_pending reads an event only for the
         * newest operation that has it) */
        cudaError_t e;
        if (captured) {
            cudaEvent_t done = NULL;
            if ((e = cudaEventCreateWithFlags(&done, cudaEventDisableTiming)) == cudaSuccess) {
                captured->done = (void *)done;
                e = cudaEventRecordWithFlags(done, s, cudaEventRecordExternal);
            }
        } else {
            e = cudaEventRecord(g->done[seq % COLL_TRACKED], s);
        }
        if (e != cudaSuccess) {
            fprintf(stderr, "aebench: cudaEventRecord (collective tracking) failed: %s\n", cudaGetErrorString(e));
            return GPT_ERR_BACKEND;
        }
        return GPT_OK;
    }
#endif
#ifdef AEBENCH_HAVE_MPI
    if (op != OP_ALL_REDUCE && op != OP_ALL_REDUCE_BF16 && n > (size_t)INT_MAX) {
        fprintf(stderr, "aebench: a collective of %zu elements is too large for MPI's int counts\n", n);
        return GPT_ERR_INVALID;
    }
    if (captured) {
        fprintf(stderr, "aebench: an MPI collective cannot be captured into a graph (a host task)\n");
        return GPT_ERR_INVALID;
    }
    mpi_task t = {.g = g, .op = op, .out = out, .in = in, .n = n, .peer = peer, .from = from};
    t.seq = track_issue(g, op, (double)n * (double)elem, NULL);
    return gpt_stream_host_task(g->stream, mpi_task_run, &t, sizeof t);
#else
    (void)out, (void)in, (void)peer, (void)from;
    fprintf(stderr, "aebench: %d ranks but this build has no MPI\n", g->world);
    return GPT_ERR_INVALID;
#endif
}

int coll_all_reduce_sum(coll_group *g, float *buf, size_t n)
{
    return issue(g, OP_ALL_REDUCE, buf, buf, n, 0, 0);
}

int coll_reduce_scatter_sum(coll_group *g, float *out, const float *in, size_t n)
{
    return issue(g, OP_REDUCE_SCATTER, out, in, n, 0, 0);
}

int coll_all_reduce_sum_act(coll_group *g, void *buf, size_t n, gpt_dtype dt)
{
    return issue(g, dt == GPT_BF16 ? OP_ALL_REDUCE_BF16 : OP_ALL_REDUCE, buf, buf, n, 0, 0);
}

int coll_reduce_scatter_sum_act(coll_group *g, void *out, const void *in, size_t n, gpt_dtype dt)
{
    return issue(g, dt == GPT_BF16 ? OP_REDUCE_SCATTER_BF16 : OP_REDUCE_SCATTER, out, in, n, 0, 0);
}

int coll_all_gather(coll_group *g, void *out, const void *in, size_t bytes)
{
    return issue(g, OP_ALL_GATHER, out, in, bytes, 0, 0);
}

int coll_broadcast(coll_group *g, void *buf, size_t bytes, int root)
{
    return issue(g, OP_BROADCAST, buf, buf, bytes, root, 0);
}

int coll_send(coll_group *g, const void *buf, size_t bytes, int peer)
{
    return issue(g, OP_SEND, NULL, buf, bytes, peer, 0);
}

int coll_recv(coll_group *g, void *buf, size_t bytes, int peer)
{
    return issue(g, OP_RECV, buf, NULL, bytes, peer, 0);
}

int coll_sendrecv(coll_group *g, const void *sendbuf, int to, void *recvbuf, int from, size_t bytes)
{
    return issue(g, OP_SENDRECV, recvbuf, sendbuf, bytes, to, from);
}

int coll_capture_begin(coll_group *g)
{
    if (g->capture) return GPT_ERR_INVALID;
    g->capture = calloc(1, sizeof *g->capture);
    return g->capture ? GPT_OK : GPT_ERR_OOM;
}

coll_capture *coll_capture_end(coll_group *g)
{
    coll_capture *c = g->capture;
    g->capture = NULL;
    return c;
}

int coll_replayed(coll_group *g, const coll_capture *c)
{
    for (int i = 0; c && i < c->n; i++) {
        g->bytes += moved_bytes(g, c->ops[i].op, c->ops[i].bytes);
#ifdef AEBENCH_HAVE_MPI
        if (g->world > 1 && g->have_track_lock) (void)track_issue(g, c->ops[i].op, c->ops[i].bytes, c->ops[i].done);
#endif
    }
    return GPT_OK;
}

void coll_capture_free(coll_capture *c)
{
    if (!c) return;
#ifdef COLL_HAVE_NCCL
    for (int i = 0; i < c->n; i++)
        if (c->ops[i].done) cudaEventDestroy((cudaEvent_t)c->ops[i].done);
#endif
    free(c->ops);
    free(c);
}

#ifdef AEBENCH_HAVE_MPI
/* A blocking host-side call begins (what) or ends (NULL), for coll_pending.  (The helpers take
 * a const group: the record is bookkeeping, not the group's meaning.) */
static void host_call(coll_group *g, const char *what)
{
    pthread_mutex_lock(&g->track_lock);
    g->host_call = what;
    g->host_call_at = mono_now();
    pthread_mutex_unlock(&g->track_lock);
}
#endif

int coll_pending(void *group, char *buf, size_t len)
{
    coll_group *g = group;
    if (!g || g->world == 1 || !g->have_track_lock) return 0;
    const char *label = g->label ? g->label : "a";
    int said = 0;
    pthread_mutex_lock(&g->track_lock);
    const double now = mono_now();
    if (g->host_call) {
        snprintf(buf, len, "%s on the %s group, for %.0f s", g->host_call, label, now - g->host_call_at);
        said = 1;
    } else {
        int nccl = 0;
        unsigned long oldest = 0;
#ifdef COLL_HAVE_NCCL
        if (g->nccl) {
            nccl = 1;
            /* The stream runs its operations in order: the oldest not complete follows the
             * newest that is.  From the newest down: an operation whose event a later one
             * shares (a graph's, recorded by every replay) says nothing of its own, and is
             * passed over; the first whose event is complete completes all before it. */
            unsigned long lo = g->completed + 1;
            if (g->issued > COLL_TRACKED && lo < g->issued - COLL_TRACKED + 1) lo = g->issued - COLL_TRACKED + 1;
            for (unsigned long k = g->issued; k >= lo; k--) {
                void *ev = g->ring[k % COLL_TRACKED].done;
                int shared = 0;
                for (unsigned long j = k + 1; j <= g->issued && !shared; j++) shared = g->ring[j % COLL_TRACKED].done == ev;
                if (shared) continue;
                /* (an error other than not-ready is the stream's, reported where it is waited on) */
                if (cudaEventQuery((cudaEvent_t)ev) != cudaErrorNotReady) {
                    g->completed = k;
                    break;
                }
                oldest = k;
            }
        }
#endif
        if (!nccl && g->completed < g->issued) oldest = g->completed + 1;
        if (oldest) {
            const coll_issued *op = &g->ring[oldest % COLL_TRACKED];
            const double mb = op->bytes / 1e6;
            snprintf(buf, len, "%s #%lu (%.*f MB) of the %s group, issued %.0f s ago, %s", op_name(op->op, nccl),
                     oldest, mb < 10 ? 2 : 0, mb, label, now - op->at,
                     nccl ? "not complete" : g->started >= oldest ? "in the call" : "queued behind its stream's work");
            said = 1;
        }
    }
    pthread_mutex_unlock(&g->track_lock);
    return said;
}

int coll_watch(coll_group *g, struct watchdog *dog, const char *label)
{
    g->label = label;
    if (!dog || g->world == 1) return 0;
    if (watchdog_add_probe(dog, coll_pending, g)) {
        fprintf(stderr, "aebench: the watchdog has no room for the %s group's probe\n", label);
        return -1;
    }
    g->dog = dog;
    return 0;
}

int coll_host_sum_doubles(const coll_group *g, double *values, int n)
{
    if (g->world == 1) return 0;
#ifdef AEBENCH_HAVE_MPI
    /* (gathered and summed in rank order, as the reductions on the stream are: the same
     * bits whichever ranks hold which parts of the sum) */
    double *all = malloc(sizeof *all * (size_t)n * (size_t)g->world);
    if (!all) return GPT_ERR_OOM;
    host_call((coll_group *)g, "a host-side MPI_Allgather of scalars to sum");
    int rc = mpi_failed(MPI_Allgather(values, n, MPI_DOUBLE, all, n, MPI_DOUBLE, g->host_comm),
                        "MPI_Allgather (host)") ? GPT_ERR_BACKEND : 0;
    host_call((coll_group *)g, NULL);
    for (int i = 0; !rc && i < n; i++) {
        double sum = all[i];
        for (int r = 1; r < g->world; r++) sum += all[(size_t)r * (size_t)n + (size_t)i];
        values[i] = sum;
    }
    free(all);
    return rc;
#else
    (void)values, (void)n;
    return GPT_ERR_INVALID;
#endif
}

int coll_host_all_gather(const coll_group *g, void *out, const void *in, size_t bytes)
{
    if (g->world == 1) {
        if (out != in) memmove(out, in, bytes);
        return 0;
    }
#ifdef AEBENCH_HAVE_MPI
    if (bytes > (size_t)INT_MAX) return GPT_ERR_INVALID;
    host_call((coll_group *)g, "a host-side MPI_Allgather");
    const int rc = mpi_failed(MPI_Allgather(in, (int)bytes, MPI_BYTE, out, (int)bytes, MPI_BYTE, g->host_comm),
                              "MPI_Allgather (host)") ? GPT_ERR_BACKEND : 0;
    host_call((coll_group *)g, NULL);
    return rc;
#else
    return GPT_ERR_INVALID;
#endif
}

#ifdef COLL_HAVE_NCCL
/* The ring of events coll_pending queries (no timing: the cheapest kind). */
static int nccl_track_events(coll_group *g)
{
    for (int i = 0; i < COLL_TRACKED; i++) {
        const cudaError_t e = cudaEventCreateWithFlags(&g->done[i], cudaEventDisableTiming);
        if (e != cudaSuccess) {
            fprintf(stderr, "aebench: cudaEventCreateWithFlags failed: %s\n", cudaGetErrorString(e));
            for (int j = 0; j < i; j++) cudaEventDestroy(g->done[j]);
            return GPT_ERR_BACKEND;
        }
    }
    g->have_done = 1;
    return GPT_OK;
}
#endif

/* A group's communicators: MPI_COMM_WORLD's duplicates (color < 0), or its split by color, the
 * group's ranks in the order of rank. */
#ifdef AEBENCH_HAVE_MPI
static int group_comm(int color, int rank, MPI_Comm *out)
{
    if (color < 0) return mpi_failed(MPI_Comm_dup(MPI_COMM_WORLD, out), "MPI_Comm_dup");
    return mpi_failed(MPI_Comm_split(MPI_COMM_WORLD, color, rank, out), "MPI_Comm_split");
}
#endif

static int open_group(coll_group **out, gpt_backend *be, int color, int rank, int world, int max_ctas);

int coll_open(coll_group **out, gpt_backend *be, int rank, int world)
{
    return open_group(out, be, -1, rank, world, 0);
}

int coll_open_capped(coll_group **out, gpt_backend *be, int rank, int world, int max_ctas)
{
    return open_group(out, be, -1, rank, world, max_ctas);
}

int coll_open_split(coll_group **out, gpt_backend *be, int color, int rank, int world)
{
    return open_group(out, be, color < 0 ? 0 : color, rank, world, 0);
}

static int open_group(coll_group **out, gpt_backend *be, int color, int rank, int world, int max_ctas)
{
    (void)max_ctas; /* (NCCL only) */
    (void)color;    /* (MPI only: a build without MPI has one rank) */
    *out = NULL;
    coll_group *g = calloc(1, sizeof *g);
    if (!g) return GPT_ERR_OOM;
    g->be = be;
    g->rank = rank;
    g->world = world;
    int rc = be->ops->stream_create(be, &g->stream);
    if (rc) {
        free(g);
        return rc;
    }
    *out = g;
    if (world == 1) return GPT_OK;
    if (pthread_mutex_init(&g->track_lock, NULL)) {
        fprintf(stderr, "aebench: a collective group's lock cannot be made\n");
        return GPT_ERR_BACKEND;
    }
    g->have_track_lock = 1;
#ifdef AEBENCH_HAVE_MPI
    if (group_comm(color, rank, &g->host_comm)) return GPT_ERR_BACKEND;
    g->have_host_comm = 1;
    if (gpt_stream_handle(g->stream) == NULL) {
        if (group_comm(color, rank, &g->comm)) return GPT_ERR_BACKEND;
        g->have_comm = 1;
        return GPT_OK;
    }
#ifdef COLL_HAVE_NCCL
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (rank == 0 && nccl_failed(ncclGetUniqueId(&id), "ncclGetUniqueId")) {
        /* The others are already waiting in the broadcast: end the job rather than hang. */
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (mpi_failed(MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, g->host_comm), "MPI_Bcast (NCCL id)"))
        return GPT_ERR_BACKEND;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 17, 0)
    if (max_ctas > 0) {
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.minCTAs = 1;
        config.maxCTAs = max_ctas;
        if (nccl_failed(ncclCommInitRankConfig(&g->nccl, world, id, rank, &config), "ncclCommInitRankConfig")) {
            g->nccl = NULL;
            return GPT_ERR_BACKEND;
        }
        return nccl_track_events(g);
    }
#endif
    if (nccl_failed(ncclCommInitRank(&g->nccl, world, id, rank), "ncclCommInitRank")) {
        g->nccl = NULL;
        return GPT_ERR_BACKEND;
    }
    return nccl_track_events(g);
#else
    fprintf(stderr, "aebench: this backend's streams need NCCL, and this build has none\n");
    return GPT_ERR_INVALID;
#endif
#else
    fprintf(stderr, "aebench: %d ranks but this build has no MPI\n", world);
    return GPT_ERR_INVALID;
#endif
}

void coll_close(coll_group *g)
{
    if (!g) return;
    watchdog_remove_probe(g->dog, g); /* (before anything it reads goes) */
    if (g->stream) {
        gpt_stream_sync(g->stream);
        g->be->ops->stream_destroy(g->stream);
    }
#ifdef COLL_HAVE_NCCL
    if (g->have_done)
        for (int i = 0; i < COLL_TRACKED; i++) cudaEventDestroy(g->done[i]);
#endif
    coll_capture_free(g->capture); /* (a capture never ended) */
    if (g->have_track_lock) pthread_mutex_destroy(&g->track_lock);
#ifdef COLL_HAVE_NCCL
    if (g->nccl) nccl_failed(ncclCommDestroy(g->nccl), "ncclCommDestroy");
#endif
#ifdef AEBENCH_HAVE_MPI
    if (g->have_comm) mpi_failed(MPI_Comm_free(&g->comm), "MPI_Comm_free");
    if (g->have_host_comm) mpi_failed(MPI_Comm_free(&g->host_comm), "MPI_Comm_free");
#endif
    free(g);
}

/* ---- one-sided reads (see the header) --------------------------------------------------- */

struct coll_window {
    coll_group *g;
    size_t bytes;
#ifdef AEBENCH_HAVE_MPI
    MPI_Win win; /* the CPU backend's: gets by MPI, a passive epoch on every rank throughout */
    int have_win, locked;
#endif
#ifdef COLL_HAVE_NCCL
    void **peer_base; /* world entries: each peer's allocation as mapped here (NULL: self) */
#endif
};

static void say(char *why, size_t whylen, const char *text)
{
    if (why && whylen) snprintf(why, whylen, "%s", text);
}

#ifdef COLL_HAVE_NCCL
static int cuda_failed(cudaError_t e, const char *what)
{
    if (e == cudaSuccess) return 0;
    fprintf(stderr, "aebench: %s failed: %s\n", what, cudaGetErrorString(e));
    return -1;
}

/* What a rank tells the others: its GPU (by PCI address: device numbers differ between
 * processes that see different GPUs) and the handle of its window's allocation. */
typedef struct ipc_entry {
    char bus[32];
    cudaIpcMemHandle_t handle;
    int exported; /* the handle was made (e.g. not for memory of a pool, which IPC refuses) */
} ipc_entry;

/* Map every peer's allocation (a collective decision: all map or none).  0, or -1 with the
 * reason (GPT_ERR_BACKEND where a CUDA call failed outright). */
static int cuda_window_map(coll_window *w, void *base, char *why, size_t whylen)
{
    coll_group *g = w->g;
    int dev = 0;
    ipc_entry me;
    memset(&me, 0, sizeof me);
    /* (every rank reaches the all-gather below whatever happens here, so that none waits
     * there for one that gave up) */
    int rc = GPT_OK;
    char mine[200] = "";
    if (cuda_failed(cudaGetDevice(&dev), "cudaGetDevice") ||
        cuda_failed(cudaDeviceGetPCIBusId(me.bus, (int)sizeof me.bus, dev), "cudaDeviceGetPCIBusId"))
        rc = GPT_ERR_BACKEND;
    else if (cudaIpcGetMemHandle(&me.handle, base) == cudaSuccess)
        me.exported = 1;
    else {
        (void)cudaGetLastError();
        snprintf(mine, sizeof mine, "rank %d's arrays cannot be shared (cudaIpcGetMemHandle)", g->rank);
    }
    ipc_entry *all = calloc((size_t)g->world, sizeof *all);
    w->peer_base = calloc((size_t)g->world, sizeof *w->peer_base);
    if (!all || !w->peer_base) {
        free(all);
        return GPT_ERR_OOM; /* (a few hundred bytes: the job is lost anyway) */
    }
    if (coll_host_all_gather(g, all, &me, sizeof me)) rc = GPT_ERR_BACKEND;
    int ok = rc == GPT_OK && me.exported;
    for (int p = 0; ok && p < g->world; p++) {
        if (p == g->rank) continue;
        if (!all[p].exported) {
            snprintf(mine, sizeof mine, "rank %d's arrays cannot be shared (cudaIpcGetMemHandle)", p);
            ok = 0;
            break;
        }
        int peer_dev = -1, can = 0;
        if (cudaDeviceGetByPCIBusId(&peer_dev, all[p].bus) != cudaSuccess) {
            (void)cudaGetLastError(); /* (not sticky: the GPU is only hidden from this rank) */
            snprintf(mine, sizeof mine, "rank %d does not see rank %d's GPU (%s)", g->rank, p, all[p].bus);
            ok = 0;
        } else if (cuda_failed(cudaDeviceCanAccessPeer(&can, dev, peer_dev), "cudaDeviceCanAccessPeer")) {
            rc = GPT_ERR_BACKEND, ok = 0;
        } else if (!can) {
            snprintf(mine, sizeof mine, "rank %d's GPU cannot reach rank %d's (no peer access)", g->rank, p);
            ok = 0;
        } else if (cudaIpcOpenMemHandle(&w->peer_base[p], all[p].handle, cudaIpcMemLazyEnablePeerAccess) !=
                   cudaSuccess) {
            (void)cudaGetLastError();
            w->peer_base[p] = NULL;
            snprintf(mine, sizeof mine, "rank %d cannot map rank %d's GPU memory (CUDA IPC)", g->rank, p);
            ok = 0;
        }
    }
    free(all);
    int all_ok = ok;
    if (mpi_failed(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, g->host_comm), "MPI_Allreduce (host)"))
        return GPT_ERR_BACKEND;
    if (rc) return rc;
    if (!all_ok) {
        say(why, whylen, mine[0] ? mine : "another rank cannot map its peers' GPU memory (CUDA IPC)");
        return -1;
    }
    return 0;
}
#endif

int coll_window_open(coll_window **out, coll_group *g, void *base, size_t bytes, char *why, size_t whylen)
{
    *out = NULL;
    say(why, whylen, "");
    if (g->world == 1) {
        say(why, whylen, "one rank: no peer");
        return GPT_OK;
    }
#ifdef AEBENCH_HAVE_MPI
    /* one machine: every rank's node communicator is the whole group */
    MPI_Comm node;
    int node_size = 0, here = 0, everywhere = 0;
    if (mpi_failed(MPI_Comm_split_type(g->host_comm, MPI_COMM_TYPE_SHARED, g->rank, MPI_INFO_NULL, &node),
                   "MPI_Comm_split_type") ||
        mpi_failed(MPI_Comm_size(node, &node_size), "MPI_Comm_size") ||
        mpi_failed(MPI_Comm_free(&node), "MPI_Comm_free"))
        return GPT_ERR_BACKEND;
    here = node_size == g->world;
    if (mpi_failed(MPI_Allreduce(&here, &everywhere, 1, MPI_INT, MPI_MIN, g->host_comm), "MPI_Allreduce (host)"))
        return GPT_ERR_BACKEND;
    if (!everywhere) {
        say(why, whylen, "the ranks are on more than one machine");
        return GPT_OK;
    }
    coll_window *w = calloc(1, sizeof *w);
    if (!w) return GPT_ERR_OOM;
    w->g = g;
    w->bytes = bytes;
    if (gpt_stream_handle(g->stream) == NULL) {
        /* the CPU backend's device memory is host memory: an MPI window on it.  Not every MPI
         * can expose memory it did not allocate: Open MPI 4.1 under MPI_THREAD_MULTIPLE has no
         * one-sided component for it on one machine (MPI_ERR_WIN, measured in
         * bench/results/2026-11-29g-h200-openmpi-launch).  Where no rank could, there is no
         * window and the chunks are sent; where some could and some not, the run ends. */
        const int created = MPI_Win_create(base, (MPI_Aint)bytes, 1, MPI_INFO_NULL, g->host_comm, &w->win);
        int mine = created == MPI_SUCCESS, all = 0, any = 0;
        if (mpi_failed(MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, g->host_comm), "MPI_Allreduce (window)") ||
            mpi_failed(MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, g->host_comm), "MPI_Allreduce (window)")) {
            free(w); /* (a window made here is left to MPI_Finalize: freeing it is collective) */
            return GPT_ERR_BACKEND;
        }
        if (!all) {
            if (any) {
                comm_mpi_failed(created == MPI_SUCCESS ? MPI_ERR_WIN : created,
                                "MPI_Win_create (on some ranks only: the ranks cannot agree on a transport)");
                free(w);
                return GPT_ERR_BACKEND;
            }
            char msg[MPI_MAX_ERROR_STRING] = "";
            int len = 0;
            MPI_Error_string(created, msg, &len);
            if (why && whylen)
                snprintf(why, whylen, "this MPI cannot make a window on this memory (MPI_Win_create: %s)", msg);
            free(w);
            return GPT_OK;
        }
        w->have_win = 1;
        if (mpi_failed(MPI_Win_set_errhandler(w->win, MPI_ERRORS_RETURN), "MPI_Win_set_errhandler") ||
            mpi_failed(MPI_Win_lock_all(MPI_MODE_NOCHECK, w->win), "MPI_Win_lock_all")) {
            coll_window_close(w);
            return GPT_ERR_BACKEND;
        }
        w->locked = 1;
        *out = w;
        return GPT_OK;
    }
#ifdef COLL_HAVE_NCCL
    const int rc = cuda_window_map(w, base, why, whylen);
    if (rc == 0) {
        *out = w;
        return GPT_OK;
    }
    coll_window_close(w);
    return rc == -1 ? GPT_OK : rc;
#else
    free(w);
    say(why, whylen, "this build has no GPU transport");
    return GPT_OK;
#endif
#else
    (void)base, (void)bytes;
    say(why, whylen, "this build has no MPI");
    return GPT_OK;
#endif
}

#ifdef AEBENCH_HAVE_MPI
/* A get or a sync on an MPI window, made by the stream's worker thread. */
typedef struct window_task {
    coll_window *w;
    char *dst;
    int peer, sync;
    size_t offset, bytes;
} window_task;

static int window_task_run(void *arg)
{
    const window_task *t = arg;
    if (t->sync) return mpi_failed(MPI_Win_sync(t->w->win), "MPI_Win_sync");
    for (size_t done = 0; done < t->bytes;) {
        const size_t n = t->bytes - done < (size_t)INT_MAX ? t->bytes - done : (size_t)INT_MAX;
        if (mpi_failed(MPI_Get(t->dst + done, (int)n, MPI_BYTE, t->peer, (MPI_Aint)(t->offset + done), (int)n,
                               MPI_BYTE, t->w->win), "MPI_Get"))
            return -1;
        done += n;
    }
    /* the data is here when the task ends: the stream's later work may read it */
    return mpi_failed(MPI_Win_flush(t->peer, t->w->win), "MPI_Win_flush");
}
#endif

int coll_window_get(coll_window *w, gpt_stream *s, void *dst, int peer, size_t offset, size_t bytes)
{
    if (peer < 0 || peer >= w->g->world || peer == w->g->rank || offset > w->bytes || bytes > w->bytes - offset) {
        fprintf(stderr, "aebench: a window read of %zu bytes at %zu from rank %d is outside it\n", bytes, offset,
                peer);
        return GPT_ERR_INVALID;
    }
    w->g->bytes += (double)bytes;
#ifdef COLL_HAVE_NCCL
    if (w->peer_base)
        return cuda_failed(cudaMemcpyAsync(dst, (const char *)w->peer_base[peer] + offset, bytes,
                                           cudaMemcpyDeviceToDevice, (cudaStream_t)gpt_stream_handle(s)),
                           "cudaMemcpyAsync (peer read)") ? GPT_ERR_BACKEND : GPT_OK;
#endif
#ifdef AEBENCH_HAVE_MPI
    window_task t = {.w = w, .dst = dst, .peer = peer, .sync = 0, .offset = offset, .bytes = bytes};
    return gpt_stream_host_task(s, window_task_run, &t, sizeof t);
#else
    (void)s, (void)dst;
    return GPT_ERR_INVALID;
#endif
}

int coll_window_expose(coll_window *w, gpt_stream *s)
{
#ifdef COLL_HAVE_NCCL
    if (w->peer_base) return GPT_OK;
#endif
#ifdef AEBENCH_HAVE_MPI
    window_task t = {.w = w, .dst = NULL, .peer = 0, .sync = 1, .offset = 0, .bytes = 0};
    return gpt_stream_host_task(s, window_task_run, &t, sizeof t);
#else
    (void)w, (void)s;
    return GPT_OK;
#endif
}

const char *coll_window_kind(const coll_window *w)
{
#ifdef COLL_HAVE_NCCL
    if (w->peer_base) return "CUDA IPC";
#endif
    (void)w;
    return "MPI one-sided";
}

void coll_window_close(coll_window *w)
{
    if (!w) return;
#ifdef COLL_HAVE_NCCL
    if (w->peer_base) {
        for (int p = 0; p < w->g->world; p++)
            if (w->peer_base[p]) cuda_failed(cudaIpcCloseMemHandle(w->peer_base[p]), "cudaIpcCloseMemHandle");
        free(w->peer_base);
    }
#endif
#ifdef AEBENCH_HAVE_MPI
    if (w->locked) mpi_failed(MPI_Win_unlock_all(w->win), "MPI_Win_unlock_all");
    if (w->have_win) mpi_failed(MPI_Win_free(&w->win), "MPI_Win_free");
#endif
    free(w);
}
