/* SPDX-License-Identifier: BSD-3-Clause */
/* Pipelined chain broadcast for large messages along the ring (cohort_coll_ring), starting at
 * the root: root -> the next position -> ... -> the position before the root's.
 *
 * The buffer travels in chunks of cohort_coll_chunk_size() bytes (whole elements). A rank keeps
 * RECV_AHEAD receives posted straight into the user buffer and forwards chunk k to its successor
 * as soon as it has arrived, while chunks k+1.. are still arriving, so all links are busy at once
 * and the time approaches size/bandwidth + (n-2) * chunk/bandwidth.
 * Both ends of a link cut the buffer the same way (same count, esize and chunk size), so the
 * k-th message is always chunk k. At most SEND_AHEAD sends are in flight: chunk k is sent once
 * chunk k - SEND_AHEAD's send is done, so the requests (ours and the transport's) do not grow
 * with the message (the chain has no cycle: waiting on a successor cannot deadlock).
 */
#include <string.h>

#include "core/coll/coll.h"
#include "core/log.h"
#include "core/p2p.h"

#define RECV_AHEAD 8
#define SEND_AHEAD 16

/* Sends chunk k (into sq[k % SEND_AHEAD]) once chunk k - SEND_AHEAD's send is done. */
static cohort_status_t send_chunk(cohort_comm_t *comm, int next, cohort_preq_t *sq, size_t k,
                                  const char *p, size_t len)
{
    cohort_preq_t *q = &sq[k % SEND_AHEAD];
    cohort_status_t st;
    if (k >= SEND_AHEAD && (st = cohort_p2p_waitall(comm, q, 1)))
        return st;
    return cohort_p2p_isend(comm, next, p, len, q);
}

cohort_status_t cohort_broadcast_chain(cohort_comm_t *comm, const cohort_coll_args_t *a)
{
    int n = cohort_coll_size(comm);
    size_t es = a->esize, count = a->count;
    char *buf = a->recvbuf;
    cohort_status_t st = COHORT_SUCCESS;

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

    cohort_preq_t sq[SEND_AHEAD];   /* send k in sq[k % SEND_AHEAD] */
#define SEND(k) send_chunk(comm, next, sq, (k), buf + (k) * ce * es, CHUNK_LEN(k))

    if (prev < 0) {
        /* Root: the whole buffer is ready, send every chunk. */
        for (size_t k = 0; k < m; k++)
            if ((st = SEND(k)))
                goto out;
    } else {
        cohort_preq_t rq[RECV_AHEAD];
        size_t posted = 0;
        for (; posted < m && posted < RECV_AHEAD; posted++)
            if ((st = cohort_p2p_irecv(comm, prev, buf + posted * ce * es, CHUNK_LEN(posted),
                                       &rq[posted % RECV_AHEAD])))
                goto out;
        for (size_t k = 0; k < m; k++) {
            if ((st = cohort_p2p_waitall(comm, &rq[k % RECV_AHEAD], 1)))
                goto out;
            if (next >= 0 && (st = SEND(k)))
                goto out;
            if (posted < m) {
                if ((st = cohort_p2p_irecv(comm, prev, buf + posted * ce * es, CHUNK_LEN(posted),
                                           &rq[posted % RECV_AHEAD])))
                    goto out;
                posted++;
            }
        }
    }
    for (size_t k = m > SEND_AHEAD ? m - SEND_AHEAD : 0; next >= 0 && k < m; k++)
        if ((st = cohort_p2p_waitall(comm, &sq[k % SEND_AHEAD], 1)))
            break;
#undef SEND
#undef CHUNK_LEN
out:
    return st;
}
