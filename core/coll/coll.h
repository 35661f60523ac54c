/* SPDX-License-Identifier: BSD-3-Clause */
/* Collective algorithms: one file each in core/coll/, all over core/p2p.h.
 *
 * Each algorithm is a function taking the communicator and the validated arguments. Buffers are
 * host memory. The API layer (core/api.c) has already checked arguments, set the message tag
 * and chosen the algorithm with cohort_coll_select(); its dispatch finishes count == 0 (but for
 * barrier and alltoallv) and nranks == 1 itself, so an algorithm runs only with nranks >= 2 and
 * count > 0 and has no prologue for either (a hierarchical algorithm's sub-collectives go
 * through the same dispatch, args->run_sub). Algorithms must work for any nranks >= 2 (powers
 * of two or not) and for in-place calls (sendbuf == recvbuf; for allgather/reduce_scatter see
 * cohort.h).
 */
#ifndef COHORT_CORE_COLL_H
#define COHORT_CORE_COLL_H

#include <stddef.h>
#include <stdint.h>
#include "cohort/cohort.h"
#include "core/parse.h"

typedef enum {
    COHORT_COLL_ALLREDUCE, COHORT_COLL_BROADCAST, COHORT_COLL_REDUCE, COHORT_COLL_ALLGATHER,
    COHORT_COLL_REDUCE_SCATTER, COHORT_COLL_ALLTOALL, COHORT_COLL_BARRIER,
    /* the first seven are numbered as the plugin ABI's cohort_tp_coll_kind_t; these are the
     * core's alone (no transport runs them itself) */
    COHORT_COLL_ALLGATHERV, COHORT_COLL_ALLTOALLV, COHORT_COLL_GATHER, COHORT_COLL_SCATTER,
    COHORT_COLL_COUNT,
    /* the application's point-to-point messages (cohort_send/recv): operations of the request
     * engine, but no collective (no algorithm, no sequence number) */
    COHORT_OP_SEND = COHORT_COLL_COUNT, COHORT_OP_RECV,
    COHORT_OP_KINDS
} cohort_coll_t;

typedef struct cohort_coll_args {
    cohort_coll_t coll;
    const void *sendbuf;
    void *recvbuf;       /* broadcast: the buffer; reduce: NULL allowed off-root */
    size_t count;        /* allreduce/broadcast/reduce: total elements; allgather: sendcount;
                            reduce_scatter: recvcount; alltoall: per-rank count */
    cohort_dtype_t dtype;
    cohort_op_t op;
    int root;
    size_t esize;        /* bytes per element */
    /* The v-variants, in elements. allgatherv: rcounts/rdispls per rank (count is their sum,
     * sendbuf holds rcounts[rank] elements); alltoallv: scounts/sdispls and rcounts/rdispls per
     * peer (count is 0: each rank's total is its own). NULL for the other collectives. */
    const size_t *scounts, *sdispls, *rcounts, *rdispls;
    uint64_t vsig;       /* allgatherv: a hash of rcounts (every rank must pass the same), in the
                            tag; 0 otherwise */
    /* For messages only (core/engine.c): an allreduce that runs fused requests (how many, and
     * the issue numbers of the first and the last), or the ranks agreeing on how many to fuse */
    int fused;
    uint64_t fused_first, fused_last;
    int negotiation;
    int carry;           /* a fused allreduce: elements after its members' data that carry the
                            next batch's size (count includes them) */
    int peer, tag;       /* COHORT_OP_SEND / COHORT_OP_RECV */
    int wire;            /* a float32 SUM/AVG allreduce that travels compressed where its ranks
                            are on several nodes: COHORT_FLOAT16 or COHORT_BFLOAT16; 0: not */
    const char *name;    /* cohort_comm_name_next: the application's name for it (the timeline
                            shows it), NULL: none */
    /* Set by the dispatcher (core/api.c) for the algorithm it calls: runs a collective on a
     * hierarchy's sub-communicator sub (cohort_coll_hier's node or cross) for comm's
     * collective in progress; a failure's message is prefixed with the phase and the parent
     * ranks it involved; a->esize is set by the callee. A pointer, not a call into api.c:
     * calls go down only, and the hierarchical algorithms compose collectives. */
    cohort_status_t (*run_sub)(cohort_comm_t *comm, cohort_comm_t *sub,
                               struct cohort_coll_args *a, const char *phase);
} cohort_coll_args_t;

