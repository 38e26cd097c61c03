#!/usr/bin/env bash
# A hot event's burst under `kprewrite record` for several kprewrite builds taking
# turns, counting the records each run kept (issue 49): each round runs, for each build,
# its rewrite of scripts/bench/direct.c's loop (`work(1, i)` HITS times) with
# `p:b/w work a=%di b=%si` under `record -q` (the default ring, or RECORD_ARGS), then
# reads `trace`'s entries-in-buffer/entries-written. Prints, per build, the CPU ns a
# hit of each run (the loop's thread, pinned to BENCH_CPU, default 0) and the wall ns a
# hit (the loop's, waits included: a writer that appends to the file waits for its lock),
# their medians, how many runs lost records and how many in all.
#
# usage: [RECORD_ARGS='--buffer-max 32M'] scripts/bench-record-loss.sh ROUNDS HITS KPREWRITE...
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 ROUNDS HITS KPREWRITE..." >&2; exit 2; }
rounds=$1 hits=$2
shift 2
export BENCH_CPU=${BENCH_CPU:-0}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/bench-record-loss.XXXXXX")
trap 'rm -rf "$work"' EXIT
gcc -O2 -o "$work/d" "$root/scripts/bench/direct.c" -lpthread
i=0
for k in "$@"; do
	"$k" rewrite -o "$work/d.$i" -e 'p:b/w work a=%di b=%si' "$work/d" >/dev/null
	i=$((i + 1))
done
cd "$work"
declare -A runs walls lossy lost
for r in $(seq "$rounds"); do
	i=0
	for k in "$@"; do
		# shellcheck disable=SC2086
		out=$("$k" record -q ${RECORD_ARGS:-} -o r.trace -- "./d.$i" "$hits" none)
		v=$(echo "$out" | cut -d' ' -f1) wv=$(echo "$out" | cut -d' ' -f2)
		kw=$("$k" trace r.trace 2>/dev/null | sed -n '/entries-in-buffer/{s/^.*: //p;q}' || true) # (sed's early end: SIGPIPE)
		rm -f r.trace
		l=$((${kw#*/} - ${kw%/*}))
		runs[$i]+="$v "
		walls[$i]+="$wv "
		lost[$i]=$((${lost[$i]:-0} + l))
		[ "$l" -eq 0 ] || lossy[$i]=$((${lossy[$i]:-0} + 1))
		i=$((i + 1))
	done
done
median() { echo "$1" | tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {printf "%.2f", a[int((NR+1)/2)]}'; }
echo "CPU ns a hit under record${RECORD_ARGS:+ $RECORD_ARGS}, $rounds rounds of $hits hits, $(date '+%F %H:%M'), load $(cut -d' ' -f1 /proc/loadavg)"
i=0
for k in "$@"; do
	m=$(median "${runs[$i]}") wm=$(median "${walls[$i]}")
	echo "$k: median $m  [${runs[$i]% }]  wall: median $wm  [${walls[$i]% }]  runs that lost records: ${lossy[$i]:-0} of $rounds, lost: ${lost[$i]}"
	i=$((i + 1))
done
