/* calls_lost.c: calls whose returns are never recorded, and calls made after them, for
 * the exports' nesting: a recursion deeper than its return probe's instances (the
 * definitions give fib few), and a longjmp out of nested calls followed by more calls
 * from the frame it lands in; a tail call from one return-probed function to another
 * (at -O2 a jmp: both share one return address, and both return at once). fib and
 * jumper keep their calls at -O2 (no tail-call or tail-recursion elimination). */
#include <setjmp.h>
#include <stdio.h>

static volatile long sink;
static jmp_buf env;

#define CALLS __attribute__((noinline, optimize("no-optimize-sibling-calls")))

CALLS long fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
__attribute__((noinline)) void leaf(void) { sink++; }
CALLS void jumper(int depth)
{
	leaf();
	if (depth == 0)
		longjmp(env, 1);
	jumper(depth - 1);
}
__attribute__((noinline)) void after_jump(void)
{
	leaf();
	leaf();
}
__attribute__((noinline)) long tail_b(long x)
{
	leaf();
	return x * 3 + sink;
}
__attribute__((noinline)) long tail_a(long x)
{
	leaf();
	return tail_b(x + 1);
}

int main(void)
{
	printf("fib %ld\n", fib(12));
	for (int i = 0; i < 3; i++) {
		if (!setjmp(env))
			jumper(3);
		after_jump();
	}
	printf("tail %ld\n", tail_a(4));
	puts("done");
	return 0;
}
