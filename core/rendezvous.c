/* SPDX-License-Identifier: BSD-3-Clause */
/* TCP rendezvous server and client: authenticated rounds of allgather (see rendezvous.h). */
#include "core/rendezvous.h"
#include "core/hmac.h"
#include "core/log.h"
#include "core/timeutil.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define SUBSYS "boot"
#define RDV_MAGIC 0x56524843u   /* "CHRV" */
#define RDV_VERSION 2u
#define RDV_MAX_PAYLOAD (64u << 20)
#define HELLO_TIMEOUT_NS (10ull * 1000000000ull)
/* Connections that have not sent a valid hello yet are at most nranks + PENDING_SLACK at once
 * (a job's ranks connect in a burst); past that the server takes no new one until the oldest,
 * once it waited PENDING_EVICT_NS for its hello (ranks send theirs at once), is dropped. */
#define PENDING_SLACK 64
#define PENDING_EVICT_NS (100ull * 1000000ull)
/* accept() out of descriptors: listen again after this (the listening socket stays readable) */
#define ACCEPT_PAUSE_NS (100ull * 1000000ull)
/* Refusals are logged at WARN once per peer address (IP), then at INFO: a port scan or a
 * misconfigured job from one host does not flood the log. */
#define MAX_WARNED 64

enum { MSG_GATHER = 1, MSG_RESULT = 2, MSG_FAIL = 3, MSG_BYE = 4, MSG_QUERY = 5, MSG_MISSING = 6,
       MSG_NOTE = 7, MSG_STALL = 8, MSG_SHUTDOWN = 9, MSG_NOTICE = 10 };
#define NOTICE_HEAD 16   /* comm id (8), about (4), status (4), then the text */
#define NOTICE_MAX 65536u   /* and what a rank reads of a notice or a text from the server */
#define MAX_NOTICED 256
#define STALL_GATHER_NS (2ull * 1000000000ull)   /* collect stall reports this long, then log */

/* After the bootstrap, a FAIL's round field says what failed: bits 0-15 the rank it is about
 * plus one (0: none), bits 16-23 minus the status (rendezvous.h). */
static uint32_t fail_code(int about, cohort_status_t st)
{
    uint32_t a = about >= 0 && about < 65535 ? (uint32_t)about + 1 : 0;
    uint32_t s = st < 0 && st > -256 ? (uint32_t)-st : 0;
    return a | s << 16;
}

typedef struct rdv_hello {
    uint32_t magic, version;
    char job_id[COHORT_JOBID_MAX];
    int32_t rank, nranks;
    int32_t pid;
    char host[64];            /* for messages about this rank */
    unsigned char nonce[16];
    unsigned char mac[32];
} rdv_hello_t;

typedef struct rdv_ack {
    uint32_t magic;
    int32_t status;      /* ACK_OK, else why the hello was refused (ACK_*) */
    unsigned char mac[32];
} rdv_ack_t;

/* Why a hello was refused, for the client's message only: a refusal carries no MAC (the server
 * may not share the secret), so it is never trusted for anything but the wording. */
enum { ACK_OK = 0, ACK_REFUSED = -1, ACK_BAD_JOB = -2, ACK_BAD_MAC = -3, ACK_BAD_RANK = -4,
       ACK_DUPLICATE = -5 };

typedef struct rdv_hdr {
    uint32_t type, round;
    uint64_t nbytes;
} rdv_hdr_t;

static void hello_mac(const void *secret, size_t slen, const rdv_hello_t *h, unsigned char *out)
{
    cohort_hmac_sha256(secret, slen, h, offsetof(rdv_hello_t, mac), out);
}

static void ack_mac(const void *secret, size_t slen, const rdv_hello_t *h, unsigned char *out)
{
    unsigned char buf[3 + sizeof h->nonce + sizeof h->rank];
    memcpy(buf, "ack", 3);
    memcpy(buf + 3, h->nonce, sizeof h->nonce);
    memcpy(buf + 3 + sizeof h->nonce, &h->rank, sizeof h->rank);
    cohort_hmac_sha256(secret, slen, buf, sizeof buf, out);
}

static void set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static void peer_name(int fd, char *buf, size_t len)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char host[INET6_ADDRSTRLEN] = "?", port[16] = "?";
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0)
        getnameinfo((struct sockaddr *)&ss, sl, host, sizeof host, port, sizeof port,
                    NI_NUMERICHOST | NI_NUMERICSERV);
    snprintf(buf, len, "%s:%s", host, port);
}

/* ======================================= server ========================================= */

typedef struct rdv_conn {
    int fd;
    int rank;                 /* -1 until the hello is accepted */
    int bye;
    uint64_t deadline_ns;     /* for the hello */
    unsigned char *in;        /* bytes received, not yet consumed */
    size_t in_len, in_cap;
    unsigned char *out;       /* bytes queued to send */
    size_t out_len, out_off;
    char addr[64];
    char who[96];             /* "host vm, pid 123" from the hello, for messages */
} rdv_conn_t;

struct cohort_rdv_server {
    int lfd, port, nranks;
    char job_id[COHORT_JOBID_MAX];
    unsigned char secret[COHORT_SECRET_MAX];
    size_t secretlen;
    rdv_conn_t *conns;
    int nconns, capconns;
    unsigned char *arrived;   /* per rank: ever authenticated */
    unsigned char *closed;    /* per rank: connection ended */
    int narrived, nclosed;
    /* per rank, for cohort_rdv_server_rank_info: the order in which connections closed without
     * a goodbye (0: not lost), and the rank its first PEER_LOST report was about (-1: none) */
    int *lost_order;
    int *blamed;
    int nlost;
    /* the open round */
    uint32_t round;
    uint64_t round_bytes;
    int round_count;
    unsigned char *round_have;
    unsigned char *round_data;
    char fail[1024];          /* non-empty: the job failed; sent to everyone */
    uint32_t fail_round;      /* its code (fail_code) */
    /* stall reports (MSG_STALL): per rank the last text, and when the first one came */
    char **stall_text;
    uint64_t stall_first_ns;
    int shutting_down;
    uint64_t noticed[MAX_NOTICED];   /* communicators whose failure was announced */
    int nnoticed;
    pthread_t thread;
    int has_thread;
    atomic_int stop;
    /* strangers: addresses already warned about, refusals since, accept back-off */
    char warned[MAX_WARNED][INET6_ADDRSTRLEN];
    int nwarned;
    unsigned long quiet_refusals;
    uint64_t accept_pause_until;
    int accept_err_logged;
};

static void conn_queue(rdv_conn_t *c, uint32_t type, uint32_t round, const void *data,
                       uint64_t nbytes)
{
    rdv_hdr_t h = { type, round, nbytes };
    size_t need = c->out_len - c->out_off + sizeof h + nbytes;
    unsigned char *nb = malloc(need);
    if (!nb) return;    /* the peer then times out; nothing better to do without memory */
    size_t old = c->out_len - c->out_off;
    if (old) memcpy(nb, c->out + c->out_off, old);
    memcpy(nb + old, &h, sizeof h);
    if (nbytes) memcpy(nb + old + sizeof h, data, nbytes);
    free(c->out);
    c->out = nb;
    c->out_len = need;
    c->out_off = 0;
}

static void conn_flush(rdv_conn_t *c)
{
    while (c->fd >= 0 && c->out_off < c->out_len) {
        ssize_t w = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (w > 0) c->out_off += (size_t)w;
        else if (w < 0 && errno == EINTR) continue;
        else break;   /* EAGAIN or error: poll tells us later */
    }
}

