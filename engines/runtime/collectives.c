/*
 * collectives.c — coll_group over NCCL (CUDA backend) or MPI (CPU backend); see the header.
 *
 * MPI path: each operation is a host task on the group's stream (gpt_stream_host_task): the
 * stream's worker thread makes the blocking MPI call when the stream reaches it, so the
 * call starts only after the events the stream waits on, exactly as NCCL's kernel would on
 * a GPU stream.  Each group has two communicators duplicated from MPI_COMM_WORLD: one for
 * the stream's operations and one for the host-side helpers, because two threads must
 * never run collectives on one communicator at the same time (their order would be
 * undefined).  MPI counts are ints: larger operations are split where the split keeps the
 * meaning (all-reduce), refused otherwise (the CPU backend trains small models).
 *
 * NCCL path: ncclCommInitRank with a unique id that rank 0 makes and broadcasts over MPI;
 * operations are enqueued on the group's cudaStream_t.  NCCL's results are checked at issue;
 * an asynchronous failure (a peer gone) ends the job through the launcher.
 */
#include "collectives.h"

#include "comm.h"

#include <limits.h>
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

struct coll_group {
    gpt_backend *be;
    gpt_stream *stream;
    int rank, world;
    double bytes; /* handed to operations since coll_take_bytes */
#ifdef AEBENCH_HAVE_MPI
    MPI_Comm comm;      /* the stream's operations (MPI path) */
    MPI_Comm host_comm; /* host-side helpers, from the calling thread */
    int have_comm, have_host_comm;
#endif
#ifdef COLL_HAVE_NCCL
    ncclComm_t nccl; /* NULL on the MPI path or on one rank */
#endif
};

enum coll_op { OP_ALL_REDUCE, OP_REDUCE_SCATTER, OP_ALL_GATHER, OP_BROADCAST, OP_SEND, OP_RECV, OP_SENDRECV };

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
    int op;
    void *out;
    const void *in;
    size_t n;  /* floats (reductions) or bytes */
    int peer;  /* root, or the peer of a send/recv (sendrecv: the one sent to) */
    int from;  /* sendrecv: the peer received from */
} mpi_task;

