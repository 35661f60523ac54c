/* SPDX-License-Identifier: BSD-3-Clause */
/* cohort-bench's timing of one size: the checked call, the warm-up and the timed loop of each
 * placement (blocking, --nonblocking, --group, with --touch or --fresh), the timings reduced
 * across ranks into one row, and the --overlap measurement. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cohort/cohort.h"
#include "bench.h"

/* broadcast has one buffer and barrier none: no separate in-place run (printed N/A). */
static int coll_has_inplace(coll_t c)
{
    return c != C_BROADCAST && c != C_BARRIER;
}

static const size_t dtype_sizes[COHORT_DTYPE_COUNT] = { 1, 1, 4, 4, 8, 8, 2, 2, 4, 8 };

/* What one rank measured for one placement. */
typedef struct {
    double t_us;                 /* per-iteration average over the timed loop */
    double rep_us[MAX_REPS];     /* per-iteration average of each repetition */
    double wrong;
} meas_t;

/* nccl-tests' getCollByteCount: sizes round down to what the collective can move. */
static geom_t geometry(coll_t coll, size_t size, size_t esize, int n)
{
    geom_t g;
    size_t c = size / esize, per = c / (size_t)n;
    memset(&g, 0, sizeof g);
    g.esize = esize;
    switch (coll) {
    case C_ALLREDUCE:
    case C_BROADCAST:
    case C_REDUCE: g.count = g.sendcount = g.recvcount = c; break;
    case C_ALLGATHER: g.count = g.sendcount = per; g.recvcount = per * (size_t)n; break;
    case C_REDUCE_SCATTER: g.count = g.recvcount = per; g.sendcount = per * (size_t)n; break;
    case C_ALLTOALL: g.count = per; g.sendcount = g.recvcount = per * (size_t)n; break;
    default: break;
    }
    g.bytes = (g.sendcount > g.recvcount ? g.sendcount : g.recvcount) * esize;
    return g;
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static cohort_status_t run_coll(bench_t *b, const geom_t *g, cohort_dtype_t dt, cohort_op_t op,
                                int inplace, size_t shift)
{
    char *s = b->sendbuf ? b->sendbuf + shift : NULL, *r = b->recvbuf ? b->recvbuf + shift : NULL;
    size_t blk = g->count * g->esize * (size_t)b->rank;
    switch (b->o.coll) {
    case C_ALLREDUCE:
        return cohort_allreduce(b->comm, inplace ? r : s, r, g->count, dt, op);
    case C_BROADCAST:
        return cohort_broadcast(b->comm, r, g->count, dt, b->o.root);
    case C_REDUCE:
        return cohort_reduce(b->comm, inplace ? r : s, r, g->count, dt, op, b->o.root);
    case C_ALLGATHER:
        return cohort_allgather(b->comm, inplace ? r + blk : s, r, g->count, dt);
    case C_REDUCE_SCATTER:
        return inplace ? cohort_reduce_scatter(b->comm, r, r + blk, g->count, dt, op)
                       : cohort_reduce_scatter(b->comm, s, r, g->count, dt, op);
    case C_ALLTOALL:
        return cohort_alltoall(b->comm, inplace ? r : s, r, g->count, dt);
    case C_BARRIER:
        return cohort_barrier(b->comm);
    default:
        return COHORT_ERR_INVALID_ARG;
    }
}

/* run_coll's non-blocking form. */
static cohort_status_t issue_coll(bench_t *b, const geom_t *g, cohort_dtype_t dt, cohort_op_t op,
                                  int inplace, size_t shift, cohort_request_t **q)
{
    char *s = b->sendbuf ? b->sendbuf + shift : NULL, *r = b->recvbuf ? b->recvbuf + shift : NULL;
    size_t blk = g->count * g->esize * (size_t)b->rank;
    switch (b->o.coll) {
    case C_ALLREDUCE:
        return cohort_iallreduce(b->comm, inplace ? r : s, r, g->count, dt, op, q);
    case C_BROADCAST:
        return cohort_ibroadcast(b->comm, r, g->count, dt, b->o.root, q);
    case C_REDUCE:
        return cohort_ireduce(b->comm, inplace ? r : s, r, g->count, dt, op, b->o.root, q);
    case C_ALLGATHER:
        return cohort_iallgather(b->comm, inplace ? r + blk : s, r, g->count, dt, q);
    case C_REDUCE_SCATTER:
        return inplace ? cohort_ireduce_scatter(b->comm, r, r + blk, g->count, dt, op, q)
                       : cohort_ireduce_scatter(b->comm, s, r, g->count, dt, op, q);
    case C_ALLTOALL:
        return cohort_ialltoall(b->comm, inplace ? r : s, r, g->count, dt, q);
    case C_BARRIER:
        return cohort_ibarrier(b->comm, q);
    default:
        return COHORT_ERR_INVALID_ARG;
    }
}

/* One timing round of --nonblocking / --group: calls it0 .. end-1, each on its own part of the
 * buffers (part = call mod parts), all complete when it returns. */
static cohort_status_t timed_round(bench_t *b, const geom_t *g, cohort_dtype_t dt,
                                   cohort_op_t op, int inplace, int it0, int end, size_t parts,
                                   cohort_request_t **ring)
{
    size_t total = g->bytes;
    cohort_status_t st = COHORT_SUCCESS;
    if (b->o.group) {
        int gs = b->o.group;
        for (int it = it0; it < end && !st; it += gs) {
            int last = it + gs < end ? it + gs : end;
            st = cohort_group_start(b->comm);
            for (int k = it; k < last && !st; k++)
                st = run_coll(b, g, dt, op, inplace, total * ((size_t)k % parts));
            cohort_status_t e = cohort_group_end(b->comm);
            if (!st) st = e;
        }
        return st;
    }
    int nb = b->o.nonblocking, out = 0, oldest = 0;
    for (int it = it0; it < end; it++) {
        if (out == nb) {   /* the oldest frees its slot */
            cohort_status_t w = cohort_wait(ring[oldest]);
            ring[oldest] = NULL;
            if (w && !st) st = w;
            oldest = (oldest + 1) % nb;
            out--;
        }
        if (st) break;
        int slot = (oldest + out) % nb;
        st = issue_coll(b, g, dt, op, inplace, total * ((size_t)it % parts), &ring[slot]);
        if (st) break;
        out++;
    }
    for (; out > 0; out--) {
        cohort_status_t w = cohort_wait(ring[oldest]);
        ring[oldest] = NULL;
        if (w && !st) st = w;
        oldest = (oldest + 1) % nb;
    }
    return st;
}

static void call_failed(bench_t *b, const char *what, const geom_t *g, cohort_dtype_t dt,
                        cohort_op_t op, int inplace, cohort_status_t st)
{
    char ctx[160];
    if (b->o.coll == C_BARRIER)
        snprintf(ctx, sizeof ctx, "barrier");
    else
        snprintf(ctx, sizeof ctx, "%s %s, %zu bytes (count %zu), %s%s%s",
                 bench_coll_names[b->o.coll], inplace ? "in place" : "out of place", g->bytes,
                 g->count, bench_dtype_names[dt], bench_coll_reduces(b->o.coll) ? " " : "",
                 bench_coll_reduces(b->o.coll) ? bench_op_names[op] : "");
    snprintf(b->failmsg, sizeof b->failmsg, "rank %d: %s: %s failed: %s: %s", b->rank, what, ctx,
             cohort_strerror(st), cohort_last_error());
    fprintf(stderr, "cohort-bench: %s\n", b->failmsg);
    b->failed = 1;
}

/* --touch: what a training step does around a collective: it writes the input (a store to every
 * cache line, of the value already there so that results stay checkable: the line becomes this
 * core's, wherever it was) and reads the result. */
static void touch(bench_t *b, size_t off, size_t total, int inplace)
{
    volatile unsigned char *s = (volatile unsigned char *)(inplace ? b->recvbuf : b->sendbuf) + off;
    const volatile unsigned char *r = (const volatile unsigned char *)b->recvbuf + off;
    unsigned char sink = 0;
    for (size_t k = 0; k < total; k += 64) {
        s[k] = s[k];
        sink ^= r[k];
    }
    (void)sink;
}

/* --fresh: buffers of len bytes for one call, put in place of the run's (saved in keep), as a
 * framework's allocator hands out tensors: malloc'd (or from cohort_mem_alloc), written once
 * (zeros: a tensor's pages are touched before it is communicated). 0, or -1 without memory. */
static int fresh_get(bench_t *b, size_t len, char **keep)
{
    void *s = NULL, *r = NULL;
    if (len == 0) len = 1;
    if (b->o.cohort_mem) {
        if (cohort_mem_alloc(len, &s) || cohort_mem_alloc(len, &r)) {
            cohort_mem_free(s);
            return -1;
        }
    } else if (!(s = malloc(len)) || !(r = malloc(len))) {
        free(s);
        return -1;
    }
    memset(s, 0, len);
    memset(r, 0, len);
    keep[0] = b->sendbuf;
    keep[1] = b->recvbuf;
    b->sendbuf = s;
    b->recvbuf = r;
    return 0;
}

static void fresh_put(bench_t *b, char **keep)
{
    if (b->o.cohort_mem) {
        cohort_mem_free(b->sendbuf);
        cohort_mem_free(b->recvbuf);
    } else {
        free(b->sendbuf);
        free(b->recvbuf);
    }
    b->sendbuf = keep[0];
    b->recvbuf = keep[1];
}

/* One warm-up or timed call; with --fresh on buffers of its own, and *us its time (0 otherwise:
 * two clock reads per call would weigh on the smallest calls, which the loop times whole). */
static cohort_status_t one_call(bench_t *b, const geom_t *g, cohort_dtype_t dt, cohort_op_t op,
                                int inplace, size_t off, double *us)
{
    char *keep[2] = { NULL, NULL };
    int fresh = b->o.fresh && b->o.coll != C_BARRIER;
    if (fresh && fresh_get(b, g->bytes, keep)) {
        fprintf(stderr, "cohort-bench: rank %d: no memory for --fresh buffers of %zu bytes\n",
                b->rank, g->bytes);
        return COHORT_ERR_NO_MEMORY;
    }
    if (fresh) off = 0;
    if (b->o.touch && b->o.coll != C_BARRIER) touch(b, off, g->bytes, inplace);
    double t = fresh ? now_us() : 0;
    cohort_status_t st = run_coll(b, g, dt, op, inplace, off);
    *us = fresh ? now_us() - t : 0;
    if (fresh) fresh_put(b, keep);
    return st;
}

/* Check (one call), warm up, time. Returns 0, or -1 after a failed call (reported). */
static int run_placement(bench_t *b, const geom_t *g, cohort_dtype_t dt, cohort_op_t op,
                         int inplace, unsigned seed, meas_t *m, char *algo, size_t algolen)
{
    coll_t coll = b->o.coll;
    valspec_t v = bench_valspec(b->n, dt, op, bench_coll_reduces(coll), seed);
    cohort_status_t st;
    size_t total = g->bytes, steps = total ? b->alloc / total : 1;
    if (steps < 1 || b->o.same_buffer)
        steps = 1;
    memset(m, 0, sizeof *m);
    m->wrong = -1;

    /* The checked call (also the first, synchronising call, as in nccl-tests). */
    if (b->o.check && coll != C_BARRIER)
        bench_fill(b, g, &v, inplace);
    st = run_coll(b, g, dt, op, inplace, 0);
    if (st) {
        call_failed(b, "checked call", g, dt, op, inplace, st);
        return -1;
    }
    if (b->o.check && coll != C_BARRIER)
        m->wrong = (double)bench_count_wrong(b, g, &v, inplace);

    /* In place, repeated calls would feed each result back in (sums and products grow until
     * integers overflow, which is undefined in C, and floats reach inf): time on zeros, which
     * stay zeros under every op. Out of place the inputs never change. */
    if (inplace && coll != C_BARRIER)
        memset(b->recvbuf, 0, steps * total);

    int burst = b->o.nonblocking ? b->o.nonblocking : b->o.group;
    size_t parts = 0;
    cohort_request_t **ring = NULL;
    if (burst) {
        /* each call in flight on its own part of the buffers */
        parts = total ? b->alloc / total : 1;
        if (parts < 1) parts = 1;
        ring = calloc((size_t)(b->o.nonblocking ? b->o.nonblocking : 1), sizeof *ring);
        if (!ring) {
            fprintf(stderr, "cohort-bench: rank %d: no memory\n", b->rank);
            return -1;
        }
    }

    /* Like nccl-tests, move through the buffer from one iteration to the next. --nonblocking
     * and --group warm up as they are timed, one full burst at least (unless -w 0): what a
     * burst pays once (the fusion buffer's allocation and first touch, the peers' mappings of
     * it) is paid before the timing, as a training loop pays it at its first step only. */
    double us;
    if (ring) {
        int wn = b->o.warmup == 0 ? 0 : b->o.warmup > burst ? b->o.warmup : burst;
        st = timed_round(b, g, dt, op, inplace, 0, wn, parts, ring);
        if (st) {
            call_failed(b, "warm-up", g, dt, op, inplace, st);
            free(ring);
            return -1;
        }
    } else {
        for (int it = 0; it < b->o.warmup; it++) {
            st = one_call(b, g, dt, op, inplace, total * ((size_t)it % steps), &us);
            if (st) {
                call_failed(b, "warm-up", g, dt, op, inplace, st);
                return -1;
            }
        }
    }
    st = cohort_barrier(b->comm);
    if (st) {
        call_failed(b, "barrier before the timed loop", g, dt, op, inplace, st);
        free(ring);
        return -1;
    }
    int iters = b->o.iters, it = 0;
    /* The loop's time, or with --fresh the calls' own (not the allocations around them). */
    double t0 = now_us(), calls = 0;
    for (int rep = 0; rep < b->nreps; rep++) {
        int end = (int)((long long)iters * (rep + 1) / b->nreps);
        int n_in_rep = end - it;
        double in_rep = 0;
        if (ring) {
            st = timed_round(b, g, dt, op, inplace, it, end, parts, ring);
            it = end;
            if (st) {
                call_failed(b, "timed call", g, dt, op, inplace, st);
                free(ring);
                return -1;
            }
        }
        for (; it < end; it++) {
            st = one_call(b, g, dt, op, inplace, total * ((size_t)it % steps), &us);
            if (st) {
                call_failed(b, "timed call", g, dt, op, inplace, st);
                return -1;
            }
            in_rep += us;
        }
        double t1 = now_us(), took = b->o.fresh && coll != C_BARRIER ? in_rep : t1 - t0;
        m->rep_us[rep] = n_in_rep > 0 ? took / n_in_rep : 0;
        calls += took;
        t0 = t1;
    }
    free(ring);
    m->t_us = calls / iters;
    if (algo) {
        const char *a = cohort_comm_last_algo(b->comm);
        snprintf(algo, algolen, "%s", a && *a ? a : "?");
    }
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void finish_place(const bench_t *b, place_res_t *p, double mine, double mn, double avg,
                         double mx, double wrong, const double *repmax, size_t bytes)
{
    double reps[MAX_REPS];
    p->valid = 1;
    p->min_us = mn;
    p->avg_us = avg;
    p->max_us = mx;
    switch (b->o.average) {
    case 0: p->time_us = mine; break;      /* printed by rank 0: its own time */
    case 2: p->time_us = mn; break;
    case 3: p->time_us = mx; break;
    default: p->time_us = avg; break;
    }
    double f = bench_busbw_factor(b->o.coll, b->n);
    p->algbw = p->time_us > 0 ? (double)bytes / (p->time_us * 1e-6) / 1e9 : 0;
    p->busbw = p->algbw * f;
    p->wrong = wrong;
    memcpy(reps, repmax, sizeof(double) * (size_t)b->nreps);
    qsort(reps, (size_t)b->nreps, sizeof reps[0], cmp_double);
    p->med_us = b->nreps % 2 ? reps[b->nreps / 2]
                             : 0.5 * (reps[b->nreps / 2 - 1] + reps[b->nreps / 2]);
    p->best_us = reps[0];
}

static int push_result(bench_t *b, const result_t *r)
{
    if (b->nres == b->capres) {
        size_t cap = b->capres ? 2 * b->capres : 64;
        result_t *nr = realloc(b->res, cap * sizeof *nr);
        if (!nr)
            return -1;
        b->res = nr;
        b->capres = cap;
    }
    b->res[b->nres++] = *r;
    return 0;
}

/* One row: both placements, then the reductions across ranks. Returns -1 on failure. */
int bench_size(bench_t *b, size_t size, cohort_dtype_t dt, cohort_op_t op, unsigned seed)
{
    coll_t coll = b->o.coll;
    geom_t g = coll == C_BARRIER ? geometry(coll, 0, 1, b->n)
                                 : geometry(coll, size, dtype_sizes[dt], b->n);
    meas_t mo, mi;
    result_t r;
    memset(&r, 0, sizeof r);
    memset(&mi, 0, sizeof mi);
    r.bytes = g.bytes;
    r.count = g.count;
    r.dtype = dt;
    r.has_dtype = coll != C_BARRIER;
    r.has_op = bench_coll_reduces(coll);
    r.op = op;
    r.root = bench_coll_has_root(coll) ? b->o.root : -1;

    if (run_placement(b, &g, dt, op, 0, seed, &mo, r.algo, sizeof r.algo))
        return -1;
    int inplace = coll_has_inplace(coll);
    if (inplace && run_placement(b, &g, dt, op, 1, seed + 1, &mi, NULL, 0))
        return -1;

    /* Across ranks with the library itself: max of (t, -t, wrong, reps) and sum of t. */
    enum { NMAX = 6 + 2 * MAX_REPS };
    double mxin[NMAX], mxout[NMAX], smin[2], smout[2];
    int nr = b->nreps;
    mxin[0] = mo.t_us;
    mxin[1] = mi.t_us;
    mxin[2] = -mo.t_us;
    mxin[3] = -mi.t_us;
    mxin[4] = mo.wrong;
    mxin[5] = mi.wrong;
    for (int k = 0; k < nr; k++) {
        mxin[6 + k] = mo.rep_us[k];
        mxin[6 + nr + k] = mi.rep_us[k];
    }
    smin[0] = mo.t_us;
    smin[1] = mi.t_us;
    cohort_status_t st = cohort_allreduce(b->comm, mxin, mxout, (size_t)(6 + 2 * nr),
                                          COHORT_FLOAT64, COHORT_MAX);
    if (st == COHORT_SUCCESS)
        st = cohort_allreduce(b->comm, smin, smout, 2, COHORT_FLOAT64, COHORT_SUM);
    if (st) {
        call_failed(b, "reducing the timings (float64 allreduce)", &g, dt, op, 0, st);
        return -1;
    }
    finish_place(b, &r.oop, mo.t_us, -mxout[2], smout[0] / b->n, mxout[0], mxout[4], mxout + 6,
                 g.bytes);
    if (inplace)
        finish_place(b, &r.ip, mi.t_us, -mxout[3], smout[1] / b->n, mxout[1], mxout[5],
                     mxout + 6 + nr, g.bytes);
    if (b->rank == 0) {
        bench_print_row(b, &r);
        if (push_result(b, &r)) {
            fprintf(stderr, "cohort-bench: out of memory keeping results\n");
            /* not fatal for the other ranks: keep going without storing */
        }
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */

/* --overlap: how much of an allreduce hides behind computation. */
static volatile double overlap_sink;
static void spin(long n)
{
    double acc = 0;
    for (long i = 0; i < n; i++) acc += (double)i * 1e-9;
    overlap_sink = acc;
}

static double max_all(bench_t *b, double v)
{
    double m = v;
    if (cohort_allreduce(b->comm, &v, &m, 1, COHORT_FLOAT64, COHORT_MAX)) return -1;
    return m;
}

static int cmp_d(const void *x, const void *y)
{
    double a = *(const double *)x, c = *(const double *)y;
    return (a > c) - (a < c);
}

int bench_overlap_size(bench_t *b, size_t size)
{
    size_t n = size / 4;
    if (!n) return 0;
    float *s = (float *)(void *)b->sendbuf, *r = (float *)(void *)b->recvbuf;
    for (size_t i = 0; i < n; i++) s[i] = 1.0f;
    enum { REPS = 5 };
    double comm[REPS], comp[REPS], both[REPS];
    long per_us = 0;
    /* the spin's rate on this rank */
    double t0 = now_us();
    spin(10000000);
    double rate = 1e7 / (now_us() - t0);
    for (int k = -1; k < REPS; k++) {   /* k = -1: warm-up */
        if (cohort_barrier(b->comm)) return -1;
        t0 = now_us();
        if (cohort_allreduce(b->comm, s, r, n, COHORT_FLOAT32, COHORT_SUM)) return -1;
        double c = max_all(b, now_us() - t0);
        if (c < 0) return -1;
        if (k < 0) {
            per_us = (long)(rate * c);   /* compute as long as the blocking allreduce takes */
            continue;
        }
        comm[k] = c;
        if (cohort_barrier(b->comm)) return -1;
        t0 = now_us();
        spin(per_us);
        comp[k] = max_all(b, now_us() - t0);
        if (cohort_barrier(b->comm)) return -1;
        cohort_request_t *q;
        t0 = now_us();
        if (cohort_iallreduce(b->comm, s, r, n, COHORT_FLOAT32, COHORT_SUM, &q)) return -1;
        spin(per_us);
        if (cohort_wait(q)) return -1;
        both[k] = max_all(b, now_us() - t0);
        if (comp[k] < 0 || both[k] < 0) return -1;
    }
    qsort(comm, REPS, sizeof *comm, cmp_d);
    qsort(comp, REPS, sizeof *comp, cmp_d);
    qsort(both, REPS, sizeof *both, cmp_d);
    double a = comm[REPS / 2], c = comp[REPS / 2], t = both[REPS / 2];
    if (b->rank == 0)
        printf("OVERLAP,%d,%zu,comm_us=%.1f,compute_us=%.1f,both_us=%.1f,"
               "both_over_longer=%.2f\n", b->n, n * 4, a, c, t, t / (a > c ? a : c));
    return 0;
}
