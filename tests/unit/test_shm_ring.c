/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of the shm transport's single-producer/single-consumer ring (transports/shm/ring.h).
 *
 * (a) single thread: layout, empty/full boundaries, publication visibility, wrap-around many
 *     times (also of the 64-bit counters), every payload size 0..SHM_CELL_PAYLOAD, ordering;
 * (b) stress, producer and consumer in two threads over a ring in ordinary memory;
 * (c) stress, producer and consumer in two processes (fork) over a MAP_SHARED|MAP_ANONYMOUS ring.
 * Stress messages have a sequence number, a length and payload derived from it, and a checksum
 * of the payload in the cell header; the consumer checks all of them (no loss, duplication,
 * reordering or torn payload). Every wait polls (sched_yield, and a short sleep after a few dozen
 * fruitless polls) with a stall deadline and fails instead of hanging. COHORT_RING_STRESS_MSGS
 * overrides the number of messages per stress run (1e6; a twentieth through the 2-cell ring).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/timeutil.h"
#include "transports/shm/ring.h"

#define STALL_NS (30ull * 1000000000ull)   /* a side that moved nothing for this long fails */
#define DEFAULT_STRESS_MSGS 1000000ull   /* per stress run; 4 runs */

/* ---- helpers ----------------------------------------------------------------------------- */

static uint64_t mix64(uint64_t x)   /* splitmix64 finaliser */
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t stress_msgs(void)
{
    const char *s = getenv("COHORT_RING_STRESS_MSGS");
    if (s && *s) {
        unsigned long long v = strtoull(s, NULL, 10);
        if (v > 0) return v;
    }
    return DEFAULT_STRESS_MSGS;
}

/* Message seq: its payload length (mostly small, sometimes any size, both extremes often). */
static uint32_t msg_len(uint64_t seq)
{
    if (seq % 101 == 0) return (uint32_t)SHM_CELL_PAYLOAD;
    if (seq % 103 == 0) return 0;
    uint64_t r = mix64(seq ^ 0x5eed);
    if ((r & 15) == 0) return (uint32_t)((r >> 8) % (SHM_CELL_PAYLOAD + 1));
    return (uint32_t)((r >> 8) % 257);
}

/* Payload generator: 64-bit words of an LCG seeded from seq (last word truncated). */
static uint64_t gen_seed(uint64_t seq) { return mix64(seq * 0x2545f4914f6cdd1dull + 1); }
static uint64_t gen_next(uint64_t x) { return x * 6364136223846793005ull + 1442695040888963407ull; }

static uint64_t sum_step(uint64_t h, uint64_t w) { return (h ^ w) * 0x100000001b3ull + (h >> 29); }

static void fill_payload(unsigned char *p, uint64_t seq, size_t len)
{
    uint64_t x = gen_seed(seq);
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        x = gen_next(x);
        memcpy(p + i, &x, 8);
    }
    if (i < len) {
        x = gen_next(x);
        memcpy(p + i, &x, len - i);
    }
}

/* Checksum of len bytes at p (words, the tail zero-padded). */
static uint64_t checksum(const unsigned char *p, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull ^ len;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = sum_step(h, w);
    }
    if (i < len) {
        uint64_t w = 0;
        memcpy(&w, p + i, len - i);
        h = sum_step(h, w);
    }
    return h;
}

/* The checksum that fill_payload(seq, len) data has, computed without the data. */
static uint64_t expected_checksum(uint64_t seq, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull ^ len;
    uint64_t x = gen_seed(seq);
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        x = gen_next(x);
        h = sum_step(h, x);
    }
    if (i < len) {
        x = gen_next(x);
        uint64_t w = 0;
        memcpy(&w, &x, len - i);   /* little or big endian: same bytes as fill_payload */
        h = sum_step(h, w);
    }
    return h;
}

#define MSG_KIND 0x52494e47u   /* "RING" */

/* Producer: writes message seq into cell c. */
static void put_msg(shm_cell_t *c, uint64_t seq)
{
    uint32_t len = msg_len(seq);
    fill_payload(shm_cell_payload(c), seq, len);
    c->seq = seq;
    c->len = ~seq;
    c->off = 0;
    c->addr = 0;
    c->flen = len;
    c->kind = MSG_KIND;
    c->tag = checksum(shm_cell_payload(c), len);
}

