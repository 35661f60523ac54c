/* SPDX-License-Identifier: BSD-3-Clause */
/* The public collectives: argument checks (from core/desc.c's descriptor table) and dispatch. */
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE   /* mincore */
#endif
#include "cohort/cohort.h"
#include "core/coll/coll.h"
#include "core/comm.h"
#include "core/desc.h"
#include "core/engine.h"
#include "core/jobctl.h"
#include "core/log.h"
#include "core/p2p.h"
#include "core/reduce.h"
#include "core/timeline.h"
#include "core/timeutil.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

const char *cohort_version(void) { return COHORT_VERSION_STRING; }

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

static const char *inplace_form(cohort_coll_t coll)
{
    switch (coll) {
    case COHORT_COLL_ALLGATHER: return "sendbuf == recvbuf + rank * sendcount elements";
    case COHORT_COLL_REDUCE_SCATTER: return "recvbuf == sendbuf + rank * recvcount elements";
    case COHORT_COLL_GATHER: return "sendbuf == recvbuf + root * count elements, at the root";
    case COHORT_COLL_SCATTER: return "recvbuf == sendbuf + root * count elements, at the root";
    default: return "sendbuf == recvbuf";
    }
}

/* The buffer checks shared by every collective: sbytes of sendbuf are read and rbytes of
 * recvbuf written (0: that side is not used here); inplace_ok: the two are the documented
 * in-place form. */
static cohort_status_t check_buffers(const cohort_comm_t *comm, const cohort_coll_args_t *a,
                                     const char *fn, size_t sbytes, size_t rbytes,
                                     int inplace_ok, const char *form)
{
    const char *rname = a->coll == COHORT_COLL_BROADCAST ? "buf" : "recvbuf";
    if (sbytes && !a->sendbuf)
        return cohort_error(COHORT_ERR_INVALID_ARG, "%s on rank %d: sendbuf is NULL with count "
                            "%zu (%zu bytes to send)", fn, comm->rank, a->count, sbytes);
    if (rbytes && !a->recvbuf)
        return cohort_error(COHORT_ERR_INVALID_ARG, "%s on rank %d: %s is NULL with count %zu "
                            "(%zu bytes to receive)%s", fn, comm->rank, rname, a->count, rbytes,
                            cohort_coll_desc(a->coll)->recv_root ? " on the root" : "");
    int sbad = sbytes && !fits(a->sendbuf, sbytes);
    if (sbad || (rbytes && !fits(a->recvbuf, rbytes)))
        return cohort_error(COHORT_ERR_INVALID_ARG, "%s: %s %p + %zu bytes (count %zu) runs "
                            "past the end of the address space; is count right?", fn,
                            sbad ? "sendbuf" : rname,
                            sbad ? a->sendbuf : (const void *)a->recvbuf,
                            sbad ? sbytes : rbytes, a->count);
    int send_short = sbytes && !mapped_end(a->sendbuf, sbytes);
    if (send_short || (rbytes && !mapped_end(a->recvbuf, rbytes)))
        return cohort_error(COHORT_ERR_INVALID_ARG, "%s on rank %d: count %zu (%s, %zu bytes) is "
                            "more than %s %p holds: its last byte would lie in no memory of this "
                            "process; is count right?", fn, comm->rank, a->count,
                            cohort_dtype_name(a->dtype), send_short ? sbytes : rbytes,
                            send_short ? "sendbuf" : rname,
                            send_short ? a->sendbuf : (const void *)a->recvbuf);
    if (sbytes && rbytes && !inplace_ok && overlap(a->sendbuf, sbytes, a->recvbuf, rbytes))
        return cohort_error(COHORT_ERR_INVALID_ARG, "%s on rank %d: sendbuf %p (%zu bytes) and "
                            "recvbuf %p (%zu bytes) overlap%s; %s%s", fn, comm->rank, a->sendbuf,
                            sbytes, a->recvbuf, rbytes, form ? " partially" : "",
                            form ? "in place is exactly " : "this collective has no in-place "
                            "form: the buffers must not overlap", form ? form : "");
    return COHORT_SUCCESS;
}

/* The end of the last non-empty block (displs[i] + counts[i], in elements) over n blocks, into
 * *end; 0 when it overflows. *sum receives the sum of the counts (0 too on overflow). */
static int v_extent(const size_t *counts, const size_t *displs, int n, size_t *end, size_t *sum)
{
    *end = *sum = 0;
    for (int i = 0; i < n; i++) {
        size_t e;
        if (__builtin_add_overflow(*sum, counts[i], sum)) return 0;
        if (!counts[i]) continue;
        if (__builtin_add_overflow(displs[i], counts[i], &e)) return 0;
        if (e > *end) *end = e;
    }
    return 1;
}

/* allgatherv and alltoallv: the arrays, their extents, the buffers. Sets count (allgatherv: the
 * sum of recvcounts) and vsig. */
