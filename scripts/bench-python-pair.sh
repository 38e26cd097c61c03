#!/usr/bin/env bash
# Two kprewrite builds on python3.11 `--calls '*'` and the JSON workload, in pairs
# taking turns (issue 49): each build rewrites python3.11, and each round runs the
# rewrite of A then B under its own build's `record`, pinned to BENCH_CPU (default 0);
# what is compared is the program's user + system CPU time. The VM's phase moves a run
# by up to 2x from one minute to the next, and a round's two runs share it: prints the
# medians, the least, and in how many pairs B was lower. More rounds resolve less.
#
# usage: [FLAGS=--calls-hook] [MODE=direct] scripts/bench-python-pair.sh KPREWRITE_A KPREWRITE_B [ROUNDS]
#        (default 16 rounds; FLAGS: more rewrite options, e.g. --calls-hook; MODE=direct:
#        each run directly, into a trace file of the default size that it makes, not
#        pre-populated: the workload's 5.8 million records overflow it, about half lost)
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 KPREWRITE_A KPREWRITE_B [ROUNDS]" >&2; exit 2; }
a=$1 b=$2 rounds=${3:-16}
py=/usr/bin/python3.11
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/bench-pypair.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
gcc -O2 -o cputime "$root/scripts/bench/cputime.c"
# the workload bench-python-floor.sh runs, taken from it (one copy of it)
sed -n "/^cat >work.py <<'EOF'/,/^EOF/p" "$root/scripts/bench-python-floor.sh" | sed '1d;$d' >work.py
"$a" rewrite ${FLAGS:-} --calls '*' --trace none -o calls.A "$py" >/dev/null 2>&1
"$b" rewrite ${FLAGS:-} --calls '*' --trace none -o calls.B "$py" >/dev/null 2>&1
pin=""
if command -v taskset >/dev/null; then pin="taskset -c ${BENCH_CPU:-0}"; fi
for r in $(seq "$rounds"); do
	for v in A B; do
		k=$a
		[ "$v" = B ] && k=$b
		if [ "${MODE:-record}" = direct ]; then
			KPREWRITE_QUIET=1 KPREWRITE_TRACE=r.trace ./cputime $pin "./calls.$v" work.py 2>&1 >/dev/null |
				awk -v v="$v" '/^cpu / {print v, $2 + $3}'
		else
			"$k" record -q -o r.trace -- ./cputime $pin "./calls.$v" work.py 2>&1 >/dev/null |
				awk -v v="$v" '/^cpu / {print v, $2 + $3}'
		fi
		rm -f r.trace
	done
done >runs.txt
echo "python3.11 --calls '*', JSON workload, ${MODE:-record}, $rounds pairs, $(date -u '+%Y-%m-%d %H:%M'): CPU s a run (user + system)"
awk '
	{ t[$1, ++n[$1]] = $2 }
	END {
		for (i = 1; i <= n["A"]; i++) if (t["B", i] < t["A", i]) lower++
		printf "pairs where B is lower: %d of %d\n", lower, n["A"]
	}' runs.txt
for v in A B; do
	awk -v v="$v" '$1 == v {print $2}' runs.txt | sort -g |
		awk -v v="$v" '{x[NR] = $1} END {printf "%s: median %.4f, least %.4f\n", v, x[int((NR + 1) / 2)], x[1]}'
done
