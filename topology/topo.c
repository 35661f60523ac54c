/* SPDX-License-Identifier: BSD-3-Clause */
/* The machine's topology through hwloc (see topo.h for the contract).
 *
 * Places and device localities are computed from cpusets (OS PU indexes, as hwloc keeps them):
 * a package or NUMA node is named when exactly one of them intersects the cpuset, -1 otherwise.
 * Devices are collected once at load time into a flat table, so the queries need no hwloc walk.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE   /* CPU_ALLOC, sched_getaffinity */
#endif
#include "topology/topo.h"
#include "core/config.h"
#include "core/log.h"
#include "core/parse.h"

#include <errno.h>
#include <hwloc.h>
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#define SUBSYS "topo"
/* Largest hwloc XML file read: a big machine's export is a few MiB. */
#define TOPO_FILE_MAX ((size_t)64 << 20)
/* Highest OS PU index a CPU list may name (hwloc bitmaps grow to fit; this bounds a typo). */
#define CPULIST_MAX_INDEX (1 << 20)

struct cohort_topo {
    hwloc_topology_t h;
    char *source;              /* "this machine" or the file's path */
    cohort_topo_dev_t *devs;
    int ndevs;
};

/* ---- cpusets to places ------------------------------------------------------------------ */

/* The logical index of the only object of type that intersects cs; -1 when none or several. */
static int only_intersecting(hwloc_topology_t h, hwloc_obj_type_t type, hwloc_const_cpuset_t cs)
{
    int found = -1;
    hwloc_obj_t o = NULL;
    while ((o = hwloc_get_next_obj_by_type(h, type, o)) != NULL) {
        if (!o->cpuset || !hwloc_bitmap_intersects(o->cpuset, cs)) continue;
        if (found >= 0) return -1;
        found = (int)o->logical_index;
    }
    return found;
}

/* cs as an OS PU list in buf; a list too long for buf is cut at a comma and ends in "...". */
static void format_cpus(hwloc_const_cpuset_t cs, char *buf, size_t len)
{
    char *full = NULL;
    if (hwloc_bitmap_list_asprintf(&full, cs) < 0 || !full) {
        buf[0] = '\0';
        return;
    }
    size_t n = strlen(full);
    if (n < len) {
        memcpy(buf, full, n + 1);
    } else {
        size_t cut = len - 4;                 /* room for "..." and the terminator */
        while (cut > 0 && full[cut] != ',') cut--;
        memcpy(buf, full, cut);
        memcpy(buf + cut, "...", 4);
    }
    free(full);
}

static void place_unknown(cohort_place_t *p)
{
    p->package = p->numa = p->core = -1;
    p->ncores = 0;
    p->cpus[0] = '\0';
}

/* cs must already be restricted to the topology's PUs and non-empty. */
static void place_of_cpuset(hwloc_topology_t h, hwloc_const_cpuset_t cs, cohort_place_t *p)
{
    place_unknown(p);
    p->package = only_intersecting(h, HWLOC_OBJ_PACKAGE, cs);
    p->numa = only_intersecting(h, HWLOC_OBJ_NUMANODE, cs);
    hwloc_obj_t c = NULL;
    while ((c = hwloc_get_next_obj_by_type(h, HWLOC_OBJ_CORE, c)) != NULL) {
        if (!c->cpuset || !hwloc_bitmap_intersects(c->cpuset, cs)) continue;
        if (p->core < 0) p->core = (int)c->logical_index;
        p->ncores++;
    }
    format_cpus(cs, p->cpus, sizeof p->cpus);
}

/* Keeps the PUs of cs that t has; returns how many remain. */
static int restrict_to_topology(hwloc_topology_t h, hwloc_cpuset_t cs)
{
    hwloc_const_cpuset_t all = hwloc_topology_get_topology_cpuset(h);
    hwloc_bitmap_and(cs, cs, all);
    return hwloc_bitmap_weight(cs);
}

/* ---- the CPU list parser ---------------------------------------------------------------- */

static cohort_status_t cpulist_error(const char *text, const char *at, const char *what)
{
    return cohort_error(COHORT_ERR_INVALID_ARG,
                        "topology: bad CPU list '%s': %s at '%s' (expected OS PU numbers and "
                        "ranges separated by commas, e.g. \"0-3,8\")",
                        text, what, *at ? at : "(end)");
}

