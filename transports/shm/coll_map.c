/* SPDX-License-Identifier: BSD-3-Clause */
/* Node collectives in shared memory: mapped mode. Probing whether this rank can map its peers'
 * cohort_mem_alloc blocks (through /proc/<pid>/fd), mapping and caching them, describing this
 * rank's buffers in its control line, and phase B of a collective's first round that decides
 * between the mapped round and the staged ones, then computes straight from the peers' buffers.
 * The protocol is described at the top of coll.c.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cohort/plugin.h>
#include "coll_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- mapped mode: the peers' blocks ------------------------------------------------------- */

/* Opens /proc/<pid>/fd/<fd> (rw: read-write, else read-only) after checking that it is the
 * memfd called `expect`; -1 with the reason in why. */
#define WHY_LEN 320
static int open_peer_fd(int pid, int fd, const char *expect, char why[WHY_LEN], int rw)
{
    const size_t whylen = WHY_LEN;
    char path[64], link[160], want[96];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", pid, fd);
    ssize_t n = readlink(path, link, sizeof link - 1);
    if (n < 0) {
        snprintf(why, whylen, "%s: %s", path, strerror(errno));
        return -1;
    }
    link[n] = 0;
    snprintf(want, sizeof want, "/memfd:%s (deleted)", expect);
    if (strcmp(link, want)) {
        snprintf(why, whylen, "%s is %.100s, not %.100s", path, link, want);
        return -1;
    }
    int f = open(path, (rw ? O_RDWR : O_RDONLY) | O_CLOEXEC);
    if (f < 0) snprintf(why, whylen, "opening %s: %s", path, strerror(errno));
    return f;
}

/* 1 if this rank can map every peer's probe memfd (so, their cohort_mem_alloc blocks). Once per
 * endpoint; says why not in the log. */
static int probe_peers(shm_coll_t *co)
{
    for (int j = 0; j < co->n; j++) {
        if (j == co->rank) continue;
        int pid = co->ctl[j].pid, pfd = co->ctl[j].probe_fd;
        char name[48], why[WHY_LEN] = "";
        snprintf(name, sizeof name, "cohort-probe-%d", pid);
        int ok = 0;
        if (pfd < 0) {
            snprintf(why, sizeof why, "it published no probe (COHORT_SHM_MAP=0 there, or "
                     "memfd_create failed)");
        } else {
            int fd = open_peer_fd(pid, pfd, name, why, 0);
            if (fd >= 0) {
                void *p = mmap(NULL, AREA_PAGE, PROT_READ, MAP_SHARED, fd, 0);
                if (p == MAP_FAILED) {
                    snprintf(why, sizeof why, "mmap of its probe: %s", strerror(errno));
                } else {
                    ok = *(const volatile uint64_t *)p == (PROBE_MAGIC ^ (uint64_t)pid);
                    if (!ok) snprintf(why, sizeof why, "its probe reads wrong");
                    munmap(p, AREA_PAGE);
                }
                close(fd);
            }
        }
        if (!ok) {
            co->host->log(COHORT_LOG_INFO, "shm", "shm: rank %d cannot map the memory of rank %d "
                          "(pid %d): %s. Collectives on cohort_mem_alloc buffers copy through "
                          "the staging slots instead (ranks in different pid namespaces or "
                          "under other users cannot open each other's /proc/<pid>/fd)", co->rank,
                          j, pid, why);
            return 0;
        }
    }
    return 1;
}

void coll_unmap(map_ent_t *e)
{
    munmap(e->base, e->len);
    free(e->faulted);
    *e = (map_ent_t){ 0 };
}

/* Fills in the page tables of [off, off + len) of a peer's block, MAP_GRAIN by MAP_GRAIN, once
 * per grain: a mapping faults at the first touch of each 4 KiB, and a collective that reaches a
 * part of a block not used before would take those faults one by one inside its copies; one
 * madvise per run of grains fills the same entries without them (docs/performance-log.md, Intel
 * Xeon sitting of 2026-11-27). Grains, not the whole block: a block of gigabytes of which a
 * collective uses a megabyte is not faulted in whole, again each time it comes back into the
 * cache. Best effort: where it fails, the pages fault as before; where the kernel lacks
 * MADV_POPULATE_* (Linux < 5.14), it is not tried again. */
