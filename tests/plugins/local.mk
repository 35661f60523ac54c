# SPDX-License-Identifier: BSD-3-Clause
# Deliberately broken transport plugins, one good one from a "future" ABI 1.7 and four at the
# bounds of the ABI versions the loader accepts (abi.c), that only
# tests/unit/test_loader loads. Built as real shared objects (tests/plugins/.libs/*.so) on
# `make check`, never installed. Included from tests/local.mk; paths relative to the top dir.

test_plugin_ldflags = -module -avoid-version -shared -rpath /nowhere
test_plugins = \
	tests/plugins/libcohort-badabi.la \
	tests/plugins/libcohort-nosym.la \
	tests/plugins/libcohort-small.la \
	tests/plugins/libcohort-nullfn.la \
	tests/plugins/libcohort-misname.la \
	tests/plugins/libcohort-unavail.la \
	tests/plugins/libcohort-future.la \
	tests/plugins/libcohort-abiprev.la \
	tests/plugins/libcohort-abinext.la \
	tests/plugins/libcohort-abimin.la \
	tests/plugins/libcohort-abimax.la
check_LTLIBRARIES += $(test_plugins)

# Plugins with a settings table (ABI 1.5; tests/plugins/psets.c says which is which), in a
# directory of their own.
test_psets = tests/plugins/psets/libcohort-psets.la tests/plugins/psets/libcohort-psetsdup.la \
	tests/plugins/psets/libcohort-psetsname.la
check_LTLIBRARIES += $(test_psets)
tests_plugins_psets_libcohort_psets_la_SOURCES = tests/plugins/psets.c tests/plugins/stub.h
tests_plugins_psets_libcohort_psets_la_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tests/plugins \
	-DPSETS_NAME='"psets"' -DPSETS_CASE=0
tests_plugins_psets_libcohort_psets_la_LDFLAGS = $(test_plugin_ldflags)
tests_plugins_psets_libcohort_psetsdup_la_SOURCES = tests/plugins/psets.c tests/plugins/stub.h
tests_plugins_psets_libcohort_psetsdup_la_CPPFLAGS = $(AM_CPPFLAGS) \
	-I$(top_srcdir)/tests/plugins -DPSETS_NAME='"psetsdup"' -DPSETS_CASE=1
tests_plugins_psets_libcohort_psetsdup_la_LDFLAGS = $(test_plugin_ldflags)
tests_plugins_psets_libcohort_psetsname_la_SOURCES = tests/plugins/psets.c tests/plugins/stub.h
tests_plugins_psets_libcohort_psetsname_la_CPPFLAGS = $(AM_CPPFLAGS) \
	-I$(top_srcdir)/tests/plugins -DPSETS_NAME='"psetsname"' -DPSETS_CASE=2
tests_plugins_psets_libcohort_psetsname_la_LDFLAGS = $(test_plugin_ldflags)

tests_plugins_libcohort_badabi_la_SOURCES = tests/plugins/badabi.c tests/plugins/stub.h
tests_plugins_libcohort_badabi_la_LDFLAGS = $(test_plugin_ldflags)
tests_plugins_libcohort_nosym_la_SOURCES = tests/plugins/nosym.c tests/plugins/stub.h
tests_plugins_libcohort_nosym_la_LDFLAGS = $(test_plugin_ldflags)
tests_plugins_libcohort_small_la_SOURCES = tests/plugins/small.c tests/plugins/stub.h
tests_plugins_libcohort_small_la_LDFLAGS = $(test_plugin_ldflags)
tests_plugins_libcohort_nullfn_la_SOURCES = tests/plugins/nullfn.c tests/plugins/stub.h
tests_plugins_libcohort_nullfn_la_LDFLAGS = $(test_plugin_ldflags)
tests_plugins_libcohort_misname_la_SOURCES = tests/plugins/misname.c tests/plugins/stub.h
tests_plugins_libcohort_misname_la_LDFLAGS = $(test_plugin_ldflags)
tests_plugins_libcohort_unavail_la_SOURCES = tests/plugins/unavail.c tests/plugins/stub.h
tests_plugins_libcohort_unavail_la_LDFLAGS = $(test_plugin_ldflags)
tests_plugins_libcohort_future_la_SOURCES = tests/plugins/future.c tests/plugins/stub.h
tests_plugins_libcohort_future_la_LDFLAGS = $(test_plugin_ldflags)
# One source at the loader's ABI bounds (tests/plugins/abi.c says which is which).
tests_plugins_libcohort_abiprev_la_SOURCES = tests/plugins/abi.c tests/plugins/stub.h
tests_plugins_libcohort_abiprev_la_CPPFLAGS = $(AM_CPPFLAGS) -DABI_NAME='"abiprev"' \
	-DABI_MAJOR_DELTA=-1 -DABI_MINOR=0xffff -DABI_SIZE='sizeof(cohort_transport_v1_t)'
tests_plugins_libcohort_abiprev_la_LDFLAGS = $(test_plugin_ldflags)
tests_plugins_libcohort_abinext_la_SOURCES = tests/plugins/abi.c tests/plugins/stub.h
tests_plugins_libcohort_abinext_la_CPPFLAGS = $(AM_CPPFLAGS) -DABI_NAME='"abinext"' \
	-DABI_MAJOR_DELTA=1 -DABI_MINOR=0 -DABI_SIZE='sizeof(cohort_transport_v1_t)'
tests_plugins_libcohort_abinext_la_LDFLAGS = $(test_plugin_ldflags)
tests_plugins_libcohort_abimin_la_SOURCES = tests/plugins/abi.c tests/plugins/stub.h
tests_plugins_libcohort_abimin_la_CPPFLAGS = $(AM_CPPFLAGS) -DABI_NAME='"abimin"' \
	-DABI_MAJOR_DELTA=0 -DABI_MINOR=0 -DABI_SIZE=COHORT_TRANSPORT_V1_MIN_SIZE
tests_plugins_libcohort_abimin_la_LDFLAGS = $(test_plugin_ldflags)
tests_plugins_libcohort_abimax_la_SOURCES = tests/plugins/abi.c tests/plugins/stub.h
tests_plugins_libcohort_abimax_la_CPPFLAGS = $(AM_CPPFLAGS) -DABI_NAME='"abimax"' \
	-DABI_MAJOR_DELTA=0 -DABI_MINOR=0xffff -DABI_SIZE='sizeof(cohort_transport_v1_t)'
tests_plugins_libcohort_abimax_la_LDFLAGS = $(test_plugin_ldflags)

if HAVE_CHECK
check_PROGRAMS += tests/unit/test_loader
TESTS += tests/unit/test_loader
tests_unit_test_loader_SOURCES = tests/unit/test_loader.c
tests_unit_test_loader_CPPFLAGS = $(AM_CPPFLAGS) \
	-DTEST_PLUGIN_DIR='"$(abs_top_builddir)/tests/plugins/.libs"' \
	-DTEST_PSETS_DIR='"$(abs_top_builddir)/tests/plugins/psets/.libs"'
tests_unit_test_loader_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_unit_test_loader_LDADD = libcohort-core.la $(CHECK_LIBS)
# `make tests/unit/test_loader` alone also builds the plugins it loads.
EXTRA_tests_unit_test_loader_DEPENDENCIES = $(test_plugins) $(test_psets)
endif
