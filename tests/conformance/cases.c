/* cohort-conformance: the cases. Each runs on every rank with a fresh endpoint (its own comm
 * id), fails with a message through cf_fail, and leaves closing to the harness unless closing
 * is what it tests. The peer-exit case must stay last: its victim rank leaves the run. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include "tests/conformance/conformance.h"

#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KiB ((size_t)1024)
#define MiB ((size_t)1024 * 1024)
#define CANARY 64

/* ---- exchanging messages with every peer ------------------------------------------------- */

typedef struct xopt {
    int order;        /* CF_ORDER_* for testing completions */
    int same_tag;     /* every message carries one tag (pure in-order matching) */
    int recv_first;   /* 1: post receives first, 0: sends first, -1: by rank parity */
    size_t extra;     /* receive buffers this much larger than the message */
} xopt_t;

static uint64_t tag_of(int i, int same)
{
    return same ? 0x5a5aull : 0xc0de000000000000ull + (uint64_t)i;
}

/* Every rank sends sizes[0..count) to every peer and receives the same from every peer. */
static int exchange(cf_world_t *w, const size_t *sizes, int count, const xopt_t *x)
{
    int npeer = w->np - 1, nreq = 2 * count * npeer;
    cf_req_t *q = cf_alloc(w, (size_t)nreq * sizeof *q);
    unsigned char **buf = cf_alloc(w, (size_t)nreq * sizeof *buf);
    int *msg = cf_alloc(w, (size_t)nreq * sizeof *msg);
    if (!q || !buf || !msg) return cf_fail(w, "out of memory");
    int recv_first = x->recv_first < 0 ? (w->rank % 2 == 0) : x->recv_first;
    int k = 0;
    for (int phase = 0; phase < 2; phase++) {
        int recv = (phase == 0) == (recv_first != 0);
        for (int p = 0; p < w->np; p++) {
            if (p == w->rank) continue;
            for (int i = 0; i < count; i++, k++) {
                size_t len = sizes[i];
                msg[k] = i;
                if (recv) {
                    size_t cap = len + x->extra;
                    buf[k] = cf_alloc(w, cap + CANARY);
                    if (!buf[k]) return cf_fail(w, "out of memory");
                    memset(buf[k], 0xee, cap + CANARY);
                    cf_irecv(w, p, buf[k], cap, tag_of(i, x->same_tag), NULL, &q[k]);
                } else {
                    buf[k] = cf_alloc(w, len);
                    if (!buf[k]) return cf_fail(w, "out of memory");
                    cf_fill(buf[k], len, cf_seed(w, w->rank, p, i));
                    cf_isend(w, p, buf[k], len, tag_of(i, x->same_tag), NULL, &q[k]);
                }
            }
        }
    }
    if (cf_wait(w, q, nreq, x->order)) return -1;
    for (k = 0; k < nreq; k++) {
        cf_req_t *r = &q[k];
        int i = msg[k];
        size_t len = sizes[i];
        if (r->st != COHORT_SUCCESS)
            return cf_fail(w, "%s #%d of %zu bytes %s rank %d failed: %s: %s",
                           r->is_send ? "send" : "receive", i, len, r->is_send ? "to" : "from",
                           r->peer, cohort_strerror(r->st), r->err);
        if (r->is_send) continue;
        if (r->nbytes != len)
            return cf_fail(w, "receive #%d from rank %d: test reported %zu bytes, the message "
                           "has %zu", i, r->peer, r->nbytes, len);
        size_t bad = cf_check(buf[k], len, cf_seed(w, r->peer, w->rank, i));
        if (bad != len)
            return cf_fail(w, "receive #%d from rank %d (%zu bytes): wrong data at byte %zu",
                           i, r->peer, len, bad);
        for (size_t b = len + x->extra; b < len + x->extra + CANARY; b++)
            if (buf[k][b] != 0xee)
                return cf_fail(w, "receive #%d from rank %d: the plugin wrote past the posted "
                               "length (byte %zu)", i, r->peer, b);
    }
    return 0;
}

static int exchange_sizes(cf_world_t *w, const size_t *sizes, int count)
{
    xopt_t x = { CF_ORDER_FORWARD, 0, -1, 0 };
    if (cf_world(w)) return -1;
    return exchange(w, sizes, count, &x);
}