static cohort_status_t cpulist_number(const char *text, const char **s, long *v)
{
    const char *at = *s;
    if (*at < '0' || *at > '9') return cpulist_error(text, at, "expected a number");
    long x = 0;
    while (**s >= '0' && **s <= '9') {
        x = x * 10 + (**s - '0');
        if (x > CPULIST_MAX_INDEX) return cpulist_error(text, at, "PU number too large");
        (*s)++;
    }
    *v = x;
    return COHORT_SUCCESS;
}

/* "0-3,8" into cs (OS indexes); surrounding blanks are allowed, nothing else. */
static cohort_status_t parse_cpulist(const char *text, hwloc_bitmap_t cs)
{
    const char *s = text;
    hwloc_bitmap_zero(cs);
    while (*s == ' ' || *s == '\t' || *s == '\n') s++;
    if (!*s) return cpulist_error(text, s, "empty list");
    for (;;) {
        long lo, hi;
        const char *item = s;
        cohort_status_t st = cpulist_number(text, &s, &lo);
        if (st) return st;
        hi = lo;
        if (*s == '-') {
            s++;
            st = cpulist_number(text, &s, &hi);
            if (st) return st;
            if (hi < lo) return cpulist_error(text, item, "range runs backwards");
        }
        if (hwloc_bitmap_set_range(cs, (unsigned)lo, (int)hi) < 0)
            return cohort_error(COHORT_ERR_NO_MEMORY, "topology: out of memory for CPU list '%s'",
                                text);
        if (*s == ',') {
            s++;
            continue;
        }
        while (*s == ' ' || *s == '\t' || *s == '\n') s++;
        if (*s) return cpulist_error(text, s, "unexpected text");
        return COHORT_SUCCESS;
    }
}

/* ---- devices ---------------------------------------------------------------------------- */

/* The PCI device an OS device hangs from (NULL for a virtual one). */
static hwloc_obj_t pci_parent(hwloc_obj_t o)
{
    for (hwloc_obj_t p = o->parent; p; p = p->parent) {
        if (p->type == HWLOC_OBJ_PCI_DEVICE) return p;
        if (p->type != HWLOC_OBJ_OS_DEVICE) return NULL;
    }
    return NULL;
}

static int starts_with(const char *s, const char *prefix)
{
    return s && !strncmp(s, prefix, strlen(prefix));
}

/* GPU name preference, lower is better: CUDA, NVML, ROCm SMI, Level Zero, OpenCL, DRM. */
static int gpu_rank(hwloc_obj_t o)
{
    const char *n = o->name ? o->name : "";
    const char *sub = o->subtype ? o->subtype : "";
    if (!strcmp(sub, "CUDA") || starts_with(n, "cuda")) return 0;
    if (!strcmp(sub, "NVML") || starts_with(n, "nvml")) return 1;
    if (!strcmp(sub, "RSMI") || starts_with(n, "rsmi")) return 2;
    if (!strcmp(sub, "LevelZero") || starts_with(n, "ze")) return 3;
    if (!strcmp(sub, "OpenCL") || starts_with(n, "opencl")) return 4;
    if (starts_with(n, "card")) return 5;
    if (starts_with(n, "renderD")) return 6;
    return 7;
}

/* Whether a GPU/co-processor OS device is a GPU (an OpenCL CPU device or a Xeon Phi is not). */
static int is_gpu(hwloc_obj_t o)
{
    const char *cl = hwloc_obj_get_info_by_name(o, "OpenCLDeviceType");
    if (cl && strcmp(cl, "GPU") != 0) return 0;
    if (o->attr->osdev.type == HWLOC_OBJ_OSDEV_COPROC && gpu_rank(o) == 7) return 0;
    return 1;
}

/* An IP-over-InfiniBand interface: a 20-byte hardware address, or the usual ib* name. */
static int is_ipoib(hwloc_obj_t o)
{
    const char *a = hwloc_obj_get_info_by_name(o, "Address");
    return starts_with(o->name, "ib") || (a && strlen(a) == 59);
}

static void copy_name(char *dst, size_t len, const char *src)
{
    snprintf(dst, len, "%s", src ? src : "");
}

