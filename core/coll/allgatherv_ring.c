/* SPDX-License-Identifier: BSD-3-Clause */
/* Ring allgatherv: the ring allgather with a block size per rank. n-1 steps; at step t the rank
 * at ring position p sends the block that started at position p - t to its right neighbour and
 * receives the one that started at p - t - 1 from its left, straight into its place in recvbuf
 * (rdispls), so nothing is copied but the rank's own block (none in place).
 *
 * Every rank passes the same rcounts (their hash is part of the tag), so both ends of a step
 * know its sizes; an empty block still travels as an empty message, which keeps the steps in
 * lockstep without a special case. Displacements are this rank's own layout: they may differ
 * between ranks and blocks may come in any order in recvbuf.
 */
#include <string.h>

#include "core/coll/coll.h"
#include "core/p2p.h"

cohort_status_t cohort_allgatherv_ring(cohort_comm_t *comm, const cohort_coll_args_t *a)
{
    int pos, n = cohort_coll_size(comm);
    const int *ring = cohort_coll_ring(comm, &pos);
    size_t es = a->esize;
    char *rb = a->recvbuf;
    int me = ring[pos];
    char *own = rb + a->rdispls[me] * es;
    if (a->rcounts[me] && (const char *)a->sendbuf != own)
        memmove(own, a->sendbuf, a->rcounts[me] * es);
    int right = ring[(pos + 1) % n], left = ring[(pos + n - 1) % n];
    for (int t = 0; t < n - 1; t++) {
        int sb = ring[(pos - t + n) % n], rbk = ring[(pos - t - 1 + 2 * n) % n];
        cohort_status_t st = cohort_p2p_sendrecv(comm, right, rb + a->rdispls[sb] * es,
                                                 a->rcounts[sb] * es, left,
                                                 rb + a->rdispls[rbk] * es, a->rcounts[rbk] * es);
        if (st) return st;
    }
    return COHORT_SUCCESS;
}