static void conn_drop(cohort_rdv_server_t *s, rdv_conn_t *c)
{
    if (c->fd < 0) return;
    conn_flush(c);
    close(c->fd);
    c->fd = -1;
    if (c->rank >= 0 && !s->closed[c->rank]) {
        s->closed[c->rank] = 1;
        s->nclosed++;
        if (!c->bye) s->lost_order[c->rank] = ++s->nlost;
    }
    free(c->in);
    free(c->out);
    c->in = c->out = NULL;
    c->in_len = c->in_cap = c->out_len = c->out_off = 0;
}

static void server_vfail(cohort_rdv_server_t *s, uint32_t code, const char *fmt, va_list ap)
{
    if (s->fail[0] || s->shutting_down) return;   /* the first failure is the one that matters */
    vsnprintf(s->fail, sizeof s->fail, fmt, ap);
    s->fail_round = code;
    cohort_log(COHORT_LOG_WARN, SUBSYS, "rendezvous: %s", s->fail);
    for (int i = 0; i < s->nconns; i++)
        if (s->conns[i].fd >= 0 && s->conns[i].rank >= 0 && !s->conns[i].bye)
            conn_queue(&s->conns[i], MSG_FAIL, code, s->fail, strlen(s->fail) + 1);
}

static void server_fail(cohort_rdv_server_t *s, const char *fmt, ...) COHORT_PRINTF(2, 3);
static void server_fail(cohort_rdv_server_t *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    server_vfail(s, 0, fmt, ap);
    va_end(ap);
}

static void server_fail_code(cohort_rdv_server_t *s, uint32_t code, const char *fmt, ...)
    COHORT_PRINTF(3, 4);
static void server_fail_code(cohort_rdv_server_t *s, uint32_t code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    server_vfail(s, code, fmt, ap);
    va_end(ap);
}

void cohort_rdv_server_fail(cohort_rdv_server_t *s, int about, const char *msg)
{
    server_fail_code(s, fail_code(about, COHORT_ERR_PEER_LOST), "%s", msg);
}

const char *cohort_rdv_server_failure(const cohort_rdv_server_t *s)
{
    return s->fail[0] ? s->fail : NULL;
}

cohort_status_t cohort_rdv_server_create(const char *bind_host, int port, int nranks,
                                         const char *job_id, const void *secret,
                                         size_t secretlen, cohort_rdv_server_t **out)
{
    *out = NULL;
    if (nranks < 1 || !job_id || strlen(job_id) >= COHORT_JOBID_MAX ||
        secretlen > COHORT_SECRET_MAX || port < 0 || port > 65535)
        return cohort_error(COHORT_ERR_INVALID_ARG, "rendezvous server: bad arguments "
                            "(nranks %d, port %d)", nranks, port);
    cohort_rdv_server_t *s = calloc(1, sizeof *s);
    if (!s) return cohort_error(COHORT_ERR_NO_MEMORY, "no memory for the rendezvous server");
    s->nranks = nranks;
    s->lfd = -1;
    snprintf(s->job_id, sizeof s->job_id, "%s", job_id);
    if (secretlen) memcpy(s->secret, secret, secretlen);
    s->secretlen = secretlen;
    s->arrived = calloc((size_t)nranks, 1);
    s->closed = calloc((size_t)nranks, 1);
    s->round_have = calloc((size_t)nranks, 1);
    s->stall_text = calloc((size_t)nranks, sizeof *s->stall_text);
    s->lost_order = calloc((size_t)nranks, sizeof *s->lost_order);
    s->blamed = malloc((size_t)nranks * sizeof *s->blamed);
    if (!s->arrived || !s->closed || !s->round_have || !s->stall_text || !s->lost_order ||
        !s->blamed) {
        cohort_rdv_server_destroy(s);
        return cohort_error(COHORT_ERR_NO_MEMORY, "no memory for the rendezvous server");
    }
    for (int r = 0; r < nranks; r++) s->blamed[r] = -1;
    struct addrinfo hints = { .ai_flags = AI_PASSIVE | AI_NUMERICSERV, .ai_family = AF_UNSPEC,
                              .ai_socktype = SOCK_STREAM }, *res = NULL;
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    int gai = getaddrinfo(bind_host && *bind_host ? bind_host : NULL, portstr, &hints, &res);
    if (gai) {
        cohort_rdv_server_destroy(s);
        return cohort_error(COHORT_ERR_SYSTEM, "rendezvous server: cannot resolve '%s': %s",
                            bind_host ? bind_host : "*", gai_strerror(gai));
    }
    int err = 0;
    /* Prefer IPv4 "any" for wildcard binds so IPv4-only peers always reach it. */
    for (int pass = 0; pass < 2 && s->lfd < 0; pass++)
        for (struct addrinfo *a = res; a && s->lfd < 0; a = a->ai_next) {
            if ((pass == 0) != (a->ai_family == AF_INET)) continue;
            int fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
            if (fd < 0) { err = errno; continue; }
            int one = 1;
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
            if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 1024) == 0) s->lfd = fd;
            else { err = errno; close(fd); }
        }
    freeaddrinfo(res);
    if (s->lfd < 0) {
        cohort_rdv_server_destroy(s);
        return cohort_error(COHORT_ERR_SYSTEM, "rendezvous server: cannot listen on %s:%d: %s%s",
                            bind_host && *bind_host ? bind_host : "*", port, strerror(err),
                            err == EADDRINUSE ? " (another job or a torch TCPStore uses this "
                            "port? pick another with COHORT_RENDEZVOUS=tcp://host:port)" : "");
    }
    set_nonblock(s->lfd);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(s->lfd, (struct sockaddr *)&ss, &sl);
    s->port = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                            : ((struct sockaddr_in6 *)&ss)->sin6_port);
    cohort_log(COHORT_LOG_INFO, SUBSYS, "rendezvous server listening on port %d for %d ranks "
               "(job %s)", s->port, nranks, s->job_id);
    *out = s;
    return COHORT_SUCCESS;
}

int cohort_rdv_server_port(const cohort_rdv_server_t *s) { return s->port; }
int cohort_rdv_server_arrived(const cohort_rdv_server_t *s) { return s->narrived; }
int cohort_rdv_server_finished(const cohort_rdv_server_t *s)
{
    return s->narrived == s->nranks && s->nclosed == s->nranks;
}

void cohort_rdv_server_missing(const cohort_rdv_server_t *s, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    int shown = 0;
    for (int r = 0; r < s->nranks && used + 16 < len; r++)
        if (!s->arrived[r]) {
            if (shown == 32) {
                snprintf(buf + used, len - used, ",...");
                break;
            }
            used += (size_t)snprintf(buf + used, len - used, "%s%d", shown++ ? "," : "", r);
        }
}

void cohort_rdv_server_rank_info(const cohort_rdv_server_t *s, int rank,
                                 cohort_rdv_rank_info_t *info)
{
    memset(info, 0, sizeof *info);
    info->blamed = -1;
    if (rank < 0 || rank >= s->nranks) return;
    info->arrived = s->arrived[rank];
    info->lost_order = s->lost_order[rank];
    info->left = !s->closed[rank] ? 0 : s->lost_order[rank] ? 2 : 1;
    info->blamed = s->blamed[rank];
}

/* A rank's first report that another rank is lost (a PEER_LOST notice or FAIL about it). */
static void note_blame(cohort_rdv_server_t *s, int from, int about, int32_t status)
{
    if (from >= 0 && from < s->nranks && about >= 0 && about < s->nranks && about != from &&
        status == COHORT_ERR_PEER_LOST && s->blamed[from] < 0)
        s->blamed[from] = about;
}

/* The IP of "ip:port" (IPv6 addresses hold colons: the port is after the last one). */
static void addr_host(const char *addr, char *host, size_t len)
{
    const char *colon = strrchr(addr, ':');
    size_t n = colon ? (size_t)(colon - addr) : strlen(addr);
    if (n >= len) n = len - 1;
    memcpy(host, addr, n);
    host[n] = '\0';
}

