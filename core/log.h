/* SPDX-License-Identifier: BSD-3-Clause */
/* Logging and the one error idiom of cohort.
 *
 * Every failure path does:   return cohort_error(COHORT_ERR_X, "what failed ... what to try");
 * which records the message for cohort_last_error() (thread-local), logs it at WARN and returns
 * the status, so the caller propagates it unchanged.
 */
#ifndef COHORT_CORE_LOG_H
#define COHORT_CORE_LOG_H

#include <stdarg.h>
#include "cohort/cohort.h"
#include "cohort/plugin.h"   /* COHORT_LOG_* levels */

#if defined(__GNUC__)
#define COHORT_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define COHORT_PRINTF(a, b)
#endif

/* Reads COHORT_DEBUG / COHORT_DEBUG_SUBSYS (once, lazily). */
int cohort_log_enabled(int level, const char *subsys);
void cohort_log(int level, const char *subsys, const char *fmt, ...) COHORT_PRINTF(3, 4);
void cohort_vlog(int level, const char *subsys, const char *fmt, va_list ap);
/* 0 when tmpl is a valid COHORT_DEBUG_FILE (not empty; % only as %h, %p, %r or %%), else -1
 * with *bad (if bad) the character after the offending %. */
int cohort_log_file_check(const char *tmpl, char *bad);
/* The rank shown in log prefixes (-1: unknown yet). */
void cohort_log_set_rank(int rank);
/* Re-read COHORT_DEBUG* (for tests). */
void cohort_log_reset(void);

cohort_status_t cohort_error(cohort_status_t status, const char *fmt, ...) COHORT_PRINTF(2, 3);
cohort_status_t cohort_verror(cohort_status_t status, const char *fmt, va_list ap);
/* Prepends context to the current thread's last error: "ctx: <old message>". */
void cohort_error_prefix(const char *fmt, ...) COHORT_PRINTF(1, 2);
void cohort_error_clear(void);
/* Makes msg this thread's last error without logging it: an error recorded (and logged) in
 * another thread, handed over (a non-blocking call's, core/engine.c). */
void cohort_error_restore(const char *msg);
/* Level at which this thread logs recorded errors (default WARN); returns the previous one. The
 * loader lowers it to INFO while probing optional plugins so an absent device is not a warning. */
int cohort_error_log_level(int level);

#define COHORT_WARN(subsys, ...)  cohort_log(COHORT_LOG_WARN, subsys, __VA_ARGS__)
#define COHORT_INFO(subsys, ...)  cohort_log(COHORT_LOG_INFO, subsys, __VA_ARGS__)
#define COHORT_TRACE(subsys, ...) cohort_log(COHORT_LOG_TRACE, subsys, __VA_ARGS__)

#endif
