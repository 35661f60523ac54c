/* SPDX-License-Identifier: BSD-3-Clause */
/* The non-blocking calls, the v-variants, gather and scatter, as ranks under cohortrun:
 *   cohortrun -np N tests/mp/nbcheck              correctness (below)
 *   cohortrun -np N tests/mp/nbcheck --abort F    requests outstanding, then cohort_comm_abort
 *                                                 (rank 0 never joins; it leaves once files
 *                                                 F.<rank> say the others are done)
 *   cohortrun -np N tests/mp/nbcheck --die        the last rank exits with requests outstanding
 *   cohortrun -np N tests/mp/nbcheck --group-mismatch  rank 0's group has one allreduce more
 *   cohortrun -np N tests/mp/nbcheck --lone-mismatch   one iallreduce whose count differs per
 *                                                 rank: the errors name the callers' counts
 *   cohortrun -np N tests/mp/nbcheck --idle S      the CPU an idle process uses with its
 *                                                 progress thread (must be next to none)
 *   cohortrun -np 3 tests/mp/nbcheck --stop-at K   rank 1 stops (SIGSTOP) before its K-th
 *                                                 allreduce: the others' timeouts name it
 *   cohortrun -np 2 tests/mp/nbcheck --p2p-mismatch | --p2p-short  a receive with another tag,
 *                                                 or too small for the message
 *   cohortrun -np N tests/mp/nbcheck --timeout F  rank 0 never joins; the others' requests time
 *                                                 out (COHORT_TIMEOUT); rank 0 leaves once
 *                                                 files F.<rank> say they are done
 *   cohortrun -np N tests/mp/nbcheck --busy R     R rounds: allreduces outstanding while the
 *                                                 caller computes, then checked
 * Correctness: batches of every non-blocking collective (x dtype x op x in/out of place, several
 * counts, roots, v-variants with zero counts and scattered displacements, 40 or more
 * outstanding at once) issued back to back, with blocking calls between them, completed in an
 * order that differs per rank (wait, test loops, waitall), every element of every result checked
 * and the bytes between v-variant blocks checked untouched; the same calls blocking; buffers
 * freed and re-made between batches; bad arguments and destroy with requests outstanding.
 * Prints "N passed, N failed" on rank 0; exits 1 on any failure. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE   /* rand_r */
#endif
#include <cohort/cohort.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "elems.h"

static int rank, nranks;
static long passed, failed;
static cohort_comm_t *comm;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

enum { K_ALLREDUCE, K_REDUCE, K_BCAST, K_ALLGATHER, K_RSCATTER, K_ALLTOALL, K_BARRIER, K_GATHER,
       K_SCATTER, K_ALLGATHERV, K_ALLTOALLV, K_COUNT };
static const char *const kname[K_COUNT] = { "allreduce", "reduce", "broadcast", "allgather",
                                            "reduce_scatter", "alltoall", "barrier", "gather",
                                            "scatter", "allgatherv", "alltoallv" };

#define GUARD 0x5a   /* bytes between v-variant blocks: must stay untouched */

typedef struct op {
    int kind, inplace, root, salt;
    size_t count;                  /* per block where the collective has blocks */
    cohort_dtype_t t;
    cohort_op_t rop;
    char *send, *recv;             /* recv == NULL: in place in send (allreduce, alltoall...) */
    size_t send_len, recv_len;     /* bytes */
    size_t *sc, *sd, *rc, *rd;     /* v-variants: per rank */
    cohort_request_t *req;
    char desc[160];
} op_t;

/* v-variant counts: zeros included, different per pair. */
static size_t agv_count(int r, int salt, size_t base) { return (size_t)((r * 3 + salt) % 4) * base; }
static size_t a2av_count(int s, int d, int salt, size_t base)
{
    return (size_t)((s + 2 * d + salt) % 4) * base;
}
/* Blocks laid out in reverse rank order, one element of guard after each. */
static size_t layout(const size_t *counts, size_t *displs)
{
    size_t at = 0;
    for (int r = nranks - 1; r >= 0; r--) {
        displs[r] = at;
        at += counts[r] + 1;
    }
    return at;
}

static void *xmalloc(size_t n) { void *p = malloc(n ? n : 1); if (!p) abort(); return p; }

static void fill_input(char *buf, size_t n, cohort_dtype_t t, int r, size_t off, int salt,
                       cohort_op_t rop)
{
    for (size_t i = 0; i < n; i++) put(buf, i, t, input(r, off + i, t, rop, salt));
}

/* Allocates and fills op's buffers. */
static void prepare(op_t *o)
{
    size_t es = cohort_dtype_size(o->t), c = o->count, n = (size_t)nranks;
    int me = rank;
    switch (o->kind) {
    case K_ALLREDUCE: case K_REDUCE:
        o->send_len = c * es;
        o->send = xmalloc(o->send_len);
        fill_input(o->send, c, o->t, me, 0, o->salt, o->rop);
        if (!o->inplace) o->recv = xmalloc(c * es);
        break;
    case K_BCAST:
        o->send = xmalloc(c * es);
        if (me == o->root) fill_input(o->send, c, o->t, me, 0, o->salt, COHORT_SUM);
        else memset(o->send, 0, c * es);
        break;
    case K_ALLGATHER:
        o->recv = xmalloc(n * c * es);
        memset(o->recv, 0, n * c * es);
        if (o->inplace) fill_input(o->recv + me * c * es, c, o->t, me, 0, o->salt, COHORT_SUM);
        else {
            o->send = xmalloc(c * es);
            fill_input(o->send, c, o->t, me, 0, o->salt, COHORT_SUM);
        }
        break;
    case K_RSCATTER:
        o->send = xmalloc(n * c * es);
        fill_input(o->send, n * c, o->t, me, 0, o->salt, o->rop);
        if (!o->inplace) o->recv = xmalloc(c * es);
        break;
    case K_ALLTOALL:
        o->send = xmalloc(n * c * es);
        fill_input(o->send, n * c, o->t, me, 0, o->salt, COHORT_SUM);
        if (!o->inplace) o->recv = xmalloc(n * c * es);
        break;
    case K_GATHER:
        if (me == o->root) {
            o->recv = xmalloc(n * c * es);
            memset(o->recv, 0, n * c * es);
        }
        if (me == o->root && o->inplace)
            fill_input(o->recv + me * c * es, c, o->t, me, 0, o->salt, COHORT_SUM);
        else {
            o->send = xmalloc(c * es);
            fill_input(o->send, c, o->t, me, 0, o->salt, COHORT_SUM);
        }
        break;
    case K_SCATTER:
        if (me == o->root) {
            o->send = xmalloc(n * c * es);
            fill_input(o->send, n * c, o->t, me, 0, o->salt, COHORT_SUM);
        }
        if (!(me == o->root && o->inplace)) {
            o->recv = xmalloc(c * es);
            memset(o->recv, 0, c * es);
        }
        break;
    case K_ALLGATHERV: {
        o->rc = xmalloc(n * sizeof(size_t));
        o->rd = xmalloc(n * sizeof(size_t));
        for (int r = 0; r < nranks; r++) o->rc[r] = agv_count(r, o->salt, c);
        o->recv_len = layout(o->rc, o->rd) * es;
        o->recv = xmalloc(o->recv_len);
        memset(o->recv, GUARD, o->recv_len);
        if (o->inplace)
            fill_input(o->recv + o->rd[me] * es, o->rc[me], o->t, me, 0, o->salt, COHORT_SUM);
        else {
            o->send = xmalloc(o->rc[me] * es);
            fill_input(o->send, o->rc[me], o->t, me, 0, o->salt, COHORT_SUM);
        }
        break;
    }
    case K_ALLTOALLV: {
        o->sc = xmalloc(n * sizeof(size_t));
        o->sd = xmalloc(n * sizeof(size_t));
        o->rc = xmalloc(n * sizeof(size_t));
        o->rd = xmalloc(n * sizeof(size_t));
        for (int r = 0; r < nranks; r++) {
            o->sc[r] = a2av_count(me, r, o->salt, c);
            o->rc[r] = a2av_count(r, me, o->salt, c);
        }
        o->send_len = layout(o->sc, o->sd) * es;
        o->recv_len = layout(o->rc, o->rd) * es;
        o->send = xmalloc(o->send_len);
        o->recv = xmalloc(o->recv_len);
        memset(o->recv, GUARD, o->recv_len);
        for (int d = 0; d < nranks; d++)
            fill_input(o->send + o->sd[d] * es, o->sc[d], o->t, me, (size_t)d * 7919u, o->salt,
                       COHORT_SUM);
        break;
    }
    default:
        break;
    }
    snprintf(o->desc, sizeof o->desc, "%s count %zu %s %s root %d %s salt %d", kname[o->kind],
             o->count, cohort_dtype_name(o->t), cohort_op_name(o->rop), o->root,
             o->inplace ? "in-place" : "out-of-place", o->salt);
}

