/*
 * Baseline for the int3 probe kinds: the cost of one bare int3 + SIGTRAP round trip
 * (the kernel delivers the signal, an empty SA_SIGINFO handler returns, rt_sigreturn),
 * with no probe lookup, no slot and no handler. Prints "int3 round trip: X ns".
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static volatile long traps;

static void on_trap(int sig, siginfo_t *si, void *uc)
{
	(void)sig, (void)si, (void)uc;
	traps++; /* int3 leaves ip after itself: returning resumes the loop */
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 100000;
	struct sigaction sa = {0};
	sa.sa_sigaction = on_trap;
	sa.sa_flags = SA_SIGINFO;
	sigaction(SIGTRAP, &sa, NULL);
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (long i = 0; i < n; i++)
		__asm__ volatile("int3");
	clock_gettime(CLOCK_MONOTONIC, &b);
	double ns = (b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec);
	printf("int3 round trip: %.2f ns (%ld traps)\n", ns / n, traps);
	return traps == n ? 0 : 1;
}
