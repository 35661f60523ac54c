# SPDX-License-Identifier: BSD-3-Clause
# RDMA verbs transport plugin: libcohort-verbs.so (libibverbs), installed in $(pkglibdir).
# Includes only <cohort/plugin.h> and its own vb_*.h; exports only cohort_transport_v1.
# verbs.c: entry points, context, endpoint; vb_data.c: requests, data path, completions,
# progress; vb_conn.c: connections, the handshake, queue pairs; vb_int.h: their shared types and
# prototypes (private, not installed).
# vb_credit.h, vb_regcache.c, vb_memev.c and vb_hca.c are pure C (no libibverbs) so unit tests
# build them; vb_memev.c takes its events from UCX's libucm when configure found it.
if BUILD_VERBS
pkglib_LTLIBRARIES += libcohort-verbs.la
libcohort_verbs_la_SOURCES = transports/verbs/verbs.c transports/verbs/vb_data.c \
	transports/verbs/vb_conn.c transports/verbs/vb_int.h transports/verbs/vb_credit.h \
	transports/verbs/vb_regcache.c transports/verbs/vb_regcache.h \
	transports/verbs/vb_memev.c transports/verbs/vb_memev.h \
	transports/verbs/vb_hca.c transports/verbs/vb_hca.h
libcohort_verbs_la_CFLAGS = $(AM_CFLAGS) $(VERBS_UCM_CFLAGS) -O2 -fvisibility=hidden
libcohort_verbs_la_LDFLAGS = -module -avoid-version -shared
libcohort_verbs_la_LIBADD = -libverbs $(VERBS_UCM_LIBS) -lpthread
endif
