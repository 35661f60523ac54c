/* SPDX-License-Identifier: BSD-3-Clause */
/* Tensor fusion planning (core/fusion.h). */
#include "core/fusion.h"

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
