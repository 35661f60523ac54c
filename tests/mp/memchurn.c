/* SPDX-License-Identifier: BSD-3-Clause */
/* Buffer lifetimes as frameworks have them, run as ranks under cohortrun:
 *   cohortrun -np N tests/mp/memchurn [--min BYTES] [--max BYTES] [--kinds LIST] [--colls LIST]
 *                                    [--repeat R] [--need-reuse N]
 *
 * Every collective, at sizes from 4 bytes (--min) to --max (default 8 MiB, odd element counts), with its
 * buffers made and dropped between calls in each way a program does it:
 *   malloc   malloc before the call, free after (heap blocks and, past glibc's threshold, mmap'd
 *            ones, whose addresses the next call of that size usually gets again)
 *   mmap     an anonymous mapping asked for at the address of the last one (so it lands there:
 *            same virtual address, new pages), munmap after
 *   realloc  one block per buffer, realloc'd to each call's size (moves, grows and shrinks)
 *   madvise  one mapping per buffer, MADV_DONTNEED'd before each call (same address, its pages
 *            replaced by fresh zero pages at the next touch)
 *   reuse    one block per buffer, kept for the whole run (the case caches are made for)
 *   cohort   cohort_mem_alloc before the call, cohort_mem_free after
 * in place and out of place. Inputs depend on the call's index, so data of an earlier call is
 * never right; the receive buffer is poisoned before each call, and every element of every
 * result is checked. A transport that kept a registration or mapping by address after the memory
 * behind it was unmapped would read or write the old pages: a wrong element here.
 *
 * Each rank counts the calls whose buffers landed where an earlier, freed buffer had been, and
 * prints it; --need-reuse N fails unless at least N calls did (so that a change of allocator
 * cannot quietly turn this test into one that cannot fail).
 * Prints "N passed, N failed" on rank 0; exits 1 on any failure. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cohort/cohort.h>

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

enum { K_MALLOC, K_MMAP, K_REALLOC, K_MADVISE, K_REUSE, K_COHORT, NKINDS };
static const char *kind_name[NKINDS] = { "malloc", "mmap", "realloc", "madvise", "reuse", "cohort" };
enum { C_ALLREDUCE, C_BROADCAST, C_REDUCE, C_ALLGATHER, C_REDUCE_SCATTER, C_ALLTOALL, C_BARRIER,
       NCOLLS };
static const char *coll_name[NCOLLS] = { "allreduce", "broadcast", "reduce", "allgather",
                                         "reduce_scatter", "alltoall", "barrier" };

static int rank, nranks;
static long passed, failed, calls, reused;

#define FAIL(...)                                                                            \
    do {                                                                                     \
        failed++;                                                                            \
        if (failed <= 20) {                                                                  \
            fprintf(stderr, "[rank %d] FAIL: ", rank);                                       \
            fprintf(stderr, __VA_ARGS__);                                                    \
            fprintf(stderr, "\n");                                                           \
        }                                                                                    \
    } while (0)

/* ---- buffers ------------------------------------------------------------------------------ */

/* One buffer slot (send or receive) and what its kind keeps between calls. */
typedef struct slot {
    void *p;            /* this call's buffer */
    size_t len;
    void *keep;         /* realloc/reuse: the block; madvise: the mapping */
    size_t keep_len;
    void *last_mmap;    /* mmap: where the last mapping was (asked for again) */
} slot_t;

/* Ranges freed so far (the last few): a new buffer inside one reuses an address. */
#define NFREED 16
static struct { uintptr_t a, b; } freed[NFREED];
static int nfreed_next;

static void note_freed(const void *p, size_t len)
{
    freed[nfreed_next].a = (uintptr_t)p;
    freed[nfreed_next].b = (uintptr_t)p + len;
    nfreed_next = (nfreed_next + 1) % NFREED;
}

static int was_freed(const void *p, size_t len)
{
    uintptr_t a = (uintptr_t)p, b = a + len;
    for (int i = 0; i < NFREED; i++)
        if (freed[i].a < b && a < freed[i].b) return 1;
    return 0;
}

static size_t page_round(size_t n)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    return (n + pg - 1) / pg * pg;
}

static void die(const char *what)
{
    fprintf(stderr, "[rank %d] %s failed\n", rank, what);
    exit(2);
}

