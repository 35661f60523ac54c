#!/usr/bin/env bash
# build.sh BUILD_DIR [configure args...]: configures (out of tree) and builds cohort.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
dir=$1; shift
[ -x "$src/configure" ] || (cd "$src" && autoreconf -fi >/dev/null)
mkdir -p "$dir"
cd "$dir"
[ -f Makefile ] || "$src/configure" --enable-werror "$@" >configure.out
make -j"$(nproc)" >make.out 2>&1 || { tail -n 60 make.out; exit 1; }
make -j"$(nproc)" check TESTS= >>make.out 2>&1 || { tail -n 60 make.out; exit 1; }
