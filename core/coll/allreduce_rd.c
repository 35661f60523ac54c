/* SPDX-License-Identifier: BSD-3-Clause */
/* Recursive-doubling allreduce for small and medium messages: log2(p2) steps in which partners
 * exchange the whole buffer (latency-optimal; every rank moves log2(n) full buffers, so ring
 * wins once the message is large).
 *
 * Non-powers of two (p2 = largest power of two <= n, extra = n - p2):
 *   1. rank r >= p2 sends its data to r - p2, which folds it in (r - p2 < extra);
 *   2. ranks 0 .. p2-1 run recursive doubling: at distance d = 1, 2, ..., p2/2 exchange with
 *      r ^ d and combine;
 *   3. rank r < extra sends the result to r + p2.
 *
 * Bitwise-identical results on every rank: in each exchange both partners hold exactly the same
 * two operands and compute result = lower OP upper, where "lower" is the operand that came from
 * the partner with the smaller rank (cohort_reduce_local3 into the result buffer). IEEE addition
 * and multiplication are commutative, so a + b vs b + a would already agree; but MIN/MAX kernels
 * of the form `a < b ? a : b` are not commutative when a NaN is involved, and fixing the operand
 * order costs nothing. Extra ranks receive a copy of the final result, and AVG's division is
 * applied by every p2 rank to identical sums before that copy, so it agrees as well.
 *
 * Out of place: the first combination writes own(sendbuf) OP received into recvbuf; extra ranks
 * send straight from sendbuf and receive the result into recvbuf. No copy of sendbuf is made.
 *
 * Scratch holds the partner's data, so a message larger than a slice (COHORT_COLL_SLICE_CHUNKS
 * chunks: recursive doubling is chosen for small messages, but COHORT_ALGO=allreduce:rd forces
 * it at any size) runs as consecutive independent allreduces of slices, and the scratch stays one
 * slice. Every rank cuts the buffer the same way (same count, element size and chunk size).
 */
#include <string.h>

#include "core/coll/coll.h"
#include "core/log.h"
#include "core/p2p.h"
#include "core/reduce.h"

/* Recursive doubling over count elements: cur (sendbuf's slice) into recvbuf, tmp holds as many
 * bytes as the slice. */
static cohort_status_t rd_slice(cohort_comm_t *comm, const cohort_coll_args_t *a,
                                const char *cur, char *recvbuf, size_t count, char *tmp)
{
    int rank = cohort_coll_rank(comm), n = cohort_coll_size(comm);
    size_t bytes = count * a->esize;
    cohort_status_t st;

    int p2 = 1;
    while (p2 * 2 <= n)
        p2 *= 2;
    int extra = n - p2;

    if (rank >= p2) {
        /* Steps 1 and 3 for an extra rank: hand our data over, get the result back. The
         * receive is posted only once the send is done, as in place it targets the same
         * memory (the result cannot arrive earlier anyway). */
        cohort_preq_t rq;
        if ((st = cohort_p2p_isend(comm, rank - p2, cur, bytes, &rq)) ||
            (st = cohort_p2p_waitall(comm, &rq, 1)))
            return st;
        if ((st = cohort_p2p_irecv(comm, rank - p2, recvbuf, bytes, &rq)))
            return st;
        return cohort_p2p_waitall(comm, &rq, 1);
    }

    if (rank < extra) {
        /* We are the lower rank of the pair (rank, rank + p2). */
        cohort_preq_t rq;
        if ((st = cohort_p2p_irecv(comm, rank + p2, tmp, bytes, &rq)))
            return st;
        if ((st = cohort_p2p_waitall(comm, &rq, 1)))
            return st;
        cohort_reduce_local3(recvbuf, cur, tmp, count, a->dtype, a->op);
        cur = recvbuf;
    }

    for (int d = 1; d < p2; d *= 2) {
        int partner = rank ^ d;
        st = cohort_p2p_sendrecv(comm, partner, cur, bytes, partner, tmp, bytes);
        if (st)
            return st;
        if (rank < partner)
            cohort_reduce_local3(recvbuf, cur, tmp, count, a->dtype, a->op);
        else
            cohort_reduce_local3(recvbuf, tmp, cur, count, a->dtype, a->op);
        cur = recvbuf;
    }
    cohort_reduce_finish(recvbuf, count, a->dtype, a->op, n);

    if (rank < extra) {
        cohort_preq_t rq;
        if ((st = cohort_p2p_isend(comm, rank + p2, recvbuf, bytes, &rq)))
            return st;
        return cohort_p2p_waitall(comm, &rq, 1);
    }
    return COHORT_SUCCESS;
}

cohort_status_t cohort_allreduce_rd(cohort_comm_t *comm, const cohort_coll_args_t *a)
{
    int rank = cohort_coll_rank(comm), n = cohort_coll_size(comm);
    size_t es = a->esize, count = a->count;
    const char *sendbuf = a->sendbuf;
    char *recvbuf = a->recvbuf;
    cohort_status_t st = COHORT_SUCCESS;

    size_t slice = cohort_coll_slice_elems(comm, es, count);
    char *tmp = NULL;
    int p2 = 1;
    while (p2 * 2 <= n)
        p2 *= 2;
    if (rank < p2 && !(tmp = cohort_coll_scratch(comm, 0, slice * es)))   /* extra ranks: none */
        return COHORT_ERR_NO_MEMORY;
    for (size_t off = 0; off < count && st == COHORT_SUCCESS; off += slice) {
        size_t len = count - off < slice ? count - off : slice;
        st = rd_slice(comm, a, sendbuf + off * es, recvbuf + off * es, len, tmp);
    }
    return st;
}
