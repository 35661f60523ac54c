/* SPDX-License-Identifier: BSD-3-Clause */
/* cohortrun: the launcher of a cohort job.
 *
 * It creates the job's identity (job id, secret), hosts the rendezvous server the ranks meet at,
 * places N ranks on this host and on remote hosts (started through an rsh agent), relays their
 * output line by line, and watches them: when one fails the others are stopped and cohortrun
 * exits non-zero with one line naming the rank, its host and the cause.
 *
 * One thread. The main loop polls the ranks' stdout/stderr pipes and a self-pipe that the
 * SIGCHLD/SIGINT/SIGTERM/SIGHUP handlers write to, then gives the rendezvous server a short
 * slice (cohort_rdv_server_progress), then checks its deadlines. Every wait is bounded.
 *
 * docs/launching.md is the user's documentation.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "core/config.h"
#include "core/log.h"
#include "core/netif.h"
#include "core/parse.h"
#include "core/rendezvous.h"
#include "core/timeutil.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define EXIT_USAGE 2
#define EXIT_TIMEOUT 124
#define EXIT_CANNOT_RUN 127
#define GRACE_S 3.0             /* SIGTERM -> SIGKILL */
#define NOTICE_GRACE_S 2.0      /* a rank failed and the others were told -> SIGTERM */
#define VERDICT_WAIT_S 2.0      /* a rank failed: how long to wait for the one that caused it */
#define UNJOINED_GRACE_S 1.0    /* a rank exited 0 unseen at the rendezvous: its hello may be
                                 * still in flight for this long */
#define KILL_WAIT_S 5.0         /* after SIGKILL, how long to wait for the ranks to be reaped */
#define LINE_MAX_BYTES 65536    /* longer lines are cut (a newline is inserted) */
#define NP_MAX 1000000L

/* ---------------------------------------------------------------------------------------- */
/* Small helpers                                                                            */

static void die_oom(void)
{
    static const char msg[] = "cohortrun: out of memory\n";
    ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)w;
    _exit(1);
}

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) die_oom();
    return p;
}

static void *xrealloc(void *p, size_t size)
{
    void *q = realloc(p, size ? size : 1);
    if (!q) die_oom();
    return q;
}

static char *xstrdup(const char *s)
{
    char *p = strdup(s);
    if (!p) die_oom();
    return p;
}

static char *xasprintf(const char *fmt, ...) COHORT_PRINTF(1, 2);
static char *xasprintf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (n < 0) die_oom();
    return s;
}

/* cohortrun's own messages: one line on stderr, "cohortrun: ..." */
static void msg(const char *fmt, ...) COHORT_PRINTF(1, 2);
static void msg(const char *fmt, ...)
{
    char line[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(line, sizeof line, "cohortrun: ");
    n += vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof line - 2) n = (int)sizeof line - 2;
    line[n++] = '\n';
    for (size_t off = 0; off < (size_t)n;) {
        ssize_t w = write(STDERR_FILENO, line + off, (size_t)n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        off += (size_t)w;
    }
}

static void usage_error(const char *fmt, ...) COHORT_PRINTF(1, 2);
static void usage_error(const char *fmt, ...)
{
    char text[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    msg("%s", text);
    msg("try 'cohortrun --help'");
    exit(EXIT_USAGE);
}

/* Library calls whose failure cohortrun reports itself (from cohort_last_error()) run quietly,
 * so the message is not printed twice: COHORT_DEBUG=NONE for their duration unless the user set
 * COHORT_DEBUG. */
static int quiet_set;
static void quiet_begin(void)
{
    if (getenv("COHORT_DEBUG")) return;
    setenv("COHORT_DEBUG", "NONE", 1);
    quiet_set = 1;
    cohort_log_reset();
}
static void quiet_end(void)
{
    if (!quiet_set) return;
    unsetenv("COHORT_DEBUG");
    quiet_set = 0;
    cohort_log_reset();
}

static const char *plural(long n, const char *one, const char *many) { return n == 1 ? one : many; }

/* "0-3,5,7-9" from a sorted list of ranks. */
static char *format_ranks(const int *ranks, int n)
{
    size_t cap = 64, len = 0;
    char *s = xcalloc(cap, 1);
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
            s = xrealloc(s, cap);
        }
        memcpy(s + len, one, ol + 1);
        len += ol;
        i = j + 1;
    }
    return s;
}

static int valid_var_name(const char *s, size_t len)
{
    if (len == 0 || !(s[0] == '_' || (s[0] >= 'A' && s[0] <= 'Z') || (s[0] >= 'a' && s[0] <= 'z')))
        return 0;
    for (size_t i = 1; i < len; i++)
        if (!(s[i] == '_' || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= 'a' && s[i] <= 'z') ||
              (s[i] >= '0' && s[i] <= '9')))
            return 0;
    return 1;
}

/* The variables cohortrun sets for every rank (rank_vars): -x cannot pass them, since cohortrun's
 * own value would replace the user's without a word. The torchrun-style ones (PyTorch's env://)
 * are copies of the COHORT_* placement. MASTER_ADDR and MASTER_PORT are set too, but are not
 * here: a value the user gives (-x, or cohortrun's environment) is kept (torch_master). */
static const char *const own_vars[] = { "COHORT_RANK", "COHORT_SIZE", "COHORT_LOCAL_RANK",
                                        "COHORT_LOCAL_SIZE", "COHORT_RENDEZVOUS",
                                        "COHORT_RENDEZVOUS_SERVER", "COHORT_JOB_ID",
                                        "COHORT_SECRET", "RANK", "WORLD_SIZE", "LOCAL_RANK",
                                        "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                                        "ROLE_RANK", "ROLE_WORLD_SIZE", NULL };

static int is_own_var(const char *name)
{
    for (int i = 0; own_vars[i]; i++)
        if (!strcmp(name, own_vars[i])) return 1;
    return 0;
}

/* A host name cohortrun can hand to the rsh agent: letters, digits, '.', '-', '_', an IPv6
 * address's ':' and '%', and ssh's user@host. Anything else (';', '$', spaces, quotes, a
 * leading '-' that ssh would take for an option) is a typo or worse. */
static int valid_host_name(const char *h)
{
    if (!*h || *h == '-' || *h == '@') return 0;
    for (const char *p = h; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              strchr(".-_:%@", *p)))
            return 0;
    return 1;
}

