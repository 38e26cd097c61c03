#!/usr/bin/env bash
# What a record costs when many different points are hot, as in python3.11 with every
# function probed (thousands of detours, probe tables and events in turn), against one
# hot point: a C program of 4096 small functions called in a fixed pseudo-random order
# over the first N of them (N = 1, 64, 1024, 4096), each with an entry and a return
# event (`rewrite --exits --calls 'f*'`: two records a call), run under
# `kprewrite record` beside the unprobed program in the same rounds. ns/call is the
# program's own loop time over its calls (first call included, nothing pre-populated).
# With BASE (a git revision) the same rewrite made by that revision's kprewrite runs in
# the same rounds too (its recorder included), for an A/B of a change.
#
#   scripts/bench-points.sh [ROUNDS [BASE]]
#
# Prints Markdown for docs/benchmarks.md: the median and range of ROUNDS rounds
# (default 5).
set -euo pipefail
rounds=${1:-5}
base=${2:-}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/bench-points.XXXXXX")
trap 'git -C "$root" worktree remove --force "$work/base-src" 2>/dev/null || true; rm -rf "$work"' EXIT
cd "$work"
(cd "$root" && go build -o "$work/kp" ./cmd/kprewrite)
variants=(orig kp)
if [ -n "$base" ]; then
	git -C "$root" worktree add -q --detach "$work/base-src" "$base"
	(cd "$work/base-src" && go build -o "$work/kp.base" ./cmd/kprewrite)
	variants+=(base)
fi
calls=2000000
{
	echo '#include <stdio.h>'
	echo '#include <stdlib.h>'
	echo '#include <time.h>'
	for i in $(seq 0 4095); do
		echo "__attribute__((noinline)) long f$i(long a, long b) { return a * $((i + 3)) + (b >> 1); }"
	done
	echo 'typedef long (*fn)(long, long);'
	printf 'static fn tab[4096] = {'
	for i in $(seq 0 4095); do printf 'f%d,' "$i"; done
	echo '};'
	cat <<'EOF'
int main(int argc, char **argv) {
	long n = atol(argv[1]), total = atol(argv[2]), s = 0;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (long k = 0; k < total; k++)
		s += tab[(k * 2654435761u) % n](k, s);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("%.2f\n", ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / total);
	return (int)(s & 0);
}
EOF
} >p.c
gcc -O2 -o p.orig p.c
./kp rewrite --exits --calls 'f*' -o p.kp p.orig >/dev/null 2>&1
if [ -n "$base" ]; then
	./kp.base rewrite --exits --calls 'f*' -o p.base p.orig >/dev/null 2>&1
fi

median() { sort -g | awk '{a[NR]=$1} END {m=a[int((NR+1)/2)]; printf "%.2f (%.2f-%.2f)", m, a[1], a[NR]}'; }
declare -A res kept
hot=(1 64 1024 4096)
for r in $(seq "$rounds"); do
	for n in "${hot[@]}"; do
		for v in "${variants[@]}"; do
			if [ "$v" = orig ]; then
				res["$v $n"]+="$(./p.orig "$n" "$calls")"$'\n'
				continue
			fi
			rm -f r.trace
			tool=./kp
			[ "$v" = base ] && tool=./kp.base
			res["$v $n"]+="$("$tool" record -q -o r.trace -- "./p.$v" "$n" "$calls" 2>/dev/null)"$'\n'
			kept["$v $n"]=$(./kp trace r.trace 2>/dev/null | sed -n '/entries-in-buffer/{s/^.*: //p;q}' || true)
		done
	done
done
rm -f r.trace
head="| hot functions | unprobed ns/call | \`record\` ns/call (2 records) | records kept/written |"
sep="|---|---|---|---|"
if [ -n "$base" ]; then
	head+=" $base \`record\` ns/call | records kept/written |"
	sep+="---|---|"
fi
echo "$head"
echo "$sep"
for n in "${hot[@]}"; do
	line="| $n | $(printf '%s' "${res["orig $n"]}" | median) | $(printf '%s' "${res["kp $n"]}" | median) | ${kept["kp $n"]} |"
	if [ -n "$base" ]; then
		line+=" $(printf '%s' "${res["base $n"]}" | median) | ${kept["base $n"]} |"
	fi
	echo "$line"
done
