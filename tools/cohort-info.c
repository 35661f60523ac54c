/* SPDX-License-Identifier: BSD-3-Clause */
/* cohort-info: version, build, plugins (and why any was refused), settings, interfaces, and the
 * machine's topology with the rank placement and ring of a hypothetical job. */
#include "cohort/cohort.h"
#include "cohort/plugin.h"
#include "core/config.h"
#include "core/log.h"
#include "core/netif.h"
#include "core/parse.h"
#include "core/plugin_loader.h"
#include "topology/node.h"
#include "topology/topo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f, "usage: cohort-info [--plugins] [--settings] [--interfaces] [--all]\n"
               "       cohort-info --version\n"
               "       cohort-info --topology [--topo-file FILE] [--nodes N] [--ranks-per-node R]\n"
               "                   [--map-by slot|node]\n"
               "       cohortrun -np N [...] cohort-info --peers\n"
               "       cohortrun -np N [...] cohort-info --topology --job\n"
               "Shows cohort's version and build, the transport plugins found (and why any was\n"
               "refused), every setting with its default, current value and help, and the\n"
               "network interfaces cohort would use. Without options: everything. The exit\n"
               "status is 1 when a setting is invalid (creating a communicator would fail).\n"
               "--peers runs as the ranks of a job (under cohortrun, mpirun, srun or torchrun),\n"
               "creates a communicator and prints, on rank 0, each rank's host and the transport\n"
               "every pair of ranks uses.\n"
               "--topology prints this machine as hwloc sees it (or FILE, an hwloc XML export;\n"
               "default COHORT_TOPO_FILE): packages, NUMA nodes, cores, network interfaces,\n"
               "RDMA devices and GPUs with their PCI locality. Then, for a job of N nodes (copies\n"
               "of that machine, default 1) with R ranks per node (default one per package),\n"
               "local rank l bound to core l*cores/R: each rank's place, nearest network\n"
               "interface and GPU, and the ring cohort builds. --map-by node numbers ranks\n"
               "round-robin over nodes (rank = l*N + node), slot (default) node by node.\n"
               "--topology --job runs as the ranks of a job and prints, on rank 0, the job's\n"
               "report (the COHORT_TOPO_DUMP one): rank 0's machine, every rank's node, place,\n"
               "CPUs and interface, the node groups, the ring and the hierarchical plan.\n");
}

static void show_plugins(void)
{
    char path[8192];
    cohort_plugins_search_path(path, sizeof path);
    printf("\nPlugins (search path %s; plugin ABI %d.%d):\n", path, COHORT_PLUGIN_ABI_MAJOR,
           COHORT_PLUGIN_ABI_MINOR);
    cohort_status_t st = cohort_plugins_scan();
    int n;
    const cohort_plugin_report_t *r = cohort_plugins_report(&n);
    for (int i = 0; i < n; i++)
        printf("  %-8s %-11s %s\n           %s\n", r[i].name, r[i].loaded ? "usable"
               : strstr(r[i].why, " unavailable: ") ? "unavailable" : "refused", r[i].why,
               r[i].path);
    if (n == 0) printf("  (none found)\n");
    if (st) printf("  error: %s\n", cohort_last_error());
}

/* 1 when a setting is invalid (a communicator's creation would fail): scripts can use
 * cohort-info --settings to check a job's settings before they launch it. */
static int show_settings(void)
{
    cohort_plugins_read_settings();   /* the transports' own settings too */
    size_t n = cohort_settings_count();
    printf("\nSettings (environment, then cohort.conf, then default; a transport's own are "
           "marked with its name):\n");
    for (size_t i = 0; i < n; i++) {
        const cohort_setting_t *s = cohort_setting_at(i);
        const char *v = cohort_config_value(s->name);
        printf("  %-22s = %-14s [%s; default %s%s%s]\n      %s\n", s->name, v ? v : "(unset)",
               cohort_config_source(s->name), s->def ? s->def : "unset",
               s->owner ? "; transport " : "", s->owner ? s->owner : "", s->help);
    }
    /* what a communicator's creation would say about them */
    int old = cohort_error_log_level(COHORT_LOG_NONE);
    cohort_status_t st = cohort_config_check();
    cohort_error_log_level(old);
    if (st) printf("  error: %s (creating a communicator fails with this)\n", cohort_last_error());
    else printf("  all valid\n");
    return st ? 1 : 0;
}

