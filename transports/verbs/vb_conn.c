/* SPDX-License-Identifier: BSD-3-Clause */
/* cohort RDMA verbs transport: connections. A connection's failure (vb_conn_fail), the
 * handshake over its TCP socket (authenticated hellos carrying QPN and PSN, the queue pair's
 * moves to RTR and RTS, incoming handshake connections that wait for their accept), the socket
 * kept open afterwards (the peer's BYE count, its end of file: a gone peer), setting up a
 * connection (its Reliable Connected queue pair, registered message buffers and pre-posted
 * receives) and tearing it down, and the plugin API of connections: connect, accept,
 * conn_test, conn_close. The design ("conn") is described at the top of verbs.c.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <cohort/plugin.h>
#include "transports/common/kit_auth.h"
#include "transports/common/kit_bytes.h"
#include "transports/common/kit_fail.h"

#include "vb_credit.h"
#include "vb_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

_Static_assert(VB_HELLO_SIZE - VB_HELLO_MAC_OFF == KIT_MAC_LEN, "the hello ends in the kit's MAC");

/* ---- connection failure ------------------------------------------------------------------ */

void vb_conn_fail(vb_conn_t *c, cohort_status_t st, const char *fmt, ...)
{
    KIT_CONN_FAIL_ONCE(c, C_FAILED, st, fmt);
    if (c->fd >= 0) epoll_ctl(c->ep->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    for (vb_req_t *r = c->reqs; r; r = r->next) vb_req_done(r, st);
    c->txq = c->txq_tail = c->rq = c->rq_tail = NULL;
    kit_wake_signal(&c->ep->wake);
}

/* ---- the handshake ----------------------------------------------------------------------- */

static void hello_build(vb_conn_t *c, int kind)
{
    vb_ep_t *ep = c->ep;
    unsigned char *p = c->sbuf;
    memset(p, 0, VB_HELLO_SIZE);
    kit_put_be32(p, VB_HELLO_MAGIC);
    kit_put_be32(p + 4, (uint32_t)kind);
    kit_put_be32(p + 8, (uint32_t)ep->rank);
    kit_put_be32(p + 12, (uint32_t)c->peer);
    kit_put_be64(p + 16, ep->comm_id);
    kit_put_be32(p + 24, c->qp->qp_num);
    kit_put_be32(p + 28, c->psn);
    memcpy(p + 32, ep->job, 63);
    memcpy(p + 96, ep->ctx->gid.raw, 16);
    kit_put_be32(p + 112, ep->ctx->lid);
    kit_put_be32(p + 116, (uint32_t)ep->ctx->mtu);
    kit_frame_seal(ep->host, p, VB_HELLO_SIZE);
    c->soff = 0;
}

/* 0: valid hello of `kind` for this endpoint; -1 with why. */
static int hello_check(vb_ep_t *ep, const unsigned char *p, int kind, const char **why)
{
    if (kit_get_be32(p) != VB_HELLO_MAGIC) { *why = "not a cohort verbs handshake"; return -1; }
    if (!kit_frame_valid(ep->host, p, VB_HELLO_SIZE)) { *why = "bad HMAC (another job?)"; return -1; }
    if (kit_get_be32(p + 4) != (uint32_t)kind) { *why = "unexpected handshake step"; return -1; }
    if (kit_get_be64(p + 16) != ep->comm_id) { *why = "another communicator"; return -1; }
    if (kit_get_be32(p + 12) != (uint32_t)ep->rank) { *why = "meant for another rank"; return -1; }
    if (kit_get_be32(p + 8) >= (uint32_t)ep->nranks) { *why = "rank out of range"; return -1; }
    return 0;
}

static int qp_connect(vb_conn_t *c)
{
    vb_ctx_t *x = c->ep->ctx;
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = x->mtu < c->rmtu ? x->mtu : c->rmtu;
    a.dest_qp_num = c->rqpn;
    a.rq_psn = c->rpsn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.port_num = (uint8_t)x->port;
    a.ah_attr.dlid = c->rlid;
    if (x->link_layer == IBV_LINK_LAYER_ETHERNET || x->gid_index > 0) {
        a.ah_attr.is_global = 1;
        a.ah_attr.grh.dgid = c->rgid;
        a.ah_attr.grh.sgid_index = (uint8_t)x->gid_index;
        a.ah_attr.grh.hop_limit = 64;
    }
    int rc = ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                           IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                           IBV_QP_MIN_RNR_TIMER);
    if (rc) {
        vb_conn_fail(c, COHORT_ERR_TRANSPORT, "verbs: ibv_modify_qp to RTR on %s port %d (rank %d, "
                     "peer rank %d, GID index %d) failed: %s", DEVPEER(c), x->gid_index,
                     strerror(rc));
        return -1;
    }
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 0;
    a.sq_psn = c->psn;
    a.max_rd_atomic = 1;
    rc = ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                       IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
    if (rc) {
        vb_conn_fail(c, COHORT_ERR_TRANSPORT, "verbs: ibv_modify_qp to RTS on %s port %d (rank %d, "
                     "peer rank %d) failed: %s", DEVPEER(c), strerror(rc));
        return -1;
    }
    return 0;
}

