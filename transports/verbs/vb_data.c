/* SPDX-License-Identifier: BSD-3-Clause */
/* cohort RDMA verbs transport: the data path. Requests and their queues, posting (receive
 * buffers, eager SENDs from the bounce buffers, RDMA WRITEs of large messages from buffers the
 * registration cache registers, credits), receiving (matching arrived EAGER and RTS messages to
 * posted receives, CTS), completion handling, the device's async events, progress (the
 * endpoint's epoll set, whose fd is ep_fd, and completion queue) and the plugin API of messages:
 * isend, irecv, test. The design ("Messages") is described at the top of verbs.c.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <cohort/plugin.h>

#include "vb_credit.h"
#include "vb_int.h"
#include "vb_regcache.h"

#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>

/* ---- small helpers ----------------------------------------------------------------------- */

static const char *wc_text(enum ibv_wc_status s) { return ibv_wc_status_str(s); }

void vb_epoll_set(vb_ep_t *ep, int fd, fdent_t *fe, uint32_t events, int op)
{
    struct epoll_event ev;
    memset(&ev, 0, sizeof ev);
    ev.events = events;
    ev.data.ptr = fe;
    (void)epoll_ctl(ep->epfd, op, fd, &ev);
}

/* ---- requests ---------------------------------------------------------------------------- */

void vb_req_done(vb_req_t *r, cohort_status_t st)
{
    if (r->state == DONE) return;
    r->state = DONE;
    r->st = st;
    if (r->reg) {
        vb_rc_put(&r->conn->ep->rc, r->reg);
        r->reg = NULL;
    }
    kit_wake_signal(&r->conn->ep->wake);
}

void vb_req_free(vb_req_t *r)
{
    vb_conn_t *c = r->conn;
    if (r->reg) vb_rc_put(&c->ep->rc, r->reg);
    vb_all_del(&c->reqs, r);
    kit_pool_put(&c->ep->reqs, r);
}

static vb_req_t *find_req(vb_conn_t *c, int state, uint32_t id)
{
    for (vb_req_t *r = c->reqs; r; r = r->next)
        if (r->state == state && r->id == id) return r;
    return NULL;
}

/* ---- posting ------------------------------------------------------------------------------ */

int vb_post_recv(vb_conn_t *c, unsigned slot)
{
    struct ibv_sge sge = { (uintptr_t)(c->rx + (size_t)slot * VB_SLOT_SIZE), VB_SLOT_SIZE,
                           c->rx_mr->lkey };
    struct ibv_recv_wr wr, *bad = NULL;
    memset(&wr, 0, sizeof wr);
    wr.wr_id = WRID(c->peer, W_RECV, slot);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    int rc = ibv_post_recv(c->qp, &wr, &bad);
    if (rc) {
        vb_conn_fail(c, COHORT_ERR_TRANSPORT, "verbs: ibv_post_recv on %s port %d (rank %d, peer "
                     "rank %d) failed: %s", DEVPEER(c), strerror(rc));
        return -1;
    }
    return 0;
}

static int tx_slot(vb_conn_t *c)
{
    for (unsigned i = 0; i < VB_TX_SLOTS; i++)
        if (!(c->tx_used & ((uint64_t)1 << i))) return (int)i;
    return -1;
}

/* Posts one SEND of hdr (+ payload) from tx slot `slot`. data: takes a credit. */
static int post_msg(vb_conn_t *c, int slot, vb_hdr_t *h, const void *payload, size_t plen,
                    int data, vb_req_t *owner)
{
    unsigned char *p = c->tx + (size_t)slot * VB_SLOT_SIZE;
    h->credits = data ? vb_credit_take(&c->cr) : vb_credit_take_msg(&c->cr);
    memcpy(p, h, sizeof *h);
    if (plen) memcpy(p + sizeof *h, payload, plen);
    struct ibv_sge sge = { (uintptr_t)p, (uint32_t)(sizeof *h + plen), c->tx_mr->lkey };
    struct ibv_send_wr wr, *bad = NULL;
    memset(&wr, 0, sizeof wr);
    wr.wr_id = WRID(c->peer, W_SEND, slot);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    int rc = ibv_post_send(c->qp, &wr, &bad);
    if (rc) {
        vb_conn_fail(c, COHORT_ERR_TRANSPORT, "verbs: ibv_post_send on %s port %d (rank %d, peer "
                     "rank %d) failed: %s", DEVPEER(c), strerror(rc));
        return -1;
    }
    c->tx_used |= (uint64_t)1 << slot;
    c->tx_req[slot] = owner;
    c->sq_free--;
    return 0;
}

