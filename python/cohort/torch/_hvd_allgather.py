# SPDX-License-Identifier: BSD-3-Clause
"""allgather and its variants of cohort.torch's Horovod-style API, the sparse allreduce made of
two allgathers (as Horovod's), and _allgather_bytes for the object functions."""
import torch

from cohort.torch._hvd_allreduce import _AllreduceFn
from cohort.torch._hvd_checks import _auto_name, _check_tensor, _resolve_op, _tensor_list
from cohort.torch._hvd_handles import (_Handle, _flush, _handle_map, _lock, _register,
                                       synchronize)
from cohort.torch._hvd_state import _comm_for, global_process_set
from cohort.torch._hvd_types import (Average, HorovodInternalError, Sum, _DTYPE_BY_CODE,
                                     _DTYPE_CODE, _as_bytes, _shape_hash)


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
