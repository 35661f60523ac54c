/* SPDX-License-Identifier: BSD-3-Clause */
/* cohort_config_check: every setting of the table (core/config.c) against what a valid value is,
 * run at every communicator's creation. A bad value fails there, naming the variable and the
 * text (and the settings file and line it came from), even when nothing would read it in this
 * job: a single rank loads no transport and opens no socket, yet COHORT_SOCKET_NSOCKS=x or a
 * COHORT_SOCKET_IFNAME that matches nothing is still a mistake worth hearing about at once.
 * Kept apart from config.c, which the algorithm tests link without the rest of the core. */
#include "core/config.h"
#include "core/coll/coll.h"
#include "core/jobtopo.h"
#include "core/log.h"
#include "core/netif.h"
#include "core/parse.h"
#include "core/plugin_loader.h"
#include "core/rendezvous.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

extern char **environ;

#define SHOWN 96   /* characters of a value quoted in a message */

/* Printable, bounded copy of user text for a message. */
static const char *shown(const char *s, size_t n, char out[SHOWN + 4])
{
    size_t k = 0;
    for (; k < n && s[k] && k < SHOWN; k++) out[k] = isprint((unsigned char)s[k]) ? s[k] : '?';
    if (k < n && s[k]) {
        memcpy(out + k, "...", 3);
        k += 3;
    }
    out[k] = '\0';
    return out;
}

/* COHORT_DEBUG_FILE: free text, but a % must be one of the substitutions (core/log.c). */
static cohort_status_t check_log_file(const char *name, const char *v)
{
    char bad = 0;
    if (cohort_log_file_check(v, &bad) == 0) return COHORT_SUCCESS;
    char q[SHOWN + 4];
    if (!bad)
        return cohort_error(COHORT_ERR_INVALID_ARG, "%s='%s': a '%%' ends it: write %%%% for a "
                            "'%%'", name, shown(v, strlen(v), q));
    return cohort_error(COHORT_ERR_INVALID_ARG, "%s='%s': '%%%c' is not one of %%h (host), %%p "
                        "(process id), %%r (rank), %%%% (a '%%')", name, shown(v, strlen(v), q),
                        bad);
}

static cohort_status_t check_text(const cohort_setting_t *s, const char *v)
{
    char q[SHOWN + 4];
    size_t len = strlen(v);
    if (!strcmp(s->name, "COHORT_DEBUG_FILE")) return check_log_file(s->name, v);
    if (s->max > 0 && (double)len > s->max)
        return cohort_error(COHORT_ERR_INVALID_ARG, "%s='%s' is %zu characters long; at most %.0f "
                            "are allowed", s->name, shown(v, len, q), len, s->max);
    return COHORT_SUCCESS;
}

static cohort_status_t check_word(const cohort_setting_t *s, const char *v)
{
    char q[SHOWN + 4], list[128];
    const char *w;
    if (cohort_setting_word(s, v, &w)) return COHORT_SUCCESS;
    cohort_setting_words(s, list, sizeof list);
    return cohort_error(COHORT_ERR_INVALID_ARG, "%s='%s' is not one of %s (any case)", s->name,
                        shown(v, strlen(v), q), list);
}

/* Every ':'-separated directory must exist, and no entry may be empty (as in every list:
 * "a::b", a leading or a trailing ':'); "dir/" "*" "/sub" is one level of wildcard, checked up
 * to the '*'. */
static cohort_status_t check_plugin_path(const char *name, const char *v)
{
    char q[SHOWN + 4], e[SHOWN + 4], dir[4096];
    for (const char *p = v;; p++) {
        size_t n = strcspn(p, ":");
        if (n == 0)
            return cohort_error(COHORT_ERR_INVALID_ARG, "%s='%s' has an empty entry (two ':' "
                                "in a row, or one at an end); list directories separated by "
                                "single ':'", name, shown(v, strlen(v), q));
        const char *star = memchr(p, '*', n);
        size_t dn = star ? (size_t)(star - p) : n;
        if (dn == 0 || dn >= sizeof dir)
            return cohort_error(COHORT_ERR_INVALID_ARG, "%s='%s': entry '%s' is not a "
                                "directory", name, shown(v, strlen(v), q), shown(p, n, e));
        memcpy(dir, p, dn);
        dir[dn] = '\0';
        struct stat sb;
        const char *why = stat(dir, &sb) != 0 ? strerror(errno)
                          : !S_ISDIR(sb.st_mode) ? "not a directory" : NULL;
        if (why)
            return cohort_error(COHORT_ERR_INVALID_ARG, "%s='%s': entry '%s' is not a "
                                "directory (%s); fix or drop it", name, shown(v, strlen(v), q),
                                shown(p, n, e), why);
        p += n;
        if (!*p) return COHORT_SUCCESS;
    }
}

