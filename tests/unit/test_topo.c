/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests for topology/topo.c on four real machines (the XML files of tests/topologies/, from
 * hwloc's test suite) and on this one. Every expectation was read off the XML files (lstopo-no-graphics
 * --input FILE -p, hwloc-calc --input FILE --po --intersect pu package:N); tests/topologies/
 * README.md summarises them. Errors are checked for the status AND the cohort_last_error()
 * message naming the file or the text. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "topology/topo.h"
#include "core/plugin_loader.h"
#include "tests/unit/expect.h"

#ifndef COHORT_TEST_TOPO_DIR
#define COHORT_TEST_TOPO_DIR "tests/topologies"
#endif

#define M24 "24em64t-2n6c2t-pci.xml"
#define M32 "32em64t-2n8c2t-pci-normalio.xml"
#define MP8 "power8gpudistances.xml"
#define MVF "16intel64-manyVFs.xml"

/* $top_srcdir/tests/topologies/name under make check, else the configured source path. */
static const char *xml(const char *name)
{
    static char buf[4096];
    const char *top = getenv("top_srcdir");
    if (top && *top)
        snprintf(buf, sizeof buf, "%s/tests/topologies/%s", top, name);
    else
        snprintf(buf, sizeof buf, "%s/%s", COHORT_TEST_TOPO_DIR, name);
    return buf;
}

static cohort_topo_t *load(const char *name)
{
    cohort_topo_t *t = NULL;
    const char *path = xml(name);
    EXPECT_OK(cohort_topo_load(path, &t));
    ck_assert_ptr_nonnull(t);
    ck_assert_str_eq(cohort_topo_source(t), path);
    return t;
}

static cohort_place_t place(const cohort_topo_t *t, const char *cpus)
{
    cohort_place_t p;
    EXPECT_OK(cohort_topo_place_cpus(t, cpus, &p));
    return p;
}

#define CHECK_PLACE(t, cpus, pkg, nn, c, nc)                                                   \
    do {                                                                                      \
        cohort_place_t p_ = place(t, cpus);                                                   \
        ck_assert_msg(p_.package == (pkg) && p_.numa == (nn) && p_.core == (c) &&              \
                          p_.ncores == (nc),                                                  \
                      "PUs %s: package %d numa %d core %d ncores %d, expected %d %d %d %d",    \
                      cpus, p_.package, p_.numa, p_.core, p_.ncores, pkg, nn, c, nc);         \
    } while (0)

/* Packages, NUMA nodes and cores seen by placing each of the PUs first..last, one at a time. */
static void count_by_places(const cohort_topo_t *t, const int *pus, int npus, int *npkg,
                            int *nnuma, int *ncore)
{
    int seen_pkg[64] = {0}, seen_numa[64] = {0}, seen_core[256] = {0};
    *npkg = *nnuma = *ncore = 0;
    for (int i = 0; i < npus; i++) {
        char s[16];
        snprintf(s, sizeof s, "%d", pus[i]);
        cohort_place_t p = place(t, s);
        ck_assert_int_eq(p.ncores, 1);
        ck_assert_int_ge(p.package, 0);
        ck_assert_int_ge(p.numa, 0);
        ck_assert_int_ge(p.core, 0);
        ck_assert_int_lt(p.package, 64);
        ck_assert_int_lt(p.numa, 64);
        ck_assert_int_lt(p.core, 256);
        ck_assert_str_eq(p.cpus, s);
        if (!seen_pkg[p.package]++) (*npkg)++;
        if (!seen_numa[p.numa]++) (*nnuma)++;
        if (!seen_core[p.core]++) (*ncore)++;
    }
}

static void range(int *pus, int *n, int lo, int hi)
{
    for (int i = lo; i <= hi; i++) pus[(*n)++] = i;
}

#define CHECK_DEV(t, nm, k, pciaddr, pr, pkg)                                                   \
    do {                                                                                      \
        const cohort_topo_dev_t *d_ = cohort_topo_dev(t, nm);                                 \
        ck_assert_msg(d_ != NULL, "no device %s", nm);                                        \
        ck_assert_int_eq(d_->kind, k);                                                        \
        ck_assert_str_eq(d_->name, nm);                                                       \
        ck_assert_str_eq(d_->pci, pciaddr);                                                   \
        ck_assert_str_eq(d_->peer, pr);                                                       \
        ck_assert_int_eq(d_->package, pkg);                                                   \
        ck_assert_int_eq(d_->numa, pkg); /* one NUMA node per package on these machines */    \
    } while (0)

