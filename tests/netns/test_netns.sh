#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Multi-node tests: real ranks of tests/mp/collcheck (every collective, element by element) on
# several "hosts" that are network namespaces joined by veth pairs to a bridge (tests/netns/lib.sh
# describes the layout), launched by cohortrun through the agent 'ip netns exec {host} env
# COHORT_HOSTID={host}'. Needs root and iproute2; skipped (77) otherwise.
#
#   a  2 nodes x 2 ranks                    e  an extra unreachable interface is not chosen
#   b  3 nodes x 2 ranks                    f  a wrong COHORT_SOCKET_IFNAME fails fast
#   c  uneven placement: 2+1, 3+2           g  COHORT_HIERARCHICAL=1 / =0 on 2x2 and 3x2
#   d  interface names differ per node      h  --map-by node (round-robin placement)
#   u  over ucx (UCX_TLS=tcp), when libcohort-ucx.so was built
#
# One case or a few: NETNS_CASES="a h" make check TESTS=tests/netns/test_netns.sh
# Every case has a deadline (CASE_TIMEOUT; the fail-fast cases 60 s with COHORT_TIMEOUT=120).
: "${top_builddir:?run through make check (AM_TESTS_ENVIRONMENT sets top_builddir)}"
: "${top_srcdir:?run through make check}"
. "$top_srcdir/tests/netns/lib.sh"
# Ranks must not get the caller's settings that change what a case tests (cohortrun forwards
# every COHORT_* of its environment to remote ranks, after the agent's COHORT_HOSTID).
unset COHORT_HOSTID COHORT_SOCKET_IFNAME COHORT_HIERARCHICAL COHORT_TRANSPORTS COHORT_ALGO \
      COHORT_DEBUG COHORT_DEBUG_SUBSYS COHORT_CONF COHORT_TOPO_FILE COHORT_RANK COHORT_SIZE \
      COHORT_LOCAL_RANK COHORT_LOCAL_SIZE COHORT_RENDEZVOUS COHORT_JOB_ID COHORT_SECRET
