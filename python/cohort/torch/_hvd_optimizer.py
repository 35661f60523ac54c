# SPDX-License-Identifier: BSD-3-Clause
"""DistributedOptimizer of cohort.torch (Horovod's semantics, over cohort.torch's allreduce)."""
import warnings
from contextlib import contextmanager

import torch

from cohort.torch._hvd_allgather import sparse_allreduce_async
from cohort.torch._hvd_allreduce import allreduce_async_, grouped_allreduce_async_
from cohort.torch._hvd_checks import _resolve_op
from cohort.torch._hvd_compression import Compression
from cohort.torch._hvd_handles import synchronize
from cohort.torch._hvd_state import _comm_for, global_process_set
from cohort.torch._hvd_types import Average


def _split_evenly(items, n):
    """n consecutive chunks of items whose lengths differ by at most one (longer ones first)."""
    q, r = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        end = start + q + (1 if i < r else 0)
        out.append(items[start:end])
        start = end
    return out


class _DistributedOptimizer(object):
    """Mixed in before the wrapped optimizer's class (see DistributedOptimizer)."""

    def __init__(self, params, named_parameters, compression, backward_passes_per_step, op,
                 gradient_predivide_factor, groups, sparse_as_dense, process_set):
        super(_DistributedOptimizer, self).__init__(params)
        self._compression = compression
        if named_parameters is not None:
            named_parameters = list(named_parameters)
        else:
            named_parameters = [('noname.%d.%d' % (i, j), v)
                                for i, group in enumerate(self.param_groups)
                                for j, v in enumerate(group['params'])]
        if any(not isinstance(p, tuple) or len(p) != 2 for p in named_parameters):
            raise ValueError('named_parameters must be a sequence of (name, parameter) tuples, '
                             'such as model.named_parameters() gives')
        names = [k for k, _ in named_parameters]
        dups = sorted({k for k in names if names.count(k) > 1})
        if dups:
            raise ValueError('parameter names in named_parameters must be unique; repeated: %s'
                             % ', '.join(dups))
        all_ids = {id(v) for group in self.param_groups for v in group['params']}
        unnamed = all_ids - {id(v) for _, v in named_parameters}
        if unnamed:
            raise ValueError('named_parameters was given, but %d parameter(s) of the optimizer '
                             'are not in it' % len(unnamed))
        self._parameter_names = {v: k for k, v in named_parameters}
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_delay = {v: backward_passes_per_step for _, v in named_parameters}
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self.process_set = process_set
        self._handles = {}
        self._grad_accs = []
        self._requires_update = []
        self._synchronized = False
        self._should_synchronize = True
        if groups is not None:
            if isinstance(groups, list):
                seen = set()
                for g in groups:
                    for p in g:
                        if not isinstance(p, torch.Tensor):
                            raise ValueError('groups must be lists of torch.Tensor')
                        if id(p) in seen:
                            raise ValueError('a parameter can be in only one group')
                        seen.add(id(p))
            elif isinstance(groups, bool) or not isinstance(groups, int) or groups <= 0:
                raise ValueError('groups must be a positive integer or a list of lists of '
                                 'torch.Tensor')
        self._groups = groups
        self._p_to_group = {}
        self._group_counts = {}
        if process_set.included() and _comm_for(process_set).size > 1:
            self._register_hooks()

    def load_state_dict(self, *args, **kwargs):
        self._handles = {}
        self._synchronized = False
        self._should_synchronize = True
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step
        super(_DistributedOptimizer, self).load_state_dict(*args, **kwargs)

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = passes

    def _register_hooks(self):
        if self._groups is not None:
            from cohort.torch._hvd_functions import broadcast_object
            p_list = [p for group in self.param_groups for p in group['params']
                      if p.requires_grad]
            # every rank orders the parameters as rank 0 does
            order = broadcast_object([self._parameter_names.get(p) for p in p_list], 0,
                                     name='DistributedOptimizer.groups',
                                     process_set=self.process_set)
            rank_of = {n: i for i, n in enumerate(order)}
            p_list.sort(key=lambda p: rank_of.get(self._parameter_names.get(p), len(order)))
            if isinstance(self._groups, list):
                ids = {id(p) for p in p_list}
                p_groups, grouped = [], set()
                for g in self._groups:
                    members = [p for p in g if id(p) in ids]
                    if members:
                        p_groups.append(members)
                    grouped.update(id(p) for p in members)
                p_groups += [[p] for p in p_list if id(p) not in grouped]
            else:
                p_groups = [g for g in _split_evenly(p_list, self._groups) if g]
            for g in p_groups:
                g = tuple(g)
                for p in g:
                    self._p_to_group[p] = g
                self._group_counts[g] = 0
        for group in self.param_groups:
            for p in group['params']:
                if p.requires_grad:
                    self._requires_update.append(p)
                    grad_acc = p.expand_as(p).grad_fn.next_functions[0][0]
                    grad_acc.register_hook(self._make_hook(p))
                    self._grad_accs.append(grad_acc)

    def _scale_factors(self):
        if self.op == Average:
            return 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        return 1.0, 1.0

    def _allreduce_grad_async(self, p):
        if p.grad is None:
            # not computed here, maybe computed elsewhere: every rank must send something
            p.grad = p.data.new(p.size()).zero_()
        name = self._parameter_names.get(p)
        tensor = p.grad
        if tensor.is_sparse:
            if self.sparse_as_dense:
                tensor = tensor.to_dense()
            else:
                return sparse_allreduce_async(tensor, name=name, op=self.op,
                                              process_set=self.process_set), None
        compressed, ctx = self._compression.compress(tensor)
        pre, post = self._scale_factors()
        handle = allreduce_async_(compressed, name=name, op=self.op, prescale_factor=pre,
                                  postscale_factor=post, process_set=self.process_set)
        return handle, ctx

    def _grouped_allreduce_grad_async(self, ps):
        for p in ps:
            if p.grad is None:
                p.grad = p.data.new(p.size()).zero_()
        name = self._parameter_names.get(ps[0])
        pairs = [self._compression.compress(p.grad.to_dense() if p.grad.is_sparse else p.grad)
                 for p in ps]
        pre, post = self._scale_factors()
        handle = grouped_allreduce_async_([c for c, _ in pairs], name=name, op=self.op,
                                          prescale_factor=pre, postscale_factor=post,
                                          process_set=self.process_set)
        return handle, [ctx for _, ctx in pairs]

    def _make_hook(self, p):
        def hook(*ignore):
            if p in self._handles and self._handles[p][0] is not None and \
                    self._allreduce_delay[p] <= 0:
                raise AssertionError(
                    'a gradient was computed more often than backward_passes_per_step (%d) '
                    'before step(); raise backward_passes_per_step to accumulate gradients '
                    'locally' % self.backward_passes_per_step)
            assert not p.grad.requires_grad
            assert self._allreduce_delay[p] > 0
            handle, ctx = None, None
            self._allreduce_delay[p] -= 1
            if self._allreduce_delay[p] == 0:
                if self._groups is not None:
                    group = self._p_to_group[p]
                    self._group_counts[group] += 1
                    if self._group_counts[group] == len(group):
                        handle, ctxs = self._grouped_allreduce_grad_async(group)
                        self._handles[group] = (handle, ctxs)
                        for gp in group:
                            self._handles.pop(gp, None)
                        self._group_counts[group] = 0
                        return
                else:
                    handle, ctx = self._allreduce_grad_async(p)
            self._handles[p] = (handle, ctx)
        return hook

    def synchronize(self):
        """Waits for every gradient's allreduce (issuing those not issued yet, in the order of
        the optimizer's parameters) and stores the results in the gradients."""
        if not self.process_set.included():
            self._synchronized = True
            return
        done = set()
        for key in self._handles:
            if isinstance(key, tuple):
                done.update(id(p) for p in key)
            else:
                done.add(id(key))
        for p in self._requires_update:
            if id(p) not in done:
                self._handles[p] = self._allreduce_grad_async(p)
        for key, (handle, ctx) in list(self._handles.items()):
            if handle is None:
                self._handles[key] = self._allreduce_grad_async(key)
        for key, (handle, ctx) in self._handles.items():
            if isinstance(key, tuple):
                outputs = synchronize(handle)
                for gp, out, gctx in zip(key, outputs, ctx):
                    self._allreduce_delay[gp] = self.backward_passes_per_step
                    self._set_grad(gp, self._compression.decompress(out, gctx))
                if self._group_counts.get(key):
                    self._group_counts[key] = 0
            else:
                out = handle() if callable(handle) else synchronize(handle)
                self._allreduce_delay[key] = self.backward_passes_per_step
                if self._groups is not None:
                    g = self._p_to_group.get(key)
                    if g is not None and self._group_counts[g]:
                        self._group_counts[g] = 0
                self._set_grad(key, self._compression.decompress(out, ctx))
        self._handles.clear()
        self._synchronized = True

    @staticmethod
    def _set_grad(p, value):
        if p.grad.is_sparse:
            if not value.is_sparse:
                value = value.to_sparse()
            p.grad.zero_().add_(value)
        elif value is not p.grad:
            p.grad.set_(value.to(p.grad.dtype) if value.dtype != p.grad.dtype else value)

    @contextmanager
    def skip_synchronize(self):
        """Within it, step() does not synchronize (call synchronize() before):

            optimizer.synchronize()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            with optimizer.skip_synchronize():
                optimizer.step()
        """
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn('optimizer.step() after optimizer.synchronize() outside '
                              'optimizer.skip_synchronize(): the gradients are reduced again; '
                              'use skip_synchronize() around step()')
            self.synchronize()
        self._synchronized = False
        return super(_DistributedOptimizer, self).step(closure)

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError('optimizer.zero_grad() between loss.backward() and '
                                 'optimizer.step() or optimizer.synchronize(): the gradients '
                                 'are being reduced')
        return super(_DistributedOptimizer, self).zero_grad(*args, **kwargs)

    @property
    def _hvd_base(self):
        """The wrapped optimizer's class."""
        return type(self).__mro__[2]


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False,
                         process_set=global_process_set):
    """Wraps a torch optimizer (Horovod's DistributedOptimizer): each gradient is allreduced
    asynchronously as soon as backward has accumulated it (a hook on the parameter's
    gradient accumulator), and step() waits for them (synchronize()) before updating.

    The result is an instance of a subclass of the optimizer's class made on the fly, sharing
    its param_groups; unlike Horovod's it also keeps the optimizer's state and defaults.
    named_parameters names the allreduces ("allreduce.<name>" on cohort's timeline).
    backward_passes_per_step: gradients are accumulated locally over that many backward passes
    before being reduced. op: Average (default), Sum, Min, Max or Product (Adasum: ValueError).
    gradient_predivide_factor (Average only): gradients are scaled by 1/f before the sum and by
    f/size after. groups (or the deprecated num_groups): an int splits the parameters into that
    many groups, or a list of lists of parameters; each group is reduced in one operation once
    all its gradients are ready. sparse_as_dense: sparse gradients are densified; otherwise they
    are allgathered (sparse_allreduce_async).

    As in torch.distributed generally, every rank must produce its gradients in the same order
    (the same graph); a parameter without a gradient on every rank is reduced (as zeros) in
    synchronize()."""
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError('gradient_predivide_factor not supported with op != Average')
    op = _resolve_op(op, None)
    if num_groups != 0:
        warnings.warn('num_groups is deprecated; use groups', DeprecationWarning)
        if groups is None:
            groups = num_groups
    if backward_passes_per_step <= 0:
        raise ValueError('backward_passes_per_step must be > 0')
    base = optimizer.__class__
    cls = type(base.__name__, (_DistributedOptimizer, base), {})
    opt = cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step,
              op, gradient_predivide_factor, groups, sparse_as_dense, process_set)
    opt.defaults = dict(optimizer.defaults)
    for p, s in optimizer.state.items():
        opt.state[p] = s
    return opt
