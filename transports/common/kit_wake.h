/* SPDX-License-Identifier: BSD-3-Clause */
/* The plugin kit (transports/common/, see kit_bytes.h): the wake-up of ep_fd.
 *
 * The rule (include/cohort/plugin.h, ep_fd): the fd is readable whenever progress() could
 * advance something, including a request that completed inside another call since the last
 * progress(). The core tests what it waits for and then sleeps in poll(ep_fd); a request that
 * completes inside some other call (another request's test, a conn_test, an isend) must make
 * the fd readable, or the core sleeps over it. Two cases need no wake-up:
 *   - inside progress() (in_progress): the core tests every request it waits for after
 *     progress() returns, so it sees whatever completed there;
 *   - a wake-up is pending already (pending): the fd stays readable until the next drain.
 * Else the transport marks a wake-up pending and pokes its fd. The transport's own call that
 * is about a request (its test) may skip the request it is about: its caller sees that one.
 *
 * Threads: none of this is atomic. The core drives an endpoint from one thread at a time (the
 * communicator's progress thread, or the caller under the engine's lock), and every function
 * here is called from inside a plugin call on that endpoint (or from a callback of the library
 * it drives, which runs inside such a call); in_progress and pending belong to that thread.
 *
 * Transports that poke an eventfd of their own (tcp, verbs: one added to the epoll set that is
 * their ep_fd) use all of it: kit_wake_open, kit_wake_signal, kit_wake_drain, kit_wake_close.
 * A transport whose poke is the library's (ucx: ucp_worker_signal on the worker whose fd is
 * ep_fd) uses kit_wake_claim, the decision alone, and pokes itself when it returns 1. shm does
 * not use it: its wake socket is shared with other processes (see shm_wake.c). */
#ifndef COHORT_KIT_WAKE_H
#define COHORT_KIT_WAKE_H

#include <errno.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

typedef struct kit_wake {
    int fd;            /* the eventfd (kit_wake_open), or -1: none (a transport that pokes
                        * something else, or an endpoint half set up) */
    int in_progress;   /* set by the transport around its progress(): no wake-up needed then */
    int pending;       /* a wake-up was sent and not drained yet: the fd is readable */
} kit_wake_t;

/* The decision: 1 if a wake-up is due now (not inside progress(), none pending), and then it is
 * marked pending; 0 if none is needed. The caller that gets 1 pokes its fd. */
static inline int kit_wake_claim(kit_wake_t *w)
{
    if (w->in_progress || w->pending) return 0;
    w->pending = 1;
    return 1;
}

/* Opens the eventfd (non-blocking, close-on-exec), nothing pending: returns w->fd, -1 with errno
 * set on failure (w->fd is -1 then). */
static inline int kit_wake_open(kit_wake_t *w)
{
    w->in_progress = 0;
    w->pending = 0;
    w->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    return w->fd;
}

/* The wake-up rule over the eventfd: pokes it when kit_wake_claim says a wake-up is due. A write
 * that fails leaves nothing pending (the next call tries again), but for EAGAIN: the counter is
 * full, so the fd is readable anyway. */
static inline void kit_wake_signal(kit_wake_t *w)
{
    if (w->fd < 0 || !kit_wake_claim(w)) return;
    uint64_t one = 1;
    ssize_t n;
    do n = write(w->fd, &one, sizeof one);
    while (n < 0 && errno == EINTR);
    if (n < 0 && errno != EAGAIN) w->pending = 0;
}

/* Empties the eventfd (it is not readable afterwards, until the next poke) and clears pending. */
static inline void kit_wake_drain(kit_wake_t *w)
{
    uint64_t v;
    ssize_t n;
    do n = read(w->fd, &v, sizeof v);
    while (n < 0 && errno == EINTR);
    w->pending = 0;
}

/* Closes the eventfd, if open (a transport that keeps it in an epoll set may remove it first,
 * or close it itself: closing drops it from the set). */
static inline void kit_wake_close(kit_wake_t *w)
{
    if (w->fd >= 0) (void)close(w->fd);
    w->fd = -1;
    w->pending = 0;
}

#endif
