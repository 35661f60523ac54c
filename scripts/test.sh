#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# README command 2 (what CI runs): installs the dependencies, builds with -Werror and runs the
# whole suite; then runs the shm transport's unit tests under ThreadSanitizer; then builds again
# with AddressSanitizer + UndefinedBehaviorSanitizer and runs the suite again.  SKIP_TSAN=1
# skips the ThreadSanitizer pass, SKIP_SANITIZERS=1 the ASan+UBSan one.
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

if [ "${SKIP_TSAN:-0}" != 1 ]; then
    # ThreadSanitizer over the lock-free code: the shm transport's ring (ring.h) and the node
    # collectives' lanes and slots (coll.c), whose unit tests run them in threads, and the verbs
    # registration cache's unmap log (vb_memev.c: written by whichever thread unmaps, read by the
    # cache's), and the request engine (test_engine: the queue, the progress thread, requests
    # completed from other threads, an abort racing the queue). Only these programs are built
    # (docs/testing.md gives the time it takes). clang: gcc refuses
    # atomic_thread_fence under -fsanitize=thread with -Werror (TSan does not model fences, which
    # could only add false reports, and none has come).
    echo "== ThreadSanitizer: the shm unit tests (ring and node-collective lanes), the verbs unmap log, the request engine"
    tsan="$src/_build-tsan"
    mkdir -p "$tsan"
    (
        cd "$tsan"
        [ -f Makefile ] || "$src/configure" --enable-werror --disable-fuzzers CC=clang \
            CFLAGS="-O1 -g -fsanitize=thread -fno-omit-frame-pointer" \
            LDFLAGS="-fsanitize=thread" >configure.out
        make -j"$(nproc)" tests/unit/test_shm_ring tests/unit/test_shm_coll \
            tests/unit/test_verbs_parts tests/unit/test_engine \
            libcohort-tcp.la >make.out 2>&1 ||   # a communicator, even of one rank, needs a plugin
            { tail -n 60 make.out; exit 1; }
        export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
        export COHORT_RING_STRESS_MSGS=300000   # a third of the default: TSan is slow
        export CK_TIMEOUT_MULTIPLIER=4           # and so are the tests' own deadlines
        export CK_DEFAULT_TIMEOUT=60             # as make check's (Makefile.am): hangs only
        pass=0; fail=0
        for t in test_shm_ring test_shm_coll test_verbs_parts test_engine; do
            if timeout -k 10 900 "tests/unit/$t" >"$t.tsan.log" 2>&1; then
                echo "PASS: tsan $t"; pass=$((pass + 1))
            else
                echo "FAIL: tsan $t"; fail=$((fail + 1)); tail -n 80 "$t.tsan.log"
            fi
        done
        printf '# PASS: %d\n# FAIL: %d\n' "$pass" "$fail" >check.out
        sed "s/^/[tsan] /" check.out
        [ "$fail" -eq 0 ]
    )
    echo "== with the TSan pass: $(( $(date +%s) - start )) s"
fi

if [ "${SKIP_SANITIZERS:-0}" != 1 ]; then
    echo "== build with ASan+UBSan and test again"
    # intercept_tls_get_addr=0: GCC 12's sanitizer runtime can take a thread's dynamic TLS
    # block for a pre-2.25 glibc header and crash LeakSanitizer's tracer at exit ("Tracer
    # caught signal 11"; google/sanitizers#1322); seen with UCX's async thread alive at exit.
    export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:halt_on_error=1:intercept_tls_get_addr=0
    export LSAN_OPTIONS="suppressions=$src/tests/lsan.supp"
    export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    # tests/fuzz's libFuzzer targets are built by FUZZ_CC with their own sanitizer flags, the same
    # in both passes: they ran in the plain pass, so this one neither builds nor runs them
    # (test_fuzz.sh: SKIP). Their corpus replays (test_replay.sh) use this pass's CFLAGS and run.
    export FUZZ_SECONDS=0
    # --disable-torch: an ASan-built libcohort cannot be loaded by Debian's (uninstrumented)
    # Python without preloading ASan's runtime under torch; the backend's tests ran in the
    # plain pass (docs/testing.md).
    bash "$src/scripts/build.sh" "$src/_build-asan" --disable-fuzzers --disable-torch \
        CFLAGS="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" \
        LDFLAGS="-fsanitize=address,undefined"
    run_suite "$src/_build-asan" asan+ubsan
    echo "== both passes took $(( $(date +%s) - start )) s"
fi
# One closing line over both passes (automake's per-test verdicts).
pass=0; fail=0
for f in "$src"/_build-ci/check.out "$src"/_build-tsan/check.out "$src"/_build-asan/check.out; do
    [ -f "$f" ] || continue
    p=$(sed -n 's/^# PASS: *//p' "$f" | head -n1); x=$(sed -n 's/^# FAIL: *//p' "$f" | head -n1)
    e=$(sed -n 's/^# ERROR: *//p' "$f" | head -n1)
    pass=$((pass + ${p:-0})); fail=$((fail + ${x:-0} + ${e:-0}))
done
echo "tests: $pass passed, $fail failed"
