#!/usr/bin/env bash
# compare-outputs.sh [BASE] - rewrites the same inputs with kprewrite built from BASE (a
# git revision, default the commit issue 12's restructuring started from) and from the
# working tree, and compares the outputs byte for byte. A change that only moves code
# must print "identical" for every case.
#
# Cases: the fetch-style test programs (tests/testdata/probed.c with every fetch
# argument form the tests use, fastread.c) in default, --no-optimize, --no-boost and
# --verify-regions modes; a static musl build of probed.c (when musl-gcc is there);
# python3.11 with a count-only event on every function, entries and returns; the
# kprobe C handler example. KPREWRITE_COMPARE_NODE=1 adds node with an event on every
# function (slow, ~1 GB).
#
# Also: --calls (with and without --exits), a library definition (libc.so.6:malloc:
# the program and its library copy are compared), and the text and JSON of `check`.
#
# SAME_RUNTIME=1 builds BASE with the working tree's runtime object (runtime/
# kprewrite_rt.o and zz_generated.go), for a change that also rebuilds the runtime from
# moved sources: what differs then is what the Go side writes.
#
# IGNORE_IMAGE_ID=1 accepts outputs of the same size that differ in at most 16 bytes,
# all inside .kprewrite.rodata: the image id in the probe tables' header and in the
# image description's frame header (version 4). For a change that only changes how
# the id is computed.
set -euo pipefail
base=${1:-884a710}
top=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "building kprewrite at $base and at the working tree"
git -C "$top" archive --format=tar "$base" | (mkdir -p "$work/base" && tar -x -C "$work/base")
if [ "${SAME_RUNTIME:-}" = 1 ]; then
	cp "$top/runtime/kprewrite_rt.o" "$top/runtime/zz_generated.go" "$work/base/runtime/"
fi
(cd "$work/base" && go build -o "$work/kp-base" ./cmd/kprewrite)
(cd "$top" && go build -o "$work/kp-new" ./cmd/kprewrite && go build -o "$work/alldefs" ./scripts/alldefs)

cc=${CC:-gcc}
"$cc" -O2 -pthread -o "$work/probed" "$top/tests/testdata/probed.c"
"$cc" -O2 -pthread -o "$work/probed.nopie" -no-pie "$top/tests/testdata/probed.c"
"$cc" -O2 -o "$work/fastread" "$top/tests/testdata/fastread.c"
probedDefs=(
	"p:kpw/add add a=%di:s32 b=%si:s32"
	"p:kpw/add2 add x=%di:u8"
	"p:kpw/greet greet name=+0(%di):string c0=+0(%di):char us=+0(%di):ustring arr=+0(%di):u8[3] bf=+0(%di):b4@2/8 cm=\$comm"
	"r:kpw/fact fact n=\$arg1:s64 ret=\$retval:s64 rx=\$retval ax=%ax:u16"
	"p:kpw/fent fact n=%di:s64 sp8=+8(\$stack):x8 imm=\\1234 st=\$stack0 ip=%ip"
	"p:kpw/rip0 f_rip a=%di:s32 c=@counter:s32"
	"p:kpw/rip8 f_rip+8 eax=%ax:s32"
	"p:kpw/jcc f_jcc+2 di=%di:u32"
	"p:kpw/call f_call+1"
	"p:kpw/loop f_loop+7 cx=%cx:u32"
	"p:kpw/jrcxz f_jrcxz+2 cx=%cx:u32"
	"p:kpw/ret f_ret+2 ax=%ax:u32"
	"p:kpw/jmp f_jmp"
	"p:kpw/pushf f_pushf"
	"p:kpw/indcall f_indcall+8"
)
fastreadDefs=(
	"p:fr/peek peek s=+0(%di):string n=+0(%si):x64 v=+8(%si):s32 bf=+12(%si):b3@2/8 arr=+12(%si):u8[4] tag=%dx:s64"
	"p:fr/nest peek nv=+8(+0(%si)):s32 tag=%dx:s64"
	"p:fr/stk peek st=\$stack0:x64 sp0=+0(\$stack):x64 us=+0(%di):ustring sarr=+0(%si):string[2]"
	"r:fr/peekr peek rv=\$retval:x64 rs=+0(%ax):u8"
	"p:fr/sym peek g=@global_word:x32 gs=+0(@global_str):string"
)
printf '%s\n' "${probedDefs[@]}" >"$work/probed.defs"
printf '%s\n' "${fastreadDefs[@]}" >"$work/fastread.defs"

