#!/bin/sh
# The verbs transport on a real RDMA stack: boots ONE qemu guest with a Soft-RoCE device rxe0
# (the shared rxe-vm tool, RXEVM_ROOT=host: the guest runs this host's own / and so the binaries
# of this build directory unchanged) and runs tests/verbs/rxe_inner.sh there: conformance suite
# and collective suite over verbs at np=2 and 3, COHORT_IB_HCA, a rank killed mid-allreduce.
# Skips (77) with the reason when it cannot run: COHORT_SKIP_RXE=1, not root, no qemu, no rxe-vm
# tool (RXEVM_DIR, default ../shared/tools/rxe-vm beside the source tree), the plugin not built,
# the guest image cannot be built (it downloads Debian's kernel once; cached in RXEVM_CACHE).
: "${top_builddir:?run through make check}"
skip() { echo "SKIP: $*"; exit 77; }
[ "${COHORT_SKIP_RXE:-0}" = 1 ] && skip "COHORT_SKIP_RXE=1"
[ "$(id -u)" = 0 ] || skip "needs root (qemu with the host's / as the guest root, 9p passthrough)"
command -v qemu-system-x86_64 >/dev/null 2>&1 || skip "qemu-system-x86_64 is not installed (apt-get install qemu-system-x86 busybox-static cpio kmod xz-utils file)"
RXEVM_DIR=${RXEVM_DIR:-$top_srcdir/../shared/tools/rxe-vm}
[ -x "$RXEVM_DIR/run-in-vm.sh" ] || skip "no rxe-vm tool at $RXEVM_DIR (set RXEVM_DIR)"
[ -e "$top_builddir/.libs/libcohort-verbs.so" ] || skip "the verbs transport was not built (libibverbs-dev)"
ls /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav*.so >/dev/null 2>&1 || skip "the rxe provider is not installed (apt-get install ibverbs-providers)"
for p in tests/mp/collcheck tests/mp/faulty cohort-conformance examples/allreduce; do
    [ -x "$top_builddir/$p" ] || skip "$top_builddir/$p is not built"
done
# The guest mounts one host directory at the same path: the deepest one holding both trees.
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
# A deadline for the whole guest run: far above the ~2 minutes it takes, below CI's patience.
export top_builddir="$bld" top_srcdir="$src"
RXEVM_ROOT=host RXEVM_BUILD=0 RXEVM_TIMEOUT=${RXEVM_TIMEOUT:-420} RXEVM_ENV="top_builddir top_srcdir" \
    "$RXEVM_DIR/run-in-vm.sh" "$share" sh "$src/tests/verbs/rxe_inner.sh"
rc=$?
echo "test_rxe.sh: wall time $(( $(date +%s) - start )) s (guest boot included), exit $rc"
case $rc in
    0) exit 0 ;;
    125) skip "rxe-vm could not set the guest up (exit 125: no rxe0 device; see its output above)" ;;
    *) exit 1 ;;
esac
