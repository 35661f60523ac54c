/* SPDX-License-Identifier: BSD-3-Clause */
/* cohort UCX transport (libcohort-ucx.so), over UCX's UCP tag API.
 *
 * Knows only <cohort/plugin.h> and <ucp/api/ucp.h>.
 *
 * Structure
 *   context   one ucp_context per process (ucp_init in init). UCX_TLS, UCX_NET_DEVICES and the
 *             other UCX_* variables are UCX's own and read by it untouched; COHORT_SOCKET_IFNAME
 *             becomes UCX's NET_DEVICES (ucp_config_modify, never setenv) only when
 *             UCX_NET_DEVICES is unset.
 *   endpoint  one ucp_worker per communicator (single-threaded, wakeup feature: ep_fd is the
 *             worker's event fd, armed by progress()). Its address blob is a small header and the
 *             worker's UCX address.
 *   conn      one ucp_ep per peer, created from the peer's worker address, with
 *             UCP_ERR_HANDLING_MODE_PEER where UCX's transports can detect a dead peer (its
 *             error callback fails the connection with COHORT_ERR_PEER_LOST, unless the peer's
 *             bye came first: then only what it sent and did not arrive fails). The connector
 *             creates its ucp_ep from the acceptor's blob and sends a hello (its own worker
 *             address, authenticated with host->auth); the acceptor creates its ucp_ep from the
 *             hello and answers with an authenticated ack. Requests posted before that are
 *             queued.
 *   messages  UCX tag = sender rank and a per-direction sequence number, so the n-th receive
 *             matches exactly the n-th send whatever UCX's own ordering; cohort's tag and size
 *             travel in a 16-byte header in front of the payload (an iov of two), and a
 *             receive whose header carries another tag, or whose message is longer (UCX:
 *             truncated), completes with COHORT_ERR_MISMATCH.
 *   large     From UX_SPLIT_MIN bytes, on connections with UCX's error handling and when
 *             COHORT_UCX_ZCOPY says so (auto: UCX has an RDMA transport), the header travels
 *             alone and the payload follows as contiguous chunks of UX_CHUNK bytes,
 *             each a UCX message of its own (the payload bit, the message's sequence number and
 *             the chunk's index in its UCX tag): UCX 1.13's rendezvous moves an iov in
 *             fragments, a contiguous buffer by zero-copy. The receiver posts the iov as
 *             always; a header that arrives alone (16 bytes, length > 0) makes it receive the
 *             chunks, UX_SLOTS at a time, into slots of its own (ucp_mem_map'd once each) and
 *             copy each into the caller's buffer. Not straight into the caller's buffer: UCX
 *             cannot stop a receive it has matched (cancel and a forced close do not), and the
 *             caller may free its buffer once conn_close returns; a slot belongs to the plugin
 *             until UCX lets go of it. Posting happens in ux_ep_work, not inside UCX's callbacks.
 *   memory    mem_reg is ucp_mem_map; a split payload sent from a registered range goes with
 *             that memh (UCP_OP_ATTR_FIELD_MEMH: no registration lookup per message). Without
 *             one, UCX's own registration cache serves (UCX_RCACHE_*).
 * Progress happens only in progress(), test() and conn_test() (no thread of ours; UCX may run
 * its own async thread for some transports). Not thread-safe per endpoint: the core serialises
 * calls per endpoint; endpoints of different communicators have their own workers.
 *
 * Files
 *   ucx.c      this file: the entry points (the ops table, cohort_transport_v1), the context
 *              (UCX's configuration, attr) and the endpoint (its worker, progress, ep_fd, the
 *              work it does outside UCX's callbacks, ep_destroy).
 *   ux_data.c  requests and the message data path: send and receive, split messages' chunks
 *              and their receive slots, mem_reg, test.
 *   ux_conn.c  connections: hello and ack, failures, the bye and judging a lost peer, the
 *              flush before a close.
 *   ux_int.h   the types, constants and cross-file prototypes they share (not installed).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <cohort/plugin.h>
#include "transports/common/kit_bytes.h"
#include "transports/common/kit_objs.h"
#include "transports/common/kit_settings.h"
#include "transports/common/kit_table.h"

#include <ucp/api/ucp.h>

#include "ux_int.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <poll.h>
#include <pthread.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- small helpers ----------------------------------------------------------------------- */

