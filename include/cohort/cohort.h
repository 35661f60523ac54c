/* SPDX-License-Identifier: BSD-3-Clause */
/* cohort: collective communication for distributed training.
 *
 * Public C API (C99, stable). Every function that can fail returns a cohort_status_t; on failure
 * cohort_last_error() holds a human message saying what failed, where, and what to try.
 *
 * Bad arguments never crash: a NULL handle or out pointer, a dtype or op out of range, a root
 * that is not a rank, a count whose byte size overflows, buffers that overlap other than in the
 * documented in-place forms, a call on an aborted communicator or one overlapping another call
 * on the same communicator (see "Threads" below) are refused with COHORT_ERR_INVALID_ARG (COHORT_ERR_ABORTED after
 * an abort) and a message naming the function, the argument and its value. Such a refusal
 * happens before anything is sent, so the call may be retried with good arguments; but the other
 * ranks are not told, and wait in the collective until COHORT_TIMEOUT unless they are refused too.
 * A communicator destroyed (its memory freed) must not be used again: that is detected only
 * while its memory still reads as a destroyed communicator, which nothing guarantees.
 */
#ifndef COHORT_COHORT_H
#define COHORT_COHORT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "cohort/version.h"   /* COHORT_VERSION_MAJOR, _MINOR, _PATCH, _STRING */

/* Marks the functions libcohort.so exports (it is built with -fvisibility=hidden, and a version
 * script lists the same functions). */
#ifndef COHORT_API
#if defined(__GNUC__)
#define COHORT_API __attribute__((visibility("default")))
#else
#define COHORT_API
#endif
#endif

/* Negative values are errors (as in libfabric). */
typedef enum {
    COHORT_SUCCESS = 0,
    COHORT_IN_PROGRESS = 1,
    COHORT_ERR_INVALID_ARG = -1,
    COHORT_ERR_NO_MEMORY = -2,
    COHORT_ERR_SYSTEM = -3,
    COHORT_ERR_TRANSPORT = -4,
    COHORT_ERR_PEER_LOST = -5,
    COHORT_ERR_TIMEOUT = -6,
    COHORT_ERR_ABORTED = -7,
    COHORT_ERR_UNSUPPORTED = -8,
    COHORT_ERR_MISMATCH = -9,
    COHORT_ERR_PLUGIN = -10,
    COHORT_ERR_INTERNAL = -11
} cohort_status_t;

typedef enum {
    COHORT_INT8, COHORT_UINT8, COHORT_INT32, COHORT_UINT32, COHORT_INT64,
    COHORT_UINT64, COHORT_FLOAT16, COHORT_BFLOAT16, COHORT_FLOAT32,
    COHORT_FLOAT64
} cohort_dtype_t;
#define COHORT_DTYPE_COUNT 10

typedef enum { COHORT_SUM, COHORT_PROD, COHORT_MIN, COHORT_MAX, COHORT_AVG } cohort_op_t;
#define COHORT_OP_COUNT 5

typedef struct cohort_comm cohort_comm_t;        /* opaque */
typedef struct cohort_request cohort_request_t;  /* opaque */

COHORT_API
const char *cohort_strerror(cohort_status_t status);
/* Thread-local: what failed, where, and what to do. Never NULL (empty string if nothing failed). */
COHORT_API
const char *cohort_last_error(void);
COHORT_API
const char *cohort_version(void);

/* Size in bytes of one element of dtype, 0 for an unknown dtype. cohort_strerror of a value that
 * is not a cohort_status_t: "unknown status". */
COHORT_API
size_t cohort_dtype_size(cohort_dtype_t dtype);
/* "float32", "sum", ... ; "?" for unknown values. */
COHORT_API
const char *cohort_dtype_name(cohort_dtype_t dtype);
COHORT_API
const char *cohort_op_name(cohort_op_t op);

