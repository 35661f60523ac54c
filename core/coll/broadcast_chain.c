/* Pipelined chain broadcast for large messages along the ring (cohort_coll_ring), starting at
 * the root: root -> the next position -> ... -> the position before the root's.
 *
 * The buffer travels in chunks of cohort_coll_chunk_size() bytes (whole elements). A rank keeps
 * RECV_AHEAD receives posted straight into the user buffer and forwards chunk k to its successor
 * as soon as it has arrived, while chunks k+1.. are still arriving, so all links are busy at once
 * and the time approaches size/bandwidth + (n-2) * chunk/bandwidth.
 * Both ends of a link cut the buffer the same way (same count, esize and chunk size), so the
 * k-th message is always chunk k.
 */
#include <stdlib.h>
#include <string.h>

#include "core/coll/coll.h"
#include "core/log.h"
#include "core/p2p.h"

#define RECV_AHEAD 8
#define STACK_REQS 16

cohort_status_t cohort_broadcast_chain(cohort_comm_t *comm, const cohort_coll_args_t *a)
{
    int n = cohort_comm_size(comm);
    size_t es = a->esize, count = a->count;
    char *buf = a->recvbuf;
    cohort_status_t st = COHORT_SUCCESS;

    if (count == 0 || es == 0 || n == 1)
        return COHORT_SUCCESS;

    int pos, rpos = 0;
    const int *ring = cohort_coll_ring(comm, &pos);
    while (rpos < n && ring[rpos] != a->root)
        rpos++;
    int v = (pos - rpos + n) % n;                           /* position in the chain */
    int next = v + 1 < n ? ring[(rpos + v + 1) % n] : -1;
    int prev = v > 0 ? ring[(rpos + v - 1) % n] : -1;
    size_t ce = cohort_coll_chunk_size(comm) / es;
    if (ce == 0)
        ce = 1;
    size_t m = (count + ce - 1) / ce;                      /* chunks */
#define CHUNK_LEN(k) ((count - (k) * ce < ce ? count - (k) * ce : ce) * es)

    cohort_preq_t stack_sq[STACK_REQS], *sq = stack_sq;
    if (next >= 0 && m > STACK_REQS) {
        sq = malloc(m * sizeof(*sq));
        if (!sq)
            return cohort_error(COHORT_ERR_NO_MEMORY,
                                "broadcast chain: cannot allocate %zu send requests; raise "
                                "COHORT_CHUNK_SIZE to use fewer, larger chunks", m);
    }

    if (prev < 0) {
        /* Root: the whole buffer is ready, post every chunk. */
        for (size_t k = 0; k < m; k++)
            if ((st = cohort_p2p_isend(comm, next, buf + k * ce * es, CHUNK_LEN(k), &sq[k])) !=
                COHORT_SUCCESS)
                goto out;
    } else {
        cohort_preq_t rq[RECV_AHEAD];
        size_t posted = 0;
        for (; posted < m && posted < RECV_AHEAD; posted++)
            if ((st = cohort_p2p_irecv(comm, prev, buf + posted * ce * es, CHUNK_LEN(posted),
                                       &rq[posted % RECV_AHEAD])) != COHORT_SUCCESS)
                goto out;
        for (size_t k = 0; k < m; k++) {
            if ((st = cohort_p2p_waitall(comm, &rq[k % RECV_AHEAD], 1)) != COHORT_SUCCESS)
                goto out;
            if (next >= 0 && (st = cohort_p2p_isend(comm, next, buf + k * ce * es, CHUNK_LEN(k),
                                                    &sq[k])) != COHORT_SUCCESS)
                goto out;
            if (posted < m) {
                if ((st = cohort_p2p_irecv(comm, prev, buf + posted * ce * es, CHUNK_LEN(posted),
                                           &rq[posted % RECV_AHEAD])) != COHORT_SUCCESS)
                    goto out;
                posted++;
            }
        }
    }
    if (next >= 0)
        st = cohort_p2p_waitall(comm, sq, (int)m);
#undef CHUNK_LEN
out:
    if (sq != stack_sq)
        free(sq);
    return st;
}