/* Consumer: checks that cell c holds message seq; 0, or -1 with a reason in err. */
static int check_msg(shm_cell_t *c, uint64_t seq, char *err, size_t errlen)
{
    uint32_t flen = c->flen;
    if (c->kind != MSG_KIND || c->seq != seq || c->len != ~seq || flen != msg_len(seq)) {
        snprintf(err, errlen, "expected message %llu (%u bytes), found seq %llu kind %#x "
                 "%u bytes: lost, duplicated, reordered or torn header",
                 (unsigned long long)seq, msg_len(seq), (unsigned long long)c->seq, c->kind,
                 flen);
        return -1;
    }
    uint64_t s = checksum(shm_cell_payload(c), flen);
    if (s != c->tag || s != expected_checksum(seq, flen)) {
        snprintf(err, errlen, "message %llu (%u bytes): payload checksum %#llx, header says "
                 "%#llx, expected %#llx: torn or corrupt payload", (unsigned long long)seq,
                 flen, (unsigned long long)s, (unsigned long long)c->tag,
                 (unsigned long long)expected_checksum(seq, flen));
        return -1;
    }
    return 0;
}

/* A ring of ncells in ordinary memory, garbage-filled then initialised. */
static unsigned char *ring_new(shm_ring_t *r, uint64_t ncells)
{
    size_t bytes = shm_ring_bytes(ncells);
    unsigned char *m = aligned_alloc(4096, bytes);
    ck_assert_ptr_nonnull(m);
    memset(m, 0xa5, bytes);
    shm_ring_attach(r, m, ncells);
    shm_ring_init(r);
    return m;
}

/* ---- (a) single thread ------------------------------------------------------------------- */

START_TEST(test_layout)
{
    ck_assert_uint_eq(offsetof(shm_ring_ctl_t, head), 0);
    ck_assert_uint_eq(offsetof(shm_ring_ctl_t, tail), 64);
    ck_assert_uint_eq(offsetof(shm_ring_ctl_t, rdone), 128);
    ck_assert_uint_eq(sizeof(shm_ring_ctl_t), 192);
    ck_assert_uint_le(sizeof(shm_cell_t), SHM_CELL_HDR);
    ck_assert_uint_eq(SHM_CELL_SIZE, 8192);
    ck_assert_uint_eq(SHM_CELL_PAYLOAD, 8192 - 64);
    ck_assert_uint_eq(shm_ring_bytes(0), 4096);
    ck_assert_uint_eq(shm_ring_bytes(3), 4096 + 3 * 8192);

    shm_ring_t r;
    unsigned char *m = ring_new(&r, 5);
    ck_assert_ptr_eq(r.ctl, (void *)m);
    ck_assert_ptr_eq(r.cells, m + 4096);
    ck_assert_uint_eq(r.ncells, 5);
    ck_assert_uint_eq(atomic_load(&r.ctl->head), 0);
    ck_assert_uint_eq(atomic_load(&r.ctl->tail), 0);
    ck_assert_uint_eq(atomic_load(&r.ctl->rdone), 0);
    for (uint64_t i = 0; i < 25; i++) {
        shm_cell_t *c = shm_ring_cell_at(&r, i);
        ck_assert_ptr_eq(c, (void *)(r.cells + (i % 5) * SHM_CELL_SIZE));
        ck_assert_ptr_eq(shm_cell_payload(c), (unsigned char *)c + 64);
    }
    free(m);
}
END_TEST

