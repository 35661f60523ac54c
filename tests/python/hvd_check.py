#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""Per-rank checks of cohort.torch's Horovod-style API (import cohort.torch as hvd).

    PYTHONPATH=python HVD_TEST_BACKEND=gloo \\
        /usr/bin/python3 tests/python/launch.py -np 3 -- /usr/bin/python3 tests/python/hvd_check.py

The default group is created here with HVD_TEST_BACKEND (default gloo; "cohort" once the
extension is built), then hvd.init() uses it. Every rank runs the same checks in the same order
and prints one line per check; values are integers (exact in every dtype used), compared
element by element. A failed check ends the rank at once with status 1 (its collectives may be
out of step with the other ranks'; HVD_CHECK_KEEP_GOING=1 goes on anyway).
HVD_CHECK_ONLY=name,name runs only those checks (plus init).
"""
import importlib
import os
import sys
import time
import traceback
import types

import torch
import torch.distributed as dist
import torch.nn.functional as F


def load_hvd():
    """cohort.torch, or, before the C++ extension (cohort.torch._backend) and configure's
    cohort/_build_info.py exist, cohort/torch/_hvd.py imported without running the packages'
    __init__ files (this fallback is only for running before the extension is built)."""
    try:
        import cohort.torch as hvd
        return hvd
    except ImportError as e:
        missing = getattr(e, 'name', '') or ''
        if not missing.startswith('cohort'):      # cohort._build_info, cohort.torch._C
            raise
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.join(os.path.dirname(os.path.dirname(here)), 'python')
    for pkg in ('cohort', 'cohort.torch'):
        mod = sys.modules.get(pkg)
        if mod is None or not hasattr(mod, '__path__'):
            mod = types.ModuleType(pkg)
            mod.__path__ = [os.path.join(root, *pkg.split('.'))]
            sys.modules[pkg] = mod
    return importlib.import_module('cohort.torch._hvd')


hvd = load_hvd()
IMPL = sys.modules['cohort.torch._hvd']     # the public names (__all__)
STATE = sys.modules['cohort.torch._hvd_state']   # private hooks: _state
COMM = sys.modules['cohort.torch._hvd_comm']     # private hooks: _name_next
BACKEND = os.environ.get('HVD_TEST_BACKEND', 'gloo')
ONLY = set(filter(None, os.environ.get('HVD_CHECK_ONLY', '').split(',')))
KEEP_GOING = os.environ.get('HVD_CHECK_KEEP_GOING', '0') not in ('', '0')
FAILED = []
R = N = None


def log(msg):
    print(msg, flush=True)


def check(name):
    def deco(fn):
        if ONLY and name not in ONLY and name != 'init':
            return fn
        t0 = time.monotonic()
        try:
            fn()
        except Skip as s:
            log('skip %-34s %s' % (name, s))
            return fn
        except Exception:  # noqa: BLE001
            FAILED.append(name)
            log('FAIL %-34s\n%s' % (name, traceback.format_exc()))
            if not KEEP_GOING:
                os._exit(1)
            return fn
        log('ok   %-34s %.2fs' % (name, time.monotonic() - t0))
        return fn
    return deco


class Skip(Exception):
    pass


def eq(got, want, what=''):
    if not isinstance(got, torch.Tensor) or got.dtype != want.dtype or got.shape != want.shape \
            or not torch.equal(got, want):
        raise AssertionError('%s: got %r, want %r' % (what, got, want))


def raises(exc, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except exc as e:
        return e
    raise AssertionError('%s did not raise %s' % (getattr(fn, '__name__', fn), exc.__name__))


def side_channel():
    """The default group's store: lets a check order ranks without a collective."""
    return dist.PrefixStore('hvd_check/', dist.distributed_c10d._get_default_store())


def wait_count(store, key, n):
    deadline = time.monotonic() + 120
    while store.add(key, 0) < n:
        assert time.monotonic() < deadline, 'side channel: %s never reached %d' % (key, n)
        time.sleep(0.002)


def same_everywhere(t, what):
    """Every rank holds the same tensor (compared bit for bit through an allgather)."""
    flat = t.detach().reshape(1, -1).contiguous()
    g = hvd.allgather(flat, name='same.' + what)
    for q in range(N):
        if not torch.equal(g[q], g[0]):
            raise AssertionError('%s differs between rank 0 and rank %d' % (what, q))


REDUCE_DTYPES = [torch.float32, torch.float64, torch.int32, torch.int64, torch.float16,
                 torch.bfloat16]
MOVE_DTYPES = [torch.float32, torch.float64, torch.int32, torch.int64, torch.float16,
               torch.bfloat16, torch.int16, torch.int8, torch.uint8, torch.bool,
               torch.complex64]
SHAPES = [(), (1,), (17,), (5, 3), (2, 3, 4), (0,), (0, 3)]


def gloo_lacks(dtype):
    return BACKEND == 'gloo' and dtype in (torch.bfloat16, torch.int16)


def val(q, shape, dtype, kind='sum'):
    """Rank q's integer-valued tensor."""
    n = 1
    for d in shape:
        n *= d
    i = torch.arange(n, dtype=torch.int64)
    if kind == 'product':
        v = 1 + (i + q) % 2                             # 1 or 2
    elif kind == 'avg':
        v = N * ((i * 3 + q * 5) % 11 - 4)             # multiples of N: exact averages
    else:
        v = (i * 7 + q * 13) % 23 - 9                   # small, negatives included
    if dtype == torch.bool:
        v = (v % 2)
    if dtype == torch.uint8:
        v = v.abs()
    return v.to(dtype).reshape(shape)


def expect(shape, dtype, op, kind, pre=1.0, post=1.0):
    vals = [val(q, shape, dtype, kind).to(torch.float64) * pre for q in range(N)]
    if op in (hvd.Sum, hvd.Average):
        r = sum(vals)
    elif op == hvd.Min:
        r = torch.stack(vals).min(0).values if vals[0].dim() else min(vals)
    elif op == hvd.Max:
        r = torch.stack(vals).max(0).values if vals[0].dim() else max(vals)
    else:
        r = vals[0]
        for v in vals[1:]:
            r = r * v
    if op == hvd.Average:
        r = r / N
    r = r * post
    if not dtype.is_floating_point:
        r = r.trunc()
    return r.to(dtype).reshape(shape)


# ----------------------------------------------------------------------------------------------

@check('init')
def _():
    global R, N
    dist.init_process_group(BACKEND)
    assert not hvd.is_initialized()
    raises(ValueError, hvd.rank)
    hvd.init()
    hvd.init()          # again: nothing happens
    R, N = hvd.rank(), hvd.size()
    assert hvd.is_initialized()
    assert (R, N) == (int(os.environ['RANK']), int(os.environ['WORLD_SIZE'])), (R, N)
    if 'LOCAL_RANK' in os.environ:
        assert hvd.local_rank() == int(os.environ['LOCAL_RANK'])
        ls = int(os.environ['LOCAL_WORLD_SIZE'])
    else:       # computed from host names: every rank runs here
        assert hvd.local_rank() == R
        ls = N
    assert hvd.local_size() == ls
    if N % ls == 0:
        assert (hvd.cross_rank(), hvd.cross_size()) == (R // ls, N // ls), \
            (hvd.cross_rank(), hvd.cross_size())
    assert hvd.is_homogeneous() == (N % ls == 0)
    log('     rank %d of %d, backend %s, local %d/%d, cross %d/%d'
        % (R, N, BACKEND, hvd.local_rank(), hvd.local_size(), hvd.cross_rank(),
           hvd.cross_size()))


if FAILED:
    sys.exit(1)
T0 = time.monotonic()


@check('queries')
def _():
    for f in ('mpi_built', 'gloo_built', 'nccl_built', 'ddl_built', 'ccl_built', 'cuda_built',
              'rocm_built', 'mpi_enabled', 'gloo_enabled', 'mpi_threads_supported'):
        assert getattr(hvd, f)() is False, f
    assert hvd.cohort_built() is True
    assert (hvd.Average, hvd.Sum, hvd.Adasum, hvd.Min, hvd.Max, hvd.Product) == (0, 1, 2, 3, 4, 5)
    assert issubclass(hvd.HorovodInternalError, RuntimeError)
    for name in IMPL.__all__:
        assert hasattr(hvd, name), name


for _dt in REDUCE_DTYPES:
    @check('allreduce.%s' % str(_dt)[6:])
    def _(dt=_dt):
        if gloo_lacks(dt):
            raise Skip('gloo cannot reduce %s' % dt)
        for shape in SHAPES:
            for op, kind in ((hvd.Sum, 'sum'), (hvd.Average, 'avg'), (hvd.Min, 'sum'),
                             (hvd.Max, 'sum'), (hvd.Product, 'product')):
                x = val(R, shape, dt, kind)
                keep = x.clone()
                got = hvd.allreduce(x, op=op, name='ar.%s.%d' % (str(dt), op))
                eq(got, expect(shape, dt, op, kind), 'allreduce %s %s op %d' % (dt, shape, op))
                eq(x, keep, 'input unchanged')
            # scaling: powers of two, exact
            x = val(R, shape, dt, 'avg')
            got = hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5)
            eq(got, expect(shape, dt, hvd.Sum, 'avg', 2.0, 0.5), 'pre/postscale')
            got = hvd.allreduce(x, op=hvd.Average, postscale_factor=4.0)
            eq(got, expect(shape, dt, hvd.Average, 'avg', 1.0, 4.0), 'Average postscale')
            # in place
            y = val(R, shape, dt)
            out = hvd.allreduce_(y, op=hvd.Sum)
            assert out is y
            eq(y, expect(shape, dt, hvd.Sum, 'sum'), 'allreduce_')
            y = val(R, shape, dt, 'avg')
            h = hvd.allreduce_async_(y, op=hvd.Average)
            assert hvd.synchronize(h) is y
            eq(y, expect(shape, dt, hvd.Average, 'avg'), 'allreduce_async_')
            h = hvd.allreduce_async(val(R, shape, dt), op=hvd.Max)
            eq(hvd.synchronize(h), expect(shape, dt, hvd.Max, 'sum'), 'allreduce_async')


@check('allreduce.details')
def _():
    # legacy average=, and op together with average
    x = val(R, (6,), torch.float32, 'avg')
    eq(hvd.allreduce(x, average=True), expect((6,), torch.float32, hvd.Average, 'avg'), 'avg=T')
    eq(hvd.allreduce(x, average=False), expect((6,), torch.float32, hvd.Sum, 'avg'), 'avg=F')
    raises(ValueError, hvd.allreduce, x, average=True, op=hvd.Sum)
    # integer Average truncates toward zero (as Horovod's scaling)
    got = hvd.allreduce(torch.tensor([R, -R, 7 * R + 1], dtype=torch.int32))
    s = [sum(range(N)), -sum(range(N)), sum(7 * q + 1 for q in range(N))]
    eq(got, torch.tensor([int(v / N) for v in s], dtype=torch.int32), 'int average')
    # non-contiguous, in place and out of place
    m = val(R, (4, 6), torch.float64).t()
    want = expect((4, 6), torch.float64, hvd.Sum, 'sum').t()
    eq(hvd.allreduce(m, op=hvd.Sum), want, 'non-contiguous')
    assert hvd.allreduce_(m, op=hvd.Sum) is m
    eq(m, want, 'non-contiguous in place')
    # fp16 compression: result back in float32
    x = val(R, (9,), torch.float32)
    got = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16)
    eq(got, expect((9,), torch.float32, hvd.Sum, 'sum'), 'fp16 compression')
    got = hvd.allreduce(val(R, (3,), torch.int64), op=hvd.Sum, compression=hvd.Compression.fp16)
    eq(got, expect((3,), torch.int64, hvd.Sum, 'sum'), 'fp16 compression leaves ints')
    # autograd
    a = torch.ones(5, requires_grad=True)
    hvd.allreduce(a * (R + 1), op=hvd.Sum).sum().backward()
    eq(a.grad, torch.full((5,), float(N * (R + 1))), 'allreduce backward (Sum)')
    b = torch.ones(3, requires_grad=True)
    (hvd.allreduce(b) * 2).sum().backward()
    eq(b.grad, torch.full((3,), 2.0), 'allreduce backward (Average)')


