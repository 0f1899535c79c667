/*
 * collectives.h — data-parallel communication between ranks, issued on a stream like copies.
 *
 * A coll_group is one communicator with its own stream.  Every operation is queued on that
 * stream and returns at once; it starts after the work issued on the stream before it (an
 * engine makes the stream wait on the event that says a gradient is complete) and the
 * engine waits on an event recorded after it before it reads the result.  Several groups
 * (e.g. one for gradient reductions, one for parameter gathers) run concurrently, each in
 * its own issue order; every rank must issue the same operations on a group in the same
 * order, as with any collective.
 *
 * Transports, no home-made one:
 *   CUDA backend  NCCL, one communicator per group (its unique id broadcast over MPI), the
 *                 operation enqueued on the group's cudaStream_t;
 *   CPU backend   MPI, one duplicated communicator per group, the blocking call made by the
 *                 group stream's worker thread (a host task), so that overlap with compute
 *                 and a missing event between them are real in CI.
 * On one rank every operation is a local copy (or nothing), with no MPI or NCCL at all.
 *
 * Element type: reductions are fp32 sums; gathers, broadcasts and point-to-point moves are
 * bytes.  Counts are per rank where the name says so.
 */
#ifndef AEBENCH_COLLECTIVES_H
#define AEBENCH_COLLECTIVES_H

#include "../../kernels/gpt.h"

#include <stddef.h>

typedef struct coll_group coll_group;

/* Open a group over all ranks (rank, world as MPI gives them) on backend be: its stream,
 * and the communicator (collective: every rank must call it, in the same order for
 * several groups).  0 or a negative gpt_status (the reason on stderr). */
int coll_open(coll_group **out, gpt_backend *be, int rank, int world);
/* The same with its NCCL kernels limited to max_ctas thread blocks (0: NCCL's choice): for
 * traffic that runs beside the training's kernels and should take few SMs from them (MPI on
 * the CPU backend: no effect). */
int coll_open_capped(coll_group **out, gpt_backend *be, int rank, int world, int max_ctas);
/* A group of some of the ranks: those that give the same color (0 or more), rank being this
 * one's place in it (0 .. world - 1, the order of its ranks) and world its size.  Collective
 * over every rank of the job (each calls it, with a group of the same size: a tensor-, data-
 * or pipeline-parallel group of a layout); point-to-point peers are ranks of the group. */
int coll_open_split(coll_group **out, gpt_backend *be, int color, int rank, int world);
/* Drains the stream and releases the communicator (safe on NULL). */
void coll_close(coll_group *g);

/* The group's stream: make it wait on events before an operation, record events after. */
gpt_stream *coll_stream(coll_group *g);
int coll_rank(const coll_group *g);
int coll_world(const coll_group *g);
/* Bytes this rank has handed to operations of the group since the last call (payload: a
 * reduction of n floats counts 4n, a gather of b bytes per rank counts b·world). */
double coll_take_bytes(coll_group *g);

/* What the group is busy with, for a watchdog that sees no progress: the oldest operation
 * issued and not complete ("ncclAllReduce #12 (4.2 MB) of the gradients group, issued 31 s
 * ago, running"), or the host-side call in progress.  Writes one phrase into buf and returns
 * 1; 0 when nothing is pending.  Safe from any thread (a watchdog_probe). */
int coll_pending(void *group, char *buf, size_t len);
/* Names the group (label: a string that lives as long as the group) and makes it one of dog's
 * probes until coll_close.  NULL dog: nothing.  0, or -1 when dog has no room for it. */
struct watchdog;
int coll_watch(coll_group *g, struct watchdog *dog, const char *label);

/* buf (n floats, device) = the sum over ranks of buf, on every rank. */
int coll_all_reduce_sum(coll_group *g, float *buf, size_t n);
/* out (n floats) = the sum over ranks of in[rank·n, (rank+1)·n); in holds world·n floats.
 * out may be in + rank·n (in place). */
int coll_reduce_scatter_sum(coll_group *g, float *out, const float *in, size_t n);
/* The same two on n elements of an activation type (fp32: the functions above): bf16 on the GPU
 * as NCCL sums it (ncclBfloat16), on the CPU backend widened to fp32, summed in rank order and
 * rounded once (NCCL's result on two ranks).  For tensor parallelism's activations. */
