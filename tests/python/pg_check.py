# SPDX-License-Identifier: BSD-3-Clause
"""Every operation of the "cohort" c10d backend, on every rank of a job (launched by cohortrun,
which exports what env:// needs): every dtype with a cohort dtype, every reduce op, exact values
element by element, odd sizes, non-contiguous tensors, async Works completed out of order,
Futures, subgroups, and the errors wrong use must give.

    cohortrun -np N /usr/bin/python3 tests/python/pg_check.py

Values are small integers (exact in every dtype, float16 and bfloat16 included: every sum here
stays below 256). Exits non-zero at the first wrong element, naming it.
"""
import sys
import datetime
import warnings

import torch
import torch.distributed as dist

import cohort.torch  # noqa: F401  (registers the backend)

R = dist.ReduceOp
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64]
SIZES = [0, 1, 7, 1000, 65537]
checks = 0


def fail(what):
    print(f"rank {rank}: FAIL: {what}", flush=True)
    sys.exit(1)


def same(got, want, what):
    global checks
    checks += 1
    if got.dtype != want.dtype or got.shape != want.shape:
        fail(f"{what}: got {got.dtype} {tuple(got.shape)}, want {want.dtype} {tuple(want.shape)}")
    g, w = got.reshape(-1), want.reshape(-1)
    if g.dtype == torch.bool:
        bad = (g != w).nonzero()
    else:
        bad = (g.to(torch.float64) != w.to(torch.float64)).nonzero()
    if len(bad):
        i = int(bad[0])
        fail(f"{what}: element {i} of {g.numel()} is {g[i].item()}, want {w[i].item()} "
             f"({len(bad)} elements differ)")


def value(r, n, dtype, seed=0):
    """Rank r's input: small integers, different per rank and element."""
    base = (torch.arange(n, dtype=torch.int64) * 7 + seed) % 5 + r + 1
    return base.to(dtype)


def reduce_all(n, dtype, op):
    vals = [value(r, n, torch.int64) for r in range(world)]
    acc = vals[0].clone()
    for v in vals[1:]:
        if op == R.SUM or op == R.AVG:
            acc = acc + v
        elif op == R.PRODUCT:
            acc = acc * v
        elif op == R.MIN:
            acc = torch.minimum(acc, v)
        elif op == R.MAX:
            acc = torch.maximum(acc, v)
    if op == R.AVG:
        return (acc.to(torch.float64) / world).to(dtype)
    return acc.to(dtype)


def ops_for(dtype):
    ops = [R.SUM, R.MIN, R.MAX]
    if world <= 3:
        ops.append(R.PRODUCT)   # products of values up to 9 stay exact and small
    if dtype in FLOATS and world in (1, 2, 4):
        ops.append(R.AVG)       # halves and quarters are exact
    return ops


def check_allreduce():
    for dtype in FLOATS + INTS:
        for op in ops_for(dtype):
            if dtype in (torch.int8, torch.uint8, torch.float16, torch.bfloat16) and \
                    op == R.PRODUCT and world > 2:
                continue
            for n in SIZES:
                t = value(rank, n, dtype)
                dist.all_reduce(t, op=op)
                same(t, reduce_all(n, dtype, op), f"all_reduce {dtype} {op} n={n}")
    # bool: logical or (SUM, MAX), logical and (MIN, PRODUCT)
    b = torch.tensor([rank == 0, True, False, rank % 2 == 1])
    o = b.clone()
    dist.all_reduce(o, op=R.SUM)
    same(o, torch.tensor([True, True, False, world > 1]), "all_reduce bool SUM")
    a = b.clone()
    dist.all_reduce(a, op=R.MIN)
    same(a, torch.tensor([world == 1, True, False, False]), "all_reduce bool MIN")
    # complex: SUM
    c = torch.complex(value(rank, 9, torch.float32), value(rank, 9, torch.float32, 3))
    dist.all_reduce(c)
    same(torch.view_as_real(c), torch.view_as_real(torch.complex(
        reduce_all(9, torch.float32, R.SUM),
        sum(value(r, 9, torch.float32, 3) for r in range(world)))), "all_reduce complex64")
    # non-contiguous: a transposed view, and every other element
    t = value(rank, 24, torch.float32).reshape(4, 6).t()
    dist.all_reduce(t)
    same(t, reduce_all(24, torch.float32, R.SUM).reshape(4, 6).t(), "all_reduce transposed")
    base = torch.zeros(40, dtype=torch.int64)
    v = base[::2]
    v.copy_(value(rank, 20, torch.int64))
    dist.all_reduce(v, op=R.MAX)
    same(v, reduce_all(20, torch.int64, R.MAX), "all_reduce strided")
    same(base[1::2], torch.zeros(20, dtype=torch.int64), "all_reduce strided: gaps untouched")


def check_coalesced():
    ts = [value(rank, n, torch.float32, i) for i, n in enumerate([3, 1000, 1, 17])]
    dist.all_reduce_coalesced(ts)
    for i, n in enumerate([3, 1000, 1, 17]):
        want = sum(value(r, n, torch.float32, i) for r in range(world))
        same(ts[i], want, f"all_reduce_coalesced tensor {i}")


