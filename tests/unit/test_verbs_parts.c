/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of the verbs transport's device-free pieces: the credit-based flow control
 * (transports/verbs/vb_credit.h), the registration cache (vb_regcache.c, with counting fake
 * register/deregister callbacks) and the COHORT_IB_HCA parser (vb_hca.c). No RDMA device and no
 * libibverbs needed.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transports/verbs/vb_credit.h"
#include "transports/verbs/vb_hca.h"
#include "transports/verbs/vb_memev.h"
#include "transports/verbs/vb_regcache.h"

/* ---- credits ------------------------------------------------------------------------------ */

START_TEST(credit_basics)
{
    vb_credit_t c;
    vb_credit_init(&c);
    ck_assert_uint_eq(c.avail, VB_SLOTS);
    for (unsigned i = 0; i < VB_SLOTS; i++) {
        ck_assert(vb_credit_can_send(&c));
        ck_assert_uint_eq(vb_credit_take(&c), 0);
    }
    ck_assert(!vb_credit_can_send(&c));
    /* the peer cannot return more than is outstanding */
    ck_assert_int_eq(vb_credit_grant(&c, VB_SLOTS + 1), -1);
    ck_assert_int_eq(vb_credit_grant(&c, 3), 0);
    ck_assert_uint_eq(c.avail, 3);
    ck_assert_int_eq(vb_credit_grant(&c, VB_SLOTS - 2), -1);
    ck_assert_int_eq(vb_credit_grant(&c, VB_SLOTS - 3), 0);
    ck_assert_uint_eq(c.avail, VB_SLOTS);
    ck_assert_int_eq(vb_credit_grant(&c, 1), -1);
    /* freed slots ride on the next data message, and a credit message past the batch */
    for (unsigned i = 0; i + 1 < VB_CREDIT_BATCH; i++) vb_credit_freed(&c);
    ck_assert(!vb_credit_need_msg(&c));
    vb_credit_freed(&c);
    ck_assert(vb_credit_need_msg(&c));
    ck_assert_uint_eq(vb_credit_take(&c), VB_CREDIT_BATCH);
    ck_assert(!vb_credit_need_msg(&c));
    ck_assert_uint_eq(vb_credit_take(&c), 0);
    for (unsigned i = 0; i < VB_CREDIT_BATCH + 2; i++) vb_credit_freed(&c);
    ck_assert_uint_eq(vb_credit_take_msg(&c), VB_CREDIT_BATCH + 2);
    ck_assert_uint_eq(c.freed, 0);
    unsigned before = c.avail;
    vb_credit_take_silent(&c);
    ck_assert_uint_eq(c.avail, before - 1);
    /* the receive queue covers the credit messages that can be outstanding */
    ck_assert_uint_ge(VB_CTRL_WR, VB_SLOTS / VB_CREDIT_BATCH + 1);
}
END_TEST

/* Two sides exchange messages at random over two FIFO channels, as the transport does: data
 * messages (take a credit; held by the receiver until "the user" consumes them, then freed) and
 * credit-only messages. Checked at every step: a message never arrives without a posted receive
 * (in flight + held + arrived-unprocessed <= VB_RX_WR posted, and data <= VB_SLOTS); and at the
 * end, once everything is consumed and nothing is left to send, every credit came home (no
 * credit lost, which would be a deadlock later). */
#define CHAN_MAX 4096
typedef struct { int data; uint32_t credits; } msg_t;
typedef struct {
    msg_t q[CHAN_MAX];
    unsigned head, n;
} chan_t;
typedef struct {
    vb_credit_t cr;          /* avail: credits to send to the peer; freed: peer's slots freed */
    unsigned held;           /* peer's data messages arrived, not yet consumed */
    unsigned data_in;        /* peer's data messages in flight to us */
    unsigned ctrl_in;        /* peer's credit messages in flight to us */
} side_t;

static uint64_t rng = 88172645463325252ull;
static unsigned rnd(unsigned n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (unsigned)(rng % n);
}

static void push(chan_t *ch, msg_t m)
{
    ck_assert_uint_lt(ch->n, CHAN_MAX);
    ch->q[(ch->head + ch->n++) % CHAN_MAX] = m;
}

