#!/usr/bin/env bash
# Per-hit cost of stacktrace triggers, in one run: a jump-optimized event with two
# fetchargs (x=%di:s64 s=+0(%sp):u64) on target(), called 15 frames deep so that a
# stack holds 16 frames (15 of the program and the C library's start-up): recorded
# alone (the baseline), recorded with `stacktrace` (two records a hit), and soft-disabled
# (--disable) with `stacktrace` (the stack alone, as the kernel's soft mode still runs
# its triggers). Each run is repeated with the trace file's pages populated first
# (KPREWRITE_TRACE_PREFAULT=1): the walk and the records without this machine's ~6 us
# per new page. Prints a Markdown table for docs/benchmarks.md.
#
#   scripts/bench-stack.sh     (N calls a round, default 300000; ROUNDS 3; RUNS 3)
#
# scripts/bench/hit.c N ROUNDS 15 prints the hit's cost averaged over every call of
# every round (the trace file new each run) and the best round's. The kinds run
# interleaved, RUNS times; a cell is the median of the runs.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${N:-300000}
rounds=${ROUNDS:-3}
runs=${RUNS:-3}
depth=15
KP=/tmp/kprewrite.bench
go build -o "$KP" ./cmd/kprewrite
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gcc -O2 -o "$tmp/hit" scripts/bench/hit.c
def='p:kpwbench/f target x=%di:s64 s=+0(%sp):u64'
kinds="traced stack stackonly"
"$KP" rewrite -o "$tmp/hit.traced" -e "$def" "$tmp/hit" >/dev/null
"$KP" rewrite -o "$tmp/hit.stack" -e "$def" --trigger 'f:stacktrace' "$tmp/hit" >/dev/null
"$KP" rewrite -o "$tmp/hit.stackonly" -e "$def" --disable f --trigger 'f:stacktrace' "$tmp/hit" >/dev/null
size=$(((n * rounds * 256 / 1048576) + 64))M
declare -A avg best warm
for _ in $(seq "$runs"); do
	for k in $kinds; do
		rm -f "$tmp/t.trace"
		read -r _ a _ b _ bare _ < <(KPREWRITE_TRACE="$tmp/t.trace" KPREWRITE_TRACE_SIZE=$size "$tmp/hit.$k" "$n" "$rounds" "$depth")
		avg[$k]="${avg[$k]:-} $a"
		best[$k]="${best[$k]:-} $b"
		rm -f "$tmp/p.trace" # the same with the file's pages populated first: the walk and the record alone
		read -r _ _ _ b _ < <(KPREWRITE_TRACE="$tmp/p.trace" KPREWRITE_TRACE_PREFAULT=1 KPREWRITE_TRACE_SIZE=$size "$tmp/hit.$k" "$n" "$rounds" "$depth")
		warm[$k]="${warm[$k]:-} $b"
		rm -f "$tmp/p.trace"
		if [ "$k" = stack ]; then # every hit has its 16-frame stack
			# (the reader is cut short by head: its SIGPIPE is not a failure)
			frames=$( ("$KP" trace --no-header "$tmp/t.trace" || true) | head -400 | awk '/<stack trace>/ {if (n) print n; n=0; next} /^ => / {n++}' | sort -u)
			[ "$frames" = 16 ] || { echo "stack: frames per stack $frames, want 16" >&2; exit 1; }
		fi
	done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
echo "| event | trigger | records a hit | ns/hit, averaged over the run | ns/hit, best round | ns/hit, best round, file pre-populated |"
echo "| --- | --- | --- | --- | --- | --- |"
row() { echo "| \`$def\` | $2 | $3 | $(echo "${avg[$1]}" | median) | $(echo "${best[$1]}" | median) | $(echo "${warm[$1]}" | median) |"; }
row traced "none" "the event's (32 bytes)"
row stack "\`stacktrace\`" "the event's and a 16-frame stack (168 bytes)"
row stackonly "\`--disable\`; \`stacktrace\`" "a 16-frame stack"
echo
echo "Bare call of the unprobed twin: ${bare} ns. $runs runs of $rounds rounds of $n calls at depth $depth, kinds interleaved; medians of the runs."
