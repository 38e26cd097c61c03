/* target.c - the program examples/latency measures: work(n) spins for about n
 * microseconds; main calls it with a spread of sizes from two threads. */
#include <pthread.h>
#include <stdio.h>
#include <time.h>

static long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

__attribute__((noinline)) long work(long us)
{
	long end = now_ns() + us * 1000, spins = 0;
	while (now_ns() < end)
		spins++;
	return spins;
}

static void *run(void *arg)
{
	long sizes[] = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000};
	long sum = 0;
	(void)arg;
	for (int round = 0; round < 10; round++)
		for (unsigned i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
			for (int k = 0; k < 10 - (int)i; k++)
				sum += work(sizes[i]);
	return (void *)sum;
}

int main(void)
{
	pthread_t t;
	pthread_create(&t, NULL, run, NULL);
	run(NULL);
	pthread_join(t, NULL);
	printf("done\n");
	return 0;
}
