/* SPDX-License-Identifier: BSD-3-Clause */
/* Parsers for text that comes from users: numbers, sizes, COHORT_SOCKET_IFNAME, hostfiles, -H
 * lists, COHORT_ALGO and COHORT_TRANSPORTS. Every failure names `what` and quotes the bad text
 * (bounded, control characters shown as '?'). Text is walked as spans (pointer + length), so no
 * input is modified or needs copying. */
#include "core/parse.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"

#define SLOTS_MAX 1048576L              /* per hostfile line / -H entry */
#define HOSTFILE_MAX_BYTES ((size_t)16 << 20)  /* refuse to read more than this */
#define QUOTE_MAX 96                    /* characters of user text shown in a message */

/* ---- spans ---------------------------------------------------------------------------------- */

typedef struct span {
    const char *p;   /* NULL once a split has consumed everything */
    size_t n;
} span_t;

typedef char quote_buf[QUOTE_MAX + 4];
typedef char where_buf[2 * QUOTE_MAX + 32];

/* NULL text reads as "". */
static span_t span_of(const char *text)
{
    return text ? (span_t){text, strlen(text)} : (span_t){"", 0};
}

static span_t span_trim(span_t s)
{
    while (s.n > 0 && isspace((unsigned char)s.p[0])) {
        s.p++;
        s.n--;
    }
    while (s.n > 0 && isspace((unsigned char)s.p[s.n - 1]))
        s.n--;
    return s;
}

static span_t span_skip(span_t s, size_t k) { return (span_t){s.p + k, s.n - k}; }

/* Next item of a `sep`-separated list. A trailing separator yields a final empty item, so
 * callers can reject "a,". Returns 0 when the list is used up. */
static int span_next(span_t *rest, char sep, span_t *item)
{
    if (rest->p == NULL)
        return 0;
    const char *hit = memchr(rest->p, sep, rest->n);
    if (hit == NULL) {
        *item = *rest;
        rest->p = NULL;
        return 1;
    }
    *item = (span_t){rest->p, (size_t)(hit - rest->p)};
    *rest = span_skip(*rest, item->n + 1);
    return 1;
}

/* Leading run of characters that are not whitespace and not `stop`. */
static span_t span_token(span_t s, char stop)
{
    size_t k = 0;
    while (k < s.n && !isspace((unsigned char)s.p[k]) && s.p[k] != stop)
        k++;
    return (span_t){s.p, k};
}

static int span_eq(span_t s, const char *word)
{
    return strlen(word) == s.n && memcmp(s.p, word, s.n) == 0;
}

static int span_eq_nocase(span_t s, const char *word)
{
    return strlen(word) == s.n && strncasecmp(s.p, word, s.n) == 0;
}

/* Copies s into buf (size cap) with a NUL; 0 if it does not fit. */
static int span_copy(span_t s, char *buf, size_t cap)
{
    if (s.n >= cap)
        return 0;
    memcpy(buf, s.p, s.n);
    buf[s.n] = '\0';
    return 1;
}

/* Printable, bounded copy of user text for a message. */
static const char *quote(span_t s, quote_buf out)
{
    size_t k = 0;
    for (; k < s.n && k < QUOTE_MAX; k++)
        out[k] = isprint((unsigned char)s.p[k]) ? s.p[k] : '?';
    if (k < s.n) {
        memcpy(out + k, "...", 3);
        k += 3;
    }
    out[k] = '\0';
    return out;
}

/* "'list'" or, when item is only part of the list, "'list', entry 'item'". */
static const char *where(span_t all, span_t item, where_buf out)
{
    quote_buf qa, qi;
    if (item.p == all.p && item.n == all.n)
        snprintf(out, sizeof(where_buf), "'%s'", quote(all, qa));
    else
        snprintf(out, sizeof(where_buf), "'%s', entry '%s'", quote(all, qa), quote(item, qi));
    return out;
}

/* ---- numbers -------------------------------------------------------------------------------- */

typedef enum { SCAN_OK, SCAN_JUNK, SCAN_RANGE } scan_t;

static int all_digits(span_t s)
{
    for (size_t k = 0; k < s.n; k++)
        if (!isdigit((unsigned char)s.p[k]))
            return 0;
    return s.n > 0;
}

