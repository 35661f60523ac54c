include tools/cohortrun.mk

bin_PROGRAMS += tools/cohort-info
tools_cohort_info_SOURCES = tools/cohort-info.c
tools_cohort_info_LDADD = libcohort-core.la
