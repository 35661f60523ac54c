/* SPDX-License-Identifier: BSD-3-Clause */
/* Test-only implementation of core/p2p.h and the communicator services used by the algorithms
 * (see mock_p2p.h). One mutex guards the whole world; each rank waits on its own condition
 * variable. Matching happens when the second side of a pair is posted, in the posting thread.
 */
#include "tests/unit/mock_p2p.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/coll/coll.h"
#include "core/log.h"
#include "core/p2p.h"

typedef struct mreq {
    int owner;
    int done;
    cohort_status_t err;
    size_t got;
    struct mreq *prev, *next;   /* world list of outstanding requests */
} mreq_t;

typedef struct smsg {           /* a send waiting for its receive */
    struct smsg *next;
    const void *data;           /* user buffer (rendezvous) or own copy (eager) */
    void *owned;
    size_t len;
    mreq_t *req;                /* NULL for eager sends (already complete) */
} smsg_t;

typedef struct rpost {          /* a receive waiting for its send */
    struct rpost *next;
    void *buf;
    size_t len;
    mreq_t *req;
} rpost_t;

typedef struct pairq {
    smsg_t *sh, *st;
    rpost_t *rh, *rt;
} pairq_t;

struct cohort_comm {
    mock_world_t *w;
    int rank, size;
    void *scratch[2];
    size_t scratch_len[2];
};

struct mock_world {
    int n;
    pthread_mutex_t mu;
    pthread_cond_t *cv;
    pairq_t *q;                 /* [src * n + dst] */
    mreq_t reqs;                /* list head */
    int aborted;
    int rendezvous;
    double timeout;
    size_t chunk;
    cohort_algo_spec_t spec;
    int fail_rank, fail_nth, *calls;
    cohort_status_t fail_status;
    mock_stats_t stats;
    struct cohort_comm *comms;
    int *ring, *pos;            /* ring order (cohort_coll_ring) and each rank's position */
};

mock_world_t *mock_world_create(int nranks)
{
    mock_world_t *w = calloc(1, sizeof(*w));
    if (!w)
        return NULL;
    w->n = nranks;
    pthread_mutex_init(&w->mu, NULL);
    w->cv = calloc((size_t)nranks, sizeof(*w->cv));
    w->q = calloc((size_t)nranks * (size_t)nranks, sizeof(*w->q));
    w->comms = calloc((size_t)nranks, sizeof(*w->comms));
    w->calls = calloc((size_t)nranks, sizeof(*w->calls));
    w->ring = calloc((size_t)nranks, sizeof(*w->ring));
    w->pos = calloc((size_t)nranks, sizeof(*w->pos));
    if (!w->cv || !w->q || !w->comms || !w->calls || !w->ring || !w->pos) {
        free(w->ring);
        free(w->pos);
        free(w->cv);
        free(w->q);
        free(w->comms);
        free(w->calls);
        free(w);
        return NULL;
    }
    for (int i = 0; i < nranks; i++) {
        pthread_cond_init(&w->cv[i], NULL);
        w->comms[i].w = w;
        w->comms[i].rank = i;
        w->comms[i].size = nranks;
        w->ring[i] = w->pos[i] = i;
    }
    w->reqs.next = w->reqs.prev = &w->reqs;
    w->timeout = 20.0;
    w->chunk = 1 << 16;
    w->fail_rank = -1;
    return w;
}

static void purge_locked(mock_world_t *w)
{
    for (int i = 0; i < w->n * w->n; i++) {
        pairq_t *q = &w->q[i];
        while (q->sh) {
            smsg_t *m = q->sh;
            q->sh = m->next;
            free(m->owned);
            free(m);
        }
        while (q->rh) {
            rpost_t *r = q->rh;
            q->rh = r->next;
            free(r);
        }
        q->st = NULL;
        q->rt = NULL;
    }
    while (w->reqs.next != &w->reqs) {
        mreq_t *r = w->reqs.next;
        r->next->prev = r->prev;
        r->prev->next = r->next;
        free(r);
    }
}

void mock_world_destroy(mock_world_t *w)
{
    if (!w)
        return;
    purge_locked(w);
    for (int i = 0; i < w->n; i++) {
        pthread_cond_destroy(&w->cv[i]);
        free(w->comms[i].scratch[0]);
        free(w->comms[i].scratch[1]);
    }
    pthread_mutex_destroy(&w->mu);
    free(w->cv);
    free(w->q);
    free(w->comms);
    free(w->calls);
    free(w->ring);
    free(w->pos);
    free(w);
}

