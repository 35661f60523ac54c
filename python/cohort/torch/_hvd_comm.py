# SPDX-License-Identifier: BSD-3-Clause
"""The communicator of one process group (_Comm) for cohort.torch's Horovod-style API: issues
torch collectives in order, numbers them, waits on them, and runs join()'s protocol (join() in
_hvd_join describes it)."""
import collections
import datetime
import importlib
import os
import time

import torch
import torch.distributed as dist

from cohort.torch._hvd_handles import _handle_map
from cohort.torch._hvd_types import (HorovodInternalError, _DTYPE_BY_NAME, _REDUCE_OPS,
                                     _dtype_name)

try:  # labels for cohort's timeline exist once the C++ extension is built
    importlib.import_module('cohort.torch._backend')
    from cohort.torch._names import name_next as _name_next
except ImportError:  # tests load this file before the extension exists
    _name_next = None

# alltoall's first phase sends every peer _A2_DESC int64: the rows it will get, dtype code, ndim,
# trailing numel, trailing shape hash (join's replay of the second phase reads the rows there)
_A2_DESC = 5

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
        self._divides = None
        self._reset_join()

    def _reset_join(self):
        self.join_active = False        # some rank has joined in this epoch
        self.known_joined = 0
        self.min_join_c = None
        self.last_check = time.monotonic()

    @property
    def divides(self):
        """Whether the backend averages floating-point tensors itself (ReduceOp.AVG: the sum
        divided by the group's size, in the tensor's dtype, as Horovod's Average): cohort does,
        in C (fp16 through F16C); gloo has no AVG in this torch, and Python divides instead."""
        if self._divides is None:
            try:
                self._divides = dist.get_backend(self.group) == 'cohort'
            except (RuntimeError, ValueError):
                self._divides = False
        return self._divides

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