static void dev_locality(hwloc_topology_t h, hwloc_obj_t o, hwloc_obj_t pci,
                         cohort_topo_dev_t *d)
{
    d->package = d->numa = -1;
    d->cpus[0] = '\0';
    if (!pci) return;   /* virtual: no locality */
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(h, o);
    if (!anc || !anc->cpuset || hwloc_bitmap_iszero(anc->cpuset)) return;
    d->package = only_intersecting(h, HWLOC_OBJ_PACKAGE, anc->cpuset);
    d->numa = only_intersecting(h, HWLOC_OBJ_NUMANODE, anc->cpuset);
    format_cpus(anc->cpuset, d->cpus, sizeof d->cpus);
}

static cohort_status_t collect_devs(cohort_topo_t *t)
{
    hwloc_topology_t h = t->h;
    int max = 0;
    for (hwloc_obj_t o = NULL; (o = hwloc_get_next_osdev(h, o)) != NULL;) max++;
    if (max == 0) return COHORT_SUCCESS;
    t->devs = calloc((size_t)max, sizeof *t->devs);
    hwloc_obj_t *objs = calloc((size_t)max, sizeof *objs);   /* the OS device of each entry */
    hwloc_obj_t *pcis = calloc((size_t)max, sizeof *pcis);
    if (!t->devs || !objs || !pcis) {
        free(objs);
        free(pcis);
        return cohort_error(COHORT_ERR_NO_MEMORY, "topology: out of memory for %d devices", max);
    }
    int n = 0;
    for (hwloc_obj_t o = NULL; (o = hwloc_get_next_osdev(h, o)) != NULL;) {
        int kind;
        switch (o->attr->osdev.type) {
        case HWLOC_OBJ_OSDEV_NETWORK: kind = COHORT_DEV_NET; break;
        case HWLOC_OBJ_OSDEV_OPENFABRICS: kind = COHORT_DEV_RDMA; break;
        case HWLOC_OBJ_OSDEV_GPU:
        case HWLOC_OBJ_OSDEV_COPROC: kind = is_gpu(o) ? COHORT_DEV_GPU : 0; break;
        default: kind = 0; break;
        }
        if (!kind || !o->name) continue;
        hwloc_obj_t pci = pci_parent(o);
        if (kind == COHORT_DEV_GPU && pci) {
            /* one entry per PCI device: keep the first one's place, the best name */
            int i;
            for (i = 0; i < n; i++)
                if (t->devs[i].kind == COHORT_DEV_GPU && pcis[i] == pci) break;
            if (i < n) {
                if (gpu_rank(o) < gpu_rank(objs[i])) {
                    objs[i] = o;
                    copy_name(t->devs[i].name, sizeof t->devs[i].name, o->name);
                }
                continue;
            }
        }
        cohort_topo_dev_t *d = &t->devs[n];
        d->kind = kind;
        copy_name(d->name, sizeof d->name, o->name);
        if (pci)
            snprintf(d->pci, sizeof d->pci, "%04x:%02x:%02x.%01x",
                     (unsigned)pci->attr->pcidev.domain, (unsigned)pci->attr->pcidev.bus,
                     (unsigned)pci->attr->pcidev.dev, (unsigned)pci->attr->pcidev.func & 0xfu);
        dev_locality(h, o, pci, d);
        objs[n] = o;
        pcis[n] = pci;
        n++;
    }
    /* peers: the other kind on the same PCI function; an RDMA device prefers IPoIB */
    for (int i = 0; i < n; i++) {
        cohort_topo_dev_t *d = &t->devs[i];
        if (d->kind == COHORT_DEV_GPU || !pcis[i]) continue;
        int want = d->kind == COHORT_DEV_NET ? COHORT_DEV_RDMA : COHORT_DEV_NET, best = -1;
        for (int j = 0; j < n; j++) {
            if (t->devs[j].kind != want || pcis[j] != pcis[i]) continue;
            if (best < 0 || (want == COHORT_DEV_NET && !is_ipoib(objs[best]) &&
                             is_ipoib(objs[j])))
                best = j;
        }
        if (best >= 0) copy_name(d->peer, sizeof d->peer, t->devs[best].name);
    }
    free(objs);
    free(pcis);
    t->ndevs = n;
    return COHORT_SUCCESS;
}

/* ---- load / free ------------------------------------------------------------------------ */

