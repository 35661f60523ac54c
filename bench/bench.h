/* SPDX-License-Identifier: BSD-3-Clause */
/* cohort-bench internals shared between its source files (not installed). */
#ifndef COHORT_BENCH_H
#define COHORT_BENCH_H

/* --svg mode (bench/svg.c): read the JSON files written by earlier runs with --json (comma list
 * in from), draw bus bandwidth against message size (log2 x axis), one polyline per file (per
 * dtype/op series when a file holds several), and write a standalone SVG to out.
 * labels (comma list, may be NULL) overrides the legend entries, title (may be NULL) the title;
 * ylog draws the y axis in log10. Returns 0 on success, prints the reason and returns 1 on
 * failure. Makes no communication. */
int bench_svg(const char *out, const char *from, const char *labels, const char *title, int ylog);

#endif