static int ping(cf_world_t *w)
{
    static const size_t sz[] = { 17 };
    xopt_t x = { CF_ORDER_FORWARD, 0, -1, 0 };
    return exchange(w, sz, 1, &x);
}

/* ---- endpoints, attributes, connection setup ---------------------------------------------- */

static int case_addresses(cf_world_t *w)
{
    if (cf_ep_open(w)) return -1;
    for (int p = 0; p < w->np; p++) {
        if (p == w->rank) continue;
        int r = w->ops->can_reach(w->ep, p, w->addr[p], w->addrlen[p]);
        if (r != 1)
            return cf_fail(w, "can_reach(rank %d) = %d although every rank runs on this host", p,
                           r);
    }
    if (w->ops->ep_fd) {
        int fd = w->ops->ep_fd(w->ep);
        if (fd >= 0 && fcntl(fd, F_GETFD) < 0)
            return cf_fail(w, "ep_fd returned %d, which is not an open file descriptor", fd);
    }
    /* A second endpoint (another communicator) at the same time. */
    cohort_ep_info_t info = { sizeof info, w->rank, w->np, 0xC0F0FFFull, getenv("COHORT_JOB_ID") };
    unsigned char addr[COHORT_ADDR_MAX];
    size_t alen = sizeof addr;
    cohort_tp_ep_t ep2 = NULL;
    cohort_status_t st = w->ops->ep_open(w->ctx, &info, &ep2, addr, &alen);
    if (st != COHORT_SUCCESS)
        return cf_fail(w, "a second endpoint could not be opened: %s: %s", cohort_strerror(st),
                       cohort_last_error());
    st = w->ops->ep_close(ep2);
    if (st < 0) return cf_fail(w, "ep_close of the second endpoint: %s", cohort_strerror(st));
    return 0;
}

static int case_attributes(cf_world_t *w)
{
    union {
        cohort_transport_attr_t a;
        unsigned char b[sizeof(cohort_transport_attr_t) + 64];
    } u;
    memset(&u, 0xa5, sizeof u);
    u.a.size = sizeof u.a;
    cohort_status_t st = w->ops->get_attr(w->ctx, &u.a);
    if (st != COHORT_SUCCESS)
        return cf_fail(w, "get_attr failed: %s: %s", cohort_strerror(st), cohort_last_error());
    if (u.a.scope != COHORT_SCOPE_NODE && u.a.scope != COHORT_SCOPE_NETWORK)
        return cf_fail(w, "get_attr: scope %d is neither NODE nor NETWORK", u.a.scope);
    if (!(u.a.bandwidth_gbps > 0) || !isfinite(u.a.bandwidth_gbps))
        return cf_fail(w, "get_attr: bandwidth estimate %g GB/s is not positive",
                       u.a.bandwidth_gbps);
    if (!(u.a.latency_us >= 0) || !isfinite(u.a.latency_us))
        return cf_fail(w, "get_attr: latency estimate %g us is not a time", u.a.latency_us);
    if (u.a.gpu_memory != 0 && u.a.gpu_memory != 1)
        return cf_fail(w, "get_attr: gpu_memory is %d, not 0 or 1", u.a.gpu_memory);
    for (size_t i = sizeof u.a; i < sizeof u.b; i++)
        if (u.b[i] != 0xa5)
            return cf_fail(w, "get_attr wrote past the struct size it was given");
    /* An older core's smaller struct: fields beyond its size must stay untouched. */
    size_t small = offsetof(cohort_transport_attr_t, latency_us);
    memset(&u, 0xa5, sizeof u);
    u.a.size = small;
    st = w->ops->get_attr(w->ctx, &u.a);
    if (st != COHORT_SUCCESS)
        return cf_fail(w, "get_attr with size %zu failed: %s", small, cohort_strerror(st));
    for (size_t i = small; i < sizeof u.b; i++)
        if (u.b[i] != 0xa5)
            return cf_fail(w, "get_attr given size %zu wrote byte %zu (past that size)", small,
                           i);
    return 0;
}

