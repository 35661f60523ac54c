/* SPDX-License-Identifier: BSD-3-Clause */
/* Loopback sockets for fuzz_rdv.c, fuzz_ctl.c and make_corpus.c, the harnesses' bounded waits,
 * and a real client's hello captured off the
 * wire: cohort_rdv_connect() runs in a thread against a listener of ours, which keeps the bytes
 * it sends first and then hangs up (the client then fails, as it should). The hello's layout
 * stays core/rendezvous.c's business: nothing here knows it. */
#ifndef COHORT_TESTS_FUZZ_RDV_UTIL_H
#define COHORT_TESTS_FUZZ_RDV_UTIL_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/rendezvous.h"
#include "core/timeutil.h"
#include "fuzz.h"

/* Every wait of the rendezvous harnesses is bounded. An input needs about a millisecond, but
 * with the CI's ASan suite and another suite beside it one took over 3 s (the bound before): a
 * bound says only when to give up on a hang, so it is far above any slow run, and below
 * test_fuzz.sh's limit per input (-timeout=30). */
#define WAIT_NS 20000000000ull
static inline uint64_t deadline(void) { return cohort_now_ns() + WAIT_NS; }

/* A listening socket on 127.0.0.1, ephemeral port; -1 on failure. */
static inline int rdv_listen_local(int *port)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t al = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 64) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &al) != 0) {
        close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

/* A connected socket to 127.0.0.1:port; -1 on failure. */
static inline int rdv_connect_local(int port)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        /* libFuzzer's SIGALRM can interrupt connect(): the connection goes on; wait for it */
        struct pollfd p = { fd, POLLOUT, 0 };
        int err = 0;
        socklen_t el = sizeof err;
        int pr = -1;
        if (errno == EINTR)
            do pr = poll(&p, 1, 3000); while (pr < 0 && errno == EINTR);
        if (pr != 1 ||
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err != 0) {
            close(fd);
            return -1;
        }
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

/* 1 when fd is ready for events within ms milliseconds, else 0. Signals do not cut the wait
 * short (libFuzzer's timeout timer sends SIGALRM every few seconds). */
static inline int rdv_wait(int fd, short events, int ms)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        long left = ms - ((t.tv_sec - t0.tv_sec) * 1000L + (t.tv_nsec - t0.tv_nsec) / 1000000L);
        struct pollfd p = { fd, events, 0 };
        int r = poll(&p, 1, left > 0 ? (int)left : 0);
        if (r > 0) return 1;
        if (r == 0 || errno != EINTR) return 0;
    }
}

/* Writes what the peer takes; stops quietly when it has gone (that is allowed). */
static inline void rdv_send_all(int fd, const void *p, size_t n)
{
    const unsigned char *b = p;
    while (n > 0) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        if (w > 0) {
            b += w;
            n -= (size_t)w;
        } else if (w < 0 && errno == EINTR) {
            continue;
        } else {
            return;
        }
    }
}

/* Closes with a reset rather than a FIN, so that no TIME_WAIT is left per input. */
static inline void rdv_close_abort(int fd)
{
    struct linger l = { 1, 0 };
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    close(fd);
}

typedef struct rdv_capture_arg {
    int port, rank, nranks;
    const char *job, *key;
} rdv_capture_arg_t;

static inline void *rdv_capture_client(void *p)
{
    rdv_capture_arg_t *a = p;
    char url[64];
    cohort_rdv_client_t *cl = NULL;
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", a->port);
    if (cohort_rdv_connect(url, a->job, a->key, strlen(a->key), a->rank, a->nranks, 10.0, &cl) ==
        COHORT_SUCCESS)
        cohort_rdv_close(cl);   /* not expected: nobody answered it */
    return NULL;
}

/* The bytes a real client sends first (its hello) for rank of nranks, job and key; their count
 * (0 on failure). When len_hint is not 0, exactly that many are read; else until the client has
 * been quiet for 200 ms. */
static inline size_t rdv_capture_hello(int nranks, int rank, const char *job, const char *key,
                                       size_t len_hint, unsigned char *buf, size_t cap)
{
    rdv_capture_arg_t a = { 0, rank, nranks, job, key };
    if (len_hint > cap) return 0;
    int lfd = rdv_listen_local(&a.port);
    if (lfd < 0) return 0;
    pthread_t t;
    if (pthread_create(&t, NULL, rdv_capture_client, &a) != 0) {
        close(lfd);
        return 0;
    }
    size_t len = 0;
    int fd = rdv_wait(lfd, POLLIN, 10000) ? accept(lfd, NULL, NULL) : -1;
    while (fd >= 0 && len < cap && (len_hint == 0 || len < len_hint)) {
        if (!rdv_wait(fd, POLLIN, len == 0 || len_hint ? 10000 : 200)) break;
        ssize_t r = recv(fd, buf + len, (len_hint ? len_hint : cap) - len, 0);
        if (r <= 0) break;
        len += (size_t)r;
    }
    if (fd >= 0) rdv_close_abort(fd);
    close(lfd);
    pthread_join(t, NULL);
    return len_hint && len != len_hint ? 0 : len;
}

/* Reads one burst from fd (what a peer sent in one write), driving srv (if any) meanwhile. */
static inline size_t read_burst(cohort_rdv_server_t *srv, int fd, unsigned char *buf,
                                size_t cap)
{
    uint64_t end = deadline();
    for (;;) {
        if (srv) cohort_rdv_server_progress(srv, 1);
        ssize_t r = recv(fd, buf, cap, MSG_DONTWAIT);
        if (r > 0) return (size_t)r;
        FUZZ_CHECK(r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR),
                   "the connection ended before its first bytes");
        FUZZ_CHECK(cohort_now_ns() < end, "no bytes within %.0f s", WAIT_NS / 1e9);
        if (!srv) rdv_wait(fd, POLLIN, 1);
    }
}

#endif
