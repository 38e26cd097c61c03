/*
 * direct.c - the floor of a record written into a new trace file (a program run
 * directly writes its own) against one written into a reused ring (under `kprewrite
 * record`): one thread calls work(1, i) N times, each call followed, by MODE, by
 *   none: nothing (the unprobed loop; rewritten, the traced program);
 *   ring: rdtsc and a 32-byte store into a reused, present 32 MiB ring;
 *   file: the same store into FILE's shared mapping, a new sparse file sized for every
 *         record, whose 128 KiB chunks a second thread makes present ahead of the
 *         writer with MADV_POPULATE_WRITE, 6 chunks ahead (the runtime's rt_ahead.c;
 *         the writer readies a chunk itself when it gets there first);
 *   drain, drain-pf, copy, copy-pf: the floor of a record that leaves the program, as
 *         `kprewrite record` drains its ring (issue 49): the store into the writer's
 *         64 KiB block of a present 32 MiB MAP_SHARED ring in FILE; a full block's
 *         writer takes the next free one (waiting for one, counted: a floor loses
 *         nothing), and a second thread, the drainer, copies each full block into a
 *         page-aligned 1 MiB buffer, zeroes it and gives it back; drain also writes
 *         the full buffers past the ring with O_DIRECT (copy does not: the memory's
 *         part alone); -pf: the writer asks for the line 1 KiB ahead exclusive
 *         (prefetchw), as the runtime's rec_at does. The time the writer waited for a
 *         free block (a disk slower than it: the runtime loses those records, counted)
 *         is left out of its figures and printed on stderr.
 * Prints the calling thread's CPU ns and the wall ns per call. With BENCH_CPU=N the
 * calling thread runs on CPU N (the readier or the drainer, like the runtime's thread
 * and the recorder, anywhere).
 *
 *   gcc -O2 -o direct scripts/bench/direct.c -lpthread
 *   ./direct 20000000 none; ./direct 20000000 ring; ./direct 20000000 file /var/tmp/f
 *   ./direct 20000000 copy-pf /var/tmp/f
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
#ifndef MADV_HUGEPAGE
#define MADV_HUGEPAGE 14
#endif
__attribute__((noinline)) long work(long a, long b) { __asm__ volatile(""); return a + b; }
struct rec { unsigned long ts, a, b, id; };
static double now(clockid_t c) { struct timespec t; clock_gettime(c, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
static inline unsigned long tsc(void) { unsigned lo, hi; __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi)); return (unsigned long)hi << 32 | lo; }
#define CHUNK (128ul << 10)
#define AHEAD 6
static char *area;
static unsigned long size, want, ready;
static void *readier(void *p)
{
	for (;;) {
		unsigned long w = __atomic_load_n(&want, __ATOMIC_ACQUIRE);
		if (w == ~0ul)
			return 0;
		if (ready < w && ready < size) {
			madvise(area + ready, CHUNK, MADV_POPULATE_WRITE);
			__atomic_store_n(&ready, ready + CHUNK, __ATOMIC_RELEASE);
		} else
			usleep(50);
	}
}
/* pin_self puts the calling thread (only: threads made before keep their CPUs) on
 * BENCH_CPU when it is set */
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

/* the drained ring (drain, copy): blocks handed out by the drainer (given), full ones
 * left by the writer (done), and the queue of free block indexes between them */
#define RING (32ul << 20)
#define BLOCK (64ul << 10)
#define NBLK (RING / BLOCK)
#define BUF (1ul << 20)
static int fd, dfd, disk;
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
		memcpy(buf + used, area + b * BLOCK, BLOCK);
		used += BLOCK;
		if (used == BUF) {
			if (disk && pwrite(dfd, buf, BUF, out) != (ssize_t)BUF && pwrite(fd, buf, BUF, out) != (ssize_t)BUF)
				perror("pwrite");
			out += BUF;
			used = 0;
		}
		memset(area + b * BLOCK, 0, BLOCK);
		unsigned long g = given;
		queue[g % NBLK] = b;
		__atomic_store_n(&given, g + 1, __ATOMIC_RELEASE);
		seen++;
	}
}

