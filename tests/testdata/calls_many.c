/* calls_many.c: argv[1] iterations of two nested calls, for exports of traces of any
 * length (their memory must not grow with the trace). */
#include <stdlib.h>

static volatile long sink;

__attribute__((noinline)) void inner(long i) { sink += i; }
__attribute__((noinline)) void outer(long i)
{
	inner(i);
	inner(i + 1);
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1;
	for (long i = 0; i < n; i++)
		outer(i);
	return 0;
}
