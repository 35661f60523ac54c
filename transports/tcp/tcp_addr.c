/* SPDX-License-Identifier: BSD-3-Clause */
/* TCP transport: addresses and reachability. The network namespace id and the checks of a
 * peer's candidate addresses (which of them this endpoint may try at all), the plugin
 * context's cache of addresses found unreachable (or answering), the reachability probe (a
 * non-blocking connect to every usable candidate of a peer at once, bounded by
 * COHORT_SOCKET_PROBE_MS, and the log line of what was chosen and why), the check of a peer's
 * address blob, and the ABI's can_reach. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <cohort/plugin.h>

#include "tcp_wire.h"
#include "tcp_int.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/* ---- candidates -------------------------------------------------------------------------- */

/* This rank's network namespace as TCP_NETNS_LEN bytes that every rank of the job computes the
 * same way: the kernel's boot id with the device and inode of /proc/self/ns/net (two namespaces
 * of one boot never share an inode; another host has another boot id), through the job's HMAC.
 * Without /proc/self/ns/net the host name stands in for the namespace. */
void tcp_netns_id(const cohort_host_v1_t *host, unsigned char out[TCP_NETNS_LEN])
{
    unsigned char in[sizeof TCP_LABEL_NETNS + 64 + 16 + 256];
    memset(in, 0, sizeof in);
    memcpy(in, TCP_LABEL_NETNS, sizeof TCP_LABEL_NETNS);
    unsigned char *p = in + sizeof TCP_LABEL_NETNS;
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t r = read(fd, p, 64);
        (void)r;
        close(fd);
    }
    struct stat st;
    if (stat("/proc/self/ns/net", &st) == 0) {
        kit_put_le64(p + 64, (uint64_t)st.st_dev);
        kit_put_le64(p + 72, (uint64_t)st.st_ino);
    } else {
        (void)gethostname((char *)p + 80, 255);
    }
    unsigned char mac[TCP_MAC_LEN];
    host->auth(in, sizeof in, mac);
    memcpy(out, mac, TCP_NETNS_LEN);
}

static int cand_is_loopback(const tcp_cand_t *c)
{
    static const unsigned char v6lo[16] = { [15] = 1 };
    if (c->flags & TCP_CAND_LOOPBACK) return 1;
    if (c->family == AF_INET) return c->addr[0] == 127;
    return memcmp(c->addr, v6lo, 16) == 0;
}

int tcp_cand_is_linklocal(const tcp_cand_t *c)
{
    if (c->family == AF_INET6) return c->addr[0] == 0xfe && (c->addr[1] & 0xc0) == 0x80;
    return 0;
}

int tcp_cand_same_ip(const tcp_cand_t *a, const tcp_cand_t *b)
{
    return a->family == b->family && !memcmp(a->addr, b->addr, a->family == AF_INET ? 4 : 16) &&
           (a->family == AF_INET || a->scope_id == b->scope_id);
}

/* "eth0 10.0.0.1:4242" */
void tcp_cand_format(const tcp_cand_t *c, char *buf, size_t len)
{
    char a[TCP_ADDRSTR];
    tcp_format_addr(c->family, c->addr, c->port, a, sizeof a);
    snprintf(buf, len, "%s %s", c->ifname[0] ? c->ifname : "(unnamed)", a);
}

/* NULL when this endpoint may try candidate c of the peer whose address is a; else why not (in
 * buf). Decided from the blobs alone, without touching the network. */
