/* SPDX-License-Identifier: BSD-3-Clause */
/* ctlcheck MODE: one scenario of abort, mismatch or stall, run as every rank of a cohortrun job
 * by tests/mp/test_reliability.sh. Prints "ok: ..." lines, or "FAIL: ..." and exits 1.
 *
 *   thread    rank 0 blocks in an allreduce that rank 1 joins only after 1 s; another thread of
 *             rank 0 aborts the world communicator after 300 ms: the allreduce must return
 *             ABORTED within 2 s of the abort; rank 1's late allreduce must fail naming rank 0;
 *             destroy after abort must give back every descriptor.
 *   signal    the same, the abort called from a SIGALRM handler.
 *   split     rank 0 blocks in cohort_comm_split that rank 1 never calls; a thread aborts the
 *             parent: the split returns ABORTED within 2 s.
 *   mismatch  rank 0 calls allreduce with 10 floats, rank 1 with 20: both get MISMATCH, and each
 *             message names both calls (count 10 and count 20).
 *   roots     (shm) every rank broadcasts 2 floats as the root (root = its rank): the broadcasts
 *             return (a small broadcast's root waits for no one), the allreduce after them gets
 *             MISMATCH on every rank, saying that the earlier collectives differ.
 *   long      two allreduces 3 s apart on every rank (run with COHORT_TIMEOUT=1): the job runs
 *             to its end.
 *   disagree WHAT   (run with COHORT_TIMEOUT=60, so that a timeout cannot pass for a mismatch)
 *             the ranks disagree, and every rank must get COHORT_ERR_MISMATCH within 10 s, from
 *             the call itself or from a barrier right after it (a call that needed nothing from
 *             the rank it disagrees with may return first), its message naming the collective
 *             and, for a root, the word "root"; no rank may time out. WHAT:
 *               reduce-self   reduce, root = own rank: every rank waits for the others, so the
 *                             reduce itself fails on every rank;
 *               reduce-next   reduce, root = the next rank;
 *               bcast-mixed   broadcast of 2 floats, root 0 on every rank but rank 1, which
 *                             says root n-1 (np >= 3: rank 1 waits for a rank that sends it
 *                             nothing);
 *               bcast-big     broadcast of 1 Mi floats (a pipelined chain), root = own rank;
 *               sizes         allreduce, rank 0 with 8 floats, the others with 128 Ki (another
 *                             algorithm at np >= 3);
 *               hier          allreduce, rank 0 with 8 floats, the others with 1 Mi: run over
 *                             nodes (fakenode.sh), they take the hierarchical algorithm, which
 *                             sends nothing on the communicator rank 0 waits on;
 *               bcast-last    broadcast, root = own rank, as the job's last call: the broadcast
 *                             returns (a root waits for no one) and cohort_comm_destroy returns
 *                             COHORT_ERR_MISMATCH naming the broadcast and both roots (the
 *                             script checks the WARN line in the log);
 *               bcast-last-lane  the same with as many floats as the largest broadcast of shm's
 *                             small lane (lane_bytes).
 *   agree WHAT  every rank makes the same calls, the last a broadcast from rank 0; every
 *             cohort_comm_destroy that is called must return COHORT_SUCCESS (the script checks
 *             that nothing is logged at WARN). WHAT:
 *               bcast         2 floats;
 *               bcast-lane    as many floats as the largest broadcast of shm's small lane;
 *               late-destroy  2 floats; rank n-1 destroys 3 s after the broadcast;
 *               late-bcast    2 floats; rank n-1 starts the broadcast 3 s late, when the others
 *                             have given up waiting for it at their destroy;
 *               exit          2 floats; rank n-1 exits after the broadcast without destroying.
 *   stall     rank 2 (of 3) joins an allreduce 4 s late (run with COHORT_STALL_WARN=1): the
 *             job's stall report (checked by the script) names it.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cohort/cohort.h>

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static cohort_comm_t *world;
static double abort_at;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_s(double s)
{
    struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };
    while (nanosleep(&ts, &ts) != 0) {}
}

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) n += e->d_name[0] != '.';
    closedir(d);
    return n - 1;   /* the directory's own descriptor */
}

#define FAIL(...)                                                                          \
    do {                                                                                   \
        printf("FAIL: rank %d: ", rank);                                                   \
        printf(__VA_ARGS__);                                                               \
        printf("\n");                                                                      \
        fflush(stdout);                                                                    \
        exit(1);                                                                           \
    } while (0)

static void *aborter(void *arg)
{
    (void)arg;
    sleep_s(0.3);
    abort_at = now();
    cohort_comm_abort(world);
    return NULL;
}

/* One call of the disagree mode's collective (or the barrier after it): 1 when it returned
 * the expected mismatch, 0 when it succeeded; anything else fails the test. */
