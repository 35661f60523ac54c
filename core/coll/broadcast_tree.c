/* SPDX-License-Identifier: BSD-3-Clause */
/* Binomial-tree broadcast for small messages: ceil(log2 n) rounds, the whole buffer per message.
 *
 * Ranks are renumbered v = (rank - root) mod n. v > 0 receives from v - lowbit(v); then every
 * rank sends to v + m for each power of two m < lowbit(v) (all m < n for the root), largest
 * first so the biggest subtrees start earliest.
 */
#include "core/coll/coll.h"
#include "core/log.h"
#include "core/p2p.h"

cohort_status_t cohort_broadcast_tree(cohort_comm_t *comm, const cohort_coll_args_t *a)
{
    int rank = cohort_coll_rank(comm), n = cohort_coll_size(comm);
    size_t bytes = a->count * a->esize;
    char *buf = a->recvbuf;
    cohort_status_t st;

    int v = (rank - a->root + n) % n;
    int mask = 1;
    while (mask < n) {
        if (v & mask) {
            cohort_preq_t rq;
            int parent = (v - mask + a->root) % n;
            if ((st = cohort_p2p_irecv(comm, parent, buf, bytes, &rq)) ||
                (st = cohort_p2p_waitall(comm, &rq, 1)))
                return st;
            break;
        }
        mask <<= 1;
    }
    /* mask is now lowbit(v), or the first power of two >= n for the root. */
    cohort_preq_t sq[32];
    int ns = 0;
    for (mask >>= 1; mask > 0; mask >>= 1) {
        if (v + mask < n) {
            int child = (v + mask + a->root) % n;
            if ((st = cohort_p2p_isend(comm, child, buf, bytes, &sq[ns])))
                return st;
            ns++;
        }
    }
    return ns ? cohort_p2p_waitall(comm, sq, ns) : COHORT_SUCCESS;
}
