/*
 * hit.c - the program scripts/bench-probes.sh probes: target() and its unprobed twin
 * twin() do the same work; main calls each N times and prints the nanoseconds per
 * call of both and their difference, the cost of one probe hit.
 *
 *   hit N
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

volatile long g = 1;

/* mov g(%rip),%rax opens both: a 7-byte RIP-relative DCR for a jump-optimized probe */
__attribute__((noinline)) long target(long x) { return g + x * 3; }
__attribute__((noinline)) long twin(long x) { return g + x * 3; }

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000000;
	long s = 0;
	double best_t = 1e30, best_w = 1e30;
	for (int round = 0; round < 3; round++) {
		double t0 = now();
		for (long i = 0; i < n; i++)
			s += twin(i);
		double t1 = now();
		for (long i = 0; i < n; i++)
			s += target(i);
		double t2 = now();
		if ((t1 - t0) / n < best_w)
			best_w = (t1 - t0) / n;
		if ((t2 - t1) / n < best_t)
			best_t = (t2 - t1) / n;
	}
	printf("target %.2f twin %.2f hit %.2f sum %ld\n", best_t, best_w, best_t - best_w, s);
	return 0;
}
