/* SPDX-License-Identifier: BSD-3-Clause */
/* Fuzz target: the settings parsers of core/parse.h (values of COHORT_* variables, from the
 * environment or cohort.conf) and the rendezvous address. data[0] % 8 picks the parser, data[0] / 8
 * a variant (a range); the rest, as a NUL-terminated string, is the text:
 *   0 cohort_parse_long     1 cohort_parse_double    2 cohort_parse_size
 *   3 cohort_ifspec_parse (+ cohort_ifspec_match)     4 cohort_algo_spec_parse (+ _get)
 *   5 cohort_transport_list_parse                      6 cohort_rdv_parse_url
 *   7 cohort_parse_long with the range read from the text's first 16 bytes
 * Oracles: a value accepted is in range and reads back the same once printed; every name stored
 * is NUL-terminated, non-empty and of the allowed characters; a parsed interface spec matches
 * its own entries; a parsed URL prints and parses back to the same host and port. */
#include "fuzz.h"

#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <sys/socket.h>

#include "core/parse.h"
#include "core/rendezvous.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet();
    return 0;
}

static const long long_ranges[][2] = {
    { 0, 1 }, { 1, 65535 }, { -1, 1000 }, { 0, 1048576 }, { LONG_MIN, LONG_MAX }, { -5, -5 },
    { 1, 16 }, { LONG_MIN, 0 },
};
#define NRANGES (sizeof long_ranges / sizeof long_ranges[0])

static void check_long(const char *text, long min, long max)
{
    long v = 12345;
    if (cohort_parse_long("FUZZ", text, min, max, &v) != COHORT_SUCCESS) {
        FUZZ_CHECK(v == 12345, "a refused number changed the output to %ld", v);
        return;
    }
    FUZZ_CHECK(v >= min && v <= max, "%ld accepted for [%ld, %ld]", v, min, max);
    char buf[32];
    long w = 0;
    snprintf(buf, sizeof buf, " %ld ", v);
    FUZZ_CHECK(cohort_parse_long("FUZZ", buf, min, max, &w) == COHORT_SUCCESS && w == v,
               "'%s' does not read back as %ld", buf, v);
}

static void check_double(const char *text, unsigned variant)
{
    static const double ranges[][2] = { { 0, 1 }, { 0, 1e9 }, { -1e300, 1e300 }, { 1e-3, 3600 } };
    const double *r = ranges[variant % 4];
    double v = -42;
    if (cohort_parse_double("FUZZ", text, r[0], r[1], &v) != COHORT_SUCCESS) {
        FUZZ_CHECK(v == -42, "a refused number changed the output");
        return;
    }
    FUZZ_CHECK(isfinite(v) && v >= r[0] && v <= r[1], "%g accepted for [%g, %g]", v, r[0], r[1]);
    char buf[64];
    double w = 0;
    snprintf(buf, sizeof buf, "%.17g", v);
    FUZZ_CHECK(cohort_parse_double("FUZZ", buf, r[0], r[1], &w) == COHORT_SUCCESS && w == v,
               "'%s' does not read back as %.17g", buf, v);
}

static void check_size(const char *text)
{
    size_t v = 7;
    if (cohort_parse_size("FUZZ", text, &v) != COHORT_SUCCESS) {
        FUZZ_CHECK(v == 7, "a refused size changed the output");
        return;
    }
    char buf[32];
    size_t w = 0;
    snprintf(buf, sizeof buf, "%zu", v);
    FUZZ_CHECK(cohort_parse_size("FUZZ", buf, &w) == COHORT_SUCCESS && w == v,
               "'%s' does not read back", buf);
    /* the suffixes are powers of 1024: a value that divides reads back with one */
    static const char suffix[] = "KMG";
    for (int k = 0; k < 3; k++) {
        size_t unit = (size_t)1 << (10 * (k + 1));
        if (v % unit) break;
        snprintf(buf, sizeof buf, "%zu%ciB", v / unit, suffix[k]);
        FUZZ_CHECK(cohort_parse_size("FUZZ", buf, &w) == COHORT_SUCCESS && w == v,
                   "'%s' does not read back as %zu", buf, v);
    }
}

static int good_name(const char *s, size_t cap, const char *bad)
{
    size_t n = strnlen(s, cap);
    if (n == 0 || n >= cap) return 0;
    for (size_t k = 0; k < n; k++)
        if (!isgraph((unsigned char)s[k]) || strchr(bad, s[k])) return 0;
    return 1;
}

