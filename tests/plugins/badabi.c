/* SPDX-License-Identifier: BSD-3-Clause */
/* libcohort-badabi.so: built for a plugin ABI major this cohort does not know (99). */
#include "stub.h"

STUB_EXPORT const cohort_transport_v1_t cohort_transport_v1 = {
    .size = sizeof(cohort_transport_v1_t),
    .abi_version = (99u << 16) | 0,
    .name = "badabi",
    .version = "test",
    STUB_FUNCTIONS(stub_init, stub_send),
};