fail=0
# compare NAME INPUT ARGS...: one rewrite by each build into the same output path (the
# default trace path is written into the image).
compare() {
	local name=$1 in=$2
	shift 2
	local out=$work/out/$name
	mkdir -p "$work/out"
	local eb=0 en=0
	"$work/kp-base" rewrite -o "$out" "$@" "$in" >"$work/base.log" 2>&1 || eb=$?
	[ -f "$out" ] && mv "$out" "$out.base"
	[ -d "$out.libs" ] && mv "$out.libs" "$out.libs.base"
	"$work/kp-new" rewrite -o "$out" "$@" "$in" >"$work/new.log" 2>&1 || en=$?
	[ -f "$out" ] && mv "$out" "$out.new"
	[ -d "$out.libs" ] && mv "$out.libs" "$out.libs.new"
	if [ "$eb" != 0 ] || [ "$en" != 0 ]; then
		if [ "$eb" = "$en" ] && cmp -s "$work/base.log" "$work/new.log"; then
			echo "identical (both fail, exit $eb): $name"
			return
		fi
		echo "DIFFERENT: $name: exit $eb vs $en"
		diff "$work/base.log" "$work/new.log" | head -5 || true
		fail=1
		return
	fi
	if ! cmp -s "$work/base.log" "$work/new.log"; then
		echo "DIFFERENT messages: $name"
		diff "$work/base.log" "$work/new.log" | head -5 || true
		fail=1
	fi
	if cmp -s "$out.base" "$out.new"; then
		echo "identical: $name ($(stat -c %s "$out.new") bytes)"
	elif [ "${IGNORE_IMAGE_ID:-}" = 1 ] && same_but_id "$out.base" "$out.new"; then
		echo "identical but the image id: $name"
	else
		echo "DIFFERENT: $name ($(cmp "$out.base" "$out.new" | head -1))"
		fail=1
	fi
	rm -f "$out.base" "$out.new"
	compare_libs "$name" "$out"
}

# compare_libs NAME OUT: the library copies each build wrote beside OUT (OUT.libs).
compare_libs() {
	local name=$1 out=$2
	[ -d "$out.libs.base" ] || [ -d "$out.libs.new" ] || return 0
	if diff -r -q "$out.libs.base" "$out.libs.new" >/dev/null; then
		echo "identical: $name library copies ($(ls "$out.libs.new" | tr '\n' ' '))"
	else
		echo "DIFFERENT: $name library copies"
		diff -r -q "$out.libs.base" "$out.libs.new" | head -5 || true
		fail=1
	fi
	rm -rf "$out.libs.base" "$out.libs.new"
}

# compare_check NAME ARGS...: the output of `check ARGS` by each build.
compare_check() {
	local name=$1
	shift
	local eb=0 en=0
	"$work/kp-base" check "$@" >"$work/base.check" 2>&1 || eb=$?
	"$work/kp-new" check "$@" >"$work/new.check" 2>&1 || en=$?
	if [ "$eb" = "$en" ] && cmp -s "$work/base.check" "$work/new.check"; then
		echo "identical: check $name (exit $eb, $(wc -l <"$work/new.check") lines)"
	else
		echo "DIFFERENT: check $name: exit $eb vs $en"
		diff "$work/base.check" "$work/new.check" | head -5 || true
		fail=1
	fi
}

