# SPDX-License-Identifier: BSD-3-Clause
# The collective algorithms: in libcohort, and in tests/unit/test_coll over a mock p2p layer.
coll_sources = \
	core/coll/coll.h core/coll/select.c \
	core/coll/ring_step.c core/coll/ring_step.h \
	core/coll/allreduce_ring.c core/coll/allreduce_rd.c \
	core/coll/broadcast_chain.c core/coll/broadcast_tree.c \
	core/coll/reduce_tree.c \
	core/coll/allgather_ring.c core/coll/reduce_scatter_ring.c \
	core/coll/alltoall_pairwise.c core/coll/barrier_dissemination.c \
	core/coll/allreduce_hier.c core/coll/broadcast_hier.c core/coll/allgather_hier.c \
	core/coll/allreduce_compressed.c \
	core/coll/allgatherv_ring.c core/coll/alltoallv_pairwise.c \
	core/coll/gather_linear.c core/coll/scatter_linear.c

# The library's objects, compiled once, as an internal convenience library: libcohort.so is
# made of it and exports only the public API (core/libcohort.map, a version script; the test
# tests/unit/test_exports.sh fails when anything else is exported). The tools and the tests
# that use internals (cohortrun, cohort-info, unit tests) link it statically; a program of the
# public API alone (cohort-bench, the examples, the Python extension) links libcohort.so.
noinst_LTLIBRARIES += libcohort-core.la
libcohort_core_la_SOURCES = \
	core/log.c core/log.h \
	core/config.c core/config.h core/config_check.c \
	core/parse.c core/parse.h \
	core/hmac.c core/hmac.h \
	core/reduce.c core/reduce.h \
	core/netif.c core/netif.h \
	core/rendezvous.c core/rendezvous_server.c core/rdv_wire.h core/rendezvous.h \
	core/plugin_loader.c core/plugin_loader.h \
	core/bootstrap.c core/bootstrap.h \
	core/launcher.c core/launcher.h \
	core/comm.c core/comm.h core/comm_create.c core/comm_create.h core/comm_view.c \
	core/desc.c core/desc.h \
	core/jobtopo.c core/jobtopo.h \
	core/jobctl.c core/jobctl.h \
	core/p2p.c core/p2p.h \
	core/api.c \
	core/engine.c core/engine.h \
	core/fusion.c core/fusion.h \
	core/timeline.c core/timeline.h \
	core/mem.c core/mem.h \
	core/timeutil.h \
	$(coll_sources) core/plugin_coll.c
libcohort_core_la_CFLAGS = $(AM_CFLAGS) -O3 $(VEC_CFLAGS) -pthread -fvisibility=hidden \
	$(PMIX_CFLAGS)
libcohort_core_la_LIBADD = -lpthread -lm $(PMIX_LIBS)

lib_LTLIBRARIES += libcohort.la
libcohort_la_SOURCES =
libcohort_la_LIBADD = libcohort-core.la
libcohort_la_LDFLAGS = -version-info $(COHORT_LT_VERSION) \
	-Wl,--version-script=$(top_srcdir)/core/libcohort.map
EXTRA_libcohort_la_DEPENDENCIES = core/libcohort.map
EXTRA_DIST += core/libcohort.map
