package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// Issue 50: more of kprewrite used as a hostile user would.

// valgrindSrc calls C functions (one allocating, which memcheck follows) and two assembly
// functions whose probed instructions single-step when they are int3 probes: pushf (+0)
// and an indirect call (+8), whose copy pushes the slot's address.
const valgrindSrc = `
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int f_pushf(int), f_indcall(int), f_leaf(int);
__asm__(".text\n"
	".globl f_pushf\n.type f_pushf,@function\nf_pushf:\n"
	"  pushf\n  pop %rax\n  and $0x100,%eax\n  add %edi,%eax\n  ret\n.size f_pushf,.-f_pushf\n"
	".globl f_leaf\n.type f_leaf,@function\nf_leaf:\n"
	"  lea 3(%rdi),%eax\n  ret\n.size f_leaf,.-f_leaf\n"
	".globl f_indcall\n.type f_indcall,@function\nf_indcall:\n"
	"  push %rbx\n  lea f_leaf(%rip),%rax\n  call *%rax\n  pop %rbx\n  ret\n.size f_indcall,.-f_indcall\n");
__attribute__((noinline)) int work(int a, int b) { __asm__ volatile("" ::: "memory"); return a * 7 + b; }
__attribute__((noinline)) long sum(int n) {
	long s = 0;
	for (int i = 0; i < n; i++) s += work(i, n);
	return s;
}
__attribute__((noinline)) char *dup(const char *s) {
	char *p = malloc(strlen(s) + 1);
	strcpy(p, s);
	return p;
}
int main(void) {
	long t = 0;
	for (int k = 0; k < 5; k++) t += sum(10 + k);
	for (int k = 0; k < 4; k++) t += f_pushf(k) + f_indcall(k);
	char *p = dup("valgrind");
	printf("total %ld %s\n", t, p);
	free(p);
	return 0;
}
`

// valgrindDefs: 5 sum returns, 60 work entries, 4 hits each of pushf and the indirect call.
var valgrindDefs = []string{
	"p:vg/work work a=%di b=%si",
	"r:vg/sum sum $retval",
	"p:vg/pushf f_pushf",
	"p:vg/indcall f_indcall+8",
	"p:vg/dup dup s=+0(%di):string",
}

var valgrindWant = map[string]int{"work": 60, "sum": 5, "pushf": 4, "indcall": 4, "dup": 1}

// valgrindHandlers: a kprobe with a post handler (single-stepped with the trap flag,
// which valgrind lacks) and a pre-only one (jump-optimized), counting their calls.
const valgrindHandlers = `
#include <kprewrite.h>
static int pre, post, dups;
static int pre_work(struct kprobe *p, struct pt_regs *regs) { (void)p; (void)regs; pre++; return 0; }
static void post_work(struct kprobe *p, struct pt_regs *regs, unsigned long flags) { (void)p; (void)regs; (void)flags; post++; }
static int pre_dup(struct kprobe *p, struct pt_regs *regs) { (void)p; (void)regs; dups++; return 0; }
DEFINE_KPROBE(kp_work, "work", .pre_handler = pre_work, .post_handler = post_work);
DEFINE_KPROBE(kp_dup, "dup", .pre_handler = pre_dup);
void kprewrite_exit(void) { pr_info("handlers: pre=%d post=%d dup=%d\n", pre, post, dups); }
`

