/*
 * optprobed.c - jump-optimized probes and --verify-regions, played by hand: opt_test.go
 * links this with kprewrite_rt.o (entry = kprewrite_rt_entry) and rewrites the file as
 * the rewriter would: tables into kp_tables, detour buffers (template copy, patched
 * fields, the DCR copied, jmp back) and slots into kp_slots, the site's jmp rel32, int3s,
 * kprewrite_rt_hdr_rel. Probed code is assembly so every DCR is known: a site label X,
 * the DCR end label X_e, inner instruction boundaries X_b1, X_b2. r_* are unprobed twins
 * (the baselines).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include "kprewrite_abi.h"

const unsigned char kp_tables[65536] __attribute__((used, aligned(64))) = {1};
unsigned char kp_state[16384] __attribute__((used, aligned(64)));
extern struct kprw_stats kprewrite_rt_stats;

long o_add(long a, long b), r_add(long a, long b), o_tr(long a, long b), o_off(long a, long b);
long o_ret(long a, long b), o_count(long a, long b), k_add(long a, long b);
long o_flags(long a, long b), r_flags(long a, long b), o_dflag(long a, long b), r_dflag(long a, long b);
long o_alt(void), o_depth(long n);
long v_fn(long x), v_enter(long x), v_mid(long x);

#define ADDFN(name)                 \
	".globl " #name "\n"        \
	".balign 16\n"              \
	#name ":\n"                 \
	#name "_s0: mov %rdi, %rax\n" \
	"add %rsi, %rax\n"          \
	#name "_s0_e:\n"            \
	"ret\n"

__asm__(
	".text\n"
	".balign 64\n"
	"kp_slots: .fill 8192,1,0xcc\n"

	ADDFN(o_add) ADDFN(r_add) ADDFN(o_tr) ADDFN(o_off) ADDFN(o_ret) ADDFN(o_count) ADDFN(k_add)

	/* the arithmetic flags of cmp a, b, carried across a probe */
	".globl o_flags\n"
	"o_flags: cmp %rsi, %rdi\n"
	"o_flags_s0: mov $0x1234, %ecx\n"
	"o_flags_s0_e:\n"
	"pushfq\n pop %rax\n and $0x8d5, %eax\n ret\n"
	".globl r_flags\n"
	"r_flags: cmp %rsi, %rdi\n"
	"mov $0x1234, %ecx\n"
	"pushfq\n pop %rax\n and $0x8d5, %eax\n ret\n"

	/* the same with DF set across the probe */
	".globl o_dflag\n"
	"o_dflag: std\n cmp %rsi, %rdi\n"
	"o_dflag_s0: mov $0x1234, %ecx\n"
	"o_dflag_s0_e:\n"
	"pushfq\n pop %rax\n cld\n and $0xcd5, %eax\n ret\n"
	".globl r_dflag\n"
	"r_dflag: std\n cmp %rsi, %rdi\n"
	"mov $0x1234, %ecx\n"
	"pushfq\n pop %rax\n cld\n and $0xcd5, %eax\n ret\n"

	".globl o_alt\n"
	"o_alt: mov $-1, %rax\n ret\n"

	/* o_depth(n) = n + o_depth(n-1); the DCR is its first three instructions */
	".globl o_depth\n"
	"o_depth:\n"
	"o_depth_s0: push %rbx\n mov %rdi, %rbx\n test %rdi, %rdi\n"
	"o_depth_s0_e:\n"
	"jz 1f\n lea -1(%rdi), %rdi\n call o_depth\n add %rbx, %rax\n pop %rbx\n ret\n"
	"1: xor %eax, %eax\n pop %rbx\n ret\n"

	/* verify mode: v_fn(x) = (x + 7) * 3 through a DCR of three instructions;
	 * v_enter jumps into its second instruction, v_mid into the middle of its first */
	".globl v_fn\n"
	"v_fn:\n"
	"v_fn_s0: mov %rdi, %rax\n"
	"v_fn_s0_b1: add $7, %rax\n"
	"v_fn_s0_b2: imul $3, %rax, %rax\n"
	"v_fn_s0_e:\n"
	"ret\n"
	".globl v_enter\n"
	"v_enter: mov %rdi, %rax\n lea v_fn_s0_b1(%rip), %rcx\n jmp *%rcx\n"
	".globl v_mid\n"
	"v_mid: mov %rdi, %rax\n lea v_fn_s0+1(%rip), %rcx\n jmp *%rcx\n");

