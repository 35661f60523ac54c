/* SPDX-License-Identifier: BSD-3-Clause */
/* The job's shape: this process's place in the machine (through topology/), and from every
 * rank's place the node groups, the ring order and the hierarchical plan; the COHORT_TOPO_DUMP
 * report. */
#ifndef COHORT_CORE_JOBTOPO_H
#define COHORT_CORE_JOBTOPO_H

#include "cohort/cohort.h"
#include "cohort/plugin.h"
#include "topology/topo.h"

/* The process's topology, loaded once: COHORT_TOPO_FILE, else discovery. A file that cannot be
 * loaded is an error (the user asked for it); a failed discovery is logged once at WARN and gives
 * *t = NULL (places unknown: rings then follow nodes and rank numbers). */
cohort_status_t cohort_job_topo(const cohort_topo_t **t);

/* This process's place (all -1 when unknown). */
void cohort_job_place(cohort_place_t *p);

/* Orders netifs in place for a process at place p: nearest first (cohort_topo_order_netifs)
 * within each of the classes given by cls[] (lower first), ties in the given order. */
void cohort_job_order_netifs(cohort_netif_t *ifs, const int *cls, int n);

/* The RDMA devices of the process's topology, nearest to its place first (ties in hwloc's
 * order): up to max names copied into names[i] (each len bytes); returns how many. 0 when the
 * topology is unavailable or has none. */
int cohort_job_rdma_devices(char (*names)[32], int max);

/* What each rank says about itself at communicator creation. */
typedef struct cohort_job_rank {
    int node;                   /* node index (order of the nodes' lowest rank) */
    int local;                  /* rank among its node's ranks, by rank number */
    int package, numa, core;
    char cpus[64];
    const char *host;           /* hostname, for reports */
    const char *nic;            /* the interface its network transport prefers ("" none) */
} cohort_job_rank_t;

/* Hierarchy modes (COHORT_HIERARCHICAL). */
enum { COHORT_HIER_OFF = 0, COHORT_HIER_FORCE = 1, COHORT_HIER_AUTO = 2 };
cohort_status_t cohort_job_hier_mode(int *mode);
/* The same for a given text (NULL: auto). */
cohort_status_t cohort_job_hier_parse(const char *text, int *mode);

/* Writes the COHORT_TOPO_DUMP report to path: the machine seen by this rank, every rank's place
 * and interface, the node groups, the ring and the hierarchical plan (plan: a line of text). */
cohort_status_t cohort_job_dump(const char *path, const cohort_job_rank_t *ranks, int n,
                                const int *ring, const char *plan);

#endif
