/* SPDX-License-Identifier: BSD-3-Clause */
/* Finding, validating, loading and initialising transport plugins.
 *
 * Search order: each directory of COHORT_PLUGIN_PATH, then the build tree (.libs and
 * transports/<name>/.libs) when libcohort itself runs uninstalled from the build tree, then
 * $(pkglibdir). The first file found for a given name wins. COHORT_TRANSPORTS filters and orders.
 * Plugins are loaded once per process and shared by every communicator.
 */
#ifndef COHORT_CORE_PLUGIN_LOADER_H
#define COHORT_CORE_PLUGIN_LOADER_H

#include <limits.h>
#include "cohort/plugin.h"
#include "core/parse.h"

typedef struct cohort_plugin {
    char name[32];
    char path[4096];
    void *dl;
    const cohort_transport_v1_t *ops;
    cohort_tp_ctx_t ctx;
    cohort_transport_attr_t attr;
} cohort_plugin_t;

/* What happened to one candidate file (for logs and cohort-info). */
typedef struct cohort_plugin_report {
    char name[32];
    char path[4096];
    int loaded;              /* 1 loaded and initialised; 0 refused/unavailable/filtered */
    char why[512];           /* why it was refused, unavailable or filtered; version if loaded */
} cohort_plugin_report_t;

/* The host table the core gives plugins. */
const cohort_host_v1_t *cohort_plugin_host(void);
/* Key for the host table's auth() (the job secret); set by the bootstrap before any ep_open. */
void cohort_plugin_set_secret(const void *secret, size_t len);
/* The host table's auth(): HMAC-SHA256 keyed by the job secret. */
void cohort_plugin_auth(const void *data, size_t len, unsigned char out[32]);

/* dlopen + validate (symbol, size, ABI major, name, mandatory functions) + init one file.
 * On refusal returns COHORT_ERR_PLUGIN (or COHORT_ERR_UNSUPPORTED if init said unavailable)
 * with a one-line message naming the file and the reason. */
cohort_status_t cohort_plugin_open(const char *path, cohort_plugin_t **out);
void cohort_plugin_close(cohort_plugin_t *p);

/* The process-wide set, loaded on first use, honouring COHORT_TRANSPORTS / COHORT_PLUGIN_PATH,
 * in preference order. Logs one INFO line per candidate. Fails if none is usable. Takes a
 * reference: pair each successful call with cohort_plugins_release(). */
cohort_status_t cohort_plugins_get(cohort_plugin_t *const **list, int *count);
/* Candidates seen by the last cohort_plugins_get / cohort_plugins_scan. */
const cohort_plugin_report_t *cohort_plugins_report(int *count);
/* Scan and report without keeping anything loaded (cohort-info). */
cohort_status_t cohort_plugins_scan(void);
/* Drops the reference cohort_plugins_get took; the last one unloads everything. */
void cohort_plugins_release(void);
/* Directories searched, ':'-separated, into buf. */
void cohort_plugins_search_path(char *buf, size_t len);
/* The plugin directory of the install this code was loaded from ($(libdir)/cohort relative to
 * libcohort.so, or to a tool in $(bindir) that links the core statically) into buf; 1 when that differs from the configured one (a moved install), 0 when it is
 * the configured one (also written to buf) or cannot be told. */
int cohort_plugins_install_dir(char *buf, size_t len);
/* Reads the settings tables (plugin ABI 1.5) of the plugins on the search path whose tables are
 * not in the core's yet, without initialising them (cohort_plugin_open reads a plugin's table
 * as it loads it): cohort_config_check, when a setting no table holds is set, and cohort-info. */
void cohort_plugins_read_settings(void);
/* Whether the search path holds a plugin file for name (libcohort-<name>.so); loads nothing. */
int cohort_plugins_exists(const char *name);
/* COHORT_TRANSPORTS (text, parsed into list) against the search path, loading nothing:
 * COHORT_ERR_INVALID_ARG naming the first transport of an allow list without a plugin file, the
 * path and what was found there; for an exclude list, a name that is neither one of cohort's
 * own transports nor found, or the exclusion of every transport found. */
cohort_status_t cohort_plugins_check_names(const char *text, const cohort_transport_list_t *list);

#endif
