/* SPDX-License-Identifier: BSD-3-Clause */
/* libcohort-example.so: a minimal cohort transport plugin, written out of tree.
 *
 * It moves messages between the ranks of one machine over UNIX-domain stream sockets in the
 * abstract namespace (no files to clean up). It is meant to be read and copied: it follows
 * every rule of <cohort/plugin.h> and nothing more. See README.md beside it and docs/plugins.md.
 *
 * The shape of it:
 *  - ep_open binds a listening socket; its name travels to the other ranks in the address blob.
 *  - connect sends a 136-byte hello (magic, communicator, rank, job id, a fresh nonce, HMAC)
 *    first, so the acceptor can tell which accept(peer) the socket belongs to and refuse
 *    strangers; the acceptor answers with a 40-byte ack whose HMAC covers that hello (its
 *    nonce), so the connector refuses a stranger too. Neither side moves a message before.
 *  - every message is a 16-byte header (tag, length) followed by the payload. Messages on a
 *    connection are matched in order, so each direction is a FIFO of requests; the oldest
 *    incomplete one is `cur`. Completed requests stay in the list until test() frees them.
 *  - nothing blocks: all sockets are non-blocking and progress stops at EAGAIN.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1           /* accept4, SOCK_NONBLOCK */
#endif
#include <cohort/plugin.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#define EX_MAGIC 0x58452d74726f6863ull       /* "chort-EX" */
#define EX_ACK_MAGIC 0x4b41452d74726f68ull   /* "hort-EAK" */
#define EX_VERSION "1.0"

typedef struct ex_ctx {                  /* process-wide: one per init */
    const cohort_host_v1_t *host;
    char node[64];                       /* kernel boot id: identifies the machine */
    uint64_t netns;                      /* abstract sockets are per network namespace */
} ex_ctx;

typedef struct ex_addr {                 /* the blob the core hands to the other ranks */
    char node[64];
    uint64_t netns;
    uint32_t namelen;
    char name[sizeof(((struct sockaddr_un *)0)->sun_path)];
} ex_addr;

typedef struct ex_hello {                /* first bytes from connector to acceptor */
    uint64_t magic, comm_id;
    int32_t rank, unused;
    char job_id[64];
    unsigned char nonce[16];             /* fresh per connection: an ack answers this hello only */
    unsigned char mac[32];               /* host->auth() over all the fields above */
} ex_hello;

typedef struct ex_ack {                  /* the acceptor's answer, before any message */
    uint64_t magic;
    unsigned char mac[32];               /* host->auth() over the magic, then the whole hello */
} ex_ack;

typedef struct ex_msghdr { uint64_t tag, len; } ex_msghdr;   /* before every message */

typedef struct ex_req {
    struct ex_conn *conn;
    struct ex_req *prev, *next;          /* in its queue, in the order posted */
    int is_send;
    char *buf;
    size_t len;                          /* send: payload size; receive: buffer size */
    uint64_t tag;
    size_t done;                         /* bytes moved so far (a send counts its header) */
    ex_msghdr in;                        /* receive: header of the message that arrived */
    cohort_status_t status;              /* COHORT_IN_PROGRESS until complete */
} ex_req;

typedef struct ex_queue { ex_req *head, *tail, *cur; } ex_queue;

enum { EX_CONNECTING, EX_ACCEPTING, EX_READY, EX_FAILED };

typedef struct ex_conn {
    struct ex_ep *ep;
    struct ex_conn *next;
    int peer, fd, state;
    cohort_status_t err;                 /* EX_FAILED: why, for every later call */
    char why[200];
    struct sockaddr_un sa;               /* connector: where to connect (retried on EAGAIN) */
    socklen_t salen;
    ex_hello hello;                      /* connector: sent before any message */
    size_t hello_off;
    ex_ack ack;                          /* acceptor: sent first; connector: read first */
    size_t ack_off;                      /* == sizeof ack: done (or nothing to do) */
    int peer_ack;                        /* 1: the connector, which reads the ack */
    ex_msghdr rhdr;                      /* header being received */
    size_t rhdr_off;                     /* == sizeof rhdr: payload goes to recvq.cur */
    uint64_t skip;                       /* payload bytes of a refused message to discard */
    ex_queue sendq, recvq;
} ex_conn;

