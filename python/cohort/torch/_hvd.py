# SPDX-License-Identifier: BSD-3-Clause
"""Horovod-style API of cohort, layered on torch.distributed (``import cohort.torch as hvd``).

    import cohort.torch as hvd
    hvd.init()                                   # init_process_group("cohort") from env://
    torch.manual_seed(1)
    model = ...
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_optimizer_state(opt, root_rank=0)

Every operation runs on a torch.distributed process group: the default group (``init()``
creates it with the "cohort" backend when nobody has, otherwise uses whatever backend it has)
or the group behind a ProcessSet. Operations are asynchronous: each one issues torch's
``async_op=True`` collectives and a handle keeps their Work objects; ``poll`` asks
``Work.is_completed()``, ``synchronize`` waits. Only dense CPU tensors are accepted.

Where this differs from horovod.torch (each function's docstring says more):

* Matching. Horovod's coordinator matches operations across ranks by *name*, in any order.
  Here, as everywhere in torch.distributed, the ranks of a process set must issue their
  operations in the *same order*; names only label them (cohort's timeline shows them, see
  ``cohort.torch._names``). Gradient hooks of DistributedOptimizer fire in the same order on
  every rank as long as every rank runs the same graph.
* Mismatches between ranks. allgather, grouped_allgather and alltoall always detect a
  different dtype or trailing shape on another rank (their first phase exchanges shapes) and
  raise RuntimeError on every rank. allreduce/broadcast leave it to the backend (the cohort
  backend reports mismatches; gloo aborts the process) unless ``COHORT_HVD_CHECK=1``, which adds
  one small allgather per operation comparing dtype, shape, op, root and name on all ranks.
* Argument errors (ValueError) are raised on the rank that made them, before anything is sent;
  if only some ranks raise, the others wait until the backend's timeout (COHORT_TIMEOUT).
* Adasum is not supported (ValueError). reducescatter is an allreduce followed by taking this
  rank's rows (same result as Horovod, not its bandwidth). Data-moving operations (broadcast,
  allgather, alltoall) send raw bytes, so they accept every dtype, bool and bfloat16 included,
  on every backend; allreduce accepts the dtypes the backend can reduce.
* Two phases. allgather and alltoall first exchange shapes, then the data. The second phase
  is issued by poll() once the first is done, or by the next operation issued, which therefore
  waits for that first phase: every rank must issue the same sequence of collectives.
* join() keeps Horovod's semantics (joined ranks contribute zeros to the others' allreduces
  until every rank has joined; broadcast/allgather/alltoall/reducescatter issued while a rank
  has joined raise HorovodInternalError, as in Horovod); see ``join`` for how, its costs, and
  its requirement on the backend (c10d's Work.wait(timeout), which gloo and cohort meet).
* Process sets: ProcessSet / add_process_set / remove_process_set make torch.distributed
  subgroups (dist.new_group); join() covers the global set only.
* Objects (broadcast_object, allgather_object) are pickled with cloudpickle when installed,
  else pickle. DistributedOptimizer keeps the wrapped optimizer's state and defaults, and
  broadcast_optimizer_state restores parameters after the step that creates a new optimizer's
  state (Horovod leaves that step's weight decay applied).
* start_timeline/stop_timeline only warn: cohort's timeline is set with COHORT_TIMELINE.
  HorovodInternalError (a RuntimeError) is raised for failed operations, prefixed with the
  operation's name. Elastic training (hvd.elastic), SyncBatchNorm and Adasum are not provided.

Environment: COHORT_TIMEOUT (seconds; the group's timeout when init() creates the group),
COHORT_HVD_CHECK=1 (compare every allreduce/broadcast across ranks first), COHORT_HVD_JOIN_POLL
(seconds; see join), LOCAL_RANK / LOCAL_WORLD_SIZE (else computed from host names).
"""
import collections
import datetime
import importlib
import itertools
import os
import socket
import threading
import time
import warnings
import zlib

import torch
import torch.distributed as dist

try:  # labels for cohort's timeline exist once the C++ extension is built
    importlib.import_module('cohort.torch._backend')
    from cohort.torch._names import name_next as _name_next
except ImportError:  # tests load this file before the extension exists
    _name_next = None

__all__ = [
    # basics
    'init', 'shutdown', 'is_initialized', 'rank', 'size', 'local_rank', 'local_size',
    'cross_rank', 'cross_size', 'is_homogeneous', 'mpi_threads_supported', 'mpi_enabled',
    'mpi_built', 'gloo_enabled', 'gloo_built', 'nccl_built', 'ddl_built', 'ccl_built',
    'cuda_built', 'rocm_built', 'cohort_built', 'start_timeline', 'stop_timeline',
    # reduction ops, errors, compression, process sets
    'Average', 'Sum', 'Adasum', 'Min', 'Max', 'Product', 'HorovodInternalError',
    'Compression', 'ProcessSet', 'global_process_set', 'add_process_set', 'remove_process_set',
    # collectives
    'allreduce', 'allreduce_', 'allreduce_async', 'allreduce_async_',
    'grouped_allreduce', 'grouped_allreduce_', 'grouped_allreduce_async',
    'grouped_allreduce_async_', 'sparse_allreduce_async',
    'allgather', 'allgather_async', 'grouped_allgather', 'grouped_allgather_async',
    'broadcast', 'broadcast_', 'broadcast_async', 'broadcast_async_',
    'alltoall', 'alltoall_async', 'reducescatter', 'reducescatter_async',
    'grouped_reducescatter', 'grouped_reducescatter_async',
    'poll', 'synchronize', 'join', 'barrier',
    # functions, optimizer
    'broadcast_object', 'allgather_object', 'broadcast_parameters',
    'broadcast_optimizer_state', 'DistributedOptimizer',
]

# Reduction operations (same values as Horovod's).
Average, Sum, Adasum, Min, Max, Product = 0, 1, 2, 3, 4, 5
_OP_NAMES = {Average: 'Average', Sum: 'Sum', Adasum: 'Adasum', Min: 'Min', Max: 'Max',
             Product: 'Product'}
_TORCH_OP = {Average: 'sum', Sum: 'sum', Min: 'min', Max: 'max', Product: 'product'}
_REDUCE_OPS = {'sum': dist.ReduceOp.SUM, 'min': dist.ReduceOp.MIN, 'max': dist.ReduceOp.MAX,
               'product': dist.ReduceOp.PRODUCT}


class HorovodInternalError(RuntimeError):
    """A collective failed (or ranks disagreed about it); the message starts with the name of
    the operation, then the backend's own message."""


# --------------------------------------------------------------------------------------------
# Compression (as Horovod's: fp16 casts floating-point tensors to float16 for the wire)

class Compressor(object):
    """Interface for compressing and decompressing a tensor."""
    @staticmethod
    def compress(tensor):
        """Returns the tensor to send and the context needed to decompress it."""
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        """Returns the tensor restored from what was received."""
        raise NotImplementedError


class NoneCompressor(Compressor):
    """No compression (the default)."""
    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class FP16Compressor(Compressor):
    """Floating-point tensors travel as float16 and are cast back; others are unchanged."""
    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating_point and tensor.dtype != torch.float16:
            return tensor.type(torch.float16), tensor.dtype
        return tensor, tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        if ctx is not None and ctx.is_floating_point and tensor.dtype != ctx:
            return tensor.type(ctx)
        return tensor


class Compression(object):
    """Gradient compression used by allreduce and DistributedOptimizer."""
    none = NoneCompressor
    fp16 = FP16Compressor


# --------------------------------------------------------------------------------------------
# dtypes

_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.uint8,
           torch.int8, torch.int16, torch.int32, torch.int64, torch.bool, torch.complex64,
           torch.complex128]
_DTYPE_CODE = {dt: i + 1 for i, dt in enumerate(_DTYPES)}    # 0 means "a joined rank"
_DTYPE_BY_CODE = {i + 1: dt for i, dt in enumerate(_DTYPES)}
_DTYPE_BY_NAME = {str(dt)[len('torch.'):]: dt for dt in _DTYPES}
_REDUCIBLE = {torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.uint8,
              torch.int8, torch.int16, torch.int32, torch.int64}


