# SPDX-License-Identifier: BSD-3-Clause
# Fuzz targets for the parsers of bytes from outside (docs/testing.md, "Fuzzing and valgrind").
# Each tests/fuzz/fuzz_<name>.c is built twice:
#  * tests/fuzz/replay_<name>: with the configured compiler and replay.c's main, linked to
#    libcohort; test_replay.sh runs the committed corpus through it (and under valgrind);
#  * tests/fuzz/fuzz_<name>: with libFuzzer (FUZZ_CC, -fsanitize=fuzzer,address,undefined) when
#    configure found it, from its own compile of the sources it reaches (explicit rules below,
#    not libtool); test_fuzz.sh runs each for FUZZ_SECONDS.
fuzz_names = tcp_wire settings hostfile conf rdv ctl
fuzz_headers = tests/fuzz/fuzz.h tests/fuzz/rdv_util.h

check_PROGRAMS += tests/fuzz/replay_tcp_wire tests/fuzz/replay_settings \
	tests/fuzz/replay_hostfile tests/fuzz/replay_conf tests/fuzz/replay_rdv tests/fuzz/replay_ctl \
	tests/fuzz/make_corpus
tests_fuzz_replay_tcp_wire_SOURCES = tests/fuzz/fuzz_tcp_wire.c tests/fuzz/replay.c $(fuzz_headers)
tests_fuzz_replay_settings_SOURCES = tests/fuzz/fuzz_settings.c tests/fuzz/replay.c $(fuzz_headers)
tests_fuzz_replay_settings_LDADD = libcohort-core.la
tests_fuzz_replay_hostfile_SOURCES = tests/fuzz/fuzz_hostfile.c tests/fuzz/replay.c $(fuzz_headers)
tests_fuzz_replay_hostfile_LDADD = libcohort-core.la
tests_fuzz_replay_conf_SOURCES = tests/fuzz/fuzz_conf.c tests/fuzz/replay.c $(fuzz_headers)
tests_fuzz_replay_conf_LDADD = libcohort-core.la
tests_fuzz_replay_rdv_SOURCES = tests/fuzz/fuzz_rdv.c tests/fuzz/replay.c $(fuzz_headers)
tests_fuzz_replay_rdv_LDADD = libcohort-core.la -lpthread
tests_fuzz_replay_ctl_SOURCES = tests/fuzz/fuzz_ctl.c tests/fuzz/replay.c $(fuzz_headers)
tests_fuzz_replay_ctl_LDADD = libcohort-core.la -lpthread
tests_fuzz_make_corpus_SOURCES = tests/fuzz/make_corpus.c $(fuzz_headers)
tests_fuzz_make_corpus_LDADD = libcohort-core.la -lpthread

TESTS += tests/fuzz/test_replay.sh tests/fuzz/test_fuzz.sh
dist_noinst_SCRIPTS += tests/fuzz/test_replay.sh tests/fuzz/test_fuzz.sh tests/fuzz/make_corpus.sh
EXTRA_DIST += tests/fuzz/corpus

# ---- libFuzzer builds ---------------------------------------------------------------------
# The library sources a target reaches, compiled again with FUZZ_CC into tests/fuzz/lf/.
fuzz_lib_objs = tests/fuzz/lf/log.o tests/fuzz/lf/config.o tests/fuzz/lf/parse.o \
	tests/fuzz/lf/hmac.o tests/fuzz/lf/rendezvous.o tests/fuzz/lf/rendezvous_server.o
FUZZ_ALL_CFLAGS = $(DEFS) $(AM_CPPFLAGS) $(CPPFLAGS) -std=gnu11 $(WARN_CFLAGS) $(FUZZ_CFLAGS) \
	-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer \
	-pthread
fuzz_bins =
if HAVE_LIBFUZZER
fuzz_bins += $(fuzz_names:%=tests/fuzz/fuzz_%)
endif
check_DATA = $(fuzz_bins)

tests/fuzz/lf/%.o: $(srcdir)/core/%.c
	@$(MKDIR_P) tests/fuzz/lf
	$(AM_V_CC)$(FUZZ_CC) $(FUZZ_ALL_CFLAGS) -MMD -MP -c -o $@ $<
tests/fuzz/lf/fuzz_%.o: $(srcdir)/tests/fuzz/fuzz_%.c
	@$(MKDIR_P) tests/fuzz/lf
	$(AM_V_CC)$(FUZZ_CC) $(FUZZ_ALL_CFLAGS) -MMD -MP -c -o $@ $<
tests/fuzz/fuzz_%: tests/fuzz/lf/fuzz_%.o $(fuzz_lib_objs)
	$(AM_V_CCLD)$(FUZZ_CC) $(FUZZ_ALL_CFLAGS) -o $@ $^ -lm
-include $(wildcard tests/fuzz/lf/*.d)
# (objects made by a chain of pattern rules: keep them, so that nothing rebuilds needlessly)
.SECONDARY: $(fuzz_lib_objs) $(fuzz_names:%=tests/fuzz/lf/fuzz_%.o)

clean-local: clean-fuzz
clean-fuzz:
	-rm -rf tests/fuzz/lf tests/fuzz/artifacts
	-rm -f $(fuzz_names:%=tests/fuzz/fuzz_%)
.PHONY: clean-fuzz