/* Quote one word for a POSIX shell (what ssh hands the remote command line to). */
static char *shell_quote(const char *w)
{
    int safe = *w != '\0';
    for (const char *p = w; *p; p++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-", *p))
            safe = 0;
    if (safe) return xstrdup(w);
    size_t n = 2;
    for (const char *p = w; *p; p++) n += *p == '\'' ? 4 : 1;
    char *q = xcalloc(n + 1, 1), *o = q;
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
        s->v = xrealloc(s->v, (size_t)s->cap * sizeof *s->v);
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

/* ---------------------------------------------------------------------------------------- */
/* Options                                                                                  */

typedef struct xvar {
    char *name;
    char *value;     /* NULL: not set anywhere (warned about, not passed) */
} xvar_t;

typedef struct opts {
    long np;
    int np_given;
    const char *hostlist, *hostfile, *netif, *rsh;
    int tag_output, oversubscribe, verbose;
    int map_by_node;               /* --map-by node: round-robin over the hosts */
    double timeout_s;              /* 0: no limit */
    xvar_t *xvars;
    int nx;
    char **cmd;
    int ncmd;
} opts_t;

static void usage(FILE *f)
{
    fputs(
"Usage: cohortrun -np N [options] [--] command [args...]\n"
"Starts N ranks of a cohort job, serves their rendezvous and watches them.\n"
"\n"
"  -np, -n, --np N            number of ranks (with hosts: defaults to all their slots)\n"
"  -H, --host LIST            hosts and slots, 'host:slots,host,...' (a bare host has 1 slot);\n"
"                             without -H/--hostfile every rank runs on this host\n"
"      --hostfile FILE        one 'host slots=N' per line; # starts a comment\n"
"      --oversubscribe        allow more ranks than slots (the extra ones go round-robin)\n"
"      --map-by slot|node     slot (default): fill each host's slots in order (ranks 0,1 on\n"
"                             the first host, ...); node: one rank per host in turn, skipping\n"
"                             full hosts (ranks 0,2 on the first of 2 hosts, 1,3 on the second)\n"
"      --network-interface IF interfaces for the rendezvous address and the ranks' sockets;\n"
"                             sets COHORT_SOCKET_IFNAME (eth0, ^docker,lo, 10.0.0.0/8, ...)\n"
"  -x VAR[=VALUE]             pass VAR to every rank, with VALUE or from this environment\n"
"      --rsh CMD              agent that starts remote ranks (default: ssh); '{host}' in CMD\n"
"                             is replaced by the host (e.g. 'ip netns exec {host}'), otherwise\n"
"                             the host is appended as for ssh\n"
"      --tag-output           prefix every line of output with [rank]\n"
"      --timeout SEC          wall-clock limit for the whole job\n"
"  -v, --verbose              say how each rank is started\n"
"  -h, --help                 this help\n"
"      --version              print the version\n"
"\n"
"Every rank gets COHORT_RANK, COHORT_SIZE, COHORT_LOCAL_RANK, COHORT_LOCAL_SIZE,\n"
"COHORT_RENDEZVOUS, COHORT_RENDEZVOUS_SERVER, COHORT_JOB_ID and COHORT_SECRET, and for\n"
"PyTorch's env:// RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK,\n"
"GROUP_WORLD_SIZE, ROLE_RANK and ROLE_WORLD_SIZE (see docs/launching.md); -x cannot set\n"
"these. MASTER_ADDR and MASTER_PORT (rank 0's host, a free port) are set too, unless given\n"
"with -x or in cohortrun's environment.\n"
"Exit status: 0 when every rank exits 0; else the status of the rank named as the cause\n"
"(128+N when it was killed by signal N), 124 when --timeout expires, 128+N when cohortrun\n"
"gets signal N, 127 when a rank cannot be started, 2 for bad usage, 1 for other failures.\n", f);
}

/* Matches "-o value", "--opt value" and "--opt=value". Returns the value or NULL (no match). */
static const char *opt_arg(int argc, char **argv, int *i, const char *a, const char *name)
{
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0) return NULL;
    if (a[n] == '=' && name[1] == '-') return a + n + 1;
    if (a[n] != '\0') return NULL;
    if (*i + 1 >= argc) usage_error("option %s needs a value", name);
    return argv[++*i];
}

static void parse_options(int argc, char **argv, opts_t *o)
{
    memset(o, 0, sizeof *o);
    int i;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--")) {
            i++;
            break;
        }
        if (a[0] != '-' || a[1] == '\0') break;   /* the command */
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(a, "--version")) {
            printf("cohortrun (cohort) %s\n", cohort_version());
            exit(0);
        } else if ((v = opt_arg(argc, argv, &i, a, "-np")) ||
                   (v = opt_arg(argc, argv, &i, a, "-n")) ||
                   (v = opt_arg(argc, argv, &i, a, "--np"))) {
            quiet_begin();
            cohort_status_t st = cohort_parse_long("-np", v, 1, NP_MAX, &o->np);
            quiet_end();
            if (st) usage_error("%s", cohort_last_error());
            o->np_given = 1;
        } else if ((v = opt_arg(argc, argv, &i, a, "-H")) ||
                   (v = opt_arg(argc, argv, &i, a, "--host"))) {
            o->hostlist = v;
        } else if ((v = opt_arg(argc, argv, &i, a, "--hostfile")) ||
                   (v = opt_arg(argc, argv, &i, a, "--machinefile"))) {
            o->hostfile = v;
        } else if ((v = opt_arg(argc, argv, &i, a, "--network-interface"))) {
            if (!*v) usage_error("--network-interface needs a non-empty value");
            o->netif = v;
        } else if ((v = opt_arg(argc, argv, &i, a, "-x"))) {
            const char *eq = strchr(v, '=');
            size_t nl = eq ? (size_t)(eq - v) : strlen(v);
            if (!valid_var_name(v, nl))
                usage_error("-x '%s': expected VAR or VAR=value with VAR made of letters, digits "
                            "and _", v);
            o->xvars = xrealloc(o->xvars, (size_t)(o->nx + 1) * sizeof *o->xvars);
            xvar_t *x = &o->xvars[o->nx++];
            x->name = xcalloc(nl + 1, 1);
            memcpy(x->name, v, nl);
            if (is_own_var(x->name))
                usage_error("-x %s: cohortrun sets %s itself for every rank (see --help), so "
                            "the value given would be replaced; remove it", x->name, x->name);
            const char *val = eq ? eq + 1 : getenv(x->name);
            x->value = val ? xstrdup(val) : NULL;
            if (!val)
                msg("warning: -x %s: %s is not set in cohortrun's environment; not passing it",
                    x->name, x->name);
        } else if ((v = opt_arg(argc, argv, &i, a, "--rsh")) ||
                   (v = opt_arg(argc, argv, &i, a, "--launch-agent"))) {
            if (!v[strspn(v, " \t")]) usage_error("--rsh needs a command");
            o->rsh = v;
        } else if (!strcmp(a, "--tag-output")) {
            o->tag_output = 1;
        } else if (!strcmp(a, "--oversubscribe")) {
            o->oversubscribe = 1;
        } else if ((v = opt_arg(argc, argv, &i, a, "--map-by"))) {
            if (!strcmp(v, "slot")) o->map_by_node = 0;
            else if (!strcmp(v, "node")) o->map_by_node = 1;
            else usage_error("--map-by '%s': expected 'slot' or 'node'", v);
        } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
            o->verbose = 1;
        } else if ((v = opt_arg(argc, argv, &i, a, "--timeout"))) {
            quiet_begin();
            cohort_status_t st = cohort_parse_double("--timeout", v, 0.001, 1e9, &o->timeout_s);
            quiet_end();
            if (st) usage_error("%s", cohort_last_error());
        } else {
            usage_error("unknown option '%s'", a);
        }
    }
    if (i >= argc) usage_error("no command given");
    o->cmd = argv + i;
    o->ncmd = argc - i;
    if (o->hostlist && o->hostfile) usage_error("give either -H or --hostfile, not both");
    for (int k = 0; o->netif && k < o->nx; k++)
        if (!strcmp(o->xvars[k].name, "COHORT_SOCKET_IFNAME") && o->xvars[k].value &&
            strcmp(o->xvars[k].value, o->netif))
            usage_error("--network-interface %s and -x COHORT_SOCKET_IFNAME=%s disagree; give "
                        "one of them", o->netif, o->xvars[k].value);
    if (!o->np_given && !o->hostlist && !o->hostfile)
        usage_error("-np N is required (or -H/--hostfile, whose slots then give N)");
}

