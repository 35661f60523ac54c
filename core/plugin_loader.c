/* SPDX-License-Identifier: BSD-3-Clause */
/* Transport plugin discovery, validation and loading. */
#include "core/plugin_loader.h"
#include "core/config.h"
#include "core/hmac.h"
#include "core/jobtopo.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/netif.h"
#include "core/parse.h"
#include "core/reduce.h"

#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#ifndef COHORT_PLUGIN_DIR
#define COHORT_PLUGIN_DIR "/usr/local/lib/cohort"
#endif
#ifndef COHORT_BUILD_DIR
#define COHORT_BUILD_DIR ""
#endif
#ifndef COHORT_LIB_DIR
#define COHORT_LIB_DIR ""
#endif
#ifndef COHORT_BIN_DIR
#define COHORT_BIN_DIR ""
#endif

#define SUBSYS "plugin"
#define MAX_CANDIDATES 64

/* ---- host table ------------------------------------------------------------------------- */

/* Set by every communicator creation, possibly from several threads at once (one process may
 * hold several ranks' communicators); read by the transports' handshakes. */
static pthread_mutex_t secret_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned char job_secret[64];
static size_t job_secret_len;

void cohort_plugin_set_secret(const void *secret, size_t len)
{
    if (len > sizeof job_secret) len = sizeof job_secret;
    pthread_mutex_lock(&secret_lock);
    memcpy(job_secret, secret, len);
    job_secret_len = len;
    pthread_mutex_unlock(&secret_lock);
}

static void host_log(int level, const char *subsys, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cohort_vlog(level, subsys, fmt, ap);
    va_end(ap);
}

static cohort_status_t host_error(cohort_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cohort_verror(status, fmt, ap);
    va_end(ap);
    return status;
}

/* In the table's range when the table has the setting (the message then says what is valid);
 * a plugin's own settings are any whole number, the plugin checks its range. */
static cohort_status_t host_setting_long(const char *name, long *value)
{
    const cohort_setting_t *s = cohort_setting_find(name);
    if (s && s->kind == COHORT_SET_LONG) return cohort_config_table_long(name, value);
    return cohort_config_long(name, LONG_MIN, LONG_MAX, value);
}

void cohort_plugin_auth(const void *data, size_t len, unsigned char out[32])
{
    unsigned char key[sizeof job_secret];
    pthread_mutex_lock(&secret_lock);
    size_t klen = job_secret_len;
    memcpy(key, job_secret, klen);
    pthread_mutex_unlock(&secret_lock);
    cohort_hmac_sha256(key, klen, data, len, out);
}

/* ABI 1.2: the topology's RDMA devices, nearest first. Per thread, so that two threads opening
 * plugins at once do not overwrite each other's answer. */
static cohort_status_t host_rdma_devices(const char *const **names, int *count)
{
    static _Thread_local char buf[32][32];
    static _Thread_local const char *ptrs[32];
    if (!names || !count) return COHORT_ERR_INVALID_ARG;
    int n = cohort_job_rdma_devices(buf, 32);
    for (int i = 0; i < n; i++) ptrs[i] = buf[i];
    *names = ptrs;
    *count = n;
    return COHORT_SUCCESS;
}

static const cohort_host_v1_t host_table = {
    .size = sizeof(cohort_host_v1_t),
    .abi_version = COHORT_PLUGIN_ABI_VERSION,
    .log = host_log,
    .error = host_error,
    .setting = cohort_config_get,
    .setting_long = host_setting_long,
    .netifs = cohort_netifs,
    .auth = cohort_plugin_auth,
    .reduce = cohort_reduce_local,
    .reduce3 = cohort_reduce_local3,
    .reduce_finish = cohort_reduce_finish,
    .rdma_devices = host_rdma_devices,
    .mem_shared = cohort_mem_shared,
};

const cohort_host_v1_t *cohort_plugin_host(void) { return &host_table; }

/* ---- one plugin ------------------------------------------------------------------------- */

