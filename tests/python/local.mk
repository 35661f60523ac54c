# SPDX-License-Identifier: BSD-3-Clause
# The PyTorch backend and the Horovod-style API, through Debian's real torch (tests/python).
# test_torch.sh: our own cases; test_torch_suite.sh: PyTorch's own distributed test suite with
# BACKEND=cohort (docs/testing.md lists what differs from gloo and why).
dist_noinst_SCRIPTS += tests/python/test_torch.sh tests/python/test_torch_suite.sh \
	tests/python/pg_check.py tests/python/pg_free.py tests/python/dead_rank.py \
	tests/python/hvd_check.py \
	tests/python/launch.py tests/python/torch_suite/run.sh \
	tests/python/torch_suite/run_suite.py tests/python/torch_suite/summarize.py \
	tests/python/torch_suite/expecttest.py \
	tests/python/torch_suite/gloo-pass-ws2.txt tests/python/torch_suite/differences.txt \
	tests/python/torch_suite/allow-debian12.txt
if BUILD_TORCH
TESTS += tests/python/test_torch.sh tests/python/test_torch_suite.sh
endif