/* Rank, size and rendezvous from the environment: cohortrun (COHORT_*), mpirun
 * (OMPI_COMM_WORLD_*), MPICH/hydra (PMI_*), Slurm (SLURM_*), torchrun (RANK, WORLD_SIZE,
 * MASTER_ADDR, ...). */
COHORT_API
cohort_status_t cohort_comm_init(cohort_comm_t **comm);

/* The caller brings its own out-of-band allgather (an MPI communicator, a framework's store).
 * allgather must gather nbytes from every rank into recvbuf (rank r's bytes at r * nbytes) and
 * return 0 on success, non-zero on failure (cohort_comm_init_oob then fails on this rank with
 * COHORT_ERR_TRANSPORT). nranks >= 1 and 0 <= rank < nranks; allgather may be NULL only when
 * nranks is 1 (a single rank exchanges nothing). Every creation runs a full exchange through
 * allgather, several rounds of it; each round is called on every rank in the same order. */
typedef int (*cohort_oob_allgather_fn)(const void *sendbuf, void *recvbuf, size_t nbytes,
                                       void *ctx);
COHORT_API
cohort_status_t cohort_comm_init_oob(int rank, int nranks, cohort_oob_allgather_fn allgather,
                                     void *ctx, cohort_comm_t **comm);
/* The same, with this communicator's own timeout in seconds (0.1 to 1e7) instead of
 * COHORT_TIMEOUT: it bounds creation's waits (not those inside the caller's allgather) and every
 * later wait on the communicator; communicators split from it inherit it (as every split
 * inherits its parent's). A framework passes its own timeout here (torch's init_process_group
 * timeout). 0 means COHORT_TIMEOUT, as cohort_comm_init_oob. */
COHORT_API
cohort_status_t cohort_comm_init_oob_timeout(int rank, int nranks,
                                             cohort_oob_allgather_fn allgather, void *ctx,
                                             double timeout_s, cohort_comm_t **comm);
/* Gives comm (made by any init or split) its own timeout from now on, as above: every later
 * wait on it, and on communicators split from it afterwards. Between operations only (refused
 * while non-blocking ones are outstanding or a call runs). Not a collective, but ranks that
 * disagree on it time out at different moments. */
COHORT_API
cohort_status_t cohort_comm_set_timeout(cohort_comm_t *comm, double timeout_s);

/* Collective over comm. Ranks with the same color form a new communicator, ordered by key (ties
 * by old rank). A negative color yields *out == NULL. An aborted communicator cannot be split
 * (COHORT_ERR_ABORTED), nor one whose collective failed (that error). */
COHORT_API
cohort_status_t cohort_comm_split(cohort_comm_t *comm, int color, int key, cohort_comm_t **out);
/* Returns in bounded time, always; blocked calls on comm return COHORT_ERR_ABORTED, and so do
 * later ones. The one call that may be made from another thread while a collective runs. */
COHORT_API
cohort_status_t cohort_comm_abort(cohort_comm_t *comm);
/* Frees comm. NULL is accepted and does nothing (as free(NULL); NCCL's ncclCommDestroy does the
 * same). While a collective or split runs on comm in another thread: COHORT_ERR_INVALID_ARG,
 * nothing is freed. Otherwise comm is freed whatever it returns: COHORT_ERR_MISMATCH (with a WARN
 * in the log) when its last collectives turn out not to have matched the other ranks' calls (a
 * broadcast's root returns before anyone could tell; destroy waits up to 2 s to learn it). */
COHORT_API
cohort_status_t cohort_comm_destroy(cohort_comm_t *comm);
/* -1 for a handle that is not a live communicator (cohort_last_error() says why). */
COHORT_API
int cohort_comm_rank(const cohort_comm_t *comm);
COHORT_API
int cohort_comm_size(const cohort_comm_t *comm);
COHORT_API
int cohort_comm_local_rank(const cohort_comm_t *comm);    /* rank among this node's ranks */
COHORT_API
int cohort_comm_local_size(const cohort_comm_t *comm);
COHORT_API
int cohort_comm_node_count(const cohort_comm_t *comm);

