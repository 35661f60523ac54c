#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The bad-input suite: every setting and every option of cohort-info and cohort-bench (and
# cohortrun's numbers and files), fed bad values from the table below. Each must be refused:
# a non-zero exit within CASE_S seconds (a hang fails the case) and a message naming the
# setting or option and the bad text. A setting's value goes in three ways: the environment of
# a one-rank job (cohort_comm_init), a cohort.conf line (the message must also name the file and
# line) and `cohort-info --settings` (exit 1 with an error line). Every setting gets the empty
# value besides its own cases, and a setting of the table (cohort-info --settings) without a case
# of its own fails the suite: add its bad values below when you add a setting. Rules:
# docs/reliability.md, "Settings: one grammar".
. "$top_srcdir/tests/mp/lib.sh"
PROG="$top_builddir/examples/allreduce"
INFO="$top_builddir/tools/cohort-info"
BENCH="$top_builddir/bench/cohort-bench"
CASE_S=${BADINPUT_TIMEOUT:-30}   # seconds one case may take; past that it hung
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM
cd "$tmp" || exit 1
for v in $(env | sed -n 's/^\(COHORT_[A-Z0-9_]*\)=.*/\1/p'); do unset "$v"; done
export COHORT_TIMEOUT=30
mkfifo "$tmp/fifo"
mkdir "$tmp/dir"
head -c 2000000 /dev/zero | tr '\0' '#' | fold -w 100 >"$tmp/big"   # comments, over 1 MiB
long=$(printf '%0200d' 0)
TESTED=" "

# line_with FILE WORD...: 0 when one line of FILE holds every WORD.
line_with() {
    f=$1; shift
    cp "$f" "$tmp/lw"
    for w in "$@"; do
        grep -F -- "$w" "$tmp/lw" >"$tmp/lw2"; mv "$tmp/lw2" "$tmp/lw"
    done
    [ -s "$tmp/lw" ]
}

# run_bounded OUT CMD...: CMD's status (124/137: it hung past CASE_S), its output into OUT.
run_bounded() {
    out=$1; shift
    timeout -k 5 "$CASE_S" "$@" >"$out" 2>&1
}

# refused NAME STATUS OUT WORD...: the verdict of one run.
refused() {
    name=$1 st=$2 out=$3; shift 3
    if [ "$st" -eq 124 ] || [ "$st" -eq 137 ]; then
        not_ok "$name: hung (killed after $CASE_S s)"; tail -n 3 "$out"; return 1
    elif [ "$st" -eq 0 ]; then
        not_ok "$name: accepted"; tail -n 3 "$out"; return 1
    elif ! line_with "$out" "$@"; then
        not_ok "$name: no line naming all of: $*"; tail -n 3 "$out"; return 1
    fi
    return 0
}

# setting VAR VALUE [TEXT]: VAR=VALUE refused in the environment, in a cohort.conf and by
# cohort-info, each message naming VAR and TEXT (default: VALUE; for an empty value, '').
setting() {
    var=$1 val=$2 text=${3-$2}
    [ -n "$text" ] || text="''"   # quoted, as every message quotes the value
    TESTED="$TESTED$var "
    shown="$var='$(printf '%s' "$val" | cut -c1-24)'"
    failed=0
    run_bounded "$tmp/out" env COHORT_CONF=/dev/null COHORT_RANK=0 COHORT_SIZE=1 "$var=$val" \
        "$PROG"
    refused "$shown (environment)" $? "$tmp/out" "$var" "$text" || failed=1
    # a settings file: not for COHORT_CONF itself, nor values a file line cannot hold as they
    # are ('#' starts a comment, blanks around a value are trimmed)
    case "$var:$val" in
    COHORT_CONF:* | *'#'* | *:' '* | *' ') ;;
    *)
        printf '# bad-input suite\n%s = %s\n' "$var" "$val" >"$tmp/c.conf"
        run_bounded "$tmp/out" env COHORT_CONF="$tmp/c.conf" COHORT_RANK=0 COHORT_SIZE=1 "$PROG"
        refused "$shown (cohort.conf)" $? "$tmp/out" "$var" "$text" \
            "(set in $tmp/c.conf, line 2)" || failed=1
        ;;
    esac
    if [ "$var" = COHORT_CONF ]; then
        run_bounded "$tmp/out" env "$var=$val" "$INFO" --settings
    else
        run_bounded "$tmp/out" env COHORT_CONF=/dev/null "$var=$val" "$INFO" --settings
    fi
    refused "$shown (cohort-info)" $? "$tmp/out" "error: " "$var" "$text" || failed=1
    [ $failed = 1 ] || ok "$shown refused: $(line_with "$tmp/out" "error: " "$var" "$text" &&
        head -n 1 "$tmp/lw" | sed 's/^ *error: //' | cut -c1-100)"
}

