#!/usr/bin/env bash
# README command 2 (what CI runs): installs the dependencies, builds with -Werror and runs the
# whole suite; then builds again with AddressSanitizer + UndefinedBehaviorSanitizer and runs the
# suite again.  SKIP_SANITIZERS=1 skips the second pass.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
bash "$src/scripts/deps.sh"
start=$(date +%s)

run_suite() {   # dir label
    cd "$1"
    if make -j"$(nproc)" check >check.out 2>&1; then rc=0; else rc=$?; fi
    # show every test's verdict and each failed test's log
    grep -E '^(PASS|FAIL|XFAIL|XPASS|ERROR|SKIP):' check.out || true
    for log in $(grep -lE '^:test-result: (FAIL|ERROR)' $(find . -name '*.trs') 2>/dev/null | sed 's/\.trs$/.log/'); do
        echo "---- $log"; tail -n 80 "$log"
    done
    grep -E '^# (TOTAL|PASS|FAIL|ERROR|SKIP|XFAIL|XPASS):' check.out | sed "s/^/[$2] /"
    cd - >/dev/null
    return $rc
}

echo "== build (-Werror) and test"
bash "$src/scripts/build.sh" "$src/_build-ci"
run_suite "$src/_build-ci" plain
echo "== plain pass took $(( $(date +%s) - start )) s"

if [ "${SKIP_SANITIZERS:-0}" != 1 ]; then
    echo "== build with ASan+UBSan and test again"
    export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:halt_on_error=1
    export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    # tests/fuzz's libFuzzer targets are built by FUZZ_CC with their own sanitizer flags, the same
    # in both passes: they ran in the plain pass, so this one neither builds nor runs them
    # (test_fuzz.sh: SKIP). Their corpus replays (test_replay.sh) use this pass's CFLAGS and run.
    export FUZZ_SECONDS=0
    bash "$src/scripts/build.sh" "$src/_build-asan" --disable-fuzzers \
        CFLAGS="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" \
        LDFLAGS="-fsanitize=address,undefined"
    run_suite "$src/_build-asan" asan+ubsan
    echo "== both passes took $(( $(date +%s) - start )) s"
fi
# One closing line over both passes (automake's per-test verdicts).
pass=0; fail=0
for f in "$src"/_build-ci/check.out "$src"/_build-asan/check.out; do
    [ -f "$f" ] || continue
    p=$(sed -n 's/^# PASS: *//p' "$f" | head -n1); x=$(sed -n 's/^# FAIL: *//p' "$f" | head -n1)
    e=$(sed -n 's/^# ERROR: *//p' "$f" | head -n1)
    pass=$((pass + ${p:-0})); fail=$((fail + ${x:-0} + ${e:-0}))
done
echo "tests: $pass passed, $fail failed"
