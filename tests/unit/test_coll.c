/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of the collective algorithms (core/coll/) over the threaded mock p2p layer
 * (tests/unit/mock_p2p.c): every algorithm x nranks 2..8 x counts x dtypes/ops x in/out of place
 * x chunk sizes x eager/rendezvous sends, each element checked against a locally computed
 * reference; plus selection, chunking, error propagation and mismatch behaviour.
 *
 * CK_RUN_CASE=allreduce_ring runs one algorithm; COLL_TEST_SLOW=0.05 prints cases slower than
 * that many seconds. Each (algorithm, nranks) is one Check test running a list of cases on the
 * same rank threads, with pthread barriers between cases.
 */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/coll/coll.h"
#include "core/log.h"
#include "core/reduce.h"
#include "tests/unit/mock_p2p.h"

/* ---- dtypes, values and references -------------------------------------------------------- */

static size_t dt_size(cohort_dtype_t dt)
{
    switch (dt) {
    case COHORT_INT8: case COHORT_UINT8: return 1;
    case COHORT_FLOAT16: case COHORT_BFLOAT16: return 2;
    case COHORT_INT32: case COHORT_UINT32: case COHORT_FLOAT32: return 4;
    case COHORT_INT64: case COHORT_UINT64: case COHORT_FLOAT64: return 8;
    }
    return 0;
}

static const char *dt_str(cohort_dtype_t dt)
{
    static const char *names[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64",
                                  "float16", "bfloat16", "float32", "float64"};
    return (unsigned)dt < 10 ? names[dt] : "?";
}

static const char *op_str(cohort_op_t op)
{
    static const char *names[] = {"sum", "prod", "min", "max", "avg"};
    return (unsigned)op < 5 ? names[op] : "?";
}

static int dt_float(cohort_dtype_t dt)
{
    return dt == COHORT_FLOAT16 || dt == COHORT_BFLOAT16 || dt == COHORT_FLOAT32 ||
           dt == COHORT_FLOAT64;
}

static int dt_unsigned(cohort_dtype_t dt)
{
    return dt == COHORT_UINT8 || dt == COHORT_UINT32 || dt == COHORT_UINT64;
}

static double dt_eps(cohort_dtype_t dt)
{
    switch (dt) {
    case COHORT_FLOAT16: return 1.0 / 2048;
    case COHORT_BFLOAT16: return 1.0 / 256;
    case COHORT_FLOAT32: return 1.2e-7;
    case COHORT_FLOAT64: return 2.3e-16;
    default: return 0;
    }
}

static void put(void *buf, cohort_dtype_t dt, size_t i, double x)
{
    switch (dt) {
    case COHORT_INT8: ((int8_t *)buf)[i] = (int8_t)x; break;
    case COHORT_UINT8: ((uint8_t *)buf)[i] = (uint8_t)x; break;
    case COHORT_INT32: ((int32_t *)buf)[i] = (int32_t)x; break;
    case COHORT_UINT32: ((uint32_t *)buf)[i] = (uint32_t)x; break;
    case COHORT_INT64: ((int64_t *)buf)[i] = (int64_t)x; break;
    case COHORT_UINT64: ((uint64_t *)buf)[i] = (uint64_t)x; break;
    case COHORT_FLOAT16: ((uint16_t *)buf)[i] = cohort_float_to_fp16((float)x); break;
    case COHORT_BFLOAT16: ((uint16_t *)buf)[i] = cohort_float_to_bf16((float)x); break;
    case COHORT_FLOAT32: ((float *)buf)[i] = (float)x; break;
    case COHORT_FLOAT64: ((double *)buf)[i] = x; break;
    }
}

static double get(const void *buf, cohort_dtype_t dt, size_t i)
{
    switch (dt) {
    case COHORT_INT8: return ((const int8_t *)buf)[i];
    case COHORT_UINT8: return ((const uint8_t *)buf)[i];
    case COHORT_INT32: return ((const int32_t *)buf)[i];
    case COHORT_UINT32: return ((const uint32_t *)buf)[i];
    case COHORT_INT64: return (double)((const int64_t *)buf)[i];
    case COHORT_UINT64: return (double)((const uint64_t *)buf)[i];
    case COHORT_FLOAT16: return cohort_fp16_to_float(((const uint16_t *)buf)[i]);
    case COHORT_BFLOAT16: return cohort_bf16_to_float(((const uint16_t *)buf)[i]);
    case COHORT_FLOAT32: return ((const float *)buf)[i];
    case COHORT_FLOAT64: return ((const double *)buf)[i];
    }
    return 0;
}

static uint32_t mix(uint32_t h)
{
    h ^= h >> 16;
    h *= 0x7feb352dU;
    h ^= h >> 15;
    h *= 0x846ca68bU;
    h ^= h >> 16;
    return h;
}

static uint32_t elem_hash(size_t i) { return mix((uint32_t)i + 0x632BE5ABU); }

/* The value of element i (ih = elem_hash(i)) contributed by rank r: exactly representable in dt,
 * small enough that no integer reduction over 8 ranks overflows. Float32/64 sums use values of
 * mixed magnitudes whose rounding depends on the order of the additions. */
static double gen_h(cohort_dtype_t dt, cohort_op_t op, int r, uint32_t ih)
{
    uint32_t h = mix((uint32_t)r * 0x9E3779B1U ^ ih);
    if (op == COHORT_PROD) {
        static const double sv[8] = {1, 2, -1, 1, -2, 3, 1, -1};
        static const double uv[8] = {1, 2, 1, 3, 1, 1, 2, 1};
        static const double fv[8] = {1, 0.5, 2, -1, 1.5, -0.5, 1, 2};
        return dt_float(dt) ? fv[h % 8] : dt_unsigned(dt) ? uv[h % 8] : sv[h % 8];
    }
    if (op == COHORT_MIN || op == COHORT_MAX) {
        if (dt_float(dt))
            return ((double)(h % 401) - 200) / 8;
        return dt_unsigned(dt) ? (double)(h % 201) : (double)(h % 201) - 100;
    }
    /* SUM, AVG */
    switch (dt) {
    case COHORT_FLOAT16: case COHORT_BFLOAT16:
        return ((double)(h % 17) - 8) / 8;
    case COHORT_FLOAT32: case COHORT_FLOAT64: {
        static const double scale[3] = {1, 100, 0.01};
        return ((double)(h % 2000001) - 1000000) / 1000000.0 * scale[(h >> 24) % 3];
    }
    default:
        return dt_unsigned(dt) ? (double)(h % 11) : (double)(h % 11) - 5;
    }
}

