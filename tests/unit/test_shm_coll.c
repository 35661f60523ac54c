/* SPDX-License-Identifier: BSD-3-Clause */
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
 *     int8 / int32 / float32 / float64 with SUM / MAX / AVG; the slots written with
 *     streaming stores (hooks.stream 1) at n = 2 and 5, with the measured choice (2) at 3 and 8;
 * (2) stress: 2000 random collectives (one seed: every rank draws the same sequence) at n = 4
 *     and 2 and a 4096-byte round, ranks delayed at random; once more with waiters that sleep
 *     (arm / movable / poll an eventfd, woken through the wake hook): no lost wake-up;
 * (3) tag mismatch: rank 1 starts a collective with another tag (and maybe another count):
 *     every rank gets COHORT_ERR_MISMATCH naming a rank, then start refuses;
 * (4) float32 SUM allreduce of non-integer data: bit-identical on every rank (direct, one
 *     round and many rounds).
 * Integer-valued float data make sums exact, so the reduction order does not matter there.
 *
 * Mapped mode (coll.c's "Mapped mode", from MAP_BYTES): the host table has ABI 1.3's mem_shared,
 * backed by a test allocator that does what cohort_mem_alloc does (a memfd named
 * "cohort-mem-<pid>-<id>" per block, mapped shared); the ranks being threads of one process,
 * /proc/<pid>/fd/<fd> opens for all of them, so mapped mode runs for real. hooks.map is 1 in
 * the worlds below, 0 in (1)-(4). Buffers from the allocator sit at an offset of 64 to 512 bytes
 * in their block, guards included, sometimes a rank's sendbuf and recvbuf in one block. Which
 * ranks' buffers come from the allocator is a function of the collective's number, so every
 * rank knows the path the collective must take (staged, mapped, or mixed: a first round that
 * carries no data, then staged) and checks, for reductions, that it took it (whether it reduced
 * from the staging slots: the host table's kernels see the pointers), and after the world that
 * coll.c logged a mapped / mixed collective where it ran one. As soon as a collective returns,
 * a rank copies its buffers aside (checking the copies) and overwrites them: a peer that still
 * reads them finds poison, one that still writes them is caught spoiling it.
 * (5) mapped matrix: allreduce, broadcast (every root), allgather, reduce_scatter, alltoall for
 *     n = 2, 3, 4, 5, 8, in place and out of place, counts below, at and above MAP_BYTES and of
 *     1 to 2 MiB, int32 / float32 / float64 with SUM / MAX / AVG; every buffer a fresh block
 *     (the peers' caches of 32 mappings see 50+ new blocks per rank and evict);
 * (6) mixed: every pattern of allocator and malloc buffers across ranks (all, none, some ranks,
 *     some buffers, all but one, one, sendbufs only), in place on some ranks only (alltoall in
 *     place never maps), n = 2, 3, 4, 8; hooks.map 0 on one rank (no probe there, so no rank
 *     maps); an ABI 1.2 host table with hooks.map 1 (never maps, never calls mem_shared);
 * (7) mapped stress: the random stress with larger counts, a random pattern per collective,
 *     each rank keeping POOL blocks that it replaces at random (new ids, often the same fd
 *     numbers; a block mapped read-only by the peers comes back as an allreduce's recvbuf, which
 *     they map writable): at least MIN_BLOCKS blocks per rank; yielding and sleeping waiters;
 * (8) float32 SUM allreduce of non-integer data in mapped mode: bit-identical on every rank, at
 *     n = 2 and 3, out of place, in place, and in place on rank 0 only.
 *
 * Small broadcasts (coll.c's small lane, up to sb_bytes(n): the root does not wait for anyone):
 * (9) root ahead: the other ranks start only once the root cannot go on; it must have finished
 *     exactly SB_DEPTH_T broadcasts by then (not 1: no lane; not more: it overwrote entries
 *     nobody read yet); then every rank checks every broadcast's data, n = 2, 3, 5;
 * (10) small-broadcast stress: runs of 100 from one root (a few from others), sizes up to and
 *     past sb_bytes(n), a rare allreduce or barrier, ranks falling far behind now and then (so that
 *     roots reach the lane's depth); yielding and sleeping; at n = 2 also with buffers from the
 *     test allocator, which roots lend from MAP_BYTES (readers copy from them in place);
 * (11) their mismatches: two ranks that each take themselves for the root (both finish; the
 *     next collective fails on every rank, naming the history), a root's peer that runs an
 *     allreduce at that step (both fail), a reader with another count (it fails, the others
 *     finish), the same with a root that lent its buffer (the reader must release it).
 *
 * At close (shm_coll_finish): after every world above, each rank that did not fail calls it
 * (ranks that agree: COHORT_SUCCESS, nothing logged about peers not compared), and
 * (12) its own cases after three good collectives and a last small broadcast: every rank agrees
 *     (n = 2); each rank is the root of the last one (n = 3: every rank fails, naming the roots);
 *     a reader that starts the last broadcast only once its root waits for it at close; a reader
 *     that leaves instead (the peer hook says it is gone: not compared, no wait); one that
 *     starts it only after the others gave up waiting (short deadline: they log that they did
 *     not compare, and it compares with what they left); a root that ran one broadcast more
 *     than its reader (both fail: one called collectives that the other did not; or, when the
 *     reader closed before the root started it, only the root, at its close); a reader
 *     that failed with another count (no one else fails); a reader that closes only after the
 *     others (they compare with what it published at the last step, and do not wait).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
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
#define POISON_BYTE 0xee                      /* mapped worlds: a buffer taken back */
#define STRESS_STEPS 2000
#define SLEEPY_STEPS 600
#define MAP_BYTES ((size_t)32 << 10)          /* coll.c's MAP_MIN: mapped mode from this size */
#define SB_DEPTH_T 64                         /* coll.c's SB_DEPTH */
#define SB_STRESS_STEPS 3000
#define SB_SLEEPY_STEPS 1000
#define MAP_STRESS_STEPS 700
#define MAP_SLEEPY_STEPS 300
#define POOL 3                                /* mapped stress: blocks each rank keeps */
#define INLINE_BYTES 32                       /* coll_int.h's SB_INLINE: the data in an entry's
                                                 own line */
#define FB_BYTES ((size_t)16 << 10)           /* coll_int.h's FB_MAX: allreduces up to this (and
                                                 sb_bytes(n), lane_bytes) reduce from the small
                                                 lane's entries */
#define LANE_STEPS 420                        /* (13): over six times round the lane's entries */
#define MIN_BLOCKS 40                         /* blocks per rank a reuse run must go through (a
                                                 peer's cache holds 32 entries: it evicts) */
/* coll.c's log lines (once per endpoint) that say a mapped collective ran, a mix fell back to
 * staging, a rank could not map its peers, a small broadcast's root lent its buffer */
#define LOG_MAPPED "buffers in place"
#define LOG_LENT "buffers are read in place"
#define LOG_MIXED "staging although"
#define LOG_NOPROBE "cannot map the memory"
/* shm_coll_finish's INFO lines: peers it did not compare, as they had not got as far in time or
 * had left (the second kind also counts as the first) */
#define LOG_UNCOMPARED "not compared"
#define LOG_LEFT "before reaching"

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

/* ---- the test's cohort_mem_alloc ---------------------------------------------------------- */

/* What the core's cohort_mem_alloc does (core/mem.c), for host->mem_shared: a block is a memfd
 * named "cohort-mem-<pid>-<id>" (ids count up in the process, never reused), mapped shared and
 * read-write; a registry answers "is this range in a block, which one". */
typedef struct tblock {
    uintptr_t base;
    size_t len;
    int fd;
    uint64_t id;
} tblock_t;

#define TMEM_MAX 512
static pthread_mutex_t tmem_lock = PTHREAD_MUTEX_INITIALIZER;
static tblock_t tmem_tab[TMEM_MAX];
static int tmem_count;
static uint64_t tmem_ids;
static _Atomic unsigned long tmem_queries;   /* mem_shared calls */

/* A block of at least size bytes (its mapped length in *len), or NULL with errno set. */
static void *tmem_alloc(size_t size, size_t *len)
{
    long pg = sysconf(_SC_PAGESIZE);
    size_t l = (size + (size_t)pg - 1) / (size_t)pg * (size_t)pg;
    pthread_mutex_lock(&tmem_lock);
    uint64_t id = ++tmem_ids;
    pthread_mutex_unlock(&tmem_lock);
    char name[64];
    snprintf(name, sizeof name, "cohort-mem-%d-%llu", (int)getpid(), (unsigned long long)id);
    int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0) return NULL;
    void *p = MAP_FAILED;
    if (ftruncate(fd, (off_t)l) == 0)
        p = mmap(NULL, l, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        close(fd);
        errno = e;
        return NULL;
    }
    pthread_mutex_lock(&tmem_lock);
    int full = tmem_count == TMEM_MAX;
    if (!full) tmem_tab[tmem_count++] = (tblock_t){ (uintptr_t)p, l, fd, id };
    pthread_mutex_unlock(&tmem_lock);
    if (full) {
        munmap(p, l);
        close(fd);
        errno = ENOSPC;
        return NULL;
    }
    if (len) *len = l;
    return p;
}

static void tmem_free(void *p)
{
    if (!p) return;
    pthread_mutex_lock(&tmem_lock);
    int i = 0;
    while (i < tmem_count && tmem_tab[i].base != (uintptr_t)p) i++;
    if (i == tmem_count) {   /* a bug of this test */
        fprintf(stderr, "test_shm_coll: tmem_free(%p): not a block\n", p);
        abort();
    }
    tblock_t b = tmem_tab[i];
    tmem_tab[i] = tmem_tab[--tmem_count];
    pthread_mutex_unlock(&tmem_lock);
    munmap((void *)b.base, b.len);
    close(b.fd);
}

/* host->mem_shared (ABI 1.3) */
static int tmem_shared(const void *ptr, size_t len, int *fd, uint64_t *id, uint64_t *offset)
{
    atomic_fetch_add_explicit(&tmem_queries, 1, memory_order_relaxed);
    uintptr_t p = (uintptr_t)ptr;
    int found = 0;
    pthread_mutex_lock(&tmem_lock);
    for (int i = 0; i < tmem_count && !found; i++) {
        const tblock_t *b = &tmem_tab[i];
        if (p >= b->base && p - b->base <= b->len && len <= b->len - (p - b->base)) {
            *fd = b->fd;
            *id = b->id;
            *offset = p - b->base;
            found = 1;
        }
    }
    pthread_mutex_unlock(&tmem_lock);
    return found;
}

/* Whether a block can be opened here the way coll.c opens a peer's (/proc/<pid>/fd/<fd>, named
 * as expected): if not (no /proc, say), mapped mode cannot run and only the fallback is tested.
 * 1, or 0 with the reason in why. */
static int proc_fd_works(char *why, size_t len)
{
    size_t blen = 0;
    void *blk = tmem_alloc(1, &blen);
    if (!blk) {
        snprintf(why, len, "memfd_create: %s", strerror(errno));
        return 0;
    }
    int fd = -1, ok = 0;
    uint64_t id = 0, off = 1;
    if (!tmem_shared((unsigned char *)blk + 1, blen - 1, &fd, &id, &off) || off != 1) {
        snprintf(why, len, "the test's mem_shared does not find its own block");
        tmem_free(blk);
        return 0;
    }
    char path[64], link[160], want[96];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)getpid(), fd);
    snprintf(want, sizeof want, "/memfd:cohort-mem-%d-%llu (deleted)", (int)getpid(),
             (unsigned long long)id);
    ssize_t n = readlink(path, link, sizeof link - 1);
    if (n < 0) {
        snprintf(why, len, "readlink %s: %s", path, strerror(errno));
    } else {
        link[n] = 0;
        int f = -1;
        if (strcmp(link, want))
            snprintf(why, len, "%s is '%s', expected '%s'", path, link, want);
        else if ((f = open(path, O_RDWR | O_CLOEXEC)) < 0)
            snprintf(why, len, "opening %s: %s", path, strerror(errno));
        else {
            void *m = mmap(NULL, blen, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
            if (m == MAP_FAILED) {
                snprintf(why, len, "mmap of %s: %s", path, strerror(errno));
            } else {
                ((volatile unsigned char *)m)[7] = 0x42;
                ok = ((volatile unsigned char *)blk)[7] == 0x42;
                if (!ok) snprintf(why, len, "a second mapping of %s does not share the pages",
                                  path);
                munmap(m, blen);
            }
            close(f);
        }
    }
    tmem_free(blk);
    return ok;
}

/* ---- host table and hooks ------------------------------------------------------------------ */

static _Thread_local char tl_msg[1024];
static _Thread_local unsigned tl_nerr;
/* coll.c's log lines of this rank (thread) */
static _Thread_local unsigned tl_log_mapped, tl_log_mixed, tl_log_noprobe, tl_log_lent;
static _Thread_local unsigned tl_log_uncompared, tl_log_left;
static _Thread_local char tl_log_noprobe_msg[512];
/* the reductions of this rank: from the staging slots (a source in the area) or not (from
 * sendbufs and mapped peer buffers) */
static _Thread_local uintptr_t tl_area_lo, tl_area_hi;
static _Thread_local uintptr_t tl_stage_lo;   /* the staging slots: below them, the small lane */
static _Thread_local unsigned long tl_red_area, tl_red_else, tl_red_lane;

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
    char b[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b, sizeof b, fmt, ap);
    va_end(ap);
    if (strstr(b, LOG_MAPPED)) {
        tl_log_mapped++;
    } else if (strstr(b, LOG_LENT)) {
        tl_log_lent++;
    } else if (strstr(b, LOG_MIXED)) {
        tl_log_mixed++;
    } else if (strstr(b, LOG_NOPROBE)) {
        tl_log_noprobe++;
        snprintf(tl_log_noprobe_msg, sizeof tl_log_noprobe_msg, "%.500s", b);
    } else if (strstr(b, LOG_UNCOMPARED)) {
        tl_log_uncompared++;
        if (strstr(b, LOG_LEFT)) tl_log_left++;
    }
}

static int in_area(const void *p)
{
    return (uintptr_t)p >= tl_area_lo && (uintptr_t)p < tl_area_hi;
}

/* coll.c's sb_max(n): small broadcasts up to this many bytes (64 KiB at 2 ranks, 32 KiB at 4,
 * 16 KiB at 8, 8 KiB at 16, 4 KiB from 32; whole lines in between) */
static size_t sb_bytes(int n)
{
    size_t m = ((size_t)8 << 20) / ((size_t)n * SB_DEPTH_T);
    m = m > ((size_t)64 << 10) ? (size_t)64 << 10 : m < ((size_t)4 << 10) ? (size_t)4 << 10 : m;
    return m / 64 * 64;
}

/* Allreduces up to this many bytes take the small lane (coll.c's fb_max). */
static size_t lane_bytes(int n)
{
    return FB_BYTES < sb_bytes(n) ? FB_BYTES : sb_bytes(n);
}

static int in_lane(const void *p)
{
    return in_area(p) && (uintptr_t)p < tl_stage_lo;
}

static void host_reduce(void *inout, const void *in, size_t count, cohort_dtype_t dtype,
                        cohort_op_t op)
{
    if (in_lane(in)) tl_red_lane++;
    if (in_area(in)) tl_red_area++;
    else tl_red_else++;
    cohort_reduce_local(inout, in, count, dtype, op);
}

static void host_reduce3(void *out, const void *a, const void *b, size_t count,
                         cohort_dtype_t dtype, cohort_op_t op)
{
    if (in_lane(a) || in_lane(b)) tl_red_lane++;
    if (in_area(a) || in_area(b)) tl_red_area++;
    else tl_red_else++;
    cohort_reduce_local3(out, a, b, count, dtype, op);
}

static const cohort_host_v1_t HOST = {
    .size = sizeof(cohort_host_v1_t),
    .abi_version = COHORT_PLUGIN_ABI_VERSION,
    .log = host_log,
    .error = host_error,
    .reduce = host_reduce,
    .reduce3 = host_reduce3,
    .reduce_finish = cohort_reduce_finish,
    .mem_shared = tmem_shared,
};

/* A core of ABI 1.2: its table ends before mem_shared (set here all the same: coll.c must not
 * call what the size says is not there). */
static const cohort_host_v1_t HOST_1_2 = {
    .size = offsetof(cohort_host_v1_t, mem_shared),
    .abi_version = (1u << 16) | 2u,
    .log = host_log,
    .error = host_error,
    .reduce = host_reduce,
    .reduce3 = host_reduce3,
    .reduce_finish = cohort_reduce_finish,
    .mem_shared = tmem_shared,
};

/* ---- the world: one area, n ranks ---------------------------------------------------------- */

enum { MODE_MATRIX, MODE_STRESS, MODE_MISMATCH, MODE_BITID, MODE_MAP_MATRIX, MODE_MAP_MIXED,
       MODE_SB_AHEAD, MODE_SB_STRESS, MODE_SB_MISMATCH, MODE_FINISH, MODE_LANE };

/* Where a world's buffers come from (w->mem): malloc; the test's cohort_mem_alloc; or, per
 * collective, a pattern of both (spec_t.pat, or drawn from the collective's number). */
enum { MEM_PLAIN, MEM_ALL, MEM_MIX };
/* Patterns (which ranks' buffers come from the test allocator): PAT_WORLD: the world's w->mem
 * (MEM_MIX: one of the others, drawn from the collective's number); every rank; none; a random
 * set of ranks; a random set of buffers; all ranks but one; one rank; every rank's sendbuf but
 * no recvbuf. */
enum { PAT_WORLD, PAT_ALL, PAT_NONE, PAT_RANKS, PAT_BUFS, PAT_ALL_BUT_ONE, PAT_ONE,
       PAT_SEND_ONLY, NPAT };
/* The path a collective must take: staged rounds; one mapped round; a first round that finds a
 * mix of mapped and staged ranks and starts over staged. */
enum { PATH_STAGED, PATH_MAPPED, PATH_MIXED };

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
    /* mapped mode */
    unsigned long long blocks;       /* blocks this rank took from the test allocator */
    unsigned long long paths[3];     /* collectives that had to take each PATH_* (from
                                        MAP_BYTES, of those that may map) */
    unsigned log_mapped, log_mixed, log_noprobe, log_lent;
    char log_noprobe_msg[512];
    /* shm_coll_finish */
    cohort_status_t st_fin;
    char msg_fin[1536];
    unsigned fin_waited;             /* ranks it said it waited on (bits) */
    unsigned log_uncompared, log_left;
} rank_out_t;

