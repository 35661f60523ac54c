#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
#
# run_peers.sh -- build the peer drivers of bench/peers and run them (Open MPI, MPICH, Gloo),
# writing every RESULT line into one file. A peer whose package is missing is skipped with a
# one-line reason. See bench/peers/README.md.
set -u

here=$(cd "$(dirname "$0")" && pwd)
workdir=${PEERS_WORKDIR:-/tmp/cohort-peers}
nps="2 4"
minb=8
maxb=64M
iters=20
warmup=5
colls=allreduce
only="ompi,mpich,gloo"
nonblocking=""
same_buffer=""
gloo_algos=ring
timeout_s=600
out=""
install=0

usage() {
    cat <<EOF
usage: bash bench/peers/run_peers.sh [options]
  --install            apt-get install openmpi-bin libopenmpi-dev mpich libmpich-dev
                       libgloo-dev g++ first (Debian 12, as root)
  --np "N ..."         process counts (default "2 4")
  -b SIZE, -e SIZE     smallest and largest size, K/M suffixes (default 8 and 64M)
  -n N, -w N           timed and warm-up calls per size (default 20 and 5)
  -c "COLL ..."        MPI collectives: allreduce broadcast allgather reduce_scatter alltoall
                       (default allreduce; Gloo runs allreduce only)
  --only LIST          peers to run, comma separated: ompi,mpich,gloo (default all three)
  --nonblocking N      also run MPI_Iallreduce with N in flight (labels ompi-nbN, mpich-nbN)
  --same-buffer        pass --same-buffer to the drivers (every call on the same buffers)
  --gloo-algos "A ..." Gloo algorithms: ring hd new (default ring)
  --timeout S          limit per run, seconds (default 600)
  -o FILE              the RESULT file (default \$PEERS_WORKDIR/results-<date>.txt)
  -h, --help           this text
Work dir: \$PEERS_WORKDIR (default /tmp/cohort-peers): build/ (binaries), logs/ (full output).
EOF
}

