/* SPDX-License-Identifier: BSD-3-Clause */
/* Test-only stand-in for core/p2p.c and the communicator services of core/coll/coll.h: a "world"
 * of N ranks living as threads of one process, with an ordered queue per (src, dst) pair.
 *
 * Sends are eager (copied, complete at once) or rendezvous (complete only once a receive has
 * taken the data straight from the sender's buffer, which catches algorithms that reuse a send
 * buffer too early or that deadlock when sends cannot complete before the matching receive).
 * Every wait has a deadline; a rank that fails can abort the world so the others return
 * COHORT_ERR_ABORTED instead of waiting.
 */
#ifndef COHORT_TESTS_MOCK_P2P_H
#define COHORT_TESTS_MOCK_P2P_H

#include <stddef.h>
#include "cohort/cohort.h"

typedef struct mock_world mock_world_t;

mock_world_t *mock_world_create(int nranks);
void mock_world_destroy(mock_world_t *w);
cohort_comm_t *mock_world_comm(mock_world_t *w, int rank);

/* Settings; change them only while no collective runs. */
void mock_world_set_chunk(mock_world_t *w, size_t chunk_bytes);
void mock_world_set_rendezvous(mock_world_t *w, int on);
void mock_world_set_timeout(mock_world_t *w, double seconds);
/* COHORT_ALGO entry for every rank ("" / NULL coll clears the spec). */
void mock_world_set_algo(mock_world_t *w, const char *coll, const char *algo);
/* Ring order for the ring and chain algorithms (ring[pos] = rank, a permutation); NULL: the
 * identity. */
void mock_world_set_ring(mock_world_t *w, const int *ring);
/* The nth (1-based) isend/irecv of rank fails with status; 0 disables. */
void mock_world_fail_call(mock_world_t *w, int rank, int nth, cohort_status_t status);

/* Wake every waiter with COHORT_ERR_ABORTED; later posts fail the same way. */
void mock_world_abort(mock_world_t *w);
/* Drop queued messages and outstanding requests, clear the abort flag and the failure. */
void mock_world_reset(mock_world_t *w);
/* 1 when no message is queued and no request is outstanding; else 0 and why in buf. */
int mock_world_idle(mock_world_t *w, char *buf, size_t len);

/* Counters since the last reset of stats. */
typedef struct mock_stats {
    size_t messages;     /* matched messages */
    size_t bytes;
    size_t max_len;      /* largest message */
} mock_stats_t;
void mock_world_stats(mock_world_t *w, mock_stats_t *st, int reset);

#endif
