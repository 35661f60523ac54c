/* SPDX-License-Identifier: BSD-3-Clause */
/* The rendezvous server under a connection flood (issue 5: strangers are refused and the job goes
 * on undisturbed):
 *  - flood: 400 idle connections that never send a hello; the server holds at most
 *    nranks + 64 of them at once (counted in /proc/self/fd), and two real ranks still meet;
 *  - out of descriptors: the server's process has few descriptors left, accept() fails with
 *    EMFILE; the server must not spin on its readable listening socket (its CPU time while the
 *    flood waits stays far below the wall time) and real ranks still get in;
 *  - refusals are logged at WARN once per peer address, then at INFO.
 * The strangers and the real ranks run in child processes, so that only the server's
 * descriptors count against this process's limit.
 * And the handshake's authentication (issue 17):
 *  - a valid hello with any one bit of its MAC flipped is refused (256 tries, each bit), and the
 *    client refuses the server's ack with any one bit of its MAC flipped (a man in the middle
 *    here); a check of fewer than all 32 bytes fails one of these;
 *  - a refused client is told why: another job, a wrong secret, a size that does not fit, a
 *    rank that already joined. */
#include "core/log.h"
#include "core/rendezvous.h"
#include "core/timeutil.h"

#include <arpa/inet.h>
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#define JOB "flood-job"
#define KEY "flood-secret-0123456789"

static int count_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    while (readdir(d)) n++;
    closedir(d);
    return n - 3;   /* ".", ".." and the directory's own descriptor */
}

static int connect_local(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void raise_nofile(void)
{
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
}

/* A child that opens n idle connections (no byte sent), writes one byte to ready, and holds
 * them until killed. */
static pid_t flood(int port, int n)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(p[0]);
        raise_nofile();
        int made = 0;
        for (int i = 0; i < n; i++)
            if (connect_local(port) >= 0) made++;
        char c = made == n ? 'y' : 'n';
        if (write(p[1], &c, 1) != 1) _exit(1);
        for (;;) pause();
    }
    close(p[1]);
    char c = 0;
    struct pollfd pf = { p[0], POLLIN, 0 };
    ck_assert_msg(poll(&pf, 1, 60000) == 1 && read(p[0], &c, 1) == 1,
                  "the flooding child did not report within 60 s");
    close(p[0]);
    ck_assert_msg(c == 'y', "the flooding child could not open its connections");
    return pid;
}

/* A child running ranks 0..n-1 of a real job: connects each in turn, then allgathers from one
 * process per rank. Exit status 0 when every rank met within timeout_s. */
static pid_t real_ranks(int port, int n, double timeout_s)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid) return pid;
    raise_nofile();
    char url[64];
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", port);
    cohort_rdv_client_t *cl[8];
    for (int r = 0; r < n; r++)
        if (cohort_rdv_connect(url, JOB, KEY, strlen(KEY), r, n, timeout_s, &cl[r])) {
            fprintf(stderr, "rank %d: %s\n", r, cohort_last_error());
            _exit(1);
        }
    /* an allgather returns once every rank sent its part: one process per rank */
    for (int r = 0; r < n; r++) {
        pid_t k = fork();
        if (k == 0) {
            int all[8] = { 0 };
            if (cohort_rdv_allgather(cl[r], &r, all, sizeof r, timeout_s)) {
                fprintf(stderr, "rank %d: allgather: %s\n", r, cohort_last_error());
                _exit(1);
            }
            for (int i = 0; i < n; i++)
                if (all[i] != i) _exit(1);
            cohort_rdv_close(cl[r]);
            _exit(0);
        }
    }
    int ok = 1, st;
    for (int r = 0; r < n; r++)
        if (wait(&st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) ok = 0;
    _exit(ok ? 0 : 1);
}

static int wait_child(pid_t pid, int timeout_ms)
{
    uint64_t end = cohort_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    int st;
    for (;;) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (cohort_now_ns() > end) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        poll(NULL, 0, 10);
    }
}

static void stop_child(pid_t pid)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

static cohort_rdv_server_t *server(int nranks)
{
    cohort_rdv_server_t *s = NULL;
    ck_assert_msg(cohort_rdv_server_create("127.0.0.1", 0, nranks, JOB, KEY, strlen(KEY), &s) ==
                  COHORT_SUCCESS, "server: %s", cohort_last_error());
    ck_assert_int_eq(cohort_rdv_server_start_thread(s), COHORT_SUCCESS);
    return s;
}

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

