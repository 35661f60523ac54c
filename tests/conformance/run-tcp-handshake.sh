#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# TCP transport: stray, forged and replayed connections are refused and logged; the connector
# authenticates the acceptor; mixed COHORT_SOCKET_NSOCKS; lost peers are named.
b=${abs_top_builddir:-${top_builddir:-.}}
plugin=$b/.libs/libcohort-tcp.so
prog=$b/tests/conformance/tcp-handshake
for f in "$plugin" "$prog"; do
    if [ ! -e "$f" ]; then
        echo "run-tcp-handshake.sh: $f is missing (build first: make check)" >&2
        exit 99
    fi
done
exec "$prog" "$plugin"
