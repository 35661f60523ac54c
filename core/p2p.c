/* SPDX-License-Identifier: BSD-3-Clause */
/* Point-to-point over the communicator's transports, with timeouts, abort and clear errors. */
#include "core/p2p.h"
#include "core/coll/coll.h"
#include "core/comm.h"
#include "core/jobctl.h"
#include "core/log.h"
#include "core/timeutil.h"

#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A wait polls the requests (each test makes progress on its connection), runs every
 * endpoint's progress() every PROGRESS_EVERY polls, and after COHORT_SPIN fruitless polls
 * sleeps in poll() on the endpoints' event fds. When the node is oversubscribed every fruitless
 * poll also yields the core: a spinning rank would otherwise burn the time slice that the peer
 * it waits for needs (a time slice is milliseconds, a yield about a microsecond). Otherwise it
 * still yields every YIELD_EVERY fruitless polls: the scheduler may put two ranks on one CPU for
 * a while although there are enough (another process on the other one, or the host taking it
 * away), and then a pure spin costs each step the whole COHORT_SPIN_US, over a hundred times the
 * step with these yields; alone on its CPU a yield returns at once (docs/performance-log.md,
 * "Measurements behind the code's constants"). */
#define PROGRESS_EVERY 8
#define YIELD_EVERY 32
#define CLOCK_EVERY 16
#define SLEEP_POLL_MS 2

/* A yield hands the core to whatever else runs there. A rank that polls as we do gives it back
 * within microseconds; a thread that computes (the application's own, while cohort's progress
 * thread or a framework's completion thread waits for it; or another program) may keep it for
 * the rest of its time slice, milliseconds, and every message the wait needs then costs that
 * much. Where every peer is on another node (its messages come through sockets, whose wake-up
 * gets the core back at once), a yield that took SLOW_YIELD_NS or more (well above a hand-off
 * between polling threads, below any scheduler's slice) puts the thread on hold for HOLD_NS:
 * its waits poll without yielding for up to HOLD_SPIN_NS and then sleep on the endpoints' fds
 * (docs/performance-log.md, eighth sitting of 2026-11-27). When the hold ends a
 * yield is tried again: if it is slow again the next hold is twice as long (up to HOLD_MAX_NS,
 * so that a probe costs a small part of the time), if it is quick the holds start over. */
#define SLOW_YIELD_NS 200000ull
#define HOLD_NS 100000000ull
#define HOLD_MAX_NS 1600000000ull
#define HOLD_SPIN_NS 30000ull
static _Thread_local uint64_t hold_until, hold_len;

/* Whether comm's waits may hold: not with a peer on this node, which a slow yield may have gone
 * to and which answers sooner when we yield than when it must wake us (measured: held waits made
 * shm bursts at np 2 and 8 B allreduces at np 4 on 2 cores slower). */
static int may_hold(const cohort_comm_t *comm)
{
    return comm->local_size == 1;
}

static void yield_core(const cohort_comm_t *comm, cohort_pace_t *p)
{
    if (!may_hold(comm)) {
        sched_yield();
        return;
    }
    uint64_t t0 = cohort_now_ns();
    sched_yield();
    uint64_t t1 = cohort_now_ns();
    if (t1 - t0 < SLOW_YIELD_NS) {
        hold_len = 0;
        return;
    }
    hold_len = !hold_len ? HOLD_NS : hold_len < HOLD_MAX_NS / 2 ? 2 * hold_len : HOLD_MAX_NS;
    if (hold_len == HOLD_NS)   /* a hold's start, not each probe's */
        COHORT_INFO("p2p", "rank %d: a yield kept this thread off its core for %.0f us (a "
                    "thread that computes shares it): its waits sleep instead of yielding for "
                    "%.0f ms or more", comm->rank, (double)(t1 - t0) / 1e3,
                    (double)HOLD_NS / 1e6);
    hold_until = t1 + hold_len;
    p->hold = 1;
    p->spin_until = 0;   /* the hold's own window (hold_spin_done), not COHORT_SPIN_US's */
}

