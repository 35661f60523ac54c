#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The shared-memory transport end to end: chosen by default for same-node ranks, every collective
# over its node collectives (default, tiny rounds, np 1-8) and over its point-to-point path (with
# and without CMA, tiny segments), oversubscribed np 8, ranks moved onto one CPU, buffers from cohort_mem_alloc read in
# place (and the fallbacks when not every rank's are, or ranks may not map each other), two jobs
# at once,
# no segment left in /dev/shm after normal runs or after a peer is killed with SIGKILL, and the
# survivors of that kill fail promptly naming the dead rank.
. "$top_srcdir/tests/mp/lib.sh"
CC="$top_builddir/tests/mp/collcheck"
PL="$top_builddir/tests/mp/peerloss"
tmp=$(mktemp -d)
bg=""
trap 'for p in $bg; do kill -9 "$p" 2>/dev/null; done; rm -rf "$tmp"' EXIT

# Segments whose creator (the pid in the name: cohort-<job>-<comm>-<rank>-<pid>-...) is gone:
# left behind. (Other tests' jobs running at the same time own live segments: not counted.)
orphans() {
    for f in /dev/shm/cohort-*; do
        [ -e "$f" ] || continue
        pid=$(basename "$f" | cut -d- -f5)
        kill -0 "$pid" 2>/dev/null || echo "$(basename "$f")"
    done
}
orphans_settled() {   # orphans still there after up to 5 s (a job's last rank unlinks at exit)
    i=0
    while [ -n "$(orphans)" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
    orphans
}

run_case "shm is the default for same-node ranks" \
    sh -c 'COHORT_DEBUG=INFO COHORT_DEBUG_SUBSYS=init "$0" -np 3 "$1" 2>&1 | grep -q "rank 0 uses shm (2 peers)"' \
    "$COHORTRUN" "$CC"
# Two "nodes" by COHORT_HOSTID: shm inside each, tcp between them, as cohort-info --peers shows.
INFO="$top_builddir/tools/cohort-info"
run_case "same-node peers use shm, others tcp (COHORT_HOSTID: 2 nodes x 2 ranks)" sh -c '
    "$0" -np 4 sh -c "COHORT_HOSTID=node\$((COHORT_RANK / 2)) exec \"$1\" --peers" >"$2/peers" 2>&1
    cat "$2/peers"
    grep -Eq "^0 +[^ ]+ +- +shm +tcp +tcp$" "$2/peers" && grep -Eq "^3 +[^ ]+ +tcp +tcp +shm +-$" "$2/peers"' \
    "$COHORTRUN" "$INFO" "$tmp"
run_case "collectives over 2 nodes x 2 ranks (shm inside, tcp between)" \
    "$COHORTRUN" -np 4 sh -c 'COHORT_HOSTID=node$((COHORT_RANK / 2)) exec "$0" --big' "$CC"
run_case "collectives over shm, np=8 on 2 cores" env COHORT_TRANSPORTS=shm "$COHORTRUN" -np 8 "$CC"
run_case "node collectives are run by shm when all ranks share the node" \
    sh -c 'COHORT_DEBUG=INFO COHORT_DEBUG_SUBSYS=init "$0" -np 3 "$1" 2>&1 | grep -q "collectives run by shm"' \
    "$COHORTRUN" "$CC"
run_case "not when they span 2 nodes (COHORT_HOSTID)" sh -c '
    "$0" -np 4 sh -c "COHORT_HOSTID=node\$((COHORT_RANK / 2)) COHORT_DEBUG=INFO COHORT_DEBUG_SUBSYS=init exec \"$1\"" >"$2/span" 2>&1 || exit 1
    grep "4 ranks on 2 node" "$2/span" | grep -q ready || exit 1
    ! grep "4 ranks on 2 node" "$2/span" | grep -q "collectives run by"' "$COHORTRUN" "$CC" "$tmp"
# cohort-bench's algo column is cohort_comm_last_algo: shm by default, ring when COHORT_ALGO says so
BENCH="$top_builddir/bench/cohort-bench"
run_case "cohort-bench reports algo shm, and COHORT_ALGO=allreduce:ring overrides it" sh -c '
    "$0" -np 2 "$1" -c allreduce -b 1M -e 1M -n 2 -w 1 | grep -Eq " shm$" || exit 1
    COHORT_ALGO=allreduce:ring "$0" -np 2 "$1" -c allreduce -b 1M -e 1M -n 2 -w 1 | grep -Eq " ring$"' \
    "$COHORTRUN" "$BENCH"
for np in 2 3 5; do
    run_case "node collectives with 4 KiB rounds (many rounds, odd splits), np=$np" \
        env COHORT_SHM_COLL_CHUNK=4096 "$COHORTRUN" -np $np "$CC" --big
done
run_case "node collectives without CMA (allgather of 32 KiB-4 MiB blocks staged too), np=2" \
    env COHORT_SHM_CMA=0 "$COHORTRUN" -np 2 "$CC" --big
# The slots written by streaming stores, by ordinary ones, and by either as each rank measures
# (ranks that disagree: the slots hold the same bytes either way)
for s in 1 0; do
    run_case "node collectives with COHORT_SHM_STREAM=$s, np=3" \
        env COHORT_SHM_STREAM=$s "$COHORTRUN" -np 3 "$CC" --big
done
run_case "node collectives with COHORT_SHM_STREAM 1, 0 and 2 on different ranks, np=3" \
    "$COHORTRUN" -np 3 sh -c 'COHORT_SHM_STREAM=$((COHORT_RANK == 2 ? 2 : 1 - COHORT_RANK)) exec "$0" --big' "$CC"
# Ranks that the scheduler puts on one CPU although cohort counted enough (moved there after
# creation): waits still yield now and then, so a step costs microseconds, not COHORT_SPIN_US.
for np in 2 3; do
    run_case "ranks moved onto one CPU after creation keep a microsecond pace, np=$np" \
        "$COHORTRUN" -np $np "$CC" --colocate
done
# Buffers from cohort_mem_alloc: the node collectives read them in place (mapped mode), and fall
# back to staging, saying why, when not every rank's are (or a rank may not map its peers).
for np in 2 3 4 8; do
    big=--big; [ $np = 8 ] && big=
    run_case "node collectives read cohort_mem_alloc buffers in place, np=$np" sh -c '
        COHORT_DEBUG=INFO "$0" -np $2 "$1" $4 --mem cohort >"$3/map$2" 2>&1 ||
            { grep -E "FAIL|ERR|collcheck" "$3/map$2" | head -20; exit 1; }
        grep -q "read the ranks. cohort_mem_alloc buffers in place" "$3/map$2"' \
        "$COHORTRUN" "$CC" $np "$tmp" $big
done
run_case "cohort_mem_alloc on even ranks only: staged (the step restarts), logged, np=5, 4 KiB rounds" sh -c '
    COHORT_DEBUG=INFO COHORT_SHM_COLL_CHUNK=4096 "$0" -np 5 "$1" --big --mem mixed >"$2/mixed" 2>&1 ||
        { grep -E "FAIL|ERR|collcheck" "$2/mixed" | head -20; exit 1; }
    grep -q "copies through staging although some ranks. buffers come from cohort_mem_alloc: rank 1.s do not" "$2/mixed"' \
    "$COHORTRUN" "$CC" "$tmp"
run_case "COHORT_SHM_MAP=0 on rank 1 only: the others cannot map it, all stage, np=3" sh -c '
    COHORT_DEBUG=INFO "$0" -np 3 sh -c "COHORT_SHM_MAP=\$((COHORT_RANK == 1 ? 0 : 1)) exec \"\$0\" --big --mem cohort" "$1" >"$2/map0" 2>&1 ||
        { grep -E "FAIL|ERR|collcheck" "$2/map0" | head -20; exit 1; }
    [ "$(grep -c "cannot map the memory of rank 1 .*COHORT_SHM_MAP=0 there" "$2/map0")" = 2 ] &&
        ! grep -q "buffers in place" "$2/map0"' \
    "$COHORTRUN" "$CC" "$tmp"
# Ranks of an ordinary user that are not dumpable cannot open each other's /proc/<pid>/fd (nor
# read each other by CMA): every rank says so once and the collectives stage (needs root to
# become nobody).
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null 2>&1; then
    run_case "ranks of an ordinary user map each other (writable too), np=3" sh -c '
        setpriv --reuid=nobody --regid=nogroup --clear-groups env COHORT_DEBUG=INFO \
            "$0" -np 3 "$1" --big --mem cohort >"$2/nobody" 2>&1 ||
            { grep -E "FAIL|ERR|collcheck" "$2/nobody" | head -20; exit 1; }
        [ "$(grep -c "read the ranks. cohort_mem_alloc buffers in place" "$2/nobody")" = 3 ]' \
        "$COHORTRUN" "$CC" "$tmp"
    run_case "ranks that cannot map each other: staged, and the log says why, np=3" sh -c '
        setpriv --reuid=nobody --regid=nogroup --clear-groups env COHORT_DEBUG=INFO \
            "$0" -np 3 "$1" --big --mem cohort --nodump >"$2/nomap" 2>&1 ||
            { grep -E "FAIL|ERR|collcheck" "$2/nomap" | head -20; exit 1; }
        [ "$(grep -c "cannot map the memory of rank" "$2/nomap")" = 3 ] && ! grep -q "buffers in place" "$2/nomap"' \
        "$COHORTRUN" "$CC" "$tmp"
else
    ok "# SKIP ranks of user nobody (mapping, and not dumpable): needs root and setpriv"
fi
run_case "COHORT_SHM_COLL_CHUNK=12 is refused naming the variable" sh -c '
    ! COHORT_SHM_COLL_CHUNK=12 "$0" -np 2 "$1" >"$2/badchunk" 2>&1 &&
    grep -q "COHORT_SHM_COLL_CHUNK=.12. is refused by the shm transport" "$2/badchunk"' "$COHORTRUN" "$CC" "$tmp"
# A full /dev/shm, in a private mount namespace with a 2 MiB tmpfs (needs root): set-up fails on
# every rank at once with a message naming /dev/shm (not after COHORT_TIMEOUT); and when only the
# node collectives' area does not fit, they are dropped with a WARN and the job runs.
if unshare -m true 2>/dev/null; then
    # (cohortrun stops the other ranks once the first fails: the job ending well before
    # COHORT_TIMEOUT is what shows that nobody waited for a connection that could not come)
    run_case "a full /dev/shm fails the job at once (COHORT_TIMEOUT=60), naming it" sh -c '
        t0=$(date +%s)
        unshare -m sh -c "mount -t tmpfs -o size=2m tmpfs /dev/shm &&
            COHORT_TIMEOUT=60 \"\$0\" -np 3 \"\$1\"" "$0" "$1" >"$2/full" 2>&1 && exit 1
        took=$(( $(date +%s) - t0 ))
        grep "cohort_comm_init failed" "$2/full" | cut -c1-160
        echo "failed after $took s"
        [ "$took" -lt 30 ] && grep -q "No space left on device; df -h /dev/shm" "$2/full"' \
        "$COHORTRUN" "$CC" "$tmp"
    run_case "no room for the node collectives: a WARN, then point-to-point" sh -c '
        unshare -m sh -c "mount -t tmpfs -o size=2m tmpfs /dev/shm &&
            COHORT_SHM_SEGMENT_SIZE=65536 \"\$0\" -np 3 \"\$1\"" "$0" "$1" >"$2/small" 2>&1 ||
            { tail -5 "$2/small"; exit 1; }
        grep -q "no node collectives: allocating" "$2/small"' "$COHORTRUN" "$CC" "$tmp"
else
    ok "# SKIP full /dev/shm cases: unshare -m is not permitted here (needs root)"
fi
# the point-to-point path (the algorithms of core/coll over shm messages)
run_case "collectives over shm point-to-point (COHORT_SHM_COLL_CHUNK=0), np=4" \
    env COHORT_TRANSPORTS=shm COHORT_SHM_COLL_CHUNK=0 "$COHORTRUN" -np 4 "$CC" --big
run_case "collectives over shm point-to-point without CMA, np=3" \
    env COHORT_TRANSPORTS=shm COHORT_SHM_COLL_CHUNK=0 COHORT_SHM_CMA=0 "$COHORTRUN" -np 3 "$CC" --big
run_case "collectives over shm point-to-point with 64 KiB per connection, np=4" \
    env COHORT_TRANSPORTS=shm COHORT_SHM_COLL_CHUNK=0 COHORT_SHM_SEGMENT_SIZE=65536 "$COHORTRUN" -np 4 "$CC" --big
run_case "two jobs at the same time" sh -c '
    "$0" -np 3 "$1" >"$2/a.out" 2>&1 & a=$!
    "$0" -np 3 "$1" >"$2/b.out" 2>&1 & b=$!
    wait $a; ra=$?; wait $b; rb=$?
    [ $ra = 0 ] && [ $rb = 0 ] || { tail -5 "$2/a.out" "$2/b.out"; exit 1; }' \
    "$COHORTRUN" "$CC" "$tmp"
left=$(orphans_settled)
if [ -z "$left" ]; then ok "no segment left in /dev/shm after normal runs"
else not_ok "segments left in /dev/shm: $left"; fi

# A peer killed with SIGKILL mid-allreduce, at an eager and a single-copy size. The ranks run
# inside sh so that cohortrun does not stop the survivors first: the transport must notice.
for count in 1024 1048576; do
    d="$tmp/kill-$count"
    mkdir -p "$d"
    COHORT_TIMEOUT=30 COHORT_TRANSPORTS=shm "$COHORTRUN" -np 3 \
        sh -c '"$0" "$1" "$2"; echo $? > "$1/rc.$COHORT_RANK"; sleep 60' "$PL" "$d" "$count" \
        >"$d/out" 2>&1 &
    cr=$!
    bg="$bg $cr"
    i=0
    while [ ! -f "$d/pid.1" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
    if [ ! -f "$d/pid.1" ]; then
        not_ok "SIGKILL at $count floats: the ranks never got going"; tail "$d/out"
        kill "$cr" 2>/dev/null; continue
    fi
    kill -9 "$(cat "$d/pid.1")"
    start=$(date +%s)
    i=0
    while { [ ! -f "$d/rc.0" ] || [ ! -f "$d/rc.2" ]; } && [ $i -lt 200 ]; do sleep 0.1; i=$((i + 1)); done
    took=$(( $(date +%s) - start ))
    # Both survivors must fail naming rank 1: the transport, or the job's control channel.
    if [ -f "$d/err.0" ] && [ -f "$d/err.2" ] && grep -q "rank 1 (.*pid" "$d/err.0" &&
       grep -q "rank 1 (.*pid" "$d/err.2"; then
        ok "SIGKILL at $count floats: both survivors failed within $took s, rank 1 named"
        sed 's/^/    /' "$d/err.0" "$d/err.2"
    else
        not_ok "SIGKILL at $count floats: survivors did not fail naming rank 1 within 20 s"
        cat "$d"/err.* 2>/dev/null; tail "$d/out"
    fi
    kill "$cr" 2>/dev/null
    wait "$cr" 2>/dev/null
done
left=$(orphans_settled)
if [ -z "$left" ]; then ok "no segment left in /dev/shm after a peer was killed"
else not_ok "segments left in /dev/shm after the kill: $left"; fi
finish
