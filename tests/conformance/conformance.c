/* SPDX-License-Identifier: BSD-3-Clause */
/* cohort-conformance PLUGIN.so [--np N] [--timeout S] [--only TEXT] [-v]
 *
 * Runs a transport plugin through the plugin ABI alone: the parent loads and validates it with
 * the core's loader, forks N ranks (default 2), relays their address exchange and barriers, and
 * prints one line per case, then "P passed, F failed". Exit status 0 only if nothing failed.
 * Every wait has a deadline; a rank that stops making progress is killed and its case fails.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include "tests/conformance/conformance.h"
#include "core/plugin_loader.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define GRACE_S 20.0   /* beyond the per-case timeout before a silent rank counts as hung */

typedef struct child {
    pid_t pid;
    int fd;
    int live;              /* still taking part */
    int left;              /* left on purpose (R_EXITING) or finished (R_DONE) */
    int done;
    int reaped;
    int status;
    int pending;           /* waiting in a gather */
    int gkase, gstep;
    unsigned char *gdata;
    uint32_t glen;
    double last;           /* last record seen */
    int cur;               /* first case not reported yet */
    int *ok;               /* per case: -1 not reported, 0 failed, 1 passed */
    char (*msg)[CF_MSG];
} child_t;

static cf_opts_t opts;
static child_t kids[CF_MAX_NP];
static int printed;        /* cases printed so far (index into the selected list) */
static int sel[256], nsel;
static int npass, nfail;
static char stop_reason[CF_MSG];

static void usage(FILE *f)
{
    fprintf(f, "usage: cohort-conformance PLUGIN.so [--np N] [--timeout SECONDS] [--only TEXT] "
            "[-v]\n"
            "  Runs a cohort transport plugin through the plugin ABI with N processes (2..%d,\n"
            "  default 2). One line per case, then 'P passed, F failed'; exit 0 if all passed.\n"
            "  --timeout  seconds each case may take before it fails (default 30)\n"
            "  --only     run only the cases whose name contains TEXT\n"
            "  -v         keep the plugin's log (COHORT_DEBUG) instead of silencing it\n",
            CF_MAX_NP);
}

static void print_case(int k, int ok, const char *text)
{
    if (ok) {
        npass++;
        if (text && *text) printf("PASS  %s (%s)\n", cf_cases[k].name, text);
        else printf("PASS  %s\n", cf_cases[k].name);
    } else {
        nfail++;
        printf("FAIL  %s: %s\n", cf_cases[k].name, text);
    }
    fflush(stdout);
}

/* Prints every case all ranks have reported, in order. */
static void flush_cases(void)
{
    while (printed < nsel) {
        int k = sel[printed];
        int all = 1, ok = 1;
        char text[1024] = "";
        size_t used = 0;
        for (int r = 0; r < opts.np; r++) {
            child_t *c = &kids[r];
            if (c->ok[k] < 0) {
                if (c->live || !c->left) all = 0;
                continue;
            }
            if (c->ok[k] == 0) {
                if (ok) used = 0;
                ok = 0;
                if (used < sizeof text - 16)
                    used += (size_t)snprintf(text + used, sizeof text - used, "%srank %d: %s",
                                             used ? "; " : "", r, c->msg[k]);
            } else if (ok && !used && c->msg[k][0]) {
                used += (size_t)snprintf(text, sizeof text, "%s", c->msg[k]);
            }
        }
        if (!all) return;
        print_case(k, ok, text);
        printed++;
    }
}

static void send_all(const cf_rec_t *h, const void *data, int except)
{
    for (int r = 0; r < opts.np; r++)
        if (r != except && kids[r].live) cf_send_rec(kids[r].fd, h, data);
}

static long long gkey(int kase, int step) { return (long long)kase * 0x100000000ll + step; }

