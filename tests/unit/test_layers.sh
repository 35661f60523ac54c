#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Calls go down only (docs/design.md): the core's objects form no call cycle but the two the
# design allows, and the algorithms call only the layers below them (tests/unit/layers.py).
command -v nm >/dev/null 2>&1 || { echo "SKIP: no nm"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "SKIP: no python3"; exit 77; }
exec python3 "$top_srcdir/tests/unit/layers.py" "$top_builddir" "$top_srcdir"
