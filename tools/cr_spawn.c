/* SPDX-License-Identifier: BSD-3-Clause */
/* Starting cohortrun's ranks: each rank's variables, environment and command line (the command
 * itself for a local rank; the rsh agent, carrying the variables, for a remote one), the
 * open-files limit that many ranks need, and fork/exec, where an exec that fails is reported
 * back through a pipe so that cohortrun can name the rank and the command. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "tools/cr_int.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define EXIT_CANNOT_RUN 127

/* ---------------------------------------------------------------------------------------- */
/* Environment and command line of one rank                                                 */

/* Quote one word for a POSIX shell (what ssh hands the remote command line to). */
static char *shell_quote(const char *w)
{
    int safe = *w != '\0';
    for (const char *p = w; *p; p++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-", *p))
            safe = 0;
    if (safe) return cr_xstrdup(w);
    size_t n = 2;
    for (const char *p = w; *p; p++) n += *p == '\'' ? 4 : 1;
    char *q = cr_xcalloc(n + 1, 1), *o = q;
    *o++ = '\'';
    for (const char *p = w; *p; p++) {
        if (*p == '\'') {
            memcpy(o, "'\\''", 4);
            o += 4;
        } else {
            *o++ = *p;
        }
    }
    *o++ = '\'';
    *o = '\0';
    return q;
}

/* A growable NULL-terminated argv/envp. */
typedef struct strv {
    char **v;
    int n, cap;
} strv_t;

static void strv_push(strv_t *s, char *str)   /* takes ownership */
{
    if (s->n + 2 > s->cap) {
        s->cap = s->cap ? s->cap * 2 : 16;
        s->v = cr_xrealloc(s->v, (size_t)s->cap * sizeof *s->v);
    }
    s->v[s->n++] = str;
    s->v[s->n] = NULL;
}

static void strv_free(strv_t *s)
{
    for (int i = 0; i < s->n; i++) free(s->v[i]);
    free(s->v);
    s->v = NULL;
    s->n = s->cap = 0;
}

/* The variables cohortrun sets for a rank, "NAME=value" each. */
static void rank_vars(const job_t *job, const rank_proc_t *p, strv_t *vars)
{
    strv_push(vars, cr_xasprintf("COHORT_RANK=%d", p->rank));
    strv_push(vars, cr_xasprintf("COHORT_SIZE=%d", job->n));
    strv_push(vars, cr_xasprintf("COHORT_LOCAL_RANK=%d", p->local_rank));
    strv_push(vars, cr_xasprintf("COHORT_LOCAL_SIZE=%d", p->local_size));
    strv_push(vars, cr_xasprintf("COHORT_RENDEZVOUS=%s", job->url));
    strv_push(vars, cr_xstrdup("COHORT_RENDEZVOUS_SERVER=launcher"));
    strv_push(vars, cr_xasprintf("COHORT_JOB_ID=%s", job->job_id));
    strv_push(vars, cr_xasprintf("COHORT_SECRET=%s", job->secret));
    if (job->o->netif) strv_push(vars, cr_xasprintf("COHORT_SOCKET_IFNAME=%s", job->o->netif));
    /* PyTorch's env:// (what torchrun sets, one role). cohort_comm_init reads the COHORT_*
     * ones above first (core/bootstrap.c), so it still meets at cohortrun's rendezvous. */
    strv_push(vars, cr_xasprintf("RANK=%d", p->rank));
    strv_push(vars, cr_xasprintf("WORLD_SIZE=%d", job->n));
    strv_push(vars, cr_xasprintf("LOCAL_RANK=%d", p->local_rank));
    strv_push(vars, cr_xasprintf("LOCAL_WORLD_SIZE=%d", p->local_size));
    strv_push(vars, cr_xasprintf("GROUP_RANK=%d", p->group));
    strv_push(vars, cr_xasprintf("GROUP_WORLD_SIZE=%d", job->ngroups));
    strv_push(vars, cr_xasprintf("ROLE_RANK=%d", p->rank));
    strv_push(vars, cr_xasprintf("ROLE_WORLD_SIZE=%d", job->n));
    strv_push(vars, cr_xasprintf("MASTER_ADDR=%s", job->master_addr));
    strv_push(vars, cr_xasprintf("MASTER_PORT=%d", job->master_port));
    for (int i = 0; i < job->o->nx; i++)
        if (job->o->xvars[i].value && strcmp(job->o->xvars[i].name, "MASTER_ADDR") &&
            strcmp(job->o->xvars[i].name, "MASTER_PORT"))
            strv_push(vars, cr_xasprintf("%s=%s", job->o->xvars[i].name, job->o->xvars[i].value));
}

static int vars_has(const strv_t *vars, const char *entry)
{
    size_t nl = strcspn(entry, "=");
    for (int i = 0; i < vars->n; i++)
        if (!strncmp(vars->v[i], entry, nl) && vars->v[i][nl] == '=') return 1;
    return 0;
}

/* envp: cohortrun's environment with the rank's variables replacing any of the same name. */
static void build_env(const strv_t *vars, strv_t *envp)
{
    for (char **e = environ; *e; e++)
        if (!vars_has(vars, *e)) strv_push(envp, cr_xstrdup(*e));
    for (int i = 0; i < vars->n; i++) strv_push(envp, cr_xstrdup(vars->v[i]));
}

/* What a remote rank gets: the rank's variables, plus every COHORT_* setting of cohortrun's
 * own environment (ssh does not carry the environment over). */
static void remote_vars(const strv_t *vars, strv_t *out)
{
    for (int i = 0; i < vars->n; i++) strv_push(out, cr_xstrdup(vars->v[i]));
    for (char **e = environ; *e; e++)
        if (!strncmp(*e, "COHORT_", 7) && !vars_has(vars, *e)) strv_push(out, cr_xstrdup(*e));
}

/* Agent words with {host} replaced; returns whether the template had {host}. */
static int agent_words(const char *agent, const char *host, strv_t *out)
{
    int templ = strstr(agent, "{host}") != NULL;
    const char *p = agent;
    for (;;) {
        p += strspn(p, " \t");
        if (!*p) break;
        size_t wl = strcspn(p, " \t");
        size_t cap = wl + 1;
        char *w = cr_xcalloc(cap, 1), *o = w;
        for (size_t k = 0; k < wl;) {
            if (wl - k >= 6 && !strncmp(p + k, "{host}", 6)) {
                size_t hl = strlen(host), used = (size_t)(o - w);
                cap += hl;
                w = cr_xrealloc(w, cap);
                o = w + used;
                memcpy(o, host, hl);
                o += hl;
                k += 6;
            } else {
                *o++ = p[k++];
            }
        }
        *o = '\0';
        strv_push(out, w);
        p += wl;
    }
    return templ;
}

static void build_argv(const job_t *job, const rank_proc_t *p, const strv_t *vars, strv_t *argv)
{
    const opts_t *o = job->o;
    if (p->local) {
        for (int i = 0; i < o->ncmd; i++) strv_push(argv, cr_xstrdup(o->cmd[i]));
        return;
    }
    strv_t rv = { 0 };
    remote_vars(vars, &rv);
    int templ = agent_words(o->rsh ? o->rsh : "ssh", p->host, argv);
    if (templ) {
        /* run directly: agent words, then env VAR=val ... cmd args, no shell in between */
        strv_push(argv, cr_xstrdup("env"));
        for (int i = 0; i < rv.n; i++) strv_push(argv, cr_xstrdup(rv.v[i]));
        for (int i = 0; i < o->ncmd; i++) strv_push(argv, cr_xstrdup(o->cmd[i]));
    } else {
        /* as ssh does: host appended, the remote command is a shell command line */
        strv_push(argv, cr_xstrdup(p->host));
        strv_push(argv, cr_xstrdup("env"));
        for (int i = 0; i < rv.n; i++) strv_push(argv, shell_quote(rv.v[i]));
        for (int i = 0; i < o->ncmd; i++) strv_push(argv, shell_quote(o->cmd[i]));
    }
    strv_free(&rv);
}

/* The command line for -v, with the secret hidden. */
static void print_launch(const rank_proc_t *p, const strv_t *argv)
{
    size_t cap = 256, len = 0;
    char *line = cr_xcalloc(cap, 1);
    for (int i = 0; i < argv->n; i++) {
        const char *w = argv->v[i];
        const char *sec = strstr(w, "COHORT_SECRET=");
        char *shown = sec ? cr_xasprintf("%.*sCOHORT_SECRET=<hidden>%s", (int)(sec - w), w,
                                         w[0] == '\'' ? "'" : "")
                          : cr_xstrdup(w);
        size_t sl = strlen(shown);
        if (len + sl + 2 > cap) {
            cap = (len + sl + 2) * 2;
            line = cr_xrealloc(line, cap);
        }
        if (i) line[len++] = ' ';
        memcpy(line + len, shown, sl + 1);
        len += sl;
        free(shown);
    }
    cr_msg("rank %d on %s (local rank %d of %d): %s", p->rank, p->host, p->local_rank,
           p->local_size, line);
    free(line);
}

/* ---------------------------------------------------------------------------------------- */
/* Starting ranks                                                                           */

/* cohortrun's own open-files limit, raised for many ranks; the ranks get the original back. */
static struct rlimit orig_nofile;
static int have_orig_nofile;

/* Two pipes per rank and a rendezvous connection per rank, a few more while starting one: raise
 * the soft limit when that is more than it allows, and refuse before starting anything when
 * even the hard limit is too low. */
void cr_raise_fd_limit(int nranks)
{
    struct rlimit rl;
    rlim_t need = (rlim_t)nranks * 3 + 16, want = need + 48;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= want)
        return;
    orig_nofile = rl;
    have_orig_nofile = 1;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) getrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < need) {
        cr_msg("%d ranks need about %lu open files in cohortrun but the limit is %lu; raise it "
               "(ulimit -n)", nranks, (unsigned long)need, (unsigned long)rl.rlim_cur);
        exit(1);
    }
}