static int show_interfaces(void)
{
    char host[64], id[COHORT_HOSTID_MAX], line[160];
    cohort_node_hostname(host, sizeof host);
    cohort_node_id(id, sizeof id);
    printf("\nNode: %s (id %s)\n", host, id);
    cohort_netif_t *all;
    int n;
    if (cohort_netifs_all(&all, &n) == COHORT_SUCCESS) {
        printf("Interfaces on this host:\n");
        for (int i = 0; i < n; i++) {
            cohort_netif_format(&all[i], line, sizeof line);
            printf("  %s%s\n", line, all[i].is_loopback ? " (loopback)" : "");
        }
        free(all);
    }
    const cohort_netif_t *use;
    const char *spec = cohort_config_get("COHORT_SOCKET_IFNAME");
    if (cohort_netifs(&use, &n)) {
        printf("Interfaces cohort would use: none: %s\n", cohort_last_error());
        return 1;
    }
    printf("Interfaces cohort would use (COHORT_SOCKET_IFNAME=%s), best first:\n",
           spec ? spec : "unset: real interfaces first, loopback last");
    for (int i = 0; i < n; i++) {
        cohort_netif_format(&use[i], line, sizeof line);
        printf("  %d. %s\n", i + 1, line);
    }
    return 0;
}

#define NAME_LEN 16

/* As a rank of a job: which transport each pair of ranks uses. */
static int show_peers(void)
{
    cohort_comm_t *comm;
    cohort_status_t st = cohort_comm_init(&comm);
    if (st) {
        fprintf(stderr, "cohort-info --peers: %s\n(run it as the ranks of a job, e.g. cohortrun "
                "-np 4 cohort-info --peers)\n", cohort_last_error());
        return 1;
    }
    int rank = cohort_comm_rank(comm), n = cohort_comm_size(comm);
    size_t row = (size_t)n * NAME_LEN + 64;
    char *mine = calloc(1, row), *all = calloc((size_t)n, row);
    if (!mine || !all) {
        fprintf(stderr, "cohort-info --peers: out of memory\n");
        return 1;
    }
    cohort_node_hostname(mine, 64);
    for (int p = 0; p < n; p++) {
        const char *t = cohort_comm_peer_transport(comm, p);
        snprintf(mine + 64 + (size_t)p * NAME_LEN, NAME_LEN, "%s", p == rank ? "-" : t ? t : "?");
    }
    st = cohort_allgather(comm, mine, all, row, COHORT_UINT8);
    if (st) fprintf(stderr, "cohort-info --peers: %s\n", cohort_last_error());
    if (!st && rank == 0) {
        printf("%d ranks on %d node(s); row: rank, its host, then the transport it uses to reach "
               "each rank\n%-5s %-20s", n, cohort_comm_node_count(comm), "rank", "host");
        for (int p = 0; p < n; p++) printf(" %6d", p);
        printf("\n");
        for (int r = 0; r < n; r++) {
            const char *rr = all + (size_t)r * row;
            printf("%-5d %-20.20s", r, rr);
            for (int p = 0; p < n; p++) printf(" %6.6s", rr + 64 + (size_t)p * NAME_LEN);
            printf("\n");
        }
        /* the allgather above ran on whatever runs this communicator's collectives */
        const char *algo = cohort_comm_last_algo(comm);
        if (n > 1 && cohort_comm_peer_transport(comm, rank ? 0 : 1) &&
            !strcmp(algo, cohort_comm_peer_transport(comm, rank ? 0 : 1)))
            printf("collectives: run by the %s transport itself (node collectives)\n", algo);
        else if (n > 1)
            printf("collectives: the core's algorithms over the transports above (allgather: "
                   "%s)\n", algo);
    }
    free(mine);
    free(all);
    cohort_comm_destroy(comm);
    return st ? 1 : 0;
}

/* ---- --topology -------------------------------------------------------------------------- */

typedef struct topo_job {
    const char *file;     /* NULL: COHORT_TOPO_FILE, else this machine */
    long nodes, rpn;      /* rpn 0: one rank per package */
    int map_by_node;
} topo_job_t;

/* The first name in names (n of them) after ordering for place p; "-" when none. */
static const char *nearest_netif(const cohort_topo_t *t, const cohort_place_t *p,
                                 const char *const *names, int n, int *order)
{
    if (n == 0) return "-";
    cohort_topo_order_netifs(t, p, names, n, order);
    return names[order[0]];
}

/* The GPU nearest to p, the first one on ties; "-" when t has none. */
static const char *nearest_gpu(const cohort_topo_t *t, const cohort_place_t *p)
{
    const cohort_topo_dev_t *devs, *best = NULL;
    int n = cohort_topo_devs(t, &devs), bestd = 4;
    for (int i = 0; i < n; i++) {
        if (devs[i].kind != COHORT_DEV_GPU) continue;
        int d = cohort_topo_distance(t, p, &devs[i]);
        if (d < bestd) {
            best = &devs[i];
            bestd = d;
        }
    }
    return best ? best->name : "-";
}