def _dtype_name(dt):
    return str(dt)[len('torch.'):]


def _as_bytes(t):
    """A flat uint8 view of a contiguous tensor (any dtype, 0-dim included)."""
    flat = t.reshape(-1)
    return flat if flat.dtype == torch.uint8 else flat.view(torch.uint8)


def _shape_hash(dims):
    h = len(dims)
    for d in dims:
        h = (h * 1000003 + int(d)) % (1 << 61)
    return h


def _name_hash(name):
    return zlib.crc32(name.encode()) if name else 0


# --------------------------------------------------------------------------------------------
# State

class _State(object):
    def __init__(self):
        self.reset()

    def reset(self):
        self.initialized = False
        self.own_pg = False
        self.rank = 0
        self.size = 1
        self.local_rank = 0
        self.local_size = 1
        self.cross_rank = 0
        self.cross_size = 1
        self.homogeneous = True
        self.comm = None
        self.check = False
        self.process_sets = {}


_state = _State()
_lock = threading.RLock()
_handle_map = {}             # handle id -> _Handle
_handle_ids = itertools.count(1)
_pending = None              # the one handle whose next phase is not issued yet


def _need_init():
    if not _state.initialized:
        raise ValueError('cohort.torch has not been initialized; use hvd.init().')


# --------------------------------------------------------------------------------------------
# The communicator of one process group: issues torch collectives in order, numbers them, waits
# on them, and runs join()'s protocol.

_JOIN_POLL_S = 0.05


class _Op(object):
    __slots__ = ('idx', 'work', 'full', 'out', 'inp', 'seen')

    def __init__(self, idx, work, full, out, inp):
        self.idx = idx      # position in this group's sequence of collectives
        self.work = work
        self.full = full    # completing it proves every rank issued it (all but broadcast)
        self.out = out      # output buffer, when not the input
        self.inp = inp      # kept alive until the operation is done
        self.seen = None    # number of the first store read made after it was seen complete


class _Comm(object):
    """Issues the collectives of one process group and keeps what join() needs.

    Every collective issued through it gets the next index of the group's sequence (the same on
    every rank) and a one-line description ("meta": kind, sizes, dtype, reduction, name), kept
    in a log until an operation proving that every rank is past it completes. join() uses the
    log and the store (see join())."""

    def __init__(self, group, rank, size, store, key):
        self.group = group              # None: the default group
        self.rank = rank                # rank in the group
        self.size = size
        self.global_ranks = None        # group rank -> global rank (None: identity)
        self.store_base = store
        self.store = dist.PrefixStore('cohort.hvd.join/%s/' % key, store) \
            if store is not None else None
        self.seq = 0
        self.log = collections.deque()
        self.epoch = 0
        self.reads = 0                  # store reads of the join count so far
        self.clean_upto = 0             # the last read that found no rank joined
        self.poll_s = float(os.environ.get('COHORT_HVD_JOIN_POLL', _JOIN_POLL_S))
        self._reset_join()

    def _reset_join(self):
        self.join_active = False        # some rank has joined in this epoch
        self.known_joined = 0
        self.min_join_c = None
        self.last_check = time.monotonic()

    def _g(self, group_rank):
        return group_rank if self.global_ranks is None else self.global_ranks[group_rank]

    # -- issuing ------------------------------------------------------------------------------
    def _issue(self, meta, name, full, call, inp, out=None):
        if _name_next is not None and name is not None:
            _name_next(name, self.group)
        work = call()
        idx = self.seq
        self.seq += 1
        line = meta if name is None else meta + ' ' + name
        self.log.append((idx, line))
        if self.join_active:
            self._publish(idx, line)
        return _Op(idx, work, full, out, inp)

    def allreduce(self, flat, torch_op, name):
        meta = 'ar %s %d %s' % (_dtype_name(flat.dtype), flat.numel(), torch_op)
        return self._issue(meta, name, True, lambda: dist.all_reduce(
            flat, op=_REDUCE_OPS[torch_op], group=self.group, async_op=True), flat)

    def broadcast(self, u8, root, name):
        return self._issue('bc %d %d' % (u8.numel(), root), name, False, lambda: dist.broadcast(
            u8, src=self._g(root), group=self.group, async_op=True), u8)

    def allgather(self, u8, name):
        """Gathers equal-size byte buffers; returns an _Op whose out is [size, n] uint8."""
        n = u8.numel()
        out = torch.empty((self.size, n), dtype=torch.uint8)
        return self._issue('ag %d' % n, name, True, lambda: dist.all_gather(
            list(out.unbind(0)), u8, group=self.group, async_op=True), u8, out)

    def alltoall(self, u8, per_peer, name):
        """Equal-split exchange of per_peer bytes with every rank; out is [size*per_peer]."""
        out = torch.empty(self.size * per_peer, dtype=torch.uint8)
        return self._issue('a2 %d' % per_peer, name, True, lambda: dist.all_to_all_single(
            out, u8, group=self.group, async_op=True), u8, out)

    def alltoallv(self, out, u8, out_splits, in_splits, row_bytes, name):
        return self._issue('a2v %d' % row_bytes, name, True, lambda: dist.all_to_all_single(
            out, u8, out_splits, in_splits, group=self.group, async_op=True), u8, out)

    def barrier(self, name):
        return self._issue('bar', name, True,
                           lambda: dist.barrier(group=self.group, async_op=True), None)

    # -- completion -----------------------------------------------------------------------
    def _completed(self, op):
        if op.full:
            while self.log and self.log[0][0] <= op.idx:
                self.log.popleft()

    def wait(self, op):
        """Waits for op; while waiting, looks now and then whether a rank has joined (a joined
        rank needs the descriptions of the operations it must take part in)."""
        w = op.work
        wait_s = self.poll_s
        while True:
            try:
                if w.wait(datetime.timedelta(seconds=wait_s)) is not False:
                    break
            except RuntimeError:
                if w.is_completed():
                    w.wait()          # raises the operation's own error
                    break
            self.check_join(force=True)
            # a long operation: look less often (the store serves every rank)
            wait_s = min(wait_s * 2, max(self.poll_s, 1.0))
        self._completed(op)

    def test(self, op):
        if op.work.is_completed():
            op.work.wait()            # returns at once, or raises the operation's error
            self._completed(op)
            return True
        self.check_join()
        return False

    # -- join -----------------------------------------------------------------------------
    def _publish(self, idx, line):
        self.store.set('%d/op/%d' % (self.epoch, idx), line)

    def check_join(self, force=False):
        """Reads how many ranks have joined; on the first news, publishes the log."""
        if self.store is None:
            return
        now = time.monotonic()
        if not force and now - self.last_check < self.poll_s:
            return
        self.last_check = now
        # broadcasts and reducescatters seen complete now are covered by this read
        for h in list(_handle_map.values()):
            if h.store_check and h.comm is self and h.cont is None:
                for op in h.ops:
                    if op.seen is None and op.work.is_completed():
                        op.seen = self.reads + 1
        e = self.epoch
        n = self.store.add('%d/count' % e, 0)
        self.reads += 1
        if n == 0:
            self.clean_upto = self.reads
        if n <= self.known_joined:
            return
        for i in range(self.known_joined + 1, n + 1):
            c = int(self.store.get('%d/c/%d' % (e, i)))
            self.min_join_c = c if self.min_join_c is None else min(self.min_join_c, c)
        self.known_joined = n
        if not self.join_active:
            self.join_active = True
            for idx, line in list(self.log):
                self._publish(idx, line)

    def join_affected(self, h):
        """Whether a rank had joined by the (completed) operation of handle h: no if a read of
        the store made after h's operations were seen complete found no rank joined; else from
        the join points in the store."""
        if self.store is None:
            return False
        for op in h.ops:
            if op.seen is None and op.work.is_completed():
                op.seen = self.reads + 1
        for attempt in range(2):
            if all(op.seen is not None and op.seen <= self.clean_upto for op in h.ops):
                return False
            if attempt == 0:
                self.check_join(force=True)
        return self.min_join_c is not None and self.min_join_c <= h.first_idx

    def join(self):
        if self.store is None:
            raise HorovodInternalError('join: the process group has no store; cohort.torch '
                                       'needs one (init_process_group with env:// or a store)')
        e = self.epoch
        my_c = self.seq
        n = self.store.add('%d/count' % e, 1)
        self.store.set('%d/c/%d' % (e, n), str(my_c))
        self.known_joined = max(self.known_joined, n - 1)
        self.min_join_c = my_c if self.min_join_c is None else min(self.min_join_c, my_c)
        # A rank joining later at an earlier point of the sequence replays operations this
        # rank issued: they stay in the log until an operation completes that needs it.
        self.join_active = True
        for idx, line in list(self.log):
            self._publish(idx, line)
        if n == self.size:
            cs = [int(self.store.get('%d/c/%d' % (e, i))) for i in range(1, n + 1)]
            self.store.set('%d/op/%d' % (e, max(cs)), 'done %d' % self.rank)
        k = my_c
        works = collections.deque()
        last_a2 = None
        while True:
            line = self.store.get('%d/op/%d' % (e, k)).decode()
            kind, rest = (line.split(' ', 1) + [''])[:2]
            if kind == 'done':
                last = int(rest)
                break
            work, out = self._replay(kind, rest, last_a2)
            if kind == 'a2':
                last_a2 = (work, out)
            works.append(work)
            while works and works[0].is_completed():
                works.popleft().wait()
            k += 1
        for w in works:
            w.wait()
        self.seq = k
        self.epoch += 1
        self.log.clear()
        self._reset_join()
        return last

    def _replay(self, kind, rest, last_a2):
        """Takes part, contributing zeros, in an operation the other ranks issued."""
        g = self.group

        def named(nfields):
            f = rest.split(' ', nfields)
            name = f[nfields] if len(f) > nfields else None
            if _name_next is not None and name:
                _name_next(name, g)
            return f[:nfields]
        if kind == 'ar':
            dt, numel, op = named(3)
            buf = torch.zeros(int(numel), dtype=_DTYPE_BY_NAME[dt])
            return dist.all_reduce(buf, op=_REDUCE_OPS[op], group=g, async_op=True), None
        if kind == 'bc':
            nbytes, root = named(2)
            buf = torch.zeros(int(nbytes), dtype=torch.uint8)
            return dist.broadcast(buf, src=self._g(int(root)), group=g, async_op=True), None
        if kind == 'ag':
            n = int(named(1)[0])
            out = torch.empty((self.size, n), dtype=torch.uint8)
            return dist.all_gather(list(out.unbind(0)), torch.zeros(n, dtype=torch.uint8),
                                   group=g, async_op=True), out
        if kind == 'a2':
            per = int(named(1)[0])
            out = torch.empty(self.size * per, dtype=torch.uint8)
            return dist.all_to_all_single(out, torch.zeros(self.size * per, dtype=torch.uint8),
                                          group=g, async_op=True), out
        if kind == 'a2v':
            row_bytes = int(named(1)[0])
            w, desc = last_a2
            w.wait()
            counts = desc.view(torch.int64).view(self.size, _A2_DESC)[:, 0]
            out_splits = [int(c) * row_bytes for c in counts]
            out = torch.empty(sum(out_splits), dtype=torch.uint8)
            return dist.all_to_all_single(out, torch.empty(0, dtype=torch.uint8), out_splits,
                                          [0] * self.size, group=g, async_op=True), out
        if kind == 'bar':
            named(0)
            return dist.barrier(group=g, async_op=True), None
        raise HorovodInternalError('join: unknown operation %r from another rank' % kind)


