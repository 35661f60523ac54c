/* SPDX-License-Identifier: BSD-3-Clause */
/* cohort-bench: performance and correctness sweep of cohort's collectives, after nccl-tests.
 *
 *   cohortrun -np 4 cohort-bench -c allreduce -b 8 -e 64M -f 2
 *
 * Same options as nccl-tests where they exist, the same first columns and busbw factors, plus
 * min/max time across ranks, JSON/CSV output, RESULT lines for the tools/peers tables (MPI,
 * Gloo) and an SVG plot of several earlier runs. It is a plain user of the public API
 * (include/cohort/cohort.h): even the timings are reduced across ranks with cohort_allreduce.
 * See docs/bench.md.
 *
 * This file: the names of the collectives, dtypes and ops, the options, the sweep over sizes and
 * main. Timing one size is bench_run.c, the test data and its check bench_check.c, the table and
 * the JSON and CSV files bench_out.c, the --svg plot svg.c (bench.h: what they share).
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "cohort/cohort.h"
#include "bench.h"

/* ------------------------------------------------------------------------------------------ */
/* Collectives, dtypes and ops                                                                 */

const char *const bench_coll_names[C_COUNT] = {
    "allreduce", "broadcast", "reduce", "allgather", "reduce_scatter", "alltoall", "barrier"
};

int bench_coll_reduces(coll_t c)
{
    return c == C_ALLREDUCE || c == C_REDUCE || c == C_REDUCE_SCATTER;
}
int bench_coll_has_root(coll_t c)
{
    return c == C_BROADCAST || c == C_REDUCE;
}

/* nccl-tests' bus bandwidth factors. */
double bench_busbw_factor(coll_t c, int n)
{
    switch (c) {
    case C_ALLREDUCE: return n > 0 ? 2.0 * (n - 1) / n : 0.0;
    case C_ALLGATHER:
    case C_REDUCE_SCATTER:
    case C_ALLTOALL: return n > 0 ? (double)(n - 1) / n : 0.0;
    case C_BROADCAST:
    case C_REDUCE: return 1.0;
    default: return 0.0;
    }
}

const char *const bench_dtype_names[COHORT_DTYPE_COUNT] = {
    "int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "bfloat16", "float32",
    "float64"
};
const char *const bench_op_names[COHORT_OP_COUNT] = { "sum", "prod", "min", "max", "avg" };

static int parse_dtype(const char *s, cohort_dtype_t *out)
{
    static const struct { const char *alias; cohort_dtype_t dt; } aliases[] = {
        { "char", COHORT_INT8 }, { "uchar", COHORT_UINT8 }, { "int", COHORT_INT32 },
        { "uint", COHORT_UINT32 }, { "half", COHORT_FLOAT16 }, { "fp16", COHORT_FLOAT16 },
        { "bf16", COHORT_BFLOAT16 }, { "float", COHORT_FLOAT32 }, { "fp32", COHORT_FLOAT32 },
        { "double", COHORT_FLOAT64 }, { "fp64", COHORT_FLOAT64 },
    };
    for (int i = 0; i < COHORT_DTYPE_COUNT; i++)
        if (!strcasecmp(s, bench_dtype_names[i])) {
            *out = (cohort_dtype_t)i;
            return 0;
        }
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (!strcasecmp(s, aliases[i].alias)) {
            *out = aliases[i].dt;
            return 0;
        }
    return -1;
}

/* ------------------------------------------------------------------------------------------ */
/* Options                                                                                     */

enum {
    OPT_CHECK = 256, OPT_TRANSPORT, OPT_ALGO, OPT_JSON, OPT_CSV, OPT_LABEL, OPT_SVG, OPT_FROM,
    OPT_LABELS, OPT_TITLE, OPT_YLOG, OPT_SAME, OPT_MEM, OPT_TOUCH, OPT_FRESH,
    OPT_NONBLOCKING, OPT_GROUP, OPT_PARTS, OPT_OVERLAP, OPT_VERSION
};