typedef struct ex_incoming {             /* accepted socket not yet matched to accept(peer) */
    struct ex_incoming *next;
    int fd;
    size_t off;
    ex_hello hello;
} ex_incoming;

typedef struct ex_ep {
    ex_ctx *ctx;
    int rank, nranks, listen_fd;
    uint64_t comm_id;
    char job_id[64];
    ex_conn *conns;
    ex_incoming *incoming;
} ex_ep;

static int again(void) { return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR; }

/* 1 when two MACs are equal; the time taken does not tell how many leading bytes matched. */
static int mac_equal(const unsigned char a[32], const unsigned char b[32])
{
    unsigned char d = 0;
    for (size_t i = 0; i < 32; i++)
        d |= (unsigned char)(a[i] ^ b[i]);
    return d == 0;
}

/* ---- process-wide ------------------------------------------------------------------------ */

static cohort_status_t ex_init(const cohort_host_v1_t *host, cohort_tp_ctx_t *out)
{
    ex_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return host->error(COHORT_ERR_NO_MEMORY, "example: out of memory in init");
    c->host = host;
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (!f || !fgets(c->node, sizeof c->node, f))
        gethostname(c->node, sizeof c->node - 1);
    if (f)
        fclose(f);
    struct stat st;
    if (stat("/proc/self/ns/net", &st) == 0)
        c->netns = st.st_ino;
    *out = c;
    return COHORT_SUCCESS;
}

static cohort_status_t ex_finalize(cohort_tp_ctx_t ctx)
{
    free(ctx);
    return COHORT_SUCCESS;
}

static cohort_status_t ex_get_attr(cohort_tp_ctx_t ctx, cohort_transport_attr_t *attr)
{
    (void)ctx;
    /* The caller says in attr->size how big its struct is; cohort_attr_fill (plugin.h) writes
     * no more than that. */
    cohort_transport_attr_t a = { .size = sizeof a, .scope = COHORT_SCOPE_NODE,
                                  .bandwidth_gbps = 4.0, .latency_us = 5.0 };
    cohort_attr_fill(attr, &a);
    return COHORT_SUCCESS;
}

/* ---- requests ---------------------------------------------------------------------------- */

static void complete_cur(ex_queue *q, cohort_status_t status)
{
    q->cur->status = status;
    q->cur = q->cur->next;      /* completions are in order: the next one is incomplete */
}

static void unlink_req(ex_queue *q, ex_req *r)
{
    *(r->prev ? &r->prev->next : &q->head) = r->next;
    *(r->next ? &r->next->prev : &q->tail) = r->prev;
}

static void free_queue(ex_queue *q)
{
    for (ex_req *r = q->head, *next; r; r = next) {
        next = r->next;
        free(r);
    }
    q->head = q->tail = q->cur = NULL;
}

/* ---- connections ------------------------------------------------------------------------- */

/* The connection is unusable: fail every incomplete request now and every later call. */
static void conn_fail(ex_conn *c, cohort_status_t status, const char *what, int err)
{
    if (c->state == EX_FAILED)
        return;
    snprintf(c->why, sizeof c->why, "example: connection of rank %d to rank %d: %s%s%s",
             c->ep->rank, c->peer, what, err ? ": " : "", err ? strerror(err) : "");
    c->ep->ctx->host->log(COHORT_LOG_INFO, "example", "%s", c->why);
    c->state = EX_FAILED;
    c->err = status;
    while (c->sendq.cur)
        complete_cur(&c->sendq, status);
    while (c->recvq.cur)
        complete_cur(&c->recvq, status);
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
}

static void io_fail(ex_conn *c, const char *what)
{
    int e = errno;
    if (e == EPIPE || e == ECONNRESET)
        conn_fail(c, COHORT_ERR_PEER_LOST, "peer closed the connection", 0);
    else
        conn_fail(c, COHORT_ERR_TRANSPORT, what, e);
}

