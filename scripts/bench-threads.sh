#!/usr/bin/env bash
# Per-hit cost when several threads hit one event at once, in one run: a jump-optimized
# event with two fetchargs (x=%di:s64 s=+0(%sp):u64) refused by a filter the runtime
# judges (comm ~ "nomatch*"), soft-disabled with a hist trigger (hist:keys=x.log2:vals=s),
# and traced; each with the hits counted per CPU (the default where glibc registers an
# rseq area) and with KPREWRITE_NO_RSEQ=1 (one locked add on the event's counter, a line
# every thread and process of the trace file shares). Prints a Markdown table for
# docs/benchmarks.md.
#
#   scripts/bench-threads.sh      (N calls a thread, default 3000000; T threads, default
#                                  the CPUs; RUNS 5)
#
# scripts/bench/threads.c runs T threads calling target() N times each, then its
# unprobed twin; a cell is the hit's cost (wall time per call, less the twin's),
# averaged over the whole run (the trace file new each run); kinds and counting modes
# run interleaved, RUNS times; medians.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${N:-3000000}
nt=${T:-$(nproc)}
runs=${RUNS:-5}
KP=/tmp/kprewrite.bench
go build -o "$KP" ./cmd/kprewrite
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gcc -O2 -pthread -o "$tmp/threads" scripts/bench/threads.c
def='p:kpwbench/f target x=%di:s64 s=+0(%sp):u64'
kinds="out hist traced"
"$KP" rewrite -o "$tmp/t.out" -e "$def" --filter 'f:comm ~ "nomatch*"' "$tmp/threads" >/dev/null
"$KP" rewrite -o "$tmp/t.hist" -e "$def" --disable f --trigger 'f:hist:keys=x.log2:vals=s' "$tmp/threads" >/dev/null
"$KP" rewrite -o "$tmp/t.traced" -e "$def" "$tmp/threads" >/dev/null
size=$(((n * nt * 64 / 1048576) + 64))M
declare -A cost
for _ in $(seq "$runs"); do
	for k in $kinds; do
		for mode in percpu locked; do
			rm -f "$tmp/t.trace"
			env=(KPREWRITE_TRACE="$tmp/t.trace" KPREWRITE_TRACE_SIZE=$size)
			[ $mode = locked ] && env+=(KPREWRITE_NO_RSEQ=1)
			read -r _ _ _ bare _ h < <(env "${env[@]}" "$tmp/t.$k" "$n" "$nt")
			cost[$k.$mode]="${cost[$k.$mode]:-} $h"
			twin="${twin:-} $bare"
			if [ "$k" = out ]; then # every hit is counted, none recorded
				hits=$("$KP" profile "$tmp/t.trace" | awk '$1 ~ /(^|\/)f$/ {print $2; exit}')
				[ "$hits" = $((n * nt)) ] || { echo "out ($mode): ${hits:-no} hits counted, want $((n * nt))" >&2; exit 1; }
			fi
		done
	done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
echo "| event | filter, trigger | ns/hit, $nt threads at once, counted per CPU | counted with a locked add (\`KPREWRITE_NO_RSEQ=1\`) |"
echo "| --- | --- | --- | --- |"
row() { echo "| \`$def\` | $2 | $(echo "${cost[$1.percpu]}" | median) | $(echo "${cost[$1.locked]}" | median) |"; }
row out "filter \`comm ~ \"nomatch*\"\` (refuses every hit, judged by the runtime)"
row hist "\`--disable\`; \`hist:keys=x.log2:vals=s\`"
row traced "none (every hit recorded)"
echo
echo "Unprobed twin: $(echo "$twin" | median) ns a call. $runs runs of $nt threads x $n calls, kinds and modes interleaved; medians of the runs, averaged over each whole run."
