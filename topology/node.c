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

void cohort_node_id(char *buf, size_t len)
{
    const char *over = cohort_config_get("COHORT_HOSTID");
    if (over && *over) {
        snprintf(buf, len, "%s", over);
        return;
    }
    char host[64], boot[64] = "noboot";
    cohort_node_hostname(host, sizeof host);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(boot, sizeof boot, f)) snprintf(boot, sizeof boot, "noboot");
        fclose(f);
        boot[strcspn(boot, "\n")] = '\0';
    }
    snprintf(buf, len, "%s:%s", host, boot);
}
