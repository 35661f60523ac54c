/* SPDX-License-Identifier: BSD-3-Clause */
/* cohort-conformance: drives any transport plugin through the plugin ABI alone.
 *
 * The parent (conformance.c) validates the plugin, forks N ranks and relays their out-of-band
 * traffic: allgathers (addresses, barriers) and per-case reports, over one SOCK_SEQPACKET
 * socketpair per rank. Each rank (child.c) loads the plugin itself and runs every case
 * (cases.c) in the same order; the parent prints one line per case and the totals.
 */
#ifndef COHORT_CONFORMANCE_H
#define COHORT_CONFORMANCE_H

#include <stddef.h>
#include <stdint.h>

#include "cohort/cohort.h"
#include "cohort/plugin.h"

#define CF_MAX_NP 64
#define CF_MSG 480                 /* report text */
#define CF_STEP_END 0x7fffffff     /* the gather that closes every case */

/* Records between a rank and the parent. */
enum {
    /* rank -> parent */
    R_GATHER = 1,    /* kase, step, len bytes: contribute to an allgather */
    R_REPORT,        /* kase, ok, text */
    R_EXITING,       /* this rank leaves on purpose (the peer-exit case) */
    R_DONE,          /* all cases run; the rank exits next */
    R_FATAL,         /* the rank cannot run at all (text) */
    /* parent -> rank */
    R_RESULT = 16,   /* kase, step, gathered data: per rank {int32 present, u32 len, bytes} */
    R_ABORTGATHER,   /* kase, step: another rank gave up on this case */
    R_ABORTCASE,     /* kase: another rank failed this case; stop waiting */
    R_STOP           /* the parent gives up: exit now */
};

typedef struct cf_rec {
    uint32_t type;
    int32_t rank;
    int32_t kase;
    int32_t step;
    int32_t ok;
    uint32_t len;    /* bytes following the header */
} cf_rec_t;

#define CF_REC_MAX (sizeof(cf_rec_t) + (size_t)CF_MAX_NP * (8 + COHORT_ADDR_MAX + 64))

typedef struct cf_world cf_world_t;

typedef struct cf_case {
    const char *name;
    int (*fn)(cf_world_t *w);
} cf_case_t;

extern const cf_case_t cf_cases[];
extern const int cf_ncases;

/* Options shared by parent and ranks. */
typedef struct cf_opts {
    const char *plugin;
    int np;
    double timeout;      /* seconds per case */
    int verbose;
    const char *only;    /* run only cases whose name contains this */
} cf_opts_t;

/* The rank's body (child.c). Never returns. */
void cf_child_main(const cf_opts_t *o, int rank, int fd) __attribute__((noreturn));

/* I/O helpers on the SEQPACKET socket: 0 ok, -1 error/EOF. */
int cf_send_rec(int fd, const cf_rec_t *h, const void *data);
/* Reads one record (blocking). buf holds CF_REC_MAX bytes. Returns bytes, 0 on EOF, -1 error. */
long cf_recv_rec(int fd, void *buf);

double cf_now(void);

/* ---- what a rank's cases work with (child.c) -------------------------------------------- */

struct cf_world {
    const cf_opts_t *o;
    const cohort_transport_v1_t *ops;
    cohort_tp_ctx_t ctx;
    int rank, np;
    int pfd;                           /* socket to the parent */
    int kase, step;
    double deadline;                   /* of the running case */
    int aborted;                       /* another rank failed this case */
    int exit_after_report;             /* the peer-exit case's victim */
    char err[CF_MSG];                  /* first failure of the case */
    char note[256];                    /* shown after the case name (e.g. "skipped: ...") */
    cohort_tp_ep_t ep;
    cohort_tp_conn_t conn[CF_MAX_NP];
    unsigned char addr[CF_MAX_NP][COHORT_ADDR_MAX];
    size_t addrlen[CF_MAX_NP];
    /* last gather */
    unsigned char *gbuf;
    const unsigned char *gdata[CF_MAX_NP];
    size_t glen[CF_MAX_NP];
    int gpresent[CF_MAX_NP];
    /* reply from the parent being waited for */
    unsigned char *reply;
    int have_reply;
    /* buffers freed after the world is closed (the plugin may write into them until then) */
    void **allocs;
    int nallocs, capallocs;
    cohort_status_t progress_err;
};

/* One request as the cases see it. */
typedef struct cf_req {
    cohort_tp_req_t r;
    int peer;
    int is_send;
    size_t len;
    int done;
    cohort_status_t st;
    size_t nbytes;
    char err[200];                     /* cohort_last_error() when it failed */
} cf_req_t;

enum { CF_ORDER_FORWARD = 0, CF_ORDER_REVERSE, CF_ORDER_RANDOM };

int cf_fail(cf_world_t *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void *cf_alloc(cf_world_t *w, size_t len);
/* Allgather through the parent; results in w->gdata/glen/gpresent. 0 ok, -1 failed. */
int cf_gather(cf_world_t *w, const void *data, size_t len);
int cf_barrier(cf_world_t *w);
/* Sleeps up to ms on the endpoint's fd and the parent socket, then calls progress. */
void cf_pump(cf_world_t *w, int ms);
int cf_ep_open(cf_world_t *w);                  /* ep_open + address exchange */
/* Both roles by the core's convention (higher rank connects to lower): connect to lower ranks
 * when `connect`, accept higher ranks when `accept`. */
int cf_post_conns(cf_world_t *w, int do_connect, int do_accept);
int cf_wait_conns(cf_world_t *w);               /* every open conn usable */
int cf_world(cf_world_t *w);                    /* all of the above */
void cf_close_world(cf_world_t *w);             /* conn_close + ep_close */
/* Keys the host table's auth() (core/plugin_loader.c's cohort_plugin_set_secret) in this rank:
 * with the job secret, COHORT_SECRET, which the parent sets before forking (every rank does this
 * before its first case, as cohort_comm_init_oob does), or, when `stranger`, with another secret
 * of the same length that differs in its first byte (the stranger cases). */
void cf_set_secret(int stranger);
/* Posting: the status the plugin returned (an immediate error marks the request done). */
cohort_status_t cf_isend(cf_world_t *w, int peer, const void *buf, size_t len, uint64_t tag,
                         cohort_tp_mr_t mr, cf_req_t *q);
cohort_status_t cf_irecv(cf_world_t *w, int peer, void *buf, size_t len, uint64_t tag,
                         cohort_tp_mr_t mr, cf_req_t *q);
/* Tests until every request is done, in the given order; -1 on deadline or abort. */
int cf_wait(cf_world_t *w, cf_req_t *q, int n, int order);
/* Deterministic contents. cf_check returns len when buf matches, else the first bad offset. */
void cf_fill(void *buf, size_t len, uint64_t seed);
size_t cf_check(const void *buf, size_t len, uint64_t seed);
uint64_t cf_seed(const cf_world_t *w, int src, int dst, int i);

#endif
