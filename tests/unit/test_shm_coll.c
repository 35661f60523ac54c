/* Unit tests of the shm transport's node-collective engine (transports/shm/coll.c).
 *
 * N threads of one process play N ranks over one collective area in ordinary memory (rank 0's
 * layout, written before the threads start). Each thread drives its own shm_coll_t through the
 * host table the core would give it (the core's reduction kernels from core/reduce.c) and runs
 * collectives with shm_coll_start + shm_coll_advance, yielding between advances, with a
 * stall deadline (no rank finished a collective for 30 s): a stuck protocol fails instead of
 * hanging, and a slow but moving run on a loaded machine does not fail. Every input is a function of (collective,
 * rank, element), so each rank checks its whole output, element by element, against a
 * reference it computes itself (and that sendbuf and the bytes around every buffer are intact).
 *
 * (1) matrix: every collective (broadcast and reduce with every root) for n = 2, 3, 4, 5, 8, a
 *     small round (shm_coll_round(n, 4096)) and the default one, counts around the round, the
 *     per-block unit and the direct threshold, several rounds, in place and out of place,
 *     int8 / int32 / float32 / float64 with SUM / MAX / AVG;
 * (2) stress: 2000 random collectives (one seed: every rank draws the same sequence) at n = 4
 *     and a 4096-byte round, ranks delayed at random; once more with waiters that sleep
 *     (arm / movable / poll an eventfd, woken through the wake hook): no lost wake-up;
 * (3) tag mismatch: rank 1 starts a collective with another tag (and maybe another count):
 *     every rank gets COHORT_ERR_MISMATCH naming a rank, then start refuses;
 * (4) float32 SUM allreduce of non-integer data: bit-identical on every rank (direct, one
 *     round and many rounds).
 * Integer-valued float data make sums exact, so the reduction order does not matter there.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "core/reduce.h"
#include "core/timeutil.h"
#include "transports/shm/coll.h"

#define MAXN 8
#define STALL_NS (30ull * 1000000000ull)      /* no collective finished anywhere for this long */
#define DIRECT_BYTES ((size_t)16 << 10)       /* coll.c's DIRECT_MAX */
#define GUARD 64                              /* canary bytes before and after every buffer */
#define GUARD_BYTE 0x5a
#define GARBAGE_BYTE 0xa5
#define STRESS_STEPS 2000
#define SLEEPY_STEPS 600

/* ---- helpers ----------------------------------------------------------------------------- */

static uint64_t mix64(uint64_t x)   /* splitmix64 finaliser */
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t rng_next(uint64_t *s)
{
    *s += 0x9e3779b97f4a7c15ull;
    return mix64(*s);
}

static size_t esz(cohort_dtype_t dt)
{
    switch (dt) {
    case COHORT_INT8: return 1;
    case COHORT_INT32: case COHORT_FLOAT32: return 4;
    case COHORT_FLOAT64: return 8;
    default: return 0;
    }
}

static const char *coll_name(int c)
{
    static const char *names[] = { "allreduce", "broadcast", "reduce", "allgather",
                                   "reduce_scatter", "alltoall", "barrier" };
    return c >= 0 && c <= COHORT_TP_BARRIER ? names[c] : "?";
}

static const char *dt_name(cohort_dtype_t dt)
{
    switch (dt) {
    case COHORT_INT8: return "int8";
    case COHORT_INT32: return "int32";
    case COHORT_FLOAT32: return "float32";
    case COHORT_FLOAT64: return "float64";
    default: return "?";
    }
}

static const char *op_name(cohort_op_t op)
{
    return op == COHORT_SUM ? "sum" : op == COHORT_MAX ? "max" : op == COHORT_AVG ? "avg" : "?";
}

static const cohort_dtype_t DTYPES[4] = { COHORT_FLOAT32, COHORT_INT32, COHORT_FLOAT64,
                                          COHORT_INT8 };
static const cohort_op_t OPS[3] = { COHORT_SUM, COHORT_MAX, COHORT_AVG };

/* ---- host table and hooks ------------------------------------------------------------------ */

static _Thread_local char tl_msg[1024];
static _Thread_local unsigned tl_nerr;