START_TEST(flood_is_bounded)
{
    int base = count_fds();
    cohort_rdv_server_t *s = server(2);
    int port = cohort_rdv_server_port(s);
    pid_t fl = flood(port, 400);
    /* give the server time to take what it will of the flood */
    int peak = 0;
    uint64_t end = cohort_now_ns() + 1000000000ull;
    while (cohort_now_ns() < end) {
        int n = count_fds();
        if (n > peak) peak = n;
        poll(NULL, 0, 5);
    }
    uint64_t t0 = cohort_now_ns();
    pid_t rr = real_ranks(port, 2, 20.0);
    int rc = wait_child(rr, 30000);
    printf("flood: the real ranks met %.2f s after 400 strangers connected; the server held "
           "at most %d descriptors\n", (double)(cohort_now_ns() - t0) * 1e-9, peak - base);
    for (int i = 0; i < 20; i++) {
        int n = count_fds();
        if (n > peak) peak = n;
    }
    stop_child(fl);
    ck_assert_msg(rc == 0, "the real ranks did not meet while 400 strangers held connections "
                  "(status %d)", rc);
    ck_assert_int_eq(cohort_rdv_server_arrived(s), 2);
    /* server: listener + at most nranks + 64 waiting strangers + the ranks' connections;
     * + 8 for the thread, the pipe and the directory */
    ck_assert_msg(peak - base <= 1 + 2 + 64 + 2 + 8, "the server held %d descriptors for 400 "
                  "idle strangers (bound %d)", peak - base, 1 + 2 + 64 + 2 + 8);
    cohort_rdv_server_destroy(s);
}
END_TEST

START_TEST(out_of_descriptors_does_not_spin)
{
    cohort_rdv_server_t *s = server(2);
    int port = cohort_rdv_server_port(s);
    /* this process may open 24 more descriptors: the flood runs it out */
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    int used = count_fds();
    rl.rlim_cur = (rlim_t)(used + 24 + 10);   /* count_fds doesn't see the highest numbers */
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
    pid_t fl = flood(port, 150);
    double c0 = cpu_s();
    uint64_t t0 = cohort_now_ns();
    poll(NULL, 0, 1500);
    double cpu = cpu_s() - c0, wall = (double)(cohort_now_ns() - t0) * 1e-9;
    uint64_t t1 = cohort_now_ns();
    pid_t rr = real_ranks(port, 2, 30.0);
    int rc = wait_child(rr, 40000);
    printf("out of descriptors: %.3f s of CPU in %.2f s of flood; the real ranks met after "
           "%.2f s\n", cpu, wall, (double)(cohort_now_ns() - t1) * 1e-9);
    stop_child(fl);
    ck_assert_msg(cpu < 0.25 * wall, "the server used %.2f s of CPU in %.2f s while accept() "
                  "failed for lack of descriptors (spinning on its listening socket?)", cpu, wall);
    ck_assert_msg(rc == 0, "the real ranks did not get in while the server was out of "
                  "descriptors (status %d)", rc);
    cohort_rdv_server_destroy(s);
}
END_TEST

START_TEST(refusals_warn_once_per_address)
{
    char path[] = "/tmp/test_rdv_server.XXXXXX";
    int lf = mkstemp(path);
    ck_assert_int_ge(lf, 0);
    unlink(path);
    setenv("COHORT_DEBUG", "INFO", 1);
    cohort_log_reset();
    int saved = dup(STDERR_FILENO);
    dup2(lf, STDERR_FILENO);

    cohort_rdv_server_t *s = server(2);
    int port = cohort_rdv_server_port(s);
    for (int i = 0; i < 5; i++) {
        int fd = connect_local(port);
        ck_assert_int_ge(fd, 0);
        char junk[4096];   /* more than a hello: refused for its magic, not after 10 s */
        memset(junk, 'x', sizeof junk);
        ck_assert_int_eq(send(fd, junk, sizeof junk, MSG_NOSIGNAL), (ssize_t)sizeof junk);
        /* the server answers a refusal and closes: wait for it */
        struct pollfd pf = { fd, POLLIN, 0 };
        ck_assert_msg(poll(&pf, 1, 20000) == 1, "no answer to stranger %d", i);
        close(fd);
    }
    cohort_rdv_server_destroy(s);
    dup2(saved, STDERR_FILENO);
    close(saved);

    char buf[16384];
    ssize_t n = pread(lf, buf, sizeof buf - 1, 0);
    close(lf);
    ck_assert_int_gt(n, 0);
    buf[n] = '\0';
    int warns = 0, infos = 0;
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
        if (!strstr(line, "refused connection from 127.0.0.1:")) continue;
        if (strstr(line, "cohort WARN ")) warns++;
        if (strstr(line, "cohort INFO ")) infos++;
    }
    ck_assert_msg(warns == 1 && infos == 4, "5 refusals from one address: %d WARN and %d INFO "
                  "lines (want 1 and 4)", warns, infos);
}
END_TEST