static void conn_up(vb_conn_t *c)
{
    c->state = C_UP;
    c->ss = SS_LIVE;
    vb_epoll_set(c->ep, c->fd, &c->fe, EPOLLIN | EPOLLRDHUP, EPOLL_CTL_MOD);
    c->ep->host->log(COHORT_LOG_TRACE, SUBSYS, "verbs: rank %d connected to rank %d on %s port "
                     "%d (QPN %u -> %u)", c->ep->rank, c->peer, c->ep->ctx->devname,
                     c->ep->ctx->port, c->qp->qp_num, c->rqpn);
    vb_match(c);
    vb_pump(c);
    kit_wake_signal(&c->ep->wake);
}

/* Writes what is left of sbuf; 1 when done, 0 when blocked, -1 on failure. */
static int sock_flush(vb_conn_t *c)
{
    while (c->soff < VB_HELLO_SIZE) {
        ssize_t n = send(c->fd, c->sbuf + c->soff, VB_HELLO_SIZE - c->soff, MSG_NOSIGNAL);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            if (!c->out_mode) vb_epoll_set(c->ep, c->fd, &c->fe, EPOLLIN | EPOLLOUT, EPOLL_CTL_MOD);
            c->out_mode = 1;
            return 0;
        }
        if (n < 0) {
            vb_conn_fail(c, COHORT_ERR_PEER_LOST, "verbs: rank %d: the handshake with rank %d "
                         "failed: send: %s", c->ep->rank, c->peer, strerror(errno));
            return -1;
        }
        c->soff += (size_t)n;
    }
    if (c->out_mode) vb_epoll_set(c->ep, c->fd, &c->fe, EPOLLIN, EPOLL_CTL_MOD);
    c->out_mode = 0;
    return 1;
}

