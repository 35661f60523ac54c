/* The public collectives: argument checks, the per-collective tag, algorithm dispatch. */
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE   /* mincore */
#endif
#include "cohort/cohort.h"
#include "core/coll/coll.h"
#include "core/comm.h"
#include "core/jobctl.h"
#include "core/log.h"
#include "core/p2p.h"
#include "core/reduce.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

const char *cohort_version(void) { return "0.1.0"; }

size_t cohort_dtype_size(cohort_dtype_t dtype)
{
    switch (dtype) {
    case COHORT_INT8: case COHORT_UINT8: return 1;
    case COHORT_FLOAT16: case COHORT_BFLOAT16: return 2;
    case COHORT_INT32: case COHORT_UINT32: case COHORT_FLOAT32: return 4;
    case COHORT_INT64: case COHORT_UINT64: case COHORT_FLOAT64: return 8;
    }
    return 0;
}

const char *cohort_dtype_name(cohort_dtype_t dtype)
{
    static const char *names[] = { "int8", "uint8", "int32", "uint32", "int64", "uint64",
                                   "float16", "bfloat16", "float32", "float64" };
    return (unsigned)dtype < COHORT_DTYPE_COUNT ? names[dtype] : "?";
}

const char *cohort_op_name(cohort_op_t op)
{
    static const char *names[] = { "sum", "prod", "min", "max", "avg" };
    return (unsigned)op < COHORT_OP_COUNT ? names[op] : "?";
}

/* The tag: sequence number << 32 | a signature of the arguments every rank must agree on (a
 * word-wise multiply-xorshift hash: on the path of every collective, so 5 multiplies rather
 * than a byte-wise loop). */
uint64_t cohort_coll_tag(uint64_t seq, const cohort_coll_args_t *a)
{
    uint64_t v[5] = { (uint64_t)a->coll, (uint64_t)a->count, (uint64_t)a->dtype,
                      (uint64_t)a->op, (uint64_t)(int64_t)a->root };
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 5; i++) {
        h = (h ^ v[i]) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
    }
    return (seq << 32) | (uint32_t)(h ^ (h >> 32));
}

static int overlap(const void *a, size_t alen, const void *b, size_t blen)
{
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return alen && blen && x < y + blen && y < x + alen;
}

/* len bytes from p stay inside the address space (a count far too large for the buffer shows
 * here when nothing else can tell). */
static int fits(const void *p, size_t len)
{
    return len == 0 || (uintptr_t)p <= UINTPTR_MAX - (len - 1);
}

/* From this many bytes on, a buffer's last byte must lie in memory this process has mapped.
 * Only then: it costs one system call, next to a collective that moves at least this much. */
#define MAPPED_CHECK_BYTES ((size_t)64 << 20)

/* 1 when the last of len bytes from p is in a mapping of this process (or the buffer is smaller
 * than MAPPED_CHECK_BYTES). A count larger than any buffer the process holds (2^62 int8, or
 * SIZE_MAX / 2, still below PTRDIFF_MAX bytes) ends outside every mapping: without this check it
 * reached the transports, which read past the buffer (shm) or failed with EFAULT (tcp). mincore
 * fails with ENOMEM exactly when the page is not mapped (or lies beyond user space); any mapping,
 * resident or not, PROT_NONE included, passes, so no real buffer is refused. */
static int mapped_end(const void *p, size_t len)
{
    if (len < MAPPED_CHECK_BYTES) return 1;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t last = ((uintptr_t)p + (len - 1)) & ~(page - 1);
    unsigned char vec;
    return mincore((void *)last, 1, &vec) == 0 || errno != ENOMEM;
}

/* Checks the arguments (comm itself is checked and held by the caller), bumps the sequence
 * number and sets tag and description. */
