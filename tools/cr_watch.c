/* SPDX-License-Identifier: BSD-3-Clause */
/* Watching cohortrun's ranks: the signal handler and its self-pipe, reaping, stopping the job
 * (SIGTERM, then SIGKILL), naming the rank that caused a failure, and the main loop that polls
 * the ranks' output and the self-pipe, serves the rendezvous and keeps every deadline. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "core/rendezvous.h"
#include "core/timeutil.h"
#include "tools/cr_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define EXIT_TIMEOUT 124
#define GRACE_S 3.0             /* SIGTERM -> SIGKILL */
#define NOTICE_GRACE_S 2.0      /* a rank failed and the others were told -> SIGTERM */
#define VERDICT_WAIT_S 2.0      /* a rank failed: how long to wait for the one that caused it */
#define UNJOINED_GRACE_S 1.0    /* a rank exited 0 unseen at the rendezvous: its hello may be
                                 * still in flight for this long */
#define KILL_WAIT_S 5.0         /* after SIGKILL, how long to wait for the ranks to be reaped */

/* "0-3,5,7-9" from a sorted list of ranks. */
static char *format_ranks(const int *ranks, int n)
{
    size_t cap = 64, len = 0;
    char *s = cr_xcalloc(cap, 1);
    for (int i = 0; i < n;) {
        int j = i;
        while (j + 1 < n && ranks[j + 1] == ranks[j] + 1) j++;
        char one[48];
        if (j - i >= 2) snprintf(one, sizeof one, "%s%d-%d", len ? "," : "", ranks[i], ranks[j]);
        else if (j == i + 1)
            snprintf(one, sizeof one, "%s%d,%d", len ? "," : "", ranks[i], ranks[j]);
        else snprintf(one, sizeof one, "%s%d", len ? "," : "", ranks[i]);
        size_t ol = strlen(one);
        if (len + ol + 1 > cap) {
            cap = (len + ol + 1) * 2;
            s = cr_xrealloc(s, cap);
        }
        memcpy(s + len, one, ol + 1);
        len += ol;
        i = j + 1;
    }
    return s;
}

/* Signal plumbing: the handler writes one record {signal, pid} to the self-pipe. For SIGCHLD the
 * pid (si_pid) says which child exited first: wait() hands zombies out in fork order, and when
 * one rank's failure makes the others fail within a millisecond, the rank to blame is the one
 * whose SIGCHLD came first. */
static int sig_pipe[2] = { -1, -1 };
volatile sig_atomic_t cr_got_signal;       /* last SIGINT/SIGTERM/SIGHUP */
static volatile sig_atomic_t signal_count; /* of those, since the main loop last looked */

static void on_signal(int sig, siginfo_t *si, void *ctx)
{
    (void)ctx;
    int saved = errno;
    if (sig != SIGCHLD) {
        cr_got_signal = sig;
        signal_count = signal_count + 1;
    }
    int rec[2] = { sig, sig == SIGCHLD && si ? (int)si->si_pid : 0 };
    ssize_t w = write(sig_pipe[1], rec, sizeof rec);   /* atomic (< PIPE_BUF); lost if full */
    (void)w;
    errno = saved;
}

