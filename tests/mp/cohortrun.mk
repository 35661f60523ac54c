# SPDX-License-Identifier: BSD-3-Clause
# cohortrun's own tests: placement, environment, output, failures, timeouts, interrupts, rsh.
check_PROGRAMS += tests/mp/cr_rdv_client
tests_mp_cr_rdv_client_SOURCES = tests/mp/cr_rdv_client.c
tests_mp_cr_rdv_client_LDADD = libcohort-core.la
TESTS += tests/mp/test_cohortrun.sh
dist_noinst_SCRIPTS += tests/mp/test_cohortrun.sh