/* A value of MASTER_ADDR/MASTER_PORT that the user set: the last -x with a value, else
 * cohortrun's environment. An empty value counts as not set. *from says where it came from. */
static const char *user_value(const opts_t *o, const char *name, const char **from)
{
    for (int i = o->nx - 1; i >= 0; i--)
        if (!strcmp(o->xvars[i].name, name) && o->xvars[i].value && *o->xvars[i].value) {
            *from = "-x";
            return o->xvars[i].value;
        }
    const char *v = getenv(name);
    *from = "cohortrun's environment";
    return v && *v ? v : NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* Job state                                                                                */

typedef struct stream {
    int fd;              /* read end of the pipe, -1 once closed */
    char *buf;
    size_t len;
} stream_t;

typedef struct rank_proc {
    int rank;
    const char *host;    /* name as given (gethostname() when no hosts) */
    int local;           /* started directly, not through the agent */
    int node;            /* index of the node (for the local rank) */
    int local_rank, local_size;
    int group;           /* GROUP_RANK: the node's index, nodes numbered in order of their
                          * first rank */
    pid_t pid;           /* 0: not started */
    int running;         /* started and not reaped yet */
    int status;          /* wait status once reaped */
    int reap_seq;        /* 1 for the first rank reaped, 2 for the next, ...; 0: not yet */
    int failed;          /* reaped with a non-zero status or by a signal */
    double exited_at;    /* when it was reaped */
    int unjoined;        /* reaped with status 0 and not (yet) seen at the rendezvous */
    stream_t out[2];     /* stdout, stderr */
} rank_proc_t;

typedef struct job {
    opts_t *o;
    int n;
    rank_proc_t *ranks;
    char **host_names;   /* one per host of the list; the ranks' host points into it */
    int nhosts;
    int ngroups;         /* GROUP_WORLD_SIZE: the nodes that have ranks */
    pid_t pgid;
    cohort_rdv_server_t *srv;
    int srv_active;
    char job_id[COHORT_JOBID_MAX];
    char secret[65];
    char url[128];
    char *master_addr;   /* MASTER_ADDR and MASTER_PORT for every rank (torch_master) */
    int master_port;
    const char *master_addr_from, *master_port_from;   /* for -v */
    int out_dead[2];     /* our stdout/stderr gave EPIPE: discard */
    int terminating;
    int sigkill_sent;
    int exit_code;
    double term_deadline, kill_deadline;
    double interrupted_at;   /* when the first SIGINT/SIGTERM/SIGHUP was handled */
    double notice_deadline;  /* a rank failed: the others were told; SIGTERM them at this time */
    int failed_code;         /* the named rank's exit code, once a failure was named */
    int nreaped;
    int verdict_pending;     /* a rank failed; which rank to name is not decided yet */
    double verdict_deadline;
    int nunjoined;           /* ranks with unjoined set */
} job_t;

/* Signal plumbing: the handler writes one record {signal, pid} to the self-pipe. For SIGCHLD the
 * pid (si_pid) says which child exited first: wait() hands zombies out in fork order, and when
 * one rank's failure makes the others fail within a millisecond, the rank to blame is the one
 * whose SIGCHLD came first. */
static int sig_pipe[2] = { -1, -1 };
static volatile sig_atomic_t got_signal;   /* last SIGINT/SIGTERM/SIGHUP */
static volatile sig_atomic_t signal_count; /* of those, since the main loop last looked */

static void on_signal(int sig, siginfo_t *si, void *ctx)
{
    (void)ctx;
    int saved = errno;
    if (sig != SIGCHLD) {
        got_signal = sig;
        signal_count = signal_count + 1;
    }
    int rec[2] = { sig, sig == SIGCHLD && si ? (int)si->si_pid : 0 };
    ssize_t w = write(sig_pipe[1], rec, sizeof rec);   /* atomic (< PIPE_BUF); lost if full */
    (void)w;
    errno = saved;
}

static void setup_signals(void)
{
    if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
        msg("cannot create a pipe: %s", strerror(errno));
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
/* Placement                                                                                */

static int is_local_host(const char *h)
{
    static char me[256];
    static int have_me = -1;
    if (!strcmp(h, "localhost") || !strcmp(h, "127.0.0.1") || !strcmp(h, "::1")) return 1;
    if (have_me < 0) {
        have_me = gethostname(me, sizeof me) == 0;
        me[sizeof me - 1] = '\0';
    }
    if (!have_me) return 0;
    if (!strcmp(h, me)) return 1;
    /* gethostname() gave a FQDN and the user wrote its short name */
    size_t short_len = strcspn(me, ".");
    return me[short_len] == '.' && strlen(h) == short_len && !strncmp(h, me, short_len);
}

static void place_ranks(job_t *job)
{
    opts_t *o = job->o;
    cohort_host_slots_t *hosts = NULL;
    int nhosts = 0;
    if (o->hostlist || o->hostfile) {
        quiet_begin();
        cohort_status_t st = o->hostlist ? cohort_hostlist_parse(o->hostlist, &hosts, &nhosts)
                                         : cohort_hostfile_parse(o->hostfile, &hosts, &nhosts);
        quiet_end();
        if (st) usage_error("%s", cohort_last_error());
        if (nhosts <= 0) usage_error("%s names no hosts", o->hostlist ? "-H" : o->hostfile);
        for (int h = 0; h < nhosts; h++)
            if (!valid_host_name(hosts[h].host))
                usage_error("%s'%s': '%s' is not a host name (letters, digits, '.', '-' and '_'; "
                            "an IPv6 address; user@host)", o->hostlist ? "-H " : "--hostfile ",
                            o->hostlist ? o->hostlist : o->hostfile, hosts[h].host);
    } else {
        hosts = xcalloc(1, sizeof *hosts);
        if (gethostname(hosts[0].host, sizeof hosts[0].host) != 0 || !hosts[0].host[0])
            snprintf(hosts[0].host, sizeof hosts[0].host, "localhost");
        hosts[0].host[sizeof hosts[0].host - 1] = '\0';
        hosts[0].slots = o->np_given ? (int)o->np : 1;
        nhosts = 1;
    }
    long total = 0, most = 0;   /* slots, and what max_slots allows when oversubscribing */
    for (int h = 0; h < nhosts; h++) {
        total += hosts[h].slots > 0 ? hosts[h].slots : 0;
        most = most == LONG_MAX || !hosts[h].max_slots ? LONG_MAX : most + hosts[h].max_slots;
    }
    long n = o->np_given ? o->np : total;
    if (n < 1) usage_error("the host list has no slots");
    if (n > total && o->oversubscribe && n > most) {
        char list[1024] = "";
        size_t used = 0;
        for (int h = 0; h < nhosts && used < sizeof list - 64; h++)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s%s max_slots=%d",
                                     h ? ", " : "", hosts[h].host, hosts[h].max_slots);
        if (used >= sizeof list - 64) snprintf(list + used, sizeof list - used, ", ...");
        usage_error("%ld ranks requested but the hostfile's max_slots allow at most %ld even "
                    "with --oversubscribe (%s); give fewer ranks or raise max_slots", n, most,
                    list);
    }
    if (n > total && !o->oversubscribe) {
        char list[1024] = "";
        size_t used = 0;
        for (int h = 0; h < nhosts && used < sizeof list - 64; h++)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s%s:%d", h ? "," : "",
                                     hosts[h].host, hosts[h].slots);
        if (used >= sizeof list - 64) snprintf(list + used, sizeof list - used, ",...");
        usage_error("%ld ranks requested but the %s %s only %ld %s (%s); give fewer ranks, more "
                    "slots, or --oversubscribe", n, plural(nhosts, "host", "hosts"),
                    plural(nhosts, "has", "have"), total, plural(total, "slot", "slots"), list);
    }
    /* The host of each rank. slot: fill each host's slots in order; beyond the slots
     * (--oversubscribe) one more per host round-robin; ranks stay contiguous per host.
     * node: one rank per host in turn, skipping hosts whose slots are full; once every host is
     * full (--oversubscribe), round-robin over all of them. Beyond the slots, a host at its
     * max_slots gets no more (n <= most: the loops end). */
    long *count = xcalloc((size_t)nhosts, sizeof *count);
    int *host_of = xcalloc((size_t)n, sizeof *host_of);
    if (!o->map_by_node) {
        long left = n;
        for (int h = 0; h < nhosts && left > 0; h++) {
            count[h] = hosts[h].slots < left ? hosts[h].slots : left;
            left -= count[h];
        }
        for (int h = 0; left > 0; h = (h + 1) % nhosts)
            if (!hosts[h].max_slots || count[h] < hosts[h].max_slots) {
                count[h]++;
                left--;
            }
        long r = 0;
        for (int h = 0; h < nhosts; h++)
            for (long k = 0; k < count[h]; k++) host_of[r++] = h;
    } else {
        long r = 0;
        while (r < n) {
            int placed = 0;
            for (int h = 0; h < nhosts && r < n; h++)
                if (count[h] < hosts[h].slots) {
                    count[h]++;
                    host_of[r++] = h;
                    placed = 1;
                }
            if (!placed)   /* every host is full: the extra ranks go round-robin */
                for (int h = 0; h < nhosts && r < n; h++)
                    if (!hosts[h].max_slots || count[h] < hosts[h].max_slots) {
                        count[h]++;
                        host_of[r++] = h;
                    }
        }
    }
    job->n = (int)n;
    job->ranks = xcalloc((size_t)n, sizeof *job->ranks);
    job->nhosts = nhosts;
    job->host_names = xcalloc((size_t)nhosts, sizeof *job->host_names);
    /* node keys: every local alias is one node; remote hosts by name */
    const char **node_key = xcalloc((size_t)nhosts + 1, sizeof *node_key);
    int *node_of_host = xcalloc((size_t)nhosts, sizeof *node_of_host);
    int *node_size = xcalloc((size_t)nhosts + 1, sizeof *node_size);
    int *local = xcalloc((size_t)nhosts, sizeof *local);
    int nnodes = 0;
    for (int h = 0; h < nhosts; h++) {
        job->host_names[h] = xstrdup(hosts[h].host);
        local[h] = is_local_host(hosts[h].host);
        const char *key = local[h] ? "" : job->host_names[h];
        int node = -1;
        for (int k = 0; k < nnodes; k++)
            if (!strcmp(node_key[k], key)) node = k;
        if (node < 0) {
            node = nnodes++;
            node_key[node] = key;
        }
        node_of_host[h] = node;
    }
    /* local ranks in rank order within each node, whatever the mapping */
    for (int r = 0; r < job->n; r++) {
        rank_proc_t *p = &job->ranks[r];
        int h = host_of[r];
        p->rank = r;
        p->host = job->host_names[h];
        p->local = local[h];
        p->node = node_of_host[h];
        p->local_rank = node_size[p->node]++;
        p->out[0].fd = p->out[1].fd = -1;
    }
    for (int r = 0; r < job->n; r++) job->ranks[r].local_size = node_size[job->ranks[r].node];
    /* GROUP_RANK: nodes numbered 0, 1, ... in the order of their first rank (rank 0's node is
     * 0), so the numbers have no gaps even when a host of the list got no rank */
    int *group_of_node = xcalloc((size_t)nhosts + 1, sizeof *group_of_node);
    for (int k = 0; k <= nhosts; k++) group_of_node[k] = -1;
    job->ngroups = 0;
    for (int r = 0; r < job->n; r++) {
        rank_proc_t *p = &job->ranks[r];
        if (group_of_node[p->node] < 0) group_of_node[p->node] = job->ngroups++;
        p->group = group_of_node[p->node];
    }
    free(group_of_node);
    free(node_key);
    free(node_of_host);
    free(node_size);
    free(local);
    free(host_of);
    free(count);
    free(hosts);
}