die() { echo "run_peers.sh: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
    case $1 in
    --install) install=1 ;;
    --np) [ $# -ge 2 ] || die "--np needs a value"; nps=$2; shift ;;
    -b) [ $# -ge 2 ] || die "-b needs a value"; minb=$2; shift ;;
    -e) [ $# -ge 2 ] || die "-e needs a value"; maxb=$2; shift ;;
    -n) [ $# -ge 2 ] || die "-n needs a value"; iters=$2; shift ;;
    -w) [ $# -ge 2 ] || die "-w needs a value"; warmup=$2; shift ;;
    -c) [ $# -ge 2 ] || die "-c needs a value"; colls=$2; shift ;;
    --only) [ $# -ge 2 ] || die "--only needs a value"; only=$2; shift ;;
    --nonblocking) [ $# -ge 2 ] || die "--nonblocking needs a value"; nonblocking=$2; shift ;;
    --same-buffer) same_buffer=--same-buffer ;;
    --gloo-algos) [ $# -ge 2 ] || die "--gloo-algos needs a value"; gloo_algos=$2; shift ;;
    --timeout) [ $# -ge 2 ] || die "--timeout needs a value"; timeout_s=$2; shift ;;
    -o) [ $# -ge 2 ] || die "-o needs a value"; out=$2; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
    esac
    shift
done

if [ "$install" = 1 ]; then
    sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    $sudo apt-get update &&
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends \
            openmpi-bin libopenmpi-dev mpich libmpich-dev libgloo-dev g++ ||
        die "apt-get install failed"
fi

mkdir -p "$workdir/build" "$workdir/logs" || die "cannot create $workdir"
[ -n "$out" ] || out=$workdir/results-$(date -u +%Y%m%dT%H%M%SZ).txt
: > "$out" || die "cannot write $out"
cflags="-O2 -std=gnu11 -Wall -Wextra -Werror"
want() { case ",$only," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
note() { echo "run_peers.sh: $*"; }

# Run one command under the time limit; its RESULT lines go to $out, everything to the log.
# usage: run LOGNAME COMMAND...
run() {
    local log=$workdir/logs/$1.log
    shift
    echo "+ $*" > "$log"
    timeout "$timeout_s" "$@" >> "$log" 2>&1
    local rc=$?
    grep '^RESULT,' "$log" >> "$out"
    if [ $rc -ne 0 ]; then
        note "FAILED (exit $rc): $* -- see $log"
        tail -n 3 "$log" | sed 's/^/    /'
    else
        note "ok: $(grep -c '^RESULT,' "$log") sizes, $log"
    fi
    return 0
}

mpi_args() {   # common driver arguments: collective $1, label $2
    printf '%s\n' -c "$1" -b "$minb" -e "$maxb" -n "$iters" -w "$warmup" -l "$2"
    [ -z "$same_buffer" ] || printf '%s\n' "$same_buffer"
}

run_mpi() {    # flavour (ompi|mpich), compiler, launcher...
    local flav=$1 cc=$2
    shift 2
    local bin=$workdir/build/mpi_coll_bench.$flav np c nb
    if ! $cc $cflags -o "$bin" "$here/mpi_coll_bench.c" > "$workdir/logs/build-$flav.log" 2>&1; then
        note "$flav: build failed, skipped -- see $workdir/logs/build-$flav.log"
        return 0
    fi
    for np in $nps; do
        for c in $colls; do
            mapfile -t args < <(mpi_args "$c" "$flav")
            run "$flav-np$np-$c" "$@" -np "$np" "$bin" "${args[@]}"
        done
        if [ -n "$nonblocking" ]; then
            mapfile -t args < <(mpi_args allreduce "$flav-nb$nonblocking")
            nb=(--nonblocking "$nonblocking")
            run "$flav-np$np-iallreduce-nb$nonblocking" "$@" -np "$np" "$bin" "${args[@]}" "${nb[@]}"
        fi
    done
}

if want ompi; then
    if command -v mpicc.openmpi > /dev/null && command -v mpirun.openmpi > /dev/null; then
        # default binding: with --bind-to none on a busy 2-core machine small ops took ~8 ms
        launch=(mpirun.openmpi --oversubscribe)
        [ "$(id -u)" != 0 ] || launch+=(--allow-run-as-root)
        run_mpi ompi mpicc.openmpi "${launch[@]}"
    else
        note "ompi: skipped (mpicc.openmpi or mpirun.openmpi missing: openmpi-bin libopenmpi-dev)"
    fi
fi

if want mpich; then
    if command -v mpicc.mpich > /dev/null && command -v mpirun.mpich > /dev/null; then
        # keep UCX and hydra on loopback (off eth0); intra-node traffic uses shared memory
        run_mpi mpich mpicc.mpich env UCX_NET_DEVICES=lo mpirun.mpich -iface lo
    else
        note "mpich: skipped (mpicc.mpich or mpirun.mpich missing: mpich libmpich-dev)"
    fi
fi

if want gloo; then
    gbin=$workdir/build/gloo_coll_bench
    if [ ! -f /usr/include/gloo/allreduce_ring.h ]; then
        note "gloo: skipped (/usr/include/gloo missing: libgloo-dev)"
    elif ! command -v g++ > /dev/null; then
        note "gloo: skipped (g++ missing)"
    elif ! g++ -O2 -std=c++17 -Wall -Wextra -Werror -o "$gbin" "$here/gloo_coll_bench.cc" \
            -lgloo -lpthread > "$workdir/logs/build-gloo.log" 2>&1; then
        note "gloo: build failed, skipped -- see $workdir/logs/build-gloo.log"
    else
        # one process per rank; a fresh FileStore directory per run
        gloo_ranks() {   # np, label, algo
            local np=$1 label=$2 algo=$3 store r rc=0 pids=()
            store=$(mktemp -d "$workdir/store.XXXXXX") || return 1
            for ((r = 1; r < np; r++)); do
                RANK=$r WORLD_SIZE=$np "$gbin" --store "$store" -a "$algo" -b "$minb" \
                    -e "$maxb" -n "$iters" -w "$warmup" -l "$label" $same_buffer > /dev/null &
                pids+=($!)
            done
            RANK=0 WORLD_SIZE=$np "$gbin" --store "$store" -a "$algo" -b "$minb" -e "$maxb" \
                -n "$iters" -w "$warmup" -l "$label" $same_buffer || rc=$?
            for p in "${pids[@]}"; do
                wait "$p" || rc=$?
            done
            rm -rf "$store"
            return $rc
        }
        export -f gloo_ranks
        export gbin minb maxb iters warmup same_buffer workdir
        for np in $nps; do
            for a in $gloo_algos; do
                label=gloo
                [ "$a" = ring ] || label=gloo-$a
                run "gloo-np$np-$a" bash -c 'gloo_ranks "$@"' gloo_ranks "$np" "$label" "$a"
            done
        done
    fi
fi

note "$(grep -c '^RESULT,' "$out") RESULT lines in $out"
note "table: python3 $here/summarize.py $out [cohort.txt ...]"
