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
#include <stdint.h>

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

/* The next batch's size, carried by a batch (docs/design.md, "Groups and tensor fusion"): a
 * batch's allreduce holds, after its data, cohort_fuse_carry_n elements of its own dtype, the
 * same allreduce reduces them, and they say the largest level that every rank's count reaches
 * (element i: "my count >= level i", as a value the op keeps exact: 1/0 for SUM, AVG, PROD and
 * MIN, 0/1 for MAX). */
#define COHORT_FUSE_CARRY_MAX 16

/* How many elements a batch of data_bytes carries: 16 (levels 1, 2, 3, 4, 6, 8, 12, ..., 192,
 * 256), or 6 (1, 2, 4, 16, 64, 256) up to 64 bytes of data: an 8-byte float32 allreduce then
 * still fits the 32 bytes that shm's small lane keeps in one cache line, and coarser levels
 * only cost fusion where bursts are large. */
int cohort_fuse_carry_n(size_t data_bytes);

/* 1 where a batch of this dtype, op and wire format (cohort_coll_args_t's; wire 0: not
 * compressed) at nranks can carry the count: for SUM and AVG the sum of nranks ones must be
 * exact at every step (int8 127 ranks, fp16 2048, bf16 256, ...). */
int cohort_fuse_can_carry(int dtype, int op, int wire, int nranks);
/* Writes this rank's count as n (cohort_fuse_carry_n) elements at dst. */
void cohort_fuse_carry_put(void *dst, int n, int dtype, int op, uint64_t count);
/* The agreed count from the n reduced elements at src: the largest level every rank reached
 * (0 where some rank's count was 0). */
uint64_t cohort_fuse_carry_get(const void *src, int n, int dtype, int op, int nranks);

#endif
