# SPDX-License-Identifier: BSD-3-Clause
# cohortrun: the launcher (docs/launching.md). Uses core/ internals: links them statically.
bin_PROGRAMS += tools/cohortrun
tools_cohortrun_SOURCES = tools/cohortrun.c tools/cr_util.c tools/cr_place.c tools/cr_rdv.c \
	tools/cr_spawn.c tools/cr_output.c tools/cr_watch.c tools/cr_int.h
tools_cohortrun_LDADD = libcohort-core.la
