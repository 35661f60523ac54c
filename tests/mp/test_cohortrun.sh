#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# cohortrun: placement, environment (PyTorch's env:// variables too, and a real torch job when
# /usr/bin/python3 has torch), output relay, failure handling, timeouts, interrupts and the rsh
# agent path (with fake agents: no ssh needed). Run by `make check` from the build directory
# (automake exports srcdir); by hand: top_builddir=BUILD sh tests/mp/test_cohortrun.sh
#
# Every case runs under a deadline (timeout(1), or a bounded polling loop), prints `ok`/`not ok`,
# and the script ends with "N passed, N failed"; it exits non-zero when any case failed.

top_builddir=${top_builddir:-.}
CR=${COHORTRUN:-$top_builddir/tools/cohortrun}
case $CR in /*) ;; *) CR=$(pwd)/$CR ;; esac
if [ ! -x "$CR" ]; then
    echo "not ok - cohortrun not found at $CR (set top_builddir or COHORTRUN)"
    echo "0 passed, 1 failed"
    exit 1
fi
CR_RDV_CLIENT=${CR_RDV_CLIENT:-$top_builddir/tests/mp/cr_rdv_client}
case $CR_RDV_CLIENT in /*) ;; *) CR_RDV_CLIENT=$(pwd)/$CR_RDV_CLIENT ;; esac
ALLREDUCE=${ALLREDUCE:-$top_builddir/examples/allreduce}
case $ALLREDUCE in /*) ;; *) ALLREDUCE=$(pwd)/$ALLREDUCE ;; esac

T=$(mktemp -d "${TMPDIR:-/tmp}/cohortrun-test.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
trap 'exit 1' INT TERM
# Ranks must not read a cohort.conf from wherever make runs; COHORT_* of the caller neither.
cd "$T" || exit 1
unset COHORT_RANK COHORT_SIZE COHORT_LOCAL_RANK COHORT_LOCAL_SIZE COHORT_RENDEZVOUS \
      COHORT_JOB_ID COHORT_SECRET COHORT_SOCKET_IFNAME COHORT_TIMEOUT COHORT_CONF COHORT_DEBUG

npass=0
nfail=0
n=0

ok() {
    n=$((n + 1)); npass=$((npass + 1))
    echo "ok $n - $1"
}
notok() {
    n=$((n + 1)); nfail=$((nfail + 1))
    echo "not ok $n - $1"
    echo "#   exit status $rc after ${elapsed} ms; stdout:"
    sed -n '1,20s/^/#     /p' "$T/out" 2>/dev/null
    echo "#   stderr:"
    sed -n '1,20s/^/#     /p' "$T/err" 2>/dev/null
}
# check DESCRIPTION COMMAND...: ok when COMMAND succeeds
check() {
    d=$1; shift
    if "$@"; then ok "$d"; else notok "$d"; fi
}

now_ms() {
    t=$(date +%s%N 2>/dev/null)
    case $t in *N*|'') echo $(($(date +%s) * 1000)) ;; *) echo $((t / 1000000)) ;; esac
}

# cr [ARGS...]: runs cohortrun under a deadline; sets rc and elapsed (ms), output in $T/out, $T/err
DEADLINE=30
cr() {
    t0=$(now_ms)
    timeout -k 5 "$DEADLINE" "$CR" "$@" >"$T/out" 2>"$T/err" </dev/null
    rc=$?
    elapsed=$(($(now_ms) - t0))
}

rc_is() { [ "$rc" -eq "$1" ]; }
# An agent that only records that it was started (for cases that must not start any).
printf '#!/bin/sh\necho "$*" >>"%s/agent-bad.log"\n' "$T" >"$T/fake-exec-log"
chmod +x "$T/fake-exec-log"
faster_than() { [ "$elapsed" -lt "$1" ]; }
lines_out() { [ "$(wc -l <"$T/out")" -eq "$1" ]; }

# --- basics ------------------------------------------------------------------------------
cr -np 4 sh -c 'echo "rank $COHORT_RANK size $COHORT_SIZE local $COHORT_LOCAL_RANK/$COHORT_LOCAL_SIZE"'
check "-np 4: every rank runs with its rank, size and local rank" \
    sh -c '[ '"$rc"' -eq 0 ] && for r in 0 1 2 3; do
               grep -qx "rank $r size 4 local $r/4" "'"$T"'/out" || exit 1; done'
check "-np 4: exactly 4 lines" lines_out 4

cr -np 2 sh -c 'echo "$COHORT_RENDEZVOUS $COHORT_JOB_ID $COHORT_SECRET"'
check "rendezvous url, job id and secret are set, the same for every rank" sh -c '
    [ '"$rc"' -eq 0 ] && [ "$(sort -u "'"$T"'/out" | wc -l)" -eq 1 ] &&
    grep -Eqx "tcp://127\.0\.0\.1:[0-9]+ cr-[0-9a-f]{16} [0-9a-f]{64}" "'"$T"'/out"'

cr -np 1 sh -c 'echo "$COHORT_SECRET"'; s1=$(cat "$T/out")
cr -np 1 sh -c 'echo "$COHORT_SECRET"'; s2=$(cat "$T/out")
check "every job gets a new secret" [ -n "$s1" -a "$s1" != "$s2" ]

cr -np 3 sh -c '[ "$COHORT_RANK" = 0 ] && exit 0; sleep 0.5; echo late $COHORT_RANK'
check "a rank exiting 0 early (no rendezvous) is fine; exit 0" \
    sh -c '[ '"$rc"' -eq 0 ] && grep -qx "late 1" "'"$T"'/out" && grep -qx "late 2" "'"$T"'/out"'

yes 2>/dev/null | timeout -k 5 "$DEADLINE" "$CR" -np 2 sh -c 'cat | wc -c' >"$T/out" 2>"$T/err"
rc=$?
check "ranks' stdin is /dev/null" sh -c '[ '"$rc"' -eq 0 ] && [ "$(tr -d " " <"'"$T"'/out" | sort -u)" = 0 ]'

# --- failures ----------------------------------------------------------------------------
cr -np 4 sh -c 'echo "bye from $COHORT_RANK" >&2; [ "$COHORT_RANK" = 2 ] && exit 3; exec sleep 60'
check "a rank exiting 3 ends the job quickly, not after 60 s" faster_than 15000
check "... with a non-zero exit status (the rank's)" rc_is 3
check "... naming rank 2, its host and status 3 in one line" \
    sh -c '[ "$(grep -c "^cohortrun: rank 2 (host [^,]*, pid [0-9]*) exited with status 3; terminating the other 3 ranks$" "'"$T"'/err")" -eq 1 ]'
check "... after the rank's own last words" \
    sh -c 'grep -n . "'"$T"'/err" | grep -A100 "bye from 2" | grep -q "cohortrun: rank 2"'

cr -np 3 sh -c '[ "$COHORT_RANK" = 1 ] && kill -9 $$; sleep 60'
check "a rank killed by SIGKILL is named with the signal" \
    sh -c '[ '"$rc"' -ne 0 ] && grep -q "rank 1 (host .*) was killed by signal 9 (Killed)" "'"$T"'/err"'
check "... quickly" faster_than 15000

cr -np 2 /nonexistent/command/x
check "a command that does not exist: exit 127 and a message naming it" \
    sh -c '[ '"$rc"' -eq 127 ] && grep -q "cannot start rank 0.*/nonexistent/command/x.*No such file" "'"$T"'/err"'