static void prefault(shm_coll_t *co, map_ent_t *e, uint64_t off, size_t len)
{
    if (!co->prefault || !e->faulted || !len) return;
    size_t g = (size_t)(off / MAP_GRAIN), end = (size_t)((off + len - 1) / MAP_GRAIN) + 1;
    while (g < end) {
        if (e->faulted[g / 64] >> (g % 64) & 1) {
            g++;
            continue;
        }
        size_t run = g;
        while (run < end && !(e->faulted[run / 64] >> (run % 64) & 1)) {
            e->faulted[run / 64] |= (uint64_t)1 << (run % 64);
            run++;
        }
        size_t from = g * MAP_GRAIN, to = run * MAP_GRAIN < e->len ? run * MAP_GRAIN : e->len;
        if (madvise(e->base + from, to - from, e->rw ? MADV_POPULATE_WRITE
                                                     : MADV_POPULATE_READ) < 0) {
            int e0 = errno;
            if (e0 == EINVAL) co->prefault = 0;   /* said once: not tried again */
            co->host->log(e0 == EINVAL ? COHORT_LOG_INFO : COHORT_LOG_TRACE, "shm", "shm: rank "
                          "%d: prefaulting %zu bytes of a peer's block with madvise failed "
                          "(%s); its pages fault on first touch instead", co->rank, to - from,
                          strerror(e0));
            if (!co->prefault) return;
        }
        g = run;
    }
}

/* Rank j's block (fd, id), mapped here (cached; rw: writable): the address of offset off, after
 * checking that len bytes from there lie in the block (and with their page tables filled in).
 * NULL after host->error. */
unsigned char *coll_map_peer(shm_coll_t *co, int j, int fd, uint64_t id, uint64_t off,
                             size_t len, int rw)
{
    int pid = co->ctl[j].pid;
    map_ent_t *e = NULL, *victim = NULL;
    for (int i = 0; i < co->ncache && !e; i++) {
        map_ent_t *c = &co->cache[i];
        if (c->id == id && c->pid == pid) {
            if (c->rw || !rw) e = c;
            else victim = c;   /* read-only so far: map it again, writable */
            if (!e) break;
        } else if (!victim || (victim->id && (!c->id || c->used < victim->used))) {
            victim = c;
        }
    }
    char name[64], why[WHY_LEN] = "";
    snprintf(name, sizeof name, "cohort-mem-%d-%llu", pid, (unsigned long long)id);
    if (!e) {
        int f = open_peer_fd(pid, fd, name, why, rw);
        void *p = MAP_FAILED;
        struct stat st;
        if (f >= 0) {
            if (fstat(f, &st) < 0)
                snprintf(why, sizeof why, "fstat: %s", strerror(errno));
            else if ((p = mmap(NULL, (size_t)st.st_size, PROT_READ | (rw ? PROT_WRITE : 0),
                               MAP_SHARED, f, 0)) == MAP_FAILED)
                snprintf(why, sizeof why, "mmap of %lld bytes: %s", (long long)st.st_size,
                         strerror(errno));
            close(f);
        }
        if (p == MAP_FAILED) {
            co->host->error(COHORT_ERR_SYSTEM, "shm: rank %d cannot map the buffer of rank %d "
                            "(pid %d, block %s): %s. Keep cohort_mem_alloc buffers until the "
                            "collective returns on every rank; if descriptors or memory ran "
                            "out, raise ulimit -n or free blocks", co->rank, j, pid, name, why);
            return NULL;
        }
        if (victim->id) coll_unmap(victim);
        size_t grains = ((size_t)st.st_size + MAP_GRAIN - 1) / MAP_GRAIN;
        *victim = (map_ent_t){ pid, rw, id, p, (size_t)st.st_size, 0,
                               calloc((grains + 63) / 64, sizeof(uint64_t)) };
        e = victim;
    }
    if (off > e->len || len > e->len - off) {
        co->host->error(COHORT_ERR_SYSTEM, "shm: rank %d: rank %d's buffer (%zu bytes at offset "
                        "%llu) does not fit its block %s of %zu bytes", co->rank, j, len,
                        (unsigned long long)off, name, e->len);
        return NULL;
    }
    e->used = ++co->clock;
    prefault(co, e, off, len);
    return e->base + off;
}

