/*
 * threads.c - the program scripts/bench-threads.sh probes: T threads each call
 * target(i) N times, then, once all are done, its unprobed twin twin(i) N times; prints
 * the nanoseconds per call of each, averaged over the whole run of every thread
 * (wall time of the phase divided by N: the threads run at once), and their difference,
 * the cost of one probe hit when T threads hit it together:
 *
 *   threads N T      "target X twin W hit H"
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

volatile long g = 1;
/* noipa: identical code folding would send twin's calls to target */
__attribute__((noipa)) long target(long x) { return g + x * 3; }
__attribute__((noipa)) long twin(long x) { return g + x * 3; }

static long n;
static volatile long sink;

static void *run_target(void *arg)
{
	long s = 0;
	for (long i = 0; i < n; i++)
		s += target(i);
	sink += s + (long)arg;
	return NULL;
}

static void *run_twin(void *arg)
{
	long s = 0;
	for (long i = 0; i < n; i++)
		s += twin(i);
	sink += s + (long)arg;
	return NULL;
}

static double phase(void *(*fn)(void *), int nt)
{
	pthread_t t[64];
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (int k = 0; k < nt; k++)
		pthread_create(&t[k], NULL, fn, (void *)(long)k);
	for (int k = 0; k < nt; k++)
		pthread_join(t[k], NULL);
	clock_gettime(CLOCK_MONOTONIC, &b);
	return ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n;
}

int main(int argc, char **argv)
{
	if (argc != 3)
		return 2;
	n = atol(argv[1]);
	int nt = atoi(argv[2]);
	if (n <= 0 || nt <= 0 || nt > 64)
		return 2;
	double x = phase(run_target, nt), w = phase(run_twin, nt);
	printf("target %.2f twin %.2f hit %.2f\n", x, w, x - w);
	return 0;
}