/* ---------------------------------------------------------------------------------------- */
/* Identity and rendezvous                                                                  */

static void random_bytes(unsigned char *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t k = getrandom(buf + got, len - got, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        got += (size_t)k;
    }
    if (got == len) return;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    while (fd >= 0 && got < len) {
        ssize_t k = read(fd, buf + got, len - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        got += (size_t)k;
    }
    if (fd >= 0) close(fd);
    if (got != len) {
        msg("cannot read random bytes for the job secret (getrandom and /dev/urandom failed)");
        exit(1);
    }
}

static void to_hex(const unsigned char *b, size_t n, char *out)
{
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hex[b[i] >> 4];
        out[2 * i + 1] = hex[b[i] & 15];
    }
    out[2 * n] = '\0';
}

/* Whether a TCP port is free on every local address: bound on the IPv6 wildcard with
 * IPV6_V6ONLY off (IPv4 too; where IPv6 is missing, the IPv4 wildcard), as torch's TCPStore
 * binds it, then closed. port 0: the kernel picks one; returns the port, or 0 when not free. */
static int bind_wildcard(int port)
{
    int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0), got = 0;
    if (fd >= 0) {
        int off = 0;
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
        struct sockaddr_in6 a;
        memset(&a, 0, sizeof a);
        a.sin6_family = AF_INET6;
        a.sin6_addr = in6addr_any;
        a.sin6_port = htons((uint16_t)port);
        socklen_t len = sizeof a;
        int e = 0;
        if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
            getsockname(fd, (struct sockaddr *)&a, &len) == 0)
            got = ntohs(a.sin6_port);
        else
            e = errno;
        close(fd);
        /* taken; anything else (IPv6 disabled): ask IPv4 */
        if (got || e == EADDRINUSE || e == EACCES) return got;
    }
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return 0;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons((uint16_t)port);
    socklen_t len = sizeof a;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        got = ntohs(a.sin_port);
    close(fd);
    return got;
}

