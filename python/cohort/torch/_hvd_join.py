# SPDX-License-Identifier: BSD-3-Clause
"""The calls of cohort.torch's Horovod-style API that only make ranks wait for one another:
barrier() and join() (the protocol join() describes runs in _hvd_comm's _Comm)."""
from cohort.torch._hvd_handles import _Handle, _flush, _lock, _register, synchronize
from cohort.torch._hvd_state import _comm_for, global_process_set


def barrier(process_set=global_process_set):
    """Returns once every rank of the process set has called barrier()."""
    comm = _comm_for(process_set)
    with _lock:
        _flush()
        h = _Handle('barrier', comm)
        h.ops = [comm.barrier('barrier')]
        hid = _register(h)
    synchronize(hid)


def join(device=-1):
    """Says this rank has no more data (Horovod's join): until every rank has joined, this rank
    keeps taking part in the operations the other ranks issue, contributing zeros to their
    allreduces (Average still divides by the full size, and Min/Max/Product see the zeros, as in
    Horovod); broadcast, allgather, alltoall and reducescatter issued while a rank has joined
    fail with HorovodInternalError on the ranks that issued them, as in Horovod (the joined rank
    still takes part, so every rank stays in step). Returns the rank that joined last, the same
    on every rank. Covers the global process set's operations only. ``device`` is ignored.

    How, over torch.distributed (no coordinator): each rank numbers the collectives it issues
    in its group's sequence and keeps a one-line description of each ("ar float32 1024 sum
    allreduce.fc.weight") in a log, until an operation completes that proves every rank is past
    it. A joining rank registers its position in the sequence in the process group's store and
    publishes its log there; then it reads the descriptions of the following positions from
    the store, one by one, and takes part in each operation with zeros, until the last rank to
    join writes "done" at the last position reached by any rank. A rank still working learns of
    a join while it waits for an operation that cannot finish without the joined rank: it reads
    the store when a wait lasts longer than COHORT_HVD_JOIN_POLL seconds (default 0.05, then at
    doubling intervals up to 1 s), publishes its log, and from then on publishes each operation
    as it issues it. Whether an operation ran with a joined rank is seen in the exchanged shapes
    for allgather and alltoall (a joined rank sends zeros), and from the store for broadcast and
    reducescatter (one read covers every such operation already complete).

    Costs when no rank joins: the log (a string per operation, dropped as operations complete)
    and one store read per wait longer than COHORT_HVD_JOIN_POLL and per broadcast or
    reducescatter batch. Requirements: the backend's Work.wait(timeout) must return or raise
    when the timeout passes without cancelling the operation (c10d's Work does, so gloo's and
    cohort's do); the group needs a store (env:// or a store given to init_process_group). A
    joined rank waits for each description up to the store's timeout (the group's timeout).
    Every rank's operations must go through this module while a rank has joined: a raw
    torch.distributed call on the same group cannot be answered by the joined rank."""
    comm = _comm_for(None)
    with _lock:
        _flush()
        return comm.join()