static void send_data(side_t *s, side_t *peer, chan_t *ch)
{
    ck_assert(vb_credit_can_send(&s->cr));
    msg_t m = { 1, vb_credit_take(&s->cr) };
    push(ch, m);
    peer->data_in++;
    ck_assert_uint_le(peer->data_in + peer->held, VB_SLOTS);
    ck_assert_uint_le(peer->data_in + peer->held + peer->ctrl_in, VB_SLOTS + VB_CTRL_WR);
}

static void send_credit(side_t *s, side_t *peer, chan_t *ch)
{
    msg_t m = { 0, vb_credit_take_msg(&s->cr) };
    push(ch, m);
    peer->ctrl_in++;
    ck_assert_uint_le(peer->data_in + peer->held + peer->ctrl_in, VB_SLOTS + VB_CTRL_WR);
}

static void deliver(side_t *s, chan_t *ch)
{
    msg_t m = ch->q[ch->head];
    ch->head = (ch->head + 1) % CHAN_MAX;
    ch->n--;
    ck_assert_int_eq(vb_credit_grant(&s->cr, m.credits), 0);
    if (m.data) {
        s->data_in--;
        s->held++;
    } else {
        s->ctrl_in--;
    }
}

START_TEST(credit_two_sides_random)
{
    static chan_t ch[2];     /* ch[i]: messages to side i */
    side_t s[2];
    memset(ch, 0, sizeof ch);
    memset(s, 0, sizeof s);
    vb_credit_init(&s[0].cr);
    vb_credit_init(&s[1].cr);
    unsigned long sent = 0;
    for (unsigned step = 0; step < 2000000; step++) {
        int i = (int)rnd(2), o = 1 - i;
        switch (rnd(4)) {
        case 0:                                   /* i sends data if it may */
            if (vb_credit_can_send(&s[i].cr) && rnd(3)) {
                send_data(&s[i], &s[o], &ch[o]);
                sent++;
            }
            break;
        case 1:                                   /* a message to i arrives */
            if (ch[i].n) deliver(&s[i], &ch[i]);
            break;
        case 2:                                   /* i's user consumes a held message */
            if (s[i].held && rnd(2)) {
                s[i].held--;
                vb_credit_freed(&s[i].cr);
            }
            break;
        default:                                  /* end of a progress call at i */
            if (vb_credit_need_msg(&s[i].cr)) send_credit(&s[i], &s[o], &ch[o]);
            break;
        }
    }
    ck_assert_uint_gt(sent, 100000);
    /* drain: deliver, consume, return credits until nothing moves */
    for (int round = 0; round < 100; round++) {
        for (int i = 0; i < 2; i++) {
            while (ch[i].n) deliver(&s[i], &ch[i]);
            while (s[i].held) {
                s[i].held--;
                vb_credit_freed(&s[i].cr);
            }
        }
        for (int i = 0; i < 2; i++)
            if (s[i].cr.freed) send_credit(&s[i], &s[1 - i], &ch[1 - i]);   /* final flush */
    }
    for (int i = 0; i < 2; i++) {
        ck_assert_uint_eq(ch[i].n, 0);
        ck_assert_uint_eq(s[i].cr.avail, VB_SLOTS);
        ck_assert_uint_eq(s[i].cr.freed, 0);
    }
}
END_TEST

/* A sender that has no credits left gets them back through credit messages alone (the receiver
 * sends nothing else): no deadlock with one-way traffic. */
START_TEST(credit_one_way)
{
    vb_credit_t snd, rcv;
    vb_credit_init(&snd);
    vb_credit_init(&rcv);
    unsigned inflight = 0, msgs = 0;
    for (unsigned n = 0; n < 100000; n++) {
        if (!vb_credit_can_send(&snd)) {
            /* the receiver consumes what arrived and returns credits */
            while (inflight) {
                inflight--;
                vb_credit_freed(&rcv);
                if (vb_credit_need_msg(&rcv)) {
                    ck_assert_int_eq(vb_credit_grant(&snd, vb_credit_take_msg(&rcv)), 0);
                    msgs++;
                }
            }
            ck_assert(vb_credit_can_send(&snd));
        }
        ck_assert_uint_eq(vb_credit_take(&snd), 0);
        inflight++;
        ck_assert_uint_le(inflight + rcv.freed, VB_SLOTS);
    }
    ck_assert_uint_ge(msgs, 100000 / VB_SLOTS);
}
END_TEST

