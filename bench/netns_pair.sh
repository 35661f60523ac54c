# SPDX-License-Identifier: BSD-3-Clause
# Sourced by the bench/netns-*.sh scripts (srcdir set): two "nodes" a and b (network namespaces
# from tests/netns/lib.sh, removed on exit) on one bridge, each node's eth0 shaped to a rate.
. "$srcdir/tests/netns/lib.sh"

# netns_shaped_pair NAME RATE: builds them (NAME prefixes the errors) and sets A and B to the
# two namespaces; exits on failure. cohortrun forwards every COHORT_* of its environment to the
# ranks: the scripts start from none of them.
netns_shaped_pair() {
    for v in $(env | sed -n 's/^\(COHORT_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
    netns_setup
    netns_add_host a eth0 && netns_add_host b eth0 || { echo "$1: cannot create the hosts" >&2; exit 1; }
    netns_shape a eth0 "$2" && netns_shape b eth0 "$2" ||
        { echo "$1: tc tbf failed (is sch_tbf available?)" >&2; exit 1; }
    A=$(netns_ns a) B=$(netns_ns b)
}
