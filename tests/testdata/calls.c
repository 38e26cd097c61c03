/* calls.c: a program whose calls are known, for the exports (kprewrite trace --format
 * chrome, report, profile --format pprof, flamegraph): recursion, nested calls of known
 * counts and costs, threads, a signal handler that calls functions, longjmp out of
 * nested calls (their returns are lost), fork. */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile long sink;
static jmp_buf env;

__attribute__((noinline)) void spin(long n)
{
	for (long i = 0; i < n; i++)
		sink += i;
}
__attribute__((noinline)) long fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
__attribute__((noinline)) void leaf(void) { spin(200000); }
__attribute__((noinline)) void middle(void)
{
	spin(1000);
	leaf();
	leaf();
}
__attribute__((noinline)) void top(void)
{
	for (int i = 0; i < 10; i++)
		middle();
}
__attribute__((noinline)) void *worker(void *a)
{
	(void)a;
	top();
	return 0;
}
__attribute__((noinline)) void in_handler(void) { spin(100); }
__attribute__((noinline)) void on_signal(int sig)
{
	(void)sig;
	in_handler();
}
__attribute__((noinline)) void jumper(int depth)
{
	if (depth == 0)
		longjmp(env, 1);
	jumper(depth - 1);
}
__attribute__((noinline)) void child(void) { spin(1000); }

int main(void)
{
	pthread_t t;
	pthread_create(&t, 0, worker, 0);
	top();
	pthread_join(t, 0);
	printf("fib %ld\n", fib(8));
	signal(SIGUSR1, on_signal);
	raise(SIGUSR1);
	if (!setjmp(env))
		jumper(3);
	pid_t p = fork();
	if (p == 0) {
		child();
		_exit(0);
	}
	waitpid(p, 0, 0);
	puts("done");
	return 0;
}