@check('Average of inexact values is the sum divided by size')
def _():
    # cohort divides in C (ReduceOp.AVG), Python divides for gloo: the bits must be Horovod's,
    # the rounded sum divided by the size and rounded again, whatever the dtype and path
    for dt in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        if gloo_lacks(dt):
            continue
        g = torch.Generator().manual_seed(1000 + R)
        x = (torch.randn(1037, generator=g, dtype=torch.float64) * 3).to(dt)
        # each form against its own Sum: where a sum is rounded depends on the layout
        for form, run in (('allreduce', lambda op: hvd.allreduce(x, op=op)),
                          ('grouped', lambda op: hvd.grouped_allreduce([x, x[:5]], op=op)[0])):
            s = run(hvd.Sum)
            want = s.float().div_(N).to(dt) if dt in (torch.float16, torch.bfloat16) else s / N
            got = run(hvd.Average)
            assert torch.equal(got, want), '%s %s Average differs from Sum / size in %d of %d ' \
                'elements' % (form, dt, int((got != want).sum()), got.numel())


@check('grouped_allreduce')
def _():
    shapes = [((4,), torch.float32), ((3, 2), torch.int64), ((1,), torch.float32), ((), torch.float64),
              ((0,), torch.float32), ((5,), torch.float16)]

    def inputs(kind='sum'):
        return [val(R, s, d, kind) for s, d in shapes]

    def want(op, kind='sum'):
        return [expect(s, d, op, kind) for s, d in shapes]
    for g, w in zip(hvd.grouped_allreduce(inputs(), op=hvd.Sum, name='grp'), want(hvd.Sum)):
        eq(g, w, 'grouped_allreduce')
    ts = inputs('avg')
    outs = hvd.grouped_allreduce_(ts, op=hvd.Average)
    for t, o, w in zip(ts, outs, want(hvd.Average, 'avg')):
        assert o is t
        eq(t, w, 'grouped_allreduce_')
    h = hvd.grouped_allreduce_async(inputs(), op=hvd.Max)
    for g, w in zip(hvd.synchronize(h), want(hvd.Max)):
        eq(g, w, 'grouped_allreduce_async')
    ts = inputs()
    h = hvd.grouped_allreduce_async_(ts, op=hvd.Min)
    hvd.synchronize(h)
    for t, w in zip(ts, want(hvd.Min)):
        eq(t, w, 'grouped_allreduce_async_')
    a = torch.ones(2, requires_grad=True)
    b = torch.ones(3, requires_grad=True)
    ra, rb = hvd.grouped_allreduce([a * 1, b * 2], op=hvd.Sum)
    (ra.sum() + rb.sum()).backward()
    eq(a.grad, torch.full((2,), float(N)), 'grouped backward')
    eq(b.grad, torch.full((3,), 2.0 * N), 'grouped backward')