static int case_acceptor_first(cf_world_t *w)
{
    if (cf_ep_open(w)) return -1;
    if (cf_post_conns(w, 0, 1)) return -1;     /* every accept before any connect */
    if (cf_barrier(w)) return -1;
    if (cf_post_conns(w, 1, 0)) return -1;
    if (cf_wait_conns(w)) return -1;
    return ping(w);
}

static int case_connector_first(cf_world_t *w)
{
    if (cf_ep_open(w)) return -1;
    if (cf_post_conns(w, 1, 0)) return -1;     /* every connect before any accept */
    /* Let the connections get as far as they can without accept() (bounded: a plugin may need
     * accept to finish; the barrier below orders the calls either way). */
    double until = cf_now() + 2.0;
    while (cf_now() < until) {
        int pending = 0;
        for (int p = 0; p < w->rank; p++) {
            cohort_status_t st = w->ops->conn_test(w->conn[p]);
            if (st == COHORT_IN_PROGRESS) pending++;
            else if (st != COHORT_SUCCESS)
                return cf_fail(w, "connection to rank %d failed before accept: %s: %s", p,
                               cohort_strerror(st), cohort_last_error());
        }
        if (!pending) break;
        cf_pump(w, 10);
    }
    if (cf_barrier(w)) return -1;
    if (cf_post_conns(w, 0, 1)) return -1;
    if (cf_wait_conns(w)) return -1;
    return ping(w);
}

/* ---- sizes --------------------------------------------------------------------------------- */

static int case_0b(cf_world_t *w)
{
    static const size_t s[] = { 0 };
    return exchange_sizes(w, s, 1);
}
static int case_1b(cf_world_t *w)
{
    static const size_t s[] = { 1 };
    return exchange_sizes(w, s, 1);
}
static int case_odd(cf_world_t *w)
{
    static const size_t s[] = { 3, 7, 13, 255, 1023, 4097, 65521, 131071, 1000003 };
    return exchange_sizes(w, s, (int)(sizeof s / sizeof s[0]));
}
static int case_64k_minus(cf_world_t *w)
{
    static const size_t s[] = { 64 * KiB - 1 };
    return exchange_sizes(w, s, 1);
}
static int case_64k(cf_world_t *w)
{
    static const size_t s[] = { 64 * KiB };
    return exchange_sizes(w, s, 1);
}
static int case_64k_plus(cf_world_t *w)
{
    static const size_t s[] = { 64 * KiB + 1 };
    return exchange_sizes(w, s, 1);
}
static int case_1m(cf_world_t *w)
{
    static const size_t s[] = { MiB };
    return exchange_sizes(w, s, 1);
}
static int case_8m(cf_world_t *w)
{
    static const size_t s[] = { 8 * MiB };
    return exchange_sizes(w, s, 1);
}

static int case_short(cf_world_t *w)
{
    static const size_t s[] = { 100, 0, 70000, 1 };
    xopt_t x = { CF_ORDER_FORWARD, 0, -1, 1000 };
    if (cf_world(w)) return -1;
    return exchange(w, s, 4, &x);
}

/* ---- many, both ways, ordering ------------------------------------------------------------ */

static int case_many(cf_world_t *w)
{
    enum { N = 1000 };
    size_t *s = cf_alloc(w, N * sizeof *s);
    if (!s) return cf_fail(w, "out of memory");
    for (int i = 0; i < N; i++) s[i] = (size_t)((i * 37) % 257);
    xopt_t x = { CF_ORDER_FORWARD, 0, 1, 0 };
    if (cf_world(w)) return -1;
    return exchange(w, s, N, &x);
}

static int case_both_ways(cf_world_t *w)
{
    static const size_t s[] = { 8 * MiB, 1, 64 * KiB, 3, MiB + 5, 0, 200000, 64 * KiB - 1 };
    xopt_t x = { CF_ORDER_FORWARD, 0, 0, 0 };   /* sends first on every rank: both directions
                                                   are in flight before anyone receives */
    if (cf_world(w)) return -1;
    return exchange(w, s, (int)(sizeof s / sizeof s[0]), &x);
}

static size_t *mixed_sizes(cf_world_t *w, int n)
{
    size_t *s = cf_alloc(w, (size_t)n * sizeof *s);
    if (!s) return NULL;
    for (int i = 0; i < n; i++)
        s[i] = i % 10 == 0 ? (size_t)(100000 + 997 * i) : (size_t)((i * 13) % 300);
    return s;
}