/* On hold: 1 once the wait has polled for HOLD_SPIN_NS (the clock read every CLOCK_EVERY). */
static int hold_spin_done(cohort_pace_t *p)
{
    if (p->spins % CLOCK_EVERY) return 0;
    uint64_t now = cohort_now_ns();
    if (!p->spin_until) p->spin_until = now + HOLD_SPIN_NS;
    return now >= p->spin_until;
}

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
                            uint64_t tag, cohort_preq_t *req)
{
    memset(req, 0, sizeof *req);
    req->peer = peer;
    req->is_send = is_send;
    req->len = len;
    cohort_status_t st = check_peer(comm, peer, is_send ? "send" : "receive");
    if (st) return st;
    const cohort_transport_v1_t *ops = ops_of(comm, peer);
    cohort_tp_conn_t conn = comm->peers[peer].conn;
    st = is_send ? ops->isend(conn, buf, len, tag, NULL, &req->tp)
                 : ops->irecv(conn, buf, len, tag, NULL, &req->tp);
    if (st) {
        req->tp = NULL;
        cohort_error_prefix("rank %d posting a %zu-byte %s rank %d (%s) in %s", comm->rank,
                            len, is_send ? "send to" : "receive from", peer,
                            comm->peers[peer].host, cohort_comm_desc(comm));
    }
    return st;
}

static cohort_status_t token_begin(cohort_comm_t *comm);

/* Whether the current collective needs a token: where ranks that disagree can each wait for
 * a message nobody sends. A broadcast's and a reduce's ranks only send or only receive by their
 * root (two ranks that each think the other is the broadcast's root both only receive). A
 * hierarchical allreduce or allgather sends nothing on this communicator, so a rank whose count
 * picks the flat algorithm waits on the others for nothing. The other algorithms send in their
 * first step to ranks that receive from them in theirs (between two ranks: each sends to the
 * other and receives from it before it waits), so their own messages meet posted receives and
 * their tags tell. */
static int needs_token(const cohort_comm_t *comm)
{
    cohort_coll_t c = comm->cur->coll;
    return c == COHORT_COLL_BROADCAST || c == COHORT_COLL_REDUCE || c == COHORT_COLL_GATHER ||
           c == COHORT_COLL_SCATTER || c == COHORT_COLL_ALLGATHERV ||
           (comm->hier_node && (c == COHORT_COLL_ALLREDUCE || c == COHORT_COLL_ALLGATHER));
}

/* A collective's first post sends its token first (p2p.h). */
static cohort_status_t post_coll(cohort_comm_t *comm, int peer, void *buf, size_t len,
                                 int is_send, cohort_preq_t *req)
{
    if (comm->tok_seq != comm->seq && comm->cur) {
        comm->tok_seq = comm->seq;
        cohort_status_t st = needs_token(comm) ? token_begin(comm) : COHORT_SUCCESS;
        if (st) {
            memset(req, 0, sizeof *req);
            return st;
        }
    }
    return post(comm, peer, buf, len, is_send, comm->tag, req);
}

cohort_status_t cohort_p2p_isend(cohort_comm_t *comm, int peer, const void *buf, size_t len,
                                 cohort_preq_t *req)
{
    return post_coll(comm, peer, (void *)(uintptr_t)buf, len, 1, req);
}

cohort_status_t cohort_p2p_irecv(cohort_comm_t *comm, int peer, void *buf, size_t len,
                                 cohort_preq_t *req)
{
    return post_coll(comm, peer, buf, len, 0, req);
}

cohort_status_t cohort_p2p_post_user(cohort_comm_t *comm, int peer, void *buf, size_t len,
                                     int is_send, int tag, cohort_preq_t *req)
{
    return post(comm, peer, buf, len, is_send, COHORT_P2P_USER_TAG(tag), req);
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
                            "but expected %zu in %s: %s", comm->rank, got, req->peer,
                            comm->peers[req->peer].host, req->len, cohort_comm_desc(comm),
                            comm->cur && comm->cur->coll == COHORT_OP_RECV
                            ? "the receive's count and datatype must hold exactly what was sent"
                            : "the ranks called the collective with different counts or "
                              "datatypes");
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
 * It looks at the clock every CLOCK_EVERY polls only: a clock read costs about as much as a
 * poll. */
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
    return cohort_error(COHORT_ERR_TIMEOUT, "rank %d: %s stalled for %g s waiting on: %s. "
                        "Did every rank call it with the same arguments? A peer that hangs or "
                        "died? %s sets the limit", comm->rank, cohort_comm_desc(comm),
                        comm->timeout_s, who, cohort_comm_timeout_source(comm));
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
        if (!st && comm->hier_parent) st = cohort_jobctl_check(comm->hier_parent);
        if (st) {
            p->job_failed = 1;
            return st;
        }
        return cohort_p2p_progress(comm);   /* after waking: progress, then test */
    } else {
        /* a stall starts on hold while a slow yield is recent (yield_core; a thread may wait
         * on communicators of both kinds) */
        if (++p->spins == 1 && hold_until && may_hold(comm) && cohort_now_ns() < hold_until)
            p->hold = 1;
        if (p->hold ? hold_spin_done(p) : p->spins >= comm->spin && spin_done(comm, p)) {
            p->armed = 1;
            return cohort_p2p_progress(comm);   /* before sleeping: progress, test */
        }
        if (!p->hold && (comm->oversubscribed || p->spins % YIELD_EVERY == 0)) yield_core(comm, p);
    }
    if (periodic && p->spins % PROGRESS_EVERY == 0) return cohort_p2p_progress(comm);
    return COHORT_SUCCESS;
}