static void print_index(int width, int v)
{
    if (v >= 0)
        printf(" %*d", width, v);
    else
        printf(" %*s", width, "-");
}

static int show_topology(const topo_job_t *job)
{
    cohort_topo_t *t;
    if (cohort_topo_load(job->file, &t)) {
        fprintf(stderr, "cohort-info --topology: %s\n", cohort_last_error());
        return 1;
    }
    cohort_topo_report(t, stdout);
    cohort_topo_counts_t c;
    cohort_topo_counts(t, &c);
    long nodes = job->nodes, rpn = job->rpn ? job->rpn : (c.packages > 0 ? c.packages : 1);
    long n = nodes * rpn;
    if (c.cores == 0) {
        fprintf(stderr, "cohort-info --topology: %s has no cores in hwloc's view: no placement "
                "to show\n", cohort_topo_source(t));
        cohort_topo_free(t);
        return 1;
    }
    /* the machine's network interfaces, loopback excluded */
    const cohort_topo_dev_t *devs;
    int ndev = cohort_topo_devs(t, &devs), nnet = 0;
    const char **nets = calloc((size_t)ndev + 1, sizeof *nets);
    int *order = calloc((size_t)ndev + 1, sizeof *order);
    cohort_rank_loc_t *locs = calloc((size_t)n, sizeof *locs);
    cohort_place_t *places = calloc((size_t)n, sizeof *places);
    int *ring = calloc((size_t)n, sizeof *ring);
    int rc = 0;
    if (!nets || !order || !locs || !places || !ring) {
        fprintf(stderr, "cohort-info --topology: out of memory for %ld ranks\n", n);
        rc = 1;
        goto out;
    }
    for (int i = 0; i < ndev; i++)
        if (devs[i].kind == COHORT_DEV_NET && strcmp(devs[i].name, "lo") != 0)
            nets[nnet++] = devs[i].name;
    for (long node = 0; node < nodes && !rc; node++) {
        for (long l = 0; l < rpn; l++) {
            long rank = job->map_by_node ? l * nodes + node : node * rpn + l;
            int core = (int)(l * c.cores / rpn);
            char cpus[64];
            if (cohort_topo_core_cpus(t, core, cpus, sizeof cpus) ||
                cohort_topo_place_cpus(t, cpus, &places[rank])) {
                fprintf(stderr, "cohort-info --topology: local rank %ld: %s\n", l,
                        cohort_last_error());
                rc = 1;
                break;
            }
            locs[rank] = (cohort_rank_loc_t){ (int)node, places[rank].package, places[rank].numa,
                                              places[rank].core };
        }
    }
    if (rc) goto out;
    printf("\nJob: %ld node(s) x %ld rank(s) per node, map-by %s; local rank l on core "
           "l*%d/%ld\n", nodes, rpn, job->map_by_node ? "node" : "slot", c.cores, rpn);
    printf("%6s %5s %7s %5s %5s  %-16s %-10s %s\n", "rank", "node", "package", "numa", "core",
           "cpus", "nic", "gpu");
    for (long r = 0; r < n; r++) {
        const cohort_place_t *p = &places[r];
        printf("%6ld %5d", r, locs[r].node);
        print_index(7, p->package);
        print_index(5, p->numa);
        print_index(5, p->core);
        printf("  %-16s %-10s %s\n", p->cpus, nearest_netif(t, p, nets, nnet, order),
               nearest_gpu(t, p));
    }
    cohort_topo_ring(locs, (int)n, ring);
    printf("ring:");
    for (long i = 0; i < n; i++) printf(" %d", ring[i]);
    printf("\nring by node:");
    for (long i = 0; i < n; i++) {
        if (i == 0 || locs[ring[i]].node != locs[ring[i - 1]].node)
            printf(" [node %d]", locs[ring[i]].node);
        printf(" %d", ring[i]);
    }
    printf("\n");
out:
    free(nets);
    free(order);
    free(locs);
    free(places);
    free(ring);
    cohort_topo_free(t);
    return rc;
}

