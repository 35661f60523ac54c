/* SPDX-License-Identifier: BSD-3-Clause */
/* Collectives a transport runs itself (the plugin's collective table, ABI 1.1).
 *
 * Used when every peer of the communicator is connected through one plugin that offers the
 * collective (shm: all ranks on one node), unless COHORT_ALGO names a core algorithm for it.
 * The plugin does the work; the core owns the wait: spin, then yield when oversubscribed, sleep
 * on the endpoint's fd after COHORT_SPIN fruitless polls, COHORT_TIMEOUT per stall, abort.
 * It lives in core/, not core/coll/: it is not an algorithm over point-to-point but the
 * dispatch to a plugin, and needs the communicator's plugins and endpoints (core/comm.h).
 */
#include "core/coll/coll.h"
#include "core/comm.h"
#include "core/jobctl.h"
#include "core/log.h"
#include "core/p2p.h"
#include "core/timeutil.h"

#include <stdio.h>
#include <string.h>

_Static_assert((int)COHORT_COLL_ALLREDUCE == COHORT_TP_ALLREDUCE &&
               (int)COHORT_COLL_BROADCAST == COHORT_TP_BROADCAST &&
               (int)COHORT_COLL_REDUCE == COHORT_TP_REDUCE &&
               (int)COHORT_COLL_ALLGATHER == COHORT_TP_ALLGATHER &&
               (int)COHORT_COLL_REDUCE_SCATTER == COHORT_TP_REDUCE_SCATTER &&
               (int)COHORT_COLL_ALLTOALL == COHORT_TP_ALLTOALL &&
               (int)COHORT_COLL_BARRIER == COHORT_TP_BARRIER,
               "core and plugin ABI number the collectives alike");

const char *cohort_coll_transport_name(const cohort_comm_t *comm, const cohort_coll_args_t *a)
{
    if (comm->coll_plugin < 0 || !(comm->coll_mask & (1u << a->coll))) return NULL;
    const char *name = comm->plugins[comm->coll_plugin]->name;
    const char *want = cohort_algo_spec_get(&comm->algo_spec, cohort_coll_name(a->coll));
    if (want && *want && strcmp(want, name)) return NULL;   /* a core algorithm is forced */
    return name;
}

cohort_status_t cohort_coll_transport(cohort_comm_t *comm, const cohort_coll_args_t *a)
{
    const cohort_plugin_t *p = comm->plugins[comm->coll_plugin];
    const cohort_transport_coll_v1_t *ct = p->ops->coll;
    cohort_tp_ep_t ep = comm->eps[comm->coll_plugin];
    cohort_tp_coll_args_t ta = { sizeof ta, (int)a->coll, a->sendbuf, a->recvbuf, a->count,
                                 a->dtype, a->op, a->root, comm->tag };
    cohort_tp_req_t req = NULL;
    cohort_status_t st = ct->start(ep, &ta, &req);
    if (st) {
        cohort_error_prefix("rank %d starting %s over %s", comm->rank, cohort_comm_desc(comm),
                            p->name);
        return st;
    }
    cohort_pace_t pace = { 0 };
    while (req) {
        int waiting_on = -1, moved = 0;
        st = ct->test(req, &waiting_on, &moved);
        if (st == COHORT_SUCCESS) return st;
        if (st != COHORT_IN_PROGRESS) {
            cohort_error_prefix("rank %d in %s over %s", comm->rank, cohort_comm_desc(comm),
                                p->name);
            return st;
        }
        if (atomic_load(&comm->aborted)) {
            ct->cancel(req);
            return cohort_error(COHORT_ERR_ABORTED, "rank %d: %s interrupted: the communicator "
                                "was aborted", comm->rank, cohort_comm_desc(comm));
        }
        st = cohort_p2p_pace(comm, &pace, moved, 0);
        if (st && pace.job_failed) {
            ct->cancel(req);
            return st;
        }
        if (pace.stall_warn_due) {
            char who[192] = "no rank in particular";
            if (waiting_on >= 0 && waiting_on < comm->nranks)
                snprintf(who, sizeof who, "rank %d (%s) in %s's node collective", waiting_on,
                         comm->peers[waiting_on].host, p->name);
            pace.stall_warn_due = 0;
            cohort_jobctl_stalled(comm, (double)(cohort_now_ns() - pace.stalled_since) * 1e-9,
                                  who);
        }
        if (st == COHORT_ERR_TIMEOUT) {
            comm->fail_peer = waiting_on;
            ct->cancel(req);
            char who[96] = "no rank in particular";
            if (waiting_on >= 0 && waiting_on < comm->nranks)
                snprintf(who, sizeof who, "rank %d (%s)", waiting_on,
                         comm->peers[waiting_on].host);
            return cohort_error(COHORT_ERR_TIMEOUT, "rank %d: %s (%s node collective) stalled "
                                "for %g s waiting on %s. Did every rank call it with the same "
                                "arguments? A peer that hangs or died? %s sets the limit",
                                comm->rank, cohort_comm_desc(comm), p->name, comm->timeout_s,
                                who, cohort_comm_timeout_source(comm));
        }
        if (st) return st;
    }
    return COHORT_SUCCESS;
}