static void *slot_get(slot_t *s, int kind, size_t len, size_t max)
{
    size_t n = len ? len : 1;
    s->len = n;
    switch (kind) {
    case K_MALLOC:
        if (!(s->p = malloc(n))) die("malloc");
        break;
    case K_MMAP: {
        size_t m = page_round(n);
        void *p = mmap(s->last_mmap, m, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) die("mmap");
        s->p = s->last_mmap = p;
        break;
    }
    case K_REALLOC: {
        void *p = realloc(s->keep, n);
        if (!p) die("realloc");
        if (p != s->keep && s->keep) note_freed(s->keep, s->keep_len);
        s->keep = s->p = p;
        s->keep_len = n;
        break;
    }
    case K_MADVISE:
        if (!s->keep) {
            s->keep_len = page_round(max ? max : 1);
            s->keep = mmap(NULL, s->keep_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                           -1, 0);
            if (s->keep == MAP_FAILED) die("mmap");
        } else {
            /* The pages go; the range reads zeros until written, on new pages: as good as
             * freed and mapped again at the same address. */
            if (madvise(s->keep, s->keep_len, MADV_DONTNEED)) die("madvise");
            note_freed(s->keep, s->keep_len);
        }
        s->p = s->keep;
        break;
    case K_REUSE:
        if (!s->keep) {
            s->keep_len = max ? max : 1;
            if (!(s->keep = malloc(s->keep_len))) die("malloc");
        }
        s->p = s->keep;
        break;
    case K_COHORT:
        if (cohort_mem_alloc(n, &s->p) != COHORT_SUCCESS) {
            fprintf(stderr, "[rank %d] cohort_mem_alloc(%zu): %s\n", rank, n, cohort_last_error());
            exit(2);
        }
        break;
    }
    return s->p;
}

static void slot_put(slot_t *s, int kind)
{
    switch (kind) {
    case K_MALLOC:
        note_freed(s->p, s->len);
        free(s->p);
        break;
    case K_MMAP:
        note_freed(s->p, page_round(s->len));
        munmap(s->p, page_round(s->len));
        break;
    case K_COHORT:
        note_freed(s->p, s->len);
        if (cohort_mem_free(s->p) != COHORT_SUCCESS) FAIL("cohort_mem_free: %s", cohort_last_error());
        break;
    default:
        break;   /* realloc, madvise, reuse: kept for the next call */
    }
    s->p = NULL;
}

static void slot_fini(slot_t *s, int kind)
{
    if (kind == K_MADVISE && s->keep) munmap(s->keep, s->keep_len);
    else if (kind == K_REALLOC || kind == K_REUSE) free(s->keep);
    memset(s, 0, sizeof *s);
}

/* ---- values ------------------------------------------------------------------------------- */

/* Rank r's input element j in call c: exact in int32 and float64, and summed over 64 ranks. */
static int32_t val(int r, size_t j, long c)
{
    return (int32_t)(((uint64_t)j * 2654435761u + (uint64_t)c * 40503u + (uint64_t)r * 977u) %
                     1000003u) - 500000;
}

#define POISON_I32 INT32_MIN

static void put_elem(void *buf, cohort_dtype_t t, size_t i, int64_t v)
{
    if (t == COHORT_INT32) ((int32_t *)buf)[i] = (int32_t)v;
    else ((double *)buf)[i] = (double)v;
}

static int64_t get_elem(const void *buf, cohort_dtype_t t, size_t i)
{
    if (t == COHORT_INT32) return ((const int32_t *)buf)[i];
    return (int64_t)((const double *)buf)[i];
}

static void poison(void *buf, cohort_dtype_t t, size_t n)
{
    for (size_t i = 0; i < n; i++) put_elem(buf, t, i, POISON_I32);
}

/* Checks n elements of buf against want(i); names the first few that differ. */
#define CHECK_ALL(buf, t, n, want_expr, ...)                                                 \
    do {                                                                                     \
        size_t bad_ = 0, first_ = 0;                                                         \
        int64_t got_ = 0, w_ = 0;                                                            \
        for (size_t i = 0; i < (n); i++) {                                                   \
            int64_t w = (want_expr), g = get_elem((buf), (t), i);                            \
            if (g != w) {                                                                    \
                if (!bad_) { first_ = i; got_ = g; w_ = w; }                                 \
                bad_++;                                                                      \
            }                                                                                \
        }                                                                                    \
        if (bad_) {                                                                          \
            FAIL(__VA_ARGS__);                                                               \
            if (failed <= 20)                                                                \
                fprintf(stderr, "    %zu of %zu elements wrong, the first at %zu: got %" PRId64 \
                        " want %" PRId64 "%s\n", bad_, (size_t)(n), first_, got_, w_,        \
                        got_ == POISON_I32 ? " (never written)" : "");                       \
        } else {                                                                             \
            passed++;                                                                        \
        }                                                                                    \
    } while (0)

static int64_t sum_over_ranks(size_t j, long c)
{
    int64_t s = 0;
    for (int r = 0; r < nranks; r++) s += val(r, j, c);
    return s;
}

/* ---- one call ----------------------------------------------------------------------------- */

