#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# netns-nb: the non-blocking engine's figures across 2 "nodes" joined by a shaped link, on one
# machine (issue 18's performance section of docs/performance-log.md).
#
# Not a test: a performance script (needs root and iproute2). It builds two network namespaces
# with tests/netns/lib.sh, shapes each node's link with tc tbf (RATE, default 1gbit), and runs,
# one rank per node (cohortrun over the namespaces):
#   many:     2000 float32 allreduces of 4 KiB on 2000 buffers, blocking (--parts 2000) and
#             non-blocking (--nonblocking 2000: issued back to back, then waited), per-call time;
#   lone:     one 4 KiB non-blocking allreduce issued and waited for at once (--nonblocking 1),
#             per-call time (what a lone gradient bucket pays: one collective, no negotiation);
#   overlap:  one 64 MiB iallreduce while the caller computes as long as the blocking one takes
#             (cohort-bench --overlap);
#   compress: 64 MiB float32 allreduce with COHORT_COMPRESS=none, fp16 and bf16.
# Everything it made is removed on exit, Ctrl-C included.
#
#   bench/netns-nb.sh [-r RATE] [-B BUILDDIR] [-o OUTDIR]
set -u
here=$(cd "$(dirname "$0")" && pwd)
srcdir=$(dirname "$here")
RATE=1gbit BUILD=${top_builddir:-} OUTDIR=""
while getopts r:B:o:h opt; do
    case $opt in
        r) RATE=$OPTARG ;;
        B) BUILD=$OPTARG ;;
        o) OUTDIR=$OPTARG ;;
        *) sed -n '3,18s/^# \{0,1\}//p' "$0"; exit 2 ;;
    esac
done
[ -n "$BUILD" ] || BUILD=$srcdir
BUILD=$(cd "$BUILD" && pwd)
CR=$BUILD/tools/cohortrun
BENCH=$BUILD/bench/cohort-bench
for f in "$CR" "$BENCH"; do
    [ -x "$f" ] || { echo "netns-nb: $f not built (give the build directory with -B)" >&2; exit 2; }
done
if [ -z "$OUTDIR" ]; then OUTDIR=$(mktemp -d "${TMPDIR:-/tmp}/netns-nb.XXXXXX"); fi
mkdir -p "$OUTDIR"

. "$here/netns_pair.sh"
netns_shaped_pair netns-nb "$RATE"
echo "# netns-nb: 2 nodes x 1 rank, each node's link shaped to $RATE both ways; logs in $OUTDIR"

run() { # label, then cohortrun's options and the bench's arguments
    label=$1; shift
    echo "# $label: cohortrun -H a:1,b:1 $*"
    ip netns exec "$NETNS_SW" "$CR" --rsh "$NETNS_RSH" -H "$A:1,$B:1" "$@" >"$OUTDIR/$label.log" 2>&1 ||
        echo "# $label FAILED: $(tail -3 "$OUTDIR/$label.log")"
}
row() { # label: the 4 KiB row's out-of-place time
    awk -v l="$1" '!/^#/ && $1 == 4096 { printf "%-24s %10s us per call\n", l, $6 }' "$OUTDIR/$1.log"
}

run many-blocking "$BENCH" -b 4K -e 4K -n 10000 -w 100 --parts 2000
run many-nonblocking "$BENCH" -b 4K -e 4K -n 10000 -w 100 --nonblocking 2000
run lone-nonblocking "$BENCH" -b 4K -e 4K -n 3000 -w 100 --nonblocking 1
run overlap "$BENCH" --overlap -b 64M -e 64M
for z in none fp16 bf16; do
    run "compress-$z" -x COHORT_COMPRESS=$z "$BENCH" -b 64M -e 64M -n 3 -w 1 --check 0
done

echo
row many-blocking
row many-nonblocking
row lone-nonblocking
grep '^OVERLAP' "$OUTDIR/overlap.log"
for z in none fp16 bf16; do
    awk -v l="compress-$z" '!/^#/ && $1 == 67108864 { printf "%-24s %10s us (%s)\n", l, $6, $NF }' \
        "$OUTDIR/compress-$z.log"
done
