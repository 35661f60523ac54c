# SPDX-License-Identifier: BSD-3-Clause
# Plugin conformance suite: cohort-conformance PLUGIN.so [--np N] (installed, for plugin
# authors), run here on the freshly built TCP transport; plus TCP-specific handshake checks.
bin_PROGRAMS += cohort-conformance
cohort_conformance_SOURCES = tests/conformance/conformance.c tests/conformance/child.c \
	tests/conformance/cases.c tests/conformance/conformance.h
cohort_conformance_LDADD = libcohort-core.la -lm

# ucx-conformance: the same harness with the ucx plugin's own cases (run by tests/mp/test_ucx.sh)
check_PROGRAMS += tests/conformance/ucx-conformance
tests_conformance_ucx_conformance_SOURCES = tests/conformance/conformance.c \
	tests/conformance/child.c tests/conformance/ucx_cases.c tests/conformance/conformance.h
tests_conformance_ucx_conformance_LDADD = libcohort-core.la -lm

check_PROGRAMS += tests/conformance/tcp-handshake
tests_conformance_tcp_handshake_SOURCES = tests/conformance/tcp_handshake.c
tests_conformance_tcp_handshake_LDADD = libcohort-core.la

TESTS += tests/conformance/run-tcp.sh tests/conformance/run-tcp-handshake.sh tests/conformance/run-shm.sh \
	tests/conformance/run-ucx.sh
dist_noinst_SCRIPTS += tests/conformance/run-plugin.sh tests/conformance/run-tcp.sh tests/conformance/run-tcp-handshake.sh tests/conformance/run-shm.sh \
	tests/conformance/run-ucx.sh
