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

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// tclkSrc calls work(i, 1) for i below argv[1]: one thread, records in i's order.
const tclkSrc = `#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) long work(long a, long b) { __asm__ volatile(""); return a + b; }
int main(int argc, char **argv) {
	long n = atol(argv[1]), s = 0;
	for (long i = 0; i < n; i++)
		s += work(i, 1);
	printf("%ld\n", s);
	return 0;
}
`

// TestThreadClockRefreshMidRead: optprobe.S's fast paths turn the TSC into a record's
// time with the thread's copy of the clock in its kprw_tblk (TCLK_NOW), which the
// thread's C path renews (kprw_tclk_refresh), in a signal handler too: a fast path
// interrupted between the copy's loads must not mix two copies. gdb stops the program
// at the conversion's multiply (the anchor's TSC already taken off the TSC read) and
// writes what a signal handler's refresh would: another anchor, 2^29 ticks earlier,
// with its time to match (the same times from it), tc_seq bumped. The record being
// written must decline (tc_seq moved) and be written by the C path with the right
// time; mixing the old anchor's ticks with the new anchor's time puts it ~0.2 s before
// its neighbours. Every record's time is then checked against its neighbours': the
// times rise with the loop's index. Fails without TCLK_NOW's tc_seq compare (verified).
func TestThreadClockRefreshMidRead(t *testing.T) {
	testprog.Need(t, "gcc", "gdb", "objdump")
	prog := testprog.Build(t, tclkSrc, "c", "-O2", "-no-pie")
	bin := filepath.Join(t.TempDir(), "tclk.kp")
	rewriteWith(t, prog, bin, []string{"p:c/w work a=%di b=%si"})
	dis, err := exec.Command("objdump", "-d", "--no-show-raw-insn", bin).Output()
	if err != nil {
		t.Fatalf("objdump: %v", err)
	}
	// TCLK_NOW's multiply: imulq OF_TBLK_TMULT(%r10), %rax
	at := regexp.MustCompile(`(?m)^\s*([0-9a-f]+):\s+imul\s+0x28\(%r10\),%rax`).FindAllStringSubmatch(string(dis), -1)
	if len(at) == 0 {
		t.Fatal("no TCLK_NOW multiply (imul 0x28(%r10),%rax) in the rewritten program")
	}
	var b strings.Builder
	b.WriteString("set pagination off\nset startup-with-shell off\n")
	for _, m := range at {
		fmt.Fprintf(&b, "break *0x%s\n", m[1])
	}
	const x = 1 << 29
	b.WriteString("run\nprintf \"tclk stop\\n\"\n")
	// the copy at %r10: tc_tsc 24, tc_span 32, tc_mult 40, tc_rel 48, tc_seq 56
	fmt.Fprintf(&b, "set var *(unsigned long *)($r10 + 24) = *(unsigned long *)($r10 + 24) - %d\n", x)
	fmt.Fprintf(&b, "set var *(unsigned long *)($r10 + 32) = *(unsigned long *)($r10 + 32) + %d\n", x)
	fmt.Fprintf(&b, "set var *(unsigned long *)($r10 + 48) = *(unsigned long *)($r10 + 48) - ((unsigned long)%d * *(unsigned long *)($r10 + 40) >> 32)\n", x)
	b.WriteString("set var *(unsigned int *)($r10 + 56) = *(unsigned int *)($r10 + 56) + 2\ndelete\ncontinue\n")
	script := filepath.Join(t.TempDir(), "tclk.gdb")
	if err := os.WriteFile(script, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	const n = 20000
	cmd := exec.Command("gdb", "-batch", "-nx", "-x", script, "--args", bin, strconv.Itoa(n))
	cmd.Env = append(os.Environ(), "KPREWRITE_QUIET=1", "KPREWRITE_TRACE="+bin+".trace")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("gdb: %v\n%s", err, testprog.Clip(string(out), 3000))
	}
	if !strings.Contains(string(out), "tclk stop\n") || !strings.Contains(string(out), "exited normally") {
		t.Fatalf("gdb did not stop the program at TCLK_NOW, or it did not end well:\n%s", testprog.Clip(string(out), 3000))
	}
	code, tr, stderr := kp("trace", "-b", bin, bin+".trace")
	if code != 0 {
		t.Fatalf("kprewrite trace: exit %d: %s", code, stderr)
	}
	line := regexp.MustCompile(`(?m)^.* (\d+)\.(\d{6}): w: \(0x[0-9a-f]+\) a=0x([0-9a-f]+) b=0x1$`)
	recs := line.FindAllStringSubmatch(tr, -1)
	if len(recs) != n {
		t.Fatalf("%d records of w; want %d\n%s", len(recs), n, testprog.Clip(tr, 2000))
	}
	var lastT, lastA int64 = -1, -1
	for _, r := range recs {
		sec, _ := strconv.ParseInt(r[1], 10, 64)
		us, _ := strconv.ParseInt(r[2], 10, 64)
		a, _ := strconv.ParseInt(r[3], 16, 64)
		ts := sec*1000000 + us
		if a != lastA+1 || ts < lastT {
			t.Fatalf("record a=%d at %d us after a=%d at %d us: a time out of its place (two copies of the clock mixed)", a, ts, lastA, lastT)
		}
		lastT, lastA = ts, a
	}
}