/* "libcohort-tcp.so" -> "tcp"; 0 if the file name is not a plugin's. */
static int plugin_name_of(const char *file, char *name, size_t len)
{
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    size_t bl = strlen(base);
    if (strncmp(base, "libcohort-", 10) || bl <= 13 || strcmp(base + bl - 3, ".so")) return 0;
    size_t nl = bl - 13;
    if (nl >= len) return 0;
    memcpy(name, base + 10, nl);
    name[nl] = '\0';
    return 1;
}

#define REQUIRED(f) { #f, offsetof(cohort_transport_v1_t, f) }
static const struct { const char *name; size_t off; } required_fns[] = {
    REQUIRED(init), REQUIRED(finalize), REQUIRED(get_attr), REQUIRED(ep_open),
    REQUIRED(ep_close), REQUIRED(can_reach), REQUIRED(connect), REQUIRED(accept),
    REQUIRED(conn_test), REQUIRED(conn_close), REQUIRED(isend), REQUIRED(irecv),
    REQUIRED(test), REQUIRED(progress),
};

static cohort_status_t validate(const char *path, const char *fname,
                                const cohort_transport_v1_t *t)
{
    unsigned major = t->abi_version >> 16, minor = t->abi_version & 0xffff;
    if (major != COHORT_PLUGIN_ABI_MAJOR)
        return cohort_error(COHORT_ERR_PLUGIN, "plugin %s refused: plugin ABI %u.%u, this "
                            "cohort supports ABI %d.x (any minor; it knows up to %d.%d); rebuild the "
                            "plugin against this cohort's <cohort/plugin.h>", path, major,
                            minor, COHORT_PLUGIN_ABI_MAJOR, COHORT_PLUGIN_ABI_MAJOR,
                            COHORT_PLUGIN_ABI_MINOR);
    if (t->size < COHORT_TRANSPORT_V1_MIN_SIZE)
        return cohort_error(COHORT_ERR_PLUGIN, "plugin %s refused: its %s struct is %zu bytes, "
                            "smaller than ABI 1.0's %zu (corrupt or built against a broken "
                            "header)", path, COHORT_PLUGIN_SYMBOL, t->size,
                            (size_t)COHORT_TRANSPORT_V1_MIN_SIZE);
    if (!t->name || strcmp(t->name, fname))
        return cohort_error(COHORT_ERR_PLUGIN, "plugin %s refused: it calls itself '%s' but its "
                            "file name says '%s'; rename the file libcohort-<name>.so", path,
                            t->name ? t->name : "(null)", fname);
    for (size_t i = 0; i < sizeof required_fns / sizeof required_fns[0]; i++) {
        void *fn;
        memcpy(&fn, (const char *)t + required_fns[i].off, sizeof fn);
        if (!fn)
            return cohort_error(COHORT_ERR_PLUGIN, "plugin %s refused: mandatory function %s "
                                "is NULL", path, required_fns[i].name);
    }
    if (!t->mem_reg != !t->mem_dereg)
        return cohort_error(COHORT_ERR_PLUGIN, "plugin %s refused: mem_reg and mem_dereg must "
                            "both be set or both be NULL", path);
    return COHORT_SUCCESS;
}

/* ---- the plugins' settings (ABI 1.5) ---------------------------------------------------- */

#define MAX_PLUGIN_TABLE 64   /* settings in one plugin's table */

/* The plugin's settings table into the core's (when it has one and it is not in yet). A plugin
 * whose table went in stays mapped for the life of the process: the table's strings and check
 * functions are the core's from then on. */
