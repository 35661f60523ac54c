/* SPDX-License-Identifier: BSD-3-Clause */
/* cohort transport plugin ABI (C99, versioned, size-prefixed).
 *
 * A transport plugin is a shared object libcohort-<name>.so exporting one const struct
 *
 *     const cohort_transport_v1_t cohort_transport_v1 = { sizeof(cohort_transport_v1_t),
 *                                                         COHORT_PLUGIN_ABI_VERSION, ... };
 *
 * Rules (see docs/plugins.md):
 *  - Structs here grow only by appending fields. Each starts with `size_t size`, the sizeof the
 *    struct as the writer was built; a reader uses only fields that lie inside `size`.
 *  - abi_version is (major << 16) | minor. The core refuses a plugin whose major differs from
 *    COHORT_PLUGIN_ABI_MAJOR; any minor is accepted.
 *  - No function may block: long operations return COHORT_IN_PROGRESS and are finished by
 *    calling test/progress. The core owns every timeout. Two exceptions: at set-up, can_reach
 *    may probe the peer for a bounded time that a setting of the plugin gives; at the end, a
 *    plugin that runs collectives itself may, at an endpoint's first conn_close or ep_close, wait
 *    a bounded time (shm: at most 2 s) for the peers' endpoints to compare what the ranks ran.
 *  - On failure a function returns a negative cohort_status_t after calling host->error() with a
 *    message naming what failed (peer rank, interface, errno text) and what to try.
 *  - A plugin includes only this header; everything it needs from the core is in the host table.
 *  - The core drives one endpoint (and its connections) from one thread at a time.
 */
#ifndef COHORT_PLUGIN_H
#define COHORT_PLUGIN_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "cohort.h"

