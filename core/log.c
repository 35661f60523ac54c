/* SPDX-License-Identifier: BSD-3-Clause */
/* Logging (COHORT_DEBUG, COHORT_DEBUG_SUBSYS) and the thread-local last error. */
#include "core/log.h"
#include "core/config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define MSG_MAX 2048

static _Thread_local char last_error[MSG_MAX];
static _Thread_local int error_level = COHORT_LOG_WARN;

int cohort_error_log_level(int level)
{
    int old = error_level;
    error_level = level;
    return old;
}

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static int log_level = -1;            /* -1: not read yet */
static char log_subsys[256];          /* "" = all; else comma list, leading ^ excludes */
static _Atomic int log_rank = -1;    /* set by every communicator creation, from any thread */
static char log_host[64];
static char log_file[1024];           /* COHORT_DEBUG_FILE as set ("" = stderr) */
static int log_fd = -1;               /* log_file opened, or -1 */
static int log_fd_rank = -2;          /* the rank its name holds (%r), -2: no %r */

/* lv: COHORT_DEBUG as readers see it (one of the table's words when valid), raw: as set;
 * ss: COHORT_DEBUG_SUBSYS; file: COHORT_DEBUG_FILE. */
static void log_init_locked(const char *lv, const char *raw, const char *ss, const char *file)
{
    if (log_fd >= 0) close(log_fd);
    log_fd = -1;
    /* an invalid template is refused by the settings check (creating a communicator fails on
     * it); the log stays on stderr meanwhile */
    snprintf(log_file, sizeof log_file, "%s",
             file && cohort_log_file_check(file, NULL) == 0 ? file : "");
    log_level = COHORT_LOG_WARN;
    int bad = 0;
    if (lv) {
        if (!strcasecmp(lv, "NONE") || !strcasecmp(lv, "OFF")) log_level = COHORT_LOG_NONE;
        else if (!strcasecmp(lv, "WARN")) log_level = COHORT_LOG_WARN;
        else if (!strcasecmp(lv, "INFO")) log_level = COHORT_LOG_INFO;
        else if (!strcasecmp(lv, "TRACE")) log_level = COHORT_LOG_TRACE;
        else bad = 1;
    }
    snprintf(log_subsys, sizeof log_subsys, "%s", (ss && strcasecmp(ss, "ALL")) ? ss : "");
    if (gethostname(log_host, sizeof log_host) != 0) snprintf(log_host, sizeof log_host, "?");
    log_host[sizeof log_host - 1] = '\0';
    char *dot = strchr(log_host, '.');
    if (dot) *dot = '\0';
    if (bad) {
        /* the words and the outcome are the ones cohort_config_check gives */
        char words[128] = "?";
        const cohort_setting_t *s = cohort_setting_find("COHORT_DEBUG");
        if (s) cohort_setting_words(s, words, sizeof words);
        const char *v = raw ? raw : lv;
        fprintf(stderr, "%s:%d cohort WARN init: COHORT_DEBUG='%.96s' %s%s; logging at WARN "
                "meanwhile, and creating a communicator fails on it\n", log_host, (int)getpid(),
                v, v[strspn(v, " \t\n")] ? "is not one of " : "is set but empty; give it one of ",
                words);
    }
}

void cohort_log_reset(void)
{
    pthread_mutex_lock(&log_lock);
    log_level = -1;
    pthread_mutex_unlock(&log_lock);
}

void cohort_log_set_rank(int rank) { log_rank = rank; }

static int subsys_listed(const char *list, const char *subsys)
{
    size_t n = strlen(subsys);
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && !strncasecmp(p, subsys, n)) return 1;
        if (!end) break;
        p = end + 1;
    }
    return 0;
}

int cohort_log_enabled(int level, const char *subsys)
{
    if (log_level < 0) {
        /* Read before taking log_lock: the first read may load cohort.conf, whose warnings are
         * logged, and so come back here, before it returns. */
        const char *lv = cohort_config_get("COHORT_DEBUG");
        const char *raw = cohort_config_value("COHORT_DEBUG");
        const char *ss = cohort_config_get("COHORT_DEBUG_SUBSYS");
        const char *file = cohort_config_get("COHORT_DEBUG_FILE");
        pthread_mutex_lock(&log_lock);
        if (log_level < 0) log_init_locked(lv, raw, ss, file);
        pthread_mutex_unlock(&log_lock);
    }
    if (level > log_level || level <= COHORT_LOG_NONE) return 0;
    if (level == COHORT_LOG_WARN || !log_subsys[0] || !subsys) return 1;
    if (log_subsys[0] == '^') return !subsys_listed(log_subsys + 1, subsys);
    return subsys_listed(log_subsys, subsys);
}

int cohort_log_file_check(const char *tmpl, char *bad)
{
    if (!*tmpl) return -1;
    for (const char *p = tmpl; *p; p++) {
        if (*p != '%') continue;
        if (p[1] != 'h' && p[1] != 'p' && p[1] != 'r' && p[1] != '%') {
            if (bad) *bad = p[1];
            return -1;
        }
        p++;
    }
    return 0;
}

/* With log_lock held: the fd for a line, opening (or, when the rank its name holds has
 * changed, reopening) COHORT_DEBUG_FILE. -1: stderr (no file; or a name with %r before this
 * process knows its rank; or the file cannot be opened, said once on stderr). */
