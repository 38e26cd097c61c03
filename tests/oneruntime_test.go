package tests

// One runtime per process (issue 14, item 4): a program rewritten with probes in its
// own code and in libc.so.6 holds two rewritten images, each with a copy of the
// runtime; they share the signal handlers, the signal guard's state and the thread
// contexts (runtime/src/rt_proc.c).

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// oneRtProg calls a probed function of its own (work, peek) and one of libc (strtol)
// before and after it changes a signal disposition through its own GOT, as argv[1]
// says: "trap" installs a SIGTRAP handler, "trapdfl" resets SIGTRAP to SIG_DFL, "raise"
// installs the handler and raises SIGTRAP, "raisedfl" resets and raises (death by
// SIGTRAP, as without probes), "segv" installs a SIGSEGV handler that siglongjmps and
// then faults on purpose. peek reads through a pointer the event's fetch follows too:
// a bad one is a fault of the fault-catching copy, which must not reach the program.
const oneRtProg = `
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static volatile int traps, segvs;
static sigjmp_buf jb;
static void on_trap(int s) { (void)s; traps++; }
static void on_segv(int s) { (void)s; segvs++; siglongjmp(jb, 1); }
__attribute__((noinline)) int work(int x) { return x * 3 + 1; }
__attribute__((noinline)) long peek(const long *p, int ok) { return ok ? *p : 0; }
static long round_(void) {
	long s = 0, v = 5;
	for (int i = 0; i < 3; i++)
		s += work(i) + strtol("12", 0, 10) + peek(&v, 1) + peek((const long *)0x600000000000ul, 0);
	return s;
}
int main(int argc, char **argv) {
	const char *m = argc > 1 ? argv[1] : "";
	long s = round_();
	if (!strcmp(m, "trap") || !strcmp(m, "raise"))
		signal(SIGTRAP, on_trap);
	if (!strcmp(m, "trapdfl") || !strcmp(m, "raisedfl"))
		signal(SIGTRAP, SIG_DFL);
	if (!strcmp(m, "segv"))
		signal(SIGSEGV, on_segv);
	s += round_();
	if (!strncmp(m, "raise", 5))
		raise(SIGTRAP);
	if (!strcmp(m, "segv") && !sigsetjmp(jb, 1))
		*(volatile int *)16 = 1;
	s += round_();
	printf("s=%ld traps=%d segvs=%d\n", s, traps, segvs);
	return 0;
}
`

// TestOneRuntimeSignals: the executable's and libc's runtimes install one handler per
// signal between them and keep one program disposition, so a program that sets its
// own SIGTRAP or SIGSEGV handler (or SIG_DFL) through the executable's signal guard
// still has both images' probes (int3 ones included) and its own signals. Before, the
// image that started last took the first one's handler for the program's: a program's
// signal(SIGTRAP, ...) replaced it, and libc's next int3 hit went to the program's
// handler (SIGSEGV at the return) or killed it (SIG_DFL).
func TestOneRuntimeSignals(t *testing.T) {
	prog := testprog.Build(t, oneRtProg, "c", "-O1")
	defs := []string{
		"p:t/strtol libc.so.6:strtol s=+0(%di):string",
		"p:t/work work x=%di",
		"p:t/peek peek v=+0(%di):s64",
	}
	for _, mode := range []string{"int3", "optimized"} {
		t.Run(mode, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "prog")
			var flags []string
			if mode == "int3" {
				flags = []string{"--no-optimize"}
			}
			rewriteWith(t, prog, out, defs, flags...)
			for _, arg := range []string{"", "trap", "trapdfl", "raise", "raisedfl", "segv"} {
				os.Remove(out + ".trace")
				c := testprog.Cmd{Args: []string{arg}}
				c.Path = prog
				want := testprog.Run(t, c)
				c.Path = out
				got := testprog.Run(t, c)
				if d := want.Diff(got); d != "" {
					t.Fatalf("%q: the rewritten program behaves differently: %s", arg, d)
				}
				// every call of the rounds that ran is recorded, in both images (a
				// program killed by its SIGTRAP ran two rounds)
				rounds := 3
				if arg == "raisedfl" {
					rounds = 2
				}
				n := map[string]int{}
				for _, l := range readTrace(t, out+".trace") {
					n[l.Event]++
					if l.Event == "strtol" && strings.TrimSpace(l.Args) != `s="12"` {
						t.Errorf("%q: strtol line %q", arg, l.Args)
					}
				}
				if n["strtol"] != 3*rounds || n["work"] != 3*rounds || n["peek"] != 6*rounds {
					t.Errorf("%q: events %v, want strtol and work %d, peek %d", arg, n, 3*rounds, 6*rounds)
				}
			}
			// the executable's runtime says it joined libc's (which started first)
			res := testprog.Run(t, testprog.Cmd{Path: out, Extra: []string{"KPREWRITE_DEBUG=1", "KPREWRITE_TRACE=" + out + ".t2"}})
			if !strings.Contains(res.Stderr, "sharing the process's signal handlers and thread contexts") {
				t.Errorf("KPREWRITE_DEBUG does not show the images sharing the runtime:\n%s", res.Stderr)
			}
		})
	}
}

