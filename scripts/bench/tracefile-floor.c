/*
 * tracefile-floor.c - what creating a trace file costs a program's start-up, with no
 * runtime around it: the system calls kprewrite's runtime makes for a new trace file
 * of a python3.11 rewritten with --prepare '*' (a 64 MiB sparse file, its header page
 * reserved and written, the file mapped, a 373 KB description and a 54 KB control
 * area written, the counters' blocks reserved), then exec of the program. Run with
 * FLOOR_TRACE unset it only execs: the difference of the two is the floor.
 *
 *   gcc -O2 -o tracefile-floor scripts/bench/tracefile-floor.c
 *   FLOOR_TRACE=/tmp/x.trace ./tracefile-floor /usr/bin/python3.11 -c pass
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

static char page[4096], desc[373704], ctl[54176];

static void create(const char *path)
{
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	flock(fd, LOCK_EX);
	off_t size = 68194304;
	ftruncate(fd, size);
	fallocate(fd, 0, 0, 4096);
	struct iovec iov = {page, sizeof page};
	pwritev(fd, &iov, 1, 0);
	char *map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (map != MAP_FAILED)
		memcpy(map, "KPRWTRC", 8); /* the header's first write through the mapping */
	fallocate(fd, 0, 67112960, 270336);
	pwrite(fd, desc, sizeof desc, size);
	ftruncate(fd, 68902912);
	fallocate(fd, 0, 68571136, 331776);
	pwrite(fd, ctl, sizeof ctl, 67328904);
	flock(fd, LOCK_UN);
	close(fd);
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	const char *path = getenv("FLOOR_TRACE");
	if (path && path[0]) {
		unlink(path); /* a new file each run, as a user's first run makes */
		memset(desc, 1, sizeof desc);
		memset(ctl, 1, sizeof ctl);
		create(path);
	}
	execv(argv[1], argv + 1);
	return 127;
}