/* ---- handlers ---- */
static long n_oadd, bad_oadd, nested_r, n_count, n_ret, ret_bad, n_entry, n_redirect;
static long last_di, last_si;

int pre_oadd(void *kp, struct pt_regs *regs)
{
	(void)kp;
	__atomic_fetch_add(&n_oadd, 1, __ATOMIC_RELAXED);
	if (regs->ip != (unsigned long)o_add + 1 || regs->cs != 0x33 || regs->ss != 0x2b || regs->orig_ax != ~0ul)
		__atomic_fetch_add(&bad_oadd, 1, __ATOMIC_RELAXED);
	/* sp is the stack pointer at the probe: the return address is there */
	if (*(unsigned long *)regs->sp == 0 || regs->sp & 7)
		__atomic_fetch_add(&bad_oadd, 1, __ATOMIC_RELAXED);
	last_di = (long)regs->di;
	last_si = (long)regs->si;
	if (regs->di == 1000000)
		regs->si = 5; /* a register write takes effect */
	if (regs->di == 2000000)
		nested_r = o_add(1, 2); /* a reentrant hit: missed, still runs */
	if (regs->di == 3000000) {
		regs->ip = (unsigned long)o_alt; /* redirection */
		n_redirect++;
		return 1;
	}
	return 0;
}

int pre_flags(void *kp, struct pt_regs *regs)
{
	(void)kp;
	if (regs->di == 77)
		regs->flags ^= 0x8d5; /* CF PF AF ZF SF OF */
	if (regs->di == 78)
		regs->flags |= 0x100; /* TF: not the handler's to change */
	return 0;
}

int pre_count(void *kp, struct pt_regs *regs)
{
	(void)kp;
	(void)regs;
	n_count++;
	return 0;
}

int entry_depth(struct kretprobe_instance *ri, struct pt_regs *regs)
{
	n_entry++;
	ri->data[0] = regs->di;
	if (regs->ip != (unsigned long)o_depth + 1)
		ret_bad++;
	return 0;
}

int ret_depth(struct kretprobe_instance *ri, struct pt_regs *regs)
{
	long n = (long)ri->data[0];
	n_ret++;
	if ((long)regs->ax != n * (n + 1) / 2 || regs->ip != ri->ret_addr)
		ret_bad++;
	return 0;
}

int ret_count(struct kretprobe_instance *ri, struct pt_regs *regs)
{
	(void)ri;
	(void)regs;
	n_ret++;
	return 0;
}

/* an IRELATIVE resolver: in a dynamic program ld.so runs it before the entry point, so
 * before the runtime's start-up: the detour must still work (gate closed). musl has no
 * ifunc. */
static long preinit_add = -1, preinit_hits = -1;
#ifdef __GLIBC__
static long ifunc_impl(void)
{
	return 42;
}
static long (*resolve_ifunc(void))(void)
{
	preinit_add = o_add(2, 3);
	preinit_hits = n_oadd;
	return ifunc_impl;
}
long ifunc_fn(void) __attribute__((ifunc("resolve_ifunc")));
#else
static long ifunc_fn(void)
{
	preinit_add = 5;
	preinit_hits = 0;
	return 42;
}
#endif

static void stats(void)
{
	struct kprw_stats *s = &kprewrite_rt_stats;
	printf("traps=%llu boosts=%llu rettramps=%llu records=%llu optslow=%llu violations=%llu foreign=%llu\n",
	       s->traps, s->boosts, s->rettramps, s->records, s->optslow, s->violations, s->foreign);
}

static long tids[64], tcbword[64];
static void *worker(void *arg)
{
	long i = (long)arg, bad = 0;
	tids[i] = syscall(SYS_gettid);
	for (long k = 0; k < 5000; k++)
		if (o_add(k, i) != k + i)
			bad++;
#ifdef __GLIBC__
	/* the word of glibc's TCB that names the thread's context (KPRW_TCB_SLOT) */
	__asm__ volatile("movq %%fs:0x278, %0" : "=r"(tcbword[i]));
#endif
	return (void *)bad;
}

static void *churner(void *arg)
{
	long i = (long)arg;
	tids[i] = syscall(SYS_gettid);
	return (void *)(o_tr(i, 0) != i);
}

/* a thread made by a raw clone with a TLS block of its own: the thread pointer at its
 * first word (a usable key), everything else a pattern that is not glibc's TCB */
