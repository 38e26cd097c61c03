/*
 * populate.c - what making a page of a shared mapping present costs a process, the
 * floor under the first record a process writes to each page of a ring it maps (the
 * recorder made the pages exist in the page cache first). A 32 MiB file (FILE on a
 * file system, or "memfd" for shared memory) is written whole through a first
 * mapping; a second mapping of it then makes its first 8 MiB present 64 KiB at a time
 * (MADV: 23 = MADV_POPULATE_WRITE, 22 = MADV_POPULATE_READ, 0 = a read of each page)
 * and writes each page once. Prints microseconds a page for both steps.
 *
 *   gcc -O2 -o populate scripts/bench/populate.c
 *   for m in 23 22 0; do ./populate memfd $m; ./populate /var/tmp/ringtest $m; done
 */
#define _GNU_SOURCE
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: populate FILE|memfd MADV\n");
		return 2;
	}
	size_t size = 32 << 20, part = size / 4, step = 64 << 10, pages = part / 4096;
	int fd = strcmp(argv[1], "memfd") ? open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0600) : memfd_create("ring", 0);
	if (fd < 0 || ftruncate(fd, size) || fallocate(fd, 0, 0, size)) {
		perror(argv[1]);
		return 1;
	}
	/* the recorder's mapping: every page in the page cache, written */
	char *first = mmap(0, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
	madvise(first, size, 23);
	memset(first, 1, size);
	/* the program's */
	char *m = mmap(0, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	int advice = atoi(argv[2]);
	volatile char sink = 0;
	double t0 = now();
	for (size_t off = 0; off < part; off += step)
		if (advice)
			madvise(m + off, step, advice);
		else
			for (size_t p = 0; p < step; p += 4096)
				sink += m[off + p];
	double t1 = now();
	for (size_t off = 0; off < part; off += 4096)
		m[off] = 2;
	double t2 = now();
	printf("%s advice %d: present %.3f us a page, then first writes %.3f us a page\n", argv[1], advice,
	       (t1 - t0) / 1e3 / pages, (t2 - t1) / 1e3 / pages);
	if (strcmp(argv[1], "memfd"))
		unlink(argv[1]);
	return 0;
}
