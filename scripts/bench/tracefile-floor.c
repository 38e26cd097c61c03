/*
 * tracefile-floor.c - what creating a trace file costs a program's start-up, with no
 * runtime around it: the system calls kprewrite's runtime makes for a new trace file
 * of a python3.11 rewritten with --prepare '*' (a 64 MiB sparse file, its header page
 * reserved and written, the file mapped, a 373 KB description and a 54 KB control
 * area written, the counters' blocks reserved), then exec of the program. The
 * description is copied from this program's read-only data, as the runtime copies it
 * from the rewritten binary's; the control words from one page, as an idle image's.
 * Run with KPREWRITE_TRACE unset it only execs: the difference of the two is the floor
 * (spawn.c removes the file KPREWRITE_TRACE names before each run, outside its time).
 *
 *   gcc -O2 -o tracefile-floor scripts/bench/tracefile-floor.c
 *   KPREWRITE_TRACE=/tmp/x.trace ./tracefile-floor /usr/bin/python3.11 -c pass
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

static const char page[4096];
static const char desc[373704] = {1}; /* (initialized: in the file, as the runtime's is) */
static const unsigned soft[1024] = {[0 ... 1023] = 1};

static void create(const char *path)
{
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	flock(fd, LOCK_EX);
	off_t size = 68194304;
	ftruncate(fd, size);
	fallocate(fd, 0, 0, 4096);
	struct iovec iov[14] = {{(void *)page, sizeof page}};
	pwritev(fd, iov, 1, 0);
	char *map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (map != MAP_FAILED)
		memcpy(map, "KPRWTRC", 8); /* the header's first write through the mapping */
	fallocate(fd, 0, 67112960, 270336);
	pwrite(fd, desc, sizeof desc, size);
	ftruncate(fd, 68902912);
	fallocate(fd, 0, 68571136, 331776);
	for (int i = 0; i < 14; i++)
		iov[i] = (struct iovec){(void *)soft, i < 13 ? sizeof soft : 54176 - 13 * sizeof soft};
	pwritev(fd, iov, 14, 67328904);
	flock(fd, LOCK_UN);
	close(fd);
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	const char *path = getenv("KPREWRITE_TRACE");
	if (path && path[0])
		create(path);
	execv(argv[1], argv + 1);
	return 127;
}
