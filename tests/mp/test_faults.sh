#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The fault-injection suite: one rank is killed with SIGKILL while the ranks loop a collective
# (tests/mp/faulty), and every survivor must fail by itself with COHORT_ERR_PEER_LOST (or
# COHORT_ERR_TIMEOUT) within COHORT_TIMEOUT, naming the rank that died; no survivor may hang.
#
# Matrix (docs/testing.md has the table): over tcp and over shm (COHORT_TRANSPORTS), allreduce,
# broadcast (root 0) and alltoall, each rank position 0, 1, 2 of np=3 killed in turn at a small
# (256 floats: eager) and a large size (1 Mi floats: single-copy / striped); the same over shm's
# point-to-point path (COHORT_SHM_COLL_CHUNK=0), one size per position; np=4 with every position
# killed over each transport; a few --between cases; six cases over ucx (UCX_TLS=tcp and shared
# memory) when it was built (the kill lands while the ranks wait between
# two collectives, and the survivors meet it in the next one); and two cases where cohortrun
# itself reports the death (no sh wrapper: it must exit non-zero naming rank 1, also when rank
# 1's process ends after the survivors that failed because of it).
#
# The ranks run inside `sh -c '...; echo $? > rc.RANK; sleep 60'` (as in test_shm.sh), so that
# cohortrun, which stops the whole job when a rank exits, does not stop the survivors before they
# notice the loss themselves. A case has hard deadlines: 60 s for every rank to finish its first
# collective, then COHORT_TIMEOUT + 15 s after the kill for every survivor to fail; then the
# case's cohortrun (under timeout(1)) is stopped, and its ranks' process group must be gone.
#
# Settings: FAULTS_REQUIRE_NAMING=0 reports survivors that do not name the dead rank without
# failing for it (default 1: a separate assertion per case); FAULTS_CASES="3 7" runs only those
# cases (numbers as printed, for debugging one case).
. "$top_srcdir/tests/mp/lib.sh"
FAULTY="$top_builddir/tests/mp/faulty"
[ -x "$FAULTY" ] || { echo "not ok - $FAULTY is not built"; exit 1; }
export COHORT_TIMEOUT=20
: "${FAULTS_REQUIRE_NAMING:=1}"
START_LIMIT=60                       # s for every rank to finish its first collective
FAIL_LIMIT=$((COHORT_TIMEOUT + 15))  # s after the kill for every survivor to fail
# The ranks must not get settings of the caller's environment that change what a case tests.
unset COHORT_TRANSPORTS COHORT_ALGO COHORT_HOSTID COHORT_CONF COHORT_DEBUG COHORT_DEBUG_SUBSYS

tmp=$(mktemp -d)
cr=""     # the running case's timeout(1) + cohortrun, and its ranks' process group
pgid=""
trap '[ -n "$cr" ] && kill -TERM "$cr" 2>/dev/null; [ -n "$pgid" ] && kill -9 -- "-$pgid" 2>/dev/null; rm -rf "$tmp"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

. "$top_srcdir/tests/mp/faults_lib.sh"
# rank_pids DIR NP: the pids the ranks wrote (for the leftover checks)
rank_pids() { for _r in $(seq 0 $(($2 - 1))); do cat "$1/pid.$_r" 2>/dev/null; done; }
# names_rank FILE K: whether the message in FILE names rank K ("rank K" not followed by a digit)
names_rank() { grep -Eq "rank $2([^0-9]|\$)" "$1"; }

# stop_case N PIDS: stops case N's cohortrun (SIGTERM: it terminates the ranks) and checks that
# nothing of the case is left: no process in the ranks' group, no /dev/shm segment named with
# one of the ranks' PIDS. What is left is killed and listed in LEFTOVERS.
LEFTOVERS=""
stop_case() {
    if [ -n "$cr" ]; then
        kill -TERM "$cr" 2>/dev/null   # timeout(1) passes it on to cohortrun
        wait "$cr" 2>/dev/null         # bounded: timeout -k
    fi
    cr=""
    _left=""
    if [ -n "$pgid" ] && kill -0 -- "-$pgid" 2>/dev/null; then
        _left="processes: $(ps -o pid=,args= -g "$pgid" | tr '\n' ';')"
        kill -9 -- "-$pgid" 2>/dev/null
    fi
    pgid=""
    _pids=$(echo $2 | tr ' ' '|')
    if [ -n "$_pids" ]; then
        _segs=$(ls /dev/shm 2>/dev/null | grep -E "^cohort-[0-9a-f]+-[0-9a-f]+-[0-9]+-($_pids)-")
        [ -n "$_segs" ] && _left="$_left segments: $(echo $_segs)"
    fi
    [ -n "$_left" ] && LEFTOVERS="$LEFTOVERS
    case $1: $_left"
}

