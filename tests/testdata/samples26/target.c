#include <stdio.h>
__attribute__((noinline)) long do_work(long a, long b) { return a * 3 + b; }
int main(void) {
	long s = 0;
	for (int i = 0; i < 5; i++)
		s += do_work(i, 10 * i);
	printf("sum %ld\n", s);
	return 0;
}
