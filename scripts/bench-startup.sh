#!/usr/bin/env bash
# python3.11 start-up (-c pass) with a count-only event on every function entry, the
# way a user measures it: against the installed binary (and a fresh copy of it, which
# sits in large page-cache folios and starts faster), each run timed from posix_spawn
# to waitpid by scripts/bench/spawn.c, the variants taking turns, ROUNDS rounds
# (default 41); median, quartiles and mean. The rewrite runs with a new trace file each
# run (a user's first run) and with one trace file every run appends to (the default
# OUT.trace of later runs), on this machine's disk and on tmpfs (/dev/shm).
# Prints Markdown for docs/benchmarks.md.
#
#   scripts/bench-startup.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-41}
KP=/tmp/kprewrite.bench
go build -o "$KP" ./cmd/kprewrite
tmp=$(mktemp -d)
shm=$(mktemp -d /dev/shm/bench-startup.XXXXXX)
trap 'rm -rf "$tmp" "$shm"' EXIT
py=/usr/bin/python3.11
gcc -O2 -o "$tmp/spawn" scripts/bench/spawn.c
go run ./scripts/alldefs "$py" >"$tmp/py.defs"
mkdir "$tmp/co" "$tmp/orig"
"$KP" rewrite --skip-refused --count-only -o "$tmp/co/python3.11" -f "$tmp/py.defs" "$py" 2>/dev/null
dd if="$py" of="$tmp/orig/python3.11" bs=2M iflag=fullblock status=none
chmod 755 "$tmp/orig/python3.11"
probes=$("$KP" list "$tmp/co/python3.11" | wc -l)
int3=$("$KP" list "$tmp/co/python3.11" | grep -vc OPTIMIZED || true)
load=$(cut -d' ' -f1 /proc/loadavg)
run() { "$tmp/spawn" "$rounds" "$py -c pass" "$tmp/orig/python3.11 -c pass" "$@"; }
fresh=$(run "KPREWRITE_TRACE=$tmp/new.trace $tmp/co/python3.11 -c pass" "KPREWRITE_TRACE=$shm/new.trace $tmp/co/python3.11 -c pass")
kept=$(SPAWN_KEEP_TRACE=1 run "KPREWRITE_TRACE=$tmp/kept.trace $tmp/co/python3.11 -c pass")
row() { # label, line of spawn's output
	awk -v l="$1" '{for (i = 1; i <= NF; i++) {if ($i == "median") m = $(i+1); if ($i == "(quartiles") q = $(i+1); if ($i == "mean") a = $(i+1); if ($i == "ratio") r = $(i+1)}
		sub(/\)/, "", q); printf "| %s | %s | %s | %s | %s |\n", l, m, q, a, r}' <<<"$2"
}
echo "python3.11 -c pass, $rounds interleaved rounds of each variant (load $load at the start); $probes count-only probes ($int3 int3), one per function entry."
echo
echo "| variant | median ms | quartiles ms | mean ms | median / installed |"
echo "| --- | --- | --- | --- | --- |"
row "installed /usr/bin/python3.11" "$(sed -n 1p <<<"$fresh")"
row "fresh copy of it" "$(sed -n 2p <<<"$fresh")"
row "count-only rewrite, a new trace file each run (disk)" "$(sed -n 3p <<<"$fresh")"
row "count-only rewrite, a new trace file each run (tmpfs)" "$(sed -n 4p <<<"$fresh")"
echo
echo "Second series (its own baseline):"
echo
echo "| variant | median ms | quartiles ms | mean ms | median / installed |"
echo "| --- | --- | --- | --- | --- |"
row "installed /usr/bin/python3.11" "$(sed -n 1p <<<"$kept")"
row "fresh copy of it" "$(sed -n 2p <<<"$kept")"
row "count-only rewrite, one trace file every run appends to (disk)" "$(sed -n 3p <<<"$kept")"
