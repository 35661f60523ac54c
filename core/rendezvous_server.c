/* SPDX-License-Identifier: BSD-3-Clause */
/* The TCP rendezvous server: accepts the ranks' authenticated hellos and runs the rounds of
 * allgather, then serves the job's control channel (failures, notices, stall reports) until
 * every rank has left (see rendezvous.h). Its client is core/rendezvous.c. */
#include "core/rdv_wire.h"
#include "core/log.h"
#include "core/timeutil.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define SUBSYS "boot"
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

#define MAX_NOTICED 256
#define STALL_GATHER_NS (2ull * 1000000000ull)   /* collect stall reports this long, then log */

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