static int mismatch_or_ok(int rank, cohort_status_t st, const char *call, const char *coll,
                          int root, double t0)
{
    double took = now() - t0;
    const char *msg = cohort_last_error();
    if (st == COHORT_SUCCESS) return 0;
    if (st != COHORT_ERR_MISMATCH)
        FAIL("%s gave %s, not mismatch, after %.1f s: %s", call, cohort_strerror(st), took, msg);
    if (took > 10.0) FAIL("%s gave mismatch only after %.1f s: %s", call, took, msg);
    if (!strstr(msg, coll)) FAIL("%s: the message does not name the %s: %s", call, coll, msg);
    if (root && !strstr(msg, "root")) FAIL("%s: the message does not name the root: %s", call,
                                           msg);
    printf("ok: rank %d: %s: mismatch after %.3f s: %s\n", rank, call, took, msg);
    return 1;
}

/* Every rank that got its result stays until all have (files in $CTL_SYNC_DIR, polled with a
 * deadline): a rank that destroys its communicator hangs up on the others, which would then
 * get "peer lost" instead of the mismatch under test. */
static void linger(int rank, int n)
{
    const char *dir = getenv("CTL_SYNC_DIR");
    if (!dir) return;
    char path[512];
    snprintf(path, sizeof path, "%s/done.%d", dir, rank);
    FILE *f = fopen(path, "w");
    if (!f) FAIL("cannot create %s", path);
    fclose(f);
    double deadline = now() + 30.0;
    for (;;) {
        int have = 0;
        for (int r = 0; r < n; r++) {
            snprintf(path, sizeof path, "%s/done.%d", dir, r);
            have += access(path, F_OK) == 0;
        }
        if (have == n) return;
        if (now() > deadline) FAIL("only %d of %d ranks got their result within 30 s", have, n);
        sleep_s(0.01);
    }
}

/* The largest broadcast that shm's small lane takes at n ranks (transports/shm/coll.c, sb_max):
 * 64 KiB at 2 ranks, 32 KiB at 4, whole cache lines in between, at least 4 KiB. */
static size_t lane_bytes(int n)
{
    size_t m = ((size_t)8 << 20) / ((size_t)n * 64);
    m = m > ((size_t)64 << 10) ? (size_t)64 << 10 : m < ((size_t)4 << 10) ? (size_t)4 << 10 : m;
    return m / 64 * 64;
}

static void disagree(int rank, const char *what)
{
    int n = cohort_comm_size(world);
    size_t big = (size_t)1 << 20;
    float *buf = calloc(big, sizeof *buf);
    if (!buf) FAIL("no memory");
    cohort_status_t st;
    const char *coll;
    int root = 1;
    double t0 = now();
    if (!strcmp(what, "reduce-self") || !strcmp(what, "reduce-next")) {
        int r = !strcmp(what, "reduce-self") ? rank : (rank + 1) % n;
        coll = "reduce";
        st = cohort_reduce(world, buf, buf + 16, 2, COHORT_FLOAT32, COHORT_SUM, r);
        if (!strcmp(what, "reduce-self") && st != COHORT_ERR_MISMATCH)
            FAIL("a reduce to its own rank as the root gave %s after %.3f s: %s",
                 cohort_strerror(st), now() - t0, cohort_last_error());
    } else if (!strcmp(what, "bcast-mixed")) {
        coll = "broadcast";
        st = cohort_broadcast(world, buf, 2, COHORT_FLOAT32, rank == 1 ? n - 1 : 0);
    } else if (!strcmp(what, "bcast-big")) {
        coll = "broadcast";
        st = cohort_broadcast(world, buf, big, COHORT_FLOAT32, rank);
    } else if (!strcmp(what, "hier")) {
        coll = "allreduce";
        root = 0;
        st = cohort_allreduce(world, buf, buf, rank ? big : 8, COHORT_FLOAT32, COHORT_SUM);
    } else if (!strcmp(what, "sizes")) {
        coll = "allreduce";
        root = 0;
        st = cohort_allreduce(world, buf, buf, rank ? (size_t)128 << 10 : 8, COHORT_FLOAT32,
                              COHORT_SUM);
    } else if (!strcmp(what, "bcast-last") || !strcmp(what, "bcast-last-lane")) {
        /* A rank that starts the broadcast after another rank's destroy found the mismatch
         * fails it at once (the job told it); the others fail their destroy. */
        size_t count = !strcmp(what, "bcast-last") ? 2 : lane_bytes(n) / sizeof(float);
        st = cohort_broadcast(world, buf, count, COHORT_FLOAT32, rank);
        const char *call = "the broadcast";
        if (st == COHORT_SUCCESS) {
            st = cohort_comm_destroy(world);
            call = "destroy";
        } else {
            cohort_comm_destroy(world);
        }
        const char *msg = cohort_last_error();
        if (st != COHORT_ERR_MISMATCH)
            FAIL("%s after a broadcast with disagreeing roots gave %s, not mismatch: %s", call,
                 cohort_strerror(st), msg);
        if (!strstr(msg, "broadcast") || !strstr(msg, "root"))
            FAIL("%s: the message does not name the broadcast and the roots: %s", call, msg);
        printf("ok: rank %d: %s: %s\n", rank, call, msg);
        free(buf);
        return;
    } else {
        FAIL("unknown disagreement %s", what);
    }
    if (!mismatch_or_ok(rank, st, coll, coll, root, t0)) {
        t0 = now();
        st = cohort_barrier(world);
        if (!mismatch_or_ok(rank, st, "the barrier after it", coll, root, t0))
            FAIL("the %s and the barrier after it both succeeded", coll);
    }
    free(buf);
    linger(rank, n);
    cohort_comm_destroy(world);
}