/* Completes or aborts the gather once every live rank waits in one. */
static void try_gather(void)
{
    int nlive = 0;
    long long maxkey = LLONG_MIN;
    for (int r = 0; r < opts.np; r++) {
        child_t *c = &kids[r];
        if (!c->live) continue;
        nlive++;
        if (!c->pending) return;
        long long k = gkey(c->gkase, c->gstep);
        if (k > maxkey) maxkey = k;
    }
    if (!nlive) return;
    int equal = 1;
    for (int r = 0; r < opts.np; r++)
        if (kids[r].live && gkey(kids[r].gkase, kids[r].gstep) != maxkey) equal = 0;
    if (!equal) {
        /* Someone moved on (a failed case jumps to its last gather): release the laggards. */
        for (int r = 0; r < opts.np; r++) {
            child_t *c = &kids[r];
            if (!c->live || gkey(c->gkase, c->gstep) == maxkey) continue;
            cf_rec_t h = { R_ABORTGATHER, -1, c->gkase, c->gstep, 0, 0 };
            cf_send_rec(c->fd, &h, NULL);
            c->pending = 0;
        }
        return;
    }
    size_t total = 0;
    for (int r = 0; r < opts.np; r++) total += 8 + (kids[r].live ? kids[r].glen : 0);
    unsigned char *b = malloc(total ? total : 1);
    if (!b) return;
    size_t off = 0;
    for (int r = 0; r < opts.np; r++) {
        int32_t present = kids[r].live;
        uint32_t l = kids[r].live ? kids[r].glen : 0;
        memcpy(b + off, &present, 4);
        memcpy(b + off + 4, &l, 4);
        off += 8;
        if (l) memcpy(b + off, kids[r].gdata, l);
        off += l;
    }
    int kase = 0, step = 0;
    for (int r = 0; r < opts.np; r++)
        if (kids[r].live) {
            kase = kids[r].gkase;
            step = kids[r].gstep;
            break;
        }
    cf_rec_t h = { R_RESULT, -1, kase, step, 0, (uint32_t)total };
    for (int r = 0; r < opts.np; r++)
        if (kids[r].live) {
            kids[r].pending = 0;
            cf_send_rec(kids[r].fd, &h, b);
        }
    free(b);
}

static void describe_status(int st, char *buf, size_t len)
{
    if (WIFEXITED(st)) snprintf(buf, len, "exited with status %d%s", WEXITSTATUS(st),
                                WEXITSTATUS(st) ? " (its stderr says why: an error, or a "
                                "sanitizer/leak report)" : "");
    else if (WIFSIGNALED(st)) snprintf(buf, len, "killed by signal %d (%s)", WTERMSIG(st),
                                       strsignal(WTERMSIG(st)));
    else snprintf(buf, len, "status 0x%x", st);
}

