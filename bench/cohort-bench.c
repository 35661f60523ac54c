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
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
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

typedef enum {
    C_ALLREDUCE, C_BROADCAST, C_REDUCE, C_ALLGATHER, C_REDUCE_SCATTER, C_ALLTOALL, C_BARRIER,
    C_COUNT
} coll_t;

static const char *const coll_names[C_COUNT] = {
    "allreduce", "broadcast", "reduce", "allgather", "reduce_scatter", "alltoall", "barrier"
};
/* Op names in RESULT lines: those of the peer drivers, bench/peers/ (bcast), ours elsewhere. */
static const char *const coll_result_names[C_COUNT] = {
    "allreduce", "bcast", "reduce", "allgather", "reduce_scatter", "alltoall", "barrier"
};

static int coll_reduces(coll_t c)
{
    return c == C_ALLREDUCE || c == C_REDUCE || c == C_REDUCE_SCATTER;
}
static int coll_has_root(coll_t c)
{
    return c == C_BROADCAST || c == C_REDUCE;
}
/* broadcast has one buffer and barrier none: no separate in-place run (printed N/A). */
static int coll_has_inplace(coll_t c)
{
    return c != C_BROADCAST && c != C_BARRIER;
}

/* nccl-tests' bus bandwidth factors. */
static double busbw_factor(coll_t c, int n)
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

static const char *const dtype_names[COHORT_DTYPE_COUNT] = {
    "int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "bfloat16", "float32",
    "float64"
};
static const size_t dtype_sizes[COHORT_DTYPE_COUNT] = { 1, 1, 4, 4, 8, 8, 2, 2, 4, 8 };
static const char *const op_names[COHORT_OP_COUNT] = { "sum", "prod", "min", "max", "avg" };

static int parse_dtype(const char *s, cohort_dtype_t *out)
{
    static const struct { const char *alias; cohort_dtype_t dt; } aliases[] = {
        { "char", COHORT_INT8 }, { "uchar", COHORT_UINT8 }, { "int", COHORT_INT32 },
        { "uint", COHORT_UINT32 }, { "half", COHORT_FLOAT16 }, { "fp16", COHORT_FLOAT16 },
        { "bf16", COHORT_BFLOAT16 }, { "float", COHORT_FLOAT32 }, { "fp32", COHORT_FLOAT32 },
        { "double", COHORT_FLOAT64 }, { "fp64", COHORT_FLOAT64 },
    };
    for (int i = 0; i < COHORT_DTYPE_COUNT; i++)
        if (!strcasecmp(s, dtype_names[i])) {
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

typedef struct {
    coll_t coll;
    size_t minbytes, maxbytes, stepbytes;
    long stepfactor;
    int additive;                 /* -i given last: size += stepbytes */
    int ndtypes;
    cohort_dtype_t dtypes[COHORT_DTYPE_COUNT];
    int nops;
    cohort_op_t ops[COHORT_OP_COUNT];
    int root, iters, warmup, check, average;
    const char *transport, *algo, *json, *csv, *label;
    const char *svg, *from, *labels, *title;
    int ylog;
    int same_buffer;              /* --same-buffer: every call at the start of the buffers */
    int cohort_mem;               /* --mem cohort: buffers from cohort_mem_alloc */
    int touch;                    /* --touch: write sendbuf, read recvbuf before each timed call */
    int fresh;                    /* --fresh: each timed call on buffers allocated just for it */
    int nonblocking;              /* --nonblocking N: timed calls non-blocking, N in flight */
    int group;                    /* --group N: timed calls in groups of N (blocking forms) */
    int overlap;                  /* --overlap: an allreduce in flight while the caller computes */
} opts_t;

enum {
    OPT_CHECK = 256, OPT_TRANSPORT, OPT_ALGO, OPT_JSON, OPT_CSV, OPT_LABEL, OPT_SVG, OPT_FROM,
    OPT_LABELS, OPT_TITLE, OPT_YLOG, OPT_SAME, OPT_MEM, OPT_TOUCH, OPT_FRESH,
    OPT_NONBLOCKING, OPT_GROUP, OPT_OVERLAP, OPT_VERSION
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
        "                           own part of the buffers, which hold N of the largest size\n"
        "      --group N            the timed calls in groups of N (cohort_group_start/end: the\n"
        "                           allreduces of a group fused up to COHORT_FUSION_THRESHOLD),\n"
        "                           each in its own part of the buffers\n"
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
                if (!strcasecmp(optarg, coll_names[i])) {
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
                    if (!strcasecmp(optarg, op_names[i])) {
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
            if (parse_long(optarg, 1, 1 << 20, &v)) {
                fprintf(stderr, "cohort-bench: --%s wants a number from 1 to %d, not '%s'\n",
                        c == OPT_GROUP ? "group" : "nonblocking", 1 << 20, optarg);
                return 2;
            }
            if (c == OPT_GROUP) o->group = (int)v;
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
    if (!coll_reduces(o->coll))
        o->nops = 1;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Element access and test data                                                                */

static uint16_t f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint32_t sign = (x >> 16) & 0x8000u, exp = (x >> 23) & 0xffu, mant = x & 0x7fffffu;
    if (exp == 0xffu)
        return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0));
    int e = (int)exp - 127 + 15;
    if (e >= 31)
        return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) {
        if (e < -10)
            return (uint16_t)sign;
        mant |= 0x800000u;
        int shift = 14 - e;
        uint32_t h = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1)))
            h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = ((uint32_t)e << 10) | (mant >> 13), rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1)))
        h++;
    return (uint16_t)(sign | h);
}

