/* SPDX-License-Identifier: BSD-3-Clause */
/* cohort UCX transport, private header (not installed): the constants of its wire formats (UCX
 * tag layout, address blob, hello, ack, bye), its objects (context, registration, request,
 * connection, endpoint) and the prototypes of the functions ucx.c, ux_data.c and ux_conn.c call
 * across files. Those stay hidden like everything else: the plugin is built with
 * -fvisibility=hidden and exports only cohort_transport_v1. The design is described at the top
 * of ucx.c.
 */
#ifndef COHORT_UX_INT_H
#define COHORT_UX_INT_H

#include <cohort/plugin.h>
#include "transports/common/kit_req.h"
#include "transports/common/kit_wake.h"

#include <ucp/api/ucp.h>

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define SUBSYS "net"
#define UX_PLUGIN_VERSION COHORT_VERSION_STRING   /* the package's (configure) */
#define UX_MAGIC 0x43555831u          /* "CUX1": address blob */
#define UX_HELLO_MAGIC 0x43554831u    /* "CUH1" */
#define UX_ACK_MAGIC 0x43554131u      /* "CUA1" */
#define UX_MAC_LEN 32                /* KIT_MAC_LEN: frames are sealed by the kit */
#define UX_HOST_LEN 16
#define UX_HDR 16                     /* cohort tag + length in front of every message */
#define UX_HELLO_MAX 4096             /* a hello: header + the connector's worker address */
#define UX_RANK_BITS 22
#define UX_SEQ_BITS 40
#define UX_KIND_SHIFT 62
#define UX_KIND_DATA 0ull
#define UX_KIND_HELLO 1ull
#define UX_KIND_ACK 2ull
#define UX_KIND_BYE 3ull               /* "I closed this connection after N sends" */
#define UX_BYE_MAGIC 0x43554231u      /* "CUB1" */
#define UX_BYE_SIZE (4 + 4 + 4 + 8 + 8 + UX_MAC_LEN)
#define UX_SEQ_MASK ((1ull << UX_SEQ_BITS) - 1)
#define UX_PAYLOAD_BIT (1ull << (UX_SEQ_BITS - 1))  /* data: a split message's payload */
#define UX_DSEQ_MASK (UX_PAYLOAD_BIT - 1)             /* data: the sequence number */
#define UX_SPLIT_MIN (64u * 1024u)     /* payloads from this size travel apart (ucx.c, top) */
#define UX_CHUNK (512u * 1024u)        /* ... in chunks of this size */
#define UX_CHUNK_BITS 19               /* a chunk's index in a payload tag */
#define UX_PSEQ_MASK ((1ull << (UX_SEQ_BITS - 1 - UX_CHUNK_BITS)) - 1)  /* its message's seq */
#define UX_SPLIT_MAX ((uint64_t)UX_CHUNK << UX_CHUNK_BITS)  /* larger: one iov (256 GiB) */
#define UX_SLOTS 4                     /* chunk receives in flight per message */
#define UX_POOL 16                     /* idle slots an endpoint keeps for the next messages */
#define UX_REQ_POOL 256                /* finished requests an endpoint keeps */
#define UX_FULL_MASK (~0ull)
#define UX_PROGRESS_MAX 64             /* ucp_worker_progress calls per progress() at most */
#define UX_CLOSE_FLUSH_S 0.5           /* conn_close flushes for at most this per burst */

/* Address blob: magic, nranks, rank, flags, comm_id, job hash, host id, address length, address.
 * flags bit 0: the rank's UCX has a network transport (not only shared memory and self). */
#define UX_BLOB_HDR (4 + 4 + 4 + 4 + 8 + UX_MAC_LEN + UX_HOST_LEN + 4 + 8 + 4)
#define UX_PROC_OFF (24 + UX_MAC_LEN)   /* host id, pid, pid namespace: in blob and hello */
#define UX_PROC_LEN (UX_HOST_LEN + 4 + 8)
/* Hello: magic, src, dst, nranks, comm_id, job hash, host id, pid, pid namespace, address
 * length, address, MAC. */
#define UX_HELLO_HDR (4 + 4 + 4 + 4 + 8 + UX_MAC_LEN + UX_PROC_LEN + 4)
/* Ack: magic, src, dst, comm_id, MAC. */
#define UX_ACK_SIZE (4 + 4 + 4 + 8 + UX_MAC_LEN)

/* ---- objects ----------------------------------------------------------------------------- */

struct ux_ep;
struct ux_conn;

typedef struct ux_ctx {
    const cohort_host_v1_t *host;
    ucp_context_h ucp;
    int has_net;                  /* UCX found a network transport (tcp, RDMA) */
    int has_rdma;                 /* ... one beyond tcp (what cohort's own plugins lack) */
    pthread_mutex_t lock;         /* guards eps (communicators may live on threads) */
    char tls[160];                /* the transports UCX selected, for logs */
    struct ux_ep *eps;
    int nabandoned;               /* workers kept to the end of the process (ep_abandon) */
} ux_ctx_t;

enum { K_DATA = 0, K_HELLO, K_ACK_SEND, K_ACK_RECV, K_BYE, K_HDR, K_CHUNK };

