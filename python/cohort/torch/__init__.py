# SPDX-License-Identifier: BSD-3-Clause
"""PyTorch side of cohort.

    import cohort.torch                    # registers the c10d backend "cohort"
    torch.distributed.init_process_group("cohort")

    import cohort.torch as hvd             # or the Horovod-style API
    hvd.init()
"""
import torch
import torch.distributed as _dist

from cohort.torch._backend import _create_process_group, ProcessGroupCohort  # noqa: F401

_dist.Backend.register_backend("cohort", _create_process_group)

from cohort.torch._hvd import *  # noqa: F401,F403,E402
