#!/usr/bin/env bash
# Per-hit cost of event filters, in one run: a jump-optimized event with two fetchargs
# (x=%di:s64 s=+0(%sp):u64) written to the trace file, the same event with a filter that
# refuses every hit (nothing is written), with one that takes every hit, and with a
# string filter on comm that refuses every hit; with a conditional trigger that never
# fires (every hit traced), and switched off with `kprewrite disable` before the run
# (nothing is written); and the refusing filter given at run time instead, by a
# KPREWRITE_CONTROL file (kprewrite control) on the unfiltered rewrite; and the refusing
# filter in the program built without PIE (its inline filter's refusals count in a
# restartable sequence of their own instead of a call). Prints a Markdown table for docs/benchmarks.md.
#
#   scripts/bench-filter.sh           (N calls a round, default 1000000; ROUNDS 3; RUNS 3)
#
# scripts/bench/hit.c (with ROUNDS) calls target() and an unprobed twin N times a round and
# prints the hit's cost averaged over every call of every round (the trace file's pages
# allocated as a user's run allocates them: the file is new each run) and the best
# round's. The kinds run interleaved, RUNS times; a cell is the median of the runs.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${N:-1000000}
rounds=${ROUNDS:-3}
runs=${RUNS:-3}
KP=/tmp/kprewrite.bench
go build -o "$KP" ./cmd/kprewrite
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gcc -O2 -o "$tmp/hit" scripts/bench/hit.c
gcc -O2 -no-pie -o "$tmp/hitnp" scripts/bench/hit.c
def='p:kpwbench/f target x=%di:s64 s=+0(%sp):u64'
kinds="traced out in comm trig soft rtout outnp"
"$KP" rewrite -o "$tmp/hit.traced" -e "$def" "$tmp/hit" >/dev/null
"$KP" rewrite -o "$tmp/hit.out" -e "$def" --filter 'f:x < 0 && s != 0' "$tmp/hit" >/dev/null
"$KP" rewrite -o "$tmp/hit.outnp" -e "$def" --filter 'f:x < 0 && s != 0' "$tmp/hitnp" >/dev/null
"$KP" rewrite -o "$tmp/hit.in" -e "$def" --filter 'f:x >= 0 || s == 0' "$tmp/hit" >/dev/null
"$KP" rewrite -o "$tmp/hit.comm" -e "$def" --filter 'f:comm ~ "nomatch*"' "$tmp/hit" >/dev/null
"$KP" rewrite -o "$tmp/hit.trig" -e "$def" --trigger 'f:traceoff if x < 0' "$tmp/hit" >/dev/null
cp "$tmp/hit.traced" "$tmp/hit.soft"
cp "$tmp/hit.traced" "$tmp/hit.rtout"
"$KP" control -o "$tmp/rtout.ctl" --filter 'f:x < 0 && s != 0' "$tmp/hit.rtout" >/dev/null
# every record fits: 3 rounds of N records of 128 bytes
size=$(((n * rounds * 128 / 1048576) + 64))M
declare -A avg best
for _ in $(seq "$runs"); do
	for k in $kinds; do
		rm -f "$tmp/t.trace"
		if [ "$k" = soft ]; then # the file made by a one-call run, the event switched off
			KPREWRITE_TRACE="$tmp/t.trace" KPREWRITE_TRACE_SIZE=$size "$tmp/hit.$k" 1 1 >/dev/null
			"$KP" disable "$tmp/t.trace" f >/dev/null
		fi
		ctl=
		[ "$k" = rtout ] && ctl="$tmp/rtout.ctl"
		read -r _ a _ b _ bare _ < <(KPREWRITE_CONTROL=$ctl KPREWRITE_TRACE="$tmp/t.trace" KPREWRITE_TRACE_SIZE=$size "$tmp/hit.$k" "$n" "$rounds")
		avg[$k]="${avg[$k]:-} $a"
		best[$k]="${best[$k]:-} $b"
	done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
echo "| event | filter | records | ns/hit, averaged over the run | ns/hit, best round |"
echo "| --- | --- | --- | --- | --- |"
row() { echo "| \`$def\` | $2 | $3 | $(echo "${avg[$1]}" | median) | $(echo "${best[$1]}" | median) |"; }
row traced "none" "every hit"
row out "\`x < 0 && s != 0\` (refuses every hit)" "none"
row in "\`x >= 0 \|\| s == 0\` (takes every hit)" "every hit"
row comm "\`comm ~ \"nomatch*\"\` (refuses every hit)" "none"
row trig "none; trigger \`traceoff if x < 0\` (never fires)" "every hit"
row soft "none; switched off (\`kprewrite disable\`)" "none"
row rtout "\`x < 0 && s != 0\` given at run time (\`KPREWRITE_CONTROL\`)" "none"
row outnp "\`x < 0 && s != 0\` (refuses every hit), the program built with \`-no-pie\`" "none"
echo
echo "Bare call of the unprobed twin: ${bare} ns. $runs runs of $rounds rounds of $n calls, kinds interleaved; medians of the runs."