/* Bytes of sendbuf and recvbuf a mapped collective reads from this rank (0: not read). */
static void map_lens(const shm_coll_t *co, int rank, size_t *sl, size_t *rl)
{
    const cohort_tp_coll_args_t *a = &co->a;
    *sl = *rl = 0;
    switch (a->coll) {
    case COHORT_TP_ALLREDUCE: *sl = *rl = co->bytes; break;
    case COHORT_TP_BROADCAST: if (rank == a->root) *rl = co->bytes; break;
    case COHORT_TP_ALLGATHER: *sl = co->bytes; break;
    case COHORT_TP_REDUCE_SCATTER: case COHORT_TP_ALLTOALL: *sl = co->bytes * (size_t)co->n; break;
    default: break;
    }
}

/* Describes in this rank's control line what its peers read of its buffers in place (map_lens),
 * if all of it lies in cohort_mem_alloc blocks (else 0). Peers read these fields only once the
 * collective says so (M_MAPPED, or a lent small broadcast), and the previous collective that
 * used them ended only after its readers were done. */
int coll_describe_bufs(shm_coll_t *co)
{
    const cohort_tp_coll_args_t *a = &co->a;
    const cohort_host_v1_t *h = co->host;
    size_t sl, rl;
    map_lens(co, co->rank, &sl, &rl);
    int sfd = -1, rfd = -1;
    uint64_t sid = 0, soff = 0, rid = 0, roff = 0;
    if (sl && !h->mem_shared(a->sendbuf, sl, &sfd, &sid, &soff)) return 0;
    if (rl && !h->mem_shared(a->recvbuf, rl, &rfd, &rid, &roff)) return 0;
    rank_ctl_t *c = &co->ctl[co->rank];
    c->sfd = sfd;
    c->rfd = rfd;
    c->sid = sid;
    c->soff = soff;
    c->rid = rid;
    c->roff = roff;
    return 1;
}

/* Whether this rank can map every peer's cohort_mem_alloc blocks (probed once per endpoint),
 * published for the roots of small broadcasts. */
int coll_can_map_all(shm_coll_t *co)
{
    if (co->can_map < 0) co->can_map = probe_peers(co);
    atomic_store_explicit(&co->ctl[co->rank].mapcap, co->can_map ? 2u : 1u, memory_order_release);
    return co->can_map;
}

/* Whether this rank's buffers of the collective being started can be read by its peers in
 * place (and it can map theirs); if so, describes them in its control line. A broadcast's other
 * ranks offer no buffer: for them this only says that they can map the root's. */
int coll_describe_mine(shm_coll_t *co)
{
    const cohort_tp_coll_args_t *a = &co->a;
    const cohort_host_v1_t *h = co->host;
    if (!COHORT_HAS_FIELD(h, cohort_host_v1_t, mem_shared) || !h->mem_shared) return 0;
    if (a->coll == COHORT_TP_ALLTOALL && a->sendbuf == (const void *)a->recvbuf)
        return 0;   /* we would overwrite blocks the peers still read */
    return coll_describe_bufs(co) && coll_can_map_all(co);
}

/* Every rank published M_MAPPED: map what this rank reads of its peers. */
static cohort_status_t map_peers(shm_coll_t *co)
{
    for (int j = 0; j < co->n; j++) {
        co->psend[j] = co->precv[j] = NULL;
        if (j == co->rank) continue;
        const rank_ctl_t *c = &co->ctl[j];
        size_t sl, rl;
        map_lens(co, j, &sl, &rl);
        int push = co->a.coll == COHORT_TP_ALLREDUCE;   /* we write our slice into theirs */
        /* receive buffer first: a writable mapping of a block serves reads too, while mapping
         * it writable after a read-only one would replace (unmap) that */
        if (rl && !(co->precv[j] = coll_map_peer(co, j, c->rfd, c->rid, c->roff, rl, push)))
            return COHORT_ERR_SYSTEM;
        if (sl && !(co->psend[j] = coll_map_peer(co, j, c->sfd, c->sid, c->soff, sl, 0)))
            return COHORT_ERR_SYSTEM;
    }
    return COHORT_SUCCESS;
}
/* Phase B of a collective's first round, when it may map: every rank's flag is in, so every rank
 * decides alike. *restart: this step carried no data (some ranks staged, others did not), and
 * the collective starts over, staged. */