static int log_target_locked(int rank)
{
    if (!log_file[0]) return -1;
    int has_r = strstr(log_file, "%r") != NULL;
    if (log_fd >= 0 && (!has_r || log_fd_rank == rank)) return log_fd;
    if (has_r && rank < 0) return -1;
    char name[sizeof log_file + 256];
    size_t o = 0;
    for (const char *p = log_file; *p && o + 32 < sizeof name; p++) {
        if (*p != '%') {
            name[o++] = *p;
            continue;
        }
        p++;
        if (*p == 'h') o += (size_t)snprintf(name + o, sizeof name - o, "%s", log_host);
        else if (*p == 'p') o += (size_t)snprintf(name + o, sizeof name - o, "%d", (int)getpid());
        else if (*p == 'r') o += (size_t)snprintf(name + o, sizeof name - o, "%d", rank);
        else name[o++] = '%';
    }
    name[o] = '\0';
    int fd = open(name, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        char line[sizeof name + 200];
        int e = errno;
        int n = snprintf(line, sizeof line, "%s:%d cohort WARN init: COHORT_DEBUG_FILE: cannot "
                         "open '%s': %s (the directory must exist and be writable); logging to "
                         "stderr instead\n", log_host, (int)getpid(), name, strerror(e));
        if (n > 0) {
            ssize_t w = write(STDERR_FILENO, line, (size_t)n < sizeof line ? (size_t)n
                                                                           : sizeof line - 1);
            (void)w;
        }
        log_file[0] = '\0';   /* said once */
        if (log_fd >= 0) close(log_fd);
        log_fd = -1;
        return -1;
    }
    if (log_fd >= 0) close(log_fd);
    log_fd = fd;
    log_fd_rank = has_r ? rank : -2;
    return fd;
}

void cohort_vlog(int level, const char *subsys, const char *fmt, va_list ap)
{
    if (!cohort_log_enabled(level, subsys)) return;
    static const char *names[] = { "NONE", "WARN", "INFO", "TRACE" };
    char msg[MSG_MAX];
    vsnprintf(msg, sizeof msg, fmt, ap);
    char rank[16] = "";
    int lr = log_rank;
    if (lr >= 0) snprintf(rank, sizeof rank, " [%d]", lr);
    /* One write per line so lines from threads and ranks never interleave mid-line. */
    char line[MSG_MAX + 160];
    int len = snprintf(line, sizeof line, "%s:%d:%d%s cohort %s %s: %s\n", log_host,
                       (int)getpid(), (int)gettid(), rank, names[level],
                       subsys ? subsys : "core", msg);
    if (len < 0) return;
    if ((size_t)len >= sizeof line) {
        len = (int)sizeof line - 1;
        line[len - 1] = '\n';
    }
    int fd = STDERR_FILENO;
    if (log_file[0]) {
        pthread_mutex_lock(&log_lock);
        int f = log_target_locked(lr);
        /* the line is written under the lock: a reopen cannot close the fd under it */
        ssize_t w = write(f >= 0 ? f : STDERR_FILENO, line, (size_t)len);
        (void)w;
        pthread_mutex_unlock(&log_lock);
        return;
    }
    ssize_t w = write(fd, line, (size_t)len);
    (void)w;
}

void cohort_log(int level, const char *subsys, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cohort_vlog(level, subsys, fmt, ap);
    va_end(ap);
}

cohort_status_t cohort_verror(cohort_status_t status, const char *fmt, va_list ap)
{
    char msg[MSG_MAX];
    vsnprintf(msg, sizeof msg, fmt, ap);
    memcpy(last_error, msg, sizeof last_error);
    cohort_log(error_level, "error", "%s (%s)", msg, cohort_strerror(status));
    return status;
}

cohort_status_t cohort_error(cohort_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cohort_verror(status, fmt, ap);
    va_end(ap);
    return status;
}

void cohort_error_prefix(const char *fmt, ...)
{
    char ctx[512], old[MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx, sizeof ctx, fmt, ap);
    va_end(ap);
    memcpy(old, last_error, sizeof old);
    snprintf(last_error, sizeof last_error, "%.500s: %.1500s", ctx, old);
}

void cohort_error_clear(void) { last_error[0] = '\0'; }

void cohort_error_restore(const char *msg) { snprintf(last_error, sizeof last_error, "%s", msg); }

const char *cohort_last_error(void) { return last_error; }

const char *cohort_strerror(cohort_status_t status)
{
    switch (status) {
    case COHORT_SUCCESS: return "success";
    case COHORT_IN_PROGRESS: return "in progress";
    case COHORT_ERR_INVALID_ARG: return "invalid argument";
    case COHORT_ERR_NO_MEMORY: return "out of memory";
    case COHORT_ERR_SYSTEM: return "system error";
    case COHORT_ERR_TRANSPORT: return "transport error";
    case COHORT_ERR_PEER_LOST: return "peer lost";
    case COHORT_ERR_TIMEOUT: return "timed out";
    case COHORT_ERR_ABORTED: return "aborted";
    case COHORT_ERR_UNSUPPORTED: return "unsupported";
    case COHORT_ERR_MISMATCH: return "mismatch between ranks";
    case COHORT_ERR_PLUGIN: return "plugin error";
    case COHORT_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}
