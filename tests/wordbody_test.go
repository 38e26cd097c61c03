package tests

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// wordcallProg's wordcall(a, b) gives every caller-saved register a known value (rdi =
// a, rsi = b), makes the flags those of a - b and calls chk, which stores the registers
// and flags it finds at its entry, makes its own flags those of b - a, gives the
// registers other known values and returns. wordcall stores what it finds after the
// call. main calls it with operands whose flags cover CF, PF, AF, ZF, SF and OF and says
// "bad" for any register or flag that differs from what the other side set (its first 20
// calls a millisecond apart: until the runtime knows the TSC's rate, records take the C
// path). chk's
// entry reads the flags (pushfq), so they are live there, and its ret hands its flags to
// the caller.
const wordcallProg = `
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
unsigned long ent[10], aft[10], want_in, want_out;
__asm__(
	".text\n.globl chk\n.type chk,@function\nchk:\n"
	"pushfq\npopq ent+72(%rip)\n"
	"mov %rax, ent+0(%rip)\nmov %rcx, ent+8(%rip)\nmov %rdx, ent+16(%rip)\nmov %rsi, ent+24(%rip)\n"
	"mov %rdi, ent+32(%rip)\nmov %r8, ent+40(%rip)\nmov %r9, ent+48(%rip)\nmov %r10, ent+56(%rip)\n"
	"mov %r11, ent+64(%rip)\n"
	"cmp %rdi, %rsi\npushfq\npopq want_out(%rip)\n"
	"movabs $0x2a2a2a2a2a2a, %rax\nmovabs $0x2c2c2c2c2c2c, %rcx\nmovabs $0x2d2d2d2d2d2d, %rdx\n"
	"movabs $0x2e2e2e2e2e2e, %rsi\nmovabs $0x2f2f2f2f2f2f, %rdi\nmovabs $0x282828282828, %r8\n"
	"movabs $0x292929292929, %r9\nmovabs $0x202020202020, %r10\nmovabs $0x212121212121, %r11\n"
	"ret\n.size chk, .-chk\n"
	".globl wordcall\n.type wordcall,@function\nwordcall:\n"
	"movabs $0x1a1a1a1a1a1a, %rax\nmovabs $0x1c1c1c1c1c1c, %rcx\nmovabs $0x1d1d1d1d1d1d, %rdx\n"
	"movabs $0x808080808080, %r8\nmovabs $0x909090909090, %r9\nmovabs $0x101010101010, %r10\n"
	"movabs $0x111111111111, %r11\n"
	"cmp %rsi, %rdi\npushfq\npopq want_in(%rip)\n"
	"call chk\n"
	"pushfq\npopq aft+72(%rip)\n"
	"mov %rax, aft+0(%rip)\nmov %rcx, aft+8(%rip)\nmov %rdx, aft+16(%rip)\nmov %rsi, aft+24(%rip)\n"
	"mov %rdi, aft+32(%rip)\nmov %r8, aft+40(%rip)\nmov %r9, aft+48(%rip)\nmov %r10, aft+56(%rip)\n"
	"mov %r11, aft+64(%rip)\nret\n.size wordcall, .-wordcall\n");
void wordcall(long a, long b);
int main(int argc, char **argv)
{
	static const long ops[][2] = {{LONG_MAX, -1}, {LONG_MIN, 1}, {0, 0}, {1, 2}, {0x10, 1}, {3, 0}, {-5, -5}, {7, 0x40}};
	int n = argc > 1 ? atoi(argv[1]) : 8, bad = 0;
	for (int i = 0; i < n; i++) {
		long a = ops[i % 8][0], b = ops[i % 8][1];
		unsigned long in[9] = {0x1a1a1a1a1a1a, 0x1c1c1c1c1c1c, 0x1d1d1d1d1d1d, (unsigned long)b, (unsigned long)a,
			0x808080808080, 0x909090909090, 0x101010101010, 0x111111111111};
		unsigned long out[9] = {0x2a2a2a2a2a2a, 0x2c2c2c2c2c2c, 0x2d2d2d2d2d2d, 0x2e2e2e2e2e2e, 0x2f2f2f2f2f2f,
			0x282828282828, 0x292929292929, 0x202020202020, 0x212121212121};
		wordcall(a, b);
		if (i < 20)
			usleep(1000); /* (the runtime measures the TSC's rate over its first milliseconds) */
		for (int r = 0; r < 9; r++) {
			if (ent[r] != in[r])
				bad++, printf("bad: call %d: register %d at the entry %#lx\n", i, r, ent[r]);
			if (aft[r] != out[r])
				bad++, printf("bad: call %d: register %d after the return %#lx\n", i, r, aft[r]);
		}
		if ((ent[9] ^ want_in) & 0xcd5) /* CF PF AF ZF SF OF DF */
			bad++, printf("bad: call %d: flags %#lx at the entry, want %#lx\n", i, ent[9], want_in);
		if ((aft[9] ^ want_out) & 0xcd5)
			bad++, printf("bad: call %d: flags %#lx after the return, want %#lx\n", i, aft[9], want_out);
	}
	printf("%d calls, %d bad\n", n, bad);
	return bad != 0;
}
`

