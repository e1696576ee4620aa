#!/bin/sh
# counter_check.sh BUILD_DIR SOURCE_DIR: the README's first program, built and run the way
# the README tells a user with an installed DDSS to do it.
#
# Installs the already-built project (cmake --install BUILD_DIR) into a temporary prefix,
# compiles examples/counter.c there with exactly the README's command
#   cc counter.c $(pkg-config --cflags --libs ddss) -o counter
# (PKG_CONFIG_PATH pointing at the prefix), runs it with the installed ddssrun on 3 ranks
# over tcp (LD_LIBRARY_PATH pointing at the prefix: the command sets no rpath) and checks
# rank 1's total. Exit status: 0 pass, 1 fail, 77 skip (a sanitizer build: its libddss
# needs the sanitizer's runtime in every program that loads it; or no pkg-config).
set -eu

if [ $# -ne 2 ]; then
	echo "usage: $0 BUILD_DIR SOURCE_DIR" >&2
	exit 2
fi
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
cmake=${CMAKE:-cmake}
ranks=3
iters=200

fail() {
	echo "counter_check.sh: FAIL: $*" >&2
	exit 1
}

san=$(sed -n 's/^DDSS_SANITIZER:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null || true)
if [ -n "$san" ] && [ "$san" != none ]; then
	echo "counter_check.sh: SKIP: $build is a $san sanitizer build"
	exit 77
fi
if ! command -v pkg-config >/dev/null; then
	echo "counter_check.sh: SKIP: no pkg-config"
	exit 77
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ddss-counter.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM HUP
prefix=$tmp/prefix

echo "== cmake --install $build --prefix $prefix"
if ! "$cmake" --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1; then
	cat "$tmp/install.log" >&2
	fail "cmake --install failed (is every installed target built? 'cmake --build $build')"
fi
pc=$(find "$prefix" -name ddss.pc -path '*/pkgconfig/*' | head -n 1)
[ -n "$pc" ] || fail "no ddss.pc installed under $prefix"
PKG_CONFIG_PATH=$(dirname "$pc")
PKG_CONFIG_LIBDIR=
export PKG_CONFIG_PATH PKG_CONFIG_LIBDIR
LD_LIBRARY_PATH=$(pkg-config --variable=libdir ddss)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LD_LIBRARY_PATH

mkdir "$tmp/work"
cp "$src/examples/counter.c" "$tmp/work/"
cd "$tmp/work"
echo "== cc counter.c \$(pkg-config --cflags --libs ddss) -o counter"
# shellcheck disable=SC2046 # word splitting of pkg-config's output is the point
cc counter.c $(pkg-config --cflags --libs ddss) -o counter || fail "the README's cc command failed"

echo "== $prefix/bin/ddssrun -n $ranks --transport tcp ./counter $iters"
if ! "$prefix/bin/ddssrun" -n $ranks --transport tcp --timeout 50 ./counter $iters \
	>"$tmp/run.out" 2>&1; then
	cat "$tmp/run.out" >&2
	fail "the run failed"
fi
cat "$tmp/run.out"
want=$((ranks * iters))
grep -q "^\[1\] counter: $want from $ranks ranks x $iters -> OK$" "$tmp/run.out" ||
	fail "no 'counter: $want ... OK' line from rank 1"
echo "counter_check.sh: PASS: the README's cc command and ddssrun -n $ranks ./counter"
