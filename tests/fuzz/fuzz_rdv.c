/* SPDX-License-Identifier: BSD-3-Clause */
/* Fuzz target: the rendezvous protocol (core/rendezvous.h), over real loopback sockets, through
 * the public functions only. data[0] % 3 picks who sends the bytes data[3..]:
 *
 *   0  a stranger, to a server that lives across inputs (4 ranks, a random secret nobody
 *      else knows): the bytes go out in one write or two (split at data[1]/256 of them), then
 *      the stranger resets the connection. The server must survive and must not count the
 *      stranger as a rank (cohort_rdv_server_arrived stays 0).
 *
 *   1  authenticated ranks, to a fresh server of 1 + data[1] % 3 ranks: each rank connects
 *      and sends a real client's hello (captured at start-up, see rdv_util.h); with bit 7 of
 *      data[1] an intruder with a valid MAC but a rank that does not fit or has joined already
 *      follows, and must be refused. Then the bytes, cut at data[2], go to ranks 0 (and 1, 2)
 *      as their messages (GATHER, FAIL, BYE, anything). The ranks then reset their
 *      connections; the server must notice every one and report itself finished.
 *
 *   2  a server that authenticated itself, to a real client: a proxy forwards the client's hello
 *      to a fresh real server and its ack back, then feeds the bytes to the client as the
 *      server's messages (RESULT, FAIL, MISSING, anything) and resets the connection. The
 *      client, in a thread, runs cohort_rdv_allgather (of data[1] % 16 bytes per rank, 1 +
 *      data[2] % 3 ranks) twice and cohort_rdv_check: each must return.
 *
 * Connections end with a reset, never a FIN from our side, so that no TIME_WAIT is left behind
 * per input (at a thousand inputs a second they would use up the ephemeral ports, for this
 * and for every other test on the machine); a peer reads what was sent before the reset first.
 * Every wait is bounded (3 s, far beyond what an input needs: about a millisecond). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1   /* memfd_create, accept4, getrandom */
#endif
#include "fuzz.h"

#include <sys/random.h>

#include "core/rendezvous.h"
#include "core/timeutil.h"
#include "rdv_util.h"

#define JOB "fuzz-job"
#define KEY "fuzz-known-secret"
#define MAXN 3
#define HELLO_MAX 1024

static unsigned char hellos[MAXN + 1][MAXN][HELLO_MAX];   /* [nranks][rank] */
static size_t hello_len;
static cohort_rdv_server_t *stranger_srv;
static int proxy_lfd = -1, proxy_port;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet();
    for (int n = 1; n <= MAXN; n++)
        for (int r = 0; r < n; r++) {
            size_t len = rdv_capture_hello(n, r, JOB, KEY, hello_len, hellos[n][r], HELLO_MAX);
            FUZZ_CHECK(len > 0, "could not capture the hello of rank %d of %d (loopback?)", r, n);
            hello_len = len;
        }
    unsigned char secret[32];
    if (getrandom(secret, sizeof secret, 0) != (ssize_t)sizeof secret) abort();
    FUZZ_CHECK(cohort_rdv_server_create("127.0.0.1", 0, 4, JOB, secret, sizeof secret,
                                        &stranger_srv) == COHORT_SUCCESS, "server: %s",
               cohort_last_error());
    proxy_lfd = rdv_listen_local(&proxy_port);
    FUZZ_CHECK(proxy_lfd >= 0, "no loopback listener");
    return 0;
}

static void stranger(const uint8_t *d, size_t n, unsigned cut)
{
    cohort_rdv_server_t *srv = stranger_srv;
    int fd = rdv_connect_local(cohort_rdv_server_port(srv));
    FUZZ_CHECK(fd >= 0, "cannot connect to the server");
    cohort_rdv_server_progress(srv, 1);   /* accepts it */
    size_t a = cut ? n * cut / 256 : n;
    rdv_send_all(fd, d, a);
    cohort_rdv_server_progress(srv, 1);
    if (a < n) {
        rdv_send_all(fd, d + a, n - a);
        cohort_rdv_server_progress(srv, 1);
    }
    rdv_close_abort(fd);
    cohort_rdv_server_progress(srv, 0);   /* sees the reset (else the next input's call does) */
    FUZZ_CHECK(cohort_rdv_server_arrived(srv) == 0, "the server let a stranger in as a rank");
}

static cohort_rdv_server_t *fresh_server(int nranks)
{
    cohort_rdv_server_t *srv = NULL;
    FUZZ_CHECK(cohort_rdv_server_create("127.0.0.1", 0, nranks, JOB, KEY, strlen(KEY), &srv) ==
               COHORT_SUCCESS, "server: %s", cohort_last_error());
    return srv;
}

/* Connects ranks 0..n-1 of n to srv with their hellos and waits until all are in. */
static void join_all(cohort_rdv_server_t *srv, int *fds, int n)
{
    for (int r = 0; r < n; r++) {
        fds[r] = rdv_connect_local(cohort_rdv_server_port(srv));
        FUZZ_CHECK(fds[r] >= 0, "cannot connect to the server");
    }
    cohort_rdv_server_progress(srv, 1);
    for (int r = 0; r < n; r++) rdv_send_all(fds[r], hellos[n][r], hello_len);
    uint64_t end = deadline();
    while (cohort_rdv_server_arrived(srv) < n) {
        FUZZ_CHECK(cohort_now_ns() < end, "only %d of %d real hellos were accepted: the captured "
                   "hello (rdv_util.h) and the server disagree", cohort_rdv_server_arrived(srv), n);
        cohort_rdv_server_progress(srv, 1);
    }
}

