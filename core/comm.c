/* SPDX-License-Identifier: BSD-3-Clause */
/* The communicator's public entry points: cohort_comm_init (from the launcher's environment),
 * cohort_comm_init_oob (from the caller's allgather), split, abort, destroy and the queries;
 * the creation rounds are core/comm_create.c's. */
#include "core/comm.h"
#include "core/comm_create.h"
#include "core/engine.h"
#include "core/config.h"
#include "core/hmac.h"
#include "core/jobctl.h"
#include "core/launcher.h"
#include "core/log.h"
#include "core/p2p.h"
#include "core/timeline.h"
#include "core/timeutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SUBSYS "init"
/* How long cohort_comm_destroy waits for the rank before this one to confirm the last
 * collectives (core/p2p.h): it is normally there already, or about to be. */
#define DESTROY_CONFIRM_MS 2000
static uint64_t fnv1a(uint64_t h, const void *data, size_t len)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}

cohort_status_t cohort_comm_check(const cohort_comm_t *comm, const char *fn)
{
    if (!comm) return cohort_error(COHORT_ERR_INVALID_ARG, "%s: comm is NULL", fn);
    if (comm->magic == COHORT_COMM_DEAD)
        return cohort_error(COHORT_ERR_INVALID_ARG, "%s: comm was already destroyed", fn);
    if (comm->magic != COHORT_COMM_MAGIC)
        return cohort_error(COHORT_ERR_INVALID_ARG, "%s: comm is not a cohort communicator "
                            "(corrupt or uninitialised pointer)", fn);
    return COHORT_SUCCESS;
}

cohort_status_t cohort_comm_acquire(cohort_comm_t *comm, const char *fn)
{
    if (atomic_exchange(&comm->busy, 1))
        return cohort_error(COHORT_ERR_INVALID_ARG, "%s on rank %d: another call (a collective "
                            "or cohort_comm_split) is still running on this communicator in "
                            "another thread; calls on one communicator must not overlap: give "
                            "each thread a communicator of its own (cohort_comm_split)", fn,
                            comm->rank);
    return COHORT_SUCCESS;
}

void cohort_comm_release(cohort_comm_t *comm) { atomic_store(&comm->busy, 0); }

cohort_status_t cohort_comm_init(cohort_comm_t **comm)
{
    if (!comm) return cohort_error(COHORT_ERR_INVALID_ARG, "cohort_comm_init: comm is NULL");
    *comm = NULL;
    cohort_identity_t id;
    cohort_status_t st = cohort_identity_from_env(&id);
    if (st) return st;
    cohort_log_set_rank(id.rank);
    cohort_plugin_set_secret(id.secret, id.secretlen);
    cohort_comm_set_job_id(id.job_id);
    double timeout_s = 300;
    if ((st = cohort_config_table_double("COHORT_TIMEOUT", &timeout_s))) {
        cohort_pmix_finalize();   /* (only where the identity left PMIx initialized) */
        return st;
    }
    cohort_bootstrap_t *boot = NULL;
    cohort_rdv_server_t *server = NULL;
    if (id.nranks > 1) {
        st = cohort_bootstrap_rdv(&id, timeout_s, &boot, &server);
    } else {
        st = cohort_bootstrap_oob(0, 1, NULL, NULL, &boot);
    }
    if (st) return st;
    cohort_log(COHORT_LOG_INFO, "boot", "rank %d of %d (launcher %s, job %s, rendezvous %s)",
               id.rank, id.nranks, id.launcher, id.job_id, id.nranks > 1 ? id.rendezvous : "-");
    uint64_t comm_id = fnv1a(14695981039346656037ull, id.job_id, strlen(id.job_id));
    if (id.nranks == 1) {
        /* no exchange needed: the single-rank bootstrap never calls the OOB function */
        boot->close(boot);
        return cohort_comm_create_single(comm_id, 0, comm);
    }
    cohort_comm_t *dispose;
    st = cohort_comm_create(boot, 1, comm_id, id.rank, 1, 0, comm, &dispose);
    cohort_comm_destroy(dispose);
    if (st && boot->fail) boot->fail(boot, cohort_last_error());
    if (!st) {
        /* The rendezvous connection stays open as the job's control channel (jobctl.h); rank 0
         * keeps serving it when it hosts the server. */
        (*comm)->owns_ctl = 1;
        cohort_jobctl_attach(cohort_bootstrap_take_rdv(boot), server, id.rank,
                             id.external_server ? -1 : 0);
        server = NULL;
    }
    boot->close(boot);
    if (server) {
        /* Serve until every rank has its last answer and left (bounded), then free the port. */
        uint64_t deadline = cohort_now_ns() + (uint64_t)(timeout_s * 1e9);
        while (!st && !cohort_rdv_server_finished(server) && cohort_now_ns() < deadline) {
            struct timespec ts = { 0, 1000000 };
            nanosleep(&ts, NULL);
        }
        cohort_rdv_server_destroy(server);
    }
    return st;
}

