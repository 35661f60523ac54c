#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The layout table of docs/design.md holds for the includes (each folder includes only what its
# row allows), and one status-check style: a status is tested as `if (st)`, never compared with
# `!= COHORT_SUCCESS`.
cd "$top_srcdir" || exit 1
bad=0
# includes "of ours" (quoted) per folder, beside the folder's own headers
check() {   # folder-glob allowed-regex
    for f in $1; do
        [ -f "$f" ] || continue
        grep -n '^#include "' "$f" | while IFS= read -r line; do
            inc=$(echo "$line" | sed 's/.*#include "\([^"]*\)".*/\1/')
            echo "$inc" | grep -Eq "$2" || echo "FAIL: $f:${line%%:*} includes \"$inc\" (docs/design.md, Layout)"
        done
    done
}
out=$(
    check "core/coll/*.c core/coll/*.h" '^(core/coll/(coll|ring_step)\.h|core/(p2p|reduce|log)\.h|cohort/cohort\.h)$|^core/parse\.h$'
    check "topology/*.c topology/*.h" '^(topology/[a-z_]+\.h|core/(config|log|parse)\.h|cohort/cohort\.h)$'
    check "transports/*/*.c transports/*/*.h" '^(transports/common/kit_[a-z]+\.h|[a-z_]+\.h)$'
    check "transports/common/*.h" '^transports/common/kit_[a-z]+\.h$'   # the kit's own headers
    check "bench/*.c bench/*.h" '^(cohort/cohort\.h|bench\.h)$'
)
# core/parse.h from core/coll/ only in select.c (the parsed COHORT_ALGO)
out2=$(grep -ln '#include "core/parse.h"' core/coll/*.c | grep -v '^core/coll/select\.c$' |
       sed 's/^/FAIL: includes core\/parse.h (only select.c may): /')
# a transport's own headers live in its folder: "x.h" must exist beside the file
out3=$(for f in transports/*/*.c transports/*/*.h; do
           for inc in $(grep '^#include "[a-z_]*\.h"' "$f" | sed 's/.*"\(.*\)".*/\1/'); do
               [ -f "$(dirname "$f")/$inc" ] || echo "FAIL: $f includes \"$inc\", not a header of its own folder"
           done
       done)
out4=$(grep -rn '!= COHORT_SUCCESS' core transports tools bench topology python/csrc \
           --include='*.c' --include='*.h' --include='*.cc' --include='*.cpp' |
       sed 's/^/FAIL: compares with != COHORT_SUCCESS (write if (st)): /')
for o in "$out" "$out2" "$out3" "$out4"; do
    [ -n "$o" ] && { echo "$o"; bad=1; }
done
[ $bad = 0 ] && echo "ok: includes follow the layout table; one status-check style"
exit $bad
