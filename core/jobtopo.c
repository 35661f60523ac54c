/* SPDX-License-Identifier: BSD-3-Clause */
/* The job's shape: the process's topology and place, interface order, the TOPO_DUMP report. */
#include "core/jobtopo.h"
#include "core/config.h"
#include "core/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SUBSYS "init"

static pthread_mutex_t topo_lock = PTHREAD_MUTEX_INITIALIZER;
static cohort_topo_t *g_topo;        /* kept for the life of the process */
static char g_topo_src[1024];        /* what g_topo was loaded from ("" discovery) */
static int g_discovery_failed;
static cohort_place_t g_place;
static int g_place_known;

cohort_status_t cohort_job_topo(const cohort_topo_t **t)
{
    const char *file = cohort_config_get("COHORT_TOPO_FILE");
    const char *want = file && *file ? file : "";
    cohort_status_t st = COHORT_SUCCESS;
    pthread_mutex_lock(&topo_lock);
    if (g_topo && strcmp(g_topo_src, want)) {   /* the setting changed (tests) */
        cohort_topo_free(g_topo);
        g_topo = NULL;
        g_place_known = 0;
    }
    if (!g_topo && !(g_discovery_failed && !*want)) {
        cohort_topo_t *nt = NULL;
        st = cohort_topo_load(*want ? want : NULL, &nt);
        if (st == COHORT_SUCCESS) {
            g_topo = nt;
            snprintf(g_topo_src, sizeof g_topo_src, "%s", want);
        } else if (!*want) {
            COHORT_WARN(SUBSYS, "topology discovery failed (%s): rings follow nodes and rank "
                        "numbers only, and interfaces keep their default order",
                        cohort_last_error());
            g_discovery_failed = 1;
            st = COHORT_SUCCESS;
        } else {
            cohort_error_prefix("COHORT_TOPO_FILE");
        }
    }
    *t = g_topo;
    pthread_mutex_unlock(&topo_lock);
    return st;
}

void cohort_job_place(cohort_place_t *p)
{
    const cohort_topo_t *t = NULL;
    *p = (cohort_place_t){ -1, -1, -1, 0, "" };
    if (cohort_job_topo(&t) || !t) return;
    pthread_mutex_lock(&topo_lock);
    /* The binding can change between communicators (a framework pinning threads): re-read it,
     * it is cheap next to the creation's exchange rounds. */
    if (cohort_topo_place_self(t, &g_place) == COHORT_SUCCESS) g_place_known = 1;
    if (g_place_known) *p = g_place;
    pthread_mutex_unlock(&topo_lock);
}

void cohort_job_order_netifs(cohort_netif_t *ifs, const int *cls, int n)
{
    const cohort_topo_t *t = NULL;
    if (n < 2 || cohort_job_topo(&t) || !t) return;
    cohort_place_t p;
    cohort_job_place(&p);
    const char **names = malloc((size_t)n * sizeof *names);
    int *order = malloc((size_t)n * sizeof *order), *dist = malloc((size_t)n * sizeof *dist);
    cohort_netif_t *tmp = malloc((size_t)n * sizeof *tmp);
    if (!names || !order || !dist || !tmp) goto out;
    for (int i = 0; i < n; i++) names[i] = ifs[i].name;
    cohort_topo_order_netifs(t, &p, names, n, order);
    for (int i = 0; i < n; i++) dist[order[i]] = i;   /* nearness rank of interface order[i] */
    /* stable: by class, then nearness */
    int k = 0;
    int maxc = 0;
    for (int i = 0; i < n; i++) maxc = cls[i] > maxc ? cls[i] : maxc;
    for (int c = 0; c <= maxc; c++)
        for (int d = 0; d < n; d++)
            for (int i = 0; i < n; i++)
                if (cls[i] == c && dist[i] == d) tmp[k++] = ifs[i];
    if (k == n) memcpy(ifs, tmp, (size_t)n * sizeof *tmp);
out:
    free(names);
    free(order);
    free(dist);
    free(tmp);
}

