/* SPDX-License-Identifier: BSD-3-Clause */
/* The settings table: every COHORT_* variable, its default and help. Environment first, then a
 * cohort.conf file, then the default. */
#include "core/config.h"
#include "core/log.h"
#include "core/parse.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The core's own settings. Ranges and grammars are the ones the readers enforce (core/comm.c,
 * core/log.c, ...): cohort_config_check runs them all at every communicator's creation, so that a
 * bad value fails there even when nothing would read it. A transport's settings are in its own
 * table (plugin ABI 1.5), added to these by cohort_config_add when the plugin is read. */
#define NUM(lo, hi) COHORT_SET_LONG, (lo), (hi), NULL, NULL, NULL
#define REAL(lo, hi) COHORT_SET_DOUBLE, (lo), (hi), NULL, NULL, NULL
#define TEXT(max) COHORT_SET_TEXT, 0, (max), NULL, NULL, NULL
#define WORDS(w) COHORT_SET_WORD, 0, 0, (w), NULL, NULL
#define SPECIAL COHORT_SET_SPECIAL, 0, 0, NULL, NULL, NULL
static const cohort_setting_t core_settings[] = {
    { "COHORT_TRANSPORTS", NULL,
      "transports to use, in preference order (shm,tcp), or ^name,... to exclude; default: all",
      SPECIAL },
    { "COHORT_PLUGIN_PATH", NULL,
      "':'-separated directories searched for libcohort-<name>.so before the install directory",
      SPECIAL },
    { "COHORT_SOCKET_IFNAME", NULL,
      "interfaces for sockets: prefixes (eth,ib), =exact, ^ to exclude, or CIDR (10.0.0.0/8)",
      SPECIAL },
    { "COHORT_ALGO", NULL, "force algorithms, e.g. allreduce:ring;broadcast:tree; 'shm' names "
      "the shm transport's node collectives", SPECIAL },
    { "COHORT_CHUNK_SIZE", "262144", "pipeline chunk size in bytes for ring and chain algorithms "
      "(64 to 1 GiB)", NUM(64, 1073741824) },
    { "COHORT_SPIN", "200",
      "polls a waiting rank makes before it sleeps in poll() (0: sleep at once); when ranks "
      "outnumber cores every fruitless poll also yields the core", NUM(0, 100000000) },
    { "COHORT_SPIN_US", "500",
      "and microseconds it keeps polling before it sleeps, when every local rank has a core "
      "(waking a sleeping vCPU costs 20-50 us here); also how long the non-blocking engine's "
      "threads poll for each other before they sleep when each of them has a core; ignored "
      "when ranks outnumber cores",
      NUM(0, 10000000) },
    { "COHORT_TIMEOUT", "300",
      "seconds a blocking wait (bootstrap, connection, collective) may stall before it fails",
      REAL(0.1, 1e7) },
    { "COHORT_STALL_WARN", "60",
      "seconds without progress in a collective before the stall is reported: each stuck rank "
      "tells the job's rendezvous, which logs one report naming the ranks that did not join "
      "(0: off)", REAL(0, 1e7) },
    { "COHORT_PROGRESS", "thread",
      "who moves the non-blocking calls: thread (a progress thread per communicator, asleep when "
      "nothing is outstanding) or caller (they run inside cohort_test and cohort_wait)",
      WORDS("thread|caller") },
    { "COHORT_FUSION_THRESHOLD", "67108864",
      "bytes up to which allreduces of one dtype and op are fused into one (in a group, and "
      "non-blocking ones queued back to back); 0: no fusion", NUM(0, 1l << 40) },
    { "COHORT_CYCLE_TIME", "0",
      "milliseconds a queued non-blocking allreduce waits for others to fuse with before it "
      "starts (0: it starts as soon as the operations before it are done, fusing whatever queued "
      "meanwhile)", REAL(0, 10000) },
    { "COHORT_COMPRESS", "none",
      "float32 sum/avg allreduces between ranks on different nodes travel as fp16 or bf16 "
      "(accumulated in float32 at every step): none, fp16 or bf16", WORDS("none|fp16|bf16") },
    { "COHORT_TIMELINE", NULL,
      "file for a Chrome trace (chrome://tracing, Perfetto) of every operation, per process; %r "
      "becomes the rank (e.g. /tmp/timeline.%r.json)", TEXT(0) },
    { "COHORT_DEBUG", "WARN", "log level: NONE, WARN, INFO, TRACE",
      WORDS("NONE|OFF|WARN|INFO|TRACE") },
    { "COHORT_DEBUG_FILE", NULL,
      "write the log to this file (appending) instead of stderr; %h becomes the host name, %p "
      "the process id, %r the rank (lines before the rank is known go to stderr), %% a %; "
      "e.g. /tmp/cohort.%h.%p.log", TEXT(0) },
    { "COHORT_DEBUG_SUBSYS", "ALL",
      "log subsystems to show (" COHORT_LOG_SUBSYSTEMS ", or a plugin's name), or ^list to hide "
      "some", SPECIAL },
    { "COHORT_RENDEZVOUS", NULL,
      "tcp://host:port where ranks meet (rank 0 hosts it unless cohortrun does), or file://dir; "
      "unset under mpirun or srun (PMIx, or Slurm's step: docs/launching.md)",
      SPECIAL },
    { "COHORT_RENDEZVOUS_SERVER", "rank0", "who serves COHORT_RENDEZVOUS: rank0 (rank 0 hosts "
      "it) or launcher (set by cohortrun, which serves it itself)", WORDS("rank0|launcher") },
    { "COHORT_JOB_ID", NULL, "job identity; set by cohortrun, else derived from the launcher",
      TEXT(63) },
    { "COHORT_SECRET", NULL,
      "per-job secret keying the HMAC on every connection; set by cohortrun, else derived from "
      "the job id (weaker: see docs/reliability.md, Security model)", TEXT(0) },
    { "COHORT_RANK", NULL, "this process's rank (set by cohortrun)", NUM(0, 1 << 24) },
    { "COHORT_SIZE", NULL, "number of ranks (set by cohortrun)", NUM(1, 1 << 24) },
    { "COHORT_LOCAL_RANK", NULL, "rank among this node's ranks (set by cohortrun)",
      NUM(0, 1 << 24) },
    { "COHORT_LOCAL_SIZE", NULL, "ranks on this node (set by cohortrun)", NUM(1, 1 << 24) },
    { "COHORT_HOSTID", NULL, "overrides the node identity (hostname + boot id) used to group "
      "ranks (at most 127 characters)", TEXT(127) },
    { "COHORT_TOPO_FILE", NULL,
      "hwloc XML file read instead of discovering this machine (tests, odd machines)", SPECIAL },
    { "COHORT_TOPO_DUMP", NULL,
      "file that rank 0 writes at communicator creation: the machine, node groups, rings and "
      "the interface each rank chose", TEXT(0) },
    { "COHORT_HIERARCHICAL", "auto",
      "hierarchical collectives (node shm + across nodes): auto (when every node has the same "
      "number of ranks, 2 or more, over 2 or more nodes), 1 (force), 0 (flat rings)",
      WORDS("auto|1|0") },
    { "COHORT_HVD_CHECK", "0",
      "Horovod-style layer (cohort.torch as hvd): 1 compares every allreduce and broadcast "
      "across ranks before it runs (a mismatch raises naming both ranks); 0 off", NUM(0, 1) },
    { "COHORT_HVD_JOIN_POLL", "0.05",
      "Horovod-style layer: seconds a wait lasts before the rank reads the store to learn "
      "whether a rank has joined (hvd.join), then at doubling intervals up to 1 s; 0.001 to 60",
      REAL(0.001, 60) },
    { "COHORT_CONF", NULL, "settings file read after the environment (default ./cohort.conf, "
      "then /etc/cohort.conf): a regular file of at most 1 MiB; a line that is not NAME = value "
      "or names no setting is an error", TEXT(0) },
};

