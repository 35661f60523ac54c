# SPDX-License-Identifier: BSD-3-Clause
include tools/cohortrun.mk

bin_PROGRAMS += tools/cohort-info
tools_cohort_info_SOURCES = tools/cohort-info.c
tools_cohort_info_LDADD = libcohort-core.la

# Man pages, written by help2man from each tool's --help and --version (configure says when
# help2man is missing: then no man pages), and bash completion (tools/cohort.bash, installed
# under each tool's name, where bash-completion looks for it).
if HAVE_HELP2MAN
man1_MANS = man/cohortrun.1 man/cohort-info.1 man/cohort-bench.1
CLEANFILES += $(man1_MANS)
HELP2MAN_RUN = $(MKDIR_P) man && $(HELP2MAN) --no-info --no-discard-stderr \
	--version-string='$(PACKAGE_VERSION)'
man/cohortrun.1: tools/cohortrun$(EXEEXT)
	$(AM_V_GEN)$(HELP2MAN_RUN) -n 'start the ranks of a cohort job' -o $@ ./tools/cohortrun
man/cohort-info.1: tools/cohort-info$(EXEEXT)
	$(AM_V_GEN)$(HELP2MAN_RUN) -n "cohort's version, plugins, settings, interfaces and topology" \
		-o $@ ./tools/cohort-info
man/cohort-bench.1: bench/cohort-bench$(EXEEXT)
	$(AM_V_GEN)$(HELP2MAN_RUN) -n "measure and check cohort's collectives" \
		-o $@ ./bench/cohort-bench
endif
bashcompdir = $(datadir)/bash-completion/completions
EXTRA_DIST += tools/cohort.bash
COHORT_TOOLS = cohortrun cohort-info cohort-bench
install-data-local:
	$(MKDIR_P) '$(DESTDIR)$(bashcompdir)'
	for t in $(COHORT_TOOLS); do \
		$(INSTALL_DATA) '$(srcdir)/tools/cohort.bash' "$(DESTDIR)$(bashcompdir)/$$t" || exit 1; \
	done
uninstall-local:
	for t in $(COHORT_TOOLS); do rm -f "$(DESTDIR)$(bashcompdir)/$$t"; done
