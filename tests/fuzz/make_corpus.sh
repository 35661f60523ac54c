#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# make_corpus.sh [BUILD_DIR]: rewrites the seeds of the committed fuzz corpus
# (tests/fuzz/corpus/fuzz_<target>/seed-*) with BUILD_DIR/tests/fuzz/make_corpus (default
# BUILD_DIR: the current directory; `make check TESTS=` builds it). Inputs that fuzzing found
# (found-*) are kept. The rendezvous seeds hold real hellos, whose nonce and MAC change on every
# run: commit those only when something else changed.
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-.}
gen="$build/tests/fuzz/make_corpus"
if [ ! -x "$gen" ]; then
    echo "make_corpus.sh: $gen is not built (make check TESTS= in $build builds it)" >&2
    exit 1
fi
rm -f "$src"/tests/fuzz/corpus/fuzz_*/seed-*
"$gen" "$src/tests/fuzz/corpus"
for d in "$src"/tests/fuzz/corpus/fuzz_*; do
    echo "$(basename "$d"): $(ls "$d" | grep -c .) files, $(cat "$d"/* | wc -c) bytes"
done
