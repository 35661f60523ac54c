/* SPDX-License-Identifier: BSD-3-Clause */
/* Multi-process correctness test, run as ranks under cohortrun:
 *   cohortrun -np N tests/mp/collcheck [--big] [--mem cohort|mixed]
 * Every collective x dtype x op x in/out-of-place at sizes 0, 1, odd, around the pipeline chunk,
 * and (with --big) several MiB, compared element by element with a reference computed locally
 * from the same deterministic inputs. --mem cohort: every buffer from cohort_mem_alloc (the shm
 * node collectives then read them in place); mixed: on even ranks only. --nodump: the rank is
 * not dumpable, so that ranks of another user than root can neither map its memory nor read it
 * by CMA (the fallbacks). --colocate: after creation every rank moves onto one CPU (cohort saw
 * enough CPUs, so its waits do not know that they share one) and runs 100000 tiny allreduces,
 * which must burn less than 10 s of CPU (a pure spin would cost each one COHORT_SPIN_US). Also split,
 * OOB init, count mismatch and bad arguments.
 * Prints one summary line per rank and "N passed, N failed" on rank 0; exits 1 on any failure. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE   /* sched_setaffinity */
#endif
#include <cohort/cohort.h>

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>

#include "elems.h"

static int rank, nranks;
static long passed, failed;
static int cohort_mem;   /* --mem: buffers from cohort_mem_alloc on this rank */

/* Buffers of the collectives: malloc, or cohort_mem_alloc with --mem. */
static void *xalloc(size_t n)
{
    void *p = NULL;
    if (!cohort_mem) return malloc(n);
    cohort_status_t st = cohort_mem_alloc(n, &p);
    if (st) {
        fprintf(stderr, "[rank %d] cohort_mem_alloc(%zu): %s\n", rank, n, cohort_last_error());
        exit(1);
    }
    return p;
}

static void xfree(void *p)
{
    if (!cohort_mem) {
        free(p);
        return;
    }
    cohort_status_t st = cohort_mem_free(p);
    CHECK(st == COHORT_SUCCESS, "cohort_mem_free: %s", cohort_last_error());
}

static double ref_reduce(size_t i, cohort_dtype_t t, cohort_op_t op, int salt, int block_off)
{
    return ref_reduce_n(nranks, i, t, op, salt, block_off);
}

static const char *dn(cohort_dtype_t t) { return cohort_dtype_name(t); }
static const char *on(cohort_op_t o) { return cohort_op_name(o); }

/* ---- the collectives ---- */

static cohort_comm_t *comm;

static void check_vs_ref(const char *what, const void *buf, size_t count, cohort_dtype_t t,
                         cohort_op_t op, int salt, int block_off, int inplace)
{
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < count; i++) {
        double want = ref_reduce(i, t, op, salt, block_off);
        if (!close_enough(get(buf, i, t), want, t)) {
            if (!bad) first = i;
            bad++;
        }
    }
    CHECK(bad == 0, "%s count %zu %s %s %s: %zu wrong elements, first at %zu: got %g want %g",
          what, count, dn(t), on(op), inplace ? "in-place" : "out-of-place", bad, first,
          bad ? get(buf, first, t) : 0.0, bad ? ref_reduce(first, t, op, salt, block_off) : 0.0);
}

static void do_allreduce(size_t count, cohort_dtype_t t, cohort_op_t op, int inplace)
{
    size_t es = cohort_dtype_size(t);
    char *s = xalloc(count * es + 8), *r = xalloc(count * es + 8), *keep = xalloc(count * es + 8);
    for (size_t i = 0; i < count; i++) put(s, i, t, input(rank, i, t, op, 1));
    memcpy(keep, s, count * es);
    if (inplace) memcpy(r, s, count * es);
    cohort_status_t st = cohort_allreduce(comm, inplace ? r : s, r, count, t, op);
    CHECK(st == COHORT_SUCCESS, "allreduce count %zu %s %s: %s: %s", count, dn(t), on(op),
          cohort_strerror(st), cohort_last_error());
    if (!st) check_vs_ref("allreduce", r, count, t, op, 1, 0, inplace);
    if (!inplace) CHECK(!memcmp(s, keep, count * es), "allreduce modified sendbuf");
    xfree(s);
    xfree(r);
    xfree(keep);
}

