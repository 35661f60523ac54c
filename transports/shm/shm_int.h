/* SPDX-License-Identifier: BSD-3-Clause */
/* cohort shared-memory transport, private to shm*.c: the constants, the layouts shared with the
 * peers (address blob, segment header, slot control block), the plugin's objects (context,
 * endpoint, connection, request), the small inline helpers of the hot paths (request queues,
 * sides, the wake-up fast paths) and the functions that the plugin entry (shm.c), the
 * connections and handshake (shm_conn.c), the data path (shm_data.c) and the wake-up
 * (shm_wake.c) call across files. The design is described at the top of shm.c.
 */
#ifndef COHORT_SHM_INT_H
#define COHORT_SHM_INT_H

#include <cohort/plugin.h>
#include "transports/common/kit_req.h"

#include "coll.h"
#include "ring.h"

#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

#define SUBSYS "shm"
#define SHM_PLUGIN_VERSION COHORT_VERSION_STRING   /* the package's (configure) */
#define SHM_ADDR_MAGIC 0x53484d41u          /* "SHMA" */
#define SHM_SEG_MAGIC 0x636f686f7274534dull  /* "cohortSM" */
#define SHM_LAYOUT_VERSION 5u                /* 5: the handshake's MACs in the kit's form */
#define SHM_PAGE ((size_t)4096)
#define SHM_MIN_SLOT ((long)64 << 10)       /* COHORT_SHM_SEGMENT_SIZE: bytes per connection */
#define SHM_MAX_SLOT ((long)1 << 30)
#define SHM_RNDV_CHUNK ((size_t)1 << 20)     /* CMA bytes per progress call and connection */
#define SHM_LIVENESS_NS 2000000ull           /* peer pid checked at most every 2 ms... */
#define SHM_LIVENESS_CALLS 64u               /* ...and the clock read every 64th call (power of 2) */
#define SHM_REQ_CACHE 64                     /* request structs kept for reuse per connection */
#define SHM_ARM_CALLS 64u                    /* idle calls before a reader arms its wake-up... */
#define SHM_ARM_NS 20000ull                  /* ...and idle time: spinners never arm */
#define SHM_FIN_WAIT_MS 2000u                /* at close: the longest wait for the peers'
                                                histories, as the core's destroy waits for its
                                                tokens */
#define SHM_FIN_POLL_MS 10                   /* ... looking at least this often (a close or an
                                                exit wakes no one there) */
#define SHM_CLOCK_EVERY 16u                  /* idle calls between two looks at the clock (a
                                                read costs a good part of a short wait) */
#define SHM_NODEID_LEN 192
#define SHM_JOBID_LEN 64
#define SHM_SEGNAME_LEN 96
#define SHM_NONCE_LEN 16
#define SHM_MAC_LEN 32

enum { K_FRAG = 1, K_RNDV = 2 };
enum { ST_EMPTY = 0, ST_HELLO = 1 };
/* Per-rank slot state in the owner's header page (one byte each, from SHM_HDR_STATE_OFF): a
 * connector touches its slot only once the owner allocated it, so a full /dev/shm can never
 * turn the connector's first access into a SIGBUS, and an allocation that failed is seen at
 * once instead of after COHORT_TIMEOUT. Ranks beyond SHM_HDR_STATES use the slot's ready flag
 * alone (as layout 3 did). */
#define SHM_HDR_STATE_OFF 1024
#define SHM_HDR_STATES ((int)(4096 - SHM_HDR_STATE_OFF))
enum { SLOT_UNKNOWN = 0, SLOT_READY = 1, SLOT_FAILED = 2, SLOT_CLOSED = 3 };
enum { ACK_NONE = 0, ACK_ACCEPTED = 1 };
enum { SIDE_ACC = 0, SIDE_CONN = 1 };   /* direction d is written by side d */

/* ---- shared layouts ---------------------------------------------------------------------- */

/* The address blob (the core copies it; read with memcpy). Same node only: host byte order. */
typedef struct shm_addr {
    uint32_t magic, version;
    int32_t rank, nranks;
    int32_t pid, pad;
    uint64_t comm_id;
    uint64_t pidns;                  /* pid namespace inode: pids and CMA need the same one */
    char nodeid[SHM_NODEID_LEN];
    char job_id[SHM_JOBID_LEN];
    char segname[SHM_SEGNAME_LEN];
} shm_addr_t;

/* Segment header (first page of the owner's segment). */
typedef struct seg_hdr {
    uint64_t magic;
    uint32_t version, nranks;
    int32_t rank, pid;
    uint64_t comm_id;
    uint64_t slot_size, ncells, cell_size;
    uint64_t probe_addr;             /* an address in the owner's memory for the CMA probe */
    uint64_t probe_value;
    unsigned char nonce[SHM_NONCE_LEN];
    unsigned char mac[SHM_MAC_LEN];  /* owner's HMAC over job, comm, rank, pid, nonce (seg_frame) */
    uint64_t coll_off, coll_bytes;   /* rank 0: the collective area (coll.c); 0 bytes: none */
} seg_hdr_t;

