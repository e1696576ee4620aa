#!/bin/sh
# The manual pages (man/): every public function has one, they render without a warning,
# and an installation finds them. Registered by tests/man/CMakeLists.txt.
#
#   check.sh coverage HEADER MANDIR
#       Every DDSS_API function declared in HEADER has MANDIR/man3/NAME.3 (a page, or a
#       symlink or ".so" page leading to one) whose .Nm and .Fn/.Fo lines name it; no
#       man3 page is left for a function the header no longer has; every ".Xr ddss..."
#       names a page of MANDIR; the overview ddss.7 and the section-1 pages of
#       $MAN1_PAGES (default: ddssrun ddssd ddss-bench ddss-info) exist.
#   check.sh selftest HEADER MANDIR
#       coverage must fail on copies of MANDIR with one page, link or name taken away.
#   check.sh lint MANDIR
#       Each page rendered by man(1) with every groff warning on prints nothing on
#       stderr; mandoc -T lint -W warning is silent too when mandoc is installed; pages
#       are ASCII and their .Dt matches their file name. SKIP (77) without man.
#   check.sh install BUILD_DIR PREFIX MANDIR_REL HEADER
#       cmake --install BUILD_DIR --prefix PREFIX for the components dev and tools
#       ($CMAKE, default cmake), coverage on PREFIX/MANDIR_REL, and man -M finds and
#       renders pages there (ddss_acquire_lock_ss, a link, a command, the overview).
#       SKIP (77) after the file checks when man is not installed.
#
# Exit status: 0 pass, 1 fail, 2 usage, 77 skip.
set -u

fail=0
say() { printf '%s\n' "$*"; }
bad() { say "FAIL: $*"; fail=1; }

