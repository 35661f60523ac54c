/* SPDX-License-Identifier: BSD-3-Clause */
/* cohortrun's internals shared between its source files (not installed): the options and the
 * job's state, which every part of the launcher reads, and the functions that one part calls in
 * another (named cr_*; everything else stays static in its file). tools/cohortrun.c says which
 * file holds which part. */
#ifndef COHORT_CR_INT_H
#define COHORT_CR_INT_H

#include "core/log.h"          /* COHORT_PRINTF */
#include "core/rendezvous.h"   /* cohort_rdv_server_t, COHORT_JOBID_MAX */

#include <signal.h>
#include <stddef.h>
#include <sys/types.h>

#define EXIT_USAGE 2   /* the exit status for bad usage (--help lists them all) */

/* ---------------------------------------------------------------------------------------- */
/* Options                                                                                  */

typedef struct xvar {
    char *name;
    char *value;     /* NULL: not set anywhere (warned about, not passed) */
} xvar_t;

typedef struct opts {
    long np;
    int np_given;
    const char *hostlist, *hostfile, *netif, *rsh;
    int tag_output, oversubscribe, verbose;
    int map_by_node;               /* --map-by node: round-robin over the hosts */
    double timeout_s;              /* 0: no limit */
    xvar_t *xvars;
    int nx;
    char **cmd;
    int ncmd;
} opts_t;

/* ---------------------------------------------------------------------------------------- */
/* Job state                                                                                */

typedef struct stream {
    int fd;              /* read end of the pipe, -1 once closed */
    char *buf;
    size_t len;
} stream_t;

typedef struct rank_proc {
    int rank;
    const char *host;    /* name as given (gethostname() when no hosts) */
    int local;           /* started directly, not through the agent */
    int node;            /* index of the node (for the local rank) */
    int local_rank, local_size;
    int group;           /* GROUP_RANK: the node's index, nodes numbered in order of their
                          * first rank */
    pid_t pid;           /* 0: not started */
    int running;         /* started and not reaped yet */
    int status;          /* wait status once reaped */
    int reap_seq;        /* 1 for the first rank reaped, 2 for the next, ...; 0: not yet */
    int failed;          /* reaped with a non-zero status or by a signal */
    double exited_at;    /* when it was reaped */
    int unjoined;        /* reaped with status 0 and not (yet) seen at the rendezvous */
    stream_t out[2];     /* stdout, stderr */
} rank_proc_t;

typedef struct job {
    opts_t *o;
    int n;
    rank_proc_t *ranks;
    char **host_names;   /* one per host of the list; the ranks' host points into it */
    int nhosts;
    int ngroups;         /* GROUP_WORLD_SIZE: the nodes that have ranks */
    pid_t pgid;
    cohort_rdv_server_t *srv;
    int srv_active;
    char job_id[COHORT_JOBID_MAX];
    char secret[65];
    char url[128];
    char *master_addr;   /* MASTER_ADDR and MASTER_PORT for every rank (torch_master) */
    int master_port;
    const char *master_addr_from, *master_port_from;   /* for -v */
    int out_dead[2];     /* our stdout/stderr gave EPIPE: discard */
    int terminating;
    int sigkill_sent;
    int exit_code;
    double term_deadline, kill_deadline;
    double interrupted_at;   /* when the first SIGINT/SIGTERM/SIGHUP was handled */
    double notice_deadline;  /* a rank failed: the others were told; SIGTERM them at this time */
    int failed_code;         /* the named rank's exit code, once a failure was named */
    int nreaped;
    int verdict_pending;     /* a rank failed; which rank to name is not decided yet */
    double verdict_deadline;
    int nunjoined;           /* ranks with unjoined set */
} job_t;

/* cr_util.c: allocation that exits on failure, cohortrun's own messages, quiet library calls */
void *cr_xcalloc(size_t n, size_t size);
void *cr_xrealloc(void *p, size_t size);
char *cr_xstrdup(const char *s);
char *cr_xasprintf(const char *fmt, ...) COHORT_PRINTF(1, 2);
void cr_msg(const char *fmt, ...) COHORT_PRINTF(1, 2);
void cr_usage_error(const char *fmt, ...) COHORT_PRINTF(1, 2);   /* exits with EXIT_USAGE */
void cr_quiet_begin(void);
void cr_quiet_end(void);
const char *cr_plural(long n, const char *one, const char *many);

/* cr_place.c: the hosts, and the host, node, local rank and group of every rank */
void cr_place_ranks(job_t *job);

/* cr_rdv.c: job id, secret, the rendezvous server, MASTER_ADDR and MASTER_PORT */
void cr_setup_job(job_t *job);

/* cr_spawn.c: the open-files limit for nranks ranks; starting one rank */
void cr_raise_fd_limit(int nranks);
int cr_spawn_rank(job_t *job, rank_proc_t *p, int devnull);

/* cr_output.c: relaying a rank's stdout (s 0) or stderr (s 1) */
void cr_stream_read(job_t *job, rank_proc_t *p, int s, int drain);
void cr_stream_close(job_t *job, rank_proc_t *p, int s);

/* cr_watch.c: signals, stopping the job, and the main loop (returns cohortrun's exit status) */
extern volatile sig_atomic_t cr_got_signal;
void cr_setup_signals(void);
void cr_handle_signals(job_t *job);
void cr_start_termination(job_t *job, int exit_code);
int cr_run(job_t *job, double rdv_timeout_s);

#endif