/* The device names of t in order, space-separated (kind 0: all kinds). */
static void dev_names(const cohort_topo_t *t, int kind, char *buf, size_t len)
{
    const cohort_topo_dev_t *d;
    int n = cohort_topo_devs(t, &d);
    buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (kind && d[i].kind != kind) continue;
        size_t used = strlen(buf);
        snprintf(buf + used, len - used, "%s%s", used ? " " : "", d[i].name);
    }
}

/* order_netifs of names at the place of cpus, as the names joined by spaces. */
static void ordered(const cohort_topo_t *t, const char *cpus, const char *const *names, int n,
                    char *buf, size_t len)
{
    cohort_place_t p = place(t, cpus);
    int order[32];
    ck_assert_int_le(n, 32);
    for (int i = 0; i < n; i++) order[i] = -1;
    cohort_topo_order_netifs(t, &p, names, n, order);
    int seen[32] = {0};
    buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        ck_assert_int_ge(order[i], 0);
        ck_assert_int_lt(order[i], n);
        ck_assert_msg(!seen[order[i]]++, "index %d twice in the order", order[i]);
        size_t used = strlen(buf);
        snprintf(buf + used, len - used, "%s%s", i ? " " : "", names[order[i]]);
    }
}

/* ---- 24em64t: 2 x 6 cores x 2 PUs, even PUs on package 0, Mellanox VPI on package 0 ----- */

START_TEST(m24_places)
{
    cohort_topo_t *t = load(M24);
    int pus[32], n = 0, np, nn, nc;
    range(pus, &n, 0, 23);
    count_by_places(t, pus, n, &np, &nn, &nc);
    ck_assert_int_eq(np, 2);
    ck_assert_int_eq(nn, 2);
    ck_assert_int_eq(nc, 12);
    CHECK_PLACE(t, "0", 0, 0, 0, 1);
    CHECK_PLACE(t, "1", 1, 1, 6, 1);      /* odd PUs are package 1, whose first core is 6 */
    CHECK_PLACE(t, "0,12", 0, 0, 0, 1);   /* the two PUs of core 0 */
    CHECK_PLACE(t, "0,2", 0, 0, 0, 2);
    CHECK_PLACE(t, "3,5,7", 1, 1, 7, 3);  /* OS PU 3 is package 1's second core */
    CHECK_PLACE(t, "0-1", -1, -1, 0, 2);  /* spans both packages */
    CHECK_PLACE(t, "0-23", -1, -1, 0, 12);
    cohort_place_t p = place(t, " 0,2,4 \n");
    ck_assert_str_eq(p.cpus, "0,2,4");
    ck_assert_int_eq(p.ncores, 3);
    /* PUs outside the file are dropped from the place; some must remain */
    p = place(t, "22-40");
    ck_assert_str_eq(p.cpus, "22-23");
    ck_assert_int_eq(p.package, -1);
    cohort_topo_free(t);
}
END_TEST

START_TEST(m24_devices)
{
    cohort_topo_t *t = load(M24);
    char names[256];
    dev_names(t, 0, names, sizeof names);
    ck_assert_str_eq(names, "eth0 eth1 eth2 ib0 mlx4_0");   /* sda is no NIC/RDMA/GPU */
    CHECK_DEV(t, "eth0", COHORT_DEV_NET, "0000:04:00.0", "", 0);
    CHECK_DEV(t, "eth1", COHORT_DEV_NET, "0000:04:00.1", "", 0);
    /* one ConnectX (mlx4) function with an Ethernet port and an InfiniBand port */
    CHECK_DEV(t, "eth2", COHORT_DEV_NET, "0000:05:00.0", "mlx4_0", 0);
    CHECK_DEV(t, "ib0", COHORT_DEV_NET, "0000:05:00.0", "mlx4_0", 0);
    CHECK_DEV(t, "mlx4_0", COHORT_DEV_RDMA, "0000:05:00.0", "ib0", 0);
    ck_assert_str_eq(cohort_topo_dev(t, "ib0")->cpus, "0,2,4,6,8,10,12,14,16,18,20,22");
    ck_assert_ptr_null(cohort_topo_dev(t, "sda"));
    ck_assert_ptr_null(cohort_topo_dev(t, "eth3"));
    ck_assert_ptr_null(cohort_topo_dev(t, NULL));
    dev_names(t, COHORT_DEV_GPU, names, sizeof names);
    ck_assert_str_eq(names, "");   /* 3D controllers without an OS device are not GPUs here */
    cohort_topo_free(t);
}
END_TEST

