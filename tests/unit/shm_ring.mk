# SPDX-License-Identifier: BSD-3-Clause
# Unit tests of the shm transport's SPSC ring (transports/shm/ring.h, header-only): single-thread
# boundaries, plus producer/consumer stress in two threads and in two processes.
if HAVE_CHECK
check_PROGRAMS += tests/unit/test_shm_ring
TESTS += tests/unit/test_shm_ring
tests_unit_test_shm_ring_SOURCES = tests/unit/test_shm_ring.c transports/shm/ring.h
tests_unit_test_shm_ring_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) -pthread
tests_unit_test_shm_ring_LDADD = $(CHECK_LIBS) -lpthread
endif