static cohort_status_t host_error(cohort_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void host_log(int level, const char *subsys, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static cohort_status_t host_error(cohort_status_t st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tl_msg, sizeof tl_msg, fmt, ap);
    va_end(ap);
    tl_nerr++;
    return st;
}

static void host_log(int level, const char *subsys, const char *fmt, ...)
{
    (void)level;
    (void)subsys;
    (void)fmt;
}

static const cohort_host_v1_t HOST = {
    .size = sizeof(cohort_host_v1_t),
    .abi_version = COHORT_PLUGIN_ABI_VERSION,
    .log = host_log,
    .error = host_error,
    .reduce = cohort_reduce_local,
    .reduce3 = cohort_reduce_local3,
    .reduce_finish = cohort_reduce_finish,
};

/* ---- the world: one area, n ranks ---------------------------------------------------------- */

enum { MODE_MATRIX, MODE_STRESS, MODE_MISMATCH, MODE_BITID };

typedef struct rank_out {
    int failed;
    char err[1536];
    /* mismatch case */
    cohort_status_t st_coll, st_after;
    char msg_coll[1024], msg_after[1024];
    int active_after;
    /* bit-identity case: the outputs, one after the other */
    unsigned char *keep;
    size_t keep_len, keep_cap;
    unsigned long long colls, advances, sleeps;
} rank_out_t;

typedef struct world {
    int n;
    size_t round;
    void *area;
    size_t area_len;
    int mode, variant, sleepy;
    uint64_t salt;
    _Atomic uint64_t progress_ns;              /* last time any rank finished a collective */
    _Atomic int abort;
    _Atomic unsigned long arrivals;            /* barrier entries, all ranks */
    _Atomic unsigned long long wakes, peer_checks;
    int efd[MAXN];                             /* sleepy: one eventfd per rank */
    rank_out_t out[MAXN];
} world_t;

typedef struct rank_ctx {
    world_t *w;
    int rank;
    shm_coll_t *co;
    uint64_t seq;                /* collectives started, as the core's comm->seq */
    unsigned long barriers;
    uint64_t delay_rng;          /* per rank: random delays */
} rank_ctx_t;

typedef struct hook_ep {
    world_t *w;
    int rank;
} hook_ep_t;

static cohort_status_t hook_peer_check(void *ep, int peer, int report)
{
    hook_ep_t *h = ep;
    (void)peer;
    (void)report;
    atomic_fetch_add_explicit(&h->w->peer_checks, 1, memory_order_relaxed);
    return COHORT_SUCCESS;
}

static void hook_wake(void *ep, int peer)
{
    hook_ep_t *h = ep;
    atomic_fetch_add_explicit(&h->w->wakes, 1, memory_order_relaxed);
    if (h->w->sleepy && peer >= 0 && peer < h->w->n) {
        uint64_t one = 1;
        ssize_t r = write(h->w->efd[peer], &one, sizeof one);
        (void)r;
    }
}

static int rfail(rank_ctx_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int rfail(rank_ctx_t *c, const char *fmt, ...)
{
    rank_out_t *o = &c->w->out[c->rank];
    if (!o->failed) {
        int k = snprintf(o->err, sizeof o->err, "rank %d: ", c->rank);
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(o->err + k, sizeof o->err - (size_t)k, fmt, ap);
        va_end(ap);
        o->failed = 1;
    }
    atomic_store(&c->w->abort, 1);
    return -1;
}

/* ---- driving one collective ---------------------------------------------------------------- */

#define DRIVE_STOPPED 100   /* abort or deadline: the rank failed already */

static void drain_efd(int fd)
{
    uint64_t v;
    while (read(fd, &v, sizeof v) == (ssize_t)sizeof v) {}
}

/* Sleepy wait: arm, fence, re-check, poll the eventfd. 0, or -1 after a lost wake-up. */
static int sleep_wait(rank_ctx_t *c, const char *what)
{
    world_t *w = c->w;
    int fd = w->efd[c->rank];
    drain_efd(fd);
    shm_coll_arm(c->co);
    atomic_thread_fence(memory_order_seq_cst);
    if (shm_coll_movable(c->co)) {
        shm_coll_disarm(c->co);
        return 0;
    }
    w->out[c->rank].sleeps++;
    struct pollfd p = { fd, POLLIN, 0 };
    int r = poll(&p, 1, 2000);
    if (r == 0 && shm_coll_movable(c->co)) {
        /* it could move but nobody woke us: give a publisher caught between its store and its
         * wake a long grace period before calling it lost */
        r = poll(&p, 1, 1000);
        if (r == 0 && shm_coll_movable(c->co)) {
            shm_coll_disarm(c->co);
            return rfail(c, "%s: lost wake-up: the collective could advance but the wake hook "
                         "was not called for 3 s after this rank armed", what);
        }
    }
    shm_coll_disarm(c->co);
    drain_efd(fd);
    return 0;
}

/* Starts and runs one collective to its end. Its status, or DRIVE_STOPPED. */
static cohort_status_t drive(rank_ctx_t *c, const cohort_tp_coll_args_t *a, const char *what)
{
    world_t *w = c->w;
    rank_out_t *o = &w->out[c->rank];
    cohort_status_t st = shm_coll_start(c->co, a);
    if (st) return st;
    if (!shm_coll_active(c->co)) {
        rfail(c, "%s: shm_coll_active is 0 right after a successful start", what);
        return DRIVE_STOPPED;
    }
    unsigned idle = 0;
    for (;;) {
        int moved = -7, waiting_on = -7;
        st = shm_coll_advance(c->co, &moved, &waiting_on);
        o->advances++;
        if (moved != 0 && moved != 1) {
            rfail(c, "%s: advance set *moved to %d", what, moved);
            return DRIVE_STOPPED;
        }
        if (st != COHORT_IN_PROGRESS) {
            if (st == COHORT_SUCCESS && shm_coll_active(c->co)) {
                rfail(c, "%s: advance returned success but the collective is still active",
                      what);
                return DRIVE_STOPPED;
            }
            if (st == COHORT_SUCCESS) atomic_store(&w->progress_ns, cohort_now_ns());
            return st;
        }
        if (waiting_on < 0 || waiting_on >= w->n || waiting_on == c->rank) {
            rfail(c, "%s: in progress, waiting on rank %d (n = %d)", what, waiting_on, w->n);
            return DRIVE_STOPPED;
        }
        if (atomic_load_explicit(&w->abort, memory_order_relaxed)) {
            shm_coll_cancel(c->co);
            rfail(c, "%s: stopped: another rank failed (this one was waiting on rank %d)", what,
                  waiting_on);
            return DRIVE_STOPPED;
        }
        if (cohort_now_ns() > atomic_load(&w->progress_ns) + STALL_NS) {
            shm_coll_cancel(c->co);
            rfail(c, "%s: no rank finished a collective for 30 s, still waiting on rank %d: "
                  "a hang", what, waiting_on);
            return DRIVE_STOPPED;
        }
        if (moved) idle = 0;
        else idle++;
        if (w->sleepy && idle >= 4) {
            idle = 0;
            if (sleep_wait(c, what)) return DRIVE_STOPPED;
        } else {
            sched_yield();
        }
    }
}

/* ---- collectives: inputs, references, checks ----------------------------------------------- */

typedef struct spec {
    int coll;
    size_t count;
    cohort_dtype_t dt;
    cohort_op_t op;
    int root;
    int inplace;
    int nullrecv;                /* reduce off the root: recvbuf NULL */
    int nonint;                  /* float data with fractions */
} spec_t;

/* Rank j's send element i of collective s, as a 64-bit hash. */
static inline uint64_t hv(uint64_t s, int j, size_t i)
{
    return mix64(s ^ ((uint64_t)(unsigned)j << 48) ^ ((uint64_t)i * 0xd6e8feb86659fd93ull));
}

/* Element values, as their bit patterns in the low bytes of a uint64_t (loaded and stored with
 * fixed-size copies: no library call per element, which matters under AddressSanitizer). */
static inline float gen_f32(int nonint, uint64_t h)
{
    return nonint ? (float)((double)(h >> 11) * 0x1p-53 * 2000.0 - 1000.0)
                  : (float)((int64_t)(h % 2001) - 1000);
}

static inline double gen_f64(uint64_t h) { return (double)((int64_t)(h % 2000001) - 1000000); }

static inline uint64_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline uint64_t f64_bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, 8);
    return u;
}

