/* SPDX-License-Identifier: BSD-3-Clause */
/* Binomial-tree reduce to root, pipelined in chunks.
 *
 * Ranks are renumbered v = (rank - root) mod n. Rank v's children are v + m for every power of
 * two m < lowbit(v) with v + m < n (every m < n for the root); its parent is v - lowbit(v).
 * The subtree of child v + m covers the virtual ranks [v + m, v + 2m), so combining
 * own OP child(v+1) OP child(v+2) OP child(v+4) ... reduces ranks in increasing virtual order.
 *
 * The buffer goes in chunks of cohort_coll_chunk_size() bytes (one chunk for small messages): a
 * rank keeps the receives for two chunks per child posted (scratch slot 0: 2 x children x
 * chunk), reduces chunk c while chunk c+1 arrives, and sends each finished chunk up while
 * working on the next. Non-root ranks accumulate into two chunk-sized buffers (scratch slot 1)
 * taking turns; a chunk's accumulator is reused only after its send has completed. The root
 * accumulates straight into recvbuf. Leaves send from sendbuf and need no scratch.
 *
 * sendbuf is never written (in place at root means sendbuf == recvbuf); recvbuf is only touched
 * at the root and may be NULL elsewhere. AVG: summed, divided at the root per finished chunk.
 */
#include <string.h>

#include "core/coll/coll.h"
#include "core/log.h"
#include "core/p2p.h"
#include "core/reduce.h"

#define MAX_CHILDREN 32

cohort_status_t cohort_reduce_tree(cohort_comm_t *comm, const cohort_coll_args_t *a)
{
    int rank = cohort_coll_rank(comm), n = cohort_coll_size(comm);
    size_t es = a->esize, count = a->count;
    const char *sendbuf = a->sendbuf;
    int is_root = rank == a->root;
    cohort_status_t st;

    if (is_root && !a->recvbuf)
        return cohort_error(COHORT_ERR_INVALID_ARG,
                            "reduce tree: recvbuf is NULL on the root (rank %d); the root needs "
                            "a buffer of count elements for the result", rank);
    int v = (rank - a->root + n) % n;
    int children[MAX_CHILDREN], nc = 0, parent = -1;
    for (int mask = 1; mask < n; mask <<= 1) {
        if (v & mask) {
            parent = (v - mask + a->root) % n;
            break;
        }
        if (v + mask < n)
            children[nc++] = (v + mask + a->root) % n;
    }

    size_t ce = cohort_coll_chunk_size(comm) / es;
    if (ce == 0)
        ce = 1;
    if (ce > count)
        ce = count;
    size_t m = (count + ce - 1) / ce;
    size_t cb = ce * es;   /* bytes of a full chunk */
#define CHUNK_N(k) (count - (k) * ce < ce ? count - (k) * ce : ce)

    char *tmp = NULL, *acc = NULL;
    if (nc > 0) {
        tmp = cohort_coll_scratch(comm, 0, 2 * (size_t)nc * cb);
        if (!tmp)
            return COHORT_ERR_NO_MEMORY;
        if (!is_root) {
            acc = cohort_coll_scratch(comm, 1, 2 * cb);
            if (!acc)
                return COHORT_ERR_NO_MEMORY;
        }
    }

    cohort_preq_t rq[2 * MAX_CHILDREN];   /* [parity * nc + child] */
    cohort_preq_t sq[2];                  /* sends to the parent, by chunk parity */
    int sposted[2] = {0, 0};

    for (size_t c = 0; c < m && c < 2; c++)
        for (int i = 0; i < nc; i++)
            if ((st = cohort_p2p_irecv(comm, children[i], tmp + ((c % 2) * nc + i) * cb,
                                       CHUNK_N(c) * es, &rq[(c % 2) * nc + i])))
                return st;

    for (size_t c = 0; c < m; c++) {
        size_t p = c % 2, cn = CHUNK_N(c), off = c * ce * es;
        const char *result = sendbuf + off;   /* a leaf forwards its own data */
        if (!is_root && sposted[p]) {
            /* The accumulator (or, for a leaf, nothing) of chunk c-2 is still being sent. */
            if ((st = cohort_p2p_waitall(comm, &sq[p], 1)))
                return st;
            sposted[p] = 0;
        }
        if (nc > 0) {
            char *out = is_root ? (char *)a->recvbuf + off : acc + p * cb;
            for (int i = 0; i < nc; i++) {
                char *t = tmp + (p * nc + i) * cb;
                if ((st = cohort_p2p_waitall(comm, &rq[p * nc + i], 1)))
                    return st;
                if (i == 0)
                    cohort_reduce_local3(out, sendbuf + off, t, cn, a->dtype, a->op);
                else
                    cohort_reduce_local(out, t, cn, a->dtype, a->op);
                if (c + 2 < m &&
                    (st = cohort_p2p_irecv(comm, children[i], t, CHUNK_N(c + 2) * es,
                                           &rq[p * nc + i])))
                    return st;
            }
            result = out;
        }
        if (is_root) {
            cohort_reduce_finish((char *)a->recvbuf + off, cn, a->dtype, a->op, n);
        } else {
            if ((st = cohort_p2p_isend(comm, parent, result, cn * es, &sq[p])))
                return st;
            sposted[p] = 1;
        }
    }
#undef CHUNK_N
    for (int p = 0; p < 2; p++)
        if (sposted[p] && (st = cohort_p2p_waitall(comm, &sq[p], 1)))
            return st;
    return COHORT_SUCCESS;
}
