/* cohort-info: version, build, plugins (and why any was refused), settings, interfaces. */
#include "cohort/cohort.h"
#include "cohort/plugin.h"
#include "core/config.h"
#include "core/netif.h"
#include "core/plugin_loader.h"
#include "topology/node.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f, "usage: cohort-info [--plugins] [--settings] [--interfaces] [--all]\n"
               "       cohortrun -np N [...] cohort-info --peers\n"
               "Shows cohort's version and build, the transport plugins found (and why any was\n"
               "refused), every setting with its default, current value and help, and the\n"
               "network interfaces cohort would use. Without options: everything.\n"
               "--peers runs as the ranks of a job (under cohortrun, mpirun, srun or torchrun),\n"
               "creates a communicator and prints, on rank 0, each rank's host and the transport\n"
               "every pair of ranks uses.\n");
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
        printf("  %-8s %-9s %s\n           %s\n", r[i].name, r[i].loaded ? "usable" : "refused",
               r[i].why, r[i].path);
    if (n == 0) printf("  (none found)\n");
    if (st) printf("  error: %s\n", cohort_last_error());
}

static void show_settings(void)
{
    size_t n;
    const cohort_setting_t *s = cohort_settings(&n);
    printf("\nSettings (environment, then cohort.conf, then default):\n");
    for (size_t i = 0; i < n; i++) {
        const char *v = cohort_config_get(s[i].name);
        printf("  %-22s = %-14s [%s; default %s]\n      %s\n", s[i].name, v ? v : "(unset)",
               cohort_config_source(s[i].name), s[i].def ? s[i].def : "unset", s[i].help);
    }
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
    if (cohort_netifs(&use, &n) != COHORT_SUCCESS) {
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

int main(int argc, char **argv)
{
    int plugins = 0, settings = 0, ifs = 0;
    if (argc == 2 && !strcmp(argv[1], "--peers")) return show_peers();
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--plugins")) plugins = 1;
        else if (!strcmp(argv[i], "--settings")) settings = 1;
        else if (!strcmp(argv[i], "--interfaces")) ifs = 1;
        else if (!strcmp(argv[i], "--all")) plugins = settings = ifs = 1;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "cohort-info: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (!plugins && !settings && !ifs) plugins = settings = ifs = 1;
    printf("cohort %s (public API %d.%d.%d, plugin ABI %d.%d)\n", cohort_version(),
           COHORT_VERSION_MAJOR, COHORT_VERSION_MINOR, COHORT_VERSION_PATCH,
           COHORT_PLUGIN_ABI_MAJOR, COHORT_PLUGIN_ABI_MINOR);
    printf("Installed plugin directory: %s\n", COHORT_PLUGIN_DIR);
#ifdef COHORT_BUILD_SUMMARY
    printf("Build: %s\n", COHORT_BUILD_SUMMARY);
#endif
    int rc = 0;
    if (plugins) show_plugins();
    if (settings) show_settings();
    if (ifs) rc |= show_interfaces();
    return rc;
}