static void close_from(int lowfd)
{
#ifdef SYS_close_range
    if (syscall(SYS_close_range, (unsigned)lowfd, ~0u, 0) == 0) return;
#endif
    struct rlimit rl;
    long maxfd = 65536;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        (long)rl.rlim_cur < maxfd)
        maxfd = (long)rl.rlim_cur;
    for (long fd = lowfd; fd < maxfd; fd++) close((int)fd);
}

/* Child side of fork: never returns. Only async-signal-safe calls (plus execvpe). */
static void child_exec(pid_t pgid, int devnull, int out_w, int err_w, int errpipe_w,
                       char **argv, char **envp)
{
    setpgid(0, pgid);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    int sigs[] = { SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGQUIT };
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) sigaction(sigs[i], &sa, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    int e = 0;
    if (dup2(devnull, 0) < 0 || dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0) e = errno;
    if (errpipe_w != 3) {
        if (dup2(errpipe_w, 3) < 0 && !e) e = errno;
        fcntl(3, F_SETFD, FD_CLOEXEC);
    }
    close_from(4);
    if (have_orig_nofile) setrlimit(RLIMIT_NOFILE, &orig_nofile);
    if (!e) {
        execvpe(argv[0], argv, envp);
        e = errno;
    }
    ssize_t w = write(3, &e, sizeof e);
    (void)w;
    _exit(EXIT_CANNOT_RUN);
}