# option NAME TEXT CMD...: CMD (a tool with a bad option) exits non-zero in time, and a line of
# its output holds TEXT (the option and its value).
option() {
    name=$1 text=$2; shift 2
    run_bounded "$tmp/out" "$@"
    refused "$name" $? "$tmp/out" "$text" &&
        ok "$name refused: $(head -n 1 "$tmp/lw" | cut -c1-100)"
}

# ---- settings ---------------------------------------------------------------------------------
setting COHORT_TRANSPORTS nosuch
setting COHORT_TRANSPORTS "shm,,tcp"
setting COHORT_TRANSPORTS ",,,"
setting COHORT_TRANSPORTS "^" "names no transports"
setting COHORT_TRANSPORTS "^verb" "'verb'"
setting COHORT_TRANSPORTS "^shm,tcp,ucx,verbs" "excludes every transport found"
setting COHORT_TRANSPORTS "sh.m"
setting COHORT_PLUGIN_PATH /nonexistent/dir
setting COHORT_PLUGIN_PATH ":::"
setting COHORT_PLUGIN_PATH "$tmp/dir:" "empty entry"
setting COHORT_PLUGIN_PATH "/etc/passwd" "not a directory"
setting COHORT_SOCKET_IFNAME =nosuchif0
setting COHORT_SOCKET_IFNAME "eth,,lo"
setting COHORT_SOCKET_IFNAME "10.0.0.0/99"
setting COHORT_SOCKET_IFNAME "^" "names no interfaces"
setting COHORT_SOCKET_NSOCKS 0
setting COHORT_SOCKET_NSOCKS 17
setting COHORT_SOCKET_NSOCKS 0x2
setting COHORT_SOCKET_NSOCKS 1.5
setting COHORT_SOCKET_NSOCKS 99999999999999999999
setting COHORT_SHM_SEGMENT_SIZE 1k
setting COHORT_SHM_SEGMENT_SIZE 65535
setting COHORT_SHM_SEGMENT_SIZE 0x10000
setting COHORT_SHM_EAGER_LIMIT -5
setting COHORT_SHM_EAGER_LIMIT 4294967296
setting COHORT_SHM_CMA 7
setting COHORT_SHM_CMA yes
setting COHORT_SHM_MAP 2
setting COHORT_SHM_MAP on
setting COHORT_SHM_STREAM 3
setting COHORT_SHM_STREAM -1
setting COHORT_SHM_COLL_CHUNK 12
setting COHORT_SHM_COLL_CHUNK 0x1000
setting COHORT_SHM_COLL_CHUNK 67108865
setting COHORT_ALGO allreduce:nosuch
setting COHORT_ALGO "allreduce:ring;"
setting COHORT_ALGO "allreduce:ring;;broadcast:tree"
setting COHORT_ALGO allreduce
setting COHORT_ALGO gather:ring
setting COHORT_CHUNK_SIZE 12abc
setting COHORT_CHUNK_SIZE 63
setting COHORT_CHUNK_SIZE 0x40
setting COHORT_CHUNK_SIZE 1e3
setting COHORT_SPIN -1
setting COHORT_SPIN 0x10
setting COHORT_SPIN 1.5
setting COHORT_SPIN_US 1e999
setting COHORT_SPIN_US 0x10
setting COHORT_TIMEOUT 5s
setting COHORT_TIMEOUT 0x10
setting COHORT_TIMEOUT 0
setting COHORT_TIMEOUT inf
setting COHORT_TIMEOUT nan
setting COHORT_TIMEOUT 1e999
setting COHORT_STALL_WARN 0x1p3
setting COHORT_STALL_WARN -1
setting COHORT_STALL_WARN infinity
setting COHORT_PROGRESS threads
setting COHORT_PROGRESS ""
setting COHORT_FUSION_THRESHOLD -1
setting COHORT_FUSION_THRESHOLD 64M
setting COHORT_CYCLE_TIME 0x10
setting COHORT_CYCLE_TIME -2
setting COHORT_TIMELINE ""
setting COHORT_COMPRESS fp8
setting COHORT_COMPRESS ""
setting COHORT_DEBUG LOUD
setting COHORT_DEBUG abc
setting COHORT_DEBUG WARNING
setting COHORT_DEBUG_FILE "/tmp/log.%d"
setting COHORT_DEBUG_FILE "/tmp/log%"
setting COHORT_DEBUG_FILE ""
setting COHORT_DEBUG_SUBSYS nett
setting COHORT_DEBUG_SUBSYS "init,,net"
setting COHORT_DEBUG_SUBSYS "^"
setting COHORT_DEBUG_SUBSYS "all,init"
setting COHORT_DEBUG_SUBSYS "coll"
setting COHORT_RENDEZVOUS udp://x:1
setting COHORT_RENDEZVOUS tcp://host:12abc 12abc
setting COHORT_RENDEZVOUS file:///nonexistent/dir /nonexistent/dir
setting COHORT_JOB_ID "$long" "characters long"
setting COHORT_SECRET ""
setting COHORT_RANK -1
setting COHORT_RANK x
setting COHORT_RANK 0x1
setting COHORT_RANK 16777217
setting COHORT_SIZE 0
setting COHORT_SIZE x
setting COHORT_LOCAL_RANK -1
setting COHORT_LOCAL_RANK 0x0
setting COHORT_LOCAL_SIZE 0
setting COHORT_HOSTID "$long" "characters long"
setting COHORT_TOPO_FILE /nonexistent/topo.xml
setting COHORT_TOPO_FILE /dev/zero "character device"
setting COHORT_TOPO_FILE "$tmp/fifo" "a pipe"
setting COHORT_TOPO_FILE "$tmp/dir" "a directory"
setting COHORT_TOPO_FILE /etc/passwd "/etc/passwd"
setting COHORT_TOPO_DUMP ""
setting COHORT_RENDEZVOUS_SERVER rank1
setting COHORT_RENDEZVOUS_SERVER cohortrun
setting COHORT_HIERARCHICAL sometimes
setting COHORT_HIERARCHICAL 2
setting COHORT_SOCKET_PROBE_MS 10x
setting COHORT_SOCKET_PROBE_MS 0
setting COHORT_SOCKET_PROBE_MS 600001
setting COHORT_UCX_ZCOPY 2
setting COHORT_UCX_ZCOPY yes
setting COHORT_IB_HCA "="
setting COHORT_IB_HCA "^"
setting COHORT_IB_HCA ",,"
setting COHORT_IB_HCA "^=" "'^='"
setting COHORT_IB_HCA "mlx5_0:0"
setting COHORT_IB_HCA "mlx5 0"
setting COHORT_IB_GID_INDEX 1024
setting COHORT_IB_GID_INDEX -1
setting COHORT_IB_GID_INDEX 0x10
setting COHORT_HVD_CHECK 2
setting COHORT_HVD_CHECK yes
setting COHORT_HVD_JOIN_POLL 0
setting COHORT_HVD_JOIN_POLL 61
setting COHORT_HVD_JOIN_POLL 50ms
setting COHORT_CONF /dev/zero "character device"
setting COHORT_CONF "$tmp/fifo" "a pipe"
setting COHORT_CONF "$tmp/dir" "a directory"
setting COHORT_CONF /nonexistent/cohort.conf /nonexistent/cohort.conf
setting COHORT_CONF "$tmp/big" "more than the 1048576"