START_TEST(test_empty_full)
{
    enum { N = 4 };
    shm_ring_t r;
    unsigned char *m = ring_new(&r, N);
    shm_ring_cursor_t p, c;

    /* empty */
    ck_assert_uint_eq(shm_ring_cons_count(&r), 0);
    ck_assert_uint_eq(shm_ring_prod_space(&r), N);
    shm_ring_cons_begin(&r, &c);
    ck_assert_ptr_null(shm_ring_cons_peek(&r, &c));
    shm_ring_cons_publish(&r, &c);   /* nothing released: no change */
    ck_assert_uint_eq(atomic_load(&r.ctl->tail), 0);

    /* fill: N cells, then full; reserve without commit gives the same cell */
    shm_ring_prod_begin(&r, &p);
    for (uint64_t i = 0; i < N; i++) {
        shm_cell_t *a = shm_ring_prod_reserve(&r, &p);
        ck_assert_ptr_nonnull(a);
        ck_assert_ptr_eq(shm_ring_prod_reserve(&r, &p), a);
        ck_assert_ptr_eq(a, shm_ring_cell_at(&r, i));
        put_msg(a, i);
        shm_ring_prod_commit(&p);
    }
    ck_assert_ptr_null(shm_ring_prod_reserve(&r, &p));
    /* committed but not published: invisible to the consumer */
    ck_assert_uint_eq(atomic_load(&r.ctl->head), 0);
    ck_assert_uint_eq(shm_ring_cons_count(&r), 0);
    ck_assert_ptr_null(shm_ring_cons_peek(&r, &c));
    shm_ring_prod_publish(&r, &p);
    ck_assert_uint_eq(atomic_load(&r.ctl->head), N);
    ck_assert_uint_eq(shm_ring_cons_count(&r), N);
    ck_assert_uint_eq(shm_ring_prod_space(&r), 0);
    shm_ring_prod_begin(&r, &p);
    ck_assert_ptr_null(shm_ring_prod_reserve(&r, &p));
    shm_ring_prod_publish(&r, &p);   /* nothing committed: no change */
    ck_assert_uint_eq(atomic_load(&r.ctl->head), N);

    /* consume two: space only once the consumer publishes */
    char err[256];
    shm_ring_cons_begin(&r, &c);
    for (uint64_t i = 0; i < 2; i++) {
        shm_cell_t *a = shm_ring_cons_peek(&r, &c);
        ck_assert_ptr_nonnull(a);
        ck_assert_ptr_eq(shm_ring_cons_peek(&r, &c), a);   /* peek twice: same cell */
        ck_assert_msg(check_msg(a, i, err, sizeof err) == 0, "%s", err);
        shm_ring_cons_release(&c);
    }
    shm_ring_prod_begin(&r, &p);
    ck_assert_ptr_null(shm_ring_prod_reserve(&r, &p));
    ck_assert_uint_eq(shm_ring_prod_space(&r), 0);
    shm_ring_cons_publish(&r, &c);
    ck_assert_uint_eq(shm_ring_prod_space(&r), 2);
    ck_assert_uint_eq(shm_ring_cons_count(&r), 2);
    /* the producer's stale cursor re-reads tail when it looks full */
    for (uint64_t i = N; i < N + 2; i++) {
        shm_cell_t *a = shm_ring_prod_reserve(&r, &p);
        ck_assert_ptr_nonnull(a);
        ck_assert_ptr_eq(a, shm_ring_cell_at(&r, i - N));   /* wrapped to the freed cells */
        put_msg(a, i);
        shm_ring_prod_commit(&p);
    }
    ck_assert_ptr_null(shm_ring_prod_reserve(&r, &p));
    shm_ring_prod_publish(&r, &p);

    /* drain in order, then empty */
    for (uint64_t i = 2; i < N + 2; i++) {
        shm_cell_t *a = shm_ring_cons_peek(&r, &c);
        ck_assert_ptr_nonnull(a);
        ck_assert_msg(check_msg(a, i, err, sizeof err) == 0, "%s", err);
        shm_ring_cons_release(&c);
    }
    ck_assert_ptr_null(shm_ring_cons_peek(&r, &c));
    shm_ring_cons_publish(&r, &c);
    ck_assert_uint_eq(shm_ring_cons_count(&r), 0);
    ck_assert_uint_eq(shm_ring_prod_space(&r), N);
    ck_assert_uint_eq(atomic_load(&r.ctl->head), N + 2);
    ck_assert_uint_eq(atomic_load(&r.ctl->tail), N + 2);
    ck_assert_uint_eq(atomic_load(&r.ctl->rdone), 0);   /* the ring never touches rdone */
    free(m);
}
END_TEST