/* Reads into sbuf up to a full hello; 1 when complete, 0 blocked, -1 failure/EOF. */
static int sock_fill(vb_conn_t *c)
{
    while (c->soff < VB_HELLO_SIZE) {
        ssize_t n = recv(c->fd, c->sbuf + c->soff, VB_HELLO_SIZE - c->soff, MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
        if (n <= 0) {
            vb_conn_fail(c, COHORT_ERR_PEER_LOST, "verbs: rank %d: the handshake with rank %d "
                         "failed: %s", c->ep->rank, c->peer, n == 0 ? "connection closed" :
                         strerror(errno));
            return -1;
        }
        c->soff += (size_t)n;
    }
    return 1;
}

/* The peer is gone (its socket closed): from now on sends fail, and receives fail once no
 * message of the peer is left to match them (after its BYE count arrived, if it sent one). */
static void conn_gone(vb_conn_t *c, const char *why)
{
    vb_ep_t *ep = c->ep;
    if (c->state != C_UP) {
        vb_conn_fail(c, COHORT_ERR_PEER_LOST, "verbs: rank %d lost rank %d (%s port %d) during the "
                     "handshake: its connection closed (%s)", ep->rank, c->peer, ep->ctx->devname,
                     ep->ctx->port, why);
        return;
    }
    c->state = C_GONE;
    c->err = COHORT_ERR_PEER_LOST;
    if (c->bye_seen)
        snprintf(c->errmsg, sizeof c->errmsg, "verbs: rank %d: rank %d closed its connection "
                 "(%s port %d; it closed the communicator or exited)", ep->rank, c->peer,
                 ep->ctx->devname, ep->ctx->port);
    else
        snprintf(c->errmsg, sizeof c->errmsg, "verbs: rank %d lost rank %d (%s port %d): its "
                 "connection closed (%s): the peer process exited or was killed", ep->rank,
                 c->peer, ep->ctx->devname, ep->ctx->port, why);
    ep->host->log(COHORT_LOG_INFO, SUBSYS, "%s", c->errmsg);
    (void)vb_poll_cq(ep);            /* what arrived before the peer left still counts */
}

/* A gone peer's last messages have all arrived: match what can be matched, fail the rest. */
void vb_gone_check(vb_conn_t *c)
{
    if (c->state != C_GONE || (c->bye_seen && c->rx_done < c->bye_count)) return;
    vb_match(c);
    if (c->state != C_GONE) return;
    int failed = 0;
    for (vb_req_t *r = c->reqs; r; r = r->next)
        if (r->state != DONE && !(r->state == R_POSTED && c->unexp_n)) {
            vb_req_done(r, COHORT_ERR_PEER_LOST);
            failed = 1;
        }
    c->txq = c->txq_tail = NULL;
    if (!c->unexp_n) c->rq = c->rq_tail = NULL;
    if (failed) kit_wake_signal(&c->ep->wake);
}

/* Advances one connection's handshake (and watches a live one's socket). */
void vb_conn_sock(vb_conn_t *c)
{
    if (c->state == C_FAILED || c->fd < 0) return;
    for (;;) {
        int rc;
        switch (c->ss) {
        case SS_CONNECTING: {
            int err = 0;
            socklen_t l = sizeof err;
            if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &l) < 0) err = errno;
            if (err == EINPROGRESS || err == EALREADY) return;
            if (err) {
                vb_conn_fail(c, COHORT_ERR_PEER_LOST, "verbs: rank %d cannot reach rank %d's "
                             "handshake listener: %s", c->ep->rank, c->peer, strerror(err));
                return;
            }
            /* connected? a zero-byte send tells apart "still connecting" */
            struct sockaddr_in sa;
            socklen_t sl = sizeof sa;
            if (getpeername(c->fd, (struct sockaddr *)&sa, &sl) < 0) {
                if (!c->out_mode) vb_epoll_set(c->ep, c->fd, &c->fe, EPOLLOUT, EPOLL_CTL_MOD);
                c->out_mode = 1;
                return;
            }
            hello_build(c, HELLO);
            c->ss = SS_SEND;
            c->ss_next = SS_WAIT_REPLY;
            break;
        }
        case SS_SEND:
            rc = sock_flush(c);
            if (rc <= 0) return;
            c->soff = 0;
            c->ss = c->ss_next;
            if (c->ss == SS_LIVE) {
                conn_up(c);
                return;
            }
            break;
        case SS_WAIT_REPLY:
        case SS_WAIT_READY: {
            rc = sock_fill(c);
            if (rc <= 0) return;
            const char *why = NULL;
            int want = c->ss == SS_WAIT_REPLY ? REPLY : READY;
            if (hello_check(c->ep, c->sbuf, want, &why) || kit_get_be32(c->sbuf + 8) != (uint32_t)c->peer) {
                vb_conn_fail(c, COHORT_ERR_TRANSPORT, "verbs: rank %d: handshake with rank %d "
                             "refused: %s", c->ep->rank, c->peer, why ? why : "from another rank");
                return;
            }
            if (c->ss == SS_WAIT_READY) {
                conn_up(c);
                return;
            }
            c->rqpn = kit_get_be32(c->sbuf + 24) & 0xffffff;
            c->rpsn = kit_get_be32(c->sbuf + 28) & 0xffffff;
            if (qp_connect(c)) return;
            hello_build(c, READY);
            c->ss = SS_SEND;
            c->ss_next = SS_LIVE;
            break;
        }
        case SS_LIVE: {
            unsigned char b[64];
            ssize_t n = recv(c->fd, b, sizeof b, MSG_DONTWAIT);
            if (n > 0) {
                for (ssize_t i = 0; i < n && c->bye_off < VB_BYE_SIZE; i++)
                    c->bye[c->bye_off++] = b[i];
                if (c->bye_off == VB_BYE_SIZE && !c->bye_seen &&
                    kit_get_be32(c->bye) == VB_BYE_MAGIC) {
                    c->bye_seen = 1;
                    c->bye_count = kit_get_be64(c->bye + 4);
                }
                continue;
            }
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
            c->ss = SS_CLOSED;
            epoll_ctl(c->ep->epfd, EPOLL_CTL_DEL, c->fd, NULL);
            conn_gone(c, n == 0 ? "end of file" : strerror(errno));
            return;
        }
        default:
            return;
        }
    }
}