def check_rooted():
    for root in range(world):
        for dtype in [torch.float32, torch.int64, torch.float16, torch.int16, torch.bool]:
            for n in [1, 1001]:
                want = value(root, n, torch.int64).to(dtype)
                t = value(rank, n, torch.int64).to(dtype) if rank == root else \
                    torch.zeros(n, dtype=dtype)
                dist.broadcast(t, root)
                same(t, want, f"broadcast {dtype} root={root} n={n}")
        for dtype in [torch.float64, torch.int32, torch.int16]:
            t = value(rank, 333, dtype)
            mine = t.clone()
            dist.reduce(t, root, op=R.SUM)
            same(t, reduce_all(333, dtype, R.SUM) if rank == root else mine,
                 f"reduce {dtype} root={root}")
        # gather / scatter
        g = [torch.zeros(5, dtype=torch.int64) for _ in range(world)] if rank == root else None
        dist.gather(value(rank, 5, torch.int64), g, dst=root)
        if rank == root:
            for r in range(world):
                same(g[r], value(r, 5, torch.int64), f"gather root={root} block {r}")
        out = torch.zeros(6, dtype=torch.float32)
        src = [value(r, 6, torch.float32, 11 * root) for r in range(world)] if rank == root \
            else None
        dist.scatter(out, src, src=root)
        same(out, value(rank, 6, torch.float32, 11 * root), f"scatter root={root}")


def check_gathers():
    for dtype in [torch.float32, torch.int8, torch.bfloat16, torch.complex128, torch.bool]:
        for n in [1, 7, 4099]:
            mk = (lambda r: value(r, n, torch.int64).to(dtype)) if dtype != torch.complex128 \
                else (lambda r: torch.complex(value(r, n, torch.float64),
                                              value(r, n, torch.float64, 1)))
            outs = [torch.zeros(n, dtype=dtype) for _ in range(world)]
            dist.all_gather(outs, mk(rank))
            for r in range(world):
                same(outs[r] if dtype != torch.complex128 else torch.view_as_real(outs[r]),
                     mk(r) if dtype != torch.complex128 else torch.view_as_real(mk(r)),
                     f"all_gather {dtype} n={n} block {r}")
    # different sizes per rank (every rank passes the same output shapes)
    outs = [torch.zeros(r + 2, dtype=torch.int32) for r in range(world)]
    dist.all_gather(outs, value(rank, rank + 2, torch.int32))
    for r in range(world):
        same(outs[r], value(r, r + 2, torch.int32), f"all_gather uneven block {r}")
    # the flat form, out of place and in place
    n = 1003
    out = torch.zeros(world * n, dtype=torch.float64)
    dist._all_gather_base(out, value(rank, n, torch.float64))
    same(out, torch.cat([value(r, n, torch.float64) for r in range(world)]), "_all_gather_base")
    out = torch.zeros(world * n, dtype=torch.float64)
    out[rank * n:(rank + 1) * n] = value(rank, n, torch.float64)
    dist._all_gather_base(out, out[rank * n:(rank + 1) * n])
    same(out, torch.cat([value(r, n, torch.float64) for r in range(world)]),
         "_all_gather_base in place")
    # coalesced
    ins = [value(rank, 3, torch.float32), value(rank, 8, torch.float32, 2)]
    outs = [[torch.zeros(3), torch.zeros(8)] for _ in range(world)]
    dist.all_gather_coalesced(outs, ins)
    for r in range(world):
        same(outs[r][0], value(r, 3, torch.float32), f"all_gather_coalesced rank {r} tensor 0")
        same(outs[r][1], value(r, 8, torch.float32, 2), f"all_gather_coalesced rank {r} tensor 1")


def check_reduce_scatter():
    for dtype in [torch.float32, torch.int64, torch.int16, torch.float16]:
        for n in [1, 513]:
            ins = [value(rank, n, dtype, 13 * j) for j in range(world)]
            out = torch.zeros(n, dtype=dtype)
            dist.reduce_scatter(out, ins)
            want = sum(value(r, n, torch.int64, 13 * rank) for r in range(world)).to(dtype)
            same(out, want, f"reduce_scatter {dtype} n={n}")
            flat = torch.cat(ins)
            out2 = torch.zeros(n, dtype=dtype)
            dist._reduce_scatter_base(out2, flat)
            same(out2, want, f"_reduce_scatter_base {dtype} n={n}")


