/* SPDX-License-Identifier: BSD-3-Clause */
/* Ring allgather: n-1 steps around the ring (cohort_coll_ring: positions, not rank numbers); at
 * step s the rank at position p sends the block of the rank at position p - s to position p + 1
 * and receives the block of position p - s - 1 from position p - 1 straight into its place in
 * recvbuf (bandwidth-optimal: (n-1)/n of the result crosses each link once).
 *
 * In place means sendbuf == recvbuf + rank * sendcount elements: the block is already where it
 * belongs. Any other sendbuf is first moved to that slot with memmove, which also covers
 * sendbuf == recvbuf (and any overlap with recvbuf).
 */
#include <string.h>

#include "core/coll/coll.h"
#include "core/log.h"
#include "core/p2p.h"

cohort_status_t cohort_allgather_ring(cohort_comm_t *comm, const cohort_coll_args_t *a)
{
    int rank = cohort_coll_rank(comm), n = cohort_coll_size(comm);
    size_t bytes = a->count * a->esize;   /* one block */
    char *recvbuf = a->recvbuf;
    cohort_status_t st;

    if ((const char *)a->sendbuf != recvbuf + (size_t)rank * bytes)
        memmove(recvbuf + (size_t)rank * bytes, a->sendbuf, bytes);

    int pos;
    const int *ring = cohort_coll_ring(comm, &pos);
    int right = ring[(pos + 1) % n], left = ring[(pos + n - 1) % n];
    for (int s = 0; s < n - 1; s++) {
        int sblk = ring[((pos - s) % n + n) % n];
        int rblk = ring[((pos - s - 1) % n + n) % n];
        cohort_preq_t rq[2];
        if ((st = cohort_p2p_irecv(comm, left, recvbuf + (size_t)rblk * bytes, bytes, &rq[0])) !=
                COHORT_SUCCESS ||
            (st = cohort_p2p_isend(comm, right, recvbuf + (size_t)sblk * bytes, bytes, &rq[1])) !=
                COHORT_SUCCESS ||
            (st = cohort_p2p_waitall(comm, rq, 2)))
            return st;
    }
    return COHORT_SUCCESS;
}