void *vb_mr_reg(void *arg, void *addr, size_t len)
{
    vb_ep_t *ep = arg;
    return ibv_reg_mr(ep->pd, addr, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
}

void vb_mr_dereg(void *arg, void *handle)
{
    (void)arg;
    (void)ibv_dereg_mr(handle);
}

static void reg_fail_msg(vb_conn_t *c, vb_req_t *r, int err)
{
    struct rlimit rl;
    char lim[64] = "unknown";
    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
        if (rl.rlim_cur == RLIM_INFINITY) snprintf(lim, sizeof lim, "unlimited");
        else snprintf(lim, sizeof lim, "%llu KiB", (unsigned long long)rl.rlim_cur / 1024);
    }
    vb_conn_fail(c, COHORT_ERR_TRANSPORT, "verbs: ibv_reg_mr of %zu bytes at %p on %s port %d "
                 "(rank %d, peer rank %d) failed: %s; RLIMIT_MEMLOCK is %s%s", r->len, r->buf,
                 DEVPEER(c), strerror(err), lim,
                 (err == ENOMEM || err == EPERM || err == EAGAIN)
                     ? ": raise it (ulimit -l unlimited, or memlock in /etc/security/limits.conf "
                       "or the container's --ulimit memlock=-1)" : "");
}

static int post_write(vb_conn_t *c, vb_req_t *r)
{
    size_t n = (r->len + VB_CHUNK - 1) / VB_CHUNK;
    if ((size_t)c->sq_free < n) return 1;
    if (!r->reg) {
        r->reg = vb_rc_get(&c->ep->rc, r->buf, r->len);
        if (!r->reg) {
            reg_fail_msg(c, r, errno);
            return -1;
        }
    }
    struct ibv_mr *mr = r->reg->handle;
    for (size_t i = 0; i < n; i++) {
        size_t off = i * VB_CHUNK, len = r->len - off < VB_CHUNK ? r->len - off : VB_CHUNK;
        struct ibv_sge sge = { (uintptr_t)r->buf + off, (uint32_t)len, mr->lkey };
        struct ibv_send_wr wr, *bad = NULL;
        memset(&wr, 0, sizeof wr);
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr.rdma.remote_addr = r->raddr + off;
        wr.wr.rdma.rkey = r->rkey;
        if (i + 1 == n) {
            wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
            wr.imm_data = htonl(r->rid);
            wr.wr_id = WRID(c->peer, W_WRITE, r->id);
        } else {
            wr.opcode = IBV_WR_RDMA_WRITE;
            wr.wr_id = WRID(c->peer, W_CHUNK, r->id);
        }
        int rc = ibv_post_send(c->qp, &wr, &bad);
        if (rc) {
            vb_conn_fail(c, COHORT_ERR_TRANSPORT, "verbs: ibv_post_send (RDMA WRITE) on %s port %d "
                         "(rank %d, peer rank %d) failed: %s", DEVPEER(c), strerror(rc));
            return -1;
        }
        c->sq_free--;
    }
    vb_credit_take_silent(&c->cr);
    r->state = S_WRITING;
    return 0;
}

/* Posts what the credits allow, in order. */
void vb_pump(vb_conn_t *c)
{
    if (c->state != C_UP) return;
    while (c->txq) {
        vb_req_t *r = c->txq;
        if (!vb_credit_can_send(&c->cr) || c->sq_free <= 0) break;
        vb_hdr_t h;
        memset(&h, 0, sizeof h);
        if (r->state == S_WRITE_Q) {
            int rc = post_write(c, r);
            if (rc < 0) return;
            if (rc > 0) break;
            vb_q_pop(&c->txq, &c->txq_tail);
            continue;
        }
        int slot = tx_slot(c);
        if (slot < 0) break;
        if (r->state == S_QUEUED) {
            h.tag = r->tag;
            h.len = r->len;
            if (r->len <= VB_EAGER_MAX) {
                h.type = M_EAGER;
                if (post_msg(c, slot, &h, r->buf, r->len, 1, r)) return;
                r->state = S_EAGER_SENT;
            } else {
                h.type = M_RTS;
                h.id = r->id;
                if (post_msg(c, slot, &h, NULL, 0, 1, NULL)) return;
                r->state = S_WAIT_CTS;
            }
        } else {                     /* R_CTS_Q */
            h.type = M_CTS;
            h.id = r->sid;
            h.rid = r->id;
            if (r->drop) {
                h.flags = F_DROP;
            } else {
                struct ibv_mr *mr = r->reg->handle;
                h.addr = (uintptr_t)r->buf;
                h.rkey = mr->rkey;
                h.len = r->len;
            }
            if (post_msg(c, slot, &h, NULL, 0, 1, NULL)) return;
            if (r->drop) vb_req_done(r, r->st);
            else r->state = R_WAIT_DATA;
        }
        vb_q_pop(&c->txq, &c->txq_tail);
    }
    if (vb_credit_need_msg(&c->cr) && c->sq_free > 0) {
        int slot = tx_slot(c);
        if (slot >= 0) {
            vb_hdr_t h;
            memset(&h, 0, sizeof h);
            h.type = M_CREDIT;
            post_msg(c, slot, &h, NULL, 0, 0, NULL);
        }
    }
}