START_TEST(test_publish_batches)
{
    /* the consumer sees exactly what was published, in order, batch by batch */
    shm_ring_t r;
    unsigned char *m = ring_new(&r, 8);
    shm_ring_cursor_t p, c;
    char err[256];
    shm_ring_prod_begin(&r, &p);
    shm_ring_cons_begin(&r, &c);
    for (uint64_t i = 0; i < 3; i++) {
        put_msg(shm_ring_prod_reserve(&r, &p), i);
        shm_ring_prod_commit(&p);
    }
    shm_ring_prod_publish(&r, &p);
    for (uint64_t i = 3; i < 5; i++) {
        put_msg(shm_ring_prod_reserve(&r, &p), i);
        shm_ring_prod_commit(&p);
    }
    for (uint64_t i = 0; i < 3; i++) {
        shm_cell_t *a = shm_ring_cons_peek(&r, &c);
        ck_assert_ptr_nonnull(a);
        ck_assert_msg(check_msg(a, i, err, sizeof err) == 0, "%s", err);
        shm_ring_cons_release(&c);
    }
    ck_assert_ptr_null(shm_ring_cons_peek(&r, &c));
    shm_ring_prod_publish(&r, &p);
    for (uint64_t i = 3; i < 5; i++) {
        shm_cell_t *a = shm_ring_cons_peek(&r, &c);
        ck_assert_ptr_nonnull(a);
        ck_assert_msg(check_msg(a, i, err, sizeof err) == 0, "%s", err);
        shm_ring_cons_release(&c);
    }
    ck_assert_ptr_null(shm_ring_cons_peek(&r, &c));
    shm_ring_cons_publish(&r, &c);
    ck_assert_uint_eq(atomic_load(&r.ctl->tail), 5);
    free(m);
}
END_TEST

/* Interleaves random producer and consumer batches on one thread; start = initial head/tail. */
static void wrap_run(uint64_t ncells, uint64_t start, uint64_t msgs, uint64_t seed)
{
    shm_ring_t r;
    unsigned char *m = ring_new(&r, ncells);
    atomic_store(&r.ctl->head, start);
    atomic_store(&r.ctl->tail, start);
    char err[256];
    uint64_t sent = 0, recvd = 0, x = seed;
    while (recvd < msgs) {
        x = mix64(x);
        shm_ring_cursor_t p, c;
        unsigned pb = (unsigned)(x % (2 * ncells + 2)), cb = (unsigned)((x >> 20) % (2 * ncells + 2));
        shm_ring_prod_begin(&r, &p);
        for (unsigned i = 0; i < pb && sent < msgs; i++) {
            shm_cell_t *a = shm_ring_prod_reserve(&r, &p);
            uint64_t inflight = sent - recvd;
            if (!a) {
                ck_assert_uint_eq(inflight, ncells);   /* full exactly when ncells in flight */
                break;
            }
            ck_assert_uint_lt(inflight, ncells);
            put_msg(a, sent++);
            shm_ring_prod_commit(&p);
        }
        shm_ring_prod_publish(&r, &p);
        ck_assert_uint_eq(shm_ring_cons_count(&r), sent - recvd);
        ck_assert_uint_eq(shm_ring_prod_space(&r), ncells - (sent - recvd));
        shm_ring_cons_begin(&r, &c);
        for (unsigned i = 0; i < cb; i++) {
            shm_cell_t *a = shm_ring_cons_peek(&r, &c);
            if (!a) {
                ck_assert_uint_eq(sent, recvd);   /* empty exactly when nothing in flight */
                break;
            }
            ck_assert_msg(check_msg(a, recvd, err, sizeof err) == 0, "%s", err);
            recvd++;
            shm_ring_cons_release(&c);
        }
        shm_ring_cons_publish(&r, &c);
    }
    ck_assert_uint_eq(sent, msgs);
    ck_assert_uint_eq(atomic_load(&r.ctl->head), start + msgs);
    ck_assert_uint_eq(atomic_load(&r.ctl->tail), start + msgs);
    free(m);
}

static const uint64_t wrap_sizes[] = { 1, 2, 3, 5, 8, 63 };

START_TEST(test_wrap_many)
{
    uint64_t n = wrap_sizes[_i];
    wrap_run(n, 0, 5000 + 200 * n, 42 + (uint64_t)_i);   /* wraps >= 80 times */
}
END_TEST

START_TEST(test_counter_overflow)
{
    /* head/tail crossing 2^64 (power-of-two ring: cell indices stay consecutive) */
    wrap_run(4, UINT64_MAX - 37, 400, 7);
    wrap_run(1, UINT64_MAX - 3, 20, 8);
}
END_TEST