static scan_t scan_long(span_t s, long min, long max, long *out)
{
    char buf[32], *end;
    s = span_trim(s);
    if (s.n == 0)
        return SCAN_JUNK;
    if (!span_copy(s, buf, sizeof buf))
        return all_digits(s) ? SCAN_RANGE : SCAN_JUNK;
    errno = 0;
    long v = strtol(buf, &end, 10);
    if (end == buf || *end != '\0')
        return SCAN_JUNK;
    if (errno == ERANGE || v < min || v > max)
        return SCAN_RANGE;
    *out = v;
    return SCAN_OK;
}

cohort_status_t cohort_parse_long(const char *what, const char *text, long min, long max,
                                  long *out)
{
    quote_buf q;
    span_t s = span_of(text);
    switch (scan_long(s, min, max, out)) {
    case SCAN_OK:
        return COHORT_SUCCESS;
    case SCAN_RANGE:
        if (min == LONG_MIN && max == LONG_MAX)
            return cohort_error(COHORT_ERR_INVALID_ARG, "%s: '%s' is out of range: expected a "
                                "whole number of at most %d digits", what, quote(s, q),
                                (int)sizeof "9223372036854775807" - 1);
        return cohort_error(COHORT_ERR_INVALID_ARG, "%s: '%s' is out of range: expected a whole "
                            "number in [%ld, %ld]", what, quote(s, q), min, max);
    default:
        if (min == LONG_MIN && max == LONG_MAX)
            return cohort_error(COHORT_ERR_INVALID_ARG, "%s: '%s' is not a whole number", what,
                                quote(s, q));
        return cohort_error(COHORT_ERR_INVALID_ARG, "%s: '%s' is not a number in [%ld, %ld]",
                            what, quote(s, q), min, max);
    }
}

/* The decimal grammar every real setting shares with the whole numbers: [+-], digits with an
 * optional fraction (or a fraction alone), then an optional exponent. strtod alone would also
 * take hex floats (0x1p3), inf and nan, which no integer setting takes. */
static int decimal_real(span_t s)
{
    size_t k = 0, digits = 0;
    if (k < s.n && (s.p[k] == '+' || s.p[k] == '-'))
        k++;
    for (; k < s.n && isdigit((unsigned char)s.p[k]); k++)
        digits++;
    if (k < s.n && s.p[k] == '.')
        for (k++; k < s.n && isdigit((unsigned char)s.p[k]); k++)
            digits++;
    if (digits == 0)
        return 0;
    if (k < s.n && (s.p[k] == 'e' || s.p[k] == 'E')) {
        k++;
        if (k < s.n && (s.p[k] == '+' || s.p[k] == '-'))
            k++;
        size_t exp = 0;
        for (; k < s.n && isdigit((unsigned char)s.p[k]); k++)
            exp++;
        if (exp == 0)
            return 0;
    }
    return k == s.n;
}

cohort_status_t cohort_parse_double(const char *what, const char *text, double min, double max,
                                    double *out)
{
    quote_buf q;
    char buf[64], *end;
    span_t s = span_of(text), t = span_trim(s);
    if (t.n == 0 || !decimal_real(t) || !span_copy(t, buf, sizeof buf))
        goto junk;
    errno = 0;
    double v = strtod(buf, &end);
    if (end == buf || *end != '\0' || isnan(v))
        goto junk;
    if (errno == ERANGE || !isfinite(v) || v < min || v > max)
        return cohort_error(COHORT_ERR_INVALID_ARG, "%s: '%s' is out of range: expected a number "
                            "in [%g, %g]", what, quote(s, q), min, max);
    *out = v;
    return COHORT_SUCCESS;
junk:
    return cohort_error(COHORT_ERR_INVALID_ARG, "%s: '%s' is not a number in [%g, %g]", what,
                        quote(s, q), min, max);
}

/* Shift for an optional K/M/G suffix (any case), optionally followed by "B" or "iB" ("64M",
 * "64MB", "64MiB"); a bare "B" means bytes. -1 if the suffix is anything else. */
static int size_shift(span_t suf)
{
    static const char units[] = "KMG";
    int c = suf.n > 0 ? toupper((unsigned char)suf.p[0]) : 0;
    const char *u = c != 0 ? strchr(units, c) : NULL;
    int shift = u != NULL ? 10 * (int)(u - units + 1) : 0;
    if (u != NULL) {
        suf = span_skip(suf, 1);
        if (span_eq_nocase(suf, "iB"))
            return shift;
    }
    return suf.n == 0 || span_eq_nocase(suf, "B") ? shift : -1;
}

