/* SPDX-License-Identifier: BSD-3-Clause */
/* Bad input never crashes: every function of cohort.h against NULL handles and out pointers,
 * dtypes and ops out of range, roots that are not ranks, counts whose byte size overflows,
 * overlapping buffers, destroyed handles, calls from the wrong state (aborted, busy), bad
 * cohort_comm_init_oob arguments and bad settings. Every refusal is checked for its status AND for
 * a cohort_last_error() naming the function and the argument.
 *
 * Real communicators: one rank (cohort_comm_init_oob with a memcpy allgather), and two ranks as
 * two threads of this process, each calling cohort_comm_init_oob with an in-process allgather
 * (a barrier with a deadline and memcpy), over shm and over tcp. Two-rank cases make a refused
 * call only on ranks where it is refused (a rank that got in would wait for its peer), and end
 * with a real collective checking that the refusals left the ranks in step.
 *
 * "Destroyed" handles are separately allocated structures whose magic says destroyed (a real
 * destroyed communicator is freed memory: reading it would be the test's own bug). */
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cohort/cohort.h"
#include "core/bootstrap.h"
#include "core/comm.h"
#include "core/config.h"
#include "core/plugin_loader.h"
#include "tests/unit/expect.h"

#define EXPECT_ERR(call, ...) EXPECT_STATUS(call, COHORT_ERR_INVALID_ARG, __VA_ARGS__)
#define PAIR_DEADLINE_S 60   /* a pair's barrier gives up after this (a hang fails, not stalls) */

static int oob_self(const void *s, void *r, size_t n, void *ctx)
{
    (void)ctx;
    memcpy(r, s, n);
    return 0;
}

static cohort_comm_t *one_rank(void)
{
    cohort_comm_t *c = NULL;
    EXPECT_OK(cohort_comm_init_oob(0, 1, oob_self, NULL, &c));
    ck_assert_ptr_nonnull(c);
    return c;
}

/* A separately allocated handle whose magic is the given one (COHORT_COMM_DEAD: destroyed). */
static cohort_comm_t *fake_comm(uint64_t magic)
{
    cohort_comm_t *c = calloc(1, sizeof *c);
    ck_assert_ptr_nonnull(c);
    c->magic = magic;
    c->nranks = 1;
    return c;
}

/* ---- every call that takes a communicator, with otherwise good arguments ----------------- */

static int32_t sbuf[64], rbuf[64];

static cohort_status_t call_allreduce(cohort_comm_t *c)
{
    return cohort_allreduce(c, sbuf, rbuf, 4, COHORT_INT32, COHORT_SUM);
}
static cohort_status_t call_broadcast(cohort_comm_t *c)
{
    return cohort_broadcast(c, rbuf, 4, COHORT_INT32, 0);
}
static cohort_status_t call_reduce(cohort_comm_t *c)
{
    return cohort_reduce(c, sbuf, rbuf, 4, COHORT_INT32, COHORT_SUM, 0);
}
static cohort_status_t call_allgather(cohort_comm_t *c)
{
    return cohort_allgather(c, sbuf, rbuf, 4, COHORT_INT32);
}
static cohort_status_t call_reduce_scatter(cohort_comm_t *c)
{
    return cohort_reduce_scatter(c, sbuf, rbuf, 4, COHORT_INT32, COHORT_SUM);
}
static cohort_status_t call_alltoall(cohort_comm_t *c)
{
    return cohort_alltoall(c, sbuf, rbuf, 4, COHORT_INT32);
}
static cohort_status_t call_barrier(cohort_comm_t *c) { return cohort_barrier(c); }
static cohort_status_t call_split(cohort_comm_t *c)
{
    cohort_comm_t *out = (cohort_comm_t *)&out;   /* must be reset to NULL */
    cohort_status_t st = cohort_comm_split(c, 0, 0, &out);
    if (st != COHORT_SUCCESS) ck_assert_ptr_null(out);
    else cohort_comm_destroy(out);
    return st;
}
static cohort_status_t call_abort(cohort_comm_t *c) { return cohort_comm_abort(c); }
static cohort_status_t call_name_next(cohort_comm_t *c) { return cohort_comm_name_next(c, "x"); }
static cohort_status_t call_set_timeout(cohort_comm_t *c) { return cohort_comm_set_timeout(c, 5); }
static cohort_status_t call_destroy(cohort_comm_t *c) { return cohort_comm_destroy(c); }

typedef struct call {
    const char *name;
    cohort_status_t (*fn)(cohort_comm_t *);
    int collective;    /* refused on an aborted or busy communicator */
} call_t;

static const call_t CALLS[] = {
    { "cohort_allreduce", call_allreduce, 1 },
    { "cohort_broadcast", call_broadcast, 1 },
    { "cohort_reduce", call_reduce, 1 },
    { "cohort_allgather", call_allgather, 1 },
    { "cohort_reduce_scatter", call_reduce_scatter, 1 },
    { "cohort_alltoall", call_alltoall, 1 },
    { "cohort_barrier", call_barrier, 1 },
    { "cohort_comm_split", call_split, 1 },
    { "cohort_comm_abort", call_abort, 0 },
    { "cohort_comm_name_next", call_name_next, 0 },
    { "cohort_comm_set_timeout", call_set_timeout, 0 },
    { "cohort_comm_destroy", call_destroy, 0 },
};
#define NCALLS (sizeof CALLS / sizeof CALLS[0])

static void expect_call(const call_t *k, cohort_comm_t *c, cohort_status_t want,
                        const char *needle)
{
    cohort_status_t st = k->fn(c);
    ck_assert_msg(st == want, "%s returned %d (%s), want %d: %s", k->name, (int)st,
                  cohort_strerror(st), (int)want, cohort_last_error());
    ck_assert_msg(strstr(cohort_last_error(), k->name) != NULL,
                  "%s: message '%s' does not name the function", k->name, cohort_last_error());
    ck_assert_msg(strstr(cohort_last_error(), needle) != NULL,
                  "%s: message '%s' does not mention '%s'", k->name, cohort_last_error(), needle);
}

/* The queries on a handle that is not a live communicator: -1 / "none" / NULL and a message. */
static void expect_queries_refuse(const cohort_comm_t *c, const char *needle)
{
    struct { const char *name; int (*fn)(const cohort_comm_t *); } q[] = {
        { "cohort_comm_rank", cohort_comm_rank },
        { "cohort_comm_size", cohort_comm_size },
        { "cohort_comm_local_rank", cohort_comm_local_rank },
        { "cohort_comm_local_size", cohort_comm_local_size },
        { "cohort_comm_node_count", cohort_comm_node_count },
    };
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) {
        ck_assert_int_eq(q[i].fn(c), -1);
        ck_assert_msg(strstr(cohort_last_error(), q[i].name) && strstr(cohort_last_error(), needle),
                      "%s: message '%s'", q[i].name, cohort_last_error());
    }
    ck_assert_str_eq(cohort_comm_last_algo(c), "none");
    ck_assert_msg(strstr(cohort_last_error(), "cohort_comm_last_algo") &&
                  strstr(cohort_last_error(), needle), "'%s'", cohort_last_error());
    ck_assert_ptr_null(cohort_comm_peer_transport(c, 0));
    ck_assert_msg(strstr(cohort_last_error(), "cohort_comm_peer_transport") &&
                  strstr(cohort_last_error(), needle), "'%s'", cohort_last_error());
}

/* ---- handles ------------------------------------------------------------------------------ */

START_TEST(null_comm)
{
    for (size_t i = 0; i < NCALLS; i++) {
        if (CALLS[i].fn == call_destroy) continue;
        expect_call(&CALLS[i], NULL, COHORT_ERR_INVALID_ARG, "comm is NULL");
    }
    EXPECT_OK(cohort_comm_destroy(NULL));   /* as free(NULL) */
    expect_queries_refuse(NULL, "comm is NULL");
}
END_TEST

START_TEST(destroyed_comm)
{
    cohort_comm_t *dead = fake_comm(COHORT_COMM_DEAD);
    for (size_t i = 0; i < NCALLS; i++)
        expect_call(&CALLS[i], dead, COHORT_ERR_INVALID_ARG, "already destroyed");
    expect_queries_refuse(dead, "already destroyed");
    ck_assert(dead->magic == COHORT_COMM_DEAD);   /* nothing touched it */
    free(dead);
}
END_TEST