/* Blocking collectives. sendbuf == recvbuf means in place (allgather and reduce_scatter: see
 * there). Counts are elements, not bytes. A count of 0 does nothing and its buffers may be NULL
 * (as NCCL and MPI allow); with a count > 0 every buffer the call uses must be non-NULL. Buffers
 * that overlap other than in the in-place form are refused. Calls on one communicator must not
 * overlap (from several threads): the second is refused. */
COHORT_API
cohort_status_t cohort_allreduce(cohort_comm_t *comm, const void *sendbuf, void *recvbuf,
                                 size_t count, cohort_dtype_t dtype, cohort_op_t op);
COHORT_API
cohort_status_t cohort_broadcast(cohort_comm_t *comm, void *buf, size_t count,
                                 cohort_dtype_t dtype, int root);
/* recvbuf is only used at root (may be NULL elsewhere; elsewhere it is ignored, never written). */
COHORT_API
cohort_status_t cohort_reduce(cohort_comm_t *comm, const void *sendbuf, void *recvbuf,
                              size_t count, cohort_dtype_t dtype, cohort_op_t op, int root);
/* recvbuf holds nranks * sendcount elements, rank r's block at r * sendcount.
 * In place: sendbuf == recvbuf + rank * sendcount elements. */
COHORT_API
cohort_status_t cohort_allgather(cohort_comm_t *comm, const void *sendbuf, void *recvbuf,
                                 size_t sendcount, cohort_dtype_t dtype);
/* sendbuf holds nranks * recvcount elements; rank r receives the reduced block r.
 * In place: recvbuf == sendbuf + rank * recvcount elements. */
COHORT_API
cohort_status_t cohort_reduce_scatter(cohort_comm_t *comm, const void *sendbuf, void *recvbuf,
                                      size_t recvcount, cohort_dtype_t dtype, cohort_op_t op);
/* count elements go to each rank; block r of sendbuf goes to rank r. */
COHORT_API
cohort_status_t cohort_alltoall(cohort_comm_t *comm, const void *sendbuf, void *recvbuf,
                                size_t count, cohort_dtype_t dtype);
COHORT_API
cohort_status_t cohort_barrier(cohort_comm_t *comm);

/* Memory that the ranks of one node can read from each other (like NCCL's ncclMemAlloc or
 * MPI_Alloc_mem). Any memory works with every call; this is only faster: when every rank's
 * buffers of a collective come from here, the shared-memory transport's node collectives read
 * the peers' buffers themselves instead of copying them through staging slots (about one copy
 * per byte less). Zeroed, page-aligned, one file descriptor per block; needs no communicator
 * and may be called from any thread. Allocate once and reuse: the first collective on a block
 * maps it on every peer of the node (an open and an mmap each). A peer keeps a freed block
 * mapped (its pages in use) until it needs the room or its communicator is destroyed. */
COHORT_API
cohort_status_t cohort_mem_alloc(size_t size, void **ptr);
/* Frees a block from cohort_mem_alloc (ptr as returned); NULL does nothing. */
COHORT_API
cohort_status_t cohort_mem_free(void *ptr);

/* Name of the algorithm the last collective on comm used (for benchmarks and logs): "none" before
 * any, and for a handle that is not a live communicator (then cohort_last_error() says why). */
COHORT_API
const char *cohort_comm_last_algo(const cohort_comm_t *comm);
/* Name of the transport comm uses to reach peer, NULL for itself, for a single-rank
 * communicator, and for a bad comm or peer (then cohort_last_error() says why). */
COHORT_API
const char *cohort_comm_peer_transport(const cohort_comm_t *comm, int peer);

/* ---- Variable-size and rooted collectives (blocking; non-blocking forms below) ----
 * Counts and displacements are in elements of dtype, one entry per rank. */
