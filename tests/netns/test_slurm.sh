#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# cohort under a real Slurm without COHORT_RENDEZVOUS: a cluster this test starts itself
# (Debian's slurm-wlm and munge) on two "nodes" that are network namespaces (tests/netns/lib.sh):
# munged with a key made here, slurmctld in the switch namespace, one slurmd per node namespace,
# each with its own spool, pid and log files; no cgroups, no accounting. Then:
#   srun -n 4 collcheck               without PMIx: node1 hosts the rendezvous on the port
#                                     derived from the job and step ids
#   srun --mpi=pmix -n 4 collcheck    through PMIx (when Debian's Slurm has the plugin)
#   srun --mpi=pmi2 -n 4 collcheck    PMI_RANK/PMI_SIZE agree with Slurm's: as without PMIx
#   sbatch -N 2 -n 4                  a two-node batch job running both; its output checked
#   srun with the derived port busy   a quick failure naming the port and COHORT_RENDEZVOUS
# Every wait has a deadline; everything (daemons, namespaces, the temp dir) is
# removed at the end. Skipped (77) without root/network namespaces or without slurm-wlm/munge
# (scripts/deps.sh installs them).
: "${top_builddir:?run through make check (AM_TESTS_ENVIRONMENT sets top_builddir)}"
: "${top_srcdir:?run through make check}"
. "$top_srcdir/tests/netns/lib.sh"
unset COHORT_HOSTID COHORT_SOCKET_IFNAME COHORT_TRANSPORTS COHORT_DEBUG COHORT_CONF \
      COHORT_RANK COHORT_SIZE COHORT_RENDEZVOUS COHORT_JOB_ID COHORT_SECRET MASTER_ADDR \
      MASTER_PORT RANK WORLD_SIZE PMIX_NAMESPACE PMIX_RANK