static void refuse(cohort_rdv_server_t *s, rdv_conn_t *c, int32_t code, const char *why)
{
    char host[INET6_ADDRSTRLEN];
    addr_host(c->addr, host, sizeof host);
    int seen = 0;
    for (int i = 0; i < s->nwarned && !seen; i++) seen = strcmp(s->warned[i], host) == 0;
    if (seen || s->nwarned == MAX_WARNED) {
        s->quiet_refusals++;
        cohort_log(COHORT_LOG_INFO, SUBSYS, "rendezvous: refused connection from %s: %s "
                   "(%lu refusals not logged at WARN so far)", c->addr, why, s->quiet_refusals);
    } else {
        snprintf(s->warned[s->nwarned++], sizeof s->warned[0], "%s", host);
        cohort_log(COHORT_LOG_WARN, SUBSYS, "rendezvous: refused connection from %s: %s%s",
                   c->addr, why, s->nwarned == MAX_WARNED
                   ? " (64 addresses refused: further refusals are logged at INFO only)"
                   : " (further refusals from this address are logged at INFO only)");
    }
    rdv_ack_t ack = { RDV_MAGIC, code, { 0 } };
    ssize_t w = send(c->fd, &ack, sizeof ack, MSG_NOSIGNAL);
    (void)w;
    c->rank = -1;
    conn_drop(s, c);
}

/* How many connections wait for their hello; *oldest: the one waiting longest (or NULL). */
static int pending_conns(cohort_rdv_server_t *s, rdv_conn_t **oldest)
{
    int n = 0;
    *oldest = NULL;
    for (int i = 0; i < s->nconns; i++) {
        rdv_conn_t *c = &s->conns[i];
        if (c->fd < 0 || c->rank >= 0) continue;
        n++;
        if (!*oldest || c->deadline_ns < (*oldest)->deadline_ns) *oldest = c;
    }
    return n;
}

static void accept_new(cohort_rdv_server_t *s)
{
    for (;;) {
        uint64_t now = cohort_now_ns();
        rdv_conn_t *oldest;
        if (pending_conns(s, &oldest) >= s->nranks + PENDING_SLACK) {
            uint64_t since = oldest->deadline_ns - HELLO_TIMEOUT_NS;
            if (now < since + PENDING_EVICT_NS) {   /* let the kernel's backlog hold the rest */
                s->accept_pause_until = since + PENDING_EVICT_NS;
                return;
            }
            refuse(s, oldest, ACK_REFUSED, "too many connections waiting for a hello at once; "
                   "dropped the one waiting longest (a port scan or a connection flood?)");
        }
        int fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return;
            /* EMFILE, ENFILE, ENOBUFS, ENOMEM: the listening socket stays readable, so polling
             * it again at once would spin. Pause, and free a descriptor held by a stranger. */
            if (!s->accept_err_logged) {
                s->accept_err_logged = 1;
                cohort_log(COHORT_LOG_WARN, SUBSYS, "rendezvous: cannot accept connections on "
                           "port %d: %s; retrying every %llu ms%s", s->port, strerror(errno),
                           ACCEPT_PAUSE_NS / 1000000ull, errno == EMFILE || errno == ENFILE
                           ? " (raise the descriptor limit: ulimit -n)" : "");
            }
            s->accept_pause_until = now + ACCEPT_PAUSE_NS;
            for (int i = 0; i < s->nconns; i++) {   /* ranks send their hello at once */
                rdv_conn_t *c = &s->conns[i];
                if (c->fd >= 0 && c->rank < 0 &&
                    now >= c->deadline_ns - HELLO_TIMEOUT_NS + PENDING_EVICT_NS)
                    refuse(s, c, ACK_REFUSED, "out of descriptors; dropped as it sent no hello "
                           "within 100 ms");
            }
            return;
        }
        if (s->nconns == s->capconns) {
            int cap = s->capconns ? s->capconns * 2 : 16;
            rdv_conn_t *nc = realloc(s->conns, (size_t)cap * sizeof *nc);
            if (!nc) { close(fd); return; }
            s->conns = nc;
            s->capconns = cap;
        }
        rdv_conn_t *c = &s->conns[s->nconns++];
        memset(c, 0, sizeof *c);
        c->fd = fd;
        c->rank = -1;
        c->deadline_ns = now + HELLO_TIMEOUT_NS;
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        peer_name(fd, c->addr, sizeof c->addr);
    }
}


static void handle_hello(cohort_rdv_server_t *s, rdv_conn_t *c)
{
    rdv_hello_t h;
    memcpy(&h, c->in, sizeof h);
    memmove(c->in, c->in + sizeof h, c->in_len - sizeof h);
    c->in_len -= sizeof h;
    unsigned char mac[32];
    char why[256];
    if (h.magic != RDV_MAGIC || h.version != RDV_VERSION) {
        refuse(s, c, ACK_REFUSED, "not a cohort rendezvous hello (wrong magic or version)");
        return;
    }
    h.job_id[COHORT_JOBID_MAX - 1] = '\0';
    if (strcmp(h.job_id, s->job_id)) {
        snprintf(why, sizeof why, "job id '%.63s' is not this job's ('%s'); a rank of another "
                 "job?", h.job_id, s->job_id);
        refuse(s, c, ACK_BAD_JOB, why);
        return;
    }
    hello_mac(s->secret, s->secretlen, &h, mac);
    if (!cohort_digest_equal(mac, h.mac, 32)) {
        refuse(s, c, ACK_BAD_MAC, "bad HMAC (wrong COHORT_SECRET?)");
        return;
    }
    if (h.nranks != s->nranks || h.rank < 0 || h.rank >= s->nranks) {
        snprintf(why, sizeof why, "rank %d of %d does not fit this job of %d ranks (check "
                 "COHORT_SIZE / WORLD_SIZE on every rank)", h.rank, h.nranks, s->nranks);
        refuse(s, c, ACK_BAD_RANK, why);
        return;
    }
    if (s->arrived[h.rank]) {
        snprintf(why, sizeof why, "rank %d already joined (a second cohort_comm_init of that "
                 "rank, or two processes with the same rank?)", h.rank);
        refuse(s, c, ACK_DUPLICATE, why);
        return;
    }
    c->rank = h.rank;
    h.host[sizeof h.host - 1] = '\0';
    snprintf(c->who, sizeof c->who, "host %.63s, pid %d", h.host, (int)h.pid);
    s->arrived[h.rank] = 1;
    s->narrived++;
    rdv_ack_t ack = { RDV_MAGIC, 0, { 0 } };
    ack_mac(s->secret, s->secretlen, &h, ack.mac);
    c->out = malloc(sizeof ack);
    if (c->out) {
        memcpy(c->out, &ack, sizeof ack);
        c->out_len = sizeof ack;
    }
    cohort_log(COHORT_LOG_TRACE, SUBSYS, "rendezvous: rank %d joined from %s (%d/%d)", h.rank,
               c->addr, s->narrived, s->nranks);
    if (s->fail[0]) conn_queue(c, MSG_FAIL, s->fail_round, s->fail, strlen(s->fail) + 1);
}

static void complete_round(cohort_rdv_server_t *s)
{
    uint64_t total = s->round_bytes * (uint64_t)s->nranks;
    for (int i = 0; i < s->nconns; i++)
        if (s->conns[i].fd >= 0 && s->conns[i].rank >= 0)
            conn_queue(&s->conns[i], MSG_RESULT, s->round, s->round_data, total);
    free(s->round_data);
    s->round_data = NULL;
    memset(s->round_have, 0, (size_t)s->nranks);
    s->round_count = 0;
    s->round++;
}

