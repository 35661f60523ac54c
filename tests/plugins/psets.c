/* SPDX-License-Identifier: BSD-3-Clause */
/* libcohort-psets*.so: plugins with a settings table (ABI 1.5), built once per case
 * (tests/plugins/local.mk passes PSETS_NAME and PSETS_CASE) into tests/plugins/psets/, a
 * directory of their own so that the loader tests of tests/plugins/.libs do not see them:
 *   psets      a good table: a number with a range, words, and text with a check of its own
 *   psetsdup   a table naming COHORT_TIMEOUT, the core's: refused, naming the core
 *   psetsname  a table naming PSETS_X, which is not COHORT_...: refused
 * Only tests/unit/test_loader.c loads them; none moves a byte. */
#include "stub.h"

#include <stdio.h>
#include <string.h>

#if !defined(PSETS_NAME) || !defined(PSETS_CASE)
#error "build with -DPSETS_NAME and -DPSETS_CASE (tests/plugins/local.mk)"
#endif

static int spec_check(const char *value, char *why, size_t len)
{
    if (strcmp(value, "bad")) return 0;
    snprintf(why, len, "'bad' is the one spelling this test plugin refuses");
    return 1;
}

static const cohort_plugin_setting_v1_t level = {
    sizeof level, "COHORT_PSETS_LEVEL", "3", "test: a level, 1 to 9", COHORT_PSET_LONG, 1, 9,
    NULL, NULL
};
static const cohort_plugin_setting_v1_t mode = {
    sizeof mode, "COHORT_PSETS_MODE", "fast", "test: fast or safe", COHORT_PSET_WORD, 0, 0,
    "fast|safe", NULL
};
static const cohort_plugin_setting_v1_t spec = {
    sizeof spec, "COHORT_PSETS_SPEC", NULL, "test: any text but 'bad'", COHORT_PSET_TEXT, 0, 0,
    NULL, spec_check
};
static const cohort_plugin_setting_v1_t dup = {
    sizeof dup, "COHORT_TIMEOUT", "1", "test: the core's name", COHORT_PSET_LONG, 0, 9, NULL,
    NULL
};
static const cohort_plugin_setting_v1_t badname = {
    sizeof badname, "PSETS_X", "1", "test: not COHORT_", COHORT_PSET_LONG, 0, 9, NULL, NULL
};

#if PSETS_CASE == 0
static const cohort_plugin_setting_v1_t *const table[] = { &level, &mode, &spec, NULL };
#elif PSETS_CASE == 1
static const cohort_plugin_setting_v1_t *const table[] = { &level, &dup, NULL };
#else
static const cohort_plugin_setting_v1_t *const table[] = { &badname, NULL };
#endif

STUB_EXPORT const cohort_transport_v1_t cohort_transport_v1 = {
    .size = sizeof(cohort_transport_v1_t),
    .abi_version = COHORT_PLUGIN_ABI_VERSION,
    .name = PSETS_NAME,
    .version = "psets-test",
    STUB_FUNCTIONS(stub_init, stub_send),
    .settings = table,
};
