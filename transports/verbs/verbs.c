/* SPDX-License-Identifier: BSD-3-Clause */
/* cohort RDMA verbs transport (libcohort-verbs.so), over rdma-core's libibverbs.
 *
 * Knows only <cohort/plugin.h> (plus its own vb_*.h pieces and libibverbs).
 *
 * Structure
 *   context   one device and port, chosen at init (COHORT_IB_HCA, else the first active port),
 *             and its GID (COHORT_IB_GID_INDEX, else the IPv4-mapped RoCE v2 GID on Ethernet
 *             ports, GID 0 on InfiniBand ones).
 *   endpoint  a protection domain, one completion queue with its completion channel, a TCP
 *             listener for the queue-pair handshake, a registration cache (vb_regcache.h: kept
 *             across messages only while libucm reports unmapped memory, vb_memev.h), and an
 *             epoll descriptor over all of them that is the endpoint's ep_fd.
 *   conn      one Reliable Connected QP per peer with VB_SLOTS + VB_CTRL_WR pre-posted receive
 *             buffers of VB_SLOT_SIZE bytes, as many send bounce buffers, and credits
 *             (vb_credit.h). Its TCP socket carries the handshake (device address, QPN, PSN,
 *             HMAC with the job secret) and then stays open: its end of file means the peer
 *             process is gone.
 * Address blob: the device's GID, LID, port, MTU and link layer, and the IPv4 address and port
 * of the handshake listener (big-endian, fixed layout). QPNs are per pair, so they travel in
 * the handshake; the blob has what is per rank.
 *
 * Messages (every one is a SEND of a vb_hdr_t, possibly followed by payload):
 *   EAGER  tag, length, payload (length <= VB_EAGER_MAX): lands in a posted receive buffer;
 *          held there until the matching irecv copies it out.
 *   RTS    tag, length, sender's request id: a larger message is waiting.
 *   CTS    the receiver's registered buffer (address, rkey) and its request id, or DROP when
 *          the receive did not match (the sender then completes without moving data).
 *          The sender then RDMA WRITEs the payload, the last piece WITH IMMEDIATE = receiver's
 *          request id, which completes the receive.
 *   CREDIT credits only (vb_credit.h).
 * All but CREDIT take a credit, WRITE WITH IMMEDIATE too (it consumes a receive request).
 * rnr_retry is 0: a receive-not-ready would be a flow-control bug, and shows up as an error.
 *
 * Files
 *   verbs.c    this file: the entry points (the ops table, cohort_transport_v1), the context
 *              (device, port and GID choice, attr) and the endpoint (ep_open, ep_close, the
 *              address blob, can_reach).
 *   vb_data.c  requests and the data path: eager sends, RDMA writes, credits, receiving and
 *              matching, completions, async events, progress, isend, irecv, test.
 *   vb_conn.c  connections: failure, the handshake and its socket, queue pairs, connect,
 *              accept, conn_test, conn_close.
 *   vb_int.h   the types, constants and cross-file prototypes they share (not installed).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <cohort/plugin.h>
#include "transports/common/kit_bytes.h"
#include "transports/common/kit_objs.h"
#include "transports/common/kit_settings.h"
#include "transports/common/kit_table.h"

#include "vb_hca.h"
#include "vb_int.h"
#include "vb_memev.h"
#include "vb_regcache.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- process-wide ------------------------------------------------------------------------ */

static double port_gbps(const struct ibv_port_attr *pa)
{
    double lane;
    switch (pa->active_speed) {
    case 1: lane = 2.5; break;
    case 2: lane = 5; break;
    case 4: case 8: lane = 10; break;
    case 16: lane = 14; break;
    case 32: lane = 25; break;
    case 64: lane = 50; break;
    case 128: lane = 100; break;
    default: lane = 25; break;
    }
    int w;
    switch (pa->active_width) {
    case 1: w = 1; break;
    case 2: w = 4; break;
    case 4: w = 8; break;
    case 8: w = 12; break;
    case 16: w = 2; break;
    default: w = 4; break;
    }
    return lane * w / 8.0;            /* GB/s */
}

