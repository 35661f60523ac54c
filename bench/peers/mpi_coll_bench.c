/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * mpi_coll_bench.c -- an MPI collective sweep for comparing MPI libraries with cohort.
 *
 * One collective (allreduce, broadcast, allgather, reduce_scatter or alltoall) of float32 with
 * MPI_SUM where it reduces, over sizes from -b to -e (times -f). Per size: one call whose
 * result is checked element by element on every rank (exit status 1 on a wrong element), then
 * warm-up calls, then the timed calls split into up to 5 rounds. The time of a round is its
 * per-call time; the reported time is the median over the rounds of the maximum over ranks
 * (the same as cohort-bench's RESULT lines), "min" the best round.
 *
 * Output on rank 0: nccl-tests-like columns, and per size one line
 *   RESULT,<label>,<np>,<op>,<bytes>,<iters>,<time_us>,<min_us>,<algbw_GBs>,<busbw_GBs>,<ok>
 * in the format cohort-bench --result-label prints (op "bcast" for broadcast). bytes is
 * nccl-tests' size column (the larger of the send and receive buffers of one rank), algbw =
 * bytes / time, busbw = algbw * 2(n-1)/n (allreduce), (n-1)/n (allgather, reduce_scatter,
 * alltoall), 1 (broadcast).
 *
 * Build: mpicc -O2 -std=gnu11 -Wall -Wextra -Werror -o mpi_coll_bench mpi_coll_bench.c
 */
#include <mpi.h>

#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum coll { ALLREDUCE, BROADCAST, ALLGATHER, REDUCE_SCATTER, ALLTOALL, NCOLL };
static const char *const coll_names[NCOLL] = {
    "allreduce", "broadcast", "allgather", "reduce_scatter", "alltoall"
};
/* names in RESULT lines: cohort-bench's (which says "bcast" for broadcast) */
static const char *const result_names[NCOLL] = {
    "allreduce", "bcast", "allgather", "reduce_scatter", "alltoall"
};

#define MAX_ROUNDS 5
#define POOL_BYTES ((size_t)32 << 20) /* without --same-buffer, calls move through this much */

struct opts {
    enum coll coll;
    size_t minbytes, maxbytes;
    long factor;
    int iters, warmup, nonblocking, same_buffer;
    const char *label;
};

static int rank, nranks;

static double busbw_factor(enum coll c, int n)
{
    switch (c) {
    case ALLREDUCE: return 2.0 * (n - 1) / n;
    case BROADCAST: return 1.0;
    default: return (double)(n - 1) / n;
    }
}

static void usage(FILE *f, const char *prog)
{
    fprintf(f,
            "usage: mpirun -np N %s [options]\n"
            "  -c, --coll NAME        allreduce|broadcast|allgather|reduce_scatter|alltoall\n"
            "                         (default allreduce)\n"
            "  -b, --minbytes SIZE    smallest size, K/M/G suffixes (default 8)\n"
            "  -e, --maxbytes SIZE    largest size (default 64M)\n"
            "  -f, --stepfactor N     multiply the size by N (default 2)\n"
            "  -n, --iters N          timed calls per size (default 20)\n"
            "  -w, --warmup N         untimed calls before them (default 5)\n"
            "      --nonblocking N    allreduce only: the timed calls are MPI_Iallreduce, N issued\n"
            "                         back to back (each on its own part of the buffers), then\n"
            "                         one MPI_Waitall\n"
            "      --same-buffer      every call at the start of the buffers (default: calls move\n"
            "                         through %zu MiB of buffers)\n"
            "  -l, --label L          label of the RESULT lines (default ompi, mpich or mpi)\n"
            "  -h, --help             this text\n"
            "Exit status 1 if an element was wrong, 2 on bad usage.\n",
            prog, POOL_BYTES >> 20);
}

static int parse_size(const char *s, size_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || errno)
        return -1;
    unsigned shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    default: break;
    }
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end || v > (SIZE_MAX >> shift))
        return -1;
    *out = (size_t)v << shift;
    return 0;
}

static int parse_int(const char *s, int min, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < min || v > 1000000000L)
        return -1;
    *out = (int)v;
    return 0;
}

/* Elements of one call. count: the count argument; send/recv: elements per buffer. */
struct geom {
    size_t count, send, recv, bytes;
};

static struct geom geometry(enum coll c, size_t size, int n)
{
    struct geom g;
    size_t elems = size / sizeof(float), per = elems / (size_t)n;
    memset(&g, 0, sizeof g);
    switch (c) {
    case ALLREDUCE:
    case BROADCAST: g.count = g.send = g.recv = elems; break;
    case ALLGATHER: g.count = g.send = per; g.recv = per * (size_t)n; break;
    case REDUCE_SCATTER: g.count = g.recv = per; g.send = per * (size_t)n; break;
    case ALLTOALL: g.count = per; g.send = g.recv = per * (size_t)n; break;
    default: break;
    }
    g.bytes = (g.send > g.recv ? g.send : g.recv) * sizeof(float);
    return g;
}

