# SPDX-License-Identifier: BSD-3-Clause
# Collective algorithms over a threaded mock of the p2p layer (no transports, no libcohort).
if HAVE_CHECK
check_PROGRAMS += tests/unit/test_coll
TESTS += tests/unit/test_coll
tests_unit_test_coll_SOURCES = tests/unit/test_coll.c \
	tests/unit/mock_p2p.c tests/unit/mock_p2p.h \
	$(coll_sources) \
	core/desc.c core/desc.h \
	core/reduce.c core/reduce.h \
	core/log.c core/log.h \
	core/config.c core/config.h \
	core/parse.c core/parse.h
tests_unit_test_coll_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) -O2 -pthread
tests_unit_test_coll_LDADD = $(CHECK_LIBS) -lpthread -lm
endif