static int gid_is_v4(const union ibv_gid *g)
{
    static const unsigned char pfx[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
    return !memcmp(g->raw, pfx, 12);
}

/* ---- settings: the plugin's table (cohort-info prints it, the core checks every value) ---- */

static int hca_check(const char *value, char *why, size_t len)
{
    vb_hca_spec_t spec;
    return vb_hca_parse(value, &spec, why, len) != 0;
}

KIT_SETTING(set_hca, "COHORT_IB_HCA", NULL,
            "verbs: RDMA devices and ports to use, NCCL's grammar: prefixes with optional :port "
            "(mlx5_0:1,mlx5_1), =exact names, ^ to exclude; default: the first active port",
            COHORT_PSET_TEXT, 0, 0, NULL, hca_check);
KIT_LONG(set_gid_index, "COHORT_IB_GID_INDEX", NULL,
         "verbs: GID table index for RoCE (0 to 1023); default: the IPv4-mapped RoCE v2 GID "
         "(InfiniBand: 0)", 0, 1023);

static const cohort_plugin_setting_v1_t *const verbs_settings[] = { &set_hca, &set_gid_index,
                                                                    NULL };

/* Picks the GID: COHORT_IB_GID_INDEX, else the IPv4-mapped RoCE v2 one, else RoCE v2, else 0. */
static cohort_status_t pick_gid(vb_ctx_t *x, const struct ibv_port_attr *pa)
{
    const cohort_host_v1_t *h = x->host;
    long want = -1;
    if (h->setting(set_gid_index.name)) {
        cohort_status_t st = kit_setting_long(h, &set_gid_index, &want);
        if (st) return st;
        if (want < 0 || want >= pa->gid_tbl_len)
            return h->error(COHORT_ERR_INVALID_ARG, "verbs: COHORT_IB_GID_INDEX=%ld: %s port %d "
                            "has GIDs 0 to %d", want, x->devname, x->port, pa->gid_tbl_len - 1);
        if (ibv_query_gid(x->dev, (uint8_t)x->port, (int)want, &x->gid))
            return h->error(COHORT_ERR_INVALID_ARG, "verbs: COHORT_IB_GID_INDEX=%ld: "
                            "ibv_query_gid on %s port %d failed: %s", want, x->devname, x->port,
                            strerror(errno));
        x->gid_index = (int)want;
        return COHORT_SUCCESS;
    }
    x->gid_index = 0;
    if (x->link_layer != IBV_LINK_LAYER_ETHERNET) {
        if (ibv_query_gid(x->dev, (uint8_t)x->port, 0, &x->gid))
            memset(&x->gid, 0, sizeof x->gid);
        return COHORT_SUCCESS;
    }
    int best = -1, rank = 0;
    for (int i = 0; i < pa->gid_tbl_len; i++) {
        struct ibv_gid_entry ent;
        if (ibv_query_gid_ex(x->dev, (uint32_t)x->port, (uint32_t)i, &ent, 0)) continue;
        int r = 1;
        if (ent.gid_type == IBV_GID_TYPE_ROCE_V2) r = gid_is_v4(&ent.gid) ? 3 : 2;
        if (r > rank) {
            rank = r;
            best = i;
            x->gid = ent.gid;
        }
        if (r == 3) break;
    }
    if (best < 0)
        return h->error(COHORT_ERR_UNSUPPORTED, "no RDMA device with a usable GID: %s port %d "
                        "(RoCE) has no valid GID (is an IP address configured on its network "
                        "interface?)", x->devname, x->port);
    x->gid_index = best;
    return COHORT_SUCCESS;
}

static cohort_status_t vb_init(const cohort_host_v1_t *host, cohort_tp_ctx_t *ctxp)
{
    if (!host || !ctxp || !COHORT_HAS_FIELD(host, cohort_host_v1_t, auth) || !host->error ||
        !host->log || !host->setting || !host->setting_long || !host->auth || !host->netifs)
        return host && COHORT_HAS_FIELD(host, cohort_host_v1_t, error) && host->error
            ? host->error(COHORT_ERR_UNSUPPORTED, "verbs: the core's host table is too old")
            : COHORT_ERR_UNSUPPORTED;
    *ctxp = NULL;
    int ndev = 0;
    errno = 0;
    struct ibv_device **list = ibv_get_device_list(&ndev);
    if (!list || ndev == 0) {
        int err = errno;
        if (list) ibv_free_device_list(list);
        return host->error(COHORT_ERR_UNSUPPORTED, "no RDMA device (ibv_get_device_list found "
                           "none%s%s; load the device's driver, e.g. mlx5_ib, or create a "
                           "Soft-RoCE device: rdma link add rxe0 type rxe netdev eth0)",
                           err ? ": " : "", err ? strerror(err) : "");
    }
    vb_hca_spec_t spec;
    char perr[256];
    const char *hca = host->setting(set_hca.name);
    if (vb_hca_parse(hca, &spec, perr, sizeof perr)) {
        ibv_free_device_list(list);
        return host->error(COHORT_ERR_INVALID_ARG, "COHORT_IB_HCA=%s", perr);
    }
    vb_ctx_t *x = calloc(1, sizeof *x);
    if (!x) {
        ibv_free_device_list(list);
        return host->error(COHORT_ERR_NO_MEMORY, "verbs: no memory for the plugin context");
    }
    x->host = host;
    /* Devices nearest to this process's cores first (the host's topology, ABI 1.2), the others
     * in the list's order; COHORT_IB_HCA filters. */
    const char **dnames = calloc((size_t)ndev, sizeof *dnames);
    int *dorder = calloc((size_t)ndev, sizeof *dorder);
    if (!dnames || !dorder) {
        free(dnames);
        free(dorder);
        free(x);
        ibv_free_device_list(list);
        return host->error(COHORT_ERR_NO_MEMORY, "verbs: no memory for the device list");
    }
    for (int d = 0; d < ndev; d++) dnames[d] = ibv_get_device_name(list[d]);
    const char *const *near = NULL;
    int nnear = 0;
    if (!COHORT_HAS_FIELD(host, cohort_host_v1_t, rdma_devices) || !host->rdma_devices ||
        host->rdma_devices(&near, &nnear))
        nnear = 0;
    vb_order_devices(dnames, ndev, near, nnear, dorder);
    free(dnames);
    char seen[512] = "";
    size_t sl = 0;
    struct ibv_port_attr pa;
    for (int di = 0; di < ndev && !x->dev; di++) {
        int d = dorder[di];
        const char *name = ibv_get_device_name(list[d]);
        struct ibv_context *dev = ibv_open_device(list[d]);
        if (!dev) {
            sl += (size_t)snprintf(seen + sl, sl < sizeof seen ? sizeof seen - sl : 0,
                                   "%s%s (ibv_open_device: %s)", sl ? ", " : "", name,
                                   strerror(errno));
            if (sl >= sizeof seen) sl = sizeof seen - 1;
            continue;
        }
        struct ibv_device_attr da;
        if (ibv_query_device(dev, &da)) {
            sl += (size_t)snprintf(seen + sl, sl < sizeof seen ? sizeof seen - sl : 0,
                                   "%s%s (ibv_query_device: %s)", sl ? ", " : "", name,
                                   strerror(errno));
            if (sl >= sizeof seen) sl = sizeof seen - 1;
            ibv_close_device(dev);
            continue;
        }
        for (int p = 1; p <= da.phys_port_cnt; p++) {
            if (!vb_hca_match(&spec, name, p)) continue;
            if (ibv_query_port(dev, (uint8_t)p, &pa)) continue;
            if (pa.state != IBV_PORT_ACTIVE) {
                sl += (size_t)snprintf(seen + sl, sl < sizeof seen ? sizeof seen - sl : 0,
                                       "%s%s:%d (%s)", sl ? ", " : "", name, p,
                                       ibv_port_state_str(pa.state));
                if (sl >= sizeof seen) sl = sizeof seen - 1;
                continue;
            }
            x->dev = dev;
            x->port = p;
            x->max_cqe = da.max_cqe;
            snprintf(x->devname, sizeof x->devname, "%s", name);
            break;
        }
        if (!x->dev) ibv_close_device(dev);
    }
    free(dorder);
    ibv_free_device_list(list);
    int near_pos = -1;
    for (int i = 0; x->dev && i < nnear && near_pos < 0; i++)
        if (near[i] && !strcmp(near[i], x->devname)) near_pos = i;
    const char *why = near_pos == 0 ? "the nearest to this process's cores"
                      : near_pos > 0 ? "the nearest usable to this process's cores"
                      : nnear > 0 ? "the topology does not list it: first usable in the list"
                                  : "first usable (no topology)";
    if (!x->dev) {
        free(x);
        return host->error(COHORT_ERR_UNSUPPORTED, "no RDMA device with an active port%s%s%s%s",
                           hca && *hca ? " allowed by COHORT_IB_HCA=" : "", hca && *hca ? hca : "",
                           seen[0] ? "; found: " : "", seen);
    }
    x->lid = pa.lid;
    x->link_layer = pa.link_layer;
    x->mtu = pa.active_mtu;
    x->gbps = port_gbps(&pa);
    cohort_status_t st = pick_gid(x, &pa);
    if (st) {
        ibv_close_device(x->dev);
        free(x);
        return st;
    }
    if (gid_is_v4(&x->gid)) {
        memcpy(&x->ipv4, x->gid.raw + 12, 4);
    } else {
        const cohort_netif_t *ifs = NULL;
        int nifs = 0;
        if (host->netifs(&ifs, &nifs) == COHORT_SUCCESS)
            for (int i = 0; i < nifs && !x->ipv4; i++)
                if (ifs[i].family == AF_INET) memcpy(&x->ipv4, ifs[i].addr, 4);
        if (!x->ipv4) {
            st = host->error(COHORT_ERR_UNSUPPORTED, "verbs: %s port %d has no IPv4-mapped "
                             "GID and no IPv4 interface is allowed for the connection "
                             "handshake (COHORT_SOCKET_IFNAME)", x->devname, x->port);
            ibv_close_device(x->dev);
            free(x);
            return st;
        }
    }
    int fl = fcntl(x->dev->async_fd, F_GETFL);
    if (fl < 0 || fcntl(x->dev->async_fd, F_SETFL, fl | O_NONBLOCK) < 0) {
        st = host->error(COHORT_ERR_SYSTEM, "verbs: fcntl on the async event fd of %s: %s",
                         x->devname, strerror(errno));
        ibv_close_device(x->dev);
        free(x);
        return st;
    }
    pthread_mutex_init(&x->lock, NULL);
    struct rlimit rl;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        rl.rlim_cur < VB_MEMLOCK_WARN)
        host->log(COHORT_LOG_WARN, SUBSYS, "verbs: RLIMIT_MEMLOCK is only %llu KiB: registering "
                  "buffers with %s will fail beyond that; raise it with 'ulimit -l unlimited' "
                  "(or memlock in /etc/security/limits.conf, or --ulimit memlock=-1 for a "
                  "container)", (unsigned long long)rl.rlim_cur / 1024, x->devname);
    char gs[INET6_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET6, x->gid.raw, gs, sizeof gs);
    host->log(COHORT_LOG_INFO, SUBSYS, "verbs: using %s port %d (%s; %s, MTU %d, GID index %d "
              "%s, ~%.1f GB/s)", x->devname, x->port, why,
              x->link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand",
              128 << x->mtu, x->gid_index, gs, x->gbps);
    *ctxp = x;
    return COHORT_SUCCESS;
}

