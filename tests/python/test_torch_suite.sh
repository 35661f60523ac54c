#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# PyTorch's own distributed test suite (torch.testing._internal.distributed.distributed_test,
# shipped with Debian's python3-torch) with BACKEND=cohort at world size 2: every case that passes
# with gloo (tests/python/torch_suite/gloo-pass-ws2.txt, measured with the same driver) must pass
# with cohort, but those in differences.txt (each with its reason), and no other case may fail or
# error (run.sh checks that). docs/testing.md has both backends' counts.
. "$top_srcdir/tests/mp/lib.sh"
S="$top_srcdir/tests/python/torch_suite"
export TORCH_SUITE_PLAIN_DDP=1      # DDP's cases run (run_suite.py says why it is needed)
export TORCH_SUITE_ALLOW="$S/differences.txt"
export OMP_NUM_THREADS=1

if [ "${1:-}" = suite_case ]; then
    out=$(mktemp -d)
    trap 'rm -rf "$out"' EXIT
    sh "$S/run.sh" cohort 2 "$out" || exit 1
    missing=0
    while read -r name; do
        case $name in ''|'#'*) continue ;; esac
        grep -q "^$name " "$S/differences.txt" && continue
        if ! grep -qE "^$name +PASS" "$out/cohort-ws2.txt"; then
            echo "passes with gloo, not with cohort: $(grep -E "^$name " "$out/cohort-ws2.txt")"
            missing=$((missing + 1))
        fi
    done < "$S/gloo-pass-ws2.txt"
    [ "$missing" -eq 0 ]
    exit
fi
SELF="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
CASE_TIMEOUT=3000 run_case "PyTorch's distributed suite, BACKEND=cohort, world size 2" \
    "$SELF" suite_case
finish
