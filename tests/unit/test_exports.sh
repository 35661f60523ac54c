#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# libcohort.so exports exactly the functions that include/cohort/cohort.h declares (read through
# the compiler's preprocessor, so comments do not count), each under a version node of
# core/libcohort.map, and no other symbol; every transport plugin exports only
# cohort_transport_v1. Fails naming each symbol that is exported but not public, or public but
# not exported.
: "${top_builddir:?run through make check}"
lib="$top_builddir/.libs/libcohort.so"
[ -e "$lib" ] || { echo "no $lib"; exit 1; }
CC=$(sed -n 's/^CC = //p' "$top_builddir/Makefile")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
$CC -E -P -I"$top_builddir/include" -I"$top_srcdir/include" "$top_srcdir/include/cohort/cohort.h" |
    tr '\n' ' ' | grep -oE '\bcohort_[a-z0-9_]+ *\(' | sed 's/ *(//' | sort -u >"$tmp/public"
[ "$(wc -l <"$tmp/public")" -ge 40 ] || { echo "only $(wc -l <"$tmp/public") functions read from cohort.h"; exit 1; }
# "ADDR T name@@COHORT_0"; the version node itself is an absolute (A) symbol
nm -D --defined-only "$lib" | awk '$2 != "A" { print $3 }' |
    grep -v '^__odr_asan\|^__asan\|^__ubsan\|^__sanitizer' >"$tmp/exported.v"
sed 's/@.*//' "$tmp/exported.v" | sort -u >"$tmp/exported"
for s in $(comm -13 "$tmp/public" "$tmp/exported"); do
    echo "not ok - libcohort.so exports $s, which cohort.h does not declare (core/libcohort.map)"; fail=1
done
for s in $(comm -23 "$tmp/public" "$tmp/exported"); do
    echo "not ok - cohort.h declares $s, which libcohort.so does not export (add it to core/libcohort.map)"; fail=1
done
if grep -v '@@COHORT_[0-9.]*$' "$tmp/exported.v" | grep .; then
    echo "not ok - symbols above have no version node"; fail=1
fi
[ $fail = 0 ] && echo "ok - libcohort.so exports the $(wc -l <"$tmp/public") functions of cohort.h, each versioned, and nothing else"
for p in "$top_builddir"/.libs/libcohort-*.so; do
    [ -e "$p" ] || continue
    # (a sanitizer build adds its own, e.g. ASan's __odr_asan.<name> per global: not ours)
    syms=$(nm -D --defined-only "$p" | awk '{ print $3 }' | grep -v '^__odr_asan\|^__asan\|^__ubsan\|^__sanitizer' | tr '\n' ' ')
    if [ "$syms" = "cohort_transport_v1 " ]; then
        echo "ok - ${p##*/} exports only cohort_transport_v1"
    else
        echo "not ok - ${p##*/} exports: $syms"; fail=1
    fi
done
exit $fail