static cohort_status_t issue(op_t *o, int blocking)
{
    size_t es = cohort_dtype_size(o->t), c = o->count;
    char *r = o->recv ? o->recv : o->send;
    cohort_request_t **q = &o->req;
    switch (o->kind) {
    case K_ALLREDUCE:
        return blocking ? cohort_allreduce(comm, o->send, r, c, o->t, o->rop)
                        : cohort_iallreduce(comm, o->send, r, c, o->t, o->rop, q);
    case K_REDUCE:
        return blocking ? cohort_reduce(comm, o->send, r, c, o->t, o->rop, o->root)
                        : cohort_ireduce(comm, o->send, r, c, o->t, o->rop, o->root, q);
    case K_BCAST:
        return blocking ? cohort_broadcast(comm, o->send, c, o->t, o->root)
                        : cohort_ibroadcast(comm, o->send, c, o->t, o->root, q);
    case K_ALLGATHER: {
        const char *s = o->inplace ? o->recv + (size_t)rank * c * es : o->send;
        return blocking ? cohort_allgather(comm, s, o->recv, c, o->t)
                        : cohort_iallgather(comm, s, o->recv, c, o->t, q);
    }
    case K_RSCATTER: {
        char *d = o->inplace ? o->send + (size_t)rank * c * es : o->recv;
        return blocking ? cohort_reduce_scatter(comm, o->send, d, c, o->t, o->rop)
                        : cohort_ireduce_scatter(comm, o->send, d, c, o->t, o->rop, q);
    }
    case K_ALLTOALL:
        return blocking ? cohort_alltoall(comm, o->send, r, c, o->t)
                        : cohort_ialltoall(comm, o->send, r, c, o->t, q);
    case K_BARRIER:
        return blocking ? cohort_barrier(comm) : cohort_ibarrier(comm, q);
    case K_GATHER: {
        const char *s = rank == o->root && o->inplace ? o->recv + (size_t)rank * c * es : o->send;
        return blocking ? cohort_gather(comm, s, o->recv, c, o->t, o->root)
                        : cohort_igather(comm, s, o->recv, c, o->t, o->root, q);
    }
    case K_SCATTER: {
        char *d = rank == o->root && o->inplace ? o->send + (size_t)rank * c * es : o->recv;
        return blocking ? cohort_scatter(comm, o->send, d, c, o->t, o->root)
                        : cohort_iscatter(comm, o->send, d, c, o->t, o->root, q);
    }
    case K_ALLGATHERV: {
        const char *s = o->inplace ? o->recv + o->rd[rank] * es : o->send;
        return blocking ? cohort_allgatherv(comm, s, o->rc[rank], o->recv, o->rc, o->rd, o->t)
                        : cohort_iallgatherv(comm, s, o->rc[rank], o->recv, o->rc, o->rd, o->t,
                                             q);
    }
    case K_ALLTOALLV:
        return blocking ? cohort_alltoallv(comm, o->send, o->sc, o->sd, o->recv, o->rc, o->rd,
                                           o->t)
                        : cohort_ialltoallv(comm, o->send, o->sc, o->sd, o->recv, o->rc, o->rd,
                                            o->t, q);
    }
    return COHORT_ERR_INTERNAL;
}

/* Compares count elements of buf with want(i); one CHECK for the whole block. */
#define CHECK_ELEMS(o, what, buf, n, want_expr)                                               \
    do {                                                                                      \
        size_t bad_ = 0, first_ = 0;                                                          \
        double got_ = 0, exp_ = 0;                                                            \
        for (size_t i = 0; i < (n); i++) {                                                    \
            double w_ = (want_expr), g_ = get((buf), i, (o)->t);                              \
            if (!close_enough(g_, w_, (o)->t)) {                                              \
                if (!bad_) { first_ = i; got_ = g_; exp_ = w_; }                              \
                bad_++;                                                                       \
            }                                                                                 \
        }                                                                                     \
        CHECK(bad_ == 0, "%s, %s: %zu of %zu elements wrong, first [%zu] got %g want %g",     \
              (o)->desc, (what), bad_, (size_t)(n), first_, got_, exp_);                      \
    } while (0)

static void check_guards(const op_t *o, const char *buf, const size_t *counts,
                         const size_t *displs)
{
    size_t es = cohort_dtype_size(o->t), bad = 0;
    for (int r = 0; r < nranks; r++)
        for (size_t b = 0; b < es; b++)
            if ((unsigned char)buf[(displs[r] + counts[r]) * es + b] != GUARD) bad++;
    CHECK(bad == 0, "%s: %zu guard bytes between blocks were overwritten", o->desc, bad);
}

static void verify(op_t *o)
{
    size_t es = cohort_dtype_size(o->t), c = o->count, n = (size_t)nranks;
    const char *r = o->recv ? o->recv : o->send;
    int me = rank;
    switch (o->kind) {
    case K_ALLREDUCE:
        CHECK_ELEMS(o, "result", r, c, ref_reduce_n(nranks, i, o->t, o->rop, o->salt, 0));
        break;
    case K_REDUCE:
        if (me == o->root)
            CHECK_ELEMS(o, "root's result", r, c,
                        ref_reduce_n(nranks, i, o->t, o->rop, o->salt, 0));
        break;
    case K_BCAST:
        CHECK_ELEMS(o, "buffer", o->send, c, input(o->root, i, o->t, COHORT_SUM, o->salt));
        break;
    case K_ALLGATHER: case K_GATHER:
        if (o->kind == K_GATHER && me != o->root) break;
        for (int b = 0; b < nranks; b++)
            CHECK_ELEMS(o, "block", o->recv + (size_t)b * c * es, c,
                        input(b, i, o->t, COHORT_SUM, o->salt));
        break;
    case K_RSCATTER: {
        const char *d = o->inplace ? o->send + (size_t)me * c * es : o->recv;
        CHECK_ELEMS(o, "own block", d, c,
                    ref_reduce_n(nranks, i, o->t, o->rop, o->salt, (int)((size_t)me * c)));
        break;
    }
    case K_ALLTOALL:
        for (int b = 0; b < nranks; b++)
            CHECK_ELEMS(o, "block", r + (size_t)b * c * es, c,
                        input(b, (size_t)me * c + i, o->t, COHORT_SUM, o->salt));
        break;
    case K_SCATTER: {
        const char *d = me == o->root && o->inplace ? o->send + (size_t)me * c * es : o->recv;
        CHECK_ELEMS(o, "block", d, c, input(o->root, (size_t)me * c + i, o->t, COHORT_SUM,
                                            o->salt));
        break;
    }
    case K_ALLGATHERV:
        for (int b = 0; b < nranks; b++)
            CHECK_ELEMS(o, "block", o->recv + o->rd[b] * es, o->rc[b],
                        input(b, i, o->t, COHORT_SUM, o->salt));
        check_guards(o, o->recv, o->rc, o->rd);
        break;
    case K_ALLTOALLV:
        for (int b = 0; b < nranks; b++)
            CHECK_ELEMS(o, "block", o->recv + o->rd[b] * es, o->rc[b],
                        input(b, (size_t)me * 7919u + i, o->t, COHORT_SUM, o->salt));
        check_guards(o, o->recv, o->rc, o->rd);
        break;
    default:
        break;
    }
    (void)n;
}

static void release(op_t *o)
{
    free(o->send);
    free(o->recv);
    free(o->sc);
    free(o->sd);
    free(o->rc);
    free(o->rd);
    memset(o, 0, sizeof *o);
}

static const cohort_dtype_t dtypes[] = { COHORT_INT8, COHORT_UINT8, COHORT_INT32, COHORT_UINT32,
                                         COHORT_INT64, COHORT_UINT64, COHORT_FLOAT16,
                                         COHORT_BFLOAT16, COHORT_FLOAT32, COHORT_FLOAT64 };