typedef struct world {
    int n;
    size_t round;
    void *area;
    size_t area_len;
    int mode, variant, sleepy;
    int stream;                                /* hooks.stream (COHORT_SHM_STREAM) */
    uint64_t salt;
    _Atomic uint64_t progress_ns;              /* last time any rank finished a collective */
    _Atomic int abort;
    _Atomic unsigned long arrivals;            /* barrier entries, all ranks */
    _Atomic unsigned long long wakes, peer_checks;
    int efd[MAXN];                             /* sleepy: one eventfd per rank */
    /* mapped mode */
    int mem;                                   /* MEM_*: where buffers come from */
    int reuse;                                 /* 1: each rank keeps POOL blocks across
                                                  collectives and replaces them at random; 0: a
                                                  fresh block per buffer, freed after it */
    int nomap_rank;                            /* MEM_PLAIN: hooks.map is 0 everywhere; else
                                                  1 but on this rank (-1: none) */
    int old_host;                              /* an ABI 1.2 host table: no mem_shared */
    int evidence;                              /* mapped mode can run here: check which path
                                                  each collective took */
    pthread_barrier_t created;                 /* every rank's shm_coll_new is done (the core's
                                                  creation round) */
    /* MODE_SB_AHEAD */
    _Atomic int go;                            /* the root stalled: the others may start;
                                                  MODE_FINISH: a rank may go on */
    uint64_t stalled_at;                       /* the root's first collective that waited */
    _Atomic unsigned gone;                     /* ranks the peer hook says left (bits) */
    _Atomic int fin_returned;                  /* MODE_FINISH: ranks whose finish returned */
    rank_out_t out[MAXN];
} world_t;

typedef struct rank_ctx {
    world_t *w;
    int rank;
    shm_coll_t *co;
    uint64_t seq;                /* collectives started, as the core's comm->seq */
    unsigned long barriers;
    uint64_t delay_rng;          /* per rank: random delays */
    uint64_t mem_rng;            /* per rank: offsets in blocks, block replacement */
    unsigned char *pool[POOL];   /* w->reuse: the rank's blocks */
    size_t pool_len[POOL];
} rank_ctx_t;

typedef struct hook_ep {
    world_t *w;
    int rank;
} hook_ep_t;

static cohort_status_t hook_peer_check(void *ep, int peer, int report)
{
    hook_ep_t *h = ep;
    (void)report;
    atomic_fetch_add_explicit(&h->w->peer_checks, 1, memory_order_relaxed);
    if (peer >= 0 && peer < MAXN && (atomic_load(&h->w->gone) & (1u << peer)))
        return COHORT_ERR_PEER_LOST;
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
        if (st == COHORT_IN_PROGRESS && w->mode == MODE_SB_AHEAD && c->rank == 0 &&
            !w->stalled_at) {
            w->stalled_at = c->seq;   /* the others start only now */
            atomic_store(&w->go, 1);
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
    int ipmix;                   /* in place on the ranks of ipmask only (else inplace: all) */
    unsigned ipmask;
    int pat;                     /* PAT_*: which ranks' buffers come from the test allocator */
} spec_t;

/* Whether rank r runs sp in place. */
static int rank_inplace(const spec_t *sp, int r)
{
    if (sp->coll == COHORT_TP_BROADCAST) return 1;
    if (sp->coll == COHORT_TP_REDUCE && r != sp->root) return 0;
    return sp->ipmix ? (int)((sp->ipmask >> r) & 1) : sp->inplace;
}

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
    char ip[40];
    if (sp->ipmix) snprintf(ip, sizeof ip, "in place on ranks %#x", sp->ipmask);
    else snprintf(ip, sizeof ip, "%s", sp->inplace ? "in place" : "out of place");
    snprintf(b, len, "collective #%llu %s(count %zu, %s, %s, root %d, %s%s%s) n=%d round=%zu",
             (unsigned long long)seq, coll_name(sp->coll), sp->count, dt_name(sp->dt),
             op_name(sp->op), sp->root, ip,
             sp->coll == COHORT_TP_REDUCE && sp->nullrecv ? ", recvbuf NULL off the root" : "", sp->nonint ? ", fractional data" : "", n,
             round);
}

