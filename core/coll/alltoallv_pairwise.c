/* SPDX-License-Identifier: BSD-3-Clause */
/* Pairwise-exchange alltoallv: the alltoall's n-1 steps (at step s, send to rank + s and receive
 * from rank - s: one destination and one source per step, no incast) with a count and a
 * displacement per peer on each side.
 *
 * Counts are pairwise (what rank a sends to b must be what b expects from a), so no rank can
 * tell the others' from its own and nothing is skipped: every step sends and receives, empty
 * messages included. A pair that disagrees then fails with COHORT_ERR_MISMATCH naming both sizes
 * (a receive that gets more or fewer bytes than posted) instead of one side waiting for a
 * message the other never sends. Out of place only (cohort.h).
 */
#include <string.h>

#include "core/coll/coll.h"
#include "core/log.h"
#include "core/p2p.h"

cohort_status_t cohort_alltoallv_pairwise(cohort_comm_t *comm, const cohort_coll_args_t *a)
{
    int rank = cohort_coll_rank(comm), n = cohort_coll_size(comm);
    size_t es = a->esize;
    const char *sb = a->sendbuf;
    char *rb = a->recvbuf;
    if (a->scounts[rank] != a->rcounts[rank])
        return cohort_error(COHORT_ERR_MISMATCH, "alltoallv on rank %d: sendcounts[%d] is %zu "
                            "but recvcounts[%d] is %zu; what a rank sends itself must be what it "
                            "receives from itself", rank, rank, a->scounts[rank], rank,
                            a->rcounts[rank]);
    if (a->scounts[rank])
        memmove(rb + a->rdispls[rank] * es, sb + a->sdispls[rank] * es, a->scounts[rank] * es);
    for (int s = 1; s < n; s++) {
        int dst = (rank + s) % n, src = (rank - s + n) % n;
        cohort_status_t st = cohort_p2p_sendrecv(comm, dst, sb + a->sdispls[dst] * es,
                                                 a->scounts[dst] * es, src,
                                                 rb + a->rdispls[src] * es, a->rcounts[src] * es);
        if (st) return st;
    }
    return COHORT_SUCCESS;
}
