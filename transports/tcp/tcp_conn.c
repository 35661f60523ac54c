/* SPDX-License-Identifier: BSD-3-Clause */
/* TCP transport: connections. The connector side (the hello with its fresh nonce, connect and
 * the check of the acceptor's ack), the accept side (listening sockets, accepted sockets in
 * their handshake, the hello checks and refusals, authenticated sockets parked until accept()
 * claims them, probe connections closed quietly), conn creation and destruction, and the ABI's
 * connect, accept, conn_test and conn_close. Which address connect dials comes from
 * tcp_addr.c; the wire format is in tcp_wire.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <cohort/plugin.h>
#include "transports/common/kit_objs.h"

#include "tcp_wire.h"
#include "tcp_int.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---- connector handshake ----------------------------------------------------------------- */

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

void tcp_sock_connect_progress(tsock_t *s)
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
                tcp_conn_fail_errno(c, err, "connecting to");
                return;
            }
            if (!(p.revents & POLLOUT)) {
                tcp_conn_fail(c, COHORT_ERR_PEER_LOST, "tcp: connecting to rank %d at %s failed "
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
                tcp_conn_fail_errno(c, errno, "handshake with");
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
                tcp_conn_fail(c, COHORT_ERR_TRANSPORT, "tcp: rank %d at %s closed the connection "
                              "during the handshake: it refused this connection (its log says "
                              "why; different COHORT_JOB_ID or COHORT_SECRET, a different cohort "
                              "version, or the wrong address?)", c->peer, c->peer_addr);
                return;
            }
            if (r < 0) {
                if (errno == EINTR) continue;
                if (errno == EAGAIN || errno == EWOULDBLOCK) return;
                tcp_conn_fail_errno(c, errno, "handshake with");
                return;
            }
            s->ack_off += (size_t)r;
            if (s->ack_off < TCP_ACK_SIZE) return;
            const char *why = tcp_ack_check(s->ack, tcp_ack_valid(host, s->ack, s->hello),
                                            c->peer, s->idx);
            if (why) {
                tcp_conn_fail(c, COHORT_ERR_TRANSPORT, "tcp: the endpoint at %s that should be "
                              "rank %d failed authentication: %s", c->peer_addr, c->peer, why);
                return;
            }
            s->state = S_READY;
            if (++c->nready == c->nsocks) tcp_conn_ready(c);
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
        KIT_LIST_UNLINK(ep->early, in);
    } else {
        if (in->prev) in->prev->next = in->next;
        else ep->inc_h = in->next;
        if (in->next) in->next->prev = in->prev;
        else ep->inc_t = in->prev;
        ep->ninc--;
    }
    in->next = in->prev = NULL;
}

