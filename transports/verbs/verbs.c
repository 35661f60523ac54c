/* SPDX-License-Identifier: BSD-3-Clause */
/* cohort RDMA verbs transport (libcohort-verbs.so), over rdma-core's libibverbs.
 *
 * Knows only <cohort/plugin.h> (plus its own vb_*.h pieces and libibverbs).
 *
 * Structure
 *   context   one device and port, chosen at init (COHORT_IB_HCA, else the first active port),
 *             and its GID (COHORT_IB_GID_INDEX, else the IPv4-mapped RoCE v2 GID on Ethernet
 *             ports, GID 0 on InfiniBand ones).
 *   endpoint  a protection domain, one completion queue with its completion channel, a TCP
 *             listener for the queue-pair handshake, a registration cache (vb_regcache.h: kept
 *             across messages only while libucm reports unmapped memory, vb_memev.h), and an
 *             epoll descriptor over all of them that is the endpoint's ep_fd.
 *   conn      one Reliable Connected QP per peer with VB_SLOTS + VB_CTRL_WR pre-posted receive
 *             buffers of VB_SLOT_SIZE bytes, as many send bounce buffers, and credits
 *             (vb_credit.h). Its TCP socket carries the handshake (device address, QPN, PSN,
 *             HMAC with the job secret) and then stays open: its end of file means the peer
 *             process is gone.
 * Address blob: the device's GID, LID, port, MTU and link layer, and the IPv4 address and port
 * of the handshake listener (big-endian, fixed layout). QPNs are per pair, so they travel in
 * the handshake; the blob has what is per rank.
 *
 * Messages (every one is a SEND of a vb_hdr_t, possibly followed by payload):
 *   EAGER  tag, length, payload (length <= VB_EAGER_MAX): lands in a posted receive buffer;
 *          held there until the matching irecv copies it out.
 *   RTS    tag, length, sender's request id: a larger message is waiting.
 *   CTS    the receiver's registered buffer (address, rkey) and its request id, or DROP when
 *          the receive did not match (the sender then completes without moving data).
 *          The sender then RDMA WRITEs the payload, the last piece WITH IMMEDIATE = receiver's
 *          request id, which completes the receive.
 *   CREDIT credits only (vb_credit.h).
 * All but CREDIT take a credit, WRITE WITH IMMEDIATE too (it consumes a receive request).
 * rnr_retry is 0: a receive-not-ready would be a flow-control bug, and shows up as an error.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <cohort/plugin.h>
#include "transports/common/kit_bytes.h"

#include "vb_credit.h"
#include "vb_hca.h"
#include "vb_memev.h"
#include "vb_regcache.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#define SUBSYS "net"
#define VB_VERSION COHORT_VERSION_STRING   /* the package's (configure) */
#define VB_SLOT_SIZE 8192u
#define VB_RX_WR (VB_SLOTS + VB_CTRL_WR)
#define VB_TX_SLOTS (VB_SLOTS + VB_CTRL_WR)
#define VB_CHUNK ((size_t)1 << 30)              /* largest RDMA WRITE of one work request */
#define VB_SQ_WR (2 * VB_SLOTS + VB_CTRL_WR + 16)
#define VB_REG_CACHE 64
#define VB_MEMLOCK_WARN ((rlim_t)64 << 20)
#define VB_MAX_INCOMING 1024

#define VB_ADDR_MAGIC 0x43564231u               /* "CVB1" */
#define VB_ADDR_SIZE 48
#define VB_HELLO_MAGIC 0x43564248u              /* "CVBH" */
#define VB_HELLO_SIZE 160
#define VB_HELLO_MAC_OFF 128
enum { HELLO = 1, REPLY = 2, READY = 3 };
#define VB_BYE_MAGIC 0x43564245u                /* "CVBE" */
#define VB_BYE_SIZE 12

enum { M_EAGER = 1, M_RTS = 2, M_CTS = 3, M_CREDIT = 4 };
#define F_DROP 1u

typedef struct vb_hdr {
    uint8_t type, flags;
    uint16_t pad;
    uint32_t credits;
    uint64_t tag;
    uint64_t len;
    uint64_t addr;
    uint32_t rkey;
    uint32_t id;          /* sender's request id (RTS, echoed in CTS) */
    uint32_t rid;         /* receiver's request id (CTS; the WRITE's immediate) */
    uint32_t pad2;
} vb_hdr_t;
#define VB_EAGER_MAX (VB_SLOT_SIZE - sizeof(vb_hdr_t))

/* wr_id: peer << 40 | kind << 32 | index */
enum { W_RECV = 1, W_SEND = 2, W_WRITE = 3, W_CHUNK = 4 };
#define WRID(peer, kind, idx) (((uint64_t)(uint32_t)(peer) << 40) | ((uint64_t)(kind) << 32) | \
                               (uint32_t)(idx))

typedef struct vb_ctx {
    const cohort_host_v1_t *host;
    struct ibv_context *dev;
    char devname[64];
    int port;
    int gid_index;
    union ibv_gid gid;
    uint16_t lid;
    int link_layer;                 /* IBV_LINK_LAYER_* */
    enum ibv_mtu mtu;
    int max_cqe;
    uint32_t ipv4;                  /* network order: where the handshake listener is reached */
    double gbps;
    pthread_mutex_t lock;           /* async events */
    atomic_int dead;                /* a port/device event: every endpoint fails */
    atomic_uint fatal_gen;
    uint32_t fatal_qpn[16];         /* QPs that an async event put in error (ring) */
    char dead_msg[256];
} vb_ctx_t;

struct vb_ep;
struct vb_conn;

typedef struct vb_req {
    struct vb_conn *conn;
    int is_send, state;
    cohort_status_t st;
    void *buf;
    size_t len, nbytes;
    uint64_t tag;
    uint32_t id, sid;               /* own id; recv: the sender's id from its RTS */
    int drop;                       /* recv: CTS says DROP */
    vb_rc_entry_t *reg;
    uint64_t raddr;
    uint32_t rkey, rid;             /* send: the receiver's buffer and request id */
    struct vb_req *prev, *next;     /* conn->reqs */
    struct vb_req *qnext;           /* txq or rq */
    char msg[200];
} vb_req_t;

enum { S_QUEUED = 1, S_EAGER_SENT, S_WAIT_CTS, S_WRITE_Q, S_WRITING,
       R_POSTED, R_CTS_Q, R_WAIT_DATA, DONE };
enum { SS_NONE = 0, SS_CONNECTING, SS_SEND, SS_WAIT_REPLY, SS_WAIT_HELLO, SS_WAIT_READY, SS_LIVE,
       SS_CLOSED };
/* C_GONE: the peer closed or died; what it sent before still matches receives, the rest fail */
enum { C_SETUP = 0, C_UP, C_GONE, C_FAILED };
enum { FD_LISTEN = 1, FD_INCOMING, FD_CONN, FD_COMP, FD_ASYNC, FD_EVENT };

typedef struct fdent { int kind; void *obj; } fdent_t;

typedef struct vb_incoming {
    fdent_t fe;
    int fd;
    unsigned char buf[VB_HELLO_SIZE];
    size_t off;
    struct vb_incoming *next;
} vb_incoming_t;

