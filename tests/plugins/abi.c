/* SPDX-License-Identifier: BSD-3-Clause */
/* libcohort-abi<...>.so: one source built once per ABI version at the bounds of what the loader
 * accepts (tests/plugins/local.mk passes the name, the major's distance from this cohort's, the
 * minor and the struct size it claims):
 *   abiprev  major - 1, minor 0xffff   refused (an older major, however high its minor)
 *   abinext  major + 1, minor 0        refused (a newer major, however low its minor)
 *   abimin   major, minor 0, the 1.0 struct size    accepted (the oldest plugin of this major)
 *   abimax   major, minor 0xffff       accepted (any minor of this major)
 * A loader comparing abi_version as one number, or the major with < or >, fails one of them. */
#include "stub.h"

#if !defined(ABI_NAME) || !defined(ABI_MAJOR_DELTA) || !defined(ABI_MINOR) || !defined(ABI_SIZE)
#error "build with -DABI_NAME -DABI_MAJOR_DELTA -DABI_MINOR -DABI_SIZE (tests/plugins/local.mk)"
#endif

STUB_EXPORT const cohort_transport_v1_t cohort_transport_v1 = {
    .size = ABI_SIZE,
    .abi_version = ((uint32_t)(COHORT_PLUGIN_ABI_MAJOR + (ABI_MAJOR_DELTA)) << 16) | (ABI_MINOR),
    .name = ABI_NAME,
    .version = "abi-test",
    STUB_FUNCTIONS(stub_init, stub_send),
};
