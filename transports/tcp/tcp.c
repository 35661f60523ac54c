/* SPDX-License-Identifier: BSD-3-Clause */
/* cohort TCP transport (libcohort-tcp.so).
 *
 * Knows only <cohort/plugin.h>: logging, errors, settings, interfaces and the job's HMAC come
 * from the host table. Everything is non-blocking; work happens in progress()/test()/conn_test()
 * and the endpoint's epoll fd (ep_fd) lets the core sleep while nothing can move.
 *
 * Structure
 *   endpoint  one listening socket per candidate address (every interface host->netifs() allows,
 *             up to 8, best first; all published in the address blob) + epoll fd + the sockets still in their handshake ("incoming")
 *             + authenticated sockets no accept() has claimed yet ("early") + its conns.
 *   conn      nsocks sockets to one peer. Sends are queues of segments per socket; receives are
 *             posted irecvs waiting for their header on socket 0 plus per-socket segment queues.
 *   request   owns up to nsocks segments; freed (back to the endpoint's pool, kit_req.h) once the
 *             user has seen its final status and no socket queue still points at it (a
 *             mismatched receive drains its payload after the user has been told).
 * Reachability: can_reach probes the peer's candidates (a non-blocking connect to each, all at
 * once, bounded by COHORT_SOCKET_PROBE_MS) and remembers, per peer, the most preferred candidate
 * that answered; connect dials that one. Addresses that could not be reached (no route, no
 * answer) are remembered per plugin context, so the timeout is paid once per address.
 * Wire format: see tcp_wire.h. Not thread-safe per endpoint: the core serialises calls per
 * endpoint (the context's cache of unreachable addresses has its own lock).
 * Files: this one holds the plugin's entry points and ops table, the small helpers and the
 * endpoints (open, close, ep_fd); tcp_data.c the data path and progress, tcp_conn.c the
 * handshakes (connect and accept sides) and conns, tcp_addr.c candidate addresses, the
 * unreachable cache and the reachability probe; tcp_int.h what they share.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <cohort/plugin.h>
#include "transports/common/kit_objs.h"
#include "transports/common/kit_settings.h"
#include "transports/common/kit_table.h"

#include "tcp_wire.h"
#include "tcp_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---- small helpers ----------------------------------------------------------------------- */

double tcp_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

void tcp_format_sockaddr(const struct sockaddr_storage *ss, char *buf, size_t len)
{
    char a[INET6_ADDRSTRLEN] = "?";
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *s = (const struct sockaddr_in *)(const void *)ss;
        inet_ntop(AF_INET, &s->sin_addr, a, sizeof a);
        snprintf(buf, len, "%s:%u", a, (unsigned)ntohs(s->sin_port));
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)(const void *)ss;
        inet_ntop(AF_INET6, &s->sin6_addr, a, sizeof a);
        snprintf(buf, len, "[%s]:%u", a, (unsigned)ntohs(s->sin6_port));
    } else {
        snprintf(buf, len, "(unknown address family %d)", (int)ss->ss_family);
    }
}

void tcp_format_addr(int family, const unsigned char *addr, uint16_t port, char *buf,
                     size_t len)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    if (family == AF_INET) {
        struct sockaddr_in *s = (struct sockaddr_in *)(void *)&ss;
        s->sin_family = AF_INET;
        memcpy(&s->sin_addr, addr, 4);
        s->sin_port = htons(port);
    } else {
        struct sockaddr_in6 *s = (struct sockaddr_in6 *)(void *)&ss;
        s->sin6_family = AF_INET6;
        memcpy(&s->sin6_addr, addr, 16);
        s->sin6_port = htons(port);
    }
    tcp_format_sockaddr(&ss, buf, len);
}

