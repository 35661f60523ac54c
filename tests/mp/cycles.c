/* SPDX-License-Identifier: BSD-3-Clause */
/* Resource checks, run as the ranks of a job (tests/mp/test_resources.sh):
 *
 *   cohortrun -np 2 tests/mp/cycles [--cycles N]
 *     N (default 1000; the CYCLES environment variable sets it too) cycles of create -> one
 *     small allreduce -> destroy, first with cohort_comm_init_oob over the world communicator's
 *     allgather (a full bootstrap every time), then with cohort_comm_split. Measured before,
 *     after cycle 10 (warm-up: plugins loaded, caches filled) and after the last cycle: open
 *     fds (/proc/self/fd), threads and VmRSS (/proc/self/status), the heap in use (mallinfo2's
 *     uordblks + hblkhd; not under AddressSanitizer, which replaces malloc), this process's shared
 *     memory segments (/dev/shm/cohort-*-<pid>-*) and its mappings of them (/proc/self/maps).
 *     Fails if fds, threads, segments or mappings grew at all after the warm-up, or the heap by
 *     more than HEAP_SLACK.
 *
 *   cohortrun -np 2 tests/mp/cycles --bigmem MIB [--coll NAME]
 *     One collective of MIB MiB of float32 (allreduce by default; reduce_scatter, alltoall in
 *     place, broadcast), and the peak memory it took beyond the user buffers: VmHWM is reset
 *     (/proc/self/clear_refs) once the communicator is up, the buffers are allocated and
 *     touched, the collective runs twice; extra = VmHWM - VmRSS before the buffers - the
 *     buffers. Prints "extra KIB"; the script compares it between sizes.
 *
 * Rank 0 prints the numbers; any rank exits 1 on a failed check. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cohort/cohort.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

#define HEAP_SLACK (256 * 1024L)   /* bytes the heap in use may grow over the cycles */
#define WARMUP 10

static cohort_comm_t *world;
static int rank, nranks, failed;

#define FAIL(...)                                                                             \
    do {                                                                                      \
        fprintf(stderr, "[rank %d] FAIL: ", rank);                                            \
        fprintf(stderr, __VA_ARGS__);                                                         \
        fprintf(stderr, "\n");                                                                \
        failed = 1;                                                                           \
    } while (0)

/* ---- measurements ----------------------------------------------------------------------- */

typedef struct sample {
    long fds, threads, rss_kib, hwm_kib, heap, shm_files, shm_maps;
} sample_t;

static long count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    long n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n - 1;   /* the directory's own fd */
}

static long status_field(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long v = -1;
    size_t fl = strlen(field);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, field, fl) && line[fl] == ':') {
            v = strtol(line + fl + 1, NULL, 10);
            break;
        }
    fclose(f);
    return v;
}

/* This process's segments: the shm transport names them /cohort-<job>-<comm>-<rank>-<pid>-<n>
 * (other jobs on the machine have other pids). */
static long count_shm_files(void)
{
    DIR *d = opendir("/dev/shm");
    if (!d) return -1;
    char mine[32];
    snprintf(mine, sizeof mine, "-%d-", (int)getpid());
    long n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "cohort-", 7)) continue;
        /* the pid is the 5th '-'-separated field */
        const char *p = e->d_name;
        for (int k = 0; k < 4 && p; k++) p = strchr(p + 1, '-');
        if (p && !strncmp(p, mine, strlen(mine))) n++;
    }
    closedir(d);
    return n;
}

static long count_shm_maps(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return -1;
    char line[1024];
    long n = 0;
    while (fgets(line, sizeof line, f))
        if (strstr(line, "/dev/shm/cohort-") || strstr(line, " /cohort-")) n++;
    fclose(f);
    return n;
}

static long heap_in_use(void)
{
#if UNDER_ASAN
    return -1;
#else
    struct mallinfo2 mi = mallinfo2();
    return (long)(mi.uordblks + mi.hblkhd);   /* in use from the arenas, and mmap'd blocks */
#endif
}

