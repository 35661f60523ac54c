#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The verbs transport on a real RDMA stack: boots ONE qemu guest with a Soft-RoCE device rxe0
# (the shared rxe-vm tool, RXEVM_ROOT=host: the guest runs this host's own / and so the binaries
# of this build directory unchanged) and runs tests/verbs/rxe_inner.sh there: conformance suite
# and collective suite over verbs at np=2 and 3, COHORT_IB_HCA, a rank killed mid-allreduce.
# Skips (77) with the reason when it cannot run (tests/verbs/rxe_lib.sh says when).
. "$top_srcdir/tests/verbs/rxe_lib.sh"
rxe_prepare tests/mp/collcheck tests/mp/faulty tests/mp/memchurn cohort-conformance examples/allreduce
# A deadline for the whole guest run: far above the 3-5 minutes it takes (TCG, loaded host,
# AddressSanitizer), below CI's patience.
RXEVM_ROOT=host RXEVM_BUILD=0 RXEVM_TIMEOUT=${RXEVM_TIMEOUT:-900} RXEVM_ENV="top_builddir top_srcdir" \
    "$RXEVM_DIR/run-in-vm.sh" "$share" sh "$src/tests/verbs/rxe_inner.sh"
rxe_finish test_rxe.sh $?
