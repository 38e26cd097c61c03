/*
 * rt_liveboot.c - events given at start-up in the environment: KPREWRITE_EVENTS, the
 * kernel's kprobe_event= boot parameter (';' between definitions, ',' for spaces).
 * The runtime has no compiler for definitions, so it runs the tool's own, `kprewrite
 * probe --startup TRACEFILE` (KPREWRITE_TOOL, or kprewrite on PATH), and waits for it
 * before main runs; the frames it writes into the trace file are then applied like
 * those of a file that held them already (rt_live.c's kprw_live_init). A process whose
 * image has a live frame in the file already (an earlier process of the run added the
 * events, a fork or exec child) does not run it again.
 */
#include "rt.h"

#define SYS_access 21
#define SYS_clone 56
#define SYS_execve 59
#define SYS_wait4 61
#define SIGCHLD 17
#define X_OK 1
#define EINTR 4

/* find_tool puts the tool's path in buf: tool when given, else the first executable
 * kprewrite in path's directories. 0 when there is none. */
static int find_tool(const char *tool, const char *path, char *buf, u32 len)
{
	if (tool && tool[0]) {
		u32 n = (u32)kprw_strlen(tool);
		if (n + 1 > len)
			return 0;
		kprw_memcpy(buf, tool, n + 1);
		return 1;
	}
	static const char name[] = "/kprewrite";
	for (const char *p = path ? path : "/usr/local/bin:/usr/bin:/bin"; p;) {
		const char *end = p;
		while (*end && *end != ':')
			end++;
		u32 d = (u32)(end - p);
		if (d == 0) { /* an empty entry is the current directory */
			p = ".";
			d = 1;
		}
		if (d + sizeof name <= len) {
			kprw_memcpy(buf, p, d);
			kprw_memcpy(buf + d, name, sizeof name);
			if (sys2(SYS_access, (long)buf, X_OK) == 0)
				return 1;
		}
		p = *end ? end + 1 : NULL;
	}
	return 0;
}

/* run_tool runs argv[0] with argv and envp and returns its wait status (-1: it could
 * not be waited for, e.g. SIGCHLD ignored) */
static long run_tool(char *const *argv, char **envp)
{
	long pid = sys6(SYS_clone, SIGCHLD, 0, 0, 0, 0, 0); /* a fork: the child only execs */
	if (pid == 0) {
		sys3(SYS_execve, (long)argv[0], (long)argv, (long)envp);
		sys1(SYS_exit_group, 127);
	}
	if (pid < 0)
		return -1;
	int status = 0;
	long r;
	while ((r = sys4(SYS_wait4, pid, (long)&status, 0, 0)) == -EINTR)
		;
	return r == pid ? status : -1;
}

void kprw_live_boot(char **envp, const char *events, const char *tool, const char *path)
{
	if (!events || !events[0] || !kprw_rt.trace || !kprw_rt.trace_path || !kprw_livedef_boot_wanted())
		return;
	static char buf[4096];
	if (!find_tool(tool, path, buf, sizeof buf)) {
		kprw_puts("kprewrite: KPREWRITE_EVENTS: no kprewrite on PATH (or KPREWRITE_TOOL) to compile them: the events are not added\n");
		return;
	}
	char *argv[] = {buf, (char *)"probe", (char *)"--startup", (char *)kprw_rt.trace_path, NULL};
	long st = run_tool(argv, envp);
	if (st != -1 && st != 0) {
		kprw_puts("kprewrite: KPREWRITE_EVENTS: ");
		kprw_puts(buf);
		kprw_puts((st & 0x7f) == 0 && ((st >> 8) & 0xff) == 127 ? " could not be run" : " failed");
		kprw_puts(": the events are not added\n");
	}
}
