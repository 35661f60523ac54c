/* SPDX-License-Identifier: BSD-3-Clause */
/* Hierarchical allreduce for jobs over several nodes (core/comm.c sets up the hierarchy: a
 * communicator per node group, normally run by the shm transport's node collectives, and one per
 * local rank across the nodes).
 *
 * Every node has L ranks (the shard plan): the buffer of N elements is cut into L shards of
 * q = N / L elements (plus a tail of N - qL < L elements).
 *  1. node reduce-scatter: local rank l gets its node's sum of shard l;
 *  2. allreduce of shard l among the ranks with local rank l, one per node: every local rank
 *     drives its own slice over its own network interface, so a node sends S (not S per rank)
 *     across the network in total;
 *  3. node allgather of the shards.
 * The tail is first reduced inside the node (node allreduce) and travels with the shard in
 * step 2 (packed behind it in scratch). Below HIER_SMALL_BYTES (or when N < L), two latency
 * steps beat three: node allreduce, then the whole vector among equal local ranks.
 *
 * Nodes with different numbers of ranks (forced with COHORT_HIERARCHICAL=1; auto stays flat):
 * the leader plan: node reduce to local rank 0, allreduce among the leaders (local rank 0 of
 * every node: one cross communicator), node broadcast.
 *
 * AVG: every phase sums; the result is divided by nranks once at the end, as the flat ring does.
 * In place (sendbuf == recvbuf) maps onto the sub-collectives' in-place forms.
 */
#include <string.h>

#include "core/coll/coll.h"
#include "core/log.h"
#include "core/p2p.h"
#include "core/reduce.h"

#define HIER_SMALL_BYTES (32u * 1024u)

static cohort_coll_args_t args(cohort_coll_t coll, const void *s, void *r, size_t count,
                               const cohort_coll_args_t *a, cohort_op_t op, int root)
{
    return (cohort_coll_args_t){ .coll = coll, .sendbuf = s, .recvbuf = r, .count = count,
                                 .dtype = a->dtype, .op = op, .root = root,
                                 .wire = coll == COHORT_COLL_ALLREDUCE ? a->wire : 0 };
}

cohort_status_t cohort_allreduce_hier(cohort_comm_t *comm, const cohort_coll_args_t *a)
{
    cohort_hier_view_t h;
    if (!cohort_coll_hier(comm, &h))
        return cohort_error(COHORT_ERR_INTERNAL, "hierarchical allreduce without a hierarchy; "
                            "this is a bug in cohort, please report it");
    /* The work runs on the sub-communicators, whose waits do not test this communicator's
     * tokens: confirming this one first is what stops a rank that picked another algorithm
     * (another count, another collective) from waiting on the others forever (core/p2p.h). */
    cohort_status_t st = cohort_p2p_token_sync(comm);
    if (st)
        return st;
    cohort_op_t op = a->op == COHORT_AVG ? COHORT_SUM : a->op;
    size_t es = a->esize, n = a->count;
    int L = cohort_coll_size(h.node), l = cohort_coll_rank(h.node);
    char *recv = a->recvbuf;
    const char *send = a->sendbuf;
    cohort_coll_args_t s;

    if (!h.even) {
        s = args(COHORT_COLL_REDUCE, send, recv, n, a, op, 0);
        if ((st = a->run_sub(comm, h.node, &s, "node reduce to the leader")))
            return st;
        if (l == 0) {
            s = args(COHORT_COLL_ALLREDUCE, recv, recv, n, a, op, 0);
            if ((st = a->run_sub(comm, h.cross, &s, "allreduce among the node leaders")))
                return st;
        }
        s = args(COHORT_COLL_BROADCAST, recv, recv, n, a, op, 0);
        if ((st = a->run_sub(comm, h.node, &s, "node broadcast from the leader")))
            return st;
    } else if (n < (size_t)L || n * es <= HIER_SMALL_BYTES) {
        s = args(COHORT_COLL_ALLREDUCE, send, recv, n, a, op, 0);
        if ((st = a->run_sub(comm, h.node, &s, "node allreduce")))
            return st;
        s = args(COHORT_COLL_ALLREDUCE, recv, recv, n, a, op, 0);
        if ((st = a->run_sub(comm, h.cross, &s, "allreduce among equal local ranks")))
            return st;
    } else {
        size_t q = n / (size_t)L, tail = n - q * (size_t)L;
        char *shard = recv + (size_t)l * q * es;
        s = args(COHORT_COLL_REDUCE_SCATTER, send, shard, q, a, op, 0);
        if ((st = a->run_sub(comm, h.node, &s, "node reduce-scatter")))
            return st;
        char *work = shard;
        if (tail) {
            s = args(COHORT_COLL_ALLREDUCE, send + q * (size_t)L * es,
                     recv + q * (size_t)L * es, tail, a, op, 0);
            if ((st = a->run_sub(comm, h.node, &s, "node allreduce of the tail")))
                return st;
            if (!(work = cohort_coll_scratch(comm, 0, (q + tail) * es)))
                return COHORT_ERR_NO_MEMORY;
            memcpy(work, shard, q * es);
            memcpy(work + q * es, recv + q * (size_t)L * es, tail * es);
        }
        s = args(COHORT_COLL_ALLREDUCE, work, work, q + tail, a, op, 0);
        if ((st = a->run_sub(comm, h.cross, &s, "allreduce of each shard among equal "
                                  "local ranks")))
            return st;
        if (tail) {
            memcpy(shard, work, q * es);
            memcpy(recv + q * (size_t)L * es, work + q * es, tail * es);
        }
        s = args(COHORT_COLL_ALLGATHER, shard, recv, q, a, op, 0);
        if ((st = a->run_sub(comm, h.node, &s, "node allgather")))
            return st;
    }
    cohort_reduce_finish(recv, n, a->dtype, a->op, cohort_coll_size(comm));
    return COHORT_SUCCESS;
}