static void one(cohort_comm_t *comm, int coll, int kind, size_t bytes, int inplace,
                cohort_dtype_t t, size_t max, slot_t *ss, slot_t *rs)
{
    long c = calls++;
    size_t es = cohort_dtype_size(t);
    size_t count = bytes / es ? bytes / es : 1;   /* broadcast, allreduce, reduce: elements */
    size_t blk = count / (size_t)nranks;       /* allgather, reduce_scatter, alltoall: per rank */
    if (blk == 0) blk = 1;
    int root = (int)(c % nranks);
    size_t n = nranks;
    size_t send_n = 0, recv_n = 0;             /* elements of each buffer */
    switch (coll) {
    case C_ALLREDUCE: case C_REDUCE: send_n = recv_n = count; break;
    case C_BROADCAST: recv_n = count; break;
    case C_ALLGATHER: send_n = blk; recv_n = blk * n; break;
    case C_REDUCE_SCATTER: send_n = blk * n; recv_n = blk; break;
    case C_ALLTOALL: send_n = recv_n = blk * n; break;
    default: break;
    }
    /* In place: one buffer, the larger of the two. */
    if (coll == C_BROADCAST || coll == C_BARRIER) inplace = 0;
    if (coll == C_ALLTOALL) inplace = 0;       /* alltoall has no in-place form */
    void *sb = NULL, *rb = NULL;
    size_t big = send_n > recv_n ? send_n : recv_n;
    if (coll != C_BARRIER) {
        if (inplace) {
            rb = slot_get(rs, kind, big * es, max);
        } else {
            if (recv_n) rb = slot_get(rs, kind, recv_n * es, max);
            if (send_n) sb = slot_get(ss, kind, send_n * es, max);
        }
        if ((rb && was_freed(rb, recv_n * es)) || (sb && was_freed(sb, send_n * es))) reused++;
    }

    cohort_status_t st = COHORT_SUCCESS;
    switch (coll) {
    case C_ALLREDUCE: case C_REDUCE: {
        void *in = inplace ? rb : sb;
        for (size_t i = 0; i < count; i++) put_elem(in, t, i, val(rank, i, c));
        if (!inplace) poison(rb, t, count);
        st = coll == C_ALLREDUCE
                 ? cohort_allreduce(comm, in, rb, count, t, COHORT_SUM)
                 : cohort_reduce(comm, in, rb, count, t, COHORT_SUM, root);
        if (st == COHORT_SUCCESS && (coll == C_ALLREDUCE || rank == root))
            CHECK_ALL(rb, t, count, sum_over_ranks(i, c), "%s #%ld of %zu %s (%s buffers, %s, "
                      "root %d) at %p", coll_name[coll], c, count, cohort_dtype_name(t),
                      kind_name[kind], inplace ? "in place" : "out of place", root, rb);
        break;
    }
    case C_BROADCAST:
        if (rank == root) for (size_t i = 0; i < count; i++) put_elem(rb, t, i, val(root, i, c));
        else poison(rb, t, count);
        st = cohort_broadcast(comm, rb, count, t, root);
        if (st == COHORT_SUCCESS)
            CHECK_ALL(rb, t, count, val(root, i, c), "broadcast #%ld of %zu %s from root %d "
                      "(%s buffers) at %p", c, count, cohort_dtype_name(t), root, kind_name[kind],
                      rb);
        break;
    case C_ALLGATHER: {
        void *in = inplace ? (char *)rb + (size_t)rank * blk * es : sb;
        if (inplace) poison(rb, t, blk * n);
        for (size_t i = 0; i < blk; i++) put_elem(in, t, i, val(rank, i, c));
        if (!inplace) poison(rb, t, blk * n);
        st = cohort_allgather(comm, in, rb, blk, t);
        if (st == COHORT_SUCCESS)
            CHECK_ALL(rb, t, blk * n, val((int)(i / blk), i % blk, c), "allgather #%ld of %zu %s "
                      "per rank (%s buffers, %s) at %p", c, blk, cohort_dtype_name(t),
                      kind_name[kind], inplace ? "in place" : "out of place", rb);
        break;
    }
    case C_REDUCE_SCATTER: {
        void *in = inplace ? rb : sb;
        void *out = inplace ? (char *)rb + (size_t)rank * blk * es : rb;
        for (size_t i = 0; i < blk * n; i++) put_elem(in, t, i, val(rank, i, c));
        if (!inplace) poison(rb, t, blk);
        st = cohort_reduce_scatter(comm, in, out, blk, t, COHORT_SUM);
        if (st == COHORT_SUCCESS)
            CHECK_ALL(out, t, blk, sum_over_ranks((size_t)rank * blk + i, c), "reduce_scatter "
                      "#%ld of %zu %s per rank (%s buffers, %s) at %p", c, blk,
                      cohort_dtype_name(t), kind_name[kind], inplace ? "in place" : "out of place",
                      out);
        break;
    }
    case C_ALLTOALL:
        /* block j of rank r's input goes to rank j: element i of it is val(r, j * blk + i) */
        for (size_t i = 0; i < blk * n; i++) put_elem(sb, t, i, val(rank, i, c));
        poison(rb, t, blk * n);
        st = cohort_alltoall(comm, sb, rb, blk, t);
        if (st == COHORT_SUCCESS)
            CHECK_ALL(rb, t, blk * n, val((int)(i / blk), (size_t)rank * blk + i % blk, c),
                      "alltoall #%ld of %zu %s per rank (%s buffers) at %p", c, blk,
                      cohort_dtype_name(t), kind_name[kind], rb);
        break;
    case C_BARRIER:
        st = cohort_barrier(comm);
        if (st == COHORT_SUCCESS) passed++;
        break;
    }
    if (st != COHORT_SUCCESS) {
        FAIL("%s #%ld (%zu bytes, %s buffers): %s: %s", coll_name[coll], c, bytes,
             kind_name[kind], cohort_strerror(st), cohort_last_error());
        exit(1);   /* the communicator is broken: nothing more to learn */
    }
    if (rb) slot_put(rs, kind);
    if (sb) slot_put(ss, kind);
}

