/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests for core/parse.c (every grammar rule and every error case) and for the settings
 * (core/config.c: the table, cohort.conf; core/config_check.c). Errors are checked for
 * the status AND for a cohort_last_error() message that names the setting and the bad text. */
#include <arpa/inet.h>
#include <check.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/config.h"
#include "core/log.h"
#include "core/parse.h"
#include "core/plugin_loader.h"
#include "tests/unit/expect.h"

/* The call fails with COHORT_ERR_INVALID_ARG and the message contains each needle. */
#define EXPECT_ERR(call, ...) EXPECT_STATUS(call, COHORT_ERR_INVALID_ARG, __VA_ARGS__)

/* ---- numbers ----------------------------------------------------------------------------- */

START_TEST(long_ok)
{
    long v;
    EXPECT_OK(cohort_parse_long("N", "42", 0, 100, &v));
    ck_assert_int_eq(v, 42);
    EXPECT_OK(cohort_parse_long("N", "  42 \t\n", 0, 100, &v));
    ck_assert_int_eq(v, 42);
    EXPECT_OK(cohort_parse_long("N", "-5", -10, 10, &v));
    ck_assert_int_eq(v, -5);
    EXPECT_OK(cohort_parse_long("N", "+7", -10, 10, &v));
    ck_assert_int_eq(v, 7);
    EXPECT_OK(cohort_parse_long("N", "007", 0, 10, &v));   /* decimal, not octal */
    ck_assert_int_eq(v, 7);
    EXPECT_OK(cohort_parse_long("N", "1", 1, 1, &v));
    EXPECT_OK(cohort_parse_long("N", "9223372036854775807", LONG_MIN, LONG_MAX, &v));
    ck_assert(v == LONG_MAX);
    EXPECT_OK(cohort_parse_long("N", "-9223372036854775808", LONG_MIN, LONG_MAX, &v));
    ck_assert(v == LONG_MIN);
}
END_TEST

START_TEST(long_errors)
{
    long v = 1234;
    EXPECT_ERR(cohort_parse_long("COHORT_TIMEOUT", "30x", 1, 86400, &v), "COHORT_TIMEOUT",
               "'30x'", "[1, 86400]");
    ck_assert_int_eq(v, 1234);                                /* untouched on error */
    EXPECT_ERR(cohort_parse_long("N", "", 1, 9, &v), "N: ''");
    EXPECT_ERR(cohort_parse_long("N", "   ", 1, 9, &v), "N:");
    EXPECT_ERR(cohort_parse_long("N", NULL, 1, 9, &v), "N:");
    EXPECT_ERR(cohort_parse_long("N", "0x10", 0, 99, &v), "'0x10'");
    EXPECT_ERR(cohort_parse_long("N", "1 2", 0, 99, &v), "'1 2'");
    EXPECT_ERR(cohort_parse_long("N", "1.5", 0, 99, &v), "'1.5'");
    EXPECT_ERR(cohort_parse_long("N", "- 1", -9, 9, &v), "'- 1'");
    EXPECT_ERR(cohort_parse_long("N", "abc", 0, 99, &v), "'abc'");
    EXPECT_ERR(cohort_parse_long("N", "0", 1, 86400, &v), "'0'", "out of range", "[1, 86400]");
    EXPECT_ERR(cohort_parse_long("N", "86401", 1, 86400, &v), "'86401'", "out of range");
    EXPECT_ERR(cohort_parse_long("N", "-1", 0, 9, &v), "'-1'");
    EXPECT_ERR(cohort_parse_long("N", "99999999999999999999", 0, LONG_MAX, &v),
               "'99999999999999999999'", "out of range");
    EXPECT_ERR(cohort_parse_long("N", "1234567890123456789012345678901234567890", 0, LONG_MAX,
                                 &v), "out of range");
    EXPECT_ERR(cohort_parse_long("N", "4\x01", 0, 9, &v), "'4?'");   /* control char shown */
    ck_assert_int_eq(v, 1234);
}
END_TEST

START_TEST(double_ok)
{
    double v;
    EXPECT_OK(cohort_parse_double("T", "0.5", 0, 1, &v));
    ck_assert(v == 0.5);
    EXPECT_OK(cohort_parse_double("T", " 1e3 ", 0, 1e4, &v));
    ck_assert(v == 1000.0);
    EXPECT_OK(cohort_parse_double("T", "-2.5", -3, 0, &v));
    ck_assert(v == -2.5);
    EXPECT_OK(cohort_parse_double("T", "300", 0.1, 1e7, &v));
    ck_assert(v == 300.0);
    EXPECT_OK(cohort_parse_double("T", ".5", 0, 1, &v));
    ck_assert(v == 0.5);
    EXPECT_OK(cohort_parse_double("T", "5.", 0, 9, &v));
    ck_assert(v == 5.0);
    EXPECT_OK(cohort_parse_double("T", "+2E-1", 0, 9, &v));
    ck_assert(v == 0.2);
    EXPECT_OK(cohort_parse_double("T", "007", 0, 9, &v));   /* decimal, as the integers */
    ck_assert(v == 7.0);
}
END_TEST

START_TEST(double_errors)
{
    double v = 7;
    EXPECT_ERR(cohort_parse_double("COHORT_TIMEOUT", "abc", 0, 1, &v), "COHORT_TIMEOUT",
               "'abc'");
    EXPECT_ERR(cohort_parse_double("T", "", 0, 1, &v), "T: ''");
    EXPECT_ERR(cohort_parse_double("T", NULL, 0, 1, &v), "T:");
    EXPECT_ERR(cohort_parse_double("T", "1.5x", 0, 9, &v), "'1.5x'");
    EXPECT_ERR(cohort_parse_double("T", "nan", 0, 9, &v), "'nan'");
    EXPECT_ERR(cohort_parse_double("T", "inf", 0, 1e300, &v), "'inf'");
    EXPECT_ERR(cohort_parse_double("T", "1e999", 0, 1e300, &v), "'1e999'", "out of range");
    EXPECT_ERR(cohort_parse_double("T", "5", 0, 1, &v), "'5'", "out of range");
    EXPECT_ERR(cohort_parse_double("T", "0.05", 0.1, 1e7, &v), "'0.05'");
    /* one number grammar: decimal only, as the whole numbers (which refuse 0x10) */
    static const char *const not_decimal[] = { "0x10", "0X1P3", "0x1p3", "infinity", "-inf",
                                               "-nan", "NAN(1)", "1e", "1e+", ".", "+", "-",
                                               "1.5.2", "1e5x", "e5", "1 e5", "--1", "1,5" };
    for (size_t i = 0; i < sizeof not_decimal / sizeof not_decimal[0]; i++) {
        char want[32];
        snprintf(want, sizeof want, "'%s'", not_decimal[i]);
        EXPECT_ERR(cohort_parse_double("COHORT_TIMEOUT", not_decimal[i], -1e300, 1e300, &v),
                   "COHORT_TIMEOUT", want, "is not a number");
    }
    ck_assert(v == 7);
}
END_TEST

START_TEST(size_ok)
{
    size_t v;
    EXPECT_OK(cohort_parse_size("S", "64M", &v));
    ck_assert_uint_eq(v, 67108864);
    EXPECT_OK(cohort_parse_size("S", "8", &v));
    ck_assert_uint_eq(v, 8);
    EXPECT_OK(cohort_parse_size("S", "0", &v));
    ck_assert_uint_eq(v, 0);
    EXPECT_OK(cohort_parse_size("S", "1K", &v));
    ck_assert_uint_eq(v, 1024);
    EXPECT_OK(cohort_parse_size("S", "2g", &v));
    ck_assert_uint_eq(v, 2ull << 30);
    EXPECT_OK(cohort_parse_size("S", "64MB", &v));
    ck_assert_uint_eq(v, 64u << 20);
    EXPECT_OK(cohort_parse_size("S", "64MiB", &v));
    ck_assert_uint_eq(v, 64u << 20);
    EXPECT_OK(cohort_parse_size("S", "512B", &v));
    ck_assert_uint_eq(v, 512);
    EXPECT_OK(cohort_parse_size("S", " 16 k ", &v));
    ck_assert_uint_eq(v, 16384);
}
END_TEST

