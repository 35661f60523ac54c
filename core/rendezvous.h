/* TCP rendezvous: the out-of-band allgather that bootstraps a job.
 *
 * A server (hosted by cohortrun, or by rank 0 in a thread under mpirun/srun/torchrun) accepts one
 * authenticated connection per rank and serves rounds of allgather: when every rank has sent its
 * bytes for round k, each receives all of them. A rank that reports a failure, or disconnects
 * before leaving cleanly, fails the pending round on every other rank with a message naming it.
 *
 * Wire protocol (all integers little-endian on the wire as produced by this host: the protocol
 * is only spoken between cohort builds of the same ABI; version field guards it):
 *   client -> server  hello  {magic "CHRV", version, job_id[64], rank, nranks, nonce[16], mac[32]}
 *   server -> client  ack    {magic, status, mac[32]}         (mac over "ack"+nonce+rank)
 *   client -> server  msg    {type, round, nbytes, payload}   type: GATHER, FAIL, BYE
 *   server -> client  msg    {type, round, nbytes, payload}   type: RESULT, FAIL
 */
#ifndef COHORT_CORE_RENDEZVOUS_H
#define COHORT_CORE_RENDEZVOUS_H

#include <stddef.h>
#include "cohort/cohort.h"

#define COHORT_JOBID_MAX 64
#define COHORT_SECRET_MAX 64

typedef struct cohort_rdv_server cohort_rdv_server_t;
typedef struct cohort_rdv_client cohort_rdv_client_t;

/* Listens on bind_host (NULL or "" = all addresses) : port (0 = ephemeral). */
cohort_status_t cohort_rdv_server_create(const char *bind_host, int port, int nranks,
                                         const char *job_id, const void *secret,
                                         size_t secretlen, cohort_rdv_server_t **srv);
int cohort_rdv_server_port(const cohort_rdv_server_t *srv);
/* Serves for at most timeout_ms (0: one non-blocking pass). */
cohort_status_t cohort_rdv_server_progress(cohort_rdv_server_t *srv, int timeout_ms);
/* Number of ranks that have connected and authenticated so far (ever). */
int cohort_rdv_server_arrived(const cohort_rdv_server_t *srv);
/* 1 once every rank connected and every connection was closed again (after BYE or not). */
int cohort_rdv_server_finished(const cohort_rdv_server_t *srv);
/* Comma list of ranks that have not arrived, into buf. */
void cohort_rdv_server_missing(const cohort_rdv_server_t *srv, char *buf, size_t len);
/* Runs the server in its own thread until finished or stopped. */
cohort_status_t cohort_rdv_server_start_thread(cohort_rdv_server_t *srv);
/* Stops the thread (if any) and frees everything. */
void cohort_rdv_server_destroy(cohort_rdv_server_t *srv);

/* url: "tcp://host:port". Retries with backoff until timeout_s, then fails naming the address. */
cohort_status_t cohort_rdv_connect(const char *url, const char *job_id, const void *secret,
                                   size_t secretlen, int rank, int nranks, double timeout_s,
                                   cohort_rdv_client_t **cl);
cohort_status_t cohort_rdv_allgather(cohort_rdv_client_t *cl, const void *sendbuf,
                                     void *recvbuf, size_t nbytes, double timeout_s);
/* Tells every other rank that this one failed (their pending/next allgather fails with msg). */
void cohort_rdv_fail(cohort_rdv_client_t *cl, const char *msg);
/* Between rounds, without blocking: COHORT_SUCCESS, or the error of a rank that failed (the
 * server's FAIL), or of a server that went away. */
cohort_status_t cohort_rdv_check(cohort_rdv_client_t *cl);
/* Sends BYE and closes. */
void cohort_rdv_close(cohort_rdv_client_t *cl);

/* Parse "tcp://host:port" (host may be [v6]). */
cohort_status_t cohort_rdv_parse_url(const char *url, char *host, size_t hostlen, int *port);

#endif
