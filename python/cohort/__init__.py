# SPDX-License-Identifier: BSD-3-Clause
"""cohort: collective communication for distributed training (Python side).

`cohort.torch` is the PyTorch side: importing it registers the c10d backend "cohort" and offers
a Horovod-style API (`import cohort.torch as hvd`).
"""
from cohort._build_info import __version__, libdir  # noqa: F401  (written by configure)
