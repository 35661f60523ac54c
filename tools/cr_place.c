/* SPDX-License-Identifier: BSD-3-Clause */
/* cohortrun's placement: the hosts (from -H or --hostfile, each checked to be a host name before
 * any reaches the rsh agent, or this host alone) and the host, node, local rank and group of
 * every rank. All of it is decided before anything starts, so a bad host list is a usage error
 * and nothing has to be stopped. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "core/log.h"
#include "core/parse.h"
#include "tools/cr_int.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A host name cohortrun can hand to the rsh agent: letters, digits, '.', '-', '_', an IPv6
 * address's ':' and '%', and ssh's user@host. Anything else (';', '$', spaces, quotes, a
 * leading '-' that ssh would take for an option) is a typo or worse. */
static int valid_host_name(const char *h)
{
    if (!*h || *h == '-' || *h == '@') return 0;
    for (const char *p = h; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              strchr(".-_:%@", *p)))
            return 0;
    return 1;
}

static int is_local_host(const char *h)
{
    static char me[256];
    static int have_me = -1;
    if (!strcmp(h, "localhost") || !strcmp(h, "127.0.0.1") || !strcmp(h, "::1")) return 1;
    if (have_me < 0) {
        have_me = gethostname(me, sizeof me) == 0;
        me[sizeof me - 1] = '\0';
    }
    if (!have_me) return 0;
    if (!strcmp(h, me)) return 1;
    /* gethostname() gave a FQDN and the user wrote its short name */
    size_t short_len = strcspn(me, ".");
    return me[short_len] == '.' && strlen(h) == short_len && !strncmp(h, me, short_len);
}