static void usage(FILE *f, const char *prog)
{
    fprintf(f,
        "usage: %s [options]          (launched as ranks: cohortrun -np N %s ...)\n"
        "  -c, --coll NAME          allreduce|broadcast|reduce|allgather|reduce_scatter|alltoall|barrier\n"
        "                           (default allreduce)\n"
        "  -b, --minbytes SIZE      smallest size, K/M/G suffixes (default 32M)\n"
        "  -e, --maxbytes SIZE      largest size (default 32M)\n"
        "  -f, --stepfactor N       multiply the size by N (default 2)\n"
        "  -i, --stepbytes SIZE     add SIZE instead of multiplying (the last of -f/-i wins)\n"
        "  -d, --datatype T         int8|uint8|int32|uint32|int64|uint64|float16|bfloat16|\n"
        "                           float32|float64|all (default float32)\n"
        "  -o, --op OP              sum|prod|min|max|avg|all (default sum)\n"
        "  -r, --root N             root of broadcast and reduce (default 0)\n"
        "  -n, --iters N            timed iterations per size (default 20)\n"
        "  -w, --warmup_iters N     untimed iterations before them (default 5)\n"
        "      --check 0|1          verify one call per size and placement (default 1)\n"
        "  -z, --blocking 0|1       accepted and ignored (see --nonblocking)\n"
        "  -a, --average 0|1|2|3    time column across ranks: 0 rank 0, 1 avg, 2 min, 3 max\n"
        "                           (default 1, as nccl-tests)\n"
        "      --transport T        set COHORT_TRANSPORTS=T before init\n"
        "      --algo A             set COHORT_ALGO=<coll>:A before init\n"
        "      --json FILE          write every result and the run's metadata as JSON\n"
        "      --csv FILE           the same as CSV\n"
        "      --result-label L     also print RESULT,L,... lines (bench/peers/ format)\n"
        "      --same-buffer        every call uses the start of the buffers (cache-warm, as the\n"
        "                           peers' MPI driver) instead of moving through them\n"
        "      --mem KIND           malloc (default) or cohort: buffers from cohort_mem_alloc,\n"
        "                           which node collectives over shm read in place\n"
        "      --touch              before each timed call, store to every cache line of the\n"
        "                           send buffer and load every line of the receive buffer (a\n"
        "                           producer and a consumer: data must move between cores;\n"
        "                           the time includes them)\n"
        "      --fresh              each warm-up and timed call on buffers allocated just before\n"
        "                           it (malloc, or cohort_mem_alloc with --mem cohort) and freed\n"
        "                           after, as a framework's allocator hands out tensors: what\n"
        "                           registering memory costs; the time is the calls' alone\n"
        "      --svg FILE --from J1,J2,...  [--labels L1,L2,...] [--title T] [--ylog]\n"
        "                           no communication: plot busbw against size from JSON files\n"
        "                           of earlier runs, one polyline per file, as a standalone SVG\n"
        "      --nonblocking N      the timed calls non-blocking (cohort_iallreduce, ...), up to N\n"
        "                           in flight (issued back to back; the oldest waited for when\n"
        "                           N are out; all at the end of each timing round); each in its\n"
        "                           own part of the buffers, which hold N of the largest size;\n"
        "                           the warm-up calls run as the timed ones, N at least (a\n"
        "                           full burst) unless -w 0\n"
        "      --group N            the timed calls in groups of N (cohort_group_start/end: the\n"
        "                           allreduces of a group fused up to COHORT_FUSION_THRESHOLD),\n"
        "                           each in its own part of the buffers; warm-up as above\n"
        "      --parts N            buffers for N calls of the largest size, which the calls\n"
        "                           move through in turn: blocking calls on the buffers that\n"
        "                           --nonblocking N or --group N use (as a training step's\n"
        "                           gradients, and the peers' 'many' driver's blocking loop)\n"
        "      --overlap            instead of the table: per size, one float32 sum allreduce\n"
        "                           (cohort_iallreduce) in flight while the caller computes (a\n"
        "                           loop as long as the blocking allreduce takes) without\n"
        "                           cohort_test, then cohort_wait; prints OVERLAP lines: comm,\n"
        "                           compute and both (us, max over ranks, median of 5) and\n"
        "                           both / max(comm, compute) (1.0: fully hidden)\n"
        "  -h, --help               this text\n"
        "      --version            print the version\n"
        "Output (rank 0): nccl-tests' columns (size count type redop root, then time algbw busbw\n"
        "#wrong out of place and in place), then min/max time across ranks and the algorithm.\n"
        "Exit status 1 if any element was wrong or any call failed, 2 on bad usage.\n",
        prog, prog);
}