static unsigned char rawtls[8192] __attribute__((aligned(64)));
static unsigned char rawstack[65536] __attribute__((aligned(64)));
static long rawbad;
static int rawfn(void *arg)
{
	/* its tid where glibc's TCB has it: only the missing self pointer (at 0x10) tells
	 * this block from glibc's */
	long tid;
	__asm__ volatile("syscall" : "=a"(tid) : "a"(SYS_gettid) : "rcx", "r11", "memory"); /* (no libc call) */
	*(int *)((unsigned char *)arg + 0x2d0) = (int)tid;
	for (long k = 0; k < 1000; k++)
		if (o_tr(k, 0) != k || o_add(k, 1) != k + 1)
			rawbad++;
	return 0;
}

static double now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

/* time n calls of f, best of 40 batches (the machine is shared), ns per call */
static double timeit(long (*volatile f)(long, long), long n)
{
	double best = 1e30;
	for (int r = 0; r < 40; r++) {
		long s = 0;
		double t0 = now_ns();
		for (long i = 0; i < n; i++)
			s += f(i, 1);
		double t = (now_ns() - t0) / (double)n;
		if (s != n * (n - 1) / 2 + n)
			return -1;
		if (t < best)
			best = t;
	}
	return best;
}

/* sigstorm: a timer signal every 20 us whose handler hits o_tr too, while the main
 * loop hits it: some signals land inside the runtime's record writer (a hit there is
 * missed), some between the reservation and the record of a hit of the loop */
static volatile long n_sig;

