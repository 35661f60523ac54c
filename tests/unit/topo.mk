# SPDX-License-Identifier: BSD-3-Clause
# Unit tests (Check) of topology/topo.c on the hwloc XML machines of tests/topologies/, and a
# cohort-info --topology check. Included from tests/local.mk; paths are relative to the top
# directory. The tests find the XML files through $top_srcdir (exported by AM_TESTS_ENVIRONMENT),
# else through the source path compiled in.
EXTRA_DIST += tests/topologies
TESTS += tests/unit/test_topo_info.sh
dist_noinst_SCRIPTS += tests/unit/test_topo_info.sh
if HAVE_CHECK
check_PROGRAMS += tests/unit/test_topo
TESTS += tests/unit/test_topo

tests_unit_test_topo_SOURCES = tests/unit/test_topo.c tests/unit/expect.h
tests_unit_test_topo_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(HWLOC_CFLAGS) \
	-DCOHORT_TEST_TOPO_DIR='"$(abs_top_srcdir)/tests/topologies"'
tests_unit_test_topo_LDADD = libcohort-core.la $(CHECK_LIBS)
endif
