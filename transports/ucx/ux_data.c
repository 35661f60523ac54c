/* SPDX-License-Identifier: BSD-3-Clause */
/* cohort UCX transport: requests and the message data path. A request's life (ux_req_new,
 * ux_req_start, UCX's send_cb and recv_cb, finishing, failing, freeing, orphaned requests), the
 * UCX tags of messages and of a split message's chunks, the receive slots those chunks land in
 * (ucp_mem_map'd, pooled per endpoint), posting a message (header and payload as one iov, or
 * the header alone and then the chunks), and the plugin API of messages and memory: isend,
 * irecv, test, mem_reg, mem_dereg. The design ("messages", "large", "memory") is described at
 * the top of ucx.c.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <cohort/plugin.h>
#include "transports/common/kit_bytes.h"
#include "transports/common/kit_fail.h"

#include <ucp/api/ucp.h>

#include "ux_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- requests ---------------------------------------------------------------------------- */

static uint64_t data_tag(int src, uint64_t seq)
{
    return (UX_KIND_DATA << UX_KIND_SHIFT) | ((uint64_t)(unsigned)src << UX_SEQ_BITS) |
           (seq & UX_DSEQ_MASK);
}

/* The tag of chunk idx of message seq's payload. The message's number wraps at 2^20 here:
 * two messages that far apart are never in flight on one connection at once. */
static uint64_t payload_tag(int src, uint64_t seq, uint32_t idx)
{
    return (UX_KIND_DATA << UX_KIND_SHIFT) | ((uint64_t)(unsigned)src << UX_SEQ_BITS) |
           UX_PAYLOAD_BIT | ((seq & UX_PSEQ_MASK) << UX_CHUNK_BITS) | idx;
}

void ux_req_unlink(ux_req_t *r)
{
    ux_all_del(r->conn ? &r->conn->all : &r->ep->orphans, r);
}

/* Registers [buf, buf + len) with every memory domain of the UCX context (mem_reg, slots). */
static ucs_status_t map_range(ux_ctx_t *ctx, void *buf, size_t len, ucp_mem_h *mh)
{
    ucp_mem_map_params_t prm;
    memset(&prm, 0, sizeof prm);
    prm.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    prm.address = buf;
    prm.length = len;
    return ucp_mem_map(ctx->ucp, &prm, mh);
}

/* A receive slot for a chunk: an idle one of the endpoint's, or a new one, mapped with
 * ucp_mem_map (registered once for all the messages that will use it); NULL without memory. */
static void *slot_get(ux_ep_t *ep, ucp_mem_h *mh)
{
    if (ep->npool > 0) {
        ep->npool--;
        *mh = ep->pool_mh[ep->npool];
        return ep->pool[ep->npool];
    }
    void *b = malloc(UX_CHUNK);
    *mh = NULL;
    if (!b) return NULL;
    if (map_range(ep->ctx, b, UX_CHUNK, mh) != UCS_OK) *mh = NULL;   /* then UCX's own cache */
    return b;
}

void ux_slot_release(ux_ctx_t *ctx, void *b, ucp_mem_h mh)
{
    if (mh) (void)ucp_mem_unmap(ctx->ucp, mh);
    free(b);
}

/* A slot UCX no longer uses: kept for the next message, or released. */
static void slot_put(ux_ep_t *ep, void *b, ucp_mem_h mh)
{
    if (!b) return;
    if (ep->npool < UX_POOL) {
        ep->pool[ep->npool] = b;
        ep->pool_mh[ep->npool++] = mh;
        return;
    }
    ux_slot_release(ep->ctx, b, mh);
}

static void spares_put(ux_req_t *m)
{
    while (m->nspare > 0) {
        m->nspare--;
        slot_put(m->ep, m->spare[m->nspare], m->spare_mh[m->nspare]);
    }
}

void ux_req_free(ux_req_t *r)
{
    if (r->stage == 1) r->ep->nstage--;   /* it will not be posted now */
    if (r->kind == K_CHUNK && r->own) {   /* a receive slot: UCX has let go of it */
        slot_put(r->ep, r->own, r->slot_memh);
        r->own = NULL;
    }
    spares_put(r);
    ux_req_unlink(r);
    free(r->own);
    free(r->errmsg);
    kit_pool_put(&r->ep->reqs, r);
}