/* "8", "64K", "1.5M", "2G" (binary units, as nccl-tests); optional trailing B or iB. Decimal
 * digits with an optional fraction, as every number cohort reads (no hex, inf or exponent). */
static int parse_size(const char *s, size_t *out)
{
    size_t k = strspn(s, "0123456789");
    if (k == 0 || (s[k] == '.' && strspn(s + k + 1, "0123456789") == 0))
        return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end != s + k + (s[k] == '.' ? 1 + strspn(s + k + 1, "0123456789") : 0) || errno ||
        !(v >= 0))
        return -1;
    double mul = 1;
    switch (*end) {
    case 'k': case 'K': mul = 1024.0; end++; break;
    case 'm': case 'M': mul = 1024.0 * 1024; end++; break;
    case 'g': case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
    case 't': case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: break;
    }
    if (mul > 1 && *end == 'i')
        end++;
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end)
        return -1;
    v *= mul;
    if (v >= 18446744073709551615.0)
        return -1;
    *out = (size_t)v;
    return 0;
}

/* Decimal, as every number cohort reads: "010" is ten, "0x10" is refused. */
static int parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < lo || v > hi || !strchr("+-0123456789", *s))
        return -1;
    *out = v;
    return 0;
}

/* Returns 0 to go on, 1 to exit 0 (help), 2 to exit 2 (bad usage; message printed). */
static int parse_options(int argc, char **argv, opts_t *o)
{
    static const struct option longopts[] = {
        { "coll", required_argument, 0, 'c' },
        { "minbytes", required_argument, 0, 'b' },
        { "maxbytes", required_argument, 0, 'e' },
        { "stepfactor", required_argument, 0, 'f' },
        { "stepbytes", required_argument, 0, 'i' },
        { "datatype", required_argument, 0, 'd' },
        { "op", required_argument, 0, 'o' },
        { "root", required_argument, 0, 'r' },
        { "iters", required_argument, 0, 'n' },
        { "warmup_iters", required_argument, 0, 'w' },
        { "blocking", required_argument, 0, 'z' },
        { "average", required_argument, 0, 'a' },
        { "check", required_argument, 0, OPT_CHECK },
        { "transport", required_argument, 0, OPT_TRANSPORT },
        { "algo", required_argument, 0, OPT_ALGO },
        { "json", required_argument, 0, OPT_JSON },
        { "csv", required_argument, 0, OPT_CSV },
        { "result-label", required_argument, 0, OPT_LABEL },
        { "svg", required_argument, 0, OPT_SVG },
        { "from", required_argument, 0, OPT_FROM },
        { "labels", required_argument, 0, OPT_LABELS },
        { "title", required_argument, 0, OPT_TITLE },
        { "ylog", no_argument, 0, OPT_YLOG },
        { "same-buffer", no_argument, 0, OPT_SAME },
        { "mem", required_argument, 0, OPT_MEM },
        { "touch", no_argument, 0, OPT_TOUCH },
        { "fresh", no_argument, 0, OPT_FRESH },
        { "nonblocking", required_argument, 0, OPT_NONBLOCKING },
        { "group", required_argument, 0, OPT_GROUP },
        { "parts", required_argument, 0, OPT_PARTS },
        { "overlap", no_argument, 0, OPT_OVERLAP },
        { "help", no_argument, 0, 'h' },
        { "version", no_argument, 0, OPT_VERSION },
        { 0, 0, 0, 0 }
    };
    const char *prog = argv[0];
    memset(o, 0, sizeof *o);
    o->coll = C_ALLREDUCE;
    o->minbytes = o->maxbytes = 32u << 20;   /* nccl-tests' defaults */
    o->stepbytes = 1u << 20;
    o->stepfactor = 2;
    o->ndtypes = 1;
    o->dtypes[0] = COHORT_FLOAT32;
    o->nops = 1;
    o->ops[0] = COHORT_SUM;
    o->iters = 20;
    o->warmup = 5;
    o->check = 1;
    o->average = 1;

    int c;
    long v;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":c:b:e:f:i:d:o:r:n:w:z:a:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'c': {
            int found = 0;
            for (int i = 0; i < C_COUNT; i++)
                if (!strcasecmp(optarg, bench_coll_names[i])) {
                    o->coll = (coll_t)i;
                    found = 1;
                }
            if (!strcasecmp(optarg, "bcast")) {
                o->coll = C_BROADCAST;
                found = 1;
            }
            if (!found) {
                fprintf(stderr, "cohort-bench: unknown collective '%s' (-c): use allreduce, "
                        "broadcast, reduce, allgather, reduce_scatter, alltoall or barrier\n",
                        optarg);
                return 2;
            }
            break;
        }
        case 'b':
        case 'e':
        case 'i': {
            size_t sz;
            if (parse_size(optarg, &sz)) {
                fprintf(stderr, "cohort-bench: bad size '%s' for -%c (examples: 8, 64K, 1M, 2G)\n",
                        optarg, c);
                return 2;
            }
            if (c == 'b')
                o->minbytes = sz;
            else if (c == 'e')
                o->maxbytes = sz;
            else {
                if (sz == 0) {
                    fprintf(stderr, "cohort-bench: -i/--stepbytes must be > 0\n");
                    return 2;
                }
                o->stepbytes = sz;
                o->additive = 1;
            }
            break;
        }
        case 'f':
            if (parse_long(optarg, 2, 1 << 20, &v)) {
                fprintf(stderr, "cohort-bench: -f/--stepfactor wants an integer >= 2, not '%s'\n",
                        optarg);
                return 2;
            }
            o->stepfactor = v;
            o->additive = 0;
            break;
        case 'd':
            if (!strcasecmp(optarg, "all")) {
                o->ndtypes = COHORT_DTYPE_COUNT;
                for (int i = 0; i < COHORT_DTYPE_COUNT; i++)
                    o->dtypes[i] = (cohort_dtype_t)i;
            } else if (parse_dtype(optarg, &o->dtypes[0])) {
                fprintf(stderr, "cohort-bench: unknown datatype '%s' (-d): use int8, uint8, int32, "
                        "uint32, int64, uint64, float16, bfloat16, float32, float64 or all\n",
                        optarg);
                return 2;
            } else {
                o->ndtypes = 1;
            }
            break;
        case 'o':
            if (!strcasecmp(optarg, "all")) {
                o->nops = COHORT_OP_COUNT;
                for (int i = 0; i < COHORT_OP_COUNT; i++)
                    o->ops[i] = (cohort_op_t)i;
            } else {
                int found = 0;
                for (int i = 0; i < COHORT_OP_COUNT; i++)
                    if (!strcasecmp(optarg, bench_op_names[i])) {
                        o->ops[0] = (cohort_op_t)i;
                        found = 1;
                    }
                if (!found) {
                    fprintf(stderr, "cohort-bench: unknown op '%s' (-o): use sum, prod, min, max, "
                            "avg or all\n", optarg);
                    return 2;
                }
                o->nops = 1;
            }
            break;
        case 'r':
            if (parse_long(optarg, 0, INT_MAX, &v)) {
                fprintf(stderr, "cohort-bench: bad root '%s' (-r)\n", optarg);
                return 2;
            }
            o->root = (int)v;
            break;
        case 'n':
            if (parse_long(optarg, 1, INT_MAX, &v)) {
                fprintf(stderr, "cohort-bench: -n/--iters wants an integer >= 1, not '%s'\n",
                        optarg);
                return 2;
            }
            o->iters = (int)v;
            break;
        case 'w':
            if (parse_long(optarg, 0, INT_MAX, &v)) {
                fprintf(stderr, "cohort-bench: -w/--warmup_iters wants an integer >= 0, not '%s'\n",
                        optarg);
                return 2;
            }
            o->warmup = (int)v;
            break;
        case 'z':
            if (parse_long(optarg, 0, 1, &v)) {
                fprintf(stderr, "cohort-bench: -z/--blocking wants 0 or 1, not '%s'\n", optarg);
                return 2;
            }
            break;
        case 'a':
            if (parse_long(optarg, 0, 3, &v)) {
                fprintf(stderr, "cohort-bench: -a/--average wants 0 (rank 0), 1 (avg), 2 (min) or "
                        "3 (max), not '%s'\n", optarg);
                return 2;
            }
            o->average = (int)v;
            break;
        case OPT_CHECK:
            if (parse_long(optarg, 0, 1, &v)) {
                fprintf(stderr, "cohort-bench: --check wants 0 or 1, not '%s'\n", optarg);
                return 2;
            }
            o->check = (int)v;
            break;
        case OPT_TRANSPORT: o->transport = optarg; break;
        case OPT_ALGO: o->algo = optarg; break;
        case OPT_JSON: o->json = optarg; break;
        case OPT_CSV: o->csv = optarg; break;
        case OPT_LABEL: o->label = optarg; break;
        case OPT_SAME: o->same_buffer = 1; break;
        case OPT_TOUCH: o->touch = 1; break;
        case OPT_FRESH: o->fresh = 1; break;
        case OPT_OVERLAP: o->overlap = 1; break;
        case OPT_VERSION:
            printf("cohort-bench (cohort) %s\n", cohort_version());
            return 1;
        case OPT_NONBLOCKING:
        case OPT_GROUP:
        case OPT_PARTS:
            if (parse_long(optarg, 1, 1 << 20, &v)) {
                fprintf(stderr, "cohort-bench: --%s wants a number from 1 to %d, not '%s'\n",
                        c == OPT_GROUP ? "group" : c == OPT_PARTS ? "parts" : "nonblocking",
                        1 << 20, optarg);
                return 2;
            }
            if (c == OPT_GROUP) o->group = (int)v;
            else if (c == OPT_PARTS) o->parts = (int)v;
            else o->nonblocking = (int)v;
            break;
        case OPT_MEM:
            if (!strcasecmp(optarg, "cohort") || !strcasecmp(optarg, "malloc")) {
                o->cohort_mem = !strcasecmp(optarg, "cohort");
            } else {
                fprintf(stderr, "cohort-bench: unknown memory '%s' (--mem): use malloc or cohort\n",
                        optarg);
                return 2;
            }
            break;
        case OPT_SVG: o->svg = optarg; break;
        case OPT_FROM: o->from = optarg; break;
        case OPT_LABELS: o->labels = optarg; break;
        case OPT_TITLE: o->title = optarg; break;
        case OPT_YLOG: o->ylog = 1; break;
        case 'h':
            usage(stdout, prog);
            return 1;
        case ':':
            fprintf(stderr, "cohort-bench: option '%s' needs a value (see -h)\n", argv[optind - 1]);
            return 2;
        default:
            fprintf(stderr, "cohort-bench: unknown option '%s' (see -h)\n", argv[optind - 1]);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "cohort-bench: unexpected argument '%s' (see -h)\n", argv[optind]);
        return 2;
    }
    if (o->nonblocking && o->group) {
        fprintf(stderr, "cohort-bench: --nonblocking and --group do not go together\n");
        return 2;
    }
    if ((o->nonblocking || o->group) && (o->fresh || o->same_buffer || o->touch)) {
        fprintf(stderr, "cohort-bench: --nonblocking and --group need calls on buffers of their "
                "own: not with --fresh, --same-buffer or --touch\n");
        return 2;
    }
    if (o->parts && (o->fresh || o->same_buffer)) {
        fprintf(stderr, "cohort-bench: --parts gives the calls buffers to move through: not with "
                "--fresh or --same-buffer\n");
        return 2;
    }
    if (o->svg || o->from) {
        if (!o->svg || !o->from) {
            fprintf(stderr, "cohort-bench: --svg FILE and --from J1,J2,... go together\n");
            return 2;
        }
        return 0;
    }
    if (o->labels || o->title || o->ylog) {
        fprintf(stderr, "cohort-bench: --labels, --title and --ylog only go with --svg\n");
        return 2;
    }
    if (o->minbytes > o->maxbytes) {
        fprintf(stderr, "cohort-bench: -b (%zu) is larger than -e (%zu)\n", o->minbytes,
                o->maxbytes);
        return 2;
    }
    if (!o->additive && o->minbytes == 0) {
        fprintf(stderr, "cohort-bench: -b 0 never grows with -f: use -b > 0 or -i\n");
        return 2;
    }
    if (!bench_coll_reduces(o->coll))
        o->nops = 1;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* The sweep                                                                                   */

