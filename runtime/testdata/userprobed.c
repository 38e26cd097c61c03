/*
 * userprobed.c - a program that plays a rewritten binary with C-handler probes
 * (KPRW_F_USER) for userprobe_test.go: struct kprobe / struct kretprobe objects of
 * kprewrite.h whose handlers the runtime reads at each hit, registration from a
 * kprewrite_init() (-DWITH_INIT) or automatic, kprewrite_exit() at exit. The probed
 * functions are assembly with known sites; each function exists once per execution mode
 * (k: single-step, b: boost, o: jump-optimized) so every mode runs the same handlers.
 * argv[1] picks a workload; results are printed as key=value.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>
#include <sys/syscall.h>
#include "kprewrite_abi.h"
#include "kprewrite.h"

const unsigned char kp_tables[65536] __attribute__((used, aligned(64))) = {1};
unsigned char kp_state[16384] __attribute__((used, aligned(64)));
extern struct kprw_stats kprewrite_rt_stats;

/* f(a, b) = a - b in each mode; sum(n) = n + sum(n - 1), sum(0) = 0 */
long k_sub(long a, long b), b_sub(long a, long b), o_sub(long a, long b), alt(long a, long b);
long k_sum(long n), b_sum(long n), o_sum(long n);

__asm__(
	".text\n"
	".balign 16\n"
	"kp_slots: .fill 4096,1,0xcc\n"

	/* k and b: the probed instruction is one mov */
	".globl k_sub\nk_sub:\n"
	"k_sub_s0: mov %rdi, %rax\n"
	"k_sub_s0_e:\n"
	"sub %rsi, %rax\n"
	"ret\n"
	".globl b_sub\nb_sub:\n"
	"b_sub_s0: mov %rdi, %rax\n"
	"b_sub_s0_e:\n"
	"sub %rsi, %rax\n"
	"ret\n"
	/* o: the DCR is both instructions (6 bytes) */
	".globl o_sub\no_sub:\n"
	"o_sub_s0: mov %rdi, %rax\n"
	"sub %rsi, %rax\n"
	"o_sub_s0_e:\n"
	"ret\n"
	".globl alt\nalt:\n"
	"mov $-7, %rax\n"
	"ret\n"

	/* return-probed, recursive */
	".globl k_sum\nk_sum:\n"
	"k_sum_s0: push %rbx\n"
	"k_sum_s0_e:\n"
	"push %rbp\n"
	"mov %rdi, %rbx\n"
	"test %rdi, %rdi\n"
	"jz 1f\n"
	"lea -1(%rdi), %rdi\n"
	"call k_sum\n"
	"add %rbx, %rax\n"
	"pop %rbp\n"
	"pop %rbx\n"
	"ret\n"
	"1: xor %eax, %eax\n"
	"pop %rbp\n"
	"pop %rbx\n"
	"ret\n"

	".globl b_sum\nb_sum:\n"
	"b_sum_s0: push %rbx\n"
	"b_sum_s0_e:\n"
	"push %rbp\n"
	"mov %rdi, %rbx\n"
	"test %rdi, %rdi\n"
	"jz 1f\n"
	"lea -1(%rdi), %rdi\n"
	"call b_sum\n"
	"add %rbx, %rax\n"
	"pop %rbp\n"
	"pop %rbx\n"
	"ret\n"
	"1: xor %eax, %eax\n"
	"pop %rbp\n"
	"pop %rbx\n"
	"ret\n"

	".globl o_sum\no_sum:\n"
	"o_sum_s0: push %rbx\n"
	"push %rbp\n"
	"mov %rdi, %rbx\n"
	"o_sum_s0_e:\n"
	"test %rdi, %rdi\n"
	"jz 1f\n"
	"lea -1(%rdi), %rdi\n"
	"call o_sum\n"
	"add %rbx, %rax\n"
	"pop %rbp\n"
	"pop %rbx\n"
	"ret\n"
	"1: xor %eax, %eax\n"
	"pop %rbp\n"
	"pop %rbx\n"
	"ret\n");

/* ---- kprobe handlers, shared by the three modes (index 0 k, 1 b, 2 o) ---- */
enum { OBSERVE, CHANGE_SI, REDIRECT, FAULT, TRAP, FAULT_IN_FAULT, REENTER };
static int action;
static long n_pre[3], n_post[3], n_fault[3], bad[3], seen_di[3], seen_si[3], post_ax[3], after_trap;
static long pre_reenter_result;
static int printed;

extern struct kprobe kp_k, kp_b, kp_o;
extern struct kretprobe rp_k, rp_b, rp_o;

static int which(struct kprobe *p)
{
	return p == &kp_k ? 0 : p == &kp_b ? 1 : 2;
}

