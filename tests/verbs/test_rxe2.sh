#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The verbs transport between two nodes: TWO qemu guests (rxe-vm, RXEVM_VMS=2, RXEVM_ROOT=host),
# each with a Soft-RoCE rxe0 on its own virtio NIC, joined by a private virtual wire; two ranks in
# each guest (tests/verbs/rxe2_inner.sh): shm inside a guest, verbs across, collcheck at np=4.
# Skips (77) like test_rxe.sh (same requirements; COHORT_SKIP_RXE=1 skips both).
. "$top_srcdir/tests/verbs/rxe_lib.sh"
rxe_prepare tests/mp/collcheck tests/mp/memchurn tools/cohort-info
# A deadline for the whole run, as test_rxe.sh's: two TCG guests beside test_rxe.sh's (make -j2)
# and another suite (the 20-run stress) took their np=4 collcheck 240 s and ran past the 420 s
# this was, the work itself being fine; CI alone takes about 4 minutes.
RXEVM_VMS=2 RXEVM_ROOT=host RXEVM_BUILD=0 RXEVM_TIMEOUT=${RXEVM_TIMEOUT:-900} \
    RXEVM_ENV="top_builddir top_srcdir" \
    "$RXEVM_DIR/run-in-vm.sh" "$share" sh "$src/tests/verbs/rxe2_inner.sh"
rxe_finish test_rxe2.sh $?
