/* SPDX-License-Identifier: BSD-3-Clause */
/* Trivial transport functions shared by the deliberately broken test plugins (and the good
 * "future" one): init/finalize/get_attr work, everything else says COHORT_ERR_UNSUPPORTED.
 * Only tests/unit/test_loader.c loads these; none of them moves a byte. */
#ifndef COHORT_TEST_PLUGIN_STUB_H
#define COHORT_TEST_PLUGIN_STUB_H

#include <cohort/plugin.h>

#define STUB_EXPORT __attribute__((visibility("default")))

static inline cohort_status_t stub_init(const cohort_host_v1_t *host, cohort_tp_ctx_t *ctx)
{
    (void)host;
    *ctx = NULL;
    return COHORT_SUCCESS;
}
static inline cohort_status_t stub_finalize(cohort_tp_ctx_t ctx)
{
    (void)ctx;
    return COHORT_SUCCESS;
}
static inline cohort_status_t stub_get_attr(cohort_tp_ctx_t ctx, cohort_transport_attr_t *attr)
{
    (void)ctx;
    if (attr->size >= offsetof(cohort_transport_attr_t, latency_us) + sizeof(double)) {
        attr->scope = COHORT_SCOPE_NETWORK;
        attr->bandwidth_gbps = 0.001;       /* never preferred over a real transport */
        attr->latency_us = 1e6;
    }
    return COHORT_SUCCESS;
}
static inline cohort_status_t stub_ep_open(cohort_tp_ctx_t ctx, const cohort_ep_info_t *info,
                                           cohort_tp_ep_t *ep, void *addr, size_t *addrlen)
{
    (void)ctx; (void)info; (void)ep; (void)addr; (void)addrlen;
    return COHORT_ERR_UNSUPPORTED;
}
static inline cohort_status_t stub_ep_close(cohort_tp_ep_t ep)
{
    (void)ep;
    return COHORT_ERR_UNSUPPORTED;
}
static inline int stub_can_reach(cohort_tp_ep_t ep, int peer, const void *addr, size_t len)
{
    (void)ep; (void)peer; (void)addr; (void)len;
    return 0;
}
static inline cohort_status_t stub_connect(cohort_tp_ep_t ep, int peer, const void *addr,
                                           size_t len, cohort_tp_conn_t *conn)
{
    (void)ep; (void)peer; (void)addr; (void)len; (void)conn;
    return COHORT_ERR_UNSUPPORTED;
}
static inline cohort_status_t stub_accept(cohort_tp_ep_t ep, int peer, cohort_tp_conn_t *conn)
{
    (void)ep; (void)peer; (void)conn;
    return COHORT_ERR_UNSUPPORTED;
}
static inline cohort_status_t stub_conn(cohort_tp_conn_t conn)
{
    (void)conn;
    return COHORT_ERR_UNSUPPORTED;
}
static inline cohort_status_t stub_post(cohort_tp_conn_t conn, void *buf, size_t len,
                                        uint64_t tag, cohort_tp_mr_t mr, cohort_tp_req_t *req)
{
    (void)conn; (void)buf; (void)len; (void)tag; (void)mr; (void)req;
    return COHORT_ERR_UNSUPPORTED;
}
static inline cohort_status_t stub_send(cohort_tp_conn_t conn, const void *buf, size_t len,
                                        uint64_t tag, cohort_tp_mr_t mr, cohort_tp_req_t *req)
{
    return stub_post(conn, (void *)buf, len, tag, mr, req);
}
static inline cohort_status_t stub_test(cohort_tp_req_t req, size_t *nbytes)
{
    (void)req; (void)nbytes;
    return COHORT_ERR_UNSUPPORTED;
}
static inline cohort_status_t stub_progress(cohort_tp_ep_t ep)
{
    (void)ep;
    return COHORT_SUCCESS;
}

/* Designated initialisers for every mandatory function; each test plugin passes its own init
 * and isend (NULL in nullfn.c). */
#define STUB_FUNCTIONS(init_fn, isend_fn)                                                 \
    .init = init_fn, .finalize = stub_finalize, .get_attr = stub_get_attr,                 \
    .ep_open = stub_ep_open, .ep_close = stub_ep_close, .can_reach = stub_can_reach,       \
    .connect = stub_connect, .accept = stub_accept, .conn_test = stub_conn,                \
    .conn_close = stub_conn, .isend = isend_fn, .irecv = stub_post, .test = stub_test,     \
    .progress = stub_progress

#endif
