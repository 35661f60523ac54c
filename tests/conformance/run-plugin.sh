#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# run-plugin.sh NAME: the plugin conformance suite on the freshly built libcohort-NAME.so, with 2
# and 3 ranks. Run through run-<name>.sh by `make check` from the top build directory
# (abs_top_builddir/top_builddir win if set).
name=$1
b=${abs_top_builddir:-${top_builddir:-.}}
plugin=$b/.libs/libcohort-$name.so
conf=$b/cohort-conformance
for f in "$plugin" "$conf"; do
    if [ ! -e "$f" ]; then
        echo "run-plugin.sh $name: $f is missing (build first: make)" >&2
        exit 99
    fi
done
rc=0
for np in 2 3; do
    echo "== cohort-conformance $plugin --np $np"
    "$conf" "$plugin" --np "$np" || rc=1
done
exit $rc