START_TEST(test_payload_sizes)
{
    /* every payload size 0..max goes through intact; a full payload stays in its cell */
    enum { N = 3 };
    shm_ring_t r;
    unsigned char *m = ring_new(&r, N);
    static unsigned char expect[SHM_CELL_PAYLOAD], got[SHM_CELL_PAYLOAD];
    shm_ring_cursor_t p, c;
    for (uint32_t len = 0; len <= SHM_CELL_PAYLOAD; len++) {
        shm_ring_prod_begin(&r, &p);
        shm_cell_t *a = shm_ring_prod_reserve(&r, &p);
        ck_assert_ptr_nonnull(a);
        fill_payload(shm_cell_payload(a), len, len);
        a->flen = len;
        a->seq = len;
        a->tag = checksum(shm_cell_payload(a), len);
        shm_ring_prod_commit(&p);
        shm_ring_prod_publish(&r, &p);

        shm_ring_cons_begin(&r, &c);
        shm_cell_t *b = shm_ring_cons_peek(&r, &c);
        ck_assert_ptr_eq(a, b);
        ck_assert_uint_eq(b->flen, len);
        ck_assert_uint_eq(b->seq, len);
        memcpy(got, shm_cell_payload(b), b->flen);
        shm_ring_cons_release(&c);
        shm_ring_cons_publish(&r, &c);
        fill_payload(expect, len, len);
        ck_assert_msg(memcmp(got, expect, len) == 0, "payload of %u bytes differs", len);
        ck_assert_uint_eq(checksum(got, len), expected_checksum(len, len));
    }

    /* a full payload in the last cell ends exactly at the end of the ring */
    memset(r.cells, 0x3c, N * SHM_CELL_SIZE);
    shm_cell_t *last = shm_ring_cell_at(&r, N - 1);
    ck_assert_ptr_eq(shm_cell_payload(last) + SHM_CELL_PAYLOAD, r.cells + N * SHM_CELL_SIZE);
    /* and one in the first cell does not reach the second cell's header */
    shm_cell_t *first = shm_ring_cell_at(&r, 0);
    memset(shm_cell_payload(first), 0xff, SHM_CELL_PAYLOAD);
    unsigned char *h1 = (unsigned char *)shm_ring_cell_at(&r, 1);
    for (size_t i = 0; i < SHM_CELL_HDR; i++) ck_assert_uint_eq(h1[i], 0x3c);
    free(m);
}
END_TEST

/* ---- stress: the two sides, shared by the thread and the process tests ------------------- */

typedef struct side {
    shm_ring_t ring;
    uint64_t msgs;
    uint64_t seed;
    uint64_t deadline;           /* cohort_now_ns() value after which a wait fails: moved on by
                                    STALL_NS whenever the side got further since its last wait,
                                    so a slow run on a loaded machine is not a failure */
    uint64_t done_seen;          /* done at the last wait */
    unsigned fruitless;          /* waits in a row since done last moved */
    _Atomic int *abort;          /* set by a side that fails, so the other stops waiting */
    uint64_t done;               /* messages produced / consumed */
    uint64_t waits;              /* times it found the ring full / empty */
    int rc;
    char err[256];
} side_t;

static int side_fail(side_t *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, sizeof s->err, fmt, ap);
    va_end(ap);
    atomic_store(s->abort, 1);
    s->rc = -1;
    return -1;
}

/* Called when the side could not make progress: yields; fails on abort or past the deadline. */
static int side_wait(side_t *s, const char *what)
{
    s->waits++;
    if (atomic_load_explicit(s->abort, memory_order_relaxed))
        return side_fail(s, "%s: the other side failed after %llu messages", what,
                         (unsigned long long)s->done);
    uint64_t now = cohort_now_ns();
    if (s->done != s->done_seen || !s->deadline) {
        s->done_seen = s->done;
        s->deadline = now + STALL_NS;
        s->fruitless = 0;
    }
    if (now > s->deadline)
        return side_fail(s, "%s: no progress for 30 s, %llu of %llu messages done", what,
                         (unsigned long long)s->done, (unsigned long long)s->msgs);
    /* Yield, and after a few dozen fruitless yields sleep 50 us: with both cores kept busy by
     * other work, a thread that only yields gets the core back after the busy one's whole time
     * slice, while one that wakes from a sleep preempts it (the 2-cell run took over 600 s with
     * two busy loops beside it, yielding only), as core/p2p.c's waits do. */
    if (++s->fruitless % 32 == 0) {
        struct timespec ts = { 0, 50000 };
        nanosleep(&ts, NULL);
    } else {
        sched_yield();
    }
    return 0;
}

