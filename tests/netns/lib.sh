# SPDX-License-Identifier: BSD-3-Clause
# Multi-node test helpers (sourced): "hosts" are network namespaces joined by veth pairs to one
# bridge, so that real ranks on several "nodes" talk over real (virtual) links on one machine.
#
# Layout of one run (every name carries a per-run prefix, chn<pid>, so that parallel runs and
# leftovers of a killed run never collide):
#
#   namespace chn<pid>sw   the "switch": bridge br0 with 10.77.1.254/24, and the switch end of
#                          every host's veth pair (sw-<host>). cohortrun runs here (netns_run),
#                          so its rendezvous address is the bridge's, the only address it has
#                          besides loopback, and every host reaches it over its own link.
#   namespace chn<pid><h>  one per host (netns_add_host): lo and the host end of the veth pair,
#                          under the name the caller chooses (eth0, ens1, ...), 10.77.1.<n>/24;
#                          optionally more interfaces (netns_add_dummy, netns_add_isolated).
#
# Nothing is created in the root namespace: the veths and the bridge live and die with their
# namespaces, and netns_cleanup (run on EXIT, INT and TERM) removes every namespace it made after
# killing whatever still runs inside. The root namespace's routes and addresses are untouched,
# and 10.77.1.0/24 is private to each run.
#
# Ranks are started with cohortrun's {host} agent (NETNS_RSH): 'ip netns exec {host} env
# COHORT_HOSTID={host}'. All namespaces share the machine's hostname and boot id, so cohort would
# take them for one node; COHORT_HOSTID (the node identity override) set to the namespace's name
# makes each namespace a node. cohortrun never sets COHORT_HOSTID itself, and it forwards every
# COHORT_* variable of its own environment after the agent's words (`env VAR=val ... cmd`), which
# would override ours: so the caller's environment must not have COHORT_HOSTID (netns_setup
# unsets it).
#
# Requirements: root, iproute2 with `ip netns`, veth and bridge support. Anything missing: the
# test is skipped (exit 77, automake's SKIP) with the reason.

NETNS_P="chn$$"
NETNS_SW="${NETNS_P}sw"
NETNS_NET=10.77.1
NETNS_RSH='ip netns exec {host} env COHORT_HOSTID={host}'
NETNS_CREATED=""     # namespaces made by this run, for netns_cleanup
NETNS_NEXT_IP=1      # last octet of the next host's address
NETNS_NEXT_ISO=1     # third octet of the next isolated link (10.98.<n>.0/24)

netns_skip() {
    echo "SKIP: $*"
    exit 77
}

# netns_ns NAME: the namespace name of host NAME (its name for cohortrun's -H as well)
netns_ns() { echo "${NETNS_P}$1"; }

# Removes everything this run made. Idempotent; keeps the caller's exit status.
netns_cleanup() {
    _rc=$?
    for _ns in $NETNS_CREATED; do
        # whatever is still running inside (a hung rank): the namespace and its veths would
        # outlive its name otherwise
        _pids=$(ip netns pids "$_ns" 2>/dev/null)
        [ -n "$_pids" ] && kill -9 $_pids 2>/dev/null
    done
    for _ns in $NETNS_CREATED; do
        ip netns del "$_ns" 2>/dev/null
    done
    NETNS_CREATED=""
    NETNS_NEXT_IP=1
    NETNS_NEXT_ISO=1
    return $_rc
}

_netns_add() {   # _netns_add NS: creates it with lo up and registers it for cleanup
    ip netns add "$1" || return 1
    NETNS_CREATED="$NETNS_CREATED $1"
    ip -n "$1" link set lo up
}

# netns_setup: checks the requirements (skips the test when one is missing), registers the
# cleanup and creates the switch namespace with its bridge. Call again after netns_cleanup for a
# fresh set of hosts.
netns_setup() {
    [ "$(id -u)" = 0 ] || netns_skip "the netns tests need root (network namespaces, veth, bridge)"
    command -v ip >/dev/null 2>&1 || netns_skip "iproute2 (ip) is not installed"
    ip netns list >/dev/null 2>&1 || netns_skip "'ip netns' is not available (iproute2 too old?)"
    command -v timeout >/dev/null 2>&1 || netns_skip "timeout (coreutils) is not installed"
    # (NETNS_AT_EXIT: the caller's own clean-up, eval'ed after ours)
    trap 'netns_cleanup; eval "${NETNS_AT_EXIT:-}"' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    unset COHORT_HOSTID
    _err=$(ip netns add "$NETNS_SW" 2>&1) || netns_skip "cannot create a network namespace: $_err"
    NETNS_CREATED="$NETNS_CREATED $NETNS_SW"
    ip -n "$NETNS_SW" link set lo up
    _err=$(ip -n "$NETNS_SW" link add br0 type bridge 2>&1 &&
           ip -n "$NETNS_SW" addr add "$NETNS_NET.254/24" dev br0 2>&1 &&
           ip -n "$NETNS_SW" link set br0 up 2>&1) ||
        netns_skip "cannot create a bridge in a network namespace: $_err"
}

# netns_add_ns NAME: creates host NAME's namespace without its link (to add other interfaces
# first: they then come first in its interface order); netns_add_host adds the link.
netns_add_ns() {
    _netns_add "$(netns_ns "$1")" || { echo "cannot create namespace $(netns_ns "$1")" >&2; return 1; }
}