static cohort_status_t add_settings(const char *path, const cohort_transport_v1_t *t)
{
    if ((t->abi_version & 0xffffu) < 5 || !COHORT_HAS_FIELD(t, cohort_transport_v1_t, settings) ||
        !t->settings || cohort_config_has_owner(t->name))
        return COHORT_SUCCESS;
    cohort_setting_t list[MAX_PLUGIN_TABLE];
    size_t n = 0;
    for (; t->settings[n]; n++) {
        const cohort_plugin_setting_v1_t *e = t->settings[n];
        if (n == MAX_PLUGIN_TABLE)
            return cohort_error(COHORT_ERR_PLUGIN, "plugin %s refused: its settings table holds "
                                "more than %d settings (or misses its NULL end)", path,
                                MAX_PLUGIN_TABLE);
        if (!COHORT_HAS_FIELD(e, cohort_plugin_setting_v1_t, check))
            return cohort_error(COHORT_ERR_PLUGIN, "plugin %s refused: entry %zu of its settings "
                                "table is %zu bytes, smaller than ABI 1.5's %zu", path, n,
                                e->size, sizeof *e);
        static const cohort_setting_kind_t kinds[] = { COHORT_SET_TEXT, COHORT_SET_LONG,
                                                       COHORT_SET_DOUBLE, COHORT_SET_WORD };
        list[n] = (cohort_setting_t){
            .name = e->name, .def = e->def, .help = e->help,
            .kind = e->kind >= 0 && e->kind < 4 ? kinds[e->kind] : COHORT_SET_SPECIAL,
            .min = e->min, .max = e->max, .words = e->words, .check = e->check,
        };
    }
    cohort_status_t st = cohort_config_add(t->name, list, n);
    if (st) {
        char why[1024];
        snprintf(why, sizeof why, "%s", cohort_last_error());
        return cohort_error(COHORT_ERR_PLUGIN, "plugin %s refused: %s", path, why);
    }
    /* pin: RTLD_NODELETE on a handle of the loaded object marks it for good */
    void *pin = dlopen(path, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
    if (pin) dlclose(pin);
    return COHORT_SUCCESS;
}

/* dlopen + the symbol + validate + the settings table: what a plugin is before its init. On
 * refusal COHORT_ERR_PLUGIN with a one-line message naming the file and the reason, and the file
 * is closed again. */
static cohort_status_t open_checked(const char *path, void **dlp, const cohort_transport_v1_t **tp)
{
    char fname[32];
    if (!plugin_name_of(path, fname, sizeof fname))
        return cohort_error(COHORT_ERR_PLUGIN, "plugin %s refused: a plugin file must be named "
                            "libcohort-<name>.so", path);
    dlerror();
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!dl)
        return cohort_error(COHORT_ERR_PLUGIN, "plugin %s refused: dlopen failed: %s", path,
                            dlerror());
    const cohort_transport_v1_t *t = dlsym(dl, COHORT_PLUGIN_SYMBOL);
    if (!t) {
        dlclose(dl);
        return cohort_error(COHORT_ERR_PLUGIN, "plugin %s refused: missing symbol %s (not a "
                            "cohort transport plugin, or built for another plugin ABI)", path,
                            COHORT_PLUGIN_SYMBOL);
    }
    cohort_status_t st = validate(path, fname, t);
    if (!st) st = add_settings(path, t);
    if (st) {
        dlclose(dl);
        return st;
    }
    *dlp = dl;
    *tp = t;
    return COHORT_SUCCESS;
}

cohort_status_t cohort_plugin_open(const char *path, cohort_plugin_t **out)
{
    *out = NULL;
    void *dl;
    const cohort_transport_v1_t *t;
    cohort_status_t st = open_checked(path, &dl, &t);
    if (st) return st;
    cohort_plugin_t *p = calloc(1, sizeof *p);
    if (!p) {
        dlclose(dl);
        return cohort_error(COHORT_ERR_NO_MEMORY, "no memory to load plugin %s", path);
    }
    snprintf(p->name, sizeof p->name, "%s", t->name);
    snprintf(p->path, sizeof p->path, "%s", path);
    p->dl = dl;
    p->ops = t;
    cohort_error_clear();
    st = t->init(&host_table, &p->ctx);
    if (st) {
        char why[1024];
        snprintf(why, sizeof why, "%s", cohort_last_error()[0] ? cohort_last_error()
                 : "init gave no reason");
        dlclose(dl);
        free(p);
        if (st == COHORT_ERR_UNSUPPORTED)
            return cohort_error(st, "plugin %s unavailable: %s", path, why);
        return cohort_error(COHORT_ERR_PLUGIN, "plugin %s refused: init failed (%s): %s", path,
                            cohort_strerror(st), why);
    }
    p->attr.size = sizeof p->attr;
    st = t->get_attr(p->ctx, &p->attr);
    if (st) {
        t->finalize(p->ctx);
        dlclose(dl);
        free(p);
        return cohort_error(COHORT_ERR_PLUGIN, "plugin %s refused: get_attr failed (%s)", path,
                            cohort_strerror(st));
    }
    *out = p;
    return COHORT_SUCCESS;
}

