#!/bin/sh
# `make lint`: the checks that read the code rather than run it, each one
# a pass or a fail in the closing "N passed, N failed" line:
#   - the admin's layers (scripts/check-deps.py: no include or symbol
#     cycles, no dependency pointing up);
#   - cppcheck (warnings and portability; suppressions with their reasons
#     in .cppcheck-suppressions) over every C file;
#   - clang-tidy with .clang-tidy's short list over every C file, without
#     the clang static analyzer, which takes 3 s a file (`make lint-deep`
#     runs it: about 8 minutes on 2 cores);
#   - clang-format --dry-run: the tree as .clang-format writes it.
# BUILD is the build tree check-deps reads (built first).
set -u
BUILD=${BUILD:-build}
DEEP=${DEEP:-0}
pass=0
fail=0

result() {
	if [ "$1" -eq 0 ]; then
		pass=$((pass + 1))
		echo "ok   $2"
	else
		fail=$((fail + 1))
		echo "FAIL $2"
	fi
}

c_files=$(git ls-files '*.c' | grep -v '^tests/browser/')
all_files=$(git ls-files '*.c' '*.h' | grep -v '^tests/browser/')

# the include directories each part of the tree is built with (Makefile)
flags_for() {
	f="-std=c11 -D_GNU_SOURCE -Iengine/include -Iengine/src -Iappliance/lib"
	case $1 in
	appliance/admin/* | tests/unit/* | tests/nvml_double/* | tests/fuzz/*)
		f="$f -Iappliance/admin -Iappliance/tune -Itests/unit" ;;
	appliance/tune/*) f="$f -Iappliance/tune" ;;
	appliance/fabric/*) f="$f -Iappliance/fabric -Iappliance/fabric/main" ;;
	provisioning/*) f="$f -Iappliance/admin -Iprovisioning/firstboot -I/usr/include/libxml2" ;;
	engine/src/dist/*) f="$f $(pkg-config --cflags ompi-c)" ;;
	esac
	echo "$f"
}

out=$(python3 scripts/check-deps.py "$BUILD" 2>&1)
rc=$?
echo "$out" | grep -v '^check-deps:' | sed 's/^/     /'
result $rc "admin layers: $(echo "$out" | tail -1)"

out=$(cppcheck -q -j "$(nproc)" --std=c11 --enable=warning,portability --inline-suppr --error-exitcode=1 -D_GNU_SOURCE \
	--include=/usr/include/cjson/cJSON.h --library=posix --suppressions-list=.cppcheck-suppressions \
	-Iengine/include -Iengine/src -Iappliance/lib -Iappliance/admin $c_files 2>&1)
rc=$?
echo "$out" | grep -E '^[^ ].*: (error|warning|portability|style):' | sed 's/^/     /'
result $rc "cppcheck: $(echo "$c_files" | wc -l) files"

checks=""
[ "$DEEP" = 1 ] || checks="--checks=-clang-analyzer-*"
# a file a process, as many at once as there are cores: each line to
# xargs is a file and its flags; a file that fails prints its findings
# and "tidy-failed"
tidy_out=$(for f in $c_files; do echo "$f $(flags_for "$f")"; done |
	xargs -P "$(nproc)" -L 1 sh -c 'f=$0
		if ! out=$(clang-tidy -quiet '"$checks"' "$f" -- "$@" 2>&1); then
			echo "$out" | grep -E "error:|warning:" | sed "s/^/     /"
			echo tidy-failed
		fi')
echo "$tidy_out" | grep -v '^tidy-failed$' | grep -v '^$'
tidy_fail=0
echo "$tidy_out" | grep -q '^tidy-failed$' && tidy_fail=1
result $tidy_fail "clang-tidy$([ "$DEEP" = 1 ] && echo ' with the static analyzer'): $(echo "$c_files" | wc -l) files"

# shellcheck disable=SC2086
out=$(clang-format --dry-run --Werror $all_files 2>&1)
rc=$?
echo "$out" | grep -aE 'error:' | cut -d: -f1 | sort -u | sed 's/^/     not formatted: /'
result $rc "clang-format: $(echo "$all_files" | wc -l) files"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