cohort_status_t ux_status(ucs_status_t s)
{
    switch (s) {
    case UCS_OK: return COHORT_SUCCESS;
    case UCS_INPROGRESS: return COHORT_IN_PROGRESS;
    case UCS_ERR_NO_MEMORY: return COHORT_ERR_NO_MEMORY;
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_CANCELED:
        return COHORT_ERR_PEER_LOST;
    case UCS_ERR_TIMED_OUT: return COHORT_ERR_TIMEOUT;
    case UCS_ERR_MESSAGE_TRUNCATED: return COHORT_ERR_MISMATCH;
    case UCS_ERR_UNSUPPORTED: return COHORT_ERR_UNSUPPORTED;
    default: return COHORT_ERR_TRANSPORT;
    }
}

/* Words for what ux_status made of a UCX status (plugins reach the core only through the host
 * table, and a core loaded without RTLD_GLOBAL, as by Python, exports nothing to plugins). */
const char *ux_status_words(cohort_status_t st)
{
    switch (st) {
    case COHORT_ERR_NO_MEMORY: return "no memory";
    case COHORT_ERR_PEER_LOST: return "the peer's connection was lost, reset or refused";
    case COHORT_ERR_TIMEOUT: return "timed out";
    case COHORT_ERR_MISMATCH: return "message truncated";
    case COHORT_ERR_UNSUPPORTED: return "unsupported";
    default: return "transport error";
    }
}

/* ep_fd's wake-up (kit_wake.h): the worker's fd is ep_fd, ucp_worker_signal makes it readable. */
void ux_ep_signal(ux_ep_t *ep)
{
    if (kit_wake_claim(&ep->wake)) (void)ucp_worker_signal(ep->worker);
}

static void job_hash(const cohort_host_v1_t *host, const char *job, unsigned char out[UX_MAC_LEN])
{
    unsigned char in[8 + 64];
    memset(in, 0, sizeof in);
    memcpy(in, "cohtucx1", 8);
    size_t n = job ? strlen(job) : 0;
    if (n > 64) n = 64;
    if (n) memcpy(in + 8, job, n);
    host->auth(in, sizeof in, out);
}

/* This machine: the kernel's boot id (ranks with the same one can use shared memory). */
static void host_id(const cohort_host_v1_t *host, unsigned char out[UX_PROC_LEN])
{
    struct stat st;
    kit_put_le32(out + UX_HOST_LEN, (uint32_t)getpid());
    kit_put_le64(out + UX_HOST_LEN + 4, stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0);
    unsigned char in[8 + 64];
    memset(in, 0, sizeof in);
    memcpy(in, "cohthost", 8);
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t r = read(fd, in + 8, 64);
        (void)r;
        close(fd);
    } else {
        (void)gethostname((char *)in + 8, 63);
    }
    unsigned char mac[UX_MAC_LEN];
    host->auth(in, sizeof in, mac);
    memcpy(out, mac, UX_HOST_LEN);
}

/* ---- the endpoint's work ----------------------------------------------------------------- */

double ux_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void ux_wait_req(ux_ep_t *ep, void *p, double until)
{
    while (ucp_request_check_status(p) == UCS_INPROGRESS && ux_now_s() < until) {
        if (ucp_worker_progress(ep->worker)) continue;
        if (ucp_worker_arm(ep->worker) == UCS_OK) {
            struct pollfd pf = { ep->efd, POLLIN, 0 };
            (void)poll(&pf, 1, 1);
        }
    }
}

void ux_ep_work(ux_ep_t *ep)
{
    /* A connection ended (ux_conn_lost below): first take what else has arrived; the peer's last
     * messages and its bye may come on another of UCX's sockets than the one that ended. */
    if (ep->nlost) (void)ux_worker_progress(ep);
    if (ep->nstage) ux_post_payloads(ep);
    ux_watch_peers(ep);
    if (ep->hrx.done) ux_hello_arrived(ep);
    ux_post_hello_recv(ep);
    /* every bye that has arrived (a repost takes the next one waiting in UCX at once) */
    for (int i = 0; i <= ep->nranks; i++) {
        if (ep->brx.done) ux_bye_arrived(ep);
        ux_post_bye_recv(ep);
        if (!ep->brx.done) break;
    }
    for (ux_conn_t *c = ep->conns; c; c = c->next) {
        if (c->ack_rx) ux_ack_arrived(c);
        if (c->ack_sent && c->state == C_CONNECTING) ux_conn_ready(c);
        if (c->lost == 1) ux_conn_lost(c);
        if ((c->state == C_FAILED || c->lost == 2) && c->uep) ux_conn_close_uep(c);
    }
}

