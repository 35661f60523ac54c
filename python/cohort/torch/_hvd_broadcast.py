# SPDX-License-Identifier: BSD-3-Clause
"""broadcast and its variants (in place, asynchronous) of cohort.torch's Horovod-style API."""
import torch

from cohort.torch._hvd_allreduce import _AllreduceFn
from cohort.torch._hvd_checks import _auto_name, _check_tensor, _checked, _root_check
from cohort.torch._hvd_handles import _Handle, _flush, _lock, _register, synchronize
from cohort.torch._hvd_state import _comm_for, global_process_set
from cohort.torch._hvd_types import Average, _DTYPE_CODE, _as_bytes, _name_hash, _shape_hash


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
