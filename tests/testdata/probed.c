/*
 * probed.c - the program probes_test.go rewrites with event probes and runs, original
 * and rewritten, comparing what they print and how they exit, then reading the trace.
 * argv[1] picks a workload. The f_* functions are assembly so that the probed
 * instructions (RIP-relative operands, rel8 branches, call, loop, jrcxz, ret, pushf,
 * indirect call) are known at known offsets.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

int counter = 40;

__attribute__((noinline)) int add(int a, int b)
{
	__asm__ volatile("" ::: "memory");
	return a + b;
}

__attribute__((noinline)) long fact(long n)
{
	if (n <= 1)
		return 1;
	long r = fact(n - 1);
	__asm__ volatile("" : "+r"(r)); /* keep the recursion a recursion */
	return n * r;
}

__attribute__((noinline)) size_t greet(const char *name)
{
	__asm__ volatile("" ::: "memory");
	return strlen(name);
}

int f_rip(int), f_jcc(int), f_call(int), f_loop(int), f_jrcxz(int), f_ret(int), f_jmp(int),
	f_pushf(int), f_indcall(int), f_leaf(int);

__asm__(
	".text\n"
	/* +0 mov counter(%rip),%eax (6); +6 add %edi,%eax (2); +8 mov %eax,counter(%rip) (6) */
	".globl f_rip\n.type f_rip,@function\nf_rip:\n"
	"  mov counter(%rip),%eax\n  add %edi,%eax\n  mov %eax,counter(%rip)\n  ret\n.size f_rip,.-f_rip\n"
	/* +2 je rel8 */
	".globl f_jcc\n.type f_jcc,@function\nf_jcc:\n"
	"  test %edi,%edi\n  je 1f\n  mov $11,%eax\n  ret\n1:\n  mov $22,%eax\n  ret\n.size f_jcc,.-f_jcc\n"
	".globl f_leaf\n.type f_leaf,@function\nf_leaf:\n"
	"  lea 1000(%rdi),%eax\n  ret\n.size f_leaf,.-f_leaf\n"
	/* +1 call rel32 */
	".globl f_call\n.type f_call,@function\nf_call:\n"
	"  push %rbx\n  call f_leaf\n  pop %rbx\n  ret\n.size f_call,.-f_call\n"
	/* +7 loop rel8 */
	".globl f_loop\n.type f_loop,@function\nf_loop:\n"
	"  mov %edi,%ecx\n  xor %eax,%eax\n2:\n  add $3,%eax\n  loop 2b\n  ret\n.size f_loop,.-f_loop\n"
	/* +2 jrcxz rel8 */
	".globl f_jrcxz\n.type f_jrcxz,@function\nf_jrcxz:\n"
	"  mov %edi,%ecx\n  jrcxz 3f\n  mov $5,%eax\n  ret\n3:\n  mov $7,%eax\n  ret\n.size f_jrcxz,.-f_jrcxz\n"
	/* +2 ret */
	".globl f_ret\n.type f_ret,@function\nf_ret:\n"
	"  mov %edi,%eax\n  ret\n.size f_ret,.-f_ret\n"
	/* +0 jmp rel8 */
	".globl f_jmp\n.type f_jmp,@function\nf_jmp:\n"
	"  jmp 4f\n  ud2\n4:\n  lea 9(%rdi),%eax\n  ret\n.size f_jmp,.-f_jmp\n"
	/* +0 pushf: the pushed flags must not show the trap flag of a single-step */
	".globl f_pushf\n.type f_pushf,@function\nf_pushf:\n"
	"  pushf\n  pop %rax\n  and $0x100,%eax\n  add %edi,%eax\n  ret\n.size f_pushf,.-f_pushf\n"
	/* +8 call *%rax: single-stepped, the pushed return address is fixed after the step */
	".globl f_indcall\n.type f_indcall,@function\nf_indcall:\n"
	"  push %rbx\n  lea f_leaf(%rip),%rax\n  call *%rax\n  pop %rbx\n  ret\n.size f_indcall,.-f_indcall\n");

static void basic(void)
{
	int s = 0;
	for (int i = 0; i < 5; i++)
		s = add(s, i * 2 - 3);
	size_t n = greet("world");
	n += greet("kprobes");
	long f = fact(6);
	printf("s=%d n=%zu fact=%ld\n", s, n, f);
	/* one call per statement: the trace order is the program order */
	int r1 = f_rip(2);
	int r2 = f_rip(3);
	int j1 = f_jcc(0);
	int j2 = f_jcc(1);
	int c = f_call(1);
	int l = f_loop(4);
	int z1 = f_jrcxz(0);
	int z2 = f_jrcxz(1);
	int r = f_ret(77);
	int j = f_jmp(1);
	int p = f_pushf(5);
	int ic = f_indcall(2);
	printf("rip=%d,%d jcc=%d,%d call=%d loop=%d jrcxz=%d,%d ret=%d jmp=%d pushf=%d indcall=%d counter=%d\n",
	       r1, r2, j1, j2, c, l, z1, z2, r, j, p, ic, counter);
}