START_TEST(size_errors)
{
    size_t v = 5;
    EXPECT_ERR(cohort_parse_size("COHORT_CHUNK", "", &v), "COHORT_CHUNK", "''");
    EXPECT_ERR(cohort_parse_size("S", NULL, &v), "S:");
    EXPECT_ERR(cohort_parse_size("S", "M", &v), "'M'");
    EXPECT_ERR(cohort_parse_size("S", "-5", &v), "'-5'");
    EXPECT_ERR(cohort_parse_size("S", "1.5G", &v), "'1.5G'");
    EXPECT_ERR(cohort_parse_size("S", "64X", &v), "'64X'");
    EXPECT_ERR(cohort_parse_size("S", "64MBB", &v), "'64MBB'");
    EXPECT_ERR(cohort_parse_size("S", "64 M B", &v), "'64 M B'");
    EXPECT_ERR(cohort_parse_size("S", "99999999999999999999999", &v), "too large");
    char big[64];
    snprintf(big, sizeof big, "%zuG", (SIZE_MAX >> 30) + 1);
    EXPECT_ERR(cohort_parse_size("S", big, &v), big, "too large");
    snprintf(big, sizeof big, "%zuG", SIZE_MAX >> 30);
    EXPECT_OK(cohort_parse_size("S", big, &v));
    ck_assert(v == (SIZE_MAX >> 30) << 30);
}
END_TEST

/* ---- COHORT_SOCKET_IFNAME ---------------------------------------------------------------- */

static int match4(const cohort_ifspec_t *s, const char *name, const char *ip)
{
    unsigned char a[4];
    ck_assert_int_eq(inet_pton(AF_INET, ip, a), 1);
    return cohort_ifspec_match(s, name, AF_INET, a);
}

static int match6(const cohort_ifspec_t *s, const char *name, const char *ip)
{
    unsigned char a[16];
    ck_assert_int_eq(inet_pton(AF_INET6, ip, a), 1);
    return cohort_ifspec_match(s, name, AF_INET6, a);
}

START_TEST(ifspec_prefix)
{
    cohort_ifspec_t s;
    EXPECT_OK(cohort_ifspec_parse("IF", "eth,ib", &s));
    ck_assert_int_eq(s.count, 2);
    ck_assert_int_eq(s.exclude, 0);
    ck_assert_str_eq(s.entries[0].name, "eth");
    ck_assert_int_eq(s.entries[0].exact, 0);
    ck_assert_int_eq(s.entries[0].family, 0);
    ck_assert(cohort_ifspec_match(&s, "eth0", 0, NULL));
    ck_assert(cohort_ifspec_match(&s, "eth", 0, NULL));
    ck_assert(cohort_ifspec_match(&s, "ib1", AF_INET, "\x0a\0\0\1"));
    ck_assert(!cohort_ifspec_match(&s, "lo", 0, NULL));
    ck_assert(!cohort_ifspec_match(&s, "veth0", 0, NULL));    /* prefix of the name only */
    ck_assert(!cohort_ifspec_match(&s, NULL, 0, NULL));
    EXPECT_OK(cohort_ifspec_parse("IF", "  eth0:1 , ib ", &s));   /* spaces, alias names */
    ck_assert_int_eq(s.count, 2);
    ck_assert_str_eq(s.entries[0].name, "eth0:1");
    ck_assert(cohort_ifspec_match(&s, "eth0:1", 0, NULL));
    ck_assert(!cohort_ifspec_match(&s, "eth0", 0, NULL));
}
END_TEST

START_TEST(ifspec_exact_and_exclude)
{
    cohort_ifspec_t s;
    EXPECT_OK(cohort_ifspec_parse("IF", "=eth0,=ens1f0", &s));
    ck_assert_int_eq(s.count, 2);
    ck_assert_int_eq(s.entries[1].exact, 1);
    ck_assert_str_eq(s.entries[1].name, "ens1f0");
    ck_assert(cohort_ifspec_match(&s, "eth0", 0, NULL));
    ck_assert(cohort_ifspec_match(&s, "ens1f0", 0, NULL));
    ck_assert(!cohort_ifspec_match(&s, "eth01", 0, NULL));
    ck_assert(!cohort_ifspec_match(&s, "eth", 0, NULL));

    EXPECT_OK(cohort_ifspec_parse("IF", "^docker,lo", &s));
    ck_assert_int_eq(s.exclude, 1);
    ck_assert(!cohort_ifspec_match(&s, "docker0", 0, NULL));
    ck_assert(!cohort_ifspec_match(&s, "lo", 0, NULL));
    ck_assert(cohort_ifspec_match(&s, "eth0", 0, NULL));

    EXPECT_OK(cohort_ifspec_parse("IF", " ^ =eth1", &s));
    ck_assert_int_eq(s.exclude, 1);
    ck_assert(!cohort_ifspec_match(&s, "eth1", 0, NULL));
    ck_assert(cohort_ifspec_match(&s, "eth10", 0, NULL));
}
END_TEST

START_TEST(ifspec_cidr)
{
    cohort_ifspec_t s;
    EXPECT_OK(cohort_ifspec_parse("IF", "10.0.0.0/8,192.168.1.0/24", &s));
    ck_assert_int_eq(s.count, 2);
    ck_assert_int_eq(s.entries[0].family, AF_INET);
    ck_assert_uint_eq(s.entries[0].prefix_len, 8);
    ck_assert_str_eq(s.entries[0].name, "");
    ck_assert(match4(&s, "eth0", "10.1.2.3"));
    ck_assert(match4(&s, "eth1", "192.168.1.77"));
    ck_assert(!match4(&s, "eth1", "192.168.2.1"));
    ck_assert(!match4(&s, "eth1", "11.0.0.1"));
    ck_assert(!match6(&s, "eth0", "::ffff:10.0.0.1"));       /* other family */
    ck_assert(!cohort_ifspec_match(&s, "eth0", AF_INET, NULL));

    EXPECT_OK(cohort_ifspec_parse("IF", "10.1.2.3/9", &s));   /* host bits are dropped */
    unsigned char want[4] = {10, 0, 0, 0};
    ck_assert_mem_eq(s.entries[0].net, want, 4);
    ck_assert(match4(&s, "x", "10.127.255.255"));
    ck_assert(!match4(&s, "x", "10.128.0.1"));

    EXPECT_OK(cohort_ifspec_parse("IF", "fd00::/64", &s));
    ck_assert_int_eq(s.entries[0].family, AF_INET6);
    ck_assert(match6(&s, "x", "fd00::1"));
    ck_assert(match6(&s, "x", "fd00::ffff:1"));
    ck_assert(!match6(&s, "x", "fd00:0:0:1::1"));
    ck_assert(!match4(&s, "x", "10.0.0.1"));

    EXPECT_OK(cohort_ifspec_parse("IF", "10.0.0.5", &s));     /* a bare address is a /32 */
    ck_assert_uint_eq(s.entries[0].prefix_len, 32);
    ck_assert(match4(&s, "x", "10.0.0.5"));
    ck_assert(!match4(&s, "x", "10.0.0.6"));
    EXPECT_OK(cohort_ifspec_parse("IF", "::1", &s));
    ck_assert_uint_eq(s.entries[0].prefix_len, 128);
    ck_assert(match6(&s, "lo", "::1"));

    EXPECT_OK(cohort_ifspec_parse("IF", "0.0.0.0/0", &s));
    ck_assert(match4(&s, "x", "255.1.2.3"));
    EXPECT_OK(cohort_ifspec_parse("IF", "^10.0.0.0/8", &s));
    ck_assert(!match4(&s, "eth0", "10.9.9.9"));
    ck_assert(match4(&s, "eth0", "172.16.0.1"));
    ck_assert(match6(&s, "eth0", "fd00::1"));
}
END_TEST

