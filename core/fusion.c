/* SPDX-License-Identifier: BSD-3-Clause */
/* Tensor fusion planning (core/fusion.h). */
#include "core/fusion.h"
#include "core/reduce.h"

#include <limits.h>
#include <string.h>

#define KEYS 64   /* dtype x op combinations with an open batch at once (10 x 5 exist) */

void cohort_fuse_plan(const cohort_fuse_item_t *items, int n, size_t threshold, int *leader)
{
    struct { int dtype, op, lead; size_t bytes; } open[KEYS];
    int nopen = 0;
    for (int i = 0; i < n; i++) {
        leader[i] = i;
        if (!items[i].fusable) {
            nopen = 0;   /* no batch moves across another kind of operation */
            continue;
        }
        int k = 0;
        while (k < nopen && (open[k].dtype != items[i].dtype || open[k].op != items[i].op)) k++;
        if (k < nopen && open[k].bytes + items[i].bytes <= threshold) {
            leader[i] = open[k].lead;
            open[k].bytes += items[i].bytes;
            continue;
        }
        if (k == nopen) {
            if (nopen == KEYS) continue;   /* cannot happen with 50 combinations; alone then */
            nopen++;
        }
        open[k].dtype = items[i].dtype;
        open[k].op = items[i].op;
        open[k].lead = i;
        open[k].bytes = items[i].bytes;
    }
}

int cohort_fuse_window(const cohort_fuse_item_t *items, int n, size_t threshold)
{
    if (n < 1 || !items[0].fusable) return n < 1 ? 0 : 1;
    size_t bytes = items[0].bytes;
    int k = 1;
    for (int i = 1; i < n && items[i].fusable; i++) {
        if (items[i].dtype != items[0].dtype || items[i].op != items[0].op) continue;
        if (bytes + items[i].bytes > threshold) break;
        bytes += items[i].bytes;
        k++;
    }
    return k;
}

static const uint16_t carry_fine[COHORT_FUSE_CARRY_MAX] = { 1, 2, 3, 4, 6, 8, 12, 16, 24, 32,
                                                             48, 64, 96, 128, 192, 256 };
static const uint16_t carry_coarse[] = { 1, 2, 4, 16, 64, 256 };
#define COARSE_N ((int)(sizeof carry_coarse / sizeof *carry_coarse))

int cohort_fuse_carry_n(size_t data_bytes)
{
    return data_bytes <= 64 ? COARSE_N : COHORT_FUSE_CARRY_MAX;
}

static const uint16_t *carry_levels(int n)
{
    return n == COARSE_N ? carry_coarse : carry_fine;
}

int cohort_fuse_can_carry(int dtype, int op, int wire, int nranks)
{
    if ((unsigned)dtype >= COHORT_DTYPE_COUNT || (unsigned)op >= COHORT_OP_COUNT) return 0;
    if (op != COHORT_SUM && op != COHORT_AVG) return 1;   /* results are 0 or 1 */
    /* the largest sum of ones that every step holds exactly (fp16: 11 significant bits, bf16 8,
     * float32 24) */
    long most = dtype == COHORT_INT8 ? 127 : dtype == COHORT_UINT8 ? 255
                : dtype == COHORT_FLOAT16 ? 2048 : dtype == COHORT_BFLOAT16 ? 256
                : dtype == COHORT_FLOAT32 ? 1L << 24 : INT_MAX;
    if (wire == COHORT_FLOAT16 && most > 2048) most = 2048;
    if (wire == COHORT_BFLOAT16 && most > 256) most = 256;
    return nranks >= 1 && nranks <= most;
}

/* element i of a carried count as v (0 or 1) in dtype */
static void put_small(void *dst, size_t i, int dtype, int v)
{
    switch (dtype) {
    case COHORT_INT8: ((int8_t *)dst)[i] = (int8_t)v; break;
    case COHORT_UINT8: ((uint8_t *)dst)[i] = (uint8_t)v; break;
    case COHORT_INT32: ((int32_t *)dst)[i] = v; break;
    case COHORT_UINT32: ((uint32_t *)dst)[i] = (uint32_t)v; break;
    case COHORT_INT64: ((int64_t *)dst)[i] = v; break;
    case COHORT_UINT64: ((uint64_t *)dst)[i] = (uint64_t)v; break;
    case COHORT_FLOAT16: ((uint16_t *)dst)[i] = cohort_float_to_fp16((float)v); break;
    case COHORT_BFLOAT16: ((uint16_t *)dst)[i] = cohort_float_to_bf16((float)v); break;
    case COHORT_FLOAT32: ((float *)dst)[i] = (float)v; break;
    default: ((double *)dst)[i] = v; break;
    }
}

static double get_small(const void *src, size_t i, int dtype)
{
    switch (dtype) {
    case COHORT_INT8: return ((const int8_t *)src)[i];
    case COHORT_UINT8: return ((const uint8_t *)src)[i];
    case COHORT_INT32: return ((const int32_t *)src)[i];
    case COHORT_UINT32: return ((const uint32_t *)src)[i];
    case COHORT_INT64: return (double)((const int64_t *)src)[i];
    case COHORT_UINT64: return (double)((const uint64_t *)src)[i];
    case COHORT_FLOAT16: return cohort_fp16_to_float(((const uint16_t *)src)[i]);
    case COHORT_BFLOAT16: return cohort_bf16_to_float(((const uint16_t *)src)[i]);
    case COHORT_FLOAT32: return ((const float *)src)[i];
    default: return ((const double *)src)[i];
    }
}

void cohort_fuse_carry_put(void *dst, int n, int dtype, int op, uint64_t count)
{
    const uint16_t *level = carry_levels(n);
    for (int i = 0; i < n; i++) {
        int yes = count >= level[i];
        put_small(dst, (size_t)i, dtype, op == COHORT_MAX ? !yes : yes);
    }
}

uint64_t cohort_fuse_carry_get(const void *src, int n, int dtype, int op, int nranks)
{
    /* what the op makes of every rank's "yes": n ones summed, one ones averaged, ... */
    const uint16_t *level = carry_levels(n);
    double all = op == COHORT_SUM ? nranks : op == COHORT_MAX ? 0 : 1;
    uint64_t k = 0;
    for (int i = 0; i < n && get_small(src, (size_t)i, dtype) == all; i++) k = level[i];
    return k;
}