static void do_reduce(size_t count, cohort_dtype_t t, cohort_op_t op, int inplace, int root)
{
    size_t es = cohort_dtype_size(t);
    char *s = xalloc(count * es + 8), *r = xalloc(count * es + 8);
    for (size_t i = 0; i < count; i++) put(s, i, t, input(rank, i, t, op, 2));
    if (inplace) memcpy(r, s, count * es);
    cohort_status_t st = cohort_reduce(comm, inplace ? r : s, rank == root ? r : NULL, count, t,
                                       op, root);
    CHECK(st == COHORT_SUCCESS, "reduce count %zu %s %s root %d: %s: %s", count, dn(t), on(op),
          root, cohort_strerror(st), cohort_last_error());
    if (!st && rank == root) check_vs_ref("reduce", r, count, t, op, 2, 0, inplace);
    xfree(s);
    xfree(r);
}

static void do_reduce_scatter(size_t count, cohort_dtype_t t, cohort_op_t op, int inplace)
{
    size_t es = cohort_dtype_size(t), total = count * (size_t)nranks;
    char *s = xalloc(total * es + 8), *r = xalloc(count * es + 8);
    for (size_t i = 0; i < total; i++) put(s, i, t, input(rank, i, t, op, 3));
    void *out = inplace ? s + (size_t)rank * count * es : r;
    cohort_status_t st = cohort_reduce_scatter(comm, s, out, count, t, op);
    CHECK(st == COHORT_SUCCESS, "reduce_scatter count %zu %s %s: %s: %s", count, dn(t), on(op),
          cohort_strerror(st), cohort_last_error());
    if (!st) check_vs_ref("reduce_scatter", out, count, t, op, 3, rank * (int)count, inplace);
    xfree(s);
    xfree(r);
}

static void check_blocks(const char *what, const char *buf, size_t count, cohort_dtype_t t,
                         int (*src)(int block), size_t (*idx)(int block, size_t i), int salt)
{
    size_t bad = 0;
    for (int b = 0; b < nranks; b++)
        for (size_t i = 0; i < count; i++) {
            double want = input(src(b), idx(b, i), t, COHORT_SUM, salt);
            if (get(buf, (size_t)b * count + i, t) != want) bad++;
        }
    CHECK(bad == 0, "%s count %zu %s: %zu wrong elements", what, count, dn(t), bad);
}

static int src_self(int b) { return b; }
static size_t idx_plain(int b, size_t i) { (void)b; return i; }
static size_t idx_a2a(int b, size_t i) { (void)b; return (size_t)rank * 1000003u + i; }

static void do_allgather(size_t count, cohort_dtype_t t, int inplace)
{
    size_t es = cohort_dtype_size(t);
    char *s = xalloc(count * es + 8), *r = xalloc(count * es * (size_t)nranks + 8);
    for (size_t i = 0; i < count; i++) put(s, i, t, input(rank, i, t, COHORT_SUM, 4));
    if (inplace) memcpy(r + (size_t)rank * count * es, s, count * es);
    cohort_status_t st = cohort_allgather(comm, inplace ? r + (size_t)rank * count * es : s, r,
                                          count, t);
    CHECK(st == COHORT_SUCCESS, "allgather count %zu %s: %s: %s", count, dn(t),
          cohort_strerror(st), cohort_last_error());
    if (!st) check_blocks("allgather", r, count, t, src_self, idx_plain, 4);
    xfree(s);
    xfree(r);
}

static void do_alltoall(size_t count, cohort_dtype_t t, int inplace)
{
    size_t es = cohort_dtype_size(t), total = count * (size_t)nranks;
    char *s = xalloc(total * es + 8), *r = xalloc(total * es + 8);
    /* block b of rank q's sendbuf holds input(q, b*1000003 + i) */
    for (int b = 0; b < nranks; b++)
        for (size_t i = 0; i < count; i++)
            put(s, (size_t)b * count + i, t, input(rank, (size_t)b * 1000003u + i, t, COHORT_SUM, 5));
    if (inplace) memcpy(r, s, total * es);
    cohort_status_t st = cohort_alltoall(comm, inplace ? r : s, r, count, t);
    CHECK(st == COHORT_SUCCESS, "alltoall count %zu %s: %s: %s", count, dn(t),
          cohort_strerror(st), cohort_last_error());
    /* block b of my recvbuf came from rank b: input(b, rank*1000003 + i) */
    if (!st) check_blocks("alltoall", r, count, t, src_self, idx_a2a, 5);
    xfree(s);
    xfree(r);
}

