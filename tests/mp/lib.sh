# SPDX-License-Identifier: BSD-3-Clause
# Shared helpers for the multi-process test scripts (sourced). Counts cases and prints the
# closing "N passed, N failed" line that CI reads.
: "${top_builddir:?run through make check (AM_TESTS_ENVIRONMENT sets top_builddir)}"
COHORTRUN="$top_builddir/tools/cohortrun"
T_PASSED=0
T_FAILED=0
# Generous per-case deadlines: a hang fails the case instead of stalling CI.
: "${CASE_TIMEOUT:=600}"
export COHORT_TIMEOUT="${COHORT_TIMEOUT:-120}"

ok() { T_PASSED=$((T_PASSED + 1)); echo "ok - $*"; }
not_ok() { T_FAILED=$((T_FAILED + 1)); echo "not ok - $*"; }

# run_case NAME CMD...: passes when CMD exits 0 within CASE_TIMEOUT; shows its output on failure.
# The command runs in the background under `wait`: a shell runs its traps only once a foreground
# command ends, while `wait` returns at once on a signal, so a script's SIGTERM/SIGINT trap
# (tests/netns cleans up its namespaces there) runs without waiting for the case.
run_case() {
    name=$1; shift
    out=$(mktemp)
    start=$(date +%s)
    timeout -k 5 "$CASE_TIMEOUT" "$@" >"$out" 2>&1 &
    if wait $!; then
        ok "$name ($(( $(date +%s) - start )) s)"
        grep -E "passed, .* failed" "$out" | sed 's/^/    /'
    else
        rc=$?
        not_ok "$name (exit $rc after $(( $(date +%s) - start )) s)"
        tail -n 40 "$out" | sed 's/^/    /'
    fi
    rm -f "$out"
}

# A port P with P and P+1 free, below the kernel's ephemeral range (32768-60999 by default):
# a port the kernel handed out would be taken again at once by the many outgoing connections of
# the tests running beside this one.
free_port() {
    python3 -c '
import random, socket
for _ in range(200):
    p = random.randrange(20000, 32000)
    try:
        for q in (p, p + 1):
            s = socket.socket(); s.bind(("0.0.0.0", q)); s.close()
        print(p); break
    except OSError:
        pass'
}

finish() {
    echo "$T_PASSED passed, $T_FAILED failed"
    [ "$T_FAILED" -eq 0 ]
}
