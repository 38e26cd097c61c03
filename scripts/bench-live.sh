#!/usr/bin/env bash
# What a switched-off probe costs a call, by how it is switched off, in one run
# (issue 46): scripts/bench/hit.c's target() (its per-call difference from the unprobed
# twin) in
#   original      the program as compiled
#   live-off      --no-optimize --disable: a live int3 probe, its site the original bytes
#   int3-off      --no-optimize, switched off by KPREWRITE_DISABLE: the int3 still traps
#   jump-off      --disable: a jump-optimized probe with its gate closed
#   live-on       the live probe after `kprewrite enable` (a record per hit)
# The variants take turns, ROUNDS rounds (default 5), each a run of N calls (default
# 2,000,000; int3-off and live-on 20,000: they trap); the median of each is printed, in
# ns per call above the twin.
#
#   scripts/bench-live.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
KP=/tmp/kprewrite.bench-live
go build -o "$KP" ./cmd/kprewrite
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gcc -O2 -o "$tmp/hit" scripts/bench/hit.c
def="p:kpwbench/k target"
"$KP" rewrite -o "$tmp/live" --no-optimize --disable kpwbench/k -e "$def" "$tmp/hit" >/dev/null
"$KP" rewrite -o "$tmp/int3" --no-optimize --trace none -e "$def" "$tmp/hit" >/dev/null
"$KP" rewrite -o "$tmp/jump" --trace none --disable kpwbench/k -e "$def" "$tmp/hit" >/dev/null
"$KP" rewrite -o "$tmp/liveon" --no-optimize --disable kpwbench/k -e "$def" "$tmp/hit" >/dev/null

# one: the per-call cost of a run (hit's "hit H" field)
one() { "$@" | awk '{print $6}'; }
declare -A all
for r in $(seq "$rounds"); do
	all[original]+="$(one "$tmp/hit" 2000000) "
	all[live-off]+="$(rm -f "$tmp/live.trace"; one "$tmp/live" 2000000) "
	all[int3-off]+="$(KPREWRITE_DISABLE=kpwbench/k one "$tmp/int3" 20000) "
	all[jump-off]+="$(one "$tmp/jump" 2000000) "
	rm -f "$tmp/liveon.trace"
	# live-on: enable the event in the trace file before the calls (a second run
	# appends to the same file, whose switch the first run's enable set)
	"$tmp/liveon" 1 >/dev/null
	"$KP" enable "$tmp/liveon.trace" kpwbench/k >/dev/null
	all[live-on]+="$(one "$tmp/liveon" 20000) "
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "| variant | ns per call above the unprobed twin (median of $rounds) |"
echo "| --- | --- |"
for v in original live-off int3-off jump-off live-on; do
	echo "| $v | $(echo "${all[$v]}" | median) |"
done