cohort_comm_t *mock_world_comm(mock_world_t *w, int rank) { return &w->comms[rank]; }
void mock_world_set_chunk(mock_world_t *w, size_t chunk_bytes) { w->chunk = chunk_bytes; }
void mock_world_set_rendezvous(mock_world_t *w, int on) { w->rendezvous = on; }
void mock_world_set_timeout(mock_world_t *w, double seconds) { w->timeout = seconds; }

void mock_world_set_algo(mock_world_t *w, const char *coll, const char *algo)
{
    memset(&w->spec, 0, sizeof(w->spec));
    if (coll && *coll) {
        snprintf(w->spec.entries[0].coll, sizeof(w->spec.entries[0].coll), "%s", coll);
        snprintf(w->spec.entries[0].algo, sizeof(w->spec.entries[0].algo), "%s", algo);
        w->spec.count = 1;
    }
}

void mock_world_fail_call(mock_world_t *w, int rank, int nth, cohort_status_t status)
{
    pthread_mutex_lock(&w->mu);
    w->fail_rank = nth > 0 ? rank : -1;
    w->fail_nth = nth;
    w->fail_status = status;
    memset(w->calls, 0, (size_t)w->n * sizeof(*w->calls));
    pthread_mutex_unlock(&w->mu);
}

void mock_world_abort(mock_world_t *w)
{
    pthread_mutex_lock(&w->mu);
    w->aborted = 1;
    for (int i = 0; i < w->n; i++)
        pthread_cond_broadcast(&w->cv[i]);
    pthread_mutex_unlock(&w->mu);
}

void mock_world_reset(mock_world_t *w)
{
    pthread_mutex_lock(&w->mu);
    purge_locked(w);
    w->aborted = 0;
    w->fail_rank = -1;
    pthread_mutex_unlock(&w->mu);
}

int mock_world_idle(mock_world_t *w, char *buf, size_t len)
{
    int idle = 1;
    pthread_mutex_lock(&w->mu);
    for (int i = 0; i < w->n * w->n && idle; i++) {
        if (w->q[i].sh) {
            snprintf(buf, len, "unreceived message of %zu bytes from rank %d to rank %d",
                     w->q[i].sh->len, i / w->n, i % w->n);
            idle = 0;
        } else if (w->q[i].rh) {
            snprintf(buf, len, "unmatched receive of %zu bytes at rank %d from rank %d",
                     w->q[i].rh->len, i % w->n, i / w->n);
            idle = 0;
        }
    }
    if (idle && w->reqs.next != &w->reqs) {
        snprintf(buf, len, "request of rank %d never waited for", w->reqs.next->owner);
        idle = 0;
    }
    pthread_mutex_unlock(&w->mu);
    return idle;
}

void mock_world_stats(mock_world_t *w, mock_stats_t *st, int reset)
{
    pthread_mutex_lock(&w->mu);
    if (st)
        *st = w->stats;
    if (reset)
        memset(&w->stats, 0, sizeof(w->stats));
    pthread_mutex_unlock(&w->mu);
}

/* ---- requests ---------------------------------------------------------------------------- */

static mreq_t *req_new_locked(mock_world_t *w, int owner)
{
    mreq_t *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->owner = owner;
    r->next = w->reqs.next;
    r->prev = &w->reqs;
    w->reqs.next->prev = r;
    w->reqs.next = r;
    return r;
}

static void req_free_locked(mreq_t *r)
{
    r->next->prev = r->prev;
    r->prev->next = r->next;
    free(r);
}

static void complete_locked(mock_world_t *w, mreq_t *r, cohort_status_t err, size_t got)
{
    r->done = 1;
    r->err = err;
    r->got = got;
    pthread_cond_broadcast(&w->cv[r->owner]);
}