typedef cohort_status_t (*cohort_algo_fn)(cohort_comm_t *comm, const cohort_coll_args_t *a);

typedef struct cohort_algo {
    cohort_coll_t coll;
    const char *name;    /* as written in COHORT_ALGO: "ring", "rd", "tree", "chain", ... */
    cohort_algo_fn fn;
} cohort_algo_t;

/* Services the communicator gives algorithms (implemented in core/comm_view.c). */
/* This rank and the communicator's size (no handle check: algorithms run on valid ones). */
int cohort_coll_rank(const cohort_comm_t *comm);
int cohort_coll_size(const cohort_comm_t *comm);
/* A scratch buffer of at least bytes, owned by comm, reused across calls; NULL only on ENOMEM
 * (after cohort_error). Two independent slots (0 and 1). */
void *cohort_coll_scratch(cohort_comm_t *comm, int slot, size_t bytes);
/* The ring order the ring and chain algorithms follow (core/comm_view.c): ring[pos] is
 * the rank at position pos, *pos receives this rank's position. Built from the topology (nodes
 * contiguous, then package, NUMA node and core); the identity when nothing is known. */
const int *cohort_coll_ring(const cohort_comm_t *comm, int *pos);
/* How many nodes the communicator's ranks sit on. */
int cohort_coll_nodes(const cohort_comm_t *comm);
/* The hierarchy, for the *_hier algorithms: 0 when the communicator has none. */
typedef struct cohort_hier_view {
    cohort_comm_t *node;         /* this rank's node group (node ranks in rank order) */
    cohort_comm_t *cross;        /* the ranks with this rank's local rank, one per node that has
                                    one, in rank order */
    int even;                    /* every node has the same number of ranks */
    int forced;                  /* COHORT_HIERARCHICAL=1: at every size */
    int nodes;
    const int *node_of, *local_of;   /* per rank of the parent */
} cohort_hier_view_t;
int cohort_coll_hier(cohort_comm_t *comm, cohort_hier_view_t *h);
/* A part of the collective in progress that ran from t0 (cohort_coll_now()) until now: a phase
 * on the timeline (COHORT_TIMELINE), nothing when it is off. */
uint64_t cohort_coll_now(const cohort_comm_t *comm);
void cohort_coll_phase(cohort_comm_t *comm, const char *name, uint64_t t0);
/* Pipeline chunk size in bytes (COHORT_CHUNK_SIZE). */
size_t cohort_coll_chunk_size(const cohort_comm_t *comm);
/* Algorithms whose scratch would otherwise grow with the message (recursive doubling's partner
 * buffer, reduce-scatter's accumulators, in-place alltoall's copy) run large messages as
 * independent slices of this many chunks, so their scratch stays bounded by the slice
 * (4 MiB at the default chunk size) whatever the message size. */
#define COHORT_COLL_SLICE_CHUNKS 16
static inline size_t cohort_coll_slice_bytes(const cohort_comm_t *comm)
{
    size_t c = cohort_coll_chunk_size(comm);
    return c > SIZE_MAX / COHORT_COLL_SLICE_CHUNKS ? SIZE_MAX : c * COHORT_COLL_SLICE_CHUNKS;
}
/* Elements of esize bytes in a slice, at least 1 and at most count (count > 0). */
static inline size_t cohort_coll_slice_elems(const cohort_comm_t *comm, size_t esize,
                                             size_t count)
{
    size_t slice = cohort_coll_slice_bytes(comm) / esize;
    if (slice == 0) slice = 1;
    return slice > count ? count : slice;
}
/* The ring allreduces' segments: count elements cut into n whose sizes differ by at most one
 * (the first count % n one larger); segment i's size and offset, in elements. */