void cohort_plugin_close(cohort_plugin_t *p)
{
    if (!p) return;
    p->ops->finalize(p->ctx);
    /* Under sanitizers keep the code mapped so leak reports can still symbolise it. */
#if !defined(__SANITIZE_ADDRESS__)
    dlclose(p->dl);
#endif
    free(p);
}

/* ---- the process-wide set --------------------------------------------------------------- */

static pthread_mutex_t set_lock = PTHREAD_MUTEX_INITIALIZER;
static cohort_plugin_t *loaded[MAX_CANDIDATES];
static int nloaded;
static int refs;
static cohort_plugin_report_t reports[MAX_CANDIDATES];
static int nreports;

/* The absolute path of the file this code was loaded from: libcohort.so, or the program that
 * links the core statically (the tools, unit tests; the loader may name a program relative to
 * where it was started, /proc/self/exe does not). *is_lib: 1 for a shared library. 0 when it
 * cannot be told. */
static int loaded_from(char *buf, size_t len, int *is_lib)
{
    Dl_info info;
    if (!dladdr((void *)&cohort_plugin_open, &info) || !info.dli_fname) return 0;
    const char *base = strrchr(info.dli_fname, '/');
    *is_lib = strstr(base ? base : info.dli_fname, ".so") != NULL;
    if (*is_lib) {
        int n = snprintf(buf, len, "%s", info.dli_fname);
        return n > 0 && (size_t)n < len && buf[0] == '/';
    }
    ssize_t n = readlink("/proc/self/exe", buf, len - 1);
    if (n <= 0) return 0;
    buf[n] = '\0';
    return buf[0] == '/';
}

static int running_from_build_tree(void)
{
    char path[4096];
    int is_lib;
    if (!COHORT_BUILD_DIR[0] || !loaded_from(path, sizeof path, &is_lib)) return 0;
    size_t bl = strlen(COHORT_BUILD_DIR);
    return !strncmp(path, COHORT_BUILD_DIR, bl) && path[bl] == '/';
}

/* The plugin directory of an install moved elsewhere, from where one of its files is now: at,
 * the directory of a file that was installed in the configured directory dir. dir and
 * COHORT_PLUGIN_DIR share a prefix (the configured prefix, or dir itself); the part of dir
 * after it must end at, and the plugin directory is what is left of at plus the rest of
 * COHORT_PLUGIN_DIR. 0 when at does not end in that part. */
static int relocate(const char *dir, const char *at, char *buf, size_t len)
{
    const char *pd = COHORT_PLUGIN_DIR;
    size_t c = 0, i = 0;
    for (; dir[i] && dir[i] == pd[i]; i++)
        if (dir[i] == '/') c = i;
    if (!dir[i] && pd[i] == '/') c = i;   /* dir holds the plugin directory (libdir) */
    if (!c && dir[0] != '/') return 0;
    const char *xs = dir + c;            /* "/bin" for bindir, "" for libdir */
    size_t al = strlen(at), xl = strlen(xs);
    if (al < xl || strcmp(at + al - xl, xs)) return 0;
    int n = snprintf(buf, len, "%.*s%s", (int)(al - xl), at, pd + c);
    return n > 0 && (size_t)n < len;
}

