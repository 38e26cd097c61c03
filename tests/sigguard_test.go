package tests

// End-to-end tests of the signal guard (runtime/src/rt_sigguard.c): programs that block
// SIGTRAP in a thread or around fork, give a handler a full sa_mask, install their own
// SIGTRAP handler, or reset it to SIG_DFL in a fork child are rewritten with int3 probes
// (kprewrite rewrite --no-optimize, boosted and single-stepped) and must behave exactly
// like the original (output, exit status, death by SIGTRAP where the original dies),
// with every probe hit in the trace.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"kprewrite/tests/internal/testprog"
)

const sigguardSrc = `
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile long sum;

__attribute__((noinline)) long work(long a, long b)
{
	__asm__ volatile("" ::: "memory");
	sum += a * b;
	return a + b;
}

static void *watchdog(void *arg)
{
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, NULL); /* as python's faulthandler thread */
	long r = 0;
	for (int i = 0; i < 10; i++)
		r += work(i, (long)arg);
	return (void *)r;
}

static volatile long usr1;
static void on_usr1(int sig) { (void)sig; usr1 = work(40, 2); }

static volatile long traps, codes;
static void on_trap(int sig, siginfo_t *si, void *uc)
{
	(void)sig; (void)uc;
	traps++;
	codes = codes * 1000 + si->si_code + 200;
	work(1, 1);
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "block";
	setvbuf(stdout, NULL, _IONBF, 0);
	if (!strcmp(mode, "block")) {
		pthread_t th;
		void *r;
		pthread_create(&th, NULL, watchdog, (void *)3);
		pthread_join(th, &r);
		printf("watchdog=%ld\n", (long)r);
		sigset_t all, old, cur;
		sigfillset(&all);
		sigprocmask(SIG_SETMASK, &all, &old);
		printf("blocked=%ld\n", work(5, 6));
		sigprocmask(SIG_SETMASK, &old, NULL);
		struct sigaction sa;
		memset(&sa, 0, sizeof sa);
		sa.sa_handler = on_usr1;
		sigfillset(&sa.sa_mask);
		sigaction(SIGUSR1, &sa, NULL);
		raise(SIGUSR1);
		printf("usr1=%ld\n", usr1);
		return 0;
	}
	if (!strcmp(mode, "handler")) {
		struct sigaction sa;
		memset(&sa, 0, sizeof sa);
		sa.sa_sigaction = on_trap;
		sa.sa_flags = SA_SIGINFO;
		sigaction(SIGTRAP, &sa, NULL);
		work(1, 2);
		raise(SIGTRAP);
		__asm__ volatile("int3");
		work(3, 4);
		signal(SIGTRAP, SIG_IGN);
		raise(SIGTRAP);
		printf("traps=%ld codes=%ld\n", traps, codes);
		return 0;
	}
	if (!strcmp(mode, "fork")) {
		/* git's run_command: everything blocked around fork; the child resets every
		 * handler, calls functions, restores the mask and execs */
		sigset_t all, old;
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		pid_t p = fork();
		if (p == 0) {
			for (int sig = 1; sig < 65; sig++)
				if (signal(sig, SIG_DFL) == SIG_IGN)
					signal(sig, SIG_IGN);
			work(7, 8);
			sigprocmask(SIG_SETMASK, &old, NULL);
			execl("/bin/true", "true", (char *)NULL);
			_exit(127);
		}
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		int st;
		waitpid(p, &st, 0);
		printf("child=%d\n", st);
		return 0;
	}
	if (!strcmp(mode, "dfl")) {
		/* its own int3 with SIGTRAP at SIG_DFL: death by SIGTRAP */
		signal(SIGTRAP, SIG_DFL);
		printf("work=%ld\n", work(2, 2));
		__asm__ volatile("int3");
		printf("survived\n");
		return 0;
	}
	return 2;
}
`

// TestSigGuardEndToEnd: the modes of sigguardSrc, rewritten with int3 probes on work
// (boosted, and single-stepped with --no-boost), in PIE (lazy binding), non-PIE and
// full-RELRO builds.
func TestSigGuardEndToEnd(t *testing.T) {
	for _, build := range []struct {
		name  string
		flags []string
	}{
		{"pie", []string{"-O2", "-pthread", "-Wl,-z,lazy"}},
		{"nopie", []string{"-O2", "-pthread", "-no-pie"}},
		{"relro-now", []string{"-O2", "-pthread", "-Wl,-z,now,-z,relro"}},
	} {
		t.Run(build.name, func(t *testing.T) {
			prog := testprog.Build(t, sigguardSrc, "c", build.flags...)
			for _, mode := range []string{"boost", "no-boost"} {
				t.Run(mode, func(t *testing.T) {
					dir := t.TempDir()
					out := filepath.Join(dir, "sigguard")
					flags := []string{"--no-optimize"}
					if mode == "no-boost" {
						flags = append(flags, "--no-boost")
					}
					rewriteWith(t, prog, out, []string{"p:sg/work work a=%di:s32 b=%si:s32"}, flags...)
					// calls of work per mode, each one a trace record
					for _, c := range []struct {
						mode  string
						calls int
						want  string
					}{
						{"block", 12, "watchdog=75\nblocked=11\nusr1=42\n"},
						{"handler", 4, "traps=2 codes=194328\n"},
						{"fork", 1, "child=0\n"},
						{"dfl", 1, "work=4\n"},
					} {
						tr := filepath.Join(dir, c.mode+".trace")
						res := testprog.Same(t, prog, out, testprog.Cmd{Args: []string{c.mode}, Extra: []string{"KPREWRITE_TRACE=" + tr}}, nil)
						if res.Stdout != c.want {
							t.Errorf("%s: output %q, want %q", c.mode, res.Stdout, c.want)
						}
						if c.mode == "dfl" && res.Signal != syscall.SIGTRAP.String() {
							t.Errorf("dfl: %s, want death by SIGTRAP", res)
						}
						lines := readTrace(t, tr, out)
						if len(lines) != c.calls {
							t.Errorf("%s: %d trace lines, want %d: %v", c.mode, len(lines), c.calls, eas(lines))
						}
						if p := profile(t, tr, out); p["work"] != [2]uint64{uint64(c.calls), 0} {
							t.Errorf("%s: profile %v, want %d hits", c.mode, p, c.calls)
						}
					}
					// without the guard the blocking thread dies at its first hit
					res := testprog.Run(t, testprog.Cmd{Path: out, Args: []string{"block"}, Extra: []string{"KPREWRITE_SIGGUARD=off", "KPREWRITE_TRACE="}})
					if res.Signal != syscall.SIGTRAP.String() {
						t.Errorf("KPREWRITE_SIGGUARD=off: %s, want death by SIGTRAP", res)
					}
				})
			}
		})
	}
}

