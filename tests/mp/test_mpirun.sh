#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Under Debian's mpirun (Open MPI, PMIx) cohort needs no COHORT_RENDEZVOUS: rank 0 hosts the
# rendezvous and tells the others its address through PMIx (core/launcher.c). Results checked
# element by element (collcheck); and the failures that must be quick and clear, not hangs.
# Skipped when mpirun is missing or cohort was built without PMIx.
. "$top_srcdir/tests/mp/lib.sh"
CC="$top_builddir/tests/mp/collcheck"
command -v mpirun >/dev/null 2>&1 || { echo "SKIP: no mpirun (apt-get install openmpi-bin)"; exit 77; }
"$top_builddir/tools/cohort-info" 2>/dev/null | grep -q "pmix: yes" ||
    { echo "SKIP: cohort was built without PMIx (apt-get install libpmix-dev, reconfigure)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# nothing that would name a rendezvous: PMIx must
unset COHORT_RENDEZVOUS COHORT_RENDEZVOUS_SERVER MASTER_ADDR MASTER_PORT COHORT_RANK COHORT_SIZE
unset RANK WORLD_SIZE SLURM_PROCID SLURM_NTASKS PMI_RANK PMI_SIZE
# root: Open MPI refuses to run without both; --oversubscribe: more ranks than the 2 cores
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN="mpirun --oversubscribe"
[ "$(id -u)" = 0 ] && MPIRUN="$MPIRUN --allow-run-as-root"
export COHORT_TIMEOUT=60

# mpirun_case NAME MAX_S MPIRUN-ARGS...: runs mpirun under a deadline; $rc, $secs, $tmp/out
mpirun_case() {
    name=$1 max=$2; shift 2
    start=$(date +%s)
    timeout -k 5 "$max" $MPIRUN "$@" >"$tmp/out" 2>&1
    rc=$?
    secs=$(( $(date +%s) - start ))
}
show() { tail -n 30 "$tmp/out" | sed 's/^/    /'; }

# 1. mpirun -np 4: every collective checked; the log says how the ranks met
mpirun_case np4 120 -np 4 -x COHORT_DEBUG=INFO "$CC"
if [ "$rc" = 0 ] && grep -q "collcheck np=4: [0-9]* passed, 0 failed" "$tmp/out" &&
   grep -q "rank 0 hosts the rendezvous at tcp://.* and told the other ranks through PMIx" "$tmp/out" &&
   [ "$(grep -c 'launcher Open MPI' "$tmp/out")" = 4 ]; then
    ok "mpirun -np 4 collcheck without COHORT_RENDEZVOUS: rendezvous through PMIx, results right ($secs s)"
    grep "collcheck np=4" "$tmp/out" | sed 's/^/    /'
else
    not_ok "mpirun -np 4 collcheck without COHORT_RENDEZVOUS (exit $rc after $secs s)"; show
fi

# 2. np 2, right after: nothing of the first job is in the way
mpirun_case np2 120 -np 2 "$CC"
if [ "$rc" = 0 ] && grep -q "collcheck np=2: [0-9]* passed, 0 failed" "$tmp/out"; then
    ok "mpirun -np 2 collcheck ($secs s)"
else
    not_ok "mpirun -np 2 collcheck (exit $rc after $secs s)"; show
fi

# 3. rank 0 cannot host (COHORT_SOCKET_IFNAME matches nothing): it says so through PMIx and
#    every rank fails at once with its message, long before COHORT_TIMEOUT (60 s). (Rank 0's
#    own line may not get out: mpirun kills the job as soon as the first rank exits 1.)
mpirun_case badif 90 -np 3 -x COHORT_SOCKET_IFNAME=nosuch0 "$CC"
n0=$(grep "cohort_comm_init failed: .*COHORT_SOCKET_IFNAME='nosuch0' matches no interface" "$tmp/out" |
     grep -vc "could not host")
nother=$(grep -c "cohort_comm_init failed: .*rank 0 could not host the rendezvous (it said so through PMIx): COHORT_SOCKET_IFNAME='nosuch0'" "$tmp/out")
if [ "$rc" != 0 ] && [ "$rc" != 124 ] && [ "$secs" -lt 30 ] && [ "$nother" -ge 1 ]; then
    ok "rank 0 cannot host: every rank fails in $secs s with rank 0's reason ($n0 + $nother messages)"
else
    not_ok "rank 0 cannot host (exit $rc after $secs s; rank 0's message $n0, others' $nother)"; show
fi

# 4. a rank that never calls cohort_comm_init: the PMIx fence ends at COHORT_TIMEOUT (3 s here)
#    with a message naming it, instead of hanging (mpirun then ends the job)
mpirun_case fence 90 -np 2 -x COHORT_TIMEOUT=3 sh -c \
    'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then sleep 30; else exec "$0"; fi' "$CC"
if [ "$rc" != 0 ] && [ "$rc" != 124 ] && [ "$secs" -lt 25 ] &&
   grep -q "cohort_comm_init failed: timed out: rank 0: PMIx_Fence .* at most 3 s, COHORT_TIMEOUT.*COHORT_RENDEZVOUS" "$tmp/out"; then
    ok "a rank missing from the PMIx fence: rank 0 fails after COHORT_TIMEOUT naming the fence ($secs s)"
else
    not_ok "a rank missing from the PMIx fence (exit $rc after $secs s)"; show
fi

# 5. PMIx variables without a PMIx server (a stale environment): a clear error, no wait
start=$(date +%s)
PMIX_NAMESPACE=stale PMIX_RANK=1 OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 \
    timeout -k 5 60 "$CC" >"$tmp/out" 2>&1
rc=$?
secs=$(( $(date +%s) - start ))
if [ "$rc" != 0 ] && [ "$rc" != 124 ] && [ "$secs" -lt 20 ] &&
   grep -q "cohort_comm_init failed: .*PMIx_Init failed: .*PMIX_NAMESPACE='stale'.*COHORT_RENDEZVOUS" "$tmp/out"; then
    ok "PMIx variables but no PMIx server: PMIx_Init's failure named, COHORT_RENDEZVOUS suggested ($secs s)"
else
    not_ok "PMIx variables but no PMIx server (exit $rc after $secs s)"; show
fi

# 6. a PMIx launcher that sets no rank/size variable of its own (as prterun): rank, size and
#    local rank come from PMIx (Open MPI's OMPI_COMM_WORLD_* removed here)
mpirun_case pmixid 120 -np 3 -x COHORT_DEBUG=INFO sh -c \
    'unset OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_LOCAL_RANK OMPI_COMM_WORLD_LOCAL_SIZE; exec "$0"' "$CC"
if [ "$rc" = 0 ] && grep -q "collcheck np=3: [0-9]* passed, 0 failed" "$tmp/out" &&
   [ "$(grep -c 'rank [0-2] of 3 (launcher PMIx' "$tmp/out")" = 3 ]; then
    ok "identity from PMIx when the launcher's variables are missing ($secs s)"
else
    not_ok "identity from PMIx when the launcher's variables are missing (exit $rc after $secs s)"; show
fi

# 7. COHORT_RENDEZVOUS still wins under mpirun (the path that existed before PMIx)
PORT=$(free_port)
mpirun_case user 120 -np 2 -x COHORT_RENDEZVOUS=tcp://127.0.0.1:$PORT -x COHORT_DEBUG=INFO "$CC"
if [ "$rc" = 0 ] && grep -q "collcheck np=2: [0-9]* passed, 0 failed" "$tmp/out" &&
   grep -q "rendezvous tcp://127.0.0.1:$PORT" "$tmp/out" && ! grep -q "through PMIx" "$tmp/out"; then
    ok "mpirun with COHORT_RENDEZVOUS: that address, not PMIx ($secs s)"
else
    not_ok "mpirun with COHORT_RENDEZVOUS (exit $rc after $secs s)"; show
fi
finish