int cohort_plugins_install_dir(char *buf, size_t len)
{
    /* The plugins are installed in $(pkglibdir) = $(libdir)/cohort: found from where this code
     * was loaded (libcohort.so in $(libdir), or a tool in $(bindir) that links the core
     * statically), an install that was moved (or unpacked elsewhere, as a Python wheel is)
     * still finds its own plugins, not those of another install at the configured prefix. */
    char obj[4096];
    int is_lib;
    if (COHORT_LIB_DIR[0] && loaded_from(obj, sizeof obj, &is_lib)) {
        *strrchr(obj, '/') = '\0';   /* its directory */
        if (relocate(is_lib ? COHORT_LIB_DIR : COHORT_BIN_DIR, obj, buf, len))
            return strcmp(buf, COHORT_PLUGIN_DIR) != 0;
    }
    snprintf(buf, len, "%s", COHORT_PLUGIN_DIR);
    return 0;
}

void cohort_plugins_search_path(char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    const char *pp = cohort_config_get("COHORT_PLUGIN_PATH");
    if (pp && *pp) used += (size_t)snprintf(buf, len, "%s:", pp);
    if (running_from_build_tree()) {
        if (used < len)
            used += (size_t)snprintf(buf + used, len - used, "%s/.libs:%s/transports/*/.libs:",
                                     COHORT_BUILD_DIR, COHORT_BUILD_DIR);
    } else {
        char here[4096];
        if (cohort_plugins_install_dir(here, sizeof here) && used < len)
            used += (size_t)snprintf(buf + used, len - used, "%s:", here);
    }
    if (used < len) snprintf(buf + used, len - used, "%s", COHORT_PLUGIN_DIR);
}

typedef struct candidate {
    char name[32];
    char path[4096];
} candidate_t;

/* Transport names are words: any case (COHORT_TRANSPORTS stores them in lower case). */
static int find_candidate(const candidate_t *c, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcasecmp(c[i].name, name)) return i;
    return -1;
}

static void scan_dir(const char *dir, candidate_t *c, int *n)
{
    /* "<dir>/transports/<star>/.libs": one level of wildcard for the build tree. */
    const char *star = strstr(dir, "/*/");
    if (star) {
        char parent[4096];
        snprintf(parent, sizeof parent, "%.*s", (int)(star - dir), dir);
        DIR *d = opendir(parent);
        if (!d) return;
        struct dirent *e;
        char names[32][256];
        int k = 0;
        while ((e = readdir(d)) && k < 32)
            if (e->d_name[0] != '.') snprintf(names[k++], sizeof names[0], "%s", e->d_name);
        closedir(d);
        for (int i = 0; i < k; i++) {
            char sub[4096];
            snprintf(sub, sizeof sub, "%.3000s/%.255s%.200s", parent, names[i], star + 2);
            scan_dir(sub, c, n);
        }
        return;
    }
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) && *n < MAX_CANDIDATES) {
        char name[32];
        if (!plugin_name_of(e->d_name, name, sizeof name)) continue;
        if (find_candidate(c, *n, name) >= 0) {
            cohort_log(COHORT_LOG_TRACE, SUBSYS, "plugin %s/%s shadowed by %s", dir,
                       e->d_name, c[find_candidate(c, *n, name)].path);
            continue;
        }
        snprintf(c[*n].name, sizeof c[*n].name, "%s", name);
        snprintf(c[*n].path, sizeof c[*n].path, "%s/%s", dir, e->d_name);
        (*n)++;
    }
    closedir(d);
}

static int scan_all(candidate_t *c)
{
    char path[8192];
    cohort_plugins_search_path(path, sizeof path);
    int n = 0;
    for (char *save = NULL, *dir = strtok_r(path, ":", &save); dir;
         dir = strtok_r(NULL, ":", &save))
        scan_dir(dir, c, &n);
    return n;
}