/* One subsystem name (any case): the core's, or the name of a transport plugin on the search
 * path (plugins log under their own name, docs/plugins.md). */
static int known_subsys(const char *p, size_t n)
{
    for (const char *k = COHORT_LOG_SUBSYSTEMS; *k;) {
        size_t kn = strcspn(k, ",");
        if (kn == n && !strncasecmp(p, k, n)) return 1;
        k += kn + (k[kn] == ',');
    }
    char plugin[32];
    if (n >= sizeof plugin) return 0;
    for (size_t i = 0; i < n; i++) plugin[i] = (char)tolower((unsigned char)p[i]);
    plugin[n] = '\0';
    return cohort_plugins_exists(plugin);
}

/* "ALL", or a ','-separated list of subsystem names, optionally after a '^' (hide these). A
 * name that is no subsystem (a typo: "nett") would silently hide every INFO line. */
static cohort_status_t check_subsys(const char *name, const char *v)
{
    char q[SHOWN + 4], e[SHOWN + 4];
    size_t len = strlen(v);
    while (len && isspace((unsigned char)v[len - 1])) len--;
    while (isspace((unsigned char)*v)) {
        v++;
        len--;
    }
    if (len == 3 && !strncasecmp(v, "ALL", 3)) return COHORT_SUCCESS;
    if (len > 255)   /* what the logger keeps (core/log.c) */
        return cohort_error(COHORT_ERR_INVALID_ARG, "%s='%s' is longer than 255 characters",
                            name, shown(v, len, q));
    const char *p = v + (*v == '^'), *end = v + len;
    for (;;) {
        while (p < end && isblank((unsigned char)*p)) p++;
        size_t n = 0, b = 0;
        while (p + n < end && (isalnum((unsigned char)p[n]) || p[n] == '_')) n++;
        while (p + n + b < end && isblank((unsigned char)p[n + b])) b++;
        if (n == 0 || (p + n + b < end && p[n + b] != ','))
            return cohort_error(COHORT_ERR_INVALID_ARG, "%s='%s' is not ALL or a comma list of "
                                "subsystems (%s, or a transport plugin's name), optionally after "
                                "^ to hide them; no empty entries", name, shown(v, len, q),
                                COHORT_LOG_SUBSYSTEMS);
        if (!known_subsys(p, n))
            return cohort_error(COHORT_ERR_INVALID_ARG, "%s='%s': '%s' is not a log subsystem "
                                "(%s, or a transport plugin's name); it would hide every line "
                                "of the others", name, shown(v, len, q), shown(p, n, e),
                                COHORT_LOG_SUBSYSTEMS);
        if (p + n + b == end) return COHORT_SUCCESS;
        p += n + b + 1;
    }
}

static cohort_status_t check_rendezvous(const char *name, const char *v)
{
    char q[SHOWN + 4], host[256];
    int port;
    if (!strncmp(v, "tcp://", 6)) {
        int old = cohort_error_log_level(COHORT_LOG_NONE);
        cohort_status_t st = cohort_rdv_parse_url(v, host, sizeof host, &port);
        cohort_error_log_level(old);
        if (st) cohort_error_prefix("%s", name);
        return st;
    }
    if (!strncmp(v, "file://", 7)) {
        struct stat sb;
        if (stat(v + 7, &sb) != 0 || !S_ISDIR(sb.st_mode))
            return cohort_error(COHORT_ERR_INVALID_ARG, "%s='%s': '%s' is not a directory; "
                                "file:// needs a directory that every rank shares", name,
                                shown(v, strlen(v), q), shown(v + 7, strlen(v + 7), host));
        return COHORT_SUCCESS;
    }
    return cohort_error(COHORT_ERR_INVALID_ARG, "%s='%s' must be tcp://host:port or "
                        "file://<directory>", name, shown(v, strlen(v), q));
}

/* The value in use goes through cohort_netifs (cached: what the job uses); a settings file's
 * value that the environment overrides is parsed and matched here. */