START_TEST(garbage_comm)
{
    cohort_comm_t *junk = fake_comm(0x1234);
    for (size_t i = 0; i < NCALLS; i++)
        expect_call(&CALLS[i], junk, COHORT_ERR_INVALID_ARG, "not a cohort communicator");
    expect_queries_refuse(junk, "not a cohort communicator");
    free(junk);
}
END_TEST

START_TEST(null_out_pointers)
{
    EXPECT_ERR(cohort_comm_init(NULL), "cohort_comm_init", "comm is NULL");
    EXPECT_ERR(cohort_comm_init_oob(0, 1, oob_self, NULL, NULL), "cohort_comm_init_oob",
               "comm is NULL");
    cohort_comm_t *c = one_rank();
    EXPECT_ERR(cohort_comm_split(c, 0, 0, NULL), "cohort_comm_split", "out is NULL");
    EXPECT_OK(cohort_barrier(c));   /* still usable */
    EXPECT_OK(cohort_comm_destroy(c));
}
END_TEST

/* ---- cohort_comm_init_oob and cohort_comm_init ------------------------------------------- */

static int oob_fails(const void *s, void *r, size_t n, void *ctx)
{
    (void)s, (void)r, (void)n, (void)ctx;
    return 7;
}

START_TEST(init_oob_args)
{
    cohort_comm_t *c = (cohort_comm_t *)&c;
    EXPECT_ERR(cohort_comm_init_oob(0, 0, oob_self, NULL, &c), "cohort_comm_init_oob",
               "nranks 0");
    ck_assert_ptr_null(c);
    EXPECT_ERR(cohort_comm_init_oob(0, -3, oob_self, NULL, &c), "nranks -3");
    EXPECT_ERR(cohort_comm_init_oob(0, INT_MIN, oob_self, NULL, &c), "nranks");
    EXPECT_ERR(cohort_comm_init_oob(-1, 2, oob_self, NULL, &c), "rank -1", "nranks=2");
    EXPECT_ERR(cohort_comm_init_oob(2, 2, oob_self, NULL, &c), "rank 2", "nranks=2");
    EXPECT_ERR(cohort_comm_init_oob(INT_MAX, 2, oob_self, NULL, &c), "rank 2147483647");
    EXPECT_ERR(cohort_comm_init_oob(0, 2, NULL, NULL, &c), "cohort_comm_init_oob",
               "allgather is NULL");
    ck_assert_ptr_null(c);
    /* a single rank exchanges nothing: NULL is accepted there (cohort.h) */
    EXPECT_OK(cohort_comm_init_oob(0, 1, NULL, NULL, &c));
    ck_assert_int_eq(cohort_comm_size(c), 1);
    EXPECT_OK(cohort_comm_destroy(c));
    /* the caller's allgather failing is an error naming it, not a crash or a hang */
    EXPECT_STATUS(cohort_comm_init_oob(0, 2, oob_fails, NULL, &c), COHORT_ERR_TRANSPORT,
                  "OOB allgather returned 7");
    ck_assert_ptr_null(c);
}
END_TEST

START_TEST(init_from_env)
{
    static const char *const vars[] = { "COHORT_RANK", "COHORT_SIZE", "OMPI_COMM_WORLD_RANK",
                                        "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
                                        "SLURM_PROCID", "SLURM_NTASKS", "RANK", "WORLD_SIZE" };
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
    cohort_comm_t *c = (cohort_comm_t *)&c;
    EXPECT_ERR(cohort_comm_init(&c), "cohort_comm_init", "no rank/size");
    ck_assert_ptr_null(c);
    setenv("COHORT_SIZE", "2", 1);
    setenv("COHORT_RANK", "2", 1);
    EXPECT_ERR(cohort_comm_init(&c), "rank 2 is not in [0, 2)", "COHORT_RANK=2");
    setenv("COHORT_RANK", "0x", 1);
    EXPECT_ERR(cohort_comm_init(&c), "COHORT_RANK", "'0x'");
    setenv("COHORT_RANK", "0", 1);
    setenv("COHORT_SIZE", "-1", 1);
    EXPECT_ERR(cohort_comm_init(&c), "COHORT_SIZE", "'-1'");
    setenv("COHORT_SIZE", "1", 1);
    setenv("COHORT_CHUNK_SIZE", "12abc", 1);
    EXPECT_ERR(cohort_comm_init(&c), "COHORT_CHUNK_SIZE", "'12abc'");
    ck_assert_ptr_null(c);
    unsetenv("COHORT_CHUNK_SIZE");
    EXPECT_OK(cohort_comm_init(&c));
    ck_assert_int_eq(cohort_comm_size(c), 1);
    EXPECT_OK(cohort_comm_destroy(c));
}
END_TEST

/* cohortrun sets both its COHORT_* variables and torchrun's (RANK, WORLD_SIZE, MASTER_ADDR,
 * ... for PyTorch's env://): cohort_comm_init must take the identity from COHORT_* and meet at
 * COHORT_RENDEZVOUS (served by cohortrun), not at MASTER_ADDR:MASTER_PORT+1. The torchrun values
 * here differ from the COHORT_* ones, so the test sees which were read. Without COHORT_*, the
 * same environment is torchrun's. */
START_TEST(identity_cohortrun_before_torchrun)
{
    static const char *const env[][2] = {
        { "COHORT_RANK", "1" }, { "COHORT_SIZE", "3" }, { "COHORT_LOCAL_RANK", "1" },
        { "COHORT_LOCAL_SIZE", "3" }, { "COHORT_RENDEZVOUS", "tcp://127.0.0.1:4000" },
        { "COHORT_RENDEZVOUS_SERVER", "launcher" }, { "COHORT_JOB_ID", "cr-0123456789abcdef" },
        { "COHORT_SECRET", "s3cret" },
        { "RANK", "2" }, { "WORLD_SIZE", "5" }, { "LOCAL_RANK", "0" },
        { "LOCAL_WORLD_SIZE", "1" }, { "MASTER_ADDR", "nosuchhost.invalid" },
        { "MASTER_PORT", "29500" }, { "TORCHELASTIC_RUN_ID", "other" },
    };
    for (size_t i = 0; i < sizeof env / sizeof env[0]; i++) setenv(env[i][0], env[i][1], 1);
    cohort_config_reset();
    cohort_identity_t id;
    EXPECT_OK(cohort_identity_from_env(&id));
    ck_assert_str_eq(id.launcher, "cohortrun");
    ck_assert_int_eq(id.rank, 1);
    ck_assert_int_eq(id.nranks, 3);
    ck_assert_int_eq(id.local_rank, 1);
    ck_assert_int_eq(id.local_size, 3);
    ck_assert_str_eq(id.rendezvous, "tcp://127.0.0.1:4000");
    ck_assert_int_eq(id.external_server, 1);
    ck_assert_str_eq(id.job_id, "cr-0123456789abcdef");
    ck_assert_uint_eq(id.secretlen, 6);
    ck_assert_int_eq(memcmp(id.secret, "s3cret", 6), 0);

    /* the same environment without cohortrun's variables: torchrun's identity, rank 0 hosting
     * the rendezvous at MASTER_PORT+1 */
    for (size_t i = 0; i < sizeof env / sizeof env[0]; i++)
        if (!strncmp(env[i][0], "COHORT_", 7)) unsetenv(env[i][0]);
    cohort_config_reset();
    EXPECT_OK(cohort_identity_from_env(&id));
    ck_assert_str_eq(id.launcher, "torchrun");
    ck_assert_int_eq(id.rank, 2);
    ck_assert_int_eq(id.nranks, 5);
    ck_assert_int_eq(id.local_rank, 0);
    ck_assert_int_eq(id.local_size, 1);
    ck_assert_str_eq(id.rendezvous, "tcp://nosuchhost.invalid:29501");
    ck_assert_int_eq(id.external_server, 0);
    ck_assert_str_eq(id.job_id, "torch-other");
    for (size_t i = 0; i < sizeof env / sizeof env[0]; i++) unsetenv(env[i][0]);
    cohort_config_reset();
}
END_TEST

/* ---- collectives on one rank ------------------------------------------------------------- */

