/* SPDX-License-Identifier: BSD-3-Clause */
/* cohort-bench internals shared between its source files (not installed): the run's options and
 * state, one row's results, and the functions that cross files. cohort-bench.c: options, the
 * sweep and main; bench_run.c: timing one size; bench_check.c: the test data and its check;
 * bench_out.c: the table, RESULT lines, JSON and CSV; svg.c: the --svg plot. */
#ifndef COHORT_BENCH_H
#define COHORT_BENCH_H

#include <stddef.h>
#include <stdint.h>

#include "cohort/cohort.h"

/* ------------------------------------------------------------------------------------------ */
/* Collectives, dtypes and ops (cohort-bench.c)                                                */

typedef enum {
    C_ALLREDUCE, C_BROADCAST, C_REDUCE, C_ALLGATHER, C_REDUCE_SCATTER, C_ALLTOALL, C_BARRIER,
    C_COUNT
} coll_t;

extern const char *const bench_coll_names[C_COUNT];
extern const char *const bench_dtype_names[COHORT_DTYPE_COUNT];
extern const char *const bench_op_names[COHORT_OP_COUNT];

int bench_coll_reduces(coll_t c);
int bench_coll_has_root(coll_t c);
/* nccl-tests' bus bandwidth factors. */
double bench_busbw_factor(coll_t c, int n);

/* ------------------------------------------------------------------------------------------ */
/* The run                                                                                     */

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
    int parts;                    /* --parts N: buffers for N calls, blocking calls cycle them */
    int overlap;                  /* --overlap: an allreduce in flight while the caller computes */
} opts_t;

#define MAX_REPS 5

typedef struct {
    size_t count;        /* the count argument of the call */
    size_t sendcount;    /* elements in the send buffer */
    size_t recvcount;    /* elements in the receive buffer */
    size_t bytes;        /* the size column: max(send, recv) bytes, as nccl-tests */
    size_t esize;
} geom_t;

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

/* What the run's metadata says, for the JSON and CSV files (filled by main). */
typedef struct {
    const char *transport;
    char date[32];
    char host[256];
    int nodes;
    int out_of_bounds;
    double avg_busbw;
} meta_t;

/* How bench_check.c chooses one call's test data (bench_valspec; the scheme is described there). */
typedef struct {
    int n;
    cohort_dtype_t dt;
    cohort_op_t op;
    int reducing;
    int is_signed;
    uint64_t seed;
    uint64_t m;      /* sum/avg value range */
} valspec_t;

/* ------------------------------------------------------------------------------------------ */
/* Timing one size (bench_run.c)                                                               */

/* One row: both placements, then the reductions across ranks; rank 0 prints the row and keeps
 * it in b->res. Returns -1 on failure (reported). */
int bench_size(bench_t *b, size_t size, cohort_dtype_t dt, cohort_op_t op, unsigned seed);

/* --overlap for one size: prints its OVERLAP line on rank 0. Returns -1 when a call failed. */
int bench_overlap_size(bench_t *b, size_t size);

/* ------------------------------------------------------------------------------------------ */
/* Test data and its check (bench_check.c)                                                     */

valspec_t bench_valspec(int n, cohort_dtype_t dt, cohort_op_t op, int reducing, unsigned seed);

/* Fill this rank's input for one call (and poison the output it must overwrite). */
void bench_fill(bench_t *b, const geom_t *g, const valspec_t *v, int inplace);

/* How many elements of this rank's output differ from what the call must give. */
uint64_t bench_count_wrong(bench_t *b, const geom_t *g, const valspec_t *v, int inplace);

/* ------------------------------------------------------------------------------------------ */
/* Output (bench_out.c)                                                                        */

/* The table's header lines (rank 0). */
void bench_print_header(const bench_t *b, const char *transport);

/* One row of the table, and its RESULT line with --result-label (rank 0). */
void bench_print_row(const bench_t *b, const result_t *r);

/* --json and --csv: every result in b->res and the run's metadata. Return -1 when the file
 * cannot be written (reported). */
int bench_write_json(const bench_t *b, const meta_t *m, const char *path, int argc, char **argv);
int bench_write_csv(const bench_t *b, const meta_t *m, const char *path);

/* ------------------------------------------------------------------------------------------ */
/* The --svg plot (svg.c)                                                                      */

/* --svg mode (bench/svg.c): read the JSON files written by earlier runs with --json (comma list
 * in from), draw bus bandwidth against message size (log2 x axis), one polyline per file (per
 * dtype/op series when a file holds several), and write a standalone SVG to out.
 * labels (comma list, may be NULL) overrides the legend entries, title (may be NULL) the title;
 * ylog draws the y axis in log10. Returns 0 on success, prints the reason and returns 1 on
 * failure. Makes no communication. */
int bench_svg(const char *out, const char *from, const char *labels, const char *title, int ylog);

#endif