// TestSigGuardRealPython: python3.11 with an int3 probe on every function entry starts
// faulthandler's watchdog thread, which blocks every signal (pthread_sigmask) and then
// runs probed functions.
func TestSigGuardRealPython(t *testing.T) {
	bin := realBin(t, "python3.11")
	dir := t.TempDir()
	kpd, _ := rewriteAllEntries(t, bin, dir, "--no-optimize")
	script := "import faulthandler; faulthandler.dump_traceback_later(5); import json; print(json.dumps([1,2]))"
	tr := filepath.Join(dir, "py.trace")
	env := []string{"KPREWRITE_TRACE=" + tr, "PYTHONDONTWRITEBYTECODE=1"}
	res := testprog.Same(t, bin, kpd, testprog.Cmd{Args: []string{"-c", script}, Extra: env}, nil)
	if res.Stdout != "[1, 2]\n" {
		t.Fatalf("run: %s", res)
	}
	hits, missed, _ := totalHits(t, tr, kpd)
	if hits < 100000 || missed != 0 {
		t.Errorf("%d hits, %d missed", hits, missed)
	}
	res = testprog.Run(t, testprog.Cmd{Path: kpd, Args: []string{"-c", script}, Extra: []string{"KPREWRITE_TRACE=", "KPREWRITE_SIGGUARD=off"}})
	if res.Signal != syscall.SIGTRAP.String() {
		t.Errorf("KPREWRITE_SIGGUARD=off: %s, want death by SIGTRAP (the watchdog thread's first hit)", testprog.Clip(res.String(), 500))
	}
}

// TestSigGuardRealGit: git commit with auto maintenance on runs `git maintenance run
// --auto` through run_command, whose child resets every signal handler with all signals
// blocked and runs probed functions before it execs.
func TestSigGuardRealGit(t *testing.T) {
	bin := realBin(t, "git")
	dir := t.TempDir()
	kpd, _ := rewriteAllEntries(t, bin, dir, "--no-optimize")
	tr := filepath.Join(dir, "git.trace")
	home := filepath.Join(dir, "home")
	os.Mkdir(home, 0o755)
	env := []string{"HOME=" + home, "GIT_CONFIG_NOSYSTEM=1", "GIT_AUTHOR_NAME=K P", "GIT_AUTHOR_EMAIL=kp@example.com",
		"GIT_COMMITTER_NAME=K P", "GIT_COMMITTER_EMAIL=kp@example.com", "GIT_AUTHOR_DATE=2026-01-02T03:04:05Z",
		"GIT_COMMITTER_DATE=2026-01-02T03:04:05Z", "PATH=" + os.Getenv("PATH"), "LC_ALL=C", "KPREWRITE_TRACE=" + tr}
	repos := map[string]string{}
	for _, which := range []string{"orig", "kp", "off"} {
		r := filepath.Join(dir, which)
		os.Mkdir(r, 0o755)
		for i := 0; i < 20; i++ {
			os.WriteFile(filepath.Join(r, fmt.Sprintf("f%d.txt", i)), []byte(strings.Repeat("line\n", i+1)), 0o644)
		}
		repos[which] = r
	}
	steps := [][]string{{"init", "-q", "-b", "main", "."}, {"add", "."}, {"commit", "-q", "-m", "first"},
		{"commit", "-q", "--allow-empty", "-m", "second"}, {"log", "--format=%H %s"}}
	for _, s := range steps {
		want := testprog.Run(t, testprog.Cmd{Path: bin, Args: s, Dir: repos["orig"], Env: env})
		got := testprog.Run(t, testprog.Cmd{Path: kpd, Args: s, Dir: repos["kp"], Env: env})
		if d := want.Diff(got); d != "" {
			t.Fatalf("git %s: %s\noriginal: %s\nrewritten: %s", strings.Join(s, " "), d, want, got)
		}
	}
	// the children between fork and exec hit probes too
	pids := map[int]int{}
	for _, l := range readTrace(t, tr, kpd) {
		pids[l.PID]++
	}
	if len(pids) < 6 {
		t.Errorf("records from %d processes, want the commands and their run_command children", len(pids))
	}
	// without the guard, the maintenance child dies of SIGTRAP (git reports it)
	var stderr string
	for _, s := range steps[:3] {
		r := testprog.Run(t, testprog.Cmd{Path: kpd, Args: s, Dir: repos["off"], Env: append(env, "KPREWRITE_SIGGUARD=off")})
		stderr += r.Stderr
	}
	if !strings.Contains(stderr, "died of signal 5") {
		t.Errorf("KPREWRITE_SIGGUARD=off: stderr %q, want a child dead of SIGTRAP", stderr)
	}
}