/* ---- receiving --------------------------------------------------------------------------- */

void vb_match(vb_conn_t *c)
{
    while ((c->state == C_UP || c->state == C_GONE) && c->rq && c->unexp_n) {
        unsigned slot = c->unexp[c->unexp_head];
        vb_hdr_t h;
        memcpy(&h, c->rx + (size_t)slot * VB_SLOT_SIZE, sizeof h);
        vb_req_t *r = vb_q_pop(&c->rq, &c->rq_tail);
        c->unexp_head = (c->unexp_head + 1) % VB_RX_WR;
        c->unexp_n--;
        int bad = h.tag != r->tag || h.len > r->len;
        if (bad)
            snprintf(r->msg, sizeof r->msg, "verbs: rank %d received from rank %d a message with "
                     "tag %llu of %llu bytes where it expected tag %llu of at most %zu bytes",
                     c->ep->rank, c->peer, (unsigned long long)h.tag, (unsigned long long)h.len,
                     (unsigned long long)r->tag, r->len);
        if (h.type == M_EAGER) {
            if (!bad && h.len) memcpy(r->buf, c->rx + (size_t)slot * VB_SLOT_SIZE + sizeof h, h.len);
            r->nbytes = bad ? 0 : h.len;
            vb_req_done(r, bad ? COHORT_ERR_MISMATCH : COHORT_SUCCESS);
        } else {                     /* RTS */
            r->sid = h.id;
            r->nbytes = h.len;
            if (bad) {
                r->drop = 1;
                r->st = COHORT_ERR_MISMATCH;
            } else {
                r->reg = vb_rc_get(&c->ep->rc, r->buf, r->len);
                if (!r->reg) {
                    reg_fail_msg(c, r, errno);
                    return;
                }
            }
            r->state = R_CTS_Q;
            vb_q_push(&c->txq, &c->txq_tail, r);
        }
        if (vb_post_recv(c, slot)) return;
        vb_credit_freed(&c->cr);
    }
}

static void on_recv(vb_conn_t *c, unsigned slot, uint32_t len)
{
    vb_hdr_t h;
    if (len < sizeof h) {
        vb_conn_fail(c, COHORT_ERR_TRANSPORT, "verbs: rank %d got a %u-byte message from rank %d, "
                     "shorter than a header (another version of the plugin?)", c->ep->rank, len,
                     c->peer);
        return;
    }
    memcpy(&h, c->rx + (size_t)slot * VB_SLOT_SIZE, sizeof h);
    if (vb_credit_grant(&c->cr, h.credits)) {
        vb_conn_fail(c, COHORT_ERR_TRANSPORT, "verbs: rank %d: rank %d returned %u credits, more "
                     "than it could hold (protocol error)", c->ep->rank, c->peer, h.credits);
        return;
    }
    switch (h.type) {
    case M_CREDIT:
        vb_post_recv(c, slot);
        return;
    case M_CTS: {
        vb_req_t *r = find_req(c, S_WAIT_CTS, h.id);
        if (vb_post_recv(c, slot)) return;
        vb_credit_freed(&c->cr);
        if (!r) {
            vb_conn_fail(c, COHORT_ERR_TRANSPORT, "verbs: rank %d: a clear-to-send from rank %d "
                         "names send %u, which is not waiting (protocol error)", c->ep->rank,
                         c->peer, h.id);
            return;
        }
        if (h.flags & F_DROP) {
            r->nbytes = r->len;
            vb_req_done(r, COHORT_SUCCESS);
        } else {
            r->raddr = h.addr;
            r->rkey = h.rkey;
            r->rid = h.rid;
            r->state = S_WRITE_Q;
            vb_q_push(&c->txq, &c->txq_tail, r);
        }
        return;
    }
    case M_EAGER:
    case M_RTS:
        if (h.type == M_EAGER && h.len + sizeof h > len) {
            vb_conn_fail(c, COHORT_ERR_TRANSPORT, "verbs: rank %d: message from rank %d is shorter "
                         "than its header says (protocol error)", c->ep->rank, c->peer);
            return;
        }
        c->unexp[(c->unexp_head + c->unexp_n) % VB_RX_WR] = (uint16_t)slot;
        c->unexp_n++;
        vb_match(c);
        return;
    default:
        vb_conn_fail(c, COHORT_ERR_TRANSPORT, "verbs: rank %d: message of unknown type %u from "
                     "rank %d (another version of the plugin?)", c->ep->rank, h.type, c->peer);
    }
}