# same_but_id A B: the files have the same size and differ in at most 16 bytes, inside
# .kprewrite.rodata, where the image id is written twice.
same_but_id() {
	[ "$(stat -c %s "$1")" = "$(stat -c %s "$2")" ] || return 1
	local ranges
	ranges=$(readelf -W -S "$2" | sed 's/^ *\[ *[0-9]*\]//' | awk '$1 == ".kprewrite.rodata" {print $4, $5}' |
		while read -r off size; do echo "$((16#$off)) $((16#$off + 16#$size))"; done | tr '\n' ' ')
	[ -n "$ranges" ] || return 1
	{ cmp -l "$1" "$2" || true; } | awk -v r="$ranges" 'BEGIN {n = split(r, a, " ")}
		{o = $1 - 1; ok = 0; for (i = 1; i < n; i += 2) if (o >= a[i] && o < a[i+1]) ok = 1; if (!ok) bad = 1; nd++}
		END {exit bad || nd > 16}'
}

for mode in "" --no-optimize --no-boost --verify-regions; do
	tag=${mode:-default}
	tag=${tag#--}
	compare "probed-$tag" "$work/probed" -f "$work/probed.defs" $mode
	compare "probed-nopie-$tag" "$work/probed.nopie" -f "$work/probed.defs" $mode
	compare "fastread-$tag" "$work/fastread" -f "$work/fastread.defs" $mode
done
compare "probed-count-only" "$work/probed" -f "$work/probed.defs" --count-only --skip-refused
compare "probed-calls" "$work/probed" --calls '*'
compare "probed-calls-exits" "$work/probed" --calls '*' --exits -e 'p:kpw/add add a=%di:s32'
compare "probed-libc" "$work/probed" -f "$work/probed.defs" -e 'p:lib/malloc libc.so.6:malloc size=%di:u64' -e 'r:lib/malloc_ret libc.so.6:malloc $retval:x64'
compare_check "probed-defs" -f "$work/probed.defs" "$work/probed"
compare_check "probed-defs-json" --json -f "$work/probed.defs" -e 'p:lib/malloc libc.so.6:malloc' "$work/probed"
compare_check "probed-entries-json" --json "$work/probed"
compare_check "probed-bad-def" -e 'p:x/y nosuch' "$work/probed"
compare "probed-int3step" "$work/probed" -f "$work/probed.defs" --no-optimize --single-step int3

if command -v musl-gcc >/dev/null; then
	musl-gcc -O2 -static -o "$work/probed.musl" "$top/tests/testdata/probed.c"
	"$work/alldefs" -g all "$work/probed.musl" >"$work/musl.defs"
	compare "musl-static" "$work/probed.musl" -f "$work/probed.defs"
	compare "musl-static-every-function" "$work/probed.musl" -f "$work/musl.defs" --skip-refused
else
	echo "skipped: static musl program (no musl-gcc)"
fi
gcc -O2 -static -o "$work/probed.static" "$top/tests/testdata/probed.c" -pthread
compare "glibc-static" "$work/probed.static" -f "$work/probed.defs"

py=/usr/bin/python3.11
if [ -x "$py" ]; then
	"$work/alldefs" "$py" >"$work/py.defs"
	"$work/alldefs" -r -g allr "$py" >"$work/pyr.defs"
	compare "python3.11-count-only" "$py" -f "$work/py.defs" --count-only --skip-refused
	compare "python3.11-count-only-returns" "$py" -f "$work/pyr.defs" --count-only --skip-refused
	compare "python3.11-traced" "$py" -e 'p:py/import PyImport_ImportModule name=+0(%di):string' -e 'r:py/import_ret PyImport_ImportModule $retval'
else
	echo "skipped: python3.11 (no $py)"
fi

gcc -O1 -o "$work/kptarget" "$top/examples/kprobe/target.c"
compare "handlers-kprobe" "$work/kptarget" --handlers "$top/examples/kprobe/kprobe_example.c"
gcc -O1 -static -o "$work/fitarget" "$top/examples/faultinject/target.c"
compare "handlers-faultinject" "$work/fitarget" --handlers "$top/examples/faultinject/fail_malloc.c"

if [ "${KPREWRITE_COMPARE_NODE:-}" = 1 ] && [ -x /usr/bin/node ]; then
	"$work/alldefs" /usr/bin/node >"$work/node.defs"
	compare "node-every-function" /usr/bin/node -f "$work/node.defs" --skip-refused --exclude 'Builtins_*'
fi

if [ "$fail" != 0 ]; then
	echo "compare-outputs: outputs differ"
	exit 1
fi
echo "compare-outputs: every output identical"
