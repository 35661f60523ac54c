#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The plugin conformance suite on the TCP transport (run-plugin.sh).
exec sh "${top_srcdir:-$(dirname "$0")/../..}/tests/conformance/run-plugin.sh" tcp
