/* Point-to-point over the communicator's transports, with timeouts, abort and clear errors. */
#include "core/p2p.h"
#include "core/comm.h"
#include "core/jobctl.h"
#include "core/log.h"
#include "core/timeutil.h"

#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* A wait polls the requests (each test makes progress on its connection), runs every
 * endpoint's progress() every PROGRESS_EVERY polls, and after COHORT_SPIN fruitless polls
 * sleeps in poll() on the endpoints' event fds. When the node is oversubscribed every fruitless
 * poll also yields the core: a spinning rank would otherwise burn the time slice that the peer
 * it waits for needs (~4 ms here, against ~1 us for a yield). Otherwise it still yields every
 * YIELD_EVERY fruitless polls: the scheduler may put two ranks on one CPU for a while although
 * there are enough (another process on the other one, or the host taking it away), and then a
 * pure spin costs each step the whole COHORT_SPIN_US (~520 us per 4-byte allreduce at np 2, two
 * ranks moved onto one CPU after their start, against ~3 us with these yields); alone on its
 * CPU a yield returns at once (~0.3 us). */
#define PROGRESS_EVERY 8
#define YIELD_EVERY 32
#define CLOCK_EVERY 16
#define SLEEP_POLL_MS 2

static cohort_status_t check_peer(cohort_comm_t *comm, int peer, const char *what)
{
    if (peer < 0 || peer >= comm->nranks || peer == comm->rank || !comm->peers ||
        comm->peers[peer].plugin < 0)
        return cohort_error(COHORT_ERR_INTERNAL, "rank %d: %s to invalid peer %d in %s",
                            comm->rank, what, peer, cohort_comm_desc(comm));
    return COHORT_SUCCESS;
}

static const cohort_transport_v1_t *ops_of(cohort_comm_t *comm, int peer)
{
    return comm->plugins[comm->peers[peer].plugin]->ops;
}

static cohort_status_t post(cohort_comm_t *comm, int peer, void *buf, size_t len, int is_send,
                            cohort_preq_t *req)
{
    memset(req, 0, sizeof *req);
    req->peer = peer;
    req->is_send = is_send;
    req->len = len;
    cohort_status_t st = check_peer(comm, peer, is_send ? "send" : "receive");
    if (st) return st;
    const cohort_transport_v1_t *ops = ops_of(comm, peer);
    cohort_tp_conn_t conn = comm->peers[peer].conn;
    st = is_send ? ops->isend(conn, buf, len, comm->tag, NULL, &req->tp)
                 : ops->irecv(conn, buf, len, comm->tag, NULL, &req->tp);
    if (st) {
        req->tp = NULL;
        cohort_error_prefix("rank %d posting a %zu-byte %s rank %d (%s) in %s", comm->rank,
                            len, is_send ? "send to" : "receive from", peer,
                            comm->peers[peer].host, cohort_comm_desc(comm));
    }
    return st;
}

cohort_status_t cohort_p2p_isend(cohort_comm_t *comm, int peer, const void *buf, size_t len,
                                 cohort_preq_t *req)
{
    return post(comm, peer, (void *)(uintptr_t)buf, len, 1, req);
}

cohort_status_t cohort_p2p_irecv(cohort_comm_t *comm, int peer, void *buf, size_t len,
                                 cohort_preq_t *req)
{
    return post(comm, peer, buf, len, 0, req);
}

cohort_status_t cohort_p2p_test(cohort_comm_t *comm, cohort_preq_t *req)
{
    if (req->done) return COHORT_SUCCESS;
    if (!req->tp) return cohort_error(COHORT_ERR_INTERNAL, "rank %d: testing a request that was "
                                      "never posted in %s", comm->rank, cohort_comm_desc(comm));
    size_t got = 0;
    cohort_status_t st = ops_of(comm, req->peer)->test(req->tp, &got);
    if (st == COHORT_IN_PROGRESS) return COHORT_SUCCESS;
    req->tp = NULL;
    if (st) {
        comm->fail_peer = req->peer;
        cohort_error_prefix("rank %d %s rank %d (%s) in %s", comm->rank,
                            req->is_send ? "sending to" : "receiving from", req->peer,
                            comm->peers[req->peer].host, cohort_comm_desc(comm));
        return st;
    }
    req->done = 1;
    req->got = req->is_send ? req->len : got;
    if (!req->is_send && got != req->len) {
        comm->fail_peer = req->peer;
        return cohort_error(COHORT_ERR_MISMATCH, "rank %d received %zu bytes from rank %d (%s) "
                            "but expected %zu in %s: the ranks called the collective with "
                            "different counts or datatypes", comm->rank, got, req->peer,
                            comm->peers[req->peer].host, req->len, cohort_comm_desc(comm));
    }
    return COHORT_SUCCESS;
}