static void send_progress(ex_conn *c)
{
    while (c->state == EX_READY && c->hello_off < sizeof c->hello) {   /* connector: hello */
        ssize_t k = send(c->fd, (char *)&c->hello + c->hello_off, sizeof c->hello - c->hello_off,
                         MSG_NOSIGNAL);                /* MSG_NOSIGNAL: EPIPE, never SIGPIPE */
        if (k < 0) {
            if (!again())
                io_fail(c, "send");
            return;
        }
        c->hello_off += (size_t)k;
    }
    while (c->state == EX_READY && c->peer_ack == 0 && c->ack_off < sizeof c->ack) {
        /* acceptor: the ack */
        ssize_t k = send(c->fd, (char *)&c->ack + c->ack_off, sizeof c->ack - c->ack_off,
                         MSG_NOSIGNAL);
        if (k < 0) {
            if (!again())
                io_fail(c, "send");
            return;
        }
        c->ack_off += (size_t)k;
    }
    while (c->state == EX_READY && c->ack_off == sizeof c->ack && c->sendq.cur) {
        ex_req *r = c->sendq.cur;
        ex_msghdr h = { r->tag, r->len };
        size_t pay = r->done > sizeof h ? r->done - sizeof h : 0;
        struct iovec iov[2];
        struct msghdr mh = { .msg_iov = iov, .msg_iovlen = 0 };
        if (r->done < sizeof h)
            iov[mh.msg_iovlen++] = (struct iovec){ (char *)&h + r->done, sizeof h - r->done };
        if (pay < r->len)
            iov[mh.msg_iovlen++] = (struct iovec){ r->buf + pay, r->len - pay };
        ssize_t k = sendmsg(c->fd, &mh, MSG_NOSIGNAL);
        if (k < 0) {
            if (!again())
                io_fail(c, "send");
            return;
        }
        r->done += (size_t)k;
        if (r->done == sizeof h + r->len)
            complete_cur(&c->sendq, COHORT_SUCCESS);
    }
}

/* The MAC an ack carries for hello h: over the ack's magic, then the whole hello. */
static void ack_mac(const cohort_host_v1_t *host, const ex_hello *h, unsigned char mac[32])
{
    struct { uint64_t magic; ex_hello hello; } in = { EX_ACK_MAGIC, *h };
    host->auth(&in, sizeof in, mac);
}

/* Connector: reads the ack and checks it answers our hello. */
static void ack_progress(ex_conn *c)
{
    while (c->state == EX_READY && c->peer_ack && c->hello_off == sizeof c->hello &&
           c->ack_off < sizeof c->ack) {
        ssize_t k = recv(c->fd, (char *)&c->ack + c->ack_off, sizeof c->ack - c->ack_off, 0);
        if (k == 0) {    /* the acceptor refused our hello, or went away */
            conn_fail(c, COHORT_ERR_PEER_LOST, "peer closed the connection before its ack "
                      "(it refused our hello: another job or a different COHORT_SECRET?)", 0);
            return;
        }
        if (k < 0) {
            if (!again())
                io_fail(c, "recv");
            return;
        }
        if ((c->ack_off += (size_t)k) < sizeof c->ack)
            continue;
        unsigned char mac[32];
        ack_mac(c->ep->ctx->host, &c->hello, mac);
        if (c->ack.magic != EX_ACK_MAGIC || !mac_equal(mac, c->ack.mac))
            conn_fail(c, COHORT_ERR_TRANSPORT, "the peer's ack did not verify: "
                      "authentication failed (different COHORT_SECRET?)", 0);
    }
}