static inline uint64_t gen(const spec_t *sp, uint64_t s, int j, size_t i)
{
    uint64_t h = hv(s, j, i);
    switch (sp->dt) {
    case COHORT_INT8: return h & 0xff;
    case COHORT_INT32: return h & 0xffffffffu;
    case COHORT_FLOAT32: return f32_bits(gen_f32(sp->nonint, h));
    case COHORT_FLOAT64: return f64_bits(gen_f64(h));
    default: return 0;
    }
}

static inline uint64_t load_bits(const unsigned char *p, size_t es)
{
    switch (es) {
    case 1: return *p;
    case 4: { uint32_t v; memcpy(&v, p, 4); return v; }
    default: { uint64_t v; memcpy(&v, p, 8); return v; }
    }
}

static inline void store_bits(unsigned char *p, size_t es, uint64_t b)
{
    switch (es) {
    case 1: *p = (unsigned char)b; break;
    case 4: { uint32_t v = (uint32_t)b; memcpy(p, &v, 4); break; }
    default: memcpy(p, &b, 8); break;
    }
}

/* The reduction over ranks 0..n-1 of element i (wrapping integer sums, truncating integer
 * average, exact float sums for integer data). */
static uint64_t ref_reduce(const spec_t *sp, uint64_t s, size_t i, int n)
{
    switch (sp->dt) {
    case COHORT_INT8: {
        uint8_t sum = 0;
        int8_t mx = INT8_MIN;
        for (int j = 0; j < n; j++) {
            int8_t v = (int8_t)(uint8_t)hv(s, j, i);
            sum = (uint8_t)(sum + (uint8_t)v);
            if (v > mx) mx = v;
        }
        int8_t r = sp->op == COHORT_MAX ? mx : (int8_t)sum;
        if (sp->op == COHORT_AVG && n > 1) r = (int8_t)((int64_t)r / n);
        return (uint8_t)r;
    }
    case COHORT_INT32: {
        uint32_t sum = 0;
        int32_t mx = INT32_MIN;
        for (int j = 0; j < n; j++) {
            int32_t v = (int32_t)(uint32_t)hv(s, j, i);
            sum += (uint32_t)v;
            if (v > mx) mx = v;
        }
        int32_t r = sp->op == COHORT_MAX ? mx : (int32_t)sum;
        if (sp->op == COHORT_AVG && n > 1) r = (int32_t)((int64_t)r / n);
        return (uint32_t)r;
    }
    case COHORT_FLOAT32: {
        float sum = 0, mx = -1e30f;
        for (int j = 0; j < n; j++) {
            float v = gen_f32(sp->nonint, hv(s, j, i));
            sum = j ? sum + v : v;
            if (v > mx) mx = v;
        }
        float r = sp->op == COHORT_MAX ? mx : sum;
        if (sp->op == COHORT_AVG && n > 1) r = r / (float)n;
        return f32_bits(r);
    }
    case COHORT_FLOAT64: {
        double sum = 0, mx = -1e300;
        for (int j = 0; j < n; j++) {
            double v = gen_f64(hv(s, j, i));
            sum = j ? sum + v : v;
            if (v > mx) mx = v;
        }
        double r = sp->op == COHORT_MAX ? mx : sum;
        if (sp->op == COHORT_AVG && n > 1) r = r / (double)n;
        return f64_bits(r);
    }
    default: return 0;
    }
}

static void fmt_val(char *b, size_t len, cohort_dtype_t dt, uint64_t bits)
{
    switch (dt) {
    case COHORT_INT8: snprintf(b, len, "%d", (int)(int8_t)(uint8_t)bits); break;
    case COHORT_INT32: snprintf(b, len, "%d", (int)(int32_t)(uint32_t)bits); break;
    case COHORT_FLOAT32: {
        uint32_t u = (uint32_t)bits;
        float f;
        memcpy(&f, &u, 4);
        snprintf(b, len, "%.9g (%a)", (double)f, (double)f);
        break;
    }
    case COHORT_FLOAT64: {
        double d;
        memcpy(&d, &bits, 8);
        snprintf(b, len, "%.17g", d);
        break;
    }
    default: snprintf(b, len, "?"); break;
    }
}

static void describe(char *b, size_t len, const spec_t *sp, int n, size_t round, uint64_t seq)
{
    snprintf(b, len, "collective #%llu %s(count %zu, %s, %s, root %d, %s%s%s) n=%d round=%zu",
             (unsigned long long)seq, coll_name(sp->coll), sp->count, dt_name(sp->dt),
             op_name(sp->op), sp->root, sp->inplace ? "in place" : "out of place",
             sp->coll == COHORT_TP_REDUCE && sp->nullrecv ? ", recvbuf NULL off the root" : "", sp->nonint ? ", fractional data" : "", n,
             round);
}

/* A buffer with GUARD canary bytes either side. */
typedef struct gbuf {
    unsigned char *base, *p;
    size_t len;
} gbuf_t;