static int case_same_tag(cf_world_t *w)
{
    enum { N = 200 };
    size_t *s = mixed_sizes(w, N);
    if (!s) return cf_fail(w, "out of memory");
    xopt_t x = { CF_ORDER_FORWARD, 1, -1, 0 };
    if (cf_world(w)) return -1;
    return exchange(w, s, N, &x);
}

static int case_reverse(cf_world_t *w)
{
    enum { N = 64 };
    size_t *s = mixed_sizes(w, N);
    if (!s) return cf_fail(w, "out of memory");
    xopt_t x = { CF_ORDER_REVERSE, 0, -1, 0 };
    if (cf_world(w)) return -1;
    return exchange(w, s, N, &x);
}

static int case_random(cf_world_t *w)
{
    enum { N = 64 };
    size_t *s = mixed_sizes(w, N);
    if (!s) return cf_fail(w, "out of memory");
    xopt_t x = { CF_ORDER_RANDOM, 0, -1, 0 };
    if (cf_world(w)) return -1;
    return exchange(w, s, N, &x);
}

/* Sleeping in poll(ep_fd) is enough: no busy polling needed for anything to move. */
static int case_ep_fd(cf_world_t *w)
{
    if (cf_world(w)) return -1;
    int efd = w->ops->ep_fd ? w->ops->ep_fd(w->ep) : -1;
    if (efd < 0) {
        snprintf(w->note, sizeof w->note, "skipped: the plugin offers no ep_fd");
        return 0;
    }
    static const size_t s[] = { MiB, 5, 64 * KiB + 3, 0, 3 * MiB };
    enum { NS = sizeof s / sizeof s[0] };
    int npeer = w->np - 1, nreq = 2 * NS * npeer, k = 0;
    cf_req_t *q = cf_alloc(w, (size_t)nreq * sizeof *q);
    unsigned char **buf = cf_alloc(w, (size_t)nreq * sizeof *buf);
    if (!q || !buf) return cf_fail(w, "out of memory");
    for (int p = 0; p < w->np; p++) {
        if (p == w->rank) continue;
        for (int i = 0; i < NS; i++, k += 2) {
            buf[k] = cf_alloc(w, s[i]);
            buf[k + 1] = cf_alloc(w, s[i]);
            if (!buf[k] || !buf[k + 1]) return cf_fail(w, "out of memory");
            cf_fill(buf[k], s[i], cf_seed(w, w->rank, p, i));
            cf_isend(w, p, buf[k], s[i], tag_of(i, 0), NULL, &q[k]);
            cf_irecv(w, p, buf[k + 1], s[i], tag_of(i, 0), NULL, &q[k + 1]);
        }
    }
    for (;;) {
        int left = 0;
        for (k = 0; k < nreq; k++) {
            if (q[k].done) continue;
            size_t nb = 0;
            cohort_status_t st = w->ops->test(q[k].r, &nb);
            if (st == COHORT_IN_PROGRESS) {
                left++;
                continue;
            }
            q[k].done = 1;
            q[k].st = st;
            q[k].nbytes = nb;
            if (st != COHORT_SUCCESS)
                return cf_fail(w, "request %d failed: %s: %s", k, cohort_strerror(st),
                               cohort_last_error());
        }
        if (!left) break;
        if (w->aborted) return cf_fail(w, "another rank failed this case");
        double rem = w->deadline - cf_now();
        if (rem <= 0)
            return cf_fail(w, "timed out with %d request(s) pending", left);
        struct pollfd p[2] = { { efd, POLLIN, 0 }, { w->pfd, POLLIN, 0 } };
        int r = poll(p, 2, (int)(rem * 1000) + 1);
        if (r == 0)
            return cf_fail(w, "%d request(s) pending but ep_fd never became readable in %.0f s: "
                           "the core would sleep forever", left, w->o->timeout);
        if (p[1].revents) cf_pump(w, 0);
        else if (p[0].revents) w->ops->progress(w->ep);
    }
    k = 0;
    for (int p = 0; p < w->np; p++) {
        if (p == w->rank) continue;
        for (int i = 0; i < NS; i++, k += 2) {
            if (q[k + 1].nbytes != s[i] || cf_check(buf[k + 1], s[i],
                                                     cf_seed(w, p, w->rank, i)) != s[i])
                return cf_fail(w, "message %d from rank %d arrived wrong", i, p);
        }
    }
    return 0;
}

