#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# netns-bench: allreduce across 2 "nodes" x 2 ranks joined by a shaped link, on one machine.
#
# Not a test: a performance script (needs root and iproute2; iperf3 when present). It builds two
# network namespaces with tests/netns/lib.sh, shapes each node's link to the bridge with tc tbf in
# both directions (RATE, default 1gbit), measures the shaped link's raw TCP throughput once
# (iperf3, or cohort-bench broadcast between one rank per node without it), then runs
# cohort-bench allreduce from MIN to MAX bytes for COHORT_HIERARCHICAL=0, =1 and unset (auto),
# each with block placement (--map-by slot: ranks 0,1 | 2,3) and round-robin (--map-by node:
# ranks 0,2 | 1,3), and prints a table against the link's bound. Everything it made is removed
# on exit, Ctrl-C included.
#
#   bench/netns-bench.sh [-r RATE] [-b MIN] [-e MAX] [-n ITERS] [-B BUILDDIR] [-o OUTDIR]
#   e.g. sudo bench/netns-bench.sh -r 1gbit -B /tmp/build
#
# The bound: an allreduce of S bytes between 2 nodes must move at least S bytes across the link
# in each direction (each node sends the half the other reduces, then receives the reduced half:
# S/2 + S/2), so time >= S / link rate, whatever happens inside the nodes. "bound%" is that time
# over the measured median: 100% means the link is saturated. A flat ring over 4 ranks crosses
# the link 1.5 S per direction with block placement and 3 S with round-robin placement.
# docs/bench.md describes the columns.
set -u
here=$(cd "$(dirname "$0")" && pwd)
srcdir=$(dirname "$here")
RATE=1gbit MIN=1M MAX=64M ITERS=5 BUILD=${top_builddir:-} OUTDIR=""
while getopts r:b:e:n:B:o:h opt; do
    case $opt in
        r) RATE=$OPTARG ;;
        b) MIN=$OPTARG ;;
        e) MAX=$OPTARG ;;
        n) ITERS=$OPTARG ;;
        B) BUILD=$OPTARG ;;
        o) OUTDIR=$OPTARG ;;
        *) sed -n '3,22s/^# \{0,1\}//p' "$0"; exit 2 ;;
    esac
done
[ -n "$BUILD" ] || BUILD=$srcdir
BUILD=$(cd "$BUILD" && pwd)
CR=$BUILD/tools/cohortrun
BENCH=$BUILD/bench/cohort-bench
for f in "$CR" "$BENCH"; do
    [ -x "$f" ] || { echo "netns-bench: $f not built (give the build directory with -B)" >&2; exit 2; }
done
if [ -z "$OUTDIR" ]; then OUTDIR=$(mktemp -d "${TMPDIR:-/tmp}/netns-bench.XXXXXX"); fi
mkdir -p "$OUTDIR"

. "$here/netns_pair.sh"
netns_shaped_pair netns-bench "$RATE"
echo "# netns-bench: 2 nodes x 2 ranks, each node's link shaped to $RATE both ways" \
     "(tbf burst $(netns_burst "$RATE") B, latency 20ms); logs in $OUTDIR"

# ---- the link's raw throughput, once --------------------------------------------------------
raw_mbit=""
if command -v iperf3 >/dev/null 2>&1; then
    ip netns exec "$B" iperf3 -s -1 >/dev/null 2>&1 &
    srv=$!
    sleep 0.5
    ip netns exec "$A" iperf3 -c 10.77.1.2 -t 5 -f m >"$OUTDIR/iperf3.log" 2>&1
    wait "$srv" 2>/dev/null
    raw_mbit=$(awk '/receiver/ { for (i = 1; i < NF; i++) if ($(i+1) == "Mbits/sec") v = $i } END { print v }' "$OUTDIR/iperf3.log")
    how="iperf3 -t 5, one TCP stream a -> b"
fi
if [ -z "$raw_mbit" ]; then
    # one rank per node, broadcast: the root's buffer crosses the link once (busbw = algbw)
    ip netns exec "$NETNS_SW" "$CR" --rsh "$NETNS_RSH" -H "$A:1,$B:1" \
        "$BENCH" -c broadcast -b 64M -e 64M -n 3 -w 1 --check 0 --result-label raw >"$OUTDIR/raw.log" 2>&1
    raw_mbit=$(awk -F, '/^RESULT,raw,/ { printf "%.0f", $9 * 8000 }' "$OUTDIR/raw.log")
    how="cohort-bench broadcast 64 MiB, one rank per node"
fi
[ -n "$raw_mbit" ] || { echo "netns-bench: could not measure the link" >&2; exit 1; }
echo "# raw link throughput: $raw_mbit Mbit/s ($how)"

# ---- the allreduce runs ------------------------------------------------------------------------
for map in slot node; do
    for hier in 0 1 auto; do
        label="hier$hier-$map"
        set -- ip netns exec "$NETNS_SW" "$CR" --rsh "$NETNS_RSH" --map-by "$map" -H "$A:2,$B:2"
        [ "$hier" = auto ] || set -- "$@" -x COHORT_HIERARCHICAL="$hier"
        set -- "$@" "$BENCH" -c allreduce -b "$MIN" -e "$MAX" -f 2 -n "$ITERS" -w 2 --result-label "$label"
        line="#"
        for w in "$@"; do case $w in *" "*) line="$line '$w'" ;; *) line="$line $w" ;; esac; done
        echo "$line"
        "$@" >"$OUTDIR/$label.log" 2>&1 || echo "# $label FAILED: $(grep -v '^#' "$OUTDIR/$label.log" | tail -3)"
    done
done

# ---- the table ---------------------------------------------------------------------------------
echo
printf "%-14s %10s %12s %9s %9s %12s %7s  %s\n" config bytes time_us algbw busbw bound_us bound% algo
for map in slot node; do
    for hier in 0 1 auto; do
        label="hier$hier-$map"
        awk -v raw="$raw_mbit" -v label="$label" '
            # the table rows: size first, the algorithm last
            !/^#/ && !/^RESULT/ && NF >= 14 && $1 ~ /^[0-9]+$/ { algo[$1] = $NF }
            /^RESULT,/ {
                split($0, f, ",")
                if (f[2] != label) next
                bound = f[5] * 8 / raw   # us to move f[5] bytes at raw Mbit/s
                printf "%-14s %10d %12.1f %9.3f %9.3f %12.1f %6.0f%%  %s%s\n", label, f[5], f[7], f[9],
                       f[10], bound, 100 * bound / f[7], algo[f[5]], f[11] == "ok" ? "" : " " f[11]
            }' "$OUTDIR/$label.log"
    done
done
echo "# time_us: median over repetitions of the slowest rank (RESULT lines); algbw/busbw in GB/s;"
echo "# bound_us: bytes over the raw link rate ($raw_mbit Mbit/s); bound%: bound_us / time_us"
