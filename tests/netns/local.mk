# SPDX-License-Identifier: BSD-3-Clause
# Multi-node tests: ranks in network namespaces joined by veth pairs (tests/netns/).
# Need root and iproute2 (skipped otherwise); one case: NETNS_CASES="a h" make check TESTS=...
TESTS += tests/netns/test_netns.sh
dist_noinst_SCRIPTS += tests/netns/test_netns.sh tests/netns/lib.sh
# The fault suite's network cut: a node's link taken down while the ranks loop a collective;
# the ranks on the other nodes must fail (root only, skipped otherwise).
TESTS += tests/netns/test_netns_faults.sh
dist_noinst_SCRIPTS += tests/netns/test_netns_faults.sh
# A Slurm cluster of its own (slurmctld, munged, one slurmd per namespace node): srun -n 4 and an
# sbatch two-node job without COHORT_RENDEZVOUS, with and without --mpi=pmix (root and
# slurm-wlm + munge, skipped otherwise).
TESTS += tests/netns/test_slurm.sh
dist_noinst_SCRIPTS += tests/netns/test_slurm.sh