/* ---- Agreement tokens (p2p.h) ---- */

/* A token's tag has sequence part 0, which no collective's tag has (the first is #1): a token
 * that meets a collective's receive, or the reverse, is a tag mismatch in the transport. */
#define TOKEN_TAG 0x746f6b6eull
#define TOKEN_BYTES 32
#define TOKEN_VERSION 1
#define TOKENS_FIRST 16   /* the ring's first size, and how often piled-up tokens are tested */
/* cohort_comm_desc's longest text, for the descriptions below. */
#define DESC_MAX 192

struct cohort_token {
    cohort_preq_t send, recv;
    cohort_status_t failed;              /* a request of it failed (the message was given) */
    unsigned char mine[TOKEN_BYTES];     /* this rank's call, sent to the next rank */
    unsigned char theirs[TOKEN_BYTES];   /* the previous rank's */
};

/* A call as a token carries it (little-endian: seq, count, root as 64-bit words, then the
 * collective, dtype, op and the token's version in one byte each; the rest is zero). */
typedef struct token_call {
    uint64_t seq, count;
    int64_t root;
    int coll, dtype, op;
} token_call_t;

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static void token_encode(unsigned char *b, uint64_t seq, const cohort_coll_args_t *a)
{
    memset(b, 0, TOKEN_BYTES);
    put64(b, seq);
    put64(b + 8, (uint64_t)a->count);
    put64(b + 16, (uint64_t)(int64_t)a->root);
    b[24] = (unsigned char)a->coll;
    b[25] = (unsigned char)a->dtype;
    b[26] = (unsigned char)a->op;
    b[27] = TOKEN_VERSION;
}

static token_call_t token_decode(const unsigned char *b)
{
    return (token_call_t){ get64(b), get64(b + 8), (int64_t)get64(b + 16), b[24], b[25], b[26] };
}

static struct cohort_token *token_at(cohort_comm_t *comm, unsigned i)
{
    return comm->tokens[(comm->tok_head + i) % comm->tok_cap];
}

/* Doubles the ring (the open tokens first, in order). The tokens themselves never move: open
 * requests point into them. */
static cohort_status_t tokens_grow(cohort_comm_t *comm)
{
    unsigned cap = comm->tok_cap ? 2 * comm->tok_cap : TOKENS_FIRST;
    struct cohort_token **ring = calloc(cap, sizeof *ring);
    unsigned i = comm->tok_cap;
    if (ring)
        for (; i < cap; i++)
            if (!(ring[i] = calloc(1, sizeof **ring))) break;
    if (i < cap) {
        while (ring && i-- > comm->tok_cap) free(ring[i]);
        free(ring);
        return cohort_error(COHORT_ERR_NO_MEMORY, "rank %d: no memory for %u tokens of %s",
                            comm->rank, cap, cohort_comm_desc(comm));
    }
    for (i = 0; i < comm->tok_cap; i++) ring[i] = token_at(comm, i);
    free(comm->tokens);
    comm->tokens = ring;
    comm->tok_head = 0;
    comm->tok_cap = cap;
    return COHORT_SUCCESS;
}

void cohort_p2p_token_free(cohort_comm_t *comm)
{
    for (unsigned i = 0; comm->tokens && i < comm->tok_cap; i++) free(comm->tokens[i]);
    free(comm->tokens);
    comm->tokens = NULL;
    comm->tok_cap = comm->tok_count = comm->tok_head = 0;
}

