/*
 * fresh.c - what memory a process has not used before costs to make present, against
 * the same memory again: the floor under a burst's backlog (issue 49). Maps MIB MiB of
 * anonymous memory on transparent huge pages, makes it present (MADV_POPULATE_WRITE)
 * and writes it once, ROUNDS times in one process (unmapped between: the kernel gives
 * the same pages back), and prints each round's populate in ms and GB/s. On this VM the
 * first round costs ~1-2 ns a byte (0.5 GB/s: the hypervisor backs the pages then), the
 * next ones ~0.05; a process started right after another may get its freed pages
 * still backed (fast from the first round), one started later does not.
 *
 *   gcc -O2 -o fresh scripts/bench/fresh.c && ./fresh 256 4
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	size_t n = (size_t)(argc > 1 ? atol(argv[1]) : 256) << 20;
	int rounds = argc > 2 ? atoi(argv[2]) : 4;
	for (int k = 0; k < rounds; k++) {
		char *p = mmap(0, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED) {
			perror("mmap");
			return 1;
		}
		madvise(p, n, MADV_HUGEPAGE);
		double t0 = now();
		madvise(p, n, 23 /* MADV_POPULATE_WRITE */);
		double t1 = now();
		memset(p, 1, n);
		double t2 = now();
		printf("round %d: populate %.1f ms (%.2f GB/s), then a write of it %.1f ms\n", k + 1, (t1 - t0) * 1e3,
		       n / (t1 - t0) / 1e9, (t2 - t1) * 1e3);
		munmap(p, n);
	}
	return 0;
}
