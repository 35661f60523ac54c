# SPDX-License-Identifier: BSD-3-Clause
"""Argument checks shared by the operations of cohort.torch's Horovod-style API (each raises
ValueError on the rank that made the error, before anything is sent), the operations' labels,
and the optional cross-rank check of allreduce and broadcast (COHORT_HVD_CHECK=1)."""
import warnings

import torch

from cohort.torch._hvd_state import _state
from cohort.torch._hvd_types import (Adasum, Average, HorovodInternalError, Sum, _DTYPE_CODE,
                                     _REDUCIBLE, _TORCH_OP, _as_bytes)


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


def _tensor_list(tensors, fn):
    if isinstance(tensors, torch.Tensor) or not isinstance(tensors, (list, tuple)):
        raise ValueError('cohort.torch: %s expects a list of tensors' % fn)
    return list(tensors)
