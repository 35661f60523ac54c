# SPDX-License-Identifier: BSD-3-Clause
# Unit tests of the verbs transport's device-free pieces (transports/verbs/vb_credit.h,
# vb_regcache.c, vb_hca.c): built and run whether or not libibverbs is installed.
if HAVE_CHECK
check_PROGRAMS += tests/unit/test_verbs_parts
TESTS += tests/unit/test_verbs_parts
tests_unit_test_verbs_parts_SOURCES = tests/unit/test_verbs_parts.c \
	transports/verbs/vb_credit.h transports/verbs/vb_regcache.c transports/verbs/vb_regcache.h \
	transports/verbs/vb_memev.c transports/verbs/vb_memev.h \
	transports/verbs/vb_hca.c transports/verbs/vb_hca.h
tests_unit_test_verbs_parts_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_unit_test_verbs_parts_LDADD = $(CHECK_LIBS) -lpthread
endif