static inline size_t cohort_coll_seg_count(size_t count, int n, int i)
{
    size_t base = count / (size_t)n, rem = count % (size_t)n;
    return base + ((size_t)i < rem ? 1 : 0);
}
static inline size_t cohort_coll_seg_off(size_t count, int n, int i)
{
    size_t base = count / (size_t)n, rem = count % (size_t)n;
    return (size_t)i * base + ((size_t)i < rem ? (size_t)i : rem);
}
/* Parsed COHORT_ALGO of this communicator (never NULL; may be empty). */
const cohort_algo_spec_t *cohort_coll_algo_spec(const cohort_comm_t *comm);

/* The tag of collective number seq with these arguments (core/desc.c): seq << 32 | a hash of
 * (coll, count, dtype, op, root, vsig). Ranks that disagree on any of them get different tags. */
uint64_t cohort_coll_tag(uint64_t seq, const cohort_coll_args_t *a);

/* Name of a collective as in COHORT_ALGO ("allreduce", "reduce_scatter", ...). */
const char *cohort_coll_name(cohort_coll_t coll);
/* Every algorithm (for cohort-info and tests). */
const cohort_algo_t *cohort_algos(int *count);
/* The algorithm for these arguments: COHORT_ALGO's choice if it names one for a->coll (an unknown
 * name is COHORT_ERR_INVALID_ARG listing the valid ones), else by message size and nranks. */
cohort_status_t cohort_coll_select(cohort_comm_t *comm, const cohort_coll_args_t *a,
                                   const cohort_algo_t **algo);

/* Collectives run by a transport (core/plugin_coll.c): the plugin's name if it runs this one
 * on this communicator (every peer on that plugin, offered, not overridden by COHORT_ALGO),
 * else NULL; and the run itself. */
const char *cohort_coll_transport_name(const cohort_comm_t *comm, const cohort_coll_args_t *a);
cohort_status_t cohort_coll_transport(cohort_comm_t *comm, const cohort_coll_args_t *a);

/* The algorithms. */
cohort_status_t cohort_allreduce_ring(cohort_comm_t *comm, const cohort_coll_args_t *a);
cohort_status_t cohort_allreduce_rd(cohort_comm_t *comm, const cohort_coll_args_t *a);
cohort_status_t cohort_broadcast_chain(cohort_comm_t *comm, const cohort_coll_args_t *a);
cohort_status_t cohort_broadcast_tree(cohort_comm_t *comm, const cohort_coll_args_t *a);
cohort_status_t cohort_reduce_tree(cohort_comm_t *comm, const cohort_coll_args_t *a);
cohort_status_t cohort_allgather_ring(cohort_comm_t *comm, const cohort_coll_args_t *a);
cohort_status_t cohort_reduce_scatter_ring(cohort_comm_t *comm, const cohort_coll_args_t *a);
cohort_status_t cohort_alltoall_pairwise(cohort_comm_t *comm, const cohort_coll_args_t *a);
cohort_status_t cohort_barrier_dissemination(cohort_comm_t *comm, const cohort_coll_args_t *a);
cohort_status_t cohort_allreduce_hier(cohort_comm_t *comm, const cohort_coll_args_t *a);
cohort_status_t cohort_broadcast_hier(cohort_comm_t *comm, const cohort_coll_args_t *a);
cohort_status_t cohort_allgather_hier(cohort_comm_t *comm, const cohort_coll_args_t *a);
cohort_status_t cohort_allreduce_compressed(cohort_comm_t *comm, const cohort_coll_args_t *a);
cohort_status_t cohort_allgatherv_ring(cohort_comm_t *comm, const cohort_coll_args_t *a);
cohort_status_t cohort_alltoallv_pairwise(cohort_comm_t *comm, const cohort_coll_args_t *a);
cohort_status_t cohort_gather_linear(cohort_comm_t *comm, const cohort_coll_args_t *a);
cohort_status_t cohort_scatter_linear(cohort_comm_t *comm, const cohort_coll_args_t *a);

#endif
