#!/usr/bin/env bash
# A hot event's record cost when several threads hit it at once, for several kprewrite
# builds taking turns (issue 49): scripts/bench/threads.c's T threads (default: the
# CPUs) call target(i) N times each, rewritten by each build with `p:b/t target x=%di`
# (a record written by optprobe.S's fast path), run as a user runs it: under
# `kprewrite record` (MODE=record, the default: the recorder drains a 32 MiB ring into
# the trace file) or directly (MODE=direct: its own trace file, not pre-populated). A
# cell is the hit's cost (wall time per call, less the unprobed twin's in the same
# run). Prints each build's median over the rounds, every round, and in how many
# rounds each build after the first was lower than the first.
#
# usage: [T=threads] [MODE=record|direct] scripts/bench-threads-builds.sh ROUNDS N KPREWRITE...
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 ROUNDS N KPREWRITE..." >&2; exit 2; }
rounds=$1 n=$2
shift 2
nt=${T:-$(nproc)}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/bench-threads-builds.XXXXXX")
trap 'rm -rf "$work"' EXIT
gcc -O2 -pthread -o "$work/threads" "$root/scripts/bench/threads.c"
builds=("$@")
i=0
for k in "$@"; do
	"$k" rewrite -o "$work/t.$i" -e 'p:b/t target x=%di' "$work/threads" >/dev/null
	i=$((i + 1))
done
cd "$work"
size=$((n * nt * 33 / 1048576 + 64))M
declare -A runs
for _ in $(seq "$rounds"); do
	i=0
	for _ in "$@"; do
		# (a command substitution: the run, the recorder's included, ends before the rm)
		if [ "${MODE:-record}" = record ]; then
			out=$("${builds[$i]}" record -q -o t.trace -- "./t.$i" "$n" "$nt")
		else
			out=$(KPREWRITE_QUIET=1 KPREWRITE_TRACE=t.trace KPREWRITE_TRACE_SIZE=$size "./t.$i" "$n" "$nt")
		fi
		h=${out##* } # "target X twin W hit H"
		rm -f t.trace
		runs[$i]+="$h "
		i=$((i + 1))
	done
done
echo "ns a hit, $nt threads at once, ${MODE:-record}, $rounds rounds of $n calls a thread, $(date '+%F %H:%M'), load $(cut -d' ' -f1 /proc/loadavg)"
i=0
for k in "$@"; do
	m=$(echo "${runs[$i]}" | tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {printf "%.2f", a[int((NR+1)/2)]}')
	lower=""
	if [ "$i" -gt 0 ]; then
		lower=$(paste <(echo "${runs[0]}" | tr ' ' '\n' | grep .) <(echo "${runs[$i]}" | tr ' ' '\n' | grep .) |
			awk '$2 < $1 {c++} END {printf " (lower than the first in %d of %d)", c, NR}')
	fi
	echo "$k: $m$lower  [${runs[$i]% }]"
	i=$((i + 1))
done
