/* SPDX-License-Identifier: BSD-3-Clause */
/* cohort RDMA verbs transport, private header (not installed): the constants of its wire
 * formats (message header, work request ids, address blob, handshake hello, bye), its objects
 * (context, request, connection, pending handshake, endpoint, decoded address) and the
 * prototypes of the functions verbs.c, vb_conn.c and vb_data.c call across files. Those stay
 * hidden like everything else: the plugin is built with -fvisibility=hidden and exports only
 * cohort_transport_v1. The design is described at the top of verbs.c.
 */
#ifndef COHORT_VB_INT_H
#define COHORT_VB_INT_H

#include <cohort/plugin.h>
#include "transports/common/kit_req.h"
#include "transports/common/kit_wake.h"

#include "vb_credit.h"
#include "vb_regcache.h"

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define SUBSYS "net"
#define VB_VERSION COHORT_VERSION_STRING   /* the package's (configure) */
#define VB_SLOT_SIZE 8192u
#define VB_RX_WR (VB_SLOTS + VB_CTRL_WR)
#define VB_TX_SLOTS (VB_SLOTS + VB_CTRL_WR)
#define VB_CHUNK ((size_t)1 << 30)              /* largest RDMA WRITE of one work request */
#define VB_SQ_WR (2 * VB_SLOTS + VB_CTRL_WR + 16)
#define VB_REG_CACHE 64
#define VB_REQ_POOL 256                         /* finished requests an endpoint keeps */
#define VB_MEMLOCK_WARN ((rlim_t)64 << 20)
#define VB_MAX_INCOMING 1024

#define VB_ADDR_MAGIC 0x43564231u               /* "CVB1" */
#define VB_ADDR_SIZE 48
#define VB_HELLO_MAGIC 0x43564248u              /* "CVBH" */
#define VB_HELLO_SIZE 160
#define VB_HELLO_MAC_OFF 128         /* the kit's trailing MAC (kit_frame_seal) starts here */
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

KIT_FIFO(vb_q, vb_req_t, qnext);   /* a conn's txq and rq */
KIT_LIST(vb_all, vb_req_t, next, prev);   /* conn->reqs */

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
    int lfd, epfd;
    kit_wake_t wake;                /* ep_fd's wake-up: its eventfd is in the epoll set */
    uint16_t lport;
    fdent_t fe_listen, fe_comp, fe_async, fe_event;
    vb_conn_t **conns;
    vb_incoming_t *incoming;
    int nincoming;
    vb_regcache_t rc;
    int memev;                      /* vb_memev_start succeeded: the cache keeps registrations */
    unsigned fatal_seen;
    /* Finished requests kept for the next isend/irecv (vb_req_free). No lock: only the thread
     * driving the endpoint touches requests (plugin.h; the async-event handling under the
     * context's lock does not); vb_ep_close drains it after its conns' requests came back. */
    kit_pool_t reqs;
} vb_ep_t;

#define DEVPEER(c) (c)->ep->ctx->devname, (c)->ep->ctx->port, (c)->ep->rank, (c)->peer

typedef struct vb_addr {
    int link_layer, port;
    enum ibv_mtu mtu;
    union ibv_gid gid;
    uint16_t lid;
    uint32_t ipv4;
    uint16_t tport;
} vb_addr_t;

/* ---- vb_data.c: requests, posting, receiving, completions, async events, progress -------- */

void vb_epoll_set(vb_ep_t *ep, int fd, fdent_t *fe, uint32_t events, int op);
void vb_req_done(vb_req_t *r, cohort_status_t st);
void vb_req_free(vb_req_t *r);
int vb_post_recv(vb_conn_t *c, unsigned slot);
void *vb_mr_reg(void *arg, void *addr, size_t len);
void vb_mr_dereg(void *arg, void *handle);
void vb_pump(vb_conn_t *c);
void vb_match(vb_conn_t *c);
int vb_poll_cq(vb_ep_t *ep);
cohort_status_t vb_ep_advance(vb_ep_t *ep, int full);
cohort_status_t vb_progress(cohort_tp_ep_t e);
cohort_status_t vb_isend(cohort_tp_conn_t cn, const void *buf, size_t len, uint64_t tag,
                         cohort_tp_mr_t mr, cohort_tp_req_t *reqp);
cohort_status_t vb_irecv(cohort_tp_conn_t cn, void *buf, size_t len, uint64_t tag,
                         cohort_tp_mr_t mr, cohort_tp_req_t *reqp);
cohort_status_t vb_test(cohort_tp_req_t rq, size_t *nbytes);

/* ---- vb_conn.c: connection failure, the handshake, connections --------------------------- */

void vb_conn_fail(vb_conn_t *c, cohort_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void vb_gone_check(vb_conn_t *c);
void vb_conn_sock(vb_conn_t *c);
void vb_incoming_drop(vb_ep_t *ep, vb_incoming_t *in);
void vb_incoming_read(vb_ep_t *ep, vb_incoming_t *in);
void vb_do_accept(vb_ep_t *ep);
void vb_conn_destroy(vb_conn_t *c);
cohort_status_t vb_connect(cohort_tp_ep_t e, int peer, const void *blob, size_t len,
                           cohort_tp_conn_t *connp);
cohort_status_t vb_accept(cohort_tp_ep_t e, int peer, cohort_tp_conn_t *connp);
cohort_status_t vb_conn_test(cohort_tp_conn_t cn);
cohort_status_t vb_conn_close(cohort_tp_conn_t cn);

/* ---- verbs.c: endpoints ------------------------------------------------------------------ */

int vb_addr_decode(const void *blob, size_t len, vb_addr_t *a);

#endif
