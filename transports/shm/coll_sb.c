/* SPDX-License-Identifier: BSD-3-Clause */
/* Node collectives in shared memory: the small-broadcast lane. The size limit of the lane and
 * the bytes of its entries in the area, and the lending of a root's cohort_mem_alloc buffer to
 * the readers of a small broadcast (which then read it in place); the lane's entries are written
 * and read by the engine in coll.c (sb_of, sb_data in coll_int.h). The protocol, the lane
 * included, is described at the top of coll.c.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cohort/plugin.h>
#include "coll_int.h"

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

/* The largest small broadcast for n ranks: 64 KiB at 2 ranks, 32 KiB at 4, 16 KiB at 8, 8 KiB
 * at 16, 4 KiB from 32 (the lane's data is n * SB_DEPTH of these: 8 MiB up to 32 ranks,
 * 256 KiB per rank beyond). The larger lane beat the staged path and single copy at every size
 * it took over (docs/performance-log.md, "Measurements behind the code's constants"). */
size_t coll_sb_max(int n)
{
    size_t m = SB_BUDGET / ((size_t)n * SB_DEPTH);
    m = m > SB_MAX ? SB_MAX : m < SB_MAX_LOW ? SB_MAX_LOW : m;
    return m / LINE * LINE;
}

size_t coll_small_bytes(int n)
{
    return ((size_t)n * SB_DEPTH * (LINE + coll_sb_max(n)) + AREA_PAGE - 1) / AREA_PAGE * AREA_PAGE;
}

/* A small broadcast of at least MAP_MIN bytes whose root's buffer came from cohort_mem_alloc,
 * when every other rank said it can map the root's blocks: the root describes its buffer in
 * its control line and lends it (it then waits for the readers, as in mapped mode), instead of
 * copying it into its entry (about twice as fast at 64 KiB; docs/performance-log.md). Readers
 * whose own buffers come from cohort_mem_alloc probe (coll_can_map_all) at their first such
 * broadcast, so the ones after it lend. */
int coll_sb_lend_mine(shm_coll_t *co)
{
    const cohort_tp_coll_args_t *a = &co->a;
    const cohort_host_v1_t *h = co->host;
    if (co->bytes < MAP_MIN || !COHORT_HAS_FIELD(h, cohort_host_v1_t, mem_shared) ||
        !h->mem_shared || co->can_map == 0)
        return 0;
    if (co->rank != a->root) {   /* say whether we can map the roots' blocks */
        int fd;
        uint64_t id, off;
        if (co->can_map < 0 && h->mem_shared(a->recvbuf, co->bytes, &fd, &id, &off))
            coll_can_map_all(co);
        return 0;
    }
    for (int j = 0; j < co->n; j++)
        if (j != co->rank && atomic_load_explicit(&co->ctl[j].mapcap, memory_order_acquire) != 2u)
            return 0;
    if (!coll_describe_bufs(co)) return 0;
    if (!(co->map_said & 4)) {
        co->map_said |= 4;
        co->host->log(COHORT_LOG_INFO, "shm", "shm: rank %d: its small broadcasts from "
                      "cohort_mem_alloc buffers are read in place (first: %zu bytes)", co->rank,
                      co->bytes);
    }
    return 1;
}
/* A small broadcast's reader, when its root lent its buffer: copy from it in place. */
cohort_status_t coll_sb_borrow(shm_coll_t *co)
{
    const rank_ctl_t *c = &co->ctl[co->a.root];
    const unsigned char *p = coll_map_peer(co, co->a.root, c->rfd, c->rid, c->roff, co->bytes, 0);
    if (!p) return COHORT_ERR_SYSTEM;
    memcpy(co->a.recvbuf, p, co->bytes);
    return COHORT_SUCCESS;
}

/* Whether this step is a small broadcast whose root lent us its buffer (and waits for our out,
 * which is then published with a wake-up, even when we failed: the root returns, and the
 * histories show the next collective that compares what went wrong). */
int coll_sb_lent(shm_coll_t *co)
{
    if (!co->sb || co->rank == co->a.root) return 0;
    const sb_hdr_t *e = sb_of(co, co->a.root, co->t);
    if (atomic_load_explicit(&e->step, memory_order_acquire) != co->t || !e->lend) return 0;
    co->map_d = 1;
    return 1;
}