# --------------------------------------------------------------------------------------------
# Process sets

class ProcessSet(object):
    """A subset of the ranks, as Horovod's ProcessSet: ``ProcessSet([0, 2])``, registered with
    ``add_process_set`` (or ``init(process_sets=[...])``) by every rank. Its operations run on a
    torch.distributed group made with ``dist.new_group``; ``root_rank`` arguments are ranks
    within the set, as in Horovod."""

    def __init__(self, ranks_or_comm):
        if not isinstance(ranks_or_comm, (list, tuple, range)):
            raise ValueError('cohort.torch: ProcessSet takes a list of ranks '
                             '(MPI communicators are not supported)')
        self.ranks = sorted(int(r) for r in ranks_or_comm)
        self.process_set_id = None
        self._comm = None

    def _get_comm(self):
        if self._comm is None:
            if self.process_set_id == 0:
                _need_init()
                return _state.comm
            raise ValueError('cohort.torch: the process set %r has not been registered; use '
                             'hvd.add_process_set' % (self.ranks,))
        return self._comm

    def size(self):
        return self._get_comm().size if self.included() else None

    def rank(self):
        return self._get_comm().rank if self.included() else None

    def included(self):
        _need_init()
        if self.process_set_id == 0:
            return True
        return _state.rank in self.ranks

    def __repr__(self):
        return 'ProcessSet(process_set_id=%r, ranks=%r)' % (self.process_set_id, self.ranks)


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0


def add_process_set(process_set):
    """Registers a process set (a ProcessSet or a list of ranks); every rank must call it, in
    the same order. Returns the ProcessSet."""
    _need_init()
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    if ps.process_set_id is not None:
        raise ValueError('cohort.torch: process set %r is registered already' % (ps,))
    if not ps.ranks or ps.ranks[0] < 0 or ps.ranks[-1] >= _state.size or \
            len(set(ps.ranks)) != len(ps.ranks):
        raise ValueError('cohort.torch: bad ranks for a process set: %r' % (ps.ranks,))
    for other in _state.process_sets.values():
        if other.ranks == ps.ranks:
            raise ValueError('cohort.torch: a process set with ranks %r exists already'
                             % (ps.ranks,))
    with _lock:
        _flush()
        ps_id = max([0] + list(_state.process_sets)) + 1
        group = dist.new_group(ps.ranks)
        ps.process_set_id = ps_id
        if _state.rank in ps.ranks:
            comm = _Comm(group, ps.ranks.index(_state.rank), len(ps.ranks),
                         _state.comm.store_base, 'ps%d' % ps_id)
            comm.global_ranks = list(ps.ranks)
            ps._comm = comm
        _state.process_sets[ps_id] = ps
    return ps


def remove_process_set(process_set):
    """Unregisters a process set (every rank must call it). Returns True if it was known."""
    _need_init()
    ps = _state.process_sets.pop(getattr(process_set, 'process_set_id', None), None)
    if ps is None:
        return False
    with _lock:
        _flush()
        if ps._comm is not None and ps._comm.group is not None:
            try:
                dist.destroy_process_group(ps._comm.group)
            except Exception:   # noqa: BLE001  (older torch versions refuse subgroups)
                pass
        ps._comm = None
        ps.process_set_id = None
    return True


def _comm_for(process_set):
    _need_init()
    if process_set is None or process_set is global_process_set or \
            getattr(process_set, 'process_set_id', None) == 0:
        return _state.comm
    if not isinstance(process_set, ProcessSet):
        raise ValueError('cohort.torch: process_set must be a ProcessSet')
    if not process_set.included():
        raise ValueError('cohort.torch: rank %d is not a member of %r'
                         % (_state.rank, process_set))
    return process_set._get_comm()


# --------------------------------------------------------------------------------------------
# Basics

