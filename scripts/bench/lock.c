/*
 * Baseline for counting probes: what one exact shared counter increment costs on this
 * CPU, a locked read-modify-write (lock incq, what a count-only detour runs) against the
 * plain one (incq), each in a loop of N. Prints "lock incq: X ns incq: Y ns".
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long counter;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 10000000;
	double best_l = 1e30, best_p = 1e30;
	for (int round = 0; round < 3; round++) {
		double t0 = now();
		for (long i = 0; i < n; i++)
			__asm__ volatile("lock incq %0" : "+m"(counter));
		double t1 = now();
		for (long i = 0; i < n; i++)
			__asm__ volatile("incq %0" : "+m"(counter));
		double t2 = now();
		if ((t1 - t0) / n < best_l)
			best_l = (t1 - t0) / n;
		if ((t2 - t1) / n < best_p)
			best_p = (t2 - t1) / n;
	}
	printf("lock incq: %.2f ns incq: %.2f ns\n", best_l, best_p);
	return 0;
}
