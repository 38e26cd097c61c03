package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// seqSrc calls functions of none to five 8-byte arguments, after a warm-up: the
// runtime measures the TSC's rate over its first milliseconds of hits, and until then
// every record takes the C path.
const seqSrc = `#include <stdio.h>
#include <unistd.h>
#define F __attribute__((noinline))
F long f0(void) { __asm__ volatile(""); return 1; }
F long f1(long a) { __asm__ volatile(""); return a + 1; }
F long f2(long a, long b) { __asm__ volatile(""); return a ^ b; }
F long f3(long a, long b, long c) { __asm__ volatile(""); return a + b + c; }
F long f4(long a, long b, long c, long d, long e) { __asm__ volatile(""); return a + b + c + d + e; }
F long f5(long a) { __asm__ volatile(""); return a * 3; }
F long warm(long a) { __asm__ volatile(""); return a + 3; }
int main(void) {
	long s = 0;
	for (int i = 0; i < 20; i++) {
		s += warm(i);
		usleep(1000);
	}
	for (long i = 0; i < 3000; i++) {
		s += f0() + f1(i) + f2(i, ~i) + f3(i, 3 * i, -i) + f4(i, 0, i << 20, i + 7, 5 - i) + f5(i);
	}
	printf("%ld\n", s);
	return 0;
}
`

// TestSeqLines: events whose records are the fixed part and their 8-byte register
// fetches in order (KPRW_HOT_SEQ lines, written by optprobe.S's .Lseq: no fetch, one,
// two in the other order, three, the stub's %cx with %r8) record exactly what the
// program passed, call by call, as an event beside them that reads %bx (the general
// fast path: the frame does not hold it). Fails when .Lseq takes a register from
// the wrong slot, stores it at the wrong place or sizes the record wrong.
//
// Each way through .Lseq: the configured one (kprw_rt.fast_cfg: the TCB's word, the
// rseq area's CPU, prefetchw, the TSC clock), and the general one (KPREWRITE_THREADKEY=hash: no TCB
// word), with gdb reading which one the run took.
func TestSeqLines(t *testing.T) {
	prog := testprog.Build(t, seqSrc, "c", "-O2")
	out := filepath.Join(t.TempDir(), "seq")
	rewriteWith(t, prog, out, []string{
		"p:q/e0 f0", "p:q/e1 f1 a=%di", "p:q/e2 f2 b=%si a=%di", "p:q/e3 f3 a=%di b=%si c=%dx",
		"p:q/e4 f4 e=%r8 d=%cx", "p:q/e5 f5 x=%bx a=%di", "p:q/warm warm",
	})
	for _, c := range []struct{ key, cfg string }{{"", "1"}, {"hash", "0"}} {
		if c.cfg == "1" && !fastCfgHost(t) {
			c.cfg = "0" // (this CPU: the general way only)
		}
		if got := fastCfg(t, out, "KPREWRITE_THREADKEY="+c.key); got != c.cfg {
			t.Fatalf("KPREWRITE_THREADKEY=%q: kprw_rt.fast_cfg %s, want %s", c.key, got, c.cfg)
		}
		os.Remove(out + ".trace")
		seqLinesCheck(t, out, "KPREWRITE_THREADKEY="+c.key)
	}
}

// fastCfgHost says whether this machine gives a glibc program what the configured
// paths need (kprw_fast_pick): glibc's registered rseq area (glibc 2.35 on: __rseq_size
// above 0, which a program built here prints), prefetchw and a constant TSC.
func fastCfgHost(t *testing.T) bool {
	t.Helper()
	if !cpuHasFlag(t, "3dnowprefetch") || !cpuHasFlag(t, "constant_tsc") {
		return false
	}
	const src = "#include <stdio.h>\n#include <sys/rseq.h>\nint main(void) { printf(\"%u\\n\", __rseq_size); return 0; }\n"
	r := testprog.Run(t, testprog.Cmd{Path: testprog.Build(t, src, "c", "-O2")})
	return r.Exit == 0 && strings.TrimSpace(r.Stdout) != "0"
}

