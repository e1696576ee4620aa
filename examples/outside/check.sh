#!/bin/sh
# check.sh BUILD_DIR SOURCE_DIR: DDSS links from outside its tree.
#
# Installs the already-built project (cmake --install BUILD_DIR) into a temporary prefix,
# builds examples/outside/hello_outside.c against that prefix twice, with CMake
# (find_package(ddss), CMAKE_PREFIX_PATH) and with the Makefile (pkg-config,
# PKG_CONFIG_PATH), checks that both binaries load the installed libddss, and runs each
# with the installed ddssrun on 2 ranks over tcp, checking every rank's line.
# Exit status: 0 pass, 1 fail, 77 skip (a sanitizer build: its libddss needs the
# sanitizer's runtime in every program that loads it). The temporary directory is removed.
set -eu

if [ $# -ne 2 ]; then
	echo "usage: $0 BUILD_DIR SOURCE_DIR" >&2
	exit 2
fi
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
cmake=${CMAKE:-cmake}
ranks=2

fail() {
	echo "check.sh: FAIL: $*" >&2
	exit 1
}

san=$(sed -n 's/^DDSS_SANITIZER:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null || true)
if [ -n "$san" ] && [ "$san" != none ]; then
	echo "check.sh: SKIP: $build is a $san sanitizer build"
	exit 77
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ddss-outside.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM HUP
prefix=$tmp/prefix

echo "== cmake --install $build --prefix $prefix"
if ! "$cmake" --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1; then
	cat "$tmp/install.log" >&2
	fail "cmake --install failed (is every installed target built? 'cmake --build $build')"
fi

# What a program needs from the installation.
pc=$(find "$prefix" -name ddss.pc -path '*/pkgconfig/*' | head -n 1)
config=$(find "$prefix" -name ddssConfig.cmake | head -n 1)
for f in "$prefix/include/ddss/ddss.h" "$prefix/bin/ddssrun" "$prefix/bin/ddssd" "$pc" \
	 "$config"; do
	[ -n "$f" ] && [ -e "$f" ] || fail "not installed: ${f:-ddss.pc or ddssConfig.cmake}"
done
libdir=$(dirname "$(dirname "$pc")")
[ -e "$libdir/libddss.so" ] || fail "libddss.so is not in $libdir, beside pkgconfig/ddss.pc"
if ls "$prefix/include" | grep -v '^ddss$' >/dev/null; then
	fail "installed headers other than include/ddss: $(ls "$prefix/include")"
fi
if [ "$(ls "$prefix/include/ddss")" != ddss.h ]; then
	fail "include/ddss holds more than ddss.h: $(ls "$prefix/include/ddss")"
fi

echo "== CMake: find_package(ddss) with CMAKE_PREFIX_PATH=$prefix"
# The package registry and system paths are left out, so only this prefix can satisfy it.
if ! "$cmake" -S "$src/examples/outside" -B "$tmp/cmake-build" \
	-DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF \
	-DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	>"$tmp/cmake.log" 2>&1 || ! "$cmake" --build "$tmp/cmake-build" >>"$tmp/cmake.log" 2>&1
then
	cat "$tmp/cmake.log" >&2
	fail "the CMake build of hello_outside failed"
fi
grep "ddss .* from " "$tmp/cmake.log" || true
grep -q "^ddss_DIR:PATH=$prefix/" "$tmp/cmake-build/CMakeCache.txt" ||
	fail "find_package(ddss) found $(sed -n 's/^ddss_DIR:PATH=//p' \
		"$tmp/cmake-build/CMakeCache.txt"), not the package in $prefix"

echo "== Makefile: pkg-config with PKG_CONFIG_PATH=$(dirname "$pc")"
mkdir -p "$tmp/make-build"
if ! PKG_CONFIG_PATH="$(dirname "$pc")" PKG_CONFIG_LIBDIR= make -C "$src/examples/outside" \
	O="$tmp/make-build" >"$tmp/make.log" 2>&1; then
	cat "$tmp/make.log" >&2
	fail "the pkg-config (Makefile) build of hello_outside failed"
fi
grep -- "-lddss" "$tmp/make.log" || true

# Both binaries must load the installed library (not one from the build tree or the
# system), and the installed ddssrun runs them.
real_libdir=$(cd "$libdir" && pwd -P)
for way in cmake make; do
	bin=$tmp/$way-build/hello_outside
	[ -x "$bin" ] || fail "$way: no binary at $bin"
	loaded=$(ldd "$bin" | sed -n 's/^[[:space:]]*libddss\.so[^ ]* => \([^ ]*\) .*/\1/p')
	[ -n "$loaded" ] || fail "$way: the binary does not find libddss: $(ldd "$bin")"
	loaded_dir=$(cd "$(dirname "$loaded")" && pwd -P)
	[ "$loaded_dir" = "$real_libdir" ] ||
		fail "$way: the binary loads $loaded, not the library installed in $libdir"

	echo "== $way: $prefix/bin/ddssrun -n $ranks --transport tcp hello_outside"
	if ! "$prefix/bin/ddssrun" -n $ranks --transport tcp --timeout 60 "$bin" \
		>"$tmp/$way.out" 2>&1; then
		cat "$tmp/$way.out" >&2
		fail "$way: the run failed"
	fi
	cat "$tmp/$way.out"
	for r in $(seq 1 $ranks); do
		grep -q "^\[$r\] hello_outside: rank $r of $ranks, .*$ranks/$ranks greetings -> OK$" \
			"$tmp/$way.out" || fail "$way: no OK line from rank $r"
	done
done

# The project's own installed programs that link libddss must find it too, wherever the
# prefix is (an install RPATH), as the demo does here.
if [ -x "$prefix/bin/ddss-hello" ]; then
	echo "== installed ddss-hello: $prefix/bin/ddssrun -n $ranks --transport tcp ddss-hello"
	if ! "$prefix/bin/ddssrun" -n $ranks --transport tcp --timeout 60 \
		"$prefix/bin/ddss-hello" >"$tmp/hello.out" 2>&1; then
		cat "$tmp/hello.out" >&2
		fail "the installed ddss-hello does not run from $prefix (no install RPATH to" \
		     "$libdir?)"
	fi
	cat "$tmp/hello.out"
fi
echo "check.sh: PASS: installed DDSS linked by find_package(ddss) and by pkg-config; both ran"