/* ---- the handshake's MACs ---------------------------------------------------------------- */

/* The hello's size and the MAC's place in it (rdv_hello_t in core/rdv_wire.h: magic, version,
 * job id[64], rank, nranks, pid, host[64], nonce[16], then the MAC over all before it). The
 * capture below checks the size; the control cases check that the bytes make a valid hello. */
#define HELLO_BYTES 196
#define ACK_BYTES 40      /* magic, status, MAC[32] */
#define MAC_BYTES 32

static int listen_local(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in a = { .sin_family = AF_INET };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    ck_assert_int_eq(listen(fd, 16), 0);
    socklen_t sl = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &sl);
    *port = ntohs(a.sin_port);
    return fd;
}

/* Reads exactly n bytes within timeout_ms; returns how many arrived. */
static size_t read_full(int fd, void *buf, size_t n, int timeout_ms)
{
    size_t got = 0;
    uint64_t end = cohort_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    while (got < n) {
        uint64_t now = cohort_now_ns();
        if (now >= end) break;
        struct pollfd pf = { fd, POLLIN, 0 };
        if (poll(&pf, 1, (int)((end - now) / 1000000ull) + 1) <= 0) continue;
        ssize_t r = recv(fd, (char *)buf + got, n - got, 0);
        if (r <= 0) break;
        got += (size_t)r;
    }
    return got;
}

static int accept_within(int lfd, int timeout_ms)
{
    struct pollfd pf = { lfd, POLLIN, 0 };
    if (poll(&pf, 1, timeout_ms) != 1) return -1;
    return accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
}

typedef struct connector {
    char url[64];
    int rank, nranks;
    const char *job, *key;
    cohort_status_t st;
    char msg[1024];
} connector_t;

/* A client thread: one cohort_rdv_connect, its result and message kept. */
static void *connect_thread(void *arg)
{
    connector_t *c = arg;
    cohort_rdv_client_t *cl = NULL;
    c->st = cohort_rdv_connect(c->url, c->job, c->key, strlen(c->key), c->rank, c->nranks, 20.0,
                               &cl);
    snprintf(c->msg, sizeof c->msg, "%s", c->st ? cohort_last_error() : "");
    if (cl) cohort_rdv_close(cl);
    return NULL;
}

/* A hello as the real client sends it (rank 0 of 2: a server of 2 ranks that took it still
 * answers the next ones): a fake server takes it and hangs up. */
static void capture_hello(unsigned char *hello)
{
    int port;
    int lfd = listen_local(&port);
    connector_t c = { .rank = 0, .nranks = 2, .job = JOB, .key = KEY };
    snprintf(c.url, sizeof c.url, "tcp://127.0.0.1:%d", port);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, connect_thread, &c), 0);
    int fd = accept_within(lfd, 20000);
    ck_assert_msg(fd >= 0, "the client did not connect within 20 s");
    unsigned char buf[HELLO_BYTES + 64];
    size_t got = read_full(fd, buf, HELLO_BYTES, 20000);
    /* nothing more comes: the client now waits for the ack */
    size_t more = read_full(fd, buf + got, sizeof buf - got, 200);
    ck_assert_msg(got == HELLO_BYTES && more == 0, "the client's hello is %zu bytes, not %d: "
                  "update HELLO_BYTES to rdv_hello_t", got + more, HELLO_BYTES);
    memcpy(hello, buf, HELLO_BYTES);
    close(fd);
    close(lfd);
    pthread_join(t, NULL);
}

