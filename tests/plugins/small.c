/* SPDX-License-Identifier: BSD-3-Clause */
/* libcohort-small.so: its size field is one pointer short of the ABI 1.0 struct (as if built
 * against a header that lacked the last field). */
#include "stub.h"

STUB_EXPORT const cohort_transport_v1_t cohort_transport_v1 = {
    .size = COHORT_TRANSPORT_V1_MIN_SIZE - sizeof(void *),
    .abi_version = COHORT_PLUGIN_ABI_VERSION,
    .name = "small",
    .version = "test",
    STUB_FUNCTIONS(stub_init, stub_send),
};