/* Frees the request once the user has its final status and UCX no longer holds it. */
void ux_req_maybe_free(ux_req_t *r)
{
    if (r->ucx || r->pending) return;
    if (r->conn && !(r->done && r->released)) return;
    ux_req_free(r);
}

void ux_req_finish(ux_req_t *r, cohort_status_t st)
{
    if (r->done) return;
    r->done = 1;
    r->status = st;
    ux_ep_signal(r->ep);
}

void ux_req_fail_msg(ux_req_t *r, cohort_status_t st, const char *fmt, ...)
{
    if (r->done) return;
    va_list ap;
    va_start(ap, fmt);
    kit_msg_set(&r->errmsg, fmt, ap);
    va_end(ap);
    ux_req_finish(r, st);
}

static cohort_status_t fail_status(ucs_status_t s)
{
    return ux_status(s) == COHORT_ERR_PEER_LOST ? COHORT_ERR_PEER_LOST : COHORT_ERR_TRANSPORT;
}

/* A set-up message's send (hello or ack) completed. */
static void ctl_sent(ux_req_t *r, ucs_status_t status)
{
    ux_conn_t *c = r->conn;
    ux_req_finish(r, COHORT_SUCCESS);
    if (status == UCS_OK && r->kind == K_ACK_SEND) {
        c->ack_sent = 1;   /* ux_ep_work makes the conn ready (not inside UCX's callback) */
        ux_ep_signal(c->ep);
    }
    if (status != UCS_OK && r->kind != K_BYE)
        ux_conn_ucx_error(c, NULL, fail_status(status), "ucx: rank %d could not send %s to rank "
                          "%d: %s (UCX); is rank %d still running?", c->ep->rank,
                          r->kind == K_HELLO ? "its connection hello" :
                          r->kind == K_HDR ? "a message header" : "its connection answer", c->peer,
                          ucs_status_string(status), c->peer);
}

/* For ux_ep_work: post r (stage 1). */
static void stage_set(ux_req_t *r)
{
    if (r->stage == 1) return;
    r->stage = 1;
    r->ep->nstage++;
    ux_ep_signal(r->ep);
}

static size_t chunk_len(uint64_t len, uint32_t idx)
{
    uint64_t off = (uint64_t)idx * UX_CHUNK;
    return (size_t)(len - off < UX_CHUNK ? len - off : UX_CHUNK);
}

/* Chunk k of a split message completed (its conn still open). A received chunk is copied to
 * its place in the caller's buffer and its slot goes back to the message for the next chunk;
 * the message completes with its last chunk. */