/* Sends hello on a new connection; returns the ack's status (0 joined), or INT32_MIN when no
 * ack came (a closed connection also counts as a refusal for the caller). */
static int32_t send_hello(int port, const unsigned char *hello)
{
    int fd = connect_local(port);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(send(fd, hello, HELLO_BYTES, MSG_NOSIGNAL), HELLO_BYTES);
    unsigned char ack[ACK_BYTES];
    size_t got = read_full(fd, ack, sizeof ack, 20000);
    close(fd);
    int32_t status;
    memcpy(&status, ack + 4, sizeof status);
    return got == sizeof ack ? status : INT32_MIN;
}

START_TEST(hello_mac_every_bit)
{
    setenv("COHORT_DEBUG", "NONE", 1);   /* 256 refusals: not a line each */
    cohort_log_reset();
    unsigned char hello[HELLO_BYTES];
    capture_hello(hello);
    cohort_rdv_server_t *s = server(2);
    int port = cohort_rdv_server_port(s);
    int accepted = 0;
    char which[2048] = "";
    size_t used = 0;
    for (int bit = 0; bit < MAC_BYTES * 8; bit++) {
        unsigned char bad[HELLO_BYTES];
        memcpy(bad, hello, sizeof bad);
        bad[HELLO_BYTES - MAC_BYTES + bit / 8] ^= (unsigned char)(1u << (bit % 8));
        int32_t st = send_hello(port, bad);
        if (st == 0) {
            accepted++;
            if (used < sizeof which - 16)
                used += (size_t)snprintf(which + used, sizeof which - used, " %d", bit);
        }
    }
    /* control: the hello itself is valid, and the server still takes it */
    int32_t good = send_hello(port, hello);
    int arrived = cohort_rdv_server_arrived(s);
    cohort_rdv_server_destroy(s);
    unsetenv("COHORT_DEBUG");
    cohort_log_reset();
    ck_assert_msg(accepted == 0, "the server accepted %d hellos with one MAC bit flipped (bits%s)",
                  accepted, which);
    ck_assert_msg(good == 0 && arrived == 1, "the unmodified hello was refused (status %d, %d "
                  "arrived): the capture is not a valid hello", (int)good, arrived);
}
END_TEST

typedef struct mitm {
    int lfd, server_port, nconn;
    int flip_bit[MAC_BYTES * 8 + 1];   /* per connection: the ack bit to flip, -1 none */
    int failed;
    char why[256];
} mitm_t;

/* Passes each client's hello to the server and the server's ack back with one bit flipped. */
static void *mitm_thread(void *arg)
{
    mitm_t *m = arg;
    for (int i = 0; i < m->nconn; i++) {
        int cfd = accept_within(m->lfd, 20000);
        if (cfd < 0) {
            m->failed = 1;
            snprintf(m->why, sizeof m->why, "connection %d: no client within 20 s", i);
            return NULL;
        }
        unsigned char hello[HELLO_BYTES], ack[ACK_BYTES];
        int sfd = connect_local(m->server_port);
        if (sfd < 0 || read_full(cfd, hello, sizeof hello, 20000) != sizeof hello ||
            send(sfd, hello, sizeof hello, MSG_NOSIGNAL) != (ssize_t)sizeof hello ||
            read_full(sfd, ack, sizeof ack, 20000) != sizeof ack) {
            m->failed = 1;
            snprintf(m->why, sizeof m->why, "connection %d: no hello or no ack", i);
        } else {
            int b = m->flip_bit[i];
            if (b >= 0) ack[ACK_BYTES - MAC_BYTES + b / 8] ^= (unsigned char)(1u << (b % 8));
            if (send(cfd, ack, sizeof ack, MSG_NOSIGNAL) != (ssize_t)sizeof ack) m->failed = 1;
            /* until the client hangs up (it does once it refused the ack, or after its goodbye
             * when it took it), at most 5 s */
            unsigned char junk[64];
            read_full(cfd, junk, sizeof junk, 5000);
        }
        if (sfd >= 0) close(sfd);
        close(cfd);
    }
    return NULL;
}

