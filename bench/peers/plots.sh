#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The two plots of docs/performance.md, from one sitting on this machine: allreduce busbw
# against size at np 2, float32 sum, out of place, 4 KiB to 64 MiB, cohort beside its peers.
#   shm:  cohort (shm, malloc'd buffers), cohort --mem cohort, Open MPI (vader), MPICH
#   tcp:  one node over loopback: cohort (tcp), Open MPI (btl tcp), Gloo (ring)
# usage: bash bench/peers/plots.sh BUILD_DIR OUT_DIR [CALLS]
# Writes OUT_DIR/shm-allreduce.svg, OUT_DIR/tcp-allreduce.svg, OUT_DIR/results.txt (every RESULT
# line, summarize.py reads it) and OUT_DIR/json/ (the series). The peers' drivers are built by
# run_peers.sh into $PEERS_WORKDIR; a peer that is not installed is left out of its plot with a
# line saying so (run_peers.sh --install installs them). Record `lscpu`'s model beside the plots.
set -euo pipefail
[ $# -ge 2 ] || { sed -n 3,11p "$0" >&2; exit 2; }
build=$(cd "$1" && pwd); out=$2; calls=${3:-20}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out/json"
res="$out/results.txt"
: >"$res"
sizes=(-b 4K -e 64M -n "$calls" -w 5)

cohort() {   # LABEL TRANSPORT [cohort-bench options...]
    local label=$1 tr=$2; shift 2
    "$build/tools/cohortrun" -np 2 "$build/bench/cohort-bench" "${sizes[@]}" --transport "$tr" \
        --result-label "$label" --json "$out/json/$label-allreduce-np2.json" "$@" |
        grep '^RESULT' >>"$res"
}
peers() {    # RELABEL(from:to or -) run_peers.sh options...
    local relabel=$1; shift
    local tmp; tmp=$(mktemp)
    bash "$here/run_peers.sh" --np 2 "${sizes[@]}" -o "$tmp" "$@" || true
    if [ "$relabel" != - ]; then sed -i "s/^RESULT,${relabel%%:*},/RESULT,${relabel##*:},/" "$tmp"; fi
    cat "$tmp" >>"$res"
    rm -f "$tmp"
}

echo "plots.sh: $(lscpu | sed -n 's/^Model name: *//p'), $(date -u +%Y-%m-%dT%H:%MZ)"
cohort cohort-shm shm
cohort cohort-shm-mem shm --mem cohort
peers - --only ompi,mpich
cohort cohort-tcp tcp
OMPI_MCA_btl=tcp,self peers ompi:ompi-tcp --only ompi
peers - --only gloo
python3 "$here/summarize.py" --json "$out/json" "$res" >/dev/null
python3 "$here/summarize.py" "$res"

plot() {     # SVG TITLE LABEL...
    local svg=$1 title=$2; shift 2
    local from=""
    for l in "$@"; do
        f="$out/json/$l-allreduce-np2.json"
        if [ -s "$f" ]; then from="$from${from:+,}$f"; else echo "plots.sh: no results for $l"; fi
    done
    "$build/bench/cohort-bench" --svg "$svg" --from "$from" --title "$title"
    echo "plots.sh: wrote $svg"
}
cpu=$(lscpu | sed -n 's/^Model name: *//p')
plot "$out/shm-allreduce.svg" "allreduce np 2, one node, shared memory ($cpu)" \
    cohort-shm cohort-shm-mem ompi mpich
plot "$out/tcp-allreduce.svg" "allreduce np 2, one node, TCP over loopback ($cpu)" \
    cohort-tcp ompi-tcp gloo
