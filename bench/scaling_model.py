#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Alpha-beta-gamma scaling model of cohort's allreduce algorithms (docs/scaling.md).

Models, for p = N nodes x L ranks per node (ranks numbered node by node):
  ring  flat ring, node-ordered (core/coll/allreduce_ring.c)
  rd    flat recursive doubling (core/coll/allreduce_rd.c)
  hier  hierarchical (core/coll/allreduce_hier.c): node reduce-scatter in shared memory,
        allreduce of each 1/L shard among the N ranks with the same local rank (ring or rd by
        size, core/coll/select.c), node allgather; below 32 KiB node allreduce + whole-vector
        allreduce among equal local ranks.
and prints times, algorithm bandwidth (S / T), the winner and what cohort would pick.

Standard library only. Run with --help for the options; docs/scaling.md derives the formulas.
"""
import argparse
import math
import sys

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

# Thresholds copied from cohort (keep in step with the C sources).
RD_MAX_BYTES_2 = 64 * KiB       # core/coll/select.c: rd up to this for 2 ranks
RD_MAX_BYTES = 256 * KiB        # core/coll/select.c: rd up to this otherwise
HIER_SMALL_BYTES = 32 * KiB     # core/coll/allreduce_hier.c: two-phase plan up to this
HIER_MIN_BYTES = 512 * KiB      # core/coll/select.c: auto runs hier from this size
SHM_DIRECT_MAX = 16 * KiB       # transports/shm/coll.c: one-round node allreduce up to this
SHM_CMA_MIN = 32 * KiB          # transports/shm/coll.c: single-copy allgather blocks from this

ALGOS = ("ring", "rd", "hier", "shm")


class Params:
    """Model parameters, all in seconds and seconds per byte."""

    def __init__(self, alpha_net, beta_nic, nics, alpha_shm, beta_shm, gamma, esize, overlap):
        self.alpha_net = alpha_net    # per network message (one step of one rank)
        self.beta_nic = beta_nic      # s/B of one NIC, one direction
        self.nics = nics              # NICs per node (B_node = nics / beta_nic)
        self.alpha_shm = alpha_shm    # per shared-memory step / synchronisation
        self.beta_shm = beta_shm      # s/B one rank copies through shared memory
        self.gamma = gamma            # s/B reduced (one output byte of a OP b)
        self.esize = esize            # element size (float32: 4)
        self.overlap = overlap        # ring: reduction overlaps the transfer (pipelined chunks)

    def beta_rank(self, senders):
        """s/B seen by one rank when `senders` ranks of its node send across the network at the
        same time: each uses its nearest NIC, the node's NICs are shared evenly, and one rank
        never gets more than one NIC."""
        return self.beta_nic * max(1.0, senders / self.nics)


# ---------------------------------------------------------------------------------------------
# Flat algorithms on `n` ranks, `ppn` consecutive ranks per node, `conc` independent copies of
# the collective running at once on every node (1 for a flat collective; L for the cross-node
# allreduces of hier, one per local rank). Each returns (seconds, bytes a node sends across the
# network per direction, description of the steps).
# ---------------------------------------------------------------------------------------------

def seg_bytes(size, n, esize):
    """Largest ring segment: the buffer cut into n pieces of whole elements."""
    count = max(1, -(-size // esize))
    return -(-count // n) * esize


def ring_time(P, size, n, ppn, conc=1):
    if n <= 1 or size <= 0:
        return 0.0, 0.0, "no steps"
    nodes = n // ppn
    m = seg_bytes(size, n, P.esize)
    steps = n - 1
    # Every step, every rank sends one segment to its right neighbour. In a node-ordered ring,
    # `nodes` of the n links cross the network (one rank per node sends across per step, times conc
    # copies); the other n - nodes links are shared memory. A step lasts as long as its slowest
    # link.
    link = []
    if nodes > 1:
        link.append(P.alpha_net + m * P.beta_rank(conc))
    if ppn > 1:
        link.append(P.alpha_shm + m * P.beta_shm)
    xfer = max(link)
    red = m * P.gamma
    rs_step = max(xfer, red) if P.overlap else xfer + red
    t = steps * rs_step + steps * xfer
    net = conc * 2 * steps * m if nodes > 1 else 0.0
    return t, net, "2x%d steps of %d B" % (steps, m)


def rd_structure(n, ppn):
    """Steps of recursive doubling with ranks 0..n-1 placed ppn per node (block placement):
    list of (kind, cross, local): cross = the most ranks of one node whose partner is on
    another node, local = whether some pair is on the same node. kind: 'fold' / 'xchg' / 'back'."""
    key = (n, ppn)
    if key in _rd_cache:
        return _rd_cache[key]
    p2 = 1
    while p2 * 2 <= n:
        p2 *= 2
    extra = n - p2
    steps = []

    def tally(pairs):
        cross = {}
        local = False
        for a, b in pairs:
            if a // ppn != b // ppn:
                cross[a // ppn] = cross.get(a // ppn, 0) + 1
            else:
                local = True
        return (max(cross.values()) if cross else 0), local

    if extra:
        c, loc = tally([(r, r - p2) for r in range(p2, n)])      # extra ranks hand their data
        steps.append(("fold", c, loc))
    d = 1
    while d < p2:
        c, loc = tally([(r, r ^ d) for r in range(p2)])
        steps.append(("xchg", c, loc))
        d *= 2
    if extra:
        c, loc = tally([(r, r + p2) for r in range(extra)])       # result back to the extras
        steps.append(("back", c, loc))
    _rd_cache[key] = steps
    return steps


_rd_cache = {}


def rd_time(P, size, n, ppn, conc=1):
    if n <= 1 or size <= 0:
        return 0.0, 0.0, "no steps"
    t = 0.0
    net = 0.0
    nnet = nshm = 0
    for kind, cross, local in rd_structure(n, ppn):
        link = []
        if cross:
            link.append(P.alpha_net + size * P.beta_rank(cross * conc))
            net += cross * conc * size
            nnet += 1
        else:
            nshm += 1
        if local:
            link.append(P.alpha_shm + size * P.beta_shm)
        t += max(link) + (size * P.gamma if kind != "back" else 0.0)
    return t, net, "%d network + %d shm steps of %d B" % (nnet, nshm, size)


def flat_choice(size, n):
    """cohort's flat allreduce by size (core/coll/select.c)."""
    return "rd" if size <= (RD_MAX_BYTES_2 if n == 2 else RD_MAX_BYTES) else "ring"