/* ---- registration cache ------------------------------------------------------------------- */

typedef struct {
    int regs, deregs, fail;
    int live;
} fake_t;

static void *fake_reg(void *arg, void *addr, size_t len)
{
    fake_t *f = arg;
    (void)addr;
    (void)len;
    if (f->fail) {
        errno = ENOMEM;
        return NULL;
    }
    f->regs++;
    f->live++;
    return malloc(1);
}

static void fake_dereg(void *arg, void *h)
{
    fake_t *f = arg;
    f->deregs++;
    f->live--;
    free(h);
}

START_TEST(regcache_hits_and_ranges)
{
    fake_t f = { 0 };
    vb_regcache_t rc;
    vb_rc_init(&rc, 4, 4096, 1, fake_reg, fake_dereg, &f);
    static char buf[1 << 16] __attribute__((aligned(4096)));
    vb_rc_entry_t *a = vb_rc_get(&rc, buf + 100, 1000);
    ck_assert_ptr_nonnull(a);
    ck_assert_uint_eq(a->start, (uintptr_t)buf);
    ck_assert_uint_eq(a->end, (uintptr_t)buf + 4096);
    vb_rc_put(&rc, a);
    /* same buffer again, and a sub-range: no new registration */
    for (int i = 0; i < 100; i++) {
        vb_rc_entry_t *b = vb_rc_get(&rc, buf + 100, 1000);
        ck_assert_ptr_eq(b, a);
        vb_rc_put(&rc, b);
    }
    vb_rc_entry_t *c = vb_rc_get(&rc, buf + 4000, 96);
    ck_assert_ptr_eq(c, a);
    vb_rc_put(&rc, c);
    ck_assert_int_eq(f.regs, 1);
    ck_assert_uint_eq(rc.hits, 101);
    /* a range that crosses the page end is a new registration covering both pages */
    vb_rc_entry_t *d = vb_rc_get(&rc, buf + 4000, 200);
    ck_assert_ptr_ne(d, a);
    ck_assert_uint_eq(d->start, (uintptr_t)buf);
    ck_assert_uint_eq(d->end, (uintptr_t)buf + 8192);
    vb_rc_put(&rc, d);
    ck_assert_int_eq(f.regs, 2);
    /* zero length is one byte */
    vb_rc_entry_t *z = vb_rc_get(&rc, buf + 5, 0);
    ck_assert_ptr_nonnull(z);
    vb_rc_put(&rc, z);
    ck_assert_int_eq(f.regs, 2);
    vb_rc_fini(&rc);
    ck_assert_int_eq(f.live, 0);
}
END_TEST