static cohort_status_t load_file(cohort_topo_t *t, const char *path, const char *from)
{
    /* hwloc's own errors on a missing file are terse (errno only), and it reads /dev/zero or a
     * FIFO forever: check it first (a regular file of at most TOPO_FILE_MAX bytes) */
    char why[160];
    if (cohort_file_check(path, TOPO_FILE_MAX, why, sizeof why))
        return cohort_error(COHORT_ERR_INVALID_ARG,
                            "topology: hwloc XML file '%s'%s %s; check the path "
                            "(export one with: lstopo-no-graphics FILE.xml)%s",
                            path, from, why,
                            *from ? ", or unset COHORT_TOPO_FILE to discover this machine" : "");
    if (hwloc_topology_set_xml(t->h, path) < 0) {
        int e = errno;
        return cohort_error(COHORT_ERR_INVALID_ARG,
                            "topology: hwloc refused '%s'%s as an XML topology: %s; check that "
                            "it is hwloc XML (lstopo-no-graphics --input '%s')",
                            path, from, strerror(e), path);
    }
    if (hwloc_topology_load(t->h) < 0) {
        int e = errno;
        return cohort_error(COHORT_ERR_INVALID_ARG,
                            "topology: '%s'%s is not a loadable hwloc XML topology (hwloc: %s); "
                            "check it with lstopo-no-graphics --input '%s' or export a new one "
                            "with lstopo-no-graphics FILE.xml",
                            path, from, strerror(e), path);
    }
    return COHORT_SUCCESS;
}

