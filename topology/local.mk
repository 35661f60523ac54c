# SPDX-License-Identifier: BSD-3-Clause
# topology/: node identity and the machine's topology through hwloc; linked into libcohort.
topology_sources = \
	topology/node.c topology/node.h \
	topology/topo.c topology/topo.h
libcohort_core_la_SOURCES += $(topology_sources)
libcohort_core_la_CPPFLAGS = $(AM_CPPFLAGS) $(HWLOC_CFLAGS)
libcohort_core_la_LIBADD += $(HWLOC_LIBS)
