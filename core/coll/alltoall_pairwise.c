/* Pairwise-exchange alltoall: n-1 steps; at step s rank r sends block (r + s) mod n to rank
 * (r + s) mod n and receives block (r - s) mod n from rank (r - s) mod n, so every rank talks to
 * exactly one destination and one source per step (no incast). Our own block is copied locally.
 *
 * In place (sendbuf == recvbuf), received blocks would overwrite blocks not sent yet, so the
 * send data is first copied to scratch.
 */
#include <string.h>

#include "core/coll/coll.h"
#include "core/log.h"
#include "core/p2p.h"

cohort_status_t cohort_alltoall_pairwise(cohort_comm_t *comm, const cohort_coll_args_t *a)
{
    int rank = cohort_comm_rank(comm), n = cohort_comm_size(comm);
    size_t bytes = a->count * a->esize;   /* one block */
    const char *sendbuf = a->sendbuf;
    char *recvbuf = a->recvbuf;
    cohort_status_t st;

    if (bytes == 0)
        return COHORT_SUCCESS;
    if (sendbuf == recvbuf) {
        if (n == 1)
            return COHORT_SUCCESS;
        char *copy = cohort_coll_scratch(comm, 0, (size_t)n * bytes);
        if (!copy)
            return COHORT_ERR_NO_MEMORY;
        memcpy(copy, sendbuf, (size_t)n * bytes);
        sendbuf = copy;   /* our own block is already in place */
    } else {
        memmove(recvbuf + (size_t)rank * bytes, sendbuf + (size_t)rank * bytes, bytes);
    }

    for (int s = 1; s < n; s++) {
        int dst = (rank + s) % n, src = (rank - s + n) % n;
        st = cohort_p2p_sendrecv(comm, dst, sendbuf + (size_t)dst * bytes, bytes, src,
                                 recvbuf + (size_t)src * bytes, bytes);
        if (st != COHORT_SUCCESS)
            return st;
    }
    return COHORT_SUCCESS;
}
