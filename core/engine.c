/* SPDX-License-Identifier: BSD-3-Clause */
/* The request engine (core/engine.h): a queue per communicator, run in issue order by a
 * progress thread or by the callers of test/wait. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE   /* PTHREAD_MUTEX_ADAPTIVE_NP */
#endif
#include "core/engine.h"
#include "core/comm.h"
#include "core/config.h"
#include "core/fusion.h"
#include "core/log.h"
#include "core/timeline.h"
#include "core/timeutil.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>

#define REQ_MAGIC 0x434f484f52524551ull   /* "COHORREQ" */
#define REQ_DEAD 0xdeadbeefdeadbeefull
/* Completed requests are kept for reuse, up to this many per communicator: a burst of
 * non-blocking calls then allocates nothing, where a fresh calloc per call grew the heap and
 * glibc gave it back to the kernel after every burst, so each burst faulted the pages in again
 * (docs/performance-log.md, "Non-blocking calls without page faults"). */
#define REQ_SPARE_MAX 4096

enum {
    R_FUSABLE = 1,    /* a non-blocking allreduce outside a group: the queue may fuse it */
    R_BLOCKING = 2,   /* a blocking call made inside a group: cohort_group_end completes it */
    R_INTERNAL = 4,   /* a fused batch's container: never seen by the application */
    R_P2P = 8,        /* cohort_isend / cohort_irecv (and their blocking forms in a group) */
};

struct cohort_request {
    uint64_t magic;
    cohort_comm_t *comm;
    struct cohort_request *next;      /* queue (or group) link */
    cohort_coll_args_t a;
    size_t *arrays;                   /* the v-variants' counts and displacements, copied */
    const char *fn;
    char name[COHORT_NAME_MAX];       /* the application's (cohort_comm_name_next), or "" */
    cohort_engine_exec_fn exec;
    cohort_engine_p2p_fn p2p;
    int flags;                        /* R_* */
    uint64_t number;                  /* issue number on the communicator, from 1 */
    uint64_t t_issue;                 /* when it was issued (COHORT_CYCLE_TIME, the timeline, the
                                       * deferral: run_one) */
    struct cohort_request **members;  /* R_INTERNAL: the batch, in issue order */
    int nmembers;
    atomic_uint done;                 /* set under the engine's lock, read by spinning waiters */
    cohort_status_t st;
    char *msg;                        /* the error's message, from the thread that ran it (heap) */
    uint64_t wmark;                   /* the cohort_waitall call that last looked at it */
};

typedef struct cohort_engine {
    pthread_mutex_t mu;
    pthread_cond_t work;              /* the progress thread waits here for a request */
    pthread_cond_t done;              /* waiters wait here for completions */
    cohort_request_t *head, *tail;    /* queued, not started */
    cohort_request_t *spare, *spare_tail; /* completed ones for reuse (oldest first), nspare */
    unsigned nspare;
    atomic_uint kicks;                /* bumped by every submit and by stop: a spinning progress
                                       * thread watches it instead of sleeping (spin_while) */
    unsigned pending;                 /* queue entries queued or running */
    unsigned live;                    /* issued, not yet completed by test/wait */
    int running;                      /* a thread is running a request */
    int caller;                       /* COHORT_PROGRESS=caller */
    int started, stop;
    /* deferred wake-up (threads outnumber cores; see kick): the progress thread sleeps in
     * poll() on efd (woken now) and tfd (woken defer_ns after a call was queued) */
    int defer, efd, tfd;
    int sleeping;                     /* the progress thread is in that poll() */
    int armed;                        /* tfd is set */
    int keep_armed;                   /* a waiter that emptied the queue leaves tfd set (see
                                       * run_one) */
    uint64_t defer_ns;                /* the deferral now (cohort_engine_next_defer) */
    int quick;                        /* the last call a waiter ran was waited for at once */
    pthread_t tid;
    uint64_t issued;                  /* requests issued (numbers them) */
    /* fusion */
    size_t threshold;                 /* COHORT_FUSION_THRESHOLD (0: off) */
    uint64_t cycle_ns;                /* COHORT_CYCLE_TIME */
    void *fbuf;                       /* the fusion buffer (cohort_mem_alloc), fcap bytes */
    size_t fcap;
    uint64_t fused_reqs, fused_batches;
    uint64_t carried;                 /* the next batch's size, agreed through the last batch's
                                       * allreduce (0: not known; see run_fusable) */
    cohort_request_t batch;           /* run_fusable's batch container (one runs at a time):
                                       * a lone call that carries allocates nothing */
    size_t batch_cap;                 /* batch.members holds this many */
    /* groups (the issuing thread only) */
    int group_depth;
    cohort_request_t *ghead, *gtail;
} cohort_engine_t;

/* When the engine's threads outnumber the cores, waking the sleeping progress thread for every
 * call (a futex wake, and the thread then preempts another rank on its core) cost a small call
 * that its caller waited for at once many times its own work, which the waiter can run itself
 * (wait_done; measured in docs/performance-log.md, "A timer instead of a wake-up").
 * So a queued call only sets a timer: the progress thread wakes a deferral later (defer_ns)
 * unless a waiter ran the queue empty first (then the timer is cleared, or left set for the next
 * call where every rank has a core: run_one). A call nobody waits for still moves without
 * cohort_test, a deferral late.
 * The deferral starts at COHORT_ENGINE_DEFER_NS (50 us) and adapts to how the job waits
 * (cohort_engine_next_defer). Where its calls are waited for at once (their waiters take them
 * less than 50 us after the issue), the timer's wake-ups find nothing to start, and each is a
 * context switch on a core a rank is using: over tcp one every 50 us cost a lone call waited for
 * at once a third of its time. Each such wake-up doubles the deferral, up to
 * COHORT_ENGINE_DEFER_MAX_NS (0.4 ms). A wake-up that finds a call nobody ran, or a waiter that
 * takes a call 50 us or more after its issue (the job computes between the two), brings it back:
 * a job that turns from waiting at once to computing meanwhile has its first call start at most
 * 0.4 ms late, once (docs/performance-log.md, "The deferral adapts"). */