static void chunk_done(ux_req_t *k, ucs_status_t status, size_t length)
{
    ux_conn_t *c = k->conn;
    ux_req_t *m = k->parent;
    uint64_t len = kit_get_le64(m->hdr + 8);
    m->pending--;
    if (!k->is_send && k->own && m->nspare < UX_SLOTS) {   /* the slot back to the message */
        m->spare[m->nspare] = k->own;
        m->spare_mh[m->nspare++] = k->slot_memh;
        /* (not into a message that has failed: the caller may have its buffer back) */
        if (status == UCS_OK && length == chunk_len(len, k->chunk) && !m->drop && !m->done)
            memcpy((char *)m->buf + (size_t)k->chunk * UX_CHUNK, k->own, length);
        else if (status == UCS_OK || status == UCS_ERR_MESSAGE_TRUNCATED)
            m->drop = 1;
        k->own = NULL;
        k->slot_memh = NULL;
    }
    ux_req_finish(k, COHORT_SUCCESS);
    if (status != UCS_OK && !(status == UCS_ERR_MESSAGE_TRUNCATED && !k->is_send)) {
        if (!m->done)
            ux_conn_ucx_error(c, m, fail_status(status), "ucx: rank %d %s rank %d failed (part %u "
                              "of %u of a %llu-byte message): %s (UCX); the peer process may have "
                              "exited or the network failed (UCX_TLS and UCX_NET_DEVICES choose "
                              "UCX's transports)", c->ep->rank,
                              k->is_send ? "sending to" : "receiving from", c->peer, k->chunk + 1,
                              m->nchunks, (unsigned long long)len, ucs_status_string(status));
        ux_req_maybe_free(m);
        return;
    }
    m->chunks_done++;
    if (m->chunks_done == m->nchunks) spares_put(m);   /* the slots to the next message */
    if (m->done) {   /* failed meanwhile (ux_conn_fail, peer_closed): only the counting goes on */
        ux_req_maybe_free(m);
        return;
    }
    if (m->chunks_done < m->nchunks) {
        if (!k->is_send && m->next_chunk < m->nchunks) stage_set(m);
        return;
    }
    if (k->is_send) {
        ux_req_finish(m, COHORT_SUCCESS);
    } else if (m->drop) {
        ux_req_fail_msg(m, COHORT_ERR_MISMATCH, "ucx: rank %d expected a message with tag %llu "
                        "(up to %zu bytes) from rank %d, which sent tag %llu (%llu bytes): the "
                        "ranks called different operations or counts", c->ep->rank,
                        (unsigned long long)m->tag, m->len, c->peer,
                        (unsigned long long)kit_get_le64(m->hdr), (unsigned long long)len);
    } else {
        m->nbytes = (size_t)len;
        ux_req_finish(m, COHORT_SUCCESS);
    }
}

static void send_cb(void *request, ucs_status_t status, void *user_data)
{
    ux_req_t *r = (ux_req_t *)user_data;
    r->ncb++;
    ucp_request_free(request);
    r->ucx = NULL;
    if (!r->conn) {   /* orphaned: nobody waits for it */
        ux_req_free(r);
        return;
    }
    if (r->kind == K_CHUNK) {
        chunk_done(r, status, 0);
    } else if (r->kind != K_DATA) {
        ctl_sent(r, status);
    } else if (status == UCS_OK) {
        ux_req_finish(r, COHORT_SUCCESS);
    } else if (!r->done) {
        ux_conn_t *c = r->conn;
        ux_conn_ucx_error(c, r, fail_status(status), "ucx: rank %d sending %zu bytes to rank %d "
                          "failed: %s (UCX); the peer process may have exited or the network "
                          "failed (UCX_TLS and UCX_NET_DEVICES choose UCX's transports)",
                          c->ep->rank, r->len, c->peer, ucs_status_string(status));
    }
    ux_req_maybe_free(r);
}

