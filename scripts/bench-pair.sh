#!/usr/bin/env bash
# A hot event's record cost, this checkout against another build, in pairs (issue 49):
# on a shared VM the same binary moves by up to 40% between batches minutes apart, so a
# before/after is read only from runs that take turns. Each round runs the unprobed loop
# (scripts/bench/direct.c, `work(1, i)` HITS times), then for each build its rewrite
# with `p:b/w work a=%di b=%si` under `record` and directly (its own trace file, not
# pre-populated); the loop's thread pins itself to BENCH_CPU (default 0), the runtime's
# threads and the recorder run anywhere. Prints each run's CPU ns a hit above the
# round's unprobed loop and the medians.
#
# usage: scripts/bench-pair.sh OTHER_KPREWRITE [ROUNDS [HITS]]   (default 9 rounds of 20000000)
set -euo pipefail
other=$1
rounds=${2:-9}
hits=${3:-20000000}
export BENCH_CPU=${BENCH_CPU:-0}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/bench-pair.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
(cd "$root" && go build -o "$work/kp.this" ./cmd/kprewrite)
cp "$other" kp.other
gcc -O2 -o d "$root/scripts/bench/direct.c" -lpthread
for b in this other; do
	"./kp.$b" rewrite -o "d.$b" -e 'p:b/w work a=%di b=%si' d >/dev/null
done
size=$((hits * 33 / 1048576 + 64))M
declare -A runs
for r in $(seq "$rounds"); do
	base=$(./d "$hits" none | cut -d' ' -f1)
	for b in this other; do
		rec=$("./kp.$b" record -q -o r.trace -- "./d.$b" "$hits" none | cut -d' ' -f1)
		rm -f r.trace
		dir=$(KPREWRITE_QUIET=1 KPREWRITE_TRACE=t.trace KPREWRITE_TRACE_SIZE=$size "./d.$b" "$hits" none | cut -d' ' -f1)
		rm -f t.trace
		runs["$b record"]+="$(echo "$rec $base" | awk '{printf "%.2f", $1 - $2}') "
		runs["$b direct"]+="$(echo "$dir $base" | awk '{printf "%.2f", $1 - $2}') "
	done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {printf "%.2f", a[int((NR+1)/2)]}'; }
echo "CPU ns a hit above the unprobed loop, $rounds rounds of $hits hits, $(date '+%F %H:%M'), load $(cut -d' ' -f1 /proc/loadavg)"
echo
echo "| build | \`record\` | direct | direct / \`record\` |"
echo "| --- | --- | --- | --- |"
for b in this other; do
	rec=$(echo "${runs["$b record"]}" | median)
	dir=$(echo "${runs["$b direct"]}" | median)
	echo "$b $rec $dir" | awk '{printf "| %s | %.2f | %.2f | %.2f |\n", $1, $2, $3, $3 / $2}'
done
echo
for k in "this record" "this direct" "other record" "other direct"; do echo "$k: ${runs[$k]}"; done