/* drained runs the drain and copy modes */
static int drained(long n, const char *mode, const char *path)
{
	long s = 0, waits = 0;
	int pf = strstr(mode, "-pf") != NULL;
	double wait = 0;
	disk = !strncmp(mode, "drain", 5);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0 || ftruncate(fd, RING)) {
		perror(path);
		return 1;
	}
	dfd = open(path, O_WRONLY | O_DIRECT);
	if (dfd < 0)
		dfd = fd;
	area = mmap(0, RING, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	/* on 2 MiB pages where the file system gives them, as the runtime and the recorder
	 * map the trace file: a 4 KiB page's first touch in a process costs ~6.4 us on this
	 * VM even once populated, 2.6 ns a record over this run's 8,192 pages */
	madvise(area, RING, MADV_HUGEPAGE);
	madvise(area, RING, MADV_POPULATE_WRITE);
	for (unsigned i = 1; i < NBLK; i++)
		queue[i - 1] = i;
	given = NBLK - 1;
	pthread_t th;
	pthread_create(&th, 0, drainer, 0);
	pin_self();
	unsigned long taken = 0, blk = 0;
	struct rec *r = (struct rec *)area, *end = (struct rec *)(area + BLOCK);
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
			r = (struct rec *)(area + blk * BLOCK);
			end = (struct rec *)(area + (blk + 1) * BLOCK);
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
	unlink(path);
	return s == 42;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s N none|ring|file|drain|drain-pf|copy|copy-pf [FILE]\n", argv[0]);
		return 2;
	}
	long n = atol(argv[1]), s = 0;
	const char *mode = argv[2];
	if (!strncmp(mode, "drain", 5) || !strncmp(mode, "copy", 4)) {
		if (argc < 4) {
			fprintf(stderr, "%s: want FILE\n", mode);
			return 2;
		}
		return drained(n, mode, argv[3]);
	}
	struct rec *ring;
	unsigned long mask;
	pthread_t th;
	if (!strcmp(mode, "none")) {
		pin_self();
		double c0 = now(CLOCK_THREAD_CPUTIME_ID), t0 = now(CLOCK_MONOTONIC);
		for (long i = 0; i < n; i++)
			s += work(1, i);
		double c1 = now(CLOCK_THREAD_CPUTIME_ID), t1 = now(CLOCK_MONOTONIC);
		printf("%.2f %.2f\n", (c1 - c0) / n, (t1 - t0) / n);
		return s == 42;
	}
	if (!strcmp(mode, "ring")) {
		size = 32ul << 20;
		ring = aligned_alloc(64, size);
		memset(ring, 0, size);
		mask = size / sizeof *ring - 1;
	} else {
		size = ((n * sizeof(struct rec)) / CHUNK + 1) * CHUNK;
		int fd = open(argv[3], O_RDWR | O_CREAT | O_TRUNC, 0600);
		if (argc < 4 || fd < 0 || ftruncate(fd, size)) {
			perror(argc < 4 ? "want FILE" : argv[3]);
			return 1;
		}
		area = mmap(0, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		ring = (struct rec *)area;
		mask = ~0ul;
		want = 2 * CHUNK;
		pthread_create(&th, 0, readier, 0);
	}
	pin_self(); /* (after the readier's creation: it runs where it can, as the runtime's) */
	double c0 = now(CLOCK_THREAD_CPUTIME_ID), t0 = now(CLOCK_MONOTONIC);
	for (long i = 0; i < n; i++) {
		s += work(1, i);
		struct rec *r = &ring[i & mask];
		if (mask == ~0ul && ((unsigned long)r & (CHUNK - 1)) == 0) {
			unsigned long off = (char *)r - area + AHEAD * CHUNK;
			if (off > want)
				__atomic_store_n(&want, off, __ATOMIC_RELEASE);
			if (__atomic_load_n(&ready, __ATOMIC_ACQUIRE) <= (unsigned long)((char *)r - area))
				madvise(r, CHUNK, MADV_POPULATE_WRITE); /* not ready: the writer readies it */
		}
		r->ts = tsc(); r->a = 1; r->b = i; r->id = 7;
	}
	double c1 = now(CLOCK_THREAD_CPUTIME_ID), t1 = now(CLOCK_MONOTONIC);
	if (mask == ~0ul)
		__atomic_store_n(&want, ~0ul, __ATOMIC_RELEASE), pthread_join(th, 0);
	printf("%.2f %.2f\n", (c1 - c0) / n, (t1 - t0) / n);
	return s == 42;
}