/* Deliver a send to a receive; frees both queue nodes. */
static void match_locked(mock_world_t *w, smsg_t *m, rpost_t *r)
{
    size_t n = m->len < r->len ? m->len : r->len;
    if (n)
        memcpy(r->buf, m->data, n);
    w->stats.messages++;
    w->stats.bytes += m->len;
    if (m->len > w->stats.max_len)
        w->stats.max_len = m->len;
    /* A longer message than posted is truncated: the receive fails. A shorter one is noticed
     * by the wait (got < len), as in the real layer. */
    complete_locked(w, r->req, m->len > r->len ? COHORT_ERR_MISMATCH : COHORT_SUCCESS, n);
    if (m->req)
        complete_locked(w, m->req, COHORT_SUCCESS, m->len);
    free(m->owned);
    free(m);
    free(r);
}

static cohort_status_t post_check_locked(cohort_comm_t *comm, int peer, const void *buf,
                                         size_t len, cohort_preq_t *req, const char *what)
{
    mock_world_t *w = comm->w;
    if (!req)
        return cohort_error(COHORT_ERR_INVALID_ARG, "mock %s: NULL request", what);
    if (peer < 0 || peer >= w->n || peer == comm->rank)
        return cohort_error(COHORT_ERR_INVALID_ARG, "mock %s: rank %d posted to bad peer %d",
                            what, comm->rank, peer);
    if (len && !buf)
        return cohort_error(COHORT_ERR_INVALID_ARG, "mock %s: NULL buffer of %zu bytes", what,
                            len);
    if (w->aborted)
        return cohort_error(COHORT_ERR_ABORTED, "mock %s: world aborted", what);
    w->calls[comm->rank]++;
    if (comm->rank == w->fail_rank && w->calls[comm->rank] == w->fail_nth)
        return cohort_error(w->fail_status, "mock %s: injected failure at call %d of rank %d",
                            what, w->fail_nth, comm->rank);
    return COHORT_SUCCESS;
}

cohort_status_t cohort_p2p_isend(cohort_comm_t *comm, int peer, const void *buf, size_t len,
                                 cohort_preq_t *req)
{
    mock_world_t *w = comm->w;
    cohort_status_t st;
    pthread_mutex_lock(&w->mu);
    if ((st = post_check_locked(comm, peer, buf, len, req, "isend")) != COHORT_SUCCESS)
        goto out;
    mreq_t *r = req_new_locked(w, comm->rank);
    smsg_t *m = calloc(1, sizeof(*m));
    if (!r || !m) {
        free(m);
        st = cohort_error(COHORT_ERR_NO_MEMORY, "mock isend: out of memory");
        goto out;
    }
    memset(req, 0, sizeof(*req));
    req->tp = r;
    req->peer = peer;
    req->is_send = 1;
    req->len = len;
    m->len = len;
    pairq_t *q = &w->q[comm->rank * w->n + peer];
    if (q->rh) {                  /* a receive is waiting: deliver now */
        rpost_t *rp = q->rh;
        q->rh = rp->next;
        if (!q->rh)
            q->rt = NULL;
        m->data = buf;
        m->req = r;
        match_locked(w, m, rp);
    } else {
        if (w->rendezvous) {      /* completes when received */
            m->data = buf;
            m->req = r;
        } else {                  /* eager: copy and complete now */
            m->owned = malloc(len ? len : 1);
            if (!m->owned) {
                free(m);
                st = cohort_error(COHORT_ERR_NO_MEMORY, "mock isend: out of memory");
                goto out;
            }
            if (len)
                memcpy(m->owned, buf, len);
            m->data = m->owned;
            complete_locked(w, r, COHORT_SUCCESS, len);
        }
        if (q->st)
            q->st->next = m;
        else
            q->sh = m;
        q->st = m;
    }
out:
    pthread_mutex_unlock(&w->mu);
    return st;
}

cohort_status_t cohort_p2p_irecv(cohort_comm_t *comm, int peer, void *buf, size_t len,
                                 cohort_preq_t *req)
{
    mock_world_t *w = comm->w;
    cohort_status_t st;
    pthread_mutex_lock(&w->mu);
    if ((st = post_check_locked(comm, peer, buf, len, req, "irecv")) != COHORT_SUCCESS)
        goto out;
    mreq_t *r = req_new_locked(w, comm->rank);
    rpost_t *rp = calloc(1, sizeof(*rp));
    if (!r || !rp) {
        free(rp);
        st = cohort_error(COHORT_ERR_NO_MEMORY, "mock irecv: out of memory");
        goto out;
    }
    memset(req, 0, sizeof(*req));
    req->tp = r;
    req->peer = peer;
    req->len = len;
    rp->buf = buf;
    rp->len = len;
    rp->req = r;
    pairq_t *q = &w->q[peer * w->n + comm->rank];
    if (q->sh) {
        smsg_t *m = q->sh;
        q->sh = m->next;
        if (!q->sh)
            q->st = NULL;
        match_locked(w, m, rp);
    } else {
        if (q->rt)
            q->rt->next = rp;
        else
            q->rh = rp;
        q->rt = rp;
    }
out:
    pthread_mutex_unlock(&w->mu);
    return st;
}

