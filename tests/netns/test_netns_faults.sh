#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The fault-injection suite's network cut: ranks of tests/mp/faulty loop a collective on several
# "nodes" (network namespaces joined by veth pairs to a bridge: tests/netns/lib.sh), tcp between
# the nodes; then one node's link is taken down. Nothing tells the others (no RST, no FIN: the
# packets are just dropped), so the ranks on the other nodes must find out by themselves: every
# one of them must fail with COHORT_ERR_PEER_LOST or COHORT_ERR_TIMEOUT within COHORT_TIMEOUT
# (10 s here) + 15 s, at least one of them naming a rank of the cut node (a separate assertion, which
# FAULTS_REQUIRE_NAMING=0 turns into a report), and its next collective must fail as well.
#
#   a  2 nodes x 2 ranks, allreduce of 256 floats: node b's link cut at the switch (sw-b down);
#      survivors ranks 0, 1
#   b  3 nodes x 1 rank, allreduce of 1 Mi floats: node a's link cut inside the node (eth0 down
#      in its namespace), rank 0's node; survivors ranks 1, 2
#   c  2 nodes x 2 ranks, broadcast of 1 Mi floats between collectives (faulty --between):
#      node a's link cut at the switch while the ranks wait, then they go on; survivors 2, 3
#
# Needs root and iproute2 (skipped with 77 otherwise). One case: NETNS_CASES="b" make check
# TESTS=tests/netns/test_netns_faults.sh. Every namespace (and with them the veths and the
# bridge) is removed at the end, on failure and on interruption too (lib.sh's trap).
: "${top_builddir:?run through make check (AM_TESTS_ENVIRONMENT sets top_builddir)}"
: "${top_srcdir:?run through make check}"
. "$top_srcdir/tests/netns/lib.sh"
unset COHORT_HOSTID COHORT_SOCKET_IFNAME COHORT_HIERARCHICAL COHORT_TRANSPORTS COHORT_ALGO \
      COHORT_DEBUG COHORT_DEBUG_SUBSYS COHORT_CONF COHORT_TOPO_FILE COHORT_RANK COHORT_SIZE \
      COHORT_LOCAL_RANK COHORT_LOCAL_SIZE COHORT_RENDEZVOUS COHORT_JOB_ID COHORT_SECRET
