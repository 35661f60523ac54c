#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Rings and hierarchies over "nodes" faked with COHORT_HOSTID on this one machine (shm inside a
# fake node, tcp between them), so they run without root; tests/netns/ runs real separate
# network stacks. Every collective element by element with the hierarchy on, forced and off,
# block and round-robin placement, uneven nodes; the topology report; bad settings.
. "$top_srcdir/tests/mp/lib.sh"
CC="$top_builddir/tests/mp/collcheck"
FN="$top_srcdir/tests/mp/fakenode.sh"
INFO="$top_builddir/tools/cohort-info"
BENCH="$top_builddir/bench/cohort-bench"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

run_case "2 nodes x 2 ranks, hierarchical (auto) --big" env FAKE_PER=2 "$COHORTRUN" -np 4 "$FN" "$CC" --big
run_case "3 nodes x 2 ranks, hierarchical (auto)" env FAKE_PER=2 "$COHORTRUN" -np 6 "$FN" "$CC"
run_case "2 nodes x 2 ranks, flat (COHORT_HIERARCHICAL=0)" \
    env FAKE_PER=2 COHORT_HIERARCHICAL=0 "$COHORTRUN" -np 4 "$FN" "$CC"
run_case "round-robin placement, 2 nodes x 2 ranks, hierarchical" env FAKE_RR=2 "$COHORTRUN" -np 4 "$FN" "$CC"
run_case "uneven 2+1, forced leader plan --big" \
    env FAKE_PER=2 COHORT_HIERARCHICAL=1 "$COHORTRUN" -np 3 "$FN" "$CC" --big
run_case "uneven 3+2, forced leader plan" \
    env FAKE_PER=3 COHORT_HIERARCHICAL=1 "$COHORTRUN" -np 5 "$FN" "$CC"
run_case "uneven 3+2, auto stays flat" env FAKE_PER=3 "$COHORTRUN" -np 5 "$FN" "$CC"

# The algorithm column: hier where a hierarchy exists, shm/ring/rd otherwise.
algo_of() {   # algo_of ENV... -- prints the algo column of a 1 MiB allreduce
    env "$@" "$COHORTRUN" -np 4 "$FN" "$BENCH" -c allreduce -b 1M -e 1M -n 2 -w 1 2>&1 |
        awk '!/^#/ && NF > 5 { print $NF; exit }'
}
a=$(algo_of FAKE_PER=2)
[ "$a" = hier ] && ok "allreduce runs 'hier' on 2x2 nodes" || not_ok "allreduce on 2x2 nodes ran '$a', not hier"
a=$(algo_of FAKE_PER=2 COHORT_HIERARCHICAL=0)
[ "$a" = ring ] && ok "COHORT_HIERARCHICAL=0 runs the flat ring" || not_ok "COHORT_HIERARCHICAL=0 ran '$a', not ring"
a=$(algo_of FAKE_PER=4)
[ "$a" = shm ] && ok "one node: shm node collectives, no hierarchy" || not_ok "one node ran '$a', not shm"

# The job report: round-robin placement still gives each node contiguous in the ring.
if env FAKE_RR=2 "$COHORTRUN" -np 4 "$FN" "$INFO" --topology --job >"$tmp/rep" 2>&1 &&
   grep -q "^0 -> 2 -> 1 -> 3 -> 0$" "$tmp/rep" && grep -q "^node 0: 0 2 " "$tmp/rep" &&
   grep -q "^hierarchical" "$tmp/rep"; then
    ok "cohort-info --topology --job: ring 0 2 1 3 for round-robin placement, hierarchical plan"
else
    not_ok "cohort-info --topology --job report"; cat "$tmp/rep"
fi
if env FAKE_PER=2 COHORT_TOPO_DUMP="$tmp/dump" "$COHORTRUN" -np 4 "$FN" "$CC" >/dev/null 2>&1 &&
   grep -q "^0 -> 1 -> 2 -> 3 -> 0$" "$tmp/dump" && grep -q "## node groups" "$tmp/dump"; then
    ok "COHORT_TOPO_DUMP writes the report"
else
    not_ok "COHORT_TOPO_DUMP report"; cat "$tmp/dump" 2>/dev/null
fi

# Bad settings fail at once, naming the variable and the text.
out=$(COHORT_HIERARCHICAL=sometimes timeout 60 "$COHORTRUN" -np 2 "$CC" 2>&1)
echo "$out" | grep -q "COHORT_HIERARCHICAL='sometimes'" && ok "COHORT_HIERARCHICAL junk refused" ||
    { not_ok "COHORT_HIERARCHICAL junk"; echo "$out" | tail -5; }
# (a missing file once gave a WARN naming it and the job ran on discovery: the job must fail)
if out=$(COHORT_TOPO_FILE=/nonexistent/topo.xml timeout 60 "$COHORTRUN" -np 2 "$CC" 2>&1); then
    not_ok "a missing COHORT_TOPO_FILE was accepted"; echo "$out" | tail -5
elif echo "$out" | grep -q "COHORT_TOPO_FILE.*/nonexistent/topo.xml"; then
    ok "a missing COHORT_TOPO_FILE is an error naming it"
else
    not_ok "missing COHORT_TOPO_FILE"; echo "$out" | tail -5
fi
finish