cohort_status_t cohort_parse_size(const char *what, const char *text, size_t *out)
{
    quote_buf q;
    span_t s = span_of(text), t = span_trim(s);
    size_t digits = 0, v = 0;
    int too_big = 0;
    for (; digits < t.n && isdigit((unsigned char)t.p[digits]); digits++) {
        size_t d = (size_t)(t.p[digits] - '0');
        too_big |= v > (SIZE_MAX - d) / 10;
        v = v * 10 + d;
    }
    int shift = digits > 0 ? size_shift(span_trim(span_skip(t, digits))) : -1;
    if (shift < 0)
        return cohort_error(COHORT_ERR_INVALID_ARG, "%s: '%s' is not a size: expected a number "
                            "of bytes with an optional K, M or G suffix (powers of 1024), "
                            "e.g. 64M", what, quote(s, q));
    if (too_big || v > SIZE_MAX >> shift)
        return cohort_error(COHORT_ERR_INVALID_ARG, "%s: '%s' is too large a size for this "
                            "machine", what, quote(s, q));
    *out = v << shift;
    return COHORT_SUCCESS;
}

/* ---- COHORT_SOCKET_IFNAME ------------------------------------------------------------------- */

/* Interface names: printable, no whitespace and none of the list's own punctuation. */
static int valid_ifname(span_t name)
{
    if (name.n == 0)
        return 0;
    for (size_t k = 0; k < name.n; k++) {
        unsigned char c = (unsigned char)name.p[k];
        if (!isgraph(c) || strchr(",=^/", c) != NULL)
            return 0;
    }
    return 1;
}

/* "addr" or "addr/len", IPv4 or IPv6; a bare address is a /32 or /128. */
static int parse_cidr(span_t item, cohort_ifspec_entry_t *e)
{
    char addr[INET6_ADDRSTRLEN + 1];
    const char *slash = memchr(item.p, '/', item.n);
    span_t a = {item.p, slash ? (size_t)(slash - item.p) : item.n};
    if (!span_copy(a, addr, sizeof addr))
        return 0;
    unsigned int maxlen;
    if (inet_pton(AF_INET, addr, e->net) == 1) {
        e->family = AF_INET;
        maxlen = 32;
    } else if (inet_pton(AF_INET6, addr, e->net) == 1) {
        e->family = AF_INET6;
        maxlen = 128;
    } else {
        return 0;
    }
    long len = maxlen;
    if (slash != NULL) {
        span_t l = span_skip(item, a.n + 1);
        if (!all_digits(l) || scan_long(l, 0, maxlen, &len) != SCAN_OK)
            return 0;
    }
    e->prefix_len = (unsigned int)len;
    for (unsigned int bit = e->prefix_len; bit < maxlen; bit++)   /* keep the network part */
        e->net[bit / 8] &= (unsigned char)~(0x80u >> (bit % 8));
    return 1;
}

static cohort_status_t ifspec_entry(const char *what, span_t all, span_t item,
                                    cohort_ifspec_entry_t *e)
{
    quote_buf qa, qi;
    where_buf w;
    memset(e, 0, sizeof *e);
    if (item.n == 0)
        return cohort_error(COHORT_ERR_INVALID_ARG, "%s: '%s' has an empty entry (two commas in "
                            "a row, or one at an end)", what, quote(all, qa));
    if (item.p[0] == '^')
        return cohort_error(COHORT_ERR_INVALID_ARG, "%s: '%s': '^' may only start the list "
                            "(it excludes everything listed)", what, quote(all, qa));
    if (item.p[0] != '=' && (memchr(item.p, '/', item.n) != NULL ||
                             isdigit((unsigned char)item.p[0]) || memchr(item.p, ':', item.n))) {
        if (parse_cidr(item, e))
            return COHORT_SUCCESS;
        if (memchr(item.p, '/', item.n) != NULL)
            return cohort_error(COHORT_ERR_INVALID_ARG, "%s: %s: not an IPv4 or IPv6 network "
                                "(expected e.g. 10.0.0.0/8 or fd00::/64)", what,
                                where(all, item, w));
        memset(e, 0, sizeof *e);   /* not an address after all: an interface name */
    }
    e->exact = item.p[0] == '=';
    span_t name = span_skip(item, e->exact ? 1 : 0);
    if (!valid_ifname(name))
        return cohort_error(COHORT_ERR_INVALID_ARG, "%s: %s: not an interface name, =name or "
                            "network (e.g. eth, =eth0, 10.0.0.0/8)", what, where(all, item, w));
    if (!span_copy(name, e->name, sizeof e->name))
        return cohort_error(COHORT_ERR_INVALID_ARG, "%s: interface name '%s' is longer than %zu "
                            "characters", what, quote(name, qi), sizeof e->name - 1);
    return COHORT_SUCCESS;
}

