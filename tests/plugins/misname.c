/* SPDX-License-Identifier: BSD-3-Clause */
/* libcohort-misname.so: its name field disagrees with its file name. */
#include "stub.h"

STUB_EXPORT const cohort_transport_v1_t cohort_transport_v1 = {
    .size = sizeof(cohort_transport_v1_t),
    .abi_version = COHORT_PLUGIN_ABI_VERSION,
    .name = "othername",
    .version = "test",
    STUB_FUNCTIONS(stub_init, stub_send),
};
