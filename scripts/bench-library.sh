#!/usr/bin/env bash
# Probes in a shared library against the same probes in an executable, in one run:
#  1. the per-hit cost of a jump-optimized probe on target() (scripts/bench/hit.c),
#     count-only and traced (x=%di:s64 s=+0(%sp):u64), with target() in the program
#     and with target() in a rewritten shared library the program calls through its PLT
#     (the unprobed twin() is called the same way, so the difference is the probe's);
#  2. python3.11 start-up (-c pass) with the C library rewritten count-only with an
#     event on every function entry, against a freshly written copy of the original C
#     library (both through LD_LIBRARY_PATH).
# Prints Markdown for docs/benchmarks.md.
#
#   scripts/bench-library.sh    (N calls a round, default 1000000; ROUNDS 3; RUNS 5;
#                                STARTS 40 python start-ups each)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${N:-1000000}
rounds=${ROUNDS:-3}
runs=${RUNS:-5}
starts=${STARTS:-40}
KP=/tmp/kprewrite.bench
go build -o "$KP" ./cmd/kprewrite
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/lib" "$tmp/libcount" "$tmp/libtrace"
gcc -O2 -o "$tmp/hit" scripts/bench/hit.c
gcc -O2 -shared -fPIC -DHIT_LIB -Wl,-soname,libhit.so -o "$tmp/lib/libhit.so" scripts/bench/hit.c
gcc -O2 -DHIT_EXTERN -o "$tmp/hitx" scripts/bench/hit.c -L"$tmp/lib" -lhit
def='p:kpwbench/f target x=%di:s64 s=+0(%sp):u64'
"$KP" rewrite --count-only -o "$tmp/hit.count" -e "$def" "$tmp/hit" >/dev/null
"$KP" rewrite -o "$tmp/hit.trace" -e "$def" "$tmp/hit" >/dev/null
"$KP" rewrite --count-only -o "$tmp/libcount/libhit.so" -e "$def" "$tmp/lib/libhit.so" >/dev/null
"$KP" rewrite -o "$tmp/libtrace/libhit.so" -e "$def" "$tmp/lib/libhit.so" >/dev/null
for v in hit.count hit.trace; do "$KP" list "$tmp/$v" | grep -q OPTIMIZED || { echo "$v: not jump-optimized" >&2; exit 1; }; done
for v in libcount libtrace; do "$KP" list "$tmp/$v/libhit.so" | grep -q OPTIMIZED || { echo "$v: not jump-optimized" >&2; exit 1; }; done
size=$(((n * rounds * 64 / 1048576) + 64))M
declare -A avg best
run() { # kind, then the command's environment and path
	local k=$1
	shift
	rm -f "$tmp/t.trace"
	read -r _ a _ b _ < <(env KPREWRITE_TRACE="$tmp/t.trace" KPREWRITE_TRACE_SIZE=$size "$@" "$n" "$rounds")
	avg[$k]="${avg[$k]:-} $a"
	best[$k]="${best[$k]:-} $b"
}
for _ in $(seq "$runs"); do
	run exe-count "$tmp/hit.count"
	run lib-count LD_LIBRARY_PATH="$tmp/libcount" "$tmp/hitx"
	run exe-trace "$tmp/hit.trace"
	run lib-trace LD_LIBRARY_PATH="$tmp/libtrace" "$tmp/hitx"
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
echo "| probe \`$def\` | in the executable: ns/hit, averaged over the run | in a shared library | in the executable: best round | in a shared library: best round |"
echo "| --- | --- | --- | --- | --- |"
for m in count trace; do
	label=$([ $m = count ] && echo "\`--count-only\`" || echo "traced (32-byte records)")
	echo "| $label | $(echo "${avg[exe-$m]}" | median) | $(echo "${avg[lib-$m]}" | median) | $(echo "${best[exe-$m]}" | median) | $(echo "${best[lib-$m]}" | median) |"
done
echo
echo "$runs runs of $rounds rounds of $n calls, kinds interleaved; medians of the runs (the trace file new each run)."
echo

# 2. python3.11 start-up with libc.so.6 rewritten count-only on every function
py=/usr/bin/python3.11
[ -x "$py" ] || py=$(command -v python3.11 || true)
[ -n "$py" ] || { echo "(no python3.11: no start-up figures)"; exit 0; }
libc=$(ldd "$py" | awk '$1 == "libc.so.6" {print $3}')
mkdir "$tmp/orig" "$tmp/co" "$tmp/oo"
dd if="$libc" of="$tmp/orig/libc.so.6" bs=2M iflag=fullblock status=none # written as kprewrite writes
go run ./scripts/alldefs "$libc" >"$tmp/libc.defs"
"$KP" rewrite --skip-refused --count-only --trace none -o "$tmp/co/libc.so.6" -f "$tmp/libc.defs" "$libc" 2>/dev/null
"$KP" rewrite --skip-refused --count-only --optimized-only --trace none -o "$tmp/oo/libc.so.6" -f "$tmp/libc.defs" "$libc" 2>/dev/null
nprobes=$("$KP" list "$tmp/co/libc.so.6" | wc -l)
nint3=$("$KP" list "$tmp/co/libc.so.6" | grep -vc OPTIMIZED || true)
noo=$("$KP" list "$tmp/oo/libc.so.6" | wc -l)
wall() { # microseconds of one run
	local t0 t1
	t0=$(date +%s%N)
	env "$@" >/dev/null
	t1=$(date +%s%N)
	echo $(((t1 - t0) / 1000))
}
o=() c=() x=()
rm -f "$tmp/s.trace"
for _ in $(seq "$starts"); do
	o+=("$(wall LD_LIBRARY_PATH="$tmp/orig" "$py" -c pass)")
	c+=("$(wall LD_LIBRARY_PATH="$tmp/co" KPREWRITE_TRACE="$tmp/s.trace" "$py" -c pass)")
	x+=("$(wall LD_LIBRARY_PATH="$tmp/oo" KPREWRITE_TRACE="$tmp/x.trace" "$py" -c pass)")
done
stats() { printf '%s\n' "$@" | sort -n | awk '{v[NR]=$1; s+=$1} END {printf "%.2f %.2f\n", s/NR/1000, v[1]/1000}'; }
read -r om ob < <(stats "${o[@]}")
read -r cm cb < <(stats "${c[@]}")
read -r xm xb < <(stats "${x[@]}")
hits=$("$KP" profile "$tmp/s.trace" | awk '{s+=$(NF-1)} END {print s}')
echo "| python3.11 \`-c pass\` | original libc.so.6 (ms) | count-only, $nprobes events ($nint3 int3) (ms) | ratio | count-only \`--optimized-only\`, $noo events (ms) | ratio | goal |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
awk -v om="$om" -v cm="$cm" -v ob="$ob" -v cb="$cb" -v xm="$xm" -v xb="$xb" -v n="$starts" 'BEGIN {
	printf "| mean of %s start-ups | %.2f | %.2f | %.2f | %.2f | %.2f | <= 1.1 |\n", n, om, cm, cm / om, xm, xm / om
	printf "| best start-up | %.2f | %.2f | %.2f | %.2f | %.2f | |\n", ob, cb, cb / ob, xb, xb / ob }'
echo
echo "$starts start-ups each, taking turns; in all of them the C library's probes were hit $hits times (all events)."
