/* SPDX-License-Identifier: BSD-3-Clause */
/* The plugin kit (transports/common/, see kit_bytes.h): the table a plugin exports.
 *
 * Every plugin exports one symbol, `cohort_transport_v1` (include/cohort/plugin.h). Written out,
 * it is a designated initialiser of some 25 lines, most of them `.entry = prefix_entry`.
 * KIT_TRANSPORT_V1(prefix, name, version, ...) writes it when the plugin names its functions
 * after the entries, with one prefix: KIT_TRANSPORT_V1(tcp, "tcp", TCP_PLUGIN_VERSION,
 * .settings = tcp_settings) is exactly
 *
 *     __attribute__((visibility("default")))
 *     const cohort_transport_v1_t cohort_transport_v1 = {
 *         .size = sizeof(cohort_transport_v1_t),
 *         .abi_version = COHORT_PLUGIN_ABI_VERSION,
 *         .name = "tcp",
 *         .version = TCP_PLUGIN_VERSION,
 *         .init = tcp_init,
 *         .finalize = tcp_finalize,
 *         .get_attr = tcp_get_attr,
 *         .ep_open = tcp_ep_open,
 *         .ep_close = tcp_ep_close,
 *         .can_reach = tcp_can_reach,
 *         .connect = tcp_connect,
 *         .accept = tcp_accept,
 *         .conn_test = tcp_conn_test,
 *         .conn_close = tcp_conn_close,
 *         .isend = tcp_isend,
 *         .irecv = tcp_irecv,
 *         .test = tcp_test,
 *         .progress = tcp_progress,
 *         .ep_fd = tcp_ep_fd,
 *         .settings = tcp_settings,
 *     };
 *
 * The entries every transport has (init to ep_fd, but mem_reg and mem_dereg) come from the
 * prefix; the optional ones (mem_reg, mem_dereg, coll, ep_failed, settings) are named after the
 * version, as designated initialisers (at least one), and those left out are NULL. A plugin whose
 * names do not follow the pattern writes the table out as above; the ABI knows no macro.
 *
 * KIT_EP_FD(fn, type, field) defines the usual ep_fd: `static int fn(cohort_tp_ep_t ep)`, the
 * descriptor in field of the plugin's endpoint struct (type), -1 for a NULL endpoint. */
#ifndef COHORT_KIT_TABLE_H
#define COHORT_KIT_TABLE_H

#include <cohort/plugin.h>

#define KIT_TRANSPORT_V1(prefix, name_, version_, ...)        \
    __attribute__((visibility("default")))                    \
    const cohort_transport_v1_t cohort_transport_v1 = {       \
        .size = sizeof(cohort_transport_v1_t),                \
        .abi_version = COHORT_PLUGIN_ABI_VERSION,             \
        .name = name_,                                        \
        .version = version_,                                  \
        .init = prefix##_init,                                \
        .finalize = prefix##_finalize,                        \
        .get_attr = prefix##_get_attr,                        \
        .ep_open = prefix##_ep_open,                          \
        .ep_close = prefix##_ep_close,                        \
        .can_reach = prefix##_can_reach,                      \
        .connect = prefix##_connect,                          \
        .accept = prefix##_accept,                            \
        .conn_test = prefix##_conn_test,                      \
        .conn_close = prefix##_conn_close,                    \
        .isend = prefix##_isend,                              \
        .irecv = prefix##_irecv,                              \
        .test = prefix##_test,                                \
        .progress = prefix##_progress,                        \
        .ep_fd = prefix##_ep_fd,                              \
        __VA_ARGS__                                           \
    }

#define KIT_EP_FD(fn, type, field)                            \
    static int fn(cohort_tp_ep_t ep)                          \
    {                                                         \
        return ep ? ((type *)ep)->field : -1;                 \
    }

#endif