/* As cohort_comm_desc writes the collective in progress. */
static void describe(const token_call_t *c, char *buf, size_t len)
{
    if (c->coll == COHORT_COLL_BARRIER) {
        snprintf(buf, len, "barrier #%llu", (unsigned long long)c->seq);
        return;
    }
    int reduces = c->coll == COHORT_COLL_ALLREDUCE || c->coll == COHORT_COLL_REDUCE ||
                  c->coll == COHORT_COLL_REDUCE_SCATTER;
    int rooted = c->coll == COHORT_COLL_BROADCAST || c->coll == COHORT_COLL_REDUCE ||
                 c->coll == COHORT_COLL_GATHER || c->coll == COHORT_COLL_SCATTER;
    snprintf(buf, len, "%s #%llu (count %llu, %s%s%s, root %lld)",
             cohort_coll_name((cohort_coll_t)c->coll), (unsigned long long)c->seq,
             (unsigned long long)c->count, cohort_dtype_name((cohort_dtype_t)c->dtype),
             reduces ? ", " : "", reduces ? cohort_op_name((cohort_op_t)c->op) : "",
             rooted ? (long long)c->root : -1ll);
}

/* What differs between two calls, in words. */
static void differences(const token_call_t *a, const token_call_t *b, char *buf, size_t len)
{
    if (a->seq != b->seq) {
        snprintf(buf, len, "the collective's number (#%llu here, #%llu there: one rank made a "
                 "call the other did not, or made it with count 0, which sends nothing)",
                 (unsigned long long)a->seq, (unsigned long long)b->seq);
        return;
    }
    if (a->coll != b->coll) {
        snprintf(buf, len, "the collective");
        return;
    }
    size_t used = 0;
    buf[0] = '\0';
#define DIFF(cond, ...)                                                                    \
    if ((cond) && used < len)                                                             \
        used += (size_t)snprintf(buf + used, len - used, "%s", used ? " and " : "");      \
    if ((cond) && used < len)                                                             \
        used += (size_t)snprintf(buf + used, len - used, __VA_ARGS__)
    DIFF(a->root != b->root, "the root (%lld here, %lld there)", (long long)a->root,
         (long long)b->root);
    DIFF(a->count != b->count, "the count (%llu here, %llu there)",
         (unsigned long long)a->count, (unsigned long long)b->count);
    DIFF(a->dtype != b->dtype, "the dtype");
    DIFF(a->op != b->op, "the op");
#undef DIFF
    if (!used) snprintf(buf, len, "the version of cohort they run");
}

/* t's receive brought a token that differs from this rank's (or got bytes of another size). */
static cohort_status_t token_mismatch(cohort_comm_t *comm, const struct cohort_token *t,
                                      size_t got)
{
    int peer = t->recv.peer;
    token_call_t mine = token_decode(t->mine), theirs = token_decode(t->theirs);
    char me[DESC_MAX], other[DESC_MAX], what[240], when[DESC_MAX + 80] = "";
    describe(&mine, me, sizeof me);
    if (got != TOKEN_BYTES)
        return cohort_error(COHORT_ERR_MISMATCH, "rank %d: the first message of rank %d (%s) "
                            "for %s has %zu bytes, not the %d of a cohort token: do all ranks "
                            "run the same version of cohort?", comm->rank, peer,
                            comm->peers[peer].host, me, got, TOKEN_BYTES);
    describe(&theirs, other, sizeof other);
    differences(&mine, &theirs, what, sizeof what);
    if (comm->cur && mine.seq != comm->seq)   /* a collective that had returned here */
        snprintf(when, sizeof when, " (seen during %s)", cohort_comm_desc(comm));
    comm->fail_peer = -1;   /* both calls are named: no need to ask the peer through the job */
    return cohort_error(COHORT_ERR_MISMATCH, "rank %d called %s%s, but rank %d (%s), the rank "
                        "before it in the ring order, called %s: they differ in %s. Every rank "
                        "must make the same collective calls on a communicator, in the same "
                        "order, with the same count, dtype, op and root", comm->rank, me, when,
                        peer, comm->peers[peer].host, other, what);
}

/* Tests t's receive and send. *done: both completed and the calls agree. *differ (if not
 * NULL) is set when the error returned is a token that differs. */