static cohort_status_t check_ifname(const char *name, const char *v)
{
    const char *in_use = cohort_config_value(name);
    if (in_use && !strcmp(in_use, v)) {
        const cohort_netif_t *ifs;
        int n;
        return cohort_netifs(&ifs, &n);
    }
    cohort_ifspec_t spec;
    cohort_status_t st = cohort_ifspec_parse(name, v, &spec);
    cohort_netif_t *all = NULL;
    int n = 0, hits = 0;
    if (!st) st = cohort_netifs_all(&all, &n);
    for (int i = 0; !st && i < n; i++)
        hits += cohort_ifspec_match(&spec, all[i].name, all[i].family, all[i].addr);
    free(all);
    if (!st && !hits) {
        char q[SHOWN + 4];
        return cohort_error(COHORT_ERR_INVALID_ARG, "%s='%s' matches no interface on this host "
                            "(cohort-info --interfaces lists them)", name,
                            shown(v, strlen(v), q));
    }
    return st;
}

/* The grammar, then every algorithm name: one of the core's for that collective, or the name of
 * a transport on the plugin search path (its own collectives, e.g. shm). */
static cohort_status_t check_algo(const char *name, const char *v)
{
    cohort_algo_spec_t spec;
    cohort_status_t st = cohort_algo_spec_parse(name, v, &spec);
    if (st) return st;
    int nalgos;
    const cohort_algo_t *algos = cohort_algos(&nalgos);
    for (int e = 0; e < spec.count; e++) {
        const char *coll = spec.entries[e].coll, *algo = spec.entries[e].algo;
        char valid[256] = "";
        size_t used = 0;
        int known = 0;
        for (int i = 0; i < nalgos; i++) {
            if (strcmp(cohort_coll_name(algos[i].coll), coll)) continue;
            known |= !strcmp(algos[i].name, algo);
            if (used < sizeof valid)
                used += (size_t)snprintf(valid + used, sizeof valid - used, "%s%s",
                                         used ? ", " : "", algos[i].name);
        }
        if (known || cohort_plugins_exists(algo)) continue;
        char q[SHOWN + 4];
        return cohort_error(COHORT_ERR_INVALID_ARG, "%s='%s': '%s' is not an algorithm for %s; "
                            "valid for %s: %s, or a transport's name (such as shm) for its own "
                            "collectives", name, shown(v, strlen(v), q), algo, coll, coll, valid);
    }
    return COHORT_SUCCESS;
}

static cohort_status_t check_special(const cohort_setting_t *s, const char *v)
{
    const char *name = s->name;
    if (!strcmp(name, "COHORT_DEBUG_SUBSYS")) return check_subsys(name, v);
    if (!strcmp(name, "COHORT_TRANSPORTS")) {
        cohort_transport_list_t list;
        cohort_status_t st = cohort_transport_list_parse(name, v, &list);
        return st ? st : cohort_plugins_check_names(v, &list);
    }
    if (!strcmp(name, "COHORT_PLUGIN_PATH")) return check_plugin_path(name, v);
    if (!strcmp(name, "COHORT_SOCKET_IFNAME")) return check_ifname(name, v);
    if (!strcmp(name, "COHORT_ALGO")) return check_algo(name, v);
    if (!strcmp(name, "COHORT_RENDEZVOUS")) return check_rendezvous(name, v);
    if (!strcmp(name, "COHORT_TOPO_FILE")) {
        const char *in_use = cohort_config_value(name);
        if (in_use && !strcmp(in_use, v)) {   /* the one the job loads (and keeps) */
            const cohort_topo_t *t;
            return cohort_job_topo(&t);
        }
        cohort_topo_t *t = NULL;              /* a file's value the environment overrides */
        cohort_status_t st = cohort_topo_load(v, &t);
        if (t) cohort_topo_free(t);
        if (st) cohort_error_prefix("%s", name);
        return st;
    }
    return cohort_error(COHORT_ERR_INTERNAL, "setting %s has no check; this is a bug in cohort, "
                        "please report it", name);
}

static cohort_status_t check_one(const cohort_setting_t *s, const char *v)
{
    long l;
    double d;
    size_t k = 0;
    while (isspace((unsigned char)v[k])) k++;
    if (!v[k]) {   /* one rule for every setting: set means set to something */
        char q[SHOWN + 4];
        return cohort_error(COHORT_ERR_INVALID_ARG, "%s='%s' is set but empty; give it a value, "
                            "or unset it for the default (%s)", s->name, shown(v, strlen(v), q),
                            s->def ? s->def : "unset");
    }
    cohort_status_t st = COHORT_ERR_INTERNAL;
    switch (s->kind) {
    case COHORT_SET_TEXT: st = check_text(s, v); break;
    case COHORT_SET_LONG: st = cohort_parse_long(s->name, v, (long)s->min, (long)s->max, &l); break;
    case COHORT_SET_DOUBLE: st = cohort_parse_double(s->name, v, s->min, s->max, &d); break;
    case COHORT_SET_WORD: st = check_word(s, v); break;
    case COHORT_SET_SPECIAL: st = check_special(s, v); break;
    }
    char why[256] = "";
    if (!st && s->check && s->check(v, why, sizeof why)) {   /* a plugin's own rule */
        char q[SHOWN + 4];
        why[sizeof why - 1] = '\0';
        for (char *c = why; *c; c++)   /* it may quote the value: printable only */
            if (!isprint((unsigned char)*c)) *c = '?';
        return cohort_error(COHORT_ERR_INVALID_ARG, "%s='%s' is refused by the %s transport: %s",
                            s->name, shown(v, strlen(v), q), s->owner,
                            why[0] ? why : "(it gave no reason)");
    }
    return st;
}

