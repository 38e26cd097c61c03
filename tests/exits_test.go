package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/internal/cli"
	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// exitsSrc has functions that return in every way: several rets, a tail call, a tail
// call through a pointer, real recursion deeper than the default maxactive, a jump
// table, a split .cold part, longjmp out, an exception through and one caught. It
// prints how many times each function returned.
const exitsSrc = `
#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <pthread.h>
#include <stdexcept>
#define NI __attribute__((noinline))
volatile int g;
static std::jmp_buf jb;
extern "C" {
NI int leaf(int x) { return x * 3 + g; }
NI int two_rets(int x) {
	if (x > 10) { g++; return x - g; }
	g += 2;
	return x + g * 5;
}
NI int tail(int x) { g++; return leaf(x + 1); }
int (*volatile fp)(int) = leaf;
NI int tailptr(int x) { g++; return fp(x + 2); }
NI int rec(int x) { if (x <= 0) return g; int r = rec(x - 1); g += r & 1; return r + 1; }
NI int sw(int x) {
	switch (x & 7) {
	case 0: return g + 1; case 1: return g * 7; case 2: return g - 3; case 3: return g ^ 9;
	case 4: return g + 11; case 5: return g * 13; case 6: return g - 17; default: return 0;
	}
}
__attribute__((cold, noinline)) void coldpath(int x) { g += x; fprintf(stderr, "cold %d\n", x); }
NI int withcold(int x) {
	if (__builtin_expect(x % 1000 == 999, 0)) { coldpath(x); return -1; }
	return x + g;
}
NI int jumper(int x) { if (x % 5 == 3) std::longjmp(jb, 1); return x + g; }
NI int thrower(int x) { if (x % 4 == 0) throw std::runtime_error("x"); return x + g; }
NI int catcher(int x) { try { return thrower(x); } catch (...) { return -1; } }
}

static void *worker(void *) {
	for (int i = 0; i < 5000; i++) g += leaf(i) + two_rets(i % 20) + rec(i % 3);
	return nullptr;
}

int main(int argc, char **argv) {
	long n = 2000, s = 0;
	if (argc > 1 && std::strcmp(argv[1], "threads") == 0) {
		pthread_t t[8];
		for (auto &th : t) pthread_create(&th, nullptr, worker, nullptr);
		for (auto &th : t) pthread_join(th, nullptr);
		long r = 0;
		for (int i = 0; i < 5000; i++) r += i % 3 + 1;
		std::printf("leaf=%d two=%d rec=%ld\n", 8 * 5000, 8 * 5000, 8 * r);
		return 0;
	}
	long recs = 0, jumps = 0, throws = 0;
	for (long i = 0; i < n; i++) {
		s += two_rets(i % 20) + tail(i) + tailptr(i) + rec(i % 40) + sw(i) + withcold(i) + catcher(i);
		recs += i % 40 + 1;
		throws += i % 4 == 0;
		if (setjmp(jb) == 0) s += jumper(i); else jumps++;
	}
	std::printf("leaf=%ld two=%ld tail=%ld tailptr=%ld rec=%ld sw=%ld withcold=%ld jumper=%ld thrower=%ld catcher=%ld sum=%ld\n",
		2 * n, n, n, n, recs, n, n, n - jumps, n - throws, n, s);
	return 0;
}
`

