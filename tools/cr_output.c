/* SPDX-License-Identifier: BSD-3-Clause */
/* The relay of the ranks' output: each rank's stdout and stderr pipes are read into a line
 * buffer and written to cohortrun's own stdout and stderr a whole line at a time (with
 * --tag-output, each line prefixed with its rank), so that the lines of different ranks do not
 * interleave. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "tools/cr_int.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#define LINE_MAX_BYTES 65536    /* longer lines are cut (a newline is inserted) */

static void write_out(job_t *job, int s, struct iovec *iov, int cnt)
{
    int fd = s == 0 ? STDOUT_FILENO : STDERR_FILENO;
    if (job->out_dead[s]) return;
    while (cnt > 0) {
        if (iov->iov_len == 0) {
            iov++;
            cnt--;
            continue;
        }
        ssize_t w = writev(fd, iov, cnt);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN) {   /* our stdout was left non-blocking by someone */
                struct pollfd pf = { .fd = fd, .events = POLLOUT };
                poll(&pf, 1, 100);
                continue;
            }
            job->out_dead[s] = 1;    /* EPIPE and friends: nobody is reading; discard */
            return;
        }
        while (cnt > 0 && (size_t)w >= iov->iov_len) {
            w -= (ssize_t)iov->iov_len;
            iov++;
            cnt--;
        }
        if (cnt > 0) {
            iov->iov_base = (char *)iov->iov_base + w;
            iov->iov_len -= (size_t)w;
        }
    }
}

static void emit(job_t *job, int s, int rank, const char *data, size_t len, int add_newline)
{
    char prefix[24];
    size_t plen = 0;
    if (job->o->tag_output) plen = (size_t)snprintf(prefix, sizeof prefix, "[%d] ", rank);
    static char nl[] = "\n";
    struct iovec iov[3] = { { prefix, plen }, { (void *)data, len }, { nl, add_newline ? 1 : 0 } };
    write_out(job, s, iov, 3);
}

/* Writes out the complete lines in the buffer (all of it with flush_partial). */
static void stream_flush(job_t *job, rank_proc_t *p, int s, int flush_partial)
{
    stream_t *st = &p->out[s];
    size_t start = 0;
    if (job->o->tag_output) {
        for (size_t i = 0; i < st->len; i++)
            if (st->buf[i] == '\n') {
                emit(job, s, p->rank, st->buf + start, i + 1 - start, 0);
                start = i + 1;
            }
    } else {
        for (size_t i = st->len; i > 0; i--)
            if (st->buf[i - 1] == '\n') {
                emit(job, s, p->rank, st->buf, i, 0);
                start = i;
                break;
            }
    }
    if (start < st->len && (flush_partial || (start == 0 && st->len >= LINE_MAX_BYTES))) {
        emit(job, s, p->rank, st->buf + start, st->len - start, 1);
        start = st->len;
    }
    if (start > 0) {
        memmove(st->buf, st->buf + start, st->len - start);
        st->len -= start;
    }
}

void cr_stream_close(job_t *job, rank_proc_t *p, int s)
{
    stream_t *st = &p->out[s];
    if (st->len) stream_flush(job, p, s, 1);
    if (st->fd >= 0) close(st->fd);
    st->fd = -1;
    free(st->buf);
    st->buf = NULL;
    st->len = 0;
}

/* One read (or, with drain, until the pipe is empty). */
void cr_stream_read(job_t *job, rank_proc_t *p, int s, int drain)
{
    stream_t *st = &p->out[s];
    while (st->fd >= 0) {
        if (!st->buf) st->buf = cr_xcalloc(LINE_MAX_BYTES, 1);
        ssize_t k = read(st->fd, st->buf + st->len, LINE_MAX_BYTES - st->len);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (k <= 0) {   /* EOF or error */
            cr_stream_close(job, p, s);
            return;
        }
        st->len += (size_t)k;
        stream_flush(job, p, s, 0);
        if (!drain) return;
    }
}