static void ranks(const uint8_t *d, size_t n, unsigned nr, unsigned cut, int intruder)
{
    cohort_rdv_server_t *srv = fresh_server((int)nr);
    int fds[MAXN];
    join_all(srv, fds, (int)nr);
    if (intruder) {
        /* a hello with a valid MAC that must still be refused: rank 2 of 3, which does not fit
         * a job of 1 or 2 ranks and has already joined a job of 3 */
        int fd = rdv_connect_local(cohort_rdv_server_port(srv));
        FUZZ_CHECK(fd >= 0, "cannot connect to the server");
        cohort_rdv_server_progress(srv, 1);
        rdv_send_all(fd, hellos[MAXN][MAXN - 1], hello_len);
        cohort_rdv_server_progress(srv, 1);
        rdv_close_abort(fd);
        cohort_rdv_server_progress(srv, 0);
        FUZZ_CHECK(cohort_rdv_server_arrived(srv) == (int)nr, "%d ranks arrived in a job of %u",
                   cohort_rdv_server_arrived(srv), nr);
    }
    /* rank 0 gets the bytes up to the cut, the others share the rest */
    size_t at = 0, first = nr > 1 ? n * cut / 256 : n;
    for (unsigned r = 0; r < nr; r++) {
        size_t len = r == 0 ? first : r == nr - 1 ? n - at : (n - first) / 2;
        rdv_send_all(fds[r], d + at, len);
        at += len;
        cohort_rdv_server_progress(srv, 1);
    }
    for (unsigned r = 0; r < nr; r++) rdv_close_abort(fds[r]);
    uint64_t end = deadline();
    while (!cohort_rdv_server_finished(srv)) {
        FUZZ_CHECK(cohort_now_ns() < end, "every rank left %.0f s ago but the server still "
                   "counts a connection open", WAIT_NS / 1e9);
        cohort_rdv_server_progress(srv, 1);
    }
    cohort_rdv_server_destroy(srv);
}

typedef struct client_arg {
    int nranks;
    size_t nbytes;
    cohort_status_t connect, gather1, gather2, check;
} client_arg_t;

static void *client(void *p)
{
    client_arg_t *a = p;
    char url[64];
    cohort_rdv_client_t *cl = NULL;
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", proxy_port);
    a->connect = cohort_rdv_connect(url, JOB, KEY, strlen(KEY), 0, a->nranks,
                                    (double)WAIT_NS / 1e9, &cl);
    if (a->connect != COHORT_SUCCESS) return NULL;
    unsigned char out[16], in[16 * MAXN];   /* what comes back is the fake server's choice */
    memset(out, 0xab, sizeof out);
    a->gather1 = cohort_rdv_allgather(cl, out, in, a->nbytes, 2.0);
    if (a->gather1 == COHORT_SUCCESS)
        a->gather2 = cohort_rdv_allgather(cl, out, in, a->nbytes, 2.0);
    a->check = cohort_rdv_check(cl);
    cohort_rdv_close(cl);
    return NULL;
}

static void server_side(const uint8_t *d, size_t n, unsigned nr, size_t nbytes)
{
    cohort_rdv_server_t *srv = fresh_server((int)nr);
    client_arg_t a = { (int)nr, nbytes, -100, -100, -100, -100 };
    pthread_t t;
    FUZZ_CHECK(pthread_create(&t, NULL, client, &a) == 0, "no thread");
    FUZZ_CHECK(rdv_wait(proxy_lfd, POLLIN, (int)(WAIT_NS / 1000000)), "the client did not "
               "connect");
    int cfd = accept4(proxy_lfd, NULL, NULL, SOCK_CLOEXEC);
    FUZZ_CHECK(cfd >= 0, "accept: %s", strerror(errno));
    unsigned char hello[HELLO_MAX], ack[256];
    size_t got = 0;
    while (got < hello_len) got += read_burst(NULL, cfd, hello + got, hello_len - got);
    int sfd = rdv_connect_local(cohort_rdv_server_port(srv));
    FUZZ_CHECK(sfd >= 0, "cannot connect to the server");
    cohort_rdv_server_progress(srv, 1);
    rdv_send_all(sfd, hello, hello_len);
    size_t acklen = read_burst(srv, sfd, ack, sizeof ack);
    FUZZ_CHECK(cohort_rdv_server_arrived(srv) == 1, "the server refused the client's hello");
    rdv_send_all(cfd, ack, acklen);
    rdv_send_all(cfd, d, n);
    rdv_close_abort(cfd);   /* the client reads all that was sent, then the reset */
    pthread_join(t, NULL);
    FUZZ_CHECK(a.connect == COHORT_SUCCESS, "the client refused the server's real ack: %d",
               (int)a.connect);
    rdv_close_abort(sfd);
    cohort_rdv_server_destroy(srv);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    unsigned b1 = size > 1 ? data[1] : 0, b2 = size > 2 ? data[2] : 0;
    const uint8_t *d = data + (size < 3 ? size : 3);
    size_t n = size < 3 ? 0 : size - 3;
    switch (data[0] % 3) {
    case 0: stranger(d, n, b1); break;
    case 1: ranks(d, n, 1 + b1 % MAXN, b2, (b1 & 0x80) != 0); break;
    default: server_side(d, n, 1 + b2 % MAXN, b1 % 16); break;
    }
    return 0;
}
