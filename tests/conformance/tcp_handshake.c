/* SPDX-License-Identifier: BSD-3-Clause */
/* tcp-handshake PLUGIN.so: the TCP transport refuses what it must refuse.
 *
 * Stray, malformed, forged and replayed connections to an endpoint are closed without an answer
 * and logged once at WARN with the remote address and the reason, and the endpoint goes on
 * accepting; a connector refuses an acceptor that cannot prove the job secret; ranks with
 * different COHORT_SOCKET_NSOCKS still talk; a lost peer's error names its rank and address;
 * reachability probes are closed quietly by the listener, and can_reach picks the peer's most
 * preferred address that answers within COHORT_SOCKET_PROBE_MS, says why it dropped the others,
 * remembers unreachable addresses, and ignores loopback addresses of another namespace; nothing
 * leaks a descriptor. Knows the TCP wire format (transports/tcp/tcp_wire.h).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include "core/log.h"
#include "core/plugin_loader.h"
#include "transports/tcp/tcp_wire.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const cohort_transport_v1_t *T;
static cohort_tp_ctx_t CTX;
static const cohort_host_v1_t *H;
static int failures;
static const char *JOB = "tcp-handshake-job";

#define CHECK(cond, ...)                                                                   \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            printf("FAIL  %s:%d: ", __FILE__, __LINE__);                                   \
            printf(__VA_ARGS__);                                                           \
            printf("\n");                                                                  \
            failures++;                                                                    \
        }                                                                                  \
    } while (0)

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n - 1;
}

typedef struct ep {
    cohort_tp_ep_t ep;
    unsigned char addr[COHORT_ADDR_MAX];
    size_t alen;
    tcp_addr_t a;
} ep_t;

static void open_ep(ep_t *e, int rank, int nranks, uint64_t comm)
{
    cohort_ep_info_t info = { sizeof info, rank, nranks, comm, JOB };
    e->alen = sizeof e->addr;
    cohort_status_t st = T->ep_open(CTX, &info, &e->ep, e->addr, &e->alen);
    if (st != COHORT_SUCCESS) {
        printf("FAIL  ep_open: %s\n", cohort_last_error());
        exit(1);
    }
    if (tcp_addr_decode(e->addr, e->alen, &e->a) != 0) {
        printf("FAIL  ep_open produced an address tcp_wire.h cannot decode\n");
        exit(1);
    }
}

/* Drives the endpoints for up to `secs` or until done() says so. */
static int drive(ep_t **eps, int n, double secs, int (*done)(void *), void *arg)
{
    double end = now() + secs;
    for (;;) {
        for (int i = 0; i < n; i++) T->progress(eps[i]->ep);
        if (done && done(arg)) return 1;
        if (now() > end) return 0;
        struct pollfd p[8];
        for (int i = 0; i < n; i++) {
            p[i].fd = T->ep_fd(eps[i]->ep);
            p[i].events = POLLIN;
        }
        poll(p, (nfds_t)n, 10);
    }
}

/* Connects to the endpoint's first (most preferred) candidate address. */
static int raw_connect(const tcp_addr_t *addr, char *me, size_t melen)
{
    const tcp_cand_t *a = &addr->cand[0];
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    socklen_t sl;
    if (a->family == AF_INET) {
        struct sockaddr_in *s = (struct sockaddr_in *)(void *)&ss;
        s->sin_family = AF_INET;
        memcpy(&s->sin_addr, a->addr, 4);
        s->sin_port = htons(a->port);
        sl = sizeof *s;
    } else {
        struct sockaddr_in6 *s = (struct sockaddr_in6 *)(void *)&ss;
        s->sin6_family = AF_INET6;
        memcpy(&s->sin6_addr, a->addr, 16);
        s->sin6_port = htons(a->port);
        sl = sizeof *s;
    }
    int fd = socket(a->family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&ss, sl) != 0) {
        printf("FAIL  raw connect: %s\n", strerror(errno));
        exit(1);
    }
    struct sockaddr_storage mine;
    socklen_t ml = sizeof mine;
    getsockname(fd, (struct sockaddr *)&mine, &ml);
    char ip[INET6_ADDRSTRLEN];
    unsigned port;
    if (mine.ss_family == AF_INET) {
        inet_ntop(AF_INET, &((struct sockaddr_in *)(void *)&mine)->sin_addr, ip, sizeof ip);
        port = ntohs(((struct sockaddr_in *)(void *)&mine)->sin_port);
        snprintf(me, melen, "%s:%u", ip, port);
    } else {
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)(void *)&mine)->sin6_addr, ip, sizeof ip);
        port = ntohs(((struct sockaddr_in6 *)(void *)&mine)->sin6_port);
        snprintf(me, melen, "[%s]:%u", ip, port);
    }
    return fd;
}

static void make_hello(tcp_hello_t *h, const char *job, uint64_t comm, uint32_t src,
                       uint32_t dst, uint32_t nranks, uint32_t idx, uint32_t nsocks)
{
    memset(h, 0, sizeof *h);
    h->magic = TCP_HELLO_MAGIC;
    h->version = TCP_PROTO_VERSION;
    snprintf(h->job_id, sizeof h->job_id, "%s", job);
    h->comm_id = comm;
    h->src = src;
    h->dst = dst;
    h->nranks = nranks;
    h->sock_idx = idx;
    h->nsocks = nsocks;
    for (int i = 0; i < TCP_NONCE_LEN; i++) h->nonce[i] = (unsigned char)rand();
}