def ag_rows(q):
    return (q % 3) + (0 if q == 1 else 1)       # rank 1 sends no row


@check('allgather')
def _():
    for dt in MOVE_DTYPES:
        for trailing in ((), (3,), (2, 2)):
            x = val(R, (ag_rows(R),) + trailing, dt)
            want = torch.cat([val(q, (ag_rows(q),) + trailing, dt) for q in range(N)])
            eq(hvd.allgather(x, name='ag'), want, 'allgather %s %s' % (dt, trailing))
            eq(hvd.synchronize(hvd.allgather_async(x)), want, 'allgather_async')
    # equal sizes (no padding), large
    x = val(R, (1000, 7), torch.float32)
    eq(hvd.allgather(x), torch.cat([val(q, (1000, 7), torch.float32) for q in range(N)]), 'big')
    # grouped
    xs = [val(R, (ag_rows(R), 2), torch.int32), val(R, (R + 1,), torch.float64),
          val(R, (2, 0), torch.float32)]
    got = hvd.grouped_allgather(xs)
    want = [torch.cat([val(q, (ag_rows(q), 2), torch.int32) for q in range(N)]),
            torch.cat([val(q, (q + 1,), torch.float64) for q in range(N)]),
            torch.zeros((2 * N, 0))]
    for g, w in zip(got, want):
        eq(g, w, 'grouped_allgather')
    got = hvd.synchronize(hvd.grouped_allgather_async(xs))
    for g, w in zip(got, want):
        eq(g, w, 'grouped_allgather_async')
    # autograd (as Horovod: the gradient is averaged over ranks, then this rank's rows)
    a = torch.ones(R + 1, 2, requires_grad=True)
    y = hvd.allgather(a)
    w = torch.arange(y.numel(), dtype=torch.float32).view_as(y)
    (y * w).sum().backward()
    off = sum(q + 1 for q in range(R))
    eq(a.grad, w[off:off + R + 1], 'allgather backward')


@check('allgather.mismatch')
def _():
    if N == 1:
        raise Skip('needs 2 ranks')
    bad = torch.zeros(2, 3 if R else 4)
    e = raises(RuntimeError, hvd.allgather, bad, name='bad_shape')
    assert 'bad_shape' in str(e) and 'Mismatched' in str(e), e
    bad = torch.zeros(2, 3, dtype=torch.float32 if R else torch.float64)
    e = raises(RuntimeError, hvd.allgather, bad, name='bad_type')
    assert 'Mismatched data types' in str(e), e
    eq(hvd.allgather(torch.tensor([R])), torch.arange(N), 'allgather after a mismatch')


