/* SPDX-License-Identifier: BSD-3-Clause */
/* The machine's topology through hwloc: where a process runs, the I/O devices (network
 * interfaces, RDMA devices, GPUs) and their PCI locality, and the ring order of a job's ranks.
 *
 * topology/ knows hwloc and nothing of transports or communicators: the core feeds it names and
 * places and gets orders back. Every function is safe on a topology loaded from an XML file of
 * another machine (COHORT_TOPO_FILE), which is how the tests use it.
 */
#ifndef COHORT_TOPOLOGY_TOPO_H
#define COHORT_TOPOLOGY_TOPO_H

#include <stdio.h>
#include "cohort/cohort.h"

typedef struct cohort_topo cohort_topo_t;

/* Loads path (an hwloc XML file) when non-NULL, else the file named by COHORT_TOPO_FILE when
 * set, else discovers this machine, I/O devices included. Failures return COHORT_ERR_INVALID_ARG
 * (a file that is missing or not hwloc XML: the message names the file, the setting and hwloc's
 * reason) or COHORT_ERR_SYSTEM, after cohort_error(). */
cohort_status_t cohort_topo_load(const char *path, cohort_topo_t **out);
void cohort_topo_free(cohort_topo_t *t);
/* "this machine" or the XML file's path. */
const char *cohort_topo_source(const cohort_topo_t *t);

/* Where a process runs. Logical indexes (hwloc's, 0-based); -1 when unknown or when the binding
 * spans several (an unbound process on a two-socket machine has package -1). */
typedef struct cohort_place {
    int package;
    int numa;
    int core;            /* the first core of the binding */
    int ncores;          /* cores the binding touches (0: unknown) */
    char cpus[64];       /* the binding as an OS PU list, "0-3,8" ("" unknown) */
} cohort_place_t;

/* The calling process's binding (sched_getaffinity, as OS PU indexes looked up in t: on a
 * topology loaded from a file, the PUs with those OS indexes in the file). */
cohort_status_t cohort_topo_place_self(const cohort_topo_t *t, cohort_place_t *p);
/* A hypothetical binding given as an OS PU list ("0-3,8"); a malformed list or one naming no PU
 * of t is COHORT_ERR_INVALID_ARG with a message. */
cohort_status_t cohort_topo_place_cpus(const cohort_topo_t *t, const char *cpulist,
                                       cohort_place_t *p);

enum { COHORT_DEV_NET = 1, COHORT_DEV_RDMA = 2, COHORT_DEV_GPU = 3 };

typedef struct cohort_topo_dev {
    int kind;            /* COHORT_DEV_* */
    char name[32];       /* "eth0", "ib0", "mlx5_0", "cuda0" */
    char pci[16];        /* "0000:02:00.0"; "" for a virtual device (veth, bridge, lo) */
    char peer[32];       /* the device on the same PCI function of the other kind, e.g. "ib0"
                            for "mlx4_0" and "mlx4_0" for "ib0"; "" when none */
    int package, numa;   /* locality (logical indexes); -1 unknown or the whole machine */
    char cpus[64];       /* the locality as an OS PU list ("" unknown) */
} cohort_topo_dev_t;

/* The devices of t (network interfaces, RDMA devices, GPUs), in hwloc's order. GPUs: CUDA,
 * NVML, OpenCL or DRM OS devices, one entry per PCI device (the CUDA name preferred). */
int cohort_topo_devs(const cohort_topo_t *t, const cohort_topo_dev_t **devs);
/* The device called name (NULL if t has none). */
const cohort_topo_dev_t *cohort_topo_dev(const cohort_topo_t *t, const char *name);

/* How far a device is from a place: 0 on the same NUMA node, 1 in the same package, 2 elsewhere
 * in the machine, 3 unknown (virtual device, or a place spanning packages). */
int cohort_topo_distance(const cohort_topo_t *t, const cohort_place_t *p,
                         const cohort_topo_dev_t *d);

/* Orders candidate network interfaces (by name) for a process at place p: nearest first by
 * cohort_topo_distance (an interface unknown to t counts as 3), ties kept in the given order.
 * order[i] receives an index into names. */
void cohort_topo_order_netifs(const cohort_topo_t *t, const cohort_place_t *p,
                              const char *const *names, int n, int *order);

/* The RDMA devices of t for a process at place p, nearest first (as cohort_topo_order_netifs;
 * ties in hwloc's order): up to max names into out; returns how many. */
int cohort_topo_order_rdma(const cohort_topo_t *t, const cohort_place_t *p, char (*out)[32],
                           int max);

/* Where each rank of a job runs, as the core collects it. */
typedef struct cohort_rank_loc {
    int node;                    /* node index, 0 .. nodes-1 */
    int package, numa, core;     /* from cohort_place_t; -1 unknown */
} cohort_rank_loc_t;

/* The ring order of n ranks: ring[pos] = rank. Nodes come in the order of their lowest rank and
 * each node's ranks are contiguous (every node is entered and left once); inside a node ranks
 * are sorted by (package, numa, core, rank), unknown (-1) sorting after known. So the ring
 * depends on where ranks run, not on how the launcher numbered them. */
void cohort_topo_ring(const cohort_rank_loc_t *locs, int n, int *ring);

/* A readable report of t: packages, NUMA nodes, cores and PUs, then every device with its PCI
 * address and locality. */
void cohort_topo_report(const cohort_topo_t *t, FILE *f);

/* How many packages, NUMA nodes, cores and PUs t has (hwloc's objects; 0 where hwloc has none). */
typedef struct cohort_topo_counts {
    int packages, numas, cores, pus;
} cohort_topo_counts_t;
void cohort_topo_counts(const cohort_topo_t *t, cohort_topo_counts_t *c);
/* The OS PU list of the core with logical index core ("0,12"), for cohort_topo_place_cpus;
 * COHORT_ERR_INVALID_ARG when t has no such core or the list does not fit in len. */
cohort_status_t cohort_topo_core_cpus(const cohort_topo_t *t, int core, char *buf, size_t len);

#endif