// TestCountOnlyReturns: with --count-only, return probes of functions whose returns the
// analysis sees are counted where they return ([EXIT] points, no return-address hook),
// the others hook the return address as usual; either way the counts are the number of
// returns the program itself counted, with threads, recursion beyond maxactive,
// longjmp and exceptions; and the program behaves like the original.
func TestCountOnlyReturns(t *testing.T) {
	funcs := []string{"leaf", "two_rets", "tail", "tailptr", "rec", "sw", "withcold", "jumper", "thrower", "catcher"}
	short := map[string]string{"two_rets": "two"}
	var defs []string
	for _, f := range funcs {
		ev := f
		if s, ok := short[f]; ok {
			ev = s
		}
		defs = append(defs, fmt.Sprintf("r:kpw/%s %s $retval", ev, f))
	}
	for _, opt := range []string{"-O2", "-O0", "-O3"} {
		t.Run(opt, func(t *testing.T) {
			prog := testprog.Build(t, exitsSrc, "c++", opt, "-pthread")
			dir := t.TempDir()
			out := filepath.Join(dir, "exits")
			rewriteWith(t, prog, out, defs, "--count-only")
			code, list, _ := kp("list", out)
			if code != 0 {
				t.Fatalf("list: exit %d", code)
			}
			exitFuncs := map[string]bool{}
			for _, l := range strings.Split(strings.TrimSpace(list), "\n") {
				f := strings.Fields(l)
				if len(f) >= 5 && strings.Contains(l, "[EXIT]") {
					if f[1] != "r" || !strings.Contains(l, "[OPTIMIZED]") {
						t.Errorf("exit line %q: want r and [OPTIMIZED]", l)
					}
					fn, _, _ := strings.Cut(f[2], "+")
					exitFuncs[strings.TrimSuffix(fn, ".cold")] = true
				}
			}
			t.Logf("%s: counted at their exits: %v", opt, exitFuncs)
			// `check` says the same before any rewrite: the count sites of each return
			// probe are the [EXIT] lines of the rewrite
			checkExits(t, prog, out, defs)
			// --exits-only leaves out exactly the return probes counted by a hook
			eo := filepath.Join(dir, "exits-only")
			args := []string{"rewrite", "--count-only", "--exits-only", "--skip-refused", "-o", eo}
			for _, d := range defs {
				args = append(args, "-e", d)
			}
			code, _, stderr := kp(append(args, prog)...)
			if code != 0 || strings.Count(stderr, "not-exits (--exits-only)") != len(funcs)-len(exitFuncs) {
				t.Errorf("--exits-only: exit %d, %d refusals, want %d:\n%s", code, strings.Count(stderr, "not-exits"), len(funcs)-len(exitFuncs), stderr)
			}
			if code, l, _ := kp("list", eo); code != 0 || strings.Count(l, "[EXIT]") != strings.Count(l, "\n") {
				t.Errorf("--exits-only: a probe that is not an [EXIT] point:\n%s", l)
			}
			if opt != "-O0" {
				for _, f := range []string{"leaf", "two_rets", "tail", "rec"} {
					if !exitFuncs[f] {
						t.Errorf("%s: not counted at its exits\n%s", f, list)
					}
				}
			}
			for _, mode := range []string{"seq", "threads"} {
				tr := filepath.Join(dir, mode+".trace")
				res := testprog.Same(t, prog, out, testprog.Cmd{Args: []string{mode}, Extra: []string{"KPREWRITE_TRACE=" + tr}}, nil)
				prof := profile(t, tr, out)
				for _, kv := range strings.Fields(res.Stdout) {
					ev, v, _ := strings.Cut(kv, "=")
					if ev == "sum" {
						continue
					}
					want, err := strconv.ParseUint(v, 10, 64)
					if err != nil {
						t.Fatalf("output %q", res.Stdout)
					}
					fn := ev
					if ev == "two" {
						fn = "two_rets"
					}
					got := prof[ev]
					switch {
					case exitFuncs[fn]:
						// counted where it returns: exact, nothing missed
						if got != [2]uint64{want, 0} {
							t.Errorf("%s: %s (exits): profile %v, the program returned %d times", mode, ev, got, want)
						}
					default:
						// a hooked return address: a call deeper than maxactive, or one an
						// exception unwinds, is a miss
						if got[0] > want || got[0]+got[1] < want || (got[1] != 0 && fn != "rec" && fn != "thrower") {
							t.Errorf("%s: %s (hooked): profile %v, the program returned %d times", mode, ev, got, want)
						}
					}
				}
			}
		})
	}
}

// checkExits compares `kprewrite check --json`'s exits of each return-probe definition
// with the [EXIT] lines `kprewrite list -v` shows for its event in the rewrite out.
func checkExits(t *testing.T, prog, out string, defs []string) {
	checkExitsOf(t, prog, out, defs, false)
}