static void check_ifspec(const char *text)
{
    cohort_ifspec_t spec;
    if (cohort_ifspec_parse("FUZZ", text, &spec) != COHORT_SUCCESS) return;
    FUZZ_CHECK(spec.count >= 1 && spec.count <= COHORT_IFSPEC_MAX, "count %d", spec.count);
    for (int i = 0; i < spec.count; i++) {
        const cohort_ifspec_entry_t *e = &spec.entries[i];
        if (e->family == 0) {
            FUZZ_CHECK(good_name(e->name, sizeof e->name, ",=^/"), "entry %d: bad name", i);
            /* an interface of exactly that name: listed, so allowed unless the list excludes */
            FUZZ_CHECK(cohort_ifspec_match(&spec, e->name, 0, NULL) == !spec.exclude,
                       "'%s' does not match its own spec", e->name);
            continue;
        }
        unsigned maxlen = e->family == AF_INET ? 32 : 128;
        FUZZ_CHECK(e->family == AF_INET || e->family == AF_INET6, "family %d", e->family);
        FUZZ_CHECK(e->name[0] == '\0' && e->prefix_len <= maxlen, "entry %d: /%u", i,
                   e->prefix_len);
        for (unsigned bit = e->prefix_len; bit < maxlen; bit++)
            FUZZ_CHECK(!(e->net[bit / 8] & (0x80u >> (bit % 8))), "host bit %u kept", bit);
        /* the network's own address and its last address both lie inside it */
        unsigned char last[16];
        memcpy(last, e->net, sizeof last);
        for (unsigned bit = e->prefix_len; bit < maxlen; bit++)
            last[bit / 8] |= (unsigned char)(0x80u >> (bit % 8));
        FUZZ_CHECK(cohort_ifspec_match(&spec, NULL, e->family, e->net) == !spec.exclude,
                   "entry %d's network does not match its own spec", i);
        FUZZ_CHECK(cohort_ifspec_match(&spec, "x", e->family, last) == !spec.exclude,
                   "entry %d's last address does not match its own spec", i);
    }
    /* whatever the spec, asking never crashes: odd names, both families, no address */
    static const unsigned char any[16] = { 10, 0, 0, 1 };
    cohort_ifspec_match(&spec, "", AF_INET, any);
    cohort_ifspec_match(&spec, "eth0", AF_INET6, any);
    cohort_ifspec_match(&spec, NULL, 0, NULL);
}

static void check_algo(const char *text)
{
    cohort_algo_spec_t spec;
    if (cohort_algo_spec_parse("FUZZ", text, &spec) != COHORT_SUCCESS) return;
    FUZZ_CHECK(spec.count >= 0 && spec.count <= COHORT_ALGO_MAX, "count %d", spec.count);
    for (int i = 0; i < spec.count; i++) {
        FUZZ_CHECK(good_name(spec.entries[i].coll, sizeof spec.entries[i].coll, ":;"),
                   "entry %d: bad collective", i);
        FUZZ_CHECK(good_name(spec.entries[i].algo, sizeof spec.entries[i].algo, ":;"),
                   "entry %d: bad algorithm", i);
        const char *got = cohort_algo_spec_get(&spec, spec.entries[i].coll);
        FUZZ_CHECK(got == spec.entries[i].algo, "collective '%s' named twice or lost",
                   spec.entries[i].coll);
    }
    FUZZ_CHECK(cohort_algo_spec_get(&spec, "no_such_collective") == NULL, "unknown found");
}

static void check_transports(const char *text)
{
    cohort_transport_list_t l;
    if (cohort_transport_list_parse("FUZZ", text, &l) != COHORT_SUCCESS) return;
    FUZZ_CHECK(l.count >= 1 && l.count <= COHORT_TRANSPORT_LIST_MAX, "count %d", l.count);
    for (int i = 0; i < l.count; i++) {
        FUZZ_CHECK(good_name(l.names[i], sizeof l.names[i], ",^"), "name %d", i);
        for (int j = 0; j < i; j++)
            FUZZ_CHECK(strcmp(l.names[i], l.names[j]) != 0, "'%s' twice", l.names[i]);
    }
}

static void check_url(const char *text, unsigned variant)
{
    char host[256], host2[256], again[300];
    size_t hostlen = variant % 2 ? 16 : sizeof host;   /* a short buffer must be respected */
    int port = -1, port2 = -1;
    if (cohort_rdv_parse_url(text, host, hostlen, &port) != COHORT_SUCCESS) return;
    size_t n = strnlen(host, hostlen);
    FUZZ_CHECK(n > 0 && n < hostlen, "host of %zu characters in a buffer of %zu", n, hostlen);
    FUZZ_CHECK(port >= 1 && port <= 65535, "port %d", port);
    if (strpbrk(host, "[]")) return;   /* not a host anyone could reach; no round trip */
    snprintf(again, sizeof again, strchr(host, ':') ? "tcp://[%s]:%d" : "tcp://%s:%d", host,
             port);
    FUZZ_CHECK(cohort_rdv_parse_url(again, host2, sizeof host2, &port2) == COHORT_SUCCESS &&
               strcmp(host, host2) == 0 && port == port2, "'%s' does not read back", again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    char *text = fuzz_text(data, size);
    unsigned variant = data[0] / 8;
    switch (data[0] % 8) {
    case 0: check_long(text, long_ranges[variant % NRANGES][0], long_ranges[variant % NRANGES][1]);
        break;
    case 1: check_double(text, variant); break;
    case 2: check_size(text); break;
    case 3: check_ifspec(text); break;
    case 4: check_algo(text); break;
    case 5: check_transports(text); break;
    case 6: check_url(text, variant); break;
    default: {
        long r[2] = { 0, 0 };
        size_t n = strlen(text) < sizeof r ? strlen(text) : sizeof r;
        memcpy(r, text, n);
        check_long(text + n, r[0] < r[1] ? r[0] : r[1], r[0] < r[1] ? r[1] : r[0]);
        break;
    }
    }
    free(text);
    return 0;
}