static void missing_text(cohort_rdv_server_t *s, char *buf, size_t len)
{
    size_t used = (size_t)snprintf(buf, len, "ranks not yet in round %u:", s->round);
    int shown = 0;
    for (int r = 0; r < s->nranks && used + 48 < len; r++)
        if (!s->round_have[r] && shown++ < 32)
            used += (size_t)snprintf(buf + used, len - used, " %d%s", r,
                                     s->arrived[r] ? "" : " (never connected)");
}

static void text_of(const unsigned char *payload, uint64_t n, char *out, size_t len)
{
    snprintf(out, len, "%.*s", (int)(n ? (n - 1 < len ? n - 1 : len - 1) : 0),
             (const char *)payload);
}

/* The stall report: once the first rank said it has been stuck for COHORT_STALL_WARN seconds,
 * and STALL_GATHER_NS passed (or every rank reported), one WARN that lists who waits in what and
 * which ranks did not report (they have not reached the collective, or left it). */
static void stall_report(cohort_rdv_server_t *s)
{
    if (!s->stall_first_ns) return;
    int reported = 0;
    for (int r = 0; r < s->nranks; r++) reported += s->stall_text[r] != NULL;
    if (reported < s->nranks && cohort_now_ns() < s->stall_first_ns + STALL_GATHER_NS) return;
    size_t cap = 512 + (size_t)s->nranks * 16, used = 0;
    for (int r = 0; r < s->nranks; r++)
        if (s->stall_text[r]) cap += strlen(s->stall_text[r]) + 16;
    char *text = malloc(cap);
    if (text) {
        int shown = 0, silent = 0;
        used += (size_t)snprintf(text + used, cap - used, "stall report: %d of %d ranks are "
                                 "stuck in a collective:", reported, s->nranks);
        for (int r = 0; r < s->nranks; r++)
            if (s->stall_text[r] && shown++ < 64)
                used += (size_t)snprintf(text + used, cap - used, "\n  rank %d: %s", r,
                                         s->stall_text[r]);
        for (int r = 0; r < s->nranks; r++)
            if (!s->stall_text[r] && !s->closed[r]) {
                if (!silent++) used += (size_t)snprintf(text + used, cap - used, "\n  not in "
                                                        "any collective (not joined yet, or "
                                                        "done with their part): rank");
                if (silent <= 64) used += (size_t)snprintf(text + used, cap - used, " %d", r);
            }
        for (int r = 0; r < s->nranks; r++)
            if (!s->stall_text[r] && s->closed[r]) {
                used += (size_t)snprintf(text + used, cap - used, "\n  rank %d has left the "
                                         "job", r);
            }
        cohort_log(COHORT_LOG_WARN, "stall", "%s", text);
        free(text);
    }
    for (int r = 0; r < s->nranks; r++) {
        free(s->stall_text[r]);
        s->stall_text[r] = NULL;
    }
    s->stall_first_ns = 0;
}

/* Returns 0 to keep the connection, -1 when it was dropped. */
static int handle_msg(cohort_rdv_server_t *s, rdv_conn_t *c)
{
    while (c->in_len >= sizeof(rdv_hdr_t)) {
        rdv_hdr_t h;
        memcpy(&h, c->in, sizeof h);
        if (h.nbytes > RDV_MAX_PAYLOAD) {
            server_fail(s, "rank %d sent a malformed rendezvous message (%llu bytes)", c->rank,
                        (unsigned long long)h.nbytes);
            conn_drop(s, c);
            return -1;
        }
        if (c->in_len < sizeof h + h.nbytes) return 0;
        const unsigned char *payload = c->in + sizeof h;
        switch (h.type) {
        case MSG_GATHER:
            if (h.round != s->round || s->round_have[c->rank]) {
                server_fail(s, "rank %d is out of step in the bootstrap (round %u, expected %u)",
                            c->rank, h.round, s->round);
                break;
            }
            if (s->round_count == 0) {
                s->round_bytes = h.nbytes;
                free(s->round_data);
                s->round_data = malloc(h.nbytes * (uint64_t)s->nranks + 1);
                if (!s->round_data) {
                    server_fail(s, "rendezvous server out of memory in round %u", s->round);
                    break;
                }
            } else if (h.nbytes != s->round_bytes) {
                server_fail(s, "ranks disagree on the bootstrap exchange size in round %u: rank "
                            "%d sent %llu bytes, others %llu (different cohort versions?)",
                            s->round, c->rank, (unsigned long long)h.nbytes,
                            (unsigned long long)s->round_bytes);
                break;
            }
            if (h.nbytes) memcpy(s->round_data + (size_t)c->rank * h.nbytes, payload, h.nbytes);
            s->round_have[c->rank] = 1;
            if (++s->round_count == s->nranks && !s->fail[0]) complete_round(s);
            break;
        case MSG_FAIL: {
            char msg[900];
            text_of(payload, h.nbytes, msg, sizeof msg);
            if (h.round) {   /* a notice: says who (fail_code) */
                note_blame(s, c->rank, (int)(h.round & 0xffff) - 1,
                           -(int32_t)(h.round >> 16 & 0xff));
                server_fail_code(s, h.round, "%s", msg);
            } else {
                server_fail(s, "rank %d failed: %s", c->rank, msg);
            }
            break;
        }
        case MSG_NOTICE: {   /* the first failure of each communicator goes to everyone */
            if (h.nbytes < NOTICE_HEAD + 1 || h.nbytes > NOTICE_MAX) {   /* ranks take no more */
                server_fail(s, "rank %d sent a malformed notice (%llu bytes)", c->rank,
                            (unsigned long long)h.nbytes);
                conn_drop(s, c);
                return -1;
            }
            uint64_t id;
            int32_t about, status;
            memcpy(&id, payload, sizeof id);
            memcpy(&about, payload + 8, sizeof about);
            memcpy(&status, payload + 12, sizeof status);
            note_blame(s, c->rank, about, status);
            /* one per communicator and rank it is about (a chain of timeouts: the rank blamed
             * first may blame another in turn) */
            uint64_t key = id ^ ((uint64_t)(uint32_t)about * 0x9e3779b97f4a7c15ull);
            int seen = 0;
            for (int i = 0; i < s->nnoticed && !seen; i++) seen = s->noticed[i] == key;
            if (seen || s->shutting_down) break;
            if (s->nnoticed < MAX_NOTICED) s->noticed[s->nnoticed++] = key;
            char msg[900];
            text_of(payload + NOTICE_HEAD, h.nbytes - NOTICE_HEAD, msg, sizeof msg);
            cohort_log(COHORT_LOG_WARN, SUBSYS, "rendezvous: communicator %016llx failed: %s",
                       (unsigned long long)id, msg);
            for (int i = 0; i < s->nconns; i++)
                if (s->conns[i].fd >= 0 && s->conns[i].rank >= 0 && !s->conns[i].bye)
                    conn_queue(&s->conns[i], MSG_NOTICE, 0, payload, h.nbytes);
            break;
        }
        case MSG_NOTE: {   /* forwarded to every other rank, the sender in the round field */
            char msg[900];
            text_of(payload, h.nbytes, msg, sizeof msg);
            cohort_log(COHORT_LOG_INFO, SUBSYS, "rendezvous: note from rank %d: %s", c->rank, msg);
            for (int i = 0; i < s->nconns; i++)
                if (&s->conns[i] != c && s->conns[i].fd >= 0 && s->conns[i].rank >= 0 &&
                    !s->conns[i].bye)
                    conn_queue(&s->conns[i], MSG_NOTE, (uint32_t)c->rank, msg, strlen(msg) + 1);
            break;
        }
        case MSG_STALL: {
            char msg[900];
            text_of(payload, h.nbytes, msg, sizeof msg);
            free(s->stall_text[c->rank]);
            s->stall_text[c->rank] = strdup(msg);
            if (!s->stall_first_ns) s->stall_first_ns = cohort_now_ns();
            break;
        }
        case MSG_BYE:
            c->bye = 1;
            break;
        case MSG_QUERY: {
            char text[1024];
            missing_text(s, text, sizeof text);
            conn_queue(c, MSG_MISSING, s->round, text, strlen(text) + 1);
            break;
        }
        default:
            server_fail(s, "rank %d sent an unknown rendezvous message type %u", c->rank, h.type);
            conn_drop(s, c);
            return -1;
        }
        size_t used = sizeof h + h.nbytes;
        memmove(c->in, c->in + used, c->in_len - used);
        c->in_len -= used;
    }
    return 0;
}