static int oob_single(const void *s, void *r, size_t n, void *ctx)
{
    (void)ctx;
    memcpy(r, s, n);
    return 0;
}

cohort_status_t cohort_comm_init_oob(int rank, int nranks, cohort_oob_allgather_fn allgather,
                                     void *ctx, cohort_comm_t **comm)
{
    return cohort_comm_init_oob_timeout(rank, nranks, allgather, ctx, 0, comm);
}

cohort_status_t cohort_comm_init_oob_timeout(int rank, int nranks,
                                             cohort_oob_allgather_fn allgather, void *ctx,
                                             double timeout_s, cohort_comm_t **comm)
{
    if (!comm) return cohort_error(COHORT_ERR_INVALID_ARG, "cohort_comm_init_oob: comm is NULL");
    *comm = NULL;
    /* 0 comes only from cohort_comm_init_oob (COHORT_TIMEOUT); the range is COHORT_TIMEOUT's */
    if (!(timeout_s == 0 || (timeout_s >= 0.1 && timeout_s <= 1e7)))
        return cohort_error(COHORT_ERR_INVALID_ARG, "cohort_comm_init_oob_timeout: timeout_s %g "
                            "is not a number of seconds in [0.1, 1e7]", timeout_s);
    if (nranks < 1)
        return cohort_error(COHORT_ERR_INVALID_ARG, "cohort_comm_init_oob: nranks %d must be at "
                            "least 1", nranks);
    if (rank < 0 || rank >= nranks)
        return cohort_error(COHORT_ERR_INVALID_ARG, "cohort_comm_init_oob: rank %d is not in "
                            "[0, nranks=%d)", rank, nranks);
    if (!allgather && nranks > 1)
        return cohort_error(COHORT_ERR_INVALID_ARG, "cohort_comm_init_oob: allgather is NULL "
                            "with nranks %d (only a single rank may pass NULL)", nranks);
    cohort_log_set_rank(rank);
    /* Without a launcher secret, key connections by a fixed derivation: the OOB channel is the
     * caller's, so this only keeps strays out (docs/launching.md, "The secret"). */
    const char *sec = cohort_config_get("COHORT_SECRET");
    unsigned char derived[32];
    if (sec && *sec) cohort_plugin_set_secret(sec, strlen(sec));
    else {
        cohort_sha256("cohort-oob-secret", 17, derived);
        cohort_plugin_set_secret(derived, sizeof derived);
    }
    cohort_bootstrap_t *boot;
    cohort_status_t st = cohort_bootstrap_oob(rank, nranks, allgather ? allgather : oob_single,
                                              ctx, &boot);
    if (st) return st;
    /* The communicator id must agree on all ranks: exchange rank 0's random id. */
    uint64_t id = 0, *ids = calloc((size_t)nranks, sizeof *ids);
    if (!ids) {
        boot->close(boot);
        return cohort_error(COHORT_ERR_NO_MEMORY, "no memory");
    }
    if (rank == 0) id = fnv1a(14695981039346656037ull, &(uint64_t){ cohort_now_ns() }, 8) ^
                        (uint64_t)getpid();
    st = boot->allgather(boot, &id, ids, sizeof id);
    uint64_t comm_id = ids[0];
    free(ids);
    cohort_comm_t *dispose = NULL;
    if (!st) st = cohort_comm_create(boot, 1, comm_id, rank, 1, timeout_s, comm, &dispose);
    cohort_comm_destroy(dispose);
    boot->close(boot);
    return st;
}

static cohort_status_t split_held(cohort_comm_t *comm, int color, int key, cohort_comm_t **out);

cohort_status_t cohort_comm_split(cohort_comm_t *comm, int color, int key, cohort_comm_t **out)
{
    if (out) *out = NULL;   /* whatever fails below */
    cohort_status_t st = cohort_comm_check(comm, "cohort_comm_split");
    if (st) return st;
    if (!out) return cohort_error(COHORT_ERR_INVALID_ARG, "cohort_comm_split: out is NULL");
    if (cohort_engine_in_group(comm))
        return cohort_error(COHORT_ERR_INVALID_ARG, "cohort_comm_split on rank %d: called inside "
                            "a group (between cohort_group_start and cohort_group_end); split "
                            "before or after it", comm->rank);
    cohort_engine_drain(comm);   /* ordered after the outstanding non-blocking calls */
    if ((st = cohort_comm_acquire(comm, "cohort_comm_split"))) return st;
    st = split_held(comm, color, key, out);
    cohort_comm_release(comm);
    return st;
}