# every setting of the table: the empty value, and at least one case above
names=$("$INFO" --settings | sed -n 's/^  \(COHORT_[A-Z0-9_]*\) *=.*/\1/p')
[ -n "$names" ] || not_ok "cohort-info --settings listed no setting"
for var in $names; do
    case "$TESTED" in
    *" $var "*) ;;
    *) not_ok "$var has no bad-input case: add its bad values to tests/mp/test_badinput.sh" ;;
    esac
    setting "$var" ""
    [ "$var" = COHORT_CONF ] || setting "$var" "   " "'   '"
done

# ---- cohort-info ------------------------------------------------------------------------------
option "cohort-info --nodes 0x10" "'0x10'" "$INFO" --topology --nodes 0x10
option "cohort-info --nodes 0" "--nodes" "$INFO" --topology --nodes 0
option "cohort-info --ranks-per-node -1" "--ranks-per-node" "$INFO" --topology --ranks-per-node -1
option "cohort-info --map-by diagonal" "'diagonal'" "$INFO" --topology --map-by diagonal
option "cohort-info --topo-file /dev/zero" "/dev/zero" "$INFO" --topology --topo-file /dev/zero
option "cohort-info --topo-file FIFO" "a pipe" "$INFO" --topology --topo-file "$tmp/fifo"
option "cohort-info --nodes (no value)" "--nodes needs a value" "$INFO" --topology --nodes
option "cohort-info --bogus" "'--bogus'" "$INFO" --bogus