uint64_t cohort_engine_next_defer(uint64_t cur, int found)
{
    if (found || cur < COHORT_ENGINE_DEFER_NS) return COHORT_ENGINE_DEFER_NS;
    return cur >= COHORT_ENGINE_DEFER_MAX_NS / 2 ? COHORT_ENGINE_DEFER_MAX_NS : 2 * cur;
}

static void fd_set_timer(int fd, uint64_t ns)
{
    struct itimerspec it = { .it_value = { (time_t)(ns / 1000000000u), (long)(ns % 1000000000u) } };
    (void)timerfd_settime(fd, 0, &it, NULL);   /* cannot fail with these arguments */
}

/* Lock held: no timer left set (one for a queue a waiter emptied would wake the thread for
 * nothing; run_one leaves it set where that costs less than setting it again, keep_armed). */
static void disarm(cohort_engine_t *e)
{
    if (!e->armed) return;
    fd_set_timer(e->tfd, 0);
    e->armed = 0;
}

/* The deferred wake-up's descriptors, when engine_get made them. */
static void close_fds(cohort_engine_t *e)
{
    if (!e->defer) return;
    close(e->efd);
    close(e->tfd);
}

/* Lock held: whether a thread that waits runs the queue's head itself (caller mode, and where
 * the wake-up is deferred: see kick). */
static int waiter_runs(const cohort_engine_t *e)
{
    return (e->caller || e->defer) && !e->running && e->head;
}

/* Lock held: the progress thread should look at the queue (now, or a deferral from now). */
static void kick(cohort_engine_t *e, int now)
{
    atomic_fetch_add_explicit(&e->kicks, 1u, memory_order_release);
    if (!e->defer) {
        pthread_cond_signal(&e->work);
    } else if (e->sleeping) {
        if (now) {
            uint64_t one = 1;
            (void)!write(e->efd, &one, sizeof one);   /* nonblocking; a full counter still wakes */
        } else if (!e->armed) {
            fd_set_timer(e->tfd, e->defer_ns);
            e->armed = 1;
        }
    }
}

/* Lock held, the progress thread idle: sleeps until kicked; returns with the lock held. Where
 * the wake-up is deferred, a timer that fired adapts the deferral to whether a call waits that
 * nobody runs. */
static void sleep_idle(cohort_engine_t *e)
{
    if (!e->defer) {
        pthread_cond_wait(&e->work, &e->mu);
        return;
    }
    e->sleeping = 1;
    pthread_mutex_unlock(&e->mu);
    struct pollfd pf[2] = { { .fd = e->efd, .events = POLLIN },
                            { .fd = e->tfd, .events = POLLIN } };
    while (poll(pf, 2, -1) < 0 && errno == EINTR) {}
    uint64_t v;
    (void)!read(e->efd, &v, sizeof v);
    int fired = read(e->tfd, &v, sizeof v) == (ssize_t)sizeof v;
    pthread_mutex_lock(&e->mu);
    e->sleeping = 0;
    if (fired) {
        e->armed = 0;   /* a one-shot timer that fired is clear: no system call to clear it */
        if (e->head && !e->running) e->defer_ns = cohort_engine_next_defer(e->defer_ns, 1);
        else if (!e->head && e->quick) e->defer_ns = cohort_engine_next_defer(e->defer_ns, 0);
    }
    disarm(e);
}

/* The request's error message; without memory for it, a fixed one (the status still says what
 * failed). */
static void set_msg(cohort_request_t *r, const char *msg)
{
    free(r->msg);
    r->msg = strdup(msg);
}

/* Marks r complete (a batch: each member) and frees a batch's container; lock held. */
static void complete(cohort_engine_t *e, cohort_request_t *r, cohort_status_t st,
                     const char *msg)
{
    cohort_request_t *one[1] = { r };
    cohort_request_t **m = r->nmembers ? r->members : one;
    int n = r->nmembers ? r->nmembers : 1;
    uint64_t now = cohort_timeline_on(r->comm ? r->comm : m[0]->comm) ? cohort_now_ns() : 0;
    for (int i = 0; i < n; i++) {
        m[i]->st = st;
        if (st) set_msg(m[i], msg);
        atomic_store_explicit(&m[i]->done, 1u, memory_order_release);
        if (now) {
            /* the request's life on the timeline, from issue to completion */
            char call[96], args[256];
            snprintf(call, sizeof call, "%s #%llu", m[i]->fn, (unsigned long long)m[i]->number);
            /* the application's name leads when it gave one: that is what its user looks for */
            snprintf(args, sizeof args, "%s%s%s\"status\":\"%s\",\"fused_with\":%d",
                     m[i]->name[0] ? "\"call\":\"" : "", m[i]->name[0] ? call : "",
                     m[i]->name[0] ? "\"," : "", cohort_strerror(st), n > 1 ? n - 1 : 0);
            const char *name = m[i]->name[0] ? m[i]->name : call;
            cohort_timeline_event(m[i]->comm, COHORT_TL_REQUESTS, name, m[i]->t_issue, now,
                                  args);
        }
    }
    if ((r->flags & R_INTERNAL) && r != &e->batch) {
        free(r->members);
        free(r);
    }
    e->pending--;
    pthread_cond_broadcast(&e->done);
}

/* Runs a batch: its members' sendbufs into the fusion buffer, one allreduce in place there, the
 * result out to their recvbufs. With carry, this rank's count for the next batch (mine) travels
 * after the data and *next receives the count every rank agreed on (cohort_fuse_carry_get).
 * Lock not held. */