/* Sleeps until a transport has something to do, or a short while. Only when every open
 * endpoint offers an event fd: one without (shm today) would not wake us, so then we only yield. */
void cohort_p2p_idle(cohort_comm_t *comm, int timeout_ms)
{
    struct pollfd fds[17];
    int n = 0, blind = 0;
    for (int i = 0; i < comm->nplugins; i++) {
        if (!comm->eps[i]) continue;
        int fd = comm->plugins[i]->ops->ep_fd ? comm->plugins[i]->ops->ep_fd(comm->eps[i]) : -1;
        if (fd >= 0 && n < 16) fds[n++] = (struct pollfd){ fd, POLLIN, 0 };
        else blind = 1;
    }
    int ctl = cohort_jobctl_fd();   /* a notice of the job's failure wakes us too */
    if (n && ctl >= 0) fds[n++] = (struct pollfd){ ctl, POLLIN, 0 };
    if (n && !blind) poll(fds, (nfds_t)n, timeout_ms);
    else sched_yield();
}

cohort_status_t cohort_p2p_progress(cohort_comm_t *comm)
{
    for (int i = 0; i < comm->nplugins; i++)
        if (comm->eps[i]) {
            cohort_status_t st = comm->plugins[i]->ops->progress(comm->eps[i]);
            if (st) return st;
        }
    return COHORT_SUCCESS;
}

/* After COHORT_SPIN fruitless polls: 1 once the rank may sleep, i.e. COHORT_SPIN_US has passed
 * since p->spin_until was 0, or at once when the node is oversubscribed or COHORT_SPIN_US is 0.
 * It looks at the clock every CLOCK_EVERY polls only (24 ns a look here, on a 50 ns poll). */
static int spin_done(cohort_comm_t *comm, cohort_pace_t *p)
{
    if (comm->oversubscribed || !comm->spin_ns) return 1;
    if (p->spin_until && (p->spins - comm->spin) % CLOCK_EVERY) return 0;
    uint64_t now = cohort_now_ns();
    if (!p->spin_until) p->spin_until = now + comm->spin_ns;
    return now >= p->spin_until;
}

static void pending_text(cohort_comm_t *comm, cohort_preq_t *reqs, int n, char *who, size_t len)
{
    size_t used = 0;
    who[0] = '\0';
    for (int i = 0; i < n && used + 64 < len; i++)
        if (!reqs[i].done)
            used += (size_t)snprintf(who + used, len - used, "%s%s rank %d (%s)",
                                     used ? ", " : "", reqs[i].is_send ? "send to" : "receive from",
                                     reqs[i].peer, comm->peers[reqs[i].peer].host);
}

static cohort_status_t timeout_error(cohort_comm_t *comm, cohort_preq_t *reqs, int n)
{
    for (int i = 0; i < n; i++)
        if (!reqs[i].done) {
            comm->fail_peer = reqs[i].peer;
            break;
        }
    char who[512];
    pending_text(comm, reqs, n, who, sizeof who);
    return cohort_error(COHORT_ERR_TIMEOUT, "rank %d: %s stalled for %.0f s waiting on: %s. "
                        "Did every rank call it with the same arguments? A peer that hangs or "
                        "died? COHORT_TIMEOUT sets the limit", comm->rank, cohort_comm_desc(comm),
                        comm->timeout_s, who);
}

/* The plugin contract: ep_fd is readable when progress() could advance something; after waking,
 * call progress() and then test every request before sleeping again. */