const char *tcp_cand_skip_reason(const tcp_ep_t *ep, const tcp_addr_t *a,
                                 const tcp_cand_t *c, char *buf, size_t len)
{
    int have = 0;
    for (int i = 0; i < ep->nlis; i++)
        if (ep->lis[i].cand.family == c->family) have = 1;
    if (!have) {
        snprintf(buf, len, "this rank has no %s interface (see COHORT_SOCKET_IFNAME)",
                 c->family == AF_INET ? "IPv4" : "IPv6");
        return buf;
    }
    if (!memcmp(a->netns, ep->netns, TCP_NETNS_LEN)) return NULL;
    if (cand_is_loopback(c)) {
        snprintf(buf, len, "loopback address of another host or network namespace");
        return buf;
    }
    if (tcp_cand_is_linklocal(c)) {
        snprintf(buf, len, "link-local address of another host (its scope id means nothing "
                 "here)");
        return buf;
    }
    for (int i = 0; i < ep->nlis; i++)
        if (tcp_cand_same_ip(&ep->lis[i].cand, c)) {
            snprintf(buf, len, "this host has the same address on %s, so it would reach this "
                     "host, not the peer", ep->lis[i].cand.ifname);
            return buf;
        }
    return NULL;
}

/* The cache entry for c's IP address, or NULL. Call with ctx->lock held. */
static unreach_t *unreach_find(tcp_ctx_t *ctx, const tcp_cand_t *c)
{
    for (int i = 0; i < ctx->nunreach; i++) {
        unreach_t *u = &ctx->unreach[i];
        tcp_cand_t k;
        memset(&k, 0, sizeof k);
        k.family = u->family;
        k.scope_id = u->scope_id;
        memcpy(k.addr, u->addr, 16);
        if (tcp_cand_same_ip(&k, c)) return u;
    }
    return NULL;
}

/* 1 if the address was found unreachable earlier (why receives the reason). */
int tcp_unreach_lookup(tcp_ctx_t *ctx, const tcp_cand_t *c, char *why, size_t len)
{
    pthread_mutex_lock(&ctx->lock);
    const unreach_t *u = unreach_find(ctx, c);
    int found = u && !u->reachable;
    if (found) snprintf(why, len, "%s; found earlier, not probed again", u->why);
    pthread_mutex_unlock(&ctx->lock);
    return found;
}

/* Records that c's address answered (reachable) or could not be reached (why). An address that
 * answered once is never marked unreachable later: a port that does not answer in time (a
 * listener whose backlog is full) says nothing about the address. */
static void unreach_note(tcp_ctx_t *ctx, const tcp_cand_t *c, int reachable, const char *why)
{
    pthread_mutex_lock(&ctx->lock);
    unreach_t *old = unreach_find(ctx, c);
    if (old) {
        if (reachable) old->reachable = 1;
        pthread_mutex_unlock(&ctx->lock);
        return;
    }
    if (ctx->nunreach == ctx->capunreach) {
        int cap = ctx->capunreach ? 2 * ctx->capunreach : 16;
        unreach_t *n = realloc(ctx->unreach, (size_t)cap * sizeof *n);
        if (!n) {   /* only a cache: without it the timeout is paid again */
            pthread_mutex_unlock(&ctx->lock);
            return;
        }
        ctx->unreach = n;
        ctx->capunreach = cap;
    }
    unreach_t *u = &ctx->unreach[ctx->nunreach++];
    memset(u, 0, sizeof *u);
    u->family = c->family;
    u->scope_id = c->scope_id;
    memcpy(u->addr, c->addr, 16);
    u->reachable = reachable;
    snprintf(u->why, sizeof u->why, "%s", why ? why : "");
    pthread_mutex_unlock(&ctx->lock);
}

/* Identity of a peer's set of addresses (its host and namespace, ports left out): the ranks of
 * one host share it, so the choice is logged once per host. */
static uint64_t addr_set_key(const tcp_addr_t *a)
{
    uint64_t h = 1469598103934665603ull;
    unsigned char b[24];
    for (size_t i = 0; i < TCP_NETNS_LEN; i++) h = (h ^ a->netns[i]) * 1099511628211ull;
    for (unsigned i = 0; i < a->ncand; i++) {
        kit_put_le16(b, a->cand[i].family);
        kit_put_le32(b + 2, a->cand[i].scope_id);
        memcpy(b + 6, a->cand[i].addr, 16);
        for (size_t j = 0; j < 22; j++) h = (h ^ b[j]) * 1099511628211ull;
    }
    return h;
}

