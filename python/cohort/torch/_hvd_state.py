# SPDX-License-Identifier: BSD-3-Clause
"""State of cohort.torch's Horovod-style API: the job's (_state: initialized or not, rank, size,
topology, the global communicator, the registered process sets) and the process sets
(ProcessSet, add_process_set, remove_process_set; _comm_for finds the communicator of an
operation's process set)."""
import torch.distributed as dist

from cohort.torch._hvd_comm import _Comm
from cohort.torch._hvd_handles import _flush, _lock


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


def _need_init():
    if not _state.initialized:
        raise ValueError('cohort.torch has not been initialized; use hvd.init().')


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
