include tests/unit/local.mk
include tests/unit/coll.mk
include tests/plugins/local.mk
include tests/conformance/local.mk
include tests/mp/cohortrun.mk
include tests/mp/local.mk
include tests/unit/shm_ring.mk
include tests/unit/shm_coll.mk
