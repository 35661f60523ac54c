/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests for core/launcher.c: Slurm's compressed host list (its first host), the port a
 * Slurm step without PMIx derives, and the rendezvous cohort_identity_from_env chooses under
 * Slurm (core/bootstrap.c), without a Slurm. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bootstrap.h"
#include "core/launcher.h"
#include "tests/unit/expect.h"

static void first_is(const char *list, const char *want)
{
    char host[64];
    cohort_status_t st = cohort_slurm_first_host(list, host, sizeof host);
    ck_assert_msg(!st, "'%s': %s", list, cohort_last_error());
    ck_assert_msg(!strcmp(host, want), "'%s' gave '%s', not '%s'", list, host, want);
}

START_TEST(hostlist_first)
{
    first_is("node1", "node1");
    first_is("node1,node2", "node1");
    first_is("node[1-3]", "node1");
    first_is("node[01-03,7],other", "node01");   /* zero padding kept */
    first_is("node[007-010]", "node007");
    first_is("node[7,1-3]", "node7");            /* the first written, as Slurm orders them */
    first_is("n[3]", "n3");
    first_is("rack[2-3]-n[04-05]", "rack2-n04");  /* several brackets: the first of each */
    first_is("gpu[10-12]x", "gpu10x");
    first_is("a.example.com,b", "a.example.com");
    first_is("other,node[01-03]", "other");
    first_is("node[1-2,4],gpu[1-2]", "node1");
}
END_TEST

START_TEST(hostlist_bad)
{
    char host[64];
    EXPECT_STATUS(cohort_slurm_first_host("", host, sizeof host), COHORT_ERR_INVALID_ARG,
                  "empty", "COHORT_RENDEZVOUS");
    EXPECT_STATUS(cohort_slurm_first_host(NULL, host, sizeof host), COHORT_ERR_INVALID_ARG,
                  "empty");
    EXPECT_STATUS(cohort_slurm_first_host(",node1", host, sizeof host), COHORT_ERR_INVALID_ARG,
                  "',node1'", "empty");
    EXPECT_STATUS(cohort_slurm_first_host("node[1-3", host, sizeof host),
                  COHORT_ERR_INVALID_ARG, "without its ']'");
    EXPECT_STATUS(cohort_slurm_first_host("node1-3]", host, sizeof host),
                  COHORT_ERR_INVALID_ARG, "without its '['");
    EXPECT_STATUS(cohort_slurm_first_host("node[]", host, sizeof host), COHORT_ERR_INVALID_ARG,
                  "does not start with a number");
    EXPECT_STATUS(cohort_slurm_first_host("node[a-b]", host, sizeof host),
                  COHORT_ERR_INVALID_ARG, "does not start with a number");
    EXPECT_STATUS(cohort_slurm_first_host("node[1-]", host, sizeof host),
                  COHORT_ERR_INVALID_ARG, "upper end");
    EXPECT_STATUS(cohort_slurm_first_host("node[3-1]", host, sizeof host),
                  COHORT_ERR_INVALID_ARG, "below its lower end");
    EXPECT_STATUS(cohort_slurm_first_host("node[1-2,x]", host, sizeof host),
                  COHORT_ERR_INVALID_ARG, "other than numbers");
    EXPECT_STATUS(cohort_slurm_first_host("node[1[2]]", host, sizeof host),
                  COHORT_ERR_INVALID_ARG, "other than numbers");
    EXPECT_STATUS(cohort_slurm_first_host("no de1", host, sizeof host),
                  COHORT_ERR_INVALID_ARG, "blank");
    char tiny[6];
    EXPECT_STATUS(cohort_slurm_first_host("node[001-3]", tiny, sizeof tiny),
                  COHORT_ERR_INVALID_ARG, "too long");
    EXPECT_STATUS(cohort_slurm_first_host("nodename", tiny, sizeof tiny),
                  COHORT_ERR_INVALID_ARG, "too long");
    first_is("node[1-3]", "node1");   /* (and the buffer of the good case is big enough) */
}
END_TEST

START_TEST(slurm_port)
{
    for (unsigned long j = 0; j < 50000; j += 7)
        for (unsigned long s = 0; s < 4; s++) {
            int p = cohort_slurm_port(j, s);
            ck_assert_int_ge(p, 20000);
            ck_assert_int_le(p, 31999);
        }
    /* the steps of one job, and neighbouring jobs, differ */
    ck_assert_int_ne(cohort_slurm_port(100, 0), cohort_slurm_port(100, 1));
    ck_assert_int_ne(cohort_slurm_port(100, 0), cohort_slurm_port(101, 0));
    ck_assert_int_eq(cohort_slurm_port(100, 2), 20000 + 802);
    int p = cohort_slurm_port(4294967295ul, 4294967294ul);   /* batch/extern step ids */
    ck_assert_int_ge(p, 20000);
    ck_assert_int_le(p, 31999);
}
END_TEST

