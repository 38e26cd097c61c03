/*
 * drain.c - the floor of a record that leaves the program (issue 49): what rdtsc and a
 * 32-byte store cost when the ring they go into is drained to a file while the program
 * runs, as `kprewrite record` drains its ring, with no runtime at all. One thread calls
 * work(1, i) N times, each call followed by rdtsc and a 32-byte store into its 64 KiB
 * block of a 32 MiB ring: a present MAP_SHARED mapping of FILE's first 32 MiB. When its
 * block is full it takes the next free one (it waits for one, counted: a floor loses
 * nothing). A second thread, the drainer, copies each full block into a page-aligned
 * 1 MiB buffer, writes the full buffers past the ring with O_DIRECT (through the page
 * cache where the file system refuses it), zeroes the block and gives it back: the
 * recorder's work (internal/recorder), nothing else. MODE:
 *   drain:    as above;
 *   drain-pf: the writer also asks for the line 1 KiB ahead exclusive (prefetchw), as
 *             the runtime's rec_at does;
 *   copy, copy-pf: the same without the disk (the drainer copies and zeroes only).
 * Prints the calling thread's CPU ns and wall ns per call, less the time it waited for a
 * free block (a disk slower than the writer: the runtime loses those records, counted,
 * and this floor would count the disk), and the wait on stderr. With BENCH_CPU=N the calling thread runs on CPU N, the drainer anywhere.
 *
 *   gcc -O2 -o drain scripts/bench/drain.c -lpthread
 *   ./drain 20000000 drain /var/tmp/f
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
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
__attribute__((noinline)) long work(long a, long b) { __asm__ volatile(""); return a + b; }
struct rec { unsigned long ts, a, b, id; };
static double now(clockid_t c) { struct timespec t; clock_gettime(c, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
static inline unsigned long tsc(void) { unsigned lo, hi; __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi)); return (unsigned long)hi << 32 | lo; }

#define RING (32ul << 20)
#define BLOCK (64ul << 10)
#define NBLK (RING / BLOCK)
#define BUF (1ul << 20)
static char *ring;
static int fd, dfd, disk;
/* blocks handed out by the drainer (given), full ones left by the writer (done), and
 * the queue of free block indexes between them */
static unsigned long given, done, stop;
static unsigned queue[NBLK], full[NBLK];

static void *drainer(void *p)
{
	char *buf = aligned_alloc(4096, BUF);
	unsigned long used = 0, out = RING, seen = 0;
	(void)p;
	memset(buf, 0, BUF);
	for (;;) {
		unsigned long d = __atomic_load_n(&done, __ATOMIC_ACQUIRE);
		if (seen == d) {
			if (__atomic_load_n(&stop, __ATOMIC_ACQUIRE))
				return 0;
			usleep(100);
			continue;
		}
		unsigned b = full[seen % NBLK];
		memcpy(buf + used, ring + b * BLOCK, BLOCK);
		used += BLOCK;
		if (used == BUF) {
			if (disk && pwrite(dfd, buf, BUF, out) != (ssize_t)BUF && pwrite(fd, buf, BUF, out) != (ssize_t)BUF)
				perror("pwrite");
			out += BUF;
			used = 0;
		}
		memset(ring + b * BLOCK, 0, BLOCK);
		unsigned long g = given;
		queue[g % NBLK] = b;
		__atomic_store_n(&given, g + 1, __ATOMIC_RELEASE);
		seen++;
	}
}

static void pin_self(void)
{
	const char *c = getenv("BENCH_CPU");
	if (c) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(atoi(c), &set);
		sched_setaffinity(0, sizeof set, &set);
	}
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: %s N drain|drain-pf|copy|copy-pf FILE\n", argv[0]);
		return 2;
	}
	long n = atol(argv[1]), s = 0, waits = 0;
	int pf = !strcmp(argv[2] + strlen(argv[2]) - 3, "-pf");
	disk = !strncmp(argv[2], "drain", 5);
	double wait = 0;
	fd = open(argv[3], O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0 || ftruncate(fd, RING)) {
		perror(argv[3]);
		return 1;
	}
	dfd = open(argv[3], O_WRONLY | O_DIRECT);
	if (dfd < 0)
		dfd = fd;
	ring = mmap(0, RING, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	madvise(ring, RING, MADV_POPULATE_WRITE);
	for (unsigned i = 1; i < NBLK; i++)
		queue[i - 1] = i;
	given = NBLK - 1;
	pthread_t th;
	pthread_create(&th, 0, drainer, 0);
	pin_self();
	unsigned long taken = 0, blk = 0;
	struct rec *r = (struct rec *)ring, *end = (struct rec *)(ring + BLOCK);
	double c0 = now(CLOCK_THREAD_CPUTIME_ID), t0 = now(CLOCK_MONOTONIC);
	for (long i = 0; i < n; i++) {
		s += work(1, i);
		if (r == end) {
			full[done % NBLK] = blk;
			__atomic_store_n(&done, done + 1, __ATOMIC_RELEASE);
			if (taken >= __atomic_load_n(&given, __ATOMIC_ACQUIRE)) {
				double w0 = now(CLOCK_THREAD_CPUTIME_ID);
				while (taken >= __atomic_load_n(&given, __ATOMIC_ACQUIRE))
					waits++;
				wait += now(CLOCK_THREAD_CPUTIME_ID) - w0;
			}
			blk = queue[taken++ % NBLK];
			r = (struct rec *)(ring + blk * BLOCK);
			end = (struct rec *)(ring + (blk + 1) * BLOCK);
		}
		if (pf)
			__asm__ volatile("prefetchw %0" : : "m"(((char *)r)[1024]));
		r->ts = tsc(); r->a = 1; r->b = i; r->id = 7;
		r++;
	}
	double c1 = now(CLOCK_THREAD_CPUTIME_ID), t1 = now(CLOCK_MONOTONIC);
	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	pthread_join(th, 0);
	printf("%.2f %.2f\n", (c1 - c0 - wait) / n, (t1 - t0 - wait) / n);
	fprintf(stderr, "waited %ld spins, %.0f ns\n", waits, wait);
	unlink(argv[3]);
	return s == 42;
}
