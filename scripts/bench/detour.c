/*
 * detour.c - the least a detoured record can cost (issue 49): one thread calls f(1, i)
 * N times, where f, by MODE, is
 *   none:  a plain function (the unprobed loop);
 *   min:   a function whose first instruction is a 5-byte jmp to a detour (as a
 *          jump-optimized site's) that keeps %rax %rdx %rcx below the red zone, reads
 *          the TSC, stores a 32-byte record (time, a, b, an id) at the thread's ring
 *          pointer (a TLS word), advances it and jumps back: the floor of a record
 *          written by a per-site detour;
 *   flags: min keeping the arithmetic flags too (lahf/seto, sahf);
 *   full:  the shape kprewrite's detours have: every register and the flags saved as a
 *          struct pt_regs, the stack aligned, a C function called that reads the time
 *          and stores the record from the saved registers, everything restored (popfq).
 * Prints the calling thread's CPU ns per call (on CPU 0).
 *
 *   gcc -O2 -o detour scripts/bench/detour.c
 *   for m in none min flags full; do ./detour 20000000 $m; done
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#define RING (32ul << 20)
__thread char *tp; /* the thread's next record */
static char ring[RING] __attribute__((aligned(64)));
static double now(clockid_t c) { struct timespec t; clock_gettime(c, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
__attribute__((noinline)) long plain(long a, long b) { __asm__ volatile(""); return a + b; }
long det_min(long, long), det_flags(long, long), det_full(long, long);
__asm__(".text\n"
	"det_min: jmp 1f\n"
	"2: lea (%rdi,%rsi),%rax\n ret\n"
	"1: lea -128(%rsp),%rsp\n push %rax\n push %rdx\n push %rcx\n"
	" mov %fs:tp@tpoff,%rcx\n rdtsc\n shl $32,%rdx\n or %rdx,%rax\n"
	" mov %rax,(%rcx)\n mov %rdi,8(%rcx)\n mov %rsi,16(%rcx)\n movq $7,24(%rcx)\n"
	" add $32,%rcx\n mov %rcx,%fs:tp@tpoff\n"
	" pop %rcx\n pop %rdx\n pop %rax\n lea 128(%rsp),%rsp\n jmp 2b\n"
	"det_flags: jmp 1f\n"
	"2: lea (%rdi,%rsi),%rax\n ret\n"
	"1: lea -128(%rsp),%rsp\n push %rax\n push %rdx\n push %rcx\n lahf\n seto %al\n push %rax\n"
	" mov %fs:tp@tpoff,%rcx\n rdtsc\n shl $32,%rdx\n or %rdx,%rax\n"
	" mov %rax,(%rcx)\n mov %rdi,8(%rcx)\n mov %rsi,16(%rcx)\n movq $7,24(%rcx)\n"
	" add $32,%rcx\n mov %rcx,%fs:tp@tpoff\n"
	" pop %rax\n add $0x7f,%al\n sahf\n pop %rcx\n pop %rdx\n pop %rax\n lea 128(%rsp),%rsp\n jmp 2b\n"
	"det_full: jmp 1f\n"
	"2: lea (%rdi,%rsi),%rax\n ret\n"
	"1: lea -128(%rsp),%rsp\n pushfq\n push %rax\n push %rcx\n push %rdx\n push %rsi\n push %rdi\n"
	" push %r8\n push %r9\n push %r10\n push %r11\n push %rbx\n push %rbp\n push %r12\n push %r13\n"
	" push %r14\n push %r15\n"
	" mov %rsp,%rdi\n mov %rsp,%rbx\n and $-16,%rsp\n call rec_c\n mov %rbx,%rsp\n"
	" pop %r15\n pop %r14\n pop %r13\n pop %r12\n pop %rbp\n pop %rbx\n pop %r11\n pop %r10\n"
	" pop %r9\n pop %r8\n pop %rdi\n pop %rsi\n pop %rdx\n pop %rcx\n pop %rax\n"
	" popfq\n lea 128(%rsp),%rsp\n jmp 2b\n");
struct regs { unsigned long r15, r14, r13, r12, bp, bx, r11, r10, r9, r8, di, si, dx, cx, ax, fl; };
void rec_c(struct regs *r)
{
	unsigned lo, hi;
	__asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
	unsigned long *p = (unsigned long *)tp;
	p[0] = (unsigned long)hi << 32 | lo;
	p[1] = r->di;
	p[2] = r->si;
	p[3] = 7;
	tp += 32;
}
int main(int argc, char **argv)
{
	long n = argc > 2 ? atol(argv[1]) : 0, s = 0;
	const char *m = argc > 2 ? argv[2] : "";
	long (*f)(long, long) = !strcmp(m, "min") ? det_min : !strcmp(m, "flags") ? det_flags : !strcmp(m, "full") ? det_full : plain;
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(0, &set);
	sched_setaffinity(0, sizeof set, &set);
	memset(ring, 0, RING);
	double c0 = now(CLOCK_THREAD_CPUTIME_ID);
	for (long i = 0; i < n; i++) {
		if ((i & (RING / 32 - 1)) == 0)
			tp = ring;
		s += f(1, i);
	}
	double c1 = now(CLOCK_THREAD_CPUTIME_ID);
	printf("%s %.2f\n", m, n ? (c1 - c0) / n : 0);
	return s == 42;
}