/* ---- main --------------------------------------------------------------------------------- */

static int in_list(const char *list, const char *name)
{
    if (!list) return 1;
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == n && !strncmp(p, name, n)) return 1;
        p += l + (e ? 1 : 0);
    }
    return 0;
}

int main(int argc, char **argv)
{
    size_t min = 0, max = ((size_t)8 << 20) + 4;   /* the largest size below */
    const char *kinds = NULL, *colls = NULL;
    long need_reuse = 0;
    int repeat = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--max") && i + 1 < argc) max = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--min") && i + 1 < argc) min = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--kinds") && i + 1 < argc) kinds = argv[++i];
        else if (!strcmp(argv[i], "--colls") && i + 1 < argc) colls = argv[++i];
        else if (!strcmp(argv[i], "--need-reuse") && i + 1 < argc) need_reuse = atol(argv[++i]);
        else if (!strcmp(argv[i], "--repeat") && i + 1 < argc) repeat = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: memchurn [--min BYTES] [--max BYTES] [--kinds malloc,mmap,realloc,madvise,"
                    "reuse,cohort] [--colls allreduce,...] [--need-reuse N] [--repeat R]\n");
            return 2;
        }
    }
    cohort_comm_t *comm;
    if (cohort_comm_init(&comm) != COHORT_SUCCESS) {
        fprintf(stderr, "init: %s\n", cohort_last_error());
        return 2;
    }
    rank = cohort_comm_rank(comm);
    nranks = cohort_comm_size(comm);
    /* 4 bytes to max: around the eager limits of the transports (8 KiB), their chunk and slot
     * sizes, and large; element counts odd where the dtype allows. */
    static const size_t sizes[] = { 4, 28, 4004, 8196, 65540, 262148, 1048580, 4194308,
                                    8388612 };
    size_t maxbuf = max * 2 + 64;   /* room for allgather's gathered result */
    for (int rep = 0; rep < repeat; rep++)
        for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
            if (sizes[si] > max || sizes[si] < min) continue;
            for (int k = 0; k < NKINDS; k++) {
                if (!in_list(kinds, kind_name[k])) continue;
                slot_t ss = { 0 }, rs = { 0 };
                for (int co = 0; co < NCOLLS; co++) {
                    if (!in_list(colls, coll_name[co])) continue;
                    for (int ip = 0; ip < 2; ip++) {
                        /* twice each: the second call of a size is where a cache hits */
                        for (int again = 0; again < 2; again++)
                            one(comm, co, k, sizes[si], ip, (si + co) % 2 ? COHORT_FLOAT64
                                : COHORT_INT32, maxbuf, &ss, &rs);
                    }
                }
                slot_fini(&ss, k);
                slot_fini(&rs, k);
            }
        }
    if (reused < need_reuse)
        FAIL("only %ld of %ld calls had buffers where freed ones had been (need %ld): the "
             "allocator no longer reuses addresses, so this test cannot see stale caches",
             reused, calls, need_reuse);
    printf("[rank %d] %ld calls, %ld with buffers at reused addresses, %ld checks passed, %ld "
           "failed\n", rank, calls, reused, passed, failed);
    cohort_status_t st = cohort_comm_destroy(comm);
    if (st != COHORT_SUCCESS) {
        fprintf(stderr, "[rank %d] destroy: %s\n", rank, cohort_last_error());
        failed++;
    }
    if (rank == 0) printf("%ld passed, %ld failed\n", passed, failed);
    return failed ? 1 : 0;
}
