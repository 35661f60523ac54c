/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests for core/plugin_loader.c against the deliberately broken plugins of tests/plugins/
 * (and the good libcohort-future.so, whose struct is larger than ABI 1.0's). Each refusal must
 * give the right status and a cohort_last_error() that names the file and the reason. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1   /* mkdtemp, setenv */
#endif
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cohort/cohort.h"
#include "core/config.h"
#include "core/plugin_loader.h"

#if !defined(TEST_PLUGIN_DIR) || !defined(TEST_PSETS_DIR)
#error "build with -DTEST_PLUGIN_DIR and -DTEST_PSETS_DIR (tests/plugins/local.mk)"
#endif

static char path_buf[4096];

static const char *plugin(const char *name)
{
    snprintf(path_buf, sizeof path_buf, "%s/libcohort-%s.so", TEST_PLUGIN_DIR, name);
    return path_buf;
}

#define ck_assert_has(hay, needle)                                                       \
    ck_assert_msg(strstr((hay), (needle)) != NULL, "'%s' not found in '%s'", (needle), (hay))

/* Opening name fails with want; the message names the file and contains every word. */
static void expect_refused(const char *name, cohort_status_t want, const char *const *words)
{
    cohort_plugin_t *p = (cohort_plugin_t *)&p;
    const char *path = plugin(name);
    ck_assert_int_eq(cohort_plugin_open(path, &p), want);
    ck_assert_ptr_null(p);
    const char *e = cohort_last_error();
    ck_assert_has(e, path);
    for (; *words; words++)
        ck_assert_has(e, *words);
}

/* ---- cohort_plugin_open on one file ----------------------------------------------------- */

START_TEST(refuses_unknown_major)
{
    char major[32];
    snprintf(major, sizeof major, "ABI %d.", COHORT_PLUGIN_ABI_MAJOR);   /* supported range */
    expect_refused("badabi", COHORT_ERR_PLUGIN, (const char *[]){ "ABI 99", major, NULL });
}
END_TEST

/* The bounds of the versions accepted: the major must be this cohort's exactly (one below or one
 * above is refused, whatever the minor), and any minor of it is accepted, from 0 (with the 1.0
 * struct size) to 0xffff. The only wrong-major plugin used to say 99, which a loader accepting
 * MAJOR + 1 passed as well. */
START_TEST(refuses_major_minus_one)
{
    char abi[32], supported[32];
    snprintf(abi, sizeof abi, "ABI %d.65535", COHORT_PLUGIN_ABI_MAJOR - 1);
    snprintf(supported, sizeof supported, "supports ABI %d.x", COHORT_PLUGIN_ABI_MAJOR);
    expect_refused("abiprev", COHORT_ERR_PLUGIN, (const char *[]){ abi, supported, NULL });
}
END_TEST

START_TEST(refuses_major_plus_one)
{
    char abi[32], supported[32];
    snprintf(abi, sizeof abi, "ABI %d.0", COHORT_PLUGIN_ABI_MAJOR + 1);
    snprintf(supported, sizeof supported, "supports ABI %d.x", COHORT_PLUGIN_ABI_MAJOR);
    expect_refused("abinext", COHORT_ERR_PLUGIN, (const char *[]){ abi, supported, NULL });
}
END_TEST

START_TEST(accepts_every_minor_of_the_major)
{
    static const struct { const char *name; unsigned minor; size_t size; } ok[] = {
        { "abimin", 0, COHORT_TRANSPORT_V1_MIN_SIZE },
        { "abimax", 0xffff, sizeof(cohort_transport_v1_t) },
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        cohort_plugin_t *p = NULL;
        ck_assert_msg(cohort_plugin_open(plugin(ok[i].name), &p) == COHORT_SUCCESS, "%s: %s",
                      ok[i].name, cohort_last_error());
        ck_assert_ptr_nonnull(p);
        ck_assert_str_eq(p->name, ok[i].name);
        ck_assert_uint_eq(p->ops->abi_version >> 16, COHORT_PLUGIN_ABI_MAJOR);
        ck_assert_uint_eq(p->ops->abi_version & 0xffff, ok[i].minor);
        ck_assert_uint_eq(p->ops->size, ok[i].size);
        cohort_plugin_close(p);
    }
}
END_TEST

START_TEST(refuses_missing_symbol)
{
    expect_refused("nosym", COHORT_ERR_PLUGIN, (const char *[]){ COHORT_PLUGIN_SYMBOL, NULL });
}
END_TEST

START_TEST(refuses_small_struct)
{
    char have[32], need[32];
    snprintf(have, sizeof have, "%zu", (size_t)COHORT_TRANSPORT_V1_MIN_SIZE - sizeof(void *));
    snprintf(need, sizeof need, "%zu", (size_t)COHORT_TRANSPORT_V1_MIN_SIZE);
    expect_refused("small", COHORT_ERR_PLUGIN, (const char *[]){ have, need, NULL });
}
END_TEST

START_TEST(refuses_null_function)
{
    expect_refused("nullfn", COHORT_ERR_PLUGIN, (const char *[]){ "isend", "NULL", NULL });
}
END_TEST

START_TEST(refuses_wrong_name)
{
    expect_refused("misname", COHORT_ERR_PLUGIN, (const char *[]){ "othername", "'misname'",
                                                                    NULL });
}
END_TEST

START_TEST(unavailable_keeps_plugin_message)
{
    expect_refused("unavail", COHORT_ERR_UNSUPPORTED,
                   (const char *[]){ "unavailable: no such device", NULL });
}
END_TEST

START_TEST(refuses_missing_file)
{
    expect_refused("nonexistent", COHORT_ERR_PLUGIN, (const char *[]){ NULL });
}
END_TEST

START_TEST(refuses_non_elf_file)
{
    char dir[] = "/tmp/cohort-test-loader.XXXXXX", path[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/libcohort-junk.so", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("this is not a shared object\n", f);
    fclose(f);
    cohort_plugin_t *p = NULL;
    cohort_status_t st = cohort_plugin_open(path, &p);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", cohort_last_error());
    unlink(path);
    rmdir(dir);
    ck_assert_int_eq(st, COHORT_ERR_PLUGIN);
    ck_assert_ptr_null(p);
    ck_assert_has(msg, path);
}
END_TEST

START_TEST(refuses_badly_named_file)
{
    cohort_plugin_t *p = NULL;
    ck_assert_int_eq(cohort_plugin_open(TEST_PLUGIN_DIR "/future.so", &p), COHORT_ERR_PLUGIN);
    ck_assert_ptr_null(p);
    ck_assert_has(cohort_last_error(), "libcohort-<name>.so");
}
END_TEST

START_TEST(accepts_larger_future_struct)
{
    cohort_plugin_t *p = NULL;
    ck_assert_int_eq(cohort_plugin_open(plugin("future"), &p), COHORT_SUCCESS);
    ck_assert_ptr_nonnull(p);
    ck_assert_str_eq(p->name, "future");
    ck_assert_str_eq(p->path, plugin("future"));
    ck_assert_uint_gt(p->ops->size, sizeof(cohort_transport_v1_t));
    ck_assert_uint_eq(p->ops->abi_version >> 16, COHORT_PLUGIN_ABI_MAJOR);
    ck_assert_uint_eq(p->ops->abi_version & 0xffff, 7);
    ck_assert_str_eq(p->ops->version, "1.7-test");
    ck_assert_int_eq(p->attr.scope, COHORT_SCOPE_NETWORK);      /* get_attr was called */
    cohort_plugin_close(p);
}
END_TEST

START_TEST(host_table_is_v1)
{
    const cohort_host_v1_t *h = cohort_plugin_host();
    ck_assert_ptr_nonnull(h);
    ck_assert_uint_ge(h->size, sizeof(cohort_host_v1_t));
    ck_assert_uint_eq(h->abi_version >> 16, COHORT_PLUGIN_ABI_MAJOR);
    ck_assert(h->log && h->error && h->setting && h->setting_long && h->netifs && h->auth);
}
END_TEST

/* ---- cohort_plugins_get / cohort_plugins_report ------------------------------------------ */

static const cohort_plugin_report_t *report_of(const char *name)
{
    int n = 0;
    const cohort_plugin_report_t *r = cohort_plugins_report(&n);
    for (int i = 0; i < n; i++)
        if (!strcmp(r[i].name, name))
            return &r[i];
    ck_abort_msg("no report for plugin '%s'", name);
    return NULL;
}

static void expect_report(const char *name, int loaded, const char *const *words)
{
    const cohort_plugin_report_t *r = report_of(name);
    ck_assert_msg(r->loaded == loaded, "%s: loaded=%d (%s)", name, r->loaded, r->why);
    ck_assert_str_eq(r->path, plugin(name));
    for (; *words; words++)
        ck_assert_has(r->why, *words);
}

static int in_list(cohort_plugin_t *const *list, int count, const char *name)
{
    for (int i = 0; i < count; i++)
        if (!strcmp(list[i]->name, name))
            return 1;
    return 0;
}

static void use_test_dir(const char *transports)
{
    setenv("COHORT_PLUGIN_PATH", TEST_PLUGIN_DIR, 1);
    if (transports)
        setenv("COHORT_TRANSPORTS", transports, 1);
    else
        unsetenv("COHORT_TRANSPORTS");
}

START_TEST(allow_list_loads_exactly_that)
{
    use_test_dir("future");
    cohort_plugin_t *const *list = NULL;
    int count = -1;
    ck_assert_int_eq(cohort_plugins_get(&list, &count), COHORT_SUCCESS);
    ck_assert_int_eq(count, 1);
    ck_assert_str_eq(list[0]->name, "future");
    expect_report("future", 1, (const char *[]){ "1.7-test", "ABI 1.7", NULL });
    expect_report("badabi", 0, (const char *[]){ "COHORT_TRANSPORTS", NULL });
    cohort_plugins_release();

    /* Released: the next get reads the settings again. */
    use_test_dir("^future");
    int st = cohort_plugins_get(&list, &count);
    if (st == COHORT_SUCCESS) {
        ck_assert(!in_list(list, count, "future"));
        cohort_plugins_release();
    }
    expect_report("future", 0, (const char *[]){ "excluded", NULL });
}
END_TEST

START_TEST(allow_list_refuses_broken_member)
{
    use_test_dir("future,badabi");
    cohort_plugin_t *const *list = NULL;
    int count = -1;
    ck_assert_int_eq(cohort_plugins_get(&list, &count), COHORT_ERR_PLUGIN);
    ck_assert_int_eq(count, 0);
    const char *e = cohort_last_error();
    ck_assert_has(e, "badabi");
    ck_assert_has(e, "ABI 99");
    expect_report("badabi", 0, (const char *[]){ "ABI 99", NULL });
}
END_TEST

START_TEST(allow_list_unknown_name)
{
    use_test_dir("nosuchtransport");
    cohort_plugin_t *const *list = NULL;
    int count = -1;
    ck_assert_int_eq(cohort_plugins_get(&list, &count), COHORT_ERR_PLUGIN);
    const char *e = cohort_last_error();
    ck_assert_has(e, "nosuchtransport");
    ck_assert_has(e, TEST_PLUGIN_DIR);      /* says where it looked */
    ck_assert_has(e, "future");             /* and what it found there */
}
END_TEST

START_TEST(exclude_list_reports_every_refusal)
{
    use_test_dir("^future,unavail");
    cohort_plugin_t *const *list = NULL;
    int count = -1;
    /* Other transports (tcp from the build tree) may load or not; the test ones must not. */
    if (cohort_plugins_get(&list, &count) == COHORT_SUCCESS) {
        ck_assert(!in_list(list, count, "future"));
        ck_assert(!in_list(list, count, "unavail"));
        ck_assert(!in_list(list, count, "badabi"));
        cohort_plugins_release();
    }
    expect_report("future", 0, (const char *[]){ "excluded", NULL });
    expect_report("unavail", 0, (const char *[]){ "excluded", NULL });
    char major[32];
    snprintf(major, sizeof major, "ABI %d.", COHORT_PLUGIN_ABI_MAJOR);
    expect_report("badabi", 0, (const char *[]){ "ABI 99", major, NULL });
    expect_report("nosym", 0, (const char *[]){ COHORT_PLUGIN_SYMBOL, NULL });
    expect_report("small", 0, (const char *[]){ "smaller", NULL });
    expect_report("nullfn", 0, (const char *[]){ "isend", NULL });
    expect_report("misname", 0, (const char *[]){ "othername", NULL });
}
END_TEST

START_TEST(no_filter_loads_the_good_one)
{
    use_test_dir(NULL);
    cohort_plugin_t *const *list = NULL;
    int count = -1;
    ck_assert_int_eq(cohort_plugins_get(&list, &count), COHORT_SUCCESS);
    ck_assert(in_list(list, count, "future"));
    for (int i = 0; i < count; i++)
        ck_assert_msg(strcmp(list[i]->name, "badabi") && strcmp(list[i]->name, "nosym") &&
                      strcmp(list[i]->name, "small") && strcmp(list[i]->name, "nullfn") &&
                      strcmp(list[i]->name, "misname") && strcmp(list[i]->name, "unavail") &&
                      strcmp(list[i]->name, "abiprev") && strcmp(list[i]->name, "abinext"),
                      "broken plugin %s was loaded", list[i]->name);
    expect_report("future", 1, (const char *[]){ "1.7-test", NULL });
    expect_report("abimin", 1, (const char *[]){ "abi-test", NULL });
    expect_report("abimax", 1, (const char *[]){ "abi-test", NULL });
    expect_report("abiprev", 0, (const char *[]){ "refused", NULL });
    expect_report("abinext", 0, (const char *[]){ "refused", NULL });
    expect_report("unavail", 0, (const char *[]){ "no such device", NULL });
    expect_report("badabi", 0, (const char *[]){ "ABI 99", NULL });
    expect_report("misname", 0, (const char *[]){ "othername", NULL });
    cohort_plugins_release();
}
END_TEST

START_TEST(search_path_starts_with_setting)
{
    use_test_dir(NULL);
    char buf[8192];
    cohort_plugins_search_path(buf, sizeof buf);
    ck_assert_msg(!strncmp(buf, TEST_PLUGIN_DIR ":", strlen(TEST_PLUGIN_DIR) + 1), "%s", buf);
}
END_TEST

/* ---- plugins' settings tables (ABI 1.5) ------------------------------------------------- */

static const char *psets(const char *name)
{
    snprintf(path_buf, sizeof path_buf, "%s/libcohort-%s.so", TEST_PSETS_DIR, name);
    return path_buf;
}

/* A plugin's table joins the core's when the plugin is opened (before its init): found, owned,
 * its default read through the host, its range and its own check applied by the core. */
START_TEST(table_joins_on_open)
{
    setenv("COHORT_CONF", "/dev/null", 1);
    ck_assert_ptr_null(cohort_setting_find("COHORT_PSETS_LEVEL"));
    cohort_plugin_t *p = NULL;
    ck_assert_msg(cohort_plugin_open(psets("psets"), &p) == COHORT_SUCCESS, "%s",
                  cohort_last_error());
    const cohort_setting_t *s = cohort_setting_find("COHORT_PSETS_LEVEL");
    ck_assert_ptr_nonnull(s);
    ck_assert_str_eq(s->owner, "psets");
    ck_assert_int_eq(s->kind, COHORT_SET_LONG);
    const cohort_host_v1_t *h = cohort_plugin_host();
    ck_assert_str_eq(h->setting("COHORT_PSETS_LEVEL"), "3");
    ck_assert_str_eq(h->setting("COHORT_PSETS_MODE"), "fast");
    long v = 0;
    ck_assert_int_eq(h->setting_long("COHORT_PSETS_LEVEL", &v), COHORT_SUCCESS);
    ck_assert_int_eq(v, 3);
    setenv("COHORT_PSETS_LEVEL", "12", 1);   /* the table's range, through the host */
    ck_assert_int_eq(h->setting_long("COHORT_PSETS_LEVEL", &v), COHORT_ERR_INVALID_ARG);
    ck_assert_has(cohort_last_error(), "COHORT_PSETS_LEVEL");
    ck_assert_has(cohort_last_error(), "12");
    ck_assert_int_eq(cohort_config_check(), COHORT_ERR_INVALID_ARG);
    ck_assert_has(cohort_last_error(), "COHORT_PSETS_LEVEL");
    unsetenv("COHORT_PSETS_LEVEL");
    setenv("COHORT_PSETS_MODE", " Safe ", 1);   /* words: any case */
    ck_assert_int_eq(cohort_config_check(), COHORT_SUCCESS);
    ck_assert_str_eq(h->setting("COHORT_PSETS_MODE"), "safe");
    setenv("COHORT_PSETS_MODE", "slow", 1);
    ck_assert_int_eq(cohort_config_check(), COHORT_ERR_INVALID_ARG);
    ck_assert_has(cohort_last_error(), "'slow'");
    ck_assert_has(cohort_last_error(), "safe");
    unsetenv("COHORT_PSETS_MODE");
    setenv("COHORT_PSETS_SPEC", "bad", 1);   /* the plugin's own check */
    ck_assert_int_eq(cohort_config_check(), COHORT_ERR_INVALID_ARG);
    ck_assert_has(cohort_last_error(), "COHORT_PSETS_SPEC='bad' is refused by the psets transport");
    ck_assert_has(cohort_last_error(), "the one spelling this test plugin refuses");
    setenv("COHORT_PSETS_SPEC", "good", 1);
    ck_assert_int_eq(cohort_config_check(), COHORT_SUCCESS);
    unsetenv("COHORT_PSETS_SPEC");
    cohort_plugin_close(p);
    /* closed: the table stays (the plugin stays mapped), and opening again adds nothing */
    size_t n = cohort_settings_count();
    ck_assert_ptr_eq(cohort_setting_find("COHORT_PSETS_LEVEL"), s);
    ck_assert_int_eq(cohort_plugin_open(psets("psets"), &p), COHORT_SUCCESS);
    ck_assert_uint_eq(cohort_settings_count(), n);
    cohort_plugin_close(p);
}
END_TEST

/* A name that is another table's, or not COHORT_..., refuses the plugin, naming both. */
START_TEST(table_conflicts_refuse_the_plugin)
{
    cohort_plugin_t *p = (cohort_plugin_t *)&p;
    size_t n = cohort_settings_count();
    ck_assert_int_eq(cohort_plugin_open(psets("psetsdup"), &p), COHORT_ERR_PLUGIN);
    ck_assert_ptr_null(p);
    ck_assert_has(cohort_last_error(), psets("psetsdup"));
    ck_assert_has(cohort_last_error(), "COHORT_TIMEOUT");
    ck_assert_has(cohort_last_error(), "cohort's core");
    ck_assert_ptr_null(cohort_setting_find("COHORT_PSETS_LEVEL"));   /* none of it joined */
    ck_assert_int_eq(cohort_plugin_open(psets("psetsname"), &p), COHORT_ERR_PLUGIN);
    ck_assert_has(cohort_last_error(), "'PSETS_X'");
    ck_assert_uint_eq(cohort_settings_count(), n);
    /* the good one's names are then taken: a second table with them is refused */
    ck_assert_int_eq(cohort_plugin_open(psets("psets"), &p), COHORT_SUCCESS);
    cohort_plugin_close(p);
    ck_assert_int_eq(cohort_plugin_open(psets("psetsdup"), &p), COHORT_ERR_PLUGIN);
    ck_assert_has(cohort_last_error(), "COHORT_PSETS_LEVEL");
    ck_assert_has(cohort_last_error(), "setting of psets");
}
END_TEST

/* A plugin's setting set before the plugin is loaded (in the environment or cohort.conf): the
 * check reads the tables on the search path, without init, and checks it; a name that no table
 * holds stays an error in cohort.conf. */
START_TEST(check_reads_tables_on_the_path)
{
    char dir[] = "/tmp/cohort-psets-XXXXXX", conf[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(conf, sizeof conf, "%s/cohort.conf", dir);
    FILE *f = fopen(conf, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "COHORT_PSETS_MODE = safe\nCOHORT_PSETS_LEVEL = 10\n");
    fclose(f);
    setenv("COHORT_CONF", conf, 1);
    setenv("COHORT_PLUGIN_PATH", TEST_PSETS_DIR, 1);
    cohort_config_reset();
    ck_assert_int_eq(cohort_config_check(), COHORT_ERR_INVALID_ARG);
    ck_assert_has(cohort_last_error(), "COHORT_PSETS_LEVEL");
    ck_assert_has(cohort_last_error(), "line 2");
    ck_assert_str_eq(cohort_setting_find("COHORT_PSETS_MODE")->owner, "psets");
    ck_assert_str_eq(cohort_config_get("COHORT_PSETS_MODE"), "safe");
    f = fopen(conf, "w");
    fprintf(f, "COHORT_PSETS_MODE = safe\nCOHORT_PSETS_NOSUCH = 1\n");
    fclose(f);
    cohort_config_reset();
    ck_assert_int_eq(cohort_config_check(), COHORT_ERR_INVALID_ARG);
    ck_assert_has(cohort_last_error(), "cohort.conf:2: 'COHORT_PSETS_NOSUCH' is not a setting");
    unlink(conf);
    rmdir(dir);
    unsetenv("COHORT_CONF");
    cohort_config_reset();
}
END_TEST

static Suite *loader_suite(void)
{
    Suite *s = suite_create("plugin_loader");
    TCase *one = tcase_create("open");
    tcase_add_test(one, refuses_unknown_major);
    tcase_add_test(one, refuses_major_minus_one);
    tcase_add_test(one, refuses_major_plus_one);
    tcase_add_test(one, accepts_every_minor_of_the_major);
    tcase_add_test(one, refuses_missing_symbol);
    tcase_add_test(one, refuses_small_struct);
    tcase_add_test(one, refuses_null_function);
    tcase_add_test(one, refuses_wrong_name);
    tcase_add_test(one, unavailable_keeps_plugin_message);
    tcase_add_test(one, refuses_missing_file);
    tcase_add_test(one, refuses_non_elf_file);
    tcase_add_test(one, refuses_badly_named_file);
    tcase_add_test(one, accepts_larger_future_struct);
    tcase_add_test(one, host_table_is_v1);
    suite_add_tcase(s, one);
    TCase *set = tcase_create("set");
    tcase_add_test(set, allow_list_loads_exactly_that);
    tcase_add_test(set, allow_list_refuses_broken_member);
    tcase_add_test(set, allow_list_unknown_name);
    tcase_add_test(set, exclude_list_reports_every_refusal);
    tcase_add_test(set, no_filter_loads_the_good_one);
    tcase_add_test(set, search_path_starts_with_setting);
    TCase *tab = tcase_create("settings");
    tcase_add_test(tab, table_joins_on_open);
    tcase_add_test(tab, table_conflicts_refuse_the_plugin);
    tcase_add_test(tab, check_reads_tables_on_the_path);
    suite_add_tcase(s, tab);
    suite_add_tcase(s, set);
    return s;
}

int main(void)
{
    /* Only the environment counts: no stray ./cohort.conf or /etc/cohort.conf. */
    setenv("COHORT_CONF", "/dev/null", 1);
    unsetenv("COHORT_PLUGIN_PATH");
    unsetenv("COHORT_TRANSPORTS");
    SRunner *sr = srunner_create(loader_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
