/* SPDX-License-Identifier: BSD-3-Clause */
/* Ring allreduce: reduce-scatter then allgather over n segments (bandwidth-optimal: every rank
 * sends and receives 2 (n-1)/n of the buffer).
 *
 * The buffer is cut into n segments whose sizes differ by at most one element (segments are empty
 * when count < n; empty ones are skipped by both ends, which agree because both know count).
 *
 * Ranks below are ring positions (cohort_coll_ring: the topology's order), not rank numbers.
 *
 * Reduce-scatter, step s = 0 .. n-2: send segment (rank - s) to rank + 1, receive segment
 * (rank - s - 1) from rank - 1 and reduce it with our own data of that segment. Inside a step the
 * segment travels in chunks of cohort_coll_chunk_size() bytes (whole elements; core/coll/ring_step.c): PIPE_DEPTH
 * receives are posted ahead into scratch slots and each chunk is reduced as soon as it arrives,
 * while the following ones are still on the wire; the slot is then reposted for a later chunk.
 * After n-1 steps rank r holds the complete result of segment (r + 1) mod n.
 *
 * Allgather, step t = 0 .. n-2: send segment (rank + 1 - t), receive segment (rank - t) straight
 * into recvbuf. Every element is reduced on exactly one rank and copied to the others, so all
 * ranks end with bitwise identical results whatever the dtype.
 *
 * Out of place costs no extra copy: the first time a segment is reduced the result is
 * own(sendbuf) OP received, written to recvbuf (cohort_reduce_local3); the segment a rank sends
 * first (its own, at step 0) goes from sendbuf and is overwritten in recvbuf by the allgather.
 * In place, sendbuf == recvbuf and the same formula applies.
 *
 * AVG: summed like SUM; the owner divides its finished segment once before the allgather.
 */
#include <stdlib.h>
#include <string.h>

#include "core/coll/coll.h"
#include "core/log.h"
#include "core/p2p.h"
#include "core/reduce.h"
#include "core/coll/ring_step.h"



/* Send slen bytes to dst and receive rlen bytes from src; empty sides are skipped. */
static cohort_status_t xfer(cohort_comm_t *comm, int dst, const void *sbuf, size_t slen, int src,
                            void *rbuf, size_t rlen)
{
    cohort_preq_t rq[2];
    int nq = 0;
    cohort_status_t st;
    if (rlen && (st = cohort_p2p_irecv(comm, src, rbuf, rlen, &rq[nq++])))
        return st;
    if (slen && (st = cohort_p2p_isend(comm, dst, sbuf, slen, &rq[nq++])))
        return st;
    return nq ? cohort_p2p_waitall(comm, rq, nq) : COHORT_SUCCESS;
}

cohort_status_t cohort_allreduce_ring(cohort_comm_t *comm, const cohort_coll_args_t *a)
{
    /* Segments are numbered by ring position (cohort_coll_ring), so "rank" below is this
     * rank's position and right/left its ring neighbours. */
    int rank, n = cohort_coll_size(comm);
    const int *ring = cohort_coll_ring(comm, &rank);
    size_t es = a->esize, count = a->count;
    const char *sendbuf = a->sendbuf;
    char *recvbuf = a->recvbuf;
    int right = ring[(rank + 1) % n], left = ring[(rank + n - 1) % n];
    cohort_status_t st = COHORT_SUCCESS;

    cohort_ring_ctx_t c;
    if ((st = cohort_ring_init(&c, comm, a, cohort_coll_seg_count(count, n, 0))))
        return st;

    /* Reduce-scatter. */
    uint64_t t0 = cohort_coll_now(comm);
    for (int s = 0; s < n - 1; s++) {
        int sseg = ((rank - s) % n + n) % n;
        int rseg = ((rank - s - 1) % n + n) % n;
        size_t soff = cohort_coll_seg_off(count, n, sseg) * es, roff = cohort_coll_seg_off(count, n, rseg) * es;
        /* Step 0 sends our own data, from sendbuf; later steps forward partial results. */
        const char *src = (s == 0 ? sendbuf : recvbuf) + soff;
        st = cohort_ring_reduce_step(&c, right, src, cohort_coll_seg_count(count, n, sseg), left, recvbuf + roff,
                         sendbuf + roff, cohort_coll_seg_count(count, n, rseg));
        if (st)
            goto out;
    }
    /* Rank owns segment rank+1 complete. */
    int own = (rank + 1) % n;
    cohort_reduce_finish(recvbuf + cohort_coll_seg_off(count, n, own) * es, cohort_coll_seg_count(count, n, own), a->dtype,
                         a->op, n);

    cohort_coll_phase(comm, "reduce-scatter", t0);
    t0 = cohort_coll_now(comm);

    /* Allgather. */
    for (int t = 0; t < n - 1; t++) {
        int sseg = ((rank + 1 - t) % n + n) % n;
        int rseg = ((rank - t) % n + n) % n;
        st = xfer(comm, right, recvbuf + cohort_coll_seg_off(count, n, sseg) * es,
                  cohort_coll_seg_count(count, n, sseg) * es, left, recvbuf + cohort_coll_seg_off(count, n, rseg) * es,
                  cohort_coll_seg_count(count, n, rseg) * es);
        if (st)
            goto out;
    }
    cohort_coll_phase(comm, "allgather", t0);
out:
    cohort_ring_fini(&c);
    return st;
}
