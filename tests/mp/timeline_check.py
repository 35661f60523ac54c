#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Checks COHORT_TIMELINE files (tests/mp/test_nonblocking.sh).

timeline_check.py FILE...         each file is strict JSON (the job ended normally), and holds
                                  every operation: collective sequence numbers 1..N without a
                                  gap on each communicator's operations track, every request
                                  number 1..M on its requests track
timeline_check.py --crashed FILE  a rank that died: the file lacks only the closing ']', as the
                                  trace viewers accept, and holds events
"""
import json
import re
import sys


def load(path, crashed):
    text = open(path).read()
    if crashed:
        if text.rstrip().endswith("]"):
            sys.exit(f"{path}: ends with ']' although the rank died")
        text = text.rstrip().rstrip(",") + "]"
    return json.loads(text)


def check(path, crashed):
    ev = load(path, crashed)
    if not isinstance(ev, list) or not ev:
        sys.exit(f"{path}: not a non-empty JSON array")
    names = {}
    for e in ev:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            names[e["tid"]] = e["args"]["name"]
    if crashed:
        if not any(e.get("ph") == "X" for e in ev):
            sys.exit(f"{path}: no events")
        return 0
    seqs, reqs = {}, {}
    for e in ev:
        if e.get("ph") != "X":
            continue
        for k in ("name", "ts", "dur", "pid", "tid"):
            if k not in e:
                sys.exit(f"{path}: event without {k}: {e}")
        lane = names.get(e["tid"], "")
        if lane.endswith("operations"):
            m = re.search(r" #(\d+)$", e["name"])
            if m:
                seqs.setdefault(e["tid"], set()).add(int(m.group(1)))
        elif lane.endswith("requests"):
            m = re.search(r" #(\d+)$", e["name"])
            if not m:
                sys.exit(f"{path}: request event without a number: {e}")
            reqs.setdefault(e["tid"], set()).add(int(m.group(1)))
    if not seqs:
        sys.exit(f"{path}: no collective on any operations track")
    for tid, s in list(seqs.items()) + list(reqs.items()):
        want = set(range(1, max(s) + 1))
        if s != want:
            missing = sorted(want - s)[:10]
            sys.exit(f"{path}: {names.get(tid)}: missing numbers {missing}")
    total = sum(len(s) for s in seqs.values())
    nreq = sum(len(s) for s in reqs.values())
    print(f"{path}: {len(ev)} events, {total} collectives, {nreq} requests, all numbered")
    return 0


crashed = len(sys.argv) > 1 and sys.argv[1] == "--crashed"
for p in sys.argv[2 if crashed else 1:]:
    check(p, crashed)