START_TEST(m24_distance_and_order)
{
    cohort_topo_t *t = load(M24);
    const cohort_topo_dev_t *ib = cohort_topo_dev(t, "ib0");
    cohort_place_t p0 = place(t, "4"), p1 = place(t, "5"), both = place(t, "4-5");
    ck_assert_int_eq(cohort_topo_distance(t, &p0, ib), 0);
    ck_assert_int_eq(cohort_topo_distance(t, &p1, ib), 2);
    ck_assert_int_eq(cohort_topo_distance(t, &both, ib), 3);
    char out[256];
    const char *names[] = {"lo", "eth1", "ib0", "nosuch0"};
    ordered(t, "0", names, 4, out, sizeof out);
    ck_assert_str_eq(out, "eth1 ib0 lo nosuch0");   /* unknown names count as 3, keep order */
    ordered(t, "1", names, 4, out, sizeof out);
    ck_assert_str_eq(out, "eth1 ib0 lo nosuch0");   /* 2 before 3 */
    const char *rev[] = {"ib0", "eth0"};
    ordered(t, "1", rev, 2, out, sizeof out);
    ck_assert_str_eq(out, "ib0 eth0");              /* a tie keeps the given order */
    ordered(t, "0-1", rev, 2, out, sizeof out);
    ck_assert_str_eq(out, "ib0 eth0");
    cohort_topo_free(t);
}
END_TEST

/* ---- 32em64t: 2 x 8 x 2, everything I/O on package 1 ----------------------------------- */

START_TEST(m32_places_devices)
{
    cohort_topo_t *t = load(M32);
    int pus[40], n = 0, np, nn, nc;
    range(pus, &n, 0, 31);
    count_by_places(t, pus, n, &np, &nn, &nc);
    ck_assert_int_eq(np, 2);
    ck_assert_int_eq(nn, 2);
    ck_assert_int_eq(nc, 16);
    CHECK_PLACE(t, "8", 1, 1, 8, 1);
    CHECK_PLACE(t, "24", 1, 1, 8, 1);      /* PU 24 is core 8's second thread */
    CHECK_PLACE(t, "16-23", 0, 0, 0, 8);
    CHECK_PLACE(t, "0-7,16-23", 0, 0, 0, 8);
    char names[256];
    dev_names(t, 0, names, sizeof names);
    ck_assert_str_eq(names, "eth0 eth1 cuda0 opencl0d1 ib0 mlx5_0");
    CHECK_DEV(t, "eth0", COHORT_DEV_NET, "0000:81:00.0", "", 1);
    CHECK_DEV(t, "eth1", COHORT_DEV_NET, "0000:81:00.1", "", 1);
    CHECK_DEV(t, "ib0", COHORT_DEV_NET, "0000:04:00.0", "mlx5_0", 1);
    CHECK_DEV(t, "mlx5_0", COHORT_DEV_RDMA, "0000:04:00.0", "ib0", 1);
    /* the Tesla at 84:00.0 has cuda0 and DRM card0: one entry, the CUDA name */
    CHECK_DEV(t, "cuda0", COHORT_DEV_GPU, "0000:84:00.0", "", 1);
    ck_assert_ptr_null(cohort_topo_dev(t, "card0"));
    /* the Radeon at 84:00.1 is another PCI function with only an OpenCL device */
    CHECK_DEV(t, "opencl0d1", COHORT_DEV_GPU, "0000:84:00.1", "", 1);
    const cohort_topo_dev_t *d;
    int nd = cohort_topo_devs(t, &d), cuda = 0;
    for (int i = 0; i < nd; i++)
        if (d[i].kind == COHORT_DEV_GPU && !strncmp(d[i].name, "cuda", 4)) {
            cuda++;
            ck_assert_int_eq(d[i].package, 1);
        }
    ck_assert_int_eq(cuda, 1);
    ck_assert_str_eq(cohort_topo_dev(t, "cuda0")->cpus, "8-15,24-31");
    /* package 0 ranks: everything is 2 away, the given order stays; package 1: all 0 */
    cohort_place_t p0 = place(t, "0"), p1 = place(t, "31");
    ck_assert_int_eq(cohort_topo_distance(t, &p0, cohort_topo_dev(t, "cuda0")), 2);
    ck_assert_int_eq(cohort_topo_distance(t, &p1, cohort_topo_dev(t, "cuda0")), 0);
    char out[128];
    const char *nics[] = {"veth0", "ib0", "eth0"};
    ordered(t, "0", nics, 3, out, sizeof out);
    ck_assert_str_eq(out, "ib0 eth0 veth0");
    ordered(t, "9", nics, 3, out, sizeof out);
    ck_assert_str_eq(out, "ib0 eth0 veth0");
    cohort_topo_free(t);
}
END_TEST