/* Start one call (request non-NULL: the non-blocking form, allreduce only). */
static int start_call(enum coll c, const struct geom *g, float *s, float *r, MPI_Request *req)
{
    int cnt = (int)g->count;
    switch (c) {
    case ALLREDUCE:
        if (req)
            return MPI_Iallreduce(s, r, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, req);
        return MPI_Allreduce(s, r, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    case BROADCAST: return MPI_Bcast(r, cnt, MPI_FLOAT, 0, MPI_COMM_WORLD);
    case ALLGATHER:
        return MPI_Allgather(s, cnt, MPI_FLOAT, r, cnt, MPI_FLOAT, MPI_COMM_WORLD);
    case REDUCE_SCATTER:
        return MPI_Reduce_scatter_block(s, r, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    case ALLTOALL: return MPI_Alltoall(s, cnt, MPI_FLOAT, r, cnt, MPI_FLOAT, MPI_COMM_WORLD);
    default: return MPI_ERR_OTHER;
    }
}

/* Input patterns: small integers, so float32 sums are exact. */
static float val_reduce(int r, size_t j) { return (float)((r + 1) * (int)(j % 7 + 1)); }
static float val_bcast(size_t i) { return (float)(i % 251) + 0.5f; }
static float val_gather(int r, size_t i) { return (float)(r * 1000 + (int)(i % 97)); }
static float val_a2a(int from, int to, size_t i)
{
    return (float)(from * 131 + to * 7 + (int)(i % 3));
}

/* Fill the first call's buffers, run it, count wrong elements on this rank. */
static long check_one(enum coll c, const struct geom *g, float *s, float *r)
{
    size_t per = g->count, i;
    int n = nranks;
    float tri = (float)(n * (n + 1) / 2);
    long wrong = 0;

    for (i = 0; i < g->recv; i++)
        r[i] = -1.0f;
    switch (c) {
    case ALLREDUCE:
    case REDUCE_SCATTER:
        for (i = 0; i < g->send; i++)
            s[i] = val_reduce(rank, i);
        break;
    case BROADCAST:
        if (rank == 0)
            for (i = 0; i < g->recv; i++)
                r[i] = val_bcast(i);
        break;
    case ALLGATHER:
        for (i = 0; i < g->send; i++)
            s[i] = val_gather(rank, i);
        break;
    case ALLTOALL:
        for (int d = 0; d < n; d++)
            for (i = 0; i < per; i++)
                s[(size_t)d * per + i] = val_a2a(rank, d, i);
        break;
    default: break;
    }
    if (start_call(c, g, s, r, NULL) != MPI_SUCCESS)
        return -1;
    switch (c) {
    case ALLREDUCE:
        for (i = 0; i < g->recv; i++)
            wrong += r[i] != (float)(int)(i % 7 + 1) * tri;
        break;
    case REDUCE_SCATTER:
        for (i = 0; i < g->recv; i++)
            wrong += r[i] != (float)(int)(((size_t)rank * per + i) % 7 + 1) * tri;
        break;
    case BROADCAST:
        for (i = 0; i < g->recv; i++)
            wrong += r[i] != val_bcast(i);
        break;
    case ALLGATHER:
        for (int f = 0; f < n; f++)
            for (i = 0; i < per; i++)
                wrong += r[(size_t)f * per + i] != val_gather(f, i);
        break;
    case ALLTOALL:
        for (int f = 0; f < n; f++)
            for (i = 0; i < per; i++)
                wrong += r[(size_t)f * per + i] != val_a2a(f, rank, i);
        break;
    default: break;
    }
    return wrong;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void fmt_time(char *buf, size_t len, double us)
{
    if (us >= 1e6)
        snprintf(buf, len, "%.0f", us);
    else if (us >= 1e4)
        snprintf(buf, len, "%.1f", us);
    else
        snprintf(buf, len, "%.2f", us);
}

int main(int argc, char **argv)
{
    struct opts o = { ALLREDUCE, 8, (size_t)64 << 20, 2, 20, 5, 0, 0, NULL };
    enum { OPT_NB = 256, OPT_SAME };
    static const struct option lopts[] = {
        { "coll", required_argument, 0, 'c' },      { "minbytes", required_argument, 0, 'b' },
        { "maxbytes", required_argument, 0, 'e' },  { "stepfactor", required_argument, 0, 'f' },
        { "iters", required_argument, 0, 'n' },     { "warmup", required_argument, 0, 'w' },
        { "warmup_iters", required_argument, 0, 'w' },
        { "nonblocking", required_argument, 0, OPT_NB },
        { "same-buffer", no_argument, 0, OPT_SAME }, { "label", required_argument, 0, 'l' },
        { "result-label", required_argument, 0, 'l' }, { "help", no_argument, 0, 'h' },
        { 0, 0, 0, 0 }
    };
    int ch, bad = 0, help = 0, factor = 2;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);

    opterr = rank == 0;
    while (!bad && (ch = getopt_long(argc, argv, "c:b:e:f:n:w:l:h", lopts, NULL)) != -1) {
        switch (ch) {
        case 'c': {
            int k;
            for (k = 0; k < NCOLL && strcmp(optarg, coll_names[k]); k++)
                ;
            if (k == NCOLL && !strcmp(optarg, "bcast"))
                k = BROADCAST;
            if (k == NCOLL)
                bad = 1;
            else
                o.coll = (enum coll)k;
            break;
        }
        case 'b': bad = parse_size(optarg, &o.minbytes) != 0; break;
        case 'e': bad = parse_size(optarg, &o.maxbytes) != 0; break;
        case 'f': bad = parse_int(optarg, 2, &factor) != 0; o.factor = factor; break;
        case 'n': bad = parse_int(optarg, 1, &o.iters) != 0; break;
        case 'w': bad = parse_int(optarg, 0, &o.warmup) != 0; break;
        case OPT_NB: bad = parse_int(optarg, 1, &o.nonblocking) != 0; break;
        case OPT_SAME: o.same_buffer = 1; break;
        case 'l': o.label = optarg; break;
        case 'h': help = 1; break;
        default: bad = 1; break;
        }
        if (bad && rank == 0 && ch != '?')
            fprintf(stderr, "%s: bad value for -%c: %s\n", argv[0], ch < 256 ? ch : '-',
                    optarg ? optarg : "");
    }
    if (!bad && !help && (optind < argc || o.minbytes > o.maxbytes || o.minbytes == 0)) {
        if (rank == 0)
            fprintf(stderr, "%s: need 0 < minbytes <= maxbytes and no operands\n", argv[0]);
        bad = 1;
    }
    if (!bad && !help && o.nonblocking && o.coll != ALLREDUCE) {
        if (rank == 0)
            fprintf(stderr, "%s: --nonblocking is for allreduce only\n", argv[0]);
        bad = 1;
    }
    if (bad || help) {
        if (rank == 0)
            usage(bad ? stderr : stdout, argv[0]);
        MPI_Finalize();
        return bad ? 2 : 0;
    }

    char ver[MPI_MAX_LIBRARY_VERSION_STRING];
    int verlen;
    MPI_Get_library_version(ver, &verlen);
    ver[strcspn(ver, "\n")] = 0;
    char deflabel[32];
    if (!o.label) {
        const char *lib = strstr(ver, "Open MPI") ? "ompi" : strstr(ver, "MPICH") ? "mpich"
                                                                                  : "mpi";
        if (o.nonblocking)
            snprintf(deflabel, sizeof deflabel, "%s-nb%d", lib, o.nonblocking);
        else
            snprintf(deflabel, sizeof deflabel, "%s", lib);
        o.label = deflabel;
    }

    /* Buffers: the largest call's, times the parts the calls move through or are in flight on. */
    struct geom gmax = geometry(o.coll, o.maxbytes, nranks);
    size_t sendmax = gmax.send ? gmax.send : 1, recvmax = gmax.recv ? gmax.recv : 1;
    size_t bufmax = (sendmax > recvmax ? sendmax : recvmax) * sizeof(float);
    size_t parts = 1;
    if (o.nonblocking)
        parts = (size_t)o.nonblocking;
    if (!o.same_buffer && bufmax * parts < POOL_BYTES)
        parts = POOL_BYTES / bufmax;
    float *sbuf = malloc(sendmax * parts * sizeof(float));
    float *rbuf = malloc(recvmax * parts * sizeof(float));
    /* real status arrays: MPICH's MPI_STATUSES_IGNORE trips gcc's -Wstringop-overflow */
    MPI_Request *reqs = o.nonblocking ? malloc((size_t)o.nonblocking * sizeof *reqs) : NULL;
    MPI_Status *stats = o.nonblocking ? malloc((size_t)o.nonblocking * sizeof *stats) : NULL;
    if (!sbuf || !rbuf || (o.nonblocking && (!reqs || !stats))) {
        fprintf(stderr, "%s: rank %d: out of memory\n", argv[0], rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (size_t i = 0; i < sendmax * parts; i++)
        sbuf[i] = 1.0f;
    for (size_t i = 0; i < recvmax * parts; i++)
        rbuf[i] = 0.0f;

    if (rank == 0) {
        printf("# %s\n# mpi_coll_bench: %s float32 sum, np %d, %d iters (%d warm-up), %s%s\n",
               ver, coll_names[o.coll], nranks, o.iters, o.warmup,
               o.same_buffer ? "same buffer" : "moving through the buffers",
               o.nonblocking ? ", non-blocking" : "");
        if (o.nonblocking)
            printf("# MPI_Iallreduce: %d issued back to back, then MPI_Waitall\n", o.nonblocking);
        printf("#\n# %10s  %12s  %8s  %6s  %6s  %9s  %7s  %7s  %6s\n", "size", "count", "type",
               "redop", "root", "time(us)", "algbw", "busbw", "#wrong");
        fflush(stdout);
    }

    int status = 0, nrounds = o.iters < MAX_ROUNDS ? o.iters : MAX_ROUNDS;
    for (size_t size = o.minbytes; size <= o.maxbytes;) {
        struct geom g = geometry(o.coll, size, nranks);
        if (g.count == 0) {
            if (rank == 0)
                printf("# %zu bytes: nothing to move at np %d, skipped\n", size, nranks);
        } else {
            size_t sstride = g.send, rstride = g.recv;
            /* without --same-buffer, call i runs on part i % steps of the buffers */
            size_t steps = 1;
            if (!o.same_buffer) {
                size_t ss = sendmax * parts / sstride, rs = recvmax * parts / rstride;
                steps = ss < rs ? ss : rs;
            }

            long wrong = check_one(o.coll, &g, sbuf, rbuf), allwrong;
            MPI_Allreduce(&wrong, &allwrong, 1, MPI_LONG, MPI_MAX, MPI_COMM_WORLD);
            if (allwrong) {
                long tot;
                MPI_Reduce(&wrong, &tot, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
                if (rank == 0)
                    fprintf(stderr, "%s: %s of %zu bytes: %ld wrong elements (or a failed call)\n",
                            argv[0], coll_names[o.coll], g.bytes, tot);
                status = 1;
                break;
            }

            double round_us[MAX_ROUNDS], maxr[MAX_ROUNDS];
            size_t it = 0;
            for (int w = 0; w < o.warmup; w++, it++)
                start_call(o.coll, &g, sbuf + sstride * (it % steps), rbuf + rstride * (it % steps),
                           NULL);
            MPI_Barrier(MPI_COMM_WORLD);
            int done = 0;
            for (int rd = 0; rd < nrounds; rd++) {
                int end = (int)((long long)o.iters * (rd + 1) / nrounds), k = end - done;
                double t0 = MPI_Wtime();
                if (o.nonblocking) {
                    for (int j = 0; j < k;) {
                        int batch = k - j < o.nonblocking ? k - j : o.nonblocking;
                        for (int q = 0; q < batch; q++)
                            start_call(o.coll, &g, sbuf + sstride * (size_t)q,
                                       rbuf + rstride * (size_t)q, &reqs[q]);
                        MPI_Waitall(batch, reqs, stats);
                        j += batch;
                    }
                } else {
                    for (int j = 0; j < k; j++, it++)
                        start_call(o.coll, &g, sbuf + sstride * (it % steps),
                                   rbuf + rstride * (it % steps), NULL);
                }
                round_us[rd] = (MPI_Wtime() - t0) * 1e6 / k;
                done = end;
            }
            MPI_Reduce(round_us, maxr, nrounds, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
            if (rank == 0) {
                qsort(maxr, (size_t)nrounds, sizeof maxr[0], cmp_double);
                double med = nrounds % 2 ? maxr[nrounds / 2]
                                         : 0.5 * (maxr[nrounds / 2 - 1] + maxr[nrounds / 2]);
                double algbw = (double)g.bytes / (med * 1e-6) / 1e9;
                double busbw = algbw * busbw_factor(o.coll, nranks);
                char t[32];
                fmt_time(t, sizeof t, med);
                printf("  %10zu  %12zu  %8s  %6s  %6d  %9s  %7.2f  %7.2f  %6d\n", g.bytes, g.count,
                       "float", o.coll == BROADCAST || o.coll == ALLGATHER || o.coll == ALLTOALL
                                    ? "none" : "sum",
                       o.coll == BROADCAST ? 0 : -1, t, algbw, busbw, 0);
                printf("RESULT,%s,%d,%s,%zu,%d,%.3f,%.3f,%.4f,%.4f,ok\n", o.label, nranks,
                       result_names[o.coll], g.bytes, o.iters, med, maxr[0], algbw, busbw);
                fflush(stdout);
            }
        }
        if (size > o.maxbytes / (size_t)o.factor)
            break;
        size *= (size_t)o.factor;
    }

    free(sbuf);
    free(rbuf);
    free(reqs);
    free(stats);
    MPI_Finalize();
    return status;
}