/* Returns 0, or the exit status for cohortrun when the rank could not be started:
 * EXIT_CANNOT_RUN when exec failed (the rank is then reaped), 1 for pipe/fork failures. */
int cr_spawn_rank(job_t *job, rank_proc_t *p, int devnull)
{
    strv_t vars = { 0 }, envp = { 0 }, argv = { 0 };
    rank_vars(job, p, &vars);
    build_env(&vars, &envp);
    build_argv(job, p, &vars, &argv);
    if (job->o->verbose) print_launch(p, &argv);

    int out[2] = { -1, -1 }, err[2] = { -1, -1 }, ep[2] = { -1, -1 };
    int e = 0;
    if (pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC) || pipe2(ep, O_CLOEXEC)) {
        cr_msg("cannot create pipes for rank %d: %s (raise the open files limit, ulimit -n)",
               p->rank, strerror(errno));
        e = 1;
        goto done;
    }
    pid_t pid = fork();
    if (pid < 0) {
        cr_msg("cannot fork rank %d: %s", p->rank, strerror(errno));
        e = 1;
        goto done;
    }
    if (pid == 0) child_exec(job->pgid, devnull, out[1], err[1], ep[1], argv.v, envp.v);
    /* also from here, so the group exists before the next fork whatever runs first */
    if (setpgid(pid, job->pgid ? job->pgid : pid) != 0 && errno != EACCES && errno != ESRCH)
        cr_msg("warning: cannot put rank %d in cohortrun's process group: %s", p->rank,
               strerror(errno));
    if (!job->pgid) job->pgid = pid;
    p->pid = pid;
    p->running = 1;
    close(out[1]);
    close(err[1]);
    close(ep[1]);
    out[1] = err[1] = ep[1] = -1;
    int child_errno = 0;
    ssize_t k;
    do k = read(ep[0], &child_errno, sizeof child_errno);
    while (k < 0 && errno == EINTR);
    if (k == (ssize_t)sizeof child_errno) {
        const char *what = p->local ? "the command" : "the rsh agent";
        cr_msg("cannot start rank %d on %s: %s '%s': %s", p->rank, p->host, what, argv.v[0],
               strerror(child_errno ? child_errno : EINVAL));
        e = EXIT_CANNOT_RUN;
        int st;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
        p->running = 0;
        p->status = st;
        close(out[0]);
        close(err[0]);
        out[0] = err[0] = -1;
        goto done;
    }
    fcntl(out[0], F_SETFL, fcntl(out[0], F_GETFL) | O_NONBLOCK);
    fcntl(err[0], F_SETFL, fcntl(err[0], F_GETFL) | O_NONBLOCK);
    p->out[0].fd = out[0];
    p->out[1].fd = err[0];
    out[0] = err[0] = -1;
done:
    for (int i = 0; i < 2; i++) {
        if (out[i] >= 0) close(out[i]);
        if (err[i] >= 0) close(err[i]);
        if (ep[i] >= 0) close(ep[i]);
    }
    strv_free(&vars);
    strv_free(&envp);
    strv_free(&argv);
    return e;
}