static sample_t measure(void)
{
    sample_t s;
    s.heap = heap_in_use();
    s.fds = count_fds();
    s.threads = status_field("Threads");
    s.rss_kib = status_field("VmRSS");
    s.hwm_kib = status_field("VmHWM");
    s.shm_files = count_shm_files();
    s.shm_maps = count_shm_maps();
    return s;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- cycles ----------------------------------------------------------------------------- */

static int oob_over_world(const void *s, void *r, size_t n, void *ctx)
{
    (void)ctx;
    return cohort_allgather(world, s, r, n, COHORT_UINT8) == COHORT_SUCCESS ? 0 : 1;
}

/* One cycle: create, one small allreduce (checked), destroy. 0 on success. */
static int cycle(int use_split, int i)
{
    cohort_comm_t *c = NULL;
    cohort_status_t st = use_split ? cohort_comm_split(world, 0, rank, &c)
                                   : cohort_comm_init_oob(rank, nranks, oob_over_world, NULL, &c);
    if (st || !c) {
        FAIL("cycle %d: %s: %s", i, use_split ? "split" : "init_oob", cohort_last_error());
        return 1;
    }
    int32_t v[4] = { rank, 1, i, -rank }, out[4] = { 0, 0, 0, 0 };
    st = cohort_allreduce(c, v, out, 4, COHORT_INT32, COHORT_SUM);
    int32_t want0 = nranks * (nranks - 1) / 2;
    if (st || out[0] != want0 || out[1] != nranks || out[2] != i * nranks || out[3] != -want0)
        FAIL("cycle %d: allreduce: %s: got %d %d %d %d", i, cohort_last_error(), out[0], out[1],
             out[2], out[3]);
    if ((st = cohort_comm_destroy(c))) FAIL("cycle %d: destroy: %s", i, cohort_last_error());
    return failed;
}

static void show(const char *label, const sample_t *s)
{
    if (rank != 0) return;
    printf("  %-22s fds %3ld  threads %2ld  VmRSS %7ld KiB  heap %10ld B  shm files %ld  "
           "shm maps %ld\n", label, s->fds, s->threads, s->rss_kib, s->heap, s->shm_files,
           s->shm_maps);
}

static void run_cycles(int use_split, int n)
{
    const char *what = use_split ? "cohort_comm_split" : "cohort_comm_init_oob";
    sample_t s0 = measure(), s1 = s0, s2;
    double t0 = now_s(), t1 = t0;
    for (int i = 1; i <= n && !failed; i++) {
        if (cycle(use_split, i)) break;
        if (i == WARMUP) {
            s1 = measure();
            t1 = now_s();
        }
    }
    s2 = measure();
    double t2 = now_s();
    if (rank == 0) {
        printf("%s: %d cycles of create + allreduce + destroy, %.2f ms per cycle after the "
               "warm-up\n", what, n, n > WARMUP ? (t2 - t1) * 1e3 / (n - WARMUP) : 0.0);
        show("before", &s0);
        show("after cycle 10", &s1);
        show("after the last cycle", &s2);
    }
    if (failed) return;
    if (s2.fds != s1.fds)
        FAIL("%s: open fds went from %ld to %ld over %d cycles", what, s1.fds, s2.fds, n - WARMUP);
    if (s2.threads != s1.threads)
        FAIL("%s: threads went from %ld to %ld", what, s1.threads, s2.threads);
    if (s2.shm_files != s1.shm_files)
        FAIL("%s: shared memory segments in /dev/shm went from %ld to %ld", what, s1.shm_files,
             s2.shm_files);
    if (s2.shm_maps != s1.shm_maps)
        FAIL("%s: mappings of shared memory segments went from %ld to %ld", what, s1.shm_maps,
             s2.shm_maps);
    if (s1.heap >= 0 && s2.heap - s1.heap > HEAP_SLACK)
        FAIL("%s: the heap in use grew by %ld bytes over %d cycles (more than %ld)", what,
             s2.heap - s1.heap, n - WARMUP, HEAP_SLACK);
}

/* ---- bounded memory --------------------------------------------------------------------- */

static int reset_hwm(void)
{
    int fd = open("/proc/self/clear_refs", O_WRONLY);
    if (fd < 0) return -1;
    ssize_t w = write(fd, "5", 1);   /* 5: reset the peak resident set size */
    close(fd);
    return w == 1 ? 0 : -1;
}

static void run_bigmem(long mib, const char *coll)
{
    size_t bytes = (size_t)mib << 20, count = bytes / sizeof(float);
    size_t sbytes = bytes, rbytes = bytes;
    if (!strcmp(coll, "reduce_scatter")) rbytes = bytes / (size_t)nranks;
    else if (!strcmp(coll, "alltoall_inplace") || !strcmp(coll, "broadcast")) sbytes = 0;
    cohort_status_t st = cohort_barrier(world);   /* everything set up before measuring */
    if (st) {
        FAIL("barrier: %s", cohort_last_error());
        return;
    }
    if (reset_hwm()) {
        FAIL("cannot reset VmHWM through /proc/self/clear_refs: %s", strerror(errno));
        return;
    }
    long rss0 = status_field("VmRSS");
    float *s = sbytes ? malloc(sbytes) : NULL, *r = malloc(rbytes);
    if ((sbytes && !s) || !r) {
        FAIL("no memory for %zu + %zu bytes of buffers", sbytes, rbytes);
        return;
    }
    if (s)
        for (size_t i = 0; i < sbytes / sizeof(float); i++) s[i] = (float)(rank + 1);
    for (size_t i = 0; i < rbytes / sizeof(float); i++) r[i] = (float)(rank + 1);
    long user_kib = (long)((sbytes + rbytes) >> 10);
    double t0 = now_s();
    for (int rep = 0; rep < 2 && !failed; rep++) {
        if (!strcmp(coll, "allreduce"))
            st = cohort_allreduce(world, s, r, count, COHORT_FLOAT32, COHORT_SUM);
        else if (!strcmp(coll, "reduce_scatter"))
            st = cohort_reduce_scatter(world, s, r, count / (size_t)nranks, COHORT_FLOAT32,
                                       COHORT_SUM);
        else if (!strcmp(coll, "alltoall_inplace"))
            st = cohort_alltoall(world, r, r, count / (size_t)nranks, COHORT_FLOAT32);
        else if (!strcmp(coll, "broadcast"))
            st = cohort_broadcast(world, r, count, COHORT_FLOAT32, 0);
        else {
            FAIL("unknown collective '%s'", coll);
            return;
        }
        if (st) FAIL("%s of %ld MiB: %s", coll, mib, cohort_last_error());
    }
    double t = (now_s() - t0) / 2;
    /* spot checks of the result (the full check is collcheck's) */
    float want = !strcmp(coll, "broadcast") ? 1.0f
                 : !strcmp(coll, "alltoall_inplace") ? 0.0f
                 : (float)(nranks * (nranks + 1) / 2);
    size_t rn = rbytes / sizeof(float);
    if (!failed && strcmp(coll, "alltoall_inplace")) {
        /* allreduce and reduce_scatter ran twice on the same inputs (out of place): same sum */
        if (r[0] != want || r[rn / 2] != want || r[rn - 1] != want)
            FAIL("%s: result %g %g %g, want %g", coll, r[0], r[rn / 2], r[rn - 1], want);
    } else if (!failed) {
        /* twice in place: every block went to its rank and came back */
        if (r[0] != (float)(rank + 1) || r[rn - 1] != (float)(rank + 1))
            FAIL("alltoall in place twice: %g %g, want %d", r[0], r[rn - 1], rank + 1);
    }
    long hwm = status_field("VmHWM");
    long extra = hwm - rss0 - user_kib;
    if (rank == 0)
        printf("%s %ld MiB on %d ranks over %s (%s): %.3f s; VmRSS before the buffers %ld KiB, "
               "user buffers %ld KiB, VmHWM %ld KiB: extra %ld KiB\n", coll, mib, nranks,
               cohort_comm_peer_transport(world, 1) ? cohort_comm_peer_transport(world, 1) : "-",
               cohort_comm_last_algo(world), t, rss0, user_kib, hwm, extra);
    /* every rank says its extra, for the script: "extra <rank> <KiB>" */
    printf("extra %d %ld\n", rank, extra);
    free(s);
    free(r);
}

int main(int argc, char **argv)
{
    int n = 1000;
    long bigmem = 0;
    const char *coll = "allreduce";
    const char *env = getenv("CYCLES");
    if (env && *env) n = atoi(env);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--cycles") && i + 1 < argc) n = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--bigmem") && i + 1 < argc) bigmem = atol(argv[++i]);
        else if (!strcmp(argv[i], "--coll") && i + 1 < argc) coll = argv[++i];
        else {
            fprintf(stderr, "usage: cycles [--cycles N] | --bigmem MIB [--coll NAME]\n");
            return 2;
        }
    }
    if (n <= WARMUP) {
        fprintf(stderr, "cycles: need more than %d cycles (the warm-up)\n", WARMUP);
        return 2;
    }
    cohort_status_t st = cohort_comm_init(&world);
    if (st) {
        fprintf(stderr, "cohort_comm_init: %s\n", cohort_last_error());
        return 1;
    }
    rank = cohort_comm_rank(world);
    nranks = cohort_comm_size(world);
    if (bigmem > 0) {
        run_bigmem(bigmem, coll);
    } else {
        if (rank == 0 && UNDER_ASAN) printf("(AddressSanitizer: the heap is not measured)\n");
        run_cycles(0, n);
        if (!failed) run_cycles(1, n);
    }
    /* every rank's verdict before anyone leaves (a failed rank still takes part) */
    int32_t f = failed, any = 0;
    st = cohort_allreduce(world, &f, &any, 1, COHORT_INT32, COHORT_MAX);
    cohort_comm_destroy(world);
    if (st) {
        fprintf(stderr, "[rank %d] final allreduce: %s\n", rank, cohort_last_error());
        return 1;
    }
    if (rank == 0) printf("%s\n", any ? "FAILED" : "ok");
    return any ? 1 : 0;
}
