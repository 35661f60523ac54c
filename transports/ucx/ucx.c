/* SPDX-License-Identifier: BSD-3-Clause */
/* cohort UCX transport (libcohort-ucx.so), over UCX's UCP tag API.
 *
 * Knows only <cohort/plugin.h> and <ucp/api/ucp.h>.
 *
 * Structure
 *   context   one ucp_context per process (ucp_init in init). UCX_TLS, UCX_NET_DEVICES and the
 *             other UCX_* variables are UCX's own and read by it untouched; COHORT_SOCKET_IFNAME
 *             becomes UCX's NET_DEVICES (ucp_config_modify, never setenv) only when
 *             UCX_NET_DEVICES is unset.
 *   endpoint  one ucp_worker per communicator (single-threaded, wakeup feature: ep_fd is the
 *             worker's event fd, armed by progress()). Its address blob is a small header and the
 *             worker's UCX address.
 *   conn      one ucp_ep per peer, created from the peer's worker address, with
 *             UCP_ERR_HANDLING_MODE_PEER where UCX's transports can detect a dead peer (its
 *             error callback fails the connection with COHORT_ERR_PEER_LOST, unless the peer's
 *             bye came first: then only what it sent and did not arrive fails). The connector
 *             creates its ucp_ep from the acceptor's blob and sends a hello (its own worker
 *             address, authenticated with host->auth); the acceptor creates its ucp_ep from the
 *             hello and answers with an authenticated ack. Requests posted before that are
 *             queued.
 *   messages  UCX tag = sender rank and a per-direction sequence number, so the n-th receive
 *             matches exactly the n-th send whatever UCX's own ordering; cohort's tag and size
 *             travel in a 16-byte header in front of the payload (an iov of two), and a
 *             receive whose header carries another tag, or whose message is longer (UCX:
 *             truncated), completes with COHORT_ERR_MISMATCH.
 *   large     From UX_SPLIT_MIN bytes, on connections with UCX's error handling and when
 *             COHORT_UCX_ZCOPY says so (auto: UCX has an RDMA transport), the header travels
 *             alone and the payload follows as contiguous chunks of UX_CHUNK bytes,
 *             each a UCX message of its own (the payload bit, the message's sequence number and
 *             the chunk's index in its UCX tag): UCX 1.13's rendezvous moves an iov in
 *             fragments, a contiguous buffer by zero-copy. The receiver posts the iov as
 *             always; a header that arrives alone (16 bytes, length > 0) makes it receive the
 *             chunks, UX_SLOTS at a time, into slots of its own (ucp_mem_map'd once each) and
 *             copy each into the caller's buffer. Not straight into the caller's buffer: UCX
 *             cannot stop a receive it has matched (cancel and a forced close do not), and the
 *             caller may free its buffer once conn_close returns; a slot belongs to the plugin
 *             until UCX lets go of it. Posting happens in ep_work, not inside UCX's callbacks.
 *   memory    mem_reg is ucp_mem_map; a split payload sent from a registered range goes with
 *             that memh (UCP_OP_ATTR_FIELD_MEMH: no registration lookup per message). Without
 *             one, UCX's own registration cache serves (UCX_RCACHE_*).
 * Progress happens only in progress(), test() and conn_test() (no thread of ours; UCX may run
 * its own async thread for some transports). Not thread-safe per endpoint: the core serialises
 * calls per endpoint; endpoints of different communicators have their own workers.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <cohort/plugin.h>
#include "transports/common/kit_bytes.h"

#include <ucp/api/ucp.h>

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SUBSYS "net"
#define UX_PLUGIN_VERSION COHORT_VERSION_STRING   /* the package's (configure) */
#define UX_MAGIC 0x43555831u          /* "CUX1": address blob */
#define UX_HELLO_MAGIC 0x43554831u    /* "CUH1" */
#define UX_ACK_MAGIC 0x43554131u      /* "CUA1" */
#define UX_MAC_LEN 32
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
#define UX_SPLIT_MIN (64u * 1024u)     /* payloads from this size travel apart (see above) */
#define UX_CHUNK (512u * 1024u)        /* ... in chunks of this size */
#define UX_CHUNK_BITS 19               /* a chunk's index in a payload tag */
#define UX_PSEQ_MASK ((1ull << (UX_SEQ_BITS - 1 - UX_CHUNK_BITS)) - 1)  /* its message's seq */
#define UX_SPLIT_MAX ((uint64_t)UX_CHUNK << UX_CHUNK_BITS)  /* larger: one iov (256 GiB) */
#define UX_SLOTS 4                     /* chunk receives in flight per message */
#define UX_POOL 16                     /* idle slots an endpoint keeps for the next messages */
#define UX_FULL_MASK (~0ull)
#define UX_PROGRESS_MAX 64             /* ucp_worker_progress calls per progress() at most */
#define UX_CLOSE_FLUSH_S 0.5           /* conn_close flushes for at most this per burst */

static int ct_equal(const unsigned char *a, const unsigned char *b, size_t n)
{
    unsigned char d = 0;
    for (size_t i = 0; i < n; i++) d |= (unsigned char)(a[i] ^ b[i]);
    return d == 0;
}

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
    unsigned ncb;                 /* UCX callbacks run for it (req_start: did one run inside?) */
    int posted;
    int done;
    int released;
    int cancelled;                /* ucp_request_cancel was called on it */
    cohort_status_t status;
    size_t nbytes;
    uint64_t seq;                 /* K_DATA: its place in the conn's order (each direction) */
    int stage;                    /* split receive: 1 its header arrived or a slot came back,
                                   * ep_work posts chunk receives; 2 posted */
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
                                   * ep_work judges it (conn_lost), 2 after that with the
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
    int in_progress;
    int signalled;
    int nlost;                    /* conns with lost == 1 */
    double close_by;              /* conn_close flushes until then (one budget per burst) */
    int zcopy;                    /* large payloads in chunks (COHORT_UCX_ZCOPY) */
    int nstage;                   /* requests with stage 1 */
    int npool;                    /* idle receive slots (UX_CHUNK bytes, mapped) */
    void *pool[UX_POOL];
    ucp_mem_h pool_mh[UX_POOL];
} ux_ep_t;

/* ---- small helpers ----------------------------------------------------------------------- */

static cohort_status_t ux_status(ucs_status_t s)
{
    switch (s) {
    case UCS_OK: return COHORT_SUCCESS;
    case UCS_INPROGRESS: return COHORT_IN_PROGRESS;
    case UCS_ERR_NO_MEMORY: return COHORT_ERR_NO_MEMORY;
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_CANCELED:
        return COHORT_ERR_PEER_LOST;
    case UCS_ERR_TIMED_OUT: return COHORT_ERR_TIMEOUT;
    case UCS_ERR_MESSAGE_TRUNCATED: return COHORT_ERR_MISMATCH;
    case UCS_ERR_UNSUPPORTED: return COHORT_ERR_UNSUPPORTED;
    default: return COHORT_ERR_TRANSPORT;
    }
}

/* Words for what ux_status made of a UCX status (plugins reach the core only through the host
 * table, and a core loaded without RTLD_GLOBAL, as by Python, exports nothing to plugins). */
static const char *ux_status_words(cohort_status_t st)
{
    switch (st) {
    case COHORT_ERR_NO_MEMORY: return "no memory";
    case COHORT_ERR_PEER_LOST: return "the peer's connection was lost, reset or refused";
    case COHORT_ERR_TIMEOUT: return "timed out";
    case COHORT_ERR_MISMATCH: return "message truncated";
    case COHORT_ERR_UNSUPPORTED: return "unsupported";
    default: return "transport error";
    }
}

static void ep_signal(ux_ep_t *ep)
{
    if (ep->in_progress || ep->signalled) return;
    ep->signalled = 1;
    (void)ucp_worker_signal(ep->worker);
}

static uint64_t data_tag(int src, uint64_t seq)
{
    return (UX_KIND_DATA << UX_KIND_SHIFT) | ((uint64_t)(unsigned)src << UX_SEQ_BITS) |
           (seq & UX_DSEQ_MASK);
}

/* The tag of chunk idx of message seq's payload. The message's number wraps at 2^20 here:
 * two messages that far apart are never in flight on one connection at once. */
static uint64_t payload_tag(int src, uint64_t seq, uint32_t idx)
{
    return (UX_KIND_DATA << UX_KIND_SHIFT) | ((uint64_t)(unsigned)src << UX_SEQ_BITS) |
           UX_PAYLOAD_BIT | ((seq & UX_PSEQ_MASK) << UX_CHUNK_BITS) | idx;
}

static void job_hash(const cohort_host_v1_t *host, const char *job, unsigned char out[UX_MAC_LEN])
{
    unsigned char in[8 + 64];
    memset(in, 0, sizeof in);
    memcpy(in, "cohtucx1", 8);
    size_t n = job ? strlen(job) : 0;
    if (n > 64) n = 64;
    if (n) memcpy(in + 8, job, n);
    host->auth(in, sizeof in, out);
}

/* This machine: the kernel's boot id (ranks with the same one can use shared memory). */
static void host_id(const cohort_host_v1_t *host, unsigned char out[UX_PROC_LEN])
{
    struct stat st;
    kit_put_le32(out + UX_HOST_LEN, (uint32_t)getpid());
    kit_put_le64(out + UX_HOST_LEN + 4, stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0);
    unsigned char in[8 + 64];
    memset(in, 0, sizeof in);
    memcpy(in, "cohthost", 8);
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t r = read(fd, in + 8, 64);
        (void)r;
        close(fd);
    } else {
        (void)gethostname((char *)in + 8, 63);
    }
    unsigned char mac[UX_MAC_LEN];
    host->auth(in, sizeof in, mac);
    memcpy(out, mac, UX_HOST_LEN);
}

/* ---- requests ---------------------------------------------------------------------------- */

static void req_unlink(ux_req_t *r)
{
    ux_req_t **head = r->conn ? &r->conn->all : &r->ep->orphans;
    if (r->aprev) r->aprev->anext = r->anext;
    else *head = r->anext;
    if (r->anext) r->anext->aprev = r->aprev;
    r->anext = r->aprev = NULL;
}

/* Registers [buf, buf + len) with every memory domain of the UCX context (mem_reg, slots). */
static ucs_status_t map_range(ux_ctx_t *ctx, void *buf, size_t len, ucp_mem_h *mh)
{
    ucp_mem_map_params_t prm;
    memset(&prm, 0, sizeof prm);
    prm.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    prm.address = buf;
    prm.length = len;
    return ucp_mem_map(ctx->ucp, &prm, mh);
}

/* A receive slot for a chunk: an idle one of the endpoint's, or a new one, mapped with
 * ucp_mem_map (registered once for all the messages that will use it); NULL without memory. */
static void *slot_get(ux_ep_t *ep, ucp_mem_h *mh)
{
    if (ep->npool > 0) {
        ep->npool--;
        *mh = ep->pool_mh[ep->npool];
        return ep->pool[ep->npool];
    }
    void *b = malloc(UX_CHUNK);
    *mh = NULL;
    if (!b) return NULL;
    if (map_range(ep->ctx, b, UX_CHUNK, mh) != UCS_OK) *mh = NULL;   /* then UCX's own cache */
    return b;
}

static void slot_release(ux_ctx_t *ctx, void *b, ucp_mem_h mh)
{
    if (mh) (void)ucp_mem_unmap(ctx->ucp, mh);
    free(b);
}

/* A slot UCX no longer uses: kept for the next message, or released. */
static void slot_put(ux_ep_t *ep, void *b, ucp_mem_h mh)
{
    if (!b) return;
    if (ep->npool < UX_POOL) {
        ep->pool[ep->npool] = b;
        ep->pool_mh[ep->npool++] = mh;
        return;
    }
    slot_release(ep->ctx, b, mh);
}

static void spares_put(ux_req_t *m)
{
    while (m->nspare > 0) {
        m->nspare--;
        slot_put(m->ep, m->spare[m->nspare], m->spare_mh[m->nspare]);
    }
}

static void req_free(ux_req_t *r)
{
    if (r->stage == 1) r->ep->nstage--;   /* it will not be posted now */
    if (r->kind == K_CHUNK && r->own) {   /* a receive slot: UCX has let go of it */
        slot_put(r->ep, r->own, r->slot_memh);
        r->own = NULL;
    }
    spares_put(r);
    req_unlink(r);
    free(r->own);
    free(r->errmsg);
    free(r);
}

