/* SPDX-License-Identifier: BSD-3-Clause */
/* cohort TCP transport (libcohort-tcp.so).
 *
 * Knows only <cohort/plugin.h>: logging, errors, settings, interfaces and the job's HMAC come
 * from the host table. Everything is non-blocking; work happens in progress()/test()/conn_test()
 * and the endpoint's epoll fd (ep_fd) lets the core sleep while nothing can move.
 *
 * Structure
 *   endpoint  one listening socket per candidate address (every interface host->netifs() allows,
 *             up to 8, best first; all published in the address blob) + epoll fd + the sockets still in their handshake ("incoming")
 *             + authenticated sockets no accept() has claimed yet ("early") + its conns.
 *   conn      nsocks sockets to one peer. Sends are queues of segments per socket; receives are
 *             posted irecvs waiting for their header on socket 0 plus per-socket segment queues.
 *   request   owns up to nsocks segments; freed once the user has seen its final status and no
 *             socket queue still points at it (a mismatched receive drains its payload after the
 *             user has been told).
 * Reachability: can_reach probes the peer's candidates (a non-blocking connect to each, all at
 * once, bounded by COHORT_SOCKET_PROBE_MS) and remembers, per peer, the most preferred candidate
 * that answered; connect dials that one. Addresses that could not be reached (no route, no
 * answer) are remembered per plugin context, so the timeout is paid once per address.
 * Wire format: see tcp_wire.h. Not thread-safe per endpoint: the core serialises calls per
 * endpoint (the context's cache of unreachable addresses has its own lock).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <cohort/plugin.h>

#include "tcp_wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define SUBSYS "net"
#define TCP_PLUGIN_VERSION COHORT_VERSION_STRING   /* the package's (configure) */
#define TCP_DEFAULT_NSOCKS 2
#define TCP_STAGE_SIZE ((size_t)64 * 1024)     /* socket 0 read-ahead buffer */
#define TCP_DIRECT_MIN ((size_t)8 * 1024)      /* read straight into the user buffer above this */
#define TCP_SCRATCH_SIZE ((size_t)64 * 1024)   /* where discarded payload goes */
#define TCP_MAX_INCOMING 1024                   /* unauthenticated sockets kept at once */
#define TCP_MAX_WARNED 32                       /* peer IPs whose refusal was logged at WARN */
#define TCP_ACCEPT_PAUSE_MS 100                 /* accept() out of descriptors: retry after */
#define TCP_IOV_BATCH 64
#define TCP_ADDRSTR 64
#define TCP_DEFAULT_PROBE_MS 1000
#define TCP_MAX_PROBE_MS 600000


/* ---- objects ----------------------------------------------------------------------------- */

enum { FD_LISTEN = 1, FD_INCOMING, FD_SOCK, FD_EVENT };

typedef struct fdent {
    int kind;
    void *obj;
} fdent_t;

struct tcp_ep;
struct tcp_conn;
struct tcp_req;

/* What probes found out about one IP address: it answered (on some port), or it could not be
 * reached (no route, or no answer in time, and it never answered before): not probed again. */
typedef struct unreach {
    uint16_t family;
    uint32_t scope_id;
    unsigned char addr[16];
    int reachable;
    char why[96];
} unreach_t;

typedef struct tcp_ctx {
    const cohort_host_v1_t *host;
    struct tcp_ep *eps;            /* every open endpoint, closed by finalize if left open */
    pthread_mutex_t lock;          /* guards the cache below (endpoints may live on threads) */
    unreach_t *unreach;
    int nunreach, capunreach;
} tcp_ctx_t;

/* One listening socket: one candidate address of the endpoint. */
typedef struct tcp_listener {
    fdent_t ent;
    struct tcp_ep *ep;
    int fd;
    tcp_cand_t cand;               /* as published (port included) */
    char addrstr[TCP_ADDRSTR];
    double paused_until;           /* accept() ran out of descriptors: off epoll until then */
} tcp_listener_t;

/* What can_reach found for one peer. */
enum { RT_UNKNOWN = 0, RT_CHOSEN, RT_NONE };
typedef struct route {
    int state;
    tcp_cand_t cand;               /* RT_CHOSEN: the candidate that answered */
} route_t;

/* An accepted socket: in its handshake, or authenticated and waiting for accept(). */
enum { IN_HELLO = 1, IN_ACK, IN_READY };
typedef struct incoming {
    fdent_t ent;
    struct incoming *next, *prev;
    struct tcp_ep *ep;
    const tcp_listener_t *lis;     /* the listening socket it came in on */
    int fd;
    int state;
    uint32_t events;
    unsigned char hello[TCP_HELLO_SIZE];
    size_t off;
    unsigned char ack[TCP_ACK_SIZE];
    size_t ack_off;
    int src, sock_idx, nsocks;
    char addr[TCP_ADDRSTR];
} incoming_t;

typedef struct seg {
    struct seg *next;
    struct tcp_req *req;
    const unsigned char *hdr;      /* send: message header before the payload (socket 0) */
    size_t hdrlen;
    char *ptr;                     /* receive: NULL = discard */
    size_t len;
    size_t off;                    /* bytes done, over hdrlen + len */
} seg_t;

/* Socket states (connector side goes through all; accepted sockets start READY). */
enum { S_UNUSED = 0, S_CONNECTING, S_HELLO, S_ACK, S_READY, S_CLOSED };
typedef struct tsock {
    fdent_t ent;
    struct tcp_conn *conn;
    int idx;
    int fd;
    int state;
    uint32_t events;               /* currently registered with epoll */
    int rx_idle;                   /* EPOLLIN fired with no receive wanting it: disarm */
    unsigned char hello[TCP_HELLO_SIZE];
    size_t hello_off;
    unsigned char ack[TCP_ACK_SIZE];
    size_t ack_off;
    seg_t *txh, *txt;
    seg_t *rxh, *rxt;
} tsock_t;

enum { C_CONNECTING = 1, C_READY, C_FAILED };
typedef struct tcp_conn {
    struct tcp_ep *ep;
    struct tcp_conn *next, *prev;
    int peer;
    int connector;
    int state;
    cohort_status_t err;
    char errmsg[384];
    char peer_addr[TCP_ADDRSTR];
    int nsocks;                    /* 0 on the accept side until the first socket is claimed */
    int nready;
    int claimed[TCP_MAX_NSOCKS];   /* accept side: socket index seen (duplicates are refused) */
    tsock_t socks[TCP_MAX_NSOCKS];
    struct tcp_req *unm_h, *unm_t; /* posted receives waiting for their header, in order */
    struct tcp_req *def_h, *def_t; /* requests posted before the conn was ready, in order */
    struct tcp_req *all;           /* every live request of this conn */
    unsigned char hdr[TCP_MSG_HDR_SIZE];
    size_t hdr_off;
    unsigned char *stage;          /* socket 0 read-ahead: valid bytes [st_off, st_len) */
    size_t st_off, st_len;
} tcp_conn_t;

typedef struct tcp_req {
    tcp_conn_t *conn;
    struct tcp_req *anext, *aprev; /* conn->all */
    struct tcp_req *qnext;         /* unmatched / deferred queue */
    int is_send;
    char *buf;
    size_t len;
    uint64_t tag;
    size_t nbytes;
    int segs_left;
    int done;                      /* final status known */
    int released;                  /* the user has been given the final status */
    cohort_status_t status;
    char *errmsg;                  /* request-specific failure text (mismatch) */
    unsigned char hdr[TCP_MSG_HDR_SIZE];
    int nseg_cap;
    seg_t seg[];
} tcp_req_t;

typedef struct tcp_ep {
    tcp_ctx_t *ctx;
    const cohort_host_v1_t *host;
    struct tcp_ep *next, *prev;
    int rank, nranks;
    uint64_t comm_id;
    char job_id[TCP_JOBID_LEN];
    unsigned char job_hash[TCP_MAC_LEN];
    unsigned char netns[TCP_NETNS_LEN];
    tcp_listener_t lis[TCP_ADDR_MAX_CANDS];
    int nlis;
    long probe_ms;                 /* COHORT_SOCKET_PROBE_MS */
    route_t *routes;               /* [nranks], allocated by the first can_reach */
    uint64_t *logged;              /* peer address sets whose choice was logged already */
    int nlogged, caplogged;
    int nsocks;
    int epfd;
    incoming_t *inc_h, *inc_t;     /* handshaking, oldest first */
    int ninc;
    incoming_t *early;             /* authenticated, unclaimed */
    /* refusals are logged at WARN once per peer IP (then INFO): a scan does not flood the log */
    char warned[TCP_MAX_WARNED][TCP_ADDRSTR];
    int nwarned;
    int accept_err_logged;
    tcp_conn_t *conns;
    unsigned char *scratch;
    /* Wake-up for completions the caller cannot have seen: a request that completes inside
     * another request's test() (or conn_test, or an isend/irecv of another request) makes
     * evfd readable until the next progress(), so a core that tests what it waits for and
     * then sleeps in poll(ep_fd) wakes up and finds it. */
    int evfd;
    fdent_t ev_ent;
    int signalled;
    int in_progress;               /* inside progress(): completions are seen by the tests after */
    struct tcp_req *cur_req;       /* the request the current call is about */
} tcp_ep_t;

/* ---- small helpers ----------------------------------------------------------------------- */

static double mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void format_sockaddr(const struct sockaddr_storage *ss, char *buf, size_t len)
{
    char a[INET6_ADDRSTRLEN] = "?";
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *s = (const struct sockaddr_in *)(const void *)ss;
        inet_ntop(AF_INET, &s->sin_addr, a, sizeof a);
        snprintf(buf, len, "%s:%u", a, (unsigned)ntohs(s->sin_port));
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)(const void *)ss;
        inet_ntop(AF_INET6, &s->sin6_addr, a, sizeof a);
        snprintf(buf, len, "[%s]:%u", a, (unsigned)ntohs(s->sin6_port));
    } else {
        snprintf(buf, len, "(unknown address family %d)", (int)ss->ss_family);
    }
}

static void format_addr(int family, const unsigned char *addr, uint16_t port, char *buf,
                        size_t len)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    if (family == AF_INET) {
        struct sockaddr_in *s = (struct sockaddr_in *)(void *)&ss;
        s->sin_family = AF_INET;
        memcpy(&s->sin_addr, addr, 4);
        s->sin_port = htons(port);
    } else {
        struct sockaddr_in6 *s = (struct sockaddr_in6 *)(void *)&ss;
        s->sin6_family = AF_INET6;
        memcpy(&s->sin6_addr, addr, 16);
        s->sin6_port = htons(port);
    }
    format_sockaddr(&ss, buf, len);
}

static socklen_t make_sockaddr(int family, const unsigned char *addr, uint16_t port,
                               uint32_t scope, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof *ss);
    if (family == AF_INET) {
        struct sockaddr_in *s = (struct sockaddr_in *)(void *)ss;
        s->sin_family = AF_INET;
        memcpy(&s->sin_addr, addr, 4);
        s->sin_port = htons(port);
        return sizeof *s;
    }
    struct sockaddr_in6 *s = (struct sockaddr_in6 *)(void *)ss;
    s->sin6_family = AF_INET6;
    memcpy(&s->sin6_addr, addr, 16);
    s->sin6_port = htons(port);
    s->sin6_scope_id = scope;
    return sizeof *s;
}

static void set_nodelay(int fd)
{
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void close_fd(int epfd, int fd)
{
    if (fd < 0) return;
    if (epfd >= 0) (void)epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL);
    (void)close(fd);
}

