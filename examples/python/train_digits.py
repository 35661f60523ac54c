#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""Data-parallel training of a small CNN on sklearn's bundled 8x8 digits (no download).

Two ways to drive the communication:

  --api ddp   torch.distributed.init_process_group(--backend) + DistributedDataParallel
  --api hvd   import cohort.torch as hvd: DistributedOptimizer, broadcast_parameters,
              broadcast_optimizer_state (Horovod's names). With --backend gloo the default
              process group is created with gloo before hvd.init(), so the Horovod-style layer
              runs over gloo, for comparison.

Launch (reads only the env:// variables RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT):

  cohortrun -np 4 /usr/bin/python3 examples/python/train_digits.py
  /usr/bin/python3 -m torch.distributed.run --nproc_per_node 2 -r 2 -t 2 \
      examples/python/train_digits.py --api ddp --backend gloo --check

Rank 0 prints one line per epoch and, at the end, one machine-readable line:

  backend=... api=... world=... epochs=... final_acc=... mean_epoch_s=... (more key=value)

mean_epoch_s is the mean training time of the epochs after the first (the first one also pays
for connection setup and warm-up); with --epochs 1 it is that epoch's time.
"""
import argparse
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

# A correct run with the default settings reaches this test accuracy reliably (typically
# 0.96-0.99 at 1 to 4 ranks); --check fails below it. Change it with --min-acc when you change
# --epochs, --lr or --batch-size a lot.
DEFAULT_MIN_ACC = 0.90
SPLIT_SEED = 0  # the train/test split never depends on --seed


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--api", choices=["ddp", "hvd"], default="ddp")
    p.add_argument("--backend", choices=["cohort", "gloo"], default="cohort")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=32, help="per rank (default 32)")
    p.add_argument("--lr", type=float, default=0.07,
                   help="SGD learning rate, momentum 0.9; not scaled by the world size")
    p.add_argument("--compression", choices=["none", "fp16"], default="none",
                   help="gradient compression: hvd.Compression.* or DDP's fp16_compress_hook")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--width", type=int, default=16, help="channels of the first conv layer")
    p.add_argument("--hidden", type=int, default=64,
                   help="units of the hidden fully connected layer (large: gradients outweigh "
                        "compute, as in a communication-bound model; default 64)")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    p.add_argument("--check", action="store_true",
                   help="fail unless every rank ends with identical parameters and the test "
                        "accuracy reaches --min-acc")
    p.add_argument("--min-acc", type=float, default=DEFAULT_MIN_ACC)
    return p.parse_args()


class Net(nn.Module):
    def __init__(self, width, hidden=64):
        super().__init__()
        self.conv1 = nn.Conv2d(1, width, 3, padding=1)
        self.conv2 = nn.Conv2d(width, 2 * width, 3, padding=1)
        self.fc1 = nn.Linear(2 * width * 4 * 4, hidden)
        self.fc2 = nn.Linear(hidden, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)  # 8x8 -> 4x4
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        return self.fc2(x)


def load_data():
    from sklearn.datasets import load_digits
    digits = load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0  # N,1,8,8 in [0,1]
    y = torch.tensor(digits.target, dtype=torch.int64)
    perm = torch.from_numpy(np.random.RandomState(SPLIT_SEED).permutation(len(y)))
    n_test = len(y) // 5  # 80/20
    test, train = perm[:n_test], perm[n_test:]
    return x[train], y[train], x[test], y[test]


class Comm:
    """The few collectives the script itself needs, over either API."""

    def __init__(self, api, hvd=None):
        self.api, self.hvd = api, hvd
        self.n = 0
        self.keep = []  # every tensor handed to a collective (see the teardown in main)

    def _name(self, what):
        self.n += 1
        return "train_digits.%s.%d" % (what, self.n)

    def ratio(self, num, den):
        """sum over ranks of num / sum over ranks of den. Also right when hvd.allreduce
        averages (Horovod's default): the ratio of the means is the ratio of the sums."""
        t = torch.tensor([float(num), float(den)], dtype=torch.float64)
        self.keep.append(t)
        if self.api == "hvd":
            t = self.hvd.allreduce(t, name=self._name("metrics"))
        else:
            dist.all_reduce(t)
        return (t[0] / t[1]).item()

    def identical(self, vec):
        """True on every rank when vec is bitwise the same on every rank."""
        if self.api == "hvd":
            mine = vec.clone()
            ref = self.hvd.broadcast(mine, root_rank=0, name=self._name("params"))
            bad = torch.tensor([0.0 if torch.equal(ref, vec) else 1.0], dtype=torch.float64)
            self.keep += [mine, ref, bad]
            bad = self.hvd.allreduce(bad, name=self._name("check"))
            return bad.item() == 0.0
        lo, hi = vec.clone(), vec.clone()
        self.keep += [lo, hi]
        dist.all_reduce(lo, op=dist.ReduceOp.MIN)
        dist.all_reduce(hi, op=dist.ReduceOp.MAX)
        return torch.equal(lo, vec) and torch.equal(hi, vec)


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    if "WORLD_SIZE" not in os.environ:  # started by hand: a world of one
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        if "MASTER_PORT" not in os.environ:  # any free port: 29500 may be taken
            import socket
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                os.environ["MASTER_PORT"] = str(s.getsockname()[1])

    hvd = None
    if args.api == "hvd":
        import cohort.torch as hvd
        if args.backend == "gloo":
            dist.init_process_group("gloo", init_method="env://")
        hvd.init()
        rank, world = hvd.rank(), hvd.size()
    else:
        if args.backend == "cohort":
            import cohort.torch  # noqa: F401  (registers the c10d backend "cohort")
        dist.init_process_group(args.backend, init_method="env://")
        rank, world = dist.get_rank(), dist.get_world_size()
    comm = Comm(args.api, hvd)

    x_train, y_train, x_test, y_test = load_data()

    # Each rank starts from different weights on purpose: DDP's constructor and
    # hvd.broadcast_parameters must make them equal (--check sees it when they do not).
    torch.manual_seed(args.seed + rank)
    model = Net(args.width, args.hidden)
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    if args.api == "hvd":
        compression = hvd.Compression.fp16 if args.compression == "fp16" else hvd.Compression.none
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                                       compression=compression, backward_passes_per_step=1)
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(opt, root_rank=0)
        net, plain = model, model
    else:
        net = nn.parallel.DistributedDataParallel(model)
        if args.compression == "fp16":
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
            net.register_comm_hook(None, default_hooks.fp16_compress_hook)
        plain = net.module

    # The same shuffling on every rank (seeded by --seed and the epoch), each rank its stride;
    # padded so that every rank takes the same number of steps.
    sampler = torch.utils.data.DistributedSampler(range(len(y_train)), num_replicas=world,
                                                  rank=rank, shuffle=True, seed=args.seed)
    test_idx = torch.arange(rank, len(y_test), world)

    if rank == 0:
        print("train_digits: api=%s backend=%s world=%d train=%d test=%d params=%d "
              "batch_size=%d/rank steps/epoch=%d" % (
                  args.api, args.backend, world, len(y_train), len(y_test), n_params,
                  args.batch_size, -(-len(sampler) // args.batch_size)), flush=True)

    times, acc = [], 0.0
    for epoch in range(1, args.epochs + 1):
        sampler.set_epoch(epoch)
        idx = torch.tensor(list(sampler), dtype=torch.int64)
        net.train()
        loss_sum = 0.0
        t0 = time.perf_counter()
        for b in range(0, len(idx), args.batch_size):
            bi = idx[b:b + args.batch_size]
            opt.zero_grad()
            loss = F.cross_entropy(net(x_train[bi]), y_train[bi])
            loss.backward()
            opt.step()
            loss_sum += loss.item() * len(bi)
        dt = time.perf_counter() - t0
        times.append(dt)

        plain.eval()
        with torch.no_grad():
            pred = plain(x_test[test_idx]).argmax(1)
        correct = (pred == y_test[test_idx]).sum().item()
        loss_mean = comm.ratio(loss_sum, len(idx))
        acc = comm.ratio(correct, len(test_idx))
        if rank == 0:
            print("epoch %d/%d  loss %.4f  acc %.4f  time %.3f s" % (
                epoch, args.epochs, loss_mean, acc, dt), flush=True)

    steady = times[1:] if len(times) > 1 else times
    mean_epoch_s = sum(steady) / len(steady) if steady else 0.0

    status = 0
    check = "skipped"
    if args.check:
        vec = torch.cat([p.detach().reshape(-1) for p in plain.parameters()])
        same = comm.identical(vec)
        check = "ok"
        if not same:
            check = "FAILED"
            status = 1
            if rank == 0:
                print("check: the ranks' parameters differ", file=sys.stderr, flush=True)
        if acc < args.min_acc:
            check = "FAILED"
            status = 1
            if rank == 0:
                print("check: final accuracy %.4f is below %.2f" % (acc, args.min_acc),
                      file=sys.stderr, flush=True)
    if rank == 0:
        print("backend=%s api=%s world=%d epochs=%d final_acc=%.4f mean_epoch_s=%.4f "
              "compression=%s batch_size=%d lr=%g width=%d hidden=%d threads=%d seed=%d "
              "check=%s" % (
                  args.backend, args.api, world, args.epochs, acc, mean_epoch_s,
                  args.compression, args.batch_size, args.lr, args.width, args.hidden,
                  args.threads, args.seed, check), flush=True)

    # Teardown. torch 1.13 can deadlock here: destroying a process group joins its worker
    # threads while holding the GIL, and a worker still releasing the last reference to a
    # tensor that Python handed it needs the GIL. So every such tensor stays referenced (in
    # comm.keep) until the groups are gone, and a barrier drains the workers first.
    if args.api == "hvd":
        hvd.barrier()
        hvd.shutdown()
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    del net, plain, model, opt
    return status


if __name__ == "__main__":
    sys.exit(main())
