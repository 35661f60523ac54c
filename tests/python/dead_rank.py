# SPDX-License-Identifier: BSD-3-Clause
"""A rank killed mid-training: every other rank's pending Work must fail with a Python exception
that names the lost rank, within the process group's timeout, never hang.

    cohortrun -np N /usr/bin/python3 tests/python/dead_rank.py VICTIM

Each surviving rank prints "rank R: caught after S s: <message>" and exits 3; the victim kills
itself with SIGKILL at step 5 (no goodbye, as an OOM kill or a crash)."""
import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

import cohort.torch  # noqa: F401

victim = int(sys.argv[1])
dist.init_process_group("cohort", timeout=datetime.timedelta(seconds=60))
rank = dist.get_rank()
model = torch.nn.Linear(64, 64)
ddp = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
t0 = None
try:
    for step in range(1000):
        if step == 5:
            t0 = time.monotonic()
            if rank == victim:
                os.kill(os.getpid(), signal.SIGKILL)
        opt.zero_grad()
        ddp(torch.randn(8, 64)).sum().backward()
        opt.step()
    print(f"rank {rank}: FAIL: 1000 steps ran although rank {victim} died", flush=True)
    sys.exit(1)
except RuntimeError as e:
    print(f"rank {rank}: caught after {time.monotonic() - t0:.1f} s: {e}", flush=True)
    sys.exit(3)
