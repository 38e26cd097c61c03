#!/usr/bin/env bash
# The floor under the start-up of a program rewritten with --prepare '*': what creating
# its trace file costs with no runtime around it (scripts/bench/tracefile-floor.c makes
# the runtime's system calls for python3.11's new trace file, then execs the program),
# against the same wrapper that only execs, the original (a fresh copy) and the rewrite,
# each run timed from posix_spawn to waitpid (scripts/bench/spawn.c), a new trace file
# each run, the variants taking turns on one CPU (BENCH_CPU, default 0), ROUNDS rounds
# (default 31) of `python3.11 -c pass`. Prints Markdown for docs/benchmarks.md.
#
#   scripts/bench-tracefile-floor.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-31}
KP=/tmp/kprewrite.bench-tracefile-floor
export KPREWRITE_QUIET=1
go build -o "$KP" ./cmd/kprewrite
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gcc -O2 -o "$tmp/spawn" scripts/bench/spawn.c
gcc -O2 -o "$tmp/floor" scripts/bench/tracefile-floor.c
pin=""
if command -v taskset >/dev/null; then pin="taskset -c ${BENCH_CPU:-0}"; fi
dd if=/usr/bin/python3.11 of="$tmp/python3.11" bs=2M iflag=fullblock status=none
chmod 755 "$tmp/python3.11"
"$KP" rewrite --prepare '*' -o "$tmp/prepared" "$tmp/python3.11" >/dev/null 2>&1
out=$($pin "$tmp/spawn" "$rounds" "$tmp/python3.11 -c pass" "$tmp/floor $tmp/python3.11 -c pass" \
	"KPREWRITE_TRACE=$tmp/floor.trace $tmp/floor $tmp/python3.11 -c pass" \
	"KPREWRITE_TRACE=$tmp/new.trace $tmp/prepared -c pass")
row() { # label, line of spawn's output
	awk -v l="$1" '{for (i = 1; i <= NF; i++) {if ($i == "median") m = $(i+1); if ($i == "(quartiles") q = $(i+1); if ($i == "ratio") r = $(i+1)}
		sub(/\)/, "", q); printf "| %s | %s | %s | %s |\n", l, m, q, r}' <<<"$2"
}
echo "python3.11 -c pass, $rounds interleaved rounds${pin:+ ($pin)}, load $(cut -d' ' -f1 /proc/loadavg) at the start, $(date -u '+%Y-%m-%d %H:%M'):"
echo
echo "| variant | median ms | quartiles ms | median / original |"
echo "| --- | --- | --- | --- |"
row "original (a fresh copy)" "$(sed -n 1p <<<"$out")"
row "wrapper: exec only" "$(sed -n 2p <<<"$out")"
row "wrapper: the trace file's system calls, then exec" "$(sed -n 3p <<<"$out")"
row "rewritten --prepare '*', a new trace file" "$(sed -n 4p <<<"$out")"