// TestWordBodies: --calls' records at a function's entry and at its ret are written by
// the word bodies (optprobe.S: the shared body specialized to those lines), each
// saving what it uses and the flags: the function finds every caller-saved register
// and the flags (live at its entry: it reads them) as its caller left them, the caller
// finds them as the function left them, every call has its two records with each clock
// (the counter and mono clocks: the word bodies decline to the shared body, which
// writes them), and with the TSC clock the hits go through the word bodies, not the
// shared body (gdb counts both).
func TestWordBodies(t *testing.T) {
	testprog.Need(t, "gdb")
	prog := testprog.Build(t, wordcallProg, "c", "-O2")
	out := filepath.Join(t.TempDir(), "word")
	code, _, stderr := kp("rewrite", "--calls", "chk", "-o", out, prog)
	if code != 0 || !strings.Contains(stderr, "1 functions traced as calls") {
		t.Fatalf("rewrite: exit %d: %s", code, stderr)
	}
	const n = 800
	cfg := fastCfgHost(t) // (else the word bodies decline every hit: the configured paths only)
	for _, clock := range []string{"tsc", "counter", "mono"} {
		tr := out + "." + clock + ".trace"
		funcs := []string{"kprewrite_rt_optprobe_body", "kprw_word_body01", "kprw_word_body11"}
		if clock == "tsc" {
			// the shared body alone: a breakpoint at each hit slows the calls past the
			// span of the thread's copy of the clock, which the word bodies then
			// decline
			funcs = funcs[:1]
		}
		c := cSideCalls(t, out, tr, clock, []string{strconv.Itoa(n)}, funcs...)
		if records := countedRecords(t, tr, clock); records != 2*n {
			t.Errorf("%s: %d records, want %d", clock, records, 2*n)
		}
		switch {
		case clock == "tsc" && cfg && c[0] > 2*20+n/100:
			t.Errorf("tsc: %d hits of %d went on to the shared body: the word bodies wrote too few", c[0], 2*n)
		case clock == "tsc" && !cfg && c[0] != 2*n:
			t.Errorf("tsc without the configured paths: %d hits went on to the shared body, want all %d", c[0], 2*n)
		case clock != "tsc" && (c[0] != 2*n || c[1] != n || c[2] != n):
			t.Errorf("%s: the shared body entered %d times, the word bodies %d and %d: want each hit through its word body (the entry's with the flags, the ret's) on to the shared body, which writes those of the TSC clock alone", clock, c[0], c[1], c[2])
		}
		t.Logf("%s: breakpoints %v: %v", clock, funcs, c)
	}
	// the registers and flags, run without gdb
	r := testprog.Run(t, testprog.Cmd{Path: out, Args: []string{strconv.Itoa(n)},
		Extra: []string{"KPREWRITE_TRACE=" + filepath.Join(t.TempDir(), "t.trace")}})
	if r.Exit != 0 || !strings.Contains(r.Stdout, strconv.Itoa(n)+" calls, 0 bad") {
		t.Errorf("run: %s", r)
	}
}
