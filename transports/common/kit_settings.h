/* SPDX-License-Identifier: BSD-3-Clause */
/* The plugin kit (transports/common/, see kit_bytes.h): a plugin's own settings. Each entry of a
 * plugin's table (plugin ABI 1.5) is the one place that says a setting's default and what a valid
 * value is; the core checks values against it at every communicator's creation, and a plugin
 * reads them here, against the same entry, so that a host that checks nothing (a test harness)
 * gets the same answer. */
#ifndef COHORT_KIT_SETTINGS_H
#define COHORT_KIT_SETTINGS_H

#include <cohort/plugin.h>

#include <stdio.h>
#include <stdlib.h>

/* Shorthands for a table entry. */
#define KIT_SETTING(var, nm, dflt, text, k, lo, hi, w, chk)                                     \
    static const cohort_plugin_setting_v1_t var = { sizeof(cohort_plugin_setting_v1_t), nm,   \
                                                    dflt, text, k, lo, hi, w, chk }
#define KIT_LONG(var, nm, dflt, text, lo, hi) \
    KIT_SETTING(var, nm, dflt, text, COHORT_PSET_LONG, lo, hi, NULL, NULL)

/* The value of a numeric setting of the table: the entry's default when unset, else the host's
 * (whose COHORT_ERR_INVALID_ARG, after host->error, names a value that is no number), then the
 * entry's range and its check, refused after host->error naming the setting and the rule. */
static inline cohort_status_t kit_setting_long(const cohort_host_v1_t *host,
                                               const cohort_plugin_setting_v1_t *e, long *value)
{
    *value = e->def ? strtol(e->def, NULL, 10) : 0;
    cohort_status_t st = host->setting_long(e->name, value);
    if (st) return st;
    if ((double)*value < e->min || (double)*value > e->max)
        return host->error(COHORT_ERR_INVALID_ARG, "%s=%ld is out of range: %.0f to %.0f (%s)",
                           e->name, *value, e->min, e->max, e->help);
    char text[32], why[256] = "";
    snprintf(text, sizeof text, "%ld", *value);
    if (e->check && e->check(text, why, sizeof why))
        return host->error(COHORT_ERR_INVALID_ARG, "%s=%ld is refused: %s", e->name, *value,
                           why);
    return COHORT_SUCCESS;
}

#endif