// fastCfg runs bin under gdb with env to its first printf (after its hits) and returns
// kprw_rt.fast_cfg (its offset: runtime/src/optfast.h's OF_RT_FAST_CFG)
func fastCfg(t *testing.T, bin string, env ...string) string {
	t.Helper()
	testprog.Need(t, "gdb")
	h, err := os.ReadFile(filepath.Join("..", "runtime", "src", "optfast.h"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`#define OF_RT_FAST_CFG (\d+)`).FindSubmatch(h)
	if m == nil {
		t.Fatal("optfast.h: no OF_RT_FAST_CFG")
	}
	cmd := exec.Command("gdb", "-batch", "-nx", "-ex", "set startup-with-shell off", "-ex", "break printf", "-ex", "run",
		"-ex", fmt.Sprintf(`printf "fast_cfg=%%u\n", *(unsigned int *)((char *)&kprw_rt + %s)`, m[1]), "-ex", "kill", "--args", bin)
	cmd.Env = append(os.Environ(), env...)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("gdb: %v\n%s", err, testprog.Clip(string(b), 2000))
	}
	f := regexp.MustCompile(`fast_cfg=(\d+)`).FindSubmatch(b)
	if f == nil {
		t.Fatalf("gdb printed no fast_cfg:\n%s", testprog.Clip(string(b), 2000))
	}
	return string(f[1])
}

// eventArgs is each line of the trace at path as its event's name and arguments
// ("e3 a=0x1 b=0x2"), but the lines of event skip.
func eventArgs(t *testing.T, path, skip string) []string {
	t.Helper()
	var got []string
	for _, l := range readTrace(t, path) {
		if l.Event != skip {
			got = append(got, l.Event+strings.TrimRight(l.Args, " "))
		}
	}
	return got
}

func seqLinesCheck(t *testing.T, out, env string) {
	r := testprog.Run(t, testprog.Cmd{Path: out, Env: []string{"KPREWRITE_QUIET=1", env}})
	if r.Exit != 0 {
		t.Fatalf("rewritten program (%s): %s", env, r)
	}
	got := eventArgs(t, out+".trace", "warm")
	var want []string
	for i := uint64(0); i < 3000; i++ {
		want = append(want, "e0",
			fmt.Sprintf("e1 a=0x%x", i),
			fmt.Sprintf("e2 b=0x%x a=0x%x", ^i, i),
			fmt.Sprintf("e3 a=0x%x b=0x%x c=0x%x", i, 3*i, -i),
			fmt.Sprintf("e4 e=0x%x d=0x%x", 5-i, i+7),
			fmt.Sprintf("e5 x=X a=0x%x", i))
	}
	if len(got) != len(want) {
		t.Fatalf("%s: %d records, want %d; first: %q", env, len(got), len(want), got[:min(len(got), 8)])
	}
	for i := range want {
		g := got[i]
		if strings.HasPrefix(g, "e5 x=") { // (%bx: whatever the compiler left there)
			if f := strings.Fields(g); len(f) == 3 {
				g = "e5 x=X " + f[2]
			}
		}
		if g != want[i] {
			t.Fatalf("%s: record %d: %q, want %q", env, i, got[i], want[i])
		}
	}
}

// renameSrc renames its thread between two runs of calls, and sleeps past the
// runtime's comm refresh (1 ms) before the second.
const renameSrc = `#include <stdio.h>
#include <sys/prctl.h>
#include <unistd.h>
__attribute__((noinline)) long work(long a) { __asm__ volatile(""); return a + 1; }
int main(void) {
	long s = 0;
	for (int i = 0; i < 20; i++) {
		s += work(-1);
		usleep(1000);
	}
	for (long i = 0; i < 100; i++)
		s += work(i);
	prctl(PR_SET_NAME, "renamed");
	usleep(3000);
	for (long i = 100; i < 200; i++)
		s += work(i);
	printf("%ld\n", s);
	return 0;
}
`

// TestSeqLinesComm: a thread renamed between records shows its new name in the records
// the fast path writes once the name is older than its refresh (the kernel prints a
// task's comm as it is at the event), the old one before. Fails when the fast path
// stops asking for the refresh (NOW_CHECK's comm deadline).
func TestSeqLinesComm(t *testing.T) {
	prog := testprog.Build(t, renameSrc, "c", "-O2")
	out := filepath.Join(t.TempDir(), "ren")
	rewriteWith(t, prog, out, []string{"p:q/w work a=%di"})
	r := testprog.Run(t, testprog.Cmd{Path: out, Env: []string{"KPREWRITE_QUIET=1"}})
	if r.Exit != 0 {
		t.Fatalf("rewritten program: %s", r)
	}
	n := 0
	for _, l := range readTrace(t, out+".trace") {
		var a int64
		if _, err := fmt.Sscanf(l.Args, " a=0x%x", &a); err != nil || l.Args == " a=0xffffffffffffffff" {
			continue
		}
		want := "ren"
		if a >= 100 {
			want = "renamed"
		}
		if l.Comm != want {
			t.Errorf("a=%d: comm %q, want %q", a, l.Comm, want)
		}
		n++
	}
	if n != 200 {
		t.Errorf("%d records of the two runs, want 200", n)
	}
}