static cohort_status_t vb_finalize(cohort_tp_ctx_t c)
{
    vb_ctx_t *x = c;
    if (!x) return COHORT_SUCCESS;
    ibv_close_device(x->dev);
    pthread_mutex_destroy(&x->lock);
    free(x);
    return COHORT_SUCCESS;
}

static cohort_status_t vb_get_attr(cohort_tp_ctx_t c, cohort_transport_attr_t *attr)
{
    vb_ctx_t *x = c;
    /* above tcp's estimate */
    return cohort_attr_give(attr, COHORT_SCOPE_NETWORK, x && x->gbps > 1.5 ? x->gbps : 1.5, 3.0);
}

/* ---- endpoints --------------------------------------------------------------------------- */

static cohort_status_t vb_ep_close(cohort_tp_ep_t e)
{
    vb_ep_t *ep = e;
    if (!ep) return COHORT_SUCCESS;
    for (int p = 0; ep->conns && p < ep->nranks; p++)
        if (ep->conns[p]) vb_conn_destroy(ep->conns[p]);
    kit_pool_drain(&ep->reqs);
    while (ep->incoming) vb_incoming_drop(ep, ep->incoming);
    if (ep->lfd >= 0) close(ep->lfd);
    if (ep->epfd >= 0) close(ep->epfd);
    kit_wake_close(&ep->wake);
    if (ep->pd) {
        if (ep->rc.hits + ep->rc.misses)
            ep->host->log(COHORT_LOG_INFO, SUBSYS, "verbs: rank %d: registration cache: %llu "
                          "hits, %llu registrations, %llu evictions, %llu dropped as unmapped",
                          ep->rank, (unsigned long long)ep->rc.hits,
                          (unsigned long long)ep->rc.misses, (unsigned long long)ep->rc.evictions,
                          (unsigned long long)ep->rc.invalidated);
        vb_rc_fini(&ep->rc);
    }
    if (ep->memev) vb_memev_stop();
    if (ep->cq) {
        if (ep->cq_unacked) ibv_ack_cq_events(ep->cq, ep->cq_unacked);
        ibv_destroy_cq(ep->cq);
    }
    if (ep->chan) ibv_destroy_comp_channel(ep->chan);
    if (ep->pd) ibv_dealloc_pd(ep->pd);
    free(ep->conns);
    free(ep);
    return COHORT_SUCCESS;
}

