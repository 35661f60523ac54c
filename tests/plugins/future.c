/* SPDX-License-Identifier: BSD-3-Clause */
/* libcohort-future.so: a GOOD plugin from a future ABI 1.7, whose struct has grown by appending
 * fields this cohort does not know. The core must accept it and use only the 1.0 fields. */
#include "stub.h"

typedef struct future_transport {
    cohort_transport_v1_t v1;               /* the 1.0 layout, unchanged, first */
    cohort_status_t (*flush)(cohort_tp_conn_t conn);    /* "added in 1.3" */
    const char *features;                               /* "added in 1.7" */
    uint64_t reserved[4];
} future_transport_t;

STUB_EXPORT const future_transport_t cohort_transport_v1 = {
    .v1 = {
        .size = sizeof(future_transport_t),
        .abi_version = ((uint32_t)COHORT_PLUGIN_ABI_MAJOR << 16) | 7,
        .name = "future",
        .version = "1.7-test",
        STUB_FUNCTIONS(stub_init, stub_send),
    },
    .flush = stub_conn,
    .features = "everything",
};