int ux_worker_progress(ux_ep_t *ep)
{
    int n = 0;
    for (int i = 0; i < UX_PROGRESS_MAX; i++) {
        unsigned k = ucp_worker_progress(ep->worker);
        if (!k) break;
        n += (int)k;
    }
    return n;
}

/* ---- plugin API -------------------------------------------------------------------------- */

static char ux_version[224] = UX_PLUGIN_VERSION;

/* 1 if the comma list of UCX transport names holds one that is neither self, tcp nor shared
 * memory (an RDMA transport: rc, ud, dc, ...). */
static int has_rdma(const char *tls)
{
    static const char *const covered[] = { "self", "tcp", "posix", "sysv", "cma", "knem",
                                           "xpmem" };
    for (const char *p = tls; *p;) {
        size_t k = strcspn(p, ",");
        int known = 0;
        for (size_t i = 0; i < sizeof covered / sizeof covered[0]; i++)
            known |= k == strlen(covered[i]) && !strncmp(p, covered[i], k);
        if (!known) return 1;
        p += k;
        if (*p == ',') p++;
    }
    return 0;
}

static int named_in_transports(const cohort_host_v1_t *host)
{
    const char *t = host->setting("COHORT_TRANSPORTS");
    if (!t) return 0;
    while (*t == ' ') t++;
    if (*t == '^') return 0;
    for (const char *p = t; *p;) {
        size_t n = strcspn(p, ",");
        const char *a = p, *e = p + n;
        while (a < e && *a == ' ') a++;
        while (e > a && e[-1] == ' ') e--;
        if (e - a == 3 && !strncmp(a, "ucx", 3)) return 1;
        p += n;
        if (*p == ',') p++;
    }
    return 0;
}

/* The transports of the UCX context (ucp_context_print_info's "resource" lines), as
 * "tcp/lo tcp/eth0 ..." into res and the distinct transport names into tls; 1 if one of them is a
 * network transport (anything but self and shared memory). */
static int context_resources(ucp_context_h ucp, char *res, size_t rlen, char *tls, size_t tlen)
{
    res[0] = tls[0] = '\0';
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return 0;
    ucp_context_print_info(ucp, f);
    fclose(f);
    int net = 0;
    size_t ru = 0, tu = 0;
    for (char *line = text, *nl; line && *line; line = nl ? nl + 1 : NULL) {
        nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        if (!strstr(line, "resource")) continue;
        char *last = strrchr(line, ' ');
        if (!last || !strchr(last, '/')) continue;
        last++;
        size_t tn = strcspn(last, "/");
        if (ru < rlen) {
            int w = snprintf(res + ru, rlen - ru, "%s%s", ru ? " " : "", last);
            if (w > 0) ru += (size_t)w;
        }
        char name[32];
        snprintf(name, sizeof name, "%.*s", (int)(tn < 31 ? tn : 31), last);
        static const char *const local[] = { "self", "posix", "sysv", "cma", "knem", "xpmem" };
        int is_local = 0;
        for (size_t i = 0; i < sizeof local / sizeof local[0]; i++)
            is_local |= !strcmp(name, local[i]);
        net |= !is_local;
        int seen = 0;
        for (const char *p = tls; *p && !seen;) {
            size_t k = strcspn(p, ",");
            seen = k == strlen(name) && !strncmp(p, name, k);
            p += k;
            if (*p == ',') p++;
        }
        if (!seen && tu < tlen) {
            int w = snprintf(tls + tu, tlen - tu, "%s%s", tu ? "," : "", name);
            if (w > 0) tu += (size_t)w;
        }
    }
    free(text);
    return net;
}

