#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Bad settings are errors, never silently ignored: cohortrun -np 1 and -np 2 with one bad
# COHORT_* value (or a bad cohort.conf) must fail, and the output must name the variable and the
# bad text (or the file, the line and its text). Good values of the same settings must pass, so
# that the checks are not simply refusing everything.
. "$top_srcdir/tests/mp/lib.sh"
PROG="$top_builddir/examples/allreduce"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM
# no cohort.conf of the directory make runs in, and none of the caller's COHORT_* settings
cd "$tmp" || exit 1
for v in $(env | sed -n 's/^\(COHORT_[A-Z_]*\)=.*/\1/p'); do unset "$v"; done
export COHORT_TIMEOUT=60

# bad NP VAR VALUE [TEXT]: cohortrun -np NP with VAR=VALUE fails within 60 s, and its output
# names VAR and TEXT (default: VALUE; '' for an empty value).
bad() {
    np=$1 var=$2 val=$3 text=${4-$3}
    [ -n "$text" ] || text="''"
    if timeout -k 5 60 env "$var=$val" "$COHORTRUN" -np "$np" "$PROG" >"$tmp/out" 2>&1; then
        not_ok "np=$np $var='$val' was accepted"; tail -n 5 "$tmp/out"
    elif ! grep -F -- "$var" "$tmp/out" | grep -qF -- "$text"; then
        not_ok "np=$np $var='$val': no line naming $var and '$text'"; tail -n 5 "$tmp/out"
    else
        ok "np=$np $var='$(echo "$val" | cut -c1-24)' refused: $(grep -F -- "$var" "$tmp/out" | grep -F -- "$text" |
            head -n 1 | sed 's/^[^ ]* //' | cut -c1-110)"
    fi
}

long=$(printf '%0200d' 0)
for np in 1 2; do
    bad $np COHORT_CHUNK_SIZE 12abc
    bad $np COHORT_CHUNK_SIZE ""
    bad $np COHORT_SPIN -1
    bad $np COHORT_SPIN_US 1e999
    bad $np COHORT_SOCKET_NSOCKS 99999999999999999999
    bad $np COHORT_SOCKET_PROBE_MS 10x
    bad $np COHORT_SOCKET_IFNAME =nosuchif0
    bad $np COHORT_SOCKET_IFNAME "eth,,lo"
    bad $np COHORT_ALGO allreduce:nosuch
    bad $np COHORT_ALGO "allreduce:ring;"
    bad $np COHORT_TRANSPORTS nosuch
    bad $np COHORT_TRANSPORTS "shm,,tcp"
    bad $np COHORT_DEBUG LOUD
    bad $np COHORT_DEBUG_SUBSYS "init,,net"
    bad $np COHORT_DEBUG_FILE "$tmp/log.%x" "'%x' is not one of"
    bad $np COHORT_DEBUG_FILE "$tmp/log%" "a '%' ends it"
    bad $np COHORT_HIERARCHICAL sometimes
    bad $np COHORT_SHM_CMA 7
    bad $np COHORT_SHM_SEGMENT_SIZE 1k
    bad $np COHORT_SHM_EAGER_LIMIT -5
    bad $np COHORT_SHM_EAGER_LIMIT 4294967296
    bad $np COHORT_SHM_COLL_CHUNK 12
    bad $np COHORT_SHM_STREAM 3
    bad $np COHORT_PLUGIN_PATH /nonexistent/dir
    bad $np COHORT_TOPO_FILE /nonexistent/topo.xml
    bad $np COHORT_HOSTID "$long" "characters long"
    bad $np COHORT_TIMEOUT 5s
done

# cohort.conf: the file, the line and its text are named
conf() {   # NAME PATTERN TEXT
    printf '%b' "$3" >"$tmp/cohort.conf"
    if timeout -k 5 60 env COHORT_CONF="$tmp/cohort.conf" "$COHORTRUN" -np 2 "$PROG" \
        >"$tmp/out" 2>&1; then
        not_ok "$1: accepted"; tail -n 5 "$tmp/out"
    elif grep -qF -- "$2" "$tmp/out"; then
        ok "$1: $(grep -F -- "$2" "$tmp/out" | head -n 1 | sed 's/^[^ ]* //' | cut -c1-110)"
    else
        not_ok "$1: no line with '$2'"; tail -n 5 "$tmp/out"
    fi
}
conf "cohort.conf line that is not NAME = value" "$tmp/cohort.conf:2: 'COHORT_SPIN 5' is not NAME = value" \
    '# settings\nCOHORT_SPIN 5\n'
conf "cohort.conf unknown setting" "$tmp/cohort.conf:1: 'COHORT_SPINN' is not a setting" 'COHORT_SPINN = 5\n'
conf "cohort.conf bad value" "COHORT_CHUNK_SIZE: '64x' is not a number in [64, 1073741824] (set in $tmp/cohort.conf, line 2)" \
    'COHORT_SPIN = 5\nCOHORT_CHUNK_SIZE = 64x\n'
if timeout -k 5 60 env COHORT_CONF="$tmp/none.conf" "$COHORTRUN" -np 2 "$PROG" >"$tmp/out" 2>&1; then
    not_ok "COHORT_CONF naming a missing file: accepted"
elif grep -qF "COHORT_CONF='$tmp/none.conf' cannot be opened" "$tmp/out"; then
    ok "COHORT_CONF naming a missing file refused"
else
    not_ok "COHORT_CONF naming a missing file: no message"; tail -n 5 "$tmp/out"
fi