def check_alltoall():
    n = 5
    inp = torch.cat([value(rank, n, torch.float32, 100 * j) for j in range(world)])
    out = torch.zeros(world * n)
    dist.all_to_all_single(out, inp)
    same(out, torch.cat([value(j, n, torch.float32, 100 * rank) for j in range(world)]),
         "all_to_all_single equal")
    # uneven: rank r sends (r + j + 1) rows of width 3 to rank j
    send = [value(rank, (rank + j + 1) * 3, torch.int64, 10 * j).reshape(-1, 3)
            for j in range(world)]
    inp = torch.cat(send)
    in_splits = [rank + j + 1 for j in range(world)]
    out_splits = [j + rank + 1 for j in range(world)]
    out = torch.zeros(sum(out_splits), 3, dtype=torch.int64)
    dist.all_to_all_single(out, inp, out_splits, in_splits)
    want = torch.cat([value(j, (j + rank + 1) * 3, torch.int64, 10 * rank).reshape(-1, 3)
                      for j in range(world)])
    same(out, want, "all_to_all_single uneven")
    # list form, tensors of different sizes
    ins = [value(rank, j + 1, torch.int32, 7 * j) for j in range(world)]
    outs = [torch.zeros(rank + 1, dtype=torch.int32) for _ in range(world)]
    dist.all_to_all(outs, ins)
    for j in range(world):
        same(outs[j], value(j, rank + 1, torch.int32, 7 * rank), f"all_to_all block {j}")


def check_p2p():
    if world < 2:
        return
    # a ring: send right, receive from the left, with odd sizes and a non-contiguous tensor
    right, left = (rank + 1) % world, (rank - 1) % world
    for n in [1, 999, 70000]:
        s = dist.isend(value(rank, n, torch.float64), right, tag=3)
        t = torch.zeros(n, dtype=torch.float64)
        dist.recv(t, left, tag=3)
        s.wait()
        same(t, value(left, n, torch.float64), f"send/recv n={n}")
    buf = torch.zeros(6, 4, dtype=torch.int32)
    r = dist.irecv(buf.t(), left)
    dist.send(value(rank, 24, torch.int32).reshape(4, 6), right)
    r.wait()
    same(buf.t(), value(left, 24, torch.int32).reshape(4, 6), "recv into a transposed view")


def check_async():
    # many outstanding, completed in reverse order; futures carry the result
    works, tensors = [], []
    for i in range(40):
        t = value(rank, 17 + i, torch.float32, i)
        tensors.append(t)
        works.append(dist.all_reduce(t, async_op=True))
    for i in reversed(range(40)):
        works[i].wait()
        same(tensors[i], sum(value(r, 17 + i, torch.float32, i) for r in range(world)),
             f"async all_reduce {i} waited out of order")
    t = value(rank, 100, torch.float32)
    fut = dist.all_reduce(t, async_op=True).get_future()
    doubled = fut.then(lambda f: f.value()[0] * 2)
    same(doubled.wait(), 2 * sum(value(r, 100, torch.float32) for r in range(world)),
         "future then()")
    # a Work is not complete the moment it is made, unless it really is: it completes later
    w = dist.barrier(async_op=True)
    w.wait()
    if not w.is_completed():
        fail("barrier Work not completed after wait()")


def check_subgroups():
    evens = dist.new_group([r for r in range(world) if r % 2 == 0])
    if rank % 2 == 0:
        t = torch.tensor([float(rank)])
        dist.all_reduce(t, group=evens)
        same(t, torch.tensor([float(sum(range(0, world, 2)))]), "all_reduce in a subgroup")
    last = dist.new_group([world - 1])
    if rank == world - 1:
        t = torch.tensor([5.0])
        dist.all_reduce(t, group=last)
        same(t, torch.tensor([5.0]), "all_reduce in a one-rank subgroup")
    dist.barrier()


def expect_error(fn, needle, what):
    global checks
    try:
        fn()
    except (RuntimeError, ValueError, TypeError) as e:
        if needle not in str(e):
            fail(f"{what}: error '{e}' does not mention '{needle}'")
        checks += 1
        return
    fail(f"{what}: no error")


def check_wrong_use():
    # refused before anything is sent, identically on every rank: the group stays usable
    expect_error(lambda: dist.all_reduce(torch.ones(3, dtype=torch.int32), op=R.BAND),
                 "bitwise", "BAND")
    expect_error(lambda: dist.all_reduce(torch.ones(3).to_sparse()), "sparse", "sparse tensor")
    expect_error(lambda: dist.all_reduce(torch.ones(2, dtype=torch.bool), op=R.AVG),
                 "AVG of bool", "AVG of bool")
    expect_error(lambda: dist.all_reduce(torch.ones(2, dtype=torch.complex64), op=R.MAX),
                 "complex", "MAX of complex")
    if world > 1:
        expect_error(lambda: dist.recv(torch.zeros(1)), "any source", "recv from any source")
    t = torch.ones(4)
    dist.all_reduce(t)
    same(t, torch.full((4,), float(world)), "all_reduce after refusals")


if __name__ == "__main__":
    warnings.filterwarnings("ignore", message=".*private function")   # _all_gather_base & co
    dist.init_process_group("cohort", timeout=datetime.timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    for check in [check_allreduce, check_coalesced, check_rooted, check_gathers,
                  check_reduce_scatter, check_alltoall, check_p2p, check_async,
                  check_subgroups, check_wrong_use]:
        check()
        if rank == 0:
            print(f"pg_check np {world}: {check.__name__} ok", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {rank}: pg_check ok ({checks} checks)", flush=True)