static double gen(cohort_dtype_t dt, cohort_op_t op, int r, size_t i)
{
    return gen_h(dt, op, r, elem_hash(i));
}

/* Reference reduction over n ranks of element i (values as stored in dt); *tol: allowed error. */
static double reference(cohort_dtype_t dt, cohort_op_t op, int n, size_t i, double *tol)
{
    unsigned char cell[8];
    double acc = 0, mag = 0;
    uint32_t ih = elem_hash(i);
    for (int r = 0; r < n; r++) {
        put(cell, dt, 0, gen_h(dt, op, r, ih));
        double x = get(cell, dt, 0);
        mag += fabs(x);
        if (r == 0) {
            acc = x;
            continue;
        }
        switch (op) {
        case COHORT_SUM: case COHORT_AVG: acc += x; break;
        case COHORT_PROD: acc *= x; break;
        case COHORT_MIN: acc = x < acc ? x : acc; break;
        case COHORT_MAX: acc = x > acc ? x : acc; break;
        }
    }
    if (op == COHORT_AVG) {
        if (dt_float(dt))
            acc /= n;
        else
            acc = (double)((int64_t)acc / n);   /* truncating, like C */
    }
    if (op == COHORT_PROD)
        mag = fabs(acc);
    *tol = dt_eps(dt) * (mag + fabs(acc)) * (n + 2);
    return acc;
}

static int close_enough(double got, double want, double tol)
{
    if (isnan(got) || isnan(want))
        return 0;
    return fabs(got - want) <= tol;
}

/* ---- the case runner ---------------------------------------------------------------------- */

enum { PLACE_OUT, PLACE_IN, PLACE_BASE };   /* BASE: sendbuf == recvbuf (allgather/reduce_scatter) */
static const char *place_str[] = {"out-of-place", "in-place", "sendbuf==recvbuf"};

typedef struct tcase {
    size_t count;
    cohort_dtype_t dt;
    cohort_op_t op;
    int place;
    int root;
    int null_recv;       /* reduce: NULL recvbuf off root */
    size_t chunk;
    int rendezvous;
} tcase_t;

typedef struct run {
    mock_world_t *w;
    int n;
    cohort_coll_t coll;
    cohort_algo_fn fn;
    const char *name;
    const tcase_t *cases;
    size_t ncases;
    pthread_barrier_t bar;
    pthread_mutex_t mu;
    atomic_int failed;
    char msg[2048];
    const unsigned char **results;  /* each rank's result, for the cross-rank comparison */
    size_t result_bytes;
    atomic_int arrived;             /* barrier test */
    size_t cases_run;
} run_t;

typedef struct targ {
    run_t *run;
    int rank;
} targ_t;

static void report(run_t *run, int rank, size_t ci, const char *fmt, ...) COHORT_PRINTF(4, 5);
static void report(run_t *run, int rank, size_t ci, const char *fmt, ...)
{
    pthread_mutex_lock(&run->mu);
    if (!run->failed) {
        const tcase_t *c = &run->cases[ci];
        int len = snprintf(run->msg, sizeof(run->msg),
                           "%s/%s n=%d rank %d case %zu (count=%zu %s %s %s root=%d%s chunk=%zu "
                           "%s): ", cohort_coll_name(run->coll), run->name, run->n, rank, ci,
                           c->count, dt_str(c->dt), op_str(c->op), place_str[c->place], c->root,
                           c->null_recv ? " recvbuf=NULL" : "", c->chunk,
                           c->rendezvous ? "rendezvous" : "eager");
        va_list ap;
        va_start(ap, fmt);
        if (len > 0 && (size_t)len < sizeof(run->msg))
            vsnprintf(run->msg + len, sizeof(run->msg) - (size_t)len, fmt, ap);
        va_end(ap);
        run->failed = 1;
    }
    pthread_mutex_unlock(&run->mu);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    ck_assert_ptr_nonnull(p);
    return p;
}

/* Allocation recorded in bufs[] (freed by the caller once every rank is done). */
static void *tmalloc(void *bufs[4], size_t n)
{
    void *p = xmalloc(n);
    for (int i = 0; i < 4; i++)
        if (!bufs[i]) {
            bufs[i] = p;
            return p;
        }
    ck_abort_msg("tmalloc: too many buffers");
    return NULL;
}

#define JUNK 0x5A

static int untouched(const unsigned char *p, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (p[i] != JUNK)
            return 0;
    return 1;
}

/* Checks elements [from, to) of buf, which holds the reduction of elements first.. */
static void check_elems(run_t *run, int rank, size_t ci, const void *buf, size_t from, size_t to,
                        size_t first, const char *what)
{
    const tcase_t *c = &run->cases[ci];
    for (size_t i = from; i < to; i++) {
        double tol, want = reference(c->dt, c->op, run->n, first + i, &tol);
        double got = get(buf, c->dt, i);
        if (!close_enough(got, want, tol)) {
            report(run, rank, ci, "%s element %zu is %.17g, expected %.17g (tolerance %g)", what,
                   i, got, want, tol);
            return;
        }
    }
}

/* Runs case ci on this rank; returns the buffer to compare across ranks (or NULL). Buffers to
 * free go to bufs[]. */
