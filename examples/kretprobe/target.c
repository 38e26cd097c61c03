/* target.c - the program examples/kretprobe probes: lookup(dir, name, depth) looks for
 * dir/name, then in the parent directories up to depth levels up, and returns the level
 * where it found it or a negative errno. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

__attribute__((noinline)) long lookup(const char *dir, const char *name, long depth)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	int fd = open(path, O_RDONLY);
	if (fd >= 0) {
		close(fd);
		return depth;
	}
	if (errno != ENOENT || depth == 0)
		return -errno;
	char parent[4096];
	snprintf(parent, sizeof parent, "%s/..", dir);
	long r = lookup(parent, name, depth - 1);
	__asm__ volatile("" : "+r"(r)); /* keep the recursion a recursion */
	return r;
}

int main(void)
{
	static const struct { const char *dir, *name; long depth; } q[] = {
		{"/etc", "passwd", 0},                  /* found */
		{"/etc/passwd", "x", 0},                /* ENOTDIR */
		{"/usr/share", "no-such-file.kp", 6},   /* ENOENT after 7 levels: 3 missed */
		{"/usr/lib", "etc", 2},                 /* found 2 levels up */
	};
	for (unsigned i = 0; i < sizeof q / sizeof q[0]; i++)
		printf("lookup(%s, %s, %ld) = %ld\n", q[i].dir, q[i].name, q[i].depth, lookup(q[i].dir, q[i].name, q[i].depth));
	return 0;
}
