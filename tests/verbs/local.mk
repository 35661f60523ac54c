# SPDX-License-Identifier: BSD-3-Clause
# The verbs transport: without a device through the real loader (test_unavailable.sh), and on a
# real Soft-RoCE device in one qemu guest (test_rxe.sh runs rxe_inner.sh there) and between two
# guests (test_rxe2.sh runs rxe2_inner.sh in each); both skip with a reason when qemu/the rxe-vm
# tool cannot be used, or with COHORT_SKIP_RXE=1.
TESTS += tests/verbs/test_unavailable.sh tests/verbs/test_rxe.sh tests/verbs/test_rxe2.sh
dist_noinst_SCRIPTS += tests/verbs/test_unavailable.sh tests/verbs/test_rxe.sh tests/verbs/rxe_inner.sh \
	tests/verbs/test_rxe2.sh tests/verbs/rxe2_inner.sh tests/verbs/rxe_lib.sh
