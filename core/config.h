/* The one settings table. Every COHORT_* variable the project reads is listed in config.c with
 * its default and a line of help; cohort-info prints the table. Values come from the
 * environment, then from a cohort.conf file (COHORT_CONF, else ./cohort.conf, else
 * /etc/cohort.conf; lines `NAME = value`, # comments), then the default. */
#ifndef COHORT_CORE_CONFIG_H
#define COHORT_CORE_CONFIG_H

#include <stddef.h>
#include "cohort/cohort.h"

/* Longest cohort.conf line read (characters before the newline); longer lines, and lines
 * holding a NUL byte, are ignored with a warning. */
#define COHORT_CONF_LINE_MAX 4096

typedef struct cohort_setting {
    const char *name;
    const char *def;      /* NULL: unset by default */
    const char *help;
} cohort_setting_t;

const cohort_setting_t *cohort_settings(size_t *count);
/* Value or NULL. The pointer stays valid for the life of the process. */
const char *cohort_config_get(const char *name);
/* Where the value came from: "env", "file <path>", "default", or "unset". */
const char *cohort_config_source(const char *name);
/* Integer/real settings: junk, overflow or out-of-range values give COHORT_ERR_INVALID_ARG with a
 * message naming the variable and the text. Unset (no env, file or default): *value unchanged. */
cohort_status_t cohort_config_long(const char *name, long min, long max, long *value);
cohort_status_t cohort_config_double(const char *name, double min, double max, double *value);
/* Drop cached file values (tests). */
void cohort_config_reset(void);

#endif
