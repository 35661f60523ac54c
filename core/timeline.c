/* SPDX-License-Identifier: BSD-3-Clause */
/* COHORT_TIMELINE (core/timeline.h). */
#include "core/timeline.h"
#include "core/comm.h"
#include "core/config.h"
#include "core/log.h"
#include "core/timeutil.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t tl_lock = PTHREAD_MUTEX_INITIALIZER;
static int tl_fd = -1;
static int tl_users;          /* communicators attached (the file stays open until exit) */
static int tl_pid;            /* the "pid" of every event: the rank the file is named for */
static unsigned tl_comms;     /* communicators ever attached: numbers their tracks */

uint64_t cohort_timeline_now(void) { return cohort_now_ns(); }

int cohort_timeline_on(const cohort_comm_t *comm) { return comm->tl_track > 0; }

void cohort_timeline_escape(char *out, size_t len, const char *text)
{
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)text; *p && o + 7 < len; p++) {
        if (*p == '"' || *p == '\\') {
            out[o++] = '\\';
            out[o++] = (char)*p;
        } else if (*p < 0x20) {
            o += (size_t)snprintf(out + o, len - o, "\\u%04x", *p);
        } else {
            out[o++] = (char)*p;
        }
    }
    out[o < len ? o : len - 1] = '\0';
}

static void put_line(const char *line, size_t n)
{
    /* one write per event: O_APPEND keeps lines whole between threads and communicators */
    ssize_t w = write(tl_fd, line, n);
    (void)w;
}

static void name_track(int tid, const char *name)
{
    char line[512];
    int n = snprintf(line, sizeof line, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,"
                     "\"tid\":%d,\"args\":{\"name\":\"%s\"}},\n", tl_pid, tid, name);
    if (n > 0) put_line(line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

/* At exit: the closing event and "]" (a crash leaves them out, which the viewers accept). */
static void close_at_exit(void)
{
    pthread_mutex_lock(&tl_lock);
    if (tl_fd >= 0) {
        char line[160];
        int n = snprintf(line, sizeof line, "{\"name\":\"exit\",\"ph\":\"i\",\"s\":\"p\","
                         "\"pid\":%d,\"tid\":0,\"ts\":%.3f}\n]\n", tl_pid,
                         (double)cohort_timeline_now() / 1e3);
        if (n > 0) put_line(line, (size_t)n);
        close(tl_fd);
        tl_fd = -1;
    }
    pthread_mutex_unlock(&tl_lock);
}

cohort_status_t cohort_timeline_attach(cohort_comm_t *comm)
{
    const char *path = cohort_config_get("COHORT_TIMELINE");
    if (!path || !*path) return COHORT_SUCCESS;
    pthread_mutex_lock(&tl_lock);
    if (tl_fd < 0) {
        /* the job's rank (a node or split communicator may open it first) */
        int me = comm->world_of ? comm->world_of[comm->rank] : comm->rank;
        char file[4096];
        size_t o = 0;
        for (const char *p = path; *p && o + 16 < sizeof file; p++) {
            if (p[0] == '%' && p[1] == 'r') {
                o += (size_t)snprintf(file + o, sizeof file - o, "%d", me);
                p++;
            } else {
                file[o++] = *p;
            }
        }
        file[o] = '\0';
        tl_fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
        if (tl_fd < 0) {
            int e = errno;
            pthread_mutex_unlock(&tl_lock);
            return cohort_error(COHORT_ERR_INVALID_ARG, "rank %d: COHORT_TIMELINE: cannot "
                                "create '%s': %s (the directory must exist and be writable; "
                                "%%r becomes the rank)", me, file, strerror(e));
        }
        tl_pid = me;
        atexit(close_at_exit);
        put_line("[\n", 2);
        char line[256];
        int n = snprintf(line, sizeof line, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,"
                         "\"args\":{\"name\":\"rank %d\"}},\n", tl_pid, tl_pid);
        if (n > 0) put_line(line, (size_t)n);
    }
    tl_users++;
    unsigned k = ++tl_comms;
    comm->tl_track = (int)k * 4;
    char name[160];
    static const char *const lanes[3] = { "operations", "requests", "phases" };
    for (int lane = 0; lane < 3; lane++) {
        snprintf(name, sizeof name, "communicator %u (%016llx, rank %d of %d): %s", k,
                 (unsigned long long)comm->comm_id, comm->rank, comm->nranks, lanes[lane]);
        name_track(comm->tl_track + lane, name);
    }
    pthread_mutex_unlock(&tl_lock);
    return COHORT_SUCCESS;
}

void cohort_timeline_detach(cohort_comm_t *comm)
{
    if (comm->tl_track <= 0) return;
    comm->tl_track = 0;
    pthread_mutex_lock(&tl_lock);
    tl_users--;
    pthread_mutex_unlock(&tl_lock);
}


void cohort_timeline_event(cohort_comm_t *comm, int track, const char *name, uint64_t t0,
                           uint64_t t1, const char *args)
{
    if (comm->tl_track <= 0) return;
    char esc[512], line[2048];
    cohort_timeline_escape(esc, sizeof esc, name);
    int n = snprintf(line, sizeof line, "{\"name\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,"
                     "\"ts\":%.3f,\"dur\":%.3f,\"args\":{%s}},\n", esc, tl_pid,
                     comm->tl_track + track, (double)t0 / 1e3,
                     (double)(t1 > t0 ? t1 - t0 : 0) / 1e3, args ? args : "");
    if (n <= 0) return;
    if ((size_t)n >= sizeof line) {
        /* args too long: the event without them, still valid JSON */
        n = snprintf(line, sizeof line, "{\"name\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,"
                     "\"ts\":%.3f,\"dur\":%.3f},\n", esc, tl_pid, comm->tl_track + track,
                     (double)t0 / 1e3, (double)(t1 > t0 ? t1 - t0 : 0) / 1e3);
        if (n <= 0 || (size_t)n >= sizeof line) return;
    }
    pthread_mutex_lock(&tl_lock);
    if (tl_fd >= 0) put_line(line, (size_t)n);
    pthread_mutex_unlock(&tl_lock);
}