static void read_conn(cohort_rdv_server_t *s, rdv_conn_t *c)
{
    for (;;) {
        if (c->in_cap - c->in_len < 65536) {
            size_t cap = c->in_cap ? c->in_cap * 2 : 131072;
            unsigned char *n = realloc(c->in, cap);
            if (!n) break;
            c->in = n;
            c->in_cap = cap;
        }
        /* A connection that has not proved itself gets no more than a hello's bytes read: a
         * stranger cannot make the server buffer what it sends. */
        size_t want = c->in_cap - c->in_len;
        if (c->rank < 0) {
            if (c->in_len >= sizeof(rdv_hello_t)) break;
            want = sizeof(rdv_hello_t) - c->in_len;
        } else if (c->in_len > sizeof(rdv_hdr_t) + RDV_MAX_PAYLOAD) {
            break;   /* more than one whole message waits: handle it first */
        }
        ssize_t r = recv(c->fd, c->in + c->in_len, want, 0);
        if (r > 0) {
            c->in_len += (size_t)r;
            continue;
        }
        if (r < 0 && (errno == EINTR)) continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        /* EOF or error: first act on what arrived before it (a BYE, a FAIL) */
        if (c->rank >= 0 && handle_msg(s, c) < 0) return;
        if (c->rank >= 0 && !c->bye && s->narrived > 0)
            server_fail_code(s, fail_code(c->rank, COHORT_ERR_PEER_LOST), "rank %d (%s) is "
                             "gone: its connection to the job's rendezvous closed without a "
                             "goodbye (the process was killed, crashed, or called _exit)",
                             c->rank, c->who);
        conn_drop(s, c);
        return;
    }
    if (c->rank < 0) {
        if (c->in_len >= sizeof(rdv_hello_t)) handle_hello(s, c);
        if (c->fd < 0 || c->rank < 0) return;
    }
    handle_msg(s, c);
}

cohort_status_t cohort_rdv_server_progress(cohort_rdv_server_t *s, int timeout_ms)
{
    int n = s->nconns + 1;
    struct pollfd *pfd = calloc((size_t)n, sizeof *pfd);
    if (!pfd) return cohort_error(COHORT_ERR_NO_MEMORY, "rendezvous: no memory");
    /* while accepting is paused (out of descriptors, or too many strangers waiting) the
     * listening socket is left out, and the poll bounded by the pause */
    uint64_t now0 = cohort_now_ns();
    pfd[0].fd = now0 < s->accept_pause_until ? -1 : s->lfd;
    pfd[0].events = POLLIN;
    if (pfd[0].fd < 0) {
        int left = (int)((s->accept_pause_until - now0) / 1000000ull) + 1;
        if (timeout_ms < 0 || timeout_ms > left) timeout_ms = left;
    }
    for (int i = 0; i < s->nconns; i++) {
        rdv_conn_t *c = &s->conns[i];
        pfd[i + 1].fd = c->fd;
        pfd[i + 1].events = (short)(POLLIN | (c->out_off < c->out_len ? POLLOUT : 0));
    }
    int r = poll(pfd, (nfds_t)n, timeout_ms);
    if (r > 0) {
        int old = s->nconns;
        for (int i = 0; i < old; i++) {
            rdv_conn_t *c = &s->conns[i];
            if (c->fd < 0) continue;
            if (pfd[i + 1].revents & POLLOUT) conn_flush(c);
            if (pfd[i + 1].revents & (POLLIN | POLLHUP | POLLERR)) read_conn(s, c);
        }
        if (pfd[0].revents & POLLIN) accept_new(s);
    }
    free(pfd);
    uint64_t now = cohort_now_ns();
    int live = 0;
    for (int i = 0; i < s->nconns; i++) {
        rdv_conn_t *c = &s->conns[i];
        if (c->fd < 0) continue;
        if (c->rank < 0 && now > c->deadline_ns) {
            refuse(s, c, ACK_REFUSED, "no hello within 10 s (port scan or a stray client?)");
            continue;
        }
        conn_flush(c);
        if (c->bye && c->out_off == c->out_len) conn_drop(s, c);
        if (c->fd >= 0) live++;
    }
    stall_report(s);
    /* compact dropped connections */
    if (live < s->nconns / 2) {
        int k = 0;
        for (int i = 0; i < s->nconns; i++)
            if (s->conns[i].fd >= 0) s->conns[k++] = s->conns[i];
        s->nconns = k;
    }
    return COHORT_SUCCESS;
}

static void *server_thread(void *arg)
{
    cohort_rdv_server_t *s = arg;
    while (!atomic_load(&s->stop) && !cohort_rdv_server_finished(s))
        cohort_rdv_server_progress(s, 50);
    return NULL;
}

cohort_status_t cohort_rdv_server_start_thread(cohort_rdv_server_t *s)
{
    int e = pthread_create(&s->thread, NULL, server_thread, s);
    if (e) return cohort_error(COHORT_ERR_SYSTEM, "cannot start the rendezvous thread: %s",
                               strerror(e));
    s->has_thread = 1;
    return COHORT_SUCCESS;
}

void cohort_rdv_server_shutdown(cohort_rdv_server_t *s)
{
    if (!s) return;
    if (s->has_thread) {
        atomic_store(&s->stop, 1);
        pthread_join(s->thread, NULL);
        s->has_thread = 0;
    }
    s->shutting_down = 1;
    for (int i = 0; i < s->nconns; i++) {
        rdv_conn_t *c = &s->conns[i];
        if (c->fd < 0 || c->rank < 0 || c->bye) continue;
        conn_queue(c, MSG_SHUTDOWN, 0, NULL, 0);
        /* a short, bounded flush: the message is 16 bytes behind at most a few small ones */
        uint64_t deadline = cohort_now_ns() + 200000000ull;
        while (c->out_off < c->out_len && cohort_now_ns() < deadline) {
            conn_flush(c);
            if (c->out_off < c->out_len) {
                struct pollfd p = { c->fd, POLLOUT, 0 };
                if (poll(&p, 1, 20) < 0 && errno != EINTR) break;
            }
        }
    }
}

void cohort_rdv_server_destroy(cohort_rdv_server_t *s)
{
    if (!s) return;
    if (s->has_thread) {
        atomic_store(&s->stop, 1);
        pthread_join(s->thread, NULL);
    }
    for (int i = 0; i < s->nconns; i++) conn_drop(s, &s->conns[i]);
    if (s->lfd >= 0) close(s->lfd);
    for (int r = 0; s->stall_text && r < s->nranks; r++) free(s->stall_text[r]);
    free(s->stall_text);
    free(s->conns);
    free(s->arrived);
    free(s->closed);
    free(s->lost_order);
    free(s->blamed);
    free(s->round_have);
    free(s->round_data);
    free(s);
}

/* ======================================= client ========================================= */

struct cohort_rdv_client {
    int fd;
    uint32_t round;
    int nranks, rank;
    char url[300];
};

