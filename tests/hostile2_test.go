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
