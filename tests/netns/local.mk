# Multi-node tests: ranks in network namespaces joined by veth pairs (tests/netns/).
# Need root and iproute2 (skipped otherwise); one case: NETNS_CASES="a h" make check TESTS=...
TESTS += tests/netns/test_netns.sh
dist_noinst_SCRIPTS += tests/netns/test_netns.sh tests/netns/lib.sh