@check('broadcast')
def _():
    for dt in MOVE_DTYPES:
        for shape in ((), (7,), (3, 5), (0,)):
            for root in range(N):
                x = val(R, shape, dt)
                keep = x.clone()
                eq(hvd.broadcast(x, root, name='bc'), val(root, shape, dt), 'broadcast')
                eq(x, keep, 'broadcast input unchanged')
                y = val(R, shape, dt)
                assert hvd.broadcast_(y, root) is y
                eq(y, val(root, shape, dt), 'broadcast_')
            root = N - 1
            eq(hvd.synchronize(hvd.broadcast_async(val(R, shape, dt), root)),
               val(root, shape, dt), 'broadcast_async')
            y = val(R, shape, dt)
            assert hvd.synchronize(hvd.broadcast_async_(y, root)) is y
            eq(y, val(root, shape, dt), 'broadcast_async_')
    m = val(R, (3, 4), torch.int64).t()
    hvd.broadcast_(m, 0)
    eq(m, val(0, (3, 4), torch.int64).t(), 'non-contiguous broadcast_')
    a = torch.ones(4, requires_grad=True)
    hvd.broadcast(a * 3, 0).sum().backward()
    eq(a.grad, torch.full((4,), 3.0 if R == 0 else 0.0), 'broadcast backward')


def a2_splits(q):
    return [(q + j) % 3 for j in range(N)]


def a2_input(q, dt):
    rows = []
    for j, s in enumerate(a2_splits(q)):
        for k in range(s):
            rows.append(torch.full((2,), 100 * q + 10 * j + k, dtype=torch.int64))
    rows.append(torch.full((2,), 99, dtype=torch.int64))        # one more row, not sent
    return torch.stack(rows).to(dt)


@check('alltoall')
def _():
    for dt in (torch.float32, torch.int64, torch.float16, torch.bfloat16, torch.int8,
               torch.float64):
        x = a2_input(R, dt)
        want = [torch.full((2,), 100 * j + 10 * R + k, dtype=torch.int64)
                for j in range(N) for k in range(a2_splits(j)[R])]
        want = torch.stack(want).to(dt) if want else torch.empty((0, 2), dtype=dt)
        want_splits = [a2_splits(j)[R] for j in range(N)]
        out, rs = hvd.alltoall(x, splits=a2_splits(R), name='a2')
        eq(out, want, 'alltoall %s' % dt)
        eq(rs, torch.tensor(want_splits, dtype=torch.int32), 'received splits')
        out, rs = hvd.alltoall(x, splits=torch.tensor(a2_splits(R), dtype=torch.int64))
        eq(out, want, 'alltoall, splits tensor')
        eq(rs, torch.tensor(want_splits, dtype=torch.int64), 'received splits (int64)')
        out, rs = hvd.synchronize(hvd.alltoall_async(x, a2_splits(R)))
        eq(out, want, 'alltoall_async')
    # default: equal splits; the result alone
    x = torch.arange(2 * N * 3).view(2 * N, 3) + 1000 * R
    out = hvd.alltoall(x)
    want = torch.cat([torch.arange(2 * N * 3).view(2 * N, 3)[2 * R:2 * R + 2] + 1000 * j
                      for j in range(N)])
    eq(out, want, 'alltoall equal splits')
    out, rs = hvd.synchronize(hvd.alltoall_async(x))
    eq(out, want, 'alltoall_async equal splits')
    eq(rs, torch.full((N,), 2, dtype=torch.int32), 'alltoall_async equal splits: splits')
    # nothing sent anywhere
    out, rs = hvd.alltoall(torch.zeros(0, 4), splits=[0] * N)
    eq(out, torch.zeros(0, 4), 'empty alltoall')
    # autograd: the gradient goes back to where the rows came from
    a = a2_input(R, torch.float32).requires_grad_()
    out, rs = hvd.alltoall(a, splits=a2_splits(R))
    (out * 2).sum().backward()
    g = torch.zeros_like(a)
    g[:sum(a2_splits(R))] = 2
    eq(a.grad, g, 'alltoall backward')


@check('reducescatter')
def _():
    for dim0 in (2 * N + 1, N, 1):
        x = val(R, (dim0, 3), torch.float32, 'avg')
        q, m = divmod(dim0, N)
        start, rows = R * q + min(R, m), q + (1 if R < m else 0)
        full = expect((dim0, 3), torch.float32, hvd.Sum, 'avg')
        eq(hvd.reducescatter(x, op=hvd.Sum), full[start:start + rows], 'reducescatter Sum')
        fa = expect((dim0, 3), torch.float32, hvd.Average, 'avg')
        eq(hvd.reducescatter(x), fa[start:start + rows], 'reducescatter Average')
        eq(hvd.synchronize(hvd.reducescatter_async(x, op=hvd.Sum)), full[start:start + rows],
           'reducescatter_async')
        outs = hvd.grouped_reducescatter([x, x * 2], op=hvd.Sum)
        eq(outs[1], 2 * full[start:start + rows], 'grouped_reducescatter')


@check('async.out_of_order')
def _():
    hs = []
    for k in range(6):
        hs.append(('ar', k, hvd.allreduce_async(val(R, (k + 1, 2), torch.float32), op=hvd.Sum,
                                                name='ooo.%d' % k)))
    hs.append(('ag', 0, hvd.allgather_async(val(R, (ag_rows(R), 2), torch.int64))))
    hs.append(('bc', 0, hvd.broadcast_async(val(R, (4,), torch.int32), N - 1)))
    hs.append(('a2', 0, hvd.alltoall_async(a2_input(R, torch.float32), a2_splits(R))))
    hs.append(('gr', 0, hvd.grouped_allreduce_async([val(R, (2,), torch.int64)] * 2, op=hvd.Sum)))
    for kind, k, h in reversed(hs):
        got = hvd.synchronize(h)
        if kind == 'ar':
            eq(got, expect((k + 1, 2), torch.float32, hvd.Sum, 'sum'), 'out of order %d' % k)
        elif kind == 'ag':
            eq(got, torch.cat([val(q, (ag_rows(q), 2), torch.int64) for q in range(N)]), 'ag')
        elif kind == 'bc':
            eq(got, val(N - 1, (4,), torch.int32), 'bc')
        elif kind == 'a2':
            assert got[0].shape[0] == sum(a2_splits(j)[R] for j in range(N))
        else:
            for g in got:
                eq(g, expect((2,), torch.int64, hvd.Sum, 'sum'), 'grouped')
    assert hvd.synchronize(hs[0][2]) is None        # already synchronized: None, as Horovod
    raises(ValueError, hvd.poll, hs[0][2])