static void *worker(void *arg)
{
	long t = (long)arg, sum = 0;
	for (int i = 0; i < 1000; i++)
		sum += add((int)t, i);
	return (void *)sum;
}

static void threads(void)
{
	pthread_t th[8];
	long total = 0;
	for (long t = 0; t < 8; t++)
		pthread_create(&th[t], NULL, worker, (void *)t);
	for (int t = 0; t < 8; t++) {
		void *r;
		pthread_join(th[t], &r);
		total += (long)r;
	}
	printf("total=%ld\n", total);
}

/* hammer: 4 processes (this one and 3 fork children) of 4 threads, each thread calling
 * add 250,000 times at once: 4,000,000 hits of one probe from 16 threads on every CPU;
 * and f_jmp every 1,000th time (4,000 hits, of an int3 probe where it has one) */
static void *hammer_worker(void *arg)
{
	long sum = 0;
	for (int i = 0; i < 250000; i++) {
		sum += add((int)(long)arg, i);
		if (i % 1000 == 0)
			sum += f_jmp(i);
	}
	return (void *)sum;
}

static void hammer(void)
{
	fflush(stdout);
	pid_t kids[3] = {-1, -1, -1};
	for (int k = 0; k < 3; k++) {
		kids[k] = fork();
		if (kids[k] == 0)
			break;
	}
	pthread_t th[4];
	for (long t = 0; t < 4; t++)
		pthread_create(&th[t], NULL, hammer_worker, (void *)t);
	for (int t = 0; t < 4; t++)
		pthread_join(th[t], NULL);
	for (int k = 0; k < 3; k++) {
		if (kids[k] == 0)
			_exit(0);
	}
	int bad = 0;
	for (int k = 0; k < 3; k++) {
		int st;
		waitpid(kids[k], &st, 0);
		bad += st != 0;
	}
	printf("hammer bad=%d\n", bad);
}

/* storm: a timer signal every 20 us whose handler calls add too, while the main loop
 * calls it 2,000,000 times: signals land inside the count-only detour's restartable
 * sequence (the kernel restarts it), and the handler's hits count on the same CPU */
static volatile long n_sig;

static void on_alarm(int sig)
{
	(void)sig;
	n_sig++;
	add(-1, 0);
}

static void storm(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_alarm;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGALRM, &sa, NULL);
	struct itimerval it = {{0, 20}, {0, 20}};
	setitimer(ITIMER_REAL, &it, NULL);
	long sum = 0, n = 2000000;
	for (long i = 0; i < n; i++)
		sum += add((int)i, 1);
	struct itimerval off = {{0, 0}, {0, 0}};
	setitimer(ITIMER_REAL, &off, NULL);
	printf("storm n=%ld sig=%ld sum=%ld\n", n, n_sig, sum);
}

static void forked(void)
{
	add(100, 1);
	add(100, 2);
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		for (int i = 1; i <= 3; i++)
			add(200, i);
		_exit(0);
	}
	int st;
	waitpid(pid, &st, 0);
	add(100, 3);
	printf("child status %d\n", st);
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "basic";
	if (!strcmp(mode, "basic"))
		basic();
	else if (!strcmp(mode, "threads"))
		threads();
	else if (!strcmp(mode, "fork"))
		forked();
	else if (!strcmp(mode, "hammer"))
		hammer();
	else if (!strcmp(mode, "storm"))
		storm();
	else if (!strcmp(mode, "recurse"))
		printf("fact=%ld\n", fact(argc > 2 ? atol(argv[2]) : 10));
	else if (!strcmp(mode, "crash") || !strcmp(mode, "abort") || !strcmp(mode, "exit")) {
		add(1, 1);
		add(2, 2);
		add(3, 3);
		printf("about to %s\n", mode);
		fflush(stdout);
		if (!strcmp(mode, "crash"))
			*(volatile int *)(long)argc = 0;
		if (!strcmp(mode, "abort"))
			abort();
		_exit(7);
	} else if (!strcmp(mode, "diff")) {
		for (int i = -2; i < 4; i++)
			add(i, i * 1000);
		greet("hello");
		greet("");
		greet("kprewrite differential");
		printf("fact=%ld\n", fact(5));
	} else {
		fprintf(stderr, "unknown mode %s\n", mode);
		return 2;
	}
	return 3;
}
