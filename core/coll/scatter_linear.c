/* SPDX-License-Identifier: BSD-3-Clause */
/* Linear scatter: the root posts one send per rank at once (block r of sendbuf to rank r) and
 * waits for them together; every other rank receives its block straight into recvbuf. The root
 * copies its own block unless in place. */
#include <stdlib.h>
#include <string.h>

#include "core/coll/coll.h"
#include "core/log.h"
#include "core/p2p.h"

cohort_status_t cohort_scatter_linear(cohort_comm_t *comm, const cohort_coll_args_t *a)
{
    int rank = cohort_coll_rank(comm), n = cohort_coll_size(comm);
    size_t bytes = a->count * a->esize;
    cohort_preq_t one;
    if (rank != a->root) {
        cohort_status_t st = cohort_p2p_irecv(comm, a->root, a->recvbuf, bytes, &one);
        return st ? st : cohort_p2p_waitall(comm, &one, 1);
    }
    const char *sb = a->sendbuf;
    if (sb + (size_t)rank * bytes != (const char *)a->recvbuf)
        memmove(a->recvbuf, sb + (size_t)rank * bytes, bytes);
    cohort_preq_t *sq = calloc((size_t)n, sizeof *sq);
    if (!sq)
        return cohort_error(COHORT_ERR_NO_MEMORY, "scatter on rank %d (root): no memory for %d "
                            "send requests", rank, n);
    cohort_status_t st = COHORT_SUCCESS;
    int nq = 0;
    for (int r = 0; r < n && !st; r++)
        if (r != rank) st = cohort_p2p_isend(comm, r, sb + (size_t)r * bytes, bytes, &sq[nq++]);
    if (!st) st = cohort_p2p_waitall(comm, sq, nq);
    free(sq);
    return st;
}