# the same settings with good values, environment and file: the job runs
printf 'COHORT_SPIN = 50   # polls\nCOHORT_SHM_CMA = 0\n\n' >"$tmp/cohort.conf"
run_case "good values of the same settings pass (np=2)" \
    env COHORT_CONF="$tmp/cohort.conf" COHORT_CHUNK_SIZE=4096 COHORT_SPIN_US=100 \
    COHORT_SOCKET_NSOCKS=3 COHORT_SOCKET_PROBE_MS=500 COHORT_SOCKET_IFNAME=lo \
    COHORT_ALGO="allreduce:ring;broadcast:tree" COHORT_TRANSPORTS=tcp,shm COHORT_DEBUG=warn \
    COHORT_DEBUG_SUBSYS="^init,net" COHORT_HIERARCHICAL=0 COHORT_SHM_SEGMENT_SIZE=131072 \
    COHORT_SHM_EAGER_LIMIT=0 COHORT_SHM_COLL_CHUNK=0 COHORT_PLUGIN_PATH="$tmp" \
    COHORT_HOSTID=node-a sh -c '"$0" -np 2 "$1" | grep -qx "mean of ranks = 0.5"' "$COHORTRUN" "$PROG"
# A transport's own setting (its plugin's table) is checked before that plugin is loaded: a
# single rank loads none, yet a bad value in cohort.conf fails naming the file, the line and the
# transport; a COHORT_* variable that no table holds is a WARN naming the setting it is a typo
# of, and the job runs (a name near none, a test harness's, is an INFO line only).
printf 'COHORT_SHM_STREAM = 2\nCOHORT_SOCKET_NSOCKS = 17\n' >"$tmp/plug.conf"
run_case "a transport's setting in cohort.conf, np=1: refused naming the file, line and range" sh -c '
    if COHORT_CONF="$2/plug.conf" "$0" -np 1 "$1" >"$2/out" 2>&1; then cat "$2/out"; exit 1; fi
    grep -q "COHORT_SOCKET_NSOCKS: .17. is out of range.*(set in $2/plug.conf, line 2)" "$2/out" ||
        { cat "$2/out"; exit 1; }' "$COHORTRUN" "$PROG" "$tmp"
run_case "COHORT_SHM_SEGMENT_SZE (a typo): one WARN per rank naming the setting meant, the job runs (np=2)" sh -c '
    COHORT_SHM_SEGMENT_SZE=65536 COHORT_MY_HARNESS_FLAG=1 "$0" -np 2 "$1" >"$2/out" 2>&1 ||
        { cat "$2/out"; exit 1; }
    grep -qx "mean of ranks = 0.5" "$2/out" || { cat "$2/out"; exit 1; }
    n=$(grep -c "cohort WARN init: COHORT_SHM_SEGMENT_SZE is set but is no setting: ignored; did you mean COHORT_SHM_SEGMENT_SIZE?" "$2/out")
    [ "$n" = 2 ] || { echo "$n WARN lines, want 2:"; cat "$2/out"; exit 1; }
    if grep -q "WARN.*COHORT_MY_HARNESS_FLAG" "$2/out"; then cat "$2/out"; exit 1; fi' "$COHORTRUN" "$PROG" "$tmp"
# COHORT_DEBUG_FILE: one file per rank (%r), named with the host (%h) and pid (%p); every line
# is the rank's own with the host:pid:tid prefix, none of them on the terminal; a directory that
# does not exist: one WARN on stderr naming the file, the lines go to stderr, the job runs.
run_case "COHORT_DEBUG_FILE=.../log.%h.%p.%r: one file per rank, its lines only there (np=2)" sh -c '
    mkdir "$2/logs" || exit 1
    COHORT_DEBUG=INFO COHORT_DEBUG_FILE="$2/logs/log.%h.%p.%r" "$0" -np 2 "$1" >"$2/out" 2>&1 ||
        { cat "$2/out"; exit 1; }
    grep -qx "mean of ranks = 0.5" "$2/out" || { cat "$2/out"; exit 1; }
    if grep -q "\[[01]\] cohort " "$2/out"; then
        echo "a rank logged on the terminal:"; grep "\[[01]\] cohort" "$2/out" | head -n 3; exit 1; fi
    host=$(hostname | cut -d. -f1)
    for r in 0 1; do
        f=$(ls "$2/logs" | grep -E "^log\.$host\.[0-9]+\.$r\$") || { ls "$2/logs"; exit 1; }
        pid=$(echo "$f" | cut -d. -f3)
        [ -s "$2/logs/$f" ] || { echo "$f is empty"; exit 1; }
        bad=$(grep -cvE "^$host:$pid:[0-9]+ \[$r\] cohort (INFO|WARN|TRACE) " "$2/logs/$f")
        [ "$bad" = 0 ] || { echo "$f: $bad lines not of rank $r, pid $pid:"; grep -vE "^$host:$pid:[0-9]+ \[$r\] cohort" "$2/logs/$f" | head -n 3; exit 1; }
        echo "    $f: $(wc -l <"$2/logs/$f") lines"
    done' "$COHORTRUN" "$PROG" "$tmp"
run_case "COHORT_DEBUG_FILE in a directory that does not exist: a WARN naming it, the log on stderr" sh -c '
    COHORT_DEBUG=INFO COHORT_DEBUG_FILE=/nonexistent/dir/log.%r "$0" -np 2 "$1" >"$2/out" 2>&1 ||
        { cat "$2/out"; exit 1; }
    grep -qx "mean of ranks = 0.5" "$2/out" &&
    grep -q "cohort WARN init: COHORT_DEBUG_FILE: cannot open ./nonexistent/dir/log\.[01].: No such file or directory" "$2/out" &&
    grep -q "\[1\] cohort INFO" "$2/out" || { cat "$2/out"; exit 1; }' "$COHORTRUN" "$PROG" "$tmp"
finish