static cohort_status_t run_fused(cohort_engine_t *e, cohort_comm_t *comm, cohort_request_t *b,
                                 int carry, uint64_t mine, uint64_t *next)
{
    const cohort_coll_args_t *first = &b->members[0]->a;
    size_t es = first->esize, total = 0, extra = 0;
    for (int i = 0; i < b->nmembers; i++) total += b->members[i]->a.count;
    if (carry) extra = (size_t)cohort_fuse_carry_n(total * es);
    if ((total + extra) * es > e->fcap) {
        /* cohort's own memory: the transports' fastest paths apply to it (shm reads it in place
         * when every rank's buffer comes from cohort_mem_alloc, which every rank's fusion
         * buffer does) */
        cohort_mem_free(e->fbuf);
        e->fbuf = NULL;
        e->fcap = 0;
        size_t need = (total + extra) * es;
        size_t want = need < e->threshold / 8 ? e->threshold / 8 : need;
        cohort_status_t st = cohort_mem_alloc(want, &e->fbuf);
        if (st) {
            e->fbuf = NULL;
            return cohort_error(st, "rank %d: no fusion buffer of %zu bytes for %d fused "
                                "allreduces (set COHORT_FUSION_THRESHOLD lower, or 0 for no "
                                "fusion): %s", comm->rank, want, b->nmembers,
                                cohort_last_error());
        }
        e->fcap = want;
    }
    char *f = e->fbuf;
    size_t off = 0;
    for (int i = 0; i < b->nmembers; i++) {
        const cohort_coll_args_t *a = &b->members[i]->a;
        memcpy(f + off, a->sendbuf, a->count * es);
        off += a->count * es;
    }
    if (carry) cohort_fuse_carry_put(f + off, (int)extra, first->dtype, first->op, mine);
    cohort_coll_args_t all = { .coll = COHORT_COLL_ALLREDUCE, .sendbuf = f, .recvbuf = f,
                               .count = total + extra, .dtype = first->dtype, .op = first->op,
                               .esize = es, .wire = first->wire, .fused = b->nmembers,
                               .fused_first = b->members[0]->number,
                               .fused_last = b->members[b->nmembers - 1]->number,
                               .carry = (int)extra };
    cohort_status_t st = b->members[0]->exec(comm, &all, "cohort_iallreduce (fused)");
    if (st) return st;
    off = 0;
    for (int i = 0; i < b->nmembers; i++) {
        const cohort_coll_args_t *a = &b->members[i]->a;
        memcpy(a->recvbuf, f + off, a->count * es);
        off += a->count * es;
    }
    if (carry) {
        *next = cohort_fuse_carry_get(f + off, (int)extra, first->dtype, first->op,
                                      comm->nranks);
        if (*next > mine) *next = 0;   /* cannot be: every rank's "yes" includes ours */
    }
    return COHORT_SUCCESS;
}

static cohort_fuse_item_t item_of(const cohort_request_t *r, size_t threshold)
{
    /* allreduces that travel compressed and those that do not never share a batch */
    cohort_fuse_item_t it = { 0, (int)r->a.dtype + 16 * r->a.wire, (int)r->a.op,
                              r->a.count * r->a.esize };
    it.fusable = r->a.coll == COHORT_COLL_ALLREDUCE && r->a.count && it.bytes <= threshold;
    return it;
}

#define WINDOW_MAX 256    /* queue entries one count looks at (a batch of at most this many) */

/* A head this small that runs alone goes through the fusion buffer to carry the next batch's
 * size: copying it in and out costs less than the negotiation's round trip it saves (a larger
 * one negotiates first; docs/design.md). */
#define CARRY_ALONE_MAX 16384

/* Lock held: how many queued allreduces from the head on could join the head's batch
 * (cohort_fuse_window); 0 when the head is not a fusable allreduce or the queue is empty. */
static uint64_t window_count(cohort_engine_t *e)
{
    cohort_fuse_item_t items[64];
    cohort_fuse_item_t *it = items;
    int n = 0, cap = 64;
    for (cohort_request_t *q = e->head; q && n < WINDOW_MAX; q = q->next) {
        if (n == cap) {
            cohort_fuse_item_t *more = malloc(sizeof *more * (size_t)cap * 2);
            if (!more) break;
            memcpy(more, it, sizeof *it * (size_t)n);
            if (it != items) free(it);
            it = more;
            cap *= 2;
        }
        it[n] = item_of(q, e->threshold);
        if (!(q->flags & R_FUSABLE)) it[n].fusable = 0;
        if (!it[n++].fusable) break;
    }
    uint64_t k = n && it[0].fusable ? (uint64_t)cohort_fuse_window(it, n, e->threshold) : 0;
    if (it != items) free(it);
    return k;
}

/* The head is a fusable allreduce. Its batch's size is what every rank agrees on: carried by
 * the batch before (each batch's allreduce carries the ranks' counts for the next one, see
 * docs/design.md), else 1 for a small head (which then carries the count for the batch after
 * it), else the result of a negotiation (an allreduce of MIN over how many of the queued
 * allreduces each rank could fuse with it). Every choice depends only on values every rank
 * has, so the ranks run the same batches. Lock held on entry and exit; running is set by the
 * caller. */
