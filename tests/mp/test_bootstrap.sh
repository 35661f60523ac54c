#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
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

# Slurm: SLURM_PROCID/NTASKS and a file:// rendezvous in a shared directory; rank 0 removes
# the address file once every rank joined
rank_env() { echo "SLURM_PROCID=$1 SLURM_NTASKS=2 SLURM_LOCALID=$1 SLURM_JOB_ID=$$ SLURM_STEP_ID=0 COHORT_RENDEZVOUS=file://$tmp"; }
launch 2 "$CC"; check $? "Slurm-style environment with a file:// rendezvous, 2 ranks"
left=$(ls "$tmp" | grep '\.rdv' || true)
if [ -z "$left" ]; then ok "... no rendezvous address file is left behind"
else not_ok "... left behind in the shared directory: $left"; fi

# By hand: COHORT_RANK/COHORT_SIZE with a job id of one's own. Rank 0 hosts the rendezvous (only
# cohortrun's COHORT_RENDEZVOUS_SERVER=launcher says otherwise), over tcp:// and over file://.
PORT=$(free_port)
rank_env() { echo "COHORT_RANK=$1 COHORT_SIZE=2 COHORT_JOB_ID=byhand$PORT COHORT_RENDEZVOUS=tcp://127.0.0.1:$PORT"; }
launch 2 "$CC"; check $? "COHORT_RANK/SIZE with COHORT_JOB_ID over tcp://: rank 0 hosts the rendezvous"
mkdir "$tmp/shared"
rank_env() { echo "COHORT_RANK=$1 COHORT_SIZE=2 COHORT_JOB_ID=byhand-file COHORT_RENDEZVOUS=file://$tmp/shared"; }
launch 2 "$CC"; check $? "COHORT_RANK/SIZE with COHORT_JOB_ID over file://"
left=$(ls "$tmp/shared")
if [ -z "$left" ]; then ok "... no file is left in the shared directory"
else not_ok "... left behind in the shared directory: $left"; fi
# An address file left by an earlier job with the same id (its rank 0 was killed) names a dead
# port; rank 1 starts first and reads it: it must read the file again when rank 0 replaces it.
# (Rank 0 starts once rank 1 has had the time to read the stale file: that ordering only makes
# the case meaningful, it is not needed for it to pass.)
DEAD=$(free_port)
echo "tcp://127.0.0.1:$DEAD" >"$tmp/shared/cohort-byhand-file.rdv"
rank_env() { echo "COHORT_RANK=$1 COHORT_SIZE=2 COHORT_JOB_ID=byhand-file COHORT_RENDEZVOUS=file://$tmp/shared COHORT_TIMEOUT=60"; }
env $(rank_env 1) timeout -k 5 120 "$CC" >"$tmp/out.1" 2>&1 &
p1=$!
pids=$p1
sleep 1
env $(rank_env 0) timeout -k 5 120 "$CC" >"$tmp/out.0" 2>&1 &
p0=$!
pids="$p0 $p1"
rc=0
wait $p0 || rc=1
wait $p1 || rc=1
pids=""
check $rc "file:// with a stale address file of an earlier job: rank 1 finds rank 0's new address"

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

# Rendezvous addresses and job ids that cannot work fail at once, saying what is wrong (not
# after COHORT_TIMEOUT with an unrelated errno).
JOB100=$(printf 'j%.0s' $(seq 100))
expect_fail "a 100-character COHORT_JOB_ID fails at once, naming its length" \
    "COHORT_JOB_ID='j.*' is 100 characters long; at most 63" 10 \
    env COHORT_TIMEOUT=30 COHORT_RANK=0 COHORT_SIZE=2 COHORT_JOB_ID="$JOB100" \
        COHORT_RENDEZVOUS=tcp://127.0.0.1:$(free_port) "$CC"
