/* triggered.c: one thread calls work(), other() and name() in a known order with known
 * arguments, for the trigger tests (trigger_test.go). Exits with status 3. */
#include <stdio.h>

__attribute__((noinline)) long work(int a, long b)
{
	__asm__ volatile("" ::: "memory");
	return a * 3 + b;
}

__attribute__((noinline)) int other(int x)
{
	__asm__ volatile("" ::: "memory");
	return x ^ 0x55;
}

__attribute__((noinline)) int name(const char *s)
{
	__asm__ volatile("" ::: "memory");
	return s[0];
}

static const char *names[] = {"alpha", "beta", "gamma", "delta"};
static volatile long sum;

int main(void)
{
	for (int i = 0; i < 24; i++) {
		sum += work(i, (long)i * 1000 - 5000);
		sum += other(i * 2);
		if (i % 3 == 0)
			sum += name(names[(i / 3) % 4]);
	}
	printf("%ld\n", sum);
	return 3;
}