/* ---- mismatches --------------------------------------------------------------------------- */

/* Every rank sends (slen, stag) to every peer, which posted (rlen, rtag): the receive must
 * complete with COHORT_ERR_MISMATCH and a message; the send must complete, either way. */
static int mismatch(cf_world_t *w, size_t slen, uint64_t stag, size_t rlen, uint64_t rtag)
{
    if (cf_world(w)) return -1;
    int nreq = 2 * (w->np - 1), k = 0;
    cf_req_t *q = cf_alloc(w, (size_t)nreq * sizeof *q);
    if (!q) return cf_fail(w, "out of memory");
    for (int p = 0; p < w->np; p++) {
        if (p == w->rank) continue;
        unsigned char *rb = cf_alloc(w, rlen), *sb = cf_alloc(w, slen);
        if (!rb || !sb) return cf_fail(w, "out of memory");
        cf_fill(sb, slen, 1);
        cf_irecv(w, p, rb, rlen, rtag, NULL, &q[k++]);
        cf_isend(w, p, sb, slen, stag, NULL, &q[k++]);
    }
    if (cf_wait(w, q, nreq, CF_ORDER_FORWARD)) return -1;
    for (k = 0; k < nreq; k++) {
        cf_req_t *r = &q[k];
        if (r->is_send) continue;   /* success or an error: only a hang would be wrong */
        if (r->st != COHORT_ERR_MISMATCH)
            return cf_fail(w, "receive from rank %d: expected COHORT_ERR_MISMATCH, got %s%s%s",
                           r->peer, cohort_strerror(r->st), r->err[0] ? ": " : "", r->err);
        if (!r->err[0])
            return cf_fail(w, "receive from rank %d failed with MISMATCH but left no message "
                           "(host->error was not called)", r->peer);
    }
    if (w->o->verbose) snprintf(w->note, sizeof w->note, "%.120s", q[0].err);
    /* A plugin may report the mismatch before it has drained the payload: closing right away
     * could reset the peer's connection before it saw its own mismatch. Finish together. */
    return cf_barrier(w);
}

static int case_tag_mismatch(cf_world_t *w) { return mismatch(w, 64, 1111, 64, 2222); }
static int case_too_long(cf_world_t *w) { return mismatch(w, 4096, 7, 100, 7); }
static int case_too_long_big(cf_world_t *w) { return mismatch(w, MiB, 8, 64 * KiB, 8); }

/* ---- closing ------------------------------------------------------------------------------ */

static int timed_conn_close(cf_world_t *w, int p)
{
    double t0 = cf_now();
    cohort_status_t st = w->ops->conn_close(w->conn[p]);
    w->conn[p] = NULL;
    double dt = cf_now() - t0;
    if (st < 0) return cf_fail(w, "conn_close(rank %d) failed: %s", p, cohort_strerror(st));
    if (dt > 2.0) return cf_fail(w, "conn_close(rank %d) blocked for %.1f s", p, dt);
    return 0;
}

static int timed_ep_close(cf_world_t *w)
{
    double t0 = cf_now();
    cohort_status_t st = w->ops->ep_close(w->ep);
    double dt = cf_now() - t0;
    w->ep = NULL;
    for (int p = 0; p < w->np; p++) w->conn[p] = NULL;   /* closed with the endpoint */
    if (st < 0) return cf_fail(w, "ep_close failed: %s", cohort_strerror(st));
    if (dt > 2.0) return cf_fail(w, "ep_close blocked for %.1f s", dt);
    return 0;
}

static int case_conn_close_idle(cf_world_t *w)
{
    if (cf_world(w) || ping(w)) return -1;
    for (int p = 0; p < w->np; p++)
        if (w->conn[p] && timed_conn_close(w, p)) return -1;
    if (cf_barrier(w)) return -1;               /* progress on an endpoint without conns */
    return timed_ep_close(w);
}