typedef struct vb_conn {
    fdent_t fe;
    struct vb_ep *ep;
    int peer, connector, state;
    cohort_status_t err;
    char errmsg[320];
    /* handshake socket */
    int fd, ss, ss_next, out_mode;
    unsigned char sbuf[VB_HELLO_SIZE];
    size_t soff;
    /* peer's device address */
    union ibv_gid rgid;
    uint16_t rlid;
    enum ibv_mtu rmtu;
    uint32_t rqpn, rpsn, psn;
    struct ibv_qp *qp;
    unsigned char *rx, *tx;
    struct ibv_mr *rx_mr, *tx_mr;
    uint64_t tx_used;               /* bit per tx slot */
    vb_req_t *tx_req[VB_TX_SLOTS];
    uint16_t unexp[VB_RX_WR];
    unsigned unexp_head, unexp_n;
    vb_credit_t cr;
    int sq_free;
    uint32_t next_id;
    /* orderly close: the peer's BYE carries how many of its messages completed (each consumed
     * one of our receives); the connection fails only once that many have been received */
    uint64_t tx_done, rx_done, bye_count;
    unsigned char bye[VB_BYE_SIZE];
    size_t bye_off;
    int bye_seen;
    vb_req_t *reqs;
    vb_req_t *txq, *txq_tail, *rq, *rq_tail;
} vb_conn_t;

typedef struct vb_ep {
    vb_ctx_t *ctx;
    const cohort_host_v1_t *host;
    int rank, nranks;
    uint64_t comm_id;
    char job[64];
    struct ibv_pd *pd;
    struct ibv_comp_channel *chan;
    struct ibv_cq *cq;
    unsigned cq_unacked;
    int lfd, epfd, evfd;
    uint16_t lport;
    fdent_t fe_listen, fe_comp, fe_async, fe_event;
    vb_conn_t **conns;
    vb_incoming_t *incoming;
    int nincoming;
    vb_regcache_t rc;
    int memev;                      /* vb_memev_start succeeded: the cache keeps registrations */
    unsigned fatal_seen;
    int in_progress, signalled;
} vb_ep_t;

/* ---- small helpers ----------------------------------------------------------------------- */

static const char *wc_text(enum ibv_wc_status s) { return ibv_wc_status_str(s); }

static void signal_ep(vb_ep_t *ep)
{
    if (ep->in_progress || ep->signalled) return;
    uint64_t one = 1;
    if (write(ep->evfd, &one, sizeof one) == (ssize_t)sizeof one) ep->signalled = 1;
}

static void epoll_set(vb_ep_t *ep, int fd, fdent_t *fe, uint32_t events, int op)
{
    struct epoll_event ev;
    memset(&ev, 0, sizeof ev);
    ev.events = events;
    ev.data.ptr = fe;
    (void)epoll_ctl(ep->epfd, op, fd, &ev);
}

/* ---- requests ---------------------------------------------------------------------------- */

static void req_done(vb_req_t *r, cohort_status_t st)
{
    if (r->state == DONE) return;
    r->state = DONE;
    r->st = st;
    if (r->reg) {
        vb_rc_put(&r->conn->ep->rc, r->reg);
        r->reg = NULL;
    }
    signal_ep(r->conn->ep);
}

static void req_free(vb_req_t *r)
{
    vb_conn_t *c = r->conn;
    if (r->reg) vb_rc_put(&c->ep->rc, r->reg);
    if (r->prev) r->prev->next = r->next; else c->reqs = r->next;
    if (r->next) r->next->prev = r->prev;
    free(r);
}

static vb_req_t *find_req(vb_conn_t *c, int state, uint32_t id)
{
    for (vb_req_t *r = c->reqs; r; r = r->next)
        if (r->state == state && r->id == id) return r;
    return NULL;
}

static void q_push(vb_req_t **head, vb_req_t **tail, vb_req_t *r)
{
    r->qnext = NULL;
    if (*tail) (*tail)->qnext = r; else *head = r;
    *tail = r;
}

static vb_req_t *q_pop(vb_req_t **head, vb_req_t **tail)
{
    vb_req_t *r = *head;
    if (r) {
        *head = r->qnext;
        if (!*head) *tail = NULL;
        r->qnext = NULL;
    }
    return r;
}

/* ---- connection failure ------------------------------------------------------------------ */

static void conn_fail(vb_conn_t *c, cohort_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void conn_fail(vb_conn_t *c, cohort_status_t st, const char *fmt, ...)
{
    if (c->state == C_FAILED) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->errmsg, sizeof c->errmsg, fmt, ap);
    va_end(ap);
    c->state = C_FAILED;
    c->err = st;
    if (c->fd >= 0) epoll_ctl(c->ep->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    c->ep->host->log(COHORT_LOG_INFO, SUBSYS, "%s", c->errmsg);
    for (vb_req_t *r = c->reqs; r; r = r->next) req_done(r, st);
    c->txq = c->txq_tail = c->rq = c->rq_tail = NULL;
    signal_ep(c->ep);
}

#define DEVPEER(c) (c)->ep->ctx->devname, (c)->ep->ctx->port, (c)->ep->rank, (c)->peer

/* ---- posting ------------------------------------------------------------------------------ */

static int post_recv(vb_conn_t *c, unsigned slot)
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
        conn_fail(c, COHORT_ERR_TRANSPORT, "verbs: ibv_post_recv on %s port %d (rank %d, peer "
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
        conn_fail(c, COHORT_ERR_TRANSPORT, "verbs: ibv_post_send on %s port %d (rank %d, peer "
                  "rank %d) failed: %s", DEVPEER(c), strerror(rc));
        return -1;
    }
    c->tx_used |= (uint64_t)1 << slot;
    c->tx_req[slot] = owner;
    c->sq_free--;
    return 0;
}

