# SPDX-License-Identifier: BSD-3-Clause
# Process groups freed from Python while their watcher still holds the last reference to a tensor
# whose Python object C++ keeps alive (a tensor with an attribute): freeing it takes the GIL,
# which the group's destructor (called from Python's dealloc) holds while it joins the watcher.
# It deadlocked every time before the destructor let go of the GIL (test_torch.sh bounds it).
import os, sys, time
import torch, torch.distributed as dist
import cohort.torch  # noqa: F401
rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("cohort", rank=rank, world_size=size)
t0 = time.time()
n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
for i in range(n):
    g = dist.new_group(list(range(size)))
    for k in range(8):
        t = torch.ones(1 << 12)
        t.tag = k                      # a __dict__: the PyObject is preserved with the tensor
        dist.all_reduce(t, group=g, async_op=True)
        del t
    dist.destroy_process_group(g)
    del g
dist.destroy_process_group()
print(f"rank {rank}: {n} groups freed with work in flight in {time.time() - t0:.1f} s", flush=True)
