/* SPDX-License-Identifier: BSD-3-Clause */
/* Node-level collectives in shared memory: the protocol.
 *
 * Area (rank 0's segment, shared by every rank of the endpoint):
 *   [header page][per rank: a control line, an armed line, a mapped-mode line, a history line]
 *   [per rank: SB_DEPTH small-lane entries][per rank: NSLOTS staging slots of `round` bytes]
 *   [NSLOTS result slots of `round` bytes]
 * A control line holds three counters that only its rank writes, in steps: in (its input for
 * step t is staged), red (it reduced its slice of step t into the result slot), out (it is done
 * with step t: read every staging/result slot of t it needed), plus the tag of the collective
 * that staged each slot. A step is one round of a collective; every rank runs the same rounds
 * (the tags make sure of it), so steps are a shared clock.
 *
 * A round t (slot s = t % NSLOTS):
 *   A  wait until every rank is done with step t - NSLOTS (seen as in >= t - NSLOTS + 1: a rank
 *      publishes in = t only after out = t - 1, and in wakes sleepers where out does not), stage
 *      our input for t in our slot s, record the tag, publish in = t.
 *   B  wait for the ranks whose input we need (in >= t; every rank in the first round of a
 *      collective, whose tags are compared: a different tag is COHORT_ERR_MISMATCH naming both),
 *      then read their slots: reduce our slice (allreduce/reduce: into result slot s, publish
 *      red = t; reduce_scatter: straight into recvbuf), or copy their data out (allgather,
 *      alltoall, broadcast), then publish out = t.
 *   C  (allreduce, and reduce at its root) wait until every rank reduced its slice (red >= t),
 *      copy result slot s to recvbuf, publish out = t.
 * So each rank reads every peer's input once and reduces 1/n of it, and inputs go through the
 * staging slots in rounds of `round` bytes (COHORT_SHM_COLL_CHUNK, default 256 KiB): small
 * enough that staged data is still in cache when peers read it, and with NSLOTS slots a rank
 * copies its next round in while the others still reduce the previous one.
 * Allgathers between two ranks with blocks from CMA_MIN to CMA_AG_MAX skip the
 * staging when every peer can be read with process_vm_readv: one round in which each rank
 * publishes the address of its buffer, the readers copy straight from it into their receive
 * buffers (one copy instead of two), publish out, and the owners wait until every reader is done
 * (phase D) before they hand the buffer back to the user. With more ranks, larger blocks, and
 * for broadcasts (which used it between two ranks up to 4 MiB), the staged pipeline measured
 * faster once it chose its stores (below; docs/performance-log.md, "Measurements behind the code's
 * constants"), except allgather of 4 MiB at np 2. Small allreduces
 * (DIRECT_MAX) run as one round in which every rank reduces the whole vector itself (one
 * synchronisation instead of two); the reduction order is rank 0..n-1 on every path, so all
 * ranks get bit-identical results.
 * Mapped mode: when the buffers of a collective from MAP_MIN bytes come from cohort_mem_alloc on
 * every rank (host->mem_shared, ABI 1.3), nothing is staged: each rank maps its peers' blocks
 * (their memfds, through /proc/<pid>/fd, cached per endpoint; read-only unless it writes into
 * them) and reads their buffers itself, in one round. Whether a rank's buffers are mapped is
 * known only to it, so in the first round each rank that can publishes a description of its
 * buffers instead of staging
 * (flag M_MAPPED), the others stage as usual, and phase B, seeing every rank's flag, decides the
 * same way everywhere: all mapped, the mapped round; none, the staged rounds as always; a mix
 * (rare: only some ranks allocated with cohort_mem_alloc), that step carried no data, everyone
 * publishes out and the collective starts over staged. Allreduce: each rank reduces its slice
 * from every send buffer into its receive buffer and copies it into every peer's (a writable
 * mapping), then publishes red; once every rank's red is in, all slices are everywhere and
 * nobody reads our buffers any more (two synchronisations). The other collectives read the
 * peers' buffers, and their owners wait for every reader (phase D) before they return.
 * Small broadcasts (up to coll_sb_max(n) bytes) take one step in the small lane instead: the root
 * copies the data into its entry for the step (SB_DEPTH entries per rank, used in turn), publishes
 * the entry and returns without waiting for anyone; the others wait for that entry only (or for
 * the root's in, which says that it is in another collective at this step), check its tag and
 * copy the data out. Allreduces of up to FB_MAX bytes (at most coll_sb_max(n)) and barriers
 * take one step in the lane too: every rank writes its input into its own entry (up to
 * SB_INLINE bytes in the line that holds the entry's tag, history and step, more in the entry's
 * data part) and waits for every peer's entry, then reduces the entries in rank order (its own
 * operand from sendbuf: own_operand). Up to SB_INLINE bytes that is one cache line each way per
 * pair of ranks; a staged round reads four or five of each peer's lines besides its data
 * (control line, history line, the entry that says the step was not in the lane, and the
 * control line again after out), and no control line is written.
 * A step in the lane publishes its entry instead of in: a rank has started step t when its in
 * or its entry for t says so (coll_started), which is how every wait for a peer's in reads it.
 * A root can so run up to SB_DEPTH broadcasts ahead of the slowest reader, as Open MPI's
 * roots, which drop small messages into their peers' queues, never wait either (docs/
 * performance-log.md, "Measurements behind the code's constants"). Every rank writes an entry (tag,
 * history, step), so a rank that is in another collective at that step sees the difference. A root
 * compares nothing; each rank's history (chain_step) makes the next collective that compares catch
 * roots that disagreed.
 * The lane comes before mapped mode, which it overlaps from 32 KiB: nobody may read the buffer
 * of a root that waits for no one. Except when the root lends it: a root whose
 * buffer of at least MAP_MIN bytes came from cohort_mem_alloc, and whose readers all said they
 * can map its blocks (mapcap), marks its entry `lend` instead of copying the data into it,
 * and waits for every reader's out (phase D); the readers copy from its buffer in place and
 * publish out with a wake-up, also when they fail (coll_sb_lent), so that the root returns.
 * At close (shm_coll_finish), so that roots that disagreed are found even when their broadcast
 * was the last call: each rank publishes its history and last collective in its history line
 * (fin), then compares with every peer, from the peer's own fin or, while the peer has not
 * closed, from its record of this rank's last step if it got there (a peer that agrees and
 * closes late costs no wait). Peers that have not got there are waited for, for a bounded time
 * that the caller gives; those that left without a fin (exited, or their area went) and those
 * whose collectives failed are not compared.
 * Counters and entries are published with seq_cst stores; a waiter that wants to sleep sets its
 * armed flag (seq_cst) and re-checks, a publisher loads every armed flag after publishing and
 * wakes (hook) those set: a Dekker pair, so no wake-up is lost.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE   /* memfd_create */