/* COHORT_TRANSPORTS names a transport that has no plugin file on the search path. */
static cohort_status_t missing(cohort_status_t st, const char *name, const candidate_t *cand,
                               int n)
{
    char found[1024] = "", sp[8192];
    size_t used = 0;
    for (int j = 0; j < n && used < sizeof found; j++)
        used += (size_t)snprintf(found + used, sizeof found - used, "%s%s", j ? ", " : "",
                                 cand[j].name);
    cohort_plugins_search_path(sp, sizeof sp);
    return cohort_error(st, "COHORT_TRANSPORTS names '%s' but no libcohort-%s.so was found in "
                        "%s (found: %s)", name, name, sp, n ? found : "none");
}

/* The transports cohort's own tree builds: a job script may exclude one on a machine where it
 * was not built (^verbs), so excluding them is never an error; any other name must be found. */
static const char *const IN_TREE[] = { "shm", "tcp", "ucx", "verbs" };

/* The found candidates' names, "a, b, c" ("none"). */
static void candidate_names(const candidate_t *cand, int n, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int j = 0; j < n && used < len; j++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s", j ? ", " : "", cand[j].name);
    if (n == 0) snprintf(buf, len, "none");
}

/* An exclude list: every name is a transport (in-tree or found), and something is left. */
static cohort_status_t check_excluded(const char *text, const cohort_transport_list_t *list,
                                      const candidate_t *cand, int n)
{
    char found[1024], sp[8192];
    candidate_names(cand, n, found, sizeof found);
    for (int i = 0; i < list->count; i++) {
        int known = find_candidate(cand, n, list->names[i]) >= 0;
        for (size_t k = 0; k < sizeof IN_TREE / sizeof IN_TREE[0]; k++)
            known |= !strcmp(IN_TREE[k], list->names[i]);
        if (!known) {
            cohort_plugins_search_path(sp, sizeof sp);
            return cohort_error(COHORT_ERR_INVALID_ARG, "COHORT_TRANSPORTS='%.96s' excludes "
                                "'%s', which is not a transport: neither cohort's own (shm, tcp, "
                                "ucx, verbs) nor found in %s (found: %s); check the spelling",
                                text, list->names[i], sp, found);
        }
    }
    int left = 0;
    for (int j = 0; j < n; j++) {
        int excluded = 0;
        for (int i = 0; i < list->count; i++) excluded |= !strcasecmp(list->names[i], cand[j].name);
        left += !excluded;
    }
    if (n > 0 && !left)
        return cohort_error(COHORT_ERR_INVALID_ARG, "COHORT_TRANSPORTS='%.96s' excludes every "
                            "transport found (%s): nothing is left to connect the ranks; exclude "
                            "fewer, or name the ones to use (e.g. COHORT_TRANSPORTS=tcp)", text,
                            found);
    return COHORT_SUCCESS;
}

cohort_status_t cohort_plugins_check_names(const char *text, const cohort_transport_list_t *list)
{
    if (!list->count) return COHORT_SUCCESS;
    candidate_t *cand = malloc(MAX_CANDIDATES * sizeof *cand);
    if (!cand) return cohort_error(COHORT_ERR_NO_MEMORY, "no memory to scan for plugins");
    int n = scan_all(cand);
    cohort_status_t st = COHORT_SUCCESS;
    if (list->exclude) st = check_excluded(text, list, cand, n);
    for (int i = 0; i < list->count && !st && !list->exclude; i++)
        if (find_candidate(cand, n, list->names[i]) < 0)
            st = missing(COHORT_ERR_INVALID_ARG, list->names[i], cand, n);
    free(cand);
    return st;
}

