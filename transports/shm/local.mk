# SPDX-License-Identifier: BSD-3-Clause
# Shared-memory transport plugin: libcohort-shm.so, installed in $(pkglibdir). Includes only
# <cohort/plugin.h>; exports only cohort_transport_v1 (everything else is hidden).
pkglib_LTLIBRARIES += libcohort-shm.la
libcohort_shm_la_SOURCES = transports/shm/shm.c transports/shm/shm_conn.c \
	transports/shm/shm_data.c transports/shm/shm_wake.c transports/shm/shm_int.h \
	transports/shm/ring.h transports/shm/coll.c transports/shm/coll_sb.c \
	transports/shm/coll_map.c transports/shm/coll_fin.c transports/shm/coll.h \
	transports/shm/coll_int.h
libcohort_shm_la_CFLAGS = $(AM_CFLAGS) -O2 -fvisibility=hidden
libcohort_shm_la_LDFLAGS = -module -avoid-version -shared
libcohort_shm_la_LIBADD = -lrt
