# SPDX-License-Identifier: BSD-3-Clause
# Helpers of the rxe-vm tests (tests/verbs/test_rxe.sh, test_rxe2.sh), sourced. rxe_prepare
# PROG...: skips (77) with the reason when the guests cannot run: COHORT_SKIP_RXE=1, not root,
# no qemu, no rxe-vm tool (RXEVM_DIR, default ../shared/tools/rxe-vm beside the source tree),
# the plugin or the rxe provider missing, one of the build's PROGs not built, no directory that
# holds both trees, or a guest image that cannot be built (it downloads Debian's kernel once;
# cached in RXEVM_CACHE). Then sets RXEVM_DIR, share (the directory the guests mount), src, bld
# and start, and exports top_builddir and top_srcdir as absolute paths for the guest.
# rxe_finish NAME RC: the wall time, and the exit status of the test for run-in-vm.sh's RC.
: "${top_builddir:?run through make check}"
skip() { echo "SKIP: $*"; exit 77; }

rxe_prepare() {
    [ "${COHORT_SKIP_RXE:-0}" = 1 ] && skip "COHORT_SKIP_RXE=1"
    [ "$(id -u)" = 0 ] || skip "needs root (qemu with the host's / as the guest root, 9p passthrough)"
    command -v qemu-system-x86_64 >/dev/null 2>&1 || skip "qemu-system-x86_64 is not installed (apt-get install qemu-system-x86 busybox-static cpio kmod xz-utils file)"
    RXEVM_DIR=${RXEVM_DIR:-$top_srcdir/../shared/tools/rxe-vm}
    [ -x "$RXEVM_DIR/run-in-vm.sh" ] || skip "no rxe-vm tool at $RXEVM_DIR (set RXEVM_DIR)"
    [ -e "$top_builddir/.libs/libcohort-verbs.so" ] || skip "the verbs transport was not built (libibverbs-dev)"
    ls /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav*.so >/dev/null 2>&1 || skip "the rxe provider is not installed (apt-get install ibverbs-providers)"
    for p in "$@"; do
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
    _log=$(mktemp)
    RXEVM_ROOT=host "$RXEVM_DIR/build-image.sh" >"$_log" 2>&1 || {
        tail -n 5 "$_log"; rm -f "$_log"; skip "the rxe-vm guest image could not be built (see above)"; }
    rm -f "$_log"
    export top_builddir="$bld" top_srcdir="$src"
}

rxe_finish() {
    echo "$1: wall time $(( $(date +%s) - start )) s (guest boot included), exit $2"
    case $2 in
        0) exit 0 ;;
        125) skip "rxe-vm could not set the guest up (exit 125: no rxe0 device; see its output above)" ;;
        *) exit 1 ;;
    esac
}
