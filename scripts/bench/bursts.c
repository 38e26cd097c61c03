/*
 * bursts.c - work(a, b) HITS times in each of BURSTS bursts, GAP ms apart; prints each
 * burst's CPU ns a hit (the calling thread's), on one line. For the runtime's kprw-ahead
 * thread, which ends 50 ms after the last request: with a gap of 80 ms each burst of a
 * rewritten run directly starts it again (docs/benchmarks.md, "The readying thread
 * ends between bursts").
 *
 *   gcc -O2 -o bursts scripts/bench/bursts.c && ./bursts 200000 12 80
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

__attribute__((noinline)) long work(long a, long b)
{
	__asm__ volatile("");
	return a + b;
}

static double cpu(void)
{
	struct timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 200000, bursts = argc > 2 ? atol(argv[2]) : 12;
	long gap = argc > 3 ? atol(argv[3]) : 80, s = 0;
	for (long b = 0; b < bursts; b++) {
		double c0 = cpu();
		for (long i = 0; i < n; i++)
			s += work(i, 1);
		printf("%.1f ", (cpu() - c0) / n);
		usleep(gap * 1000);
	}
	printf("\n");
	return s == 1;
}
