/* peakrss.c: runs argv[1..] with its standard output thrown away and prints its peak
 * resident size in KiB (ru_maxrss). A fork of this small program, not of the test: a
 * process's ru_maxrss keeps the largest memory it had before its exec, and the test's
 * own children (vfork, the test's memory) would all report the test's size. */
#include <fcntl.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	pid_t p = fork();
	if (p == 0) {
		int null = open("/dev/null", O_WRONLY);
		dup2(null, 1);
		execv(argv[1], argv + 1);
		_exit(127);
	}
	int st;
	struct rusage ru;
	if (wait4(p, &st, 0, &ru) != p || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		fprintf(stderr, "%s did not exit 0 (status %#x)\n", argv[1], st);
		return 1;
	}
	printf("%ld\n", ru.ru_maxrss);
	return 0;
}