#define NCORE (sizeof core_settings / sizeof core_settings[0])
/* Plugins' settings, appended by cohort_config_add and never removed or moved (a plugin that has
 * settings stays mapped for the life of the process, so its strings do too): a reader takes the
 * count (acquire) and reads entries below it without a lock. */
#define MAX_PLUGIN_SETTINGS 128
static cohort_setting_t plugin_settings[MAX_PLUGIN_SETTINGS];
static char plugin_owner[MAX_PLUGIN_SETTINGS][32];
static _Atomic size_t nplugin_settings;
static pthread_mutex_t add_lock = PTHREAD_MUTEX_INITIALIZER;

size_t cohort_settings_count(void)
{
    return NCORE + atomic_load_explicit(&nplugin_settings, memory_order_acquire);
}

const cohort_setting_t *cohort_setting_at(size_t i)
{
    if (i < NCORE) return &core_settings[i];
    i -= NCORE;
    return i < atomic_load_explicit(&nplugin_settings, memory_order_acquire)
           ? &plugin_settings[i] : NULL;
}

const cohort_setting_t *cohort_setting_find(const char *name)
{
    size_t n = cohort_settings_count();
    for (size_t i = 0; name && i < n; i++) {
        const cohort_setting_t *s = cohort_setting_at(i);
        if (!strcmp(s->name, name)) return s;
    }
    return NULL;
}