cohort_status_t cohort_ifspec_parse(const char *what, const char *text, cohort_ifspec_t *spec)
{
    quote_buf q;
    span_t all = span_trim(span_of(text)), rest = all, item;
    memset(spec, 0, sizeof *spec);
    if (rest.n > 0 && rest.p[0] == '^') {
        spec->exclude = 1;
        rest = span_trim(span_skip(rest, 1));
    }
    if (rest.n == 0)
        return cohort_error(COHORT_ERR_INVALID_ARG, "%s: '%s' names no interfaces; expected a "
                            "comma list such as eth,ib (prefixes), =eth0 (exact), ^docker,lo "
                            "(exclude) or 10.0.0.0/8", what, quote(all, q));
    while (span_next(&rest, ',', &item)) {
        if (spec->count == COHORT_IFSPEC_MAX)
            return cohort_error(COHORT_ERR_INVALID_ARG, "%s: '%s' has more than %d entries",
                                what, quote(all, q), COHORT_IFSPEC_MAX);
        cohort_status_t st = ifspec_entry(what, all, span_trim(item),
                                          &spec->entries[spec->count]);
        if (st)
            return st;
        spec->count++;
    }
    return COHORT_SUCCESS;
}

static int prefix_equal(const unsigned char *a, const unsigned char *b, unsigned int bits)
{
    unsigned int whole = bits / 8, rest = bits % 8;
    if (memcmp(a, b, whole) != 0)
        return 0;
    unsigned char mask = (unsigned char)(0xffu << (8 - rest));
    return rest == 0 || ((a[whole] ^ b[whole]) & mask) == 0;
}

static int entry_matches(const cohort_ifspec_entry_t *e, const char *ifname, int family,
                         const void *addr)
{
    if (e->family == 0) {
        if (ifname == NULL)
            return 0;
        return e->exact ? strcmp(ifname, e->name) == 0
                        : strncmp(ifname, e->name, strlen(e->name)) == 0;
    }
    return family == e->family && addr != NULL && prefix_equal(e->net, addr, e->prefix_len);
}

/* A spec with no entries (all zero, e.g. never parsed) allows everything. */
int cohort_ifspec_match(const cohort_ifspec_t *spec, const char *ifname, int family,
                        const void *addr)
{
    if (spec == NULL || spec->count == 0)
        return 1;
    int hit = 0;
    for (int i = 0; i < spec->count && !hit; i++)
        hit = entry_matches(&spec->entries[i], ifname, family, addr);
    return spec->exclude ? !hit : hit;
}

/* ---- hostfiles and -H lists ----------------------------------------------------------------- */

typedef struct host_list {
    cohort_host_slots_t *v;
    int n, cap;
} host_list_t;

static int valid_host(span_t h)
{
    if (h.n == 0 || h.n >= sizeof(((cohort_host_slots_t *)0)->host))
        return 0;
    for (size_t k = 0; k < h.n; k++)
        if (!isgraph((unsigned char)h.p[k]) || strchr(",=#[]", h.p[k]) != NULL)
            return 0;
    return 1;
}

/* Appends host, or adds the slots to an earlier entry for the same host (as Open MPI does);
 * max_slots (0: none) adds up too, and a host with a line without it has no limit. */