# Node collectives in shared memory (transports/shm/coll.c), L ranks, buffer of `size` bytes.
def shm_allreduce(P, size, L):
    if L <= 1:
        return 0.0
    if size <= SHM_DIRECT_MAX:   # one round: stage, every rank reduces the whole vector
        return P.alpha_shm + size * P.beta_shm + (L - 1) * size * P.gamma
    # stage S, reduce 1/L of it from L inputs, copy the result S out: two synchronisations
    return 2 * P.alpha_shm + 2 * size * P.beta_shm + (L - 1) / L * size * P.gamma


def shm_reduce_scatter(P, size, L):
    if L <= 1:
        return 0.0
    return P.alpha_shm + size * P.beta_shm + (L - 1) / L * size * P.gamma


def shm_allgather(P, size, L):
    """size = the whole gathered vector (L blocks of size / L)."""
    if L <= 1:
        return 0.0
    if size / L >= SHM_CMA_MIN:       # single copy: read the L-1 other blocks
        return P.alpha_shm + (L - 1) / L * size * P.beta_shm
    return P.alpha_shm + size * P.beta_shm   # staged: own block in, L-1 blocks out


def hier_time(P, size, N, L, inner=None):
    """None where cohort builds no hierarchy (one node, or one rank per node). inner forces the
    cross-node algorithm (ring / rd); by default it is cohort's choice by size for N ranks."""
    if N < 2 or L < 2 or size <= 0:
        return None
    count = max(1, -(-size // P.esize))
    if count < L or size <= HIER_SMALL_BYTES:
        inner = inner or flat_choice(size, N)
        f = rd_time if inner == "rd" else ring_time
        tc, net, how = f(P, size, N, 1, conc=L)
        t = shm_allreduce(P, size, L) + tc
        return t, net, "node allreduce; %s among %d (x%d per node): %s" % (inner, N, L, how)
    q = count // L
    shard = (q + (count - q * L)) * P.esize
    inner = inner or flat_choice(shard, N)
    f = rd_time if inner == "rd" else ring_time
    tc, net, how = f(P, shard, N, 1, conc=L)
    t = shm_reduce_scatter(P, size, L) + tc + shm_allgather(P, size, L)
    return t, net, "node reduce-scatter; %s of %d B among %d (x%d per node): %s; node allgather" % (
        inner, shard, N, L, how)


def model(P, algo, size, N, L):
    p = N * L
    if algo == "ring":
        return ring_time(P, size, p, L)
    if algo == "rd":
        return rd_time(P, size, p, L)
    if algo == "hier":
        return hier_time(P, size, N, L)
    if algo == "shm":   # one node: the shm transport's node allreduce (core/plugin_coll.c)
        if N != 1 or L < 2 or size <= 0:
            return None
        return shm_allreduce(P, size, L), 0.0, "shm node allreduce of %d ranks" % L
    if algo in ("auto", "cohort"):
        return model(P, cohort_choice(size, N, L), size, N, L)
    raise ValueError("unknown algorithm %r (ring, rd, hier, shm, auto)" % algo)


def cohort_choice(size, N, L):
    """What cohort runs with default settings: the shm node collective on one node
    (core/plugin_coll.c), hier on an even multi-node job with >= 2 ranks per node
    (core/comm_create.c hier_setup) from HIER_MIN_BYTES, else rd / ring by size."""
    if N == 1 and L >= 2:
        return "shm"
    if N >= 2 and L >= 2 and size >= HIER_MIN_BYTES:
        return "hier"
    return flat_choice(size, N * L)


TIE = 0.01   # algorithms within 1 % count as level: the earlier choice (or cohort's) stays


def evaluate(P, size, N, L, prefer=None):
    res = {}
    for a in ALGOS:
        r = model(P, a, size, N, L)
        if r is not None:
            res[a] = r
    best = min(res, key=lambda a: res[a][0])
    if prefer is None:
        prefer = cohort_choice(size, N, L)
    if prefer in res and res[prefer][0] <= res[best][0] * (1 + TIE):
        best = prefer
    return res, best


# ---------------------------------------------------------------------------------------------
# Formatting
# ---------------------------------------------------------------------------------------------

def parse_size(s):
    s = s.strip()
    mult = {"K": KiB, "M": MiB, "G": GiB}
    if s and s[-1].upper() in mult:
        return int(float(s[:-1]) * mult[s[-1].upper()])
    if s.upper().endswith("B") and s[:-1]:
        return parse_size(s[:-1]) if s[-2].upper() in mult else int(s[:-1])
    return int(s)


def fmt_size(b):
    for unit, div in (("G", GiB), ("M", MiB), ("K", KiB)):
        if b >= div and b % div == 0:
            return "%d%s" % (b // div, unit)
    if b >= KiB:
        for unit, div in (("G", GiB), ("M", MiB), ("K", KiB)):
            if b >= div:
                return "%.1f%s" % (b / div, unit)
    return "%d" % b


def fmt_us(t):
    us = t * 1e6
    if us >= 1e5:
        return "%.0f" % us
    if us >= 100:
        return "%.1f" % us
    return "%.2f" % us


def parse_list(s, conv=int):
    return [conv(x) for x in s.replace(",", " ").split()]


def shape_ok(p, L, nodes):
    """p ranks in nodes of L (and exactly `nodes` of them when --nodes is given)."""
    return p % L == 0 and (nodes is None or p == nodes * L)


def sweep(P, ranks, ppns, sizes, out, nodes=None):
    hdr = ("%6s %5s %3s %7s %12s %12s %12s %12s %5s %9s %6s %10s" %
           ("ranks", "nodes", "ppn", "bytes", "ring_us", "rd_us", "hier_us", "shm_us", "best",
            "algbw_GBs", "cohort", "cohort/best"))
    first = True
    for L in ppns:
        for p in ranks:
            if not shape_ok(p, L, nodes):
                continue
            N = p // L
            if not first:
                out.write("\n")
            first = False
            out.write(hdr + "\n")
            for s in sizes:
                res, best = evaluate(P, s, N, L)
                c = cohort_choice(s, N, L)
                cells = [fmt_us(res[a][0]) if a in res else "-" for a in ALGOS]
                out.write("%6d %5d %3d %7s %12s %12s %12s %12s %5s %9.3g %6s %10.2f\n" % (
                    p, N, L, fmt_size(s), cells[0], cells[1], cells[2], cells[3], best,
                    s / res[best][0] / 1e9, c, res[c][0] / res[best][0]))


def matrix(P, ranks, ppns, sizes, out, nodes=None):
    """Markdown: one table per size, rows p, columns L: best algorithm, its time, algbw;
    a dagger where cohort's default picks another algorithm (with its slowdown)."""
    for s in sizes:
        out.write("\n**%s** (best algorithm, time in µs, algbw in GB/s)\n\n" % fmt_size(s))
        out.write("| ranks | " + " | ".join("L = %d" % L for L in ppns) + " |\n")
        out.write("|---:|" + "---|" * len(ppns) + "\n")
        for p in ranks:
            row = []
            for L in ppns:
                if not shape_ok(p, L, nodes):
                    row.append("")
                    continue
                N = p // L
                res, best = evaluate(P, s, N, L)
                c = cohort_choice(s, N, L)
                cell = "%s %s (%.3g)" % (best, fmt_us(res[best][0]), s / res[best][0] / 1e9)
                if c != best:
                    cell += " † %s ×%.2f" % (c, res[c][0] / res[best][0])
                row.append(cell)
            out.write("| %d | %s |\n" % (p, " | ".join(row)))


def crossovers(P, ranks, ppns, out, nodes=None, lo=8, hi=GiB, per_octave=16):
    """Where the winner changes, on a geometric grid of `per_octave` points per factor 2 (a
    switch needs a lead of more than TIE)."""
    out.write("%6s %5s %3s  %s\n" % ("ranks", "nodes", "ppn", "winner by size (switch points)"))
    n = int(round(math.log2(hi / lo) * per_octave))
    grid = [int(round(lo * 2 ** (i / per_octave))) for i in range(n + 1)]
    for L in ppns:
        for p in ranks:
            if not shape_ok(p, L, nodes):
                continue
            N = p // L
            parts = []
            prev = None
            for s in grid:
                _, best = evaluate(P, s, N, L, prefer=prev)
                if best != prev:
                    parts.append(best if prev is None else "%s from %s" % (best, fmt_size(s)))
                    prev = best
            out.write("%6d %5d %3d  %s\n" % (p, N, L, ", ".join(parts)))


def explain(P, size, N, L, out):
    p = N * L
    out.write("size %s, p = %d (N = %d nodes x L = %d ranks per node)\n" % (fmt_size(size), p, N, L))
    for a in ALGOS:
        r = model(P, a, size, N, L)
        if r is None:
            out.write("  %-5s n/a (%s)\n" % (a, "no hierarchy" if a == "hier" else "not one node"))
            continue
        t, net, how = r
        out.write("  %-5s %10s us  network bytes per node per direction %.0f = %.4g S  [%s]\n" % (
            a, fmt_us(t), net, net / size, how))
    for inner in ("ring", "rd"):
        r = hier_time(P, size, N, L, inner)
        if r is not None:
            out.write("  hier with %-4s across nodes: %10s us, network bytes per node per "
                      "direction %.4g S\n" % (inner, fmt_us(r[0]), r[1] / size))
    out.write("  cohort runs %s\n" % cohort_choice(size, N, L))


def check(P, path, N, L, out, md=False):
    rows = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            w = line.split()
            if len(w) != 3:
                sys.exit("%s:%d: expected 'algo size_bytes time_us', got %r" % (path, lineno, line))
            algo, size, tus = w[0], parse_size(w[1]), float(w[2])
            try:
                r = model(P, algo, size, N, L)
            except ValueError as e:
                sys.exit("%s:%d: %s" % (path, lineno, e))
            if r is None:
                sys.exit("%s:%d: %s is not modelled for N = %d, L = %d" % (path, lineno, algo, N, L))
            rows.append((size, algo, tus, r[0] * 1e6))
    if not rows:
        sys.exit("%s: no measurements" % path)
    if md:
        out.write("| size | algo | measured (µs) | model (µs) | ratio measured/model |\n")
        out.write("|---:|---|---:|---:|---:|\n")
        for size, algo, m, t in rows:
            out.write("| %s | %s | %.1f | %.1f | %.2f |\n" % (fmt_size(size), algo, m, t, m / t))
    else:
        out.write("# N = %d nodes x L = %d ranks per node\n" % (N, L))
        out.write("%10s %6s %12s %12s %8s\n" % ("bytes", "algo", "measured_us", "model_us", "ratio"))
        for size, algo, m, t in rows:
            out.write("%10s %6s %12.1f %12.1f %8.2f\n" % (fmt_size(size), algo, m, t, m / t))
    g = math.exp(sum(math.log(m / t) for _, _, m, t in rows) / len(rows))
    worst = max(rows, key=lambda r: abs(math.log(r[2] / r[3])))
    out.write("%sgeometric mean ratio %.2f over %d points; furthest: %s %s at %.2f\n" % (
        "\n" if md else "# ", g, len(rows), worst[1], fmt_size(worst[0]), worst[2] / worst[3]))


# ---------------------------------------------------------------------------------------------

PRESETS = {
    # A node: one 100 Gb/s NIC, 2 us per network message; shared memory 10 GB/s per rank, 0.5 us.
    "default": dict(alpha_net=2.0, nic_gbit=100.0, nics=1, alpha_shm=0.5, shm_gbyte=10.0,
                    reduce_gbyte=10.0, nodes=None, ppn=None),
    # This machine's test setup: 2 network-namespace "nodes" joined by a veth shaped by tc tbf to
    # 1 Gbit/s, 2 ranks per node, 2 shared vCPUs. The link rate is the shaped rate; the alphas
    # and the shm/reduction rates are placeholders to be replaced from measurements
    # (--alpha-net, --beta-net or --nic-gbit, --alpha-shm, --shm-gbyte, --reduce-gbyte).
    "netns": dict(alpha_net=50.0, nic_gbit=1.0, nics=1, alpha_shm=2.0, shm_gbyte=3.0,
                  reduce_gbyte=3.0, nodes=2, ppn=2),
}


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="alpha-beta-gamma model of cohort's allreduce algorithms (docs/scaling.md)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="default",
                    help="parameter set; options given explicitly override it")
    g = ap.add_argument_group("parameters (defaults come from --preset)")
    g.add_argument("--alpha-net", type=float, help="network latency per message, us")
    g.add_argument("--nic-gbit", type=float, help="one NIC's rate per direction, Gbit/s")
    g.add_argument("--beta-net", type=float,
                   help="seconds per byte of one NIC per direction (overrides --nic-gbit)")
    g.add_argument("--nics", type=int, help="NICs per node (B_node = nics x NIC rate)")
    g.add_argument("--alpha-shm", type=float, help="shared-memory latency per step, us")
    g.add_argument("--shm-gbyte", type=float, help="shared-memory copy rate per rank, GB/s")
    g.add_argument("--beta-shm", type=float, help="seconds per byte copied in shared memory "
                   "(overrides --shm-gbyte)")
    g.add_argument("--reduce-gbyte", type=float, help="reduction rate per rank, GB/s of result")
    g.add_argument("--gamma", type=float, help="seconds per byte reduced (overrides --reduce-gbyte)")
    g.add_argument("--esize", type=int, default=4, help="element size in bytes")
    g.add_argument("--overlap", action="store_true",
                   help="ring reduce-scatter steps overlap the reduction with the transfer")
    s = ap.add_argument_group("what to print")
    s.add_argument("--ranks", default="8 16 32 64 128 256 512 1024 2048 4096",
                   help="values of p (comma/space separated)")
    s.add_argument("--ppn", help="values of L, ranks per node (default 1 2 4 8 16; netns: 2)")
    s.add_argument("--nodes", type=int, help="N: with --ppn, replaces --ranks by N x L")
    s.add_argument("--sizes", help="sizes in bytes (K/M/G suffixes); default 8 B .. 1 GiB, x2")
    s.add_argument("--format", choices=("text", "md"), default="text",
                   help="text sweep, or markdown tables (one per size) / markdown --check table")
    s.add_argument("--crossovers", action="store_true", help="print where the winner changes")
    s.add_argument("--explain", metavar="SIZE",
                   help="per-algorithm breakdown for one size (needs --nodes and one --ppn)")
    s.add_argument("--check", metavar="FILE",
                   help="compare measurements (lines: algo size_bytes time_us; # comments; "
                        "algo ring|rd|hier|auto) with the model for --nodes x --ppn")
    a = ap.parse_args(argv)

    pre = PRESETS[a.preset]

    def pick(v, key):
        return pre[key] if v is None else v

    beta_nic = a.beta_net if a.beta_net is not None else 8.0 / (pick(a.nic_gbit, "nic_gbit") * 1e9)
    beta_shm = a.beta_shm if a.beta_shm is not None else 1.0 / (pick(a.shm_gbyte, "shm_gbyte") * 1e9)
    gamma = a.gamma if a.gamma is not None else 1.0 / (pick(a.reduce_gbyte, "reduce_gbyte") * 1e9)
    P = Params(alpha_net=pick(a.alpha_net, "alpha_net") * 1e-6, beta_nic=beta_nic,
               nics=pick(a.nics, "nics"), alpha_shm=pick(a.alpha_shm, "alpha_shm") * 1e-6,
               beta_shm=beta_shm, gamma=gamma, esize=a.esize, overlap=a.overlap)
    if P.nics < 1 or P.esize < 1:
        ap.error("--nics and --esize must be >= 1")

    ppns = (parse_list(a.ppn) if a.ppn is not None
            else [pre["ppn"]] if pre["ppn"] is not None else [1, 2, 4, 8, 16])
    nodes = a.nodes if a.nodes is not None else pre["nodes"]
    ranks = sorted({nodes * L for L in ppns}) if nodes else parse_list(a.ranks)
    sizes = ([parse_size(x) for x in a.sizes.replace(",", " ").split()] if a.sizes
             else [8 << i for i in range(28)])
    if any(x <= 0 for x in ranks + ppns + sizes):
        ap.error("ranks, ppn and sizes must be positive")

    out = sys.stdout
    out.write("# model: alpha_net %.3g us, NIC %.4g Gbit/s x %d per node, alpha_shm %.3g us, "
              "shm %.4g GB/s per rank, reduce %.4g GB/s, esize %d%s\n" % (
                  P.alpha_net * 1e6, 8 / P.beta_nic / 1e9, P.nics, P.alpha_shm * 1e6,
                  1 / P.beta_shm / 1e9, 1 / P.gamma / 1e9, P.esize,
                  ", overlap" if P.overlap else ""))
    if a.check or a.explain:
        if not nodes or len(ppns) != 1:
            ap.error("--check and --explain need --nodes N and a single --ppn L (or --preset netns)")
        if a.check:
            check(P, a.check, nodes, ppns[0], out, md=(a.format == "md"))
        else:
            explain(P, parse_size(a.explain), nodes, ppns[0], out)
        return 0
    if a.crossovers:
        crossovers(P, ranks, ppns, out, nodes)
    elif a.format == "md":
        matrix(P, ranks, ppns, sizes, out, nodes)
    else:
        sweep(P, ranks, ppns, sizes, out, nodes)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:
        sys.exit(0)
