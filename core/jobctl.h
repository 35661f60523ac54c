/* SPDX-License-Identifier: BSD-3-Clause */
/* The job's control channel: after cohort_comm_init over a rendezvous (cohortrun, mpirun, srun,
 * torchrun) every rank keeps its rendezvous connection open for the life of the world
 * communicator. The server (cohortrun, or rank 0's thread) sees a rank die the moment its
 * connection closes without a goodbye, and every rank tells it about a collective that failed;
 * the job's FIRST failure goes to every rank, so that survivors which only saw a neighbour hang
 * up (or saw nothing) fail at once naming the rank that really died. The same channel carries
 * stall reports (COHORT_STALL_WARN) and the other side's view of a mismatch.
 *
 * One per process: communicators made by cohort_comm_split and the hierarchy's sub-communicators
 * use their world communicator's channel; cohort_comm_init_oob has none (its ranks learn of a
 * loss through the transports only). Thread-safe; cohort_jobctl_abort_notice is
 * async-signal-safe.
 */
#ifndef COHORT_CORE_JOBCTL_H
#define COHORT_CORE_JOBCTL_H

#include "cohort/cohort.h"
#include "core/rendezvous.h"

/* Takes cl (and srv, the server this rank hosts, or NULL). server_rank: the rank hosting the
 * server, -1 for the launcher. */
void cohort_jobctl_attach(cohort_rdv_client_t *cl, cohort_rdv_server_t *srv, int rank,
                          int server_rank);
/* Normal end: goodbye to the server; a hosted server tells the others it ends, then stops. */
void cohort_jobctl_detach(void);
/* 1 when this process joined a job with cohort_comm_init and its world communicator still
 * holds the channel; *rank: the rank it joined as. */
int cohort_jobctl_joined(int *rank);
/* For poll() while sleeping: readable when a notice came. -1 without a channel. */
int cohort_jobctl_fd(void);
/* Non-blocking. COHORT_SUCCESS, or (with a message naming the rank at fault) the job's failure
 * as it affects comm's collective in progress. */
cohort_status_t cohort_jobctl_check(cohort_comm_t *comm);
/* As cohort_jobctl_check, after waiting up to the time a notice takes to reach every rank
 * (CAUSE_WAIT_MS) for one that concerns comm: for a peer that hung up without a word, which is
 * often the consequence of a failure that the job is telling every rank in turn. */
cohort_status_t cohort_jobctl_await(cohort_comm_t *comm);
/* How many failures the job has heard of (a cheap test at the start of every collective: a
 * communicator looks closer when the number changed). */
unsigned cohort_jobctl_failures(void);
/* 1 when the channel was last read more than a millisecond ago (a collective then reads it
 * before starting: a notice that came while the rank computed fails it at once). */
int cohort_jobctl_due(void);
/* After a collective on comm failed with st (cohort_last_error() holds its message): tells the
 * job (the first failure reaches every rank), waits briefly for the job's first failure and, if
 * it is another rank's, adds it to the message; for a mismatch with peer (a rank of comm) it also
 * waits briefly for that peer's account of what it called. Returns st. */
cohort_status_t cohort_jobctl_failure(cohort_comm_t *comm, cohort_status_t st, int peer);
/* A wait on comm has made no progress for COHORT_STALL_WARN seconds; what: who it waits on. */
void cohort_jobctl_stalled(cohort_comm_t *comm, double waited_s, const char *what);
/* cohort_comm_abort of the world communicator: tell the job, or at least hang up. */
void cohort_jobctl_abort_notice(void);

#endif