START_TEST(dtype_op_root)
{
    cohort_comm_t *c = one_rank();
    const int bad_dtypes[] = { -1, COHORT_DTYPE_COUNT, INT_MAX, INT_MIN };
    for (size_t i = 0; i < sizeof bad_dtypes / sizeof bad_dtypes[0]; i++) {
        cohort_dtype_t t = (cohort_dtype_t)bad_dtypes[i];
        char d[32];
        snprintf(d, sizeof d, "dtype %d", bad_dtypes[i]);
        EXPECT_ERR(cohort_allreduce(c, sbuf, rbuf, 1, t, COHORT_SUM), "cohort_allreduce", d);
        EXPECT_ERR(cohort_broadcast(c, rbuf, 1, t, 0), "cohort_broadcast", d);
        EXPECT_ERR(cohort_reduce(c, sbuf, rbuf, 1, t, COHORT_SUM, 0), "cohort_reduce", d);
        EXPECT_ERR(cohort_allgather(c, sbuf, rbuf, 1, t), "cohort_allgather", d);
        EXPECT_ERR(cohort_reduce_scatter(c, sbuf, rbuf, 1, t, COHORT_SUM),
                   "cohort_reduce_scatter", d);
        EXPECT_ERR(cohort_alltoall(c, sbuf, rbuf, 1, t), "cohort_alltoall", d);
        /* count 0 does not excuse a bad dtype */
        EXPECT_ERR(cohort_allreduce(c, NULL, NULL, 0, t, COHORT_SUM), d);
        ck_assert_uint_eq(cohort_dtype_size(t), 0);
        ck_assert_str_eq(cohort_dtype_name(t), "?");
    }
    const int bad_ops[] = { -1, COHORT_OP_COUNT, INT_MAX };
    for (size_t i = 0; i < sizeof bad_ops / sizeof bad_ops[0]; i++) {
        cohort_op_t op = (cohort_op_t)bad_ops[i];
        char o[32];
        snprintf(o, sizeof o, "op %d", bad_ops[i]);
        EXPECT_ERR(cohort_allreduce(c, sbuf, rbuf, 1, COHORT_INT32, op), "cohort_allreduce", o);
        EXPECT_ERR(cohort_reduce(c, sbuf, rbuf, 1, COHORT_INT32, op, 0), "cohort_reduce", o);
        EXPECT_ERR(cohort_reduce_scatter(c, sbuf, rbuf, 1, COHORT_INT32, op),
                   "cohort_reduce_scatter", o);
        ck_assert_str_eq(cohort_op_name(op), "?");
    }
    const int bad_roots[] = { -1, 1, INT_MAX, INT_MIN };
    for (size_t i = 0; i < sizeof bad_roots / sizeof bad_roots[0]; i++) {
        char r[48];
        snprintf(r, sizeof r, "root %d is not a rank", bad_roots[i]);
        EXPECT_ERR(cohort_broadcast(c, rbuf, 1, COHORT_INT32, bad_roots[i]), "cohort_broadcast",
                   r, "size 1");
        EXPECT_ERR(cohort_reduce(c, sbuf, rbuf, 1, COHORT_INT32, COHORT_SUM, bad_roots[i]),
                   "cohort_reduce", r);
    }
    for (int t = 0; t < COHORT_DTYPE_COUNT; t++) {
        ck_assert_uint_gt(cohort_dtype_size((cohort_dtype_t)t), 0);
        ck_assert_str_ne(cohort_dtype_name((cohort_dtype_t)t), "?");
    }
    /* after all that, the communicator still works */
    sbuf[0] = 5;
    EXPECT_OK(cohort_allreduce(c, sbuf, rbuf, 1, COHORT_INT32, COHORT_SUM));
    ck_assert_int_eq(rbuf[0], 5);
    EXPECT_OK(cohort_comm_destroy(c));
}
END_TEST

START_TEST(null_buffers)
{
    cohort_comm_t *c = one_rank();
    EXPECT_ERR(cohort_allreduce(c, NULL, rbuf, 1, COHORT_INT32, COHORT_SUM), "cohort_allreduce",
               "sendbuf is NULL with count 1");
    EXPECT_ERR(cohort_allreduce(c, sbuf, NULL, 1, COHORT_INT32, COHORT_SUM), "recvbuf is NULL");
    EXPECT_ERR(cohort_broadcast(c, NULL, 3, COHORT_INT32, 0), "cohort_broadcast",
               "buf is NULL with count 3");
    EXPECT_ERR(cohort_reduce(c, NULL, rbuf, 1, COHORT_INT32, COHORT_SUM, 0), "cohort_reduce",
               "sendbuf is NULL");
    EXPECT_ERR(cohort_reduce(c, sbuf, NULL, 1, COHORT_INT32, COHORT_SUM, 0), "cohort_reduce",
               "recvbuf is NULL", "root");
    EXPECT_ERR(cohort_allgather(c, NULL, rbuf, 1, COHORT_INT32), "cohort_allgather", "sendbuf");
    EXPECT_ERR(cohort_allgather(c, sbuf, NULL, 1, COHORT_INT32), "cohort_allgather", "recvbuf");
    EXPECT_ERR(cohort_reduce_scatter(c, NULL, rbuf, 1, COHORT_INT32, COHORT_SUM),
               "cohort_reduce_scatter", "sendbuf");
    EXPECT_ERR(cohort_reduce_scatter(c, sbuf, NULL, 1, COHORT_INT32, COHORT_SUM),
               "cohort_reduce_scatter", "recvbuf");
    EXPECT_ERR(cohort_alltoall(c, NULL, rbuf, 1, COHORT_INT32), "cohort_alltoall", "sendbuf");
    EXPECT_ERR(cohort_alltoall(c, sbuf, NULL, 1, COHORT_INT32), "cohort_alltoall", "recvbuf");
    /* count 0: nothing to do, NULL accepted (as NCCL and MPI) */
    EXPECT_OK(cohort_allreduce(c, NULL, NULL, 0, COHORT_INT32, COHORT_SUM));
    EXPECT_OK(cohort_broadcast(c, NULL, 0, COHORT_INT32, 0));
    EXPECT_OK(cohort_reduce(c, NULL, NULL, 0, COHORT_INT32, COHORT_SUM, 0));
    EXPECT_OK(cohort_allgather(c, NULL, NULL, 0, COHORT_INT32));
    EXPECT_OK(cohort_reduce_scatter(c, NULL, NULL, 0, COHORT_INT32, COHORT_SUM));
    EXPECT_OK(cohort_alltoall(c, NULL, NULL, 0, COHORT_INT32));
    ck_assert_str_eq(cohort_comm_last_algo(c), "none");
    EXPECT_OK(cohort_comm_destroy(c));
}
END_TEST

START_TEST(count_overflow)
{
    cohort_comm_t *c = one_rank();
    const size_t counts[] = { SIZE_MAX, SIZE_MAX / 2, SIZE_MAX / 4 + 1 };
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        size_t n = counts[i];
        EXPECT_ERR(cohort_allreduce(c, sbuf, rbuf, n, COHORT_FLOAT64, COHORT_SUM),
                   "cohort_allreduce", "overflows size_t");
        EXPECT_ERR(cohort_broadcast(c, rbuf, n, COHORT_INT64, 0), "cohort_broadcast",
                   "overflows");
        EXPECT_ERR(cohort_reduce(c, sbuf, rbuf, n, COHORT_INT32, COHORT_MAX, 0),
                   "cohort_reduce", "overflows");
        EXPECT_ERR(cohort_allgather(c, sbuf, rbuf, n, COHORT_FLOAT32), "cohort_allgather",
                   "overflows");
        EXPECT_ERR(cohort_reduce_scatter(c, sbuf, rbuf, n, COHORT_UINT64, COHORT_SUM),
                   "cohort_reduce_scatter", "overflows");
        EXPECT_ERR(cohort_alltoall(c, sbuf, rbuf, n, COHORT_INT64), "cohort_alltoall",
                   "overflows");
    }
    /* no overflow, but no buffer can be that large */
    EXPECT_ERR(cohort_allreduce(c, sbuf, rbuf, SIZE_MAX, COHORT_INT8, COHORT_SUM),
               "cohort_allreduce", "more than any buffer can hold");
    EXPECT_ERR(cohort_alltoall(c, sbuf, rbuf, SIZE_MAX / 2 + 1, COHORT_UINT8), "cohort_alltoall",
               "more than any buffer");
    /* a buffer that would run past the end of the address space */
    void *top = (void *)(UINTPTR_MAX - 15);
    EXPECT_ERR(cohort_allreduce(c, top, rbuf, 32, COHORT_INT8, COHORT_SUM), "cohort_allreduce",
               "sendbuf", "past the end of the address space");
    EXPECT_ERR(cohort_broadcast(c, top, 4, COHORT_FLOAT64, 0), "cohort_broadcast", "buf",
               "past the end");
    EXPECT_OK(cohort_comm_destroy(c));
}
END_TEST