static const unsigned char *run_one(run_t *run, int rank, size_t ci, void *bufs[4])
{
    const tcase_t *c = &run->cases[ci];
    int n = run->n;
    size_t es = dt_size(c->dt), cnt = c->count, nb = cnt * es;
    cohort_comm_t *comm = mock_world_comm(run->w, rank);
    cohort_coll_args_t a = {.coll = run->coll, .count = cnt, .dtype = c->dt, .op = c->op,
                            .root = c->root, .esize = es};
    unsigned char *sb = NULL, *rb = NULL, *orig = NULL;
    const unsigned char *result = NULL;

    switch (run->coll) {
    case COHORT_COLL_ALLREDUCE:
    case COHORT_COLL_REDUCE:
        sb = tmalloc(bufs, nb);
        for (size_t i = 0; i < cnt; i++)
            put(sb, c->dt, i, gen(c->dt, c->op, rank, i));
        orig = tmalloc(bufs, nb);
        memcpy(orig, sb, nb);
        if (run->coll == COHORT_COLL_REDUCE && rank != c->root) {
            if (!c->null_recv) {
                rb = tmalloc(bufs, nb);
                memset(rb, JUNK, nb);
            }
        } else if (c->place == PLACE_IN) {
            rb = sb;
        } else {
            rb = tmalloc(bufs, nb);
            memset(rb, JUNK, nb);
        }
        a.sendbuf = sb;
        a.recvbuf = rb;
        break;
    case COHORT_COLL_BROADCAST:
        rb = tmalloc(bufs, nb);
        if (rank == c->root)
            for (size_t i = 0; i < cnt; i++)
                put(rb, c->dt, i, gen(c->dt, COHORT_SUM, c->root, i));
        else
            memset(rb, JUNK, nb);
        a.sendbuf = rb;
        a.recvbuf = rb;
        break;
    case COHORT_COLL_ALLGATHER:
        rb = tmalloc(bufs, (size_t)n * nb);
        memset(rb, JUNK, (size_t)n * nb);
        sb = c->place == PLACE_OUT ? tmalloc(bufs, nb) : c->place == PLACE_IN ? rb + rank * nb : rb;
        for (size_t i = 0; i < cnt; i++)
            put(sb, c->dt, i, gen(c->dt, COHORT_SUM, rank, i));
        if (c->place == PLACE_OUT) {
            orig = tmalloc(bufs, nb);
            memcpy(orig, sb, nb);
        }
        a.sendbuf = sb;
        a.recvbuf = rb;
        break;
    case COHORT_COLL_REDUCE_SCATTER:
        sb = tmalloc(bufs, (size_t)n * nb);
        for (size_t i = 0; i < (size_t)n * cnt; i++)
            put(sb, c->dt, i, gen(c->dt, c->op, rank, i));
        orig = tmalloc(bufs, (size_t)n * nb);
        memcpy(orig, sb, (size_t)n * nb);
        if (c->place == PLACE_OUT) {
            rb = tmalloc(bufs, nb);
            memset(rb, JUNK, nb);
        } else {
            rb = c->place == PLACE_IN ? sb + rank * nb : sb;
        }
        a.sendbuf = sb;
        a.recvbuf = rb;
        break;
    case COHORT_COLL_ALLTOALL:
        sb = tmalloc(bufs, (size_t)n * nb);
        for (int d = 0; d < n; d++)
            for (size_t i = 0; i < cnt; i++)
                put(sb + d * nb, c->dt, i, gen(c->dt, COHORT_SUM, rank * n + d, i));
        if (c->place == PLACE_IN) {
            rb = sb;
        } else {
            orig = tmalloc(bufs, (size_t)n * nb);
            memcpy(orig, sb, (size_t)n * nb);
            rb = tmalloc(bufs, (size_t)n * nb);
            memset(rb, JUNK, (size_t)n * nb);
        }
        a.sendbuf = sb;
        a.recvbuf = rb;
        break;
    case COHORT_COLL_BARRIER: {
        struct timespec ts = {0, (long)((mix((uint32_t)(rank * 31 + (int)ci)) % 4) * 150000)};
        nanosleep(&ts, NULL);
        atomic_fetch_add(&run->arrived, 1);
        break;
    }
    default:
        break;
    }
    cohort_status_t st = run->fn(comm, &a);
    if (st != COHORT_SUCCESS) {
        report(run, rank, ci, "returned %d: %s", st, cohort_last_error());
        mock_world_abort(run->w);
        return NULL;
    }

    switch (run->coll) {
    case COHORT_COLL_ALLREDUCE:
        /* The values are checked once every rank is done (see rank_thread). */
        if (c->place == PLACE_OUT && memcmp(sb, orig, nb))
            report(run, rank, ci, "sendbuf was modified");
        result = rb;
        break;
    case COHORT_COLL_REDUCE:
        if (rank == c->root) {
            if (c->place == PLACE_OUT && memcmp(sb, orig, nb))
                report(run, rank, ci, "sendbuf was modified");
            result = rb;
        } else {
            if (memcmp(sb, orig, nb))
                report(run, rank, ci, "sendbuf was modified off root");
            if (rb && !untouched(rb, nb))
                report(run, rank, ci, "recvbuf was written off root");
        }
        break;
    case COHORT_COLL_BROADCAST:
        for (size_t i = 0; i < cnt; i++) {
            unsigned char cell[8];
            put(cell, c->dt, 0, gen(c->dt, COHORT_SUM, c->root, i));
            if (memcmp(rb + i * es, cell, es)) {
                report(run, rank, ci, "element %zu differs from the root's", i);
                break;
            }
        }
        result = rb;
        break;
    case COHORT_COLL_ALLGATHER:
        for (int b = 0; b < n; b++)
            for (size_t i = 0; i < cnt; i++) {
                unsigned char cell[8];
                put(cell, c->dt, 0, gen(c->dt, COHORT_SUM, b, i));
                if (memcmp(rb + b * nb + i * es, cell, es)) {
                    report(run, rank, ci, "block %d element %zu is wrong", b, i);
                    b = n;
                    break;
                }
            }
        if (orig && memcmp(sb, orig, nb))
            report(run, rank, ci, "sendbuf was modified");
        result = rb;
        break;
    case COHORT_COLL_REDUCE_SCATTER:
        check_elems(run, rank, ci, rb, 0, cnt, (size_t)rank * cnt, "recvbuf");
        /* Nothing but recvbuf may change. */
        for (int b = 0; b < n; b++) {
            unsigned char *blk = sb + b * nb;
            if (blk == rb)
                continue;
            if (memcmp(blk, orig + b * nb, nb)) {
                report(run, rank, ci, "sendbuf block %d was modified", b);
                break;
            }
        }
        break;
    case COHORT_COLL_ALLTOALL:
        for (int s = 0; s < n; s++)
            for (size_t i = 0; i < cnt; i++) {
                unsigned char cell[8];
                put(cell, c->dt, 0, gen(c->dt, COHORT_SUM, s * n + rank, i));
                if (memcmp(rb + s * nb + i * es, cell, es)) {
                    report(run, rank, ci, "block from rank %d element %zu is wrong", s, i);
                    s = n;
                    break;
                }
            }
        if (orig && memcmp(sb, orig, (size_t)n * nb))
            report(run, rank, ci, "sendbuf was modified");
        break;
    case COHORT_COLL_BARRIER:
        if (atomic_load(&run->arrived) != n)
            report(run, rank, ci, "left the barrier when only %d of %d ranks had entered",
                 atomic_load(&run->arrived), n);
        break;
    default:
        break;
    }
    return result;
}