static int case_ep_close_idle(cf_world_t *w)
{
    if (cf_world(w) || ping(w)) return -1;
    if (cf_barrier(w)) return -1;
    return timed_ep_close(w);
}

/* Posts a lot on every conn and makes some progress; buffers are plain malloc so that they
 * can be freed right after the close (a plugin touching them later trips ASan). */
typedef struct inflight {
    unsigned char *big_s, *big_r, *small;
    cf_req_t q[2 + 64];
} inflight_t;

static int post_inflight(cf_world_t *w, inflight_t *f)
{
    for (int p = 0; p < w->np; p++) {
        if (p == w->rank) continue;
        inflight_t *x = &f[p];
        x->big_s = malloc(8 * MiB);
        x->big_r = malloc(8 * MiB);
        x->small = malloc(64 * 256);
        if (!x->big_s || !x->big_r || !x->small) return cf_fail(w, "out of memory");
        memset(x->big_s, 1, 8 * MiB);
        memset(x->small, 2, 64 * 256);
        cf_irecv(w, p, x->big_r, 8 * MiB, 1, NULL, &x->q[0]);
        cf_isend(w, p, x->big_s, 8 * MiB, 1, NULL, &x->q[1]);
        for (int i = 0; i < 32; i++) {
            cf_isend(w, p, x->small + 256 * i, 256, 100 + (uint64_t)i, NULL, &x->q[2 + i]);
            cf_irecv(w, p, x->small + 256 * (32 + i), 256, 100 + (uint64_t)i, NULL,
                     &x->q[34 + i]);
        }
    }
    for (int i = 0; i < 20; i++) cf_pump(w, 1);   /* some bytes move, most are in flight */
    return 0;
}

static void free_inflight(cf_world_t *w, inflight_t *f)
{
    for (int p = 0; p < w->np; p++) {
        free(f[p].big_s);
        free(f[p].big_r);
        free(f[p].small);
        f[p].big_s = f[p].big_r = f[p].small = NULL;
    }
}

static int case_conn_close_busy(cf_world_t *w)
{
    inflight_t *f = cf_alloc(w, (size_t)w->np * sizeof *f);
    if (!f) return cf_fail(w, "out of memory");
    if (cf_world(w)) return -1;
    int rc = post_inflight(w, f);
    for (int p = 0; p < w->np && !rc; p++)
        if (w->conn[p]) rc = timed_conn_close(w, p);
    if (rc) {
        cf_close_world(w);
        free_inflight(w, f);
        return -1;
    }
    free_inflight(w, f);
    if (cf_barrier(w)) return -1;                /* more progress: no touching freed buffers */
    return timed_ep_close(w);
}

static int case_ep_close_busy(cf_world_t *w)
{
    inflight_t *f = cf_alloc(w, (size_t)w->np * sizeof *f);
    if (!f) return cf_fail(w, "out of memory");
    if (cf_world(w)) return -1;
    int rc = post_inflight(w, f);
    if (!rc) rc = timed_ep_close(w);
    else cf_close_world(w);
    free_inflight(w, f);
    if (rc) return -1;
    return cf_barrier(w);
}

/* Lower ranks close their conns to higher ranks, which have a receive pending on them. */
static int case_peer_conn_close(cf_world_t *w)
{
    if (cf_world(w)) return -1;
    int n = w->rank, k = 0;
    cf_req_t *q = cf_alloc(w, (size_t)(n ? n : 1) * sizeof *q);
    unsigned char *b = cf_alloc(w, 64 * (size_t)(n ? n : 1));
    if (!q || !b) return cf_fail(w, "out of memory");
    for (int p = 0; p < w->rank; p++, k++) cf_irecv(w, p, b + 64 * (size_t)k, 64, 9, NULL, &q[k]);
    if (cf_barrier(w)) return -1;
    for (int p = w->rank + 1; p < w->np; p++)
        if (timed_conn_close(w, p)) return -1;
    if (cf_wait(w, q, n, CF_ORDER_FORWARD)) return -1;
    for (k = 0; k < n; k++)
        if (q[k].st == COHORT_SUCCESS)
            return cf_fail(w, "a receive from rank %d completed successfully although that "
                           "rank closed the connection without sending", q[k].peer);
    /* Later requests on the dead conn fail too (at posting or at test). */
    cf_req_t later[2];
    unsigned char *big = cf_alloc(w, 8 * MiB);
    if (!big) return cf_fail(w, "out of memory");
    for (int p = 0; p < w->rank; p++) {
        cf_isend(w, p, big, 8 * MiB, 10, NULL, &later[0]);
        cf_irecv(w, p, b, 64, 11, NULL, &later[1]);
        if (cf_wait(w, later, 2, CF_ORDER_FORWARD)) return -1;
        for (int i = 0; i < 2; i++)
            if (later[i].st == COHORT_SUCCESS)
                return cf_fail(w, "a %s posted after rank %d closed the connection succeeded",
                               i ? "receive" : "send", p);
    }
    return cf_barrier(w);
}

