/* SPDX-License-Identifier: BSD-3-Clause */
/* cohort shared-memory transport: sleeping and waking up (ep_fd). Each endpoint's UNIX datagram
 * socket in the abstract namespace, the arming of a reader that has been idle long enough (its
 * flags in every ready connection and in the collective area) and the datagrams that writers
 * send to an armed peer. The fast paths (wake_peer, ep_kick) are inline in shm_int.h.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <cohort/plugin.h>
#include "transports/common/kit_bytes.h"

#include "shm_int.h"

#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

/* ---- wake-up ------------------------------------------------------------------------------
 * Eventcount over a datagram socket per endpoint. A reader idle for SHM_ARM_CALLS calls and
 * SHM_ARM_NS drains its socket, sets armed[its side] (seq_cst) in every ready conn, fences, and
 * re-checks every conn once (conn_movable); if something can move it kicks itself. A writer,
 * after every store the other side could wait for (ring head, ring tail, rdone, closed), which
 * it makes seq_cst, loads armed[other side]; if set it clears it (exchange) and sends one byte
 * to the other's socket. While not armed the socket is kept readable (a datagram to ourselves,
 * sent once and kept until we arm), so a caller that sleeps on ep_fd early just comes back: the
 * fd is readable whenever progress() could advance something. A dead peer sends nothing: the
 * core's poll cap (2 ms) bounds that.
 *
 * Not the kit's wake-up (transports/common/kit_wake.h, which tcp, ucx and verbs share): its
 * rule (no poke inside progress(), an eventfd only this process writes) does not fit here. The
 * socket that is ep_fd is also the one other processes write to, through flags in shared
 * memory (armed[], seq_cst) that a reader sets only after a run of idle calls; and until it
 * arms, the socket is kept readable on purpose, progress() included (shm_ep_after kicks at the
 * end of every call that is not yet armed). Only ep_kick's "one datagram pending at a time"
 * (kicked) is the kit's pending flag. */

void shm_wake_name(struct sockaddr_un *sa, socklen_t *len, const char *segname)
{
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    /* abstract namespace: sun_path[0] = 0, nothing on the filesystem */
    int n = snprintf(sa->sun_path + 1, sizeof sa->sun_path - 1, "cohort-wake%s", segname);
    if (n < 0 || (size_t)n >= sizeof sa->sun_path - 1) n = (int)sizeof sa->sun_path - 2;
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

__attribute__((noinline)) void shm_wake_peer_slow(shm_conn_t *c)
{
    if (!atomic_exchange_explicit(&c->ctl->armed[peer_side(c)].v, 0, memory_order_seq_cst))
        return;   /* someone else (the peer disarming) got there first */
    if (c->ep->wfd < 0 || !c->peer_salen) return;
    char b = 1;
    /* EAGAIN/ENOBUFS: its queue is full, so it is readable already; ECONNREFUSED: gone */
    (void)sendto(c->ep->wfd, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL,
                 (const struct sockaddr *)&c->peer_sa, c->peer_salen);
}

__attribute__((noinline)) void shm_ep_kick_slow(shm_ep_t *ep)
{
    char b = 0;
    ep->kicked = 1;
    (void)sendto(ep->wfd, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL,
                 (const struct sockaddr *)&ep->self_sa, ep->self_salen);
}

/* Empties the socket; returns the number of datagrams read. */
int shm_ep_drain(shm_ep_t *ep)
{
    char b[16];
    int n = 0;
    for (;;) {
        ssize_t r = recv(ep->wfd, b, sizeof b, MSG_DONTWAIT);
        if (r >= 0) {
            n++;
            continue;
        }
        if (errno == EINTR) continue;
        break;
    }
    ep->kicked = 0;
    return n;
}

void shm_ep_disarm(shm_ep_t *ep)
{
    for (shm_conn_t *c = ep->conns; c; c = c->next)
        if (c->state == C_READY)
            atomic_store_explicit(&c->ctl->armed[my_side(c)].v, 0, memory_order_relaxed);
    if (ep->coll) shm_coll_disarm(ep->coll);
    ep->armed = 0;
}

/* Whether progress() could advance something on c now (after the arming fence). */
static int conn_movable(shm_conn_t *c)
{
    if (c->state == C_CONNECTING) return 1;
    if (c->state != C_READY) return 0;
    if (atomic_load_explicit(&c->ctl->closed[peer_side(c)], memory_order_acquire))
        return conn_has_work(c);
    if (c->recvq.h && c->recvq.h->started && c->recvq.h->rndv) return 1;
    if ((c->recvq.h || c->discard) && shm_ring_cons_count(&c->rx)) return 1;
    if (c->sendq.h && shm_ring_prod_space(&c->tx)) return 1;
    if (c->rndvq.h &&
        atomic_load_explicit(&c->tx.ctl->rdone, memory_order_acquire) >= c->rndvq.h->seq)
        return 1;
    return 0;
}

void shm_ep_arm(shm_ep_t *ep)
{
    for (shm_conn_t *c = ep->conns; c; c = c->next)
        if (c->state == C_CONNECTING) {   /* a handshake is not woken up: keep polling */
            ep_kick(ep);
            return;
        }
    shm_ep_drain(ep);
    for (shm_conn_t *c = ep->conns; c; c = c->next)
        if (c->state == C_READY)
            atomic_store_explicit(&c->ctl->armed[my_side(c)].v, 1, memory_order_seq_cst);
    if (shm_coll_active(ep->coll)) shm_coll_arm(ep->coll);
    atomic_thread_fence(memory_order_seq_cst);
    ep->armed = 1;
    if (shm_coll_active(ep->coll) && shm_coll_movable(ep->coll)) {
        ep_kick(ep);
        return;
    }
    for (shm_conn_t *c = ep->conns; c; c = c->next)
        if (conn_movable(c)) {
            ep_kick(ep);
            break;
        }
}

/* End of every call that made progress: ev0 is ep->nevents at its start. */
void shm_ep_after(shm_ep_t *ep, uint64_t ev0)
{
    if (ep->wfd < 0) return;
    if (ep->nevents != ev0) {
        ep->idle = 0;
        if (ep->armed) shm_ep_disarm(ep);
        ep_kick(ep);
        return;
    }
    if (ep->armed) return;
    if (++ep->idle < SHM_ARM_CALLS || ep->done_since_progress ||
        (ep->idle - SHM_ARM_CALLS) % SHM_CLOCK_EVERY) {
        ep_kick(ep);
        return;
    }
    uint64_t t = shm_now_ns();
    if (ep->idle == SHM_ARM_CALLS) ep->idle_since = t;
    if (t - ep->idle_since < SHM_ARM_NS) {
        ep_kick(ep);
        return;
    }
    shm_ep_arm(ep);
}

