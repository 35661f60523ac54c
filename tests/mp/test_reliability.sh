#!/bin/sh
# The job's control channel (core/jobctl.h) end to end: abort from another thread, from a signal
# handler and during a split returns within 2 s and the other rank hears of it naming the rank;
# a mismatch names both calls on both ranks; broadcasts whose ranks disagreed on the root fail the
# next collective; the stall report names the rank that did not join;
# a rank killed between collectives fails every survivor's next collective naming it; cohortrun
# names the first rank that died.
. "$top_srcdir/tests/mp/lib.sh"
CT="$top_builddir/tests/mp/ctlcheck"
PL="$top_builddir/tests/mp/peerloss"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export COHORT_TIMEOUT=30

for tp in shm tcp; do
    run_case "abort from another thread mid-allreduce ($tp)" env COHORT_TRANSPORTS=$tp "$COHORTRUN" -np 2 "$CT" thread
    run_case "abort from a signal handler mid-allreduce ($tp)" env COHORT_TRANSPORTS=$tp "$COHORTRUN" -np 2 "$CT" signal
done
run_case "ranks that compute longer than COHORT_TIMEOUT between collectives are not stopped" \
    env COHORT_TIMEOUT=1 "$COHORTRUN" -np 2 "$CT" long
run_case "abort while cohort_comm_split waits for the others" "$COHORTRUN" -np 2 "$CT" split
run_case "a mismatch names both calls on both ranks (tcp)" env COHORT_TRANSPORTS=tcp "$COHORTRUN" -np 2 "$CT" mismatch
run_case "small broadcasts whose ranks each were the root: the next collective fails on all (shm)" \
    env COHORT_TRANSPORTS=shm "$COHORTRUN" -np 3 "$CT" roots
run_case "the stall report names the rank that has not joined (COHORT_STALL_WARN=1)" sh -c '
    COHORT_STALL_WARN=1 "$0" -np 3 "$1" stall >"$2/stall" 2>&1 || { cat "$2/stall"; exit 1; }
    grep -A4 "stall report" "$2/stall"
    grep -q "stall report: 2 of 3 ranks are stuck" "$2/stall" &&
    grep -A3 "stall report" "$2/stall" | grep -q "not in any collective.*: rank 2$"' \
    "$COHORTRUN" "$CT" "$tmp"
finish