/* Harvest a completed request into req; returns its status. */
static cohort_status_t finish_locked(cohort_comm_t *comm, cohort_preq_t *req)
{
    mreq_t *r = req->tp;
    cohort_status_t err = r->err;
    req->got = r->got;
    req->done = 1;
    req->tp = NULL;
    req_free_locked(r);
    if (err != COHORT_SUCCESS)
        return cohort_error(err, "mock: %s of %zu bytes between rank %d and rank %d failed "
                            "(message longer than the receive)", req->is_send ? "send" : "receive",
                            req->len, comm->rank, req->peer);
    if (!req->is_send && req->got < req->len)
        return cohort_error(COHORT_ERR_MISMATCH, "mock: rank %d posted a receive of %zu bytes "
                            "from rank %d but got %zu", comm->rank, req->len, req->peer,
                            req->got);
    return COHORT_SUCCESS;
}

static int active(const cohort_preq_t *req) { return !req->done && req->tp; }

static void deadline_after(double s, struct timespec *ts)
{
    clock_gettime(CLOCK_REALTIME, ts);
    long sec = (long)s;
    long nsec = (long)((s - (double)sec) * 1e9);
    ts->tv_sec += sec;
    ts->tv_nsec += nsec;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

cohort_status_t cohort_p2p_test(cohort_comm_t *comm, cohort_preq_t *req)
{
    mock_world_t *w = comm->w;
    cohort_status_t st = COHORT_SUCCESS;
    pthread_mutex_lock(&w->mu);
    if (active(req) && ((mreq_t *)req->tp)->done)
        st = finish_locked(comm, req);
    pthread_mutex_unlock(&w->mu);
    return st;
}

static cohort_status_t timeout_locked(cohort_comm_t *comm, cohort_preq_t *reqs, int n)
{
    mock_world_t *w = comm->w;
    char peers[256] = "";
    size_t len = 0;
    for (int i = 0; i < n && len + 32 < sizeof(peers); i++)
        if (active(&reqs[i]) && !((mreq_t *)reqs[i].tp)->done)
            len += (size_t)snprintf(peers + len, sizeof(peers) - len, " %s%d",
                                    reqs[i].is_send ? "send->" : "recv<-", reqs[i].peer);
    w->aborted = 1;
    for (int i = 0; i < w->n; i++)
        pthread_cond_broadcast(&w->cv[i]);
    return cohort_error(COHORT_ERR_TIMEOUT, "mock: rank %d waited %.1f s; pending:%s",
                        comm->rank, w->timeout, peers);
}

cohort_status_t cohort_p2p_waitall(cohort_comm_t *comm, cohort_preq_t *reqs, int n)
{
    mock_world_t *w = comm->w;
    cohort_status_t st = COHORT_SUCCESS;
    struct timespec dl;
    deadline_after(w->timeout, &dl);
    pthread_mutex_lock(&w->mu);
    for (;;) {
        int pending = 0;
        for (int i = 0; i < n; i++) {
            if (!active(&reqs[i]))
                continue;
            if (((mreq_t *)reqs[i].tp)->done) {
                cohort_status_t s = finish_locked(comm, &reqs[i]);
                if (s != COHORT_SUCCESS && st == COHORT_SUCCESS)
                    st = s;
            } else {
                pending++;
            }
        }
        if (st != COHORT_SUCCESS || !pending)
            break;
        if (w->aborted) {
            st = cohort_error(COHORT_ERR_ABORTED, "mock: rank %d: world aborted", comm->rank);
            break;
        }
        if (pthread_cond_timedwait(&w->cv[comm->rank], &w->mu, &dl) == ETIMEDOUT) {
            st = timeout_locked(comm, reqs, n);
            break;
        }
    }
    pthread_mutex_unlock(&w->mu);
    return st;
}

cohort_status_t cohort_p2p_waitany(cohort_comm_t *comm, cohort_preq_t *reqs, int n, int *index)
{
    mock_world_t *w = comm->w;
    cohort_status_t st = COHORT_SUCCESS;
    struct timespec dl;
    deadline_after(w->timeout, &dl);
    *index = -1;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        int any = 0;
        for (int i = 0; i < n; i++) {
            if (!active(&reqs[i]))
                continue;
            any = 1;
            if (((mreq_t *)reqs[i].tp)->done) {
                *index = i;
                st = finish_locked(comm, &reqs[i]);
                goto out;
            }
        }
        if (!any)   /* nothing pending: like core/p2p.c, success with index -1 */
            break;
        if (w->aborted) {
            st = cohort_error(COHORT_ERR_ABORTED, "mock: rank %d: world aborted", comm->rank);
            break;
        }
        if (pthread_cond_timedwait(&w->cv[comm->rank], &w->mu, &dl) == ETIMEDOUT) {
            st = timeout_locked(comm, reqs, n);
            break;
        }
    }
out:
    pthread_mutex_unlock(&w->mu);
    return st;
}

