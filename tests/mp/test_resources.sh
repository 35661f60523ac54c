#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Resources (tests/mp/cycles.c):
#  - no fd, thread, heap or shared memory leak over CYCLES (default 1000) cycles of create ->
#    allreduce -> destroy through cohort_comm_init_oob (a full bootstrap each time) and
#    cohort_comm_split, at np=2 over the default transport (shm here) and over tcp;
#  - bounded memory: the peak memory a collective takes beyond the user buffers is the same at
#    16 MiB and at 256 MiB (float32), over tcp and shm, for allreduce and the algorithms whose
#    scratch once grew with the message.
# CYCLES lowers the count (e.g. under AddressSanitizer, ~4x slower); the plain pass runs 1000.
. "$top_srcdir/tests/mp/lib.sh"
CY="$top_builddir/tests/mp/cycles"
: "${CYCLES:=1000}"
export CYCLES
# the growth allowed between 16 MiB and 256 MiB, in KiB (what grows with the message: 240 MiB
# more of it; request bookkeeping of 1/1000 of that would already show)
# more of it; request bookkeeping of 1/1000 of that would already show). Under AddressSanitizer
# (the CI's second pass sets ASAN_OPTIONS) its allocator and shadow pages add 0.5-1 MiB of noise
# between the two sizes on a loaded machine: 2 MiB there, still far below anything that grows
# with the message.
if [ -n "${ASAN_OPTIONS:-}" ]; then : "${GROWTH_KIB:=2048}"; fi
: "${GROWTH_KIB:=256}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM
cd "$tmp" || exit 1   # no cohort.conf of the directory make runs in

# show NAME CMD...: like run_case, but the numbers are printed whether it passes or not.
show() {
    name=$1; shift
    start=$(date +%s)
    if timeout -k 5 "$CASE_TIMEOUT" "$@" >"$tmp/out" 2>&1; then
        ok "$name ($(( $(date +%s) - start )) s)"
    else
        not_ok "$name (exit $? after $(( $(date +%s) - start )) s)"
    fi
    sed 's/^/    /' "$tmp/out" | grep -v "^    extra " | tail -n 40
}

# quiet NAME: the last show's cycles succeeded, so nothing may have been logged at WARN (a
# rank that saw its peer leave after the peer had published its last step once logged a
# "peer lost" there, although the collective succeeded)
quiet() {
    if grep -q "cohort WARN" "$tmp/out"; then
        not_ok "$1: a WARN in cycles that all succeeded"
        grep "cohort WARN" "$tmp/out" | head -n 5 | sed 's/^/    /'
    else
        ok "$1: no WARN"
    fi
}

show "np=2, default transport: $CYCLES create/allreduce/destroy cycles leak nothing" \
    "$COHORTRUN" -np 2 "$CY"
quiet "np=2, default transport"
show "np=2, tcp: $CYCLES create/allreduce/destroy cycles leak nothing" \
    env COHORT_TRANSPORTS=tcp "$COHORTRUN" -np 2 "$CY"
quiet "np=2, tcp"

# extra NP TRANSPORT MIB COLL [ALGO]: the largest "extra" of the ranks (KiB), or nothing.
extra() {
    np=$1 tp=$2 mib=$3 coll=$4 algo=${5:-}
    timeout -k 5 "$CASE_TIMEOUT" env COHORT_TRANSPORTS="$tp" ${algo:+COHORT_ALGO=$algo} \
        "$COHORTRUN" -np "$np" "$CY" --bigmem "$mib" --coll "$coll" >"$tmp/big.$mib" 2>&1 ||
        return 1
    awk '$1 == "extra" && $3 > m { m = $3 } END { if (m != "") print m; else print 0 }' \
        "$tmp/big.$mib"
}

bounded() {   # NP TRANSPORT COLL [ALGO]
    np=$1 tp=$2 coll=$3 algo=${4:-}
    what="$coll${algo:+ ($algo)} np=$np over $tp"
    if ! small=$(extra "$np" "$tp" 16 "$coll" "$algo"); then
        not_ok "$what at 16 MiB failed"; tail -n 10 "$tmp/big.16"; return
    fi
    if ! large=$(extra "$np" "$tp" 256 "$coll" "$algo"); then
        not_ok "$what at 256 MiB failed"; tail -n 10 "$tmp/big.256"; return
    fi
    grow=$((large - small))
    if [ "$grow" -le "$GROWTH_KIB" ]; then
        ok "$what: memory beyond the user buffers $small KiB at 16 MiB, $large KiB at 256 MiB"
    else
        not_ok "$what: memory beyond the user buffers grew from $small KiB at 16 MiB to $large KiB at 256 MiB (more than $GROWTH_KIB KiB)"
    fi
    grep -v "^extra \|^ok$" "$tmp/big.16" "$tmp/big.256" | sed 's/^[^:]*:/    /'
}

bounded 2 tcp allreduce
bounded 2 shm allreduce
bounded 2 tcp allreduce allreduce:rd
bounded 2 tcp broadcast
bounded 2 tcp alltoall_inplace
bounded 3 tcp reduce_scatter
finish