/* MASTER_PORT when the user gave none: a random port in 20000-65535 outside this host's
 * ephemeral range (ip_local_port_range, 32768-60999 by default), which the kernel never hands
 * to an outgoing connection, so it stays free between this check and rank 0's bind. With
 * check (rank 0 runs here) the port must be free to bind, else another is drawn (64 tries,
 * then one the kernel picks). Without (rank 0 is remote) it is not checked. */
static int pick_master_port(int check)
{
    long lo = 32768, hi = 60999;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "re");
    if (f) {
        long a, b;
        if (fscanf(f, "%ld %ld", &a, &b) == 2 && a >= 1 && a <= b && b <= 65535) {
            lo = a;
            hi = b;
        }
        fclose(f);
    }
    const long first = 20000, last = 65535;
    long below = lo > first ? (lo - first < last - first + 1 ? lo - first : last - first + 1) : 0;
    long above = hi < last ? last - (hi > first - 1 ? hi : first - 1) : 0;
    if (below + above == 0) {   /* the ephemeral range covers them all */
        below = last - first + 1;
        above = 0;
    }
    for (int tries = 0; tries < 64; tries++) {
        uint32_t x;
        random_bytes((unsigned char *)&x, sizeof x);
        long k = (long)(x % (uint32_t)(below + above));
        int port = (int)(k < below ? first + k : last - above + 1 + (k - below));
        if (!check || bind_wildcard(port)) return port;
    }
    return bind_wildcard(0);
}

/* MASTER_ADDR and MASTER_PORT, for PyTorch's env:// (its TCPStore is hosted by rank 0 at that
 * address and port). The user's values win (user_value). Else MASTER_ADDR is where the other
 * ranks reach rank 0's host: 127.0.0.1 when every rank runs here; the rendezvous address
 * (addr, the one remote ranks are given in COHORT_RENDEZVOUS) when rank 0 runs here and others
 * do not; rank 0's host as the host list names it (without a user@) when rank 0 is remote. */
static void torch_master(job_t *job, const char *addr)
{
    const char *from;
    const char *v = user_value(job->o, "MASTER_ADDR", &from);
    const rank_proc_t *r0 = &job->ranks[0];
    job->master_addr_from = v ? from : r0->local ? "rank 0 runs here" : "rank 0's host";
    if (v) {
        job->master_addr = xstrdup(v);
    } else if (r0->local) {
        job->master_addr = xstrdup(addr);
    } else {
        const char *at = strrchr(r0->host, '@');
        job->master_addr = xstrdup(at ? at + 1 : r0->host);
    }
    v = user_value(job->o, "MASTER_PORT", &from);
    job->master_port_from = v ? from : r0->local ? "free here" : "random, rank 0 is remote";
    if (v) {
        long port;
        char what[64];
        snprintf(what, sizeof what, "MASTER_PORT from %s", from);
        quiet_begin();
        cohort_status_t st = cohort_parse_long(what, v, 1, 65535, &port);
        quiet_end();
        if (st) usage_error("%s", cohort_last_error());
        job->master_port = (int)port;
        return;
    }
    job->master_port = pick_master_port(r0->local);
    if (!job->master_port) {
        msg("cannot find a free TCP port for MASTER_PORT (torch's env://): no port could be "
            "bound on this host; choose one with -x MASTER_PORT=PORT");
        exit(1);
    }
}

static void setup_job(job_t *job)
{
    unsigned char id[8], sec[32];
    random_bytes(id, sizeof id);
    random_bytes(sec, sizeof sec);
    char idhex[17];
    to_hex(id, sizeof id, idhex);
    snprintf(job->job_id, sizeof job->job_id, "cr-%s", idhex);
    to_hex(sec, sizeof sec, job->secret);

    if (job->o->netif) {
        setenv("COHORT_SOCKET_IFNAME", job->o->netif, 1);
        cohort_netifs_reset();
    }
    int all_local = 1;
    for (int r = 0; r < job->n; r++) all_local &= job->ranks[r].local;
    char addr[INET6_ADDRSTRLEN + 2] = "127.0.0.1";   /* for the URL: IPv6 in brackets */
    char bare[INET6_ADDRSTRLEN] = "127.0.0.1";
    if (!all_local) {
        const cohort_netif_t *ifs = NULL;
        int nifs = 0;
        quiet_begin();
        cohort_status_t st = cohort_netifs(&ifs, &nifs);
        quiet_end();
        if (st) {
            msg("cannot choose the rendezvous address: %s", cohort_last_error());
            exit(job->o->netif ? EXIT_USAGE : 1);
        }
        if (nifs <= 0) {
            msg("cannot choose the rendezvous address: this host has no usable network "
                "interface");
            exit(1);
        }
        char a[INET6_ADDRSTRLEN] = "?";
        inet_ntop(ifs[0].family, ifs[0].addr, a, sizeof a);
        if (ifs[0].family == AF_INET6) snprintf(addr, sizeof addr, "[%s]", a);
        else snprintf(addr, sizeof addr, "%s", a);
        snprintf(bare, sizeof bare, "%s", a);
        if (ifs[0].is_loopback)
            msg("warning: the rendezvous address %s is on the loopback interface %s, which remote "
                "ranks cannot reach; choose an interface with --network-interface", a,
                ifs[0].name);
    }
    quiet_begin();
    cohort_status_t st = cohort_rdv_server_create(NULL, 0, job->n, job->job_id, job->secret,
                                                  strlen(job->secret), &job->srv);
    quiet_end();
    if (st) {
        msg("cannot start the rendezvous server: %s", cohort_last_error());
        exit(1);
    }
    job->srv_active = 1;
    snprintf(job->url, sizeof job->url, "tcp://%s:%d", addr, cohort_rdv_server_port(job->srv));
    torch_master(job, bare);
}