static void *rank_thread(void *p)
{
    targ_t *t = p;
    run_t *run = t->run;
    int rank = t->rank;

    for (size_t ci = 0; ci < run->ncases; ci++) {
        const tcase_t *c = &run->cases[ci];
        if (rank == 0) {
            mock_world_set_chunk(run->w, c->chunk);
            mock_world_set_rendezvous(run->w, c->rendezvous);
            atomic_store(&run->arrived, 0);
            run->result_bytes = c->count * dt_size(c->dt);
            if (run->coll == COHORT_COLL_ALLGATHER)
                run->result_bytes *= (size_t)run->n;
        }
        pthread_barrier_wait(&run->bar);

        void *bufs[4] = {NULL, NULL, NULL, NULL};
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        run->results[rank] = run_one(run, rank, ci, bufs);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (getenv("COLL_TEST_SLOW") && rank == 0) {
            double dt = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
            if (dt > atof(getenv("COLL_TEST_SLOW")))
                fprintf(stderr, "slow %s/%s n=%d count=%zu %s %s chunk=%zu: %.3f s\n",
                        cohort_coll_name(run->coll), run->name, run->n, c->count, dt_str(c->dt),
                        op_str(c->op), c->chunk, dt);
        }
        pthread_barrier_wait(&run->bar);

        /* Reductions: every rank checks a slice of the result against the reference, and its
         * own result bitwise against rank 0's (allreduce) -- together they cover it all. */
        int owner = run->coll == COHORT_COLL_REDUCE ? c->root : 0;
        if (!run->failed && run->results[owner] &&
            (run->coll == COHORT_COLL_ALLREDUCE || run->coll == COHORT_COLL_REDUCE)) {
            size_t from = c->count * (size_t)rank / (size_t)run->n;
            size_t to = c->count * (size_t)(rank + 1) / (size_t)run->n;
            check_elems(run, rank, ci, run->results[owner], from, to, 0, "result");
        }
        if (!run->failed && rank != 0 && run->results[0] && run->results[rank] &&
            run->coll != COHORT_COLL_REDUCE &&
            memcmp(run->results[0], run->results[rank], run->result_bytes))
            report(run, rank, ci, "result differs bitwise from rank 0's");
        if (rank == 0 && !run->failed) {
            char why[256];
            if (!mock_world_idle(run->w, why, sizeof(why)))
                report(run, 0, ci, "after the collective: %s", why);
            run->cases_run++;
        }
        pthread_barrier_wait(&run->bar);
        for (int i = 0; i < 4; i++)
            free(bufs[i]);
        if (run->failed)
            break;
    }
    return NULL;
}

/* Runs the cases with n rank threads; fails the test with the first problem found. */
/* Ring order used by the next run_cases (0: identity). A topology ring puts a node's ranks
 * together whatever their numbers: permuted rings must give the same results. */
static int ring_perm;

static void set_perm_ring(mock_world_t *w, int n)
{
    /* 1: round-robin placement on two nodes seen as rings (evens, then odds, the way a
     * "map-by node" job's ring runs); 2: reversed and rotated. */
    int ring[16];
    for (int i = 0, k = 0; i < n; i++) {
        if (ring_perm == 1)
            ring[i] = i < (n + 1) / 2 ? 2 * i : 2 * k++ + 1;
        else
            ring[i] = (n - 1 - i + 2) % n;
    }
    mock_world_set_ring(w, ring);
}

static void run_cases(cohort_coll_t coll, cohort_algo_fn fn, const char *name, int n,
                      const tcase_t *cases, size_t ncases)
{
    run_t run;
    memset(&run, 0, sizeof(run));
    run.w = mock_world_create(n);
    ck_assert_ptr_nonnull(run.w);
    if (ring_perm)
        set_perm_ring(run.w, n);
    run.n = n;
    run.coll = coll;
    run.fn = fn;
    run.name = name;
    run.cases = cases;
    run.ncases = ncases;
    run.results = calloc((size_t)n, sizeof(*run.results));
    pthread_barrier_init(&run.bar, NULL, (unsigned)n);
    pthread_mutex_init(&run.mu, NULL);

    pthread_t th[16];
    targ_t args[16];
    for (int r = 0; r < n; r++) {
        args[r].run = &run;
        args[r].rank = r;
        ck_assert_int_eq(pthread_create(&th[r], NULL, rank_thread, &args[r]), 0);
    }
    for (int r = 0; r < n; r++)
        pthread_join(th[r], NULL);

    mock_world_destroy(run.w);
    pthread_barrier_destroy(&run.bar);
    pthread_mutex_destroy(&run.mu);
    free(run.results);
    ck_assert_msg(!run.failed, "%s", run.msg);
    ck_assert_uint_eq(run.cases_run, ncases);
}

/* ---- case lists --------------------------------------------------------------------------- */

typedef struct combo {
    cohort_dtype_t dt;
    cohort_op_t op;
} combo_t;

static const combo_t red_combos[] = {
    {COHORT_INT32, COHORT_SUM},      {COHORT_FLOAT32, COHORT_SUM},   {COHORT_FLOAT16, COHORT_SUM},
    {COHORT_INT32, COHORT_PROD},     {COHORT_INT32, COHORT_MIN},     {COHORT_INT32, COHORT_MAX},
    {COHORT_INT32, COHORT_AVG},      {COHORT_FLOAT32, COHORT_AVG},   {COHORT_FLOAT32, COHORT_MIN},
    {COHORT_FLOAT64, COHORT_SUM},    {COHORT_FLOAT64, COHORT_PROD},  {COHORT_FLOAT64, COHORT_MAX},
    {COHORT_FLOAT16, COHORT_AVG},    {COHORT_BFLOAT16, COHORT_SUM},  {COHORT_UINT8, COHORT_SUM},
    {COHORT_INT8, COHORT_MAX},       {COHORT_INT64, COHORT_SUM},     {COHORT_UINT64, COHORT_MIN},
    {COHORT_UINT32, COHORT_AVG},
};
#define N_RED_COMBOS (sizeof(red_combos) / sizeof(red_combos[0]))
#define N_LARGE_COMBOS 3   /* the main ones: int32, float32, float16 sums */

