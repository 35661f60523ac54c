/* SPDX-License-Identifier: BSD-3-Clause */
/* TCP transport: what the plugin's source files share (private to transports/tcp, not
 * installed): the limits, the objects (context, endpoint and its listeners, accepted sockets,
 * conns and their sockets, requests and their segments) and the functions one file calls in
 * another. None of them is exported: the plugin is built with -fvisibility=hidden and exports
 * only cohort_transport_v1 (tcp.c). The wire format is in tcp_wire.h. */
#ifndef COHORT_TCP_INT_H
#define COHORT_TCP_INT_H

#include <cohort/plugin.h>
#include "transports/common/kit_req.h"
#include "transports/common/kit_wake.h"

#include "tcp_wire.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define SUBSYS "net"
#define TCP_PLUGIN_VERSION COHORT_VERSION_STRING   /* the package's (configure) */
#define TCP_STAGE_SIZE ((size_t)64 * 1024)     /* socket 0 read-ahead buffer */
#define TCP_DIRECT_MIN ((size_t)8 * 1024)      /* read straight into the user buffer above this */
#define TCP_SCRATCH_SIZE ((size_t)64 * 1024)   /* where discarded payload goes */
#define TCP_MAX_INCOMING 1024                   /* unauthenticated sockets kept at once */
#define TCP_MAX_WARNED 32                       /* peer IPs whose refusal was logged at WARN */
#define TCP_ACCEPT_PAUSE_MS 100                 /* accept() out of descriptors: retry after */
#define TCP_IOV_BATCH 64
#define TCP_ADDRSTR 64
#define TCP_MAX_PROBE_MS 600000                 /* COHORT_SOCKET_PROBE_MS at most */
#define TCP_REQ_POOL 256                        /* finished requests an endpoint keeps */


/* ---- objects ----------------------------------------------------------------------------- */

enum { FD_LISTEN = 1, FD_INCOMING, FD_SOCK, FD_EVENT };

typedef struct fdent {
    int kind;
    void *obj;
} fdent_t;

struct tcp_ep;
struct tcp_conn;
struct tcp_req;

/* What probes found out about one IP address: it answered (on some port), or it could not be
 * reached (no route, or no answer in time, and it never answered before): not probed again. */
typedef struct unreach {
    uint16_t family;
    uint32_t scope_id;
    unsigned char addr[16];
    int reachable;
    char why[96];
} unreach_t;

typedef struct tcp_ctx {
    const cohort_host_v1_t *host;
    struct tcp_ep *eps;            /* every open endpoint, closed by finalize if left open */
    pthread_mutex_t lock;          /* guards the cache below (endpoints may live on threads) */
    unreach_t *unreach;
    int nunreach, capunreach;
} tcp_ctx_t;

/* One listening socket: one candidate address of the endpoint. */
typedef struct tcp_listener {
    fdent_t ent;
    struct tcp_ep *ep;
    int fd;
    tcp_cand_t cand;               /* as published (port included) */
    char addrstr[TCP_ADDRSTR];
    double paused_until;           /* accept() ran out of descriptors: off epoll until then */
} tcp_listener_t;

/* What can_reach found for one peer. */
enum { RT_UNKNOWN = 0, RT_CHOSEN, RT_NONE };
typedef struct route {
    int state;
    tcp_cand_t cand;               /* RT_CHOSEN: the candidate that answered */
} route_t;

/* An accepted socket: in its handshake, or authenticated and waiting for accept(). */
enum { IN_HELLO = 1, IN_ACK, IN_READY };
typedef struct incoming {
    fdent_t ent;
    struct incoming *next, *prev;
    struct tcp_ep *ep;
    const tcp_listener_t *lis;     /* the listening socket it came in on */
    int fd;
    int state;
    uint32_t events;
    unsigned char hello[TCP_HELLO_SIZE];
    size_t off;
    unsigned char ack[TCP_ACK_SIZE];
    size_t ack_off;
    int src, sock_idx, nsocks;
    char addr[TCP_ADDRSTR];
} incoming_t;

typedef struct seg {
    struct seg *next;
    struct tcp_req *req;
    const unsigned char *hdr;      /* send: message header before the payload (socket 0) */
    size_t hdrlen;
    char *ptr;                     /* receive: NULL = discard */
    size_t len;
    size_t off;                    /* bytes done, over hdrlen + len */
} seg_t;

