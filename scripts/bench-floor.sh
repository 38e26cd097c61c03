#!/usr/bin/env bash
# The floor under a record, per clock (issue 49): what a hot traced event costs above
# the unprobed loop, against the least a timestamped record can cost.
#
# One thread calls work(a, b) HITS times (bench-record.sh's program) and times its own
# loop (ns per hit): its CPU time (CLOCK_THREAD_CPUTIME_ID, user and system: what the
# program's thread itself spent, page faults included, not the time other work on a
# shared machine took its CPU; the work of another thread, the recorder's under
# `record` or the runtime's thread that readies a direct trace file's pages, is not the
# program thread's and shows in the wall time), and its wall time. Taking turns in each
# round:
#   - the unprobed program;
#   - the floor program of each clock: the same loop, each call followed by the clock's
#     read and a 32-byte store into a reused 32 MiB ring (tsc: rdtsc; mono:
#     clock_gettime(CLOCK_MONOTONIC) through the vDSO; counter: a locked add on one
#     line, no clock);
#   - three more floors of the tsc record: the probe floor (b.c's pfloor_work: the record
#     kept by the least detour a probe can be, flags and registers saved, the thread's
#     place in TLS, no point, no check), checks (the probe floor and 60 compares with
#     their branches, all predicted: as many instructions as kprewrite's path adds to
#     it, which shows what this host charges for them in each round), and keep (scripts/bench/keep.c: the records
#     written to disk by a second thread, the ring growing into new memory while the
#     disk is behind: what keeping every record of the burst costs);
#   - the program rewritten with `p:b/w work a=%di b=%si` and `--clock CLOCK`, under
#     `kprewrite record` (a 32 MiB ring drained into the trace file) and run directly
#     (its own trace file, sized for every record, not pre-populated): every clock's
#     `record` run first, then every clock's direct run (each counted: see below).
# Each cost is the run's ns per hit minus the same round's unprobed loop; a table (CPU
# time, then wall time) gives the median over the rounds, the ratio to the clock's
# floor, direct over `record`, and the records kept/written of the last round (nothing
# lost, nothing torn). Under `record` the recorder's own CPU time is not the program's.
# Then the tsc record's medians over the rounds split by the host's rate in each: quick
# where the checks detour (120 predicted instructions) cost at most 1.2x the round's tsc
# floor, slow above (this 2-vCPU host runs instructions at two rates, rdtsc at one, and
# flips within seconds; scripts/bench-budget.sh).
#
# With BASE=/path/to/another/kprewrite, the program rewritten by it (tsc) runs in the
# same rounds too, under its own `record` and directly (row "tsc-BASE": a before/after).
#
# Then, unless PYTHON=0, scripts/bench-python-floor.sh's python3.11 `--calls '*'` table
# (tsc and counter clocks, uftrace) for the same number of rounds.
#
# usage: [BASE=kprewrite] [KPREWRITE_ROOT=DIR] [PYTHON=0] scripts/bench-floor.sh [ROUNDS [HITS]]
#        (default 3 rounds of 20000000 hits; needs gcc and go; writes HITS*32 bytes of
#        trace at a time in $TMPDIR)
set -euo pipefail
# every measured loop on one CPU (BENCH_CPU, default 0: this VM's second vCPU runs ~25%
# slower, and where the scheduler put a run moved its figure). The program's thread pins
# itself in main, so that the threads the runtime starts before main (the one readying a
# direct trace file's pages) stay free to run on another CPU, as the recorder does under
# `record`; pinning the whole process put that thread on the writer's CPU and charged
# its work to a direct run.
export BENCH_CPU=${BENCH_CPU:-0}
rounds=${1:-3}
hits=${2:-20000000}
clocks=(tsc mono counter)
root=${KPREWRITE_ROOT:-$(cd "$(dirname "$0")/.." && pwd)} # (another checkout: a baseline)
work=$(mktemp -d "${TMPDIR:-/tmp}/bench-floor.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
(cd "$root" && go build -o "$work/kp" ./cmd/kprewrite)

# the program: its loop, and with a clock argument the floor of that clock per call
cat > b.c <<'EOF'
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
__attribute__((noinline)) long work(long a, long b) { __asm__ volatile(""); return a + b; }
struct rec { unsigned long ts, a, b, id; }; /* 32 bytes, as kprewrite's compact record */
#define RING_RECS ((32ul << 20) / sizeof(struct rec))
static struct rec ring[RING_RECS] __attribute__((aligned(64)));
static unsigned long count __attribute__((aligned(64)));
static double now(clockid_t c) { struct timespec t; clock_gettime(c, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
static inline unsigned long tsc(void) { unsigned lo, hi; __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi)); return (unsigned long)hi << 32 | lo; }
static inline unsigned long mono(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000000ul + t.tv_nsec; }
static inline unsigned long counter(void) { return __atomic_add_fetch(&count, 1, __ATOMIC_RELAXED); }
/* The probe floor: the tsc floor's record kept by a detour on work's entry, the least
 * any probe that keeps a record costs beside the clock and the stores: the detour saves
 * the flags and what it uses and gives them back, finds its thread's place in TLS (one
 * load and store, no lookup), fetches the two arguments from their registers and jumps
 * to the function; no point, no check, no block. */
struct rec *ringp = ring;
__thread unsigned long tidx;
long pfloor_work(long a, long b);
_Static_assert(RING_RECS - 1 == 0xfffff, "the probe floor's mask");
__asm__(".text\n.globl pfloor_work\npfloor_work:\n"
	"push %rax\n lahf\n seto %al\n push %rax\n push %rdx\n push %rcx\n"
	"mov %fs:tidx@tpoff, %rcx\n lea 1(%rcx), %rdx\n and $0xfffff, %edx\n mov %rdx, %fs:tidx@tpoff\n"
	"shl $5, %rcx\n add ringp(%rip), %rcx\n"
	"rdtsc\n shl $32, %rdx\n or %rdx, %rax\n"
	"mov %rax, (%rcx)\n mov %rdi, 8(%rcx)\n mov %rsi, 16(%rcx)\n movq $7, 24(%rcx)\n"
	"pop %rcx\n pop %rdx\n pop %rax\n add $0x7f, %al\n sahf\n pop %rax\n jmp work\n");
/* The probe floor with 120 instructions more (pchecks_work): 60 compares of a word that
 * holds 0, each with its branch, after the clock read, as many instructions as
 * kprewrite's path adds to the probe floor (~140 a hot event's record against its ~20),
 * all of them predicted and on one cache line: what this host charges for instructions
 * beside rdtsc. In its quick phases the clock's latency hides them; in its slow ones
 * (runs flip between the two within seconds) they cost 0.05-0.15 ns each (issue 49). */
long pchecks_work(long a, long b);
long pchecks_zero;
__asm__(".text\n.globl pchecks_work\npchecks_work:\n"
	"push %rax\n lahf\n seto %al\n push %rax\n push %rdx\n push %rcx\n"
	"mov %fs:tidx@tpoff, %rcx\n lea 1(%rcx), %rdx\n and $0xfffff, %edx\n mov %rdx, %fs:tidx@tpoff\n"
	"shl $5, %rcx\n add ringp(%rip), %rcx\n"
	"rdtsc\n shl $32, %rdx\n or %rdx, %rax\n"
	".rept 60\n cmpq $0, pchecks_zero(%rip)\n jne pchecks_bad\n .endr\n"
	"mov %rax, (%rcx)\n mov %rdi, 8(%rcx)\n mov %rsi, 16(%rcx)\n movq $7, 24(%rcx)\n"
	"pop %rcx\n pop %rdx\n pop %rax\n add $0x7f, %al\n sahf\n pop %rax\n jmp work\n"
	"pchecks_bad: ud2\n");
#define LOOP(CLOCK) for (long i = 0; i < n; i++) { \
	s += work(1, i); \
	struct rec *r = &ring[i & (RING_RECS - 1)]; \
	r->ts = CLOCK; r->a = 1; r->b = i; r->id = 7; }