# --- output ------------------------------------------------------------------------------
cr -np 3 --tag-output sh -c 'echo hello; echo oops >&2; printf "no newline"'
check "--tag-output prefixes stdout lines with [rank]" \
    sh -c '[ '"$rc"' -eq 0 ] && for r in 0 1 2; do grep -qx "\[$r\] hello" "'"$T"'/out" &&
           grep -qx "\[$r\] no newline" "'"$T"'/out" || exit 1; done'
check "--tag-output prefixes stderr lines too" \
    sh -c 'for r in 0 1 2; do grep -qx "\[$r\] oops" "'"$T"'/err" || exit 1; done'

# Long lines written in pieces (awk flushes every 4 KiB) by 4 ranks at once: never mixed mid-line.
cr -np 4 awk 'BEGIN { s = sprintf("%3000s", ""); gsub(/ /, "x", s)
                      for (i = 0; i < 300; i++) printf "begin %s %d %s end\n", ENVIRON["COHORT_RANK"], i, s }'
check "lines from concurrent ranks are never interleaved mid-line" \
    sh -c '[ '"$rc"' -eq 0 ] && [ "$(grep -Ec "^begin [0-3] [0-9]+ x{3000} end$" "'"$T"'/out")" -eq 1200 ] &&
           [ "$(wc -l <"'"$T"'/out")" -eq 1200 ]'

# --- environment -------------------------------------------------------------------------
CR_TEST_FROM_ENV="from env" cr -np 2 -x CR_TEST_A=1 -x CR_TEST_FROM_ENV \
    sh -c 'echo "$COHORT_RANK A=$CR_TEST_A B=$CR_TEST_FROM_ENV"'
check "-x VAR=value and -x VAR pass variables" \
    sh -c '[ '"$rc"' -eq 0 ] && grep -qx "0 A=1 B=from env" "'"$T"'/out" && grep -qx "1 A=1 B=from env" "'"$T"'/out"'

cr -np 1 --network-interface lo sh -c 'echo "IF=$COHORT_SOCKET_IFNAME"'
check "--network-interface sets COHORT_SOCKET_IFNAME" sh -c '[ '"$rc"' -eq 0 ] && grep -qx "IF=lo" "'"$T"'/out"'

for v in COHORT_RANK=7 COHORT_SIZE=9 COHORT_JOB_ID=mine COHORT_SECRET=s COHORT_RENDEZVOUS=tcp://h:1 COHORT_LOCAL_RANK \
         RANK=5 WORLD_SIZE=8 LOCAL_RANK=1 LOCAL_WORLD_SIZE GROUP_RANK=1 GROUP_WORLD_SIZE=2 ROLE_RANK=0 ROLE_WORLD_SIZE=4; do
    COHORT_LOCAL_RANK=3 cr -np 2 -x "$v" sh -c 'echo "$COHORT_RANK"'
    check "-x $v: refused with exit 2 naming the variable cohortrun sets itself (no rank started)" \
        sh -c '[ '"$rc"' -eq 2 ] && grep -q "^cohortrun: -x ${1%%=*}: cohortrun sets ${1%%=*} itself" "'"$T"'/err" &&
               [ ! -s "'"$T"'/out" ]' _ "$v"