// oneRtHandlers is a C handler on the program's work() that calls the program's conv(),
// which calls libc's strtol: a probe hit inside a handler of another probe.
const oneRtHandlers = `
#include <kprewrite.h>
long conv(const char *s);
KPREWRITE_PROGRAM_SYMBOL(conv);
static long got;
static int pre(struct kprobe *p, struct pt_regs *regs)
{
	(void)p;
	(void)regs;
	got += conv("7");
	return 0;
}
DEFINE_KPROBE(w, "work", .pre_handler = pre);
`

const oneRtConv = `
#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) long conv(const char *s) { return strtol(s, 0, 10); }
__attribute__((noinline)) int work(int x) { return x * 3 + 1; }
int main(void) {
	long s = 0;
	for (int i = 0; i < 5; i++) s += work(i) + conv("12");
	printf("s=%ld\n", s);
	return 0;
}
`

// TestOneRuntimeThreadContexts: a thread has one context for all images, so while it
// runs a handler of the executable's probe, a hit of libc's probe is missed (counted in
// nmissed, no record), as the kernel misses a kprobe hit inside another kprobe's
// handler. Before, libc's runtime had its own contexts and recorded the hit.
func TestOneRuntimeThreadContexts(t *testing.T) {
	prog := testprog.Build(t, oneRtConv, "c", "-O1")
	dir := t.TempDir()
	hfile := filepath.Join(dir, "h.c")
	if err := os.WriteFile(hfile, []byte(oneRtHandlers), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"int3", "optimized"} {
		t.Run(mode, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "prog")
			flags := []string{"--handlers", hfile}
			if mode == "int3" {
				flags = append(flags, "--no-optimize")
			}
			rewriteWith(t, prog, out, []string{"p:t/strtol libc.so.6:strtol s=+0(%di):string"}, flags...)
			res := testprog.Run(t, testprog.Cmd{Path: out})
			if res.Exit != 0 || res.Stdout != "s=95\n" {
				t.Fatalf("rewritten program: %s", res)
			}
			var args []string
			for _, l := range readTrace(t, out+".trace") {
				args = append(args, l.Event+strings.TrimSpace(l.Args))
			}
			if strings.Join(args, " ") != strings.Repeat(`strtols="12" `, 4)+`strtols="12"` {
				t.Errorf("records: %q, want strtol s=\"12\" five times (the calls from the handler missed)", args)
			}
			code, stdout, stderr := kp("profile", out+".trace")
			counts := map[string][2]uint64{}
			for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
				f := strings.Fields(line)
				if len(f) < 3 {
					continue
				}
				h, _ := strconv.ParseUint(f[len(f)-2], 10, 64)
				m, _ := strconv.ParseUint(f[len(f)-1], 10, 64)
				counts[f[len(f)-3]] = [2]uint64{h, m}
			}
			if code != 0 || counts["strtol"] != [2]uint64{5, 5} || counts["w"] != [2]uint64{5, 0} {
				t.Errorf("profile: exit %d, %v, want strtol 5 hits 5 missed, w 5 hits\n%s%s", code, counts, stdout, stderr)
			}
		})
	}
}