/* ---- completions ------------------------------------------------------------------------- */

static void on_wc(vb_ep_t *ep, const struct ibv_wc *wc)
{
    int peer = (int)(wc->wr_id >> 40);
    int kind = (int)((wc->wr_id >> 32) & 0xff);
    uint32_t idx = (uint32_t)wc->wr_id;
    if (peer < 0 || peer >= ep->nranks) return;
    vb_conn_t *c = ep->conns[peer];
    if (!c || !c->qp || c->qp->qp_num != wc->qp_num) return;      /* a closed connection's */
    if (kind != W_RECV) c->sq_free++;
    if (wc->status == IBV_WC_SUCCESS) {
        if (kind == W_RECV) c->rx_done++;
        else if (kind == W_SEND || kind == W_WRITE) c->tx_done++;
    }
    if (kind == W_SEND && idx < VB_TX_SLOTS) {
        c->tx_used &= ~((uint64_t)1 << idx);
        vb_req_t *r = c->tx_req[idx];
        c->tx_req[idx] = NULL;
        if (r && wc->status == IBV_WC_SUCCESS) {
            r->nbytes = r->len;
            vb_req_done(r, COHORT_SUCCESS);
        }
    }
    if (wc->status != IBV_WC_SUCCESS) {
        if (c->state == C_FAILED) return;
        if (wc->status == IBV_WC_RETRY_EXC_ERR)
            vb_conn_fail(c, COHORT_ERR_PEER_LOST, "verbs: rank %d lost rank %d on %s port %d: "
                         "transport retry counter exceeded (%s): the peer process or its node is "
                         "gone, or the fabric between them is down", ep->rank, peer,
                         ep->ctx->devname, ep->ctx->port, wc_text(wc->status));
        else
            vb_conn_fail(c, COHORT_ERR_TRANSPORT, "verbs: rank %d, connection to rank %d on %s "
                         "port %d failed: work completion status %s (%d, vendor error 0x%x)",
                         ep->rank, peer, ep->ctx->devname, ep->ctx->port, wc_text(wc->status),
                         (int)wc->status, wc->vendor_err);
        return;
    }
    /* Not only C_UP: the acceptor's QP is ready before the connector's last handshake step
     * reaches it, and the connector may already have sent (vb_match() waits for C_UP). */
    if (c->state == C_FAILED) return;
    switch (kind) {
    case W_RECV:
        if (idx >= VB_RX_WR) return;
        if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
            uint32_t rid = ntohl(wc->imm_data);
            if (vb_post_recv(c, idx)) return;
            vb_credit_freed(&c->cr);
            vb_req_t *r = find_req(c, R_WAIT_DATA, rid);
            if (!r) {
                vb_conn_fail(c, COHORT_ERR_TRANSPORT, "verbs: rank %d: an RDMA write from rank %d "
                             "names receive %u, which is not waiting (protocol error)", ep->rank,
                             peer, rid);
                return;
            }
            vb_req_done(r, COHORT_SUCCESS);
        } else {
            on_recv(c, idx, wc->byte_len);
        }
        break;
    case W_WRITE: {
        vb_req_t *r = find_req(c, S_WRITING, idx);
        if (r) {
            r->nbytes = r->len;
            vb_req_done(r, COHORT_SUCCESS);
        }
        break;
    }
    default:
        break;
    }
}

