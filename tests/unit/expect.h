/* SPDX-License-Identifier: BSD-3-Clause */
/* Check assertions on a cohort call's status and its cohort_last_error() message, shared by the
 * unit tests. */
#ifndef COHORT_TESTS_UNIT_EXPECT_H
#define COHORT_TESTS_UNIT_EXPECT_H

#include <check.h>
#include <string.h>
#include "cohort/cohort.h"

/* The call returns status and the message contains each needle. */
#define EXPECT_STATUS(call, status, ...)                                                      \
    do {                                                                                      \
        cohort_status_t st_ = (call);                                                         \
        ck_assert_msg(st_ == (status), "%s returned %d, message '%s'", #call, (int)st_,       \
                      cohort_last_error());                                                   \
        const char *needles_[] = {__VA_ARGS__};                                               \
        for (size_t k_ = 0; k_ < sizeof needles_ / sizeof needles_[0]; k_++)                  \
            ck_assert_msg(strstr(cohort_last_error(), needles_[k_]) != NULL,                  \
                          "%s: message '%s' does not mention '%s'", #call,                     \
                          cohort_last_error(), needles_[k_]);                                 \
    } while (0)

#define EXPECT_OK(call)                                                                       \
    do {                                                                                      \
        cohort_status_t st_ = (call);                                                         \
        ck_assert_msg(st_ == COHORT_SUCCESS, "%s returned %d: %s", #call, (int)st_,           \
                      cohort_last_error());                                                   \
    } while (0)

#endif
