# SPDX-License-Identifier: BSD-3-Clause
# Unit tests (Check) for the public API's argument checks, the parsers, the reduction kernels, SHA-256/HMAC, the TCP wire format and the plugin kit's request pieces.
# Included from tests/local.mk; paths are relative to the top directory.
if HAVE_CHECK
check_PROGRAMS += tests/unit/test_parse tests/unit/test_reduce tests/unit/test_hmac
TESTS += tests/unit/test_parse tests/unit/test_reduce tests/unit/test_hmac

tests_unit_test_parse_SOURCES = tests/unit/test_parse.c tests/unit/expect.h
tests_unit_test_parse_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_unit_test_parse_LDADD = libcohort-core.la $(CHECK_LIBS)

tests_unit_test_reduce_SOURCES = tests/unit/test_reduce.c
tests_unit_test_reduce_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_unit_test_reduce_LDADD = libcohort-core.la $(CHECK_LIBS) -lm

tests_unit_test_hmac_SOURCES = tests/unit/test_hmac.c
tests_unit_test_hmac_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_unit_test_hmac_LDADD = libcohort-core.la $(CHECK_LIBS)

# Bad input at every public function (tests/unit/test_api.c: two ranks as two threads).
check_PROGRAMS += tests/unit/test_api
TESTS += tests/unit/test_api
tests_unit_test_api_SOURCES = tests/unit/test_api.c tests/unit/expect.h
tests_unit_test_api_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) -pthread
tests_unit_test_api_LDADD = libcohort-core.la $(CHECK_LIBS) -lpthread

# The rendezvous server under a connection flood and out of descriptors; its handshake's MACs
# (every bit of the hello's and the ack's) and the reasons it gives for a refusal.
check_PROGRAMS += tests/unit/test_rdv_server
TESTS += tests/unit/test_rdv_server
tests_unit_test_rdv_server_SOURCES = tests/unit/test_rdv_server.c
tests_unit_test_rdv_server_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_unit_test_rdv_server_LDADD = libcohort-core.la $(CHECK_LIBS) -lpthread

# Slurm's host list (its first host), the port a Slurm step without PMIx derives, and the
# rendezvous the identity chooses under Slurm and PMIx (core/launcher.c, core/bootstrap.c).
check_PROGRAMS += tests/unit/test_launcher
TESTS += tests/unit/test_launcher
tests_unit_test_launcher_SOURCES = tests/unit/test_launcher.c tests/unit/expect.h
tests_unit_test_launcher_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_unit_test_launcher_LDADD = libcohort-core.la $(CHECK_LIBS)

# The TCP transport's wire format (header-only: transports/tcp/tcp_wire.h).
check_PROGRAMS += tests/unit/test_tcp_wire
TESTS += tests/unit/test_tcp_wire
tests_unit_test_tcp_wire_SOURCES = tests/unit/test_tcp_wire.c transports/tcp/tcp_wire.h
tests_unit_test_tcp_wire_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_unit_test_tcp_wire_LDADD = libcohort-core.la $(CHECK_LIBS)

# The plugin kit's free list of requests and FIFO queues (header-only:
# transports/common/kit_req.h).
check_PROGRAMS += tests/unit/test_kit_req
TESTS += tests/unit/test_kit_req
tests_unit_test_kit_req_SOURCES = tests/unit/test_kit_req.c transports/common/kit_req.h
tests_unit_test_kit_req_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_unit_test_kit_req_LDADD = $(CHECK_LIBS)
endif
# The request engine on one-rank communicators (also under ThreadSanitizer in CI).
if HAVE_CHECK
check_PROGRAMS += tests/unit/test_engine
TESTS += tests/unit/test_engine
tests_unit_test_engine_SOURCES = tests/unit/test_engine.c tests/unit/expect.h
tests_unit_test_engine_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) -pthread
tests_unit_test_engine_LDADD = libcohort-core.la $(CHECK_LIBS) -lpthread
endif
# The library's exported symbols: the public API only (core/libcohort.map).
TESTS += tests/unit/test_exports.sh
dist_noinst_SCRIPTS += tests/unit/test_exports.sh
# Calls between the core's objects go down only (docs/design.md).
TESTS += tests/unit/test_layers.sh
dist_noinst_SCRIPTS += tests/unit/test_layers.sh
EXTRA_DIST += tests/unit/layers.py
# The includes follow the layout table, one status-check style (docs/design.md).
TESTS += tests/unit/test_style.sh
dist_noinst_SCRIPTS += tests/unit/test_style.sh
