/* SPDX-License-Identifier: BSD-3-Clause */
/* The TCP rendezvous client: a rank's hello, the rounds of allgather through the server, and the
 * job's control channel from the rank's side (see rendezvous.h). Its server is
 * core/rendezvous_server.c. */
#include "core/rdv_wire.h"
#include "core/log.h"
#include "core/timeutil.h"

#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>


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
