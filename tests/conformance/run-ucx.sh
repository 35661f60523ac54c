#!/bin/sh
# The plugin conformance suite on the UCX transport (run-plugin.sh), when configure built it:
# with UCX's default transports (tcp is chosen between these same-host ranks: UCX's shared
# memory cannot report a dead peer, which the error handling mode asks for) and with shared
# memory only (UCX_TLS=posix,sysv,cma,self: no UCX error handling, the plugin watches the peer's
# pid). Skipped (exit 77) when libcohort-ucx.so was not built.
b=${abs_top_builddir:-${top_builddir:-.}}
if [ ! -e "$b/.libs/libcohort-ucx.so" ]; then
    echo "SKIP: libcohort-ucx.so was not built (configure found no UCX: apt-get install libucx-dev)"
    exit 77
fi
# The plugin is unavailable unless asked for by name (docs/plugins.md).
COHORT_TRANSPORTS=ucx
export COHORT_TRANSPORTS
run=${top_srcdir:-$(dirname "$0")/../..}/tests/conformance/run-plugin.sh
rc=0
echo "== UCX_TLS=${UCX_TLS:-(unset: UCX's default)}"
sh "$run" ucx || rc=1
echo "== UCX_TLS=posix,sysv,cma,self"
UCX_TLS=posix,sysv,cma,self sh "$run" ucx || rc=1
exit $rc
