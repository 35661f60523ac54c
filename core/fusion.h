/* SPDX-License-Identifier: BSD-3-Clause */
/* Tensor fusion planning (pure functions; core/engine.c runs the plans).
 *
 * Allreduces of the same dtype and op whose sizes add up to at most the threshold
 * (COHORT_FUSION_THRESHOLD) run as one allreduce over a fusion buffer: one copy in and out per
 * byte, one collective's latency instead of many. The plan depends only on the sequence of
 * operations, never on timing, so ranks that issued the same sequence plan the same fusion.
 *
 * Look-ahead (Horovod's): an allreduce of another dtype or op between two fusable ones does not
 * end the first one's batch (fp16 gradients broken by fp32 ones still fuse, per dtype). Any
 * other collective does: a batch never moves across a broadcast, a barrier, ... */
#ifndef COHORT_CORE_FUSION_H
#define COHORT_CORE_FUSION_H

#include <stddef.h>

typedef struct cohort_fuse_item {
    int fusable;       /* an allreduce that may join a batch (0: any other operation) */
    int dtype, op;
    size_t bytes;      /* fusable: its size; at most the threshold */
} cohort_fuse_item_t;

/* A group's plan: leader[i] is the index of the first item of the batch item i joins (i itself
 * for the first of a batch and for every item that is not fusable). Batches are in order of
 * their leaders; a batch runs at its leader's place. */
void cohort_fuse_plan(const cohort_fuse_item_t *items, int n, size_t threshold, int *leader);

/* For a queue whose head (items[0]) is fusable: how many items from the head on may join the
 * head's batch (the head counts), looking no further than the first non-fusable item.
 * The queue on another rank may be shorter or longer; ranks agree on the minimum. */
int cohort_fuse_window(const cohort_fuse_item_t *items, int n, size_t threshold);

#endif