/* Rank r's sendcount elements land at recvbuf + displs[r] on every rank. Every rank passes the
 * same recvcounts, and recvcounts[rank] must equal its own sendcount; displs are each rank's own
 * layout (blocks may come in any order, must not overlap). In place: sendbuf == recvbuf +
 * displs[rank] elements. */
COHORT_API
cohort_status_t cohort_allgatherv(cohort_comm_t *comm, const void *sendbuf, size_t sendcount,
                                  void *recvbuf, const size_t *recvcounts, const size_t *displs,
                                  cohort_dtype_t dtype);
/* sendcounts[r] elements from sendbuf + sdispls[r] go to rank r, which receives them at its
 * recvbuf + rdispls[this rank] (recvcounts[this rank] there must equal sendcounts[r] here: a
 * pair that disagrees fails with COHORT_ERR_MISMATCH naming both sizes). Zero counts are fine.
 * No in-place form: sendbuf and recvbuf must not overlap. */
COHORT_API
cohort_status_t cohort_alltoallv(cohort_comm_t *comm, const void *sendbuf,
                                 const size_t *sendcounts, const size_t *sdispls, void *recvbuf,
                                 const size_t *recvcounts, const size_t *rdispls,
                                 cohort_dtype_t dtype);
/* gather: root's recvbuf gets count elements from each rank, block r from rank r (recvbuf is
 * ignored off the root). In place at the root: sendbuf == recvbuf + root * count elements. */
COHORT_API
cohort_status_t cohort_gather(cohort_comm_t *comm, const void *sendbuf, void *recvbuf,
                              size_t count, cohort_dtype_t dtype, int root);
/* scatter: rank r gets block r (count elements) of root's sendbuf (ignored off the root). In
 * place at the root: recvbuf == sendbuf + root * count elements. */
COHORT_API
cohort_status_t cohort_scatter(cohort_comm_t *comm, const void *sendbuf, void *recvbuf,
                               size_t count, cohort_dtype_t dtype, int root);

/* ---- Non-blocking collectives ----
 * The same arguments as the blocking form, plus the request. Arguments are checked when the call
 * is made (a refused call queues nothing and sets *req = NULL); the count and displacement
 * arrays of the v-variants are copied, the buffers belong to cohort until the request completes.
 *
 * Order: collectives (blocking or not) must be issued in the same order on every rank, as with
 * MPI and NCCL. Any number may be outstanding on one communicator; they run in issue order, and
 * a blocking call (or cohort_comm_split) issued meanwhile waits for them first. Requests complete
 * independently and may be waited for in any order.
 *
 * Progress: by default a progress thread per communicator (started at its first non-blocking
 * call, asleep while nothing is outstanding) runs them, so data moves while the caller computes;
 * where the node's threads outnumber its cores, a thread waiting in cohort_wait/cohort_waitall
 * runs queued calls itself and the progress thread starts a call nobody waits for within 50
 * microseconds (0.4 ms for the first such call after a stretch of calls each waited for at
 * once). COHORT_PROGRESS=caller runs them inside cohort_test / cohort_wait /
 * cohort_waitall instead (cohort_test then runs the queue up to its request and returns when
 * that one is done).
 *
 * Failures: timeouts (COHORT_TIMEOUT), mismatches, a lost peer and cohort_comm_abort complete
 * the request with the error, whose message (cohort_last_error() after test/wait) names the
 * operation; requests queued behind a failed one complete with that failure at once.
 * cohort_comm_destroy with requests not yet completed by test/wait is refused
 * (COHORT_ERR_INVALID_ARG, nothing freed): abort, then wait for them, then destroy.
 *
 * Threads: one thread at a time issues calls on a communicator (blocking and non-blocking; a
 * second one is refused with COHORT_ERR_INVALID_ARG when it overlaps a running blocking call,
 * and otherwise breaks the order every rank must agree on). Any thread may test or wait a
 * request (but only one may complete it: the request is freed then). cohort_comm_abort may be
 * called from any thread. Different communicators may be used from different threads. */