/* A memory registration (mem_reg): ucp_mem_map's handle and the range it covers. */
typedef struct ux_mr {
    ucp_mem_h memh;
    uintptr_t base;
    size_t len;
} ux_mr_t;

typedef struct ux_req {
    int kind;                     /* K_DATA: a user's request; the others set up a conn */
    unsigned char *own;           /* the buffer of a set-up message (freed with the request) */
    struct ux_conn *conn;         /* NULL once orphaned (its conn closed, UCX still owns it) */
    struct ux_ep *ep;
    struct ux_req *anext, *aprev; /* conn->all, or ep->orphans */
    struct ux_req *qnext;         /* conn's deferred queue */
    int is_send;
    void *buf;
    size_t len;
    uint64_t tag;
    void *ucx;                    /* the UCX request while UCX works on it */
    unsigned ncb;                 /* UCX callbacks run for it (ux_req_start: did one run inside?) */
    int posted;
    int done;
    int released;
    int cancelled;                /* ucp_request_cancel was called on it */
    cohort_status_t status;
    size_t nbytes;
    uint64_t seq;                 /* K_DATA: its place in the conn's order (each direction) */
    int stage;                    /* split receive: 1 its header arrived or a slot came back,
                                   * ux_ep_work posts chunk receives; 2 posted */
    ux_mr_t *mr;                  /* send: the caller's registration covering buf, or NULL */
    /* a split message (K_DATA) */
    uint32_t nchunks, chunks_done;
    uint32_t next_chunk;          /* receive: the next chunk to post */
    int pending;                  /* its chunk requests UCX still holds */
    int drop;                     /* receive: consume the chunks, copy nothing (mismatch) */
    int nspare;                   /* receive: slots (below) free for the next chunks */
    void *spare[UX_SLOTS];
    ucp_mem_h spare_mh[UX_SLOTS];
    /* a chunk (K_CHUNK) */
    struct ux_req *parent;        /* its message (not touched once the chunk is orphaned) */
    uint32_t chunk;
    ucp_mem_h slot_memh;          /* receive: own (its slot) is mapped */
    char *errmsg;
    unsigned char hdr[UX_HDR];
    ucp_dt_iov_t iov[2];
} ux_req_t;

KIT_FIFO(ux_defq, ux_req_t, qnext);   /* a conn's deferred queue */
KIT_LIST(ux_all, ux_req_t, anext, aprev);   /* conn->all, ep->orphans */

enum { C_CONNECTING = 1, C_READY, C_FAILED };
typedef struct ux_conn {
    struct ux_ep *ep;
    struct ux_conn *next, *prev;
    int peer;
    int connector;
    int state;
    int logged;
    int watch;                    /* no UCX error handling: watch the peer's pid */
    int peer_eh;                  /* the ucp_ep has UCX's peer error handling (then a close is
                                   * forced, and large payloads may travel apart) */
    int pid;
    cohort_status_t err;
    char errmsg[384];
    ucp_ep_h uep;
    uint64_t send_seq, recv_seq;
    ux_req_t *all;
    ux_req_t *def_h, *def_t;
    int hello_seen;               /* acceptor: its hello arrived */
    int ack_sent;                 /* acceptor: its ack left (UCX wired the ucp_ep up) */
    int peer_closed;              /* the peer closed after closed_seq sends (its bye) */
    uint64_t closed_seq;
    int lost;                     /* UCX reported the end of the ready connection: 1 until
                                   * ux_ep_work judges it (ux_conn_lost), 2 after that with the
                                   * peer's bye seen (else the conn failed) */
    char lostmsg[384];            /* what UCX reported first */
    ux_req_t *ack_rx;             /* connector: the ack's receive, once completed */
} ux_conn_t;

/* A hello that arrived before accept(peer), or is being received. */
typedef struct ux_hello {
    struct ux_hello *next;
    int src;
    unsigned char *buf;
    size_t len;
} ux_hello_t;

/* A standing wildcard receive of one kind of control message (hellos, byes): its request while
 * posted, then what completed it, until the endpoint takes it. */
typedef struct ux_ctlrx {
    struct ux_ep *ep;
    void *req;
    int done;
    ucs_status_t status;
    size_t len;
} ux_ctlrx_t;