int main(int argc, char **argv) {
	long n = atol(argv[1]), s = 0;
	const char *floor = argc > 2 ? argv[2] : "";
	memset(ring, 0, sizeof ring); /* present, as the recorder's ring is */
	if (getenv("BENCH_CPU")) { /* this thread only (the runtime's keep their CPUs) */
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(atoi(getenv("BENCH_CPU")), &set);
		sched_setaffinity(0, sizeof set, &set);
	}
	double c0 = now(CLOCK_THREAD_CPUTIME_ID), t0 = now(CLOCK_MONOTONIC);
	if (!strcmp(floor, "tsc"))
		LOOP(tsc())
	else if (!strcmp(floor, "mono"))
		LOOP(mono())
	else if (!strcmp(floor, "counter"))
		LOOP(counter())
	else if (!strcmp(floor, "probe"))
		for (long i = 0; i < n; i++)
			s += pfloor_work(1, i);
	else if (!strcmp(floor, "checks"))
		for (long i = 0; i < n; i++)
			s += pchecks_work(1, i);
	else
		for (long i = 0; i < n; i++)
			s += work(1, i);
	double c1 = now(CLOCK_THREAD_CPUTIME_ID), t1 = now(CLOCK_MONOTONIC);
	printf("%.2f %.2f\n", (c1 - c0) / n, (t1 - t0) / n);
	return s == 42; /* (s used) */
}
EOF
gcc -O2 -o b b.c
# the floor of a record that is kept: the tsc floor's loop into blocks a second thread
# writes to disk, the ring growing into new memory when the burst outruns the disk
gcc -O2 -pthread -o keep "$root/scripts/bench/keep.c"
for c in "${clocks[@]}"; do
	./kp rewrite --clock "$c" -o "b.$c" -e 'p:b/w work a=%di b=%si' b >/dev/null
