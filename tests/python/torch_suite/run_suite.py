#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""Runs PyTorch's own distributed test suite (torch 1.13,
torch.testing._internal.distributed.distributed_test) against one c10d backend.

    /usr/bin/python3 run_suite.py [BACKEND [WORLD_SIZE]] [unittest options] [test names]
    /usr/bin/python3 run_suite.py [BACKEND [WORLD_SIZE]] --list     # the case ids, one a line

BACKEND and WORLD_SIZE may come from the environment instead (defaults: gloo, 2).
Every rank is a *spawned* process that re-imports this file as __mp_main__, and the suite decides
at its own import which cases a backend runs, so all set-up below is at module level.
"""
import os
import re
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the expecttest stand-in

if __name__ == "__main__":  # leading positional BACKEND [WORLD_SIZE]; children inherit the env
    if len(sys.argv) > 1 and re.fullmatch(r"[a-z][a-z0-9_]*", sys.argv[1]):
        os.environ["BACKEND"] = sys.argv.pop(1)
        if len(sys.argv) > 1 and sys.argv[1].isdigit():
            os.environ["WORLD_SIZE"] = sys.argv.pop(1)
os.environ.setdefault("BACKEND", "gloo")
os.environ.setdefault("WORLD_SIZE", "2")
BACKEND = os.environ["BACKEND"]

if BACKEND == "cohort":
    import cohort.torch  # noqa: F401  registers "cohort" with Backend.register_backend

# The suite's skip decorators test membership in these sets while its module is imported, so a
# third-party backend must be declared before that. cohort claims what gloo claims on the CPU:
# "ddp", "subgroup" (it is in no skip_collective set, as gloo is not), and "plugin" (a registered
# backend: require_backends_available accepts it). "gpu" and "cuda" gate the CUDA cases, which
# cohort cannot run, but also the CPU object collectives ({all_,}gather_object{,_subgroup},
# broadcast_object_list); without a CUDA device every other case they gate skips at run time
# (skip_if_lt_x_gpu, skip_if_no_gpu) as it does for gloo, so there cohort claims them too.
import torch  # noqa: E402
from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

FEATURES = {"cohort": ["ddp", "subgroup", "plugin"]
            + ([] if torch.cuda.is_available() else ["gpu", "cuda"])}
for feature in FEATURES.get(BACKEND, ()):
    DistTestCases.backend_feature[feature].add(BACKEND)

from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest,
    TestDistBackend,
)


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    # as torch's test/distributed/test_distributed_spawn.py: each case spawns WORLD_SIZE ranks
    def setUp(self):
        super().setUp()
        self._spawn_processes()

    def run_test(self, test_name, pipe):
        # TestDistBackend._run makes every DDP wrap its module in ReplicatedTensors, which imports
        # torch.distributed._shard; torch 1.13's fails to import under Python 3.11 (a dataclass
        # error), so each CPU DDP case errors before it communicates. Opt-in: plain DDP instead.
        if os.environ.get("TORCH_SUITE_PLAIN_DDP") == "1":
            from torch.nn.parallel._replicated_tensor_ddp_utils import _set_ddp_with_replicated_tensor
            _set_ddp_with_replicated_tensor(False)
        super().run_test(test_name, pipe)


if __name__ == "__main__":
    if "--list" in sys.argv:
        suite = unittest.defaultTestLoader.loadTestsFromTestCase(TestDistBackendWithSpawn)
        print("\n".join(sorted(t.id().split(".")[-1] for t in suite)))
        sys.exit(0)
    # descriptions=False: one "name (id) ... outcome" line per case, no docstrings in between
    unittest.main(testRunner=unittest.TextTestRunner(verbosity=2, descriptions=False))