static void reap(child_t *c, double wait_s)
{
    if (c->reaped) return;
    double end = cf_now() + wait_s;
    for (;;) {
        int st;
        pid_t p = waitpid(c->pid, &st, WNOHANG);
        if (p == c->pid) {
            c->reaped = 1;
            c->status = st;
            return;
        }
        if (p < 0 && errno != EINTR) {
            c->reaped = 1;
            c->status = 0;
            return;
        }
        if (cf_now() > end) return;
        struct timespec ts = { 0, 10 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
}

static void kill_all(void)
{
    for (int r = 0; r < opts.np; r++)
        if (!kids[r].reaped) kill(kids[r].pid, SIGKILL);
    for (int r = 0; r < opts.np; r++) reap(&kids[r], 5.0);
}

static const char *case_name(int k) { return k >= 0 && k < cf_ncases ? cf_cases[k].name : "?"; }

static int current_case(const child_t *c)
{
    for (int i = 0; i < nsel; i++)
        if (c->ok[sel[i]] < 0) return sel[i];
    return -1;
}

static void handle(int r, const unsigned char *buf, long n)
{
    child_t *c = &kids[r];
    cf_rec_t h;
    memcpy(&h, buf, sizeof h);
    const unsigned char *data = buf + sizeof h;
    if ((size_t)n < sizeof h + h.len) return;
    c->last = cf_now();
    switch (h.type) {
    case R_GATHER:
        free(c->gdata);
        c->gdata = malloc(h.len ? h.len : 1);
        if (c->gdata && h.len) memcpy(c->gdata, data, h.len);
        c->glen = h.len;
        c->gkase = h.kase;
        c->gstep = h.step;
        c->pending = 1;
        break;
    case R_REPORT:
        if (h.kase >= 0 && h.kase < cf_ncases) {
            c->ok[h.kase] = h.ok ? 1 : 0;
            snprintf(c->msg[h.kase], CF_MSG, "%.*s", (int)(h.len ? h.len : 1) - 1,
                     (const char *)data);
            if (!h.ok) {
                cf_rec_t a = { R_ABORTCASE, -1, h.kase, 0, 0, 0 };
                send_all(&a, NULL, r);
            }
        }
        break;
    case R_EXITING:
        c->live = 0;
        c->left = 1;
        c->pending = 0;
        break;
    case R_DONE:
        c->done = 1;
        c->left = 1;
        c->live = 0;
        c->pending = 0;
        break;
    case R_FATAL:
        snprintf(stop_reason, sizeof stop_reason, "%.*s", (int)(h.len ? h.len : 1) - 1,
                 (const char *)data);
        break;
    default:
        break;
    }
}

static int supervise(void)
{
    unsigned char *buf = malloc(CF_REC_MAX);
    if (!buf) return -1;
    for (;;) {
        int active = 0;
        struct pollfd p[CF_MAX_NP];
        int idx[CF_MAX_NP], n = 0;
        for (int r = 0; r < opts.np; r++) {
            if (kids[r].fd < 0) continue;
            p[n].fd = kids[r].fd;
            p[n].events = POLLIN;
            idx[n++] = r;
            if (kids[r].live) active++;
        }
        if (!active || stop_reason[0]) break;
        int pr = poll(p, (nfds_t)n, 500);
        if (pr < 0 && errno != EINTR) break;
        for (int i = 0; i < n && pr > 0; i++) {
            if (!p[i].revents) continue;
            int r = idx[i];
            child_t *c = &kids[r];
            long got = cf_recv_rec(c->fd, buf);
            if (got > 0) {
                handle(r, buf, got);
                continue;
            }
            /* EOF: fine after R_DONE / R_EXITING, otherwise the rank died. */
            close(c->fd);
            c->fd = -1;
            if (!c->left) {
                reap(c, 2.0);
                char how[128] = "closed its connection to the parent";
                if (c->reaped) describe_status(c->status, how, sizeof how);
                int k = current_case(c);
                snprintf(stop_reason, sizeof stop_reason, "rank %d %s during case '%s'", r, how,
                         case_name(k));
                if (k >= 0) {
                    c->ok[k] = 0;
                    snprintf(c->msg[k], CF_MSG, "%s", stop_reason);
                }
                c->live = 0;
            }
        }
        if (stop_reason[0]) break;
        try_gather();
        flush_cases();
        /* A rank that is not waiting for the others must report within the case timeout. */
        double now = cf_now();
        for (int r = 0; r < opts.np; r++) {
            child_t *c = &kids[r];
            if (c->live && !c->pending && now - c->last > opts.timeout + GRACE_S) {
                int k = current_case(c);
                snprintf(stop_reason, sizeof stop_reason, "rank %d made no progress for %.0f s "
                         "in case '%s' (hung; killed)", r, now - c->last, case_name(k));
                if (k >= 0) {
                    c->ok[k] = 0;
                    snprintf(c->msg[k], CF_MSG, "%s", stop_reason);
                }
                break;
            }
        }
        if (stop_reason[0]) break;
    }
    free(buf);
    return stop_reason[0] ? -1 : 0;
}

int main(int argc, char **argv)
{
    opts.np = 2;
    opts.timeout = 30.0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--np") && i + 1 < argc) {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (*end || v < 2 || v > CF_MAX_NP) {
                fprintf(stderr, "cohort-conformance: --np %s: give 2 to %d processes\n",
                        argv[i], CF_MAX_NP);
                return 2;
            }
            opts.np = (int)v;
        } else if (!strcmp(a, "--timeout") && i + 1 < argc) {
            char *end;
            double v = strtod(argv[++i], &end);
            if (*end || !(v > 0 && v <= 3600)) {
                fprintf(stderr, "cohort-conformance: --timeout %s: give seconds in (0, 3600]\n",
                        argv[i]);
                return 2;
            }
            opts.timeout = v;
        } else if (!strcmp(a, "--only") && i + 1 < argc) {
            opts.only = argv[++i];
        } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
            opts.verbose = 1;
        } else if (a[0] == '-' || opts.plugin) {
            fprintf(stderr, "cohort-conformance: unexpected argument '%s'\n", a);
            usage(stderr);
            return 2;
        } else {
            opts.plugin = a;
        }
    }
    if (!opts.plugin) {
        usage(stderr);
        return 2;
    }
    for (int k = 0; k < cf_ncases && nsel < (int)(sizeof sel / sizeof sel[0]); k++)
        if (!opts.only || strstr(cf_cases[k].name, opts.only)) sel[nsel++] = k;
    if (!nsel) {
        fprintf(stderr, "cohort-conformance: no case matches --only '%s'\n", opts.only);
        return 2;
    }

    /* One job for every rank: same id and secret (inherited through fork; each rank keys the
     * host table's auth() with the secret, child.c's cf_set_secret). */
    char job[64];
    if (!getenv("COHORT_JOB_ID")) {
        snprintf(job, sizeof job, "cohort-conformance-%d", (int)getpid());
        setenv("COHORT_JOB_ID", job, 1);
    }
    if (!getenv("COHORT_SECRET")) {
        unsigned char rnd[16];
        char hex[33];
        if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
            for (size_t i = 0; i < sizeof rnd; i++) rnd[i] = (unsigned char)(rand() ^ getpid());
        for (size_t i = 0; i < sizeof rnd; i++) snprintf(hex + 2 * i, 3, "%02x", rnd[i]);
        setenv("COHORT_SECRET", hex, 1);
    }
    if (!opts.verbose && !getenv("COHORT_DEBUG")) setenv("COHORT_DEBUG", "NONE", 1);
    signal(SIGPIPE, SIG_IGN);

    /* Validate in the parent first: a refused plugin is one clear line, not N. */
    cohort_plugin_t *p = NULL;
    cohort_status_t st = cohort_plugin_open(opts.plugin, &p);
    if (st != COHORT_SUCCESS) {
        printf("FAIL  load and validate the plugin: %s\n", cohort_last_error());
        printf("0 passed, 1 failed\n");
        return 1;
    }
    printf("cohort-conformance: %s (plugin '%s' version %s, ABI %u.%u), %d processes, %.0f s "
           "per case\n", opts.plugin, p->ops->name, p->ops->version ? p->ops->version : "?",
           p->ops->abi_version >> 16, p->ops->abi_version & 0xffff, opts.np, opts.timeout);
    printf("PASS  load and validate the plugin\n");
    npass++;
    fflush(stdout);
    cohort_plugin_close(p);

    for (int r = 0; r < opts.np; r++) {
        kids[r].ok = malloc((size_t)cf_ncases * sizeof *kids[r].ok);
        kids[r].msg = calloc((size_t)cf_ncases, sizeof *kids[r].msg);
        if (!kids[r].ok || !kids[r].msg) {
            fprintf(stderr, "cohort-conformance: out of memory\n");
            return 2;
        }
        for (int k = 0; k < cf_ncases; k++) kids[r].ok[k] = -1;
        kids[r].fd = -1;
    }
    for (int r = 0; r < opts.np; r++) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
            fprintf(stderr, "cohort-conformance: socketpair: %s\n", strerror(errno));
            kill_all();
            return 2;
        }
        int sz = (int)CF_REC_MAX * 4;
        setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
        setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        if (pid < 0) {
            fprintf(stderr, "cohort-conformance: fork: %s\n", strerror(errno));
            close(sv[0]);
            close(sv[1]);
            kill_all();
            return 2;
        }
        if (pid == 0) {
            close(sv[0]);
            for (int q = 0; q < r; q++) close(kids[q].fd);
            /* An application may not ignore SIGPIPE: the plugin must never raise it. */
            signal(SIGPIPE, SIG_DFL);
            cf_child_main(&opts, r, sv[1]);
        }
        close(sv[1]);
        kids[r].pid = pid;
        kids[r].fd = sv[0];
        kids[r].live = 1;
        kids[r].last = cf_now();
    }

    int rc = supervise();
    if (rc != 0) {
        cf_rec_t h = { R_STOP, -1, -1, 0, 0, 0 };
        send_all(&h, NULL, -1);
        for (int r = 0; r < opts.np; r++) reap(&kids[r], 2.0);
        kill_all();
    } else {
        for (int r = 0; r < opts.np; r++) reap(&kids[r], opts.timeout);
        for (int r = 0; r < opts.np; r++)
            if (!kids[r].reaped) kill(kids[r].pid, SIGKILL);
        kill_all();
    }
    flush_cases();
    /* Whatever was not printed failed: not run, or cut short. */
    while (printed < nsel) {
        int k = sel[printed++];
        char text[CF_MSG + 64] = "";
        for (int r = 0; r < opts.np && !text[0]; r++)
            if (kids[r].ok[k] == 0) snprintf(text, sizeof text, "rank %d: %s", r, kids[r].msg[k]);
        if (!text[0]) snprintf(text, sizeof text, "not run: %s", stop_reason[0] ? stop_reason
                               : "a rank stopped early");
        print_case(k, 0, text);
    }
    /* Every rank must finish cleanly: finalize, exit 0 (sanitizer reports make it non-zero). */
    char bad[1024] = "";
    size_t used = 0;
    for (int r = 0; r < opts.np; r++) {
        child_t *c = &kids[r];
        if (c->done && c->reaped && WIFEXITED(c->status) && WEXITSTATUS(c->status) == 0)
            continue;
        if (c->left && !c->done && c->reaped && WIFEXITED(c->status) &&
            WEXITSTATUS(c->status) == 0)
            continue;   /* the peer-exit victim */
        char how[128] = "did not finish";
        if (c->reaped) describe_status(c->status, how, sizeof how);
        if (used < sizeof bad - 160)
            used += (size_t)snprintf(bad + used, sizeof bad - used, "%srank %d %s",
                                     used ? "; " : "", r, how);
    }
    if (bad[0]) {
        nfail++;
        printf("FAIL  clean shutdown (finalize and exit): %s\n", bad);
    } else {
        npass++;
        printf("PASS  clean shutdown (finalize and exit)\n");
    }
    for (int r = 0; r < opts.np; r++) {
        if (kids[r].fd >= 0) close(kids[r].fd);
        free(kids[r].gdata);
        free(kids[r].ok);
        free(kids[r].msg);
    }
    printf("%d passed, %d failed\n", npass, nfail);
    return nfail ? 1 : 0;
}