/* ---- POWER8: 4 GPUs, 2 per package ----------------------------------------------------- */

START_TEST(p8_gpus)
{
    cohort_topo_t *t = load(MP8);
    int pus[16], n = 0, np, nn, nc;
    const int p8[] = {0, 1, 8, 9, 16, 17, 24, 25, 80, 81, 88, 89, 96, 97, 104, 105};
    for (int i = 0; i < 16; i++) pus[n++] = p8[i];
    count_by_places(t, pus, n, &np, &nn, &nc);
    ck_assert_int_eq(np, 2);
    ck_assert_int_eq(nn, 2);
    ck_assert_int_eq(nc, 8);
    CHECK_PLACE(t, "80", 1, 1, 4, 1);
    CHECK_PLACE(t, "0-1", 0, 0, 0, 1);
    CHECK_PLACE(t, "0-2", 0, 0, 0, 1);     /* PU 2 is not in this machine */
    char names[256];
    dev_names(t, 0, names, sizeof names);
    ck_assert_str_eq(names, "cuda0 cuda1 cuda2 cuda3");   /* nvml*, opencl0d* merged */
    CHECK_DEV(t, "cuda0", COHORT_DEV_GPU, "0002:01:00.0", "", 0);
    CHECK_DEV(t, "cuda1", COHORT_DEV_GPU, "0003:01:00.0", "", 0);
    CHECK_DEV(t, "cuda2", COHORT_DEV_GPU, "000a:01:00.0", "", 1);
    CHECK_DEV(t, "cuda3", COHORT_DEV_GPU, "000b:01:00.0", "", 1);
    ck_assert_ptr_null(cohort_topo_dev(t, "nvml0"));
    cohort_place_t p0 = place(t, "8"), p1 = place(t, "105");
    ck_assert_int_eq(cohort_topo_distance(t, &p0, cohort_topo_dev(t, "cuda1")), 0);
    ck_assert_int_eq(cohort_topo_distance(t, &p0, cohort_topo_dev(t, "cuda2")), 2);
    ck_assert_int_eq(cohort_topo_distance(t, &p1, cohort_topo_dev(t, "cuda3")), 0);
    ck_assert_int_eq(cohort_topo_distance(t, &p1, cohort_topo_dev(t, "cuda0")), 2);
    ck_assert_int_eq(cohort_topo_distance(t, &p1, NULL), 3);
    cohort_topo_free(t);
}
END_TEST

/* ---- 16intel64: many NICs on both packages --------------------------------------------- */

