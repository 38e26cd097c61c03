/*
 * kstep.c - single-stepped ("k") probes with post handlers, stepped with the trap flag
 * or ended by an int3 after the slot copy (KPRW_PF_INT3STEP). kstep_test.go plays the
 * rewriter (see probed.c). Modes print key=value pairs.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "kprewrite_abi.h"

const unsigned char kp_tables[65536] __attribute__((used, aligned(64))) = {1};
unsigned char kp_state[16384] __attribute__((used, aligned(64)));
extern struct kprw_stats kprewrite_rt_stats;

long t_add(long a, long b), t_add_bare(long a, long b), t_nest(long a), t_push(long a);
extern char t_add_s0_e[], t_push_s0_e[];

__asm__(".text\n"
	".balign 16\n"
	"kp_slots: .fill 2048,1,0xcc\n"
	".globl t_add\n"
	"t_add:\n"
	"t_add_s0: lea (%rdi,%rsi,1), %rax\n"
	"t_add_s0_e:\n"
	"ret\n"
	".globl t_add_bare\n" /* the same, never probed */
	"t_add_bare: lea (%rdi,%rsi,1), %rax\n"
	"ret\n"
	".globl t_nest\n"
	"t_nest:\n"
	"t_nest_s0: mov %rdi, %rax\n"
	"t_nest_s0_e:\n"
	"ret\n"
	/* a copy that moves the stack pointer */
	".globl t_push\n"
	"t_push:\n"
	"t_push_s0: push %rbx\n"
	"t_push_s0_e:\n"
	"mov %rdi, %rax\n"
	"pop %rbx\n"
	"ret\n");

static long n_pre, n_post, bad, n_nest_pre, n_push_post, push_sp_bad;

int pre_add(void *kp, struct pt_regs *regs)
{
	(void)kp;
	__atomic_fetch_add(&n_pre, 1, __ATOMIC_RELAXED);
	if (regs->ip != (unsigned long)t_add + 1)
		__atomic_fetch_add(&bad, 1, __ATOMIC_RELAXED);
	return 0;
}

void post_add(void *kp, struct pt_regs *regs, unsigned long flags)
{
	(void)kp, (void)flags;
	__atomic_fetch_add(&n_post, 1, __ATOMIC_RELAXED);
	if (regs->ip != (unsigned long)t_add_s0_e || regs->ax != regs->di + regs->si)
		__atomic_fetch_add(&bad, 1, __ATOMIC_RELAXED);
}

/* a pre handler that calls a probed function: that hit is missed, its post handler
 * does not run */
int pre_nest(void *kp, struct pt_regs *regs)
{
	(void)kp, (void)regs;
	n_nest_pre++;
	if (t_add(20, 22) != 42)
		bad++;
	return 0;
}

static unsigned long push_sp;
int pre_push(void *kp, struct pt_regs *regs)
{
	(void)kp;
	push_sp = regs->sp;
	return 0;
}

void post_push(void *kp, struct pt_regs *regs, unsigned long flags)
{
	(void)kp, (void)flags;
	n_push_post++;
	if (regs->sp != push_sp - 8 || regs->ip != (unsigned long)t_push_s0_e || *(unsigned long *)regs->sp != regs->bx)
		push_sp_bad++;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void *worker(void *arg)
{
	long b = 0;
	for (long i = 0; i < 5000; i++)
		if (t_add(i, (long)arg) != i + (long)arg)
			b++;
	return (void *)b;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "basic";
	struct kprw_stats *s = &kprewrite_rt_stats;
	if (!strcmp(mode, "basic")) {
		long r = t_add(3, 4) + t_nest(5) + t_push(6) + t_add(1, 1);
		printf("r=%ld n_pre=%ld n_post=%ld bad=%ld nest_pre=%ld push_post=%ld push_bad=%ld traps=%llu steps=%llu "
		       "boosts=%llu\n",
		       r, n_pre, n_post, bad, n_nest_pre, n_push_post, push_sp_bad, s->traps, s->steps, s->boosts);
		return 0;
	}
	if (!strcmp(mode, "threads")) {
		pthread_t th[8];
		long b = 0;
		for (long i = 0; i < 8; i++)
			pthread_create(&th[i], NULL, worker, (void *)i);
		for (int i = 0; i < 8; i++) {
			void *v;
			pthread_join(th[i], &v);
			b += (long)v;
		}
		printf("wrong=%ld n_pre=%ld n_post=%ld bad=%ld steps=%llu\n", b, n_pre, n_post, bad, s->steps);
		return 0;
	}
	if (!strcmp(mode, "bench")) {
		long n = argc > 2 ? atol(argv[2]) : 20000, x = 0;
		double t0 = now();
		for (long i = 0; i < n; i++)
			x += t_add_bare(i, 1);
		double t1 = now();
		for (long i = 0; i < n; i++)
			x += t_add(i, 1);
		double t2 = now();
		printf("bare=%.1f k=%.1f n_post=%ld x=%ld\n", (t1 - t0) / n, (t2 - t1) / n, n_post, x);
		return 0;
	}
	return 2;
}