static void *rc_reg(void *arg, void *addr, size_t len)
{
    vb_ep_t *ep = arg;
    return ibv_reg_mr(ep->pd, addr, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
}

static void rc_dereg(void *arg, void *handle)
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
    conn_fail(c, COHORT_ERR_TRANSPORT, "verbs: ibv_reg_mr of %zu bytes at %p on %s port %d "
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
            conn_fail(c, COHORT_ERR_TRANSPORT, "verbs: ibv_post_send (RDMA WRITE) on %s port %d "
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
static void pump(vb_conn_t *c)
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
            q_pop(&c->txq, &c->txq_tail);
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
            if (r->drop) req_done(r, r->st);
            else r->state = R_WAIT_DATA;
        }
        q_pop(&c->txq, &c->txq_tail);
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

static void match(vb_conn_t *c)
{
    while ((c->state == C_UP || c->state == C_GONE) && c->rq && c->unexp_n) {
        unsigned slot = c->unexp[c->unexp_head];
        vb_hdr_t h;
        memcpy(&h, c->rx + (size_t)slot * VB_SLOT_SIZE, sizeof h);
        vb_req_t *r = q_pop(&c->rq, &c->rq_tail);
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
            req_done(r, bad ? COHORT_ERR_MISMATCH : COHORT_SUCCESS);
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
            q_push(&c->txq, &c->txq_tail, r);
        }
        if (post_recv(c, slot)) return;
        vb_credit_freed(&c->cr);
    }
}

static void on_recv(vb_conn_t *c, unsigned slot, uint32_t len)
{
    vb_hdr_t h;
    if (len < sizeof h) {
        conn_fail(c, COHORT_ERR_TRANSPORT, "verbs: rank %d got a %u-byte message from rank %d, "
                  "shorter than a header (another version of the plugin?)", c->ep->rank, len,
                  c->peer);
        return;
    }
    memcpy(&h, c->rx + (size_t)slot * VB_SLOT_SIZE, sizeof h);
    if (vb_credit_grant(&c->cr, h.credits)) {
        conn_fail(c, COHORT_ERR_TRANSPORT, "verbs: rank %d: rank %d returned %u credits, more "
                  "than it could hold (protocol error)", c->ep->rank, c->peer, h.credits);
        return;
    }
    switch (h.type) {
    case M_CREDIT:
        post_recv(c, slot);
        return;
    case M_CTS: {
        vb_req_t *r = find_req(c, S_WAIT_CTS, h.id);
        if (post_recv(c, slot)) return;
        vb_credit_freed(&c->cr);
        if (!r) {
            conn_fail(c, COHORT_ERR_TRANSPORT, "verbs: rank %d: a clear-to-send from rank %d "
                      "names send %u, which is not waiting (protocol error)", c->ep->rank,
                      c->peer, h.id);
            return;
        }
        if (h.flags & F_DROP) {
            r->nbytes = r->len;
            req_done(r, COHORT_SUCCESS);
        } else {
            r->raddr = h.addr;
            r->rkey = h.rkey;
            r->rid = h.rid;
            r->state = S_WRITE_Q;
            q_push(&c->txq, &c->txq_tail, r);
        }
        return;
    }
    case M_EAGER:
    case M_RTS:
        if (h.type == M_EAGER && h.len + sizeof h > len) {
            conn_fail(c, COHORT_ERR_TRANSPORT, "verbs: rank %d: message from rank %d is shorter "
                      "than its header says (protocol error)", c->ep->rank, c->peer);
            return;
        }
        c->unexp[(c->unexp_head + c->unexp_n) % VB_RX_WR] = (uint16_t)slot;
        c->unexp_n++;
        match(c);
        return;
    default:
        conn_fail(c, COHORT_ERR_TRANSPORT, "verbs: rank %d: message of unknown type %u from rank "
                  "%d (another version of the plugin?)", c->ep->rank, h.type, c->peer);
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
            req_done(r, COHORT_SUCCESS);
        }
    }
    if (wc->status != IBV_WC_SUCCESS) {
        if (c->state == C_FAILED) return;
        if (wc->status == IBV_WC_RETRY_EXC_ERR)
            conn_fail(c, COHORT_ERR_PEER_LOST, "verbs: rank %d lost rank %d on %s port %d: "
                      "transport retry counter exceeded (%s): the peer process or its node is "
                      "gone, or the fabric between them is down", ep->rank, peer,
                      ep->ctx->devname, ep->ctx->port, wc_text(wc->status));
        else
            conn_fail(c, COHORT_ERR_TRANSPORT, "verbs: rank %d, connection to rank %d on %s "
                      "port %d failed: work completion status %s (%d, vendor error 0x%x)",
                      ep->rank, peer, ep->ctx->devname, ep->ctx->port, wc_text(wc->status),
                      (int)wc->status, wc->vendor_err);
        return;
    }
    /* Not only C_UP: the acceptor's QP is ready before the connector's last handshake step
     * reaches it, and the connector may already have sent (match() waits for C_UP). */
    if (c->state == C_FAILED) return;
    switch (kind) {
    case W_RECV:
        if (idx >= VB_RX_WR) return;
        if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
            uint32_t rid = ntohl(wc->imm_data);
            if (post_recv(c, idx)) return;
            vb_credit_freed(&c->cr);
            vb_req_t *r = find_req(c, R_WAIT_DATA, rid);
            if (!r) {
                conn_fail(c, COHORT_ERR_TRANSPORT, "verbs: rank %d: an RDMA write from rank %d "
                          "names receive %u, which is not waiting (protocol error)", ep->rank,
                          peer, rid);
                return;
            }
            req_done(r, COHORT_SUCCESS);
        } else {
            on_recv(c, idx, wc->byte_len);
        }
        break;
    case W_WRITE: {
        vb_req_t *r = find_req(c, S_WRITING, idx);
        if (r) {
            r->nbytes = r->len;
            req_done(r, COHORT_SUCCESS);
        }
        break;
    }
    default:
        break;
    }
}

static void gone_check(vb_conn_t *c);

static int poll_cq(vb_ep_t *ep)
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
            match(c);
            pump(c);
        }
        gone_check(c);
    }
    return COHORT_SUCCESS;
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
    ep->host->auth(p, VB_HELLO_MAC_OFF, p + VB_HELLO_MAC_OFF);
    c->soff = 0;
}

/* 0: valid hello of `kind` for this endpoint; -1 with why. */
static int hello_check(vb_ep_t *ep, const unsigned char *p, int kind, const char **why)
{
    unsigned char mac[32];
    if (kit_get_be32(p) != VB_HELLO_MAGIC) { *why = "not a cohort verbs handshake"; return -1; }
    ep->host->auth(p, VB_HELLO_MAC_OFF, mac);
    if (memcmp(mac, p + VB_HELLO_MAC_OFF, 32)) { *why = "bad HMAC (another job?)"; return -1; }
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
        conn_fail(c, COHORT_ERR_TRANSPORT, "verbs: ibv_modify_qp to RTR on %s port %d (rank %d, "
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
        conn_fail(c, COHORT_ERR_TRANSPORT, "verbs: ibv_modify_qp to RTS on %s port %d (rank %d, "
                  "peer rank %d) failed: %s", DEVPEER(c), strerror(rc));
        return -1;
    }
    return 0;
}

static void conn_up(vb_conn_t *c)
{
    c->state = C_UP;
    c->ss = SS_LIVE;
    epoll_set(c->ep, c->fd, &c->fe, EPOLLIN | EPOLLRDHUP, EPOLL_CTL_MOD);
    c->ep->host->log(COHORT_LOG_TRACE, SUBSYS, "verbs: rank %d connected to rank %d on %s port "
                     "%d (QPN %u -> %u)", c->ep->rank, c->peer, c->ep->ctx->devname,
                     c->ep->ctx->port, c->qp->qp_num, c->rqpn);
    match(c);
    pump(c);
    signal_ep(c->ep);
}