#endif
#include "coll.h"
#include "coll_int.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

static size_t ctl_bytes(int n)
{
    return (AREA_PAGE + (size_t)n * sizeof(rank_ctl_t) + AREA_PAGE - 1) / AREA_PAGE * AREA_PAGE;
}

size_t shm_coll_round(int nranks, size_t requested)
{
    size_t min = (size_t)nranks * LINE;
    if (requested < min) requested = min;
    return (requested + AREA_PAGE - 1) / AREA_PAGE * AREA_PAGE;
}

size_t shm_coll_area_bytes(int nranks, size_t round)
{
    return ctl_bytes(nranks) + coll_small_bytes(nranks) +
           ((size_t)nranks + 1) * SHM_COLL_NSLOTS * round;
}

void shm_coll_area_init(void *area, int nranks, size_t round)
{
    area_hdr_t *h = area;
    h->version = AREA_VERSION;
    h->nranks = (uint32_t)nranks;
    h->nslots = SHM_COLL_NSLOTS;
    h->round = round;
    atomic_thread_fence(memory_order_release);
    h->magic = AREA_MAGIC;
}

int shm_coll_area_check(const void *area, size_t len, int nranks, size_t *round)
{
    const area_hdr_t *h = area;
    if (len < sizeof *h || __atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != AREA_MAGIC ||
        h->version != AREA_VERSION || (int)h->nranks != nranks ||
        h->nslots != SHM_COLL_NSLOTS || h->round % AREA_PAGE || h->round == 0 ||
        h->round < (uint64_t)nranks * LINE || h->round > (uint64_t)SHM_COLL_MAX_ROUND ||
        shm_coll_area_bytes(nranks, (size_t)h->round) != len)
        return -1;
    *round = (size_t)h->round;
    return 0;
}

shm_coll_t *shm_coll_new(void *area, int rank, int nranks, const cohort_host_v1_t *host,
                         const shm_coll_hooks_t *hooks)
{
    shm_coll_t *co = calloc(1, sizeof *co);
    if (!co) return NULL;
    const area_hdr_t *h = area;
    co->host = host;
    co->hooks = *hooks;
    co->rank = rank;
    co->n = nranks;
    co->round = (size_t)h->round;
    co->ctl = (rank_ctl_t *)(void *)((unsigned char *)area + AREA_PAGE);
    co->small = (unsigned char *)area + ctl_bytes(nranks);
    co->sb_max = coll_sb_max(nranks);
    co->stage = co->small + coll_small_bytes(nranks);
    co->res = co->stage + (size_t)nranks * SHM_COLL_NSLOTS * co->round;
    /* every rank starts at step 0 (counters are zero in a fresh area). The single-copy mode
     * must be chosen alike on every rank, so each says here whether it can read all its peers,
     * and the first collective (after the core's last creation round, so after every rank got
     * here) combines them. */
    co->all_cma = -1;
    co->can_map = -1;
    co->prefault = 1;
    co->probe_fd = -1;
    co->psend = calloc((size_t)nranks, sizeof *co->psend);
    co->precv = calloc((size_t)nranks, sizeof *co->precv);
    co->srcs = calloc((size_t)nranks, sizeof *co->srcs);
    co->ncache = MAP_CACHE > 2 * nranks + 2 ? MAP_CACHE : 2 * nranks + 2;   /* one collective's
                                                                           blocks always fit */
    co->cache = calloc((size_t)co->ncache, sizeof *co->cache);
    if (!co->psend || !co->precv || !co->srcs || !co->cache) {
        shm_coll_free(co);
        return NULL;
    }
    /* the probe for mapped mode: only where the core can hand out mapped memory at all */
    if (!hooks->map) co->can_map = 0;
    else if (COHORT_HAS_FIELD(host, cohort_host_v1_t, mem_shared) && host->mem_shared) {
        char name[48];
        snprintf(name, sizeof name, "cohort-probe-%d", (int)getpid());
        int fd = memfd_create(name, MFD_CLOEXEC);
        uint64_t magic = PROBE_MAGIC ^ (uint64_t)getpid();
        if (fd >= 0 && (ftruncate(fd, (off_t)AREA_PAGE) < 0 ||
                        pwrite(fd, &magic, sizeof magic, 0) != (ssize_t)sizeof magic)) {
            close(fd);
            fd = -1;
        }
        co->probe_fd = fd;
    }
    co->ctl[rank].pid = (int32_t)getpid();
    co->ctl[rank].probe_fd = co->probe_fd;
    atomic_store_explicit(&co->ctl[rank].caps, 1u + (hooks->cma ? 1u : 0u), memory_order_release);
    return co;
}

void shm_coll_free(shm_coll_t *co)
{
    if (!co) return;
    for (int i = 0; co->cache && i < co->ncache; i++)
        if (co->cache[i].id) coll_unmap(&co->cache[i]);
    if (co->probe_fd >= 0) close(co->probe_fd);
    free(co->cache);
    free(co->psend);
    free(co->precv);
    free(co->srcs);
    free(co);
}

int shm_coll_active(const shm_coll_t *co) { return co && co->active; }

void shm_coll_cancel(shm_coll_t *co)
{
    if (!co) return;
    co->active = 0;
    co->broken = 1;
}

static unsigned char *slot_of(const shm_coll_t *co, int rank, uint64_t t)
{
    return co->stage + ((size_t)rank * SHM_COLL_NSLOTS + (size_t)(t % SHM_COLL_NSLOTS)) * co->round;
}

