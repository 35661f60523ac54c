/* SPDX-License-Identifier: BSD-3-Clause */
/* Node collectives in shared memory, private to coll*.c: the constants, the layout of the
 * collective area (header, control lines, small-lane entries), the state of an endpoint's
 * collectives (struct shm_coll), the small lane's accessors, and the functions that the engine
 * (coll.c), the small-broadcast lane (coll_sb.c), mapped mode (coll_map.c) and the check at
 * close (coll_fin.c) call across files. The protocol is described at the top of coll.c.
 */
#ifndef COHORT_SHM_COLL_INT_H
#define COHORT_SHM_COLL_INT_H

#include <cohort/plugin.h>
#include "coll.h"

#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define AREA_MAGIC 0x636f686f7274434cull   /* "cohortCL" */
#define AREA_VERSION 6u           /* 6: steps in the small lane publish their entry, not in */
#define AREA_PAGE ((size_t)4096)
#define LINE 64
#define DIRECT_MAX ((size_t)16 << 10)       /* allreduce/reduce up to this: one round */
#define FB_MAX DIRECT_MAX                   /* allreduces up to this (and coll_sb_max(n)):
                                               one step in the small lane */
#define LIVE_EVERY 32u                     /* fruitless advances between peer checks */
#define CMA_MIN ((size_t)32 << 10)          /* allgather blocks from this size by single copy... */
#define CMA_AG_MAX ((size_t)4 << 20)        /* ...up to this (larger: staged) */
#define MAP_MIN ((size_t)32 << 10)          /* mapped mode from this many bytes per buffer */
#define MAP_PIECE ((size_t)64 << 10)       /* mapped allreduce: reduce, then copy out, by this */
#define MAP_CACHE 32                        /* peers' blocks an endpoint keeps mapped (at least) */
#define MAP_GRAIN ((size_t)2 << 20)          /* a peer's block is prefaulted by this much */
#define PROBE_MAGIC 0x636f686f72745042ull   /* "cohortPB" ^ pid, in each rank's probe memfd */
#define SB_MAX ((size_t)64 << 10)           /* broadcasts up to this take the small lane... */
#define SB_MAX_LOW ((size_t)4 << 10)        /* ...or, with many ranks, down to this: */
#define SB_BUDGET ((size_t)8 << 20)         /* the lane's data, all ranks (n <= 32) */
#define SB_DEPTH 64u                        /* small broadcasts a root may run ahead */
#define SB_HDR 32                           /* an entry's header; its line holds up to */
#define SB_INLINE (LINE - SB_HDR)           /* this many bytes of data, the rest go apart */
#define SB_STREAM_MIN ((size_t)4 << 10)     /* a root writes this much or more with stream_copy */
#define ADAPT_MIN ((size_t)64 << 10)        /* staged collectives this large pick stores */
#define ADAPT_CLASSES 12                    /* by size class: 64 KiB, 128 KiB, ..., 64 MiB and up */
#define ADAPT_WARM 4u                       /* the first collectives of a class try both in turn */
#define ADAPT_PROBE 32u                     /* then every this many try the other kind */
#define ADAPT_KEEP 4                        /* measurements kept per kind (the least counts) */

enum { M_MAPPED = 1u };
enum { FIN_NONE = 0u, FIN_DONE = 1u, FIN_BROKEN = 2u };   /* rank_ctl_t.fin */
#define FIN_NO_COLL 0xffu                   /* fin_coll of a rank that ran no collective */

typedef struct area_hdr {
    uint64_t magic;
    uint32_t version, nranks, nslots, pad;
    uint64_t round;
} area_hdr_t;