static void do_broadcast(size_t count, cohort_dtype_t t, int root)
{
    size_t es = cohort_dtype_size(t);
    char *b = xalloc(count * es + 8);
    for (size_t i = 0; i < count; i++)
        put(b, i, t, rank == root ? input(root, i, t, COHORT_SUM, 6) : 0);
    cohort_status_t st = cohort_broadcast(comm, b, count, t, root);
    CHECK(st == COHORT_SUCCESS, "broadcast count %zu %s root %d: %s: %s", count, dn(t), root,
          cohort_strerror(st), cohort_last_error());
    size_t bad = 0;
    for (size_t i = 0; !st && i < count; i++)
        bad += get(b, i, t) != input(root, i, t, COHORT_SUM, 6);
    CHECK(bad == 0, "broadcast count %zu %s root %d: %zu wrong", count, dn(t), root, bad);
    xfree(b);
}

/* ---- other behaviour ---- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double cpu_s(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

static void test_colocated(void)
{
    cpu_set_t set;
    CHECK(sched_getaffinity(0, sizeof set, &set) == 0, "sched_getaffinity");
    int first = 0;
    while (first < CPU_SETSIZE && !CPU_ISSET(first, &set)) first++;
    CPU_ZERO(&set);
    CPU_SET(first, &set);
    CHECK(sched_setaffinity(0, sizeof set, &set) == 0, "sched_setaffinity to CPU %d", first);
    int one = 1, sum = 0, n = 100000;
    double t0 = now_s(), c0 = cpu_s();
    cohort_status_t st = COHORT_SUCCESS;
    for (int i = 0; i < n && !st; i++)
        st = cohort_allreduce(comm, &one, &sum, 1, COHORT_INT32, COHORT_SUM);
    double took = now_s() - t0, cpu = cpu_s() - c0;
    CHECK(st == COHORT_SUCCESS && sum == nranks, "co-located allreduce: %s",
          st ? cohort_last_error() : "wrong sum");
    /* The CPU this rank burnt, not the wall time: a rank that spins while the rank it waits for
     * cannot run (they share the CPU) burns its whole spin window per step (COHORT_SPIN_US, about
     * 50 s for these calls); one that yields burns microseconds. The wall time also counts what
     * other processes on that CPU take, which a loaded machine makes anything (23.5 s once, for
     * 2-3 s alone). */
    CHECK(cpu < 10.0, "%d allreduces of 4 bytes on one CPU burnt %.1f s of CPU (%.1f s wall)", n,
          cpu, took);
    if (rank == 0)
        printf("colocated np=%d: %d allreduces in %.2f s (%.2f s of CPU on rank 0)\n", nranks, n,
               took, cpu);
}

static int oob_over_comm(const void *s, void *r, size_t n, void *ctx)
{
    return cohort_allgather((cohort_comm_t *)ctx, s, r, n, COHORT_UINT8) == COHORT_SUCCESS ? 0 : 1;
}