want() {
    [ -z "${FAULTS_CASES:-}" ] && return 0
    for _c in $FAULTS_CASES; do [ "$_c" = "$1" ] && return 0; done
    return 1
}

N=0
# fault_case TRANSPORT COLL COUNT NP VICTIM [--between]
fault_case() {
    t=$1 coll=$2 count=$3 np=$4 victim=$5 between=${6:-}
    N=$((N + 1))
    want $N || return 0
    name="$N: $t $coll $count floats np=$np, kill -9 rank $victim${between:+ between collectives}"
    d="$tmp/case$N"
    mkdir -p "$d"
    case $t in
        shm-p2p) envs="COHORT_TRANSPORTS=shm COHORT_SHM_COLL_CHUNK=0" ;;
        ucx-tcp) envs="COHORT_TRANSPORTS=ucx UCX_TLS=tcp" ;;
        ucx-shm) envs="COHORT_TRANSPORTS=ucx UCX_TLS=posix,sysv,cma,self" ;;
        *) envs="COHORT_TRANSPORTS=$t" ;;
    esac
    # (timeout: a backstop for the whole case only; the deadlines below come first)
    timeout -k 5 $((START_LIMIT + FAIL_LIMIT + 30)) env $envs "$COHORTRUN" -np "$np" \
        sh -c '"$0" "$@"; echo $? > "$1/rc.$COHORT_RANK"; exec sleep 60' \
        "$FAULTY" "$d" "$coll" "$count" $between >"$d/out" 2>&1 &
    cr=$!
    all="" survivors=""
    for r in $(seq 0 $((np - 1))); do
        all="$all pid.$r"
        [ $r = "$victim" ] || survivors="$survivors $r"
    done
    if ! wait_files "$d" $START_LIMIT $all; then
        not_ok "$name: the ranks did not all finish a first $coll within $START_LIMIT s"
        tail -n 8 "$d/out" | sed 's/^/    /'
        pgid=$(ps -o pgid= -p "$(cat "$d/pid.0" 2>/dev/null || echo 0)" 2>/dev/null | tr -d ' ')
        stop_case "$N" "$(rank_pids "$d" "$np")"
        return
    fi
    pids=$(rank_pids "$d" "$np")
    pgid=$(ps -o pgid= -p "$(cat "$d/pid.0")" | tr -d ' ')
    t0=$(now_ms)
    kill -9 "$(cat "$d/pid.$victim")"
    if [ -n "$between" ]; then
        # the victim is dead (its sh reaped it) before the others run their next collective
        wait_files "$d" 10 "rc.$victim"
        t0=$(now_ms)
        : >"$d/go"
    fi
    # every survivor's exit status, each with the time it took from the kill
    wait_survivors "$d" "$t0" "$FAIL_LIMIT" $survivors
    # verdict
    bad="" unnamed="" report=""
    for r in $survivors; do
        rc=$(cat "$d/rc.$r" 2>/dev/null)
        took=$(cat "$d/took.$r" 2>/dev/null)
        if [ -z "$rc" ]; then
            bad="$bad rank $r hung (no error within $FAIL_LIMIT s);"
            unnamed="$unnamed $r"
            report="$report
    rank $r: HUNG, no error within $FAIL_LIMIT s"
            continue
        fi
        msg=$(head -n 1 "$d/err.$r" 2>/dev/null)
        [ "$rc" = 1 ] || bad="$bad rank $r exited $rc (faulty exits 1 after an error: a crash?);"
        report="$report
    rank $r ($(secs "$took") s after the kill, $(sed -n 's/^after //p' "$d/err.$r" 2>/dev/null) in the call): ${msg:-no err.$r, exit status $rc}"
        case $msg in
            "peer lost: "*|"timed out: "*) ;;
            *) bad="$bad rank $r exited $rc with '$(echo "$msg" | cut -c1-40)';" ;;
        esac
        # and its next collective on the failed communicator fails too
        nxt=$(head -n 1 "$d/next.$r" 2>/dev/null)
        case $nxt in
            "peer lost: "*|"timed out: "*) ;;
            *) bad="$bad rank $r's next collective returned '$(echo "$nxt" | cut -c1-60)';"
               report="$report
    rank $r, next collective: $nxt" ;;
        esac
        { [ -f "$d/err.$r" ] && names_rank "$d/err.$r" "$victim"; } || unnamed="$unnamed $r"
    done
    grep -Eq "Sanitizer|runtime error:" "$d/out" && bad="$bad a sanitizer report in the output;"
    vrc=$(cat "$d/rc.$victim" 2>/dev/null)
    [ "$vrc" = 137 ] || bad="$bad the victim's exit status is '${vrc:-none}', not 137 (SIGKILL);"
    if [ -z "$bad" ]; then
        ok "$name: every survivor failed (PEER_LOST/TIMEOUT) within $FAIL_LIMIT s"
    else
        not_ok "$name:$bad"
        tail -n 6 "$d/out" | cut -c1-300 | sed 's/^/    out: /'
    fi
    echo "$report" | sed '1d'
    if [ -n "$unnamed" ]; then
        if [ "$FAULTS_REQUIRE_NAMING" = 1 ]; then
            not_ok "$name: survivor(s)$unnamed do not name rank $victim"
        else
            echo "    (FAULTS_REQUIRE_NAMING=0) survivor(s)$unnamed do not name rank $victim"
        fi
    elif [ "$FAULTS_REQUIRE_NAMING" = 1 ]; then
        ok "$name: every survivor names rank $victim"
    fi
    stop_case "$N" "$pids"
}

