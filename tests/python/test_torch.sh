#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The PyTorch backend through the real torch (Debian's python3-torch), every rank launched by
# cohortrun: every operation and dtype at np 1-4 (pg_check.py), process groups freed with work
# in flight (pg_free.py), a rank killed mid-training
# (dead_rank.py), the Horovod-style API (hvd_check.py), the digits example with DDP and with
# the Horovod-style optimizer (identical parameters on every rank, accuracy reached), and the
# timeline naming each gradient.
. "$top_srcdir/tests/mp/lib.sh"
PY=${COHORT_TEST_PYTHON:-/usr/bin/python3}
export PYTHONPATH="$top_builddir/python-stage${PYTHONPATH:+:$PYTHONPATH}"
export OMP_NUM_THREADS=1          # ranks share two cores
T="$top_srcdir/tests/python"
EX="$top_srcdir/examples/python/train_digits.py"
SELF="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"   # its cases below run it again

# A rank killed by SIGKILL at step 5 of DDP training: each other rank's Work fails with an
# exception naming it, well within the 60 s timeout (the job control channel and the shm
# transport both notice a death at once).
dead_case() {
    transports=$1 n=$2 victim=$3
    out=$(COHORT_TRANSPORTS=$transports timeout -k 5 300 "$COHORTRUN" -np "$n" \
          "$PY" "$T/dead_rank.py" "$victim" 2>&1)
    rc=$?
    caught=$(grep -c "caught after" <<<"$out")
    named=$(grep "caught after" <<<"$out" | grep -c "rank $victim")
    late=$(grep "caught after" <<<"$out" | awk '{ if ($5 + 0 >= 60) print }' | wc -l)
    if [ "$rc" -ne 0 ] && [ "$caught" -eq $((n - 1)) ] && [ "$named" -eq $((n - 1)) ] &&
       [ "$late" -eq 0 ]; then
        return 0
    fi
    echo "exit $rc, $caught of $((n - 1)) ranks caught an error, $named named rank $victim," \
         "$late after the timeout:"
    echo "$out" | tail -n 30
    return 1
}
[ "${1:-}" = dead_case ] && { shift; dead_case "$@"; exit; }

# The timeline names each gradient's allreduce (the Horovod-style optimizer names them).
timeline_case() {
    cd "$(mktemp -d)" || return 1
    trap 'rm -rf "$PWD"' EXIT
    COHORT_TIMELINE="$PWD/tl-%r.json" "$COHORTRUN" -np 2 "$PY" "$EX" --api hvd \
        --backend cohort --epochs 1 || return 1
    "$PY" - "$PWD/tl-0.json" <<'PYEOF'
import json, sys
events = json.load(open(sys.argv[1]))
names = {e["name"] for e in events if e.get("ph") == "X"}
grads = sorted(n for n in names if n.startswith("allreduce."))
assert grads, f"no gradient named in the timeline; names: {sorted(names)[:20]}"
print("named gradients:", ", ".join(grads[:6]))
PYEOF
}
[ "${1:-}" = timeline_case ] && { shift; timeline_case; exit; }

cd "$(mktemp -d)" || exit 1
trap 'rm -rf "$PWD"' EXIT
for n in 1 2 3 4; do
    run_case "pg_check: every operation, dtype and op at np $n" \
        "$COHORTRUN" -np "$n" "$PY" "$T/pg_check.py"
done
run_case "process groups freed with work in flight hold no GIL while they wait (np 2)" \
    timeout -k 5 120 "$COHORTRUN" -np 2 "$PY" "$T/pg_free.py" 20
# torch's own launcher: the default group is then made through torch's store (above, cohortrun
# runs join the job's rendezvous instead)
run_case "pg_check under torch.distributed.run, np 2 (groups made through the c10d store)" \
    "$PY" -m torch.distributed.run --nproc_per_node 2 -r 2 -t 2 --master_port "$(free_port)" \
    "$T/pg_check.py"
run_case "a rank killed mid-training (shm, np 3): the others get an error naming it" \
    "$SELF" dead_case shm,tcp 3 1
run_case "a rank killed mid-training (tcp, np 3): the others get an error naming it" \
    "$SELF" dead_case tcp 3 2
for n in 1 2 3; do
    run_case "Horovod-style API at np $n" env HVD_TEST_BACKEND=cohort \
        "$COHORTRUN" -np "$n" "$PY" "$T/hvd_check.py"
done
run_case "digits example, DDP over cohort, np 2: same parameters everywhere, accuracy" \
    "$COHORTRUN" -np 2 "$PY" "$EX" --api ddp --backend cohort --check
run_case "digits example, Horovod-style with fp16 compression, np 3" \
    "$COHORTRUN" -np 3 "$PY" "$EX" --api hvd --backend cohort --compression fp16 --check
run_case "timeline: each gradient's allreduce under its name" "$SELF" timeline_case
finish