static cohort_status_t begin(cohort_comm_t *comm, cohort_coll_args_t *a, const char *fn)
{
    if (atomic_load(&comm->aborted))
        return cohort_error(COHORT_ERR_ABORTED, "%s on rank %d: the communicator was aborted",
                            fn, comm->rank);
    if (comm->broken)
        return cohort_error(comm->broken, "%s on rank %d: the communicator failed earlier and "
                            "cannot be used (destroy it): %s", fn, comm->rank, comm->broken_msg);

    int reduces = a->coll == COHORT_COLL_ALLREDUCE || a->coll == COHORT_COLL_REDUCE ||
                  a->coll == COHORT_COLL_REDUCE_SCATTER;
    if (a->coll != COHORT_COLL_BARRIER) {
        a->esize = cohort_dtype_size(a->dtype);
        if (!a->esize)
            return cohort_error(COHORT_ERR_INVALID_ARG, "%s: dtype %d is not a cohort_dtype_t "
                                "(COHORT_INT8 .. COHORT_FLOAT64)", fn, (int)a->dtype);
    }
    if (reduces && (unsigned)a->op >= COHORT_OP_COUNT)
        return cohort_error(COHORT_ERR_INVALID_ARG, "%s: op %d is not a cohort_op_t (COHORT_SUM "
                            ".. COHORT_AVG)", fn, (int)a->op);
    if ((a->coll == COHORT_COLL_BROADCAST || a->coll == COHORT_COLL_REDUCE) &&
        (a->root < 0 || a->root >= comm->nranks))
        return cohort_error(COHORT_ERR_INVALID_ARG, "%s: root %d is not a rank of this "
                            "communicator (size %d)", fn, a->root, comm->nranks);
    if (a->coll == COHORT_COLL_REDUCE && comm->rank != a->root)
        a->recvbuf = NULL;   /* only used at the root (cohort.h): never touched elsewhere */
    size_t blocks = (a->coll == COHORT_COLL_ALLGATHER || a->coll == COHORT_COLL_REDUCE_SCATTER ||
                     a->coll == COHORT_COLL_ALLTOALL) ? (size_t)comm->nranks : 1;
    size_t bytes = 0, total = 0;
    if (__builtin_mul_overflow(a->count, a->esize, &bytes) ||
        __builtin_mul_overflow(bytes, blocks, &total))
        return cohort_error(COHORT_ERR_INVALID_ARG, "%s: count %zu x %zu bytes x %zu blocks "
                            "overflows size_t", fn, a->count, a->esize, blocks);
    if (total > (size_t)PTRDIFF_MAX)
        return cohort_error(COHORT_ERR_INVALID_ARG, "%s: count %zu x %zu bytes x %zu blocks is "
                            "%zu bytes, more than any buffer can hold", fn, a->count, a->esize,
                            blocks, total);
    if (a->count && a->coll != COHORT_COLL_BARRIER) {
        int need_send = a->coll != COHORT_COLL_BROADCAST;
        int need_recv = a->coll != COHORT_COLL_REDUCE || comm->rank == a->root;
        const char *rname = a->coll == COHORT_COLL_BROADCAST ? "buf" : "recvbuf";
        if (need_send && !a->sendbuf)
            return cohort_error(COHORT_ERR_INVALID_ARG, "%s: sendbuf is NULL with count %zu",
                                fn, a->count);
        if (need_recv && !a->recvbuf)
            return cohort_error(COHORT_ERR_INVALID_ARG, "%s: %s is NULL with count %zu%s", fn,
                                rname, a->count, a->coll == COHORT_COLL_REDUCE
                                ? " on the root" : "");
        size_t sbytes = a->coll == COHORT_COLL_REDUCE_SCATTER || a->coll == COHORT_COLL_ALLTOALL
                        ? total : bytes;
        size_t rbytes = a->coll == COHORT_COLL_ALLGATHER || a->coll == COHORT_COLL_ALLTOALL
                        ? total : bytes;
        if ((need_send && !fits(a->sendbuf, sbytes)) || (need_recv && !fits(a->recvbuf, rbytes)))
            return cohort_error(COHORT_ERR_INVALID_ARG, "%s: %s %p + %zu bytes (count %zu) runs "
                                "past the end of the address space; is count right?", fn,
                                need_send && !fits(a->sendbuf, sbytes) ? "sendbuf" : rname,
                                need_send && !fits(a->sendbuf, sbytes) ? a->sendbuf
                                                                       : (const void *)a->recvbuf,
                                need_send && !fits(a->sendbuf, sbytes) ? sbytes : rbytes,
                                a->count);
        int send_short = need_send && !mapped_end(a->sendbuf, sbytes);
        if (send_short || (need_recv && !mapped_end(a->recvbuf, rbytes)))
            return cohort_error(COHORT_ERR_INVALID_ARG, "%s on rank %d: count %zu (%s, %zu "
                                "bytes) is more than %s %p holds: its last byte would lie in no "
                                "memory of this process; is count right?", fn, comm->rank,
                                a->count, cohort_dtype_name(a->dtype),
                                send_short ? sbytes : rbytes, send_short ? "sendbuf" : rname,
                                send_short ? a->sendbuf : (const void *)a->recvbuf);
        /* In place is exactly the documented form (cohort.h); any other overlap is refused. */
        const char *rslot = a->recvbuf ? (const char *)a->recvbuf + (size_t)comm->rank * bytes
                            : NULL;
        const char *sslot = a->sendbuf ? (const char *)a->sendbuf + (size_t)comm->rank * bytes
                            : NULL;
        int inplace;
        const char *form;
        if (a->coll == COHORT_COLL_ALLGATHER) {
            inplace = (const char *)a->sendbuf == rslot;
            form = "sendbuf == recvbuf + rank * sendcount elements";
        } else if (a->coll == COHORT_COLL_REDUCE_SCATTER) {
            inplace = (const char *)a->recvbuf == sslot;
            form = "recvbuf == sendbuf + rank * recvcount elements";
        } else {
            inplace = a->sendbuf == a->recvbuf;
            form = "sendbuf == recvbuf";
        }
        if (need_send && need_recv && !inplace &&
            overlap(a->sendbuf, sbytes, a->recvbuf, rbytes))
            return cohort_error(COHORT_ERR_INVALID_ARG, "%s on rank %d: sendbuf %p (%zu bytes) "
                                "and recvbuf %p (%zu bytes) overlap partially; in place is "
                                "exactly %s, otherwise the buffers must not overlap", fn,
                                comm->rank, a->sendbuf, sbytes, a->recvbuf, rbytes, form);
    }
    comm->seq++;
    comm->tag = cohort_coll_tag(comm->seq, a);
    comm->cur = a;
    comm->fail_peer = -1;
    if (comm->world_of &&   /* do not start what cannot end */
        (cohort_jobctl_failures() != comm->jobctl_seen || cohort_jobctl_due())) {
        cohort_status_t st = cohort_jobctl_check(comm);
        if (st) {
            comm->broken = st;
            snprintf(comm->broken_msg, sizeof comm->broken_msg, "%s", cohort_last_error());
            comm->cur = NULL;
            return st;
        }
    }
    return COHORT_SUCCESS;
}

