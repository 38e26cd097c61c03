package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/internal/rewriter"
	"github.com/kprewrite/kprewrite/tests/internal/testprog"
	"github.com/kprewrite/kprewrite/trampolines"
)

// inlineRecSrc passes known values in the registers an inline record saves before it
// uses them (%ax %cx %dx %r9 %r10 %r11: read back from its frame) and in others (%di
// %si %r8: stored from where they are), and has a probe site where the arithmetic
// flags are live (fl_site: between a cmp and the setl that reads it), after a warm-up
// (the runtime measures the TSC's rate over its first milliseconds of hits).
const inlineRecSrc = `#include <stdio.h>
#include <unistd.h>
#define F __attribute__((noinline, used))
F long r0(void) { __asm__ volatile(""); return 1; }
F long r3(long a, long b, long c) { __asm__ volatile(""); return a + b + c; }
F long r6(long a, long b, long c, long d, long e, long f) { __asm__ volatile(""); return a ^ b ^ c ^ d ^ e ^ f; }
F long rx(long a) { __asm__ volatile(""); return a + 1; }
F long warm(long a) { __asm__ volatile(""); return a + 3; }
F long fl(long a, long b) {
	long r;
	__asm__ volatile("cmp %2, %1\n\t.globl fl_site\nfl_site:\n\tnop; nop; nop; nop; nop\n\tsetl %b0\n\tmovzbl %b0, %k0"
			 : "=&r"(r) : "r"(a), "r"(b) : "cc");
	return r;
}
static long call_rx(long a, long x, long y, long z) {
	register long r10 __asm__("r10") = y;
	register long r11 __asm__("r11") = z;
	long ret;
	__asm__ volatile("call rx" : "=a"(ret), "+D"(a), "+r"(r10), "+r"(r11) : "0"(x)
			 : "rcx", "rdx", "rsi", "r8", "r9", "memory", "cc");
	return ret;
}
int main(void) {
	long s = 0;
	for (int i = 0; i < 20; i++) {
		s += warm(i);
		usleep(1000);
	}
	for (long i = 0; i < 3000; i++)
		s += r0() + r3(i, 2 * i, ~i) + r6(1, 2, 3, i + 4, i << 8, -i) + call_rx(i, 3 * i, i + 10, i << 4) +
		     fl(i % 7, 3) * (i + 1);
	printf("%ld\n", s);
	return 0;
}
`

// TestInlineRecords: events whose detours write their records inline
// (kprt.DFInlineRec: src/inlinerec.S, one at a site where the flags are live) record
// exactly what the program passed, call by call, registers read from the code's frame
// and from where they are, and the program computes what it does unrewritten (its flags
// and registers put back). Under gdb, the code's way out to the shared detour is taken
// by few hits (the thread's first, a clock copy renewed): fails when the inline record
// never writes (its iropen word left stale) as when it writes a wrong record.
func TestInlineRecords(t *testing.T) {
	prog := testprog.Build(t, inlineRecSrc, "c", "-O2", "-no-pie", "-fno-pie", "-mno-red-zone")
	want := testprog.Run(t, testprog.Cmd{Path: prog})
	if want.Exit != 0 {
		t.Fatalf("program: %s", want)
	}
	syms := map[string]uint64{}
	for _, s := range elfSymbols(t, prog) {
		syms[s.Name] = s.Value
	}
	out := filepath.Join(t.TempDir(), "irec")
	defs := []string{"p:q/r0 r0", "p:q/r3 r3 a=%di b=%si c=%dx", "p:q/r6 r6 f=%r9 d=%cx e=%r8",
		"p:q/rx rx x=%ax y=%r10 z=%r11", fmt.Sprintf("p:q/fl fl+%d", syms["fl_site"]-syms["fl"]), "p:q/warm warm"}
	rewriteWith(t, prog, out, defs)
	for _, f := range []string{"r0", "r3", "r6", "rx", "fl", "warm"} {
		if !hasSymbolPrefix(t, out, rewriter.SymInlineRecPrefix+f+"+") {
			t.Fatalf("%s: no inline record (%s%s+...)", f, rewriter.SymInlineRecPrefix, f)
		}
	}
	r := testprog.Run(t, testprog.Cmd{Path: out, Env: []string{"KPREWRITE_QUIET=1"}})
	if r.Exit != 0 || r.Stdout != want.Stdout {
		t.Fatalf("rewritten program: %s\nwant stdout %q", r, want.Stdout)
	}
	got := eventArgs(t, out+".trace", "warm")
	var exp []string
	for i := uint64(0); i < 3000; i++ {
		exp = append(exp, "r0",
			fmt.Sprintf("r3 a=0x%x b=0x%x c=0x%x", i, 2*i, ^i),
			fmt.Sprintf("r6 f=0x%x d=0x%x e=0x%x", -i, i+4, i<<8),
			fmt.Sprintf("rx x=0x%x y=0x%x z=0x%x", 3*i, i+10, i<<4), "fl")
	}
	if len(got) != len(exp) {
		t.Fatalf("%d records, want %d; first: %q", len(got), len(exp), got[:min(len(got), 8)])
	}
	for i := range exp {
		if got[i] != exp[i] {
			t.Fatalf("record %d: %q, want %q", i, got[i], exp[i])
		}
	}
	inlineRecDeclines(t, out)
}

