# SPDX-License-Identifier: BSD-3-Clause
# Shared-memory transport plugin: libcohort-shm.so, installed in $(pkglibdir). Includes only
# <cohort/plugin.h>; exports only cohort_transport_v1 (everything else is hidden).
pkglib_LTLIBRARIES += libcohort-shm.la
libcohort_shm_la_SOURCES = transports/shm/shm.c transports/shm/ring.h transports/shm/coll.c \
	transports/shm/coll.h
libcohort_shm_la_CFLAGS = $(AM_CFLAGS) -O2 -fvisibility=hidden
libcohort_shm_la_LDFLAGS = -module -avoid-version -shared
libcohort_shm_la_LIBADD = -lrt
