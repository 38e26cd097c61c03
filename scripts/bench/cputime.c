/*
 * cputime.c - runs a command and prints its CPU time (user + system, its children's
 * included) in seconds to the microsecond on stderr, as "cpu USER SYS": /usr/bin/time's
 * %U %S are in hundredths, 1.7 ns a record of python3.11's 5.8 million (issue 49), too
 * coarse for a before/after. Exits with the command's status.
 *
 *   gcc -O2 -o cputime scripts/bench/cputime.c && ./cputime python3 -c pass
 */
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: cputime COMMAND [ARG...]\n");
		return 2;
	}
	pid_t pid = fork();
	if (pid == 0) {
		execvp(argv[1], argv + 1);
		perror(argv[1]);
		_exit(127);
	}
	int st;
	struct rusage ru;
	if (pid < 0 || wait4(pid, &st, 0, &ru) < 0) {
		perror("cputime");
		return 2;
	}
	fprintf(stderr, "cpu %ld.%06ld %ld.%06ld\n", (long)ru.ru_utime.tv_sec, (long)ru.ru_utime.tv_usec,
		(long)ru.ru_stime.tv_sec, (long)ru.ru_stime.tv_usec);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
