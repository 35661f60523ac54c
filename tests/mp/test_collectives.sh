#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Every collective x dtype x op x in/out-of-place through cohortrun at np = 1..5, over the
# default transport (shm between these same-node ranks), again over TCP, with forced algorithms,
# a tiny pipeline chunk and other socket counts; buffers re-made between calls (memchurn); the tcp
# reachability probe's log line.
. "$top_srcdir/tests/mp/lib.sh"
CC="$top_builddir/tests/mp/collcheck"

for np in 1 2 3 4 5; do
    big=""
    [ "$np" = 2 ] || [ "$np" = 4 ] && big=--big
    run_case "collectives np=$np $big" "$COHORTRUN" -np "$np" "$CC" $big
done
for np in 2 3 5; do
    run_case "collectives over tcp np=$np --big" env COHORT_TRANSPORTS=tcp "$COHORTRUN" -np "$np" "$CC" --big
done
run_case "collectives np=3, ring allreduce + chain broadcast, 4 KiB chunks" \
    env COHORT_ALGO="allreduce:ring;broadcast:chain" COHORT_CHUNK_SIZE=4096 \
    "$COHORTRUN" -np 3 "$CC"
run_case "collectives np=4, recursive doubling + tree everywhere" \
    env COHORT_ALGO="allreduce:rd;broadcast:tree" "$COHORTRUN" -np 4 "$CC" --big
run_case "collectives over tcp np=2, 1 socket per peer" \
    env COHORT_TRANSPORTS=tcp COHORT_SOCKET_NSOCKS=1 "$COHORTRUN" -np 2 "$CC" --big
run_case "collectives over tcp np=3, 4 sockets per peer" \
    env COHORT_TRANSPORTS=tcp COHORT_SOCKET_NSOCKS=4 "$COHORTRUN" -np 3 "$CC" --big
# Buffers freed, mapped again at the same address, realloc'd and madvise'd between calls (what
# frameworks do): shm (staged, single copy, mapped mode for cohort_mem_alloc blocks), tcp, and
# ucx over its tcp (its own registration cache, with libucm's hooks).
run_case "memchurn np=3 (shm): buffers re-made between calls, every element checked" \
    "$COHORTRUN" -np 3 "$top_builddir/tests/mp/memchurn" --need-reuse 200
run_case "memchurn np=2 (shm)" "$COHORTRUN" -np 2 "$top_builddir/tests/mp/memchurn" --need-reuse 200
run_case "memchurn over tcp np=3" \
    env COHORT_TRANSPORTS=tcp "$COHORTRUN" -np 3 "$top_builddir/tests/mp/memchurn" --need-reuse 200
if [ -e "$top_builddir/.libs/libcohort-ucx.so" ]; then
    run_case "memchurn over ucx (UCX_TLS=tcp, zero-copy chunks) np=2" \
        env COHORT_TRANSPORTS=ucx UCX_TLS=tcp COHORT_UCX_ZCOPY=1 "$COHORTRUN" -np 2 \
        "$top_builddir/tests/mp/memchurn" --max 1048580 --need-reuse 100
fi
# tcp start-up: every rank probes its peers' addresses and logs, once per peer address set (all
# peers share one here), which address answered; the probes are closed quietly (no WARN).
run_case "tcp reachability probe at np=4: one INFO line per rank, no WARN" \
    sh -c 'out=$(env COHORT_TRANSPORTS=tcp COHORT_DEBUG=INFO "$0" -np 4 "$1" 2>&1) || { echo "$out"; exit 1; }
           echo "$out" | grep -qx "mean of ranks = 1.5" || { echo "$out"; exit 1; }
           n=$(echo "$out" | grep -c "cohort INFO net: tcp: rank [0-3] reaches rank [0-3] .* it answered the probe")
           [ "$n" -eq 4 ] || { echo "$n probe lines, expected 4:"; echo "$out"; exit 1; }
           if echo "$out" | grep " WARN "; then exit 1; fi' \
    "$COHORTRUN" "$top_builddir/examples/allreduce"
run_case "the README example (examples/allreduce.c) at np=4" \
    sh -c '"$0" -np 4 "$1" | grep -qx "mean of ranks = 1.5"' "$COHORTRUN" "$top_builddir/examples/allreduce"
finish
