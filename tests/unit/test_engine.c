/* SPDX-License-Identifier: BSD-3-Clause */
/* The request engine (core/engine.c) on one-rank communicators: the queue, the progress thread
 * and caller-driven progress, requests completed from other threads, an abort racing the queue,
 * the order of blocking calls after non-blocking ones, destroy with requests outstanding.
 * One rank moves no data over a transport, so this runs the engine's own synchronisation alone;
 * CI also runs it under ThreadSanitizer. (Many ranks: tests/mp/test_nonblocking.sh.) */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE   /* sched_setaffinity, CPU_SET */
#endif
#include <check.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cohort/cohort.h"
#include "core/engine.h"
#include "core/fusion.h"
#include "core/reduce.h"
#include "tests/unit/expect.h"

static int oob_self(const void *s, void *r, size_t n, void *ctx)
{
    (void)ctx;
    memcpy(r, s, n);
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static cohort_comm_t *one_rank(const char *progress)
{
    setenv("COHORT_PROGRESS", progress, 1);
    cohort_comm_t *c = NULL;
    EXPECT_OK(cohort_comm_init_oob(0, 1, oob_self, NULL, &c));
    ck_assert_ptr_nonnull(c);
    return c;
}

#define N 400
#define LEN 37

typedef struct job {
    int32_t src[N][LEN], dst[N][LEN];
    size_t counts[1], displs[1];
    cohort_request_t *req[N];
    cohort_status_t st[N];
} job_t;

/* Issues N operations of four kinds whose one-rank results are copies of src. */
static void issue_all(cohort_comm_t *c, job_t *j)
{
    j->counts[0] = LEN;
    j->displs[0] = 0;
    for (int i = 0; i < N; i++) {
        for (int k = 0; k < LEN; k++) {
            j->src[i][k] = i * 1000 + k;
            j->dst[i][k] = -1;
        }
        switch (i % 4) {
        case 0:
            EXPECT_OK(cohort_iallreduce(c, j->src[i], j->dst[i], LEN, COHORT_INT32, COHORT_SUM,
                                        &j->req[i]));
            break;
        case 1:
            EXPECT_OK(cohort_iallgatherv(c, j->src[i], LEN, j->dst[i], j->counts, j->displs,
                                         COHORT_INT32, &j->req[i]));
            break;
        case 2:
            EXPECT_OK(cohort_ialltoallv(c, j->src[i], j->counts, j->displs, j->dst[i],
                                        j->counts, j->displs, COHORT_INT32, &j->req[i]));
            break;
        default:
            EXPECT_OK(cohort_igather(c, j->src[i], j->dst[i], LEN, COHORT_INT32, 0, &j->req[i]));
            break;
        }
    }
    /* the arrays were copied: the caller may reuse them at once */
    j->counts[0] = 999999;
}

static void check_results(job_t *j)
{
    for (int i = 0; i < N; i++)
        for (int k = 0; k < LEN; k++)
            ck_assert_msg(j->dst[i][k] == i * 1000 + k, "op %d element %d: %d", i, k,
                          (int)j->dst[i][k]);
}

static void *wait_odd(void *arg)
{
    job_t *j = arg;
    for (int i = 1; i < N; i += 2) j->st[i] = cohort_wait(j->req[i]);
    return NULL;
}

/* Any thread may complete a request: a second thread waits for the odd ones while this one
 * tests the even ones. */
static void completed_from_two_threads(const char *progress)
{
    cohort_comm_t *c = one_rank(progress);
    job_t *j = calloc(1, sizeof *j);
    ck_assert_ptr_nonnull(j);
    issue_all(c, j);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, wait_odd, j), 0);
    for (int i = 0; i < N; i += 2) {
        int done = 0;
        while (!done) {
            j->st[i] = cohort_test(j->req[i], &done);
            ck_assert_msg(j->st[i] == COHORT_SUCCESS, "test %d: %s", i, cohort_last_error());
        }
    }
    pthread_join(th, NULL);
    for (int i = 0; i < N; i++) ck_assert_int_eq(j->st[i], COHORT_SUCCESS);
    check_results(j);
    EXPECT_OK(cohort_comm_destroy(c));
    free(j);
}

START_TEST(two_threads_progress_thread) { completed_from_two_threads("thread"); }
END_TEST
START_TEST(two_threads_caller) { completed_from_two_threads("caller"); }
END_TEST