static cohort_status_t token_test(cohort_comm_t *comm, struct cohort_token *t, int *done,
                                  int *differ)
{
    cohort_status_t st;
    *done = 0;
    if (t->failed)
        return cohort_error(t->failed, "rank %d: the token of collective #%llu failed earlier",
                            comm->rank, (unsigned long long)get64(t->mine));
    if (!t->recv.done) {
        size_t got = 0;
        st = ops_of(comm, t->recv.peer)->test(t->recv.tp, &got);
        if (st == COHORT_IN_PROGRESS) return COHORT_SUCCESS;
        t->recv.tp = NULL;
        t->recv.done = 1;
        if (st) {
            t->failed = st;
            char me[DESC_MAX];
            token_call_t mine = token_decode(t->mine);
            describe(&mine, me, sizeof me);
            comm->fail_peer = t->recv.peer;
            cohort_error_prefix("rank %d receiving from rank %d (%s) the token that says which "
                                "collective it called as this rank's %s (the first message of "
                                "every collective)", comm->rank, t->recv.peer,
                                comm->peers[t->recv.peer].host, me);
            return st;
        }
        t->recv.got = got;
        if (got != TOKEN_BYTES || memcmp(t->mine, t->theirs, TOKEN_BYTES) != 0) {
            if (differ) *differ = 1;
            return t->failed = token_mismatch(comm, t, got);
        }
    }
    if (!t->send.done) {
        st = ops_of(comm, t->send.peer)->test(t->send.tp, NULL);
        if (st == COHORT_IN_PROGRESS) return COHORT_SUCCESS;
        t->send.tp = NULL;
        t->send.done = 1;
        if (st) {
            t->failed = st;
            comm->fail_peer = t->send.peer;
            cohort_error_prefix("rank %d sending its token of collective #%llu to rank %d (%s)",
                                comm->rank, (unsigned long long)get64(t->mine), t->send.peer,
                                comm->peers[t->send.peer].host);
            return st;
        }
    }
    *done = 1;
    return COHORT_SUCCESS;
}

/* Tests every open token (non-blocking) and retires the confirmed ones at the head. */
static cohort_status_t tokens_check(cohort_comm_t *comm, int *differ)
{
    unsigned i = 0;
    while (i < comm->tok_count) {
        int done;
        cohort_status_t st = token_test(comm, token_at(comm, i), &done, differ);
        if (st) return st;
        if (done && i == 0) {   /* confirmed at the head: retire it */
            comm->tok_head = (comm->tok_head + 1) % comm->tok_cap;
            comm->tok_count--;
        } else {
            i++;
        }
    }
    return COHORT_SUCCESS;
}

/* Waits until token t is confirmed: COHORT_TIMEOUT per stall, abort, the job's failures. */
static cohort_status_t token_wait(cohort_comm_t *comm, struct cohort_token *t)
{
    cohort_pace_t pace = { 0 };
    int peer = t->recv.done ? t->send.peer : t->recv.peer;
    for (;;) {
        int done;
        cohort_status_t st = token_test(comm, t, &done, NULL);
        if (st || done) return st;
        if (atomic_load(&comm->aborted))
            return cohort_error(COHORT_ERR_ABORTED, "rank %d: %s interrupted: the communicator "
                                "was aborted", comm->rank, cohort_comm_desc(comm));
        st = cohort_p2p_pace(comm, &pace, 0, 1);
        if (st == COHORT_ERR_TIMEOUT && !pace.job_failed) {
            char me[DESC_MAX];
            token_call_t mine = token_decode(t->mine);
            describe(&mine, me, sizeof me);
            comm->fail_peer = peer;
            return cohort_error(COHORT_ERR_TIMEOUT, "rank %d: %s stalled for %g s waiting for "
                                "rank %d (%s) to confirm that it called %s as this rank did (a "
                                "rank runs at most %d collectives ahead of the rank before it "
                                "in the ring order). Did every rank call it? A peer that hangs "
                                "or died? %s sets the limit", comm->rank,
                                cohort_comm_desc(comm), comm->timeout_s, peer,
                                comm->peers[peer].host, me, COHORT_P2P_TOKENS,
                                cohort_comm_timeout_source(comm));
        }
        if (st) return st;
        if (pace.stall_warn_due) {
            char who[DESC_MAX + 64];
            token_call_t mine = token_decode(t->mine);
            int used = snprintf(who, sizeof who, "rank %d (%s), to confirm ", peer,
                                comm->peers[peer].host);
            describe(&mine, who + used, sizeof who - (size_t)used);
            pace.stall_warn_due = 0;
            cohort_jobctl_stalled(comm, (double)(cohort_now_ns() - pace.stalled_since) * 1e-9,
                                  who);
        }
    }
}

