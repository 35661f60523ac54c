#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Runs every libFuzzer target (tests/fuzz/fuzz_*, built when configure found a FUZZ_CC with
# -fsanitize=fuzzer) for FUZZ_SECONDS (default 15) each, starting from a copy of its committed
# corpus (tests/fuzz/corpus/fuzz_<target>; the tree stays as it is). A crash, sanitizer report,
# leak, harness check failure or an input slower than 30 s fails the case; the log then shows the
# report with its stack and the path of the reproducer, kept in tests/fuzz/artifacts/ of the
# build tree. FUZZ_TARGETS="conf rdv" runs some only; FUZZ_SECONDS=0 skips them all.
# Exits 77 (SKIP) when the fuzzers were not built. See docs/testing.md, "Fuzzing and valgrind".
set -u
. "$top_srcdir/tests/mp/lib.sh"
b=$top_builddir
targets=${FUZZ_TARGETS:-tcp_wire settings hostfile conf rdv ctl}
secs=${FUZZ_SECONDS:-15}
if [ "$secs" = 0 ]; then
    echo "FUZZ_SECONDS=0: fuzzing skipped"
    exit 77
fi
for t in $targets; do
    if [ ! -x "$b/tests/fuzz/fuzz_$t" ]; then
        echo "tests/fuzz/fuzz_$t is not built: configure found no FUZZ_CC with -fsanitize=fuzzer" \
             "(apt-get install clang libclang-rt-14-dev, or see config.log)"
        exit 77
    fi
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
art="$b/tests/fuzz/artifacts"
# abort_on_error: a sanitizer report ends in a crash libFuzzer records; no leak is tolerated.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}abort_on_error=1:detect_leaks=1"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}print_stacktrace=1:halt_on_error=1"

# libFuzzer's own exit codes (77 for a crash, 70 for a timeout) would read as SKIP to automake:
# every outcome is mapped to ok / not ok here.
for t in $targets; do
    mkdir -p "$tmp/$t" "$art/$t"
    cp "$top_srcdir/tests/fuzz/corpus/fuzz_$t"/* "$tmp/$t/"
    start=$(date +%s)
    timeout -k 5 $((secs + 60)) "$b/tests/fuzz/fuzz_$t" -max_total_time="$secs" -timeout=30 \
        -rss_limit_mb=2048 -max_len=4096 -error_exitcode=1 -timeout_exitcode=1 \
        -print_final_stats=1 -artifact_prefix="$art/$t/" "$tmp/$t" >"$tmp/$t.log" 2>&1
    rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$tmp/$t.log")
    cov=$(grep -E '^#[0-9]+' "$tmp/$t.log" | tail -n 1 | grep -oE 'cov: [0-9]+ ft: [0-9]+')
    if [ $rc -eq 0 ]; then
        ok "fuzz_$t: ${runs:-?} inputs in $(( $(date +%s) - start )) s (${cov:-no coverage line})"
        rm -rf "$art/$t"
    else
        not_ok "fuzz_$t (exit $rc after $(( $(date +%s) - start )) s, ${runs:-?} inputs)"
        grep -E 'ERROR: |SUMMARY: |harness check failed|Test unit written to' "$tmp/$t.log" |
            head -n 20 | sed 's/^/    /'
        for f in "$art/$t"/*; do [ -f "$f" ] && echo "    reproducer, kept: $f"; done
        echo "    replay one: $b/tests/fuzz/fuzz_$t FILE (or tests/fuzz/replay_$t FILE)"
        echo "    ---- the last lines of its log:"
        tail -n 60 "$tmp/$t.log" | sed 's/^/    /'
    fi
done
finish
