/* SPDX-License-Identifier: BSD-3-Clause */
/* Credit-based flow control of the verbs transport (pure C, header-only; no libibverbs, so the
 * unit tests compile it without a device).
 *
 * Each side of a connection keeps VB_SLOTS receive buffers posted for the peer's "data"
 * messages (eager, RTS, CTS, and the RDMA WRITE with immediate, which consumes a receive work
 * request too) plus VB_CTRL_WR receive requests more for credit-only messages.
 *   - A sender may post a data message only while it holds a credit (avail > 0); it starts with
 *     VB_SLOTS, so the peer always has a posted receive for it: no receive-not-ready, no
 *     overrun.
 *   - The receiver counts slots it has re-posted after consuming a data message ("freed") and
 *     returns them in the header of every message it sends (piggyback), or, when nothing goes
 *     the other way and at least VB_CREDIT_BATCH are waiting, in a credit-only message.
 *   - Credit-only messages need no credit: they are consumed at once and their receive request
 *     re-posted. A credit-only message returns at least VB_CREDIT_BATCH credits, and at most
 *     VB_SLOTS credits can be outstanding, so at most VB_SLOTS / VB_CREDIT_BATCH of them are ever
 *     unprocessed at the receiver: VB_CTRL_WR receive requests cover them.
 */
#ifndef COHORT_VB_CREDIT_H
#define COHORT_VB_CREDIT_H

#include <stdint.h>

#define VB_SLOTS 32u
#define VB_CREDIT_BATCH 8u
#define VB_CTRL_WR (VB_SLOTS / VB_CREDIT_BATCH + 2u)

typedef struct vb_credit {
    uint32_t avail;        /* data messages this side may still send */
    uint32_t freed;        /* peer's data slots re-posted here, not yet returned to the peer */
    uint64_t sent_data;    /* statistics and invariant checks */
    uint64_t returned;
} vb_credit_t;

static inline void vb_credit_init(vb_credit_t *c)
{
    c->avail = VB_SLOTS;
    c->freed = 0;
    c->sent_data = 0;
    c->returned = 0;
}

/* 1 when a data message may be posted now. */
static inline int vb_credit_can_send(const vb_credit_t *c) { return c->avail > 0; }

/* A data message is being posted: takes one credit and returns the credits to piggyback in its
 * header (the freed count, which is then cleared). Call only after vb_credit_can_send. */
static inline uint32_t vb_credit_take(vb_credit_t *c)
{
    c->avail--;
    c->sent_data++;
    uint32_t n = c->freed;
    c->freed = 0;
    c->returned += n;
    return n;
}

/* A data message that cannot carry a header (an RDMA WRITE with immediate) takes one credit and
 * returns none. Call only after vb_credit_can_send. */
static inline void vb_credit_take_silent(vb_credit_t *c)
{
    c->avail--;
    c->sent_data++;
}

/* Credits the peer returned (from any message's header). 0 on success, -1 when the peer
 * returned more than could be outstanding (a protocol violation: the connection is broken). */
static inline int vb_credit_grant(vb_credit_t *c, uint32_t n)
{
    if (n > VB_SLOTS - c->avail) return -1;
    c->avail += n;
    return 0;
}

/* One of the peer's data messages was consumed and its receive buffer re-posted. */
static inline void vb_credit_freed(vb_credit_t *c) { c->freed++; }

/* 1 when a credit-only message should go out now (enough freed, nothing to piggyback on). */
static inline int vb_credit_need_msg(const vb_credit_t *c) { return c->freed >= VB_CREDIT_BATCH; }

/* A credit-only message is being posted: returns the count it carries and clears it. */
static inline uint32_t vb_credit_take_msg(vb_credit_t *c)
{
    uint32_t n = c->freed;
    c->freed = 0;
    c->returned += n;
    return n;
}

#endif /* COHORT_VB_CREDIT_H */
