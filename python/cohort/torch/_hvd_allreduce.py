# SPDX-License-Identifier: BSD-3-Clause
"""allreduce and its variants (in place, asynchronous, grouped) of cohort.torch's Horovod-style
API, and reducescatter, which is an allreduce followed by taking this rank's rows."""
import collections

import torch

from cohort.torch._hvd_checks import (_auto_name, _check_reducible, _checked, _resolve_op,
                                      _tensor_list)
from cohort.torch._hvd_compression import Compression
from cohort.torch._hvd_handles import (_Handle, _flush, _handle_map, _lock, _register,
                                       synchronize)
from cohort.torch._hvd_state import _comm_for, global_process_set
from cohort.torch._hvd_types import (Average, Sum, _DTYPE_CODE, _TORCH_OP, _dtype_name,
                                     _name_hash, _shape_hash)


# --------------------------------------------------------------------------------------------
# Scaling

def _scale_(t, factor):
    """t *= factor in place; integer tensors as Horovod: the product in double, truncated."""
    if factor == 1.0:
        return
    if t.dtype.is_floating_point:
        t.mul_(factor)
    else:
        t.copy_((t.double() * factor).trunc())


def _postscale_(t, op, postscale, n, divided=False):
    """Applies postscale, and 1/n for Average (unless the backend ``divided`` already):
    floating point divides by n, then scales; integers compute trunc(x * postscale / n) in
    double (Horovod multiplies by postscale/n, which can land one below an exact quotient)."""
    if op != Average or divided:
        _scale_(t, postscale)
    elif t.dtype in (torch.float16, torch.bfloat16):
        # the same bits as t.div_(n), which also divides in float32 element by element, in
        # half the time on CPU
        t.copy_(t.float().div_(n))
        _scale_(t, postscale)
    elif t.dtype.is_floating_point:
        t.div_(n)
        _scale_(t, postscale)
    elif postscale == 1.0:
        t.div_(n, rounding_mode='trunc')
    else:
        t.copy_((t.double() * postscale / n).trunc())


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
        # Average of floating-point tensors: where the backend divides (cohort's AVG), it does
        # so in C; the result is the same as dividing here
        divided = op == Average and comm.divides
        fused = []

        def issue():
            ops = []
            for dt, idxs in by_dtype.items():
                if len(idxs) == 1:
                    flat = bufs[idxs[0]].view(-1)
                else:
                    flat = torch.cat([bufs[i].view(-1) for i in idxs])
                fused.append((flat, idxs))
                ops.append(comm.allreduce(flat, 'avg' if divided and dt.is_floating_point
                                          else torch_op, label if len(by_dtype) == 1 else
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
                _postscale_(b, op, postscale, comm.size,
                            divided and b.dtype.is_floating_point)
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
    ``name`` labels the operation; it does not match it (see cohort.torch._hvd's docstring)."""
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