static cohort_status_t ux_init(const cohort_host_v1_t *host, cohort_tp_ctx_t *ctx)
{
    if (!host || !ctx) return COHORT_ERR_INVALID_ARG;
    if (!COHORT_HAS_FIELD(host, cohort_host_v1_t, auth) || !host->log || !host->error ||
        !host->setting || !host->setting_long || !host->netifs || !host->auth) {
        if (COHORT_HAS_FIELD(host, cohort_host_v1_t, error) && host->error)
            return host->error(COHORT_ERR_UNSUPPORTED, "ucx: the core's host table is too old "
                               "or incomplete (size %zu)", host->size);
        return COHORT_ERR_UNSUPPORTED;
    }
    const char *uver = ucp_get_version_string();
    ucp_config_t *cfg = NULL;
    ucs_status_t s = ucp_config_read(NULL, NULL, &cfg);
    if (s != UCS_OK)
        return host->error(COHORT_ERR_UNSUPPORTED, "ucx: UCX %s failed to initialise: "
                           "ucp_config_read: %s (check the UCX_* variables)", uver,
                           ucs_status_string(s));
    /* COHORT_SOCKET_IFNAME -> UCX's NET_DEVICES, only when the user did not set it. */
    char devs[512] = "";
    const char *ifspec = host->setting("COHORT_SOCKET_IFNAME");
    if (ifspec && *ifspec && !getenv("UCX_NET_DEVICES")) {
        const cohort_netif_t *ifs = NULL;
        int nifs = 0;
        cohort_status_t st = host->netifs(&ifs, &nifs);
        if (st) {
            ucp_config_release(cfg);
            return st;
        }
        size_t used = 0;
        for (int i = 0; i < nifs; i++) {
            int dup = 0;
            for (int j = 0; j < i; j++) dup |= !strcmp(ifs[i].name, ifs[j].name);
            if (dup || used >= sizeof devs) continue;
            int w = snprintf(devs + used, sizeof devs - used, "%s%.32s", used ? "," : "",
                             ifs[i].name);
            if (w > 0) used += (size_t)w;
        }
        if (devs[0]) {
            s = ucp_config_modify(cfg, "NET_DEVICES", devs);
            if (s != UCS_OK) {
                ucp_config_release(cfg);
                return host->error(COHORT_ERR_UNSUPPORTED, "ucx: UCX %s refuses "
                                   "NET_DEVICES='%s' (from COHORT_SOCKET_IFNAME='%s'): "
                                   "ucp_config_modify: %s; set UCX_NET_DEVICES yourself",
                                   uver, devs, ifspec, ucs_status_string(s));
            }
        }
    }
    ucp_params_t prm;
    memset(&prm, 0, sizeof prm);
    prm.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED |
                     UCP_PARAM_FIELD_NAME;
    prm.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
    prm.mt_workers_shared = 1;   /* communicators on different threads share the context */
    prm.name = "cohort";
    ucp_context_h ucp = NULL;
    s = ucp_init(&prm, cfg, &ucp);
    ucp_config_release(cfg);
    if (s != UCS_OK)
        return host->error(COHORT_ERR_UNSUPPORTED, "ucx: UCX %s failed to initialise: ucp_init: "
                           "%s (UCX_TLS='%s', UCX_NET_DEVICES='%s'%s; `ucx_info -d` lists what "
                           "UCX finds)", uver, ucs_status_string(s),
                           getenv("UCX_TLS") ? getenv("UCX_TLS") : "all",
                           getenv("UCX_NET_DEVICES") ? getenv("UCX_NET_DEVICES")
                           : (devs[0] ? devs : "all"),
                           devs[0] ? ", from COHORT_SOCKET_IFNAME" : "");
    char res[512], tls[160];
    int net = context_resources(ucp, res, sizeof res, tls, sizeof tls);
    int rdma = has_rdma(tls);
    if (!named_in_transports(host) && !rdma) {
        ucp_cleanup(ucp);
        return host->error(COHORT_ERR_UNSUPPORTED, "ucx: UCX %s finds only %s here (%s), which "
                           "cohort's own tcp and shm transports cover; name ucx in "
                           "COHORT_TRANSPORTS to use it anyway", uver, tls[0] ? tls : "nothing",
                           res[0] ? res : "no resources");
    }
    ux_ctx_t *c = calloc(1, sizeof *c);
    if (!c) {
        ucp_cleanup(ucp);
        return host->error(COHORT_ERR_NO_MEMORY, "ucx: no memory for the plugin context");
    }
    int e = pthread_mutex_init(&c->lock, NULL);
    if (e) {
        free(c);
        ucp_cleanup(ucp);
        return host->error(COHORT_ERR_SYSTEM, "ucx: pthread_mutex_init for the plugin context "
                           "failed: %s", strerror(e));
    }
    c->host = host;
    c->ucp = ucp;
    c->has_net = net;
    c->has_rdma = rdma;
    snprintf(c->tls, sizeof c->tls, "%s", tls);
    snprintf(ux_version, sizeof ux_version, "%s (UCX %s: %.150s)", UX_PLUGIN_VERSION, uver,
             tls[0] ? tls : "no transports");
    host->log(COHORT_LOG_INFO, SUBSYS, "ucx: UCX %s with %s%s%s", uver, res,
              devs[0] ? "; NET_DEVICES from COHORT_SOCKET_IFNAME: " : "", devs);
    *ctx = c;
    return COHORT_SUCCESS;
}

