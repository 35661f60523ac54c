/* SPDX-License-Identifier: BSD-3-Clause */
/* cohort UCX transport: connections. A connection's ucp_ep (with UCX's peer error handling
 * where its transports allow, else a watch on the peer's pid), the authenticated hello and ack
 * that set it up (hellos that come before accept wait), its failure (ux_conn_fail, and the
 * errors UCX reports, judged after the byes on a ready connection), the bye a closing side
 * sends and what the peer makes of it, the bounded flush before a close, and the plugin API
 * of connections: can_reach, connect, accept, conn_test, conn_close. The design ("conn") is
 * described at the top of ucx.c.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <cohort/plugin.h>
#include "transports/common/kit_auth.h"
#include "transports/common/kit_bytes.h"
#include "transports/common/kit_fail.h"
#include "transports/common/kit_objs.h"

#include <ucp/api/ucp.h>

#include "ux_int.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

_Static_assert(UX_MAC_LEN == KIT_MAC_LEN, "ucx frames carry the kit's MAC");

/* ---- connections ------------------------------------------------------------------------- */

void ux_conn_close_uep(ux_conn_t *c)
{
    if (!c->uep) return;
    ucp_request_param_t prm;
    memset(&prm, 0, sizeof prm);
    /* A forced close needs peer error handling on both sides (UCX's documented contract:
     * without it the peer meets undefined behaviour; UCX 1.13's shared memory crashed the peer,
     * attaching segments of ours that are gone). Without it: a flushing close. */
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    prm.flags = c->peer_eh ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    ucs_status_ptr_t p = ucp_ep_close_nbx(c->uep, &prm);
    if (UCS_PTR_IS_PTR(p)) ucp_request_free(p);   /* released when it completes */
    c->uep = NULL;
}

/* Every pending and later request fails with st and the message. */
void ux_conn_fail(ux_conn_t *c, cohort_status_t st, const char *fmt, ...)
{
    KIT_CONN_FAIL_ONCE(c, C_FAILED, st, fmt);
    ux_ep_t *ep = c->ep;
    c->def_h = c->def_t = NULL;
    for (ux_req_t *r = c->all; r; r = r->anext)
        if (!r->done) ux_req_finish(r, st);
    /* UCX would keep receives posted: cancel them (their callbacks come now or later; the
     * requests stay listed until then). The ucp_ep is closed by ux_ep_work. */
    for (ux_req_t *r = c->all, *next; r; r = next) {
        next = r->anext;
        if (r->ucx && !r->is_send) ucp_request_cancel(ep->worker, r->ucx);
    }
    ux_ep_signal(ep);
}

/* UCX failed an operation of c (m: the message it belongs to, if any) or its ucp_ep (err_cb).
 * On a ready connection an error that says the connection ended (st PEER_LOST) is judged by
 * ux_ep_work (ux_conn_lost) after the byes that arrived before it, not here: a peer that closes
 * after its last sends ends the connection too (over tcp UCX reports "Endpoint timeout" for
 * it), and what it sent before must still be received. Once the end is judged to be the
 * peer's close (lost == 2), an error fails only the message it belongs to. */