typedef struct rank_ctl {
    alignas(LINE) _Atomic uint64_t in;
    _Atomic uint64_t red, out;
    uint64_t tag[SHM_COLL_NSLOTS];
    uint64_t addr;                 /* single-copy mode: the buffer peers read (set before in) */
    alignas(LINE) _Atomic uint32_t armed;
    _Atomic uint32_t caps;         /* 1 + (1: it can read every peer by CMA), set at creation */
    _Atomic uint32_t mapcap;       /* 0 not known yet, 1 it cannot map every peer, 2 it can */
    /* mapped mode */
    alignas(LINE) int32_t pid;     /* set at creation, like probe_fd */
    int32_t probe_fd;              /* a memfd the peers open to see whether they can map ours */
    uint8_t mflags[SHM_COLL_NSLOTS]; /* first round of a collective that may map: M_* (per slot,
                                      like tag: a rank may start the next collective while a
                                      slower one still reads these) */
    int32_t sfd, rfd;              /* M_MAPPED: the memfds of sendbuf and recvbuf (-1: none);
                                      with the ids and offsets, read only when every rank set
                                      M_MAPPED, and then nobody leaves before all read them */
    uint64_t sid, soff, rid, roff; /* their blocks' ids and the buffers' offsets in them */
    /* the history of each slot's collective (with its tag): see chain_step. Atomic, accessed
     * relaxed (plain moves, as before: in and the entries' step order them), because
     * shm_coll_finish may read a slot that a peer which ran ahead of it is rewriting. */
    alignas(LINE) _Atomic uint64_t chain[SHM_COLL_NSLOTS];
    /* written once, at close (shm_coll_finish), for the peers that close after this rank: its
     * history and its last collective (number, kind, count, dtype, op, root), then fin */
    _Atomic uint32_t fin;          /* FIN_*: stored last (seq_cst: a sleeping peer is woken) */
    uint32_t fin_seq;              /* tag >> 32 */
    uint8_t fin_coll, fin_dtype, fin_op, fin_pad;   /* fin_coll FIN_NO_COLL: it ran none */
    int32_t fin_root;
    uint64_t fin_count, fin_chain;
} rank_ctl_t;

_Static_assert(sizeof(rank_ctl_t) == 4 * LINE, "four cache lines per rank");
_Static_assert(offsetof(rank_ctl_t, chain) == 3 * LINE &&
               offsetof(rank_ctl_t, fin_chain) + sizeof(uint64_t) == 4 * LINE,
               "the fin record fills the history line after the slots' histories");

/* A small-lane entry's header (each rank has SB_DEPTH, used by step % SB_DEPTH): written by
 * its rank in phase A of a step in the lane; the data follows it (sb_data): a small
 * broadcast's root's, or each rank's own input of a small allreduce. */
typedef struct sb_hdr {
    _Atomic uint64_t step;         /* stored last (seq_cst, then the peers' armed flags are
                                      loaded): the entry is for this step */
    uint64_t tag;
    _Atomic uint64_t chain;        /* relaxed, as rank_ctl_t.chain (and for the same reason) */
    uint32_t lend;                 /* 1: the data is not here, read the root's buffer in place
                                      (rfd, rid, roff of its control line) */
    uint32_t coll;                 /* the collective (COHORT_TP_*), for the messages */
} sb_hdr_t;

_Static_assert(sizeof(sb_hdr_t) == SB_HDR, "small-lane header");

/* What one collective's size class measured when staged with each kind of store (memcpy or
 * stream_copy into the slots): ns per KiB of the last ADAPT_KEEP collectives with each. */
typedef struct adapt {
    double ns_kib[2][ADAPT_KEEP];
    uint32_t runs, got[2];
} adapt_t;

typedef struct map_ent {
    int pid, rw;                   /* rw: mapped writable */
    uint64_t id;                   /* 0: free */
    unsigned char *base;
    size_t len;
    uint64_t used;
    uint64_t *faulted;             /* a bit per MAP_GRAIN of the block: its page tables were
                                      filled in (NULL: no memory for the bits; pages fault) */
} map_ent_t;

enum { PH_A, PH_B, PH_C, PH_D };