static cohort_status_t ux_ep_close(cohort_tp_ep_t epv);

static cohort_status_t ux_finalize(cohort_tp_ctx_t ctxv)
{
    ux_ctx_t *ctx = (ux_ctx_t *)ctxv;
    if (!ctx) return COHORT_SUCCESS;
    while (ctx->eps) ux_ep_close(ctx->eps);
    if (ctx->nabandoned) return COHORT_SUCCESS;   /* their workers need ctx->ucp (ep_abandon) */
    ucp_cleanup(ctx->ucp);
    pthread_mutex_destroy(&ctx->lock);
    free(ctx);
    return COHORT_SUCCESS;
}

static cohort_status_t ux_get_attr(cohort_tp_ctx_t ctxv, cohort_transport_attr_t *attr)
{
    ux_ctx_t *ctx = (ux_ctx_t *)ctxv;
    /* With RDMA (anything beyond tcp and shared memory) UCX is preferred over cohort's tcp, but
     * not over cohort's own verbs transport (which never estimates below 1.5 GB/s): Debian's
     * UCX 1.13 aborts the process on some endpoint failures over rc/ud verbs (seen on Soft-RoCE
     * across two VMs), which the verbs plugin turns into errors. With only tcp it is not faster
     * than cohort's own (docs/performance-log.md), so it ranks below. */
    int rdma = ctx && ctx->has_rdma;
    return cohort_attr_give(attr, COHORT_SCOPE_NETWORK, rdma ? 1.4 : 1.0, rdma ? 3.0 : 30.0);
}

/* Lets the worker finish what UCX started on its own before ucp_worker_destroy: a peer's
 * connection that wireup accepted for an endpoint of ours never made (the collective failed
 * before this rank reached that peer) may still queue its wireup reply behind a tcp connect,
 * and Debian's UCX 1.13 asserts (abort) when the worker's destroy purges such a reply (seen under
 * ASan, 3 runs in 30 of a 3-rank job whose first broadcast mismatched; upstream later dropped
 * the assertion, openucx/ucx#8175). A worker flush waits for exactly that. Bounded by
 * UX_CLOSE_FLUSH_S: a peer that stopped reading costs at most that, and what is left is
 * purged as before. Our own ucp_eps are closed by now, so no user memory is read. */
static void worker_settle(ux_ep_t *ep)
{
    ucp_request_param_t prm;
    memset(&prm, 0, sizeof prm);
    ucs_status_ptr_t p = ucp_worker_flush_nbx(ep->worker, &prm);
    if (!UCS_PTR_IS_PTR(p)) return;
    ux_wait_req(ep, p, ux_now_s() + UX_CLOSE_FLUSH_S);
    if (ucp_request_check_status(p) == UCS_INPROGRESS) ucp_request_cancel(ep->worker, p);
    ucp_request_free(p);
}

