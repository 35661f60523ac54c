/* SPDX-License-Identifier: BSD-3-Clause */
/* What a call is, in shape and in words (core/desc.h). */
#include "core/desc.h"
#include "core/comm.h"

#include <stdint.h>
#include <stdio.h>

static const cohort_coll_desc_t descs[COHORT_OP_KINDS] = {
    [COHORT_COLL_ALLREDUCE] = { .reduces = 1, .send = 1, .recv = 1, .inplace = IP_SAME },
    [COHORT_COLL_BROADCAST] = { .rooted = 1, .recv = 1, .inplace = IP_SAME },
    [COHORT_COLL_REDUCE] = { .reduces = 1, .rooted = 1, .send = 1, .recv = 1, .recv_root = 1,
                             .inplace = IP_SAME },
    [COHORT_COLL_ALLGATHER] = { .send = 1, .recv = 1, .recv_n = 1, .inplace = IP_SEND_IN_RECV },
    [COHORT_COLL_REDUCE_SCATTER] = { .reduces = 1, .send = 1, .recv = 1, .send_n = 1,
                                     .inplace = IP_RECV_IN_SEND },
    [COHORT_COLL_ALLTOALL] = { .send = 1, .recv = 1, .send_n = 1, .recv_n = 1,
                               .inplace = IP_SAME },
    [COHORT_COLL_BARRIER] = { 0 },
    [COHORT_COLL_ALLGATHERV] = { .send = 1, .recv = 1, .v = 1 },
    [COHORT_COLL_ALLTOALLV] = { .send = 1, .recv = 1, .v = 1 },
    [COHORT_COLL_GATHER] = { .rooted = 1, .send = 1, .recv = 1, .recv_root = 1, .recv_n = 1,
                             .inplace = IP_SEND_IN_RECV },
    [COHORT_COLL_SCATTER] = { .rooted = 1, .send = 1, .recv = 1, .send_root = 1, .send_n = 1,
                              .inplace = IP_RECV_IN_SEND },
    [COHORT_OP_SEND] = { .send = 1 },
    [COHORT_OP_RECV] = { .recv = 1 },
};

const cohort_coll_desc_t *cohort_coll_desc(int coll) { return &descs[coll]; }

static const char *const coll_names[COHORT_COLL_COUNT] = {
    [COHORT_COLL_ALLREDUCE] = "allreduce",
    [COHORT_COLL_BROADCAST] = "broadcast",
    [COHORT_COLL_REDUCE] = "reduce",
    [COHORT_COLL_ALLGATHER] = "allgather",
    [COHORT_COLL_REDUCE_SCATTER] = "reduce_scatter",
    [COHORT_COLL_ALLTOALL] = "alltoall",
    [COHORT_COLL_BARRIER] = "barrier",
    [COHORT_COLL_ALLGATHERV] = "allgatherv",
    [COHORT_COLL_ALLTOALLV] = "alltoallv",
    [COHORT_COLL_GATHER] = "gather",
    [COHORT_COLL_SCATTER] = "scatter",
};

const char *cohort_coll_name(cohort_coll_t coll)
{
    if ((int)coll < 0 || coll >= COHORT_COLL_COUNT)
        return "?";
    return coll_names[coll];
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
 * word-wise multiply-xorshift hash: on the path of every collective, so 7 multiplies rather
 * than a byte-wise loop). */
uint64_t cohort_coll_tag(uint64_t seq, const cohort_coll_args_t *a)
{
    uint64_t v[7] = { (uint64_t)a->coll, (uint64_t)a->count, (uint64_t)a->dtype,
                      (uint64_t)a->op, (uint64_t)(int64_t)a->root, a->vsig, (uint64_t)a->wire };
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 7; i++) {
        h = (h ^ v[i]) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
    }
    return (seq << 32) | (uint32_t)(h ^ (h >> 32));
}

const char *cohort_comm_desc(cohort_comm_t *comm)
{
    const cohort_coll_args_t *a = comm->cur;
    unsigned long long seq = (unsigned long long)comm->seq;
    if (!a) {
        snprintf(comm->desc, sizeof comm->desc, "communicator set-up");
        return comm->desc;
    }
    const cohort_coll_desc_t *d = &descs[a->coll];
    const char *name = a->coll < COHORT_COLL_COUNT ? cohort_coll_name(a->coll) : "";
    if (a->coll == COHORT_OP_SEND || a->coll == COHORT_OP_RECV)
        snprintf(comm->desc, sizeof comm->desc, "%s rank %d (tag %d, count %zu, %s)",
                 a->coll == COHORT_OP_SEND ? "send to" : "receive from", a->peer, a->tag,
                 a->count, cohort_dtype_name(a->dtype));
    else if (a->coll == COHORT_COLL_BARRIER)
        snprintf(comm->desc, sizeof comm->desc, "barrier #%llu", seq);
    else if (a->coll == COHORT_COLL_ALLTOALLV)
        snprintf(comm->desc, sizeof comm->desc, "%s #%llu (%s)", name, seq,
                 cohort_dtype_name(a->dtype));
    else if (a->coll == COHORT_COLL_ALLGATHERV)
        snprintf(comm->desc, sizeof comm->desc, "%s #%llu (total count %zu, %s)", name, seq,
                 a->count, cohort_dtype_name(a->dtype));
    else if (a->negotiation)
        snprintf(comm->desc, sizeof comm->desc, "allreduce #%llu (the ranks agreeing how many "
                 "queued allreduces to fuse)", seq);
    else if (a->fused > 1)
        /* the count is the members' (the elements that carry the next batch's size are the
         * engine's) */
        snprintf(comm->desc, sizeof comm->desc, "allreduce #%llu (count %zu, %s, %s: %d fused "
                 "requests, issued #%llu to #%llu on this rank)", seq, a->count - (size_t)a->carry,
                 cohort_dtype_name(a->dtype), cohort_op_name(a->op), a->fused,
                 (unsigned long long)a->fused_first, (unsigned long long)a->fused_last);
    else if (a->fused)
        snprintf(comm->desc, sizeof comm->desc, "allreduce #%llu (count %zu, %s, %s: request "
                 "#%llu on this rank)", seq, a->count - (size_t)a->carry,
                 cohort_dtype_name(a->dtype), cohort_op_name(a->op),
                 (unsigned long long)a->fused_first);
    else
        snprintf(comm->desc, sizeof comm->desc, "%s #%llu (count %zu, %s%s%s, root %d)", name,
                 seq, a->count, cohort_dtype_name(a->dtype), d->reduces ? ", " : "",
                 d->reduces ? cohort_op_name(a->op) : "", d->rooted ? a->root : -1);
    return comm->desc;
}