// checkExitsOf is checkExits, or with traced the check's trace_exits (rewrite --exits).
func checkExitsOf(t *testing.T, prog, out string, defs []string, traced bool) {
	t.Helper()
	args := []string{"check", "--json"}
	for _, d := range defs {
		args = append(args, "-e", d)
	}
	code, js, stderr := kp(append(args, prog)...)
	if code != 0 {
		t.Fatalf("check: exit %d: %s", code, stderr)
	}
	var r cli.CheckReport
	if err := json.Unmarshal([]byte(js), &r); err != nil {
		t.Fatal(err)
	}
	code, list, _ := kp("list", "-v", out)
	if code != 0 {
		t.Fatalf("list -v: exit %d", code)
	}
	listed := map[string][]string{} // event -> [EXIT] addresses
	for _, l := range strings.Split(strings.TrimSpace(list), "\n") {
		f := strings.Fields(l)
		if strings.Contains(l, "[EXIT]") && len(f) >= 6 {
			a, _ := strconv.ParseUint(f[0], 16, 64)
			listed[f[5]] = append(listed[f[5]], fmt.Sprintf("%#x", a))
		}
	}
	for _, s := range r.Sites {
		ex := s.Exits
		if traced {
			ex = s.TraceExits
		}
		if !s.Return || ex == nil {
			continue
		}
		got, want := strings.Join(listed[s.Event], " "), strings.Join(ex.Sites, " ")
		if got != want {
			t.Errorf("%s: check says exits %q (%s), list shows [EXIT] at %q", s.Event, want, ex.Reason, got)
		}
	}
}

