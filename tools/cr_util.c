/* SPDX-License-Identifier: BSD-3-Clause */
/* cohortrun's small helpers, used by every part of it: allocation that ends the program when
 * memory runs out (the launcher has no way on without it), its own one-line messages and usage
 * errors, and the quiet library calls whose failure it reports itself. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "core/log.h"
#include "tools/cr_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void die_oom(void)
{
    static const char msg[] = "cohortrun: out of memory\n";
    ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)w;
    _exit(1);
}

void *cr_xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) die_oom();
    return p;
}

void *cr_xrealloc(void *p, size_t size)
{
    void *q = realloc(p, size ? size : 1);
    if (!q) die_oom();
    return q;
}

char *cr_xstrdup(const char *s)
{
    char *p = strdup(s);
    if (!p) die_oom();
    return p;
}

char *cr_xasprintf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (n < 0) die_oom();
    return s;
}

/* cohortrun's own messages: one line on stderr, "cohortrun: ..." */
void cr_msg(const char *fmt, ...)
{
    char line[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(line, sizeof line, "cohortrun: ");
    n += vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof line - 2) n = (int)sizeof line - 2;
    line[n++] = '\n';
    for (size_t off = 0; off < (size_t)n;) {
        ssize_t w = write(STDERR_FILENO, line + off, (size_t)n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        off += (size_t)w;
    }
}

void cr_usage_error(const char *fmt, ...)
{
    char text[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    cr_msg("%s", text);
    cr_msg("try 'cohortrun --help'");
    exit(EXIT_USAGE);
}

/* Library calls whose failure cohortrun reports itself (from cohort_last_error()) run quietly,
 * so the message is not printed twice: COHORT_DEBUG=NONE for their duration unless the user set
 * COHORT_DEBUG. */
static int quiet_set;
void cr_quiet_begin(void)
{
    if (getenv("COHORT_DEBUG")) return;
    setenv("COHORT_DEBUG", "NONE", 1);
    quiet_set = 1;
    cohort_log_reset();
}
void cr_quiet_end(void)
{
    if (!quiet_set) return;
    unsetenv("COHORT_DEBUG");
    quiet_set = 0;
    cohort_log_reset();
}

const char *cr_plural(long n, const char *one, const char *many) { return n == 1 ? one : many; }