static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, x;
    if (exp == 0) {
        if (!mant) {
            x = sign;
        } else {
            int e = -1;
            do {
                e++;
                mant <<= 1;
            } while (!(mant & 0x400u));
            x = sign | ((uint32_t)(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        x = sign | 0x7f800000u | (mant << 13);
    } else {
        x = sign | ((exp - 15 + 127) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

static uint16_t f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

static float bf16_to_f32(uint16_t b)
{
    uint32_t x = (uint32_t)b << 16;
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

/* Values are small integers, so the conversions below are exact. */
static void put(void *buf, size_t i, cohort_dtype_t dt, double v)
{
    switch (dt) {
    case COHORT_INT8: ((int8_t *)buf)[i] = (int8_t)v; break;
    case COHORT_UINT8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    case COHORT_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case COHORT_UINT32: ((uint32_t *)buf)[i] = (uint32_t)v; break;
    case COHORT_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case COHORT_UINT64: ((uint64_t *)buf)[i] = (uint64_t)v; break;
    case COHORT_FLOAT16: ((uint16_t *)buf)[i] = f32_to_f16((float)v); break;
    case COHORT_BFLOAT16: ((uint16_t *)buf)[i] = f32_to_bf16((float)v); break;
    case COHORT_FLOAT32: ((float *)buf)[i] = (float)v; break;
    case COHORT_FLOAT64: ((double *)buf)[i] = v; break;
    }
}

static double get(const void *buf, size_t i, cohort_dtype_t dt)
{
    switch (dt) {
    case COHORT_INT8: return ((const int8_t *)buf)[i];
    case COHORT_UINT8: return ((const uint8_t *)buf)[i];
    case COHORT_INT32: return ((const int32_t *)buf)[i];
    case COHORT_UINT32: return ((const uint32_t *)buf)[i];
    case COHORT_INT64: return (double)((const int64_t *)buf)[i];
    case COHORT_UINT64: return (double)((const uint64_t *)buf)[i];
    case COHORT_FLOAT16: return f16_to_f32(((const uint16_t *)buf)[i]);
    case COHORT_BFLOAT16: return bf16_to_f32(((const uint16_t *)buf)[i]);
    case COHORT_FLOAT32: return ((const float *)buf)[i];
    case COHORT_FLOAT64: return ((const double *)buf)[i];
    }
    return NAN;
}

/* Input of rank r at logical element i. Chosen so that every partial and final result is a
 * small integer that every dtype holds exactly (bf16: |x| <= 256, fp16: 2048, int8: 127):
 *  sum:  values in [0, m) (shifted to be centred on 0 for signed types), (m-1) * n <= limit;
 *  prod: 1, except one rank per element gives 2 and (signed types) one gives -1;
 *  avg:  a(i) on every rank plus n on one rank, so the sum n*(a+1) divides exactly;
 *  min, max and the non-reducing collectives: (37 r + 11 i + 13 seed) mod 97 (minus 48 for
 *  signed types), which also tells the source rank and position apart. */
typedef struct {
    int n;
    cohort_dtype_t dt;
    cohort_op_t op;
    int reducing;
    int is_signed;
    uint64_t seed;
    uint64_t m;      /* sum/avg value range */
} valspec_t;

static valspec_t valspec(int n, cohort_dtype_t dt, cohort_op_t op, int reducing, unsigned seed)
{
    valspec_t v;
    double limit;
    switch (dt) {
    case COHORT_INT8: limit = 127; break;
    case COHORT_UINT8: limit = 255; break;
    case COHORT_FLOAT16: limit = 2048; break;
    case COHORT_BFLOAT16: limit = 256; break;
    default: limit = 1 << 20; break;
    }
    v.n = n;
    v.dt = dt;
    v.op = op;
    v.reducing = reducing;
    v.is_signed = !(dt == COHORT_UINT8 || dt == COHORT_UINT32 || dt == COHORT_UINT64);
    v.seed = seed;
    v.m = (double)n > limit ? 1 : (uint64_t)(limit / n) + 1;
    if (v.m > 16)
        v.m = 16;
    return v;
}

static double val(const valspec_t *v, int r, size_t i)
{
    uint64_t ur = (uint64_t)r, ui = (uint64_t)i;
    if (!v->reducing || v->op == COHORT_MIN || v->op == COHORT_MAX) {
        double w = (double)((ur * 37 + (ui % 97) * 11 + v->seed * 13) % 97);
        return v->is_signed ? w - 48 : w;
    }
    switch (v->op) {
    case COHORT_SUM: {
        double b = (double)((ur * 5 + ui * 3 + v->seed) % v->m);
        return v->is_signed ? b - (double)((v->m - 1) / 2) : b;
    }
    case COHORT_PROD:
        if ((ui + v->seed) % (uint64_t)(v->n + 1) == ur)
            return 2;
        if (v->is_signed && (ui * 7 + v->seed + 1) % (uint64_t)(v->n + 2) == ur)
            return -1;
        return 1;
    case COHORT_AVG:
        if (v->m < 2)
            return 0;
        return (double)((ui * 3 + v->seed) % (v->m - 1)) +
               ((ui + v->seed) % (uint64_t)v->n == ur ? v->n : 0);
    default:
        return 0;
    }
}

/* Expected reduction over all ranks of logical element i. */
static double expect_reduced(const valspec_t *v, size_t i)
{
    double acc = val(v, 0, i);
    for (int r = 1; r < v->n; r++) {
        double x = val(v, r, i);
        switch (v->op) {
        case COHORT_SUM:
        case COHORT_AVG: acc += x; break;
        case COHORT_PROD: acc *= x; break;
        case COHORT_MIN: acc = x < acc ? x : acc; break;
        case COHORT_MAX: acc = x > acc ? x : acc; break;
        }
    }
    if (v->op == COHORT_AVG)
        acc = trunc(acc / v->n);
    return acc;
}

/* ------------------------------------------------------------------------------------------ */
/* The benchmark                                                                               */

#define MAX_REPS 5

typedef struct {
    size_t count;        /* the count argument of the call */
    size_t sendcount;    /* elements in the send buffer */
    size_t recvcount;    /* elements in the receive buffer */
    size_t bytes;        /* the size column: max(send, recv) bytes, as nccl-tests */
    size_t esize;
} geom_t;

/* nccl-tests' getCollByteCount: sizes round down to what the collective can move. */
static geom_t geometry(coll_t coll, size_t size, size_t esize, int n)
{
    geom_t g;
    size_t c = size / esize, per = c / (size_t)n;
    memset(&g, 0, sizeof g);
    g.esize = esize;
    switch (coll) {
    case C_ALLREDUCE:
    case C_BROADCAST:
    case C_REDUCE: g.count = g.sendcount = g.recvcount = c; break;
    case C_ALLGATHER: g.count = g.sendcount = per; g.recvcount = per * (size_t)n; break;
    case C_REDUCE_SCATTER: g.count = g.recvcount = per; g.sendcount = per * (size_t)n; break;
    case C_ALLTOALL: g.count = per; g.sendcount = g.recvcount = per * (size_t)n; break;
    default: break;
    }
    g.bytes = (g.sendcount > g.recvcount ? g.sendcount : g.recvcount) * esize;
    return g;
}

typedef struct {
    int valid;          /* 0: N/A */
    double time_us;     /* reported time: -a across ranks */
    double min_us, avg_us, max_us;
    double med_us, best_us;   /* median/best of the repetitions' max-over-ranks (RESULT) */
    double algbw, busbw;
    double wrong;       /* max over ranks; -1 when not checked */
} place_res_t;

typedef struct {
    size_t bytes, count;
    cohort_dtype_t dtype;
    int has_dtype, has_op;
    cohort_op_t op;
    int root;
    char algo[64];
    place_res_t oop, ip;
} result_t;

/* What one rank measured for one placement. */
typedef struct {
    double t_us;                 /* per-iteration average over the timed loop */
    double rep_us[MAX_REPS];     /* per-iteration average of each repetition */
    double wrong;
} meas_t;

typedef struct {
    opts_t o;
    cohort_comm_t *comm;
    int rank, n;
    char *sendbuf, *recvbuf;
    size_t alloc;
    int nreps;
    result_t *res;
    size_t nres, capres;
    int failed;          /* a call failed: stop communicating */
    char failmsg[512];
} bench_t;

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static cohort_status_t run_coll(bench_t *b, const geom_t *g, cohort_dtype_t dt, cohort_op_t op,
                                int inplace, size_t shift)
{
    char *s = b->sendbuf ? b->sendbuf + shift : NULL, *r = b->recvbuf ? b->recvbuf + shift : NULL;
    size_t blk = g->count * g->esize * (size_t)b->rank;
    switch (b->o.coll) {
    case C_ALLREDUCE:
        return cohort_allreduce(b->comm, inplace ? r : s, r, g->count, dt, op);
    case C_BROADCAST:
        return cohort_broadcast(b->comm, r, g->count, dt, b->o.root);
    case C_REDUCE:
        return cohort_reduce(b->comm, inplace ? r : s, r, g->count, dt, op, b->o.root);
    case C_ALLGATHER:
        return cohort_allgather(b->comm, inplace ? r + blk : s, r, g->count, dt);
    case C_REDUCE_SCATTER:
        return inplace ? cohort_reduce_scatter(b->comm, r, r + blk, g->count, dt, op)
                       : cohort_reduce_scatter(b->comm, s, r, g->count, dt, op);
    case C_ALLTOALL:
        return cohort_alltoall(b->comm, inplace ? r : s, r, g->count, dt);
    case C_BARRIER:
        return cohort_barrier(b->comm);
    default:
        return COHORT_ERR_INVALID_ARG;
    }
}

/* run_coll's non-blocking form. */
static cohort_status_t issue_coll(bench_t *b, const geom_t *g, cohort_dtype_t dt, cohort_op_t op,
                                  int inplace, size_t shift, cohort_request_t **q)
{
    char *s = b->sendbuf ? b->sendbuf + shift : NULL, *r = b->recvbuf ? b->recvbuf + shift : NULL;
    size_t blk = g->count * g->esize * (size_t)b->rank;
    switch (b->o.coll) {
    case C_ALLREDUCE:
        return cohort_iallreduce(b->comm, inplace ? r : s, r, g->count, dt, op, q);
    case C_BROADCAST:
        return cohort_ibroadcast(b->comm, r, g->count, dt, b->o.root, q);
    case C_REDUCE:
        return cohort_ireduce(b->comm, inplace ? r : s, r, g->count, dt, op, b->o.root, q);
    case C_ALLGATHER:
        return cohort_iallgather(b->comm, inplace ? r + blk : s, r, g->count, dt, q);
    case C_REDUCE_SCATTER:
        return inplace ? cohort_ireduce_scatter(b->comm, r, r + blk, g->count, dt, op, q)
                       : cohort_ireduce_scatter(b->comm, s, r, g->count, dt, op, q);
    case C_ALLTOALL:
        return cohort_ialltoall(b->comm, inplace ? r : s, r, g->count, dt, q);
    case C_BARRIER:
        return cohort_ibarrier(b->comm, q);
    default:
        return COHORT_ERR_INVALID_ARG;
    }
}

/* One timing round of --nonblocking / --group: calls it0 .. end-1, each on its own part of the
 * buffers (part = call mod parts), all complete when it returns. */
static cohort_status_t timed_round(bench_t *b, const geom_t *g, cohort_dtype_t dt,
                                   cohort_op_t op, int inplace, int it0, int end, size_t parts,
                                   cohort_request_t **ring)
{
    size_t total = g->bytes;
    cohort_status_t st = COHORT_SUCCESS;
    if (b->o.group) {
        int gs = b->o.group;
        for (int it = it0; it < end && !st; it += gs) {
            int last = it + gs < end ? it + gs : end;
            st = cohort_group_start(b->comm);
            for (int k = it; k < last && !st; k++)
                st = run_coll(b, g, dt, op, inplace, total * ((size_t)k % parts));
            cohort_status_t e = cohort_group_end(b->comm);
            if (!st) st = e;
        }
        return st;
    }
    int nb = b->o.nonblocking, out = 0, oldest = 0;
    for (int it = it0; it < end; it++) {
        if (out == nb) {   /* the oldest frees its slot */
            cohort_status_t w = cohort_wait(ring[oldest]);
            ring[oldest] = NULL;
            if (w && !st) st = w;
            oldest = (oldest + 1) % nb;
            out--;
        }
        if (st) break;
        int slot = (oldest + out) % nb;
        st = issue_coll(b, g, dt, op, inplace, total * ((size_t)it % parts), &ring[slot]);
        if (st) break;
        out++;
    }
    for (; out > 0; out--) {
        cohort_status_t w = cohort_wait(ring[oldest]);
        ring[oldest] = NULL;
        if (w && !st) st = w;
        oldest = (oldest + 1) % nb;
    }
    return st;
}

/* Sentinel for outputs: data the collective must overwrite. */
static void poison(void *buf, size_t count, size_t esize)
{
    memset(buf, 0xa5, count * esize);
}

static void fill(bench_t *b, const geom_t *g, const valspec_t *v, int inplace)
{
    cohort_dtype_t dt = v->dt;
    int me = b->rank;
    char *s = b->sendbuf, *r = b->recvbuf;
    switch (b->o.coll) {
    case C_ALLREDUCE:
    case C_REDUCE:
        if (!inplace)
            poison(r, g->count, g->esize);
        for (size_t i = 0; i < g->count; i++)
            put(inplace ? r : s, i, dt, val(v, me, i));
        break;
    case C_BROADCAST:
        /* Non-roots start from their own (different) values. */
        for (size_t i = 0; i < g->count; i++)
            put(r, i, dt, val(v, me, i));
        break;
    case C_ALLGATHER:
        poison(r, g->recvcount, g->esize);
        for (size_t i = 0; i < g->count; i++) {
            if (inplace)
                put(r, (size_t)me * g->count + i, dt, val(v, me, i));
            else
                put(s, i, dt, val(v, me, i));
        }
        break;
    case C_REDUCE_SCATTER:
    case C_ALLTOALL:
        if (!inplace)
            poison(r, g->recvcount, g->esize);
        for (size_t i = 0; i < g->sendcount; i++)
            put(inplace ? r : s, i, dt, val(v, me, i));
        break;
    default:
        break;
    }
}

static uint64_t count_wrong(bench_t *b, const geom_t *g, const valspec_t *v, int inplace)
{
    cohort_dtype_t dt = v->dt;
    int me = b->rank, n = b->n;
    const char *r = b->recvbuf;
    uint64_t wrong = 0;
    switch (b->o.coll) {
    case C_ALLREDUCE:
        for (size_t i = 0; i < g->count; i++)
            wrong += get(r, i, dt) != expect_reduced(v, i);
        break;
    case C_REDUCE:
        if (me == b->o.root)
            for (size_t i = 0; i < g->count; i++)
                wrong += get(r, i, dt) != expect_reduced(v, i);
        break;
    case C_BROADCAST:
        for (size_t i = 0; i < g->count; i++)
            wrong += get(r, i, dt) != val(v, b->o.root, i);
        break;
    case C_ALLGATHER:
        for (int k = 0; k < n; k++)
            for (size_t i = 0; i < g->count; i++)
                wrong += get(r, (size_t)k * g->count + i, dt) != val(v, k, i);
        break;
    case C_REDUCE_SCATTER: {
        const char *out = inplace ? r + (size_t)me * g->count * g->esize : r;
        for (size_t i = 0; i < g->count; i++)
            wrong += get(out, i, dt) != expect_reduced(v, (size_t)me * g->count + i);
        break;
    }
    case C_ALLTOALL:
        for (int k = 0; k < n; k++)
            for (size_t i = 0; i < g->count; i++)
                wrong += get(r, (size_t)k * g->count + i, dt) != val(v, k, (size_t)me * g->count + i);
        break;
    default:
        break;
    }
    return wrong;
}

static void call_failed(bench_t *b, const char *what, const geom_t *g, cohort_dtype_t dt,
                        cohort_op_t op, int inplace, cohort_status_t st)
{
    char ctx[160];
    if (b->o.coll == C_BARRIER)
        snprintf(ctx, sizeof ctx, "barrier");
    else
        snprintf(ctx, sizeof ctx, "%s %s, %zu bytes (count %zu), %s%s%s", coll_names[b->o.coll],
                 inplace ? "in place" : "out of place", g->bytes, g->count, dtype_names[dt],
                 coll_reduces(b->o.coll) ? " " : "", coll_reduces(b->o.coll) ? op_names[op] : "");
    snprintf(b->failmsg, sizeof b->failmsg, "rank %d: %s: %s failed: %s: %s", b->rank, what, ctx,
             cohort_strerror(st), cohort_last_error());
    fprintf(stderr, "cohort-bench: %s\n", b->failmsg);
    b->failed = 1;
}

/* --touch: what a training step does around a collective: it writes the input (a store to every
 * cache line, of the value already there so that results stay checkable: the line becomes this
 * core's, wherever it was) and reads the result. */
static void touch(bench_t *b, size_t off, size_t total, int inplace)
{
    volatile unsigned char *s = (volatile unsigned char *)(inplace ? b->recvbuf : b->sendbuf) + off;
    const volatile unsigned char *r = (const volatile unsigned char *)b->recvbuf + off;
    unsigned char sink = 0;
    for (size_t k = 0; k < total; k += 64) {
        s[k] = s[k];
        sink ^= r[k];
    }
    (void)sink;
}

/* --fresh: buffers of len bytes for one call, put in place of the run's (saved in keep), as a
 * framework's allocator hands out tensors: malloc'd (or from cohort_mem_alloc), written once
 * (zeros: a tensor's pages are touched before it is communicated). 0, or -1 without memory. */
static int fresh_get(bench_t *b, size_t len, char **keep)
{
    void *s = NULL, *r = NULL;
    if (len == 0) len = 1;
    if (b->o.cohort_mem) {
        if (cohort_mem_alloc(len, &s) || cohort_mem_alloc(len, &r)) {
            cohort_mem_free(s);
            return -1;
        }
    } else if (!(s = malloc(len)) || !(r = malloc(len))) {
        free(s);
        return -1;
    }
    memset(s, 0, len);
    memset(r, 0, len);
    keep[0] = b->sendbuf;
    keep[1] = b->recvbuf;
    b->sendbuf = s;
    b->recvbuf = r;
    return 0;
}

static void fresh_put(bench_t *b, char **keep)
{
    if (b->o.cohort_mem) {
        cohort_mem_free(b->sendbuf);
        cohort_mem_free(b->recvbuf);
    } else {
        free(b->sendbuf);
        free(b->recvbuf);
    }
    b->sendbuf = keep[0];
    b->recvbuf = keep[1];
}

/* One warm-up or timed call; with --fresh on buffers of its own, and *us its time (0 otherwise:
 * two clock reads per call would weigh on the smallest calls, which the loop times whole). */
static cohort_status_t one_call(bench_t *b, const geom_t *g, cohort_dtype_t dt, cohort_op_t op,
                                int inplace, size_t off, double *us)
{
    char *keep[2] = { NULL, NULL };
    int fresh = b->o.fresh && b->o.coll != C_BARRIER;
    if (fresh && fresh_get(b, g->bytes, keep)) {
        fprintf(stderr, "cohort-bench: rank %d: no memory for --fresh buffers of %zu bytes\n",
                b->rank, g->bytes);
        return COHORT_ERR_NO_MEMORY;
    }
    if (fresh) off = 0;
    if (b->o.touch && b->o.coll != C_BARRIER) touch(b, off, g->bytes, inplace);
    double t = fresh ? now_us() : 0;
    cohort_status_t st = run_coll(b, g, dt, op, inplace, off);
    *us = fresh ? now_us() - t : 0;
    if (fresh) fresh_put(b, keep);
    return st;
}

/* Check (one call), warm up, time. Returns 0, or -1 after a failed call (reported). */
static int run_placement(bench_t *b, const geom_t *g, cohort_dtype_t dt, cohort_op_t op,
                         int inplace, unsigned seed, meas_t *m, char *algo, size_t algolen)
{
    coll_t coll = b->o.coll;
    valspec_t v = valspec(b->n, dt, op, coll_reduces(coll), seed);
    cohort_status_t st;
    size_t total = g->bytes, steps = total ? b->alloc / total : 1;
    if (steps < 1 || b->o.same_buffer)
        steps = 1;
    memset(m, 0, sizeof *m);
    m->wrong = -1;

    /* The checked call (also the first, synchronising call, as in nccl-tests). */
    if (b->o.check && coll != C_BARRIER)
        fill(b, g, &v, inplace);
    st = run_coll(b, g, dt, op, inplace, 0);
    if (st) {
        call_failed(b, "checked call", g, dt, op, inplace, st);
        return -1;
    }
    if (b->o.check && coll != C_BARRIER)
        m->wrong = (double)count_wrong(b, g, &v, inplace);

    /* In place, repeated calls would feed each result back in (sums and products grow until
     * integers overflow, which is undefined in C, and floats reach inf): time on zeros, which
     * stay zeros under every op. Out of place the inputs never change. */
    if (inplace && coll != C_BARRIER)
        memset(b->recvbuf, 0, steps * total);

    /* Like nccl-tests, move through the buffer from one iteration to the next. */
    double us;
    for (int it = 0; it < b->o.warmup; it++) {
        st = one_call(b, g, dt, op, inplace, total * ((size_t)it % steps), &us);
        if (st) {
            call_failed(b, "warm-up", g, dt, op, inplace, st);
            return -1;
        }
    }
    st = cohort_barrier(b->comm);
    if (st) {
        call_failed(b, "barrier before the timed loop", g, dt, op, inplace, st);
        return -1;
    }
    int iters = b->o.iters, it = 0;
    size_t parts = (size_t)(b->o.nonblocking > b->o.group ? b->o.nonblocking : b->o.group);
    cohort_request_t **ring = NULL;
    if (parts) {
        /* each call in flight on its own part of the buffers */
        parts = total ? b->alloc / total : 1;
        if (parts < 1) parts = 1;
        ring = calloc((size_t)(b->o.nonblocking ? b->o.nonblocking : 1), sizeof *ring);
        if (!ring) {
            fprintf(stderr, "cohort-bench: rank %d: no memory\n", b->rank);
            return -1;
        }
    }
    /* The loop's time, or with --fresh the calls' own (not the allocations around them). */
    double t0 = now_us(), calls = 0;
    for (int rep = 0; rep < b->nreps; rep++) {
        int end = (int)((long long)iters * (rep + 1) / b->nreps);
        int n_in_rep = end - it;
        double in_rep = 0;
        if (ring) {
            st = timed_round(b, g, dt, op, inplace, it, end, parts, ring);
            it = end;
            if (st) {
                call_failed(b, "timed call", g, dt, op, inplace, st);
                free(ring);
                return -1;
            }
        }
        for (; it < end; it++) {
            st = one_call(b, g, dt, op, inplace, total * ((size_t)it % steps), &us);
            if (st) {
                call_failed(b, "timed call", g, dt, op, inplace, st);
                return -1;
            }
            in_rep += us;
        }
        double t1 = now_us(), took = b->o.fresh && coll != C_BARRIER ? in_rep : t1 - t0;
        m->rep_us[rep] = n_in_rep > 0 ? took / n_in_rep : 0;
        calls += took;
        t0 = t1;
    }
    free(ring);
    m->t_us = calls / iters;
    if (algo) {
        const char *a = cohort_comm_last_algo(b->comm);
        snprintf(algo, algolen, "%s", a && *a ? a : "?");
    }
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void finish_place(const bench_t *b, place_res_t *p, double mine, double mn, double avg,
                         double mx, double wrong, const double *repmax, size_t bytes)
{
    double reps[MAX_REPS];
    p->valid = 1;
    p->min_us = mn;
    p->avg_us = avg;
    p->max_us = mx;
    switch (b->o.average) {
    case 0: p->time_us = mine; break;      /* printed by rank 0: its own time */
    case 2: p->time_us = mn; break;
    case 3: p->time_us = mx; break;
    default: p->time_us = avg; break;
    }
    double f = busbw_factor(b->o.coll, b->n);
    p->algbw = p->time_us > 0 ? (double)bytes / (p->time_us * 1e-6) / 1e9 : 0;
    p->busbw = p->algbw * f;
    p->wrong = wrong;
    memcpy(reps, repmax, sizeof(double) * (size_t)b->nreps);
    qsort(reps, (size_t)b->nreps, sizeof reps[0], cmp_double);
    p->med_us = b->nreps % 2 ? reps[b->nreps / 2]
                             : 0.5 * (reps[b->nreps / 2 - 1] + reps[b->nreps / 2]);
    p->best_us = reps[0];
}

static void fmt_time(char *buf, size_t len, double us)
{
    if (us >= 10000.0)
        snprintf(buf, len, "%7.0f", us);
    else if (us >= 100.0)
        snprintf(buf, len, "%7.1f", us);
    else
        snprintf(buf, len, "%7.2f", us);
}

static void print_place(const place_res_t *p)
{
    if (!p->valid) {
        printf("  %7s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A");
        return;
    }
    char t[32];
    fmt_time(t, sizeof t, p->time_us);
    if (p->wrong < 0)
        printf("  %7s  %6.2f  %6.2f  %6s", t, p->algbw, p->busbw, "N/A");
    else
        printf("  %7s  %6.2f  %6.2f  %6g", t, p->algbw, p->busbw, p->wrong);
}

/* Group titles above the columns: text centred in width columns. */
static void print_centered(const char *text, int width)
{
    int len = (int)strlen(text), left = (width - len + 1) / 2;
    printf("%*s%s%*s", left, "", text, width - len - left, "");
}

static void print_header(const bench_t *b, const char *transport)
{
    const opts_t *o = &b->o;
    printf("# cohort-bench: coll %s, np %d, nodes %d, transport %s, algo %s\n",
           coll_names[o->coll], b->n, cohort_comm_node_count(b->comm), transport,
           o->algo ? o->algo : "auto");
    if (o->coll == C_BARRIER)
        printf("# cohort %s  warmup iters: %d iters: %d validation: %d average: %d\n",
               cohort_version(), o->warmup, o->iters, o->check, o->average);
    else if (o->additive)
        printf("# cohort %s  minBytes %zu maxBytes %zu step: %zu(bytes) warmup iters: %d "
               "iters: %d validation: %d average: %d\n", cohort_version(), o->minbytes,
               o->maxbytes, o->stepbytes, o->warmup, o->iters, o->check, o->average);
    else
        printf("# cohort %s  minBytes %zu maxBytes %zu step: %ld(factor) warmup iters: %d "
               "iters: %d validation: %d average: %d\n", cohort_version(), o->minbytes,
               o->maxbytes, o->stepfactor, o->warmup, o->iters, o->check, o->average);
    printf("#\n");
    printf("# %10s  %12s  %8s  %6s  %6s", "", "", "", "", "");
    print_centered("out-of-place", 33);
    print_centered("in-place", 33);
    print_centered("out-of-place", 20);
    printf("%*s%s\n", (20 - 8 + 1) / 2, "", "in-place");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s  %8s  %8s  %8s"
           "  %8s  %s\n", "size", "count", "type", "redop", "root", "time", "algbw", "busbw",
           "#wrong", "time", "algbw", "busbw", "#wrong", "min", "max", "min", "max", "algo");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s  %8s  %8s  %8s"
           "  %8s\n", "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)",
           "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)", "(us)");
}

static void print_row(const bench_t *b, const result_t *r)
{
    char a[32], c[32], d[32], e[32];
    printf("%12zu  %12zu  %8s  %6s  %6d", r->bytes, r->count,
           r->has_dtype ? dtype_names[r->dtype] : "none", r->has_op ? op_names[r->op] : "none",
           r->root);
    print_place(&r->oop);
    print_place(&r->ip);
    fmt_time(a, sizeof a, r->oop.min_us);
    fmt_time(c, sizeof c, r->oop.max_us);
    if (r->ip.valid) {
        fmt_time(d, sizeof d, r->ip.min_us);
        fmt_time(e, sizeof e, r->ip.max_us);
    } else {
        snprintf(d, sizeof d, "N/A");
        snprintf(e, sizeof e, "N/A");
    }
    printf("  %8s  %8s  %8s  %8s  %s\n", a, c, d, e, r->algo);
    if (b->o.label && !(r->bytes == 0 && b->o.coll != C_BARRIER)) {
        /* bench/peers/ format: time = median of the repetitions' max over ranks. */
        const place_res_t *p = &r->oop;
        double algbw = p->med_us > 0 ? (double)r->bytes / (p->med_us * 1e-6) / 1e9 : 0;
        const char *ck = p->wrong < 0 ? "skip" : p->wrong > 0 ? "FAIL" : "ok";
        printf("RESULT,%s,%d,%s,%zu,%d,%.3f,%.3f,%.4f,%.4f,%s\n", b->o.label, b->n,
               coll_result_names[b->o.coll], r->bytes, b->o.iters, p->med_us, p->best_us, algbw,
               algbw * busbw_factor(b->o.coll, b->n), ck);
    }
    fflush(stdout);
}

static int push_result(bench_t *b, const result_t *r)
{
    if (b->nres == b->capres) {
        size_t cap = b->capres ? 2 * b->capres : 64;
        result_t *nr = realloc(b->res, cap * sizeof *nr);
        if (!nr)
            return -1;
        b->res = nr;
        b->capres = cap;
    }
    b->res[b->nres++] = *r;
    return 0;
}

/* One row: both placements, then the reductions across ranks. Returns -1 on failure. */
static int bench_size(bench_t *b, size_t size, cohort_dtype_t dt, cohort_op_t op, unsigned seed)
{
    coll_t coll = b->o.coll;
    geom_t g = coll == C_BARRIER ? geometry(coll, 0, 1, b->n)
                                 : geometry(coll, size, dtype_sizes[dt], b->n);
    meas_t mo, mi;
    result_t r;
    memset(&r, 0, sizeof r);
    memset(&mi, 0, sizeof mi);
    r.bytes = g.bytes;
    r.count = g.count;
    r.dtype = dt;
    r.has_dtype = coll != C_BARRIER;
    r.has_op = coll_reduces(coll);
    r.op = op;
    r.root = coll_has_root(coll) ? b->o.root : -1;

    if (run_placement(b, &g, dt, op, 0, seed, &mo, r.algo, sizeof r.algo))
        return -1;
    int inplace = coll_has_inplace(coll);
    if (inplace && run_placement(b, &g, dt, op, 1, seed + 1, &mi, NULL, 0))
        return -1;

    /* Across ranks with the library itself: max of (t, -t, wrong, reps) and sum of t. */
    enum { NMAX = 6 + 2 * MAX_REPS };
    double mxin[NMAX], mxout[NMAX], smin[2], smout[2];
    int nr = b->nreps;
    mxin[0] = mo.t_us;
    mxin[1] = mi.t_us;
    mxin[2] = -mo.t_us;
    mxin[3] = -mi.t_us;
    mxin[4] = mo.wrong;
    mxin[5] = mi.wrong;
    for (int k = 0; k < nr; k++) {
        mxin[6 + k] = mo.rep_us[k];
        mxin[6 + nr + k] = mi.rep_us[k];
    }
    smin[0] = mo.t_us;
    smin[1] = mi.t_us;
    cohort_status_t st = cohort_allreduce(b->comm, mxin, mxout, (size_t)(6 + 2 * nr),
                                          COHORT_FLOAT64, COHORT_MAX);
    if (st == COHORT_SUCCESS)
        st = cohort_allreduce(b->comm, smin, smout, 2, COHORT_FLOAT64, COHORT_SUM);
    if (st) {
        call_failed(b, "reducing the timings (float64 allreduce)", &g, dt, op, 0, st);
        return -1;
    }
    finish_place(b, &r.oop, mo.t_us, -mxout[2], smout[0] / b->n, mxout[0], mxout[4], mxout + 6,
                 g.bytes);
    if (inplace)
        finish_place(b, &r.ip, mi.t_us, -mxout[3], smout[1] / b->n, mxout[1], mxout[5],
                     mxout + 6 + nr, g.bytes);
    if (b->rank == 0) {
        print_row(b, &r);
        if (push_result(b, &r)) {
            fprintf(stderr, "cohort-bench: out of memory keeping results\n");
            /* not fatal for the other ranks: keep going without storing */
        }
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* JSON and CSV                                                                                */

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; s && *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch == '\n')
            fputs("\\n", f);
        else if (ch == '\t')
            fputs("\\t", f);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

static void json_num(FILE *f, double v, const char *fmt)
{
    if (isfinite(v))
        fprintf(f, fmt, v);
    else
        fputs("null", f);
}

static void json_place(FILE *f, const place_res_t *p)
{
    if (!p->valid) {
        fputs("null", f);
        return;
    }
    fputs("{\"time_us\": ", f);
    json_num(f, p->time_us, "%.3f");
    fputs(", \"algbw\": ", f);
    json_num(f, p->algbw, "%.6f");
    fputs(", \"busbw\": ", f);
    json_num(f, p->busbw, "%.6f");
    fputs(", \"wrong\": ", f);
    if (p->wrong < 0)
        fputs("null", f);
    else
        fprintf(f, "%.0f", p->wrong);
    fputs(", \"min_us\": ", f);
    json_num(f, p->min_us, "%.3f");
    fputs(", \"avg_us\": ", f);
    json_num(f, p->avg_us, "%.3f");
    fputs(", \"max_us\": ", f);
    json_num(f, p->max_us, "%.3f");
    fputs(", \"median_us\": ", f);
    json_num(f, p->med_us, "%.3f");
    fputs(", \"best_us\": ", f);
    json_num(f, p->best_us, "%.3f");
    fputc('}', f);
}

typedef struct {
    const char *transport;
    char date[32];
    char host[256];
    int nodes;
    int out_of_bounds;
    double avg_busbw;
} meta_t;

static int write_json(const bench_t *b, const meta_t *m, const char *path, int argc, char **argv)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "cohort-bench: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    fputs("{\n  \"tool\": \"cohort-bench\",\n  \"version\": ", f);
    json_str(f, cohort_version());
    fputs(",\n  \"date\": ", f);
    json_str(f, m->date);
    fputs(",\n  \"host\": ", f);
    json_str(f, m->host);
    fputs(",\n  \"command\": ", f);
    {
        size_t len = 1;
        for (int i = 0; i < argc; i++)
            len += strlen(argv[i]) + 1;
        char *cmd = malloc(len);
        if (cmd) {
            cmd[0] = 0;
            for (int i = 0; i < argc; i++) {
                if (i)
                    strcat(cmd, " ");
                strcat(cmd, argv[i]);
            }
        }
        json_str(f, cmd ? cmd : "");
        free(cmd);
    }
    fputs(",\n  \"coll\": ", f);
    json_str(f, coll_names[b->o.coll]);
    fprintf(f, ",\n  \"np\": %d,\n  \"nodes\": %d,\n  \"transport\": ", b->n, m->nodes);
    json_str(f, m->transport);
    fputs(",\n  \"algo\": ", f);
    json_str(f, b->o.algo ? b->o.algo : "auto");
    fputs(",\n  \"label\": ", f);
    if (b->o.label)
        json_str(f, b->o.label);
    else
        fputs("null", f);
    fprintf(f, ",\n  \"iters\": %d,\n  \"warmup_iters\": %d,\n  \"check\": %d,\n"
            "  \"average\": %d,\n  \"results\": [", b->o.iters, b->o.warmup, b->o.check,
            b->o.average);
    for (size_t i = 0; i < b->nres; i++) {
        const result_t *r = &b->res[i];
        fprintf(f, "%s\n    {\"bytes\": %zu, \"count\": %zu, \"dtype\": ", i ? "," : "", r->bytes,
                r->count);
        json_str(f, r->has_dtype ? dtype_names[r->dtype] : "none");
        fputs(", \"op\": ", f);
        json_str(f, r->has_op ? op_names[r->op] : "none");
        fprintf(f, ", \"root\": %d, \"algo\": ", r->root);
        json_str(f, r->algo);
        fputs(",\n     \"out_of_place\": ", f);
        json_place(f, &r->oop);
        fputs(",\n     \"in_place\": ", f);
        json_place(f, &r->ip);
        fputc('}', f);
    }
    fprintf(f, "\n  ],\n  \"out_of_bounds\": %d,\n  \"avg_busbw\": ", m->out_of_bounds);
    json_num(f, m->avg_busbw, "%.6f");
    fputs(",\n  \"status\": ", f);
    json_str(f, b->failed ? "FAILED" : m->out_of_bounds ? "WRONG" : "OK");
    fputs(",\n  \"error\": ", f);
    if (b->failed)
        json_str(f, b->failmsg);
    else
        fputs("null", f);
    fputs("\n}\n", f);
    if (fclose(f)) {
        fprintf(stderr, "cohort-bench: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

static void csv_field(FILE *f, const char *s)
{
    if (strpbrk(s, ",\"\n")) {
        fputc('"', f);
        for (; *s; s++) {
            if (*s == '"')
                fputc('"', f);
            fputc(*s, f);
        }
        fputc('"', f);
    } else {
        fputs(s, f);
    }
}

static void csv_place(FILE *f, const place_res_t *p)
{
    if (!p->valid) {
        fputs(",,,,,,", f);
        return;
    }
    fprintf(f, ",%.3f,%.6f,%.6f,", p->time_us, p->algbw, p->busbw);
    if (p->wrong >= 0)
        fprintf(f, "%.0f", p->wrong);
    fprintf(f, ",%.3f,%.3f,%.3f", p->min_us, p->avg_us, p->max_us);
}

static int write_csv(const bench_t *b, const meta_t *m, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "cohort-bench: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    fputs("coll,np,nodes,transport,version,date,bytes,count,dtype,op,root,algo,"
          "oop_time_us,oop_algbw_GBs,oop_busbw_GBs,oop_wrong,oop_min_us,oop_avg_us,oop_max_us,"
          "ip_time_us,ip_algbw_GBs,ip_busbw_GBs,ip_wrong,ip_min_us,ip_avg_us,ip_max_us\n", f);
    for (size_t i = 0; i < b->nres; i++) {
        const result_t *r = &b->res[i];
        fprintf(f, "%s,%d,%d,", coll_names[b->o.coll], b->n, m->nodes);
        csv_field(f, m->transport);
        fputc(',', f);
        csv_field(f, cohort_version());
        fprintf(f, ",%s,%zu,%zu,%s,%s,%d,", m->date, r->bytes, r->count,
                r->has_dtype ? dtype_names[r->dtype] : "none",
                r->has_op ? op_names[r->op] : "none", r->root);
        csv_field(f, r->algo);
        csv_place(f, &r->oop);
        csv_place(f, &r->ip);
        fputc('\n', f);
    }
    if (fclose(f)) {
        fprintf(stderr, "cohort-bench: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */

/* --overlap: how much of an allreduce hides behind computation. */
static volatile double overlap_sink;
static void spin(long n)
{
    double acc = 0;
    for (long i = 0; i < n; i++) acc += (double)i * 1e-9;
    overlap_sink = acc;
}

static double max_all(bench_t *b, double v)
{
    double m = v;
    if (cohort_allreduce(b->comm, &v, &m, 1, COHORT_FLOAT64, COHORT_MAX)) return -1;
    return m;
}

static int cmp_d(const void *x, const void *y)
{
    double a = *(const double *)x, c = *(const double *)y;
    return (a > c) - (a < c);
}

static int overlap_size(bench_t *b, size_t size)
{
    size_t n = size / 4;
    if (!n) return 0;
    float *s = (float *)(void *)b->sendbuf, *r = (float *)(void *)b->recvbuf;
    for (size_t i = 0; i < n; i++) s[i] = 1.0f;
    enum { REPS = 5 };
    double comm[REPS], comp[REPS], both[REPS];
    long per_us = 0;
    /* the spin's rate on this rank */
    double t0 = now_us();
    spin(10000000);
    double rate = 1e7 / (now_us() - t0);
    for (int k = -1; k < REPS; k++) {   /* k = -1: warm-up */
        if (cohort_barrier(b->comm)) return -1;
        t0 = now_us();
        if (cohort_allreduce(b->comm, s, r, n, COHORT_FLOAT32, COHORT_SUM)) return -1;
        double c = max_all(b, now_us() - t0);
        if (c < 0) return -1;
        if (k < 0) {
            per_us = (long)(rate * c);   /* compute as long as the blocking allreduce takes */
            continue;
        }
        comm[k] = c;
        if (cohort_barrier(b->comm)) return -1;
        t0 = now_us();
        spin(per_us);
        comp[k] = max_all(b, now_us() - t0);
        if (cohort_barrier(b->comm)) return -1;
        cohort_request_t *q;
        t0 = now_us();
        if (cohort_iallreduce(b->comm, s, r, n, COHORT_FLOAT32, COHORT_SUM, &q)) return -1;
        spin(per_us);
        if (cohort_wait(q)) return -1;
        both[k] = max_all(b, now_us() - t0);
        if (comp[k] < 0 || both[k] < 0) return -1;
    }
    qsort(comm, REPS, sizeof *comm, cmp_d);
    qsort(comp, REPS, sizeof *comp, cmp_d);
    qsort(both, REPS, sizeof *both, cmp_d);
    double a = comm[REPS / 2], c = comp[REPS / 2], t = both[REPS / 2];
    if (b->rank == 0)
        printf("OVERLAP,%d,%zu,comm_us=%.1f,compute_us=%.1f,both_us=%.1f,"
               "both_over_longer=%.2f\n", b->n, n * 4, a, c, t, t / (a > c ? a : c));
    return 0;
}

static int sweep(bench_t *b)
{
    if (b->o.overlap) {
        for (size_t size = b->o.minbytes; size && size <= b->o.maxbytes; size *= 2)
            if (overlap_size(b, size)) {
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
        snprintf(spec, sizeof spec, "%s:%s", coll_names[b.o.coll], b.o.algo);
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

    if (coll_has_root(b.o.coll) && b.o.root >= b.n) {
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
        /* --nonblocking / --group: a part of the buffers for each call in flight */
        size_t parts = (size_t)(b.o.nonblocking > b.o.group ? b.o.nonblocking : b.o.group);
        if (parts > 1) {
            if (b.alloc > ((size_t)4 << 30) / parts) {
                if (b.rank == 0)
                    fprintf(stderr, "cohort-bench: %zu calls in flight of up to %zu bytes need "
                            "more than 4 GiB of buffers; lower --nonblocking/--group or -e\n",
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
        print_header(&b, m.transport);

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
        if (b.o.json && write_json(&b, &m, b.o.json, argc, argv))
            rc = 1;
        if (b.o.csv && write_csv(&b, &m, b.o.csv))
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
