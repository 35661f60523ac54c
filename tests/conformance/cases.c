/* SPDX-License-Identifier: BSD-3-Clause */
/* cohort-conformance: the cases. Each runs on every rank with a fresh endpoint (its own comm
 * id), fails with a message through cf_fail, and leaves closing to the harness unless closing
 * is what it tests. The peer-exit case must stay last: its victim rank leaves the run.
 * The collective-table cases (ABI 1.1) skip with a note when the plugin has no table. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include "tests/conformance/conformance.h"
#include "core/coll/coll.h"
#include "core/plugin_loader.h"

#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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
    /* As in the core, every endpoint stays open until all ranks are done with can_reach: a
     * network transport may probe its peers' endpoints from there. */
    if (cf_barrier(w)) return -1;
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

/* ---- a rank holding another secret ------------------------------------------------------- */

/* Rank `s` keys the host table's auth() with another secret than the job's (cf_set_secret) from
 * before its ep_open until its endpoint is closed; every other rank is honest. The contract:
 * no connection between the stranger and an honest rank ever becomes usable, from either side.
 * A plugin may refuse at any step: can_reach may say no (its address blob carries something
 * keyed by the secret), connect may fail at once with the stranger's address anyway (which
 * the core would not pass, but a caller may), the connector's conn_test may end in an error
 * (the acceptor failed authentication, or refused the hello and closed), or the connection may
 * stay in progress until this case stops watching it; the acceptor's conn_test never succeeds
 * for the stranger (it refuses the hello, with a log line, and keeps waiting or fails). A
 * conn_test of COHORT_SUCCESS on either end of a stranger pair fails the case: a plugin whose
 * connector takes whatever listens at the address without authenticating the acceptor fails it
 * too. Connections between honest ranks (np >= 3) must still be made. Nothing may crash or hang,
 * and the endpoints close cleanly (the harness then checks for file descriptors left open).
 * Today tcp and ucx carry a hash keyed by the secret in their address blobs: can_reach says 0
 * and connect fails at once (COHORT_ERR_INVALID_ARG, "belongs to another job"), so their
 * handshake MACs are not reached here (tcp_handshake.c forges tcp's). shm's address holds no
 * secret: can_reach says 1, the connector's conn_test fails (COHORT_ERR_TRANSPORT) on the
 * acceptor's segment header, whose HMAC does not verify, and the acceptor, which sees no hello,
 * stays in progress. examples/plugin fails both cases: its acceptor refuses the hello, but its
 * connector is ready as soon as its hello is sent, without a word from the acceptor. */

typedef struct sconn {
    int role;          /* 1: this rank connects, 0: it accepts */
    int stranger;      /* a pair with the stranger */
    int done;          /* refused (stranger pair) or usable (honest pair) */
} sconn_t;

/* A short description of the first refusal this rank saw as a connector, for the case's note. */
static void stranger_note(cf_world_t *w, const char *what, cohort_status_t st, const char *msg)
{
    if (w->note[0]) return;
    snprintf(w->note, sizeof w->note, "%s: %s%s%.200s", what, cohort_strerror(st),
             msg && *msg ? ": " : "", msg ? msg : "");
}

static int stranger_body(cf_world_t *w, int s)
{
    int me = w->rank == s;
    sconn_t sc[CF_MAX_NP];
    memset(sc, 0, sizeof sc);
    if (cf_ep_open(w)) return -1;
    /* can_reach as the core asks it; its answer for a stranger pair may be either, and the
     * connect below is tried regardless (a refusal before dialling is the answer 0). */
    int reach[CF_MAX_NP] = { 0 };
    for (int p = 0; p < w->np; p++)
        if (p != w->rank) reach[p] = w->ops->can_reach(w->ep, p, w->addr[p], w->addrlen[p]);
    if (cf_barrier(w)) return -1;
    for (int p = 0; p < w->np; p++) {
        if (p == w->rank) continue;
        sconn_t *c = &sc[p];
        c->role = p < w->rank;
        c->stranger = me || p == s;
        cohort_status_t st = c->role
            ? w->ops->connect(w->ep, p, w->addr[p], w->addrlen[p], &w->conn[p])
            : w->ops->accept(w->ep, p, &w->conn[p]);
        if (st == COHORT_SUCCESS || st == COHORT_IN_PROGRESS) {
            if (!w->conn[p])
                return cf_fail(w, "%s for rank %d returned %s but no conn",
                               c->role ? "connect" : "accept", p, cohort_strerror(st));
            continue;
        }
        w->conn[p] = NULL;
        if (!c->stranger)
            return cf_fail(w, "%s rank %d (both hold the job secret) failed: %s: %s",
                           c->role ? "connect to" : "accept of", p, cohort_strerror(st),
                           cohort_last_error());
        c->done = 1;   /* refused at once */
        if (c->role) {
            char what[64];
            snprintf(what, sizeof what, "can_reach %d, then connect", reach[p]);
            stranger_note(w, what, st, cohort_last_error());
        }
    }
    /* Watch every connection until the honest ones are usable and every connector of a
     * stranger pair has its verdict, or until this window closes (what is still in progress
     * then counts as never connected). The window leaves a quarter of the case's time for the
     * rest. */
    double window = w->deadline - w->o->timeout / 4;
    for (;;) {
        int pending = 0, honest = 0;
        for (int p = 0; p < w->np; p++) {
            sconn_t *c = &sc[p];
            if (p == w->rank || c->done || !w->conn[p]) continue;
            cohort_status_t st = w->ops->conn_test(w->conn[p]);
            if (st == COHORT_SUCCESS && c->stranger)
                return cf_fail(w, "rank %d (%s, %s) got a usable connection %s rank %d (%s): "
                               "conn_test returned COHORT_SUCCESS although the two hold different "
                               "secrets (can_reach said %d); %s", w->rank,
                               me ? "holding another secret" : "holding the job secret",
                               c->role ? "connecting" : "accepting", c->role ? "to" : "from", p,
                               me ? "holding the job secret" : "holding another secret",
                               reach[p], c->role ? "the connector must authenticate the acceptor "
                               "(an acknowledgement MACed with host->auth over its challenge)"
                               : "the acceptor must refuse a hello whose HMAC does not verify");
            if (st == COHORT_SUCCESS) {
                c->done = 1;
            } else if (st == COHORT_IN_PROGRESS) {
                if (c->role || !c->stranger) pending++;
                if (!c->stranger) honest++;
            } else if (!c->stranger) {
                return cf_fail(w, "the connection with rank %d (both hold the job secret) "
                               "failed: %s: %s", p, cohort_strerror(st), cohort_last_error());
            } else {
                c->done = 1;   /* refused: what the contract asks */
                if (c->role) {
                    char what[64];
                    snprintf(what, sizeof what, "can_reach %d, then the connector's conn_test",
                             reach[p]);
                    stranger_note(w, what, st, cohort_last_error());
                }
            }
        }
        if (!pending) break;
        if (w->aborted) return cf_fail(w, "another rank failed this case");
        if (cf_now() > window) {
            if (honest)
                return cf_fail(w, "timed out: %d connection(s) between ranks that hold the job "
                               "secret not ready", honest);
            if (!w->note[0])
                snprintf(w->note, sizeof w->note, "the connection stayed in progress (never "
                         "connected) for %.0f s", w->o->timeout * 3 / 4);
            break;
        }
        cf_pump(w, 10);
    }
    /* Every connector has its verdict: the acceptors have had the hellos since. Watch them a
     * little longer (an acceptor may act on a hello only now), then close together. */
    if (cf_barrier(w)) return -1;
    double until = cf_now() + 1.0;
    while (cf_now() < until && !w->aborted) {
        for (int p = 0; p < w->np; p++) {
            sconn_t *c = &sc[p];
            if (p == w->rank || c->done || !w->conn[p] || !c->stranger) continue;
            cohort_status_t st = w->ops->conn_test(w->conn[p]);
            if (st == COHORT_SUCCESS)
                return cf_fail(w, "rank %d (%s) got a usable connection %s rank %d (%s) after "
                               "that side's %s had given up: conn_test returned COHORT_SUCCESS",
                               w->rank, me ? "holding another secret" : "holding the job secret",
                               c->role ? "to" : "from", p,
                               me ? "holding the job secret" : "holding another secret",
                               c->role ? "acceptor" : "connector");
            if (st != COHORT_IN_PROGRESS) c->done = 1;
        }
        cf_pump(w, 10);
    }
    return cf_barrier(w);
}