done
cr -np 1 --network-interface lo -x COHORT_SOCKET_IFNAME=eth0 true
check "--network-interface lo with -x COHORT_SOCKET_IFNAME=eth0: exit 2, both named" \
    sh -c '[ '"$rc"' -eq 2 ] && grep -q "network-interface lo and -x COHORT_SOCKET_IFNAME=eth0 disagree" "'"$T"'/err"'

# --- placement ---------------------------------------------------------------------------
cr -H localhost:2,127.0.0.1:2 sh -c 'echo "$COHORT_RANK $COHORT_SIZE $COHORT_LOCAL_RANK/$COHORT_LOCAL_SIZE"'
check "-H localhost:2,127.0.0.1:2: 4 ranks, all on this node" \
    sh -c '[ '"$rc"' -eq 0 ] && for r in 0 1 2 3; do grep -qx "$r 4 $r/4" "'"$T"'/out" || exit 1; done'

cat >"$T/hosts" <<EOF
# the hosts of this test
localhost slots=2   # this one

127.0.0.1
EOF
cr --hostfile "$T/hosts" sh -c 'echo "$COHORT_RANK/$COHORT_SIZE"'
check "--hostfile with comments and blank lines (3 slots -> 3 ranks)" \
    sh -c '[ '"$rc"' -eq 0 ] && [ "$(sort "'"$T"'/out" | tr "\n" " ")" = "0/3 1/3 2/3 " ]'

cr -np 5 -H localhost:2,127.0.0.1:2 true
check "-np larger than the slots fails with exit 2 and a message naming the totals" \
    sh -c '[ '"$rc"' -eq 2 ] && grep -q "5 ranks requested .* only 4 slots" "'"$T"'/err"'

cr -np 5 --oversubscribe -H localhost:2,127.0.0.1:1 sh -c 'echo $COHORT_RANK'
check "--oversubscribe allows more ranks than slots" sh -c '[ '"$rc"' -eq 0 ] && [ "$(wc -l <"'"$T"'/out")" -eq 5 ]'

# max_slots: a hostfile's hard limit, even with --oversubscribe; alone it also gives the slots
printf 'localhost slots=1 max_slots=2\n127.0.0.1 max_slots=1\n' >"$T/hosts-max"
cr --hostfile "$T/hosts-max" -np 4 --oversubscribe true
check "max_slots: more ranks than all max_slots allow fails with exit 2 even with --oversubscribe" \
    sh -c '[ '"$rc"' -eq 2 ] && grep -q "4 ranks requested but the hostfile.s max_slots allow at most 3" "'"$T"'/err"'
printf 'localhost max_slots=2\n' >"$T/hosts-max1"
cr --hostfile "$T/hosts-max1" sh -c 'echo $COHORT_RANK'
check "max_slots=2 alone gives the host 2 slots (2 ranks without --oversubscribe)" \
    sh -c '[ '"$rc"' -eq 0 ] && [ "$(sort "'"$T"'/out" | tr "\n" " ")" = "0 1 " ]'

for bad in 0 3x -1 ""; do
    cr -np "$bad" true
    check "-np '$bad' fails with exit 2 and a message" sh -c '[ '"$rc"' -eq 2 ] && grep -q "np" "'"$T"'/err"'
done
for bad in 'localhost;rm:2' 'node1,$(reboot)' 'node`id`:1'; do
    : >"$T/agent-bad.log"
    cr -H "$bad" --rsh "$T/fake-exec-log" true
    check "-H '$bad': exit 2 naming the bad host, no agent started" \
        sh -c '[ '"$rc"' -eq 2 ] && grep -q "is not a host name" "'"$T"'/err" && [ ! -s "'"$T"'/agent-bad.log" ]'
done
printf 'node1 slots=2\nnode;2\n' >"$T/hosts-bad"
: >"$T/agent-bad.log"
cr --hostfile "$T/hosts-bad" --rsh "$T/fake-exec-log" true
check "--hostfile with 'node;2': exit 2 naming it, no agent started" \
    sh -c '[ '"$rc"' -eq 2 ] && grep -q "node;2" "'"$T"'/err" && [ ! -s "'"$T"'/agent-bad.log" ]'
cr -np 2
check "no command: exit 2" rc_is 2
cr --no-such-option -np 2 true
check "unknown option: exit 2" sh -c '[ '"$rc"' -eq 2 ] && grep -q "no-such-option" "'"$T"'/err"'
cr -np 2 -H localhost --hostfile "$T/hosts" true
check "-H and --hostfile together: exit 2" rc_is 2
cr --help
check "--help: usage on stdout, exit 0" sh -c '[ '"$rc"' -eq 0 ] && grep -q "Usage: cohortrun" "'"$T"'/out"'
# Every tool says the version configure gave (include/cohort/version.h), the same for all.
ver=$(sed -n 's/^#define COHORT_VERSION_STRING "\(.*\)"$/\1/p' "$top_builddir/include/cohort/version.h")
cr --version
check "--version: 'cohortrun (cohort) $ver', exit 0" \
    sh -c '[ '"$rc"' -eq 0 ] && [ "$(cat "'"$T"'/out")" = "cohortrun (cohort) '"$ver"'" ]'
