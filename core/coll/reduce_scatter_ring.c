/* Ring reduce-scatter: n-1 steps over n blocks of recvcount elements; rank r ends with the
 * reduced block r. The ring is cohort_coll_ring's: below, p is this rank's position, B(q) the
 * block of the rank at position q.
 *
 * Step s = 0 .. n-2: send the partial result of B(p - s - 1) to position p + 1 (at step 0 that
 * is our own data, straight from sendbuf), receive the partial result of B(p - s - 2) from
 * position p - 1 and combine it with our own data of that block. At the last step the block
 * received is B(p), our own, and its result goes to recvbuf.
 *
 * Inside a step a block travels in chunks of cohort_coll_chunk_size() bytes: PIPE_DEPTH receives
 * are posted ahead into scratch slot 0 and each chunk is reduced as soon as it arrives.
 * Partial results live in two block-sized accumulators (scratch slot 1) taking turns: the one
 * filled at step s is sent at step s+1 while the other is filled.
 *
 * sendbuf is only read. recvbuf is written only at the last step, from data already read:
 *  - in place, recvbuf == sendbuf + r * recvcount: out == own block, which cohort_reduce_local3
 *    allows;
 *  - recvbuf == sendbuf (or any other overlap): the only sendbuf data still in use at the last
 *    step is our own block r and, when n == 2, the block being sent; if recvbuf overlaps the
 *    block being sent, the result goes to an accumulator and is copied after the send is done.
 * AVG: summed, then divided once in recvbuf.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/coll/coll.h"
#include "core/log.h"
#include "core/p2p.h"
#include "core/reduce.h"
#include "core/coll/ring_step.h"

static int overlaps(const void *a, const void *b, size_t len)
{
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return x < y + len && y < x + len;
}

cohort_status_t cohort_reduce_scatter_ring(cohort_comm_t *comm, const cohort_coll_args_t *a)
{
    int n = cohort_comm_size(comm);
    size_t es = a->esize, rc = a->count, bytes = rc * es;
    const char *sendbuf = a->sendbuf;
    char *recvbuf = a->recvbuf;
    cohort_status_t st = COHORT_SUCCESS;

    if (bytes == 0)
        return COHORT_SUCCESS;
    if (n == 1) {
        if (sendbuf != recvbuf)
            memmove(recvbuf, sendbuf, bytes);
        cohort_reduce_finish(recvbuf, rc, a->dtype, a->op, 1);
        return COHORT_SUCCESS;
    }

    cohort_ring_ctx_t c;
    if ((st = cohort_ring_init(&c, comm, a, rc)) != COHORT_SUCCESS)
        return st;

    int pos;
    const int *ring = cohort_coll_ring(comm, &pos);
    /* The block sent at the last step: an accumulator when n > 2, our own data when n == 2. */
    int last_sblk = ring[(pos + 1) % n];   /* B(p - (n-2) - 1) */
    int direct = n > 2 || !overlaps(recvbuf, sendbuf + (size_t)last_sblk * bytes, bytes);
    char *acc = NULL;
    if (n > 2 || !direct) {
        acc = cohort_coll_scratch(comm, 1, 2 * bytes);
        if (!acc)
            return COHORT_ERR_NO_MEMORY;
    }

    int right = ring[(pos + 1) % n], left = ring[(pos + n - 1) % n];
    for (int s = 0; s < n - 1; s++) {
        int sblk = ring[((pos - s - 1) % n + n) % n];
        int rblk = ring[((pos - s - 2) % n + n) % n];
        const char *src = s == 0 ? sendbuf + (size_t)sblk * bytes : acc + (size_t)((s - 1) % 2) * bytes;
        int last = s == n - 2;
        char *out = last && direct ? recvbuf : acc + (size_t)(s % 2) * bytes;
        st = cohort_ring_reduce_step(&c, right, src, rc, left, out, sendbuf + (size_t)rblk * bytes,
                                     rc);
        if (st != COHORT_SUCCESS)
            goto done;
        if (last && !direct)
            memcpy(recvbuf, out, bytes);   /* the step's sends are complete */
    }
    cohort_reduce_finish(recvbuf, rc, a->dtype, a->op, n);
done:
    cohort_ring_fini(&c);
    return st;
}