#ifdef __cplusplus
extern "C" {
#endif

#define COHORT_PLUGIN_ABI_MAJOR 1
#define COHORT_PLUGIN_ABI_MINOR 5
#define COHORT_PLUGIN_ABI_VERSION ((uint32_t)((COHORT_PLUGIN_ABI_MAJOR << 16) | COHORT_PLUGIN_ABI_MINOR))
#define COHORT_PLUGIN_SYMBOL "cohort_transport_v1"
#define COHORT_ADDR_MAX 512   /* largest endpoint address blob a plugin may publish */

/* Log levels for host->log. */
enum { COHORT_LOG_NONE = 0, COHORT_LOG_WARN = 1, COHORT_LOG_INFO = 2, COHORT_LOG_TRACE = 3 };

/* One network interface the core allows a network transport to use (COHORT_SOCKET_IFNAME
 * applied, loopback/docker/virbr ordered last when no setting is given). */
typedef struct cohort_netif {
    char name[32];
    int family;                  /* AF_INET or AF_INET6 */
    unsigned char addr[16];      /* network byte order: 4 bytes for AF_INET, 16 for AF_INET6 */
    unsigned int prefix_len;
    int is_loopback;
} cohort_netif_t;

/* What the core offers a plugin. Valid from init until finalize returns. */
typedef struct cohort_host_v1 {
    size_t size;
    uint32_t abi_version;
    /* Logging: one line, printf-style; the core adds host:pid rank and the subsystem. */
    void (*log)(int level, const char *subsys, const char *fmt, ...)
#if defined(__GNUC__)
        __attribute__((format(printf, 3, 4)))
#endif
        ;
    /* Records the human message for cohort_last_error() (and logs it); returns status. */
    cohort_status_t (*error)(cohort_status_t status, const char *fmt, ...)
#if defined(__GNUC__)
        __attribute__((format(printf, 2, 3)))
#endif
        ;
    /* Value of a setting (environment, then cohort.conf, then the default); NULL if unset. */
    const char *(*setting)(const char *name);
    /* Parsed integer setting: COHORT_SUCCESS, or COHORT_ERR_INVALID_ARG with a message naming
     * the variable and the bad text. When the setting is unset, COHORT_SUCCESS and *value is left
     * unchanged (preset your default). */
    cohort_status_t (*setting_long)(const char *name, long *value);
    /* The interfaces a network transport may use, best first. *count may be 0. On a
     * COHORT_SOCKET_IFNAME that matches nothing: COHORT_ERR_INVALID_ARG, message lists what exists. */
    cohort_status_t (*netifs)(const cohort_netif_t **list, int *count);
    /* HMAC-SHA256 keyed with the job secret over data; out receives 32 bytes. */
    void (*auth)(const void *data, size_t len, unsigned char out[32]);

    /* ---- ABI 1.1 (check size before use) ---- */
    /* The core's reduction kernels (the same ones its own algorithms use, so results agree
     * bit for bit). inout[i] = inout[i] OP in[i]; AVG accumulates like SUM. */
    void (*reduce)(void *inout, const void *in, size_t count, cohort_dtype_t dtype,
                   cohort_op_t op);
    /* out[i] = a[i] OP b[i]; out may equal a or b, no other overlap. */
    void (*reduce3)(void *out, const void *a, const void *b, size_t count, cohort_dtype_t dtype,
                    cohort_op_t op);
    /* For AVG: buf[i] /= nranks (integers truncate); nothing for the other ops. */
    void (*reduce_finish)(void *buf, size_t count, cohort_dtype_t dtype, cohort_op_t op,
                          int nranks);

    /* ---- ABI 1.2 (check size before use) ---- */
    /* The machine's RDMA devices by their verbs names ("mlx5_0"), nearest to this process's
     * cores first (PCI locality from the topology; ties in the machine's order). *names stays
     * valid until the same thread calls again; *count is 0 when the topology knows none (or is
     * unavailable): keep the device list's own order then. */
    cohort_status_t (*rdma_devices)(const char *const **names, int *count);

    /* ---- ABI 1.3 (check size before use) ---- */
    /* Memory from cohort_mem_alloc, which the ranks of one node may map: 1 if [ptr, ptr + len)
     * lies inside one such block of this process; then *fd is the block's memfd here (open
     * until the block is freed; a peer opens it as /proc/<pid>/fd/<fd>), *id numbers the block
     * in this process (the memfd is named "cohort-mem-<pid>-<id>": check it before mapping) and
     * *offset is ptr's offset in the block. 0 otherwise, logging nothing. */
    int (*mem_shared)(const void *ptr, size_t len, int *fd, uint64_t *id, uint64_t *offset);
} cohort_host_v1_t;

/* Transport scope. */
enum { COHORT_SCOPE_NODE = 1, COHORT_SCOPE_NETWORK = 2 };

typedef struct cohort_transport_attr {
    size_t size;
    int scope;                   /* COHORT_SCOPE_* */
    double bandwidth_gbps;       /* estimate, GB/s per peer */
    double latency_us;           /* estimate */
    int gpu_memory;              /* 1 if buffers may live in GPU memory */
    size_t max_inflight;         /* 0: unlimited */
} cohort_transport_attr_t;

/* Per-communicator description handed to ep_open. */
typedef struct cohort_ep_info {
    size_t size;
    int rank;
    int nranks;
    uint64_t comm_id;            /* distinguishes communicators of one job */
    const char *job_id;          /* NUL-terminated, at most 63 characters */
} cohort_ep_info_t;

typedef void *cohort_tp_ctx_t;   /* process-wide plugin state */
typedef void *cohort_tp_ep_t;    /* one endpoint per communicator */
typedef void *cohort_tp_conn_t;  /* one connection per peer */
typedef void *cohort_tp_req_t;   /* one outstanding send or receive */
typedef void *cohort_tp_mr_t;    /* a memory registration */

/* ---- Collectives a transport runs itself (ABI 1.1, optional) ----
 * shm: node-level collectives in shared memory; nccl: whole collectives on the GPU.
 * The core uses the table only when the plugin's abi_version has minor >= 1 (ABI 1.0 reserved
 * the pointer without a layout: a 1.0 plugin must leave it NULL, and the core ignores it), and
 * only on a communicator ALL of whose peers are connected through this plugin. */
typedef enum {
    COHORT_TP_ALLREDUCE = 0, COHORT_TP_BROADCAST = 1, COHORT_TP_REDUCE = 2,
    COHORT_TP_ALLGATHER = 3, COHORT_TP_REDUCE_SCATTER = 4, COHORT_TP_ALLTOALL = 5,
    COHORT_TP_BARRIER = 6
} cohort_tp_coll_kind_t;

typedef struct cohort_tp_coll_args {
    size_t size;                 /* sizeof as the core was built */
    int coll;                    /* cohort_tp_coll_kind_t */
    const void *sendbuf;         /* broadcast: == recvbuf */
    void *recvbuf;               /* reduce: NULL allowed off the root */
    size_t count;                /* elements, with the meaning cohort.h gives for the collective
                                    (allgather: sendcount, reduce_scatter: recvcount, alltoall:
                                    per-rank count); never 0 */
    cohort_dtype_t dtype;
    cohort_op_t op;              /* reductions only */
    int root;                    /* broadcast, reduce */
    uint64_t tag;                /* unique per collective of the communicator: ranks whose tags
                                    differ called different collectives and must get
                                    COHORT_ERR_MISMATCH (naming both), never a hang */
} cohort_tp_coll_args_t;

typedef struct cohort_transport_coll_v1 {
    size_t size;                 /* sizeof(cohort_transport_coll_v1_t) as the plugin was built */
    /* Bit mask (1u << cohort_tp_coll_kind_t) of the collectives this endpoint runs itself, asked
     * once all connections are up. Must be the same on every rank of the endpoint. */
    unsigned (*colls)(cohort_tp_ep_t ep);
    /* Starts one collective (arguments already validated by the core; the plugin reads args
     * only during this call). At most one is in flight per endpoint. Returns COHORT_SUCCESS
     * with *req = NULL when it finished at once, COHORT_SUCCESS with a request to test, or an
     * error. Never blocks. */
    cohort_status_t (*start)(cohort_tp_ep_t ep, const cohort_tp_coll_args_t *args,
                             cohort_tp_req_t *req);
    /* COHORT_SUCCESS (done, req freed), COHORT_IN_PROGRESS, or an error (req freed). While in
     * progress, *waiting_on is a rank it waits for (or -1), which the core names if it times
     * out, and *moved is 1 if this call got anywhere (the core's COHORT_TIMEOUT bounds a
     * stall, not the whole collective). ep_fd (if any) must become readable whenever test
     * could advance. Never blocks. */
    cohort_status_t (*test)(cohort_tp_req_t req, int *waiting_on, int *moved);
    /* Abandons a request after a timeout or abort; the endpoint runs no collective afterwards
     * (the core marks the communicator broken). */
    void (*cancel)(cohort_tp_req_t req);
} cohort_transport_coll_v1_t;

/* ---- Settings a plugin owns (ABI 1.5, optional) ----
 * Every COHORT_* variable a plugin reads is listed in its table, and the core treats it as one
 * of its own: cohort-info prints it, cohort.conf may set it, its value is checked at every
 * communicator's creation (even in a job that does not use the plugin), host->setting returns its
 * default, and host->setting_long checks its range. The core reads the table when it loads the
 * plugin, before init, and when a setting that no loaded table names is set (it then reads the
 * tables of every plugin on the search path, without calling their init). A name starts with
 * "COHORT_" and is no other table's (the core's or another plugin's): the loader refuses a plugin
 * whose table breaks that, naming both owners. Each plugin agrees its settings with its peers
 * itself where that matters (a hello carries what the other side must know). */
typedef enum {
    COHORT_PSET_TEXT = 0,        /* any text; max > 0: at most max characters */
    COHORT_PSET_LONG = 1,        /* a whole number in [min, max] */
    COHORT_PSET_DOUBLE = 2,      /* a number in [min, max] */
    COHORT_PSET_WORD = 3         /* one of words ("auto|0|1"), any case */
} cohort_plugin_setting_kind_t;

typedef struct cohort_plugin_setting_v1 {
    size_t size;                 /* sizeof(cohort_plugin_setting_v1_t) as the plugin was built */
    const char *name;            /* "COHORT_SHM_CMA" */
    const char *def;             /* the default as text; NULL: unset by default */
    const char *help;            /* one or two sentences for cohort-info: what, units, range */
    int kind;                    /* cohort_plugin_setting_kind_t */
    double min, max;             /* LONG, DOUBLE: the range; TEXT: the longest value (0: any) */
    const char *words;           /* WORD: the words, '|'-separated */
    /* Optional: a further check of a value that passed its kind's ("0, or 4096 and up"; a
     * grammar of the plugin's own, kind TEXT). Returns 0 when valid; else writes the reason
     * (what a valid value is; the core names the setting and quotes the value) into why and
     * returns nonzero. It may run before init and after finalize: it must not use the host
     * table or the plugin's state. */
    int (*check)(const char *value, char *why, size_t len);
} cohort_plugin_setting_v1_t;

typedef struct cohort_transport_v1 {
    size_t size;                 /* sizeof(cohort_transport_v1_t) as the plugin was built */
    uint32_t abi_version;        /* COHORT_PLUGIN_ABI_VERSION */
    const char *name;            /* "tcp": must match libcohort-<name>.so */
    const char *version;         /* the plugin's own version string */

    /* Process-wide. init may return COHORT_ERR_UNSUPPORTED (after host->error() saying why, e.g.
     * "no RDMA device") to mark the plugin unavailable on this machine. */
    cohort_status_t (*init)(const cohort_host_v1_t *host, cohort_tp_ctx_t *ctx);
    cohort_status_t (*finalize)(cohort_tp_ctx_t ctx);
    /* The core sets attr->size; write no field beyond it. */
    cohort_status_t (*get_attr)(cohort_tp_ctx_t ctx, cohort_transport_attr_t *attr);

    /* Endpoint: one per communicator. addr receives an opaque blob (at most *addrlen bytes,
     * COHORT_ADDR_MAX is always enough) that the core hands to every other rank. */
    cohort_status_t (*ep_open)(cohort_tp_ctx_t ctx, const cohort_ep_info_t *info,
                               cohort_tp_ep_t *ep, void *addr, size_t *addrlen);
    /* Closes every connection of the endpoint, even with operations in flight (they are
     * cancelled). Never blocks but for the comparison above. Returns COHORT_SUCCESS, or what
     * that comparison found (COHORT_ERR_MISMATCH after host->error: the collectives the plugin
     * ran differed between ranks), which cohort_comm_destroy returns; the endpoint is closed
     * whatever it returns. */
    cohort_status_t (*ep_close)(cohort_tp_ep_t ep);
    /* 1 if this endpoint can reach the peer whose address blob is given, else 0. The core asks
     * both sides and uses the transport for a pair only if both say 1. Called during creation
     * while every endpoint is open and listening; it may probe the peer's addresses for a
     * bounded time (tcp: COHORT_SOCKET_PROBE_MS) and remember the answer for connect. */
    int (*can_reach)(cohort_tp_ep_t ep, int peer, const void *peer_addr, size_t addrlen);

    /* Connection setup, never blocking. For each pair exactly one side calls connect and the
     * other accept (the core uses: higher rank connects to lower). Either may be called first.
     * Both return a conn at once; conn_test returns COHORT_IN_PROGRESS until it is usable,
     * then COHORT_SUCCESS, or an error. */
    cohort_status_t (*connect)(cohort_tp_ep_t ep, int peer, const void *peer_addr,
                               size_t addrlen, cohort_tp_conn_t *conn);
    cohort_status_t (*accept)(cohort_tp_ep_t ep, int peer, cohort_tp_conn_t *conn);
    cohort_status_t (*conn_test)(cohort_tp_conn_t conn);
    /* Frees every request still open on the connection (pending, or completed but not yet
     * tested); their handles are invalid afterwards. ep_close does the same for all its conns. */
    cohort_status_t (*conn_close)(cohort_tp_conn_t conn);

    /* Memory registration (optional: NULL when not needed). mr may be passed to isend/irecv. */
    cohort_status_t (*mem_reg)(cohort_tp_ep_t ep, void *buf, size_t len, cohort_tp_mr_t *mr);
    cohort_status_t (*mem_dereg)(cohort_tp_ep_t ep, cohort_tp_mr_t mr);

    /* Messages on a connection are matched in order: the n-th isend on one side matches the
     * n-th irecv on the other, in each direction independently. A receive whose incoming
     * message carries a different tag, or more bytes than len, completes with
     * COHORT_ERR_MISMATCH (message names both tags/sizes). Fewer bytes than len is allowed;
     * test reports the size. A MISMATCH consumes the offending message, so the next receive
     * matches the next message. Buffers must stay valid until the request completes.
     * Requests may be posted before conn_test reports SUCCESS (they are queued). On a failed
     * connection isend/irecv may return the error at once (with *req = NULL). A send may
     * complete only once the receiver takes the data: the core posts receives before it waits
     * on sends. */
    cohort_status_t (*isend)(cohort_tp_conn_t conn, const void *buf, size_t len, uint64_t tag,
                             cohort_tp_mr_t mr, cohort_tp_req_t *req);
    cohort_status_t (*irecv)(cohort_tp_conn_t conn, void *buf, size_t len, uint64_t tag,
                             cohort_tp_mr_t mr, cohort_tp_req_t *req);
    /* COHORT_SUCCESS (req freed, *nbytes set if nbytes != NULL), COHORT_IN_PROGRESS, or an error
     * (req freed). Makes progress on the request's connection. */
    cohort_status_t (*test)(cohort_tp_req_t req, size_t *nbytes);
    /* Advances every connection of the endpoint; returns an error only for endpoint-wide
     * failures. Never blocks. */
    cohort_status_t (*progress)(cohort_tp_ep_t ep);
    /* Optional: a file descriptor the core may poll() for readability to sleep instead of
     * spinning. -1 when none. Contract: it is readable whenever progress() could advance
     * something, including a request that completed inside another call since the last
     * progress(). After waking, the core calls progress() and then tests every request it waits
     * for before it sleeps again. */
    int (*ep_fd)(cohort_tp_ep_t ep);

    /* Optional collective table (NULL when the plugin offers none; read by the core only from
     * plugins of ABI 1.1 and later, see above). */
    const cohort_transport_coll_v1_t *coll;

    /* Optional (ABI 1.4; NULL: not offered): called before the conn_closes and the ep_close of
     * a communicator whose failure every rank of the job was told of (a mismatch, a lost peer,
     * a timeout, through the job's control channel): the other ranks do not wait for this
     * one's closing words, so the plugin may close without them (no goodbyes, no flushes).
     * conn_close and ep_close follow as always; never called otherwise. */
    void (*ep_failed)(cohort_tp_ep_t ep);

    /* Optional (ABI 1.5; NULL: none): the settings this plugin reads, a NULL-terminated array
     * (see cohort_plugin_setting_v1_t above). */
    const cohort_plugin_setting_v1_t *const *settings;
} cohort_transport_v1_t;

/* Smallest size the core accepts for each struct (the 1.0 layout). */
#define COHORT_TRANSPORT_V1_MIN_SIZE (offsetof(cohort_transport_v1_t, coll) + sizeof(void *))

/* ---- Helpers for the size-prefixed structs (header-only: not part of the ABI) ---- */

/* 1 if the struct p points to, as its writer built it (p->size), contains `field` of `type`:
 * check before reading a field added after the struct's first version. */
#define COHORT_HAS_FIELD(p, type, field) \
    ((p)->size >= offsetof(type, field) + sizeof(((const type *)0)->field))

/* The checks every ep_open makes of what it is given (pointers, the info struct's size, the
 * rank, the job id's length of at most 63 characters): COHORT_SUCCESS, or
 * COHORT_ERR_INVALID_ARG after host->error() with a message that starts with the plugin's name.
 * Sets *ep = NULL when ep is not NULL. */
static inline cohort_status_t cohort_ep_open_check(const cohort_host_v1_t *host,
                                                   const char *plugin,
                                                   const cohort_ep_info_t *info,
                                                   cohort_tp_ep_t *ep, const void *addr,
                                                   const size_t *addrlen)
{
    if (ep) *ep = NULL;
    if (!info || !ep || !addr || !addrlen)
        return host->error(COHORT_ERR_INVALID_ARG, "%s: ep_open needs info, ep, addr and "
                           "addrlen", plugin);
    if (!COHORT_HAS_FIELD(info, cohort_ep_info_t, job_id))
        return host->error(COHORT_ERR_INVALID_ARG, "%s: ep_open: cohort_ep_info_t of %zu bytes "
                           "is too small", plugin, info->size);
    if (info->nranks < 1 || info->rank < 0 || info->rank >= info->nranks)
        return host->error(COHORT_ERR_INVALID_ARG, "%s: ep_open: rank %d is not in [0,%d)",
                           plugin, info->rank, info->nranks);
    if (info->job_id && strlen(info->job_id) > 63)
        return host->error(COHORT_ERR_INVALID_ARG, "%s: ep_open: job id '%.70s...' is longer "
                           "than 63 characters", plugin, info->job_id);
    return COHORT_SUCCESS;
}

/* For get_attr: copies the fields of *src that lie inside the caller's dst->size (which stays
 * as the caller set it). */
static inline void cohort_attr_fill(cohort_transport_attr_t *dst,
                                    const cohort_transport_attr_t *src)
{
    size_t n = dst->size < sizeof *src ? dst->size : sizeof *src;
    if (n > sizeof dst->size)
        memcpy((char *)dst + sizeof dst->size, (const char *)src + sizeof src->size,
               n - sizeof dst->size);
}

/* A whole get_attr for a plugin whose attributes are its scope and two estimates (no GPU
 * memory, no limit on requests in flight): COHORT_ERR_INVALID_ARG for a NULL attr. */
static inline cohort_status_t cohort_attr_give(cohort_transport_attr_t *attr, int scope,
                                               double bandwidth_gbps, double latency_us)
{
    if (!attr) return COHORT_ERR_INVALID_ARG;
    cohort_transport_attr_t a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.scope = scope;
    a.bandwidth_gbps = bandwidth_gbps;
    a.latency_us = latency_us;
    cohort_attr_fill(attr, &a);
    return COHORT_SUCCESS;
}

#ifdef __cplusplus
}
#endif
#endif /* COHORT_PLUGIN_H */
