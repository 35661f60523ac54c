/* SPDX-License-Identifier: BSD-3-Clause */
/* The request engine: the non-blocking calls of cohort.h.
 *
 * A non-blocking call is checked when it is issued (bad arguments fail the call itself, nothing
 * is queued) and then queued on its communicator. The queue runs in issue order, one operation
 * at a time, through the same code as the blocking calls (so every rank runs the same sequence
 * and the sequence numbers, tags, tokens, timeouts and stall reports hold as they do for blocking
 * calls). Who runs it is COHORT_PROGRESS:
 *  - thread (default): one progress thread per communicator, started at its first non-blocking
 *    call, asleep whenever the queue is empty (no CPU when idle; on a condition variable, or
 *    where threads outnumber cores in poll() on an eventfd and a timer: engine.c), joined by
 *    cohort_comm_destroy. Data moves while the caller computes.
 *  - caller: no thread; queued operations run inside cohort_test / cohort_wait / cohort_waitall
 *    (and before a blocking call), in the calling thread.
 * A blocking call first lets the queue drain (it is ordered after the outstanding operations),
 * then runs in the caller's thread as before: its latency is unchanged when nothing is queued.
 * An operation's error message (thread-local where it happened) travels in its request and
 * becomes cohort_last_error() of the thread that completes the request.
 */
#ifndef COHORT_CORE_ENGINE_H
#define COHORT_CORE_ENGINE_H

#include <stdint.h>
#include "cohort/cohort.h"
#include "core/coll/coll.h"

/* Runs one queued operation on comm, which the engine holds (busy) for it: the blocking path's
 * start + dispatch, without the checks the issue already made. */
typedef cohort_status_t (*cohort_engine_exec_fn)(cohort_comm_t *comm, cohort_coll_args_t *a,
                                                 const char *fn);

/* Point-to-point messages of the application run by the engine (core/api.c): the runner posts
 * the messages at the head of the queue in order, and while it waits for them it takes the
 * messages queued behind them meanwhile (more) and posts them too, so that a receive never
 * holds back a send issued after it; done(i) completes message i (in any order; with an error,
 * cohort_last_error() holds its message). It returns once every message it took is done. */
typedef struct cohort_engine_p2p_io {
    cohort_comm_t *comm;
    /* up to max more messages from the queue's head (0: none there now) */
    int (*more)(struct cohort_engine_p2p_io *io, cohort_coll_args_t **as, int max);
    void (*done)(struct cohort_engine_p2p_io *io, int i, cohort_status_t st);
    void *ctx;
} cohort_engine_p2p_io_t;
typedef void (*cohort_engine_p2p_fn)(cohort_engine_p2p_io_t *io);

/* Queues a (validated) operation; its v-variant arrays are copied. *req receives the request.
 * Inside a group the operation is held until cohort_engine_group_end. blocking: 0 for a
 * non-blocking call; COHORT_ENGINE_IN_GROUP for a blocking call made inside a group, which
 * group_end completes (and frees) itself; COHORT_ENGINE_JOINED for a blocking call queued behind
 * outstanding ones, which its caller waits for (never fused: it must do what it does when it
 * runs in the caller's thread). */
enum { COHORT_ENGINE_IN_GROUP = 1, COHORT_ENGINE_JOINED = 2 };
cohort_status_t cohort_engine_submit(cohort_comm_t *comm, const cohort_coll_args_t *a,
                                     const char *fn, cohort_engine_exec_fn exec,
                                     cohort_engine_p2p_fn p2p, int blocking,
                                     cohort_request_t **req);
/* cohort_group_start / cohort_group_end (comm checked by the caller). group_end plans the
 * group's fusion (core/fusion.h), queues it and waits for the blocking calls made inside it;
 * it returns the first of their failures. */
cohort_status_t cohort_engine_group_start(cohort_comm_t *comm);
cohort_status_t cohort_engine_group_end(cohort_comm_t *comm);
int cohort_engine_in_group(cohort_comm_t *comm);
/* Requests that ran inside fused allreduces, and those allreduces, since comm's creation. */
void cohort_engine_stats(cohort_comm_t *comm, uint64_t *requests, uint64_t *batches);
/* Returns once nothing is queued or running on comm (running what is queued in caller mode).
 * Cheap when comm never issued a non-blocking call. */
void cohort_engine_drain(cohort_comm_t *comm);
/* 1 while operations are queued or running on comm (0 without an engine): a blocking call then
 * joins the queue instead of running in its caller's thread. */
int cohort_engine_busy(cohort_comm_t *comm);
/* Requests issued on comm and not yet completed by test/wait (0 without an engine). */
unsigned cohort_engine_live(cohort_comm_t *comm);
/* Where the engine's threads outnumber the cores, a queued call does not wake the sleeping
 * progress thread: a timer does, a deferral later, unless a waiter ran the call first (engine.c).
 * The next deferral after cur: COHORT_ENGINE_DEFER_NS when found (the timer found a call nobody
 * ran, or a waiter took one that long after its issue), else twice cur (the timer found nothing
 * while calls are waited for at once), up to COHORT_ENGINE_DEFER_MAX_NS. */
#define COHORT_ENGINE_DEFER_NS 50000u
#define COHORT_ENGINE_DEFER_MAX_NS 400000u
uint64_t cohort_engine_next_defer(uint64_t cur, int found);
/* Stops the progress thread and frees the engine (cohort_comm_destroy, once live is 0). */
void cohort_engine_free(cohort_comm_t *comm);

#endif
