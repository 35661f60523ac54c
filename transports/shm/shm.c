/* SPDX-License-Identifier: BSD-3-Clause */
/* cohort shared-memory transport (libcohort-shm.so): point-to-point within one node.
 *
 * Knows only <cohort/plugin.h>: logging, errors, settings and the job's HMAC come from the host
 * table. Nothing blocks; work happens in progress()/test()/conn_test().
 *
 * Segments and connections
 *   Every endpoint publishes the NAME of a POSIX shm segment (/cohort-<jobhash>-<comm>-<rank>-
 *   <pid>-<n>) but creates it only at its first accept(): all the memory of a connection lives
 *   in the ACCEPTOR's segment, in the slot of the connecting rank, so the connector has no
 *   segment of its own and nobody ever maps two segments for one pair. The segment is sized for
 *   nranks slots (ftruncate: sparse on tmpfs); accept(peer) fallocates that peer's slot (so a
 *   full /dev/shm is a clean ENOSPC error, never a SIGBUS later) and marks it ready.
 *   connect() is one shm_open+mmap of the acceptor's header and our slot, retried from
 *   conn_test while the segment or the slot does not exist yet (accept not called yet).
 *   Handshake in the slot: the connector writes a hello (rank, pid, CMA probe address, HMAC from
 *   host->auth over job id, comm id, both ranks, its pid and the segment's nonce) and sets
 *   state=HELLO; the acceptor checks it (a bad hello is refused with a WARN line and the slot is
 *   reset), probes CMA towards the connector, and sets ack=ACCEPTED. The segment header carries
 *   the owner's HMAC too, so a connector cannot be fooled by a segment of another job.
 * Unlinking (no leftovers in /dev/shm)
 *   The owner shm_unlink()s its segment name as soon as every accept() posted on the endpoint so
 *   far has completed its handshake (the core posts all connect/accept calls of a communicator
 *   in one loop, so nobody needs the name afterwards); ep_close unlinks it if still linked. So
 *   once a communicator is connected nothing is left in /dev/shm whatever happens next (exit,
 *   abort, SIGKILL). The window left: a rank killed between its accept() and the end of the
 *   handshakes; then its connectors, which watch its pid, unlink the segment when they see it
 *   die, so only a set-up in which the owner AND all its connectors are killed leaves it
 *   behind. Consequence of the early unlink: accept() calls made on an endpoint AFTER
 *   all earlier accepts completed cannot be served (the connector times out at shm_open).
 * Data path (per direction: one single-producer/single-consumer ring of fixed cells)
 *   cell = 64-byte header {tag, msg len, fragment offset, fragment len, kind, addr, seq} + up to
 *   8128 bytes payload (8 KiB cells: two pages, big enough that a 64 KiB eager message is 9
 *   cells, small enough that a ring of 1 MiB per connection holds 60+ of them).
 *   - messages <= eager limit (64 KiB), or any size when CMA is not permitted: copied in as
 *     fragments through the ring and copied out into the posted receive (the ring doubles as the
 *     staging area of the copy-in/copy-out fallback; a sender whose message does not fit waits
 *     for space, bounded work per call).
 *   - larger messages with CMA: one RNDV cell {tag, len, sender address}; the receiver, once its
 *     matching irecv is at the head, process_vm_readv()s straight into the user buffer, at most
 *     1 MiB per call, then bumps the direction's rdone counter, which completes the sender's
 *     request (rendezvous sends complete in order, so a counter is enough: no ack cells, no
 *     ring space needed for acks).
 *   head/tail/rdone are C11 atomics on their own cache lines, release on publish, acquire on read.
 * Peer loss: each side records its pid; a conn with pending work polls a pidfd of the peer (or
 *   kill(pid, 0) without pidfd) at most every 2 ms, the clock being read every 64th call only;
 *   conn_close/ep_close set a closed flag in the slot that the peer sees at once.
 * Sleeping (ep_fd): each endpoint owns an abstract-namespace UNIX datagram socket. A reader
 *   that has been idle for 64 calls and 20 us arms a per-direction flag in the slot (seq_cst)
 *   and re-checks once; a writer, after each publish the reader may wait for (cells, freed
 *   space, rdone, closed), loads the flag and, if armed, clears it and sends one datagram. So a
 *   spinning reader costs writers one load per publish, and a sleeping one is woken by the
 *   kernel. Dead peers cannot wake anyone: the core's 2 ms poll cap bounds that. Details at the
 *   "wake-up" section below.
 * Node collectives (coll.c, the ABI 1.1 collective table): rank 0's segment carries, after the
 *   slots, a collective area of (nranks + 1) x 4 rounds of COHORT_SHM_COLL_CHUNK bytes (rank 0's
 *   value; its header says where and how big), fallocated at creation and mapped by every
 *   connector of rank 0, so it is unlinked with the segment. colls() offers every collective
 *   once each peer has a ready connection; the core uses them only if all ranks agree. The
 *   collective's waits take part in the same arming as the connections (ep_arm/ep_disarm), and
 *   a waited-for peer is checked through its connection (pidfd, closed flag). At the endpoint's
 *   first close call (cohort_comm_destroy closes the connections before the endpoint, and the
 *   one to rank 0 takes the area with it), the ranks compare what they ran (shm_coll_finish: a
 *   small broadcast's root waits for no one, so roots that disagreed on the last call are seen
 *   only there), waiting up to SHM_FIN_WAIT_MS for peers that are still there and have not got
 *   as far; a difference is ep_close's COHORT_ERR_MISMATCH.
 * Not thread-safe: the core serialises calls per endpoint.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <cohort/plugin.h>
#include "transports/common/kit_bytes.h"

#include "coll.h"
#include "ring.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdalign.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define SHM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SHM_ASAN 1
#endif
#endif
#ifdef SHM_ASAN
#include <sanitizer/asan_interface.h>
#define SHM_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define SHM_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define SHM_POISON(p, n) ((void)(p), (void)(n))
#define SHM_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define SUBSYS "shm"
#define SHM_PLUGIN_VERSION COHORT_VERSION_STRING   /* the package's (configure) */
#define SHM_ADDR_MAGIC 0x53484d41u          /* "SHMA" */
#define SHM_SEG_MAGIC 0x636f686f7274534dull  /* "cohortSM" */
#define SHM_LAYOUT_VERSION 4u
#define SHM_PAGE ((size_t)4096)
#define SHM_DEFAULT_SLOT ((long)1 << 20)     /* COHORT_SHM_SEGMENT_SIZE: bytes per connection */
#define SHM_MIN_SLOT ((long)64 << 10)
#define SHM_MAX_SLOT ((long)1 << 30)
#define SHM_DEFAULT_EAGER ((long)64 << 10)
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
    unsigned char mac[SHM_MAC_LEN];  /* owner's HMAC over job, comm, rank, pid, nonce */
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

static _Atomic uint8_t *hdr_state(void *hdr, int rank)
{
    return (_Atomic uint8_t *)(void *)((unsigned char *)hdr + SHM_HDR_STATE_OFF) + rank;
}

/* The rings (control block, cells, protocol) are in ring.h. */
_Static_assert(SHM_RING_CTL_BYTES == SHM_PAGE, "a ring's control block is one page");

/* Slot layout: [slot_ctl page][dir 0 ring][dir 1 ring], a ring = [ctl page][ncells cells]. */
static size_t dir_bytes(uint64_t ncells) { return shm_ring_bytes(ncells); }

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
    unsigned live_calls;             /* check_peer_alive calls: the clock is read every 64th */
    int tx_cma;                      /* the receiver of our sends can read us by CMA */
    int rx_cma;                      /* we can read the peer by CMA */
    rq_t sendq;                      /* sends not yet fully in the ring, in order */
    rq_t rndvq;                      /* rendezvous sends waiting for rdone, in order */
    rq_t recvq;                      /* posted receives, in order */
    uint64_t rndv_sent;
    uint64_t rndv_done_local;        /* receiver: rendezvous messages finished (published) */
    size_t discard;                  /* receiver: fragment bytes of a mismatched message to skip */
    shm_req_t *all;
    shm_req_t *free_reqs;            /* finished request structs kept for reuse (via ->next)... */
    int nfree_reqs;                  /* ...at most SHM_REQ_CACHE; freed by conn_free */
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
    /* wake-up (ep_fd): see ep_after() */
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

/* ---- small helpers ----------------------------------------------------------------------- */

static int ct_equal(const unsigned char *a, const unsigned char *b, size_t n)
{
    unsigned char d = 0;
    for (size_t i = 0; i < n; i++) d |= (unsigned char)(a[i] ^ b[i]);
    return d == 0;
}

static uint32_t fnv32(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

static void rq_push(rq_t *q, shm_req_t *r)
{
    r->next = NULL;
    if (q->t) q->t->next = r;
    else q->h = r;
    q->t = r;
}

static shm_req_t *rq_pop(rq_t *q)
{
    shm_req_t *r = q->h;
    if (!r) return NULL;
    q->h = r->next;
    if (!q->h) q->t = NULL;
    r->next = NULL;
    return r;
}

static int read_small_file(const char *path, char *buf, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, len - 1);
    close(fd);
    if (n < 0) return -1;
    buf[n] = 0;
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' ')) buf[--n] = 0;
    return 0;
}

static int pidfd_open_(int pid)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0);
#else
    (void)pid;
    errno = ENOSYS;
    return -1;
#endif
}

/* 1 if the process is gone (exited, even as a zombie not yet reaped), else 0. */
static int pid_gone(int pidfd, int pid)
{
    if (pidfd >= 0) {
        struct pollfd p = { pidfd, POLLIN, 0 };
        return poll(&p, 1, 0) > 0;
    }
    return pid > 0 && kill(pid, 0) < 0 && errno == ESRCH;
}

