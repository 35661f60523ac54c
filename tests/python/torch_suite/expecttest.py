# SPDX-License-Identifier: BSD-3-Clause
"""Stand-in for the test-only package `expecttest`, which Debian 12 does not ship.

torch.testing._internal.common_utils (torch 1.13) imports it only for `expecttest.TestCase`
(its TestCase's base class) and the flag `expecttest.ACCEPT` (rewrite expected-output literals).
The distributed suite uses no expect-literals, so a plain unittest.TestCase is enough.
"""
import unittest

ACCEPT = False


class TestCase(unittest.TestCase):
    pass
