#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Runs INSIDE the rxe-vm guest (tests/verbs/test_rxe.sh starts it), on a real Soft-RoCE rxe0
# shared by every rank: the plugin conformance suite over verbs at np=2 and 3, the collective
# suite over COHORT_TRANSPORTS=verbs at np=2 and 3, buffers re-made between collectives
# (memchurn), COHORT_IB_HCA choosing and excluding the device, and a rank killed with SIGKILL in
# the middle of allreduces.
. "$top_srcdir/tests/mp/lib.sh"
. "$top_srcdir/tests/mp/faults_lib.sh"
export COHORT_TIMEOUT=60 CASE_TIMEOUT=240
unset COHORT_TRANSPORTS COHORT_IB_HCA COHORT_IB_GID_INDEX COHORT_CONF COHORT_ALGO
B=$top_builddir
PLUGIN=$B/.libs/libcohort-verbs.so
t0=$(date +%s)

run_case "cohort-info sees rxe0 (usable)" \
    sh -c '"$0" 2>&1 | grep -E "^  verbs +usable" || { "$0" 2>&1 | grep -A1 verbs; exit 1; }' \
    "$B/tools/cohort-info"
for np in 2 3; do
    run_case "conformance over verbs np=$np" "$B/cohort-conformance" "$PLUGIN" --np $np --timeout 30
done
run_case "collectives over verbs np=2 (COHORT_IB_HCA==rxe0:1)" \
    env COHORT_TRANSPORTS=verbs COHORT_IB_HCA==rxe0:1 "$COHORTRUN" -np 2 "$B/tests/mp/collcheck"
run_case "collectives over verbs np=3" \
    env COHORT_TRANSPORTS=verbs "$COHORTRUN" -np 3 "$B/tests/mp/collcheck"
# Buffers freed, mapped again at the same address, realloc'd and madvise'd between collectives
# (tests/mp/memchurn): the registration cache must never use a registration whose pages went.
# Plain builds keep registrations (libucm reports unmaps); under AddressSanitizer, whose allocator
# bypasses libc, and with UCX_MEM_EVENTS=n every message registers its own.
run_case "memchurn over verbs np=2: every collective, buffers re-made between calls, 4 B-256 KiB" \
    env COHORT_TRANSPORTS=verbs "$COHORTRUN" -np 2 "$B/tests/mp/memchurn" --max 262148 \
    --need-reuse 100
run_case "memchurn over verbs np=2: 8 MiB broadcasts and allreduces on re-made buffers" \
    env COHORT_TRANSPORTS=verbs "$COHORTRUN" -np 2 "$B/tests/mp/memchurn" --min 8388612 \
    --kinds malloc,mmap,madvise --colls broadcast,allreduce --need-reuse 6
run_case "memchurn over verbs np=3, MALLOC_MMAP_THRESHOLD_=65536 (every free of 64 KiB+ unmaps)" \
    env COHORT_TRANSPORTS=verbs MALLOC_MMAP_THRESHOLD_=65536 "$COHORTRUN" -np 3 \
    "$B/tests/mp/memchurn" --max 65540 --need-reuse 100
run_case "memchurn over verbs np=2 with UCX_MEM_EVENTS=n: the cache says it is off, results right" \
    sh -c 'out=$(env COHORT_TRANSPORTS=verbs UCX_MEM_EVENTS=n COHORT_DEBUG=INFO COHORT_DEBUG_SUBSYS=net \
                 "$0" -np 2 "$1" --max 65540 --need-reuse 20 2>&1) || { echo "$out"; exit 1; }
           echo "$out" | grep -q "registration cache off: libucm cannot report unmapped memory" ||
               { echo "$out"; exit 1; }' "$COHORTRUN" "$B/tests/mp/memchurn"
run_case "COHORT_IB_HCA=^rxe: no port left, the job fails naming the setting" \
    sh -c 'out=$(env COHORT_TRANSPORTS=verbs COHORT_IB_HCA=^rxe "$0" -np 2 "$1" 2>&1) && exit 1
           echo "$out" | grep -q "no RDMA device with an active port allowed by COHORT_IB_HCA=^rxe" || { echo "$out"; exit 1; }' \
    "$COHORTRUN" "$top_builddir/examples/allreduce"
# RLIMIT_MEMLOCK too low: root's CAP_IPC_LOCK would ignore it, so the ranks run without it.
if command -v setpriv >/dev/null 2>&1; then
    run_case "RLIMIT_MEMLOCK 512 KiB without CAP_IPC_LOCK: a WARN at init, then the failing ibv_reg_mr names the limit and 'ulimit -l unlimited'" \
        sh -c 'ulimit -l 512 || exit 1
               out=$(COHORT_TRANSPORTS=verbs setpriv --inh-caps=-ipc_lock --ambient-caps=-ipc_lock \
                     --bounding-set=-ipc_lock "$0" -np 2 "$1" 2>&1) && { echo "$out"; exit 1; }
               echo "$out" | grep -q "WARN net: verbs: RLIMIT_MEMLOCK is only 512 KiB" || { echo "$out"; exit 1; }
               echo "$out" | grep -q "ibv_reg_mr of .* failed: .*RLIMIT_MEMLOCK is 512 KiB: raise it with .ulimit -l unlimited." || { echo "$out"; exit 1; }' \
        "$COHORTRUN" "$top_builddir/examples/allreduce"
fi

# A peer killed mid-collective: np=3 loops allreduce of 64 Ki floats (rendezvous) over verbs;
# rank 1 gets SIGKILL; ranks 0 and 2 must each fail with PEER_LOST (or TIMEOUT) naming rank 1.
d=$(mktemp -d)
env COHORT_TRANSPORTS=verbs COHORT_TIMEOUT=20 timeout -k 5 120 "$COHORTRUN" -np 3 \
    sh -c '"$0" "$@"; echo $? > "$1/rc.$COHORT_RANK"; exec sleep 60' \
    "$B/tests/mp/faulty" "$d" allreduce 65536 >"$d/out" 2>&1 &
cr=$!
if wait_files "$d" 60 pid.0 pid.1 pid.2; then
    k0=$(now_ms)
    kill -9 "$(cat "$d/pid.1")"
    wait_survivors "$d" "$k0" 40 0 2
    bad=""
    for r in 0 2; do
        msg=$(head -n 1 "$d/err.$r" 2>/dev/null)
        case $msg in
            "peer lost: "*"rank 1"*|"timed out: "*"rank 1"*)
                echo "    rank $r after $(secs "$(cat "$d/took.$r" 2>/dev/null || echo 0)") s: $msg" ;;
            *) bad="$bad rank $r: '${msg:-no error within 40 s}';" ;;
        esac
    done
    if [ -z "$bad" ]; then ok "rank 1 killed mid-allreduce: ranks 0 and 2 fail naming it"
    else not_ok "rank 1 killed mid-allreduce:$bad"; tail -n 8 "$d/out" | sed 's/^/    /'; fi
else
    not_ok "rank 1 killed mid-allreduce: the ranks did not finish a first allreduce in 60 s"
    tail -n 8 "$d/out" | sed 's/^/    /'
fi
kill -TERM $cr 2>/dev/null
wait $cr 2>/dev/null
rm -rf "$d"
echo "guest time: $(( $(date +%s) - t0 )) s"
finish