static unsigned long site_of(int w)
{
	return w == 0 ? (unsigned long)k_sub : w == 1 ? (unsigned long)b_sub : (unsigned long)o_sub;
}

static int pre(struct kprobe *p, struct pt_regs *regs)
{
	int w = which(p);
	n_pre[w]++;
	seen_di[w] = (long)regs->di;
	seen_si[w] = (long)regs->si;
	if (regs->ip != site_of(w) + 1 || (unsigned long)p->addr != site_of(w) || regs->cs != 0x33)
		bad[w]++;
	if (!printed++) {
		pr_info("pre: %s di=%lu si=%lu pid=%d comm=%s\n", p->symbol_name, regs->di, regs->si, current->pid,
			current->comm);
		trace_printk("seen %ld %ld\n", (long)regs->di, (long)regs->si);
	}
	switch (action) {
	case CHANGE_SI:
		regs->si = 100;
		break;
	case REDIRECT:
		regs->ip = (unsigned long)alt;
		return 1;
	case FAULT:
		*(volatile long *)16 = 1;
		bad[w] += 1000; /* not reached */
		break;
	case TRAP:
		__asm__ volatile("ud2"); /* SIGILL: the fault_handler steps over it */
		after_trap++;
		break;
	case FAULT_IN_FAULT:
		*(volatile long *)24 = 1;
		break;
	case REENTER:
		/* a probed function called from a handler: that hit is missed */
		pre_reenter_result = k_sub(50, 8) + b_sub(50, 8) + o_sub(50, 8);
		break;
	}
	return 0;
}

static void post(struct kprobe *p, struct pt_regs *regs, unsigned long flags)
{
	int w = which(p);
	(void)flags;
	n_post[w]++;
	post_ax[w] = (long)regs->ax;
	if (regs->ip != site_of(w) + 3) /* after the 3-byte mov */
		bad[w]++;
}

static int fault(struct kprobe *p, struct pt_regs *regs, int trapnr)
{
	int w = which(p);
	n_fault[w]++;
	if (action == TRAP && trapnr == 6) { /* #UD */
		regs->ip += 2;
		return 1;
	}
	if (action == FAULT_IN_FAULT)
		*(volatile long *)32 = 1;
	return 0;
}

DEFINE_KPROBE(kp_k, "k_sub", .pre_handler = pre, .post_handler = post, .fault_handler = fault);
DEFINE_KPROBE(kp_b, "b_sub", .pre_handler = pre, .post_handler = post, .fault_handler = fault);
DEFINE_KPROBE(kp_o, "o_sub", .pre_handler = pre, .fault_handler = fault);
/* never declared to the runtime: register_kprobe fails with -ENOENT */
struct kprobe kp_undeclared = {.symbol_name = "nowhere"};

/* ---- kretprobe handlers (r, rb, ro) ---- */
struct sum_data {
	long n;
	unsigned long magic;
};
static int inject, ret_fault;
static long n_entry[3], n_ret[3], ret_bad[3], data_bad[3], reenter_result;

static int rwhich(struct kretprobe_instance *ri)
{
	return ri->rp == &rp_k ? 0 : ri->rp == &rp_b ? 1 : 2;
}

static long call_sum(int w, long n)
{
	return w == 0 ? k_sum(n) : w == 1 ? b_sum(n) : o_sum(n);
}

static int entry(struct kretprobe_instance *ri, struct pt_regs *regs)
{
	int w = rwhich(ri);
	struct sum_data *d = (struct sum_data *)ri->data;
	n_entry[w]++;
	if (d->n != 0 || d->magic != 0) /* instance data is zeroed at entry */
		data_bad[w]++;
	d->n = (long)regs->di;
	d->magic = 0x5eed0000 + (unsigned long)regs->di;
	if (inject == 2 && regs->di == 1)
		reenter_result = call_sum(w, 3); /* re-entry from a handler: missed, still computes */
	return 0;
}

static int ret(struct kretprobe_instance *ri, struct pt_regs *regs)
{
	int w = rwhich(ri);
	struct sum_data *d = (struct sum_data *)ri->data;
	n_ret[w]++;
	if (d->magic != 0x5eed0000 + (unsigned long)d->n)
		data_bad[w]++;
	if (!inject && (long)regs_return_value(regs) != d->n * (d->n + 1) / 2)
		ret_bad[w]++;
	if (regs->ip != (unsigned long)ri->ret_addr)
		ret_bad[w]++;
	if (inject == 1)
		regs_set_return_value(regs, 1000 + d->n); /* fault injection */
	if (ret_fault)
		*(volatile long *)40 = 1;
	return 0;
}