/* Socket states (connector side goes through all; accepted sockets start READY). */
enum { S_UNUSED = 0, S_CONNECTING, S_HELLO, S_ACK, S_READY, S_CLOSED };
typedef struct tsock {
    fdent_t ent;
    struct tcp_conn *conn;
    int idx;
    int fd;
    int state;
    uint32_t events;               /* currently registered with epoll */
    int rx_idle;                   /* EPOLLIN fired with no receive wanting it: disarm */
    unsigned char hello[TCP_HELLO_SIZE];
    size_t hello_off;
    unsigned char ack[TCP_ACK_SIZE];
    size_t ack_off;
    seg_t *txh, *txt;
    seg_t *rxh, *rxt;
} tsock_t;

enum { C_CONNECTING = 1, C_READY, C_FAILED };
typedef struct tcp_conn {
    struct tcp_ep *ep;
    struct tcp_conn *next, *prev;
    int peer;
    int connector;
    int state;
    cohort_status_t err;
    char errmsg[384];
    char peer_addr[TCP_ADDRSTR];
    int nsocks;                    /* 0 on the accept side until the first socket is claimed */
    int nready;
    int claimed[TCP_MAX_NSOCKS];   /* accept side: socket index seen (duplicates are refused) */
    tsock_t socks[TCP_MAX_NSOCKS];
    struct tcp_req *unm_h, *unm_t; /* posted receives waiting for their header, in order */
    struct tcp_req *def_h, *def_t; /* requests posted before the conn was ready, in order */
    struct tcp_req *all;           /* every live request of this conn */
    unsigned char hdr[TCP_MSG_HDR_SIZE];
    size_t hdr_off;
    unsigned char *stage;          /* socket 0 read-ahead: valid bytes [st_off, st_len) */
    size_t st_off, st_len;
} tcp_conn_t;

typedef struct tcp_req {
    tcp_conn_t *conn;
    struct tcp_req *anext, *aprev; /* conn->all */
    struct tcp_req *qnext;         /* unmatched / deferred queue */
    int is_send;
    char *buf;
    size_t len;
    uint64_t tag;
    size_t nbytes;
    int segs_left;
    int done;                      /* final status known */
    int released;                  /* the user has been given the final status */
    cohort_status_t status;
    char *errmsg;                  /* request-specific failure text (mismatch) */
    unsigned char hdr[TCP_MSG_HDR_SIZE];
    int nseg_cap;
    seg_t seg[];
} tcp_req_t;

/* A request's size with room for nseg_cap segments. */
static inline size_t tcp_req_size(int nseg_cap)
{
    return sizeof(tcp_req_t) + (size_t)nseg_cap * sizeof(seg_t);
}

typedef struct tcp_ep {
    tcp_ctx_t *ctx;
    const cohort_host_v1_t *host;
    struct tcp_ep *next, *prev;
    int rank, nranks;
    uint64_t comm_id;
    char job_id[TCP_JOBID_LEN];
    unsigned char job_hash[TCP_MAC_LEN];
    unsigned char netns[TCP_NETNS_LEN];
    tcp_listener_t lis[TCP_ADDR_MAX_CANDS];
    int nlis;
    long probe_ms;                 /* COHORT_SOCKET_PROBE_MS */
    route_t *routes;               /* [nranks], allocated by the first can_reach */
    uint64_t *logged;              /* peer address sets whose choice was logged already */
    int nlogged, caplogged;
    int nsocks;
    int epfd;
    incoming_t *inc_h, *inc_t;     /* handshaking, oldest first */
    int ninc;
    incoming_t *early;             /* authenticated, unclaimed */
    /* refusals are logged at WARN once per peer IP (then INFO): a scan does not flood the log */
    char warned[TCP_MAX_WARNED][TCP_ADDRSTR];
    int nwarned;
    int accept_err_logged;
    tcp_conn_t *conns;
    unsigned char *scratch;
    /* Wake-up for completions the caller cannot have seen (kit_wake.h): a request that
     * completes inside another request's test() (or conn_test, or an isend/irecv of another
     * request) makes wake.fd, in the epoll set, readable until the next progress(), so a core
     * that tests what it waits for and then sleeps in poll(ep_fd) wakes up and finds it. */
    kit_wake_t wake;
    fdent_t ev_ent;
    struct tcp_req *cur_req;       /* the request the current call is about */
    /* Finished requests kept for the next isend/irecv (tcp_req_put): those with room for nsocks
     * segments, the common size; a conn not yet ready has TCP_MAX_NSOCKS (calloc'd unless
     * equal). No lock: only the thread driving the endpoint touches it (plugin.h), and
     * ep_destroy drains it after its conns' requests came back. */
    kit_pool_t reqs;
} tcp_ep_t;