socklen_t tcp_make_sockaddr(int family, const unsigned char *addr, uint16_t port,
                            uint32_t scope, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof *ss);
    if (family == AF_INET) {
        struct sockaddr_in *s = (struct sockaddr_in *)(void *)ss;
        s->sin_family = AF_INET;
        memcpy(&s->sin_addr, addr, 4);
        s->sin_port = htons(port);
        return sizeof *s;
    }
    struct sockaddr_in6 *s = (struct sockaddr_in6 *)(void *)ss;
    s->sin6_family = AF_INET6;
    memcpy(&s->sin6_addr, addr, 16);
    s->sin6_port = htons(port);
    s->sin6_scope_id = scope;
    return sizeof *s;
}

void tcp_set_nodelay(int fd)
{
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void tcp_close_fd(int epfd, int fd)
{
    if (fd < 0) return;
    if (epfd >= 0) (void)epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL);
    (void)close(fd);
}

/* ---- the ABI ----------------------------------------------------------------------------- */

static cohort_status_t tcp_init(const cohort_host_v1_t *host, cohort_tp_ctx_t *ctx)
{
    if (!host || !ctx) return COHORT_ERR_INVALID_ARG;
    if (!COHORT_HAS_FIELD(host, cohort_host_v1_t, auth) || !host->log ||
        !host->error || !host->setting || !host->setting_long || !host->netifs || !host->auth) {
        if (COHORT_HAS_FIELD(host, cohort_host_v1_t, error) && host->error)
            return host->error(COHORT_ERR_UNSUPPORTED, "tcp: the core's host table is too old "
                               "or incomplete (size %zu)", host->size);
        return COHORT_ERR_UNSUPPORTED;
    }
    tcp_ctx_t *c = calloc(1, sizeof *c);
    if (!c) return host->error(COHORT_ERR_NO_MEMORY, "tcp: no memory for the plugin context");
    int e = pthread_mutex_init(&c->lock, NULL);
    if (e) {
        free(c);
        return host->error(COHORT_ERR_SYSTEM, "tcp: pthread_mutex_init for the plugin context "
                           "failed: %s", strerror(e));
    }
    c->host = host;
    *ctx = c;
    return COHORT_SUCCESS;
}

static cohort_status_t tcp_ep_close(cohort_tp_ep_t epv);

static cohort_status_t tcp_finalize(cohort_tp_ctx_t ctxv)
{
    tcp_ctx_t *ctx = (tcp_ctx_t *)ctxv;
    if (!ctx) return COHORT_SUCCESS;
    while (ctx->eps) tcp_ep_close(ctx->eps);
    pthread_mutex_destroy(&ctx->lock);
    free(ctx->unreach);
    free(ctx);
    return COHORT_SUCCESS;
}

static cohort_status_t tcp_get_attr(cohort_tp_ctx_t ctxv, cohort_transport_attr_t *attr)
{
    (void)ctxv;
    /* rough: a 10 Gb/s link, and a kernel TCP round trip on a LAN */
    return cohort_attr_give(attr, COHORT_SCOPE_NETWORK, 1.25, 25.0);
}

/* ---- endpoints --------------------------------------------------------------------------- */

