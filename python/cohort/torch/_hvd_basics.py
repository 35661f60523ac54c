# SPDX-License-Identifier: BSD-3-Clause
"""Basics of cohort.torch's Horovod-style API: init() and shutdown(), the queries (rank, size,
local and cross ranks, what is built), and the timeline calls (which only warn)."""
import datetime
import os
import socket
import warnings

import torch.distributed as dist

from cohort.torch._hvd_comm import _Comm
from cohort.torch._hvd_functions import allgather_object
from cohort.torch._hvd_handles import _forget_handles, _lock
from cohort.torch._hvd_state import _need_init, _state, add_process_set


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
    with _lock:
        if not _state.initialized:
            return
        _forget_handles()
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