static void recv_progress(ex_conn *c)
{
    char scratch[4096];
    ack_progress(c);
    while (c->state == EX_READY && c->ack_off == sizeof c->ack && (c->skip || c->recvq.cur)) {
        ex_req *r = c->recvq.cur;
        char *p;
        size_t want;
        if (c->skip) {                              /* discarding a refused message */
            p = scratch;
            want = c->skip < sizeof scratch ? (size_t)c->skip : sizeof scratch;
        } else if (c->rhdr_off < sizeof c->rhdr) {  /* reading a header */
            p = (char *)&c->rhdr + c->rhdr_off;
            want = sizeof c->rhdr - c->rhdr_off;
        } else {                                    /* reading a payload into the receive */
            p = r->buf + r->done;
            want = r->in.len - r->done;
        }
        ssize_t k = recv(c->fd, p, want, 0);
        if (k == 0) {
            conn_fail(c, COHORT_ERR_PEER_LOST, "peer closed the connection", 0);
            return;
        }
        if (k < 0) {
            if (!again())
                io_fail(c, "recv");
            return;
        }
        if (c->skip) {
            c->skip -= (uint64_t)k;
            continue;
        }
        if (c->rhdr_off < sizeof c->rhdr) {
            c->rhdr_off += (size_t)k;
            if (c->rhdr_off < sizeof c->rhdr)
                continue;
            r->in = c->rhdr;            /* a whole header: match it to the oldest receive */
            if (r->in.tag != r->tag || r->in.len > r->len) {
                c->skip = r->in.len;    /* drop its payload; the stream stays in step */
                c->rhdr_off = 0;
                complete_cur(&c->recvq, COHORT_ERR_MISMATCH);
                continue;
            }
        } else {
            r->done += (size_t)k;
        }
        if (r->done == r->in.len) {
            c->rhdr_off = 0;
            complete_cur(&c->recvq, COHORT_SUCCESS);
        }
    }
}

static int hello_ok(ex_ep *ep, const ex_hello *h, const char **why)
{
    unsigned char mac[32];
    ep->ctx->host->auth(h, offsetof(ex_hello, mac), mac);
    *why = h->magic != EX_MAGIC ? "not a cohort example transport"
         : h->comm_id != ep->comm_id || strncmp(h->job_id, ep->job_id, sizeof h->job_id)
             ? "another job or communicator"
         : h->rank < 0 || h->rank >= ep->nranks ? "bad rank"
         : !mac_equal(mac, h->mac) ? "authentication failed (different COHORT_SECRET?)"
         : NULL;
    return *why == NULL;
}

/* Accept waiting sockets, read their hellos, and hand each to the accept(peer) it belongs to
 * (accept may be called before or after the connection arrives). */