static void make_nonce(const cohort_host_v1_t *host, unsigned char nonce[TCP_NONCE_LEN])
{
    ssize_t got = getrandom(nonce, TCP_NONCE_LEN, GRND_NONBLOCK);
    if (got == (ssize_t)TCP_NONCE_LEN) return;
    /* No entropy pool yet: uniqueness is all a nonce needs, so mix time, pid and a counter. */
    static uint64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    unsigned char in[32], out[32];
    kit_put_le64(in, (uint64_t)ts.tv_sec);
    kit_put_le64(in + 8, (uint64_t)ts.tv_nsec);
    kit_put_le64(in + 16, (uint64_t)getpid());
    kit_put_le64(in + 24, ++counter);
    host->auth(in, sizeof in, out);
    memcpy(nonce, out, TCP_NONCE_LEN);
}

/* ---- requests ---------------------------------------------------------------------------- */

static void req_maybe_free(tcp_req_t *r)
{
    if (!r->done || !r->released || r->segs_left > 0) return;
    tcp_conn_t *c = r->conn;
    if (r->aprev) r->aprev->anext = r->anext;
    else c->all = r->anext;
    if (r->anext) r->anext->aprev = r->aprev;
    free(r->errmsg);
    free(r);
}

static void req_finish(tcp_req_t *r, cohort_status_t st)
{
    if (r->done) return;
    r->done = 1;
    r->status = st;
    tcp_ep_t *ep = r->conn->ep;
    if (!ep->in_progress && r != ep->cur_req && !ep->signalled && ep->evfd >= 0) {
        uint64_t one = 1;
        ssize_t w;
        do w = write(ep->evfd, &one, sizeof one);
        while (w < 0 && errno == EINTR);
        ep->signalled = 1;
    }
}

static void seg_complete(seg_t *s)
{
    tcp_req_t *r = s->req;
    if (--r->segs_left == 0) {
        req_finish(r, COHORT_SUCCESS);
        req_maybe_free(r);
    }
}

static void q_push(tcp_req_t **h, tcp_req_t **t, tcp_req_t *r)
{
    r->qnext = NULL;
    if (*t) (*t)->qnext = r;
    else *h = r;
    *t = r;
}

static tcp_req_t *q_pop(tcp_req_t **h, tcp_req_t **t)
{
    tcp_req_t *r = *h;
    if (!r) return NULL;
    *h = r->qnext;
    if (!*h) *t = NULL;
    r->qnext = NULL;
    return r;
}

static void seg_push(seg_t **h, seg_t **t, seg_t *s)
{
    s->next = NULL;
    if (*t) (*t)->next = s;
    else *h = s;
    *t = s;
}

static seg_t *seg_pop(seg_t **h, seg_t **t)
{
    seg_t *s = *h;
    *h = s->next;
    if (!*h) *t = NULL;
    s->next = NULL;
    return s;
}

/* ---- epoll interest ---------------------------------------------------------------------- */

static int conn_rx0_wants(const tcp_conn_t *c)
{
    return c->socks[0].rxh != NULL || c->unm_h != NULL;
}

static int sock_rx_wanted(const tsock_t *s)
{
    return s->idx == 0 ? conn_rx0_wants(s->conn) : s->rxh != NULL;
}

/* EPOLLIN is disarmed lazily: it stays registered after a receive completes (the next one is
 * usually posted before its data arrives, which saves two epoll_ctl calls per message) and is
 * dropped only once epoll reports data that no posted receive wants, so that ep_fd does not stay
 * readable for data the core has not asked for yet. */
static uint32_t sock_wanted_events(tsock_t *s)
{
    switch (s->state) {
    case S_CONNECTING:
    case S_HELLO:
        return EPOLLOUT;
    case S_ACK:
        return EPOLLIN;
    case S_READY: {
        uint32_t ev = 0;
        if (s->txh) ev |= EPOLLOUT;
        if (sock_rx_wanted(s)) {
            s->rx_idle = 0;
            ev |= EPOLLIN;
        } else if ((s->events & EPOLLIN) && !s->rx_idle) {
            ev |= EPOLLIN;
        }
        return ev;
    }
    default:
        return 0;
    }
}

static void conn_fail(tcp_conn_t *c, cohort_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void sock_update(tsock_t *s)
{
    if (s->fd < 0) return;
    uint32_t want = sock_wanted_events(s);
    if (want == s->events) return;
    struct epoll_event ev = { .events = want, .data.ptr = &s->ent };
    if (epoll_ctl(s->conn->ep->epfd, EPOLL_CTL_MOD, s->fd, &ev) != 0) {
        int e = errno;
        conn_fail(s->conn, COHORT_ERR_TRANSPORT, "tcp: epoll_ctl on the socket to rank %d "
                  "(%s) failed: %s", s->conn->peer, s->conn->peer_addr, strerror(e));
        return;
    }
    s->events = want;
}

static void conn_update(tcp_conn_t *c)
{
    if (c->state == C_FAILED) return;
    for (int i = 0; i < c->nsocks && c->state != C_FAILED; i++) sock_update(&c->socks[i]);
}

/* ---- connection failure ------------------------------------------------------------------ */

static void conn_close_sockets(tcp_conn_t *c)
{
    for (int i = 0; i < TCP_MAX_NSOCKS; i++) {
        tsock_t *s = &c->socks[i];
        close_fd(c->ep->epfd, s->fd);
        s->fd = -1;
        s->state = S_CLOSED;
        s->events = 0;
        while (s->txh) seg_pop(&s->txh, &s->txt)->req->segs_left--;
        while (s->rxh) seg_pop(&s->rxh, &s->rxt)->req->segs_left--;
    }
}

/* Every pending and later request fails with st and the message. */
static void conn_fail(tcp_conn_t *c, cohort_status_t st, const char *fmt, ...)
{
    if (c->state == C_FAILED) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->errmsg, sizeof c->errmsg, fmt, ap);
    va_end(ap);
    c->state = C_FAILED;
    c->err = st;
    c->ep->host->log(COHORT_LOG_INFO, SUBSYS, "%s", c->errmsg);
    conn_close_sockets(c);
    c->unm_h = c->unm_t = NULL;
    c->def_h = c->def_t = NULL;
    free(c->stage);
    c->stage = NULL;
    c->st_off = c->st_len = 0;
    for (tcp_req_t *r = c->all, *next; r; r = next) {
        next = r->anext;
        req_finish(r, st);
        req_maybe_free(r);
    }
}

/* A failed send()/recv()/connect: the peer went away (reset, closed) or the network failed. */
static void conn_fail_errno(tcp_conn_t *c, int e, const char *what)
{
    cohort_status_t st = (e == ECONNRESET || e == EPIPE || e == ECONNREFUSED ||
                          e == ECONNABORTED || e == ENOTCONN)
        ? COHORT_ERR_PEER_LOST : COHORT_ERR_TRANSPORT;
    conn_fail(c, st, "tcp: %s rank %d at %s failed: %s%s", what, c->peer, c->peer_addr,
              strerror(e), st == COHORT_ERR_PEER_LOST
              ? " (the peer process exited, crashed or closed the connection)"
              : " (check the network between the two hosts and COHORT_SOCKET_IFNAME)");
}

static void conn_fail_eof(tcp_conn_t *c)
{
    conn_fail(c, COHORT_ERR_PEER_LOST, "tcp: rank %d at %s closed the connection (the peer "
              "process exited, crashed or closed its endpoint)", c->peer, c->peer_addr);
}

/* ---- posting ----------------------------------------------------------------------------- */

static void do_tx(tsock_t *s);

static void post_send(tcp_req_t *r)
{
    tcp_conn_t *c = r->conn;
    tcp_msg_hdr_encode(r->hdr, r->tag, (uint64_t)r->len);
    int n = tcp_msg_nslices(r->len, c->nsocks);
    r->segs_left = 0;
    for (int k = 0; k < n; k++) {
        size_t off, sl;
        tcp_msg_slice(r->len, n, k, &off, &sl);
        seg_t *g = &r->seg[k];
        memset(g, 0, sizeof *g);
        g->req = r;
        g->hdr = k == 0 ? r->hdr : NULL;
        g->hdrlen = k == 0 ? TCP_MSG_HDR_SIZE : 0;
        g->ptr = r->buf + off;
        g->len = sl;
        if (g->hdrlen + g->len == 0) continue;
        r->segs_left++;
        seg_push(&c->socks[k].txh, &c->socks[k].txt, g);
    }
    /* Eager: push what the kernel takes now (lowest latency for small messages). */
    for (int k = 0; k < n && c->state == C_READY; k++) do_tx(&c->socks[k]);
}

static void consume_stage(tcp_conn_t *c);

static void post_recv(tcp_req_t *r)
{
    tcp_conn_t *c = r->conn;
    q_push(&c->unm_h, &c->unm_t, r);
    consume_stage(c);
}

static void conn_ready(tcp_conn_t *c)
{
    c->state = C_READY;
    c->ep->host->log(COHORT_LOG_TRACE, SUBSYS, "tcp: connected to rank %d at %s (%d socket%s, "
                     "%s)", c->peer, c->peer_addr, c->nsocks, c->nsocks == 1 ? "" : "s",
                     c->connector ? "connected" : "accepted");
    tcp_req_t *r;
    while (c->state == C_READY && (r = q_pop(&c->def_h, &c->def_t))) {
        if (r->is_send) post_send(r);
        else post_recv(r);
    }
    conn_update(c);
}

/* ---- data path --------------------------------------------------------------------------- */

static void do_tx(tsock_t *s)
{
    tcp_conn_t *c = s->conn;
    while (s->txh && c->state == C_READY) {
        struct iovec iov[TCP_IOV_BATCH];
        int n = 0;
        size_t total = 0;
        for (seg_t *g = s->txh; g && n < TCP_IOV_BATCH; g = g->next) {
            size_t off = g->off;
            if (off < g->hdrlen) {
                iov[n].iov_base = (void *)(g->hdr + off);
                iov[n].iov_len = g->hdrlen - off;
                total += iov[n++].iov_len;
                off = g->hdrlen;
                if (n == TCP_IOV_BATCH) break;
            }
            size_t po = off - g->hdrlen;
            if (po < g->len) {
                iov[n].iov_base = g->ptr + po;
                iov[n].iov_len = g->len - po;
                total += iov[n++].iov_len;
            }
        }
        struct msghdr mh;
        memset(&mh, 0, sizeof mh);
        mh.msg_iov = iov;
        mh.msg_iovlen = (size_t)n;
        ssize_t w = sendmsg(s->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return;
            conn_fail_errno(c, errno, "sending to");
            return;
        }
        size_t left = (size_t)w;
        while (left > 0 && s->txh) {
            seg_t *g = s->txh;
            size_t rem = g->hdrlen + g->len - g->off;
            if (left >= rem) {
                left -= rem;
                g->off += rem;
                seg_pop(&s->txh, &s->txt);
                seg_complete(g);
            } else {
                g->off += left;
                left = 0;
            }
        }
        if ((size_t)w < total) return;   /* the kernel buffer is full */
    }
}

/* What the header just completed on socket 0 means for the next posted receive. */
static void match_header(tcp_conn_t *c)
{
    tcp_req_t *r = q_pop(&c->unm_h, &c->unm_t);
    if (!r) return;   /* callers only complete a header when a receive is posted */
    uint64_t tag, len64;
    tcp_msg_hdr_decode(c->hdr, &tag, &len64);
    c->hdr_off = 0;
    size_t len = (size_t)len64;
    char msg[320];
    int ok = tcp_msg_check(tag, len64, r->tag, r->len, c->peer, c->peer_addr, msg,
                           sizeof msg) == TCP_MSG_OK;
    if (!ok) {
        r->errmsg = strdup(msg);
        req_finish(r, COHORT_ERR_MISMATCH);   /* the user hears now; the payload is drained */
    } else {
        r->nbytes = len;
    }
    int n = tcp_msg_nslices(len, c->nsocks);
    for (int k = 0; k < n; k++) {
        size_t off, sl;
        tcp_msg_slice(len, n, k, &off, &sl);
        if (sl == 0) continue;
        seg_t *g = &r->seg[k];
        memset(g, 0, sizeof *g);
        g->req = r;
        g->ptr = ok ? r->buf + off : NULL;
        g->len = sl;
        r->segs_left++;
        seg_push(&c->socks[k].rxh, &c->socks[k].rxt, g);
    }
    if (r->segs_left == 0) req_finish(r, COHORT_SUCCESS);
    req_maybe_free(r);
}

