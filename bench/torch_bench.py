# SPDX-License-Identifier: BSD-3-Clause
"""torch.distributed allreduce through a backend, as a PyTorch user sees it (issue figures in
docs/performance-log.md). Launch: cohortrun -np N /usr/bin/python3 bench/torch_bench.py --backend B

  blocking all_reduce of float32 at each --sizes (bytes): median time per call and busbw
  (2(n-1)/n x bytes / time); then --async-n async all_reduce calls of --async-bytes issued back
  to back and waited: total time. Rank 0 prints one line per measurement.
"""
import argparse
import statistics
import time

import torch
import torch.distributed as dist

p = argparse.ArgumentParser()
p.add_argument("--backend", default="cohort")
p.add_argument("--sizes", default="4096,16777216")
p.add_argument("--iters", type=int, default=0, help="calls per size (0: by size)")
p.add_argument("--reps", type=int, default=5, help="timed repetitions (the median is shown)")
p.add_argument("--async-n", type=int, default=500)
p.add_argument("--async-bytes", type=int, default=1024)
a = p.parse_args()
if a.backend == "cohort":
    import cohort.torch  # noqa: F401
torch.set_num_threads(1)
dist.init_process_group(a.backend)
rank, n = dist.get_rank(), dist.get_world_size()


def out(line):
    if rank == 0:
        print(f"backend={a.backend} np={n} {line}", flush=True)


for size in [int(s) for s in a.sizes.split(",")]:
    t = torch.ones(size // 4)
    iters = a.iters or max(5, min(2000, (64 << 20) // max(size, 1) // 4))
    for _ in range(3):
        dist.all_reduce(t)
    times = []
    for _ in range(a.reps):
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        times.append((time.perf_counter() - t0) / iters)
    med = statistics.median(times)
    out(f"allreduce bytes={size} time_us={med * 1e6:.1f} busbw_GBs="
        f"{2 * (n - 1) / n * size / med / 1e9:.2f} iters={iters}")

ts = [torch.ones(a.async_bytes // 4) for _ in range(a.async_n)]
times = []
for _ in range(a.reps):
    dist.barrier()
    t0 = time.perf_counter()
    works = [dist.all_reduce(x, async_op=True) for x in ts]
    for w in works:
        w.wait()
    times.append(time.perf_counter() - t0)
out(f"async n={a.async_n} bytes={a.async_bytes} total_ms={statistics.median(times) * 1e3:.2f}")
dist.barrier()
dist.destroy_process_group()