cohort_status_t cohort_p2p_sendrecv(cohort_comm_t *comm, int dst, const void *sbuf, size_t slen,
                                    int src, void *rbuf, size_t rlen)
{
    cohort_preq_t rq[2];
    cohort_status_t st;
    if ((st = cohort_p2p_irecv(comm, src, rbuf, rlen, &rq[0])) != COHORT_SUCCESS)
        return st;
    if ((st = cohort_p2p_isend(comm, dst, sbuf, slen, &rq[1])) != COHORT_SUCCESS)
        return st;
    return cohort_p2p_waitall(comm, rq, 2);
}

/* The *_hier algorithms confirm their communicator's token first; the flat mock never runs
 * them, and its messages carry no tokens. */
cohort_status_t cohort_p2p_token_sync(cohort_comm_t *comm)
{
    (void)comm;
    return COHORT_SUCCESS;
}

/* ---- communicator services ---------------------------------------------------------------- */

void *cohort_coll_scratch(cohort_comm_t *comm, int slot, size_t bytes)
{
    if (slot < 0 || slot > 1) {
        cohort_error(COHORT_ERR_INTERNAL, "mock scratch: bad slot %d", slot);
        return NULL;
    }
    /* A fresh block of exactly the size asked for, filled with junk, every time: ASan then
     * catches any access past what the algorithm asked for, and nothing can rely on contents. */
    free(comm->scratch[slot]);
    comm->scratch[slot] = malloc(bytes ? bytes : 1);
    comm->scratch_len[slot] = bytes;
    if (!comm->scratch[slot]) {
        cohort_error(COHORT_ERR_NO_MEMORY, "mock scratch: cannot allocate %zu bytes", bytes);
        return NULL;
    }
    memset(comm->scratch[slot], 0xA5, bytes);
    return comm->scratch[slot];
}

size_t cohort_coll_chunk_size(const cohort_comm_t *comm) { return comm->w->chunk; }

int cohort_coll_nodes(const cohort_comm_t *comm) { (void)comm; return 1; }

/* no timeline here */
uint64_t cohort_coll_now(const cohort_comm_t *comm) { (void)comm; return 0; }
void cohort_coll_phase(cohort_comm_t *comm, const char *name, uint64_t t0)
{
    (void)comm;
    (void)name;
    (void)t0;
}

const int *cohort_coll_ring(const cohort_comm_t *comm, int *pos)
{
    *pos = comm->w->pos[comm->rank];
    return comm->w->ring;
}

/* The mock world is flat: no hierarchy, so the *_hier algorithms are never chosen here (they
 * are tested over real nodes in tests/netns/). */
int cohort_coll_hier(cohort_comm_t *comm, cohort_hier_view_t *h)
{
    (void)comm;
    (void)h;
    return 0;
}

void mock_world_set_ring(mock_world_t *w, const int *ring)
{
    for (int i = 0; i < w->n; i++) {
        w->ring[i] = ring ? ring[i] : i;
        w->pos[w->ring[i]] = i;
    }
}
const cohort_algo_spec_t *cohort_coll_algo_spec(const cohort_comm_t *comm) { return &comm->w->spec; }
int cohort_coll_rank(const cohort_comm_t *comm) { return comm->rank; }
int cohort_coll_size(const cohort_comm_t *comm) { return comm->size; }