START_TEST(regcache_eviction_and_refs)
{
    fake_t f = { 0 };
    vb_regcache_t rc;
    vb_rc_init(&rc, 3, 4096, 1, fake_reg, fake_dereg, &f);
    static char buf[16 * 4096] __attribute__((aligned(4096)));
    vb_rc_entry_t *e[8];
    /* 5 entries in use at once: the cap is exceeded, but nothing in use is evicted */
    for (int i = 0; i < 5; i++) e[i] = vb_rc_get(&rc, buf + i * 4096, 10);
    ck_assert_uint_eq(rc.count, 5);
    ck_assert_int_eq(f.deregs, 0);
    /* released in order 0..4: each release brings the count back towards the cap by
     * deregistering unused entries, least recently used first, so 0 and 1 go */
    vb_rc_entry_t *again = vb_rc_get(&rc, buf, 10);
    ck_assert_ptr_eq(again, e[0]);
    vb_rc_put(&rc, again);
    for (int i = 0; i < 5; i++) vb_rc_put(&rc, e[i]);
    ck_assert_uint_eq(rc.count, 3);
    ck_assert_int_eq(f.deregs, 2);
    int regs = f.regs;
    vb_rc_put(&rc, vb_rc_get(&rc, buf + 2 * 4096, 10));
    vb_rc_put(&rc, vb_rc_get(&rc, buf + 3 * 4096, 10));
    vb_rc_put(&rc, vb_rc_get(&rc, buf + 4 * 4096, 10));
    ck_assert_int_eq(f.regs, regs);
    /* a miss past the cap evicts the least recently used unused entry (2) */
    vb_rc_put(&rc, vb_rc_get(&rc, buf, 10));
    ck_assert_int_eq(f.regs, regs + 1);
    ck_assert_uint_eq(rc.count, 3);
    vb_rc_put(&rc, vb_rc_get(&rc, buf + 3 * 4096, 10));
    ck_assert_int_eq(f.regs, regs + 1);
    vb_rc_put(&rc, vb_rc_get(&rc, buf + 2 * 4096, 10));
    ck_assert_int_eq(f.regs, regs + 2);
    /* invalidate drops what is unused in the range and marks what is in use stale: never
     * found again, deregistered at its last put */
    vb_rc_entry_t *busy = vb_rc_get(&rc, buf + 4 * 4096, 10);
    ck_assert_uint_eq(vb_rc_invalidate(&rc, buf, 16 * 4096), 1);
    ck_assert_uint_eq(rc.count, 1);
    ck_assert_int_eq(busy->stale, 1);
    int deregs = f.deregs;
    vb_rc_put(&rc, busy);
    ck_assert_int_eq(f.deregs, deregs + 1);
    ck_assert_uint_eq(rc.count, 0);
    ck_assert_uint_eq(vb_rc_invalidate(&rc, buf, 16 * 4096), 0);
    ck_assert_int_eq(f.live, 0);
    /* a failing registration returns NULL with its errno and caches nothing */
    f.fail = 1;
    errno = 0;
    ck_assert_ptr_null(vb_rc_get(&rc, buf, 10));
    ck_assert_int_eq(errno, ENOMEM);
    ck_assert_uint_eq(rc.count, 0);
    f.fail = 0;
    vb_rc_get(&rc, buf, 10);                 /* left referenced: fini releases it anyway */
    vb_rc_fini(&rc);
    ck_assert_int_eq(f.live, 0);
}
END_TEST

/* An unmap reported through the log (what libucm's hook does inside munmap or free): the next
 * lookup drops every entry it overlaps, in use or not, and registers again. */
START_TEST(regcache_drops_unmapped)
{
    fake_t f = { 0 };
    vb_regcache_t rc;
    vb_rc_init(&rc, 8, 4096, 1, fake_reg, fake_dereg, &f);
    static char buf[16 * 4096] __attribute__((aligned(4096)));
    vb_rc_put(&rc, vb_rc_get(&rc, buf, 3 * 4096));
    vb_rc_put(&rc, vb_rc_get(&rc, buf + 8 * 4096, 4096));
    vb_rc_put(&rc, vb_rc_get(&rc, buf, 3 * 4096));
    ck_assert_int_eq(f.regs, 2);
    /* the last byte of the first entry's range goes: that entry goes, the other stays */
    vb_memev_record(buf + 3 * 4096 - 1, 1);
    ck_assert_uint_eq(rc.count, 2);   /* lazily: at the next lookup */
    vb_rc_entry_t *e = vb_rc_get(&rc, buf, 3 * 4096);
    ck_assert_int_eq(f.regs, 3);
    ck_assert_int_eq(f.deregs, 1);
    ck_assert_uint_eq(rc.invalidated, 1);
    vb_rc_put(&rc, vb_rc_get(&rc, buf + 8 * 4096, 4096));
    ck_assert_int_eq(f.regs, 3);
    /* unmapped while in use (a buffer freed during its own message): the entry is no longer
     * found, and goes when its message puts it */
    vb_memev_record(buf, 4096);
    vb_rc_entry_t *g = vb_rc_get(&rc, buf + 4096, 10);
    ck_assert_ptr_ne(g, e);
    ck_assert_int_eq(e->stale, 1);
    ck_assert_int_eq(f.regs, 4);
    int deregs = f.deregs;
    vb_rc_put(&rc, e);
    ck_assert_int_eq(f.deregs, deregs + 1);
    vb_rc_put(&rc, g);
    /* a range ending exactly where an entry starts does not touch it */
    vb_memev_record(buf + 7 * 4096, 4096);
    vb_rc_put(&rc, vb_rc_get(&rc, buf + 8 * 4096, 4096));
    ck_assert_int_eq(f.regs, 4);
    vb_rc_fini(&rc);
    ck_assert_int_eq(f.live, 0);
}
END_TEST