@check('async.poll')
def _():
    # a handle is not done while another rank has not issued its side: rank 0 issues only
    # once every other rank has issued and polled
    st = side_channel()
    if R == 0:
        wait_count(st, 'poll1', N - 1)
    h = hvd.allreduce_async(torch.ones(3), op=hvd.Sum)
    early = hvd.poll(h)
    if R != 0:
        st.add('poll1', 1)
        assert early is False, 'poll() said done before rank 0 issued the allreduce'
    deadline = time.monotonic() + 60
    while not hvd.poll(h):
        assert time.monotonic() < deadline, 'never completed'
        time.sleep(0.001)
    eq(hvd.synchronize(h), torch.full((3,), float(N)), 'polled result')
    # two-phase operations progress through poll() alone
    for i, make in enumerate((lambda: hvd.allgather_async(torch.full((R + 1,), R)),
                              lambda: hvd.alltoall_async(a2_input(R, torch.int64),
                                                         a2_splits(R)))):
        if R == 0:
            wait_count(st, 'poll2.%d' % i, N - 1)
        h = make()
        first = hvd.poll(h)
        if R != 0:
            st.add('poll2.%d' % i, 1)
            assert first is False
        while not hvd.poll(h):
            assert time.monotonic() < deadline, 'never completed'
            time.sleep(0.001)
        hvd.synchronize(h)


@check('barrier')
def _():
    # rank 0 enters 0.5 s after every other rank has started waiting
    st = side_channel()
    t0 = time.monotonic()
    if R == 0:
        wait_count(st, 'barrier', N - 1)
        time.sleep(0.5)
    else:
        st.add('barrier', 1)
    hvd.barrier()
    if R != 0:
        assert time.monotonic() - t0 >= 0.5, 'barrier returned before rank 0 arrived'
    hvd.barrier(process_set=hvd.global_process_set)


@check('objects')
def _():
    obj = {'rank': R, 'payload': list(range(R * 100)), 't': torch.arange(R + 1)}
    for root in range(N):
        got = hvd.broadcast_object(obj, root_rank=root)
        assert got['rank'] == root and got['payload'] == list(range(root * 100))
        eq(got['t'], torch.arange(root + 1), 'broadcast_object tensor')
    got = hvd.allgather_object(obj)
    assert [g['rank'] for g in got] == list(range(N))
    assert all(g['payload'] == list(range(q * 100)) for q, g in enumerate(got))
    assert hvd.allgather_object(None) == [None] * N
    assert hvd.broadcast_object(b'', 0) == b''


def batch(q, step, micro):
    g = torch.Generator().manual_seed(1000 * q + 10 * step + micro)
    return torch.randn(5, 4, generator=g), torch.randn(5, 2, generator=g)


def small_model():
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 2))


def train(steps=3, bpps=1, reference=False, **kw):
    """Trains small_model with DistributedOptimizer; with reference=True, computes the same
    thing in one process (every rank's batches, gradients averaged)."""
    model = small_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
    if not reference:
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                                       backward_passes_per_step=bpps, **kw)
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    for step in range(steps):
        opt.zero_grad()
        if reference:
            grads = None
            for q in range(N):
                model.zero_grad()
                for micro in range(bpps):
                    x, y = batch(q, step, micro)
                    F.mse_loss(model(x), y).backward()
                g = [p.grad.clone() for p in model.parameters()]
                grads = g if grads is None else [a + b for a, b in zip(grads, g)]
            for p, g in zip(model.parameters(), grads):
                p.grad = g / N
        else:
            for micro in range(bpps):
                x, y = batch(R, step, micro)
                F.mse_loss(model(x), y).backward()
        opt.step()
    return model, opt


def params_same(model, what):
    for k, p in model.named_parameters():
        same_everywhere(p, '%s %s' % (what, k))


def close_to(model, ref, tol, what):
    for (k, p), q in zip(model.named_parameters(), ref.parameters()):
        d = (p - q).abs().max().item()
        if d > tol:
            raise AssertionError('%s %s: %.3g from the one-process reference' % (what, k, d))


def model_for(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Tanh(),
                               torch.nn.Linear(8, 2))


@check('broadcast_parameters')
def _():
    m = model_for(100 + R)
    m.train()
    m(torch.randn(5, 4))            # moves BatchNorm's running stats and counter
    root = N - 1
    hvd.broadcast_parameters(m.state_dict(), root_rank=root)
    for k, v in m.state_dict().items():
        same_everywhere(v.float(), 'state_dict.' + k)
    m2 = model_for(200 + R)
    hvd.broadcast_parameters(m2.named_parameters(), root_rank=0)
    m0 = model_for(200)
    for (k, v), (_, w) in zip(m2.named_parameters(), m0.named_parameters()):
        eq(v.detach(), w.detach(), 'named_parameters ' + k)
    m3 = model_for(300 + R)
    hvd.broadcast_parameters(list(m3.parameters()), root_rank=0)
    for v, w in zip(m3.parameters(), model_for(300).parameters()):
        eq(v.detach(), w.detach(), 'parameters list')
    raises(ValueError, hvd.broadcast_parameters, 5, 0)
    raises(ValueError, hvd.broadcast_parameters, m.state_dict(), N)


class ScalarStateSGD(torch.optim.Optimizer):
    """Keeps Python scalars in its state (an int step, a float), as older optimizers did."""

    def __init__(self, params, lr):
        super().__init__(params, dict(lr=lr))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group['params']:
                st = self.state[p]
                st['step'] = st.get('step', 0) + 1
                st['scale'] = 0.5 * st['step']
                st.setdefault('buf', torch.zeros_like(p)).add_(p.grad)
                p.add_(st['buf'], alpha=-group['lr'])