# The DDSS_API functions of a header, one per line (comments and preprocessor lines
# dropped, so the declarations may span lines).
api_functions() {
	perl -0777 -ne '
		s{/\*.*?\*/}{ }gs; s{//[^\n]*}{}g; s{^[ \t]*#[^\n]*}{}mg;
		while (/\bDDSS_API\b[^;{(]*?\b([A-Za-z_]\w*)\s*\(/g) { print "$1\n" }' "$1"
}

# The page file that man(1) would render for PAGE: follows symlinks and ".so" lines.
resolve_page() {
	mandir=$1 page=$2 hops=0
	while [ $hops -lt 8 ]; do
		if [ -L "$page" ]; then
			page=$(readlink -f "$page") || return 1
		elif [ -f "$page" ] && so=$(sed -n '1s/^\.so[[:space:]]\{1,\}//p' "$page") &&
		     [ -n "$so" ]; then
			page=$mandir/$so
		else
			break
		fi
		hops=$((hops + 1))
	done
	[ -f "$page" ] && printf '%s\n' "$page"
}

coverage() {
	header=$1 mandir=$2
	[ -f "$header" ] || { say "no header $header"; return 1; }
	[ -d "$mandir/man3" ] || { bad "no $mandir/man3"; return 1; }
	funcs=$(api_functions "$header") || { bad "cannot read $header"; return 1; }
	n=$(printf '%s\n' "$funcs" | grep -c .)
	# The header has had 26 since the statistics API; fewer means the parser broke.
	[ "$n" -ge 20 ] || bad "found only $n DDSS_API functions in $header: parser broken?"
	for f in $funcs; do
		p=$mandir/man3/$f.3
		if [ ! -e "$p" ] && [ ! -L "$p" ]; then
			bad "$f: no page man3/$f.3"
			continue
		fi
		real=$(resolve_page "$mandir" "$p") || { bad "$f: man3/$f.3 leads to no page"; continue; }
		grep -Eq "^\.Nm[[:space:]]+$f([[:space:]]|$)" "$real" ||
			bad "$f: not in a .Nm line of $(basename "$real") (NAME section)"
		grep -Eq "^\.(Fn|Fo)[[:space:]]+$f([[:space:]]|$)" "$real" ||
			bad "$f: no .Fn/.Fo $f in $(basename "$real") (SYNOPSIS)"
	done
	# A page for a function that is gone from the header is a stale page.
	for p in "$mandir"/man3/*.3; do
		[ -e "$p" ] || [ -L "$p" ] || continue
		name=$(basename "$p" .3)
		printf '%s\n' "$funcs" | grep -qx "$name" ||
			bad "man3/$name.3: $name is not a DDSS_API function of the header"
	done
	[ -f "$mandir/man7/ddss.7" ] || bad "no overview page man7/ddss.7"
	for c in ${MAN1_PAGES-ddssrun ddssd ddss-bench ddss-info}; do
		[ -f "$mandir/man1/$c.1" ] || bad "no page man1/$c.1"
	done
	# Cross references between our own pages must land.
	for p in "$mandir"/man*/*.[137]; do
		[ -f "$p" ] && [ ! -L "$p" ] || continue
		sed -n 's/^\.Xr[[:space:]]\{1,\}\(ddss[A-Za-z0-9_-]*\)[[:space:]]\{1,\}\([0-9]\).*/\1 \2/p' "$p" |
		while read -r name sec; do
			[ -e "$mandir/man$sec/$name.$sec" ] ||
				say "FAIL: $(basename "$p"): .Xr $name $sec has no page"
		done | grep . && fail=1
	done
	[ $fail -eq 0 ] && say "coverage: $n functions, each with its page; section 1 and 7 present"
	return $fail
}

# Coverage must notice each kind of hole; run on a copy of MANDIR per case.
selftest() {
	header=$1 mandir=$2
	tmp=$(mktemp -d) || return 1
	trap 'rm -rf "$tmp"' EXIT
	run_case() { # DESCRIPTION COMMAND...: the copy is $tmp/man
		what=$1; shift
		rm -rf "$tmp/man" && cp -a "$mandir" "$tmp/man" || return 1
		(cd "$tmp/man" && "$@") || { bad "selftest: could not prepare: $what"; return; }
		if (coverage "$header" "$tmp/man") >"$tmp/out" 2>&1; then
			bad "selftest: coverage passed with $what"
		else
			say "selftest: detected $what: $(grep -m1 FAIL "$tmp/out")"
		fi
	}
	fail=0
	(coverage "$header" "$mandir") >"$tmp/out" 2>&1 ||
		{ cat "$tmp/out"; bad "selftest: coverage fails on the real pages"; }
	run_case "a page deleted (man3/ddss_barrier.3)" rm man3/ddss_barrier.3
	run_case "a grouped page deleted (man3/ddss_acquire_lock_ss.3)" rm man3/ddss_acquire_lock_ss.3
	run_case "a link deleted (man3/ddss_put.3)" rm man3/ddss_put.3
	run_case "a name dropped from NAME (.Nm ddss_put)" sed -i '/^\.Nm ddss_put/d' man3/ddss_get.3
	run_case "a dangling link" sh -c 'rm man3/ddss_get.3 && ln -s nowhere.3 man3/ddss_get.3'
	run_case "a section-1 page deleted (man1/ddssrun.1)" rm man1/ddssrun.1
	run_case "the overview deleted (man7/ddss.7)" rm man7/ddss.7
	[ $fail -eq 0 ] && say "selftest: every hole was detected"
	return $fail
}

lint() {
	mandir=$1
	if ! command -v man >/dev/null 2>&1; then
		say "SKIP: man(1) is not installed (scripts/install-deps.sh installs man-db)"
		return 77
	fi
	cd "$mandir" || return 1
	count=0
	for p in man*/*.[137]; do
		[ -e "$p" ] || continue
		count=$((count + 1))
		# groff's warnings (-ww: all of them) reach stderr through man; a page is fine
		# only if nothing at all is printed there, and it renders to something.
		err=$(LC_ALL=C MANROFFSEQ='' MANWIDTH=80 man --warnings=w -E UTF-8 -l "$p" 2>&1 >"$tmpout")
		[ -z "$err" ] || bad "$p: man -l: $err"
		[ -s "$tmpout" ] || bad "$p: man -l rendered nothing"
		[ -L "$p" ] && continue
		if LC_ALL=C grep -n '[^[:print:][:space:]]' "$p" >/dev/null; then
			bad "$p: not ASCII: $(LC_ALL=C grep -n -m1 '[^[:print:][:space:]]' "$p")"
		fi
		name=$(basename "$p"); sec=${name##*.}; name=${name%.*}
		want=$(printf '%s %s' "$name" "$sec" | tr '[:lower:]' '[:upper:]')
		dt=$(sed -n 's/^\.Dt[[:space:]]\{1,\}//p' "$p")
		[ "$dt" = "$want" ] || bad "$p: .Dt '$dt', expected '$want'"
		[ "${p%%/*}" = "man$sec" ] || bad "$p: section $sec page in ${p%%/*}"
		if command -v mandoc >/dev/null 2>&1; then
			out=$(mandoc -T lint -W warning "$p" 2>&1)
			rc=$?
			[ $rc -eq 0 ] && [ -z "$out" ] || bad "$p: mandoc -T lint (exit $rc): $out"
		fi
	done
	[ $count -gt 0 ] || bad "no pages in $mandir"
	if command -v mandoc >/dev/null 2>&1; then linter="man -l and mandoc"; else
		linter="man -l (mandoc not installed)"; fi
	[ $fail -eq 0 ] && say "lint: $count pages clean under $linter"
	return $fail
}

install_check() {
	build=$1 prefix=$2 rel=$3 header=$4
	cmake=${CMAKE:-cmake}
	rm -rf "$prefix"
	for comp in dev tools; do
		"$cmake" --install "$build" --prefix "$prefix" --component "$comp" >"$tmpout" 2>&1 ||
			{ cat "$tmpout"; bad "cmake --install --component $comp failed"; return 1; }
	done
	case $rel in /*) inst=$rel ;; *) inst=$prefix/$rel ;; esac
	coverage "$header" "$inst" || return 1
	if ! command -v man >/dev/null 2>&1; then
		say "SKIP: man(1) is not installed; the installed files are complete"
		return 77
	fi
	for q in "3 ddss_acquire_lock_ss" "3 ddss_release_lock_ss" "1 ddssd" "7 ddss"; do
		set -- $q
		path=$(LC_ALL=C man -M "$inst" -w "$1" "$2" 2>&1) ||
			{ bad "man -M $inst -w $1 $2: $path"; continue; }
		case $path in "$inst"/*) ;; *) bad "man -M found $2 outside the prefix: $path" ;; esac
		LC_ALL=C MANWIDTH=80 man -M "$inst" "$1" "$2" 2>&1 | grep -q "$2" ||
			bad "man -M $inst $1 $2 does not show $2"
	done
	[ $fail -eq 0 ] && say "install: man -M $inst finds the pages"
	return $fail
}

tmpout=$(mktemp) || exit 1
cleanup_out() { rm -f "$tmpout"; }
mode=${1:-}
[ $# -gt 0 ] && shift
case $mode in
coverage) [ $# -eq 2 ] || exit 2; coverage "$@"; rc=$? ;;
selftest) [ $# -eq 2 ] || exit 2; selftest "$@"; rc=$? ;;
lint) [ $# -eq 1 ] || exit 2; lint "$@"; rc=$? ;;
install) [ $# -eq 4 ] || exit 2; install_check "$@"; rc=$? ;;
*) say "usage: check.sh coverage|selftest HEADER MANDIR | lint MANDIR |" \
       "install BUILD_DIR PREFIX MANDIR_REL HEADER"; cleanup_out; exit 2 ;;
esac
cleanup_out
exit $rc
