/*
 * keep.c - the floor under a record that is kept (issue 49): bench-floor.sh's loop, each
 * call followed by rdtsc and a 32-byte store, into 64 KiB blocks that a second thread
 * writes to a file (O_DIRECT, straight from the block) and gives back, as a recorder
 * does. When a burst outruns the disk the writer does not drop: it takes a block of new
 * memory (anonymous, transparent huge pages: the cheapest new memory this machine has),
 * which a third thread makes present ahead of it (MADV_POPULATE_WRITE, AHEAD_MIB ahead
 * of the writer's growth, as kprewrite's kprw-ahead thread does). So it pays what keeping
 * every record of the burst costs the hardware and nothing else: no header, no point id
 * lookup, no file-backed ring, one queue store a block.
 *
 * Prints the loop's CPU time (the writer thread's) and wall time in ns a hit, then on
 * stderr the blocks grown and written. The file is FILE (default keep.out), removed at
 * the end. To compare with what kprewrite record does: KEEP_MEM=PATH puts the blocks in
 * a new sparse file's shared mapping (KEEP_MEM=memfd: shared memory) instead of
 * anonymous memory, KEEP_ZERO=1 has the drainer zero a block before it gives it back,
 * KEEP_COPY=1 has it copy the block into a buffer of its own and write that.
 *
 *   gcc -O2 -pthread -o keep scripts/bench/keep.c && ./keep 20000000 [FILE]
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define BLK (64ul << 10)
#define RING_BLOCKS 512ul    /* 32 MiB present from the start, as record's --buffer-size */
#define MAX_BLOCKS 16384ul   /* 1 GiB of address space */
#define AHEAD (8ul << 20)    /* new memory made present ahead of the growth */

__attribute__((noinline)) long work(long a, long b)
{
	__asm__ volatile("");
	return a + b;
}

struct rec {
	unsigned long ts, a, b, id;
};

static char *area;
/* single-producer single-consumer queues of block numbers */
static unsigned full[MAX_BLOCKS], freeq[MAX_BLOCKS];
static unsigned long full_head, full_tail, free_head, free_tail; /* head: next to take */
static unsigned long grown = RING_BLOCKS; /* blocks of area in use (the writer's) */
static unsigned long ready = RING_BLOCKS * BLK; /* bytes made present */
static int done;

