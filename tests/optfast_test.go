package tests

import (
	"encoding/binary"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/internal/tracefile"
	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// regsiteProg's regsite(a, b, out) gives every general register a known value (rdi =
// a, rsi = b, the others regK below), makes the flags those of a - b, runs five
// 5-byte nops (regsite_s1..s5: five probe sites) and stores every register and the
// flags before and after them in out. main calls it with operands whose flags cover
// CF, PF, AF, ZF, SF and OF, and says "bad" for any register or flag the sites
// changed.
const regsiteProg = `
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
__asm__(
	".text\n.globl regsite\n.type regsite,@function\nregsite:\n"
	"push %rbx\npush %rbp\npush %r12\npush %r13\npush %r14\npush %r15\npush %rdx\n"
	"movabs $0x1a1a1a1a1a1a, %rax\nmovabs $0x1b1b1b1b1b1b, %rbx\nmovabs $0x1c1c1c1c1c1c, %rcx\n"
	"movabs $0x1d1d1d1d1d1d, %rdx\nmovabs $0x1e1e1e1e1e1e, %rbp\nmovabs $0x808080808080, %r8\n"
	"movabs $0x909090909090, %r9\nmovabs $0x101010101010, %r10\nmovabs $0x111111111111, %r11\n"
	"movabs $0x121212121212, %r12\nmovabs $0x131313131313, %r13\nmovabs $0x141414141414, %r14\n"
	"movabs $0x151515151515, %r15\n"
	"cmp %rsi, %rdi\npushfq\n"
	".globl regsite_s1\nregsite_s1: .byte 0x0f,0x1f,0x44,0x00,0x00\n"
	".globl regsite_s2\nregsite_s2: .byte 0x0f,0x1f,0x44,0x00,0x00\n"
	".globl regsite_s3\nregsite_s3: .byte 0x0f,0x1f,0x44,0x00,0x00\n"
	".globl regsite_s4\nregsite_s4: .byte 0x0f,0x1f,0x44,0x00,0x00\n"
	".globl regsite_s5\nregsite_s5: .byte 0x0f,0x1f,0x44,0x00,0x00\n"
	"pushfq\npush %rax\npush %rbx\npush %rcx\npush %rdx\npush %rbp\npush %rsi\npush %rdi\n"
	"push %r8\npush %r9\npush %r10\npush %r11\npush %r12\npush %r13\npush %r14\npush %r15\n"
	"mov 136(%rsp), %rax\nxor %ecx, %ecx\n"
	"1: mov (%rsp,%rcx,8), %rdx\nmov %rdx, (%rax,%rcx,8)\ninc %rcx\ncmp $17, %rcx\njne 1b\n"
	"add $144, %rsp\npop %r15\npop %r14\npop %r13\npop %r12\npop %rbp\npop %rbx\nret\n"
	".size regsite, .-regsite\n");
void regsite(long a, long b, unsigned long *out);
static const unsigned long want[15] = {0x151515151515, 0x141414141414, 0x131313131313, 0x121212121212,
	0x111111111111, 0x101010101010, 0x909090909090, 0x808080808080, 0, 0, 0x1e1e1e1e1e1e, 0x1d1d1d1d1d1d,
	0x1c1c1c1c1c1c, 0x1b1b1b1b1b1b, 0x1a1a1a1a1a1a};
int main(int argc, char **argv)
{
	static const long ops[][2] = {{LONG_MAX, -1}, {LONG_MIN, 1}, {0, 0}, {1, 2}, {0x10, 1}, {3, 0}, {-5, -5}, {7, 0x40}};
	int n = argc > 1 ? atoi(argv[1]) : 8, bad = 0;
	for (int i = 0; i < n; i++) {
		long a = ops[i % 8][0], b = ops[i % 8][1];
		unsigned long out[17];
		regsite(a, b, out);
		for (int r = 0; r < 15; r++) {
			unsigned long w = r == 8 ? (unsigned long)a : r == 9 ? (unsigned long)b : want[r];
			if (out[r] != w)
				bad++, printf("bad: call %d register %d %#lx\n", i, r, out[r]);
		}
		if ((out[15] ^ out[16]) & 0xcd5) /* CF PF AF ZF SF OF DF */
			bad++, printf("bad: call %d flags %#lx before, %#lx after\n", i, out[16], out[15]);
	}
	printf("%d calls, %d bad\n", n, bad);
	return bad != 0;
}
`

// TestOptFastPath: the detour's fast path (optprobe.S: a hot event's record written in
// assembly, the registers it uses saved, the flags by lahf/sahf) at five jump-optimized
// sites that between them fetch every general register: each record holds the value
// the register had, the program sees every register and flag as it was (the flags of
// operands that set each arithmetic flag, OF included), and the hits do not reach
// the C side of the detour (gdb counts kprewrite_rt_optcall), so it is the fast path
// that wrote them.
func TestOptFastPath(t *testing.T) {
	prog := testprog.Build(t, regsiteProg, "c", "-O2")
	addr := symbolTable(t, prog)
	fetch := [5]string{"r15=%r15 r14=%r14 r13=%r13", "r12=%r12 bp=%bp bx=%bx", "r11=%r11 r10=%r10 r9=%r9",
		"r8=%r8 ax=%ax cx=%cx", "dx=%dx si=%si di=%di"}
	var defs []string
	for i, args := range fetch {
		defs = append(defs, fmt.Sprintf("p:fp/s%d regsite+%d %s", i+1, addr[fmt.Sprintf("regsite_s%d", i+1)]-addr["regsite"], args))
	}
	out := filepath.Join(t.TempDir(), "fast")
	rewriteWith(t, prog, out, defs)
	if _, l, _ := kp("list", out); strings.Count(l, "[OPTIMIZED]") != 5 {
		t.Fatalf("want five jump-optimized sites:\n%s", l)
	}
	const n = 800
	tr := out + ".trace"
	testprog.Same(t, prog, out, testprog.Cmd{Args: []string{strconv.Itoa(n)}, Extra: []string{"KPREWRITE_TRACE=" + tr}}, nil)
	ops := [8][2]int64{{1<<63 - 1, -1}, {-1 << 63, 1}, {0, 0}, {1, 2}, {0x10, 1}, {3, 0}, {-5, -5}, {7, 0x40}}
	var want []string
	for i := 0; i < n; i++ {
		a, b := ops[i%8][0], ops[i%8][1]
		want = append(want, "s1 r15=0x151515151515 r14=0x141414141414 r13=0x131313131313",
			"s2 r12=0x121212121212 bp=0x1e1e1e1e1e1e bx=0x1b1b1b1b1b1b",
			"s3 r11=0x111111111111 r10=0x101010101010 r9=0x909090909090",
			"s4 r8=0x808080808080 ax=0x1a1a1a1a1a1a cx=0x1c1c1c1c1c1c",
			fmt.Sprintf("s5 dx=0x1d1d1d1d1d1d si=0x%x di=0x%x", uint64(b), uint64(a)))
	}
	var got []string
	for _, l := range readTrace(t, tr, out) {
		got = append(got, l.EA())
	}
	sameLines(t, got, want)

	// the C side of the detour ran for a few hits at most (a thread's first, a comm
	// older than its refresh), not for each: with the TSC clock, with the counter
	// clock, whose records' times are then the counts 1, 2, ... in the records' order,
	// and with the mono clock, whose fast path calls the vDSO (every register and
	// flag kept across the call: the program checks them)
	testprog.Need(t, "gdb")
	for _, clock := range []string{"tsc", "counter", "mono"} {
		gtr := out + "." + clock + ".trace"
		calls := cSideCalls(t, out, gtr, clock, []string{strconv.Itoa(n)}, "kprewrite_rt_optcall")[0]
		records := countedRecords(t, gtr, clock)
		if records != 5*n || calls > 5*n/10 {
			t.Errorf("%s: %d records, %d calls of the detour's C side for %d hits: the fast path took too few", clock, records, calls, 5*n)
		}
		t.Logf("%s: %d hits, %d of them through kprewrite_rt_optcall", clock, 5*n, calls)
	}
}

// callsFastProg calls mid n times; mid calls leaf twice: 3n calls, 6n records with
// --calls.
const callsFastProg = `
#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) int leaf(int x) { __asm__ volatile("" : "+r"(x)); return 3 * x + 1; }
__attribute__((noinline)) int mid(int x) { return leaf(x) + leaf(x + 1) + 1; }
int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 8;
	long s = 0;
	for (int i = 0; i < n; i++)
		s += mid(i);
	printf("%ld\n", s);
	return 0;
}
`

// TestOptFastPathCalls: --calls' records with the TSC clock and with the counter clock,
// return events at the functions' exits (the default: an EXIT line's record, the
// detour's assembly) or hooked (--calls-hook: a CALL line's entry record, the frame
// pushed on the return stack by the detour's assembly, the return's record by the
// trampoline's, kprw_rethook_fast): every call's two records, nested as the calls were
// (kprewrite report's counts), the counter's times 1, 2, ... in the records' order, and
// few hits reaching C (gdb counts the detour's C side and the trampoline's slow path).
// The counter clock went to C for every hooked return until the twenty-sixth session
// of issue 49.
func TestOptFastPathCalls(t *testing.T) {
	testprog.Need(t, "gdb")
	prog := testprog.Build(t, callsFastProg, "c", "-O2")
	const n = 2000
	for _, hook := range []bool{false, true} {
		out := filepath.Join(t.TempDir(), "calls")
		args := []string{"rewrite", "--calls", "leaf", "--calls", "mid", "-o", out, prog}
		if hook {
			args = append(args, "--calls-hook")
		}
		code, _, stderr := kp(args...)
		if code != 0 || !strings.Contains(stderr, "2 functions traced as calls") {
			t.Fatalf("rewrite %v: exit %d: %s", args, code, stderr)
		}
		for _, clock := range []string{"tsc", "counter", "mono"} {
			tr := out + "." + clock + ".trace"
			c := cSideCalls(t, out, tr, clock, []string{strconv.Itoa(n)}, "kprewrite_rt_optcall", "kprw_rethook_slow")
			records := countedRecords(t, tr, clock)
			if records != 6*n || c[0] > 6*n/100 || c[1] > 3*n/100 {
				t.Errorf("hook %v, %s: %d records (want %d), %d calls of the detour's C side, %d of the trampoline's slow path for %d calls: the fast paths took too few",
					hook, clock, records, 6*n, c[0], c[1], 3*n)
			}
			code, rep, stderr := kp("report", "-b", out, tr)
			for _, f := range []string{"leaf", "mid"} {
				want := n
				if f == "leaf" {
					want = 2 * n
				}
				if code != 0 || !regexp.MustCompile(`(?m)^.*\s`+strconv.Itoa(want)+`\s+.*\s`+f+`$`).MatchString(rep) {
					t.Errorf("hook %v, %s: report: exit %d, no line of %d calls of %s:\n%s%s", hook, clock, code, want, f, rep, stderr)
				}
			}
			t.Logf("hook %v, %s: %d calls, %d hits through the detour's C side, %d returns through the trampoline's slow path", hook, clock, 3*n, c[0], c[1])
		}
	}
}

// dfsiteProg's dfsite(a, out) sets DF (std), runs a 5-byte nop (dfsite_s: a probe
// site) with %rdi = a, stores the flags after it in *out and clears DF; main calls it
// argv[1] times and says "bad" when DF was not set after the site.
const dfsiteProg = `
#include <stdio.h>
#include <stdlib.h>
__asm__(
	".text\n.globl dfsite\n.type dfsite,@function\ndfsite:\n"
	"std\n"
	".globl dfsite_s\ndfsite_s: .byte 0x0f,0x1f,0x44,0x00,0x00\n"
	"pushfq\npop %rax\ncld\nmov %rax, (%rsi)\nret\n"
	".size dfsite, .-dfsite\n");
void dfsite(long a, unsigned long *out);
int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 8, bad = 0;
	for (int i = 0; i < n; i++) {
		unsigned long fl = 0;
		dfsite(i, &fl);
		if (!(fl & 0x400))
			bad++;
	}
	printf("%d calls, %d bad\n", n, bad);
	return bad != 0;
}
`

// TestOptFastPathDF: a jump-optimized site hit with DF set records as any, with each
// clock (the mono clock's fast path calls the vDSO, which may not meet DF set: it
// declines to C, which clears DF for its calls), and the program finds DF still set
// after the site.
func TestOptFastPathDF(t *testing.T) {
	prog := testprog.Build(t, dfsiteProg, "c", "-O2")
	addr := symbolTable(t, prog)
	out := filepath.Join(t.TempDir(), "df")
	rewriteWith(t, prog, out, []string{fmt.Sprintf("p:df/s dfsite+%d a=%%di", addr["dfsite_s"]-addr["dfsite"])})
	if _, l, _ := kp("list", out); !strings.Contains(l, "[OPTIMIZED]") {
		t.Fatalf("want a jump-optimized site:\n%s", l)
	}
	const n = 300
	for _, clock := range []string{"tsc", "counter", "mono"} {
		tr := out + "." + clock + ".trace"
		r := testprog.Run(t, testprog.Cmd{Path: out, Args: []string{strconv.Itoa(n)}, Env: []string{"KPREWRITE_TRACE=" + tr, "KPREWRITE_CLOCK=" + clock}})
		if r.Exit != 0 || r.Stdout != fmt.Sprintf("%d calls, 0 bad\n", n) {
			t.Errorf("%s: %s, want every call to find DF set after the site", clock, r)
		}
		if got := countedRecords(t, tr, clock); got != n {
			t.Errorf("%s: %d records, want %d", clock, got, n)
		}
		s, _, err := tracefile.OpenStream(tr, nil)
		if err != nil {
			t.Fatal(err)
		}
		i := uint64(0)
		err = s.Each(func(r *tracefile.Record) error {
			if len(r.Data) != 8 || binary.LittleEndian.Uint64(r.Data) != i {
				return fmt.Errorf("record %d: data %x, want a=%d", i, r.Data, i)
			}
			i++
			return nil
		})
		s.Close()
		if err != nil {
			t.Errorf("%s: %v", clock, err)
		}
	}
}

// cSideCalls runs bin with args under gdb, tracing into tr with the clock, and says how
// many times each function of funcs ran (a breakpoint's hits).
func cSideCalls(t *testing.T, bin, tr, clock string, args []string, funcs ...string) []int {
	t.Helper()
	gdb := []string{"-batch", "-nx", "-ex", "set pagination off", "-ex", "set startup-with-shell off"}
	for _, f := range funcs {
		gdb = append(gdb, "-ex", "break "+f)
	}
	for i := range funcs {
		gdb = append(gdb, "-ex", fmt.Sprintf("ignore %d 100000000", i+1))
	}
	gdb = append(gdb, "-ex", "run", "-ex", "info breakpoints", "--args", bin)
	cmd := exec.Command("gdb", append(gdb, args...)...)
	cmd.Env = append(cmd.Environ(), "KPREWRITE_TRACE="+tr, "KPREWRITE_CLOCK="+clock)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("gdb: %v\n%s", err, testprog.Clip(string(b), 3000))
	}
	counts := make([]int, len(funcs))
	for i, f := range funcs {
		// (info breakpoints: "N breakpoint keep y ADDR <f+4>", then "breakpoint already hit K times")
		m := regexp.MustCompile(`(?m)^` + strconv.Itoa(i+1) + `\s+breakpoint[^\n]*\n(?:\s+[^\d\s][^\n]*\n)*?\s+breakpoint already hit (\d+) time`).FindSubmatch(b)
		if m == nil && !regexp.MustCompile(`(?m)^`+strconv.Itoa(i+1)+`\s+breakpoint\s`).Match(b) {
			t.Fatalf("gdb: no breakpoint %d (%s):\n%s", i+1, f, testprog.Clip(string(b), 3000))
		}
		if m != nil {
			counts[i], _ = strconv.Atoi(string(m[1]))
		}
	}
	return counts
}

// countedRecords counts the records of trace file tr, one thread's; with the counter
// clock, it checks that their times are 1, 2, ... in order, with the others that they
// do not go back.
func countedRecords(t *testing.T, tr, clock string) int {
	t.Helper()
	s, _, err := tracefile.OpenStream(tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	records := 0
	var last uint64
	err = s.Each(func(r *tracefile.Record) error {
		records++
		if clock == "counter" && r.TsNs != uint64(records) {
			return fmt.Errorf("record %d's time is %d, want %d", records, r.TsNs, records)
		}
		if r.TsNs == 0 || r.TsNs < last {
			return fmt.Errorf("record %d's time %d after %d", records, r.TsNs, last)
		}
		last = r.TsNs
		return nil
	})
	if err != nil {
		t.Errorf("%s: %s: %v", tr, clock, err)
	}
	return records
}
