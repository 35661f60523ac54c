/* SPDX-License-Identifier: BSD-3-Clause */
/* TCP transport: the data path. Requests and their segments, the epoll interest of a conn's
 * sockets, connection failure (every pending request fails with the conn's error), posting
 * sends and receives (message header on socket 0, payload striped over the sockets), the
 * send/receive progress of each socket (socket 0's read-ahead stage and header matching), the
 * endpoint's event loop (ep_progress: listeners, handshaking sockets and conn sockets) and the
 * ABI's isend, irecv, test and progress. The wire format is in tcp_wire.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <cohort/plugin.h>
#include "transports/common/kit_fail.h"

#include "tcp_wire.h"
#include "tcp_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

/* ---- requests ---------------------------------------------------------------------------- */

KIT_FIFO(q, tcp_req_t, qnext);   /* a conn's unmatched and deferred requests */
KIT_FIFO(seg, seg_t, next);      /* a socket's send and receive segments */
KIT_LIST(all, tcp_req_t, anext, aprev);   /* a conn's live requests */

/* A zeroed request with room for cap segments: from the endpoint's pool when cap is the
 * endpoint's nsocks (the pool's size), else calloc's. */
static tcp_req_t *req_get(tcp_ep_t *ep, int cap)
{
    return kit_pool_get_sized(&ep->reqs, tcp_req_size(cap));
}

/* A request off every list: what it owns freed, its memory back to the endpoint's pool. */
void tcp_req_put(tcp_ep_t *ep, tcp_req_t *r)
{
    free(r->errmsg);
    kit_pool_put_sized(&ep->reqs, r, tcp_req_size(r->nseg_cap));
}

static void req_maybe_free(tcp_req_t *r)
{
    if (!r->done || !r->released || r->segs_left > 0) return;
    tcp_conn_t *c = r->conn;
    all_del(&c->all, r);
    tcp_req_put(c->ep, r);
}

static void req_finish(tcp_req_t *r, cohort_status_t st)
{
    if (r->done) return;
    r->done = 1;
    r->status = st;
    tcp_ep_t *ep = r->conn->ep;
    if (r != ep->cur_req) kit_wake_signal(&ep->wake);   /* tcp_test's caller sees r itself */
}

