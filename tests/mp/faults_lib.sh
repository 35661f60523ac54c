# SPDX-License-Identifier: BSD-3-Clause
# Helpers of the fault-injection scripts (tests/mp/test_faults.sh, tests/netns/test_netns_faults.sh),
# sourced after tests/mp/lib.sh.
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
secs() { printf '%d.%03d' $(( $1 / 1000 )) $(( $1 % 1000 )); }   # ms -> "s.mmm"
# wait_files DIR LIMIT_S NAME...: polls (0.05 s) until every DIR/NAME exists; 1 at the deadline
wait_files() {
    _d=$1 _end=$(( $(now_ms) + $2 * 1000 )); shift 2
    while :; do
        _all=1
        for _f in "$@"; do [ -f "$_d/$_f" ] || { _all=0; break; }; done
        [ $_all = 1 ] && return 0
        [ "$(now_ms)" -ge $_end ] && return 1
        sleep 0.05
    done
}
# wait_survivors DIR T0_MS LIMIT_S RANK...: polls until each rank's DIR/rc.<rank> exists or
# LIMIT_S passed since T0_MS; writes DIR/took.<rank>, the milliseconds from T0_MS to when its
# exit status was seen.
wait_survivors() {
    _d=$1 _t0=$2 _end=$(( $2 + $3 * 1000 )); shift 3
    _pending=$*
    while [ -n "$_pending" ] && [ "$(now_ms)" -lt $_end ]; do
        _left=""
        for _r in $_pending; do
            if [ -f "$_d/rc.$_r" ]; then echo $(( $(now_ms) - _t0 )) >"$_d/took.$_r"
            else _left="$_left $_r"; fi
        done
        _pending=$_left
        [ -n "$_pending" ] && sleep 0.05
    done
}