/* The stranger's endpoint is closed before its secret is the job's again (a plugin may MAC a
 * farewell at close); on failure too, so that the next case runs with one secret. */
static int stranger_case(cf_world_t *w, int s)
{
    if (w->rank == s) cf_set_secret(1);
    int rc = stranger_body(w, s);
    cf_close_world(w);
    if (w->rank == s) cf_set_secret(0);
    return (rc || w->err[0]) ? -1 : 0;
}

/* The last rank holds another secret: it connects to every other rank. */
static int case_stranger_connects(cf_world_t *w) { return stranger_case(w, w->np - 1); }

/* Rank 0 holds another secret: every other rank connects to it. */
static int case_stranger_accepts(cf_world_t *w) { return stranger_case(w, 0); }

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

/* Buffers unmapped and mapped again at the same address between messages, as a framework's
 * allocator does: a plugin that keeps a registration or mapping by address past the memory
 * behind it would move the old pages. Round k moves MiB + 3 bytes both ways with every peer
 * through buffers that are, by turns, munmap'd and mmap'd again at the last address,
 * madvise(MADV_DONTNEED)'d (same address, fresh pages), or malloc'd and freed; each round's
 * contents differ. Fails unless buffers did land on the addresses of the round before. */
typedef struct rbuf {
    unsigned char *p;
    uintptr_t last;   /* where the last buffer of this kind was */
    void *map;        /* way 1: the mapping kept between turns */
} rbuf_t;

static size_t pages_of(size_t n)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    return (n + pg - 1) / pg * pg;
}

/* Way 0: mmap at the last address; 1: the kept mapping, madvise'd; 2: malloc. NULL: no memory. */
static unsigned char *rbuf_get(rbuf_t *b, int way, size_t len, int *same)
{
    size_t m = pages_of(len);
    void *p;
    if (way == 2) {
        p = malloc(len);
    } else if (way == 1 && b->map) {
        p = madvise(b->map, m, MADV_DONTNEED) ? NULL : b->map;
    } else {
        p = mmap(way == 0 ? (void *)b->last : NULL, m, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) p = NULL;
        else if (way == 1) b->map = p;
    }
    if (p && b->last == (uintptr_t)p) ++*same;
    if (p) b->last = (uintptr_t)p;
    return b->p = p;
}

static void rbuf_put(rbuf_t *b, int way, size_t len)
{
    if (way == 2) free(b->p);
    else if (way == 0) munmap(b->p, pages_of(len));
    b->p = NULL;   /* way 1: the mapping stays for the next turn */
}