int vb_poll_cq(vb_ep_t *ep)
{
    struct ibv_wc wc[32];
    int total = 0;
    for (;;) {
        int n = ibv_poll_cq(ep->cq, 32, wc);
        if (n < 0)
            return ep->host->error(COHORT_ERR_TRANSPORT, "verbs: ibv_poll_cq on %s port %d "
                                   "(rank %d) failed (%d)", ep->ctx->devname, ep->ctx->port,
                                   ep->rank, n);
        for (int i = 0; i < n; i++) on_wc(ep, &wc[i]);
        total += n;
        if (n < 32) break;
    }
    for (int p = 0; p < ep->nranks; p++) {
        vb_conn_t *c = ep->conns[p];
        if (!c) continue;
        if (total) {
            vb_match(c);
            vb_pump(c);
        }
        vb_gone_check(c);
    }
    return COHORT_SUCCESS;
}

/* ---- async events ------------------------------------------------------------------------ */

static void async_events(vb_ep_t *ep)
{
    vb_ctx_t *x = ep->ctx;
    pthread_mutex_lock(&x->lock);
    struct ibv_async_event ev;
    while (ibv_get_async_event(x->dev, &ev) == 0) {
        switch (ev.event_type) {
        case IBV_EVENT_QP_FATAL:
        case IBV_EVENT_QP_REQ_ERR:
        case IBV_EVENT_QP_ACCESS_ERR: {
            unsigned g = atomic_load(&x->fatal_gen);
            x->fatal_qpn[g % 16] = ev.element.qp->qp_num;
            atomic_store(&x->fatal_gen, g + 1);
            ep->host->log(COHORT_LOG_INFO, SUBSYS, "verbs: %s port %d: async event %s on QP %u",
                          x->devname, x->port, ibv_event_type_str(ev.event_type),
                          ev.element.qp->qp_num);
            break;
        }
        case IBV_EVENT_PORT_ERR:
        case IBV_EVENT_DEVICE_FATAL:
            if (ev.event_type == IBV_EVENT_DEVICE_FATAL || ev.element.port_num == x->port) {
                snprintf(x->dead_msg, sizeof x->dead_msg, "verbs: %s port %d: async event %s",
                         x->devname, x->port, ibv_event_type_str(ev.event_type));
                atomic_store(&x->dead, 1);
            }
            break;
        default:
            ep->host->log(COHORT_LOG_INFO, SUBSYS, "verbs: %s: async event %s", x->devname,
                          ibv_event_type_str(ev.event_type));
            break;
        }
        ibv_ack_async_event(&ev);
    }
    pthread_mutex_unlock(&x->lock);
}

static void check_fatal(vb_ep_t *ep)
{
    vb_ctx_t *x = ep->ctx;
    if (atomic_load(&x->dead)) {
        for (int p = 0; p < ep->nranks; p++)
            if (ep->conns[p])
                vb_conn_fail(ep->conns[p], COHORT_ERR_TRANSPORT, "%s: connection of rank %d to "
                             "rank %d is lost", x->dead_msg, ep->rank, p);
        return;
    }
    unsigned g = atomic_load(&x->fatal_gen);
    if (g == ep->fatal_seen) return;
    pthread_mutex_lock(&x->lock);
    for (int p = 0; p < ep->nranks; p++) {
        vb_conn_t *c = ep->conns[p];
        if (!c || !c->qp) continue;
        for (unsigned i = 0; i < 16 && i < g; i++)
            if (x->fatal_qpn[i] == c->qp->qp_num)
                vb_conn_fail(c, COHORT_ERR_TRANSPORT, "verbs: rank %d: the queue pair to rank %d "
                             "on %s port %d went to the error state (async event)", ep->rank, p,
                             x->devname, x->port);
    }
    pthread_mutex_unlock(&x->lock);
    ep->fatal_seen = g;
}

/* ---- progress ---------------------------------------------------------------------------- */