/* Every rank agrees; the last call is a broadcast from rank 0 (see "agree" at the top). */
static void agree(int rank, const char *what)
{
    int n = cohort_comm_size(world), last = rank == n - 1;
    size_t count = !strcmp(what, "bcast-lane") ? lane_bytes(n) / sizeof(float) : 2;
    if (strcmp(what, "bcast") && strcmp(what, "bcast-lane") && strcmp(what, "late-destroy") &&
        strcmp(what, "late-bcast") && strcmp(what, "exit"))
        FAIL("unknown agreement %s", what);
    float *buf = calloc(count, sizeof *buf);
    if (!buf) FAIL("no memory");
    cohort_status_t st = cohort_allreduce(world, buf, buf, count, COHORT_FLOAT32, COHORT_SUM);
    if (st) FAIL("allreduce: %s", cohort_last_error());
    if (last && !strcmp(what, "late-bcast")) sleep_s(3.0);
    for (size_t i = 0; i < count; i++) buf[i] = rank ? -1.0f : (float)i;
    st = cohort_broadcast(world, buf, count, COHORT_FLOAT32, 0);
    if (st) FAIL("broadcast of %zu floats from rank 0: %s", count, cohort_last_error());
    for (size_t i = 0; i < count; i++)
        if (buf[i] != (float)i) FAIL("broadcast: element %zu is %g, not %zu", i, buf[i], i);
    free(buf);
    if (last && !strcmp(what, "exit")) {
        printf("ok: rank %d: exits without destroying\n", rank);
        fflush(stdout);
        exit(0);
    }
    if (last && !strcmp(what, "late-destroy")) sleep_s(3.0);
    double t0 = now();
    st = cohort_comm_destroy(world);
    if (st) FAIL("destroy after collectives that agreed gave %s: %s", cohort_strerror(st),
                 cohort_last_error());
    printf("ok: rank %d: destroy succeeded in %.3f s\n", rank, now() - t0);
}

static void on_alarm(int sig)
{
    (void)sig;
    abort_at = now();
    cohort_comm_abort(world);
}