static int produce(side_t *s)
{
    uint64_t x = s->seed;
    while (s->done < s->msgs) {
        x = mix64(x);
        unsigned batch = 1 + (unsigned)(x % 8);
        unsigned did = 0;
        shm_ring_cursor_t k;
        shm_ring_prod_begin(&s->ring, &k);
        while (did < batch && s->done < s->msgs) {
            shm_cell_t *c = shm_ring_prod_reserve(&s->ring, &k);
            if (!c) break;
            put_msg(c, s->done);
            shm_ring_prod_commit(&k);
            s->done++;
            did++;
        }
        shm_ring_prod_publish(&s->ring, &k);
        if (!did && side_wait(s, "producer")) return -1;
    }
    return 0;
}

static int consume(side_t *s)
{
    uint64_t x = s->seed ^ 0xc0ffee;
    while (s->done < s->msgs) {
        x = mix64(x);
        unsigned batch = 1 + (unsigned)(x % 8);
        unsigned did = 0;
        shm_ring_cursor_t k;
        shm_ring_cons_begin(&s->ring, &k);
        while (did < batch && s->done < s->msgs) {
            shm_cell_t *c = shm_ring_cons_peek(&s->ring, &k);
            if (!c) break;
            char err[200];
            if (check_msg(c, s->done, err, sizeof err)) {
                shm_ring_cons_publish(&s->ring, &k);
                return side_fail(s, "consumer: %s", err);
            }
            shm_ring_cons_release(&k);
            s->done++;
            did++;
        }
        shm_ring_cons_publish(&s->ring, &k);
        if (!did && side_wait(s, "consumer")) return -1;
    }
    /* nothing extra behind the last message */
    if (shm_ring_cons_count(&s->ring) != 0)
        return side_fail(s, "consumer: %llu cells left after the last message",
                         (unsigned long long)shm_ring_cons_count(&s->ring));
    return 0;
}

/* ---- (b) two threads --------------------------------------------------------------------- */

static void *producer_thread(void *arg) { produce(arg); return NULL; }
static void *consumer_thread(void *arg) { consume(arg); return NULL; }

static const uint64_t stress_sizes[] = { 2, 63 };   /* 2: constant wrap and contention */

START_TEST(test_stress_threads)
{
    uint64_t ncells = stress_sizes[_i];
    /* With 2 cells nearly every message is a hand-off between the threads; with both cores kept
     * busy by other work each hand-off can wait for a scheduler time slice (1.8 ms per message
     * measured with two busy loops beside it: a million took over 600 s). A twentieth still
     * wraps the ring 25000 times. */
    uint64_t msgs = ncells <= 2 ? stress_msgs() / 20 + 1 : stress_msgs();
    shm_ring_t r;
    unsigned char *m = ring_new(&r, ncells);
    _Atomic int abort_flag = 0;
    uint64_t t0 = cohort_now_ns();
    side_t prod = { .ring = r, .msgs = msgs, .seed = 1 + (uint64_t)_i,
                    .abort = &abort_flag };
    side_t cons = prod;
    pthread_t tp, tc;
    ck_assert_int_eq(pthread_create(&tc, NULL, consumer_thread, &cons), 0);
    ck_assert_int_eq(pthread_create(&tp, NULL, producer_thread, &prod), 0);
    pthread_join(tp, NULL);   /* both sides give up after 30 s stuck: joins cannot hang */
    pthread_join(tc, NULL);
    ck_assert_msg(cons.rc == 0, "%s", cons.err);
    ck_assert_msg(prod.rc == 0, "%s", prod.err);
    ck_assert_uint_eq(prod.done, msgs);
    ck_assert_uint_eq(cons.done, msgs);
    ck_assert_uint_eq(atomic_load(&r.ctl->head), msgs);
    ck_assert_uint_eq(atomic_load(&r.ctl->tail), msgs);
    fprintf(stderr, "test_shm_ring: threads, %llu cells: %llu messages in %.2f s "
            "(producer waited %llu times, consumer %llu)\n", (unsigned long long)ncells,
            (unsigned long long)msgs, (double)(cohort_now_ns() - t0) / 1e9,
            (unsigned long long)prod.waits, (unsigned long long)cons.waits);
    free(m);
}
END_TEST