/* Retires the confirmed tokens at the head, waiting for the first `must` of them. */
static cohort_status_t tokens_retire(cohort_comm_t *comm, unsigned must)
{
    while (comm->tok_count) {
        struct cohort_token *t = token_at(comm, 0);
        int done;
        cohort_status_t st = token_test(comm, t, &done, NULL);
        if (st) return st;
        if (!done) {
            if (!must) break;
            if ((st = token_wait(comm, t))) return st;
        }
        comm->tok_head = (comm->tok_head + 1) % comm->tok_cap;
        comm->tok_count--;
        if (must) must--;
    }
    return COHORT_SUCCESS;
}

static cohort_status_t token_begin(cohort_comm_t *comm)
{
    cohort_status_t st;
    /* Open tokens pile up only where a rank needs nothing from the rank before it (a
     * broadcast's root running ahead): tested every TOKENS_FIRST collectives, not at each (a
     * test of an open receive costs a system call in tcp); the ring grows to COHORT_P2P_TOKENS
     * before this rank waits for the oldest (waiting for the rank before it at every call
     * would make a root that runs ahead spin against it for the CPU). */
    if (comm->tok_count >= TOKENS_FIRST && comm->seq % TOKENS_FIRST == 0 &&
        (st = tokens_retire(comm, 0)))
        return st;
    if (comm->tok_count == comm->tok_cap) {
        st = comm->tok_cap < COHORT_P2P_TOKENS ? tokens_grow(comm) : tokens_retire(comm, 1);
        if (st) return st;
    }
    int n = comm->nranks, pos = comm->ring ? comm->ring_pos : comm->rank;
    int pred = comm->ring ? comm->ring[(pos + n - 1) % n] : (pos + n - 1) % n;
    int succ = comm->ring ? comm->ring[(pos + 1) % n] : (pos + 1) % n;
    struct cohort_token *t = token_at(comm, comm->tok_count);
    t->failed = COHORT_SUCCESS;
    token_encode(t->mine, comm->seq, comm->cur);
    if ((st = post(comm, pred, t->theirs, TOKEN_BYTES, 0, TOKEN_TAG, &t->recv))) return st;
    comm->tok_count++;
    if ((st = post(comm, succ, t->mine, TOKEN_BYTES, 1, TOKEN_TAG, &t->send))) {
        t->failed = st;   /* the communicator is broken now */
        return st;
    }
    return COHORT_SUCCESS;
}

/* A request failed (a message of another collective, a peer that hung up after failing its own
 * call): when a token already says which calls differ, that account (both calls named, the
 * cause) replaces the transport's. The tokens are looked at quietly. */
static cohort_status_t explain_failure(cohort_comm_t *comm, cohort_status_t st)
{
    char own[2048];
    int peer = comm->fail_peer, differ = 0;
    snprintf(own, sizeof own, "%s", cohort_last_error());
    int level = cohort_error_log_level(COHORT_LOG_TRACE);
    cohort_status_t ts = comm->tok_count ? tokens_check(comm, &differ) : COHORT_SUCCESS;
    if (!(ts && differ)) cohort_error(st, "%s", own);   /* restored, not logged again */
    cohort_error_log_level(level);
    if (ts && differ) return cohort_error(ts, "%s", cohort_last_error());
    comm->fail_peer = peer;
    return st;
}

cohort_status_t cohort_p2p_coll_done(cohort_comm_t *comm)
{
    const cohort_coll_args_t *a = comm->cur;
    if (!comm->tok_count || !a || a->coll == COHORT_COLL_BROADCAST ||
        a->coll == COHORT_COLL_SCATTER ||
        ((a->coll == COHORT_COLL_REDUCE || a->coll == COHORT_COLL_GATHER) &&
         a->root != comm->rank))
        return COHORT_SUCCESS;
    return tokens_retire(comm, comm->tok_count);
}

cohort_status_t cohort_p2p_token_sync(cohort_comm_t *comm)
{
    cohort_status_t st;
    if (comm->cur && comm->tok_seq != comm->seq) {
        comm->tok_seq = comm->seq;
        if ((st = token_begin(comm))) return st;
    }
    return tokens_retire(comm, comm->tok_count);
}

/* The job's word on comm as it concerns last (the call being confirmed, which its message
 * names): COHORT_ERR_MISMATCH when another rank found the mismatch. wait: first wait for a
 * notice still on its way. */
