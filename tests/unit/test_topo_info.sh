#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# cohort-info --topology on the 2-socket Intel XML (and the many-NIC one): the machine view, the
# per-rank table and the ring of a hypothetical 2-node job, and the errors for bad option values.
# The expectations come from tests/topologies/README.md (what the XML files contain).
set -u
INFO="$top_builddir/tools/cohort-info"
TOPO="$top_srcdir/tests/topologies"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# expect_line FILE REGEX: some line of FILE matches the extended regex
expect_line() {
    grep -Eq -- "$2" "$1" || fail "no line matching '$2' in $1:"
}

# ---- 24em64t: 2 packages x 6 cores, all NICs near package 0 ----------------------------------
out="$tmp/m24"
"$INFO" --topology --topo-file "$TOPO/24em64t-2n6c2t-pci.xml" --nodes 2 --ranks-per-node 4 \
    --map-by node >"$out" 2>&1 || fail "cohort-info --topology exited $?"
cat "$out"
expect_line "$out" '2 package\(s\), 2 NUMA node\(s\), 12 core\(s\), 24 PU\(s\)'
expect_line "$out" '^ *rdma +mlx4_0 +0000:05:00\.0 +ib0 +0 +0 '
# ranks: l*2+node with local rank l on core 3l: l=0,1 on package 0, l=2,3 on package 1
awk '$1 ~ /^[0-9]+$/ && NF == 8 { print }' "$out" >"$tmp/rows"
[ "$(wc -l <"$tmp/rows")" -eq 8 ] || fail "expected 8 rank rows"
while read -r rank node pkg numa core cpus nic gpu; do
    l=$((rank / 2))
    [ "$node" -eq $((rank % 2)) ] || fail "rank $rank: node $node (map-by node: $((rank % 2)))"
    [ "$core" -eq $((l * 3)) ] || fail "rank $rank: core $core, expected $((l * 3))"
    if [ "$l" -lt 2 ]; then
        [ "$pkg" = 0 ] || fail "rank $rank: package $pkg, expected 0"
        [ "$nic" = eth0 ] || fail "rank $rank on package 0: NIC $nic, expected socket-local eth0"
    else
        [ "$pkg" = 1 ] || fail "rank $rank: package $pkg, expected 1"
    fi
    [ "$gpu" = - ] || fail "rank $rank: GPU $gpu on a machine without one"
done <"$tmp/rows"
# the ring: each node's ranks contiguous, nodes in order of their lowest rank
expect_line "$out" '^ring: 0 2 4 6 1 3 5 7$'
expect_line "$out" '^ring by node: \[node 0\] 0 2 4 6 \[node 1\] 1 3 5 7$'

# map-by slot numbers node by node: the same places, so the same ring shape
"$INFO" --topology --topo-file "$TOPO/24em64t-2n6c2t-pci.xml" --nodes 2 --ranks-per-node 4 \
    --map-by slot >"$tmp/slot" 2>&1 || fail "--map-by slot exited $?"
expect_line "$tmp/slot" '^ring by node: \[node 0\] 0 1 2 3 \[node 1\] 4 5 6 7$'

# ---- 16intel64: NICs on both packages: each rank gets its own package's first NIC -----------
out="$tmp/vf"
"$INFO" --topology --topo-file "$TOPO/16intel64-manyVFs.xml" >"$out" 2>&1 ||
    fail "cohort-info --topology (many VFs) exited $?"
cat "$out"
# default: one rank per package, on cores 0 and 8
expect_line "$out" '^ +0 +0 +0 +0 +0 +0 +eth0 +-$'
expect_line "$out" '^ +1 +0 +1 +1 +8 +8 +eth6 +-$'

# ---- 32em64t: the CUDA GPU is near package 1 -------------------------------------------------
out="$tmp/m32"
"$INFO" --topology --topo-file "$TOPO/32em64t-2n8c2t-pci-normalio.xml" >"$out" 2>&1 ||
    fail "cohort-info --topology (32em64t) exited $?"
expect_line "$out" '^ +1 +0 +1 +1 +8 +8,24 +eth0 +cuda0$'

# ---- errors: the option and the text are named ----------------------------------------------
check_error() {
    needle=$1; shift
    if "$INFO" "$@" >"$tmp/err" 2>&1; then
        fail "cohort-info $* succeeded"
    fi
    grep -Fq -- "$needle" "$tmp/err" || { fail "cohort-info $*: no '$needle' in:"; cat "$tmp/err"; }
}
check_error "--nodes: 'two'" --topology --nodes two
check_error "--ranks-per-node: '0'" --topology --ranks-per-node 0
check_error "--map-by: 'socket'" --topology --map-by socket
check_error "--nodes needs a value" --topology --nodes
check_error "$tmp/none.xml" --topology --topo-file "$tmp/none.xml"
check_error "go with --topology" --nodes 2

[ "$fails" -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "all cohort-info --topology checks passed"
