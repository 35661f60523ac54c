#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Peer loss without cohortrun: under torchrun (and mpirun/srun with COHORT_RENDEZVOUS) rank 0
# hosts the job's rendezvous in a thread, and that connection stays open as the job's control
# channel (docs/reliability.md). Here the ranks (tests/mp/faulty, looping allreduce) are started
# by this script with a torchrun or an Open MPI style environment, one is killed with SIGKILL, and
# every survivor must fail by itself with COHORT_ERR_PEER_LOST (or TIMEOUT) within
# COHORT_TIMEOUT + 15 s, naming the dead rank; the next call must fail at once too.
#
# The case that matters most is rank 0 itself: with it goes the rendezvous server, so the
# survivors lose their control channel and the transports' connections at the same time, and
# must still say that rank 0 is gone rather than hang or blame each other. The others (rank 2,
# the last) check that the server on rank 0 still tells the survivors who died.
#
# Matrix: torchrun env × {tcp, shm} × victim {0, 2}, during collectives; torchrun × tcp × victim 0
# between collectives (--between); Open MPI env × tcp × victim 0. np = 3, 64 Ki floats.
. "$top_srcdir/tests/mp/lib.sh"
FAULTY="$top_builddir/tests/mp/faulty"
[ -x "$FAULTY" ] || { echo "not ok - $FAULTY is not built"; exit 1; }
export COHORT_TIMEOUT=20
START_LIMIT=60
FAIL_LIMIT=$((COHORT_TIMEOUT + 15))
unset COHORT_TRANSPORTS COHORT_ALGO COHORT_HOSTID COHORT_CONF COHORT_DEBUG COHORT_DEBUG_SUBSYS \
    COHORT_RENDEZVOUS COHORT_RANK COHORT_SIZE COHORT_SECRET COHORT_JOB_ID

tmp=$(mktemp -d)
pids=""
trap 'for p in $pids; do kill -9 "$p" 2>/dev/null; done; rm -rf "$tmp"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
. "$top_srcdir/tests/mp/faults_lib.sh"

NP=3
N=0
# fault_case ENV(torchrun|ompi) TRANSPORT VICTIM [--between]
fault_case() {
    kind=$1 t=$2 victim=$3 between=${4:-}
    N=$((N + 1))
    d="$tmp/case$N"
    mkdir -p "$d"
    port=$(free_port)
    name="case $N: $kind env, $t, rank $victim killed${between:+ between collectives}"
    pids=""
    for r in $(seq 0 $((NP - 1))); do
        if [ "$kind" = torchrun ]; then
            set -- RANK=$r WORLD_SIZE=$NP LOCAL_RANK=$r LOCAL_WORLD_SIZE=$NP \
                MASTER_ADDR=127.0.0.1 MASTER_PORT=$port TORCHELASTIC_RUN_ID=f$port
        else
            set -- OMPI_COMM_WORLD_RANK=$r OMPI_COMM_WORLD_SIZE=$NP \
                OMPI_COMM_WORLD_LOCAL_RANK=$r OMPI_COMM_WORLD_LOCAL_SIZE=$NP \
                COHORT_RENDEZVOUS=tcp://127.0.0.1:$port
        fi
        # shellcheck disable=SC2086
        env "$@" COHORT_TRANSPORTS=$t timeout -k 5 $((START_LIMIT + FAIL_LIMIT + 30)) \
            sh -c '"$@"; echo $? >"$0/rc.'"$r"'"' "$d" "$FAULTY" "$d" allreduce 65536 $between \
            >"$d/out.$r" 2>&1 &
        pids="$pids $!"
    done
    files=""
    for r in $(seq 0 $((NP - 1))); do files="$files pid.$r"; done
    # shellcheck disable=SC2086
    if ! wait_files "$d" $START_LIMIT $files; then
        not_ok "$name: not every rank finished its first allreduce within $START_LIMIT s"
        tail -n 5 "$d"/out.* | sed 's/^/    /'
        for p in $pids; do kill -9 "$p" 2>/dev/null; done
        wait 2>/dev/null
        return
    fi
    vpid=$(cat "$d/pid.$victim")
    t0=$(now_ms)
    kill -9 "$vpid"
    [ -n "$between" ] && touch "$d/go"
    surv=""
    for r in $(seq 0 $((NP - 1))); do [ "$r" = "$victim" ] || surv="$surv $r"; done
    # shellcheck disable=SC2086
    wait_survivors "$d" "$t0" $FAIL_LIMIT $surv
    bad=""
    for r in $surv; do
        if [ ! -f "$d/rc.$r" ]; then bad="$bad rank $r hung (no error within $FAIL_LIMIT s);"; continue; fi
        if [ ! -f "$d/err.$r" ]; then bad="$bad rank $r exited $(cat "$d/rc.$r") without an error;"; continue; fi
        head -n1 "$d/err.$r" | grep -Eq '^(peer lost|timeout)' ||
            bad="$bad rank $r: $(head -n1 "$d/err.$r");"
        grep -Eq "rank $victim([^0-9]|\$)" "$d/err.$r" ||
            bad="$bad rank $r does not name rank $victim: $(head -n1 "$d/err.$r");"
        head -n1 "$d/next.$r" 2>/dev/null | grep -Eq '^(peer lost|timeout)' ||
            bad="$bad rank $r's next call: $(head -n1 "$d/next.$r" 2>/dev/null);"
    done
    # a survivor that hung is stopped here (its pid file names it; timeout(1) would not pass
    # SIGKILL on)
    for r in $surv; do kill -9 "$(cat "$d/pid.$r")" 2>/dev/null; done
    for p in $pids; do kill -9 "$p" 2>/dev/null; done
    wait 2>/dev/null
    pids=""
    # nothing of the job may stay in /dev/shm (segments are named with their creator's pid)
    ids=$(for r in $(seq 0 $((NP - 1))); do cat "$d/pid.$r"; done | tr '\n' '|' | sed 's/|$//')
    segs=$(ls /dev/shm 2>/dev/null | grep -E "^cohort-[0-9a-f]+-[0-9a-f]+-[0-9]+-($ids)-")
    [ -n "$segs" ] && bad="$bad left in /dev/shm: $segs;"
    took=""
    for r in $surv; do [ -f "$d/took.$r" ] && took="$took $(secs "$(cat "$d/took.$r")")"; done
    if [ -z "$bad" ]; then ok "$name (survivors failed after$took s)"
    else not_ok "$name:$bad"; tail -n 3 "$d"/out.* | sed 's/^/    /'; fi
}

fault_case torchrun tcp 0
fault_case torchrun shm 0
fault_case torchrun tcp 2
fault_case torchrun shm 2
fault_case torchrun tcp 0 --between
fault_case ompi tcp 0
finish