/* A blocking call is ordered after the outstanding ones: when it returns they are all done. */
static void blocking_after(const char *progress)
{
    cohort_comm_t *c = one_rank(progress);
    job_t *j = calloc(1, sizeof *j);
    ck_assert_ptr_nonnull(j);
    issue_all(c, j);
    EXPECT_OK(cohort_barrier(c));
    if (!strcmp(progress, "thread"))
        for (int i = 0; i < N; i++) {
            int done = 0;
            EXPECT_OK(cohort_test(j->req[i], &done));
            ck_assert_msg(done, "request %d not done after a blocking call returned", i);
        }
    else
        EXPECT_OK(cohort_waitall(N, j->req, NULL));
    check_results(j);
    EXPECT_OK(cohort_comm_destroy(c));
    free(j);
}

START_TEST(blocking_after_thread) { blocking_after("thread"); }
END_TEST
START_TEST(blocking_after_caller) { blocking_after("caller"); }
END_TEST

static void *abort_now(void *arg)
{
    cohort_comm_abort(arg);
    return NULL;
}

/* An abort racing the queue: every request completes; the ones that ran before it succeed, all
 * later ones fail with COHORT_ERR_ABORTED (in issue order: none succeeds after a failure), and
 * the message of the operation's own thread reaches the waiter. */
START_TEST(abort_races_the_queue)
{
    cohort_comm_t *c = one_rank("thread");
    job_t *j = calloc(1, sizeof *j);
    ck_assert_ptr_nonnull(j);
    issue_all(c, j);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, abort_now, c), 0);
    cohort_status_t st = cohort_waitall(N, j->req, j->st);
    pthread_join(th, NULL);
    int failed_at = -1;
    for (int i = 0; i < N; i++) {
        if (j->st[i] != COHORT_SUCCESS && failed_at < 0) failed_at = i;
        if (failed_at >= 0)
            ck_assert_msg(j->st[i] == COHORT_ERR_ABORTED, "request %d after failure at %d: %d",
                          i, failed_at, (int)j->st[i]);
        ck_assert_ptr_null(j->req[i]);
    }
    if (failed_at >= 0) {
        ck_assert_int_eq(st, COHORT_ERR_ABORTED);
        ck_assert_msg(strstr(cohort_last_error(), "was aborted"), "'%s'", cohort_last_error());
    }
    /* later calls are refused at once */
    cohort_request_t *r = NULL;
    EXPECT_STATUS(cohort_ibarrier(c, &r), COHORT_ERR_ABORTED, "aborted");
    ck_assert_ptr_null(r);
    EXPECT_OK(cohort_comm_destroy(c));
    free(j);
}
END_TEST

START_TEST(destroy_with_requests_outstanding)
{
    cohort_comm_t *c = one_rank("caller");   /* caller: nothing runs until waited for */
    int32_t x = 5, y = 0;
    cohort_request_t *r[2];
    EXPECT_OK(cohort_iallreduce(c, &x, &y, 1, COHORT_INT32, COHORT_SUM, &r[0]));
    EXPECT_OK(cohort_ibarrier(c, &r[1]));
    EXPECT_STATUS(cohort_comm_destroy(c), COHORT_ERR_INVALID_ARG, "2 non-blocking calls",
                  "nothing was freed");
    ck_assert_int_eq(y, 0);   /* caller mode: it has not run */
    EXPECT_OK(cohort_wait(r[0]));
    ck_assert_int_eq(y, 5);
    EXPECT_STATUS(cohort_comm_destroy(c), COHORT_ERR_INVALID_ARG, "1 non-blocking call");
    int done = 0;
    EXPECT_OK(cohort_test(r[1], &done));
    ck_assert_int_eq(done, 1);
    EXPECT_OK(cohort_comm_destroy(c));
}
END_TEST