/* Moves read-ahead bytes of socket 0 into headers and segments. */
static void consume_stage(tcp_conn_t *c)
{
    tsock_t *s = &c->socks[0];
    while (c->st_off < c->st_len && c->state == C_READY) {
        size_t avail = c->st_len - c->st_off;
        if (s->rxh) {
            seg_t *g = s->rxh;
            size_t n = g->len - g->off;
            if (n > avail) n = avail;
            if (g->ptr) memcpy(g->ptr + g->off, c->stage + c->st_off, n);
            g->off += n;
            c->st_off += n;
            if (g->off == g->len) {
                seg_pop(&s->rxh, &s->rxt);
                seg_complete(g);
            }
        } else if (c->unm_h) {
            size_t n = TCP_MSG_HDR_SIZE - c->hdr_off;
            if (n > avail) n = avail;
            memcpy(c->hdr + c->hdr_off, c->stage + c->st_off, n);
            c->hdr_off += n;
            c->st_off += n;
            if (c->hdr_off == TCP_MSG_HDR_SIZE) match_header(c);
        } else {
            break;
        }
    }
    if (c->st_off == c->st_len) c->st_off = c->st_len = 0;
}

static void do_rx0(tcp_conn_t *c)
{
    tsock_t *s = &c->socks[0];
    for (;;) {
        consume_stage(c);
        if (c->state != C_READY || !conn_rx0_wants(c)) return;
        /* The stage is empty here (consume_stage stops early only when nothing wants data). */
        seg_t *g = s->rxh;
        ssize_t r;
        size_t want;
        if (g && g->ptr && g->len - g->off >= TCP_DIRECT_MIN) {
            want = g->len - g->off;
            r = recv(s->fd, g->ptr + g->off, want, MSG_DONTWAIT);
            if (r > 0) {
                g->off += (size_t)r;
                if (g->off == g->len) {
                    seg_pop(&s->rxh, &s->rxt);
                    seg_complete(g);
                }
            }
        } else {
            want = TCP_STAGE_SIZE;
            r = recv(s->fd, c->stage, want, MSG_DONTWAIT);
            if (r > 0) {
                c->st_off = 0;
                c->st_len = (size_t)r;
            }
        }
        if (r == 0) {
            conn_fail_eof(c);
            return;
        }
        if (r < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return;
            conn_fail_errno(c, errno, "receiving from");
            return;
        }
        if ((size_t)r < want) {
            consume_stage(c);
            return;   /* drained the socket for now */
        }
    }
}

static void do_rxk(tsock_t *s)
{
    tcp_conn_t *c = s->conn;
    while (s->rxh && c->state == C_READY) {
        seg_t *g = s->rxh;
        size_t want = g->len - g->off;
        char *dst;
        if (g->ptr) {
            dst = g->ptr + g->off;
        } else {
            if (!c->ep->scratch && !(c->ep->scratch = malloc(TCP_SCRATCH_SIZE))) {
                conn_fail(c, COHORT_ERR_NO_MEMORY, "tcp: no memory for a discard buffer "
                          "(connection to rank %d)", c->peer);
                return;
            }
            dst = (char *)c->ep->scratch;
            if (want > TCP_SCRATCH_SIZE) want = TCP_SCRATCH_SIZE;
        }
        ssize_t r = recv(s->fd, dst, want, MSG_DONTWAIT);
        if (r == 0) {
            conn_fail_eof(c);
            return;
        }
        if (r < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return;
            conn_fail_errno(c, errno, "receiving from");
            return;
        }
        g->off += (size_t)r;
        if (g->off == g->len) {
            seg_pop(&s->rxh, &s->rxt);
            seg_complete(g);
        }
        if ((size_t)r < want) return;
    }
}

/* ---- connector handshake ----------------------------------------------------------------- */

static void sock_connect_progress(tsock_t *s)
{
    tcp_conn_t *c = s->conn;
    const cohort_host_v1_t *host = c->ep->host;
    for (;;) {
        if (c->state == C_FAILED) return;
        switch (s->state) {
        case S_CONNECTING: {
            struct pollfd p = { .fd = s->fd, .events = POLLOUT };
            int pr = poll(&p, 1, 0);
            if (pr < 0 && errno == EINTR) continue;
            if (pr <= 0) return;
            int err = 0;
            socklen_t el = sizeof err;
            if (getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0) err = errno;
            if (err) {
                conn_fail_errno(c, err, "connecting to");
                return;
            }
            if (!(p.revents & POLLOUT)) {
                conn_fail(c, COHORT_ERR_PEER_LOST, "tcp: connecting to rank %d at %s failed "
                          "(connection closed)", c->peer, c->peer_addr);
                return;
            }
            s->state = S_HELLO;
            break;
        }
        case S_HELLO: {
            ssize_t w = send(s->fd, s->hello + s->hello_off, TCP_HELLO_SIZE - s->hello_off,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w < 0) {
                if (errno == EINTR) continue;
                if (errno == EAGAIN || errno == EWOULDBLOCK) return;
                conn_fail_errno(c, errno, "handshake with");
                return;
            }
            s->hello_off += (size_t)w;
            if (s->hello_off == TCP_HELLO_SIZE) s->state = S_ACK;
            break;
        }
        case S_ACK: {
            ssize_t r = recv(s->fd, s->ack + s->ack_off, TCP_ACK_SIZE - s->ack_off,
                             MSG_DONTWAIT);
            if (r == 0) {
                conn_fail(c, COHORT_ERR_TRANSPORT, "tcp: rank %d at %s closed the connection "
                          "during the handshake: it refused this connection (its log says "
                          "why; different COHORT_JOB_ID or COHORT_SECRET, a different cohort "
                          "version, or the wrong address?)", c->peer, c->peer_addr);
                return;
            }
            if (r < 0) {
                if (errno == EINTR) continue;
                if (errno == EAGAIN || errno == EWOULDBLOCK) return;
                conn_fail_errno(c, errno, "handshake with");
                return;
            }
            s->ack_off += (size_t)r;
            if (s->ack_off < TCP_ACK_SIZE) return;
            unsigned char in[TCP_ACK_MAC_INPUT], mac[TCP_MAC_LEN];
            tcp_ack_mac_input(s->hello, s->ack, in);
            host->auth(in, sizeof in, mac);
            const char *why = tcp_ack_check(s->ack, mac, c->peer, s->idx);
            if (why) {
                conn_fail(c, COHORT_ERR_TRANSPORT, "tcp: the endpoint at %s that should be rank "
                          "%d failed authentication: %s", c->peer_addr, c->peer, why);
                return;
            }
            s->state = S_READY;
            if (++c->nready == c->nsocks) conn_ready(c);
            return;
        }
        default:
            return;
        }
    }
}

/* ---- accept side ------------------------------------------------------------------------- */

static void inc_unlink(tcp_ep_t *ep, incoming_t *in)
{
    if (in->state == IN_READY) {
        if (in->prev) in->prev->next = in->next;
        else ep->early = in->next;
        if (in->next) in->next->prev = in->prev;
    } else {
        if (in->prev) in->prev->next = in->next;
        else ep->inc_h = in->next;
        if (in->next) in->next->prev = in->prev;
        else ep->inc_t = in->prev;
        ep->ninc--;
    }
    in->next = in->prev = NULL;
}

static void inc_free(tcp_ep_t *ep, incoming_t *in, int close_it)
{
    inc_unlink(ep, in);
    if (close_it) close_fd(ep->epfd, in->fd);
    free(in);
}