/* A host name (letters, digits, '.', '-', '_'), or inside brackets an IPv6 address (hex digits,
 * ':' and '.', then an optional %zone of name characters). */
static int valid_url_host(const char *h, size_t n, int bracketed)
{
    if (n == 0 || h[0] == '-' || h[0] == '.') return 0;
    int in_zone = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)h[i];
        int name_char = isalnum(ch) || ch == '.' || ch == '-' || ch == '_';
        if (!bracketed || in_zone) {
            if (!name_char) return 0;
        } else if (ch == '%' && i > 0 && i + 1 < n) {
            in_zone = 1;
        } else if (!isxdigit(ch) && ch != ':' && ch != '.') {
            return 0;
        }
    }
    return !bracketed || memchr(h, ':', n) != NULL;
}

cohort_status_t cohort_rdv_parse_url(const char *url, char *host, size_t hostlen, int *port)
{
    if (!url || strncmp(url, "tcp://", 6))
        return cohort_error(COHORT_ERR_INVALID_ARG, "rendezvous address '%s' is not "
                            "tcp://host:port", url ? url : "(null)");
    const char *h = url + 6, *colon;
    size_t hl;
    int bracketed = *h == '[';
    if (bracketed) {
        const char *close_br = strchr(h, ']');
        if (!close_br || close_br[1] != ':')
            return cohort_error(COHORT_ERR_INVALID_ARG, "rendezvous address '%s': bad [IPv6] "
                                "host (expected tcp://[address]:port)", url);
        h++;
        hl = (size_t)(close_br - h);
        colon = close_br + 1;
    } else {
        colon = strrchr(h, ':');
        if (!colon)
            return cohort_error(COHORT_ERR_INVALID_ARG, "rendezvous address '%s' has no :port "
                                "(expected tcp://host:port)", url);
        hl = (size_t)(colon - h);
    }
    if (hl == 0 || hl >= hostlen)
        return cohort_error(COHORT_ERR_INVALID_ARG, "rendezvous address '%s': %s host", url,
                            hl ? "too long a" : "no");
    if (!valid_url_host(h, hl, bracketed))
        return cohort_error(COHORT_ERR_INVALID_ARG, "rendezvous address '%s': '%.*s' is not a "
                            "host name or address%s (expected tcp://host:port, "
                            "tcp://10.0.0.1:port or tcp://[fe80::1%%eth0]:port)", url, (int)hl,
                            h, !bracketed && memchr(h, ':', hl) ? "; an IPv6 address goes in "
                            "brackets" : "");
    char *end;
    errno = 0;
    long p = strtol(colon + 1, &end, 10);
    if (errno || *end || end == colon + 1 || p < 1 || p > 65535 || colon[1] == '-' ||
        colon[1] == '+' || colon[1] == ' ')
        return cohort_error(COHORT_ERR_INVALID_ARG, "rendezvous address '%s': port '%s' is not "
                            "a number in [1, 65535]", url, colon + 1);
    memcpy(host, h, hl);
    host[hl] = '\0';
    *port = (int)p;
    return COHORT_SUCCESS;
}

/* Waits for fd to become ready for events, until deadline. 1 ready, 0 timeout. */
static int wait_fd(int fd, short events, uint64_t deadline)
{
    for (;;) {
        uint64_t now = cohort_now_ns();
        if (now >= deadline) return 0;
        uint64_t left_ms = (deadline - now) / 1000000 + 1;
        struct pollfd p = { fd, events, 0 };
        int r = poll(&p, 1, left_ms > 1000 ? 1000 : (int)left_ms);
        if (r > 0) return 1;
        if (r < 0 && errno != EINTR) return 1;   /* let the I/O call report it */
    }
}

static cohort_status_t io_all(int fd, void *buf, size_t len, int writing, uint64_t deadline,
                              const char *what)
{
    unsigned char *p = buf;
    while (len) {
        if (!wait_fd(fd, writing ? POLLOUT : POLLIN, deadline))
            return cohort_error(COHORT_ERR_TIMEOUT, "%s timed out", what);
        ssize_t r = writing ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
        if (r > 0) {
            p += r;
            len -= (size_t)r;
        } else if (r < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) {
            continue;
        } else {
            return cohort_error(COHORT_ERR_PEER_LOST, "%s failed: %s", what,
                                r == 0 ? "the rendezvous server closed the connection (its "
                                "process ended, or it refused us: see its log)" : strerror(errno));
        }
    }
    return COHORT_SUCCESS;
}

/* One connection attempt. On failure: *gai is getaddrinfo's error (0 when the name resolved),
 * else *err the errno of the last address tried. */
static int try_connect(const char *host, int port, uint64_t deadline, int *err, int *gai)
{
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_NUMERICSERV }, *res = NULL;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    *gai = getaddrinfo(host, ps, &hints, &res);
    if (*gai) {
        *err = *gai == EAI_SYSTEM ? errno : 0;
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) { *err = errno; continue; }
        if (connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
            *err = errno;
            close(fd);
            fd = -1;
            continue;
        }
        uint64_t cd = cohort_now_ns() + 5000000000ull;
        if (!wait_fd(fd, POLLOUT, cd < deadline ? cd : deadline)) {
            *err = ETIMEDOUT;
            close(fd);
            fd = -1;
            continue;
        }
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
        if (soerr) {
            *err = soerr;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    return fd;
}

/* The client's account of a refused hello (the ack's status says why). */
static cohort_status_t refused(const char *url, int rank, int nranks, const char *job_id,
                               int32_t why)
{
    switch (why) {
    case ACK_BAD_JOB:
        return cohort_error(COHORT_ERR_MISMATCH, "the rendezvous at %s serves another job than "
                            "this rank's '%s' (COHORT_JOB_ID differs between ranks, or another "
                            "job's server holds this address); refused rank %d", url, job_id,
                            rank);
    case ACK_BAD_MAC:
        return cohort_error(COHORT_ERR_MISMATCH, "the rendezvous at %s refused rank %d of job "
                            "'%s': its hello was not signed with the job's secret "
                            "(COHORT_SECRET differs between ranks?)", url, rank, job_id);
    case ACK_BAD_RANK:
        return cohort_error(COHORT_ERR_MISMATCH, "the rendezvous at %s refused rank %d of %d: "
                            "the job it serves has another size, or no rank %d (COHORT_SIZE, "
                            "WORLD_SIZE or the launcher's size differs between ranks?)", url,
                            rank, nranks, rank);
    case ACK_DUPLICATE:
        return cohort_error(COHORT_ERR_MISMATCH, "the rendezvous at %s refused rank %d: rank %d "
                            "already joined job '%s'. A process joins a job once: a second "
                            "cohort_comm_init in one job (make more communicators with "
                            "cohort_comm_split), or two processes started with the same rank?",
                            url, rank, rank, job_id);
    default:
        return cohort_error(COHORT_ERR_MISMATCH, "the rendezvous at %s refused rank %d of %d "
                            "(job '%s'); the server's log says why", url, rank, nranks, job_id);
    }
}