static cohort_status_t add_host(host_list_t *l, span_t host, long slots, long max_slots)
{
    for (int i = 0; i < l->n; i++) {
        if (span_eq(host, l->v[i].host)) {
            if (l->v[i].slots > INT_MAX - slots)
                return cohort_error(COHORT_ERR_INVALID_ARG, "host '%s' has more than %d slots "
                                    "in all", l->v[i].host, INT_MAX);
            l->v[i].slots += (int)slots;
            l->v[i].max_slots = l->v[i].max_slots && max_slots &&
                                l->v[i].max_slots <= INT_MAX - max_slots
                                ? l->v[i].max_slots + (int)max_slots : 0;
            return COHORT_SUCCESS;
        }
    }
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        cohort_host_slots_t *v = realloc(l->v, (size_t)cap * sizeof *v);
        if (v == NULL)
            return cohort_error(COHORT_ERR_NO_MEMORY, "host list: out of memory for %d hosts",
                                cap);
        l->v = v;
        l->cap = cap;
    }
    cohort_host_slots_t *h = &l->v[l->n++];
    memset(h, 0, sizeof *h);
    span_copy(host, h->host, sizeof h->host);
    h->slots = (int)slots;
    h->max_slots = (int)max_slots;
    return COHORT_SUCCESS;
}

/* One `key=value` (spaces allowed around '=') starting s; *rest is what follows. NULL on
 * success, else the reason. */
static const char *hostfile_option(span_t s, long *slots, long *max_slots, span_t *rest)
{
    long v;
    span_t key = span_token(s, '=');
    span_t after = span_trim(span_skip(s, key.n));
    if (key.n == 0 || after.n == 0 || after.p[0] != '=')
        return "expected key=value after the host name, e.g. slots=4";
    int is_slots = span_eq(key, "slots");
    if (!is_slots && !span_eq(key, "max_slots") && !span_eq(key, "max-slots"))
        return "unknown key (expected slots=N or max_slots=N)";
    after = span_trim(span_skip(after, 1));
    span_t val = span_token(after, '\0');
    if (scan_long(val, 1, SLOTS_MAX, &v) != SCAN_OK)
        return "the value must be a whole number in [1, 1048576]";
    long *dst = is_slots ? slots : max_slots;
    if (*dst > 0)
        return is_slots ? "slots given twice" : "max_slots given twice";
    *dst = v;
    *rest = span_trim(span_skip(after, val.n));
    return NULL;
}

static cohort_status_t hostfile_line(const char *what, int lineno, span_t line, host_list_t *l)
{
    quote_buf q;
    const char *hash = memchr(line.p, '#', line.n);
    span_t body = span_trim((span_t){line.p, hash ? (size_t)(hash - line.p) : line.n});
    if (body.n == 0)
        return COHORT_SUCCESS;
    span_t host = span_token(body, '\0');
    span_t rest = span_trim(span_skip(body, host.n));
    const char *why = NULL;
    long slots = 0, max_slots = 0;
    if (!valid_host(host))
        why = memchr(host.p, '=', host.n) ? "the line must start with a host name"
                                          : "not a valid host name";
    while (why == NULL && rest.n > 0)
        why = hostfile_option(rest, &slots, &max_slots, &rest);
    if (why == NULL && max_slots > 0 && slots > max_slots)
        why = "max_slots is less than slots";
    if (why != NULL)
        return cohort_error(COHORT_ERR_INVALID_ARG, "%s:%d: '%s': %s (lines look like "
                            "'node1 slots=4')", what, lineno, quote(span_trim(line), q), why);
    /* max_slots alone: that many slots (as Open MPI reads it) */
    return add_host(l, host, slots > 0 ? slots : max_slots > 0 ? max_slots : 1, max_slots);
}

static cohort_status_t hosts_done(cohort_status_t st, host_list_t *l, const char *what,
                                  cohort_host_slots_t **hosts, int *count)
{
    if (st == COHORT_SUCCESS && l->n == 0)
        st = cohort_error(COHORT_ERR_INVALID_ARG, "%s names no hosts", what);
    if (st) {
        free(l->v);
        return st;
    }
    *hosts = l->v;
    *count = l->n;
    return COHORT_SUCCESS;
}

cohort_status_t cohort_hostfile_parse_text(const char *what, const char *text,
                                           cohort_host_slots_t **hosts, int *count)
{
    host_list_t l = {0};
    span_t rest = span_of(text), line;
    cohort_status_t st = COHORT_SUCCESS;
    *hosts = NULL;
    *count = 0;
    what = what ? what : "hostfile";
    for (int lineno = 1; st == COHORT_SUCCESS && span_next(&rest, '\n', &line); lineno++)
        st = hostfile_line(what, lineno, line, &l);
    return hosts_done(st, &l, what, hosts, count);
}

/* ---- files ---------------------------------------------------------------------------------- */