/* Data-movement collectives only care about the element size. */
static const combo_t move_combos[] = {
    {COHORT_UINT8, COHORT_SUM}, {COHORT_FLOAT16, COHORT_SUM}, {COHORT_INT32, COHORT_SUM},
    {COHORT_FLOAT64, COHORT_SUM},
};
#define N_MOVE_COMBOS (sizeof(move_combos) / sizeof(move_combos[0]))

static const size_t small_chunks[] = {64, 100, 3, 4096, 1 << 20};
static const size_t large_chunks[] = {1024, 8192, 65536};

static tcase_t *make_cases(cohort_coll_t coll, int n, size_t *ncases)
{
    size_t counts[] = {1, 2, (size_t)n - 1, (size_t)n, (size_t)n + 1, 7, 1000, 4099, 100000};
    size_t ncounts = sizeof(counts) / sizeof(counts[0]);
    int reduction = coll == COHORT_COLL_ALLREDUCE || coll == COHORT_COLL_REDUCE ||
                    coll == COHORT_COLL_REDUCE_SCATTER;
    const combo_t *combos = reduction ? red_combos : move_combos;
    size_t ncombos = reduction ? N_RED_COMBOS : N_MOVE_COMBOS;
    int nplaces = coll == COHORT_COLL_ALLGATHER || coll == COHORT_COLL_REDUCE_SCATTER ? 3
                  : coll == COHORT_COLL_BROADCAST || coll == COHORT_COLL_BARRIER     ? 1
                                                                                     : 2;
    size_t cap = ncounts * ncombos * (size_t)nplaces * 2, k = 0;
    tcase_t *cases = xmalloc(cap * sizeof(*cases));

    if (coll == COHORT_COLL_BARRIER) {
        for (k = 0; k < 24; k++)
            cases[k] = (tcase_t){.count = 0, .dt = COHORT_UINT8, .chunk = 64,
                                 .rendezvous = (int)(k % 2)};
        *ncases = k;
        return cases;
    }
    int blocks = coll == COHORT_COLL_ALLGATHER || coll == COHORT_COLL_REDUCE_SCATTER ||
                 coll == COHORT_COLL_ALLTOALL;
    for (size_t ic = 0; ic < ncounts; ic++) {
        size_t count = counts[ic];
        int large = count >= 100000, mid = count >= 1000 && !large;
        if (large && blocks)
            count /= (size_t)n;   /* per-rank blocks: keep the total near 100000 elements */
        int dup = 0;
        for (size_t j = 0; j < ic; j++)
            dup |= counts[j] == counts[ic];
        if (dup)
            continue;
        /* Large counts: one case per n, main combo and placement rotating with n. Otherwise
         * every combo; the main ones in every placement, the others in one (rotating). Keeps
         * the run short. */
        size_t nco = large ? N_LARGE_COMBOS : ncombos;
        for (size_t co = 0; co < nco; co++)
            for (int pl = 0; pl < nplaces; pl++) {
                if (large && (co != (size_t)n % N_LARGE_COMBOS || pl != n % nplaces))
                    continue;
                if (co >= N_LARGE_COMBOS && (size_t)pl != (co + ic) % (size_t)nplaces)
                    continue;
                tcase_t c = {.count = count, .dt = combos[co].dt, .op = combos[co].op,
                             .place = pl};
                /* 3 bytes: one element per chunk; only where the message count stays small. */
                c.chunk = large ? large_chunks[k % 3]
                          : mid ? small_chunks[k % 4 == 2 ? 4 : k % 4]
                                : small_chunks[k % 5];
                c.rendezvous = (int)((k / 5) % 2);
                c.root = k % 3 == 0 ? 0 : k % 3 == 1 ? n - 1 : (int)((k * 7) % (size_t)n);
                c.null_recv = (int)(k % 2);
                cases[k++] = c;
                if (coll == COHORT_COLL_REDUCE && pl == PLACE_OUT && !large && !mid &&
                    co < N_LARGE_COMBOS) {
                    /* the other root choice as well, for reduce */
                    c.root = (c.root + 1) % n;
                    c.null_recv = !c.null_recv;
                    cases[k++] = c;
                }
            }
    }
    *ncases = k;
    return cases;
}

static void run_algo(cohort_coll_t coll, const char *name, int n)
{
    int na;
    const cohort_algo_t *algos = cohort_algos(&na);
    cohort_algo_fn fn = NULL;
    for (int i = 0; i < na; i++)
        if (algos[i].coll == coll && strcmp(algos[i].name, name) == 0)
            fn = algos[i].fn;
    ck_assert_msg(fn != NULL, "no algorithm %s for %s", name, cohort_coll_name(coll));
    size_t ncases;
    tcase_t *cases = make_cases(coll, n, &ncases);
    run_cases(coll, fn, name, n, cases, ncases);
    free(cases);
}

START_TEST(test_allreduce_ring) { run_algo(COHORT_COLL_ALLREDUCE, "ring", _i); }
END_TEST
START_TEST(test_allreduce_rd) { run_algo(COHORT_COLL_ALLREDUCE, "rd", _i); }
END_TEST
START_TEST(test_broadcast_chain) { run_algo(COHORT_COLL_BROADCAST, "chain", _i); }
END_TEST
START_TEST(test_broadcast_tree) { run_algo(COHORT_COLL_BROADCAST, "tree", _i); }
END_TEST
START_TEST(test_reduce_tree) { run_algo(COHORT_COLL_REDUCE, "tree", _i); }
END_TEST
START_TEST(test_allgather_ring) { run_algo(COHORT_COLL_ALLGATHER, "ring", _i); }
END_TEST
START_TEST(test_reduce_scatter_ring) { run_algo(COHORT_COLL_REDUCE_SCATTER, "ring", _i); }
END_TEST
START_TEST(test_alltoall_pairwise) { run_algo(COHORT_COLL_ALLTOALL, "pairwise", _i); }
END_TEST
START_TEST(test_barrier_dissemination) { run_algo(COHORT_COLL_BARRIER, "dissemination", _i); }
END_TEST