static int case_remap(cf_world_t *w)
{
    if (cf_world(w)) return -1;
    const size_t len = MiB + 3;
    const int rounds = 9;
    int npeer = w->np - 1, same = 0;
    size_t nb = (size_t)w->np * 3;   /* [peer * 3 + way] */
    cf_req_t *q = cf_alloc(w, (size_t)(2 * npeer) * sizeof *q);
    rbuf_t *sb = cf_alloc(w, nb * sizeof *sb), *rb = cf_alloc(w, nb * sizeof *rb);
    if (!q || !sb || !rb) return cf_fail(w, "out of memory");
    memset(sb, 0, nb * sizeof *sb);
    memset(rb, 0, nb * sizeof *rb);
    static const char *how[] = { "munmap'd and mapped again", "madvise(MADV_DONTNEED)'d",
                                 "malloc'd and freed" };
    for (int k = 0; k < rounds; k++) {
        int way = k % 3, n = 0;
        for (int p = 0; p < w->np; p++) {
            if (p == w->rank) continue;
            rbuf_t *s = &sb[p * 3 + way], *r = &rb[p * 3 + way];
            if (!rbuf_get(s, way, len, &same) || !rbuf_get(r, way, len, &same))
                return cf_fail(w, "round %d: no memory for the buffers", k);
            cf_fill(s->p, len, cf_seed(w, w->rank, p, 1000 + k));
            memset(r->p, 0xee, len);
            cf_irecv(w, p, r->p, len, tag_of(k, 0), NULL, &q[n++]);
        }
        for (int p = 0; p < w->np; p++)
            if (p != w->rank) cf_isend(w, p, sb[p * 3 + way].p, len, tag_of(k, 0), NULL, &q[n++]);
        if (cf_wait(w, q, n, CF_ORDER_FORWARD)) return -1;
        for (int i = 0; i < n; i++)
            if (q[i].st != COHORT_SUCCESS)
                return cf_fail(w, "round %d (buffers %s): %s rank %d failed: %s: %s", k, how[way],
                               q[i].is_send ? "send to" : "receive from", q[i].peer,
                               cohort_strerror(q[i].st), q[i].err);
        for (int p = 0; p < w->np; p++) {
            if (p == w->rank) continue;
            rbuf_t *s = &sb[p * 3 + way], *r = &rb[p * 3 + way];
            size_t bad = cf_check(r->p, len, cf_seed(w, p, w->rank, 1000 + k));
            if (bad != len)
                return cf_fail(w, "round %d (buffers %s): the message from rank %d is wrong "
                               "from byte %zu on (%s)", k, how[way], p, bad,
                               r->p[bad] == 0xee ? "never written: it went to other pages"
                                                 : "data of another round or peer");
            rbuf_put(s, way, len);
            rbuf_put(r, way, len);
        }
    }
    for (size_t i = 0; i < nb; i++) {
        if (sb[i].map) munmap(sb[i].map, pages_of(len));
        if (rb[i].map) munmap(rb[i].map, pages_of(len));
    }
    if (same == 0)
        return cf_fail(w, "no buffer landed where the last one of its kind had been: the case "
                       "saw nothing");
    return 0;
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

/* ---- the optional collective table (ABI 1.1) ---------------------------------------------- */

/* The table if the core would use it (ABI minor >= 1 and coll set); otherwise NULL with
 * w->note saying why the case is skipped. */
static const cohort_transport_coll_v1_t *coll_offered(cf_world_t *w)
{
    const cohort_transport_coll_v1_t *ct = w->ops->coll;
    if (!ct) {
        snprintf(w->note, sizeof w->note, "skipped: the plugin offers no collective table "
                 "(coll is NULL)");
        return NULL;
    }
    if ((w->ops->abi_version & 0xffffu) < 1) {
        snprintf(w->note, sizeof w->note, "skipped: ABI %u.%u plugin: the core ignores its coll "
                 "pointer", w->ops->abi_version >> 16, w->ops->abi_version & 0xffffu);
        return NULL;
    }
    return ct;
}

/* 0 when the table has the ABI 1.1 layout: its size covers cancel, every function is set. */
static int coll_layout(cf_world_t *w, const cohort_transport_coll_v1_t *ct)
{
    size_t need = offsetof(cohort_transport_coll_v1_t, cancel) + sizeof ct->cancel;
    if (ct->size < need)
        return cf_fail(w, "coll->size is %zu, smaller than the ABI 1.1 table (%zu bytes, up to "
                       "cancel)", ct->size, need);
    if (!ct->colls || !ct->start || !ct->test || !ct->cancel)
        return cf_fail(w, "the collective table leaves %s NULL (all four are mandatory in a "
                       "table)", !ct->colls ? "colls" : !ct->start ? "start" : !ct->test
                       ? "test" : "cancel");
    return 0;
}

static const char *coll_kind_name(int k)
{
    static const char *n[] = { "allreduce", "broadcast", "reduce", "allgather", "reduce_scatter",
                               "alltoall", "barrier" };
    return k >= 0 && k <= COHORT_TP_BARRIER ? n[k] : "?";
}

#define COLL_ALL_KINDS ((1u << (COHORT_TP_BARRIER + 1)) - 1)

/* A fully connected world, then colls() on every rank: *mask is the mask every rank reported
 * (they must agree). Returns 1 (with a note) when the case is skipped, -1 failed, 0 ready. */
static int coll_world(cf_world_t *w, const cohort_transport_coll_v1_t **ctp, unsigned *mask)
{
    const cohort_transport_coll_v1_t *ct = coll_offered(w);
    if (!ct) return 1;
    if (coll_layout(w, ct)) return -1;
    if (cf_world(w)) return -1;
    uint32_t m = ct->colls(w->ep);
    if (cf_gather(w, &m, sizeof m)) return -1;
    for (int r = 0; r < w->np; r++) {
        uint32_t o;
        if (!w->gpresent[r] || w->glen[r] != sizeof o)
            return cf_fail(w, "rank %d sent no mask", r);
        memcpy(&o, w->gdata[r], sizeof o);
        if (o != m)
            return cf_fail(w, "colls() returned mask 0x%x on rank %d but 0x%x on rank %d: it "
                           "must be the same on every rank of an endpoint", (unsigned)m, w->rank,
                           (unsigned)o, r);
    }
    if (m & ~COLL_ALL_KINDS)
        return cf_fail(w, "colls() returned mask 0x%x, which sets bits beyond the 7 collectives "
                       "(0x%x)", (unsigned)m, COLL_ALL_KINDS);
    *ctp = ct;
    *mask = m;
    return 0;
}

/* The tag the core would give this collective (cohort_coll_tag). */
static uint64_t coll_tag(uint64_t seq, const cohort_tp_coll_args_t *a)
{
    cohort_coll_args_t c = { .coll = (cohort_coll_t)a->coll, .sendbuf = a->sendbuf,
                             .recvbuf = a->recvbuf, .count = a->count, .dtype = a->dtype,
                             .op = a->op, .root = a->root };
    return cohort_coll_tag(seq, &c);
}

static cohort_tp_coll_args_t coll_args(int kind, const void *sb, void *rb, size_t count,
                                       cohort_dtype_t dtype, cohort_op_t op, int root)
{
    cohort_tp_coll_args_t a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.coll = kind;
    a.sendbuf = sb;
    a.recvbuf = rb;
    a.count = count;
    a.dtype = dtype;
    a.op = op;
    a.root = root;
    return a;
}

/* What one collective ended with. */
typedef struct coll_res {
    cohort_status_t st;      /* the plugin's final status */
    char err[CF_MSG - 100];  /* cohort_last_error() when it failed */
    long tests;              /* test() calls that said IN_PROGRESS */
} coll_res_t;

/* Runs one collective: start, then test until it is not IN_PROGRESS, sleeping on ep_fd (via
 * cf_pump) after 64 fruitless tests. Returns 0 with the plugin's outcome in *res, or -1 after
 * cf_fail (a broken contract, a stall of the case timeout, another rank failed), having
 * cancelled the request. `what` names the collective in messages. */
static int coll_run(cf_world_t *w, const cohort_transport_coll_v1_t *ct,
                    const cohort_tp_coll_args_t *args, const char *what, coll_res_t *res)
{
    memset(res, 0, sizeof *res);
    cohort_tp_coll_args_t a = *args;
    cohort_tp_req_t req = (cohort_tp_req_t)&a;   /* must be overwritten */
    cohort_status_t st = ct->start(w->ep, &a, &req);
    memset(&a, 0xa5, sizeof a);                  /* args are the plugin's only during start */
    if (st < 0) {
        res->st = st;
        snprintf(res->err, sizeof res->err, "%s", cohort_last_error());
        return 0;
    }
    if (st != COHORT_SUCCESS)
        return cf_fail(w, "%s: start returned %d (%s); it must return COHORT_SUCCESS (with or "
                       "without a request) or an error", what, (int)st, cohort_strerror(st));
    if (req == (cohort_tp_req_t)&a)
        return cf_fail(w, "%s: start returned COHORT_SUCCESS without setting *req (NULL when "
                       "done at once)", what);
    double stall = cf_now() + w->o->timeout;
    int last_on = -1;
    unsigned idle = 0;
    while (req) {
        int on = -7, moved = -7;
        st = ct->test(req, &on, &moved);
        if (st == COHORT_SUCCESS) break;
        if (st != COHORT_IN_PROGRESS) {
            if (st > 0) {
                ct->cancel(req);
                return cf_fail(w, "%s: test returned %d, neither SUCCESS, IN_PROGRESS nor an "
                               "error", what, (int)st);
            }
            res->st = st;
            snprintf(res->err, sizeof res->err, "%s", cohort_last_error());
            return 0;
        }
        res->tests++;
        if (on != -1 && (on < 0 || on >= w->np || on == w->rank)) {
            ct->cancel(req);
            return cf_fail(w, "%s: test set *waiting_on to %d: it must be -1 or another rank "
                           "(0..%d, not %d)", what, on, w->np - 1, w->rank);
        }
        if (moved != 0 && moved != 1) {
            ct->cancel(req);
            return cf_fail(w, "%s: test set *moved to %d (must be 0 or 1)", what, moved);
        }
        last_on = on;
        if (moved) {
            stall = cf_now() + w->o->timeout;
            idle = 0;
            continue;
        }
        if (++idle % 64) continue;
        if (w->aborted || w->progress_err) {
            ct->cancel(req);
            return cf_fail(w, "%s: another rank failed this case (or progress failed) while "
                           "this one waited on rank %d", what, last_on);
        }
        if (cf_now() > stall) {
            ct->cancel(req);
            return cf_fail(w, "%s: no progress for %.0f s (test said moved = 0 every time), "
                           "waiting on rank %d after %ld tests", what, w->o->timeout, last_on,
                           res->tests);
        }
        cf_pump(w, 10);
    }
    res->st = COHORT_SUCCESS;
    return 0;
}

/* Runs one collective that must succeed. */
static int coll_ok(cf_world_t *w, const cohort_transport_coll_v1_t *ct,
                   const cohort_tp_coll_args_t *a, const char *what)
{
    coll_res_t res;
    if (coll_run(w, ct, a, what, &res)) return -1;
    if (res.st != COHORT_SUCCESS)
        return cf_fail(w, "%s failed: %s: %s", what, cohort_strerror(res.st), res.err);
    return 0;
}

/* Buffers with canaries on both sides, malloc'd: freed at once after a collective that
 * completed, kept until the world is closed after one that did not (the plugin may still
 * touch them until ep_close). */
typedef struct cbuf {
    unsigned char *base, *p;
    size_t len;
} cbuf_t;

static int cbuf_new(cf_world_t *w, cbuf_t *b, size_t len)
{
    b->len = len;
    b->base = malloc(len + 2 * CANARY);
    if (!b->base) {
        b->p = NULL;
        return cf_fail(w, "out of memory (%zu bytes)", len);
    }
    memset(b->base, 0xee, CANARY);
    memset(b->base + CANARY + len, 0xee, CANARY);
    b->p = b->base + CANARY;
    return 0;
}

/* 0 if neither canary was touched. */
static int cbuf_canaries(cf_world_t *w, const cbuf_t *b, const char *what, const char *name)
{
    if (!b->base) return 0;
    for (size_t i = 0; i < CANARY; i++) {
        if (b->base[i] != 0xee)
            return cf_fail(w, "%s wrote %zu byte(s) before the start of %s", what, CANARY - i,
                           name);
        if (b->p[b->len + i] != 0xee)
            return cf_fail(w, "%s wrote past the end of %s (%zu bytes): byte %zu", what, name,
                           b->len, b->len + i);
    }
    return 0;
}

static void cbuf_done(cf_world_t *w, cbuf_t *b, int failed)
{
    if (!b->base) return;
    if (failed) {   /* hand it to the world's list: freed after the endpoint is closed */
        if (w->nallocs == w->capallocs) {
            int cap = w->capallocs ? 2 * w->capallocs : 64;
            void **n = realloc(w->allocs, (size_t)cap * sizeof *n);
            if (!n) return;   /* leak rather than free what the plugin may still use */
            w->allocs = n;
            w->capallocs = cap;
        }
        w->allocs[w->nallocs++] = b->base;
    } else {
        free(b->base);
    }
    b->base = b->p = NULL;
}

/* Inputs. float32 values are small integers, so sums are exact in any order; int32 values span
 * the whole range (for MAX). Element i of rank r's vector. */
static float in_f32(int r, size_t i)
{
    return (float)((int)((i * 7u + (size_t)r * 13u) % 251u) - 125);
}

static int32_t in_i32(int r, size_t i)
{
    uint64_t x = ((uint64_t)(unsigned)r << 40) ^ (uint64_t)i;
    x = (x ^ (x >> 31)) * 0x9e3779b97f4a7c15ull;
    x ^= x >> 29;
    return (int32_t)(uint32_t)(x >> 16);
}

static void fill_red(void *buf, int r, size_t from, size_t count, cohort_dtype_t dt)
{
    for (size_t i = 0; i < count; i++) {
        if (dt == COHORT_FLOAT32) {
            float v = in_f32(r, from + i);
            memcpy((unsigned char *)buf + 4 * i, &v, 4);
        } else {
            int32_t v = in_i32(r, from + i);
            memcpy((unsigned char *)buf + 4 * i, &v, 4);
        }
    }
}

/* buf[i] must be OP over every rank of input element from + i (SUM for float32, MAX for int32).
 * Returns count when right, else the first wrong element (and its value and the expected one
 * as text in bad). */
static size_t check_red(const void *buf, int np, size_t from, size_t count, cohort_dtype_t dt,
                        char *bad, size_t badlen)
{
    for (size_t i = 0; i < count; i++) {
        if (dt == COHORT_FLOAT32) {
            float want = 0, got;
            for (int r = 0; r < np; r++) want += in_f32(r, from + i);
            memcpy(&got, (const unsigned char *)buf + 4 * i, 4);
            if (memcmp(&got, &want, 4)) {
                snprintf(bad, badlen, "%g instead of %g", (double)got, (double)want);
                return i;
            }
        } else {
            int32_t want = INT32_MIN, got;
            for (int r = 0; r < np; r++)
                if (in_i32(r, from + i) > want) want = in_i32(r, from + i);
            memcpy(&got, (const unsigned char *)buf + 4 * i, 4);
            if (got != want) {
                snprintf(bad, badlen, "%ld instead of %ld", (long)got, (long)want);
                return i;
            }
        }
    }
    return count;
}

typedef struct coll_run_ctx {
    cf_world_t *w;
    const cohort_transport_coll_v1_t *ct;
    uint64_t seq;            /* collectives started so far on this endpoint */
    int ran[COHORT_TP_BARRIER + 1];
} cctx_t;

static const char *place_name(int inplace) { return inplace ? "in place" : "out of place"; }

/* allreduce / reduce (root), float32 SUM or int32 MAX. */
static int t_reduce(cctx_t *c, int kind, size_t count, cohort_dtype_t dt, int root, int inplace)
{
    cf_world_t *w = c->w;
    cohort_op_t op = dt == COHORT_FLOAT32 ? COHORT_SUM : COHORT_MAX;
    int has_recv = kind == COHORT_TP_ALLREDUCE || w->rank == root;
    inplace = inplace && has_recv;
    size_t bytes = count * 4;
    char what[160], bad[96];
    char rootbuf[24] = "";
    if (kind == COHORT_TP_REDUCE) snprintf(rootbuf, sizeof rootbuf, ", root %d", root);
    snprintf(what, sizeof what, "%s #%llu (%zu x %s %s%s, %s)", coll_kind_name(kind),
             (unsigned long long)c->seq + 1, count, dt == COHORT_FLOAT32 ? "float32" : "int32",
             op == COHORT_SUM ? "SUM" : "MAX", rootbuf,
             kind == COHORT_TP_REDUCE && !has_recv ? "recvbuf NULL" : place_name(inplace));
    cbuf_t sb = { 0 }, rb = { 0 };
    if (cbuf_new(w, &sb, bytes)) return -1;
    if (has_recv && !inplace && cbuf_new(w, &rb, bytes)) {
        cbuf_done(w, &sb, 0);
        return -1;
    }
    fill_red(sb.p, w->rank, 0, count, dt);
    if (rb.p) memset(rb.p, 0xcd, bytes);
    void *recv = inplace ? sb.p : rb.p;   /* NULL off the root of a reduce */
    cohort_tp_coll_args_t a = coll_args(kind, sb.p, recv, count, dt, op,
                                        kind == COHORT_TP_REDUCE ? root : 0);
    a.tag = coll_tag(++c->seq, &a);
    int rc = coll_ok(w, c->ct, &a, what);
    if (!rc) rc = cbuf_canaries(w, &sb, what, inplace ? "the buffer" : "sendbuf");
    if (!rc) rc = cbuf_canaries(w, &rb, what, "recvbuf");
    if (!rc && recv) {
        size_t i = check_red(recv, w->np, 0, count, dt, bad, sizeof bad);
        if (i != count) rc = cf_fail(w, "%s: wrong result at element %zu: %s", what, i, bad);
    }
    if (!rc && !inplace) {   /* sendbuf is const */
        cbuf_t ref = { 0 };
        if (cbuf_new(w, &ref, bytes)) rc = -1;
        else {
            fill_red(ref.p, w->rank, 0, count, dt);
            if (memcmp(ref.p, sb.p, bytes))
                rc = cf_fail(w, "%s: the plugin wrote into sendbuf", what);
            cbuf_done(w, &ref, 0);
        }
    }
    cbuf_done(w, &sb, rc != 0);
    cbuf_done(w, &rb, rc != 0);
    c->ran[kind]++;
    return rc;
}

static int t_broadcast(cctx_t *c, size_t count, cohort_dtype_t dt, int root)
{
    cf_world_t *w = c->w;
    size_t es = dt == COHORT_UINT8 ? 1 : 4, bytes = count * es;
    char what[160];
    snprintf(what, sizeof what, "broadcast #%llu (%zu bytes, root %d)",
             (unsigned long long)c->seq + 1, bytes, root);
    cbuf_t b = { 0 };
    if (cbuf_new(w, &b, bytes)) return -1;
    uint64_t seed = cf_seed(w, root, 0, (int)c->seq);
    if (w->rank == root) cf_fill(b.p, bytes, seed);
    else memset(b.p, 0xcd, bytes);
    cohort_tp_coll_args_t a = coll_args(COHORT_TP_BROADCAST, b.p, b.p, count, dt, COHORT_SUM,
                                        root);
    a.tag = coll_tag(++c->seq, &a);
    int rc = coll_ok(w, c->ct, &a, what);
    if (!rc) rc = cbuf_canaries(w, &b, what, "the buffer");
    if (!rc) {
        size_t bad = cf_check(b.p, bytes, seed);
        if (bad != bytes)
            rc = cf_fail(w, "%s: wrong data at byte %zu (element %zu)%s", what, bad, bad / es,
                         w->rank == root ? ": the root's own buffer changed" : "");
    }
    cbuf_done(w, &b, rc != 0);
    c->ran[COHORT_TP_BROADCAST]++;
    return rc;
}

/* allgather (count elements per rank) and alltoall (count per pair), int32, as bytes. */
static int t_gather(cctx_t *c, int kind, size_t count, int inplace)
{
    cf_world_t *w = c->w;
    int np = w->np, me = w->rank, a2a = kind == COHORT_TP_ALLTOALL;
    size_t bytes = count * 4, total = bytes * (size_t)np;
    char what[160];
    snprintf(what, sizeof what, "%s #%llu (%zu x int32 per %s, %s)", coll_kind_name(kind),
             (unsigned long long)c->seq + 1, count, a2a ? "pair" : "rank", place_name(inplace));
    cbuf_t sb = { 0 }, rb = { 0 };
    if (cbuf_new(w, &rb, total)) return -1;
    if (!inplace && cbuf_new(w, &sb, a2a ? total : bytes)) {
        cbuf_done(w, &rb, 0);
        return -1;
    }
    /* block (src -> dst) has seed cf_seed(src, dst, seq); allgather: dst 0 */
    uint64_t s = c->seq;
    memset(rb.p, 0xcd, total);
    unsigned char *send;
    if (a2a) {
        send = inplace ? rb.p : sb.p;
        for (int d = 0; d < np; d++)
            cf_fill(send + (size_t)d * bytes, bytes, cf_seed(w, me, d, (int)s));
    } else {
        send = inplace ? rb.p + (size_t)me * bytes : sb.p;
        cf_fill(send, bytes, cf_seed(w, me, 0, (int)s));
    }
    cohort_tp_coll_args_t a = coll_args(kind, send, rb.p, count, COHORT_INT32, COHORT_SUM, 0);
    a.tag = coll_tag(++c->seq, &a);
    int rc = coll_ok(w, c->ct, &a, what);
    if (!rc) rc = cbuf_canaries(w, &rb, what, inplace ? "the buffer" : "recvbuf");
    if (!rc) rc = cbuf_canaries(w, &sb, what, "sendbuf");
    for (int src = 0; src < np && !rc; src++) {
        uint64_t seed = cf_seed(w, src, a2a ? me : 0, (int)s);
        size_t bad = cf_check(rb.p + (size_t)src * bytes, bytes, seed);
        if (bad != bytes)
            rc = cf_fail(w, "%s: block of rank %d: wrong data at element %zu", what, src,
                         bad / 4);
    }
    if (!rc && !inplace) {
        for (int d = 0; d < (a2a ? np : 1) && !rc; d++)
            if (cf_check(sb.p + (size_t)d * bytes, bytes, cf_seed(w, me, a2a ? d : 0, (int)s))
                != bytes)
                rc = cf_fail(w, "%s: the plugin wrote into sendbuf", what);
    }
    cbuf_done(w, &sb, rc != 0);
    cbuf_done(w, &rb, rc != 0);
    c->ran[kind]++;
    return rc;
}

/* reduce_scatter: count elements per rank, float32 SUM or int32 MAX. */
static int t_reduce_scatter(cctx_t *c, size_t count, cohort_dtype_t dt, int inplace)
{
    cf_world_t *w = c->w;
    int np = w->np, me = w->rank;
    cohort_op_t op = dt == COHORT_FLOAT32 ? COHORT_SUM : COHORT_MAX;
    size_t bytes = count * 4, total = bytes * (size_t)np;
    char what[160], bad[96];
    snprintf(what, sizeof what, "reduce_scatter #%llu (%zu x %s %s per rank, %s)",
             (unsigned long long)c->seq + 1, count, dt == COHORT_FLOAT32 ? "float32" : "int32",
             op == COHORT_SUM ? "SUM" : "MAX", place_name(inplace));
    cbuf_t sb = { 0 }, rb = { 0 };
    if (cbuf_new(w, &sb, total)) return -1;
    if (!inplace && cbuf_new(w, &rb, bytes)) {
        cbuf_done(w, &sb, 0);
        return -1;
    }
    fill_red(sb.p, me, 0, count * (size_t)np, dt);
    if (rb.p) memset(rb.p, 0xcd, bytes);
    void *recv = inplace ? sb.p + (size_t)me * bytes : rb.p;
    cohort_tp_coll_args_t a = coll_args(COHORT_TP_REDUCE_SCATTER, sb.p, recv, count, dt, op, 0);
    a.tag = coll_tag(++c->seq, &a);
    int rc = coll_ok(w, c->ct, &a, what);
    if (!rc) rc = cbuf_canaries(w, &sb, what, inplace ? "the buffer" : "sendbuf");
    if (!rc) rc = cbuf_canaries(w, &rb, what, "recvbuf");
    if (!rc) {
        size_t i = check_red(recv, np, (size_t)me * count, count, dt, bad, sizeof bad);
        if (i != count) rc = cf_fail(w, "%s: wrong result at element %zu: %s", what, i, bad);
    }
    cbuf_done(w, &sb, rc != 0);
    cbuf_done(w, &rb, rc != 0);
    c->ran[COHORT_TP_REDUCE_SCATTER]++;
    return rc;
}

static int t_barrier(cctx_t *c)
{
    char what[64];
    snprintf(what, sizeof what, "barrier #%llu", (unsigned long long)c->seq + 1);
    cohort_tp_coll_args_t a = coll_args(COHORT_TP_BARRIER, NULL, NULL, 0, COHORT_UINT8,
                                        COHORT_SUM, 0);
    a.tag = coll_tag(++c->seq, &a);
    c->ran[COHORT_TP_BARRIER]++;
    return coll_ok(c->w, c->ct, &a, what);
}

/* Between kinds: the other ranks are here too, and the case deadline starts again. */
static int coll_sync(cf_world_t *w)
{
    if (cf_barrier(w)) return -1;
    w->deadline = cf_now() + w->o->timeout;
    return 0;
}

static int case_coll_layout(cf_world_t *w)
{
    const cohort_host_v1_t *host = cohort_plugin_host();
    if (!COHORT_HAS_FIELD(host, cohort_host_v1_t, reduce_finish) || !host->reduce ||
        !host->reduce3 || !host->reduce_finish)
        return cf_fail(w, "the host table this driver hands plugins lacks the ABI 1.1 reduction "
                       "kernels (size %zu): plugins would offer no collectives", host->size);
    if (!w->ops->coll) {
        snprintf(w->note, sizeof w->note, "skipped: the plugin offers no collective table "
                 "(coll is NULL)");
        return 0;
    }
    if ((w->ops->abi_version & 0xffffu) < 1)
        return cf_fail(w, "an ABI %u.%u plugin must leave coll NULL (ABI 1.0 reserved the "
                       "pointer without a layout; the core ignores it)",
                       w->ops->abi_version >> 16, w->ops->abi_version & 0xffffu);
    const cohort_transport_coll_v1_t *ct = NULL;
    unsigned mask = 0;
    int rc = coll_world(w, &ct, &mask);
    if (rc) return rc < 0 ? -1 : 0;
    unsigned again = ct->colls(w->ep);
    if (again != mask)
        return cf_fail(w, "colls() returned 0x%x, then 0x%x on the same endpoint", mask, again);
    char *p = w->note;
    size_t left = sizeof w->note;
    int n = snprintf(p, left, "mask 0x%02x:", mask);
    for (int k = 0; k <= COHORT_TP_BARRIER && n > 0 && (size_t)n < left; k++) {
        if (!(mask & (1u << k))) continue;
        p += n;
        left -= (size_t)n;
        n = snprintf(p, left, " %s", coll_kind_name(k));
    }
    if (!mask) snprintf(w->note, sizeof w->note, "mask 0: this endpoint runs no collective");
    return 0;
}

static int case_coll_all(cf_world_t *w)
{
    cctx_t c = { w, NULL, 0, { 0 } };
    unsigned mask = 0;
    int rc = coll_world(w, &c.ct, &mask);
    if (rc) return rc < 0 ? -1 : 0;
    if (!mask) {
        snprintf(w->note, sizeof w->note, "skipped: colls() offers no collective here");
        return 0;
    }
    static const size_t counts[] = { 1, 1000, 100003 };
    enum { NC = sizeof counts / sizeof counts[0] };
    static const cohort_dtype_t dts[] = { COHORT_FLOAT32, COHORT_INT32 };
    int np = w->np;
    if (mask & (1u << COHORT_TP_ALLREDUCE)) {
        for (int d = 0; d < 2; d++)
            for (int i = 0; i < NC; i++)
                for (int ip = 0; ip < 2; ip++)
                    if (t_reduce(&c, COHORT_TP_ALLREDUCE, counts[i], dts[d], 0, ip)) return -1;
        if (coll_sync(w)) return -1;
    }
    if (mask & (1u << COHORT_TP_BROADCAST)) {
        for (int root = 0; root < np; root++) {
            if (t_broadcast(&c, 1, COHORT_UINT8, root) ||
                t_broadcast(&c, 75001, COHORT_FLOAT32, root) ||
                t_broadcast(&c, 300007, COHORT_UINT8, root))
                return -1;
        }
        if (t_broadcast(&c, 5 * MiB + 3, COHORT_UINT8, np - 1)) return -1;
        if (coll_sync(w)) return -1;
    }
    if (mask & (1u << COHORT_TP_REDUCE)) {
        int roots[2] = { 0, np - 1 };
        for (int ri = 0; ri < 2; ri++)
            for (int d = 0; d < 2; d++)
                for (int i = 0; i < NC; i++)
                    for (int ip = 0; ip < 2; ip++)
                        if (t_reduce(&c, COHORT_TP_REDUCE, counts[i], dts[d], roots[ri], ip))
                            return -1;
        if (coll_sync(w)) return -1;
    }
    if (mask & (1u << COHORT_TP_ALLGATHER)) {
        for (int i = 0; i < NC; i++)
            for (int ip = 0; ip < 2; ip++)
                if (t_gather(&c, COHORT_TP_ALLGATHER, counts[i], ip)) return -1;
        if (coll_sync(w)) return -1;
    }
    if (mask & (1u << COHORT_TP_REDUCE_SCATTER)) {
        for (int d = 0; d < 2; d++)
            for (int i = 0; i < NC; i++)
                for (int ip = 0; ip < 2; ip++)
                    if (t_reduce_scatter(&c, counts[i], dts[d], ip)) return -1;
        if (coll_sync(w)) return -1;
    }
    if (mask & (1u << COHORT_TP_ALLTOALL)) {
        static const size_t ac[] = { 1, 1000, 70001 };
        for (int i = 0; i < 3; i++)
            for (int ip = 0; ip < 2; ip++)
                if (t_gather(&c, COHORT_TP_ALLTOALL, ac[i], ip)) return -1;
        if (coll_sync(w)) return -1;
    }
    if (mask & (1u << COHORT_TP_BARRIER)) {
        for (int i = 0; i < 5; i++)
            if (t_barrier(&c)) return -1;
    }
    /* Kinds back to back without the out-of-band barrier in between. */
    for (int k = 0; k <= COHORT_TP_BARRIER; k++) {
        if (!(mask & (1u << k))) continue;
        int r = k == COHORT_TP_BROADCAST ? t_broadcast(&c, 4097, COHORT_UINT8, np / 2)
              : k == COHORT_TP_ALLREDUCE || k == COHORT_TP_REDUCE
                ? t_reduce(&c, k, 513, COHORT_FLOAT32, np - 1, 0)
              : k == COHORT_TP_REDUCE_SCATTER ? t_reduce_scatter(&c, 17, COHORT_INT32, 0)
              : k == COHORT_TP_BARRIER ? t_barrier(&c) : t_gather(&c, k, 33, 0);
        if (r) return -1;
    }
    snprintf(w->note, sizeof w->note, "%llu collectives: %d allreduce, %d broadcast, %d reduce, "
             "%d allgather, %d reduce_scatter, %d alltoall, %d barrier",
             (unsigned long long)c.seq, c.ran[0], c.ran[1], c.ran[2], c.ran[3], c.ran[4],
             c.ran[5], c.ran[6]);
    return coll_sync(w);
}

/* A kind that cannot complete on any rank before every rank joined: the first offered of
 * allreduce, allgather, alltoall, reduce_scatter, barrier; -1 if none. */
static int coll_pick(unsigned mask)
{
    static const int pref[] = { COHORT_TP_ALLREDUCE, COHORT_TP_ALLGATHER, COHORT_TP_ALLTOALL,
                                COHORT_TP_REDUCE_SCATTER, COHORT_TP_BARRIER };
    for (int i = 0; i < 5; i++)
        if (mask & (1u << pref[i])) return pref[i];
    return -1;
}

/* coll_world, then the collective to use (coll_pick): 0, or what coll_world returned (< 0
 * failed, > 0 skipped), or 1 with the skip note when none of coll_pick's kinds is offered. */
static int coll_world_pick(cf_world_t *w, const cohort_transport_coll_v1_t **ct, int *kind)
{
    unsigned mask = 0;
    int rc = coll_world(w, ct, &mask);
    if (rc) return rc;
    *kind = coll_pick(mask);
    if (*kind >= 0) return 0;
    snprintf(w->note, sizeof w->note, "skipped: colls() offers none of allreduce, allgather, "
             "alltoall, reduce_scatter, barrier here");
    return 1;
}

/* Arguments of collective kind with count elements (int32) per block in fresh buffers. */
static int coll_prep(cf_world_t *w, int kind, size_t count, cbuf_t *sb, cbuf_t *rb,
                     cohort_tp_coll_args_t *a)
{
    size_t blocks = kind == COHORT_TP_ALLREDUCE ? 1 : (size_t)w->np;
    if (kind == COHORT_TP_BARRIER) {
        *a = coll_args(kind, NULL, NULL, 0, COHORT_UINT8, COHORT_SUM, 0);
        return 0;
    }
    size_t sbytes = 4 * count * (kind == COHORT_TP_ALLGATHER ? 1 : blocks);
    size_t rbytes = 4 * count * (kind == COHORT_TP_REDUCE_SCATTER ? 1 : blocks);
    if (cbuf_new(w, sb, sbytes)) return -1;
    if (cbuf_new(w, rb, rbytes)) {
        cbuf_done(w, sb, 0);
        return -1;
    }
    fill_red(sb->p, w->rank, 0, sbytes / 4, COHORT_INT32);
    memset(rb->p, 0xcd, rbytes);
    *a = coll_args(kind, sb->p, rb->p, count, COHORT_INT32, COHORT_SUM, 0);
    return 0;
}

/* Does msg name a rank other than me (as "rank N")? */
static int names_other_rank(const char *msg, int me, int np)
{
    for (const char *p = msg; (p = strstr(p, "rank")) != NULL; p += 4) {
        const char *q = p + 4;
        if (*q == 's') q++;
        while (*q == ' ') q++;
        if (*q < '0' || *q > '9') continue;
        int r = atoi(q);
        if (r != me && r >= 0 && r < np) return 1;
    }
    return 0;
}

static int case_coll_mismatch(cf_world_t *w)
{
    const cohort_transport_coll_v1_t *ct = NULL;
    int kind = -1;
    int rc = coll_world_pick(w, &ct, &kind);
    if (rc) return rc < 0 ? -1 : 0;
    /* One matched collective first, so the mismatch is not the endpoint's first. */
    cbuf_t sb = { 0 }, rb = { 0 };
    cohort_tp_coll_args_t a;
    if (coll_prep(w, kind, 1000, &sb, &rb, &a)) return -1;
    char what[128];
    snprintf(what, sizeof what, "%s #1 (matched)", coll_kind_name(kind));
    a.tag = coll_tag(1, &a);
    rc = coll_ok(w, ct, &a, what);
    cbuf_done(w, &sb, rc != 0);
    cbuf_done(w, &rb, rc != 0);
    if (rc) return -1;
    /* Rank 1 calls another collective (another count, so another tag). */
    size_t count = w->rank == 1 ? 1001 : 1000;
    if (coll_prep(w, kind, count, &sb, &rb, &a)) return -1;
    a.tag = coll_tag(2, &a);
    if (kind == COHORT_TP_BARRIER && w->rank == 1) a.tag = coll_tag(3, &a);
    snprintf(what, sizeof what, "%s #2 (rank 1 with count %d and tag %016llx, the others with "
             "another)", coll_kind_name(kind), 1001, (unsigned long long)a.tag);
    coll_res_t res;
    rc = coll_run(w, ct, &a, what, &res);
    cbuf_done(w, &sb, 1);   /* the plugin may be done with them only at ep_close */
    cbuf_done(w, &rb, 1);
    if (rc) return -1;
    if (res.st != COHORT_ERR_MISMATCH)
        return cf_fail(w, "%s: expected COHORT_ERR_MISMATCH, got %s%s%s", what,
                       cohort_strerror(res.st), res.err[0] ? ": " : "", res.err);
    if (!res.err[0])
        return cf_fail(w, "%s failed with MISMATCH but left no message (host->error was not "
                       "called)", what);
    if (!names_other_rank(res.err, w->rank, w->np))
        return cf_fail(w, "the MISMATCH message names no other rank (it should name both "
                       "sides): %s", res.err);
    if (w->o->verbose || w->rank == 0) snprintf(w->note, sizeof w->note, "%.120s", res.err);
    /* The endpoint may be unusable now; the harness closes it. Finish together. */
    return cf_barrier(w);
}

static int case_coll_cancel(cf_world_t *w)
{
    const cohort_transport_coll_v1_t *ct = NULL;
    int kind = -1;
    int rc = coll_world_pick(w, &ct, &kind);
    if (rc) return rc < 0 ? -1 : 0;
    int who = w->np - 1;   /* starts one alone; the others never join */
    if (w->rank == who) {
        cbuf_t sb = { 0 }, rb = { 0 };
        cohort_tp_coll_args_t a;
        if (coll_prep(w, kind, 300001, &sb, &rb, &a)) return -1;
        a.tag = coll_tag(1, &a);
        char what[96];
        snprintf(what, sizeof what, "%s #1 started by rank %d alone", coll_kind_name(kind), who);
        cohort_tp_req_t req = NULL;
        cohort_status_t st = ct->start(w->ep, &a, &req);
        if (st != COHORT_SUCCESS || !req) {
            cbuf_done(w, &sb, 1);
            cbuf_done(w, &rb, 1);
            return cf_fail(w, "%s: start returned %s%s: %s", what, cohort_strerror(st),
                           st == COHORT_SUCCESS ? " and no request (done at once, although no "
                           "other rank joined)" : "", st ? cohort_last_error() : "");
        }
        for (int i = 0; i < 50 && !rc; i++) {
            int on = -7, moved = -7;
            st = ct->test(req, &on, &moved);
            if (st != COHORT_IN_PROGRESS) {
                rc = cf_fail(w, "%s: test returned %s%s%s although no other rank joined", what,
                             cohort_strerror(st), st ? ": " : "", st ? cohort_last_error() : "");
                req = NULL;   /* freed by a final test */
            } else if (on != -1 && (on < 0 || on >= w->np || on == w->rank)) {
                rc = cf_fail(w, "%s: test set *waiting_on to %d (must be -1 or another rank)",
                             what, on);
            } else if (moved != 0 && moved != 1) {
                rc = cf_fail(w, "%s: test set *moved to %d (must be 0 or 1)", what, moved);
            }
            if (!rc) cf_pump(w, 1);
        }
        if (req) ct->cancel(req);
        /* Closing right away frees everything; the buffers go right after (ASan sees a plugin
         * touching them later). */
        int crc = timed_ep_close(w);
        free(sb.base);
        free(rb.base);
        if (rc || crc) return -1;
    }
    return cf_barrier(w);
}

/* ---- the list ----------------------------------------------------------------------------- */

const cf_case_t cf_cases[] = {
    { "endpoint open and address exchange", case_addresses },
    { "attributes (get_attr honours the struct size)", case_attributes },
    { "connect/accept, acceptor first", case_acceptor_first },
    { "connect/accept, connector first", case_connector_first },
    { "a rank holding another secret is refused (the stranger connects)",
      case_stranger_connects },
    { "a rank holding another secret is refused (the stranger accepts)", case_stranger_accepts },
    { "send/recv 0 B", case_0b },
    { "send/recv 1 B", case_1b },
    { "send/recv odd sizes (3 B .. 1000003 B)", case_odd },
    { "send/recv 64 KiB - 1", case_64k_minus },
    { "send/recv 64 KiB", case_64k },
    { "send/recv 64 KiB + 1", case_64k_plus },
    { "send/recv 1 MiB", case_1m },
    { "send/recv 8 MiB", case_8m },
    { "buffers unmapped and mapped again at the same address between messages", case_remap },
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
    { "collective table: layout and mask", case_coll_layout },
    { "collective table: every offered collective, element by element", case_coll_all },
    { "collective table: different tags give COHORT_ERR_MISMATCH on every rank",
      case_coll_mismatch },
    { "collective table: cancel, then ep_close frees everything", case_coll_cancel },
    { "conn_close while idle", case_conn_close_idle },
    { "ep_close while idle with open connections", case_ep_close_idle },
    { "conn_close with operations in flight", case_conn_close_busy },
    { "ep_close with operations in flight", case_ep_close_busy },
    { "a peer's conn_close fails pending receives", case_peer_conn_close },
    { "peer process exits: COHORT_ERR_PEER_LOST, not a hang", case_peer_exit },
};
const int cf_ncases = (int)(sizeof cf_cases / sizeof cf_cases[0]);