static void test_split_and_oob(void)
{
    cohort_comm_t *sub = NULL;
    int color = rank % 2;
    cohort_status_t st = cohort_comm_split(comm, color, -rank, &sub);
    CHECK(st == COHORT_SUCCESS && sub, "split: %s: %s", cohort_strerror(st), cohort_last_error());
    if (sub) {
        int expect_size = (nranks + 1 - color) / 2;
        CHECK(cohort_comm_size(sub) == expect_size, "split size %d want %d",
              cohort_comm_size(sub), expect_size);
        /* key = -rank: reversed order */
        int expect_rank = 0;   /* key = -rank: members in descending parent rank */
        for (int r = color; r < nranks; r += 2) expect_rank += r > rank;
        CHECK(cohort_comm_rank(sub) == expect_rank, "split rank %d want %d",
              cohort_comm_rank(sub), expect_rank);
        int v = rank, sum = 0;
        st = cohort_allreduce(sub, &v, &sum, 1, COHORT_INT32, COHORT_SUM);
        int want = 0;
        for (int r = color; r < nranks; r += 2) want += r;
        CHECK(st == COHORT_SUCCESS && sum == want, "allreduce on split: %d want %d (%s)", sum,
              want, cohort_last_error());
        cohort_comm_destroy(sub);
    }
    sub = NULL;
    st = cohort_comm_split(comm, rank == 0 ? -1 : 0, 0, &sub);
    CHECK(st == COHORT_SUCCESS && ((rank == 0) == (sub == NULL)), "split with color -1: %s",
          cohort_last_error());
    if (sub) cohort_comm_destroy(sub);

    cohort_comm_t *oob = NULL;
    st = cohort_comm_init_oob(rank, nranks, oob_over_comm, comm, &oob);
    CHECK(st == COHORT_SUCCESS && oob, "init_oob: %s: %s", cohort_strerror(st),
          cohort_last_error());
    if (oob) {
        double x = rank + 0.5, y = 0;
        st = cohort_allreduce(oob, &x, &y, 1, COHORT_FLOAT64, COHORT_MAX);
        CHECK(st == COHORT_SUCCESS && y == nranks - 0.5, "allreduce on oob comm: %g", y);
        cohort_comm_destroy(oob);
    }
}

/* Ranks 0 and 1 call allreduce with different counts: both must get COHORT_ERR_MISMATCH (not a
 * hang, not corrupted memory), and the communicator then refuses further work. */
static void test_mismatch(void)
{
    cohort_comm_t *pair = NULL;
    cohort_status_t st = cohort_comm_split(comm, rank < 2 ? 0 : -1, 0, &pair);
    CHECK(st == COHORT_SUCCESS, "split for the mismatch test: %s", cohort_last_error());
    if (!pair) return;
    int buf[64] = { 0 }, out[64];
    size_t count = rank == 0 ? 10 : 20;
    st = cohort_allreduce(pair, buf, out, count, COHORT_INT32, COHORT_SUM);
    CHECK(st == COHORT_ERR_MISMATCH && strstr(cohort_last_error(), "rank"),
          "mismatched counts gave %s: %s", cohort_strerror(st), cohort_last_error());
    st = cohort_allreduce(pair, buf, out, 1, COHORT_INT32, COHORT_SUM);
    CHECK(st == COHORT_ERR_MISMATCH, "a broken communicator must refuse work, got %s",
          cohort_strerror(st));
    cohort_comm_destroy(pair);
}

/* cohort_comm_abort from another thread makes a blocked collective return COHORT_ERR_ABORTED
 * promptly: rank 0 waits in an allreduce that rank 1 never joins. */
static void *abort_later(void *arg)
{
    struct timespec ts = { 0, 200 * 1000 * 1000 };
    nanosleep(&ts, NULL);
    cohort_comm_abort((cohort_comm_t *)arg);
    return NULL;
}

static void test_abort(void)
{
    cohort_comm_t *pair = NULL;
    cohort_status_t st = cohort_comm_split(comm, rank < 2 ? 0 : -1, 0, &pair);
    CHECK(st == COHORT_SUCCESS, "split for the abort test: %s", cohort_last_error());
    if (!pair) {
        st = cohort_barrier(comm);   /* the pair's barrier below, for ranks outside it */
        CHECK(st == COHORT_SUCCESS, "barrier after the abort test: %s", cohort_last_error());
        return;
    }
    if (rank == 0) {
        pthread_t t;
        pthread_create(&t, NULL, abort_later, pair);
        int x = 1, y = 0;
        double t0 = now_s();
        st = cohort_allreduce(pair, &x, &y, 1, COHORT_INT32, COHORT_SUM);
        double took = now_s() - t0;
        pthread_join(t, NULL);
        CHECK(st == COHORT_ERR_ABORTED && took < 2.0,
              "abort from another thread: got %s after %.2f s (%s)", cohort_strerror(st), took,
              cohort_last_error());
        st = cohort_barrier(pair);
        CHECK(st == COHORT_ERR_ABORTED, "an aborted communicator refuses work, got %s",
              cohort_strerror(st));
    }
    /* rank 1 keeps its end open (it never joins the allreduce) until rank 0 has checked */
    st = cohort_barrier(comm);
    CHECK(st == COHORT_SUCCESS, "barrier after the abort test: %s", cohort_last_error());
    cohort_comm_destroy(pair);
}