START_TEST(ifspec_mixed_and_unparsed)
{
    cohort_ifspec_t s;
    EXPECT_OK(cohort_ifspec_parse("IF", "eth,=ib0,10.0.0.0/8", &s));
    ck_assert_int_eq(s.count, 3);
    ck_assert(match4(&s, "eth7", "1.2.3.4"));
    ck_assert(match4(&s, "ib0", "1.2.3.4"));
    ck_assert(!match4(&s, "ib1", "1.2.3.4"));
    ck_assert(match4(&s, "ib1", "10.2.3.4"));

    memset(&s, 0, sizeof s);                               /* never parsed: allows all */
    ck_assert(cohort_ifspec_match(&s, "anything", 0, NULL));
    ck_assert(cohort_ifspec_match(NULL, "anything", 0, NULL));

    char list[256] = "";
    for (int i = 0; i < COHORT_IFSPEC_MAX; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%se%d", i ? "," : "", i);
    EXPECT_OK(cohort_ifspec_parse("IF", list, &s));
    ck_assert_int_eq(s.count, COHORT_IFSPEC_MAX);
    strcat(list, ",one_more");
    EXPECT_ERR(cohort_ifspec_parse("IF", list, &s), "IF", "more than 16");
}
END_TEST

START_TEST(ifspec_errors)
{
    cohort_ifspec_t s;
    EXPECT_ERR(cohort_ifspec_parse("COHORT_SOCKET_IFNAME", "", &s), "COHORT_SOCKET_IFNAME",
               "names no interfaces");
    EXPECT_ERR(cohort_ifspec_parse("IF", NULL, &s), "IF:");
    EXPECT_ERR(cohort_ifspec_parse("IF", "^", &s), "'^'", "names no interfaces");
    EXPECT_ERR(cohort_ifspec_parse("IF", "eth,,ib", &s), "'eth,,ib'", "empty entry");
    EXPECT_ERR(cohort_ifspec_parse("IF", "eth,", &s), "'eth,'", "empty entry");
    EXPECT_ERR(cohort_ifspec_parse("IF", ",eth", &s), "',eth'", "empty entry");
    EXPECT_ERR(cohort_ifspec_parse("IF", "eth,^lo", &s), "'eth,^lo'", "'^'");
    EXPECT_ERR(cohort_ifspec_parse("IF", "10.0.0.0/33", &s), "'10.0.0.0/33'");
    EXPECT_ERR(cohort_ifspec_parse("IF", "10.0.0.0/x", &s), "'10.0.0.0/x'");
    EXPECT_ERR(cohort_ifspec_parse("IF", "10.0.0.0/", &s), "'10.0.0.0/'");
    EXPECT_ERR(cohort_ifspec_parse("IF", "10.0.0.0/+8", &s), "'10.0.0.0/+8'");
    EXPECT_ERR(cohort_ifspec_parse("IF", "300.1.1.1/8", &s), "'300.1.1.1/8'", "network");
    EXPECT_ERR(cohort_ifspec_parse("IF", "fd00::/129", &s), "'fd00::/129'");
    EXPECT_ERR(cohort_ifspec_parse("IF", "eth0/1", &s), "'eth0/1'");
    EXPECT_ERR(cohort_ifspec_parse("IF", "=", &s), "'='");
    EXPECT_ERR(cohort_ifspec_parse("IF", "==eth0", &s), "'==eth0'");
    EXPECT_ERR(cohort_ifspec_parse("IF", "eth 0", &s), "'eth 0'");
    EXPECT_ERR(cohort_ifspec_parse("IF", "=eth0123456789012345678901234567890", &s),
               "'eth0123456789012345678901234567890'", "longer than 31");
}
END_TEST

/* ---- hostfiles --------------------------------------------------------------------------- */

START_TEST(hostfile_grammar)
{
    cohort_host_slots_t *h;
    int n;
    const char *text = "node1 slots=4\n"
                       "node2\n"
                       "# a comment line\n"
                       "\n"
                       "   \t \n"
                       "  node3   slots=2   # trailing comment\n"
                       "node4 slots = 3 max_slots=8\n"
                       "10.0.0.5 max_slots=2\n"
                       "node5\tslots=1#no space before the comment";
    EXPECT_OK(cohort_hostfile_parse_text("hf", text, &h, &n));
    ck_assert_int_eq(n, 6);
    ck_assert_str_eq(h[0].host, "node1");
    ck_assert_int_eq(h[0].slots, 4);
    ck_assert_str_eq(h[1].host, "node2");
    ck_assert_int_eq(h[1].slots, 1);
    ck_assert_str_eq(h[2].host, "node3");
    ck_assert_int_eq(h[2].slots, 2);
    ck_assert_str_eq(h[3].host, "node4");
    ck_assert_int_eq(h[3].slots, 3);
    ck_assert_int_eq(h[3].max_slots, 8);
    ck_assert_str_eq(h[4].host, "10.0.0.5");
    ck_assert_int_eq(h[4].slots, 2);                      /* max_slots alone: that many slots */
    ck_assert_int_eq(h[4].max_slots, 2);
    ck_assert_int_eq(h[0].max_slots, 0);
    ck_assert_str_eq(h[5].host, "node5");
    ck_assert_int_eq(h[5].slots, 1);
    free(h);

    EXPECT_OK(cohort_hostfile_parse_text("hf", "a slots=2\r\nb\r\na slots=3\r\n", &h, &n));
    ck_assert_int_eq(n, 2);                               /* repeated hosts add up */
    ck_assert_str_eq(h[0].host, "a");
    ck_assert_int_eq(h[0].slots, 5);
    ck_assert_int_eq(h[1].slots, 1);
    free(h);
}
END_TEST

START_TEST(hostfile_errors)
{
    cohort_host_slots_t *h = (cohort_host_slots_t *)1;
    int n = 99;
    EXPECT_ERR(cohort_hostfile_parse_text("hf", "a slots=x", &h, &n), "hf:1", "'a slots=x'");
    ck_assert_ptr_null(h);
    ck_assert_int_eq(n, 0);
    EXPECT_ERR(cohort_hostfile_parse_text("hf", "a\nb slot=2\n", &h, &n), "hf:2", "'b slot=2'",
               "unknown key");
    EXPECT_ERR(cohort_hostfile_parse_text("hf", "a\n\n# c\nslots=4\n", &h, &n), "hf:4",
               "'slots=4'", "host name");
    EXPECT_ERR(cohort_hostfile_parse_text("hf", "a slots=0", &h, &n), "hf:1", "'a slots=0'");
    EXPECT_ERR(cohort_hostfile_parse_text("hf", "a slots=-1", &h, &n), "'a slots=-1'");
    EXPECT_ERR(cohort_hostfile_parse_text("hf", "a slots=99999999999", &h, &n),
               "'a slots=99999999999'");
    EXPECT_ERR(cohort_hostfile_parse_text("hf", "a slots=2 slots=3", &h, &n), "twice");
    EXPECT_ERR(cohort_hostfile_parse_text("hf", "a 4", &h, &n), "hf:1", "'a 4'", "key=value");
    EXPECT_ERR(cohort_hostfile_parse_text("hf", "a slots", &h, &n), "'a slots'");
    EXPECT_ERR(cohort_hostfile_parse_text("hf", "a slots=", &h, &n), "'a slots='");
    EXPECT_ERR(cohort_hostfile_parse_text("hf", "a slots=4x", &h, &n), "'a slots=4x'");
    EXPECT_ERR(cohort_hostfile_parse_text("hf", "a max_slots=x", &h, &n), "'a max_slots=x'");
    EXPECT_ERR(cohort_hostfile_parse_text("hf", "a slots=4 max_slots=2", &h, &n),
               "max_slots is less than slots");
    EXPECT_ERR(cohort_hostfile_parse_text("hf", "a slots=2 =3", &h, &n), "'a slots=2 =3'");
    EXPECT_ERR(cohort_hostfile_parse_text("hf", "", &h, &n), "hf", "no hosts");
    EXPECT_ERR(cohort_hostfile_parse_text("hf", "# only\n\n", &h, &n), "no hosts");
    EXPECT_ERR(cohort_hostfile_parse_text(NULL, "x y", &h, &n), "hostfile:1", "'x y'");
    char line[400];
    memset(line, 'h', 300);
    line[300] = '\0';
    EXPECT_ERR(cohort_hostfile_parse_text("hf", line, &h, &n), "hf:1", "hhhhhhhh...");
    EXPECT_ERR(cohort_hostfile_parse_text("hf", "a\x01 slots=1", &h, &n), "'a? slots=1'");
    ck_assert_ptr_null(h);
    ck_assert_int_eq(n, 0);
}
END_TEST

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
}