/* ---- (c) two processes ------------------------------------------------------------------- */

typedef struct proc_shared {
    _Atomic int abort;
    int child_rc;
    uint64_t child_done;
    char child_err[256];
} proc_shared_t;

/* _i = 0: the child produces and the parent consumes; _i = 1: the other way round. */
START_TEST(test_stress_processes)
{
    uint64_t ncells = 15;
    uint64_t msgs = stress_msgs();
    size_t bytes = 4096 + shm_ring_bytes(ncells);
    unsigned char *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                            -1, 0);
    ck_assert_ptr_ne(m, MAP_FAILED);
    proc_shared_t *sh = (proc_shared_t *)(void *)m;
    atomic_init(&sh->abort, 0);
    shm_ring_t r;
    shm_ring_attach(&r, m + 4096, ncells);
    shm_ring_init(&r);
    int child_produces = _i == 0;
    uint64_t t0 = cohort_now_ns();
    side_t me = { .ring = r, .msgs = msgs, .seed = 99 + (uint64_t)_i,
                  .abort = &sh->abort };
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        /* child: never returns into Check; dies with the parent */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(3);
        int rc = child_produces ? produce(&me) : consume(&me);
        sh->child_done = me.done;
        memcpy(sh->child_err, me.err, sizeof sh->child_err);
        sh->child_rc = rc;
        _exit(rc ? 1 : 0);
    }
    int rc = child_produces ? consume(&me) : produce(&me);
    /* reap the child, with a deadline; SIGKILL it if it overstays */
    int status = 0, reaped = 0;
    uint64_t kill_at = cohort_now_ns() + STALL_NS + 2000000000ull;
    while (!reaped) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) reaped = 1;
        else if (w < 0 && errno != EINTR) break;
        else if (cohort_now_ns() > kill_at) {
            atomic_store(&sh->abort, 1);
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            reaped = 1;
            status = -1;
        } else {
            struct timespec ts = { 0, 1000000 };
            nanosleep(&ts, NULL);
        }
    }
    char child_err[256];
    memcpy(child_err, sh->child_err, sizeof child_err);
    child_err[sizeof child_err - 1] = 0;
    uint64_t child_done = sh->child_done;
    uint64_t head = atomic_load(&r.ctl->head), tail = atomic_load(&r.ctl->tail);
    munmap(m, bytes);
    ck_assert_msg(rc == 0, "parent (%s): %s", child_produces ? "consumer" : "producer", me.err);
    ck_assert_msg(reaped && status != -1, "child did not exit in time (killed)");
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "child (%s) failed, status %#x: %s", child_produces ? "producer" : "consumer",
                  status, child_err);
    ck_assert_uint_eq(child_done, msgs);
    ck_assert_uint_eq(me.done, msgs);
    ck_assert_uint_eq(head, msgs);
    ck_assert_uint_eq(tail, msgs);
    fprintf(stderr, "test_shm_ring: processes, %llu cells, child %s: %llu messages in %.2f s\n",
            (unsigned long long)ncells, child_produces ? "produces" : "consumes",
            (unsigned long long)msgs, (double)(cohort_now_ns() - t0) / 1e9);
}
END_TEST

static Suite *ring_suite(void)
{
    Suite *s = suite_create("shm_ring");
    TCase *tc = tcase_create("single_thread");
    tcase_add_test(tc, test_layout);
    tcase_add_test(tc, test_empty_full);
    tcase_add_test(tc, test_publish_batches);
    tcase_add_loop_test(tc, test_wrap_many, 0, (int)(sizeof wrap_sizes / sizeof wrap_sizes[0]));
    tcase_add_test(tc, test_counter_overflow);
    tcase_add_test(tc, test_payload_sizes);
    suite_add_tcase(s, tc);

    tc = tcase_create("stress");
    /* the stress loops give up by themselves after 30 s without progress; a moving run on a
     * loaded machine may take minutes, so this is only a backstop */
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_stress_threads, 0,
                        (int)(sizeof stress_sizes / sizeof stress_sizes[0]));
    tcase_add_loop_test(tc, test_stress_processes, 0, 2);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(ring_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