static void test_bad_args(void)
{
    int x = 0;
    cohort_status_t st = cohort_allreduce(NULL, &x, &x, 1, COHORT_INT32, COHORT_SUM);
    CHECK(st == COHORT_ERR_INVALID_ARG && strstr(cohort_last_error(), "comm"),
          "NULL comm: %d %s", st, cohort_last_error());
    st = cohort_allreduce(comm, &x, &x, 1, (cohort_dtype_t)42, COHORT_SUM);
    CHECK(st == COHORT_ERR_INVALID_ARG && strstr(cohort_last_error(), "dtype"), "bad dtype");
    st = cohort_allreduce(comm, &x, &x, 1, COHORT_INT32, (cohort_op_t)9);
    CHECK(st == COHORT_ERR_INVALID_ARG && strstr(cohort_last_error(), "op"), "bad op");
    st = cohort_broadcast(comm, &x, 1, COHORT_INT32, nranks);
    CHECK(st == COHORT_ERR_INVALID_ARG && strstr(cohort_last_error(), "root"), "bad root");
    st = cohort_allreduce(comm, NULL, &x, 1, COHORT_INT32, COHORT_SUM);
    CHECK(st == COHORT_ERR_INVALID_ARG && strstr(cohort_last_error(), "sendbuf"), "NULL sendbuf");
    st = cohort_allgather(comm, &x, &x, SIZE_MAX / 2, COHORT_INT32);
    CHECK(st == COHORT_ERR_INVALID_ARG && strstr(cohort_last_error(), "overflow"), "overflow");
    char buf[64];
    st = cohort_allreduce(comm, buf, buf + 4, 8, COHORT_INT32, COHORT_SUM);
    CHECK(st == COHORT_ERR_INVALID_ARG && strstr(cohort_last_error(), "overlap"), "overlap");
    /* a rejected call must not desynchronise the ranks: the next collective still works */
    int one = 1, sum = 0;
    st = cohort_allreduce(comm, &one, &sum, 1, COHORT_INT32, COHORT_SUM);
    CHECK(st == COHORT_SUCCESS && sum == nranks, "allreduce after bad args: %d", sum);
}