static int galloc(gbuf_t *g, size_t len)
{
    size_t total = (len + 2 * GUARD + 63) / 64 * 64;
    g->base = aligned_alloc(64, total);
    if (!g->base) return -1;
    g->p = g->base + GUARD;
    g->len = len;
    memset(g->base, GUARD_BYTE, GUARD);
    memset(g->p, GARBAGE_BYTE, len);
    memset(g->p + len, GUARD_BYTE, total - GUARD - len);
    return 0;
}

static int gcheck(const gbuf_t *g)
{
    if (!g->base) return 0;
    for (size_t i = 0; i < GUARD; i++)
        if (g->base[i] != GUARD_BYTE || g->p[g->len + i] != GUARD_BYTE) return -1;
    return 0;
}

static void gfree(gbuf_t *g)
{
    free(g->base);
    g->base = g->p = NULL;
}

static uint32_t sig32(const spec_t *sp)
{
    uint64_t x = mix64(((uint64_t)(unsigned)sp->coll << 56) ^ ((uint64_t)sp->dt << 48) ^
                       ((uint64_t)sp->op << 40) ^ ((uint64_t)(unsigned)sp->root << 32) ^
                       (uint64_t)sp->count);
    return (uint32_t)x;
}

/* What rank r must find at receive element k. */
static uint64_t expect_at(const spec_t *sp, uint64_t s, int r, int n, size_t k)
{
    size_t cnt = sp->count;
    switch (sp->coll) {
    case COHORT_TP_ALLREDUCE: case COHORT_TP_REDUCE: return ref_reduce(sp, s, k, n);
    case COHORT_TP_BROADCAST: return gen(sp, s, sp->root, k);
    case COHORT_TP_ALLGATHER: return gen(sp, s, (int)(k / cnt), k % cnt);
    case COHORT_TP_REDUCE_SCATTER: return ref_reduce(sp, s, (size_t)r * cnt + k, n);
    case COHORT_TP_ALLTOALL: return gen(sp, s, (int)(k / cnt), (size_t)r * cnt + k % cnt);
    default: return 0;
    }
}

/* Runs collective sp (the same on every rank) as this rank and checks everything. 0 or -1. */
static int run_spec(rank_ctx_t *c, const spec_t *sp, uint64_t tag_xor)
{
    world_t *w = c->w;
    const int n = w->n, r = c->rank;
    const uint64_t seq = ++c->seq;
    const uint64_t s = mix64(w->salt ^ seq);
    char what[256];
    describe(what, sizeof what, sp, n, w->round, seq);

    cohort_tp_coll_args_t a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.coll = sp->coll;
    a.count = sp->count;
    a.dtype = sp->dt;
    a.op = sp->op;
    a.root = sp->root;
    a.tag = ((seq << 32) | sig32(sp)) ^ tag_xor;

    if (sp->coll == COHORT_TP_BARRIER) {
        a.count = 0;
        atomic_fetch_add(&w->arrivals, 1);
        tl_nerr = 0;
        cohort_status_t st = drive(c, &a, what);
        if (st == DRIVE_STOPPED) return -1;
        if (st) return rfail(c, "%s: status %d: %s", what, (int)st, tl_msg);
        unsigned long b = ++c->barriers;
        unsigned long got = atomic_load(&w->arrivals);
        if (got < (unsigned long)n * b || got >= (unsigned long)n * (b + 1))
            return rfail(c, "%s: barrier #%lu completed with %lu entries counted, expected "
                         "%lu to %lu", what, b, got, (unsigned long)n * b,
                         (unsigned long)n * (b + 1) - 1);
        w->out[r].colls++;
        return 0;
    }

    const size_t es = esz(sp->dt), cnt = sp->count;
    const int blocked = sp->coll == COHORT_TP_REDUCE_SCATTER || sp->coll == COHORT_TP_ALLTOALL;
    const size_t send_elems = blocked ? (size_t)n * cnt : cnt;
    size_t recv_elems;
    switch (sp->coll) {
    case COHORT_TP_ALLGATHER: case COHORT_TP_ALLTOALL: recv_elems = (size_t)n * cnt; break;
    default: recv_elems = cnt; break;
    }
    const int is_root = r == sp->root;
    const int has_recv = sp->coll != COHORT_TP_REDUCE || is_root || !sp->nullrecv;

    /* buffers: one allocation in place, else two; sendp/recvp point into them */
    gbuf_t gs = { 0 }, gr = { 0 };
    unsigned char *sendp = NULL, *recvp = NULL;
    int oom = 0;
    int inplace = sp->inplace || sp->coll == COHORT_TP_BROADCAST;
    if (sp->coll == COHORT_TP_REDUCE && !is_root) inplace = 0;
    if (inplace) {
        switch (sp->coll) {
        case COHORT_TP_ALLGATHER:
            oom = galloc(&gr, recv_elems * es);
            recvp = gr.p;
            sendp = gr.p + (size_t)r * cnt * es;
            break;
        case COHORT_TP_REDUCE_SCATTER:
            oom = galloc(&gs, send_elems * es);
            sendp = gs.p;
            recvp = gs.p + (size_t)r * cnt * es;
            break;
        default:
            oom = galloc(&gr, recv_elems * es);
            sendp = recvp = gr.p;
            break;
        }
    } else {
        oom = galloc(&gs, send_elems * es);
        sendp = gs.p;
        if (has_recv) {
            oom |= galloc(&gr, recv_elems * es);
            recvp = gr.p;
        }
    }
    if (oom) {
        gfree(&gs);
        gfree(&gr);
        return rfail(c, "%s: out of memory", what);
    }
    /* inputs (broadcast: only the root has one) */
    if (sp->coll != COHORT_TP_BROADCAST || is_root)
        for (size_t i = 0; i < send_elems; i++) {
            store_bits(sendp + i * es, es, gen(sp, s, r, i));
        }
    a.sendbuf = sendp;
    a.recvbuf = recvp;

    tl_nerr = 0;
    cohort_status_t st = drive(c, &a, what);
    int rc = 0;
    if (st == DRIVE_STOPPED) {
        rc = -1;
    } else if (st) {
        rc = rfail(c, "%s: status %d: %s", what, (int)st, tl_msg);
    } else if (tl_nerr) {
        rc = rfail(c, "%s: succeeded but called host->error: %s", what, tl_msg);
    } else if (gcheck(&gs) || gcheck(&gr)) {
        rc = rfail(c, "%s: bytes around a buffer were overwritten", what);
    } else {
        /* the output */
        int check = sp->coll != COHORT_TP_REDUCE || is_root;
        for (size_t k = 0; check && k < recv_elems; k++) {
            uint64_t e = expect_at(sp, s, r, n, k), g = load_bits(recvp + k * es, es);
            if (g != e) {
                char g1[64], g2[64];
                fmt_val(g1, sizeof g1, sp->dt, g);
                fmt_val(g2, sizeof g2, sp->dt, e);
                rc = rfail(c, "%s: recvbuf element %zu of %zu is %s, expected %s", what, k,
                           recv_elems, g1, g2);
                break;
            }
        }
        /* sendbuf untouched (out of place) */
        if (!rc && !inplace)
            for (size_t i = 0; i < send_elems; i++) {
                if (load_bits(sendp + i * es, es) != gen(sp, s, r, i)) {
                    rc = rfail(c, "%s: sendbuf element %zu was modified", what, i);
                    break;
                }
            }
        if (!rc && sp->coll == COHORT_TP_REDUCE && !is_root && recvp)
            for (size_t k = 0; k < recv_elems * es; k++)
                if (recvp[k] != GARBAGE_BYTE) {
                    rc = rfail(c, "%s: recvbuf off the root was written (byte %zu)", what, k);
                    break;
                }
        if (!rc && w->mode == MODE_BITID) {
            rank_out_t *o = &w->out[r];
            size_t add = recv_elems * es;
            if (o->keep_len + add > o->keep_cap) {
                size_t cap = (o->keep_len + add) * 2;
                unsigned char *p = realloc(o->keep, cap);
                if (!p) rc = rfail(c, "%s: out of memory", what);
                else {
                    o->keep = p;
                    o->keep_cap = cap;
                }
            }
            if (!rc) {
                memcpy(o->keep + o->keep_len, recvp, add);
                o->keep_len += add;
            }
        }
    }
    gfree(&gs);
    gfree(&gr);
    if (!rc) w->out[r].colls++;
    return rc;
}

