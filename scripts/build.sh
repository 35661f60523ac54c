#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# build.sh BUILD_DIR [configure args...]: configures (out of tree) and builds cohort.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
dir=$1; shift
mkdir -p "$dir"
if [ ! -x "$src/configure" ]; then
    (cd "$src" && mkdir -p m4 && autoreconf -fi) >"$dir/autoreconf.out" 2>&1 ||
        { cat "$dir/autoreconf.out"; exit 1; }
fi
cd "$dir"
[ -f Makefile ] || "$src/configure" --enable-werror "$@" >configure.out
make -j"$(nproc)" >make.out 2>&1 || { tail -n 60 make.out; exit 1; }
make -j"$(nproc)" check TESTS= >>make.out 2>&1 || { tail -n 60 make.out; exit 1; }