/* A buffer with GUARD canary bytes either side (from malloc, or inside a block of the test's
 * cohort_mem_alloc: tm). */
typedef struct gbuf {
    unsigned char *base, *p;
    size_t len;
    int tm;
    unsigned char *blk;          /* tm: the block to free with the buffer (NULL: a pool block) */
} gbuf_t;

static void gfill(gbuf_t *g, size_t total)
{
    memset(g->base, GUARD_BYTE, GUARD);
    memset(g->p, GARBAGE_BYTE, g->len);
    memset(g->p + g->len, GUARD_BYTE, total - GUARD - g->len);
}

static int galloc(gbuf_t *g, size_t len)
{
    size_t total = (len + 2 * GUARD + 63) / 64 * 64;
    g->base = aligned_alloc(64, total);
    if (!g->base) return -1;
    g->p = g->base + GUARD;
    g->len = len;
    gfill(g, total);
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
    if (g->tm) tmem_free(g->blk);
    else free(g->base);
    g->base = g->p = g->blk = NULL;
    g->tm = 0;
}

/* Rank c's buffer of len bytes: from malloc, or (tm) at a non-zero offset (64 to 512 bytes,
 * guards included) inside a block of the test allocator: a fresh one, or (w->reuse) the rank's
 * pool block `slot`, replaced by a new block when too small and at random (1 in 4). */
static int galloc_at(rank_ctx_t *c, gbuf_t *g, size_t len, int tm, int slot)
{
    if (!tm) return galloc(g, len);
    uint64_t x = rng_next(&c->mem_rng);
    size_t lead = 64 * (size_t)(x % 8);
    size_t total = (len + 2 * GUARD + 63) / 64 * 64;
    unsigned char *blk;
    if (c->w->reuse) {
        if (!c->pool[slot] || c->pool_len[slot] < lead + total || (x >> 8) % 4 == 0) {
            tmem_free(c->pool[slot]);
            c->pool[slot] = tmem_alloc(lead + total + ((x >> 16) % 3) * 4096, &c->pool_len[slot]);
            if (!c->pool[slot]) return -1;
            c->w->out[c->rank].blocks++;
        }
        blk = c->pool[slot];
        g->blk = NULL;
    } else {
        blk = tmem_alloc(lead + total, NULL);
        if (!blk) return -1;
        c->w->out[c->rank].blocks++;
        g->blk = blk;
    }
    g->tm = 1;
    g->base = blk + lead;
    g->p = g->base + GUARD;
    g->len = len;
    gfill(g, total);
    return 0;
}

/* Rank c's sendbuf and recvbuf (out of place) in one block of the test allocator, one after
 * the other: peers map that block once, for reading and (allreduce) writing. */
static int galloc_two(rank_ctx_t *c, gbuf_t *gs, size_t slen, gbuf_t *gr, size_t rlen, int slot)
{
    size_t stot = (slen + 2 * GUARD + 63) / 64 * 64, rtot = (rlen + 2 * GUARD + 63) / 64 * 64;
    gbuf_t outer = { 0 };
    if (galloc_at(c, &outer, stot + rtot - 2 * GUARD, 1, slot)) return -1;
    *gs = (gbuf_t){ .base = outer.base, .p = outer.base + GUARD, .len = slen, .tm = 1,
                    .blk = outer.blk };
    gfill(gs, stot);
    *gr = (gbuf_t){ .base = outer.base + stot, .p = outer.base + stot + GUARD, .len = rlen,
                    .tm = 1 };
    gfill(gr, rtot);
    return 0;
}

/* Mapped worlds: as soon as the collective returned, the rank takes its buffer g back: copies
 * it (guards included) into *copy, moves the pointers *p1 and *p2 that point into it over to
 * the copy, and overwrites it with POISON_BYTE. A peer that still reads it (a missing wait in
 * coll.c) finds poison; one that still writes it spoils the poison (still_poisoned). */
static int take_back(const gbuf_t *g, gbuf_t *copy, unsigned char **p1, unsigned char **p2)
{
    if (!g->base) return 0;
    if (galloc(copy, g->len)) return -1;
    memcpy(copy->base, g->base, GUARD + g->len + GUARD);
    memset(g->p, POISON_BYTE, g->len);
    unsigned char **pp[2] = { p1, p2 };
    for (int i = 0; i < 2; i++) {
        uintptr_t q = (uintptr_t)*pp[i], lo = (uintptr_t)g->p;
        if (q >= lo && q <= lo + g->len) *pp[i] = copy->p + (q - lo);
    }
    return 0;
}

/* -1 and the first offset that is not POISON_BYTE any more, or 0. */
static int still_poisoned(const gbuf_t *g, size_t *at)
{
    static const unsigned char poison[4096] = { [0 ... 4095] = POISON_BYTE };
    for (size_t o = 0; g->base && o < g->len; o += sizeof poison) {
        size_t l = g->len - o < sizeof poison ? g->len - o : sizeof poison;
        if (memcmp(g->p + o, poison, l)) {
            size_t k = 0;
            while (g->p[o + k] == POISON_BYTE) k++;
            *at = o + k;
            return -1;
        }
    }
    return 0;
}

/* Whether rank j's buffer `which` (0: sendbuf, 1: recvbuf or the one buffer in place) of
 * collective sp, number seq, comes from the test allocator: a function of (world, spec, seq, j)
 * only, so every rank can tell which path the collective must take. */
static int want_tm(const world_t *w, const spec_t *sp, uint64_t seq, int j, int which)
{
    int pat = sp->pat;
    uint64_t h = mix64(w->salt ^ (seq * 0x2545f4914f6cdd1dull) ^ 0x6d656dull);
    if (pat == PAT_WORLD) {
        if (w->mem != MEM_MIX) return w->mem == MEM_ALL;
        /* mostly all (the mapped path), else one of the mixes */
        unsigned k = (unsigned)(h % 12);
        pat = k < 6 ? PAT_ALL : k == 6 ? PAT_NONE : PAT_RANKS + (int)(k - 7);
        h = mix64(h);
    }
    int one = (int)((h >> 40) % (unsigned)w->n);
    switch (pat) {
    case PAT_ALL: return 1;
    case PAT_NONE: return 0;
    case PAT_RANKS: return (int)((h >> j) & 1);
    case PAT_BUFS: return (int)((h >> (16 + 2 * j + which)) & 1);
    case PAT_ALL_BUT_ONE: return j != one;
    case PAT_ONE: return j == one;
    case PAT_SEND_ONLY: return which == 0 || rank_inplace(sp, j);
    default: return 0;
    }
}

/* Rank j's sendbuf and recvbuf: from the test allocator or not. */
static void rank_tm(const world_t *w, const spec_t *sp, uint64_t seq, int j, int *st, int *rt)
{
    *rt = want_tm(w, sp, seq, j, 1);
    *st = rank_inplace(sp, j) ? *rt : want_tm(w, sp, seq, j, 0);
}

static int may_map(int coll)
{
    return coll == COHORT_TP_ALLREDUCE || coll == COHORT_TP_BROADCAST ||
           coll == COHORT_TP_ALLGATHER || coll == COHORT_TP_REDUCE_SCATTER ||
           coll == COHORT_TP_ALLTOALL;
}

/* Whether rank j's buffers qualify (coll.c: the buffers the peers read are mapped; alltoall in
 * place never). */
static int rank_maps(const world_t *w, const spec_t *sp, uint64_t seq, int j)
{
    if (j == w->nomap_rank) return 0;
    int st, rt;
    rank_tm(w, sp, seq, j, &st, &rt);
    switch (sp->coll) {
    case COHORT_TP_ALLREDUCE: return st && rt;
    case COHORT_TP_BROADCAST: return j != sp->root || rt;
    case COHORT_TP_ALLGATHER: case COHORT_TP_REDUCE_SCATTER: return st;
    case COHORT_TP_ALLTOALL: return st && !rank_inplace(sp, j);
    default: return 0;
    }
}

/* The path sp must take; -1: it may not map at all (small, or a collective that never maps). */
static int expect_path(const world_t *w, const spec_t *sp, uint64_t seq)
{
    if (!may_map(sp->coll) || sp->count * esz(sp->dt) < MAP_BYTES || w->n < 2) return -1;
    if (w->mem == MEM_PLAIN || w->old_host || !w->evidence) return PATH_STAGED;
    int all = 1, any = 0;
    for (int j = 0; j < w->n; j++) {
        int m = rank_maps(w, sp, seq, j);
        all &= m;
        any |= m;
    }
    return all ? PATH_MAPPED : any ? PATH_MIXED : PATH_STAGED;
}

