#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Runs INSIDE each of the two rxe-vm guests (tests/verbs/test_rxe2.sh starts them: RXEVM_VMS=2,
# rxe0 on each guest's eth0, 10.77.0.1 and 10.77.0.2): two ranks per guest, bootstrapped like
# Open MPI ranks (OMPI_COMM_WORLD_*, COHORT_RENDEZVOUS at rank 0 on guest 0) since cohortrun
# cannot start ranks in the other guest. Checks that each pair of ranks uses shm inside a guest
# and verbs across (cohort-info --peers), then runs collcheck at np=4 (hierarchical collectives:
# shm node collectives, verbs between the guests) and memchurn (buffers re-made between
# collectives). Exit 0 when every check passes on this guest.
node=${RXEVM_NODE:?run by test_rxe2.sh inside rxe-vm}
B=${top_builddir:?}
export COHORT_RENDEZVOUS=tcp://10.77.0.1:29400 COHORT_JOB_ID=rxe2-job \
    COHORT_SECRET=rxe2-test-secret-0123456789abcdef OMPI_COMM_WORLD_SIZE=4 \
    OMPI_COMM_WORLD_LOCAL_SIZE=2 COHORT_TIMEOUT=120
unset COHORT_TRANSPORTS COHORT_IB_HCA COHORT_IB_GID_INDEX COHORT_CONF COHORT_ALGO
out=$(mktemp -d)
failed=0
# ranks LABEL CMD...: runs this guest's two ranks, waits for both (bounded by timeout)
ranks() {
    lbl=$1; shift
    s=$(date +%s)
    OMPI_COMM_WORLD_RANK=$((node * 2)) OMPI_COMM_WORLD_LOCAL_RANK=0 timeout -k 5 240 "$@" \
        >"$out/$lbl.0" 2>&1 &
    p0=$!
    OMPI_COMM_WORLD_RANK=$((node * 2 + 1)) OMPI_COMM_WORLD_LOCAL_RANK=1 timeout -k 5 240 "$@" \
        >"$out/$lbl.1" 2>&1 &
    p1=$!
    rc=0
    wait $p0 || rc=1
    wait $p1 || rc=1
    T=$(( $(date +%s) - s ))
    return $rc
}
if ranks peers "$B/tools/cohort-info" --peers; then
    if [ "$node" = 0 ]; then
        # rows "r host t0 t1 t2 t3": shm when r and c share a guest (r/2 == c/2), else verbs
        bad=$(awk '$1 ~ /^[0-3]$/ && NF == 6 { r = $1; for (c = 0; c < 4; c++) {
                     t = $(3 + c); want = (c == r) ? "-" : (int(r / 2) == int(c / 2) ? "shm" : "verbs")
                     if (t != want) print "rank " r " -> " c ": " t " (want " want ")" } }' "$out/peers.0")
        rows=$(grep -cE '^[0-3] ' "$out/peers.0")
        if [ -z "$bad" ] && [ "$rows" = 4 ]; then
            echo "ok - cohort-info --peers: shm inside each guest, verbs between them (${T} s)"
        else
            echo "not ok - cohort-info --peers: $bad ($rows rows)"; cat "$out/peers.0"; failed=1
        fi
    else
        echo "ok - cohort-info --peers ran (${T} s)"
    fi
else
    echo "not ok - cohort-info --peers failed"; tail -n 20 "$out/peers.0" "$out/peers.1"; failed=1
fi
if ranks coll "$B/tests/mp/collcheck"; then
    echo "ok - collcheck np=4 over 2 guests (${T} s): $(grep 'passed,' "$out/coll.0" "$out/coll.1" | sed 's/.*collcheck/collcheck/' | head -n 1)"
else
    echo "not ok - collcheck np=4 over 2 guests"
    grep -vE '^ok|WARN error: cohort_|invalid argument' "$out/coll.0" "$out/coll.1" | tail -n 30
    failed=1
fi
# Buffers re-made between collectives (tests/mp/memchurn) with verbs between the guests: the
# registration cache across two nodes, and shm's inside each.
if ranks churn "$B/tests/mp/memchurn" --max 65540 --need-reuse 50; then
    echo "ok - memchurn np=4 over 2 guests (${T} s): $(grep 'passed,' "$out/churn.0" | tail -n 1)"
else
    echo "not ok - memchurn np=4 over 2 guests"
    tail -n 30 "$out/churn.0" "$out/churn.1"
    failed=1
fi
rm -rf "$out"
exit $failed