cohort_status_t cohort_p2p_pace(cohort_comm_t *comm, cohort_pace_t *p, int progressed,
                                int periodic)
{
    if (progressed) {
        *p = (cohort_pace_t){ 0 };   /* COHORT_TIMEOUT bounds a stall, not the whole wait */
    } else if (p->armed) {
        uint64_t now = cohort_now_ns();
        if (!p->deadline) {
            p->deadline = now + (uint64_t)(comm->timeout_s * 1e9);
            p->stalled_since = now;
            p->next_stall_warn = comm->stall_warn_s > 0
                                 ? now + (uint64_t)(comm->stall_warn_s * 1e9) : 0;
        } else if (now > p->deadline) {
            return COHORT_ERR_TIMEOUT;
        } else if (p->next_stall_warn && now > p->next_stall_warn) {
            p->stall_warn_due = 1;   /* the caller says what it waits on */
            p->next_stall_warn = now + (uint64_t)(comm->stall_warn_s * 1e9);
        }
        cohort_p2p_idle(comm, SLEEP_POLL_MS);
        p->armed = 0;
        cohort_status_t st = atomic_load(&comm->aborted) ? COHORT_SUCCESS
                                                         : cohort_jobctl_check(comm);
        if (st) {
            p->job_failed = 1;
            return st;
        }
        return cohort_p2p_progress(comm);   /* after waking: progress, then test */
    } else if (++p->spins >= comm->spin && spin_done(comm, p)) {
        p->armed = 1;
        return cohort_p2p_progress(comm);   /* before sleeping: progress, test */
    } else if (comm->oversubscribed || p->spins % YIELD_EVERY == 0) {
        sched_yield();
    }
    if (periodic && p->spins % PROGRESS_EVERY == 0) return cohort_p2p_progress(comm);
    return COHORT_SUCCESS;
}

static cohort_status_t wait_some(cohort_comm_t *comm, cohort_preq_t *reqs, int n, int any,
                                 int *index)
{
    cohort_pace_t pace = { 0 };
    if (any) *index = -1;
    for (;;) {
        int pending = 0, progressed = 0;
        for (int i = 0; i < n; i++) {
            if (reqs[i].done) continue;
            cohort_status_t st = cohort_p2p_test(comm, &reqs[i]);
            if (st) return st;
            if (!reqs[i].done) {
                pending++;
                continue;
            }
            progressed = 1;
            if (any) {
                *index = i;
                return COHORT_SUCCESS;
            }
        }
        if (!pending) return COHORT_SUCCESS;
        if (atomic_load(&comm->aborted))
            return cohort_error(COHORT_ERR_ABORTED, "rank %d: %s interrupted: the communicator "
                                "was aborted", comm->rank, cohort_comm_desc(comm));
        cohort_status_t st = cohort_p2p_pace(comm, &pace, progressed, 1);
        if (st == COHORT_ERR_TIMEOUT && !pace.job_failed) return timeout_error(comm, reqs, n);
        if (st) return st;
        if (pace.stall_warn_due) {
            char who[512];
            pending_text(comm, reqs, n, who, sizeof who);
            pace.stall_warn_due = 0;
            cohort_jobctl_stalled(comm, (double)(cohort_now_ns() - pace.stalled_since) * 1e-9,
                                  who);
        }
    }
}

cohort_status_t cohort_p2p_waitall(cohort_comm_t *comm, cohort_preq_t *reqs, int n)
{
    return wait_some(comm, reqs, n, 0, NULL);
}

cohort_status_t cohort_p2p_waitany(cohort_comm_t *comm, cohort_preq_t *reqs, int n, int *index)
{
    return wait_some(comm, reqs, n, 1, index);
}

cohort_status_t cohort_p2p_sendrecv(cohort_comm_t *comm, int dst, const void *sbuf, size_t slen,
                                    int src, void *rbuf, size_t rlen)
{
    cohort_preq_t r[2];
    cohort_status_t st = cohort_p2p_irecv(comm, src, rbuf, rlen, &r[0]);
    if (!st) st = cohort_p2p_isend(comm, dst, sbuf, slen, &r[1]);
    else return st;
    if (st) {
        /* the receive stays posted on the connection; the communicator is unusable now */
        return st;
    }
    return cohort_p2p_waitall(comm, r, 2);
}
