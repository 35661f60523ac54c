/* SPDX-License-Identifier: BSD-3-Clause */
/* ucx-conformance: cases for the ucx plugin beyond the plugin ABI's contract, run by the same
 * harness as cohort-conformance (conformance.c, child.c):
 *   ucx-conformance PATH/libcohort-ucx.so [--np N]
 *
 * A peer's last words: a rank sends a few messages and closes its endpoint (as a rank that
 * leaves a communicator first does) before its peers post the receives. UCX's eager sends
 * complete without the receiver, which the ABI does not promise of every plugin, hence not in
 * cases.c. Over tcp UCX reports the closed sockets to the peers as a failure ("Endpoint
 * timeout"), and the plugin once failed the whole connection on it, losing messages that were
 * waiting in UCX (issue 17: a barrier failing at np 3 right before the communicator's end). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include "tests/conformance/conformance.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { K = 4 };   /* messages per peer before the close */
static const size_t sizes[K] = { 0, 1, 100, 6000 };   /* all sent eagerly by UCX over tcp */

/* Rank 0 sends K messages to every other rank, waits for their sends, and closes its conns and
 * its endpoint. The others make progress until the plugin has seen rank 0's close and then
 * some, so that UCX has read everything up to the end of the connection, and only then
 * receive: every message arrives intact, and one receive more fails with COHORT_ERR_PEER_LOST
 * saying that rank 0 closed. */
static int case_last_words(cf_world_t *w)
{
    if (cf_world(w) || cf_barrier(w)) return -1;
    unsigned char *buf = cf_alloc(w, (size_t)K * 6000 + 64);
    cf_req_t *q = cf_alloc(w, (size_t)w->np * K * sizeof *q);
    if (!buf || !q) return cf_fail(w, "out of memory");
    if (w->rank == 0) {
        int n = 0;
        for (int p = 1; p < w->np; p++)
            for (int i = 0; i < K; i++) {
                unsigned char *b = cf_alloc(w, sizes[i] + 1);
                if (!b) return cf_fail(w, "out of memory");
                cf_fill(b, sizes[i], cf_seed(w, 0, p, i));
                cf_isend(w, p, b, sizes[i], 70 + (uint64_t)i, NULL, &q[n++]);
            }
        if (cf_wait(w, q, n, CF_ORDER_FORWARD)) return -1;
        for (int k = 0; k < n; k++)
            if (q[k].st != COHORT_SUCCESS)
                return cf_fail(w, "send to rank %d failed: %s: %s", q[k].peer,
                               cohort_strerror(q[k].st), q[k].err);
        /* as cohort_comm_destroy does: conn_close of every conn, then ep_close */
        double t0 = cf_now();
        cohort_status_t st = COHORT_SUCCESS;
        for (int p = 1; p < w->np && !st; p++) {
            st = w->ops->conn_close(w->conn[p]);
            w->conn[p] = NULL;
        }
        if (!st) st = w->ops->ep_close(w->ep);
        w->ep = NULL;
        if (st < 0) return cf_fail(w, "closing failed: %s", cohort_strerror(st));
        if (cf_now() - t0 > 2.0)
            return cf_fail(w, "conn_close and ep_close blocked for %.1f s", cf_now() - t0);
        return cf_barrier(w);
    }
    if (cf_barrier(w)) return -1;   /* rank 0 has closed */
    /* the plugin sees the close (conn_test fails once it has), then some more progress */
    while (w->ops->conn_test(w->conn[0]) == COHORT_SUCCESS) {
        if (cf_now() > w->deadline)
            return cf_fail(w, "rank 0 closed its endpoint, but conn_test still reports the "
                           "connection as working");
        cf_pump(w, 10);
    }
    for (int i = 0; i < 20; i++) cf_pump(w, 5);
    for (int i = 0; i < K; i++) cf_irecv(w, 0, buf + (size_t)i * 6000, sizes[i] + 64,
                                        70 + (uint64_t)i, NULL, &q[i]);
    if (cf_wait(w, q, K, CF_ORDER_FORWARD)) return -1;
    for (int i = 0; i < K; i++) {
        if (q[i].st != COHORT_SUCCESS)
            return cf_fail(w, "message %d of %d (%zu bytes) that rank 0 sent before closing: "
                           "%s: %s", i + 1, K, sizes[i], cohort_strerror(q[i].st), q[i].err);
        if (q[i].nbytes != sizes[i] ||
            cf_check(buf + (size_t)i * 6000, sizes[i], cf_seed(w, 0, w->rank, i)) != sizes[i])
            return cf_fail(w, "message %d from rank 0: %zu bytes, wrong size or data", i + 1,
                           q[i].nbytes);
    }
    cf_irecv(w, 0, buf, 64, 99, NULL, &q[0]);
    if (cf_wait(w, q, 1, CF_ORDER_FORWARD)) return -1;
    if (q[0].st != COHORT_ERR_PEER_LOST || !strstr(q[0].err, "rank 0 closed"))
        return cf_fail(w, "a receive beyond what rank 0 sent before closing: expected "
                       "COHORT_ERR_PEER_LOST saying that rank 0 closed, got %s: %s",
                       cohort_strerror(q[0].st), q[0].err);
    return 0;
}

const cf_case_t cf_cases[] = {
    { "a peer's last messages before it closes its endpoint are received after the close",
      case_last_words },
};
const int cf_ncases = (int)(sizeof cf_cases / sizeof cf_cases[0]);