SMALL=256        # 1 KiB: eager everywhere
LARGE=1048576    # 4 MiB: single-copy (shm CMA), several rounds (shm node collectives), striped (tcp)
# np=3, every rank position, both sizes, over tcp and over shm (whose node collectives run every
# collective when all ranks share the node)
for t in tcp shm; do
    for coll in allreduce broadcast alltoall; do
        for v in 0 1 2; do
            fault_case $t $coll $SMALL 3 $v
            fault_case $t $coll $LARGE 3 $v
        done
    done
done
# shm's point-to-point path (COHORT_SHM_COLL_CHUNK=0: the core's algorithms over shm messages),
# every position, the size alternating
i=0
for coll in allreduce broadcast alltoall; do
    for v in 0 1 2; do
        if [ $(( (v + i) % 2 )) = 0 ]; then size=$SMALL; else size=$LARGE; fi
        fault_case shm-p2p $coll $size 3 $v
    done
    i=$((i + 1))
done
# np=4 (not every survivor is a ring/tree neighbour of the dead rank): every position over each
# transport
fault_case tcp allreduce $LARGE 4 3
fault_case tcp broadcast $SMALL 4 2
fault_case tcp alltoall $SMALL 4 1
fault_case tcp allreduce $SMALL 4 0
fault_case shm allreduce $SMALL 4 0
fault_case shm alltoall $LARGE 4 1
fault_case shm broadcast $LARGE 4 2
fault_case shm-p2p allreduce $LARGE 4 3
# between collectives: the survivors meet the loss at the start of their next collective
fault_case tcp allreduce $SMALL 3 1 --between
fault_case tcp broadcast $LARGE 4 3 --between
fault_case tcp alltoall $LARGE 4 2 --between
fault_case shm broadcast $SMALL 3 0 --between
fault_case shm alltoall $SMALL 3 2 --between
fault_case shm-p2p allreduce $LARGE 4 3 --between
# over UCX, when it was built: its tcp (UCX's peer error handling sees the dead rank's sockets
# close) and its shared memory (UCX cannot report a dead peer there: the plugin watches its pid)
if [ -e "$top_builddir/.libs/libcohort-ucx.so" ]; then
    fault_case ucx-tcp allreduce $SMALL 3 1
    fault_case ucx-tcp allreduce $LARGE 3 2
    fault_case ucx-tcp broadcast $LARGE 4 0
    fault_case ucx-shm allreduce $SMALL 3 0
    fault_case ucx-shm allreduce $LARGE 3 2
    fault_case ucx-shm alltoall $LARGE 4 1
else
    echo "# the ucx cases are skipped: libcohort-ucx.so was not built"
fi

