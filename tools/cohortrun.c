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
 *
 * The parts, one file each (tools/cr_int.h holds what they share): this file, the options and
 * main; cr_util.c, allocation and cohortrun's messages; cr_place.c, the hosts and which rank runs
 * where; cr_rdv.c, the job's identity, its rendezvous server and torch's MASTER_ADDR/MASTER_PORT;
 * cr_spawn.c, a rank's environment and command line, and starting it; cr_output.c, the relay of
 * the ranks' output; cr_watch.c, signals, failures and their verdict, and the main loop.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "core/config.h"
#include "core/log.h"
#include "core/parse.h"
#include "core/rendezvous.h"
#include "tools/cr_int.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#define NP_MAX 1000000L

/* ---------------------------------------------------------------------------------------- */
/* Options                                                                                  */

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
    if (*i + 1 >= argc) cr_usage_error("option %s needs a value", name);
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
            cr_quiet_begin();
            cohort_status_t st = cohort_parse_long("-np", v, 1, NP_MAX, &o->np);
            cr_quiet_end();
            if (st) cr_usage_error("%s", cohort_last_error());
            o->np_given = 1;
        } else if ((v = opt_arg(argc, argv, &i, a, "-H")) ||
                   (v = opt_arg(argc, argv, &i, a, "--host"))) {
            o->hostlist = v;
        } else if ((v = opt_arg(argc, argv, &i, a, "--hostfile")) ||
                   (v = opt_arg(argc, argv, &i, a, "--machinefile"))) {
            o->hostfile = v;
        } else if ((v = opt_arg(argc, argv, &i, a, "--network-interface"))) {
            if (!*v) cr_usage_error("--network-interface needs a non-empty value");
            o->netif = v;
        } else if ((v = opt_arg(argc, argv, &i, a, "-x"))) {
            const char *eq = strchr(v, '=');
            size_t nl = eq ? (size_t)(eq - v) : strlen(v);
            if (!valid_var_name(v, nl))
                cr_usage_error("-x '%s': expected VAR or VAR=value with VAR made of letters, "
                               "digits and _", v);
            o->xvars = cr_xrealloc(o->xvars, (size_t)(o->nx + 1) * sizeof *o->xvars);
            xvar_t *x = &o->xvars[o->nx++];
            x->name = cr_xcalloc(nl + 1, 1);
            memcpy(x->name, v, nl);
            if (is_own_var(x->name))
                cr_usage_error("-x %s: cohortrun sets %s itself for every rank (see --help), so "
                               "the value given would be replaced; remove it", x->name, x->name);
            const char *val = eq ? eq + 1 : getenv(x->name);
            x->value = val ? cr_xstrdup(val) : NULL;
            if (!val)
                cr_msg("warning: -x %s: %s is not set in cohortrun's environment; not passing it",
                       x->name, x->name);
        } else if ((v = opt_arg(argc, argv, &i, a, "--rsh")) ||
                   (v = opt_arg(argc, argv, &i, a, "--launch-agent"))) {
            if (!v[strspn(v, " \t")]) cr_usage_error("--rsh needs a command");
            o->rsh = v;
        } else if (!strcmp(a, "--tag-output")) {
            o->tag_output = 1;
        } else if (!strcmp(a, "--oversubscribe")) {
            o->oversubscribe = 1;
        } else if ((v = opt_arg(argc, argv, &i, a, "--map-by"))) {
            if (!strcmp(v, "slot")) o->map_by_node = 0;
            else if (!strcmp(v, "node")) o->map_by_node = 1;
            else cr_usage_error("--map-by '%s': expected 'slot' or 'node'", v);
        } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
            o->verbose = 1;
        } else if ((v = opt_arg(argc, argv, &i, a, "--timeout"))) {
            cr_quiet_begin();
            cohort_status_t st = cohort_parse_double("--timeout", v, 0.001, 1e9, &o->timeout_s);
            cr_quiet_end();
            if (st) cr_usage_error("%s", cohort_last_error());
        } else {
            cr_usage_error("unknown option '%s'", a);
        }
    }
    if (i >= argc) cr_usage_error("no command given");
    o->cmd = argv + i;
    o->ncmd = argc - i;
    if (o->hostlist && o->hostfile) cr_usage_error("give either -H or --hostfile, not both");
    for (int k = 0; o->netif && k < o->nx; k++)
        if (!strcmp(o->xvars[k].name, "COHORT_SOCKET_IFNAME") && o->xvars[k].value &&
            strcmp(o->xvars[k].value, o->netif))
            cr_usage_error("--network-interface %s and -x COHORT_SOCKET_IFNAME=%s disagree; give "
                           "one of them", o->netif, o->xvars[k].value);
    if (!o->np_given && !o->hostlist && !o->hostfile)
        cr_usage_error("-np N is required (or -H/--hostfile, whose slots then give N)");
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

int main(int argc, char **argv)
{
    ensure_std_fds();
    opts_t o;
    parse_options(argc, argv, &o);

    /* the same reading and range as the library's (core/comm.c) */
    double rdv_timeout = 300;
    cr_quiet_begin();
    cohort_status_t st = cohort_config_table_double("COHORT_TIMEOUT", &rdv_timeout);
    cr_quiet_end();
    if (st) cr_usage_error("%s", cohort_last_error());

    job_t job;
    memset(&job, 0, sizeof job);
    job.o = &o;
    cr_place_ranks(&job);
    cr_raise_fd_limit(job.n);
    become_subreaper();
    cr_setup_job(&job);
    cr_setup_signals();
    if (o.verbose)
        cr_msg("MASTER_ADDR=%s (%s) MASTER_PORT=%d (%s), for PyTorch's env://", job.master_addr,
               job.master_addr_from, job.master_port, job.master_port_from);

    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (devnull < 0) {
        cr_msg("cannot open /dev/null: %s", strerror(errno));
        return 1;
    }
    /* SIGCHLD is held while starting, so every rank is forked before any is reaped: the first
     * rank (the process group's leader) stays a zombie at worst and the group stays joinable. */
    sigset_t chld, old;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, &old);
    int launch_failed = 0;
    for (int r = 0; r < job.n && !cr_got_signal && !launch_failed; r++)
        launch_failed = cr_spawn_rank(&job, &job.ranks[r], devnull);
    sigprocmask(SIG_SETMASK, &old, NULL);
    close(devnull);
    if (launch_failed) cr_start_termination(&job, launch_failed);
    else if (cr_got_signal) cr_handle_signals(&job);

    int code = cr_run(&job, rdv_timeout);

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
