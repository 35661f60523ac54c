/* Ring reduce-scatter: n-1 steps over n blocks of recvcount elements; rank r ends with the
 * reduced block r.
 *
 * Step s = 0 .. n-2: send the partial result of block (r - s - 1) to r + 1 (at step 0 that is
 * our own data, straight from sendbuf), receive the partial result of block (r - s - 2) from
 * r - 1 and combine it with our own data of that block. At the last step the block received is
 * block r itself and its result goes to recvbuf.
 *
 * Inside a step a block travels in chunks of cohort_coll_chunk_size() bytes: PIPE_DEPTH receives
 * are posted ahead into scratch slot 0 and each chunk is reduced as soon as it arrives.
 * Partial results live in two block-sized accumulators (scratch slot 1) taking turns: the one
 * filled at step s is sent at step s+1 while the other is filled.
 *
 * sendbuf is only read. recvbuf is written only at the last step, from data already read:
 *  - in place, recvbuf == sendbuf + r * recvcount: out == own block, which cohort_reduce_local3
 *    allows;
 *  - recvbuf == sendbuf (or any other overlap): the only sendbuf data still in use at the last
 *    step is our own block r and, when n == 2, the block being sent; if recvbuf overlaps the
 *    block being sent, the result goes to an accumulator and is copied after the send is done.
 * AVG: summed, then divided once in recvbuf.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/coll/coll.h"
#include "core/log.h"
#include "core/p2p.h"
#include "core/reduce.h"

#define PIPE_DEPTH 4
#define STACK_REQS 16

static size_t nchunks(size_t count, size_t ce) { return count ? (count + ce - 1) / ce : 0; }

static int overlaps(const void *a, const void *b, size_t len)
{
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return x < y + len && y < x + len;
}

typedef struct ring_ctx {
    cohort_comm_t *comm;
    const cohort_coll_args_t *a;
    size_t ce;                  /* elements per chunk */
    char *slots;                /* PIPE_DEPTH chunks of scratch */
    cohort_preq_t stack_reqs[STACK_REQS];
    cohort_preq_t *sreqs;       /* send requests of one step */
    size_t sreqs_cap;
} ring_ctx_t;

static cohort_status_t ensure_sreqs(ring_ctx_t *c, size_t n)
{
    if (n <= c->sreqs_cap)
        return COHORT_SUCCESS;
    cohort_preq_t *p = c->sreqs == c->stack_reqs ? NULL : c->sreqs;
    p = realloc(p, n * sizeof(*p));
    if (!p)
        return cohort_error(COHORT_ERR_NO_MEMORY,
                            "reduce_scatter ring: cannot allocate %zu send requests (%zu bytes); "
                            "raise COHORT_CHUNK_SIZE to use fewer, larger chunks",
                            n, n * sizeof(*p));
    c->sreqs = p;    /* earlier steps' requests are all complete: nothing to keep */
    c->sreqs_cap = n;
    return COHORT_SUCCESS;
}

/* One pipelined step: send count elements of sbuf to dst in chunks; receive count elements from
 * src in chunks and finish each with out[i] = own[i] OP received[i]. */
