/* SPDX-License-Identifier: BSD-3-Clause */
/* COHORT_IB_HCA parser (see vb_hca.h). */
#include "vb_hca.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

int vb_hca_parse(const char *spec, vb_hca_spec_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (!spec) return 0;
    const char *p = spec;
    while (*p == ' ') p++;
    if (*p == '^') { out->exclude = 1; p++; }
    if (*p == '=') { out->exact = 1; p++; }
    if (!*p) {
        if (out->exclude || out->exact) {
            snprintf(err, errlen, "'%s' has no device name after its '^' or '='", spec);
            return -1;
        }
        return 0;
    }
    for (;;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        while (len && p[0] == ' ') { p++; len--; }
        while (len && p[len - 1] == ' ') len--;
        if (len == 0) {
            snprintf(err, errlen, "'%s' has an empty entry", spec);
            return -1;
        }
        if (out->n == VB_HCA_MAX) {
            snprintf(err, errlen, "'%s' has more than %d entries", spec, VB_HCA_MAX);
            return -1;
        }
        const char *colon = memchr(p, ':', len);
        size_t nlen = colon ? (size_t)(colon - p) : len;
        if (nlen == 0 || nlen >= VB_HCA_NAME) {
            snprintf(err, errlen, "'%s': device name '%.*s' is empty or longer than %d characters",
                     spec, (int)(nlen > 80 ? 80 : nlen), p, VB_HCA_NAME - 1);
            return -1;
        }
        for (size_t i = 0; i < nlen; i++)
            if (!isalnum((unsigned char)p[i]) && p[i] != '_' && p[i] != '-' && p[i] != '.') {
                snprintf(err, errlen, "'%s': '%c' cannot be part of a device name (entries are "
                         "name[:port], separated by commas; '^' and '=' only at the start)",
                         spec, p[i]);
                return -1;
            }
        int port = 0;
        if (colon) {
            size_t plen = len - nlen - 1;
            if (plen == 0 || plen > 3) {
                snprintf(err, errlen, "'%s': the port after '%.*s:' must be a number from 1 to "
                         "255", spec, (int)nlen, p);
                return -1;
            }
            for (size_t i = 0; i < plen; i++) {
                if (!isdigit((unsigned char)colon[1 + i])) {
                    snprintf(err, errlen, "'%s': the port after '%.*s:' must be a number from 1 "
                             "to 255", spec, (int)nlen, p);
                    return -1;
                }
                port = port * 10 + (colon[1 + i] - '0');
            }
            if (port < 1 || port > 255) {
                snprintf(err, errlen, "'%s': port %d is not in 1..255", spec, port);
                return -1;
            }
        }
        memcpy(out->e[out->n].name, p, nlen);
        out->e[out->n].name[nlen] = '\0';
        out->e[out->n].port = port;
        out->n++;
        if (!end) break;
        p = end + 1;
    }
    return 0;
}

int vb_hca_match(const vb_hca_spec_t *s, const char *dev, int port)
{
    if (s->n == 0) return 1;
    int hit = 0;
    for (int i = 0; i < s->n && !hit; i++) {
        size_t l = strlen(s->e[i].name);
        int name_ok = s->exact ? !strcmp(dev, s->e[i].name) : !strncmp(dev, s->e[i].name, l);
        hit = name_ok && (s->e[i].port == 0 || s->e[i].port == port);
    }
    return s->exclude ? !hit : hit;
}

void vb_order_devices(const char *const *names, int n, const char *const *pref, int npref,
                      int *order)
{
    int k = 0;
    for (int j = 0; j < npref; j++)
        for (int i = 0; i < n; i++)
            if (pref[j] && !strcmp(names[i], pref[j])) {
                int dup = 0;
                for (int m = 0; m < k && !dup; m++) dup = order[m] == i;
                if (!dup) order[k++] = i;
            }
    for (int i = 0; i < n; i++) {
        int in = 0;
        for (int m = 0; m < k && !in; m++) in = order[m] == i;
        if (!in) order[k++] = i;
    }
}
