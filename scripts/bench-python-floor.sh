#!/usr/bin/env bash
# python3.11 with every function traced as calls, per record, against the floor of a
# record (issue 49): bench-python-record.sh's JSON workload, the rewritten python under
# `kprewrite record`, its own CPU time (user + system, to the microsecond: scripts/bench/
# cputime.c inside the record; not the recorder's, not the time other work on a shared
# machine held its CPU) above the original's, over the records it wrote (kept + lost:
# each paid for its path); the floor is bench-floor.sh's tsc floor (rdtsc and a 32-byte
# store into a reused 32 MiB ring, above the unprobed loop), measured in the same rounds.
# Variants take turns:
#   calls         rewrite --calls '*' (return events at the rets where exact, else hooked)
#   hook          rewrite --calls-hook --calls '*' (every return address hooked: what
#                 --calls did before 2026-11-29)
#   counter       calls with --clock counter (no clock read: a count for order only;
#                 its floor is the counter floor, a locked add, bench-floor.sh's)
#   uftrace       `uftrace record -P .` of the original (where uftrace is installed,
#                 Debian package uftrace), the program's own CPU time as for the others
#                 (uftrace's writer is its recorder), its records the 16-byte entries
#                 and exits of its data files
# With BASE=/path/to/another/kprewrite, the same two rewritten by it run in the same
# rounds too, under its own `record` (a before/after of the runtime and recorder).
#
# Each round's figures (ns a record, records lost) are printed as it ends, then the
# table of medians, then calls' medians over the rounds split by the host's rate in
# each (bench-floor.sh's split: the round's checks detour, 120 predicted instructions,
# at most 1.2x its tsc floor, or above), then calls over its round's floor round by round
# and how many rounds met the issue's 2.5x (scripts/bench/bound-rounds.awk).
#
# usage: [BASE=kprewrite] scripts/bench-python-floor.sh [ROUNDS]   (default 3)
set -euo pipefail
# every measured program on one CPU (BENCH_CPU, default 0: this VM's second vCPU runs
# ~25% slower, and where the scheduler put a run moved its figure); the recorder is not
# pinned
pin=""
if command -v taskset >/dev/null; then pin="taskset -c ${BENCH_CPU:-0}"; fi
rounds=${1:-3}
py=/usr/bin/python3.11
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/bench-pyfloor.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
(cd "$root" && go build -o "$work/kp" ./cmd/kprewrite)
sed -n "/^cat > b.c <<'EOF'/,/^EOF/p" "$root/scripts/bench-floor.sh" | sed '1d;$d' >b.c
gcc -O2 -o b b.c
gcc -O2 -o cputime "$root/scripts/bench/cputime.c"
cat >work.py <<'EOF'
import json
d = {"k%d" % i: [i, i * 2.5, str(i), {"x": [1, 2, 3], "y": None}] for i in range(200)}
for _ in range(40):
    assert json.loads(json.dumps(d)) == d
EOF
dd if="$py" of=orig bs=2M iflag=fullblock status=none
chmod 755 orig
variants=(calls hook counter)
./kp rewrite --calls '*' --trace none -o calls "$py" >/dev/null 2>&1
./kp rewrite --calls-hook --calls '*' --trace none -o hook "$py" >/dev/null 2>&1
./kp rewrite --clock counter --calls '*' --trace none -o counter "$py" >/dev/null 2>&1
if command -v uftrace >/dev/null; then
	variants+=(uftrace)
else
	echo "(uftrace is not installed: no uftrace row; apt-get install uftrace)" >&2
fi
if [ -n "${BASE:-}" ]; then
	"$BASE" rewrite --calls '*' --trace none -o base-calls "$py" >/dev/null 2>&1
	"$BASE" rewrite --exits --calls '*' --trace none -o base-exits "$py" >/dev/null 2>&1
	variants+=(base-calls base-exits)
fi

