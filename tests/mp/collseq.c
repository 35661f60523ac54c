/* SPDX-License-Identifier: BSD-3-Clause */
/* A job's shape, run as ranks under cohortrun:
 *   cohortrun -np N tests/mp/collseq [COMMS]
 * On COMMS communicators in turn (splits of the world, then the world itself, default 8), every
 * collective at several sizes (1 element to 256 KiB) and dtypes, each result checked element by
 * element, then a barrier, and the communicator is destroyed right after it. A rank that leaves
 * the barrier first closes its connections while its peers may still be receiving its last
 * message of it: a transport must deliver what was sent before a close (the UCX plugin over tcp
 * once failed such a peer with "Endpoint timeout", test_ucx.sh). Prints one line on rank 0;
 * exits 1 on the first failure, naming the call. */
#include <cohort/cohort.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, nranks;
static long calls;

/* Small integers: every sum over up to 64 ranks is exact in every dtype below. */
static double input(int r, size_t i, int salt)
{
    return (double)((unsigned)(r * 31 + (int)(i % 1009) * 7 + salt) % 5u);
}

static void put(void *b, size_t i, cohort_dtype_t t, double v)
{
    switch (t) {
    case COHORT_INT8: ((int8_t *)b)[i] = (int8_t)v; break;
    case COHORT_INT32: ((int32_t *)b)[i] = (int32_t)v; break;
    case COHORT_INT64: ((int64_t *)b)[i] = (int64_t)v; break;
    case COHORT_FLOAT32: ((float *)b)[i] = (float)v; break;
    default: ((double *)b)[i] = v; break;
    }
}

static double get(const void *b, size_t i, cohort_dtype_t t)
{
    switch (t) {
    case COHORT_INT8: return ((const int8_t *)b)[i];
    case COHORT_INT32: return ((const int32_t *)b)[i];
    case COHORT_INT64: return (double)((const int64_t *)b)[i];
    case COHORT_FLOAT32: return ((const float *)b)[i];
    default: return ((const double *)b)[i];
    }
}

static int failed(const char *what, cohort_status_t st, size_t count, cohort_dtype_t t, int c)
{
    fprintf(stderr, "[rank %d] communicator %d, call %ld: %s of %zu %s failed: %s: %s\n", rank,
            c, calls, what, count, cohort_dtype_name(t), cohort_strerror(st),
            cohort_last_error());
    return 1;
}

static int wrong(const char *what, size_t count, cohort_dtype_t t, size_t i, double got,
                 double want, int c)
{
    fprintf(stderr, "[rank %d] communicator %d, call %ld: %s of %zu %s: element %zu is %g, "
            "expected %g\n", rank, c, calls, what, count, cohort_dtype_name(t), i, got, want);
    return 1;
}

