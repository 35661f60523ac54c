#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The non-blocking calls, the v-variants, gather and scatter (tests/mp/nbcheck.c) at np 1-5 over
# the default transport (shm here), over tcp, with caller-driven progress; then requests
# outstanding when the communicator is aborted, when a peer dies and when a rank never joins.
. "$top_srcdir/tests/mp/lib.sh"
NB="$top_builddir/tests/mp/nbcheck"

for np in 1 2 3 4 5; do
    run_case "non-blocking np=$np" "$COHORTRUN" -np "$np" "$NB"
done
run_case "non-blocking over tcp np=3" env COHORT_TRANSPORTS=tcp "$COHORTRUN" -np 3 "$NB"
# ranks on nodes of their own (fakenode.sh): fp16/bf16 wire compression runs, within its bound;
# two nodes of two ranks: hierarchical, the cross-node step compressed
run_case "non-blocking, every rank a node of its own (compression across nodes), np=3" \
    env FAKE_PER=1 "$COHORTRUN" -np 3 "$top_srcdir/tests/mp/fakenode.sh" "$NB"
run_case "non-blocking, every rank a node of its own, 1 KiB chunks (compressed slices), np=3" \
    env FAKE_PER=1 COHORT_CHUNK_SIZE=1024 "$COHORTRUN" -np 3 "$top_srcdir/tests/mp/fakenode.sh" "$NB"
# allreduces outstanding while every rank computes, all of them and their threads on one CPU:
# the waits' yields give the core to a computing thread, so they hold and sleep (core/p2p.c)
run_case "non-blocking while the callers compute on one CPU, every rank a node of its own, np=3" \
    env FAKE_PER=1 COHORT_DEBUG=INFO taskset -c 0 "$COHORTRUN" -np 3 \
    "$top_srcdir/tests/mp/fakenode.sh" "$NB" --busy 30
run_case "non-blocking, 2 nodes x 2 ranks (hierarchical), np=4" \
    env FAKE_PER=2 "$COHORTRUN" -np 4 "$top_srcdir/tests/mp/fakenode.sh" "$NB"
run_case "non-blocking, COHORT_PROGRESS=caller, np=3" \
    env COHORT_PROGRESS=caller "$COHORTRUN" -np 3 "$NB"
run_case "non-blocking over tcp, COHORT_PROGRESS=caller, np=2" \
    env COHORT_PROGRESS=caller COHORT_TRANSPORTS=tcp "$COHORTRUN" -np 2 "$NB"
run_case "non-blocking np=3, fusion batches of at most 4 KiB" \
    env COHORT_FUSION_THRESHOLD=4096 "$COHORTRUN" -np 3 "$NB"
run_case "non-blocking np=2, fusion off" env COHORT_FUSION_THRESHOLD=0 "$COHORTRUN" -np 2 "$NB"
run_case "non-blocking np=4 over tcp, COHORT_CYCLE_TIME=2 ms" \
    env COHORT_TRANSPORTS=tcp COHORT_CYCLE_TIME=2 "$COHORTRUN" -np 4 "$NB"
# the timeline: strict JSON at exit, every collective and request numbered without a gap; a
# rank that dies leaves a file that lacks only the closing ']'
tl=$(mktemp -d)
run_case "COHORT_TIMELINE at np=3: every operation, strict JSON" \
    sh -c 'env COHORT_TIMELINE="$2/t.%r.json" "$0" -np 3 "$1" >"$2/out" 2>&1 || { cat "$2/out"; exit 1; }
           python3 "$3" "$2/t.0.json" "$2/t.1.json" "$2/t.2.json"' \
    "$COHORTRUN" "$NB" "$tl" "$top_srcdir/tests/mp/timeline_check.py"
run_case "COHORT_TIMELINE when a rank dies: its file still loads" \
    sh -c 'env COHORT_TIMELINE="$2/d.%r.json" COHORT_TIMEOUT=60 "$0" -np 3 "$1" --die >"$2/out" 2>&1
           python3 "$3" --crashed "$2/d.2.json" && python3 "$3" "$2/d.0.json" "$2/d.1.json"' \
    "$COHORTRUN" "$NB" "$tl" "$top_srcdir/tests/mp/timeline_check.py"
run_case "COHORT_TIMELINE in a directory that does not exist: creation fails naming it" \
    sh -c 'out=$(env COHORT_TIMELINE=/nonexistent/dir/t.json "$0" -np 2 "$1" 2>&1) && exit 1
           echo "$out" | grep -q "COHORT_TIMELINE: cannot create ./nonexistent/dir/t.json." || { echo "$out"; exit 1; }' \
    "$COHORTRUN" "$NB"
rm -rf "$tl"

# an idle progress thread sleeps: next to no CPU while nothing is outstanding (rusage, not time)
run_case "an idle progress thread uses no CPU (np=2, 2 s)" \
    sh -c 'out=$("$0" -np 2 "$1" --idle 2 2>&1) || { echo "$out"; exit 1; }; echo "$out" | grep "idle"' \
    "$COHORTRUN" "$NB"