for tool in tools/cohort-info bench/cohort-bench; do
    out=$("$top_builddir/$tool" --version 2>&1); trc=$?
    check "${tool#*/} --version: '${tool#*/} (cohort) $ver', exit 0" \
        sh -c '[ '"$trc"' -eq 0 ] && [ "$1" = "$2 (cohort) $3" ] && [ -n "$3" ]' - "$out" "${tool#*/}" "$ver"
done

# --- remote ranks through an rsh agent ----------------------------------------------------
# A fake ssh: records its arguments, then runs the remote command line with a shell, as sshd does.
cat >"$T/fake-ssh" <<'EOF'
#!/bin/sh
printf '%s\n' "$*" >>"$CR_AGENT_LOG"
host=$1
shift
CR_FAKE_HOST=$host exec sh -c "$*"
EOF
# A fake "ip netns exec {host}": records its first argument and runs the rest directly.
cat >"$T/fake-exec" <<'EOF'
#!/bin/sh
printf '%s\n' "$1" >>"$CR_AGENT_LOG"
shift
exec "$@"
EOF
chmod +x "$T/fake-ssh" "$T/fake-exec"
CR_AGENT_LOG=$T/agent.log
export CR_AGENT_LOG

: >"$CR_AGENT_LOG"
cr -H localhost:1,nodeA:2 --rsh "$T/fake-ssh" -x CR_TEST_X="a b'c" \
    sh -c 'echo "$COHORT_RANK $COHORT_LOCAL_RANK/$COHORT_LOCAL_SIZE host=${CR_FAKE_HOST:-local} x=$CR_TEST_X arg=$1"' _ "it's  two"
check "--rsh: remote ranks go through the agent with the host appended" \
    sh -c '[ '"$rc"' -eq 0 ] && [ "$(grep -c "^nodeA env .*COHORT_RANK=" "$CR_AGENT_LOG")" -eq 2 ]'
check "--rsh: the local rank is started directly" \
    grep -qx "0 0/1 host=local x=a b'c arg=it's  two" "$T/out"
check "--rsh: remote ranks get their placement, -x values and arguments intact through the shell" \
    sh -c 'grep -qx "1 0/2 host=nodeA x=a b'"'"'c arg=it'"'"'s  two" "'"$T"'/out" &&
           grep -qx "2 1/2 host=nodeA x=a b'"'"'c arg=it'"'"'s  two" "'"$T"'/out"'

: >"$CR_AGENT_LOG"
cr -H nodeB:1,nodeC:1 --rsh "$T/fake-exec --node={host}" \
    sh -c 'echo "$COHORT_RANK $COHORT_LOCAL_RANK/$COHORT_LOCAL_SIZE arg=$1"' _ "x  'y"
check "--rsh with {host}: the host is substituted into the agent's words" \
    sh -c '[ '"$rc"' -eq 0 ] && grep -qx -- "--node=nodeB" "$CR_AGENT_LOG" && grep -qx -- "--node=nodeC" "$CR_AGENT_LOG"'
check "--rsh with {host}: run without a shell, arguments intact" \
    sh -c 'grep -qx "0 0/1 arg=x  '"'"'y" "'"$T"'/out" && grep -qx "1 0/1 arg=x  '"'"'y" "'"$T"'/out"'

# --map-by node: one rank per host in turn, skipping full hosts; local ranks follow placement.
# The agent hands its host to the rank (the agents run concurrently: their log has no order).
cat >"$T/fake-exec-host" <<'EOF'
#!/bin/sh
host=$1
shift
CR_FAKE_HOST=$host exec "$@"
EOF
chmod +x "$T/fake-exec-host"
placement() { sort "$T/out" | tr "\n" " "; }
cr -H nodeF:2,nodeG:2 --map-by node --rsh "$T/fake-exec-host {host}" \
    sh -c 'echo "$COHORT_RANK $CR_FAKE_HOST $COHORT_LOCAL_RANK/$COHORT_LOCAL_SIZE"'
check "--map-by node on 2 hosts x 2 slots: ranks 0,2 on the first host, 1,3 on the second" \
    sh -c '[ '"$rc"' -eq 0 ] && [ "$1" = "0 nodeF 0/2 1 nodeG 0/2 2 nodeF 1/2 3 nodeG 1/2 " ]' \
    _ "$(placement)"
cr -np 5 -H nodeF:3,nodeG:1,nodeH:2 --map-by node --rsh "$T/fake-exec-host {host}" \
    sh -c 'echo "$COHORT_RANK $CR_FAKE_HOST $COHORT_LOCAL_RANK/$COHORT_LOCAL_SIZE"'
check "--map-by node skips full hosts (F:3,G:1,H:2, -np 5: F G H F H)" \
    sh -c '[ '"$rc"' -eq 0 ] &&
           [ "$1" = "0 nodeF 0/2 1 nodeG 0/1 2 nodeH 0/2 3 nodeF 1/2 4 nodeH 1/2 " ]' _ "$(placement)"
cr -H nodeF:2,nodeG:2 --map-by slot --rsh "$T/fake-exec-host {host}" \
    sh -c 'echo "$COHORT_RANK $CR_FAKE_HOST $COHORT_LOCAL_RANK/$COHORT_LOCAL_SIZE"'