/* Encodes h, signs it with the job secret unless forge, and fills b. */
static void sign_hello(tcp_hello_t *h, unsigned char *b, int forge)
{
    tcp_hello_encode(h, b);
    if (forge) {
        for (int i = 0; i < TCP_MAC_LEN; i++) b[TCP_HELLO_MAC_OFF + i] = (unsigned char)rand();
        return;
    }
    tcp_hello_seal(H, b);
}

typedef struct closed_arg {
    int fd;
    int got;           /* bytes the endpoint sent back */
    int closed;
} closed_arg_t;

static int peer_closed(void *v)
{
    closed_arg_t *c = v;
    for (;;) {
        unsigned char b[256];
        ssize_t r = recv(c->fd, b, sizeof b, MSG_DONTWAIT);
        if (r > 0) {
            c->got += (int)r;
            continue;
        }
        if (r == 0 || (r < 0 && errno == ECONNRESET)) c->closed = 1;
        return c->closed;
    }
}

/* One attack: sends `len` bytes (or nothing), expects the endpoint to close without answering
 * and one line with our address and `reason`: at WARN for the first refusal from this IP, at
 * INFO for the later ones (a scan from one address does not flood the log). */
static char logbuf[1 << 16];
static int attacks;
static void capture_read(void);

static void attack(ep_t *e, const char *name, const void *bytes, size_t len,
                   const char *reason, int close_early)
{
    char me[80];
    int fd = raw_connect(&e->a, me, sizeof me);
    if (len) {
        ssize_t w = send(fd, bytes, len, MSG_NOSIGNAL);
        CHECK(w == (ssize_t)len, "%s: send", name);
    }
    if (close_early) shutdown(fd, SHUT_WR);
    closed_arg_t c = { fd, 0, 0 };
    ep_t *eps[1] = { e };
    int ok = drive(eps, 1, 10.0, peer_closed, &c);
    CHECK(ok && c.closed, "%s: the endpoint did not close the connection", name);
    CHECK(c.got == 0, "%s: the endpoint answered %d bytes to a bad handshake", name, c.got);
    close(fd);
    capture_read();
    /* the log line */
    char pat[160];
    snprintf(pat, sizeof pat, "refused a connection from %s ", me);
    int lines = 0;
    const char *line = NULL;
    for (const char *p = logbuf; (p = strstr(p, pat)); p++) {
        lines++;
        line = p;
    }
    (void)lines;
    CHECK(line != NULL, "%s: no line names %s", name, me);
    const char *level = attacks++ == 0 ? " WARN " : " INFO ";
    if (line) {
        const char *bol = line;
        while (bol > logbuf && bol[-1] != '\n') bol--;
        const char *eol = strchr(line, '\n');
        size_t l = eol ? (size_t)(eol - line) : strlen(line);
        char text[600], head[200];
        snprintf(text, sizeof text, "%.*s", (int)l, line);
        snprintf(head, sizeof head, "%.*s", (int)(line - bol), bol);
        CHECK(strstr(text, reason) != NULL, "%s: the log line does not say '%s': %s", name,
              reason, text);
        CHECK(strstr(head, level) != NULL, "%s: refusal %d from this address is not logged at%s"
              "(%s%s)", name, attacks, level, head, text);
        printf("ok    %-28s %s\n", name, strstr(text, ": ") ? strstr(text, ": ") + 2 : text);
    }
}

static int logfd = -1, saved_stderr = -1;
static char logpath[4096];