/* ep_failed (ABI 1.4): the communicator failed and every rank of the job was told; none waits
 * for this one's bye. Its worker is then neither progressed nor destroyed again: no bye, no
 * flush, no close of its ucp_eps, no ucp_worker_destroy. A peer whose collective failed first
 * may have started UCX's wire-up towards this rank and exited before this rank's reply left;
 * Debian's UCX 1.13 then aborts the process (ucp_request.c:684, "got REP message") when it
 * purges that reply: on the refused connect that the next progress reports, or in
 * ucp_worker_destroy (upstream dropped the assertion in 1.14, openucx/ucx#8175).
 * docs/plugins.md has the measurements. Such endpoints stay here, reachable, with what UCX may
 * still hold of theirs (requests, receive slots) until the process exits; the plugin pins
 * itself in memory, since unloading UCX would pull the code from under UCX's async thread. */
static pthread_mutex_t abandoned_lock = PTHREAD_MUTEX_INITIALIZER;
static ux_ep_t *abandoned;

static void ux_ep_failed(cohort_tp_ep_t epv)
{
    if (epv) ((ux_ep_t *)epv)->job_failed = 1;
}

static void ep_abandon(ux_ep_t *ep)
{
    static int pinned;
    pthread_mutex_lock(&abandoned_lock);
    ep->next = abandoned;
    ep->prev = NULL;
    abandoned = ep;
    ep->ctx->nabandoned++;
    if (!pinned) {
        Dl_info di;
        if (dladdr(&abandoned, &di) && di.dli_fname &&
            dlopen(di.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE))
            pinned = 1;
    }
    pthread_mutex_unlock(&abandoned_lock);
    ep->host->log(COHORT_LOG_INFO, SUBSYS, "ucx: rank %d: communicator %016llx failed on every "
                  "rank: its UCX worker is left untouched until the process exits, since UCX "
                  "1.13 may abort the process when it progresses or destroys a worker after a "
                  "peer left during UCX's connection set-up", ep->rank,
                  (unsigned long long)ep->comm_id);
}

static void ep_destroy(ux_ep_t *ep)
{
    while (ep->conns) ux_conn_destroy(ep->conns);
    if (ep->hrx.req) {
        void *u = ep->hrx.req;
        ep->hrx.req = NULL;
        ucp_request_cancel(ep->worker, u);   /* its callback frees it */
    }
    if (ep->brx.req) {
        void *u = ep->brx.req;
        ep->brx.req = NULL;
        ucp_request_cancel(ep->worker, u);
    }
    if (ep->job_failed) {
        /* idle requests are nobody's (no callback of its worker runs again to put one back);
         * kept, LeakSanitizer would call all but the first leaked: it does not follow the
         * list's links through their poisoned memory (kit_req.h) */
        kit_pool_drain(&ep->reqs);
        ep_abandon(ep);
        return;
    }
    if (ep->worker) {
        /* Let the closes and cancels deliver their callbacks (bounded: no waiting). */
        for (int i = 0; i < 16 && ep->orphans; i++) (void)ucp_worker_progress(ep->worker);
        /* Byes and hellos that arrived after the last progress (the peers' byes often come
         * during the loop above): take them, or UCX warns about unmatched messages when the
         * worker goes. */
        for (int i = 0; i < 1024; i++) {
            ucp_tag_recv_info_t info;
            ucp_tag_message_h m = ucp_tag_probe_nb(ep->worker, UX_KIND_BYE << UX_KIND_SHIFT,
                                                   1ull << UX_KIND_SHIFT, 1, &info);
            if (!m) break;
            unsigned char *junk = malloc(info.length ? info.length : 1);
            if (!junk) break;
            ucp_request_param_t prm;
            memset(&prm, 0, sizeof prm);
            ucs_status_ptr_t p = ucp_tag_msg_recv_nbx(ep->worker, junk, info.length, m, &prm);
            for (int k = 0; k < 16 && UCS_PTR_IS_PTR(p) &&
                            ucp_request_check_status(p) == UCS_INPROGRESS; k++)
                (void)ucp_worker_progress(ep->worker);
            if (UCS_PTR_IS_PTR(p)) {
                if (ucp_request_check_status(p) == UCS_INPROGRESS) ucp_request_cancel(ep->worker, p);
                ucp_request_free(p);
            }
            free(junk);
        }
        worker_settle(ep);
        if (ep->addr) ucp_worker_release_address(ep->worker, ep->addr);
        ucp_worker_destroy(ep->worker);
    }
    /* Requests whose callbacks never came: UCX released its part with the worker. */
    while (ep->orphans) {
        ux_req_t *r = ep->orphans;
        r->ucx = NULL;
        ux_req_free(r);
    }
    kit_pool_drain(&ep->reqs);
    while (ep->npool > 0) {
        ep->npool--;
        ux_slot_release(ep->ctx, ep->pool[ep->npool], ep->pool_mh[ep->npool]);
    }
    while (ep->early) {
        ux_hello_t *h = ep->early;
        ep->early = h->next;
        free(h->buf);
        free(h);
    }
    free(ep->hbuf);
    free(ep);
}

