#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# `make install` into a staging directory, then the install moved elsewhere (as a relocated
# prefix, a container layer or an unpacked package would be): its tools find their own plugins
# beside the libcohort.so they loaded (core/plugin_loader.c), never those of the configured
# prefix, and run a 2-rank job over shm and over tcp; its headers build a plugin (the example's
# Makefile, through pkg-config) and a C program, which links the moved library.
. "$top_srcdir/tests/mp/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM
unset COHORT_PLUGIN_PATH

prefix=$(sed -n 's/^prefix = //p' "$top_builddir/Makefile")
# the compiler and flags of this build (a sanitizer build's program needs its runtime too)
CC=$(sed -n 's/^CC = //p' "$top_builddir/Makefile")
CFLAGS=$(sed -n 's/^CFLAGS = //p' "$top_builddir/Makefile")
LDFLAGS=$(sed -n 's/^LDFLAGS = //p' "$top_builddir/Makefile")
if ! make -C "$top_builddir" install DESTDIR="$tmp/stage" >"$tmp/install.out" 2>&1; then
    not_ok "make install DESTDIR=..."; tail -n 20 "$tmp/install.out"; finish; exit 1
fi
ok "make install DESTDIR=... (prefix $prefix)"
mv "$tmp/stage$prefix" "$tmp/moved" || exit 1
M=$tmp/moved
export LD_LIBRARY_PATH="$M/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

run_case "the moved cohort-info names the plugin directory beside its library, and every plugin comes from there" sh -c '
    "$1/bin/cohort-info" --plugins >"$2/info" 2>&1 || { cat "$2/info"; exit 1; }
    grep -q "^Installed plugin directory: $1/lib/cohort (this install, moved; configured: " "$2/info" ||
        { cat "$2/info"; exit 1; }
    for p in tcp shm; do
        grep -A1 "^  $p " "$2/info" | grep -q "usable\|$1/lib/cohort/libcohort-$p.so" ||
            { echo "$p:"; cat "$2/info"; exit 1; }
    done
    if grep -oE "/[^ ]*/libcohort-[a-z]+\.so" "$2/info" | grep -v "^$1/lib/cohort/"; then
        echo "a plugin from outside the moved install:"; cat "$2/info"; exit 1; fi' - "$M" "$tmp"
for tp in shm tcp; do
    run_case "the moved install runs a 2-rank job over $tp (cohortrun, cohort-bench)" sh -c '
        COHORT_TRANSPORTS=$3 COHORT_DEBUG=INFO "$1/bin/cohortrun" -np 2 "$1/bin/cohort-bench" \
            -b 8 -e 64K -f 8 -n 3 -w 1 >"$2/out" 2>&1 || { tail -n 30 "$2/out"; exit 1; }
        grep -q "Out of bounds values : 0 OK" "$2/out" || { tail -n 30 "$2/out"; exit 1; }
        grep "plugin .*libcohort-$3.so" "$2/out" | grep -v "$1/lib/cohort/" | grep . &&
            { echo "the $3 plugin came from outside the moved install"; exit 1; }
        grep -q "$1/lib/cohort/libcohort-$3.so" "$2/out" || { grep plugin "$2/out"; exit 1; }' \
        - "$M" "$tmp" $tp
done
run_case "the moved headers and cohort.pc: a C program and the example plugin build against them" sh -c '
    sed -i "s|^prefix=.*|prefix=$1|" "$1/lib/pkgconfig/cohort.pc"
    export PKG_CONFIG_PATH="$1/lib/pkgconfig"
    printf "#include <cohort/cohort.h>\n#include <stdio.h>\nint main(void) { printf(\"%%s %%s\\\\n\", cohort_version(), COHORT_VERSION_STRING); return 0; }\n" >"$2/v.c"
    $4 $5 $(pkg-config --cflags cohort) -o "$2/v" "$2/v.c" $(pkg-config --libs cohort) $6 || exit 1
    v=$("$2/v") || exit 1
    [ "$v" = "$(pkg-config --modversion cohort) $(pkg-config --modversion cohort)" ] ||
        { echo "version: $v, cohort.pc: $(pkg-config --modversion cohort)"; exit 1; }
    # a static link (pkg-config --static) is told what libcohort itself links
    st=$(pkg-config --static --libs cohort) || exit 1
    for l in -lcohort -lhwloc -lpthread -lm; do
        case " $st " in *" $l "*) ;; *) echo "pkg-config --static --libs cohort: $st (no $l)"; exit 1;; esac
    done
    cp -r "$3/examples/plugin" "$2/plugin" && make -C "$2/plugin" >"$2/mk" 2>&1 ||
        { cat "$2/mk"; exit 1; }
    [ -s "$2/plugin/libcohort-example.so" ]' - "$M" "$tmp" "$top_srcdir" "$CC" "$CFLAGS" "$LDFLAGS"
run_case "man pages: cohortrun.1, cohort-info.1, cohort-bench.1 installed, each with its options and the version" sh -c '
    [ -n "$(sed -n "s/^HELP2MAN = //p" "$3/Makefile")" ] || { echo "SKIP: configure found no help2man"; exit 0; }
    v=$(sed -n "s/^PACKAGE_VERSION = //p" "$3/Makefile")
    for t in cohortrun:hostfile cohort-info:topo-file cohort-bench:nonblocking; do
        m="$1/share/man/man1/${t%%:*}.1"
        [ -s "$m" ] || { echo "no $m"; ls -R "$1/share" | head; exit 1; }
        grep -qi "^\.TH \"*${t%%:*}" "$m" && grep -q "$v" "$m" && sed "s/\\\\-/-/g" "$m" | grep -q -- "--${t#*:}" ||
            { echo "$m:"; head -n 20 "$m"; exit 1; }
    done' - "$M" "$tmp" "$top_builddir"
# Completion: every long option a tool's --help shows is offered after "--", and a value list.
if command -v bash >/dev/null 2>&1; then
    run_case "bash completion of cohortrun, cohort-info and cohort-bench: every option of --help, and values" bash -c '
        M=$1
        for t in cohortrun cohort-info cohort-bench; do
            f="$M/share/bash-completion/completions/$t"
            [ -s "$f" ] || { echo "no $f"; exit 1; }
            . "$f"
            fn=$(complete -p "$t" | sed "s/.*-F \([^ ]*\) .*/\1/")
            COMP_WORDS=("$t" "--"); COMP_CWORD=1; COMPREPLY=(); "$fn"
            offered=" ${COMPREPLY[*]} "
            for o in $("$M/bin/$t" --help | grep -oE -- "--[a-z][a-z_-]+" | sort -u); do
                case "$offered" in *" $o "*) ;; *) echo "$t: --help shows $o, completion does not offer it"; exit 1 ;; esac
            done
        done
        COMP_WORDS=(cohort-bench --coll al); COMP_CWORD=2; COMPREPLY=(); _cohort_bench
        [ "${COMPREPLY[*]}" = "allreduce allgather alltoall" ] || { echo "--coll al: ${COMPREPLY[*]}"; exit 1; }
        COMP_WORDS=(cohortrun --map-by n); COMP_CWORD=2; COMPREPLY=(); _cohortrun
        [ "${COMPREPLY[*]}" = "node" ] || { echo "--map-by n: ${COMPREPLY[*]}"; exit 1; }' - "$M"
fi
finish
