/* SPDX-License-Identifier: BSD-3-Clause */
/* Pairwise-exchange alltoall: n-1 steps; at step s rank r sends block (r + s) mod n to rank
 * (r + s) mod n and receives block (r - s) mod n from rank (r - s) mod n, so every rank talks to
 * exactly one destination and one source per step (no incast). Our own block is copied locally.
 *
 * In place (sendbuf == recvbuf), a received block would overwrite one not sent yet, so the
 * steps pair ranks instead: at step s = 0 .. n-1 rank r and rank (s - r) mod n swap the blocks
 * they hold for each other (every pair meets once, at s = r + p mod n; a rank paired with itself
 * sits the step out), slice by slice through a one-slice scratch buffer (chunks of
 * COHORT_COLL_SLICE_CHUNKS x the chunk size): the memory stays bounded however large the
 * blocks (a copy of the whole buffer, as before, doubled the peak).
 */
#include <string.h>

#include "core/coll/coll.h"
#include "core/log.h"
#include "core/p2p.h"

cohort_status_t cohort_alltoall_pairwise(cohort_comm_t *comm, const cohort_coll_args_t *a)
{
    int rank = cohort_coll_rank(comm), n = cohort_coll_size(comm);
    size_t bytes = a->count * a->esize;   /* one block */
    const char *sendbuf = a->sendbuf;
    char *recvbuf = a->recvbuf;
    cohort_status_t st;

    if (sendbuf == recvbuf) {
        size_t piece = cohort_coll_slice_bytes(comm);
        if (piece > bytes)
            piece = bytes;
        char *tmp = cohort_coll_scratch(comm, 0, piece);
        if (!tmp)
            return COHORT_ERR_NO_MEMORY;
        for (int s = 0; s < n; s++) {
            int peer = ((s - rank) % n + n) % n;
            if (peer == rank)
                continue;
            char *blk = recvbuf + (size_t)peer * bytes;
            for (size_t off = 0; off < bytes; off += piece) {
                size_t len = bytes - off < piece ? bytes - off : piece;
                st = cohort_p2p_sendrecv(comm, peer, blk + off, len, peer, tmp, len);
                if (st)
                    return st;
                memcpy(blk + off, tmp, len);   /* our send of this piece is complete */
            }
        }
        return COHORT_SUCCESS;
    }
    memmove(recvbuf + (size_t)rank * bytes, sendbuf + (size_t)rank * bytes, bytes);

    for (int s = 1; s < n; s++) {
        int dst = (rank + s) % n, src = (rank - s + n) % n;
        st = cohort_p2p_sendrecv(comm, dst, sendbuf + (size_t)dst * bytes, bytes, src,
                                 recvbuf + (size_t)src * bytes, bytes);
        if (st)
            return st;
    }
    return COHORT_SUCCESS;
}