/* The ring and chain algorithms on permuted rings (loop index: n * 2 + permutation - 1). */
static void run_perm(cohort_coll_t coll, const char *name, int i)
{
    ring_perm = i % 2 + 1;
    run_algo(coll, name, i / 2);
    ring_perm = 0;
}
START_TEST(test_perm_allreduce_ring) { run_perm(COHORT_COLL_ALLREDUCE, "ring", _i); }
END_TEST
START_TEST(test_perm_broadcast_chain) { run_perm(COHORT_COLL_BROADCAST, "chain", _i); }
END_TEST
START_TEST(test_perm_allgather_ring) { run_perm(COHORT_COLL_ALLGATHER, "ring", _i); }
END_TEST
START_TEST(test_perm_reduce_scatter_ring) { run_perm(COHORT_COLL_REDUCE_SCATTER, "ring", _i); }
END_TEST

/* ---- selection ---------------------------------------------------------------------------- */

START_TEST(test_algos_table)
{
    int na = 0;
    const cohort_algo_t *algos = cohort_algos(&na);
    ck_assert_int_eq(na, 17);
    int per_coll[COHORT_COLL_COUNT] = {0};
    for (int i = 0; i < na; i++) {
        ck_assert_ptr_nonnull(algos[i].fn);
        ck_assert_ptr_nonnull(algos[i].name);
        ck_assert_int_lt(algos[i].coll, COHORT_COLL_COUNT);
        per_coll[algos[i].coll]++;
        for (int j = 0; j < i; j++)
            ck_assert_msg(algos[i].coll != algos[j].coll || strcmp(algos[i].name, algos[j].name),
                          "duplicate %s", algos[i].name);
    }
    for (int c = 0; c < COHORT_COLL_COUNT; c++)
        ck_assert_int_ge(per_coll[c], 1);
    ck_assert_int_eq(per_coll[COHORT_COLL_ALLREDUCE], 4);
    ck_assert_int_eq(per_coll[COHORT_COLL_BROADCAST], 3);
    ck_assert_int_eq(per_coll[COHORT_COLL_ALLGATHER], 2);

    const char *names[] = {"allreduce", "broadcast", "reduce", "allgather", "reduce_scatter",
                           "alltoall", "barrier", "allgatherv", "alltoallv", "gather", "scatter"};
    for (int c = 0; c < COHORT_COLL_COUNT; c++)
        ck_assert_str_eq(cohort_coll_name((cohort_coll_t)c), names[c]);
    ck_assert_str_eq(cohort_coll_name(COHORT_COLL_COUNT), "?");
    ck_assert_str_eq(cohort_coll_name((cohort_coll_t)-1), "?");
}
END_TEST

static const char *select_name(mock_world_t *w, cohort_coll_t coll, size_t count, size_t es)
{
    cohort_coll_args_t a = {.coll = coll, .count = count, .esize = es, .dtype = COHORT_FLOAT32};
    const cohort_algo_t *algo = NULL;
    cohort_status_t st = cohort_coll_select(mock_world_comm(w, 0), &a, &algo);
    ck_assert_msg(st == COHORT_SUCCESS, "select failed: %s", cohort_last_error());
    ck_assert_ptr_nonnull(algo);
    ck_assert_int_eq(algo->coll, coll);
    return algo->name;
}

START_TEST(test_select)
{
    /* allreduce: rd up to 64 KiB for two ranks, up to 256 KiB for more (select.c) */
    mock_world_t *w2 = mock_world_create(2);
    ck_assert_str_eq(select_name(w2, COHORT_COLL_ALLREDUCE, 16384, 4), "rd");
    ck_assert_str_eq(select_name(w2, COHORT_COLL_ALLREDUCE, 16385, 4), "ring");
    mock_world_destroy(w2);
    mock_world_t *w = mock_world_create(4);
    ck_assert_str_eq(select_name(w, COHORT_COLL_ALLREDUCE, 1, 4), "rd");
    ck_assert_str_eq(select_name(w, COHORT_COLL_ALLREDUCE, 65536, 4), "rd");
    ck_assert_str_eq(select_name(w, COHORT_COLL_ALLREDUCE, 65537, 4), "ring");
    ck_assert_str_eq(select_name(w, COHORT_COLL_ALLREDUCE, 1 << 24, 2), "ring");
    ck_assert_str_eq(select_name(w, COHORT_COLL_BROADCAST, 65536, 1), "tree");
    ck_assert_str_eq(select_name(w, COHORT_COLL_BROADCAST, 65537, 1), "chain");
    ck_assert_str_eq(select_name(w, COHORT_COLL_REDUCE, 1 << 20, 4), "tree");
    ck_assert_str_eq(select_name(w, COHORT_COLL_ALLGATHER, 10, 4), "ring");
    ck_assert_str_eq(select_name(w, COHORT_COLL_REDUCE_SCATTER, 10, 4), "ring");
    ck_assert_str_eq(select_name(w, COHORT_COLL_ALLTOALL, 10, 4), "pairwise");
    ck_assert_str_eq(select_name(w, COHORT_COLL_BARRIER, 0, 0), "dissemination");

    /* COHORT_ALGO wins for its collective only. */
    mock_world_set_algo(w, "allreduce", "ring");
    ck_assert_str_eq(select_name(w, COHORT_COLL_ALLREDUCE, 1, 4), "ring");
    ck_assert_str_eq(select_name(w, COHORT_COLL_BROADCAST, 1 << 20, 4), "chain");
    mock_world_set_algo(w, "broadcast", "tree");
    ck_assert_str_eq(select_name(w, COHORT_COLL_BROADCAST, 1 << 20, 4), "tree");
    ck_assert_str_eq(select_name(w, COHORT_COLL_ALLREDUCE, 1 << 20, 4), "ring");
    mock_world_set_algo(w, "allreduce", "rd");
    ck_assert_str_eq(select_name(w, COHORT_COLL_ALLREDUCE, 1 << 24, 4), "rd");

    /* An algorithm of another collective is refused, naming the valid ones. */
    mock_world_set_algo(w, "allreduce", "tree");
    cohort_coll_args_t a = {.coll = COHORT_COLL_ALLREDUCE, .count = 10, .esize = 4};
    const cohort_algo_t *algo = NULL;
    ck_assert_int_eq(cohort_coll_select(mock_world_comm(w, 0), &a, &algo),
                     COHORT_ERR_INVALID_ARG);
    const char *msg = cohort_last_error();
    ck_assert_msg(strstr(msg, "tree") && strstr(msg, "ring") && strstr(msg, "rd") &&
                      strstr(msg, "allreduce"), "unhelpful message: %s", msg);
    mock_world_set_algo(w, "barrier", "bogus");
    a.coll = COHORT_COLL_BARRIER;
    ck_assert_int_eq(cohort_coll_select(mock_world_comm(w, 0), &a, &algo),
                     COHORT_ERR_INVALID_ARG);
    ck_assert_msg(strstr(cohort_last_error(), "dissemination"), "%s", cohort_last_error());
    mock_world_destroy(w);
}
END_TEST

