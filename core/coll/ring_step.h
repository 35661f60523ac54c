/* SPDX-License-Identifier: BSD-3-Clause */
/* The pipelined reduce step shared by the ring algorithms (allreduce's reduce-scatter phase and
 * reduce_scatter): send a block to the right neighbour in chunks while receiving the left
 * neighbour's block in chunks and reducing each chunk as soon as it arrives. */
#ifndef COHORT_CORE_COLL_RING_STEP_H
#define COHORT_CORE_COLL_RING_STEP_H

#include <stddef.h>
#include "core/coll/coll.h"
#include "core/p2p.h"

#define COHORT_RING_PIPE_DEPTH 4   /* receives posted ahead within a step */
#define COHORT_RING_SEND_AHEAD 16  /* sends in flight within a step: a chunk's send is posted
                                      once the one this many before it has completed, so the
                                      requests (ours and the transport's) do not grow with the
                                      message */

typedef struct cohort_ring_ctx {
    cohort_comm_t *comm;
    const cohort_coll_args_t *a;
    size_t ce;                  /* elements per chunk */
    char *slots;                /* COHORT_RING_PIPE_DEPTH chunks of scratch (slot 0) */
    cohort_preq_t sq[COHORT_RING_SEND_AHEAD];   /* send k in sq[k % COHORT_RING_SEND_AHEAD] */
} cohort_ring_ctx_t;

/* Chunks of cohort_coll_chunk_size() bytes (whole elements), never more than max_elems (the
 * largest block a step moves). Uses scratch slot 0. */
cohort_status_t cohort_ring_init(cohort_ring_ctx_t *c, cohort_comm_t *comm,
                                 const cohort_coll_args_t *a, size_t max_elems);
void cohort_ring_fini(cohort_ring_ctx_t *c);

/* Sends scount elements of sbuf to dst; receives rcount elements from src and finishes each chunk
 * with out[i] = own[i] OP received[i]. Returns when the step's sends and receives are done. */
cohort_status_t cohort_ring_reduce_step(cohort_ring_ctx_t *c, int dst, const char *sbuf,
                                        size_t scount, int src, char *out, const char *own,
                                        size_t rcount);

#endif