/* Counts no buffer can hold, though their byte size is below PTRDIFF_MAX and the end of the
 * address space: the last byte would lie in no memory of the process. A real mapping passes
 * whatever its state (untouched, PROT_NONE); one page past its end is refused. */
START_TEST(count_past_memory)
{
    cohort_comm_t *c = one_rank();
    const size_t huge[] = { (size_t)1 << 62, SIZE_MAX / 2, (size_t)1 << 48 };
    char want[64];
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
        snprintf(want, sizeof want, "count %zu (", huge[i]);
        EXPECT_ERR(cohort_broadcast(c, rbuf, huge[i], COHORT_INT8, 0), "cohort_broadcast", want,
                   "is more than buf", "is count right?");
        EXPECT_ERR(cohort_allreduce(c, sbuf, rbuf, huge[i], COHORT_UINT8, COHORT_SUM),
                   "cohort_allreduce", want, "sendbuf");
        EXPECT_ERR(cohort_allreduce(c, rbuf, rbuf, huge[i], COHORT_INT8, COHORT_MAX),
                   "cohort_allreduce", want);
        EXPECT_ERR(cohort_reduce(c, sbuf, rbuf, huge[i], COHORT_INT8, COHORT_SUM, 0),
                   "cohort_reduce", want);
        EXPECT_ERR(cohort_allgather(c, sbuf, rbuf, huge[i], COHORT_INT8), "cohort_allgather",
                   want);
        EXPECT_ERR(cohort_reduce_scatter(c, sbuf, rbuf, huge[i], COHORT_INT8, COHORT_SUM),
                   "cohort_reduce_scatter", want);
        EXPECT_ERR(cohort_alltoall(c, sbuf, rbuf, huge[i], COHORT_INT8), "cohort_alltoall",
                   want);
    }
    /* 2^60 float32: 2^62 bytes from a real buffer */
    EXPECT_ERR(cohort_broadcast(c, rbuf, (size_t)1 << 60, COHORT_FLOAT32, 0), "cohort_broadcast",
               "count 1152921504606846976 (float32, 4611686018427387904 bytes)");
    /* a mapping of 128 MiB whose last page is then unmapped: the mapped part passes (a one-rank
     * broadcast touches nothing, so untouched and PROT_NONE memory can be offered), one byte
     * more is refused, naming the count */
    size_t len = (size_t)128 << 20, page = (size_t)sysconf(_SC_PAGESIZE);
    char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    ck_assert_ptr_ne(m, MAP_FAILED);
    ck_assert_int_eq(munmap(m + len - page, page), 0);
    EXPECT_OK(cohort_broadcast(c, m, len - page, COHORT_INT8, 0));
    snprintf(want, sizeof want, "count %zu (int8", len - page + 1);
    EXPECT_ERR(cohort_broadcast(c, m, len - page + 1, COHORT_INT8, 0), want);
    ck_assert_int_eq(mprotect(m, len - page, PROT_NONE), 0);
    EXPECT_OK(cohort_broadcast(c, m, (len - page) / 8, COHORT_FLOAT64, 0));
    ck_assert_int_eq(munmap(m, len - page), 0);
    EXPECT_OK(cohort_comm_destroy(c));
}
END_TEST

START_TEST(overlap_one_rank)
{
    cohort_comm_t *c = one_rank();
    char *b = (char *)sbuf;   /* 256 bytes */
    /* partial overlap, both directions */
    EXPECT_ERR(cohort_allreduce(c, b, b + 4, 8, COHORT_INT32, COHORT_SUM), "cohort_allreduce",
               "overlap partially", "sendbuf == recvbuf");
    EXPECT_ERR(cohort_allreduce(c, b + 4, b, 8, COHORT_INT32, COHORT_SUM), "overlap");
    EXPECT_ERR(cohort_allreduce(c, b, b + 1, 8, COHORT_INT8, COHORT_SUM), "overlap");
    EXPECT_ERR(cohort_reduce(c, b, b + 8, 8, COHORT_INT32, COHORT_SUM, 0), "cohort_reduce",
               "overlap");
    EXPECT_ERR(cohort_allgather(c, b + 4, b, 8, COHORT_INT32), "cohort_allgather", "overlap",
               "sendbuf == recvbuf + rank * sendcount");
    EXPECT_ERR(cohort_reduce_scatter(c, b, b + 4, 8, COHORT_INT32, COHORT_SUM),
               "cohort_reduce_scatter", "overlap", "recvbuf == sendbuf + rank * recvcount");
    EXPECT_ERR(cohort_alltoall(c, b, b + 16, 8, COHORT_INT32), "cohort_alltoall", "overlap");
    /* exact in place and merely adjacent buffers are fine */
    for (int i = 0; i < 16; i++) sbuf[i] = i;
    EXPECT_OK(cohort_allreduce(c, b, b, 8, COHORT_INT32, COHORT_SUM));
    EXPECT_OK(cohort_allreduce(c, b, b + 32, 8, COHORT_INT32, COHORT_SUM));
    for (int i = 0; i < 8; i++) ck_assert_int_eq(sbuf[8 + i], i);
    EXPECT_OK(cohort_reduce(c, b, b, 8, COHORT_INT32, COHORT_SUM, 0));
    EXPECT_OK(cohort_allgather(c, b, b, 8, COHORT_INT32));       /* rank 0: its own slot */
    EXPECT_OK(cohort_reduce_scatter(c, b, b, 8, COHORT_INT32, COHORT_SUM));
    EXPECT_OK(cohort_alltoall(c, b, b, 8, COHORT_INT32));
    EXPECT_OK(cohort_alltoall(c, b + 32, b, 8, COHORT_INT32));
    for (int i = 0; i < 8; i++) ck_assert_int_eq(sbuf[i], i);
    EXPECT_OK(cohort_comm_destroy(c));
}
END_TEST

/* ---- state: aborted, busy ---------------------------------------------------------------- */

START_TEST(aborted_comm)
{
    cohort_comm_t *c = one_rank();
    EXPECT_OK(cohort_comm_abort(c));
    for (size_t i = 0; i < NCALLS; i++)
        if (CALLS[i].collective)
            expect_call(&CALLS[i], c, COHORT_ERR_ABORTED, "aborted");
    EXPECT_OK(cohort_comm_abort(c));   /* twice is fine */
    ck_assert_int_eq(cohort_comm_size(c), 1);   /* the queries still answer */
    EXPECT_OK(cohort_comm_destroy(c));
}
END_TEST

START_TEST(busy_comm)
{
    cohort_comm_t *c = one_rank();
    atomic_store(&c->busy, 1);   /* as while a collective runs in another thread */
    for (size_t i = 0; i < NCALLS; i++) {
        if (CALLS[i].collective)
            expect_call(&CALLS[i], c, COHORT_ERR_INVALID_ARG, "another call");
    }
    expect_call(&CALLS[NCALLS - 1], c, COHORT_ERR_INVALID_ARG, "still running");
    ck_assert_int_eq(atomic_load(&c->busy), 1);   /* a refused call does not release it */
    EXPECT_OK(cohort_comm_abort(c));   /* abort is the call allowed meanwhile */
    atomic_store(&c->busy, 0);
    EXPECT_OK(cohort_comm_destroy(c));
}
END_TEST

START_TEST(split_one_rank)
{
    cohort_comm_t *c = one_rank(), *s = (cohort_comm_t *)&s, *s2 = (cohort_comm_t *)&s2;
    EXPECT_OK(cohort_comm_split(c, -1, 0, &s));
    ck_assert_ptr_null(s);
    EXPECT_OK(cohort_comm_split(c, INT_MAX, INT_MIN, &s));
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(cohort_comm_size(s), 1);
    EXPECT_OK(cohort_comm_abort(s));
    EXPECT_STATUS(cohort_comm_split(s, 0, 0, &s2), COHORT_ERR_ABORTED, "cohort_comm_split",
                  "aborted");
    ck_assert_ptr_null(s2);
    EXPECT_OK(cohort_comm_destroy(s));
    EXPECT_OK(cohort_barrier(c));   /* the parent is not affected */
    EXPECT_OK(cohort_comm_destroy(c));
}
END_TEST

