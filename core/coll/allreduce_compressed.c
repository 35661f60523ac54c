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
 * Segments move in slices (COHORT_COLL_SLICE_CHUNKS chunks of wire elements) through two
 * scratch buffers: encode, exchange, decode per slice; every step makes as many exchanges as
 * the largest segment needs (empty messages for a shorter one).
 */
#include <string.h>

#include "core/coll/coll.h"
#include "core/log.h"
#include "core/p2p.h"
#include "core/reduce.h"

static size_t seg_count(size_t count, int n, int i)
{
    size_t base = count / (size_t)n, rem = count % (size_t)n;
    return base + ((size_t)i < rem ? 1 : 0);
}

static size_t seg_off(size_t count, int n, int i)
{
    size_t base = count / (size_t)n, rem = count % (size_t)n;
    return (size_t)i * base + ((size_t)i < rem ? (size_t)i : rem);
}

cohort_status_t cohort_allreduce_compressed(cohort_comm_t *comm, const cohort_coll_args_t *a)
{
    int pos, n = cohort_comm_size(comm);
    const int *ring = cohort_coll_ring(comm, &pos);
    int right = ring[(pos + 1) % n], left = ring[(pos + n - 1) % n];
    size_t count = a->count;
    cohort_dtype_t wire = (cohort_dtype_t)a->wire;
    const float *send = a->sendbuf;
    float *recv = a->recvbuf;
    size_t slice = cohort_coll_slice_elems(comm, 2, seg_count(count, n, 0));
    uint16_t *out = cohort_coll_scratch(comm, 0, slice * 2);
    uint16_t *in = cohort_coll_scratch(comm, 1, slice * 2);
    if (!out || !in) return COHORT_ERR_NO_MEMORY;
    /* every rank runs the same number of exchanges per step (those of the largest segment), so
     * both ends of each agree even where one of their segments is shorter or empty */
    size_t nsl = (seg_count(count, n, 0) + slice - 1) / slice;
    cohort_status_t st;

    uint64_t t0 = cohort_coll_now(comm);
    for (int s = 0; s < n - 1; s++) {
        int sseg = ((pos - s) % n + n) % n, rseg = ((pos - s - 1) % n + n) % n;
        size_t sc = seg_count(count, n, sseg), rc = seg_count(count, n, rseg);
        const float *src = (s == 0 ? send : recv) + seg_off(count, n, sseg);
        float *dst = recv + seg_off(count, n, rseg);
        const float *own = send + seg_off(count, n, rseg);
        for (size_t j = 0; j < nsl; j++) {
            size_t k = j * slice;
            size_t sl = k < sc ? (sc - k < slice ? sc - k : slice) : 0;
            size_t rl = k < rc ? (rc - k < slice ? rc - k : slice) : 0;
            cohort_wire_encode(out, src + k, sl, wire);
            if ((st = cohort_p2p_sendrecv(comm, right, out, sl * 2, left, in, rl * 2)))
                return st;
            cohort_wire_decode_add(dst + k, own + k, in, rl, wire);
        }
    }
    cohort_coll_phase(comm, "reduce-scatter (compressed)", t0);
    int mine = (pos + 1) % n;
    float *fin = recv + seg_off(count, n, mine);
    size_t fc = seg_count(count, n, mine);
    cohort_reduce_finish(fin, fc, COHORT_FLOAT32, a->op, n);
    for (size_t k = 0; k < fc; k += slice) {   /* the one rounding every rank sees */
        size_t l = fc - k < slice ? fc - k : slice;
        cohort_wire_encode(out, fin + k, l, wire);
        cohort_wire_decode(fin + k, out, l, wire);
    }
    t0 = cohort_coll_now(comm);
    for (int t = 0; t < n - 1; t++) {
        int sseg = ((pos + 1 - t) % n + n) % n, rseg = ((pos - t) % n + n) % n;
        size_t sc = seg_count(count, n, sseg), rc = seg_count(count, n, rseg);
        const float *src = recv + seg_off(count, n, sseg);
        float *dst = recv + seg_off(count, n, rseg);
        for (size_t j = 0; j < nsl; j++) {
            size_t k = j * slice;
            size_t sl = k < sc ? (sc - k < slice ? sc - k : slice) : 0;
            size_t rl = k < rc ? (rc - k < slice ? rc - k : slice) : 0;
            cohort_wire_encode(out, src + k, sl, wire);
            if ((st = cohort_p2p_sendrecv(comm, right, out, sl * 2, left, in, rl * 2)))
                return st;
            cohort_wire_decode(dst + k, in, rl, wire);
        }
    }
    cohort_coll_phase(comm, "allgather (compressed)", t0);
    return COHORT_SUCCESS;
}
