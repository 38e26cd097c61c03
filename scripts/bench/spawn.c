/*
 * spawn.c - start-up cost the way a user measures it: runs each of several command
 * lines ROUNDS times, taking turns (so a busy moment of a shared machine hits them
 * alike), each run timed from posix_spawn to waitpid. Prints per command line the
 * median, the quartiles and the mean in milliseconds, and the ratio of each median to
 * the first command line's.
 *
 *   gcc -O2 -o spawn scripts/bench/spawn.c
 *   ./spawn ROUNDS 'ENV=... /path/prog args' ['...' ...]
 *
 * A command line is split at spaces; leading NAME=VALUE words go to its environment
 * (added to this process's). Its output goes to /dev/null. The file a command line's
 * KPREWRITE_TRACE names is removed before each of its runs (a new trace file each run,
 * as a user's first run makes), unless SPAWN_KEEP_TRACE=1.
 */
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: spawn ROUNDS 'CMD ARGS' ...\n");
		return 2;
	}
	int rounds = atoi(argv[1]), n = argc - 2;
	char **args[64], **envs[64], *trace[64] = {0};
	int keep = getenv("SPAWN_KEEP_TRACE") && !strcmp(getenv("SPAWN_KEEP_TRACE"), "1");
	double *t[64];
	if (n > 64 || rounds < 1)
		return 2;
	int ne = 0;
	while (environ[ne])
		ne++;
	for (int i = 0; i < n; i++) {
		char *s = strdup(argv[i + 2]);
		args[i] = calloc(64, sizeof(char *));
		envs[i] = calloc(ne + 64, sizeof(char *));
		int na = 0, nv = 0;
		for (char *w = strtok(s, " "); w && na < 63; w = strtok(NULL, " "))
			if (na == 0 && strchr(w, '=') && nv < 63) {
				envs[i][nv++] = w;
				if (!strncmp(w, "KPREWRITE_TRACE=", 16) && w[16])
					trace[i] = w + 16;
			}
			else
				args[i][na++] = w;
		for (int k = 0; k < ne; k++)
			envs[i][nv++] = environ[k];
		t[i] = calloc(rounds, sizeof(double));
	}
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	for (int r = 0; r < rounds; r++)
		for (int i = 0; i < n; i++) {
			pid_t pid;
			if (trace[i] && !keep)
				unlink(trace[i]);
			double t0 = now();
			if (posix_spawn(&pid, args[i][0], &fa, NULL, args[i], envs[i]) != 0) {
				perror(args[i][0]);
				return 1;
			}
			int st;
			waitpid(pid, &st, 0);
			t[i][r] = now() - t0;
		}
	double base = 0;
	for (int i = 0; i < n; i++) {
		double sum = 0;
		for (int r = 0; r < rounds; r++)
			sum += t[i][r];
		qsort(t[i], rounds, sizeof(double), cmp);
		double med = t[i][rounds / 2];
		if (i == 0)
			base = med;
		printf("%-60.60s median %.3f ms (quartiles %.3f-%.3f) mean %.3f ratio %.3f\n", argv[i + 2], med,
		       t[i][rounds / 4], t[i][3 * rounds / 4], sum / rounds, med / base);
	}
	return 0;
}