/* cohort_mem_alloc / cohort_mem_free, and the host table's mem_shared that plugins see. */
START_TEST(mem_alloc)
{
    void *p = (void *)&p;
    EXPECT_STATUS(cohort_mem_alloc(0, &p), COHORT_ERR_INVALID_ARG, "cohort_mem_alloc",
                  "size 0");
    ck_assert_ptr_null(p);
    EXPECT_STATUS(cohort_mem_alloc(16, NULL), COHORT_ERR_INVALID_ARG, "ptr is NULL");
    EXPECT_STATUS(cohort_mem_alloc(SIZE_MAX, &p), COHORT_ERR_INVALID_ARG, "is not in");
    EXPECT_OK(cohort_mem_free(NULL));

    const cohort_host_v1_t *h = cohort_plugin_host();
    ck_assert(COHORT_HAS_FIELD(h, cohort_host_v1_t, mem_shared) && h->mem_shared);
    int fd = -1, fd2 = -1;
    uint64_t id = 0, id2 = 0, off = 0;
    ck_assert_int_eq(h->mem_shared(&fd, 4, &fd, &id, &off), 0);   /* nothing allocated yet */

    unsigned char *a = NULL, *b = NULL;
    EXPECT_OK(cohort_mem_alloc(10000, (void **)&a));
    EXPECT_OK(cohort_mem_alloc(1, (void **)&b));
    ck_assert_ptr_nonnull(a);
    ck_assert_uint_eq((uintptr_t)a % 4096, 0);
    for (size_t i = 0; i < 10000; i++) ck_assert_uint_eq(a[i], 0);   /* zeroed */
    memset(a, 0x5a, 10000);
    b[0] = 7;

    /* a range inside a block: its memfd, named for this process and the block's id */
    ck_assert_int_eq(h->mem_shared(a + 100, 50, &fd, &id, &off), 1);
    ck_assert_uint_eq(off, 100);
    ck_assert_int_ge(fd, 0);
    char path[64], link[128], want[128];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, link, sizeof link - 1);
    ck_assert_int_gt(n, 0);
    link[n] = 0;
    snprintf(want, sizeof want, "/memfd:cohort-mem-%d-%llu (deleted)", (int)getpid(),
             (unsigned long long)id);
    ck_assert_str_eq(link, want);
    ck_assert_int_eq(h->mem_shared(b, 1, &fd2, &id2, &off), 1);
    ck_assert_int_ne(fd2, fd);
    ck_assert_uint_ne(id2, id);
    /* the whole mapped length (whole pages) counts; past it, or elsewhere, does not */
    ck_assert_int_eq(h->mem_shared(a, 12288, &fd, &id, &off), 1);
    ck_assert_int_eq(h->mem_shared(a + 12280, 16, &fd, &id, &off), 0);
    ck_assert_int_eq(h->mem_shared(&p, sizeof p, &fd, &id, &off), 0);
    ck_assert_int_eq(h->mem_shared(NULL, 1, &fd, &id, &off), 0);

    /* a forked child inherits the mapping but may not hand it out under its own pid */
    pid_t child = fork();
    if (child == 0) _exit(h->mem_shared(a, 1, &fd, &id, &off) == 0 && a[9999] == 0x5a ? 0 : 1);
    int status = -1;
    ck_assert_int_eq(waitpid(child, &status, 0), child);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    EXPECT_STATUS(cohort_mem_free(a + 1), COHORT_ERR_INVALID_ARG, "cohort_mem_free",
                  "is not the start of a block");
    EXPECT_OK(cohort_mem_free(a));
    EXPECT_STATUS(cohort_mem_free(a), COHORT_ERR_INVALID_ARG, "freed twice");
    ck_assert_int_eq(h->mem_shared(a, 1, &fd, &id, &off), 0);
    ck_assert_int_eq(h->mem_shared(b, 1, &fd, &id, &off), 1);
    EXPECT_OK(cohort_mem_free(b));
}
END_TEST

START_TEST(misc_functions)
{
    const int statuses[] = { COHORT_SUCCESS, COHORT_IN_PROGRESS, COHORT_ERR_INVALID_ARG,
                             COHORT_ERR_NO_MEMORY, COHORT_ERR_SYSTEM, COHORT_ERR_TRANSPORT,
                             COHORT_ERR_PEER_LOST, COHORT_ERR_TIMEOUT, COHORT_ERR_ABORTED,
                             COHORT_ERR_UNSUPPORTED, COHORT_ERR_MISMATCH, COHORT_ERR_PLUGIN,
                             COHORT_ERR_INTERNAL };
    for (size_t i = 0; i < sizeof statuses / sizeof statuses[0]; i++)
        ck_assert_str_ne(cohort_strerror((cohort_status_t)statuses[i]), "unknown status");
    const int unknown[] = { 2, -12, 100, -100, INT_MAX, INT_MIN };
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++)
        ck_assert_str_eq(cohort_strerror((cohort_status_t)unknown[i]), "unknown status");
    ck_assert_str_eq(cohort_version(), COHORT_VERSION_STRING);   /* the header's = the library's */
    char parts[32];
    snprintf(parts, sizeof parts, "%d.%d.%d", COHORT_VERSION_MAJOR, COHORT_VERSION_MINOR,
             COHORT_VERSION_PATCH);
    ck_assert_str_eq(cohort_version(), parts);
    ck_assert_ptr_nonnull(cohort_last_error());
    cohort_comm_t *c = one_rank();
    ck_assert_ptr_null(cohort_comm_peer_transport(c, 0));   /* itself: no transport */
    ck_assert_ptr_null(cohort_comm_peer_transport(c, 1));
    ck_assert_msg(strstr(cohort_last_error(), "peer 1 is not a rank"), "%s", cohort_last_error());
    ck_assert_ptr_null(cohort_comm_peer_transport(c, -1));
    ck_assert_msg(strstr(cohort_last_error(), "peer -1"), "%s", cohort_last_error());
    ck_assert_ptr_null(cohort_comm_peer_transport(c, INT_MIN));
    ck_assert_int_eq(cohort_comm_rank(c), 0);
    ck_assert_int_eq(cohort_comm_local_size(c), 1);
    ck_assert_int_eq(cohort_comm_node_count(c), 1);
    EXPECT_OK(cohort_comm_destroy(c));
}
END_TEST

/* ---- bad settings at creation ------------------------------------------------------------ */

typedef struct bad_setting {
    const char *var, *value, *needle;
} bad_setting_t;

/* Each one alone makes a one-rank cohort_comm_init_oob fail, naming the variable and the text. */
static const bad_setting_t BAD_SETTINGS[] = {
    { "COHORT_TIMEOUT", "12abc", "'12abc'" },
    { "COHORT_TIMEOUT", "", "''" },
    { "COHORT_TIMEOUT", "1e999", "'1e999'" },
    { "COHORT_TIMEOUT", "-1", "'-1'" },
    { "COHORT_CHUNK_SIZE", "-1", "'-1'" },
    { "COHORT_CHUNK_SIZE", "99999999999999999999999", "'99999999999999999999999'" },
    { "COHORT_CHUNK_SIZE", "4k", "'4k'" },
    { "COHORT_SPIN", "1.5", "'1.5'" },
    { "COHORT_SPIN_US", " ", "' '" },
    { "COHORT_SOCKET_NSOCKS", "0", "'0'" },
    { "COHORT_SOCKET_NSOCKS", "x", "'x'" },
    { "COHORT_SOCKET_PROBE_MS", "0", "'0'" },
    { "COHORT_SHM_SEGMENT_SIZE", "1k", "'1k'" },
    { "COHORT_SHM_EAGER_LIMIT", "-1", "'-1'" },
    { "COHORT_SHM_CMA", "7", "'7'" },
    { "COHORT_SHM_MAP", "2", "'2'" },
    { "COHORT_SHM_COLL_CHUNK", "12", "='12' is refused by the shm transport" },
    { "COHORT_SOCKET_IFNAME", "=nosuchif0", "'=nosuchif0' matches no interface" },
    { "COHORT_SOCKET_IFNAME", "eth0,,lo", "empty entry" },
    { "COHORT_SOCKET_IFNAME", "10.0.0.0/99", "10.0.0.0/99" },
    { "COHORT_ALGO", "allreduce:nosuch", "'nosuch' is not an algorithm for allreduce" },
    { "COHORT_ALGO", "allreduce", "'allreduce'" },
    { "COHORT_ALGO", "scan:ring", "unknown collective" },
    { "COHORT_TRANSPORTS", "nosuch", "'nosuch'" },
    { "COHORT_TRANSPORTS", "shm,,tcp", "empty entry" },
    { "COHORT_TRANSPORTS", "^", "names no transports" },
    { "COHORT_DEBUG", "LOUD", "'LOUD'" },
    { "COHORT_DEBUG", "", "''" },
    { "COHORT_DEBUG_SUBSYS", "init,,net", "'init,,net'" },
    { "COHORT_HIERARCHICAL", "sometimes", "'sometimes'" },
    { "COHORT_UCX_ZCOPY", "2", "'2'" },
    { "COHORT_PLUGIN_PATH", "/nonexistent/plugins", "'/nonexistent/plugins'" },
    { "COHORT_TOPO_FILE", "/nonexistent/topo.xml", "/nonexistent/topo.xml" },
    { "COHORT_RENDEZVOUS", "udp://x:1", "'udp://x:1'" },
    { "COHORT_RENDEZVOUS", "tcp://host:12abc", "12abc" },
    { "COHORT_RENDEZVOUS", "file:///nonexistent/dir", "/nonexistent/dir" },
    { "COHORT_RANK", "-1", "'-1'" },
    { "COHORT_SIZE", "0", "'0'" },
    { "COHORT_JOB_ID", "x123456789x123456789x123456789x123456789x123456789x123456789x1234",
      "characters long" },
    { "COHORT_CONF", "/nonexistent/cohort.conf", "/nonexistent/cohort.conf" },
};
#define NBAD (int)(sizeof BAD_SETTINGS / sizeof BAD_SETTINGS[0])

