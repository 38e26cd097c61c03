/* rstack.c: return events on a thread's return stack (runtime/src/rt_rstack.c) and past
 * it: a recursion deeper than the stack and the pool after it, a longjmp that leaves
 * every frame of one (stale entries the next calls sweep), a tail call from a function
 * whose frame is on the stack to one whose return event takes an instance (a chain
 * across both), a tail call to a hooked function from a frame a TAIL line hooked (a
 * chain on the stack), and a fork inside a hooked frame whose child returns through it. */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile long sink;
static jmp_buf env;

#define CALLS __attribute__((noinline, optimize("no-optimize-sibling-calls")))

CALLS int rec(int n)
{
	if (n == 0)
		return 0;
	return rec(n - 1) + 1;
}
/* deep: a CALL line (its entry event reads nothing): the detour's assembly pushes its
 * frames (optprobe.S, .Lcall_push) until the stack is full */
CALLS int deep(int n)
{
	sink++;
	if (n == 0)
		return 0;
	return deep(n - 1) + 1;
}
CALLS void dive(int n)
{
	sink++;
	if (n == 0)
		longjmp(env, 1);
	dive(n - 1);
}
__attribute__((noinline)) long tail_b(long x)
{
	sink++;
	return x * 3 + sink;
}
__attribute__((noinline)) long tail_a(long x)
{
	sink++;
	return tail_b(x + 1);
}
/* hooked_c: an entry and a return event (a CALL line) tail-called from chain_a, whose
 * tail call a --calls TAIL line hooks: hooked_c's push is a chain on chain_a's entry
 * (the detour's assembly), its return comes first, and both show main's return address */
CALLS long hooked_c(long x)
{
	sink++;
	return x * 5 + sink;
}
__attribute__((noinline)) long chain_a(long x)
{
	sink++;
	return hooked_c(x + 2);
}
CALLS int forker(void)
{
	pid_t p = fork();
	if (p == 0)
		return 7;
	int st = 0;
	waitpid(p, &st, 0);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 99;
}

int main(void)
{
	printf("rec %d\n", rec(300));
	printf("deep %d\n", deep(300));
	if (!setjmp(env))
		dive(200);
	printf("rec %d\n", rec(50));
	sink = 0;
	printf("tail %ld\n", tail_a(4));
	long acc = 0;
	for (int i = 0; i < 1000; i++)
		acc += tail_a(i);
	printf("tails %ld\n", acc);
	acc = 0;
	for (int i = 0; i < 1000; i++)
		acc += chain_a(i);
	printf("chains %ld\n", acc);
	int r = forker();
	if (r == 7) {
		printf("child %d\n", rec(3));
		fflush(stdout);
		_exit(42);
	}
	printf("parent %d\n", r);
	return 0;
}
