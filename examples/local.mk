# SPDX-License-Identifier: BSD-3-Clause
# examples/plugin: a minimal out-of-tree transport plugin. It is shipped in the tarball and, on
# `make installcheck` (so on `make distcheck` too), built from a scratch copy against the
# INSTALLED headers through the installed cohort.pc, then run through the installed
# cohort-conformance driver on two ranks. Paths are relative to the top directory.

example_plugin_files = \
	examples/plugin/Makefile \
	examples/plugin/README.md \
	examples/plugin/example.c
EXTRA_DIST += $(example_plugin_files)

# With DESTDIR, cohort.pc still names the final prefix: PKG_CONFIG_SYSROOT_DIR puts DESTDIR in
# front of its -I paths. The source tree may be read-only (distcheck), hence the copy.
installcheck-local: installcheck-example-plugin
installcheck-example-plugin:
	@set -e; \
	tmp=`mktemp -d "$${TMPDIR:-/tmp}/cohort-example.XXXXXX"`; \
	trap 'rm -rf "$$tmp"' EXIT; \
	for f in $(example_plugin_files); do cp "$(srcdir)/$$f" "$$tmp/"; done; \
	chmod u+w "$$tmp"/*; \
	pcdir="$(DESTDIR)$(libdir)/pkgconfig"; \
	test -f "$$pcdir/cohort.pc" || { echo "installcheck: no $$pcdir/cohort.pc" >&2; exit 1; }; \
	PKG_CONFIG_PATH="$$pcdir"; export PKG_CONFIG_PATH; \
	PKG_CONFIG_ALLOW_SYSTEM_CFLAGS=1; export PKG_CONFIG_ALLOW_SYSTEM_CFLAGS; \
	if test -n "$(DESTDIR)"; then \
	  PKG_CONFIG_SYSROOT_DIR="$(DESTDIR)"; export PKG_CONFIG_SYSROOT_DIR; fi; \
	cflags=`$(PKG_CONFIG) --cflags cohort`; \
	case " $$cflags " in *" -I$(DESTDIR)$(includedir) "*) ;; \
	  *) echo "installcheck: pkg-config --cflags cohort gives '$$cflags'," \
	       "expected -I$(DESTDIR)$(includedir)" >&2; exit 1;; esac; \
	echo "installcheck: building examples/plugin in $$tmp with $$cflags"; \
	$(MAKE) -C "$$tmp" CC="$(CC)" PKG_CONFIG="$(PKG_CONFIG)" COHORT_CFLAGS="$$cflags" \
	  CFLAGS="$(CFLAGS) $(WARN_CFLAGS)" LDFLAGS="$(LDFLAGS)"; \
	echo "installcheck: cohort-conformance ./libcohort-example.so --np 2"; \
	cd "$$tmp"; \
	LD_LIBRARY_PATH="$(DESTDIR)$(libdir)$${LD_LIBRARY_PATH:+:$$LD_LIBRARY_PATH}" \
	  "$(DESTDIR)$(bindir)/cohort-conformance" ./libcohort-example.so --np 2

.PHONY: installcheck-example-plugin

# Example programs. allreduce.c is the README's program: built and run by the test suite so it
# cannot rot. mpi_bootstrap.c needs an MPI compiler and is shipped as source.
check_PROGRAMS += examples/allreduce
examples_allreduce_SOURCES = examples/allreduce.c
examples_allreduce_LDADD = libcohort.la
EXTRA_DIST += examples/mpi_bootstrap.c
EXTRA_DIST += examples/python/train_digits.py examples/python/README.md