/* ---- chunking, errors, mismatches --------------------------------------------------------- */

typedef struct simple_run {
    mock_world_t *w;
    cohort_algo_fn fn;
    cohort_coll_t coll;
    size_t count[16];
    cohort_status_t st[16];
    char err[16][512];
} simple_run_t;

typedef struct sarg {
    simple_run_t *s;
    int rank;
} sarg_t;

static void *simple_thread(void *p)
{
    sarg_t *t = p;
    simple_run_t *s = t->s;
    int n = cohort_coll_size(mock_world_comm(s->w, 0));
    size_t cnt = s->count[t->rank], es = 4;
    size_t total = s->coll == COHORT_COLL_ALLGATHER || s->coll == COHORT_COLL_REDUCE_SCATTER ||
                           s->coll == COHORT_COLL_ALLTOALL || s->coll == COHORT_COLL_ALLGATHERV ||
                           s->coll == COHORT_COLL_ALLTOALLV || s->coll == COHORT_COLL_GATHER ||
                           s->coll == COHORT_COLL_SCATTER
                       ? (size_t)n * cnt
                       : cnt;
    int32_t *sb = calloc(total ? total : 1, es), *rb = calloc(total ? total : 1, es);
    /* the v-variants as their plain forms: count elements per rank, in rank order (each rank
     * with its own count, as a rank that disagrees would) */
    size_t vc[16], vd[16];
    for (int r = 0; r < n; r++) {
        vc[r] = cnt;
        vd[r] = (size_t)r * cnt;
    }
    cohort_coll_args_t a = {.coll = s->coll, .sendbuf = sb, .recvbuf = rb, .count = cnt,
                            .dtype = COHORT_INT32, .op = COHORT_SUM, .root = 1, .esize = es,
                            .scounts = vc, .sdispls = vd, .rcounts = vc, .rdispls = vd};
    s->st[t->rank] = s->fn(mock_world_comm(s->w, t->rank), &a);
    if (s->st[t->rank] != COHORT_SUCCESS) {
        snprintf(s->err[t->rank], sizeof(s->err[0]), "%s", cohort_last_error());
        mock_world_abort(s->w);
    }
    free(sb);
    free(rb);
    return NULL;
}

static void simple_run(simple_run_t *s, int n)
{
    pthread_t th[16];
    sarg_t args[16];
    for (int r = 0; r < n; r++) {
        args[r].s = s;
        args[r].rank = r;
        ck_assert_int_eq(pthread_create(&th[r], NULL, simple_thread, &args[r]), 0);
    }
    for (int r = 0; r < n; r++)
        pthread_join(th[r], NULL);
}

/* Pipelined algorithms never send more than a chunk per message (where they chunk). */
START_TEST(test_chunking)
{
    struct { cohort_coll_t coll; const char *name; size_t max_len; } chk[] = {
        {COHORT_COLL_BROADCAST, "chain", 64},
        {COHORT_COLL_REDUCE, "tree", 64},
        {COHORT_COLL_REDUCE_SCATTER, "ring", 64},
        {COHORT_COLL_BROADCAST, "tree", 4000},
    };
    int na;
    const cohort_algo_t *algos = cohort_algos(&na);
    for (size_t k = 0; k < sizeof(chk) / sizeof(chk[0]); k++) {
        simple_run_t s;
        memset(&s, 0, sizeof(s));
        s.w = mock_world_create(5);
        s.coll = chk[k].coll;
        for (int i = 0; i < na; i++)
            if (algos[i].coll == chk[k].coll && !strcmp(algos[i].name, chk[k].name))
                s.fn = algos[i].fn;
        for (int r = 0; r < 5; r++)
            s.count[r] = 1000;
        mock_world_set_chunk(s.w, 64);
        mock_world_set_rendezvous(s.w, 1);
        simple_run(&s, 5);
        for (int r = 0; r < 5; r++)
            ck_assert_msg(s.st[r] == COHORT_SUCCESS, "%s", s.err[r]);
        mock_stats_t st;
        mock_world_stats(s.w, &st, 1);
        ck_assert_msg(st.max_len == chk[k].max_len, "%s/%s: largest message %zu, expected %zu",
                      cohort_coll_name(chk[k].coll), chk[k].name, st.max_len, chk[k].max_len);
        mock_world_destroy(s.w);
    }
    /* The ring allreduce's reduce-scatter phase is chunked: many more messages than steps. */
    simple_run_t s;
    memset(&s, 0, sizeof(s));
    s.w = mock_world_create(4);
    s.coll = COHORT_COLL_ALLREDUCE;
    s.fn = cohort_allreduce_ring;
    for (int r = 0; r < 4; r++)
        s.count[r] = 1000;
    mock_world_set_chunk(s.w, 64);
    simple_run(&s, 4);
    for (int r = 0; r < 4; r++)
        ck_assert_msg(s.st[r] == COHORT_SUCCESS, "%s", s.err[r]);
    mock_stats_t st;
    mock_world_stats(s.w, &st, 1);
    /* 4 ranks x 3 steps x ceil(250*4/64)=16 chunks + 4 x 3 allgather messages */
    ck_assert_uint_eq(st.messages, 4 * 3 * 16 + 4 * 3);
    mock_world_destroy(s.w);
}
END_TEST