START_TEST(request_misuse)
{
    cohort_comm_t *c = one_rank("thread");
    int done = 3;
    EXPECT_STATUS(cohort_test(NULL, &done), COHORT_ERR_INVALID_ARG, "cohort_test",
                  "request is NULL");
    ck_assert_int_eq(done, 0);
    cohort_request_t *r;
    EXPECT_OK(cohort_ibarrier(c, &r));
    EXPECT_STATUS(cohort_test(r, NULL), COHORT_ERR_INVALID_ARG, "done is NULL");
    EXPECT_STATUS(cohort_waitall(1, NULL, NULL), COHORT_ERR_INVALID_ARG, "reqs is NULL");
    cohort_request_t *two[2] = { r, NULL };
    EXPECT_STATUS(cohort_waitall(2, two, NULL), COHORT_ERR_INVALID_ARG, "reqs[1]",
                  "request is NULL");
    /* a pointer that was never a request */
    uint64_t junk[16] = { 0 };
    EXPECT_STATUS(cohort_wait((cohort_request_t *)junk), COHORT_ERR_INVALID_ARG,
                  "not a live request");
    EXPECT_OK(cohort_wait(r));
    /* a completed request is kept for reuse, so a second wait on it is reported, not read
     * from freed memory */
    EXPECT_STATUS(cohort_wait(r), COHORT_ERR_INVALID_ARG, "not a live request",
                  "completed and was freed");
    /* the same request twice in a waitall, apart: named by both positions, nothing waited */
    cohort_request_t *three[4];
    for (int i = 0; i < 3; i++) EXPECT_OK(cohort_ibarrier(c, &three[i]));
    three[3] = three[1];
    EXPECT_STATUS(cohort_waitall(4, three, NULL), COHORT_ERR_INVALID_ARG,
                  "reqs[1] and reqs[3] are the same request");
    EXPECT_OK(cohort_waitall(3, three, NULL));
    for (int i = 0; i < 3; i++) ck_assert_ptr_null(three[i]);
    EXPECT_OK(cohort_comm_destroy(c));
}
END_TEST

/* In thread mode a request completes with nobody waiting for it (cohort_test runs nothing
 * there), also when the one issued before it was just waited for: the progress thread, not the
 * waiter, carries the queue on. */
START_TEST(waiter_hands_back)
{
    /* _i: 0, the engine's threads spin before they sleep (one rank: every thread has a core);
     * 1, never (COHORT_SPIN_US=0); 2, the process on one CPU, so that its two threads
     * outnumber the cores: the progress thread is woken by a timer, waiters run the queue */
    if (_i == 1) setenv("COHORT_SPIN_US", "0", 1);
    cpu_set_t all, one;
    ck_assert_int_eq(sched_getaffinity(0, sizeof all, &all), 0);
    if (_i == 2) {
        CPU_ZERO(&one);
        for (int k = 0; k < CPU_SETSIZE; k++)
            if (CPU_ISSET(k, &all)) {
                CPU_SET(k, &one);
                break;
            }
        ck_assert_int_eq(sched_setaffinity(0, sizeof one, &one), 0);
    }
    cohort_comm_t *c = one_rank("thread");
    static int32_t in[2][64], out[2][64];
    for (int round = 0; round < 10000; round++) {
        cohort_request_t *q[2];
        for (int i = 0; i < 2; i++) {
            for (int k = 0; k < 64; k++) {
                in[i][k] = round * 100 + i * 10 + k;
                out[i][k] = -1;
            }
            /* different dtypes: never fused into one batch */
            EXPECT_OK(cohort_iallreduce(c, in[i], out[i], 64, i ? COHORT_INT32 : COHORT_UINT32,
                                        COHORT_SUM, &q[i]));
        }
        EXPECT_OK(cohort_wait(q[0]));
        int done = 0;
        double t0 = now_s();
        while (!done) {
            EXPECT_OK(cohort_test(q[1], &done));
            if (!done) {
                ck_assert_msg(now_s() - t0 < 30, "round %d: the second request never completed "
                              "once the first one's waiter returned", round);
                sched_yield();
            }
        }
        for (int i = 0; i < 2; i++)
            for (int k = 0; k < 64; k++) ck_assert_int_eq(out[i][k], in[i][k]);
    }
    EXPECT_OK(cohort_comm_destroy(c));
    unsetenv("COHORT_SPIN_US");
    if (_i == 2) ck_assert_int_eq(sched_setaffinity(0, sizeof all, &all), 0);
}
END_TEST

/* Requests are reused once completed: bursts of more requests than the one before, completed
 * newest first, each with its own result. */
