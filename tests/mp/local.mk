# Multi-process tests: real ranks through cohortrun over the real transports.
check_PROGRAMS += tests/mp/collcheck
tests_mp_collcheck_SOURCES = tests/mp/collcheck.c
tests_mp_collcheck_LDADD = libcohort.la -lm -lpthread
check_PROGRAMS += tests/mp/cycles
tests_mp_cycles_SOURCES = tests/mp/cycles.c
tests_mp_cycles_LDADD = libcohort.la
check_PROGRAMS += tests/mp/peerloss
tests_mp_peerloss_SOURCES = tests/mp/peerloss.c
tests_mp_peerloss_LDADD = libcohort.la
TESTS += tests/mp/test_collectives.sh tests/mp/test_bench.sh tests/mp/test_bootstrap.sh tests/mp/test_shm.sh tests/mp/test_topology.sh tests/mp/test_settings.sh tests/mp/test_resources.sh
dist_noinst_SCRIPTS += tests/mp/test_collectives.sh tests/mp/test_bench.sh tests/mp/test_bootstrap.sh tests/mp/test_shm.sh tests/mp/test_topology.sh tests/mp/test_settings.sh tests/mp/test_resources.sh tests/mp/fakenode.sh tests/mp/lib.sh