void cohort_plugins_read_settings(void)
{
    /* the files read so far, with or without a table: each is opened once per process */
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static char seen[MAX_CANDIDATES][4096];
    static int nseen;
    candidate_t *cand = malloc(MAX_CANDIDATES * sizeof *cand);
    if (!cand) return;
    pthread_mutex_lock(&lock);
    int n = scan_all(cand);
    for (int i = 0; i < n; i++) {
        int done = cohort_config_has_owner(cand[i].name);
        for (int k = 0; k < nseen && !done; k++) done = !strcmp(seen[k], cand[i].path);
        if (done) continue;
        if (nseen < MAX_CANDIDATES) snprintf(seen[nseen++], sizeof seen[0], "%s", cand[i].path);
        /* what cohort_plugin_open checks, without init: a file it would refuse adds nothing */
        void *dl;
        const cohort_transport_v1_t *t;
        int old = cohort_error_log_level(COHORT_LOG_NONE);
        cohort_status_t st = open_checked(cand[i].path, &dl, &t);
        cohort_error_log_level(old);
        if (st) {
            cohort_log(COHORT_LOG_INFO, SUBSYS, "plugin %s: its settings are not read: %s",
                       cand[i].name, cohort_last_error());
            cohort_error_clear();   /* the loader reports it when it loads the plugin */
        } else {
            dlclose(dl);
        }
    }
    pthread_mutex_unlock(&lock);
    free(cand);
}

int cohort_plugins_exists(const char *name)
{
    candidate_t *cand = malloc(MAX_CANDIDATES * sizeof *cand);
    if (!cand) return 0;
    int found = find_candidate(cand, scan_all(cand), name) >= 0;
    free(cand);
    return found;
}

/* One line per candidate: WARN when a plugin file is broken (wrong ABI, missing symbol, failed
 * init), INFO when it was loaded, filtered out, or is unavailable on this machine. */
static void report(const candidate_t *c, int loaded_ok, const char *why, int level)
{
    if (nreports >= MAX_CANDIDATES) return;
    cohort_plugin_report_t *r = &reports[nreports++];
    snprintf(r->name, sizeof r->name, "%s", c->name);
    snprintf(r->path, sizeof r->path, "%s", c->path);
    r->loaded = loaded_ok;
    snprintf(r->why, sizeof r->why, "%s", why);
    cohort_log(level, SUBSYS, "plugin %s (%s): %s %s", c->name, c->path,
               loaded_ok ? "loaded:" : "skipped:", why);
}

/* Better first: node scope before network, then higher bandwidth. */
static int better(const cohort_plugin_t *a, const cohort_plugin_t *b)
{
    if (a->attr.scope != b->attr.scope) return a->attr.scope == COHORT_SCOPE_NODE;
    return a->attr.bandwidth_gbps > b->attr.bandwidth_gbps;
}

