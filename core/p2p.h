/* SPDX-License-Identifier: BSD-3-Clause */
/* Point-to-point layer the collective algorithms run on.
 *
 * Messages between two ranks of a communicator are matched in order (the n-th send from a to b
 * matches the n-th receive of b from a). Every message carries the tag of the collective in
 * progress (sequence number + a signature of coll/count/dtype/op/root), set by the API layer, so
 * ranks that disagree get COHORT_ERR_MISMATCH instead of corrupted memory.
 * Waits honour COHORT_TIMEOUT and abort; on timeout the error names the peers still pending.
 *
 * Agreement tokens. A tag is only compared when a message meets a posted receive, and ranks
 * that disagree on a root (or on a count that picks another algorithm) can each wait for a
 * receive that nobody sends. So the first isend or irecv of a broadcast or a reduce (and of an
 * allreduce or allgather where a hierarchy may run them; see needs_token in p2p.c) first posts
 * a token: a 32-byte message to the rank after this one in the ring order (cohort_coll_ring)
 * describing the call (sequence number, collective, count, dtype, op, root), and a receive of
 * the token of the rank before it. The ring does not depend on any argument, so when the ranks
 * disagree, some rank receives a token that differs from its own: COHORT_ERR_MISMATCH naming
 * both calls. No collective waits for its token while it runs (a broadcast's root still
 * returns without waiting for anyone): waits test the open tokens when they go to sleep (so
 * ranks that wait for each other forever learn why within milliseconds), a collective whose
 * result needed every rank confirms them all before it returns (cohort_p2p_coll_done), tokens
 * that pile up (a root running ahead) are tested every few collectives and a rank waits for
 * the oldest once COHORT_P2P_TOKENS are open, and cohort_p2p_token_finish
 * (cohort_comm_destroy) confirms the last ones. */
#ifndef COHORT_CORE_P2P_H
#define COHORT_CORE_P2P_H

#include <stddef.h>
#include <stdint.h>
#include "cohort/cohort.h"

typedef struct cohort_preq {
    void *tp;        /* transport request (NULL when done) */
    int peer;
    int is_send;
    size_t len;      /* bytes posted */
    size_t got;      /* bytes received (receives, once done) */
    int done;
} cohort_preq_t;

/* len may be 0. peer == own rank is an error (algorithms copy locally instead). */
cohort_status_t cohort_p2p_isend(cohort_comm_t *comm, int peer, const void *buf, size_t len,
                                 cohort_preq_t *req);
cohort_status_t cohort_p2p_irecv(cohort_comm_t *comm, int peer, void *buf, size_t len,
                                 cohort_preq_t *req);
/* A message of the application (cohort_send / cohort_recv): its own tag space (the top bit set,
 * the application's tag below), no agreement token, the same in-order matching. comm->cur
 * describes it for messages. */
#define COHORT_P2P_USER_TAG(tag) ((1ull << 63) | (uint64_t)(uint32_t)(tag))
cohort_status_t cohort_p2p_post_user(cohort_comm_t *comm, int peer, void *buf, size_t len,
                                     int is_send, int tag, cohort_preq_t *req);
/* Non-blocking check of one request: sets req->done. */
cohort_status_t cohort_p2p_test(cohort_comm_t *comm, cohort_preq_t *req);
/* Waits until all n requests are done (done ones are skipped). A receive that got fewer bytes
 * than posted is COHORT_ERR_MISMATCH. */
cohort_status_t cohort_p2p_waitall(cohort_comm_t *comm, cohort_preq_t *reqs, int n);
/* Waits until at least one of the n requests is done; *index receives it. */
cohort_status_t cohort_p2p_waitany(cohort_comm_t *comm, cohort_preq_t *reqs, int n, int *index);
/* Sleeps up to timeout_ms until a transport may have something to do (poll() on the endpoints'
 * event fds), or only yields the core when some open endpoint has no event fd. */
