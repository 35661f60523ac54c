/* SPDX-License-Identifier: BSD-3-Clause */
#ifndef COHORT_CORE_TIMEUTIL_H
#define COHORT_CORE_TIMEUTIL_H
#include <stdint.h>
#include <time.h>
static inline uint64_t cohort_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
static inline double cohort_now_s(void) { return (double)cohort_now_ns() * 1e-9; }
/* CLOCK_MONOTONIC_COARSE (ticks of a few ms): a fraction of CLOCK_MONOTONIC's cost, for pacing
 * that runs before every collective. Not comparable with cohort_now_ns. */
static inline uint64_t cohort_coarse_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
#endif