void cr_setup_signals(void)
{
    if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
        cr_msg("cannot create a pipe: %s", strerror(errno));
        exit(1);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART | SA_SIGINFO;
    sigaction(SIGCHLD, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

#define MAX_HINTS 256
typedef struct exit_hints {
    pid_t pid[MAX_HINTS];   /* SIGCHLD senders, in delivery order */
    int n;
} exit_hints_t;

static void drain_sig_pipe(exit_hints_t *h)
{
    int rec[64][2];
    ssize_t k;
    while ((k = read(sig_pipe[0], rec, sizeof rec)) > 0)
        for (size_t i = 0; i < (size_t)k / sizeof rec[0]; i++)
            if (rec[i][0] == SIGCHLD && rec[i][1] > 0 && h->n < MAX_HINTS)
                h->pid[h->n++] = (pid_t)rec[i][1];
}

/* ---------------------------------------------------------------------------------------- */
/* Termination                                                                              */

static int count_running(const job_t *job, int *list)
{
    int k = 0;
    for (int r = 0; r < job->n; r++)
        if (job->ranks[r].running) {
            if (list) list[k] = r;
            k++;
        }
    return k;
}

static void signal_ranks(job_t *job, int sig)
{
    if (job->pgid > 0) kill(-job->pgid, sig);
    for (int r = 0; r < job->n; r++)
        if (job->ranks[r].running) kill(job->ranks[r].pid, sig);
}

void cr_start_termination(job_t *job, int exit_code)
{
    if (job->terminating) return;
    job->terminating = 1;
    job->exit_code = exit_code;
    job->term_deadline = cohort_now_s() + GRACE_S;
    signal_ranks(job, SIGTERM);
}

static void send_sigkill(job_t *job)
{
    if (job->sigkill_sent) return;
    job->sigkill_sent = 1;
    job->kill_deadline = cohort_now_s() + KILL_WAIT_S;
    signal_ranks(job, SIGKILL);
}

static void describe_status(int status, char *buf, size_t len)
{
    if (WIFEXITED(status)) {
        snprintf(buf, len, "exited with status %d", WEXITSTATUS(status));
    } else if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        const char *name = strsignal(sig);
        snprintf(buf, len, "was killed by signal %d (%s)%s", sig, name ? name : "?",
                 WCOREDUMP(status) ? ", core dumped" : "");
    } else {
        snprintf(buf, len, "ended with wait status 0x%x", (unsigned)status);
    }
}

/* The job failed because of rank p: one line naming it (why: how it ended), the other ranks
 * told through the rendezvous and given NOTICE_GRACE_S to report it, then stopped. */
static void fail_job(job_t *job, rank_proc_t *p, const char *why, const char *after, int code)
{
    int others = count_running(job, NULL);
    if (others)
        cr_msg("rank %d (host %s, pid %d) %s%s; terminating the other %d %s", p->rank, p->host,
               (int)p->pid, why, after, others, cr_plural(others, "rank", "ranks"));
    else
        cr_msg("rank %d (host %s, pid %d) %s%s", p->rank, p->host, (int)p->pid, why, after);
    job->failed_code = code ? code : 1;
    if (job->srv_active && others) {
        /* Tell the survivors through the job's rendezvous (their collectives fail at once,
         * naming this rank) and give them NOTICE_GRACE_S to report it and exit on their own.
         * (Nothing happens when the rendezvous already failed the job: its first failure is
         * the one every rank heard.) */
        char text[512];
        snprintf(text, sizeof text, "rank %d (host %s, pid %d) %s", p->rank, p->host,
                 (int)p->pid, why);
        cohort_rdv_server_fail(job->srv, p->rank, text);
        job->notice_deadline = cohort_now_s() + NOTICE_GRACE_S;
        return;
    }
    cr_start_termination(job, job->failed_code);
}

static void rank_info(const job_t *job, int rank, cohort_rdv_rank_info_t *info)
{
    if (job->srv) {
        cohort_rdv_server_rank_info(job->srv, rank, info);
    } else {
        memset(info, 0, sizeof *info);
        info->blamed = -1;
    }
}

/* Which rank caused the failure, when several end within a short time (docs/launching.md):
 *  1. the rank that vanished first: its rendezvous connection closed without a goodbye (killed,
 *     crashed, _exit); the rendezvous knows the order in which connections were lost, and a
 *     lost rank that had reported another lost rank first (it then crashed on the error) comes
 *     after that one;
 *  2. else the first rank reaped that was killed by a signal (one that never joined);
 *  3. else the first rank reaped that failed: ranks that exit with an error after a peer was
 *     lost say goodbye first, so they come last.
 * *wait: the answer may still change, or its status is still to come: the chosen rank is lost
 * but not reaped yet, or (3) the rank reported a rank as lost that is still running. */
static rank_proc_t *root_cause(job_t *job, int *wait)
{
    rank_proc_t *best = NULL;
    int best_key = INT_MAX;
    cohort_rdv_rank_info_t info, other;
    *wait = 0;
    for (int pass = 0; pass < 2 && !best; pass++)
        for (int r = 0; r < job->n; r++) {
            rank_info(job, r, &info);
            if (info.left != 2 || info.lost_order >= best_key) continue;
            if (pass == 0 && info.blamed >= 0) {
                rank_info(job, info.blamed, &other);
                if (other.left == 2) continue;   /* it reported that one's loss first */
            }
            best = &job->ranks[r];
            best_key = info.lost_order;
        }
    if (best) {
        *wait = best->running;
        return best;
    }
    for (int r = 0; r < job->n; r++) {
        rank_proc_t *p = &job->ranks[r];
        if (p->failed && WIFSIGNALED(p->status) && p->reap_seq < best_key) {
            best = p;
            best_key = p->reap_seq;
        }
    }
    if (best) return best;
    for (int r = 0; r < job->n; r++) {
        rank_proc_t *p = &job->ranks[r];
        if (p->failed && p->reap_seq < best_key) {
            best = p;
            best_key = p->reap_seq;
        }
    }
    if (best) {
        rank_info(job, best->rank, &info);
        *wait = info.blamed >= 0 && job->ranks[info.blamed].running;
    }
    return best;
}

/* Names the cause of the failure once it is known (or VERDICT_WAIT_S passed, or force). */
static void try_verdict(job_t *job, int force)
{
    if (!job->verdict_pending) return;
    /* what the rendezvous has not read yet: the connections of the ranks just reaped */
    if (job->srv_active && !job->terminating) cohort_rdv_server_progress(job->srv, 0);
    int wait;
    rank_proc_t *p = root_cause(job, &wait);
    if (p && wait && !force && cohort_now_s() < job->verdict_deadline) return;
    job->verdict_pending = 0;
    if (!p) return;
    cohort_rdv_rank_info_t info;
    rank_info(job, p->rank, &info);
    char why[320];
    if (p->running) {
        snprintf(why, sizeof why, "left the job: its connection to the rendezvous closed without "
                 "a goodbye, and the process had not ended %g s later", VERDICT_WAIT_S);
    } else {
        describe_status(p->status, why, sizeof why);
        if (info.left == 2 && WIFEXITED(p->status)) {
            size_t l = strlen(why);
            snprintf(why + l, sizeof why - l, " without a goodbye to the job (its rendezvous "
                     "connection closed first: _exit, or a crash that its exit status hides)");
        }
    }
    /* the ranks that failed after it, as the consequence */
    int *list = cr_xcalloc((size_t)job->n, sizeof *list), k = 0;
    for (int r = 0; r < job->n; r++)
        if (job->ranks[r].failed && &job->ranks[r] != p) list[k++] = r;
    char after[160] = "";
    if (k) {
        char *ranks = format_ranks(list, k);
        snprintf(after, sizeof after, "; %s %.100s failed after it", cr_plural(k, "rank", "ranks"),
                 ranks);
        free(ranks);
    }
    free(list);
    int code = p->running ? 1 : WIFEXITED(p->status) ? WEXITSTATUS(p->status)
                              : WIFSIGNALED(p->status) ? 128 + WTERMSIG(p->status) : 1;
    fail_job(job, p, why, after, code);
}

/* A rank that exited 0 without joining, while others joined: they wait for it at the
 * rendezvous, where it will never come. Checked once UNJOINED_GRACE_S passed (its hello may be
 * on its way) and some rank joined. */
static void check_unjoined(job_t *job, double now)
{
    if (!job->nunjoined || !job->srv || job->terminating || job->failed_code ||
        job->verdict_pending || cohort_rdv_server_arrived(job->srv) == 0)
        return;
    for (int r = 0; r < job->n; r++) {
        rank_proc_t *p = &job->ranks[r];
        if (!p->unjoined) continue;
        cohort_rdv_rank_info_t info;
        rank_info(job, r, &info);
        if (info.arrived) {
            p->unjoined = 0;
            job->nunjoined--;
            continue;
        }
        if (now < p->exited_at + UNJOINED_GRACE_S) continue;
        char why[256];
        snprintf(why, sizeof why, "exited with status 0 without joining the job: it never "
                 "reached the rendezvous, where %d %s %s for it (did it call cohort_comm_init?)",
                 cohort_rdv_server_arrived(job->srv),
                 cr_plural(cohort_rdv_server_arrived(job->srv), "rank", "ranks"),
                 cr_plural(cohort_rdv_server_arrived(job->srv), "waits", "wait"));
        fail_job(job, p, why, "", 1);
        return;
    }
}

static void rank_exited(job_t *job, rank_proc_t *p, int status)
{
    p->running = 0;
    p->status = status;
    p->reap_seq = ++job->nreaped;
    p->exited_at = cohort_now_s();
    /* its last words come before our line about it */
    cr_stream_read(job, p, 0, 1);
    cr_stream_read(job, p, 1, 1);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        if (job->srv && job->srv_active) {
            p->unjoined = 1;
            job->nunjoined++;
        }
        return;
    }
    p->failed = 1;
    if (job->terminating || job->failed_code || job->verdict_pending) return;
    /* who to name is decided by try_verdict, once the ranks that ended together are known */
    job->verdict_pending = 1;
    job->verdict_deadline = cohort_now_s() + VERDICT_WAIT_S;
}

