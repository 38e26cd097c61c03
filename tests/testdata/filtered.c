/* filtered.c: calls work() with known arguments from two threads with different names,
 * for the filter tests (filter_test.go). Exits with status 3. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>

__attribute__((noinline)) long work(int n, const char *s, unsigned long u, short w)
{
	__asm__ volatile("" ::: "memory");
	return n * 2 + (long)strlen(s) + w;
}

static const char *names[] = {"open", "openat", "read", "close", "opendir", "", "x[y]", "*star"};
static volatile long sum;

static void calls(int from, int to)
{
	for (int i = from; i < to; i++)
		sum += work(i, names[(i + 64) % 8], (unsigned long)(i + 64) * 0x10001, (short)(i * 1000));
}

static void *thread(void *arg)
{
	(void)arg;
	prctl(PR_SET_NAME, "worker-b");
	calls(100, 140);
	return NULL;
}

int main(void)
{
	pthread_t t;
	calls(-20, 60);
	if (pthread_create(&t, NULL, thread, NULL) || pthread_join(t, NULL))
		return 1;
	printf("%ld\n", sum);
	return 3;
}
