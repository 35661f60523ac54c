#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The fuzz targets without libFuzzer (tests/fuzz/replay_*: replay.c's main): every file of the
# committed corpus (tests/fuzz/corpus/fuzz_<target>) and every seed make_corpus writes today goes
# through its target once. Built by the configured compiler, so this runs in the -Werror pass and
# in the ASan+UBSan pass of CI. Then, when valgrind is installed and the build is not a
# sanitizer build (the two do not mix), the same replays and the parsers' unit tests
# (test_parse, test_tcp_wire: Check, in-process with CK_FORK=no) run under valgrind memcheck,
# where any error or definite leak fails the case. See docs/testing.md, "Fuzzing and valgrind".
set -u
. "$top_srcdir/tests/mp/lib.sh"
CASE_TIMEOUT=${REPLAY_TIMEOUT:-300}
b=$top_builddir
corpus=$top_srcdir/tests/fuzz/corpus
targets="tcp_wire settings hostfile conf rdv ctl"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

run_case "make_corpus writes every seed" "$b/tests/fuzz/make_corpus" "$tmp/gen"
for t in $targets; do
    [ -d "$corpus/fuzz_$t" ] && [ -n "$(ls "$corpus/fuzz_$t")" ] ||
        not_ok "no committed corpus in $corpus/fuzz_$t"
    set -- "$corpus/fuzz_$t"
    [ -d "$tmp/gen/fuzz_$t" ] && set -- "$@" "$tmp/gen/fuzz_$t"
    run_case "replay fuzz_$t ($(find "$@" -type f | wc -l) inputs)" "$b/tests/fuzz/replay_$t" "$@"
done

# ---- valgrind memcheck -----------------------------------------------------------------------
lt="$b/libtool --mode=execute"
if ! command -v valgrind >/dev/null 2>&1; then
    echo "# valgrind is not installed (apt-get install valgrind): memcheck cases skipped"
elif $lt ldd "$b/tests/fuzz/replay_conf" 2>/dev/null | grep -Eq 'lib(a|ub|t)san'; then
    echo "# sanitizer build: valgrind cannot run it; memcheck cases run in the plain build"
else
    vg="valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite"
    vg="$vg --track-fds=no --child-silent-after-fork=yes"
    for t in $targets; do
        run_case "valgrind replay fuzz_$t" $lt $vg "$b/tests/fuzz/replay_$t" "$corpus/fuzz_$t"
    done
    for u in test_parse test_tcp_wire; do
        if [ -x "$b/tests/unit/$u" ]; then
            run_case "valgrind $u" env CK_FORK=no $lt $vg "$b/tests/unit/$u"
        else
            echo "# tests/unit/$u not built (no Check): its memcheck case skipped"
        fi
    done
fi
finish