int cohort_config_has_owner(const char *owner)
{
    size_t n = atomic_load_explicit(&nplugin_settings, memory_order_acquire);
    for (size_t i = 0; i < n; i++)
        if (!strcmp(plugin_owner[i], owner)) return 1;
    return 0;
}

/* NAME: COHORT_ and then capitals, digits and underscores, at most 63 characters. */
static int good_name(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n <= 7 || n > 63 || strncmp(name, "COHORT_", 7)) return 0;
    for (size_t k = 7; k < n; k++)
        if (!isupper((unsigned char)name[k]) && !isdigit((unsigned char)name[k]) &&
            name[k] != '_')
            return 0;
    return 1;
}

static cohort_status_t bad_entry(const char *owner, const char *name, const char *why)
{
    return cohort_error(COHORT_ERR_PLUGIN, "the settings table of plugin %s is refused: setting "
                        "'%.70s' %s; fix the plugin's table", owner, name ? name : "(null)", why);
}

cohort_status_t cohort_config_add(const char *owner, const cohort_setting_t *list, size_t n)
{
    pthread_mutex_lock(&add_lock);
    cohort_status_t st = COHORT_SUCCESS;
    size_t have = atomic_load_explicit(&nplugin_settings, memory_order_relaxed);
    if (cohort_config_has_owner(owner)) goto out;   /* read before: the same table */
    if (have + n > MAX_PLUGIN_SETTINGS) {
        st = cohort_error(COHORT_ERR_PLUGIN, "the settings table of plugin %s is refused: the "
                          "plugins' tables hold %zu settings and cohort keeps at most %d; load "
                          "fewer plugins", owner, have + n, MAX_PLUGIN_SETTINGS);
        goto out;
    }
    for (size_t i = 0; i < n && !st; i++) {
        const cohort_setting_t *e = &list[i];
        const cohort_setting_t *dup = good_name(e->name) ? cohort_setting_find(e->name) : NULL;
        for (size_t j = 0; j < i && !dup; j++)
            if (!strcmp(list[j].name, e->name)) dup = &list[j];
        if (!good_name(e->name))
            st = bad_entry(owner, e->name, "is not COHORT_ followed by capitals, digits and "
                           "underscores (at most 63 characters)");
        else if (dup) {
            char why[160];
            if (dup >= list && dup < list + n)
                snprintf(why, sizeof why, "appears twice in it");
            else
                snprintf(why, sizeof why, "is already a setting of %s", dup->owner
                         ? dup->owner : "cohort's core");
            st = bad_entry(owner, e->name, why);
        } else if (!e->help || !*e->help)
            st = bad_entry(owner, e->name, "has no help text");
        else if ((e->kind == COHORT_SET_LONG || e->kind == COHORT_SET_DOUBLE) &&
                 !(e->min <= e->max))
            st = bad_entry(owner, e->name, "has a range whose minimum exceeds its maximum");
        else if (e->kind == COHORT_SET_WORD && (!e->words || !*e->words))
            st = bad_entry(owner, e->name, "is a word setting without words");
        else if (e->kind != COHORT_SET_TEXT && e->kind != COHORT_SET_LONG &&
                 e->kind != COHORT_SET_DOUBLE && e->kind != COHORT_SET_WORD)
            st = bad_entry(owner, e->name, "has a kind this cohort does not know");
    }
    for (size_t i = 0; i < n && !st; i++) {
        plugin_settings[have + i] = list[i];
        plugin_settings[have + i].owner = plugin_owner[have + i];
        snprintf(plugin_owner[have + i], sizeof plugin_owner[0], "%s", owner);
    }
    if (!st) atomic_store_explicit(&nplugin_settings, have + n, memory_order_release);
out:
    pthread_mutex_unlock(&add_lock);
    return st;
}

/* The settings file, read once (cohort_config_reset reads it again). Its problems are kept, not
 * logged: the logger reads its own settings through here, under file_lock, and cohort_error
 * logs; they are raised by cohort_config_file_status, i.e. at every communicator's creation. */
