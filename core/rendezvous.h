/* SPDX-License-Identifier: BSD-3-Clause */
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
 *                            status 0: joined; else why it was refused (another job, a bad
 *                            MAC, a rank that does not fit, a rank that already joined): the
 *                            client's message says which
 *   client -> server  msg    {type, round, nbytes, payload}   type: GATHER, FAIL, BYE
 *   server -> client  msg    {type, round, nbytes, payload}   type: RESULT, FAIL
 *
 * After the bootstrap each rank keeps its connection as the job's control channel (core/jobctl):
 *   client -> server  FAIL   the job failed (an abort); round = its code (bits 0-15: the rank it
 *                            is about + 1, or 0; bits 16-23: minus the status). The server sends
 *                            the job's FIRST failure to every rank, with its code; it also sends
 *                            one when a rank is lost (a connection closed without BYE).
 *   client -> server  NOTICE {comm id, about, status, text}: a collective of that communicator
 *                            failed; the server sends each communicator's first NOTICE to every
 *                            rank (only that communicator's members act on it)
 *   client -> server  NOTE   text the server forwards to every other rank (round = the sender)
 *   client -> server  STALL  "I am stuck in ...": the server gathers them for 2 s and logs one
 *                            stall report naming the ranks that did not report
 *   client -> server  BYE    a normal end (cohort_comm_destroy, or process exit)
 *   server -> client  SHUTDOWN  the server goes away normally (rank 0's thread at its end)
 * A connection that closes without BYE is a lost rank: the server fails the job naming it.
 */
#ifndef COHORT_CORE_RENDEZVOUS_H
#define COHORT_CORE_RENDEZVOUS_H

#include <stddef.h>
#include <sys/types.h>
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
/* What the server saw of one rank, for a launcher that must tell the rank that caused a failure
 * from the ranks that failed because of it. */
typedef struct cohort_rdv_rank_info {
    int arrived;      /* it joined (a hello accepted) */
    int left;         /* 0: still connected, or never joined; 1: left after a goodbye; 2: lost:
                       * its connection closed without a goodbye (killed, crashed, _exit) */
    int lost_order;   /* left == 2: 1 for the first rank lost, 2 for the next, ... */
    int blamed;       /* the rank its first PEER_LOST report (FAIL or NOTICE) named, or -1 */
} cohort_rdv_rank_info_t;
void cohort_rdv_server_rank_info(const cohort_rdv_server_t *srv, int rank,
                                 cohort_rdv_rank_info_t *info);
/* Fails the job (if nothing failed before): every rank receives msg, about that rank. */
void cohort_rdv_server_fail(cohort_rdv_server_t *srv, int about, const char *msg);
/* The job's first failure, NULL while none. */
const char *cohort_rdv_server_failure(const cohort_rdv_server_t *srv);
/* Stops the thread (if any) and tells every connected rank the server ends normally. */
void cohort_rdv_server_shutdown(cohort_rdv_server_t *srv);
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
/* The control channel after the bootstrap (see the protocol above). */
int cohort_rdv_fd(const cohort_rdv_client_t *cl);   /* -1 once closed */
typedef enum { COHORT_RDV_NOTICE, COHORT_RDV_NOTE, COHORT_RDV_STALL } cohort_rdv_msg_t;
/* NOTICE: a failure; comm_id 0 is about the whole job (FAIL), else about that communicator
 * (NOTICE). about: the job's rank it is about, or -1. */
cohort_status_t cohort_rdv_send(cohort_rdv_client_t *cl, cohort_rdv_msg_t kind, uint64_t comm_id,
                                int about, cohort_status_t status, const char *text);
/* A NOTICE as bytes, for a single send() from a signal handler; -1 if len is too small. */
ssize_t cohort_rdv_encode_notice(char *buf, size_t len, int about, cohort_status_t status,
                                 const char *text);
enum { COHORT_RDV_EV_NONE, COHORT_RDV_EV_FAIL, COHORT_RDV_EV_NOTE, COHORT_RDV_EV_SHUTDOWN,
       COHORT_RDV_EV_GONE };
typedef struct cohort_rdv_event {
    int kind;                 /* COHORT_RDV_EV_* */
    int rank;                 /* FAIL: the rank it is about; NOTE: the sender; else -1 */
    uint64_t comm_id;         /* FAIL: the communicator that failed; 0: the whole job */
    cohort_status_t status;   /* FAIL */
    char text[1024];
} cohort_rdv_event_t;
/* Non-blocking: the next message of the server, if one is there (kind NONE otherwise). GONE and
 * SHUTDOWN close the connection; so does an error (a message refused or cut short: the stream
 * would be out of step). */
cohort_status_t cohort_rdv_next_event(cohort_rdv_client_t *cl, cohort_rdv_event_t *ev);
/* Sends BYE and closes. */
void cohort_rdv_close(cohort_rdv_client_t *cl);

/* Parse "tcp://host:port" (host may be [v6]). */
cohort_status_t cohort_rdv_parse_url(const char *url, char *host, size_t hostlen, int *port);

#endif
