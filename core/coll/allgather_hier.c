/* SPDX-License-Identifier: BSD-3-Clause */
/* Hierarchical allgather (see allreduce_hier.c for the hierarchy), for nodes of equal size L:
 *  1. allgather of each rank's block among the ranks of its local rank (one per node): every
 *     block crosses the network once per other node, and every local rank drives its own share;
 *  2. node allgather of what step 1 gathered (nodes blocks per rank);
 *  3. every block to its rank's place in recvbuf (ranks need not be numbered node by node:
 *     block (local j, node k) belongs to the k-th rank of local rank j).
 * Scratch holds the gathered blocks; recvbuf is written only in step 3, so in place
 * (sendbuf == recvbuf + rank * count) needs nothing special.
 */
#include <string.h>

#include "core/coll/coll.h"
#include "core/log.h"
#include "core/p2p.h"

cohort_status_t cohort_allgather_hier(cohort_comm_t *comm, const cohort_coll_args_t *a)
{
    cohort_hier_view_t h;
    if (!cohort_coll_hier(comm, &h) || !h.even)
        return cohort_error(COHORT_ERR_INTERNAL, "hierarchical allgather needs nodes of equal "
                            "size; this is a bug in cohort, please report it");
    /* The work runs on the sub-communicators, whose waits do not test this communicator's
     * tokens: confirming this one first is what stops a rank that picked another algorithm
     * (another count, another collective) from waiting on the others forever (core/p2p.h). */
    cohort_status_t st = cohort_p2p_token_sync(comm);
    if (st)
        return st;
    int n = cohort_coll_size(comm), L = cohort_coll_size(h.node), nodes = h.nodes;
    size_t bytes = a->count * a->esize;
    char *cross = cohort_coll_scratch(comm, 0, (size_t)nodes * bytes);
    char *all = cohort_coll_scratch(comm, 1, (size_t)nodes * (size_t)L * bytes);
    if (!cross || !all)
        return COHORT_ERR_NO_MEMORY;
    cohort_coll_args_t s = { .coll = COHORT_COLL_ALLGATHER, .sendbuf = a->sendbuf, .recvbuf = cross,
                             .count = a->count, .dtype = a->dtype, .op = a->op };
    if ((st = a->run_sub(comm, h.cross, &s, "allgather among equal local ranks")))
        return st;
    s = (cohort_coll_args_t){ .coll = COHORT_COLL_ALLGATHER, .sendbuf = cross, .recvbuf = all,
                              .count = a->count * (size_t)nodes, .dtype = a->dtype, .op = a->op };
    if ((st = a->run_sub(comm, h.node, &s, "node allgather")))
        return st;
    int *seen = cohort_coll_scratch(comm, 0, (size_t)L * sizeof *seen);  /* cross is consumed */
    if (!seen)
        return COHORT_ERR_NO_MEMORY;
    memset(seen, 0, (size_t)L * sizeof *seen);
    for (int r = 0; r < n; r++) {
        int j = h.local_of[r], k = seen[j]++;
        memcpy((char *)a->recvbuf + (size_t)r * bytes,
               all + ((size_t)j * (size_t)nodes + (size_t)k) * bytes, bytes);
    }
    return COHORT_SUCCESS;
}
