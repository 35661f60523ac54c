/* SPDX-License-Identifier: BSD-3-Clause */
/* The one settings table. Every COHORT_* variable the project reads is listed with its default,
 * a line of help and what a valid value is: the core's in config.c, each transport's in its own
 * plugin (plugin ABI 1.5), added here when the plugin is read; cohort-info prints them all. Values
 * come from the environment, then from a cohort.conf file (COHORT_CONF, else ./cohort.conf, else
 * /etc/cohort.conf; lines `NAME = value`, # comments), then the default.
 *
 * One grammar for every value (docs/reliability.md, "Settings: one grammar"): numbers are
 * decimal (no hex, no inf or nan, integers and reals alike); words cohort defines (levels,
 * auto, transport, collective, algorithm and subsystem names) are case-insensitive, names the
 * system defines (interfaces, devices, paths, hosts) are exact; lists refuse empty entries; a
 * variable set to the empty string is refused (unset it for the default). */
#ifndef COHORT_CORE_CONFIG_H
#define COHORT_CORE_CONFIG_H

#include <stddef.h>
#include "cohort/cohort.h"

/* What a valid value of a setting is (checked by cohort_config_check, core/config_check.c). */
typedef enum {
    COHORT_SET_TEXT,      /* any text; max > 0: at most max characters */
    COHORT_SET_LONG,      /* a whole number in [min, max] */
    COHORT_SET_DOUBLE,    /* a number in [min, max] */
    COHORT_SET_WORD,      /* one of `words` ("a|b|c"), any case, spaces around it ignored */
    COHORT_SET_SPECIAL    /* a grammar of its own, checked by its own parser */
} cohort_setting_kind_t;

typedef struct cohort_setting {
    const char *name;
    const char *def;      /* NULL: unset by default */
    const char *help;
    cohort_setting_kind_t kind;
    double min, max;      /* COHORT_SET_LONG/DOUBLE: the range; COHORT_SET_TEXT: max length */
    const char *words;    /* COHORT_SET_WORD */
    const char *owner;    /* NULL: the core's; else the plugin whose table holds it */
    /* a plugin's further check (cohort_plugin_setting_v1_t.check), NULL: none */
    int (*check)(const char *value, char *why, size_t len);
} cohort_setting_t;

/* The table: the core's settings, then the plugins' read so far. Entries never move; the count
 * grows when a plugin's table is added. */
size_t cohort_settings_count(void);
const cohort_setting_t *cohort_setting_at(size_t i);
/* The table's entry for name, NULL if it has none. */
const cohort_setting_t *cohort_setting_find(const char *name);
/* Adds a plugin's n settings (already in the core's form, owner set here): COHORT_SUCCESS, also
 * when owner's table was added before (it is not added twice); COHORT_ERR_PLUGIN with a message
 * naming owner and the entry when a name is malformed or another table's (naming that owner),
 * an entry lacks its help or words, or its range is empty. The strings must live as long as the
 * process. */
cohort_status_t cohort_config_add(const char *owner, const cohort_setting_t *list, size_t n);
/* 1 when owner's table has been added. */
int cohort_config_has_owner(const char *owner);
/* 1 when every name the settings file sets is in the table (0: a plugin's table may be missing,
 * or the name is no setting at all). */
int cohort_config_file_names_known(void);
/* The log subsystems COHORT_DEBUG_SUBSYS may name, besides the names of the transport plugins
 * found (a plugin logs under its own name). */
#define COHORT_LOG_SUBSYSTEMS "init,boot,plugin,net,shm,topo,jobctl,stall,mem,error"

/* Value or NULL, for readers: a word of a COHORT_SET_WORD setting as the table spells it ("Info"
 * reads "INFO"), the word lists COHORT_TRANSPORTS, COHORT_ALGO and COHORT_DEBUG_SUBSYS in lower
 * case, anything else as set. The pointer stays valid for the life of the process. */
const char *cohort_config_get(const char *name);
/* The value as the user set it (environment, settings file, default), for messages and checks. */
const char *cohort_config_value(const char *name);
/* The word of s's `words` that v is (any case, spaces around ignored): its length, *word
 * pointing at it inside s->words; 0 when v is none of them. */
size_t cohort_setting_word(const cohort_setting_t *s, const char *v, const char **word);
/* s's words as "a, b, c" for a message. */
void cohort_setting_words(const cohort_setting_t *s, char *buf, size_t len);
/* Where the value came from: "env", "file <path>", "default", or "unset". */
const char *cohort_config_source(const char *name);
/* The settings file's value of name whether or not the environment overrides it (NULL: the file
 * does not set it), its line and the file's path. */
const char *cohort_config_file_value(const char *name, int *line, const char **path);
/* The settings file's own problems: COHORT_CONF naming a file that cannot be read, a line that
 * is not NAME = value, a name that is not in the table (read the plugins' tables first:
 * cohort_config_check does). COHORT_ERR_INVALID_ARG with a message naming the file, the line
 * and its text (the first problem); COHORT_SUCCESS when none. */
cohort_status_t cohort_config_file_status(void);
/* Integer/real settings: junk, overflow or out-of-range values give COHORT_ERR_INVALID_ARG with a
 * message naming the variable and the text. Unset (no env, file or default): *value unchanged. */
cohort_status_t cohort_config_long(const char *name, long min, long max, long *value);
cohort_status_t cohort_config_double(const char *name, double min, double max, double *value);
/* The same, in the range the table gives name. */
cohort_status_t cohort_config_table_long(const char *name, long *value);
cohort_status_t cohort_config_table_double(const char *name, double *value);
/* Every setting against the table (and the settings file's own problems): the first bad one is
 * COHORT_ERR_INVALID_ARG with a message naming the variable, its text and, when the value came
 * from the settings file, the file and line. Run at every communicator's creation
 * (core/config_check.c: it consults the interfaces, the plugin search path and the topology). */
cohort_status_t cohort_config_check(void);
/* Drop cached file values (tests). */
void cohort_config_reset(void);

#endif
