/*
 * probed.c - a program that plays a rewritten binary for runtime tests. runtime_test.go
 * links it with kprewrite_rt.o (entry = kprewrite_rt_entry), then does the rewriter's
 * job on the file: writes tables (made by the Go encoder) into kp_tables, slots into
 * kp_slots, int3 at the probe sites, and kprewrite_rt_hdr_rel.
 * Probed functions are assembly so the probed instructions are known; each site label
 * X has an end label X_e (length = X_e - X).
 */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "kprewrite_abi.h"

#ifndef KP_TABLES_SIZE /* tests with very many probes pass bigger ones with -D */
#define KP_TABLES_SIZE 65536
#define KP_STATE_SIZE 16384
#endif
const unsigned char kp_tables[KP_TABLES_SIZE] __attribute__((used, aligned(64))) = {1};
unsigned char kp_state[KP_STATE_SIZE] __attribute__((used, aligned(64)));
extern struct kprw_stats kprewrite_rt_stats;

long t_add(long a, long b);
long t_mul(long a, long b);
long t_calladd(long a, long b);
long t_max(long a, long b);
long t_depth(long n);
long t_cb(void (*f)(void));
long t_skip(long a);
long t_skip_alt(void);

__asm__(
	".text\n"
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

	/* a call emulated by the runtime */
	".globl t_calladd\n"
	"t_calladd:\n"
	"sub $8, %rsp\n"
	"t_calladd_s0: call t_add\n"
	"t_calladd_s0_e:\n"
	"add $8, %rsp\n"
	"ret\n"

	/* a jcc emulated by the runtime */
	".globl t_max\n"
	"t_max:\n"
	"mov %rdi, %rax\n"
	"cmp %rsi, %rdi\n"
	"t_max_s0: jge t_max_ret\n"
	"t_max_s0_e:\n"
	"mov %rsi, %rax\n"
	"t_max_ret: ret\n"

	/* recursive: t_depth(n) = n + t_depth(n-1), t_depth(0) = 0 */
	".globl t_depth\n"
	"t_depth:\n"
	"t_depth_s0: push %rbx\n"
	"t_depth_s0_e:\n"
	"mov %rdi, %rbx\n"
	"test %rdi, %rdi\n"
	"jz 1f\n"
	"lea -1(%rdi), %rdi\n"
	"call t_depth\n"
	"add %rbx, %rax\n"
	"pop %rbx\n"
	"ret\n"
	"1: xor %eax, %eax\n"
	"pop %rbx\n"
	"ret\n"

	/* t_cb(f): calls f (which may longjmp away), returns 42 */
	".globl t_cb\n"
	"t_cb:\n"
	"t_cb_s0: push %rbx\n"
	"t_cb_s0_e:\n"
	"call *%rdi\n"
	"mov $42, %eax\n"
	"pop %rbx\n"
	"ret\n"

	/* t_skip(a) = a + 1; a pre handler may send it to t_skip_alt (returns -1) */
	".globl t_skip\n"
	"t_skip:\n"
	"t_skip_s0: lea 1(%rdi), %rax\n"
	"t_skip_s0_e:\n"
	"ret\n"
	".globl t_skip_alt\n"
	"t_skip_alt: mov $-1, %rax\n"
	"ret\n");

/* ---- handlers (the rewriter points the tables at them) ---- */
static long n_pre_add, n_post_add, bad_add, last_post_ip;
static long n_pre_mul, n_agg1, n_agg2, agg_order;
static long n_ret, ret_sum, ret_bad, n_entry;
static long ret_vals[16];

int pre_add(void *kp, struct pt_regs *regs)
{
	(void)kp;
	__atomic_fetch_add(&n_pre_add, 1, __ATOMIC_RELAXED);
	if (regs->ip != (unsigned long)t_add + 1)
		__atomic_fetch_add(&bad_add, 1, __ATOMIC_RELAXED);
	return 0;
}

void post_add(void *kp, struct pt_regs *regs, unsigned long flags)
{
	(void)kp;
	(void)flags;
	__atomic_fetch_add(&n_post_add, 1, __ATOMIC_RELAXED);
	last_post_ip = (long)regs->ip;
	if (regs->ax != regs->di + regs->si)
		__atomic_fetch_add(&bad_add, 1, __ATOMIC_RELAXED);
}

int pre_mul(void *kp, struct pt_regs *regs)
{
	(void)kp;
	(void)regs;
	__atomic_fetch_add(&n_pre_mul, 1, __ATOMIC_RELAXED);
	return 0;
}

/* two probes at one address: both run, in order */
int pre_agg1(void *kp, struct pt_regs *regs)
{
	(void)kp;
	(void)regs;
	n_agg1++;
	agg_order = agg_order * 10 + 1;
	return 0;
}

int pre_agg2(void *kp, struct pt_regs *regs)
{
	(void)kp;
	(void)regs;
	n_agg2++;
	agg_order = agg_order * 10 + 2;
	return 0;
}

/* a handler that hits another probe: that hit is missed, the call still works */
static long nested_result;
int pre_nest(void *kp, struct pt_regs *regs)
{
	(void)kp;
	(void)regs;
	nested_result = t_mul(6, 7);
	return 0;
}

