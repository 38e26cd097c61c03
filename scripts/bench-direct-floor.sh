#!/usr/bin/env bash
# The floor under a direct run's record (issue 49, item 3): a program run directly
# writes its records into a new trace file, whose pages the kernel must allocate and
# zero (a thread readies them ahead of the writer, src/rt_ahead.c); under `kprewrite
# record` they go into a reused ring. This script measures both floors
# (scripts/bench/direct.c: rdtsc and a 32-byte store per call, into a reused 32 MiB
# ring, or into a new file's mapping readied ahead by a second thread as the runtime
# does) beside the program rewritten with `p:b/w work a=%di b=%si` under `record` and
# run directly, taking turns in each round; costs are ns per call above the round's
# unprobed loop, the calling thread's CPU time and the wall time, medians over the rounds.
#
# usage: [KPREWRITE_ROOT=DIR] scripts/bench-direct-floor.sh [ROUNDS [HITS]]
#        (default 3 rounds of 20000000; writes HITS*32 bytes at a time in $TMPDIR)
set -euo pipefail
# the measured loops on one CPU (BENCH_CPU, default 0: this VM's vCPUs differ by ~25%),
# each pinned by its own thread in main: the threads that ready pages (the floor's, the
# runtime's) and the recorder run anywhere
export BENCH_CPU=${BENCH_CPU:-0}
rounds=${1:-3}
hits=${2:-20000000}
root=${KPREWRITE_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
work=$(mktemp -d "${TMPDIR:-/tmp}/bench-direct.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
(cd "$root" && go build -o "$work/kp" ./cmd/kprewrite)
gcc -O2 -o d "$root/scripts/bench/direct.c" -lpthread
./kp rewrite -o d.kp -e 'p:b/w work a=%di b=%si' d >/dev/null
size=$((hits * 33 / 1048576 + 64))M

median() { sort -g | awk '{a[NR]=$1} END {printf "%.2f", a[int((NR+1)/2)]}'; }
declare -A above
add() { above["cpu $1"]+="$(echo "$2 $base" | awk '{print $1 - $3}')"$'\n'; above["wall $1"]+="$(echo "$2 $base" | awk '{print $2 - $4}')"$'\n'; }
for r in $(seq "$rounds"); do
	base=$(./d "$hits" none)
	add "ring floor" "$(./d "$hits" ring)"
	add "file floor" "$(./d "$hits" file f.bin)"
	rm -f f.bin
	add "record" "$(./kp record -q -o r.trace -- ./d.kp "$hits" none)"
	rm -f r.trace
	add "direct" "$(KPREWRITE_QUIET=1 KPREWRITE_TRACE=d.trace KPREWRITE_TRACE_SIZE=$size ./d.kp "$hits" none)"
	rm -f d.trace
done
echo "ns per call above the unprobed loop, median of $rounds rounds of $hits calls:"
echo
echo "| time | ring floor | file floor | file / ring | \`record\` | direct | direct / \`record\` | direct / file floor |"
echo "|---|---|---|---|---|---|---|---|"
for m in cpu wall; do
	v=()
	for k in "ring floor" "file floor" record direct; do
		v+=("$(printf '%s' "${above["$m $k"]}" | median)")
	done
	echo "$m ${v[*]}" | awk '{printf "| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", $1, $2, $3, $3 / $2, $4, $5, $5 / $4, $5 / $3}'
done