START_TEST(vf_nics)
{
    cohort_topo_t *t = load(MVF);
    int pus[16], n = 0, np, nn, nc;
    range(pus, &n, 0, 15);
    count_by_places(t, pus, n, &np, &nn, &nc);
    ck_assert_int_eq(np, 2);
    ck_assert_int_eq(nn, 2);
    ck_assert_int_eq(nc, 16);
    CHECK_PLACE(t, "8-15", 1, 1, 8, 8);
    char names[256];
    dev_names(t, COHORT_DEV_NET, names, sizeof names);
    ck_assert_str_eq(names, "eth0 eth1 eth4 eth5 eth6 eth7");   /* VFs have no netdev */
    dev_names(t, COHORT_DEV_RDMA, names, sizeof names);
    ck_assert_str_eq(names, "usnic_0 usnic_1 usnic_2");
    CHECK_DEV(t, "eth0", COHORT_DEV_NET, "0000:02:00.0", "", 0);
    CHECK_DEV(t, "eth4", COHORT_DEV_NET, "0000:0b:00.0", "usnic_0", 0);
    CHECK_DEV(t, "usnic_1", COHORT_DEV_RDMA, "0000:0c:00.0", "eth5", 0);
    CHECK_DEV(t, "eth6", COHORT_DEV_NET, "0000:88:00.0", "usnic_2", 1);
    CHECK_DEV(t, "usnic_2", COHORT_DEV_RDMA, "0000:88:00.0", "eth6", 1);
    CHECK_DEV(t, "eth7", COHORT_DEV_NET, "0000:89:00.0", "", 1);
    const char *all[] = {"eth0", "eth1", "eth4", "eth5", "eth6", "eth7"};
    char out[128];
    ordered(t, "12", all, 6, out, sizeof out);
    ck_assert_str_eq(out, "eth6 eth7 eth0 eth1 eth4 eth5");
    ordered(t, "3", all, 6, out, sizeof out);
    ck_assert_str_eq(out, "eth0 eth1 eth4 eth5 eth6 eth7");
    const char *two[] = {"eth7", "eth1"};
    ordered(t, "0", two, 2, out, sizeof out);
    ck_assert_str_eq(out, "eth1 eth7");            /* the socket-local NIC first */
    ordered(t, "8", two, 2, out, sizeof out);
    ck_assert_str_eq(out, "eth7 eth1");
    ordered(t, "7-8", two, 2, out, sizeof out);    /* spanning: all unknown, order kept */
    ck_assert_str_eq(out, "eth7 eth1");
    cohort_topo_free(t);
}
END_TEST

/* The RDMA devices for a place, nearest first (what the verbs transport tries first, through
 * the host table's rdma_devices). */
static void rdma_at(const cohort_topo_t *t, const char *cpus, int max, char *buf, size_t len)
{
    cohort_place_t p = place(t, cpus);
    char names[8][32];
    int n = cohort_topo_order_rdma(t, &p, names, max);
    buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        size_t used = strlen(buf);
        snprintf(buf + used, len - used, "%s%s", i ? " " : "", names[i]);
    }
}

START_TEST(rdma_devices_nearest_first)
{
    cohort_topo_t *t = load(MVF);   /* usnic_0, usnic_1 on package 0; usnic_2 on package 1 */
    char out[128];
    rdma_at(t, "12", 8, out, sizeof out);
    ck_assert_str_eq(out, "usnic_2 usnic_0 usnic_1");
    rdma_at(t, "3", 8, out, sizeof out);
    ck_assert_str_eq(out, "usnic_0 usnic_1 usnic_2");
    rdma_at(t, "7-8", 8, out, sizeof out);   /* spanning both packages: hwloc's order */
    ck_assert_str_eq(out, "usnic_0 usnic_1 usnic_2");
    rdma_at(t, "12", 1, out, sizeof out);    /* max */
    ck_assert_str_eq(out, "usnic_2");
    cohort_topo_free(t);
    t = load(M24);                           /* one ConnectX on package 0 */
    rdma_at(t, "0", 8, out, sizeof out);
    ck_assert_str_eq(out, "mlx4_0");
    cohort_topo_free(t);
    /* through the host table, for this process's own place in the file */
    setenv("COHORT_TOPO_FILE", xml(MVF), 1);
    const cohort_host_v1_t *h = cohort_plugin_host();
    ck_assert(COHORT_HAS_FIELD(h, cohort_host_v1_t, rdma_devices) && h->rdma_devices);
    const char *const *names = NULL;
    int n = -1;
    EXPECT_OK(h->rdma_devices(&names, &n));
    ck_assert_int_eq(n, 3);
    for (int i = 0; i < n; i++) ck_assert(strncmp(names[i], "usnic_", 6) == 0);
    unsetenv("COHORT_TOPO_FILE");
}
END_TEST