cohort_status_t vb_ep_advance(vb_ep_t *ep, int full)
{
    if (full) {
        struct epoll_event evs[32];
        int n = epoll_wait(ep->epfd, evs, 32, 0);
        for (int i = 0; i < n; i++) {
            fdent_t *fe = evs[i].data.ptr;
            switch (fe->kind) {
            case FD_LISTEN: vb_do_accept(ep); break;
            case FD_INCOMING: vb_incoming_read(ep, fe->obj); break;
            case FD_CONN: vb_conn_sock(fe->obj); break;
            case FD_ASYNC: async_events(ep); break;
            case FD_EVENT: kit_wake_drain(&ep->wake); break;
            case FD_COMP: {
                struct ibv_cq *cq;
                void *cctx;
                while (ibv_get_cq_event(ep->chan, &cq, &cctx) == 0) ep->cq_unacked++;
                if (ep->cq_unacked >= 64) {
                    ibv_ack_cq_events(ep->cq, ep->cq_unacked);
                    ep->cq_unacked = 0;
                }
                break;
            }
            default: break;
            }
        }
        check_fatal(ep);
    }
    cohort_status_t st = vb_poll_cq(ep);
    if (st) return st;
    if (full) {
        int rc = ibv_req_notify_cq(ep->cq, 0);
        if (rc)
            return ep->host->error(COHORT_ERR_TRANSPORT, "verbs: ibv_req_notify_cq on %s port "
                                   "%d (rank %d) failed: %s", ep->ctx->devname, ep->ctx->port,
                                   ep->rank, strerror(rc));
        st = vb_poll_cq(ep);
    }
    return st;
}

cohort_status_t vb_progress(cohort_tp_ep_t e)
{
    vb_ep_t *ep = e;
    if (!ep) return COHORT_ERR_INVALID_ARG;
    ep->wake.in_progress = 1;
    cohort_status_t st = vb_ep_advance(ep, 1);
    ep->wake.in_progress = 0;
    return st;
}

/* ---- messages ---------------------------------------------------------------------------- */

static cohort_status_t post_req(vb_conn_t *c, int is_send, void *buf, size_t len, uint64_t tag,
                                cohort_tp_req_t *reqp)
{
    if (!reqp) return COHORT_ERR_INVALID_ARG;
    *reqp = NULL;
    if (len && !buf)
        return c->ep->host->error(COHORT_ERR_INVALID_ARG, "verbs: %s of %zu bytes with a NULL "
                                  "buffer", is_send ? "isend" : "irecv", len);
    if (c->state == C_FAILED || (c->state == C_GONE && is_send))
        return c->ep->host->error(c->err, "%s", c->errmsg);
    vb_req_t *r = kit_pool_get(&c->ep->reqs);   /* zeroed */
    if (!r) return c->ep->host->error(COHORT_ERR_NO_MEMORY, "verbs: no memory for a request");
    r->conn = c;
    r->is_send = is_send;
    r->buf = buf;
    r->len = len;
    r->tag = tag;
    r->id = c->next_id++;
    vb_all_add(&c->reqs, r);
    if (is_send) {
        r->state = S_QUEUED;
        vb_q_push(&c->txq, &c->txq_tail, r);
        vb_pump(c);
    } else {
        r->state = R_POSTED;
        vb_q_push(&c->rq, &c->rq_tail, r);
        vb_match(c);
        vb_pump(c);
        vb_gone_check(c);
    }
    *reqp = r;
    return COHORT_SUCCESS;
}

cohort_status_t vb_isend(cohort_tp_conn_t cn, const void *buf, size_t len, uint64_t tag,
                                cohort_tp_mr_t mr, cohort_tp_req_t *reqp)
{
    (void)mr;
    if (!cn) return COHORT_ERR_INVALID_ARG;
    return post_req(cn, 1, (void *)(uintptr_t)buf, len, tag, reqp);
}

cohort_status_t vb_irecv(cohort_tp_conn_t cn, void *buf, size_t len, uint64_t tag,
                                cohort_tp_mr_t mr, cohort_tp_req_t *reqp)
{
    (void)mr;
    if (!cn) return COHORT_ERR_INVALID_ARG;
    return post_req(cn, 0, buf, len, tag, reqp);
}

cohort_status_t vb_test(cohort_tp_req_t rq, size_t *nbytes)
{
    vb_req_t *r = rq;
    if (!r) return COHORT_ERR_INVALID_ARG;
    vb_conn_t *c = r->conn;
    if (r->state != DONE) {
        cohort_status_t st = vb_ep_advance(c->ep, 1);
        if (st && r->state != DONE) return st;
        if (r->state != DONE) return COHORT_IN_PROGRESS;
    }
    cohort_status_t st = r->st;
    if (nbytes) *nbytes = r->nbytes;
    if (st == COHORT_ERR_MISMATCH && r->msg[0]) (void)c->ep->host->error(st, "%s", r->msg);
    else if (st) (void)c->ep->host->error(st, "%s", c->errmsg);
    vb_req_free(r);
    return st;
}
