# SPDX-License-Identifier: BSD-3-Clause
"""alltoall of cohort.torch's Horovod-style API: the splits are exchanged first, then the
data."""
import torch

from cohort.torch._hvd_checks import _auto_name, _check_tensor
from cohort.torch._hvd_comm import _A2_DESC
from cohort.torch._hvd_handles import _Handle, _flush, _lock, _register, synchronize
from cohort.torch._hvd_state import _comm_for, global_process_set
from cohort.torch._hvd_types import (HorovodInternalError, _DTYPE_BY_CODE, _DTYPE_CODE,
                                     _as_bytes, _shape_hash)


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
