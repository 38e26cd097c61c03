#!/usr/bin/env bash
# python3.11 with an entry and a return event on every function, rewritten switched off
# and live (`--calls '*' --disable 'calls/*'`: every site keeps its original bytes),
# against the installed binary and a fresh copy of it (which starts a little faster:
# large page-cache folios), the way a user runs it: each run timed from posix_spawn to
# waitpid by scripts/bench/spawn.c, with a new trace file each run, the variants taking
# turns, ROUNDS rounds (default 21), every run on one CPU (BENCH_CPU, default 0: this VM's
# second vCPU runs ~25% slower and the scheduler's placement of the variants' runs made
# whichever variant landed there look slow): `-c pass` (start-up) and a JSON dumps/loads
# workload. Then the events are switched on in a running python3.11 and off again
# (`kprewrite enable|disable`), and the records it wrote while they were on counted.
# Prints Markdown for docs/benchmarks.md.
#
# With MODE prepare, python3.11 is rewritten with --prepare '*' instead (every function's
# entry and return prepared for events added at run time; nothing armed), and the
# prepared sites' own events, prepared/FUNC and prepared/FUNC__return, are switched.
#
#   scripts/bench-live-python.sh [ROUNDS] [calls|prepare]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-21}
mode=${2:-calls}
case $mode in
calls) rwflags=(--calls '*' --disable 'calls/*') group=calls marker='\[LIVE\]' ;;
prepare) rwflags=(--prepare '*') group=prepared marker='\[PREPARED\]' ;;
*) echo "MODE: calls or prepare" >&2; exit 2 ;;
esac
KP=/tmp/kprewrite.bench-live-python
export KPREWRITE_QUIET=1 # (a new trace each run says so on stderr)
go build -o "$KP" ./cmd/kprewrite
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
py=/usr/bin/python3.11
gcc -O2 -o "$tmp/spawn" scripts/bench/spawn.c
pin=""
if command -v taskset >/dev/null; then pin="taskset -c ${BENCH_CPU:-0}"; fi
mkdir "$tmp/orig" "$tmp/live"
dd if="$py" of="$tmp/orig/python3.11" bs=2M iflag=fullblock status=none
chmod 755 "$tmp/orig/python3.11"
rw=$("$KP" rewrite "${rwflags[@]}" -o "$tmp/live/python3.11" "$py" 2>&1 | grep -o -- '--calls: .*' || true)
live=$("$KP" list "$tmp/live/python3.11" | grep -c "$marker" || true)
cat >"$tmp/work.py" <<'PY'
import json
d = {"k%d" % i: [i, i * 2.5, str(i), {"x": [1, 2, 3], "y": None}] for i in range(200)}
for _ in range(40):
    assert json.loads(json.dumps(d)) == d
PY
row() { # label, line of spawn's output
	awk -v l="$1" '{for (i = 1; i <= NF; i++) {if ($i == "median") m = $(i+1); if ($i == "(quartiles") q = $(i+1); if ($i == "mean") a = $(i+1); if ($i == "ratio") r = $(i+1)}
		sub(/\)/, "", q); printf "| %s | %s | %s | %s | %s |\n", l, m, q, a, r}' <<<"$2"
}
table() { # title, args
	local out
	out=$($pin "$tmp/spawn" "$rounds" "$py $2" "$tmp/orig/python3.11 $2" "KPREWRITE_TRACE=$tmp/new.trace $tmp/live/python3.11 $2")
	echo
	echo "$1, $rounds interleaved rounds${pin:+ ($pin)}, load $(cut -d' ' -f1 /proc/loadavg) at the start:"
	echo
	echo "| variant | median ms | quartiles ms | mean ms | median / installed |"
	echo "| --- | --- | --- | --- | --- |"
	row "installed /usr/bin/python3.11" "$(sed -n 1p <<<"$out")"
	row "fresh copy of it" "$(sed -n 2p <<<"$out")"
	row "live rewrite, every event off (a new trace file each run)" "$(sed -n 3p <<<"$out")"
}
echo "python3.11 rewritten with ${rwflags[*]} ($rw; $live live probes), $(date -u '+%Y-%m-%d %H:%M')"
table "python3.11 -c pass" "-c pass"
table "JSON workload" "$tmp/work.py"

# live: switched on and off while it runs
cat >"$tmp/loop.py" <<'PY'
import json, sys, time
d = {"k%d" % i: [i, str(i)] for i in range(50)}
for line in sys.stdin:
    for _ in range(20):
        json.loads(json.dumps(d))
    print("round", flush=True)
PY
rm -f "$tmp/on.trace"
coproc P { KPREWRITE_TRACE="$tmp/on.trace" "$tmp/live/python3.11" "$tmp/loop.py"; }
step() { echo go >&"${P[1]}"; read -r _ <&"${P[0]}"; }
step
n0=$("$KP" trace "$tmp/on.trace" | grep -vc '^#' || true)
t0=$(date +%s.%N)
"$KP" enable "$tmp/on.trace" "$group/*" >/dev/null
t1=$(date +%s.%N)
sleep 1 # the switch is asynchronous: let the agent arm every site
step
"$KP" disable "$tmp/on.trace" "$group/*" >/dev/null
sleep 1
n1=$("$KP" trace "$tmp/on.trace" | grep -vc '^#' || true)
step
n2=$("$KP" trace "$tmp/on.trace" | grep -vc '^#' || true)
exec {P[1]}>&-
wait
echo
echo "Switched on while it ran: $n0 records before (off), $((n1 - n0)) while on (one round of the loop), $((n2 - n1)) after switching off; \`kprewrite enable '$group/*'\` took $(echo "$t1 - $t0" | bc) s."

# prepare mode: an event with an argument added to a running python3.11 and removed
# (kprewrite probe), its records and hits counted
if [ "$mode" = prepare ]; then
	rm -f "$tmp/add.trace"
	coproc Q { KPREWRITE_TRACE="$tmp/add.trace" "$tmp/live/python3.11" "$tmp/loop.py"; }
	stepq() { echo go >&"${Q[1]}"; read -r _ <&"${Q[0]}"; }
	stepq
	# the function called most while the prepared events were on (python3.11 is
	# stripped: its functions are fn_ADDR, the site is the address)
	hot=$("$KP" profile "$tmp/on.trace" | sort -k2 -nr | awk '$1 !~ /__return$/ {print $1; exit}')
	site=${hot#fn_}
	[ "$site" != "$hot" ] && site=0x$site
	"$KP" probe "$tmp/add.trace" "p:py/hot $site a=%di:u64" "r:py/hot_ret $site \$retval" >/dev/null
	sleep 1
	stepq
	"$KP" probe "$tmp/add.trace" '-:py/*' >/dev/null
	sleep 1
	stepq
	m=$("$KP" trace "$tmp/add.trace" | grep -c ' hot: ' || true)
	r=$("$KP" trace "$tmp/add.trace" | grep -c ' hot_ret: ' || true)
	hits=$("$KP" profile "$tmp/add.trace" | awk '$1 == "hot" {print $2}')
	exec {Q[1]}>&-
	wait
	echo
	echo "Added while it ran (\`kprewrite probe\` at $hot, the function the prepared events saw called most, then \`-:py/*\`): py/hot $m records ($hits hits), py/hot_ret $r records."
fi