/* Reads len bytes at raddr of process pid into local; 0, or -errno. */
static int cma_read(int pid, void *local, uint64_t raddr, size_t len)
{
    size_t done = 0;
    while (done < len) {
        struct iovec l = { (char *)local + done, len - done };
        struct iovec r = { (void *)(uintptr_t)(raddr + done), len - done };
        ssize_t n = process_vm_readv(pid, &l, 1, &r, 1, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        if (n == 0) return -EFAULT;
        done += (size_t)n;
    }
    return 0;
}

/* MAC of the segment header (owner) and of a hello (connector). */
static void seg_mac(const cohort_host_v1_t *host, const char *job, uint64_t comm, int rank,
                    int pid, const unsigned char *nonce, unsigned char out[SHM_MAC_LEN])
{
    unsigned char in[16 + SHM_JOBID_LEN + 16 + SHM_NONCE_LEN];
    memset(in, 0, sizeof in);
    memcpy(in, "cohort-shm-seg1", 16);
    strncpy((char *)in + 16, job, SHM_JOBID_LEN - 1);
    kit_put_le64(in + 16 + SHM_JOBID_LEN, comm);
    kit_put_le64(in + 24 + SHM_JOBID_LEN, ((uint64_t)(uint32_t)rank << 32) | (uint32_t)pid);
    memcpy(in + 32 + SHM_JOBID_LEN, nonce, SHM_NONCE_LEN);
    host->auth(in, sizeof in, out);
}

static void hello_mac(const cohort_host_v1_t *host, const char *job, uint64_t comm, int acc,
                      int con, int pid, const unsigned char *nonce, unsigned char out[SHM_MAC_LEN])
{
    unsigned char in[16 + SHM_JOBID_LEN + 24 + SHM_NONCE_LEN];
    memset(in, 0, sizeof in);
    memcpy(in, "cohort-shm-helo", 16);
    strncpy((char *)in + 16, job, SHM_JOBID_LEN - 1);
    kit_put_le64(in + 16 + SHM_JOBID_LEN, comm);
    kit_put_le64(in + 24 + SHM_JOBID_LEN, ((uint64_t)(uint32_t)acc << 32) | (uint32_t)con);
    kit_put_le64(in + 32 + SHM_JOBID_LEN, (uint64_t)(uint32_t)pid);
    memcpy(in + 40 + SHM_JOBID_LEN, nonce, SHM_NONCE_LEN);
    host->auth(in, sizeof in, out);
}

static void make_nonce(unsigned char *nonce)
{
    if (getrandom(nonce, SHM_NONCE_LEN, GRND_NONBLOCK) == (ssize_t)SHM_NONCE_LEN) return;
    static _Atomic uint64_t counter;
    uint64_t t = shm_now_ns(), c = atomic_fetch_add(&counter, 1) + 1;
    kit_put_le64(nonce, t ^ ((uint64_t)getpid() << 32));
    kit_put_le64(nonce + 8, c);
}

/* ---- requests ---------------------------------------------------------------------------- */

static void req_unlink_all(shm_req_t *r)
{
    shm_conn_t *c = r->conn;
    if (r->aprev) r->aprev->anext = r->anext;
    else c->all = r->anext;
    if (r->anext) r->anext->aprev = r->aprev;
    free(r->errmsg);
    if (c->nfree_reqs < SHM_REQ_CACHE) {
        r->next = c->free_reqs;
        c->free_reqs = r;
        c->nfree_reqs++;
        SHM_POISON(r, sizeof *r);    /* under ASan a stale request pointer still faults */
    } else {
        free(r);
    }
}

/* A zeroed request (as calloc gives), from the conn's cache when it has one. */
static shm_req_t *req_alloc(shm_conn_t *c)
{
    shm_req_t *r = c->free_reqs;
    if (!r) return calloc(1, sizeof *r);
    SHM_UNPOISON(r, sizeof *r);
    c->free_reqs = r->next;
    c->nfree_reqs--;
    memset(r, 0, sizeof *r);
    return r;
}

static void req_cache_free(shm_conn_t *c)
{
    while (c->free_reqs) {
        shm_req_t *r = c->free_reqs;
        SHM_UNPOISON(r, sizeof *r);
        c->free_reqs = r->next;
        free(r);
    }
    c->nfree_reqs = 0;
}

static void req_finish(shm_req_t *r, cohort_status_t st)
{
    if (r->done) return;
    r->done = 1;
    r->status = st;
    shm_ep_t *ep = r->conn->ep;
    ep->nevents++;
    if (r != ep->testing) ep->done_since_progress = 1;
}

/* ---- wake-up ------------------------------------------------------------------------------
 * Eventcount over a datagram socket per endpoint. A reader idle for SHM_ARM_CALLS calls and
 * SHM_ARM_NS drains its socket, sets armed[its side] (seq_cst) in every ready conn, fences, and
 * re-checks every conn once (conn_movable); if something can move it kicks itself. A writer,
 * after every store the other side could wait for (ring head, ring tail, rdone, closed), which
 * it makes seq_cst, loads armed[other side]; if set it clears it (exchange) and sends one byte
 * to the other's socket. While not armed the socket is kept readable (a datagram to ourselves,
 * sent once and kept until we arm), so a caller that sleeps on ep_fd early just comes back: the
 * fd is readable whenever progress() could advance something. A dead peer sends nothing: the
 * core's poll cap (2 ms) bounds that. */

static int conn_has_work(const shm_conn_t *c)
{
    return c->sendq.h || c->rndvq.h || c->recvq.h || c->state == C_CONNECTING;
}

static int peer_side(const shm_conn_t *c) { return c->connector ? SIDE_ACC : SIDE_CONN; }
static int my_side(const shm_conn_t *c) { return c->connector ? SIDE_CONN : SIDE_ACC; }

static void wake_name(struct sockaddr_un *sa, socklen_t *len, const char *segname)
{
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    /* abstract namespace: sun_path[0] = 0, nothing on the filesystem */
    int n = snprintf(sa->sun_path + 1, sizeof sa->sun_path - 1, "cohort-wake%s", segname);
    if (n < 0 || (size_t)n >= sizeof sa->sun_path - 1) n = (int)sizeof sa->sun_path - 2;
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

__attribute__((noinline)) static void wake_peer_slow(shm_conn_t *c)
{
    if (!atomic_exchange_explicit(&c->ctl->armed[peer_side(c)].v, 0, memory_order_seq_cst))
        return;   /* someone else (the peer disarming) got there first */
    if (c->ep->wfd < 0 || !c->peer_salen) return;
    char b = 1;
    /* EAGAIN/ENOBUFS: its queue is full, so it is readable already; ECONNREFUSED: gone */
    (void)sendto(c->ep->wfd, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL,
                 (const struct sockaddr *)&c->peer_sa, c->peer_salen);
}

/* After a seq_cst store the peer may be waiting for. One load when the peer is not asleep. */
static inline void wake_peer(shm_conn_t *c)
{
    if (atomic_load_explicit(&c->ctl->armed[peer_side(c)].v, memory_order_seq_cst))
        wake_peer_slow(c);
}

__attribute__((noinline)) static void ep_kick_slow(shm_ep_t *ep)
{
    char b = 0;
    ep->kicked = 1;
    (void)sendto(ep->wfd, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL,
                 (const struct sockaddr *)&ep->self_sa, ep->self_salen);
}

/* Makes ep_fd readable (until the next drain). */
static inline void ep_kick(shm_ep_t *ep)
{
    if (!ep->kicked) ep_kick_slow(ep);
}

/* Empties the socket; returns the number of datagrams read. */
static int ep_drain(shm_ep_t *ep)
{
    char b[16];
    int n = 0;
    for (;;) {
        ssize_t r = recv(ep->wfd, b, sizeof b, MSG_DONTWAIT);
        if (r >= 0) {
            n++;
            continue;
        }
        if (errno == EINTR) continue;
        break;
    }
    ep->kicked = 0;
    return n;
}

static void ep_disarm(shm_ep_t *ep)
{
    for (shm_conn_t *c = ep->conns; c; c = c->next)
        if (c->state == C_READY)
            atomic_store_explicit(&c->ctl->armed[my_side(c)].v, 0, memory_order_relaxed);
    if (ep->coll) shm_coll_disarm(ep->coll);
    ep->armed = 0;
}

/* Whether progress() could advance something on c now (after the arming fence). */
static int conn_movable(shm_conn_t *c)
{
    if (c->state == C_CONNECTING) return 1;
    if (c->state != C_READY) return 0;
    if (atomic_load_explicit(&c->ctl->closed[peer_side(c)], memory_order_acquire))
        return conn_has_work(c);
    if (c->recvq.h && c->recvq.h->started && c->recvq.h->rndv) return 1;
    if ((c->recvq.h || c->discard) && shm_ring_cons_count(&c->rx)) return 1;
    if (c->sendq.h && shm_ring_prod_space(&c->tx)) return 1;
    if (c->rndvq.h &&
        atomic_load_explicit(&c->tx.ctl->rdone, memory_order_acquire) >= c->rndvq.h->seq)
        return 1;
    return 0;
}

static void ep_arm(shm_ep_t *ep)
{
    for (shm_conn_t *c = ep->conns; c; c = c->next)
        if (c->state == C_CONNECTING) {   /* a handshake is not woken up: keep polling */
            ep_kick(ep);
            return;
        }
    ep_drain(ep);
    for (shm_conn_t *c = ep->conns; c; c = c->next)
        if (c->state == C_READY)
            atomic_store_explicit(&c->ctl->armed[my_side(c)].v, 1, memory_order_seq_cst);
    if (shm_coll_active(ep->coll)) shm_coll_arm(ep->coll);
    atomic_thread_fence(memory_order_seq_cst);
    ep->armed = 1;
    if (shm_coll_active(ep->coll) && shm_coll_movable(ep->coll)) {
        ep_kick(ep);
        return;
    }
    for (shm_conn_t *c = ep->conns; c; c = c->next)
        if (conn_movable(c)) {
            ep_kick(ep);
            break;
        }
}

/* End of every call that made progress: ev0 is ep->nevents at its start. */
static void ep_after(shm_ep_t *ep, uint64_t ev0)
{
    if (ep->wfd < 0) return;
    if (ep->nevents != ev0) {
        ep->idle = 0;
        if (ep->armed) ep_disarm(ep);
        ep_kick(ep);
        return;
    }
    if (ep->armed) return;
    if (++ep->idle < SHM_ARM_CALLS || ep->done_since_progress ||
        (ep->idle - SHM_ARM_CALLS) % SHM_CLOCK_EVERY) {
        ep_kick(ep);
        return;
    }
    uint64_t t = shm_now_ns();
    if (ep->idle == SHM_ARM_CALLS) ep->idle_since = t;
    if (t - ep->idle_since < SHM_ARM_NS) {
        ep_kick(ep);
        return;
    }
    ep_arm(ep);
}

static void req_fail_msg(shm_req_t *r, cohort_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void req_fail_msg(shm_req_t *r, cohort_status_t st, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    free(r->errmsg);
    r->errmsg = strdup(buf);
    req_finish(r, st);
}

/* ---- connection failure ------------------------------------------------------------------ */

static void conn_fail(shm_conn_t *c, cohort_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void conn_fail(shm_conn_t *c, cohort_status_t st, const char *fmt, ...)
{
    if (c->state == C_FAILED) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->errmsg, sizeof c->errmsg, fmt, ap);
    va_end(ap);
    c->state = C_FAILED;
    c->err = st;
    c->ep->host->log(COHORT_LOG_INFO, SUBSYS, "%s", c->errmsg);
    /* Tell the peer we gave up, so it does not wait for us. */
    c->ep->nevents++;
    if (c->ctl) {
        atomic_store_explicit(&c->ctl->closed[c->connector ? SIDE_CONN : SIDE_ACC], 1,
                              memory_order_seq_cst);
        wake_peer(c);
    }
    for (shm_req_t *r = c->all; r; r = r->anext) req_finish(r, st);
    c->sendq.h = c->sendq.t = NULL;
    c->rndvq.h = c->rndvq.t = NULL;
    c->recvq.h = c->recvq.t = NULL;
}

/* Peer liveness, rate-limited. Returns 1 if the conn failed. */
static int check_peer_alive(shm_conn_t *c, int force)
{
    if (c->state == C_FAILED) return 1;
    if (c->peer_pid <= 0) return 0;
    /* the clock costs more than the rest of a progress call: read it every 64th call only, so
     * the check runs after max(2 ms, 64 calls); idle ranks poll at least every 2 ms (the core's
     * cap), so a dead peer is still seen within ~130 ms */
    if (!force && (++c->live_calls & (SHM_LIVENESS_CALLS - 1))) return 0;
    uint64_t t = shm_now_ns();
    if (!force && t < c->next_live_check) return 0;
    c->next_live_check = t + SHM_LIVENESS_NS;
    if (pid_gone(c->pidfd, c->peer_pid)) {
        /* the owner of the segment died: if it had not unlinked it yet (killed during set-up),
         * nobody else will */
        if (c->connector) (void)shm_unlink(c->paddr.segname);
        conn_fail(c, COHORT_ERR_PEER_LOST, "shm: rank %d (pid %d) on this node exited or was "
                  "killed while rank %d was still using the connection (segment %s); see that "
                  "rank's output for why it died", c->peer, c->peer_pid, c->ep->rank,
                  c->connector ? c->paddr.segname : c->ep->segname);
        return 1;
    }
    return 0;
}

/* ---- our own segment --------------------------------------------------------------------- */

static void ep_unlink(shm_ep_t *ep)
{
    if (!ep->linked) return;
    if (shm_unlink(ep->segname) < 0 && errno != ENOENT)
        ep->host->log(COHORT_LOG_WARN, SUBSYS, "shm: shm_unlink(%s) failed: %s; remove it by "
                      "hand from /dev/shm", ep->segname, strerror(errno));
    ep->linked = 0;
}

static cohort_status_t ep_create_segment(shm_ep_t *ep)
{
    const cohort_host_v1_t *host = ep->host;
    ep->seg_size = SHM_PAGE + (size_t)ep->nranks * ep->slot_size;
    size_t coll_off = ep->seg_size, coll_bytes = 0;
    if (ep->rank == 0 && ep->nranks > 1 && ep->coll_round) {
        coll_bytes = shm_coll_area_bytes(ep->nranks, ep->coll_round);
        ep->seg_size += coll_bytes;
    }
    int fd = shm_open(ep->segname, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return host->error(COHORT_ERR_SYSTEM, "shm: rank %d: shm_open(%s) failed: %s; is "
                           "/dev/shm mounted and writable (a stale segment of the same name "
                           "from a crashed run can be removed from /dev/shm)?", ep->rank,
                           ep->segname, strerror(errno));
    ep->linked = 1;
    ep->segfd = fd;
    if (ftruncate(fd, (off_t)ep->seg_size) < 0) {
        int e = errno;
        ep_unlink(ep);
        return host->error(COHORT_ERR_SYSTEM, "shm: rank %d: sizing segment %s to %zu bytes "
                           "failed: %s; df -h /dev/shm; raise its size or lower "
                           "COHORT_SHM_SEGMENT_SIZE", ep->rank, ep->segname, ep->seg_size,
                           strerror(e));
    }
    void *m = mmap(NULL, SHM_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        int e = errno;
        ep_unlink(ep);
        return host->error(COHORT_ERR_SYSTEM, "shm: rank %d: mmap of segment %s failed: %s",
                           ep->rank, ep->segname, strerror(e));
    }
    int rc = posix_fallocate(fd, 0, (off_t)SHM_PAGE);
    if (rc != 0) {
        munmap(m, SHM_PAGE);
        ep_unlink(ep);
        return host->error(COHORT_ERR_SYSTEM, "shm: rank %d: allocating segment %s failed: %s; "
                           "df -h /dev/shm; raise its size or lower COHORT_SHM_SEGMENT_SIZE",
                           ep->rank, ep->segname, strerror(rc));
    }
    if (coll_bytes) {
        rc = posix_fallocate(fd, (off_t)coll_off, (off_t)coll_bytes);
        void *area = rc ? MAP_FAILED : mmap(NULL, coll_bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
                                            fd, (off_t)coll_off);
        if (area == MAP_FAILED) {   /* run without node collectives, and say so */
            int e = rc ? rc : errno;
            host->log(COHORT_LOG_WARN, SUBSYS, "shm: rank %d: no node collectives: allocating "
                      "their %zu-byte area in segment %s failed: %s; collectives run over "
                      "point-to-point instead (df -h /dev/shm; raise its size, or lower "
                      "COHORT_SHM_COLL_CHUNK)", ep->rank, coll_bytes, ep->segname, strerror(e));
            coll_bytes = 0;
        } else {
            shm_coll_area_init(area, ep->nranks, ep->coll_round);
            ep->coll_area = area;
            ep->coll_len = coll_bytes;
        }
    }
    seg_hdr_t *h = m;
    memset(h, 0, sizeof *h);
    h->coll_off = coll_bytes ? coll_off : 0;
    h->coll_bytes = coll_bytes;
    h->version = SHM_LAYOUT_VERSION;
    h->nranks = (uint32_t)ep->nranks;
    h->rank = ep->rank;
    h->pid = getpid();
    h->comm_id = ep->comm_id;
    h->slot_size = ep->slot_size;
    h->ncells = ep->ncells;
    h->cell_size = SHM_CELL_SIZE;
    h->probe_addr = (uint64_t)(uintptr_t)&ep->probe_value;
    h->probe_value = ep->probe_value;
    memcpy(h->nonce, ep->nonce, SHM_NONCE_LEN);
    seg_mac(host, ep->job_id, ep->comm_id, ep->rank, h->pid, ep->nonce, h->mac);
    atomic_thread_fence(memory_order_release);
    h->magic = SHM_SEG_MAGIC;
    ep->hdr = h;
    return COHORT_SUCCESS;
}

static void conn_setup_dirs(shm_conn_t *c)
{
    unsigned char *d0 = c->slot + SHM_PAGE;
    unsigned char *d1 = d0 + dir_bytes(c->ncells);
    c->ctl = (slot_ctl_t *)(void *)c->slot;
    if (c->connector) {
        shm_ring_attach(&c->tx, d1, c->ncells);
        shm_ring_attach(&c->rx, d0, c->ncells);
    } else {
        shm_ring_attach(&c->tx, d0, c->ncells);
        shm_ring_attach(&c->rx, d1, c->ncells);
    }
}

/* ---- connection setup -------------------------------------------------------------------- */

static void ep_maybe_unlink(shm_ep_t *ep)
{
    if (ep->linked && ep->hdr && ep->naccepts_pending == 0) ep_unlink(ep);
}

static void conn_ready(shm_conn_t *c)
{
    c->state = C_READY;
    c->ep->nevents++;
    c->tx_cma = (int)atomic_load_explicit(&c->ctl->cma_ok[c->connector ? SIDE_CONN : SIDE_ACC],
                                          memory_order_acquire);
    c->rx_cma = (int)atomic_load_explicit(&c->ctl->cma_ok[c->connector ? SIDE_ACC : SIDE_CONN],
                                          memory_order_acquire);
    c->ep->host->log(COHORT_LOG_TRACE, SUBSYS, "shm: rank %d connected to rank %d (pid %d), "
                     "large messages %s", c->ep->rank, c->peer, c->peer_pid,
                     c->rx_cma ? "by CMA" : "by copy through the ring");
    if (!c->connector) {
        c->ep->naccepts_pending--;
        ep_maybe_unlink(c->ep);
    }
    if (c->pidfd < 0 && c->peer_pid > 0) c->pidfd = pidfd_open_(c->peer_pid);
}

/* Probes CMA towards pid at addr; returns 1 if it reads the expected value. */
static int cma_probe(shm_ep_t *ep, int pid, uint64_t addr, uint64_t expect, int peer)
{
    if (!ep->cma_allowed) return 0;
    uint64_t v = 0;
    int rc = cma_read(pid, &v, addr, sizeof v);
    if (rc == 0 && v == expect) return 1;
    static _Atomic int logged;
    if (!atomic_exchange(&logged, 1))
        ep->host->log(COHORT_LOG_INFO, SUBSYS, "shm: rank %d cannot read rank %d (pid %d) with "
                      "process_vm_readv (%s): large messages go by copy through shared memory "
                      "(check /proc/sys/kernel/yama/ptrace_scope, or the container's seccomp "
                      "profile and CAP_SYS_PTRACE)", ep->rank, peer, pid,
                      rc ? strerror(-rc) : "wrong value");
    return 0;
}

/* Connector, while the acceptor's segment exists but is not complete: an owner killed half-way
 * through creating it leaves it behind unless we remove it (checked at most every 2 ms). */
static void owner_gone_while_creating(shm_conn_t *c)
{
    uint64_t t = shm_now_ns();
    if (t < c->next_live_check) return;
    c->next_live_check = t + SHM_LIVENESS_NS;
    if (kill(c->paddr.pid, 0) == 0 || errno != ESRCH) return;
    (void)shm_unlink(c->paddr.segname);
    conn_fail(c, COHORT_ERR_PEER_LOST, "shm: rank %d (pid %d) died while creating its segment %s "
              "(removed it)", c->peer, c->paddr.pid, c->paddr.segname);
}

/* Connector: map the acceptor's header and our slot, write the hello, wait for the ack. */
static void connector_step(shm_conn_t *c)
{
    shm_ep_t *ep = c->ep;
    const cohort_host_v1_t *host = ep->host;
    if (!c->slot) {
        int fd = shm_open(c->paddr.segname, O_RDWR | O_CLOEXEC, 0);
        if (fd < 0) {
            if (errno == ENOENT) {
                /* not created yet (accept not called) or the acceptor is gone */
                uint64_t t = shm_now_ns();
                if (t >= c->next_live_check) {
                    c->next_live_check = t + SHM_LIVENESS_NS;
                    if (kill(c->paddr.pid, 0) < 0 && errno == ESRCH)
                        conn_fail(c, COHORT_ERR_PEER_LOST, "shm: rank %d (pid %d) exited before "
                                  "rank %d could connect to it (segment %s)", c->peer,
                                  c->paddr.pid, ep->rank, c->paddr.segname);
                }
                return;
            }
            conn_fail(c, COHORT_ERR_SYSTEM, "shm: rank %d: shm_open(%s) of rank %d's segment "
                      "failed: %s; do both ranks see the same /dev/shm (containers: "
                      "--ipc=host)?", ep->rank, c->paddr.segname, c->peer, strerror(errno));
            return;
        }
        struct stat stt;
        if (fstat(fd, &stt) < 0 || (size_t)stt.st_size < SHM_PAGE) {
            close(fd);
            owner_gone_while_creating(c);
            return;   /* being created right now */
        }
        seg_hdr_t *h = mmap(NULL, SHM_PAGE, PROT_READ, MAP_SHARED, fd, 0);
        if (h == MAP_FAILED) {
            int e = errno;
            close(fd);
            conn_fail(c, COHORT_ERR_SYSTEM, "shm: rank %d: mmap of rank %d's segment %s "
                      "failed: %s", ep->rank, c->peer, c->paddr.segname, strerror(e));
            return;
        }
        if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != SHM_SEG_MAGIC) {
            munmap(h, SHM_PAGE);
            close(fd);
            owner_gone_while_creating(c);
            return;   /* header not written yet */
        }
        unsigned char mac[SHM_MAC_LEN];
        seg_mac(host, ep->job_id, ep->comm_id, c->peer, c->paddr.pid, h->nonce, mac);
        size_t need = SHM_PAGE + (size_t)(c->peer > ep->rank ? c->peer : ep->rank + 1) *
                      (size_t)h->slot_size;
        if (h->version != SHM_LAYOUT_VERSION || h->comm_id != ep->comm_id ||
            h->rank != c->peer || h->pid != c->paddr.pid || h->cell_size != SHM_CELL_SIZE ||
            (int)h->nranks != ep->nranks || !ct_equal(mac, h->mac, SHM_MAC_LEN) ||
            h->slot_size < (uint64_t)SHM_MIN_SLOT || h->slot_size % SHM_PAGE ||
            h->ncells < 2 || (size_t)stt.st_size < need ||
            2 * dir_bytes(h->ncells) + SHM_PAGE > h->slot_size) {
            munmap(h, SHM_PAGE);
            close(fd);
            conn_fail(c, COHORT_ERR_TRANSPORT, "shm: rank %d: segment %s does not belong to "
                      "rank %d of this job and communicator (bad header or HMAC); a stale "
                      "segment or another job's? remove it from /dev/shm", ep->rank,
                      c->paddr.segname, c->peer);
            return;
        }
        c->slot_size = (size_t)h->slot_size;
        c->ncells = h->ncells;
        void *s = mmap(NULL, c->slot_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                       (off_t)(SHM_PAGE + (size_t)ep->rank * c->slot_size));
        int e = errno;
        if (s == MAP_FAILED) {
            close(fd);
            munmap(h, SHM_PAGE);
            conn_fail(c, COHORT_ERR_SYSTEM, "shm: rank %d: mmap of its slot in rank %d's "
                      "segment %s failed: %s", ep->rank, c->peer, c->paddr.segname,
                      strerror(e));
            return;
        }
        if (c->peer == 0 && h->coll_bytes) {
            size_t coff = SHM_PAGE + (size_t)ep->nranks * c->slot_size;
            size_t clen = (size_t)h->coll_bytes, round;
            void *area = MAP_FAILED;
            if (h->coll_off == coff && (size_t)stt.st_size >= coff + clen)
                area = mmap(NULL, clen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)coff);
            if (area == MAP_FAILED || shm_coll_area_check(area, clen, ep->nranks, &round)) {
                e = area == MAP_FAILED ? errno : EINVAL;
                close(fd);
                if (area != MAP_FAILED) munmap(area, clen);
                munmap(s, c->slot_size);
                munmap(h, SHM_PAGE);
                conn_fail(c, COHORT_ERR_TRANSPORT, "shm: rank %d: the collective area of rank "
                          "0's segment %s (%zu bytes at %llu) cannot be used: %s", ep->rank,
                          c->paddr.segname, clen, (unsigned long long)h->coll_off,
                          strerror(e));
                return;
            }
            c->coll_map = area;
            c->coll_len = clen;
        }
        close(fd);
        c->hdr_map = h;
        c->slot = s;
        conn_setup_dirs(c);
        c->peer_pid = c->paddr.pid;
        c->pidfd = pidfd_open_(c->peer_pid);
        wake_name(&c->peer_sa, &c->peer_salen, c->paddr.segname);
    }
    if (ep->rank < SHM_HDR_STATES) {
        uint8_t sst = atomic_load_explicit(hdr_state(c->hdr_map, ep->rank), memory_order_acquire);
        if (sst == SLOT_FAILED) {
            conn_fail(c, COHORT_ERR_SYSTEM, "shm: rank %d could not allocate the shared memory "
                      "for its connection with rank %d (segment %s): /dev/shm is probably full; "
                      "df -h /dev/shm, then raise its size (containers: --shm-size) or lower "
                      "COHORT_SHM_SEGMENT_SIZE", c->peer, ep->rank, c->paddr.segname);
            return;
        }
        if (sst == SLOT_CLOSED) {
            conn_fail(c, COHORT_ERR_PEER_LOST, "shm: rank %d closed its endpoint before "
                      "accepting rank %d (its communicator set-up failed: see its error)",
                      c->peer, ep->rank);
            return;
        }
        if (sst != SLOT_READY) {
            check_peer_alive(c, 0);
            return;   /* accept(us) not called yet: do not touch the slot */
        }
    }
    slot_ctl_t *ctl = c->ctl;
    if (atomic_load_explicit(&ctl->state, memory_order_acquire) == ST_EMPTY) {
        if (!atomic_load_explicit(&ctl->ready, memory_order_acquire)) {
            check_peer_alive(c, 0);
            return;   /* accept(us) not called yet */
        }
        seg_hdr_t *h = c->hdr_map;
        atomic_store_explicit(&ctl->cma_ok[SIDE_ACC],
                              (uint32_t)cma_probe(ep, c->peer_pid, h->probe_addr,
                                                  h->probe_value, c->peer),
                              memory_order_relaxed);
        ctl->conn_rank = ep->rank;
        ctl->conn_pid = getpid();
        ctl->conn_probe_addr = (uint64_t)(uintptr_t)&ep->probe_value;
        ctl->conn_probe_value = ep->probe_value;
        snprintf(ctl->conn_segname, sizeof ctl->conn_segname, "%s", ep->segname);
        hello_mac(host, ep->job_id, ep->comm_id, c->peer, ep->rank, ctl->conn_pid, h->nonce,
                  ctl->mac);
        atomic_store_explicit(&ctl->state, ST_HELLO, memory_order_release);
    }
    if (atomic_load_explicit(&ctl->ack, memory_order_acquire) == ACK_ACCEPTED) {
        conn_ready(c);
        return;
    }
    if (atomic_load_explicit(&ctl->closed[SIDE_ACC], memory_order_acquire)) {
        conn_fail(c, COHORT_ERR_PEER_LOST, "shm: rank %d closed its endpoint before accepting "
                  "rank %d (segment %s)", c->peer, ep->rank, c->paddr.segname);
        return;
    }
    check_peer_alive(c, 0);
}

/* Acceptor: check the hello in the slot. */
static void acceptor_step(shm_conn_t *c)
{
    shm_ep_t *ep = c->ep;
    slot_ctl_t *ctl = c->ctl;
    if (atomic_load_explicit(&ctl->state, memory_order_acquire) != ST_HELLO) return;
    unsigned char mac[SHM_MAC_LEN];
    hello_mac(ep->host, ep->job_id, ep->comm_id, ep->rank, c->peer, ctl->conn_pid, ep->nonce,
              mac);
    /* the connector's segment name (it names its wake socket) must be one of its names */
    char pfx[SHM_SEGNAME_LEN], cseg[SHM_SEGNAME_LEN];
    memcpy(cseg, ctl->conn_segname, sizeof cseg);
    cseg[sizeof cseg - 1] = 0;
    int pl = snprintf(pfx, sizeof pfx, "/cohort-%08x-%llx-%d-%d-", fnv32(ep->job_id),
                      (unsigned long long)ep->comm_id, c->peer, (int)ctl->conn_pid);
    if (ctl->conn_rank != c->peer || ctl->conn_pid <= 0 || !ct_equal(mac, ctl->mac, SHM_MAC_LEN) ||
        pl <= 0 || strncmp(cseg, pfx, (size_t)pl) != 0) {
        ep->host->log(COHORT_LOG_WARN, SUBSYS, "shm: rank %d refused a hello in the slot of "
                      "rank %d of segment %s (claims rank %d, pid %d): bad HMAC; another job "
                      "or a stray process?", ep->rank, c->peer, ep->segname,
                      (int)ctl->conn_rank, (int)ctl->conn_pid);
        atomic_store_explicit(&ctl->state, ST_EMPTY, memory_order_release);
        return;
    }
    c->peer_pid = ctl->conn_pid;
    c->pidfd = pidfd_open_(c->peer_pid);
    wake_name(&c->peer_sa, &c->peer_salen, cseg);
    atomic_store_explicit(&ctl->cma_ok[SIDE_CONN],
                          (uint32_t)cma_probe(ep, c->peer_pid, ctl->conn_probe_addr,
                                              ctl->conn_probe_value, c->peer),
                          memory_order_relaxed);
    atomic_store_explicit(&ctl->ack, ACK_ACCEPTED, memory_order_release);
    conn_ready(c);
}

/* ---- data path --------------------------------------------------------------------------- */

/* Completes the single-copy sends the peer has finished reading (its rdone counter). */
static void tx_reap(shm_conn_t *c)
{
    if (!c->rndvq.h) return;
    uint64_t done = atomic_load_explicit(&c->tx.ctl->rdone, memory_order_acquire);
    shm_req_t *r;
    while ((r = c->rndvq.h) != NULL && r->seq <= done) {
        rq_pop(&c->rndvq);
        r->nbytes = r->len;
        req_finish(r, COHORT_SUCCESS);
    }
}

static void tx_progress(shm_conn_t *c)
{
    shm_ring_cursor_t k;
    shm_ring_prod_begin(&c->tx, &k);
    shm_req_t *r;
    while ((r = c->sendq.h) != NULL) {
        shm_cell_t *ch = shm_ring_prod_reserve(&c->tx, &k);
        if (!ch) break;   /* full */
        if (!r->started) {   /* the protocol is fixed when the first cell is written */
            r->started = 1;
            r->rndv = c->tx_cma && r->len > c->ep->eager;
        }
        if (r->rndv) {
            ch->tag = r->tag;
            ch->len = r->len;
            ch->off = 0;
            ch->addr = (uint64_t)(uintptr_t)r->buf;
            ch->seq = r->seq = ++c->rndv_sent;
            ch->flen = 0;
            ch->kind = K_RNDV;
            shm_ring_prod_commit(&k);
            rq_pop(&c->sendq);
            rq_push(&c->rndvq, r);
            continue;
        }
        size_t n = r->len - r->off;
        if (n > SHM_CELL_PAYLOAD) n = SHM_CELL_PAYLOAD;
        ch->tag = r->tag;
        ch->len = r->len;
        ch->off = r->off;
        ch->addr = 0;
        ch->seq = 0;
        ch->flen = (uint32_t)n;
        ch->kind = K_FRAG;
        if (n) memcpy(shm_cell_payload(ch), r->buf + r->off, n);
        r->off += n;
        shm_ring_prod_commit(&k);
        if (r->off == r->len) {
            rq_pop(&c->sendq);
            r->nbytes = r->len;
            req_finish(r, COHORT_SUCCESS);
        }
    }
    if (shm_ring_prod_publish_sc(&c->tx, &k)) {
        c->ep->nevents++;
        wake_peer(c);
    }
    tx_reap(c);
}

static void rndv_publish(shm_conn_t *c)
{
    c->rndv_done_local++;
    atomic_store_explicit(&c->rx.ctl->rdone, c->rndv_done_local, memory_order_seq_cst);
    wake_peer(c);
}

static void rx_progress(shm_conn_t *c)
{
    shm_ring_cursor_t k;
    shm_ring_cons_begin(&c->rx, &k);
    size_t budget = SHM_RNDV_CHUNK;
    for (;;) {
        shm_req_t *r = c->recvq.h;
        /* a matched rendezvous receive in progress: read by CMA */
        if (r && r->started && r->rndv) {
            size_t n = r->rlen - r->off;
            if (n > budget) n = budget;
            int rc = n ? cma_read(c->peer_pid, r->buf + r->off, r->raddr + r->off, n) : 0;
            /* The sender closed (its buffer may be gone, the data unreliable): also when the
             * read failed with EFAULT because it freed the buffer on its way out. */
            if ((rc == 0 || rc == -EFAULT) &&
                atomic_load_explicit(&c->ctl->closed[c->connector ? SIDE_ACC : SIDE_CONN],
                                     memory_order_acquire))
                rc = -ESRCH;
            if (rc) {
                if (rc == -ESRCH || pid_gone(c->pidfd, c->peer_pid))
                    conn_fail(c, COHORT_ERR_PEER_LOST, "shm: rank %d (pid %d) went away while "
                              "rank %d was reading a %zu-byte message from it", c->peer,
                              c->peer_pid, c->ep->rank, r->rlen);
                else
                    conn_fail(c, COHORT_ERR_TRANSPORT, "shm: rank %d: process_vm_readv from "
                              "rank %d (pid %d) failed: %s; set COHORT_SHM_CMA=0 to copy "
                              "through shared memory instead", c->ep->rank, c->peer,
                              c->peer_pid, strerror(-rc));
                break;
            }
            r->off += n;
            budget -= n;
            if (n) c->ep->nevents++;
            if (r->off < r->rlen) break;   /* budget spent: continue next call */
            rq_pop(&c->recvq);
            r->nbytes = r->rlen;
            rndv_publish(c);
            req_finish(r, COHORT_SUCCESS);
            continue;
        }
        shm_cell_t *ch = shm_ring_cons_peek(&c->rx, &k);
        if (!ch) break;   /* empty */
        uint32_t flen = ch->flen;
        uint64_t mlen = ch->len, off = ch->off;
        if ((ch->kind != K_FRAG && ch->kind != K_RNDV) || flen > SHM_CELL_PAYLOAD ||
            (ch->kind == K_FRAG && (off > mlen || flen > mlen - off))) {
            conn_fail(c, COHORT_ERR_TRANSPORT, "shm: rank %d: corrupt cell from rank %d "
                      "(kind %u, fragment %u at %llu of %llu bytes)", c->ep->rank, c->peer,
                      ch->kind, flen, (unsigned long long)off, (unsigned long long)mlen);
            break;
        }
        if (c->discard) {   /* rest of a mismatched message */
            c->discard -= flen < c->discard ? flen : c->discard;
            shm_ring_cons_release(&k);
            continue;
        }
        if (r && r->started) {   /* next fragment of the current message */
            memcpy(r->buf + off, shm_cell_payload(ch), flen);
            r->off = off + flen;
            shm_ring_cons_release(&k);
            if (r->off == r->rlen) {
                rq_pop(&c->recvq);
                r->nbytes = r->rlen;
                req_finish(r, COHORT_SUCCESS);
            }
            continue;
        }
        if (!r) break;   /* in order: wait for the matching irecv */
        /* first cell of a new message */
        if (ch->tag != r->tag || mlen > r->len) {
            rq_pop(&c->recvq);
            req_fail_msg(r, COHORT_ERR_MISMATCH, "shm: rank %d: message from rank %d does not "
                         "match the posted receive: it has tag %llu and %llu bytes, the receive "
                         "expects tag %llu and at most %zu bytes (the message was dropped)",
                         c->ep->rank, c->peer, (unsigned long long)ch->tag,
                         (unsigned long long)mlen, (unsigned long long)r->tag, r->len);
            if (ch->kind == K_RNDV) rndv_publish(c);
            else c->discard = (size_t)(mlen - flen);
            shm_ring_cons_release(&k);
            continue;
        }
        r->started = 1;
        r->rlen = (size_t)mlen;
        if (ch->kind == K_RNDV) {
            r->rndv = 1;
            r->raddr = ch->addr;
            r->off = 0;
            shm_ring_cons_release(&k);
            continue;
        }
        memcpy(r->buf, shm_cell_payload(ch), flen);
        r->off = flen;
        shm_ring_cons_release(&k);
        if (r->off == r->rlen) {
            rq_pop(&c->recvq);
            r->nbytes = r->rlen;
            req_finish(r, COHORT_SUCCESS);
        }
    }
    if (shm_ring_cons_publish_sc(&c->rx, &k)) {
        c->ep->nevents++;
        wake_peer(c);
    }
}

static void conn_progress(shm_conn_t *c)
{
    if (c->state == C_CONNECTING) {
        if (c->connector) connector_step(c);
        else acceptor_step(c);
        if (c->state != C_READY) return;
    }
    if (c->state != C_READY) return;
    if (c->sendq.h || c->rndvq.h) tx_progress(c);
    if (c->state == C_READY && (c->recvq.h || c->discard)) rx_progress(c);
    if (c->state != C_READY) return;
    /* the peer closed: pending sends will never be taken; receives fail once the ring is dry */
    if (atomic_load_explicit(&c->ctl->closed[c->connector ? SIDE_ACC : SIDE_CONN],
                             memory_order_acquire)) {
        /* What the peer finished before closing is visible now (acquire): take it first, so
         * a send it read or a message it wrote just before closing still completes. */
        tx_reap(c);
        if (c->recvq.h || c->discard) rx_progress(c);
        if (c->state != C_READY) return;
        int rx_dry = shm_ring_cons_count(&c->rx) == 0;
        if (c->sendq.h || c->rndvq.h || (c->recvq.h && rx_dry))
            conn_fail(c, COHORT_ERR_PEER_LOST, "shm: rank %d (pid %d) closed its connection to "
                      "rank %d with operations still pending here", c->peer, c->peer_pid,
                      c->ep->rank);
        return;
    }
    if (conn_has_work(c)) check_peer_alive(c, 0);
}

/* ---- the ABI ----------------------------------------------------------------------------- */

static cohort_status_t shm_init(const cohort_host_v1_t *host, cohort_tp_ctx_t *ctx)
{
    if (!host || !ctx) return COHORT_ERR_INVALID_ARG;
    if (!COHORT_HAS_FIELD(host, cohort_host_v1_t, auth) || !host->log ||
        !host->error || !host->setting || !host->setting_long || !host->auth) {
        if (COHORT_HAS_FIELD(host, cohort_host_v1_t, error) && host->error)
            return host->error(COHORT_ERR_UNSUPPORTED, "shm: the core's host table is too old "
                               "or incomplete (size %zu)", host->size);
        return COHORT_ERR_UNSUPPORTED;
    }
    shm_ctx_t *c = calloc(1, sizeof *c);
    if (!c) return host->error(COHORT_ERR_NO_MEMORY, "shm: no memory for the plugin context");
    c->host = host;
    const char *hid = host->setting("COHORT_HOSTID");
    if (hid && *hid) {
        snprintf(c->nodeid, sizeof c->nodeid, "%s", hid);
    } else {
        char hn[128] = "", boot[64] = "";
        if (gethostname(hn, sizeof hn - 1) < 0) hn[0] = 0;
        if (read_small_file("/proc/sys/kernel/random/boot_id", boot, sizeof boot) < 0) {
            free(c);
            return host->error(COHORT_ERR_UNSUPPORTED, "shm: cannot read "
                               "/proc/sys/kernel/random/boot_id (%s) to identify this node; "
                               "set COHORT_HOSTID", strerror(errno));
        }
        snprintf(c->nodeid, sizeof c->nodeid, "%s:%s", hn, boot);
    }
    struct stat st;
    if (stat("/proc/self/ns/pid", &st) == 0) c->pidns = (uint64_t)st.st_ino;
    uint64_t probe = 0x1234567890abcdefull, v = 0;
    c->cma_self = cma_read(getpid(), &v, (uint64_t)(uintptr_t)&probe, sizeof v) == 0 &&
                  v == probe;
    if (!c->cma_self)
        host->log(COHORT_LOG_INFO, SUBSYS, "shm: process_vm_readv is not permitted in this "
                  "process (%s); large messages go by copy through shared memory",
                  strerror(errno));
    *ctx = c;
    return COHORT_SUCCESS;
}

static cohort_status_t shm_finalize(cohort_tp_ctx_t ctxv)
{
    free(ctxv);
    return COHORT_SUCCESS;
}

static cohort_status_t shm_get_attr(cohort_tp_ctx_t ctxv, cohort_transport_attr_t *attr)
{
    (void)ctxv;
    if (!attr) return COHORT_ERR_INVALID_ARG;
    cohort_transport_attr_t a;
    memset(&a, 0, sizeof a);
    a.scope = COHORT_SCOPE_NODE;
    a.bandwidth_gbps = 8.0;     /* rough: one memory copy */
    a.latency_us = 0.5;
    a.gpu_memory = 0;
    a.max_inflight = 0;
    cohort_attr_fill(attr, &a);
    return COHORT_SUCCESS;
}

static cohort_status_t shm_ep_open(cohort_tp_ctx_t ctxv, const cohort_ep_info_t *info,
                                   cohort_tp_ep_t *epp, void *addr, size_t *addrlen)
{
    shm_ctx_t *ctx = (shm_ctx_t *)ctxv;
    const cohort_host_v1_t *host = ctx->host;
    cohort_status_t st = cohort_ep_open_check(host, "shm", info, epp, addr, addrlen);
    if (st) return st;
    _Static_assert(SHM_JOBID_LEN > 63, "a job id of 63 characters (cohort_ep_open_check) fits");
    const char *job = info->job_id ? info->job_id : "";
    if (*addrlen < sizeof(shm_addr_t))
        return host->error(COHORT_ERR_INVALID_ARG, "shm: ep_open: the address buffer holds %zu "
                           "bytes, %zu needed", *addrlen, sizeof(shm_addr_t));
    long slot = SHM_DEFAULT_SLOT, eager = SHM_DEFAULT_EAGER, cma = 1;
    st = host->setting_long("COHORT_SHM_SEGMENT_SIZE", &slot);
    if (st) return st;
    if (slot < SHM_MIN_SLOT || slot > SHM_MAX_SLOT)
        return host->error(COHORT_ERR_INVALID_ARG, "COHORT_SHM_SEGMENT_SIZE=%ld is out of range: "
                           "shared memory per connection, %ld to %ld bytes", slot, SHM_MIN_SLOT,
                           SHM_MAX_SLOT);
    if ((st = host->setting_long("COHORT_SHM_EAGER_LIMIT", &eager))) return st;
    if (eager < 0 || eager > (1L << 30))
        return host->error(COHORT_ERR_INVALID_ARG, "COHORT_SHM_EAGER_LIMIT=%ld is out of range: "
                           "0 to 1073741824 bytes", eager);
    if ((st = host->setting_long("COHORT_SHM_CMA", &cma))) return st;
    long map = 1;
    if ((st = host->setting_long("COHORT_SHM_MAP", &map))) return st;
    long stream = 2;
    if ((st = host->setting_long("COHORT_SHM_STREAM", &stream))) return st;
    if (stream < 0 || stream > 2)
        return host->error(COHORT_ERR_INVALID_ARG, "COHORT_SHM_STREAM=%ld is out of range: 0 "
                           "(ordinary stores), 1 (streaming stores) or 2 (measure both)", stream);
    long coll_chunk = SHM_COLL_DEFAULT_ROUND;
    if ((st = host->setting_long("COHORT_SHM_COLL_CHUNK", &coll_chunk))) return st;
    if (coll_chunk != 0 && (coll_chunk < 4096 || coll_chunk > SHM_COLL_MAX_ROUND))
        return host->error(COHORT_ERR_INVALID_ARG, "COHORT_SHM_COLL_CHUNK=%ld is out of range: "
                           "bytes per round of the node collectives, 4096 to %ld, or 0 for "
                           "none (collectives then run over point-to-point)", coll_chunk,
                           SHM_COLL_MAX_ROUND);
    int have_reduce = COHORT_HAS_FIELD(host, cohort_host_v1_t, reduce_finish) &&
                      host->reduce && host->reduce3 && host->reduce_finish;
    shm_ep_t *ep = calloc(1, sizeof *ep);
    if (!ep) return host->error(COHORT_ERR_NO_MEMORY, "shm: no memory for an endpoint");
    ep->ctx = ctx;
    ep->host = host;
    ep->rank = info->rank;
    ep->nranks = info->nranks;
    ep->comm_id = info->comm_id;
    snprintf(ep->job_id, sizeof ep->job_id, "%s", job);
    ep->slot_size = ((size_t)slot + SHM_PAGE - 1) / SHM_PAGE * SHM_PAGE;
    ep->ncells = (ep->slot_size - 3 * SHM_PAGE) / 2 / SHM_CELL_SIZE;
    ep->eager = (size_t)eager;
    ep->cma_allowed = cma != 0 && ctx->cma_self;
    ep->map_allowed = map != 0;
    ep->stream = (int)stream;
    ep->segfd = -1;
    if (coll_chunk && have_reduce)
        ep->coll_round = shm_coll_round(info->nranks, (size_t)coll_chunk);
    make_nonce(ep->nonce);
    memcpy(&ep->probe_value, ep->nonce, sizeof ep->probe_value);
    ep->probe_value |= 1;
    static _Atomic unsigned counter;
    snprintf(ep->segname, sizeof ep->segname, "/cohort-%08x-%llx-%d-%d-%u", fnv32(job),
             (unsigned long long)info->comm_id, info->rank, (int)getpid(),
             atomic_fetch_add(&counter, 1));
    /* wake socket: without one ep_fd is -1 and the core just spins/yields as before */
    ep->wfd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    wake_name(&ep->self_sa, &ep->self_salen, ep->segname);
    if (ep->wfd >= 0 &&
        bind(ep->wfd, (const struct sockaddr *)&ep->self_sa, ep->self_salen) < 0) {
        close(ep->wfd);
        ep->wfd = -1;
    }
    if (ep->wfd < 0)
        host->log(COHORT_LOG_INFO, SUBSYS, "shm: rank %d: no wake-up socket (%s): waiting ranks "
                  "poll instead of sleeping", ep->rank, strerror(errno));
    shm_addr_t a;
    memset(&a, 0, sizeof a);
    a.magic = SHM_ADDR_MAGIC;
    a.version = SHM_LAYOUT_VERSION;
    a.rank = info->rank;
    a.nranks = info->nranks;
    a.pid = getpid();
    a.comm_id = info->comm_id;
    a.pidns = ctx->pidns;
    snprintf(a.nodeid, sizeof a.nodeid, "%s", ctx->nodeid);
    snprintf(a.job_id, sizeof a.job_id, "%s", job);
    snprintf(a.segname, sizeof a.segname, "%s", ep->segname);
    memcpy(addr, &a, sizeof a);
    *addrlen = sizeof a;
    host->log(COHORT_LOG_INFO, SUBSYS, "shm: rank %d endpoint %s, %zu bytes per connection "
              "(%llu cells of %zu), eager limit %zu, large messages by %s", ep->rank,
              ep->segname, ep->slot_size, (unsigned long long)ep->ncells, SHM_CELL_SIZE,
              ep->eager, ep->cma_allowed ? "CMA (process_vm_readv)" : "copy");
    *epp = ep;
    return COHORT_SUCCESS;
}

static void conn_free(shm_conn_t *c)
{
    shm_ep_t *ep = c->ep;
    if (c->ctl) {
        atomic_store_explicit(&c->ctl->closed[c->connector ? SIDE_CONN : SIDE_ACC], 1,
                              memory_order_seq_cst);
        if (c->state == C_READY) wake_peer(c);
    }
    if (!c->connector && c->state == C_CONNECTING) {
        ep->naccepts_pending--;
        ep_maybe_unlink(ep);
    }
    while (c->all) req_unlink_all(c->all);
    req_cache_free(c);
    if (c->coll_map) {
        /* the collective area goes with this conn: no node collective after this */
        shm_coll_free(ep->coll);
        ep->coll = NULL;
        ep->coll_gone = 1;
        munmap(c->coll_map, c->coll_len);
    }
    if (ep->by_peer && c->peer >= 0 && c->peer < ep->nranks && ep->by_peer[c->peer] == c)
        ep->by_peer[c->peer] = NULL;
    if (c->slot) munmap(c->slot, c->slot_size);
    if (c->hdr_map) munmap(c->hdr_map, SHM_PAGE);
    if (c->pidfd >= 0) close(c->pidfd);
    if (c->prev) c->prev->next = c->next;
    else ep->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    free(c);
}

/* At the endpoint's first close call, while every connection and the area are still there:
 * shm_coll_finish, up to SHM_FIN_WAIT_MS, asleep on our wake socket between looks (armed like a
 * collective's wait: a peer's fin or in wakes us). */
static void ep_finish(shm_ep_t *ep)
{
    if (ep->fin_done) return;
    ep->fin_done = 1;
    if (!ep->coll) return;
    uint64_t deadline = shm_now_ns() + (uint64_t)SHM_FIN_WAIT_MS * 1000000ull;
    int w;
    cohort_status_t st;
    while ((st = shm_coll_finish(ep->coll, deadline, &w)) == COHORT_IN_PROGRESS) {
        if (ep->wfd >= 0) ep_drain(ep);
        shm_coll_arm(ep->coll);
        atomic_thread_fence(memory_order_seq_cst);   /* our flag before the peers' fin and in */
        st = shm_coll_finish(ep->coll, deadline, &w);
        if (st == COHORT_IN_PROGRESS) {
            uint64_t now = shm_now_ns();
            int ms = now < deadline ? (int)((deadline - now) / 1000000ull) + 1 : 0;
            if (ms > SHM_FIN_POLL_MS) ms = SHM_FIN_POLL_MS;
            if (ep->wfd >= 0) {
                struct pollfd p = { ep->wfd, POLLIN, 0 };
                (void)poll(&p, 1, ms);
            } else {
                struct timespec ts = { 0, (long)ms * 1000000L };
                (void)nanosleep(&ts, NULL);
            }
        }
        shm_coll_disarm(ep->coll);
        if (st != COHORT_IN_PROGRESS) break;
    }
    ep->fin_st = st;
}

static cohort_status_t shm_ep_close(cohort_tp_ep_t epv)
{
    shm_ep_t *ep = (shm_ep_t *)epv;
    if (!ep) return COHORT_SUCCESS;
    ep_finish(ep);
    while (ep->conns) conn_free(ep->conns);
    if (ep->hdr && ep->linked) {   /* connectors still waiting for an accept: it will not come */
        int n = ep->nranks < SHM_HDR_STATES ? ep->nranks : SHM_HDR_STATES;
        for (int r = 0; r < n; r++) {
            uint8_t expect = SLOT_UNKNOWN;
            atomic_compare_exchange_strong(hdr_state(ep->hdr, r), &expect, SLOT_CLOSED);
        }
    }
    shm_coll_free(ep->coll);
    free(ep->by_peer);
    if (ep->coll_area) munmap(ep->coll_area, ep->coll_len);
    if (ep->wfd >= 0) close(ep->wfd);
    ep_unlink(ep);
    if (ep->hdr) munmap(ep->hdr, SHM_PAGE);
    if (ep->segfd >= 0) close(ep->segfd);
    cohort_status_t st = ep->fin_st;
    free(ep);
    return st;
}

static int addr_parse(const void *blob, size_t len, shm_addr_t *a)
{
    if (!blob || len != sizeof *a) return -1;
    memcpy(a, blob, sizeof *a);
    if (a->magic != SHM_ADDR_MAGIC || a->version != SHM_LAYOUT_VERSION) return -1;
    a->nodeid[SHM_NODEID_LEN - 1] = 0;
    a->job_id[SHM_JOBID_LEN - 1] = 0;
    a->segname[SHM_SEGNAME_LEN - 1] = 0;
    return 0;
}

static int shm_can_reach(cohort_tp_ep_t epv, int peer, const void *peer_addr, size_t addrlen)
{
    shm_ep_t *ep = (shm_ep_t *)epv;
    shm_addr_t a;
    if (!ep || addr_parse(peer_addr, addrlen, &a) < 0) return 0;
    (void)peer;
    return strcmp(a.nodeid, ep->ctx->nodeid) == 0 && a.pidns == ep->ctx->pidns &&
           strcmp(a.job_id, ep->job_id) == 0;
}

static shm_conn_t *conn_new(shm_ep_t *ep, int peer, int connector)
{
    shm_conn_t *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->ep = ep;
    c->peer = peer;
    c->connector = connector;
    c->state = C_CONNECTING;
    c->pidfd = -1;
    c->next = ep->conns;
    if (ep->conns) ep->conns->prev = c;
    ep->conns = c;
    return c;
}

static cohort_status_t shm_connect(cohort_tp_ep_t epv, int peer, const void *peer_addr,
                                   size_t addrlen, cohort_tp_conn_t *connp)
{
    shm_ep_t *ep = (shm_ep_t *)epv;
    const cohort_host_v1_t *host = ep->host;
    if (!connp) return host->error(COHORT_ERR_INVALID_ARG, "shm: connect needs a conn pointer");
    *connp = NULL;
    if (peer < 0 || peer >= ep->nranks || peer == ep->rank)
        return host->error(COHORT_ERR_INVALID_ARG, "shm: connect: rank %d is not a peer in "
                           "[0,%d) of rank %d", peer, ep->nranks, ep->rank);
    shm_addr_t a;
    if (addr_parse(peer_addr, addrlen, &a) < 0)
        return host->error(COHORT_ERR_INVALID_ARG, "shm: connect: the address of rank %d is not "
                           "a shm address of this version (%zu bytes)", peer, addrlen);
    if (a.rank != peer || a.comm_id != ep->comm_id || strcmp(a.job_id, ep->job_id) ||
        a.nranks != ep->nranks)
        return host->error(COHORT_ERR_INVALID_ARG, "shm: connect: the address given for rank %d "
                           "belongs to rank %d of job '%s', communicator %llx", peer, a.rank,
                           a.job_id, (unsigned long long)a.comm_id);
    if (strcmp(a.nodeid, ep->ctx->nodeid) || a.pidns != ep->ctx->pidns)
        return host->error(COHORT_ERR_INVALID_ARG, "shm: connect: rank %d is on node '%s', rank "
                           "%d on '%s': shared memory only reaches ranks of one node", peer,
                           a.nodeid, ep->rank, ep->ctx->nodeid);
    shm_conn_t *c = conn_new(ep, peer, 1);
    if (!c) return host->error(COHORT_ERR_NO_MEMORY, "shm: no memory for a connection");
    c->paddr = a;
    connector_step(c);
    *connp = c;
    return COHORT_SUCCESS;
}

static cohort_status_t shm_accept(cohort_tp_ep_t epv, int peer, cohort_tp_conn_t *connp)
{
    shm_ep_t *ep = (shm_ep_t *)epv;
    const cohort_host_v1_t *host = ep->host;
    if (!connp) return host->error(COHORT_ERR_INVALID_ARG, "shm: accept needs a conn pointer");
    *connp = NULL;
    if (peer < 0 || peer >= ep->nranks || peer == ep->rank)
        return host->error(COHORT_ERR_INVALID_ARG, "shm: accept: rank %d is not a peer in "
                           "[0,%d) of rank %d", peer, ep->nranks, ep->rank);
    for (shm_conn_t *o = ep->conns; o; o = o->next)
        if (!o->connector && o->peer == peer)
            return host->error(COHORT_ERR_INVALID_ARG, "shm: accept: rank %d is already "
                               "accepted on this endpoint", peer);
    if (!ep->hdr) {
        if (ep->segfd >= 0)   /* an earlier creation failed half-way (reported then) */
            return host->error(COHORT_ERR_SYSTEM, "shm: rank %d: segment %s could not be set "
                               "up (see the earlier error)", ep->rank, ep->segname);
        cohort_status_t st = ep_create_segment(ep);
        if (st != COHORT_SUCCESS) return st;
    } else if (!ep->linked) {
        return host->error(COHORT_ERR_INVALID_ARG, "shm: rank %d: accept(%d) after every "
                           "earlier accept of the endpoint completed and its segment %s was "
                           "unlinked; post all accepts of an endpoint before waiting on them",
                           ep->rank, peer, ep->segname);
    }
    off_t off = (off_t)(SHM_PAGE + (size_t)peer * ep->slot_size);
    int rc = posix_fallocate(ep->segfd, off, (off_t)ep->slot_size);
    void *s = rc ? MAP_FAILED : mmap(NULL, ep->slot_size, PROT_READ | PROT_WRITE, MAP_SHARED,
                                     ep->segfd, off);
    if (s == MAP_FAILED) {
        int e = rc ? rc : errno;
        /* tell the connector now, rather than let it wait for COHORT_TIMEOUT */
        if (peer < SHM_HDR_STATES)
            atomic_store_explicit(hdr_state(ep->hdr, peer), SLOT_FAILED, memory_order_release);
        return host->error(COHORT_ERR_SYSTEM, "shm: rank %d: allocating %zu bytes of shared "
                           "memory for rank %d in segment %s failed: %s; df -h /dev/shm, then "
                           "raise its size (containers: --shm-size) or lower "
                           "COHORT_SHM_SEGMENT_SIZE", ep->rank, ep->slot_size, peer, ep->segname,
                           strerror(e));
    }
    shm_conn_t *c = conn_new(ep, peer, 0);
    if (!c) {
        munmap(s, ep->slot_size);
        return host->error(COHORT_ERR_NO_MEMORY, "shm: no memory for a connection");
    }
    c->slot = s;
    c->slot_size = ep->slot_size;
    c->ncells = ep->ncells;
    conn_setup_dirs(c);
    /* fresh slot (a reused one of a closed conn is wiped) */
    memset(c->ctl, 0, sizeof *c->ctl);
    shm_ring_init(&c->tx);
    shm_ring_init(&c->rx);
    atomic_store_explicit(&c->ctl->ready, 1, memory_order_release);
    if (peer < SHM_HDR_STATES)
        atomic_store_explicit(hdr_state(ep->hdr, peer), SLOT_READY, memory_order_release);
    ep->naccepts_pending++;
    *connp = c;
    return COHORT_SUCCESS;
}

static cohort_status_t shm_conn_test(cohort_tp_conn_t connv)
{
    shm_conn_t *c = (shm_conn_t *)connv;
    uint64_t ev0 = c->ep->nevents;
    if (c->state == C_CONNECTING) conn_progress(c);
    ep_after(c->ep, ev0);
    if (c->state == C_FAILED) return c->ep->host->error(c->err, "%s", c->errmsg);
    return c->state == C_READY ? COHORT_SUCCESS : COHORT_IN_PROGRESS;
}

static cohort_status_t shm_conn_close(cohort_tp_conn_t connv)
{
    if (!connv) return COHORT_SUCCESS;
    ep_finish(((shm_conn_t *)connv)->ep);   /* the first close: ep_close returns its status */
    conn_free((shm_conn_t *)connv);
    return COHORT_SUCCESS;
}

static cohort_status_t post(shm_conn_t *c, int is_send, void *buf, size_t len, uint64_t tag,
                            cohort_tp_req_t *reqp)
{
    const cohort_host_v1_t *host = c->ep->host;
    if (!reqp) return host->error(COHORT_ERR_INVALID_ARG, "shm: isend/irecv need a request "
                                  "pointer");
    *reqp = NULL;
    if (len && !buf)
        return host->error(COHORT_ERR_INVALID_ARG, "shm: %s of %zu bytes with a NULL buffer "
                           "(rank %d)", is_send ? "isend" : "irecv", len, c->peer);
    if (c->state == C_FAILED) return host->error(c->err, "%s", c->errmsg);
    shm_req_t *r = req_alloc(c);
    if (!r) return host->error(COHORT_ERR_NO_MEMORY, "shm: no memory for a request");
    r->conn = c;
    r->is_send = is_send;
    r->buf = buf;
    r->len = len;
    r->tag = tag;
    r->anext = c->all;
    if (c->all) c->all->aprev = r;
    c->all = r;
    rq_push(is_send ? &c->sendq : &c->recvq, r);
    *reqp = r;
    uint64_t ev0 = c->ep->nevents;
    conn_progress(c);
    ep_after(c->ep, ev0);
    return COHORT_SUCCESS;
}

static cohort_status_t shm_isend(cohort_tp_conn_t connv, const void *buf, size_t len,
                                 uint64_t tag, cohort_tp_mr_t mr, cohort_tp_req_t *req)
{
    (void)mr;
    return post((shm_conn_t *)connv, 1, (void *)(uintptr_t)buf, len, tag, req);
}

static cohort_status_t shm_irecv(cohort_tp_conn_t connv, void *buf, size_t len, uint64_t tag,
                                 cohort_tp_mr_t mr, cohort_tp_req_t *req)
{
    (void)mr;
    return post((shm_conn_t *)connv, 0, buf, len, tag, req);
}

static cohort_status_t shm_test(cohort_tp_req_t reqv, size_t *nbytes)
{
    shm_req_t *r = (shm_req_t *)reqv;
    shm_conn_t *c = r->conn;
    if (!r->done) {
        shm_ep_t *ep = c->ep;
        uint64_t ev0 = ep->nevents;
        ep->testing = r;
        conn_progress(c);
        ep->testing = NULL;
        ep_after(ep, ev0);
    }
    if (!r->done) return COHORT_IN_PROGRESS;
    cohort_status_t st = r->status;
    if (st == COHORT_SUCCESS) {
        if (nbytes) *nbytes = r->nbytes;
    } else {
        c->ep->host->error(st, "%s", r->errmsg ? r->errmsg : c->errmsg);
    }
    req_unlink_all(r);
    return st;
}

static cohort_status_t shm_progress(cohort_tp_ep_t epv)
{
    shm_ep_t *ep = (shm_ep_t *)epv;
    uint64_t ev0 = ep->nevents;
    /* armed and woken (a peer cleared one of our flags, or we kicked): disarm; ep_after re-arms
     * (drain, flags, fence, re-check) if still idle. Not woken: stay armed, no syscall. */
    if (ep->armed && ep_drain(ep) > 0) ep_disarm(ep);
    for (shm_conn_t *c = ep->conns; c; c = c->next) conn_progress(c);
    ep->done_since_progress = 0;
    ep_after(ep, ev0);
    return COHORT_SUCCESS;
}

static int shm_ep_fd(cohort_tp_ep_t epv)
{
    shm_ep_t *ep = (shm_ep_t *)epv;
    return ep ? ep->wfd : -1;
}

/* ---- node collectives (protocol in coll.c) ------------------------------------------------ */

/* The connection to peer (built with the collective state), or NULL. */
static shm_conn_t *conn_of(shm_ep_t *ep, int peer)
{
    return peer >= 0 && peer < ep->nranks && ep->by_peer ? ep->by_peer[peer] : NULL;
}

static cohort_status_t coll_peer_check(void *epv, int peer, int report)
{
    shm_ep_t *ep = epv;
    shm_conn_t *c = conn_of(ep, peer);
    if (!c) return COHORT_SUCCESS;
    if (!report) {   /* look only */
        if (c->state == C_FAILED) return c->err;
        if (c->state == C_READY &&
            atomic_load_explicit(&c->ctl->closed[peer_side(c)], memory_order_acquire))
            return COHORT_ERR_PEER_LOST;
        if (c->state == C_READY && shm_now_ns() >= c->next_live_check &&
            pid_gone(c->pidfd, c->peer_pid))
            return COHORT_ERR_PEER_LOST;
        return COHORT_SUCCESS;
    }
    if (c->state == C_READY &&
        atomic_load_explicit(&c->ctl->closed[peer_side(c)], memory_order_acquire))
        conn_fail(c, COHORT_ERR_PEER_LOST, "shm: rank %d (pid %d) closed its endpoint (destroyed "
                  "or aborted its communicator) while rank %d waited for it in a node "
                  "collective", c->peer, c->peer_pid, ep->rank);
    else if (c->state == C_READY)
        check_peer_alive(c, 1);
    if (c->state == C_FAILED) return ep->host->error(c->err, "%s", c->errmsg);
    return COHORT_SUCCESS;
}

static void coll_wake(void *epv, int peer)
{
    shm_ep_t *ep = epv;
    shm_conn_t *c = conn_of(ep, peer);
    if (!c || ep->wfd < 0 || !c->peer_salen) return;
    char b = 1;
    (void)sendto(ep->wfd, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL,
                 (const struct sockaddr *)&c->peer_sa, c->peer_salen);
}

static int coll_read(void *epv, int peer, void *dst, uint64_t addr, size_t len)
{
    shm_ep_t *ep = epv;
    shm_conn_t *c = conn_of(ep, peer);
    if (!c || c->peer_pid <= 0) return -ESRCH;
    return cma_read(c->peer_pid, dst, addr, len);
}

/* The area (rank 0's, or our mapping of it) once every peer is connected; else NULL. */
static void *coll_area(shm_ep_t *ep)
{
    if (ep->nranks < 2 || ep->coll_gone) return NULL;
    if (ep->rank == 0) return ep->coll_area;
    for (shm_conn_t *c = ep->conns; c; c = c->next)
        if (c->peer == 0 && c->connector && c->state == C_READY) return c->coll_map;
    return NULL;
}

static int coll_ready(shm_ep_t *ep)
{
    if (ep->coll) return 1;
    void *area = coll_area(ep);
    if (!area) return 0;
    shm_conn_t **by = calloc((size_t)ep->nranks, sizeof *by);
    if (!by) return 0;
    for (shm_conn_t *c = ep->conns; c; c = c->next)
        if (c->state == C_READY && c->peer >= 0 && c->peer < ep->nranks) by[c->peer] = c;
    for (int r = 0; r < ep->nranks; r++)
        if (r != ep->rank && !by[r]) {
            free(by);
            return 0;
        }
    /* single copy for allgather only if we can read every peer (the CMA probe) */
    int cma = ep->cma_allowed;
    for (int r = 0; r < ep->nranks; r++)
        if (r != ep->rank && !by[r]->rx_cma) cma = 0;
    shm_coll_hooks_t hooks = { ep, coll_peer_check, coll_wake, coll_read, cma, ep->map_allowed,
                               ep->stream };
    ep->coll = shm_coll_new(area, ep->rank, ep->nranks, ep->host, &hooks);
    if (!ep->coll) {
        free(by);
        return 0;
    }
    free(ep->by_peer);
    ep->by_peer = by;
    return 1;
}

static unsigned shm_colls(cohort_tp_ep_t epv)
{
    shm_ep_t *ep = (shm_ep_t *)epv;
    if (!ep || !coll_ready(ep)) return 0;
    return (1u << COHORT_TP_ALLREDUCE) | (1u << COHORT_TP_BROADCAST) | (1u << COHORT_TP_REDUCE) |
           (1u << COHORT_TP_ALLGATHER) | (1u << COHORT_TP_REDUCE_SCATTER) |
           (1u << COHORT_TP_ALLTOALL) | (1u << COHORT_TP_BARRIER);
}

static cohort_status_t shm_coll_test_abi(cohort_tp_req_t req, int *waiting_on, int *movedp)
{
    shm_ep_t *ep = (shm_ep_t *)req;
    uint64_t ev0 = ep->nevents;
    int moved = 0, w = -1;
    cohort_status_t st = ep->coll ? shm_coll_advance(ep->coll, &moved, &w)
                         : ep->host->error(COHORT_ERR_PEER_LOST, "shm: rank %d: the node "
                                           "collective lost its shared area (the connection "
                                           "to rank 0 was closed)", ep->rank);
    if (moved) ep->nevents++;
    ep_after(ep, ev0);
    if (waiting_on) *waiting_on = w;
    if (movedp) *movedp = moved;
    return st;
}

static cohort_status_t shm_coll_start_abi(cohort_tp_ep_t epv, const cohort_tp_coll_args_t *args,
                                          cohort_tp_req_t *req)
{
    shm_ep_t *ep = (shm_ep_t *)epv;
    const cohort_host_v1_t *host = ep->host;
    if (!args || !req || !COHORT_HAS_FIELD(args, cohort_tp_coll_args_t, tag))
        return host->error(COHORT_ERR_INVALID_ARG, "shm: collective start needs arguments "
                           "(of at least the ABI 1.1 size) and a request pointer");
    *req = NULL;
    if (!coll_ready(ep))
        return host->error(COHORT_ERR_UNSUPPORTED, "shm: rank %d: node collectives need every "
                           "rank of the communicator connected through shm and rank 0's "
                           "collective area (COHORT_SHM_COLL_CHUNK=0 turns them off)", ep->rank);
    cohort_status_t st = shm_coll_start(ep->coll, args);
    if (st) return st;
    st = shm_coll_test_abi(ep, NULL, NULL);
    if (st == COHORT_IN_PROGRESS) {
        *req = ep;
        return COHORT_SUCCESS;
    }
    return st;
}

static void shm_coll_cancel_abi(cohort_tp_req_t req)
{
    shm_ep_t *ep = (shm_ep_t *)req;
    if (ep) shm_coll_cancel(ep->coll);
}

static const cohort_transport_coll_v1_t shm_coll_table = {
    .size = sizeof(cohort_transport_coll_v1_t),
    .colls = shm_colls,
    .start = shm_coll_start_abi,
    .test = shm_coll_test_abi,
    .cancel = shm_coll_cancel_abi,
};

__attribute__((visibility("default")))
const cohort_transport_v1_t cohort_transport_v1 = {
    .size = sizeof(cohort_transport_v1_t),
    .abi_version = COHORT_PLUGIN_ABI_VERSION,
    .name = "shm",
    .version = SHM_PLUGIN_VERSION,
    .init = shm_init,
    .finalize = shm_finalize,
    .get_attr = shm_get_attr,
    .ep_open = shm_ep_open,
    .ep_close = shm_ep_close,
    .can_reach = shm_can_reach,
    .connect = shm_connect,
    .accept = shm_accept,
    .conn_test = shm_conn_test,
    .conn_close = shm_conn_close,
    .mem_reg = NULL,
    .mem_dereg = NULL,
    .isend = shm_isend,
    .irecv = shm_irecv,
    .test = shm_test,
    .progress = shm_progress,
    .ep_fd = shm_ep_fd,
    .coll = &shm_coll_table,
};