check "--map-by slot (the default) fills each host in turn" \
    sh -c '[ '"$rc"' -eq 0 ] && [ "$1" = "0 nodeF 0/2 1 nodeF 1/2 2 nodeG 0/2 3 nodeG 1/2 " ]' \
    _ "$(placement)"
cr --map-by socket -np 1 true
check "--map-by with an unknown policy: exit 2 naming it" \
    sh -c '[ '"$rc"' -eq 2 ] && grep -q "map-by .socket.: expected" "'"$T"'/err"'

cr -H nodeD:2 --rsh "$T/fake-exec {host}" sh -c '[ "$COHORT_RANK" = 1 ] && exit 5; exec sleep 60'
check "--rsh: a failing remote rank names its host" \
    sh -c '[ '"$rc"' -eq 5 ] && grep -q "rank 1 (host nodeD, pid [0-9]*) exited with status 5" "'"$T"'/err"'

cr -H nodeE:1 --rsh /nonexistent/agent true
check "--rsh: an agent that does not exist fails with exit 127 naming it" \
    sh -c '[ '"$rc"' -eq 127 ] && grep -q "rsh agent '"'"'/nonexistent/agent'"'"': No such file" "'"$T"'/err"'

# --- PyTorch's env:// ---------------------------------------------------------------------
# RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE (copies of COHORT_*), GROUP_RANK/GROUP_WORLD_SIZE
# (nodes), ROLE_RANK/ROLE_WORLD_SIZE, MASTER_ADDR and MASTER_PORT (rank 0's host, a free port).
# Only /usr/bin/python3 has Debian's torch (a python3 on PATH may be another interpreter).
PY=/usr/bin/python3
TORCH_VARS='$COHORT_RANK $RANK $COHORT_SIZE $WORLD_SIZE $COHORT_LOCAL_RANK $LOCAL_RANK $COHORT_LOCAL_SIZE $LOCAL_WORLD_SIZE $GROUP_RANK $GROUP_WORLD_SIZE $ROLE_RANK $ROLE_WORLD_SIZE'
cr -np 3 sh -c 'echo "'"$TORCH_VARS"'"'
check "torch env: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE equal COHORT_*; one node (GROUP_RANK 0 of 1); ROLE_* = RANK/WORLD_SIZE" \
    sh -c '[ '"$rc"' -eq 0 ] && [ "$(wc -l <"'"$T"'/out")" -eq 3 ] &&
           for r in 0 1 2; do grep -qx "$r $r 3 3 $r $r 3 3 0 1 $r 3" "'"$T"'/out" || exit 1; done'

RANK=9 WORLD_SIZE=10 LOCAL_RANK=9 LOCAL_WORLD_SIZE=10 cr -np 2 sh -c 'echo "$RANK/$WORLD_SIZE $LOCAL_RANK/$LOCAL_WORLD_SIZE"'
check "torch env: RANK etc. in cohortrun's own environment (a torchrun outside) are replaced" \
    sh -c '[ '"$rc"' -eq 0 ] && [ "$(sort "'"$T"'/out" | tr "\n" " ")" = "0/2 0/2 1/2 1/2 " ]'

cr -np 3 sh -c 'echo "$MASTER_ADDR $MASTER_PORT"'
check "torch env: MASTER_ADDR=127.0.0.1 and one MASTER_PORT in 20000-65535 for every rank of a local job" \
    sh -c '[ '"$rc"' -eq 0 ] && [ "$(sort -u "'"$T"'/out" | wc -l)" -eq 1 ] &&
           grep -Eqx "127\.0\.0\.1 [0-9]+" "'"$T"'/out" &&
           p=$(sed -n "1s/.* //p" "'"$T"'/out") && [ "$p" -ge 20000 ] && [ "$p" -le 65535 ]'

if [ -x "$PY" ]; then
    # Rank 0 binds and listens on MASTER_ADDR:MASTER_PORT, then on the wildcard address (where
    # torch's TCPStore binds it).
    cat >"$T/bind.py" <<'EOF'
import os, socket
a, p = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
for host in (a, "0.0.0.0"):
    s = socket.socket()
    s.bind((host, p))
    s.listen()
    s.close()
print("bound", a, p)
EOF
    cr -np 2 sh -c '[ "$RANK" = 0 ] || exit 0; exec "$0" "$1"' "$PY" "$T/bind.py"
    check "torch env: MASTER_PORT is free to bind and listen on at MASTER_ADDR (rank 0)" \
        sh -c '[ '"$rc"' -eq 0 ] && grep -Eqx "bound 127\.0\.0\.1 [0-9]+" "'"$T"'/out"'
else
    echo "# skipping the MASTER_PORT bind case: no $PY"
fi

MASTER_ADDR=10.1.2.3 MASTER_PORT=23456 cr -np 2 sh -c 'echo "$MASTER_ADDR:$MASTER_PORT"'
check "torch env: MASTER_ADDR and MASTER_PORT in cohortrun's environment are kept" \
    sh -c '[ '"$rc"' -eq 0 ] && [ "$(sort "'"$T"'/out" | tr "\n" " ")" = "10.1.2.3:23456 10.1.2.3:23456 " ]'
MASTER_ADDR=10.1.2.3 MASTER_PORT=23456 cr -np 2 -x MASTER_ADDR=trainer.example -x MASTER_PORT=23457 \
    sh -c 'echo "$MASTER_ADDR:$MASTER_PORT"'