cpu() { ./cputime "$@" 2>&1 >/dev/null | awk '/^cpu / {print $2 + $3}'; }
median() { sort -g | awk '{a[NR]=$1} END {printf "%.2f", a[int((NR+1)/2)]}'; }
declare -A per last
floors="" cfloors="" checks="" round=""
for r in $(seq "$rounds"); do
	base=$($pin ./b 10000000)
	fl=$($pin ./b 10000000 tsc)
	floors+="$(echo "$fl $base" | awk '{print $1 - $3}')"$'\n'
	# the probe floor and 120 predicted instructions (bench-floor.sh's checks row): the
	# host's rate for instructions beside rdtsc in this round
	fl=$($pin ./b 10000000 checks)
	checks+="$(echo "$fl $base" | awk '{print $1 - $3}')"$'\n'
	fl=$($pin ./b 10000000 counter)
	cfloors+="$(echo "$fl $base" | awk '{print $1 - $3}')"$'\n'
	o=$(cpu $pin ./orig work.py)
	# each round starts at the next variant: the host's speed drifts within a round, and
	# a variant always run last would meet it differently from one always run first
	for k in "${!variants[@]}"; do
		v=${variants[$(((k + r) % ${#variants[@]}))]}
		rm -rf r.trace u.data
		if [ "$v" = uftrace ]; then
			# uftrace traces the program cputime runs (libmcount follows the exec)
			out=$(uftrace record -P . -d u.data ./cputime $pin ./orig work.py 2>&1 >/dev/null)
			kept=$(cat u.data/[0-9]*.dat | wc -c | awk '{print int($1 / 16)}')
			lost=0
		else
			# the summary (records kept, lost) on stderr, the program's CPU from time;
			# BASE's rewrites under BASE's own record (its runtime may not take this
			# build's trace file: the format's version moves)
			rec=./kp
			[[ $v == base-* ]] && rec=$BASE
			out=$("$rec" record -o r.trace -- ./cputime $pin "./$v" work.py 2>&1 >/dev/null)
			kept=$(echo "$out" | sed -n 's/^kprewrite record: \([0-9]*\) records.*/\1/p')
			lost=$(echo "$out" | sed -n 's/.*, \([0-9]*\) lost.*/\1/p')
		fi
		c=$(echo "$out" | awk '/^cpu / {print $2 + $3}')
		n=$((kept + ${lost:-0}))
		per[$v]+="$(echo "$c $o $n" | awk '{printf "%.2f", ($1 - $2) * 1e9 / $3}')"$'\n'
		last[$v]="$c s, $n records (${lost:-0} lost)"
		round+="$v $(echo "$c $o $n" | awk '{printf "%.2f", ($1 - $2) * 1e9 / $3}') (${lost:-0} lost)  "
		rm -rf r.trace u.data
	done
	echo "round $r: $round"
	round=""
done
echo
f=$(printf '%s' "$floors" | median)
cf=$(printf '%s' "$cfloors" | median)
echo "python3.11 --calls '*', JSON workload, $rounds rounds, $(date -u '+%Y-%m-%d %H:%M'), load $(cut -d' ' -f1 /proc/loadavg); the tsc floor $f ns a record, the counter floor $cf (medians); the original's CPU time $o s (last round)"
echo
echo "| variant | CPU ns a record above the original, median | x floor | last round: CPU time, records |"
echo "| --- | --- | --- | --- |"
for v in "${variants[@]}"; do
	m=$(printf '%s' "${per[$v]}" | median)
	vf=$f
	[ "$v" = counter ] && vf=$cf
	echo "| $v | $m | $(echo "$m $vf" | awk '{printf "%.2f", $1 / $2}') | ${last[$v]} |"
done
echo
# calls by the host's rate in each round (bench-floor.sh's split): quick where the
# 120-instruction detour cost at most 1.2x the round's tsc floor
echo "| rounds (the 120-instruction detour x the tsc floor) | rounds | calls: CPU ns a record, median | x floor |"
echo "| --- | --- | --- | --- |"
paste <(printf '%s' "$floors") <(printf '%s' "$checks") <(printf '%s' "${per[calls]}") |
	awk -f "$root/scripts/bench/split-rounds.awk"
echo
# the issue's bound, round by round
paste <(printf '%s' "$floors") <(printf '%s' "${per[calls]}") |
	awk -v bound=2.5 -v what="calls x its round's tsc floor" -f "$root/scripts/bench/bound-rounds.awk"