// TestTraceExits: with --exits, return events are recorded at their functions' rets
// (and hook the return address at tail calls) instead of at a hooked return address at
// every entry. The trace must be the hooked rewrite's, line for line (same events,
// heads with the real return addresses, $retval), at -O0, -O2 and -O3, with recursion,
// tail calls direct and through a pointer, a jump table, a .cold part, longjmp out and
// exceptions through and caught; with 8 threads, every return counted exactly.
func TestTraceExits(t *testing.T) {
	funcs := []string{"leaf", "two_rets", "tail", "tailptr", "rec", "sw", "withcold", "jumper", "thrower", "catcher"}
	var hooked, exits []string
	for _, f := range funcs {
		ev := strings.ReplaceAll(f, "_", "")
		for _, d := range []*[]string{&hooked, &exits} {
			*d = append(*d, fmt.Sprintf("p:kpw/%s_in %s x=%%di:s32", ev, f))
		}
		// (maxactive 64: rec's recursion misses nothing where it is hooked)
		hooked = append(hooked, fmt.Sprintf("r64:kpw/%s %s ret=$retval:s32 ip=%%ip", ev, f))
		exits = append(exits, fmt.Sprintf("r64:kpw/%s %s ret=$retval:s32 ip=%%ip", ev, f))
	}
	for _, opt := range []string{"-O2", "-O0", "-O3"} {
		t.Run(opt, func(t *testing.T) {
			prog := testprog.Build(t, exitsSrc, "c++", opt, "-pthread")
			dir, _, kh := sameNamePair(t, prog, "exits")
			ke := filepath.Join(dir, "e", "exits")
			os.Mkdir(filepath.Dir(ke), 0o755)
			rewriteWith(t, prog, kh, hooked)
			rewriteWith(t, prog, ke, exits, "--exits")
			_, list, _ := kp("list", ke)
			// `check` says the same before any rewrite (no function of this program has
			// an exit in its entry probe's DCR)
			checkExitsOf(t, prog, ke, exits, true)
			if opt != "-O0" {
				for _, f := range []string{"leaf", "two_rets", "tail", "tailptr", "rec"} {
					mustExit(t, ke, f)
				}
			}
			if min := map[bool]int{true: 3, false: 8}[opt == "-O0"]; strings.Count(list, "[EXIT]") < min {
				t.Fatalf("too few exits:\n%s", list)
			}
			run := func(bin, mode string) ([]traceLine, testprog.Result) {
				tr := bin + "." + mode + ".trace"
				c := noASLR(bin, mode)
				c.Extra = []string{"KPREWRITE_TRACE=" + tr}
				res := testprog.Run(t, c)
				if mode == "seq" {
					return readTrace(t, tr, bin), res
				}
				prof := profile(t, tr, bin)
				for _, kv := range strings.Fields(res.Stdout) {
					ev, v, _ := strings.Cut(kv, "=")
					if ev == "two" {
						ev = "tworets"
					}
					if got := prof[ev]; got != [2]uint64{mustAtoi(t, v), 0} {
						t.Errorf("%s: %s: profile %v, the program returned %s times", bin, ev, got, v)
					}
				}
				return nil, res
			}
			want, wres := run(kh, "seq")
			got, gres := run(ke, "seq")
			if wres.Diff(gres) != "" {
				t.Fatalf("the two rewrites behave differently: %s", wres.Diff(gres))
			}
			if len(want) < 10000 || len(got) != len(want) {
				t.Fatalf("hooked: %d lines, --exits: %d", len(want), len(got))
			}
			bad := 0
			for i := range want {
				w, g := want[i], got[i]
				if w.Event != g.Event || w.Head != g.Head || w.Args != g.Args {
					if bad++; bad <= 5 {
						t.Errorf("line %d:\n  hooked:  %s: %s%s\n  --exits: %s: %s%s", i+1, w.Event, w.Head, w.Args, g.Event, g.Head, g.Args)
					}
				}
			}
			if bad > 0 {
				t.Fatalf("%d lines differ", bad)
			}
			// the calls view: the entries carry the stack pointer (kprt.DFSpEntry), so a
			// call longjmp or an exception left is ended as lost there, as when hooked
			code, rep, stderr := kp("report", "-b", ke, ke+".seq.trace")
			if code != 0 {
				t.Fatalf("report: %s", stderr)
			}
			for _, want := range []string{"jumper  (400 lost returns)", "thrower  (500 lost returns)"} {
				if !strings.Contains(rep, want) {
					t.Errorf("report: no %q:\n%s", want, rep)
				}
			}
			if strings.Contains(rep, "rec  (") {
				t.Errorf("report: rec lost returns:\n%s", rep)
			}
			run(ke, "threads")
			// --exits-only: no return address hooked anywhere; the functions with a tail
			// call (hooked there) are left out with the others that would hook
			eo := filepath.Join(dir, "exits-only")
			args := []string{"rewrite", "--exits", "--exits-only", "--skip-refused", "-o", eo}
			for _, d := range exits {
				args = append(args, "-e", d)
			}
			if code, _, stderr = kp(append(args, prog)...); code != 0 {
				t.Fatalf("--exits-only: exit %d: %s", code, stderr)
			}
			_, l, _ := kp("list", eo)
			for _, line := range strings.Split(strings.TrimSpace(l), "\n") {
				if f := strings.Fields(line); len(f) >= 4 && f[1] == "r" && !strings.Contains(line, "[EXIT]") {
					t.Errorf("--exits-only: a hooked return probe: %s", line)
				}
			}
			if opt != "-O0" && (!strings.Contains(stderr, "tail-call") || strings.Contains(l, "r  tail+")) {
				t.Errorf("--exits-only: tail's return probe (a tail call) should be refused:\n%s\n%s", stderr, l)
			}
			testprog.Same(t, prog, eo, testprog.Cmd{Args: []string{"seq"}, Extra: []string{"KPREWRITE_TRACE=" + eo + ".trace"}}, nil)
		})
	}
}

func mustAtoi(t *testing.T, s string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("not a count: %q", s)
	}
	return n
}