static cohort_status_t split_held(cohort_comm_t *comm, int color, int key, cohort_comm_t **out)
{
    cohort_status_t st;
    if (atomic_load(&comm->aborted))
        return cohort_error(COHORT_ERR_ABORTED, "cohort_comm_split on rank %d: the communicator "
                            "was aborted", comm->rank);
    if (comm->broken)
        return cohort_error(comm->broken, "cohort_comm_split: the communicator failed earlier "
                            "and cannot be used: %s", comm->broken_msg);
    comm->nsplits++;
    if (comm->nranks == 1) {
        if (color < 0) return COHORT_SUCCESS;
        return cohort_comm_create_single(comm->comm_id + comm->nsplits,
                                         comm->timeout_given ? comm->timeout_s : 0, out);
    }
    uint64_t h = fnv1a(comm->comm_id, &comm->nsplits, sizeof comm->nsplits);
    h = fnv1a(h, &color, sizeof color);
    cohort_bootstrap_t *boot;
    if ((st = cohort_bootstrap_comm(comm, &boot))) return st;
    int64_t k = (int64_t)key * (1 << 24) + comm->rank;   /* ties broken by parent rank */
    cohort_comm_t *dispose;
    st = cohort_comm_create(boot, color >= 0, h, k, 0, comm->timeout_given ? comm->timeout_s : 0,
                            out, &dispose);
    cohort_comm_destroy(dispose);
    boot->close(boot);
    if (!st && color < 0) *out = NULL;
    return st;
}

cohort_status_t cohort_comm_abort(cohort_comm_t *comm)
{
    cohort_status_t st = cohort_comm_check(comm, "cohort_comm_abort");
    if (st) return st;
    /* Async-signal-safe from here: atomics, one send() and write(). Every wait on comm checks
     * the flag at least every few milliseconds. */
    int first = !atomic_exchange(&comm->aborted, 1);
    if (comm->hier_node) atomic_store(&comm->hier_node->aborted, 1);
    if (comm->hier_cross) atomic_store(&comm->hier_cross->aborted, 1);
    if (first && comm->owns_ctl) cohort_jobctl_abort_notice();
    if (first && comm->abort_line[0]) {
        ssize_t w = write(STDERR_FILENO, comm->abort_line, strlen(comm->abort_line));
        (void)w;
    }
    return COHORT_SUCCESS;
}

/* Whether every rank of the job was told that comm failed (st: what destroy itself found): a
 * failure of these kinds goes to the job's control channel (cohort_jobctl_failure), when the
 * process has joined one. Then no rank waits for this one's closing words (ep_failed). */
static int failed_job_wide(cohort_comm_t *comm, cohort_status_t st)
{
    cohort_status_t f = comm->broken ? comm->broken : st;
    int r;
    return (f == COHORT_ERR_MISMATCH || f == COHORT_ERR_PEER_LOST || f == COHORT_ERR_TIMEOUT ||
            f == COHORT_ERR_TRANSPORT) && comm->world_of && cohort_jobctl_joined(&r);
}