static void run_fusable(cohort_engine_t *e, cohort_comm_t *comm)
{
    cohort_request_t *h = e->head;
    if (e->cycle_ns) {
        /* COHORT_CYCLE_TIME: let more arrive, unless the threshold is already reached */
        uint64_t until = h->t_issue + e->cycle_ns;
        for (;;) {
            size_t bytes = 0;
            for (cohort_request_t *q = h; q && bytes < e->threshold; q = q->next)
                if (q->a.coll == COHORT_COLL_ALLREDUCE) bytes += q->a.count * q->a.esize;
            if (bytes >= e->threshold || cohort_now_ns() >= until || e->stop) break;
            /* until is on the condition variable's clock (CLOCK_MONOTONIC, as cohort_now_ns) */
            struct timespec ts = { (time_t)(until / 1000000000ull),
                                   (long)(until % 1000000000ull) };
            pthread_cond_timedwait(&e->work, &e->mu, &ts);
        }
    }
    int carry = cohort_fuse_can_carry(h->a.dtype, h->a.op, h->a.wire, comm->nranks);
    int small = carry && h->a.count * h->a.esize <= CARRY_ALONE_MAX;
    uint64_t k = e->carried, mine = 0;
    e->carried = 0;
    cohort_status_t st = COHORT_SUCCESS;
    char msg[1024] = "";
    if (!k && small) k = 1;
    if (!k) {
        mine = window_count(e);
        pthread_mutex_unlock(&e->mu);
        cohort_coll_args_t neg = { .coll = COHORT_COLL_ALLREDUCE, .sendbuf = &mine,
                                   .recvbuf = &k, .count = 1, .dtype = COHORT_UINT64,
                                   .op = COHORT_MIN, .esize = 8, .negotiation = 1 };
        st = h->exec(comm, &neg, "cohort_iallreduce (fusion negotiation)");
        if (st) snprintf(msg, sizeof msg, "%s", cohort_last_error());
        pthread_mutex_lock(&e->mu);
        if (!st && k > mine) k = 1;   /* cannot be: MIN is at most ours */
    }
    if (st || (k <= 1 && !small)) {
        /* alone, as issued (or failed: the communicator is broken, the head reports why) */
        e->head = h->next;
        if (!e->head) e->tail = NULL;
        if (!st) {
            pthread_mutex_unlock(&e->mu);
            st = h->exec(comm, &h->a, h->fn);
            if (st) snprintf(msg, sizeof msg, "%s", cohort_last_error());
            pthread_mutex_lock(&e->mu);
        }
        complete(e, h, st, msg);
        return;
    }
    /* unlink the first k allreduces of the head's dtype and op, in order */
    cohort_request_t *b = &e->batch;
    if (e->batch_cap < k) {
        cohort_request_t **m = realloc(b->members, sizeof *m * (size_t)k);
        if (!m) {
            e->head = h->next;
            if (!e->head) e->tail = NULL;
            complete(e, h, cohort_error(COHORT_ERR_NO_MEMORY, "rank %d: no memory to fuse "
                                        "%llu allreduces", comm->rank, (unsigned long long)k),
                     cohort_last_error());
            /* the others run the batch: this rank's communicator cannot go on */
            comm->broken = COHORT_ERR_NO_MEMORY;
            snprintf(comm->broken_msg, sizeof comm->broken_msg, "%s", cohort_last_error());
            return;
        }
        b->members = m;
        e->batch_cap = k;
    }
    cohort_request_t **m = b->members;
    int got = 0;
    cohort_request_t **link = &e->head, *prev = NULL;
    while (*link && got < (int)k) {
        cohort_request_t *q = *link;
        if (q->a.coll == COHORT_COLL_ALLREDUCE && q->a.dtype == h->a.dtype &&
            q->a.op == h->a.op && q->a.wire == h->a.wire && (q->flags & R_FUSABLE)) {
            m[got++] = q;
            *link = q->next;
            if (e->tail == q) e->tail = prev;
            e->pending--;   /* the batch stands for them */
        } else {
            prev = q;
            link = &q->next;
        }
    }
    b->flags = R_INTERNAL;
    b->nmembers = got;
    e->pending++;
    /* this rank's count for the batch after this one, from what is queued behind it now */
    mine = carry ? window_count(e) : 0;
    pthread_mutex_unlock(&e->mu);
    uint64_t next = 0;
    st = run_fused(e, comm, b, carry, mine, &next);
    if (st) snprintf(msg, sizeof msg, "%s", cohort_last_error());
    pthread_mutex_lock(&e->mu);
    if (!st) {
        e->carried = next;
        if (got > 1) {
            e->fused_reqs += (uint64_t)got;
            e->fused_batches++;
        }
    }
    complete(e, b, st, msg);
}

#define P2P_BATCH_MAX 1024

/* The head is a point-to-point message: the runner posts it and every message queued behind it,
 * also those queued while it waits (p2p_more), and completes each as it finishes (p2p_done).
 * Lock held on entry and exit. */
typedef struct p2p_batch {
    cohort_engine_t *e;
    cohort_request_t *rs[P2P_BATCH_MAX];
    int n;
} p2p_batch_t;

static int p2p_more(cohort_engine_p2p_io_t *io, cohort_coll_args_t **as, int max)
{
    p2p_batch_t *b = io->ctx;
    cohort_engine_t *e = b->e;
    int k = 0;
    pthread_mutex_lock(&e->mu);
    while (e->head && (e->head->flags & R_P2P) && k < max && b->n < P2P_BATCH_MAX) {
        b->rs[b->n++] = e->head;
        as[k++] = &e->head->a;
        e->head = e->head->next;
    }
    if (!e->head) e->tail = NULL;
    pthread_mutex_unlock(&e->mu);
    return k;
}

static void p2p_done(cohort_engine_p2p_io_t *io, int i, cohort_status_t st)
{
    p2p_batch_t *b = io->ctx;
    char msg[1024] = "";
    if (st) snprintf(msg, sizeof msg, "%s", cohort_last_error());
    pthread_mutex_lock(&b->e->mu);
    complete(b->e, b->rs[i], st, msg);
    pthread_mutex_unlock(&b->e->mu);
}

static void run_p2p_batch(cohort_engine_t *e, cohort_comm_t *comm)
{
    p2p_batch_t *b = calloc(1, sizeof *b);
    if (!b) {
        cohort_request_t *r = e->head;
        e->head = r->next;
        if (!e->head) e->tail = NULL;
        complete(e, r, cohort_error(COHORT_ERR_NO_MEMORY, "rank %d: no memory to post %s",
                                    comm->rank, r->fn), cohort_last_error());
        return;
    }
    b->e = e;
    cohort_engine_p2p_fn run = e->head->p2p;
    pthread_mutex_unlock(&e->mu);
    cohort_engine_p2p_io_t io = { comm, p2p_more, p2p_done, b };
    run(&io);
    pthread_mutex_lock(&e->mu);
    free(b);
}

