package tests

// End-to-end tests of the signal guard (runtime/src/rt_sigguard.c): programs that block
// SIGTRAP in a thread or around fork, give a handler a full sa_mask, install their own
// SIGTRAP handler, or reset it to SIG_DFL in a fork child are rewritten with int3 probes
// (kprewrite rewrite --no-optimize, boosted and single-stepped) and must behave exactly
// like the original (output, exit status, death by SIGTRAP where the original dies),
// with every probe hit in the trace.

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

const sigguardSrc = `
#define _GNU_SOURCE
#pragma GCC diagnostic ignored "-Wdeprecated-declarations" /* sighold, sigrelse */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>

static volatile long sum;

/* twice(x, n) = n * x. The address of its loop, inside its first five bytes, taken
 * by twice_loop_at keeps a probe on its entry an int3 even where the other probes are
 * jump-optimized. */
long twice(long x, long n);
__asm__(".text\n.globl twice\n.type twice,@function\ntwice:\n"
	"\txor %eax,%eax\n"
	"twice_loop:\tadd %rdi,%rax\n"
	"\tdec %rsi\n"
	"\tjnz twice_loop\n"
	"\tret\n"
	".size twice,.-twice\n"
	".globl twice_loop_at\n.type twice_loop_at,@function\ntwice_loop_at:\n"
	"\tlea twice_loop(%rip),%rax\n"
	"\tret\n"
	".size twice_loop_at,.-twice_loop_at\n");

__attribute__((noinline)) long work(long a, long b)
{
	__asm__ volatile("" ::: "memory");
	sum += twice(a * b, 1);
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
	if (!strcmp(mode, "wait")) {
		/* probes hit in a handler while the program waits with every other signal
		 * blocked (sigsuspend, ppoll, pselect, epoll_pwait, epoll_pwait2), and with
		 * SIGTRAP blocked through
		 * syscall() and sighold() */
		struct sigaction sa;
		memset(&sa, 0, sizeof sa);
		sa.sa_handler = on_usr1;
		sigaction(SIGUSR1, &sa, NULL);
		sigset_t usr1set, others, all, old;
		sigemptyset(&usr1set);
		sigaddset(&usr1set, SIGUSR1);
		sigprocmask(SIG_BLOCK, &usr1set, &old);
		sigfillset(&others);
		sigdelset(&others, SIGUSR1);
		struct timespec ts = {5, 0};
		raise(SIGUSR1);
		int r = sigsuspend(&others);
		printf("sigsuspend=%d usr1=%ld\n", r, usr1);
		usr1 = 0;
		raise(SIGUSR1);
		r = ppoll(NULL, 0, &ts, &others);
		printf("ppoll=%d usr1=%ld\n", r, usr1);
		usr1 = 0;
		raise(SIGUSR1);
		r = pselect(0, NULL, NULL, NULL, &ts, &others);
		printf("pselect=%d usr1=%ld\n", r, usr1);
		int ep = epoll_create1(0);
		struct epoll_event ev;
		usr1 = 0;
		raise(SIGUSR1);
		r = epoll_pwait(ep, &ev, 1, 5000, &others);
		printf("epoll_pwait=%d usr1=%ld\n", r, usr1);
		usr1 = 0;
		raise(SIGUSR1);
#ifdef __GLIBC__
		r = epoll_pwait2(ep, &ev, 1, &ts, &others);
#else
		r = epoll_pwait(ep, &ev, 1, 5000, &others); /* musl 1.2.3 has no epoll_pwait2 */
#endif
		printf("epoll_pwait2=%d usr1=%ld\n", r, usr1);
		sigfillset(&all);
		syscall(SYS_rt_sigprocmask, SIG_BLOCK, &all, NULL, 8);
		printf("syscall=%ld\n", work(2, 3));
		sigprocmask(SIG_SETMASK, &old, NULL);
		sighold(SIGTRAP);
		printf("sighold=%ld\n", work(3, 3));
		sigrelse(SIGTRAP);
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

const sigguardWaitOut = "sigsuspend=-1 usr1=42\nppoll=-1 usr1=42\npselect=-1 usr1=42\nepoll_pwait=-1 usr1=42\n" +
	"epoll_pwait2=-1 usr1=42\nsyscall=5\nsighold=6\n"

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
						{"wait", 7, sigguardWaitOut},
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

// sigguardStaticDefs probe work (entry and return), twice (whose entry stays an int3 even
// where the others are jump-optimized, so that the guard is needed) and the entries of
// two functions the guard of a static program redirects: there the redirection meets an
// int3 point (b or k), or the detour of a jump-optimized one.
var sigguardStaticDefs = []string{
	"p:sg/work work a=%di:s32 b=%si:s32", "r:sg/workr work $retval", "p:sg/twice twice",
	"p:sg/sa __libc_sigaction sig=%di:s32", "p:sg/pm pthread_sigmask how=%di:s32",
}

// sigguardStaticCalls are the calls of work per mode of sigguardSrc and what the modes
// print; sa and pm are the least number of sigaction and pthread_sigmask records (the
// library calls them too).
var sigguardStaticCalls = []struct {
	mode   string
	calls  int
	sa, pm uint64
	want   string
}{
	{"block", 12, 1, 1, "watchdog=75\nblocked=11\nusr1=42\n"},
	{"handler", 4, 2, 0, "traps=2 codes=194328\n"},
	{"fork", 1, 60, 2, "child=0\n"},
	{"wait", 7, 1, 2, sigguardWaitOut},
	{"dfl", 1, 1, 0, "work=4\n"},
}

// redirectedOf returns the functions whose entries the static signal guard redirected in
// bin (the names of its kprewrite_sigguard_stub.* symbols).
func redirectedOf(t *testing.T, bin string) []string {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range syms {
		if name, ok := strings.CutPrefix(s.Name, "kprewrite_sigguard_stub."); ok {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// checkRedirected checks that each group (the names of one function) has exactly one
// redirected function and that nothing else was redirected.
func checkRedirected(t *testing.T, got []string, groups [][]string) {
	t.Helper()
	n := 0
	for _, g := range groups {
		k := 0
		for _, name := range got {
			if slices.Contains(g, name) {
				k++
			}
		}
		if k != 1 {
			t.Errorf("redirected %v: want exactly one of %v", got, g)
		}
		n += k
	}
	if n != len(got) {
		t.Errorf("redirected %v: want only one of each of %v", got, groups)
	}
}

var entriesWrapped = regexp.MustCompile(`signal guard: (\d+) function entries wrapped, (\d+) not`)

// TestSigGuardStaticEndToEnd: static programs (glibc -static and -static-pie, musl
// -static), which make their signal system calls from their own copy of the C library,
// block SIGTRAP in a thread, around fork and in their waits, give a handler a full
// sa_mask, install their own SIGTRAP handler and set SIG_IGN on it, rewritten with int3
// probes (boosted, single-stepped, and jump-optimized probes next to an int3 one): the
// guard redirects the entries of the library's functions that make those system calls
// (the narrowest set: glibc's sigaction, signal and sigprocmask only call them), and the
// programs behave as the originals, with every probe hit in the trace.
func TestSigGuardStaticEndToEnd(t *testing.T) {
	common := [][]string{{"__libc_sigaction"}, {"pthread_sigmask", "__pthread_sigmask"},
		{"sigsuspend", "__sigsuspend", "__libc_sigsuspend"}, {"ppoll", "__ppoll"}, {"pselect", "__pselect"},
		{"epoll_pwait"}, {"syscall"}}
	glibc := append([][]string{{"epoll_pwait2"}}, common...)
	musl := append([][]string{{"__block_all_sigs"}, {"__block_app_sigs"}}, common...)
	for _, build := range []struct {
		name   string
		lang   string
		flags  []string
		groups [][]string // the functions redirected
	}{
		{"glibc-static", "c", []string{"-O2", "-pthread", "-static"}, glibc},
		{"glibc-static-pie", "c", []string{"-O2", "-pthread", "-static-pie"}, glibc},
		{"musl-static", "c-musl", []string{"-O2", "-static"}, musl},
	} {
		t.Run(build.name, func(t *testing.T) {
			prog := testprog.Build(t, sigguardSrc, build.lang, build.flags...)
			for _, variant := range []struct {
				name  string
				flags []string
			}{
				{"boost", []string{"--no-optimize"}},
				{"no-boost", []string{"--no-optimize", "--no-boost"}},
				{"optimized", nil},
				// count-only detours on redirected entries end with the jmp to the guard's stub
				{"count-only", []string{"--count-only"}},
				// __libc_sigaction left alone: its callers' entry (sigaction) is redirected
				// instead, and the rewrite says what is not guarded
				{"fallback", []string{"--no-optimize", "--skip-refused", "--exclude", "__libc_sigaction"}},
			} {
				t.Run(variant.name, func(t *testing.T) {
					dir := t.TempDir()
					out := filepath.Join(dir, "sigguard")
					args := append([]string{"rewrite", "-o", out}, variant.flags...)
					for _, d := range sigguardStaticDefs {
						args = append(args, "-e", d)
					}
					code, _, stderr := kp(append(args, prog)...)
					if code != 0 {
						t.Fatalf("rewrite: exit %d: %s", code, stderr)
					}
					groups := build.groups
					if variant.name == "fallback" {
						groups = nil
						for _, g := range build.groups {
							if g[0] == "__libc_sigaction" {
								g = []string{"sigaction", "__sigaction"}
							}
							groups = append(groups, g)
						}
						if !strings.Contains(stderr, "not guarded: __libc_sigaction (its entry is in code excluded by --exclude") {
							t.Errorf("rewrite stderr %q: want __libc_sigaction reported not guarded", stderr)
						}
					} else if strings.Contains(stderr, "not guarded") {
						t.Errorf("rewrite stderr %q: want every function guarded", stderr)
					}
					redirected := redirectedOf(t, out)
					checkRedirected(t, redirected, groups)
					for _, c := range sigguardStaticCalls {
						tr := filepath.Join(dir, c.mode+".trace")
						res := testprog.Same(t, prog, out, testprog.Cmd{Args: []string{c.mode}, Extra: []string{"KPREWRITE_TRACE=" + tr}}, nil)
						if res.Stdout != c.want {
							t.Errorf("%s: output %q, want %q", c.mode, res.Stdout, c.want)
						}
						if c.mode == "dfl" && res.Signal != syscall.SIGTRAP.String() {
							t.Errorf("dfl: %s, want death by SIGTRAP", res)
						}
						p := profile(t, tr, out)
						if variant.name == "count-only" {
							if lines := readTrace(t, tr, out); len(lines) != 0 {
								t.Errorf("%s: --count-only wrote %d records", c.mode, len(lines))
							}
						}
						for _, ev := range []string{"work", "workr", "twice"} {
							if p[ev] != [2]uint64{uint64(c.calls), 0} {
								t.Errorf("%s: %s: profile %v, want %d hits, none missed", c.mode, ev, p[ev], c.calls)
							}
						}
						if variant.name != "fallback" && (p["sa"][0] < c.sa || p["sa"][1] != 0) {
							t.Errorf("%s: sigaction: profile %v, want %d hits or more, none missed", c.mode, p["sa"], c.sa)
						}
						if p["pm"][0] < c.pm || p["pm"][1] != 0 {
							t.Errorf("%s: pthread_sigmask: profile %v, want %d hits or more, none missed", c.mode, p["pm"], c.pm)
						}
						// the program's own SIGTRAP handler and its SIG_IGN go through the probed
						// sigaction before the wrapper keeps them
						if c.mode == "handler" && variant.name != "fallback" && variant.name != "count-only" {
							n := 0
							for _, l := range readTrace(t, tr, out) {
								if l.Event == "sa" && l.Args == " sig=5" {
									n++
								}
							}
							if n != 2 {
								t.Errorf("handler: %d sigaction(SIGTRAP) records, want 2", n)
							}
						}
					}
					// start-up: every redirected entry gets its wrapper
					res := testprog.Run(t, testprog.Cmd{Path: out, Args: []string{"block"}, Extra: []string{"KPREWRITE_DEBUG=1", "KPREWRITE_TRACE="}})
					m := entriesWrapped.FindStringSubmatch(res.Stderr)
					if m == nil || m[1] != strconv.Itoa(len(redirected)) || m[2] != "0" {
						t.Errorf("start-up report %q: want %d function entries wrapped, 0 not", res.Stderr, len(redirected))
					}
					// without the guard (the entries run the copies) the blocking thread
					// dies at its first int3 hit
					res = testprog.Run(t, testprog.Cmd{Path: out, Args: []string{"block"}, Extra: []string{"KPREWRITE_SIGGUARD=off", "KPREWRITE_TRACE="}})
					if res.Signal != syscall.SIGTRAP.String() {
						t.Errorf("KPREWRITE_SIGGUARD=off: %s, want death by SIGTRAP", res)
					}
					res = testprog.Run(t, testprog.Cmd{Path: out, Args: []string{"wait"}, Extra: []string{"KPREWRITE_SIGGUARD=off", "KPREWRITE_TRACE="}})
					if res.Signal != syscall.SIGTRAP.String() {
						t.Errorf("KPREWRITE_SIGGUARD=off: wait: %s, want death by SIGTRAP", res)
					}
				})
			}
		})
	}
}

// TestSigGuardStaticStripped: a stripped static program has no symbols to find its C
// library's functions by; the rewrite says so, and blocking SIGTRAP still kills it at the
// next int3 hit (the documented limit).
func TestSigGuardStaticStripped(t *testing.T) {
	testprog.Need(t, "strip")
	prog := testprog.Build(t, sigguardSrc, "c", "-O2", "-pthread", "-static")
	stripped := filepath.Join(t.TempDir(), "stripped")
	if b, err := exec.Command("strip", "-o", stripped, prog).CombinedOutput(); err != nil {
		t.Fatalf("strip: %v\n%s", err, b)
	}
	out := filepath.Join(t.TempDir(), "sigguard")
	code, _, stderr := kp("rewrite", "--no-optimize", "-o", out, "-e", "p:sg/work "+symAddr(t, prog, "work"), stripped)
	if code != 0 {
		t.Fatalf("rewrite: exit %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "without a symbol table (stripped): the signal guard cannot find") {
		t.Errorf("rewrite stderr %q: want the stripped-program warning", stderr)
	}
	if len(redirectedOf(t, out)) != 0 {
		t.Errorf("stripped program: redirected %v", redirectedOf(t, out))
	}
	res := testprog.Run(t, testprog.Cmd{Path: out, Args: []string{"block"}, Extra: []string{"KPREWRITE_TRACE="}})
	if res.Signal != syscall.SIGTRAP.String() {
		t.Errorf("block: %s, want death by SIGTRAP", res)
	}
}

// symAddr returns the address of the symbol name in bin, as a probe site.
func symAddr(t *testing.T, bin, name string) string {
	t.Helper()
	for _, s := range elfSymbols(t, bin) {
		if s.Name == name {
			return fmt.Sprintf("%#x", s.Value)
		}
	}
	t.Fatalf("%s: no symbol %s", bin, name)
	return ""
}

// elfSymbols is the symbol table of the ELF file at path.
func elfSymbols(t *testing.T, path string) []elf.Symbol {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	return syms
}

// TestSigGuardRealPython: python3.11 with an int3 probe on every function entry starts
// faulthandler's watchdog thread, which blocks every signal (pthread_sigmask) and then
// runs probed functions.
func TestSigGuardRealPython(t *testing.T) {
	bin := realBin(t, "python3.11")
	dir := t.TempDir()
	kpd, _ := rewriteAllEntries(t, bin, dir, "--no-optimize")
	// (the watchdog starts whatever its timeout; a long one, so that a slow run on a
	// loaded machine never reaches it and prints a traceback)
	script := "import faulthandler; faulthandler.dump_traceback_later(3600); import json; print(json.dumps([1,2]))"
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
		"GIT_COMMITTER_DATE=2026-01-02T03:04:05Z", "PATH=" + os.Getenv("PATH"), "LC_ALL=C", "KPREWRITE_TRACE=" + tr,
		"KPREWRITE_APPEND=1"} // (every git command's records in one trace)
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