cohort_status_t cohort_comm_destroy(cohort_comm_t *comm)
{
    if (!comm) return COHORT_SUCCESS;
    cohort_status_t st = cohort_comm_check(comm, "cohort_comm_destroy");
    if (st) return st;
    unsigned live = cohort_engine_live(comm);
    if (live)
        return cohort_error(COHORT_ERR_INVALID_ARG, "cohort_comm_destroy on rank %d: %u "
                            "non-blocking call%s on this communicator %s not been completed by "
                            "cohort_wait, cohort_waitall or cohort_test; complete them first "
                            "(cohort_comm_abort makes them complete at once, with "
                            "COHORT_ERR_ABORTED); nothing was freed", comm->rank, live,
                            live == 1 ? "" : "s", live == 1 ? "has" : "have");
    if (atomic_load(&comm->busy))
        return cohort_error(COHORT_ERR_INVALID_ARG, "cohort_comm_destroy on rank %d: a collective "
                            "or cohort_comm_split is still running on this communicator in "
                            "another thread; wait for it to return (cohort_comm_abort makes it "
                            "return at once), then destroy", comm->rank);
    cohort_engine_free(comm);
    cohort_timeline_detach(comm);
    cohort_comm_destroy(comm->hier_node);
    cohort_comm_destroy(comm->hier_cross);
    /* The last collectives may have returned here before the rank before this one confirmed
     * that it called the same (a broadcast's root waits for no one): a mismatch found now is
     * still reported, and told to the job, whose other ranks may be waiting in it. */
    st = cohort_p2p_token_finish(comm, DESTROY_CONFIRM_MS);
    if (st) cohort_jobctl_failure(comm, st, -1);
    int job_failed = failed_job_wide(comm, st);
    if (comm->owns_ctl) cohort_jobctl_detach();
    /* A plugin that runs collectives itself may compare what the ranks ran when the endpoint
     * closes, waiting a bounded time for the others (shm: its node collectives, where a small
     * broadcast's root waits for no one either); ep_close returns what it found. The plugin's
     * host->error is logged at INFO while the endpoints close, and once at WARN below, in
     * this call's words. */
    int level = cohort_error_log_level(COHORT_LOG_INFO);
    cohort_status_t cst = COHORT_SUCCESS;
    char why[1536] = "";
    if (job_failed) {
        for (int i = 0; comm->eps && i < comm->nplugins; i++) {
            const cohort_transport_v1_t *ops = comm->plugins[i]->ops;
            if (comm->eps[i] && (ops->abi_version & 0xffffu) >= 4 &&
                COHORT_HAS_FIELD(ops, cohort_transport_v1_t, ep_failed) && ops->ep_failed)
                ops->ep_failed(comm->eps[i]);
        }
    }
    for (int p = 0; comm->peers && p < comm->nranks; p++) {
        cohort_peer_t *peer = &comm->peers[p];
        if (peer->conn && peer->plugin >= 0)
            comm->plugins[peer->plugin]->ops->conn_close(peer->conn);
    }
    for (int i = 0; comm->eps && i < comm->nplugins; i++) {
        if (!comm->eps[i]) continue;
        cohort_status_t s = comm->plugins[i]->ops->ep_close(comm->eps[i]);
        if (s && !cst) {
            cst = s;
            snprintf(why, sizeof why, "%s", cohort_last_error());
        }
    }
    cohort_error_log_level(level);
    int mism = cst == COHORT_ERR_MISMATCH;
    if (cst && !st)
        st = cohort_error(cst, "cohort_comm_destroy on rank %d: %s (the communicator is "
                          "destroyed all the same%s): %s", comm->rank,
                          mism ? "its last collectives did not match the other ranks'"
                               : "closing an endpoint failed",
                          mism ? "; what they returned here may be wrong" : "", why);
    else if (cst)
        COHORT_WARN("core", "cohort_comm_destroy on rank %d, besides: %s", comm->rank, why);
    if (comm->plugins) cohort_plugins_release();
    free(comm->peers);
    free(comm->eps);
    free(comm->ring);
    free(comm->node_of);
    free(comm->local_of);
    free(comm->world_of);
    free(comm->scratch[0]);
    free(comm->scratch[1]);
    cohort_p2p_token_free(comm);
    comm->magic = COHORT_COMM_DEAD;
    free(comm);
    return st;
}

/* The queries: -1 ("none", NULL) for a handle that is not a live communicator, with
 * cohort_last_error() saying why. */
static int query(const cohort_comm_t *comm, const char *fn)
{
    return cohort_comm_check(comm, fn) == COHORT_SUCCESS;
}

int cohort_comm_rank(const cohort_comm_t *comm)
{
    return query(comm, "cohort_comm_rank") ? comm->rank : -1;
}
int cohort_comm_size(const cohort_comm_t *comm)
{
    return query(comm, "cohort_comm_size") ? comm->nranks : -1;
}
int cohort_comm_local_rank(const cohort_comm_t *comm)
{
    return query(comm, "cohort_comm_local_rank") ? comm->local_rank : -1;
}
int cohort_comm_local_size(const cohort_comm_t *comm)
{
    return query(comm, "cohort_comm_local_size") ? comm->local_size : -1;
}
int cohort_comm_node_count(const cohort_comm_t *comm)
{
    return query(comm, "cohort_comm_node_count") ? comm->node_count : -1;
}

const char *cohort_comm_last_algo(const cohort_comm_t *comm)
{
    if (!query(comm, "cohort_comm_last_algo")) return "none";
    const char *algo = atomic_load_explicit(&((cohort_comm_t *)comm)->last_algo,
                                            memory_order_relaxed);
    return algo ? algo : "none";
}

const char *cohort_comm_peer_transport(const cohort_comm_t *comm, int peer)
{
    if (!query(comm, "cohort_comm_peer_transport")) return NULL;
    if (peer < 0 || peer >= comm->nranks) {
        cohort_error(COHORT_ERR_INVALID_ARG, "cohort_comm_peer_transport: peer %d is not a rank "
                     "of this communicator (size %d)", peer, comm->nranks);
        return NULL;
    }
    if (!comm->peers) return NULL;
    int p = comm->peers[peer].plugin;
    return p < 0 ? NULL : comm->plugins[p]->name;
}