cohort_status_t cohort_rdv_connect(const char *url, const char *job_id, const void *secret,
                                   size_t secretlen, int rank, int nranks, double timeout_s,
                                   cohort_rdv_client_t **out)
{
    *out = NULL;
    char host[256];
    int port;
    cohort_status_t st = cohort_rdv_parse_url(url, host, sizeof host, &port);
    if (st) return st;
    if (strlen(job_id) >= COHORT_JOBID_MAX)
        return cohort_error(COHORT_ERR_INVALID_ARG, "job id '%s' is longer than %d characters",
                            job_id, COHORT_JOBID_MAX - 1);
    uint64_t deadline = cohort_now_ns() + (uint64_t)(timeout_s * 1e9);
    unsigned backoff_ms = 20;
    int fd = -1, err = 0, gai = 0, tries = 0;
    for (;;) {
        tries++;
        fd = try_connect(host, port, deadline, &err, &gai);
        if (fd >= 0) break;
        /* A name the resolver says does not exist will not start to: fail now. Only a
         * temporary resolver failure (EAI_AGAIN) or a refused connection is waited out. */
        if (gai && gai != EAI_AGAIN && !(gai == EAI_SYSTEM && (err == EINTR || err == EAGAIN)))
            return cohort_error(COHORT_ERR_INVALID_ARG, "rank %d cannot resolve the rendezvous "
                                "host '%s' (of %s): %s. Check the name (COHORT_RENDEZVOUS, or "
                                "MASTER_ADDR under torchrun) and this host's resolver "
                                "(/etc/hosts, DNS)", rank, host, url,
                                gai == EAI_SYSTEM ? strerror(err) : gai_strerror(gai));
        if (cohort_now_ns() + (uint64_t)backoff_ms * 1000000ull >= deadline) {
            char last[400];
            if (gai)
                snprintf(last, sizeof last, "cannot resolve '%s': %s", host,
                         gai == EAI_SYSTEM ? strerror(err) : gai_strerror(gai));
            else
                snprintf(last, sizeof last, "%s", strerror(err));
            return cohort_error(COHORT_ERR_TIMEOUT, "rank %d could not reach the rendezvous at "
                                "%s after %d tries in %.0f s (last error: %s). Is rank 0 (or "
                                "cohortrun) running, and is %s reachable from this host? "
                                "COHORT_TIMEOUT sets the wait", rank, url, tries, timeout_s,
                                last, host);
        }
        struct timespec ts = { (time_t)(backoff_ms / 1000), (long)(backoff_ms % 1000) * 1000000L };
        nanosleep(&ts, NULL);
        if (backoff_ms < 1000) backoff_ms *= 2;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    rdv_hello_t h;
    memset(&h, 0, sizeof h);
    h.magic = RDV_MAGIC;
    h.version = RDV_VERSION;
    snprintf(h.job_id, sizeof h.job_id, "%s", job_id);
    h.rank = rank;
    h.nranks = nranks;
    h.pid = (int32_t)getpid();
    if (gethostname(h.host, sizeof h.host) != 0) snprintf(h.host, sizeof h.host, "?");
    h.host[sizeof h.host - 1] = '\0';
    if (getrandom(h.nonce, sizeof h.nonce, 0) != (ssize_t)sizeof h.nonce) {
        uint64_t t = cohort_now_ns() ^ (uint64_t)getpid() << 32;
        memcpy(h.nonce, &t, sizeof t);
    }
    hello_mac(secret, secretlen, &h, h.mac);
    st = io_all(fd, &h, sizeof h, 1, deadline, "sending the rendezvous hello");
    rdv_ack_t ack;
    if (!st) st = io_all(fd, &ack, sizeof ack, 0, deadline, "waiting for the rendezvous ack");
    if (!st) {
        unsigned char mac[32];
        ack_mac(secret, secretlen, &h, mac);
        if (ack.magic != RDV_MAGIC || ack.status != ACK_OK)
            st = refused(url, rank, nranks, job_id, ack.magic == RDV_MAGIC ? ack.status
                                                                           : ACK_REFUSED);
        else if (!cohort_digest_equal(mac, ack.mac, 32))
            st = cohort_error(COHORT_ERR_MISMATCH, "the rendezvous at %s did not prove it knows "
                              "the job secret; refusing it (another job on that port?)", url);
    }
    if (st) {
        close(fd);
        cohort_error_prefix("rank %d joining the rendezvous at %s", rank, url);
        return st;
    }
    cohort_rdv_client_t *c = calloc(1, sizeof *c);
    if (!c) {
        close(fd);
        return cohort_error(COHORT_ERR_NO_MEMORY, "no memory for the rendezvous client");
    }
    c->fd = fd;
    c->rank = rank;
    c->nranks = nranks;
    snprintf(c->url, sizeof c->url, "%s", url);
    *out = c;
    return COHORT_SUCCESS;
}

static cohort_status_t send_msg(cohort_rdv_client_t *c, uint32_t type, const void *data,
                                uint64_t n, uint64_t deadline)
{
    rdv_hdr_t h = { type, c->round, n };
    cohort_status_t st = io_all(c->fd, &h, sizeof h, 1, deadline, "sending to the rendezvous");
    if (!st && n) st = io_all(c->fd, (void *)(uintptr_t)data, n, 1, deadline,
                              "sending to the rendezvous");
    return st;
}

/* Reads one message header + text payload of a FAIL/MISSING message into text. */
static cohort_status_t read_text(cohort_rdv_client_t *c, const rdv_hdr_t *h, char *text,
                                 size_t len, uint64_t deadline)
{
    if (h->nbytes > NOTICE_MAX)
        return cohort_error(COHORT_ERR_INTERNAL, "malformed message from the rendezvous");
    char *tmp = malloc(h->nbytes + 1);
    if (!tmp) return cohort_error(COHORT_ERR_NO_MEMORY, "no memory");
    cohort_status_t st = io_all(c->fd, tmp, h->nbytes, 0, deadline, "reading the rendezvous");
    tmp[h->nbytes] = '\0';
    snprintf(text, len, "%s", tmp);
    free(tmp);
    return st;
}

cohort_status_t cohort_rdv_allgather(cohort_rdv_client_t *c, const void *sendbuf, void *recvbuf,
                                     size_t nbytes, double timeout_s)
{
    uint64_t deadline = cohort_now_ns() + (uint64_t)(timeout_s * 1e9);
    cohort_status_t st = send_msg(c, MSG_GATHER, sendbuf, nbytes, deadline);
    int queried = 0;
    char text[1024];
    while (!st) {
        rdv_hdr_t h;
        st = io_all(c->fd, &h, sizeof h, 0, deadline, "waiting for the other ranks");
        if (st == COHORT_ERR_TIMEOUT && !queried) {
            /* Ask the server who is missing, so the message names them. */
            queried = 1;
            deadline = cohort_now_ns() + 3000000000ull;
            st = send_msg(c, MSG_QUERY, NULL, 0, deadline);
            continue;
        }
        if (st) break;
        if (h.type == MSG_RESULT) {
            if (h.nbytes != (uint64_t)nbytes * (uint64_t)c->nranks)
                return cohort_error(COHORT_ERR_MISMATCH, "bootstrap round %u: got %llu bytes, "
                                    "expected %zu x %d ranks", c->round,
                                    (unsigned long long)h.nbytes, nbytes, c->nranks);
            st = io_all(c->fd, recvbuf, h.nbytes, 0, deadline, "receiving the bootstrap data");
            if (!st) c->round++;
            return st;
        }
        if (h.type == MSG_FAIL || h.type == MSG_MISSING) {
            st = read_text(c, &h, text, sizeof text, deadline);
            if (st) break;
            if (h.type == MSG_FAIL)
                return cohort_error(COHORT_ERR_PEER_LOST, "bootstrap failed: %s", text);
            if (!queried) continue;   /* a late answer to an earlier round's query */
            return cohort_error(COHORT_ERR_TIMEOUT, "rank %d waited %.0f s at the rendezvous "
                                "%s; %s. Check that those ranks started (launcher logs) and "
                                "reach this address; COHORT_TIMEOUT sets the wait", c->rank,
                                timeout_s, c->url, text);
        }
        return cohort_error(COHORT_ERR_INTERNAL, "unexpected message type %u from the "
                            "rendezvous", h.type);
    }
    if (queried && st == COHORT_ERR_TIMEOUT)
        st = cohort_error(COHORT_ERR_TIMEOUT, "rank %d waited %.0f s at the rendezvous %s for "
                          "the other ranks and the server did not answer; COHORT_TIMEOUT sets "
                          "the wait", c->rank, timeout_s, c->url);
    return st;
}

int cohort_rdv_fd(const cohort_rdv_client_t *c) { return c ? c->fd : -1; }

static cohort_status_t next_event(cohort_rdv_client_t *c, cohort_rdv_event_t *ev);

cohort_status_t cohort_rdv_next_event(cohort_rdv_client_t *c, cohort_rdv_event_t *ev)
{
    cohort_status_t st = next_event(c, ev);
    /* A message refused or cut short: its header is read but not all of its payload, so the
     * next read would take payload bytes for a header. Nothing more can be trusted: close. */
    if (st && c && c->fd >= 0) {
        close(c->fd);
        c->fd = -1;
    }
    return st;
}

static cohort_status_t next_event(cohort_rdv_client_t *c, cohort_rdv_event_t *ev)
{
    memset(ev, 0, sizeof *ev);
    ev->rank = -1;
    if (!c || c->fd < 0) return COHORT_SUCCESS;
    struct pollfd p = { c->fd, POLLIN, 0 };
    if (poll(&p, 1, 0) <= 0) return COHORT_SUCCESS;
    uint64_t deadline = cohort_now_ns() + 1000000000ull;
    rdv_hdr_t h;
    unsigned char *hp = (unsigned char *)&h;
    ssize_t r = recv(c->fd, hp, sizeof h, MSG_PEEK | MSG_DONTWAIT);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        ev->kind = COHORT_RDV_EV_GONE;
        snprintf(ev->text, sizeof ev->text, "%s", r == 0 ? "the rendezvous server closed the "
                 "connection (its process ended, or it refused us: see its log)"
                 : strerror(errno));
        close(c->fd);
        c->fd = -1;
        return COHORT_SUCCESS;
    }
    if (r < 0) return COHORT_SUCCESS;
    cohort_status_t st = io_all(c->fd, &h, sizeof h, 0, deadline, "reading the rendezvous");
    if (st) return st;
    switch (h.type) {
    case MSG_NOTICE: {
        if (h.nbytes < NOTICE_HEAD + 1 || h.nbytes > NOTICE_MAX)
            return cohort_error(COHORT_ERR_INTERNAL, "malformed notice from the rendezvous");
        unsigned char *buf = malloc(h.nbytes);
        if (!buf) return cohort_error(COHORT_ERR_NO_MEMORY, "no memory");
        st = io_all(c->fd, buf, h.nbytes, 0, deadline, "reading the rendezvous");
        if (!st) {
            int32_t about, status;
            memcpy(&ev->comm_id, buf, 8);
            memcpy(&about, buf + 8, 4);
            memcpy(&status, buf + 12, 4);
            ev->kind = COHORT_RDV_EV_FAIL;
            ev->rank = about;
            ev->status = status < 0 && status > -256 ? (cohort_status_t)status
                                                     : COHORT_ERR_PEER_LOST;
            text_of(buf + NOTICE_HEAD, h.nbytes - NOTICE_HEAD, ev->text, sizeof ev->text);
        }
        free(buf);
        return st;
    }
    case MSG_FAIL:
        ev->kind = COHORT_RDV_EV_FAIL;
        ev->rank = (int)(h.round & 0xffff) - 1;
        ev->status = (h.round >> 16) & 0xff ? -(cohort_status_t)((h.round >> 16) & 0xff)
                                            : COHORT_ERR_PEER_LOST;
        return read_text(c, &h, ev->text, sizeof ev->text, deadline);
    case MSG_NOTE:
        ev->kind = COHORT_RDV_EV_NOTE;
        ev->rank = (int)h.round;
        return read_text(c, &h, ev->text, sizeof ev->text, deadline);
    case MSG_MISSING:   /* a late answer to a query of the bootstrap */
        return read_text(c, &h, ev->text, sizeof ev->text, deadline);
    case MSG_SHUTDOWN:
        ev->kind = COHORT_RDV_EV_SHUTDOWN;
        close(c->fd);
        c->fd = -1;
        return COHORT_SUCCESS;
    default:
        return cohort_error(COHORT_ERR_INTERNAL, "unexpected message type %u from the "
                            "rendezvous", h.type);
    }
}