static void seg_complete(seg_t *s)
{
    tcp_req_t *r = s->req;
    if (--r->segs_left == 0) {
        req_finish(r, COHORT_SUCCESS);
        req_maybe_free(r);
    }
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

static void sock_update(tsock_t *s)
{
    if (s->fd < 0) return;
    uint32_t want = sock_wanted_events(s);
    if (want == s->events) return;
    struct epoll_event ev = { .events = want, .data.ptr = &s->ent };
    if (epoll_ctl(s->conn->ep->epfd, EPOLL_CTL_MOD, s->fd, &ev) != 0) {
        int e = errno;
        tcp_conn_fail(s->conn, COHORT_ERR_TRANSPORT, "tcp: epoll_ctl on the socket to rank %d "
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

void tcp_conn_close_sockets(tcp_conn_t *c)
{
    for (int i = 0; i < TCP_MAX_NSOCKS; i++) {
        tsock_t *s = &c->socks[i];
        tcp_close_fd(c->ep->epfd, s->fd);
        s->fd = -1;
        s->state = S_CLOSED;
        s->events = 0;
        while (s->txh) seg_pop(&s->txh, &s->txt)->req->segs_left--;
        while (s->rxh) seg_pop(&s->rxh, &s->rxt)->req->segs_left--;
    }
}

/* Every pending and later request fails with st and the message. */
void tcp_conn_fail(tcp_conn_t *c, cohort_status_t st, const char *fmt, ...)
{
    KIT_CONN_FAIL_ONCE(c, C_FAILED, st, fmt);
    tcp_conn_close_sockets(c);
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
void tcp_conn_fail_errno(tcp_conn_t *c, int e, const char *what)
{
    cohort_status_t st = (e == ECONNRESET || e == EPIPE || e == ECONNREFUSED ||
                          e == ECONNABORTED || e == ENOTCONN)
        ? COHORT_ERR_PEER_LOST : COHORT_ERR_TRANSPORT;
    tcp_conn_fail(c, st, "tcp: %s rank %d at %s failed: %s%s", what, c->peer, c->peer_addr,
                  strerror(e), st == COHORT_ERR_PEER_LOST
                  ? " (the peer process exited, crashed or closed the connection)"
                  : " (check the network between the two hosts and COHORT_SOCKET_IFNAME)");
}

static void conn_fail_eof(tcp_conn_t *c)
{
    tcp_conn_fail(c, COHORT_ERR_PEER_LOST, "tcp: rank %d at %s closed the connection (the peer "
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

void tcp_conn_ready(tcp_conn_t *c)
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
            tcp_conn_fail_errno(c, errno, "sending to");
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
            tcp_conn_fail_errno(c, errno, "receiving from");
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
                tcp_conn_fail(c, COHORT_ERR_NO_MEMORY, "tcp: no memory for a discard buffer "
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
            tcp_conn_fail_errno(c, errno, "receiving from");
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

/* ---- progress ---------------------------------------------------------------------------- */

static void sock_event(tsock_t *s, uint32_t revents)
{
    tcp_conn_t *c = s->conn;
    if (c->state == C_FAILED || s->fd < 0) return;
    if (s->state != S_READY) {
        tcp_sock_connect_progress(s);
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
            tcp_conn_fail_errno(c, err, "connection to");
        }
    }
    conn_update(c);
}

static cohort_status_t ep_progress(tcp_ep_t *ep)
{
    struct epoll_event evs[64];
    for (int i = 0; i < ep->nlis; i++) {   /* listeners paused for lack of descriptors */
        tcp_listener_t *l = &ep->lis[i];
        if (l->paused_until > 0 && tcp_mono_ms() >= l->paused_until) {
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
                tcp_listen_progress((tcp_listener_t *)e->obj);
                break;
            case FD_INCOMING:
                tcp_inc_progress(ep, (incoming_t *)e->obj, evs[i].events);
                break;
            case FD_SOCK:
                sock_event((tsock_t *)e->obj, evs[i].events);
                break;
            default:
                break;
            }
        }
        tcp_inc_trim(ep);
        if (n < 64) break;
    }
    return COHORT_SUCCESS;
}

/* Advances one conn without going through epoll. */
void tcp_conn_progress(tcp_conn_t *c)
{
    if (c->state == C_CONNECTING) {
        if (c->connector) {
            for (int i = 0; i < c->nsocks && c->state == C_CONNECTING; i++)
                if (c->socks[i].state != S_READY) tcp_sock_connect_progress(&c->socks[i]);
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

/* ---- the ABI: requests and progress ------------------------------------------------------ */

static cohort_status_t post(tcp_conn_t *c, int is_send, void *buf, size_t len, uint64_t tag,
                            cohort_tp_req_t *reqp)
{
    const cohort_host_v1_t *host = c->ep->host;
    cohort_status_t st = kit_post_args(host, "tcp", is_send, buf, len, c->peer, reqp,
                                       c->state == C_FAILED ? c->err : COHORT_SUCCESS, c->errmsg);
    if (st) return st;
    int cap = c->nsocks ? c->nsocks : TCP_MAX_NSOCKS;
    tcp_req_t *r = req_get(c->ep, cap);
    if (!r) return host->error(COHORT_ERR_NO_MEMORY, "tcp: no memory for a request");
    r->conn = c;
    r->is_send = is_send;
    r->buf = (char *)buf;
    r->len = len;
    r->tag = tag;
    r->nbytes = is_send ? len : 0;
    r->nseg_cap = cap;
    r->status = COHORT_IN_PROGRESS;
    all_add(&c->all, r);
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

cohort_status_t tcp_isend(cohort_tp_conn_t connv, const void *buf, size_t len,
                          uint64_t tag, cohort_tp_mr_t mr, cohort_tp_req_t *req)
{
    (void)mr;
    return post((tcp_conn_t *)connv, 1, (void *)buf, len, tag, req);
}

cohort_status_t tcp_irecv(cohort_tp_conn_t connv, void *buf, size_t len, uint64_t tag,
                          cohort_tp_mr_t mr, cohort_tp_req_t *req)
{
    (void)mr;
    return post((tcp_conn_t *)connv, 0, buf, len, tag, req);
}

cohort_status_t tcp_test(cohort_tp_req_t reqv, size_t *nbytes)
{
    tcp_req_t *r = (tcp_req_t *)reqv;
    tcp_conn_t *c = r->conn;
    if (!r->done) {
        c->ep->cur_req = r;
        tcp_conn_progress(c);
        c->ep->cur_req = NULL;
    }
    if (!r->done) return COHORT_IN_PROGRESS;
    cohort_status_t st = kit_req_outcome(c->ep->host, r->status, r->nbytes, nbytes, r->errmsg,
                                         c->errmsg);
    r->released = 1;
    req_maybe_free(r);
    return st;
}

cohort_status_t tcp_progress(cohort_tp_ep_t epv)
{
    tcp_ep_t *ep = (tcp_ep_t *)epv;
    if (ep->wake.pending) kit_wake_drain(&ep->wake);
    ep->wake.in_progress = 1;
    cohort_status_t st = ep_progress(ep);
    ep->wake.in_progress = 0;
    return st;
}

