# SPDX-License-Identifier: BSD-3-Clause
"""The c10d backend "cohort": torch.distributed.init_process_group("cohort") and new_group()
create a ProcessGroupCohort through this function."""
from cohort.torch._C import ProcessGroupCohort  # noqa: F401  (needs torch imported first)


def _create_process_group(store, rank, size, timeout):
    # torch hands its timeout (a timedelta) to every group it makes: it becomes the
    # communicator's own (every wait in cohort is bounded by it)
    return ProcessGroupCohort(store, rank, size, timeout.total_seconds())
