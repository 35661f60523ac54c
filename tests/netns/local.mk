# Multi-node tests: ranks in network namespaces joined by veth pairs (tests/netns/).
