/* SPDX-License-Identifier: BSD-3-Clause */
/* The pipelined ring reduce step (see ring_step.h). Receives are posted first, PIPE_DEPTH chunks
 * ahead into scratch slots, so the neighbour's sends land while earlier chunks are reduced; each
 * slot is reposted for a later chunk as soon as it has been reduced. Sends go SEND_AHEAD chunks
 * ahead: chunk k + SEND_AHEAD is posted once chunk k's send is done (no deadlock: our neighbour
 * receives chunk k once it has reduced chunk k - PIPE_DEPTH, which needs only sends already
 * posted, by us to it, and around the ring at least one rank is never ahead of its neighbour). */
#include <string.h>

#include "core/coll/ring_step.h"
#include "core/log.h"
#include "core/reduce.h"

#define PIPE_DEPTH COHORT_RING_PIPE_DEPTH
#define SEND_AHEAD COHORT_RING_SEND_AHEAD

static size_t nchunks(size_t count, size_t ce) { return count ? (count + ce - 1) / ce : 0; }

/* Elements in chunk k of a count-element block. */
static size_t chunk_elems(size_t count, size_t ce, size_t k)
{
    return count - k * ce < ce ? count - k * ce : ce;
}

cohort_status_t cohort_ring_init(cohort_ring_ctx_t *c, cohort_comm_t *comm,
                                 const cohort_coll_args_t *a, size_t max_elems)
{
    memset(c, 0, sizeof(*c));
    c->comm = comm;
    c->a = a;
    c->ce = cohort_coll_chunk_size(comm) / a->esize;
    if (c->ce == 0)
        c->ce = 1;
    if (c->ce > max_elems && max_elems > 0)
        c->ce = max_elems;   /* never ask for more scratch than one block */
    c->slots = cohort_coll_scratch(comm, 0, (size_t)PIPE_DEPTH * c->ce * a->esize);
    return c->slots ? COHORT_SUCCESS : COHORT_ERR_NO_MEMORY;
}

void cohort_ring_fini(cohort_ring_ctx_t *c) { (void)c; }

/* Posts sends up to chunk limit (exclusive), each once the send SEND_AHEAD before it is done. */
static cohort_status_t post_sends(cohort_ring_ctx_t *c, int dst, const char *sbuf,
                                  size_t scount, size_t *posted, size_t limit)
{
    size_t es = c->a->esize, ce = c->ce, ns = nchunks(scount, ce);
    cohort_status_t st;
    if (limit > ns)
        limit = ns;
    for (; *posted < limit; (*posted)++) {
        cohort_preq_t *q = &c->sq[*posted % SEND_AHEAD];
        if (*posted >= SEND_AHEAD && (st = cohort_p2p_waitall(c->comm, q, 1)))
            return st;
        st = cohort_p2p_isend(c->comm, dst, sbuf + *posted * ce * es,
                              chunk_elems(scount, ce, *posted) * es, q);
        if (st)
            return st;
    }
    return COHORT_SUCCESS;
}

cohort_status_t cohort_ring_reduce_step(cohort_ring_ctx_t *c, int dst, const char *sbuf,
                                        size_t scount, int src, char *out, const char *own,
                                        size_t rcount)
{
    const cohort_coll_args_t *a = c->a;
    size_t es = a->esize, ce = c->ce;
    size_t ns = nchunks(scount, ce), nr = nchunks(rcount, ce);
    cohort_preq_t rq[PIPE_DEPTH];
    size_t posted = 0, sposted = 0;
    cohort_status_t st;

    /* Receives first, so the matching sends of our neighbour land in place. */
    for (; posted < nr && posted < PIPE_DEPTH; posted++) {
        st = cohort_p2p_irecv(c->comm, src, c->slots + (posted % PIPE_DEPTH) * ce * es,
                              chunk_elems(rcount, ce, posted) * es, &rq[posted % PIPE_DEPTH]);
        if (st)
            return st;
    }
    if ((st = post_sends(c, dst, sbuf, scount, &sposted, SEND_AHEAD)))
        return st;
    for (size_t k = 0; k < nr; k++) {
        size_t slot = k % PIPE_DEPTH;
        char *tmp = c->slots + slot * ce * es;
        if ((st = cohort_p2p_waitall(c->comm, &rq[slot], 1)))
            return st;
        cohort_reduce_local3(out + k * ce * es, own + k * ce * es, tmp,
                             chunk_elems(rcount, ce, k), a->dtype, a->op);
        if (posted < nr) {   /* the slot is free again: receive a later chunk into it */
            st = cohort_p2p_irecv(c->comm, src, tmp, chunk_elems(rcount, ce, posted) * es,
                                  &rq[slot]);
            if (st)
                return st;
            posted++;
        }
        /* keep SEND_AHEAD sends in flight: the send of chunk k has been received by now or
         * soon (the neighbour works at our pace), so waiting for it costs little */
        if ((st = post_sends(c, dst, sbuf, scount, &sposted, k + 1 + SEND_AHEAD)) !=
            COHORT_SUCCESS)
            return st;
    }
    if ((st = post_sends(c, dst, sbuf, scount, &sposted, ns)))
        return st;
    /* the sends still in flight: the last min(ns, SEND_AHEAD) */
    size_t first = ns > SEND_AHEAD ? ns - SEND_AHEAD : 0;
    for (size_t k = first; k < ns; k++)
        if ((st = cohort_p2p_waitall(c->comm, &c->sq[k % SEND_AHEAD], 1)))
            return st;
    return COHORT_SUCCESS;
}
