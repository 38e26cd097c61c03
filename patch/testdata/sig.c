/* sig.c - calls every kind of signal function the signal guard wraps (SigGuardSlots,
 * the static guard's tests in internal/rewriter). */
#include <signal.h>
#include <pthread.h>
#include <stdio.h>
static void h(int s) { (void)s; }
int main(void) {
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, 0);
	sigprocmask(SIG_UNBLOCK, &all, 0);
	struct sigaction sa = {0};
	sa.sa_handler = h;
	sigaction(SIGUSR1, &sa, 0);
	signal(SIGUSR2, h);
	printf("%p\n", (void *)&sigaction); /* address taken */
	return 0;
}
