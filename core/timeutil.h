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
#endif