/* The value of option argv[*i] (the next argument); NULL after a message when there is none. */
static const char *option_value(int argc, char **argv, int *i)
{
    if (*i + 1 >= argc) {
        fprintf(stderr, "cohort-info: %s needs a value\n", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

/* As a rank of a job: the job's topology report, written by rank 0 at communicator creation. */
static int show_job_topology(void)
{
    const char *dump = getenv("COHORT_TOPO_DUMP");
    if (!dump || !*dump) setenv("COHORT_TOPO_DUMP", "/dev/stdout", 1);
    fflush(stdout);
    cohort_comm_t *comm;
    cohort_status_t st = cohort_comm_init(&comm);
    if (st) {
        fprintf(stderr, "cohort-info --topology --job: %s\n(run it as the ranks of a job, e.g. "
                "cohortrun -np 4 cohort-info --topology --job)\n", cohort_last_error());
        return 1;
    }
    if (cohort_comm_rank(comm) == 0 && dump && *dump)
        printf("report written to %s (COHORT_TOPO_DUMP)\n", dump);
    st = cohort_barrier(comm);
    if (st) fprintf(stderr, "cohort-info --topology --job: %s\n", cohort_last_error());
    cohort_comm_destroy(comm);
    return st ? 1 : 0;
}

int main(int argc, char **argv)
{
    int plugins = 0, settings = 0, ifs = 0, topo = 0, topo_opts = 0;
    topo_job_t job = { NULL, 1, 0, 0 };
    if (argc == 2 && !strcmp(argv[1], "--peers")) return show_peers();
    if (argc == 3 && ((!strcmp(argv[1], "--topology") && !strcmp(argv[2], "--job")) ||
                      (!strcmp(argv[2], "--topology") && !strcmp(argv[1], "--job"))))
        return show_job_topology();
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--topology")) topo = 1;
        else if (!strcmp(argv[i], "--topo-file") || !strcmp(argv[i], "--nodes") ||
                 !strcmp(argv[i], "--ranks-per-node") || !strcmp(argv[i], "--map-by")) {
            const char *opt = argv[i], *v = option_value(argc, argv, &i);
            if (!v) {
                usage(stderr);
                return 2;
            }
            topo_opts = 1;
            cohort_status_t st = COHORT_SUCCESS;
            if (!strcmp(opt, "--topo-file")) job.file = v;
            else if (!strcmp(opt, "--nodes")) st = cohort_parse_long(opt, v, 1, 65536, &job.nodes);
            else if (!strcmp(opt, "--ranks-per-node"))
                st = cohort_parse_long(opt, v, 1, 4096, &job.rpn);
            else if (!strcmp(v, "node") || !strcmp(v, "slot")) job.map_by_node = !strcmp(v, "node");
            else {
                fprintf(stderr, "cohort-info: --map-by: '%s' is not slot or node\n", v);
                return 2;
            }
            if (st) {
                fprintf(stderr, "cohort-info: %s\n", cohort_last_error());
                return 2;
            }
        } else if (!strcmp(argv[i], "--plugins")) plugins = 1;
        else if (!strcmp(argv[i], "--settings")) settings = 1;
        else if (!strcmp(argv[i], "--interfaces")) ifs = 1;
        else if (!strcmp(argv[i], "--all")) plugins = settings = ifs = 1;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--version")) {
            printf("cohort-info (cohort) %s\n", cohort_version());
            return 0;
        } else {
            fprintf(stderr, "cohort-info: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (topo_opts && !topo) {
        fprintf(stderr, "cohort-info: --topo-file, --nodes, --ranks-per-node and --map-by go with "
                "--topology\n");
        usage(stderr);
        return 2;
    }
    if (topo && (plugins || settings || ifs)) {
        fprintf(stderr, "cohort-info: --topology is shown on its own (drop the other options)\n");
        return 2;
    }
    if (topo) {
        if (job.nodes * (job.rpn ? job.rpn : 1) > (1L << 20)) {
            fprintf(stderr, "cohort-info: --nodes %ld x --ranks-per-node %ld: at most %ld ranks\n",
                    job.nodes, job.rpn, 1L << 20);
            return 2;
        }
        return show_topology(&job);
    }
    if (!plugins && !settings && !ifs) plugins = settings = ifs = 1;
    printf("cohort %s (public API %d.%d.%d, plugin ABI %d.%d)\n", cohort_version(),
           COHORT_VERSION_MAJOR, COHORT_VERSION_MINOR, COHORT_VERSION_PATCH,
           COHORT_PLUGIN_ABI_MAJOR, COHORT_PLUGIN_ABI_MINOR);
    char here[4096];
    if (cohort_plugins_install_dir(here, sizeof here))
        printf("Installed plugin directory: %s (this install, moved; configured: "
               "%s)\n", here, COHORT_PLUGIN_DIR);
    else
        printf("Installed plugin directory: %s\n", COHORT_PLUGIN_DIR);
#ifdef COHORT_BUILD_SUMMARY
    printf("Build: %s\n", COHORT_BUILD_SUMMARY);
#endif
    int rc = 0;
    if (plugins) show_plugins();
    if (settings) rc |= show_settings();
    if (ifs) rc |= show_interfaces();
    return rc;
}