static void capture_start(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(logpath, sizeof logpath, "%s/tcp-handshake-log-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    fflush(stderr);
    logfd = mkstemp(logpath);
    if (logfd < 0) {
        printf("FAIL  mkstemp %s: %s\n", logpath, strerror(errno));
        exit(1);
    }
    saved_stderr = dup(2);
    dup2(logfd, 2);
}

static void capture_read(void)
{
    fflush(stderr);
    ssize_t n = pread(logfd, logbuf, sizeof logbuf - 1, 0);
    logbuf[n > 0 ? n : 0] = '\0';
}

static void capture_stop(void)
{
    capture_read();
    dup2(saved_stderr, 2);
    close(saved_stderr);
    close(logfd);
    unlink(logpath);
}

typedef struct conns_arg {
    cohort_tp_conn_t a, b;
    cohort_status_t sa, sb;
} conns_arg_t;

static int both_ready(void *v)
{
    conns_arg_t *c = v;
    if (c->a && c->sa == COHORT_IN_PROGRESS) c->sa = T->conn_test(c->a);
    if (c->b && c->sb == COHORT_IN_PROGRESS) c->sb = T->conn_test(c->b);
    return (!c->a || c->sa != COHORT_IN_PROGRESS) && (!c->b || c->sb != COHORT_IN_PROGRESS);
}

typedef struct reqs_arg {
    cohort_tp_req_t r[4];
    cohort_status_t st[4];
    size_t nb[4];
    int n;
} reqs_arg_t;

static int reqs_done(void *v)
{
    reqs_arg_t *q = v;
    int left = 0;
    for (int i = 0; i < q->n; i++) {
        if (q->st[i] != COHORT_IN_PROGRESS) continue;
        q->st[i] = T->test(q->r[i], &q->nb[i]);
        if (q->st[i] == COHORT_IN_PROGRESS) left++;
    }
    return !left;
}

/* Exchanges len bytes both ways over conns a (on e0) and b (on e1). */
static void exchange(ep_t *e0, ep_t *e1, cohort_tp_conn_t a, cohort_tp_conn_t b, size_t len,
                     const char *what)
{
    unsigned char *s0 = malloc(len + 1), *s1 = malloc(len + 1), *r0 = malloc(len + 1),
                  *r1 = malloc(len + 1);
    for (size_t i = 0; i < len; i++) {
        s0[i] = (unsigned char)(i * 7 + 1);
        s1[i] = (unsigned char)(i * 13 + 5);
    }
    reqs_arg_t q = { .n = 4 };
    for (int i = 0; i < 4; i++) q.st[i] = COHORT_IN_PROGRESS;
    CHECK(T->irecv(a, r0, len, 42, NULL, &q.r[0]) == COHORT_SUCCESS, "%s: irecv", what);
    CHECK(T->irecv(b, r1, len, 42, NULL, &q.r[1]) == COHORT_SUCCESS, "%s: irecv", what);
    CHECK(T->isend(a, s0, len, 42, NULL, &q.r[2]) == COHORT_SUCCESS, "%s: isend", what);
    CHECK(T->isend(b, s1, len, 42, NULL, &q.r[3]) == COHORT_SUCCESS, "%s: isend", what);
    ep_t *eps[2] = { e0, e1 };
    CHECK(drive(eps, 2, 30.0, reqs_done, &q), "%s: transfer did not finish", what);
    for (int i = 0; i < 4; i++)
        CHECK(q.st[i] == COHORT_SUCCESS, "%s: request %d: %s", what, i, cohort_strerror(q.st[i]));
    CHECK(q.nb[0] == len && q.nb[1] == len, "%s: sizes %zu/%zu", what, q.nb[0], q.nb[1]);
    CHECK(!memcmp(r0, s1, len) && !memcmp(r1, s0, len), "%s: data differs", what);
    free(s0);
    free(s1);
    free(r0);
    free(r1);
}

/* A fake acceptor: accepts every socket of one connect and answers with `mode`. */
enum { FAKE_BAD_MAC, FAKE_CLOSE };
static void fake_acceptor(ep_t *conn_ep, int mode, const char *expect)
{
    const tcp_cand_t *own = &conn_ep->a.cand[0];
    int lfd = socket(own->family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    socklen_t sl;
    if (own->family == AF_INET) {
        struct sockaddr_in *s = (struct sockaddr_in *)(void *)&ss;
        s->sin_family = AF_INET;
        memcpy(&s->sin_addr, own->addr, 4);
        sl = sizeof *s;
    } else {
        struct sockaddr_in6 *s = (struct sockaddr_in6 *)(void *)&ss;
        s->sin6_family = AF_INET6;
        memcpy(&s->sin6_addr, own->addr, 16);
        sl = sizeof *s;
    }
    if (bind(lfd, (struct sockaddr *)&ss, sl) || listen(lfd, 16)) {
        printf("FAIL  fake acceptor: %s\n", strerror(errno));
        exit(1);
    }
    getsockname(lfd, (struct sockaddr *)&ss, &sl);
    uint16_t port = ntohs(own->family == AF_INET
                          ? ((struct sockaddr_in *)(void *)&ss)->sin_port
                          : ((struct sockaddr_in6 *)(void *)&ss)->sin6_port);
    /* An address blob for "rank 0" of conn_ep's communicator pointing at the fake (connect
     * without can_reach: the first usable candidate). */
    tcp_addr_t fa = conn_ep->a;
    fa.ncand = 1;
    fa.cand[0].port = port;
    fa.rank = 0;
    unsigned char blob[TCP_ADDR_MAX_SIZE];
    size_t blen = tcp_addr_encode(&fa, blob, sizeof blob);
    cohort_tp_conn_t c = NULL;
    cohort_status_t st = T->connect(conn_ep->ep, 0, blob, blen, &c);
    CHECK(st == COHORT_SUCCESS && c, "fake acceptor: connect: %s", cohort_last_error());
    if (!c) {
        close(lfd);
        return;
    }
    int fds[TCP_MAX_NSOCKS], nfd = 0;
    double end = now() + 10;
    st = COHORT_IN_PROGRESS;
    while (st == COHORT_IN_PROGRESS && now() < end) {
        struct pollfd p = { lfd, POLLIN, 0 };
        if (poll(&p, 1, 5) > 0 && nfd < TCP_MAX_NSOCKS) {
            int fd = accept(lfd, NULL, NULL);
            unsigned char hello[TCP_HELLO_SIZE];
            size_t got = 0;
            /* the connector sends its hello once it sees the connection complete */
            while (got < sizeof hello && now() < end) {
                T->conn_test(c);
                struct pollfd q = { fd, POLLIN, 0 };
                if (poll(&q, 1, 5) > 0) {
                    ssize_t r = recv(fd, hello + got, sizeof hello - got, 0);
                    if (r <= 0) break;
                    got += (size_t)r;
                }
            }
            if (mode == FAKE_BAD_MAC && got == sizeof hello) {
                unsigned char ack[TCP_ACK_SIZE];
                kit_put_le32(ack, TCP_ACK_MAGIC);
                kit_put_le32(ack + 4, TCP_PROTO_VERSION);
                kit_put_le32(ack + 8, 0);
                kit_put_le32(ack + 12, kit_get_le32(hello + 92));
                for (int i = 0; i < TCP_MAC_LEN; i++) ack[TCP_ACK_MAC_OFF + i] = (unsigned char)i;
                ssize_t w = send(fd, ack, sizeof ack, MSG_NOSIGNAL);
                (void)w;
                fds[nfd++] = fd;
            } else {
                close(fd);
            }
        }
        st = T->conn_test(c);
    }
    CHECK(st < 0, "fake acceptor (%s): the connector accepted an unauthenticated peer (%s)",
          mode == FAKE_BAD_MAC ? "forged ack" : "no ack", cohort_strerror(st));
    if (st < 0) {
        const char *m = cohort_last_error();
        CHECK(strstr(m, expect) != NULL, "fake acceptor: error does not say '%s': %s", expect, m);
        printf("ok    %-28s %s\n", mode == FAKE_BAD_MAC ? "forged ack refused" :
               "acceptor hangs up", m);
    }
    T->conn_close(c);
    for (int i = 0; i < nfd; i++) close(fds[i]);
    close(lfd);
}

/* ---- reachability probes ------------------------------------------------------------------ */

/* A TCP listener on ip (IPv4) with the given backlog; returns its port, *fd the socket. */
static uint16_t listen4(const char *ip, int backlog, int *fd)
{
    struct sockaddr_in s;
    memset(&s, 0, sizeof s);
    s.sin_family = AF_INET;
    inet_pton(AF_INET, ip, &s.sin_addr);
    socklen_t sl = sizeof s;
    *fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (*fd < 0 || bind(*fd, (struct sockaddr *)&s, sl) || listen(*fd, backlog) ||
        getsockname(*fd, (struct sockaddr *)&s, &sl)) {
        printf("FAIL  listen on %s: %s\n", ip, strerror(errno));
        exit(1);
    }
    return ntohs(s.sin_port);
}

/* A port on ip that nobody listens on (connection refused). */
static uint16_t closed_port4(const char *ip)
{
    int fd;
    struct sockaddr_in s;
    memset(&s, 0, sizeof s);
    s.sin_family = AF_INET;
    inet_pton(AF_INET, ip, &s.sin_addr);
    socklen_t sl = sizeof s;
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&s, sl) || getsockname(fd, (struct sockaddr *)&s, &sl)) {
        printf("FAIL  bind on %s: %s\n", ip, strerror(errno));
        exit(1);
    }
    close(fd);
    return ntohs(s.sin_port);
}