@check('broadcast_optimizer_state')
def _():
    for make in (lambda ps, lr: torch.optim.Adam(ps, lr=lr, weight_decay=0.01),
                 lambda ps, lr: torch.optim.SGD(ps, lr=lr, momentum=0.9),
                 lambda ps, lr: torch.optim.Adagrad(ps, lr=lr),
                 lambda ps, lr: ScalarStateSGD(ps, lr=lr)):
        m = model_for(7)
        opt = make(m.parameters(), 0.01 * (R + 1))
        if R == 0:      # the root has trained; the others are fresh
            for s in range(2):
                opt.zero_grad()
                m(torch.randn(6, 4)).pow(2).sum().backward()
                opt.step()
        before = [p.detach().clone() for p in m.parameters()]
        hvd.broadcast_optimizer_state(opt, root_rank=0)
        for p, b in zip(m.parameters(), before):
            eq(p.detach(), b, 'parameters untouched')
        assert opt.param_groups[0]['lr'] == 0.01, opt.param_groups[0]['lr']
        st = opt.state_dict()['state']
        assert len(st) == len(list(m.parameters()))
        for pid in sorted(st):
            for k, v in sorted(st[pid].items()):
                if torch.is_tensor(v):
                    same_everywhere(v.float(), 'optimizer %s.%s' % (pid, k))
                else:
                    got = hvd.allgather_object(v)
                    assert all(g == got[0] for g in got), (k, got)
                    if k == 'step':
                        assert v == 2, 'scalar step %r, want the root\'s 2' % v
    # the usual Horovod script: a fresh wrapped optimizer (its state is made without allreduce)
    m = small_model()
    opt = hvd.DistributedOptimizer(torch.optim.Adam(m.parameters(), lr=0.001 * (R + 1)),
                                   named_parameters=m.named_parameters())
    hvd.broadcast_parameters(m.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert opt.param_groups[0]['lr'] == 0.001, opt.param_groups[0]['lr']
    assert all(p.grad is None for p in m.parameters())
    x, y = batch(R, 0, 0)
    F.mse_loss(m(x), y).backward()
    opt.step()
    params_same(m, 'wrapped Adam after broadcast_optimizer_state')
    m = model_for(7)
    raises(ValueError, hvd.broadcast_optimizer_state, torch.optim.LBFGS(m.parameters()), 0)


@check('DistributedOptimizer')
def _():
    ref, _ = train(reference=True)
    m, opt = train()
    params_same(m, 'none')
    close_to(m, ref, 1e-5, 'Compression.none')
    assert isinstance(opt, torch.optim.SGD) and type(opt).__name__ == 'SGD'
    m, _ = train(compression=hvd.Compression.fp16)
    params_same(m, 'fp16')
    close_to(m, ref, 2e-2, 'Compression.fp16')
    ref2, _ = train(bpps=2, reference=True)
    m, _ = train(bpps=2)
    params_same(m, 'bpps2')
    close_to(m, ref2, 1e-5, 'backward_passes_per_step=2')
    m, _ = train(bpps=2, compression=hvd.Compression.fp16)
    params_same(m, 'bpps2 fp16')
    m, _ = train(gradient_predivide_factor=2.0)
    params_same(m, 'predivide')
    close_to(m, ref, 1e-5, 'gradient_predivide_factor')
    m, _ = train(groups=2)
    params_same(m, 'groups=2')
    close_to(m, ref, 1e-5, 'groups=2')
    model = small_model()
    layers = list(model.parameters())
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(),
                                   groups=[[layers[0], layers[3]]])
    x, y = batch(R, 0, 0)
    F.mse_loss(model(x), y).backward()
    opt.step()
    params_same(model, 'groups=list')
    m, _ = train(op=hvd.Sum)
    params_same(m, 'Sum')


@check('DistributedOptimizer.sync')
def _():
    model = small_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    x, y = batch(R, 0, 0)
    F.mse_loss(model(x), y).backward()
    if N > 1:
        raises(AssertionError, opt.zero_grad)       # reductions in flight
    opt.synchronize()
    grads = [p.grad.clone() for p in model.parameters()]
    for g in grads:
        same_everywhere(g, 'synchronized gradient')
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)
    with opt.skip_synchronize():
        opt.step()
    params_same(model, 'clipped step')
    opt.zero_grad()
    # a parameter no rank computes a gradient for is reduced (as zeros) in synchronize()
    model = small_model()
    unused = torch.nn.Linear(2, 2)
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(list(model.parameters()) + list(unused.parameters()), lr=0.1),
        named_parameters=list(model.named_parameters()) +
        [('unused.' + k, v) for k, v in unused.named_parameters()])
    x, y = batch(R, 1, 0)
    F.mse_loss(model(x), y).backward()
    opt.step()
    params_same(model, 'after a step')
    if N > 1:       # at size 1 nothing is reduced (as Horovod): the gradient stays None
        eq(unused.weight.grad, torch.zeros(2, 2), 'unused parameter: zero gradient')
    # no names: the optimizer names them itself
    model = small_model()
    opt = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.01))
    for s in range(2):
        opt.zero_grad()
        x, y = batch(R, s, 0)
        F.mse_loss(model(x), y).backward()
        opt.step()
    params_same(model, 'Adam, unnamed')
    # sparse gradients (Embedding(sparse=True)), allgathered or densified
    for dense in (False, True):
        torch.manual_seed(5)
        emb = torch.nn.Embedding(10, 3, sparse=True)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(emb.parameters(), lr=0.5),
                                       named_parameters=emb.named_parameters(),
                                       sparse_as_dense=dense)
        idx = torch.tensor([R % 10, (R * 3 + 1) % 10, 7])
        emb(idx).sum().backward()
        opt.step()
        params_same(emb, 'sparse (sparse_as_dense=%s)' % dense)
        torch.manual_seed(5)
        want = torch.nn.Embedding(10, 3, sparse=True).weight.detach().clone()
        for q in range(N):
            for i in (q % 10, (q * 3 + 1) % 10, 7):
                want[i] -= 0.5 / N
        d = (emb.weight.detach() - want).abs().max().item()
        assert d < 1e-6, 'sparse update off by %g' % d