static rank_proc_t *rank_of_pid(job_t *job, pid_t pid)
{
    for (int r = 0; r < job->n; r++)
        if (job->ranks[r].running && job->ranks[r].pid == pid) return &job->ranks[r];
    return NULL;
}

/* Reaps every exited child (ranks, and the ranks' orphans that cohortrun adopted as subreaper);
 * the ranks of one batch are handled in the order their SIGCHLDs arrived. */
static void reap(job_t *job, exit_hints_t *hints)
{
    for (;;) {
        struct { rank_proc_t *p; int status; } batch[64];
        int nb = 0;
        while (nb < 64) {
            int status;
            pid_t pid = waitpid(-1, &status, WNOHANG);
            if (pid < 0 && errno == EINTR) continue;
            if (pid <= 0) break;
            rank_proc_t *p = rank_of_pid(job, pid);
            if (!p) continue;
            p->running = 0;   /* reaped: rank_of_pid must not find it again */
            batch[nb].p = p;
            batch[nb++].status = status;
        }
        if (nb == 0) break;
        int done = 0;
        for (int h = 0; h < hints->n; h++)
            for (int b = done; b < nb; b++)
                if (batch[b].p->pid == hints->pid[h]) {
                    rank_proc_t *tp = batch[b].p;
                    int ts = batch[b].status;
                    memmove(&batch[done + 1], &batch[done], (size_t)(b - done) * sizeof batch[0]);
                    batch[done].p = tp;
                    batch[done++].status = ts;
                    break;
                }
        for (int b = 0; b < nb; b++) rank_exited(job, batch[b].p, batch[b].status);
        if (nb < 64) break;
    }
    hints->n = 0;
    try_verdict(job, job->terminating);
}

