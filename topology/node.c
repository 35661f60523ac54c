/* SPDX-License-Identifier: BSD-3-Clause */
#include "topology/node.h"
#include "core/config.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

void cohort_node_hostname(char *buf, size_t len)
{
    if (gethostname(buf, len) != 0) snprintf(buf, len, "unknown");
    buf[len - 1] = '\0';
}

void cohort_node_boot_id(char *buf, size_t len)
{
    snprintf(buf, len, "noboot");
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(buf, (int)len, f)) snprintf(buf, len, "noboot");
        fclose(f);
        buf[strcspn(buf, "\n")] = '\0';
    }
}

void cohort_node_id(char *buf, size_t len)
{
    const char *over = cohort_config_get("COHORT_HOSTID");
    if (over && *over) {
        snprintf(buf, len, "%s", over);
        return;
    }
    char host[64], boot[64];
    cohort_node_hostname(host, sizeof host);
    cohort_node_boot_id(boot, sizeof boot);
    snprintf(buf, len, "%s:%s", host, boot);
}