/* A failing p2p call's status comes back unchanged, nothing hangs, nothing leaks. */
START_TEST(test_error_propagation)
{
    int na;
    const cohort_algo_t *algos = cohort_algos(&na);
    for (int i = 0; i < na; i++) {
        int triggered = 0;
        if (!strcmp(algos[i].name, "hier"))
            continue;   /* needs sub-communicators: tests/netns */
        for (int n = 3; n <= 4; n++) {
            for (int nth = 1; nth <= 5; nth++) {
                simple_run_t s;
                memset(&s, 0, sizeof(s));
                s.w = mock_world_create(n);
                s.coll = algos[i].coll;
                s.fn = algos[i].fn;
                for (int r = 0; r < n; r++)
                    s.count[r] = 300;
                mock_world_set_chunk(s.w, 64);
                mock_world_set_rendezvous(s.w, nth % 2);
                mock_world_set_timeout(s.w, 10);
                int victim = (nth + i) % n;
                mock_world_fail_call(s.w, victim, nth, COHORT_ERR_TRANSPORT);
                simple_run(&s, n);
                for (int r = 0; r < n; r++) {
                    if (r == victim && s.st[r] == COHORT_ERR_TRANSPORT) {
                        triggered++;
                        ck_assert_msg(strstr(s.err[r], "injected"), "%s", s.err[r]);
                    } else {
                        /* The victim may make fewer calls than nth (a leaf, a chain end). */
                        ck_assert_msg(s.st[r] == COHORT_SUCCESS || s.st[r] == COHORT_ERR_ABORTED,
                                      "%s/%s n=%d call %d: rank %d returned %d: %s",
                                      cohort_coll_name(algos[i].coll), algos[i].name, n, nth, r,
                                      s.st[r], s.err[r]);
                    }
                }
                mock_world_destroy(s.w);
            }
        }
        ck_assert_msg(triggered >= 3, "%s/%s: the injected failure fired only %d times",
                      cohort_coll_name(algos[i].coll), algos[i].name, triggered);
    }
}
END_TEST

/* Ranks that disagree on the count get an error, not corrupted memory or a hang. */
START_TEST(test_count_mismatch)
{
    int na;
    const cohort_algo_t *algos = cohort_algos(&na);
    for (int i = 0; i < na; i++) {
        if (algos[i].coll == COHORT_COLL_BARRIER || !strcmp(algos[i].name, "hier"))
            continue;   /* hier needs sub-communicators: tests/netns */
        simple_run_t s;
        memset(&s, 0, sizeof(s));
        s.w = mock_world_create(3);
        s.coll = algos[i].coll;
        s.fn = algos[i].fn;
        s.count[0] = s.count[1] = 100;
        s.count[2] = 101;
        mock_world_set_chunk(s.w, 1 << 20);
        mock_world_set_timeout(s.w, 10);
        simple_run(&s, 3);
        int mismatch = 0;
        for (int r = 0; r < 3; r++) {
            ck_assert_msg(s.st[r] == COHORT_SUCCESS || s.st[r] == COHORT_ERR_MISMATCH ||
                              s.st[r] == COHORT_ERR_ABORTED,
                          "%s/%s rank %d: %d %s", cohort_coll_name(algos[i].coll), algos[i].name,
                          r, s.st[r], s.err[r]);
            mismatch |= s.st[r] == COHORT_ERR_MISMATCH;
        }
        ck_assert_msg(mismatch, "%s/%s: nobody noticed the mismatch",
                      cohort_coll_name(algos[i].coll), algos[i].name);
        mock_world_destroy(s.w);
    }
}
END_TEST

START_TEST(test_values_representable)
{
    /* The generated inputs must survive the round trip through every dtype unchanged. */
    for (int dt = 0; dt < COHORT_DTYPE_COUNT; dt++)
        for (int op = 0; op < COHORT_OP_COUNT; op++)
            for (int r = 0; r < 8; r++)
                for (size_t i = 0; i < 200; i++) {
                    double x = gen((cohort_dtype_t)dt, (cohort_op_t)op, r, i);
                    unsigned char cell[8];
                    put(cell, (cohort_dtype_t)dt, 0, x);
                    double y = get(cell, (cohort_dtype_t)dt, 0);
                    if (dt != COHORT_FLOAT32)
                        ck_assert_msg(x == y, "%s %s: %.17g became %.17g", dt_str(dt),
                                      op_str(op), x, y);
                }
}
END_TEST

static Suite *coll_suite(void)
{
    Suite *s = suite_create("coll");
    /* Each algorithm for n = 2 .. 8; the ring and chain ones also on permuted rings (loop index
     * n * 2 + permutation - 1: n = 3 .. 6, both orders). */
    struct { const char *name; const TTest *fn; int from, to; } alg[] = {
        {"allreduce_ring", test_allreduce_ring, 2, 9},
        {"allreduce_rd", test_allreduce_rd, 2, 9},
        {"broadcast_chain", test_broadcast_chain, 2, 9},
        {"broadcast_tree", test_broadcast_tree, 2, 9},
        {"reduce_tree", test_reduce_tree, 2, 9},
        {"allgather_ring", test_allgather_ring, 2, 9},
        {"reduce_scatter_ring", test_reduce_scatter_ring, 2, 9},
        {"alltoall_pairwise", test_alltoall_pairwise, 2, 9},
        {"barrier_dissemination", test_barrier_dissemination, 2, 9},
        {"perm_allreduce_ring", test_perm_allreduce_ring, 3 * 2, 7 * 2},
        {"perm_broadcast_chain", test_perm_broadcast_chain, 3 * 2, 7 * 2},
        {"perm_allgather_ring", test_perm_allgather_ring, 3 * 2, 7 * 2},
        {"perm_reduce_scatter_ring", test_perm_reduce_scatter_ring, 3 * 2, 7 * 2},
    };
    for (size_t i = 0; i < sizeof(alg) / sizeof(alg[0]); i++) {
        TCase *tc = tcase_create(alg[i].name);
        tcase_set_timeout(tc, 120);
        tcase_add_loop_test(tc, alg[i].fn, alg[i].from, alg[i].to);
        suite_add_tcase(s, tc);
    }
    TCase *tc = tcase_create("select");
    tcase_add_test(tc, test_algos_table);
    tcase_add_test(tc, test_select);
    tcase_add_test(tc, test_values_representable);
    suite_add_tcase(s, tc);
    tc = tcase_create("behaviour");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_chunking);
    tcase_add_test(tc, test_error_propagation);
    tcase_add_test(tc, test_count_mismatch);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    /* The error tests provoke failures on purpose; keep their WARN lines out of the log unless
     * asked for. */
    setenv("COHORT_DEBUG", "NONE", 0);
    SRunner *sr = srunner_create(coll_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
