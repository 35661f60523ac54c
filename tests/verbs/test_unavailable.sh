#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The verbs transport on a machine without an RDMA device, through the real loader: cohort-info
# lists it as unavailable ("no RDMA device"); a job that asks for it (COHORT_TRANSPORTS=verbs, or
# verbs,tcp) fails on every rank naming the reason; a job without COHORT_TRANSPORTS runs over the
# other transports. Skips (77) where the plugin was not built or the machine has a device.
. "$top_srcdir/tests/mp/lib.sh"
export CASE_TIMEOUT=120
INFO="$top_builddir/tools/cohort-info"
EX="$top_builddir/examples/allreduce"
if [ ! -e "$top_builddir/.libs/libcohort-verbs.so" ]; then
    echo "SKIP: the verbs transport was not built (no libibverbs-dev at configure time)"
    exit 77
fi
unset COHORT_TRANSPORTS COHORT_IB_HCA COHORT_IB_GID_INDEX COHORT_CONF
line=$("$INFO" 2>&1 | grep -E '^  verbs ')
case $line in
    *" usable "*) echo "SKIP: this machine has a usable RDMA device ($line)"; exit 77 ;;
esac

run_case "cohort-info: verbs unavailable, no RDMA device" \
    sh -c 'echo "$1" | grep -Eq "^  verbs +unavailable +plugin .*libcohort-verbs.so unavailable: no RDMA device" || { echo "$1"; exit 1; }' \
    sh "$line"
for t in verbs verbs,tcp; do
    run_case "COHORT_TRANSPORTS=$t: the job fails, every rank names the reason" \
        sh -c 'out=$(env COHORT_TRANSPORTS="$0" "$1" -np 2 "$2" 2>&1) && { echo "succeeded:"; echo "$out"; exit 1; }
               n=$(echo "$out" | grep -c "init: COHORT_TRANSPORTS asks for .verbs. but it cannot be used: plugin .* unavailable: no RDMA device")
               [ "$n" -ge 1 ] || { echo "$out"; exit 1; }
               if echo "$out" | grep -q "mean of ranks"; then echo "$out"; exit 1; fi' \
        "$t" "$COHORTRUN" "$EX"
done
run_case "no COHORT_TRANSPORTS: the job runs without verbs (INFO names it skipped)" \
    sh -c 'out=$(COHORT_DEBUG=INFO "$0" -np 2 "$1" 2>&1) || { echo "$out"; exit 1; }
           echo "$out" | grep -qx "mean of ranks = 0.5" || { echo "$out"; exit 1; }
           echo "$out" | grep -q "INFO plugin: plugin verbs .*skipped: .*unavailable: no RDMA device" || { echo "$out"; exit 1; }
           if echo "$out" | grep " WARN "; then exit 1; fi' \
    "$COHORTRUN" "$EX"
run_case "COHORT_TRANSPORTS=^verbs: the job runs" \
    sh -c 'env COHORT_TRANSPORTS=^verbs "$0" -np 2 "$1" | grep -qx "mean of ranks = 0.5"' "$COHORTRUN" "$EX"
finish
