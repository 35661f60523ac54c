/* SPDX-License-Identifier: BSD-3-Clause */
/* Node identity: which ranks share a machine. hostname + boot id, or COHORT_HOSTID. */
#ifndef COHORT_TOPOLOGY_NODE_H
#define COHORT_TOPOLOGY_NODE_H

#include <stddef.h>

#define COHORT_HOSTID_MAX 128

/* "myhost:1f0e...": identical for processes of one booted machine (containers sharing a kernel
 * but not a hostname get different ids, which is what shared memory needs). */
void cohort_node_id(char *buf, size_t len);
/* The kernel's boot id ("noboot" if unreadable): the same for every process sharing the
 * machine's CPUs, whatever COHORT_HOSTID says (containers, network namespaces). */
void cohort_node_boot_id(char *buf, size_t len);
/* Short hostname. */
void cohort_node_hostname(char *buf, size_t len);

#endif