check "torch env: -x MASTER_ADDR=... -x MASTER_PORT=... win over the environment" \
    sh -c '[ '"$rc"' -eq 0 ] && [ "$(sort "'"$T"'/out" | tr "\n" " ")" = "trainer.example:23457 trainer.example:23457 " ]'
MASTER_ADDR= MASTER_PORT=23458 cr -np 1 -x MASTER_PORT sh -c 'echo "$MASTER_ADDR:$MASTER_PORT"'
check "torch env: -x MASTER_PORT takes the environment's; an empty MASTER_ADDR counts as unset" \
    sh -c '[ '"$rc"' -eq 0 ] && grep -qx "127.0.0.1:23458" "'"$T"'/out"'
MASTER_PORT=http cr -np 2 sh -c 'echo started'
check "torch env: MASTER_PORT=http in the environment: exit 2 naming it, no rank started" \
    sh -c '[ '"$rc"' -eq 2 ] && grep -q "^cohortrun: MASTER_PORT from cohortrun.s environment: .http. is not a number" "'"$T"'/err" &&
           [ ! -s "'"$T"'/out" ]'
cr -np 2 -x MASTER_PORT=70000 sh -c 'echo started'
check "torch env: -x MASTER_PORT=70000: exit 2 naming it, no rank started" \
    sh -c '[ '"$rc"' -eq 2 ] && grep -q "^cohortrun: MASTER_PORT from -x: .70000. is out of range" "'"$T"'/err" &&
           [ ! -s "'"$T"'/out" ]'

# cohort_comm_init under cohortrun reads COHORT_* before RANK/WORLD_SIZE and COHORT_RENDEZVOUS
# before MASTER_ADDR:MASTER_PORT+1: with a MASTER_ADDR that does not resolve, the job still
# meets at cohortrun's rendezvous (the torch path would fail at once: no such host).
if [ -x "$ALLREDUCE" ]; then
    cr -np 2 -x MASTER_ADDR=nosuchhost.invalid -x MASTER_PORT=29400 "$ALLREDUCE"
    check "torch env: cohort_comm_init still meets at cohortrun's rendezvous, not MASTER_ADDR:MASTER_PORT+1" \
        sh -c '[ '"$rc"' -eq 0 ] && grep -qx "mean of ranks = 0.5" "'"$T"'/out"'
else
    echo "# skipping the cohort_comm_init case: $ALLREDUCE not built"
fi

# Remote ranks: ssh carries no environment, so everything must come on the command line. This
# fake ssh starts the remote command with an empty environment (PATH only).
cat >"$T/fake-ssh-clean" <<'EOF'
#!/bin/sh
printf '%s\n' "$*" >>"$CR_AGENT_LOG"
host=$1
shift
exec env -i PATH="$PATH" CR_FAKE_HOST="$host" sh -c "$*"
EOF
chmod +x "$T/fake-ssh-clean"
# fields: host, the 12 of TORCH_VARS, MASTER_ADDR, MASTER_PORT, the rendezvous's ADDR:PORT
cr -H localhost:1,nodeA:2 --rsh "$T/fake-ssh-clean" \
    sh -c 'echo "${CR_FAKE_HOST:-local} '"$TORCH_VARS"' $MASTER_ADDR $MASTER_PORT ${COHORT_RENDEZVOUS#tcp://}"'
check "torch env on 2 hosts, rank 0 here: remote ranks get RANK etc. through ssh; GROUP_RANK numbers the nodes" \
    sh -c '[ '"$rc"' -eq 0 ] && grep -q "^local 0 0 3 3 0 0 1 1 0 2 0 3 " "'"$T"'/out" &&
           grep -q "^nodeA 1 1 3 3 0 0 2 2 1 2 1 3 " "'"$T"'/out" &&
           grep -q "^nodeA 2 2 3 3 1 1 2 2 1 2 2 3 " "'"$T"'/out"'
check "... MASTER_ADDR is the address remote ranks are given for the rendezvous, MASTER_PORT one number" \
    sh -c '[ "$(wc -l <"'"$T"'/out")" -eq 3 ] &&
           [ "$(awk "{ print \$14, \$15 }" "'"$T"'/out" | sort -u | wc -l)" -eq 1 ] &&
           awk "{ a = \$16; sub(/:[0-9]+\$/, \"\", a); gsub(/^\[|\]\$/, \"\", a)
                  if (a != \$14 || \$15 !~ /^[0-9]+\$/) exit 1 }" "'"$T"'/out"'

cr -H alice@nodeB:1,nodeC:2 --rsh "$T/fake-exec-host {host}" \
    sh -c 'echo "$RANK $GROUP_RANK/$GROUP_WORLD_SIZE $MASTER_ADDR $MASTER_PORT"'
check "torch env, rank 0 remote: MASTER_ADDR is its host as the host list names it (no user@), one MASTER_PORT" \
    sh -c '[ '"$rc"' -eq 0 ] && [ "$(awk "{ print \$3, \$4 }" "'"$T"'/out" | sort -u | wc -l)" -eq 1 ] &&
           grep -Eqx "0 0/2 nodeB [0-9]+" "'"$T"'/out" && grep -Eqx "1 1/2 nodeB [0-9]+" "'"$T"'/out" &&
           grep -Eqx "2 1/2 nodeB [0-9]+" "'"$T"'/out"'