START_TEST(hostfile_from_file)
{
    char path[] = "/tmp/cohort_test_hostfile_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    cohort_host_slots_t *h;
    int n;

    write_file(path, "# cluster\nnode1 slots=8\nnode2 slots=8 # second\n");
    EXPECT_OK(cohort_hostfile_parse(path, &h, &n));
    ck_assert_int_eq(n, 2);
    ck_assert_str_eq(h[1].host, "node2");
    ck_assert_int_eq(h[1].slots, 8);
    free(h);

    write_file(path, "node1 slots=8\n\nnode2 slots=eight\n");
    char want[128];
    snprintf(want, sizeof want, "%s:3", path);
    EXPECT_ERR(cohort_hostfile_parse(path, &h, &n), want, "'node2 slots=eight'");

    write_file(path, "");
    EXPECT_ERR(cohort_hostfile_parse(path, &h, &n), path, "no hosts");

    FILE *f = fopen(path, "w");                           /* larger than one read buffer */
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < 2000; i++)
        fprintf(f, "host%04d slots=%d   # padding padding padding\n", i, i % 7 + 1);
    fclose(f);
    EXPECT_OK(cohort_hostfile_parse(path, &h, &n));
    ck_assert_int_eq(n, 2000);
    ck_assert_str_eq(h[1999].host, "host1999");
    ck_assert_int_eq(h[1999].slots, 1999 % 7 + 1);
    free(h);

    f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fwrite("a\0b\n", 1, 4, f);
    fclose(f);
    EXPECT_ERR(cohort_hostfile_parse(path, &h, &n), path, "NUL");

    unlink(path);
    EXPECT_ERR(cohort_hostfile_parse(path, &h, &n), path, "cannot be opened");
    /* not a regular file: refused before a byte is read (/dev/zero once grew to the cap) */
    EXPECT_ERR(cohort_hostfile_parse("/", &h, &n), "hostfile '/'", "a directory");
    EXPECT_ERR(cohort_hostfile_parse("/dev/zero", &h, &n), "'/dev/zero'", "character device");
    EXPECT_ERR(cohort_hostfile_parse(NULL, &h, &n), "no path");
    ck_assert_ptr_null(h);
}
END_TEST

/* ---- -H lists ---------------------------------------------------------------------------- */

START_TEST(hostlist_grammar)
{
    cohort_host_slots_t *h;
    int n;
    EXPECT_OK(cohort_hostlist_parse("a:2,b,c:1", &h, &n));
    ck_assert_int_eq(n, 3);
    ck_assert_str_eq(h[0].host, "a");
    ck_assert_int_eq(h[0].slots, 2);
    ck_assert_str_eq(h[1].host, "b");
    ck_assert_int_eq(h[1].slots, 1);
    ck_assert_str_eq(h[2].host, "c");
    ck_assert_int_eq(h[2].slots, 1);
    free(h);

    EXPECT_OK(cohort_hostlist_parse(" node-1.example.com:4 , 10.0.0.2 ", &h, &n));
    ck_assert_int_eq(n, 2);
    ck_assert_str_eq(h[0].host, "node-1.example.com");
    ck_assert_int_eq(h[0].slots, 4);
    ck_assert_str_eq(h[1].host, "10.0.0.2");
    free(h);

    EXPECT_OK(cohort_hostlist_parse("[::1]:3,[fd00::2],a,a:2", &h, &n));
    ck_assert_int_eq(n, 3);
    ck_assert_str_eq(h[0].host, "::1");
    ck_assert_int_eq(h[0].slots, 3);
    ck_assert_str_eq(h[1].host, "fd00::2");
    ck_assert_int_eq(h[1].slots, 1);
    ck_assert_str_eq(h[2].host, "a");
    ck_assert_int_eq(h[2].slots, 3);
    free(h);
}
END_TEST

START_TEST(hostlist_errors)
{
    cohort_host_slots_t *h = (cohort_host_slots_t *)1;
    int n = 5;
    EXPECT_ERR(cohort_hostlist_parse("", &h, &n), "-H", "no hosts");
    ck_assert_ptr_null(h);
    ck_assert_int_eq(n, 0);
    EXPECT_ERR(cohort_hostlist_parse(NULL, &h, &n), "no hosts");
    EXPECT_ERR(cohort_hostlist_parse("a,,b", &h, &n), "'a,,b'", "empty entry");
    EXPECT_ERR(cohort_hostlist_parse("a,", &h, &n), "'a,'", "empty entry");
    EXPECT_ERR(cohort_hostlist_parse("a:", &h, &n), "'a:'", "slots");
    EXPECT_ERR(cohort_hostlist_parse("b,a:x", &h, &n), "'a:x'");
    EXPECT_ERR(cohort_hostlist_parse("a:0", &h, &n), "'a:0'");
    EXPECT_ERR(cohort_hostlist_parse("a:-2", &h, &n), "'a:-2'");
    EXPECT_ERR(cohort_hostlist_parse("a: 2", &h, &n), "'a: 2'");
    EXPECT_ERR(cohort_hostlist_parse("a:99999999", &h, &n), "'a:99999999'");
    EXPECT_ERR(cohort_hostlist_parse(":2", &h, &n), "':2'", "host name");
    EXPECT_ERR(cohort_hostlist_parse("fe80::1", &h, &n), "'fe80::1'", "brackets");
    EXPECT_ERR(cohort_hostlist_parse("a:2:3", &h, &n), "'a:2:3'");
    EXPECT_ERR(cohort_hostlist_parse("[::1", &h, &n), "'[::1'", "']'");
    EXPECT_ERR(cohort_hostlist_parse("[::1]x", &h, &n), "'[::1]x'");
    EXPECT_ERR(cohort_hostlist_parse("[]:2", &h, &n), "'[]:2'");
    EXPECT_ERR(cohort_hostlist_parse("a b:2", &h, &n), "'a b:2'");
    EXPECT_ERR(cohort_hostlist_parse("a=b", &h, &n), "'a=b'");
    ck_assert_ptr_null(h);
}
END_TEST

/* ---- COHORT_ALGO ------------------------------------------------------------------------- */

