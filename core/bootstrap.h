/* SPDX-License-Identifier: BSD-3-Clause */
/* Bootstrap: who am I (rank, size, job) and how the ranks first exchange bytes.
 *
 * Identity comes from COHORT_* (cohortrun), else Open MPI, MPICH/hydra (PMI_*), Slurm, torchrun,
 * else PMIx itself. The rendezvous address from COHORT_RENDEZVOUS, MASTER_ADDR/PORT, else PMIx,
 * else Slurm's node list (core/launcher.h).
 * The exchange is an allgather: over the TCP rendezvous (cohortrun's, or one rank 0 hosts), over
 * the caller's OOB function, or over a parent communicator (split).
 */
#ifndef COHORT_CORE_BOOTSTRAP_H
#define COHORT_CORE_BOOTSTRAP_H

#include <stddef.h>
#include "cohort/cohort.h"
#include "core/rendezvous.h"

typedef struct cohort_identity {
    int rank, nranks;
    int local_rank, local_size;       /* -1 when the launcher does not say */
    char job_id[COHORT_JOBID_MAX];
    unsigned char secret[COHORT_SECRET_MAX];
    size_t secretlen;
    char rendezvous[320];             /* tcp://host:port or file://dir */
    int external_server;              /* 1: the launcher hosts the rendezvous */
    int rdv_from;                     /* where the rendezvous address comes from: */
#define COHORT_RDV_FROM_USER 0        /*   COHORT_RENDEZVOUS, MASTER_ADDR/PORT, cohortrun */
#define COHORT_RDV_FROM_PMIX 1        /*   PMIx: rank 0 hosts on any port and tells the others */
#define COHORT_RDV_FROM_SLURM 2       /*   Slurm: the step's first host, a port from its ids */
    const char *launcher;             /* "cohortrun", "Open MPI", ... */
} cohort_identity_t;

/* Under PMIx this may leave PMIx initialized for cohort_bootstrap_rdv, which finalizes it; a
 * caller that does not go on to cohort_bootstrap_rdv calls cohort_pmix_finalize (launcher.h). */
cohort_status_t cohort_identity_from_env(cohort_identity_t *id);

typedef struct cohort_bootstrap cohort_bootstrap_t;
struct cohort_bootstrap {
    int rank, nranks;
    int world_rank;    /* this rank in the job of cohort_comm_init (jobctl.h); -1: none */
    cohort_status_t (*allgather)(cohort_bootstrap_t *b, const void *sendbuf, void *recvbuf,
                                 size_t nbytes);
    void (*fail)(cohort_bootstrap_t *b, const char *msg);  /* may be NULL */
    /* Between rounds, non-blocking: has another rank reported a failure? May be NULL. */
    cohort_status_t (*check)(cohort_bootstrap_t *b);
    void (*close)(cohort_bootstrap_t *b);                  /* frees b */
};

/* Over the TCP rendezvous. *server is set when this rank hosts it (rank 0 without cohortrun):
 * keep it until the communicator is destroyed. */
cohort_status_t cohort_bootstrap_rdv(const cohort_identity_t *id, double timeout_s,
                                     cohort_bootstrap_t **b, cohort_rdv_server_t **server);
/* The rendezvous client of a bootstrap made by cohort_bootstrap_rdv, now the caller's (the job's
 * control channel, core/jobctl.h); NULL for other bootstraps. */
cohort_rdv_client_t *cohort_bootstrap_take_rdv(cohort_bootstrap_t *b);
cohort_status_t cohort_bootstrap_oob(int rank, int nranks, cohort_oob_allgather_fn fn, void *ctx,
                                     cohort_bootstrap_t **b);
/* Over an existing communicator (its byte allgather). */
cohort_status_t cohort_bootstrap_comm(cohort_comm_t *parent, cohort_bootstrap_t **b);

#endif