/* ---- across files ------------------------------------------------------------------------ */

/* tcp.c: small helpers */
double tcp_mono_ms(void);
void tcp_format_sockaddr(const struct sockaddr_storage *ss, char *buf, size_t len);
void tcp_format_addr(int family, const unsigned char *addr, uint16_t port, char *buf,
                     size_t len);
socklen_t tcp_make_sockaddr(int family, const unsigned char *addr, uint16_t port,
                            uint32_t scope, struct sockaddr_storage *ss);
void tcp_set_nodelay(int fd);
void tcp_close_fd(int epfd, int fd);

/* tcp_data.c: the data path, connection failure and progress */
void tcp_req_put(tcp_ep_t *ep, tcp_req_t *r);
void tcp_conn_fail(tcp_conn_t *c, cohort_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void tcp_conn_fail_errno(tcp_conn_t *c, int e, const char *what);
void tcp_conn_close_sockets(tcp_conn_t *c);
void tcp_conn_ready(tcp_conn_t *c);
void tcp_conn_progress(tcp_conn_t *c);
cohort_status_t tcp_isend(cohort_tp_conn_t connv, const void *buf, size_t len, uint64_t tag,
                          cohort_tp_mr_t mr, cohort_tp_req_t *req);
cohort_status_t tcp_irecv(cohort_tp_conn_t connv, void *buf, size_t len, uint64_t tag,
                          cohort_tp_mr_t mr, cohort_tp_req_t *req);
cohort_status_t tcp_test(cohort_tp_req_t reqv, size_t *nbytes);
cohort_status_t tcp_progress(cohort_tp_ep_t epv);

/* tcp_conn.c: handshakes (connector and accept side) and conn lifetime */
void tcp_sock_connect_progress(tsock_t *s);
void tcp_inc_free(tcp_ep_t *ep, incoming_t *in, int close_it);
void tcp_inc_progress(tcp_ep_t *ep, incoming_t *in, uint32_t revents);
void tcp_listen_progress(tcp_listener_t *l);
void tcp_inc_trim(tcp_ep_t *ep);
void tcp_conn_destroy(tcp_conn_t *c);
cohort_status_t tcp_connect(cohort_tp_ep_t epv, int peer, const void *peer_addr,
                            size_t addrlen, cohort_tp_conn_t *connp);
cohort_status_t tcp_accept(cohort_tp_ep_t epv, int peer, cohort_tp_conn_t *connp);
cohort_status_t tcp_conn_test(cohort_tp_conn_t connv);
cohort_status_t tcp_conn_close(cohort_tp_conn_t connv);

/* tcp_addr.c: candidates, the unreachable cache and the reachability probe */
void tcp_netns_id(const cohort_host_v1_t *host, unsigned char out[TCP_NETNS_LEN]);
int tcp_cand_is_linklocal(const tcp_cand_t *c);
int tcp_cand_same_ip(const tcp_cand_t *a, const tcp_cand_t *b);
void tcp_cand_format(const tcp_cand_t *c, char *buf, size_t len);
const char *tcp_cand_skip_reason(const tcp_ep_t *ep, const tcp_addr_t *a, const tcp_cand_t *c,
                                 char *buf, size_t len);
int tcp_unreach_lookup(tcp_ctx_t *ctx, const tcp_cand_t *c, char *why, size_t len);
int tcp_peer_addr_check(const tcp_ep_t *ep, int peer, const void *blob, size_t len,
                        tcp_addr_t *a, char *why, size_t wl);
int tcp_can_reach(cohort_tp_ep_t epv, int peer, const void *peer_addr, size_t addrlen);

#endif
