/* SPDX-License-Identifier: BSD-3-Clause */
/* faulty DIR COLL COUNT [--between]: the rank program of the fault-injection suite
 * (tests/mp/test_faults.sh, tests/netns/test_netns_faults.sh), run as a rank under cohortrun.
 *
 * Loops the collective COLL (allreduce | broadcast | alltoall; float32; broadcast from root 0;
 * alltoall with COUNT elements to each rank) of COUNT elements until one fails. The test kills a
 * rank with SIGKILL (or cuts its host's link) and reads what the others did from files in DIR,
 * each written atomically (a temporary file, then rename), so that a reader never sees half:
 *
 *   DIR/pid.<rank>  the process id, once the first collective succeeded (the test waits for
 *                   every rank's before it kills one);
 *   DIR/err.<rank>  on the first error: "<cohort_strerror(st)>: <cohort_last_error()>", and on
 *                   a second line "after S s": how long the failed collective ran (seconds since
 *                   the previous success; with --between since DIR/go appeared; since
 *                   cohort_comm_init when none succeeded);
 *   DIR/next.<rank> then the same for one more call of the collective on that communicator
 *                   (which must fail too, at once: "success" if it did not). Then
 *                   cohort_comm_destroy, exit 1.
 *
 * --between: after the first success, wait between collectives until the file DIR/go exists
 *            (nanosleep in a loop, 10 ms at a time), then run the next collective. The test
 *            kills a rank while the others wait, so the kill lands between collectives and
 *            the survivors meet the loss in the collective that follows; it then creates
 *            DIR/go. Every collective after that runs back to back, as without the option.
 *
 * Prints nothing on its success paths: the tests read the files. Exit status: 1 after an error
 * of a collective, 2 for bad arguments or a failed cohort_comm_init (message on stderr). */
#define _POSIX_C_SOURCE 200809L
#include <cohort/cohort.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void write_file(const char *dir, const char *what, int rank, const char *text)
{
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/%s.%d", dir, what, rank);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        fprintf(stderr, "faulty: cannot write %s: %s\n", tmp, strerror(errno));
        return;
    }
    fprintf(f, "%s\n", text);
    if (fclose(f) != 0 || rename(tmp, path) != 0)   /* readers never see half a file */
        fprintf(stderr, "faulty: cannot write %s: %s\n", path, strerror(errno));
}

static int file_exists(const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

enum coll { ALLREDUCE, BROADCAST, ALLTOALL };

static cohort_status_t run_coll(cohort_comm_t *c, enum coll coll, float *send, float *recv,
                                size_t n)
{
    switch (coll) {
    case ALLREDUCE: return cohort_allreduce(c, send, recv, n, COHORT_FLOAT32, COHORT_SUM);
    case BROADCAST: return cohort_broadcast(c, recv, n, COHORT_FLOAT32, 0);
    case ALLTOALL: return cohort_alltoall(c, send, recv, n, COHORT_FLOAT32);
    }
    return COHORT_ERR_INVALID_ARG;
}

static int usage(void)
{
    fprintf(stderr, "usage: faulty DIR allreduce|broadcast|alltoall COUNT [--between]\n");
    return 2;
}

int main(int argc, char **argv)
{
    if (argc != 4 && argc != 5) return usage();
    const char *dir = argv[1];
    enum coll coll;
    if (strcmp(argv[2], "allreduce") == 0) coll = ALLREDUCE;
    else if (strcmp(argv[2], "broadcast") == 0) coll = BROADCAST;
    else if (strcmp(argv[2], "alltoall") == 0) coll = ALLTOALL;
    else return usage();
    char *end;
    errno = 0;
    unsigned long long count = strtoull(argv[3], &end, 10);
    if (errno || end == argv[3] || *end || count > ((size_t)1 << 32)) return usage();
    int between = 0;
    if (argc == 5) {
        if (strcmp(argv[4], "--between") != 0) return usage();
        between = 1;
    }

    cohort_comm_t *c;
    cohort_status_t st = cohort_comm_init(&c);
    if (st) {
        fprintf(stderr, "faulty: cohort_comm_init: %s: %s\n", cohort_strerror(st),
                cohort_last_error());
        return 2;
    }
    int rank = cohort_comm_rank(c);
    size_t n = (size_t)count;
    /* alltoall sends n elements to each rank: buffers of size * n */
    size_t len = coll == ALLTOALL ? n * (size_t)cohort_comm_size(c) : n;
    float *send = malloc((len ? len : 1) * sizeof *send);
    float *recv = malloc((len ? len : 1) * sizeof *recv);
    if (!send || !recv) {
        fprintf(stderr, "faulty: out of memory for %zu floats\n", len);
        cohort_comm_destroy(c);
        return 2;
    }
    for (size_t i = 0; i < len; i++) send[i] = recv[i] = (float)(rank + 1);

    double last_ok = now_s();
    for (long it = 0;; it++) {
        if (between && it > 0) {
            /* wait here, between two collectives, until the test says go */
            const struct timespec tick = { 0, 10 * 1000 * 1000 };
            while (!file_exists(dir, "go")) nanosleep(&tick, NULL);
            last_ok = now_s();
        }
        st = run_coll(c, coll, send, recv, n);
        if (st) {
            double took = now_s() - last_ok;
            char msg[4400];
            snprintf(msg, sizeof msg, "%s: %s\nafter %.3f s", cohort_strerror(st),
                     cohort_last_error(), took);
            write_file(dir, "err", rank, msg);
            /* the next collective on the communicator must fail too (and not hang) */
            double t1 = now_s();
            st = run_coll(c, coll, send, recv, n);
            snprintf(msg, sizeof msg, "%s: %s\nafter %.3f s", st ? cohort_strerror(st) : "success",
                     st ? cohort_last_error() : "", now_s() - t1);
            write_file(dir, "next", rank, msg);
            cohort_comm_destroy(c);
            free(send);
            free(recv);
            return 1;
        }
        last_ok = now_s();
        if (it == 0) {
            char pid[32];
            snprintf(pid, sizeof pid, "%d", (int)getpid());
            write_file(dir, "pid", rank, pid);
        }
    }
}