static void inc_reject(tcp_ep_t *ep, incoming_t *in, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void inc_reject(tcp_ep_t *ep, incoming_t *in, const char *fmt, ...)
{
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    /* the IP: "ip:port", or "[ip6]:port" */
    char ip[TCP_ADDRSTR];
    const char *colon = strrchr(in->addr, ':');
    size_t n = colon ? (size_t)(colon - in->addr) : strlen(in->addr);
    if (n >= sizeof ip) n = sizeof ip - 1;
    memcpy(ip, in->addr, n);
    ip[n] = '\0';
    int seen = 0;
    for (int i = 0; i < ep->nwarned && !seen; i++) seen = strcmp(ep->warned[i], ip) == 0;
    int warn = !seen && ep->nwarned < TCP_MAX_WARNED;
    if (warn) snprintf(ep->warned[ep->nwarned++], sizeof ep->warned[0], "%s", ip);
    ep->host->log(warn ? COHORT_LOG_WARN : COHORT_LOG_INFO, SUBSYS, "tcp: refused a connection "
                  "from %s to rank %d (%s): %s%s", in->addr, ep->rank, in->lis->addrstr, why,
                  !warn ? "" : ep->nwarned == TCP_MAX_WARNED
                  ? " (further refusals from new addresses are logged at INFO only)"
                  : " (further refusals from this address are logged at INFO only)");
    inc_free(ep, in, 1);
}

static tcp_conn_t *find_accept_conn(tcp_ep_t *ep, int peer)
{
    for (tcp_conn_t *c = ep->conns; c; c = c->next)
        if (!c->connector && c->peer == peer) return c;
    return NULL;
}

/* Moves an authenticated socket into the accept-side conn waiting for it. */
static void claim(tcp_conn_t *c, incoming_t *in)
{
    tcp_ep_t *ep = c->ep;
    if (c->state == C_FAILED) return;   /* stays early until ep_close */
    if (c->nsocks == 0) {
        c->nsocks = in->nsocks;
        snprintf(c->peer_addr, sizeof c->peer_addr, "%s", in->addr);
    } else if (in->nsocks != c->nsocks) {
        inc_reject(ep, in, "rank %d announces %d sockets on this one but %d on an earlier one",
                   in->src, in->nsocks, c->nsocks);
        return;
    }
    tsock_t *s = &c->socks[in->sock_idx];
    int fd = in->fd;
    inc_free(ep, in, 0);
    s->fd = fd;
    s->state = S_READY;
    s->events = 0;
    struct epoll_event ev = { .events = 0, .data.ptr = &s->ent };
    if (epoll_ctl(ep->epfd, EPOLL_CTL_MOD, fd, &ev) != 0) {
        int e = errno;
        conn_fail(c, COHORT_ERR_TRANSPORT, "tcp: epoll_ctl for the connection from rank %d "
                  "failed: %s", c->peer, strerror(e));
        return;
    }
    if (++c->nready == c->nsocks) conn_ready(c);
}

static void claim_early(tcp_conn_t *c)
{
    tcp_ep_t *ep = c->ep;
    for (incoming_t *in = ep->early, *next; in && c->state == C_CONNECTING; in = next) {
        next = in->next;
        if (in->src == c->peer) claim(c, in);
    }
}

static int is_duplicate(tcp_ep_t *ep, int src, int idx)
{
    for (incoming_t *in = ep->early; in; in = in->next)
        if (in->src == src && in->sock_idx == idx) return 1;
    for (incoming_t *in = ep->inc_h; in; in = in->next)
        if (in->state == IN_ACK && in->src == src && in->sock_idx == idx) return 1;
    tcp_conn_t *c = find_accept_conn(ep, src);
    return c && c->claimed[idx];
}

/* 1: authenticated (state IN_ACK, ack built); 0: refused and freed. */
static int inc_validate(tcp_ep_t *ep, incoming_t *in)
{
    const cohort_host_v1_t *host = ep->host;
    tcp_hello_t h;
    tcp_hello_decode(in->hello, &h);
    const tcp_hello_want_t want = { ep->job_id, ep->comm_id, ep->rank, ep->nranks };
    char why[256];
    if (tcp_hello_check_id(&h, &want, why, sizeof why) != TCP_HELLO_OK) {
        inc_reject(ep, in, "%s", why);
        return 0;
    }
    unsigned char min[TCP_HELLO_MAC_INPUT], mac[TCP_MAC_LEN];
    tcp_hello_mac_input(in->hello, min);
    host->auth(min, sizeof min, mac);
    if (!tcp_ct_equal(mac, h.mac, TCP_MAC_LEN)) {
        inc_reject(ep, in, "HMAC does not verify (the peer does not hold this job's secret: "
                   "forged or stray connection, or a different COHORT_SECRET)");
        return 0;
    }
    if (tcp_hello_check_peer(&h, &want, why, sizeof why) != TCP_HELLO_OK) {
        inc_reject(ep, in, "%s", why);
        return 0;
    }
    if (is_duplicate(ep, (int)h.src, (int)h.sock_idx)) {
        inc_reject(ep, in, "duplicate connection for rank %u socket %u (replayed handshake?)",
                   (unsigned)h.src, (unsigned)h.sock_idx);
        return 0;
    }
    in->src = (int)h.src;
    in->sock_idx = (int)h.sock_idx;
    in->nsocks = (int)h.nsocks;
    /* Answer with our own proof over the connector's hello (which holds its fresh nonce). */
    kit_put_le32(in->ack, TCP_ACK_MAGIC);
    kit_put_le32(in->ack + 4, TCP_PROTO_VERSION);
    kit_put_le32(in->ack + 8, (uint32_t)ep->rank);
    kit_put_le32(in->ack + 12, h.sock_idx);
    unsigned char ain[TCP_ACK_MAC_INPUT];
    tcp_ack_mac_input(in->hello, in->ack, ain);
    host->auth(ain, sizeof ain, in->ack + TCP_ACK_MAC_OFF);
    in->state = IN_ACK;
    return 1;
}

static void inc_set_events(tcp_ep_t *ep, incoming_t *in, uint32_t want)
{
    if (in->events == want) return;
    struct epoll_event ev = { .events = want, .data.ptr = &in->ent };
    if (epoll_ctl(ep->epfd, EPOLL_CTL_MOD, in->fd, &ev) == 0) in->events = want;
}

/* The socket is authenticated and acknowledged: park it, or hand it to a waiting accept(). */
static void inc_ready(tcp_ep_t *ep, incoming_t *in)
{
    inc_unlink(ep, in);
    in->state = IN_READY;
    in->next = ep->early;
    in->prev = NULL;
    if (ep->early) ep->early->prev = in;
    ep->early = in;
    inc_set_events(ep, in, 0);
    ep->host->log(COHORT_LOG_TRACE, SUBSYS, "tcp: authenticated socket %d/%d from rank %d (%s)",
                  in->sock_idx, in->nsocks, in->src, in->addr);
    tcp_conn_t *c = find_accept_conn(ep, in->src);
    if (c) c->claimed[in->sock_idx] = 1;
    if (c && c->state == C_CONNECTING) claim(c, in);
}

/* A probe connection (tcp_wire.h): it did its job by being accepted; closed quietly, never
 * counted against anyone. */
static void inc_probe_done(tcp_ep_t *ep, incoming_t *in)
{
    uint32_t v = in->off >= TCP_PROBE_SIZE ? kit_get_le32(in->hello + 4) : 0;
    ep->host->log(COHORT_LOG_TRACE, SUBSYS, "tcp: reachability probe from %s to rank %d (%s)%s; "
                  "closed", in->addr, ep->rank, in->lis->addrstr,
                  v && v != TCP_PROTO_VERSION ? " of another protocol version" : "");
    inc_free(ep, in, 1);
}

static void inc_progress(tcp_ep_t *ep, incoming_t *in, uint32_t revents)
{
    if (in->state == IN_READY) {
        /* Waiting for accept(): the interest is empty, so only errors and hangups get here. */
        if (revents & (EPOLLERR | EPOLLHUP)) {
            ep->host->log(COHORT_LOG_INFO, SUBSYS, "tcp: authenticated connection from rank %d "
                          "(%s) was reset before accept() claimed it; dropped", in->src,
                          in->addr);
            inc_free(ep, in, 1);
        }
        return;
    }
    while (in->state == IN_HELLO) {
        ssize_t r = recv(in->fd, in->hello + in->off, TCP_HELLO_SIZE - in->off, MSG_DONTWAIT);
        if (r == 0) {
            if (in->off >= 4 && kit_get_le32(in->hello) == TCP_PROBE_MAGIC) {
                inc_probe_done(ep, in);
                return;
            }
            inc_reject(ep, in, "closed after %zu of %d handshake bytes", in->off,
                       TCP_HELLO_SIZE);
            return;
        }
        if (r < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return;
            inc_reject(ep, in, "receiving the handshake failed: %s", strerror(errno));
            return;
        }
        in->off += (size_t)r;
        /* A reachability probe from a peer's can_reach: nothing more will come. */
        if (in->off >= TCP_PROBE_SIZE && kit_get_le32(in->hello) == TCP_PROBE_MAGIC) {
            inc_probe_done(ep, in);
            return;
        }
        if (in->off < TCP_HELLO_SIZE) return;
        if (!inc_validate(ep, in)) return;
    }
    while (in->state == IN_ACK) {
        ssize_t w = send(in->fd, in->ack + in->ack_off, TCP_ACK_SIZE - in->ack_off,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                inc_set_events(ep, in, EPOLLOUT);
                return;
            }
            inc_reject(ep, in, "sending the handshake answer failed: %s", strerror(errno));
            return;
        }
        in->ack_off += (size_t)w;
        if (in->ack_off == TCP_ACK_SIZE) {
            inc_ready(ep, in);   /* may hand in to a conn and free it */
            return;
        }
    }
}

static void listen_progress(tcp_listener_t *l)
{
    tcp_ep_t *ep = l->ep;
    for (;;) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        int fd = accept4(l->fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return;
            /* The listening socket stays readable: leave it out of epoll for a while (else
             * every progress call, and every wait on ep_fd, would come straight back here),
             * warn once, and free a descriptor held by the oldest handshake. */
            int err = errno;
            if (!ep->accept_err_logged) {
                ep->accept_err_logged = 1;
                ep->host->log(COHORT_LOG_WARN, SUBSYS, "tcp: accept on %s (%s, rank %d) failed: "
                              "%s; retrying every %d ms%s", l->addrstr, l->cand.ifname, ep->rank,
                              strerror(err), TCP_ACCEPT_PAUSE_MS,
                              (err == EMFILE || err == ENFILE)
                              ? " (out of file descriptors: raise ulimit -n)" : "");
            }
            struct epoll_event ev = { .events = 0, .data.ptr = &l->ent };
            if (epoll_ctl(ep->epfd, EPOLL_CTL_MOD, l->fd, &ev) == 0)
                l->paused_until = mono_ms() + TCP_ACCEPT_PAUSE_MS;
            if (ep->inc_h && ep->inc_h->state == IN_HELLO)
                inc_reject(ep, ep->inc_h, "out of descriptors (%s); dropped the oldest "
                           "connection still in its handshake", strerror(err));
            return;
        }
        incoming_t *in = calloc(1, sizeof *in);
        if (!in) {
            close(fd);
            ep->host->log(COHORT_LOG_WARN, SUBSYS, "tcp: no memory for an incoming connection "
                          "on %s; dropped it", l->addrstr);
            return;
        }
        in->ent.kind = FD_INCOMING;
        in->ent.obj = in;
        in->ep = ep;
        in->lis = l;
        in->fd = fd;
        in->state = IN_HELLO;
        in->src = in->sock_idx = -1;
        format_sockaddr(&ss, in->addr, sizeof in->addr);
        set_nodelay(fd);
        struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &in->ent };
        if (epoll_ctl(ep->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
            ep->host->log(COHORT_LOG_WARN, SUBSYS, "tcp: epoll_ctl for the connection from %s "
                          "failed: %s; dropped it", in->addr, strerror(errno));
            close(fd);
            free(in);
            continue;
        }
        in->events = EPOLLIN;
        in->prev = ep->inc_t;
        if (ep->inc_t) ep->inc_t->next = in;
        else ep->inc_h = in;
        ep->inc_t = in;
        ep->ninc++;
        /* Read what is there already: a probe (or a whole hello) usually arrives with the
         * connection, and handling it now keeps a burst of probes from piling up. */
        inc_progress(ep, in, 0);
    }
}

/* Keeps a flood of silent connections from eating every descriptor: the oldest goes first. */
static void inc_trim(tcp_ep_t *ep)
{
    while (ep->ninc > TCP_MAX_INCOMING)
        inc_reject(ep, ep->inc_h, "more than %d connections are waiting for their handshake; "
                   "dropping the oldest", TCP_MAX_INCOMING);
}

static void sock_event(tsock_t *s, uint32_t revents)
{
    tcp_conn_t *c = s->conn;
    if (c->state == C_FAILED || s->fd < 0) return;
    if (s->state != S_READY) {
        sock_connect_progress(s);
    } else {
        if (s->txh) do_tx(s);
        if (c->state == C_READY) {
            if (s->idx == 0) do_rx0(c);
            else do_rxk(s);
        }
        if ((revents & EPOLLIN) && !sock_rx_wanted(s)) s->rx_idle = 1;
        if (c->state == C_READY && (revents & (EPOLLERR | EPOLLHUP))) {
            int err = 0;
            socklen_t el = sizeof err;
            if (getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err == 0)
                err = ECONNRESET;
            conn_fail_errno(c, err, "connection to");
        }
    }
    conn_update(c);
}

static cohort_status_t ep_progress(tcp_ep_t *ep)
{
    struct epoll_event evs[64];
    for (int i = 0; i < ep->nlis; i++) {   /* listeners paused for lack of descriptors */
        tcp_listener_t *l = &ep->lis[i];
        if (l->paused_until > 0 && mono_ms() >= l->paused_until) {
            struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &l->ent };
            if (epoll_ctl(ep->epfd, EPOLL_CTL_MOD, l->fd, &ev) == 0) l->paused_until = 0;
        }
    }
    for (int round = 0; round < 8; round++) {
        int n = epoll_wait(ep->epfd, evs, 64, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            return ep->host->error(COHORT_ERR_SYSTEM, "tcp: epoll_wait on the endpoint of rank "
                                   "%d failed: %s", ep->rank, strerror(errno));
        }
        for (int i = 0; i < n; i++) {
            fdent_t *e = (fdent_t *)evs[i].data.ptr;
            switch (e->kind) {
            case FD_LISTEN:
                listen_progress((tcp_listener_t *)e->obj);
                break;
            case FD_INCOMING:
                inc_progress(ep, (incoming_t *)e->obj, evs[i].events);
                break;
            case FD_SOCK:
                sock_event((tsock_t *)e->obj, evs[i].events);
                break;
            default:
                break;
            }
        }
        inc_trim(ep);
        if (n < 64) break;
    }
    return COHORT_SUCCESS;
}

/* Advances one conn without going through epoll. */
static void conn_progress(tcp_conn_t *c)
{
    if (c->state == C_CONNECTING) {
        if (c->connector) {
            for (int i = 0; i < c->nsocks && c->state == C_CONNECTING; i++)
                if (c->socks[i].state != S_READY) sock_connect_progress(&c->socks[i]);
            conn_update(c);
        } else {
            (void)ep_progress(c->ep);
        }
        return;
    }
    if (c->state != C_READY) return;
    for (int i = 0; i < c->nsocks && c->state == C_READY; i++)
        if (c->socks[i].txh) do_tx(&c->socks[i]);
    if (c->state == C_READY) do_rx0(c);
    for (int i = 1; i < c->nsocks && c->state == C_READY; i++)
        if (c->socks[i].rxh) do_rxk(&c->socks[i]);
    conn_update(c);
}

