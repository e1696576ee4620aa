#!/bin/sh
# check.sh BUILD_DIR SOURCE_DIR: the Debian packages (cmake/packaging.cmake) work.
#
# Makes the .debs from the already-built BUILD_DIR (cpack -G DEB, into a temporary
# directory), checks what each holds and depends on, extracts all three into one scratch
# root (dpkg-deb -x: no root, no installation), builds examples/outside against that root
# with find_package(ddss) and with pkg-config, checks both load the extracted libddss, and
# runs them, and the packaged ddss-hello, with the extracted ddssrun on 2 ranks over tcp.
# Exit status: 0 pass, 1 fail, 77 skip (no cpack or dpkg-deb; a sanitizer build, whose
# libddss needs the sanitizer's runtime in every program that loads it). The temporary
# directory is removed.
set -eu

if [ $# -ne 2 ]; then
	echo "usage: $0 BUILD_DIR SOURCE_DIR" >&2
	exit 2
fi
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
cmake=${CMAKE:-cmake}
cpack=${CPACK:-cpack}
ranks=2

fail() {
	echo "package/check.sh: FAIL: $*" >&2
	exit 1
}
skip() {
	echo "package/check.sh: SKIP: $*"
	exit 77
}

command -v "$cpack" >/dev/null 2>&1 || skip "no cpack"
command -v dpkg-deb >/dev/null 2>&1 || skip "no dpkg-deb"
san=$(sed -n 's/^DDSS_SANITIZER:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null || true)
if [ -n "$san" ] && [ "$san" != none ]; then
	skip "$build is a $san sanitizer build"
fi
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:[A-Z]*=//p' "$build/CMakeCache.txt")
[ -n "$version" ] || fail "no CMAKE_PROJECT_VERSION in $build/CMakeCache.txt"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ddss-package.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM HUP
root=$tmp/root

echo "== cpack -G DEB ($build)"
if ! (cd "$build" && "$cpack" -G DEB -B "$tmp/debs") >"$tmp/cpack.log" 2>&1; then
	cat "$tmp/cpack.log" >&2
	fail "cpack failed (is every installed target built? 'cmake --build $build')"
fi
runtime=$(ls "$tmp"/debs/libddss[0-9]*_"$version"_*.deb 2>/dev/null || true)
dev=$(ls "$tmp"/debs/libddss-dev_"$version"_*.deb 2>/dev/null || true)
tools=$(ls "$tmp"/debs/ddss-tools_"$version"_*.deb 2>/dev/null || true)
[ -n "$runtime" ] && [ -n "$dev" ] && [ -n "$tools" ] ||
	fail "expected libddssN, libddss-dev and ddss-tools $version; made: $(ls "$tmp/debs")"
[ "$(ls "$tmp"/debs/*.deb | wc -l)" = 3 ] || fail "more than three packages: $(ls "$tmp/debs")"
rpkg=$(dpkg-deb -f "$runtime" Package)

for deb in "$runtime" "$dev" "$tools"; do
	echo "== $(basename "$deb"), $(du -k "$deb" | cut -f1) KiB"
	dpkg-deb -f "$deb" Package Version Architecture Depends Suggests Installed-Size
	dpkg-deb -c "$deb" | awk '{print $6 ($7 ? " " $7 " " $8 : "")}' | grep -v '/$' |
		sed 's/^\.//' >"$tmp/$(dpkg-deb -f "$deb" Package).files"
	cat "$tmp/$(dpkg-deb -f "$deb" Package).files"
done

# has PACKAGE REGEX WHAT: one of PACKAGE's files matches.
has() {
	grep -Eq -- "$2" "$tmp/$1.files" || fail "$1 does not hold $3"
}
libdir=$(sed -n 's|^\(/usr/lib[^ ]*\)/libddss\.so\.[0-9.]*$|\1|p' "$tmp/$rpkg.files" | head -n 1)
[ -n "$libdir" ] || fail "$rpkg holds no /usr/lib*/libddss.so.N"
has "$rpkg" "^$libdir/libddss\\.so\\.[0-9]+ -> " "the libddss.so.N soname link"
if grep -Eq '^/usr/(include|bin)/|\.pc$|cmake' "$tmp/$rpkg.files"; then
	fail "$rpkg holds development files or programs"
fi
has libddss-dev '^/usr/include/ddss/ddss\.h$' "ddss.h"
has libddss-dev "^$libdir/libddss\\.so -> " "the libddss.so link"
has libddss-dev "^$libdir/pkgconfig/ddss\\.pc$" "ddss.pc"
has libddss-dev "^$libdir/cmake/ddss/ddssConfig\\.cmake$" "ddssConfig.cmake"
has libddss-dev "^$libdir/cmake/ddss/ddssTargets\\.cmake$" "ddssTargets.cmake"
for prog in ddssrun ddssd ddss-info ddss-bench ddss-bench-plot ddss-tp-bench ddss-coh-bench \
	ddss-clients-bench ddss-daemon-bench ddss-lock-bench; do
	has ddss-tools "^/usr/bin/$prog\$" "$prog"
done
if [ -d "$build/man" ]; then # built with the manual pages
	has libddss-dev '^/usr/share/man/man3/ddss_init\.3' "the man 3 pages"
	has libddss-dev '^/usr/share/man/man7/ddss\.7' "the man 7 page"
	has ddss-tools '^/usr/share/man/man1/ddssrun\.1' "the man 1 pages"
fi
dups=$(cat "$tmp"/*.files | cut -d' ' -f1 | sort | uniq -d)
[ -z "$dups" ] || fail "files in more than one package: $dups"
for deb in "$dev" "$tools"; do
	dpkg-deb -f "$deb" Depends | grep -q "$rpkg (= $version)" ||
		fail "$(basename "$deb") does not depend on $rpkg (= $version)"
done
dpkg-deb -f "$runtime" Depends | grep -q libjemalloc ||
	fail "$rpkg does not depend on jemalloc's package"

echo "== dpkg-deb -x into $root"
for deb in "$runtime" "$dev" "$tools"; do
	dpkg-deb -x "$deb" "$root"
done

# The .pc and the CMake package are relocatable (paths relative to where they lie), so
# they point into the scratch root as they would into /usr.
echo "== CMake: find_package(ddss) with CMAKE_PREFIX_PATH=$root/usr"
if ! "$cmake" -S "$src/examples/outside" -B "$tmp/cmake-build" \
	-DCMAKE_PREFIX_PATH="$root/usr" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF \
	-DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	>"$tmp/cmake.log" 2>&1 || ! "$cmake" --build "$tmp/cmake-build" >>"$tmp/cmake.log" 2>&1
then
	cat "$tmp/cmake.log" >&2
	fail "the CMake build of hello_outside against the packages failed"
fi
grep -q "^ddss_DIR:PATH=$root/" "$tmp/cmake-build/CMakeCache.txt" ||
	fail "find_package(ddss) found $(sed -n 's/^ddss_DIR:PATH=//p' \
		"$tmp/cmake-build/CMakeCache.txt"), not the package in $root"

echo "== Makefile: pkg-config with PKG_CONFIG_PATH=$root$libdir/pkgconfig"
mkdir -p "$tmp/make-build"
if ! PKG_CONFIG_PATH="$root$libdir/pkgconfig" PKG_CONFIG_LIBDIR= make -C "$src/examples/outside" \
	O="$tmp/make-build" >"$tmp/make.log" 2>&1; then
	cat "$tmp/make.log" >&2
	fail "the pkg-config (Makefile) build of hello_outside against the packages failed"
fi

real_libdir=$(cd "$root$libdir" && pwd -P)
for way in cmake make; do
	bin=$tmp/$way-build/hello_outside
	[ -x "$bin" ] || fail "$way: no binary at $bin"
	loaded=$(ldd "$bin" | sed -n 's/^[[:space:]]*libddss\.so[^ ]* => \([^ ]*\) .*/\1/p')
	[ -n "$loaded" ] || fail "$way: the binary does not find libddss: $(ldd "$bin")"
	[ "$(cd "$(dirname "$loaded")" && pwd -P)" = "$real_libdir" ] ||
		fail "$way: the binary loads $loaded, not the packaged library in $root$libdir"

	echo "== $way: $root/usr/bin/ddssrun -n $ranks --transport tcp hello_outside"
	if ! "$root/usr/bin/ddssrun" -n $ranks --transport tcp --timeout 30 "$bin" \
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

# The packaged programs run from the root too: ddss-hello finds the packaged libddss by
# its RPATH ($ORIGIN/../lib...), ddss-info links nothing of ours at run time.
echo "== $root/usr/bin/ddssrun -n $ranks --transport tcp $root/usr/bin/ddss-hello"
loaded=$(ldd "$root/usr/bin/ddss-hello" | sed -n 's/^[[:space:]]*libddss\.so[^ ]* => \([^ ]*\) .*/\1/p')
[ "$(cd "$(dirname "${loaded:-/nonexistent}")" 2>/dev/null && pwd -P)" = "$real_libdir" ] ||
	fail "the packaged ddss-hello loads '${loaded}', not $root$libdir/libddss.so"
"$root/usr/bin/ddssrun" -n $ranks --transport tcp --timeout 30 "$root/usr/bin/ddss-hello" \
	>"$tmp/hello.out" 2>&1 || { cat "$tmp/hello.out" >&2; fail "the packaged ddss-hello failed"; }
cat "$tmp/hello.out"
"$root/usr/bin/ddss-info" >"$tmp/info.out" 2>&1 || { cat "$tmp/info.out" >&2; fail "ddss-info"; }
grep "^ddss-info: DDSS $version\$" "$tmp/info.out" || fail "the packaged ddss-info: no version"
echo "package/check.sh: PASS: three packages; examples/outside built against them by" \
     "find_package(ddss) and by pkg-config, and run with the packaged ddssrun"