/* ---- the scripts (every rank runs the same) ------------------------------------------------ */

static int is_blocked(int coll)
{
    return coll == COHORT_TP_REDUCE_SCATTER || coll == COHORT_TP_ALLTOALL;
}

/* Count template t (0..NCOUNTS-1) for a collective, in elements. */
#define NCOUNTS 14
static size_t matrix_count(int t, int coll, size_t es, size_t round, int n)
{
    size_t unit = is_blocked(coll) ? round / (size_t)n / 64 * 64 : round;
    size_t big = is_blocked(coll) ? 20011 : 100003;
    size_t c;
    switch (t) {
    case 0: c = 1; break;
    case 1: c = 2; break;
    case 2: c = (size_t)n + 1; break;
    case 3: c = 61; break;
    case 4: c = unit / es - 1; break;
    case 5: c = unit / es; break;
    case 6: c = unit / es + 1; break;
    case 7: c = DIRECT_BYTES / es - 1; break;
    case 8: c = DIRECT_BYTES / es; break;
    case 9: c = DIRECT_BYTES / es + 1; break;
    case 10: c = 3 * unit / es + 5; break;
    case 11: c = big; break;
    case 12: c = 7 * (size_t)n - 1; break;
    default: c = (2 * unit + 64 * (size_t)n + 24) / es + 1; break;
    }
    size_t cap = is_blocked(coll) ? 65536 : 300000;   /* keeps the run time down */
    if (c > cap) c = cap;
    return c ? c : 1;
}

static int script_matrix(rank_ctx_t *c)
{
    const int n = c->w->n;
    static const int kinds[] = { COHORT_TP_ALLREDUCE, COHORT_TP_BROADCAST, COHORT_TP_REDUCE,
                                 COHORT_TP_ALLGATHER, COHORT_TP_REDUCE_SCATTER,
                                 COHORT_TP_ALLTOALL };
    spec_t b = { .coll = COHORT_TP_BARRIER };
    if (run_spec(c, &b, 0)) return -1;
    for (int k = 0; k < (int)(sizeof kinds / sizeof kinds[0]); k++) {
        for (int t = 0; t < NCOUNTS; t++) {
            int combo = (t * 5 + k) % 12;   /* every dtype x op over the templates */
            spec_t sp = { .coll = kinds[k], .dt = DTYPES[combo % 4], .op = OPS[combo / 4],
                          .root = (t + k) % n, .inplace = (t + k) & 1,
                          .nullrecv = (t / 2) & 1 };
            sp.count = matrix_count(t, sp.coll, esz(sp.dt), c->w->round, n);
            if (run_spec(c, &sp, 0)) return -1;
        }
        if (run_spec(c, &b, 0)) return -1;
    }
    /* broadcast and reduce from every root, a count of several rounds */
    for (int root = 0; root < n; root++) {
        spec_t sp = { .coll = COHORT_TP_BROADCAST, .dt = DTYPES[root % 4], .root = root,
                      .inplace = 1 };
        sp.count = 2 * c->w->round / esz(sp.dt) + 3;
        if (run_spec(c, &sp, 0)) return -1;
        sp.coll = COHORT_TP_REDUCE;
        sp.op = OPS[root % 3];
        sp.inplace = root & 1;
        sp.nullrecv = root & 2;
        if (run_spec(c, &sp, 0)) return -1;
    }
    return 0;
}