static pthread_mutex_t file_lock = PTHREAD_MUTEX_INITIALIZER;
static int file_loaded;
static char file_path[1024];
/* NAME = value lines by name: a plugin's setting may be read before the plugin's table is (a
 * name no table knows is refused by cohort_config_file_status, once the tables are in). */
#define FILE_MAX_ENTRIES 256
static struct {
    char *name, *value;
    int line;
} file_entries[FILE_MAX_ENTRIES];
static int nfile_entries;
static char file_problem[1200];     /* "" or the first problem, a whole message */
static int file_problem_line;       /* its line (0: the file as a whole) */

#define CONF_MAX_BYTES (1 << 20)   /* a settings file holds a few dozen lines */
#define CONF_LINE_MAX 1022         /* characters of one line */

static int file_entry_locked(const char *name)
{
    for (int i = 0; i < nfile_entries; i++)
        if (!strcmp(file_entries[i].name, name)) return i;
    return -1;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = '\0';
    return s;
}

/* Printable copy of a line for a message (at most 96 characters). */
static const char *shown(const char *s, char out[104])
{
    size_t k = 0;
    for (; s[k] && k < 96; k++) out[k] = isprint((unsigned char)s[k]) ? s[k] : '?';
    if (s[k]) {
        memcpy(out + k, "...", 3);
        k += 3;
    }
    out[k] = '\0';
    return out;
}