done
rows=("${clocks[@]}")
if [ -n "${BASE:-}" ]; then
	"$BASE" rewrite --clock tsc -o b.base -e 'p:b/w work a=%di b=%si' b >/dev/null
	rows+=(base)
fi

median() { sort -g | awk '{a[NR]=$1} END {printf "%.2f", a[int((NR+1)/2)]}'; }
kept() { ./kp trace "$1" 2>/dev/null | sed -n '/entries-in-buffer/{s/^.*: //p;q}' || true; }

declare -A above last
size=$((hits * 33 / 1048576 + 64))M
# add KEY "CPU WALL" adds a run's ns per hit above the round's unprobed loop ($base)
add() {
	above["cpu $1"]+="$(echo "$2 $base" | awk '{print $1 - $3}')"$'\n'
	above["wall $1"]+="$(echo "$2 $base" | awk '{print $2 - $4}')"$'\n'
	round+="$1 $(echo "$2 $base" | awk '{printf "%.2f", $1 - $3}')  "
}
for r in $(seq "$rounds"); do
	round=""
	base=$(./b "$hits")
	above["cpu base"]+="${base% *}"$'\n'
	above["wall base"]+="${base#* }"$'\n'
	for c in "${clocks[@]}"; do
		add "floor $c" "$(./b "$hits" "$c")"
		[ "$c" != tsc ] || add "probe" "$(./b "$hits" probe)"
		[ "$c" != tsc ] || add "checks" "$(./b "$hits" checks)"
		rm -f r.trace
		add "record $c" "$(./kp record -q -o r.trace -- "./b.$c" "$hits")"
		last["record $c"]=$(kept r.trace)
		round+="[${last["record $c"]}]  "
		rm -f r.trace
		# right after the record it is weighed against, so that it, not the record, gets
		# the memory the run before freed (which can come back backed: the cheaper way)
		[ "$c" != tsc ] || add "keep" "$(./keep "$hits" keep.out 2>/dev/null)"
	done
	if [ -n "${BASE:-}" ]; then
		above["cpu floor base"]+="$(printf '%s' "${above["cpu floor tsc"]}" | tail -1)"$'\n'
		above["wall floor base"]+="$(printf '%s' "${above["wall floor tsc"]}" | tail -1)"$'\n'
		add "record base" "$("$BASE" record -q -o r.trace -- ./b.base "$hits")"
		last["record base"]=$(kept r.trace)
		round+="[${last["record base"]}]  "
		rm -f r.trace
	fi
	# The direct runs after the record runs, every one counted, as a user runs them: the
	# first of them writes its file's pages into memory the host may have to back again
	# (a `record` run's trace went to disk with O_DIRECT, not through the page cache).
	# Until 2026-12-02 one direct run before them was not counted: a direct run then took
	# new page-cache memory for every record, 22-52 ns a hit more in the first run here
	# and 110-200 after a few seconds' pause; the runtime now gives back the file's pages
	# behind its writers (rt_tracefile.c, kprw_trace_retire), and a run takes ~16-40 MiB
	# of new memory, not the whole trace.
	for c in "${rows[@]}"; do
		add "direct $c" "$(KPREWRITE_QUIET=1 KPREWRITE_TRACE=d.trace KPREWRITE_TRACE_SIZE=$size "./b.$c" "$hits")"
		last["direct $c"]=$(kept d.trace)
		rm -f d.trace
	done
	echo "round $r (CPU ns a hit above the loop): $round"
