#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# netns-torch: the digits example between 2 "nodes" joined by a shaped link (issue 19's
# performance section of docs/performance-log.md), cohort against gloo.
#
# Not a test: a performance script (root, iproute2, Debian's python3-torch). Two network
# namespaces from tests/netns/lib.sh, each node's link shaped with tc tbf (RATE, default 1gbit),
# one rank per node started by cohortrun over the namespaces; MASTER_ADDR is node a's address
# (its namespace name resolves nowhere). Runs examples/python/train_digits.py with ARGS
# (default: --epochs 4, the example's model; --width 64 makes its step mostly computation) for:
# hvd over cohort with fp16 compression, hvd over gloo with fp16 compression, ddp over cohort,
# ddp over gloo; prints each run's summary line.
#
#   bench/netns-torch.sh [-r RATE] [-B BUILDDIR] [-- ARGS...]
set -u
here=$(cd "$(dirname "$0")" && pwd)
srcdir=$(dirname "$here")
RATE=1gbit BUILD=${top_builddir:-}
while getopts r:B:h opt; do
    case $opt in
        r) RATE=$OPTARG ;;
        B) BUILD=$OPTARG ;;
        *) sed -n '3,15s/^# \{0,1\}//p' "$0"; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || set -- --epochs 4
[ -n "$BUILD" ] || BUILD=$srcdir
BUILD=$(cd "$BUILD" && pwd)
CR=$BUILD/tools/cohortrun
[ -x "$CR" ] && [ -d "$BUILD/python-stage" ] ||
    { echo "netns-torch: no cohortrun or python-stage in $BUILD (give it with -B)" >&2; exit 2; }

. "$here/netns_pair.sh"
netns_shaped_pair netns-torch "$RATE"
addr_a=$(ip -n "$A" -4 -o addr show dev eth0 | awk '{ sub("/.*", "", $4); print $4 }')
echo "# netns-torch: 2 nodes x 1 rank, links shaped to $RATE; example args: $*"
for run in "hvd cohort fp16" "hvd gloo fp16" "ddp cohort none" "ddp gloo none"; do
    set -- $run "$@"
    api=$1 backend=$2 z=$3; shift 3
    ip netns exec "$NETNS_SW" "$CR" --rsh "$NETNS_RSH" -H "$A:1,$B:1" \
        -x MASTER_ADDR="$addr_a" -x PYTHONPATH="$BUILD/python-stage" -x OMP_NUM_THREADS=1 \
        -x GLOO_SOCKET_IFNAME=eth0 \
        /usr/bin/python3 "$srcdir/examples/python/train_digits.py" --api "$api" \
        --backend "$backend" --compression "$z" "$@" 2>&1 | grep -E '^backend=|rror' | tail -3
done