/* Loads candidates honouring the transport list; fills loaded[] unless keep == 0. */
static cohort_status_t load_all(int keep)
{
    candidate_t cand[MAX_CANDIDATES];
    int n = scan_all(cand);
    nreports = 0;
    cohort_transport_list_t list = { 0 };
    const char *tl = cohort_config_get("COHORT_TRANSPORTS");
    if (tl && *tl) {
        cohort_status_t st = cohort_transport_list_parse("COHORT_TRANSPORTS", tl, &list);
        if (st) return st;
    }
    /* Order: the allow list's order, else discovery order (re-sorted by attributes below). */
    int order[MAX_CANDIDATES], norder = 0;
    if (list.count && !list.exclude) {
        for (int i = 0; i < list.count; i++) {
            int idx = find_candidate(cand, n, list.names[i]);
            if (idx < 0) return missing(COHORT_ERR_PLUGIN, list.names[i], cand, n);
            order[norder++] = idx;
        }
        for (int j = 0; j < n; j++) {
            int listed = 0;
            for (int i = 0; i < norder; i++) listed |= order[i] == j;
            if (!listed) report(&cand[j], 0, "not in COHORT_TRANSPORTS", COHORT_LOG_INFO);
        }
    } else {
        for (int j = 0; j < n; j++) {
            int excluded = 0;
            for (int i = 0; i < list.count; i++)
                excluded |= !strcasecmp(list.names[i], cand[j].name);
            if (excluded) report(&cand[j], 0, "excluded by COHORT_TRANSPORTS", COHORT_LOG_INFO);
            else order[norder++] = j;
        }
    }
    int first_loaded = nloaded;
    for (int i = 0; i < norder; i++) {
        candidate_t *c = &cand[order[i]];
        cohort_plugin_t *p;
        /* the report line below is the one line about this candidate */
        int old_level = cohort_error_log_level(COHORT_LOG_NONE);
        cohort_status_t st = cohort_plugin_open(c->path, &p);
        cohort_error_log_level(old_level);
        if (st) {
            report(c, 0, cohort_last_error(),
                   st == COHORT_ERR_UNSUPPORTED ? COHORT_LOG_INFO : COHORT_LOG_WARN);
            if (list.count && !list.exclude) {
                /* The user asked for it by name: do not silently fall back. */
                for (int j = first_loaded; j < nloaded; j++) cohort_plugin_close(loaded[j]);
                nloaded = first_loaded;
                char why[1024];
                snprintf(why, sizeof why, "%s", cohort_last_error());
                return cohort_error(st, "COHORT_TRANSPORTS asks for '%s' but it cannot be used: "
                                    "%s", c->name, why);
            }
            continue;
        }
        char why[256];
        snprintf(why, sizeof why, "version %s, ABI %u.%u, scope %s", p->ops->version
                 ? p->ops->version : "?", p->ops->abi_version >> 16, p->ops->abi_version & 0xffff,
                 p->attr.scope == COHORT_SCOPE_NODE ? "node" : "network");
        report(c, 1, why, COHORT_LOG_INFO);
        if (keep) loaded[nloaded++] = p;
        else cohort_plugin_close(p);
    }
    if (keep && !(list.count && !list.exclude)) {
        /* insertion sort by attributes, stable */
        for (int i = 1; i < nloaded; i++)
            for (int j = i; j > 0 && better(loaded[j], loaded[j - 1]); j--) {
                cohort_plugin_t *t = loaded[j];
                loaded[j] = loaded[j - 1];
                loaded[j - 1] = t;
            }
    }
    if (keep && nloaded == 0) {
        char sp[8192];
        cohort_plugins_search_path(sp, sizeof sp);
        if (n == 0)
            return cohort_error(COHORT_ERR_PLUGIN, "no transport plugin found (searched %s). Set "
                                "COHORT_PLUGIN_PATH to the directory holding libcohort-tcp.so",
                                sp);
        /* Plugins were found: say why none is usable, not where to look for more. */
        char why[2048] = "";
        size_t used = 0;
        for (int i = 0; i < nreports && used < sizeof why; i++)
            used += (size_t)snprintf(why + used, sizeof why - used, "%s%s: %s", i ? "; " : "",
                                     reports[i].name, reports[i].why);
        return cohort_error(COHORT_ERR_PLUGIN, "no usable transport plugin among the %d found in "
                            "%s: %s%s", n, sp, why, list.exclude ? " (COHORT_TRANSPORTS excludes "
                            "the others; exclude fewer)" : "");
    }
    return COHORT_SUCCESS;
}

cohort_status_t cohort_plugins_get(cohort_plugin_t *const **list, int *count)
{
    pthread_mutex_lock(&set_lock);
    cohort_status_t st = COHORT_SUCCESS;
    if (refs == 0) st = load_all(1);
    if (st == COHORT_SUCCESS) {
        refs++;
        *list = loaded;
        *count = nloaded;
    } else {
        *list = NULL;
        *count = 0;
    }
    pthread_mutex_unlock(&set_lock);
    return st;
}

void cohort_plugins_release(void)
{
    pthread_mutex_lock(&set_lock);
    if (refs > 0 && --refs == 0) {
        for (int i = 0; i < nloaded; i++) cohort_plugin_close(loaded[i]);
        nloaded = 0;
    }
    pthread_mutex_unlock(&set_lock);
}

cohort_status_t cohort_plugins_scan(void)
{
    pthread_mutex_lock(&set_lock);
    cohort_status_t st = load_all(0);
    pthread_mutex_unlock(&set_lock);
    return st;
}

const cohort_plugin_report_t *cohort_plugins_report(int *count)
{
    *count = nreports;
    return reports;
}