def init(comm=None, process_sets=None):
    """Initializes cohort.torch. If torch.distributed has no default group yet, creates it with
    ``init_process_group("cohort")`` from env:// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT;
    the timeout from COHORT_TIMEOUT seconds when set); otherwise uses the existing default group
    whatever its backend. local_rank/local_size come from LOCAL_RANK/LOCAL_WORLD_SIZE when set,
    otherwise from comparing host names (one exchange at init). Calling it again does nothing.
    ``comm`` (an MPI communicator or a list of ranks in Horovod) is not supported."""
    if comm is not None:
        raise ValueError('cohort.torch: init(comm=...) is not supported; every process of the '
                         'job takes part (env://)')
    with _lock:
        if _state.initialized:
            return
        own = False
        if not dist.is_initialized():
            kwargs = {}
            t = os.environ.get('COHORT_TIMEOUT')
            if t:
                kwargs['timeout'] = datetime.timedelta(seconds=float(t))
            dist.init_process_group('cohort', init_method='env://', **kwargs)
            own = True
        try:
            store = dist.distributed_c10d._get_default_store()
        except Exception:   # noqa: BLE001  (e.g. MPI has none)
            store = None
        r, n = dist.get_rank(), dist.get_world_size()
        _state.reset()
        _state.own_pg = own
        _state.rank, _state.size = r, n
        _state.comm = _Comm(None, r, n, store, 'world')
        _state.check = os.environ.get('COHORT_HVD_CHECK', '0') not in ('', '0')
        _state.initialized = True
        try:
            _init_topology()
        except BaseException:
            _state.reset()
            raise
        if process_sets not in (None, 'dynamic'):
            for ps in process_sets:
                add_process_set(ps)


def _init_topology():
    env_lr = os.environ.get('LOCAL_RANK')
    env_ls = os.environ.get('LOCAL_WORLD_SIZE')
    host = socket.gethostname()
    if _state.size == 1:
        infos = [(host, 0, 1)]
    else:
        mine = (host, int(env_lr) if env_lr else None, int(env_ls) if env_ls else None)
        infos = allgather_object(mine, name='cohort.hvd.init')
    hosts = [i[0] for i in infos]
    if all(i[1] is not None and i[2] is not None for i in infos):
        local_ranks = [i[1] for i in infos]
        local_sizes = [i[2] for i in infos]
    else:
        local_ranks = [hosts[:j].count(h) for j, h in enumerate(hosts)]
        local_sizes = [hosts.count(h) for h in hosts]
    r = _state.rank
    _state.local_rank = local_ranks[r]
    _state.local_size = local_sizes[r]
    same = [j for j in range(_state.size) if local_ranks[j] == local_ranks[r]]
    _state.cross_rank = same.index(r)
    _state.cross_size = len(same)
    _state.homogeneous = len(set(local_sizes)) == 1


def shutdown():
    """Shuts cohort.torch down: outstanding handles are forgotten, process sets unregistered,
    and the default group destroyed if init() created it. init() may be called again."""
    global _pending
    with _lock:
        if not _state.initialized:
            return
        _handle_map.clear()
        _pending = None
        for ps in list(_state.process_sets.values()):
            ps._comm = None
            ps.process_set_id = None
        if _state.own_pg and dist.is_initialized():
            dist.destroy_process_group()
        _state.reset()


def is_initialized():
    """Whether init() has been called (and not shutdown())."""
    return _state.initialized


def rank():
    """This process's rank in the job."""
    _need_init()
    return _state.rank


def size():
    """The number of processes in the job."""
    _need_init()
    return _state.size


def local_rank():
    """This process's rank on its host (LOCAL_RANK, or computed from host names)."""
    _need_init()
    return _state.local_rank


def local_size():
    """The number of processes on this host (LOCAL_WORLD_SIZE, or from host names)."""
    _need_init()
    return _state.local_size


def cross_rank():
    """As Horovod: this rank's position among the ranks having the same local rank."""
    _need_init()
    return _state.cross_rank


def cross_size():
    """As Horovod: how many ranks have this rank's local rank (the number of hosts when every
    host runs the same number of processes)."""
    _need_init()
    return _state.cross_size


def is_homogeneous():
    """Whether every host runs the same number of processes."""
    _need_init()
    return _state.homogeneous


def mpi_threads_supported():
    """False: cohort does not use MPI."""
    _need_init()
    return False


def mpi_enabled():
    return False


def mpi_built():
    return False


def gloo_enabled():
    return False


def gloo_built():
    return False


def nccl_built():
    return False


def ddl_built():
    return False


def ccl_built():
    return False


def cuda_built():
    return False


def rocm_built():
    return False


def cohort_built():
    """True: collectives run on cohort (or on the default group's backend, see init())."""
    return True


def start_timeline(file_path, mark_cycles=False):
    """Not supported at run time: set COHORT_TIMELINE=<file> before starting instead."""
    warnings.warn('cohort.torch: start_timeline() does nothing; set COHORT_TIMELINE=<file> '
                  'before the job starts')


def stop_timeline():
    """Not supported at run time (see start_timeline)."""
    warnings.warn('cohort.torch: stop_timeline() does nothing; cohort\'s timeline is set with '
                  'COHORT_TIMELINE')


# --------------------------------------------------------------------------------------------
# Handles

class _Handle(object):
    __slots__ = ('what', 'comm', 'ops', 'cont', 'finish', 'error', 'restrict', 'first_idx',
                 'keep', 'join_hit', 'store_check')

    def __init__(self, what, comm):
        self.what = what            # "allreduce.<name>": prefix of error messages
        self.comm = comm
        self.ops = []               # the collectives of the current phase
        self.cont = None            # issues the next phase from the results of this one
        self.finish = None          # builds the result once every phase is done
        self.error = None           # raised by synchronize (consistent on every rank)
        self.restrict = None        # "Broadcast" etc.: Horovod refuses it while a rank joined
        self.join_hit = False       # a joined rank took part (seen in the exchanged shapes)
        self.store_check = False    # nothing comes back from a joined rank: ask the store
        self.first_idx = comm.seq
        self.keep = None            # tensors to keep alive


def _register(h):
    global _pending
    hid = next(_handle_ids)
    _handle_map[hid] = h
    if h.cont is not None:
        _pending = h
    return hid


def _run_cont(h):
    cont, h.cont = h.cont, None
    h.ops = []
    try:
        cont()
    except (ValueError, RuntimeError) as e:
        h.error = e if isinstance(e, HorovodInternalError) else \
            HorovodInternalError('%s: %s' % (h.what, e))
        h.cont = None


def _advance(h, block):
    """Issues h's next phases; with block=False only if the current phase is done. Returns
    whether no phase is left to issue."""
    global _pending
    while h.cont is not None:
        try:
            if block:
                for op in h.ops:
                    h.comm.wait(op)
            elif not all(h.comm.test(op) for op in h.ops):
                return False
        except RuntimeError as e:
            h.error = HorovodInternalError('%s: %s' % (h.what, e))
            h.cont = None
            break
        _run_cont(h)
    if _pending is h:
        _pending = None
    return True


def _flush():
    """Before a new collective is issued, the pending operation issues its next phase, so that
    every rank issues the same sequence."""
    h = _pending
    if h is not None:
        _advance(h, block=True)


def poll(handle):
    """Whether the operation of ``handle`` has completed (synchronize() will not block). An
    operation in two phases (allgather, alltoall) issues its second phase here as soon as the
    first is done, if nothing was issued after it."""
    with _lock:
        h = _handle_map.get(handle)
        if h is None:
            raise ValueError('cohort.torch: handle %r was not created or has been cleared'
                             % (handle,))
        if h.cont is not None:
            if _pending is not h or not _advance(h, block=False):
                return False
        try:
            return all(h.comm.test(op) for op in h.ops)
        except RuntimeError:
            return True         # failed: synchronize() raises the error at once


def synchronize(handle):
    """Waits for the operation of ``handle`` and returns its result (None for an unknown or
    already synchronized handle, as Horovod). Raises HorovodInternalError if it failed."""
    with _lock:
        h = _handle_map.get(handle)
        if h is None:
            return None
        if h.cont is not None:
            _advance(h, block=True)
    try:
        for op in h.ops:
            h.comm.wait(op)
    except RuntimeError as e:
        with _lock:
            _handle_map.pop(handle, None)
        raise HorovodInternalError('%s: %s' % (h.what, e)) from e
    with _lock:
        _handle_map.pop(handle, None)
        if h.error is not None:
            raise h.error
        if h.restrict is not None and (h.join_hit or (h.store_check and
                                                      h.comm.join_affected(h))):
            raise HorovodInternalError(
                '%s: %s is not supported with Join at this time.' % (h.what, h.restrict))
    return h.finish() if h.finish is not None else None