START_TEST(ack_mac_every_bit)
{
    setenv("COHORT_DEBUG", "NONE", 1);
    cohort_log_reset();
    const int nbits = MAC_BYTES * 8;
    cohort_rdv_server_t *s = server(nbits + 1);   /* each try joins as another rank */
    mitm_t m = { .server_port = cohort_rdv_server_port(s), .nconn = nbits + 1 };
    int port;
    m.lfd = listen_local(&port);
    for (int i = 0; i < nbits; i++) m.flip_bit[i] = i;
    m.flip_bit[nbits] = -1;                       /* control: the ack as the server sent it */
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, mitm_thread, &m), 0);
    int taken = 0, other = 0;
    char which[2048] = "", msg[1024] = "";
    size_t used = 0;
    cohort_status_t control = COHORT_ERR_INTERNAL;
    for (int i = 0; i <= nbits; i++) {
        connector_t c = { .rank = i, .nranks = nbits + 1, .job = JOB, .key = KEY };
        snprintf(c.url, sizeof c.url, "tcp://127.0.0.1:%d", port);
        connect_thread(&c);
        if (i == nbits) {
            control = c.st;
            snprintf(msg, sizeof msg, "%s", c.msg);
        } else if (!c.st) {
            taken++;
            if (used < sizeof which - 16)
                used += (size_t)snprintf(which + used, sizeof which - used, " %d", i);
        } else if (!strstr(c.msg, "did not prove it knows the job secret")) {
            other++;
            snprintf(msg, sizeof msg, "%s", c.msg);
        }
    }
    pthread_join(t, NULL);
    close(m.lfd);
    cohort_rdv_server_destroy(s);
    unsetenv("COHORT_DEBUG");
    cohort_log_reset();
    ck_assert_msg(!m.failed, "the man in the middle failed: %s", m.why);
    ck_assert_msg(taken == 0, "the client took %d acks with one MAC bit flipped (bits%s)", taken,
                  which);
    ck_assert_msg(other == 0, "%d refusals of a bad ack gave another message: %s", other, msg);
    ck_assert_msg(control == COHORT_SUCCESS, "the unmodified ack was refused: %s", msg);
}
END_TEST

/* ---- why a hello was refused ------------------------------------------------------------- */

static void expect_refusal(int port, const char *job, const char *key, int rank, int nranks,
                           const char *needle)
{
    connector_t c = { .rank = rank, .nranks = nranks, .job = job, .key = key };
    snprintf(c.url, sizeof c.url, "tcp://127.0.0.1:%d", port);
    connect_thread(&c);
    ck_assert_msg(c.st == COHORT_ERR_MISMATCH && strstr(c.msg, needle), "rank %d of %d, job %s: "
                  "want a refusal saying '%s', got %d: %s", rank, nranks, job, needle,
                  (int)c.st, c.msg);
}

START_TEST(refusals_say_why)
{
    setenv("COHORT_DEBUG", "NONE", 1);
    cohort_log_reset();
    cohort_rdv_server_t *s = server(2);
    int port = cohort_rdv_server_port(s);
    expect_refusal(port, "another-job", KEY, 0, 2, "serves another job than this rank's "
                   "'another-job'");
    expect_refusal(port, JOB, "not-the-secret", 0, 2, "not signed with the job's secret");
    expect_refusal(port, JOB, KEY, 1, 3, "has another size, or no rank 1");
    /* rank 0 joins; the same rank again is refused as a second join */
    char url[64];
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", port);
    cohort_rdv_client_t *cl = NULL;
    ck_assert_msg(cohort_rdv_connect(url, JOB, KEY, strlen(KEY), 0, 2, 20.0, &cl) == 0, "%s",
                  cohort_last_error());
    expect_refusal(port, JOB, KEY, 0, 2, "rank 0 already joined job 'flood-job'");
    cohort_rdv_close(cl);
    cohort_rdv_server_destroy(s);
    unsetenv("COHORT_DEBUG");
    cohort_log_reset();
}
END_TEST

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    Suite *su = suite_create("rdv_server");
    TCase *tc = tcase_create("flood");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, flood_is_bounded);
    tcase_add_test(tc, out_of_descriptors_does_not_spin);
    tcase_add_test(tc, refusals_warn_once_per_address);
    suite_add_tcase(su, tc);
    TCase *auth = tcase_create("handshake");
    tcase_set_timeout(auth, 120);
    tcase_add_test(auth, hello_mac_every_bit);
    tcase_add_test(auth, ack_mac_every_bit);
    tcase_add_test(auth, refusals_say_why);
    suite_add_tcase(su, auth);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