COHORT_API
cohort_status_t cohort_iallreduce(cohort_comm_t *comm, const void *sendbuf, void *recvbuf,
                                  size_t count, cohort_dtype_t dtype, cohort_op_t op,
                                  cohort_request_t **req);
COHORT_API
cohort_status_t cohort_ibroadcast(cohort_comm_t *comm, void *buf, size_t count,
                                  cohort_dtype_t dtype, int root, cohort_request_t **req);
COHORT_API
cohort_status_t cohort_ireduce(cohort_comm_t *comm, const void *sendbuf, void *recvbuf,
                               size_t count, cohort_dtype_t dtype, cohort_op_t op, int root,
                               cohort_request_t **req);
COHORT_API
cohort_status_t cohort_iallgather(cohort_comm_t *comm, const void *sendbuf, void *recvbuf,
                                  size_t sendcount, cohort_dtype_t dtype, cohort_request_t **req);
COHORT_API
cohort_status_t cohort_ireduce_scatter(cohort_comm_t *comm, const void *sendbuf, void *recvbuf,
                                       size_t recvcount, cohort_dtype_t dtype, cohort_op_t op,
                                       cohort_request_t **req);
COHORT_API
cohort_status_t cohort_ialltoall(cohort_comm_t *comm, const void *sendbuf, void *recvbuf,
                                 size_t count, cohort_dtype_t dtype, cohort_request_t **req);
COHORT_API
cohort_status_t cohort_ibarrier(cohort_comm_t *comm, cohort_request_t **req);
COHORT_API
cohort_status_t cohort_iallgatherv(cohort_comm_t *comm, const void *sendbuf, size_t sendcount,
                                   void *recvbuf, const size_t *recvcounts, const size_t *displs,
                                   cohort_dtype_t dtype, cohort_request_t **req);
COHORT_API
cohort_status_t cohort_ialltoallv(cohort_comm_t *comm, const void *sendbuf,
                                  const size_t *sendcounts, const size_t *sdispls, void *recvbuf,
                                  const size_t *recvcounts, const size_t *rdispls,
                                  cohort_dtype_t dtype, cohort_request_t **req);
COHORT_API
cohort_status_t cohort_igather(cohort_comm_t *comm, const void *sendbuf, void *recvbuf,
                               size_t count, cohort_dtype_t dtype, int root,
                               cohort_request_t **req);
COHORT_API
cohort_status_t cohort_iscatter(cohort_comm_t *comm, const void *sendbuf, void *recvbuf,
                                size_t count, cohort_dtype_t dtype, int root,
                                cohort_request_t **req);

/* ---- Point to point ----
 * Messages between a pair match in posting order: the n-th send from a to b is the n-th
 * receive of b from a, and its tag (>= 0) and size must be the receive's (a different tag, or a
 * count and dtype whose bytes differ from what was sent, is COHORT_ERR_MISMATCH naming both;
 * there is no matching out of order by tag). As in NCCL, point-to-point calls take their place
 * in the communicator's sequence of operations: a send and its receive must stand in the same
 * order relative to the collectives on both ranks (collectives between them that involve both
 * ranks must be issued on both before, or both after). Messages do not wait for each other: a
 * receive still waiting does not hold back a send issued after it (non-blocking, or blocking).
 * Two blocking sends that each wait for the other's receive (both ranks send first) can still
 * wait for each other, as in MPI: exchange with a group (cohort_group_start/end) or with
 * non-blocking calls. A message to this rank itself is refused. */
COHORT_API
cohort_status_t cohort_send(cohort_comm_t *comm, const void *buf, size_t count,
                            cohort_dtype_t dtype, int peer, int tag);
COHORT_API
cohort_status_t cohort_recv(cohort_comm_t *comm, void *buf, size_t count,
                            cohort_dtype_t dtype, int peer, int tag);
COHORT_API
cohort_status_t cohort_isend(cohort_comm_t *comm, const void *buf, size_t count,
                             cohort_dtype_t dtype, int peer, int tag, cohort_request_t **req);