cohort_status_t cohort_rdv_send(cohort_rdv_client_t *c, cohort_rdv_msg_t kind, uint64_t comm_id,
                                int about, cohort_status_t status, const char *text)
{
    if (!c || c->fd < 0) return COHORT_SUCCESS;
    uint64_t deadline = cohort_now_ns() + 1000000000ull;
    size_t tl = strlen(text) + 1;
    if (tl > 4096) tl = 4096;
    unsigned char buf[NOTICE_HEAD + 4096];
    size_t n = 0;
    rdv_hdr_t h = { kind == COHORT_RDV_NOTE ? MSG_NOTE : MSG_STALL, 0, 0 };
    if (kind == COHORT_RDV_NOTICE && comm_id == 0) {   /* about the whole job */
        h.type = MSG_FAIL;
        h.round = fail_code(about, status);
    } else if (kind == COHORT_RDV_NOTICE) {
        int32_t a = about, stv = status;
        h.type = MSG_NOTICE;
        memcpy(buf, &comm_id, 8);
        memcpy(buf + 8, &a, 4);
        memcpy(buf + 12, &stv, 4);
        n = NOTICE_HEAD;
    }
    memcpy(buf + n, text, tl);
    buf[n + tl - 1] = '\0';
    h.nbytes = n + tl;
    cohort_status_t st = io_all(c->fd, &h, sizeof h, 1, deadline, "sending to the rendezvous");
    if (!st) st = io_all(c->fd, buf, h.nbytes, 1, deadline, "sending to the rendezvous");
    return st;
}

ssize_t cohort_rdv_encode_notice(char *buf, size_t len, int about, cohort_status_t status,
                                 const char *text)
{
    size_t n = strlen(text) + 1;
    rdv_hdr_t h = { MSG_FAIL, fail_code(about, status), n };
    if (len < sizeof h + n) return -1;
    memcpy(buf, &h, sizeof h);
    memcpy(buf + sizeof h, text, n);
    return (ssize_t)(sizeof h + n);
}

cohort_status_t cohort_rdv_check(cohort_rdv_client_t *c)
{
    if (!c) return COHORT_SUCCESS;
    cohort_rdv_event_t ev;
    cohort_status_t st = cohort_rdv_next_event(c, &ev);
    if (st) return st;
    if (ev.kind == COHORT_RDV_EV_FAIL)
        return cohort_error(COHORT_ERR_PEER_LOST, "bootstrap failed: %s", ev.text);
    if (ev.kind == COHORT_RDV_EV_GONE || ev.kind == COHORT_RDV_EV_SHUTDOWN)
        return cohort_error(COHORT_ERR_PEER_LOST, "reading the rendezvous failed: %s",
                            ev.kind == COHORT_RDV_EV_GONE ? ev.text : "the server shut down");
    return COHORT_SUCCESS;   /* a note, or a late answer to an earlier round's query */
}

void cohort_rdv_fail(cohort_rdv_client_t *c, const char *msg)
{
    if (!c) return;
    uint64_t deadline = cohort_now_ns() + 1000000000ull;
    send_msg(c, MSG_FAIL, msg, strlen(msg) + 1, deadline);
}

void cohort_rdv_close(cohort_rdv_client_t *c)
{
    if (!c) return;
    uint64_t deadline = cohort_now_ns() + 1000000000ull;
    if (c->fd >= 0) {
        send_msg(c, MSG_BYE, NULL, 0, deadline);
        close(c->fd);
    }
    free(c);
}
