/*
 * sigguard.c - a program that blocks SIGTRAP, installs its own SIGTRAP handler, resets
 * it in a fork child, ... while int3 probes are on t_add (single-stepped, with a post
 * handler) and t_mul (boosted). sigguard_test.go links it with kprewrite_rt.o and plays
 * the rewriter (see probed.c), listing the GOT words of the signal functions.
 * Every mode prints key=value pairs; the probes' hits are n_pre_add, n_post_add, n_pre_mul.
 */
#define _GNU_SOURCE
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include "kprewrite_abi.h"

const unsigned char kp_tables[65536] __attribute__((used, aligned(64))) = {1};
unsigned char kp_state[16384] __attribute__((used, aligned(64)));

long t_add(long a, long b);
long t_mul(long a, long b);

__asm__(".text\n"
	".balign 16\n"
	"kp_slots: .fill 2048,1,0xcc\n"
	".globl t_add\n"
	"t_add:\n"
	"t_add_s0: lea (%rdi,%rsi,1), %rax\n"
	"t_add_s0_e:\n"
	"ret\n"
	".globl t_mul\n"
	"t_mul:\n"
	"t_mul_s0: mov %rdi, %rax\n"
	"t_mul_s0_e:\n"
	"imul %rsi, %rax\n"
	"ret\n"
	/* an int3 of the program's own */
	".globl own_int3\n"
	"own_int3: int3\n"
	".globl own_int3_end\n"
	"own_int3_end: ret\n");
void own_int3(void);
extern char own_int3_end[];

static long n_pre_add, n_post_add, n_pre_mul;

int pre_add(void *kp, void *regs)
{
	(void)kp, (void)regs;
	__atomic_fetch_add(&n_pre_add, 1, __ATOMIC_RELAXED);
	return 0;
}

void post_add(void *kp, void *regs, unsigned long flags)
{
	(void)kp, (void)regs, (void)flags;
	__atomic_fetch_add(&n_post_add, 1, __ATOMIC_RELAXED);
}

int pre_mul(void *kp, void *regs)
{
	(void)kp, (void)regs;
	__atomic_fetch_add(&n_pre_mul, 1, __ATOMIC_RELAXED);
	return 0;
}

/* both probes once: 1 if the results are right */
static int probed(void)
{
	return t_add(2, 3) == 5 && t_mul(6, 7) == 42;
}

static void hits(void)
{
	printf("n_pre_add=%ld n_post_add=%ld n_pre_mul=%ld\n", n_pre_add, n_post_add, n_pre_mul);
}

static int trap_blocked(void)
{
	sigset_t cur;
	sigprocmask(SIG_BLOCK, NULL, &cur);
	return sigismember(&cur, SIGTRAP);
}

/* a watchdog thread as python's faulthandler makes it: every signal blocked */
static void *blocker(void *arg)
{
	sigset_t all;
	(void)arg;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, NULL);
	long ok = probed() && probed();
	return (void *)ok;
}

static volatile long usr1_ok;
static void on_usr1(int sig)
{
	(void)sig;
	usr1_ok = probed();
}

