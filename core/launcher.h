/* SPDX-License-Identifier: BSD-3-Clause */
/* Where the rendezvous is when the user did not say (no COHORT_RENDEZVOUS): the launcher tells.
 *
 * PMIx (mpirun of Open MPI 4.1, srun --mpi=pmix, prterun): rank 0 puts the address of the
 * rendezvous it hosts into the PMIx key-value store, one fence (with data collection, bounded by
 * COHORT_TIMEOUT) later every other rank reads it. PMIx carries only that one address; the
 * rendezvous does the rest as with every other launcher. Built only when configure found PMIx
 * (pkg-config pmix); without it the calls fail saying so.
 *
 * Slurm without PMIx: the first host of the step's node list hosts the rendezvous on a port
 * derived from the job and step ids (cohort_slurm_port).
 */
#ifndef COHORT_CORE_LAUNCHER_H
#define COHORT_CORE_LAUNCHER_H

#include <stddef.h>
#include "cohort/cohort.h"

/* 1 when cohort was built with PMIx. */
int cohort_pmix_built(void);
/* 1 when a PMIx server started this process (PMIX_NAMESPACE or PMIX_RANK in the environment). */
int cohort_pmix_present(void);
/* PMIx_Init (once per process until cohort_pmix_finalize), then this process's rank and the
 * job's size from PMIx, and its rank among the job's processes on this node and their number
 * (-1 both when PMIx does not say). */
cohort_status_t cohort_pmix_identity(int *rank, int *nranks, int *local_rank, int *local_size);
/* The address exchange. Rank 0 passes url (its rendezvous, tcp://addr:port) or, when it could
 * not host one, url NULL and why: the other ranks then fail at once with that text instead of
 * waiting. The others receive rank 0's url in out. Initializes PMIx if needed; the fence waits at
 * most timeout_s. PMIx stays initialized: call cohort_pmix_finalize. */
cohort_status_t cohort_pmix_exchange(int rank, const char *url, const char *why, char *out,
                                     size_t outlen, double timeout_s);
/* PMIx_Finalize if cohort_pmix_identity/exchange initialized it; nothing otherwise. */
void cohort_pmix_finalize(void);

/* Slurm's compressed host list ("node[01-03,7],other", "a-[1-2]b" is not a Slurm form): its
 * first host, zero padding kept ("node01"). COHORT_ERR_INVALID_ARG naming the list if it cannot
 * be read. */
cohort_status_t cohort_slurm_first_host(const char *list, char *host, size_t hostlen);
/* The rendezvous port of a Slurm step without PMIx: 20000 + (8 * job id + step id) mod 12000,
 * in 20000-31999 (below Linux's ephemeral range, 32768-60999, where outgoing connections take
 * their ports). The steps of one job, and jobs whose ids are close, get distinct ports. */
int cohort_slurm_port(unsigned long job_id, unsigned long step_id);

#endif