static cohort_status_t reduce_step(ring_ctx_t *c, int dst, const char *sbuf, int src, char *out,
                                   const char *own, size_t count)
{
    const cohort_coll_args_t *a = c->a;
    size_t es = a->esize, ce = c->ce;
    size_t m = nchunks(count, ce);
    cohort_preq_t rq[PIPE_DEPTH];
    size_t posted = 0;
    cohort_status_t st;

    if ((st = ensure_sreqs(c, m)) != COHORT_SUCCESS)
        return st;
    for (; posted < m && posted < PIPE_DEPTH; posted++) {
        size_t n = count - posted * ce < ce ? count - posted * ce : ce;
        st = cohort_p2p_irecv(c->comm, src, c->slots + (posted % PIPE_DEPTH) * ce * es, n * es,
                              &rq[posted % PIPE_DEPTH]);
        if (st != COHORT_SUCCESS)
            return st;
    }
    for (size_t k = 0; k < m; k++) {
        size_t n = count - k * ce < ce ? count - k * ce : ce;
        st = cohort_p2p_isend(c->comm, dst, sbuf + k * ce * es, n * es, &c->sreqs[k]);
        if (st != COHORT_SUCCESS)
            return st;
    }
    for (size_t k = 0; k < m; k++) {
        size_t slot = k % PIPE_DEPTH;
        size_t n = count - k * ce < ce ? count - k * ce : ce;
        char *tmp = c->slots + slot * ce * es;
        if ((st = cohort_p2p_waitall(c->comm, &rq[slot], 1)) != COHORT_SUCCESS)
            return st;
        cohort_reduce_local3(out + k * ce * es, own + k * ce * es, tmp, n, a->dtype, a->op);
        if (posted < m) {
            size_t pn = count - posted * ce < ce ? count - posted * ce : ce;
            st = cohort_p2p_irecv(c->comm, src, tmp, pn * es, &rq[slot]);
            if (st != COHORT_SUCCESS)
                return st;
            posted++;
        }
    }
    return m ? cohort_p2p_waitall(c->comm, c->sreqs, (int)m) : COHORT_SUCCESS;
}

cohort_status_t cohort_reduce_scatter_ring(cohort_comm_t *comm, const cohort_coll_args_t *a)
{
    int rank = cohort_comm_rank(comm), n = cohort_comm_size(comm);
    size_t es = a->esize, rc = a->count, bytes = rc * es;
    const char *sendbuf = a->sendbuf;
    char *recvbuf = a->recvbuf;
    cohort_status_t st = COHORT_SUCCESS;

    if (bytes == 0)
        return COHORT_SUCCESS;
    if (n == 1) {
        if (sendbuf != recvbuf)
            memmove(recvbuf, sendbuf, bytes);
        cohort_reduce_finish(recvbuf, rc, a->dtype, a->op, 1);
        return COHORT_SUCCESS;
    }

    ring_ctx_t c;
    memset(&c, 0, sizeof(c));
    c.comm = comm;
    c.a = a;
    c.ce = cohort_coll_chunk_size(comm) / es;
    if (c.ce == 0)
        c.ce = 1;
    if (c.ce > rc)
        c.ce = rc;
    c.sreqs = c.stack_reqs;
    c.sreqs_cap = STACK_REQS;
    c.slots = cohort_coll_scratch(comm, 0, (size_t)PIPE_DEPTH * c.ce * es);
    if (!c.slots)
        return COHORT_ERR_NO_MEMORY;

    /* The block sent at the last step: an accumulator when n > 2, our own data when n == 2. */
    int last_sblk = (rank + 1) % n;   /* (r - (n-2) - 1) mod n */
    int direct = n > 2 || !overlaps(recvbuf, sendbuf + (size_t)last_sblk * bytes, bytes);
    char *acc = NULL;
    if (n > 2 || !direct) {
        acc = cohort_coll_scratch(comm, 1, 2 * bytes);
        if (!acc)
            return COHORT_ERR_NO_MEMORY;
    }

    int right = (rank + 1) % n, left = (rank + n - 1) % n;
    for (int s = 0; s < n - 1; s++) {
        int sblk = ((rank - s - 1) % n + n) % n;
        int rblk = ((rank - s - 2) % n + n) % n;
        const char *src = s == 0 ? sendbuf + (size_t)sblk * bytes : acc + (size_t)((s - 1) % 2) * bytes;
        int last = s == n - 2;
        char *out = last && direct ? recvbuf : acc + (size_t)(s % 2) * bytes;
        st = reduce_step(&c, right, src, left, out, sendbuf + (size_t)rblk * bytes, rc);
        if (st != COHORT_SUCCESS)
            goto done;
        if (last && !direct)
            memcpy(recvbuf, out, bytes);   /* the step's sends are complete */
    }
    cohort_reduce_finish(recvbuf, rc, a->dtype, a->op, n);
done:
    if (c.sreqs != c.stack_reqs)
        free(c.sreqs);
    return st;
}