// TestValgrind: a rewritten program died under valgrind, which test suites run programs
// under: SIGILL at the runtime's CPU number (rdpid, which valgrind may advertise in
// CPUID, and lsl: it implements neither), and SIGTRAP at the first int3 probe (valgrind
// gives an int3's SIGTRAP si_code TRAP_BRKPT, not the kernel's SI_KERNEL, so the
// runtime passed its own trap on to the default action; and it has no trap flag). The
// runtime now asks valgrind (its client request) and reads the CPU number by system
// call, takes TRAP_BRKPT for an int3 there, and ends a copy it would step with the
// slot's jmp back. Under `valgrind --error-exitcode=99 -q` the rewritten program prints
// what the original prints under it, valgrind reports nothing, and the trace has every
// hit: jump-optimized probes (the default), and int3 probes boosted, stepped and stepped
// with an int3.
func TestValgrind(t *testing.T) {
	testprog.Need(t, "gcc", "valgrind")
	prog := testprog.Build(t, valgrindSrc, "c", "-O2")
	dir := t.TempDir()
	defs := filepath.Join(dir, "defs")
	if err := os.WriteFile(defs, []byte(strings.Join(valgrindDefs, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	vg := func(path, trace string) testprog.Result {
		return testprog.Run(t, testprog.Cmd{Path: "valgrind", Args: []string{"--error-exitcode=99", "-q", path},
			Extra: []string{"KPREWRITE_TRACE=" + trace}})
	}
	want := vg(prog, filepath.Join(dir, "orig.trace"))
	if want.Exit != 0 || want.Signal != "" || want.Stderr != "" {
		t.Fatalf("original under valgrind: %s", want)
	}
	// C handlers: the pre handlers run, the post handler cannot, and one line says so
	t.Run("post-handler", func(t *testing.T) {
		h := filepath.Join(dir, "h.c")
		if err := os.WriteFile(h, []byte(valgrindHandlers), 0o644); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, "prog.handlers")
		if code, _, stderr := kp("rewrite", "--handlers", h, "-o", out, prog); code != 0 {
			t.Fatalf("rewrite --handlers: %s", stderr)
		}
		got := vg(out, out+".trace")
		const line = "kprewrite: valgrind has no trap-flag single-step: the post handlers of int3 probes do not run under it\n"
		if got.Exit != 0 || got.Signal != "" || got.Stdout != want.Stdout ||
			strings.Count(got.Stderr, line) != 1 || !strings.Contains(got.Stderr, "handlers: pre=60 post=0 dup=1") {
			t.Fatalf("under valgrind: %s\nwant the original's output, the line %q once, and pre=60 post=0 dup=1", got, line)
		}
		// natively every post handler runs and nothing is said
		nat := testprog.Run(t, testprog.Cmd{Path: out, Extra: []string{"KPREWRITE_TRACE=" + out + ".trace"}})
		if nat.Exit != 0 || strings.Contains(nat.Stderr, "valgrind") || !strings.Contains(nat.Stderr, "handlers: pre=60 post=60 dup=1") {
			t.Fatalf("natively: %s", nat)
		}
	})
	for _, m := range []struct{ name, flags string }{
		{"default", ""},
		{"no-optimize", "--no-optimize"},
		{"no-boost", "--no-optimize --no-boost"},
		{"int3-step", "--no-optimize --no-boost --single-step int3"},
	} {
		t.Run(m.name, func(t *testing.T) {
			out := filepath.Join(dir, "prog."+m.name)
			trace := out + ".trace"
			args := append([]string{"rewrite", "-o", out, "-f", defs}, strings.Fields(m.flags)...)
			if code, _, stderr := kp(append(args, prog)...); code != 0 {
				t.Fatalf("rewrite %s: %s", m.flags, stderr)
			}
			if m.name == "default" {
				// the C functions' probes are jump-optimized: no signal at all
				_, list, _ := kp("list", out)
				for _, fn := range []string{"work", "sum", "dup"} {
					if !strings.Contains(list, " "+fn+"+0x0 ") {
						t.Errorf("list has no %s:\n%s", fn, list)
					}
					for _, l := range strings.Split(list, "\n") {
						if strings.Contains(l, " "+fn+"+0x0 ") && !strings.Contains(l, "[OPTIMIZED]") {
							t.Errorf("%s is not jump-optimized: %s", fn, l)
						}
					}
				}
			}
			got := vg(out, trace)
			if d := want.Diff(got); d != "" {
				t.Fatalf("under valgrind the rewritten program behaves differently:\n%s\n=== original: %s\n=== rewritten: %s", d, want, got)
			}
			code, text, stderr := kp("trace", trace)
			if code != 0 {
				t.Fatalf("trace: %s", stderr)
			}
			n := map[string]int{}
			for _, l := range traceLines(text) {
				for ev := range valgrindWant {
					if strings.Contains(l, " "+ev+": ") {
						n[ev]++
					}
				}
				if strings.Contains(l, " dup: ") && !strings.Contains(l, `s="valgrind"`) {
					t.Errorf("dup's record: %s", l)
				}
			}
			if fmt.Sprint(n) != fmt.Sprint(valgrindWant) {
				t.Errorf("records per event %v, want %v:\n%s", n, valgrindWant, testprog.Clip(text, 3000))
			}
		})
	}
}

// makecontextSrc runs three coroutines on their own stacks (makecontext), switching with
// swapcontext until each returns through uc_link: glibc's __start_context, entered by
// the coroutine function's ret, switches to the uc_link word's stack and calls
// setcontext.
const makecontextSrc = `
#include <stdio.h>
#include <stdlib.h>
#include <ucontext.h>
static ucontext_t mainc, c[3];
static int alive[3];
static unsigned long sum;
__attribute__((noinline)) static void step(int id, int i) { sum = sum * 31 + id * 100 + i; }
static void co(int id, int n) {
	for (int i = 0; i < n; i++) {
		step(id, i);
		swapcontext(&c[id], &mainc);
	}
	alive[id] = 0;
}
int main(void) {
	for (int k = 0; k < 3; k++) {
		getcontext(&c[k]);
		c[k].uc_stack.ss_sp = malloc(65536);
		c[k].uc_stack.ss_size = 65536;
		c[k].uc_link = &mainc;
		makecontext(&c[k], (void (*)(void))co, 2, k, 4 + k);
		alive[k] = 1;
	}
	for (int more = 1; more;) {
		more = 0;
		for (int k = 0; k < 3; k++)
			if (alive[k]) { swapcontext(&mainc, &c[k]); more = 1; }
	}
	printf("checksum %lu\n", sum);
	return 0;
}
`

// TestMakecontext: a static program with makecontext/swapcontext coroutines, rewritten
// with --calls '*', died of SIGSEGV (default and --count-only): the return probe at
// __start_context's entry hooked the word at %rsp, which is not a return address there
// (the coroutine function's ret enters it) but the uc_link that it reads after switching
// %rsp to it, so setcontext got the trampoline's address as its context. The analysis
// now refuses return probes on functions that set %rsp from something other than the
// stack pointer (retprobe-stack-switch: __start_context, setcontext, __longjmp), and
// the program prints what the original prints, static and dynamic.
func TestMakecontext(t *testing.T) {
	testprog.Need(t, "gcc")
	for _, link := range []string{"static", "dynamic"} {
		t.Run(link, func(t *testing.T) {
			flags := []string{"-O2"}
			if link == "static" {
				flags = append(flags, "-static")
			}
			prog := testprog.Build(t, makecontextSrc, "c", flags...)
			if link == "static" {
				for _, fn := range []string{"__start_context", "__setcontext", "__longjmp"} {
					code, out, stderr := kp("check", "-e", "r:g/x "+fn, prog)
					if code != 0 {
						if strings.Contains(stderr, "no symbol") || strings.Contains(stderr, "not found") {
							continue // not in this C library
						}
						t.Fatalf("check %s: %s", fn, stderr)
					}
					if !strings.Contains(out, " refuse ") || !strings.Contains(out, "retprobe-stack-switch at ") {
						t.Errorf("check r:%s: want refused by retprobe-stack-switch:\n%s", fn, out)
					}
				}
			}
			dir := t.TempDir()
			for _, mode := range []string{"default", "count-only"} {
				out := filepath.Join(dir, "prog."+mode)
				args := []string{"rewrite", "--calls", "*", "-o", out}
				if mode == "count-only" {
					args = append(args, "--count-only")
				}
				if code, _, stderr := kp(append(args, prog)...); code != 0 {
					t.Fatalf("rewrite %s: %s", mode, stderr)
				}
				trace := out + ".trace"
				got := testprog.Same(t, prog, out, testprog.Cmd{Extra: []string{"KPREWRITE_TRACE=" + trace}}, nil)
				if !strings.HasPrefix(got.Stdout, "checksum ") {
					t.Fatalf("%s: %s", mode, got)
				}
				// every call is counted: 4 + 5 + 6 of step, one of each coroutine and, in
				// the static program, its __start_context (the entry probe stays)
				code, prof, stderr := kp("profile", trace)
				if code != 0 {
					t.Fatalf("profile %s: %s", mode, stderr)
				}
				want := map[string]string{"step": "15", "step__return": "15", "co": "3", "main": "1"}
				if link == "static" {
					want["__start_context"] = "3"
				}
				for _, l := range strings.Split(prof, "\n") {
					if f := strings.Fields(l); len(f) == 3 && want[f[0]] != "" {
						if f[1] != want[f[0]] || f[2] != "0" {
							t.Errorf("%s: %s: want %s hits, 0 missed", mode, l, want[f[0]])
						}
						delete(want, f[0])
					}
				}
				if len(want) > 0 {
					t.Errorf("%s: not in the profile: %v\n%s", mode, want, testprog.Clip(prof, 3000))
				}
			}
		})
	}
}