static void file_problem_set(int line, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void file_problem_set(int line, const char *fmt, ...)
{
    if (file_problem[0]) return;   /* the first one is reported */
    file_problem_line = line;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(file_problem, sizeof file_problem, fmt, ap);
    va_end(ap);
}

/* One line of the settings file (NUL-terminated, without its newline). */
static void file_line_locked(char *line, int lineno)
{
    if (strlen(line) > CONF_LINE_MAX) {
        file_problem_set(lineno, "%s:%d: the line is longer than %d characters", file_path,
                         lineno, CONF_LINE_MAX);
        return;
    }
    char *hash = strchr(line, '#');
    if (hash) *hash = '\0';
    char *s = trim(line), q[104];
    if (!*s) return;
    char *eq = strchr(s, '=');
    if (!eq) {
        file_problem_set(lineno, "%s:%d: '%s' is not NAME = value", file_path, lineno,
                         shown(s, q));
        return;
    }
    *eq = '\0';
    char *name = trim(s), *value = trim(eq + 1);
    if (!strcmp(name, "COHORT_CONF")) {
        file_problem_set(lineno, "%s:%d: '%s' is not a setting a settings file can hold (set "
                         "COHORT_CONF in the environment)", file_path, lineno, name);
        return;
    }
    int i = file_entry_locked(name);
    if (i >= 0) {
        file_problem_set(lineno, "%s:%d: %s is set a second time (first on line %d)", file_path,
                         lineno, shown(name, q), file_entries[i].line);
        return;
    }
    if (nfile_entries == FILE_MAX_ENTRIES) {
        file_problem_set(lineno, "%s:%d: more than %d settings in one file", file_path, lineno,
                         FILE_MAX_ENTRIES);
        return;
    }
    char *n = strdup(name), *v = strdup(value);
    if (!n || !v) {
        free(n);
        free(v);
        file_problem_set(lineno, "%s:%d: out of memory for the value of %s", file_path, lineno,
                         shown(name, q));
        return;
    }
    file_entries[nfile_entries].name = n;
    file_entries[nfile_entries].value = v;
    file_entries[nfile_entries++].line = lineno;
}

static void load_file_locked(void)
{
    file_loaded = 1;
    const char *path = getenv("COHORT_CONF");
    char *text = NULL, why[160], q[104];
    size_t len = 0;
    if (path && !*path) {
        file_problem_set(0, "COHORT_CONF='' is set but empty; name a settings file, or unset it to "
                         "read ./cohort.conf or /etc/cohort.conf when they exist");
        return;
    }
    if (path) {
        if (cohort_file_read(path, CONF_MAX_BYTES, &text, &len, why, sizeof why)) {
            file_problem_set(0, "COHORT_CONF='%s' %s; point it at a readable settings file (a "
                             "regular file of at most %d bytes) or unset it", shown(path, q), why,
                             CONF_MAX_BYTES);
            return;
        }
    } else {
        static const char *defaults[] = { "cohort.conf", "/etc/cohort.conf" };
        for (size_t i = 0; i < 2 && !text; i++) {
            int e = cohort_file_read(defaults[i], CONF_MAX_BYTES, &text, &len, why, sizeof why);
            if (e == 0) {
                path = defaults[i];
            } else if (e != ENOENT) {   /* there, but unusable: a mistake worth hearing of */
                file_problem_set(0, "settings file %s %s; fix it, remove it, or set COHORT_CONF to "
                                 "another file", defaults[i], why);
                return;
            }
        }
        if (!text) return;
    }
    snprintf(file_path, sizeof file_path, "%s", path);
    int lineno = 1;
    for (char *line = text, *nl; line < text + len; line = nl + 1, lineno++) {
        nl = strchr(line, '\n');
        if (!nl) nl = text + len;
        *nl = '\0';
        file_line_locked(line, lineno);
    }
    free(text);
}

static void ensure_loaded(void)
{
    pthread_mutex_lock(&file_lock);
    if (!file_loaded) load_file_locked();
    pthread_mutex_unlock(&file_lock);
}

/* The file's value of a known setting (NULL: the file does not set it); *line its line. */
static const char *file_value(const char *name, int *line)
{
    const char *v = NULL;
    if (!cohort_setting_find(name) || !strcmp(name, "COHORT_CONF")) return NULL;
    pthread_mutex_lock(&file_lock);
    if (!file_loaded) load_file_locked();
    int i = file_entry_locked(name);
    if (i >= 0) {
        v = file_entries[i].value;
        if (line) *line = file_entries[i].line;
    }
    pthread_mutex_unlock(&file_lock);
    return v;
}

int cohort_config_file_names_known(void)
{
    int known = 1;
    ensure_loaded();
    pthread_mutex_lock(&file_lock);
    for (int i = 0; i < nfile_entries && known; i++)
        known = cohort_setting_find(file_entries[i].name) != NULL;
    pthread_mutex_unlock(&file_lock);
    return known;
}

cohort_status_t cohort_config_file_status(void)
{
    char msg[sizeof file_problem], q[104];
    ensure_loaded();
    pthread_mutex_lock(&file_lock);
    memcpy(msg, file_problem, sizeof msg);
    /* the first problem by line: the parse's, or a name that no table knows */
    int first = msg[0] ? file_problem_line : INT_MAX;
    for (int i = 0; i < nfile_entries; i++) {
        if (file_entries[i].line >= first || cohort_setting_find(file_entries[i].name)) continue;
        first = file_entries[i].line;
        snprintf(msg, sizeof msg, "%s:%d: '%s' is not a setting (cohort-info --settings lists "
                 "them, the transports' own included)", file_path, first,
                 shown(file_entries[i].name, q));
    }
    pthread_mutex_unlock(&file_lock);
    return msg[0] ? cohort_error(COHORT_ERR_INVALID_ARG, "%s", msg) : COHORT_SUCCESS;
}

const char *cohort_config_file_value(const char *name, int *line, const char **path)
{
    const char *v = file_value(name, line);
    if (v && path) *path = file_path;
    return v;
}

void cohort_config_reset(void)
{
    pthread_mutex_lock(&file_lock);
    for (int i = 0; i < nfile_entries; i++) {
        free(file_entries[i].name);
        free(file_entries[i].value);
    }
    nfile_entries = 0;
    file_loaded = 0;
    file_path[0] = '\0';
    file_problem[0] = '\0';
    file_problem_line = 0;
    pthread_mutex_unlock(&file_lock);
}

const char *cohort_config_value(const char *name)
{
    const char *env = getenv(name);
    if (env) return env;
    const cohort_setting_t *s = cohort_setting_find(name);
    if (!s) return NULL;
    const char *fv = file_value(name, NULL);
    return fv ? fv : s->def;
}

/* ---- words: one spelling for every reader --------------------------------------------------- */

/* Canonical spellings handed out by cohort_config_get: allocated once per distinct text and
 * kept for the life of the process (the pointers it returns must stay valid). */
typedef struct interned {
    struct interned *next;
    char text[];
} interned_t;
static pthread_mutex_t intern_lock = PTHREAD_MUTEX_INITIALIZER;
static interned_t *interned;

static const char *intern(const char *text, size_t n)
{
    pthread_mutex_lock(&intern_lock);
    interned_t *i = interned;
    while (i && (strlen(i->text) != n || memcmp(i->text, text, n))) i = i->next;
    if (!i && (i = malloc(sizeof *i + n + 1))) {
        memcpy(i->text, text, n);
        i->text[n] = '\0';
        i->next = interned;
        interned = i;
    }
    pthread_mutex_unlock(&intern_lock);
    return i ? i->text : NULL;
}

/* Lists of words cohort defines (transport, collective, algorithm and subsystem names): their
 * readers see them in lower case. */
static int is_word_list(const char *name)
{
    return !strcmp(name, "COHORT_TRANSPORTS") || !strcmp(name, "COHORT_ALGO") ||
           !strcmp(name, "COHORT_DEBUG_SUBSYS");
}

size_t cohort_setting_word(const cohort_setting_t *s, const char *v, const char **word)
{
    size_t vn = strlen(v);
    while (vn && isspace((unsigned char)v[vn - 1])) vn--;
    while (vn && isspace((unsigned char)*v)) {
        v++;
        vn--;
    }
    for (const char *w = s->words ? s->words : ""; *w;) {
        size_t n = strcspn(w, "|");
        if (n == vn && !strncasecmp(v, w, n)) {
            *word = w;
            return n;
        }
        w += n + (w[n] == '|');
    }
    return 0;
}

void cohort_setting_words(const cohort_setting_t *s, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (const char *w = s->words ? s->words : ""; *w && used + 3 < len; w++) {
        if (*w == '|') buf[used++] = ',';
        buf[used++] = *w == '|' ? ' ' : *w;
    }
    buf[used < len ? used : len - 1] = '\0';
}

/* The spelling readers compare against: a word of a WORD setting as the table spells it, a
 * word list in lower case; anything else (and any text that is no valid word) as it is. */
static const char *canonical(const cohort_setting_t *s, const char *v)
{
    if (s->kind == COHORT_SET_WORD) {
        const char *w;
        size_t n = cohort_setting_word(s, v, &w);
        if (n == 0 || (strlen(v) == n && !memcmp(v, w, n))) return v;
        const char *c = intern(w, n);
        return c ? c : v;
    }
    if (!is_word_list(s->name)) return v;
    size_t n = strlen(v), k = 0;
    while (k < n && !isupper((unsigned char)v[k]) && !isspace((unsigned char)v[k])) k++;
    if (k == n) return v;
    /* lower case, without the blanks around the value and its entries */
    char *low = malloc(n + 1);
    if (!low) return v;
    size_t m = 0;
    for (k = 0; k < n; k++) {
        unsigned char ch = (unsigned char)v[k];
        if (isspace(ch)) {
            size_t e = k;
            while (e < n && isspace((unsigned char)v[e])) e++;
            int edge = m == 0 || e == n || strchr(",;:^", low[m - 1]) || strchr(",;:^", v[e]);
            if (!edge) {   /* inside a word: kept, and the check refuses it */
                memcpy(low + m, v + k, e - k);
                m += e - k;
            }
            k = e - 1;
            continue;
        }
        low[m++] = (char)tolower(ch);
    }
    const char *c = intern(low, m);
    free(low);
    return c ? c : v;
}

const char *cohort_config_get(const char *name)
{
    const char *v = cohort_config_value(name);
    const cohort_setting_t *s = cohort_setting_find(name);
    return v && s ? canonical(s, v) : v;
}

const char *cohort_config_source(const char *name)
{
    if (getenv(name)) return "env";
    const cohort_setting_t *s = cohort_setting_find(name);
    if (!s) return "unset";
    if (file_value(name, NULL)) {
        static _Thread_local char buf[1100];
        snprintf(buf, sizeof buf, "file %s", file_path);
        return buf;
    }
    return s->def ? "default" : "unset";
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

cohort_status_t cohort_config_table_long(const char *name, long *value)
{
    const cohort_setting_t *s = cohort_setting_find(name);
    if (!s || s->kind != COHORT_SET_LONG)
        return cohort_error(COHORT_ERR_INTERNAL, "%s is not a numeric setting of the table; "
                            "this is a bug in cohort, please report it", name);
    return cohort_config_long(name, (long)s->min, (long)s->max, value);
}

cohort_status_t cohort_config_table_double(const char *name, double *value)
{
    const cohort_setting_t *s = cohort_setting_find(name);
    if (!s || s->kind != COHORT_SET_DOUBLE)
        return cohort_error(COHORT_ERR_INTERNAL, "%s is not a real-valued setting of the table; "
                            "this is a bug in cohort, please report it", name);
    return cohort_config_double(name, s->min, s->max, value);
}
