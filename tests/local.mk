# SPDX-License-Identifier: BSD-3-Clause
include tests/unit/local.mk
include tests/unit/coll.mk
include tests/plugins/local.mk
include tests/conformance/local.mk
include tests/mp/cohortrun.mk
include tests/mp/local.mk
include tests/unit/shm_ring.mk
include tests/unit/shm_coll.mk
include tests/unit/verbs_parts.mk
include tests/netns/local.mk
include tests/unit/topo.mk
include tests/fuzz/local.mk
include tests/verbs/local.mk
include tests/python/local.mk