/* What st is, in words, for a message. */
static const char *file_kind(mode_t m)
{
    return S_ISDIR(m) ? "a directory" : S_ISCHR(m) ? "a character device"
           : S_ISBLK(m) ? "a block device" : S_ISFIFO(m) ? "a pipe" : S_ISSOCK(m) ? "a socket"
           : "not a regular file";
}

/* /dev/null, however it is reached: the one non-regular file that reads as an empty one. */
static int is_dev_null(const struct stat *sb)
{
    struct stat null_sb;
    return S_ISCHR(sb->st_mode) && stat("/dev/null", &null_sb) == 0 &&
           sb->st_rdev == null_sb.st_rdev;
}

/* Opens path for reading and checks what it is; 0 with *fd open, or an errno value and why. */
static int open_checked(const char *path, size_t max, int *fd, size_t *size, char *why,
                        size_t whylen)
{
    /* O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused just below) */
    *fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (*fd < 0) {
        int e = errno;
        snprintf(why, whylen, "cannot be opened: %s", strerror(e));
        return e;
    }
    struct stat sb;
    int e = 0;
    if (fstat(*fd, &sb) != 0) {
        e = errno;
        snprintf(why, whylen, "cannot be examined: %s", strerror(e));
    } else if (!S_ISREG(sb.st_mode) && !is_dev_null(&sb)) {
        e = EINVAL;
        snprintf(why, whylen, "is %s, not a regular file", file_kind(sb.st_mode));
    } else if (S_ISREG(sb.st_mode) && (uintmax_t)sb.st_size > max) {
        e = EFBIG;
        snprintf(why, whylen, "is %jd bytes, more than the %zu read at most", (intmax_t)sb.st_size,
                 max);
    }
    if (e) {
        close(*fd);
        *fd = -1;
    }
    *size = e || !S_ISREG(sb.st_mode) ? 0 : (size_t)sb.st_size;
    return e;
}

int cohort_file_check(const char *path, size_t max, char *why, size_t whylen)
{
    int fd;
    size_t size;
    int e = open_checked(path, max, &fd, &size, why, whylen);
    if (!e) close(fd);
    return e;
}

int cohort_file_read(const char *path, size_t max, char **text, size_t *len, char *why,
                     size_t whylen)
{
    *text = NULL;
    *len = 0;
    int fd;
    size_t cap;
    int e = open_checked(path, max, &fd, &cap, why, whylen);
    if (e) return e;
    /* the size fstat saw, plus room to see the end (or growth); then more, up to max + 1 bytes:
     * a file that grows while it is read is still refused */
    cap += 2;
    char *buf = NULL;
    size_t n = 0;
    while (!e && n <= max) {
        if (n + 1 >= cap || !buf) {
            size_t ncap = !buf ? cap : cap > (max + 2) / 2 ? max + 2 : 2 * cap;
            char *nbuf = realloc(buf, ncap);
            if (!nbuf) {
                e = ENOMEM;
                snprintf(why, whylen, "cannot be read: out of memory for %zu bytes", ncap);
                break;
            }
            buf = nbuf;
            cap = ncap;
        }
        ssize_t got = read(fd, buf + n, cap - 1 - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            e = errno;
            snprintf(why, whylen, "cannot be read: %s", strerror(e));
        } else if (got == 0) {
            break;
        }
        n += got > 0 ? (size_t)got : 0;
    }
    close(fd);
    if (!e && n > max) {
        e = EFBIG;
        snprintf(why, whylen, "is more than the %zu bytes read at most", max);
    } else if (!e && memchr(buf, '\0', n) != NULL) {
        e = EILSEQ;
        snprintf(why, whylen, "contains a NUL byte: it is not a text file");
    }
    if (e) {
        free(buf);
        return e;
    }
    buf[n] = '\0';
    *text = buf;
    *len = n;
    return 0;
}

/* Whole file into a NUL-terminated malloc'd buffer. */
static cohort_status_t read_file(const char *path, char **out)
{
    char why[160];
    size_t len;
    int e = cohort_file_read(path, HOSTFILE_MAX_BYTES, out, &len, why, sizeof why);
    if (e == 0)
        return COHORT_SUCCESS;
    return cohort_error(e == ENOMEM ? COHORT_ERR_NO_MEMORY : COHORT_ERR_INVALID_ARG,
                        "hostfile '%s' %s; check the path%s", path, why,
                        e == EFBIG ? " (is it the right file?)" : "");
}

