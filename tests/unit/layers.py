#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Which of the core's object files call which (docs/design.md, "Calls go down only").

Reads `nm` of libcohort-core.a (one member per object), draws an edge from each object to the
objects that define the symbols it leaves undefined, and checks:
  - the cycles (strongly connected components of two or more objects) are only those the
    design allows, each for its reason: {config, log, parse} and {api, bootstrap, comm,
    comm_create};
  - an algorithm (a member of core/coll/ other than select) calls only the layers below it.
Prints every edge of a cycle it refuses, so the call that closed it is easy to find."""
import subprocess
import sys

ALLOWED_CYCLES = [
    {"config", "log", "parse"},      # the settings table logs; the log reads its settings
    # creating a communicator runs an allgather on its parent, and the hierarchy's node groups
    # are splits of the communicator being created
    {"api", "bootstrap", "comm", "comm_create"},
]
ALGO_MAY_CALL = {"p2p", "reduce", "comm_view", "log", "ring_step", "desc"}
NOT_ALGOS = {"select"}


def members(archive):
    out = subprocess.run(["nm", archive], capture_output=True, text=True, check=True).stdout
    defs, undefs, cur = {}, {}, None
    for line in out.splitlines():
        if line.endswith(".o:"):
            cur = line[:-3].replace("libcohort_core_la-", "")
            defs[cur], undefs[cur] = set(), set()
            continue
        p = line.split()
        if cur is None:
            continue
        if len(p) == 3 and p[1] in "TDBRVW":
            defs[cur].add(p[2])
        elif len(p) == 2 and p[0] == "U":
            undefs[cur].add(p[1])
    return defs, undefs


def sccs(graph):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            out.append(comp)

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return out


def main():
    builddir, srcdir = sys.argv[1], sys.argv[2]
    defs, undefs = members(builddir + "/.libs/libcohort-core.a")
    owner = {s: n for n, d in defs.items() for s in d}
    graph = {n: {owner[s] for s in u if s in owner and owner[s] != n} for n, u in undefs.items()}
    bad = 0
    for comp in sccs(graph):
        if len(comp) < 2:
            continue
        if not any(comp <= allowed for allowed in ALLOWED_CYCLES):
            bad += 1
            print("FAIL: a call cycle between %s:" % ", ".join(sorted(comp)))
            for v in sorted(comp):
                for w in sorted(graph[v] & comp):
                    syms = sorted(s for s in undefs[v] if owner.get(s) == w)
                    print("    %s -> %s: %s" % (v, w, ", ".join(syms)))
        else:
            print("ok: the allowed cycle %s" % ", ".join(sorted(comp)))
    import os
    algos = {os.path.splitext(f)[0] for f in os.listdir(srcdir + "/core/coll")
             if f.endswith(".c")} - NOT_ALGOS
    for a in sorted(algos & set(graph)):
        extra = graph[a] - ALGO_MAY_CALL
        if extra:
            bad += 1
            for w in sorted(extra):
                syms = sorted(s for s in undefs[a] if owner.get(s) == w)
                print("FAIL: algorithm %s calls %s (%s); algorithms call only %s" %
                      (a, w, ", ".join(syms), ", ".join(sorted(ALGO_MAY_CALL))))
    missing = algos - set(graph)
    if missing or len(graph) < 20:
        print("FAIL: libcohort-core.a lacks the objects of %s (%d objects read)" %
              (", ".join(sorted(missing)) or "the core", len(graph)))
        bad += 1
    print("%d objects, %d problems" % (len(graph), bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