/* Writes what is left of sbuf; 1 when done, 0 when blocked, -1 on failure. */
static int sock_flush(vb_conn_t *c)
{
    while (c->soff < VB_HELLO_SIZE) {
        ssize_t n = send(c->fd, c->sbuf + c->soff, VB_HELLO_SIZE - c->soff, MSG_NOSIGNAL);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            if (!c->out_mode) epoll_set(c->ep, c->fd, &c->fe, EPOLLIN | EPOLLOUT, EPOLL_CTL_MOD);
            c->out_mode = 1;
            return 0;
        }
        if (n < 0) {
            conn_fail(c, COHORT_ERR_PEER_LOST, "verbs: rank %d: the handshake with rank %d "
                      "failed: send: %s", c->ep->rank, c->peer, strerror(errno));
            return -1;
        }
        c->soff += (size_t)n;
    }
    if (c->out_mode) epoll_set(c->ep, c->fd, &c->fe, EPOLLIN, EPOLL_CTL_MOD);
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
            conn_fail(c, COHORT_ERR_PEER_LOST, "verbs: rank %d: the handshake with rank %d "
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
        conn_fail(c, COHORT_ERR_PEER_LOST, "verbs: rank %d lost rank %d (%s port %d) during the "
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
    (void)poll_cq(ep);            /* what arrived before the peer left still counts */
}

/* A gone peer's last messages have all arrived: match what can be matched, fail the rest. */
static void gone_check(vb_conn_t *c)
{
    if (c->state != C_GONE || (c->bye_seen && c->rx_done < c->bye_count)) return;
    match(c);
    if (c->state != C_GONE) return;
    int failed = 0;
    for (vb_req_t *r = c->reqs; r; r = r->next)
        if (r->state != DONE && !(r->state == R_POSTED && c->unexp_n)) {
            req_done(r, COHORT_ERR_PEER_LOST);
            failed = 1;
        }
    c->txq = c->txq_tail = NULL;
    if (!c->unexp_n) c->rq = c->rq_tail = NULL;
    if (failed) signal_ep(c->ep);
}

/* Advances one connection's handshake (and watches a live one's socket). */
static void conn_sock(vb_conn_t *c)
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
                conn_fail(c, COHORT_ERR_PEER_LOST, "verbs: rank %d cannot reach rank %d's "
                          "handshake listener: %s", c->ep->rank, c->peer, strerror(err));
                return;
            }
            /* connected? a zero-byte send tells apart "still connecting" */
            struct sockaddr_in sa;
            socklen_t sl = sizeof sa;
            if (getpeername(c->fd, (struct sockaddr *)&sa, &sl) < 0) {
                if (!c->out_mode) epoll_set(c->ep, c->fd, &c->fe, EPOLLOUT, EPOLL_CTL_MOD);
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
                conn_fail(c, COHORT_ERR_TRANSPORT, "verbs: rank %d: handshake with rank %d "
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
    epoll_set(ep, c->fd, &c->fe, EPOLLIN, EPOLL_CTL_ADD);
    if (qp_connect(c)) return;
    hello_build(c, REPLY);
    c->ss = SS_SEND;
    c->ss_next = SS_WAIT_READY;
    conn_sock(c);
}

static void incoming_drop(vb_ep_t *ep, vb_incoming_t *in)
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

static void incoming_read(vb_ep_t *ep, vb_incoming_t *in)
{
    while (in->off < VB_HELLO_SIZE) {
        ssize_t n = recv(in->fd, in->buf + in->off, VB_HELLO_SIZE - in->off, MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
        if (n <= 0) {
            incoming_drop(ep, in);
            return;
        }
        in->off += (size_t)n;
    }
    const char *why = NULL;
    if (hello_check(ep, in->buf, HELLO, &why)) {
        ep->host->log(COHORT_LOG_WARN, SUBSYS, "verbs: rank %d refused a handshake connection: "
                      "%s", ep->rank, why);
        incoming_drop(ep, in);
        return;
    }
    int src = (int)kit_get_be32(in->buf + 8);
    vb_conn_t *c = ep->conns[src];
    if (c && !c->connector && c->fd < 0 && c->state == C_SETUP) {
        attach_incoming(c, in);
        incoming_drop(ep, in);
    } else if (c && (c->connector || c->fd >= 0)) {
        ep->host->log(COHORT_LOG_WARN, SUBSYS, "verbs: rank %d refused a second handshake from "
                      "rank %d", ep->rank, src);
        incoming_drop(ep, in);
    } else {
        epoll_ctl(ep->epfd, EPOLL_CTL_DEL, in->fd, NULL);   /* waits for accept() */
    }
}

static void do_accept(vb_ep_t *ep)
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
        epoll_set(ep, fd, &in->fe, EPOLLIN, EPOLL_CTL_ADD);
        incoming_read(ep, in);
    }
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
                conn_fail(ep->conns[p], COHORT_ERR_TRANSPORT, "%s: connection of rank %d to "
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
                conn_fail(c, COHORT_ERR_TRANSPORT, "verbs: rank %d: the queue pair to rank %d "
                          "on %s port %d went to the error state (async event)", ep->rank, p,
                          x->devname, x->port);
    }
    pthread_mutex_unlock(&x->lock);
    ep->fatal_seen = g;
}

/* ---- progress ---------------------------------------------------------------------------- */

