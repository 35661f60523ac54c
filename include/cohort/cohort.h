/* cohort: collective communication for distributed training.
 *
 * Public C API (C99, stable). Every function that can fail returns a cohort_status_t; on failure
 * cohort_last_error() holds a human message saying what failed, where, and what to try.
 *
 * Bad arguments never crash: a NULL handle or out pointer, a dtype or op out of range, a root
 * that is not a rank, a count whose byte size overflows, buffers that overlap other than in the
 * documented in-place forms, a call on an aborted communicator or one overlapping another call
 * on the same communicator are refused with COHORT_ERR_INVALID_ARG (COHORT_ERR_ABORTED after
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

#define COHORT_VERSION_MAJOR 0
#define COHORT_VERSION_MINOR 1
#define COHORT_VERSION_PATCH 0

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

const char *cohort_strerror(cohort_status_t status);
/* Thread-local: what failed, where, and what to do. Never NULL (empty string if nothing failed). */
const char *cohort_last_error(void);
const char *cohort_version(void);

/* Size in bytes of one element of dtype, 0 for an unknown dtype. cohort_strerror of a value that
 * is not a cohort_status_t: "unknown status". */
size_t cohort_dtype_size(cohort_dtype_t dtype);
/* "float32", "sum", ... ; "?" for unknown values. */
const char *cohort_dtype_name(cohort_dtype_t dtype);
const char *cohort_op_name(cohort_op_t op);

/* Rank, size and rendezvous from the environment: cohortrun (COHORT_*), mpirun
 * (OMPI_COMM_WORLD_*), MPICH/hydra (PMI_*), Slurm (SLURM_*), torchrun (RANK, WORLD_SIZE,
 * MASTER_ADDR, ...). */
cohort_status_t cohort_comm_init(cohort_comm_t **comm);

/* The caller brings its own out-of-band allgather (an MPI communicator, a framework's store).
 * allgather must gather nbytes from every rank into recvbuf (rank r's bytes at r * nbytes) and
 * return 0 on success, non-zero on failure (cohort_comm_init_oob then fails on this rank with
 * COHORT_ERR_TRANSPORT). nranks >= 1 and 0 <= rank < nranks; allgather may be NULL only when
 * nranks is 1 (a single rank exchanges nothing). Every creation runs a full exchange through
 * allgather, several rounds of it; each round is called on every rank in the same order. */
typedef int (*cohort_oob_allgather_fn)(const void *sendbuf, void *recvbuf, size_t nbytes,
                                       void *ctx);
cohort_status_t cohort_comm_init_oob(int rank, int nranks, cohort_oob_allgather_fn allgather,
                                     void *ctx, cohort_comm_t **comm);

/* Collective over comm. Ranks with the same color form a new communicator, ordered by key (ties
 * by old rank). A negative color yields *out == NULL. An aborted communicator cannot be split
 * (COHORT_ERR_ABORTED), nor one whose collective failed (that error). */
cohort_status_t cohort_comm_split(cohort_comm_t *comm, int color, int key, cohort_comm_t **out);
/* Returns in bounded time, always; blocked calls on comm return COHORT_ERR_ABORTED, and so do
 * later ones. The one call that may be made from another thread while a collective runs. */
cohort_status_t cohort_comm_abort(cohort_comm_t *comm);
/* Frees comm. NULL is accepted and does nothing (as free(NULL); NCCL's ncclCommDestroy does the
 * same). While a collective or split runs on comm in another thread: COHORT_ERR_INVALID_ARG,
 * nothing is freed. Otherwise comm is freed whatever it returns: COHORT_ERR_MISMATCH (with a WARN
 * in the log) when its last collectives turn out not to have matched the other ranks' calls (a
 * broadcast's root returns before anyone could tell; destroy waits up to 2 s to learn it). */
