/*
 * chain.c - does work after a TSC read wait for it? One thread runs a loop of N
 * iterations, each LEN dependent loads (a pointer chase through 64 pointers, all in L1)
 * and, with TSC 1, an rdtsc whose value is stored into a 8 MiB ring; prints the thread's
 * CPU ns per iteration (on CPU 0). If rdtsc serialized the loads around it, the costs
 * would add; if it overlaps them, an iteration costs the larger of the two.
 *
 *   gcc -O2 -o chain scripts/bench/chain.c
 *   for len in 0 5 10 20; do ./chain 20000000 $len 0; ./chain 20000000 $len 1; done
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static void *ptrs[64];
static unsigned long ring[1 << 20];
static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}
int main(int argc, char **argv)
{
	if (argc < 4)
		return 2;
	long n = atol(argv[1]);
	int len = atoi(argv[2]), tsc = atoi(argv[3]);
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(0, &set);
	sched_setaffinity(0, sizeof set, &set);
	for (int i = 0; i < 64; i++)
		ptrs[i] = &ptrs[(i + 1) % 64];
	void **p = ptrs;
	unsigned long s = 0;
	double c0 = now();
	for (long i = 0; i < n; i++) {
		for (int k = 0; k < len; k++)
			p = (void **)*p;
		__asm__ volatile("" : "+r"(p));
		if (tsc) {
			unsigned lo, hi;
			__asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
			ring[i & ((1 << 20) - 1)] = (unsigned long)hi << 32 | lo;
		}
		s += (unsigned long)p;
	}
	double c1 = now();
	printf("len %d tsc %d: %.2f ns/iter\n", len, tsc, (c1 - c0) / n);
	return s == 42;
}