void cr_place_ranks(job_t *job)
{
    opts_t *o = job->o;
    cohort_host_slots_t *hosts = NULL;
    int nhosts = 0;
    if (o->hostlist || o->hostfile) {
        cr_quiet_begin();
        cohort_status_t st = o->hostlist ? cohort_hostlist_parse(o->hostlist, &hosts, &nhosts)
                                         : cohort_hostfile_parse(o->hostfile, &hosts, &nhosts);
        cr_quiet_end();
        if (st) cr_usage_error("%s", cohort_last_error());
        if (nhosts <= 0) cr_usage_error("%s names no hosts", o->hostlist ? "-H" : o->hostfile);
        for (int h = 0; h < nhosts; h++)
            if (!valid_host_name(hosts[h].host))
                cr_usage_error("%s'%s': '%s' is not a host name (letters, digits, '.', '-' and "
                               "'_'; an IPv6 address; user@host)",
                               o->hostlist ? "-H " : "--hostfile ",
                               o->hostlist ? o->hostlist : o->hostfile, hosts[h].host);
    } else {
        hosts = cr_xcalloc(1, sizeof *hosts);
        if (gethostname(hosts[0].host, sizeof hosts[0].host) != 0 || !hosts[0].host[0])
            snprintf(hosts[0].host, sizeof hosts[0].host, "localhost");
        hosts[0].host[sizeof hosts[0].host - 1] = '\0';
        hosts[0].slots = o->np_given ? (int)o->np : 1;
        nhosts = 1;
    }
    long total = 0, most = 0;   /* slots, and what max_slots allows when oversubscribing */
    for (int h = 0; h < nhosts; h++) {
        total += hosts[h].slots > 0 ? hosts[h].slots : 0;
        most = most == LONG_MAX || !hosts[h].max_slots ? LONG_MAX : most + hosts[h].max_slots;
    }
    long n = o->np_given ? o->np : total;
    if (n < 1) cr_usage_error("the host list has no slots");
    if (n > total && o->oversubscribe && n > most) {
        char list[1024] = "";
        size_t used = 0;
        for (int h = 0; h < nhosts && used < sizeof list - 64; h++)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s%s max_slots=%d",
                                     h ? ", " : "", hosts[h].host, hosts[h].max_slots);
        if (used >= sizeof list - 64) snprintf(list + used, sizeof list - used, ", ...");
        cr_usage_error("%ld ranks requested but the hostfile's max_slots allow at most %ld even "
                       "with --oversubscribe (%s); give fewer ranks or raise max_slots", n, most,
                       list);
    }
    if (n > total && !o->oversubscribe) {
        char list[1024] = "";
        size_t used = 0;
        for (int h = 0; h < nhosts && used < sizeof list - 64; h++)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s%s:%d", h ? "," : "",
                                     hosts[h].host, hosts[h].slots);
        if (used >= sizeof list - 64) snprintf(list + used, sizeof list - used, ",...");
        cr_usage_error("%ld ranks requested but the %s %s only %ld %s (%s); give fewer ranks, more "
                       "slots, or --oversubscribe", n, cr_plural(nhosts, "host", "hosts"),
                       cr_plural(nhosts, "has", "have"), total, cr_plural(total, "slot", "slots"),
                       list);
    }
    /* The host of each rank. slot: fill each host's slots in order; beyond the slots
     * (--oversubscribe) one more per host round-robin; ranks stay contiguous per host.
     * node: one rank per host in turn, skipping hosts whose slots are full; once every host is
     * full (--oversubscribe), round-robin over all of them. Beyond the slots, a host at its
     * max_slots gets no more (n <= most: the loops end). */
    long *count = cr_xcalloc((size_t)nhosts, sizeof *count);
    int *host_of = cr_xcalloc((size_t)n, sizeof *host_of);
    if (!o->map_by_node) {
        long left = n;
        for (int h = 0; h < nhosts && left > 0; h++) {
            count[h] = hosts[h].slots < left ? hosts[h].slots : left;
            left -= count[h];
        }
        for (int h = 0; left > 0; h = (h + 1) % nhosts)
            if (!hosts[h].max_slots || count[h] < hosts[h].max_slots) {
                count[h]++;
                left--;
            }
        long r = 0;
        for (int h = 0; h < nhosts; h++)
            for (long k = 0; k < count[h]; k++) host_of[r++] = h;
    } else {
        long r = 0;
        while (r < n) {
            int placed = 0;
            for (int h = 0; h < nhosts && r < n; h++)
                if (count[h] < hosts[h].slots) {
                    count[h]++;
                    host_of[r++] = h;
                    placed = 1;
                }
            if (!placed)   /* every host is full: the extra ranks go round-robin */
                for (int h = 0; h < nhosts && r < n; h++)
                    if (!hosts[h].max_slots || count[h] < hosts[h].max_slots) {
                        count[h]++;
                        host_of[r++] = h;
                    }
        }
    }
    job->n = (int)n;
    job->ranks = cr_xcalloc((size_t)n, sizeof *job->ranks);
    job->nhosts = nhosts;
    job->host_names = cr_xcalloc((size_t)nhosts, sizeof *job->host_names);
    /* node keys: every local alias is one node; remote hosts by name */
    const char **node_key = cr_xcalloc((size_t)nhosts + 1, sizeof *node_key);
    int *node_of_host = cr_xcalloc((size_t)nhosts, sizeof *node_of_host);
    int *node_size = cr_xcalloc((size_t)nhosts + 1, sizeof *node_size);
    int *local = cr_xcalloc((size_t)nhosts, sizeof *local);
    int nnodes = 0;
    for (int h = 0; h < nhosts; h++) {
        job->host_names[h] = cr_xstrdup(hosts[h].host);
        local[h] = is_local_host(hosts[h].host);
        const char *key = local[h] ? "" : job->host_names[h];
        int node = -1;
        for (int k = 0; k < nnodes; k++)
            if (!strcmp(node_key[k], key)) node = k;
        if (node < 0) {
            node = nnodes++;
            node_key[node] = key;
        }
        node_of_host[h] = node;
    }
    /* local ranks in rank order within each node, whatever the mapping */
    for (int r = 0; r < job->n; r++) {
        rank_proc_t *p = &job->ranks[r];
        int h = host_of[r];
        p->rank = r;
        p->host = job->host_names[h];
        p->local = local[h];
        p->node = node_of_host[h];
        p->local_rank = node_size[p->node]++;
        p->out[0].fd = p->out[1].fd = -1;
    }
    for (int r = 0; r < job->n; r++) job->ranks[r].local_size = node_size[job->ranks[r].node];
    /* GROUP_RANK: nodes numbered 0, 1, ... in the order of their first rank (rank 0's node is
     * 0), so the numbers have no gaps even when a host of the list got no rank */
    int *group_of_node = cr_xcalloc((size_t)nhosts + 1, sizeof *group_of_node);
    for (int k = 0; k <= nhosts; k++) group_of_node[k] = -1;
    job->ngroups = 0;
    for (int r = 0; r < job->n; r++) {
        rank_proc_t *p = &job->ranks[r];
        if (group_of_node[p->node] < 0) group_of_node[p->node] = job->ngroups++;
        p->group = group_of_node[p->node];
    }
    free(group_of_node);
    free(node_key);
    free(node_of_host);
    free(node_size);
    free(local);
    free(host_of);
    free(count);
    free(hosts);
}
