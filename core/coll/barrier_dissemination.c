/* SPDX-License-Identifier: BSD-3-Clause */
/* Dissemination barrier (Hensgen, Finkel, Manber): ceil(log2 n) rounds; in round k rank r sends
 * an empty message to (r + 2^k) mod n and waits for one from (r - 2^k) mod n. After the last
 * round every rank has heard, directly or transitively, from every other one; works for any n,
 * not only powers of two.
 */
#include "core/coll/coll.h"
#include "core/log.h"
#include "core/p2p.h"

cohort_status_t cohort_barrier_dissemination(cohort_comm_t *comm, const cohort_coll_args_t *a)
{
    int rank = cohort_coll_rank(comm), n = cohort_coll_size(comm);
    char sbyte = 0, rbyte = 0;   /* valid addresses for the zero-byte messages */
    (void)a;

    for (long dist = 1; dist < n; dist *= 2) {
        int dst = (int)((rank + dist) % n), src = (int)((rank - dist % n + n) % n);
        cohort_status_t st = cohort_p2p_sendrecv(comm, dst, &sbyte, 0, src, &rbyte, 0);
        if (st)
            return st;
    }
    return COHORT_SUCCESS;
}