/* ---- conn lifetime ----------------------------------------------------------------------- */

static tcp_conn_t *conn_new(tcp_ep_t *ep, int peer, int connector)
{
    tcp_conn_t *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->ep = ep;
    c->peer = peer;
    c->connector = connector;
    c->state = C_CONNECTING;
    snprintf(c->peer_addr, sizeof c->peer_addr, "(not connected yet)");
    for (int i = 0; i < TCP_MAX_NSOCKS; i++) {
        c->socks[i].ent.kind = FD_SOCK;
        c->socks[i].ent.obj = &c->socks[i];
        c->socks[i].conn = c;
        c->socks[i].idx = i;
        c->socks[i].fd = -1;
    }
    c->stage = malloc(TCP_STAGE_SIZE);
    if (!c->stage) {
        free(c);
        return NULL;
    }
    c->next = ep->conns;
    if (ep->conns) ep->conns->prev = c;
    ep->conns = c;
    return c;
}

static void conn_destroy(tcp_conn_t *c)
{
    tcp_ep_t *ep = c->ep;
    if (c->prev) c->prev->next = c->next;
    else ep->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    conn_close_sockets(c);
    for (tcp_req_t *r = c->all, *next; r; r = next) {
        next = r->anext;
        free(r->errmsg);
        free(r);
    }
    free(c->stage);
    free(c);
}

/* ---- the ABI ----------------------------------------------------------------------------- */

static cohort_status_t tcp_init(const cohort_host_v1_t *host, cohort_tp_ctx_t *ctx)
{
    if (!host || !ctx) return COHORT_ERR_INVALID_ARG;
    if (!COHORT_HAS_FIELD(host, cohort_host_v1_t, auth) || !host->log ||
        !host->error || !host->setting || !host->setting_long || !host->netifs || !host->auth) {
        if (COHORT_HAS_FIELD(host, cohort_host_v1_t, error) && host->error)
            return host->error(COHORT_ERR_UNSUPPORTED, "tcp: the core's host table is too old "
                               "or incomplete (size %zu)", host->size);
        return COHORT_ERR_UNSUPPORTED;
    }
    tcp_ctx_t *c = calloc(1, sizeof *c);
    if (!c) return host->error(COHORT_ERR_NO_MEMORY, "tcp: no memory for the plugin context");
    int e = pthread_mutex_init(&c->lock, NULL);
    if (e) {
        free(c);
        return host->error(COHORT_ERR_SYSTEM, "tcp: pthread_mutex_init for the plugin context "
                           "failed: %s", strerror(e));
    }
    c->host = host;
    *ctx = c;
    return COHORT_SUCCESS;
}

static cohort_status_t tcp_ep_close(cohort_tp_ep_t epv);

static cohort_status_t tcp_finalize(cohort_tp_ctx_t ctxv)
{
    tcp_ctx_t *ctx = (tcp_ctx_t *)ctxv;
    if (!ctx) return COHORT_SUCCESS;
    while (ctx->eps) tcp_ep_close(ctx->eps);
    pthread_mutex_destroy(&ctx->lock);
    free(ctx->unreach);
    free(ctx);
    return COHORT_SUCCESS;
}

static cohort_status_t tcp_get_attr(cohort_tp_ctx_t ctxv, cohort_transport_attr_t *attr)
{
    (void)ctxv;
    if (!attr) return COHORT_ERR_INVALID_ARG;
    cohort_transport_attr_t a;
    memset(&a, 0, sizeof a);
    a.scope = COHORT_SCOPE_NETWORK;
    a.bandwidth_gbps = 1.25;    /* rough: a 10 Gb/s link */
    a.latency_us = 25.0;        /* rough: kernel TCP round trip on a LAN */
    a.gpu_memory = 0;
    a.max_inflight = 0;
    cohort_attr_fill(attr, &a);
    return COHORT_SUCCESS;
}

/* ---- candidates -------------------------------------------------------------------------- */

/* This rank's network namespace as TCP_NETNS_LEN bytes that every rank of the job computes the
 * same way: the kernel's boot id with the device and inode of /proc/self/ns/net (two namespaces
 * of one boot never share an inode; another host has another boot id), through the job's HMAC.
 * Without /proc/self/ns/net the host name stands in for the namespace. */
static void netns_id(const cohort_host_v1_t *host, unsigned char out[TCP_NETNS_LEN])
{
    unsigned char in[sizeof TCP_LABEL_NETNS + 64 + 16 + 256];
    memset(in, 0, sizeof in);
    memcpy(in, TCP_LABEL_NETNS, sizeof TCP_LABEL_NETNS);
    unsigned char *p = in + sizeof TCP_LABEL_NETNS;
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t r = read(fd, p, 64);
        (void)r;
        close(fd);
    }
    struct stat st;
    if (stat("/proc/self/ns/net", &st) == 0) {
        kit_put_le64(p + 64, (uint64_t)st.st_dev);
        kit_put_le64(p + 72, (uint64_t)st.st_ino);
    } else {
        (void)gethostname((char *)p + 80, 255);
    }
    unsigned char mac[TCP_MAC_LEN];
    host->auth(in, sizeof in, mac);
    memcpy(out, mac, TCP_NETNS_LEN);
}

static int cand_is_loopback(const tcp_cand_t *c)
{
    static const unsigned char v6lo[16] = { [15] = 1 };
    if (c->flags & TCP_CAND_LOOPBACK) return 1;
    if (c->family == AF_INET) return c->addr[0] == 127;
    return memcmp(c->addr, v6lo, 16) == 0;
}

static int cand_is_linklocal(const tcp_cand_t *c)
{
    if (c->family == AF_INET6) return c->addr[0] == 0xfe && (c->addr[1] & 0xc0) == 0x80;
    return 0;
}

static int cand_same_ip(const tcp_cand_t *a, const tcp_cand_t *b)
{
    return a->family == b->family && !memcmp(a->addr, b->addr, a->family == AF_INET ? 4 : 16) &&
           (a->family == AF_INET || a->scope_id == b->scope_id);
}

/* "eth0 10.0.0.1:4242" */
static void cand_format(const tcp_cand_t *c, char *buf, size_t len)
{
    char a[TCP_ADDRSTR];
    format_addr(c->family, c->addr, c->port, a, sizeof a);
    snprintf(buf, len, "%s %s", c->ifname[0] ? c->ifname : "(unnamed)", a);
}

/* NULL when this endpoint may try candidate c of the peer whose address is a; else why not (in
 * buf). Decided from the blobs alone, without touching the network. */
static const char *cand_skip_reason(const tcp_ep_t *ep, const tcp_addr_t *a,
                                    const tcp_cand_t *c, char *buf, size_t len)
{
    int have = 0;
    for (int i = 0; i < ep->nlis; i++)
        if (ep->lis[i].cand.family == c->family) have = 1;
    if (!have) {
        snprintf(buf, len, "this rank has no %s interface (see COHORT_SOCKET_IFNAME)",
                 c->family == AF_INET ? "IPv4" : "IPv6");
        return buf;
    }
    if (!memcmp(a->netns, ep->netns, TCP_NETNS_LEN)) return NULL;
    if (cand_is_loopback(c)) {
        snprintf(buf, len, "loopback address of another host or network namespace");
        return buf;
    }
    if (cand_is_linklocal(c)) {
        snprintf(buf, len, "link-local address of another host (its scope id means nothing "
                 "here)");
        return buf;
    }
    for (int i = 0; i < ep->nlis; i++)
        if (cand_same_ip(&ep->lis[i].cand, c)) {
            snprintf(buf, len, "this host has the same address on %s, so it would reach this "
                     "host, not the peer", ep->lis[i].cand.ifname);
            return buf;
        }
    return NULL;
}

/* The cache entry for c's IP address, or NULL. Call with ctx->lock held. */
static unreach_t *unreach_find(tcp_ctx_t *ctx, const tcp_cand_t *c)
{
    for (int i = 0; i < ctx->nunreach; i++) {
        unreach_t *u = &ctx->unreach[i];
        tcp_cand_t k;
        memset(&k, 0, sizeof k);
        k.family = u->family;
        k.scope_id = u->scope_id;
        memcpy(k.addr, u->addr, 16);
        if (cand_same_ip(&k, c)) return u;
    }
    return NULL;
}

/* 1 if the address was found unreachable earlier (why receives the reason). */
static int unreach_lookup(tcp_ctx_t *ctx, const tcp_cand_t *c, char *why, size_t len)
{
    pthread_mutex_lock(&ctx->lock);
    const unreach_t *u = unreach_find(ctx, c);
    int found = u && !u->reachable;
    if (found) snprintf(why, len, "%s; found earlier, not probed again", u->why);
    pthread_mutex_unlock(&ctx->lock);
    return found;
}

/* Records that c's address answered (reachable) or could not be reached (why). An address that
 * answered once is never marked unreachable later: a port that does not answer in time (a
 * listener whose backlog is full) says nothing about the address. */
static void unreach_note(tcp_ctx_t *ctx, const tcp_cand_t *c, int reachable, const char *why)
{
    pthread_mutex_lock(&ctx->lock);
    unreach_t *old = unreach_find(ctx, c);
    if (old) {
        if (reachable) old->reachable = 1;
        pthread_mutex_unlock(&ctx->lock);
        return;
    }
    if (ctx->nunreach == ctx->capunreach) {
        int cap = ctx->capunreach ? 2 * ctx->capunreach : 16;
        unreach_t *n = realloc(ctx->unreach, (size_t)cap * sizeof *n);
        if (!n) {   /* only a cache: without it the timeout is paid again */
            pthread_mutex_unlock(&ctx->lock);
            return;
        }
        ctx->unreach = n;
        ctx->capunreach = cap;
    }
    unreach_t *u = &ctx->unreach[ctx->nunreach++];
    memset(u, 0, sizeof *u);
    u->family = c->family;
    u->scope_id = c->scope_id;
    memcpy(u->addr, c->addr, 16);
    u->reachable = reachable;
    snprintf(u->why, sizeof u->why, "%s", why ? why : "");
    pthread_mutex_unlock(&ctx->lock);
}

/* Identity of a peer's set of addresses (its host and namespace, ports left out): the ranks of
 * one host share it, so the choice is logged once per host. */
static uint64_t addr_set_key(const tcp_addr_t *a)
{
    uint64_t h = 1469598103934665603ull;
    unsigned char b[24];
    for (size_t i = 0; i < TCP_NETNS_LEN; i++) h = (h ^ a->netns[i]) * 1099511628211ull;
    for (unsigned i = 0; i < a->ncand; i++) {
        kit_put_le16(b, a->cand[i].family);
        kit_put_le32(b + 2, a->cand[i].scope_id);
        memcpy(b + 6, a->cand[i].addr, 16);
        for (size_t j = 0; j < 22; j++) h = (h ^ b[j]) * 1099511628211ull;
    }
    return h;
}

/* 1 the first time key is seen on this endpoint. */
static int first_log(tcp_ep_t *ep, uint64_t key)
{
    for (int i = 0; i < ep->nlogged; i++)
        if (ep->logged[i] == key) return 0;
    if (ep->nlogged == ep->caplogged) {
        int cap = ep->caplogged ? 2 * ep->caplogged : 8;
        uint64_t *n = realloc(ep->logged, (size_t)cap * sizeof *n);
        if (!n) return 1;   /* log again rather than never */
        ep->logged = n;
        ep->caplogged = cap;
    }
    ep->logged[ep->nlogged++] = key;
    return 1;
}

/* ---- the reachability probe -------------------------------------------------------------- */

enum { PR_SKIP = 1, PR_PENDING, PR_OK, PR_FAIL, PR_UNUSED };
typedef struct probe {
    int state;
    int fd;
    int err;                       /* PR_FAIL: errno (ETIMEDOUT: our deadline); 0: from cache */
    char why[160];
    char local[TCP_ADDRSTR];       /* PR_OK: this side of the connection */
} probe_t;