/* A cache that fell more than the log's length behind cannot know what went: it drops all. */
START_TEST(regcache_log_overrun_drops_all)
{
    fake_t f = { 0 };
    vb_regcache_t rc;
    vb_rc_init(&rc, 8, 4096, 1, fake_reg, fake_dereg, &f);
    static char buf[4 * 4096] __attribute__((aligned(4096)));
    static char other[4096] __attribute__((aligned(4096)));
    vb_rc_put(&rc, vb_rc_get(&rc, buf, 4096));
    vb_rc_entry_t *busy = vb_rc_get(&rc, buf + 2 * 4096, 4096);
    for (int i = 0; i < VB_MEMEV_LOG + 1; i++) vb_memev_record(other, sizeof other);
    vb_rc_put(&rc, vb_rc_get(&rc, buf, 4096));
    ck_assert_int_eq(f.regs, 3);
    ck_assert_int_eq(busy->stale, 1);
    vb_rc_put(&rc, busy);
    ck_assert_uint_eq(rc.count, 1);
    /* caught up: the next lookup hits */
    vb_rc_put(&rc, vb_rc_get(&rc, buf, 4096));
    ck_assert_int_eq(f.regs, 3);
    vb_rc_fini(&rc);
    ck_assert_int_eq(f.live, 0);
}
END_TEST

/* Where nothing reports unmaps, a registration lives as long as its message. */
START_TEST(regcache_without_events_keeps_nothing)
{
    fake_t f = { 0 };
    vb_regcache_t rc;
    vb_rc_init(&rc, 8, 4096, 0, fake_reg, fake_dereg, &f);
    static char buf[4 * 4096] __attribute__((aligned(4096)));
    for (int i = 0; i < 3; i++) {
        vb_rc_entry_t *a = vb_rc_get(&rc, buf, 100);
        vb_rc_entry_t *b = vb_rc_get(&rc, buf, 100);   /* two messages on one buffer */
        ck_assert_ptr_ne(a, b);
        vb_rc_put(&rc, a);
        ck_assert_int_eq(f.live, 1);
        vb_rc_put(&rc, b);
        ck_assert_int_eq(f.live, 0);
    }
    ck_assert_int_eq(f.regs, 6);
    ck_assert_uint_eq(rc.count, 0);
    ck_assert_uint_eq(rc.hits, 0);
    vb_rc_fini(&rc);
}
END_TEST

/* The log itself: reads in pieces, positions, and an overrun reported once. */
START_TEST(memev_log_reads)
{
    uint64_t seen = vb_memev_now();
    vb_memev_range_t r[8];
    ck_assert_uint_eq(vb_memev_read(&seen, r, 8), 0);
    for (uintptr_t i = 1; i <= 10; i++) vb_memev_record((void *)(i * 4096), 4096);
    ck_assert_uint_eq(vb_memev_now() - seen, 10);
    ck_assert_uint_eq(vb_memev_read(&seen, r, 8), 8);
    ck_assert_uint_eq(r[0].start, 4096);
    ck_assert_uint_eq(r[7].end, 9 * 4096);
    ck_assert_uint_eq(vb_memev_read(&seen, r, 8), 2);
    ck_assert_uint_eq(r[1].start, 10 * 4096);
    ck_assert_uint_eq(vb_memev_read(&seen, r, 8), 0);
    /* a range running past the top of the address space ends there */
    vb_memev_record((void *)(UINTPTR_MAX - 10), 100);
    ck_assert_uint_eq(vb_memev_read(&seen, r, 8), 1);
    ck_assert_uint_eq(r[0].end, UINTPTR_MAX);
    for (int i = 0; i < VB_MEMEV_LOG + 1; i++) vb_memev_record((void *)4096, 1);
    ck_assert_uint_eq(vb_memev_read(&seen, r, 8), SIZE_MAX);
    ck_assert_uint_eq(seen, vb_memev_now());
    ck_assert_uint_eq(vb_memev_read(&seen, r, 8), 0);
    /* in this build nothing feeds the log (no libucm in the unit tests) */
    char why[256] = "";
    if (!vb_memev_start(why, sizeof why)) ck_assert_int_gt((int)strlen(why), 10);
    else vb_memev_stop();
}
END_TEST

