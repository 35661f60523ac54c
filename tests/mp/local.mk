# SPDX-License-Identifier: BSD-3-Clause
# Multi-process tests: real ranks through cohortrun over the real transports.
check_PROGRAMS += tests/mp/collcheck
tests_mp_collcheck_SOURCES = tests/mp/collcheck.c tests/mp/elems.h
tests_mp_collcheck_LDADD = libcohort.la -lm -lpthread
check_PROGRAMS += tests/mp/cycles
tests_mp_cycles_SOURCES = tests/mp/cycles.c
tests_mp_cycles_LDADD = libcohort.la
check_PROGRAMS += tests/mp/peerloss
tests_mp_peerloss_SOURCES = tests/mp/peerloss.c
tests_mp_peerloss_LDADD = libcohort.la
check_PROGRAMS += tests/mp/ctlcheck
tests_mp_ctlcheck_SOURCES = tests/mp/ctlcheck.c
tests_mp_ctlcheck_LDADD = libcohort.la -lpthread
check_PROGRAMS += tests/mp/collseq
tests_mp_collseq_SOURCES = tests/mp/collseq.c
tests_mp_collseq_LDADD = libcohort.la
check_PROGRAMS += tests/mp/reinit
tests_mp_reinit_SOURCES = tests/mp/reinit.c
tests_mp_reinit_LDADD = libcohort.la
# secretcheck: two ranks through cohort_comm_init_oob, one of them with another COHORT_SECRET,
# refused by the transport's handshake (test_bootstrap.sh, over tcp and shm).
check_PROGRAMS += tests/mp/secretcheck
tests_mp_secretcheck_SOURCES = tests/mp/secretcheck.c
tests_mp_secretcheck_LDADD = libcohort.la
TESTS += tests/mp/test_reliability.sh tests/mp/test_collectives.sh tests/mp/test_bench.sh tests/mp/test_bootstrap.sh tests/mp/test_shm.sh tests/mp/test_topology.sh tests/mp/test_settings.sh tests/mp/test_resources.sh \
	tests/mp/test_ucx.sh tests/mp/test_badinput.sh tests/mp/test_install.sh
dist_noinst_SCRIPTS += tests/mp/test_reliability.sh tests/mp/test_collectives.sh tests/mp/test_bench.sh tests/mp/test_bootstrap.sh tests/mp/test_shm.sh tests/mp/test_topology.sh tests/mp/test_settings.sh tests/mp/test_resources.sh tests/mp/fakenode.sh tests/mp/lib.sh \
	tests/mp/test_ucx.sh tests/mp/test_badinput.sh tests/mp/test_install.sh
# The fault-injection suite: faulty loops one collective until it fails; test_faults.sh kills a
# rank with SIGKILL and checks that every survivor fails in bounded time naming it.
check_PROGRAMS += tests/mp/faulty
tests_mp_faulty_SOURCES = tests/mp/faulty.c
tests_mp_faulty_LDADD = libcohort.la
TESTS += tests/mp/test_faults.sh tests/mp/test_faults_nolauncher.sh
dist_noinst_SCRIPTS += tests/mp/test_faults.sh tests/mp/test_faults_nolauncher.sh tests/mp/faults_lib.sh
# memchurn: every collective with buffers freed, re-mapped, realloc'd and madvise'd between calls
# (what frameworks do), results checked element by element: run by test_collectives.sh over shm
# and tcp, and by tests/verbs over verbs.
check_PROGRAMS += tests/mp/memchurn
tests_mp_memchurn_SOURCES = tests/mp/memchurn.c
tests_mp_memchurn_LDADD = libcohort.la
# nbcheck: the non-blocking calls (every collective, outstanding by the dozen, completed in
# scrambled order, mixed with blocking ones), the v-variants, gather and scatter; abort, a dead
# peer and a timeout with requests outstanding (test_nonblocking.sh).
check_PROGRAMS += tests/mp/nbcheck
tests_mp_nbcheck_SOURCES = tests/mp/nbcheck.c tests/mp/elems.h
tests_mp_nbcheck_LDADD = libcohort.la -lpthread -lm
TESTS += tests/mp/test_nonblocking.sh
dist_noinst_SCRIPTS += tests/mp/test_nonblocking.sh tests/mp/timeline_check.py
# Under Debian's mpirun (Open MPI + PMIx) without COHORT_RENDEZVOUS: the address through PMIx,
# and its failures (skipped without mpirun or without PMIx).
TESTS += tests/mp/test_mpirun.sh
dist_noinst_SCRIPTS += tests/mp/test_mpirun.sh