/* ---------------------------------------------------------------------------------------- */
/* Environment and command line of one rank                                                 */

/* The variables cohortrun sets for a rank, "NAME=value" each. */
static void rank_vars(const job_t *job, const rank_proc_t *p, strv_t *vars)
{
    strv_push(vars, xasprintf("COHORT_RANK=%d", p->rank));
    strv_push(vars, xasprintf("COHORT_SIZE=%d", job->n));
    strv_push(vars, xasprintf("COHORT_LOCAL_RANK=%d", p->local_rank));
    strv_push(vars, xasprintf("COHORT_LOCAL_SIZE=%d", p->local_size));
    strv_push(vars, xasprintf("COHORT_RENDEZVOUS=%s", job->url));
    strv_push(vars, xstrdup("COHORT_RENDEZVOUS_SERVER=launcher"));
    strv_push(vars, xasprintf("COHORT_JOB_ID=%s", job->job_id));
    strv_push(vars, xasprintf("COHORT_SECRET=%s", job->secret));
    if (job->o->netif) strv_push(vars, xasprintf("COHORT_SOCKET_IFNAME=%s", job->o->netif));
    /* PyTorch's env:// (what torchrun sets, one role). cohort_comm_init reads the COHORT_*
     * ones above first (core/bootstrap.c), so it still meets at cohortrun's rendezvous. */
    strv_push(vars, xasprintf("RANK=%d", p->rank));
    strv_push(vars, xasprintf("WORLD_SIZE=%d", job->n));
    strv_push(vars, xasprintf("LOCAL_RANK=%d", p->local_rank));
    strv_push(vars, xasprintf("LOCAL_WORLD_SIZE=%d", p->local_size));
    strv_push(vars, xasprintf("GROUP_RANK=%d", p->group));
    strv_push(vars, xasprintf("GROUP_WORLD_SIZE=%d", job->ngroups));
    strv_push(vars, xasprintf("ROLE_RANK=%d", p->rank));
    strv_push(vars, xasprintf("ROLE_WORLD_SIZE=%d", job->n));
    strv_push(vars, xasprintf("MASTER_ADDR=%s", job->master_addr));
    strv_push(vars, xasprintf("MASTER_PORT=%d", job->master_port));
    for (int i = 0; i < job->o->nx; i++)
        if (job->o->xvars[i].value && strcmp(job->o->xvars[i].name, "MASTER_ADDR") &&
            strcmp(job->o->xvars[i].name, "MASTER_PORT"))
            strv_push(vars, xasprintf("%s=%s", job->o->xvars[i].name, job->o->xvars[i].value));
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
        if (!vars_has(vars, *e)) strv_push(envp, xstrdup(*e));
    for (int i = 0; i < vars->n; i++) strv_push(envp, xstrdup(vars->v[i]));
}

/* What a remote rank gets: the rank's variables, plus every COHORT_* setting of cohortrun's
 * own environment (ssh does not carry the environment over). */
