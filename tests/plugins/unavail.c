/* SPDX-License-Identifier: BSD-3-Clause */
/* libcohort-unavail.so: valid, but init says it cannot run on this machine. */
#include "stub.h"

static cohort_status_t unavail_init(const cohort_host_v1_t *host, cohort_tp_ctx_t *ctx)
{
    *ctx = NULL;
    return host->error(COHORT_ERR_UNSUPPORTED, "unavailable: no such device");
}

STUB_EXPORT const cohort_transport_v1_t cohort_transport_v1 = {
    .size = sizeof(cohort_transport_v1_t),
    .abi_version = COHORT_PLUGIN_ABI_VERSION,
    .name = "unavail",
    .version = "test",
    STUB_FUNCTIONS(unavail_init, stub_send),
};
