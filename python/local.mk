# SPDX-License-Identifier: BSD-3-Clause
# The Python package `cohort` (python/cohort) and its PyTorch backend, a C++ extension
# (python/csrc) built against the torch configure found (BUILD_TORCH). `make` also stages a
# runnable copy in the build tree, python-stage/ (tests and the examples use it through
# PYTHONPATH); `make install` puts the package into $(cohortpydir), which the Python that has
# torch searches (PREFIX/lib/pythonX.Y/dist-packages on Debian).
COHORT_PY = python/cohort/__init__.py
COHORT_TORCH_PY = python/cohort/torch/__init__.py python/cohort/torch/_backend.py \
	python/cohort/torch/_names.py python/cohort/torch/_hvd.py \
	python/cohort/torch/_hvd_types.py python/cohort/torch/_hvd_compression.py \
	python/cohort/torch/_hvd_handles.py python/cohort/torch/_hvd_comm.py \
	python/cohort/torch/_hvd_state.py python/cohort/torch/_hvd_basics.py \
	python/cohort/torch/_hvd_checks.py python/cohort/torch/_hvd_allreduce.py \
	python/cohort/torch/_hvd_allgather.py python/cohort/torch/_hvd_broadcast.py \
	python/cohort/torch/_hvd_alltoall.py python/cohort/torch/_hvd_join.py \
	python/cohort/torch/_hvd_functions.py python/cohort/torch/_hvd_optimizer.py
EXTRA_DIST += $(COHORT_PY) $(COHORT_TORCH_PY)

if BUILD_TORCH
cohortpkgdir = $(cohortpydir)/cohort
cohortpkg_DATA = $(COHORT_PY)
nodist_cohortpkg_DATA = python/cohort/_build_info.py
cohorttorchdir = $(cohortpydir)/cohort/torch
cohorttorch_DATA = $(COHORT_TORCH_PY)
cohorttorch_LTLIBRARIES = python/cohort/torch/_C.la
python_cohort_torch__C_la_SOURCES = python/csrc/process_group.cpp python/csrc/process_group.hpp \
	python/csrc/module.cpp
python_cohort_torch__C_la_CPPFLAGS = -I$(top_builddir)/include -I$(top_srcdir)/include $(TORCH_CPPFLAGS)
python_cohort_torch__C_la_CXXFLAGS = -std=c++17 $(WARN_CFLAGS)
python_cohort_torch__C_la_LDFLAGS = -module -avoid-version -shared $(TORCH_LDFLAGS)
python_cohort_torch__C_la_LIBADD = libcohort.la $(TORCH_LIBS)

# What `import cohort` reports: the version, and where the library is installed.
python/cohort/_build_info.py: Makefile
	$(AM_V_GEN)mkdir -p python/cohort && \
	printf '__version__ = "%s"\nlibdir = "%s"\n' '$(PACKAGE_VERSION)' '$(libdir)' > $@
CLEANFILES += python/cohort/_build_info.py

# The package as it would be installed, runnable from the build tree (libdir: the build's).
python-stage/.stamp: $(COHORT_PY:%=$(srcdir)/%) $(COHORT_TORCH_PY:%=$(srcdir)/%) \
		python/cohort/torch/_C.la
	$(AM_V_GEN)rm -rf python-stage && mkdir -p python-stage/cohort/torch && \
	cp $(COHORT_PY:%=$(srcdir)/%) python-stage/cohort/ && \
	cp $(COHORT_TORCH_PY:%=$(srcdir)/%) python-stage/cohort/torch/ && \
	cp python/cohort/torch/.libs/_C.so python-stage/cohort/torch/ && \
	printf '__version__ = "%s"\nlibdir = "%s"\n' '$(PACKAGE_VERSION)' \
		'$(abs_top_builddir)/.libs' > python-stage/cohort/_build_info.py && \
	touch $@
all-local: python-stage/.stamp
endif
clean-local: clean-python-stage
clean-python-stage:
	rm -rf python-stage
