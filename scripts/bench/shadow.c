/*
 * shadow.c - how many instructions rdtsc's latency hides on this CPU (issue 49): one
 * loop of 20 million iterations, each, by MODE's bits, an rdtsc (1) and 25 (2), 50 (4)
 * or 100 (8) load-compare-branch pairs that do not depend on it; prints the thread's
 * CPU ns an iteration. Where the pairs hide in rdtsc's shadow, MODE 1|N costs what MODE
 * 1 costs; where they do not, the two costs add (on the Zen 5 of the thirteenth session
 * 100 pairs hid; on the Zen 3 of the eighteenth, ~25).
 *
 *   gcc -O2 -o shadow scripts/bench/shadow.c
 *   for m in 0 1 2 4 8 3 5 9; do taskset -c 0 ./shadow $m; done
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

static volatile long v[64];
#define P1 "cmpq $0,%[m]\n jne 9f\n"
#define P5 P1 P1 P1 P1 P1
#define P25 P5 P5 P5 P5 P5

int main(int argc, char **argv)
{
	long n = 20000000;
	int mode = argc > 1 ? atoi(argv[1]) : 0;
	double t0 = now();
	for (long i = 0; i < n; i++) {
		unsigned lo, hi;
		if (mode & 1)
			__asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
		if (mode & 2)
			__asm__ volatile(P25 "9:\n" ::[m] "m"(v[0]) : "cc");
		if (mode & 4)
			__asm__ volatile(P25 P25 "9:\n" ::[m] "m"(v[0]) : "cc");
		if (mode & 8)
			__asm__ volatile(P25 P25 P25 P25 "9:\n" ::[m] "m"(v[0]) : "cc");
	}
	printf("mode %d: %.2f ns\n", mode, (now() - t0) / n);
	return 0;
}
