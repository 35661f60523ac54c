/* SPDX-License-Identifier: BSD-3-Clause */
/* COHORT_IB_HCA: which RDMA devices and ports the verbs transport may use, in NCCL's grammar
 * (pure C, no libibverbs, so the unit tests compile it without a device).
 *
 *   mlx5_0:1,mlx5_1     comma-separated entries; a name is a prefix of the device name
 *                       (mlx5 matches mlx5_0, mlx5_1, ...), ":N" limits it to port N
 *   =mlx5_0             leading '=': every name of the list must match exactly
 *   ^mlx5_1             leading '^': the list excludes instead (combinable: ^=mlx5_1)
 * Empty or unset: every device and port.
 */
#ifndef COHORT_VB_HCA_H
#define COHORT_VB_HCA_H

#include <stddef.h>

#define VB_HCA_MAX 16
#define VB_HCA_NAME 64

typedef struct vb_hca_spec {
    int exclude;           /* '^' */
    int exact;             /* '=' */
    int n;                 /* entries; 0: everything matches */
    struct { char name[VB_HCA_NAME]; int port; } e[VB_HCA_MAX];   /* port 0: any */
} vb_hca_spec_t;

/* Parses spec (NULL or "" allowed). 0 on success; -1 with a reason in err (errlen bytes). */
int vb_hca_parse(const char *spec, vb_hca_spec_t *out, char *err, size_t errlen);

/* 1 if device dev, port port is allowed by the parsed spec. */
int vb_hca_match(const vb_hca_spec_t *s, const char *dev, int port);

/* The order in which to try n devices: those named in pref (the host's nearest-first list,
 * npref names) first, in pref's order, then the others in their given order. order[i] receives
 * an index into names. */
void vb_order_devices(const char *const *names, int n, const char *const *pref, int npref,
                      int *order);

#endif /* COHORT_VB_HCA_H */
