# SPDX-License-Identifier: BSD-3-Clause
# cohortrun: the launcher (docs/launching.md). Uses core/ internals: links them statically.
bin_PROGRAMS += tools/cohortrun
tools_cohortrun_SOURCES = tools/cohortrun.c
tools_cohortrun_LDADD = libcohort-core.la
