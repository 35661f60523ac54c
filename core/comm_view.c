/* SPDX-License-Identifier: BSD-3-Clause */
/* What algorithms and the layers below the public front see of a communicator (declared in
 * core/coll/coll.h and core/comm.h): its rank and size without the handle checks of the public
 * calls, scratch buffers, chunk size, ring order, hierarchy, timeline phases, COHORT_ALGO, and
 * which timeout a message should name. Plain reads of the communicator's fields: this file
 * calls nothing above it (comm.c creates what it reads). */
#include "core/coll/coll.h"
#include "core/comm.h"
#include "core/jobtopo.h"
#include "core/log.h"
#include "core/timeline.h"

#include <stdio.h>
#include <stdlib.h>

int cohort_coll_rank(const cohort_comm_t *comm) { return comm->rank; }

int cohort_coll_size(const cohort_comm_t *comm) { return comm->nranks; }

void *cohort_coll_scratch(cohort_comm_t *comm, int slot, size_t bytes)
{
    if (comm->scratch_len[slot] < bytes) {
        free(comm->scratch[slot]);
        comm->scratch[slot] = NULL;
        comm->scratch_len[slot] = 0;
        size_t len = (bytes + 63) & ~(size_t)63;
        if (posix_memalign(&comm->scratch[slot], 64, len) != 0) {
            comm->scratch[slot] = NULL;
            cohort_error(COHORT_ERR_NO_MEMORY, "rank %d: cannot allocate %zu bytes of scratch "
                         "for %s", comm->rank, bytes, cohort_comm_desc(comm));
            return NULL;
        }
        comm->scratch_len[slot] = len;
    }
    return comm->scratch[slot];
}

size_t cohort_coll_chunk_size(const cohort_comm_t *comm) { return comm->chunk; }

int cohort_coll_nodes(const cohort_comm_t *comm) { return comm->node_count; }

uint64_t cohort_coll_now(const cohort_comm_t *comm)
{
    return cohort_timeline_on(comm) ? cohort_timeline_now() : 0;
}

void cohort_coll_phase(cohort_comm_t *comm, const char *name, uint64_t t0)
{
    if (!cohort_timeline_on(comm)) return;
    char args[256];
    snprintf(args, sizeof args, "\"of\":\"%s\"", comm->cur ? cohort_coll_name(comm->cur->coll)
                                                           : "?");
    cohort_timeline_event(comm, COHORT_TL_PHASES, name, t0, cohort_timeline_now(), args);
}
const cohort_algo_spec_t *cohort_coll_algo_spec(const cohort_comm_t *comm)
{
    return &comm->algo_spec;
}

const int *cohort_coll_ring(const cohort_comm_t *comm, int *pos)
{
    static const int single[1] = { 0 };
    if (!comm->ring) {
        *pos = 0;
        return single;
    }
    *pos = comm->ring_pos;
    return comm->ring;
}

int cohort_coll_hier(cohort_comm_t *comm, cohort_hier_view_t *h)
{
    if (!comm->hier_node || !comm->hier_cross) return 0;
    *h = (cohort_hier_view_t){ comm->hier_node, comm->hier_cross, comm->hier_even,
                               comm->hier_mode == COHORT_HIER_FORCE, comm->node_count,
                               comm->node_of, comm->local_of };
    return 1;
}

const char *cohort_comm_timeout_source(const cohort_comm_t *comm)
{
    return comm->timeout_given ? "the timeout the communicator was given (its framework's "
                                 "timeout)" : "COHORT_TIMEOUT";
}
