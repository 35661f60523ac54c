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

static void on_alarm(int sig)
{
    (void)sig;
    abort_at = now();
    cohort_comm_abort(world);
}

int main(int argc, char **argv)
{
    int rank = -1;
    if (argc != 2) FAIL("usage: ctlcheck thread|signal|split|mismatch|roots|long|stall");
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
        if (rank == 2) sleep_s(4.0);
        st = cohort_allreduce(world, buf, buf, 8, COHORT_FLOAT32, COHORT_SUM);
        if (st) FAIL("allreduce: %s", cohort_last_error());
        printf("ok: rank %d: the late allreduce completed\n", rank);
        cohort_comm_destroy(world);
    } else {
        FAIL("unknown mode %s", mode);
    }
    return 0;
}