/* 1 the first time key is seen on this endpoint. */
static int first_log(tcp_ep_t *ep, uint64_t key)
{
    for (int i = 0; i < ep->nlogged; i++)
        if (ep->logged[i] == key) return 0;
    if (ep->nlogged == ep->caplogged) {
        int cap = ep->caplogged ? 2 * ep->caplogged : 8;
        uint64_t *n = realloc(ep->logged, (size_t)cap * sizeof *n);
        if (!n) return 1;   /* log again rather than never */
        ep->logged = n;
        ep->caplogged = cap;
    }
    ep->logged[ep->nlogged++] = key;
    return 1;
}

/* ---- the reachability probe -------------------------------------------------------------- */

enum { PR_SKIP = 1, PR_PENDING, PR_OK, PR_FAIL, PR_UNUSED };
typedef struct probe {
    int state;
    int fd;
    int err;                       /* PR_FAIL: errno (ETIMEDOUT: our deadline); 0: from cache */
    char why[160];
    char local[TCP_ADDRSTR];       /* PR_OK: this side of the connection */
} probe_t;


/* Errors that say the address cannot be reached from here (not just "nobody on that port"). */
static int errno_unreachable(int e)
{
    return e == ENETUNREACH || e == EHOSTUNREACH || e == ENETDOWN || e == EHOSTDOWN ||
           e == ETIMEDOUT;
}

static void probe_fail(probe_t *p, int err, const char *why)
{
    p->state = PR_FAIL;
    p->err = err;
    snprintf(p->why, sizeof p->why, "%s", why);
}

static void probe_connected(probe_t *p)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    p->state = PR_OK;
    if (getsockname(p->fd, (struct sockaddr *)&ss, &sl) == 0)
        tcp_format_sockaddr(&ss, p->local, sizeof p->local);
    else
        snprintf(p->local, sizeof p->local, "?");
}

/* 1 if the non-blocking connect on fd has completed successfully by now. */
static int connected_now(int fd)
{
    struct pollfd q = { .fd = fd, .events = POLLOUT };
    if (poll(&q, 1, 0) != 1 || !(q.revents & POLLOUT)) return 0;
    int err = 0;
    socklen_t el = sizeof err;
    return getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0;
}

/* Probes every usable candidate of the peer at once and waits (at most ep->probe_ms) until the
 * most preferred one that can still answer has answered or failed. Records the result in
 * ep->routes[peer]; 1 if a candidate answered. */