/* Every collective once on comm with count elements of t; 0, or 1 after printing why. */
static int round_of(cohort_comm_t *comm, size_t count, cohort_dtype_t t, int c, char *a, char *b)
{
    int n = nranks, salt = (int)calls;
    cohort_status_t st;
    /* allreduce (sum) */
    for (size_t i = 0; i < count; i++) put(a, i, t, input(rank, i, salt));
    calls++;
    if ((st = cohort_allreduce(comm, a, b, count, t, COHORT_SUM)))
        return failed("allreduce", st, count, t, c);
    for (size_t i = 0; i < count; i++) {
        double want = 0;
        for (int r = 0; r < n; r++) want += input(r, i, salt);
        if (get(b, i, t) != want) return wrong("allreduce", count, t, i, get(b, i, t), want, c);
    }
    /* broadcast from a root that moves with the call */
    int root = (int)(calls % (long)n);
    for (size_t i = 0; i < count; i++) put(a, i, t, rank == root ? input(root, i, salt) : 0);
    calls++;
    if ((st = cohort_broadcast(comm, a, count, t, root)))
        return failed("broadcast", st, count, t, c);
    for (size_t i = 0; i < count; i++)
        if (get(a, i, t) != input(root, i, salt))
            return wrong("broadcast", count, t, i, get(a, i, t), input(root, i, salt), c);
    /* reduce (max) to another root */
    root = (int)(calls % (long)n);
    for (size_t i = 0; i < count; i++) put(a, i, t, input(rank, i, salt + 1));
    calls++;
    if ((st = cohort_reduce(comm, a, b, count, t, COHORT_MAX, root)))
        return failed("reduce", st, count, t, c);
    if (rank == root)
        for (size_t i = 0; i < count; i++) {
            double want = 0;
            for (int r = 0; r < n; r++)
                if (input(r, i, salt + 1) > want) want = input(r, i, salt + 1);
            if (get(b, i, t) != want) return wrong("reduce", count, t, i, get(b, i, t), want, c);
        }
    /* allgather, reduce_scatter and alltoall with count elements per rank */
    for (size_t i = 0; i < count; i++) put(a, i, t, input(rank, i, salt + 2));
    calls++;
    if ((st = cohort_allgather(comm, a, b, count, t)))
        return failed("allgather", st, count, t, c);
    for (int r = 0; r < n; r++)
        for (size_t i = 0; i < count; i++)
            if (get(b, (size_t)r * count + i, t) != input(r, i, salt + 2))
                return wrong("allgather", count, t, (size_t)r * count + i,
                             get(b, (size_t)r * count + i, t), input(r, i, salt + 2), c);
    for (size_t i = 0; i < count * (size_t)n; i++) put(a, i, t, input(rank, i, salt + 3));
    calls++;
    if ((st = cohort_reduce_scatter(comm, a, b, count, t, COHORT_SUM)))
        return failed("reduce_scatter", st, count, t, c);
    for (size_t i = 0; i < count; i++) {
        double want = 0;
        for (int r = 0; r < n; r++) want += input(r, (size_t)rank * count + i, salt + 3);
        if (get(b, i, t) != want) return wrong("reduce_scatter", count, t, i, get(b, i, t), want, c);
    }
    /* alltoall: block d of rank s holds s * 100 + d (within the dtypes' exact range) */
    for (int d = 0; d < n; d++)
        for (size_t i = 0; i < count; i++) put(a, (size_t)d * count + i, t, (rank * 3 + d) % 100);
    calls++;
    if ((st = cohort_alltoall(comm, a, b, count, t)))
        return failed("alltoall", st, count, t, c);
    for (int s = 0; s < n; s++)
        for (size_t i = 0; i < count; i++)
            if (get(b, (size_t)s * count + i, t) != (s * 3 + rank) % 100)
                return wrong("alltoall", count, t, (size_t)s * count + i,
                             get(b, (size_t)s * count + i, t), (s * 3 + rank) % 100, c);
    return 0;
}

/* The sequence on one communicator, its closing barrier, and its destruction right after. */
static int run_on(cohort_comm_t *comm, int c)
{
    static const cohort_dtype_t dtypes[] = { COHORT_INT8, COHORT_INT32, COHORT_INT64,
                                             COHORT_FLOAT32, COHORT_FLOAT64 };
    static const size_t counts[] = { 1, 7, 1000, 32768 };
    size_t maxb = 32768 * 8 * (size_t)nranks;
    char *a = malloc(maxb), *b = malloc(maxb);
    int rc = !a || !b;
    if (rc) fprintf(stderr, "[rank %d] out of memory\n", rank);
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0] && !rc; d++)
        for (size_t k = 0; k < sizeof counts / sizeof counts[0] && !rc; k++)
            rc = round_of(comm, counts[k], dtypes[d], c, a, b);
    calls++;
    cohort_status_t st;
    if (!rc && (st = cohort_barrier(comm))) rc = failed("barrier", st, 0, COHORT_INT8, c);
    st = cohort_comm_destroy(comm);
    if (!rc && st) rc = failed("cohort_comm_destroy", st, 0, COHORT_INT8, c);
    free(a);
    free(b);
    return rc;
}

int main(int argc, char **argv)
{
    int ncomms = argc > 1 ? atoi(argv[1]) : 8;
    if (argc > 2 || ncomms < 1) {
        fprintf(stderr, "usage: collseq [COMMS]\n");
        return 2;
    }
    cohort_comm_t *world;
    cohort_status_t st = cohort_comm_init(&world);
    if (st) {
        fprintf(stderr, "cohort_comm_init failed: %s: %s\n", cohort_strerror(st),
                cohort_last_error());
        return 1;
    }
    rank = cohort_comm_rank(world);
    nranks = cohort_comm_size(world);
    for (int c = 0; c < ncomms - 1; c++) {
        cohort_comm_t *sub = NULL;
        if ((st = cohort_comm_split(world, 0, rank, &sub))) {
            failed("cohort_comm_split", st, 0, COHORT_INT8, c);
            cohort_comm_destroy(world);
            return 1;
        }
        if (run_on(sub, c)) {
            cohort_comm_destroy(world);
            return 1;
        }
    }
    if (run_on(world, ncomms - 1)) return 1;
    if (rank == 0) printf("collseq np=%d: %ld collectives on %d communicators\n", nranks, calls,
                          ncomms);
    return 0;
}