/* The registration cache keeps registrations across messages only where unmapped memory is
 * reported (vb_memev.h); else each large message registers its buffers and deregisters them when
 * it completes. Said once per process at INFO: which, and why. */
static void cache_start(vb_ep_t *ep)
{
    static atomic_int said;
    char why[256] = "";
    ep->memev = vb_memev_start(why, sizeof why);
    vb_rc_init(&ep->rc, VB_REG_CACHE, (size_t)sysconf(_SC_PAGESIZE), ep->memev, vb_mr_reg,
               vb_mr_dereg, ep);
    if (atomic_exchange(&said, 1)) return;
    if (ep->memev)
        ep->host->log(COHORT_LOG_INFO, SUBSYS, "verbs: rank %d: registration cache on: libucm "
                      "reports unmapped memory, so registrations are kept across messages and "
                      "dropped when their pages go", ep->rank);
    else
        ep->host->log(COHORT_LOG_INFO, SUBSYS, "verbs: rank %d: registration cache off: %s; "
                      "each large message registers its buffers and deregisters them when it "
                      "completes", ep->rank, why);
}

static cohort_status_t vb_ep_open(cohort_tp_ctx_t c, const cohort_ep_info_t *info,
                                  cohort_tp_ep_t *epp, void *addr, size_t *addrlen)
{
    vb_ctx_t *x = c;
    const cohort_host_v1_t *host = x->host;
    cohort_status_t st = cohort_ep_open_check(host, "verbs", info, epp, addr, addrlen);
    if (st) return st;
    if (*addrlen < VB_ADDR_SIZE)
        return host->error(COHORT_ERR_INVALID_ARG, "verbs: ep_open: the address buffer holds "
                           "%zu bytes, %d needed", *addrlen, VB_ADDR_SIZE);
    vb_ep_t *ep = calloc(1, sizeof *ep);
    if (!ep) return host->error(COHORT_ERR_NO_MEMORY, "verbs: no memory for an endpoint");
    KIT_EP_INIT(ep, x, host, info);
    snprintf(ep->job, sizeof ep->job, "%s", info->job_id ? info->job_id : "");
    ep->lfd = ep->epfd = ep->wake.fd = -1;
    kit_pool_init(&ep->reqs, sizeof(vb_req_t), VB_REQ_POOL);
    ep->conns = calloc((size_t)info->nranks, sizeof *ep->conns);
    const char *what = NULL;
    int err = 0;
    if (!ep->conns) { what = "calloc"; err = ENOMEM; goto fail; }
    if (!(ep->pd = ibv_alloc_pd(x->dev))) { what = "ibv_alloc_pd"; err = errno; goto fail; }
    cache_start(ep);
    if (!(ep->chan = ibv_create_comp_channel(x->dev))) {
        what = "ibv_create_comp_channel";
        err = errno;
        goto fail;
    }
    int fl = fcntl(ep->chan->fd, F_GETFL);
    if (fl < 0 || fcntl(ep->chan->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
        what = "fcntl(O_NONBLOCK) on the completion channel";
        err = errno;
        goto fail;
    }
    long cqe = (long)(VB_RX_WR + VB_SQ_WR) * (info->nranks > 1 ? info->nranks - 1 : 1) + 64;
    if (x->max_cqe > 0 && cqe > x->max_cqe) cqe = x->max_cqe;
    if (!(ep->cq = ibv_create_cq(x->dev, (int)cqe, ep, ep->chan, 0))) {
        what = "ibv_create_cq";
        err = errno;
        goto fail;
    }
    int rc = ibv_req_notify_cq(ep->cq, 0);
    if (rc) { what = "ibv_req_notify_cq"; err = rc; goto fail; }
    ep->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (ep->lfd < 0) { what = "socket"; err = errno; goto fail; }
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_ANY);
    socklen_t sl = sizeof sa;
    if (bind(ep->lfd, (struct sockaddr *)&sa, sizeof sa) < 0) { what = "bind"; err = errno; goto fail; }
    if (listen(ep->lfd, 128) < 0) { what = "listen"; err = errno; goto fail; }
    if (getsockname(ep->lfd, (struct sockaddr *)&sa, &sl) < 0) {
        what = "getsockname";
        err = errno;
        goto fail;
    }
    ep->lport = ntohs(sa.sin_port);
    if ((ep->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0) { what = "epoll_create1"; err = errno; goto fail; }
    if (kit_wake_open(&ep->wake) < 0) { what = "eventfd"; err = errno; goto fail; }
    ep->fe_listen.kind = FD_LISTEN;
    ep->fe_comp.kind = FD_COMP;
    ep->fe_async.kind = FD_ASYNC;
    ep->fe_event.kind = FD_EVENT;
    vb_epoll_set(ep, ep->lfd, &ep->fe_listen, EPOLLIN, EPOLL_CTL_ADD);
    vb_epoll_set(ep, ep->chan->fd, &ep->fe_comp, EPOLLIN, EPOLL_CTL_ADD);
    vb_epoll_set(ep, x->dev->async_fd, &ep->fe_async, EPOLLIN, EPOLL_CTL_ADD);
    vb_epoll_set(ep, ep->wake.fd, &ep->fe_event, EPOLLIN, EPOLL_CTL_ADD);
    ep->fatal_seen = atomic_load(&x->fatal_gen);

    unsigned char *b = addr;
    memset(b, 0, VB_ADDR_SIZE);
    kit_put_be32(b, VB_ADDR_MAGIC);
    b[4] = (unsigned char)x->link_layer;
    b[5] = (unsigned char)x->port;
    b[6] = (unsigned char)x->mtu;
    b[7] = (unsigned char)x->gid_index;
    memcpy(b + 8, x->gid.raw, 16);
    kit_put_be32(b + 24, x->lid);
    memcpy(b + 28, &x->ipv4, 4);
    kit_put_be32(b + 32, ep->lport);
    kit_put_be32(b + 36, 0x01020304u);
    *addrlen = VB_ADDR_SIZE;
    *epp = ep;
    return COHORT_SUCCESS;
fail:
    vb_ep_close(ep);
    return host->error(COHORT_ERR_TRANSPORT, "verbs: ep_open on %s port %d (rank %d): %s failed: "
                       "%s", x->devname, x->port, info->rank, what, strerror(err));
}

int vb_addr_decode(const void *blob, size_t len, vb_addr_t *a)
{
    unsigned char b[VB_ADDR_SIZE];
    if (!blob || len != VB_ADDR_SIZE) return -1;
    memcpy(b, blob, sizeof b);
    if (kit_get_be32(b) != VB_ADDR_MAGIC || kit_get_be32(b + 36) != 0x01020304u) return -1;
    a->link_layer = b[4];
    a->port = b[5];
    a->mtu = (enum ibv_mtu)b[6];
    memcpy(a->gid.raw, b + 8, 16);
    a->lid = (uint16_t)kit_get_be32(b + 24);
    memcpy(&a->ipv4, b + 28, 4);
    a->tport = (uint16_t)kit_get_be32(b + 32);
    return 0;
}

static int vb_can_reach(cohort_tp_ep_t e, int peer, const void *blob, size_t len)
{
    vb_ep_t *ep = e;
    vb_addr_t a;
    if (!ep || peer < 0 || peer >= ep->nranks || vb_addr_decode(blob, len, &a)) return 0;
    if (a.link_layer != ep->ctx->link_layer) return 0;
    if (a.link_layer != IBV_LINK_LAYER_ETHERNET &&
        memcmp(a.gid.raw, ep->ctx->gid.raw, 8) != 0)      /* IB: the same subnet prefix */
        return 0;
    return 1;
}

KIT_EP_FD(vb_ep_fd, vb_ep_t, epfd)

/* The plugin's table (kit_table.h: .init = vb_init ... .ep_fd = vb_ep_fd); no memory
 * registration (the registration cache works inside isend/irecv), no collectives. */
KIT_TRANSPORT_V1(vb, "verbs", VB_VERSION, .settings = verbs_settings);
