/* The settings table: every COHORT_* variable, its default and help. Environment first, then a
 * cohort.conf file, then the default. */
#include "core/config.h"
#include "core/log.h"
#include "core/parse.h"

#include <ctype.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const cohort_setting_t settings[] = {
    { "COHORT_TRANSPORTS", NULL,
      "transports to use, in preference order (shm,tcp), or ^name,... to exclude; default: all" },
    { "COHORT_PLUGIN_PATH", NULL,
      "':'-separated directories searched for libcohort-<name>.so before the install directory" },
    { "COHORT_SOCKET_IFNAME", NULL,
      "interfaces for sockets: prefixes (eth,ib), =exact, ^ to exclude, or CIDR (10.0.0.0/8)" },
    { "COHORT_SOCKET_NSOCKS", "2", "TCP sockets per peer; large messages are striped over them" },
    { "COHORT_SHM_SEGMENT_SIZE", "1048576",
      "shm: bytes of shared memory per connection (both directions), 64 KiB to 1 GiB" },
    { "COHORT_SHM_EAGER_LIMIT", "65536",
      "shm: messages up to this size go through the shared ring, larger ones single-copy (CMA)" },
    { "COHORT_SHM_CMA", "1",
      "shm: 1 uses process_vm_readv for large messages when permitted; 0 copies through shared "
      "memory" },
    { "COHORT_SHM_COLL_CHUNK", "262144",
      "shm: bytes per round of the node collectives (rank 0's value is used), 4 KiB to 64 MiB; "
      "0: no node collectives (point-to-point algorithms instead)" },
    { "COHORT_ALGO", NULL, "force algorithms, e.g. allreduce:ring;broadcast:tree; 'shm' names "
      "the shm transport's node collectives" },
    { "COHORT_CHUNK_SIZE", "262144", "pipeline chunk size in bytes for ring and chain algorithms" },
    { "COHORT_SPIN", "200",
      "polls a waiting rank makes before it sleeps in poll() (0: sleep at once); when ranks "
      "outnumber cores every fruitless poll also yields the core" },
    { "COHORT_SPIN_US", "500",
      "and microseconds it keeps polling before it sleeps, when every local rank has a core "
      "(waking a sleeping vCPU costs 20-50 us here); ignored when ranks outnumber cores" },
    { "COHORT_TIMEOUT", "300",
      "seconds a blocking wait (bootstrap, connection, collective) may stall before it fails" },
    { "COHORT_STALL_WARN", "60",
      "seconds without progress in a collective before the stall is reported: each stuck rank "
      "tells the job's rendezvous, which logs one report naming the ranks that did not join "
      "(0: off)" },
    { "COHORT_DEBUG", "WARN", "log level: NONE, WARN, INFO, TRACE" },
    { "COHORT_DEBUG_SUBSYS", "ALL",
      "log subsystems to show (init,boot,plugin,net,coll,error), or ^list to hide some" },
    { "COHORT_RENDEZVOUS", NULL,
      "tcp://host:port where ranks meet (rank 0 hosts it unless cohortrun does), or file://dir" },
    { "COHORT_JOB_ID", NULL, "job identity; set by cohortrun, else derived from the launcher" },
    { "COHORT_SECRET", NULL,
      "per-job secret keying the HMAC on every connection; set by cohortrun, else derived from "
      "the job id (weaker: see docs/security.md)" },
    { "COHORT_RANK", NULL, "this process's rank (set by cohortrun)" },
    { "COHORT_SIZE", NULL, "number of ranks (set by cohortrun)" },
    { "COHORT_LOCAL_RANK", NULL, "rank among this node's ranks (set by cohortrun)" },
    { "COHORT_LOCAL_SIZE", NULL, "ranks on this node (set by cohortrun)" },
    { "COHORT_HOSTID", NULL, "overrides the node identity (hostname + boot id) used to group ranks" },
    { "COHORT_TOPO_FILE", NULL,
      "hwloc XML file read instead of discovering this machine (tests, odd machines)" },
    { "COHORT_TOPO_DUMP", NULL,
      "file that rank 0 writes at communicator creation: the machine, node groups, rings and "
      "the interface each rank chose" },
    { "COHORT_HIERARCHICAL", "auto",
      "hierarchical collectives (node shm + across nodes): auto (when every node has the same "
      "number of ranks, 2 or more, over 2 or more nodes), 1 (force), 0 (flat rings)" },
    { "COHORT_SOCKET_PROBE_MS", "1000",
      "tcp: milliseconds to wait for a peer's interface to answer the reachability probe at "
      "start-up (without COHORT_SOCKET_IFNAME every candidate interface is probed)" },
    { "COHORT_CONF", NULL, "settings file read after the environment (default ./cohort.conf, "
      "then /etc/cohort.conf)" },
};

#define NSETTINGS (sizeof settings / sizeof settings[0])

const cohort_setting_t *cohort_settings(size_t *count)
{
    *count = NSETTINGS;
    return settings;
}

static pthread_mutex_t file_lock = PTHREAD_MUTEX_INITIALIZER;
static int file_loaded;
static char file_path[1024];
static char *file_values[NSETTINGS];

static int setting_index(const char *name)
{
    for (size_t i = 0; i < NSETTINGS; i++)
        if (!strcmp(settings[i].name, name)) return (int)i;
    return -1;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = '\0';
    return s;
}

/* Warnings about the file, gathered while file_lock is held and logged once it is released:
 * logging reads settings itself (COHORT_DEBUG may come from this very file), so a warning
 * logged under the lock deadlocked the first reader of a file with a bad line. */