START_TEST(algo_grammar)
{
    cohort_algo_spec_t s;
    EXPECT_OK(cohort_algo_spec_parse("COHORT_ALGO", "allreduce:ring;broadcast:tree", &s));
    ck_assert_int_eq(s.count, 2);
    ck_assert_str_eq(cohort_algo_spec_get(&s, "allreduce"), "ring");
    ck_assert_str_eq(cohort_algo_spec_get(&s, "broadcast"), "tree");
    ck_assert_ptr_null(cohort_algo_spec_get(&s, "reduce"));
    ck_assert_ptr_null(cohort_algo_spec_get(&s, NULL));
    ck_assert_ptr_null(cohort_algo_spec_get(NULL, "allreduce"));

    EXPECT_OK(cohort_algo_spec_parse("A", " allreduce : rd ;  reduce_scatter:ring ; barrier:"
                                     "dissemination ", &s));
    ck_assert_int_eq(s.count, 3);
    ck_assert_str_eq(cohort_algo_spec_get(&s, "allreduce"), "rd");
    ck_assert_str_eq(cohort_algo_spec_get(&s, "reduce_scatter"), "ring");
    ck_assert_str_eq(cohort_algo_spec_get(&s, "barrier"), "dissemination");

    EXPECT_OK(cohort_algo_spec_parse("A", "reduce:tree;allgather:ring;alltoall:pairwise", &s));
    ck_assert_int_eq(s.count, 3);

    /* words are case-insensitive, read in lower case */
    EXPECT_OK(cohort_algo_spec_parse("A", "AllReduce:Ring;BROADCAST:tree", &s));
    ck_assert_str_eq(cohort_algo_spec_get(&s, "allreduce"), "ring");
    ck_assert_str_eq(cohort_algo_spec_get(&s, "broadcast"), "tree");
    EXPECT_ERR(cohort_algo_spec_parse("A", "allreduce:ring;ALLREDUCE:tree", &s), "twice");

    EXPECT_OK(cohort_algo_spec_parse("A", "", &s));       /* no choices */
    ck_assert_int_eq(s.count, 0);
    EXPECT_OK(cohort_algo_spec_parse("A", "  ", &s));
    ck_assert_int_eq(s.count, 0);
    EXPECT_OK(cohort_algo_spec_parse("A", NULL, &s));
    ck_assert_int_eq(s.count, 0);
}
END_TEST

