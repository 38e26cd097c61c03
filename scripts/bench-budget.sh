#!/usr/bin/env bash
# What this host charges for a detour's instructions beside rdtsc (issue 49): the tsc
# floor, then scripts/bench/budget.c's probe floor with M = 0, 10 ... 60 predicted
# compare-and-branch pairs after the clock read (kprewrite's hot record adds ~120
# instructions to the probe floor: M = 60), taking turns, ROUNDS rounds. Each figure is
# CPU ns a call above the round's unprobed loop; prints each round, then the median,
# least and most of each M and its median over the tsc floor's.
#
# usage: scripts/bench-budget.sh [ROUNDS [N]]   (default 9 rounds of 10000000 calls)
set -euo pipefail
rounds=${1:-9}
n=${2:-10000000}
export BENCH_CPU=${BENCH_CPU:-0}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/bench-budget.XXXXXX")
trap 'rm -rf "$work"' EXIT
gcc -O2 -o "$work/budget" "$root/scripts/bench/budget.c"
ms=(-2 0 10 20 30 40 50 60)
declare -A runs
for r in $(seq "$rounds"); do
	base=$("$work/budget" "$n" -1)
	line="round $r:"
	for m in "${ms[@]}"; do
		v=$(echo "$("$work/budget" "$n" "$m") $base" | awk '{printf "%.2f", $1 - $2}')
		runs[$m]+="$v "
		line+="  $m:$v"
	done
	echo "$line"
done
stat() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {printf "%.2f %.2f %.2f\n", a[int((NR+1)/2)], a[1], a[NR]}'; }
floor=$(echo "${runs[-2]}" | stat | cut -d' ' -f1)
echo
echo "CPU ns a call above the unprobed loop, $rounds rounds of $n calls, $(date '+%F %H:%M'), load $(cut -d' ' -f1 /proc/loadavg)"
echo
echo "| detour | median | least | most | median x the tsc floor |"
echo "|---|---|---|---|---|"
for m in "${ms[@]}"; do
	label="the probe floor + $m pairs ($((2 * m)) instructions)"
	[ "$m" = -2 ] && label="the tsc floor (rdtsc and the store in the loop)"
	read -r med lo hi < <(echo "${runs[$m]}" | stat)
	echo "| $label | $med | $lo | $hi | $(echo "$med $floor" | awk '{printf "%.2f", $1 / $2}') |"
done
