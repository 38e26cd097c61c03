#!/usr/bin/env bash
# python3.11 with an entry and a return event on every function (records, not counts)
# on a JSON dumps/loads workload, the way a user runs it: the whole run's wall time,
# a new trace file each run (not pre-populated), beside the original in the same
# rounds (the variants take turns; median and range of RUNS rounds, default 5).
# Prints Markdown for docs/benchmarks.md.
#
#   scripts/bench-python-record.sh [RUNS]
#
# Variants:
#   original      a fresh copy of /usr/bin/python3.11 (written in 2 MiB pieces, as
#                 kprewrite writes its output: see bench-whole.sh)
#   direct        the rewrite (--calls '*') run on its own, its trace file sized to
#                 hold every record (KPREWRITE_TRACE_SIZE)
#   record        the rewrite under `kprewrite record` (32 MiB ring drained to disk)
#   direct-exits, record-exits
#                 the same with the rewrite made with --exits: return events recorded
#                 at their functions' rets (tail calls and the rest hook as before)
#   uftrace       `uftrace record -P . --no-libcall` of the original, where uftrace is
#                 installed (Debian package uftrace): its dynamic patching of a binary
#                 built without -pg, which reaches only part of the functions
# The trace files go to TMPDIR (this machine's disk unless it is a tmpfs).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
KP=/tmp/kprewrite.bench
go build -o "$KP" ./cmd/kprewrite
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
py=/usr/bin/python3.11

mkdir "$tmp/orig"
dd if="$py" of="$tmp/orig/python3.11" bs=2M iflag=fullblock status=none
chmod 755 "$tmp/orig/python3.11"
rw=$("$KP" rewrite --calls '*' --trace none -o "$tmp/python3.11" "$py" 2>&1 | grep -o -- '--calls: .*' || true)
mkdir "$tmp/x"
"$KP" rewrite --exits --calls '*' --trace none -o "$tmp/x/python3.11" "$py" >/dev/null 2>&1
exits=$("$KP" list "$tmp/x/python3.11" | grep -c '^[0-9a-f]*  r .*\[EXIT\]' || true)
cat >"$tmp/work.py" <<'EOF'
import json
d = {"k%d" % i: [i, i * 2.5, str(i), {"x": [1, 2, 3], "y": None}] for i in range(200)}
for _ in range(40):
    assert json.loads(json.dumps(d)) == d
EOF
have_uftrace=0
command -v uftrace >/dev/null && have_uftrace=1

# one timed run: prints seconds
timed() {
	local s e
	s=$(date +%s.%N)
	"$@" >/dev/null 2>&1
	e=$(date +%s.%N)
	awk -v s="$s" -v e="$e" 'BEGIN { printf "%.4f\n", e - s }'
}
declare -A t
records_direct="" records_record=""
for r in $(seq "$runs"); do
	t[orig]+="$(timed "$tmp/orig/python3.11" "$tmp/work.py") "
	rm -f "$tmp/d.trace"
	t[direct]+="$(timed env KPREWRITE_TRACE="$tmp/d.trace" KPREWRITE_TRACE_SIZE=2G "$tmp/python3.11" "$tmp/work.py") "
	records_direct=$("$KP" profile "$tmp/d.trace" | awk '{h += $2; m += $3} END {print h "/" m}')
	rm -f "$tmp/d.trace"
	rm -f "$tmp/r.trace"
	t[record]+="$(timed "$KP" record -q -o "$tmp/r.trace" -- "$tmp/python3.11" "$tmp/work.py") "
	records_record=$("$KP" trace --no-header "$tmp/r.trace" | wc -l)
	lost_record=$("$KP" trace "$tmp/r.trace" | grep -o 'lost: [0-9]*' | head -1 || true)
	rm -f "$tmp/r.trace"
	t[direct-exits]+="$(timed env KPREWRITE_TRACE="$tmp/d.trace" KPREWRITE_TRACE_SIZE=2G "$tmp/x/python3.11" "$tmp/work.py") "
	records_dx=$("$KP" profile "$tmp/d.trace" | awk '{h += $2; m += $3} END {print h "/" m}')
	rm -f "$tmp/d.trace"
	t[record-exits]+="$(timed "$KP" record -q -o "$tmp/r.trace" -- "$tmp/x/python3.11" "$tmp/work.py") "
	records_rx=$("$KP" trace --no-header "$tmp/r.trace" | wc -l)
	rm -f "$tmp/r.trace"
	if [ "$have_uftrace" = 1 ]; then
		rm -rf "$tmp/uft"
		t[uftrace]+="$(timed uftrace record -d "$tmp/uft" -P . --no-libcall "$tmp/orig/python3.11" "$tmp/work.py") "
		uft_size=$(du -sh "$tmp/uft" | cut -f1)
		rm -rf "$tmp/uft"
	fi
done
med() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR] = $1} END {m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2; printf "%.3f (%.3f-%.3f)", m, a[1], a[NR]}'; }
medv() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
o=$(echo "${t[orig]}" | medv)
echo "python3.11 --calls '*' ($rw; with --exits $exits return points at exits), JSON workload, $runs rounds, $(date -u '+%Y-%m-%d %H:%M'), load $(cut -d' ' -f1 /proc/loadavg)"
echo
echo "| variant | wall s, median (range) | ratio | records |"
echo "| --- | --- | --- | --- |"
echo "| original | $(echo "${t[orig]}" | med) | 1 | |"
for v in direct record direct-exits record-exits uftrace; do
	[ -n "${t[$v]:-}" ] || continue
	m=$(echo "${t[$v]}" | medv)
	case $v in
	direct) rec="hits/missed $records_direct" ;;
	record) rec="$records_record records${lost_record:+, $lost_record}" ;;
	direct-exits) rec="hits/missed $records_dx" ;;
	record-exits) rec="$records_rx records" ;;
	uftrace) rec="uftrace data ${uft_size:-?}" ;;
	esac
	echo "| $v | $(echo "${t[$v]}" | med) | $(awk -v a="$m" -v b="$o" 'BEGIN { printf "%.2f", a / b }') | $rec |"
done