@check('join')
def _():
    for rep in range(2):
        steps = R + 1 + rep
        for i in range(steps):
            active = sum(1 for q in range(N) if q + 1 + rep > i)
            hs = [hvd.allreduce_async(torch.full((3,), float(k + 1)), op=hvd.Sum,
                                      name='join.%d' % k) for k in range(3)]
            for k in reversed(range(3)):
                eq(hvd.synchronize(hs[k]), torch.full((3,), float(active * (k + 1))), 'sum')
            # Average divides by the full size; joined ranks gave zeros
            eq(hvd.allreduce(torch.full((2,), float(N))), torch.full((2,), float(active)),
               'average with joined ranks')
            eq(hvd.grouped_allreduce([torch.ones(2), torch.ones(1, dtype=torch.int64)],
                                     op=hvd.Sum)[1], torch.tensor([active]), 'grouped')
        last = hvd.join()
        assert last == N - 1, 'join returned %d, want %d' % (last, N - 1)
    eq(hvd.allreduce(torch.ones(1), op=hvd.Sum), torch.full((1,), float(N)), 'after join')


@check('join.restricted')
def _():
    if N == 1:
        assert hvd.join() == 0
        raise Skip('needs 2 ranks')
    comm = STATE._state.comm
    saved_poll = comm.poll_s
    if R == 1 and N > 2:
        # rank 1 never looks at the store while waiting: it learns nothing of the join
        # itself (rank 2 tells rank 0 what to do), and must still refuse what Horovod refuses
        comm.poll_s = 1e6
    if R == 0:
        last = hvd.join()
    else:
        eq(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full((2,), float(N - 1)), 'sum')
        for name, f in (('allgather', lambda: hvd.allgather(torch.ones(R, 2))),
                        ('broadcast', lambda: hvd.broadcast(torch.ones(3), 1)),
                        ('alltoall', lambda: hvd.alltoall(a2_input(R, torch.float32),
                                                          a2_splits(R))),
                        ('reducescatter', lambda: hvd.reducescatter(torch.ones(N, 2)))):
            try:
                f()
                raise AssertionError('%s while rank 0 had joined did not raise' % name)
            except RuntimeError as e:
                assert 'not supported with Join' in str(e), (name, e)
        hvd.barrier()
        eq(hvd.allreduce(torch.ones(2), op=hvd.Min), torch.zeros(2), 'Min sees the zeros')
        comm.poll_s = saved_poll
        last = hvd.join()
    got = hvd.allgather(torch.tensor([last]))
    assert all(int(v) == int(got[0]) for v in got) and int(got[0]) != 0, got


@check('join.optimizer')
def _():
    # uneven number of batches per rank, as in Horovod's examples
    model = small_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    for step in range(R + 2):
        opt.zero_grad()
        x, y = batch(R, step, 0)
        F.mse_loss(model(x), y).backward()
        opt.step()
    last = hvd.join()
    assert last == N - 1, last
    hvd.broadcast_parameters(model.state_dict(), root_rank=last)
    params_same(model, 'after join')


@check('bad_arguments')
def _():
    t = torch.ones(4)
    raises(ValueError, hvd.allreduce, [1, 2])
    raises(ValueError, hvd.allreduce_async, 'x')
    raises(ValueError, hvd.allreduce, t, op=hvd.Adasum)
    raises(ValueError, hvd.allreduce, t, op=99)
    raises(ValueError, hvd.allreduce_async_, t, op=hvd.Adasum)
    raises(ValueError, hvd.allreduce, torch.ones(2, dtype=torch.bool))
    e = raises(ValueError, hvd.allreduce, t.to_sparse())
    assert 'CPU only' in str(e) or 'dense' in str(e), e
    e = raises(ValueError, hvd.allreduce, torch.ones(2, device='meta'))
    assert 'CPU only' in str(e), e
    raises(ValueError, hvd.grouped_allreduce, t)
    raises(ValueError, hvd.grouped_allreduce, [t, 'x'])
    for root in (-1, N, '0', None):
        raises(ValueError, hvd.broadcast, t, root)
        raises(ValueError, hvd.broadcast_async_, t, root)
    raises(ValueError, hvd.broadcast_object, 1, N)
    raises(ValueError, hvd.allgather, torch.tensor(1.0))
    raises(ValueError, hvd.allgather_async, 3)
    x = torch.ones(N + 1, 2)
    raises(ValueError, hvd.alltoall, x, splits=[1] * (N + 1))
    raises(ValueError, hvd.alltoall, x, splits=[-1] + [1] * (N - 1))
    raises(ValueError, hvd.alltoall, x, splits=[N + 2] + [0] * (N - 1))
    raises(ValueError, hvd.alltoall, x, splits=torch.ones(N))
    raises(ValueError, hvd.alltoall, torch.tensor(1.0))
    if N > 1:
        raises(ValueError, hvd.alltoall, x)         # N+1 rows do not split evenly
    raises(ValueError, hvd.reducescatter, t, op=hvd.Min)
    raises(ValueError, hvd.reducescatter, torch.tensor(1.0))
    raises(ValueError, hvd.sparse_allreduce_async, t, 'x', hvd.Sum)
    raises(ValueError, hvd.poll, 10 ** 9)
    assert hvd.synchronize(10 ** 9) is None
    raises(ValueError, hvd.init, comm=[0])
    m = small_model()
    sgd = torch.optim.SGD(m.parameters(), lr=0.1)
    raises(ValueError, hvd.DistributedOptimizer, sgd, backward_passes_per_step=0)
    raises(ValueError, hvd.DistributedOptimizer, sgd, op=hvd.Sum, gradient_predivide_factor=2.0)
    raises(ValueError, hvd.DistributedOptimizer, sgd, op=hvd.Adasum)
    raises(ValueError, hvd.DistributedOptimizer, sgd,
           named_parameters=[('a', p) for p in m.parameters()])
    raises(ValueError, hvd.DistributedOptimizer, sgd,
           named_parameters=list(m.named_parameters())[:1])
    raises(ValueError, hvd.DistributedOptimizer, sgd, groups=[[1]])
    eq(hvd.allreduce(torch.ones(1), op=hvd.Sum), torch.full((1,), float(N)), 'still in step')


class FakeWork(object):
    """A Work that completes after `delay` seconds, then fails with `error` if given."""

    def __init__(self, delay, error=None):
        self.t_done = time.monotonic() + delay
        self.error = error

    def is_completed(self):
        return time.monotonic() >= self.t_done

    def wait(self, timeout=None):
        left = self.t_done - time.monotonic()
        if left > 0:
            if timeout is not None and timeout.total_seconds() < left:
                time.sleep(timeout.total_seconds())
                raise RuntimeError('Operation timed out!')
            time.sleep(left)
        if self.error:
            raise RuntimeError(self.error)
        return True


