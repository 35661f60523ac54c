/* SPDX-License-Identifier: BSD-3-Clause */
/* This host's network interfaces, and the COHORT_SOCKET_IFNAME filter over them. */
#include "core/netif.h"
#include "core/jobtopo.h"
#include "core/config.h"
#include "core/log.h"
#include "core/parse.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

cohort_status_t cohort_netifs_all(cohort_netif_t **list, int *count)
{
    struct ifaddrs *ifa = NULL;
    *list = NULL;
    *count = 0;
    if (getifaddrs(&ifa) != 0)
        return cohort_error(COHORT_ERR_SYSTEM, "getifaddrs failed: %m");
    int n = 0;
    for (struct ifaddrs *p = ifa; p; p = p->ifa_next) n++;
    cohort_netif_t *out = calloc((size_t)n + 1, sizeof *out);
    if (!out) {
        freeifaddrs(ifa);
        return cohort_error(COHORT_ERR_NO_MEMORY, "no memory for the interface list");
    }
    int k = 0;
    for (struct ifaddrs *p = ifa; p; p = p->ifa_next) {
        if (!p->ifa_addr || !(p->ifa_flags & IFF_UP)) continue;
        int fam = p->ifa_addr->sa_family;
        if (fam != AF_INET && fam != AF_INET6) continue;
        cohort_netif_t *o = &out[k];
        snprintf(o->name, sizeof o->name, "%s", p->ifa_name);
        o->family = fam;
        o->is_loopback = (p->ifa_flags & IFF_LOOPBACK) != 0;
        const unsigned char *mask;
        size_t alen;
        if (fam == AF_INET) {
            memcpy(o->addr, &((struct sockaddr_in *)(void *)p->ifa_addr)->sin_addr, 4);
            mask = p->ifa_netmask
                ? (const unsigned char *)&((struct sockaddr_in *)(void *)p->ifa_netmask)->sin_addr
                : NULL;
            alen = 4;
        } else {
            const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)(void *)p->ifa_addr;
            if (IN6_IS_ADDR_LINKLOCAL(&s6->sin6_addr)) continue;  /* needs a scope id */
            memcpy(o->addr, &s6->sin6_addr, 16);
            mask = p->ifa_netmask
                ? (const unsigned char *)&((struct sockaddr_in6 *)(void *)p->ifa_netmask)->sin6_addr
                : NULL;
            alen = 16;
        }
        o->prefix_len = 0;
        for (size_t i = 0; mask && i < alen; i++)
            for (int b = 7; b >= 0; b--)
                if (mask[i] & (1u << b)) o->prefix_len++;
        k++;
    }
    freeifaddrs(ifa);
    *list = out;
    *count = k;
    return COHORT_SUCCESS;
}

void cohort_netif_format(const cohort_netif_t *n, char *buf, size_t len)
{
    char a[INET6_ADDRSTRLEN] = "?";
    inet_ntop(n->family, n->addr, a, sizeof a);
    snprintf(buf, len, "%s %s/%u", n->name, a, n->prefix_len);
}

/* Rank for the default order: real interfaces first, virtual bridges next, loopback last;
 * IPv4 before IPv6 within each class. */
static int default_rank(const cohort_netif_t *n)
{
    int cls = 0;
    if (n->is_loopback) cls = 2;
    else if (!strncmp(n->name, "docker", 6) || !strncmp(n->name, "virbr", 5)) cls = 1;
    return cls * 2 + (n->family == AF_INET6);
}

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static cohort_netif_t *cache;
static int cache_count = -1;
static char cache_spec[512];

void cohort_netifs_reset(void)
{
    pthread_mutex_lock(&cache_lock);
    free(cache);
    cache = NULL;
    cache_count = -1;
    pthread_mutex_unlock(&cache_lock);
}

static cohort_status_t build_list(const char *spec_text, cohort_netif_t **out, int *count)
{
    cohort_netif_t *all;
    int n;
    cohort_status_t st = cohort_netifs_all(&all, &n);
    if (st) return st;
    int k = 0;
    if (spec_text && *spec_text) {
        cohort_ifspec_t spec;
        st = cohort_ifspec_parse("COHORT_SOCKET_IFNAME", spec_text, &spec);
        if (st) {
            free(all);
            return st;
        }
        for (int i = 0; i < n; i++)
            if (cohort_ifspec_match(&spec, all[i].name, all[i].family, all[i].addr))
                all[k++] = all[i];
        if (k == 0) {
            cohort_netif_t *every;
            int m;
            char have[1024] = "";
            if (cohort_netifs_all(&every, &m) == COHORT_SUCCESS) {
                size_t used = 0;
                for (int i = 0; i < m && used < sizeof have - 80; i++) {
                    char one[96];
                    cohort_netif_format(&every[i], one, sizeof one);
                    used += (size_t)snprintf(have + used, sizeof have - used, "%s%s",
                                             i ? ", " : "", one);
                }
                free(every);
            }
            free(all);
            return cohort_error(COHORT_ERR_INVALID_ARG,
                                "COHORT_SOCKET_IFNAME='%s' matches no interface on this host; "
                                "interfaces that exist: %s", spec_text, have[0] ? have : "none");
        }
    } else {
        k = n;
    }
    /* Real interfaces first, then virtual bridges, then loopback (IPv4 before IPv6 in each);
     * inside each class the ones nearest to this process's cores first (hwloc PCI locality),
     * ties in the system's order. */
    int *cls = malloc((size_t)(k ? k : 1) * sizeof *cls);
    if (!cls) {
        free(all);
        return cohort_error(COHORT_ERR_NO_MEMORY, "no memory to order %d interfaces", k);
    }
    for (int i = 0; i < k; i++) cls[i] = default_rank(&all[i]);
    for (int c = 0, j = 0; c <= 5; c++)     /* stable sort by class */
        for (int i = j; i < k; i++)
            if (cls[i] == c) {
                cohort_netif_t t = all[i];
                memmove(&all[j + 1], &all[j], (size_t)(i - j) * sizeof *all);
                memmove(&cls[j + 1], &cls[j], (size_t)(i - j) * sizeof *cls);
                all[j] = t;
                cls[j++] = c;
            }
    cohort_job_order_netifs(all, cls, k);
    free(cls);
    *out = all;
    *count = k;
    return COHORT_SUCCESS;
}

cohort_status_t cohort_netifs(const cohort_netif_t **list, int *count)
{
    const char *spec = cohort_config_get("COHORT_SOCKET_IFNAME");
    pthread_mutex_lock(&cache_lock);
    if (cache_count >= 0 && strcmp(cache_spec, spec ? spec : "")) {
        free(cache);
        cache = NULL;
        cache_count = -1;
    }
    cohort_status_t st = COHORT_SUCCESS;
    if (cache_count < 0) {
        st = build_list(spec, &cache, &cache_count);
        if (st) cache_count = -1;
        else snprintf(cache_spec, sizeof cache_spec, "%s", spec ? spec : "");
    }
    *list = cache;
    *count = st ? 0 : cache_count;
    pthread_mutex_unlock(&cache_lock);
    return st;
}