static void recv_done(ux_req_t *r, ucs_status_t status, size_t length)
{
    ux_conn_t *c = r->conn;
    if (r->kind == K_ACK_RECV) {
        r->nbytes = length;
        r->status = status == UCS_OK ? COHORT_SUCCESS : fail_status(status);
        r->done = 1;
        if (status == UCS_ERR_CANCELED) return;
        c->ack_rx = r;   /* checked by ux_ep_work (not inside UCX's callback) */
        r->released = 0;
        ux_ep_signal(c->ep);
        return;
    }
    if (r->kind == K_CHUNK) {
        chunk_done(r, status, length);
        return;
    }
    if (status == UCS_OK && length == UX_HDR && kit_get_le64(r->hdr + 8) > 0 && !r->nchunks) {
        /* a split message's header: ux_ep_work posts the receives of its chunks */
        uint64_t len = kit_get_le64(r->hdr + 8);
        if (len > UX_SPLIT_MAX) {
            ux_req_fail_msg(r, COHORT_ERR_MISMATCH, "ucx: rank %d received a header from rank %d "
                            "announcing %llu bytes in chunks, more than a split message carries "
                            "(another cohort version on the peer?)", c->ep->rank, c->peer,
                            (unsigned long long)len);
            return;
        }
        r->nchunks = (uint32_t)((len + UX_CHUNK - 1) / UX_CHUNK);
        r->drop = kit_get_le64(r->hdr) != r->tag || len > r->len;
        stage_set(r);
    } else if (status == UCS_OK) {
        if (length < UX_HDR) {
            ux_req_fail_msg(r, COHORT_ERR_MISMATCH, "ucx: rank %d received a message of %zu bytes "
                            "from rank %d, shorter than the %d-byte header (another program or "
                            "cohort version on the peer?)", c->ep->rank, length, c->peer, UX_HDR);
            return;
        }
        uint64_t tag = kit_get_le64(r->hdr), len = kit_get_le64(r->hdr + 8);
        if (tag != r->tag || len != length - UX_HDR) {
            ux_req_fail_msg(r, COHORT_ERR_MISMATCH, "ucx: rank %d expected a message with tag "
                            "%llu (up to %zu bytes) from rank %d, which sent tag %llu (%llu "
                            "bytes): the ranks called different operations", c->ep->rank,
                            (unsigned long long)r->tag, r->len, c->peer, (unsigned long long)tag,
                            (unsigned long long)len);
            return;
        }
        r->nbytes = (size_t)len;
        ux_req_finish(r, COHORT_SUCCESS);
    } else if (status == UCS_ERR_MESSAGE_TRUNCATED) {
        ux_req_fail_msg(r, COHORT_ERR_MISMATCH, "ucx: rank %d expected a message with tag %llu of "
                        "up to %zu bytes from rank %d, which sent %zu bytes (its tag is unknown: "
                        "UCX drops a message that does not fit): the ranks called different "
                        "operations or counts", c->ep->rank, (unsigned long long)r->tag, r->len,
                        c->peer, length >= UX_HDR ? length - UX_HDR : length);
    } else if (r->done) {
        /* failed already (ux_conn_fail, the peer's bye, the end of its connection) and cancelled:
         * UCX only lets go of it */
    } else {
        ux_conn_ucx_error(c, r, fail_status(status), "ucx: rank %d receiving from rank %d failed: "
                          "%s (UCX)", c->ep->rank, c->peer, ucs_status_string(status));
    }
}

static void recv_cb(void *request, ucs_status_t status, const ucp_tag_recv_info_t *info,
                    void *user_data)
{
    ux_req_t *r = (ux_req_t *)user_data;
    r->ncb++;
    ucp_request_free(request);
    r->ucx = NULL;
    if (!r->conn) {
        ux_req_free(r);
        return;
    }
    recv_done(r, status, info ? info->length : 0);
    ux_req_maybe_free(r);
}

ux_req_t *ux_req_new(ux_conn_t *c, int kind, int is_send)
{
    ux_req_t *r = kit_pool_get(&c->ep->reqs);   /* zeroed */
    if (!r) return NULL;
    r->kind = kind;
    r->conn = c;
    r->ep = c->ep;
    r->is_send = is_send;
    r->status = COHORT_IN_PROGRESS;
    r->released = kind != K_DATA;   /* nobody tests set-up requests */
    ux_all_add(&c->all, r);
    return r;
}

