#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Runs a rank as if on a node of its own, for topology tests on one machine: COHORT_HOSTID from
# the rank number, FAKE_PER ranks per node in rank order (block), or with FAKE_RR=N round-robin
# over N nodes (rank r on node r mod N, as cohortrun --map-by node places them).
if [ -n "$FAKE_RR" ]; then
    COHORT_HOSTID=fake$((COHORT_RANK % FAKE_RR))
else
    COHORT_HOSTID=fake$((COHORT_RANK / ${FAKE_PER:-2}))
fi
export COHORT_HOSTID
exec "$@"