START_TEST(request_reuse)
{
    cohort_comm_t *c = one_rank("thread");
    enum { MAX = 300 };
    static float in[MAX][3], out[MAX][3];
    cohort_request_t *q[MAX];
    for (int burst = 0; burst < 6; burst++) {
        int n = 50 * (burst + 1);
        for (int i = 0; i < n; i++) {
            for (int k = 0; k < 3; k++) {
                in[i][k] = (float)(burst * 1000 + i * 3 + k);
                out[i][k] = -1;
            }
            EXPECT_OK(cohort_iallreduce(c, in[i], out[i], 3, COHORT_FLOAT32, COHORT_SUM, &q[i]));
        }
        for (int i = n - 1; i >= 0; i--) EXPECT_OK(cohort_wait(q[i]));
        for (int i = 0; i < n; i++)
            for (int k = 0; k < 3; k++) ck_assert_float_eq(out[i][k], in[i][k]);
    }
    EXPECT_OK(cohort_comm_destroy(c));
}
END_TEST

/* ---- fusion planning (core/fusion.c) ---- */

#define F(dt, op, b) { 1, (dt), (op), (b) }
#define X { 0, 0, 0, 0 }   /* another kind of operation */

START_TEST(plan_interleaved_dtypes)
{
    /* fp16 gradients broken by fp32 ones still fuse, per dtype (Horovod's look-ahead) */
    cohort_fuse_item_t it[] = { F(6, 0, 100), F(8, 0, 100), F(6, 0, 100), F(8, 0, 100),
                                F(6, 0, 100), F(6, 4, 100), F(6, 0, 100) };
    int leader[7];
    cohort_fuse_plan(it, 7, 1000, leader);
    int want[7] = { 0, 1, 0, 1, 0, 5, 0 };
    for (int i = 0; i < 7; i++) ck_assert_int_eq(leader[i], want[i]);
}
END_TEST

START_TEST(plan_threshold_and_barriers)
{
    /* batches close at the threshold and at any other kind of operation */
    cohort_fuse_item_t it[] = { F(8, 0, 400), F(8, 0, 400), F(8, 0, 400), F(8, 0, 100), X,
                                F(8, 0, 10), F(8, 0, 10), F(8, 0, 1000) };
    int leader[8];
    cohort_fuse_plan(it, 8, 1000, leader);
    int want[8] = { 0, 0, 2, 2, 4, 5, 5, 7 };
    for (int i = 0; i < 8; i++) ck_assert_int_eq(leader[i], want[i]);
    cohort_fuse_plan(it, 8, 0, leader);   /* a threshold of 0 fuses nothing that has bytes */
    for (int i = 0; i < 8; i++) ck_assert_int_eq(leader[i], i);
}
END_TEST

START_TEST(window_counts)
{
    cohort_fuse_item_t it[] = { F(8, 0, 100), F(6, 0, 100), F(8, 0, 100), F(8, 1, 50),
                                F(8, 0, 100), X, F(8, 0, 100) };
    ck_assert_int_eq(cohort_fuse_window(it, 7, 1000), 3);   /* stops at X */
    ck_assert_int_eq(cohort_fuse_window(it, 7, 250), 2);    /* stops at the threshold */
    ck_assert_int_eq(cohort_fuse_window(it, 1, 1000), 1);
    ck_assert_int_eq(cohort_fuse_window(it + 5, 2, 1000), 1);   /* the head is not fusable */
    ck_assert_int_eq(cohort_fuse_window(it, 0, 1000), 0);
    /* what ranks with shorter queues see: a prefix, never more */
    for (int n = 1; n <= 7; n++)
        ck_assert_int_le(cohort_fuse_window(it, n, 1000), cohort_fuse_window(it, 7, 1000));
}
END_TEST

/* The carried count (cohort_fuse_carry_put/get): every rank's elements reduced with the batch's
 * own op and dtype, as the transports reduce them (AVG divided once at the end, compressed wire
 * formats rounded at every step), give the largest level every rank's count reaches. */
static uint64_t carry_reduced(int nc, int dtype, int op, int wire, int n, const uint64_t *counts)
{
    unsigned char acc[COHORT_FUSE_CARRY_MAX * 8], mine[COHORT_FUSE_CARRY_MAX * 8];
    float t[COHORT_FUSE_CARRY_MAX];
    uint16_t w[COHORT_FUSE_CARRY_MAX];
    cohort_fuse_carry_put(acc, nc, dtype, op, counts[0]);
    for (int r = 1; r < n; r++) {
        cohort_fuse_carry_put(mine, nc, dtype, op, counts[r]);
        if (wire) {
            /* the partial result travels compressed, the next rank adds its own in float32 */
            cohort_wire_encode(w, (const float *)acc, (size_t)nc, (cohort_dtype_t)wire);
            cohort_wire_decode_add(t, (const float *)mine, w, (size_t)nc, (cohort_dtype_t)wire);
            memcpy(acc, t, sizeof *t * (size_t)nc);
        } else {
            cohort_reduce_local(acc, mine, (size_t)nc, (cohort_dtype_t)dtype, (cohort_op_t)op);
        }
    }
    cohort_reduce_finish(acc, (size_t)nc, (cohort_dtype_t)dtype, (cohort_op_t)op, n);
    return cohort_fuse_carry_get(acc, nc, dtype, op, n);
}

