/* SPDX-License-Identifier: BSD-3-Clause */
/* cohort-membw: the memory bandwidth that bounds intra-node collectives on this machine.
 *
 *   cohort-membw [-s SIZE] [-t THREADS] [-r SECONDS]
 *   cohort-membw --lines [-r SECONDS]
 *
 * For buffers of SIZE bytes (default: 1 MiB to 256 MiB in powers of 4) and 1..THREADS threads
 * (default: 1 and the number of online CPUs), measures
 *   copy   dst = src               (memcpy: what a copy-in/copy-out or CMA transfer costs)
 *   reduce dst[i] += src[i]        (float32: what a reduction step costs)
 *   xcopy  dst = src, where src was just written by ANOTHER thread on another CPU (2+ threads;
 *          thread t copies thread t+1's slice): what moving data between the ranks of one node
 *          costs, the floor of any shared-memory collective whose inputs are in their owners'
 *          caches. Threads are pinned to distinct CPUs; the write is not timed, the copy is.
 * as bytes moved per second (copy: 2 bytes per byte copied, read + write; reduce: 3) and as
 * "payload" GB/s (bytes of dst per second, all threads together), best of several repetitions.
 * Each thread works on its own slice. Pages are touched before timing.
 *
 * --lines: what one cache line costs to cross between two cores, the unit of a small
 * collective's cost (docs/performance.md). Two threads pinned to the first two CPUs this process
 * may use take turns: each waits for the other's number, reads the other's payload, then writes
 * its own: 1 line (number and payload in one line, as a fast-box), 2 lines (the payload in one
 * line, then the number in another, as a message and its flag) or 3. The time per turn is one
 * hand-over: that many lines moving one way, plus the wait. Printed as ns per turn, the median
 * of rounds; measure on a quiet machine (a busy one preempts the spinning threads). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { K_COPY, K_REDUCE, K_XCOPY };
static const char *kname[] = { "copy", "reduce", "xcopy" };

typedef struct job {
    float *dst, *src;
    float *xsrc;       /* xcopy: the next thread's slice of src, which that thread writes */
    size_t n;          /* floats in this thread's slice (xcopy: of the next thread's too) */
    int kernel;
    int cpu;           /* xcopy: pinned here; -1 not pinned */
    int reps;
    pthread_barrier_t *bar;
    double best;       /* seconds, best repetition (set by thread 0) */
} job_t;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *run(void *arg)
{
    job_t *j = arg;
    double best = 1e30;
    if (j->cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(j->cpu, &set);
        pthread_setaffinity_np(pthread_self(), sizeof set, &set);   /* best effort */
    }
    for (int r = 0; r < j->reps; r++) {
        if (j->kernel == K_XCOPY) {   /* our slice dirty in our cache, then copy the next one's */
            pthread_barrier_wait(j->bar);
            memset(j->src, r & 0x3f, j->n * sizeof(float));
        }
        pthread_barrier_wait(j->bar);
        double t0 = now();
        if (j->kernel == K_XCOPY) {
            memcpy(j->dst, j->xsrc, j->n * sizeof(float));
        } else if (j->kernel == K_REDUCE) {
            float *restrict d = j->dst;
            const float *restrict s = j->src;
            for (size_t i = 0; i < j->n; i++) d[i] += s[i];
        } else {
            memcpy(j->dst, j->src, j->n * sizeof(float));
        }
        pthread_barrier_wait(j->bar);
        double t = now() - t0;
        if (t < best) best = t;
    }
    j->best = best;
    return NULL;
}

/* ---- --lines ---------------------------------------------------------------------------- */

#define LINE 64
typedef struct { _Alignas(LINE) volatile uint64_t v[LINE / 8]; } line_t;

typedef struct turn {
    line_t *lines;     /* 2 x nlines: thread 0 writes [0, nlines), thread 1 the rest */
    int nlines, me, cpu;
    long turns;
    double secs;
    uint64_t sink;     /* what was read, so that the reads stay */
} turn_t;

#if defined(__x86_64__) || defined(__i386__)
#define CPU_RELAX() __builtin_ia32_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