static cohort_status_t check_v(const cohort_comm_t *comm, cohort_coll_args_t *a, const char *fn)
{
    int n = comm->nranks, ag = a->coll == COHORT_COLL_ALLGATHERV;
    if (!a->rcounts || !a->rdispls || (!ag && (!a->scounts || !a->sdispls)))
        return cohort_error(COHORT_ERR_INVALID_ARG, "%s on rank %d: %s is NULL; it must hold "
                            "one entry per rank (%d)", fn, comm->rank,
                            !a->rcounts ? "recvcounts" : !a->rdispls ? (ag ? "displs" : "rdispls")
                            : !a->scounts ? "sendcounts" : "sdispls", n);
    size_t rend, rsum, send = 0, ssum = 0;
    int rok = v_extent(a->rcounts, a->rdispls, n, &rend, &rsum);
    int sok = ag || v_extent(a->scounts, a->sdispls, n, &send, &ssum);
    size_t rbytes = 0, sbytes = 0;
    if (!rok || !sok || __builtin_mul_overflow(rend, a->esize, &rbytes) ||
        __builtin_mul_overflow(ag ? a->rcounts[comm->rank] : send, a->esize, &sbytes) ||
        rbytes > (size_t)PTRDIFF_MAX || sbytes > (size_t)PTRDIFF_MAX)
        return cohort_error(COHORT_ERR_INVALID_ARG, "%s on rank %d: the %s counts and "
                            "displacements reach past any buffer (a sum or displacement + count "
                            "overflows, or is more than PTRDIFF_MAX bytes of %s); are they "
                            "elements, not bytes?", fn, comm->rank,
                            !sok || (!ag && send * a->esize / a->esize != send) ? "send"
                                                                                : "receive",
                            cohort_dtype_name(a->dtype));
    if (ag) {
        if (a->count != a->rcounts[comm->rank])
            return cohort_error(COHORT_ERR_INVALID_ARG, "%s on rank %d: sendcount is %zu but "
                                "recvcounts[%d] is %zu; every rank's recvcounts[r] must be what "
                                "rank r sends", fn, comm->rank, a->count, comm->rank,
                                a->rcounts[comm->rank]);
        a->count = rsum;
        uint64_t h = 0x84222325cbf29ce4ull;
        for (int i = 0; i < n; i++) {
            h = (h ^ (uint64_t)a->rcounts[i]) * 0x100000001b3ull;
            h ^= h >> 29;
        }
        a->vsig = h | 1;   /* never 0, the other collectives' value */
        const char *own = a->recvbuf ? (const char *)a->recvbuf + a->rdispls[comm->rank] *
                                       a->esize : NULL;
        return check_buffers(comm, a, fn, sbytes, rbytes, (const char *)a->sendbuf == own,
                             "sendbuf == recvbuf + displs[rank] elements");
    }
    a->count = 0;
    return check_buffers(comm, a, fn, sbytes, rbytes, 0, NULL);
}

/* Checks the arguments (comm itself is checked by the caller); changes nothing on comm, so a
 * non-blocking call runs it when it is issued. */
static cohort_status_t validate(cohort_comm_t *comm, cohort_coll_args_t *a, const char *fn)
{
    if (atomic_load(&comm->aborted))
        return cohort_error(COHORT_ERR_ABORTED, "%s on rank %d: the communicator was aborted",
                            fn, comm->rank);
    const cohort_coll_desc_t *d = cohort_coll_desc(a->coll);
    if (a->coll != COHORT_COLL_BARRIER) {
        a->esize = cohort_dtype_size(a->dtype);
        if (!a->esize)
            return cohort_error(COHORT_ERR_INVALID_ARG, "%s: dtype %d is not a cohort_dtype_t "
                                "(COHORT_INT8 .. COHORT_FLOAT64)", fn, (int)a->dtype);
    }
    if (d->reduces && (unsigned)a->op >= COHORT_OP_COUNT)
        return cohort_error(COHORT_ERR_INVALID_ARG, "%s: op %d is not a cohort_op_t (COHORT_SUM "
                            ".. COHORT_AVG)", fn, (int)a->op);
    /* compression is the communicator's setting when the call is issued */
    if (a->coll == COHORT_COLL_ALLREDUCE && a->dtype == COHORT_FLOAT32 &&
        (a->op == COHORT_SUM || a->op == COHORT_AVG))
        a->wire = comm->compress;
    if (d->rooted && (a->root < 0 || a->root >= comm->nranks))
        return cohort_error(COHORT_ERR_INVALID_ARG, "%s: root %d is not a rank of this "
                            "communicator (size %d)", fn, a->root, comm->nranks);
    if (d->v) return check_v(comm, a, fn);
    if (a->coll == COHORT_OP_SEND || a->coll == COHORT_OP_RECV) {
        if (a->peer < 0 || a->peer >= comm->nranks || a->peer == comm->rank)
            return cohort_error(COHORT_ERR_INVALID_ARG, "%s on rank %d: peer %d is %s", fn,
                                comm->rank, a->peer, a->peer == comm->rank
                                ? "this rank itself (copy locally instead)"
                                : "not a rank of this communicator");
        if (a->tag < 0)
            return cohort_error(COHORT_ERR_INVALID_ARG, "%s on rank %d: tag %d is negative "
                                "(tags are >= 0)", fn, comm->rank, a->tag);
    }
    int at_root = !d->rooted || comm->rank == a->root;
    /* what is not used here is never touched (cohort.h) */
    if (d->recv_root && !at_root) a->recvbuf = NULL;
    if (d->send_root && !at_root) a->sendbuf = NULL;
    size_t blocks = d->send_n || d->recv_n ? (size_t)comm->nranks : 1;
    size_t bytes = 0, total = 0;
    if (__builtin_mul_overflow(a->count, a->esize, &bytes) ||
        __builtin_mul_overflow(bytes, blocks, &total))
        return cohort_error(COHORT_ERR_INVALID_ARG, "%s: count %zu x %zu bytes x %zu blocks "
                            "overflows size_t", fn, a->count, a->esize, blocks);
    if (total > (size_t)PTRDIFF_MAX)
        return cohort_error(COHORT_ERR_INVALID_ARG, "%s: count %zu x %zu bytes x %zu blocks is "
                            "%zu bytes, more than any buffer can hold", fn, a->count, a->esize,
                            blocks, total);
    if (!a->count || a->coll == COHORT_COLL_BARRIER) return COHORT_SUCCESS;
    int need_send = d->send && (!d->send_root || at_root);
    int need_recv = d->recv && (!d->recv_root || at_root);
    size_t sbytes = need_send ? (d->send_n ? total : bytes) : 0;
    size_t rbytes = need_recv ? (d->recv_n ? total : bytes) : 0;
    const char *rslot = a->recvbuf ? (const char *)a->recvbuf + (size_t)comm->rank * bytes : NULL;
    const char *sslot = a->sendbuf ? (const char *)a->sendbuf + (size_t)comm->rank * bytes : NULL;
    int inplace = d->inplace == IP_SEND_IN_RECV ? (const char *)a->sendbuf == rslot
                  : d->inplace == IP_RECV_IN_SEND ? (const char *)a->recvbuf == sslot
                  : a->sendbuf == a->recvbuf;
    return check_buffers(comm, a, fn, sbytes, rbytes, inplace, inplace_form(a->coll));
}

