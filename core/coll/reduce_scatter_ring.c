/* SPDX-License-Identifier: BSD-3-Clause */
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
 * Partial results live in two accumulators (scratch slot 1) taking turns: the one filled at
 * step s is sent at step s+1 while the other is filled. Blocks larger than a slice
 * (COHORT_COLL_SLICE_CHUNKS chunks) are reduced slice by slice: the whole ring of steps runs on
 * elements [k, k + slice) of every block, then on the next slice, so the accumulators hold a
 * slice, not a block, and the scratch does not grow with the message.
 *
 * sendbuf is only read. recvbuf is written at a slice's last step:
 *  - in place, recvbuf == sendbuf + r * recvcount: out == own block, which cohort_reduce_local3
 *    allows, and later slices read only later parts of the blocks;
 *  - any other overlap of recvbuf with sendbuf (cohort_reduce_scatter refuses them; the
 *    algorithm copes): the result is kept aside in scratch (block-sized) and copied once every
 *    slice has been sent and read.
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

static int overlaps(const void *a, size_t alen, const void *b, size_t blen)
{
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return x < y + blen && y < x + alen;
}

cohort_status_t cohort_reduce_scatter_ring(cohort_comm_t *comm, const cohort_coll_args_t *a)
{
    int n = cohort_coll_size(comm);
    size_t es = a->esize, rc = a->count, bytes = rc * es;
    const char *sendbuf = a->sendbuf;
    char *recvbuf = a->recvbuf;
    cohort_status_t st = COHORT_SUCCESS;

    int pos;
    const int *ring = cohort_coll_ring(comm, &pos);
    /* recvbuf overlapping sendbuf other than in place (cohort_reduce_scatter refuses it, the
     * algorithm copes): the result is kept aside until every slice has been sent and read. */
    int aside = recvbuf != sendbuf + (size_t)cohort_coll_rank(comm) * bytes &&
                overlaps(recvbuf, bytes, sendbuf, (size_t)n * bytes);
    /* Slices of the blocks (whole elements), the same on every rank. */
    size_t slice = cohort_coll_slice_elems(comm, es, rc);
    size_t sb = slice * es;   /* bytes of a full slice */

    cohort_ring_ctx_t c;
    if ((st = cohort_ring_init(&c, comm, a, slice)))
        return st;
    size_t accb = n > 2 ? 2 * sb : 0;   /* two slice accumulators */
    char *acc = NULL, *res = NULL;
    if (accb || aside) {
        acc = cohort_coll_scratch(comm, 1, accb + (aside ? bytes : 0));
        if (!acc) {
            cohort_ring_fini(&c);
            return COHORT_ERR_NO_MEMORY;
        }
        res = acc + accb;
    }

    int right = ring[(pos + 1) % n], left = ring[(pos + n - 1) % n];
    for (size_t off = 0; off < rc; off += slice) {
        size_t len = rc - off < slice ? rc - off : slice, ob = off * es;
        for (int s = 0; s < n - 1; s++) {
            int sblk = ring[((pos - s - 1) % n + n) % n];
            int rblk = ring[((pos - s - 2) % n + n) % n];
            const char *src = s == 0 ? sendbuf + (size_t)sblk * bytes + ob
                                     : acc + (size_t)((s - 1) % 2) * sb;
            int last = s == n - 2;
            char *out = !last ? acc + (size_t)(s % 2) * sb : aside ? res + ob : recvbuf + ob;
            st = cohort_ring_reduce_step(&c, right, src, len, left, out,
                                         sendbuf + (size_t)rblk * bytes + ob, len);
            if (st)
                goto done;
        }
    }
    if (aside)
        memcpy(recvbuf, res, bytes);   /* every send is complete */
    cohort_reduce_finish(recvbuf, rc, a->dtype, a->op, n);
done:
    cohort_ring_fini(&c);
    return st;
}
