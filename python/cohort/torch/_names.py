# SPDX-License-Identifier: BSD-3-Clause
"""Names of tensors in cohort's timeline (COHORT_TIMELINE)."""
import torch.distributed as _dist


def name_next(name, group=None):
    """The next operation issued on group (default: the default group) appears in the timeline
    under name. Does nothing when the group's backend is not cohort."""
    from cohort.torch._backend import ProcessGroupCohort
    pg = group if group is not None else _dist.distributed_c10d._get_default_group()
    if isinstance(pg, ProcessGroupCohort):
        pg._name_next(str(name))
