#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Runs PyTorch's distributed test suite against one backend and tables the outcome per case.
#
#   run.sh BACKEND WORLD_SIZE OUTDIR     -> OUTDIR/BACKEND-wsN.txt (table), OUTDIR/BACKEND-wsN.log (raw)
#
# Environment:
#   top_builddir        the build tree whose python-stage/ holds cohort.torch (default: _build)
#   TORCH_SUITE_ALLOW   allow-list ("<test name> <why>" a line) of FAIL/ERROR cases that do not count,
#                       e.g. allow-debian12.txt here
#   CASE_TIMEOUT        seconds per case (default 300, the suite's own default); the suite then
#                       kills the ranks and reports "Process N terminated or timed out"
#   RUN_TIMEOUT         seconds for the whole run (default 7200), a guard against the parent hanging
#   TORCH_SUITE_ARGS    extra arguments for run_suite.py (e.g. test names, -k PATTERN, -f)
#   TORCH_SUITE_PLAIN_DDP=1  DDP without ReplicatedTensor (see run_suite.py), so that the CPU DDP
#                       cases run under Python 3.11 instead of failing to import torch's _shard
# Exit status: 0 when every FAIL/ERROR is allowed and the run finished, non-zero otherwise.
set -u
[ $# -eq 3 ] || { echo "usage: $0 BACKEND WORLD_SIZE OUTDIR" >&2; exit 2; }
backend=$1 ws=$2 outdir=$3
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
py=/usr/bin/python3            # Debian's python3-torch lives only there
mkdir -p "$outdir"
table=$outdir/$backend-ws$ws.txt log=$outdir/$backend-ws$ws.log

# Everything the suite leaves in $TMPDIR (per-case init files it never deletes, its TEMP_DIR)
# goes into one directory removed at the end, also when killed.
tmp=$(mktemp -d "${TMPDIR:-/tmp}/torch-suite-$backend-ws$ws.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM HUP

export TMPDIR=$tmp BACKEND=$backend WORLD_SIZE=$ws TEMP_DIR=$tmp
# cohort.torch as the build stages it (as tests/python/test_torch.sh finds it)
export PYTHONPATH=${top_builddir:-$root/_build}/python-stage${PYTHONPATH:+:$PYTHONPATH}
export DISTRIBUTED_TESTS_DEFAULT_TIMEOUT=${CASE_TIMEOUT:-300}
# Ranks write their log lines line by line rather than in blocks in the middle of ours.
export PYTHONUNBUFFERED=1
# No __pycache__ of the expecttest stand-in left in the source tree.
export PYTHONDONTWRITEBYTECODE=1
# The suite decides at import (in the parent) whether test_barrier_timeout_global may run, from
# INIT_METHOD; its setUp then points INIT_METHOD at a per-case file, as torch's run_test.py does.
export INIT_METHOD=file://$tmp/init
# Under Sandcastle the suite turns skips into passes; never here.
unset SANDCASTLE TW_JOB_USER

"$py" "$here/run_suite.py" --list > "$tmp/cases" || exit 2
start=$(date +%s)
# timeout signals its whole process group, spawned ranks included.
timeout --kill-after=60 "${RUN_TIMEOUT:-7200}" \
    "$py" "$here/run_suite.py" ${TORCH_SUITE_ARGS:-} > "$log" 2>&1
rc=$?
secs=$(( $(date +%s) - start ))
echo "# run_suite.py exit $rc after $secs s (backend $backend, world size $ws)" >> "$log"
# With TORCH_SUITE_ARGS selecting cases, not every listed case is expected.
expect=; [ -z "${TORCH_SUITE_ARGS:-}" ] && expect="--expect $tmp/cases"
"$py" "$here/summarize.py" "$log" $expect ${TORCH_SUITE_ALLOW:+--allow "$TORCH_SUITE_ALLOW"} > "$table"
st=$?
tail -n 1 "$table"
echo "$backend ws$ws: $secs s, run_suite.py exit $rc, table $table"
[ $rc -eq 124 ] || [ $rc -eq 137 ] && { echo "run stopped by RUN_TIMEOUT" >&2; exit 1; }
exit $st
