/* example.c - the program of the package examples: calls add(i, i + 1) argv[1] times. */
#include <stdlib.h>

long calls;

__attribute__((noinline)) int add(int a, int b)
{
	calls++;
	return a + b;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 1, sum = 0;
	for (int i = 0; i < n; i++)
		sum += add(i, i + 1);
	return sum == n * n ? 0 : 1;
}