MASTER_ADDR=10.1.2.3 MASTER_PORT=23456 cr -H nodeA:2 --rsh "$T/fake-ssh-clean" sh -c 'echo "$MASTER_ADDR:$MASTER_PORT"'
check "torch env: the environment's MASTER_ADDR/MASTER_PORT reach remote ranks too" \
    sh -c '[ '"$rc"' -eq 0 ] && [ "$(sort "'"$T"'/out" | tr "\n" " ")" = "10.1.2.3:23456 10.1.2.3:23456 " ]'

cr -v -H nodeA:1 --rsh "$T/fake-ssh-clean" sh -c 'echo "$COHORT_SECRET"'
check "-v: the launch line shows the torch variables and hides the secret" \
    sh -c 's=$(cat "'"$T"'/out") && [ '"$rc"' -eq 0 ] && [ ${#s} -eq 64 ] &&
           grep -q "^cohortrun: rank 0 on nodeA .* RANK=0 .*MASTER_PORT=[0-9]" "'"$T"'/err" &&
           grep -q "COHORT_SECRET=<hidden>" "'"$T"'/err" && ! grep -q "$s" "'"$T"'/err"'
check "-v: MASTER_ADDR/MASTER_PORT and where they come from in one line" \
    grep -q "^cohortrun: MASTER_ADDR=nodeA (rank 0.s host) MASTER_PORT=[0-9]* (random, rank 0 is remote)" "$T/err"

# A real torch.distributed job (gloo) through env://, when /usr/bin/python3 has torch: 2 local
# ranks, then 2 "hosts" (rank 1 through the clean fake ssh, reaching rank 0's TCPStore at the
# rendezvous address).
cat >"$T/torch_job.py" <<'EOF'
import datetime, torch, torch.distributed as d
d.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
t = torch.ones(3) * (d.get_rank() + 1)
d.all_reduce(t)
assert t.tolist() == [3.0] * 3, t
print("torch ok", d.get_rank(), d.get_world_size(), flush=True)
d.destroy_process_group()
EOF
if [ -x "$PY" ] && timeout -k 5 120 "$PY" -c 'import torch.distributed' >/dev/null 2>&1; then
    DEADLINE=300
    cr -np 2 "$PY" "$T/torch_job.py"
    check "torch: cohortrun -np 2 python3 with init_process_group(gloo) and all_reduce" \
        sh -c '[ '"$rc"' -eq 0 ] && grep -qx "torch ok 0 2" "'"$T"'/out" && grep -qx "torch ok 1 2" "'"$T"'/out"'
    cr -H localhost:1,nodeA:1 --rsh "$T/fake-ssh-clean" "$PY" "$T/torch_job.py"
    check "torch: 2 hosts (rank 1 through ssh with an empty environment) meet at MASTER_ADDR" \
        sh -c '[ '"$rc"' -eq 0 ] && grep -qx "torch ok 0 2" "'"$T"'/out" && grep -qx "torch ok 1 2" "'"$T"'/out"'
    DEADLINE=30
else
    echo "# skipping the torch cases: $PY cannot import torch.distributed"
fi

# --- timeouts ----------------------------------------------------------------------------
cr -np 2 --timeout 2 sleep 60
check "--timeout 2 on sleep 60: ends in about 2 s" sh -c '[ '"$elapsed"' -ge 1900 ] && [ '"$elapsed"' -lt 12000 ]'
check "... non-zero (124), naming the ranks still running" \
    sh -c '[ '"$rc"' -eq 124 ] && grep -q "time limit.*ranks 0,1 still running" "'"$T"'/err"'

cr -np 1 --timeout 1 sh -c 'trap "" TERM; while :; do sleep 0.1; done'
check "a rank that ignores SIGTERM is killed after the grace period" \
    sh -c '[ '"$rc"' -eq 124 ] && [ '"$elapsed"' -lt 15000 ] && grep -q "SIGKILL" "'"$T"'/err"'

# The rendezvous server's arrival tracking: rank 1 never joins; COHORT_TIMEOUT=2 fails the job.
if [ -x "$CR_RDV_CLIENT" ]; then
    cr -np 3 "$CR_RDV_CLIENT"
    check "ranks meeting at cohortrun's rendezvous: exit 0" \
        sh -c '[ '"$rc"' -eq 0 ] && [ "$(grep -c "^rendezvous ok" "'"$T"'/out")" -eq 3 ]'
    COHORT_TIMEOUT=2 cr -np 3 "$CR_RDV_CLIENT" --skip 1
    check "a rank that never reaches the rendezvous is named after COHORT_TIMEOUT" \
        sh -c '[ '"$rc"' -ne 0 ] && [ '"$elapsed"' -lt 15000 ] &&
               grep -q "rank 1 did not reach the rendezvous within 2 s" "'"$T"'/err"'
    # Rank 1 exits 0 without joining while ranks 0 and 2 wait for it at the rendezvous: it can
    # never come, so the job fails at once (not after COHORT_TIMEOUT, 300 s here), naming it,
    # and the waiting ranks are told why.
    cr -np 3 "$CR_RDV_CLIENT" --quit 1
    check "a rank that exits 0 without joining while others wait: exit 1 within 15 s" \
        sh -c '[ '"$rc"' -eq 1 ] && [ '"$elapsed"' -lt 15000 ]'
    check "... naming it as exited without joining, in cohortrun's only line about a rank" \
        sh -c '[ "$(grep -c "^cohortrun: rank" "'"$T"'/err")" -eq 1 ] &&
               grep -q "^cohortrun: rank 1 (host [^,]*, pid [0-9]*) exited with status 0 without joining the job" "'"$T"'/err"'
    check "... and the waiting ranks fail naming rank 1" \
        sh -c '[ "$(grep -c "rank [02]: allgather: bootstrap failed: rank 1 (host .*) exited with status 0 without joining" "'"$T"'/err")" -eq 2 ]'
    # Rank 1 joins, then ends with _exit(0) (no goodbye); ranks 0 and 2 then fail (exit 1) because
    # of it: rank 1 is the one named, though its own status is 0 and theirs is not.
    cr -np 3 "$CR_RDV_CLIENT" --vanish 1
    check "a rank that vanished (exit 0, no goodbye) and the ranks that failed after it: rank 1 is named, exit 1" \
        sh -c '[ '"$rc"' -eq 1 ] && [ "$(grep -c "^cohortrun: rank" "'"$T"'/err")" -eq 1 ] &&
               grep -q "^cohortrun: rank 1 (host [^,]*, pid [0-9]*) exited with status 0 without a goodbye to the job" "'"$T"'/err"'