// inlineRecDeclines runs bin under gdb and fails when more than a tenth of the 3000
// hits of r3's event leave its inline record for the shared detour.
func inlineRecDeclines(t *testing.T, bin string) {
	t.Helper()
	testprog.Need(t, "gdb")
	if !(cpuHasFlag(t, "rdpid") && cpuHasFlag(t, "3dnowprefetch") && cpuHasFlag(t, "constant_tsc")) {
		t.Skip("this CPU lacks rdpid, prefetchw or a constant TSC: inline records always decline here")
	}
	off, err := trampolines.InlineRecDecline()
	if err != nil {
		t.Fatal(err)
	}
	var at uint64
	for _, s := range elfSymbols(t, bin) {
		if strings.HasPrefix(s.Name, rewriter.SymInlineRecPrefix+"r3+") {
			at = s.Value + uint64(off)
		}
	}
	cmd := exec.Command("gdb", "-batch", "-nx", "-ex", "set startup-with-shell off", "-ex", fmt.Sprintf("break *%#x", at),
		"-ex", "commands\nsilent\ncontinue\nend", "-ex", "run", "-ex", "info breakpoints", "--args", bin)
	cmd.Env = append(os.Environ(), "KPREWRITE_QUIET=1", "KPREWRITE_TRACE="+bin+".gdb.trace")
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("gdb: %v\n%s", err, testprog.Clip(string(b), 2000))
	}
	n := 0
	if m := regexp.MustCompile(`already hit (\d+) time`).FindSubmatch(b); m != nil {
		n, _ = strconv.Atoi(string(m[1]))
	}
	if n > 300 {
		t.Errorf("%d of r3's 3000 hits left its inline record", n)
	}
	t.Logf("%d of r3's 3000 hits left its inline record", n)
}

// TestInlineRecordsLimit: at most kprt.InlineRecMax points of an image write their
// records inline; with more, none do (the shared detour body stays in the caches).
func TestInlineRecordsLimit(t *testing.T) {
	var src strings.Builder
	src.WriteString("#include <stdio.h>\n")
	for i := range 65 {
		fmt.Fprintf(&src, "__attribute__((noinline)) long f%d(long a) { __asm__ volatile(\"\"); return a + %d; }\n", i, i)
	}
	src.WriteString("int main(void) { long s = 0;\n")
	for i := range 65 {
		fmt.Fprintf(&src, "s += f%d(s);\n", i)
	}
	src.WriteString("printf(\"%ld\\n\", s); return 0; }\n")
	prog := testprog.Build(t, src.String(), "c", "-O2")
	for _, n := range []int{64, 65} {
		var defs []string
		for i := range n {
			defs = append(defs, fmt.Sprintf("p:q/e%d f%d a=%%di", i, i))
		}
		out := filepath.Join(t.TempDir(), fmt.Sprintf("lim%d", n))
		rewriteWith(t, prog, out, defs)
		k := 0
		for _, s := range elfSymbols(t, out) {
			if strings.HasPrefix(s.Name, rewriter.SymInlineRecPrefix) {
				k++
			}
		}
		if want := map[int]int{64: 64, 65: 0}[n]; k != want {
			t.Errorf("%d events: %d inline records, want %d", n, k, want)
		}
		r := testprog.Run(t, testprog.Cmd{Path: out, Env: []string{"KPREWRITE_QUIET=1"}})
		if r.Exit != 0 {
			t.Fatalf("%d events: %s", n, r)
		}
		if recs := readTrace(t, out+".trace"); len(recs) != n {
			t.Errorf("%d events: %d records, want %d", n, len(recs), n)
		}
	}
}