static void *take_turns(void *arg)
{
    turn_t *t = arg;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(t->cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    line_t *mine = t->lines + t->me * t->nlines, *theirs = t->lines + (1 - t->me) * t->nlines;
    int last = t->nlines - 1;   /* the number goes in the last line, written last */
    double t0 = now();
    for (uint64_t k = 1; k <= (uint64_t)t->turns; k++) {
        /* thread 0 starts each turn; thread 1 answers it */
        if (t->me == 1 || k > 1) {
            uint64_t want = t->me ? k : k - 1;
            while (__atomic_load_n(&theirs[last].v[0], __ATOMIC_ACQUIRE) != want) CPU_RELAX();
            for (int l = 0; l <= last; l++) t->sink += theirs[l].v[1];   /* read the payload */
        }
        for (int l = 0; l < last; l++) mine[l].v[1] = k;      /* the payload's lines... */
        mine[last].v[1] = k;
        __atomic_store_n(&mine[last].v[0], k, __ATOMIC_RELEASE);   /* ...then the number */
    }
    while (t->me == 0 && __atomic_load_n(&theirs[last].v[0], __ATOMIC_ACQUIRE) !=
                             (uint64_t)t->turns)
        CPU_RELAX();
    t->secs = now() - t0;
    return NULL;
}

static int my_cpus(int *cpus, int max);

static int lines_mode(double target)
{
    int cpus[2];
    if (my_cpus(cpus, 2) < 2) {
        fprintf(stderr, "cohort-membw --lines: needs two CPUs this process may run on\n");
        return 1;
    }
    printf("# cohort-membw --lines: CPUs %d and %d take turns; ns per hand-over (one way), "
           "median of 7 rounds of %.2f s\n", cpus[0], cpus[1], target / 7);
    for (int nl = 1; nl <= 3; nl++) {
        double per[7];
        long turns = 10000;
        for (int r = 0; r < 7; r++) {
            line_t *lines = aligned_alloc(LINE, sizeof(line_t) * 2 * (size_t)nl);
            if (!lines) return 1;
            memset(lines, 0, sizeof(line_t) * 2 * (size_t)nl);
            turn_t tt[2] = { { lines, nl, 0, cpus[0], turns, 0, 0 },
                             { lines, nl, 1, cpus[1], turns, 0, 0 } };
            pthread_t tid;
            pthread_create(&tid, NULL, take_turns, &tt[1]);
            take_turns(&tt[0]);
            pthread_join(tid, NULL);
            free(lines);
            per[r] = tt[0].secs / (2.0 * (double)turns) * 1e9;
            double want = target / 7;   /* size the next round to the time asked for */
            turns = (long)((double)turns * want / (tt[0].secs > 1e-6 ? tt[0].secs : 1e-6));
            turns = turns < 1000 ? 1000 : turns > 100000000 ? 100000000 : turns;
        }
        for (int i = 1; i < 7; i++)   /* insertion sort, for the median */
            for (int j = i; j > 0 && per[j] < per[j - 1]; j--) {
                double x = per[j];
                per[j] = per[j - 1];
                per[j - 1] = x;
            }
        printf("  %d line%s per turn: %7.1f ns (rounds %.1f-%.1f)\n", nl, nl > 1 ? "s" : " ",
               per[3], per[0], per[6]);
    }
    return 0;
}

/* The CPUs this process may run on, in order; returns how many (at most max). */
static int my_cpus(int *cpus, int max)
{
    cpu_set_t set;
    int k = 0;
    if (sched_getaffinity(0, sizeof set, &set)) return 0;
    for (int c = 0; c < CPU_SETSIZE && k < max; c++)
        if (CPU_ISSET(c, &set)) cpus[k++] = c;
    return k;
}

static double measure(float *dst, float *src, size_t bytes, int threads, int kernel, int reps)
{
    int cpus[64], ncpu = kernel == K_XCOPY ? my_cpus(cpus, 64) : 0;
    pthread_t tid[64];
    job_t jobs[64];
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)threads);
    size_t n = bytes / sizeof(float), per = n / (size_t)threads;
    for (int t = 0; t < threads; t++) {
        size_t off = (size_t)t * per, len = t == threads - 1 ? n - off : per;
        /* xcopy: equal slices, so that every thread copies a whole neighbour's slice */
        size_t next = (size_t)((t + 1) % threads) * per;
        jobs[t] = (job_t){ dst + off, src + off, src + next, kernel == K_XCOPY ? per : len, kernel,
                           ncpu >= threads ? cpus[t] : -1, reps, &bar, 0 };
        pthread_create(&tid[t], NULL, run, &jobs[t]);
    }
    double worst = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(tid[t], NULL);
        if (jobs[t].best > worst) worst = jobs[t].best;   /* the slowest thread bounds it */
    }
    pthread_barrier_destroy(&bar);
    return worst;
}