export COHORT_TIMEOUT=10
: "${FAULTS_REQUIRE_NAMING:=1}"
START_LIMIT=60                       # s for every rank to finish its first collective
FAIL_LIMIT=$((COHORT_TIMEOUT + 15))  # s after the cut for every survivor to fail
. "$top_srcdir/tests/mp/lib.sh"
case $COHORTRUN in /*) ;; *) COHORTRUN=$(pwd)/$COHORTRUN ;; esac
FAULTY="$top_builddir/tests/mp/faulty"
case $FAULTY in /*) ;; *) FAULTY=$(pwd)/$FAULTY ;; esac
[ -x "$FAULTY" ] || { echo "not ok - $FAULTY is not built"; exit 1; }

want() {
    [ -z "${NETNS_CASES:-}" ] && return 0
    for c in $NETNS_CASES; do [ "$c" = "$1" ] && return 0; done
    return 1
}

tmp=$(mktemp -d)
cr=""
NETNS_AT_EXIT='[ -n "$cr" ] && kill -9 "$cr" 2>/dev/null; rm -rf "$tmp"'
netns_setup   # skips (77) without root or iproute2; installs the clean-up trap

. "$top_srcdir/tests/mp/faults_lib.sh"

# names_cut FILE: whether the message in FILE names a rank of the cut node: "rank K" for one of
# its ranks ($lost) and, as the ranks of a hierarchical collective's sub-groups are numbered
# within the group ("rank 0" may be another node's rank), the cut node too: its namespace name
# (the host in "rank K (HOST)") or its address (tcp's "rank K at ADDR:PORT").
names_cut() {
    _where="$cutns([^0-9a-z]|\$)"
    [ -n "$cutip" ] && _where="$_where|$(echo "$cutip" | sed 's/\./\\./g')([^0-9]|\$)"
    grep -Eq "rank ($(echo $lost | tr ' ' '|'))([^0-9]|\$)" "$1" && grep -Eq "$_where" "$1"
}

# cut_case LETTER "DESCRIPTION" HOSTLIST NP "CUT COMMAND" "SURVIVORS" "RANKS OF THE CUT NODE"
#          CUT_HOST COLL COUNT [--between]
cut_case() {
    letter=$1 name="$1: $2" hosts=$3 np=$4 cut=$5 survivors=$6 lost=$7 cuthost=$8 coll=$9
    shift 9
    count=$1 between=${2:-}
    cutns=$(netns_ns "$cuthost")
    cutip=$(ip -n "$cutns" -4 -o addr show dev eth0 | sed -n 's|.* inet \([0-9.]*\)/.*|\1|p')
    d="$tmp/$letter"
    mkdir -p "$d"
    timeout -k 5 $((START_LIMIT + FAIL_LIMIT + 30)) ip netns exec "$NETNS_SW" "$COHORTRUN" \
        --rsh "$NETNS_RSH" -H "$hosts" \
        sh -c '"$0" "$@"; echo $? > "$1/rc.$COHORT_RANK"; exec sleep 60' \
        "$FAULTY" "$d" "$coll" "$count" $between >"$d/out" 2>&1 &
    cr=$!
    all=""
    for r in $(seq 0 $((np - 1))); do all="$all pid.$r"; done
    if ! wait_files "$d" $START_LIMIT $all; then
        not_ok "$name: the ranks did not all finish a first $coll within $START_LIMIT s"
        tail -n 8 "$d/out" | sed 's/^/    /'
    else
        t0=$(now_ms)
        eval "$cut" || not_ok "$name: the cut failed: $cut"
        if [ -n "$between" ]; then
            t0=$(now_ms)
            : >"$d/go"
        fi
        wait_survivors "$d" "$t0" "$FAIL_LIMIT" $survivors
        bad="" unnamed="" report="" nsurv=0 nun=0
        for r in $survivors; do
            rc=$(cat "$d/rc.$r" 2>/dev/null)
            if [ -z "$rc" ]; then
                bad="$bad rank $r hung (no error within $FAIL_LIMIT s);"
                unnamed="$unnamed $r"
                report="$report
    rank $r: HUNG, no error within $FAIL_LIMIT s"
                continue
            fi
            msg=$(head -n 1 "$d/err.$r" 2>/dev/null)
            nxt=$(head -n 1 "$d/next.$r" 2>/dev/null)
            [ "$rc" = 1 ] || bad="$bad rank $r exited $rc (faulty exits 1 after an error: a crash?);"
            report="$report
    rank $r ($(secs "$(cat "$d/took.$r")") s after the cut, $(sed -n 's/^after //p' "$d/err.$r" 2>/dev/null) in the call): ${msg:-no err.$r, exit status $rc}"
            case $msg in
                "peer lost: "*|"timed out: "*) ;;
                *) bad="$bad rank $r exited $rc with '$(echo "$msg" | cut -c1-40)';" ;;
            esac
            case $nxt in
                "peer lost: "*|"timed out: "*) ;;
                *) bad="$bad rank $r's next collective returned '$(echo "$nxt" | cut -c1-60)';"
                   report="$report
    rank $r, next collective: $nxt" ;;
            esac
            nsurv=$((nsurv + 1))
            { [ -f "$d/err.$r" ] && names_cut "$d/err.$r"; } || { unnamed="$unnamed $r"; nun=$((nun + 1)); }
        done
        grep -Eq "Sanitizer|runtime error:" "$d/out" && bad="$bad a sanitizer report in the output;"
        if [ -z "$bad" ]; then
            ok "$name: every survivor failed (PEER_LOST/TIMEOUT) within $FAIL_LIMIT s"
        else
            not_ok "$name:$bad"
            tail -n 6 "$d/out" | cut -c1-300 | sed 's/^/    out: /'
        fi
        echo "$report" | sed '1d'
        # A cut is not a death: nothing tells the job which rank is unreachable, and a survivor
        # that waits on another survivor (which in turn waits across the cut) can only name the
        # rank it waited on when its own timeout fires first. So: at least one survivor names the
        # cut node, and the others name a rank (docs/reliability.md, "its host's network is cut").
        if [ -n "$unnamed" ] && [ "$nun" -lt "$nsurv" ]; then
            ok "$name: a survivor names a rank of the cut node (survivor(s)$unnamed name the survivor they waited on)"
        elif [ -n "$unnamed" ]; then
            if [ "$FAULTS_REQUIRE_NAMING" = 1 ]; then
                not_ok "$name: survivor(s)$unnamed do not name rank $(echo $lost | sed 's/ / or /g') of the cut node $cutns"
            else
                echo "    (FAULTS_REQUIRE_NAMING=0) survivor(s)$unnamed do not name rank $(echo $lost | sed 's/ / or /g') of the cut node $cutns"
            fi
        elif [ "$FAULTS_REQUIRE_NAMING" = 1 ]; then
            ok "$name: every survivor names a rank of the cut node"
        fi
    fi
    # stop the job (cohortrun terminates its ranks, those of the cut node too); nothing of it
    # may be left running in the nodes
    kill -TERM "$cr" 2>/dev/null
    wait "$cr" 2>/dev/null
    cr=""
    left=""
    for h in $NETNS_HOSTS; do
        p=$(ip netns pids "$(netns_ns "$h")" 2>/dev/null | tr '\n' ' ')
        [ -n "$p" ] && left="$left $(netns_ns "$h"): $p;" && kill -9 $p 2>/dev/null
    done
    if [ -n "$left" ]; then not_ok "$name: processes left after cohortrun ended:$left (killed now)"
    else ok "$name: no process of the job left in the nodes"; fi
}

setup() { netns_cleanup; netns_setup; SW=$NETNS_SW; }
if want a; then
    setup
    netns_add_host a eth0 && netns_add_host b eth0 ||
        netns_skip "cannot create the hosts (veth pairs into namespaces)"
    NETNS_HOSTS="a b"
    cut_case a "2 nodes x 2 ranks, allreduce 256 floats, node b's link cut at the switch" \
        "$(netns_ns a):2,$(netns_ns b):2" 4 'ip -n "$SW" link set sw-b down' "0 1" "2 3" b \
        allreduce 256
fi
if want b; then
    setup
    netns_add_host a eth0 && netns_add_host b eth0 && netns_add_host c eth0 ||
        netns_skip "cannot create the hosts (veth pairs into namespaces)"
    NETNS_HOSTS="a b c"
    cut_case b "3 nodes x 1 rank, allreduce 1 Mi floats, node a's eth0 down inside the node (rank 0)" \
        "$(netns_ns a):1,$(netns_ns b):1,$(netns_ns c):1" 3 \
        'ip -n "$(netns_ns a)" link set eth0 down' "1 2" "0" a allreduce 1048576
fi
if want c; then
    setup
    netns_add_host a eth0 && netns_add_host b eth0 ||
        netns_skip "cannot create the hosts (veth pairs into namespaces)"
    NETNS_HOSTS="a b"
    cut_case c "2 nodes x 2 ranks, broadcast 1 Mi floats, node a's link cut at the switch between collectives" \
        "$(netns_ns a):2,$(netns_ns b):2" 4 'ip -n "$SW" link set sw-a down' "2 3" "0 1" a \
        broadcast 1048576 --between
fi
netns_cleanup

netns_check_clean
finish