START_TEST(bad_setting_fails_creation)
{
    const bad_setting_t *b = &BAD_SETTINGS[_i];
    setenv(b->var, b->value, 1);
    cohort_comm_t *c = (cohort_comm_t *)&c;
    EXPECT_ERR(cohort_comm_init_oob(0, 1, oob_self, NULL, &c), b->var, b->needle);
    ck_assert_ptr_null(c);
}
END_TEST

/* ---- two ranks: two threads of this process ---------------------------------------------- */

typedef struct pair {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    unsigned arrived, generation;
    int broken;                  /* a barrier timed out: every later one fails at once */
    const void *src[2];
    int fail_round;              /* 0, or the allgather call (from 1) at which both ranks fail */
    void (*body)(int rank, cohort_comm_t *c, struct pair *p);
    double timeout_s;            /* > 0: created with cohort_comm_init_oob_timeout */
    char failures[4096];
} pair_t;

typedef struct member {
    pair_t *p;
    int rank, round;
    cohort_status_t init_st;
    char init_msg[256];
} member_t;

/* Both threads arrive, or -1 after PAIR_DEADLINE_S (then every later wait fails too). */
static int pair_sync(pair_t *p)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += PAIR_DEADLINE_S;
    pthread_mutex_lock(&p->lock);
    unsigned gen = p->generation;
    if (++p->arrived == 2) {
        p->arrived = 0;
        p->generation++;
        pthread_cond_broadcast(&p->cond);
    } else {
        while (gen == p->generation && !p->broken)
            if (pthread_cond_timedwait(&p->cond, &p->lock, &dl) == ETIMEDOUT) p->broken = 1;
        if (p->broken) pthread_cond_broadcast(&p->cond);
    }
    int rc = p->broken ? -1 : 0;
    pthread_mutex_unlock(&p->lock);
    return rc;
}

static int oob_pair(const void *s, void *r, size_t n, void *ctx)
{
    member_t *m = ctx;
    pair_t *p = m->p;
    if (p->fail_round && ++m->round == p->fail_round) return 9;
    p->src[m->rank] = s;
    if (pair_sync(p)) return 1;
    for (int i = 0; i < 2; i++) memcpy((char *)r + (size_t)i * n, p->src[i], n);
    return pair_sync(p) ? 1 : 0;   /* nobody reuses its sendbuf before both copied */
}

static void pair_fail(pair_t *p, int rank, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void pair_fail(pair_t *p, int rank, int line, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&p->lock);
    size_t used = strlen(p->failures);
    snprintf(p->failures + used, sizeof p->failures - used, "[rank %d] line %d: %s\n", rank, line,
             msg);
    pthread_mutex_unlock(&p->lock);
}

/* In a pair's body: the call returns status and the message mentions needle. */
#define P_EXPECT(call, status, needle)                                                        \
    do {                                                                                      \
        cohort_status_t st_ = (call);                                                         \
        if (st_ != (status) || !strstr(cohort_last_error(), (needle)))                        \
            pair_fail(p, rank, __LINE__, "%s returned %d (want %d), message '%s', want '%s'", \
                      #call, (int)st_, (int)(status), cohort_last_error(), (needle));         \
    } while (0)
#define P_OK(call) P_EXPECT(call, COHORT_SUCCESS, "")
#define P_CHECK(cond, ...)                                                                    \
    do {                                                                                      \
        if (!(cond)) pair_fail(p, rank, __LINE__, __VA_ARGS__);                               \
    } while (0)

static void *pair_thread(void *arg)
{
    member_t *m = arg;
    pair_t *p = m->p;
    cohort_comm_t *c = NULL;
    m->init_st = p->timeout_s > 0
                     ? cohort_comm_init_oob_timeout(m->rank, 2, oob_pair, m, p->timeout_s, &c)
                     : cohort_comm_init_oob(m->rank, 2, oob_pair, m, &c);
    snprintf(m->init_msg, sizeof m->init_msg, "%s", cohort_last_error());
    if (m->init_st == COHORT_SUCCESS) {
        if (cohort_comm_size(c) != 2 || cohort_comm_rank(c) != m->rank)
            pair_fail(p, m->rank, __LINE__, "size %d rank %d", cohort_comm_size(c),
                      cohort_comm_rank(c));
        if (p->body) p->body(m->rank, c, p);
        cohort_status_t st = cohort_comm_destroy(c);
        if (st) pair_fail(p, m->rank, __LINE__, "destroy: %s", cohort_last_error());
    }
    return NULL;
}

/* Runs body on two ranks (threads); returns after both ended; asserts no failure was recorded. */
static void run_pair(pair_t *p, member_t m[2])
{
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->cond, NULL);
    pthread_t t[2];
    for (int r = 0; r < 2; r++) {
        m[r] = (member_t){ p, r, 0, COHORT_SUCCESS, "" };
        ck_assert_int_eq(pthread_create(&t[r], NULL, pair_thread, &m[r]), 0);
    }
    for (int r = 0; r < 2; r++) pthread_join(t[r], NULL);
    ck_assert_msg(!p->broken, "a pair barrier timed out after %d s", PAIR_DEADLINE_S);
    ck_assert_msg(!p->failures[0], "%s", p->failures);
}

static void with_transport(int i)
{
    /* 0: default (shm between these threads), 1: tcp */
    if (i == 1) setenv("COHORT_TRANSPORTS", "tcp", 1);
    else unsetenv("COHORT_TRANSPORTS");
}

