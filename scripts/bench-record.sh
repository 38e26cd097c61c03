#!/usr/bin/env bash
# Benchmark of recording (issue 15): the cost per hit of a traced event with two u64
# fetchargs (`p:b/w work a=%di b=%si`), averaged over the whole timed loop by the program
# itself (the first hit included, nothing pre-populated, files on this machine's disk),
# beside the unprobed program in the same run:
#   - under `kprewrite record` (the ring drained into the trace file as the program runs),
#   - run directly (the program's own trace file, which grows as it writes),
# for 100,000 and 100,000,000 hits on one thread, and 4 threads of 25,000,000 hits.
# Each configuration runs ROUNDS times, interleaved; the table gives the median and the
# range, and records kept / lost. Prints a Markdown table for docs/benchmarks.md.
#
# usage: scripts/bench-record.sh [ROUNDS]   (default 3; needs gcc and go)
set -euo pipefail
rounds=${1:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/bench-record.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
(cd "$root" && go build -o "$work/kp" ./cmd/kprewrite)
cat > b.c <<'EOF'
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
__attribute__((noinline)) long work(long a, long b) { __asm__ volatile(""); return a + b; }
static long n;
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
static void *run(void *arg) {
	long s = 0;
	for (long i = 0; i < n; i++)
		s += work((long)arg, i);
	return (void *)s;
}
int main(int argc, char **argv) {
	n = atol(argv[1]);
	int threads = atoi(argv[2]);
	double t0 = now();
	if (threads == 0) {
		run(0);
		threads = 1;
	} else {
		pthread_t th[64];
		for (long t = 0; t < threads; t++)
			pthread_create(&th[t], NULL, run, (void *)t);
		for (int t = 0; t < threads; t++)
			pthread_join(th[t], NULL);
	}
	/* ns per hit on a thread: the loop's time over each thread's hits */
	printf("%.2f\n", (now() - t0) / n);
	return 0;
}
EOF
gcc -O2 -pthread -o b b.c
./kp rewrite -o b.kp -e 'p:b/w work a=%di b=%si' b >/dev/null

median() { sort -g | awk '{a[NR]=$1} END {m=a[int((NR+1)/2)]; printf "%.2f (%.2f-%.2f)", m, a[1], a[NR]}'; }

declare -A res kept
configs=("100000 0" "100000000 0" "25000000 4")
for r in $(seq "$rounds"); do
	for c in "${configs[@]}"; do
		set -- $c
		res["base $c"]+="$(./b "$1" "$2")"$'\n'
		rm -f r.trace d.trace
		res["record $c"]+="$(./kp record -q -o r.trace -- ./b.kp "$1" "$2")"$'\n'
		kept["record $c"]="$(./kp trace r.trace 2>/dev/null | sed -n '/entries-in-buffer/{s/^.*: //p;q}' || true)"
		rm -f r.trace
		# direct: a trace file large enough for every record (32 bytes each, 64 KiB blocks)
		size=$(( ($1 * ($2 > 0 ? $2 : 1) * 33 / 1048576 + 64) ))M
		res["direct $c"]+="$(KPREWRITE_TRACE=d.trace KPREWRITE_TRACE_SIZE=$size ./b.kp "$1" "$2")"$'\n'
		kept["direct $c"]="$(./kp trace d.trace 2>/dev/null | sed -n '/entries-in-buffer/{s/^.*: //p;q}' || true)"
		rm -f d.trace
	done
done
echo "| hits | threads | unprobed ns/hit | \`record\` ns/hit | records kept/written | direct ns/hit | records kept/written |"
echo "|---|---|---|---|---|---|---|"
for c in "${configs[@]}"; do
	set -- $c
	printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$1" "$(( $2 > 0 ? $2 : 1 ))" \
		"$(printf '%s' "${res["base $c"]}" | median)" \
		"$(printf '%s' "${res["record $c"]}" | median)" "${kept["record $c"]}" \
		"$(printf '%s' "${res["direct $c"]}" | median)" "${kept["direct $c"]}"
done