export COHORT_TIMEOUT=60
: "${CASE_TIMEOUT:=120}"
. "$top_srcdir/tests/mp/lib.sh"
case $COHORTRUN in /*) ;; *) COHORTRUN=$(pwd)/$COHORTRUN ;; esac
CC="$top_builddir/tests/mp/collcheck"
INFO="$top_builddir/tools/cohort-info"
case $CC in /*) ;; *) CC=$(pwd)/$CC; INFO=$(pwd)/$INFO ;; esac
[ -x "$CC" ] || { echo "not ok - $CC is not built"; exit 1; }

want() {   # want CASE: whether NETNS_CASES (default: all) selects it
    [ -z "${NETNS_CASES:-}" ] && return 0
    for c in $NETNS_CASES; do [ "$c" = "$1" ] && return 0; done
    return 1
}
wants() { for c in "$@"; do want "$c" && return 0; done; return 1; }

tmp=$(mktemp -d)
NETNS_AT_EXIT='rm -rf "$tmp"'
trap 'netns_cleanup; eval "$NETNS_AT_EXIT"' EXIT

# hl NAME:SLOTS ...: a -H list of this run's namespaces
hl() {
    _l=""
    for _h in "$@"; do _l="$_l${_l:+,}$(netns_ns "${_h%%:*}"):${_h#*:}"; done
    echo "$_l"
}
# The launcher in the switch namespace, as a command line for run_case (which wraps it in a
# timeout): cohortrun --rsh AGENT, then the caller's options and command.
CR="ip netns exec"   # followed by "$NETNS_SW" "$COHORTRUN" --rsh "$NETNS_RSH" ...

setup() {   # setup (cleans the previous set of hosts first)
    netns_cleanup
    netns_setup
}

# ---- plain hosts: a, b, c, each linked by eth0 ----------------------------------------------
if wants a b c g h; then
    setup
    netns_add_host a eth0 && netns_add_host b eth0 && netns_add_host c eth0 ||
        netns_skip "cannot create the hosts (veth pairs into namespaces)"
    SW=$NETNS_SW
    want a && run_case "a: 2 nodes x 2 ranks" \
        $CR "$SW" "$COHORTRUN" --rsh "$NETNS_RSH" -H "$(hl a:2 b:2)" "$CC"
    want b && run_case "b: 3 nodes x 2 ranks" \
        $CR "$SW" "$COHORTRUN" --rsh "$NETNS_RSH" -H "$(hl a:2 b:2 c:2)" "$CC"
    if want c; then
        run_case "c: uneven, 2+1 ranks" \
            $CR "$SW" "$COHORTRUN" --rsh "$NETNS_RSH" -H "$(hl a:2 b:1)" "$CC"
        run_case "c: uneven, 3+2 ranks" \
            $CR "$SW" "$COHORTRUN" --rsh "$NETNS_RSH" -H "$(hl a:3 b:2)" "$CC"
    fi
    if want g; then
        # (the hierarchical algorithms are chosen by the core; until they exist the setting
        # changes nothing and these run the flat path)
        run_case "g: COHORT_HIERARCHICAL=1, 2 nodes x 2 ranks" \
            $CR "$SW" "$COHORTRUN" --rsh "$NETNS_RSH" -x COHORT_HIERARCHICAL=1 -H "$(hl a:2 b:2)" "$CC"
        run_case "g: COHORT_HIERARCHICAL=1, 3 nodes x 2 ranks" \
            $CR "$SW" "$COHORTRUN" --rsh "$NETNS_RSH" -x COHORT_HIERARCHICAL=1 -H "$(hl a:2 b:2 c:2)" "$CC"
        run_case "g: COHORT_HIERARCHICAL=0 (flat), 2 nodes x 2 ranks" \
            $CR "$SW" "$COHORTRUN" --rsh "$NETNS_RSH" -x COHORT_HIERARCHICAL=0 -H "$(hl a:2 b:2)" "$CC"
        run_case "g: COHORT_HIERARCHICAL=0 (flat), 3 nodes x 2 ranks" \
            $CR "$SW" "$COHORTRUN" --rsh "$NETNS_RSH" -x COHORT_HIERARCHICAL=0 -H "$(hl a:2 b:2 c:2)" "$CC"
    fi
    if want h; then
        run_case "h: --map-by node, 2 nodes x 2 ranks: collectives" \
            $CR "$SW" "$COHORTRUN" --rsh "$NETNS_RSH" --map-by node -H "$(hl a:2 b:2)" "$CC"
        # Where each rank runs (the namespace it is in, by ip netns identify), the local rank
        # cohortrun gave it, and which peers the library puts on its node (shm between ranks of a
        # node, tcp across: cohort-info --peers).
        A=$(netns_ns a) B=$(netns_ns b)
        run_case "h: --map-by node: ranks 0,2 in $A and 1,3 in $B, local ranks and shm peers follow" sh -c '
            ip netns exec "$0" "$1" --rsh "$2" --map-by node -H "$3:2,$4:2" \
                sh -c "echo where \$COHORT_RANK \$(ip netns identify) \$COHORT_LOCAL_RANK/\$COHORT_LOCAL_SIZE" \
                >"$6/where" 2>&1 || { cat "$6/where"; exit 1; }
            sort "$6/where" | tee "$6/where.sorted"
            printf "where 0 %s 0/2\nwhere 1 %s 0/2\nwhere 2 %s 1/2\nwhere 3 %s 1/2\n" "$3" "$4" "$3" "$4" |
                cmp -s - "$6/where.sorted" || { echo "placement is not round-robin"; exit 1; }
            ip netns exec "$0" "$1" --rsh "$2" --map-by node -H "$3:2,$4:2" "$5" --peers \
                >"$6/peers" 2>&1 || { cat "$6/peers"; exit 1; }
            cat "$6/peers"
            grep -q "^4 ranks on 2 node" "$6/peers" &&
            grep -Eq "^0 +[^ ]+ +- +tcp +shm +tcp$" "$6/peers" &&
            grep -Eq "^1 +[^ ]+ +tcp +- +tcp +shm$" "$6/peers" &&
            grep -Eq "^2 +[^ ]+ +shm +tcp +- +tcp$" "$6/peers" &&
            grep -Eq "^3 +[^ ]+ +tcp +shm +tcp +-$" "$6/peers"' \
            "$SW" "$COHORTRUN" "$NETNS_RSH" "$A" "$B" "$INFO" "$tmp"
    fi
fi

# ---- interface names that differ: a eth0, b ens1, c enp0s8 ----------------------------------
# b and c also have an interface that COHORT_SOCKET_IFNAME=eth,ens rules out and that leads
# nowhere (created first, so the order alone would put it first): the setting must be obeyed.
if want d; then
    setup
    netns_add_host a eth0 &&
        netns_add_ns b && netns_add_dummy b ib0 10.99.1.1/24 && netns_add_host b ens1 &&
        netns_add_ns c && netns_add_dummy c wlan0 10.99.2.1/24 && netns_add_host c ens8 ||
        netns_skip "cannot create the hosts (veth pairs into namespaces)"
    run_case "d: eth0 / ens1 / ens8 with COHORT_SOCKET_IFNAME=eth,ens, 2+2+1 ranks" \
        $CR "$NETNS_SW" "$COHORTRUN" --rsh "$NETNS_RSH" -x COHORT_SOCKET_IFNAME=eth,ens \
        -H "$(hl a:2 b:2 c:1)" "$CC"
fi

# ---- extra interfaces that reach nobody ----------------------------------------------------
#   a: eth0 only
#   b: dummy0 10.99.1.1/24 (no peer, nobody routes to it), dummy1 10.99.9.1/24, then eth0
#   c: eth1 10.98.1.1/24, a veth to a namespace of its own whose end answers (10.98.1.2), then
#      eth0
#   d: dummy0 10.99.2.1/24, dummy1 10.99.9.2/24 (the same subnet as b's, but no link), eth0
# The unreachable ones come first in each host's interface order. ("dummy" interfaces are veths
# into a namespace of their own where the kernel has no dummy driver: see netns_add_dummy.)
if wants e f; then
    setup
    netns_add_host a eth0 &&
        netns_add_ns b && netns_add_dummy b dummy0 10.99.1.1/24 &&
        netns_add_dummy b dummy1 10.99.9.1/24 && netns_add_host b eth0 &&
        netns_add_ns c && netns_add_isolated c eth1 && netns_add_host c eth0 &&
        netns_add_ns d && netns_add_dummy d dummy0 10.99.2.1/24 &&
        netns_add_dummy d dummy1 10.99.9.2/24 && netns_add_host d eth0 ||
        netns_skip "cannot create the hosts (veth pairs into namespaces)"
    A=$(netns_ns a) B=$(netns_ns b) C=$(netns_ns c) D=$(netns_ns d)
    if want e; then
        # Without COHORT_SOCKET_IFNAME the ranks must find each other over eth0 (interfaces are
        # probed for mutual reachability: docs/design.md, Networking), and the INFO log must show
        # eth0 in use on the host with the extra interface. tcp logs "tcp: rank R listening on
        # ADDR:PORT (IF)" at INFO (subsystem net); ranks 2,3 are on that host. COHORT_TIMEOUT=30:
        # a job that cannot connect fails sooner (a healthy one takes a few seconds).
        for x in "b dummy0 (no peer)" "c eth1 (veth to an isolated namespace)"; do
            h=${x%% *}
            run_case "e: $(netns_ns $h) has $(echo "$x" | cut -d' ' -f2-) before eth0; no COHORT_SOCKET_IFNAME; eth0 is used" sh -c '
                ip netns exec "$0" "$1" --rsh "$2" -x COHORT_DEBUG=INFO -x COHORT_DEBUG_SUBSYS=init,net \
                    -x COHORT_TIMEOUT=30 -H "$3:2,$4:2" "$5" >"$6/e.$7" 2>&1; rc=$?
                grep -E "tcp: rank [0-9]+ |passed, .* failed|error|cohortrun:" "$6/e.$7" | cut -c1-200 | head -20
                [ $rc = 0 ] || { echo "job failed (exit $rc)"; exit 1; }
                for r in 2 3; do
                    grep -E "\[$r\] .*tcp: rank $r .*(10\.77\.1\.|[(]eth0[)])" "$6/e.$7" >/dev/null ||
                        { echo "no log line shows rank $r using eth0 (10.77.1.x)"; exit 1; }
                done' "$NETNS_SW" "$COHORTRUN" "$NETNS_RSH" "$A" "$(netns_ns $h)" "$CC" "$tmp" "$h"
        done
    fi
    if want f; then
        # Must fail, within 60 s although COHORT_TIMEOUT=120, naming the interface or the
        # variable. f_case NAME IFNAME HOSTS PATTERN; shows the first lines of the output.
        f_case() {
            out=$(mktemp)
            t0=$(date +%s)
            COHORT_TIMEOUT=120 timeout -k 5 60 ip netns exec "$NETNS_SW" "$COHORTRUN" \
                --rsh "$NETNS_RSH" -x COHORT_SOCKET_IFNAME="$2" -H "$3" "$CC" >"$out" 2>&1 &
            if wait $!; then
                not_ok "$1: the job succeeded"
            else
                rc=$?
                took=$(( $(date +%s) - t0 ))
                if [ $rc -ge 124 ]; then
                    not_ok "$1: no failure within 60 s (exit $rc)"
                elif grep -Eq "$4" "$out"; then
                    ok "$1 (exit $rc after $took s)"
                else
                    not_ok "$1: failed (exit $rc after $took s) but no line names the interface or COHORT_SOCKET_IFNAME"
                fi
            fi
            grep -v "^$" "$out" | cut -c1-240 | head -6 | sed 's/^/    /'
            rm -f "$out"
        }
        f_case "f: COHORT_SOCKET_IFNAME=nosuch0 (no such interface) fails fast" nosuch0 \
            "$A:2,$B:2" "COHORT_SOCKET_IFNAME.*nosuch0|nosuch0.*COHORT_SOCKET_IFNAME"
        f_case "f: COHORT_SOCKET_IFNAME=dummy0 (on both nodes, other subnets, no route) fails fast" \
            dummy0 "$B:2,$D:2" "dummy0|COHORT_SOCKET_IFNAME"
        f_case "f: COHORT_SOCKET_IFNAME=dummy1 (on both nodes, same subnet, no link) fails fast" \
            dummy1 "$B:2,$D:2" "dummy1|COHORT_SOCKET_IFNAME"
    fi
fi

# ---- over UCX, when it was built: COHORT_TRANSPORTS=ucx with UCX_TLS=tcp, 2 nodes x 2 ranks ----
# The namespaces share the boot id and host name, so UCX takes them for one machine and would
# also try its tcp over lo between them; COHORT_SOCKET_IFNAME=eth0 (which the plugin hands to
# UCX as NET_DEVICES, UCX_NET_DEVICES being unset) keeps it to the link.
if want u; then
    if [ -e "$top_builddir/.libs/libcohort-ucx.so" ]; then
        setup
        netns_add_host a eth0 && netns_add_host b eth0 ||
            netns_skip "cannot create the hosts (veth pairs into namespaces)"
        run_case "u: over ucx (UCX_TLS=tcp, COHORT_SOCKET_IFNAME=eth0), 2 nodes x 2 ranks" \
            $CR "$NETNS_SW" "$COHORTRUN" --rsh "$NETNS_RSH" -x COHORT_TRANSPORTS=ucx -x UCX_TLS=tcp \
            -x COHORT_SOCKET_IFNAME=eth0 -H "$(hl a:2 b:2)" "$CC"
    else
        echo "# case u skipped: libcohort-ucx.so was not built"
    fi
fi

# Every veth and the bridge live in this run's namespaces (none is made in the root namespace),
# so no namespace named with this run's prefix means nothing is left. (The root namespace's link
# count is no measure: other jobs on the machine may add links meanwhile.)
netns_cleanup
netns_check_clean
finish