/* Random collective of the stress sequence; rng is the same on every rank. */
static spec_t stress_spec(uint64_t *rng, int n)
{
    spec_t sp;
    memset(&sp, 0, sizeof sp);
    uint64_t x = rng_next(rng);
    sp.coll = (int)(x % 13);
    if (sp.coll > COHORT_TP_BARRIER) sp.coll = COHORT_TP_ALLREDUCE;   /* allreduce the most */
    x = rng_next(rng);
    sp.dt = DTYPES[x % 4];
    sp.op = OPS[(x >> 8) % 3];
    sp.root = (int)((x >> 16) % (unsigned)n);
    sp.inplace = (int)((x >> 24) & 1);
    sp.nullrecv = (int)((x >> 25) & 1);
    x = rng_next(rng);
    unsigned p = (unsigned)(x % 100);
    size_t lim = p < 50 ? 64 : p < 80 ? 4096 : p < 95 ? 20000 : 100003;
    if (is_blocked(sp.coll) || sp.coll == COHORT_TP_ALLGATHER) lim = lim > 5000 ? 5000 : lim;
    sp.count = 1 + (size_t)((x >> 16) % lim);
    return sp;
}

static int script_stress(rank_ctx_t *c)
{
    uint64_t rng = 0x5eed5eed0001ull;   /* shared: every rank draws the same collectives */
    int steps = c->w->sleepy ? SLEEPY_STEPS : STRESS_STEPS;
    for (int i = 0; i < steps; i++) {
        spec_t sp = stress_spec(&rng, c->w->n);
        /* per rank: sometimes arrive late */
        uint64_t d = rng_next(&c->delay_rng);
        if ((d & 7) == 0)
            for (unsigned y = 0; y < (unsigned)(d >> 8) % 16; y++) sched_yield();
        if (run_spec(c, &sp, 0)) return -1;
    }
    return 0;
}

static int script_bitid(rank_ctx_t *c)
{
    static const size_t counts[] = { 1000, 4095, 4096, 4097, 100003 };
    for (int t = 0; t < (int)(sizeof counts / sizeof counts[0]); t++)
        for (int inplace = 0; inplace < 2; inplace++) {
            spec_t sp = { .coll = COHORT_TP_ALLREDUCE, .count = counts[t],
                          .dt = COHORT_FLOAT32, .op = COHORT_SUM, .inplace = inplace,
                          .nonint = 1 };
            /* no exact reference: the ranks are compared with each other afterwards */
            const int n = c->w->n;
            const uint64_t seq = ++c->seq;
            const uint64_t s = mix64(c->w->salt ^ seq);
            char what[256];
            describe(what, sizeof what, &sp, n, c->w->round, seq);
            gbuf_t gs = { 0 }, gr = { 0 };
            if (galloc(&gr, sp.count * 4) || (!inplace && galloc(&gs, sp.count * 4))) {
                gfree(&gr);
                return rfail(c, "%s: out of memory", what);
            }
            unsigned char *sendp = inplace ? gr.p : gs.p;
            for (size_t i = 0; i < sp.count; i++) {
                store_bits(sendp + i * 4, 4, gen(&sp, s, c->rank, i));
            }
            cohort_tp_coll_args_t a = { .size = sizeof a, .coll = sp.coll, .sendbuf = sendp,
                                        .recvbuf = gr.p, .count = sp.count, .dtype = sp.dt,
                                        .op = sp.op, .tag = (seq << 32) | sig32(&sp) };
            tl_nerr = 0;
            cohort_status_t st = drive(c, &a, what);
            int rc = 0;
            if (st == DRIVE_STOPPED) rc = -1;
            else if (st) rc = rfail(c, "%s: status %d: %s", what, (int)st, tl_msg);
            else if (gcheck(&gs) || gcheck(&gr))
                rc = rfail(c, "%s: bytes around a buffer were overwritten", what);
            /* close to the sum in double (catches a missing or doubled contribution) */
            for (size_t i = 0; !rc && i < sp.count; i++) {
                double ref = 0;
                for (int j = 0; j < n; j++) ref += (double)gen_f32(1, hv(s, j, i));
                float got;
                memcpy(&got, gr.p + i * 4, 4);
                double err = (double)got - ref;
                if (err < 0) err = -err;
                if (!(err <= 1e-3 * (double)n))
                    rc = rfail(c, "%s: element %zu is %.9g, the sum is %.9g", what, i,
                               (double)got, ref);
            }
            if (!rc) {
                rank_out_t *o = &c->w->out[c->rank];
                size_t add = sp.count * 4;
                unsigned char *p = realloc(o->keep, o->keep_len + add);
                if (!p) rc = rfail(c, "%s: out of memory", what);
                else {
                    o->keep = p;
                    memcpy(o->keep + o->keep_len, gr.p, add);
                    o->keep_len += add;
                    o->colls++;
                }
            }
            gfree(&gs);
            gfree(&gr);
            if (rc) return rc;
        }
    return 0;
}

/* variant: bit 0: mismatch after 6 good collectives (not the first steps); bit 1: rank 1 also
 * asks for another count (many rounds where the others have one). */
