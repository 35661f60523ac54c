/* SPDX-License-Identifier: BSD-3-Clause */
/* The communicator: its ranks, its transports' endpoints and connections, its state. */
#ifndef COHORT_CORE_COMM_H
#define COHORT_CORE_COMM_H

#include <stdatomic.h>
#include <stdint.h>
#include "cohort/cohort.h"
#include "core/bootstrap.h"
#include "core/parse.h"
#include "core/plugin_loader.h"
#include "core/rendezvous.h"

#define COHORT_COMM_MAGIC 0x434f484f5254434dull   /* "COHORTCM" */
#define COHORT_COMM_DEAD 0xdeaddeaddeaddeadull

typedef struct cohort_peer {
    int plugin;                 /* index into comm->plugins; -1 for self */
    cohort_tp_conn_t conn;
    char host[64];              /* for messages */
} cohort_peer_t;

struct cohort_comm {
    uint64_t magic;
    int rank, nranks;
    int local_rank, local_size, node_count;
    uint64_t comm_id;
    uint32_t nsplits;

    /* the collective in progress */
    uint64_t seq;
    uint64_t tag;
    const struct cohort_coll_args *cur;  /* arguments of the collective in progress */
    char desc[192];                      /* formatted from cur on demand (error paths only) */
    _Atomic(const char *) last_algo;     /* written by whichever thread runs the collective
                                            (relaxed: it points to a constant string) */

    cohort_plugin_t *const *plugins;    /* the process-wide set (a reference is held) */
    int nplugins;
    cohort_tp_ep_t *eps;                 /* per plugin; NULL when not opened */
    cohort_peer_t *peers;
    cohort_rdv_server_t *server;         /* rank 0 hosting the rendezvous */
    int coll_plugin;                     /* plugin running collectives itself (every peer uses
                                            it and it has an ABI 1.1 coll table); -1: none */
    unsigned coll_mask;                  /* its collectives: 1u << cohort_coll_t */

    /* The job's shape (core/jobtopo.h): ring order of the ring algorithms, node of each rank */
    int *ring;                           /* ring[pos] = rank; NULL: rank order */
    int ring_pos;
    int *node_of, *local_of;             /* per rank: node index, rank within its node */
    /* Hierarchy (the core/coll hier algorithms): this rank's node and its peers of the same local rank on
     * the other nodes, as communicators of their own; NULL when not hierarchical. */
    struct cohort_comm *hier_node, *hier_cross;
    /* On those two: the communicator they serve. Its failure, announced by another rank, ends
     * their waits too (they run inside its collective: a rank that failed it before joining a
     * node collective would otherwise leave the others there until COHORT_TIMEOUT). */
    struct cohort_comm *hier_parent;
    int hier_mode;                       /* COHORT_HIER_* */
    int hier_even;                       /* every node has the same number of ranks */

    int oversubscribed;                  /* more ranks on this node than cores we may run on (or,
                                            once a progress thread runs, more ranks x 2) */
    int cpu_sharing, cpus;               /* the ranks sharing this rank's cores, and the cores */
    unsigned spin;                       /* COHORT_SPIN: fruitless polls before sleeping */
    uint64_t spin_ns;                    /* COHORT_SPIN_US: and this long, unless oversubscribed */
    double timeout_s;
    int timeout_given;                   /* timeout_s is its own: cohort_comm_init_oob_timeout,
                                            cohort_comm_set_timeout, or its parent's */
    size_t chunk;
    cohort_algo_spec_t algo_spec;
    void *scratch[2];
    size_t scratch_len[2];

    int *world_of;                       /* per rank: its rank in that job (jobctl.h); NULL when
                                            not known (cohort_comm_init_oob) */
    unsigned jobctl_seen;                /* failures of the job already looked at */
    int owns_ctl;                        /* it attached the job's control channel (jobctl.h) */
    int fail_peer;                       /* the peer of the request that failed last, or -1 */
    double stall_warn_s;                 /* COHORT_STALL_WARN (0: off) */
    char abort_line[160];                /* logged by cohort_comm_abort with write(2) */
    atomic_int aborted;
    atomic_int busy;                     /* a collective or split is running on it (calls on one
                                            communicator must not overlap: refused, not raced) */
    cohort_status_t broken;              /* non-zero after a failed collective */
    char broken_msg[512];

    /* The agreement tokens of core/p2p.c: a ring of tok_cap (at most COHORT_P2P_TOKENS),
     * allocated at the first collective over p2p; tok_count of them from tok_head are not yet
     * confirmed. */
    struct cohort_token **tokens;
    unsigned tok_head, tok_count, tok_cap;
    uint64_t tok_seq;                    /* the last collective whose first post looked at
                                            tokens (and sent one where it needs one) */

    struct cohort_engine *engine;        /* the non-blocking calls' queue (core/engine.h);
                                            NULL until the first one */
    int tl_track;                        /* COHORT_TIMELINE: its first track (core/timeline.h);
                                            0: no timeline */
    int compress;                        /* COHORT_COMPRESS / cohort_comm_set_compression: the
                                            wire dtype of float32 SUM/AVG allreduces across
                                            nodes (COHORT_FLOAT16, COHORT_BFLOAT16), 0: none */
    char next_name[COHORT_NAME_MAX];     /* cohort_comm_name_next: the next call's name ("") */
};

/* "allreduce #12 (count 1000, float32, sum, root -1)": the collective in progress, for messages. */
const char *cohort_comm_desc(cohort_comm_t *comm);
/* What a timeout message tells the user to change: "COHORT_TIMEOUT", or the communicator's own
 * timeout (cohort_comm_init_oob_timeout or cohort_comm_set_timeout, inherited by its splits). */
const char *cohort_comm_timeout_source(const cohort_comm_t *comm);

/* Validates a communicator handle from the user (NULL, destroyed). */
cohort_status_t cohort_comm_check(const cohort_comm_t *comm, const char *fn);

/* Marks comm busy for a call of fn (a collective, a split); COHORT_ERR_INVALID_ARG if another
 * call holds it. Pair with cohort_comm_release. */
cohort_status_t cohort_comm_acquire(cohort_comm_t *comm, const char *fn);
void cohort_comm_release(cohort_comm_t *comm);

/* cohort_allgather for the core's own exchanges over comm (split's bootstrap): the caller already
 * holds comm (or owns it alone), so the busy mark is neither checked nor taken. */
cohort_status_t cohort_comm_allgather_held(cohort_comm_t *comm, const void *sendbuf,
                                           void *recvbuf, size_t sendcount, cohort_dtype_t dtype);

#endif