int main(int argc, char **argv)
{
    int big = 0, colocate = 0;
    const char *mem = "malloc";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--big")) {
            big = 1;
        } else if (!strcmp(argv[i], "--colocate")) {
            colocate = 1;
        } else if (!strcmp(argv[i], "--nodump")) {
            /* peers (not root) can then neither open our /proc/<pid>/fd nor read us by CMA */
            prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
        } else if (!strcmp(argv[i], "--mem") && i + 1 < argc &&
                   (!strcmp(argv[i + 1], "cohort") || !strcmp(argv[i + 1], "mixed"))) {
            mem = argv[++i];
        } else {
            fprintf(stderr, "usage: collcheck [--big] [--mem cohort|mixed] [--nodump] "
                    "[--colocate]\n");
            return 2;
        }
    }
    cohort_status_t st = cohort_comm_init(&comm);
    if (st) {
        fprintf(stderr, "cohort_comm_init failed: %s: %s\n", cohort_strerror(st),
                cohort_last_error());
        return 1;
    }
    rank = cohort_comm_rank(comm);
    nranks = cohort_comm_size(comm);
    cohort_mem = !strcmp(mem, "cohort") || (!strcmp(mem, "mixed") && rank % 2 == 0);
    if (colocate) {
        test_colocated();
        cohort_comm_destroy(comm);
        return failed ? 1 : 0;
    }

    const cohort_dtype_t dtypes[] = { COHORT_INT8, COHORT_UINT8, COHORT_INT32, COHORT_UINT32,
                                      COHORT_INT64, COHORT_UINT64, COHORT_FLOAT16,
                                      COHORT_BFLOAT16, COHORT_FLOAT32, COHORT_FLOAT64 };
    const cohort_op_t ops[] = { COHORT_SUM, COHORT_PROD, COHORT_MIN, COHORT_MAX, COHORT_AVG };
    /* 0, 1, odd, a few per rank, and around the default 256 KiB chunk for 4-byte types */
    const size_t small[] = { 0, 1, 7, (size_t)nranks + 1, 1023 };
    const size_t chunky[] = { 65535, 65536, 65537 };

    for (size_t d = 0; d < 10; d++) {
        cohort_dtype_t t = dtypes[d];
        for (size_t o = 0; o < 5; o++)
            for (size_t k = 0; k < sizeof small / sizeof small[0]; k++)
                for (int ip = 0; ip < 2; ip++) {
                    do_allreduce(small[k], t, ops[o], ip);
                    do_reduce_scatter(small[k], t, ops[o], ip);
                    do_reduce(small[k], t, ops[o], ip, (int)(k % (size_t)nranks));
                }
        for (size_t k = 0; k < sizeof small / sizeof small[0]; k++) {
            for (int ip = 0; ip < 2; ip++) {
                do_allgather(small[k], t, ip);
                do_alltoall(small[k], t, ip);
            }
            do_broadcast(small[k], t, nranks - 1 - (int)(k % (size_t)nranks));
        }
    }
    /* chunk boundaries and larger sizes on representative types */
    const cohort_dtype_t some[] = { COHORT_FLOAT32, COHORT_FLOAT16, COHORT_INT64 };
    for (size_t d = 0; d < 3; d++)
        for (size_t k = 0; k < 3; k++)
            for (int ip = 0; ip < 2; ip++) {
                size_t c = chunky[k] / (cohort_dtype_size(some[d]) / 2 + 1) * 2;
                do_allreduce(c, some[d], d == 1 ? COHORT_AVG : COHORT_SUM, ip);
                do_reduce_scatter(c / (size_t)nranks + 1, some[d], COHORT_MAX, ip);
                do_allgather(c / (size_t)nranks + 1, some[d], ip);
                do_alltoall(c / (size_t)nranks + 1, some[d], ip);
                do_broadcast(c, some[d], (int)k % nranks);
                do_reduce(c, some[d], COHORT_MIN, ip, 0);
            }
    if (big) {
        size_t c = (3u << 20) / 4 + 5;   /* ~3 MiB of float32 */
        do_allreduce(c, COHORT_FLOAT32, COHORT_SUM, 0);
        do_allreduce(c, COHORT_BFLOAT16, COHORT_SUM, 1);
        do_broadcast(c, COHORT_FLOAT32, nranks / 2);
        do_allgather(c / (size_t)nranks, COHORT_FLOAT32, 0);
        do_reduce_scatter(c / (size_t)nranks, COHORT_INT32, COHORT_SUM, 1);
        do_alltoall(c / (size_t)nranks, COHORT_UINT8, 0);
        do_reduce(c, COHORT_FLOAT64, COHORT_SUM, 0, nranks - 1);
    }
    st = cohort_barrier(comm);
    CHECK(st == COHORT_SUCCESS, "barrier: %s", cohort_last_error());
    test_split_and_oob();
    test_bad_args();
    if (nranks >= 2) test_mismatch();
    if (nranks >= 2) test_abort();
    st = cohort_barrier(comm);
    CHECK(st == COHORT_SUCCESS, "final barrier: %s", cohort_last_error());

    /* gather the failure counts so rank 0 can report for everyone */
    long counts[2] = { passed, failed }, total[2] = { 0, 0 };
    st = cohort_allreduce(comm, counts, total, 2, COHORT_INT64, COHORT_SUM);
    if (st) total[1] = failed + 1;
    if (rank == 0)
        printf("collcheck np=%d: %ld passed, %ld failed\n", nranks, total[0], total[1]);
    cohort_comm_destroy(comm);
    return total[1] ? 1 : 0;
}