/* The hook runs in whichever thread unmaps, while the cache's thread reads: two writers and a
 * reader at once. Every range is read exactly once unless the reader is told it fell behind
 * (then it has to drop everything). Built under ThreadSanitizer too. */
#define MT_RANGES 50000
static void *mt_writer(void *arg)
{
    uintptr_t base = (uintptr_t)arg;
    for (uintptr_t i = 0; i < MT_RANGES; i++) vb_memev_record((void *)(base + i * 4096), 4096);
    return NULL;
}

START_TEST(memev_log_threads)
{
    uint64_t start = vb_memev_now(), seen = start;
    pthread_t t[2];
    ck_assert_int_eq(pthread_create(&t[0], NULL, mt_writer, (void *)((uintptr_t)1 << 40)), 0);
    ck_assert_int_eq(pthread_create(&t[1], NULL, mt_writer, (void *)((uintptr_t)2 << 40)), 0);
    uint64_t got = 0, lost = 0;
    vb_memev_range_t r[64];
    /* until both writers are done and everything they wrote is read */
    while (vb_memev_now() - start < 2 * MT_RANGES || seen != vb_memev_now()) {
        size_t n = vb_memev_read(&seen, r, 64);
        if (n == SIZE_MAX) {
            lost++;
            continue;
        }
        for (size_t i = 0; i < n; i++) {
            ck_assert_uint_eq(r[i].end - r[i].start, 4096);
            ck_assert(r[i].start >> 40 == 1 || r[i].start >> 40 == 2);
        }
        got += n;
        if (!n) sched_yield();
    }
    pthread_join(t[0], NULL);
    pthread_join(t[1], NULL);
    if (!lost) ck_assert_uint_eq(got, 2 * MT_RANGES);
    else ck_assert_uint_lt(got, 2 * MT_RANGES);
}
END_TEST

/* ---- COHORT_IB_HCA ------------------------------------------------------------------------ */

/* The order devices are tried in: the host's nearest-first list first, the rest as listed. */
static void dev_order(const char *const *names, int n, const char *const *pref, int npref,
                      char *buf, size_t len)
{
    int order[8];
    for (int i = 0; i < 8; i++) order[i] = -1;
    vb_order_devices(names, n, pref, npref, order);
    int seen[8] = { 0 };
    buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        ck_assert(order[i] >= 0 && order[i] < n);
        ck_assert_msg(!seen[order[i]]++, "device %d twice", order[i]);
        size_t used = strlen(buf);
        snprintf(buf + used, len - used, "%s%s", i ? " " : "", names[order[i]]);
    }
}

START_TEST(device_order_follows_topology)
{
    const char *devs[] = { "mlx5_0", "mlx5_1", "mlx5_2", "rxe0" };
    char out[128];
    const char *near[] = { "mlx5_2", "mlx5_0", "mlx5_1" };
    dev_order(devs, 4, near, 3, out, sizeof out);
    ck_assert_str_eq(out, "mlx5_2 mlx5_0 mlx5_1 rxe0");   /* rxe0: not in the topology */
    dev_order(devs, 4, NULL, 0, out, sizeof out);         /* no topology: the list's order */
    ck_assert_str_eq(out, "mlx5_0 mlx5_1 mlx5_2 rxe0");
    const char *odd[] = { "mlx4_9", "mlx5_1", "mlx5_1" };  /* unknown and repeated names */
    dev_order(devs, 4, odd, 3, out, sizeof out);
    ck_assert_str_eq(out, "mlx5_1 mlx5_0 mlx5_2 rxe0");
}
END_TEST