# --------------------------------------------------------------------------------------------
# Argument checks and scaling

def _check_tensor(t, fn):
    if not isinstance(t, torch.Tensor):
        raise ValueError('cohort.torch: %s expects a torch.Tensor, not %s'
                         % (fn, type(t).__name__))
    if t.layout != torch.strided:
        raise ValueError('cohort.torch: %s: %s tensor; dense CPU tensors only'
                         % (fn, str(t.layout)[len('torch.'):]))
    if t.device.type != 'cpu':
        raise ValueError('cohort.torch: %s: tensor on %s; CPU only' % (fn, t.device))
    if t.dtype not in _DTYPE_CODE:
        raise ValueError('cohort.torch: %s: dtype %s is not supported' % (fn, t.dtype))


def _check_reducible(t, fn):
    _check_tensor(t, fn)
    if t.dtype not in _REDUCIBLE:
        raise ValueError('cohort.torch: %s: tensors of dtype %s cannot be reduced'
                         % (fn, t.dtype))


def _resolve_op(op, average):
    if op is not None:
        if average is not None:
            raise ValueError('The op parameter supersedes average. Please provide only one '
                             'of them.')
    elif average is not None:
        warnings.warn('Parameter `average` has been replaced with `op` and will be removed',
                      DeprecationWarning)
        op = Average if average else Sum
    else:
        op = Average
    if op == Adasum:
        raise ValueError('cohort.torch: op=Adasum is not supported')
    if op not in _TORCH_OP:
        raise ValueError('cohort.torch: unknown reduction op %r (use hvd.Average, Sum, Min, '
                         'Max or Product)' % (op,))
    return op


def _scale_(t, factor):
    """t *= factor in place; integer tensors as Horovod: the product in double, truncated."""
    if factor == 1.0:
        return
    if t.dtype.is_floating_point:
        t.mul_(factor)
    else:
        t.copy_((t.double() * factor).trunc())


def _postscale_(t, op, postscale, n):
    """Applies postscale, and 1/n for Average: floating point divides by n, then scales;
    integers compute trunc(x * postscale / n) in double (Horovod multiplies by postscale/n,
    which can land one below an exact quotient)."""
    if op != Average:
        _scale_(t, postscale)
    elif t.dtype.is_floating_point:
        t.div_(n)
        _scale_(t, postscale)
    elif postscale == 1.0:
        t.div_(n, rounding_mode='trunc')
    else:
        t.copy_((t.double() * postscale / n).trunc())


def _root_check(root_rank, comm, fn):
    if isinstance(root_rank, bool) or not isinstance(root_rank, int) or \
            not 0 <= root_rank < comm.size:
        raise ValueError('cohort.torch: %s: root_rank %r out of range [0, %d)'
                         % (fn, root_rank, comm.size))


def _auto_name(kind, name, comm):
    return '%s.%s' % (kind, name) if name is not None else '%s.noname.%d' % (kind, comm.seq)


# --------------------------------------------------------------------------------------------
# Optional cross-rank check (COHORT_HVD_CHECK=1) of allreduce and broadcast

_CHECK_FIELDS = 6


def _checked(h, comm, descs, issue, label):
    """Issues ``issue`` after an allgather comparing descs (one row of _CHECK_FIELDS int64 per
    tensor: dtype code, kind, numel, shape hash, name hash, op or root) across ranks."""
    if not _state.check or comm.size == 1:
        issue()
        return
    mine = torch.tensor(descs, dtype=torch.int64).reshape(-1)
    op = comm.allgather(_as_bytes(mine), label + '.check')
    h.ops = [op]
    h.keep = mine

    def verify():
        table = op.out.view(torch.int64).view(comm.size, len(descs), _CHECK_FIELDS)
        for j in range(comm.size):
            for i, row in enumerate(table[j].tolist()):
                if row[0] == 0:
                    continue        # a joined rank
                m = descs[i]
                what = ('data types' if row[0] != m[0] else 'operations' if row[1] != m[1]
                        else 'tensor shapes' if row[2:4] != m[2:4] else
                        'names (ranks must issue operations in the same order)'
                        if row[4] != m[4] and row[4] and m[4] else
                        'reduction ops or root ranks' if row[5] != m[5] else None)
                if what:
                    raise HorovodInternalError(
                        '%s: Mismatched %s: rank %d and rank %d disagree (COHORT_HVD_CHECK)'
                        % (h.what, what, comm._g(j), comm._g(comm.rank)))
        issue()
    h.cont = verify


# --------------------------------------------------------------------------------------------
# allreduce

def _grouped_allreduce_handle(tensors, inplace, name, op, prescale, postscale, process_set,
                              kind='allreduce'):
    comm = _comm_for(process_set)
    for t in tensors:
        _check_reducible(t, kind)
    with _lock:
        _flush()
        label = _auto_name(kind, name, comm)
        h = _Handle(label, comm)
        bufs, copied = [], []
        for t in tensors:
            src = t.detach()
            if inplace and src.is_contiguous():
                buf = src
            else:
                buf = src.clone(memory_format=torch.contiguous_format)
            _scale_(buf, prescale)
            bufs.append(buf)
            copied.append(buf is not src)
        # one collective per dtype: tensors of a group travel together in one buffer
        by_dtype = collections.OrderedDict()
        for i, b in enumerate(bufs):
            if b.numel():
                by_dtype.setdefault(b.dtype, []).append(i)
        torch_op = _TORCH_OP[op]
        fused = []

        def issue():
            ops = []
            for dt, idxs in by_dtype.items():
                if len(idxs) == 1:
                    flat = bufs[idxs[0]].view(-1)
                else:
                    flat = torch.cat([bufs[i].view(-1) for i in idxs])
                fused.append((flat, idxs))
                ops.append(comm.allreduce(flat, torch_op, label if len(by_dtype) == 1 else
                                          '%s.%s' % (label, _dtype_name(dt))))
            h.ops = ops
        descs = [[_DTYPE_CODE[b.dtype], 1, b.numel(), _shape_hash(b.shape),
                  _name_hash(name), op] for b in bufs]
        _checked(h, comm, descs, issue, label)

        def finish():
            for flat, idxs in fused:
                if len(idxs) > 1:
                    off = 0
                    for i in idxs:
                        n = bufs[i].numel()
                        bufs[i].view(-1).copy_(flat[off:off + n])
                        off += n
            out = []
            for t, b, c in zip(tensors, bufs, copied):
                _postscale_(b, op, postscale, comm.size)
                if inplace:
                    if c:
                        t.detach().copy_(b)
                    out.append(t)
                else:
                    out.append(b)
            return out
        h.finish = finish
        h.keep = (tensors, bufs)
        return _register(h)


