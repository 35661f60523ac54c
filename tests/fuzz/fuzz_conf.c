/* SPDX-License-Identifier: BSD-3-Clause */
/* Fuzz target: the cohort.conf reader (core/config.c). The input, raw, is the file: it is
 * written to a memfd that COHORT_CONF names, the cached values and the log are reset, and every
 * setting is read back through cohort_config_get / cohort_config_source.
 *
 * Oracle: a reference reading of the grammar config.h documents, written here independently:
 * lines split at '\n'; a line holding a NUL byte or longer than COHORT_CONF_LINE_MAX is
 * a problem; '#' starts a comment; `NAME = value` with blanks trimmed around both; unknown
 * names, repeated names and lines without '=' are problems. When cohort_config_check finds no
 * problem, Every setting must read
 * back as the reference says (the file's value, else the default), and the numeric readers must
 * agree with cohort_parse_long on it. The log is reset before each input so that the first
 * warning also initialises it, inside the file's reading (which once deadlocked). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1   /* memfd_create, accept4, getrandom */
#endif
#include "fuzz.h"

#include <ctype.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/config.h"
#include "core/log.h"
#include "core/parse.h"

/* The reader's longest line (core/config.c: its buffer less the newline and the NUL). */
#define COHORT_CONF_LINE_MAX 1022

static int memfd = -1;
static char memfd_path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    size_t n = cohort_settings_count();
    for (size_t i = 0; i < n; i++) unsetenv(cohort_setting_at(i)->name);   /* from the file */
    fuzz_quiet();                                            /* but COHORT_DEBUG=NONE */
    memfd = memfd_create("fuzz-cohort.conf", MFD_CLOEXEC);
    if (memfd < 0) {
        perror("fuzz_conf: memfd_create");
        abort();
    }
    snprintf(memfd_path, sizeof memfd_path, "/proc/self/fd/%d", memfd);
    setenv("COHORT_CONF", memfd_path, 1);
    return 0;
}

static int blank(char c) { return isspace((unsigned char)c) != 0; }

/* a and b hold the same words: equal but for case and blanks (config.h: readers get words in
 * lower case, or as the table spells them, without the blanks around a list's entries). */
static int same_words(const char *a, const char *b)
{
    for (;;) {
        while (blank(*a)) a++;
        while (blank(*b)) b++;
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b)) return 0;
        if (!*a) return 1;
        a++;
        b++;
    }
}

/* The reference reading: ref[i] points into `copy` (the value of setting i) or is NULL. */
static void reference(const uint8_t *data, size_t size, char *copy,
                      const cohort_setting_t *const *set, size_t nset, const char **ref)
{
    memcpy(copy, data, size);
    copy[size] = '\0';
    for (size_t i = 0; i < nset; i++) ref[i] = NULL;
    size_t at = 0;
    while (at < size) {
        char *line = copy + at;
        const char *nl = memchr(line, '\n', size - at);
        size_t len = nl ? (size_t)(nl - line) : size - at;
        at += len + 1;
        if (memchr(line, '\0', len) || len > COHORT_CONF_LINE_MAX) continue;
        line[len] = '\0';
        char *hash = strchr(line, '#');
        if (hash) *hash = '\0';
        char *eq = strchr(line, '=');
        if (!eq) continue;
        *eq = '\0';
        char *name = line, *value = eq + 1, *e;
        while (blank(*name)) name++;
        for (e = name + strlen(name); e > name && blank(e[-1]);) *--e = '\0';
        while (blank(*value)) value++;
        for (e = value + strlen(value); e > value && blank(e[-1]);) *--e = '\0';
        for (size_t i = 0; i < nset; i++)
            if (!strcmp(set[i]->name, name)) ref[i] = value;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (ftruncate(memfd, 0) != 0 || pwrite(memfd, data, size, 0) != (ssize_t)size) abort();
    cohort_config_reset();
    cohort_log_reset();
    size_t nset = cohort_settings_count();
    const cohort_setting_t **set = calloc(nset, sizeof *set);
    const char **ref = calloc(nset, sizeof *ref);
    char *copy = malloc(size + 1);
    if (!set || !ref || !copy) abort();
    for (size_t i = 0; i < nset; i++) set[i] = cohort_setting_at(i);
    reference(data, size, copy, set, nset, ref);
    /* A numeric setting first: the file is read on this call, and a problem with one of its
     * lines is the log's first message. */
    long timeout = -1;
    cohort_status_t st = cohort_config_long("COHORT_TIMEOUT", 1, 86400, &timeout);
    /* A file with a problem (a line that is not NAME = value, an unknown or repeated name, a
     * NUL byte) fails every communicator's creation naming file and line: then
     * only the absence of crashes and leaks is checked. */
    if (cohort_config_file_status() != COHORT_SUCCESS || memchr(data, '\0', size)) {
        free(copy);
        free(ref);
        free(set);
        return 0;
    }
    const char *tv = NULL;
    for (size_t i = 0; i < nset; i++)
        if (!strcmp(set[i]->name, "COHORT_TIMEOUT")) tv = ref[i] ? ref[i] : set[i]->def;
    long want = -1;
    cohort_status_t wst = cohort_parse_long("COHORT_TIMEOUT", tv, 1, 86400, &want);
    FUZZ_CHECK(st == wst && timeout == want, "COHORT_TIMEOUT: %d/%ld, reference '%s' %d/%ld",
               (int)st, timeout, tv, (int)wst, want);
    for (size_t i = 0; i < nset; i++) {
        const char *name = set[i]->name;
        if (!strcmp(name, "COHORT_CONF") || !strcmp(name, "COHORT_DEBUG")) continue;  /* env */
        const char *got = cohort_config_value(name), *exp = ref[i] ? ref[i] : set[i]->def;
        FUZZ_CHECK((got == NULL) == (exp == NULL) && (!got || !strcmp(got, exp)),
                   "%s reads '%s', the reference says '%s'", name, got ? got : "(unset)",
                   exp ? exp : "(unset)");
        /* readers get words in one spelling (config.h): the same words, case and blanks aside */
        const char *read = cohort_config_get(name);
        int words = set[i]->kind == COHORT_SET_WORD || !strcmp(name, "COHORT_TRANSPORTS") ||
                    !strcmp(name, "COHORT_ALGO") || !strcmp(name, "COHORT_DEBUG_SUBSYS");
        FUZZ_CHECK((read == NULL) == (exp == NULL) &&
                   (!read || (words ? same_words(read, exp) : read == got)),
                   "%s is read as '%s', the reference says '%s'", name, read ? read : "(unset)",
                   exp ? exp : "(unset)");
        const char *src = cohort_config_source(name);
        FUZZ_CHECK(ref[i] ? !strncmp(src, "file ", 5) && !strcmp(src + 5, memfd_path)
                          : !strcmp(src, exp ? "default" : "unset"),
                   "%s comes from '%s'", name, src);
    }
    /* something outside the table is never read from the file */
    FUZZ_CHECK(cohort_config_get("COHORT_NO_SUCH_SETTING") == NULL, "unknown setting has a value");
    free(copy);
    free(ref);
    free(set);
    return 0;
}