COHORT_API
cohort_status_t cohort_irecv(cohort_comm_t *comm, void *buf, size_t count,
                             cohort_dtype_t dtype, int peer, int tag, cohort_request_t **req);

/* ---- Completion ----
 * *done = 1 when finished: the returned status is then the operation's own and the request is
 * freed; *done = 0: returns COHORT_SUCCESS (or an error about the request itself). */
COHORT_API
cohort_status_t cohort_test(cohort_request_t *req, int *done);
/* Waits, frees the request, returns the operation's status. */
COHORT_API
cohort_status_t cohort_wait(cohort_request_t *req);
/* Waits for all n, frees them all (reqs[i] becomes NULL); returns the first failure by index
 * (its message in cohort_last_error()) or COHORT_SUCCESS. statuses may be NULL, else
 * statuses[i] receives request i's status. A request listed twice, or one that is not live, is
 * refused before anything is waited for. */
COHORT_API
cohort_status_t cohort_waitall(size_t n, cohort_request_t **reqs, cohort_status_t *statuses);

/* ---- Groups and tensor fusion ----
 * Collectives issued between cohort_group_start and cohort_group_end form one unit: nothing
 * runs until cohort_group_end, which queues them in issue order, allreduces of the same dtype
 * and op fused into one up to COHORT_FUSION_THRESHOLD bytes (an allreduce of another dtype or op
 * between them does not stop that; any other collective does). Blocking calls inside a group
 * return COHORT_SUCCESS at once (their arguments checked) and complete at cohort_group_end,
 * which waits for them and returns the first of their failures; non-blocking ones complete
 * through their requests as usual. Groups nest (the outermost end runs them); cohort_comm_split
 * is refused inside one. Every rank must issue the same calls in the same order, as always.
 * Outside groups, non-blocking allreduces queued back to back are fused as well (the ranks agree
 * on how many with one small allreduce per batch: docs/design.md); COHORT_FUSION_THRESHOLD=0
 * turns both off. */
COHORT_API
cohort_status_t cohort_group_start(cohort_comm_t *comm);
COHORT_API
cohort_status_t cohort_group_end(cohort_comm_t *comm);
/* Wire compression: float32 SUM and AVG allreduces issued on comm from now on travel as wire
 * (COHORT_FLOAT16 or COHORT_BFLOAT16; COHORT_FLOAT32: uncompressed) between ranks on different
 * nodes, accumulated in float32 at every step (the result differs from the exact sum by at
 * most nranks x u x the sum of the absolute inputs, u = 2^-11 for fp16, 2^-8 for bf16; fp16
 * overflows past 65504). The default is COHORT_COMPRESS. Like a collective, every rank must
 * make the same call at the same place (a rank that differs gets COHORT_ERR_MISMATCH). On one
 * node nothing is compressed. Not a collective itself: it sends nothing. */
COHORT_API
cohort_status_t cohort_comm_set_compression(cohort_comm_t *comm, cohort_dtype_t wire);
/* The next call issued on comm (collective or message, blocking or not) carries name, which
 * COHORT_TIMELINE shows (a Horovod-style layer names each gradient's allreduce). Copied; used
 * once; NULL clears it. At most COHORT_NAME_MAX - 1 bytes (longer: COHORT_ERR_INVALID_ARG). Not
 * a collective: ranks may name their calls differently. */
#define COHORT_NAME_MAX 128
COHORT_API
cohort_status_t cohort_comm_name_next(cohort_comm_t *comm, const char *name);
/* Since comm's creation: *requests ran inside fused allreduces, *batches such allreduces ran. */
COHORT_API
cohort_status_t cohort_comm_fusion_stats(const cohort_comm_t *comm, uint64_t *requests,
                                         uint64_t *batches);

#ifdef __cplusplus
}
#endif
#endif /* COHORT_COHORT_H */