expect_fail "a malformed rendezvous address (tcp://::1]:29612) fails at once, naming the host part" \
    "'::1\]' is not a host name or address; an IPv6 address goes in brackets" 10 \
    env COHORT_TIMEOUT=30 COHORT_RANK=1 COHORT_SIZE=2 COHORT_RENDEZVOUS='tcp://::1]:29612' "$CC"
# A resolver that says the name does not exist gives a failure at once; one that cannot be
# asked says EAI_AGAIN, which is waited out (COHORT_TIMEOUT=5), and its own timeouts (not ours)
# may take long: the limit is generous, the "at once" checked only for the first answer.
expect_fail "an unresolvable rendezvous host fails saying it cannot be resolved" \
    "cannot resolve .*'nosuchhost.invalid'" 60 \
    env COHORT_TIMEOUT=5 COHORT_RANK=1 COHORT_SIZE=2 COHORT_RENDEZVOUS=tcp://nosuchhost.invalid:29616 "$CC"
if grep -q "Name or service not known\|No address associated with hostname" "$tmp/fail.out" &&
   [ "$took" -gt 3 ]; then
    not_ok "... the resolver said the name does not exist, yet it took $took s (it must not be retried)"
fi
expect_fail "COHORT_RENDEZVOUS_SERVER=launcher with a file:// rendezvous is refused at once" \
    "COHORT_RENDEZVOUS_SERVER=launcher says the launcher serves the rendezvous" 10 \
    env COHORT_TIMEOUT=30 COHORT_RANK=0 COHORT_SIZE=2 COHORT_RENDEZVOUS_SERVER=launcher \
        COHORT_RENDEZVOUS=file://$tmp "$CC"

# A second cohort_comm_init in one process: refused, saying the process already joined (while
# the first world lives: before asking the rendezvous; after it was destroyed: by cohortrun's
# rendezvous, which answers at once).
REINIT="$top_builddir/tests/mp/reinit"
for mode in alive after; do
    case $mode in
        alive) when="while the first world lives"
               want="second init: invalid argument: cohort_comm_init: this process already joined its job as rank" ;;
        after) when="after the first world was destroyed"
               want="second init: mismatch between ranks: .*rank [01] already joined job 'cr-[0-9a-f]*'. A process joins a job once" ;;
    esac
    start=$(date +%s)
    timeout -k 5 60 "$COHORTRUN" -np 2 "$REINIT" $mode >"$tmp/reinit.out" 2>&1
    rc=$?
    took=$(( $(date +%s) - start ))
    if [ $rc = 0 ] && [ "$(grep -c "$want" "$tmp/reinit.out")" = 2 ] && [ $took -le 20 ]; then
        ok "a second cohort_comm_init $when is refused on every rank, saying why ($took s)"
    else
        not_ok "a second cohort_comm_init $when: exit $rc after $took s, want 2 lines matching '$want'"
        tail -n 10 "$tmp/reinit.out" | sed 's/^/    /'
    fi
done

# cohort_comm_init_oob: the caller's channel checks no secret. Two ranks with one COHORT_SECRET
# connect; with rank 1 holding another, creation fails on both ranks before any transport is
# tried, with a message that says so (the cards carry a tag keyed by the secret), not "nothing
# answered". The transports' own refusal of a stranger is cohort-conformance's case "stranger".
SC="$top_builddir/tests/mp/secretcheck"
for tp in tcp shm; do
    run_case "init_oob over $tp with one COHORT_SECRET: connected" "$SC" "$tp" same
    run_case "init_oob over $tp, rank 1 with another COHORT_SECRET: both refused, the secret named" \
        sh -c '"$0" "$2" other >"$1" 2>&1; rc=$?; cat "$1"; [ $rc -eq 0 ] &&
               [ "$(grep -c "do not hold the same COHORT_SECRET and job id" "$1")" -ge 2 ]' \
        "$SC" "$tmp/secret.$tp.out" "$tp"
done
finish