/* Symmetric bad arguments, then asymmetric ones only where refused, then a real collective. */
static void body_args(int rank, cohort_comm_t *c, pair_t *p)
{
    int32_t s[64], r[64];
    char *sb = (char *)s, *rb = (char *)r;
    for (int i = 0; i < 64; i++) s[i] = rank * 100 + i;
    P_EXPECT(cohort_broadcast(c, r, 4, COHORT_INT32, 2), COHORT_ERR_INVALID_ARG,
             "root 2 is not a rank of this communicator (size 2)");
    P_EXPECT(cohort_reduce(c, s, r, 4, COHORT_INT32, COHORT_SUM, -1), COHORT_ERR_INVALID_ARG,
             "root -1");
    P_EXPECT(cohort_allgather(c, s, r, SIZE_MAX / 2 + 1, COHORT_INT8), COHORT_ERR_INVALID_ARG,
             "x 2 blocks overflows");
    P_EXPECT(cohort_alltoall(c, s, r, SIZE_MAX / 4 + 1, COHORT_UINT8), COHORT_ERR_INVALID_ARG,
             "more than any buffer");
    P_EXPECT(cohort_reduce_scatter(c, s, r, SIZE_MAX / 2 + 1, COHORT_INT8, COHORT_SUM),
             COHORT_ERR_INVALID_ARG, "overflows");
    P_EXPECT(cohort_alltoall(c, sb, sb + 4, 4, COHORT_INT32), COHORT_ERR_INVALID_ARG, "overlap");
    P_EXPECT(cohort_allgather(c, sb + 8, sb, 4, COHORT_INT32), COHORT_ERR_INVALID_ARG,
             "overlap");   /* inside recvbuf, but neither rank's slot (0 and 16) */
    P_EXPECT(cohort_comm_split(c, 0, 0, NULL), COHORT_ERR_INVALID_ARG, "out is NULL");
    P_EXPECT(cohort_comm_peer_transport(c, 2) ? COHORT_SUCCESS : COHORT_ERR_INVALID_ARG,
             COHORT_ERR_INVALID_ARG, "peer 2 is not a rank");
    const char *tp = cohort_comm_peer_transport(c, 1 - rank);
    P_CHECK(tp && (!strcmp(tp, "shm") || !strcmp(tp, "tcp")), "peer transport %s",
            tp ? tp : "NULL");
    P_CHECK(!cohort_comm_peer_transport(c, rank), "a transport to itself");
    if (rank == 1) {
        /* on rank 1 sendbuf == recvbuf is not the in-place form of these two (that is rank
         * 0's slot): refused there, while rank 0 would have gone ahead, so only rank 1 calls */
        P_EXPECT(cohort_allgather(c, rb, rb, 4, COHORT_INT32), COHORT_ERR_INVALID_ARG,
                 "sendbuf == recvbuf + rank * sendcount");
        P_EXPECT(cohort_reduce_scatter(c, sb, sb, 4, COHORT_INT32, COHORT_SUM),
                 COHORT_ERR_INVALID_ARG, "recvbuf == sendbuf + rank * recvcount");
    }
    /* the refusals left the ranks in step: real collectives, in the exact in-place forms */
    int32_t g[8];
    for (int i = 0; i < 4; i++) g[rank * 4 + i] = rank * 10 + i;
    P_OK(cohort_allgather(c, g + rank * 4, g, 4, COHORT_INT32));
    for (int i = 0; i < 8; i++) P_CHECK(g[i] == (i / 4) * 10 + i % 4, "allgather g[%d]=%d", i, g[i]);
    int32_t rs[8];
    for (int i = 0; i < 8; i++) rs[i] = i + rank;
    P_OK(cohort_reduce_scatter(c, rs, rs + rank * 4, 4, COHORT_INT32, COHORT_SUM));
    for (int i = 0; i < 4; i++)
        P_CHECK(rs[rank * 4 + i] == 2 * (rank * 4 + i) + 1, "reduce_scatter %d: %d", i,
                rs[rank * 4 + i]);
    /* reduce: recvbuf off the root is ignored, even one overlapping sendbuf */
    int32_t red[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
    P_OK(cohort_reduce(c, red, rank == 0 ? red : red + 1, 4, COHORT_INT32, COHORT_SUM, 0));
    if (rank == 0)
        for (int i = 0; i < 4; i++) P_CHECK(red[i] == 2 * (i + 1), "reduce %d: %d", i, red[i]);
    else
        for (int i = 0; i < 8; i++) P_CHECK(red[i] == i + 1, "reduce wrote off the root: %d", i);
    int32_t one = 1, sum = 0;
    P_OK(cohort_allreduce(c, &one, &sum, 1, COHORT_INT32, COHORT_SUM));
    P_CHECK(sum == 2, "allreduce after the refusals: %d", sum);
}

START_TEST(pair_args)
{
    with_transport(_i);
    pair_t p = { .body = body_args };
    member_t m[2];
    run_pair(&p, m);
    for (int r = 0; r < 2; r++)
        ck_assert_msg(m[r].init_st == COHORT_SUCCESS, "rank %d init: %s", r, m[r].init_msg);
}
END_TEST

/* Counts no buffer can hold, on every collective, over shm and tcp: refused by the core on both
 * ranks with the count named, before a transport sees them (shm once read past the buffer, tcp
 * failed with EFAULT). Then a real collective: the refusals left the ranks in step. */
static void body_huge(int rank, cohort_comm_t *c, pair_t *p)
{
    int8_t s[64] = { 0 }, r[64] = { 0 };
    const size_t huge[] = { (size_t)1 << 62, SIZE_MAX / 2, (size_t)1 << 48 };
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
        size_t n = huge[i];
        char want[64];
        snprintf(want, sizeof want, "count %zu", n);
        for (int root = 0; root < 2; root++) {
            P_EXPECT(cohort_broadcast(c, r, n, COHORT_INT8, root), COHORT_ERR_INVALID_ARG, want);
            P_EXPECT(cohort_reduce(c, s, r, n, COHORT_INT8, COHORT_SUM, root),
                     COHORT_ERR_INVALID_ARG, want);
        }
        P_EXPECT(cohort_allreduce(c, s, r, n, COHORT_INT8, COHORT_SUM), COHORT_ERR_INVALID_ARG,
                 want);
        P_EXPECT(cohort_allreduce(c, r, r, n, COHORT_UINT8, COHORT_MIN), COHORT_ERR_INVALID_ARG,
                 want);
        P_EXPECT(cohort_allgather(c, s, r, n, COHORT_INT8), COHORT_ERR_INVALID_ARG, want);
        P_EXPECT(cohort_reduce_scatter(c, s, r, n, COHORT_INT8, COHORT_SUM),
                 COHORT_ERR_INVALID_ARG, want);
        P_EXPECT(cohort_alltoall(c, s, r, n, COHORT_INT8), COHORT_ERR_INVALID_ARG, want);
        P_EXPECT(cohort_broadcast(c, r, n / 8, COHORT_FLOAT64, 0), COHORT_ERR_INVALID_ARG,
                 "float64");
    }
    int32_t one = 1, sum = 0;
    P_OK(cohort_allreduce(c, &one, &sum, 1, COHORT_INT32, COHORT_SUM));
    P_CHECK(sum == 2, "allreduce after the refusals: %d", sum);
    (void)rank;
}

START_TEST(pair_huge_counts)
{
    with_transport(_i);
    pair_t p = { .body = body_huge };
    member_t m[2];
    run_pair(&p, m);
    for (int r = 0; r < 2; r++)
        ck_assert_msg(m[r].init_st == COHORT_SUCCESS, "rank %d init: %s", r, m[r].init_msg);
}
END_TEST

/* Abort on both ranks: every collective and split refuse with ABORTED; destroy works. */
static void body_abort(int rank, cohort_comm_t *c, pair_t *p)
{
    P_OK(cohort_comm_abort(c));
    int x = 1, y;
    P_EXPECT(cohort_allreduce(c, &x, &y, 1, COHORT_INT32, COHORT_SUM), COHORT_ERR_ABORTED,
             "aborted");
    P_EXPECT(cohort_barrier(c), COHORT_ERR_ABORTED, "cohort_barrier");
    cohort_comm_t *s = NULL;
    P_EXPECT(cohort_comm_split(c, 0, rank, &s), COHORT_ERR_ABORTED, "cohort_comm_split");
    P_CHECK(s == NULL, "split of an aborted communicator gave one");
    pair_sync(p);
}

START_TEST(pair_abort)
{
    with_transport(_i);
    pair_t p = { .body = body_abort };
    member_t m[2];
    run_pair(&p, m);
    for (int r = 0; r < 2; r++)
        ck_assert_msg(m[r].init_st == COHORT_SUCCESS, "rank %d init: %s", r, m[r].init_msg);
}
END_TEST

/* A collective blocked in one thread (rank 1 never joins): other calls on that communicator
 * from another thread are refused, destroy too; abort ends the blocked one with ABORTED. */
typedef struct blocked {
    cohort_comm_t *c;
    cohort_status_t st;
} blocked_t;

static void *blocked_allreduce(void *arg)
{
    blocked_t *b = arg;
    int x = 1, y = 0;
    b->st = cohort_allreduce(b->c, &x, &y, 1, COHORT_INT32, COHORT_SUM);
    return NULL;
}