/* Frees the request once the user has its final status and UCX no longer holds it. */
static void req_maybe_free(ux_req_t *r)
{
    if (r->ucx || r->pending) return;
    if (r->conn && !(r->done && r->released)) return;
    req_free(r);
}

static void req_finish(ux_req_t *r, cohort_status_t st)
{
    if (r->done) return;
    r->done = 1;
    r->status = st;
    ep_signal(r->ep);
}

static void req_fail_msg(ux_req_t *r, cohort_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void req_fail_msg(ux_req_t *r, cohort_status_t st, const char *fmt, ...)
{
    if (r->done) return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    free(r->errmsg);
    r->errmsg = strdup(buf);
    req_finish(r, st);
}

static void conn_fail(ux_conn_t *c, cohort_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void conn_ucx_error(ux_conn_t *c, ux_req_t *m, cohort_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void accept_hello(ux_conn_t *c, const unsigned char *buf);

static cohort_status_t fail_status(ucs_status_t s)
{
    return ux_status(s) == COHORT_ERR_PEER_LOST ? COHORT_ERR_PEER_LOST : COHORT_ERR_TRANSPORT;
}

/* A set-up message's send (hello or ack) completed. */
static void ctl_sent(ux_req_t *r, ucs_status_t status)
{
    ux_conn_t *c = r->conn;
    req_finish(r, COHORT_SUCCESS);
    if (status == UCS_OK && r->kind == K_ACK_SEND) {
        c->ack_sent = 1;   /* ep_work makes the conn ready (not inside UCX's callback) */
        ep_signal(c->ep);
    }
    if (status != UCS_OK && r->kind != K_BYE)
        conn_ucx_error(c, NULL, fail_status(status), "ucx: rank %d could not send %s to rank "
                       "%d: %s (UCX); is rank %d still running?", c->ep->rank,
                       r->kind == K_HELLO ? "its connection hello" :
                       r->kind == K_HDR ? "a message header" : "its connection answer", c->peer,
                       ucs_status_string(status), c->peer);
}

/* For ep_work: post r (stage 1). */
static void stage_set(ux_req_t *r)
{
    if (r->stage == 1) return;
    r->stage = 1;
    r->ep->nstage++;
    ep_signal(r->ep);
}

static size_t chunk_len(uint64_t len, uint32_t idx)
{
    uint64_t off = (uint64_t)idx * UX_CHUNK;
    return (size_t)(len - off < UX_CHUNK ? len - off : UX_CHUNK);
}

/* Chunk k of a split message completed (its conn still open). A received chunk is copied to
 * its place in the caller's buffer and its slot goes back to the message for the next chunk;
 * the message completes with its last chunk. */
static void chunk_done(ux_req_t *k, ucs_status_t status, size_t length)
{
    ux_conn_t *c = k->conn;
    ux_req_t *m = k->parent;
    uint64_t len = kit_get_le64(m->hdr + 8);
    m->pending--;
    if (!k->is_send && k->own && m->nspare < UX_SLOTS) {   /* the slot back to the message */
        m->spare[m->nspare] = k->own;
        m->spare_mh[m->nspare++] = k->slot_memh;
        /* (not into a message that has failed: the caller may have its buffer back) */
        if (status == UCS_OK && length == chunk_len(len, k->chunk) && !m->drop && !m->done)
            memcpy((char *)m->buf + (size_t)k->chunk * UX_CHUNK, k->own, length);
        else if (status == UCS_OK || status == UCS_ERR_MESSAGE_TRUNCATED)
            m->drop = 1;
        k->own = NULL;
        k->slot_memh = NULL;
    }
    req_finish(k, COHORT_SUCCESS);
    if (status != UCS_OK && !(status == UCS_ERR_MESSAGE_TRUNCATED && !k->is_send)) {
        if (!m->done)
            conn_ucx_error(c, m, fail_status(status), "ucx: rank %d %s rank %d failed (part %u "
                           "of %u of a %llu-byte message): %s (UCX); the peer process may have "
                           "exited or the network failed (UCX_TLS and UCX_NET_DEVICES choose "
                           "UCX's transports)", c->ep->rank,
                           k->is_send ? "sending to" : "receiving from", c->peer, k->chunk + 1,
                           m->nchunks, (unsigned long long)len, ucs_status_string(status));
        req_maybe_free(m);
        return;
    }
    m->chunks_done++;
    if (m->chunks_done == m->nchunks) spares_put(m);   /* the slots to the next message */
    if (m->done) {   /* failed meanwhile (conn_fail, peer_closed): only the counting goes on */
        req_maybe_free(m);
        return;
    }
    if (m->chunks_done < m->nchunks) {
        if (!k->is_send && m->next_chunk < m->nchunks) stage_set(m);
        return;
    }
    if (k->is_send) {
        req_finish(m, COHORT_SUCCESS);
    } else if (m->drop) {
        req_fail_msg(m, COHORT_ERR_MISMATCH, "ucx: rank %d expected a message with tag %llu "
                     "(up to %zu bytes) from rank %d, which sent tag %llu (%llu bytes): the "
                     "ranks called different operations or counts", c->ep->rank,
                     (unsigned long long)m->tag, m->len, c->peer,
                     (unsigned long long)kit_get_le64(m->hdr), (unsigned long long)len);
    } else {
        m->nbytes = (size_t)len;
        req_finish(m, COHORT_SUCCESS);
    }
}

static void send_cb(void *request, ucs_status_t status, void *user_data)
{
    ux_req_t *r = (ux_req_t *)user_data;
    r->ncb++;
    ucp_request_free(request);
    r->ucx = NULL;
    if (!r->conn) {   /* orphaned: nobody waits for it */
        req_free(r);
        return;
    }
    if (r->kind == K_CHUNK) {
        chunk_done(r, status, 0);
    } else if (r->kind != K_DATA) {
        ctl_sent(r, status);
    } else if (status == UCS_OK) {
        req_finish(r, COHORT_SUCCESS);
    } else if (!r->done) {
        ux_conn_t *c = r->conn;
        conn_ucx_error(c, r, fail_status(status), "ucx: rank %d sending %zu bytes to rank %d "
                       "failed: %s (UCX); the peer process may have exited or the network "
                       "failed (UCX_TLS and UCX_NET_DEVICES choose UCX's transports)",
                       c->ep->rank, r->len, c->peer, ucs_status_string(status));
    }
    req_maybe_free(r);
}

static void recv_done(ux_req_t *r, ucs_status_t status, size_t length)
{
    ux_conn_t *c = r->conn;
    if (r->kind == K_ACK_RECV) {
        r->nbytes = length;
        r->status = status == UCS_OK ? COHORT_SUCCESS : fail_status(status);
        r->done = 1;
        if (status == UCS_ERR_CANCELED) return;
        c->ack_rx = r;   /* checked by ep_work (not inside UCX's callback) */
        r->released = 0;
        ep_signal(c->ep);
        return;
    }
    if (r->kind == K_CHUNK) {
        chunk_done(r, status, length);
        return;
    }
    if (status == UCS_OK && length == UX_HDR && kit_get_le64(r->hdr + 8) > 0 && !r->nchunks) {
        /* a split message's header: ep_work posts the receives of its chunks */
        uint64_t len = kit_get_le64(r->hdr + 8);
        if (len > UX_SPLIT_MAX) {
            req_fail_msg(r, COHORT_ERR_MISMATCH, "ucx: rank %d received a header from rank %d "
                         "announcing %llu bytes in chunks, more than a split message carries "
                         "(another cohort version on the peer?)", c->ep->rank, c->peer,
                         (unsigned long long)len);
            return;
        }
        r->nchunks = (uint32_t)((len + UX_CHUNK - 1) / UX_CHUNK);
        r->drop = kit_get_le64(r->hdr) != r->tag || len > r->len;
        stage_set(r);
    } else if (status == UCS_OK) {
        if (length < UX_HDR) {
            req_fail_msg(r, COHORT_ERR_MISMATCH, "ucx: rank %d received a message of %zu bytes "
                         "from rank %d, shorter than the %d-byte header (another program or "
                         "cohort version on the peer?)", c->ep->rank, length, c->peer, UX_HDR);
            return;
        }
        uint64_t tag = kit_get_le64(r->hdr), len = kit_get_le64(r->hdr + 8);
        if (tag != r->tag || len != length - UX_HDR) {
            req_fail_msg(r, COHORT_ERR_MISMATCH, "ucx: rank %d expected a message with tag "
                         "%llu (up to %zu bytes) from rank %d, which sent tag %llu (%llu bytes): "
                         "the ranks called different operations", c->ep->rank,
                         (unsigned long long)r->tag, r->len, c->peer, (unsigned long long)tag,
                         (unsigned long long)len);
            return;
        }
        r->nbytes = (size_t)len;
        req_finish(r, COHORT_SUCCESS);
    } else if (status == UCS_ERR_MESSAGE_TRUNCATED) {
        req_fail_msg(r, COHORT_ERR_MISMATCH, "ucx: rank %d expected a message with tag %llu of "
                     "up to %zu bytes from rank %d, which sent %zu bytes (its tag is unknown: "
                     "UCX drops a message that does not fit): the ranks called different "
                     "operations or counts", c->ep->rank, (unsigned long long)r->tag, r->len,
                     c->peer, length >= UX_HDR ? length - UX_HDR : length);
    } else if (r->done) {
        /* failed already (conn_fail, the peer's bye, the end of its connection) and cancelled:
         * UCX only lets go of it */
    } else {
        conn_ucx_error(c, r, fail_status(status), "ucx: rank %d receiving from rank %d failed: "
                       "%s (UCX)", c->ep->rank, c->peer, ucs_status_string(status));
    }
}

static void recv_cb(void *request, ucs_status_t status, const ucp_tag_recv_info_t *info,
                    void *user_data)
{
    ux_req_t *r = (ux_req_t *)user_data;
    r->ncb++;
    ucp_request_free(request);
    r->ucx = NULL;
    if (!r->conn) {
        req_free(r);
        return;
    }
    recv_done(r, status, info ? info->length : 0);
    req_maybe_free(r);
}

static ux_req_t *req_new(ux_conn_t *c, int kind, int is_send)
{
    ux_req_t *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->kind = kind;
    r->conn = c;
    r->ep = c->ep;
    r->is_send = is_send;
    r->status = COHORT_IN_PROGRESS;
    r->released = kind != K_DATA;   /* nobody tests set-up requests */
    r->anext = c->all;
    if (c->all) c->all->aprev = r;
    c->all = r;
    return r;
}

/* Hands an operation to UCX; the outcome arrives in send_cb/recv_cb, or at once. */
static void req_start(ux_req_t *r, const void *buf, size_t count, ucp_datatype_t dt,
                      uint64_t tag, uint64_t mask, ucp_mem_h memh)
{
    ux_conn_t *c = r->conn;
    ux_ep_t *ep = c->ep;
    r->posted = 1;
    ucp_request_param_t prm;
    memset(&prm, 0, sizeof prm);
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                       UCP_OP_ATTR_FIELD_DATATYPE;
    prm.user_data = r;
    prm.datatype = dt;
    if (memh) {
        prm.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
        prm.memh = memh;
    }
    ucs_status_ptr_t p;
    unsigned ncb = r->ncb;
    if (r->is_send) {
        prm.cb.send = send_cb;
        p = ucp_tag_send_nbx(c->uep, buf, count, tag, &prm);
    } else {
        prm.cb.recv = recv_cb;
        prm.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
        p = ucp_tag_recv_nbx(ep->worker, (void *)(uintptr_t)buf, count, tag, mask, &prm);
    }
    if (p == NULL) {   /* a send done at once */
        if (r->kind == K_CHUNK) chunk_done(r, UCS_OK, 0);
        else if (r->kind != K_DATA) ctl_sent(r, UCS_OK);
        else req_finish(r, COHORT_SUCCESS);
    } else if (UCS_PTR_IS_ERR(p)) {
        ucs_status_t s = UCS_PTR_STATUS(p);
        if (r->kind == K_CHUNK) r->parent->pending--;   /* no callback will come */
        conn_ucx_error(c, r->kind == K_CHUNK ? r->parent : r->kind == K_DATA ? r : NULL,
                       fail_status(s), "ucx: rank %d: %s rank %d failed at once: %s (UCX)",
                       ep->rank, r->is_send ? "ucp_tag_send_nbx to" : "ucp_tag_recv_nbx from",
                       c->peer, ucs_status_string(s));
    } else if (r->ncb == ncb) {
        /* UCX holds it until its callback. Not r->done as the test: UCX may have failed the
         * conn inside the call (err_cb: conn_fail finishes every request) and still hold this
         * one. A receive's callback may already have run (a message that was waiting): then
         * UCX has let go of it. */
        r->ucx = p;
    }
}

static void req_post(ux_req_t *r)
{
    ux_conn_t *c = r->conn;
    kit_put_le64(r->hdr, r->tag);
    kit_put_le64(r->hdr + 8, r->len);
    r->seq = r->is_send ? c->send_seq : c->recv_seq;
    uint64_t tag = r->is_send ? data_tag(c->ep->rank, c->send_seq++)
                              : data_tag(c->peer, c->recv_seq++);
    if (!r->len) {
        req_start(r, r->hdr, UX_HDR, ucp_dt_make_contig(1), tag, UX_FULL_MASK, NULL);
        return;
    }
    if (r->is_send && r->len >= UX_SPLIT_MIN && r->len <= UX_SPLIT_MAX && c->peer_eh &&
        c->ep->zcopy) {
        /* the header alone (a set-up style request owning a copy), then the chunks */
        unsigned char *h = malloc(UX_HDR);
        ux_req_t *hr = h ? req_new(c, K_HDR, 1) : NULL;
        if (hr) {
            memcpy(h, r->hdr, UX_HDR);
            hr->own = h;
            hr->len = UX_HDR;
            req_start(hr, h, UX_HDR, ucp_dt_make_contig(1), tag, UX_FULL_MASK, NULL);
            req_maybe_free(hr);
            r->nchunks = (uint32_t)((r->len + UX_CHUNK - 1) / UX_CHUNK);
            for (uint32_t i = 0; i < r->nchunks && c->state != C_FAILED; i++) {
                ux_req_t *k = req_new(c, K_CHUNK, 1);
                if (!k) {
                    conn_fail(c, COHORT_ERR_NO_MEMORY, "ucx: rank %d: no memory for a request "
                              "(sending %zu bytes to rank %d)", c->ep->rank, r->len, c->peer);
                    break;
                }
                k->parent = r;
                k->chunk = i;
                k->released = 0;   /* not freed inside req_start */
                r->pending++;
                req_start(k, (char *)r->buf + (size_t)i * UX_CHUNK, chunk_len(r->len, i),
                          ucp_dt_make_contig(1), payload_tag(c->ep->rank, r->seq, i),
                          UX_FULL_MASK, r->mr ? r->mr->memh : NULL);
                k->released = 1;
                req_maybe_free(k);
            }
            return;
        }
        free(h);   /* no memory for the split: the whole message as one iov */
    }
    r->iov[0].buffer = r->hdr;
    r->iov[0].length = UX_HDR;
    r->iov[1].buffer = r->buf;
    r->iov[1].length = r->len;
    req_start(r, r->iov, 2, ucp_dt_make_iov(), tag, UX_FULL_MASK, NULL);
}

/* ---- connections ------------------------------------------------------------------------- */

static void conn_close_uep(ux_conn_t *c)
{
    if (!c->uep) return;
    ucp_request_param_t prm;
    memset(&prm, 0, sizeof prm);
    /* A forced close needs peer error handling on both sides (UCX's documented contract:
     * without it the peer meets undefined behaviour; UCX 1.13's shared memory crashed the peer,
     * attaching segments of ours that are gone). Without it: a flushing close. */
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    prm.flags = c->peer_eh ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    ucs_status_ptr_t p = ucp_ep_close_nbx(c->uep, &prm);
    if (UCS_PTR_IS_PTR(p)) ucp_request_free(p);   /* released when it completes */
    c->uep = NULL;
}

/* Every pending and later request fails with st and the message. */
static void conn_fail(ux_conn_t *c, cohort_status_t st, const char *fmt, ...)
{
    if (c->state == C_FAILED) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->errmsg, sizeof c->errmsg, fmt, ap);
    va_end(ap);
    c->state = C_FAILED;
    c->err = st;
    ux_ep_t *ep = c->ep;
    ep->host->log(COHORT_LOG_INFO, SUBSYS, "%s", c->errmsg);
    c->def_h = c->def_t = NULL;
    for (ux_req_t *r = c->all; r; r = r->anext)
        if (!r->done) req_finish(r, st);
    /* UCX would keep receives posted: cancel them (their callbacks come now or later; the
     * requests stay listed until then). The ucp_ep is closed by ep_work. */
    for (ux_req_t *r = c->all, *next; r; r = next) {
        next = r->anext;
        if (r->ucx && !r->is_send) ucp_request_cancel(ep->worker, r->ucx);
    }
    ep_signal(ep);
}

/* UCX failed an operation of c (m: the message it belongs to, if any) or its ucp_ep (err_cb).
 * On a ready connection an error that says the connection ended (st PEER_LOST) is judged by
 * ep_work (conn_lost) after the byes that arrived before it, not here: a peer that closes
 * after its last sends ends the connection too (over tcp UCX reports "Endpoint timeout" for
 * it), and what it sent before must still be received. Once the end is judged to be the
 * peer's close (lost == 2), an error fails only the message it belongs to. */
static void conn_ucx_error(ux_conn_t *c, ux_req_t *m, cohort_status_t st, const char *fmt, ...)
{
    if (c->state == C_FAILED) return;   /* conn_fail has finished every request */
    char msg[sizeof c->lostmsg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (c->lost == 2) {
        if (m) req_fail_msg(m, st, "%s", msg);
        return;
    }
    if (c->state == C_READY && st == COHORT_ERR_PEER_LOST) {
        if (!c->lost) {
            c->lost = 1;
            snprintf(c->lostmsg, sizeof c->lostmsg, "%s", msg);
            c->ep->nlost++;
            ep_signal(c->ep);
        }
        return;
    }
    conn_fail(c, st, "%s", msg);
}

/* Cancels the receives UCX holds for messages of c that have finished (failed). A cancel runs
 * the request's callback at once, which may free it and its chunks: the walk starts over
 * after each. */
static void cancel_finished_recvs(ux_conn_t *c)
{
    for (int again = 1; again;) {
        again = 0;
        for (ux_req_t *r = c->all; r; r = r->anext) {
            if (r->is_send || !r->ucx || r->cancelled) continue;
            if (!(r->kind == K_DATA ? r->done : r->kind == K_CHUNK && r->parent->done)) continue;
            r->cancelled = 1;
            ucp_request_cancel(c->ep->worker, r->ucx);
            again = 1;
            break;
        }
    }
}

static void err_cb(void *arg, ucp_ep_h uep, ucs_status_t status)
{
    ux_conn_t *c = (ux_conn_t *)arg;
    (void)uep;
    conn_ucx_error(c, NULL, COHORT_ERR_PEER_LOST, "ucx: rank %d lost rank %d: %s (UCX detected "
                   "the failure of the peer or of the path to it: the peer process exited or "
                   "crashed, or the network failed)", c->ep->rank, c->peer,
                   ucs_status_string(status));
}

static ux_conn_t *conn_new(ux_ep_t *ep, int peer, int connector)
{
    ux_conn_t *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->ep = ep;
    c->peer = peer;
    c->connector = connector;
    c->state = C_CONNECTING;
    c->next = ep->conns;
    if (ep->conns) ep->conns->prev = c;
    ep->conns = c;
    return c;
}

/* Orphans the requests UCX still holds (their callbacks free them), frees the others. */
static void conn_destroy(ux_conn_t *c)
{
    ux_ep_t *ep = c->ep;
    if (c->lost == 1) ep->nlost--;   /* not to be judged any more */
    for (ux_req_t *r = c->all, *next; r; r = next) {
        next = r->anext;
        if (!r->ucx) {
            req_free(r);
            continue;
        }
        void *u = r->ucx;
        int is_send = r->is_send;
        /* UCX reads the iov array (ours) until the operation ends, and may still move data
         * of a matched rendezvous receive (shared memory: the close does not stop the peer):
         * point it at a scratch buffer, since the caller may free its buffer now. */
        if (r->kind == K_DATA && r->len && !r->own) {
            r->own = calloc(1, r->len);
            if (r->own) r->iov[1].buffer = r->own;
        }
        req_unlink(r);
        r->conn = NULL;
        r->anext = ep->orphans;
        if (ep->orphans) ep->orphans->aprev = r;
        ep->orphans = r;
        /* a receive's callback runs now or later and frees the orphan (r is gone then) */
        if (!is_send) ucp_request_cancel(ep->worker, u);
    }
    c->all = NULL;
    conn_close_uep(c);   /* sends: their callbacks come with the close */
    if (c->prev) c->prev->next = c->next;
    else ep->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    free(c);
}
static cohort_status_t uep_create(ux_conn_t *c, const void *addr, const unsigned char *proc)
{
    ux_ep_t *ep = c->ep;
    ucp_ep_params_t prm;
    memset(&prm, 0, sizeof prm);
    prm.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                     UCP_EP_PARAM_FIELD_ERR_HANDLER;
    prm.address = (const ucp_address_t *)addr;
    prm.err_mode = ep->ctx->has_net ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
    prm.err_handler.cb = err_cb;
    prm.err_handler.arg = c;
    ucs_status_t s = ucp_ep_create(ep->worker, &prm, &c->uep);
    if (s == UCS_ERR_UNREACHABLE && prm.err_mode == UCP_ERR_HANDLING_MODE_PEER) {
        ep->host->log(COHORT_LOG_INFO, SUBSYS, "ucx: rank %d to rank %d: none of UCX's "
                      "transports between them can detect a failed peer (UCX_TLS='%s'); "
                      "connecting without UCX's error handling: a dead peer is then found by "
                      "COHORT_TIMEOUT or the job's failure notice", ep->rank, c->peer,
                      getenv("UCX_TLS") ? getenv("UCX_TLS") : "all");
        prm.err_mode = UCP_ERR_HANDLING_MODE_NONE;
        s = ucp_ep_create(ep->worker, &prm, &c->uep);
    }
    /* Without UCX's error handling a dead peer on this host (same pid namespace) is found by
     * watching its pid (progress, every 100 ms). */
    c->peer_eh = s == UCS_OK && prm.err_mode == UCP_ERR_HANDLING_MODE_PEER;
    if (s == UCS_OK && prm.err_mode == UCP_ERR_HANDLING_MODE_NONE &&
        !memcmp(proc, ep->proc, UX_HOST_LEN) &&
        kit_get_le64(proc + UX_HOST_LEN + 4) == kit_get_le64(ep->proc + UX_HOST_LEN + 4)) {
        c->watch = 1;
        c->pid = (int)kit_get_le32(proc + UX_HOST_LEN);
    }
    if (s != UCS_OK) {
        c->uep = NULL;
        conn_fail(c, s == UCS_ERR_UNREACHABLE ? COHORT_ERR_TRANSPORT : ux_status(s),
                  "ucx: rank %d cannot create a UCX endpoint to rank %d: ucp_ep_create: %s "
                  "(UCX_TLS='%s'; the two ranks share no transport UCX can use: check UCX_TLS "
                  "and UCX_NET_DEVICES, or `ucx_info -d` on both hosts)", ep->rank, c->peer,
                  ucs_status_string(s), getenv("UCX_TLS") ? getenv("UCX_TLS") : "all");
        return c->err;
    }
    return COHORT_SUCCESS;
}

/* The transports UCX chose for this peer (from ucp_ep_print_info: its "lane" lines), logged once
 * at INFO. */
static void log_lanes(ux_conn_t *c)
{
    ux_ep_t *ep = c->ep;
    if (c->logged || !c->uep) return;
    c->logged = 1;
    char *text = NULL;
    size_t tlen = 0;
    FILE *f = open_memstream(&text, &tlen);
    if (!f) return;
    ucp_ep_print_info(c->uep, f);
    fclose(f);
    char lanes[512] = "";
    size_t used = 0;
    for (char *line = text, *nl; line && *line; line = nl ? nl + 1 : NULL) {
        nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        char *l = strstr(line, "lane[");
        if (!l) continue;
        char *colon = strchr(l, ':');
        if (!colon) continue;
        char *p = colon + 1;
        while (*p == ' ') p++;
        char *tl = strchr(p, ':');   /* "1:tcp/lo.0 md[1] -> ... am am_bw#0" */
        if (!tl) continue;
        tl++;
        size_t n = strcspn(tl, " ");
        char *arrow = strstr(tl, "->");
        const char *uses = "";
        if (arrow) {
            uses = strchr(arrow, ' ');
            if (uses) uses = strchr(uses + 1, ' ');
            if (!uses) uses = "";
        }
        if (used < sizeof lanes) {
            int w = snprintf(lanes + used, sizeof lanes - used, "%s%.*s (%s)", used ? "; " : "",
                             (int)n, tl, *uses ? uses + 1 : "?");
            if (w > 0) used += (size_t)w;
        }
    }
    free(text);
    ep->host->log(COHORT_LOG_INFO, SUBSYS, "ucx: rank %d reaches rank %d through %s", ep->rank,
                  c->peer, lanes[0] ? lanes : "(UCX printed no lanes)");
}

static void conn_ready(ux_conn_t *c)
{
    c->state = C_READY;
    log_lanes(c);
    while (c->def_h && c->state == C_READY) {
        ux_req_t *r = c->def_h;
        c->def_h = r->qnext;
        if (!c->def_h) c->def_t = NULL;
        r->qnext = NULL;
        req_post(r);
    }
}


/* Sends a set-up message (hello or ack) from a buffer the request owns. */
static void send_ctl(ux_conn_t *c, int kind, unsigned char *buf, size_t len, uint64_t tag)
{
    ux_req_t *r = req_new(c, kind, 1);
    if (!r) {
        free(buf);
        conn_fail(c, COHORT_ERR_NO_MEMORY, "ucx: rank %d: no memory for the connection %s to "
                  "rank %d", c->ep->rank, kind == K_HELLO ? "hello" : "answer", c->peer);
        return;
    }
    r->own = buf;
    r->len = len;
    req_start(r, buf, len, ucp_dt_make_contig(1), tag, UX_FULL_MASK, NULL);
    req_maybe_free(r);
}

/* Acceptor: a validated hello (buf) for this conn: create the ucp_ep to the connector from the
 * address in it, send the ack; the conn is ready. */
static void accept_hello(ux_conn_t *c, const unsigned char *buf)
{
    ux_ep_t *ep = c->ep;
    c->hello_seen = 1;
    if (uep_create(c, buf + UX_HELLO_HDR, buf + UX_PROC_OFF) != COHORT_SUCCESS) return;
    unsigned char *a = malloc(UX_ACK_SIZE);
    if (!a) {
        conn_fail(c, COHORT_ERR_NO_MEMORY, "ucx: rank %d: no memory for the answer to rank %d",
                  ep->rank, c->peer);
        return;
    }
    kit_put_le32(a, UX_ACK_MAGIC);
    kit_put_le32(a + 4, (uint32_t)ep->rank);
    kit_put_le32(a + 8, (uint32_t)c->peer);
    kit_put_le64(a + 12, ep->comm_id);
    ep->host->auth(a, UX_ACK_SIZE - UX_MAC_LEN, a + UX_ACK_SIZE - UX_MAC_LEN);
    /* Ready once the ack has left: until then UCX may still be wiring the ucp_ep up, which
     * needs this worker's progress, and the core stops calling progress once every conn_test
     * says ready (the connector would wait for the ack forever). */
    send_ctl(c, K_ACK_SEND, a, UX_ACK_SIZE,
             (UX_KIND_ACK << UX_KIND_SHIFT) | ((uint64_t)(unsigned)ep->rank << UX_SEQ_BITS));
}

static ux_conn_t *find_conn(ux_ep_t *ep, int peer, int connector)
{
    for (ux_conn_t *c = ep->conns; c; c = c->next)
        if (c->peer == peer && c->connector == connector) return c;
    return NULL;
}

/* A hello arrived (ep->hbuf, ep->hrx.len): check it, hand it to accept(src) or keep it. */
static void hello_arrived(ux_ep_t *ep)
{
    const cohort_host_v1_t *host = ep->host;
    unsigned char *b = ep->hbuf;
    size_t n = ep->hrx.len;
    ucs_status_t s = ep->hrx.status;
    ep->hbuf = NULL;
    ep->hrx.done = 0;
    if (s != UCS_OK) {
        if (s != UCS_ERR_CANCELED)
            host->log(COHORT_LOG_WARN, SUBSYS, "ucx: rank %d received a broken connection "
                      "hello (%s; %zu bytes); ignored", ep->rank, ucs_status_string(s), n);
        free(b);
        return;
    }
    if (n < UX_HELLO_HDR + UX_MAC_LEN || kit_get_le32(b) != UX_HELLO_MAGIC) {
        host->log(COHORT_LOG_WARN, SUBSYS, "ucx: rank %d refused a connection hello of %zu bytes "
                  "that is not cohort's (another program or cohort version?)", ep->rank, n);
        free(b);
        return;
    }
    int src = (int)kit_get_le32(b + 4);
    uint32_t dst = kit_get_le32(b + 8), nranks = kit_get_le32(b + 12);
    uint64_t comm = kit_get_le64(b + 16);
    uint32_t alen = kit_get_le32(b + UX_HELLO_HDR - 4);
    unsigned char mac[UX_MAC_LEN];
    if ((size_t)alen + UX_HELLO_HDR + UX_MAC_LEN != n) {
        host->log(COHORT_LOG_WARN, SUBSYS, "ucx: rank %d refused a connection hello whose "
                  "length (%zu) does not match its address (%u bytes)", ep->rank, n,
                  (unsigned)alen);
        free(b);
        return;
    }
    host->auth(b, n - UX_MAC_LEN, mac);
    if (!ct_equal(mac, b + n - UX_MAC_LEN, UX_MAC_LEN) ||
        !ct_equal(b + 24, ep->job_hash, UX_MAC_LEN)) {
        host->log(COHORT_LOG_WARN, SUBSYS, "ucx: rank %d refused a connection hello claiming to "
                  "be rank %d: its authentication does not match this job (another job, or a "
                  "forged connection)", ep->rank, src);
        free(b);
        return;
    }
    if (dst != (uint32_t)ep->rank || comm != ep->comm_id || nranks != (uint32_t)ep->nranks ||
        src < 0 || src >= ep->nranks || src == ep->rank) {
        host->log(COHORT_LOG_WARN, SUBSYS, "ucx: rank %d refused a connection hello from rank "
                  "%d for rank %u of communicator %llu (%u ranks): not this endpoint", ep->rank,
                  src, (unsigned)dst, (unsigned long long)comm, (unsigned)nranks);
        free(b);
        return;
    }
    ux_conn_t *c = find_conn(ep, src, 0);
    int dup = c && c->hello_seen;
    for (ux_hello_t *h = ep->early; h; h = h->next) dup |= h->src == src;
    if (dup) {
        host->log(COHORT_LOG_WARN, SUBSYS, "ucx: rank %d refused a second connection hello from "
                  "rank %d", ep->rank, src);
        free(b);
        return;
    }
    if (c) {
        accept_hello(c, b);
        free(b);
        return;
    }
    ux_hello_t *h = calloc(1, sizeof *h);
    if (!h) {
        host->log(COHORT_LOG_WARN, SUBSYS, "ucx: rank %d: no memory to keep the hello of rank "
                  "%d", ep->rank, src);
        free(b);
        return;
    }
    h->src = src;
    h->buf = b;
    h->len = n;
    h->next = ep->early;
    ep->early = h;
}

static void ctl_recv_cb(void *request, ucs_status_t status, const ucp_tag_recv_info_t *info,
                        void *user_data)
{
    ux_ctlrx_t *rx = (ux_ctlrx_t *)user_data;
    ucp_request_free(request);
    rx->req = NULL;
    rx->done = 1;
    rx->status = status;
    rx->len = info ? info->length : 0;
    ep_signal(rx->ep);
}

/* Posts rx's wildcard receive of control messages of kind into buf (what names them in the
 * warning if UCX refuses). */
static void post_ctl_recv(ux_ep_t *ep, ux_ctlrx_t *rx, void *buf, size_t size, uint64_t kind,
                          const char *what)
{
    ucp_request_param_t prm;
    memset(&prm, 0, sizeof prm);
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                       UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    prm.cb.recv = ctl_recv_cb;
    prm.user_data = rx;
    prm.datatype = ucp_dt_make_contig(1);
    ucs_status_ptr_t p = ucp_tag_recv_nbx(ep->worker, buf, size, kind << UX_KIND_SHIFT,
                                          3ull << UX_KIND_SHIFT, &prm);
    if (UCS_PTR_IS_ERR(p)) {
        ep->host->log(COHORT_LOG_WARN, SUBSYS, "ucx: rank %d cannot post the receive for %s: "
                      "ucp_tag_recv_nbx: %s", ep->rank, what,
                      ucs_status_string(UCS_PTR_STATUS(p)));
        return;
    }
    if (!rx->done) rx->req = p;
}

static void post_hello_recv(ux_ep_t *ep)
{
    if (ep->hrx.req || ep->hrx.done || !ep->worker) return;
    if (!ep->hbuf && !(ep->hbuf = malloc(UX_HELLO_MAX))) return;   /* tried again later */
    post_ctl_recv(ep, &ep->hrx, ep->hbuf, UX_HELLO_MAX, UX_KIND_HELLO, "connection hellos");
}

/* Connector: the ack arrived: check it. */
static void ack_arrived(ux_conn_t *c)
{
    ux_ep_t *ep = c->ep;
    ux_req_t *r = c->ack_rx;
    c->ack_rx = NULL;
    r->released = 1;
    const unsigned char *a = r->own;
    size_t n = r->nbytes;
    cohort_status_t st = r->status;
    if (c->state == C_CONNECTING) {
        unsigned char mac[UX_MAC_LEN];
        ep->host->auth(a, UX_ACK_SIZE - UX_MAC_LEN, mac);
        if (st != COHORT_SUCCESS)
            conn_fail(c, st, "ucx: rank %d connecting to rank %d: receiving its answer failed "
                      "(%s)", ep->rank, c->peer, ux_status_words(st));
        else if (n != UX_ACK_SIZE || kit_get_le32(a) != UX_ACK_MAGIC ||
                 kit_get_le32(a + 4) != (uint32_t)c->peer || kit_get_le32(a + 8) != (uint32_t)ep->rank ||
                 kit_get_le64(a + 12) != ep->comm_id ||
                 !ct_equal(mac, a + UX_ACK_SIZE - UX_MAC_LEN, UX_MAC_LEN))
            conn_fail(c, COHORT_ERR_TRANSPORT, "ucx: rank %d connecting to rank %d: its answer "
                      "(%zu bytes) is not a valid acknowledgement of this job and "
                      "communicator (different COHORT_JOB_ID/COHORT_SECRET, or another cohort "
                      "version)", ep->rank, c->peer, n);
        else
            conn_ready(c);
    }
    req_maybe_free(r);
}

/* ---- closing: the bye --------------------------------------------------------------------
 * conn_close sends the peer an authenticated bye carrying how many messages it sent, flushes its
 * ucp_ep (what it sent leaves UCX's buffers), then closes it. The peer fails its sends and the
 * receives beyond that count with COHORT_ERR_PEER_LOST (UCX itself does not tell the other side
 * of a closed ucp_ep); receives within it still complete once the close has ended the
 * connection and UCX has reported that as a failure (conn_lost). */

static void bye_encode(const ux_ep_t *ep, int peer, uint64_t nsent, unsigned char *b)
{
    kit_put_le32(b, UX_BYE_MAGIC);
    kit_put_le32(b + 4, (uint32_t)ep->rank);
    kit_put_le32(b + 8, (uint32_t)peer);
    kit_put_le64(b + 12, ep->comm_id);
    kit_put_le64(b + 20, nsent);
    ep->host->auth(b, UX_BYE_SIZE - UX_MAC_LEN, b + UX_BYE_SIZE - UX_MAC_LEN);
}

static void peer_closed(ux_conn_t *c, uint64_t nsent)
{
    ux_ep_t *ep = c->ep;
    if (c->state == C_FAILED || c->peer_closed) return;
    c->peer_closed = 1;
    c->closed_seq = nsent;
    snprintf(c->errmsg, sizeof c->errmsg, "ucx: rank %d closed its connection to rank %d "
             "(conn_close, or its communicator ended) after sending %llu message(s)", c->peer,
             ep->rank, (unsigned long long)nsent);
    c->err = COHORT_ERR_PEER_LOST;
    ep->host->log(COHORT_LOG_INFO, SUBSYS, "%s", c->errmsg);
    for (ux_req_t *r = c->all; r; r = r->anext) {
        if (r->done || r->kind != K_DATA || (!r->is_send && r->seq < nsent)) continue;
        req_finish(r, COHORT_ERR_PEER_LOST);
        if (r->ucx && !r->is_send) ucp_request_cancel(ep->worker, r->ucx);
    }
    ep_signal(ep);
}

static void bye_arrived(ux_ep_t *ep)
{
    ep->brx.done = 0;
    if (ep->brx.status != UCS_OK) return;
    const unsigned char *b = ep->bbuf;
    unsigned char mac[UX_MAC_LEN];
    ep->host->auth(b, UX_BYE_SIZE - UX_MAC_LEN, mac);
    int src = (int)kit_get_le32(b + 4);
    if (ep->brx.len != UX_BYE_SIZE || kit_get_le32(b) != UX_BYE_MAGIC ||
        kit_get_le32(b + 8) != (uint32_t)ep->rank || kit_get_le64(b + 12) != ep->comm_id ||
        !ct_equal(mac, b + UX_BYE_SIZE - UX_MAC_LEN, UX_MAC_LEN)) {
        ep->host->log(COHORT_LOG_WARN, SUBSYS, "ucx: rank %d refused a closing notice (%zu "
                      "bytes) that is not from a peer of this communicator", ep->rank,
                      ep->brx.len);
        return;
    }
    for (ux_conn_t *c = ep->conns; c; c = c->next)
        if (c->peer == src) peer_closed(c, kit_get_le64(b + 20));
}

static void post_bye_recv(ux_ep_t *ep)
{
    if (ep->brx.req || ep->brx.done || !ep->worker) return;
    post_ctl_recv(ep, &ep->brx, ep->bbuf, UX_BYE_SIZE, UX_KIND_BYE, "closing notices");
}

/* A receive of c whose message can no longer come: the peer closed after closed_seq messages
 * and the connection has ended without this one having arrived whole. */
static void lost_recv(ux_conn_t *c, ux_req_t *r)
{
    req_fail_msg(r, COHORT_ERR_PEER_LOST, "ucx: rank %d closed its connection to rank %d after "
                 "sending %llu message(s), and the connection ended before message %llu of them "
                 "arrived whole (it was still in flight when that rank closed)", c->peer,
                 c->ep->rank, (unsigned long long)c->closed_seq,
                 (unsigned long long)r->seq + 1);
}

/* ep_work, once every bye that arrived has been taken: UCX reported the end of c (lost == 1).
 * After the peer's bye, the end is its close (a closing rank destroys its ucp_ep and worker;
 * over tcp UCX reports "Endpoint timeout" for that), and what it sent before arrived ahead of
 * the end, since UCX reads a connection in order: those messages wait in UCX's unexpected
 * queue, and receives of them still complete (posted later: at once, inside req_post). A
 * receive UCX holds unmatched now waits for one that did not arrive whole: it fails. Without a
 * bye the peer or the path to it failed: the whole connection fails, as before. */
static void conn_lost(ux_conn_t *c)
{
    ux_ep_t *ep = c->ep;
    c->lost = 2;
    ep->nlost--;
    if (c->state == C_FAILED) return;
    if (!c->peer_closed) {
        conn_fail(c, COHORT_ERR_PEER_LOST, "%s", c->lostmsg);
        return;
    }
    ep->host->log(COHORT_LOG_INFO, SUBSYS, "ucx: rank %d: the connection from rank %d ended after "
                  "its closing notice; the %llu message(s) it sent before it are still received "
                  "(%llu so far)", ep->rank, c->peer, (unsigned long long)c->closed_seq,
                  (unsigned long long)c->recv_seq);
    for (ux_req_t *r = c->all; r; r = r->anext)
        if (r->kind == K_DATA && !r->is_send && !r->done) lost_recv(c, r);
    cancel_finished_recvs(c);
}

static double now_s(void);

/* Flushes c's ucp_ep: what UCX still holds of the messages sent on it leaves before
 * conn_destroy closes it by force, which would drop it. An eager send completes as soon as UCX
 * has copied it, and over tcp the copy waits in UCX's buffer while the socket is full; the
 * peer would miss a message whose send completed here. Bounded: the closes of one burst (a
 * communicator's end) share UX_CLOSE_FLUSH_S; past it, a peer that does not read fails the
 * receives of what did not leave (PEER_LOST). Sleeps on the worker's fd, not spinning. */
static void flush_for_close(ux_conn_t *c)
{
    ux_ep_t *ep = c->ep;
    double now = now_s();
    if (now > ep->close_by + UX_CLOSE_FLUSH_S) ep->close_by = now + UX_CLOSE_FLUSH_S;
    ucp_request_param_t prm;
    memset(&prm, 0, sizeof prm);
    ucs_status_ptr_t p = ucp_ep_flush_nbx(c->uep, &prm);
    if (!UCS_PTR_IS_PTR(p)) return;   /* flushed at once, or refused (the ucp_ep has failed) */
    while (ucp_request_check_status(p) == UCS_INPROGRESS && now_s() < ep->close_by) {
        if (ucp_worker_progress(ep->worker)) continue;
        if (ucp_worker_arm(ep->worker) == UCS_OK) {
            struct pollfd pf = { ep->efd, POLLIN, 0 };
            (void)poll(&pf, 1, 1);
        }
    }
    ucp_request_free(p);   /* if still in flight, UCX ends it with the forced close */
    ep->signalled = 0;     /* ucp_worker_arm took the fd's events: the core must look again */
    ep_signal(ep);
}

/* Whether UCX still works on a send from the caller's memory on any connection of ep: a
 * message or chunk of one that never completed, left behind by a collective that failed (the
 * core does not wait for the rest of a failed collective, and its caller may have freed the
 * buffer since). Endpoint-wide: progress on the worker moves every connection's sends. */
static int user_send_in_flight(const ux_ep_t *ep)
{
    for (const ux_conn_t *c = ep->conns; c; c = c->next)
        for (const ux_req_t *r = c->all; r; r = r->anext)
            if (r->is_send && r->ucx && (r->kind == K_DATA || r->kind == K_CHUNK)) return 1;
    for (const ux_req_t *r = ep->orphans; r; r = r->anext)
        if (r->is_send && r->ucx && (r->kind == K_DATA || r->kind == K_CHUNK)) return 1;
    return 0;
}

/* conn_close of a working connection: the bye, then the flush above; conn_destroy then closes
 * the ucp_ep (conn_close_uep) after pointing receives UCX has matched at scratch buffers, since
 * the caller may free its own once conn_close returns. No flush while a send of the caller's
 * memory is still in UCX's hands: progress would let UCX read a buffer that may be gone (a
 * rendezvous send whose receiver answered late); the forced close drops it instead, and the
 * peer, whose collective failed too, loses nothing it still waits for. */
static void send_bye_and_close(ux_conn_t *c)
{
    if (!c->uep || c->state != C_READY || c->peer_closed || user_send_in_flight(c->ep)) return;
    ux_ep_t *ep = c->ep;
    unsigned char *b = malloc(UX_BYE_SIZE);
    ux_req_t *r = b ? req_new(c, K_BYE, 1) : NULL;
    if (!r) {
        free(b);
        return;
    }
    bye_encode(ep, c->peer, c->send_seq, b);
    r->own = b;
    r->len = UX_BYE_SIZE;
    r->released = 0;   /* kept until we have seen it leave */
    req_start(r, b, UX_BYE_SIZE, ucp_dt_make_contig(1),
              (UX_KIND_BYE << UX_KIND_SHIFT) | ((uint64_t)(unsigned)ep->rank << UX_SEQ_BITS),
              UX_FULL_MASK, NULL);
    if (c->uep) flush_for_close(c);
    r->released = 1;
    req_maybe_free(r);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* 0 once the process is gone or a zombie (its parent has not reaped it yet). */
static int pid_alive(int pid)
{
    if (kill(pid, 0) != 0 && errno == ESRCH) return 0;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 1;   /* no /proc: kill's answer stands */
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 1;
    buf[n] = '\0';
    const char *rp = strrchr(buf, ')');   /* "pid (comm) S ..." */
    return !(rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X'));
}

/* Peers whose death UCX cannot report (shared memory only): is the process still there? */
static void watch_peers(ux_ep_t *ep)
{
    double now = now_s();
    if (now < ep->next_watch) return;
    ep->next_watch = now + 0.1;
    for (ux_conn_t *c = ep->conns; c; c = c->next)
        if (c->watch && c->state != C_FAILED && c->pid > 0 && !pid_alive(c->pid))
            conn_fail(c, COHORT_ERR_PEER_LOST, "ucx: rank %d lost rank %d: its process (pid %d "
                      "on this host) is gone (exited or killed)", ep->rank, c->peer, c->pid);
}

/* Posts the next chunk receives of a split message (stage 1), one per free slot; the message
 * takes its slots (at most UX_SLOTS) from the endpoint at the first call. */
static void post_chunks(ux_req_t *m)
{
    ux_conn_t *c = m->conn;
    ux_ep_t *ep = c->ep;
    m->stage = 2;
    if (c->state == C_FAILED || m->done) return;
    if (!m->next_chunk) {
        uint32_t n = m->nchunks < UX_SLOTS ? m->nchunks : UX_SLOTS;
        while ((uint32_t)m->nspare < n) {
            ucp_mem_h mh;
            void *b = slot_get(ep, &mh);
            if (!b) break;
            m->spare[m->nspare] = b;
            m->spare_mh[m->nspare++] = mh;
        }
        if (!m->nspare) {
            req_fail_msg(m, COHORT_ERR_NO_MEMORY, "ucx: rank %d: no memory for a %u-byte "
                         "receive slot (message from rank %d)", ep->rank, UX_CHUNK, c->peer);
            return;
        }
    }
    uint64_t len = kit_get_le64(m->hdr + 8);
    while (m->nspare && m->next_chunk < m->nchunks && c->state != C_FAILED) {
        ux_req_t *k = req_new(c, K_CHUNK, 0);
        if (!k) {
            conn_fail(c, COHORT_ERR_NO_MEMORY, "ucx: rank %d: no memory for a request "
                      "(receiving from rank %d)", ep->rank, c->peer);
            return;
        }
        m->nspare--;
        k->own = m->spare[m->nspare];
        k->slot_memh = m->spare_mh[m->nspare];
        k->parent = m;
        k->chunk = m->next_chunk++;
        k->released = 0;   /* not freed inside req_start (its callback may run there) */
        m->pending++;
        req_start(k, k->own, chunk_len(len, k->chunk), ucp_dt_make_contig(1),
                  payload_tag(c->peer, m->seq, k->chunk), UX_FULL_MASK, k->slot_memh);
        k->released = 1;
        req_maybe_free(k);
    }
}

static void post_payloads(ux_ep_t *ep)
{
    for (ux_conn_t *c = ep->conns; c && ep->nstage; c = c->next)
        for (ux_req_t *r = c->all; r && ep->nstage; r = r->anext)
            if (r->stage == 1) {
                ep->nstage--;
                post_chunks(r);
            }
}

static int worker_progress(ux_ep_t *ep);

static void ep_work(ux_ep_t *ep)
{
    /* A connection ended (conn_lost below): first take what else has arrived; the peer's last
     * messages and its bye may come on another of UCX's sockets than the one that ended. */
    if (ep->nlost) (void)worker_progress(ep);
    if (ep->nstage) post_payloads(ep);
    watch_peers(ep);
    if (ep->hrx.done) hello_arrived(ep);
    post_hello_recv(ep);
    /* every bye that has arrived (a repost takes the next one waiting in UCX at once) */
    for (int i = 0; i <= ep->nranks; i++) {
        if (ep->brx.done) bye_arrived(ep);
        post_bye_recv(ep);
        if (!ep->brx.done) break;
    }
    for (ux_conn_t *c = ep->conns; c; c = c->next) {
        if (c->ack_rx) ack_arrived(c);
        if (c->ack_sent && c->state == C_CONNECTING) conn_ready(c);
        if (c->lost == 1) conn_lost(c);
        if ((c->state == C_FAILED || c->lost == 2) && c->uep) conn_close_uep(c);
    }
}

static int worker_progress(ux_ep_t *ep)
{
    int n = 0;
    for (int i = 0; i < UX_PROGRESS_MAX; i++) {
        unsigned k = ucp_worker_progress(ep->worker);
        if (!k) break;
        n += (int)k;
    }
    return n;
}

/* ---- plugin API -------------------------------------------------------------------------- */

static char ux_version[224] = UX_PLUGIN_VERSION;

/* 1 if the comma list of UCX transport names holds one that is neither self, tcp nor shared
 * memory (an RDMA transport: rc, ud, dc, ...). */
static int has_rdma(const char *tls)
{
    static const char *const covered[] = { "self", "tcp", "posix", "sysv", "cma", "knem",
                                           "xpmem" };
    for (const char *p = tls; *p;) {
        size_t k = strcspn(p, ",");
        int known = 0;
        for (size_t i = 0; i < sizeof covered / sizeof covered[0]; i++)
            known |= k == strlen(covered[i]) && !strncmp(p, covered[i], k);
        if (!known) return 1;
        p += k;
        if (*p == ',') p++;
    }
    return 0;
}

static int named_in_transports(const cohort_host_v1_t *host)
{
    const char *t = host->setting("COHORT_TRANSPORTS");
    if (!t) return 0;
    while (*t == ' ') t++;
    if (*t == '^') return 0;
    for (const char *p = t; *p;) {
        size_t n = strcspn(p, ",");
        const char *a = p, *e = p + n;
        while (a < e && *a == ' ') a++;
        while (e > a && e[-1] == ' ') e--;
        if (e - a == 3 && !strncmp(a, "ucx", 3)) return 1;
        p += n;
        if (*p == ',') p++;
    }
    return 0;
}

/* The transports of the UCX context (ucp_context_print_info's "resource" lines), as
 * "tcp/lo tcp/eth0 ..." into res and the distinct transport names into tls; 1 if one of them is a
 * network transport (anything but self and shared memory). */
static int context_resources(ucp_context_h ucp, char *res, size_t rlen, char *tls, size_t tlen)
{
    res[0] = tls[0] = '\0';
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return 0;
    ucp_context_print_info(ucp, f);
    fclose(f);
    int net = 0;
    size_t ru = 0, tu = 0;
    for (char *line = text, *nl; line && *line; line = nl ? nl + 1 : NULL) {
        nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        if (!strstr(line, "resource")) continue;
        char *last = strrchr(line, ' ');
        if (!last || !strchr(last, '/')) continue;
        last++;
        size_t tn = strcspn(last, "/");
        if (ru < rlen) {
            int w = snprintf(res + ru, rlen - ru, "%s%s", ru ? " " : "", last);
            if (w > 0) ru += (size_t)w;
        }
        char name[32];
        snprintf(name, sizeof name, "%.*s", (int)(tn < 31 ? tn : 31), last);
        static const char *const local[] = { "self", "posix", "sysv", "cma", "knem", "xpmem" };
        int is_local = 0;
        for (size_t i = 0; i < sizeof local / sizeof local[0]; i++)
            is_local |= !strcmp(name, local[i]);
        net |= !is_local;
        int seen = 0;
        for (const char *p = tls; *p && !seen;) {
            size_t k = strcspn(p, ",");
            seen = k == strlen(name) && !strncmp(p, name, k);
            p += k;
            if (*p == ',') p++;
        }
        if (!seen && tu < tlen) {
            int w = snprintf(tls + tu, tlen - tu, "%s%s", tu ? "," : "", name);
            if (w > 0) tu += (size_t)w;
        }
    }
    free(text);
    return net;
}

static cohort_status_t ux_init(const cohort_host_v1_t *host, cohort_tp_ctx_t *ctx)
{
    if (!host || !ctx) return COHORT_ERR_INVALID_ARG;
    if (!COHORT_HAS_FIELD(host, cohort_host_v1_t, auth) || !host->log || !host->error ||
        !host->setting || !host->setting_long || !host->netifs || !host->auth) {
        if (COHORT_HAS_FIELD(host, cohort_host_v1_t, error) && host->error)
            return host->error(COHORT_ERR_UNSUPPORTED, "ucx: the core's host table is too old "
                               "or incomplete (size %zu)", host->size);
        return COHORT_ERR_UNSUPPORTED;
    }
    const char *uver = ucp_get_version_string();
    ucp_config_t *cfg = NULL;
    ucs_status_t s = ucp_config_read(NULL, NULL, &cfg);
    if (s != UCS_OK)
        return host->error(COHORT_ERR_UNSUPPORTED, "ucx: UCX %s failed to initialise: "
                           "ucp_config_read: %s (check the UCX_* variables)", uver,
                           ucs_status_string(s));
    /* COHORT_SOCKET_IFNAME -> UCX's NET_DEVICES, only when the user did not set it. */
    char devs[512] = "";
    const char *ifspec = host->setting("COHORT_SOCKET_IFNAME");
    if (ifspec && *ifspec && !getenv("UCX_NET_DEVICES")) {
        const cohort_netif_t *ifs = NULL;
        int nifs = 0;
        cohort_status_t st = host->netifs(&ifs, &nifs);
        if (st != COHORT_SUCCESS) {
            ucp_config_release(cfg);
            return st;
        }
        size_t used = 0;
        for (int i = 0; i < nifs; i++) {
            int dup = 0;
            for (int j = 0; j < i; j++) dup |= !strcmp(ifs[i].name, ifs[j].name);
            if (dup || used >= sizeof devs) continue;
            int w = snprintf(devs + used, sizeof devs - used, "%s%.32s", used ? "," : "",
                             ifs[i].name);
            if (w > 0) used += (size_t)w;
        }
        if (devs[0]) {
            s = ucp_config_modify(cfg, "NET_DEVICES", devs);
            if (s != UCS_OK) {
                ucp_config_release(cfg);
                return host->error(COHORT_ERR_UNSUPPORTED, "ucx: UCX %s refuses "
                                   "NET_DEVICES='%s' (from COHORT_SOCKET_IFNAME='%s'): "
                                   "ucp_config_modify: %s; set UCX_NET_DEVICES yourself",
                                   uver, devs, ifspec, ucs_status_string(s));
            }
        }
    }
    ucp_params_t prm;
    memset(&prm, 0, sizeof prm);
    prm.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED |
                     UCP_PARAM_FIELD_NAME;
    prm.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
    prm.mt_workers_shared = 1;   /* communicators on different threads share the context */
    prm.name = "cohort";
    ucp_context_h ucp = NULL;
    s = ucp_init(&prm, cfg, &ucp);
    ucp_config_release(cfg);
    if (s != UCS_OK)
        return host->error(COHORT_ERR_UNSUPPORTED, "ucx: UCX %s failed to initialise: ucp_init: "
                           "%s (UCX_TLS='%s', UCX_NET_DEVICES='%s'%s; `ucx_info -d` lists what "
                           "UCX finds)", uver, ucs_status_string(s),
                           getenv("UCX_TLS") ? getenv("UCX_TLS") : "all",
                           getenv("UCX_NET_DEVICES") ? getenv("UCX_NET_DEVICES")
                           : (devs[0] ? devs : "all"),
                           devs[0] ? ", from COHORT_SOCKET_IFNAME" : "");
    char res[512], tls[160];
    int net = context_resources(ucp, res, sizeof res, tls, sizeof tls);
    int rdma = has_rdma(tls);
    if (!named_in_transports(host) && !rdma) {
        ucp_cleanup(ucp);
        return host->error(COHORT_ERR_UNSUPPORTED, "ucx: UCX %s finds only %s here (%s), which "
                           "cohort's own tcp and shm transports cover; name ucx in "
                           "COHORT_TRANSPORTS to use it anyway", uver, tls[0] ? tls : "nothing",
                           res[0] ? res : "no resources");
    }
    ux_ctx_t *c = calloc(1, sizeof *c);
    if (!c) {
        ucp_cleanup(ucp);
        return host->error(COHORT_ERR_NO_MEMORY, "ucx: no memory for the plugin context");
    }
    int e = pthread_mutex_init(&c->lock, NULL);
    if (e) {
        free(c);
        ucp_cleanup(ucp);
        return host->error(COHORT_ERR_SYSTEM, "ucx: pthread_mutex_init for the plugin context "
                           "failed: %s", strerror(e));
    }
    c->host = host;
    c->ucp = ucp;
    c->has_net = net;
    c->has_rdma = rdma;
    snprintf(c->tls, sizeof c->tls, "%s", tls);
    snprintf(ux_version, sizeof ux_version, "%s (UCX %s: %.150s)", UX_PLUGIN_VERSION, uver,
             tls[0] ? tls : "no transports");
    host->log(COHORT_LOG_INFO, SUBSYS, "ucx: UCX %s with %s%s%s", uver, res,
              devs[0] ? "; NET_DEVICES from COHORT_SOCKET_IFNAME: " : "", devs);
    *ctx = c;
    return COHORT_SUCCESS;
}

static cohort_status_t ux_ep_close(cohort_tp_ep_t epv);

static cohort_status_t ux_finalize(cohort_tp_ctx_t ctxv)
{
    ux_ctx_t *ctx = (ux_ctx_t *)ctxv;
    if (!ctx) return COHORT_SUCCESS;
    while (ctx->eps) ux_ep_close(ctx->eps);
    ucp_cleanup(ctx->ucp);
    pthread_mutex_destroy(&ctx->lock);
    free(ctx);
    return COHORT_SUCCESS;
}

static cohort_status_t ux_get_attr(cohort_tp_ctx_t ctxv, cohort_transport_attr_t *attr)
{
    ux_ctx_t *ctx = (ux_ctx_t *)ctxv;
    if (!attr) return COHORT_ERR_INVALID_ARG;
    cohort_transport_attr_t a;
    memset(&a, 0, sizeof a);
    a.scope = COHORT_SCOPE_NETWORK;
    /* With RDMA (anything beyond tcp and shared memory) UCX is preferred over cohort's tcp, but
     * not over cohort's own verbs transport (which never estimates below 1.5 GB/s): Debian's
     * UCX 1.13 aborts the process on some endpoint failures over rc/ud verbs (seen on Soft-RoCE
     * across two VMs), which the verbs plugin turns into errors. With only tcp it is not faster
     * than cohort's own (docs/performance.md), so it ranks below. */
    int rdma = ctx && ctx->has_rdma;
    a.bandwidth_gbps = rdma ? 1.4 : 1.0;
    a.latency_us = rdma ? 3.0 : 30.0;
    cohort_attr_fill(attr, &a);
    return COHORT_SUCCESS;
}

/* Lets the worker finish what UCX started on its own before ucp_worker_destroy: a peer's
 * connection that wireup accepted for an endpoint of ours never made (the collective failed
 * before this rank reached that peer) may still queue its wireup reply behind a tcp connect,
 * and Debian's UCX 1.13 asserts (abort) when the worker's destroy purges such a reply (seen under
 * ASan, 3 runs in 30 of a 3-rank job whose first broadcast mismatched; upstream later dropped
 * the assertion, openucx/ucx#8175). A worker flush waits for exactly that. Bounded by
 * UX_CLOSE_FLUSH_S: a peer that stopped reading costs at most that, and what is left is
 * purged as before. Our own ucp_eps are closed by now, so no user memory is read. */
static void worker_settle(ux_ep_t *ep)
{
    ucp_request_param_t prm;
    memset(&prm, 0, sizeof prm);
    ucs_status_ptr_t p = ucp_worker_flush_nbx(ep->worker, &prm);
    if (!UCS_PTR_IS_PTR(p)) return;
    double until = now_s() + UX_CLOSE_FLUSH_S;
    while (ucp_request_check_status(p) == UCS_INPROGRESS && now_s() < until) {
        if (ucp_worker_progress(ep->worker)) continue;
        if (ucp_worker_arm(ep->worker) == UCS_OK) {
            struct pollfd pf = { ep->efd, POLLIN, 0 };
            (void)poll(&pf, 1, 1);
        }
    }
    if (ucp_request_check_status(p) == UCS_INPROGRESS) ucp_request_cancel(ep->worker, p);
    ucp_request_free(p);
}

static void ep_destroy(ux_ep_t *ep)
{
    while (ep->conns) conn_destroy(ep->conns);
    if (ep->hrx.req) {
        void *u = ep->hrx.req;
        ep->hrx.req = NULL;
        ucp_request_cancel(ep->worker, u);   /* its callback frees it */
    }
    if (ep->brx.req) {
        void *u = ep->brx.req;
        ep->brx.req = NULL;
        ucp_request_cancel(ep->worker, u);
    }
    if (ep->worker) {
        /* Let the closes and cancels deliver their callbacks (bounded: no waiting). */
        for (int i = 0; i < 16 && ep->orphans; i++) (void)ucp_worker_progress(ep->worker);
        /* Byes and hellos that arrived after the last progress (the peers' byes often come
         * during the loop above): take them, or UCX warns about unmatched messages when the
         * worker goes. */
        for (int i = 0; i < 1024; i++) {
            ucp_tag_recv_info_t info;
            ucp_tag_message_h m = ucp_tag_probe_nb(ep->worker, UX_KIND_BYE << UX_KIND_SHIFT,
                                                   1ull << UX_KIND_SHIFT, 1, &info);
            if (!m) break;
            unsigned char *junk = malloc(info.length ? info.length : 1);
            if (!junk) break;
            ucp_request_param_t prm;
            memset(&prm, 0, sizeof prm);
            ucs_status_ptr_t p = ucp_tag_msg_recv_nbx(ep->worker, junk, info.length, m, &prm);
            for (int k = 0; k < 16 && UCS_PTR_IS_PTR(p) &&
                            ucp_request_check_status(p) == UCS_INPROGRESS; k++)
                (void)ucp_worker_progress(ep->worker);
            if (UCS_PTR_IS_PTR(p)) {
                if (ucp_request_check_status(p) == UCS_INPROGRESS) ucp_request_cancel(ep->worker, p);
                ucp_request_free(p);
            }
            free(junk);
        }
        worker_settle(ep);
        if (ep->addr) ucp_worker_release_address(ep->worker, ep->addr);
        ucp_worker_destroy(ep->worker);
    }
    /* Requests whose callbacks never came: UCX released its part with the worker. */
    while (ep->orphans) {
        ux_req_t *r = ep->orphans;
        r->ucx = NULL;
        req_free(r);
    }
    while (ep->npool > 0) {
        ep->npool--;
        slot_release(ep->ctx, ep->pool[ep->npool], ep->pool_mh[ep->npool]);
    }
    while (ep->early) {
        ux_hello_t *h = ep->early;
        ep->early = h->next;
        free(h->buf);
        free(h);
    }
    free(ep->hbuf);
    free(ep);
}

static cohort_status_t ux_ep_open(cohort_tp_ctx_t ctxv, const cohort_ep_info_t *info,
                                  cohort_tp_ep_t *epp, void *addr, size_t *addrlen)
{
    ux_ctx_t *ctx = (ux_ctx_t *)ctxv;
    const cohort_host_v1_t *host = ctx->host;
    cohort_status_t st = cohort_ep_open_check(host, "ucx", info, epp, addr, addrlen);
    if (st) return st;
    if (info->nranks > (1 << UX_RANK_BITS))
        return host->error(COHORT_ERR_UNSUPPORTED, "ucx: a communicator of %d ranks is larger "
                           "than the %d this transport supports", info->nranks,
                           1 << UX_RANK_BITS);
    /* COHORT_UCX_ZCOPY: large payloads in chunks (see "large" at the top). auto: only when UCX
     * has an RDMA transport, where zero-copy pays; over tcp the gain is 1.3-1.7x while UCX
     * 1.13's own assertions on closing with transfers in flight fire more often. */
    const char *zv = host->setting("COHORT_UCX_ZCOPY");
    int zcopy;
    if (!zv || !strcasecmp(zv, "auto")) zcopy = ctx->has_rdma;
    else if (!strcmp(zv, "0") || !strcmp(zv, "1")) zcopy = zv[0] == '1';
    else
        return host->error(COHORT_ERR_INVALID_ARG, "COHORT_UCX_ZCOPY='%.40s' is not one of "
                           "auto, 0, 1", zv);
    ux_ep_t *ep = calloc(1, sizeof *ep);
    if (!ep) return host->error(COHORT_ERR_NO_MEMORY, "ucx: no memory for an endpoint");
    ep->ctx = ctx;
    ep->host = host;
    ep->rank = info->rank;
    ep->nranks = info->nranks;
    ep->comm_id = info->comm_id;
    ep->zcopy = zcopy;
    ep->efd = -1;
    ep->hrx.ep = ep->brx.ep = ep;
    job_hash(host, info->job_id, ep->job_hash);
    host_id(host, ep->proc);
    ucp_worker_params_t wp;
    memset(&wp, 0, sizeof wp);
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    ucs_status_t s = ucp_worker_create(ctx->ucp, &wp, &ep->worker);
    const char *what = "ucp_worker_create";
    if (s == UCS_OK) {
        what = "ucp_worker_get_efd";
        s = ucp_worker_get_efd(ep->worker, &ep->efd);
    }
    if (s == UCS_OK) {
        what = "ucp_worker_get_address";
        s = ucp_worker_get_address(ep->worker, &ep->addr, &ep->addr_len);
    }
    if (s != UCS_OK) {
        if (ep->worker) {   /* (the address is what failed, or was never asked for) */
            ucp_worker_destroy(ep->worker);
            ep->worker = NULL;
        }
        free(ep);
        return host->error(s == UCS_ERR_NO_MEMORY ? COHORT_ERR_NO_MEMORY : COHORT_ERR_TRANSPORT,
                           "ucx: rank %d cannot set up its UCX worker: %s: %s (UCX_TLS='%s'; "
                           "`ucx_info -d` lists UCX's devices)", info->rank, what,
                           ucs_status_string(s), getenv("UCX_TLS") ? getenv("UCX_TLS") : "all");
    }
    size_t need = UX_BLOB_HDR + ep->addr_len;
    if (need > *addrlen) {
        size_t al = ep->addr_len;
        ep_destroy(ep);
        return host->error(COHORT_ERR_UNSUPPORTED, "ucx: rank %d: its UCX worker address is %zu "
                           "bytes, more than the %zu the core exchanges; restrict UCX's "
                           "transports with UCX_TLS or UCX_NET_DEVICES", info->rank, al,
                           *addrlen - UX_BLOB_HDR);
    }
    unsigned char *b = (unsigned char *)addr;
    kit_put_le32(b, UX_MAGIC);
    kit_put_le32(b + 4, (uint32_t)ep->nranks);
    kit_put_le32(b + 8, (uint32_t)ep->rank);
    kit_put_le32(b + 12, ctx->has_net ? 1u : 0u);
    kit_put_le64(b + 16, ep->comm_id);
    memcpy(b + 24, ep->job_hash, UX_MAC_LEN);
    memcpy(b + UX_PROC_OFF, ep->proc, UX_PROC_LEN);
    kit_put_le32(b + UX_BLOB_HDR - 4, (uint32_t)ep->addr_len);
    memcpy(b + UX_BLOB_HDR, ep->addr, ep->addr_len);
    *addrlen = need;
    post_hello_recv(ep);
    post_bye_recv(ep);
    pthread_mutex_lock(&ctx->lock);
    ep->next = ctx->eps;
    if (ctx->eps) ctx->eps->prev = ep;
    ctx->eps = ep;
    pthread_mutex_unlock(&ctx->lock);
    host->log(COHORT_LOG_INFO, SUBSYS, "ucx: rank %d: worker address of %zu bytes; UCX "
              "transports %s", ep->rank, ep->addr_len, ctx->tls);
    *epp = ep;
    return COHORT_SUCCESS;
}

static cohort_status_t ux_ep_close(cohort_tp_ep_t epv)
{
    ux_ep_t *ep = (ux_ep_t *)epv;
    if (!ep) return COHORT_SUCCESS;
    ux_ctx_t *ctx = ep->ctx;
    pthread_mutex_lock(&ctx->lock);
    if (ep->prev) ep->prev->next = ep->next;
    else ctx->eps = ep->next;
    if (ep->next) ep->next->prev = ep->prev;
    pthread_mutex_unlock(&ctx->lock);
    ep_destroy(ep);
    return COHORT_SUCCESS;
}

/* Checks that a blob is a ucx address of this job, communicator and peer: 0, or -1 with the
 * reason in why. */
static int blob_check(const ux_ep_t *ep, int peer, const void *blob, size_t len, char *why,
                      size_t wl)
{
    const unsigned char *b = (const unsigned char *)blob;
    if (!b || len < UX_BLOB_HDR || kit_get_le32(b) != UX_MAGIC) {
        snprintf(why, wl, "the address of rank %d (%zu bytes) is not a ucx address of this "
                 "cohort version", peer, len);
        return -1;
    }
    if (!ct_equal(b + 24, ep->job_hash, UX_MAC_LEN)) {
        snprintf(why, wl, "the address of rank %d belongs to another job (different "
                 "COHORT_JOB_ID or COHORT_SECRET)", peer);
        return -1;
    }
    if (kit_get_le32(b + 8) != (uint32_t)peer || kit_get_le32(b + 4) != (uint32_t)ep->nranks ||
        kit_get_le64(b + 16) != ep->comm_id) {
        snprintf(why, wl, "the address given for rank %d is rank %u's of communicator %llu with "
                 "%u ranks (expected communicator %llu with %d ranks)", peer,
                 (unsigned)kit_get_le32(b + 8), (unsigned long long)kit_get_le64(b + 16),
                 (unsigned)kit_get_le32(b + 4), (unsigned long long)ep->comm_id, ep->nranks);
        return -1;
    }
    if ((size_t)kit_get_le32(b + UX_BLOB_HDR - 4) + UX_BLOB_HDR != len) {
        snprintf(why, wl, "the address of rank %d is %zu bytes but says it holds a UCX address "
                 "of %u", peer, len, (unsigned)kit_get_le32(b + UX_BLOB_HDR - 4));
        return -1;
    }
    return 0;
}

static int ux_can_reach(cohort_tp_ep_t epv, int peer, const void *peer_addr, size_t addrlen)
{
    ux_ep_t *ep = (ux_ep_t *)epv;
    if (!ep || peer < 0 || peer >= ep->nranks || peer == ep->rank) return 0;
    char why[400];
    if (blob_check(ep, peer, peer_addr, addrlen, why, sizeof why) != 0) {
        ep->host->log(COHORT_LOG_INFO, SUBSYS, "ucx: rank %d cannot use ucx to rank %d: %s",
                      ep->rank, peer, why);
        return 0;
    }
    const unsigned char *b = (const unsigned char *)peer_addr;
    if (memcmp(b + UX_PROC_OFF, ep->proc, UX_HOST_LEN) == 0) return 1;
    if ((kit_get_le32(b + 12) & 1u) && ep->ctx->has_net) return 1;
    ep->host->log(COHORT_LOG_INFO, SUBSYS, "ucx: rank %d cannot use ucx to rank %d: it is on "
                  "another host and %s has only shared-memory transports (UCX_TLS='%s')",
                  ep->rank, peer, ep->ctx->has_net ? "that rank's UCX" : "this rank's UCX",
                  getenv("UCX_TLS") ? getenv("UCX_TLS") : "all");
    return 0;
}

static cohort_status_t ux_connect(cohort_tp_ep_t epv, int peer, const void *peer_addr,
                                  size_t addrlen, cohort_tp_conn_t *connp)
{
    ux_ep_t *ep = (ux_ep_t *)epv;
    const cohort_host_v1_t *host = ep->host;
    if (!connp) return host->error(COHORT_ERR_INVALID_ARG, "ucx: connect needs a conn pointer");
    *connp = NULL;
    if (peer < 0 || peer >= ep->nranks || peer == ep->rank)
        return host->error(COHORT_ERR_INVALID_ARG, "ucx: connect: rank %d is not a peer in "
                           "[0,%d)", peer, ep->nranks);
    char why[400];
    if (blob_check(ep, peer, peer_addr, addrlen, why, sizeof why) != 0)
        return host->error(COHORT_ERR_INVALID_ARG, "ucx: rank %d connecting to rank %d: %s "
                           "(a different cohort version, or another transport's address?)",
                           ep->rank, peer, why);
    if (find_conn(ep, peer, 1))
        return host->error(COHORT_ERR_INVALID_ARG, "ucx: connect: rank %d is already connected "
                           "on this endpoint", peer);
    ux_conn_t *c = conn_new(ep, peer, 1);
    if (!c) return host->error(COHORT_ERR_NO_MEMORY, "ucx: no memory for a connection");
    *connp = c;
    const unsigned char *b = (const unsigned char *)peer_addr;
    if (uep_create(c, b + UX_BLOB_HDR, b + UX_PROC_OFF) != COHORT_SUCCESS)
        return COHORT_SUCCESS;   /* conn_test reports it */
    /* the receive of the acceptor's answer, then the hello: who we are, our worker
     * address, authenticated */
    ux_req_t *ar = req_new(c, K_ACK_RECV, 0);
    size_t n = UX_HELLO_HDR + ep->addr_len + UX_MAC_LEN;
    unsigned char *h = n <= UX_HELLO_MAX ? malloc(n) : NULL;
    if (ar) ar->own = malloc(UX_ACK_SIZE);
    if (!ar || !ar->own || !h) {
        free(h);
        conn_fail(c, COHORT_ERR_NO_MEMORY, "ucx: rank %d: no memory for the connection set-up "
                  "with rank %d (hello of %zu bytes)", ep->rank, peer, n);
        return COHORT_SUCCESS;
    }
    req_start(ar, ar->own, UX_ACK_SIZE, ucp_dt_make_contig(1),
              (UX_KIND_ACK << UX_KIND_SHIFT) | ((uint64_t)(unsigned)peer << UX_SEQ_BITS),
              UX_FULL_MASK, NULL);
    kit_put_le32(h, UX_HELLO_MAGIC);
    kit_put_le32(h + 4, (uint32_t)ep->rank);
    kit_put_le32(h + 8, (uint32_t)peer);
    kit_put_le32(h + 12, (uint32_t)ep->nranks);
    kit_put_le64(h + 16, ep->comm_id);
    memcpy(h + 24, ep->job_hash, UX_MAC_LEN);
    memcpy(h + UX_PROC_OFF, ep->proc, UX_PROC_LEN);
    kit_put_le32(h + UX_HELLO_HDR - 4, (uint32_t)ep->addr_len);
    memcpy(h + UX_HELLO_HDR, ep->addr, ep->addr_len);
    host->auth(h, n - UX_MAC_LEN, h + n - UX_MAC_LEN);
    send_ctl(c, K_HELLO, h, n,
             (UX_KIND_HELLO << UX_KIND_SHIFT) | ((uint64_t)(unsigned)ep->rank << UX_SEQ_BITS));
    host->log(COHORT_LOG_TRACE, SUBSYS, "ucx: rank %d connecting to rank %d", ep->rank, peer);
    return COHORT_SUCCESS;
}

static cohort_status_t ux_accept(cohort_tp_ep_t epv, int peer, cohort_tp_conn_t *connp)
{
    ux_ep_t *ep = (ux_ep_t *)epv;
    const cohort_host_v1_t *host = ep->host;
    if (!connp) return host->error(COHORT_ERR_INVALID_ARG, "ucx: accept needs a conn pointer");
    *connp = NULL;
    if (peer < 0 || peer >= ep->nranks || peer == ep->rank)
        return host->error(COHORT_ERR_INVALID_ARG, "ucx: accept: rank %d is not a peer in "
                           "[0,%d)", peer, ep->nranks);
    if (find_conn(ep, peer, 0))
        return host->error(COHORT_ERR_INVALID_ARG, "ucx: accept: rank %d is already accepted on "
                           "this endpoint", peer);
    ux_conn_t *c = conn_new(ep, peer, 0);
    if (!c) return host->error(COHORT_ERR_NO_MEMORY, "ucx: no memory for a connection");
    for (ux_hello_t **hp = &ep->early; *hp; hp = &(*hp)->next)
        if ((*hp)->src == peer) {
            ux_hello_t *h = *hp;
            *hp = h->next;
            accept_hello(c, h->buf);
            free(h->buf);
            free(h);
            break;
        }
    *connp = c;
    return COHORT_SUCCESS;
}

static cohort_status_t ux_progress(cohort_tp_ep_t epv);

static cohort_status_t ux_conn_test(cohort_tp_conn_t connv)
{
    ux_conn_t *c = (ux_conn_t *)connv;
    if (c->state == C_CONNECTING) (void)ux_progress(c->ep);
    if (c->state == C_FAILED || c->peer_closed)
        return c->ep->host->error(c->err, "%s", c->errmsg);
    if (c->state == C_READY) return COHORT_SUCCESS;
    return COHORT_IN_PROGRESS;
}

static cohort_status_t ux_conn_close(cohort_tp_conn_t connv)
{
    ux_conn_t *c = (ux_conn_t *)connv;
    if (!c) return COHORT_SUCCESS;
    send_bye_and_close(c);
    conn_destroy(c);
    return COHORT_SUCCESS;
}

static cohort_status_t post(ux_conn_t *c, int is_send, void *buf, size_t len, uint64_t tag,
                            ux_mr_t *mr, cohort_tp_req_t *reqp)
{
    const cohort_host_v1_t *host = c->ep->host;
    if (!reqp) return host->error(COHORT_ERR_INVALID_ARG, "ucx: isend/irecv need a request "
                                  "pointer");
    *reqp = NULL;
    if (!buf && len)
        return host->error(COHORT_ERR_INVALID_ARG, "ucx: %s of %zu bytes with a NULL buffer "
                           "(rank %d)", is_send ? "isend" : "irecv", len, c->peer);
    if (c->state == C_FAILED || (c->peer_closed && (is_send || c->recv_seq >= c->closed_seq)))
        return host->error(c->err, "%s", c->errmsg);
    ux_req_t *r = req_new(c, K_DATA, is_send);
    if (!r) return host->error(COHORT_ERR_NO_MEMORY, "ucx: no memory for a request");
    r->buf = buf;
    r->len = len;
    r->tag = tag;
    r->nbytes = is_send ? len : 0;
    /* a registration helps a send only when it covers the whole buffer (UCX's rule for memh);
     * receives land in the plugin's slots */
    if (is_send && mr && len && (uintptr_t)buf >= mr->base && len <= mr->len &&
        (uintptr_t)buf - mr->base <= mr->len - len)
        r->mr = mr;
    *reqp = r;
    if (c->state == C_READY) {
        req_post(r);
        /* The peer closed and then its connection ended: a message it sent is waiting in UCX
         * (then the receive completed inside req_post) or will not come. */
        if (c->lost == 2 && !r->done) {
            lost_recv(c, r);
            cancel_finished_recvs(c);
        }
    } else {
        if (c->def_t) c->def_t->qnext = r;
        else c->def_h = r;
        c->def_t = r;
    }
    return COHORT_SUCCESS;
}

static cohort_status_t ux_isend(cohort_tp_conn_t connv, const void *buf, size_t len,
                                uint64_t tag, cohort_tp_mr_t mr, cohort_tp_req_t *req)
{
    return post((ux_conn_t *)connv, 1, (void *)(uintptr_t)buf, len, tag, (ux_mr_t *)mr, req);
}

static cohort_status_t ux_irecv(cohort_tp_conn_t connv, void *buf, size_t len, uint64_t tag,
                                cohort_tp_mr_t mr, cohort_tp_req_t *req)
{
    return post((ux_conn_t *)connv, 0, buf, len, tag, (ux_mr_t *)mr, req);
}

/* Registers [buf, buf + len) with every memory domain of the UCX context (ucp_mem_map), for
 * sends of buffers inside it: their chunks skip UCX's per-message registration lookup
 * (receives land in the plugin's own registered slots). */
static cohort_status_t ux_mem_reg(cohort_tp_ep_t epv, void *buf, size_t len, cohort_tp_mr_t *mrp)
{
    ux_ep_t *ep = (ux_ep_t *)epv;
    if (!ep || !mrp) return COHORT_ERR_INVALID_ARG;
    *mrp = NULL;
    if (!buf || !len)
        return ep->host->error(COHORT_ERR_INVALID_ARG, "ucx: mem_reg of %zu bytes at %p: give "
                               "a buffer and a non-zero length", len, buf);
    ux_mr_t *m = calloc(1, sizeof *m);
    if (!m) return ep->host->error(COHORT_ERR_NO_MEMORY, "ucx: no memory for a registration");
    ucs_status_t s = map_range(ep->ctx, buf, len, &m->memh);
    if (s != UCS_OK) {
        free(m);
        return ep->host->error(s == UCS_ERR_NO_MEMORY ? COHORT_ERR_NO_MEMORY
                                                      : COHORT_ERR_TRANSPORT,
                               "ucx: rank %d: ucp_mem_map of %zu bytes at %p failed: %s (UCX; "
                               "with RDMA devices the locked-memory limit bounds registrations: "
                               "check `ulimit -l`)", ep->rank, len, buf, ucs_status_string(s));
    }
    m->base = (uintptr_t)buf;
    m->len = len;
    *mrp = m;
    return COHORT_SUCCESS;
}

static cohort_status_t ux_mem_dereg(cohort_tp_ep_t epv, cohort_tp_mr_t mrv)
{
    ux_ep_t *ep = (ux_ep_t *)epv;
    ux_mr_t *m = (ux_mr_t *)mrv;
    if (!ep || !m) return COHORT_ERR_INVALID_ARG;
    ucs_status_t s = ucp_mem_unmap(ep->ctx->ucp, m->memh);
    free(m);
    if (s != UCS_OK)
        return ep->host->error(COHORT_ERR_TRANSPORT, "ucx: rank %d: ucp_mem_unmap failed: %s",
                               ep->rank, ucs_status_string(s));
    return COHORT_SUCCESS;
}

static cohort_status_t ux_test(cohort_tp_req_t reqv, size_t *nbytes)
{
    ux_req_t *r = (ux_req_t *)reqv;
    ux_conn_t *c = r->conn;
    ux_ep_t *ep = c->ep;
    if (!r->done) {
        if (worker_progress(ep) > 0 && !r->done) ep_signal(ep);
        watch_peers(ep);
        if (ep->hrx.done || ep->brx.done || c->ack_rx || ep->nstage || ep->nlost) {
            ep_work(ep);
            ep_signal(ep);
        }
    }
    if (!r->done) return COHORT_IN_PROGRESS;
    cohort_status_t st = r->status;
    if (st == COHORT_SUCCESS) {
        if (nbytes) *nbytes = r->nbytes;
    } else {
        ep->host->error(st, "%s", r->errmsg ? r->errmsg : c->errmsg);
    }
    r->released = 1;
    req_maybe_free(r);
    return st;
}

static cohort_status_t ux_progress(cohort_tp_ep_t epv)
{
    ux_ep_t *ep = (ux_ep_t *)epv;
    ep->in_progress = 1;
    for (int round = 0; round < 4; round++) {
        (void)worker_progress(ep);
        ep_work(ep);
        ucs_status_t s = ucp_worker_arm(ep->worker);
        if (s == UCS_OK) break;
        if (s != UCS_ERR_BUSY) {
            ep->in_progress = 0;
            return ep->host->error(COHORT_ERR_TRANSPORT, "ucx: rank %d: ucp_worker_arm failed: "
                                   "%s", ep->rank, ucs_status_string(s));
        }
        if (round == 3) (void)ucp_worker_signal(ep->worker);   /* still busy: stay readable */
    }
    ep->signalled = 0;
    ep->in_progress = 0;
    return COHORT_SUCCESS;
}

static int ux_ep_fd(cohort_tp_ep_t epv)
{
    return epv ? ((ux_ep_t *)epv)->efd : -1;
}

__attribute__((visibility("default")))
const cohort_transport_v1_t cohort_transport_v1 = {
    .size = sizeof(cohort_transport_v1_t),
    .abi_version = COHORT_PLUGIN_ABI_VERSION,
    .name = "ucx",
    .version = ux_version,
    .init = ux_init,
    .finalize = ux_finalize,
    .get_attr = ux_get_attr,
    .ep_open = ux_ep_open,
    .ep_close = ux_ep_close,
    .can_reach = ux_can_reach,
    .connect = ux_connect,
    .accept = ux_accept,
    .conn_test = ux_conn_test,
    .conn_close = ux_conn_close,
    .mem_reg = ux_mem_reg,
    .mem_dereg = ux_mem_dereg,
    .isend = ux_isend,
    .irecv = ux_irecv,
    .test = ux_test,
    .progress = ux_progress,
    .ep_fd = ux_ep_fd,
    .coll = NULL,
};