static unsigned long load(unsigned long *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static void store(unsigned long *p, unsigned long v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

static double now(clockid_t c)
{
	struct timespec t;
	clock_gettime(c, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

static inline unsigned long tsc(void)
{
	unsigned lo, hi;
	__asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
	return (unsigned long)hi << 32 | lo;
}

/* next_block hands block b to the drainer and takes a free one, or a new one */
static struct rec *next_block(unsigned b)
{
	unsigned long t = full_tail;
	full[t % MAX_BLOCKS] = b;
	store(&full_tail, t + 1);
	unsigned long h = free_head;
	if (h != load(&free_tail)) {
		store(&free_head, h + 1);
		return (struct rec *)(area + freeq[h % MAX_BLOCKS] * BLK);
	}
	if (grown == MAX_BLOCKS) {
		fprintf(stderr, "keep: out of blocks\n");
		exit(1);
	}
	unsigned long g = grown;
	__atomic_store_n(&grown, g + 1, __ATOMIC_RELAXED);
	return (struct rec *)(area + g * BLK);
}

static void *drain(void *arg)
{
	int fd = *(int *)arg;
	off_t off = 0;
	int zero = getenv("KEEP_ZERO") != 0;
	char *copy = getenv("KEEP_COPY") ? aligned_alloc(4096, BLK) : 0;
	for (;;) {
		unsigned long h = full_head;
		if (h == load(&full_tail)) {
			if (__atomic_load_n(&done, __ATOMIC_ACQUIRE) && h == load(&full_tail))
				return 0;
			sched_yield();
			continue;
		}
		unsigned b = full[h % MAX_BLOCKS];
		char *src = area + b * BLK;
		if (copy) { /* as record's recorder: into its own buffer, written from there */
			memcpy(copy, src, BLK);
			src = copy;
		}
		if (zero) /* as record's recorder: the block given back zeroed */
			memset(area + b * BLK, 0, BLK);
		if (pwrite(fd, src, BLK, off) != (ssize_t)BLK) {
			perror("keep: pwrite");
			exit(1);
		}
		off += BLK;
		store(&full_head, h + 1);
		unsigned long t = free_tail;
		freeq[t % MAX_BLOCKS] = b;
		store(&free_tail, t + 1);
	}
}

static void *populate(void *arg)
{
	(void)arg;
	while (!__atomic_load_n(&done, __ATOMIC_ACQUIRE)) {
		unsigned long want = __atomic_load_n(&grown, __ATOMIC_RELAXED) * BLK + AHEAD;
		if (want > MAX_BLOCKS * BLK)
			want = MAX_BLOCKS * BLK;
		if (ready >= want) {
			sched_yield();
			continue;
		}
		madvise(area + ready, 2ul << 20, 23 /* MADV_POPULATE_WRITE */);
		ready += 2ul << 20;
	}
	return 0;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 20000000, s = 0;
	const char *path = argc > 2 ? argv[2] : "keep.out";
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0644);
	if (fd < 0) {
		perror(path);
		return 1;
	}
	const char *mem = getenv("KEEP_MEM"); /* file: a new sparse file's shared mapping; memfd */
	if (mem && *mem) {
		int m = !strcmp(mem, "memfd") ? memfd_create("keep", 0) : open(mem, O_RDWR | O_CREAT | O_TRUNC, 0644);
		if (m < 0 || ftruncate(m, MAX_BLOCKS * BLK)) {
			perror(mem);
			return 1;
		}
		area = mmap(0, MAX_BLOCKS * BLK, PROT_READ | PROT_WRITE, MAP_SHARED, m, 0);
		if (strcmp(mem, "memfd"))
			unlink(mem);
	} else
		area = mmap(0, MAX_BLOCKS * BLK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (area == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	madvise(area, MAX_BLOCKS * BLK, MADV_HUGEPAGE);
	memset(area, 0, RING_BLOCKS * BLK); /* present, as the recorder's ring is */
	for (unsigned b = 1; b < RING_BLOCKS; b++)
		freeq[free_tail++] = b;
	pthread_t d, p;
	pthread_create(&d, 0, drain, &fd);
	pthread_create(&p, 0, populate, 0);
	if (getenv("BENCH_CPU")) { /* this thread only: the others keep their CPUs */
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(atoi(getenv("BENCH_CPU")), &set);
		sched_setaffinity(0, sizeof set, &set);
	}
	unsigned b = 0;
	struct rec *r = (struct rec *)area, *end = r + BLK / sizeof *r;
	double c0 = now(CLOCK_THREAD_CPUTIME_ID), t0 = now(CLOCK_MONOTONIC);
	for (long i = 0; i < n; i++) {
		s += work(1, i);
		r->ts = tsc();
		r->a = 1;
		r->b = i;
		r->id = 7;
		if (++r == end) {
			r = next_block(b);
			b = ((char *)r - area) / BLK;
			end = r + BLK / sizeof *r;
		}
	}
	double c1 = now(CLOCK_THREAD_CPUTIME_ID), t1 = now(CLOCK_MONOTONIC);
	__atomic_store_n(&done, 1, __ATOMIC_RELEASE);
	pthread_join(d, 0);
	pthread_join(p, 0);
	/* the last partial block is not written: the floor of the loop, not of the end */
	fprintf(stderr, "keep: %lu blocks grown past the ring, %lu written\n", grown - RING_BLOCKS, full_head);
	printf("%.2f %.2f\n", (c1 - c0) / n, (t1 - t0) / n);
	unlink(path);
	return s == 42;
}
