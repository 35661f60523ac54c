# SPDX-License-Identifier: BSD-3-Clause
"""Horovod-style helpers of cohort.torch: objects, model parameters, optimizer state.

Objects are serialized with cloudpickle when it is installed (as Horovod), else with pickle
(which cannot send lambdas or locally defined classes).
"""
import collections
import collections.abc

import torch

from cohort.torch._hvd_allgather import _allgather_bytes
from cohort.torch._hvd_broadcast import broadcast_, broadcast_async_
from cohort.torch._hvd_checks import _root_check
from cohort.torch._hvd_handles import synchronize
from cohort.torch._hvd_state import _comm_for, global_process_set

try:
    import cloudpickle as _pickle
except ImportError:
    import pickle as _pickle


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Serializes ``obj`` on root_rank and returns it on every rank (root: ``obj`` itself).
    Two broadcasts: the size, then the bytes."""
    comm = _comm_for(process_set)
    _root_check(root_rank, comm, 'broadcast_object')
    if name is None:
        name = type(obj).__name__
    if comm.rank == root_rank:
        payload = _pickle.dumps(obj)
        sz = torch.tensor([len(payload)], dtype=torch.int64)
        broadcast_(sz, root_rank, name + '.sz', process_set)
        t = torch.frombuffer(bytearray(payload), dtype=torch.uint8) if payload else \
            torch.empty(0, dtype=torch.uint8)
        broadcast_(t, root_rank, name + '.t', process_set)
        return obj
    sz = torch.zeros(1, dtype=torch.int64)
    broadcast_(sz, root_rank, name + '.sz', process_set)
    t = torch.empty(int(sz.item()), dtype=torch.uint8)
    broadcast_(t, root_rank, name + '.t', process_set)
    return _pickle.loads(t.numpy().tobytes())


def allgather_object(obj, name=None, process_set=global_process_set):
    """Serializes ``obj`` on every rank; returns the list of every rank's object, in rank order.
    One (two-phase) allgather."""
    if name is None:
        name = type(obj).__name__
    return [_pickle.loads(b) for b in _allgather_bytes(_pickle.dumps(obj), name, process_set)]


def broadcast_parameters(params, root_rank):
    """Broadcasts parameters from root_rank in place: ``model.state_dict()`` (a dict, sent in
    sorted key order), ``model.named_parameters()`` or a list of (name, tensor) or of tensors.
    The broadcasts are issued asynchronously, then waited for."""
    if isinstance(params, dict):
        params = sorted(params.items())
    elif isinstance(params, list) or isinstance(params, collections.abc.Iterator) or \
            isinstance(params, tuple):
        params = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        raise ValueError('invalid params of type: %s' % type(params))
    handles = []
    for name, p in params:
        if p is None:
            continue
        handles.append(broadcast_async_(p, root_rank, name))
    for h in handles:
        synchronize(h)


def broadcast_optimizer_state(optimizer, root_rank, model=None):
    """Broadcasts an optimizer's state and hyper-parameters from root_rank, as Horovod: a fresh
    optimizer first gets its state created (zero gradients and one step of the wrapped torch
    optimizer, without any allreduce; the parameters and gradients are restored afterwards,
    where Horovod leaves them changed), then every tensor of the state is broadcast in place and
    every other value (hyper-parameters such as lr, scalars in the state such as a float step,
    None) is sent with one broadcast_object and assigned. torch.optim.LBFGS: ValueError.
    ``model`` marks parameters of sparse embeddings (their zero gradients are made sparse)."""
    from cohort.torch._hvd_optimizer import _DistributedOptimizer
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError('cannot broadcast torch.optim.LBFGS state')
    comm = _comm_for(None)
    _root_check(root_rank, comm, 'broadcast_optimizer_state')
    state_dict = optimizer.state_dict()

    sparse = set()
    if model is not None:
        for m in model.modules():
            if isinstance(m, torch.nn.Embedding) and m.sparse:
                sparse.update(id(p) for p in m.parameters())

    if len(state_dict['state']) == 0:
        # a new optimizer: create its state with zero gradients and one local step
        saved = []
        for group in optimizer.param_groups:
            for p in group['params']:
                if p.requires_grad:
                    saved.append((p, p.grad, p.data.clone()))
                    p.grad = p.data.new(p.size()).zero_()
                    if isinstance(optimizer, torch.optim.SparseAdam) or id(p) in sparse:
                        p.grad = p.grad.to_sparse()
        if isinstance(optimizer, _DistributedOptimizer):
            optimizer._hvd_base.step(optimizer)
        else:
            optimizer.step()
        for p, g, data in saved:      # the step must not change the model (weight decay)
            p.grad = g
            p.data.copy_(data)
        state_dict = optimizer.state_dict()
    if len(state_dict['state']) == 0:
        return      # a stateless optimizer: nothing to send

    tensors = []
    scalars = {}
    setters = {}
    occurrences = collections.defaultdict(int)

    def set_state(pid, key):
        def f(v):
            state_dict['state'][pid][key] = v
        return f

    def set_option(index, key):
        def f(v):
            optimizer.param_groups[index][key] = v
        return f

    for index, group in enumerate(state_dict['param_groups']):
        for key, value in group.items():
            if key == 'params':
                continue
            k = '%s.%d' % (key, index)
            scalars[k] = value
            setters[k] = set_option(index, key)
        for pid in group['params']:
            if pid not in state_dict['state']:
                continue
            for key, value in state_dict['state'][pid].items():
                occurrences[key] += 1
                k = '%s.%d' % (key, occurrences[key])
                if torch.is_tensor(value):
                    tensors.append((k, value))
                else:
                    scalars[k] = value
                    setters[k] = set_state(pid, key)

    broadcast_parameters(tensors, root_rank)
    scalars = broadcast_object(scalars, root_rank, name='optimizer_state.scalars')
    for k, v in scalars.items():
        if k in setters:
            setters[k](v)
