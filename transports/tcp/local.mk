# SPDX-License-Identifier: BSD-3-Clause
# TCP transport plugin: libcohort-tcp.so, installed in $(pkglibdir). Includes only
# <cohort/plugin.h>; exports only cohort_transport_v1 (everything else is hidden).
pkglib_LTLIBRARIES += libcohort-tcp.la
libcohort_tcp_la_SOURCES = transports/tcp/tcp.c transports/tcp/tcp_data.c \
	transports/tcp/tcp_conn.c transports/tcp/tcp_addr.c transports/tcp/tcp_int.h \
	transports/tcp/tcp_wire.h
libcohort_tcp_la_CFLAGS = $(AM_CFLAGS) -O2 -fvisibility=hidden
libcohort_tcp_la_LDFLAGS = -module -avoid-version -shared