typedef struct warn_buf {
    char *text;   /* messages, each ending in '\n' */
    size_t len;
} warn_buf_t;

static void warn_add(warn_buf_t *w, const char *fmt, ...) COHORT_PRINTF(2, 3);
static void warn_add(warn_buf_t *w, const char *fmt, ...)
{
    char msg[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t n = strlen(msg);
    char *t = realloc(w->text, w->len + n + 2);
    if (!t) return;
    memcpy(t + w->len, msg, n);
    t[w->len + n] = '\n';
    w->len += n + 1;
    t[w->len] = '\0';
    w->text = t;
}

static void warn_flush(warn_buf_t *w)
{
    for (char *p = w->text, *nl; p && *p; p = nl + 1) {
        nl = strchr(p, '\n');
        *nl = '\0';
        cohort_log(COHORT_LOG_WARN, "init", "%s", p);
    }
    free(w->text);
}

/* One line of f without its newline: its first COHORT_CONF_LINE_MAX characters in line
 * (NUL-terminated), its whole length in *len, whether it holds a NUL byte in *nul. 0 at the end
 * of the file. */
static int read_line(FILE *f, char *line, size_t *len, int *nul)
{
    int c;
    *len = 0;
    *nul = 0;
    while ((c = getc(f)) != EOF && c != '\n') {
        if (c == '\0') *nul = 1;
        if (*len < COHORT_CONF_LINE_MAX) line[*len] = (char)c;
        (*len)++;
    }
    line[*len < COHORT_CONF_LINE_MAX ? *len : COHORT_CONF_LINE_MAX] = '\0';
    return c != EOF || *len > 0;
}

static void load_file_locked(warn_buf_t *w)
{
    file_loaded = 1;
    const char *path = getenv("COHORT_CONF");
    FILE *f = NULL;
    if (path && *path) {
        f = fopen(path, "r");
        if (!f) warn_add(w, "COHORT_CONF=%s cannot be opened; ignoring it", path);
    } else {
        static const char *defaults[] = { "cohort.conf", "/etc/cohort.conf" };
        for (size_t i = 0; i < 2 && !f; i++)
            if ((f = fopen(defaults[i], "r"))) path = defaults[i];
    }
    if (!f) return;
    snprintf(file_path, sizeof file_path, "%s", path);
    char line[COHORT_CONF_LINE_MAX + 1];
    size_t len;
    int lineno = 0, nul;
    while (read_line(f, line, &len, &nul)) {
        lineno++;
        if (nul) {
            warn_add(w, "%s:%d: holds a NUL byte (not a text file?); ignored", file_path, lineno);
            continue;
        }
        if (len > COHORT_CONF_LINE_MAX) {
            warn_add(w, "%s:%d: longer than %d characters; ignored", file_path, lineno,
                     COHORT_CONF_LINE_MAX);
            continue;
        }
        char *hash = strchr(line, '#');
        if (hash) *hash = '\0';
        char *s = trim(line);
        if (!*s) continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            warn_add(w, "%s:%d: '%s' is not NAME = value; ignored", file_path, lineno, s);
            continue;
        }
        *eq = '\0';
        char *name = trim(s), *value = trim(eq + 1);
        int idx = setting_index(name);
        if (idx < 0) {
            warn_add(w, "%s:%d: unknown setting '%s' (cohort-info lists them); ignored",
                     file_path, lineno, name);
            continue;
        }
        free(file_values[idx]);
        file_values[idx] = strdup(value);
    }
    fclose(f);
}

static const char *file_value(int idx)
{
    warn_buf_t w = { NULL, 0 };
    pthread_mutex_lock(&file_lock);
    if (!file_loaded) load_file_locked(&w);
    const char *v = file_values[idx];
    pthread_mutex_unlock(&file_lock);
    warn_flush(&w);
    return v;
}

void cohort_config_reset(void)
{
    pthread_mutex_lock(&file_lock);
    for (size_t i = 0; i < NSETTINGS; i++) {
        free(file_values[i]);
        file_values[i] = NULL;
    }
    file_loaded = 0;
    file_path[0] = '\0';
    pthread_mutex_unlock(&file_lock);
}

const char *cohort_config_get(const char *name)
{
    const char *env = getenv(name);
    if (env) return env;
    int idx = setting_index(name);
    if (idx < 0) return NULL;
    if (strcmp(name, "COHORT_CONF") != 0) {
        const char *fv = file_value(idx);
        if (fv) return fv;
    }
    return settings[idx].def;
}

const char *cohort_config_source(const char *name)
{
    if (getenv(name)) return "env";
    int idx = setting_index(name);
    if (idx < 0) return "unset";
    if (strcmp(name, "COHORT_CONF") != 0 && file_value(idx)) {
        static _Thread_local char buf[1100];
        snprintf(buf, sizeof buf, "file %s", file_path);
        return buf;
    }
    return settings[idx].def ? "default" : "unset";
}

cohort_status_t cohort_config_long(const char *name, long min, long max, long *value)
{
    const char *v = cohort_config_get(name);
    if (!v) return COHORT_SUCCESS;   /* caller's *value stays as its default */
    return cohort_parse_long(name, v, min, max, value);
}

cohort_status_t cohort_config_double(const char *name, double min, double max, double *value)
{
    const char *v = cohort_config_get(name);
    if (!v) return COHORT_SUCCESS;
    return cohort_parse_double(name, v, min, max, value);
}
