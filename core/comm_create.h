/* SPDX-License-Identifier: BSD-3-Clause */
/* Building a communicator (core/comm_create.c), for core/comm.c's entry points. */
#ifndef COHORT_CORE_COMM_CREATE_H
#define COHORT_CORE_COMM_CREATE_H

#include "core/comm.h"

/* The job id the transports get for their handshakes (cohort_comm_init sets the launcher's;
 * "oob" until then). */
void cohort_comm_set_job_id(const char *job_id);

/* Creates the communicator comm_id of the bootstrap's ranks that are members (member: this rank
 * is one), ordered by key, in allgather rounds over boot: *out only for a member, on success.
 * *dispose: what this rank built and must destroy (cohort_comm_destroy) whatever the status: a
 * non-member's share, or a member's communicator whose last step failed; NULL otherwise. world:
 * it is the job's world (cohort_comm_init). timeout_s > 0: the communicator's own timeout. */
cohort_status_t cohort_comm_create(cohort_bootstrap_t *boot, int member, uint64_t comm_id,
                                   int64_t key, int world, double timeout_s, cohort_comm_t **out,
                                   cohort_comm_t **dispose);

/* A communicator of one rank: no exchange, no transport. */
cohort_status_t cohort_comm_create_single(uint64_t comm_id, double timeout_s, cohort_comm_t **out);

#endif
