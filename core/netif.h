/* SPDX-License-Identifier: BSD-3-Clause */
/* Network interfaces of this host, filtered by COHORT_SOCKET_IFNAME. */
#ifndef COHORT_CORE_NETIF_H
#define COHORT_CORE_NETIF_H

#include <stddef.h>
#include "cohort/plugin.h"

/* Every interface with an IPv4/IPv6 address that is up (no filtering). */
cohort_status_t cohort_netifs_all(cohort_netif_t **list, int *count);  /* free(*list) */
/* Interfaces allowed by COHORT_SOCKET_IFNAME, best first (cached for the process). Without the
 * setting: non-loopback, non-docker/virbr interfaces first (IPv4 before IPv6), then those.
 * A setting that matches nothing: COHORT_ERR_INVALID_ARG listing the interfaces that exist. */
cohort_status_t cohort_netifs(const cohort_netif_t **list, int *count);
void cohort_netifs_reset(void);
/* "eth0 10.0.0.1/24" */
void cohort_netif_format(const cohort_netif_t *n, char *buf, size_t len);

#endif
