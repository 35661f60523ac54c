/* SPDX-License-Identifier: BSD-3-Clause */
/* The shm transport's mapping of a peer's cohort_mem_alloc block (transports/shm/coll_map.c,
 * coll_map_peer): what a collective reads or writes of the block through this rank's mapping has
 * its page tables filled in MAP_GRAIN by MAP_GRAIN when the collective first reaches it, and the
 * rest of the block is left alone (a block of gigabytes must not be faulted in whole because a
 * collective used a megabyte of it). This process plays both ranks: "rank 1" owns the block,
 * "rank 0" maps it through /proc/<pid>/fd as it maps a peer's. Which pages of the mapping have
 * page-table entries is read from /proc/self/pagemap (bit 63: present). The data read through
 * the mapping is checked byte by byte against what the owner wrote. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "transports/shm/coll.h"
#include "transports/shm/coll_int.h"

#define PAGE ((size_t)4096)
#define BLOCK (4 * MAP_GRAIN + 3 * PAGE)   /* five grains, the last one short */

static char last_error[512];

static cohort_status_t host_error(cohort_status_t st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return st;
}

static void host_log(int level, const char *subsys, const char *fmt, ...)
{
    (void)level;
    (void)subsys;
    (void)fmt;
}

static cohort_status_t hook_peer_check(void *ep, int peer, int report)
{
    (void)ep;
    (void)peer;
    (void)report;
    return COHORT_SUCCESS;
}

static void hook_wake(void *ep, int peer)
{
    (void)ep;
    (void)peer;
}

static const cohort_host_v1_t HOST = {
    .size = sizeof(cohort_host_v1_t),
    .abi_version = COHORT_PLUGIN_ABI_VERSION,
    .log = host_log,
    .error = host_error,
};

/* The page-table entries of pages [from, to) of the mapping at base (at most a grain's), in ent:
 * bit 63 says whether the page is mapped. One read of /proc/self/pagemap. */
static void pagemap(const unsigned char *base, size_t from, size_t to, uint64_t *ent)
{
    int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    ck_assert_msg(fd >= 0, "open /proc/self/pagemap: %s", strerror(errno));
    size_t bytes = (to - from) * sizeof *ent;
    off_t at = (off_t)(((uintptr_t)base / PAGE + from) * sizeof *ent);
    ssize_t got = pread(fd, ent, bytes, at);
    close(fd);
    ck_assert_int_eq(got, (ssize_t)bytes);
}

/* Every page of grain g of the mapping at base has an entry (want 1) / none (want 0). A grain
 * left alone is checked away from its edges: filling in a page maps its neighbours in the same
 * 64 KiB of address space too when they are in the page cache (the kernel's fault-around,
 * debugfs fault_around_bytes, 64 KiB by default), and the
 * mapping's address is not aligned to grains. */
#define AROUND ((size_t)32)   /* pages: twice the default fault-around */
static void check_grain(const unsigned char *base, size_t g, int want, const char *when)
{
    size_t from = g * MAP_GRAIN / PAGE, to = (g + 1) * MAP_GRAIN / PAGE;
    if (to > BLOCK / PAGE) to = BLOCK / PAGE;
    if (!want) from += AROUND, to -= AROUND;
    if (from >= to) return;
    uint64_t ent[MAP_GRAIN / PAGE];
    pagemap(base, from, to, ent);
    for (size_t p = from; p < to; p++)
        ck_assert_msg((int)(ent[p - from] >> 63) == want, "%s: page %zu (grain %zu) of the "
                      "peer's block is %smapped here; expected %s", when, p, g,
                      want ? "not " : "", want ? "every page of the grain filled in"
                                               : "the grain left alone");
}