#define NDT ((int)(sizeof dtypes / sizeof dtypes[0]))

/* Completes reqs in an order that differs per rank: some by wait, some by test loops, the rest
 * by one waitall. */
static void complete(op_t *ops, int n, unsigned *seed)
{
    int *perm = xmalloc((size_t)n * sizeof *perm);
    for (int i = 0; i < n; i++) perm[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(rand_r(seed) % (unsigned)(i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int third = n / 3;
    for (int k = 0; k < third; k++) {
        op_t *o = &ops[perm[k]];
        cohort_status_t st = cohort_wait(o->req);
        CHECK(st == COHORT_SUCCESS, "%s: cohort_wait: %s", o->desc, cohort_last_error());
        o->req = NULL;
    }
    for (int k = third; k < 2 * third; k++) {
        op_t *o = &ops[perm[k]];
        int done = 0;
        double end = now_s() + 300;
        cohort_status_t st = COHORT_SUCCESS;
        while (!done && now_s() < end && st == COHORT_SUCCESS) {
            st = cohort_test(o->req, &done);
            if (!done) sched_yield();
        }
        CHECK(done && st == COHORT_SUCCESS, "%s: cohort_test: done %d, %s", o->desc, done,
              cohort_last_error());
        o->req = NULL;
    }
    int rest = n - 2 * third;
    cohort_request_t **reqs = xmalloc((size_t)(rest ? rest : 1) * sizeof *reqs);
    cohort_status_t *sts = xmalloc((size_t)(rest ? rest : 1) * sizeof *sts);
    for (int k = 0; k < rest; k++) reqs[k] = ops[perm[2 * third + k]].req;
    cohort_status_t st = cohort_waitall((size_t)rest, reqs, sts);
    CHECK(st == COHORT_SUCCESS, "cohort_waitall of %d: %s", rest, cohort_last_error());
    for (int k = 0; k < rest; k++) {
        CHECK(sts[k] == COHORT_SUCCESS && reqs[k] == NULL, "%s: waitall status %d",
              ops[perm[2 * third + k]].desc, (int)sts[k]);
        ops[perm[2 * third + k]].req = NULL;
    }
    free(reqs);
    free(sts);
    free(perm);
}

/* One batch: every kind at several counts for dtype t, issued back to back (blocking calls
 * between, ordered after the outstanding ones), completed in a scrambled order. */
static void batch(cohort_dtype_t t, int salt, unsigned *seed, int blocking)
{
    static const size_t counts[] = { 0, 1, 7, 1000, 33333 };
    op_t ops[K_COUNT * 5 * 2];
    int n = 0;
    memset(ops, 0, sizeof ops);
    for (int k = 0; k < K_COUNT; k++)
        for (int ci = 0; ci < 5; ci++)
            for (int ip = 0; ip < 2; ip++) {
                if (k == K_BARRIER && (ci || ip)) continue;
                if ((k == K_BCAST || k == K_ALLTOALLV) && ip) continue;
                op_t *o = &ops[n++];
                o->kind = k;
                o->count = counts[ci];
                o->t = t;
                o->inplace = ip;
                o->salt = salt + n;
                o->root = (salt + n) % nranks;
                o->rop = (cohort_op_t)((salt + n) % COHORT_OP_COUNT);
                if (k != K_ALLREDUCE && k != K_REDUCE && k != K_RSCATTER) o->rop = COHORT_SUM;
                prepare(o);
            }
    double avg_blocking = 0;
    for (int i = 0; i < n; i++) {
        cohort_status_t st = issue(&ops[i], blocking);
        CHECK(st == COHORT_SUCCESS, "%s: %s: %s", ops[i].desc,
              blocking ? "blocking" : "issue", cohort_last_error());
        if (st) ops[i].req = NULL;
        if (!blocking && i % 9 == 4) {
            /* a blocking call among outstanding ones: ordered after them */
            double x = rank + 1, y = 0;
            st = cohort_allreduce(comm, &x, &y, 1, COHORT_FLOAT64, COHORT_SUM);
            avg_blocking += y;
            CHECK(st == COHORT_SUCCESS && y == nranks * (nranks + 1) / 2.0,
                  "blocking allreduce among outstanding requests: %s, got %g",
                  cohort_last_error(), y);
        }
    }
    if (!blocking) {
        /* keep only the issued ones for completion */
        op_t *live = xmalloc(sizeof ops);
        int m = 0;
        for (int i = 0; i < n; i++)
            if (ops[i].req) live[m++] = ops[i];
        complete(live, m, seed);
        free(live);
    }
    for (int i = 0; i < n; i++) verify(&ops[i]);
    for (int i = 0; i < n; i++) release(&ops[i]);
    (void)avg_blocking;
}

static void test_bad_args(void)
{
    cohort_request_t *req = (cohort_request_t *)&req;
    float x = 1;
    cohort_status_t st = cohort_iallreduce(comm, &x, &x, 1, (cohort_dtype_t)99, COHORT_SUM, &req);
    CHECK(st == COHORT_ERR_INVALID_ARG && req == NULL &&
          strstr(cohort_last_error(), "cohort_iallreduce"),
          "bad dtype: status %d, req %p, '%s'", (int)st, (void *)req, cohort_last_error());
    st = cohort_iallreduce(comm, &x, &x, 1, COHORT_FLOAT32, COHORT_SUM, NULL);
    CHECK(st == COHORT_ERR_INVALID_ARG && strstr(cohort_last_error(), "req is NULL"),
          "NULL req: %d '%s'", (int)st, cohort_last_error());
    st = cohort_ibroadcast(comm, &x, 1, COHORT_FLOAT32, nranks, &req);
    CHECK(st == COHORT_ERR_INVALID_ARG && req == NULL && strstr(cohort_last_error(), "root"),
          "bad root: %d '%s'", (int)st, cohort_last_error());
    st = cohort_wait(NULL);
    CHECK(st == COHORT_ERR_INVALID_ARG, "cohort_wait(NULL): %d", (int)st);
    st = cohort_isend(comm, &x, 1, COHORT_FLOAT32, rank, 0, &req);
    CHECK(st == COHORT_ERR_INVALID_ARG && req == NULL && strstr(cohort_last_error(), "itself"),
          "send to self: %d '%s'", (int)st, cohort_last_error());
    st = cohort_recv(comm, &x, 1, COHORT_FLOAT32, nranks, 0);
    CHECK(st == COHORT_ERR_INVALID_ARG && strstr(cohort_last_error(), "not a rank"),
          "recv from rank %d: %d '%s'", nranks, (int)st, cohort_last_error());
    st = cohort_send(comm, &x, 1, COHORT_FLOAT32, (rank + 1) % nranks, -3);
    CHECK(st == COHORT_ERR_INVALID_ARG && (nranks == 1 || strstr(cohort_last_error(), "tag -3")),
          "negative tag: %d '%s'", (int)st, cohort_last_error());
    int done = 7;
    st = cohort_test(NULL, &done);
    CHECK(st == COHORT_ERR_INVALID_ARG && done == 0, "cohort_test(NULL): %d done %d", (int)st,
          done);
    st = cohort_waitall(0, NULL, NULL);
    CHECK(st == COHORT_SUCCESS, "cohort_waitall(0): %d", (int)st);
    size_t counts[64], displs[64];
    for (int r = 0; r < nranks; r++) counts[r] = displs[r] = 1;
    st = cohort_iallgatherv(comm, &x, 2, &x, counts, displs, COHORT_FLOAT32, &req);
    CHECK(st == COHORT_ERR_INVALID_ARG && strstr(cohort_last_error(), "recvcounts"),
          "allgatherv sendcount != recvcounts[rank]: %d '%s'", (int)st, cohort_last_error());
    st = cohort_alltoallv(comm, &x, NULL, displs, &x, counts, displs, COHORT_FLOAT32);
    CHECK(st == COHORT_ERR_INVALID_ARG && strstr(cohort_last_error(), "sendcounts"),
          "alltoallv NULL sendcounts: %d '%s'", (int)st, cohort_last_error());
    float two[2];
    counts[rank] = 2;
    displs[rank] = 0;
    st = cohort_alltoallv(comm, two, counts, displs, two + 1, counts, displs, COHORT_FLOAT32);
    CHECK(st == COHORT_ERR_INVALID_ARG && strstr(cohort_last_error(), "overlap"),
          "alltoallv overlapping buffers: %d '%s'", (int)st, cohort_last_error());
    for (int r = 0; r < nranks; r++) displs[r] = (size_t)-1;
    st = cohort_allgatherv(comm, two, 2, two, counts, displs, COHORT_FLOAT32);
    CHECK(st == COHORT_ERR_INVALID_ARG && strstr(cohort_last_error(), "overflow"),
          "allgatherv displacement overflow: %d '%s'", (int)st, cohort_last_error());

    /* two requests: the same one twice in waitall is refused before anything is waited for */
    cohort_request_t *r2[2];
    st = cohort_ibarrier(comm, &r2[0]);
    CHECK(st == COHORT_SUCCESS, "ibarrier: %s", cohort_last_error());
    r2[1] = r2[0];
    st = cohort_waitall(2, r2, NULL);
    CHECK(st == COHORT_ERR_INVALID_ARG && strstr(cohort_last_error(), "same request"),
          "waitall with a request twice: %d '%s'", (int)st, cohort_last_error());
    /* destroy with it outstanding: refused, nothing freed; then it completes */
    st = cohort_comm_destroy(comm);
    CHECK(st == COHORT_ERR_INVALID_ARG && strstr(cohort_last_error(), "non-blocking"),
          "destroy with a request outstanding: %d '%s'", (int)st, cohort_last_error());
    st = cohort_wait(r2[0]);
    CHECK(st == COHORT_SUCCESS, "wait after the refused destroy: %s", cohort_last_error());
}

/* Data moves without the caller: in thread mode cohort_test never runs an operation, so one
 * that completes while the caller only tests was moved by the progress thread. Checked over a
 * deadline, never a fixed sleep. First come thousands of small calls each waited for at once,
 * whose waiters run them: where the progress thread's wake-up is deferred (threads outnumber
 * cores), its timer then keeps finding nothing to do and the deferral grows to its cap
 * (core/engine.h, COHORT_ENGINE_DEFER_MAX_NS); the calls after it must still move, and every
 * one's result is checked. */
static void test_progress(void)
{
    float x[2], want = (float)(nranks * (nranks + 1) / 2);
    size_t lone_bad = 0;
    for (int i = 0; i < 4000; i++) {
        cohort_request_t *req;
        x[0] = (float)(rank + 1);
        x[1] = (float)(i % 7) * (float)(rank + 1);
        cohort_status_t st = cohort_iallreduce(comm, x, x, 2, COHORT_FLOAT32, COHORT_SUM, &req);
        if (!st) st = cohort_wait(req);
        CHECK(st == COHORT_SUCCESS, "lone iallreduce %d waited for at once: %s", i,
              cohort_last_error());
        if (st) return;
        lone_bad += x[0] != want || x[1] != (float)(i % 7) * want;
    }
    CHECK(lone_bad == 0, "4000 lone iallreduces waited for at once: %zu wrong", lone_bad);
    size_t n = 1 << 20;
    float *a = xmalloc(n * sizeof *a);
    for (size_t i = 0; i < n; i++) a[i] = (float)(rank + 1);
    cohort_request_t *req;
    cohort_status_t st = cohort_iallreduce(comm, a, a, n, COHORT_FLOAT32, COHORT_SUM, &req);
    CHECK(st == COHORT_SUCCESS, "iallreduce 4 MiB: %s", cohort_last_error());
    int done = 0;
    double end = now_s() + 300;
    while (!st && !done && now_s() < end) {
        st = cohort_test(req, &done);
        if (!done) {
            struct timespec ts = { 0, 1000000 };
            nanosleep(&ts, NULL);
        }
    }
    CHECK(done && st == COHORT_SUCCESS, "iallreduce 4 MiB completed while only tested: done %d "
          "%s", done, cohort_last_error());
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += a[i] != nranks * (nranks + 1) / 2.0f;
    CHECK(bad == 0, "iallreduce 4 MiB: %zu wrong elements", bad);
    free(a);
}

/* Waits (over a deadline) until file exists. */
static int wait_file(const char *file)
{
    double end = now_s() + 300;
    while (access(file, F_OK) != 0 && now_s() < end) {
        struct timespec ts = { 0, 20 * 1000000 };
        nanosleep(&ts, NULL);
    }
    return access(file, F_OK) == 0;
}

static void touch(const char *file)
{
    FILE *f = fopen(file, "w");
    if (f) fclose(f);
}

/* Groups: allreduces of fp16, fp32 and bf16 interleaved (fused per dtype and op), blocking and
 * non-blocking ones, broken by a broadcast; nothing runs before cohort_group_end. */
static void test_groups(int reps)
{
    enum { M = 60 };
    static const cohort_dtype_t gt[3] = { COHORT_FLOAT16, COHORT_FLOAT32, COHORT_BFLOAT16 };
    op_t ops[M + 1];
    cohort_request_t *reqs[M + 1];
    memset(ops, 0, sizeof ops);
    uint64_t r0 = 0, b0 = 0, r1 = 0, b1 = 0;
    cohort_status_t st = cohort_comm_fusion_stats(comm, &r0, &b0);
    CHECK(st == COHORT_SUCCESS, "fusion stats: %s", cohort_last_error());
    for (int rep = 0; rep < reps; rep++) {
        int n = 0, nreq = 0;
        st = cohort_group_start(comm);
        CHECK(st == COHORT_SUCCESS, "group_start: %s", cohort_last_error());
        st = cohort_group_start(comm);   /* nested: the outer end runs them */
        CHECK(st == COHORT_SUCCESS, "nested group_start: %s", cohort_last_error());
        for (int i = 0; i < M + 1; i++) {
            op_t *o = &ops[n++];
            o->salt = 7000 + rep * 100 + i;
            o->t = gt[i % 3];
            o->count = (size_t)(1 + (i * 37) % 300);
            o->inplace = i % 2;
            o->kind = K_ALLREDUCE;
            o->rop = i % 5 == 4 ? COHORT_MAX : COHORT_SUM;
            if (i == M / 2) {   /* a broadcast in the middle: no batch crosses it */
                o->kind = K_BCAST;
                o->root = rep % nranks;
                o->rop = COHORT_SUM;
                o->inplace = 0;
            }
            prepare(o);
            if (!o->inplace && o->recv) memset(o->recv, 0x33, o->count * cohort_dtype_size(o->t));
            int blocking = i % 4 == 3;
            st = issue(o, blocking);
            CHECK(st == COHORT_SUCCESS, "%s in a group: %s", o->desc, cohort_last_error());
            if (!blocking) reqs[nreq++] = o->req;
            if (blocking && o->recv)   /* returned at once, not run yet */
                CHECK((unsigned char)o->recv[0] == 0x33, "%s: a blocking call in a group ran "
                      "before cohort_group_end", o->desc);
        }
        st = cohort_group_end(comm);
        CHECK(st == COHORT_SUCCESS, "inner group_end: %s", cohort_last_error());
        st = cohort_group_end(comm);
        CHECK(st == COHORT_SUCCESS, "group_end: %s", cohort_last_error());
        st = cohort_waitall((size_t)nreq, reqs, NULL);
        CHECK(st == COHORT_SUCCESS, "group's requests: %s", cohort_last_error());
        for (int i = 0; i < n; i++) verify(&ops[i]);
        for (int i = 0; i < n; i++) release(&ops[i]);
    }
    st = cohort_comm_fusion_stats(comm, &r1, &b1);
    const char *thr = getenv("COHORT_FUSION_THRESHOLD");
    int off = thr && !strcmp(thr, "0");
    CHECK(st == COHORT_SUCCESS && (off ? r1 == r0 && b1 == b0 :
                                   nranks == 1 || (b1 > b0 && r1 - r0 > b1 - b0)),
          "groups: %llu requests fused in %llu batches (fusion %s)",
          (unsigned long long)(r1 - r0), (unsigned long long)(b1 - b0), off ? "off" : "on");
    if (rank == 0)
        printf("groups: %llu allreduces ran in %llu fused batches\n",
               (unsigned long long)(r1 - r0), (unsigned long long)(b1 - b0));
    st = cohort_group_end(comm);
    CHECK(st == COHORT_ERR_INVALID_ARG && strstr(cohort_last_error(), "no group is open"),
          "group_end without a group: %d '%s'", (int)st, cohort_last_error());
    cohort_comm_t *sub = NULL;
    cohort_group_start(comm);
    st = cohort_comm_split(comm, 0, rank, &sub);
    CHECK(st == COHORT_ERR_INVALID_ARG && strstr(cohort_last_error(), "inside a group"),
          "split in a group: %d '%s'", (int)st, cohort_last_error());
    cohort_group_end(comm);
}

/* Outside groups: allreduces queued back to back fuse by the counts each batch carries for the
 * next (core/engine.c): dtypes, ops and sizes interleaved, lone calls waited for at once between
 * bursts, an allreduce too large to run alone through the fusion buffer (a head of more than 16
 * KiB negotiates), a blocking allreduce in the middle of a burst. In caller mode the whole
 * burst is queued before anything runs, so the batches are known to fuse (about 400 of the 450
 * requests at np 2-5): checked there. */
static void test_queue_fusion(void)
{
    enum { M = 150 };
    static const cohort_dtype_t qt[4] = { COHORT_FLOAT32, COHORT_FLOAT16, COHORT_INT8,
                                          COHORT_FLOAT64 };
    static const cohort_op_t qo[5] = { COHORT_SUM, COHORT_SUM, COHORT_MAX, COHORT_AVG,
                                       COHORT_MIN };
    op_t *ops = calloc(M, sizeof *ops);
    cohort_request_t *reqs[M];
    CHECK(ops != NULL, "no memory");
    if (!ops) return;
    uint64_t r0 = 0, b0 = 0, r1 = 0, b1 = 0;
    cohort_status_t st = cohort_comm_fusion_stats(comm, &r0, &b0);
    CHECK(st == COHORT_SUCCESS, "fusion stats: %s", cohort_last_error());
    for (int rep = 0; rep < 3; rep++) {
        /* lone calls, each waited for at once */
        for (int i = 0; i < 12; i++) {
            op_t *o = &ops[i];
            memset(o, 0, sizeof *o);
            o->salt = 9000 + rep * 1000 + i;
            o->t = qt[i % 4];
            o->rop = o->t == COHORT_INT8 && i % 5 == 3 ? COHORT_MAX : qo[i % 5];
            o->count = (size_t)(1 + (i * 53) % 40);
            o->inplace = i % 3 == 0;
            o->kind = K_ALLREDUCE;
            prepare(o);
            st = issue(o, 0);
            CHECK(st == COHORT_SUCCESS, "%s: %s", o->desc, cohort_last_error());
            if (st) continue;
            st = cohort_wait(o->req);
            CHECK(st == COHORT_SUCCESS, "lone %s: %s", o->desc, cohort_last_error());
            verify(o);
            release(o);
        }
        /* a burst */
        int nreq = 0;
        for (int i = 0; i < M; i++) {
            op_t *o = &ops[i];
            memset(o, 0, sizeof *o);
            o->salt = 9500 + rep * 1000 + i;
            o->t = qt[(i / 7) % 4];
            o->rop = o->t == COHORT_INT8 && qo[(i / 3) % 5] == COHORT_AVG ? COHORT_SUM
                     : qo[(i / 3) % 5];
            o->count = (size_t)(1 + (i * 37) % 700);
            if (i == 40 + rep) o->count = 20000;   /* over 16 KiB: as a head, it negotiates */
            o->inplace = i % 2;
            o->kind = K_ALLREDUCE;
            prepare(o);
            int blocking = i == 100;
            st = issue(o, blocking);
            CHECK(st == COHORT_SUCCESS, "%s in a burst: %s", o->desc, cohort_last_error());
            if (!blocking && !st) reqs[nreq++] = o->req;
        }
        st = cohort_waitall((size_t)nreq, reqs, NULL);
        CHECK(st == COHORT_SUCCESS, "burst: %s", cohort_last_error());
        for (int i = 0; i < M; i++) verify(&ops[i]);
        for (int i = 0; i < M; i++) release(&ops[i]);
    }
    st = cohort_comm_fusion_stats(comm, &r1, &b1);
    const char *thr = getenv("COHORT_FUSION_THRESHOLD"), *pr = getenv("COHORT_PROGRESS");
    int off = thr && !strcmp(thr, "0"), caller = pr && !strcmp(pr, "caller");
    CHECK(st == COHORT_SUCCESS && (off ? r1 == r0 && b1 == b0 : !caller || nranks == 1 ||
                                   (b1 > b0 && r1 - r0 >= M && r1 - r0 > 2 * (b1 - b0))),
          "queued allreduces: %llu requests fused in %llu batches (fusion %s, %s progress)",
          (unsigned long long)(r1 - r0), (unsigned long long)(b1 - b0), off ? "off" : "on",
          caller ? "caller" : "thread");
    if (rank == 0)
        printf("queued allreduces: %llu ran in %llu fused batches\n",
               (unsigned long long)(r1 - r0), (unsigned long long)(b1 - b0));
    free(ops);
}

/* Point to point: a ring exchange in a group (blocking forms), tagged non-blocking messages
 * completed in scrambled order, messages between collectives, blocking send/recv in the classic
 * even/odd order; sizes from 0 to 4 MiB + odd. */
static void test_p2p(unsigned *seed)
{
    if (nranks < 2) return;
    int right = (rank + 1) % nranks, left = (rank + nranks - 1) % nranks;
    static const size_t sizes[] = { 0, 1, 1001, (1u << 20) + 3 };
    for (int si = 0; si < 4; si++) {
        size_t n = sizes[si];
        float *out = xmalloc(n * sizeof *out), *in = xmalloc(n * sizeof *in);
        for (size_t i = 0; i < n; i++) {
            out[i] = (float)(rank * 1000 + (int)(i % 997));
            in[i] = -1;
        }
        cohort_status_t st = cohort_group_start(comm);
        if (!st) st = cohort_send(comm, out, n, COHORT_FLOAT32, right, 7);
        if (!st) st = cohort_recv(comm, in, n, COHORT_FLOAT32, left, 7);
        cohort_status_t e = cohort_group_end(comm);
        CHECK(!st && !e, "ring exchange of %zu floats in a group: %s", n, cohort_last_error());
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) bad += in[i] != (float)(left * 1000 + (int)(i % 997));
        CHECK(bad == 0, "ring exchange of %zu floats: %zu wrong", n, bad);
        /* blocking, even ranks send first (an odd number of ranks: the last pair is both even) */
        if (nranks % 2 == 0 && n <= 1001) {
            int partner = rank ^ 1;
            for (size_t i = 0; i < n; i++) in[i] = -1;
            if (rank % 2 == 0) {
                st = cohort_send(comm, out, n, COHORT_FLOAT32, partner, 3);
                if (!st) st = cohort_recv(comm, in, n, COHORT_FLOAT32, partner, 3);
            } else {
                st = cohort_recv(comm, in, n, COHORT_FLOAT32, partner, 3);
                if (!st) st = cohort_send(comm, out, n, COHORT_FLOAT32, partner, 3);
            }
            bad = 0;
            for (size_t i = 0; i < n; i++) bad += in[i] != (float)(partner * 1000 + (int)(i % 997));
            CHECK(!st && bad == 0, "blocking send/recv with rank %d, %zu floats: %s, %zu wrong",
                  partner, n, cohort_last_error(), bad);
        }
        free(out);
        free(in);
    }
    /* a receive issued first, its send a while later (the engine has taken the receive alone by
     * then), the send blocking: the receive must not hold the send back, in either order of
     * the ranks' progress */
    {
        size_t n = (1u << 20) + 5;
        float *out = xmalloc(n * 4), *in = xmalloc(n * 4);
        for (size_t i = 0; i < n; i++) {
            out[i] = (float)(rank * 7 + (int)(i % 101));
            in[i] = -1;
        }
        cohort_request_t *rr;
        cohort_status_t st = cohort_irecv(comm, in, n, COHORT_FLOAT32, left, 9, &rr);
        struct timespec ts = { 0, 20 * 1000000 };
        nanosleep(&ts, NULL);
        if (!st) st = cohort_send(comm, out, n, COHORT_FLOAT32, right, 9);
        cohort_status_t w = st ? st : cohort_wait(rr);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) bad += in[i] != (float)(left * 7 + (int)(i % 101));
        CHECK(!st && !w && bad == 0, "irecv, then a blocking send (4 MiB): %s, %zu wrong",
              cohort_last_error(), bad);
        free(out);
        free(in);
    }
    /* tagged messages, several per pair, non-blocking, between collectives */
    enum { T = 6 };
    int64_t *sbuf[T], *rbuf[T];
    size_t cnt[T];
    cohort_request_t *reqs[2 * T + 2];
    int nr = 0;
    double x = 1, y = 0;
    for (int t = 0; t < T; t++) {
        cnt[t] = (size_t)(t * t * 37 + (t == 3 ? 100000 : 0));
        sbuf[t] = xmalloc(cnt[t] * 8);
        rbuf[t] = xmalloc(cnt[t] * 8);
        for (size_t i = 0; i < cnt[t]; i++) {
            sbuf[t][i] = (int64_t)rank * 1000000 + t * 10000 + (int64_t)i;
            rbuf[t][i] = -1;
        }
    }
    for (int t = 0; t < T; t++) {
        cohort_status_t st = cohort_irecv(comm, rbuf[t], cnt[t], COHORT_INT64, left, 100 + t,
                                          &reqs[nr++]);
        if (!st) st = cohort_isend(comm, sbuf[t], cnt[t], COHORT_INT64, right, 100 + t,
                                   &reqs[nr++]);
        CHECK(!st, "isend/irecv tag %d: %s", 100 + t, cohort_last_error());
        if (t == T / 2) {   /* a collective between messages, at the same place everywhere */
            st = cohort_iallreduce(comm, &x, &y, 1, COHORT_FLOAT64, COHORT_SUM, &reqs[nr++]);
            CHECK(!st, "iallreduce among messages: %s", cohort_last_error());
        }
    }
    op_t dummy[2 * T + 2];
    memset(dummy, 0, sizeof dummy);
    for (int i = 0; i < nr; i++) {
        dummy[i].req = reqs[i];
        snprintf(dummy[i].desc, sizeof dummy[i].desc, "p2p request %d", i);
    }
    complete(dummy, nr, seed);
    CHECK(y == nranks, "allreduce among messages: %g", y);
    for (int t = 0; t < T; t++) {
        size_t bad = 0;
        for (size_t i = 0; i < cnt[t]; i++)
            bad += rbuf[t][i] != (int64_t)left * 1000000 + t * 10000 + (int64_t)i;
        CHECK(bad == 0, "tagged message %d (%zu int64) from rank %d: %zu wrong", t, cnt[t], left,
              bad);
        free(sbuf[t]);
        free(rbuf[t]);
    }
}

/* --p2p-mismatch: rank 1 receives with another tag, then with a count too small: both fail
 * with COHORT_ERR_MISMATCH naming the tags and the sizes (rank 0 sends). */
static int mode_p2p_mismatch(void)
{
    int32_t a[100] = { 0 };
    cohort_status_t st;
    if (rank == 0) {
        st = cohort_send(comm, a, 10, COHORT_INT32, 1, 1);
        CHECK(st == COHORT_SUCCESS, "send: %s", cohort_last_error());
    } else if (rank == 1) {
        st = cohort_recv(comm, a, 10, COHORT_INT32, 0, 2);
        printf("rank 1: wrong tag: %s: %s\n", cohort_strerror(st), cohort_last_error());
        CHECK(st == COHORT_ERR_MISMATCH, "wrong tag: %d", (int)st);
    }
    cohort_comm_destroy(comm);
    return 0;
}

static int mode_p2p_short(void)
{
    int32_t a[100] = { 0 };
    cohort_status_t st;
    if (rank == 0) {
        st = cohort_send(comm, a, 100, COHORT_INT32, 1, 4);
        CHECK(st == COHORT_SUCCESS || st == COHORT_ERR_PEER_LOST || st == COHORT_ERR_MISMATCH,
              "send: %s", cohort_last_error());
    } else if (rank == 1) {
        st = cohort_recv(comm, a, 50, COHORT_INT32, 0, 4);
        printf("rank 1: receive too small: %s: %s\n", cohort_strerror(st), cohort_last_error());
        CHECK(st == COHORT_ERR_MISMATCH, "receive too small: %d", (int)st);
    }
    cohort_comm_destroy(comm);
    return 0;
}

/* Wire compression (cohort_comm_set_compression): float32 SUM/AVG allreduces across nodes within
 * the documented bound of the exact sum, identical on every rank; exact again once off; on one
 * node nothing is compressed. */
static double urand(unsigned *s) { return (double)rand_r(s) / RAND_MAX * 2 - 1; }

static void test_compress(void)
{
    static const cohort_dtype_t wires[2] = { COHORT_FLOAT16, COHORT_BFLOAT16 };
    static const size_t counts[] = { 1, 7, 1000, 300001 };
    int nodes = cohort_comm_node_count(comm);
    for (int w = 0; w < 2; w++) {
        cohort_status_t st = cohort_comm_set_compression(comm, wires[w]);
        CHECK(st == COHORT_SUCCESS, "set_compression: %s", cohort_last_error());
        double u = wires[w] == COHORT_FLOAT16 ? 0x1p-11 : 0x1p-8;
        double scale = wires[w] == COHORT_FLOAT16 ? 4 : 1000;
        for (int ci = 0; ci < 4; ci++)
            for (int avg = 0; avg < 2; avg++) {
                size_t n = counts[ci];
                float *x = xmalloc(n * 4), *y = xmalloc(n * 4);
                unsigned seed = 99u + (unsigned)rank * 31u + (unsigned)ci;
                for (size_t i = 0; i < n; i++) x[i] = (float)(urand(&seed) * scale);
                cohort_request_t *req;
                st = cohort_iallreduce(comm, x, y, n, COHORT_FLOAT32,
                                       avg ? COHORT_AVG : COHORT_SUM, &req);
                if (!st) st = cohort_wait(req);
                CHECK(st == COHORT_SUCCESS, "compressed allreduce %zu: %s", n,
                      cohort_last_error());
                const char *algo = cohort_comm_last_algo(comm);
                CHECK((nodes > 1) == !strcmp(algo, "compressed") || !strcmp(algo, "hier"),
                      "compressed allreduce on %d nodes ran '%s'", nodes, algo);
                /* the exact sum of every rank's inputs, recomputed here */
                size_t bad = 0, first = 0;
                double worst = 0;
                for (size_t i = 0; i < n; i++) {
                    double exact = 0, mag = 0;
                    for (int r = 0; r < nranks; r++) {
                        unsigned sr = 99u + (unsigned)r * 31u + (unsigned)ci;
                        double v = 0;
                        for (size_t k = 0; k <= i; k++) v = (float)(urand(&sr) * scale);
                        exact += v;
                        mag += fabs(v);
                    }
                    if (avg) {
                        exact /= nranks;
                        mag /= nranks;
                    }
                    double err = fabs(y[i] - exact), bound = nranks * u * mag + 1e-30;
                    if (nodes == 1) bound = 1e-6 * mag + 1e-30;   /* uncompressed */
                    if (err > bound) {
                        if (!bad) first = i;
                        bad++;
                    }
                    if (err / bound > worst) worst = err / bound;
                    if (i >= 2000) break;   /* the reference is quadratic: check a prefix */
                }
                CHECK(bad == 0, "%s %s count %zu: %zu elements past the bound, first [%zu] "
                      "(worst error %.2f of the bound)", cohort_dtype_name(wires[w]),
                      avg ? "avg" : "sum", n, bad, first, worst);
                /* identical on every rank: the min and max of a checksum agree */
                uint64_t h = 1469598103934665603ull, lo, hi;
                for (size_t i = 0; i < n; i++) {
                    uint32_t b;
                    memcpy(&b, &y[i], 4);
                    h = (h ^ b) * 1099511628211ull;
                }
                h >>= 1;
                st = cohort_allreduce(comm, &h, &lo, 1, COHORT_UINT64, COHORT_MIN);
                if (!st) st = cohort_allreduce(comm, &h, &hi, 1, COHORT_UINT64, COHORT_MAX);
                CHECK(st == COHORT_SUCCESS && lo == hi, "compressed %s count %zu: the ranks "
                      "hold different results", cohort_dtype_name(wires[w]), n);
                free(x);
                free(y);
            }
    }
    cohort_status_t st = cohort_comm_set_compression(comm, COHORT_INT32);
    CHECK(st == COHORT_ERR_INVALID_ARG, "set_compression(int32): %d", (int)st);
    st = cohort_comm_set_compression(comm, COHORT_FLOAT32);
    CHECK(st == COHORT_SUCCESS, "set_compression(none): %s", cohort_last_error());
    float a = 1.5f * (float)(rank + 1), b = 0;
    st = cohort_allreduce(comm, &a, &b, 1, COHORT_FLOAT32, COHORT_SUM);
    CHECK(st == COHORT_SUCCESS && b == 1.5f * (float)(nranks * (nranks + 1) / 2) &&
          strcmp(cohort_comm_last_algo(comm), "compressed"),
          "uncompressed again: %g via %s", b, cohort_comm_last_algo(comm));
}

/* --abort FILE: rank 0 issues nothing; the others' requests wait for it until a second thread
 * aborts the communicator; every request must complete, with COHORT_ERR_ABORTED, in bounded
 * time. Rank 0 leaves once each of them has written FILE.<rank> (earlier, its exit would fail
 * their requests with a lost peer before their abort). */
static void *abort_soon(void *arg)
{
    struct timespec ts = { 0, 300 * 1000000 };
    nanosleep(&ts, NULL);
    cohort_comm_abort(arg);
    return NULL;
}

static int mode_abort(const char *file)
{
    char mine[4096];
    if (rank == 0) {
        for (int r = 1; r < nranks; r++) {
            snprintf(mine, sizeof mine, "%s.%d", file, r);
            CHECK(wait_file(mine), "rank %d never reported its aborted requests", r);
        }
        cohort_comm_abort(comm);
        cohort_comm_destroy(comm);
        return 0;
    }
    enum { N = 24 };
    cohort_request_t *reqs[N];
    cohort_status_t sts[N];
    static float bufs[N][4096];
    int issued = 0;
    for (int i = 0; i < N; i++) {
        cohort_status_t st = i % 3 == 2 ? cohort_ibarrier(comm, &reqs[issued])
            : cohort_iallreduce(comm, bufs[i], bufs[i], 4096, COHORT_FLOAT32, COHORT_SUM,
                                &reqs[issued]);
        CHECK(st == COHORT_SUCCESS, "issue %d: %s", i, cohort_last_error());
        if (!st) issued++;
    }
    pthread_t th;
    pthread_create(&th, NULL, abort_soon, comm);
    double t0 = now_s();
    cohort_status_t st = cohort_waitall((size_t)issued, reqs, sts);
    double took = now_s() - t0;
    pthread_join(th, NULL);
    /* Each rank's own abort completes its requests with COHORT_ERR_ABORTED; a rank whose peer
     * aborted first may hear of that (the abort is told to the job) and fail with
     * COHORT_ERR_PEER_LOST naming the abort: either way every request fails, at once. */
    int aborted = 0;
    for (int i = 0; i < issued; i++)
        aborted += sts[i] == COHORT_ERR_ABORTED || sts[i] == COHORT_ERR_PEER_LOST;
    CHECK((st == COHORT_ERR_ABORTED || (st == COHORT_ERR_PEER_LOST &&
                                        strstr(cohort_last_error(), "cohort_comm_abort"))) &&
          aborted == issued && took < 20,
          "after abort: waitall %d, %d of %d requests failed, %.1f s: %s", (int)st, aborted,
          issued, took, cohort_last_error());
    printf("rank %d: %d requests completed with %s %.2f s after the wait began\n", rank,
           aborted, cohort_strerror(st), took);
    snprintf(mine, sizeof mine, "%s.%d", file, rank);
    touch(mine);
    st = cohort_comm_destroy(comm);
    CHECK(st == COHORT_SUCCESS, "destroy after abort: %s", cohort_last_error());
    return 0;
}

/* --die: the last rank issues requests and exits without completing them; every other rank's
 * requests must complete with an error (no hang) naming an operation. */
static int mode_die(void)
{
    enum { N = 16 };
    static float bufs[N][8192];
    cohort_request_t *reqs[N];
    cohort_status_t sts[N];
    int issued = 0;
    /* one operation done everywhere first (the dying rank's timeline then holds an event) */
    cohort_status_t bst = cohort_barrier(comm);
    CHECK(bst == COHORT_SUCCESS, "barrier: %s", cohort_last_error());
    for (int i = 0; i < N; i++) {
        cohort_status_t st = cohort_iallreduce(comm, bufs[i], bufs[i], 8192, COHORT_FLOAT32,
                                               COHORT_SUM, &reqs[issued]);
        if (!st) issued++;
        if (rank == nranks - 1 && i == 3) {
            fprintf(stderr, "rank %d: exiting with requests outstanding\n", rank);
            fflush(stderr);
            _exit(3);
        }
    }
    double t0 = now_s();
    cohort_status_t st = cohort_waitall((size_t)issued, reqs, sts);
    double took = now_s() - t0;
    int errs = 0;
    for (int i = 0; i < issued; i++) errs += sts[i] != COHORT_SUCCESS;
    printf("rank %d: waitall returned %s after %.1f s, %d of %d requests failed: %s\n", rank,
           cohort_strerror(st), took, errs, issued, cohort_last_error());
    /* the first few may have completed before the death; the rest must fail */
    CHECK(st != COHORT_SUCCESS && errs >= issued - 4 && strstr(cohort_last_error(), "allreduce #"),
          "peer died: waitall %d, %d of %d failed: %s", (int)st, errs, issued,
          cohort_last_error());
    cohort_comm_destroy(comm);
    return 0;
}

/* --timeout FILE: rank 0 issues nothing; the others' requests must all complete with
 * COHORT_ERR_TIMEOUT (or fail naming rank 0) within COHORT_TIMEOUT and a margin; then they
 * write FILE, which rank 0 waits for before it leaves (so it is not seen as lost first). */
static int mode_timeout(const char *file)
{
    enum { N = 10 };
    static double bufs[N][100];
    cohort_request_t *reqs[N];
    cohort_status_t sts[N];
    char mine[4096];
    if (rank == 0) {
        for (int r = 1; r < nranks; r++) {
            snprintf(mine, sizeof mine, "%s.%d", file, r);
            CHECK(wait_file(mine), "rank %d never reported its timeouts", r);
        }
        cohort_comm_abort(comm);
        cohort_comm_destroy(comm);
        return 0;
    }
    int issued = 0;
    for (int i = 0; i < N; i++)
        if (!cohort_iallreduce(comm, bufs[i], bufs[i], 100, COHORT_FLOAT64, COHORT_SUM,
                               &reqs[issued]))
            issued++;
    double t0 = now_s();
    cohort_status_t st = cohort_waitall((size_t)issued, reqs, sts);
    double took = now_s() - t0;
    int to = 0;
    for (int i = 0; i < issued; i++) to += sts[i] == COHORT_ERR_TIMEOUT;
    printf("rank %d: waitall %s after %.1f s, %d of %d timed out: %s\n", rank,
           cohort_strerror(st), took, to, issued, cohort_last_error());
    CHECK(st == COHORT_ERR_TIMEOUT && to == issued && strstr(cohort_last_error(), "rank 0"),
          "timeout: waitall %d, %d of %d TIMEOUT: %s", (int)st, to, issued, cohort_last_error());
    snprintf(mine, sizeof mine, "%s.%d", file, rank);
    touch(mine);
    cohort_comm_abort(comm);
    cohort_comm_destroy(comm);
    return 0;
}

/* --lone-mismatch: one non-blocking allreduce of 10 + 2 x rank floats, waited for at once. It runs
 * alone and carries the next batch's size after its data (core/engine.c), so the collective's
 * count is more than the caller's: every rank's error must still name the counts the callers
 * gave. */
static int mode_lone_mismatch(void)
{
    float a[64], b[64];
    memset(a, 0, sizeof a);
    cohort_request_t *req = NULL;
    cohort_status_t st = cohort_iallreduce(comm, a, b, 10 + 2 * (size_t)rank, COHORT_FLOAT32,
                                           COHORT_SUM, &req);
    CHECK(st == COHORT_SUCCESS, "iallreduce: %s", cohort_last_error());
    if (!st) st = cohort_wait(req);
    printf("rank %d: lone allreduce of %d: %s: %s\n", rank, 10 + 2 * rank, cohort_strerror(st),
           cohort_last_error());
    CHECK(st == COHORT_ERR_MISMATCH, "lone mismatch: %d '%s'", (int)st, cohort_last_error());
    cohort_comm_destroy(comm);
    return 0;
}

/* --group-mismatch: rank 0's group holds one allreduce more than the others' (so its fused
 * batch is larger): every rank fails with COHORT_ERR_MISMATCH, none hangs. */
static int mode_group_mismatch(void)
{
    float a[3][10], b[3][10];
    memset(a, 0, sizeof a);
    cohort_request_t *reqs[3];
    int n = rank == 0 ? 3 : 2;
    cohort_group_start(comm);
    for (int i = 0; i < n; i++)
        cohort_iallreduce(comm, a[i], b[i], 10, COHORT_FLOAT32, COHORT_SUM, &reqs[i]);
    cohort_status_t st = cohort_group_end(comm);
    CHECK(st == COHORT_SUCCESS, "group_end: %s", cohort_last_error());
    cohort_status_t sts[3];
    double t0 = now_s();
    st = cohort_waitall((size_t)n, reqs, sts);
    printf("rank %d: group of %d allreduces: %s after %.1f s: %s\n", rank, n,
           cohort_strerror(st), now_s() - t0, cohort_last_error());
    CHECK(st == COHORT_ERR_MISMATCH, "group mismatch: %d '%s'", (int)st, cohort_last_error());
    cohort_comm_destroy(comm);
    return 0;
}

/* --stop-at K: rank 1 stops itself (SIGSTOP) before its K-th allreduce; the others time out
 * (COHORT_TIMEOUT) and their errors must name rank 1 as the one that never joined. */
static int mode_stop_at(int k)
{
    for (int i = 1;; i++) {
        if (rank == 1 && i == k) {
            fflush(stdout);
            raise(SIGSTOP);
        }
        double x = 1, y = 0;
        cohort_status_t st = cohort_allreduce(comm, &x, &y, 1, COHORT_FLOAT64, COHORT_SUM);
        if (st) {
            printf("rank %d: allreduce %d: %s: %s\n", rank, i, cohort_strerror(st),
                   cohort_last_error());
            fflush(stdout);
            _exit(3);
        }
    }
}

/* --busy R: what a training step does: R rounds of allreduces of several sizes issued, then the
 * caller computes (a loop that makes no cohort call) for a few ms, then waits for them all; every
 * element checked. Run with every rank and thread on one CPU (taskset), the progress thread's
 * yields give the core to the computing thread: its waits then hold (core/p2p.c), which must
 * change nothing but the timing. */
static int mode_busy(int rounds)
{
    static const size_t counts[] = { 1, 5, 1000, 65536 + 3, 262144 };
    enum { N = sizeof counts / sizeof counts[0] };
    volatile double sink = 0;
    for (int r = 0; r < rounds; r++) {
        float *buf[N];
        cohort_request_t *req[N];
        for (int i = 0; i < N; i++) {
            buf[i] = xmalloc(counts[i] * sizeof(float));
            for (size_t j = 0; j < counts[i]; j++)
                buf[i][j] = (float)((rank + 1) * (int)((j + (size_t)r) % 97));
            cohort_status_t st = cohort_iallreduce(comm, buf[i], buf[i], counts[i],
                                                   COHORT_FLOAT32, COHORT_SUM, &req[i]);
            CHECK(st == COHORT_SUCCESS, "busy round %d: iallreduce of %zu: %s", r, counts[i],
                  cohort_last_error());
        }
        double end = now_s() + 0.002 + 0.001 * (rank % 3);
        while (now_s() < end)
            for (int k = 0; k < 1000; k++) sink += k * 0.5;
        cohort_status_t st = cohort_waitall(N, req, NULL);
        CHECK(st == COHORT_SUCCESS, "busy round %d: waitall: %s", r, cohort_last_error());
        long sum = (long)nranks * (nranks + 1) / 2;
        for (int i = 0; i < N; i++) {
            size_t bad = 0;
            for (size_t j = 0; j < counts[i]; j++)
                bad += buf[i][j] != (float)(sum * (long)((j + (size_t)r) % 97));
            CHECK(bad == 0, "busy round %d: allreduce of %zu: %zu wrong elements", r, counts[i],
                  bad);
            free(buf[i]);
        }
    }
    cohort_status_t st = cohort_comm_destroy(comm);
    CHECK(st == COHORT_SUCCESS, "destroy: %s", cohort_last_error());
    return 0;
}

/* --idle S: after a non-blocking allreduce (the progress thread exists), the process sleeps S
 * seconds; the CPU time it used meanwhile (getrusage) must be next to nothing: the thread waits
 * on a condition variable, it does not poll. */
static int mode_idle(double secs)
{
    double x = 1, y = 0;
    cohort_request_t *req;
    cohort_status_t st = cohort_iallreduce(comm, &x, &y, 1, COHORT_FLOAT64, COHORT_SUM, &req);
    if (!st) st = cohort_wait(req);
    CHECK(st == COHORT_SUCCESS, "iallreduce: %s", cohort_last_error());
    struct rusage a, b;
    getrusage(RUSAGE_SELF, &a);
    double t0 = now_s();
    while (now_s() - t0 < secs) {
        struct timespec ts = { 0, 100 * 1000000 };
        nanosleep(&ts, NULL);
    }
    getrusage(RUSAGE_SELF, &b);
    double cpu = (double)(b.ru_utime.tv_sec - a.ru_utime.tv_sec) +
                 (double)(b.ru_stime.tv_sec - a.ru_stime.tv_sec) +
                 (double)(b.ru_utime.tv_usec - a.ru_utime.tv_usec) * 1e-6 +
                 (double)(b.ru_stime.tv_usec - a.ru_stime.tv_usec) * 1e-6;
    printf("rank %d: idle %.1f s with a progress thread: %.1f ms of CPU\n", rank, secs,
           cpu * 1e3);
    CHECK(cpu < 0.05 * secs, "an idle process used %.3f s of CPU in %.1f s", cpu, secs);
    st = cohort_barrier(comm);
    CHECK(st == COHORT_SUCCESS, "barrier: %s", cohort_last_error());
    cohort_comm_destroy(comm);
    return 0;
}

int main(int argc, char **argv)
{
    cohort_status_t st = cohort_comm_init(&comm);
    if (st) {
        fprintf(stderr, "cohort_comm_init: %s\n", cohort_last_error());
        return 1;
    }
    rank = cohort_comm_rank(comm);
    nranks = cohort_comm_size(comm);
    if (nranks > 64) {
        fprintf(stderr, "nbcheck: at most 64 ranks\n");
        return 1;
    }
    if (argc > 2 && !strcmp(argv[1], "--abort")) mode_abort(argv[2]);
    else if (argc > 1 && !strcmp(argv[1], "--die")) mode_die();
    else if (argc > 1 && !strcmp(argv[1], "--group-mismatch")) mode_group_mismatch();
    else if (argc > 1 && !strcmp(argv[1], "--lone-mismatch")) mode_lone_mismatch();
    else if (argc > 2 && !strcmp(argv[1], "--stop-at")) mode_stop_at(atoi(argv[2]));
    else if (argc > 2 && !strcmp(argv[1], "--idle")) mode_idle(atof(argv[2]));
    else if (argc > 1 && !strcmp(argv[1], "--p2p-mismatch")) mode_p2p_mismatch();
    else if (argc > 1 && !strcmp(argv[1], "--p2p-short")) mode_p2p_short();
    else if (argc > 2 && !strcmp(argv[1], "--timeout")) mode_timeout(argv[2]);
    else if (argc > 2 && !strcmp(argv[1], "--busy")) mode_busy(atoi(argv[2]));
    else {
        unsigned seed = 12345u + (unsigned)rank * 7919u;
        int salt = 0;
        for (int d = 0; d < NDT; d++) batch(dtypes[d], salt += 101, &seed, 0);
        batch(COHORT_FLOAT32, salt += 101, &seed, 1);   /* the same calls, blocking */
        batch(COHORT_INT32, salt += 101, &seed, 1);
        test_progress();
        test_groups(4);
        test_queue_fusion();
        test_p2p(&seed);
        test_compress();
        test_bad_args();
        st = cohort_comm_destroy(comm);
        CHECK(st == COHORT_SUCCESS, "destroy: %s", cohort_last_error());
    }
    printf("[rank %d] %ld passed, %ld failed\n", rank, passed, failed);
    return failed ? 1 : 0;
}
