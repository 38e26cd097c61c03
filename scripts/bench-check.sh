#!/usr/bin/env bash
# Benchmark of `kprewrite check` (whole-binary analysis of every function entry) against a
# baseline measured in the same run: `objdump -d` of the same binary, the standard linear
# disassembly that any analysis has to beat. Prints a Markdown table for docs/benchmarks.md.
#
#   scripts/bench-check.sh [BINARY...]      (default: git, python3.11, libc.so.6, node)
#
# Wall time is the median of RUNS runs (default 3); RSS is the peak over those runs.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-3}
bins=("$@")
[ ${#bins[@]} -gt 0 ] || bins=(/usr/bin/git /usr/bin/python3.11 /lib/x86_64-linux-gnu/libc.so.6 /usr/bin/node)
go build -o /tmp/kprewrite.bench ./cmd/kprewrite

measure() { # prints "seconds kbytes" for one run of the command
	local tf
	tf=$(mktemp)
	/usr/bin/time -o "$tf" -f "%e %M" "$@" >/dev/null 2>&1
	tail -1 "$tf"
	rm -f "$tf"
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "| binary | size | kprewrite check (s) | peak RSS (MiB) | objdump -d (s) | check / objdump |"
echo "| --- | --- | --- | --- | --- | --- |"
for b in "${bins[@]}"; do
	times=(); rss=0
	for _ in $(seq "$runs"); do
		read -r s k < <(measure /tmp/kprewrite.bench check --summary "$b")
		times+=("$s"); [ "$k" -gt "$rss" ] && rss=$k
	done
	t=$(printf '%s\n' "${times[@]}" | median)
	read -r od _ < <(measure objdump -d --no-show-raw-insn "$b")
	size=$(du -h --apparent-size "$b" | cut -f1)
	ratio=$(awk -v a="$t" -v b="$od" 'BEGIN {printf "%.3f", a/b}')
	printf '| %s | %s | %s | %d | %s | %s |\n' "$(basename "$b")" "$size" "$t" $((rss / 1024)) "$od" "$ratio"
done
