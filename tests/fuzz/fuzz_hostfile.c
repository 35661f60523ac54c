/* SPDX-License-Identifier: BSD-3-Clause */
/* Fuzz target: cohortrun's host lists (core/parse.h). data[0] % 3 picks the reader; the rest is
 *   0  hostfile text (cohort_hostfile_parse_text), as a NUL-terminated string
 *   1  a -H list (cohort_hostlist_parse), as a NUL-terminated string
 *   2  a hostfile on disk, the raw bytes NULs included (cohort_hostfile_parse on a memfd)
 * Oracles: an accepted list has at least one host, each a valid non-empty name given once with
 * at least one slot; and it reads back identically when printed as a hostfile and as a -H
 * list. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1   /* memfd_create, accept4, getrandom */
#endif
#include "fuzz.h"

#include <ctype.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/parse.h"

#define SLOTS_MAX 1048576   /* per line / entry (core/parse.c) */

static int memfd = -1;
static char memfd_path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet();
    memfd = memfd_create("fuzz-hostfile", MFD_CLOEXEC);
    if (memfd < 0) {
        perror("fuzz_hostfile: memfd_create");
        abort();
    }
    snprintf(memfd_path, sizeof memfd_path, "/proc/self/fd/%d", memfd);
    return 0;
}

static int same(const cohort_host_slots_t *a, int na, const cohort_host_slots_t *b, int nb)
{
    if (na != nb) return 0;
    for (int i = 0; i < na; i++)
        if (strcmp(a[i].host, b[i].host) || a[i].slots != b[i].slots) return 0;
    return 1;
}

/* Appends printf output to a growing buffer. */
typedef struct { char *p; size_t n, cap; } sbuf_t;
static void sb_put(sbuf_t *b, const char *host, int slots, const char *fmt)
{
    size_t need = strlen(host) + 64;
    if (b->n + need > b->cap) {
        b->cap = 2 * (b->n + need);
        b->p = realloc(b->p, b->cap);
        if (!b->p) abort();
    }
    b->n += (size_t)snprintf(b->p + b->n, b->cap - b->n, fmt, host, slots);
}

static void check_hosts(const cohort_host_slots_t *h, int n)
{
    FUZZ_CHECK(h && n >= 1, "an accepted list with %d hosts", n);
    int printable = 1;
    for (int i = 0; i < n; i++) {
        size_t len = strnlen(h[i].host, sizeof h[i].host);
        FUZZ_CHECK(len > 0 && len < sizeof h[i].host, "host %d: %zu characters", i, len);
        for (size_t k = 0; k < len; k++)
            FUZZ_CHECK(isgraph((unsigned char)h[i].host[k]) && !strchr(",=#[]", h[i].host[k]),
                       "host %d holds character 0x%02x", i, (unsigned char)h[i].host[k]);
        FUZZ_CHECK(h[i].slots >= 1, "host '%s' has %d slots", h[i].host, h[i].slots);
        for (int j = 0; j < i; j++)
            FUZZ_CHECK(strcmp(h[i].host, h[j].host), "host '%s' listed twice", h[i].host);
        printable &= h[i].slots <= SLOTS_MAX;   /* sums of repeated lines can be more */
    }
    if (!printable) return;
    sbuf_t file = {0}, list = {0};
    for (int i = 0; i < n; i++) {
        sb_put(&file, h[i].host, h[i].slots, "%s slots=%d\n");
        sb_put(&list, h[i].host, h[i].slots,
               strchr(h[i].host, ':') ? (i ? ",[%s]:%d" : "[%s]:%d")
                                      : (i ? ",%s:%d" : "%s:%d"));
    }
    cohort_host_slots_t *again = NULL;
    int m = 0;
    FUZZ_CHECK(cohort_hostfile_parse_text("again", file.p, &again, &m) == COHORT_SUCCESS &&
               same(h, n, again, m), "printed as a hostfile, the list reads back differently:\n%s",
               file.p);
    free(again);
    again = NULL;
    FUZZ_CHECK(cohort_hostlist_parse(list.p, &again, &m) == COHORT_SUCCESS &&
               same(h, n, again, m), "printed as -H '%s', the list reads back differently",
               list.p);
    free(again);
    free(file.p);
    free(list.p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    cohort_host_slots_t *hosts = (cohort_host_slots_t *)&hosts;   /* must be reset */
    int count = -1;
    cohort_status_t st;
    if (data[0] % 3 == 2) {
        if (ftruncate(memfd, 0) != 0 || pwrite(memfd, data + 1, size - 1, 0) != (ssize_t)(size - 1))
            abort();
        st = cohort_hostfile_parse(memfd_path, &hosts, &count);
    } else {
        char *text = fuzz_text(data, size);
        st = data[0] % 3 == 0 ? cohort_hostfile_parse_text("fuzz", text, &hosts, &count)
                              : cohort_hostlist_parse(text, &hosts, &count);
        free(text);
    }
    if (st == COHORT_SUCCESS)
        check_hosts(hosts, count);
    else
        FUZZ_CHECK(hosts == NULL && count == 0, "a refused list left hosts %p, count %d",
                   (void *)hosts, count);
    free(hosts);
    return 0;
}