/* Runs the head of the queue (a request, a batch, or a negotiated batch); called and returns
 * with the lock held. waiter: called by a thread that waits (wait_done, drain), not by the
 * progress thread. */
static void run_one(cohort_engine_t *e, cohort_comm_t *comm, int waiter)
{
    cohort_request_t *r = e->head;
    e->running = 1;
    if (waiter && e->defer) {
        /* a waiter runs it: how long after its issue tells how the job waits (defer_ns) */
        e->quick = r->t_issue && cohort_now_ns() - r->t_issue < COHORT_ENGINE_DEFER_NS;
        if (!e->quick) e->defer_ns = cohort_engine_next_defer(e->defer_ns, 1);
    }
    /* The busy mark keeps cohort_comm_destroy and a second issuing thread off comm while the
     * request runs. The thread that issues operations drained the queue before taking it for a
     * blocking call, so it is free here unless the application breaks the one-issuer rule. */
    while (atomic_exchange(&comm->busy, 1)) {
        pthread_mutex_unlock(&e->mu);
        sched_yield();
        pthread_mutex_lock(&e->mu);
    }
    if (r->flags & R_P2P) {
        run_p2p_batch(e, comm);
    } else if ((r->flags & R_FUSABLE) && e->threshold) {
        run_fusable(e, comm);
    } else {
        e->head = r->next;
        if (!e->head) e->tail = NULL;
        pthread_mutex_unlock(&e->mu);
        cohort_status_t st = r->nmembers ? run_fused(e, comm, r, 0, 0, NULL)
                                          : r->exec(comm, &r->a, r->fn);
        char msg[1024] = "";
        if (st) snprintf(msg, sizeof msg, "%s", cohort_last_error());
        pthread_mutex_lock(&e->mu);
        if (!st && r->nmembers) {
            e->fused_reqs += (uint64_t)r->nmembers;
            e->fused_batches++;
        }
        complete(e, r, st, msg);
    }
    atomic_store(&comm->busy, 0);
    e->running = 0;
    pthread_cond_broadcast(&e->done);   /* drain waits for running too */
    if (waiter && e->started) {
        /* a waiter ran it (wait_done): the progress thread carries on with the rest. With the
         * queue empty the timer is cleared, unless every rank has a core of its own
         * (keep_armed): then it stays set, so that the next call finds it armed and sets
         * nothing, and the progress thread wakes once for nothing when it fires. Setting and
         * clearing a timer per call is what a lone call waited for at once spent most of its
         * time on (docs/performance-log.md, "A lone call keeps its timer"); where ranks
         * outnumber cores that wake-up would take a core from another rank instead. */
        if (e->head) kick(e, 0);
        else if (!e->keep_armed) disarm(e);
    }
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Whether the engine's threads may spin before they sleep: only when every thread of every rank
 * on the node has a core (comm->oversubscribed also counts the progress threads), as the
 * transports' waits (core/p2p.c). Spinning catches a hand-off between the application's thread
 * and the progress thread in well under a microsecond, where a sleeping thread's wake-up costs
 * several (docs/performance-log.md, "Hand-offs without wake-ups"). */
static int may_spin(const cohort_comm_t *comm)
{
    return !comm->oversubscribed && comm->spin_ns;
}

/* Spins, lock released, while *w == v, for up to COHORT_SPIN_US; returns with the lock held.
 * Whatever changes *w does so under the lock, so the caller re-checks its condition and then
 * sleeps on a condition variable without missing a signal. */
static void spin_while(cohort_engine_t *e, const cohort_comm_t *comm, atomic_uint *w, unsigned v)
{
    pthread_mutex_unlock(&e->mu);
    uint64_t until = cohort_now_ns() + comm->spin_ns;
    for (unsigned i = 1; atomic_load_explicit(w, memory_order_acquire) == v; i++) {
        cpu_relax();
        if (i % 32 == 0) {
            if (cohort_now_ns() >= until) break;
            /* the node may be busy with more than cohort's threads (which may_spin counts):
             * whatever else waits for this core gets it, as in core/p2p.c's waits */
            sched_yield();
        }
    }
    pthread_mutex_lock(&e->mu);
}

static void *progress_thread(void *arg)
{
    cohort_comm_t *comm = arg;
    cohort_engine_t *e = comm->engine;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        if (e->head && !e->running) {   /* a waiter may be running it (wait_done) */
            run_one(e, comm, 0);
            continue;
        }
        if (e->stop && !e->head && !e->running) break;   /* and nothing left */
        if (may_spin(comm)) {
            /* the next call often comes right away: catch it without a wake-up (spin_while) */
            spin_while(e, comm, &e->kicks, atomic_load_explicit(&e->kicks, memory_order_relaxed));
            if ((e->head && !e->running) || e->stop) continue;
        }
        sleep_idle(e);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

static cohort_status_t engine_get(cohort_comm_t *comm, cohort_engine_t **out)
{
    if (comm->engine) {
        *out = comm->engine;
        return COHORT_SUCCESS;
    }
    cohort_engine_t *e = calloc(1, sizeof *e);
    if (!e)
        return cohort_error(COHORT_ERR_NO_MEMORY, "rank %d: no memory for the request engine",
                            comm->rank);
    const char *mode = cohort_config_get("COHORT_PROGRESS");
    e->caller = mode && !strcasecmp(mode, "caller");
    long threshold = 64l << 20;
    double cycle_ms = 0;
    cohort_status_t st = cohort_config_table_long("COHORT_FUSION_THRESHOLD", &threshold);
    if (!st) st = cohort_config_table_double("COHORT_CYCLE_TIME", &cycle_ms);
    if (st) {
        free(e);
        return st;
    }
    e->threshold = (size_t)threshold;
    e->cycle_ns = (uint64_t)(cycle_ms * 1e6);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&e->work, &ca);
    pthread_cond_init(&e->done, &ca);
    pthread_condattr_destroy(&ca);
    if (!e->caller && comm->cpus > 0 && 2 * comm->cpu_sharing > comm->cpus) {
        /* each rank now has two threads that run: one waiting (the progress thread) must not
         * spin for COHORT_SPIN_US on a core the other (the application's) needs; its waits
         * yield at every poll, as they do when ranks outnumber cores */
        comm->oversubscribed = 1;
    }
    /* where the threads poll for each other (may_spin), the queue's lock spins a little before
     * it sleeps too; elsewhere a spinning lock waits for a holder that has no core (measured
     * 10 % slower at np 2 on 2 vCPUs) */
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    if (may_spin(comm)) pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
    pthread_mutex_init(&e->mu, &ma);
    pthread_mutexattr_destroy(&ma);
    if (!e->caller && comm->oversubscribed) {   /* kick: without the fds, wake-ups as elsewhere */
        e->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        e->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
        e->defer = e->efd >= 0 && e->tfd >= 0;
        e->keep_armed = comm->cpus > 0 && comm->cpu_sharing <= comm->cpus;
        e->defer_ns = COHORT_ENGINE_DEFER_NS;
        if (!e->defer) {
            if (e->efd >= 0) close(e->efd);
            if (e->tfd >= 0) close(e->tfd);
        }
    }
    comm->engine = e;
    if (!e->caller) {
        int rc = pthread_create(&e->tid, NULL, progress_thread, comm);
        if (rc) {
            comm->engine = NULL;
            close_fds(e);
            pthread_cond_destroy(&e->work);
            pthread_cond_destroy(&e->done);
            pthread_mutex_destroy(&e->mu);
            free(e);
            return cohort_error(COHORT_ERR_SYSTEM, "rank %d: cannot start the progress thread "
                                "of the non-blocking calls: %s; set COHORT_PROGRESS=caller to "
                                "run them inside cohort_test/cohort_wait instead", comm->rank,
                                strerror(rc));
        }
        e->started = 1;
    }
    *out = e;
    return COHORT_SUCCESS;
}

cohort_status_t cohort_engine_submit(cohort_comm_t *comm, const cohort_coll_args_t *a,
                                     const char *fn, cohort_engine_exec_fn exec,
                                     cohort_engine_p2p_fn p2p, int blocking,
                                     cohort_request_t **req)
{
    cohort_engine_t *e = NULL;
    cohort_status_t st = engine_get(comm, &e);
    if (st) return st;
    /* the oldest spare, so that a handle the application already completed is reused last and
     * is reported as such (check_req) for as long as possible */
    pthread_mutex_lock(&e->mu);
    cohort_request_t *r = e->spare;
    if (r) {
        e->spare = r->next;
        if (!e->spare) e->spare_tail = NULL;
        e->nspare--;
    }
    pthread_mutex_unlock(&e->mu);
    if (r) memset(r, 0, sizeof *r);
    else r = calloc(1, sizeof *r);
    int n = comm->nranks, nv = a->coll == COHORT_COLL_ALLTOALLV ? 4
                               : a->coll == COHORT_COLL_ALLGATHERV ? 2 : 0;
    size_t *arr = nv ? malloc((size_t)nv * (size_t)n * sizeof *arr) : NULL;
    if (!r || (nv && !arr)) {
        free(r);
        free(arr);
        return cohort_error(COHORT_ERR_NO_MEMORY, "%s on rank %d: no memory for the request",
                            fn, comm->rank);
    }
    r->magic = REQ_MAGIC;
    r->comm = comm;
    r->a = *a;
    if (a->name) {
        snprintf(r->name, sizeof r->name, "%s", a->name);
        r->a.name = r->name;
    }
    r->fn = fn;
    r->exec = exec;
    r->p2p = p2p;
    if (a->coll == COHORT_OP_SEND || a->coll == COHORT_OP_RECV) r->flags |= R_P2P;
    if (nv) {
        /* the application may reuse its arrays once the call returns */
        const size_t *src[4] = { a->rcounts, a->rdispls, a->scounts, a->sdispls };
        for (int i = 0; i < nv; i++) memcpy(arr + (size_t)i * n, src[i], (size_t)n * sizeof *arr);
        r->arrays = arr;
        r->a.rcounts = arr;
        r->a.rdispls = arr + n;
        r->a.scounts = nv == 4 ? arr + 2 * (size_t)n : NULL;
        r->a.sdispls = nv == 4 ? arr + 3 * (size_t)n : NULL;
    }
    if (blocking == COHORT_ENGINE_IN_GROUP) r->flags |= R_BLOCKING;
    if (e->cycle_ns || e->defer || cohort_timeline_on(comm)) r->t_issue = cohort_now_ns();
    pthread_mutex_lock(&e->mu);
    r->number = ++e->issued;
    e->live++;
    if (e->group_depth) {
        if (e->gtail) e->gtail->next = r;
        else e->ghead = r;
        e->gtail = r;
    } else {
        cohort_fuse_item_t it = item_of(r, e->threshold);
        /* a blocking call joined to the queue is never fused: it must do what it does when it
         * runs in its caller's thread, which another rank may have done */
        if (it.fusable && e->threshold && comm->nranks > 1 && !blocking) r->flags |= R_FUSABLE;
        if (e->tail) e->tail->next = r;
        else e->head = r;
        e->tail = r;
        e->pending++;
        kick(e, 0);
    }
    pthread_mutex_unlock(&e->mu);
    *req = r;
    return COHORT_SUCCESS;
}

void cohort_engine_drain(cohort_comm_t *comm)
{
    cohort_engine_t *e = comm->engine;
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    while (e->pending || e->running) {
        if (waiter_runs(e)) run_one(e, comm, 1);
        else pthread_cond_wait(&e->done, &e->mu);
    }
    pthread_mutex_unlock(&e->mu);
}

int cohort_engine_busy(cohort_comm_t *comm)
{
    cohort_engine_t *e = comm->engine;
    if (!e) return 0;
    pthread_mutex_lock(&e->mu);
    int busy = e->pending > 0 || e->running;
    pthread_mutex_unlock(&e->mu);
    return busy;
}

unsigned cohort_engine_live(cohort_comm_t *comm)
{
    cohort_engine_t *e = comm->engine;
    if (!e) return 0;
    pthread_mutex_lock(&e->mu);
    unsigned n = e->live;
    pthread_mutex_unlock(&e->mu);
    return n;
}

int cohort_engine_in_group(cohort_comm_t *comm)
{
    return comm->engine && comm->engine->group_depth > 0;
}

void cohort_engine_stats(cohort_comm_t *comm, uint64_t *requests, uint64_t *batches)
{
    cohort_engine_t *e = comm->engine;
    *requests = *batches = 0;
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    *requests = e->fused_reqs;
    *batches = e->fused_batches;
    pthread_mutex_unlock(&e->mu);
}

void cohort_engine_free(cohort_comm_t *comm)
{
    cohort_engine_t *e = comm->engine;
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    e->stop = 1;
    kick(e, 1);
    pthread_mutex_unlock(&e->mu);
    if (e->started) pthread_join(e->tid, NULL);
    close_fds(e);
    pthread_cond_destroy(&e->work);
    pthread_cond_destroy(&e->done);
    pthread_mutex_destroy(&e->mu);
    cohort_mem_free(e->fbuf);
    free(e->batch.members);
    for (cohort_request_t *r = e->spare, *next; r; r = next) {
        next = r->next;
        free(r);
    }
    free(e);
    comm->engine = NULL;
}

/* ---- groups ---- */

cohort_status_t cohort_engine_group_start(cohort_comm_t *comm)
{
    cohort_engine_t *e = NULL;
    cohort_status_t st = engine_get(comm, &e);
    if (st) return st;
    e->group_depth++;
    return COHORT_SUCCESS;
}

static void wait_done(cohort_engine_t *e, cohort_request_t *r);
static cohort_status_t finish(cohort_engine_t *e, cohort_request_t *r, char *msg, size_t len);

cohort_status_t cohort_engine_group_end(cohort_comm_t *comm)
{
    cohort_engine_t *e = comm->engine;
    if (!e || !e->group_depth)
        return cohort_error(COHORT_ERR_INVALID_ARG, "cohort_group_end on rank %d: no group is "
                            "open (cohort_group_start was not called, or its group already "
                            "ended)", comm->rank);
    if (--e->group_depth) return COHORT_SUCCESS;   /* nested: the outermost end runs them */
    int n = 0;
    for (cohort_request_t *q = e->ghead; q; q = q->next) n++;
    cohort_request_t **list = malloc(sizeof *list * (size_t)(n ? n : 1));
    cohort_fuse_item_t *items = malloc(sizeof *items * (size_t)(n ? n : 1));
    int *leader = malloc(sizeof *leader * (size_t)(n ? n : 1));
    int *size = calloc((size_t)(n ? n : 1), sizeof *size);
    cohort_status_t st = COHORT_SUCCESS;
    if (!list || !items || !leader || !size)
        st = cohort_error(COHORT_ERR_NO_MEMORY, "cohort_group_end on rank %d: no memory to plan "
                          "%d operations", comm->rank, n);
    int i = 0;
    for (cohort_request_t *q = e->ghead; list && q; q = q->next) list[i++] = q;
    if (!st) {
        for (i = 0; i < n; i++) items[i] = item_of(list[i], e->threshold);
        if (!e->threshold || comm->nranks == 1)
            for (i = 0; i < n; i++) items[i].fusable = 0;
        cohort_fuse_plan(items, n, e->threshold, leader);
        for (i = 0; i < n; i++) size[leader[i]]++;
    }
    /* queue entries: each leader, as itself or as a batch of its members in issue order */
    cohort_request_t **entries = st ? NULL : calloc((size_t)(n ? n : 1), sizeof *entries);
    if (!st && !entries)
        st = cohort_error(COHORT_ERR_NO_MEMORY, "cohort_group_end on rank %d: no memory", comm->rank);
    for (i = 0; !st && i < n; i++) {
        if (leader[i] != i || size[i] == 1) continue;
        cohort_request_t *b = calloc(1, sizeof *b);
        cohort_request_t **m = calloc((size_t)size[i], sizeof *m);
        if (!b || !m) {
            free(b);
            free(m);
            st = cohort_error(COHORT_ERR_NO_MEMORY, "cohort_group_end on rank %d: no memory",
                              comm->rank);
            break;
        }
        b->flags = R_INTERNAL;
        b->members = m;
        entries[i] = b;
    }
    pthread_mutex_lock(&e->mu);
    cohort_status_t first = COHORT_SUCCESS;
    char msg[1024] = "", one[1024];
    if (st) {
        /* nothing was sent: every member fails with this error (on this rank only: the others
         * wait for it until COHORT_TIMEOUT); the blocking ones are this call's to free, the
         * others complete through their requests */
        for (i = 0; entries && i < n; i++)
            if (entries[i]) {
                free(entries[i]->members);
                free(entries[i]);
            }
        for (cohort_request_t *q = e->ghead, *next; q; q = next) {
            next = q->next;
            q->st = st;
            set_msg(q, cohort_last_error());
            atomic_store_explicit(&q->done, 1u, memory_order_release);
            if (q->flags & R_BLOCKING) finish(e, q, NULL, 0);
        }
        e->ghead = e->gtail = NULL;
    } else {
        e->ghead = e->gtail = NULL;
        for (i = 0; i < n; i++) {
            cohort_request_t *q = list[i];
            q->next = NULL;
            if (entries[leader[i]]) {
                cohort_request_t *b = entries[leader[i]];
                b->members[b->nmembers++] = q;
                if (leader[i] != i) continue;
                q = b;
            }
            if (e->tail) e->tail->next = q;
            else e->head = q;
            e->tail = q;
            e->pending++;
        }
        kick(e, 0);
        /* the blocking calls made in the group complete here; the first failure is returned */
        for (i = 0; i < n; i++) {
            if (!(list[i]->flags & R_BLOCKING)) continue;
            wait_done(e, list[i]);
            cohort_status_t s = finish(e, list[i], one, sizeof one);
            if (s && !first) {
                first = s;
                snprintf(msg, sizeof msg, "%s", one);
            }
        }
    }
    pthread_mutex_unlock(&e->mu);
    free(list);
    free(items);
    free(leader);
    free(size);
    free(entries);
    if (first) cohort_error_restore(msg);
    return first ? first : st;
}

/* ---- completion: cohort_test, cohort_wait, cohort_waitall ---- */

static cohort_status_t check_req(const cohort_request_t *r, const char *fn)
{
    if (!r)
        return cohort_error(COHORT_ERR_INVALID_ARG, "%s: the request is NULL", fn);
    if (r->magic != REQ_MAGIC)
        return cohort_error(COHORT_ERR_INVALID_ARG, "%s: %p is not a live request (%s)", fn,
                            (const void *)r, r->magic == REQ_DEAD
                            ? "it completed and was freed by an earlier cohort_test, cohort_wait "
                              "or cohort_waitall" : "never returned by a non-blocking call");
    return COHORT_SUCCESS;
}

/* Frees a completed request; the lock is held. Returns its status. */
static cohort_status_t finish(cohort_engine_t *e, cohort_request_t *r, char *msg, size_t len)
{
    cohort_status_t st = r->st;
    if (st && msg)
        snprintf(msg, len, "%s", r->msg ? r->msg : "(no memory was left for the message)");
    e->live--;
    r->magic = REQ_DEAD;
    free(r->arrays);
    r->arrays = NULL;
    free(r->msg);
    r->msg = NULL;
    if (e->nspare < REQ_SPARE_MAX) {
        r->next = NULL;
        if (e->spare_tail) e->spare_tail->next = r;
        else e->spare = r;
        e->spare_tail = r;
        e->nspare++;
    } else {
        free(r);
    }
    return st;
}

/* Waits (lock held) until r is done: running queued requests itself where waiters do
 * (waiter_runs), else polling first where the threads may (may_spin), then asleep. */
static void wait_done(cohort_engine_t *e, cohort_request_t *r)
{
    int spun = 0;
    while (!atomic_load_explicit(&r->done, memory_order_acquire)) {
        if (waiter_runs(e)) {
            run_one(e, r->comm, 1);
        } else if (!spun && may_spin(r->comm)) {
            spin_while(e, r->comm, &r->done, 0u);   /* once: a wake-up costs more (may_spin) */
            spun = 1;
        } else {
            pthread_cond_wait(&e->done, &e->mu);
        }
    }
}

/* The request's own error becomes this thread's last error (it was logged where it ran). */
static cohort_status_t report(cohort_status_t st, const char *msg)
{
    if (st) cohort_error_restore(msg);
    return st;
}

cohort_status_t cohort_test(cohort_request_t *req, int *done)
{
    if (done) *done = 0;
    cohort_status_t st = check_req(req, "cohort_test");
    if (st) return st;
    if (!done) return cohort_error(COHORT_ERR_INVALID_ARG, "cohort_test: done is NULL");
    cohort_engine_t *e = req->comm->engine;
    char msg[1024];
    pthread_mutex_lock(&e->mu);
    /* caller mode: the request advances only here; it runs once it reaches the queue's head */
    if (e->caller && !atomic_load_explicit(&req->done, memory_order_acquire) && !e->running &&
        e->head)
        wait_done(e, req);
    if (!atomic_load_explicit(&req->done, memory_order_acquire)) {
        pthread_mutex_unlock(&e->mu);
        return COHORT_SUCCESS;
    }
    *done = 1;
    st = finish(e, req, msg, sizeof msg);
    pthread_mutex_unlock(&e->mu);
    return report(st, msg);
}

cohort_status_t cohort_wait(cohort_request_t *req)
{
    cohort_status_t st = check_req(req, "cohort_wait");
    if (st) return st;
    cohort_engine_t *e = req->comm->engine;
    char msg[1024];
    pthread_mutex_lock(&e->mu);
    wait_done(e, req);
    st = finish(e, req, msg, sizeof msg);
    pthread_mutex_unlock(&e->mu);
    return report(st, msg);
}

cohort_status_t cohort_waitall(size_t n, cohort_request_t **reqs, cohort_status_t *statuses)
{
    if (n && !reqs) return cohort_error(COHORT_ERR_INVALID_ARG, "cohort_waitall: reqs is NULL "
                                        "with n = %zu", n);
    /* a duplicate is found by marking each request with this call's number (a pairwise
     * comparison cost 2 ms for 2000 requests) */
    static _Atomic uint64_t calls;
    uint64_t mark = atomic_fetch_add_explicit(&calls, 1, memory_order_relaxed) + 1;
    for (size_t i = 0; i < n; i++) {
        cohort_status_t st = check_req(reqs[i], "cohort_waitall");
        if (st) {
            cohort_error_prefix("cohort_waitall: reqs[%zu]", i);
            return st;
        }
        if (reqs[i]->wmark == mark) {
            size_t j = 0;
            while (reqs[j] != reqs[i]) j++;
            return cohort_error(COHORT_ERR_INVALID_ARG, "cohort_waitall: reqs[%zu] and "
                                "reqs[%zu] are the same request", j, i);
        }
        reqs[i]->wmark = mark;
    }
    cohort_status_t first = COHORT_SUCCESS;
    char msg[1024] = "", one[1024];
    for (size_t i = 0; i < n; i++) {
        cohort_engine_t *e = reqs[i]->comm->engine;
        pthread_mutex_lock(&e->mu);
        wait_done(e, reqs[i]);
        cohort_status_t st = finish(e, reqs[i], one, sizeof one);
        pthread_mutex_unlock(&e->mu);
        reqs[i] = NULL;
        if (statuses) statuses[i] = st;
        if (st && !first) {
            first = st;
            snprintf(msg, sizeof msg, "%s", one);
        }
    }
    return report(first, msg);
}