/* Errors that say the address cannot be reached from here (not just "nobody on that port"). */
static int errno_unreachable(int e)
{
    return e == ENETUNREACH || e == EHOSTUNREACH || e == ENETDOWN || e == EHOSTDOWN ||
           e == ETIMEDOUT;
}

static void probe_fail(probe_t *p, int err, const char *why)
{
    p->state = PR_FAIL;
    p->err = err;
    snprintf(p->why, sizeof p->why, "%s", why);
}

static void probe_connected(probe_t *p)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    p->state = PR_OK;
    if (getsockname(p->fd, (struct sockaddr *)&ss, &sl) == 0)
        format_sockaddr(&ss, p->local, sizeof p->local);
    else
        snprintf(p->local, sizeof p->local, "?");
}

/* 1 if the non-blocking connect on fd has completed successfully by now. */
static int connected_now(int fd)
{
    struct pollfd q = { .fd = fd, .events = POLLOUT };
    if (poll(&q, 1, 0) != 1 || !(q.revents & POLLOUT)) return 0;
    int err = 0;
    socklen_t el = sizeof err;
    return getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0;
}

static cohort_status_t tcp_progress(cohort_tp_ep_t epv);

/* Probes every usable candidate of the peer at once and waits (at most ep->probe_ms) until the
 * most preferred one that can still answer has answered or failed. Records the result in
 * ep->routes[peer]; 1 if a candidate answered. */
