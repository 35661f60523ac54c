/* SPDX-License-Identifier: BSD-3-Clause */
/* The plugin kit (transports/common/, see kit_bytes.h): failure messages. A connection that
 * fails keeps one message (what failed, with which peer, what to try) that every request on
 * it reports; a request that fails alone keeps its own. Both reach the caller through
 * host->error when the request is tested (kit_req_outcome), so cohort_last_error names them.
 * Also the first checks of the arguments of connect, accept, isend and irecv, with their
 * messages (kit_conn_args, kit_post_args). */
#ifndef COHORT_KIT_FAIL_H
#define COHORT_KIT_FAIL_H

#include <cohort/plugin.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A connection's failure: its message formatted into msg (size bytes) and logged at INFO
 * (the WARN comes from the core, once, with the collective that failed). */
static inline void kit_fail_note(const cohort_host_v1_t *host, const char *subsys, char *msg,
                                 size_t size, const char *fmt, va_list ap)
{
    vsnprintf(msg, size, fmt, ap);
    host->log(COHORT_LOG_INFO, subsys, "%s", msg);
}

/* The first lines of every transport's conn_fail(c, st, fmt, ...): a connection fails once
 * (a second failure keeps the first message and returns), its message is noted, its state
 * becomes failed_state and its error st. The connection struct has, by the kit's convention,
 * state, err, errmsg (an array) and ep->host; the caller's SUBSYS names the log subsystem. */
#define KIT_CONN_FAIL_ONCE(c, failed_state, st, fmt)                                      \
    do {                                                                                  \
        if ((c)->state == (failed_state)) return;                                         \
        va_list kit_ap_;                                                                  \
        va_start(kit_ap_, fmt);                                                           \
        kit_fail_note((c)->ep->host, SUBSYS, (c)->errmsg, sizeof (c)->errmsg, fmt, kit_ap_); \
        va_end(kit_ap_);                                                                  \
        (c)->state = (failed_state);                                                      \
        (c)->err = (st);                                                                  \
    } while (0)

/* A request's own message: *msg (malloc'd, or NULL) replaced by the formatted text. Without
 * memory for it, *msg stays NULL and the connection's message is reported instead. */
static inline void kit_msg_set(char **msg, const char *fmt, va_list ap)
{
    char buf[512];
    vsnprintf(buf, sizeof buf, fmt, ap);
    free(*msg);
    *msg = strdup(buf);
}

/* What test() returns for a finished request: st; on success *nbytes (if asked) gets got, on
 * failure host->error records the request's message, or the connection's when it has none. */
static inline cohort_status_t kit_req_outcome(const cohort_host_v1_t *host, cohort_status_t st,
                                              size_t got, size_t *nbytes, const char *req_msg,
                                              const char *conn_msg)
{
    if (st == COHORT_SUCCESS) {
        if (nbytes) *nbytes = got;
        return st;
    }
    return host->error(st, "%s", req_msg ? req_msg : conn_msg);
}

/* The first checks of a connect or accept (call) to or from rank peer: a conn pointer (its
 * *connp becomes NULL), and a peer in [0, nranks) other than this rank. COHORT_SUCCESS, or
 * COHORT_ERR_INVALID_ARG after host->error naming the call; plugin is the plugin's name. */
static inline cohort_status_t kit_conn_args(const cohort_host_v1_t *host, const char *plugin,
                                            const char *call, int rank, int nranks, int peer,
                                            cohort_tp_conn_t *connp)
{
    if (!connp)
        return host->error(COHORT_ERR_INVALID_ARG, "%s: %s needs a conn pointer", plugin, call);
    *connp = NULL;
    if (peer < 0 || peer >= nranks || peer == rank)
        return host->error(COHORT_ERR_INVALID_ARG, "%s: %s: rank %d is not a peer in [0,%d) of "
                           "rank %d", plugin, call, peer, nranks, rank);
    return COHORT_SUCCESS;
}

/* The first checks of an isend or irecv (is_send) to or from rank peer: a request pointer (its
 * *reqp becomes NULL), and a buffer unless len is 0 (COHORT_ERR_INVALID_ARG after host->error
 * naming the call; plugin is the plugin's name, "tcp"); then the connection itself: when
 * conn_err is an error (the conn failed, or can take no more of this kind), that error with the
 * connection's message conn_msg. COHORT_SUCCESS when the request may be posted. */
static inline cohort_status_t kit_post_args(const cohort_host_v1_t *host, const char *plugin,
                                            int is_send, const void *buf, size_t len, int peer,
                                            cohort_tp_req_t *reqp, cohort_status_t conn_err,
                                            const char *conn_msg)
{
    if (!reqp)
        return host->error(COHORT_ERR_INVALID_ARG, "%s: isend/irecv need a request pointer",
                           plugin);
    *reqp = NULL;
    if (len && !buf)
        return host->error(COHORT_ERR_INVALID_ARG, "%s: %s of %zu bytes with a NULL buffer "
                           "(rank %d)", plugin, is_send ? "isend" : "irecv", len, peer);
    if (conn_err) return host->error(conn_err, "%s", conn_msg);
    return COHORT_SUCCESS;
}

#endif /* COHORT_KIT_FAIL_H */