void cohort_p2p_idle(cohort_comm_t *comm, int timeout_ms);
/* The pace of one wait, shared by the core's wait loops (requests here, a transport's own
 * collectives in core/plugin_coll.c): spin COHORT_SPIN polls and COHORT_SPIN_US (yielding
 * each poll when oversubscribed; after a slow yield, polling briefly without yields: p2p.c),
 * then sleep on the endpoints' fds, COHORT_TIMEOUT per stall. Start it zeroed. */
typedef struct cohort_pace {
    unsigned spins;          /* fruitless polls since the last progress */
    uint64_t spin_until;     /* end of the COHORT_SPIN_US window (0: not started) */
    uint64_t deadline;       /* end of the stall allowed (0: not started) */
    int armed;               /* progress() ran and a full pass found nothing: sleep next */
    uint64_t stalled_since;  /* when this stall began (with deadline) */
    uint64_t next_stall_warn;/* when to report it (COHORT_STALL_WARN; 0: never) */
    int stall_warn_due;      /* set by pace: the caller reports the stall, then clears it */
    int job_failed;          /* the error returned is the job's (jobctl.h), with its message */
    int hold;                /* no yields in this stall: one took long (p2p.c, yield_core) */
} cohort_pace_t;
/* Call after each pass over what the wait is for, saying whether the pass got anywhere.
 * COHORT_SUCCESS: poll again; COHORT_ERR_TIMEOUT, without a message (the caller names what
 * stalled): the stall exceeded COHORT_TIMEOUT; or the error of an endpoint's progress(); or,
 * with job_failed set and a message, the job's failure (another rank's, core/jobctl.h).
 * stall_warn_due: the stall passed COHORT_STALL_WARN; the caller calls cohort_jobctl_stalled.
 * periodic: also run progress() after every PROGRESS_EVERY-th pass while spinning. */
cohort_status_t cohort_p2p_pace(cohort_comm_t *comm, cohort_pace_t *p, int progressed,
                                int periodic);
/* Runs every open endpoint's progress() once. */
cohort_status_t cohort_p2p_progress(cohort_comm_t *comm);
/* Tokens a communicator keeps open at most (see the top of this file). */
#define COHORT_P2P_TOKENS 1024
/* After a collective returned success on comm: when its result needed every rank (all but a
 * broadcast, a scatter, and a reduce or gather off its root), the rank before this one has
 * sent the tokens of every collective up to this one, so waiting for them costs next to nothing and makes a mismatch
 * that let the earlier calls return (a broadcast whose ranks each were the root) fail this
 * one at the latest. Otherwise nothing. */
cohort_status_t cohort_p2p_coll_done(cohort_comm_t *comm);
/* Posts the current collective's token if no isend/irecv has, then waits for every open token:
 * for algorithms that hand the work to sub-communicators (the *_hier ones), whose waits do not
 * test this communicator's tokens. */
cohort_status_t cohort_p2p_token_sync(cohort_comm_t *comm);
/* For cohort_comm_destroy: confirms the open tokens, waiting up to wait_ms for the ones that
 * have not arrived (the rank before this one has not reached that collective yet). A token
 * that differs: COHORT_ERR_MISMATCH naming both calls. One that does not come in time, or a
 * peer that is gone: logged at INFO, COHORT_SUCCESS. Nothing to do after a failure or abort.
 * The tokens stay allocated: cohort_p2p_token_free them after closing the connections (open
 * receives point into them). */
cohort_status_t cohort_p2p_token_finish(cohort_comm_t *comm, int wait_ms);
void cohort_p2p_token_free(cohort_comm_t *comm);

/* Send to one peer and receive from another (or the same), both posted before waiting. */
cohort_status_t cohort_p2p_sendrecv(cohort_comm_t *comm, int dst, const void *sbuf, size_t slen,
                                    int src, void *rbuf, size_t rlen);

#endif
