#!/bin/sh
# Bootstrap paths without cohortrun (torchrun, Open MPI and Slurm style environments, file://)
# and the failures a user must see quickly and clearly.
. "$top_srcdir/tests/mp/lib.sh"
CC="$top_builddir/tests/mp/collcheck"
tmp=$(mktemp -d)
pids=""
trap 'for p in $pids; do kill -9 "$p" 2>/dev/null; done; rm -rf "$tmp"' EXIT

# launch N CMD...: starts N ranks of CMD with the per-rank variables set by the function
# `rank_env R` (printed as VAR=value words), waits for all with a deadline, passes when all
# exit 0.
launch() {
    n=$1; shift
    pids=""
    r=0
    while [ "$r" -lt "$n" ]; do
        # shellcheck disable=SC2046
        env $(rank_env "$r") timeout -k 5 120 "$@" >"$tmp/out.$r" 2>&1 &
        pids="$pids $!"
        r=$((r + 1))
    done
    rc=0
    for p in $pids; do wait "$p" || rc=1; done
    pids=""
    return $rc
}

show_outputs() { for f in "$tmp"/out.*; do echo "--- $f"; tail -n 15 "$f"; done; }

check() {   # NAME: launch result in $?
    if [ "$1" = 0 ]; then ok "$2"; else not_ok "$2"; show_outputs; fi
}

# torchrun: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT (rank 0 hosts at port+1)
PORT=$(free_port)
rank_env() { echo "RANK=$1 WORLD_SIZE=3 LOCAL_RANK=$1 LOCAL_WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT TORCHELASTIC_RUN_ID=t$PORT"; }
launch 3 "$CC"; check $? "torchrun-style environment, 3 ranks, rank 0 hosts the rendezvous"

# Open MPI: OMPI_COMM_WORLD_* plus COHORT_RENDEZVOUS passed with -x
PORT=$(free_port)
rank_env() { echo "OMPI_COMM_WORLD_RANK=$1 OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_RANK=$1 OMPI_COMM_WORLD_LOCAL_SIZE=2 COHORT_RENDEZVOUS=tcp://127.0.0.1:$PORT"; }
launch 2 "$CC"; check $? "Open MPI-style environment with COHORT_RENDEZVOUS, 2 ranks"

# Slurm: SLURM_PROCID/NTASKS and a file:// rendezvous in a shared directory
rank_env() { echo "SLURM_PROCID=$1 SLURM_NTASKS=2 SLURM_LOCALID=$1 SLURM_JOB_ID=$$ SLURM_STEP_ID=0 COHORT_RENDEZVOUS=file://$tmp"; }
launch 2 "$CC"; check $? "Slurm-style environment with a file:// rendezvous, 2 ranks"

# Failures: each must end quickly (well under CASE_TIMEOUT) with a message that names the cause.
expect_fail() {   # NAME PATTERN SECONDS CMD...
    name=$1 pattern=$2 limit=$3; shift 3
    start=$(date +%s)
    if timeout -k 5 120 "$@" >"$tmp/fail.out" 2>&1; then
        not_ok "$name: succeeded but should have failed"; tail -n 20 "$tmp/fail.out"; return
    fi
    took=$(( $(date +%s) - start ))
    if ! grep -q -- "$pattern" "$tmp/fail.out"; then
        not_ok "$name: no line matching '$pattern'"; tail -n 20 "$tmp/fail.out"
    elif [ "$took" -gt "$limit" ]; then
        not_ok "$name: took $took s (limit $limit)"
    else
        ok "$name ($took s)"
    fi
}

expect_fail "COHORT_SOCKET_IFNAME naming no interface fails at once, listing the interfaces" \
    "interfaces that exist" 20 \
    env COHORT_SOCKET_IFNAME==nosuchif0 "$COHORTRUN" -np 2 "$CC"

expect_fail "ranks whose transports differ fail together, naming the rank" \
    "rank 1" 30 \
    "$COHORTRUN" -np 2 sh -c 'if [ "$COHORT_RANK" = 1 ]; then export COHORT_PLUGIN_PATH='"$top_builddir"'/tests/plugins/.libs COHORT_TRANSPORTS=future; fi; exec '"$CC"

expect_fail "a rank that never joins is named when the rendezvous times out" \
    "never connected\\|rank 2 did not reach the rendezvous" 30 \
    env COHORT_TIMEOUT=3 "$COHORTRUN" -np 3 sh -c 'if [ "$COHORT_RANK" = 2 ]; then sleep 20; exit 0; fi; exec '"$CC"

expect_fail "ranks with different COHORT_CHUNK_SIZE fail at start-up, showing both values" \
    "COHORT_CHUNK_SIZE differs between ranks: rank 0 (.*) uses 4096, rank 1 (.*) uses 8192" 20 \
    env COHORT_CHUNK_SIZE=4096 "$COHORTRUN" -np 2 sh -c 'if [ "$COHORT_RANK" = 1 ]; then export COHORT_CHUNK_SIZE=8192; fi; exec '"$CC"

expect_fail "a forced transport that does not exist is an error naming what was found" \
    "COHORT_TRANSPORTS names 'nosuch'" 20 \
    env COHORT_TRANSPORTS=nosuch "$COHORTRUN" -np 2 "$CC"

expect_fail "junk in a numeric setting names the variable and the text" \
    "COHORT_TIMEOUT" 20 \
    env COHORT_TIMEOUT=10x "$COHORTRUN" -np 2 "$CC"

expect_fail "junk in COHORT_ALGO names the variable" \
    "COHORT_ALGO" 20 \
    env COHORT_ALGO="allreduce:nosuch" "$COHORTRUN" -np 2 "$CC"
finish
