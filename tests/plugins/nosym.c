/* SPDX-License-Identifier: BSD-3-Clause */
/* libcohort-nosym.so: named like a plugin but exports no cohort_transport_v1. */
#include "stub.h"

STUB_EXPORT const cohort_transport_v1_t cohort_transport_v0 = {
    .size = sizeof(cohort_transport_v1_t),
    .abi_version = COHORT_PLUGIN_ABI_VERSION,
    .name = "nosym",
    .version = "test",
    STUB_FUNCTIONS(stub_init, stub_send),
};