int main(int argc, char **argv)
{
    size_t only = 0;
    int maxthreads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    double target = 0;   /* -r; unset: 0.3 s per measurement, 1.4 s for --lines */
    int lines = 0, r_given = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--lines")) {
            lines = 1;
            continue;
        }
        if (!strcmp(argv[i], "-s") && i + 1 < argc) {
            char *end;
            only = strtoull(argv[++i], &end, 10);
            if (*end == 'K' || *end == 'k') only <<= 10;
            else if (*end == 'M' || *end == 'm') only <<= 20;
            else if (*end == 'G' || *end == 'g') only <<= 30;
        } else if (!strcmp(argv[i], "-t") && i + 1 < argc) {
            maxthreads = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "-r") && i + 1 < argc) {
            target = atof(argv[++i]);
            r_given = 1;
        } else {
            fprintf(stderr, "usage: cohort-membw [-s SIZE[K|M|G]] [-t THREADS] [-r SECONDS]\n"
                            "       cohort-membw --lines [-r SECONDS]\n");
            return strcmp(argv[i], "-h") && strcmp(argv[i], "--help") ? 2 : 0;
        }
    }
    if (maxthreads < 1 || maxthreads > 64 || target < 0 || (target == 0 && r_given)) {
        fprintf(stderr, "cohort-membw: threads must be 1..64 and seconds > 0\n");
        return 2;
    }
    if (lines) return lines_mode(r_given ? target : 1.4);
    if (!r_given) target = 0.3;
    size_t maxbytes = only ? only : (size_t)256 << 20;
    float *src = NULL, *dst = NULL;
    if (posix_memalign((void **)&src, 4096, maxbytes) || posix_memalign((void **)&dst, 4096, maxbytes)) {
        fprintf(stderr, "cohort-membw: cannot allocate 2 x %zu bytes\n", maxbytes);
        return 1;
    }
    for (size_t i = 0; i < maxbytes / sizeof(float); i++) {
        src[i] = (float)(i % 1000);
        dst[i] = 0;
    }
    printf("# cohort-membw: best of repetitions; bus = bytes read + written per second\n");
    printf("# %12s %7s %-6s %10s %10s\n", "bytes", "threads", "kernel", "payload", "bus");
    printf("# %12s %7s %-6s %10s %10s\n", "", "", "", "(GB/s)", "(GB/s)");
    for (size_t bytes = only ? only : (size_t)1 << 20; bytes <= maxbytes; bytes *= 4) {
        for (int threads = 1; threads <= maxthreads; threads = threads == 1 && maxthreads > 1
                                                                  ? maxthreads : threads + maxthreads) {
            for (int kernel = K_COPY; kernel <= K_XCOPY; kernel++) {
                if (kernel == K_XCOPY && threads < 2) continue;
                double t1 = measure(dst, src, bytes, threads, kernel, 1);
                int reps = (int)(target / (t1 > 1e-6 ? t1 : 1e-6));
                reps = reps < 3 ? 3 : reps > 1000 ? 1000 : reps;
                double t = measure(dst, src, bytes, threads, kernel, reps);
                size_t moved = kernel == K_XCOPY ? bytes / (size_t)threads / sizeof(float) *
                                                   sizeof(float) * (size_t)threads : bytes;
                double payload = (double)moved / t / 1e9;
                printf("  %12zu %7d %-6s %10.2f %10.2f\n", bytes, threads, kname[kernel], payload,
                       payload * (kernel == K_REDUCE ? 3 : 2));
            }
            if (maxthreads == 1) break;
        }
        if (only) break;
    }
    free(src);
    free(dst);
    return 0;
}