/* One value; path: it came from that settings file, whose line is named. */
static cohort_status_t check_value(const cohort_setting_t *s, const char *v, const char *path,
                                   int line)
{
    /* the checks' own errors are not logged: the one below, with the file's line, is */
    int old = cohort_error_log_level(COHORT_LOG_NONE);
    cohort_error_clear();
    cohort_status_t st = check_one(s, v);
    cohort_error_log_level(old);
    if (!st) return COHORT_SUCCESS;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", cohort_last_error()[0] ? cohort_last_error()
                                                            : "invalid value");
    if (path) return cohort_error(st, "%s (set in %s, line %d)", msg, path, line);
    return cohort_error(st, "%s", msg);
}

/* Edit distance between a and b (insertions, deletions, substitutions), capped at 9. */
static int distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63) return 9;
    int row[64];
    for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb] < 9 ? row[lb] : 9;
}

/* The name of a COHORT_* entry of the environment ("NAME=value") into name; NULL for any other
 * entry, or a name too long to be a setting's. */
static const char *env_name(const char *entry, char name[64])
{
    size_t nl = strcspn(entry, "=");
    if (strncmp(entry, "COHORT_", 7) || nl >= 64) return NULL;
    memcpy(name, entry, nl);
    name[nl] = '\0';
    return name;
}

/* A COHORT_* variable of the environment that no table holds: a typo of a setting (within two
 * edits of one: a WARN naming the setting meant), or a variable of something else (a test
 * harness, a script, a plugin not installed here: an INFO line). Said once per name and
 * process (for the first 16 names); never an error, as it may be meant for another version of
 * cohort. */
static void note_unknown_env(void)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static char said[16][64];
    static int nsaid;
    char name[64];
    for (char **e = environ; *e; e++) {
        if (!env_name(*e, name) || cohort_setting_find(name)) continue;
        pthread_mutex_lock(&lock);
        int say = nsaid < 16;
        for (int i = 0; i < nsaid && say; i++) say = strcmp(said[i], name) != 0;
        if (say) memcpy(said[nsaid++], name, sizeof name);
        pthread_mutex_unlock(&lock);
        if (!say) continue;
        const char *near = NULL;
        int best = 3;
        size_t n = cohort_settings_count();
        for (size_t i = 0; i < n; i++) {
            const char *known = cohort_setting_at(i)->name;
            int d = distance(name, known);
            if (d < best) {
                best = d;
                near = known;
            }
        }
        if (near)
            COHORT_WARN("init", "%s is set but is no setting: ignored; did you mean %s? "
                        "(cohort-info --settings lists them)", name, near);
        else
            COHORT_INFO("init", "%s is set but is no setting of cohort or of a transport plugin "
                        "on the search path: ignored", name);
    }
}

/* 1 when the environment or the settings file sets a COHORT_* name that the table lacks. */
static int unknown_names(void)
{
    char name[64];
    for (char **e = environ; *e; e++)
        if (env_name(*e, name) && !cohort_setting_find(name)) return 1;
    return !cohort_config_file_names_known();
}

cohort_status_t cohort_config_check(void)
{
    /* a setting no table holds may be a plugin's whose table is not read yet */
    int unknown = unknown_names();
    if (unknown) cohort_plugins_read_settings();
    cohort_status_t st = cohort_config_file_status();
    if (st) return st;
    if (unknown) note_unknown_env();
    size_t n = cohort_settings_count();
    for (size_t i = 0; i < n; i++) {
        const cohort_setting_t *s = cohort_setting_at(i);
        const char *name = s->name, *v = cohort_config_value(name);
        int line = 0;
        const char *path = NULL, *fv = cohort_config_file_value(name, &line, &path);
        /* the file's value even where the environment overrides it: a bad line is a bad line */
        if (fv && fv != v && (st = check_value(s, fv, path, line))) return st;
        if (v && (st = check_value(s, v, fv == v ? path : NULL, line))) return st;
    }
    return COHORT_SUCCESS;
}