static void on_alarm(int sig)
{
	(void)sig;
	n_sig++;
	o_tr(-1, 0);
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "basic";
	if (!strcmp(mode, "basic")) {
		long before = n_oadd;
		long r1 = o_add(3, 4);
		printf("add=%ld n=%ld bad=%ld di=%ld si=%ld\n", r1, n_oadd - before, bad_oadd, last_di, last_si);
		long w = o_add(1000000, 1);
		long nst = o_add(2000000, 1);
		long rd = o_add(3000000, 1);
		printf("write=%ld nested=%ld nested_r=%ld redirect=%ld n_redirect=%ld\n", w, nst, nested_r, rd, n_redirect);
		printf("n_final=%ld bad_final=%ld preinit_add=%ld preinit_hits=%ld ifunc=%ld\n", n_oadd - before,
		       bad_oadd, preinit_add, preinit_hits, ifunc_fn());
		long ka = k_add(5, 6), tr = o_tr(7, 8);
		printf("kadd=%ld tr=%ld\n", ka, tr);
		stats();
		return 0;
	}
	if (!strcmp(mode, "flags")) {
		static const long v[][2] = {{1, 2}, {2, 1}, {5, 5}, {0x7fffffffffffffffl, -1}, {-0x7fffffffffffffffl - 1, 1},
					     {0, 0}, {-1, 1}, {3, 0x100000003l}, {0x80, 0x1}, {77, 5}, {77, 77}, {78, 1}};
		int bad = 0, badd = 0, flipped = 0;
		for (unsigned i = 0; i < sizeof v / sizeof v[0]; i++) {
			long a = v[i][0], b = v[i][1];
			long want = r_flags(a, b), got = o_flags(a, b);
			if (a == 77)
				flipped += got == (want ^ 0x8d5);
			else if (got != want)
				bad++;
			if (o_dflag(a, b) != r_dflag(a, b) && a != 77)
				badd++;
		}
		printf("flags_bad=%d dflag_bad=%d flipped=%d\n", bad, badd, flipped);
		stats();
		return 0;
	}
	if (!strcmp(mode, "kretprobe")) {
		long a = o_depth(5), b = o_depth(2);
		printf("depth5=%ld depth2=%ld n_entry=%ld n_ret=%ld ret_bad=%ld\n", a, b, n_entry, n_ret, ret_bad);
		stats();
		return 0;
	}
	if (!strcmp(mode, "sigstorm")) {
		long n = argc > 2 ? atol(argv[2]) : 400000;
		struct sigaction sa;
		memset(&sa, 0, sizeof sa);
		sa.sa_handler = on_alarm;
		sa.sa_flags = SA_RESTART;
		sigaction(SIGALRM, &sa, NULL);
		struct itimerval it = {{0, 20}, {0, 20}};
		setitimer(ITIMER_REAL, &it, NULL);
		for (long i = 0; i < n; i++)
			o_tr(i, 0);
		struct itimerval off = {{0, 0}, {0, 0}};
		setitimer(ITIMER_REAL, &off, NULL);
		printf("n=%ld sig=%ld\n", n, n_sig);
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
		printf("bad=%ld n=%ld badregs=%ld", bad, n_oadd, bad_oadd);
		for (int i = 0; i < 8; i++)
			printf(" tid%d=%ld tcbword%d=%d", i, tids[i], i, tcbword[i] != 0);
		printf("\n");
		return 0;
	}
	if (!strcmp(mode, "rawtls")) {
		unsigned char *base = rawtls + 4096;
		memset(rawtls, 0xab, sizeof rawtls);
		*(unsigned char **)base = base;
		static volatile pid_t ctid = 1;
		int f = CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM |
			CLONE_SETTLS | CLONE_CHILD_CLEARTID;
		if (clone(rawfn, rawstack + sizeof rawstack, f, base, NULL, base, &ctid) < 0) {
			perror("clone");
			return 1;
		}
		while (ctid != 0)
			usleep(1000);
		long changed = 0;
		for (unsigned long i = 0; i < sizeof rawtls; i++)
			if (rawtls[i] != 0xab && !(rawtls + i >= base && rawtls + i < base + 8) &&
			    !(rawtls + i >= base + 0x2d0 && rawtls + i < base + 0x2d4)) {
				if (!changed)
					printf("first=%ld ", (long)(rawtls + i - base));
				changed++;
			}
		printf("bad=%ld changed=%ld n=%ld\n", rawbad, changed, n_oadd);
		return 0;
	}
	if (!strcmp(mode, "churn")) {
		/* threads one after the other: libc hands each the previous one's TCB */
		long bad = 0;
		for (long i = 0; i < 40; i++) {
			pthread_t th;
			void *b;
			pthread_create(&th, NULL, churner, (void *)i);
			pthread_join(th, &b);
			bad += (long)b;
		}
		printf("bad=%ld tids=", bad);
		for (int i = 0; i < 40; i++)
			printf("%ld,", tids[i]);
		printf("\n");
		return 0;
	}
	if (!strcmp(mode, "verify")) {
		long a = v_fn(5), b = v_fn(6);
		printf("seq=%ld,%ld violations_seq=%llu\n", a, b, kprewrite_rt_stats.violations);
		long c = v_enter(5), d = v_enter(10);
		printf("jump=%ld,%ld violations=%llu\n", c, d, kprewrite_rt_stats.violations);
		fflush(stdout);
		if (getenv("VMID"))
			printf("mid=%ld\n", v_mid(5)); /* into the middle of an instruction: dies */
		stats();
		return 0;
	}
	if (!strcmp(mode, "clock")) {
		/* trace timestamps against CLOCK_MONOTONIC around each hit, for 50 ms */
		for (int i = 0; i < 250; i++) {
			struct timespec a, b;
			clock_gettime(CLOCK_MONOTONIC, &a);
			o_tr(i, 0);
			clock_gettime(CLOCK_MONOTONIC, &b);
			printf("t%d=%lld,%lld\n", i, a.tv_sec * 1000000000ll + a.tv_nsec, b.tv_sec * 1000000000ll + b.tv_nsec);
			double t0 = now_ns();
			while (now_ns() - t0 < 200000)
				;
		}
		/* a renamed thread's records carry the new name after at most 1 ms */
		prctl(PR_SET_NAME, "renamed");
		double t0 = now_ns();
		while (now_ns() - t0 < 2000000)
			;
		o_tr(1000, 0);
		return 0;
	}
	if (!strcmp(mode, "loop")) { /* for perf: loop <o|off|trace|ro> n */
		long (*volatile f)(long, long) = !strcmp(argv[2], "o") ? o_count : !strcmp(argv[2], "off") ? o_off :
					       !strcmp(argv[2], "trace") ? o_tr : !strcmp(argv[2], "ro") ? o_ret : r_add;
		printf("%s=%.2f\n", argv[2], timeit(f, atol(argv[3])));
		return 0;
	}
	if (!strcmp(mode, "bench")) {
		long n = argc > 2 ? atol(argv[2]) : 1000000;
		double bare = timeit(r_add, n);
		double o = timeit(o_count, n);
		double off = timeit(o_off, n);
		double tr = timeit(o_tr, n);
		double ro = timeit(o_ret, n);
		printf("bare=%.2f o=%.2f off=%.2f trace=%.2f ro=%.2f counted=%ld rets=%ld lost=%llu\n", bare, o, off, tr, ro,
		       n_count, n_ret, kprewrite_rt_stats.lost);
		stats();
		return 0;
	}
	return 2;
}
