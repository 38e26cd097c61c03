/*
 * budget.c - what this host charges for a detour's instructions beside rdtsc (issue 49):
 * bench-floor.sh's probe floor (a detour on work's entry that saves the flags and what
 * it uses, reads the TSC, takes its thread's place in TLS and stores a 32-byte record)
 * with M compares of a word that holds 0 after the clock read, each with its branch
 * (2M instructions, all predicted, on one cache line). kprewrite's hot record adds ~120
 * instructions to the probe floor's ~20 (M = 60).
 *
 *   gcc -O2 -o budget scripts/bench/budget.c && ./budget N M
 *
 * M is one of 0 10 20 30 40 50 60; M = -1 runs the unprobed loop, M = -2 the tsc floor
 * (rdtsc and the store in the loop, no detour). Prints the calling thread's CPU ns per
 * call; BENCH_CPU=N pins it to CPU N.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

__attribute__((noinline)) long work(long a, long b)
{
	__asm__ volatile("");
	return a + b;
}
struct rec {
	unsigned long ts, a, b, id;
};
#define RING_RECS ((32ul << 20) / sizeof(struct rec))
_Static_assert(RING_RECS - 1 == 0xfffff, "the detours' mask");
static struct rec ring[RING_RECS] __attribute__((aligned(64)));
struct rec *ringp = ring;
__thread unsigned long tidx;
long budget_zero;

#define DETOUR(M)                                                                               \
	long pf##M(long a, long b);                                                              \
	__asm__(".text\n.globl pf" #M "\npf" #M ":\n"                                            \
		"push %rax\n lahf\n seto %al\n push %rax\n push %rdx\n push %rcx\n"              \
		"mov %fs:tidx@tpoff, %rcx\n lea 1(%rcx), %rdx\n and $0xfffff, %edx\n"            \
		"mov %rdx, %fs:tidx@tpoff\n shl $5, %rcx\n add ringp(%rip), %rcx\n"              \
		"rdtsc\n shl $32, %rdx\n or %rdx, %rax\n"                                        \
		".rept " #M "\n cmpq $0, budget_zero(%rip)\n jne budget_bad\n .endr\n"           \
		"mov %rax, (%rcx)\n mov %rdi, 8(%rcx)\n mov %rsi, 16(%rcx)\n movq $7, 24(%rcx)\n" \
		"pop %rcx\n pop %rdx\n pop %rax\n add $0x7f, %al\n sahf\n pop %rax\n jmp work\n");
DETOUR(0)
DETOUR(10)
DETOUR(20)
DETOUR(30)
DETOUR(40)
DETOUR(50)
DETOUR(60)
__asm__(".text\nbudget_bad: ud2\n");

static double cpu_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv)
{
	if (argc != 3)
		return 2;
	long n = atol(argv[1]), m = atol(argv[2]), s = 0;
	long (*fn)(long, long) = NULL;
	switch (m) {
	case 0: fn = pf0; break;
	case 10: fn = pf10; break;
	case 20: fn = pf20; break;
	case 30: fn = pf30; break;
	case 40: fn = pf40; break;
	case 50: fn = pf50; break;
	case 60: fn = pf60; break;
	case -1: case -2: break;
	default: return 2;
	}
	memset(ring, 0, sizeof ring); /* present, as the recorder's ring is */
	if (getenv("BENCH_CPU")) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(atoi(getenv("BENCH_CPU")), &set);
		sched_setaffinity(0, sizeof set, &set);
	}
	double c0 = cpu_ns();
	if (fn) {
		for (long i = 0; i < n; i++)
			s += fn(1, i);
	} else {
		for (long i = 0; i < n; i++) {
			s += work(1, i);
			if (m == -2) {
				struct rec *r = &ring[i & (RING_RECS - 1)];
				unsigned lo, hi;
				__asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
				r->ts = (unsigned long)hi << 32 | lo;
				r->a = 1;
				r->b = i;
				r->id = 7;
			}
		}
	}
	printf("%.2f\n", (cpu_ns() - c0) / n);
	return s == 42;
}