static cohort_status_t ep_advance(vb_ep_t *ep, int full)
{
    if (full) {
        struct epoll_event evs[32];
        int n = epoll_wait(ep->epfd, evs, 32, 0);
        for (int i = 0; i < n; i++) {
            fdent_t *fe = evs[i].data.ptr;
            switch (fe->kind) {
            case FD_LISTEN: do_accept(ep); break;
            case FD_INCOMING: incoming_read(ep, fe->obj); break;
            case FD_CONN: conn_sock(fe->obj); break;
            case FD_ASYNC: async_events(ep); break;
            case FD_EVENT: {
                uint64_t v;
                if (read(ep->evfd, &v, sizeof v) < 0) { /* nothing to clear */ }
                ep->signalled = 0;
                break;
            }
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
    cohort_status_t st = poll_cq(ep);
    if (st != COHORT_SUCCESS) return st;
    if (full) {
        int rc = ibv_req_notify_cq(ep->cq, 0);
        if (rc)
            return ep->host->error(COHORT_ERR_TRANSPORT, "verbs: ibv_req_notify_cq on %s port "
                                   "%d (rank %d) failed: %s", ep->ctx->devname, ep->ctx->port,
                                   ep->rank, strerror(rc));
        st = poll_cq(ep);
    }
    return st;
}

static cohort_status_t vb_progress(cohort_tp_ep_t e)
{
    vb_ep_t *ep = e;
    if (!ep) return COHORT_ERR_INVALID_ARG;
    ep->in_progress = 1;
    cohort_status_t st = ep_advance(ep, 1);
    ep->in_progress = 0;
    return st;
}

static int vb_ep_fd(cohort_tp_ep_t e) { return e ? ((vb_ep_t *)e)->epfd : -1; }

/* ---- process-wide ------------------------------------------------------------------------ */

static double port_gbps(const struct ibv_port_attr *pa)
{
    double lane;
    switch (pa->active_speed) {
    case 1: lane = 2.5; break;
    case 2: lane = 5; break;
    case 4: case 8: lane = 10; break;
    case 16: lane = 14; break;
    case 32: lane = 25; break;
    case 64: lane = 50; break;
    case 128: lane = 100; break;
    default: lane = 25; break;
    }
    int w;
    switch (pa->active_width) {
    case 1: w = 1; break;
    case 2: w = 4; break;
    case 4: w = 8; break;
    case 8: w = 12; break;
    case 16: w = 2; break;
    default: w = 4; break;
    }
    return lane * w / 8.0;            /* GB/s */
}

static int gid_is_v4(const union ibv_gid *g)
{
    static const unsigned char pfx[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
    return !memcmp(g->raw, pfx, 12);
}

/* Picks the GID: COHORT_IB_GID_INDEX, else the IPv4-mapped RoCE v2 one, else RoCE v2, else 0. */
static cohort_status_t pick_gid(vb_ctx_t *x, const struct ibv_port_attr *pa)
{
    const cohort_host_v1_t *h = x->host;
    long want = -1;
    if (h->setting("COHORT_IB_GID_INDEX")) {
        cohort_status_t st = h->setting_long("COHORT_IB_GID_INDEX", &want);
        if (st != COHORT_SUCCESS) return st;
        if (want < 0 || want >= pa->gid_tbl_len)
            return h->error(COHORT_ERR_INVALID_ARG, "verbs: COHORT_IB_GID_INDEX=%ld: %s port %d "
                            "has GIDs 0 to %d", want, x->devname, x->port, pa->gid_tbl_len - 1);
        if (ibv_query_gid(x->dev, (uint8_t)x->port, (int)want, &x->gid))
            return h->error(COHORT_ERR_INVALID_ARG, "verbs: COHORT_IB_GID_INDEX=%ld: "
                            "ibv_query_gid on %s port %d failed: %s", want, x->devname, x->port,
                            strerror(errno));
        x->gid_index = (int)want;
        return COHORT_SUCCESS;
    }
    x->gid_index = 0;
    if (x->link_layer != IBV_LINK_LAYER_ETHERNET) {
        if (ibv_query_gid(x->dev, (uint8_t)x->port, 0, &x->gid))
            memset(&x->gid, 0, sizeof x->gid);
        return COHORT_SUCCESS;
    }
    int best = -1, rank = 0;
    for (int i = 0; i < pa->gid_tbl_len; i++) {
        struct ibv_gid_entry ent;
        if (ibv_query_gid_ex(x->dev, (uint32_t)x->port, (uint32_t)i, &ent, 0)) continue;
        int r = 1;
        if (ent.gid_type == IBV_GID_TYPE_ROCE_V2) r = gid_is_v4(&ent.gid) ? 3 : 2;
        if (r > rank) {
            rank = r;
            best = i;
            x->gid = ent.gid;
        }
        if (r == 3) break;
    }
    if (best < 0)
        return h->error(COHORT_ERR_UNSUPPORTED, "no RDMA device with a usable GID: %s port %d "
                        "(RoCE) has no valid GID (is an IP address configured on its network "
                        "interface?)", x->devname, x->port);
    x->gid_index = best;
    return COHORT_SUCCESS;
}

static cohort_status_t vb_init(const cohort_host_v1_t *host, cohort_tp_ctx_t *ctxp)
{
    if (!host || !ctxp || !COHORT_HAS_FIELD(host, cohort_host_v1_t, auth) || !host->error ||
        !host->log || !host->setting || !host->setting_long || !host->auth || !host->netifs)
        return host && COHORT_HAS_FIELD(host, cohort_host_v1_t, error) && host->error
            ? host->error(COHORT_ERR_UNSUPPORTED, "verbs: the core's host table is too old")
            : COHORT_ERR_UNSUPPORTED;
    *ctxp = NULL;
    int ndev = 0;
    errno = 0;
    struct ibv_device **list = ibv_get_device_list(&ndev);
    if (!list || ndev == 0) {
        int err = errno;
        if (list) ibv_free_device_list(list);
        return host->error(COHORT_ERR_UNSUPPORTED, "no RDMA device (ibv_get_device_list found "
                           "none%s%s; load the device's driver, e.g. mlx5_ib, or create a "
                           "Soft-RoCE device: rdma link add rxe0 type rxe netdev eth0)",
                           err ? ": " : "", err ? strerror(err) : "");
    }
    vb_hca_spec_t spec;
    char perr[256];
    const char *hca = host->setting("COHORT_IB_HCA");
    if (vb_hca_parse(hca, &spec, perr, sizeof perr)) {
        ibv_free_device_list(list);
        return host->error(COHORT_ERR_INVALID_ARG, "COHORT_IB_HCA=%s", perr);
    }
    vb_ctx_t *x = calloc(1, sizeof *x);
    if (!x) {
        ibv_free_device_list(list);
        return host->error(COHORT_ERR_NO_MEMORY, "verbs: no memory for the plugin context");
    }
    x->host = host;
    /* Devices nearest to this process's cores first (the host's topology, ABI 1.2), the others
     * in the list's order; COHORT_IB_HCA filters. */
    const char **dnames = calloc((size_t)ndev, sizeof *dnames);
    int *dorder = calloc((size_t)ndev, sizeof *dorder);
    if (!dnames || !dorder) {
        free(dnames);
        free(dorder);
        free(x);
        ibv_free_device_list(list);
        return host->error(COHORT_ERR_NO_MEMORY, "verbs: no memory for the device list");
    }
    for (int d = 0; d < ndev; d++) dnames[d] = ibv_get_device_name(list[d]);
    const char *const *near = NULL;
    int nnear = 0;
    if (!COHORT_HAS_FIELD(host, cohort_host_v1_t, rdma_devices) || !host->rdma_devices ||
        host->rdma_devices(&near, &nnear))
        nnear = 0;
    vb_order_devices(dnames, ndev, near, nnear, dorder);
    free(dnames);
    char seen[512] = "";
    size_t sl = 0;
    struct ibv_port_attr pa;
    for (int di = 0; di < ndev && !x->dev; di++) {
        int d = dorder[di];
        const char *name = ibv_get_device_name(list[d]);
        struct ibv_context *dev = ibv_open_device(list[d]);
        if (!dev) {
            sl += (size_t)snprintf(seen + sl, sl < sizeof seen ? sizeof seen - sl : 0,
                                   "%s%s (ibv_open_device: %s)", sl ? ", " : "", name,
                                   strerror(errno));
            if (sl >= sizeof seen) sl = sizeof seen - 1;
            continue;
        }
        struct ibv_device_attr da;
        if (ibv_query_device(dev, &da)) {
            sl += (size_t)snprintf(seen + sl, sl < sizeof seen ? sizeof seen - sl : 0,
                                   "%s%s (ibv_query_device: %s)", sl ? ", " : "", name,
                                   strerror(errno));
            if (sl >= sizeof seen) sl = sizeof seen - 1;
            ibv_close_device(dev);
            continue;
        }
        for (int p = 1; p <= da.phys_port_cnt; p++) {
            if (!vb_hca_match(&spec, name, p)) continue;
            if (ibv_query_port(dev, (uint8_t)p, &pa)) continue;
            if (pa.state != IBV_PORT_ACTIVE) {
                sl += (size_t)snprintf(seen + sl, sl < sizeof seen ? sizeof seen - sl : 0,
                                       "%s%s:%d (%s)", sl ? ", " : "", name, p,
                                       ibv_port_state_str(pa.state));
                if (sl >= sizeof seen) sl = sizeof seen - 1;
                continue;
            }
            x->dev = dev;
            x->port = p;
            x->max_cqe = da.max_cqe;
            snprintf(x->devname, sizeof x->devname, "%s", name);
            break;
        }
        if (!x->dev) ibv_close_device(dev);
    }
    free(dorder);
    ibv_free_device_list(list);
    int near_pos = -1;
    for (int i = 0; x->dev && i < nnear && near_pos < 0; i++)
        if (near[i] && !strcmp(near[i], x->devname)) near_pos = i;
    const char *why = near_pos == 0 ? "the nearest to this process's cores"
                      : near_pos > 0 ? "the nearest usable to this process's cores"
                      : nnear > 0 ? "the topology does not list it: first usable in the list"
                                  : "first usable (no topology)";
    if (!x->dev) {
        free(x);
        return host->error(COHORT_ERR_UNSUPPORTED, "no RDMA device with an active port%s%s%s%s",
                           hca && *hca ? " allowed by COHORT_IB_HCA=" : "", hca && *hca ? hca : "",
                           seen[0] ? "; found: " : "", seen);
    }
    x->lid = pa.lid;
    x->link_layer = pa.link_layer;
    x->mtu = pa.active_mtu;
    x->gbps = port_gbps(&pa);
    cohort_status_t st = pick_gid(x, &pa);
    if (st != COHORT_SUCCESS) {
        ibv_close_device(x->dev);
        free(x);
        return st;
    }
    if (gid_is_v4(&x->gid)) {
        memcpy(&x->ipv4, x->gid.raw + 12, 4);
    } else {
        const cohort_netif_t *ifs = NULL;
        int nifs = 0;
        if (host->netifs(&ifs, &nifs) == COHORT_SUCCESS)
            for (int i = 0; i < nifs && !x->ipv4; i++)
                if (ifs[i].family == AF_INET) memcpy(&x->ipv4, ifs[i].addr, 4);
        if (!x->ipv4) {
            st = host->error(COHORT_ERR_UNSUPPORTED, "verbs: %s port %d has no IPv4-mapped "
                             "GID and no IPv4 interface is allowed for the connection "
                             "handshake (COHORT_SOCKET_IFNAME)", x->devname, x->port);
            ibv_close_device(x->dev);
            free(x);
            return st;
        }
    }
    int fl = fcntl(x->dev->async_fd, F_GETFL);
    if (fl < 0 || fcntl(x->dev->async_fd, F_SETFL, fl | O_NONBLOCK) < 0) {
        st = host->error(COHORT_ERR_SYSTEM, "verbs: fcntl on the async event fd of %s: %s",
                         x->devname, strerror(errno));
        ibv_close_device(x->dev);
        free(x);
        return st;
    }
    pthread_mutex_init(&x->lock, NULL);
    struct rlimit rl;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        rl.rlim_cur < VB_MEMLOCK_WARN)
        host->log(COHORT_LOG_WARN, SUBSYS, "verbs: RLIMIT_MEMLOCK is only %llu KiB: registering "
                  "buffers with %s will fail beyond that; raise it with 'ulimit -l unlimited' "
                  "(or memlock in /etc/security/limits.conf, or --ulimit memlock=-1 for a "
                  "container)", (unsigned long long)rl.rlim_cur / 1024, x->devname);
    char gs[INET6_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET6, x->gid.raw, gs, sizeof gs);
    host->log(COHORT_LOG_INFO, SUBSYS, "verbs: using %s port %d (%s; %s, MTU %d, GID index %d "
              "%s, ~%.1f GB/s)", x->devname, x->port, why,
              x->link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand",
              128 << x->mtu, x->gid_index, gs, x->gbps);
    *ctxp = x;
    return COHORT_SUCCESS;
}

static cohort_status_t vb_finalize(cohort_tp_ctx_t c)
{
    vb_ctx_t *x = c;
    if (!x) return COHORT_SUCCESS;
    ibv_close_device(x->dev);
    pthread_mutex_destroy(&x->lock);
    free(x);
    return COHORT_SUCCESS;
}

static cohort_status_t vb_get_attr(cohort_tp_ctx_t c, cohort_transport_attr_t *attr)
{
    vb_ctx_t *x = c;
    if (!attr) return COHORT_ERR_INVALID_ARG;
    cohort_transport_attr_t a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.scope = COHORT_SCOPE_NETWORK;
    a.bandwidth_gbps = x && x->gbps > 1.5 ? x->gbps : 1.5;   /* above tcp's estimate */
    a.latency_us = 3.0;
    a.gpu_memory = 0;
    a.max_inflight = 0;
    cohort_attr_fill(attr, &a);
    return COHORT_SUCCESS;
}

/* ---- endpoints --------------------------------------------------------------------------- */

static void conn_destroy(vb_conn_t *c);

static cohort_status_t vb_ep_close(cohort_tp_ep_t e)
{
    vb_ep_t *ep = e;
    if (!ep) return COHORT_SUCCESS;
    for (int p = 0; ep->conns && p < ep->nranks; p++)
        if (ep->conns[p]) conn_destroy(ep->conns[p]);
    while (ep->incoming) incoming_drop(ep, ep->incoming);
    if (ep->lfd >= 0) close(ep->lfd);
    if (ep->epfd >= 0) close(ep->epfd);
    if (ep->evfd >= 0) close(ep->evfd);
    if (ep->pd) {
        if (ep->rc.hits + ep->rc.misses)
            ep->host->log(COHORT_LOG_INFO, SUBSYS, "verbs: rank %d: registration cache: %llu "
                          "hits, %llu registrations, %llu evictions, %llu dropped as unmapped",
                          ep->rank, (unsigned long long)ep->rc.hits,
                          (unsigned long long)ep->rc.misses, (unsigned long long)ep->rc.evictions,
                          (unsigned long long)ep->rc.invalidated);
        vb_rc_fini(&ep->rc);
    }
    if (ep->memev) vb_memev_stop();
    if (ep->cq) {
        if (ep->cq_unacked) ibv_ack_cq_events(ep->cq, ep->cq_unacked);
        ibv_destroy_cq(ep->cq);
    }
    if (ep->chan) ibv_destroy_comp_channel(ep->chan);
    if (ep->pd) ibv_dealloc_pd(ep->pd);
    free(ep->conns);
    free(ep);
    return COHORT_SUCCESS;
}

/* The registration cache keeps registrations across messages only where unmapped memory is
 * reported (vb_memev.h); else each large message registers its buffers and deregisters them when
 * it completes. Said once per process at INFO: which, and why. */
static void cache_start(vb_ep_t *ep)
{
    static atomic_int said;
    char why[256] = "";
    ep->memev = vb_memev_start(why, sizeof why);
    vb_rc_init(&ep->rc, VB_REG_CACHE, (size_t)sysconf(_SC_PAGESIZE), ep->memev, rc_reg, rc_dereg,
               ep);
    if (atomic_exchange(&said, 1)) return;
    if (ep->memev)
        ep->host->log(COHORT_LOG_INFO, SUBSYS, "verbs: rank %d: registration cache on: libucm "
                      "reports unmapped memory, so registrations are kept across messages and "
                      "dropped when their pages go", ep->rank);
    else
        ep->host->log(COHORT_LOG_INFO, SUBSYS, "verbs: rank %d: registration cache off: %s; "
                      "each large message registers its buffers and deregisters them when it "
                      "completes", ep->rank, why);
}

static cohort_status_t vb_ep_open(cohort_tp_ctx_t c, const cohort_ep_info_t *info,
                                  cohort_tp_ep_t *epp, void *addr, size_t *addrlen)
{
    vb_ctx_t *x = c;
    const cohort_host_v1_t *host = x->host;
    cohort_status_t st = cohort_ep_open_check(host, "verbs", info, epp, addr, addrlen);
    if (st != COHORT_SUCCESS) return st;
    if (*addrlen < VB_ADDR_SIZE)
        return host->error(COHORT_ERR_INVALID_ARG, "verbs: ep_open: the address buffer holds "
                           "%zu bytes, %d needed", *addrlen, VB_ADDR_SIZE);
    vb_ep_t *ep = calloc(1, sizeof *ep);
    if (!ep) return host->error(COHORT_ERR_NO_MEMORY, "verbs: no memory for an endpoint");
    ep->ctx = x;
    ep->host = host;
    ep->rank = info->rank;
    ep->nranks = info->nranks;
    ep->comm_id = info->comm_id;
    snprintf(ep->job, sizeof ep->job, "%s", info->job_id ? info->job_id : "");
    ep->lfd = ep->epfd = ep->evfd = -1;
    ep->conns = calloc((size_t)info->nranks, sizeof *ep->conns);
    const char *what = NULL;
    int err = 0;
    if (!ep->conns) { what = "calloc"; err = ENOMEM; goto fail; }
    if (!(ep->pd = ibv_alloc_pd(x->dev))) { what = "ibv_alloc_pd"; err = errno; goto fail; }
    cache_start(ep);
    if (!(ep->chan = ibv_create_comp_channel(x->dev))) {
        what = "ibv_create_comp_channel";
        err = errno;
        goto fail;
    }
    int fl = fcntl(ep->chan->fd, F_GETFL);
    if (fl < 0 || fcntl(ep->chan->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
        what = "fcntl(O_NONBLOCK) on the completion channel";
        err = errno;
        goto fail;
    }
    long cqe = (long)(VB_RX_WR + VB_SQ_WR) * (info->nranks > 1 ? info->nranks - 1 : 1) + 64;
    if (x->max_cqe > 0 && cqe > x->max_cqe) cqe = x->max_cqe;
    if (!(ep->cq = ibv_create_cq(x->dev, (int)cqe, ep, ep->chan, 0))) {
        what = "ibv_create_cq";
        err = errno;
        goto fail;
    }
    int rc = ibv_req_notify_cq(ep->cq, 0);
    if (rc) { what = "ibv_req_notify_cq"; err = rc; goto fail; }
    ep->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (ep->lfd < 0) { what = "socket"; err = errno; goto fail; }
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_ANY);
    socklen_t sl = sizeof sa;
    if (bind(ep->lfd, (struct sockaddr *)&sa, sizeof sa) < 0) { what = "bind"; err = errno; goto fail; }
    if (listen(ep->lfd, 128) < 0) { what = "listen"; err = errno; goto fail; }
    if (getsockname(ep->lfd, (struct sockaddr *)&sa, &sl) < 0) {
        what = "getsockname";
        err = errno;
        goto fail;
    }
    ep->lport = ntohs(sa.sin_port);
    if ((ep->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0) { what = "epoll_create1"; err = errno; goto fail; }
    if ((ep->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) { what = "eventfd"; err = errno; goto fail; }
    ep->fe_listen.kind = FD_LISTEN;
    ep->fe_comp.kind = FD_COMP;
    ep->fe_async.kind = FD_ASYNC;
    ep->fe_event.kind = FD_EVENT;
    epoll_set(ep, ep->lfd, &ep->fe_listen, EPOLLIN, EPOLL_CTL_ADD);
    epoll_set(ep, ep->chan->fd, &ep->fe_comp, EPOLLIN, EPOLL_CTL_ADD);
    epoll_set(ep, x->dev->async_fd, &ep->fe_async, EPOLLIN, EPOLL_CTL_ADD);
    epoll_set(ep, ep->evfd, &ep->fe_event, EPOLLIN, EPOLL_CTL_ADD);
    ep->fatal_seen = atomic_load(&x->fatal_gen);

    unsigned char *b = addr;
    memset(b, 0, VB_ADDR_SIZE);
    kit_put_be32(b, VB_ADDR_MAGIC);
    b[4] = (unsigned char)x->link_layer;
    b[5] = (unsigned char)x->port;
    b[6] = (unsigned char)x->mtu;
    b[7] = (unsigned char)x->gid_index;
    memcpy(b + 8, x->gid.raw, 16);
    kit_put_be32(b + 24, x->lid);
    memcpy(b + 28, &x->ipv4, 4);
    kit_put_be32(b + 32, ep->lport);
    kit_put_be32(b + 36, 0x01020304u);
    *addrlen = VB_ADDR_SIZE;
    *epp = ep;
    return COHORT_SUCCESS;
fail:
    vb_ep_close(ep);
    return host->error(COHORT_ERR_TRANSPORT, "verbs: ep_open on %s port %d (rank %d): %s failed: "
                       "%s", x->devname, x->port, info->rank, what, strerror(err));
}

typedef struct vb_addr {
    int link_layer, port;
    enum ibv_mtu mtu;
    union ibv_gid gid;
    uint16_t lid;
    uint32_t ipv4;
    uint16_t tport;
} vb_addr_t;

static int addr_decode(const void *blob, size_t len, vb_addr_t *a)
{
    unsigned char b[VB_ADDR_SIZE];
    if (!blob || len != VB_ADDR_SIZE) return -1;
    memcpy(b, blob, sizeof b);
    if (kit_get_be32(b) != VB_ADDR_MAGIC || kit_get_be32(b + 36) != 0x01020304u) return -1;
    a->link_layer = b[4];
    a->port = b[5];
    a->mtu = (enum ibv_mtu)b[6];
    memcpy(a->gid.raw, b + 8, 16);
    a->lid = (uint16_t)kit_get_be32(b + 24);
    memcpy(&a->ipv4, b + 28, 4);
    a->tport = (uint16_t)kit_get_be32(b + 32);
    return 0;
}

static int vb_can_reach(cohort_tp_ep_t e, int peer, const void *blob, size_t len)
{
    vb_ep_t *ep = e;
    vb_addr_t a;
    if (!ep || peer < 0 || peer >= ep->nranks || addr_decode(blob, len, &a)) return 0;
    if (a.link_layer != ep->ctx->link_layer) return 0;
    if (a.link_layer != IBV_LINK_LAYER_ETHERNET &&
        memcmp(a.gid.raw, ep->ctx->gid.raw, 8) != 0)      /* IB: the same subnet prefix */
        return 0;
    return 1;
}

/* ---- connections ------------------------------------------------------------------------- */

static void conn_destroy(vb_conn_t *c)
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
    while (c->reqs) req_free(c->reqs);
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
        conn_destroy(c);
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
        if (post_recv(c, i)) {
            ep->conns[peer] = NULL;
            cohort_status_t st = host->error(COHORT_ERR_TRANSPORT, "%s", c->errmsg);
            conn_destroy(c);
            return st;
        }
    *out = c;
    return COHORT_SUCCESS;
fail:
    ep->conns[peer] = NULL;
    conn_destroy(c);
    return host->error(COHORT_ERR_TRANSPORT, "verbs: rank %d, connection to rank %d: %s on %s "
                       "port %d failed: %s", ep->rank, peer, what, x->devname, x->port,
                       strerror(err));
}

static cohort_status_t vb_connect(cohort_tp_ep_t e, int peer, const void *blob, size_t len,
                                  cohort_tp_conn_t *connp)
{
    vb_ep_t *ep = e;
    if (!ep || !connp) return COHORT_ERR_INVALID_ARG;
    *connp = NULL;
    vb_addr_t a;
    if (addr_decode(blob, len, &a))
        return ep->host->error(COHORT_ERR_INVALID_ARG, "verbs: rank %d connecting to rank %d: "
                               "its address (%zu bytes) is not a verbs address of this version",
                               ep->rank, peer, len);
    vb_conn_t *c = NULL;
    cohort_status_t st = conn_new(ep, peer, 1, &c);
    if (st != COHORT_SUCCESS) return st;
    c->rgid = a.gid;
    c->rlid = a.lid;
    c->rmtu = a.mtu;
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) {
        int err = errno;
        conn_destroy(c);
        return ep->host->error(COHORT_ERR_SYSTEM, "verbs: socket() for the handshake with rank "
                               "%d: %s", peer, strerror(err));
    }
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    memcpy(&sa.sin_addr, &a.ipv4, 4);
    sa.sin_port = htons(a.tport);
    c->ss = SS_CONNECTING;
    epoll_set(ep, c->fd, &c->fe, EPOLLOUT, EPOLL_CTL_ADD);
    c->out_mode = 1;
    if (connect(c->fd, (struct sockaddr *)&sa, sizeof sa) < 0 && errno != EINPROGRESS) {
        char ip[INET_ADDRSTRLEN] = "?";
        inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof ip);
        conn_fail(c, COHORT_ERR_PEER_LOST, "verbs: rank %d cannot reach rank %d's handshake "
                  "listener at %s:%u: %s", ep->rank, peer, ip, a.tport, strerror(errno));
    }
    *connp = c;
    return COHORT_SUCCESS;
}

static cohort_status_t vb_accept(cohort_tp_ep_t e, int peer, cohort_tp_conn_t *connp)
{
    vb_ep_t *ep = e;
    if (!ep || !connp) return COHORT_ERR_INVALID_ARG;
    *connp = NULL;
    vb_conn_t *c = NULL;
    cohort_status_t st = conn_new(ep, peer, 0, &c);
    if (st != COHORT_SUCCESS) return st;
    c->ss = SS_WAIT_HELLO;
    *connp = c;
    for (vb_incoming_t *in = ep->incoming; in; in = in->next)
        if (in->off == VB_HELLO_SIZE && (int)kit_get_be32(in->buf + 8) == peer) {
            attach_incoming(c, in);
            incoming_drop(ep, in);
            break;
        }
    return COHORT_SUCCESS;
}

static cohort_status_t vb_conn_test(cohort_tp_conn_t cn)
{
    vb_conn_t *c = cn;
    if (!c) return COHORT_ERR_INVALID_ARG;
    if (c->state == C_SETUP) (void)ep_advance(c->ep, 1);
    if (c->state == C_UP) return COHORT_SUCCESS;
    if (c->state == C_FAILED || c->state == C_GONE)
        return c->ep->host->error(c->err, "%s", c->errmsg);
    return COHORT_IN_PROGRESS;
}

static cohort_status_t vb_conn_close(cohort_tp_conn_t cn)
{
    if (cn) conn_destroy(cn);
    return COHORT_SUCCESS;
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
    vb_req_t *r = calloc(1, sizeof *r);
    if (!r) return c->ep->host->error(COHORT_ERR_NO_MEMORY, "verbs: no memory for a request");
    r->conn = c;
    r->is_send = is_send;
    r->buf = buf;
    r->len = len;
    r->tag = tag;
    r->id = c->next_id++;
    r->next = c->reqs;
    if (c->reqs) c->reqs->prev = r;
    c->reqs = r;
    if (is_send) {
        r->state = S_QUEUED;
        q_push(&c->txq, &c->txq_tail, r);
        pump(c);
    } else {
        r->state = R_POSTED;
        q_push(&c->rq, &c->rq_tail, r);
        match(c);
        pump(c);
        gone_check(c);
    }
    *reqp = r;
    return COHORT_SUCCESS;
}

static cohort_status_t vb_isend(cohort_tp_conn_t cn, const void *buf, size_t len, uint64_t tag,
                                cohort_tp_mr_t mr, cohort_tp_req_t *reqp)
{
    (void)mr;
    if (!cn) return COHORT_ERR_INVALID_ARG;
    return post_req(cn, 1, (void *)(uintptr_t)buf, len, tag, reqp);
}

static cohort_status_t vb_irecv(cohort_tp_conn_t cn, void *buf, size_t len, uint64_t tag,
                                cohort_tp_mr_t mr, cohort_tp_req_t *reqp)
{
    (void)mr;
    if (!cn) return COHORT_ERR_INVALID_ARG;
    return post_req(cn, 0, buf, len, tag, reqp);
}

static cohort_status_t vb_test(cohort_tp_req_t rq, size_t *nbytes)
{
    vb_req_t *r = rq;
    if (!r) return COHORT_ERR_INVALID_ARG;
    vb_conn_t *c = r->conn;
    if (r->state != DONE) {
        cohort_status_t st = ep_advance(c->ep, 1);
        if (st != COHORT_SUCCESS && r->state != DONE) return st;
        if (r->state != DONE) return COHORT_IN_PROGRESS;
    }
    cohort_status_t st = r->st;
    if (nbytes) *nbytes = r->nbytes;
    if (st == COHORT_ERR_MISMATCH && r->msg[0]) (void)c->ep->host->error(st, "%s", r->msg);
    else if (st != COHORT_SUCCESS) (void)c->ep->host->error(st, "%s", c->errmsg);
    req_free(r);
    return st;
}

__attribute__((visibility("default")))
const cohort_transport_v1_t cohort_transport_v1 = {
    .size = sizeof(cohort_transport_v1_t),
    .abi_version = COHORT_PLUGIN_ABI_VERSION,
    .name = "verbs",
    .version = VB_VERSION,
    .init = vb_init,
    .finalize = vb_finalize,
    .get_attr = vb_get_attr,
    .ep_open = vb_ep_open,
    .ep_close = vb_ep_close,
    .can_reach = vb_can_reach,
    .connect = vb_connect,
    .accept = vb_accept,
    .conn_test = vb_conn_test,
    .conn_close = vb_conn_close,
    .mem_reg = NULL,
    .mem_dereg = NULL,
    .isend = vb_isend,
    .irecv = vb_irecv,
    .test = vb_test,
    .progress = vb_progress,
    .ep_fd = vb_ep_fd,
    .coll = NULL,
};