/* The last rank exits (no closing, as in a crash); the others must see PEER_LOST, not hang. */
static int case_peer_exit(cf_world_t *w)
{
    int victim = w->np - 1;
    if (cf_world(w)) return -1;
    cf_req_t q0;
    unsigned char *b = cf_alloc(w, 64), *big = cf_alloc(w, 8 * MiB);
    if (!b || !big) return cf_fail(w, "out of memory");
    if (w->rank != victim) cf_irecv(w, victim, b, 64, 5, NULL, &q0);
    if (cf_barrier(w)) return -1;
    if (w->rank == victim) {
        w->exit_after_report = 1;
        return 0;
    }
    if (cf_wait(w, &q0, 1, CF_ORDER_FORWARD)) return -1;
    if (q0.st != COHORT_ERR_PEER_LOST)
        return cf_fail(w, "pending receive from the exited rank %d: expected "
                       "COHORT_ERR_PEER_LOST, got %s%s%s", victim, cohort_strerror(q0.st),
                       q0.err[0] ? ": " : "", q0.err);
    if (!q0.err[0]) return cf_fail(w, "PEER_LOST without a message (host->error not called)");
    cf_req_t later[2];
    cf_isend(w, victim, big, 8 * MiB, 6, NULL, &later[0]);
    cf_irecv(w, victim, b, 64, 7, NULL, &later[1]);
    if (cf_wait(w, later, 2, CF_ORDER_FORWARD)) return -1;
    for (int i = 0; i < 2; i++)
        if (later[i].st != COHORT_ERR_PEER_LOST)
            return cf_fail(w, "a %s posted after rank %d exited: expected COHORT_ERR_PEER_LOST, "
                           "got %s", i ? "receive" : "send", victim,
                           cohort_strerror(later[i].st));
    /* Connections among the survivors are unaffected. */
    int npeer = 0;
    cf_req_t q[2 * CF_MAX_NP];
    unsigned char *sb = cf_alloc(w, 1000), *rb = cf_alloc(w, (size_t)w->np * 1000);
    if (!sb || !rb) return cf_fail(w, "out of memory");
    cf_fill(sb, 1000, cf_seed(w, w->rank, 0, 0));
    for (int p = 0; p < victim; p++) {
        if (p == w->rank) continue;
        cf_irecv(w, p, rb + 1000 * (size_t)p, 1000, 8, NULL, &q[npeer++]);
        cf_isend(w, p, sb, 1000, 8, NULL, &q[npeer++]);
    }
    if (cf_wait(w, q, npeer, CF_ORDER_FORWARD)) return -1;
    for (int i = 0; i < npeer; i++) {
        if (q[i].st != COHORT_SUCCESS)
            return cf_fail(w, "traffic with surviving rank %d failed: %s: %s", q[i].peer,
                           cohort_strerror(q[i].st), q[i].err);
        if (!q[i].is_send &&
            cf_check(rb + 1000 * (size_t)q[i].peer, 1000, cf_seed(w, q[i].peer, 0, 0)) != 1000)
            return cf_fail(w, "wrong data from surviving rank %d", q[i].peer);
    }
    return 0;
}

/* ---- memory registration ------------------------------------------------------------------ */

