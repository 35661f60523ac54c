#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# README command 1: installs the dependencies, builds cohort, and runs a 4-rank allreduce sweep
# with cohortrun and cohort-bench on this machine (ranks on one machine talk through shared
# memory; add COHORT_TRANSPORTS=tcp to compare with loopback TCP).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
bash "$src/scripts/deps.sh"
bash "$src/scripts/build.sh" "$src/_build"
cd "$src/_build"
echo "== cohort-info --plugins"
./tools/cohort-info --plugins
echo "== cohortrun -np 4 cohort-bench -c allreduce -b 8 -e 64M -f 2"
./tools/cohortrun -np 4 ./bench/cohort-bench -c allreduce -b 8 -e 64M -f 2 "$@"