/* the largest level at most c, of the coarse (6) or the fine (16) levels */
static uint64_t level_of(int nc, uint64_t c)
{
    static const uint64_t coarse[] = { 256, 64, 16, 4, 2, 1 };
    static const uint64_t fine[] = { 256, 192, 128, 96, 64, 48, 32, 24, 16, 12, 8, 6, 4, 3, 2, 1 };
    const uint64_t *lv = nc == 6 ? coarse : fine;
    for (int i = 0; i < nc; i++)
        if (c >= lv[i]) return lv[i];
    return 0;
}

START_TEST(carry_every_dtype_and_op)
{
    /* coarse levels up to 64 bytes of data: 8 bytes of float32 and its 6 elements fit the 32
     * bytes of shm's small lane; fine ones above */
    ck_assert_int_eq(cohort_fuse_carry_n(8), 6);
    ck_assert_int_eq(cohort_fuse_carry_n(64), 6);
    ck_assert_int_eq(cohort_fuse_carry_n(65), 16);
    ck_assert_int_eq(COHORT_FUSE_CARRY_MAX, 16);
    ck_assert_uint_le((size_t)cohort_fuse_carry_n(8) * cohort_dtype_size(COHORT_FLOAT32) + 8,
                      32);
    uint64_t counts[300];
    unsigned seed = 12345;
    for (int nc = 6; nc <= 16; nc += 10)
    for (int dt = 0; dt < COHORT_DTYPE_COUNT; dt++)
        for (int op = 0; op < COHORT_OP_COUNT; op++)
            for (int wire = 0; wire <= COHORT_BFLOAT16; wire = wire ? wire + 1 : COHORT_FLOAT16) {
                if (wire && (dt != COHORT_FLOAT32 || (op != COHORT_SUM && op != COHORT_AVG)))
                    continue;
                int sizes[] = { 1, 2, 3, 5, 127, 128, 255, 256, 257, 300 };
                for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
                    int n = sizes[si];
                    if (!cohort_fuse_can_carry(dt, op, wire, n)) continue;
                    for (int trial = 0; trial < 40; trial++) {
                        uint64_t lo = UINT64_MAX;
                        for (int r = 0; r < n; r++) {
                            seed = seed * 1103515245u + 12345u;
                            /* mostly the same count, some ranks behind, some at 0 */
                            uint64_t c = trial % 8 == 0 ? (seed >> 8) % 3
                                         : trial % 2 ? 300 : (seed >> 8) % 400;
                            if (trial % 4 == 1 && r == n - 1) c = (seed >> 12) % 70;
                            counts[r] = c;
                            if (c < lo) lo = c;
                        }
                        uint64_t got = carry_reduced(nc, dt, op, wire, n, counts);
                        if (got != level_of(nc, lo))
                            ck_abort_msg("%d levels, dtype %d op %d wire %d n %d trial %d: min "
                                         "%llu gave %llu, not %llu", nc, dt, op, wire, n, trial,
                                         (unsigned long long)lo, (unsigned long long)got,
                                         (unsigned long long)level_of(nc, lo));
                    }
                }
            }
}
END_TEST