static cohort_status_t job_verdict(cohort_comm_t *comm, token_call_t last, int wait)
{
    cohort_coll_args_t a = { .coll = (cohort_coll_t)last.coll, .count = (size_t)last.count,
                             .dtype = (cohort_dtype_t)last.dtype, .op = (cohort_op_t)last.op,
                             .root = (int)last.root };
    uint64_t seq = comm->seq;
    comm->cur = &a;
    comm->seq = last.seq;
    cohort_status_t js = wait ? cohort_jobctl_await(comm) : cohort_jobctl_check(comm);
    comm->cur = NULL;
    comm->seq = seq;
    return js;
}

static cohort_status_t mismatch_at_destroy(cohort_comm_t *comm)
{
    return cohort_error(COHORT_ERR_MISMATCH, "cohort_comm_destroy on rank %d: its last "
                        "collectives did not match (the communicator is destroyed all the "
                        "same; what they returned here may be wrong): %s", comm->rank,
                        cohort_last_error());
}

cohort_status_t cohort_p2p_token_finish(cohort_comm_t *comm, int wait_ms)
{
    if (comm->broken || atomic_load(&comm->aborted)) return COHORT_SUCCESS;
    uint64_t deadline = cohort_now_ns() + (uint64_t)wait_ms * 1000000ull;
    for (;;) {
        if (!comm->tok_count) return COHORT_SUCCESS;
        /* A peer that is gone or failed is not this call's failure: INFO, not WARN. */
        int differ = 0, level = cohort_error_log_level(COHORT_LOG_INFO);
        /* Another rank may have found the mismatch (at its own destroy, or in a collective that
         * this rank had left), and then the rank before this one may never send its token: the
         * job's channel says so. Its message names the collective being confirmed. (Other
         * failures of the job are not this call's: the tokens' test below hears of a lost
         * peer.) */
        token_call_t last = token_decode(token_at(comm, comm->tok_count - 1)->mine);
        if (job_verdict(comm, last, 0) == COHORT_ERR_MISMATCH) {
            cohort_error_log_level(level);
            return mismatch_at_destroy(comm);
        }
        cohort_status_t st = tokens_check(comm, &differ);
        if (!st && comm->tok_count) st = cohort_p2p_progress(comm);
        if (st && !differ) {
            /* The rank before this one hung up before confirming. Often that is because
             * another rank found a mismatch and the job told that rank first (the notice
             * reaches the ranks in turn): this rank's copy may still be on its way. */
            char lost[1024];
            snprintf(lost, sizeof lost, "%s", cohort_last_error());
            if (job_verdict(comm, last, 1) == COHORT_ERR_MISMATCH) {
                cohort_error_log_level(level);
                return mismatch_at_destroy(comm);
            }
            cohort_error_restore(lost);
        }
        cohort_error_log_level(level);
        if (st && differ)
            return cohort_error(st, "cohort_comm_destroy on rank %d: its last collectives did not "
                                "match the other ranks' (the communicator is destroyed all the "
                                "same; what they returned here may be wrong): %s", comm->rank,
                                cohort_last_error());
        if (st) {
            COHORT_INFO("core", "cohort_comm_destroy on rank %d: could not confirm that the "
                        "other ranks made the same last collective calls: %s", comm->rank,
                        cohort_last_error());
            return COHORT_SUCCESS;
        }
        if (!comm->tok_count) return COHORT_SUCCESS;
        if (cohort_now_ns() >= deadline) {
            struct cohort_token *t = token_at(comm, comm->tok_count - 1);
            char me[DESC_MAX];
            token_call_t mine = token_decode(t->mine);
            describe(&mine, me, sizeof me);
            COHORT_INFO("core", "cohort_comm_destroy on rank %d: rank %d (%s) had not confirmed "
                        "within %d ms that it called %s as this rank did (it may not have "
                        "reached it yet); destroying without knowing", comm->rank,
                        t->recv.peer, comm->peers[t->recv.peer].host, wait_ms, me);
            return COHORT_SUCCESS;
        }
        cohort_p2p_idle(comm, SLEEP_POLL_MS);
    }
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
            if (st) return explain_failure(comm, st);
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
        /* Going to sleep: ranks that disagree may wait for each other forever, and the tokens
         * say so (p2p.h). */
        if (pace.armed && comm->tok_count && (st = tokens_check(comm, NULL))) return st;
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