@check('names')
def _():
    # the names given to cohort.torch._names.name_next (cohort's timeline) before each call
    mod = COMM
    seen = []
    saved = mod._name_next
    mod._name_next = lambda name, group=None: seen.append(name)
    try:
        hvd.allreduce(torch.ones(2), name='x')
        hvd.broadcast_(torch.ones(2), 0, name='b')
        hvd.allgather(torch.ones(1, 2), name='g')
        hvd.alltoall(torch.ones(N, 1), name='a')
        hvd.allreduce(torch.ones(2))
        assert seen[:7] == ['allreduce.x', 'broadcast.b', 'allgather.g.sizes', 'allgather.g',
                            'alltoall.a.splits', 'alltoall.a', seen[6]], seen
        assert seen[6].startswith('allreduce.noname.'), seen
        del seen[:]
        model = small_model()
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       named_parameters=model.named_parameters())
        x, y = batch(R, 0, 0)
        F.mse_loss(model(x), y).backward()
        opt.step()
        want = {'allreduce.' + k for k, _ in model.named_parameters()} if N > 1 else set()
        assert set(seen) == want and len(seen) == len(want), seen
    finally:
        mod._name_next = saved


@check('failed_collective')
def _():
    # every rank swaps torch's all_reduce for a fake one for two calls: nothing is sent, so the
    # ranks stay in step
    real = dist.all_reduce
    try:
        dist.all_reduce = lambda *a, **k: FakeWork(0.0, 'gloo: connection reset by peer')
        h = hvd.allreduce_async(torch.ones(2), name='w1')
        assert hvd.poll(h) is True          # done (failed): synchronize will not block
        e = raises(hvd.HorovodInternalError, hvd.synchronize, h)
        assert str(e) == 'allreduce.w1: gloo: connection reset by peer', str(e)
        assert hvd.synchronize(h) is None
        e = raises(RuntimeError, hvd.allreduce, torch.ones(2), name='w2')
        assert str(e).startswith('allreduce.w2: gloo'), str(e)
        # a slow operation: the wait loop's timeouts are not errors
        dist.all_reduce = lambda *a, **k: FakeWork(0.3)
        t0 = time.monotonic()
        h = hvd.allreduce_async(torch.ones(2), op=hvd.Sum)
        assert hvd.poll(h) is False
        hvd.synchronize(h)
        assert time.monotonic() - t0 >= 0.3
    finally:
        dist.all_reduce = real
    eq(hvd.allreduce(torch.ones(1), op=hvd.Sum), torch.full((1,), float(N)), 'still in step')


@check('check_mode')
def _():
    if N == 1:
        raise Skip('needs 2 ranks')
    STATE._state.check = True         # as COHORT_HVD_CHECK=1
    try:
        eq(hvd.allreduce(torch.ones(3), op=hvd.Sum, name='fine'), torch.full((3,), float(N)), 'ok')
        eq(hvd.broadcast(torch.full((2,), R), 0), torch.zeros(2, dtype=torch.int64), 'bc ok')
        e = raises(RuntimeError, hvd.allreduce, torch.ones(3 if R else 4), name='shape')
        assert 'shape' in str(e) and 'Mismatched tensor shapes' in str(e), e
        e = raises(RuntimeError, hvd.allreduce, torch.ones(3), op=hvd.Sum if R else hvd.Max)
        assert 'Mismatched reduction ops' in str(e), e
        e = raises(RuntimeError, hvd.allreduce, torch.ones(3), name='n%d' % min(R, 1))
        assert 'same order' in str(e), e
        e = raises(RuntimeError, hvd.broadcast, torch.ones(3), min(R, 1))
        assert 'root' in str(e), e
    finally:
        STATE._state.check = False
    eq(hvd.allreduce(torch.ones(1), op=hvd.Sum), torch.full((1,), float(N)), 'after mismatches')


@check('process_set')
def _():
    evens = hvd.add_process_set(list(range(0, N, 2)))
    odds = hvd.add_process_set(list(range(1, N, 2))) if N > 1 else None
    mine = evens if R % 2 == 0 else odds
    members = mine.ranks
    assert mine.included() and mine.size() == len(members) and mine.rank() == members.index(R)
    got = hvd.allreduce(torch.tensor([R + 1]), op=hvd.Sum, process_set=mine)
    eq(got, torch.tensor([sum(q + 1 for q in members)]), 'allreduce on a process set')
    got = hvd.allgather(torch.full((R + 1,), R), process_set=mine)
    eq(got, torch.cat([torch.full((q + 1,), q) for q in members]), 'allgather on a set')
    got = hvd.broadcast(torch.tensor([R]), root_rank=len(members) - 1, process_set=mine)
    eq(got, torch.tensor([members[-1]]), 'broadcast root is a rank within the set')
    hvd.barrier(process_set=mine)
    other = odds if mine is evens else evens
    if other is not None:
        raises(ValueError, hvd.allreduce, torch.ones(1), process_set=other)
    assert hvd.remove_process_set(evens)
    if odds is not None:
        assert hvd.remove_process_set(odds)
    eq(hvd.allreduce(torch.ones(1), op=hvd.Sum), torch.full((1,), float(N)), 'global after')


@check('shutdown')
def _():
    hvd.shutdown()
    assert not hvd.is_initialized()
    raises(ValueError, hvd.size)
    raises(ValueError, hvd.allreduce, torch.ones(1))
    hvd.init()          # the default group, created here, is still there
    eq(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full((2,), float(N)), 'after re-init')


log('%s: %d check(s) failed: %s' % ('FAIL' if FAILED else 'ok', len(FAILED), ', '.join(FAILED))
    if FAILED else 'all checks passed in %.1f s (rank %d of %d, %s)'
    % (time.monotonic() - T0, R, N, BACKEND))
if not FAILED:
    # tear down in step: a group left to the interpreter's exit can abort in its destructor
    hvd.barrier()
    hvd.shutdown()
    dist.destroy_process_group()
sys.exit(1 if FAILED else 0)