/* Opens the listening socket for one interface: 0, or an errno with *what naming the call. */
static int listen_on(tcp_listener_t *l, const cohort_netif_t *nif, const char **what)
{
    memset(&l->cand, 0, sizeof l->cand);
    l->fd = -1;
    tcp_cand_t *c = &l->cand;
    c->family = (uint16_t)nif->family;
    memcpy(c->addr, nif->addr, nif->family == AF_INET ? 4 : 16);
    unsigned maxp = nif->family == AF_INET ? 32 : 128;
    c->prefix_len = (uint8_t)(nif->prefix_len > maxp ? maxp : nif->prefix_len);
    c->flags = nif->is_loopback ? TCP_CAND_LOOPBACK : 0;
    snprintf(c->ifname, sizeof c->ifname, "%.16s", nif->name);
    if (tcp_cand_is_linklocal(c)) c->scope_id = if_nametoindex(nif->name);
    struct sockaddr_storage ss;
    socklen_t sl = tcp_make_sockaddr(c->family, c->addr, 0, c->scope_id, &ss);
    *what = "socket";
    l->fd = socket(c->family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (l->fd < 0) return errno;
    *what = "bind";
    if (bind(l->fd, (struct sockaddr *)&ss, sl) != 0) goto fail;
    *what = "listen";
    if (listen(l->fd, SOMAXCONN) != 0) goto fail;
    *what = "getsockname";
    sl = sizeof ss;
    if (getsockname(l->fd, (struct sockaddr *)&ss, &sl) != 0) goto fail;
    c->port = ntohs(c->family == AF_INET ? ((struct sockaddr_in *)(void *)&ss)->sin_port
                    : ((struct sockaddr_in6 *)(void *)&ss)->sin6_port);
    tcp_format_addr(c->family, c->addr, c->port, l->addrstr, sizeof l->addrstr);
    return 0;
fail:;
    int e = errno;
    close(l->fd);
    l->fd = -1;
    return e;
}

/* Frees an endpoint that is not (or no longer) on the context's list. */
static void ep_destroy(tcp_ep_t *ep)
{
    while (ep->conns) tcp_conn_destroy(ep->conns);
    kit_pool_drain(&ep->reqs);
    while (ep->inc_h) tcp_inc_free(ep, ep->inc_h, 1);
    while (ep->early) tcp_inc_free(ep, ep->early, 1);
    for (int i = 0; i < ep->nlis; i++) tcp_close_fd(ep->epfd, ep->lis[i].fd);
    tcp_close_fd(ep->epfd, ep->wake.fd);
    if (ep->epfd >= 0) close(ep->epfd);
    free(ep->scratch);
    free(ep->routes);
    free(ep->logged);
    free(ep);
}

/* ---- settings: the plugin's table (cohort-info prints it, the core checks every value) ---- */

KIT_LONG(set_nsocks, "COHORT_SOCKET_NSOCKS", "2",
         "tcp: sockets per peer (1 to 16); large messages are striped over them", 1,
         TCP_MAX_NSOCKS);
KIT_LONG(set_probe_ms, "COHORT_SOCKET_PROBE_MS", "1000",
         "tcp: milliseconds to wait for a peer's interface to answer the reachability probe at "
         "start-up (without COHORT_SOCKET_IFNAME every candidate interface is probed), 1 to "
         "600000", 1, TCP_MAX_PROBE_MS);

static const cohort_plugin_setting_v1_t *const tcp_settings[] = { &set_nsocks, &set_probe_ms,
                                                                  NULL };

static cohort_status_t tcp_ep_open(cohort_tp_ctx_t ctxv, const cohort_ep_info_t *info,
                                   cohort_tp_ep_t *epp, void *addr, size_t *addrlen)
{
    tcp_ctx_t *ctx = (tcp_ctx_t *)ctxv;
    const cohort_host_v1_t *host = ctx->host;
    cohort_status_t st = cohort_ep_open_check(host, "tcp", info, epp, addr, addrlen);
    if (st) return st;
    _Static_assert(TCP_JOBID_LEN > 63, "a job id of 63 characters (cohort_ep_open_check) fits");
    _Static_assert(TCP_ADDR_MAX_SIZE <= COHORT_ADDR_MAX, "the tcp address fits COHORT_ADDR_MAX");
    const char *job = info->job_id ? info->job_id : "";
    if (*addrlen < tcp_addr_size(1))
        return host->error(COHORT_ERR_INVALID_ARG, "tcp: ep_open: the address buffer holds %zu "
                           "bytes, the tcp address needs at least %zu (COHORT_ADDR_MAX is "
                           "always enough)", *addrlen, tcp_addr_size(1));
    size_t fit = (*addrlen - TCP_ADDR_HDR_SIZE) / TCP_ADDR_CAND_SIZE;
    int maxc = fit < TCP_ADDR_MAX_CANDS ? (int)fit : TCP_ADDR_MAX_CANDS;
    long nsocks, probe_ms;
    if ((st = kit_setting_long(host, &set_nsocks, &nsocks)) ||
        (st = kit_setting_long(host, &set_probe_ms, &probe_ms)))
        return st;
    const cohort_netif_t *ifs = NULL;
    int nifs = 0;
    st = host->netifs(&ifs, &nifs);
    if (st) return st;
    if (nifs <= 0 || !ifs) {
        const char *spec = host->setting("COHORT_SOCKET_IFNAME");
        return host->error(COHORT_ERR_TRANSPORT, "tcp: rank %d has no network interface to "
                           "listen on%s%s%s (no interface with an IPv4/IPv6 address is up); "
                           "bring one up or change COHORT_SOCKET_IFNAME", info->rank,
                           spec ? " (COHORT_SOCKET_IFNAME='" : "", spec ? spec : "",
                           spec ? "')" : "");
    }

    tcp_ep_t *ep = calloc(1, sizeof *ep);
    if (!ep) return host->error(COHORT_ERR_NO_MEMORY, "tcp: no memory for an endpoint");
    KIT_EP_INIT(ep, ctx, host, info);
    memcpy(ep->job_id, job, strlen(job));
    ep->nsocks = (int)nsocks;
    kit_pool_init(&ep->reqs, tcp_req_size(ep->nsocks), TCP_REQ_POOL);
    ep->probe_ms = probe_ms;
    ep->ev_ent.kind = FD_EVENT;
    ep->ev_ent.obj = ep;
    ep->epfd = epoll_create1(EPOLL_CLOEXEC);
    kit_wake_open(&ep->wake);
    struct epoll_event eev = { .events = EPOLLIN, .data.ptr = &ep->ev_ent };
    if (ep->epfd < 0 || ep->wake.fd < 0 ||
        epoll_ctl(ep->epfd, EPOLL_CTL_ADD, ep->wake.fd, &eev) != 0) {
        int e = errno;
        ep_destroy(ep);
        return host->error(COHORT_ERR_SYSTEM, "tcp: epoll setup for the endpoint of rank %d "
                           "failed: %s%s", info->rank, strerror(e), (e == EMFILE || e == ENFILE)
                           ? " (out of file descriptors: raise ulimit -n)" : "");
    }

    /* One listener per allowed interface, best first; one that fails is left out. */
    char tried[1024] = "";
    size_t tused = 0;
    int considered = 0;
    for (int i = 0; i < nifs && ep->nlis < maxc; i++) {
        const cohort_netif_t *nif = &ifs[i];
        considered = i + 1;
        char a[INET6_ADDRSTRLEN] = "?";
        if (nif->family != AF_INET && nif->family != AF_INET6) {
            host->log(COHORT_LOG_INFO, SUBSYS, "tcp: rank %d leaves out interface %.32s: address "
                      "family %d is neither IPv4 nor IPv6", ep->rank, nif->name, nif->family);
            continue;
        }
        inet_ntop(nif->family, nif->addr, a, sizeof a);
        tcp_listener_t *l = &ep->lis[ep->nlis];
        l->ent.kind = FD_LISTEN;
        l->ent.obj = l;
        l->ep = ep;
        const char *what = NULL;
        int e = listen_on(l, nif, &what);
        if (!e) {
            struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &l->ent };
            if (epoll_ctl(ep->epfd, EPOLL_CTL_ADD, l->fd, &ev) != 0) {
                e = errno;
                what = "epoll_ctl";
                close(l->fd);
                l->fd = -1;
            }
        }
        if (e) {
            host->log(COHORT_LOG_INFO, SUBSYS, "tcp: rank %d cannot listen on interface %.32s "
                      "(%s): %s failed: %s; that interface is left out", ep->rank, nif->name, a,
                      what, strerror(e));
            if (tused < sizeof tried) {
                int w = snprintf(tried + tused, sizeof tried - tused, "%s%.32s %s (%s: %s)",
                                 tused ? ", " : "", nif->name, a, what, strerror(e));
                if (w > 0) tused += (size_t)w;
            }
            continue;
        }
        ep->nlis++;
    }
    if (ep->nlis == 0) {
        ep_destroy(ep);
        return host->error(COHORT_ERR_TRANSPORT, "tcp: rank %d cannot listen on any of its "
                           "interfaces: %s; check that these addresses are still up and "
                           "usable, or choose others with COHORT_SOCKET_IFNAME", info->rank,
                           tried[0] ? tried : "(none with an IPv4/IPv6 address)");
    }
    if (considered < nifs)
        host->log(COHORT_LOG_INFO, SUBSYS, "tcp: rank %d offers only its first %d interface "
                  "addresses (the %d after them are left out; COHORT_SOCKET_IFNAME chooses)",
                  ep->rank, ep->nlis, nifs - considered);
    unsigned char jin[TCP_JOB_MAC_INPUT];
    tcp_job_mac_input(ep->job_id, jin);
    host->auth(jin, sizeof jin, ep->job_hash);
    tcp_netns_id(host, ep->netns);

    tcp_addr_t a;
    memset(&a, 0, sizeof a);
    a.magic = TCP_ADDR_MAGIC;
    a.version = TCP_PROTO_VERSION;
    a.ncand = (uint16_t)ep->nlis;
    a.rank = (uint32_t)ep->rank;
    a.nranks = (uint32_t)ep->nranks;
    a.comm_id = ep->comm_id;
    memcpy(a.job_hash, ep->job_hash, TCP_MAC_LEN);
    memcpy(a.netns, ep->netns, TCP_NETNS_LEN);
    for (int i = 0; i < ep->nlis; i++) a.cand[i] = ep->lis[i].cand;
    size_t len = tcp_addr_encode(&a, (unsigned char *)addr, *addrlen);
    if (len == 0) {   /* cannot happen: maxc keeps it inside *addrlen */
        ep_destroy(ep);
        return host->error(COHORT_ERR_INTERNAL, "tcp: rank %d: the address of %d candidates "
                           "does not fit %zu bytes", info->rank, (int)a.ncand, *addrlen);
    }
    *addrlen = len;

    pthread_mutex_lock(&ctx->lock);   /* communicators may open and close on several threads */
    KIT_LIST_PUSH(ctx->eps, ep);
    pthread_mutex_unlock(&ctx->lock);
    char where[600];
    size_t wu = 0;
    for (int i = 0; i < ep->nlis && wu < sizeof where; i++) {
        int w = snprintf(where + wu, sizeof where - wu, "%s%s (%s)", i ? ", " : "",
                         ep->lis[i].addrstr, ep->lis[i].cand.ifname);
        if (w > 0) wu += (size_t)w;
    }
    host->log(COHORT_LOG_INFO, SUBSYS, "tcp: rank %d listening on %s; %d socket%s per peer",
              ep->rank, where, ep->nsocks, ep->nsocks == 1 ? "" : "s");
    *epp = ep;
    return COHORT_SUCCESS;
}

static cohort_status_t tcp_ep_close(cohort_tp_ep_t epv)
{
    tcp_ep_t *ep = (tcp_ep_t *)epv;
    if (!ep) return COHORT_SUCCESS;
    tcp_ctx_t *ctx = ep->ctx;
    pthread_mutex_lock(&ctx->lock);
    KIT_LIST_UNLINK(ctx->eps, ep);
    pthread_mutex_unlock(&ctx->lock);
    ep_destroy(ep);
    return COHORT_SUCCESS;
}

KIT_EP_FD(tcp_ep_fd, tcp_ep_t, epfd)

/* The plugin's table (kit_table.h: .init = tcp_init ... .ep_fd = tcp_ep_fd); no memory
 * registration, no collectives. */
KIT_TRANSPORT_V1(tcp, "tcp", TCP_PLUGIN_VERSION, .settings = tcp_settings);