/* Hands an operation to UCX; the outcome arrives in send_cb/recv_cb, or at once. */
void ux_req_start(ux_req_t *r, const void *buf, size_t count, ucp_datatype_t dt,
                  uint64_t tag, uint64_t mask, ucp_mem_h memh)
{
    ux_conn_t *c = r->conn;
    ux_ep_t *ep = c->ep;
    r->posted = 1;
    ucp_request_param_t prm;
    memset(&prm, 0, sizeof prm);
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                       UCP_OP_ATTR_FIELD_DATATYPE;
    prm.user_data = r;
    prm.datatype = dt;
    if (memh) {
        prm.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
        prm.memh = memh;
    }
    ucs_status_ptr_t p;
    unsigned ncb = r->ncb;
    if (r->is_send) {
        prm.cb.send = send_cb;
        p = ucp_tag_send_nbx(c->uep, buf, count, tag, &prm);
    } else {
        prm.cb.recv = recv_cb;
        prm.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
        p = ucp_tag_recv_nbx(ep->worker, (void *)(uintptr_t)buf, count, tag, mask, &prm);
    }
    if (p == NULL) {   /* a send done at once */
        if (r->kind == K_CHUNK) chunk_done(r, UCS_OK, 0);
        else if (r->kind != K_DATA) ctl_sent(r, UCS_OK);
        else ux_req_finish(r, COHORT_SUCCESS);
    } else if (UCS_PTR_IS_ERR(p)) {
        ucs_status_t s = UCS_PTR_STATUS(p);
        if (r->kind == K_CHUNK) r->parent->pending--;   /* no callback will come */
        ux_conn_ucx_error(c, r->kind == K_CHUNK ? r->parent : r->kind == K_DATA ? r : NULL,
                          fail_status(s), "ucx: rank %d: %s rank %d failed at once: %s (UCX)",
                          ep->rank, r->is_send ? "ucp_tag_send_nbx to" : "ucp_tag_recv_nbx from",
                          c->peer, ucs_status_string(s));
    } else if (r->ncb == ncb) {
        /* UCX holds it until its callback. Not r->done as the test: UCX may have failed the
         * conn inside the call (err_cb: ux_conn_fail finishes every request) and still hold this
         * one. A receive's callback may already have run (a message that was waiting): then
         * UCX has let go of it. */
        r->ucx = p;
    }
}

void ux_req_post(ux_req_t *r)
{
    ux_conn_t *c = r->conn;
    kit_put_le64(r->hdr, r->tag);
    kit_put_le64(r->hdr + 8, r->len);
    r->seq = r->is_send ? c->send_seq : c->recv_seq;
    uint64_t tag = r->is_send ? data_tag(c->ep->rank, c->send_seq++)
                              : data_tag(c->peer, c->recv_seq++);
    if (!r->len) {
        ux_req_start(r, r->hdr, UX_HDR, ucp_dt_make_contig(1), tag, UX_FULL_MASK, NULL);
        return;
    }
    if (r->is_send && r->len >= UX_SPLIT_MIN && r->len <= UX_SPLIT_MAX && c->peer_eh &&
        c->ep->zcopy) {
        /* the header alone (a set-up style request owning a copy), then the chunks */
        unsigned char *h = malloc(UX_HDR);
        ux_req_t *hr = h ? ux_req_new(c, K_HDR, 1) : NULL;
        if (hr) {
            memcpy(h, r->hdr, UX_HDR);
            hr->own = h;
            hr->len = UX_HDR;
            ux_req_start(hr, h, UX_HDR, ucp_dt_make_contig(1), tag, UX_FULL_MASK, NULL);
            ux_req_maybe_free(hr);
            r->nchunks = (uint32_t)((r->len + UX_CHUNK - 1) / UX_CHUNK);
            for (uint32_t i = 0; i < r->nchunks && c->state != C_FAILED; i++) {
                ux_req_t *k = ux_req_new(c, K_CHUNK, 1);
                if (!k) {
                    ux_conn_fail(c, COHORT_ERR_NO_MEMORY, "ucx: rank %d: no memory for a request "
                                 "(sending %zu bytes to rank %d)", c->ep->rank, r->len, c->peer);
                    break;
                }
                k->parent = r;
                k->chunk = i;
                k->released = 0;   /* not freed inside ux_req_start */
                r->pending++;
                ux_req_start(k, (char *)r->buf + (size_t)i * UX_CHUNK, chunk_len(r->len, i),
                             ucp_dt_make_contig(1), payload_tag(c->ep->rank, r->seq, i),
                             UX_FULL_MASK, r->mr ? r->mr->memh : NULL);
                k->released = 1;
                ux_req_maybe_free(k);
            }
            return;
        }
        free(h);   /* no memory for the split: the whole message as one iov */
    }
    r->iov[0].buffer = r->hdr;
    r->iov[0].length = UX_HDR;
    r->iov[1].buffer = r->buf;
    r->iov[1].length = r->len;
    ux_req_start(r, r->iov, 2, ucp_dt_make_iov(), tag, UX_FULL_MASK, NULL);
}