DEFINE_KRETPROBE(rp_k, "k_sum", .handler = ret, .entry_handler = entry, .maxactive = 4,
		 .data_size = sizeof(struct sum_data));
DEFINE_KRETPROBE(rp_b, "b_sum", .handler = ret, .entry_handler = entry, .maxactive = 4,
		 .data_size = sizeof(struct sum_data));
DEFINE_KRETPROBE(rp_o, "o_sum", .handler = ret, .entry_handler = entry, .maxactive = 4,
		 .data_size = sizeof(struct sum_data), .kp.fault_handler = NULL);

#ifdef WITH_INIT
static long init_ret[8];
int kprewrite_init(void)
{
	struct kprobe *good[] = {&kp_k, &kp_b};
	struct kprobe *partial[] = {&kp_o, &kp_undeclared};
	struct kretprobe *rps[] = {&rp_k, &rp_b, &rp_o};
	init_ret[0] = register_kprobes(partial, 2); /* -ENOENT, kp_o rolled back */
	init_ret[1] = kp_o.addr == NULL ? 0 : 1;    /* rolled back: unregister of it cleared nothing */
	init_ret[2] = register_kprobes(good, 2);
	init_ret[3] = register_kretprobes(rps, 3);
	init_ret[4] = register_kprobe(&kp_k); /* twice: -EINVAL */
	pr_info("init: %ld %ld %ld %ld %ld\n", init_ret[0], init_ret[1], init_ret[2], init_ret[3], init_ret[4]);
#ifdef INIT_FAIL
	return -12;
#endif
	return 0;
}

void kprewrite_exit(void)
{
	pr_info("exit: rp_k.nmissed=%d n_pre_k=%ld\n", rp_k.nmissed, n_pre[0]);
}
#endif

static void stats(void)
{
	struct kprw_stats *s = &kprewrite_rt_stats;
	printf("traps=%llu steps=%llu boosts=%llu rettramps=%llu optslow=%llu faults=%llu records=%llu\n", s->traps,
	       s->steps, s->boosts, s->rettramps, s->optslow, s->handler_faults, s->records);
}

static void three(const char *what, long a, long b)
{
	long r0 = k_sub(a, b), r1 = b_sub(a, b), r2 = o_sub(a, b);
	printf("%s=%ld,%ld,%ld\n", what, r0, r1, r2);
}

