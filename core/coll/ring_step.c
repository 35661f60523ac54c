/* The pipelined ring reduce step (see ring_step.h). Receives are posted first, PIPE_DEPTH chunks
 * ahead into scratch slots, so the neighbour's sends land while earlier chunks are reduced; each
 * slot is reposted for a later chunk as soon as it has been reduced. */
#include <stdlib.h>
#include <string.h>

#include "core/coll/ring_step.h"
#include "core/log.h"
#include "core/reduce.h"

#define PIPE_DEPTH COHORT_RING_PIPE_DEPTH

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
    c->sreqs = c->stack_reqs;
    c->sreqs_cap = COHORT_RING_STACK_REQS;
    c->slots = cohort_coll_scratch(comm, 0, (size_t)PIPE_DEPTH * c->ce * a->esize);
    return c->slots ? COHORT_SUCCESS : COHORT_ERR_NO_MEMORY;
}

void cohort_ring_fini(cohort_ring_ctx_t *c)
{
    if (c->sreqs != c->stack_reqs)
        free(c->sreqs);
    c->sreqs = c->stack_reqs;
}

static cohort_status_t ensure_sreqs(cohort_ring_ctx_t *c, size_t n)
{
    if (n <= c->sreqs_cap)
        return COHORT_SUCCESS;
    cohort_preq_t *p = c->sreqs == c->stack_reqs ? NULL : c->sreqs;
    p = realloc(p, n * sizeof(*p));
    if (!p)
        return cohort_error(COHORT_ERR_NO_MEMORY,
                            "%s ring: cannot allocate %zu send requests (%zu bytes); raise "
                            "COHORT_CHUNK_SIZE to use fewer, larger chunks",
                            cohort_coll_name(c->a->coll), n, n * sizeof(*p));
    c->sreqs = p;    /* earlier steps' requests are all complete: nothing to keep */
    c->sreqs_cap = n;
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
    size_t posted = 0;
    cohort_status_t st;

    if ((st = ensure_sreqs(c, ns)) != COHORT_SUCCESS)
        return st;
    /* Receives first, so the matching sends of our neighbour land in place. */
    for (; posted < nr && posted < PIPE_DEPTH; posted++) {
        st = cohort_p2p_irecv(c->comm, src, c->slots + (posted % PIPE_DEPTH) * ce * es,
                              chunk_elems(rcount, ce, posted) * es, &rq[posted % PIPE_DEPTH]);
        if (st != COHORT_SUCCESS)
            return st;
    }
    for (size_t k = 0; k < ns; k++) {
        st = cohort_p2p_isend(c->comm, dst, sbuf + k * ce * es, chunk_elems(scount, ce, k) * es,
                              &c->sreqs[k]);
        if (st != COHORT_SUCCESS)
            return st;
    }
    for (size_t k = 0; k < nr; k++) {
        size_t slot = k % PIPE_DEPTH;
        char *tmp = c->slots + slot * ce * es;
        if ((st = cohort_p2p_waitall(c->comm, &rq[slot], 1)) != COHORT_SUCCESS)
            return st;
        cohort_reduce_local3(out + k * ce * es, own + k * ce * es, tmp,
                             chunk_elems(rcount, ce, k), a->dtype, a->op);
        if (posted < nr) {   /* the slot is free again: receive a later chunk into it */
            st = cohort_p2p_irecv(c->comm, src, tmp, chunk_elems(rcount, ce, posted) * es,
                                  &rq[slot]);
            if (st != COHORT_SUCCESS)
                return st;
            posted++;
        }
    }
    return ns ? cohort_p2p_waitall(c->comm, c->sreqs, (int)ns) : COHORT_SUCCESS;
}