void tcp_inc_free(tcp_ep_t *ep, incoming_t *in, int close_it)
{
    inc_unlink(ep, in);
    if (close_it) tcp_close_fd(ep->epfd, in->fd);
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
    tcp_inc_free(ep, in, 1);
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
    tcp_inc_free(ep, in, 0);
    s->fd = fd;
    s->state = S_READY;
    s->events = 0;
    struct epoll_event ev = { .events = 0, .data.ptr = &s->ent };
    if (epoll_ctl(ep->epfd, EPOLL_CTL_MOD, fd, &ev) != 0) {
        int e = errno;
        tcp_conn_fail(c, COHORT_ERR_TRANSPORT, "tcp: epoll_ctl for the connection from rank %d "
                      "failed: %s", c->peer, strerror(e));
        return;
    }
    if (++c->nready == c->nsocks) tcp_conn_ready(c);
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
    if (!tcp_hello_valid(host, in->hello)) {
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
    /* Answer with our own proof, sealed to the connector's hello (which holds its fresh nonce). */
    tcp_ack_seal(host, in->ack, in->hello, (uint32_t)ep->rank, h.sock_idx);
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
    KIT_LIST_PUSH(ep->early, in);
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
    tcp_inc_free(ep, in, 1);
}

void tcp_inc_progress(tcp_ep_t *ep, incoming_t *in, uint32_t revents)
{
    if (in->state == IN_READY) {
        /* Waiting for accept(): the interest is empty, so only errors and hangups get here. */
        if (revents & (EPOLLERR | EPOLLHUP)) {
            ep->host->log(COHORT_LOG_INFO, SUBSYS, "tcp: authenticated connection from rank %d "
                          "(%s) was reset before accept() claimed it; dropped", in->src,
                          in->addr);
            tcp_inc_free(ep, in, 1);
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

void tcp_listen_progress(tcp_listener_t *l)
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
                l->paused_until = tcp_mono_ms() + TCP_ACCEPT_PAUSE_MS;
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
        tcp_format_sockaddr(&ss, in->addr, sizeof in->addr);
        tcp_set_nodelay(fd);
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
        tcp_inc_progress(ep, in, 0);
    }
}

/* Keeps a flood of silent connections from eating every descriptor: the oldest goes first. */
void tcp_inc_trim(tcp_ep_t *ep)
{
    while (ep->ninc > TCP_MAX_INCOMING)
        inc_reject(ep, ep->inc_h, "more than %d connections are waiting for their handshake; "
                   "dropping the oldest", TCP_MAX_INCOMING);
}

/* ---- conn lifetime ----------------------------------------------------------------------- */

static tcp_conn_t *conn_new(tcp_ep_t *ep, int peer, int connector)
{
    tcp_conn_t *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    KIT_CONN_INIT(c, ep, peer, connector, C_CONNECTING);
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
    KIT_LIST_PUSH(ep->conns, c);
    return c;
}

void tcp_conn_destroy(tcp_conn_t *c)
{
    tcp_ep_t *ep = c->ep;
    KIT_LIST_UNLINK(ep->conns, c);
    tcp_conn_close_sockets(c);
    for (tcp_req_t *r = c->all, *next; r; r = next) {
        next = r->anext;
        tcp_req_put(ep, r);
    }
    free(c->stage);
    free(c);
}

/* ---- the ABI: connections ---------------------------------------------------------------- */

cohort_status_t tcp_connect(cohort_tp_ep_t epv, int peer, const void *peer_addr,
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
    if (tcp_peer_addr_check(ep, peer, peer_addr, addrlen, &pa, why, sizeof why) != 0)
        return host->error(COHORT_ERR_INVALID_ARG, "tcp: rank %d connecting to rank %d: %s "
                           "(a different cohort version, or another transport's address?)",
                           ep->rank, peer, why);
    /* The candidate can_reach found answering; without a probe (can_reach not called for this
     * peer), the peer's most preferred candidate that this rank may use at all. */
    const tcp_cand_t *cand = NULL;
    const route_t *rt = ep->routes ? &ep->routes[peer] : NULL;
    if (rt && rt->state == RT_CHOSEN)
        for (unsigned i = 0; i < pa.ncand && !cand; i++)
            if (tcp_cand_same_ip(&pa.cand[i], &rt->cand) && pa.cand[i].port == rt->cand.port)
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
        if (!tcp_cand_skip_reason(ep, &pa, &pa.cand[i], r, sizeof r) &&
            !tcp_unreach_lookup(ep->ctx, &pa.cand[i], r, sizeof r)) {
            cand = &pa.cand[i];
            break;
        }
        char cs[TCP_ADDRSTR + TCP_IFNAME_LEN + 2];
        tcp_cand_format(&pa.cand[i], cs, sizeof cs);
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
    tcp_format_addr(cand->family, cand->addr, cand->port, c->peer_addr, sizeof c->peer_addr);
    struct sockaddr_storage ss;
    socklen_t sl = tcp_make_sockaddr(cand->family, cand->addr, cand->port, cand->scope_id, &ss);
    for (int i = 0; i < c->nsocks; i++) {
        tsock_t *s = &c->socks[i];
        s->fd = socket(cand->family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (s->fd < 0) {
            int e = errno;
            tcp_conn_destroy(c);
            return host->error(COHORT_ERR_SYSTEM, "tcp: socket() for the connection to rank %d "
                               "failed: %s%s", peer, strerror(e), (e == EMFILE || e == ENFILE)
                               ? " (out of file descriptors: raise ulimit -n)" : "");
        }
        tcp_set_nodelay(s->fd);
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
        tcp_hello_seal(host, s->hello);
        s->state = S_CONNECTING;
        struct epoll_event ev = { .events = EPOLLOUT, .data.ptr = &s->ent };
        if (epoll_ctl(ep->epfd, EPOLL_CTL_ADD, s->fd, &ev) != 0) {
            int e = errno;
            tcp_conn_destroy(c);
            return host->error(COHORT_ERR_SYSTEM, "tcp: epoll_ctl for the connection to rank %d "
                               "failed: %s", peer, strerror(e));
        }
        s->events = EPOLLOUT;
        /* EINTR on a non-blocking connect: the attempt goes on in the background. */
        if (connect(s->fd, (struct sockaddr *)&ss, sl) != 0 && errno != EINPROGRESS &&
            errno != EINTR) {
            tcp_conn_fail_errno(c, errno, "connecting to");
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

cohort_status_t tcp_accept(cohort_tp_ep_t epv, int peer, cohort_tp_conn_t *connp)
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

cohort_status_t tcp_conn_test(cohort_tp_conn_t connv)
{
    tcp_conn_t *c = (tcp_conn_t *)connv;
    if (c->state == C_CONNECTING) tcp_conn_progress(c);
    if (c->state == C_READY) return COHORT_SUCCESS;
    if (c->state == C_FAILED) return c->ep->host->error(c->err, "%s", c->errmsg);
    return COHORT_IN_PROGRESS;
}

cohort_status_t tcp_conn_close(cohort_tp_conn_t connv)
{
    tcp_conn_t *c = (tcp_conn_t *)connv;
    if (c) tcp_conn_destroy(c);
    return COHORT_SUCCESS;
}