# netns_add_host NAME IFNAME: host namespace chn<pid>NAME (created unless netns_add_ns did)
# whose link to the bridge is called IFNAME, with the next address 10.77.1.<n>/24.
netns_add_host() {
    _ns=$(netns_ns "$1")
    case " $NETNS_CREATED " in
        *" $_ns "*) ;;
        *) netns_add_ns "$1" || return 1 ;;
    esac
    ip -n "$NETNS_SW" link add "sw-$1" type veth peer name "$2" netns "$_ns" || return 1
    ip -n "$NETNS_SW" link set "sw-$1" master br0 up || return 1
    ip -n "$_ns" addr add "$NETNS_NET.$NETNS_NEXT_IP/24" dev "$2" || return 1
    ip -n "$_ns" link set "$2" up || return 1
    NETNS_NEXT_IP=$((NETNS_NEXT_IP + 1))
}

# netns_add_dummy NAME IFNAME CIDR: an interface with an address (e.g. 10.99.1.1/24) on host
# NAME that no other host can reach (they have no route to it). A dummy interface where the
# kernel has them; otherwise (no CONFIG_DUMMY) a veth whose peer sits alone in a namespace of
# its own (chn<pid>NAME-IFNAME), which no other host is linked to either.
netns_add_dummy() {
    _ns=$(netns_ns "$1")
    if ! ip -n "$_ns" link add "$2" type dummy 2>/dev/null; then
        _dn=$(netns_ns "$1-$2")
        _netns_add "$_dn" || return 1
        ip -n "$_ns" link add "$2" type veth peer name peer0 netns "$_dn" || return 1
        ip -n "$_dn" link set peer0 up
    fi
    ip -n "$_ns" addr add "$3" dev "$2" || return 1
    ip -n "$_ns" link set "$2" up
}

# netns_add_isolated NAME IFNAME: a veth pair from host NAME (interface IFNAME, 10.98.<k>.1/24)
# to a namespace of its own (chn<pid>NAMEiso, 10.98.<k>.2/24) that nobody else is linked to: an
# interface that is up, has a carrier and a peer that answers, yet leads nowhere useful.
netns_add_isolated() {
    _ns=$(netns_ns "$1")
    _iso=$(netns_ns "$1iso")
    _k=$NETNS_NEXT_ISO
    NETNS_NEXT_ISO=$((NETNS_NEXT_ISO + 1))
    _netns_add "$_iso" || return 1
    ip -n "$_ns" link add "$2" type veth peer name peer0 netns "$_iso" || return 1
    ip -n "$_ns" addr add "10.98.$_k.1/24" dev "$2" || return 1
    ip -n "$_ns" link set "$2" up || return 1
    ip -n "$_iso" addr add "10.98.$_k.2/24" dev peer0 || return 1
    ip -n "$_iso" link set peer0 up
}

# netns_shape NAME IFNAME RATE [BURST [LATENCY]]: token-bucket shaping (tc tbf) of host NAME's link
# in both directions: its egress on IFNAME and the switch's egress towards it on sw-NAME.
# RATE as tc writes it (1gbit, 500mbit). BURST defaults to what the rate sends in 4 ms (one tick
# at HZ=250), at least 256 KiB: a bucket smaller than that, or than the 64 KiB GSO packets a veth
# carries, keeps tbf well below its rate. LATENCY (how long a packet may queue) defaults to 20ms.
netns_shape() {
    _ns=$(netns_ns "$1")
    _burst=${4:-$(netns_burst "$3")}
    _lat=${5:-20ms}
    ip netns exec "$_ns" tc qdisc replace dev "$2" root tbf rate "$3" burst "$_burst" \
        latency "$_lat" || return 1
    ip netns exec "$NETNS_SW" tc qdisc replace dev "sw-$1" root tbf rate "$3" burst "$_burst" \
        latency "$_lat"
}

# netns_burst RATE: bytes sent at RATE in 4 ms, at least 256 KiB (see netns_shape)
netns_burst() {
    _r=$(echo "$1" | tr 'A-Z' 'a-z')
    case $_r in
        *gbit) _bps=$(( ${_r%gbit} * 1000000000 )) ;;
        *mbit) _bps=$(( ${_r%mbit} * 1000000 )) ;;
        *kbit) _bps=$(( ${_r%kbit} * 1000 )) ;;
        *bit) _bps=${_r%bit} ;;
        *) _bps=1000000000 ;;
    esac
    _b=$(( _bps / 8 / 250 ))
    [ "$_b" -lt 262144 ] && _b=262144
    echo "$_b"
}

# netns_run CMD...: runs CMD in the switch namespace (where cohortrun must run: see the top).
netns_run() { ip netns exec "$NETNS_SW" "$@"; }

# netns_leftovers: prints the namespaces of this run that still exist (nothing when clean)
netns_leftovers() { ip netns list 2>/dev/null | grep "^${NETNS_P}" ; }
# netns_check_clean: after netns_cleanup, an ok/not_ok case (tests/mp/lib.sh) that nothing of
# this run is left: no namespace with its prefix, no link of it in the root namespace.
netns_check_clean() {
    _left=$(netns_leftovers)
    _mine=$(ip -o link | grep -E "sw-|$NETNS_P" | cut -d: -f2)
    if [ -z "$_left" ] && [ -z "$_mine" ]; then
        ok "no namespace, veth or bridge left behind"
    else
        not_ok "left behind: namespaces: ${_left:-none}; links in the root namespace: ${_mine:-none}"
    fi
}
