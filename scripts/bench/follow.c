/*
 * follow.c - the floor of a timestamped record when another CPU reads the records, as
 * `kprewrite record`'s recorder does (issue 49). One thread on CPU 0 calls work(1, i)
 * N times; after each call it reads the TSC and stores a 32-byte record into a reused
 * 32 MiB ring of 64 KiB blocks (bench-floor.sh's floor). Meanwhile a second thread on
 * CPU 1 does, by MODE:
 *   none    nothing (the floor as bench-floor.sh measures it; no second thread)
 *   loop    no record at all: the unprobed loop (the baseline)
 *   spin    spins on its own line (a busy neighbour without memory traffic)
 *   hog     copies a 32 MiB buffer of its own into a 1 MiB chunk, round and round (a
 *           busy neighbour with the recorder's memory traffic, nothing shared)
 *   follow  copies each block the writer left into its 1 MiB chunk (the recorder's
 *           copy of the records it drains, nothing written out)
 *   file    as follow, and writes each full chunk to FILE (the recorder's write(2)
 *           into the trace file's page cache; the file is truncated each 1 GiB)
 * and prints the writer's CPU ns a hit and wall ns a hit, and the blocks the reader
 * copied. The writer never waits for the reader (a lapped block is read as it is).
 * ZERO=1: the writer zeroes each block before its first record (rep stosb, as the
 * runtime zeroes a ring block it takes again, trace version 4); RZERO=1: the reader
 * zeroes each block it copied (memset), RZERO=2 with non-temporal stores.
 *
 * Measured here (2026-12-01, issue 49; ns a hit, the loop ~1.2): none 11.1-11.3,
 * spin, hog, follow and file the same (a reader of the records costs the writer
 * nothing); ZERO=1 12.5-13.7 (+1.5); RZERO=1 or 2 the same as none.
 *
 *   gcc -O2 -pthread -o follow scripts/bench/follow.c && ./follow 20000000 follow
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define RING (32ul << 20)
#define BLOCK (64ul << 10)
#define CHUNK (1ul << 20)

__attribute__((noinline)) long work(long a, long b) { __asm__ volatile(""); return a + b; }
struct rec { unsigned long ts, a, b, id; };
static struct rec *ring;
static unsigned long done_blocks __attribute__((aligned(64))); /* blocks the writer left */
static int stop __attribute__((aligned(64)));
static const char *mode, *path;
static unsigned long copied;
static int rzero; /* RZERO=1: the reader zeroes each block it copied; 2: with non-temporal stores */

static double now(clockid_t c) { struct timespec t; clock_gettime(c, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
static inline unsigned long tsc(void) { unsigned lo, hi; __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi)); return (unsigned long)hi << 32 | lo; }

static void pin(int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	sched_setaffinity(0, sizeof set, &set);
}

static void *reader(void *arg)
{
	(void)arg;
	pin(1);
	char *chunk = aligned_alloc(4096, CHUNK), *own = NULL;
	memset(chunk, 1, CHUNK);
	int fd = -1;
	unsigned long off = 0, at = 0, next = 0;
	if (!strcmp(mode, "hog")) {
		own = aligned_alloc(4096, RING);
		memset(own, 2, RING);
	}
	if (!strcmp(mode, "file") && (fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600)) < 0) {
		perror(path);
		exit(1);
	}
	while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
		if (own) {
			memcpy(chunk + at, own + (copied * BLOCK) % RING, BLOCK);
		} else if (fd >= 0 || !strcmp(mode, "follow")) {
			unsigned long d = __atomic_load_n(&done_blocks, __ATOMIC_ACQUIRE);
			if (next >= d) {
				__builtin_ia32_pause();
				continue;
			}
			if (d - next > RING / BLOCK - 2)
				next = d - 1; /* lapped: the newest left block */
			char *b = (char *)ring + (next % (RING / BLOCK)) * BLOCK;
			memcpy(chunk + at, b, BLOCK);
			if (rzero == 1)
				memset(b, 0, BLOCK);
			else if (rzero == 2)
				for (unsigned long o = 0; o < BLOCK; o += 16)
					__builtin_ia32_movntdq((__attribute__((vector_size(16))) long long *)(b + o),
							       (__attribute__((vector_size(16))) long long){0, 0});
			next++;
		} else {
			__builtin_ia32_pause(); /* spin */
			continue;
		}
		copied++;
		at += BLOCK;
		if (at == CHUNK) {
			at = 0;
			if (fd >= 0) {
				if (write(fd, chunk, CHUNK) != (ssize_t)CHUNK) {
					perror("write");
					exit(1);
				}
				if ((off += CHUNK) >= (1ul << 30)) {
					ftruncate(fd, 0);
					lseek(fd, 0, SEEK_SET);
					off = 0;
				}
			}
		}
	}
	if (fd >= 0)
		close(fd);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: follow N none|loop|spin|hog|follow|file [FILE]\n");
		return 2;
	}
	long n = atol(argv[1]), s = 0;
	mode = argv[2];
	rzero = getenv("RZERO") ? atoi(getenv("RZERO")) : 0;
	int zero = getenv("ZERO") != NULL; /* the writer zeroes each block it takes (format 4) */
	path = argc > 3 ? argv[3] : "/tmp/follow.out";
	ring = aligned_alloc(2ul << 20, RING);
	memset(ring, 0, RING); /* present, as the recorder's ring is */
	pin(0);
	pthread_t t;
	int second = strcmp(mode, "none") && strcmp(mode, "loop");
	if (second)
		pthread_create(&t, NULL, reader, NULL);
	usleep(20000);
	const unsigned long per = BLOCK / sizeof(struct rec), mask = RING / sizeof(struct rec) - 1;
	double c0 = now(CLOCK_THREAD_CPUTIME_ID), t0 = now(CLOCK_MONOTONIC);
	if (!strcmp(mode, "loop")) {
		for (long i = 0; i < n; i++)
			s += work(1, i);
	} else {
		for (long i = 0; i < n; i++) {
			s += work(1, i);
			struct rec *r = &ring[i & mask];
			if (zero && (i & (per - 1)) == 0) {
				void *d = r;
				unsigned long c = BLOCK;
				__asm__ volatile("rep stosb" : "+D"(d), "+c"(c) : "a"(0) : "memory");
			}
			r->ts = tsc();
			r->a = 1;
			r->b = i;
			r->id = 7;
			if (((i + 1) & (per - 1)) == 0)
				__atomic_store_n(&done_blocks, (i + 1) / per, __ATOMIC_RELEASE);
		}
	}
	double c1 = now(CLOCK_THREAD_CPUTIME_ID), t1 = now(CLOCK_MONOTONIC);
	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	if (second)
		pthread_join(t, NULL);
	printf("%.2f %.2f %lu\n", (c1 - c0) / n, (t1 - t0) / n, copied);
	return s == 42;
}
