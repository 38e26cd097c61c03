/*
 * clock.c - what a timestamp and an atomic add cost on this machine, the floor under a
 * record's and a histogram update's cost: N rdtsc reads (every record's clock) and N
 * locked adds to one cache line (a histogram's hitcount), averaged over the whole loop.
 *
 *   gcc -O2 -o clock scripts/bench/clock.c && ./clock 100000000
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static unsigned long line[8] __attribute__((aligned(64)));

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 100000000;
	double t0 = now();
	for (long i = 0; i < n; i++) {
		unsigned lo, hi;
		__asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
		line[1] += lo ^ hi;
	}
	double t1 = now();
	for (long i = 0; i < n; i++)
		__atomic_fetch_add(&line[0], 1, __ATOMIC_RELAXED);
	double t2 = now();
	for (long i = 0; i < n; i++) {
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		line[2] += (unsigned long)ts.tv_nsec;
	}
	double t3 = now();
	printf("rdtsc %.2f ns, lock add %.2f ns, clock_gettime %.2f ns\n", (t1 - t0) / n, (t2 - t1) / n, (t3 - t2) / n);
	return 0;
}