# ---- cohort-bench (its options are checked before it needs a job) -----------------------------
option "cohort-bench -b 0x10" "'0x10'" "$BENCH" -b 0x10
option "cohort-bench -b inf" "'inf'" "$BENCH" -b inf
option "cohort-bench -e 1e3" "'1e3'" "$BENCH" -e 1e3
option "cohort-bench -f 1" "'1'" "$BENCH" -f 1
option "cohort-bench -f 0x2" "'0x2'" "$BENCH" -f 0x2
option "cohort-bench -n 0" "'0'" "$BENCH" -n 0
option "cohort-bench -n 010x" "'010x'" "$BENCH" -n 010x
option "cohort-bench -w -1" "'-1'" "$BENCH" -w -1
option "cohort-bench -r -1" "'-1'" "$BENCH" -r -1
option "cohort-bench -a 4" "'4'" "$BENCH" -a 4
option "cohort-bench --check 2" "'2'" "$BENCH" --check 2
option "cohort-bench -z 2" "'2'" "$BENCH" -z 2
option "cohort-bench -c gather" "'gather'" "$BENCH" -c gather
option "cohort-bench -d float128" "'float128'" "$BENCH" -d float128
option "cohort-bench -o mean" "'mean'" "$BENCH" -o mean
option "cohort-bench --mem gpu" "'gpu'" "$BENCH" --mem gpu
option "cohort-bench -b (no value)" "needs a value" "$BENCH" -b
option "cohort-bench --bogus" "'--bogus'" "$BENCH" --bogus
option "cohort-bench --svg --from /dev/zero" "/dev/zero" "$BENCH" --svg "$tmp/o.svg" --from /dev/zero
option "cohort-bench --svg --from FIFO" "$tmp/fifo" "$BENCH" --svg "$tmp/o.svg" --from "$tmp/fifo"
option "cohort-bench --svg --from a directory" "$tmp/dir" "$BENCH" --svg "$tmp/o.svg" --from "$tmp/dir"
option "cohort-bench --svg --from a,,b" "'a,,b' has an empty file name" "$BENCH" --svg "$tmp/o.svg" --from "a,,b"
json='{"coll":"allreduce","results":[{"bytes":8,"dtype":"float32","op":"sum","out_of_place":'
for v in NaN -nan -inf 1e999 0x10 -5; do
    printf '%s{"busbw":%s}}]}\n' "$json" "$v" >"$tmp/r.json"
    option "cohort-bench --svg --from (busbw $v)" "$tmp/r.json" "$BENCH" --svg "$tmp/o.svg" \
        --from "$tmp/r.json"
done

# ---- cohortrun: its numbers and files go through the same parsers ----------------------------
option "cohortrun -np 0x10" "'0x10'" "$COHORTRUN" -np 0x10 "$PROG"
option "cohortrun -np 0" "-np" "$COHORTRUN" -np 0 "$PROG"
option "cohortrun --timeout 0x10" "'0x10'" "$COHORTRUN" --timeout 0x10 -np 1 "$PROG"
option "cohortrun --timeout inf" "'inf'" "$COHORTRUN" --timeout inf -np 1 "$PROG"
option "cohortrun --hostfile /dev/zero" "/dev/zero" "$COHORTRUN" --hostfile /dev/zero -np 1 "$PROG"
option "cohortrun --hostfile FIFO" "$tmp/fifo" "$COHORTRUN" --hostfile "$tmp/fifo" -np 1 "$PROG"
finish
