/* SPDX-License-Identifier: BSD-3-Clause */
/* Linear gather: every rank sends its block to the root, which posts all n-1 receives at once
 * (straight into recvbuf) and waits for them together, as Gloo does; the root copies its own
 * block unless in place. One message per rank, the root's link carries everything once: the
 * cost a gather cannot avoid. */
#include <stdlib.h>
#include <string.h>

#include "core/coll/coll.h"
#include "core/log.h"
#include "core/p2p.h"

cohort_status_t cohort_gather_linear(cohort_comm_t *comm, const cohort_coll_args_t *a)
{
    int rank = cohort_coll_rank(comm), n = cohort_coll_size(comm);
    size_t bytes = a->count * a->esize;
    cohort_preq_t one;
    if (rank != a->root) {
        cohort_status_t st = cohort_p2p_isend(comm, a->root, a->sendbuf, bytes, &one);
        return st ? st : cohort_p2p_waitall(comm, &one, 1);
    }
    char *rb = a->recvbuf;
    if ((const char *)a->sendbuf != rb + (size_t)rank * bytes)
        memmove(rb + (size_t)rank * bytes, a->sendbuf, bytes);
    cohort_preq_t *rq = calloc((size_t)n, sizeof *rq);
    if (!rq)
        return cohort_error(COHORT_ERR_NO_MEMORY, "gather on rank %d (root): no memory for %d "
                            "receive requests", rank, n);
    cohort_status_t st = COHORT_SUCCESS;
    int nq = 0;
    for (int r = 0; r < n && !st; r++)
        if (r != rank) st = cohort_p2p_irecv(comm, r, rb + (size_t)r * bytes, bytes, &rq[nq++]);
    if (!st) st = cohort_p2p_waitall(comm, rq, nq);
    free(rq);
    return st;
}
