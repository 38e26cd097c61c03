#!/usr/bin/env bash
# What a switched-off probe costs a call, by how it is switched off, in one run
# (issue 46): scripts/bench/hit.c's target(), its per-call difference from the unprobed
# twin, in
#   original        the program as compiled
#   live-off-int3   --no-optimize --disable: a live int3 probe, its site the original bytes
#   live-off-jump   --disable: a live jump-optimized probe, its site the original bytes
#   int3-off        --no-optimize, switched off by KPREWRITE_DISABLE: the int3 still traps
#   gate-off        --disable on a probe that cannot be live (it has a filter): the jmp
#                   stays, the detour's gate is closed
#   live-on-int3    the live int3 probe after `kprewrite enable` (a record per hit)
#   live-on-jump    the live jump probe after `kprewrite enable` (a record per hit)
# The variants take turns, ROUNDS rounds (default 5), each a run of N calls (2,000,000;
# int3-off and live-on-int3 20,000: they trap); each trace file is new (the live-on runs
# enable the event in a file a first run made). The median of each is printed, in ns
# per call above the twin.
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
"$KP" rewrite -o "$tmp/live-int3" --no-optimize --disable kpwbench/k -e "$def" "$tmp/hit" >/dev/null
"$KP" rewrite -o "$tmp/live-jump" --disable kpwbench/k -e "$def" "$tmp/hit" >/dev/null
"$KP" rewrite -o "$tmp/int3" --no-optimize --trace none -e "$def" "$tmp/hit" >/dev/null
"$KP" rewrite -o "$tmp/gate" --trace none --disable kpwbench/k --filter 'kpwbench/k:common_pid != 0' \
	-e "$def" "$tmp/hit" >/dev/null

one() { "$@" | awk '{print $6}'; } # hit's "hit H": ns per call above the twin
# on BIN N: the live probe enabled, in a new trace file
on() {
	rm -f "$1.trace"
	"$1" 1 >/dev/null
	"$KP" enable "$1.trace" kpwbench/k >/dev/null
	one "$1" "$2"
}
declare -A all
for r in $(seq "$rounds"); do
	all[original]+="$(one "$tmp/hit" 2000000) "
	all[live-off-int3]+="$(rm -f "$tmp/live-int3.trace"; one "$tmp/live-int3" 2000000) "
	all[live-off-jump]+="$(rm -f "$tmp/live-jump.trace"; one "$tmp/live-jump" 2000000) "
	all[int3-off]+="$(KPREWRITE_DISABLE=kpwbench/k one "$tmp/int3" 20000) "
	all[gate-off]+="$(one "$tmp/gate" 2000000) "
	all[live-on-int3]+="$(on "$tmp/live-int3" 20000) "
	all[live-on-jump]+="$(on "$tmp/live-jump" 2000000) "
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "| variant | ns per call above the unprobed twin (median of $rounds) |"
echo "| --- | --- |"
for v in original live-off-int3 live-off-jump int3-off gate-off live-on-int3 live-on-jump; do
	echo "| $v | $(echo "${all[$v]}" | median) |"
done