START_TEST(report_lists_machine_and_devices)
{
    cohort_topo_t *t = load(M32);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ck_assert_ptr_nonnull(f);
    cohort_topo_report(t, f);
    fclose(f);
    ck_assert_msg(strstr(buf, "2 package(s), 2 NUMA node(s), 16 core(s), 32 PU(s)"), "%s", buf);
    ck_assert_msg(strstr(buf, "package 1: 8 core(s), PUs 8-15,24-31; NUMA node(s) 1"), "%s", buf);
    ck_assert_msg(strstr(buf, "cuda0        0000:84:00.0"), "%s", buf);
    ck_assert_msg(strstr(buf, "mlx5_0       0000:04:00.0  ib0"), "%s", buf);
    free(buf);
    cohort_topo_free(t);
}
END_TEST

/* ---- this machine ---------------------------------------------------------------------- */

START_TEST(discover_this_machine)
{
    unsetenv("COHORT_TOPO_FILE");
    cohort_topo_t *t = NULL;
    EXPECT_OK(cohort_topo_load(NULL, &t));
    ck_assert_str_eq(cohort_topo_source(t), "this machine");
    cohort_place_t p;
    EXPECT_OK(cohort_topo_place_self(t, &p));
    ck_assert_int_ge(p.core, 0);
    ck_assert_int_ge(p.ncores, 1);
    ck_assert(p.cpus[0] != '\0');
    /* every device found has a name and a known kind */
    const cohort_topo_dev_t *d;
    int n = cohort_topo_devs(t, &d);
    for (int i = 0; i < n; i++) {
        ck_assert(d[i].name[0] != '\0');
        ck_assert(d[i].kind >= COHORT_DEV_NET && d[i].kind <= COHORT_DEV_GPU);
        ck_assert_ptr_eq(cohort_topo_dev(t, d[i].name), &d[i]);
    }
    cohort_topo_free(t);
}
END_TEST

START_TEST(setting_names_the_file)
{
    cohort_topo_t *t = NULL;
    setenv("COHORT_TOPO_FILE", xml(MP8), 1);
    EXPECT_OK(cohort_topo_load(NULL, &t));
    ck_assert_str_eq(cohort_topo_source(t), xml(MP8));
    ck_assert_ptr_nonnull(cohort_topo_dev(t, "cuda3"));
    /* the file's PUs, not this machine's: the place of self is computed in the file */
    cohort_place_t p;
    EXPECT_OK(cohort_topo_place_self(t, &p));
    cohort_topo_free(t);
    /* an explicit path wins over the setting */
    EXPECT_OK(cohort_topo_load(xml(M24), &t));
    ck_assert_ptr_nonnull(cohort_topo_dev(t, "mlx4_0"));
    cohort_topo_free(t);
    setenv("COHORT_TOPO_FILE", "/nonexistent/topo.xml", 1);
    EXPECT_STATUS(cohort_topo_load(NULL, &t), COHORT_ERR_INVALID_ARG, "/nonexistent/topo.xml",
               "COHORT_TOPO_FILE", "No such file");
    ck_assert_ptr_null(t);
    unsetenv("COHORT_TOPO_FILE");
}
END_TEST

/* ---- errors ---------------------------------------------------------------------------- */

START_TEST(load_errors)
{
    cohort_topo_t *t = (cohort_topo_t *)1;
    EXPECT_STATUS(cohort_topo_load("/nonexistent/m.xml", &t), COHORT_ERR_INVALID_ARG,
               "'/nonexistent/m.xml'", "No such file");
    ck_assert_ptr_null(t);
    char path[] = "/tmp/cohort-topo-test-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    const char junk[] = "this is not an XML topology\n";
    ck_assert_int_eq(write(fd, junk, sizeof junk - 1), (int)(sizeof junk - 1));
    close(fd);
    EXPECT_STATUS(cohort_topo_load(path, &t), COHORT_ERR_INVALID_ARG, path, "XML");
    ck_assert_ptr_null(t);
    /* XML, but not hwloc's */
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("<?xml version=\"1.0\"?>\n<html><body/></html>\n", f);
    fclose(f);
    EXPECT_STATUS(cohort_topo_load(path, &t), COHORT_ERR_INVALID_ARG, path);
    ck_assert_ptr_null(t);
    unlink(path);
    EXPECT_STATUS(cohort_topo_load(NULL, NULL), COHORT_ERR_INVALID_ARG, "NULL");
}
END_TEST