done
echo

for m in cpu wall; do
	echo "$m time: the unprobed loop $(printf '%s' "${above["$m base"]}" | median) ns/hit (median of $rounds rounds of $hits hits); above it:"
	echo
	echo "| clock | floor ns/hit | \`record\` ns/hit | x floor | kept/written | direct ns/hit | x floor | direct / \`record\` | kept/written |"
	echo "|---|---|---|---|---|---|---|---|---|"
	for c in "${rows[@]}"; do
		f=$(printf '%s' "${above["$m floor $c"]}" | median)
		rec=$(printf '%s' "${above["$m record $c"]}" | median)
		dir=$(printf '%s' "${above["$m direct $c"]}" | median)
		echo "$c $f $rec $dir ${last["record $c"]} ${last["direct $c"]}" |
			sed 's/^base /tsc-BASE /' | awk '{printf "| %s | %.2f | %.2f | %.2f | %s | %.2f | %.2f | %.2f | %s |\n", $1, $2, $3, $3 / $2, $5, $4, $4 / $2, $4 / $3, $6}'
	done
	echo
	rec=$(printf '%s' "${above["$m record tsc"]}" | median)
	f=$(printf '%s' "${above["$m floor tsc"]}" | median)
	echo "| the tsc floor's record | ns/hit | x the tsc floor | tsc under \`record\` x it |"
	echo "|---|---|---|---|"
	for k in probe checks keep; do
		case $k in
		probe) label="kept by a minimal detour (the probe floor)" ;;
		checks) label="the probe floor and 120 predicted instructions (the host's price for a path as long as kprewrite's)" ;;
		keep) label="written to disk, the ring growing (keep.c)" ;;
		esac
		echo "$(printf '%s' "${above["$m $k"]}" | median) $f $rec" |
			awk -v l="$label" '{printf "| %s | %.2f | %.2f | %.2f |\n", l, $1, $1 / $2, $3 / $1}'
	done
	echo
done

# The rounds by the host's rate: a round whose 120-instruction detour (checks) cost at
# most 1.2x its tsc floor met the host running instructions at its quick rate (in its
# slow minutes that detour costs 1.5-2.5x; scripts/bench-budget.sh). The tsc record's
# medians over each kind of round, CPU time, against the same rounds' floors.
echo "| rounds (the 120-instruction detour x the tsc floor) | rounds | \`record\` ns/hit | x floor | direct ns/hit | direct / \`record\` |"
echo "|---|---|---|---|---|---|"
paste <(printf '%s' "${above["cpu floor tsc"]}") <(printf '%s' "${above["cpu checks"]}") \
	<(printf '%s' "${above["cpu record tsc"]}") <(printf '%s' "${above["cpu direct tsc"]}") |
	awk -f "$root/scripts/bench/split-rounds.awk"
echo
# the issue's two bounds for the hot event, round by round (CPU time)
paste <(printf '%s' "${above["cpu floor tsc"]}") <(printf '%s' "${above["cpu record tsc"]}") |
	awk -v bound=1.5 -v what="tsc under \`record\` x its round's floor" -f "$root/scripts/bench/bound-rounds.awk"
paste <(printf '%s' "${above["cpu record tsc"]}") <(printf '%s' "${above["cpu direct tsc"]}") |
	awk -v bound=1.2 -v what="tsc directly x its round's \`record\`" -f "$root/scripts/bench/bound-rounds.awk"
echo

# python3.11 --calls '*' (and --clock counter, and uftrace) in the same script, its rounds
# after these (PYTHON=0: the hot event alone)
if [ "${PYTHON:-1}" != 0 ]; then
	echo
	"$root/scripts/bench-python-floor.sh" "$rounds"
fi