/* memcpy with non-temporal stores to a 16-byte aligned dst, then a store fence: the lines go
 * to memory without first being read for ownership, which would fetch them from (or invalidate
 * them in) the caches of the readers that last copied this entry out; when the host puts the
 * two vCPUs far apart (docs/performance-log.md, the slow mode) that costs 3-5x. The root of a small
 * broadcast writes its data this way from SB_STREAM_MIN: np 2, `--same-buffer --touch`, 30
 * alternated runs, us, against memcpy and Open MPI: 4 KiB 0.41-0.54 / 0.48-1.94 / 2.6-3.6,
 * 16 KiB 1.41-1.82 / 1.38-6.28 / 3.6-4.5, 64 KiB 5.0-6.4 / 2.8-30 / 6.8-8.0; at 2 KiB (16
 * runs) 0.29-0.35 against 0.24-0.86: slower in the fast minutes, so memcpy below 4 KiB. */
static void stream_copy(void *dst, const void *src, size_t len)
{
#if defined(__SSE2__)
    if (((uintptr_t)dst & 15u) == 0) {
        __m128i *d = dst;
        const unsigned char *s = src;
        size_t k = len / 64;
        for (size_t i = 0; i < k; i++, s += 64, d += 4) {
            __m128i x0 = _mm_loadu_si128((const __m128i *)(const void *)s);
            __m128i x1 = _mm_loadu_si128((const __m128i *)(const void *)(s + 16));
            __m128i x2 = _mm_loadu_si128((const __m128i *)(const void *)(s + 32));
            __m128i x3 = _mm_loadu_si128((const __m128i *)(const void *)(s + 48));
            _mm_stream_si128(d, x0);
            _mm_stream_si128(d + 1, x1);
            _mm_stream_si128(d + 2, x2);
            _mm_stream_si128(d + 3, x3);
        }
        memcpy(d, s, len - k * 64);
        _mm_sfence();   /* before the entry's step (a release store) publishes them */
        return;
    }
#endif
    memcpy(dst, src, len);
}

/* A copy into a small-lane entry or a staging or result slot: with streaming stores when
 * `stream` says so and the piece is worth it (SB_STREAM_MIN). */
static void put(void *dst, const void *src, size_t len, int stream)
{
    if (stream && len >= SB_STREAM_MIN) stream_copy(dst, src, len);
    else memcpy(dst, src, len);
}

/* Which stores a staged collective of co->bytes uses (hooks.stream 2: measured per size class).
 * Ordinary stores into a slot first fetch each line from wherever it is cached, and the peers
 * that read the slot a few rounds ago hold it (not in a two-rank allreduce: result_of): cheap
 * when the ranks share a cache, 4-8x dearer when the host puts the vCPUs apart
 * (docs/performance-log.md, the slow mode). Streaming stores
 * skip that fetch, and the readers then read from memory: 1.5-2x slower when the cache is
 * shared. Which holds can change from one minute to the next, so after both were tried
 * (ADAPT_WARM) a class uses the one whose last few collectives were fastest and tries the other
 * every ADAPT_PROBE collectives. The least of the last few, not an average: one collective
 * that a preempted rank held up must not hide a kind until many more tries of it. Every rank
 * counts the same collectives, so they try together. */
static double adapt_least(const adapt_t *ad, int kind)
{
    uint32_t n = ad->got[kind] < ADAPT_KEEP ? ad->got[kind] : ADAPT_KEEP;
    double m = n ? ad->ns_kib[kind][0] : 1e300;
    for (uint32_t i = 1; i < n; i++)
        if (ad->ns_kib[kind][i] < m) m = ad->ns_kib[kind][i];
    return m;
}

static void choose_stores(shm_coll_t *co)
{
    co->stream = co->hooks.stream == 1;
    if (co->hooks.stream != 2 || co->bytes < ADAPT_MIN) return;
    int c = 0;
    for (size_t b = co->bytes / ADAPT_MIN; b > 1 && c < ADAPT_CLASSES - 1; b >>= 1) c++;
    adapt_t *ad = &co->adapt[co->a.coll][c];
    uint32_t k = ad->runs++;
    if (k < ADAPT_WARM) {
        co->stream = (int)(k & 1u);
    } else {
        int best = adapt_least(ad, 1) < adapt_least(ad, 0);
        co->stream = k % ADAPT_PROBE == 0 ? !best : best;
    }
    co->adapt_cls = c;
    co->t0 = shm_now_ns();
}

/* A staged collective finished: its time goes into its class's record. */
static void measured(shm_coll_t *co)
{
    if (co->adapt_cls < 0 || co->map) return;
    adapt_t *ad = &co->adapt[co->a.coll][co->adapt_cls];
    int kind = co->stream;
    ad->ns_kib[kind][ad->got[kind]++ % ADAPT_KEEP] =
        (double)(shm_now_ns() - co->t0) * 1024.0 / (double)co->bytes;
}

/* The history a rank publishes with each collective's tag: a hash of the tags of every
 * collective it started. The roots of small broadcasts do not compare tags (they do not wait
 * for anyone), so two ranks that both took themselves for the root would go unnoticed; their
 * histories differ from then on, and the next collective that compares says so. */