cohort_status_t cohort_topo_load(const char *path, cohort_topo_t **out)
{
    if (!out) return cohort_error(COHORT_ERR_INVALID_ARG, "cohort_topo_load: out is NULL");
    *out = NULL;
    const char *from = "";
    if (!path) {
        const char *env = cohort_config_get("COHORT_TOPO_FILE");
        if (env && *env) {
            path = env;
            from = " (COHORT_TOPO_FILE)";
        }
    }
    cohort_topo_t *t = calloc(1, sizeof *t);
    if (!t) return cohort_error(COHORT_ERR_NO_MEMORY, "topology: out of memory");
    t->source = strdup(path ? path : "this machine");
    if (!t->source) {
        free(t);
        return cohort_error(COHORT_ERR_NO_MEMORY, "topology: out of memory");
    }
    if (hwloc_topology_init(&t->h) < 0) {
        int e = errno;
        free(t->source);
        free(t);
        return cohort_error(COHORT_ERR_SYSTEM, "topology: hwloc_topology_init failed: %s",
                            strerror(e));
    }
    /* I/O devices (PCI and OS devices: NICs, RDMA, GPUs) are filtered out by default */
    hwloc_topology_set_io_types_filter(t->h, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
#ifdef __linux__
    /* hwloc's "pci" component (libpciaccess) leaves allocations behind after
     * hwloc_topology_destroy (LeakSanitizer reports ~1 KB per load in every program that
     * discovers); hwloc's linux component reads the same PCI tree from sysfs without it. */
    if (!path) hwloc_topology_set_components(t->h, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "pci");
#endif
    cohort_status_t st;
    if (path) {
        st = load_file(t, path, from);
    } else if (hwloc_topology_load(t->h) < 0) {
        int e = errno;
        st = cohort_error(COHORT_ERR_SYSTEM,
                          "topology: hwloc could not discover this machine: %s; set "
                          "COHORT_TOPO_FILE to an hwloc XML export of it (lstopo-no-graphics "
                          "FILE.xml)", strerror(e));
    } else {
        st = COHORT_SUCCESS;
    }
    if (!st) st = collect_devs(t);
    if (st) {
        cohort_topo_free(t);
        return st;
    }
    cohort_log(COHORT_LOG_INFO, SUBSYS, "topology of %s: %d packages, %d cores, %d PUs, %d devices",
               t->source, hwloc_get_nbobjs_by_type(t->h, HWLOC_OBJ_PACKAGE),
               hwloc_get_nbobjs_by_type(t->h, HWLOC_OBJ_CORE),
               hwloc_get_nbobjs_by_type(t->h, HWLOC_OBJ_PU), t->ndevs);
    *out = t;
    return COHORT_SUCCESS;
}

void cohort_topo_free(cohort_topo_t *t)
{
    if (!t) return;
    if (t->h) hwloc_topology_destroy(t->h);
    free(t->devs);
    free(t->source);
    free(t);
}

const char *cohort_topo_source(const cohort_topo_t *t)
{
    return t ? t->source : "";
}

/* ---- places ----------------------------------------------------------------------------- */

cohort_status_t cohort_topo_place_self(const cohort_topo_t *t, cohort_place_t *p)
{
    if (!t || !p) return cohort_error(COHORT_ERR_INVALID_ARG, "cohort_topo_place_self: NULL argument");
    place_unknown(p);
    int ncpu = CPU_SETSIZE;
    cpu_set_t *set = NULL;
    size_t size = 0;
    for (;;) {
        set = CPU_ALLOC((size_t)ncpu);
        if (!set) return cohort_error(COHORT_ERR_NO_MEMORY, "topology: out of memory");
        size = CPU_ALLOC_SIZE((size_t)ncpu);
        CPU_ZERO_S(size, set);
        if (sched_getaffinity(0, size, set) == 0) break;
        int e = errno;
        CPU_FREE(set);
        if (e != EINVAL || ncpu >= CPULIST_MAX_INDEX)
            return cohort_error(COHORT_ERR_SYSTEM, "topology: sched_getaffinity failed: %s",
                                strerror(e));
        ncpu *= 2;   /* the kernel's mask is larger than ours */
    }
    hwloc_bitmap_t cs = hwloc_bitmap_alloc();
    if (!cs) {
        CPU_FREE(set);
        return cohort_error(COHORT_ERR_NO_MEMORY, "topology: out of memory");
    }
    for (int i = 0; i < ncpu; i++)
        if (CPU_ISSET_S((size_t)i, size, set)) hwloc_bitmap_set(cs, (unsigned)i);
    CPU_FREE(set);
    if (restrict_to_topology(t->h, cs) > 0)
        place_of_cpuset(t->h, cs, p);
    else
        cohort_log(COHORT_LOG_INFO, SUBSYS, "this process's CPUs are not PUs of %s: place unknown",
                   t->source);
    hwloc_bitmap_free(cs);
    return COHORT_SUCCESS;
}

cohort_status_t cohort_topo_place_cpus(const cohort_topo_t *t, const char *cpulist,
                                       cohort_place_t *p)
{
    if (!t || !p || !cpulist)
        return cohort_error(COHORT_ERR_INVALID_ARG, "cohort_topo_place_cpus: NULL argument");
    place_unknown(p);
    hwloc_bitmap_t cs = hwloc_bitmap_alloc();
    if (!cs) return cohort_error(COHORT_ERR_NO_MEMORY, "topology: out of memory");
    cohort_status_t st = parse_cpulist(cpulist, cs);
    if (!st && restrict_to_topology(t->h, cs) == 0) {
        char all[64];
        format_cpus(hwloc_topology_get_topology_cpuset(t->h), all, sizeof all);
        st = cohort_error(COHORT_ERR_INVALID_ARG,
                          "topology: CPU list '%s' names no PU of %s (its PUs are %s)", cpulist,
                          t->source, all);
    }
    if (!st) place_of_cpuset(t->h, cs, p);
    hwloc_bitmap_free(cs);
    return st;
}

/* ---- devices and distances -------------------------------------------------------------- */

int cohort_topo_devs(const cohort_topo_t *t, const cohort_topo_dev_t **devs)
{
    if (devs) *devs = t ? t->devs : NULL;
    return t ? t->ndevs : 0;
}

const cohort_topo_dev_t *cohort_topo_dev(const cohort_topo_t *t, const char *name)
{
    if (!t || !name) return NULL;
    for (int i = 0; i < t->ndevs; i++)
        if (!strcmp(t->devs[i].name, name)) return &t->devs[i];
    return NULL;
}

int cohort_topo_distance(const cohort_topo_t *t, const cohort_place_t *p,
                         const cohort_topo_dev_t *d)
{
    (void)t;
    if (!p || !d || !d->pci[0] || !d->cpus[0] || p->package < 0) return 3;
    if (d->numa >= 0 && d->numa == p->numa) return 0;
    if (d->package >= 0 && d->package == p->package) return 1;
    return 2;
}

void cohort_topo_order_netifs(const cohort_topo_t *t, const cohort_place_t *p,
                              const char *const *names, int n, int *order)
{
    if (n <= 0 || !order) return;
    int *dist = malloc((size_t)n * sizeof *dist);
    if (!dist) {
        /* no memory: the given order is still an order */
        for (int i = 0; i < n; i++) order[i] = i;
        cohort_log(COHORT_LOG_WARN, SUBSYS, "out of memory ordering %d interfaces: given order", n);
        return;
    }
    for (int i = 0; i < n; i++) {
        const cohort_topo_dev_t *d = names && names[i] ? cohort_topo_dev(t, names[i]) : NULL;
        dist[i] = d ? cohort_topo_distance(t, p, d) : 3;
    }
    /* stable insertion sort of the indexes by distance */
    for (int i = 0; i < n; i++) {
        int k = i, j = i;
        while (j > 0 && dist[order[j - 1]] > dist[k]) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = k;
    }
    free(dist);
}

/* ---- the ring --------------------------------------------------------------------------- */

typedef struct ring_key {
    int node, first, package, numa, core, rank;
} ring_key_t;

static int unknown_last(int v)
{
    return v < 0 ? INT_MAX : v;
}

static int cmp_int(int a, int b)
{
    return (a > b) - (a < b);
}

static int cmp_node_rank(const void *pa, const void *pb)
{
    const ring_key_t *a = pa, *b = pb;
    int c = cmp_int(a->node, b->node);
    return c ? c : cmp_int(a->rank, b->rank);
}

static int cmp_ring(const void *pa, const void *pb)
{
    const ring_key_t *a = pa, *b = pb;
    int c;
    if ((c = cmp_int(a->first, b->first))) return c;
    if ((c = cmp_int(unknown_last(a->package), unknown_last(b->package)))) return c;
    if ((c = cmp_int(unknown_last(a->numa), unknown_last(b->numa)))) return c;
    if ((c = cmp_int(unknown_last(a->core), unknown_last(b->core)))) return c;
    return cmp_int(a->rank, b->rank);
}

void cohort_topo_ring(const cohort_rank_loc_t *locs, int n, int *ring)
{
    if (n <= 0 || !locs || !ring) return;
    ring_key_t *k = malloc((size_t)n * sizeof *k);
    if (!k) {
        /* no memory: the identity ring is still a ring */
        for (int i = 0; i < n; i++) ring[i] = i;
        cohort_log(COHORT_LOG_WARN, SUBSYS, "out of memory ordering %d ranks: ring in rank order",
                   n);
        return;
    }
    for (int r = 0; r < n; r++)
        k[r] = (ring_key_t){ locs[r].node, r, locs[r].package, locs[r].numa, locs[r].core, r };
    /* each node's lowest rank: sort by (node, rank), the first of each run */
    qsort(k, (size_t)n, sizeof *k, cmp_node_rank);
    for (int i = 1; i < n; i++)
        if (k[i].node == k[i - 1].node) k[i].first = k[i - 1].first;
    qsort(k, (size_t)n, sizeof *k, cmp_ring);
    for (int i = 0; i < n; i++) ring[i] = k[i].rank;
    free(k);
}

/* ---- report ----------------------------------------------------------------------------- */

static const char *kind_name(int kind)
{
    switch (kind) {
    case COHORT_DEV_NET: return "net";
    case COHORT_DEV_RDMA: return "rdma";
    case COHORT_DEV_GPU: return "gpu";
    default: return "?";
    }
}

static void print_index(FILE *f, int v)
{
    if (v >= 0)
        fprintf(f, " %7d", v);
    else
        fprintf(f, " %7s", "-");
}

void cohort_topo_report(const cohort_topo_t *t, FILE *f)
{
    if (!t || !f) return;
    hwloc_topology_t h = t->h;
    char cpus[64];
    fprintf(f, "Topology of %s: %d package(s), %d NUMA node(s), %d core(s), %d PU(s)\n",
            t->source, hwloc_get_nbobjs_by_type(h, HWLOC_OBJ_PACKAGE),
            hwloc_get_nbobjs_by_type(h, HWLOC_OBJ_NUMANODE),
            hwloc_get_nbobjs_by_type(h, HWLOC_OBJ_CORE),
            hwloc_get_nbobjs_by_type(h, HWLOC_OBJ_PU));
    for (hwloc_obj_t pk = NULL; (pk = hwloc_get_next_obj_by_type(h, HWLOC_OBJ_PACKAGE, pk));) {
        format_cpus(pk->cpuset, cpus, sizeof cpus);
        int cores = hwloc_get_nbobjs_inside_cpuset_by_type(h, pk->cpuset, HWLOC_OBJ_CORE);
        fprintf(f, "  package %u: %d core(s), PUs %s; NUMA node(s)", pk->logical_index, cores,
                cpus);
        int any = 0;
        for (hwloc_obj_t nn = NULL;
             (nn = hwloc_get_next_obj_by_type(h, HWLOC_OBJ_NUMANODE, nn));) {
            if (!nn->cpuset || !hwloc_bitmap_intersects(nn->cpuset, pk->cpuset)) continue;
            fprintf(f, " %u", nn->logical_index);
            any = 1;
        }
        fprintf(f, "%s\n", any ? "" : " none");
    }
    if (t->ndevs == 0) {
        fprintf(f, "Devices: none (no network interface, RDMA device or GPU seen by hwloc)\n");
        return;
    }
    fprintf(f, "Devices (%d):\n  %-5s %-12s %-13s %-12s %7s %7s  %s\n", t->ndevs, "kind", "name",
            "pci", "peer", "package", "numa", "cpus");
    for (int i = 0; i < t->ndevs; i++) {
        const cohort_topo_dev_t *d = &t->devs[i];
        fprintf(f, "  %-5s %-12s %-13s %-12s", kind_name(d->kind), d->name,
                d->pci[0] ? d->pci : "virtual", d->peer[0] ? d->peer : "-");
        print_index(f, d->package);
        print_index(f, d->numa);
        fprintf(f, "  %s\n", d->cpus[0] ? d->cpus : "-");
    }
}

/* ---- counts ----------------------------------------------------------------------------- */

void cohort_topo_counts(const cohort_topo_t *t, cohort_topo_counts_t *c)
{
    if (!c) return;
    c->packages = c->numas = c->cores = c->pus = 0;
    if (!t) return;
    int v;
    if ((v = hwloc_get_nbobjs_by_type(t->h, HWLOC_OBJ_PACKAGE)) > 0) c->packages = v;
    if ((v = hwloc_get_nbobjs_by_type(t->h, HWLOC_OBJ_NUMANODE)) > 0) c->numas = v;
    if ((v = hwloc_get_nbobjs_by_type(t->h, HWLOC_OBJ_CORE)) > 0) c->cores = v;
    if ((v = hwloc_get_nbobjs_by_type(t->h, HWLOC_OBJ_PU)) > 0) c->pus = v;
}

cohort_status_t cohort_topo_core_cpus(const cohort_topo_t *t, int core, char *buf, size_t len)
{
    if (!t || !buf || len == 0)
        return cohort_error(COHORT_ERR_INVALID_ARG, "cohort_topo_core_cpus: NULL argument");
    buf[0] = '\0';
    hwloc_obj_t c = core >= 0 ? hwloc_get_obj_by_type(t->h, HWLOC_OBJ_CORE, (unsigned)core) : NULL;
    if (!c || !c->cpuset)
        return cohort_error(COHORT_ERR_INVALID_ARG, "topology: %s has no core %d (it has %d)",
                            t->source, core, hwloc_get_nbobjs_by_type(t->h, HWLOC_OBJ_CORE));
    int n = hwloc_bitmap_list_snprintf(buf, len, c->cpuset);
    if (n < 0 || (size_t)n >= len) {
        buf[0] = '\0';
        return cohort_error(COHORT_ERR_INVALID_ARG,
                            "topology: the PU list of core %d of %s does not fit in %zu bytes",
                            core, t->source, len);
    }
    return COHORT_SUCCESS;
}

int cohort_topo_order_rdma(const cohort_topo_t *t, const cohort_place_t *p, char (*out)[32],
                           int max)
{
    if (!t || !p || max <= 0) return 0;
    const cohort_topo_dev_t *devs;
    int nd = cohort_topo_devs(t, &devs), n = 0;
    const char **names = malloc((size_t)(nd ? nd : 1) * sizeof *names);
    int *order = malloc((size_t)(nd ? nd : 1) * sizeof *order);
    if (names && order) {
        for (int i = 0; i < nd; i++)
            if (devs[i].kind == COHORT_DEV_RDMA) names[n++] = devs[i].name;
        cohort_topo_order_netifs(t, p, names, n, order);   /* by name: any kind of device */
        if (n > max) n = max;
        for (int i = 0; i < n; i++) snprintf(out[i], sizeof out[i], "%s", names[order[i]]);
    }
    free(names);
    free(order);
    return n;   /* 0 when out of memory: names was never filled */
}