void ux_conn_ucx_error(ux_conn_t *c, ux_req_t *m, cohort_status_t st, const char *fmt, ...)
{
    if (c->state == C_FAILED) return;   /* ux_conn_fail has finished every request */
    char msg[sizeof c->lostmsg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (c->lost == 2) {
        if (m) ux_req_fail_msg(m, st, "%s", msg);
        return;
    }
    if (c->state == C_READY && st == COHORT_ERR_PEER_LOST) {
        if (!c->lost) {
            c->lost = 1;
            snprintf(c->lostmsg, sizeof c->lostmsg, "%s", msg);
            c->ep->nlost++;
            ux_ep_signal(c->ep);
        }
        return;
    }
    ux_conn_fail(c, st, "%s", msg);
}

/* Cancels the receives UCX holds for messages of c that have finished (failed). A cancel runs
 * the request's callback at once, which may free it and its chunks: the walk starts over
 * after each. */
void ux_cancel_finished_recvs(ux_conn_t *c)
{
    for (int again = 1; again;) {
        again = 0;
        for (ux_req_t *r = c->all; r; r = r->anext) {
            if (r->is_send || !r->ucx || r->cancelled) continue;
            if (!(r->kind == K_DATA ? r->done : r->kind == K_CHUNK && r->parent->done)) continue;
            r->cancelled = 1;
            ucp_request_cancel(c->ep->worker, r->ucx);
            again = 1;
            break;
        }
    }
}

static void err_cb(void *arg, ucp_ep_h uep, ucs_status_t status)
{
    ux_conn_t *c = (ux_conn_t *)arg;
    (void)uep;
    ux_conn_ucx_error(c, NULL, COHORT_ERR_PEER_LOST, "ucx: rank %d lost rank %d: %s (UCX detected "
                      "the failure of the peer or of the path to it: the peer process exited or "
                      "crashed, or the network failed)", c->ep->rank, c->peer,
                      ucs_status_string(status));
}

static ux_conn_t *conn_new(ux_ep_t *ep, int peer, int connector)
{
    ux_conn_t *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    KIT_CONN_INIT(c, ep, peer, connector, C_CONNECTING);
    KIT_LIST_PUSH(ep->conns, c);
    return c;
}

/* Orphans the requests UCX still holds (their callbacks free them), frees the others. */
void ux_conn_destroy(ux_conn_t *c)
{
    ux_ep_t *ep = c->ep;
    if (c->lost == 1) ep->nlost--;   /* not to be judged any more */
    for (ux_req_t *r = c->all, *next; r; r = next) {
        next = r->anext;
        if (!r->ucx) {
            ux_req_free(r);
            continue;
        }
        void *u = r->ucx;
        int is_send = r->is_send;
        /* UCX reads the iov array (ours) until the operation ends, and may still move data
         * of a matched rendezvous receive (shared memory: the close does not stop the peer):
         * point it at a scratch buffer, since the caller may free its buffer now. */
        if (r->kind == K_DATA && r->len && !r->own) {
            r->own = calloc(1, r->len);
            if (r->own) r->iov[1].buffer = r->own;
        }
        ux_req_unlink(r);
        r->conn = NULL;
        ux_all_add(&ep->orphans, r);
        /* a receive's callback runs now or later and frees the orphan (r is gone then) */
        if (!is_send) ucp_request_cancel(ep->worker, u);
    }
    c->all = NULL;
    /* sends: their callbacks come with the close (none after ep_failed: ep_abandon in ucx.c) */
    if (!ep->job_failed) ux_conn_close_uep(c);
    KIT_LIST_UNLINK(ep->conns, c);
    free(c);
}
static cohort_status_t uep_create(ux_conn_t *c, const void *addr, const unsigned char *proc)
{
    ux_ep_t *ep = c->ep;
    ucp_ep_params_t prm;
    memset(&prm, 0, sizeof prm);
    prm.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                     UCP_EP_PARAM_FIELD_ERR_HANDLER;
    prm.address = (const ucp_address_t *)addr;
    prm.err_mode = ep->ctx->has_net ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
    prm.err_handler.cb = err_cb;
    prm.err_handler.arg = c;
    ucs_status_t s = ucp_ep_create(ep->worker, &prm, &c->uep);
    if (s == UCS_ERR_UNREACHABLE && prm.err_mode == UCP_ERR_HANDLING_MODE_PEER) {
        ep->host->log(COHORT_LOG_INFO, SUBSYS, "ucx: rank %d to rank %d: none of UCX's "
                      "transports between them can detect a failed peer (UCX_TLS='%s'); "
                      "connecting without UCX's error handling: a dead peer is then found by "
                      "COHORT_TIMEOUT or the job's failure notice", ep->rank, c->peer,
                      getenv("UCX_TLS") ? getenv("UCX_TLS") : "all");
        prm.err_mode = UCP_ERR_HANDLING_MODE_NONE;
        s = ucp_ep_create(ep->worker, &prm, &c->uep);
    }
    /* Without UCX's error handling a dead peer on this host (same pid namespace) is found by
     * watching its pid (progress, every 100 ms). */
    c->peer_eh = s == UCS_OK && prm.err_mode == UCP_ERR_HANDLING_MODE_PEER;
    if (s == UCS_OK && prm.err_mode == UCP_ERR_HANDLING_MODE_NONE &&
        !memcmp(proc, ep->proc, UX_HOST_LEN) &&
        kit_get_le64(proc + UX_HOST_LEN + 4) == kit_get_le64(ep->proc + UX_HOST_LEN + 4)) {
        c->watch = 1;
        c->pid = (int)kit_get_le32(proc + UX_HOST_LEN);
    }
    if (s != UCS_OK) {
        c->uep = NULL;
        ux_conn_fail(c, s == UCS_ERR_UNREACHABLE ? COHORT_ERR_TRANSPORT : ux_status(s),
                     "ucx: rank %d cannot create a UCX endpoint to rank %d: ucp_ep_create: %s "
                     "(UCX_TLS='%s'; the two ranks share no transport UCX can use: check UCX_TLS "
                     "and UCX_NET_DEVICES, or `ucx_info -d` on both hosts)", ep->rank, c->peer,
                     ucs_status_string(s), getenv("UCX_TLS") ? getenv("UCX_TLS") : "all");
        return c->err;
    }
    return COHORT_SUCCESS;
}

/* The transports UCX chose for this peer (from ucp_ep_print_info: its "lane" lines), logged once
 * at INFO. */
static void log_lanes(ux_conn_t *c)
{
    ux_ep_t *ep = c->ep;
    if (c->logged || !c->uep) return;
    c->logged = 1;
    char *text = NULL;
    size_t tlen = 0;
    FILE *f = open_memstream(&text, &tlen);
    if (!f) return;
    ucp_ep_print_info(c->uep, f);
    fclose(f);
    char lanes[512] = "";
    size_t used = 0;
    for (char *line = text, *nl; line && *line; line = nl ? nl + 1 : NULL) {
        nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        char *l = strstr(line, "lane[");
        if (!l) continue;
        char *colon = strchr(l, ':');
        if (!colon) continue;
        char *p = colon + 1;
        while (*p == ' ') p++;
        char *tl = strchr(p, ':');   /* "1:tcp/lo.0 md[1] -> ... am am_bw#0" */
        if (!tl) continue;
        tl++;
        size_t n = strcspn(tl, " ");
        char *arrow = strstr(tl, "->");
        const char *uses = "";
        if (arrow) {
            uses = strchr(arrow, ' ');
            if (uses) uses = strchr(uses + 1, ' ');
            if (!uses) uses = "";
        }
        if (used < sizeof lanes) {
            int w = snprintf(lanes + used, sizeof lanes - used, "%s%.*s (%s)", used ? "; " : "",
                             (int)n, tl, *uses ? uses + 1 : "?");
            if (w > 0) used += (size_t)w;
        }
    }
    free(text);
    ep->host->log(COHORT_LOG_INFO, SUBSYS, "ucx: rank %d reaches rank %d through %s", ep->rank,
                  c->peer, lanes[0] ? lanes : "(UCX printed no lanes)");
}

void ux_conn_ready(ux_conn_t *c)
{
    c->state = C_READY;
    log_lanes(c);
    ux_req_t *r;
    while (c->state == C_READY && (r = ux_defq_pop(&c->def_h, &c->def_t))) ux_req_post(r);
}

/* Sends a set-up message (hello or ack) from a buffer the request owns. */
static void send_ctl(ux_conn_t *c, int kind, unsigned char *buf, size_t len, uint64_t tag)
{
    ux_req_t *r = ux_req_new(c, kind, 1);
    if (!r) {
        free(buf);
        ux_conn_fail(c, COHORT_ERR_NO_MEMORY, "ucx: rank %d: no memory for the connection %s to "
                     "rank %d", c->ep->rank, kind == K_HELLO ? "hello" : "answer", c->peer);
        return;
    }
    r->own = buf;
    r->len = len;
    ux_req_start(r, buf, len, ucp_dt_make_contig(1), tag, UX_FULL_MASK, NULL);
    ux_req_maybe_free(r);
}

/* Acceptor: a validated hello (buf) for this conn: create the ucp_ep to the connector from the
 * address in it, send the ack; the conn is ready. */
static void accept_hello(ux_conn_t *c, const unsigned char *buf)
{
    ux_ep_t *ep = c->ep;
    c->hello_seen = 1;
    if (uep_create(c, buf + UX_HELLO_HDR, buf + UX_PROC_OFF)) return;
    unsigned char *a = malloc(UX_ACK_SIZE);
    if (!a) {
        ux_conn_fail(c, COHORT_ERR_NO_MEMORY, "ucx: rank %d: no memory for the answer to rank %d",
                     ep->rank, c->peer);
        return;
    }
    kit_put_le32(a, UX_ACK_MAGIC);
    kit_put_le32(a + 4, (uint32_t)ep->rank);
    kit_put_le32(a + 8, (uint32_t)c->peer);
    kit_put_le64(a + 12, ep->comm_id);
    kit_frame_seal(ep->host, a, UX_ACK_SIZE);
    /* Ready once the ack has left: until then UCX may still be wiring the ucp_ep up, which
     * needs this worker's progress, and the core stops calling progress once every conn_test
     * says ready (the connector would wait for the ack forever). */
    send_ctl(c, K_ACK_SEND, a, UX_ACK_SIZE,
             (UX_KIND_ACK << UX_KIND_SHIFT) | ((uint64_t)(unsigned)ep->rank << UX_SEQ_BITS));
}

static ux_conn_t *find_conn(ux_ep_t *ep, int peer, int connector)
{
    for (ux_conn_t *c = ep->conns; c; c = c->next)
        if (c->peer == peer && c->connector == connector) return c;
    return NULL;
}

/* A hello arrived (ep->hbuf, ep->hrx.len): check it, hand it to accept(src) or keep it. */
void ux_hello_arrived(ux_ep_t *ep)
{
    const cohort_host_v1_t *host = ep->host;
    unsigned char *b = ep->hbuf;
    size_t n = ep->hrx.len;
    ucs_status_t s = ep->hrx.status;
    ep->hbuf = NULL;
    ep->hrx.done = 0;
    if (s != UCS_OK) {
        if (s != UCS_ERR_CANCELED)
            host->log(COHORT_LOG_WARN, SUBSYS, "ucx: rank %d received a broken connection "
                      "hello (%s; %zu bytes); ignored", ep->rank, ucs_status_string(s), n);
        free(b);
        return;
    }
    if (n < UX_HELLO_HDR + UX_MAC_LEN || kit_get_le32(b) != UX_HELLO_MAGIC) {
        host->log(COHORT_LOG_WARN, SUBSYS, "ucx: rank %d refused a connection hello of %zu bytes "
                  "that is not cohort's (another program or cohort version?)", ep->rank, n);
        free(b);
        return;
    }
    int src = (int)kit_get_le32(b + 4);
    uint32_t dst = kit_get_le32(b + 8), nranks = kit_get_le32(b + 12);
    uint64_t comm = kit_get_le64(b + 16);
    uint32_t alen = kit_get_le32(b + UX_HELLO_HDR - 4);
    if ((size_t)alen + UX_HELLO_HDR + UX_MAC_LEN != n) {
        host->log(COHORT_LOG_WARN, SUBSYS, "ucx: rank %d refused a connection hello whose "
                  "length (%zu) does not match its address (%u bytes)", ep->rank, n,
                  (unsigned)alen);
        free(b);
        return;
    }
    if (!kit_frame_valid(host, b, n) ||
        !kit_ct_equal(b + 24, ep->job_hash, UX_MAC_LEN)) {
        host->log(COHORT_LOG_WARN, SUBSYS, "ucx: rank %d refused a connection hello claiming to "
                  "be rank %d: its authentication does not match this job (another job, or a "
                  "forged connection)", ep->rank, src);
        free(b);
        return;
    }
    if (dst != (uint32_t)ep->rank || comm != ep->comm_id || nranks != (uint32_t)ep->nranks ||
        src < 0 || src >= ep->nranks || src == ep->rank) {
        host->log(COHORT_LOG_WARN, SUBSYS, "ucx: rank %d refused a connection hello from rank "
                  "%d for rank %u of communicator %llu (%u ranks): not this endpoint", ep->rank,
                  src, (unsigned)dst, (unsigned long long)comm, (unsigned)nranks);
        free(b);
        return;
    }
    ux_conn_t *c = find_conn(ep, src, 0);
    int dup = c && c->hello_seen;
    for (ux_hello_t *h = ep->early; h; h = h->next) dup |= h->src == src;
    if (dup) {
        host->log(COHORT_LOG_WARN, SUBSYS, "ucx: rank %d refused a second connection hello from "
                  "rank %d", ep->rank, src);
        free(b);
        return;
    }
    if (c) {
        accept_hello(c, b);
        free(b);
        return;
    }
    ux_hello_t *h = calloc(1, sizeof *h);
    if (!h) {
        host->log(COHORT_LOG_WARN, SUBSYS, "ucx: rank %d: no memory to keep the hello of rank "
                  "%d", ep->rank, src);
        free(b);
        return;
    }
    h->src = src;
    h->buf = b;
    h->len = n;
    h->next = ep->early;
    ep->early = h;
}

static void ctl_recv_cb(void *request, ucs_status_t status, const ucp_tag_recv_info_t *info,
                        void *user_data)
{
    ux_ctlrx_t *rx = (ux_ctlrx_t *)user_data;
    ucp_request_free(request);
    rx->req = NULL;
    rx->done = 1;
    rx->status = status;
    rx->len = info ? info->length : 0;
    ux_ep_signal(rx->ep);
}

/* Posts rx's wildcard receive of control messages of kind into buf (what names them in the
 * warning if UCX refuses). */
static void post_ctl_recv(ux_ep_t *ep, ux_ctlrx_t *rx, void *buf, size_t size, uint64_t kind,
                          const char *what)
{
    ucp_request_param_t prm;
    memset(&prm, 0, sizeof prm);
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                       UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    prm.cb.recv = ctl_recv_cb;
    prm.user_data = rx;
    prm.datatype = ucp_dt_make_contig(1);
    ucs_status_ptr_t p = ucp_tag_recv_nbx(ep->worker, buf, size, kind << UX_KIND_SHIFT,
                                          3ull << UX_KIND_SHIFT, &prm);
    if (UCS_PTR_IS_ERR(p)) {
        ep->host->log(COHORT_LOG_WARN, SUBSYS, "ucx: rank %d cannot post the receive for %s: "
                      "ucp_tag_recv_nbx: %s", ep->rank, what,
                      ucs_status_string(UCS_PTR_STATUS(p)));
        return;
    }
    if (!rx->done) rx->req = p;
}

void ux_post_hello_recv(ux_ep_t *ep)
{
    if (ep->hrx.req || ep->hrx.done || !ep->worker) return;
    if (!ep->hbuf && !(ep->hbuf = malloc(UX_HELLO_MAX))) return;   /* tried again later */
    post_ctl_recv(ep, &ep->hrx, ep->hbuf, UX_HELLO_MAX, UX_KIND_HELLO, "connection hellos");
}

/* Connector: the ack arrived: check it. */
void ux_ack_arrived(ux_conn_t *c)
{
    ux_ep_t *ep = c->ep;
    ux_req_t *r = c->ack_rx;
    c->ack_rx = NULL;
    r->released = 1;
    const unsigned char *a = r->own;
    size_t n = r->nbytes;
    cohort_status_t st = r->status;
    if (c->state == C_CONNECTING) {
        if (st)
            ux_conn_fail(c, st, "ucx: rank %d connecting to rank %d: receiving its answer failed "
                         "(%s)", ep->rank, c->peer, ux_status_words(st));
        else if (n != UX_ACK_SIZE || kit_get_le32(a) != UX_ACK_MAGIC ||
                 kit_get_le32(a + 4) != (uint32_t)c->peer || kit_get_le32(a + 8) != (uint32_t)ep->rank ||
                 kit_get_le64(a + 12) != ep->comm_id || !kit_frame_valid(ep->host, a, n))
            ux_conn_fail(c, COHORT_ERR_TRANSPORT, "ucx: rank %d connecting to rank %d: its answer "
                         "(%zu bytes) is not a valid acknowledgement of this job and "
                         "communicator (different COHORT_JOB_ID/COHORT_SECRET, or another cohort "
                         "version)", ep->rank, c->peer, n);
        else
            ux_conn_ready(c);
    }
    ux_req_maybe_free(r);
}

/* ---- closing: the bye --------------------------------------------------------------------
 * conn_close sends the peer an authenticated bye carrying how many messages it sent, flushes its
 * ucp_ep (what it sent leaves UCX's buffers), then closes it. The peer fails its sends and the
 * receives beyond that count with COHORT_ERR_PEER_LOST (UCX itself does not tell the other side
 * of a closed ucp_ep); receives within it still complete once the close has ended the
 * connection and UCX has reported that as a failure (ux_conn_lost). */

static void bye_encode(const ux_ep_t *ep, int peer, uint64_t nsent, unsigned char *b)
{
    kit_put_le32(b, UX_BYE_MAGIC);
    kit_put_le32(b + 4, (uint32_t)ep->rank);
    kit_put_le32(b + 8, (uint32_t)peer);
    kit_put_le64(b + 12, ep->comm_id);
    kit_put_le64(b + 20, nsent);
    kit_frame_seal(ep->host, b, UX_BYE_SIZE);
}

static void peer_closed(ux_conn_t *c, uint64_t nsent)
{
    ux_ep_t *ep = c->ep;
    if (c->state == C_FAILED || c->peer_closed) return;
    c->peer_closed = 1;
    c->closed_seq = nsent;
    snprintf(c->errmsg, sizeof c->errmsg, "ucx: rank %d closed its connection to rank %d "
             "(conn_close, or its communicator ended) after sending %llu message(s)", c->peer,
             ep->rank, (unsigned long long)nsent);
    c->err = COHORT_ERR_PEER_LOST;
    ep->host->log(COHORT_LOG_INFO, SUBSYS, "%s", c->errmsg);
    for (ux_req_t *r = c->all; r; r = r->anext) {
        if (r->done || r->kind != K_DATA || (!r->is_send && r->seq < nsent)) continue;
        ux_req_finish(r, COHORT_ERR_PEER_LOST);
        if (r->ucx && !r->is_send) ucp_request_cancel(ep->worker, r->ucx);
    }
    ux_ep_signal(ep);
}

void ux_bye_arrived(ux_ep_t *ep)
{
    ep->brx.done = 0;
    if (ep->brx.status != UCS_OK) return;
    const unsigned char *b = ep->bbuf;
    int src = (int)kit_get_le32(b + 4);
    if (ep->brx.len != UX_BYE_SIZE || kit_get_le32(b) != UX_BYE_MAGIC ||
        kit_get_le32(b + 8) != (uint32_t)ep->rank || kit_get_le64(b + 12) != ep->comm_id ||
        !kit_frame_valid(ep->host, b, UX_BYE_SIZE)) {
        ep->host->log(COHORT_LOG_WARN, SUBSYS, "ucx: rank %d refused a closing notice (%zu "
                      "bytes) that is not from a peer of this communicator", ep->rank,
                      ep->brx.len);
        return;
    }
    for (ux_conn_t *c = ep->conns; c; c = c->next)
        if (c->peer == src) peer_closed(c, kit_get_le64(b + 20));
}

void ux_post_bye_recv(ux_ep_t *ep)
{
    if (ep->brx.req || ep->brx.done || !ep->worker) return;
    post_ctl_recv(ep, &ep->brx, ep->bbuf, UX_BYE_SIZE, UX_KIND_BYE, "closing notices");
}

/* A receive of c whose message can no longer come: the peer closed after closed_seq messages
 * and the connection has ended without this one having arrived whole. */
void ux_lost_recv(ux_conn_t *c, ux_req_t *r)
{
    ux_req_fail_msg(r, COHORT_ERR_PEER_LOST, "ucx: rank %d closed its connection to rank %d after "
                    "sending %llu message(s), and the connection ended before message %llu of them "
                    "arrived whole (it was still in flight when that rank closed)", c->peer,
                    c->ep->rank, (unsigned long long)c->closed_seq,
                    (unsigned long long)r->seq + 1);
}

/* ux_ep_work, once every bye that arrived has been taken: UCX reported the end of c (lost == 1).
 * After the peer's bye, the end is its close (a closing rank destroys its ucp_ep and worker;
 * over tcp UCX reports "Endpoint timeout" for that), and what it sent before arrived ahead of
 * the end, since UCX reads a connection in order: those messages wait in UCX's unexpected
 * queue, and receives of them still complete (posted later: at once, inside ux_req_post). A
 * receive UCX holds unmatched now waits for one that did not arrive whole: it fails. Without a
 * bye the peer or the path to it failed: the whole connection fails, as before. */
void ux_conn_lost(ux_conn_t *c)
{
    ux_ep_t *ep = c->ep;
    c->lost = 2;
    ep->nlost--;
    if (c->state == C_FAILED) return;
    if (!c->peer_closed) {
        ux_conn_fail(c, COHORT_ERR_PEER_LOST, "%s", c->lostmsg);
        return;
    }
    ep->host->log(COHORT_LOG_INFO, SUBSYS, "ucx: rank %d: the connection from rank %d ended after "
                  "its closing notice; the %llu message(s) it sent before it are still received "
                  "(%llu so far)", ep->rank, c->peer, (unsigned long long)c->closed_seq,
                  (unsigned long long)c->recv_seq);
    for (ux_req_t *r = c->all; r; r = r->anext)
        if (r->kind == K_DATA && !r->is_send && !r->done) ux_lost_recv(c, r);
    ux_cancel_finished_recvs(c);
}

/* Flushes c's ucp_ep: what UCX still holds of the messages sent on it leaves before
 * ux_conn_destroy closes it by force, which would drop it. An eager send completes as soon as UCX
 * has copied it, and over tcp the copy waits in UCX's buffer while the socket is full; the
 * peer would miss a message whose send completed here. Bounded: the closes of one burst (a
 * communicator's end) share UX_CLOSE_FLUSH_S; past it, a peer that does not read fails the
 * receives of what did not leave (PEER_LOST). Sleeps on the worker's fd, not spinning. */
static void flush_for_close(ux_conn_t *c)
{
    ux_ep_t *ep = c->ep;
    double now = ux_now_s();
    if (now > ep->close_by + UX_CLOSE_FLUSH_S) ep->close_by = now + UX_CLOSE_FLUSH_S;
    ucp_request_param_t prm;
    memset(&prm, 0, sizeof prm);
    ucs_status_ptr_t p = ucp_ep_flush_nbx(c->uep, &prm);
    if (!UCS_PTR_IS_PTR(p)) return;   /* flushed at once, or refused (the ucp_ep has failed) */
    ux_wait_req(ep, p, ep->close_by);
    ucp_request_free(p);   /* if still in flight, UCX ends it with the forced close */
    ep->wake.pending = 0;  /* ucp_worker_arm took the fd's events: the core must look again */
    ux_ep_signal(ep);
}

/* Whether UCX still works on a send from the caller's memory on any connection of ep: a
 * message or chunk of one that never completed, left behind by a collective that failed (the
 * core does not wait for the rest of a failed collective, and its caller may have freed the
 * buffer since). Endpoint-wide: progress on the worker moves every connection's sends. */
static int user_send_in_flight(const ux_ep_t *ep)
{
    for (const ux_conn_t *c = ep->conns; c; c = c->next)
        for (const ux_req_t *r = c->all; r; r = r->anext)
            if (r->is_send && r->ucx && (r->kind == K_DATA || r->kind == K_CHUNK)) return 1;
    for (const ux_req_t *r = ep->orphans; r; r = r->anext)
        if (r->is_send && r->ucx && (r->kind == K_DATA || r->kind == K_CHUNK)) return 1;
    return 0;
}

/* conn_close of a working connection: the bye, then the flush above; ux_conn_destroy then closes
 * the ucp_ep (ux_conn_close_uep) after pointing receives UCX has matched at scratch buffers, since
 * the caller may free its own once conn_close returns. No flush while a send of the caller's
 * memory is still in UCX's hands: progress would let UCX read a buffer that may be gone (a
 * rendezvous send whose receiver answered late); the forced close drops it instead, and the
 * peer, whose collective failed too, loses nothing it still waits for. */
static void send_bye_and_close(ux_conn_t *c)
{
    if (!c->uep || c->state != C_READY || c->peer_closed || user_send_in_flight(c->ep)) return;
    ux_ep_t *ep = c->ep;
    unsigned char *b = malloc(UX_BYE_SIZE);
    ux_req_t *r = b ? ux_req_new(c, K_BYE, 1) : NULL;
    if (!r) {
        free(b);
        return;
    }
    bye_encode(ep, c->peer, c->send_seq, b);
    r->own = b;
    r->len = UX_BYE_SIZE;
    r->released = 0;   /* kept until we have seen it leave */
    ux_req_start(r, b, UX_BYE_SIZE, ucp_dt_make_contig(1),
                 (UX_KIND_BYE << UX_KIND_SHIFT) | ((uint64_t)(unsigned)ep->rank << UX_SEQ_BITS),
                 UX_FULL_MASK, NULL);
    if (c->uep) flush_for_close(c);
    r->released = 1;
    ux_req_maybe_free(r);
}

/* 0 once the process is gone or a zombie (its parent has not reaped it yet). */
static int pid_alive(int pid)
{
    if (kill(pid, 0) != 0 && errno == ESRCH) return 0;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 1;   /* no /proc: kill's answer stands */
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 1;
    buf[n] = '\0';
    const char *rp = strrchr(buf, ')');   /* "pid (comm) S ..." */
    return !(rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X'));
}

/* Peers whose death UCX cannot report (shared memory only): is the process still there? */
void ux_watch_peers(ux_ep_t *ep)
{
    double now = ux_now_s();
    if (now < ep->next_watch) return;
    ep->next_watch = now + 0.1;
    for (ux_conn_t *c = ep->conns; c; c = c->next)
        if (c->watch && c->state != C_FAILED && c->pid > 0 && !pid_alive(c->pid))
            ux_conn_fail(c, COHORT_ERR_PEER_LOST, "ucx: rank %d lost rank %d: its process (pid %d "
                         "on this host) is gone (exited or killed)", ep->rank, c->peer, c->pid);
}

/* ---- plugin API: connections ------------------------------------------------------------- */

/* Checks that a blob is a ucx address of this job, communicator and peer: 0, or -1 with the
 * reason in why. */
static int blob_check(const ux_ep_t *ep, int peer, const void *blob, size_t len, char *why,
                      size_t wl)
{
    const unsigned char *b = (const unsigned char *)blob;
    if (!b || len < UX_BLOB_HDR || kit_get_le32(b) != UX_MAGIC) {
        snprintf(why, wl, "the address of rank %d (%zu bytes) is not a ucx address of this "
                 "cohort version", peer, len);
        return -1;
    }
    if (!kit_ct_equal(b + 24, ep->job_hash, UX_MAC_LEN)) {
        snprintf(why, wl, "the address of rank %d belongs to another job (different "
                 "COHORT_JOB_ID or COHORT_SECRET)", peer);
        return -1;
    }
    if (kit_get_le32(b + 8) != (uint32_t)peer || kit_get_le32(b + 4) != (uint32_t)ep->nranks ||
        kit_get_le64(b + 16) != ep->comm_id) {
        snprintf(why, wl, "the address given for rank %d is rank %u's of communicator %llu with "
                 "%u ranks (expected communicator %llu with %d ranks)", peer,
                 (unsigned)kit_get_le32(b + 8), (unsigned long long)kit_get_le64(b + 16),
                 (unsigned)kit_get_le32(b + 4), (unsigned long long)ep->comm_id, ep->nranks);
        return -1;
    }
    if ((size_t)kit_get_le32(b + UX_BLOB_HDR - 4) + UX_BLOB_HDR != len) {
        snprintf(why, wl, "the address of rank %d is %zu bytes but says it holds a UCX address "
                 "of %u", peer, len, (unsigned)kit_get_le32(b + UX_BLOB_HDR - 4));
        return -1;
    }
    return 0;
}

int ux_can_reach(cohort_tp_ep_t epv, int peer, const void *peer_addr, size_t addrlen)
{
    ux_ep_t *ep = (ux_ep_t *)epv;
    if (!ep || peer < 0 || peer >= ep->nranks || peer == ep->rank) return 0;
    char why[400];
    if (blob_check(ep, peer, peer_addr, addrlen, why, sizeof why) != 0) {
        ep->host->log(COHORT_LOG_INFO, SUBSYS, "ucx: rank %d cannot use ucx to rank %d: %s",
                      ep->rank, peer, why);
        return 0;
    }
    const unsigned char *b = (const unsigned char *)peer_addr;
    if (memcmp(b + UX_PROC_OFF, ep->proc, UX_HOST_LEN) == 0) return 1;
    if ((kit_get_le32(b + 12) & 1u) && ep->ctx->has_net) return 1;
    ep->host->log(COHORT_LOG_INFO, SUBSYS, "ucx: rank %d cannot use ucx to rank %d: it is on "
                  "another host and %s has only shared-memory transports (UCX_TLS='%s')",
                  ep->rank, peer, ep->ctx->has_net ? "that rank's UCX" : "this rank's UCX",
                  getenv("UCX_TLS") ? getenv("UCX_TLS") : "all");
    return 0;
}

cohort_status_t ux_connect(cohort_tp_ep_t epv, int peer, const void *peer_addr,
                           size_t addrlen, cohort_tp_conn_t *connp)
{
    ux_ep_t *ep = (ux_ep_t *)epv;
    const cohort_host_v1_t *host = ep->host;
    cohort_status_t st = kit_conn_args(host, "ucx", "connect", ep->rank, ep->nranks, peer, connp);
    if (st) return st;
    char why[400];
    if (blob_check(ep, peer, peer_addr, addrlen, why, sizeof why) != 0)
        return host->error(COHORT_ERR_INVALID_ARG, "ucx: rank %d connecting to rank %d: %s "
                           "(a different cohort version, or another transport's address?)",
                           ep->rank, peer, why);
    if (find_conn(ep, peer, 1))
        return host->error(COHORT_ERR_INVALID_ARG, "ucx: connect: rank %d is already connected "
                           "on this endpoint", peer);
    ux_conn_t *c = conn_new(ep, peer, 1);
    if (!c) return host->error(COHORT_ERR_NO_MEMORY, "ucx: no memory for a connection");
    *connp = c;
    const unsigned char *b = (const unsigned char *)peer_addr;
    if (uep_create(c, b + UX_BLOB_HDR, b + UX_PROC_OFF))
        return COHORT_SUCCESS;   /* conn_test reports it */
    /* the receive of the acceptor's answer, then the hello: who we are, our worker
     * address, authenticated */
    ux_req_t *ar = ux_req_new(c, K_ACK_RECV, 0);
    size_t n = UX_HELLO_HDR + ep->addr_len + UX_MAC_LEN;
    unsigned char *h = n <= UX_HELLO_MAX ? malloc(n) : NULL;
    if (ar) ar->own = malloc(UX_ACK_SIZE);
    if (!ar || !ar->own || !h) {
        free(h);
        ux_conn_fail(c, COHORT_ERR_NO_MEMORY, "ucx: rank %d: no memory for the connection set-up "
                     "with rank %d (hello of %zu bytes)", ep->rank, peer, n);
        return COHORT_SUCCESS;
    }
    ux_req_start(ar, ar->own, UX_ACK_SIZE, ucp_dt_make_contig(1),
                 (UX_KIND_ACK << UX_KIND_SHIFT) | ((uint64_t)(unsigned)peer << UX_SEQ_BITS),
                 UX_FULL_MASK, NULL);
    kit_put_le32(h, UX_HELLO_MAGIC);
    kit_put_le32(h + 4, (uint32_t)ep->rank);
    kit_put_le32(h + 8, (uint32_t)peer);
    kit_put_le32(h + 12, (uint32_t)ep->nranks);
    kit_put_le64(h + 16, ep->comm_id);
    memcpy(h + 24, ep->job_hash, UX_MAC_LEN);
    memcpy(h + UX_PROC_OFF, ep->proc, UX_PROC_LEN);
    kit_put_le32(h + UX_HELLO_HDR - 4, (uint32_t)ep->addr_len);
    memcpy(h + UX_HELLO_HDR, ep->addr, ep->addr_len);
    kit_frame_seal(host, h, n);
    send_ctl(c, K_HELLO, h, n,
             (UX_KIND_HELLO << UX_KIND_SHIFT) | ((uint64_t)(unsigned)ep->rank << UX_SEQ_BITS));
    host->log(COHORT_LOG_TRACE, SUBSYS, "ucx: rank %d connecting to rank %d", ep->rank, peer);
    return COHORT_SUCCESS;
}

cohort_status_t ux_accept(cohort_tp_ep_t epv, int peer, cohort_tp_conn_t *connp)
{
    ux_ep_t *ep = (ux_ep_t *)epv;
    const cohort_host_v1_t *host = ep->host;
    cohort_status_t st = kit_conn_args(host, "ucx", "accept", ep->rank, ep->nranks, peer, connp);
    if (st) return st;
    if (find_conn(ep, peer, 0))
        return host->error(COHORT_ERR_INVALID_ARG, "ucx: accept: rank %d is already accepted on "
                           "this endpoint", peer);
    ux_conn_t *c = conn_new(ep, peer, 0);
    if (!c) return host->error(COHORT_ERR_NO_MEMORY, "ucx: no memory for a connection");
    for (ux_hello_t **hp = &ep->early; *hp; hp = &(*hp)->next)
        if ((*hp)->src == peer) {
            ux_hello_t *h = *hp;
            *hp = h->next;
            accept_hello(c, h->buf);
            free(h->buf);
            free(h);
            break;
        }
    *connp = c;
    return COHORT_SUCCESS;
}

cohort_status_t ux_conn_test(cohort_tp_conn_t connv)
{
    ux_conn_t *c = (ux_conn_t *)connv;
    if (c->state == C_CONNECTING) (void)ux_progress(c->ep);
    if (c->state == C_FAILED || c->peer_closed)
        return c->ep->host->error(c->err, "%s", c->errmsg);
    if (c->state == C_READY) return COHORT_SUCCESS;
    return COHORT_IN_PROGRESS;
}

cohort_status_t ux_conn_close(cohort_tp_conn_t connv)
{
    ux_conn_t *c = (ux_conn_t *)connv;
    if (!c) return COHORT_SUCCESS;
    if (!c->ep->job_failed) send_bye_and_close(c);
    ux_conn_destroy(c);
    return COHORT_SUCCESS;
}