/* An authenticated hello meets its accept(). */
static void attach_incoming(vb_conn_t *c, vb_incoming_t *in)
{
    vb_ep_t *ep = c->ep;
    c->fd = in->fd;
    in->fd = -1;
    c->rqpn = kit_get_be32(in->buf + 24) & 0xffffff;
    c->rpsn = kit_get_be32(in->buf + 28) & 0xffffff;
    memcpy(c->rgid.raw, in->buf + 96, 16);
    c->rlid = (uint16_t)kit_get_be32(in->buf + 112);
    c->rmtu = (enum ibv_mtu)kit_get_be32(in->buf + 116);
    epoll_ctl(ep->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    vb_epoll_set(ep, c->fd, &c->fe, EPOLLIN, EPOLL_CTL_ADD);
    if (qp_connect(c)) return;
    hello_build(c, REPLY);
    c->ss = SS_SEND;
    c->ss_next = SS_WAIT_READY;
    vb_conn_sock(c);
}

void vb_incoming_drop(vb_ep_t *ep, vb_incoming_t *in)
{
    for (vb_incoming_t **pp = &ep->incoming; *pp; pp = &(*pp)->next)
        if (*pp == in) {
            *pp = in->next;
            break;
        }
    if (in->fd >= 0) {
        epoll_ctl(ep->epfd, EPOLL_CTL_DEL, in->fd, NULL);
        close(in->fd);
    }
    ep->nincoming--;
    free(in);
}

void vb_incoming_read(vb_ep_t *ep, vb_incoming_t *in)
{
    while (in->off < VB_HELLO_SIZE) {
        ssize_t n = recv(in->fd, in->buf + in->off, VB_HELLO_SIZE - in->off, MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
        if (n <= 0) {
            vb_incoming_drop(ep, in);
            return;
        }
        in->off += (size_t)n;
    }
    const char *why = NULL;
    if (hello_check(ep, in->buf, HELLO, &why)) {
        ep->host->log(COHORT_LOG_WARN, SUBSYS, "verbs: rank %d refused a handshake connection: "
                      "%s", ep->rank, why);
        vb_incoming_drop(ep, in);
        return;
    }
    int src = (int)kit_get_be32(in->buf + 8);
    vb_conn_t *c = ep->conns[src];
    if (c && !c->connector && c->fd < 0 && c->state == C_SETUP) {
        attach_incoming(c, in);
        vb_incoming_drop(ep, in);
    } else if (c && (c->connector || c->fd >= 0)) {
        ep->host->log(COHORT_LOG_WARN, SUBSYS, "verbs: rank %d refused a second handshake from "
                      "rank %d", ep->rank, src);
        vb_incoming_drop(ep, in);
    } else {
        epoll_ctl(ep->epfd, EPOLL_CTL_DEL, in->fd, NULL);   /* waits for accept() */
    }
}

void vb_do_accept(vb_ep_t *ep)
{
    for (;;) {
        int fd = accept4(ep->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) return;
        if (ep->nincoming >= VB_MAX_INCOMING) {
            close(fd);
            continue;
        }
        vb_incoming_t *in = calloc(1, sizeof *in);
        if (!in) {
            close(fd);
            return;
        }
        in->fe.kind = FD_INCOMING;
        in->fe.obj = in;
        in->fd = fd;
        in->next = ep->incoming;
        ep->incoming = in;
        ep->nincoming++;
        vb_epoll_set(ep, fd, &in->fe, EPOLLIN, EPOLL_CTL_ADD);
        vb_incoming_read(ep, in);
    }
}

/* ---- connections ------------------------------------------------------------------------- */

void vb_conn_destroy(vb_conn_t *c)
{
    vb_ep_t *ep = c->ep;
    if (c->fd >= 0 && c->state == C_UP && c->ss == SS_LIVE) {
        /* tell the peer how many of our messages it must still receive (best effort, never
         * blocks): its pending receives then fail only after what we sent has landed */
        unsigned char b[VB_BYE_SIZE], junk[64];
        while (recv(c->fd, junk, sizeof junk, MSG_DONTWAIT) > 0) { /* unread bytes: no RST */ }
        kit_put_be32(b, VB_BYE_MAGIC);
        kit_put_be64(b + 4, c->tx_done);
        (void)send(c->fd, b, sizeof b, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    if (c->qp) ibv_destroy_qp(c->qp);
    if (c->rx_mr) ibv_dereg_mr(c->rx_mr);
    if (c->tx_mr) ibv_dereg_mr(c->tx_mr);
    free(c->rx);
    free(c->tx);
    if (c->fd >= 0) {
        epoll_ctl(ep->epfd, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
    }
    while (c->reqs) vb_req_free(c->reqs);
    if (ep->conns[c->peer] == c) ep->conns[c->peer] = NULL;
    free(c);
}

static cohort_status_t conn_new(vb_ep_t *ep, int peer, int connector, vb_conn_t **out)
{
    const cohort_host_v1_t *host = ep->host;
    vb_ctx_t *x = ep->ctx;
    if (peer < 0 || peer >= ep->nranks || peer == ep->rank)
        return host->error(COHORT_ERR_INVALID_ARG, "verbs: rank %d cannot connect to rank %d "
                           "(communicator of %d)", ep->rank, peer, ep->nranks);
    if (ep->conns[peer])
        return host->error(COHORT_ERR_INVALID_ARG, "verbs: rank %d already has a connection to "
                           "rank %d", ep->rank, peer);
    vb_conn_t *c = calloc(1, sizeof *c);
    if (!c) return host->error(COHORT_ERR_NO_MEMORY, "verbs: no memory for a connection");
    c->fe.kind = FD_CONN;
    c->fe.obj = c;
    c->ep = ep;
    c->peer = peer;
    c->connector = connector;
    c->fd = -1;
    c->sq_free = VB_SQ_WR;
    vb_credit_init(&c->cr);
    uint32_t rnd = 0;
    if (getrandom(&rnd, sizeof rnd, GRND_NONBLOCK) != (ssize_t)sizeof rnd)
        rnd = (uint32_t)getpid() * 2654435761u + (uint32_t)peer;
    c->psn = rnd & 0xffffff;
    ep->conns[peer] = c;
    const char *what = NULL;
    int err = 0;
    size_t bytes = (size_t)VB_RX_WR * VB_SLOT_SIZE;
    if (posix_memalign((void **)&c->rx, 4096, bytes) ||
        posix_memalign((void **)&c->tx, 4096, (size_t)VB_TX_SLOTS * VB_SLOT_SIZE)) {
        what = "posix_memalign";
        err = ENOMEM;
        goto fail;
    }
    if (!(c->rx_mr = ibv_reg_mr(ep->pd, c->rx, bytes, IBV_ACCESS_LOCAL_WRITE)) ||
        !(c->tx_mr = ibv_reg_mr(ep->pd, c->tx, (size_t)VB_TX_SLOTS * VB_SLOT_SIZE,
                                IBV_ACCESS_LOCAL_WRITE))) {
        err = errno;
        struct rlimit rl;
        char lim[48] = "unknown";
        if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0)
            snprintf(lim, sizeof lim, rl.rlim_cur == RLIM_INFINITY ? "unlimited" : "%llu KiB",
                     (unsigned long long)rl.rlim_cur / 1024);
        ep->conns[peer] = NULL;
        vb_conn_destroy(c);
        return host->error(COHORT_ERR_SYSTEM, "verbs: ibv_reg_mr of the %zu-byte message "
                           "buffers for rank %d on %s port %d failed: %s; RLIMIT_MEMLOCK is %s: "
                           "raise it with 'ulimit -l unlimited' (or memlock in "
                           "/etc/security/limits.conf, or --ulimit memlock=-1 for a container)",
                           bytes, peer, x->devname, x->port, strerror(err), lim);
    }
    struct ibv_qp_init_attr qa;
    memset(&qa, 0, sizeof qa);
    qa.qp_context = c;
    qa.send_cq = ep->cq;
    qa.recv_cq = ep->cq;
    qa.cap.max_send_wr = VB_SQ_WR;
    qa.cap.max_recv_wr = VB_RX_WR;
    qa.cap.max_send_sge = 1;
    qa.cap.max_recv_sge = 1;
    qa.qp_type = IBV_QPT_RC;
    if (!(c->qp = ibv_create_qp(ep->pd, &qa))) { what = "ibv_create_qp"; err = errno; goto fail; }
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = (uint8_t)x->port;
    a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    int rc = ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                           IBV_QP_ACCESS_FLAGS);
    if (rc) { what = "ibv_modify_qp to INIT"; err = rc; goto fail; }
    for (unsigned i = 0; i < VB_RX_WR; i++)
        if (vb_post_recv(c, i)) {
            ep->conns[peer] = NULL;
            cohort_status_t st = host->error(COHORT_ERR_TRANSPORT, "%s", c->errmsg);
            vb_conn_destroy(c);
            return st;
        }
    *out = c;
    return COHORT_SUCCESS;
fail:
    ep->conns[peer] = NULL;
    vb_conn_destroy(c);
    return host->error(COHORT_ERR_TRANSPORT, "verbs: rank %d, connection to rank %d: %s on %s "
                       "port %d failed: %s", ep->rank, peer, what, x->devname, x->port,
                       strerror(err));
}

cohort_status_t vb_connect(cohort_tp_ep_t e, int peer, const void *blob, size_t len,
                                  cohort_tp_conn_t *connp)
{
    vb_ep_t *ep = e;
    if (!ep || !connp) return COHORT_ERR_INVALID_ARG;
    *connp = NULL;
    vb_addr_t a;
    if (vb_addr_decode(blob, len, &a))
        return ep->host->error(COHORT_ERR_INVALID_ARG, "verbs: rank %d connecting to rank %d: "
                               "its address (%zu bytes) is not a verbs address of this version",
                               ep->rank, peer, len);
    vb_conn_t *c = NULL;
    cohort_status_t st = conn_new(ep, peer, 1, &c);
    if (st) return st;
    c->rgid = a.gid;
    c->rlid = a.lid;
    c->rmtu = a.mtu;
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) {
        int err = errno;
        vb_conn_destroy(c);
        return ep->host->error(COHORT_ERR_SYSTEM, "verbs: socket() for the handshake with rank "
                               "%d: %s", peer, strerror(err));
    }
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    memcpy(&sa.sin_addr, &a.ipv4, 4);
    sa.sin_port = htons(a.tport);
    c->ss = SS_CONNECTING;
    vb_epoll_set(ep, c->fd, &c->fe, EPOLLOUT, EPOLL_CTL_ADD);
    c->out_mode = 1;
    if (connect(c->fd, (struct sockaddr *)&sa, sizeof sa) < 0 && errno != EINPROGRESS) {
        char ip[INET_ADDRSTRLEN] = "?";
        inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof ip);
        vb_conn_fail(c, COHORT_ERR_PEER_LOST, "verbs: rank %d cannot reach rank %d's handshake "
                     "listener at %s:%u: %s", ep->rank, peer, ip, a.tport, strerror(errno));
    }
    *connp = c;
    return COHORT_SUCCESS;
}

cohort_status_t vb_accept(cohort_tp_ep_t e, int peer, cohort_tp_conn_t *connp)
{
    vb_ep_t *ep = e;
    if (!ep || !connp) return COHORT_ERR_INVALID_ARG;
    *connp = NULL;
    vb_conn_t *c = NULL;
    cohort_status_t st = conn_new(ep, peer, 0, &c);
    if (st) return st;
    c->ss = SS_WAIT_HELLO;
    *connp = c;
    for (vb_incoming_t *in = ep->incoming; in; in = in->next)
        if (in->off == VB_HELLO_SIZE && (int)kit_get_be32(in->buf + 8) == peer) {
            attach_incoming(c, in);
            vb_incoming_drop(ep, in);
            break;
        }
    return COHORT_SUCCESS;
}

cohort_status_t vb_conn_test(cohort_tp_conn_t cn)
{
    vb_conn_t *c = cn;
    if (!c) return COHORT_ERR_INVALID_ARG;
    if (c->state == C_SETUP) (void)vb_ep_advance(c->ep, 1);
    if (c->state == C_UP) return COHORT_SUCCESS;
    if (c->state == C_FAILED || c->state == C_GONE)
        return c->ep->host->error(c->err, "%s", c->errmsg);
    return COHORT_IN_PROGRESS;
}

cohort_status_t vb_conn_close(cohort_tp_conn_t cn)
{
    if (cn) vb_conn_destroy(cn);
    return COHORT_SUCCESS;
}