# What the user sees: cohortrun runs faulty directly, and reports the first rank that died.
N=$((N + 1))
if want $N; then
    name="$N: cohortrun -np 3 faulty (no wrapper), kill -9 rank 1: cohortrun exits non-zero naming rank 1"
    d="$tmp/case$N"
    mkdir -p "$d"
    timeout -k 5 $((START_LIMIT + FAIL_LIMIT + 30)) "$COHORTRUN" -np 3 "$FAULTY" "$d" allreduce $SMALL \
        >"$d/out" 2>&1 &
    cr=$!
    if wait_files "$d" $START_LIMIT pid.0 pid.1 pid.2; then
        pids=$(rank_pids "$d" 3)
        pgid=$(ps -o pgid= -p "$(cat "$d/pid.0")" | tr -d ' ')
        p1=$(cat "$d/pid.1")
        kill -9 "$p1"
        wait "$cr"
        rc=$?
        cr=""
        # cohortrun's line for the first rank that failed (tools/cr_watch.c, rank_exited)
        first=$(grep -E '^cohortrun: rank [0-9]+ ' "$d/out" | head -n 1)
        if [ $rc = 0 ] || [ $rc = 124 ] || [ $rc = 137 -a -z "$first" ]; then
            not_ok "$name: exit status $rc"
        elif ! echo "$first" | grep -Eq "^cohortrun: rank 1 \(host [^,]+, pid $p1\) was killed by signal 9"; then
            not_ok "$name: the first rank cohortrun names is not rank 1 killed by signal 9 (exit $rc)"
        elif ! grep '^cohortrun: ' "$d/out" | tail -n 1 | grep -q "rank 1 "; then
            not_ok "$name: cohortrun's last line does not name rank 1 (exit $rc)"
        elif grep -Eq "Sanitizer|runtime error:" "$d/out"; then
            not_ok "$name: a sanitizer report in the output (exit $rc)"
        else
            ok "$name (exit $rc)"
        fi
        tail -n 6 "$d/out" | cut -c1-300 | sed 's/^/    /'
        stop_case "$N" "$pids"
    else
        not_ok "$name: the ranks did not all finish a first allreduce within $START_LIMIT s"
        tail -n 8 "$d/out" | sed 's/^/    /'
        stop_case "$N" ""
    fi
fi

# The same, with the order of the ends forced: rank 1's faulty is killed, but the process
# cohortrun started for rank 1 (a shell around it) ends only after ranks 0 and 2 have failed and
# been reaped, and then by SIGKILL. cohortrun, which sees ranks 0 and 2 end first, must still
# name rank 1: the rendezvous saw its connection close without a goodbye before the others
# failed. (Its line says "killed by signal 9" once the shell is reaped within VERDICT_WAIT_S, or
# "left the job" when the shell is slower than that on a loaded machine.)
N=$((N + 1))
if want $N; then
    name="$N: cohortrun -np 3 faulty, rank 1 killed but ends after ranks 0 and 2 failed: cohortrun names rank 1"
    d="$tmp/case$N"
    mkdir -p "$d"
    # rank 1: faulty under a shell that waits (at most 60 s) until ranks 0 and 2 are reaped
    timeout -k 5 $((START_LIMIT + FAIL_LIMIT + 30)) "$COHORTRUN" -np 3 sh -c '
        if [ "$COHORT_RANK" != 1 ]; then exec "$0" "$@"; fi
        "$0" "$@"
        i=0
        while [ $i -lt 1200 ]; do
            gone=1
            for r in 0 2; do kill -0 "$(cat "$1/pid.$r")" 2>/dev/null && gone=0; done
            [ $gone = 1 ] && break
            sleep 0.05; i=$((i + 1))
        done
        kill -9 $$' "$FAULTY" "$d" allreduce $SMALL >"$d/out" 2>&1 &
    cr=$!
    if wait_files "$d" $START_LIMIT pid.0 pid.1 pid.2; then
        pids=$(rank_pids "$d" 3)
        pgid=$(ps -o pgid= -p "$(cat "$d/pid.0")" | tr -d ' ')
        kill -9 "$(cat "$d/pid.1")"
        wait "$cr"
        rc=$?
        cr=""
        first=$(grep -E '^cohortrun: rank [0-9]+ ' "$d/out" | head -n 1)
        if [ $rc = 0 ] || [ $rc = 124 ] || [ -z "$first" ]; then
            not_ok "$name: exit status $rc"
        elif ! echo "$first" | grep -Eq "^cohortrun: rank 1 \(host [^,]+, pid [0-9]+\) (was killed by signal 9|left the job: its connection to the rendezvous closed without a goodbye)"; then
            not_ok "$name: the first rank cohortrun names is not rank 1, lost first (exit $rc)"
        elif ! echo "$first" | grep -q "ranks 0,2 failed after it"; then
            not_ok "$name: cohortrun's line does not say that ranks 0 and 2 failed after rank 1 (exit $rc)"
        elif grep -Eq "Sanitizer|runtime error:" "$d/out"; then
            not_ok "$name: a sanitizer report in the output (exit $rc)"
        else
            ok "$name (exit $rc)"
        fi
        tail -n 6 "$d/out" | cut -c1-300 | sed 's/^/    /'
        stop_case "$N" "$pids"
    else
        not_ok "$name: the ranks did not all finish a first allreduce within $START_LIMIT s"
        tail -n 8 "$d/out" | sed 's/^/    /'
        stop_case "$N" ""
    fi
fi

if [ -z "$LEFTOVERS" ]; then
    ok "no process of any case and no /dev/shm segment of their ranks is left"
else
    not_ok "left behind (killed now):$LEFTOVERS"
fi
finish
