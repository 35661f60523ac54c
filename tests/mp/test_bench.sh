#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# cohort-bench end to end: every collective, every dtype and op, checked results (#wrong must be
# 0 and the exit status 0), also on cohort_mem_alloc buffers, plus JSON output and the SVG mode.
. "$top_srcdir/tests/mp/lib.sh"
BENCH="$top_builddir/bench/cohort-bench"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for coll in allreduce broadcast reduce allgather reduce_scatter alltoall barrier; do
    run_case "bench np=3 $coll, all dtypes and ops" \
        "$COHORTRUN" -np 3 "$BENCH" -c "$coll" -b 8 -e 64K -f 16 -d all -o all -n 2 -w 1
done
run_case "bench np=2 allreduce 8 B..2 MiB with JSON" \
    "$COHORTRUN" -np 2 "$BENCH" -c allreduce -b 8 -e 2M -f 8 -n 3 -w 1 --json "$tmp/a.json"
for coll in allreduce broadcast allgather reduce_scatter alltoall; do
    run_case "bench np=3 $coll on cohort_mem_alloc buffers (--mem cohort), checked" \
        "$COHORTRUN" -np 3 "$BENCH" -c "$coll" -b 8 -e 4M -f 16 -d float32 -o sum -n 2 -w 1 --mem cohort
done
run_case "bench np=2 allreduce with --touch, both memories, checked" sh -c '
    "$0" -np 2 "$1" -c allreduce -b 64K -e 1M -f 4 -n 5 -w 1 --touch --same-buffer &&
    "$0" -np 2 "$1" -c allreduce -b 64K -e 1M -f 4 -n 5 -w 1 --touch --mem cohort' \
    "$COHORTRUN" "$BENCH"
run_case "bench --fresh (buffers allocated per call), both memories, every collective" sh -c '
    for c in allreduce broadcast reduce allgather reduce_scatter alltoall; do
        "$0" -np 3 "$1" -c $c -b 4 -e 1M -f 64 -n 4 -w 1 --fresh | grep -qE "^ +10485[0-9]{2} " || exit 1
    done
    "$0" -np 3 "$1" -c barrier -n 4 -w 1 --fresh | grep -qE "^ +0 +0 +none" || exit 1
    "$0" -np 2 "$1" -c allreduce -b 64K -e 1M -f 4 -n 4 -w 1 --fresh --mem cohort --touch' \
    "$COHORTRUN" "$BENCH"
run_case "bench --nonblocking, --group and --parts, every collective, in and out of place" sh -c '
    for c in allreduce broadcast reduce allgather reduce_scatter alltoall; do
        "$0" -np 3 "$1" -c $c -b 4 -e 64K -f 4 -n 40 -w 2 --nonblocking 16 | grep -qE "^ +655[0-9]{2} " || exit 1
        "$0" -np 3 "$1" -c $c -b 4 -e 64K -f 4 -n 40 -w 2 --group 8 | grep -qE "^ +655[0-9]{2} " || exit 1
        "$0" -np 3 "$1" -c $c -b 4 -e 64K -f 4 -n 40 -w 2 --parts 16 | grep -qE "^ +655[0-9]{2} " || exit 1
    done
    "$0" -np 2 "$1" -c barrier -n 40 -w 1 --nonblocking 40 | grep -qE "^ +0 +0 +none" || exit 1
    "$0" -np 2 "$1" -b 4K -e 4K -n 500 --nonblocking 500 --mem cohort | grep -qE "^ +4096 "' \
    "$COHORTRUN" "$BENCH"
run_case "bench --overlap prints one OVERLAP line per size" sh -c '
    n=$("$0" -np 2 "$1" --overlap -b 64K -e 256K | grep -cE "^OVERLAP,2,(65536|131072|262144),comm_us=[0-9.]+,compute_us=[0-9.]+,both_us=[0-9.]+,both_over_longer=[0-9.]+$")
    [ "$n" -eq 3 ]' "$COHORTRUN" "$BENCH"
run_case "bench --nonblocking with --group or --fresh, --parts with --same-buffer, are refused (exit 2)" sh -c '
    "$0" --nonblocking 4 --group 4 >"$1/nb.out" 2>&1; [ $? = 2 ] || exit 1
    "$0" --nonblocking 4 --fresh >"$1/nb.out" 2>&1; [ $? = 2 ] || exit 1
    "$0" --parts 4 --same-buffer >"$1/nb.out" 2>&1; [ $? = 2 ] || exit 1
    "$0" --parts 4 --fresh >"$1/nb.out" 2>&1; [ $? = 2 ] || exit 1
    for v in 0 -1 1048577 99999999999999999999 x 4K "" " 4"; do
        "$0" --parts "$v" >"$1/nb.out" 2>&1; [ $? = 2 ] && grep -q "parts wants a number" "$1/nb.out" || exit 1
    done
    "$0" --group 0 >"$1/nb.out" 2>&1; [ $? = 2 ] && grep -q "group wants a number" "$1/nb.out"' \
    "$BENCH" "$tmp"
run_case "bench --mem with an unknown kind is refused (exit 2)" sh -c '
    "$0" --mem huge >"$1/mem.out" 2>&1; [ $? = 2 ] && grep -q "unknown memory .huge." "$1/mem.out"' \
    "$BENCH" "$tmp"
run_case "bench JSON has every size" grep -q "\"bytes\": *2097152" "$tmp/a.json"
run_case "bench SVG from JSON" "$BENCH" --svg "$tmp/a.svg" --from "$tmp/a.json"
run_case "bench SVG is an SVG" grep -q '<svg' "$tmp/a.svg"
finish