static tcp_cand_t cand4(const char *ip, uint16_t port, const char *ifname)
{
    tcp_cand_t c;
    memset(&c, 0, sizeof c);
    c.family = AF_INET;
    inet_pton(AF_INET, ip, c.addr);
    c.port = port;
    c.prefix_len = 8;
    snprintf(c.ifname, sizeof c.ifname, "%s", ifname);
    return c;
}

/* The log line of the latest capture that contains pat, or "" (copied to out). */
static const char *log_line(const char *pat, char *out, size_t len)
{
    const char *line = NULL;
    for (const char *p = logbuf; (p = strstr(p, pat)); p++) line = p;
    out[0] = '\0';
    if (!line) return out;
    while (line > logbuf && line[-1] != '\n') line--;
    const char *eol = strchr(line, '\n');
    size_t l = eol ? (size_t)(eol - line) : strlen(line);
    snprintf(out, len, "%.*s", (int)l, line);
    return out;
}

static void probes(void)
{
    setenv("COHORT_DEBUG", "INFO", 1);
    setenv("COHORT_SOCKET_PROBE_MS", "300", 1);
    cohort_log_reset();
    capture_start();
    ep_t p0, p1;
    open_ep(&p0, 0, 2, 81);
    open_ep(&p1, 1, 2, 81);
    cohort_tp_conn_t acc = NULL;
    CHECK(T->accept(p0.ep, 1, &acc) == COHORT_SUCCESS, "probes: accept");
    ep_t *both[2] = { &p0, &p1 };
    char line[2048], pat[200];

    /* The probe marker, whole or in two pieces: closed without an answer, no WARN. */
    for (int split = 0; split < 2; split++) {
        char me[80];
        int fd = raw_connect(&p0.a, me, sizeof me);
        unsigned char m[TCP_PROBE_SIZE];
        tcp_probe_encode(m);
        if (split) {
            CHECK(send(fd, m, 3, MSG_NOSIGNAL) == 3, "probe: send");
            drive(both, 1, 0.05, NULL, NULL);
            CHECK(send(fd, m + 3, sizeof m - 3, MSG_NOSIGNAL) == (ssize_t)(sizeof m - 3),
                  "probe: send");
        } else {
            CHECK(send(fd, m, sizeof m, MSG_NOSIGNAL) == (ssize_t)sizeof m, "probe: send");
        }
        closed_arg_t c = { fd, 0, 0 };
        CHECK(drive(both, 1, 10.0, peer_closed, &c) && c.closed,
              "probe marker%s: the endpoint did not close the connection", split ? " (split)" : "");
        CHECK(c.got == 0, "probe marker: the endpoint answered %d bytes", c.got);
        close(fd);
        capture_read();
        snprintf(pat, sizeof pat, "connection from %s ", me);
        CHECK(!strstr(logbuf, pat), "probe marker: the endpoint logged the probe as a bad "
              "connection: %s", log_line(pat, line, sizeof line));
    }
    CHECK(T->conn_test(acc) == COHORT_IN_PROGRESS, "a probe touched the accept");
    printf("ok    %-28s\n", "probe marker closed quietly");

    /* A blob for rank 0 whose preferred addresses do not answer: one refuses, one is silent
     * (a listener whose backlog is full drops the SYN), then rank 0's real ones. */
    int silent_fd, fill[2];
    uint16_t silent = listen4("127.0.0.2", 0, &silent_fd);
    for (int i = 0; i < 2; i++) {
        fill[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        struct sockaddr_in s;
        memset(&s, 0, sizeof s);
        s.sin_family = AF_INET;
        inet_pton(AF_INET, "127.0.0.2", &s.sin_addr);
        s.sin_port = htons(silent);
        (void)connect(fill[i], (struct sockaddr *)&s, sizeof s);
        struct pollfd q = { fill[i], POLLOUT, 0 };
        (void)poll(&q, 1, i == 0 ? 2000 : 100);
    }
    uint16_t refused = closed_port4("127.0.0.1");
    tcp_addr_t d = p0.a;
    d.cand[0] = cand4("127.0.0.1", refused, "refused0");
    d.cand[1] = cand4("127.0.0.2", silent, "silent0");
    d.ncand = 2;
    for (unsigned i = 0; i < p0.a.ncand && d.ncand < TCP_ADDR_MAX_CANDS; i++)
        d.cand[d.ncand++] = p0.a.cand[i];
    unsigned char blob[TCP_ADDR_MAX_SIZE];
    size_t blen = tcp_addr_encode(&d, blob, sizeof blob);
    double t0 = now();
    int r = T->can_reach(p1.ep, 0, blob, blen);
    double dt = now() - t0;
    CHECK(r == 1, "can_reach with two dead addresses first: %d", r);
    CHECK(dt >= 0.25 && dt < 3.0, "can_reach took %.3f s (COHORT_SOCKET_PROBE_MS=300)", dt);
    capture_read();
    log_line("rank 1 reaches rank 0", line, sizeof line);
    char want[3][160];
    char ap[80];
    snprintf(want[0], sizeof want[0], "refused0 127.0.0.1:%u (Connection refused)", refused);
    snprintf(want[1], sizeof want[1], "silent0 127.0.0.2:%u (no answer within 300 ms)", silent);
    const tcp_cand_t *c0 = &p0.a.cand[0];
    inet_ntop(c0->family, c0->addr, ap, sizeof ap);
    snprintf(want[2], sizeof want[2], c0->family == AF_INET ? "at %s %s:%u from " :
             "at %s [%s]:%u from ", c0->ifname, ap, c0->port);
    for (int i = 0; i < 3; i++)
        CHECK(strstr(line, want[i]), "the INFO line does not say '%s': '%s'", want[i], line);
    if (r == 1) printf("ok    %-28s %.3f s: %s\n", "dead addresses dropped", dt,
                       strstr(line, "tcp: ") ? strstr(line, "tcp: ") : line);

    /* connect dials the address that answered. */
    cohort_tp_conn_t con = NULL;
    CHECK(T->connect(p1.ep, 0, blob, blen, &con) == COHORT_SUCCESS, "connect after the probe: %s",
          cohort_last_error());
    conns_arg_t ca = { acc, con, COHORT_IN_PROGRESS, COHORT_IN_PROGRESS };
    CHECK(drive(both, 2, 10.0, both_ready, &ca) && ca.sa == COHORT_SUCCESS &&
          ca.sb == COHORT_SUCCESS, "connect after the probe did not complete (%s / %s)",
          cohort_strerror(ca.sa), cohort_strerror(ca.sb));
    if (ca.sa == COHORT_SUCCESS && ca.sb == COHORT_SUCCESS)
        exchange(&p0, &p1, acc, con, 100000, "after the probe");
    capture_read();
    CHECK(!strstr(logbuf, "WARN"), "the probes caused a WARN: %s", log_line("WARN", line,
                                                                             sizeof line));

    /* Again: the silent address is remembered, no second timeout. */
    t0 = now();
    r = T->can_reach(p1.ep, 0, blob, blen);
    dt = now() - t0;
    CHECK(r == 1 && dt < 0.2, "second can_reach: %d after %.3f s (the silent address should be "
          "remembered)", r, dt);

    /* Nothing answers: 0, an INFO line naming every address and why; connect refuses. */
    d.ncand = 2;
    size_t dlen = tcp_addr_encode(&d, blob, sizeof blob);
    r = T->can_reach(p1.ep, 0, blob, dlen);
    CHECK(r == 0, "can_reach with only dead addresses: %d", r);
    capture_read();
    log_line("rank 1 cannot reach rank 0", line, sizeof line);
    CHECK(strstr(line, want[0]) && strstr(line, "silent0 127.0.0.2") &&
          strstr(line, "found earlier"), "the INFO line does not name both addresses: '%s'",
          line);
    if (r == 0) printf("ok    %-28s %s\n", "nothing answers",
                       strstr(line, "tcp: ") ? strstr(line, "tcp: ") : line);
    cohort_tp_conn_t bad = NULL;
    cohort_status_t st = T->connect(p1.ep, 0, blob, dlen, &bad);
    CHECK(st == COHORT_ERR_TRANSPORT && !bad && strstr(cohort_last_error(), "rank 0"),
          "connect to a peer that did not answer: %s (%s)", cohort_strerror(st),
          cohort_last_error());
    if (bad) T->conn_close(bad);

    /* Another namespace: its loopback addresses, and addresses this host has too, are not
     * tried (they would reach this host). */
    d = p0.a;
    d.netns[0] ^= 0xff;
    t0 = now();
    r = T->can_reach(p1.ep, 0, blob, tcp_addr_encode(&d, blob, sizeof blob));
    dt = now() - t0;
    CHECK(r == 0 && dt < 0.2, "can_reach to another namespace with this host's addresses: %d "
          "after %.3f s", r, dt);
    capture_read();
    log_line("rank 1 cannot reach rank 0", line, sizeof line);
    for (unsigned i = 0; i < d.ncand; i++) {
        const char *why = (d.cand[i].flags & TCP_CAND_LOOPBACK)
            ? "loopback address of another host or network namespace"
            : "this host has the same address";
        CHECK(strstr(line, why), "another namespace: '%s' missing: '%s'", why, line);
    }
    if (r == 0) printf("ok    %-28s %s\n", "another namespace",
                       strstr(line, "tcp: ") ? strstr(line, "tcp: ") : line);

    /* A blob of another version is not reachable, and says so. */
    kit_put_le16(blob + 4, TCP_PROTO_VERSION + 1);
    CHECK(T->can_reach(p1.ep, 0, blob, tcp_addr_size(d.ncand)) == 0, "can_reach of a blob "
          "of another version");

    /* COHORT_SOCKET_PROBE_MS is checked. */
    setenv("COHORT_SOCKET_PROBE_MS", "0", 1);
    {
        cohort_ep_info_t info = { sizeof info, 0, 2, 82, JOB };
        unsigned char a[COHORT_ADDR_MAX];
        size_t al = sizeof a;
        cohort_tp_ep_t x = NULL;
        st = T->ep_open(CTX, &info, &x, a, &al);
        CHECK(st == COHORT_ERR_INVALID_ARG &&
              strstr(cohort_last_error(), "COHORT_SOCKET_PROBE_MS"),
              "COHORT_SOCKET_PROBE_MS=0 accepted (%s)", cohort_strerror(st));
        if (st == COHORT_SUCCESS) T->ep_close(x);
    }
    unsetenv("COHORT_SOCKET_PROBE_MS");

    T->ep_close(p0.ep);
    T->ep_close(p1.ep);
    for (int i = 0; i < 2; i++) close(fill[i]);
    close(silent_fd);
    capture_stop();
    setenv("COHORT_DEBUG", "WARN", 1);
    cohort_log_reset();
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: tcp-handshake path/to/libcohort-tcp.so\n");
        return 2;
    }
    setenv("COHORT_DEBUG", "WARN", 1);
    setenv("COHORT_JOB_ID", JOB, 1);
    unsetenv("COHORT_SOCKET_NSOCKS");
    srand(12345);
    int fds0 = count_fds();
    cohort_plugin_t *p;
    if (cohort_plugin_open(argv[1], &p) != COHORT_SUCCESS) {
        printf("FAIL  %s\n", cohort_last_error());
        return 1;
    }
    T = p->ops;
    CTX = p->ctx;
    H = cohort_plugin_host();

    /* ---- stray and forged connections to rank 0 -------------------------------------- */
    ep_t e0, e1;
    open_ep(&e0, 0, 2, 77);
    open_ep(&e1, 1, 2, 77);
    cohort_tp_conn_t acc = NULL;
    CHECK(T->accept(e0.ep, 1, &acc) == COHORT_SUCCESS, "accept");

    setenv("COHORT_DEBUG", "INFO", 1);   /* the later refusals are at INFO */
    cohort_log_reset();
    capture_start();
    tcp_hello_t h;
    unsigned char b[TCP_HELLO_SIZE];
    char junk[TCP_HELLO_SIZE];
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = (char)rand();

    attack(&e0, "connect and hang up", NULL, 0, "closed after 0 of", 1);
    attack(&e0, "garbage", junk, sizeof junk, "bad magic", 0);
    capture_read();
    make_hello(&h, JOB, 77, 1, 0, 2, 0, 2);
    sign_hello(&h, b, 0);
    attack(&e0, "half a handshake", b, 50, "closed after 50 of", 1);
    capture_read();
    make_hello(&h, JOB, 77, 1, 0, 2, 0, 2);
    sign_hello(&h, b, 1);
    attack(&e0, "forged HMAC", b, sizeof b, "HMAC does not verify", 0);
    capture_read();
    make_hello(&h, "another-job", 77, 1, 0, 2, 0, 2);
    sign_hello(&h, b, 0);
    attack(&e0, "another job", b, sizeof b, "job id 'another-job'", 0);
    capture_read();
    make_hello(&h, JOB, 78, 1, 0, 2, 0, 2);
    sign_hello(&h, b, 0);
    attack(&e0, "another communicator", b, sizeof b, "communicator id 78", 0);
    capture_read();
    make_hello(&h, JOB, 77, 1, 1, 2, 0, 2);
    sign_hello(&h, b, 0);
    attack(&e0, "meant for another rank", b, sizeof b, "wants rank 1", 0);
    capture_read();
    make_hello(&h, JOB, 77, 5, 0, 2, 0, 2);
    sign_hello(&h, b, 0);
    attack(&e0, "source rank out of range", b, sizeof b, "source rank 5 out of range", 0);
    capture_read();
    make_hello(&h, JOB, 77, 1, 0, 3, 0, 2);
    sign_hello(&h, b, 0);
    attack(&e0, "wrong communicator size", b, sizeof b, "3 ranks", 0);
    capture_read();
    make_hello(&h, JOB, 77, 1, 0, 2, 4, 2);
    sign_hello(&h, b, 0);
    attack(&e0, "socket index out of range", b, sizeof b, "socket 4 of 2", 0);
    capture_read();
    make_hello(&h, JOB, 77, 1, 0, 2, 0, 2);
    h.version = 99;
    sign_hello(&h, b, 0);
    attack(&e0, "another protocol version", b, sizeof b, "protocol version 99", 0);
    CHECK(T->conn_test(acc) == COHORT_IN_PROGRESS, "a refused connection touched the accept");

    /* ---- the real rank 1 still gets in ------------------------------------------------ */
    cohort_tp_conn_t con = NULL;
    CHECK(T->connect(e1.ep, 0, e0.addr, e0.alen, &con) == COHORT_SUCCESS, "connect");
    conns_arg_t ca = { acc, con, COHORT_IN_PROGRESS, COHORT_IN_PROGRESS };
    ep_t *both[2] = { &e0, &e1 };
    CHECK(drive(both, 2, 10.0, both_ready, &ca) && ca.sa == COHORT_SUCCESS &&
          ca.sb == COHORT_SUCCESS, "the legitimate connection did not complete (%s / %s)",
          cohort_strerror(ca.sa), cohort_strerror(ca.sb));
    exchange(&e0, &e1, acc, con, 3 * 1024 * 1024 + 11, "after the attacks");
    printf("ok    %-28s\n", "legitimate rank 1 connects");

    /* ---- a replayed/duplicate handshake for a socket already in use ------------------ */
    make_hello(&h, JOB, 77, 1, 0, 2, 0, 2);
    sign_hello(&h, b, 0);
    attack(&e0, "duplicate socket", b, sizeof b, "duplicate connection", 0);
    exchange(&e0, &e1, acc, con, 1000, "after the duplicate");
    capture_stop();
    setenv("COHORT_DEBUG", "WARN", 1);
    cohort_log_reset();

    /* ---- accept() out of descriptors ---------------------------------------------------- */
    /* Connections wait in the listen backlog; then this process may open no descriptor more,
     * and progress() meets EMFILE: one WARN, the listener leaves epoll for 100 ms (else ep_fd
     * would stay readable and every wait on it would spin), and after the limit is back the
     * waiting connections are taken. */
    {
        capture_start();
        enum { NWAIT = 4 };
        int waiting[NWAIT];
        char me[80];
        for (int i = 0; i < NWAIT; i++) {
            waiting[i] = raw_connect(&e0.a, me, sizeof me);
            CHECK(waiting[i] >= 0, "out of descriptors: connect %d", i);
        }
        struct rlimit rl, low;
        getrlimit(RLIMIT_NOFILE, &rl);
        low = rl;
        int used = 0;   /* the highest descriptor in use: no new one may be opened */
        for (int fd = 0; fd < 4096; fd++)
            if (fcntl(fd, F_GETFD) >= 0) used = fd + 1;
        low.rlim_cur = (rlim_t)used;
        CHECK(setrlimit(RLIMIT_NOFILE, &low) == 0, "setrlimit: %s", strerror(errno));
        static int fill[4096];   /* and the free numbers below it taken */
        int nfill = 0;
        while (nfill < 4096 && (fill[nfill] = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0)
            nfill++;
        for (int i = 0; i < 5; i++) T->progress(e0.ep);
        struct pollfd pf = { T->ep_fd(e0.ep), POLLIN, 0 };
        double t0 = now();
        int r = poll(&pf, 1, 60);
        CHECK(r == 0, "out of descriptors: ep_fd was readable after %.1f ms with nothing to do "
              "(the failing listener stays in epoll)", (now() - t0) * 1e3);
        for (int i = 0; i < 5; i++) T->progress(e0.ep);
        setrlimit(RLIMIT_NOFILE, &rl);
        for (int i = 0; i < nfill; i++) close(fill[i]);
        capture_read();
        int warns = 0;
        for (const char *q = logbuf; (q = strstr(q, "Too many open files; retrying every")); q++)
            warns++;
        CHECK(warns == 1, "out of descriptors: %d WARN lines for 10 progress calls (want 1): %s",
              warns, logbuf);
        /* with descriptors back, the waiting connections are accepted: each is refused once
         * it hangs up without a hello */
        for (int i = 0; i < NWAIT; i++) shutdown(waiting[i], SHUT_WR);
        for (int i = 0; i < NWAIT; i++) {
            closed_arg_t c = { waiting[i], 0, 0 };
            ep_t *eps[1] = { &e0 };
            CHECK(drive(eps, 1, 10.0, peer_closed, &c) && c.closed, "out of descriptors: "
                  "connection %d was not taken after the limit came back", i);
            close(waiting[i]);
        }
        capture_stop();
        if (warns == 1 && r == 0) printf("ok    %-28s one WARN, ep_fd quiet, taken later\n",
                                          "accept out of descriptors");
    }

    /* ---- the connector authenticates the acceptor too --------------------------------- */
    ep_t e2;
    open_ep(&e2, 1, 2, 78);
    fake_acceptor(&e2, FAKE_BAD_MAC, "failed authentication");
    fake_acceptor(&e2, FAKE_CLOSE, "refused this connection");
    T->ep_close(e2.ep);

    /* ---- different COHORT_SOCKET_NSOCKS on the two sides ------------------------------ */
    ep_t e3, e4;
    setenv("COHORT_SOCKET_NSOCKS", "3", 1);
    open_ep(&e3, 1, 2, 79);
    setenv("COHORT_SOCKET_NSOCKS", "1", 1);
    open_ep(&e4, 0, 2, 79);
    unsetenv("COHORT_SOCKET_NSOCKS");
    cohort_tp_conn_t c3 = NULL, c4 = NULL;
    CHECK(T->connect(e3.ep, 0, e4.addr, e4.alen, &c3) == COHORT_SUCCESS, "connect (3 sockets)");
    CHECK(T->accept(e4.ep, 1, &c4) == COHORT_SUCCESS, "accept (1 socket)");
    conns_arg_t cb = { c3, c4, COHORT_IN_PROGRESS, COHORT_IN_PROGRESS };
    ep_t *pair[2] = { &e3, &e4 };
    CHECK(drive(pair, 2, 10.0, both_ready, &cb) && cb.sa == COHORT_SUCCESS &&
          cb.sb == COHORT_SUCCESS, "3-socket connector and 1-socket acceptor did not connect");
    exchange(&e3, &e4, c3, c4, 5 * 1024 * 1024 + 3, "3 sockets vs 1");
    exchange(&e3, &e4, c3, c4, 10, "3 sockets vs 1, small");
    printf("ok    %-28s\n", "NSOCKS 3 against NSOCKS 1");

    /* A bad setting is refused with the variable's name. */
    setenv("COHORT_SOCKET_NSOCKS", "0", 1);
    {
        cohort_ep_info_t info = { sizeof info, 0, 2, 80, JOB };
        unsigned char a[COHORT_ADDR_MAX];
        size_t al = sizeof a;
        cohort_tp_ep_t x = NULL;
        cohort_status_t st = T->ep_open(CTX, &info, &x, a, &al);
        CHECK(st == COHORT_ERR_INVALID_ARG && strstr(cohort_last_error(), "COHORT_SOCKET_NSOCKS"),
              "COHORT_SOCKET_NSOCKS=0 accepted (%s)", cohort_strerror(st));
        if (st == COHORT_SUCCESS) T->ep_close(x);
    }
    unsetenv("COHORT_SOCKET_NSOCKS");

    /* ---- a lost peer is named ---------------------------------------------------------- */
    reqs_arg_t q = { .n = 1 };
    unsigned char rb[64];
    q.st[0] = COHORT_IN_PROGRESS;
    CHECK(T->irecv(c4, rb, sizeof rb, 1, NULL, &q.r[0]) == COHORT_SUCCESS, "irecv");
    T->conn_close(c3);
    ep_t *one[1] = { &e4 };
    CHECK(drive(one, 1, 10.0, reqs_done, &q), "receive from a closed peer did not fail");
    CHECK(q.st[0] == COHORT_ERR_PEER_LOST, "closed peer: %s", cohort_strerror(q.st[0]));
    char a3[80];
    snprintf(a3, sizeof a3, "rank 1 at ");
    CHECK(strstr(cohort_last_error(), a3) != NULL, "the error does not name rank 1 and its "
          "address: %s", cohort_last_error());
    printf("ok    %-28s %s\n", "lost peer named", cohort_last_error());
    /* Later requests fail at once or at test; no SIGPIPE (this process keeps the default). */
    static unsigned char big[8 << 20];
    cohort_tp_req_t r = NULL;
    cohort_status_t st = T->isend(c4, big, sizeof big, 2, NULL, &r);
    if (st == COHORT_SUCCESS) {
        reqs_arg_t q2 = { .n = 1 };
        q2.r[0] = r;
        q2.st[0] = COHORT_IN_PROGRESS;
        drive(one, 1, 10.0, reqs_done, &q2);
        st = q2.st[0];
    }
    CHECK(st == COHORT_ERR_PEER_LOST, "send after the loss: %s", cohort_strerror(st));

    probes();

    T->ep_close(e3.ep);
    T->ep_close(e4.ep);
    T->ep_close(e0.ep);    /* closes acc, with nothing in flight */
    T->ep_close(e1.ep);
    cohort_plugin_close(p);
    int fds1 = count_fds();
    CHECK(fds0 == fds1, "file descriptors: %d before, %d after", fds0, fds1);
    printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