typedef struct ux_ep {
    ux_ctx_t *ctx;
    const cohort_host_v1_t *host;
    struct ux_ep *next, *prev;
    ucp_worker_h worker;
    int efd;
    int rank, nranks;
    uint64_t comm_id;
    unsigned char job_hash[UX_MAC_LEN];
    unsigned char proc[UX_PROC_LEN];  /* host id, pid, pid namespace (as in the blob) */
    double next_watch;
    ucp_address_t *addr;
    size_t addr_len;
    ux_conn_t *conns;
    ux_req_t *orphans;
    /* the posted receive for hellos (wildcard over connectors) */
    unsigned char *hbuf;
    ux_ctlrx_t hrx;
    uint64_t htag;
    ux_hello_t *early;            /* authenticated hellos waiting for accept() */
    unsigned char bbuf[UX_BYE_SIZE];  /* the posted receive for byes */
    ux_ctlrx_t brx;
    kit_wake_t wake;              /* ep_fd's wake-up: the decision only (wake.fd stays -1) */
    int nlost;                    /* conns with lost == 1 */
    double close_by;              /* conn_close flushes until then (one budget per burst) */
    int zcopy;                    /* large payloads in chunks (COHORT_UCX_ZCOPY) */
    int nstage;                   /* requests with stage 1 */
    int npool;                    /* idle receive slots (UX_CHUNK bytes, mapped) */
    void *pool[UX_POOL];
    ucp_mem_h pool_mh[UX_POOL];
    /* Finished requests kept for the next ones (ux_req_new, ux_req_free), of every kind. No
     * lock: the thread driving the endpoint is the only one to touch it (plugin.h), UCX's
     * callbacks included (they run inside its ucp_worker_progress, UCS_THREAD_MODE_SINGLE).
     * An orphan goes back here from its callback; ep_destroy drains the pool after the last
     * orphan, or before it abandons the endpoint (ep_abandon in ucx.c: then no callback runs
     * again). */
    kit_pool_t reqs;
    int job_failed;               /* ep_failed: the communicator failed on every rank; its
                                   * worker is not touched again (ep_abandon in ucx.c) */
} ux_ep_t;

/* ---- ucx.c: helpers, the endpoint's work, progress --------------------------------------- */

cohort_status_t ux_status(ucs_status_t s);
const char *ux_status_words(cohort_status_t st);
void ux_ep_signal(ux_ep_t *ep);
double ux_now_s(void);
/* Progresses the worker until UCX request p is no longer in progress or the monotonic clock
 * passes until (ux_now_s), sleeping on the worker's fd (1 ms at a time) when there is nothing
 * to do. p stays the caller's to free. */
void ux_wait_req(ux_ep_t *ep, void *p, double until);
void ux_ep_work(ux_ep_t *ep);
int ux_worker_progress(ux_ep_t *ep);
cohort_status_t ux_progress(cohort_tp_ep_t epv);

/* ---- ux_data.c: requests and messages ---------------------------------------------------- */

void ux_req_unlink(ux_req_t *r);
void ux_slot_release(ux_ctx_t *ctx, void *b, ucp_mem_h mh);
void ux_req_free(ux_req_t *r);
void ux_req_maybe_free(ux_req_t *r);
void ux_req_finish(ux_req_t *r, cohort_status_t st);
void ux_req_fail_msg(ux_req_t *r, cohort_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
ux_req_t *ux_req_new(ux_conn_t *c, int kind, int is_send);
void ux_req_start(ux_req_t *r, const void *buf, size_t count, ucp_datatype_t dt, uint64_t tag,
                  uint64_t mask, ucp_mem_h memh);
void ux_req_post(ux_req_t *r);
void ux_post_payloads(ux_ep_t *ep);
cohort_status_t ux_isend(cohort_tp_conn_t connv, const void *buf, size_t len, uint64_t tag,
                         cohort_tp_mr_t mr, cohort_tp_req_t *req);
cohort_status_t ux_irecv(cohort_tp_conn_t connv, void *buf, size_t len, uint64_t tag,
                         cohort_tp_mr_t mr, cohort_tp_req_t *req);
cohort_status_t ux_mem_reg(cohort_tp_ep_t epv, void *buf, size_t len, cohort_tp_mr_t *mrp);
cohort_status_t ux_mem_dereg(cohort_tp_ep_t epv, cohort_tp_mr_t mrv);
cohort_status_t ux_test(cohort_tp_req_t reqv, size_t *nbytes);

/* ---- ux_conn.c: connections -------------------------------------------------------------- */

void ux_conn_close_uep(ux_conn_t *c);
void ux_conn_fail(ux_conn_t *c, cohort_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void ux_conn_ucx_error(ux_conn_t *c, ux_req_t *m, cohort_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void ux_cancel_finished_recvs(ux_conn_t *c);
void ux_conn_destroy(ux_conn_t *c);
void ux_conn_ready(ux_conn_t *c);
void ux_hello_arrived(ux_ep_t *ep);
void ux_post_hello_recv(ux_ep_t *ep);
void ux_ack_arrived(ux_conn_t *c);
void ux_bye_arrived(ux_ep_t *ep);
void ux_post_bye_recv(ux_ep_t *ep);
void ux_lost_recv(ux_conn_t *c, ux_req_t *r);
void ux_conn_lost(ux_conn_t *c);
void ux_watch_peers(ux_ep_t *ep);
int ux_can_reach(cohort_tp_ep_t epv, int peer, const void *peer_addr, size_t addrlen);
cohort_status_t ux_connect(cohort_tp_ep_t epv, int peer, const void *peer_addr, size_t addrlen,
                           cohort_tp_conn_t *connp);
cohort_status_t ux_accept(cohort_tp_ep_t epv, int peer, cohort_tp_conn_t *connp);
cohort_status_t ux_conn_test(cohort_tp_conn_t connv);
cohort_status_t ux_conn_close(cohort_tp_conn_t connv);

#endif /* COHORT_UX_INT_H */
