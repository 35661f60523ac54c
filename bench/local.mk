# SPDX-License-Identifier: BSD-3-Clause
# cohort-bench: nccl-tests style benchmark (docs/bench.md). A plain user of the public API.
bin_PROGRAMS += bench/cohort-bench
bench_cohort_bench_SOURCES = bench/cohort-bench.c bench/bench_run.c bench/bench_check.c \
	bench/bench_out.c bench/svg.c bench/bench.h
bench_cohort_bench_LDADD = libcohort.la -lm

# cohort-membw: the memory bandwidth that bounds intra-node collectives (docs/performance.md).
bin_PROGRAMS += bench/cohort-membw
bench_cohort_membw_SOURCES = bench/cohort-membw.c
bench_cohort_membw_CFLAGS = $(AM_CFLAGS) -O3 $(VEC_CFLAGS) -pthread
bench_cohort_membw_LDADD = -lpthread

# The alpha-beta scaling model of the allreduce algorithms (docs/scaling.md); standard-library python3.
dist_noinst_SCRIPTS += bench/scaling_model.py

# A performance script (root): allreduce across network namespaces over a tbf-shaped link.
dist_noinst_SCRIPTS += bench/netns-bench.sh bench/netns-nb.sh
EXTRA_DIST += bench/torch_bench.py
dist_noinst_SCRIPTS += bench/netns-torch.sh bench/netns_pair.sh
# The peer drivers (bench/peers/README.md): Open MPI, MPICH and Gloo measured as cohort-bench
# measures cohort; built by their run_peers.sh (MPI and Gloo are not dependencies of cohort).
EXTRA_DIST += bench/peers/README.md bench/peers/mpi_coll_bench.c bench/peers/gloo_coll_bench.cc \
	bench/peers/run_peers.sh bench/peers/summarize.py bench/peers/plots.sh
