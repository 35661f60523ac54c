/* SPDX-License-Identifier: BSD-3-Clause */
/* Hierarchical broadcast (see allreduce_hier.c for the hierarchy).
 *
 * Every node has L ranks: the root's peers of the same local rank l_r (one per node) broadcast
 * among themselves, then every node broadcasts from its rank l_r: the message crosses the
 * network once per node, not once per rank.
 * Nodes of different sizes (the root's local rank may be missing on some): the root's node
 * broadcasts first (so that its leader, local rank 0, has the data), the leaders broadcast, and
 * the other nodes broadcast from their leader.
 */
#include "core/coll/coll.h"
#include "core/log.h"
#include "core/p2p.h"

/* Position of rank r among the ranks sharing its local rank (its rank in that cross group). */
static int cross_rank(const cohort_hier_view_t *h, int r)
{
    int k = 0;
    for (int q = 0; q < r; q++)
        k += h->local_of[q] == h->local_of[r];
    return k;
}

cohort_status_t cohort_broadcast_hier(cohort_comm_t *comm, const cohort_coll_args_t *a)
{
    cohort_hier_view_t h;
    if (!cohort_coll_hier(comm, &h))
        return cohort_error(COHORT_ERR_INTERNAL, "hierarchical broadcast without a hierarchy; "
                            "this is a bug in cohort, please report it");
    /* The work runs on the sub-communicators, whose waits do not test this communicator's
     * tokens: confirming this one first is what stops a rank that picked another algorithm
     * (another count, another collective) from waiting on the others forever (core/p2p.h). */
    cohort_status_t st = cohort_p2p_token_sync(comm);
    if (st)
        return st;
    int me = cohort_coll_rank(comm), root = a->root;
    int lr = h.local_of[root], mine = h.node_of[me] == h.node_of[root];
    cohort_coll_args_t s = { .coll = COHORT_COLL_BROADCAST, .sendbuf = a->recvbuf,
                             .recvbuf = a->recvbuf, .count = a->count, .dtype = a->dtype,
                             .op = a->op };
    if (h.even) {
        if (h.local_of[me] == lr) {
            s.root = cross_rank(&h, root);
            if ((st = a->run_sub(comm, h.cross, &s, "broadcast among equal local ranks")))
                return st;
        }
        s.root = lr;
        return a->run_sub(comm, h.node, &s, "node broadcast");
    }
    if (mine && lr != 0) {
        s.root = lr;
        if ((st = a->run_sub(comm, h.node, &s, "broadcast on the root's node")))
            return st;
    }
    if (h.local_of[me] == 0) {
        /* the leader of the root's node, as a rank of the leaders' group */
        int lead = root;
        for (int q = 0; q < cohort_coll_size(comm); q++)
            if (h.node_of[q] == h.node_of[root] && h.local_of[q] == 0) lead = q;
        s.root = cross_rank(&h, lead);
        if ((st = a->run_sub(comm, h.cross, &s, "broadcast among the node leaders")))
            return st;
    }
    if (!mine || lr == 0) {
        s.root = 0;
        if ((st = a->run_sub(comm, h.node, &s, "node broadcast from the leader")))
            return st;
    }
    return COHORT_SUCCESS;
}