# groups whose contents differ: a mismatch on every rank, at once
run_case "a group with one allreduce more on rank 0 (np=3): MISMATCH everywhere" \
    sh -c 'out=$(COHORT_TIMEOUT=60 "$0" -np 3 "$1" --group-mismatch 2>&1) || { echo "$out"; exit 1; }
           n=$(echo "$out" | grep -c "^rank [0-2]: group of [23] allreduces: mismatch between ranks")
           [ "$n" -eq 3 ] || { echo "$out"; exit 1; }' "$COHORTRUN" "$NB"
# a lone non-blocking allreduce carries the next batch's size after its data: a count that
# differs per rank is still a mismatch on both ranks, each naming the count its caller gave (10
# or 12; the rank that found it first names both), never the collective's (16 or 18)
for tp in shm tcp; do
    run_case "a lone iallreduce of another count on each rank (np=2, $tp): MISMATCH naming the callers' counts" \
        sh -c 'out=$(env COHORT_TRANSPORTS=$1 COHORT_TIMEOUT=60 "$0" -np 2 "$2" --lone-mismatch 2>&1) || { echo "$out"; exit 1; }
               echo "$out" | grep "^rank 0: lone allreduce of 10: mismatch between ranks: " |
                   grep -q "count 10, float32, sum" || { echo "$out"; exit 1; }
               echo "$out" | grep "^rank 1: lone allreduce of 12: mismatch between ranks: " |
                   grep -q "count 12, float32, sum" || { echo "$out"; exit 1; }
               echo "$out" | grep "^rank [01]: lone" | grep "count 10, float32" | grep -q "count 12, float32" || { echo "$out"; exit 1; }
               echo "$out" | grep "^rank [01]: lone" | grep -qE "count (1[68]|2[68])" && { echo "$out"; exit 1; }; exit 0' \
        "$COHORTRUN" "$tp" "$NB"
done
# point to point: a receive with another tag, or too small, is a mismatch naming both
for tp in shm tcp; do
    run_case "a receive with another tag (np=2, $tp): MISMATCH naming both tags" \
        sh -c 'out=$(env COHORT_TRANSPORTS=$1 COHORT_TIMEOUT=60 "$0" -np 2 "$2" --p2p-mismatch 2>&1) || { echo "$out"; exit 1; }
               echo "$out" | grep -q "^rank 1: wrong tag: mismatch between ranks: .*receive from rank 0 (tag 2, .*tag 9223372036854775809.*9223372036854775810" || { echo "$out"; exit 1; }' \
        "$COHORTRUN" "$tp" "$NB"
    run_case "a receive too small for the message (np=2, $tp): MISMATCH naming both sizes" \
        sh -c 'out=$(env COHORT_TRANSPORTS=$1 COHORT_TIMEOUT=60 "$0" -np 2 "$2" --p2p-short 2>&1) || { echo "$out"; exit 1; }
               echo "$out" | grep -q "^rank 1: receive too small: mismatch between ranks: .*400 bytes.*200 bytes" || { echo "$out"; exit 1; }' \
        "$COHORTRUN" "$tp" "$NB"
done

# abort: every outstanding request fails at once (COHORT_ERR_ABORTED, or a lost peer naming a
# peer's abort, which the job hears of)
dir=$(mktemp -d)
for tp in shm tcp; do
    run_case "requests outstanding, then cohort_comm_abort (np=3, $tp)" \
        sh -c 'out=$(env COHORT_TRANSPORTS=$1 "$0" -np 3 "$2" --abort "$3/$1" 2>&1) || { echo "$out"; exit 1; }
               n=$(echo "$out" | grep -cE "^rank [12]: 24 requests completed with (aborted|peer lost) ")
               [ "$n" -eq 2 ] || { echo "$out"; exit 1; }' "$COHORTRUN" "$tp" "$NB" "$dir"
done
# a peer dies with requests outstanding: the others' requests fail, naming the operation
for tp in shm tcp; do
    run_case "a peer exits with requests outstanding (np=3, $tp)" \
        sh -c 'out=$(env COHORT_TRANSPORTS=$1 COHORT_TIMEOUT=60 "$0" -np 3 "$2" --die 2>&1) && { echo "$out"; echo "cohortrun exited 0"; exit 1; }
               n=$(echo "$out" | grep -c "^rank [01]: waitall returned .* requests failed: .*allreduce #")
               [ "$n" -eq 2 ] || { echo "$out"; exit 1; }
               echo "$out" | grep -q "FAIL" && { echo "$out"; exit 1; }; exit 0' \
        "$COHORTRUN" "$tp" "$NB"
done
# a rank that never joins: every request of the others times out, naming it
run_case "requests time out when rank 0 never joins (np=3, tcp, COHORT_TIMEOUT=3)" \
    sh -c 'out=$(env COHORT_TRANSPORTS=tcp COHORT_TIMEOUT=3 "$0" -np 3 "$1" --timeout "$2/done" 2>&1) || { echo "$out"; exit 1; }
           n=$(echo "$out" | grep -c "^rank [12]: waitall timed out after")
           [ "$n" -eq 2 ] || { echo "$out"; exit 1; }' "$COHORTRUN" "$NB" "$dir"
rm -rf "$dir"
finish