/* ---- settings: the plugin's table (cohort-info prints it, the core checks every value) ---- */

KIT_SETTING(set_zcopy, "COHORT_UCX_ZCOPY", "auto",
            "ucx: payloads from 64 KiB as contiguous 512 KiB chunks through registered receive "
            "slots, so that UCX's zero-copy rendezvous applies: auto (when UCX has an RDMA "
            "transport), 1 (also over tcp), 0 (never: one two-part message)", COHORT_PSET_WORD,
            0, 0, "auto|0|1", NULL);

static const cohort_plugin_setting_v1_t *const ucx_settings[] = { &set_zcopy, NULL };

static cohort_status_t ux_ep_open(cohort_tp_ctx_t ctxv, const cohort_ep_info_t *info,
                                  cohort_tp_ep_t *epp, void *addr, size_t *addrlen)
{
    ux_ctx_t *ctx = (ux_ctx_t *)ctxv;
    const cohort_host_v1_t *host = ctx->host;
    cohort_status_t st = cohort_ep_open_check(host, "ucx", info, epp, addr, addrlen);
    if (st) return st;
    if (info->nranks > (1 << UX_RANK_BITS))
        return host->error(COHORT_ERR_UNSUPPORTED, "ucx: a communicator of %d ranks is larger "
                           "than the %d this transport supports", info->nranks,
                           1 << UX_RANK_BITS);
    /* COHORT_UCX_ZCOPY: large payloads in chunks (see "large" at the top). auto: only when UCX
     * has an RDMA transport, where zero-copy pays; over tcp the gain is smaller while UCX
     * 1.13's own assertions on closing with transfers in flight fire more often. */
    const char *zv = host->setting(set_zcopy.name);
    int zcopy;
    if (!zv || !strcasecmp(zv, "auto")) zcopy = ctx->has_rdma;
    else if (!strcmp(zv, "0") || !strcmp(zv, "1")) zcopy = zv[0] == '1';
    else
        return host->error(COHORT_ERR_INVALID_ARG, "COHORT_UCX_ZCOPY='%.40s' is not one of "
                           "auto, 0, 1", zv);
    ux_ep_t *ep = calloc(1, sizeof *ep);
    if (!ep) return host->error(COHORT_ERR_NO_MEMORY, "ucx: no memory for an endpoint");
    KIT_EP_INIT(ep, ctx, host, info);
    ep->zcopy = zcopy;
    kit_pool_init(&ep->reqs, sizeof(ux_req_t), UX_REQ_POOL);
    ep->efd = -1;
    ep->wake.fd = -1;   /* the worker's fd is ep_fd: kit_wake_claim only */
    ep->hrx.ep = ep->brx.ep = ep;
    job_hash(host, info->job_id, ep->job_hash);
    host_id(host, ep->proc);
    ucp_worker_params_t wp;
    memset(&wp, 0, sizeof wp);
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    ucs_status_t s = ucp_worker_create(ctx->ucp, &wp, &ep->worker);
    const char *what = "ucp_worker_create";
    if (s == UCS_OK) {
        what = "ucp_worker_get_efd";
        s = ucp_worker_get_efd(ep->worker, &ep->efd);
    }
    if (s == UCS_OK) {
        what = "ucp_worker_get_address";
        s = ucp_worker_get_address(ep->worker, &ep->addr, &ep->addr_len);
    }
    if (s != UCS_OK) {
        if (ep->worker) {   /* (the address is what failed, or was never asked for) */
            ucp_worker_destroy(ep->worker);
            ep->worker = NULL;
        }
        free(ep);
        return host->error(s == UCS_ERR_NO_MEMORY ? COHORT_ERR_NO_MEMORY : COHORT_ERR_TRANSPORT,
                           "ucx: rank %d cannot set up its UCX worker: %s: %s (UCX_TLS='%s'; "
                           "`ucx_info -d` lists UCX's devices)", info->rank, what,
                           ucs_status_string(s), getenv("UCX_TLS") ? getenv("UCX_TLS") : "all");
    }
    size_t need = UX_BLOB_HDR + ep->addr_len;
    if (need > *addrlen) {
        size_t al = ep->addr_len;
        ep_destroy(ep);
        return host->error(COHORT_ERR_UNSUPPORTED, "ucx: rank %d: its UCX worker address is %zu "
                           "bytes, more than the %zu the core exchanges; restrict UCX's "
                           "transports with UCX_TLS or UCX_NET_DEVICES", info->rank, al,
                           *addrlen - UX_BLOB_HDR);
    }
    unsigned char *b = (unsigned char *)addr;
    kit_put_le32(b, UX_MAGIC);
    kit_put_le32(b + 4, (uint32_t)ep->nranks);
    kit_put_le32(b + 8, (uint32_t)ep->rank);
    kit_put_le32(b + 12, ctx->has_net ? 1u : 0u);
    kit_put_le64(b + 16, ep->comm_id);
    memcpy(b + 24, ep->job_hash, UX_MAC_LEN);
    memcpy(b + UX_PROC_OFF, ep->proc, UX_PROC_LEN);
    kit_put_le32(b + UX_BLOB_HDR - 4, (uint32_t)ep->addr_len);
    memcpy(b + UX_BLOB_HDR, ep->addr, ep->addr_len);
    *addrlen = need;
    ux_post_hello_recv(ep);
    ux_post_bye_recv(ep);
    pthread_mutex_lock(&ctx->lock);
    KIT_LIST_PUSH(ctx->eps, ep);
    pthread_mutex_unlock(&ctx->lock);
    host->log(COHORT_LOG_INFO, SUBSYS, "ucx: rank %d: worker address of %zu bytes; UCX "
              "transports %s", ep->rank, ep->addr_len, ctx->tls);
    *epp = ep;
    return COHORT_SUCCESS;
}