typedef struct slot_ctl {
    _Atomic uint32_t ready;          /* acceptor: slot allocated, accept(peer) called */
    _Atomic uint32_t state;          /* connector: ST_HELLO once the hello below is written */
    _Atomic uint32_t ack;            /* acceptor: ACK_ACCEPTED */
    _Atomic uint32_t closed[2];      /* [side]: that side closed or gave up the connection */
    _Atomic uint32_t cma_ok[2];      /* [d]: the receiver of direction d reads its sender by CMA */
    int32_t conn_rank, conn_pid;
    uint32_t pad;
    uint64_t conn_probe_addr, conn_probe_value;
    unsigned char mac[SHM_MAC_LEN];
    char conn_segname[SHM_SEGNAME_LEN];  /* connector: its segment name (names its wake socket) */
    /* [side]: that side may sleep on its wake socket; the other side, after any store the
     * sleeper could wait for, loads it (seq_cst), clears it and sends a datagram. */
    struct { alignas(64) _Atomic uint32_t v; } armed[2];
} slot_ctl_t;

_Static_assert(sizeof(slot_ctl_t) <= SHM_PAGE, "slot control block too big");
_Static_assert(sizeof(seg_hdr_t) <= SHM_HDR_STATE_OFF, "segment header overlaps the slot states");

static inline _Atomic uint8_t *hdr_state(void *hdr, int rank)
{
    return (_Atomic uint8_t *)(void *)((unsigned char *)hdr + SHM_HDR_STATE_OFF) + rank;
}

/* The rings (control block, cells, protocol) are in ring.h. */
_Static_assert(SHM_RING_CTL_BYTES == SHM_PAGE, "a ring's control block is one page");

/* Slot layout: [slot_ctl page][dir 0 ring][dir 1 ring], a ring = [ctl page][ncells cells]. */
static inline size_t dir_bytes(uint64_t ncells) { return shm_ring_bytes(ncells); }

/* ---- objects ----------------------------------------------------------------------------- */

struct shm_ep;
struct shm_conn;

typedef struct shm_ctx {
    const cohort_host_v1_t *host;
    char nodeid[SHM_NODEID_LEN];
    uint64_t pidns;
    int cma_self;                    /* process_vm_readv works at all here */
} shm_ctx_t;

enum { C_CONNECTING = 1, C_READY, C_FAILED };

typedef struct shm_req {
    struct shm_conn *conn;
    struct shm_req *next;            /* send queue / recv queue / rndv-wait queue */
    struct shm_req *anext, *aprev;   /* conn->all */
    int is_send;
    char *buf;
    size_t len, off;
    uint64_t tag;
    size_t nbytes;
    int done;
    int started;                     /* send: first cell written; recv: message matched */
    int rndv;
    uint64_t seq;                    /* rendezvous: number the sender gave it */
    uint64_t raddr;                  /* receive of a rendezvous: the sender's address */
    size_t rlen;                     /* receive: length of the matched message */
    cohort_status_t status;
    char *errmsg;
} shm_req_t;

typedef struct rq { shm_req_t *h, *t; } rq_t;

typedef struct shm_conn {
    struct shm_ep *ep;
    struct shm_conn *next, *prev;
    int peer;
    int connector;                   /* 1: we called connect (we are SIDE_CONN) */
    int state;
    cohort_status_t err;
    char errmsg[512];
    /* connector: the acceptor's segment */
    shm_addr_t paddr;
    void *hdr_map;                   /* connector's own mapping of the acceptor's header page */
    /* both */
    unsigned char *slot;             /* mapping of the slot */
    size_t slot_size;
    uint64_t ncells;
    slot_ctl_t *ctl;
    shm_ring_t tx, rx;               /* we produce into tx and consume from rx */
    int peer_pid;
    int pidfd;
    uint64_t next_live_check;
    unsigned live_calls;             /* shm_check_peer_alive calls: the clock is read every 64th */
    int tx_cma;                      /* the receiver of our sends can read us by CMA */
    int rx_cma;                      /* we can read the peer by CMA */
    rq_t sendq;                      /* sends not yet fully in the ring, in order */
    rq_t rndvq;                      /* rendezvous sends waiting for rdone, in order */
    rq_t recvq;                      /* posted receives, in order */
    uint64_t rndv_sent;
    uint64_t rndv_done_local;        /* receiver: rendezvous messages finished (published) */
    size_t discard;                  /* receiver: fragment bytes of a mismatched message to skip */
    shm_req_t *all;
    kit_pool_t reqs;                 /* finished request structs kept for reuse, at most
                                      * SHM_REQ_CACHE; drained by conn_free. No lock: the
                                      * thread driving the endpoint owns its conns (plugin.h) */
    int peer_closed_seen;
    struct sockaddr_un peer_sa;      /* the peer endpoint's wake socket */
    socklen_t peer_salen;            /* 0: not known yet */
    void *coll_map;                  /* connector to rank 0: its collective area */
    size_t coll_len;
} shm_conn_t;