START_TEST(cpulist_errors)
{
    cohort_topo_t *t = load(M24);
    cohort_place_t p;
    const char *bad[] = {"", "  ", "0-", "-1", "3-1", "1,,2", "1,", "x", "0 1", "1;2", "0x1",
                         "99999999999", "1-2-3"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char quoted[64];
        snprintf(quoted, sizeof quoted, "'%s'", bad[i]);
        EXPECT_STATUS(cohort_topo_place_cpus(t, bad[i], &p), COHORT_ERR_INVALID_ARG, quoted,
                   "CPU list");
        ck_assert_int_eq(p.package, -1);
        ck_assert_str_eq(p.cpus, "");
    }
    /* well-formed, but none of these PUs is in the file */
    EXPECT_STATUS(cohort_topo_place_cpus(t, "24-31", &p), COHORT_ERR_INVALID_ARG, "'24-31'",
               "no PU", "0-23");
    EXPECT_STATUS(cohort_topo_place_cpus(t, NULL, &p), COHORT_ERR_INVALID_ARG, "NULL");
    cohort_topo_free(t);
}
END_TEST

/* ---- the ring -------------------------------------------------------------------------- */

/* Each node's ranks are contiguous and nodes come in the order of their lowest rank. */
static void check_ring_shape(const cohort_rank_loc_t *l, int n, const int *ring)
{
    int seen[256] = {0}, left[64] = {0};
    ck_assert_int_le(n, 256);
    for (int i = 0; i < n; i++) {
        ck_assert_int_ge(ring[i], 0);
        ck_assert_int_lt(ring[i], n);
        ck_assert_msg(!seen[ring[i]]++, "rank %d twice in the ring", ring[i]);
        int node = l[ring[i]].node;
        if (i > 0 && l[ring[i - 1]].node != node) {
            left[l[ring[i - 1]].node] = 1;
            ck_assert_msg(!left[node], "node %d entered twice (ring position %d)", node, i);
        }
    }
    int lowest_prev = -1;
    for (int i = 0; i < n; i++) {
        if (i > 0 && l[ring[i - 1]].node == l[ring[i]].node) continue;
        int lowest = n;
        for (int r = 0; r < n; r++)
            if (l[r].node == l[ring[i]].node && r < lowest) lowest = r;
        ck_assert_int_gt(lowest, lowest_prev);
        lowest_prev = lowest;
    }
}

static void check_ring(const cohort_rank_loc_t *l, int n, const int *expect)
{
    int ring[256];
    for (int i = 0; i < n; i++) ring[i] = -1;
    cohort_topo_ring(l, n, ring);
    check_ring_shape(l, n, ring);
    for (int i = 0; i < n; i++)
        ck_assert_msg(ring[i] == expect[i], "ring position %d: rank %d, expected %d", i, ring[i],
                      expect[i]);
}

/* Local rank lr of a node with 2 packages x 4 cores, ranks spread over cores 0,2,4,6. */
static cohort_rank_loc_t spread(int node, int lr)
{
    int core = lr * 2;
    return (cohort_rank_loc_t){ node, core / 4, core / 4, core };
}

