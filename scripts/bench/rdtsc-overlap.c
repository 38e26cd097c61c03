/*
 * rdtsc-overlap.c - what work beside an rdtsc costs (issue 49): a loop of N iterations,
 * each one asm block and a store of its result into a 8 MiB ring, timed by the thread's
 * CPU time (ns an iteration). The block is one of:
 *   none         nothing
 *   tsc          rdtsc
 *   chain        20 dependent imuls (a ~60-cycle chain of few instructions)
 *   loads        60 loads of one word (many instructions, no chain)
 *   adds         two chains of 60 register adds
 *   cmps         60 compares of a word that holds 0, each with its branch (predicted)
 * and each of the last four with "-tsc" (the work, then rdtsc) or "tsc-" before it (rdtsc,
 * then the work). On this repository's Zen 3 VM (2026-12-02) the rdtsc (13.3-13.6 ns
 * alone) overlaps a long chain of few instructions almost whole (chain 22.0-22.5,
 * chain-tsc 23.5-24.2) but many instructions only in part, predicted compares and their
 * branches least (cmps 13.3-18.1, cmps-tsc 22.8-26.6): a record's path is paid largely
 * instruction by instruction beside the clock (docs/benchmarks.md, "Where an inline
 * record's time goes").
 *
 *   gcc -O2 -o rdtsc-overlap scripts/bench/rdtsc-overlap.c
 *   for m in tsc loads loads-tsc cmps cmps-tsc tsc-cmps; do taskset -c 0 ./rdtsc-overlap 10000000 $m; done
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

unsigned long ring[1 << 20];
unsigned long word[8];

#define CHAIN10 "imul %%rcx, %%rcx\n imul %%rcx, %%rcx\n imul %%rcx, %%rcx\n imul %%rcx, %%rcx\n imul %%rcx, %%rcx\n" \
		"imul %%rcx, %%rcx\n imul %%rcx, %%rcx\n imul %%rcx, %%rcx\n imul %%rcx, %%rcx\n imul %%rcx, %%rcx\n"
#define CMPS ".rept 60\n cmpq $0, word+16(%%rip)\n jne 9f\n .endr\n9:\n"
#define ADDS ".rept 60\n add $1, %%rsi\n add $1, %%rdi\n .endr\n"
#define LOADS ".rept 60\n mov word+16(%%rip), %%rsi\n .endr\n"

/* LOOP runs body n times when mode is name (one loop a mode: no test in the loop) */
#define LOOP(name, body)                                               \
	if (!strcmp(mode, name)) {                                     \
		for (long i = 0; i < n; i++) {                         \
			unsigned long lo = 1, hi = 1;                  \
			body;                                          \
			ring[i & ((1 << 20) - 1)] = (hi << 32 | lo) ^ c; \
		}                                                      \
		goto done;                                             \
	}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: rdtsc-overlap ITERATIONS MODE\n");
		return 2;
	}
	long n = atol(argv[1]);
	const char *mode = argv[2];
	unsigned long c = 3;
	double t0 = now();
	LOOP("none", )
	LOOP("tsc", __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi)))
	LOOP("chain", __asm__ volatile(CHAIN10 CHAIN10 : "+c"(c)))
	LOOP("chain-tsc", __asm__ volatile(CHAIN10 CHAIN10 "rdtsc" : "=a"(lo), "=d"(hi), "+c"(c)))
	LOOP("tsc-chain", __asm__ volatile("rdtsc\n" CHAIN10 CHAIN10 : "=a"(lo), "=d"(hi), "+c"(c)))
	LOOP("loads", __asm__ volatile(LOADS ::: "rsi", "memory"))
	LOOP("loads-tsc", __asm__ volatile(LOADS "rdtsc" : "=a"(lo), "=d"(hi) : : "rsi", "memory"))
	LOOP("tsc-loads", __asm__ volatile("rdtsc\n" LOADS : "=a"(lo), "=d"(hi) : : "rsi", "memory"))
	LOOP("adds", __asm__ volatile(ADDS ::: "rsi", "rdi", "cc"))
	LOOP("adds-tsc", __asm__ volatile(ADDS "rdtsc" : "=a"(lo), "=d"(hi) : : "rsi", "rdi", "cc"))
	LOOP("tsc-adds", __asm__ volatile("rdtsc\n" ADDS : "=a"(lo), "=d"(hi) : : "rsi", "rdi", "cc"))
	LOOP("cmps", __asm__ volatile(CMPS ::: "memory", "cc"))
	LOOP("cmps-tsc", __asm__ volatile(CMPS "rdtsc" : "=a"(lo), "=d"(hi) : : "memory", "cc"))
	LOOP("tsc-cmps", __asm__ volatile("rdtsc\n" CMPS : "=a"(lo), "=d"(hi) : : "memory", "cc"))
	fprintf(stderr, "rdtsc-overlap: no mode %s\n", mode);
	return 2;
done:
	printf("%s %.2f\n", mode, (now() - t0) / n);
	return 0;
}