START_TEST(carry_only_where_exact)
{
    /* SUM and AVG carry as long as a sum of ones stays exact at every step */
    ck_assert_int_eq(cohort_fuse_can_carry(COHORT_INT8, COHORT_SUM, 0, 127), 1);
    ck_assert_int_eq(cohort_fuse_can_carry(COHORT_INT8, COHORT_SUM, 0, 128), 0);
    ck_assert_int_eq(cohort_fuse_can_carry(COHORT_UINT8, COHORT_AVG, 0, 256), 0);
    ck_assert_int_eq(cohort_fuse_can_carry(COHORT_BFLOAT16, COHORT_SUM, 0, 256), 1);
    ck_assert_int_eq(cohort_fuse_can_carry(COHORT_BFLOAT16, COHORT_SUM, 0, 257), 0);
    ck_assert_int_eq(cohort_fuse_can_carry(COHORT_FLOAT16, COHORT_AVG, 0, 2049), 0);
    ck_assert_int_eq(cohort_fuse_can_carry(COHORT_FLOAT32, COHORT_SUM, COHORT_BFLOAT16, 257), 0);
    ck_assert_int_eq(cohort_fuse_can_carry(COHORT_FLOAT32, COHORT_SUM, 0, 100000), 1);
    /* the others give 0 or 1 whatever the number of ranks */
    ck_assert_int_eq(cohort_fuse_can_carry(COHORT_INT8, COHORT_MIN, 0, 100000), 1);
    ck_assert_int_eq(cohort_fuse_can_carry(COHORT_BFLOAT16, COHORT_PROD, 0, 100000), 1);
    ck_assert_int_eq(cohort_fuse_can_carry(COHORT_DTYPE_COUNT, COHORT_SUM, 0, 2), 0);
    /* why: past 256 ranks bf16 no longer sums ones exactly (256 + 1 rounds to 256), so 257
     * ranks that all said yes would not read as all */
    uint64_t counts[257];
    for (int r = 0; r < 257; r++) counts[r] = 256;
    ck_assert_uint_ne(carry_reduced(16, COHORT_BFLOAT16, COHORT_SUM, 0, 257, counts), 256);
    ck_assert_uint_eq(carry_reduced(16, COHORT_BFLOAT16, COHORT_SUM, 0, 256, counts), 256);
}
END_TEST

/* The deferred wake-up's timer: doubles while its wake-ups find nothing, never past the cap
 * (a call nobody waits for must still start within it), never 0 (a timer of 0 is no timer), and
 * comes back to the start at the first wake-up that found a call nobody ran. */
START_TEST(deferral_adapts)
{
    const uint64_t lo = COHORT_ENGINE_DEFER_NS, hi = COHORT_ENGINE_DEFER_MAX_NS;
    ck_assert_uint_lt(lo, hi);
    uint64_t d = lo, last = 0;
    int steps = 0;
    for (int i = 0; i < 100; i++) {
        uint64_t next = cohort_engine_next_defer(d, 0);
        ck_assert_uint_le(next, hi);
        ck_assert_uint_ge(next, d);
        if (next > d) {
            ck_assert_uint_le(next, 2 * d);   /* grows by at most twice per wake-up */
            steps++;
        }
        last = d;
        d = next;
    }
    ck_assert_uint_eq(d, hi);
    ck_assert_uint_eq(last, hi);
    ck_assert_int_le(steps, 4);               /* 50 us to 0.4 ms in three or four wake-ups */
    ck_assert_uint_eq(cohort_engine_next_defer(hi, 1), lo);
    ck_assert_uint_eq(cohort_engine_next_defer(3 * lo, 1), lo);
    ck_assert_uint_eq(cohort_engine_next_defer(0, 0), lo);
    ck_assert_uint_eq(cohort_engine_next_defer(UINT64_MAX, 0), hi);
    ck_assert_uint_eq(cohort_engine_next_defer(lo, 0), 2 * lo);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("engine");
    TCase *tc = tcase_create("one rank");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, two_threads_progress_thread);
    tcase_add_test(tc, two_threads_caller);
    tcase_add_test(tc, blocking_after_thread);
    tcase_add_test(tc, blocking_after_caller);
    tcase_add_loop_test(tc, abort_races_the_queue, 0, 20);
    tcase_add_test(tc, destroy_with_requests_outstanding);
    tcase_add_test(tc, request_misuse);
    tcase_add_test(tc, request_reuse);
    tcase_add_loop_test(tc, waiter_hands_back, 0, 3);
    tcase_add_test(tc, deferral_adapts);
    suite_add_tcase(s, tc);
    TCase *tp = tcase_create("fusion planning");
    tcase_add_test(tp, plan_interleaved_dtypes);
    tcase_add_test(tp, plan_threshold_and_barriers);
    tcase_add_test(tp, window_counts);
    tcase_add_test(tp, carry_every_dtype_and_op);
    tcase_add_test(tp, carry_only_where_exact);
    suite_add_tcase(s, tp);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? 1 : 0;
}
