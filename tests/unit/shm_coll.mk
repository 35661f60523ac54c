# SPDX-License-Identifier: BSD-3-Clause
# Unit tests of the shm transport's node-collective engine (transports/shm/coll*.c): threads play
# the ranks over one collective area in ordinary memory, with the core's reduction kernels.
if HAVE_CHECK
check_PROGRAMS += tests/unit/test_shm_coll
TESTS += tests/unit/test_shm_coll
tests_unit_test_shm_coll_SOURCES = tests/unit/test_shm_coll.c \
	transports/shm/coll.c transports/shm/coll_sb.c transports/shm/coll_map.c \
	transports/shm/coll_fin.c transports/shm/coll.h transports/shm/coll_int.h \
	core/reduce.c core/reduce.h
tests_unit_test_shm_coll_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) -O2 -pthread
tests_unit_test_shm_coll_LDADD = $(CHECK_LIBS) -lpthread -lm
endif

# Prefaulting a peer's cohort_mem_alloc block by grains (coll_map.c), read off /proc/self/pagemap.
if HAVE_CHECK
check_PROGRAMS += tests/unit/test_shm_prefault
TESTS += tests/unit/test_shm_prefault
tests_unit_test_shm_prefault_SOURCES = tests/unit/test_shm_prefault.c \
	transports/shm/coll.c transports/shm/coll_sb.c transports/shm/coll_map.c \
	transports/shm/coll_fin.c transports/shm/coll.h transports/shm/coll_int.h
tests_unit_test_shm_prefault_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_unit_test_shm_prefault_LDADD = $(CHECK_LIBS)
endif