// TestTraceExitsGo: a Go program's return values, recorded at the function's rets with
// --exits --exits-only (nothing hooked: Go's stack copying and unwinder would fail on a
// hooked return address, as on the kernel's uretprobe): fib's 177 calls for fib(10),
// each return's value the fib of its argument (Go's register ABI: the argument in
// %ax at the entry, the result in %ax at the ret).
func TestTraceExitsGo(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool in PATH")
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module gofib\n\ngo 1.22\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "main.go"), []byte(`package main

import "fmt"

//go:noinline
func fib(n int) int {
	if n < 2 {
		return n
	}
	return fib(n-1) + fib(n-2)
}

func main() { fmt.Println(fib(10)) }
`), 0o644)
	prog := filepath.Join(dir, "gofib")
	cmd := exec.Command(goBin, "build", "-o", prog, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=", "GOTOOLCHAIN=local")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out := filepath.Join(dir, "gofib.k")
	rewriteWith(t, prog, out, []string{"p:kpw/fib main.fib n=%ax:s64", "r:kpw/fibr main.fib ret=$retval:s64"},
		"--exits", "--exits-only", "--optimized-only")
	mustExit(t, out, "main.fib")
	tr := filepath.Join(dir, "gofib.trace")
	res := testprog.Same(t, prog, out, testprog.Cmd{Extra: []string{"KPREWRITE_TRACE=" + tr}}, nil)
	if res.Stdout != "55\n" {
		t.Fatalf("unexpected run: %s", res)
	}
	fib := func(n int) int {
		a, b := 0, 1
		for ; n > 0; n-- {
			a, b = b, a+b
		}
		return a
	}
	var args []int // the arguments of the calls not returned yet
	calls := 0
	for _, l := range readTrace(t, tr, out) {
		var v int
		switch l.Event {
		case "fib":
			fmt.Sscanf(strings.TrimSpace(l.Args), "n=%d", &v)
			args = append(args, v)
			calls++
		case "fibr":
			fmt.Sscanf(strings.TrimSpace(l.Args), "ret=%d", &v)
			if len(args) == 0 || v != fib(args[len(args)-1]) {
				t.Fatalf("%s: %s%s with the calls %v open", l.Event, l.Head, l.Args, args)
			}
			args = args[:len(args)-1]
		}
	}
	if calls != 177 || len(args) != 0 {
		t.Fatalf("%d calls, %d not returned; want 177 and 0", calls, len(args))
	}
}

// brTailProg's brtail has one ret whose preceding instruction a jne also reaches, with
// padding after the ret: the exit site starts at that branch target (analysis'
// TestExitsAtBranchTarget). Both paths in.
const brTailProg = `
#include <stdio.h>
#include <stdlib.h>
__asm__(".text\n.globl brtail\n.type brtail,@function\nbrtail:\n.cfi_startproc\n"
	"movl $1,%eax\n testl %edi,%edi\n jne 1f\n movl $3,%eax\n"
	"1: xorl %edx,%edx\n ret\n .byte 0x0f,0x1f,0x00\n"
	".cfi_endproc\n.size brtail,.-brtail\n");
extern int brtail(int);
int main(int argc, char **argv) {
	int n = argc > 1 ? atoi(argv[1]) : 10, s = 0;
	for (int i = 0; i < n; i++)
		s += brtail(i & 1);
	printf("%d\n", s);
	return 0;
}
`

// TestTraceExitsBranchTarget: a return event whose exit site starts at a branch target
// before the ret is recorded there ([EXIT]) for both paths, each with the value the ret
// returns, the same records as the hooked rewrite's.
func TestTraceExitsBranchTarget(t *testing.T) {
	prog := testprog.Build(t, brTailProg, "c", "-O2")
	dir := t.TempDir()
	kh, ke := filepath.Join(dir, "hooked"), filepath.Join(dir, "exits")
	def := []string{"r:kpw/b brtail ret=$retval:s32"}
	rewriteWith(t, prog, kh, def)
	rewriteWith(t, prog, ke, def, "--exits")
	mustExit(t, ke, "brtail")
	var traces [2][]string
	for i, bin := range []string{kh, ke} {
		tr := bin + ".trace"
		testprog.Same(t, prog, bin, testprog.Cmd{Args: []string{"20"}, Extra: []string{"KPREWRITE_TRACE=" + tr}}, nil)
		for _, l := range readTrace(t, tr, bin) {
			traces[i] = append(traces[i], l.Event+l.Args)
		}
	}
	var want []string
	for i := 0; i < 20; i++ {
		want = append(want, "b ret="+strconv.Itoa(map[int]int{0: 3, 1: 1}[i&1]))
	}
	sameLines(t, traces[0], want)
	sameLines(t, traces[1], want)
}