/* change the execution path: resume at t_skip_alt, skipping the instruction */
int pre_skip(void *kp, struct pt_regs *regs)
{
	(void)kp;
	if (regs->di == 100) {
		regs->ip = (unsigned long)t_skip_alt;
		return 1;
	}
	return 0;
}

int entry_depth(struct kretprobe_instance *ri, struct pt_regs *regs)
{
	n_entry++;
	ri->data[0] = regs->di; /* per-instance data: the argument */
	return 0;
}

int ret_depth(struct kretprobe_instance *ri, struct pt_regs *regs)
{
	long n = (long)ri->data[0];
	if (n_ret < 16)
		ret_vals[n_ret] = (long)regs->ax;
	n_ret++;
	ret_sum += (long)regs->ax;
	if ((long)regs->ax != n * (n + 1) / 2 || regs->ip != ri->ret_addr)
		ret_bad++;
	return 0;
}

static long n_cb_ret;
int ret_cb(struct kretprobe_instance *ri, struct pt_regs *regs)
{
	(void)ri;
	if (regs->ax == 42)
		n_cb_ret++;
	return 0;
}

/* ---- modes ---- */
static void stats(void)
{
	struct kprw_stats *s = &kprewrite_rt_stats;
	printf("traps=%llu steps=%llu boosts=%llu emulated=%llu rettramps=%llu foreign=%llu records=%llu\n",
	       s->traps, s->steps, s->boosts, s->emulated, s->rettramps, s->foreign, s->records);
}

static void *worker(void *arg)
{
	long bad = 0;
	for (long i = 0; i < 5000; i++)
		if (t_add(i, (long)arg) != i + (long)arg)
			bad++;
	return (void *)bad;
}

static jmp_buf jb;
static void jumper(void)
{
	longjmp(jb, 1);
}
static void noop(void)
{
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "basic";
	if (!strcmp(mode, "basic")) {
		long r = t_add(3, 4);
		printf("add=%ld n_pre_add=%ld n_post_add=%ld bad_add=%ld post_ip_off=%ld\n", r, n_pre_add,
		       n_post_add, bad_add, last_post_ip - (long)t_add);
		r = t_mul(6, 7);
		printf("mul=%ld n_pre_mul=%ld\n", r, n_pre_mul);
		long ca = t_calladd(10, 20), m1 = t_max(5, 9), m2 = t_max(9, 5);
		printf("calladd=%ld max1=%ld max2=%ld agg=%ld/%ld order=%ld\n", ca, m1, m2, n_agg1, n_agg2, agg_order);
		long s1 = t_skip(1), s100 = t_skip(100);
		printf("skip1=%ld skip100=%ld\n", s1, s100);
		stats();
		return 0;
	}
	if (!strcmp(mode, "nested")) {
		long r = t_calladd(1, 2); /* pre_nest on t_calladd calls t_mul */
		printf("calladd=%ld nested=%ld n_pre_mul=%ld\n", r, nested_result, n_pre_mul);
		stats();
		return 0;
	}
	if (!strcmp(mode, "kretprobe")) {
		long a = t_depth(5);
		long b = t_depth(2);
		printf("depth5=%ld depth2=%ld n_entry=%ld n_ret=%ld ret_bad=%ld vals=%ld,%ld,%ld,%ld,%ld\n", a, b,
		       n_entry, n_ret, ret_bad, ret_vals[0], ret_vals[1], ret_vals[2], ret_vals[3], ret_vals[4]);
		stats();
		return 0;
	}
	if (!strcmp(mode, "longjmp")) {
		int jumped = 0;
		for (int i = 0; i < 10; i++) {
			if (setjmp(jb) == 0)
				t_cb(jumper);
			else
				jumped++;
		}
		long r = t_cb(noop);
		printf("jumped=%d r=%ld n_cb_ret=%ld\n", jumped, r, n_cb_ret);
		stats();
		return 0;
	}
	if (!strcmp(mode, "threads")) {
		pthread_t th[8];
		long bad = 0;
		for (long i = 0; i < 8; i++)
			pthread_create(&th[i], NULL, worker, (void *)i);
		for (int i = 0; i < 8; i++) {
			void *b;
			pthread_join(th[i], &b);
			bad += (long)b;
		}
		printf("bad=%ld n_pre_add=%ld n_post_add=%ld bad_add=%ld\n", bad, n_pre_add, n_post_add, bad_add);
		stats();
		return 0;
	}
	if (!strcmp(mode, "fork")) {
		t_add(1, 1);
		pid_t p = fork();
		if (p == 0) {
			for (int i = 0; i < 10; i++)
				t_add(i, i);
			printf("child=%d\n", (int)getpid());
			fflush(stdout);
			_exit(t_add(2, 3) == 5 ? 0 : 1);
		}
		int st;
		waitpid(p, &st, 0);
		t_add(2, 2);
		printf("parent=%d child_status=%d\n", (int)getpid(), st);
		return 0;
	}
	if (!strcmp(mode, "crash")) {
		for (int i = 0; i < 7; i++)
			t_add(i, 1);
		fflush(stdout);
		*(volatile int *)0 = 1;
		return 0;
	}
	if (!strcmp(mode, "foreign")) {
		t_add(1, 2);
		fflush(stdout);
		raise(SIGTRAP);
		return 0;
	}
	return 2;
}