# (and whatever Slurm job this test may itself run in)
for v in $(env | sed -n 's/^\(SLURM_[A-Z_]*\)=.*/\1/p'); do unset "$v"; done
. "$top_srcdir/tests/mp/lib.sh"
CC="$top_builddir/tests/mp/collcheck"
case $CC in /*) ;; *) CC=$(pwd)/$CC ;; esac
[ -x "$CC" ] || { echo "not ok - $CC is not built"; exit 1; }
for p in munged slurmctld slurmd srun sbatch sinfo scontrol; do
    command -v "$p" >/dev/null 2>&1 ||
        { echo "SKIP: $p not found (slurm-wlm and munge: scripts/deps.sh installs them)"; exit 77; }
done

netns_setup          # skips when there is no root or no network namespace
# (netns_setup's traps: netns_cleanup kills every process in our namespaces, daemons included,
# then runs NETNS_AT_EXIT)
# Not under /tmp: each node gets a /tmp of its own below, as real nodes have (the two stepds of a
# step with --mpi=pmix would otherwise make the same directory there).
tmp=$(mktemp -d /var/tmp/cohort-slurm.XXXXXX) || { not_ok "mktemp"; finish; exit 1; }
NETNS_AT_EXIT='rm -rf "$tmp"'
chmod 755 "$tmp"     # slurmd's steps and munged check the path; only root writes here
mkdir -m 1777 "$tmp/node1-tmp" "$tmp/node2-tmp"
netns_add_host node1 eth0 || { not_ok "cannot make node1"; finish; exit 1; }
netns_add_host node2 eth0 || { not_ok "cannot make node2"; finish; exit 1; }
SW=$NETNS_SW N1=$(netns_ns node1)
# The nodes' names resolve on the nodes: each slurmd runs in its node's network namespace and a
# mount namespace of its own where this file is bind-mounted over /etc/hosts, and the node's own
# directory over /tmp (its tasks inherit all that). Not `ip netns exec`: that remounts /sys, and slurmd 22.05 will not start without the
# cgroup file systems under /sys/fs/cgroup, even with proctrack/linuxproc and task/none.
printf '127.0.0.1 localhost\n10.77.1.1 node1\n10.77.1.2 node2\n10.77.1.254 %s\n' \
    "$(hostname -s)" >"$tmp/hosts"
command -v nsenter >/dev/null 2>&1 && command -v unshare >/dev/null 2>&1 ||
    netns_skip "nsenter/unshare (util-linux) not found"
# on_node NODE CMD...: CMD in NODE's network namespace with the nodes' /etc/hosts and its /tmp
on_node() {
    _n=$1; shift
    nsenter --net="/run/netns/$(netns_ns "$_n")" unshare -m --propagation private \
        sh -c 'mount --bind "$0" /etc/hosts && mount --bind "$1" /tmp && shift && exec "$@"' \
        "$tmp/hosts" "$tmp/$_n-tmp" "$@"
}

# deadline SECONDS CMD...: retries CMD every 0.3 s until it succeeds; 1 after SECONDS
deadline() {
    _end=$(( $(date +%s) + $1 )); shift
    while ! "$@" >/dev/null 2>&1; do
        [ "$(date +%s)" -ge "$_end" ] && return 1
        sleep 0.3
    done
}

# ---- munge ------------------------------------------------------------------------------------
dd if=/dev/urandom of="$tmp/munge.key" bs=1 count=1024 2>/dev/null
chmod 400 "$tmp/munge.key"
mkdir -m 700 "$tmp/munge"
ip netns exec "$SW" munged --force --key-file="$tmp/munge.key" --socket="$tmp/munge/sock" \
    --pid-file="$tmp/munge/pid" --log-file="$tmp/munge/log" --seed-file="$tmp/munge/seed" \
    >"$tmp/munge/out" 2>&1
if ! deadline 15 test -S "$tmp/munge/sock"; then
    not_ok "munged did not start within 15 s"; tail -n 20 "$tmp/munge/out" "$tmp/munge/log"
    finish; exit 1
fi

# ---- slurm.conf ---------------------------------------------------------------------------------
export SLURM_CONF="$tmp/slurm.conf"
CTLD_PORT=$(free_port)
cat >"$SLURM_CONF" <<CONF
ClusterName=cohorttest
SlurmctldHost=$(hostname -s)(10.77.1.254)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$((CTLD_PORT + 1))
AuthType=auth/munge
AuthInfo=socket=$tmp/munge/sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$tmp/ctld
SlurmdSpoolDir=$tmp/spool/%n
SlurmctldPidFile=$tmp/ctld/slurmctld.pid
SlurmdPidFile=$tmp/spool/slurmd.%n.pid
SlurmctldLogFile=$tmp/ctld/slurmctld.log
SlurmdLogFile=$tmp/spool/slurmd.%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
FirstJobId=100
KillWait=5
MinJobAge=600
SlurmdTimeout=60
InactiveLimit=0
NodeName=node1 NodeAddr=10.77.1.1 CPUs=2 State=UNKNOWN
NodeName=node2 NodeAddr=10.77.1.2 CPUs=2 State=UNKNOWN
PartitionName=test Nodes=node[1-2] Default=YES MaxTime=10 State=UP
CONF
mkdir -p "$tmp/ctld" "$tmp/spool/node1" "$tmp/spool/node2"

ip netns exec "$SW" slurmctld -i -f "$SLURM_CONF" >"$tmp/ctld/out" 2>&1
on_node node1 slurmd -N node1 -f "$SLURM_CONF" >"$tmp/spool/out1" 2>&1
on_node node2 slurmd -N node2 -f "$SLURM_CONF" >"$tmp/spool/out2" 2>&1
# the clients run in the switch namespace, beside slurmctld
S() { ip netns exec "$SW" "$@"; }
both_idle() { [ "$(S sinfo -h -N -o '%N %t' | sort | tr '\n' ' ')" = "node1 idle node2 idle " ]; }
if deadline 45 both_idle; then
    ok "slurmctld and 2 slurmds (one per namespace) up, both nodes idle"
else
    not_ok "the Slurm cluster did not come up within 45 s: $(S sinfo -h -N -o '%N %t %E' 2>&1 | tr '\n' ';')"
    for f in "$tmp/ctld/slurmctld.log" "$tmp/spool/slurmd.node1.log" "$tmp/ctld/out" "$tmp/spool/out1"; do
        echo "--- $f"; tail -n 15 "$f" 2>/dev/null
    done
    finish; exit 1
fi

# The program the tasks run: collcheck, each node a node of its own for cohort (all namespaces
# share one hostname and boot id: COHORT_HOSTID tells them apart), printing its node.
cat >"$tmp/task.sh" <<TASK
#!/bin/sh
echo "task \$SLURM_PROCID of \$SLURM_NTASKS on \$SLURMD_NODENAME"
# what cohort reads of Slurm's variables, as Slurm exports them (checked below)
[ "\$SLURM_PROCID" = 0 ] && echo "env: SLURM_JOB_ID=\$SLURM_JOB_ID SLURM_STEP_ID=\$SLURM_STEP_ID" \
    "SLURM_STEP_NODELIST=\$SLURM_STEP_NODELIST SLURM_NTASKS=\$SLURM_NTASKS" \
    "SLURM_LOCALID=\$SLURM_LOCALID PMIX_NAMESPACE=\${PMIX_NAMESPACE:-unset}"
COHORT_HOSTID=\$SLURMD_NODENAME exec "$CC"
TASK
chmod 755 "$tmp/task.sh"
export COHORT_TIMEOUT=60 COHORT_DEBUG=INFO

# Before each job: both nodes idle again (a node stays "completing" a moment after a job; a job
# submitted then would wait for the next scheduling pass)
idle() {
    deadline 30 both_idle ||
        echo "# the nodes are not idle 30 s after the last job: $(S sinfo -h -N -o '%N %t' | tr '\n' ' ')"
}

# check_run NAME FILE [PMIX]: the output of a 4-task step (passed results on rank 0, the tasks
# on both nodes, how the ranks met)
check_run() {
    _f=$2
    _how="rendezvous tcp://node1:[0-9]*"
    _pmix="PMIX_NAMESPACE=unset"
    [ "${3:-}" = pmix ] && _how="told the other ranks through PMIx" && _pmix="PMIX_NAMESPACE=[^u]"
    if grep -q "collcheck np=4: [0-9]* passed, 0 failed" "$_f" &&
       [ "$(grep -c '^task [0-3] of 4 on node1' "$_f")" = 2 ] &&
       [ "$(grep -c '^task [0-3] of 4 on node2' "$_f")" = 2 ] &&
       grep -q "^env: SLURM_JOB_ID=[0-9]* SLURM_STEP_ID=[0-9]* SLURM_STEP_NODELIST=node\[1-2\] SLURM_NTASKS=4 SLURM_LOCALID=0 $_pmix" "$_f" &&
       grep -q "$_how" "$_f" && ! grep -q "cohort_comm_init failed" "$_f"; then
        ok "$1"
        grep "collcheck np=4\|^env:" "$_f" | sed 's/^/    /'
    else
        not_ok "$1"
        grep -v "cohort WARN error: cohort_\|WARN error: shm: rank\|WARN error: rank . in\|WARN boot: rendezvous: communicator" "$_f" | tail -n 30 | sed 's/^/    /'
    fi
}

# ---- srun -n 4 without PMIx: job 100, step 0 -------------------------------------------------
idle
start=$(date +%s)
S timeout -k 5 120 srun --mpi=none -n 4 "$tmp/task.sh" >"$tmp/srun.out" 2>&1
rc=$?
[ "$rc" = 0 ] || echo "    srun exited $rc"
check_run "srun -n 4 collcheck, no PMIx: node1 hosts the rendezvous on the derived port ($(( $(date +%s) - start )) s)" "$tmp/srun.out"
grep -q "rendezvous tcp://node1:$((20000 + 100 * 8 % 12000))" "$tmp/srun.out" &&
    ok "... at port 20800 (job 100 step 0: 20000 + (8 x 100 + 0) mod 12000)" ||
    not_ok "... not at port 20800: $(grep -o 'rendezvous tcp://[^ ]*' "$tmp/srun.out" | head -1)"
NEXTJOB=101

# ---- srun --mpi=pmix -n 4 ---------------------------------------------------------------------
PMIX=""
S srun --mpi=list 2>&1 | grep -q pmix && PMIX=yes
pmix_built=""
"$top_builddir/tools/cohort-info" 2>/dev/null | grep -q "pmix: yes" && pmix_built=yes
if [ -n "$PMIX" ] && [ -n "$pmix_built" ]; then
    idle
    start=$(date +%s)
    S timeout -k 5 120 srun --mpi=pmix -n 4 "$tmp/task.sh" >"$tmp/srun-pmix.out" 2>&1
    rc=$?
    [ "$rc" = 0 ] || echo "    srun exited $rc"
    check_run "srun --mpi=pmix -n 4 collcheck: the address through PMIx ($(( $(date +%s) - start )) s)" "$tmp/srun-pmix.out" pmix
    NEXTJOB=$((NEXTJOB + 1))
else
    echo "# srun --mpi=pmix not run: Slurm's pmix plugin ${PMIX:-missing}, cohort's PMIx ${pmix_built:-not built}"
fi

# ---- srun --mpi=pmi2 -n 4: PMI_RANK/PMI_SIZE, which agree with Slurm's: Slurm's way ------------
if S srun --mpi=list 2>&1 | grep -q pmi2; then
    idle
    start=$(date +%s)
    S timeout -k 5 120 srun --mpi=pmi2 -n 4 "$tmp/task.sh" >"$tmp/srun-pmi2.out" 2>&1
    rc=$?
    [ "$rc" = 0 ] || echo "    srun exited $rc"
    check_run "srun --mpi=pmi2 -n 4 collcheck: node1 hosts on the derived port ($(( $(date +%s) - start )) s)" "$tmp/srun-pmi2.out"
    NEXTJOB=$((NEXTJOB + 1))
fi

# ---- sbatch: a two-node job (steps 0 and, with PMIx, 1) ---------------------------------------
cat >"$tmp/job.sh" <<JOB
#!/bin/sh
#SBATCH -N 2
#SBATCH -n 4
#SBATCH -o $tmp/batch.out
#SBATCH -t 5
echo "batch job \$SLURM_JOB_ID on \$SLURM_JOB_NODELIST at \$(date +%T.%N)"
srun --mpi=none "$tmp/task.sh" >"$tmp/batch-step0.out" 2>&1
echo "step 0 exit \$? at \$(date +%T.%N)"
if [ "$PMIX$pmix_built" = yesyes ]; then
    # --overlap: slurmctld may not have released step 0's CPUs yet ("step creation temporarily
    # disabled ... Requested nodes are busy"), and srun's retries then back off for 2 minutes
    srun --overlap --mpi=pmix "$tmp/task.sh" >"$tmp/batch-step1.out" 2>&1
    echo "step 1 exit \$? at \$(date +%T.%N)"
fi
JOB
idle
start=$(date +%s)
echo "# sbatch at $(date +%T.%N)"
jid=$(S sbatch --parsable "$tmp/job.sh" 2>"$tmp/sbatch.err")
job_done() { S scontrol show job "$jid" | grep -Eq "JobState=(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL)"; }
if [ -z "$jid" ]; then
    not_ok "sbatch refused the job: $(cat "$tmp/sbatch.err")"
elif ! deadline 150 job_done; then
    not_ok "batch job $jid not done within 150 s: $(S scontrol show job "$jid" | grep -o 'JobState=[A-Z_]*')"
    S scancel "$jid"
else
    state=$(S scontrol show job "$jid" | grep -o 'JobState=[A-Z_]*')
    if [ "$state" = JobState=COMPLETED ] && grep -q "batch job $jid on node\[1-2\]" "$tmp/batch.out" &&
       grep -q "step 0 exit 0" "$tmp/batch.out"; then
        ok "sbatch -N 2 -n 4: job $jid completed on node[1-2] ($(( $(date +%s) - start )) s)"
    else
        not_ok "sbatch -N 2 -n 4: job $jid $state"; sed 's/^/    /' "$tmp/batch.out"
    fi
    if [ $(( $(date +%s) - start )) -gt 30 ]; then   # where the time went
        echo "# slow batch job: its output, its steps' srun lines, what the daemons logged"
        sed 's/^/#   /' "$tmp/batch.out"
        S scontrol show job "$jid" | grep -o '[A-Za-z]*Time=[^ ]*' | tr '\n' ' ' | sed 's/^/#   /'; echo
        grep -h "^srun" "$tmp"/batch-step*.out | sed 's/^/#   /'
        grep -h "JobId=$jid\|StepId=$jid\|job $jid\|\[$jid\." "$tmp/ctld/slurmctld.log" \
            "$tmp"/spool/slurmd.node*.log | tail -n 40 | sed 's/^/#   /'
    fi
    check_run "... its step srun collcheck, no PMIx" "$tmp/batch-step0.out"
    port=$((20000 + (jid * 8) % 12000))
    grep -q "rendezvous tcp://node1:$port" "$tmp/batch-step0.out" &&
        ok "... at the port of job $jid step 0 ($port)" || not_ok "... not at port $port"
    if [ "$PMIX$pmix_built" = yesyes ]; then
        check_run "... its step srun --mpi=pmix collcheck" "$tmp/batch-step1.out" pmix
    fi
    NEXTJOB=$((jid + 1))
fi

# ---- the derived port busy: rank 0 fails naming it, quickly (srun -K ends the step) -----------
port=$((20000 + (NEXTJOB * 8) % 12000))
ip netns exec "$N1" python3 -c '
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(1); print("listening", flush=True); time.sleep(120)' \
    "$port" >"$tmp/busy.out" 2>&1 &
busy=$!
deadline 10 grep -q listening "$tmp/busy.out"
idle
start=$(date +%s)
S timeout -k 5 90 srun --mpi=none -K -n 4 "$tmp/task.sh" >"$tmp/srun-busy.out" 2>&1
rc=$?
secs=$(( $(date +%s) - start ))
kill "$busy" 2>/dev/null
wait "$busy" 2>/dev/null
if [ "$rc" != 0 ] && [ "$rc" != 124 ] && [ "$secs" -lt 45 ] &&
   grep -q "cohort_comm_init failed: .*rank 0 cannot host the rendezvous on port $port, which cohort derives from the Slurm job and step ids.*COHORT_RENDEZVOUS=" "$tmp/srun-busy.out"; then
    ok "srun with the derived port $port busy on node1: rank 0 fails naming the port and COHORT_RENDEZVOUS ($secs s)"
else
    not_ok "srun with the derived port $port busy (exit $rc after $secs s)"; tail -n 20 "$tmp/srun-busy.out" | sed 's/^/    /'
fi

# ---- down again --------------------------------------------------------------------------------
netns_cleanup
eval "$NETNS_AT_EXIT"
trap - EXIT
netns_check_clean
if [ -e "$tmp" ]; then not_ok "$tmp left behind"; else ok "the temp dir is removed"; fi
finish