int main(int argc, char **argv)
{
    int rank = -1;
    if (argc < 2 || argc > 3)
        FAIL("usage: ctlcheck thread|signal|split|mismatch|roots|long|stall|disagree WHAT|agree "
             "WHAT");
    const char *mode = argv[1];
    int fds0 = count_fds();
    if (cohort_comm_init(&world)) FAIL("init: %s", cohort_last_error());
    rank = cohort_comm_rank(world);
    float buf[32] = { 0 };
    cohort_status_t st;

    if (!strcmp(mode, "thread") || !strcmp(mode, "signal")) {
        if (rank == 0) {
            pthread_t t;
            if (!strcmp(mode, "thread")) {
                pthread_create(&t, NULL, aborter, NULL);
            } else {
                struct sigaction sa;
                memset(&sa, 0, sizeof sa);
                sa.sa_handler = on_alarm;
                sigaction(SIGALRM, &sa, NULL);
                alarm(1);
            }
            st = cohort_allreduce(world, buf, buf, 8, COHORT_FLOAT32, COHORT_SUM);
            double took = now() - abort_at;
            if (!strcmp(mode, "thread")) pthread_join(t, NULL);
            if (st != COHORT_ERR_ABORTED)
                FAIL("allreduce returned %s, not aborted: %s", cohort_strerror(st),
                     cohort_last_error());
            if (abort_at == 0 || took > 2.0) FAIL("allreduce returned %.3f s after the abort", took);
            printf("ok: rank 0: allreduce returned 'aborted' %.3f s after the abort (%s)\n", took,
                   mode);
            st = cohort_barrier(world);
            if (st != COHORT_ERR_ABORTED) FAIL("barrier after abort gave %s", cohort_strerror(st));
            cohort_comm_destroy(world);
            int fds1 = count_fds();
            if (fds1 != fds0) FAIL("%d descriptors before init, %d after abort + destroy", fds0,
                                   fds1);
            printf("ok: rank 0: destroy after abort gave back every descriptor (%d)\n", fds1);
        } else {
            sleep_s(2.0);
            double t0 = now();
            st = cohort_allreduce(world, buf, buf, 8, COHORT_FLOAT32, COHORT_SUM);
            double took = now() - t0;
            const char *msg = cohort_last_error();
            if (st != COHORT_ERR_PEER_LOST || !strstr(msg, "rank 0"))
                FAIL("allreduce after rank 0 aborted gave %s: %s", cohort_strerror(st), msg);
            if (took > 5.0) FAIL("the failure took %.1f s", took);
            printf("ok: rank %d: allreduce failed in %.3f s: %s\n", rank, took, msg);
            cohort_comm_destroy(world);
        }
    } else if (!strcmp(mode, "split")) {
        if (rank == 0) {
            pthread_t t;
            pthread_create(&t, NULL, aborter, NULL);
            cohort_comm_t *sub = NULL;
            st = cohort_comm_split(world, 0, 0, &sub);
            double took = now() - abort_at;
            pthread_join(t, NULL);
            if (st != COHORT_ERR_ABORTED)
                FAIL("split returned %s, not aborted: %s", cohort_strerror(st),
                     cohort_last_error());
            if (took > 2.0) FAIL("split returned %.3f s after the abort", took);
            printf("ok: rank 0: split returned 'aborted' %.3f s after the abort\n", took);
        } else {
            sleep_s(3.0);
        }
        cohort_comm_destroy(world);
    } else if (!strcmp(mode, "mismatch")) {
        size_t n = rank == 0 ? 10 : 20;
        st = cohort_allreduce(world, buf, buf, n, COHORT_FLOAT32, COHORT_SUM);
        const char *msg = cohort_last_error();
        if (st != COHORT_ERR_MISMATCH) FAIL("got %s, not mismatch: %s", cohort_strerror(st), msg);
        if (!strstr(msg, "count 10") || !strstr(msg, "count 20"))
            FAIL("the message does not name both calls: %s", msg);
        printf("ok: rank %d: %s\n", rank, msg);
        cohort_comm_destroy(world);
    } else if (!strcmp(mode, "roots")) {
        st = cohort_broadcast(world, buf, 2, COHORT_FLOAT32, rank);
        if (st) FAIL("broadcast as root %d: %s", rank, cohort_last_error());
        st = cohort_allreduce(world, buf, buf, 8, COHORT_FLOAT32, COHORT_SUM);
        const char *msg = cohort_last_error();
        if (st != COHORT_ERR_MISMATCH) FAIL("allreduce after broadcasts with disagreeing roots "
                                            "got %s, not mismatch: %s", cohort_strerror(st), msg);
        if (!strstr(msg, "earlier collectives differ"))
            FAIL("the message does not say that the earlier collectives differ: %s", msg);
        printf("ok: rank %d: %s\n", rank, msg);
        cohort_comm_destroy(world);
    } else if (!strcmp(mode, "disagree") && argc == 3) {
        disagree(rank, argv[2]);
    } else if (!strcmp(mode, "agree") && argc == 3) {
        agree(rank, argv[2]);
    } else if (!strcmp(mode, "long")) {
        /* every rank computes for 3 s between two collectives (run with COHORT_TIMEOUT=1): the
         * job's control connection must not be mistaken for a rendezvous that never ends */
        for (int i = 0; i < 2; i++) {
            if (i) sleep_s(3.0);
            st = cohort_allreduce(world, buf, buf, 8, COHORT_FLOAT32, COHORT_SUM);
            if (st) FAIL("allreduce %d: %s", i, cohort_last_error());
        }
        printf("ok: rank %d: both allreduces completed\n", rank);
        cohort_comm_destroy(world);
    } else if (!strcmp(mode, "stall")) {
        /* reports come every COHORT_STALL_WARN (1 s): several while rank 2 sleeps, so that one
         * comes after rank 1 joined rank 0 even when a loaded machine starts rank 1 late */
        if (rank == 2) sleep_s(10.0);
        st = cohort_allreduce(world, buf, buf, 8, COHORT_FLOAT32, COHORT_SUM);
        if (st) FAIL("allreduce: %s", cohort_last_error());
        printf("ok: rank %d: the late allreduce completed\n", rank);
        cohort_comm_destroy(world);
    } else {
        FAIL("unknown mode %s", mode);
    }
    return 0;
}