static int sweep(bench_t *b)
{
    if (b->o.overlap) {
        for (size_t size = b->o.minbytes; size && size <= b->o.maxbytes; size *= 2)
            if (bench_overlap_size(b, size)) {
                fprintf(stderr, "cohort-bench: rank %d: overlap run failed: %s\n", b->rank,
                        cohort_last_error());
                return -1;
            }
        return 0;
    }
    const opts_t *o = &b->o;
    unsigned seed = 1;
    if (o->coll == C_BARRIER)
        return bench_size(b, 0, COHORT_FLOAT32, COHORT_SUM, seed);
    for (int d = 0; d < o->ndtypes; d++) {
        for (int p = 0; p < o->nops; p++) {
            size_t size = o->minbytes;
            for (;;) {
                if (bench_size(b, size, o->dtypes[d], o->ops[p], seed))
                    return -1;
                seed += 2;
                size_t next;
                if (o->additive) {
                    if (size > SIZE_MAX - o->stepbytes)
                        break;
                    next = size + o->stepbytes;
                } else {
                    if (size > SIZE_MAX / (size_t)o->stepfactor)
                        break;
                    next = size * (size_t)o->stepfactor;
                }
                if (next > o->maxbytes)
                    break;
                size = next;
            }
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    bench_t b;
    memset(&b, 0, sizeof b);
    int pr = parse_options(argc, argv, &b.o);
    if (pr == 1)
        return 0;
    if (pr)
        return 2;
    if (b.o.svg)
        return bench_svg(b.o.svg, b.o.from, b.o.labels, b.o.title, b.o.ylog);

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (b.o.transport && setenv("COHORT_TRANSPORTS", b.o.transport, 1)) {
        fprintf(stderr, "cohort-bench: setenv: %s\n", strerror(errno));
        return 1;
    }
    if (b.o.algo) {
        char spec[256];
        snprintf(spec, sizeof spec, "%s:%s", bench_coll_names[b.o.coll], b.o.algo);
        if (setenv("COHORT_ALGO", spec, 1)) {
            fprintf(stderr, "cohort-bench: setenv: %s\n", strerror(errno));
            return 1;
        }
    }

    cohort_status_t st = cohort_comm_init(&b.comm);
    if (st) {
        fprintf(stderr, "cohort-bench: cohort_comm_init failed: %s: %s\n", cohort_strerror(st),
                cohort_last_error());
        return 1;
    }
    b.rank = cohort_comm_rank(b.comm);
    b.n = cohort_comm_size(b.comm);
    b.nreps = b.o.iters < MAX_REPS ? b.o.iters : MAX_REPS;
    int rc = 0;

    if (bench_coll_has_root(b.o.coll) && b.o.root >= b.n) {
        if (b.rank == 0)
            fprintf(stderr, "cohort-bench: root %d (-r) is not a rank: np is %d\n", b.o.root,
                    b.n);
        cohort_comm_destroy(b.comm);
        return 2;
    }

    if (b.o.coll != C_BARRIER) {
        b.alloc = (b.o.maxbytes + 63) / 64 * 64;
        if (b.alloc == 0)
            b.alloc = 64;
        /* --nonblocking / --group: a part of the buffers for each call in flight; --parts: as
         * many parts for blocking calls to move through */
        size_t parts = (size_t)(b.o.nonblocking > b.o.group ? b.o.nonblocking : b.o.group);
        if ((size_t)b.o.parts > parts)
            parts = (size_t)b.o.parts;
        if (parts > 1) {
            if (b.alloc > ((size_t)4 << 30) / parts) {
                if (b.rank == 0)
                    fprintf(stderr, "cohort-bench: buffers for %zu calls of up to %zu bytes "
                            "need more than 4 GiB; lower --nonblocking, --group, --parts or -e\n",
                            parts, b.alloc);
                cohort_comm_destroy(b.comm);
                return 2;
            }
            b.alloc *= parts;
        }
        void *s = NULL, *r = NULL;
        if (b.o.cohort_mem) {
            cohort_status_t s1 = cohort_mem_alloc(b.alloc, &s);
            cohort_status_t s2 = s1 ? s1 : cohort_mem_alloc(b.alloc, &r);
            if (s1 || s2) {
                fprintf(stderr, "cohort-bench: rank %d: %s\n", b.rank, cohort_last_error());
                cohort_mem_free(s);
                cohort_comm_abort(b.comm);
                cohort_comm_destroy(b.comm);
                return 1;
            }
        }
        int e1 = b.o.cohort_mem ? 0 : posix_memalign(&s, 64, b.alloc);
        int e2 = b.o.cohort_mem ? 0 : posix_memalign(&r, 64, b.alloc);
        if (e1 || e2) {
            fprintf(stderr, "cohort-bench: rank %d: cannot allocate 2 x %zu bytes (-e): %s\n",
                    b.rank, b.alloc, strerror(e1 ? e1 : e2));
            free(e1 ? NULL : s);
            free(e2 ? NULL : r);
            cohort_comm_abort(b.comm);
            cohort_comm_destroy(b.comm);
            return 1;
        }
        /* Zeros: with --check 0 the data is never filled, and garbage could hold NaNs or
         * denormals that slow the reductions down. */
        memset(s, 0, b.alloc);
        memset(r, 0, b.alloc);
        b.sendbuf = s;
        b.recvbuf = r;
    }

    meta_t m;
    memset(&m, 0, sizeof m);
    m.transport = b.n > 1 ? cohort_comm_peer_transport(b.comm, 1) : "self";
    if (!m.transport)
        m.transport = "?";
    m.nodes = cohort_comm_node_count(b.comm);
    {
        time_t t = time(NULL);
        struct tm tmv;
        gmtime_r(&t, &tmv);
        strftime(m.date, sizeof m.date, "%Y-%m-%dT%H:%M:%SZ", &tmv);
        if (gethostname(m.host, sizeof m.host - 1))
            snprintf(m.host, sizeof m.host, "?");
    }
    if (b.rank == 0)
        bench_print_header(&b, m.transport);

    if (sweep(&b)) {
        rc = 1;
        /* Let the other ranks fail fast instead of waiting for their timeout. */
        cohort_comm_abort(b.comm);
    }

    if (b.rank == 0) {
        int nbw = 0;
        double sumbw = 0;
        for (size_t i = 0; i < b.nres; i++) {
            const place_res_t *ps[2] = { &b.res[i].oop, &b.res[i].ip };
            for (int k = 0; k < 2; k++) {
                if (!ps[k]->valid)
                    continue;
                sumbw += ps[k]->busbw;
                nbw++;
                if (ps[k]->wrong > 0)
                    m.out_of_bounds++;
            }
        }
        m.avg_busbw = nbw ? sumbw / nbw : 0;
        if (b.failed)
            printf("# FAILED: %s\n", b.failmsg);
        printf("# Out of bounds values : %d %s\n", m.out_of_bounds,
               m.out_of_bounds || b.failed ? "FAILED" : "OK");
        printf("# Avg bus bandwidth    : %g\n", m.avg_busbw);
        printf("#\n");
        if (m.out_of_bounds)
            rc = 1;
        if (b.o.json && bench_write_json(&b, &m, b.o.json, argc, argv))
            rc = 1;
        if (b.o.csv && bench_write_csv(&b, &m, b.o.csv))
            rc = 1;
    }
    free(b.res);
    if (b.o.cohort_mem) {
        cohort_mem_free(b.sendbuf);
        cohort_mem_free(b.recvbuf);
    } else {
        free(b.sendbuf);
        free(b.recvbuf);
    }
    st = cohort_comm_destroy(b.comm);
    if (st && !b.failed) {
        fprintf(stderr, "cohort-bench: rank %d: cohort_comm_destroy failed: %s: %s\n", b.rank,
                cohort_strerror(st), cohort_last_error());
        rc = 1;
    }
    return rc;
}