START_TEST(ring_block_and_round_robin)
{
    enum { N = 3, R = 4 };
    cohort_rank_loc_t block[N * R], rr[N * R];
    for (int node = 0; node < N; node++)
        for (int l = 0; l < R; l++) {
            block[node * R + l] = spread(node, l);   /* map-by slot */
            rr[l * N + node] = spread(node, l);      /* map-by node */
        }
    const int eb[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    check_ring(block, N * R, eb);
    const int er[] = {0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11};
    check_ring(rr, N * R, er);
    /* both numberings visit the same places in the same order */
    int rb[N * R], rrr[N * R];
    cohort_topo_ring(block, N * R, rb);
    cohort_topo_ring(rr, N * R, rrr);
    for (int i = 0; i < N * R; i++) {
        const cohort_rank_loc_t *a = &block[rb[i]], *b = &rr[rrr[i]];
        ck_assert(a->node == b->node && a->package == b->package && a->numa == b->numa &&
                  a->core == b->core);
    }
}
END_TEST

START_TEST(ring_interleaved_packages)
{
    /* a launcher that alternates packages: ranks 0,2 on package 0, 1,3 on package 1 */
    cohort_rank_loc_t l[8];
    for (int node = 0; node < 2; node++)
        for (int i = 0; i < 4; i++)
            l[node * 4 + i] = (cohort_rank_loc_t){ node, i % 2, i % 2, (i % 2) * 8 + i / 2 };
    const int e[] = {0, 2, 1, 3, 4, 6, 5, 7};
    check_ring(l, 8, e);
    /* the ring crosses packages once per node */
    int ring[8], crossings = 0;
    cohort_topo_ring(l, 8, ring);
    for (int i = 1; i < 8; i++)
        if (l[ring[i]].node == l[ring[i - 1]].node && l[ring[i]].package != l[ring[i - 1]].package)
            crossings++;
    ck_assert_int_eq(crossings, 2);
}
END_TEST

START_TEST(ring_unknown_places_and_node_order)
{
    /* node 5 holds rank 0, so it comes first; -1 sorts after known values */
    cohort_rank_loc_t l[] = {
        { 5, -1, -1, -1 },   /* 0 */
        { 2, 0, 0, 3 },      /* 1 */
        { 5, 1, 1, 9 },      /* 2 */
        { 5, 0, -1, 2 },     /* 3 */
        { 2, 0, 0, 1 },      /* 4 */
        { 5, 0, 0, -1 },     /* 5 */
        { 5, 0, 0, 7 },      /* 6 */
        { 2, -1, -1, -1 },   /* 7 */
        { 5, -1, -1, -1 },   /* 8 */
    };
    const int e[] = {6, 5, 3, 2, 0, 8, 4, 1, 7};
    check_ring(l, 9, e);
    /* nothing known at all: rank order, grouped by node */
    cohort_rank_loc_t u[] = { { 0, -1, -1, -1 }, { 1, -1, -1, -1 }, { 0, -1, -1, -1 },
                              { 1, -1, -1, -1 } };
    const int eu[] = {0, 2, 1, 3};
    check_ring(u, 4, eu);
    int one = -1;
    cohort_topo_ring(u, 1, &one);
    ck_assert_int_eq(one, 0);
    cohort_topo_ring(u, 0, &one);   /* nothing to order, nothing written */
    ck_assert_int_eq(one, 0);
}
END_TEST

static Suite *topo_suite(void)
{
    Suite *s = suite_create("topo");
    TCase *m = tcase_create("machines");
    tcase_set_timeout(m, 60);
    tcase_add_test(m, m24_places);
    tcase_add_test(m, m24_devices);
    tcase_add_test(m, m24_distance_and_order);
    tcase_add_test(m, m32_places_devices);
    tcase_add_test(m, p8_gpus);
    tcase_add_test(m, vf_nics);
    tcase_add_test(m, rdma_devices_nearest_first);
    tcase_add_test(m, report_lists_machine_and_devices);
    tcase_add_test(m, discover_this_machine);
    tcase_add_test(m, setting_names_the_file);
    suite_add_tcase(s, m);

    TCase *e = tcase_create("errors");
    tcase_add_test(e, load_errors);
    tcase_add_test(e, cpulist_errors);
    suite_add_tcase(s, e);

    TCase *r = tcase_create("ring");
    tcase_add_test(r, ring_block_and_round_robin);
    tcase_add_test(r, ring_interleaved_packages);
    tcase_add_test(r, ring_unknown_places_and_node_order);
    suite_add_tcase(s, r);
    return s;
}

int main(void)
{
    setenv("COHORT_DEBUG", "NONE", 1);   /* the errors tested here need not be logged too */
    setenv("COHORT_CONF", "/dev/null", 1);   /* no cohort.conf may set COHORT_TOPO_FILE */
    SRunner *sr = srunner_create(topo_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed != 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