static void remote_vars(const strv_t *vars, strv_t *out)
{
    for (int i = 0; i < vars->n; i++) strv_push(out, xstrdup(vars->v[i]));
    for (char **e = environ; *e; e++)
        if (!strncmp(*e, "COHORT_", 7) && !vars_has(vars, *e)) strv_push(out, xstrdup(*e));
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
        char *w = xcalloc(cap, 1), *o = w;
        for (size_t k = 0; k < wl;) {
            if (wl - k >= 6 && !strncmp(p + k, "{host}", 6)) {
                size_t hl = strlen(host), used = (size_t)(o - w);
                cap += hl;
                w = xrealloc(w, cap);
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
        for (int i = 0; i < o->ncmd; i++) strv_push(argv, xstrdup(o->cmd[i]));
        return;
    }
    strv_t rv = { 0 };
    remote_vars(vars, &rv);
    int templ = agent_words(o->rsh ? o->rsh : "ssh", p->host, argv);
    if (templ) {
        /* run directly: agent words, then env VAR=val ... cmd args, no shell in between */
        strv_push(argv, xstrdup("env"));
        for (int i = 0; i < rv.n; i++) strv_push(argv, xstrdup(rv.v[i]));
        for (int i = 0; i < o->ncmd; i++) strv_push(argv, xstrdup(o->cmd[i]));
    } else {
        /* as ssh does: host appended, the remote command is a shell command line */
        strv_push(argv, xstrdup(p->host));
        strv_push(argv, xstrdup("env"));
        for (int i = 0; i < rv.n; i++) strv_push(argv, shell_quote(rv.v[i]));
        for (int i = 0; i < o->ncmd; i++) strv_push(argv, shell_quote(o->cmd[i]));
    }
    strv_free(&rv);
}

/* The command line for -v, with the secret hidden. */
static void print_launch(const rank_proc_t *p, const strv_t *argv)
{
    size_t cap = 256, len = 0;
    char *line = xcalloc(cap, 1);
    for (int i = 0; i < argv->n; i++) {
        const char *w = argv->v[i];
        const char *sec = strstr(w, "COHORT_SECRET=");
        char *shown = sec ? xasprintf("%.*sCOHORT_SECRET=<hidden>%s", (int)(sec - w), w,
                                      w[0] == '\'' ? "'" : "")
                          : xstrdup(w);
        size_t sl = strlen(shown);
        if (len + sl + 2 > cap) {
            cap = (len + sl + 2) * 2;
            line = xrealloc(line, cap);
        }
        if (i) line[len++] = ' ';
        memcpy(line + len, shown, sl + 1);
        len += sl;
        free(shown);
    }
    msg("rank %d on %s (local rank %d of %d): %s", p->rank, p->host, p->local_rank,
        p->local_size, line);
    free(line);
}

/* ---------------------------------------------------------------------------------------- */
/* Starting ranks                                                                           */

/* cohortrun's own open-files limit, raised for many ranks; the ranks get the original back. */
static struct rlimit orig_nofile;
static int have_orig_nofile;

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
static int spawn_rank(job_t *job, rank_proc_t *p, int devnull)
{
    strv_t vars = { 0 }, envp = { 0 }, argv = { 0 };
    rank_vars(job, p, &vars);
    build_env(&vars, &envp);
    build_argv(job, p, &vars, &argv);
    if (job->o->verbose) print_launch(p, &argv);

    int out[2] = { -1, -1 }, err[2] = { -1, -1 }, ep[2] = { -1, -1 };
    int e = 0;
    if (pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC) || pipe2(ep, O_CLOEXEC)) {
        msg("cannot create pipes for rank %d: %s (raise the open files limit, ulimit -n)",
            p->rank, strerror(errno));
        e = 1;
        goto done;
    }
    pid_t pid = fork();
    if (pid < 0) {
        msg("cannot fork rank %d: %s", p->rank, strerror(errno));
        e = 1;
        goto done;
    }
    if (pid == 0) child_exec(job->pgid, devnull, out[1], err[1], ep[1], argv.v, envp.v);
    /* also from here, so the group exists before the next fork whatever runs first */
    if (setpgid(pid, job->pgid ? job->pgid : pid) != 0 && errno != EACCES && errno != ESRCH)
        msg("warning: cannot put rank %d in cohortrun's process group: %s", p->rank,
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
        msg("cannot start rank %d on %s: %s '%s': %s", p->rank, p->host, what, argv.v[0],
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

/* ---------------------------------------------------------------------------------------- */
/* Output relay                                                                             */

static void write_out(job_t *job, int s, struct iovec *iov, int cnt)
{
    int fd = s == 0 ? STDOUT_FILENO : STDERR_FILENO;
    if (job->out_dead[s]) return;
    while (cnt > 0) {
        if (iov->iov_len == 0) {
            iov++;
            cnt--;
            continue;
        }
        ssize_t w = writev(fd, iov, cnt);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN) {   /* our stdout was left non-blocking by someone */
                struct pollfd pf = { .fd = fd, .events = POLLOUT };
                poll(&pf, 1, 100);
                continue;
            }
            job->out_dead[s] = 1;    /* EPIPE and friends: nobody is reading; discard */
            return;
        }
        while (cnt > 0 && (size_t)w >= iov->iov_len) {
            w -= (ssize_t)iov->iov_len;
            iov++;
            cnt--;
        }
        if (cnt > 0) {
            iov->iov_base = (char *)iov->iov_base + w;
            iov->iov_len -= (size_t)w;
        }
    }
}

static void emit(job_t *job, int s, int rank, const char *data, size_t len, int add_newline)
{
    char prefix[24];
    size_t plen = 0;
    if (job->o->tag_output) plen = (size_t)snprintf(prefix, sizeof prefix, "[%d] ", rank);
    static char nl[] = "\n";
    struct iovec iov[3] = { { prefix, plen }, { (void *)data, len }, { nl, add_newline ? 1 : 0 } };
    write_out(job, s, iov, 3);
}

/* Writes out the complete lines in the buffer (all of it with flush_partial). */
static void stream_flush(job_t *job, rank_proc_t *p, int s, int flush_partial)
{
    stream_t *st = &p->out[s];
    size_t start = 0;
    if (job->o->tag_output) {
        for (size_t i = 0; i < st->len; i++)
            if (st->buf[i] == '\n') {
                emit(job, s, p->rank, st->buf + start, i + 1 - start, 0);
                start = i + 1;
            }
    } else {
        for (size_t i = st->len; i > 0; i--)
            if (st->buf[i - 1] == '\n') {
                emit(job, s, p->rank, st->buf, i, 0);
                start = i;
                break;
            }
    }
    if (start < st->len && (flush_partial || (start == 0 && st->len >= LINE_MAX_BYTES))) {
        emit(job, s, p->rank, st->buf + start, st->len - start, 1);
        start = st->len;
    }
    if (start > 0) {
        memmove(st->buf, st->buf + start, st->len - start);
        st->len -= start;
    }
}

static void stream_close(job_t *job, rank_proc_t *p, int s)
{
    stream_t *st = &p->out[s];
    if (st->len) stream_flush(job, p, s, 1);
    if (st->fd >= 0) close(st->fd);
    st->fd = -1;
    free(st->buf);
    st->buf = NULL;
    st->len = 0;
}

/* One read (or, with drain, until the pipe is empty). */
static void stream_read(job_t *job, rank_proc_t *p, int s, int drain)
{
    stream_t *st = &p->out[s];
    while (st->fd >= 0) {
        if (!st->buf) st->buf = xcalloc(LINE_MAX_BYTES, 1);
        ssize_t k = read(st->fd, st->buf + st->len, LINE_MAX_BYTES - st->len);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (k <= 0) {   /* EOF or error */
            stream_close(job, p, s);
            return;
        }
        st->len += (size_t)k;
        stream_flush(job, p, s, 0);
        if (!drain) return;
    }
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

static void start_termination(job_t *job, int exit_code)
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
        msg("rank %d (host %s, pid %d) %s%s; terminating the other %d %s", p->rank, p->host,
            (int)p->pid, why, after, others, plural(others, "rank", "ranks"));
    else
        msg("rank %d (host %s, pid %d) %s%s", p->rank, p->host, (int)p->pid, why, after);
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
    start_termination(job, job->failed_code);
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
    int *list = xcalloc((size_t)job->n, sizeof *list), k = 0;
    for (int r = 0; r < job->n; r++)
        if (job->ranks[r].failed && &job->ranks[r] != p) list[k++] = r;
    char after[160] = "";
    if (k) {
        char *ranks = format_ranks(list, k);
        snprintf(after, sizeof after, "; %s %.100s failed after it", plural(k, "rank", "ranks"),
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
                 plural(cohort_rdv_server_arrived(job->srv), "rank", "ranks"),
                 plural(cohort_rdv_server_arrived(job->srv), "waits", "wait"));
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
    stream_read(job, p, 0, 1);
    stream_read(job, p, 1, 1);
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

static void handle_signals(job_t *job)
{
    int sig = got_signal;
    if (!sig || signal_count == 0) return;
    double now = cohort_now_s();
    if (!job->interrupted_at) {
        job->interrupted_at = now;
        signal_count = 0;
        const char *name = sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "SIGHUP";
        int running = count_running(job, NULL);
        if (!job->terminating) {
            msg("interrupted by %s; terminating %d %s (interrupt again to kill at once)", name,
                running, plural(running, "rank", "ranks"));
            start_termination(job, 128 + sig);
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
        msg("interrupted again; killing the ranks");
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

static int run(job_t *job, double rdv_timeout_s)
{
    double start = cohort_now_s();
    double job_deadline = job->o->timeout_s > 0 ? start + job->o->timeout_s : 0;
    double first_arrival = 0;
    int *list = xcalloc((size_t)job->n, sizeof *list);
    struct pollfd *pfd = xcalloc((size_t)job->n * 2 + 1, sizeof *pfd);
    int *pfd_rank = xcalloc((size_t)job->n * 2 + 1, sizeof *pfd_rank);
    exit_hints_t hints = { .n = 0 };

    for (;;) {
        double now = cohort_now_s();
        /* deadlines */
        if (job_deadline && !job->terminating && now >= job_deadline) {
            int k = count_running(job, list);
            char *ranks = format_ranks(list, k);
            msg("job time limit reached (--timeout %g s); %s %s still running; terminating %s",
                job->o->timeout_s, plural(k, "rank", "ranks"), ranks, plural(k, "it", "them"));
            free(ranks);
            start_termination(job, EXIT_TIMEOUT);
        }
        /* (once every rank arrived, the ranks keep their connection as the job's control
         * channel for as long as they run: no deadline then) */
        if (job->srv_active && !job->terminating && first_arrival > 0 &&
            cohort_rdv_server_arrived(job->srv) < job->n && now >= first_arrival + rdv_timeout_s) {
            char missing[4096] = "";
            cohort_rdv_server_missing(job->srv, missing, sizeof missing);
            int running = count_running(job, NULL);
            msg("%s %s did not reach the rendezvous within %g s (COHORT_TIMEOUT) of the first "
                "rank; terminating the %d running %s", strpbrk(missing, ",-") ? "ranks" : "rank",
                missing, rdv_timeout_s, running, plural(running, "rank", "ranks"));
            start_termination(job, 1);
        }
        if (job->verdict_pending && now >= job->verdict_deadline) try_verdict(job, 1);
        check_unjoined(job, now);
        if (job->failed_code && !job->terminating && now >= job->notice_deadline)
            start_termination(job, job->failed_code);
        if (job->terminating && !job->sigkill_sent && now >= job->term_deadline) {
            int k = count_running(job, list);
            if (k) {
                char *ranks = format_ranks(list, k);
                msg("%s %s did not exit within %g s of SIGTERM; sending SIGKILL",
                    plural(k, "rank", "ranks"), ranks, GRACE_S);
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
                msg("%s %s still not reaped %g s after SIGKILL; giving up on %s",
                    plural(k, "rank", "ranks"), ranks, KILL_WAIT_S, plural(k, "it", "them"));
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
            msg("poll failed: %s", strerror(errno));
            start_termination(job, 1);
            ready = 0;
        }
        if (ready > 0) {
            for (int i = 1; i < nfds; i++)
                if (pfd[i].revents)
                    stream_read(job, &job->ranks[pfd_rank[i] / 2], pfd_rank[i] % 2, 0);
        }
        drain_sig_pipe(&hints);   /* always: an EINTR from poll means a record is waiting */
        handle_signals(job);
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
            stream_read(job, &job->ranks[r], s, 1);
            stream_close(job, &job->ranks[r], s);
        }
    free(list);
    free(pfd);
    free(pfd_rank);
    return job->terminating ? job->exit_code : job->failed_code;
}

/* ---------------------------------------------------------------------------------------- */

static void ensure_std_fds(void)
{
    for (int fd = 0; fd < 3; fd++)
        if (fcntl(fd, F_GETFD) < 0) {
            int nfd = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
            if (nfd >= 0 && nfd != fd) close(nfd);
        }
}

/* The ranks' own children are reparented to cohortrun when their parent dies, so it reaps them
 * (zombies would otherwise keep the process group alive until init gets to them). */
static void become_subreaper(void)
{
#ifdef PR_SET_CHILD_SUBREAPER
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
#endif
}

/* Two pipes per rank and a rendezvous connection per rank, a few more while starting one: raise
 * the soft limit when that is more than it allows, and refuse before starting anything when
 * even the hard limit is too low. */
static void raise_fd_limit(int nranks)
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
        msg("%d ranks need about %lu open files in cohortrun but the limit is %lu; raise it "
            "(ulimit -n)", nranks, (unsigned long)need, (unsigned long)rl.rlim_cur);
        exit(1);
    }
}

int main(int argc, char **argv)
{
    ensure_std_fds();
    opts_t o;
    parse_options(argc, argv, &o);

    /* the same reading and range as the library's (core/comm.c) */
    double rdv_timeout = 300;
    quiet_begin();
    cohort_status_t st = cohort_config_table_double("COHORT_TIMEOUT", &rdv_timeout);
    quiet_end();
    if (st) usage_error("%s", cohort_last_error());

    job_t job;
    memset(&job, 0, sizeof job);
    job.o = &o;
    place_ranks(&job);
    raise_fd_limit(job.n);
    become_subreaper();
    setup_job(&job);
    setup_signals();
    if (o.verbose)
        msg("MASTER_ADDR=%s (%s) MASTER_PORT=%d (%s), for PyTorch's env://", job.master_addr,
            job.master_addr_from, job.master_port, job.master_port_from);

    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (devnull < 0) {
        msg("cannot open /dev/null: %s", strerror(errno));
        return 1;
    }
    /* SIGCHLD is held while starting, so every rank is forked before any is reaped: the first
     * rank (the process group's leader) stays a zombie at worst and the group stays joinable. */
    sigset_t chld, old;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, &old);
    int launch_failed = 0;
    for (int r = 0; r < job.n && !got_signal && !launch_failed; r++)
        launch_failed = spawn_rank(&job, &job.ranks[r], devnull);
    sigprocmask(SIG_SETMASK, &old, NULL);
    close(devnull);
    if (launch_failed) start_termination(&job, launch_failed);
    else if (got_signal) handle_signals(&job);

    int code = run(&job, rdv_timeout);

    cohort_rdv_server_destroy(job.srv);
    for (int h = 0; h < job.nhosts; h++) free(job.host_names[h]);
    free(job.host_names);
    free(job.ranks);
    free(job.master_addr);
    for (int i = 0; i < o.nx; i++) {
        free(o.xvars[i].name);
        free(o.xvars[i].value);
    }
    free(o.xvars);
    return code;
}
