#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""summarize.py -- RESULT lines of several runs as markdown tables.

usage: python3 bench/peers/summarize.py FILE [FILE ...]    ("-" reads stdin)
       python3 bench/peers/summarize.py --json DIR FILE [FILE ...]

Reads the RESULT lines of run_peers.sh, of mpi_coll_bench / gloo_coll_bench and of
`cohort-bench --result-label L`; other lines are ignored. Two forms are understood:

  RESULT,<label>,<np>,<coll>,<bytes>,<iters>,<time_us>,<min_us>,<algbw>,<busbw>,<ok|FAIL|skip>
  RESULT,<label>,<coll>,<bytes>,<time_us>,<algbw>,<busbw>                 (np unknown)

Prints one table per process count: one row per (collective, bytes), one column per label
(in the order first seen). A cell is the time in microseconds for sizes up to 64 KiB and the
bus bandwidth in GB/s above; several results for the same cell (repeated runs) are shown as
"a / b"; a result whose check failed is marked "FAIL", one not checked "(unchecked)".
"broadcast" and "bcast" are the same collective.

--json DIR writes, instead of the tables, one file per (label, np, collective) into DIR,
<label>-<coll>-np<np>.json, in the form `cohort-bench --json` writes (the label, np, coll and
a "results" array of bytes and out-of-place busbw, float32 sum), so that
`cohort-bench --svg plot.svg --from a.json,b.json` draws the peers beside cohort. A checked
result that failed is left out.
"""
import json
import os
import sys

SMALL = 64 << 10
COLL_ORDER = ["allreduce", "bcast", "reduce", "allgather", "reduce_scatter", "alltoall",
              "barrier"]


def human(b):
    for unit, f in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= f and b % f == 0:
            return f"{b // f} {unit}"
    return f"{b} B"


def fmt(x, small):
    if small:
        return f"{x:.0f}" if x >= 1000 else f"{x:.1f}" if x >= 10 else f"{x:.2f}"
    return f"{x:.1f}" if x >= 10 else f"{x:.2f}" if x >= 0.1 else f"{x:.3f}"


def parse(line):
    """(label, np, coll, bytes, time_us, busbw, check) or None."""
    f = line.strip().split(",")
    if not f or f[0] != "RESULT":
        return None
    try:
        if len(f) == 11:
            label, np_, coll, nbytes = f[1], int(f[2]), f[3], int(f[4])
            t, busbw, check = float(f[6]), float(f[9]), f[10]
        elif len(f) == 7:
            label, np_, coll, nbytes = f[1], None, f[2], int(f[3])
            t, busbw, check = float(f[4]), float(f[6]), "ok"
        else:
            return None
    except ValueError:
        return None
    if coll == "broadcast":
        coll = "bcast"
    return label, np_, coll, nbytes, t, busbw, check


def write_json(outdir, rows):
    """rows: (label, np, coll, bytes, time_us, busbw, check) -> files in outdir."""
    series = {}
    for label, np_, coll, nbytes, t, busbw, check in rows:
        if check == "FAIL":
            continue
        series.setdefault((label, np_, coll), []).append((nbytes, t, busbw))
    os.makedirs(outdir, exist_ok=True)
    for (label, np_, coll), pts in series.items():
        name = f"{label}-{coll}-np{np_ if np_ is not None else 'x'}.json"
        doc = {"label": label, "np": np_ or 0, "coll": "broadcast" if coll == "bcast" else coll,
               "results": [{"bytes": b, "dtype": "float32", "op": "sum",
                            "out_of_place": {"time_us": t, "busbw": bw}}
                           for b, t, bw in sorted(pts)]}
        with open(os.path.join(outdir, name), "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=1)
        print(os.path.join(outdir, name))
    return 0


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        sys.stdout.write(__doc__)
        return 0 if len(argv) >= 2 else 2
    outdir = None
    if argv[1] == "--json":
        if len(argv) < 4:
            sys.stdout.write(__doc__)
            return 2
        outdir, argv = argv[2], [argv[0]] + argv[3:]
    labels, cells, bad, rows = [], {}, 0, []
    for path in argv[1:]:
        try:
            fh = sys.stdin if path == "-" else open(path, encoding="utf-8", errors="replace")
        except OSError as e:
            print(f"summarize.py: {e}", file=sys.stderr)
            return 1
        with fh:
            for line in fh:
                r = parse(line)
                if r is None:
                    bad += line.startswith("RESULT")
                    continue
                rows.append(r)
                label, np_, coll, nbytes, t, busbw, check = r
                if label not in labels:
                    labels.append(label)
                small = nbytes <= SMALL
                v = fmt(t if small else busbw, small)
                if check == "FAIL":
                    v += " FAIL"
                elif check != "ok":
                    v += " (unchecked)"
                cells.setdefault((np_, coll, nbytes), {}).setdefault(label, []).append(v)
    if bad:
        print(f"summarize.py: {bad} RESULT lines not understood, ignored", file=sys.stderr)
    if not cells:
        print("summarize.py: no RESULT lines", file=sys.stderr)
        return 1
    if outdir:
        return write_json(outdir, rows)

    def np_key(n):
        return (n is None, n or 0)

    def coll_key(c):
        return (COLL_ORDER.index(c) if c in COLL_ORDER else len(COLL_ORDER), c)

    for np_ in sorted({k[0] for k in cells}, key=np_key):
        keys = sorted((k for k in cells if k[0] == np_), key=lambda k: (coll_key(k[1]), k[2]))
        cols = [l for l in labels if any(l in cells[k] for k in keys)]
        print(f"### np = {np_ if np_ is not None else '?'}\n")
        print(f"time in us for sizes <= {human(SMALL)}, bus bandwidth in GB/s above\n")
        print("| coll | size | " + " | ".join(cols) + " |")
        print("|---|---:|" + "---:|" * len(cols))
        for k in keys:
            row = [" / ".join(cells[k].get(l, ["—"])) for l in cols]
            unit = "us" if k[2] <= SMALL else "GB/s"
            print(f"| {k[1]} | {human(k[2])} ({unit}) | " + " | ".join(row) + " |")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