static uint64_t chain_step(uint64_t chain, uint64_t tag)
{
    uint64_t x = (chain ^ tag) + 0x9e3779b97f4a7c15ull;   /* splitmix64's mixer */
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static unsigned char *res_of(const shm_coll_t *co, uint64_t t)
{
    return co->res + (size_t)(t % SHM_COLL_NSLOTS) * co->round;
}

/* Where the reduced slice of `reducer` is put in a staged round of an allreduce or reduce
 * (offsets as in the round). Between two ranks it goes over the peer's input for that slice,
 * in the peer's slot, which the reducer has just read: a core stores into a line fastest when
 * it holds it, and a line another core wrote moves to the core that reads it (on the Intel hosts
 * at once), so the reducer then writes lines it holds, and the peer, which reads the result back
 * out of its own slot, holds the lines it stages its next input into. With a slot per writer
 * (the result slot) every store first fetches the line back from the core that read it last
 * (docs/performance-log.md). From three ranks on, several read each result: the result slot. */
static unsigned char *result_of(const shm_coll_t *co, int reducer)
{
    if (co->n == 2 && co->a.coll == COHORT_TP_ALLREDUCE) return slot_of(co, 1 - reducer, co->t);
    return res_of(co, co->t);
}

const char *coll_name(int c)
{
    static const char *names[] = { "allreduce", "broadcast", "reduce", "allgather",
                                   "reduce_scatter", "alltoall", "barrier" };
    return c >= 0 && c <= COHORT_TP_BARRIER ? names[c] : "?";
}

static size_t dsize(cohort_dtype_t d)
{
    switch (d) {
    case COHORT_INT8: case COHORT_UINT8: return 1;
    case COHORT_FLOAT16: case COHORT_BFLOAT16: return 2;
    case COHORT_INT32: case COHORT_UINT32: case COHORT_FLOAT32: return 4;
    case COHORT_INT64: case COHORT_UINT64: case COHORT_FLOAT64: return 8;
    }
    return 0;
}

cohort_status_t shm_coll_start(shm_coll_t *co, const cohort_tp_coll_args_t *a)
{
    const cohort_host_v1_t *host = co->host;
    if (co->broken)
        return host->error(COHORT_ERR_INVALID_ARG, "shm: rank %d: node collectives of this "
                           "endpoint were abandoned after an earlier failure; destroy the "
                           "communicator", co->rank);
    if (co->active)
        return host->error(COHORT_ERR_INVALID_ARG, "shm: rank %d: a %s is still in flight on "
                           "this endpoint", co->rank, coll_name(co->a.coll));
    if (a->coll < 0 || a->coll > COHORT_TP_BARRIER)
        return host->error(COHORT_ERR_INVALID_ARG, "shm: unknown collective %d", a->coll);
    size_t es = a->coll == COHORT_TP_BARRIER ? 1 : dsize(a->dtype);
    if (!es) return host->error(COHORT_ERR_INVALID_ARG, "shm: unknown dtype %d", (int)a->dtype);
    co->a = *a;
    co->esize = es;
    co->bytes = a->coll == COHORT_TP_BARRIER ? 0 : a->count * es;
    co->direct = 0;
    co->chain = chain_step(co->chain, a->tag);
    co->sb = a->coll == COHORT_TP_BROADCAST && co->n > 1 && co->bytes <= co->sb_max;
    size_t fb_max = FB_MAX < co->sb_max ? FB_MAX : co->sb_max;
    co->fb = co->n > 1 && ((a->coll == COHORT_TP_ALLREDUCE && co->bytes <= fb_max) ||
                           a->coll == COHORT_TP_BARRIER);
    switch (a->coll) {
    case COHORT_TP_ALLREDUCE: case COHORT_TP_REDUCE:
        co->direct = !co->fb && co->bytes <= DIRECT_MAX && co->bytes <= co->round;
        co->unit = co->round;
        break;
    case COHORT_TP_REDUCE_SCATTER: case COHORT_TP_ALLTOALL:
        co->unit = co->round / (size_t)co->n / LINE * LINE;
        break;
    default:
        co->unit = co->round;
        break;
    }
    if (co->all_cma < 0) {
        co->all_cma = 1;
        for (int j = 0; j < co->n; j++)
            if (atomic_load_explicit(&co->ctl[j].caps, memory_order_acquire) != 2u)
                co->all_cma = 0;
    }
    co->map = co->map_d = co->map_mine = 0;
    co->map_try = co->n > 1 && co->bytes >= MAP_MIN &&
                  (a->coll == COHORT_TP_ALLREDUCE || a->coll == COHORT_TP_BROADCAST ||
                   a->coll == COHORT_TP_ALLGATHER || a->coll == COHORT_TP_REDUCE_SCATTER ||
                   a->coll == COHORT_TP_ALLTOALL);
    co->sb_lend = co->sb && coll_sb_lend_mine(co);
    if (co->sb) co->map_try = 0;   /* mapped mode's first round would make the root wait */
    if (co->map_try) co->map_mine = coll_describe_mine(co);
    co->cma = 0;
    if (a->coll == COHORT_TP_ALLGATHER && co->all_cma && co->n == 2 && co->bytes >= CMA_MIN &&
        co->bytes <= CMA_AG_MAX) {
        co->cma = 1;
        co->unit = co->bytes;
    }
    co->stream = 0;
    co->adapt_cls = -1;
    if (!co->sb && !co->fb && !co->cma && !co->direct && co->bytes) choose_stores(co);
    co->nrounds = co->bytes && !co->sb && !co->fb ? (co->bytes + co->unit - 1) / co->unit : 1;
    co->r = 0;
    co->t = ++co->step;
    co->phase = PH_A;
    co->idle = 0;
    co->wait_peer = -1;
    co->active = 1;
    return COHORT_SUCCESS;
}

/* ---- counters ------------------------------------------------------------------------------ */

enum { CT_IN, CT_RED, CT_OUT, CT_SB };

/* Rank j's counter `which`, compared by the caller with step t. CT_IN and CT_SB both say
 * whether j started step t: its in, or its small-lane entry for t (a step in the lane publishes
 * only its entry). CT_IN looks at in first, CT_SB at the entry first (the readers of a step in
 * the lane wait for the entry itself: one cache line for data and flag, and none of the peer's
 * control line; its in is read only while the entry is not there, and says when the peer is in
 * another collective at this step: a mismatch that check_tags reports). */
static uint64_t load_ct(const shm_coll_t *co, int j, int which, uint64_t t)
{
    rank_ctl_t *c = &co->ctl[j];
    _Atomic uint64_t *e = &sb_of(co, j, t)->step;
    uint64_t s, es;
    switch (which) {
    case CT_SB:
        s = atomic_load_explicit(e, memory_order_acquire);
        return s >= t ? s : atomic_load_explicit(&c->in, memory_order_acquire);
    case CT_IN:
        s = atomic_load_explicit(&c->in, memory_order_acquire);
        if (s >= t) return s;
        es = atomic_load_explicit(e, memory_order_acquire);
        return es >= t ? es : s;
    case CT_RED:
        return atomic_load_explicit(&c->red, memory_order_acquire);
    default:
        return atomic_load_explicit(&c->out, memory_order_acquire);
    }
}

int coll_started(const shm_coll_t *co, int j, uint64_t t)
{
    return load_ct(co, j, CT_IN, t) >= t;
}

/* in, red and a small-lane entry (CT_SB: our entry for step t) are waited for by sleepers:
 * seq_cst store, then the armed flags (Dekker). out is waited for only in phase D (the readers
 * of a buffer in single-copy and mapped mode; phase A waits for the next step's in instead), so
 * elsewhere a release store is enough and saves a fence per collective on a line the peers are
 * polling. */
static void publish(shm_coll_t *co, int which, uint64_t t)
{
    rank_ctl_t *c = &co->ctl[co->rank];
    _Atomic uint64_t *p = which == CT_SB ? &sb_of(co, co->rank, t)->step
                          : which == CT_IN ? &c->in : which == CT_RED ? &c->red : &c->out;
    if (which == CT_OUT && !co->cma && !co->map_d) {
        atomic_store_explicit(p, t, memory_order_release);
        return;
    }
    atomic_store_explicit(p, t, memory_order_seq_cst);
    for (int j = 0; j < co->n; j++) {
        if (j == co->rank) continue;
        if (atomic_load_explicit(&co->ctl[j].armed, memory_order_seq_cst) &&
            atomic_exchange_explicit(&co->ctl[j].armed, 0, memory_order_seq_cst))
            co->hooks.wake(co->hooks.ep, j);
    }
}

/* 1 if every rank's counter (only `only`'s when only >= 0) is >= t; else sets wait_peer. */
static int reached(shm_coll_t *co, int which, uint64_t t, int only)
{
    if (only >= 0) {
        if (load_ct(co, only, which, t) >= t) return 1;
        co->wait_peer = only;
        return 0;
    }
    for (int j = 0; j < co->n; j++)
        if (j != co->rank && load_ct(co, j, which, t) < t) {
            co->wait_peer = j;
            return 0;
        }
    return 1;
}

/* What the current phase waits for: counter, step, single rank or -1 for all; 0 if nothing. */
static int wait_cond(const shm_coll_t *co, int *which, uint64_t *t, int *only)
{
    *only = -1;
    switch (co->phase) {
    case PH_A: {
        /* every rank done with the step that last used our slot (k steps ago), seen as its
         * start of the step after it: in is published with a wake-up, out mostly is not */
        int lane = co->sb || co->fb;
        uint64_t k = lane ? SB_DEPTH : SHM_COLL_NSLOTS;
        if (co->t <= k || co->t - k <= co->known_out) return 0;
        *which = CT_IN;
        /* a small broadcast's root that ran ahead so far waits until the others are half-way
         * behind, not one step: it then runs SB_DEPTH / 2 steps without reading their lines */
        *t = lane ? co->t - SB_DEPTH / 2 : co->t - k + 1;
        return 1;
    }
    case PH_B:
        *which = co->fb ? CT_SB : CT_IN;
        *t = co->t;
        if (co->a.coll == COHORT_TP_BROADCAST && (co->r > 0 || co->sb)) {
            if (co->rank == co->a.root) return 0;
            *only = co->a.root;
            if (co->sb) *which = CT_SB;
        }
        return 1;
    case PH_C:
        *which = CT_RED;
        *t = co->t;
        return 1;
    default:   /* PH_D: every reader of our buffer is done */
        *which = CT_OUT;
        *t = co->t;
        return 1;
    }
}

/* ---- the work of each phase ---------------------------------------------------------------- */

/* Round r of a unit-sized split of `total` bytes: offset and length. */
static void span(const shm_coll_t *co, size_t total, size_t *off, size_t *len)
{
    *off = co->r * co->unit;
    *len = total - *off < co->unit ? total - *off : co->unit;
}

/* Our tag and history for the step (set before in is published). */
static void set_tag(shm_coll_t *co)
{
    co->ctl[co->rank].tag[co->t % SHM_COLL_NSLOTS] = co->a.tag;
    atomic_store_explicit(&co->ctl[co->rank].chain[co->t % SHM_COLL_NSLOTS], co->chain,
                          memory_order_relaxed);   /* published by in (seq_cst) */
}

static void stage(shm_coll_t *co)
{
    const cohort_tp_coll_args_t *a = &co->a;
    unsigned char *dst = slot_of(co, co->rank, co->t);
    const unsigned char *src = a->sendbuf;
    size_t off, len;
    if (co->sb || co->fb) {   /* our entry in the small lane (publish() stores its step) */
        sb_hdr_t *e = sb_of(co, co->rank, co->t);
        e->lend = (uint32_t)co->sb_lend;   /* lent: the readers read our buffer itself */
        e->coll = (uint32_t)a->coll;
        if (co->sb && co->rank == a->root && co->bytes && !co->sb_lend)
            put(sb_data(co, co->rank, co->t, co->bytes), a->recvbuf, co->bytes, 1);
        if (co->fb && co->bytes)   /* an allreduce: our input, in the entry's own line */
            memcpy(sb_data(co, co->rank, co->t, co->bytes), a->sendbuf, co->bytes);
        e->tag = a->tag;
        atomic_store_explicit(&e->chain, co->chain, memory_order_relaxed);   /* step publishes */
        return;
    }
    if (co->map_try) {   /* the first round says whether peers may read our buffers in place */
        co->ctl[co->rank].mflags[co->t % SHM_COLL_NSLOTS] = co->map_mine ? M_MAPPED : 0u;
        if (co->map_mine && !co->cma) {   /* nothing to stage, unless phase B says otherwise */
            set_tag(co);
            return;
        }
    }
    if (co->cma) {   /* nothing to stage: the peers read our buffer itself */
        co->ctl[co->rank].addr = (uint64_t)(uintptr_t)a->sendbuf;
        set_tag(co);
        return;
    }
    switch (a->coll) {
    case COHORT_TP_ALLREDUCE: case COHORT_TP_REDUCE:
        span(co, co->bytes, &off, &len);
        if (co->direct) {
            put(dst, src + off, len, co->stream);
        } else {   /* our own slice is reduced from sendbuf: stage only what the others read */
            size_t at, slen;
            coll_my_slice(co, len, &at, &slen);
            put(dst, src + off, at, co->stream);
            put(dst + at + slen, src + off + at + slen, len - at - slen, co->stream);
        }
        break;
    case COHORT_TP_ALLGATHER:
        span(co, co->bytes, &off, &len);
        put(dst, src + off, len, co->stream);
        break;
    case COHORT_TP_BROADCAST:
        if (co->rank != a->root) break;
        span(co, co->bytes, &off, &len);
        put(dst, (const unsigned char *)a->recvbuf + off, len, co->stream);
        break;
    case COHORT_TP_REDUCE_SCATTER: case COHORT_TP_ALLTOALL:
        span(co, co->bytes, &off, &len);
        for (int i = 0; i < co->n; i++)   /* our own block: from sendbuf (own_block, own_operand) */
            if (i != co->rank)
                put(dst + (size_t)i * co->unit, src + (size_t)i * co->bytes + off, len,
                    co->stream);
        break;
    default:
        break;
    }
    set_tag(co);
}

/* out = src[0] + at OP src[1] + at OP ... src[n-1] + at, len bytes, in rank order on every
 * rank, so that every rank gets bit-identical results. */
static void reduce_ordered(shm_coll_t *co, void *out, const unsigned char *const *src, size_t at,
                           size_t len)
{
    const cohort_tp_coll_args_t *a = &co->a;
    size_t cnt = len / co->esize;
    if (!cnt) return;
    if (co->n == 1) {
        memcpy(out, src[0] + at, len);
    } else {
        co->host->reduce3(out, src[0] + at, src[1] + at, cnt, a->dtype, a->op);
        for (int j = 2; j < co->n; j++) co->host->reduce(out, src[j] + at, cnt, a->dtype, a->op);
    }
    co->host->reduce_finish(out, cnt, a->dtype, a->op, co->n);
}

/* Our own operand in a reduction of every rank's published input: sendbuf + off itself, not
 * the copy of it that we published. The peers have just read that copy, and a host may hand a
 * line that another core read right after we wrote it over to that core, ours gone (the Intel
 * Xeon hosts do: reading our own 8 bytes back cost a cross-core miss per call,
 * docs/performance-log.md, eleventh sitting). In place with rank >= 2, reduce_ordered would
 * read our input after writing the result over it, so there the copy. */
static const unsigned char *own_operand(const shm_coll_t *co, const unsigned char *copy,
                                        size_t off)
{
    const cohort_tp_coll_args_t *a = &co->a;
    if (co->n < 2 || (a->sendbuf == a->recvbuf && co->rank >= 2)) return copy;
    return (const unsigned char *)a->sendbuf + off;
}

/* A direct reduction: every rank's staged input for step t (ours from sendbuf). */
static void reduce_all(shm_coll_t *co, void *out, size_t off, size_t at, size_t len)
{
    for (int j = 0; j < co->n; j++) co->srcs[j] = slot_of(co, j, co->t);
    co->srcs[co->rank] = own_operand(co, co->srcs[co->rank], off);
    reduce_ordered(co, out, co->srcs, at, len);
}

/* A small allreduce in the lane: the entries' inputs for step t (ours from sendbuf). */
static void reduce_lane(shm_coll_t *co, void *out)
{
    for (int j = 0; j < co->n; j++) co->srcs[j] = sb_data(co, j, co->t, co->bytes);
    co->srcs[co->rank] = own_operand(co, co->srcs[co->rank], 0);
    reduce_ordered(co, out, co->srcs, 0, co->bytes);
}

/* out = own OP the others' inputs src[j] + at, len bytes: own first, then the others in rank
 * order. own == out (in place) is allowed. Each element is reduced by one rank only, so every
 * rank still gets bit-identical results. */
void coll_reduce_from(shm_coll_t *co, void *out, const void *own,
                      const unsigned char *const *src, size_t at, size_t len)
{
    const cohort_tp_coll_args_t *a = &co->a;
    size_t cnt = len / co->esize;
    if (!cnt) return;
    if (co->n == 1 && out != own) memcpy(out, own, len);   /* (shm.c never runs n == 1) */
    int first = 1;
    for (int j = 0; j < co->n; j++) {
        if (j == co->rank) continue;
        const unsigned char *in = src[j] + at;
        if (first && out != own) co->host->reduce3(out, own, in, cnt, a->dtype, a->op);
        else co->host->reduce(out, in, cnt, a->dtype, a->op);
        first = 0;
    }
    co->host->reduce_finish(out, cnt, a->dtype, a->op, co->n);
}

/* coll_reduce_from the others' staged inputs at slot(j) + at. */
static void reduce_mine(shm_coll_t *co, void *out, const void *own, size_t at, size_t len)
{
    for (int j = 0; j < co->n; j++) co->srcs[j] = slot_of(co, j, co->t);
    coll_reduce_from(co, out, own, co->srcs, at, len);
}

/* Our slice of a reduction round of len bytes: [*at, *at + *slen). */
void coll_my_slice(const shm_coll_t *co, size_t len, size_t *at, size_t *slen)
{
    size_t per = (len + (size_t)co->n - 1) / (size_t)co->n;
    per = (per + LINE - 1) / LINE * LINE;   /* a multiple of every element size */
    size_t lo = per * (size_t)co->rank;
    *at = lo < len ? lo : len;
    size_t hi = lo + per < len ? lo + per : len;
    *slen = hi > *at ? hi - *at : 0;
}

/* Phase B in single-copy mode (allgather): read the peers' blocks into ours. */
static cohort_status_t compute_cma(shm_coll_t *co)
{
    const cohort_tp_coll_args_t *a = &co->a;
    unsigned char *rb = a->recvbuf;
    for (int j = 0; j < co->n; j++) {
        if (j == co->rank) continue;   /* our own block: copied in phase A */
        int rc = co->hooks.read(co->hooks.ep, j, rb + (size_t)j * co->bytes, co->ctl[j].addr,
                                co->bytes);
        if (rc < 0) {
            cohort_status_t st = co->hooks.peer_check(co->hooks.ep, j, 1);
            if (st) return st;
            return co->host->error(COHORT_ERR_TRANSPORT, "shm: rank %d: reading %zu bytes of "
                                   "rank %d's buffer with process_vm_readv in a %s failed: %s",
                                   co->rank, co->bytes, j, coll_name(a->coll), strerror(-rc));
        }
    }
    return COHORT_SUCCESS;
}

/* Our own block of an allgather or alltoall round, from sendbuf + soff to its place in recvbuf
 * (block `rank`, offset off); staged rounds take it from there too, not from the slot we
 * staged it in, for the reason of own_operand. In place the two are the same bytes, and
 * nothing is copied. */
static void own_block(const shm_coll_t *co, size_t soff, size_t off, size_t len)
{
    unsigned char *dst = (unsigned char *)co->a.recvbuf + (size_t)co->rank * co->bytes + off;
    const unsigned char *src = (const unsigned char *)co->a.sendbuf + soff;
    if (dst != src) memcpy(dst, src, len);
}

/* Phase B's work; returns 1 when a phase C follows. */
static int compute(shm_coll_t *co)
{
    const cohort_tp_coll_args_t *a = &co->a;
    unsigned char *rb = a->recvbuf;
    size_t off, len;
    if (co->fb) {   /* a small allreduce (or a barrier: nothing to compute) */
        if (a->coll == COHORT_TP_ALLREDUCE) reduce_lane(co, rb);
        return 0;
    }
    switch (a->coll) {
    case COHORT_TP_ALLREDUCE: case COHORT_TP_REDUCE:
        span(co, co->bytes, &off, &len);
        if (co->direct) {
            if (a->coll == COHORT_TP_ALLREDUCE || co->rank == a->root)
                reduce_all(co, rb, off, 0, len);
            return 0;
        } else {
            /* our slice: into recvbuf (allreduce) or straight into the result slot */
            size_t at, slen;
            coll_my_slice(co, len, &at, &slen);
            const unsigned char *own = (const unsigned char *)a->sendbuf + off + at;
            unsigned char *res = result_of(co, co->rank) + at;
            if (a->coll == COHORT_TP_ALLREDUCE) {
                reduce_mine(co, rb + off + at, own, at, slen);
                put(res, rb + off + at, slen, co->stream);
            } else {
                reduce_mine(co, res, own, at, slen);
            }
            return 1;
        }
    case COHORT_TP_REDUCE_SCATTER:
        span(co, co->bytes, &off, &len);
        reduce_mine(co, rb + off, (const unsigned char *)a->sendbuf +
                    (size_t)co->rank * co->bytes + off, (size_t)co->rank * co->unit, len);
        return 0;
    case COHORT_TP_ALLTOALL:
        span(co, co->bytes, &off, &len);
        for (int j = 0; j < co->n; j++)
            if (j != co->rank)
                memcpy(rb + (size_t)j * co->bytes + off,
                       slot_of(co, j, co->t) + (size_t)co->rank * co->unit, len);
        own_block(co, (size_t)co->rank * co->bytes + off, off, len);
        return 0;
    case COHORT_TP_ALLGATHER:
        span(co, co->bytes, &off, &len);
        for (int j = 0; j < co->n; j++)
            if (j != co->rank) memcpy(rb + (size_t)j * co->bytes + off, slot_of(co, j, co->t), len);
        own_block(co, off, off, len);
        return 0;
    case COHORT_TP_BROADCAST:
        if (co->rank != a->root && co->sb) {
            memcpy(rb, sb_data(co, a->root, co->t, co->bytes), co->bytes);
            /* the root is often ahead: fetch its entry after next while this one is handled */
            __builtin_prefetch(sb_of(co, a->root, co->t + 2));
        } else if (co->rank != a->root) {
            span(co, co->bytes, &off, &len);
            memcpy(rb + off, slot_of(co, a->root, co->t), len);
        }
        return 0;
    default:
        return 0;
    }
}

static void copy_result(shm_coll_t *co)
{
    const cohort_tp_coll_args_t *a = &co->a;
    if (a->coll == COHORT_TP_REDUCE && co->rank != a->root) return;
    size_t off, len;
    span(co, co->bytes, &off, &len);
    /* the reduced slices we copy out: between two ranks the peer's, where it put it */
    unsigned char *rb = (unsigned char *)a->recvbuf + off, *res = result_of(co, 1 - co->rank);
    if (a->coll == COHORT_TP_REDUCE) {
        memcpy(rb, res, len);
        return;
    }
    size_t at, slen;   /* allreduce: our own slice is in recvbuf already */
    coll_my_slice(co, len, &at, &slen);
    memcpy(rb, res, at);
    memcpy(rb + at + slen, res + at + slen, len - at - slen);
}

/* Compares the tags and histories of the ranks that we saw start step t: every rank, or in a
 * small broadcast only its root (which itself compares nothing). */
static cohort_status_t check_tags(shm_coll_t *co)
{
    uint64_t mine = co->a.tag;
    if (co->sb && co->rank == co->a.root) return COHORT_SUCCESS;
    for (int j = 0; j < co->n; j++) {
        if (j == co->rank || (co->sb && j != co->a.root)) continue;
        /* rank j's step t ran in the small lane if its entry for t says so (it is not rewritten
         * while we are at step t) */
        const sb_hdr_t *e = sb_of(co, j, co->t);
        int small = atomic_load_explicit(&e->step, memory_order_acquire) == co->t;
        uint64_t theirs = small ? e->tag : co->ctl[j].tag[co->t % SHM_COLL_NSLOTS];
        uint64_t chain = atomic_load_explicit(small ? &e->chain
                                              : &co->ctl[j].chain[co->t % SHM_COLL_NSLOTS],
                                              memory_order_relaxed);   /* after step/in's acquire */
        /* a step in the lane says which collective it is (a staged one only its tag) */
        int kind = small ? (int)e->coll : -1;
        if (theirs != mine || ((co->sb || co->fb) && !small))
            return co->host->error(COHORT_ERR_MISMATCH, "shm: rank %d is in %s #%llu (tag "
                                   "%016llx) but rank %d started %s #%llu with a "
                                   "different signature (tag %016llx%s): the ranks called "
                                   "different collectives, counts, dtypes, ops or roots",
                                   co->rank, coll_name(co->a.coll),
                                   (unsigned long long)(mine >> 32), (unsigned long long)mine,
                                   j, kind >= 0 ? coll_name(kind) : "collective",
                                   (unsigned long long)(theirs >> 32),
                                   (unsigned long long)theirs,
                                   co->sb && kind != COHORT_TP_BROADCAST
                                       ? ", not a broadcast from it" : "");
        if (chain != co->chain)
            return co->host->error(COHORT_ERR_MISMATCH, "shm: rank %d is in %s #%llu like rank "
                                   "%d, but their earlier collectives differ: a broadcast of at "
                                   "most %zu bytes had another root, count or dtype on some "
                                   "ranks (its root does not wait for the others, so this "
                                   "shows only now)", co->rank, coll_name(co->a.coll),
                                   (unsigned long long)(mine >> 32), j, co->sb_max);
    }
    return COHORT_SUCCESS;
}

static int next_round(shm_coll_t *co)
{
    if (++co->r >= co->nrounds) {
        co->active = 0;
        measured(co);
        return 0;
    }
    co->t = ++co->step;
    co->phase = PH_A;
    return 1;
}

cohort_status_t shm_coll_advance(shm_coll_t *co, int *moved, int *waiting_on)
{
    *moved = 0;
    *waiting_on = -1;
    if (!co->active) return COHORT_SUCCESS;
    for (;;) {
        int which = CT_IN, only = -1;
        uint64_t t = 0;
        co->wait_peer = -1;
        int waits = wait_cond(co, &which, &t, &only);
        if (waits && !reached(co, which, t, only)) {
            *waiting_on = co->wait_peer;
            if (*moved) {
                co->idle = 0;
            } else if (++co->idle % LIVE_EVERY == 0) {
                int peer = co->wait_peer;
                cohort_status_t st = co->hooks.peer_check(co->hooks.ep, peer, 0);
                /* A peer that published what we wait for and then closed or exited is not
                 * lost for this step: its publication came before its close, so look again
                 * (and say nothing: the log would show a loss that did not happen). */
                if (st && !reached(co, which, t, only)) {
                    co->active = 0;
                    co->broken = 1;
                    st = co->hooks.peer_check(co->hooks.ep, peer, 1);
                    return st ? st : co->host->error(COHORT_ERR_PEER_LOST, "shm: rank %d left "
                                                     "the node collective", peer);
                }
                if (st) continue;
            }
            return COHORT_IN_PROGRESS;
        }
        *moved = 1;
        if (waits && only < 0) {   /* every rank reached t: remember what that implies */
            uint64_t k = which == CT_OUT ? t : t - 1;
            if (k > co->known_out) co->known_out = k;
        }
        switch (co->phase) {
        case PH_A:
            stage(co);
            publish(co, co->sb || co->fb ? CT_SB : CT_IN, co->t);
            if (co->cma && co->a.coll == COHORT_TP_ALLGATHER)
                own_block(co, 0, 0, co->bytes);   /* while the peers start reading ours */
            co->phase = PH_B;
            break;
        case PH_B:
            if (co->r == 0) {
                cohort_status_t st = check_tags(co);
                int restart = 0;
                if (!st && co->map_try) st = coll_decide_map(co, &restart);
                if (st) {
                    if (coll_sb_lent(co)) publish(co, CT_OUT, co->t);
                    co->active = 0;
                    co->broken = 1;
                    return st;
                }
                if (restart) {   /* nothing was read in this step: all start over, staged */
                    publish(co, CT_OUT, co->t);
                    co->t = ++co->step;
                    co->phase = PH_A;
                    break;
                }
            }
            if (coll_sb_lent(co)) {
                cohort_status_t st = coll_sb_borrow(co);
                publish(co, CT_OUT, co->t);
                if (st) {
                    co->active = 0;
                    co->broken = 1;
                    return st;
                }
                if (!next_round(co)) return COHORT_SUCCESS;
            } else if (co->map) {
                int more = coll_compute_map(co);
                publish(co, more ? CT_RED : CT_OUT, co->t);
                if (more) co->phase = PH_C;
                else if (co->a.coll != COHORT_TP_BROADCAST || co->rank == co->a.root)
                    co->phase = PH_D;   /* owners wait for every reader of their buffers */
                else if (!next_round(co))
                    return COHORT_SUCCESS;
            } else if (co->cma) {
                cohort_status_t st = compute_cma(co);
                if (st) {
                    co->active = 0;
                    co->broken = 1;
                    return st;
                }
                publish(co, CT_OUT, co->t);
                co->phase = PH_D;   /* every rank's block was read: wait for its readers */
            } else if (compute(co)) {
                publish(co, CT_RED, co->t);
                co->phase = PH_C;
            } else {
                /* in the lane nobody waits for our out, unless we lent our buffer */
                if (!(co->sb || co->fb) || co->sb_lend) publish(co, CT_OUT, co->t);
                if (co->sb_lend) co->phase = PH_D;   /* our buffer is lent: wait for its readers */
                else if (!next_round(co)) return COHORT_SUCCESS;
            }
            break;
        case PH_C:
            if (!co->map) copy_result(co);   /* mapped: every rank wrote its slice into ours */

            publish(co, CT_OUT, co->t);
            if (!next_round(co)) return COHORT_SUCCESS;
            break;
        default:   /* PH_D: the readers are done with our buffer */
            if (!next_round(co)) return COHORT_SUCCESS;
            break;
        }
    }
}

void shm_coll_arm(shm_coll_t *co)
{
    atomic_store_explicit(&co->ctl[co->rank].armed, 1, memory_order_seq_cst);
}

void shm_coll_disarm(shm_coll_t *co)
{
    atomic_store_explicit(&co->ctl[co->rank].armed, 0, memory_order_relaxed);
}

int shm_coll_movable(const shm_coll_t *co)
{
    if (!co->active) return 0;
    int which, only;
    uint64_t t;
    if (!wait_cond(co, &which, &t, &only)) return 1;
    if (only >= 0) return load_ct(co, only, which, t) >= t;
    for (int j = 0; j < co->n; j++)
        if (j != co->rank && load_ct(co, j, which, t) < t) return 0;
    return 1;
}