typedef struct shm_ep {
    shm_ctx_t *ctx;
    const cohort_host_v1_t *host;
    int rank, nranks;
    uint64_t comm_id;
    char job_id[SHM_JOBID_LEN];
    char segname[SHM_SEGNAME_LEN];
    size_t slot_size;
    uint64_t ncells;
    size_t eager;
    int cma_allowed;                 /* COHORT_SHM_CMA != 0 and CMA works in this process */
    int map_allowed;                 /* COHORT_SHM_MAP != 0 */
    int stream;                      /* COHORT_SHM_STREAM */
    /* our own segment (created at the first accept) */
    int segfd;
    int linked;
    seg_hdr_t *hdr;
    size_t seg_size;
    uint64_t probe_value;
    unsigned char nonce[SHM_NONCE_LEN];
    int naccepts_pending;            /* accepted conns still in their handshake */
    shm_conn_t *conns;
    /* wake-up (ep_fd): see shm_ep_after() */
    int wfd;                         /* our datagram socket (abstract namespace), -1: none */
    struct sockaddr_un self_sa;
    socklen_t self_salen;
    int kicked;                      /* we sent ourselves a datagram not drained yet */
    int armed;                       /* our armed flags are set in every ready conn */
    uint64_t idle;                   /* consecutive calls in which nothing moved */
    uint64_t idle_since;             /* when idle reached SHM_ARM_CALLS */
    uint64_t nevents;                /* bumped whenever something moved */
    int done_since_progress;         /* a request completed outside its own test() */
    shm_req_t *testing;              /* the request shm_test is testing */
    /* node collectives (coll.c): the area is rank 0's, mapped by rank 0 here or by its conn */
    size_t coll_round;               /* rank 0: COHORT_SHM_COLL_CHUNK rounded; 0: none */
    void *coll_area;                 /* rank 0: its own mapping of the area */
    size_t coll_len;
    shm_coll_t *coll;                /* created at the first collective */
    shm_conn_t **by_peer;            /* conns by rank, built with coll */
    int coll_gone;                   /* a conn carrying the area was closed */
    int fin_done;                    /* ep_finish ran (at the first close call) */
    cohort_status_t fin_st;          /* its status, ep_close's */
} shm_ep_t;

/* ---- inline helpers (request queues; sides and wake-up fast paths, see shm_wake.c) ------- */

KIT_FIFO(shm_q, shm_req_t, next);
KIT_LIST(shm_all, shm_req_t, anext, aprev);

static inline void rq_push(rq_t *q, shm_req_t *r)
{
    shm_q_push(&q->h, &q->t, r);
}

static inline shm_req_t *rq_pop(rq_t *q)
{
    return shm_q_pop(&q->h, &q->t);
}

static inline int conn_has_work(const shm_conn_t *c)
{
    return c->sendq.h || c->rndvq.h || c->recvq.h || c->state == C_CONNECTING;
}

static inline int peer_side(const shm_conn_t *c) { return c->connector ? SIDE_ACC : SIDE_CONN; }
static inline int my_side(const shm_conn_t *c) { return c->connector ? SIDE_CONN : SIDE_ACC; }

void shm_wake_peer_slow(shm_conn_t *c);   /* shm_wake.c (noinline) */

/* After a seq_cst store the peer may be waiting for. One load when the peer is not asleep. */
static inline void wake_peer(shm_conn_t *c)
{
    if (atomic_load_explicit(&c->ctl->armed[peer_side(c)].v, memory_order_seq_cst))
        shm_wake_peer_slow(c);
}

void shm_ep_kick_slow(shm_ep_t *ep);   /* shm_wake.c (noinline) */

/* Makes ep_fd readable (until the next drain). */
static inline void ep_kick(shm_ep_t *ep)
{
    if (!ep->kicked) shm_ep_kick_slow(ep);
}

/* ---- functions called across files ------------------------------------------------------- */

/* shm_conn.c: connections and handshake */
uint32_t shm_fnv32(const char *s);
int shm_pid_gone(int pidfd, int pid);
void shm_conn_fail(shm_conn_t *c, cohort_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int shm_check_peer_alive(shm_conn_t *c, int force);
void shm_ep_unlink(shm_ep_t *ep);
cohort_status_t shm_ep_create_segment(shm_ep_t *ep);
void shm_conn_setup_dirs(shm_conn_t *c);
void shm_ep_maybe_unlink(shm_ep_t *ep);
void shm_connector_step(shm_conn_t *c);
void shm_acceptor_step(shm_conn_t *c);

/* shm_data.c: requests, single copy, the data path */
int shm_cma_read(int pid, void *local, uint64_t raddr, size_t len);
void shm_req_unlink_all(shm_req_t *r);
void shm_req_finish(shm_req_t *r, cohort_status_t st);
void shm_conn_progress(shm_conn_t *c);

/* shm_wake.c: sleeping and waking up */
void shm_wake_name(struct sockaddr_un *sa, socklen_t *len, const char *segname);
int shm_ep_drain(shm_ep_t *ep);
void shm_ep_disarm(shm_ep_t *ep);
void shm_ep_arm(shm_ep_t *ep);
void shm_ep_after(shm_ep_t *ep, uint64_t ev0);

#endif
