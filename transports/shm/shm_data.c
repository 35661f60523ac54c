/* SPDX-License-Identifier: BSD-3-Clause */
/* cohort shared-memory transport: the data path. Requests (allocation, the per-connection
 * cache, completion), single copy from a peer's memory (process_vm_readv), and the progress of a
 * connection: fragments through the SPSC rings of its slot (ring.h) for eager messages and
 * rendezvous cells read by CMA for large ones. The design is described at the top of shm.c.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <cohort/plugin.h>
#include "transports/common/kit_bytes.h"
#include "transports/common/kit_fail.h"

#include "shm_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>

/* Reads len bytes at raddr of process pid into local; 0, or -errno. */
int shm_cma_read(int pid, void *local, uint64_t raddr, size_t len)
{
    size_t done = 0;
    while (done < len) {
        struct iovec l = { (char *)local + done, len - done };
        struct iovec r = { (void *)(uintptr_t)(raddr + done), len - done };
        ssize_t n = process_vm_readv(pid, &l, 1, &r, 1, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        if (n == 0) return -EFAULT;
        done += (size_t)n;
    }
    return 0;
}

/* ---- requests ---------------------------------------------------------------------------- */

void shm_req_unlink_all(shm_req_t *r)
{
    shm_conn_t *c = r->conn;
    shm_all_del(&c->all, r);
    free(r->errmsg);
    kit_pool_put(&c->reqs, r);   /* poisoned under ASan: a stale request pointer still faults */
}

void shm_req_finish(shm_req_t *r, cohort_status_t st)
{
    if (r->done) return;
    r->done = 1;
    r->status = st;
    shm_ep_t *ep = r->conn->ep;
    ep->nevents++;
    if (r != ep->testing) ep->done_since_progress = 1;
}

static void req_fail_msg(shm_req_t *r, cohort_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void req_fail_msg(shm_req_t *r, cohort_status_t st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kit_msg_set(&r->errmsg, fmt, ap);
    va_end(ap);
    shm_req_finish(r, st);
}

/* ---- data path --------------------------------------------------------------------------- */

/* Completes the single-copy sends the peer has finished reading (its rdone counter). */
static void tx_reap(shm_conn_t *c)
{
    if (!c->rndvq.h) return;
    uint64_t done = atomic_load_explicit(&c->tx.ctl->rdone, memory_order_acquire);
    shm_req_t *r;
    while ((r = c->rndvq.h) != NULL && r->seq <= done) {
        rq_pop(&c->rndvq);
        r->nbytes = r->len;
        shm_req_finish(r, COHORT_SUCCESS);
    }
}

static void tx_progress(shm_conn_t *c)
{
    shm_ring_cursor_t k;
    shm_ring_prod_begin(&c->tx, &k);
    shm_req_t *r;
    while ((r = c->sendq.h) != NULL) {
        shm_cell_t *ch = shm_ring_prod_reserve(&c->tx, &k);
        if (!ch) break;   /* full */
        if (!r->started) {   /* the protocol is fixed when the first cell is written */
            r->started = 1;
            r->rndv = c->tx_cma && r->len > c->ep->eager;
        }
        if (r->rndv) {
            ch->tag = r->tag;
            ch->len = r->len;
            ch->off = 0;
            ch->addr = (uint64_t)(uintptr_t)r->buf;
            ch->seq = r->seq = ++c->rndv_sent;
            ch->flen = 0;
            ch->kind = K_RNDV;
            shm_ring_prod_commit(&k);
            rq_pop(&c->sendq);
            rq_push(&c->rndvq, r);
            continue;
        }
        size_t n = r->len - r->off;
        if (n > SHM_CELL_PAYLOAD) n = SHM_CELL_PAYLOAD;
        ch->tag = r->tag;
        ch->len = r->len;
        ch->off = r->off;
        ch->addr = 0;
        ch->seq = 0;
        ch->flen = (uint32_t)n;
        ch->kind = K_FRAG;
        if (n) memcpy(shm_cell_payload(ch), r->buf + r->off, n);
        r->off += n;
        shm_ring_prod_commit(&k);
        if (r->off == r->len) {
            rq_pop(&c->sendq);
            r->nbytes = r->len;
            shm_req_finish(r, COHORT_SUCCESS);
        }
    }
    if (shm_ring_prod_publish_sc(&c->tx, &k)) {
        c->ep->nevents++;
        wake_peer(c);
    }
    tx_reap(c);
}

static void rndv_publish(shm_conn_t *c)
{
    c->rndv_done_local++;
    atomic_store_explicit(&c->rx.ctl->rdone, c->rndv_done_local, memory_order_seq_cst);
    wake_peer(c);
}

static void rx_progress(shm_conn_t *c)
{
    shm_ring_cursor_t k;
    shm_ring_cons_begin(&c->rx, &k);
    size_t budget = SHM_RNDV_CHUNK;
    for (;;) {
        shm_req_t *r = c->recvq.h;
        /* a matched rendezvous receive in progress: read by CMA */
        if (r && r->started && r->rndv) {
            size_t n = r->rlen - r->off;
            if (n > budget) n = budget;
            int rc = n ? shm_cma_read(c->peer_pid, r->buf + r->off, r->raddr + r->off, n) : 0;
            /* The sender closed (its buffer may be gone, the data unreliable): also when the
             * read failed with EFAULT because it freed the buffer on its way out. */
            if ((rc == 0 || rc == -EFAULT) &&
                atomic_load_explicit(&c->ctl->closed[c->connector ? SIDE_ACC : SIDE_CONN],
                                     memory_order_acquire))
                rc = -ESRCH;
            if (rc) {
                if (rc == -ESRCH || shm_pid_gone(c->pidfd, c->peer_pid))
                    shm_conn_fail(c, COHORT_ERR_PEER_LOST, "shm: rank %d (pid %d) went away while "
                                  "rank %d was reading a %zu-byte message from it", c->peer,
                                  c->peer_pid, c->ep->rank, r->rlen);
                else
                    shm_conn_fail(c, COHORT_ERR_TRANSPORT, "shm: rank %d: process_vm_readv from "
                                  "rank %d (pid %d) failed: %s; set COHORT_SHM_CMA=0 to copy "
                                  "through shared memory instead", c->ep->rank, c->peer,
                                  c->peer_pid, strerror(-rc));
                break;
            }
            r->off += n;
            budget -= n;
            if (n) c->ep->nevents++;
            if (r->off < r->rlen) break;   /* budget spent: continue next call */
            rq_pop(&c->recvq);
            r->nbytes = r->rlen;
            rndv_publish(c);
            shm_req_finish(r, COHORT_SUCCESS);
            continue;
        }
        shm_cell_t *ch = shm_ring_cons_peek(&c->rx, &k);
        if (!ch) break;   /* empty */
        uint32_t flen = ch->flen;
        uint64_t mlen = ch->len, off = ch->off;
        if ((ch->kind != K_FRAG && ch->kind != K_RNDV) || flen > SHM_CELL_PAYLOAD ||
            (ch->kind == K_FRAG && (off > mlen || flen > mlen - off))) {
            shm_conn_fail(c, COHORT_ERR_TRANSPORT, "shm: rank %d: corrupt cell from rank %d "
                          "(kind %u, fragment %u at %llu of %llu bytes)", c->ep->rank, c->peer,
                          ch->kind, flen, (unsigned long long)off, (unsigned long long)mlen);
            break;
        }
        if (c->discard) {   /* rest of a mismatched message */
            c->discard -= flen < c->discard ? flen : c->discard;
            shm_ring_cons_release(&k);
            continue;
        }
        if (r && r->started) {   /* next fragment of the current message */
            memcpy(r->buf + off, shm_cell_payload(ch), flen);
            r->off = off + flen;
            shm_ring_cons_release(&k);
            if (r->off == r->rlen) {
                rq_pop(&c->recvq);
                r->nbytes = r->rlen;
                shm_req_finish(r, COHORT_SUCCESS);
            }
            continue;
        }
        if (!r) break;   /* in order: wait for the matching irecv */
        /* first cell of a new message */
        if (ch->tag != r->tag || mlen > r->len) {
            rq_pop(&c->recvq);
            req_fail_msg(r, COHORT_ERR_MISMATCH, "shm: rank %d: message from rank %d does not "
                         "match the posted receive: it has tag %llu and %llu bytes, the receive "
                         "expects tag %llu and at most %zu bytes (the message was dropped)",
                         c->ep->rank, c->peer, (unsigned long long)ch->tag,
                         (unsigned long long)mlen, (unsigned long long)r->tag, r->len);
            if (ch->kind == K_RNDV) rndv_publish(c);
            else c->discard = (size_t)(mlen - flen);
            shm_ring_cons_release(&k);
            continue;
        }
        r->started = 1;
        r->rlen = (size_t)mlen;
        if (ch->kind == K_RNDV) {
            r->rndv = 1;
            r->raddr = ch->addr;
            r->off = 0;
            shm_ring_cons_release(&k);
            continue;
        }
        memcpy(r->buf, shm_cell_payload(ch), flen);
        r->off = flen;
        shm_ring_cons_release(&k);
        if (r->off == r->rlen) {
            rq_pop(&c->recvq);
            r->nbytes = r->rlen;
            shm_req_finish(r, COHORT_SUCCESS);
        }
    }
    if (shm_ring_cons_publish_sc(&c->rx, &k)) {
        c->ep->nevents++;
        wake_peer(c);
    }
}

void shm_conn_progress(shm_conn_t *c)
{
    if (c->state == C_CONNECTING) {
        if (c->connector) shm_connector_step(c);
        else shm_acceptor_step(c);
        if (c->state != C_READY) return;
    }
    if (c->state != C_READY) return;
    if (c->sendq.h || c->rndvq.h) tx_progress(c);
    if (c->state == C_READY && (c->recvq.h || c->discard)) rx_progress(c);
    if (c->state != C_READY) return;
    /* the peer closed: pending sends will never be taken; receives fail once the ring is dry */
    if (atomic_load_explicit(&c->ctl->closed[c->connector ? SIDE_ACC : SIDE_CONN],
                             memory_order_acquire)) {
        /* What the peer finished before closing is visible now (acquire): take it first, so
         * a send it read or a message it wrote just before closing still completes. */
        tx_reap(c);
        if (c->recvq.h || c->discard) rx_progress(c);
        if (c->state != C_READY) return;
        int rx_dry = shm_ring_cons_count(&c->rx) == 0;
        if (c->sendq.h || c->rndvq.h || (c->recvq.h && rx_dry))
            shm_conn_fail(c, COHORT_ERR_PEER_LOST, "shm: rank %d (pid %d) closed its connection to "
                          "rank %d with operations still pending here", c->peer, c->peer_pid,
                          c->ep->rank);
        return;
    }
    if (conn_has_work(c)) shm_check_peer_alive(c, 0);
}

