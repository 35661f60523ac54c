#!/bin/sh
# The verbs transport between two nodes: TWO qemu guests (rxe-vm, RXEVM_VMS=2, RXEVM_ROOT=host),
# each with a Soft-RoCE rxe0 on its own virtio NIC, joined by a private virtual wire; two ranks in
# each guest (tests/verbs/rxe2_inner.sh): shm inside a guest, verbs across, collcheck at np=4.
# Skips (77) like test_rxe.sh (same requirements; COHORT_SKIP_RXE=1 skips both).
: "${top_builddir:?run through make check}"
skip() { echo "SKIP: $*"; exit 77; }
[ "${COHORT_SKIP_RXE:-0}" = 1 ] && skip "COHORT_SKIP_RXE=1"
[ "$(id -u)" = 0 ] || skip "needs root (qemu with the host's / as the guest root, 9p passthrough)"
command -v qemu-system-x86_64 >/dev/null 2>&1 || skip "qemu-system-x86_64 is not installed (apt-get install qemu-system-x86 busybox-static cpio kmod xz-utils file)"
RXEVM_DIR=${RXEVM_DIR:-$top_srcdir/../shared/tools/rxe-vm}
[ -x "$RXEVM_DIR/run-in-vm.sh" ] || skip "no rxe-vm tool at $RXEVM_DIR (set RXEVM_DIR)"
[ -e "$top_builddir/.libs/libcohort-verbs.so" ] || skip "the verbs transport was not built (libibverbs-dev)"
ls /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav*.so >/dev/null 2>&1 || skip "the rxe provider is not installed (apt-get install ibverbs-providers)"
for p in tests/mp/collcheck tools/cohort-info; do
    [ -x "$top_builddir/$p" ] || skip "$top_builddir/$p is not built"
done
src=$(cd "$top_srcdir" && pwd -P) bld=$(cd "$top_builddir" && pwd -P)
share=$src
while :; do
    case $bld/ in "$share"/*) break ;; esac
    share=$(dirname "$share")
done
[ "$share" = / ] && skip "the source ($src) and build ($bld) trees share no directory but /, which rxe-vm cannot mount"
case $share in *" "*|*,*) skip "rxe-vm cannot mount a path with spaces or commas: $share" ;; esac
start=$(date +%s)
log=$(mktemp)
RXEVM_ROOT=host "$RXEVM_DIR/build-image.sh" >"$log" 2>&1 || {
    tail -n 5 "$log"; rm -f "$log"; skip "the rxe-vm guest image could not be built (see above)"; }
rm -f "$log"
export top_builddir="$bld" top_srcdir="$src"
RXEVM_VMS=2 RXEVM_ROOT=host RXEVM_BUILD=0 RXEVM_TIMEOUT=${RXEVM_TIMEOUT:-420} \
    RXEVM_ENV="top_builddir top_srcdir" \
    "$RXEVM_DIR/run-in-vm.sh" "$share" sh "$src/tests/verbs/rxe2_inner.sh"
rc=$?
echo "test_rxe2.sh: wall time $(( $(date +%s) - start )) s (both guests' boot included), exit $rc"
case $rc in
    0) exit 0 ;;
    125) skip "rxe-vm could not set the guests up (exit 125; see its output above)" ;;
    *) exit 1 ;;
esac