/* Whether this kernel has MADV_POPULATE_READ (Linux 5.14): coll_map.c then prefaults. */
static int kernel_prefaults(void)
{
    void *p = mmap(NULL, PAGE, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(p, MAP_FAILED);
    int ok = madvise(p, PAGE, MADV_POPULATE_READ) == 0;
    munmap(p, PAGE);
    return ok;
}

START_TEST(test_prefault_by_grain)
{
    if (!kernel_prefaults()) {
        fprintf(stderr, "test_shm_prefault: this kernel has no MADV_POPULATE_READ (Linux < "
                        "5.14); mapped pages fault one by one there, nothing to check\n");
        return;
    }
    /* the owner's block, every byte written (its own mapping's entries are not ours) */
    char name[64];
    uint64_t id = 7;
    snprintf(name, sizeof name, "cohort-mem-%d-%llu", (int)getpid(), (unsigned long long)id);
    int fd = memfd_create(name, MFD_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, (off_t)BLOCK), 0);
    unsigned char *own = mmap(NULL, BLOCK, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ck_assert_ptr_ne(own, MAP_FAILED);
    for (size_t i = 0; i < BLOCK; i++) own[i] = (unsigned char)(i * 131u + (i >> 12));

    size_t round = shm_coll_round(2, PAGE);
    size_t alen = (shm_coll_area_bytes(2, round) + PAGE - 1) / PAGE * PAGE;
    unsigned char *area = aligned_alloc(PAGE, alen);
    ck_assert_ptr_nonnull(area);
    memset(area, 0, alen);
    shm_coll_area_init(area, 2, round);
    shm_coll_hooks_t hooks = { .ep = NULL, .peer_check = hook_peer_check, .wake = hook_wake,
                               .map = 1 };
    shm_coll_t *co = shm_coll_new(area, 0, 2, &HOST, &hooks);
    ck_assert_ptr_nonnull(co);
    co->ctl[1].pid = (int32_t)getpid();   /* the owner, "rank 1", is this process */

    /* a read of 2 MiB + 5000 bytes from an odd offset in grain 1: grains 1 and 2 filled in */
    size_t off = MAP_GRAIN + 3 * PAGE + 100, len = MAP_GRAIN + 5000;
    const unsigned char *p = coll_map_peer(co, 1, fd, id, off, len, 0);
    ck_assert_msg(p != NULL, "coll_map_peer: %s", last_error);
    const unsigned char *base = p - off;
    for (size_t g = 0; g < 5; g++) check_grain(base, g, g == 1 || g == 2, "first read");
    for (size_t i = 0; i < len; i++)
        ck_assert_msg(p[i] == own[off + i], "byte %zu of the peer's block reads %u through the "
                      "mapping, %u in the owner's", off + i, p[i], own[off + i]);

    /* the short last grain, to the block's last byte; grain 3 still untouched */
    p = coll_map_peer(co, 1, fd, id, BLOCK - 3 * PAGE + 8, 3 * PAGE - 8, 0);
    ck_assert_msg(p != NULL, "coll_map_peer: %s", last_error);
    ck_assert_ptr_eq(p, base + BLOCK - 3 * PAGE + 8);
    for (size_t g = 0; g < 5; g++)
        check_grain(base, g, g == 1 || g == 2 || g == 4, "read of the last grain");

    /* beyond the block: refused, nothing mapped */
    ck_assert_ptr_null(coll_map_peer(co, 1, fd, id, BLOCK - 10, 11, 0));
    ck_assert_msg(strstr(last_error, "does not fit") != NULL, "error: %s", last_error);
    check_grain(base, 3, 0, "a refused range");

    /* writable: the block is mapped again, and that mapping is filled in from scratch, where
     * it is used (grain 0 only); what is written there is in the owner's block */
    unsigned char *w = coll_map_peer(co, 1, fd, id, 64, PAGE, 1);
    ck_assert_msg(w != NULL, "coll_map_peer: %s", last_error);
    unsigned char *wbase = w - 64;
    for (size_t g = 0; g < 5; g++) check_grain(wbase, g, g == 0, "writable mapping");
    memset(w, 0x5a, PAGE);
    for (size_t i = 0; i < PAGE; i++) ck_assert_uint_eq(own[64 + i], 0x5a);

    shm_coll_free(co);
    free(area);
    munmap(own, BLOCK);
    close(fd);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("shm_prefault");
    TCase *tc = tcase_create("map");
    tcase_add_test(tc, test_prefault_by_grain);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