static const char *path_name(int p)
{
    return p == PATH_MAPPED ? "mapped" : p == PATH_MIXED ? "mixed (staged again)" : "staged";
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

/* After a reduction that may map (path >= 0): whether it reduced from the staging slots (staged
 * and mixed: every rank reduces a non-empty slice from MAP_BYTES) or only from buffers (mapped).
 * 0, or -1 after rfail. */
static int check_path(rank_ctx_t *c, const spec_t *sp, int path, const char *what)
{
    if (path < 0 || !c->w->evidence ||
        (sp->coll != COHORT_TP_ALLREDUCE && sp->coll != COHORT_TP_REDUCE_SCATTER))
        return 0;
    if (path == PATH_MAPPED && (tl_red_area || !tl_red_else))
        return rfail(c, "%s: right result, but expected the mapped path and it reduced %lu "
                     "times from the staging slots, %lu times from buffers only", what,
                     tl_red_area, tl_red_else);
    if (path != PATH_MAPPED && !tl_red_area)
        return rfail(c, "%s: right result, but expected the %s path and it never reduced from "
                     "the staging slots (%lu reductions from buffers only)", what,
                     path_name(path), tl_red_else);
    return 0;
}

/* Runs collective sp (the same on every rank) as this rank and checks everything. 0 or -1. */
static int run_spec(rank_ctx_t *c, const spec_t *sp, uint64_t tag_xor)
{
    world_t *w = c->w;
    const int n = w->n, r = c->rank;
    const uint64_t seq = ++c->seq;
    const uint64_t s = mix64(w->salt ^ seq);
    char what[448];
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

    /* buffers: one allocation in place, else two; sendp/recvp point into them; from malloc or
     * the test allocator (st, rt), in different pool blocks */
    gbuf_t gs = { 0 }, gr = { 0 };
    unsigned char *sendp = NULL, *recvp = NULL;
    int oom = 0;
    const int inplace = rank_inplace(sp, r);
    int st, rt;
    rank_tm(w, sp, seq, r, &st, &rt);
    const int path = expect_path(w, sp, seq);
    if (w->mem != MEM_PLAIN) {
        size_t k = strlen(what);
        snprintf(what + k, sizeof what - k, " [test allocator: %s%s on this rank; %s%s]",
                 st ? "sendbuf" : "", rt ? (st ? ", recvbuf" : "recvbuf") : (st ? "" : "none"),
                 path < 0 ? "may not map" : "path ", path < 0 ? "" : path_name(path));
    }
    uint64_t x = rng_next(&c->mem_rng);
    int slot_s = (int)(x % POOL), slot_r = (slot_s + 1 + (int)((x >> 8) % (POOL - 1))) % POOL;
    if (inplace) {
        switch (sp->coll) {
        case COHORT_TP_ALLGATHER:
            oom = galloc_at(c, &gr, recv_elems * es, rt, slot_r);
            recvp = gr.p;
            if (!oom) sendp = gr.p + (size_t)r * cnt * es;
            break;
        case COHORT_TP_REDUCE_SCATTER:
            oom = galloc_at(c, &gs, send_elems * es, rt, slot_r);
            sendp = gs.p;
            if (!oom) recvp = gs.p + (size_t)r * cnt * es;
            break;
        default:
            oom = galloc_at(c, &gr, recv_elems * es, rt, slot_r);
            sendp = recvp = gr.p;
            break;
        }
    } else if (st && rt && has_recv && (x >> 16) % 4 == 0) {
        oom = galloc_two(c, &gs, send_elems * es, &gr, recv_elems * es, slot_s);
        sendp = gs.p;
        recvp = gr.p;
    } else {
        oom = galloc_at(c, &gs, send_elems * es, st, slot_s);
        sendp = gs.p;
        if (has_recv && !oom) {
            oom = galloc_at(c, &gr, recv_elems * es, rt, slot_r);
            recvp = gr.p;
        }
    }
    if (oom) {
        int e = errno;
        gfree(&gs);
        gfree(&gr);
        return rfail(c, "%s: out of memory (%s)", what, strerror(e));
    }
    /* inputs (broadcast: only the root has one) */
    if (sp->coll != COHORT_TP_BROADCAST || is_root)
        for (size_t i = 0; i < send_elems; i++) {
            store_bits(sendp + i * es, es, gen(sp, s, r, i));
        }
    a.sendbuf = sendp;
    a.recvbuf = recvp;

    tl_nerr = 0;
    tl_red_area = tl_red_else = tl_red_lane = 0;
    cohort_status_t status = drive(c, &a, what);
    /* an allreduce of up to lane_bytes(n) reduces the entries of the small lane, every other
     * reduction never does (the lane is rewritten as the ranks go on) */
    if (status == COHORT_SUCCESS && n > 1 && sp->count &&
        sp->coll == COHORT_TP_ALLREDUCE &&
        (sp->count * es <= lane_bytes(n)) != (tl_red_lane > 0)) {
        status = DRIVE_STOPPED;
        rfail(c, "%s: right result, but it reduced %lu times from the small lane (expected %s)",
              what, tl_red_lane, sp->count * es <= lane_bytes(n) ? "every time" : "never");
    } else if (status == COHORT_SUCCESS && sp->coll != COHORT_TP_ALLREDUCE && tl_red_lane) {
        status = DRIVE_STOPPED;
        rfail(c, "%s: it reduced %lu times from the small lane, which only allreduces of up "
              "to %zu bytes use", what, tl_red_lane, lane_bytes(n));
    }
    int rc = 0;
    gbuf_t ks = { 0 }, kr = { 0 };   /* mapped worlds: the buffers taken back (gs, gr: copies) */
    if (status == COHORT_SUCCESS && w->mem != MEM_PLAIN) {
        gbuf_t cs = { 0 }, cr = { 0 };
        int bad = take_back(&gs, &cs, &sendp, &recvp) || take_back(&gr, &cr, &sendp, &recvp);
        ks = gs;
        kr = gr;
        gs = cs;
        gr = cr;
        if (bad) {
            rfail(c, "%s: out of memory", what);
            status = DRIVE_STOPPED;
        }
    }
    if (status == DRIVE_STOPPED) {
        rc = -1;
    } else if (status) {
        rc = rfail(c, "%s: status %d: %s", what, (int)status, tl_msg);
    } else if (tl_nerr) {
        rc = rfail(c, "%s: succeeded but called host->error: %s", what, tl_msg);
    } else if (gcheck(&gs) || gcheck(&gr)) {
        rc = rfail(c, "%s: bytes around a buffer were overwritten", what);
    } else if (check_path(c, sp, path, what)) {
        rc = -1;
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
    size_t at = 0;
    if (!rc && (still_poisoned(&ks, &at) || still_poisoned(&kr, &at)))
        rc = rfail(c, "%s: byte %zu of %s was written after the collective returned here", what,
                   at, still_poisoned(&ks, &at) ? "sendbuf" : "recvbuf");
    gfree(&gs);
    gfree(&gr);
    gfree(&ks);
    gfree(&kr);
    if (!rc) w->out[r].colls++;
    if (!rc && path >= 0) w->out[r].paths[path]++;
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

static const cohort_dtype_t MAP_DTYPES[3] = { COHORT_INT32, COHORT_FLOAT32, COHORT_FLOAT64 };

/* Mapped matrix count template t (0..3): below, at, above MAP_BYTES per buffer (per block for
 * allgather, reduce_scatter, alltoall), and large (send or receive buffers of 1 to 2 MiB). */
static size_t map_count(int t, int coll, size_t es)
{
    switch (t) {
    case 0: return MAP_BYTES / es - 1;
    case 1: return MAP_BYTES / es;
    case 2: return MAP_BYTES / es + 1;
    default:
        if (is_blocked(coll)) return ((size_t)128 << 10) / es + 3;
        if (coll == COHORT_TP_ALLGATHER) return ((size_t)256 << 10) / es + 3;
        return ((size_t)1 << 20) / es + 29;
    }
}

/* The collectives that may run mapped (coll.c's map_try). */
static const int MAP_KINDS[] = { COHORT_TP_ALLREDUCE, COHORT_TP_BROADCAST, COHORT_TP_ALLGATHER,
                                 COHORT_TP_REDUCE_SCATTER, COHORT_TP_ALLTOALL };
#define NMAP_KINDS ((int)(sizeof MAP_KINDS / sizeof MAP_KINDS[0]))

/* Every collective that may map, count templates around MAP_BYTES and large, in place and out
 * of place, int32 / float32 / float64 x SUM / MAX / AVG; broadcast from every root. Every buffer
 * is a fresh block (w->reuse 0): the peers' caches see a new block each time. */
static int script_map_matrix(rank_ctx_t *c)
{
    const int n = c->w->n;
    spec_t b = { .coll = COHORT_TP_BARRIER };
    if (run_spec(c, &b, 0)) return -1;
    int combo = 0;
    for (int k = 0; k < NMAP_KINDS; k++) {
        for (int t = 0; t < 4; t++)
            for (int ip = 0; ip < (MAP_KINDS[k] == COHORT_TP_BROADCAST ? 1 : 2); ip++, combo++) {
                spec_t sp = { .coll = MAP_KINDS[k], .dt = MAP_DTYPES[combo % 3],
                              .op = OPS[(combo / 3) % 3], .root = (t + k) % n,
                              .inplace = ip || MAP_KINDS[k] == COHORT_TP_BROADCAST };
                sp.count = map_count(t, sp.coll, esz(sp.dt));
                if (run_spec(c, &sp, 0)) return -1;
            }
        if (run_spec(c, &b, 0)) return -1;
    }
    for (int root = 0; root < n; root++)
        for (int t = 1; t < 4; t += 2) {
            spec_t sp = { .coll = COHORT_TP_BROADCAST, .dt = MAP_DTYPES[(root + t) % 3],
                          .root = root, .inplace = 1 };
            sp.count = map_count(t, sp.coll, esz(sp.dt));
            if (run_spec(c, &sp, 0)) return -1;
        }
    return 0;
}

/* Every collective that may map, just above MAP_BYTES and twice that, with each
 * pattern of test-allocator and malloc buffers (PAT_*): the mixes start over staged; in place on
 * some ranks only (alltoall in place never maps: a mix). */
static int script_map_mixed(rank_ctx_t *c)
{
    const int n = c->w->n;
    spec_t b = { .coll = COHORT_TP_BARRIER };
    if (run_spec(c, &b, 0)) return -1;
    int combo = 0;
    for (int k = 0; k < NMAP_KINDS; k++) {
        for (int pat = PAT_ALL; pat < NPAT; pat++)
            for (int v = 0; v < 3; v++, combo++) {
                spec_t sp = { .coll = MAP_KINDS[k], .dt = MAP_DTYPES[combo % 3],
                              .op = OPS[(combo / 3) % 3], .root = (pat + v) % n,
                              .inplace = (pat + v) & 1 || MAP_KINDS[k] == COHORT_TP_BROADCAST,
                              .pat = pat };
                size_t es = esz(sp.dt);
                /* just above; twice as large; in place on some ranks */
                sp.count = v == 1 ? (2 * MAP_BYTES + 64 * (size_t)n + 8) / es + 1
                                  : MAP_BYTES / es + 5;
                if (v == 2) {
                    sp.ipmix = 1;
                    sp.ipmask = (unsigned)(pat * 5 + k) & ((1u << n) - 1);
                }
                if (run_spec(c, &sp, 0)) return -1;
            }
        if (run_spec(c, &b, 0)) return -1;
    }
    return 0;
}

/* Random collective of the stress sequence; rng is the same on every rank. mapped: larger
 * counts (about a third from MAP_BYTES), a pattern of test-allocator buffers drawn from the
 * collective's number (want_tm), in place on some ranks only now and then. */
static spec_t stress_spec(uint64_t *rng, int n, int mapped)
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
    if (mapped) {
        lim = p < 35 ? 64 : p < 50 ? 4096 : p < 80 ? 20000 : 160003;
        if (is_blocked(sp.coll) || sp.coll == COHORT_TP_ALLGATHER) lim = lim > 24000 ? 24000 : lim;
    }
    sp.count = 1 + (size_t)((x >> 16) % lim);
    if (mapped) {
        x = rng_next(rng);
        if ((x & 3) == 0) {
            sp.ipmix = 1;
            sp.ipmask = (unsigned)(x >> 8) & ((1u << n) - 1);
        }
    }
    return sp;
}

static int script_stress(rank_ctx_t *c)
{
    uint64_t rng = 0x5eed5eed0001ull;   /* shared: every rank draws the same collectives */
    const int mapped = c->w->mem != MEM_PLAIN;
    int steps = mapped ? (c->w->sleepy ? MAP_SLEEPY_STEPS : MAP_STRESS_STEPS)
                       : (c->w->sleepy ? SLEEPY_STEPS : STRESS_STEPS);
    for (int i = 0; i < steps; i++) {
        spec_t sp = stress_spec(&rng, c->w->n, mapped);
        /* per rank: sometimes arrive late */
        uint64_t d = rng_next(&c->delay_rng);
        if ((d & 7) == 0)
            for (unsigned y = 0; y < (unsigned)(d >> 8) % 16; y++) sched_yield();
        if (run_spec(c, &sp, 0)) return -1;
    }
    return 0;
}

/* Plain: counts around the round; mapped (w->mem): around MAP_BYTES and larger, and a third
 * variant in place on rank 0 only. */
static int script_bitid(rank_ctx_t *c)
{
    static const size_t counts[] = { 1000, 4095, 4096, 4097, 100003 };
    static const size_t map_counts[] = { MAP_BYTES / 4 - 1, MAP_BYTES / 4, MAP_BYTES / 4 + 1,
                                         100003, 262147 };
    const int mapped = c->w->mem != MEM_PLAIN;
    for (int t = 0; t < (int)(sizeof counts / sizeof counts[0]); t++)
        for (int v = 0; v < (mapped ? 3 : 2); v++) {
            spec_t sp = { .coll = COHORT_TP_ALLREDUCE, .count = mapped ? map_counts[t] : counts[t],
                          .dt = COHORT_FLOAT32, .op = COHORT_SUM, .inplace = v == 1,
                          .ipmix = v == 2, .ipmask = 1, .nonint = 1 };
            const int inplace = rank_inplace(&sp, c->rank);
            /* no exact reference: the ranks are compared with each other afterwards */
            const int n = c->w->n;
            const uint64_t seq = ++c->seq;
            const uint64_t s = mix64(c->w->salt ^ seq);
            const int path = expect_path(c->w, &sp, seq);
            char what[320];
            describe(what, sizeof what, &sp, n, c->w->round, seq);
            if (mapped) {
                size_t k = strlen(what);
                snprintf(what + k, sizeof what - k, " [path %s]",
                         path < 0 ? "staged (small)" : path_name(path));
            }
            int stm, rtm;
            rank_tm(c->w, &sp, seq, c->rank, &stm, &rtm);
            gbuf_t gs = { 0 }, gr = { 0 };
            if (galloc_at(c, &gr, sp.count * 4, rtm, 0) ||
                (!inplace && galloc_at(c, &gs, sp.count * 4, stm, 1))) {
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
            tl_red_area = tl_red_else = 0;
            cohort_status_t st = drive(c, &a, what);
            int rc = 0;
            if (st == DRIVE_STOPPED) rc = -1;
            else if (st) rc = rfail(c, "%s: status %d: %s", what, (int)st, tl_msg);
            else if (gcheck(&gs) || gcheck(&gr))
                rc = rfail(c, "%s: bytes around a buffer were overwritten", what);
            else if (check_path(c, &sp, path, what))
                rc = -1;
            for (size_t i = 0; !rc && !inplace && i < sp.count; i++)
                if (load_bits(sendp + i * 4, 4) != gen(&sp, s, c->rank, i))
                    rc = rfail(c, "%s: sendbuf element %zu was modified", what, i);
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
                    if (path >= 0) o->paths[path]++;
                }
            }
            gfree(&gs);
            gfree(&gr);
            if (rc) return rc;
        }
    return 0;
}

/* variant: bit 0: mismatch after 6 good collectives (not the first steps); bit 1: rank 1 also
 * asks for another count (many rounds where the others have one); bit 3: the collective is
 * small (the others in the small lane; rank 1 too, or, with bit 1, staged). */
static int script_mismatch(rank_ctx_t *c)
{
    world_t *w = c->w;
    int pre = (w->variant & 1) ? 6 : 0;
    for (int i = 0; i < pre; i++) {
        spec_t sp = { .coll = i % 2 ? COHORT_TP_ALLREDUCE : COHORT_TP_ALLGATHER,
                      .count = 100 + (size_t)i, .dt = COHORT_INT32, .op = COHORT_SUM };
        if (run_spec(c, &sp, 0)) return -1;
    }
    spec_t sp = { .coll = COHORT_TP_ALLREDUCE, .count = 5000, .dt = COHORT_FLOAT32,
                  .op = COHORT_SUM };   /* 20000 bytes: staged, past the small lane */
    if (w->variant & 8) sp.count = 2;
    if (c->rank == 1 && (w->variant & 2)) sp.count = w->variant & 8 ? 5000 : 100003;
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

/* (13) The small lane's allreduces and barriers among the other paths: counts just below, at
 * and above lane_bytes(n) and INLINE_BYTES for every dtype, in place and out of place, every
 * op; now and then a staged allreduce or allgather just past the lane (the slots' reuse waits
 * on ranks that published only entries) and a run of SB_DEPTH_T small broadcasts from one root
 * (the root's wait for the others, half the lane behind, sees their entries), over LANE_STEPS
 * collectives: six times round every rank's entries. run_spec checks each result and that
 * allreduces of up to lane_bytes(n), and only they, reduced from the lane. */
static int script_lane(rank_ctx_t *c)
{
    world_t *w = c->w;
    for (int i = 0; i < LANE_STEPS; i++) {
        spec_t sp;
        memset(&sp, 0, sizeof sp);
        if (i % 97 == 50) {   /* a run of small broadcasts, the root far ahead */
            for (int k = 0; k < SB_DEPTH_T; k++) {
                spec_t b = { .coll = COHORT_TP_BROADCAST, .count = 1 + (size_t)(k % 5),
                             .dt = COHORT_INT32, .root = (i / 97) % w->n };
                if (run_spec(c, &b, 0)) return -1;
            }
        }
        if (i % 7 == 3) {
            sp.coll = COHORT_TP_BARRIER;
        } else if (i % 13 == 5) {
            sp.coll = i % 2 ? COHORT_TP_ALLREDUCE : COHORT_TP_ALLGATHER;
            sp.dt = DTYPES[i % 4];
            sp.op = OPS[i % 3];
            sp.count = lane_bytes(w->n) / esz(sp.dt) + 4097;   /* past the lane */
        } else {
            int v = i % 12;
            sp.coll = COHORT_TP_ALLREDUCE;
            sp.dt = DTYPES[v % 4];
            sp.op = OPS[(i / 4) % 3];
            /* one under, at, one over the lane's end, or its entries' own line's */
            size_t edge = (i / 12) % 2 ? lane_bytes(w->n) : INLINE_BYTES;
            size_t per = edge / esz(sp.dt);
            sp.count = per - 1 + (size_t)(v / 4) % 3;
            if (i % 5 == 0) sp.count = 1;
            sp.inplace = (i / 3) & 1;
            sp.nullrecv = 0;
        }
        /* per rank: sometimes arrive late */
        uint64_t d = rng_next(&c->delay_rng);
        if ((d & 7) == 0)
            for (unsigned y = 0; y < (unsigned)(d >> 8) % 16; y++) sched_yield();
        if (run_spec(c, &sp, 0)) return -1;
    }
    return 0;
}

/* (9): broadcasts from rank 0, which the others join only once it waits. */
static int script_sb_ahead(rank_ctx_t *c)
{
    world_t *w = c->w;
    if (c->rank) {
        uint64_t t0 = cohort_now_ns();
        while (!atomic_load(&w->go)) {
            if (atomic_load(&w->abort)) return -1;
            if (cohort_now_ns() > t0 + STALL_NS)
                return rfail(c, "rank 0 ran 30 s of broadcasts without ever waiting for the "
                             "others (a root that overwrites what nobody read)");
            sched_yield();
        }
    }
    for (int i = 0; i < 3 * SB_DEPTH_T + 5; i++) {
        spec_t sp = { .coll = COHORT_TP_BROADCAST,   /* 4 bytes to sb_bytes */
                      .count = 1 + (size_t)(i % 9) * ((sb_bytes(w->n) / 4 - 1) / 8),
                      .dt = COHORT_INT32, .op = COHORT_SUM };
        if (run_spec(c, &sp, 0)) return -1;
    }
    spec_t ar = { .coll = COHORT_TP_ALLREDUCE, .count = 16, .dt = COHORT_INT32,
                  .op = COHORT_SUM };
    return run_spec(c, &ar, 0);
}

/* (10) */
static int script_sb_stress(rank_ctx_t *c)
{
    world_t *w = c->w;
    uint64_t rng = 0x5eed5eed0002ull;   /* shared: every rank draws the same collectives */
    int steps = w->sleepy ? SB_SLEEPY_STEPS : SB_STRESS_STEPS;
    for (int i = 0; i < steps; i++) {
        spec_t sp;
        memset(&sp, 0, sizeof sp);
        uint64_t x = rng_next(&rng);
        /* few synchronising collectives: a root can get SB_DEPTH_T ahead between them */
        unsigned p = (unsigned)(x % 512);
        sp.coll = p < 509 ? COHORT_TP_BROADCAST : p < 511 ? COHORT_TP_ALLREDUCE : COHORT_TP_BARRIER;
        sp.dt = DTYPES[(x >> 8) % 4];
        sp.op = COHORT_SUM;
        /* mostly one root per run of 100 collectives (it gets far ahead), some at random */
        sp.root = (int)((x >> 16) % 32 ? (unsigned)(i / 100) % (unsigned)w->n
                                      : (unsigned)(x >> 20) % (unsigned)w->n);
        sp.inplace = (int)((x >> 24) & 1);
        size_t es = esz(sp.dt);
        /* mostly within the lane, some just past it (staged), all sizes to sb_bytes + 256 */
        size_t lim = (x >> 28) % 4 ? sb_bytes(w->n) / es : (sb_bytes(w->n) + 256) / es;
        sp.count = 1 + (size_t)((x >> 32) % lim);
        if (sp.coll == COHORT_TP_ALLREDUCE) sp.count = 1 + (size_t)((x >> 32) % 64);
        uint64_t d = rng_next(&c->delay_rng);
        if ((d & 63) == 0) {
            /* far behind: 0.2-0.4 ms of yields, what 2000-4000 yields take on an idle machine,
             * timed rather than counted (beside two busy loops each yield waited out their time
             * slice, and the counted form made this world take 500 s) */
            uint64_t until = cohort_now_ns() + 200000 + (d >> 8) % 200000;
            while (cohort_now_ns() < until) sched_yield();
        } else if ((d & 7) == 0) {
            for (unsigned y = 0; y < (unsigned)((d >> 8) % 16); y++) sched_yield();
        }
        if (run_spec(c, &sp, 0)) return -1;
    }
    return 0;
}

/* One collective of count int32 on buffers of this frame (broadcast: root's data 1000 + i),
 * tag from c->seq as run_spec makes it; its status, host->error's message in msg. */
static cohort_status_t raw_coll(rank_ctx_t *c, int coll, size_t count, int root, int32_t *rb,
                                char *msg, size_t len)
{
    const uint64_t seq = ++c->seq;
    spec_t sp = { .coll = coll, .count = count, .dt = COHORT_INT32, .op = COHORT_SUM,
                  .root = root };
    int32_t sb[16];
    for (size_t i = 0; i < 16; i++) {
        sb[i] = (int32_t)i;
        rb[i] = coll == COHORT_TP_BROADCAST && root == c->rank ? 1000 + (int32_t)i : -1;
    }
    cohort_tp_coll_args_t a = { .size = sizeof a, .coll = coll, .sendbuf = sb, .recvbuf = rb,
                                .count = count, .dtype = COHORT_INT32, .op = COHORT_SUM,
                                .root = root, .tag = (seq << 32) | sig32(&sp) };
    char what[64];
    snprintf(what, sizeof what, "%s #%llu", coll_name(coll), (unsigned long long)seq);
    tl_msg[0] = 0;
    cohort_status_t st = drive(c, &a, what);
    snprintf(msg, len, "%s", tl_msg);
    return st;
}

/* (11), after three good collectives: variant 0 (n = 2) and 1 (n = 3): ranks 0 and 1 each
 * broadcast as the root (rank 2 reads rank 0's), then an allreduce; 2 (n = 2): rank 0 runs an
 * allreduce where rank 1 reads a broadcast from it; 3 (n = 3): rank 1 reads with another
 * count; 4 (n = 2): the same with a root that lends its buffer (MAP_BYTES from the test
 * allocator, after a broadcast from which rank 1 said it can map): it waits for its reader,
 * which must release it although it fails. */
static int script_sb_mismatch(rank_ctx_t *c)
{
    world_t *w = c->w;
    const int r = c->rank, v = w->variant;
    for (int i = 0; i < 3; i++) {
        spec_t sp = { .coll = i == 1 ? COHORT_TP_BROADCAST : COHORT_TP_ALLREDUCE, .count = 5,
                      .dt = COHORT_INT32, .op = COHORT_SUM, .root = i % w->n };
        if (run_spec(c, &sp, 0)) return -1;
    }
    rank_out_t *o = &w->out[r];
    int32_t rb[16];
    int coll = COHORT_TP_BROADCAST, root = 0;
    size_t count = 2;
    if (v <= 1) root = r == 1 ? 1 : 0;
    if (v == 2 && r == 0) coll = COHORT_TP_ALLREDUCE;
    if (v == 3 && r == 1) count = 3;
    if (v == 4) {
        size_t len;
        int32_t *big = tmem_alloc(MAP_BYTES + 64, &len);
        if (!big) return rfail(c, "test allocator: %s", strerror(errno));
        char msg[64];
        cohort_status_t st = raw_coll(c, COHORT_TP_BROADCAST, MAP_BYTES / 4, 0, big, msg,
                                      sizeof msg);
        if (st == COHORT_SUCCESS)
            st = raw_coll(c, COHORT_TP_ALLREDUCE, 4, 0, rb, msg, sizeof msg);
        if (st != COHORT_SUCCESS) {
            tmem_free(big);
            return rfail(c, "variant 4: a good collective failed: %d (%s)", (int)st, msg);
        }
        o->st_coll = raw_coll(c, COHORT_TP_BROADCAST, MAP_BYTES / 4 + (size_t)r, 0, big,
                              o->msg_coll, sizeof o->msg_coll);
        tmem_free(big);
        return o->st_coll == DRIVE_STOPPED ? -1 : 0;
    }
    o->st_coll = raw_coll(c, coll, count, root, rb, o->msg_coll, sizeof o->msg_coll);
    if (o->st_coll == DRIVE_STOPPED) return -1;
    if (o->st_coll == COHORT_SUCCESS && coll == COHORT_TP_BROADCAST && r != root &&
        (rb[0] != 1000 || rb[1] != 1001 || rb[2] != -1))
        return rfail(c, "broadcast from rank %d: got %d %d %d, expected 1000 1001 -1", root,
                     (int)rb[0], (int)rb[1], (int)rb[2]);
    o->st_after = COHORT_SUCCESS;
    if (v <= 1) {
        o->st_after = raw_coll(c, COHORT_TP_ALLREDUCE, 4, 0, rb, o->msg_after,
                               sizeof o->msg_after);
        if (o->st_after == DRIVE_STOPPED) return -1;
    }
    return 0;
}

/* shm_coll_finish until it is done, yielding; deadline wait_ns from now. Its status (message in
 * o->msg_fin), or DRIVE_STOPPED. MODE_FINISH variant 2: rank 0 waiting on rank 2 lets it go on. */
static cohort_status_t drive_finish(rank_ctx_t *c, uint64_t wait_ns)
{
    world_t *w = c->w;
    rank_out_t *o = &w->out[c->rank];
    const uint64_t t0 = shm_now_ns(), deadline = t0 + wait_ns;
    tl_msg[0] = 0;
    for (;;) {
        int waiting_on = -7;
        cohort_status_t st = shm_coll_finish(c->co, deadline, &waiting_on);
        if (st != COHORT_IN_PROGRESS) {
            snprintf(o->msg_fin, sizeof o->msg_fin, "%s", tl_msg);
            if (st == COHORT_SUCCESS && tl_msg[0])
                return rfail(c, "finish succeeded after host->error: %s", tl_msg);
            return st;
        }
        if (waiting_on < 0 || waiting_on >= w->n || waiting_on == c->rank) {
            rfail(c, "finish in progress, waiting on rank %d (n = %d)", waiting_on, w->n);
            return DRIVE_STOPPED;
        }
        o->fin_waited |= 1u << waiting_on;
        if (w->mode == MODE_FINISH && w->variant == 2 && c->rank == 0 && waiting_on == 2)
            atomic_store(&w->go, 1);
        if (atomic_load_explicit(&w->abort, memory_order_relaxed)) return DRIVE_STOPPED;
        if (shm_now_ns() > deadline + STALL_NS) {
            rfail(c, "finish still in progress 30 s after its deadline (waiting on rank %d)",
                  waiting_on);
            return DRIVE_STOPPED;
        }
        sched_yield();
    }
}

/* Waits (with the stall deadline) until flag is set. */
static int await_flag(rank_ctx_t *c, _Atomic int *flag, int want, const char *what)
{
    uint64_t t0 = cohort_now_ns();
    while (atomic_load(flag) < want) {
        if (atomic_load(&c->w->abort)) return -1;
        if (cohort_now_ns() > t0 + STALL_NS) return rfail(c, "waited 30 s for %s", what);
        sched_yield();
    }
    return 0;
}

/* (12) at close, after three good collectives; then a last small broadcast from rank 0, but:
 * variant 1, each rank is its root; 3, rank 2 leaves instead (the peer hook says so); 5, rank 0
 * broadcasts twice, and rank 1 closes once the second one returned; 8, the same, but rank 0
 * starts its second broadcast only once rank 1's close returned (rank 1 found rank 0 at its
 * last step with its history and did not wait: only rank 0 can tell); 6, rank 1 reads with
 * another count (and fails). Variant 2: rank 2 starts the broadcast once rank 0 waits for it at
 * close; 4: rank 2 starts it once the others gave up waiting for it (their deadline 200 ms); 7:
 * rank 2 closes only once the others did (they compare with its record of the last step,
 * without waiting for its fin). */
static int script_finish(rank_ctx_t *c)
{
    world_t *w = c->w;
    const int r = c->rank, v = w->variant;
    rank_out_t *o = &w->out[r];
    for (int i = 0; i < 3; i++) {
        spec_t sp = { .coll = i == 1 ? COHORT_TP_BROADCAST : COHORT_TP_ALLREDUCE, .count = 5,
                      .dt = COHORT_INT32, .op = COHORT_SUM, .root = i % w->n };
        if (run_spec(c, &sp, 0)) return -1;
    }
    if (v == 3 && r == 2) {
        atomic_fetch_or(&w->gone, 1u << r);
        o->st_fin = COHORT_SUCCESS;
        return 0;
    }
    if ((v == 2 || v == 4) && r == 2 &&
        await_flag(c, v == 2 ? &w->go : &w->fin_returned, v == 2 ? 1 : 2,
                   v == 2 ? "rank 0 to wait for this rank at close" : "the others' finish"))
        return -1;
    int32_t rb[16];
    char msg[1024];
    int root = v == 1 ? r : 0;
    size_t count = v == 6 && r == 1 ? 3 : 2;
    cohort_status_t st = raw_coll(c, COHORT_TP_BROADCAST, count, root, rb, msg, sizeof msg);
    if (st == COHORT_SUCCESS && (v == 5 || v == 8) && r == 0) {
        /* the root's broadcast returns at once: without an order, rank 1 could close before
         * or after rank 0 started the second one (each has its own variant) */
        if (v == 8 && await_flag(c, &w->fin_returned, 1, "rank 1's finish")) return -1;
        st = raw_coll(c, COHORT_TP_BROADCAST, 2, 0, rb, msg, sizeof msg);
        atomic_store(&w->go, 1);
    }
    if (st == DRIVE_STOPPED) return -1;
    if (v == 5 && r == 1 && await_flag(c, &w->go, 1, "rank 0's second broadcast"))
        return -1;
    if (st != (v == 6 && r == 1 ? COHORT_ERR_MISMATCH : COHORT_SUCCESS))
        return rfail(c, "variant %d: the last broadcast: status %d (%s)", v, (int)st, msg);
    if (st == COHORT_SUCCESS && r != root && (rb[0] != 1000 || rb[1] != 1001))
        return rfail(c, "variant %d: broadcast from rank %d: got %d %d", v, root, (int)rb[0],
                     (int)rb[1]);
    if (v == 7 && r == 2 && await_flag(c, &w->fin_returned, 2, "the others' finish"))
        return -1;
    o->st_fin = drive_finish(c, v == 4 && r != 2 ? 200000000ull : 60000000000ull);
    atomic_fetch_add(&w->fin_returned, 1);
    return o->st_fin == DRIVE_STOPPED ? -1 : 0;
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
    shm_coll_hooks_t hooks = { .ep = &hep, .peer_check = hook_peer_check, .wake = hook_wake,
                               .map = w->mem != MEM_PLAIN && c->rank != w->nomap_rank,
                               .stream = w->stream };
    tl_area_lo = (uintptr_t)w->area;
    tl_area_hi = tl_area_lo + w->area_len;
    tl_stage_lo = tl_area_hi - ((size_t)w->n + 1) * SHM_COLL_NSLOTS * w->round;
    tl_log_mapped = tl_log_mixed = tl_log_noprobe = tl_log_lent = tl_log_uncompared = 0;
    tl_log_left = 0;
    c->co = shm_coll_new(w->area, c->rank, w->n, w->old_host ? &HOST_1_2 : &HOST, &hooks);
    /* as the core's creation round: every rank's shm_coll_new is done (and its control line,
     * which mapped mode's probe reads, written) before any collective */
    pthread_barrier_wait(&w->created);
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
    case MODE_MAP_MATRIX: script_map_matrix(c); break;
    case MODE_MAP_MIXED: script_map_mixed(c); break;
    case MODE_SB_AHEAD: script_sb_ahead(c); break;
    case MODE_SB_STRESS: script_sb_stress(c); break;
    case MODE_SB_MISMATCH: script_sb_mismatch(c); break;
    case MODE_FINISH: script_finish(c); break;
    case MODE_LANE: script_lane(c); break;
    default: break;
    }
    /* at close: ranks that agreed (and those whose collectives failed) succeed at once, and
     * compare with every peer */
    rank_out_t *o = &w->out[c->rank];
    if (w->mode != MODE_FINISH && !o->failed && !atomic_load(&w->abort)) {
        cohort_status_t st = drive_finish(c, 60000000000ull);
        if (st != DRIVE_STOPPED && st != COHORT_SUCCESS)
            rfail(c, "finish after the world's script: status %d: %s", (int)st, o->msg_fin);
        else if (tl_log_uncompared)
            rfail(c, "finish after the world's script did not compare every peer");
    }
    shm_coll_free(c->co);
    for (int i = 0; i < POOL; i++) tmem_free(c->pool[i]);
    o->log_mapped = tl_log_mapped;
    o->log_uncompared = tl_log_uncompared;
    o->log_left = tl_log_left;
    o->log_mixed = tl_log_mixed;
    o->log_noprobe = tl_log_noprobe;
    o->log_lent = tl_log_lent;
    snprintf(o->log_noprobe_msg, sizeof o->log_noprobe_msg, "%.500s", tl_log_noprobe_msg);
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
    atomic_init(&w->gone, 0);
    atomic_init(&w->fin_returned, 0);
    ck_assert_int_eq(pthread_barrier_init(&w->created, NULL, (unsigned)w->n), 0);
    char why[512] = "";
    if (w->mem != MEM_PLAIN) {
        w->evidence = proc_fd_works(why, sizeof why);
        if (!w->evidence)
            fprintf(stderr, "test_shm_coll: %s: mapped mode cannot run here (%s): only its "
                    "fallback to staging is tested\n", name, why);
    }
    unsigned long queries = atomic_load(&tmem_queries);
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
        ctx[r] = (rank_ctx_t){ .w = w, .rank = r, .delay_rng = 1000 + (uint64_t)r,
                               .mem_rng = 2000 + (uint64_t)r };
        ck_assert_int_eq(pthread_create(&th[r], NULL, rank_main, &ctx[r]), 0);
    }
    for (int r = 0; r < w->n; r++) pthread_join(th[r], NULL);   /* deadlines: cannot hang */
    double secs = (double)(cohort_now_ns() - t0) / 1e9;
    for (int r = 0; r < w->n; r++)
        if (w->efd[r] >= 0) close(w->efd[r]);
    pthread_barrier_destroy(&w->created);
    free(w->area);
    w->area = NULL;
    queries = atomic_load(&tmem_queries) - queries;

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
    if (w->mem != MEM_PLAIN) {
        const rank_out_t *o = &w->out[0];
        fprintf(stderr, "test_shm_coll:   rank 0: from %zu bytes %llu staged, %llu mapped, %llu "
                "mixed; %llu blocks; logged: %u mapped, %u mixed, %u cannot map; %lu "
                "mem_shared calls in all\n", MAP_BYTES, o->paths[PATH_STAGED],
                o->paths[PATH_MAPPED], o->paths[PATH_MIXED], o->blocks, o->log_mapped,
                o->log_mixed, o->log_noprobe, queries);
    }
    ck_assert_msg(!failed, "%s n=%d round=%zu failed:%s", name, w->n, w->round, all);
    if (w->old_host)
        ck_assert_msg(queries == 0, "%s: an ABI 1.2 host table (no mem_shared) got %lu "
                      "mem_shared calls", name, queries);
}

