/* SPDX-License-Identifier: BSD-3-Clause */
/* Node-level collectives in shared memory (the shm plugin's collective table, ABI 1.1).
 *
 * All ranks of an endpoint share one "collective area" that rank 0 places at the end of its
 * segment (the connectors map it when they connect to rank 0, so its lifetime and unlinking are
 * the segment's). Layout and protocol are described in coll.c. This file knows nothing of
 * connections: shm.c gives it the area and two hooks (is a peer still there; wake a peer).
 */
#ifndef COHORT_SHM_COLL_H
#define COHORT_SHM_COLL_H

#include <cohort/plugin.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define SHM_COLL_NSLOTS 4                       /* rounds a rank may run ahead of the slowest */
#define SHM_COLL_DEFAULT_ROUND ((long)256 << 10) /* COHORT_SHM_COLL_CHUNK's default (shm.c) */
#define SHM_COLL_MAX_ROUND ((long)64 << 20)

typedef struct shm_coll_hooks {
    void *ep;
    /* COHORT_SUCCESS while peer is there; else the error. report 0: only says so (no log, no
     * change: the caller may still find that what it waits for was published before the peer
     * left); report 1: fails the connection and records the error with host->error. */
    cohort_status_t (*peer_check)(void *ep, int peer, int report);
    /* Wakes peer's ep_fd (it armed itself and we cleared its flag). */
    void (*wake)(void *ep, int peer);
    /* Single copy from a peer's memory (process_vm_readv): 0 or -errno. Used only when cma. */
    int (*read)(void *ep, int peer, void *dst, uint64_t addr, size_t len);
    int cma;                     /* 1: read() works towards every peer */
    int map;                     /* 1: may read the peers' cohort_mem_alloc blocks in place
                                    (COHORT_SHM_MAP; mapped mode, see coll.c) */
    int stream;                  /* stores into the slots of staged collectives (COHORT_SHM_STREAM):
                                    0 ordinary, 1 streaming, 2 measured per size (coll.c) */
} shm_coll_hooks_t;

typedef struct shm_coll shm_coll_t;

/* CLOCK_MONOTONIC in ns (shm.c's deadlines, coll.c's timing of its stores). */
static inline uint64_t shm_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Round size actually used for a requested one (rounded to pages, at least 64 bytes per rank). */
size_t shm_coll_round(int nranks, size_t requested);
/* Bytes of the area for nranks ranks and rounds of `round` bytes (from shm_coll_round). */
size_t shm_coll_area_bytes(int nranks, size_t round);
/* Rank 0: writes the layout into a zeroed area. */
void shm_coll_area_init(void *area, int nranks, size_t round);
/* Others: 0 if a mapped area of len bytes has the layout for nranks (round stored in *round). */
int shm_coll_area_check(const void *area, size_t len, int nranks, size_t *round);

shm_coll_t *shm_coll_new(void *area, int rank, int nranks, const cohort_host_v1_t *host,
                         const shm_coll_hooks_t *hooks);
void shm_coll_free(shm_coll_t *co);
/* Starts a collective (one at a time); then shm_coll_advance until it is not IN_PROGRESS. */
cohort_status_t shm_coll_start(shm_coll_t *co, const cohort_tp_coll_args_t *a);
/* Runs as far as it can without waiting. *moved: something was published or copied.
 * *waiting_on: the rank it waits for (when IN_PROGRESS). */
cohort_status_t shm_coll_advance(shm_coll_t *co, int *moved, int *waiting_on);
int shm_coll_active(const shm_coll_t *co);
/* Abandons the collective in flight; the area's protocol state is lost: no more collectives. */
void shm_coll_cancel(shm_coll_t *co);
/* Sleeping: arm (seq_cst store of our flag), then, after a fence, movable() says whether
 * advance() could do something already; disarm when awake. */
void shm_coll_arm(shm_coll_t *co);
void shm_coll_disarm(shm_coll_t *co);
int shm_coll_movable(const shm_coll_t *co);
/* At close, before shm_coll_free, with no collective in flight: publishes what this rank ran (its
 * history and last collective) for the peers that close after it, then compares with every
 * peer: COHORT_SUCCESS (all that could be compared agree, or this rank's collectives failed
 * earlier: nothing to compare), COHORT_ERR_MISMATCH after host->error naming a peer that ran
 * other collectives and both last calls, or COHORT_IN_PROGRESS while a peer that is still there
 * (hooks.peer_check) has not got as far or has not described itself yet (*waiting_on); once
 * deadline (shm_now_ns) has passed, such a peer is not compared (logged at INFO). Never blocks:
 * call until it is not IN_PROGRESS; to sleep in between, shm_coll_arm, a seq_cst fence, call
 * it once more, then wait to be woken (a peer's fin or in wakes an armed rank). */
cohort_status_t shm_coll_finish(shm_coll_t *co, uint64_t deadline, int *waiting_on);

#endif