else
    echo "# skipping the rendezvous cases: $CR_RDV_CLIENT not built"
fi

# --- which rank is blamed ----------------------------------------------------------------
# Rank 2 dies first and the others fail right after it (as they do when a peer is lost), all
# while cohortrun is stopped: it then reaps all four at once and must still name rank 2.
zstate() { awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null; }
if [ -r /proc/self/stat ]; then
    mkdir "$T/blame"
    "$CR" -np 4 sh -c 'echo $$ >"'"$T"'/blame/$COHORT_RANK.tmp" && mv "'"$T"'/blame/$COHORT_RANK.tmp" "'"$T"'/blame/$COHORT_RANK"
                       if [ "$COHORT_RANK" = 2 ]; then f=go2; c=3; else f=go; c=1; fi
                       i=0; while [ ! -e "'"$T"'/$f" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
                       exit $c' >"$T/out" 2>"$T/err" </dev/null &
    crpid=$!
    i=0
    while [ "$(ls "$T/blame" | grep -vc tmp)" -lt 4 ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
    kill -STOP "$crpid"
    zombies() { z=0; for r in "$@"; do [ "$(zstate "$(cat "$T/blame/$r")")" = Z ] && z=$((z + 1)); done; echo $z; }
    touch "$T/go2"
    i=0
    while [ "$(zombies 2)" -lt 1 ] && [ $i -lt 300 ]; do sleep 0.05; i=$((i + 1)); done
    touch "$T/go"
    i=0
    while [ "$(zombies 0 1 3)" -lt 3 ] && [ $i -lt 300 ]; do sleep 0.05; i=$((i + 1)); done
    kill -CONT "$crpid"
    i=0
    while kill -0 "$crpid" 2>/dev/null && [ $i -lt 150 ]; do sleep 0.1; i=$((i + 1)); done
    if kill -0 "$crpid" 2>/dev/null; then kill -9 "$crpid"; fi
    wait "$crpid"
    rc=$?
    elapsed=0
    check "ranks failing together: the first to die (rank 2) is named, and its status returned" \
        sh -c '[ '"$rc"' -eq 3 ] && [ "$(grep -c "^cohortrun: rank" "'"$T"'/err")" -eq 1 ] &&
               grep -q "^cohortrun: rank 2 .*exited with status 3" "'"$T"'/err"'
fi

# --- interrupts --------------------------------------------------------------------------
# Each rank leaves its pid and its child's pid; after SIGINT to cohortrun all must be gone.
mkdir "$T/pids"
t0=$(now_ms)
"$CR" -np 3 sh -c 'sleep 60 & echo "$$ $!" >"'"$T"'/pids/$COHORT_RANK.tmp" &&
                   mv "'"$T"'/pids/$COHORT_RANK.tmp" "'"$T"'/pids/$COHORT_RANK"; wait' \
    >"$T/out" 2>"$T/err" </dev/null &
crpid=$!
i=0
while [ "$(ls "$T/pids" | grep -vc tmp)" -lt 3 ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
kill -INT "$crpid"
i=0
while kill -0 "$crpid" 2>/dev/null && [ $i -lt 150 ]; do sleep 0.1; i=$((i + 1)); done
if kill -0 "$crpid" 2>/dev/null; then kill -9 "$crpid"; fi
wait "$crpid"
rc=$?
elapsed=$(($(now_ms) - t0))
check "SIGINT: cohortrun exits 130 and says it was interrupted" \
    sh -c '[ '"$rc"' -eq 130 ] && grep -q "interrupted by SIGINT" "'"$T"'/err"'
alive=""
for f in "$T"/pids/*; do
    for p in $(cat "$f"); do kill -0 "$p" 2>/dev/null && alive="$alive $p"; done
done
check "SIGINT: every rank and every rank's child is gone afterwards (alive:${alive:- none})" \
    [ -z "$alive" -a "$(cat "$T"/pids/* | wc -w)" -eq 6 ]

echo "$npass passed, $nfail failed"
[ "$nfail" -eq 0 ]