int coll_all_reduce_sum_act(coll_group *g, void *buf, size_t n, gpt_dtype dt);
int coll_reduce_scatter_sum_act(coll_group *g, void *out, const void *in, size_t n, gpt_dtype dt);
/* out (world·bytes) = every rank's in (bytes each) in rank order; in may be
 * out + rank·bytes (in place). */
int coll_all_gather(coll_group *g, void *out, const void *in, size_t bytes);
/* buf (bytes) = root's buf on every rank. */
int coll_broadcast(coll_group *g, void *buf, size_t bytes, int root);
/* Point to point: a send on one rank must meet a recv of the same size on its peer, in
 * the same position of both groups' issue order. */
int coll_send(coll_group *g, const void *buf, size_t bytes, int peer);
int coll_recv(coll_group *g, void *buf, size_t bytes, int peer);
/* Both at once (no order between them, so that a ring of them cannot deadlock): send bytes
 * from sendbuf to rank `to` while receiving as many into recvbuf from rank `from`. */
int coll_sendrecv(coll_group *g, const void *sendbuf, int to, void *recvbuf, int from, size_t bytes);

/* ---- CUDA graphs: a group's operations captured with the stream that drew its stream in ----
 *
 * Between coll_capture_begin and coll_capture_end (around a graph's capture), each operation
 * issued on g is captured, not run (NCCL: every rank must capture the same ones, in the same
 * order), and kept in a manifest with an event the graph records after it.  After each launch
 * of the graph, coll_replayed counts the manifest's operations as issued then: their bytes
 * (coll_take_bytes) and the watchdog's view (coll_pending names a replayed operation that does
 * not complete as it names an issued one).  The CPU backend has no graphs: an MPI operation
 * issued while capturing is refused. */
typedef struct coll_capture coll_capture;
/* GPT_ERR_INVALID when a capture is already open. */
int coll_capture_begin(coll_group *g);
/* The manifest (the caller's, for coll_capture_free; NULL when none was begun). */
coll_capture *coll_capture_end(coll_group *g);
int coll_replayed(coll_group *g, const coll_capture *c);
/* After the graphs that replay it are destroyed (safe on NULL). */
void coll_capture_free(coll_capture *c);

/* ---- one-sided reads: a window of device memory its peers read by copy engine -------------
 *
 * Every rank exposes one allocation; a peer reads any part of it into its own device memory,
 * with no work on the exposing rank: the copy engines of the reading GPU over NVLink (CUDA
 * IPC: the ranks on one machine, each pair of GPUs able to reach each other), MPI one-sided
 * gets on the CPU backend.  Unlike a sendrecv it runs no kernel, so it takes no SMs from the
 * training beside it; it also has no matching: the caller orders the reads against the
 * exposing rank's writes (e.g. by a sendrecv token each way).
 *
 * coll_window_open is collective over g.  base: the start of a dev_alloc allocation (CUDA
 * IPC maps whole allocations), bytes of it exposed (the same size on every rank).  Where the
 * ranks cannot read each other so (other machines, a GPU hidden from a rank, no peer access,
 * one rank), *out is NULL, the return is 0, and why (if given) says what is missing: the
 * caller uses send/recv instead.  Every rank gets the same answer. */
typedef struct coll_window coll_window;
int coll_window_open(coll_window **out, coll_group *g, void *base, size_t bytes, char *why, size_t whylen);
/* Queued on stream s: dst (bytes, this rank's device memory) = peer's window [offset, offset +
 * bytes).  Returns at once, like a copy. */
int coll_window_get(coll_window *w, gpt_stream *s, void *dst, int peer, size_t offset, size_t bytes);
/* Queued on stream s: what this rank wrote into its window before it (on s's order) is what
 * the peers' later reads see (MPI_Win_sync; nothing on CUDA, where a kernel's writes are
 * visible to the copy engines once it ends). */
int coll_window_expose(coll_window *w, gpt_stream *s);
/* How w's reads go, for the log: "CUDA IPC" or "MPI one-sided". */
const char *coll_window_kind(const coll_window *w);
/* Collective; the streams that read through w must be drained (safe on NULL). */
void coll_window_close(coll_window *w);

/* Host-side, blocking, for per-step scalars (loss sums, norms) and checks: sum of n
 * doubles over ranks into every rank (in place).  Not on a stream. */
int coll_host_sum_doubles(const coll_group *g, double *values, int n);
/* Host-side all-gather of bytes per rank (out holds world·bytes). */
int coll_host_all_gather(const coll_group *g, void *out, const void *in, size_t bytes);

#endif