static void body_busy(int rank, cohort_comm_t *c, pair_t *p)
{
    if (rank == 0) {
        blocked_t b = { c, COHORT_SUCCESS };
        pthread_t t;
        pthread_create(&t, NULL, blocked_allreduce, &b);
        struct timespec t0, now, nap = { 0, 1000000 };
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int busy = 0;
        do {   /* until the allreduce holds the communicator (deadline: no hang) */
            busy = atomic_load(&c->busy);
            if (!busy) nanosleep(&nap, NULL);
            clock_gettime(CLOCK_MONOTONIC, &now);
        } while (!busy && now.tv_sec - t0.tv_sec < PAIR_DEADLINE_S);
        P_CHECK(busy, "the allreduce never marked the communicator busy");
        int x = 1, y;
        P_EXPECT(cohort_allreduce(c, &x, &y, 1, COHORT_INT32, COHORT_SUM),
                 COHORT_ERR_INVALID_ARG, "another call");
        P_EXPECT(cohort_broadcast(c, &x, 1, COHORT_INT32, 0), COHORT_ERR_INVALID_ARG,
                 "another call");
        cohort_comm_t *s = NULL;
        P_EXPECT(cohort_comm_split(c, 0, 0, &s), COHORT_ERR_INVALID_ARG, "another call");
        P_EXPECT(cohort_comm_destroy(c), COHORT_ERR_INVALID_ARG, "still running");
        P_OK(cohort_comm_abort(c));
        pthread_join(t, NULL);
        P_CHECK(b.st == COHORT_ERR_ABORTED, "the blocked allreduce returned %d", (int)b.st);
        P_CHECK(!atomic_load(&c->busy), "still busy after the allreduce returned");
    }
    pair_sync(p);   /* rank 1 keeps its end until rank 0 is done */
}

START_TEST(pair_busy)
{
    with_transport(_i);
    pair_t p = { .body = body_busy };
    member_t m[2];
    run_pair(&p, m);
    for (int r = 0; r < 2; r++)
        ck_assert_msg(m[r].init_st == COHORT_SUCCESS, "rank %d init: %s", r, m[r].init_msg);
}
END_TEST

/* The caller's allgather failing at any round of the creation, on both ranks: an error naming
 * it on both, no hang (and, under LeakSanitizer, no leak). Two ranks on one node make five
 * rounds: the communicator id, then comm_create's cards, addresses, reachability and status. */
START_TEST(pair_oob_failure)
{
    for (int round = 1; round <= 5; round++) {
        pair_t p = { .fail_round = round };
        member_t m[2];
        run_pair(&p, m);
        for (int r = 0; r < 2; r++) {
            ck_assert_msg(m[r].init_st == COHORT_ERR_TRANSPORT,
                          "round %d rank %d: status %d: %s", round, r, (int)m[r].init_st,
                          m[r].init_msg);
            ck_assert_msg(strstr(m[r].init_msg, "OOB allgather returned 9"),
                          "round %d rank %d: '%s'", round, r, m[r].init_msg);
        }
    }
}
END_TEST

/* A communicator's own timeout (COHORT_TIMEOUT stays 300 s): rank 0 calls collectives rank 1
 * never makes; they fail after about 1 s, naming that timeout, on the communicator and on a
 * communicator split from it. */
static double secs_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) * 1e-9;
}

static void body_own_timeout(int rank, cohort_comm_t *c, pair_t *p)
{
    cohort_comm_t *sub = NULL;
    P_OK(cohort_comm_split(c, 0, 1 - rank, &sub));
    if (!sub) return;
    int32_t v[5] = { 1, 2, 3, 4, 5 };
    for (int i = 0; i < 2 && rank == 0; i++) {
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        P_EXPECT(cohort_allreduce(i ? c : sub, v, v, 5, COHORT_INT32, COHORT_SUM),
                 COHORT_ERR_TIMEOUT, "stalled for 1 s");
        P_CHECK(strstr(cohort_last_error(), "the timeout the communicator was given"),
                "the message does not name the communicator's timeout: %s",
                cohort_last_error());
        /* not a performance bound: 300 s (COHORT_TIMEOUT) would mean the wrong timeout held */
        P_CHECK(secs_since(&t0) < 100, "timed out after %.1f s", secs_since(&t0));
    }
    P_CHECK(!pair_sync(p), "pair barrier");
    P_CHECK(cohort_comm_destroy(sub) != COHORT_ERR_INVALID_ARG, "destroy sub: %s",
            cohort_last_error());
}

START_TEST(pair_own_timeout)
{
    setenv("COHORT_TIMEOUT", "300", 1);
    pair_t p = { .body = body_own_timeout, .timeout_s = 1 };
    member_t m[2];
    run_pair(&p, m);
    unsetenv("COHORT_TIMEOUT");
}
END_TEST

START_TEST(own_timeout_and_names)
{
    cohort_comm_t *c = (cohort_comm_t *)&c;
    const double bad[] = { -1, 0.05, 1e8, NAN, INFINITY };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        EXPECT_ERR(cohort_comm_init_oob_timeout(0, 1, oob_self, NULL, bad[i], &c),
                   "cohort_comm_init_oob_timeout: timeout_s", "[0.1, 1e7]");
        ck_assert_ptr_null(c);
    }
    EXPECT_OK(cohort_comm_init_oob_timeout(0, 1, oob_self, NULL, 0.5, &c));
    EXPECT_ERR(cohort_comm_set_timeout(c, 0.05), "cohort_comm_set_timeout: timeout_s 0.05",
               "[0.1, 1e7]");
    EXPECT_ERR(cohort_comm_set_timeout(c, NAN), "cohort_comm_set_timeout", "[0.1, 1e7]");
    EXPECT_OK(cohort_comm_set_timeout(c, 2));
    char name[COHORT_NAME_MAX + 1];
    memset(name, 'g', sizeof name - 1);
    name[COHORT_NAME_MAX] = '\0';
    EXPECT_ERR(cohort_comm_name_next(c, name), "cohort_comm_name_next", "at most 127");
    name[COHORT_NAME_MAX - 1] = '\0';
    EXPECT_OK(cohort_comm_name_next(c, name));
    EXPECT_OK(cohort_comm_name_next(c, NULL));
    EXPECT_OK(cohort_comm_name_next(c, "grad.layer1.weight"));
    float x = 2;
    EXPECT_OK(cohort_allreduce(c, &x, &x, 1, COHORT_FLOAT32, COHORT_SUM));
    ck_assert(x == 2);
    EXPECT_OK(cohort_comm_destroy(c));
}
END_TEST

static Suite *api_suite(void)
{
    Suite *s = suite_create("api");
    TCase *h = tcase_create("handles");
    tcase_add_test(h, null_comm);
    tcase_add_test(h, destroyed_comm);
    tcase_add_test(h, garbage_comm);
    tcase_add_test(h, null_out_pointers);
    tcase_add_test(h, misc_functions);
    tcase_add_test(h, mem_alloc);
    suite_add_tcase(s, h);

    TCase *init = tcase_create("init");
    tcase_set_timeout(init, 60);
    tcase_add_test(init, init_oob_args);
    tcase_add_test(init, init_from_env);
    tcase_add_test(init, own_timeout_and_names);
    tcase_add_test(init, identity_cohortrun_before_torchrun);
    tcase_add_loop_test(init, bad_setting_fails_creation, 0, NBAD);
    suite_add_tcase(s, init);

    TCase *one = tcase_create("one rank");
    tcase_set_timeout(one, 60);
    tcase_add_test(one, dtype_op_root);
    tcase_add_test(one, null_buffers);
    tcase_add_test(one, count_overflow);
    tcase_add_test(one, count_past_memory);
    tcase_add_test(one, overlap_one_rank);
    tcase_add_test(one, aborted_comm);
    tcase_add_test(one, busy_comm);
    tcase_add_test(one, split_one_rank);
    suite_add_tcase(s, one);

    TCase *two = tcase_create("two ranks");
    tcase_set_timeout(two, 2 * PAIR_DEADLINE_S + 30);
    tcase_add_loop_test(two, pair_args, 0, 2);
    tcase_add_loop_test(two, pair_huge_counts, 0, 2);
    tcase_add_loop_test(two, pair_abort, 0, 2);
    tcase_add_loop_test(two, pair_busy, 0, 2);
    tcase_add_test(two, pair_oob_failure);
    tcase_add_test(two, pair_own_timeout);
    suite_add_tcase(s, two);
    return s;
}

int main(void)
{
    setenv("COHORT_DEBUG", "NONE", 1);   /* the refusals tested here need not be logged too */
    setenv("COHORT_CONF", "/dev/null", 1);   /* no cohort.conf of the current directory */
    SRunner *sr = srunner_create(api_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed != 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
