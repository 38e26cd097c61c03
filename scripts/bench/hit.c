/*
 * hit.c - the program scripts/bench-probes.sh and bench-filter.sh probe: target() and
 * its unprobed twin twin() do the same work; main calls each N times a round and prints
 * the nanoseconds per call of both and their difference, the cost of one probe hit.
 *
 *   hit N            best of 3 rounds: "target T twin W hit H sum S"
 *   hit N ROUNDS     averaged over every call of every round (the trace file's pages
 *                    allocated as a user's run allocates them), and the best round:
 *                    "avg H best H bare W sum S"
 *   hit N ROUNDS D   the same with target() called D frames deep (target, the loop's
 *                    function, D-3 recursive calls, main), for stacktrace triggers
 *
 * -DHIT_LIB builds target() and twin() alone (a shared library), -DHIT_EXTERN the
 * program that calls them there.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#ifdef HIT_EXTERN
/* target and twin in a shared library (gcc -DHIT_LIB -shared), called through the PLT:
 * scripts/bench-library.sh */
long target(long x);
long twin(long x);
#else
volatile long g = 1;

/* mov g(%rip),%rax opens both: a 7-byte RIP-relative DCR for a jump-optimized probe
 * (in a library, mov g@GOTPCREL(%rip),%rax; mov (%rax),%rax) */
__attribute__((noinline)) long target(long x) { return g + x * 3; }
__attribute__((noinline)) long twin(long x) { return g + x * 3; }
#endif
#ifndef HIT_LIB

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static long n, s;
static int rounds;
static double best_t = 1e30, best_w = 1e30, best_hit = 1e30, sum_t = 0, sum_w = 0;

__attribute__((noinline)) static void run(void)
{
	for (int round = 0; round < rounds; round++) {
		double t0 = now();
		for (long i = 0; i < n; i++)
			s += twin(i);
		double t1 = now();
		for (long i = 0; i < n; i++)
			s += target(i);
		double t2 = now();
		sum_w += t1 - t0;
		sum_t += t2 - t1;
		if ((t1 - t0) / n < best_w)
			best_w = (t1 - t0) / n;
		if ((t2 - t1) / n < best_t)
			best_t = (t2 - t1) / n;
		if ((t2 - t1 - (t1 - t0)) / n < best_hit)
			best_hit = (t2 - t1 - (t1 - t0)) / n;
	}
}

__attribute__((noinline)) static void descend(int d)
{
	if (d <= 0)
		run();
	else
		descend(d - 1);
	__asm__ volatile("" ::: "memory"); /* not a tail call: a frame each */
}

int main(int argc, char **argv)
{
	n = argc > 1 ? atol(argv[1]) : 1000000;
	rounds = argc > 2 ? atoi(argv[2]) : 3;
	int depth = argc > 3 ? atoi(argv[3]) : 0;
	if (depth > 3)
		descend(depth - 4); /* D-3 frames of descend */
	else
		run();
	if (argc > 2)
		printf("avg %.2f best %.2f bare %.2f sum %ld\n", (sum_t - sum_w) / ((double)n * rounds), best_hit,
		       sum_w / ((double)n * rounds), s);
	else
		printf("target %.2f twin %.2f hit %.2f sum %ld\n", best_t, best_w, best_t - best_w, s);
	return 0;
}
#endif