void cr_handle_signals(job_t *job)
{
    int sig = cr_got_signal;
    if (!sig || signal_count == 0) return;
    double now = cohort_now_s();
    if (!job->interrupted_at) {
        job->interrupted_at = now;
        signal_count = 0;
        const char *name = sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "SIGHUP";
        int running = count_running(job, NULL);
        if (!job->terminating) {
            cr_msg("interrupted by %s; terminating %d %s (interrupt again to kill at once)", name,
                   running, cr_plural(running, "rank", "ranks"));
            cr_start_termination(job, 128 + sig);
            return;
        }
        /* already stopping the job because of a failure: an interrupt means hurry up */
    } else if (now - job->interrupted_at < 0.25) {
        /* the same interrupt delivered twice (a terminal and a wrapper such as timeout(1) both
         * forward it): not a second request */
        signal_count = 0;
        return;
    }
    signal_count = 0;
    if (!job->sigkill_sent) {
        cr_msg("interrupted again; killing the ranks");
        send_sigkill(job);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Main loop                                                                                */

static int ms_until(double deadline, double now)
{
    double ms = (deadline - now) * 1000.0;
    if (ms <= 0) return 0;
    if (ms > 100000) return 100000;
    return (int)ms + 1;
}

int cr_run(job_t *job, double rdv_timeout_s)
{
    double start = cohort_now_s();
    double job_deadline = job->o->timeout_s > 0 ? start + job->o->timeout_s : 0;
    double first_arrival = 0;
    int *list = cr_xcalloc((size_t)job->n, sizeof *list);
    struct pollfd *pfd = cr_xcalloc((size_t)job->n * 2 + 1, sizeof *pfd);
    int *pfd_rank = cr_xcalloc((size_t)job->n * 2 + 1, sizeof *pfd_rank);
    exit_hints_t hints = { .n = 0 };

    for (;;) {
        double now = cohort_now_s();
        /* deadlines */
        if (job_deadline && !job->terminating && now >= job_deadline) {
            int k = count_running(job, list);
            char *ranks = format_ranks(list, k);
            cr_msg("job time limit reached (--timeout %g s); %s %s still running; terminating %s",
                   job->o->timeout_s, cr_plural(k, "rank", "ranks"), ranks,
                   cr_plural(k, "it", "them"));
            free(ranks);
            cr_start_termination(job, EXIT_TIMEOUT);
        }
        /* (once every rank arrived, the ranks keep their connection as the job's control
         * channel for as long as they run: no deadline then) */
        if (job->srv_active && !job->terminating && first_arrival > 0 &&
            cohort_rdv_server_arrived(job->srv) < job->n && now >= first_arrival + rdv_timeout_s) {
            char missing[4096] = "";
            cohort_rdv_server_missing(job->srv, missing, sizeof missing);
            int running = count_running(job, NULL);
            cr_msg("%s %s did not reach the rendezvous within %g s (COHORT_TIMEOUT) of the first "
                   "rank; terminating the %d running %s", strpbrk(missing, ",-") ? "ranks" : "rank",
                   missing, rdv_timeout_s, running, cr_plural(running, "rank", "ranks"));
            cr_start_termination(job, 1);
        }
        if (job->verdict_pending && now >= job->verdict_deadline) try_verdict(job, 1);
        check_unjoined(job, now);
        if (job->failed_code && !job->terminating && now >= job->notice_deadline)
            cr_start_termination(job, job->failed_code);
        if (job->terminating && !job->sigkill_sent && now >= job->term_deadline) {
            int k = count_running(job, list);
            if (k) {
                char *ranks = format_ranks(list, k);
                cr_msg("%s %s did not exit within %g s of SIGTERM; sending SIGKILL",
                       cr_plural(k, "rank", "ranks"), ranks, GRACE_S);
                free(ranks);
            }
            send_sigkill(job);
        }
        /* Done when every rank is reaped; a terminated job also waits (within the grace
         * period, then SIGKILL) for what is left of its process group: the ranks' children. */
        int running = count_running(job, NULL);
        if (running == 0 &&
            (!job->terminating || job->pgid <= 0 || kill(-job->pgid, 0) != 0))
            break;
        if (job->sigkill_sent && now >= job->kill_deadline) {
            int k = count_running(job, list);
            if (k) {
                char *ranks = format_ranks(list, k);
                cr_msg("%s %s still not reaped %g s after SIGKILL; giving up on %s",
                       cr_plural(k, "rank", "ranks"), ranks, KILL_WAIT_S,
                       cr_plural(k, "it", "them"));
                free(ranks);
            }
            break;
        }

        /* wait */
        int timeout = job->srv_active && !job->terminating ? 5 : 100;
        if (job_deadline && !job->terminating && ms_until(job_deadline, now) < timeout)
            timeout = ms_until(job_deadline, now);
        if (job->terminating && !job->sigkill_sent && ms_until(job->term_deadline, now) < timeout)
            timeout = ms_until(job->term_deadline, now);
        if (job->failed_code && !job->terminating && ms_until(job->notice_deadline, now) < timeout)
            timeout = ms_until(job->notice_deadline, now);
        if (job->verdict_pending && ms_until(job->verdict_deadline, now) < timeout)
            timeout = ms_until(job->verdict_deadline, now);
        int nfds = 0;
        pfd[nfds].fd = sig_pipe[0];
        pfd[nfds].events = POLLIN;
        pfd_rank[nfds++] = -1;
        for (int r = 0; r < job->n; r++)
            for (int s = 0; s < 2; s++)
                if (job->ranks[r].out[s].fd >= 0) {
                    pfd[nfds].fd = job->ranks[r].out[s].fd;
                    pfd[nfds].events = POLLIN;
                    pfd_rank[nfds++] = r * 2 + s;
                }
        int ready = poll(pfd, (nfds_t)nfds, timeout);
        if (ready < 0 && errno != EINTR) {
            cr_msg("poll failed: %s", strerror(errno));
            cr_start_termination(job, 1);
            ready = 0;
        }
        if (ready > 0) {
            for (int i = 1; i < nfds; i++)
                if (pfd[i].revents)
                    cr_stream_read(job, &job->ranks[pfd_rank[i] / 2], pfd_rank[i] % 2, 0);
        }
        drain_sig_pipe(&hints);   /* always: an EINTR from poll means a record is waiting */
        cr_handle_signals(job);
        reap(job, &hints);

        /* Serve the rendezvous: a slice while idle, one pass while output flows. Signals
         * (SIGCHLD, SIGINT) interrupt the server's poll, so only output waits for the slice.
         * Not while the job is being stopped: the ranks are going anyway, and the server would
         * only add a line for each rank that leaves. */
        if (job->srv_active && !job->terminating) {
            int slice = ready > 0 ? 0 : 50;
            now = cohort_now_s();
            if (job_deadline && ms_until(job_deadline, now) < slice)
                slice = ms_until(job_deadline, now);
            cohort_rdv_server_progress(job->srv, slice);
            if (first_arrival == 0 && cohort_rdv_server_arrived(job->srv) > 0)
                first_arrival = cohort_now_s();
            /* (also once every rank left: a rank that calls cohort_comm_init again is told at
             * once that it already joined, instead of waiting for an answer until
             * COHORT_TIMEOUT) */
        }
    }

    /* what is left in the pipes (processes that outlived their rank may still hold them) */
    for (int r = 0; r < job->n; r++)
        for (int s = 0; s < 2; s++) {
            cr_stream_read(job, &job->ranks[r], s, 1);
            cr_stream_close(job, &job->ranks[r], s);
        }
    free(list);
    free(pfd);
    free(pfd_rank);
    return job->terminating ? job->exit_code : job->failed_code;
}
