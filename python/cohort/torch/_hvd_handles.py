# SPDX-License-Identifier: BSD-3-Clause
"""Handles of cohort.torch's Horovod-style API: what an asynchronous operation returns, and
poll() and synchronize() on it. An operation runs in phases (allgather and alltoall exchange
shapes first); a phase is issued once the previous one is done, by poll(), or by the next
operation issued (_flush), so that every rank issues the same sequence of collectives. _lock
serializes issuing, handles and the state of the API."""
import itertools
import threading

from cohort.torch._hvd_types import HorovodInternalError

_lock = threading.RLock()
_handle_map = {}             # handle id -> _Handle
_handle_ids = itertools.count(1)
_pending = None              # the one handle whose next phase is not issued yet


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


def _forget_handles():
    """Forgets every outstanding handle (shutdown)."""
    global _pending
    _handle_map.clear()
    _pending = None