static int probe_peer(tcp_ep_t *ep, int peer, const tcp_addr_t *a)
{
    const cohort_host_v1_t *host = ep->host;
    probe_t pr[TCP_ADDR_MAX_CANDS];
    unsigned n = a->ncand;
    for (unsigned i = 0; i < n; i++) {
        const tcp_cand_t *c = &a->cand[i];
        probe_t *p = &pr[i];
        memset(p, 0, sizeof *p);
        p->fd = -1;
        if (cand_skip_reason(ep, a, c, p->why, sizeof p->why)) {
            p->state = PR_SKIP;
            continue;
        }
        if (unreach_lookup(ep->ctx, c, p->why, sizeof p->why)) {
            p->state = PR_FAIL;
            continue;
        }
        struct sockaddr_storage ss;
        socklen_t sl = make_sockaddr(c->family, c->addr, c->port, c->scope_id, &ss);
        p->fd = socket(c->family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (p->fd < 0) {
            char why[128];
            int e = errno;
            snprintf(why, sizeof why, "socket() failed: %s", strerror(e));
            probe_fail(p, e, why);
            continue;
        }
        if (connect(p->fd, (struct sockaddr *)&ss, sl) == 0) {
            probe_connected(p);
        } else if (errno == EINPROGRESS || errno == EINTR) {
            p->state = PR_PENDING;
        } else {
            int e = errno;
            probe_fail(p, e, strerror(e));
        }
    }
    double deadline = mono_ms() + (double)ep->probe_ms;
    int chosen = -1;
    for (;;) {
        int wait = 0;
        chosen = -1;
        for (unsigned i = 0; i < n && chosen < 0 && !wait; i++) {
            if (pr[i].state == PR_PENDING) wait = 1;
            else if (pr[i].state == PR_OK) chosen = (int)i;
        }
        if (!wait) break;
        double left = deadline - mono_ms();
        if (left <= 0) {
            char why[64];
            snprintf(why, sizeof why, "no answer within %ld ms", ep->probe_ms);
            for (unsigned i = 0; i < n; i++)
                if (pr[i].state == PR_PENDING) probe_fail(&pr[i], ETIMEDOUT, why);
            continue;
        }
        struct pollfd pf[TCP_ADDR_MAX_CANDS + 1];
        unsigned idx[TCP_ADDR_MAX_CANDS];
        nfds_t k = 0;
        for (unsigned i = 0; i < n; i++)
            if (pr[i].state == PR_PENDING) {
                pf[k].fd = pr[i].fd;
                pf[k].events = POLLOUT;
                pf[k].revents = 0;
                idx[k++] = i;
            }
        /* Our own listeners meanwhile: peers probe us at the same time; accepting their
         * probes now keeps the listen backlogs short. */
        nfds_t npend = k;
        pf[k].fd = ep->epfd;
        pf[k].events = POLLIN;
        pf[k].revents = 0;
        k++;
        int ms = left >= (double)TCP_MAX_PROBE_MS ? TCP_MAX_PROBE_MS : (int)left + 1;
        int r = poll(pf, k, ms);
        if (r < 0) {
            if (errno == EINTR) continue;
            char why[128];
            int e = errno;
            snprintf(why, sizeof why, "poll() failed: %s", strerror(e));
            for (unsigned i = 0; i < n; i++)
                if (pr[i].state == PR_PENDING) probe_fail(&pr[i], e, why);
            continue;
        }
        for (nfds_t j = 0; j < npend; j++) {
            if (!pf[j].revents) continue;
            probe_t *p = &pr[idx[j]];
            int err = 0;
            socklen_t el = sizeof err;
            if (getsockopt(p->fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0) err = errno;
            if (!err && !(pf[j].revents & POLLOUT)) err = ECONNRESET;
            if (err) probe_fail(p, err, strerror(err));
            else probe_connected(p);
        }
        if (pf[npend].revents) (void)tcp_progress(ep);
    }
    /* Close every probe socket; those that connected (even late) carry the probe marker so the
     * listener knows to close them quietly. */
    for (unsigned i = 0; i < n; i++) {
        probe_t *p = &pr[i];
        int answered = p->state == PR_OK;
        if (p->fd >= 0) {
            /* a pending one, or one that timed out, may have connected since the last poll */
            if (!answered && p->state != PR_SKIP) answered = connected_now(p->fd);
            if (answered) {
                unsigned char m[TCP_PROBE_SIZE];
                tcp_probe_encode(m);
                ssize_t w = send(p->fd, m, sizeof m, MSG_NOSIGNAL | MSG_DONTWAIT);
                (void)w;
            }
            close(p->fd);
            p->fd = -1;
        }
        if (p->state == PR_PENDING) p->state = PR_UNUSED;
        if (answered || (p->state == PR_FAIL && p->err == ECONNREFUSED))   /* refused: the host */
            unreach_note(ep->ctx, &a->cand[i], 1, NULL);                   /* answered */
        else if (p->state == PR_FAIL && errno_unreachable(p->err))
            unreach_note(ep->ctx, &a->cand[i], 0, p->why);
    }
    /* The log line: what was chosen and why the peer's preferred addresses before it were not. */
    char list[1400];
    size_t used = 0;
    unsigned upto = chosen >= 0 ? (unsigned)chosen : n;
    for (unsigned i = 0; i < upto && used < sizeof list - 1; i++) {
        char cs[TCP_ADDRSTR + TCP_IFNAME_LEN + 2];
        cand_format(&a->cand[i], cs, sizeof cs);
        int w = snprintf(list + used, sizeof list - used, "%s%s (%s)", used ? ", " : "", cs,
                         pr[i].why);
        if (w < 0) break;
        used += (size_t)w;
        if (used >= sizeof list) used = sizeof list - 1;
    }
    list[used] = '\0';
    route_t *rt = &ep->routes[peer];
    if (chosen >= 0) {
        rt->state = RT_CHOSEN;
        rt->cand = a->cand[chosen];
        if (first_log(ep, addr_set_key(a))) {
            char cs[TCP_ADDRSTR + TCP_IFNAME_LEN + 2];
            cand_format(&a->cand[chosen], cs, sizeof cs);
            host->log(COHORT_LOG_INFO, SUBSYS, "tcp: rank %d reaches rank %d (and any rank at "
                      "the same addresses) at %s from %s: it answered the probe%s%s", ep->rank,
                      peer, cs, pr[chosen].local, used ? "; dropped " : "", list);
        }
        return 1;
    }
    rt->state = RT_NONE;
    host->log(COHORT_LOG_INFO, SUBSYS, "tcp: rank %d cannot reach rank %d: none of its %u "
              "address%s answered the probe (or could be tried): %s", ep->rank, peer, n,
              n == 1 ? "" : "es", used ? list : "(none)");
    return 0;
}

/* ---- endpoints --------------------------------------------------------------------------- */

/* Opens the listening socket for one interface: 0, or an errno with *what naming the call. */
static int listen_on(tcp_listener_t *l, const cohort_netif_t *nif, const char **what)
{
    memset(&l->cand, 0, sizeof l->cand);
    l->fd = -1;
    tcp_cand_t *c = &l->cand;
    c->family = (uint16_t)nif->family;
    memcpy(c->addr, nif->addr, nif->family == AF_INET ? 4 : 16);
    unsigned maxp = nif->family == AF_INET ? 32 : 128;
    c->prefix_len = (uint8_t)(nif->prefix_len > maxp ? maxp : nif->prefix_len);
    c->flags = nif->is_loopback ? TCP_CAND_LOOPBACK : 0;
    snprintf(c->ifname, sizeof c->ifname, "%.16s", nif->name);
    if (cand_is_linklocal(c)) c->scope_id = if_nametoindex(nif->name);
    struct sockaddr_storage ss;
    socklen_t sl = make_sockaddr(c->family, c->addr, 0, c->scope_id, &ss);
    *what = "socket";
    l->fd = socket(c->family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (l->fd < 0) return errno;
    *what = "bind";
    if (bind(l->fd, (struct sockaddr *)&ss, sl) != 0) goto fail;
    *what = "listen";
    if (listen(l->fd, SOMAXCONN) != 0) goto fail;
    *what = "getsockname";
    sl = sizeof ss;
    if (getsockname(l->fd, (struct sockaddr *)&ss, &sl) != 0) goto fail;
    c->port = ntohs(c->family == AF_INET ? ((struct sockaddr_in *)(void *)&ss)->sin_port
                    : ((struct sockaddr_in6 *)(void *)&ss)->sin6_port);
    format_addr(c->family, c->addr, c->port, l->addrstr, sizeof l->addrstr);
    return 0;
fail:;
    int e = errno;
    close(l->fd);
    l->fd = -1;
    return e;
}

/* Frees an endpoint that is not (or no longer) on the context's list. */
static void ep_destroy(tcp_ep_t *ep)
{
    while (ep->conns) conn_destroy(ep->conns);
    while (ep->inc_h) inc_free(ep, ep->inc_h, 1);
    while (ep->early) inc_free(ep, ep->early, 1);
    for (int i = 0; i < ep->nlis; i++) close_fd(ep->epfd, ep->lis[i].fd);
    close_fd(ep->epfd, ep->evfd);
    if (ep->epfd >= 0) close(ep->epfd);
    free(ep->scratch);
    free(ep->routes);
    free(ep->logged);
    free(ep);
}

static cohort_status_t tcp_ep_open(cohort_tp_ctx_t ctxv, const cohort_ep_info_t *info,
                                   cohort_tp_ep_t *epp, void *addr, size_t *addrlen)
{
    tcp_ctx_t *ctx = (tcp_ctx_t *)ctxv;
    const cohort_host_v1_t *host = ctx->host;
    cohort_status_t st = cohort_ep_open_check(host, "tcp", info, epp, addr, addrlen);
    if (st) return st;
    _Static_assert(TCP_JOBID_LEN > 63, "a job id of 63 characters (cohort_ep_open_check) fits");
    _Static_assert(TCP_ADDR_MAX_SIZE <= COHORT_ADDR_MAX, "the tcp address fits COHORT_ADDR_MAX");
    const char *job = info->job_id ? info->job_id : "";
    if (*addrlen < tcp_addr_size(1))
        return host->error(COHORT_ERR_INVALID_ARG, "tcp: ep_open: the address buffer holds %zu "
                           "bytes, the tcp address needs at least %zu (COHORT_ADDR_MAX is "
                           "always enough)", *addrlen, tcp_addr_size(1));
    size_t fit = (*addrlen - TCP_ADDR_HDR_SIZE) / TCP_ADDR_CAND_SIZE;
    int maxc = fit < TCP_ADDR_MAX_CANDS ? (int)fit : TCP_ADDR_MAX_CANDS;
    long nsocks = TCP_DEFAULT_NSOCKS;
    st = host->setting_long("COHORT_SOCKET_NSOCKS", &nsocks);
    if (st != COHORT_SUCCESS) return st;
    if (nsocks < 1 || nsocks > TCP_MAX_NSOCKS)
        return host->error(COHORT_ERR_INVALID_ARG, "COHORT_SOCKET_NSOCKS=%ld is out of range: "
                           "use 1 to %d sockets per peer", nsocks, TCP_MAX_NSOCKS);
    long probe_ms = TCP_DEFAULT_PROBE_MS;
    st = host->setting_long("COHORT_SOCKET_PROBE_MS", &probe_ms);
    if (st != COHORT_SUCCESS) return st;
    if (probe_ms < 1 || probe_ms > TCP_MAX_PROBE_MS)
        return host->error(COHORT_ERR_INVALID_ARG, "COHORT_SOCKET_PROBE_MS=%ld is out of range: "
                           "use 1 to %d milliseconds (how long the tcp transport waits for a "
                           "peer's address to answer at start-up)", probe_ms, TCP_MAX_PROBE_MS);
    const cohort_netif_t *ifs = NULL;
    int nifs = 0;
    st = host->netifs(&ifs, &nifs);
    if (st != COHORT_SUCCESS) return st;
    if (nifs <= 0 || !ifs) {
        const char *spec = host->setting("COHORT_SOCKET_IFNAME");
        return host->error(COHORT_ERR_TRANSPORT, "tcp: rank %d has no network interface to "
                           "listen on%s%s%s (no interface with an IPv4/IPv6 address is up); "
                           "bring one up or change COHORT_SOCKET_IFNAME", info->rank,
                           spec ? " (COHORT_SOCKET_IFNAME='" : "", spec ? spec : "",
                           spec ? "')" : "");
    }

    tcp_ep_t *ep = calloc(1, sizeof *ep);
    if (!ep) return host->error(COHORT_ERR_NO_MEMORY, "tcp: no memory for an endpoint");
    ep->ctx = ctx;
    ep->host = host;
    ep->rank = info->rank;
    ep->nranks = info->nranks;
    ep->comm_id = info->comm_id;
    memcpy(ep->job_id, job, strlen(job));
    ep->nsocks = (int)nsocks;
    ep->probe_ms = probe_ms;
    ep->ev_ent.kind = FD_EVENT;
    ep->ev_ent.obj = ep;
    ep->epfd = epoll_create1(EPOLL_CLOEXEC);
    ep->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    struct epoll_event eev = { .events = EPOLLIN, .data.ptr = &ep->ev_ent };
    if (ep->epfd < 0 || ep->evfd < 0 || epoll_ctl(ep->epfd, EPOLL_CTL_ADD, ep->evfd, &eev) != 0) {
        int e = errno;
        ep_destroy(ep);
        return host->error(COHORT_ERR_SYSTEM, "tcp: epoll setup for the endpoint of rank %d "
                           "failed: %s%s", info->rank, strerror(e), (e == EMFILE || e == ENFILE)
                           ? " (out of file descriptors: raise ulimit -n)" : "");
    }

    /* One listener per allowed interface, best first; one that fails is left out. */
    char tried[1024] = "";
    size_t tused = 0;
    int considered = 0;
    for (int i = 0; i < nifs && ep->nlis < maxc; i++) {
        const cohort_netif_t *nif = &ifs[i];
        considered = i + 1;
        char a[INET6_ADDRSTRLEN] = "?";
        if (nif->family != AF_INET && nif->family != AF_INET6) {
            host->log(COHORT_LOG_INFO, SUBSYS, "tcp: rank %d leaves out interface %.32s: address "
                      "family %d is neither IPv4 nor IPv6", ep->rank, nif->name, nif->family);
            continue;
        }
        inet_ntop(nif->family, nif->addr, a, sizeof a);
        tcp_listener_t *l = &ep->lis[ep->nlis];
        l->ent.kind = FD_LISTEN;
        l->ent.obj = l;
        l->ep = ep;
        const char *what = NULL;
        int e = listen_on(l, nif, &what);
        if (!e) {
            struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &l->ent };
            if (epoll_ctl(ep->epfd, EPOLL_CTL_ADD, l->fd, &ev) != 0) {
                e = errno;
                what = "epoll_ctl";
                close(l->fd);
                l->fd = -1;
            }
        }
        if (e) {
            host->log(COHORT_LOG_INFO, SUBSYS, "tcp: rank %d cannot listen on interface %.32s "
                      "(%s): %s failed: %s; that interface is left out", ep->rank, nif->name, a,
                      what, strerror(e));
            if (tused < sizeof tried) {
                int w = snprintf(tried + tused, sizeof tried - tused, "%s%.32s %s (%s: %s)",
                                 tused ? ", " : "", nif->name, a, what, strerror(e));
                if (w > 0) tused += (size_t)w;
            }
            continue;
        }
        ep->nlis++;
    }
    if (ep->nlis == 0) {
        ep_destroy(ep);
        return host->error(COHORT_ERR_TRANSPORT, "tcp: rank %d cannot listen on any of its "
                           "interfaces: %s; check that these addresses are still up and "
                           "usable, or choose others with COHORT_SOCKET_IFNAME", info->rank,
                           tried[0] ? tried : "(none with an IPv4/IPv6 address)");
    }
    if (considered < nifs)
        host->log(COHORT_LOG_INFO, SUBSYS, "tcp: rank %d offers only its first %d interface "
                  "addresses (the %d after them are left out; COHORT_SOCKET_IFNAME chooses)",
                  ep->rank, ep->nlis, nifs - considered);
    unsigned char jin[TCP_JOB_MAC_INPUT];
    tcp_job_mac_input(ep->job_id, jin);
    host->auth(jin, sizeof jin, ep->job_hash);
    netns_id(host, ep->netns);

    tcp_addr_t a;
    memset(&a, 0, sizeof a);
    a.magic = TCP_ADDR_MAGIC;
    a.version = TCP_PROTO_VERSION;
    a.ncand = (uint16_t)ep->nlis;
    a.rank = (uint32_t)ep->rank;
    a.nranks = (uint32_t)ep->nranks;
    a.comm_id = ep->comm_id;
    memcpy(a.job_hash, ep->job_hash, TCP_MAC_LEN);
    memcpy(a.netns, ep->netns, TCP_NETNS_LEN);
    for (int i = 0; i < ep->nlis; i++) a.cand[i] = ep->lis[i].cand;
    size_t len = tcp_addr_encode(&a, (unsigned char *)addr, *addrlen);
    if (len == 0) {   /* cannot happen: maxc keeps it inside *addrlen */
        ep_destroy(ep);
        return host->error(COHORT_ERR_INTERNAL, "tcp: rank %d: the address of %d candidates "
                           "does not fit %zu bytes", info->rank, (int)a.ncand, *addrlen);
    }
    *addrlen = len;

    pthread_mutex_lock(&ctx->lock);   /* communicators may open and close on several threads */
    ep->next = ctx->eps;
    if (ctx->eps) ctx->eps->prev = ep;
    ctx->eps = ep;
    pthread_mutex_unlock(&ctx->lock);
    char where[600];
    size_t wu = 0;
    for (int i = 0; i < ep->nlis && wu < sizeof where; i++) {
        int w = snprintf(where + wu, sizeof where - wu, "%s%s (%s)", i ? ", " : "",
                         ep->lis[i].addrstr, ep->lis[i].cand.ifname);
        if (w > 0) wu += (size_t)w;
    }
    host->log(COHORT_LOG_INFO, SUBSYS, "tcp: rank %d listening on %s; %d socket%s per peer",
              ep->rank, where, ep->nsocks, ep->nsocks == 1 ? "" : "s");
    *epp = ep;
    return COHORT_SUCCESS;
}

static cohort_status_t tcp_ep_close(cohort_tp_ep_t epv)
{
    tcp_ep_t *ep = (tcp_ep_t *)epv;
    if (!ep) return COHORT_SUCCESS;
    tcp_ctx_t *ctx = ep->ctx;
    pthread_mutex_lock(&ctx->lock);
    if (ep->prev) ep->prev->next = ep->next;
    else ctx->eps = ep->next;
    if (ep->next) ep->next->prev = ep->prev;
    pthread_mutex_unlock(&ctx->lock);
    ep_destroy(ep);
    return COHORT_SUCCESS;
}

/* Checks that a blob is a tcp address of this job, communicator and peer: 0, or -1 with the
 * reason in why. */
static int peer_addr_check(const tcp_ep_t *ep, int peer, const void *blob, size_t len,
                           tcp_addr_t *a, char *why, size_t wl)
{
    int e = tcp_addr_decode(blob, len, a);
    if (e != TCP_ADDR_OK) {
        snprintf(why, wl, "the address of rank %d (%zu bytes) is not usable: %s", peer, len,
                 tcp_addr_strerror(e));
        return -1;
    }
    if (!tcp_ct_equal(a->job_hash, ep->job_hash, TCP_MAC_LEN)) {
        snprintf(why, wl, "the address of rank %d belongs to another job (different "
                 "COHORT_JOB_ID or COHORT_SECRET)", peer);
        return -1;
    }
    if (a->rank != (uint32_t)peer || a->comm_id != ep->comm_id ||
        a->nranks != (uint32_t)ep->nranks) {
        snprintf(why, wl, "the address given for rank %d is rank %u's of communicator %llu with "
                 "%u ranks (expected communicator %llu with %d ranks)", peer, (unsigned)a->rank,
                 (unsigned long long)a->comm_id, (unsigned)a->nranks,
                 (unsigned long long)ep->comm_id, ep->nranks);
        return -1;
    }
    return 0;
}

static int tcp_can_reach(cohort_tp_ep_t epv, int peer, const void *peer_addr, size_t addrlen)
{
    tcp_ep_t *ep = (tcp_ep_t *)epv;
    if (!ep || peer < 0 || peer >= ep->nranks || peer == ep->rank) return 0;
    tcp_addr_t a;
    char why[400];
    if (peer_addr_check(ep, peer, peer_addr, addrlen, &a, why, sizeof why) != 0) {
        ep->host->log(COHORT_LOG_INFO, SUBSYS, "tcp: rank %d cannot use tcp to rank %d: %s",
                      ep->rank, peer, why);
        return 0;
    }
    /* Accept the probes waiting for us first: every rank probes at the same time, and a
     * listener whose backlog overflows drops SYNs (which would look like no answer). */
    (void)tcp_progress(ep);
    if (!ep->routes && !(ep->routes = calloc((size_t)ep->nranks, sizeof *ep->routes))) {
        ep->host->log(COHORT_LOG_WARN, SUBSYS, "tcp: rank %d: no memory for the reachability "
                      "table of %d ranks; tcp is not used", ep->rank, ep->nranks);
        return 0;
    }
    return probe_peer(ep, peer, &a);
}

static cohort_status_t tcp_connect(cohort_tp_ep_t epv, int peer, const void *peer_addr,
                                   size_t addrlen, cohort_tp_conn_t *connp)
{
    tcp_ep_t *ep = (tcp_ep_t *)epv;
    const cohort_host_v1_t *host = ep->host;
    if (!connp) return host->error(COHORT_ERR_INVALID_ARG, "tcp: connect needs a conn pointer");
    *connp = NULL;
    if (peer < 0 || peer >= ep->nranks)
        return host->error(COHORT_ERR_INVALID_ARG, "tcp: connect: rank %d is not in [0,%d)",
                           peer, ep->nranks);
    tcp_addr_t pa;
    char why[400];
    if (peer_addr_check(ep, peer, peer_addr, addrlen, &pa, why, sizeof why) != 0)
        return host->error(COHORT_ERR_INVALID_ARG, "tcp: rank %d connecting to rank %d: %s "
                           "(a different cohort version, or another transport's address?)",
                           ep->rank, peer, why);
    /* The candidate can_reach found answering; without a probe (can_reach not called for this
     * peer), the peer's most preferred candidate that this rank may use at all. */
    const tcp_cand_t *cand = NULL;
    const route_t *rt = ep->routes ? &ep->routes[peer] : NULL;
    if (rt && rt->state == RT_CHOSEN)
        for (unsigned i = 0; i < pa.ncand && !cand; i++)
            if (cand_same_ip(&pa.cand[i], &rt->cand) && pa.cand[i].port == rt->cand.port)
                cand = &pa.cand[i];
    if (!cand && rt && rt->state == RT_NONE)
        return host->error(COHORT_ERR_TRANSPORT, "tcp: rank %d connecting to rank %d: none of "
                           "its addresses answered the reachability probe (the INFO log of "
                           "COHORT_DEBUG=INFO lists each address and why); check the network "
                           "between the hosts and firewalls, or choose interfaces with "
                           "COHORT_SOCKET_IFNAME", ep->rank, peer);
    char skipped[1200] = "";
    size_t su = 0;
    for (unsigned i = 0; i < pa.ncand && !cand; i++) {
        char r[160];
        if (!cand_skip_reason(ep, &pa, &pa.cand[i], r, sizeof r) &&
            !unreach_lookup(ep->ctx, &pa.cand[i], r, sizeof r)) {
            cand = &pa.cand[i];
            break;
        }
        char cs[TCP_ADDRSTR + TCP_IFNAME_LEN + 2];
        cand_format(&pa.cand[i], cs, sizeof cs);
        if (su < sizeof skipped) {
            int w = snprintf(skipped + su, sizeof skipped - su, "%s%s (%s)", su ? ", " : "", cs,
                             r);
            if (w > 0) su += (size_t)w;
        }
    }
    if (!cand)
        return host->error(COHORT_ERR_TRANSPORT, "tcp: rank %d connecting to rank %d: none of "
                           "its addresses is usable from here: %s; set COHORT_SOCKET_IFNAME so "
                           "that the hosts share a network", ep->rank, peer, skipped);
    tcp_conn_t *c = conn_new(ep, peer, 1);
    if (!c) return host->error(COHORT_ERR_NO_MEMORY, "tcp: no memory for a connection");
    c->nsocks = ep->nsocks;
    format_addr(cand->family, cand->addr, cand->port, c->peer_addr, sizeof c->peer_addr);
    struct sockaddr_storage ss;
    socklen_t sl = make_sockaddr(cand->family, cand->addr, cand->port, cand->scope_id, &ss);
    for (int i = 0; i < c->nsocks; i++) {
        tsock_t *s = &c->socks[i];
        s->fd = socket(cand->family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (s->fd < 0) {
            int e = errno;
            conn_destroy(c);
            return host->error(COHORT_ERR_SYSTEM, "tcp: socket() for the connection to rank %d "
                               "failed: %s%s", peer, strerror(e), (e == EMFILE || e == ENFILE)
                               ? " (out of file descriptors: raise ulimit -n)" : "");
        }
        set_nodelay(s->fd);
        tcp_hello_t h;
        memset(&h, 0, sizeof h);
        h.magic = TCP_HELLO_MAGIC;
        h.version = TCP_PROTO_VERSION;
        memcpy(h.job_id, ep->job_id, TCP_JOBID_LEN);
        h.comm_id = ep->comm_id;
        h.src = (uint32_t)ep->rank;
        h.dst = (uint32_t)peer;
        h.nranks = (uint32_t)ep->nranks;
        h.sock_idx = (uint32_t)i;
        h.nsocks = (uint32_t)c->nsocks;
        make_nonce(host, h.nonce);
        tcp_hello_encode(&h, s->hello);
        unsigned char min[TCP_HELLO_MAC_INPUT];
        tcp_hello_mac_input(s->hello, min);
        host->auth(min, sizeof min, s->hello + TCP_HELLO_MAC_OFF);
        s->state = S_CONNECTING;
        struct epoll_event ev = { .events = EPOLLOUT, .data.ptr = &s->ent };
        if (epoll_ctl(ep->epfd, EPOLL_CTL_ADD, s->fd, &ev) != 0) {
            int e = errno;
            conn_destroy(c);
            return host->error(COHORT_ERR_SYSTEM, "tcp: epoll_ctl for the connection to rank %d "
                               "failed: %s", peer, strerror(e));
        }
        s->events = EPOLLOUT;
        /* EINTR on a non-blocking connect: the attempt goes on in the background. */
        if (connect(s->fd, (struct sockaddr *)&ss, sl) != 0 && errno != EINPROGRESS &&
            errno != EINTR) {
            conn_fail_errno(c, errno, "connecting to");
            break;
        }
    }
    host->log(COHORT_LOG_TRACE, SUBSYS, "tcp: rank %d connecting to rank %d at %s (%s, %s)",
              ep->rank, peer, c->peer_addr, cand->ifname,
              rt && rt->state == RT_CHOSEN ? "it answered the probe" : "not probed: its first "
              "usable address");
    *connp = c;
    return COHORT_SUCCESS;
}

static cohort_status_t tcp_accept(cohort_tp_ep_t epv, int peer, cohort_tp_conn_t *connp)
{
    tcp_ep_t *ep = (tcp_ep_t *)epv;
    const cohort_host_v1_t *host = ep->host;
    if (!connp) return host->error(COHORT_ERR_INVALID_ARG, "tcp: accept needs a conn pointer");
    *connp = NULL;
    if (peer < 0 || peer >= ep->nranks)
        return host->error(COHORT_ERR_INVALID_ARG, "tcp: accept: rank %d is not in [0,%d)",
                           peer, ep->nranks);
    if (find_accept_conn(ep, peer))
        return host->error(COHORT_ERR_INVALID_ARG, "tcp: accept: rank %d is already accepted on "
                           "this endpoint", peer);
    tcp_conn_t *c = conn_new(ep, peer, 0);
    if (!c) return host->error(COHORT_ERR_NO_MEMORY, "tcp: no memory for a connection");
    for (incoming_t *in = ep->early; in; in = in->next)
        if (in->src == peer) c->claimed[in->sock_idx] = 1;
    claim_early(c);
    *connp = c;
    return COHORT_SUCCESS;
}

static cohort_status_t tcp_conn_test(cohort_tp_conn_t connv)
{
    tcp_conn_t *c = (tcp_conn_t *)connv;
    if (c->state == C_CONNECTING) conn_progress(c);
    if (c->state == C_READY) return COHORT_SUCCESS;
    if (c->state == C_FAILED) return c->ep->host->error(c->err, "%s", c->errmsg);
    return COHORT_IN_PROGRESS;
}

static cohort_status_t tcp_conn_close(cohort_tp_conn_t connv)
{
    tcp_conn_t *c = (tcp_conn_t *)connv;
    if (c) conn_destroy(c);
    return COHORT_SUCCESS;
}

static cohort_status_t post(tcp_conn_t *c, int is_send, void *buf, size_t len, uint64_t tag,
                            cohort_tp_req_t *reqp)
{
    const cohort_host_v1_t *host = c->ep->host;
    if (!reqp) return host->error(COHORT_ERR_INVALID_ARG, "tcp: isend/irecv need a request "
                                  "pointer");
    *reqp = NULL;
    if (!buf && len)
        return host->error(COHORT_ERR_INVALID_ARG, "tcp: %s of %zu bytes with a NULL buffer "
                           "(rank %d)", is_send ? "isend" : "irecv", len, c->peer);
    if (c->state == C_FAILED) return host->error(c->err, "%s", c->errmsg);
    int cap = c->nsocks ? c->nsocks : TCP_MAX_NSOCKS;
    tcp_req_t *r = calloc(1, sizeof *r + (size_t)cap * sizeof(seg_t));
    if (!r) return host->error(COHORT_ERR_NO_MEMORY, "tcp: no memory for a request");
    r->conn = c;
    r->is_send = is_send;
    r->buf = (char *)buf;
    r->len = len;
    r->tag = tag;
    r->nbytes = is_send ? len : 0;
    r->nseg_cap = cap;
    r->status = COHORT_IN_PROGRESS;
    r->anext = c->all;
    if (c->all) c->all->aprev = r;
    c->all = r;
    *reqp = r;
    if (c->state == C_READY) {
        c->ep->cur_req = r;
        if (is_send) post_send(r);
        else post_recv(r);
        c->ep->cur_req = NULL;
        conn_update(c);
    } else {
        q_push(&c->def_h, &c->def_t, r);
    }
    return COHORT_SUCCESS;
}

static cohort_status_t tcp_isend(cohort_tp_conn_t connv, const void *buf, size_t len,
                                 uint64_t tag, cohort_tp_mr_t mr, cohort_tp_req_t *req)
{
    (void)mr;
    return post((tcp_conn_t *)connv, 1, (void *)buf, len, tag, req);
}

static cohort_status_t tcp_irecv(cohort_tp_conn_t connv, void *buf, size_t len, uint64_t tag,
                                 cohort_tp_mr_t mr, cohort_tp_req_t *req)
{
    (void)mr;
    return post((tcp_conn_t *)connv, 0, buf, len, tag, req);
}

static cohort_status_t tcp_test(cohort_tp_req_t reqv, size_t *nbytes)
{
    tcp_req_t *r = (tcp_req_t *)reqv;
    tcp_conn_t *c = r->conn;
    if (!r->done) {
        c->ep->cur_req = r;
        conn_progress(c);
        c->ep->cur_req = NULL;
    }
    if (!r->done) return COHORT_IN_PROGRESS;
    cohort_status_t st = r->status;
    if (st == COHORT_SUCCESS) {
        if (nbytes) *nbytes = r->nbytes;
    } else {
        c->ep->host->error(st, "%s", r->errmsg ? r->errmsg : c->errmsg);
    }
    r->released = 1;
    req_maybe_free(r);
    return st;
}

static cohort_status_t tcp_progress(cohort_tp_ep_t epv)
{
    tcp_ep_t *ep = (tcp_ep_t *)epv;
    if (ep->signalled) {
        uint64_t v;
        ssize_t r;
        do r = read(ep->evfd, &v, sizeof v);
        while (r < 0 && errno == EINTR);
        ep->signalled = 0;
    }
    ep->in_progress = 1;
    cohort_status_t st = ep_progress(ep);
    ep->in_progress = 0;
    return st;
}

static int tcp_ep_fd(cohort_tp_ep_t epv)
{
    return epv ? ((tcp_ep_t *)epv)->epfd : -1;
}

__attribute__((visibility("default")))
const cohort_transport_v1_t cohort_transport_v1 = {
    .size = sizeof(cohort_transport_v1_t),
    .abi_version = COHORT_PLUGIN_ABI_VERSION,
    .name = "tcp",
    .version = TCP_PLUGIN_VERSION,
    .init = tcp_init,
    .finalize = tcp_finalize,
    .get_attr = tcp_get_attr,
    .ep_open = tcp_ep_open,
    .ep_close = tcp_ep_close,
    .can_reach = tcp_can_reach,
    .connect = tcp_connect,
    .accept = tcp_accept,
    .conn_test = tcp_conn_test,
    .conn_close = tcp_conn_close,
    .mem_reg = NULL,
    .mem_dereg = NULL,
    .isend = tcp_isend,
    .irecv = tcp_irecv,
    .test = tcp_test,
    .progress = tcp_progress,
    .ep_fd = tcp_ep_fd,
    .coll = NULL,
};
