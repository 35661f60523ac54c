# SPDX-License-Identifier: BSD-3-Clause
# UCX transport plugin: libcohort-ucx.so (UCP tag API), built when configure finds UCX
# (pkg-config ucx); installed in $(pkglibdir). Includes only <cohort/plugin.h> and UCX's headers;
# exports only cohort_transport_v1 (everything else is hidden). ucx.c: entry points, context,
# endpoint; ux_data.c: requests and messages; ux_conn.c: connections; ux_int.h: their shared
# types and prototypes (private, not installed).
if BUILD_UCX
pkglib_LTLIBRARIES += libcohort-ucx.la
libcohort_ucx_la_SOURCES = transports/ucx/ucx.c transports/ucx/ux_data.c \
	transports/ucx/ux_conn.c transports/ucx/ux_int.h
libcohort_ucx_la_CFLAGS = $(AM_CFLAGS) -O2 -fvisibility=hidden $(UCX_CFLAGS)
libcohort_ucx_la_LDFLAGS = -module -avoid-version -shared
libcohort_ucx_la_LIBADD = $(UCX_LIBS)
endif