START_TEST(algo_errors)
{
    cohort_algo_spec_t s;
    EXPECT_ERR(cohort_algo_spec_parse("COHORT_ALGO", "allreduce", &s), "COHORT_ALGO",
               "'allreduce'", "':'");
    EXPECT_ERR(cohort_algo_spec_parse("A", "allreduce:", &s), "'allreduce:'", "empty");
    EXPECT_ERR(cohort_algo_spec_parse("A", ":ring", &s), "':ring'", "empty");
    EXPECT_ERR(cohort_algo_spec_parse("A", "allreduce:ring;;broadcast:tree", &s),
               "'allreduce:ring;;broadcast:tree'", "empty entry");
    EXPECT_ERR(cohort_algo_spec_parse("A", "allreduce:ring;", &s), "empty entry");
    EXPECT_ERR(cohort_algo_spec_parse("A", "allreduc:ring", &s), "'allreduc:ring'",
               "unknown collective");
    EXPECT_ERR(cohort_algo_spec_parse("A", "allreduce:Ri-ng", &s), "'allreduce:Ri-ng'",
               "algorithm name");
    EXPECT_ERR(cohort_algo_spec_parse("A", "allreduce:ring:x", &s), "'allreduce:ring:x'");
    EXPECT_ERR(cohort_algo_spec_parse("A", "allreduce:ri ng", &s), "'allreduce:ri ng'");
    EXPECT_ERR(cohort_algo_spec_parse("A", "allreduce:ring;allreduce:rd", &s),
               "'allreduce:rd'", "twice");
    EXPECT_ERR(cohort_algo_spec_parse("A", "allreduce:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                                      &s), "algorithm name");
    EXPECT_ERR(cohort_algo_spec_parse("A", "allreduce,ring", &s), "'allreduce,ring'");
}
END_TEST

/* ---- COHORT_TRANSPORTS ------------------------------------------------------------------- */

START_TEST(transports_grammar)
{
    cohort_transport_list_t l;
    EXPECT_OK(cohort_transport_list_parse("T", "shm,tcp", &l));
    ck_assert_int_eq(l.exclude, 0);
    ck_assert_int_eq(l.count, 2);
    ck_assert_str_eq(l.names[0], "shm");
    ck_assert_str_eq(l.names[1], "tcp");
    EXPECT_OK(cohort_transport_list_parse("T", "^verbs,ucx", &l));
    ck_assert_int_eq(l.exclude, 1);
    ck_assert_int_eq(l.count, 2);
    ck_assert_str_eq(l.names[0], "verbs");
    ck_assert_str_eq(l.names[1], "ucx");
    EXPECT_OK(cohort_transport_list_parse("T", " ^ nccl ", &l));
    ck_assert_int_eq(l.exclude, 1);
    ck_assert_int_eq(l.count, 1);
    ck_assert_str_eq(l.names[0], "nccl");
    EXPECT_OK(cohort_transport_list_parse("T", " tcp , my_net2 ", &l));
    ck_assert_str_eq(l.names[1], "my_net2");
    /* words are case-insensitive, read in lower case */
    EXPECT_OK(cohort_transport_list_parse("T", "SHM,Tcp", &l));
    ck_assert_str_eq(l.names[0], "shm");
    ck_assert_str_eq(l.names[1], "tcp");
    EXPECT_OK(cohort_transport_list_parse("T", "^VERBS", &l));
    ck_assert_int_eq(l.exclude, 1);
    ck_assert_str_eq(l.names[0], "verbs");
}
END_TEST

START_TEST(transports_errors)
{
    cohort_transport_list_t l;
    EXPECT_ERR(cohort_transport_list_parse("COHORT_TRANSPORTS", "", &l), "COHORT_TRANSPORTS",
               "names no transports");
    EXPECT_ERR(cohort_transport_list_parse("T", NULL, &l), "names no transports");
    EXPECT_ERR(cohort_transport_list_parse("T", "^", &l), "'^'");
    EXPECT_ERR(cohort_transport_list_parse("T", "shm,,tcp", &l), "'shm,,tcp'", "empty entry");
    EXPECT_ERR(cohort_transport_list_parse("T", "shm,", &l), "'shm,'", "empty entry");
    EXPECT_ERR(cohort_transport_list_parse("T", ",shm", &l), "empty entry");
    EXPECT_ERR(cohort_transport_list_parse("T", "Sh.m", &l), "'Sh.m'", "transport name");
    EXPECT_ERR(cohort_transport_list_parse("T", "shm,SHM", &l), "'SHM'", "twice");
    EXPECT_ERR(cohort_transport_list_parse("T", ",,,", &l), "empty entry");
    EXPECT_ERR(cohort_transport_list_parse("T", "sh-m", &l), "'sh-m'");
    EXPECT_ERR(cohort_transport_list_parse("T", "shm tcp", &l), "'shm tcp'");
    EXPECT_ERR(cohort_transport_list_parse("T", "shm,^tcp", &l), "'^tcp'");
    EXPECT_ERR(cohort_transport_list_parse("T", "shm,tcp,shm", &l), "'shm'", "twice");
    EXPECT_ERR(cohort_transport_list_parse("T", "a23456789012345678901234567890123", &l),
               "'a23456789012345678901234567890123'");
    char list[256] = "";
    for (int i = 0; i < COHORT_TRANSPORT_LIST_MAX; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%st%d", i ? "," : "", i);
    EXPECT_OK(cohort_transport_list_parse("T", list, &l));
    ck_assert_int_eq(l.count, COHORT_TRANSPORT_LIST_MAX);
    strcat(list, ",extra");
    EXPECT_ERR(cohort_transport_list_parse("T", list, &l), "'extra'", "too many");
}
END_TEST

/* ---- settings: the table, cohort.conf, cohort_config_check --------------------------------- */

/* A settings file for COHORT_CONF (the path is written into path). */
static void conf_file(char *path, const char *text)
{
    strcpy(path, "/tmp/cohort_test_conf_XXXXXX");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    write_file(path, text);
    setenv("COHORT_CONF", path, 1);
    cohort_config_reset();
}

/* Every default of the table is valid, and every setting has a check that runs: the core's
 * and those of the plugins' tables (read from the build tree, as a communicator's creation
 * would). */
START_TEST(config_table)
{
    cohort_plugins_read_settings();
    size_t n = cohort_settings_count();
    ck_assert_uint_gt(n, 20);
    ck_assert_msg(cohort_setting_find("COHORT_SHM_CMA") && cohort_setting_find("COHORT_SOCKET_NSOCKS"),
                  "the shm and tcp plugins' tables are not in");
    ck_assert_str_eq(cohort_setting_find("COHORT_SHM_CMA")->owner, "shm");
    ck_assert_ptr_null(cohort_setting_find("COHORT_TIMEOUT")->owner);
    cohort_log_enabled(COHORT_LOG_WARN, NULL);   /* the logger keeps main's NONE */
    for (size_t i = 0; i < n; i++) unsetenv(cohort_setting_at(i)->name);
    setenv("COHORT_CONF", "/dev/null", 1);
    cohort_config_reset();
    EXPECT_OK(cohort_config_check());
    for (size_t i = 0; i < n; i++) {
        const cohort_setting_t *t = cohort_setting_at(i);
        ck_assert_ptr_eq(cohort_setting_find(t->name), t);
        if (t->kind == COHORT_SET_LONG || t->kind == COHORT_SET_DOUBLE)
            ck_assert_msg(t->min <= t->max, "%s: empty range", t->name);
        if (!strcmp(t->name, "COHORT_CONF")) continue;
        /* junk is refused by every setting but free text (unless its owner checks it), naming
         * it */
        setenv(t->name, "#junk#", 1);
        cohort_status_t st = cohort_config_check();
        if (t->kind == COHORT_SET_TEXT && !t->check)
            ck_assert_msg(st == COHORT_SUCCESS, "%s: %s", t->name, cohort_last_error());
        else
            ck_assert_msg(st == COHORT_ERR_INVALID_ARG && strstr(cohort_last_error(), t->name) &&
                          strstr(cohort_last_error(), "#junk#"), "%s: %d '%s'", t->name,
                          (int)st, cohort_last_error());
        /* set but empty (or blank) is refused by every setting, naming it */
        setenv(t->name, i % 2 ? "" : "  ", 1);
        st = cohort_config_check();
        ck_assert_msg(st == COHORT_ERR_INVALID_ARG && strstr(cohort_last_error(), t->name) &&
                      strstr(cohort_last_error(), "is set but empty"), "%s='': %d '%s'",
                      t->name, (int)st, cohort_last_error());
        unsetenv(t->name);
    }
    ck_assert_ptr_null(cohort_setting_find("COHORT_NOSUCH"));
}
END_TEST

START_TEST(config_numbers)
{
    setenv("COHORT_CONF", "/dev/null", 1);
    static const struct { const char *var, *value; int ok; } cases[] = {
        { "COHORT_CHUNK_SIZE", "64", 1 }, { "COHORT_CHUNK_SIZE", "63", 0 },
        { "COHORT_CHUNK_SIZE", " 4096 ", 1 }, { "COHORT_CHUNK_SIZE", "12abc", 0 },
        { "COHORT_CHUNK_SIZE", "", 0 }, { "COHORT_CHUNK_SIZE", "1073741825", 0 },
        { "COHORT_CHUNK_SIZE", "99999999999999999999999", 0 }, { "COHORT_CHUNK_SIZE", "0x40", 0 },
        { "COHORT_TIMEOUT", "0.5", 1 }, { "COHORT_TIMEOUT", "1e999", 0 },
        { "COHORT_TIMEOUT", "nan", 0 }, { "COHORT_TIMEOUT", "-1", 0 },
        { "COHORT_SOCKET_NSOCKS", "16", 1 }, { "COHORT_SOCKET_NSOCKS", "17", 0 },
        { "COHORT_SHM_CMA", "0", 1 }, { "COHORT_SHM_CMA", "2", 0 },
        { "COHORT_SHM_MAP", "0", 1 }, { "COHORT_SHM_MAP", "-1", 0 },
        { "COHORT_SHM_COLL_CHUNK", "0", 1 }, { "COHORT_SHM_COLL_CHUNK", "4096", 1 },
        { "COHORT_SHM_COLL_CHUNK", "4095", 0 }, { "COHORT_SHM_COLL_CHUNK", "67108865", 0 },
        { "COHORT_SHM_EAGER_LIMIT", "0", 1 }, { "COHORT_SHM_EAGER_LIMIT", "-1", 0 },
        { "COHORT_SHM_EAGER_LIMIT", "1073741824", 1 },
        { "COHORT_SHM_EAGER_LIMIT", "1073741825", 0 },
        { "COHORT_DEBUG", "info", 1 }, { "COHORT_DEBUG", "Trace", 1 }, { "COHORT_DEBUG", "", 0 },
        { "COHORT_DEBUG", "WARNING", 0 }, { "COHORT_HIERARCHICAL", "auto", 1 },
        { "COHORT_HIERARCHICAL", "yes", 0 }, { "COHORT_UCX_ZCOPY", "1", 1 },
        { "COHORT_UCX_ZCOPY", "auto", 1 }, { "COHORT_UCX_ZCOPY", "yes", 0 }, { "COHORT_DEBUG_SUBSYS", "^init,net", 1 },
        { "COHORT_DEBUG_SUBSYS", "all", 1 }, { "COHORT_DEBUG_SUBSYS", "init,", 0 },
        { "COHORT_DEBUG_SUBSYS", "in it", 0 }, { "COHORT_ALGO", "", 0 },
        { "COHORT_ALGO", "allreduce:ring;broadcast:tree", 1 }, { "COHORT_ALGO", "barrier:shm", 1 },
        { "COHORT_ALGO", "allreduce:tree", 0 }, { "COHORT_TRANSPORTS", "^nosuch", 0 },
        { "COHORT_TRANSPORTS", "nosuch", 0 }, { "COHORT_PLUGIN_PATH", "/tmp::/", 0 },
        { "COHORT_PLUGIN_PATH", "/tmp:/etc/passwd", 0 }, { "COHORT_RENDEZVOUS", "tcp://[::1]:5", 1 },
        { "COHORT_RENDEZVOUS", "tcp://host", 0 }, { "COHORT_RENDEZVOUS", "file:///tmp", 1 },
        { "COHORT_SOCKET_IFNAME", "lo", 1 }, { "COHORT_SOCKET_IFNAME", "^=nosuchif0", 1 },
        { "COHORT_SOCKET_IFNAME", "127.0.0.0/8", 1 }, { "COHORT_SOCKET_IFNAME", "192.0.2.77/32", 0 },
        { "COHORT_HOSTID", "", 0 },
        /* one grammar (docs/reliability.md): decimal numbers, words in any case, no empty
         * entries or values, known subsystems, settings of absent plugins checked too */
        { "COHORT_TIMEOUT", "0x10", 0 }, { "COHORT_TIMEOUT", "16", 1 },
        { "COHORT_STALL_WARN", "0x1p3", 0 }, { "COHORT_STALL_WARN", "8", 1 },
        { "COHORT_STALL_WARN", "inf", 0 }, { "COHORT_SPIN", "0x10", 0 },
        { "COHORT_PLUGIN_PATH", ":::", 0 }, { "COHORT_PLUGIN_PATH", "/tmp:", 0 },
        { "COHORT_PLUGIN_PATH", ":/tmp", 0 }, { "COHORT_PLUGIN_PATH", "/tmp:/", 1 },
        { "COHORT_TRANSPORTS", ",,,", 0 }, { "COHORT_TRANSPORTS", "SHM", 1 },
        { "COHORT_TRANSPORTS", "Shm,TCP", 1 }, { "COHORT_TRANSPORTS", "^VERBS", 1 },
        { "COHORT_TRANSPORTS", "^verb", 0 }, { "COHORT_TRANSPORTS", "^ucx,verbs", 1 },
        { "COHORT_DEBUG", "Info", 1 }, { "COHORT_DEBUG", " warn ", 1 },
        { "COHORT_DEBUG", "abc", 0 }, { "COHORT_HIERARCHICAL", "AUTO", 1 },
        { "COHORT_HIERARCHICAL", "2", 0 }, { "COHORT_UCX_ZCOPY", "Auto", 1 },
        { "COHORT_DEBUG_SUBSYS", "nett", 0 }, { "COHORT_DEBUG_SUBSYS", "INIT,Net", 1 },
        { "COHORT_DEBUG_SUBSYS", "^init,nett", 0 }, { "COHORT_DEBUG_SUBSYS", "shm", 1 },
        { "COHORT_DEBUG_SUBSYS", "tcp,stall,jobctl,mem", 1 }, { "COHORT_DEBUG_SUBSYS", "ALL", 1 },
        { "COHORT_DEBUG_SUBSYS", " ^init , net ", 1 }, { "COHORT_DEBUG_SUBSYS", "in it", 0 },
        { "COHORT_DEBUG_SUBSYS", "all,init", 0 }, { "COHORT_DEBUG_SUBSYS", "^", 0 },
        { "COHORT_ALGO", "AllReduce:Ring", 1 }, { "COHORT_ALGO", "allreduce:ring;;", 0 },
        { "COHORT_IB_HCA", "=", 0 }, { "COHORT_IB_HCA", "^", 0 }, { "COHORT_IB_HCA", ",,", 0 },
        { "COHORT_IB_HCA", "^=", 0 }, { "COHORT_IB_HCA", "mlx5_0:0", 0 },
        { "COHORT_IB_HCA", "mlx5_0:1,mlx5_1", 1 }, { "COHORT_IB_HCA", "^=mlx5_1", 1 },
        { "COHORT_IB_HCA", "mlx5_0,", 0 }, { "COHORT_IB_HCA", "mlx5 0", 0 },
        { "COHORT_SOCKET_IFNAME", "lo,,", 0 }, { "COHORT_SOCKET_IFNAME", " ", 0 },
        { "COHORT_DEBUG_FILE", "/tmp/c.%h.%p.%r.log", 1 }, { "COHORT_DEBUG_FILE", "/tmp/c", 1 },
        { "COHORT_DEBUG_FILE", "/tmp/100%%", 1 }, { "COHORT_DEBUG_FILE", "/tmp/%d.log", 0 },
        { "COHORT_DEBUG_FILE", "/tmp/c%", 0 }, { "COHORT_DEBUG_FILE", "", 0 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        setenv(cases[i].var, cases[i].value, 1);
        cohort_status_t st = cohort_config_check();
        if (cases[i].ok) {
            ck_assert_msg(st == COHORT_SUCCESS, "%s='%s': %s", cases[i].var, cases[i].value,
                          cohort_last_error());
        } else {
            char quoted[128];
            snprintf(quoted, sizeof quoted, "%s", cases[i].value);
            ck_assert_msg(st == COHORT_ERR_INVALID_ARG && strstr(cohort_last_error(), cases[i].var)
                          && strstr(cohort_last_error(), quoted), "%s='%s': %d '%s'",
                          cases[i].var, cases[i].value, (int)st, cohort_last_error());
        }
        unsetenv(cases[i].var);
    }
}
END_TEST

START_TEST(config_file)
{
    char path[64];
    long v = 0;
    conf_file(path, "# comment\n\nCOHORT_SPIN = 77   # trailing comment\n  COHORT_ALGO=allreduce:ring\n");
    EXPECT_OK(cohort_config_check());
    ck_assert_str_eq(cohort_config_get("COHORT_ALGO"), "allreduce:ring");
    EXPECT_OK(cohort_config_long("COHORT_SPIN", 0, 1000, &v));
    ck_assert_int_eq(v, 77);
    ck_assert_ptr_nonnull(strstr(cohort_config_source("COHORT_SPIN"), path));
    setenv("COHORT_SPIN", "5", 1);   /* the environment wins */
    EXPECT_OK(cohort_config_long("COHORT_SPIN", 0, 1000, &v));
    ck_assert_int_eq(v, 5);
    ck_assert_str_eq(cohort_config_source("COHORT_SPIN"), "env");
    unsetenv("COHORT_SPIN");
    char where[96];

    /* a bad value names the variable, the text, the file and the line */
    conf_file(path, "COHORT_CHUNK_SIZE = 4096\nCOHORT_SPIN = 12abc\n");
    snprintf(where, sizeof where, "(set in %s, line 2)", path);
    EXPECT_ERR(cohort_config_check(), "COHORT_SPIN", "'12abc'", where);
    setenv("COHORT_SPIN", "5", 1);   /* overridden, but still a bad line */
    EXPECT_ERR(cohort_config_check(), "COHORT_SPIN", "'12abc'", where);
    unsetenv("COHORT_SPIN");

    /* the file's own problems: the first is reported, naming file, line and text */
    static const struct { const char *text, *line, *needle; } bad[] = {
        { "COHORT_SPIN = 1\njust some words\n", ":2:", "'just some words' is not NAME = value" },
        { "COHORT_SPINN = 1\n", ":1:", "'COHORT_SPINN' is not a setting" },
        { "\n\nsocket_ifname = eth0\n", ":3:", "'socket_ifname' is not a setting" },
        { "COHORT_CONF = /etc/other.conf\n", ":1:", "COHORT_CONF" },
        { "COHORT_SPIN = 1\nCOHORT_SPIN = 2\n", ":2:", "set a second time (first on line 1)" },
        { "= 5\n", ":1:", "'' is not a setting" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        conf_file(path, bad[i].text);
        snprintf(where, sizeof where, "%s%s", path, bad[i].line);
        EXPECT_ERR(cohort_config_check(), where, bad[i].needle);
        unlink(path);
    }
    char *longline = malloc(3000);
    ck_assert_ptr_nonnull(longline);
    memset(longline, 'x', 2998);
    memcpy(longline, "COHORT_HOSTID = ", 16);
    longline[2998] = '\n';
    longline[2999] = '\0';
    conf_file(path, longline);
    free(longline);
    snprintf(where, sizeof where, "%s:1:", path);
    EXPECT_ERR(cohort_config_check(), where, "longer than");
    unlink(path);

    setenv("COHORT_CONF", "/nonexistent/cohort.conf", 1);
    cohort_config_reset();
    EXPECT_ERR(cohort_config_check(), "COHORT_CONF='/nonexistent/cohort.conf' cannot be opened");
}
END_TEST

/* Readers get one spelling of a word, whatever the case it was set in; checks and messages
 * see the text as set. */
START_TEST(config_words_read_canonical)
{
    setenv("COHORT_CONF", "/dev/null", 1);
    cohort_config_reset();
    cohort_plugins_read_settings();   /* a plugin's words too (COHORT_UCX_ZCOPY) */
    static const struct { const char *var, *set, *read; } cases[] = {
        { "COHORT_DEBUG", "Info", "INFO" }, { "COHORT_DEBUG", " trace ", "TRACE" },
        { "COHORT_DEBUG", "WARN", "WARN" }, { "COHORT_HIERARCHICAL", "AUTO", "auto" },
        { "COHORT_UCX_ZCOPY", "Auto", "auto" }, { "COHORT_TRANSPORTS", "^SHM,Tcp", "^shm,tcp" },
        { "COHORT_ALGO", "AllReduce:Ring", "allreduce:ring" },
        { "COHORT_DEBUG_SUBSYS", "INIT,net", "init,net" },
        { "COHORT_DEBUG_SUBSYS", " ^ init , net ", "^init,net" },
        { "COHORT_TRANSPORTS", "shm, tcp", "shm,tcp" },
        { "COHORT_ALGO", " allreduce : ring ; broadcast:tree", "allreduce:ring;broadcast:tree" },
        { "COHORT_SOCKET_IFNAME", "ETH0", "ETH0" },     /* the system's names: exact */
        { "COHORT_HOSTID", "Node-A", "Node-A" }, { "COHORT_DEBUG", "Loud", "Loud" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        setenv(cases[i].var, cases[i].set, 1);
        const char *got = cohort_config_get(cases[i].var);
        ck_assert_msg(got && !strcmp(got, cases[i].read), "%s='%s' reads '%s', want '%s'",
                      cases[i].var, cases[i].set, got ? got : "(null)", cases[i].read);
        ck_assert_str_eq(cohort_config_value(cases[i].var), cases[i].set);
        ck_assert_ptr_eq(cohort_config_get(cases[i].var), got);   /* stable */
        unsetenv(cases[i].var);
    }
    /* a bad word is quoted as set */
    setenv("COHORT_TRANSPORTS", "SHM,NoSuch", 1);
    EXPECT_ERR(cohort_config_check(), "COHORT_TRANSPORTS", "nosuch");
    setenv("COHORT_DEBUG_SUBSYS", "Init,Nett", 1);
    unsetenv("COHORT_TRANSPORTS");
    EXPECT_ERR(cohort_config_check(), "COHORT_DEBUG_SUBSYS='Init,Nett'", "'Nett'");
    unsetenv("COHORT_DEBUG_SUBSYS");
}
END_TEST

/* Every file cohort reads whole: a regular file under its cap, or refused at once. */
START_TEST(file_read_caps)
{
    char *text = (char *)1, why[160];
    size_t len = 99;
    ck_assert_int_eq(cohort_file_read("/dev/null", 16, &text, &len, why, sizeof why), 0);
    ck_assert_uint_eq(len, 0);
    ck_assert_str_eq(text, "");
    free(text);
    ck_assert_int_eq(cohort_file_read("/dev/zero", 16, &text, &len, why, sizeof why), EINVAL);
    ck_assert_ptr_null(text);
    ck_assert_msg(strstr(why, "character device"), "%s", why);
    ck_assert_int_eq(cohort_file_read("/", 16, &text, &len, why, sizeof why), EINVAL);
    ck_assert_msg(strstr(why, "a directory"), "%s", why);
    ck_assert_int_eq(cohort_file_read("/nonexistent/x", 16, &text, &len, why, sizeof why),
                     ENOENT);
    char dir[] = "/tmp/cohort_test_files_XXXXXX", path[96];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/fifo", dir);
    ck_assert_int_eq(mkfifo(path, 0600), 0);          /* no writer: must not block */
    ck_assert_int_eq(cohort_file_read(path, 16, &text, &len, why, sizeof why), EINVAL);
    ck_assert_msg(strstr(why, "a pipe"), "%s", why);
    ck_assert_int_eq(cohort_file_check(path, 16, why, sizeof why), EINVAL);
    unlink(path);
    snprintf(path, sizeof path, "%s/f", dir);
    write_file(path, "0123456789abcdef");             /* exactly the cap */
    ck_assert_int_eq(cohort_file_read(path, 16, &text, &len, why, sizeof why), 0);
    ck_assert_uint_eq(len, 16);
    ck_assert_str_eq(text, "0123456789abcdef");
    free(text);
    ck_assert_int_eq(cohort_file_read(path, 15, &text, &len, why, sizeof why), EFBIG);
    ck_assert_msg(strstr(why, "16 bytes") && strstr(why, "15"), "%s", why);
    ck_assert_int_eq(cohort_file_check(path, 15, why, sizeof why), EFBIG);
    ck_assert_int_eq(cohort_file_check(path, 16, why, sizeof why), 0);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fwrite("a\0b", 1, 3, f);
    fclose(f);
    ck_assert_int_eq(cohort_file_read(path, 16, &text, &len, why, sizeof why), EILSEQ);
    unlink(path);
    rmdir(dir);
}
END_TEST

/* COHORT_CONF naming something that is not a settings file fails at once, naming it: /dev/zero
 * and a FIFO once made every rank (and cohort-info) spin or block forever. */
START_TEST(config_file_capped)
{
    char dir[] = "/tmp/cohort_test_conf_XXXXXX", path[96];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    static const struct { const char *path, *needle; } bad[] = {
        { "/dev/zero", "is a character device, not a regular file" },
        { "/", "is a directory" },
        { "", "COHORT_CONF='' is set but empty" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("COHORT_CONF", bad[i].path, 1);
        cohort_config_reset();
        EXPECT_ERR(cohort_config_check(), "COHORT_CONF", bad[i].needle);
    }
    snprintf(path, sizeof path, "%s/fifo", dir);
    ck_assert_int_eq(mkfifo(path, 0600), 0);
    setenv("COHORT_CONF", path, 1);
    cohort_config_reset();
    EXPECT_ERR(cohort_config_check(), "COHORT_CONF", path, "a pipe");
    unlink(path);
    /* over 1 MiB: comment lines, so only the size is wrong */
    snprintf(path, sizeof path, "%s/big.conf", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < 20000; i++) fputs("# a comment line of some sixty characters, again and again\n", f);
    fclose(f);
    setenv("COHORT_CONF", path, 1);
    cohort_config_reset();
    EXPECT_ERR(cohort_config_check(), "COHORT_CONF", path, "more than the 1048576");
    unlink(path);
    rmdir(dir);
    setenv("COHORT_CONF", "/dev/null", 1);
    cohort_config_reset();
    EXPECT_OK(cohort_config_check());
}
END_TEST

/* COHORT_CONF naming a missing file, with the logger not yet started: the logger reads its own
 * settings through the file's lock, which the file's problems were once logged under (a hang). */
START_TEST(config_file_problem_does_not_hang)
{
    setenv("COHORT_CONF", "/nonexistent/cohort.conf", 1);
    unsetenv("COHORT_DEBUG");
    unsetenv("COHORT_DEBUG_SUBSYS");
    cohort_config_reset();
    cohort_log_reset();
    ck_assert_ptr_null(cohort_config_get("COHORT_SOCKET_IFNAME"));
    ck_assert_int_eq(cohort_log_enabled(COHORT_LOG_WARN, "init"), 1);
    setenv("COHORT_DEBUG", "NONE", 1);
    cohort_log_reset();
}
END_TEST

static Suite *parse_suite(void)
{
    Suite *s = suite_create("parse");
    TCase *num = tcase_create("numbers");
    tcase_add_test(num, long_ok);
    tcase_add_test(num, long_errors);
    tcase_add_test(num, double_ok);
    tcase_add_test(num, double_errors);
    tcase_add_test(num, size_ok);
    tcase_add_test(num, size_errors);
    suite_add_tcase(s, num);

    TCase *ifs = tcase_create("ifspec");
    tcase_add_test(ifs, ifspec_prefix);
    tcase_add_test(ifs, ifspec_exact_and_exclude);
    tcase_add_test(ifs, ifspec_cidr);
    tcase_add_test(ifs, ifspec_mixed_and_unparsed);
    tcase_add_test(ifs, ifspec_errors);
    suite_add_tcase(s, ifs);

    TCase *hosts = tcase_create("hosts");
    tcase_add_test(hosts, hostfile_grammar);
    tcase_add_test(hosts, hostfile_errors);
    tcase_add_test(hosts, hostfile_from_file);
    tcase_add_test(hosts, hostlist_grammar);
    tcase_add_test(hosts, hostlist_errors);
    suite_add_tcase(s, hosts);

    TCase *lists = tcase_create("lists");
    tcase_add_test(lists, algo_grammar);
    tcase_add_test(lists, algo_errors);
    tcase_add_test(lists, transports_grammar);
    tcase_add_test(lists, transports_errors);
    suite_add_tcase(s, lists);

    TCase *conf = tcase_create("settings");
    tcase_set_timeout(conf, 30);
    tcase_add_test(conf, config_table);
    tcase_add_test(conf, config_numbers);
    tcase_add_test(conf, config_file);
    tcase_add_test(conf, config_file_problem_does_not_hang);
    tcase_add_test(conf, config_words_read_canonical);
    tcase_add_test(conf, file_read_caps);
    tcase_add_test(conf, config_file_capped);
    suite_add_tcase(s, conf);
    return s;
}

int main(void)
{
    setenv("COHORT_DEBUG", "NONE", 1);   /* the errors tested here need not be logged too */
    SRunner *sr = srunner_create(parse_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed != 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