int cohort_job_rdma_devices(char (*out)[32], int max)
{
    const cohort_topo_t *t = NULL;
    if (max <= 0 || cohort_job_topo(&t) || !t) return 0;
    cohort_place_t p;
    cohort_job_place(&p);
    return cohort_topo_order_rdma(t, &p, out, max);
}

cohort_status_t cohort_job_hier_mode(int *mode)
{
    return cohort_job_hier_parse(cohort_config_get("COHORT_HIERARCHICAL"), mode);
}

cohort_status_t cohort_job_hier_parse(const char *v, int *mode)
{
    if (!v || !strcmp(v, "auto")) *mode = COHORT_HIER_AUTO;
    else if (!strcmp(v, "1")) *mode = COHORT_HIER_FORCE;
    else if (!strcmp(v, "0")) *mode = COHORT_HIER_OFF;
    else
        return cohort_error(COHORT_ERR_INVALID_ARG, "COHORT_HIERARCHICAL='%s' is not one of "
                            "auto, 1 (force) or 0 (flat rings)", v);
    return COHORT_SUCCESS;
}

static void put_place(FILE *f, int v)
{
    if (v < 0) fprintf(f, " %7s", "-");
    else fprintf(f, " %7d", v);
}

cohort_status_t cohort_job_dump(const char *path, const cohort_job_rank_t *r, int n,
                                const int *ring, const char *plan)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return cohort_error(COHORT_ERR_SYSTEM, "COHORT_TOPO_DUMP: cannot write '%s': %s", path,
                            strerror(errno));
    const cohort_topo_t *t = NULL;
    fprintf(f, "# cohort topology report (COHORT_TOPO_DUMP)\n\n");
    if (cohort_job_topo(&t) == COHORT_SUCCESS && t) {
        fprintf(f, "## machine of rank 0 (%s)\n\n", cohort_topo_source(t));
        cohort_topo_report(t, f);
    } else {
        fprintf(f, "## machine of rank 0: unknown (discovery failed)\n");
    }
    int nodes = 0;
    for (int i = 0; i < n; i++) nodes = r[i].node + 1 > nodes ? r[i].node + 1 : nodes;
    fprintf(f, "\n## ranks (%d on %d node%s)\n\n", n, nodes, nodes == 1 ? "" : "s");
    fprintf(f, "%5s %-20s %4s %5s %7s %7s %7s %-12s %s\n", "rank", "host", "node", "local",
            "package", "numa", "core", "cpus", "interface");
    for (int i = 0; i < n; i++) {
        fprintf(f, "%5d %-20.20s %4d %5d", i, r[i].host, r[i].node, r[i].local);
        put_place(f, r[i].package);
        put_place(f, r[i].numa);
        put_place(f, r[i].core);
        fprintf(f, " %-12s %s\n", r[i].cpus[0] ? r[i].cpus : "-",
                r[i].nic && r[i].nic[0] ? r[i].nic : "-");
    }
    fprintf(f, "\n## node groups\n\n");
    for (int d = 0; d < nodes; d++) {
        const char *host = "?";
        fprintf(f, "node %d:", d);
        for (int i = 0; i < n; i++)
            if (r[i].node == d) {
                fprintf(f, " %d", i);
                host = r[i].host;
            }
        fprintf(f, "  (%s)\n", host);
    }
    fprintf(f, "\n## ring\n\n");
    for (int i = 0; i < n; i++) fprintf(f, "%s%d", i ? " -> " : "", ring[i]);
    fprintf(f, " -> %d\n", ring[0]);
    fprintf(f, "\n## hierarchy\n\n%s\n", plan);
    if (fclose(f) != 0)
        return cohort_error(COHORT_ERR_SYSTEM, "COHORT_TOPO_DUMP: writing '%s' failed: %s", path,
                            strerror(errno));
    return COHORT_SUCCESS;
}