static int case_mem_reg(cf_world_t *w)
{
    if (!w->ops->mem_reg) {
        snprintf(w->note, sizeof w->note, "skipped: the plugin offers no memory registration");
        return 0;
    }
    if (cf_world(w)) return -1;
    size_t len = MiB + 7;
    int npeer = w->np - 1, k = 0;
    cf_req_t *q = cf_alloc(w, 2 * (size_t)npeer * sizeof *q);
    unsigned char *sb = cf_alloc(w, len), *rb = cf_alloc(w, len * (size_t)w->np);
    if (!q || !sb || !rb) return cf_fail(w, "out of memory");
    cf_fill(sb, len, cf_seed(w, w->rank, 0, 0));
    cohort_tp_mr_t smr = NULL, rmr = NULL;
    cohort_status_t st = w->ops->mem_reg(w->ep, sb, len, &smr);
    if (st == COHORT_SUCCESS) st = w->ops->mem_reg(w->ep, rb, len * (size_t)w->np, &rmr);
    if (st != COHORT_SUCCESS)
        return cf_fail(w, "mem_reg failed: %s: %s", cohort_strerror(st), cohort_last_error());
    for (int p = 0; p < w->np; p++) {
        if (p == w->rank) continue;
        cf_irecv(w, p, rb + len * (size_t)p, len, 3, rmr, &q[k++]);
        cf_isend(w, p, sb, len, 3, smr, &q[k++]);
    }
    int rc = cf_wait(w, q, k, CF_ORDER_FORWARD);
    for (int i = 0; i < k && !rc; i++) {
        if (q[i].st != COHORT_SUCCESS)
            rc = cf_fail(w, "transfer with registered memory failed: %s: %s",
                         cohort_strerror(q[i].st), q[i].err);
        else if (!q[i].is_send && cf_check(rb + len * (size_t)q[i].peer, len,
                                           cf_seed(w, q[i].peer, 0, 0)) != len)
            rc = cf_fail(w, "wrong data from rank %d with registered memory", q[i].peer);
    }
    if (rc == 0) {   /* deregister only once nothing uses the buffers */
        st = w->ops->mem_dereg(w->ep, smr);
        if (st == COHORT_SUCCESS) st = w->ops->mem_dereg(w->ep, rmr);
        if (st != COHORT_SUCCESS)
            return cf_fail(w, "mem_dereg failed: %s", cohort_strerror(st));
    }
    return rc;
}

/* ---- the list ----------------------------------------------------------------------------- */

const cf_case_t cf_cases[] = {
    { "endpoint open and address exchange", case_addresses },
    { "attributes (get_attr honours the struct size)", case_attributes },
    { "connect/accept, acceptor first", case_acceptor_first },
    { "connect/accept, connector first", case_connector_first },
    { "send/recv 0 B", case_0b },
    { "send/recv 1 B", case_1b },
    { "send/recv odd sizes (3 B .. 1000003 B)", case_odd },
    { "send/recv 64 KiB - 1", case_64k_minus },
    { "send/recv 64 KiB", case_64k },
    { "send/recv 64 KiB + 1", case_64k_plus },
    { "send/recv 1 MiB", case_1m },
    { "send/recv 8 MiB", case_8m },
    { "receive larger than the message reports its size", case_short },
    { "1000 small messages in flight per direction", case_many },
    { "both directions at once, large and small", case_both_ways },
    { "in-order matching with one tag", case_same_tag },
    { "completions tested in reverse order", case_reverse },
    { "completions tested in random order", case_random },
    { "waiting on ep_fd alone (no busy polling)", case_ep_fd },
    { "memory registration", case_mem_reg },
    { "tag mismatch gives COHORT_ERR_MISMATCH", case_tag_mismatch },
    { "too-long message gives COHORT_ERR_MISMATCH", case_too_long },
    { "too-long large message gives COHORT_ERR_MISMATCH", case_too_long_big },
    { "conn_close while idle", case_conn_close_idle },
    { "ep_close while idle with open connections", case_ep_close_idle },
    { "conn_close with operations in flight", case_conn_close_busy },
    { "ep_close with operations in flight", case_ep_close_busy },
    { "a peer's conn_close fails pending receives", case_peer_conn_close },
    { "peer process exits: COHORT_ERR_PEER_LOST, not a hang", case_peer_exit },
};
const int cf_ncases = (int)(sizeof cf_cases / sizeof cf_cases[0]);