static int probe_peer(tcp_ep_t *ep, int peer, const tcp_addr_t *a)
{
    const cohort_host_v1_t *host = ep->host;
    probe_t pr[TCP_ADDR_MAX_CANDS];
    unsigned n = a->ncand;
    for (unsigned i = 0; i < n; i++) {
        const tcp_cand_t *c = &a->cand[i];
        probe_t *p = &pr[i];
        memset(p, 0, sizeof *p);
        p->fd = -1;
        if (tcp_cand_skip_reason(ep, a, c, p->why, sizeof p->why)) {
            p->state = PR_SKIP;
            continue;
        }
        if (tcp_unreach_lookup(ep->ctx, c, p->why, sizeof p->why)) {
            p->state = PR_FAIL;
            continue;
        }
        struct sockaddr_storage ss;
        socklen_t sl = tcp_make_sockaddr(c->family, c->addr, c->port, c->scope_id, &ss);
        p->fd = socket(c->family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (p->fd < 0) {
            char why[128];
            int e = errno;
            snprintf(why, sizeof why, "socket() failed: %s", strerror(e));
            probe_fail(p, e, why);
            continue;
        }
        if (connect(p->fd, (struct sockaddr *)&ss, sl) == 0) {
            probe_connected(p);
        } else if (errno == EINPROGRESS || errno == EINTR) {
            p->state = PR_PENDING;
        } else {
            int e = errno;
            probe_fail(p, e, strerror(e));
        }
    }
    double deadline = tcp_mono_ms() + (double)ep->probe_ms;
    int chosen = -1;
    for (;;) {
        int wait = 0;
        chosen = -1;
        for (unsigned i = 0; i < n && chosen < 0 && !wait; i++) {
            if (pr[i].state == PR_PENDING) wait = 1;
            else if (pr[i].state == PR_OK) chosen = (int)i;
        }
        if (!wait) break;
        double left = deadline - tcp_mono_ms();
        if (left <= 0) {
            char why[64];
            snprintf(why, sizeof why, "no answer within %ld ms", ep->probe_ms);
            for (unsigned i = 0; i < n; i++)
                if (pr[i].state == PR_PENDING) probe_fail(&pr[i], ETIMEDOUT, why);
            continue;
        }
        struct pollfd pf[TCP_ADDR_MAX_CANDS + 1];
        unsigned idx[TCP_ADDR_MAX_CANDS];
        nfds_t k = 0;
        for (unsigned i = 0; i < n; i++)
            if (pr[i].state == PR_PENDING) {
                pf[k].fd = pr[i].fd;
                pf[k].events = POLLOUT;
                pf[k].revents = 0;
                idx[k++] = i;
            }
        /* Our own listeners meanwhile: peers probe us at the same time; accepting their
         * probes now keeps the listen backlogs short. */
        nfds_t npend = k;
        pf[k].fd = ep->epfd;
        pf[k].events = POLLIN;
        pf[k].revents = 0;
        k++;
        int ms = left >= (double)TCP_MAX_PROBE_MS ? TCP_MAX_PROBE_MS : (int)left + 1;
        int r = poll(pf, k, ms);
        if (r < 0) {
            if (errno == EINTR) continue;
            char why[128];
            int e = errno;
            snprintf(why, sizeof why, "poll() failed: %s", strerror(e));
            for (unsigned i = 0; i < n; i++)
                if (pr[i].state == PR_PENDING) probe_fail(&pr[i], e, why);
            continue;
        }
        for (nfds_t j = 0; j < npend; j++) {
            if (!pf[j].revents) continue;
            probe_t *p = &pr[idx[j]];
            int err = 0;
            socklen_t el = sizeof err;
            if (getsockopt(p->fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0) err = errno;
            if (!err && !(pf[j].revents & POLLOUT)) err = ECONNRESET;
            if (err) probe_fail(p, err, strerror(err));
            else probe_connected(p);
        }
        if (pf[npend].revents) (void)tcp_progress(ep);
    }
    /* Close every probe socket; those that connected (even late) carry the probe marker so the
     * listener knows to close them quietly. */
    for (unsigned i = 0; i < n; i++) {
        probe_t *p = &pr[i];
        int answered = p->state == PR_OK;
        if (p->fd >= 0) {
            /* a pending one, or one that timed out, may have connected since the last poll */
            if (!answered && p->state != PR_SKIP) answered = connected_now(p->fd);
            if (answered) {
                unsigned char m[TCP_PROBE_SIZE];
                tcp_probe_encode(m);
                ssize_t w = send(p->fd, m, sizeof m, MSG_NOSIGNAL | MSG_DONTWAIT);
                (void)w;
            }
            close(p->fd);
            p->fd = -1;
        }
        if (p->state == PR_PENDING) p->state = PR_UNUSED;
        if (answered || (p->state == PR_FAIL && p->err == ECONNREFUSED))   /* refused: the host */
            unreach_note(ep->ctx, &a->cand[i], 1, NULL);                   /* answered */
        else if (p->state == PR_FAIL && errno_unreachable(p->err))
            unreach_note(ep->ctx, &a->cand[i], 0, p->why);
    }
    /* The log line: what was chosen and why the peer's preferred addresses before it were not. */
    char list[1400];
    size_t used = 0;
    unsigned upto = chosen >= 0 ? (unsigned)chosen : n;
    for (unsigned i = 0; i < upto && used < sizeof list - 1; i++) {
        char cs[TCP_ADDRSTR + TCP_IFNAME_LEN + 2];
        tcp_cand_format(&a->cand[i], cs, sizeof cs);
        int w = snprintf(list + used, sizeof list - used, "%s%s (%s)", used ? ", " : "", cs,
                         pr[i].why);
        if (w < 0) break;
        used += (size_t)w;
        if (used >= sizeof list) used = sizeof list - 1;
    }
    list[used] = '\0';
    route_t *rt = &ep->routes[peer];
    if (chosen >= 0) {
        rt->state = RT_CHOSEN;
        rt->cand = a->cand[chosen];
        if (first_log(ep, addr_set_key(a))) {
            char cs[TCP_ADDRSTR + TCP_IFNAME_LEN + 2];
            tcp_cand_format(&a->cand[chosen], cs, sizeof cs);
            host->log(COHORT_LOG_INFO, SUBSYS, "tcp: rank %d reaches rank %d (and any rank at "
                      "the same addresses) at %s from %s: it answered the probe%s%s", ep->rank,
                      peer, cs, pr[chosen].local, used ? "; dropped " : "", list);
        }
        return 1;
    }
    rt->state = RT_NONE;
    host->log(COHORT_LOG_INFO, SUBSYS, "tcp: rank %d cannot reach rank %d: none of its %u "
              "address%s answered the probe (or could be tried): %s", ep->rank, peer, n,
              n == 1 ? "" : "es", used ? list : "(none)");
    return 0;
}

/* ---- peer addresses and the ABI's can_reach ---------------------------------------------- */

/* Checks that a blob is a tcp address of this job, communicator and peer: 0, or -1 with the
 * reason in why. */
int tcp_peer_addr_check(const tcp_ep_t *ep, int peer, const void *blob, size_t len,
                        tcp_addr_t *a, char *why, size_t wl)
{
    int e = tcp_addr_decode(blob, len, a);
    if (e != TCP_ADDR_OK) {
        snprintf(why, wl, "the address of rank %d (%zu bytes) is not usable: %s", peer, len,
                 tcp_addr_strerror(e));
        return -1;
    }
    if (!kit_ct_equal(a->job_hash, ep->job_hash, TCP_MAC_LEN)) {
        snprintf(why, wl, "the address of rank %d belongs to another job (different "
                 "COHORT_JOB_ID or COHORT_SECRET)", peer);
        return -1;
    }
    if (a->rank != (uint32_t)peer || a->comm_id != ep->comm_id ||
        a->nranks != (uint32_t)ep->nranks) {
        snprintf(why, wl, "the address given for rank %d is rank %u's of communicator %llu with "
                 "%u ranks (expected communicator %llu with %d ranks)", peer, (unsigned)a->rank,
                 (unsigned long long)a->comm_id, (unsigned)a->nranks,
                 (unsigned long long)ep->comm_id, ep->nranks);
        return -1;
    }
    return 0;
}

int tcp_can_reach(cohort_tp_ep_t epv, int peer, const void *peer_addr, size_t addrlen)
{
    tcp_ep_t *ep = (tcp_ep_t *)epv;
    if (!ep || peer < 0 || peer >= ep->nranks || peer == ep->rank) return 0;
    tcp_addr_t a;
    char why[400];
    if (tcp_peer_addr_check(ep, peer, peer_addr, addrlen, &a, why, sizeof why) != 0) {
        ep->host->log(COHORT_LOG_INFO, SUBSYS, "tcp: rank %d cannot use tcp to rank %d: %s",
                      ep->rank, peer, why);
        return 0;
    }
    /* Accept the probes waiting for us first: every rank probes at the same time, and a
     * listener whose backlog overflows drops SYNs (which would look like no answer). */
    (void)tcp_progress(ep);
    if (!ep->routes && !(ep->routes = calloc((size_t)ep->nranks, sizeof *ep->routes))) {
        ep->host->log(COHORT_LOG_WARN, SUBSYS, "tcp: rank %d: no memory for the reachability "
                      "table of %d ranks; tcp is not used", ep->rank, ep->nranks);
        return 0;
    }
    return probe_peer(ep, peer, &a);
}