struct shm_coll {
    const cohort_host_v1_t *host;
    shm_coll_hooks_t hooks;
    int rank, n;
    size_t round;
    rank_ctl_t *ctl;
    unsigned char *small, *stage, *res;
    uint64_t chain;                /* chain_step of every collective this rank started */
    uint64_t step;                 /* last step this rank started */
    uint64_t known_out;            /* every rank's out is known to be >= this (a rank publishes
                                      in = t or red = t only after out = t - 1) */
    int broken;
    int fin_pub;                   /* shm_coll_finish published our fin */
    uint64_t fin_t0;               /* ... at this time */
    /* the collective in flight */
    int active;
    cohort_tp_coll_args_t a;
    size_t esize, bytes;           /* bytes: per block for the blocked collectives */
    size_t unit;                   /* bytes per block per round */
    size_t nrounds, r;
    uint64_t t;
    int phase, direct, cma;
    int sb;                        /* a small broadcast: one step in the small lane */
    int fb;                        /* an allreduce of at most FB_MAX bytes (and sb_max) or a
                                      barrier: one step in the small lane, every rank's data in
                                      its entry (its line up to SB_INLINE bytes, else apart) */
    int sb_lend;                   /* its root lends its buffer (and waits for the readers) */
    size_t sb_max;                 /* coll_sb_max(n) */
    int all_cma;                   /* -1 unknown; else whether EVERY rank can read its peers */
    unsigned idle;
    int wait_peer;
    /* mapped mode */
    int probe_fd;                  /* ours (-1: none) */
    int can_map;                   /* -1 untested; else whether we could map every peer's probe */
    int map_try;                   /* this collective's first round decides mapped or staged */
    int map_mine;                  /* we published our buffers instead of staging */
    int map;                       /* mapped mode chosen */
    int map_d;                     /* mapped mode with a phase D: the peers read our buffers
                                      (allreduce: they write theirs, and we wait for red) */
    int map_said;                  /* logged: 1 mapped mode ran, 2 a mix fell back, 4 a
                                      small broadcast's root lent its buffer */
    const unsigned char **psend;   /* the peers' send buffers, mapped (NULL: not needed) */
    unsigned char **precv;         /* their receive buffers (allreduce by slices: writable) */
    const unsigned char **srcs;    /* scratch: each rank's input of a reduction */
    map_ent_t *cache;
    int ncache;
    int prefault;                  /* 0 once madvise(MADV_POPULATE_*) said EINVAL (Linux < 5.14) */
    uint64_t clock;
    /* stores into the staging and result slots of staged collectives (hooks.stream) */
    int stream;                    /* this collective's: 1 stream_copy, 0 memcpy */
    int adapt_cls;                 /* its size class, -1: not measured */
    uint64_t t0;                   /* when it started */
    adapt_t adapt[COHORT_TP_BARRIER + 1][ADAPT_CLASSES];   /* per collective and size */
};

/* Rank's small-lane entry for step t: the lines of consecutive entries are adjacent (a reader
 * that is behind finds the next ones prefetched), their data of more than SB_INLINE bytes in
 * the part after all lines. */
static inline sb_hdr_t *sb_of(const shm_coll_t *co, int rank, uint64_t t)
{
    size_t i = (size_t)rank * SB_DEPTH + (size_t)(t % SB_DEPTH);
    return (sb_hdr_t *)(void *)(co->small + i * LINE);
}

static inline unsigned char *sb_data(const shm_coll_t *co, int rank, uint64_t t, size_t len)
{
    size_t i = (size_t)rank * SB_DEPTH + (size_t)(t % SB_DEPTH);
    if (len <= SB_INLINE) return co->small + i * LINE + SB_HDR;
    return co->small + (size_t)co->n * SB_DEPTH * LINE + i * co->sb_max;
}

/* coll.c: the engine */
const char *coll_name(int c);
int coll_started(const shm_coll_t *co, int j, uint64_t t);
void coll_reduce_from(shm_coll_t *co, void *out, const void *own,
                      const unsigned char *const *src, size_t at, size_t len);
void coll_my_slice(const shm_coll_t *co, size_t len, size_t *at, size_t *slen);

/* coll_sb.c: the small-broadcast lane */
size_t coll_sb_max(int n);
size_t coll_small_bytes(int n);
int coll_sb_lend_mine(shm_coll_t *co);
cohort_status_t coll_sb_borrow(shm_coll_t *co);
int coll_sb_lent(shm_coll_t *co);

/* coll_map.c: mapped mode */
void coll_unmap(map_ent_t *e);
unsigned char *coll_map_peer(shm_coll_t *co, int j, int fd, uint64_t id, uint64_t off,
                             size_t len, int rw);
int coll_describe_bufs(shm_coll_t *co);
int coll_can_map_all(shm_coll_t *co);
int coll_describe_mine(shm_coll_t *co);
cohort_status_t coll_decide_map(shm_coll_t *co, int *restart);
int coll_compute_map(shm_coll_t *co);

#endif
