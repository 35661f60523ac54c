#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Installs what building and testing cohort needs on Debian 12 (as root, or through sudo).
set -euo pipefail
# clang + libclang-rt-14-dev (libclang_rt.fuzzer, only recommended by clang): the libFuzzer
# targets of tests/fuzz; valgrind: their corpus replays and the parsers' unit tests under memcheck.
# libibverbs-dev: the verbs transport; ibverbs-providers (rxe) and qemu-system-x86 busybox-static
# cpio kmod xz-utils file: tests/verbs/test_rxe.sh's guest with a Soft-RoCE device (../shared/tools/rxe-vm).
# libucx-dev: the UCX transport (transports/ucx); ucx-utils: ucx_info, to see what UCX finds.
# python3-torch libtorch-dev pybind11-dev python3-dev: the PyTorch backend (python/);
# python3-numpy python3-sklearn: the digits example and its tests (sklearn's bundled dataset).
# help2man: the tools' man pages; bash-completion: test_install.sh completes with the tools' script.
# libpmix-dev: the PMIx bootstrap (no COHORT_RENDEZVOUS under mpirun, srun --mpi=pmix);
# openmpi-bin: tests/mp/test_mpirun.sh's mpirun; slurm-wlm munge: tests/netns/test_slurm.sh starts
# a Slurm cluster of its own (slurmctld, one slurmd per namespace node, munged) to run srun and sbatch.
pkgs="build-essential autoconf automake libtool pkg-config check libsubunit-dev libhwloc-dev
      iproute2 procps python3 clang libclang-rt-14-dev valgrind libibverbs-dev ibverbs-providers
      qemu-system-x86 busybox-static cpio kmod xz-utils file libucx-dev ucx-utils
      python3-torch libtorch-dev pybind11-dev python3-dev python3-numpy python3-sklearn
      help2man bash-completion libpmix-dev openmpi-bin slurm-wlm munge"
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
echo "deps.sh: installing$missing"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