/* Posts the next chunk receives of a split message (stage 1), one per free slot; the message
 * takes its slots (at most UX_SLOTS) from the endpoint at the first call. */
static void post_chunks(ux_req_t *m)
{
    ux_conn_t *c = m->conn;
    ux_ep_t *ep = c->ep;
    m->stage = 2;
    if (c->state == C_FAILED || m->done) return;
    if (!m->next_chunk) {
        uint32_t n = m->nchunks < UX_SLOTS ? m->nchunks : UX_SLOTS;
        while ((uint32_t)m->nspare < n) {
            ucp_mem_h mh;
            void *b = slot_get(ep, &mh);
            if (!b) break;
            m->spare[m->nspare] = b;
            m->spare_mh[m->nspare++] = mh;
        }
        if (!m->nspare) {
            ux_req_fail_msg(m, COHORT_ERR_NO_MEMORY, "ucx: rank %d: no memory for a %u-byte "
                            "receive slot (message from rank %d)", ep->rank, UX_CHUNK, c->peer);
            return;
        }
    }
    uint64_t len = kit_get_le64(m->hdr + 8);
    while (m->nspare && m->next_chunk < m->nchunks && c->state != C_FAILED) {
        ux_req_t *k = ux_req_new(c, K_CHUNK, 0);
        if (!k) {
            ux_conn_fail(c, COHORT_ERR_NO_MEMORY, "ucx: rank %d: no memory for a request "
                         "(receiving from rank %d)", ep->rank, c->peer);
            return;
        }
        m->nspare--;
        k->own = m->spare[m->nspare];
        k->slot_memh = m->spare_mh[m->nspare];
        k->parent = m;
        k->chunk = m->next_chunk++;
        k->released = 0;   /* not freed inside ux_req_start (its callback may run there) */
        m->pending++;
        ux_req_start(k, k->own, chunk_len(len, k->chunk), ucp_dt_make_contig(1),
                     payload_tag(c->peer, m->seq, k->chunk), UX_FULL_MASK, k->slot_memh);
        k->released = 1;
        ux_req_maybe_free(k);
    }
}

void ux_post_payloads(ux_ep_t *ep)
{
    for (ux_conn_t *c = ep->conns; c && ep->nstage; c = c->next)
        for (ux_req_t *r = c->all; r && ep->nstage; r = r->anext)
            if (r->stage == 1) {
                ep->nstage--;
                post_chunks(r);
            }
}

/* ---- plugin API: messages and memory ----------------------------------------------------- */

static cohort_status_t post(ux_conn_t *c, int is_send, void *buf, size_t len, uint64_t tag,
                            ux_mr_t *mr, cohort_tp_req_t *reqp)
{
    const cohort_host_v1_t *host = c->ep->host;
    /* a peer that closed sends nothing after its closing notice: receives beyond it fail */
    int refused = c->state == C_FAILED ||
                  (c->peer_closed && (is_send || c->recv_seq >= c->closed_seq));
    cohort_status_t st = kit_post_args(host, "ucx", is_send, buf, len, c->peer, reqp,
                                       refused ? c->err : COHORT_SUCCESS, c->errmsg);
    if (st) return st;
    ux_req_t *r = ux_req_new(c, K_DATA, is_send);
    if (!r) return host->error(COHORT_ERR_NO_MEMORY, "ucx: no memory for a request");
    r->buf = buf;
    r->len = len;
    r->tag = tag;
    r->nbytes = is_send ? len : 0;
    /* a registration helps a send only when it covers the whole buffer (UCX's rule for memh);
     * receives land in the plugin's slots */
    if (is_send && mr && len && (uintptr_t)buf >= mr->base && len <= mr->len &&
        (uintptr_t)buf - mr->base <= mr->len - len)
        r->mr = mr;
    *reqp = r;
    if (c->state == C_READY) {
        ux_req_post(r);
        /* The peer closed and then its connection ended: a message it sent is waiting in UCX
         * (then the receive completed inside ux_req_post) or will not come. */
        if (c->lost == 2 && !r->done) {
            ux_lost_recv(c, r);
            ux_cancel_finished_recvs(c);
        }
    } else {
        ux_defq_push(&c->def_h, &c->def_t, r);
    }
    return COHORT_SUCCESS;
}