const char *cohort_comm_desc(cohort_comm_t *comm)
{
    const cohort_coll_args_t *a = comm->cur;
    if (!a) {
        snprintf(comm->desc, sizeof comm->desc, "communicator set-up");
    } else if (a->coll == COHORT_COLL_BARRIER) {
        snprintf(comm->desc, sizeof comm->desc, "barrier #%llu", (unsigned long long)comm->seq);
    } else {
        int reduces = a->coll == COHORT_COLL_ALLREDUCE || a->coll == COHORT_COLL_REDUCE ||
                      a->coll == COHORT_COLL_REDUCE_SCATTER;
        snprintf(comm->desc, sizeof comm->desc, "%s #%llu (count %zu, %s%s%s, root %d)",
                 cohort_coll_name(a->coll), (unsigned long long)comm->seq, a->count,
                 cohort_dtype_name(a->dtype), reduces ? ", " : "",
                 reduces ? cohort_op_name(a->op) : "",
                 a->coll == COHORT_COLL_BROADCAST || a->coll == COHORT_COLL_REDUCE ? a->root : -1);
    }
    return comm->desc;
}

/* One rank: the result is the input (AVG of one value is the value). */
static void single_rank(const cohort_coll_args_t *a, int rank)
{
    size_t bytes = a->count * a->esize;
    switch (a->coll) {
    case COHORT_COLL_ALLREDUCE: case COHORT_COLL_REDUCE: case COHORT_COLL_ALLGATHER:
    case COHORT_COLL_REDUCE_SCATTER: case COHORT_COLL_ALLTOALL:
        if (a->recvbuf && a->sendbuf != a->recvbuf)
            memmove(a->recvbuf, a->sendbuf, bytes);
        break;
    default:
        break;
    }
    (void)rank;
}

static cohort_status_t dispatch(cohort_comm_t *comm, cohort_coll_args_t *a)
{
    if (a->coll != COHORT_COLL_BARRIER && a->count == 0) {
        comm->last_algo = "none";
        return COHORT_SUCCESS;
    }
    if (comm->nranks == 1) {
        single_rank(a, comm->rank);
        comm->last_algo = "local";
        return COHORT_SUCCESS;
    }
    cohort_status_t st;
    const char *tp = cohort_coll_transport_name(comm, a);
    if (tp) {
        comm->last_algo = tp;
        st = cohort_coll_transport(comm, a);
    } else {
        const cohort_algo_t *algo;
        if ((st = cohort_coll_select(comm, a, &algo))) return st;
        comm->last_algo = algo->name;
        st = algo->fn(comm, a);
    }
    if (!st) st = cohort_p2p_coll_done(comm);
    if (st && st != COHORT_ERR_ABORTED) st = cohort_jobctl_failure(comm, st, comm->fail_peer);
    if (st) {
        comm->broken = st;
        snprintf(comm->broken_msg, sizeof comm->broken_msg, "%s", cohort_last_error());
    }
    return st;
}

/* comm is checked and held (or owned alone) by the caller. */
static cohort_status_t run_held(cohort_comm_t *comm, cohort_coll_args_t *a, const char *fn)
{
    cohort_status_t st = begin(comm, a, fn);
    if (st) return st;
    st = dispatch(comm, a);
    comm->cur = NULL;   /* a lives on this call's stack */
    return st;
}