def _single(handle):
    """Wraps a grouped handle so that synchronize returns its one tensor."""
    h = _handle_map[handle]
    f = h.finish
    h.finish = lambda: f()[0]
    return handle


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing ``tensor`` over all ranks (out of place); returns a handle for poll() and
    synchronize(), whose result is a new tensor. op: Average (default), Sum, Min, Max, Product
    (Adasum: ValueError); ``average`` is the deprecated spelling. The result is
    postscale * reduce(prescale * tensor) [/ size for Average]; for integer tensors, scaling is
    done in double and truncated as in Horovod, and a plain Average divides exactly (truncating).
    ``name`` labels the operation; it does not match it (see the module's docstring)."""
    op = _resolve_op(op, average)
    return _single(_grouped_allreduce_handle([tensor], False, name, op, prescale_factor,
                                             postscale_factor, process_set))


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """As allreduce_async, in place: synchronize returns ``tensor`` holding the result."""
    op = _resolve_op(op, average)
    return _single(_grouped_allreduce_handle([tensor], True, name, op, prescale_factor,
                                             postscale_factor, process_set))


class _AllreduceFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale, postscale, process_set):
        ctx.args = (op, prescale, postscale, process_set)
        return synchronize(_single(_grouped_allreduce_handle(
            [tensor], False, name, op, prescale, postscale, process_set)))

    @staticmethod
    def backward(ctx, grad):
        op, pre, post, ps = ctx.args
        return _AllreduceFn.apply(grad, None, op, pre, post, ps), None, None, None, None, None


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Reduces ``tensor`` over all ranks and returns the result (the input is not modified).
    Differentiable: the gradient is reduced the same way. ``compression`` is applied to the
    tensor before it is sent and undone after (Compression.fp16: float16 on the wire)."""
    op = _resolve_op(op, average)
    _check_reducible(tensor, 'allreduce')
    compressed, ctx = compression.compress(tensor)
    out = _AllreduceFn.apply(compressed, name, op, prescale_factor, postscale_factor,
                             process_set)
    return compression.decompress(out, ctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """Reduces ``tensor`` in place over all ranks; returns it."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor, process_set))


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing a list of tensors as one operation (one collective per dtype);
    synchronize returns the list of results."""
    op = _resolve_op(op, average)
    return _grouped_allreduce_handle(_tensor_list(tensors, 'grouped_allreduce'), False, name,
                                     op, prescale_factor, postscale_factor, process_set)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    """In-place grouped_allreduce_async; synchronize returns the tensors."""
    op = _resolve_op(op, average)
    return _grouped_allreduce_handle(_tensor_list(tensors, 'grouped_allreduce'), True, name,
                                     op, prescale_factor, postscale_factor, process_set)


class _GroupedAllreduceFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale, postscale, process_set, *tensors):
        ctx.args = (op, prescale, postscale, process_set)
        return tuple(synchronize(_grouped_allreduce_handle(
            list(tensors), False, name, op, prescale, postscale, process_set)))

    @staticmethod
    def backward(ctx, *grads):
        op, pre, post, ps = ctx.args
        return (None, None, None, None, None) + tuple(
            _GroupedAllreduceFn.apply(None, op, pre, post, ps, *grads))


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set):
    """Reduces a list of tensors as one operation; returns the list of results
    (differentiable)."""
    op = _resolve_op(op, average)
    tensors = _tensor_list(tensors, 'grouped_allreduce')
    for t in tensors:
        _check_reducible(t, 'grouped_allreduce')
    if not tensors:
        return []
    pairs = [compression.compress(t) for t in tensors]
    outs = _GroupedAllreduceFn.apply(name, op, prescale_factor, postscale_factor, process_set,
                                     *[p[0] for p in pairs])
    return [compression.decompress(o, p[1]) for o, p in zip(outs, pairs)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    """In-place grouped_allreduce; returns the tensors."""
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set))


def _tensor_list(tensors, fn):
    if isinstance(tensors, torch.Tensor) or not isinstance(tensors, (list, tuple)):
        raise ValueError('cohort.torch: %s expects a list of tensors' % fn)
    return list(tensors)


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Reduces a sparse COO tensor as Horovod does: allgathers indices and values; the result,
    from calling the returned function, is the uncoalesced sum (values divided by the size for
    Average). Used by DistributedOptimizer for sparse gradients unless sparse_as_dense."""
    if not isinstance(tensor, torch.Tensor) or not tensor.is_sparse:
        raise ValueError('cohort.torch: sparse_allreduce_async expects a sparse tensor')
    if tensor.device.type != 'cpu':
        raise ValueError('cohort.torch: sparse_allreduce_async: tensor on %s; CPU only'
                         % tensor.device)
    op = _resolve_op(op, None)
    if op not in (Average, Sum):
        raise ValueError('cohort.torch: sparse allreduce supports Average and Sum only')
    comm = _comm_for(process_set)
    t = tensor
    hi = allgather_async(t._indices().transpose(0, 1).contiguous(), name='%s.indices' % name,
                         process_set=process_set)
    hv = allgather_async(t._values(), name='%s.values' % name, process_set=process_set)

    def result():
        values = synchronize(hv)
        indices = synchronize(hi)
        if op == Average:
            values = values / comm.size
        return torch.sparse_coo_tensor(indices.transpose(0, 1), values, t.size())
    return result


# --------------------------------------------------------------------------------------------
# allgather

_AG_DESC = 5        # dtype code, ndim, dim 0, trailing numel, trailing shape hash