static cohort_status_t run(cohort_comm_t *comm, cohort_coll_args_t *a, const char *fn);

/* cohort_coll_args_t's run_sub (core/coll/coll.h). */
static cohort_status_t run_sub(cohort_comm_t *comm, cohort_comm_t *sub, cohort_coll_args_t *a,
                               const char *phase)
{
    uint64_t t0 = cohort_coll_now(comm);
    cohort_status_t st = run(sub, a, cohort_coll_name(a->coll));
    if (t0) cohort_coll_phase(comm, phase, t0);
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

/* Starts a validated collective on comm, held by the caller: bumps the sequence number, sets
 * tag and description, and fails what cannot end (the communicator aborted or broken since the
 * call was issued, the job failing). */
static cohort_status_t begin(cohort_comm_t *comm, cohort_coll_args_t *a, const char *fn)
{
    if (atomic_load(&comm->aborted))
        return cohort_error(COHORT_ERR_ABORTED, "%s on rank %d: the communicator was aborted",
                            fn, comm->rank);
    if (comm->broken)
        return cohort_error(comm->broken, "%s on rank %d: the communicator failed earlier and "
                            "cannot be used (destroy it): %s", fn, comm->rank, comm->broken_msg);
    comm->seq++;
    a->run_sub = run_sub;
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

/* One rank: the result is the input (AVG of one value is the value). */
static cohort_status_t single_rank(const cohort_coll_args_t *a)
{
    size_t es = a->esize, bytes = a->count * es;
    switch (a->coll) {
    case COHORT_COLL_ALLREDUCE: case COHORT_COLL_REDUCE: case COHORT_COLL_ALLGATHER:
    case COHORT_COLL_REDUCE_SCATTER: case COHORT_COLL_ALLTOALL: case COHORT_COLL_GATHER:
    case COHORT_COLL_SCATTER:
        if (a->recvbuf && a->sendbuf != a->recvbuf)
            memmove(a->recvbuf, a->sendbuf, bytes);
        break;
    case COHORT_COLL_ALLGATHERV:
        if ((const char *)a->sendbuf != (char *)a->recvbuf + a->rdispls[0] * es)
            memmove((char *)a->recvbuf + a->rdispls[0] * es, a->sendbuf, a->rcounts[0] * es);
        break;
    case COHORT_COLL_ALLTOALLV:
        if (a->scounts[0] != a->rcounts[0])
            return cohort_error(COHORT_ERR_MISMATCH, "alltoallv on rank 0 (of 1): sendcounts[0] "
                                "is %zu but recvcounts[0] is %zu", a->scounts[0], a->rcounts[0]);
        if (a->scounts[0])
            memmove((char *)a->recvbuf + a->rdispls[0] * es,
                    (const char *)a->sendbuf + a->sdispls[0] * es, a->scounts[0] * es);
        break;
    default:
        break;
    }
    return COHORT_SUCCESS;
}

static cohort_status_t dispatch(cohort_comm_t *comm, cohort_coll_args_t *a)
{
    /* alltoallv: count is 0 (no rank knows the others' counts); it always runs */
    if (a->coll != COHORT_COLL_BARRIER && a->coll != COHORT_COLL_ALLTOALLV && a->count == 0) {
        atomic_store_explicit(&comm->last_algo, "none", memory_order_relaxed);
        return COHORT_SUCCESS;
    }
    if (comm->nranks == 1) {
        atomic_store_explicit(&comm->last_algo, "local", memory_order_relaxed);
        return single_rank(a);
    }
    cohort_status_t st;
    const char *tp = cohort_coll_transport_name(comm, a);
    if (tp) {
        atomic_store_explicit(&comm->last_algo, tp, memory_order_relaxed);
        st = cohort_coll_transport(comm, a);
    } else {
        const cohort_algo_t *algo;
        if ((st = cohort_coll_select(comm, a, &algo))) return st;
        atomic_store_explicit(&comm->last_algo, algo->name, memory_order_relaxed);
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

/* The operation in progress on the timeline's operations track (core/timeline.h). */
static void timeline_op(cohort_comm_t *comm, const cohort_coll_args_t *a, uint64_t t0,
                        cohort_status_t st)
{
    char desc[512], name[96], args[1024];
    cohort_timeline_escape(desc, sizeof desc, cohort_comm_desc(comm));
    int n = comm->nranks;
    const char *tp = n > 1 ? cohort_comm_peer_transport(comm, (comm->rank + 1) % n) : NULL;
    if (a->coll == COHORT_OP_SEND || a->coll == COHORT_OP_RECV) {
        snprintf(name, sizeof name, "%s rank %d", a->coll == COHORT_OP_SEND ? "send to"
                 : "receive from", a->peer);
        tp = cohort_comm_peer_transport(comm, a->peer);
    } else {
        snprintf(name, sizeof name, "%s%s #%llu", a->fused > 1 ? "fused " : "",
                 a->negotiation ? "fusion negotiation" : cohort_coll_name(a->coll),
                 (unsigned long long)comm->seq);
    }
    int len = snprintf(args, sizeof args, "\"call\":\"%s\",\"bytes\":%zu,\"algorithm\":\"%s\","
                       "\"transport\":\"%s\",\"status\":\"%s\"", desc, a->count * a->esize,
                       a->coll >= COHORT_COLL_COUNT ? "p2p" : atomic_load_explicit(&comm->last_algo, memory_order_relaxed),
                       tp ? tp : "none", cohort_strerror(st));
    if (a->fused && len > 0 && (size_t)len < sizeof args)
        len += snprintf(args + len, sizeof args - (size_t)len, ",\"fused_requests\":%d,"
                        "\"first_request\":%llu,\"last_request\":%llu", a->fused,
                        (unsigned long long)a->fused_first, (unsigned long long)a->fused_last);
    if (a->name && len > 0 && (size_t)len < sizeof args) {
        char esc[2 * COHORT_NAME_MAX];
        cohort_timeline_escape(esc, sizeof esc, a->name);
        snprintf(args + len, sizeof args - (size_t)len, ",\"name\":\"%s\"", esc);
    }
    cohort_timeline_event(comm, COHORT_TL_OPS, name, t0, cohort_timeline_now(), args);
}

/* A validated collective on comm, held (or owned alone) by the caller: what the request engine
 * runs for a non-blocking call (core/engine.h). */
static cohort_status_t execute(cohort_comm_t *comm, cohort_coll_args_t *a, const char *fn)
{
    uint64_t t0 = comm->tl_track > 0 ? cohort_timeline_now() : 0;   /* cohort_timeline_on */
    cohort_status_t st = begin(comm, a, fn);
    if (st) return st;
    st = dispatch(comm, a);
    if (t0) timeline_op(comm, a, t0, st);
    comm->cur = NULL;   /* a lives on the caller's stack or in its request */
    return st;
}

static cohort_status_t run_held(cohort_comm_t *comm, cohort_coll_args_t *a, const char *fn)
{
    cohort_status_t st = validate(comm, a, fn);
    return st ? st : execute(comm, a, fn);
}

/* Point-to-point messages of the application (core/engine.h): posted in queue order, the ones
 * queued meanwhile taken and posted while waiting, each completed as it finishes; no sequence
 * number (other ranks do not take part). COHORT_TIMEOUT bounds a stall, abort ends the wait. */
#define P2P_MAX 1024
static void run_p2p(cohort_engine_p2p_io_t *io)
{
    cohort_comm_t *comm = io->comm;
    cohort_coll_args_t *as[P2P_MAX];   /* about 60 KiB of the running thread's stack */
    cohort_preq_t rq[P2P_MAX];
    char done[P2P_MAX];
    memset(done, 0, sizeof done);
    int n = 0, posted = 0, finished = 0;
    cohort_status_t st = COHORT_SUCCESS;
    if (atomic_load(&comm->aborted))
        st = cohort_error(COHORT_ERR_ABORTED, "rank %d: a message on an aborted communicator",
                          comm->rank);
    else if (comm->broken)
        st = cohort_error(comm->broken, "rank %d: a message on a communicator that failed "
                          "earlier and cannot be used (destroy it): %s", comm->rank,
                          comm->broken_msg);
    uint64_t t0 = cohort_timeline_on(comm) ? cohort_timeline_now() : 0;
    cohort_pace_t pace = { 0 };
    comm->fail_peer = -1;
    while (!st) {
        int progressed = 0;
        /* take what was queued behind (the first call takes the head itself) */
        int k = n < P2P_MAX ? io->more(io, as + n, P2P_MAX - n) : 0;
        n += k;
        for (; posted < n && !st; posted++) {
            const cohort_coll_args_t *a = as[posted];
            comm->cur = a;
            st = cohort_p2p_post_user(comm, a->peer, a->coll == COHORT_OP_SEND
                                      ? (void *)(uintptr_t)a->sendbuf : a->recvbuf,
                                      a->count * a->esize, a->coll == COHORT_OP_SEND, a->tag,
                                      &rq[posted]);
            if (st) comm->fail_peer = a->peer;
            progressed = 1;
        }
        for (int i = 0; i < posted && !st; i++) {
            if (done[i]) continue;
            comm->cur = as[i];
            if ((st = cohort_p2p_test(comm, &rq[i]))) break;
            if (!rq[i].done) continue;
            done[i] = 1;
            finished++;
            progressed = 1;
            if (t0) timeline_op(comm, as[i], t0, COHORT_SUCCESS);
            io->done(io, i, COHORT_SUCCESS);
        }
        if (st) break;
        if (finished == posted) {
            /* all done: anything queued behind them meanwhile? */
            k = n < P2P_MAX ? io->more(io, as + n, P2P_MAX - n) : 0;
            if (!k) break;
            n += k;
            continue;
        }
        if (atomic_load(&comm->aborted)) {
            st = cohort_error(COHORT_ERR_ABORTED, "rank %d: %s interrupted: the communicator "
                              "was aborted", comm->rank, cohort_comm_desc(comm));
            break;
        }
        st = cohort_p2p_pace(comm, &pace, progressed, 1);
        for (int i = 0; i < posted; i++)
            if (!done[i]) {
                comm->cur = as[i];   /* what a stall or a timeout names */
                comm->fail_peer = as[i]->peer;
                break;
            }
        if (st == COHORT_ERR_TIMEOUT && !pace.job_failed)
            st = cohort_error(COHORT_ERR_TIMEOUT, "rank %d: %s stalled for %g s: the peer did "
                              "not %s it. Does it make the matching call, in the same order "
                              "relative to the collectives? %s sets the limit",
                              comm->rank, cohort_comm_desc(comm), comm->timeout_s,
                              comm->cur->coll == COHORT_OP_SEND ? "receive" : "send",
                              cohort_comm_timeout_source(comm));
        if (pace.stall_warn_due) {
            pace.stall_warn_due = 0;
            cohort_jobctl_stalled(comm, (double)(cohort_now_ns() - pace.stalled_since) * 1e-9,
                                  cohort_comm_desc(comm));
        }
    }
    if (st == COHORT_ERR_MISMATCH)
        cohort_error_prefix("rank %d: a message did not match its receive (a transport writes "
                            "the tag of cohort_send/cohort_recv as 2^63 + tag, "
                            "9223372036854775808 + tag)", comm->rank);
    if (st) {
        if (st != COHORT_ERR_ABORTED) st = cohort_jobctl_failure(comm, st, comm->fail_peer);
        comm->broken = st;
        snprintf(comm->broken_msg, sizeof comm->broken_msg, "%s", cohort_last_error());
        /* everything taken and not done fails with it (the communicator is broken) */
        n += io->more(io, as + n, P2P_MAX - n);
        for (int i = 0; i < n; i++)
            if (!done[i]) {
                if (t0 && i < posted) timeline_op(comm, as[i], t0, st);
                io->done(io, i, st);
            }
    }
    comm->cur = NULL;
}

/* The blocking forms of cohort_send/cohort_recv when nothing is queued: one message, this
 * thread (the engine's io, with no queue behind it). */
typedef struct p2p_one {
    cohort_coll_args_t *a;
    int taken;
    cohort_status_t st;
} p2p_one_t;

static int one_more(cohort_engine_p2p_io_t *io, cohort_coll_args_t **as, int max)
{
    p2p_one_t *o = io->ctx;
    if (o->taken || max < 1) return 0;
    o->taken = 1;
    as[0] = o->a;
    return 1;
}

static void one_done(cohort_engine_p2p_io_t *io, int i, cohort_status_t st)
{
    (void)i;
    ((p2p_one_t *)io->ctx)->st = st;
}

/* The name cohort_comm_name_next gave the call being issued (it is used once). */
static void take_name(cohort_comm_t *comm, cohort_coll_args_t *a, char name[COHORT_NAME_MAX])
{
    memcpy(name, comm->next_name, COHORT_NAME_MAX);
    comm->next_name[0] = '\0';
    a->name = name;
}

/* A blocking call: ordered after the non-blocking calls still outstanding on comm; inside a
 * group, held until cohort_group_end (and returns at once). */
static cohort_status_t run(cohort_comm_t *comm, cohort_coll_args_t *a, const char *fn)
{
    cohort_status_t st = cohort_comm_check(comm, fn);
    if (st) return st;
    char name[COHORT_NAME_MAX];
    if (comm->next_name[0]) take_name(comm, a, name);
    if (comm->engine && cohort_engine_in_group(comm)) {   /* one test when never used */
        cohort_request_t *req;
        if ((st = validate(comm, a, fn))) return st;
        return cohort_engine_submit(comm, a, fn, execute, run_p2p, COHORT_ENGINE_IN_GROUP, &req);
    }
    if (comm->engine && cohort_engine_busy(comm)) {
        /* non-blocking calls are outstanding: this one joins the queue behind them and is waited
         * for, so that the engine can post it while earlier messages wait (a blocking send
         * after an irecv must not wait for that receive) */
        cohort_request_t *req;
        if ((st = validate(comm, a, fn))) return st;
        st = cohort_engine_submit(comm, a, fn, execute, run_p2p, COHORT_ENGINE_JOINED, &req);
        return st ? st : cohort_wait(req);
    }
    if ((st = cohort_comm_acquire(comm, fn))) return st;
    if (a->coll == COHORT_OP_SEND || a->coll == COHORT_OP_RECV) {
        if (!(st = validate(comm, a, fn))) {
            p2p_one_t one = { a, 0, COHORT_SUCCESS };
            cohort_engine_p2p_io_t io = { comm, one_more, one_done, &one };
            run_p2p(&io);
            st = one.st;
        }
    } else {
        st = run_held(comm, a, fn);
    }
    cohort_comm_release(comm);
    return st;
}

/* A non-blocking call: checked now, queued for the engine. */
static cohort_status_t submit(cohort_comm_t *comm, cohort_coll_args_t *a, const char *fn,
                              cohort_request_t **req)
{
    if (req) *req = NULL;
    cohort_status_t st = cohort_comm_check(comm, fn);
    if (st) return st;
    if (!req) return cohort_error(COHORT_ERR_INVALID_ARG, "%s: req is NULL", fn);
    if ((st = validate(comm, a, fn))) return st;
    char name[COHORT_NAME_MAX];
    if (comm->next_name[0]) take_name(comm, a, name);
    return cohort_engine_submit(comm, a, fn, execute, run_p2p, 0, req);
}

cohort_status_t cohort_comm_allgather_held(cohort_comm_t *comm, const void *sendbuf,
                                           void *recvbuf, size_t sendcount, cohort_dtype_t dtype)
{
    cohort_coll_args_t a = { .coll = COHORT_COLL_ALLGATHER, .sendbuf = sendbuf, .recvbuf = recvbuf,
                             .count = sendcount, .dtype = dtype, .op = COHORT_SUM };
    cohort_status_t st = cohort_comm_check(comm, "cohort_allgather");
    return st ? st : run_held(comm, &a, "cohort_allgather");
}

cohort_status_t cohort_allreduce(cohort_comm_t *comm, const void *sendbuf, void *recvbuf,
                                 size_t count, cohort_dtype_t dtype, cohort_op_t op)
{
    cohort_coll_args_t a = { .coll = COHORT_COLL_ALLREDUCE, .sendbuf = sendbuf, .recvbuf = recvbuf,
                             .count = count, .dtype = dtype, .op = op };
    return run(comm, &a, "cohort_allreduce");
}

cohort_status_t cohort_broadcast(cohort_comm_t *comm, void *buf, size_t count,
                                 cohort_dtype_t dtype, int root)
{
    cohort_coll_args_t a = { .coll = COHORT_COLL_BROADCAST, .sendbuf = buf, .recvbuf = buf,
                             .count = count, .dtype = dtype, .op = COHORT_SUM, .root = root };
    return run(comm, &a, "cohort_broadcast");
}

cohort_status_t cohort_reduce(cohort_comm_t *comm, const void *sendbuf, void *recvbuf,
                              size_t count, cohort_dtype_t dtype, cohort_op_t op, int root)
{
    cohort_coll_args_t a = { .coll = COHORT_COLL_REDUCE, .sendbuf = sendbuf, .recvbuf = recvbuf,
                             .count = count, .dtype = dtype, .op = op, .root = root };
    return run(comm, &a, "cohort_reduce");
}

cohort_status_t cohort_allgather(cohort_comm_t *comm, const void *sendbuf, void *recvbuf,
                                 size_t sendcount, cohort_dtype_t dtype)
{
    cohort_coll_args_t a = { .coll = COHORT_COLL_ALLGATHER, .sendbuf = sendbuf, .recvbuf = recvbuf,
                             .count = sendcount, .dtype = dtype, .op = COHORT_SUM };
    return run(comm, &a, "cohort_allgather");
}

cohort_status_t cohort_reduce_scatter(cohort_comm_t *comm, const void *sendbuf, void *recvbuf,
                                      size_t recvcount, cohort_dtype_t dtype, cohort_op_t op)
{
    cohort_coll_args_t a = { .coll = COHORT_COLL_REDUCE_SCATTER, .sendbuf = sendbuf,
                             .recvbuf = recvbuf, .count = recvcount, .dtype = dtype, .op = op };
    return run(comm, &a, "cohort_reduce_scatter");
}

cohort_status_t cohort_alltoall(cohort_comm_t *comm, const void *sendbuf, void *recvbuf,
                                size_t count, cohort_dtype_t dtype)
{
    cohort_coll_args_t a = { .coll = COHORT_COLL_ALLTOALL, .sendbuf = sendbuf, .recvbuf = recvbuf,
                             .count = count, .dtype = dtype, .op = COHORT_SUM };
    return run(comm, &a, "cohort_alltoall");
}

cohort_status_t cohort_barrier(cohort_comm_t *comm)
{
    cohort_coll_args_t a = { .coll = COHORT_COLL_BARRIER, .sendbuf = NULL, .recvbuf = NULL,
                             .count = 0, .dtype = COHORT_UINT8, .op = COHORT_SUM };
    return run(comm, &a, "cohort_barrier");
}

cohort_status_t cohort_allgatherv(cohort_comm_t *comm, const void *sendbuf, size_t sendcount,
                                  void *recvbuf, const size_t *recvcounts, const size_t *displs,
                                  cohort_dtype_t dtype)
{
    cohort_coll_args_t a = { .coll = COHORT_COLL_ALLGATHERV, .sendbuf = sendbuf, .recvbuf = recvbuf,
                             .count = sendcount, .dtype = dtype, .op = COHORT_SUM,
                             .rcounts = recvcounts, .rdispls = displs };
    return run(comm, &a, "cohort_allgatherv");
}

cohort_status_t cohort_alltoallv(cohort_comm_t *comm, const void *sendbuf,
                                 const size_t *sendcounts, const size_t *sdispls, void *recvbuf,
                                 const size_t *recvcounts, const size_t *rdispls,
                                 cohort_dtype_t dtype)
{
    cohort_coll_args_t a = { .coll = COHORT_COLL_ALLTOALLV, .sendbuf = sendbuf, .recvbuf = recvbuf,
                             .count = 0, .dtype = dtype, .op = COHORT_SUM, .scounts = sendcounts,
                             .sdispls = sdispls, .rcounts = recvcounts, .rdispls = rdispls };
    return run(comm, &a, "cohort_alltoallv");
}

cohort_status_t cohort_gather(cohort_comm_t *comm, const void *sendbuf, void *recvbuf,
                              size_t count, cohort_dtype_t dtype, int root)
{
    cohort_coll_args_t a = { .coll = COHORT_COLL_GATHER, .sendbuf = sendbuf, .recvbuf = recvbuf,
                             .count = count, .dtype = dtype, .op = COHORT_SUM, .root = root };
    return run(comm, &a, "cohort_gather");
}

cohort_status_t cohort_scatter(cohort_comm_t *comm, const void *sendbuf, void *recvbuf,
                               size_t count, cohort_dtype_t dtype, int root)
{
    cohort_coll_args_t a = { .coll = COHORT_COLL_SCATTER, .sendbuf = sendbuf, .recvbuf = recvbuf,
                             .count = count, .dtype = dtype, .op = COHORT_SUM, .root = root };
    return run(comm, &a, "cohort_scatter");
}

/* ---- the non-blocking forms: the same arguments, checked now, run by the engine ---- */

cohort_status_t cohort_iallreduce(cohort_comm_t *comm, const void *sendbuf, void *recvbuf,
                                  size_t count, cohort_dtype_t dtype, cohort_op_t op,
                                  cohort_request_t **req)
{
    cohort_coll_args_t a = { .coll = COHORT_COLL_ALLREDUCE, .sendbuf = sendbuf, .recvbuf = recvbuf,
                             .count = count, .dtype = dtype, .op = op };
    return submit(comm, &a, "cohort_iallreduce", req);
}

cohort_status_t cohort_ibroadcast(cohort_comm_t *comm, void *buf, size_t count,
                                  cohort_dtype_t dtype, int root, cohort_request_t **req)
{
    cohort_coll_args_t a = { .coll = COHORT_COLL_BROADCAST, .sendbuf = buf, .recvbuf = buf,
                             .count = count, .dtype = dtype, .op = COHORT_SUM, .root = root };
    return submit(comm, &a, "cohort_ibroadcast", req);
}

cohort_status_t cohort_ireduce(cohort_comm_t *comm, const void *sendbuf, void *recvbuf,
                               size_t count, cohort_dtype_t dtype, cohort_op_t op, int root,
                               cohort_request_t **req)
{
    cohort_coll_args_t a = { .coll = COHORT_COLL_REDUCE, .sendbuf = sendbuf, .recvbuf = recvbuf,
                             .count = count, .dtype = dtype, .op = op, .root = root };
    return submit(comm, &a, "cohort_ireduce", req);
}

cohort_status_t cohort_iallgather(cohort_comm_t *comm, const void *sendbuf, void *recvbuf,
                                  size_t sendcount, cohort_dtype_t dtype, cohort_request_t **req)
{
    cohort_coll_args_t a = { .coll = COHORT_COLL_ALLGATHER, .sendbuf = sendbuf, .recvbuf = recvbuf,
                             .count = sendcount, .dtype = dtype, .op = COHORT_SUM };
    return submit(comm, &a, "cohort_iallgather", req);
}

cohort_status_t cohort_ireduce_scatter(cohort_comm_t *comm, const void *sendbuf, void *recvbuf,
                                       size_t recvcount, cohort_dtype_t dtype, cohort_op_t op,
                                       cohort_request_t **req)
{
    cohort_coll_args_t a = { .coll = COHORT_COLL_REDUCE_SCATTER, .sendbuf = sendbuf,
                             .recvbuf = recvbuf, .count = recvcount, .dtype = dtype, .op = op };
    return submit(comm, &a, "cohort_ireduce_scatter", req);
}

cohort_status_t cohort_ialltoall(cohort_comm_t *comm, const void *sendbuf, void *recvbuf,
                                 size_t count, cohort_dtype_t dtype, cohort_request_t **req)
{
    cohort_coll_args_t a = { .coll = COHORT_COLL_ALLTOALL, .sendbuf = sendbuf, .recvbuf = recvbuf,
                             .count = count, .dtype = dtype, .op = COHORT_SUM };
    return submit(comm, &a, "cohort_ialltoall", req);
}

cohort_status_t cohort_ibarrier(cohort_comm_t *comm, cohort_request_t **req)
{
    cohort_coll_args_t a = { .coll = COHORT_COLL_BARRIER, .sendbuf = NULL, .recvbuf = NULL,
                             .count = 0, .dtype = COHORT_UINT8, .op = COHORT_SUM };
    return submit(comm, &a, "cohort_ibarrier", req);
}

cohort_status_t cohort_iallgatherv(cohort_comm_t *comm, const void *sendbuf, size_t sendcount,
                                   void *recvbuf, const size_t *recvcounts, const size_t *displs,
                                   cohort_dtype_t dtype, cohort_request_t **req)
{
    cohort_coll_args_t a = { .coll = COHORT_COLL_ALLGATHERV, .sendbuf = sendbuf, .recvbuf = recvbuf,
                             .count = sendcount, .dtype = dtype, .op = COHORT_SUM,
                             .rcounts = recvcounts, .rdispls = displs };
    return submit(comm, &a, "cohort_iallgatherv", req);
}

cohort_status_t cohort_ialltoallv(cohort_comm_t *comm, const void *sendbuf,
                                  const size_t *sendcounts, const size_t *sdispls, void *recvbuf,
                                  const size_t *recvcounts, const size_t *rdispls,
                                  cohort_dtype_t dtype, cohort_request_t **req)
{
    cohort_coll_args_t a = { .coll = COHORT_COLL_ALLTOALLV, .sendbuf = sendbuf, .recvbuf = recvbuf,
                             .count = 0, .dtype = dtype, .op = COHORT_SUM, .scounts = sendcounts,
                             .sdispls = sdispls, .rcounts = recvcounts, .rdispls = rdispls };
    return submit(comm, &a, "cohort_ialltoallv", req);
}

cohort_status_t cohort_igather(cohort_comm_t *comm, const void *sendbuf, void *recvbuf,
                               size_t count, cohort_dtype_t dtype, int root,
                               cohort_request_t **req)
{
    cohort_coll_args_t a = { .coll = COHORT_COLL_GATHER, .sendbuf = sendbuf, .recvbuf = recvbuf,
                             .count = count, .dtype = dtype, .op = COHORT_SUM, .root = root };
    return submit(comm, &a, "cohort_igather", req);
}

cohort_status_t cohort_iscatter(cohort_comm_t *comm, const void *sendbuf, void *recvbuf,
                                size_t count, cohort_dtype_t dtype, int root,
                                cohort_request_t **req)
{
    cohort_coll_args_t a = { .coll = COHORT_COLL_SCATTER, .sendbuf = sendbuf, .recvbuf = recvbuf,
                             .count = count, .dtype = dtype, .op = COHORT_SUM, .root = root };
    return submit(comm, &a, "cohort_iscatter", req);
}

cohort_status_t cohort_group_start(cohort_comm_t *comm)
{
    cohort_status_t st = cohort_comm_check(comm, "cohort_group_start");
    return st ? st : cohort_engine_group_start(comm);
}

cohort_status_t cohort_group_end(cohort_comm_t *comm)
{
    cohort_status_t st = cohort_comm_check(comm, "cohort_group_end");
    return st ? st : cohort_engine_group_end(comm);
}

cohort_status_t cohort_comm_fusion_stats(const cohort_comm_t *comm, uint64_t *requests,
                                         uint64_t *batches)
{
    cohort_status_t st = cohort_comm_check(comm, "cohort_comm_fusion_stats");
    if (st) return st;
    if (!requests || !batches)
        return cohort_error(COHORT_ERR_INVALID_ARG, "cohort_comm_fusion_stats: %s is NULL",
                            !requests ? "requests" : "batches");
    cohort_engine_stats((cohort_comm_t *)comm, requests, batches);
    return COHORT_SUCCESS;
}

/* ---- point to point ---- */

cohort_status_t cohort_send(cohort_comm_t *comm, const void *buf, size_t count,
                            cohort_dtype_t dtype, int peer, int tag)
{
    cohort_coll_args_t a = { .coll = COHORT_OP_SEND, .sendbuf = buf, .count = count,
                             .dtype = dtype, .peer = peer, .tag = tag };
    return run(comm, &a, "cohort_send");
}

cohort_status_t cohort_recv(cohort_comm_t *comm, void *buf, size_t count, cohort_dtype_t dtype,
                            int peer, int tag)
{
    cohort_coll_args_t a = { .coll = COHORT_OP_RECV, .recvbuf = buf, .count = count,
                             .dtype = dtype, .peer = peer, .tag = tag };
    return run(comm, &a, "cohort_recv");
}

cohort_status_t cohort_isend(cohort_comm_t *comm, const void *buf, size_t count,
                             cohort_dtype_t dtype, int peer, int tag, cohort_request_t **req)
{
    cohort_coll_args_t a = { .coll = COHORT_OP_SEND, .sendbuf = buf, .count = count,
                             .dtype = dtype, .peer = peer, .tag = tag };
    return submit(comm, &a, "cohort_isend", req);
}

cohort_status_t cohort_irecv(cohort_comm_t *comm, void *buf, size_t count, cohort_dtype_t dtype,
                             int peer, int tag, cohort_request_t **req)
{
    cohort_coll_args_t a = { .coll = COHORT_OP_RECV, .recvbuf = buf, .count = count,
                             .dtype = dtype, .peer = peer, .tag = tag };
    return submit(comm, &a, "cohort_irecv", req);
}

cohort_status_t cohort_comm_set_compression(cohort_comm_t *comm, cohort_dtype_t wire)
{
    cohort_status_t st = cohort_comm_check(comm, "cohort_comm_set_compression");
    if (st) return st;
    if (wire != COHORT_FLOAT16 && wire != COHORT_BFLOAT16 && wire != COHORT_FLOAT32)
        return cohort_error(COHORT_ERR_INVALID_ARG, "cohort_comm_set_compression: wire %d (%s) "
                            "is not COHORT_FLOAT16, COHORT_BFLOAT16 or COHORT_FLOAT32 (none)",
                            (int)wire, cohort_dtype_name(wire));
    comm->compress = wire == COHORT_FLOAT32 ? 0 : (int)wire;
    return COHORT_SUCCESS;
}

cohort_status_t cohort_comm_name_next(cohort_comm_t *comm, const char *name)
{
    cohort_status_t st = cohort_comm_check(comm, "cohort_comm_name_next");
    if (st) return st;
    if (!name) {
        comm->next_name[0] = '\0';
        return COHORT_SUCCESS;
    }
    size_t len = strnlen(name, COHORT_NAME_MAX);
    if (len == COHORT_NAME_MAX)
        return cohort_error(COHORT_ERR_INVALID_ARG, "cohort_comm_name_next: the name \"%.40s...\" "
                            "is %d bytes or longer; names hold at most %d", name,
                            COHORT_NAME_MAX, COHORT_NAME_MAX - 1);
    memcpy(comm->next_name, name, len + 1);
    return COHORT_SUCCESS;
}

cohort_status_t cohort_comm_set_timeout(cohort_comm_t *comm, double timeout_s)
{
    const char *fn = "cohort_comm_set_timeout";
    cohort_status_t st = cohort_comm_check(comm, fn);
    if (st) return st;
    if (!(timeout_s >= 0.1 && timeout_s <= 1e7))
        return cohort_error(COHORT_ERR_INVALID_ARG, "%s: timeout_s %g is not a number of "
                            "seconds in [0.1, 1e7]", fn, timeout_s);
    /* the waits of a running operation read it: only between operations */
    if (comm->engine && cohort_engine_busy(comm))
        return cohort_error(COHORT_ERR_INVALID_ARG, "%s on rank %d: non-blocking operations "
                            "are outstanding; set the timeout before issuing them or after "
                            "waiting for them", fn, comm->rank);
    if ((st = cohort_comm_acquire(comm, fn))) return st;
    cohort_comm_t *all[3] = { comm, comm->hier_node, comm->hier_cross };
    for (int i = 0; i < 3; i++)
        if (all[i]) {
            all[i]->timeout_s = timeout_s;
            all[i]->timeout_given = 1;
        }
    cohort_comm_release(comm);
    return COHORT_SUCCESS;
}
