# cohort-bench: nccl-tests style benchmark (docs/bench.md). A plain user of the public API.
bin_PROGRAMS += bench/cohort-bench
bench_cohort_bench_SOURCES = bench/cohort-bench.c bench/svg.c bench/bench.h
bench_cohort_bench_LDADD = libcohort.la -lm