cohort_status_t cohort_comm_destroy(cohort_comm_t *comm);
/* -1 for a handle that is not a live communicator (cohort_last_error() says why). */
int cohort_comm_rank(const cohort_comm_t *comm);
int cohort_comm_size(const cohort_comm_t *comm);
int cohort_comm_local_rank(const cohort_comm_t *comm);    /* rank among this node's ranks */
int cohort_comm_local_size(const cohort_comm_t *comm);
int cohort_comm_node_count(const cohort_comm_t *comm);

/* Blocking collectives. sendbuf == recvbuf means in place (allgather and reduce_scatter: see
 * there). Counts are elements, not bytes. A count of 0 does nothing and its buffers may be NULL
 * (as NCCL and MPI allow); with a count > 0 every buffer the call uses must be non-NULL. Buffers
 * that overlap other than in the in-place form are refused. Calls on one communicator must not
 * overlap (from several threads): the second is refused. */
cohort_status_t cohort_allreduce(cohort_comm_t *comm, const void *sendbuf, void *recvbuf,
                                 size_t count, cohort_dtype_t dtype, cohort_op_t op);
cohort_status_t cohort_broadcast(cohort_comm_t *comm, void *buf, size_t count,
                                 cohort_dtype_t dtype, int root);
/* recvbuf is only used at root (may be NULL elsewhere; elsewhere it is ignored, never written). */
cohort_status_t cohort_reduce(cohort_comm_t *comm, const void *sendbuf, void *recvbuf,
                              size_t count, cohort_dtype_t dtype, cohort_op_t op, int root);
/* recvbuf holds nranks * sendcount elements, rank r's block at r * sendcount.
 * In place: sendbuf == recvbuf + rank * sendcount elements. */
cohort_status_t cohort_allgather(cohort_comm_t *comm, const void *sendbuf, void *recvbuf,
                                 size_t sendcount, cohort_dtype_t dtype);
/* sendbuf holds nranks * recvcount elements; rank r receives the reduced block r.
 * In place: recvbuf == sendbuf + rank * recvcount elements. */
cohort_status_t cohort_reduce_scatter(cohort_comm_t *comm, const void *sendbuf, void *recvbuf,
                                      size_t recvcount, cohort_dtype_t dtype, cohort_op_t op);
/* count elements go to each rank; block r of sendbuf goes to rank r. */
cohort_status_t cohort_alltoall(cohort_comm_t *comm, const void *sendbuf, void *recvbuf,
                                size_t count, cohort_dtype_t dtype);
cohort_status_t cohort_barrier(cohort_comm_t *comm);

/* Memory that the ranks of one node can read from each other (like NCCL's ncclMemAlloc or
 * MPI_Alloc_mem). Any memory works with every call; this is only faster: when every rank's
 * buffers of a collective come from here, the shared-memory transport's node collectives read
 * the peers' buffers themselves instead of copying them through staging slots (about one copy
 * per byte less). Zeroed, page-aligned, one file descriptor per block; needs no communicator
 * and may be called from any thread. Allocate once and reuse: the first collective on a block
 * maps it on every peer of the node (an open and an mmap each). A peer keeps a freed block
 * mapped (its pages in use) until it needs the room or its communicator is destroyed. */
cohort_status_t cohort_mem_alloc(size_t size, void **ptr);
/* Frees a block from cohort_mem_alloc (ptr as returned); NULL does nothing. */
cohort_status_t cohort_mem_free(void *ptr);

/* Name of the algorithm the last collective on comm used (for benchmarks and logs): "none" before
 * any, and for a handle that is not a live communicator (then cohort_last_error() says why). */
const char *cohort_comm_last_algo(const cohort_comm_t *comm);
/* Name of the transport comm uses to reach peer, NULL for itself, for a single-rank
 * communicator, and for a bad comm or peer (then cohort_last_error() says why). */
const char *cohort_comm_peer_transport(const cohort_comm_t *comm, int peer);

#ifdef __cplusplus
}
#endif
#endif /* COHORT_COHORT_H */