static int mpi_task_run(void *arg)
{
    const mpi_task *t = arg;
    coll_group *g = t->g;
    switch (t->op) {
    case OP_ALL_REDUCE: {
        float *buf = t->out;
        for (size_t done = 0; done < t->n;) {
            const size_t chunk = t->n - done < (size_t)INT_MAX ? t->n - done : (size_t)INT_MAX;
            if (mpi_failed(MPI_Allreduce(MPI_IN_PLACE, buf + done, (int)chunk, MPI_FLOAT, MPI_SUM,
                                         g->comm), "MPI_Allreduce"))
                return -1;
            done += chunk;
        }
        return 0;
    }
    case OP_REDUCE_SCATTER: {
        float *out = t->out;
        const float *in = t->in;
        if (out == in + (size_t)g->rank * t->n) {
            /* In place: MPI leaves this rank's block at the start of the buffer. */
            float *buf = (float *)in;
            if (mpi_failed(MPI_Reduce_scatter_block(MPI_IN_PLACE, buf, (int)t->n, MPI_FLOAT,
                                                    MPI_SUM, g->comm), "MPI_Reduce_scatter_block"))
                return -1;
            if (g->rank != 0) memmove(out, buf, t->n * sizeof(float));
            return 0;
        }
        return mpi_failed(MPI_Reduce_scatter_block(in, out, (int)t->n, MPI_FLOAT, MPI_SUM, g->comm),
                          "MPI_Reduce_scatter_block");
    }
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

/* One operation: a local copy on one rank, else NCCL or an MPI host task. */
static int issue(coll_group *g, int op, void *out, const void *in, size_t n, int peer, int from)
{
    const size_t elem = (op == OP_ALL_REDUCE || op == OP_REDUCE_SCATTER) ? sizeof(float) : 1;
    g->bytes += (double)n * (double)elem * (op == OP_ALL_GATHER || op == OP_REDUCE_SCATTER ? g->world : 1);
    if (g->world == 1) {
        if (op == OP_SEND || op == OP_RECV || op == OP_SENDRECV) {
            fprintf(stderr, "aebench: send/recv on one rank (no peer)\n");
            return GPT_ERR_INVALID;
        }
        /* all-reduce and broadcast leave the buffer as it is; scatter/gather copy. */
        if ((op == OP_REDUCE_SCATTER || op == OP_ALL_GATHER) && out != in)
            return gpt_memcpy_d2d(g->stream, out, in, n * elem);
        return GPT_OK;
    }
#ifdef COLL_HAVE_NCCL
    if (g->nccl) {
        cudaStream_t s = (cudaStream_t)gpt_stream_handle(g->stream);
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
        return nccl_failed(rc, what) ? GPT_ERR_BACKEND : GPT_OK;
    }
#endif
#ifdef AEBENCH_HAVE_MPI
    if (op != OP_ALL_REDUCE && n > (size_t)INT_MAX) {
        fprintf(stderr, "aebench: a collective of %zu elements is too large for MPI's int counts\n", n);
        return GPT_ERR_INVALID;
    }
    mpi_task t = {.g = g, .op = op, .out = out, .in = in, .n = n, .peer = peer, .from = from};
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

int coll_host_sum_doubles(const coll_group *g, double *values, int n)
{
    if (g->world == 1) return 0;
#ifdef AEBENCH_HAVE_MPI
    return mpi_failed(MPI_Allreduce(MPI_IN_PLACE, values, n, MPI_DOUBLE, MPI_SUM, g->host_comm),
                      "MPI_Allreduce (host)") ? GPT_ERR_BACKEND : 0;
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
    return mpi_failed(MPI_Allgather(in, (int)bytes, MPI_BYTE, out, (int)bytes, MPI_BYTE, g->host_comm),
                      "MPI_Allgather (host)") ? GPT_ERR_BACKEND : 0;
#else
    return GPT_ERR_INVALID;
#endif
}

int coll_open(coll_group **out, gpt_backend *be, int rank, int world)
{
    return coll_open_capped(out, be, rank, world, 0);
}

int coll_open_capped(coll_group **out, gpt_backend *be, int rank, int world, int max_ctas)
{
    (void)max_ctas; /* (NCCL only) */
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
#ifdef AEBENCH_HAVE_MPI
    if (mpi_failed(MPI_Comm_dup(MPI_COMM_WORLD, &g->host_comm), "MPI_Comm_dup")) return GPT_ERR_BACKEND;
    g->have_host_comm = 1;
    if (gpt_stream_handle(g->stream) == NULL) {
        if (mpi_failed(MPI_Comm_dup(MPI_COMM_WORLD, &g->comm), "MPI_Comm_dup")) return GPT_ERR_BACKEND;
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
        return GPT_OK;
    }
#endif
    if (nccl_failed(ncclCommInitRank(&g->nccl, world, id, rank), "ncclCommInitRank")) {
        g->nccl = NULL;
        return GPT_ERR_BACKEND;
    }
    return GPT_OK;
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
    if (g->stream) {
        gpt_stream_sync(g->stream);
        g->be->ops->stream_destroy(g->stream);
    }
#ifdef COLL_HAVE_NCCL
    if (g->nccl) nccl_failed(ncclCommDestroy(g->nccl), "ncclCommDestroy");
#endif
#ifdef AEBENCH_HAVE_MPI
    if (g->have_comm) mpi_failed(MPI_Comm_free(&g->comm), "MPI_Comm_free");
    if (g->have_host_comm) mpi_failed(MPI_Comm_free(&g->host_comm), "MPI_Comm_free");
#endif
    free(g);
}