static volatile long n_trap, last_code, last_ip_ok;
static void on_trap(int sig, siginfo_t *si, void *ucv)
{
	ucontext_t *uc = ucv;
	(void)sig;
	n_trap++;
	last_code = si->si_code;
	if (si->si_code == SI_KERNEL)
		last_ip_ok = (char *)uc->uc_mcontext.gregs[REG_RIP] == own_int3_end;
	probed(); /* probes fire inside the program's own handler */
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "block";
	if (!strcmp(mode, "block")) {
		/* a thread blocks everything; then the main thread; then a handler whose sa_mask
		 * is full, then syscall(SYS_rt_sigprocmask) */
		pthread_t th;
		void *ok;
		pthread_create(&th, NULL, blocker, NULL);
		pthread_join(th, &ok);
		sigset_t all, old;
		sigfillset(&all);
		sigprocmask(SIG_BLOCK, &all, &old);
		int main_ok = probed();
		int seen = trap_blocked();
		sigprocmask(SIG_SETMASK, &old, NULL);
		struct sigaction sa;
		memset(&sa, 0, sizeof sa);
		sa.sa_handler = on_usr1;
		sigfillset(&sa.sa_mask);
		sigaction(SIGUSR1, &sa, NULL);
		struct sigaction back;
		sigaction(SIGUSR1, NULL, &back);
		raise(SIGUSR1);
		unsigned long kall = ~0ul;
		syscall(SYS_rt_sigprocmask, SIG_BLOCK, &kall, NULL, 8);
		int sys_ok = probed();
		syscall(SYS_rt_sigprocmask, SIG_SETMASK, &old, NULL, 8);
		printf("thread=%ld main=%d seen_blocked=%d usr1=%ld usr1_mask_has_trap=%d syscall=%d\n", (long)ok,
		       main_ok, seen, usr1_ok, sigismember(&back.sa_mask, SIGTRAP), sys_ok);
		hits();
		return 0;
	}
	if (!strcmp(mode, "handler")) {
		/* the program's own SIGTRAP handler: raise(), an int3 of its own; the probes
		 * keep working, in it and around it */
		struct sigaction sa, old;
		memset(&sa, 0, sizeof sa);
		sa.sa_sigaction = on_trap;
		sa.sa_flags = SA_SIGINFO;
		sigaction(SIGTRAP, &sa, NULL);
		probed();
		raise(SIGTRAP);
		long raised = n_trap, raised_code = last_code;
		own_int3();
		long after_int3 = n_trap, int3_code = last_code;
		probed();
		sigaction(SIGTRAP, NULL, &old);
		int readback = old.sa_sigaction == on_trap && (old.sa_flags & SA_SIGINFO);
		/* signal() returns the program's handler; SA_RESETHAND leaves SIG_DFL behind */
		void (*prev)(int) = signal(SIGTRAP, SIG_IGN);
		raise(SIGTRAP); /* ignored */
		sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
		sigaction(SIGTRAP, &sa, NULL);
		raise(SIGTRAP);
		sigaction(SIGTRAP, NULL, &old);
		printf("raised=%ld raised_code=%ld int3=%ld int3_code=%ld ip_ok=%ld readback=%d prev_is_handler=%d "
		       "after_ign=%ld reset_to_dfl=%d\n",
		       raised, raised_code, after_int3 - raised, int3_code, last_ip_ok, readback,
		       prev == (void (*)(int))on_trap, n_trap - after_int3, old.sa_handler == SIG_DFL);
		hits();
		return 0;
	}
	if (!strcmp(mode, "fork")) {
		/* git's run_command: block everything, fork, the child resets every handler
		 * and calls probed functions before it execs */
		sigset_t all, old;
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		pid_t p = fork();
		if (p == 0) {
			for (int sig = 1; sig < 65; sig++)
				if (signal(sig, SIG_DFL) == SIG_IGN)
					signal(sig, SIG_IGN);
			int ok = probed();
			sigprocmask(SIG_SETMASK, &old, NULL);
			ok = ok && probed();
			_exit(ok ? 7 : 1);
		}
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		int st;
		waitpid(p, &st, 0);
		printf("child_exit=%d child_signal=%d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1,
		       WIFSIGNALED(st) ? WTERMSIG(st) : 0);
		return 0;
	}
	if (!strcmp(mode, "dfl")) {
		/* SIG_DFL and an int3 of the program's own: death by SIGTRAP, as without us */
		signal(SIGTRAP, SIG_DFL);
		probed();
		fflush(stdout);
		own_int3();
		printf("survived\n");
		return 0;
	}
	if (!strcmp(mode, "suspend")) {
		/* sigsuspend and ppoll with every signal but SIGUSR1 blocked: the SIGUSR1
		 * handler runs with that mask and hits the probes */
		struct sigaction sa;
		memset(&sa, 0, sizeof sa);
		sa.sa_handler = on_usr1;
		sigaction(SIGUSR1, &sa, NULL);
		sigset_t all, wait;
		sigfillset(&all);
		sigprocmask(SIG_BLOCK, &all, NULL);
		sigfillset(&wait);
		sigdelset(&wait, SIGUSR1);
		kill(getpid(), SIGUSR1);
		sigsuspend(&wait);
		long a = usr1_ok;
		usr1_ok = 0;
		kill(getpid(), SIGUSR1);
		struct timespec ts = {5, 0};
		ppoll(NULL, 0, &ts, &wait);
		printf("sigsuspend=%ld ppoll=%ld\n", a, usr1_ok);
		hits();
		return 0;
	}
	return 2;
}