/* After a world with test-allocator buffers: coll.c said (in its once-per-endpoint log lines)
 * that it ran mapped and mixed collectives where they were due, and never where they were not;
 * every rank went through at least min_blocks blocks. */
static void check_mapped_world(const world_t *w, const char *name, unsigned long long min_blocks)
{
    for (int r = 0; r < w->n; r++) {
        const rank_out_t *o = &w->out[r];
        if (w->evidence && w->nomap_rank < 0 && !w->old_host) {
            ck_assert_msg(o->log_noprobe == 0, "%s n=%d: rank %d could not map its peers, "
                          "although this process can open its own memfds through /proc: %s",
                          name, w->n, r, o->log_noprobe_msg);
            ck_assert_msg(!o->paths[PATH_MAPPED] || o->log_mapped, "%s n=%d: rank %d ran %llu "
                          "collectives that had to map, and never logged '%s'", name, w->n, r,
                          o->paths[PATH_MAPPED], LOG_MAPPED);
            ck_assert_msg(!o->paths[PATH_MIXED] || o->log_mixed, "%s n=%d: rank %d ran %llu "
                          "collectives on a mix of mapped and plain buffers, and never logged "
                          "'%s'", name, w->n, r, o->paths[PATH_MIXED], LOG_MIXED);
        }
        if (!w->evidence || w->nomap_rank >= 0 || w->old_host)
            ck_assert_msg(o->log_mapped == 0, "%s n=%d: rank %d logged '%s' in a world where no "
                          "collective may map", name, w->n, r, LOG_MAPPED);
        ck_assert_msg(o->blocks >= min_blocks, "%s n=%d: rank %d went through %llu blocks, "
                      "fewer than %llu", name, w->n, r, o->blocks, min_blocks);
    }
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
    w->nomap_rank = -1;
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

/* _i: n = matrix_ns[_i / 2], round: small (even _i) or the default (odd _i); stores into the
 * slots by n */
START_TEST(test_matrix)
{
    int n = matrix_ns[_i / 2];
    size_t round = _i % 2 ? (size_t)SHM_COLL_DEFAULT_ROUND : shm_coll_round(n, 4096);
    world_t *w = new_world(n, round, MODE_MATRIX);
    w->stream = (_i / 2 + 1) % 3;   /* n = 2, 5: streaming stores into the slots; 3, 8: chosen */
    run_world(w, "matrix");
    free_world(w);
}
END_TEST

/* _i bit 0: yielding waiters (0) or sleeping ones woken through the wake hook (1); bit 1: n = 4
 * (0) or 2 (1), where an allreduce's reducers write their results into each other's slots */
START_TEST(test_stress)
{
    int n = _i & 2 ? 2 : 4, sleepy = _i & 1;
    world_t *w = new_world(n, shm_coll_round(n, 4096), MODE_STRESS);
    w->sleepy = sleepy;
    w->stream = 2;
    run_world(w, sleepy ? "stress, sleeping waiters" : "stress");
    ck_assert_uint_eq(w->out[0].colls, sleepy ? SLEEPY_STEPS : STRESS_STEPS);
    free_world(w);
}
END_TEST

/* _i: n = 2 or 4 (bit 2), mismatch after 0 or 6 collectives (bit 0), rank 1 with another count
 * as well (bit 1), a small collective (bit 3: the small lane) */
START_TEST(test_tag_mismatch)
{
    int n = _i & 4 ? 4 : 2;
    world_t *w = new_world(n, shm_coll_round(n, 4096), MODE_MISMATCH);
    w->variant = _i & 11;
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
        /* a peer in the small lane says which collective it started */
        if ((_i & 8) && (r == 1 || !(_i & 2)))
            ck_assert_msg(strstr(o->msg_coll, "started allreduce #") != NULL, "variant %d: "
                          "rank %d's message does not name the peer's allreduce: '%s'", _i, r,
                          o->msg_coll);
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

/* The test's allocator itself: mem_shared finds ranges inside its blocks only, ids count up
 * across frees (fd numbers come back), the host table's size covers mem_shared. */
START_TEST(test_mem_shared)
{
    ck_assert(COHORT_HAS_FIELD(&HOST, cohort_host_v1_t, mem_shared));
    ck_assert(!COHORT_HAS_FIELD(&HOST_1_2, cohort_host_v1_t, mem_shared));
    size_t len = 0;
    unsigned char *b = tmem_alloc(5000, &len);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_ge(len, 5000);
    int fd = -1, fd2 = -1;
    uint64_t id = 0, id2 = 0, off = 0;
    ck_assert_int_eq(tmem_shared(b + 100, len - 100, &fd, &id, &off), 1);
    ck_assert_uint_eq(off, 100);
    ck_assert_int_eq(tmem_shared(b, len + 1, &fd, &id, &off), 0);
    ck_assert_int_eq(tmem_shared(b + len, 1, &fd, &id, &off), 0);
    ck_assert_int_eq(tmem_shared(b - 1, 2, &fd, &id, &off), 0);
    int x;
    ck_assert_int_eq(tmem_shared(&x, sizeof x, &fd, &id, &off), 0);
    ck_assert_int_eq(tmem_shared(b, 1, &fd, &id, &off), 1);
    tmem_free(b);
    ck_assert_int_eq(tmem_shared(b, 1, &fd2, &id2, &off), 0);
    b = tmem_alloc(1, &len);
    ck_assert_ptr_nonnull(b);
    ck_assert_int_eq(tmem_shared(b, len, &fd2, &id2, &off), 1);
    ck_assert_uint_gt(id2, id);
    tmem_free(b);
    char why[512];
    if (!proc_fd_works(why, sizeof why))
        fprintf(stderr, "test_shm_coll: mapped mode cannot run here: %s\n", why);
}
END_TEST

/* _i: n = matrix_ns[_i]; a small round for n = 3 and 5 (what is below MAP_BYTES runs staged) */
START_TEST(test_mapped_matrix)
{
    int n = matrix_ns[_i];
    size_t round = n == 3 || n == 5 ? shm_coll_round(n, 4096) : (size_t)SHM_COLL_DEFAULT_ROUND;
    world_t *w = new_world(n, round, MODE_MAP_MATRIX);
    w->mem = MEM_ALL;
    run_world(w, "mapped matrix");
    check_mapped_world(w, "mapped matrix", MIN_BLOCKS);
    free_world(w);
}
END_TEST

/* _i: 0-3: n = 2, 3, 4, 8; 4: n = 4 with hooks.map 0 on rank 2 (never maps, anywhere); 5: n = 3
 * with an ABI 1.2 host table (no mem_shared: never maps, never calls it) */
START_TEST(test_mapped_mixed)
{
    static const int ns[] = { 2, 3, 4, 8, 4, 3 };
    int n = ns[_i];
    world_t *w = new_world(n, shm_coll_round(n, 4096), MODE_MAP_MIXED);
    w->mem = MEM_MIX;
    w->reuse = 1;
    if (_i == 4) w->nomap_rank = 2;
    if (_i == 5) w->old_host = 1;
    const char *name = _i == 4 ? "mapped, mixed buffers, hooks.map 0 on rank 2"
                       : _i == 5 ? "mapped, mixed buffers, ABI 1.2 host table"
                       : "mapped, mixed buffers";
    run_world(w, name);
    check_mapped_world(w, name, 0);
    free_world(w);
}
END_TEST

/* _i = 0: yielding waiters; 1: sleeping waiters. Each rank keeps POOL blocks and replaces them
 * at random: the peers' caches see new blocks, evict, and map a block writable that they had
 * mapped read-only. */
START_TEST(test_mapped_stress)
{
    world_t *w = new_world(4, shm_coll_round(4, 4096), MODE_STRESS);
    w->mem = MEM_MIX;
    w->reuse = 1;
    w->sleepy = _i;
    const char *name = _i ? "mapped stress, sleeping waiters" : "mapped stress";
    run_world(w, name);
    ck_assert_uint_eq(w->out[0].colls, _i ? MAP_SLEEPY_STEPS : MAP_STRESS_STEPS);
    check_mapped_world(w, name, MIN_BLOCKS);
    free_world(w);
}
END_TEST

/* _i: n = 2 (out of place on both: each rank may reduce the whole vector), 3 */
START_TEST(test_mapped_bit_identical)
{
    int n = _i ? 3 : 2;
    size_t round = SHM_COLL_DEFAULT_ROUND;
    world_t *w = new_world(n, round, MODE_BITID);
    w->mem = MEM_ALL;
    w->reuse = _i;
    run_world(w, "mapped bit-identical allreduce");
    check_mapped_world(w, "mapped bit-identical allreduce", 0);
    ck_assert_uint_gt(w->out[0].keep_len, 0);
    for (int r = 1; r < n; r++) {
        ck_assert_uint_eq(w->out[r].keep_len, w->out[0].keep_len);
        if (memcmp(w->out[r].keep, w->out[0].keep, w->out[0].keep_len)) {
            size_t k = 0;
            while (w->out[r].keep[k] == w->out[0].keep[k]) k++;
            ck_abort_msg("mapped n=%d: rank %d's float32 sums differ from rank 0's at byte "
                         "%zu of the concatenated outputs", n, r, k);
        }
    }
    free_world(w);
}
END_TEST

/* (9) _i: n = 2, 3, 5 */
START_TEST(test_sb_ahead)
{
    static const int ns[] = { 2, 3, 5 };
    int n = ns[_i];
    world_t *w = new_world(n, shm_coll_round(n, 4096), MODE_SB_AHEAD);
    run_world(w, "small broadcasts, root ahead");
    ck_assert_msg(w->stalled_at == SB_DEPTH_T + 1, "n=%d: the root first waited for the others "
                  "in collective #%llu; it should finish %d small broadcasts alone and wait in "
                  "the next", n, (unsigned long long)w->stalled_at, SB_DEPTH_T);
    for (int r = 0; r < n; r++) ck_assert_uint_eq(w->out[r].colls, 3 * SB_DEPTH_T + 6);
    free_world(w);
}
END_TEST

/* (10) _i = 0: n = 4, yielding; 1: n = 4, sleeping; 2: n = 2, yielding; 3: n = 2, sleeping,
 * buffers mostly from the test allocator (roots lend them from MAP_BYTES) */
START_TEST(test_sb_stress)
{
    int n = _i >= 2 ? 2 : 4;
    world_t *w = new_world(n, shm_coll_round(n, 4096), MODE_SB_STRESS);
    w->sleepy = _i == 1 || _i == 3;
    if (_i == 3) w->mem = MEM_MIX;
    run_world(w, _i == 3 ? "small-broadcast stress, lent buffers, sleeping waiters"
                 : _i == 1 ? "small-broadcast stress, sleeping waiters" : "small-broadcast stress");
    for (int r = 0; r < n; r++)
        ck_assert_uint_eq(w->out[r].colls, w->sleepy ? SB_SLEEPY_STEPS : SB_STRESS_STEPS);
    free_world(w);
}
END_TEST

/* (13) _i: n = 2, 3, 5, 8 (_i / 2); yielding (even) or sleeping (odd) waiters */
START_TEST(test_lane)
{
    static const int ns[] = { 2, 3, 5, 8 };
    int n = ns[_i / 2];
    world_t *w = new_world(n, shm_coll_round(n, 4096), MODE_LANE);
    w->sleepy = _i & 1;
    run_world(w, w->sleepy ? "small lane, sleeping waiters" : "small lane");
    free_world(w);
}
END_TEST

/* (11) _i: the variant of script_sb_mismatch */
START_TEST(test_sb_mismatch)
{
    int n = _i == 1 || _i == 3 ? 3 : 2;
    world_t *w = new_world(n, shm_coll_round(n, 4096), MODE_SB_MISMATCH);
    w->variant = _i;
    if (_i == 4) w->mem = MEM_ALL;
    run_world(w, "small-broadcast mismatch");
    for (int r = 0; r < n; r++) {
        const rank_out_t *o = &w->out[r];
        char want[48];
        if (_i <= 1) {   /* every broadcast finishes; the allreduce after it fails */
            ck_assert_msg(o->st_coll == COHORT_SUCCESS, "variant %d: rank %d's broadcast: "
                          "status %d (%s)", _i, r, (int)o->st_coll, o->msg_coll);
            ck_assert_msg(o->st_after == COHORT_ERR_MISMATCH, "variant %d: rank %d's allreduce "
                          "after roots that disagreed: status %d (%s), expected "
                          "COHORT_ERR_MISMATCH", _i, r, (int)o->st_after, o->msg_after);
            ck_assert_msg(strstr(o->msg_after, "earlier collectives differ") != NULL,
                          "variant %d: rank %d's message does not say that the history "
                          "differs: '%s'", _i, r, o->msg_after);
            snprintf(want, sizeof want, "like rank %d,", r == 1 ? 0 : 1);
            ck_assert_msg(strstr(o->msg_after, want) != NULL, "variant %d: rank %d's message "
                          "does not name the other side ('%s'): '%s'", _i, r, want,
                          o->msg_after);
        } else if (_i == 2) {   /* both fail at once, each naming the other */
            ck_assert_msg(o->st_coll == COHORT_ERR_MISMATCH, "variant 2: rank %d: status %d "
                          "(%s), expected COHORT_ERR_MISMATCH", r, (int)o->st_coll,
                          o->msg_coll);
            snprintf(want, sizeof want, "but rank %d ", r == 1 ? 0 : 1);
            ck_assert_msg(strstr(o->msg_coll, want) != NULL, "variant 2: rank %d's message "
                          "does not name rank %d: '%s'", r, r == 1 ? 0 : 1, o->msg_coll);
            if (r == 1)
                ck_assert_msg(strstr(o->msg_coll, "not a broadcast from it") != NULL,
                              "variant 2: rank 1 does not say that its root is elsewhere: "
                              "'%s'", o->msg_coll);
        } else {   /* only the reader with another count fails (4: and releases the root) */
            cohort_status_t want_st = r == 1 ? COHORT_ERR_MISMATCH : COHORT_SUCCESS;
            ck_assert_msg(o->st_coll == want_st, "variant %d: rank %d: status %d (%s), expected "
                          "%d", _i, r, (int)o->st_coll, o->msg_coll, (int)want_st);
            if (r == 1)
                ck_assert_msg(strstr(o->msg_coll, "but rank 0 ") != NULL, "variant %d: rank 1's "
                              "message does not name the root: '%s'", _i, o->msg_coll);
            if (_i == 4)
                ck_assert_msg(o->log_lent == (r == 0), "variant 4: rank %d logged '%s' %u "
                              "times (the root lends its buffer once rank 1 can map it)", r,
                              LOG_LENT, o->log_lent);
        }
    }
    free_world(w);
}
END_TEST

/* (12) _i: the variant of script_finish */
START_TEST(test_finish)
{
    int n = _i == 0 || _i == 5 || _i == 8 ? 2 : 3;
    world_t *w = new_world(n, shm_coll_round(n, 4096), MODE_FINISH);
    w->variant = _i;
    run_world(w, "at close");
    for (int r = 0; r < n; r++) {
        const rank_out_t *o = &w->out[r];
        int fails = _i == 1 || _i == 5 || (_i == 8 && r == 0);
        ck_assert_msg(o->st_fin == (fails ? COHORT_ERR_MISMATCH : COHORT_SUCCESS),
                      "variant %d: rank %d's finish: status %d (%s)", _i, r, (int)o->st_fin,
                      o->msg_fin);
        if (fails) {
            ck_assert_msg(strstr(o->msg_fin, "its root does not wait") ||
                          strstr(o->msg_fin, "returns on its root without waiting"),
                          "variant %d: rank %d does not say why only close sees it: '%s'", _i,
                          r, o->msg_fin);
            ck_assert_msg(strstr(o->msg_fin, "so this shows only at destroy") != NULL,
                          "variant %d: rank %d: '%s'", _i, r, o->msg_fin);
        }
        if (_i == 1) {
            char want[96];
            snprintf(want, sizeof want, "broadcast #4 (count 2, int32, root %d)", r);
            ck_assert_msg(strstr(o->msg_fin, want) && strstr(o->msg_fin, "differ in the root") &&
                          strstr(o->msg_fin, "a broadcast of at most"), "variant 1: rank %d "
                          "does not name its call ('%s') and the roots: '%s'", r, want,
                          o->msg_fin);
        }
        if (_i == 5 || (_i == 8 && r == 0))
            ck_assert_msg(strstr(o->msg_fin, "broadcast #4 (count 2, int32, root 0)") &&
                          strstr(o->msg_fin, "broadcast #5 (count 2, int32, root 0)") &&
                          strstr(o->msg_fin, "called collectives that others did not"),
                          "variant %d: rank %d does not name both last calls: '%s'", _i, r,
                          o->msg_fin);
        /* who was not compared: in 3 the rank that left (seen as gone, not waited for until
         * the deadline), in 4 the late one, on the others */
        unsigned want_unc = (_i == 3 || _i == 4) && r != 2 ? 1u : 0u;
        ck_assert_msg(o->log_uncompared == want_unc, "variant %d: rank %d logged '%s' %u times, "
                      "expected %u", _i, r, LOG_UNCOMPARED, o->log_uncompared, want_unc);
        ck_assert_msg(o->log_left == (_i == 3 ? want_unc : 0u), "variant %d: rank %d logged "
                      "'%s' %u times", _i, r, LOG_LEFT, o->log_left);
    }
    if (_i == 2)
        ck_assert_msg(w->out[0].fin_waited & 4u, "variant 2: rank 0 never said it waited for "
                      "rank 2 at close");
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
    tcase_add_loop_test(tc, test_stress, 0, 4);
    tcase_add_loop_test(tc, test_tag_mismatch, 0, 16);
    tcase_add_loop_test(tc, test_bit_identical, 0, 4);
    tcase_add_loop_test(tc, test_sb_ahead, 0, 3);
    tcase_add_loop_test(tc, test_sb_stress, 0, 4);
    tcase_add_loop_test(tc, test_sb_mismatch, 0, 5);
    tcase_add_loop_test(tc, test_finish, 0, 9);
    tcase_add_loop_test(tc, test_lane, 0, 8);
    suite_add_tcase(s, tc);

    tc = tcase_create("mapped");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_mem_shared);
    tcase_add_loop_test(tc, test_mapped_matrix, 0, (int)(sizeof matrix_ns / sizeof matrix_ns[0]));
    tcase_add_loop_test(tc, test_mapped_mixed, 0, 6);
    tcase_add_loop_test(tc, test_mapped_stress, 0, 2);
    tcase_add_loop_test(tc, test_mapped_bit_identical, 0, 2);
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