static int script_mismatch(rank_ctx_t *c)
{
    world_t *w = c->w;
    int pre = (w->variant & 1) ? 6 : 0;
    for (int i = 0; i < pre; i++) {
        spec_t sp = { .coll = i % 2 ? COHORT_TP_ALLREDUCE : COHORT_TP_ALLGATHER,
                      .count = 100 + (size_t)i, .dt = COHORT_INT32, .op = COHORT_SUM };
        if (run_spec(c, &sp, 0)) return -1;
    }
    spec_t sp = { .coll = COHORT_TP_ALLREDUCE, .count = 10, .dt = COHORT_FLOAT32,
                  .op = COHORT_SUM };
    if (c->rank == 1 && (w->variant & 2)) sp.count = 100003;
    const uint64_t seq = ++c->seq;
    char what[256];
    describe(what, sizeof what, &sp, w->n, w->round, seq);
    gbuf_t gs = { 0 }, gr = { 0 };
    if (galloc(&gs, sp.count * 4) || galloc(&gr, sp.count * 4)) {
        gfree(&gs);
        return rfail(c, "out of memory");
    }
    memset(gs.p, 0, sp.count * 4);
    cohort_tp_coll_args_t a = { .size = sizeof a, .coll = sp.coll, .sendbuf = gs.p,
                                .recvbuf = gr.p, .count = sp.count, .dtype = sp.dt,
                                .op = sp.op, .tag = (seq << 32) | sig32(&sp) };
    if (c->rank == 1) a.tag ^= 0x40;   /* another signature, the same sequence number */
    rank_out_t *o = &w->out[c->rank];
    tl_msg[0] = 0;
    cohort_status_t st = drive(c, &a, what);
    gfree(&gs);
    gfree(&gr);
    if (st == DRIVE_STOPPED) return -1;
    o->st_coll = st;
    snprintf(o->msg_coll, sizeof o->msg_coll, "%s", tl_msg);
    /* the endpoint is broken now */
    spec_t b = { .coll = COHORT_TP_BARRIER };
    cohort_tp_coll_args_t ab = { .size = sizeof ab, .coll = b.coll,
                                 .tag = ((seq + 1) << 32) | sig32(&b) };
    tl_msg[0] = 0;
    st = shm_coll_start(c->co, &ab);
    o->st_after = st;
    snprintf(o->msg_after, sizeof o->msg_after, "%s", tl_msg);
    o->active_after = shm_coll_active(c->co);
    if (st == COHORT_SUCCESS) shm_coll_cancel(c->co);   /* do not leave it running */
    return 0;
}

static void *rank_main(void *arg)
{
    rank_ctx_t *c = arg;
    world_t *w = c->w;
    size_t round = 0;
    if (shm_coll_area_check(w->area, w->area_len, w->n, &round) || round != w->round) {
        rfail(c, "shm_coll_area_check refused the area (round %zu, expected %zu)", round,
              w->round);
        return NULL;
    }
    hook_ep_t hep = { w, c->rank };
    shm_coll_hooks_t hooks = { .ep = &hep, .peer_check = hook_peer_check, .wake = hook_wake };
    c->co = shm_coll_new(w->area, c->rank, w->n, &HOST, &hooks);
    if (!c->co) {
        rfail(c, "shm_coll_new failed");
        return NULL;
    }
    if (shm_coll_active(c->co)) rfail(c, "a new shm_coll_t is active");
    else switch (w->mode) {
    case MODE_MATRIX: script_matrix(c); break;
    case MODE_STRESS: script_stress(c); break;
    case MODE_MISMATCH: script_mismatch(c); break;
    case MODE_BITID: script_bitid(c); break;
    default: break;
    }
    shm_coll_free(c->co);
    return NULL;
}

/* Runs the world's script on n threads; fails the test with every rank's first error. */
static void run_world(world_t *w, const char *name)
{
    ck_assert_int_le(w->n, MAXN);
    w->area_len = shm_coll_area_bytes(w->n, w->round);
    size_t alloc = (w->area_len + 4095) / 4096 * 4096;
    w->area = aligned_alloc(4096, alloc);
    ck_assert_ptr_nonnull(w->area);
    memset(w->area, 0, alloc);
    shm_coll_area_init(w->area, w->n, w->round);
    atomic_init(&w->abort, 0);
    atomic_init(&w->arrivals, 0);
    atomic_init(&w->wakes, 0);
    atomic_init(&w->peer_checks, 0);
    for (int r = 0; r < w->n; r++) {
        w->efd[r] = -1;
        if (w->sleepy) {
            w->efd[r] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
            ck_assert_int_ge(w->efd[r], 0);
        }
    }
    uint64_t t0 = cohort_now_ns();
    atomic_store(&w->progress_ns, t0);
    rank_ctx_t ctx[MAXN];
    pthread_t th[MAXN];
    for (int r = 0; r < w->n; r++) {
        ctx[r] = (rank_ctx_t){ .w = w, .rank = r, .delay_rng = 1000 + (uint64_t)r };
        ck_assert_int_eq(pthread_create(&th[r], NULL, rank_main, &ctx[r]), 0);
    }
    for (int r = 0; r < w->n; r++) pthread_join(th[r], NULL);   /* deadlines: cannot hang */
    double secs = (double)(cohort_now_ns() - t0) / 1e9;
    for (int r = 0; r < w->n; r++)
        if (w->efd[r] >= 0) close(w->efd[r]);
    free(w->area);
    w->area = NULL;

    char all[4096] = "";
    size_t used = 0;
    int failed = 0;
    for (int r = 0; r < w->n; r++)
        if (w->out[r].failed) {
            failed = 1;
            int k = snprintf(all + used, sizeof all - used, "\n  %s", w->out[r].err);
            if (k > 0) used += (size_t)k < sizeof all - used ? (size_t)k : sizeof all - used - 1;
        }
    unsigned long long sleeps = 0;
    for (int r = 0; r < w->n; r++) sleeps += w->out[r].sleeps;
    fprintf(stderr, "test_shm_coll: %s n=%d round=%zu: %llu collectives per rank, %.2f s "
            "(%llu advances on rank 0, %llu peer checks, %llu sleeps, %llu wakes)\n", name,
            w->n, w->round, w->out[0].colls, secs, w->out[0].advances,
            (unsigned long long)atomic_load(&w->peer_checks), sleeps,
            (unsigned long long)atomic_load(&w->wakes));
    ck_assert_msg(!failed, "%s n=%d round=%zu failed:%s", name, w->n, w->round, all);
}

static void free_world(world_t *w)
{
    for (int r = 0; r < MAXN; r++) free(w->out[r].keep);
    free(w);
}

static world_t *new_world(int n, size_t round, int mode)
{
    world_t *w = calloc(1, sizeof *w);
    ck_assert_ptr_nonnull(w);
    w->n = n;
    w->round = round;
    w->mode = mode;
    w->salt = 0x0123456789abcdefull ^ ((uint64_t)mode << 40) ^ ((uint64_t)n << 32) ^ round;
    return w;
}

