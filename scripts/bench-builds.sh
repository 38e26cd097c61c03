#!/usr/bin/env bash
# A hot event's record cost for several kprewrite builds taking turns (issue 49): each
# round runs the unprobed loop (scripts/bench/direct.c, `work(1, i)` HITS times), then
# each build's rewrite of it with `p:b/w work a=%di b=%si`, under `record` or directly
# (its own trace file, not pre-populated), or directly into a file too small for them
# (full: KPREWRITE_TRACE_SIZE=4K, every record past the first block lost, counted);
# the loop's thread pins itself to BENCH_CPU
# (default 0). Prints each build's CPU ns a hit above the round's unprobed loop: the
# median and every round. For runtime experiments: build variants of the runtime
# (`go generate ./runtime && go build -o /tmp/kp-X ./cmd/kprewrite`) and compare them
# here; scripts/bench-pair.sh is the two-build form with both modes.
#
# With PAUSE=S, each build's run comes after S seconds of nothing (a user's run, not one
# right after another: on a VM the guest hands its free memory back to the host within
# seconds, and a run that needs new memory then pays for it), and the wall time's
# medians follow the CPU time's.
#
# usage: [PAUSE=S] scripts/bench-builds.sh ROUNDS HITS record|direct|full KPREWRITE...
set -euo pipefail
[ $# -ge 4 ] || { echo "usage: $0 ROUNDS HITS record|direct|full KPREWRITE..." >&2; exit 2; }
rounds=$1 hits=$2 mode=$3
shift 3
export BENCH_CPU=${BENCH_CPU:-0}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/bench-builds.XXXXXX")
trap 'rm -rf "$work"' EXIT
gcc -O2 -o "$work/d" "$root/scripts/bench/direct.c" -lpthread
i=0
for k in "$@"; do
	"$k" rewrite -o "$work/d.$i" -e 'p:b/w work a=%di b=%si' "$work/d" >/dev/null
	i=$((i + 1))
done
cd "$work"
size=$((hits * 33 / 1048576 + 64))M
[ "$mode" = full ] && size=4K
declare -A runs walls
for r in $(seq "$rounds"); do
	basew=$(./d "$hits" none)
	base=${basew%% *} basew=${basew#* }
	i=0
	for k in "$@"; do
		[ -n "${PAUSE:-}" ] && sleep "$PAUSE"
		if [ "$mode" = record ]; then
			v=$("$k" record -q -o r.trace -- "./d.$i" "$hits" none)
			rm -f r.trace
		else
			v=$(KPREWRITE_QUIET=1 KPREWRITE_TRACE=t.trace KPREWRITE_TRACE_SIZE=$size "./d.$i" "$hits" none)
			rm -f t.trace
		fi
		runs[$i]+="$(echo "$v $base" | awk '{printf "%.2f", $1 - $3}') "
		walls[$i]+="$(echo "$v $basew" | awk '{printf "%.2f", $2 - $3}') "
		i=$((i + 1))
	done
done
echo "CPU ns a hit above the unprobed loop, $mode, $rounds rounds of $hits hits, $(date '+%F %H:%M'), load $(cut -d' ' -f1 /proc/loadavg)"
median() { echo "$1" | tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {printf "%.2f", a[int((NR+1)/2)]}'; }
i=0
for k in "$@"; do
	echo "$k: $(median "${runs[$i]}")  [${runs[$i]% }]"
	[ -z "${PAUSE:-}" ] || echo "$k: wall $(median "${walls[$i]}")  [${walls[$i]% }]"
	i=$((i + 1))
done