static void counts(const char *what)
{
	printf("%s_pre=%ld,%ld,%ld %s_post=%ld,%ld,%ld %s_fault=%ld,%ld,%ld %s_bad=%ld,%ld,%ld\n", what, n_pre[0], n_pre[1],
	       n_pre[2], what, n_post[0], n_post[1], n_post[2], what, n_fault[0], n_fault[1], n_fault[2], what, bad[0],
	       bad[1], bad[2]);
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "kprobes";
	if (!strcmp(mode, "kprobes")) {
		three("observe", 10, 3);
		printf("di=%ld,%ld,%ld si=%ld,%ld,%ld post_ax=%ld,%ld,%ld\n", seen_di[0], seen_di[1], seen_di[2], seen_si[0],
		       seen_si[1], seen_si[2], post_ax[0], post_ax[1], post_ax[2]);
		action = CHANGE_SI;
		three("change", 10, 3);
		printf("post_ax2=%ld,%ld\n", post_ax[0], post_ax[1]);
		action = REDIRECT;
		three("redirect", 10, 3);
		action = REENTER;
		three("reenter", 10, 3);
		printf("reenter_result=%ld nmissed=%lu,%lu,%lu\n", pre_reenter_result, kp_k.nmissed, kp_b.nmissed,
		       kp_o.nmissed);
		action = OBSERVE;
		counts("n");
		printf("addr_ok=%d,%d,%d optimized=%d,%d,%d\n", kp_k.addr == (void *)k_sub, kp_b.addr == (void *)b_sub,
		       kp_o.addr == (void *)o_sub, !!(kp_k.flags & KPROBE_FLAG_OPTIMIZED),
		       !!(kp_b.flags & KPROBE_FLAG_OPTIMIZED), !!(kp_o.flags & KPROBE_FLAG_OPTIMIZED));
		stats();
		return 0;
	}
	if (!strcmp(mode, "switch")) {
		/* run-time disable/enable/unregister/register, as a handler or init would */
		int d1 = disable_kprobe(&kp_k), d2 = disable_kprobe(&kp_b), d3 = disable_kprobe(&kp_o);
		printf("dis=%d,%d,%d\n", d1, d2, d3);
		three("off", 10, 3);
		counts("off");
		d1 = enable_kprobe(&kp_k), d2 = enable_kprobe(&kp_b), d3 = enable_kprobe(&kp_o);
		printf("en=%d,%d,%d\n", d1, d2, d3);
		three("on", 10, 3);
		counts("on");
		unregister_kprobe(&kp_b);
		unregister_kprobe(&kp_o);
		int e = enable_kprobe(&kp_b);
		unregister_kprobe(&kp_o); /* twice: the kernel clears addr of an incorrect probe */
		printf("en_unreg=%d unreg_twice_addr=%d\n", e, kp_o.addr == NULL);
		three("unreg", 10, 3);
		counts("unreg");
		int r1 = register_kprobe(&kp_b), r2 = register_kprobe(&kp_o);
		int r3 = register_kprobe(&kp_undeclared), r4 = register_kprobe(&kp_b);
		printf("rr=%d,%d undeclared=%d twice=%d\n", r1, r2, r3, r4);
		three("rereg", 10, 3);
		counts("rereg");
		printf("rdis=%d\n", disable_kretprobe(&rp_k));
		long s = k_sum(3);
		printf("rdis_sum=%ld rdis_entry=%ld\n", s, n_entry[0]);
		stats();
		return 0;
	}
	if (!strcmp(mode, "faults")) {
		action = FAULT;
		three("fault", 10, 3);
		counts("fault");
		action = TRAP;
		three("trap", 10, 3);
		printf("after_trap=%ld\n", after_trap);
		counts("trap");
		action = FAULT_IN_FAULT;
		three("ff", 10, 3);
		counts("ff");
		action = OBSERVE;
		ret_fault = 1;
		printf("retfault=%ld,%ld,%ld\n", k_sum(2), b_sum(2), o_sum(2));
		ret_fault = 0;
		sigset_t m;
		sigprocmask(SIG_BLOCK, NULL, &m);
		int blocked = 0;
		for (int sig = 1; sig < 32; sig++)
			blocked += sigismember(&m, sig);
		printf("blocked=%d\n", blocked);
		stats();
		return 0;
	}
	if (!strcmp(mode, "kretprobes")) {
		long a = k_sum(6), b = b_sum(6), c = o_sum(6);
		printf("sum=%ld,%ld,%ld entry=%ld,%ld,%ld ret=%ld,%ld,%ld ret_bad=%ld,%ld,%ld data_bad=%ld,%ld,%ld\n", a, b, c,
		       n_entry[0], n_entry[1], n_entry[2], n_ret[0], n_ret[1], n_ret[2], ret_bad[0], ret_bad[1], ret_bad[2],
		       data_bad[0], data_bad[1], data_bad[2]);
		printf("rnmissed=%d,%d,%d maxactive=%d,%d,%d\n", rp_k.nmissed, rp_b.nmissed, rp_o.nmissed, rp_k.maxactive,
		       rp_b.maxactive, rp_o.maxactive);
		inject = 1;
		printf("inject=%ld,%ld,%ld\n", k_sum(6), b_sum(6), o_sum(6));
		inject = 2;
		long r = k_sum(2) + b_sum(2) + o_sum(2);
		printf("reenter=%ld,%ld kpnmissed=%lu,%lu,%lu\n", r, reenter_result, rp_k.kp.nmissed, rp_b.kp.nmissed,
		       rp_o.kp.nmissed);
		stats();
		return 0;
	}
	if (!strcmp(mode, "bench")) {
		/* ns per call: each mode with a counting C pre handler, and with it disabled */
		struct timespec t0, t1;
		long (*fns[])(long, long) = {k_sub, b_sub, o_sub};
		long iters[] = {20000, 100000, 2000000};
		printed = 1;
		for (int w = 0; w < 3; w++)
			for (int on = 1; on >= 0; on--) {
				struct kprobe *p = w == 0 ? &kp_k : w == 1 ? &kp_b : &kp_o;
				if (!on)
					disable_kprobe(p);
				clock_gettime(CLOCK_MONOTONIC, &t0);
				for (long i = 0; i < iters[w]; i++)
					fns[w](i, 1);
				clock_gettime(CLOCK_MONOTONIC, &t1);
				double ns = ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / iters[w];
				printf("%s_%s=%.1f ", w == 0 ? "k" : w == 1 ? "b" : "o", on ? "on" : "off", ns);
			}
		printf("\n");
		return 0;
	}
	if (!strcmp(mode, "init")) {
		three("init", 10, 3);
		printf("sums=%ld,%ld,%ld\n", k_sum(2), b_sum(2), o_sum(2));
		counts("n");
		printf("entries=%ld,%ld,%ld\n", n_entry[0], n_entry[1], n_entry[2]);
		(void)k_sum(8); /* 9 frames, 4 instances: 5 missed, reported by kprewrite_exit */
		return 0;
	}
	return 2;
}