static void ep_poll_listen(ex_ep *ep)
{
    int fd;     /* accept4 errors other than EAGAIN (EMFILE...): tried again at next progress */
    while ((fd = accept4(ep->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
        ex_incoming *in = calloc(1, sizeof *in);
        if (!in) {
            close(fd);          /* the connector sees PEER_LOST */
            break;
        }
        in->fd = fd;
        in->next = ep->incoming;
        ep->incoming = in;
    }
    for (ex_incoming **pp = &ep->incoming, *in; (in = *pp) != NULL;) {
        const char *why = NULL;
        ex_conn *c = NULL;
        if (in->off < sizeof in->hello) {
            ssize_t k = recv(in->fd, (char *)&in->hello + in->off, sizeof in->hello - in->off, 0);
            if (k == 0 || (k < 0 && !again()))
                why = "closed before its hello";
            else if (k > 0 && (in->off += (size_t)k) == sizeof in->hello &&
                     !hello_ok(ep, &in->hello, &why))
                ep->ctx->host->log(COHORT_LOG_WARN, "example",
                                   "rank %d refused a connection: %s", ep->rank, why);
        }
        if (!why && in->off == sizeof in->hello)
            for (c = ep->conns; c; c = c->next)
                if (c->state == EX_ACCEPTING && c->peer == in->hello.rank)
                    break;
        if (!why && !c) {               /* wait for the rest of the hello, or for accept() */
            pp = &in->next;
            continue;
        }
        if (c) {
            c->fd = in->fd;
            c->state = EX_READY;
            c->ack.magic = EX_ACK_MAGIC;
            ack_mac(ep->ctx->host, &in->hello, c->ack.mac);
            c->ack_off = 0;
        } else {
            close(in->fd);
        }
        *pp = in->next;
        free(in);
    }
}

static void conn_progress(ex_conn *c)
{
    if (c->state == EX_ACCEPTING)
        ep_poll_listen(c->ep);
    if (c->state == EX_CONNECTING) {
        if (connect(c->fd, (struct sockaddr *)&c->sa, c->salen) == 0 || errno == EISCONN)
            c->state = EX_READY;
        else if (errno == ECONNREFUSED)
            conn_fail(c, COHORT_ERR_PEER_LOST, "peer's endpoint is gone (connect refused)", 0);
        else if (!again())      /* EAGAIN: the listener's backlog is full, try again later */
            conn_fail(c, COHORT_ERR_TRANSPORT, "connect", errno);
    }
    send_progress(c);
    recv_progress(c);
}

/* ---- endpoints --------------------------------------------------------------------------- */

static cohort_status_t ex_ep_open(cohort_tp_ctx_t ctxp, const cohort_ep_info_t *info,
                                  cohort_tp_ep_t *out, void *addr, size_t *addrlen)
{
    ex_ctx *ctx = ctxp;
    /* pointers, the info struct's size, rank range, job id length (plugin.h) */
    cohort_status_t st = cohort_ep_open_check(ctx->host, "example", info, out, addr, addrlen);
    if (st) return st;
    if (*addrlen < sizeof(ex_addr))
        return ctx->host->error(COHORT_ERR_INVALID_ARG, "example: address buffer of %zu bytes "
                                "is too small, need %zu", *addrlen, sizeof(ex_addr));
    ex_ep *ep = calloc(1, sizeof *ep);
    if (!ep)
        return ctx->host->error(COHORT_ERR_NO_MEMORY, "example: out of memory in ep_open");
    ep->ctx = ctx;
    ep->rank = info->rank;
    ep->nranks = info->nranks;
    ep->comm_id = info->comm_id;
    snprintf(ep->job_id, sizeof ep->job_id, "%s", info->job_id ? info->job_id : "");

    /* Binding with only the family asks the kernel for a unique abstract name ("autobind"). */
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    socklen_t salen = sizeof(sa_family_t);
    ep->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (ep->listen_fd < 0 || bind(ep->listen_fd, (struct sockaddr *)&sa, salen) < 0 ||
        listen(ep->listen_fd, SOMAXCONN) < 0 ||
        getsockname(ep->listen_fd, (struct sockaddr *)&sa, (salen = sizeof sa, &salen)) < 0) {
        int e = errno;
        if (ep->listen_fd >= 0)
            close(ep->listen_fd);
        free(ep);
        return ctx->host->error(COHORT_ERR_SYSTEM, "example: rank %d cannot listen on a UNIX "
                                "socket: %s", info->rank, strerror(e));
    }
    ex_addr a;
    memset(&a, 0, sizeof a);
    memcpy(a.node, ctx->node, sizeof a.node);
    a.netns = ctx->netns;
    a.namelen = (uint32_t)(salen - offsetof(struct sockaddr_un, sun_path));
    memcpy(a.name, sa.sun_path, a.namelen);
    memcpy(addr, &a, sizeof a);
    *addrlen = sizeof a;
    *out = ep;
    return COHORT_SUCCESS;
}

static void conn_free(ex_conn *c)
{
    free_queue(&c->sendq);      /* requests still in flight are cancelled: handles die here */
    free_queue(&c->recvq);
    if (c->fd >= 0)
        close(c->fd);
    free(c);
}

static cohort_status_t ex_ep_close(cohort_tp_ep_t epp)
{
    ex_ep *ep = epp;
    for (ex_conn *c = ep->conns, *next; c; c = next) {
        next = c->next;
        conn_free(c);
    }
    for (ex_incoming *in = ep->incoming, *next; in; in = next) {
        next = in->next;
        close(in->fd);
        free(in);
    }
    close(ep->listen_fd);
    free(ep);
    return COHORT_SUCCESS;
}

static int ex_can_reach(cohort_tp_ep_t epp, int peer, const void *peer_addr, size_t addrlen)
{
    ex_ep *ep = epp;
    ex_addr a;                  /* copy: the blob need not be aligned */
    (void)peer;
    if (addrlen != sizeof a)
        return 0;
    memcpy(&a, peer_addr, sizeof a);
    return memcmp(a.node, ep->ctx->node, sizeof a.node) == 0 && a.netns == ep->ctx->netns;
}

static ex_conn *conn_new(ex_ep *ep, int peer, int state)
{
    ex_conn *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->ep = ep;
    c->peer = peer;
    c->state = state;
    c->fd = -1;
    c->hello_off = sizeof c->hello;     /* nothing to send unless connect sets one */
    c->ack_off = sizeof c->ack;         /* nor an ack to send or read */
    c->next = ep->conns;
    ep->conns = c;
    return c;
}

static cohort_status_t ex_conn_close(cohort_tp_conn_t cp);

static cohort_status_t ex_connect(cohort_tp_ep_t epp, int peer, const void *peer_addr,
                                  size_t addrlen, cohort_tp_conn_t *out)
{
    ex_ep *ep = epp;
    const cohort_host_v1_t *host = ep->ctx->host;
    ex_addr a;
    if (addrlen != sizeof a)
        return host->error(COHORT_ERR_INVALID_ARG, "example: rank %d's address has %zu bytes, "
                           "expected %zu (another version of the plugin?)", peer, addrlen,
                           sizeof a);
    memcpy(&a, peer_addr, sizeof a);
    if (a.namelen == 0 || a.namelen > sizeof a.name)
        return host->error(COHORT_ERR_INVALID_ARG, "example: rank %d's address is corrupt", peer);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return host->error(COHORT_ERR_SYSTEM, "example: socket() for rank %d: %s", peer,
                           strerror(errno));
    ex_conn *c = conn_new(ep, peer, EX_CONNECTING);
    if (!c) {
        close(fd);
        return host->error(COHORT_ERR_NO_MEMORY, "example: out of memory in connect");
    }
    c->fd = fd;
    c->sa.sun_family = AF_UNIX;
    memcpy(c->sa.sun_path, a.name, a.namelen);
    c->salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + a.namelen);
    c->hello.magic = EX_MAGIC;          /* c is zeroed: padding and unused bytes are 0 */
    c->hello.comm_id = ep->comm_id;
    c->hello.rank = ep->rank;
    memcpy(c->hello.job_id, ep->job_id, sizeof c->hello.job_id);
    if (getrandom(c->hello.nonce, sizeof c->hello.nonce, 0) != (ssize_t)sizeof c->hello.nonce) {
        int e = errno;
        ex_conn_close(c);
        return host->error(COHORT_ERR_SYSTEM, "example: no random bytes for rank %d's hello: %s",
                           peer, strerror(e));
    }
    host->auth(&c->hello, offsetof(ex_hello, mac), c->hello.mac);
    c->hello_off = 0;
    c->ack_off = 0;
    c->peer_ack = 1;
    *out = c;
    return COHORT_SUCCESS;              /* the work happens in conn_test */
}

static cohort_status_t ex_accept(cohort_tp_ep_t epp, int peer, cohort_tp_conn_t *out)
{
    ex_ep *ep = epp;
    ex_conn *c = conn_new(ep, peer, EX_ACCEPTING);
    if (!c)
        return ep->ctx->host->error(COHORT_ERR_NO_MEMORY, "example: out of memory in accept");
    *out = c;
    return COHORT_SUCCESS;
}

static cohort_status_t ex_conn_test(cohort_tp_conn_t cp)
{
    ex_conn *c = cp;
    conn_progress(c);
    if (c->state == EX_FAILED)
        return c->ep->ctx->host->error(c->err, "%s", c->why);
    return c->state == EX_READY && c->hello_off == sizeof c->hello &&
                   c->ack_off == sizeof c->ack ? COHORT_SUCCESS : COHORT_IN_PROGRESS;
}

static cohort_status_t ex_conn_close(cohort_tp_conn_t cp)
{
    ex_conn *c = cp;
    for (ex_conn **pp = &c->ep->conns; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    conn_free(c);
    return COHORT_SUCCESS;
}

/* ---- messages ---------------------------------------------------------------------------- */

static cohort_status_t post(ex_conn *c, int is_send, void *buf, size_t len, uint64_t tag,
                            cohort_tp_req_t *out)
{
    const cohort_host_v1_t *host = c->ep->ctx->host;
    if (c->state == EX_FAILED)
        return host->error(c->err, "%s", c->why);
    ex_req *r = calloc(1, sizeof *r);
    if (!r)
        return host->error(COHORT_ERR_NO_MEMORY, "example: out of memory posting a message");
    r->conn = c;
    r->is_send = is_send;
    r->buf = buf;
    r->len = len;
    r->tag = tag;
    r->status = COHORT_IN_PROGRESS;
    ex_queue *q = is_send ? &c->sendq : &c->recvq;
    r->prev = q->tail;
    *(q->tail ? &q->tail->next : &q->head) = r;
    q->tail = r;
    if (!q->cur)
        q->cur = r;
    *out = r;
    conn_progress(c);           /* start at once: small sends usually finish here */
    return COHORT_SUCCESS;
}

static cohort_status_t ex_isend(cohort_tp_conn_t conn, const void *buf, size_t len,
                                uint64_t tag, cohort_tp_mr_t mr, cohort_tp_req_t *req)
{
    (void)mr;
    return post(conn, 1, (void *)buf, len, tag, req);
}

static cohort_status_t ex_irecv(cohort_tp_conn_t conn, void *buf, size_t len, uint64_t tag,
                                cohort_tp_mr_t mr, cohort_tp_req_t *req)
{
    (void)mr;
    return post(conn, 0, buf, len, tag, req);
}

static cohort_status_t ex_test(cohort_tp_req_t reqp, size_t *nbytes)
{
    ex_req *r = reqp;
    ex_conn *c = r->conn;
    if (r->status == COHORT_IN_PROGRESS)
        conn_progress(c);
    cohort_status_t status = r->status;
    if (status == COHORT_IN_PROGRESS)
        return status;
    if (status == COHORT_SUCCESS && nbytes)
        *nbytes = r->is_send ? r->len : (size_t)r->in.len;
    else if (status == COHORT_ERR_MISMATCH)
        c->ep->ctx->host->error(status, "example: receive from rank %d expected tag %llu and at "
                                "most %zu bytes, the message has tag %llu and %llu bytes",
                                c->peer, (unsigned long long)r->tag, r->len,
                                (unsigned long long)r->in.tag, (unsigned long long)r->in.len);
    else if (status != COHORT_SUCCESS)
        c->ep->ctx->host->error(status, "%s", c->why);
    unlink_req(r->is_send ? &c->sendq : &c->recvq, r);
    free(r);
    return status;
}

static cohort_status_t ex_progress(cohort_tp_ep_t epp)
{
    ex_ep *ep = epp;
    ep_poll_listen(ep);
    for (ex_conn *c = ep->conns; c; c = c->next)
        conn_progress(c);
    return COHORT_SUCCESS;
}

/* The one exported symbol. Build with -fvisibility=hidden so that nothing else leaks out. */
__attribute__((visibility("default")))
const cohort_transport_v1_t cohort_transport_v1 = {
    .size = sizeof(cohort_transport_v1_t),
    .abi_version = COHORT_PLUGIN_ABI_VERSION,
    .name = "example",                  /* must match libcohort-example.so */
    .version = EX_VERSION,
    .init = ex_init,
    .finalize = ex_finalize,
    .get_attr = ex_get_attr,
    .ep_open = ex_ep_open,
    .ep_close = ex_ep_close,
    .can_reach = ex_can_reach,
    .connect = ex_connect,
    .accept = ex_accept,
    .conn_test = ex_conn_test,
    .conn_close = ex_conn_close,
    .mem_reg = NULL,                    /* optional: sockets need no registration */
    .mem_dereg = NULL,
    .isend = ex_isend,
    .irecv = ex_irecv,
    .test = ex_test,
    .progress = ex_progress,
    .ep_fd = NULL,                      /* optional: one fd per connection, nothing to poll */
    .coll = NULL,
};