static cohort_status_t run(cohort_comm_t *comm, cohort_coll_args_t *a, const char *fn)
{
    cohort_status_t st = cohort_comm_check(comm, fn);
    if (!st) st = cohort_comm_acquire(comm, fn);
    if (st) return st;
    st = run_held(comm, a, fn);
    cohort_comm_release(comm);
    return st;
}

cohort_status_t cohort_comm_allgather_held(cohort_comm_t *comm, const void *sendbuf,
                                           void *recvbuf, size_t sendcount, cohort_dtype_t dtype)
{
    cohort_coll_args_t a = { COHORT_COLL_ALLGATHER, sendbuf, recvbuf, sendcount, dtype,
                             COHORT_SUM, 0, 0 };
    cohort_status_t st = cohort_comm_check(comm, "cohort_allgather");
    return st ? st : run_held(comm, &a, "cohort_allgather");
}

cohort_status_t cohort_coll_run(cohort_comm_t *comm, cohort_comm_t *sub, cohort_coll_args_t *a,
                                const char *phase)
{
    cohort_status_t st = run(sub, a, cohort_coll_name(a->coll));
    if (st == COHORT_SUCCESS) return st;
    /* Name the parent's ranks: the sub-communicator's own numbers would mislead. */
    char who[160] = "";
    int used = 0, me = comm->rank;
    for (int r = 0; r < comm->nranks && used < (int)sizeof who - 16; r++) {
        int in = sub == comm->hier_node ? comm->node_of[r] == comm->node_of[me]
                                        : comm->local_of[r] == comm->local_of[me];
        if (in) used += snprintf(who + used, sizeof who - (size_t)used, "%s%d", used ? "," : "", r);
    }
    cohort_error_prefix("rank %d: hierarchical %s, %s among ranks %s (below, ranks are numbered "
                        "within that group)", me,
                        comm->cur ? cohort_coll_name(comm->cur->coll) : "?", phase, who);
    return st;
}

cohort_status_t cohort_allreduce(cohort_comm_t *comm, const void *sendbuf, void *recvbuf,
                                 size_t count, cohort_dtype_t dtype, cohort_op_t op)
{
    cohort_coll_args_t a = { COHORT_COLL_ALLREDUCE, sendbuf, recvbuf, count, dtype, op, 0, 0 };
    return run(comm, &a, "cohort_allreduce");
}

cohort_status_t cohort_broadcast(cohort_comm_t *comm, void *buf, size_t count,
                                 cohort_dtype_t dtype, int root)
{
    cohort_coll_args_t a = { COHORT_COLL_BROADCAST, buf, buf, count, dtype, COHORT_SUM, root, 0 };
    return run(comm, &a, "cohort_broadcast");
}

cohort_status_t cohort_reduce(cohort_comm_t *comm, const void *sendbuf, void *recvbuf,
                              size_t count, cohort_dtype_t dtype, cohort_op_t op, int root)
{
    cohort_coll_args_t a = { COHORT_COLL_REDUCE, sendbuf, recvbuf, count, dtype, op, root, 0 };
    return run(comm, &a, "cohort_reduce");
}

cohort_status_t cohort_allgather(cohort_comm_t *comm, const void *sendbuf, void *recvbuf,
                                 size_t sendcount, cohort_dtype_t dtype)
{
    cohort_coll_args_t a = { COHORT_COLL_ALLGATHER, sendbuf, recvbuf, sendcount, dtype,
                             COHORT_SUM, 0, 0 };
    return run(comm, &a, "cohort_allgather");
}

cohort_status_t cohort_reduce_scatter(cohort_comm_t *comm, const void *sendbuf, void *recvbuf,
                                      size_t recvcount, cohort_dtype_t dtype, cohort_op_t op)
{
    cohort_coll_args_t a = { COHORT_COLL_REDUCE_SCATTER, sendbuf, recvbuf, recvcount, dtype, op,
                             0, 0 };
    return run(comm, &a, "cohort_reduce_scatter");
}

cohort_status_t cohort_alltoall(cohort_comm_t *comm, const void *sendbuf, void *recvbuf,
                                size_t count, cohort_dtype_t dtype)
{
    cohort_coll_args_t a = { COHORT_COLL_ALLTOALL, sendbuf, recvbuf, count, dtype, COHORT_SUM, 0,
                             0 };
    return run(comm, &a, "cohort_alltoall");
}

cohort_status_t cohort_barrier(cohort_comm_t *comm)
{
    cohort_coll_args_t a = { COHORT_COLL_BARRIER, NULL, NULL, 0, COHORT_UINT8, COHORT_SUM, 0, 0 };
    return run(comm, &a, "cohort_barrier");
}