cohort_status_t cohort_hostfile_parse(const char *path, cohort_host_slots_t **hosts, int *count)
{
    char *text = NULL;
    *hosts = NULL;
    *count = 0;
    if (path == NULL || *path == '\0')
        return cohort_error(COHORT_ERR_INVALID_ARG, "hostfile: no path given");
    cohort_status_t st = read_file(path, &text);
    if (st)
        return st;
    st = cohort_hostfile_parse_text(path, text, hosts, count);
    free(text);
    return st;
}

/* "host", "host:N", "[v6addr]" or "[v6addr]:N". */
static const char *hostlist_entry(span_t e, span_t *host, long *slots)
{
    span_t tail;
    *slots = 1;
    if (e.n > 0 && e.p[0] == '[') {
        const char *close = memchr(e.p, ']', e.n);
        if (close == NULL)
            return "'[' without ']'";
        *host = (span_t){e.p + 1, (size_t)(close - e.p - 1)};
        tail = span_skip(e, host->n + 2);
    } else {
        const char *colon = memchr(e.p, ':', e.n);
        *host = (span_t){e.p, colon ? (size_t)(colon - e.p) : e.n};
        tail = span_skip(e, host->n);
        if (colon != NULL && memchr(colon + 1, ':', e.n - host->n - 1) != NULL)
            return "write IPv6 addresses in brackets: [fd00::1]:4";
    }
    if (!valid_host(*host))
        return "not a valid host name";
    if (tail.n == 0)
        return NULL;
    if (tail.p[0] != ':' || !all_digits(span_skip(tail, 1)) ||
        scan_long(span_skip(tail, 1), 1, SLOTS_MAX, slots) != SCAN_OK)
        return "slots after ':' must be a whole number in [1, 1048576]";
    return NULL;
}

cohort_status_t cohort_hostlist_parse(const char *text, cohort_host_slots_t **hosts, int *count)
{
    where_buf w;
    host_list_t l = {0};
    span_t all = span_trim(span_of(text)), rest = all, item;
    cohort_status_t st = COHORT_SUCCESS;
    *hosts = NULL;
    *count = 0;
    if (all.n == 0)
        rest.p = NULL;                       /* "names no hosts" below */
    while (st == COHORT_SUCCESS && span_next(&rest, ',', &item)) {
        span_t e = span_trim(item), host;
        long slots;
        const char *why = e.n == 0 ? "empty entry (two commas in a row, or one at an end)"
                                   : hostlist_entry(e, &host, &slots);
        if (why != NULL)
            st = cohort_error(COHORT_ERR_INVALID_ARG, "-H %s: %s (expected host:slots,host,...)",
                              where(all, e, w), why);
        else
            st = add_host(&l, host, slots, 0);
    }
    return hosts_done(st, &l, "-H list", hosts, count);
}

/* ---- COHORT_ALGO and COHORT_TRANSPORTS ------------------------------------------------------ */

/* [A-Za-z0-9_]+, shorter than cap; the names COHORT_ALGO and COHORT_TRANSPORTS use. Words are
 * case-insensitive (docs/reliability.md, "Settings: one grammar"): name_copy stores them in
 * lower case, the spelling every reader compares against. */
static int valid_name(span_t s, size_t cap)
{
    if (s.n == 0 || s.n >= cap)
        return 0;
    for (size_t k = 0; k < s.n; k++) {
        unsigned char c = (unsigned char)s.p[k];
        if (!(isalnum(c) || c == '_'))
            return 0;
    }
    return 1;
}

/* s (valid_name, shorter than cap) into buf in lower case. */
static void name_copy(span_t s, char *buf, size_t cap)
{
    span_copy(s, buf, cap);
    for (char *c = buf; *c; c++)
        *c = (char)tolower((unsigned char)*c);
}

/* The collectives COHORT_ALGO may name (cohort_coll_name() in core/coll/select.c). */
static const char *const COLLECTIVES[] = {"allreduce", "broadcast", "reduce", "allgather",
                                          "reduce_scatter", "alltoall", "barrier",
                                          "allgatherv", "alltoallv", "gather", "scatter"};
#define NCOLLECTIVES (sizeof COLLECTIVES / sizeof COLLECTIVES[0])