START_TEST(hca_grammar)
{
    vb_hca_spec_t s;
    char err[256];
    ck_assert_int_eq(vb_hca_parse(NULL, &s, err, sizeof err), 0);
    ck_assert(vb_hca_match(&s, "mlx5_0", 1));
    ck_assert_int_eq(vb_hca_parse("", &s, err, sizeof err), 0);
    ck_assert(vb_hca_match(&s, "rxe0", 1));

    ck_assert_int_eq(vb_hca_parse("mlx5_0:1,mlx5_1", &s, err, sizeof err), 0);
    ck_assert_int_eq(s.n, 2);
    ck_assert(vb_hca_match(&s, "mlx5_0", 1));
    ck_assert(!vb_hca_match(&s, "mlx5_0", 2));
    ck_assert(vb_hca_match(&s, "mlx5_1", 2));
    ck_assert(vb_hca_match(&s, "mlx5_10", 1));        /* a prefix: mlx5_1 matches mlx5_10 */
    ck_assert(!vb_hca_match(&s, "rxe0", 1));

    ck_assert_int_eq(vb_hca_parse("=mlx5_1", &s, err, sizeof err), 0);
    ck_assert(vb_hca_match(&s, "mlx5_1", 1));
    ck_assert(!vb_hca_match(&s, "mlx5_10", 1));

    ck_assert_int_eq(vb_hca_parse("^mlx5_1", &s, err, sizeof err), 0);
    ck_assert(!vb_hca_match(&s, "mlx5_1", 1));
    ck_assert(!vb_hca_match(&s, "mlx5_10", 1));
    ck_assert(vb_hca_match(&s, "mlx5_0", 1));

    ck_assert_int_eq(vb_hca_parse("^=mlx5_1:2", &s, err, sizeof err), 0);
    ck_assert(vb_hca_match(&s, "mlx5_1", 1));
    ck_assert(!vb_hca_match(&s, "mlx5_1", 2));
    ck_assert(vb_hca_match(&s, "mlx5_10", 2));

    ck_assert_int_eq(vb_hca_parse(" mlx5 , rxe ", &s, err, sizeof err), 0);
    ck_assert_int_eq(s.n, 2);
    ck_assert_str_eq(s.e[1].name, "rxe");
    ck_assert(vb_hca_match(&s, "rxe0", 1));
}
END_TEST

START_TEST(hca_errors)
{
    static const char *bad[] = {
        "^", "=", "mlx5_0,,mlx5_1", ",", "mlx5_0:", "mlx5_0:0", "mlx5_0:256", "mlx5_0:x",
        "mlx5_0:1:2", ":1", "mlx5 0", "mlx5_0,^mlx5_1",
        "a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        vb_hca_spec_t s;
        char err[256] = "";
        ck_assert_msg(vb_hca_parse(bad[i], &s, err, sizeof err) == -1, "'%s' was accepted",
                      bad[i]);
        ck_assert_msg(strlen(err) > 10, "'%s': no reason given", bad[i]);
    }
    vb_hca_spec_t s;
    char err[256];
    ck_assert_int_eq(vb_hca_parse("mlx5_0:255", &s, err, sizeof err), 0);
    ck_assert_int_eq(s.e[0].port, 255);
    ck_assert_int_eq(vb_hca_parse("a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p", &s, err, sizeof err), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("verbs_parts");
    TCase *tc = tcase_create("credits");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, credit_basics);
    tcase_add_test(tc, credit_two_sides_random);
    tcase_add_test(tc, credit_one_way);
    suite_add_tcase(s, tc);
    tc = tcase_create("regcache");
    tcase_add_test(tc, regcache_hits_and_ranges);
    tcase_add_test(tc, regcache_eviction_and_refs);
    tcase_add_test(tc, regcache_drops_unmapped);
    tcase_add_test(tc, regcache_log_overrun_drops_all);
    tcase_add_test(tc, regcache_without_events_keeps_nothing);
    tcase_add_test(tc, memev_log_reads);
    tcase_add_test(tc, memev_log_threads);
    suite_add_tcase(s, tc);
    tc = tcase_create("hca");
    tcase_add_test(tc, hca_grammar);
    tcase_add_test(tc, device_order_follows_topology);
    tcase_add_test(tc, hca_errors);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