/* ---- the tests ----------------------------------------------------------------------------- */

START_TEST(test_area_layout)
{
    for (int n = 1; n <= MAXN; n++) {
        size_t r = shm_coll_round(n, 4096);
        ck_assert_uint_eq(r % 4096, 0);
        ck_assert_uint_ge(r, (size_t)n * 64);
        ck_assert_uint_eq(shm_coll_round(n, 1), r);
        ck_assert_uint_eq(shm_coll_round(n, 4097), 8192);
        ck_assert_uint_eq(shm_coll_round(n, SHM_COLL_DEFAULT_ROUND), SHM_COLL_DEFAULT_ROUND);
        size_t len = shm_coll_area_bytes(n, r);
        ck_assert_uint_ge(len, (size_t)(n + 1) * SHM_COLL_NSLOTS * r);
        unsigned char *a = aligned_alloc(4096, (len + 4095) / 4096 * 4096);
        ck_assert_ptr_nonnull(a);
        memset(a, 0, len);
        size_t got = 0;
        ck_assert_int_ne(shm_coll_area_check(a, len, n, &got), 0);   /* not initialised */
        shm_coll_area_init(a, n, r);
        ck_assert_int_eq(shm_coll_area_check(a, len, n, &got), 0);
        ck_assert_uint_eq(got, r);
        ck_assert_int_ne(shm_coll_area_check(a, len - 4096, n, &got), 0);
        ck_assert_int_ne(shm_coll_area_check(a, len, n + 1, &got), 0);
        free(a);
    }
}
END_TEST

static const int matrix_ns[] = { 2, 3, 4, 5, 8 };

/* _i: n = matrix_ns[_i / 2], round: small (even _i) or the default (odd _i) */
START_TEST(test_matrix)
{
    int n = matrix_ns[_i / 2];
    size_t round = _i % 2 ? (size_t)SHM_COLL_DEFAULT_ROUND : shm_coll_round(n, 4096);
    world_t *w = new_world(n, round, MODE_MATRIX);
    run_world(w, "matrix");
    free_world(w);
}
END_TEST

/* _i = 0: yielding waiters; 1: sleeping waiters woken through the wake hook */
START_TEST(test_stress)
{
    world_t *w = new_world(4, shm_coll_round(4, 4096), MODE_STRESS);
    w->sleepy = _i;
    run_world(w, _i ? "stress, sleeping waiters" : "stress");
    ck_assert_uint_eq(w->out[0].colls, _i ? SLEEPY_STEPS : STRESS_STEPS);
    free_world(w);
}
END_TEST

/* _i: n = 2 or 4 (bit 2), mismatch after 0 or 6 collectives (bit 0), rank 1 with another count
 * as well (bit 1) */
START_TEST(test_tag_mismatch)
{
    int n = _i & 4 ? 4 : 2;
    world_t *w = new_world(n, shm_coll_round(n, 4096), MODE_MISMATCH);
    w->variant = _i & 3;
    run_world(w, "tag mismatch");
    for (int r = 0; r < n; r++) {
        rank_out_t *o = &w->out[r];
        ck_assert_msg(o->st_coll == COHORT_ERR_MISMATCH, "variant %d n=%d: rank %d got status "
                      "%d (message '%s'), expected COHORT_ERR_MISMATCH", _i, n, r,
                      (int)o->st_coll, o->msg_coll);
        /* the message names the other side: rank 1 for the others, rank 0 for rank 1 */
        char want[32];
        snprintf(want, sizeof want, "rank %d ", r == 1 ? 0 : 1);
        ck_assert_msg(strstr(o->msg_coll, want) != NULL, "rank %d's message does not name "
                      "the %s: '%s'", r, want, o->msg_coll);
        ck_assert_msg(o->st_after < 0, "rank %d: start after the mismatch returned %d, "
                      "expected an error", r, (int)o->st_after);
        ck_assert_msg(o->msg_after[0] != 0, "rank %d: start refused without a message", r);
        ck_assert_int_eq(o->active_after, 0);
    }
    free_world(w);
}
END_TEST

/* _i: n = 3 or 8 (bit 1), small or default round (bit 0) */
START_TEST(test_bit_identical)
{
    int n = _i & 2 ? 8 : 3;
    size_t round = _i & 1 ? (size_t)SHM_COLL_DEFAULT_ROUND : shm_coll_round(n, 4096);
    world_t *w = new_world(n, round, MODE_BITID);
    run_world(w, "bit-identical allreduce");
    ck_assert_uint_gt(w->out[0].keep_len, 0);
    for (int r = 1; r < n; r++) {
        ck_assert_uint_eq(w->out[r].keep_len, w->out[0].keep_len);
        if (memcmp(w->out[r].keep, w->out[0].keep, w->out[0].keep_len)) {
            size_t k = 0;
            while (w->out[r].keep[k] == w->out[0].keep[k]) k++;
            ck_abort_msg("n=%d round=%zu: rank %d's float32 sums differ from rank 0's at byte "
                         "%zu of the concatenated outputs", n, round, r, k);
        }
    }
    free_world(w);
}
END_TEST

static Suite *coll_suite(void)
{
    Suite *s = suite_create("shm_coll");
    TCase *tc = tcase_create("layout");
    tcase_add_test(tc, test_area_layout);
    suite_add_tcase(s, tc);

    tc = tcase_create("threads");
    /* the ranks give up by themselves after 30 s without progress anywhere; on a loaded machine
     * a moving run may take minutes (stress: 49 s with both cores busy), so only a backstop */
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_matrix, 0, 2 * (int)(sizeof matrix_ns / sizeof matrix_ns[0]));
    tcase_add_loop_test(tc, test_stress, 0, 2);
    tcase_add_loop_test(tc, test_tag_mismatch, 0, 8);
    tcase_add_loop_test(tc, test_bit_identical, 0, 4);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(coll_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
