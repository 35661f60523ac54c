# SPDX-License-Identifier: BSD-3-Clause
"""Horovod-style API of cohort, layered on torch.distributed (``import cohort.torch as hvd``).

    import cohort.torch as hvd
    hvd.init()                                   # init_process_group("cohort") from env://
    torch.manual_seed(1)
    model = ...
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_optimizer_state(opt, root_rank=0)

Every operation runs on a torch.distributed process group: the default group (``init()``
creates it with the "cohort" backend when nobody has, otherwise uses whatever backend it has)
or the group behind a ProcessSet. Operations are asynchronous: each one issues torch's
``async_op=True`` collectives and a handle keeps their Work objects; ``poll`` asks
``Work.is_completed()``, ``synchronize`` waits. Only dense CPU tensors are accepted.

Where this differs from horovod.torch (each function's docstring says more):

* Matching. Horovod's coordinator matches operations across ranks by *name*, in any order.
  Here, as everywhere in torch.distributed, the ranks of a process set must issue their
  operations in the *same order*; names only label them (cohort's timeline shows them, see
  ``cohort.torch._names``). Gradient hooks of DistributedOptimizer fire in the same order on
  every rank as long as every rank runs the same graph.
* Mismatches between ranks. allgather, grouped_allgather and alltoall always detect a
  different dtype or trailing shape on another rank (their first phase exchanges shapes) and
  raise RuntimeError on every rank. allreduce/broadcast leave it to the backend (the cohort
  backend reports mismatches; gloo aborts the process) unless ``COHORT_HVD_CHECK=1``, which adds
  one small allgather per operation comparing dtype, shape, op, root and name on all ranks.
* Argument errors (ValueError) are raised on the rank that made them, before anything is sent;
  if only some ranks raise, the others wait until the backend's timeout (COHORT_TIMEOUT).
* Adasum is not supported (ValueError). reducescatter is an allreduce followed by taking this
  rank's rows (same result as Horovod, not its bandwidth). Data-moving operations (broadcast,
  allgather, alltoall) send raw bytes, so they accept every dtype, bool and bfloat16 included,
  on every backend; allreduce accepts the dtypes the backend can reduce.
* Two phases. allgather and alltoall first exchange shapes, then the data. The second phase
  is issued by poll() once the first is done, or by the next operation issued, which therefore
  waits for that first phase: every rank must issue the same sequence of collectives.
* join() keeps Horovod's semantics (joined ranks contribute zeros to the others' allreduces
  until every rank has joined; broadcast/allgather/alltoall/reducescatter issued while a rank
  has joined raise HorovodInternalError, as in Horovod); see ``join`` for how, its costs, and
  its requirement on the backend (c10d's Work.wait(timeout), which gloo and cohort meet).
* Process sets: ProcessSet / add_process_set / remove_process_set make torch.distributed
  subgroups (dist.new_group); join() covers the global set only.
* Objects (broadcast_object, allgather_object) are pickled with cloudpickle when installed,
  else pickle. DistributedOptimizer keeps the wrapped optimizer's state and defaults, and
  broadcast_optimizer_state restores parameters after the step that creates a new optimizer's
  state (Horovod leaves that step's weight decay applied).
* start_timeline/stop_timeline only warn: cohort's timeline is set with COHORT_TIMELINE.
  HorovodInternalError (a RuntimeError) is raised for failed operations, prefixed with the
  operation's name. Elastic training (hvd.elastic), SyncBatchNorm and Adasum are not provided.

Environment: COHORT_TIMEOUT (seconds; the group's timeout when init() creates the group),
COHORT_HVD_CHECK=1 (compare every allreduce/broadcast across ranks first), COHORT_HVD_JOIN_POLL
(seconds; see join), LOCAL_RANK / LOCAL_WORLD_SIZE (else computed from host names).

The implementation, by concern (each module's docstring says more): _hvd_types (reduction
operations, HorovodInternalError, dtypes), _hvd_compression, _hvd_state (initialization state,
process sets), _hvd_basics (init, shutdown, queries), _hvd_comm (a process group's sequence of
collectives and join's protocol), _hvd_handles (poll, synchronize), _hvd_checks (argument checks,
COHORT_HVD_CHECK), _hvd_allreduce (allreduce, reducescatter), _hvd_allgather (allgather, sparse
allreduce), _hvd_broadcast, _hvd_alltoall, _hvd_join (join, barrier), _hvd_functions (objects,
parameters, optimizer state) and _hvd_optimizer (DistributedOptimizer). This module only gathers
the public names.
"""
from cohort.torch._hvd_types import (Average, Sum, Adasum, Min, Max, Product,
                                     HorovodInternalError)