static void slurm_env(const char *procid, const char *nodename)
{
    const char *clear[] = { "COHORT_RANK", "COHORT_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                            "RANK", "COHORT_RENDEZVOUS", "MASTER_ADDR", "PMIX_NAMESPACE",
                            "PMIX_RANK", "COHORT_RENDEZVOUS_SERVER", "COHORT_JOB_ID",
                            "OMPI_MCA_ess_base_jobid" };
    for (size_t i = 0; i < sizeof clear / sizeof clear[0]; i++) unsetenv(clear[i]);
    setenv("SLURM_PROCID", procid, 1);
    setenv("SLURM_NTASKS", "4", 1);
    setenv("SLURM_JOB_ID", "100", 1);
    setenv("SLURM_STEP_ID", "2", 1);
    setenv("SLURM_STEP_NODELIST", "cn[07-08]", 1);
    setenv("SLURMD_NODENAME", nodename, 1);
}

START_TEST(slurm_identity)
{
    cohort_identity_t id;
    slurm_env("0", "cn07");
    EXPECT_OK(cohort_identity_from_env(&id));
    ck_assert_str_eq(id.rendezvous, "tcp://cn07:20802");
    ck_assert_int_eq(id.rdv_from, COHORT_RDV_FROM_SLURM);
    ck_assert_str_eq(id.job_id, "slurm-100.2");
    slurm_env("3", "cn08");
    EXPECT_OK(cohort_identity_from_env(&id));
    ck_assert_str_eq(id.rendezvous, "tcp://cn07:20802");
    ck_assert_int_eq(id.rank, 3);
    /* rank 0 elsewhere than the first node (srun -m cyclic... or an odd list): refused */
    slurm_env("0", "cn08");
    EXPECT_STATUS(cohort_identity_from_env(&id), COHORT_ERR_INVALID_ARG, "'cn08'", "'cn07'",
                  "20802", "COHORT_RENDEZVOUS=tcp://cn08");
    /* COHORT_RENDEZVOUS still wins */
    slurm_env("0", "cn08");
    setenv("COHORT_RENDEZVOUS", "tcp://cn08:29999", 1);
    EXPECT_OK(cohort_identity_from_env(&id));
    ck_assert_str_eq(id.rendezvous, "tcp://cn08:29999");
    ck_assert_int_eq(id.rdv_from, COHORT_RDV_FROM_USER);
    /* a batch script itself (no step id): no guess */
    slurm_env("0", "cn07");
    unsetenv("SLURM_STEP_ID");
    EXPECT_STATUS(cohort_identity_from_env(&id), COHORT_ERR_INVALID_ARG, "SLURM_STEP_ID",
                  "COHORT_RENDEZVOUS");
    /* srun --mpi=pmi2: PMI_RANK/PMI_SIZE (MPICH's names) that agree with Slurm's: Slurm's way */
    slurm_env("2", "cn08");
    setenv("PMI_RANK", "2", 1);
    setenv("PMI_SIZE", "4", 1);
    EXPECT_OK(cohort_identity_from_env(&id));
    ck_assert_str_eq(id.launcher, "MPICH/hydra");
    ck_assert_str_eq(id.rendezvous, "tcp://cn07:20802");
    /* ... and that do not (another launcher inside a Slurm step): no guess */
    setenv("PMI_SIZE", "8", 1);
    EXPECT_STATUS(cohort_identity_from_env(&id), COHORT_ERR_INVALID_ARG,
                  "MPICH/hydra gave rank 2 of 8 but no rendezvous");
    unsetenv("PMI_RANK");
    unsetenv("PMI_SIZE");
    /* an unreadable node list */
    slurm_env("1", "cn07");
    setenv("SLURM_STEP_NODELIST", "cn[07-", 1);
    EXPECT_STATUS(cohort_identity_from_env(&id), COHORT_ERR_INVALID_ARG, "cn[07-",
                  "COHORT_RENDEZVOUS");
}
END_TEST

START_TEST(pmix_env_without_server)
{
    /* Open MPI's variables and a PMIx namespace: the PMIx path (nothing started yet) */
    cohort_identity_t id;
    slurm_env("0", "cn07");
    unsetenv("SLURM_PROCID");
    setenv("OMPI_COMM_WORLD_RANK", "1", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    setenv("PMIX_NAMESPACE", "unit-test-ns", 1);
    cohort_status_t st = cohort_identity_from_env(&id);
    if (cohort_pmix_built()) {
        ck_assert_msg(!st, "%s", cohort_last_error());
        ck_assert_int_eq(id.rdv_from, COHORT_RDV_FROM_PMIX);
        ck_assert_str_eq(id.job_id, "pmix-unit-test-ns");
        cohort_pmix_finalize();
    } else {
        ck_assert_int_eq(st, COHORT_ERR_UNSUPPORTED);
        ck_assert_ptr_nonnull(strstr(cohort_last_error(), "libpmix-dev"));
    }
    unsetenv("OMPI_COMM_WORLD_RANK");
    unsetenv("OMPI_COMM_WORLD_SIZE");
    unsetenv("PMIX_NAMESPACE");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("launcher");
    TCase *tc = tcase_create("slurm");
    tcase_add_test(tc, hostlist_first);
    tcase_add_test(tc, hostlist_bad);
    tcase_add_test(tc, slurm_port);
    tcase_add_test(tc, slurm_identity);
    tcase_add_test(tc, pmix_env_without_server);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
