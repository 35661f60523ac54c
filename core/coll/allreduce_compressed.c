/* SPDX-License-Identifier: BSD-3-Clause */
/* Ring allreduce of float32 (SUM, AVG) with fp16 or bf16 on the wire (COHORT_COMPRESS,
 * cohort_comm_set_compression), for communicators whose ranks sit on different nodes, where
 * the network is the bottleneck: every message carries half the bytes.
 *
 * The ring allreduce's steps (core/coll/allreduce_ring.c), with every accumulation in float32:
 *  - reduce-scatter, step s: the partial sum of one segment goes to the right neighbour encoded
 *    (a->wire), the left neighbour's arrives encoded, is decoded and added in float32 to this
 *    rank's own input of that segment;
 *  - the owner of a finished segment (AVG: divided once) rounds it to the wire format once and
 *    back, so that every rank ends with the same values bit for bit;
 *  - allgather: the rounded segments travel encoded (encoding a decoded value is exact) and are
 *    decoded into recvbuf.
 * Error: each of the n - 1 hops of a segment's partial sum and the final rounding add at most
 * u x |partial| (u = 2^-11 for fp16, 2^-8 for bf16), so |result - exact| <= n x u x sum |x_r|
 * (docs/design.md); fp16 also overflows to inf past 65504 (bf16 has float32's range).
 * Segments move in slices (COHORT_COLL_SLICE_CHUNKS chunks of wire elements) through double
 * buffers: slice j + 1 is encoded and on the wire while slice j is decoded; every step makes as
 * many exchanges as the largest segment needs (empty messages for a shorter one). fp16 uses the
 * CPU's F16C instructions where it has them (core/reduce.c).
 */
#include <string.h>

#include "core/coll/coll.h"
#include "core/log.h"
#include "core/p2p.h"
#include "core/reduce.h"


typedef struct wire_ctx {
    cohort_comm_t *comm;
    int right, left;
    size_t slice, nsl;
    cohort_dtype_t wire;
    uint16_t *out[2], *in[2];   /* double buffers: slice j in [j % 2] */
} wire_ctx_t;

/* One ring step: sc elements of src go right encoded, rc elements come from the left and are
 * decoded into dst (added to own when own is not NULL), slice by slice; slice j + 1 is encoded
 * and posted before slice j is waited for and decoded, so the conversions overlap the wire. */
static cohort_status_t step(wire_ctx_t *c, const float *src, size_t sc, float *dst,
                            const float *own, size_t rc)
{
    cohort_preq_t rq[2][2];
    cohort_status_t st = COHORT_SUCCESS;
    size_t posted = 0;
    for (size_t j = 0; j < c->nsl && !st; j++) {
        for (; posted < c->nsl && posted <= j + 1 && !st; posted++) {
            size_t k = posted * c->slice, b = posted % 2;
            size_t sl = k < sc ? (sc - k < c->slice ? sc - k : c->slice) : 0;
            size_t rl = k < rc ? (rc - k < c->slice ? rc - k : c->slice) : 0;
            cohort_wire_encode(c->out[b], src + k, sl, c->wire);
            st = cohort_p2p_irecv(c->comm, c->left, c->in[b], rl * 2, &rq[b][0]);
            if (!st) st = cohort_p2p_isend(c->comm, c->right, c->out[b], sl * 2, &rq[b][1]);
        }
        if (st || (st = cohort_p2p_waitall(c->comm, rq[j % 2], 2))) break;
        size_t k = j * c->slice;
        size_t rl = k < rc ? (rc - k < c->slice ? rc - k : c->slice) : 0;
        if (own) cohort_wire_decode_add(dst + k, own + k, c->in[j % 2], rl, c->wire);
        else cohort_wire_decode(dst + k, c->in[j % 2], rl, c->wire);
    }
    return st;
}

cohort_status_t cohort_allreduce_compressed(cohort_comm_t *comm, const cohort_coll_args_t *a)
{
    int pos, n = cohort_coll_size(comm);
    const int *ring = cohort_coll_ring(comm, &pos);
    size_t count = a->count;
    const float *send = a->sendbuf;
    float *recv = a->recvbuf;
    wire_ctx_t c = { .comm = comm, .right = ring[(pos + 1) % n], .left = ring[(pos + n - 1) % n],
                     .wire = (cohort_dtype_t)a->wire };
    c.slice = cohort_coll_slice_elems(comm, 2, cohort_coll_seg_count(count, n, 0));
    /* every rank runs the same number of exchanges per step (those of the largest segment), so
     * both ends of each agree even where one of their segments is shorter or empty */
    c.nsl = (cohort_coll_seg_count(count, n, 0) + c.slice - 1) / c.slice;
    uint16_t *o = cohort_coll_scratch(comm, 0, c.slice * 4);
    uint16_t *i = cohort_coll_scratch(comm, 1, c.slice * 4);
    if (!o || !i) return COHORT_ERR_NO_MEMORY;
    c.out[0] = o;
    c.out[1] = o + c.slice;
    c.in[0] = i;
    c.in[1] = i + c.slice;
    cohort_status_t st;

    uint64_t t0 = cohort_coll_now(comm);
    for (int s = 0; s < n - 1; s++) {
        int sseg = ((pos - s) % n + n) % n, rseg = ((pos - s - 1) % n + n) % n;
        const float *src = (s == 0 ? send : recv) + cohort_coll_seg_off(count, n, sseg);
        if ((st = step(&c, src, cohort_coll_seg_count(count, n, sseg), recv + cohort_coll_seg_off(count, n, rseg),
                       send + cohort_coll_seg_off(count, n, rseg), cohort_coll_seg_count(count, n, rseg))))
            return st;
    }
    cohort_coll_phase(comm, "reduce-scatter (compressed)", t0);
    int mine = (pos + 1) % n;
    float *fin = recv + cohort_coll_seg_off(count, n, mine);
    size_t fc = cohort_coll_seg_count(count, n, mine);
    cohort_reduce_finish(fin, fc, COHORT_FLOAT32, a->op, n);
    for (size_t k = 0; k < fc; k += c.slice) {   /* the one rounding every rank sees */
        size_t l = fc - k < c.slice ? fc - k : c.slice;
        cohort_wire_encode(c.out[0], fin + k, l, c.wire);
        cohort_wire_decode(fin + k, c.out[0], l, c.wire);
    }
    t0 = cohort_coll_now(comm);
    for (int t = 0; t < n - 1; t++) {
        int sseg = ((pos + 1 - t) % n + n) % n, rseg = ((pos - t) % n + n) % n;
        if ((st = step(&c, recv + cohort_coll_seg_off(count, n, sseg), cohort_coll_seg_count(count, n, sseg),
                       recv + cohort_coll_seg_off(count, n, rseg), NULL, cohort_coll_seg_count(count, n, rseg))))
            return st;
    }
    cohort_coll_phase(comm, "allgather (compressed)", t0);
    return COHORT_SUCCESS;
}