def _grouped_allgather_handle(tensors, name, process_set, kind='allgather'):
    comm = _comm_for(process_set)
    for t in tensors:
        _check_tensor(t, kind)
        if t.dim() == 0:
            raise ValueError('cohort.torch: %s: a 0-dimensional tensor cannot be gathered '
                             '(the gather is along the first dimension)' % kind)
    with _lock:
        _flush()
        label = _auto_name(kind, name, comm)
        h = _Handle(label, comm)
        h.restrict = 'Allgather'
        srcs = [t.detach().contiguous() for t in tensors]
        descs = []
        for s in srcs:
            trailing = list(s.shape[1:])
            tn = 1
            for d in trailing:
                tn *= d
            descs.append([_DTYPE_CODE[s.dtype], s.dim(), s.shape[0], tn,
                          _shape_hash(trailing)])
        mine = torch.tensor(descs, dtype=torch.int64).reshape(-1)
        op1 = comm.allgather(_as_bytes(mine), label + '.sizes')
        h.ops = [op1]
        result = {}

        def phase2():
            table = op1.out.view(torch.int64).view(comm.size, len(srcs), _AG_DESC).tolist()
            for i, m in enumerate(descs):
                for j in range(comm.size):
                    row = table[j][i]
                    if row[0] == 0:         # a joined rank (it sends zeros)
                        h.join_hit = True
                        continue
                    if row[0] != m[0]:
                        raise HorovodInternalError(
                            '%s: Mismatched data types: rank %d sent %s, rank %d sent %s.'
                            % (label, comm._g(j), _DTYPE_BY_CODE[row[0]], comm._g(comm.rank),
                               srcs[i].dtype))
                    if row[1] != m[1] or row[3:] != m[3:]:
                        raise HorovodInternalError(
                            '%s: Mismatched %s tensor shapes: rank %d sent a tensor of rank %d '
                            'and different trailing dimensions than rank %d\'s %s.'
                            % (label, kind, comm._g(j), row[1], comm._g(comm.rank),
                               tuple(srcs[i].shape)))
            dims = [[table[j][i][2] for j in range(comm.size)] for i in range(len(srcs))]
            rows = [max(d) for d in dims]
            row_bytes = [descs[i][3] * srcs[i].element_size() for i in range(len(srcs))]
            seg = sum(r * b for r, b in zip(rows, row_bytes))
            result['dims'], result['rows'], result['row_bytes'] = dims, rows, row_bytes
            if seg == 0:
                result['out'] = None
                return
            if len(srcs) == 1 and srcs[0].shape[0] == rows[0]:
                inp = _as_bytes(srcs[0])
            else:
                inp = torch.zeros(seg, dtype=torch.uint8)
                off = 0
                for s, r, b in zip(srcs, rows, row_bytes):
                    n = s.numel() * s.element_size()
                    if n:
                        inp[off:off + n].copy_(_as_bytes(s))
                    off += r * b
            op2 = comm.allgather(inp, label)
            result['out'] = op2.out
            h.ops = [op2]
        h.cont = phase2

        def finish():
            out, outs, off = result['out'], [], 0
            for i, s in enumerate(srcs):
                r, b, dims = result['rows'][i], result['row_bytes'][i], result['dims'][i]
                total = sum(dims)
                shape = (total,) + tuple(s.shape[1:])
                if total == 0 or b == 0:
                    outs.append(torch.empty(shape, dtype=s.dtype))
                elif all(d == r for d in dims) and len(srcs) == 1:
                    outs.append(out.view(-1).view(s.dtype).view(shape))
                else:
                    parts = [out[j, off:off + dims[j] * b] for j in range(comm.size) if dims[j]]
                    outs.append(torch.cat(parts).view(s.dtype).view(shape))
                off += r * b
            return outs, result['dims']
        h.finish = finish
        h.keep = (srcs, mine)
        return _register(h)


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts gathering ``tensor`` from every rank, concatenated along the first dimension,
    which may differ between ranks (the other dimensions and the dtype may not). Two phases:
    the first dimensions are exchanged, then the data (padded to the largest first dimension:
    it works on every backend). synchronize returns the concatenation."""
    hid = _grouped_allgather_handle([tensor], name, process_set)
    h = _handle_map[hid]
    f = h.finish
    h.finish = lambda: f()[0][0]
    return hid


class _AllgatherFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.dim0 = tensor.shape[0]
        ctx.process_set = process_set
        hid = _grouped_allgather_handle([tensor], name, process_set)
        outs, dims = synchronize(hid)
        ctx.dims = dims[0]
        return outs[0]

    @staticmethod
    def backward(ctx, grad):
        # as Horovod: the gradients of every rank are averaged, then this rank's rows taken
        reduced = _AllreduceFn.apply(grad.contiguous(), None, Average, 1.0, 1.0,
                                     ctx.process_set)
        comm = _comm_for(ctx.process_set)
        off = sum(ctx.dims[:comm.rank])
        return reduced.narrow(0, off, ctx.dim0), None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """Gathers ``tensor`` from every rank along the first dimension (which may differ between
    ranks); differentiable as Horovod's (the gradient is averaged, then sliced)."""
    _check_tensor(tensor, 'allgather')
    if tensor.dim() == 0:
        raise ValueError('cohort.torch: allgather: a 0-dimensional tensor cannot be gathered '
                         '(the gather is along the first dimension)')
    return _AllgatherFn.apply(tensor, name, process_set)


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Starts gathering a list of tensors in one operation; synchronize returns the list."""
    hid = _grouped_allgather_handle(_tensor_list(tensors, 'grouped_allgather'), name,
                                    process_set, 'grouped_allgather')
    h = _handle_map[hid]
    f = h.finish
    h.finish = lambda: f()[0]
    return hid


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """Gathers a list of tensors in one operation; returns the list (not differentiable)."""
    return synchronize(grouped_allgather_async(tensors, name, process_set))


# --------------------------------------------------------------------------------------------
# broadcast

def _broadcast_handle(tensor, root_rank, name, inplace, process_set):
    comm = _comm_for(process_set)
    _check_tensor(tensor, 'broadcast')
    _root_check(root_rank, comm, 'broadcast')
    with _lock:
        _flush()
        label = _auto_name('broadcast', name, comm)
        h = _Handle(label, comm)
        h.restrict = 'Broadcast'
        h.store_check = True
        src = tensor.detach()
        if inplace and src.is_contiguous():
            buf = src
        else:
            buf = src.clone(memory_format=torch.contiguous_format)
        u8 = _as_bytes(buf)

        def issue():
            h.ops = [comm.broadcast(u8, root_rank, label)] if u8.numel() else []
        _checked(h, comm, [[_DTYPE_CODE[buf.dtype], 2, buf.numel(), _shape_hash(buf.shape),
                            _name_hash(name), root_rank]], issue, label)

        def finish():
            if inplace:
                if buf is not src:
                    src.copy_(buf)
                return tensor
            return buf
        h.finish = finish
        h.keep = (tensor, buf)
        return _register(h)


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts broadcasting ``tensor`` from root_rank; synchronize returns a new tensor (root:
    a copy of its input)."""
    return _broadcast_handle(tensor, root_rank, name, False, process_set)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts broadcasting ``tensor`` from root_rank in place; synchronize returns it."""
    return _broadcast_handle(tensor, root_rank, name, True, process_set)


class _BroadcastFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank, ctx.process_set = root_rank, process_set
        return synchronize(_broadcast_handle(tensor, root_rank, name, False, process_set))

    @staticmethod
    def backward(ctx, grad):
        reduced = _AllreduceFn.apply(grad.contiguous(), None, Average, 1.0, 1.0,
                                     ctx.process_set)
        if _comm_for(ctx.process_set).rank != ctx.root_rank:
            reduced = reduced * 0
        return reduced, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Returns root_rank's ``tensor`` on every rank (the input is not modified);
    differentiable as Horovod's."""
    _check_tensor(tensor, 'broadcast')
    return _BroadcastFn.apply(tensor, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """Broadcasts ``tensor`` from root_rank in place; returns it."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# --------------------------------------------------------------------------------------------
# alltoall

_A2_DESC = 5        # rows sent to the peer, dtype code, ndim, trailing numel, trailing hash


def _split_list(splits, dim0, n, fn):
    if splits is None:
        if dim0 % n:
            raise ValueError('cohort.torch: %s: splits not provided, but the first dimension '
                             '(%d) is not a multiple of the number of ranks (%d)'
                             % (fn, dim0, n))
        return [dim0 // n] * n
    if isinstance(splits, torch.Tensor):
        if splits.dim() != 1 or splits.dtype.is_floating_point or splits.dtype == torch.bool \
                or splits.is_complex():
            raise ValueError('cohort.torch: %s: splits must be a 1-D integer tensor' % fn)
        splits = splits.tolist()
    try:
        splits = [int(s) for s in splits]
    except (TypeError, ValueError):
        raise ValueError('cohort.torch: %s: splits must be a list of integers' % fn) from None
    if len(splits) != n:
        raise ValueError('cohort.torch: %s: %d splits for %d ranks' % (fn, len(splits), n))
    if any(s < 0 for s in splits):
        raise ValueError('cohort.torch: %s: negative split in %r' % (fn, splits))
    if sum(splits) > dim0:
        raise ValueError('cohort.torch: %s: the splits add up to %d, more than the first '
                         'dimension (%d)' % (fn, sum(splits), dim0))
    return splits


def _alltoall_handle(tensor, splits, name, process_set):
    comm = _comm_for(process_set)
    _check_tensor(tensor, 'alltoall')
    if tensor.dim() == 0:
        raise ValueError('cohort.torch: alltoall: a 0-dimensional tensor cannot be split')
    sp = _split_list(splits, tensor.shape[0], comm.size, 'alltoall')
    rs_dtype = splits.dtype if isinstance(splits, torch.Tensor) else torch.int32
    with _lock:
        _flush()
        label = _auto_name('alltoall', name, comm)
        h = _Handle(label, comm)
        h.restrict = 'Alltoall'
        src = tensor.detach().contiguous()
        trailing = list(src.shape[1:])
        tn = 1
        for d in trailing:
            tn *= d
        me = [_DTYPE_CODE[src.dtype], src.dim(), tn, _shape_hash(trailing)]
        mine = torch.tensor([[s] + me for s in sp], dtype=torch.int64).reshape(-1)
        op1 = comm.alltoall(_as_bytes(mine), _A2_DESC * 8, label + '.splits')
        h.ops = [op1]
        result = {}

        def phase2():
            got = op1.out.view(torch.int64).view(comm.size, _A2_DESC).tolist()
            for j, row in enumerate(got):
                if row[1] == 0:             # a joined rank (it sends zeros)
                    h.join_hit = True
                    continue
                if row[1] != me[0]:
                    raise HorovodInternalError(
                        '%s: Mismatched data types: rank %d sent %s, rank %d sent %s.'
                        % (label, comm._g(j), _DTYPE_BY_CODE[row[1]], comm._g(comm.rank),
                           src.dtype))
                if row[2:] != me[1:]:
                    raise HorovodInternalError(
                        '%s: Mismatched alltoall tensor shapes: rank %d sent a tensor of rank '
                        '%d and different trailing dimensions than rank %d\'s %s.'
                        % (label, comm._g(j), row[2], comm._g(comm.rank), tuple(src.shape)))
            recv = [row[0] for row in got]
            row_bytes = tn * src.element_size()
            inp = _as_bytes(src)[:sum(sp) * row_bytes]
            out = torch.empty(sum(recv) * row_bytes, dtype=torch.uint8)
            result['recv'] = recv
            result['out'] = out
            h.ops = [comm.alltoallv(out, inp, [r * row_bytes for r in recv],
                                    [s * row_bytes for s in sp], row_bytes, label)]
        h.cont = phase2

        def finish():
            recv = result['recv']
            out = result['out'].view(src.dtype).view((sum(recv),) + tuple(src.shape[1:])) \
                if result['out'].numel() else \
                torch.empty((sum(recv),) + tuple(src.shape[1:]), dtype=src.dtype)
            return out, torch.tensor(recv, dtype=rs_dtype)
        h.finish = finish
        h.keep = (src, mine)
        return _register(h)


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Starts an alltoall: rows [sum(splits[:j]), sum(splits[:j+1])) of ``tensor`` go to rank j
    (splits: list or 1-D integer tensor, one entry per rank, adding up to at most the first
    dimension; by default the first dimension split equally). Two phases: the splits are
    exchanged, then the data. synchronize returns (received tensor, received splits), the
    splits as int32 (or the dtype of a splits tensor)."""
    return _alltoall_handle(tensor, splits, name, process_set)


class _AlltoallFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        out, recv = synchronize(_alltoall_handle(tensor, splits, name, process_set))
        ctx.recv, ctx.process_set, ctx.dim0 = recv, process_set, tensor.shape[0]
        ctx.mark_non_differentiable(recv)
        return out, recv

    @staticmethod
    def backward(ctx, grad, *unused):
        g, _ = _AlltoallFn.apply(grad.contiguous(), ctx.recv, None, ctx.process_set)
        if g.shape[0] < ctx.dim0:     # rows beyond the splits were not sent: no gradient
            g = torch.cat([g, g.new_zeros((ctx.dim0 - g.shape[0],) + tuple(g.shape[1:]))])
        return g, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Alltoall (see alltoall_async). As Horovod: returns the received tensor alone when
    ``splits`` is None, and (received tensor, received splits) when splits were given.
    Differentiable."""
    _check_tensor(tensor, 'alltoall')
    out, recv = _AlltoallFn.apply(tensor, splits, name, process_set)
    return out if splits is None else (out, recv)


# --------------------------------------------------------------------------------------------
# reducescatter (an allreduce, then this rank's rows)

def _rs_rows(dim0, n, r):
    base, extra = divmod(dim0, n)
    start = r * base + min(r, extra)
    return start, base + (1 if r < extra else 0)


def _reducescatter_handle(tensors, name, op, process_set, prescale, postscale, kind):
    if op not in (Average, Sum):
        raise ValueError('cohort.torch: %s supports only Average and Sum' % kind)
    for t in tensors:
        _check_reducible(t, kind)
        if t.dim() == 0:
            raise ValueError('cohort.torch: %s: a 0-dimensional tensor cannot be scattered'
                             % kind)
    comm = _comm_for(process_set)
    hid = _grouped_allreduce_handle(tensors, False, name, op, prescale, postscale, process_set,
                                    kind)
    h = _handle_map[hid]
    h.restrict = 'Reducescatter'
    h.store_check = True
    f = h.finish

    def finish():
        outs = []
        for t in f():
            start, n = _rs_rows(t.shape[0], comm.size, comm.rank)
            outs.append(t.narrow(0, start, n).clone())
        return outs
    h.finish = finish
    return hid


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    """Starts a reduce-scatter along the first dimension (Average or Sum): rank r gets rows
    [r*q + min(r, m), ...) where q, m = divmod(dim0, size), the first m ranks one row more, as
    Horovod. Implemented as an allreduce followed by a slice."""
    return _single(_reducescatter_handle([tensor], name, op, process_set, prescale_factor,
                                         postscale_factor, 'reducescatter'))


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Reduce-scatter (see reducescatter_async); not differentiable here."""
    compressed, ctx = compression.compress(tensor)
    return compression.decompress(synchronize(reducescatter_async(
        compressed, name, op, process_set, prescale_factor, postscale_factor)), ctx)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    """Reduce-scatter of a list of tensors in one operation; synchronize returns the list."""
    return _reducescatter_handle(_tensor_list(tensors, 'grouped_reducescatter'), name, op,
                                 process_set, prescale_factor, postscale_factor,
                                 'grouped_reducescatter')


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    """Reduce-scatter of a list of tensors; returns the list."""
    pairs = [compression.compress(t) for t in _tensor_list(tensors, 'grouped_reducescatter')]
    outs = synchronize(grouped_reducescatter_async([p[0] for p in pairs], name, op,
                                                   process_set, prescale_factor,
                                                   postscale_factor))
    return [compression.decompress(o, p[1]) for o, p in zip(outs, pairs)]


# --------------------------------------------------------------------------------------------
# barrier, join

def barrier(process_set=global_process_set):
    """Returns once every rank of the process set has called barrier()."""
    comm = _comm_for(process_set)
    with _lock:
        _flush()
        h = _Handle('barrier', comm)
        h.ops = [comm.barrier('barrier')]
        hid = _register(h)
    synchronize(hid)


def join(device=-1):
    """Says this rank has no more data (Horovod's join): until every rank has joined, this rank
    keeps taking part in the operations the other ranks issue, contributing zeros to their
    allreduces (Average still divides by the full size, and Min/Max/Product see the zeros, as in
    Horovod); broadcast, allgather, alltoall and reducescatter issued while a rank has joined
    fail with HorovodInternalError on the ranks that issued them, as in Horovod (the joined rank
    still takes part, so every rank stays in step). Returns the rank that joined last, the same
    on every rank. Covers the global process set's operations only. ``device`` is ignored.

    How, over torch.distributed (no coordinator): each rank numbers the collectives it issues
    in its group's sequence and keeps a one-line description of each ("ar float32 1024 sum
    allreduce.fc.weight") in a log, until an operation completes that proves every rank is past
    it. A joining rank registers its position in the sequence in the process group's store and
    publishes its log there; then it reads the descriptions of the following positions from
    the store, one by one, and takes part in each operation with zeros, until the last rank to
    join writes "done" at the last position reached by any rank. A rank still working learns of
    a join while it waits for an operation that cannot finish without the joined rank: it reads
    the store when a wait lasts longer than COHORT_HVD_JOIN_POLL seconds (default 0.05, then at
    doubling intervals up to 1 s), publishes its log, and from then on publishes each operation
    as it issues it. Whether an operation ran with a joined rank is seen in the exchanged shapes
    for allgather and alltoall (a joined rank sends zeros), and from the store for broadcast and
    reducescatter (one read covers every such operation already complete).

    Costs when no rank joins: the log (a string per operation, dropped as operations complete)
    and one store read per wait longer than COHORT_HVD_JOIN_POLL and per broadcast or
    reducescatter batch. Requirements: the backend's Work.wait(timeout) must return or raise
    when the timeout passes without cancelling the operation (c10d's Work does, so gloo's and
    cohort's do); the group needs a store (env:// or a store given to init_process_group). A
    joined rank waits for each description up to the store's timeout (the group's timeout).
    Every rank's operations must go through this module while a rank has joined: a raw
    torch.distributed call on the same group cannot be answered by the joined rank."""
    comm = _comm_for(None)
    with _lock:
        _flush()
        return comm.join()


# --------------------------------------------------------------------------------------------
# Helpers for the other modules

def _allgather_bytes(payload, name, process_set=global_process_set):
    """Gathers a bytes object from every rank; returns the list."""
    t = torch.frombuffer(bytearray(payload), dtype=torch.uint8) if payload else \
        torch.empty(0, dtype=torch.uint8)
    hid = _grouped_allgather_handle([t], name, process_set)
    outs, dims = synchronize(hid)
    data = outs[0].numpy().tobytes()
    res, off = [], 0
    for d in dims[0]:
        res.append(data[off:off + d])
        off += d
    return res


from cohort.torch._hvd_functions import (broadcast_object, allgather_object,  # noqa: E402
                                         broadcast_parameters, broadcast_optimizer_state)
from cohort.torch._hvd_optimizer import DistributedOptimizer  # noqa: E402