static cohort_status_t ux_ep_close(cohort_tp_ep_t epv)
{
    ux_ep_t *ep = (ux_ep_t *)epv;
    if (!ep) return COHORT_SUCCESS;
    ux_ctx_t *ctx = ep->ctx;
    pthread_mutex_lock(&ctx->lock);
    KIT_LIST_UNLINK(ctx->eps, ep);
    pthread_mutex_unlock(&ctx->lock);
    ep_destroy(ep);
    return COHORT_SUCCESS;
}

cohort_status_t ux_progress(cohort_tp_ep_t epv)
{
    ux_ep_t *ep = (ux_ep_t *)epv;
    ep->wake.in_progress = 1;
    for (int round = 0; round < 4; round++) {
        (void)ux_worker_progress(ep);
        ux_ep_work(ep);
        ucs_status_t s = ucp_worker_arm(ep->worker);
        if (s == UCS_OK) break;
        if (s != UCS_ERR_BUSY) {
            ep->wake.in_progress = 0;
            return ep->host->error(COHORT_ERR_TRANSPORT, "ucx: rank %d: ucp_worker_arm failed: "
                                   "%s", ep->rank, ucs_status_string(s));
        }
        if (round == 3) (void)ucp_worker_signal(ep->worker);   /* still busy: stay readable */
    }
    ep->wake.pending = 0;   /* the worker is armed (or signalled): no wake-up of ours pends */
    ep->wake.in_progress = 0;
    return COHORT_SUCCESS;
}

KIT_EP_FD(ux_ep_fd, ux_ep_t, efd)

/* The plugin's table (kit_table.h: .init = ux_init ... .ep_fd = ux_ep_fd); no collectives. */
KIT_TRANSPORT_V1(ux, "ucx", ux_version, .mem_reg = ux_mem_reg, .mem_dereg = ux_mem_dereg,
                 .ep_failed = ux_ep_failed, .settings = ucx_settings);
