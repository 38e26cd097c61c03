#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
volatile int sink;
__attribute__((noinline)) int leaf(int n) { sink += n; __asm__ volatile("" ::: "memory"); return sink; }
__attribute__((noinline)) int rec(int d, int n)
{
	if (d == 0)
		return leaf(n) + 1;
	int r = rec(d - 1, n) + 1;
	__asm__ volatile("" ::: "memory");
	return r;
}
__attribute__((noinline)) int viaptr(int (*f)(int, int), int d)
{
	int r = f(d, 7);
	__asm__ volatile("" ::: "memory");
	return r + 1;
}
__attribute__((noinline)) void *thr(void *a)
{
	sink += rec(3, (int)(long)a);
	return NULL;
}
int main(int argc, char **argv)
{
	int depth = argc > 1 ? atoi(argv[1]) : 5;
	sink += viaptr(rec, depth);
	pthread_t t;
	pthread_create(&t, NULL, thr, (void *)9L);
	pthread_join(t, NULL);
	printf("%d\n", sink);
	return 0;
}