from cohort.torch._hvd_compression import Compression
from cohort.torch._hvd_state import (ProcessSet, global_process_set, add_process_set,
                                     remove_process_set)
from cohort.torch._hvd_basics import (init, shutdown, is_initialized, rank, size, local_rank,
                                      local_size, cross_rank, cross_size, is_homogeneous,
                                      mpi_threads_supported, mpi_enabled, mpi_built,
                                      gloo_enabled, gloo_built, nccl_built, ddl_built, ccl_built,
                                      cuda_built, rocm_built, cohort_built, start_timeline,
                                      stop_timeline)
from cohort.torch._hvd_handles import poll, synchronize
from cohort.torch._hvd_allreduce import (allreduce, allreduce_, allreduce_async,
                                         allreduce_async_, grouped_allreduce, grouped_allreduce_,
                                         grouped_allreduce_async, grouped_allreduce_async_,
                                         reducescatter, reducescatter_async,
                                         grouped_reducescatter, grouped_reducescatter_async)
from cohort.torch._hvd_allgather import (allgather, allgather_async, grouped_allgather,
                                         grouped_allgather_async, sparse_allreduce_async)
from cohort.torch._hvd_broadcast import broadcast, broadcast_, broadcast_async, broadcast_async_
from cohort.torch._hvd_alltoall import alltoall, alltoall_async
from cohort.torch._hvd_join import join, barrier
from cohort.torch._hvd_functions import (broadcast_object, allgather_object,
                                         broadcast_parameters, broadcast_optimizer_state)
from cohort.torch._hvd_optimizer import DistributedOptimizer

__all__ = [
    # basics
    'init', 'shutdown', 'is_initialized', 'rank', 'size', 'local_rank', 'local_size',
    'cross_rank', 'cross_size', 'is_homogeneous', 'mpi_threads_supported', 'mpi_enabled',
    'mpi_built', 'gloo_enabled', 'gloo_built', 'nccl_built', 'ddl_built', 'ccl_built',
    'cuda_built', 'rocm_built', 'cohort_built', 'start_timeline', 'stop_timeline',
    # reduction ops, errors, compression, process sets
    'Average', 'Sum', 'Adasum', 'Min', 'Max', 'Product', 'HorovodInternalError',
    'Compression', 'ProcessSet', 'global_process_set', 'add_process_set', 'remove_process_set',
    # collectives
    'allreduce', 'allreduce_', 'allreduce_async', 'allreduce_async_',
    'grouped_allreduce', 'grouped_allreduce_', 'grouped_allreduce_async',
    'grouped_allreduce_async_', 'sparse_allreduce_async',
    'allgather', 'allgather_async', 'grouped_allgather', 'grouped_allgather_async',
    'broadcast', 'broadcast_', 'broadcast_async', 'broadcast_async_',
    'alltoall', 'alltoall_async', 'reducescatter', 'reducescatter_async',
    'grouped_reducescatter', 'grouped_reducescatter_async',
    'poll', 'synchronize', 'join', 'barrier',
    # functions, optimizer
    'broadcast_object', 'allgather_object', 'broadcast_parameters',
    'broadcast_optimizer_state', 'DistributedOptimizer',
]