cohort_status_t coll_decide_map(shm_coll_t *co, int *restart)
{
    /* any: a rank that stages in this collective (a broadcast's root; everyone otherwise) did
     * not, counting on the mapped round (a broadcast's other ranks only say they can map) */
    int all = 1, any = 0, plain = -1;
    for (int j = 0; j < co->n; j++) {
        unsigned f = co->ctl[j].mflags[co->t % SHM_COLL_NSLOTS];
        if (!(f & M_MAPPED)) all = 0, plain = plain < 0 ? j : plain;
        else if (co->a.coll != COHORT_TP_BROADCAST || j == co->a.root) any = 1;
    }
    *restart = 0;
    co->map_try = 0;
    if (any && !(co->map_said & (all ? 1 : 2))) {   /* once per endpoint and outcome */
        co->map_said |= all ? 1 : 2;
        if (all)
            co->host->log(COHORT_LOG_INFO, "shm", "shm: rank %d: node collectives read the "
                          "ranks' cohort_mem_alloc buffers in place (first: %s, %zu bytes)",
                          co->rank, coll_name(co->a.coll), co->bytes);
        else
            co->host->log(COHORT_LOG_INFO, "shm", "shm: rank %d: a %s of %zu bytes copies through "
                          "staging although some ranks' buffers come from cohort_mem_alloc: rank "
                          "%d's do not (or it cannot map its peers, or has COHORT_SHM_MAP=0); "
                          "in place needs every rank's", co->rank, coll_name(co->a.coll),
                          co->bytes, plain);
    }
    if (all) {
        co->map = 1;
        co->map_d = co->a.coll != COHORT_TP_ALLREDUCE;
        co->cma = 0;
        co->nrounds = 1;
        co->unit = co->bytes;
        return map_peers(co);
    }
    *restart = any && !co->cma;   /* in single-copy mode every rank published its address */
    co->map_mine = 0;
    return COHORT_SUCCESS;
}

/* Phase B in mapped mode: straight from the peers' buffers. Returns 1 when a phase C follows. */
int coll_compute_map(shm_coll_t *co)
{
    const cohort_tp_coll_args_t *a = &co->a;
    unsigned char *rb = a->recvbuf;
    const unsigned char *sb = a->sendbuf;
    size_t b = co->bytes;
    int me = co->rank;
    for (int j = 0; j < co->n; j++) co->srcs[j] = j == me ? sb : co->psend[j];
    switch (a->coll) {
    case COHORT_TP_ALLREDUCE:
        {   /* our slice, into our receive buffer and theirs, piece by piece: each piece is
             * copied out while it is still in this core's cache (64 MiB, np 2, in place:
             * 4.6-5.3 -> 2.6-2.8 ms; no change up to 16 MiB) */
            size_t at, slen;
            coll_my_slice(co, b, &at, &slen);
            for (size_t o = 0; o < slen; o += MAP_PIECE) {
                size_t l = slen - o < MAP_PIECE ? slen - o : MAP_PIECE;
                coll_reduce_from(co, rb + at + o, sb + at + o, co->srcs, at + o, l);
                for (int j = 0; j < co->n; j++)
                    if (j != me) memcpy(co->precv[j] + at + o, rb + at + o, l);
            }
            return 1;
        }
    case COHORT_TP_REDUCE_SCATTER:
        coll_reduce_from(co, rb, sb + (size_t)me * b, co->srcs, (size_t)me * b, b);
        return 0;
    case COHORT_TP_BROADCAST:
        if (me != a->root) memcpy(rb, co->precv[a->root], b);
        return 0;
    case COHORT_TP_ALLGATHER:
        for (int j = 0; j < co->n; j++)
            if (rb + (size_t)j * b != co->srcs[j]) memcpy(rb + (size_t)j * b, co->srcs[j], b);
        return 0;
    case COHORT_TP_ALLTOALL:
        for (int j = 0; j < co->n; j++)
            memcpy(rb + (size_t)j * b, co->srcs[j] + (size_t)me * b, b);
        return 0;
    default:
        return 0;
    }
}