cohort_status_t ux_isend(cohort_tp_conn_t connv, const void *buf, size_t len,
                         uint64_t tag, cohort_tp_mr_t mr, cohort_tp_req_t *req)
{
    return post((ux_conn_t *)connv, 1, (void *)(uintptr_t)buf, len, tag, (ux_mr_t *)mr, req);
}

cohort_status_t ux_irecv(cohort_tp_conn_t connv, void *buf, size_t len, uint64_t tag,
                         cohort_tp_mr_t mr, cohort_tp_req_t *req)
{
    return post((ux_conn_t *)connv, 0, buf, len, tag, (ux_mr_t *)mr, req);
}

/* Registers [buf, buf + len) with every memory domain of the UCX context (ucp_mem_map), for
 * sends of buffers inside it: their chunks skip UCX's per-message registration lookup
 * (receives land in the plugin's own registered slots). */
cohort_status_t ux_mem_reg(cohort_tp_ep_t epv, void *buf, size_t len, cohort_tp_mr_t *mrp)
{
    ux_ep_t *ep = (ux_ep_t *)epv;
    if (!ep || !mrp) return COHORT_ERR_INVALID_ARG;
    *mrp = NULL;
    if (!buf || !len)
        return ep->host->error(COHORT_ERR_INVALID_ARG, "ucx: mem_reg of %zu bytes at %p: give "
                               "a buffer and a non-zero length", len, buf);
    ux_mr_t *m = calloc(1, sizeof *m);
    if (!m) return ep->host->error(COHORT_ERR_NO_MEMORY, "ucx: no memory for a registration");
    ucs_status_t s = map_range(ep->ctx, buf, len, &m->memh);
    if (s != UCS_OK) {
        free(m);
        return ep->host->error(s == UCS_ERR_NO_MEMORY ? COHORT_ERR_NO_MEMORY
                                                      : COHORT_ERR_TRANSPORT,
                               "ucx: rank %d: ucp_mem_map of %zu bytes at %p failed: %s (UCX; "
                               "with RDMA devices the locked-memory limit bounds registrations: "
                               "check `ulimit -l`)", ep->rank, len, buf, ucs_status_string(s));
    }
    m->base = (uintptr_t)buf;
    m->len = len;
    *mrp = m;
    return COHORT_SUCCESS;
}

cohort_status_t ux_mem_dereg(cohort_tp_ep_t epv, cohort_tp_mr_t mrv)
{
    ux_ep_t *ep = (ux_ep_t *)epv;
    ux_mr_t *m = (ux_mr_t *)mrv;
    if (!ep || !m) return COHORT_ERR_INVALID_ARG;
    ucs_status_t s = ucp_mem_unmap(ep->ctx->ucp, m->memh);
    free(m);
    if (s != UCS_OK)
        return ep->host->error(COHORT_ERR_TRANSPORT, "ucx: rank %d: ucp_mem_unmap failed: %s",
                               ep->rank, ucs_status_string(s));
    return COHORT_SUCCESS;
}

cohort_status_t ux_test(cohort_tp_req_t reqv, size_t *nbytes)
{
    ux_req_t *r = (ux_req_t *)reqv;
    ux_conn_t *c = r->conn;
    ux_ep_t *ep = c->ep;
    if (!r->done) {
        if (ux_worker_progress(ep) > 0 && !r->done) ux_ep_signal(ep);
        ux_watch_peers(ep);
        if (ep->hrx.done || ep->brx.done || c->ack_rx || ep->nstage || ep->nlost) {
            ux_ep_work(ep);
            ux_ep_signal(ep);
        }
    }
    if (!r->done) return COHORT_IN_PROGRESS;
    cohort_status_t st = kit_req_outcome(ep->host, r->status, r->nbytes, nbytes, r->errmsg,
                                         c->errmsg);
    r->released = 1;
    ux_req_maybe_free(r);
    return st;
}