static int known_collective(span_t s)
{
    for (size_t i = 0; i < NCOLLECTIVES; i++)
        if (span_eq_nocase(s, COLLECTIVES[i]))
            return 1;
    return 0;
}

static const char *algo_entry(span_t e, cohort_algo_spec_t *spec)
{
    if (e.n == 0)
        return "empty entry (two ';' in a row, or one at an end)";
    const char *colon = memchr(e.p, ':', e.n);
    if (colon == NULL)
        return "no ':' (expected collective:algorithm, e.g. allreduce:ring)";
    size_t at = (size_t)(colon - e.p);
    span_t coll = span_trim((span_t){e.p, at});
    span_t algo = span_trim(span_skip(e, at + 1));
    if (coll.n == 0 || algo.n == 0)
        return "empty collective or algorithm name";
    if (!valid_name(coll, sizeof spec->entries[0].coll) || !known_collective(coll))
        return "unknown collective (allreduce, broadcast, reduce, allgather, reduce_scatter, "
               "alltoall, barrier, allgatherv, alltoallv, gather, scatter)";
    if (!valid_name(algo, sizeof spec->entries[0].algo))
        return "bad algorithm name (letters, digits and _)";
    for (int i = 0; i < spec->count; i++)
        if (span_eq_nocase(coll, spec->entries[i].coll))
            return "collective named twice";
    if (spec->count == COHORT_ALGO_MAX)
        return "too many entries";
    name_copy(coll, spec->entries[spec->count].coll, sizeof spec->entries[0].coll);
    name_copy(algo, spec->entries[spec->count].algo, sizeof spec->entries[0].algo);
    spec->count++;
    return NULL;
}

/* Empty text means no choices (count 0). */
cohort_status_t cohort_algo_spec_parse(const char *what, const char *text,
                                       cohort_algo_spec_t *spec)
{
    where_buf w;
    span_t all = span_trim(span_of(text)), rest = all, item;
    memset(spec, 0, sizeof *spec);
    if (all.n == 0)
        return COHORT_SUCCESS;
    while (span_next(&rest, ';', &item)) {
        span_t e = span_trim(item);
        const char *why = algo_entry(e, spec);
        if (why != NULL)
            return cohort_error(COHORT_ERR_INVALID_ARG, "%s: %s: %s", what, where(all, e, w),
                                why);
    }
    return COHORT_SUCCESS;
}

const char *cohort_algo_spec_get(const cohort_algo_spec_t *spec, const char *coll)
{
    if (spec == NULL || coll == NULL)
        return NULL;
    for (int i = 0; i < spec->count; i++)
        if (strcmp(spec->entries[i].coll, coll) == 0)
            return spec->entries[i].algo;
    return NULL;
}

static const char *transport_entry(span_t e, cohort_transport_list_t *list)
{
    if (e.n == 0)
        return "empty entry (two commas in a row, or one at an end)";
    if (!valid_name(e, sizeof list->names[0]))
        return "not a transport name (letters, digits and _, e.g. shm, tcp)";
    for (int i = 0; i < list->count; i++)
        if (span_eq_nocase(e, list->names[i]))
            return "named twice";
    if (list->count == COHORT_TRANSPORT_LIST_MAX)
        return "too many entries";
    name_copy(e, list->names[list->count++], sizeof list->names[0]);
    return NULL;
}

cohort_status_t cohort_transport_list_parse(const char *what, const char *text,
                                            cohort_transport_list_t *list)
{
    quote_buf qa;
    where_buf w;
    span_t all = span_trim(span_of(text)), rest = all, item;
    memset(list, 0, sizeof *list);
    if (rest.n > 0 && rest.p[0] == '^') {
        list->exclude = 1;
        rest = span_trim(span_skip(rest, 1));
    }
    if (rest.n == 0)
        return cohort_error(COHORT_ERR_INVALID_ARG, "%s: '%s' names no transports; expected "
                            "e.g. shm,tcp (allow, in order of preference) or ^verbs (exclude); "
                            "unset it to use every transport", what, quote(all, qa));
    while (span_next(&rest, ',', &item)) {
        span_t e = span_trim(item);
        const char *why = transport_entry(e, list);
        if (why != NULL)
            return cohort_error(COHORT_ERR_INVALID_ARG, "%s: %s: %s", what, where(all, e, w),
                                why);
    }
    return COHORT_SUCCESS;
}
