package tests

// End-to-end tests of fast reads (runtime/src/nofault.S, rt_fault.c): testdata/fastread.c
// is rewritten with events whose fetch arguments read memory and run with good and bad
// pointers, and with its own uses of SIGSEGV and SIGBUS (handlers that siglongjmp out
// of a guard page or fix the page and retry, SIG_IGN, a blocked mask, kill(), a fault in
// its handler, death by SIGSEGV). The rewritten program must behave exactly as the
// original, the trace must be the same with the fault-catching copy and with
// KPREWRITE_SAFE_READ=syscall (process_vm_readv), and the values must be the expected
// ones (the kernel's, in kernel_diff_test.go).

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

func fastreadSource(t *testing.T) string {
	t.Helper()
	src, err := os.ReadFile("testdata/fastread.c")
	if err != nil {
		t.Fatal(err)
	}
	return string(src)
}

// fastreadDefs probe peek with every fetch kind that reads memory; the uprobe tracer
// accepts them all (kernel_diff_test.go).
var fastreadDefs = []string{
	"p:fr/peek peek s=+0(%di):string n=+0(%si):x64 v=+8(%si):s32 bf=+12(%si):b3@2/8 arr=+12(%si):u8[4] tag=%dx:s64",
	// a nested dereference that faults leaves the kernel's buffer slot as it was (the
	// previous record's bytes); kprewrite stores 0 (kernel_diff_test.go allows for it)
	"p:fr/nest peek nv=+8(+0(%si)):s32 tag=%dx:s64",
	"p:fr/stk peek st=$stack0:x64 sp0=+0($stack):x64 us=+0(%di):ustring sarr=+0(%si):string[2]",
	"r:fr/peekr peek rv=$retval:x64 rs=+0(%ax):u8",
}

// fastreadSymDefs read @symbols, which the uprobe tracer does not take by name.
var fastreadSymDefs = []string{
	"p:fr/sym peek g=@global_word:x32 gs=+0(@global_str):string",
}

// fastreadModes are the modes of fastread.c and what a run prints (exit 3 unless it dies).
var fastreadModes = []struct {
	mode, want string
	signal     string // the signal it dies by ("" = exit 3)
}{
	{"good", "", ""},
	{"bad", "bad done\n", ""},
	{"race", "race done\n", ""},
	{"handler", "caught 1 at +4096 code 2\ncaught 2 at +4104 code 2\ncaught 3 at +4112 code 2\nhandler kept: 1 flags 0x4\nsent: caught 4 code 0\nhandler done 4\n", ""},
	{"retry", "retry: caught 1 value y\n", ""},
	{"bus", "bus: caught 1 code 2\n", ""},
	{"block", "block done\n", ""},
	{"dfl", "about to fault\n", "segmentation fault"},
	{"ign", "raised and ignored\n", "segmentation fault"},
	{"nested", "in handler\n", "segmentation fault"},
}

func TestFastReadEndToEnd(t *testing.T) {
	src := fastreadSource(t)
	defs := append(append([]string(nil), fastreadDefs...), fastreadSymDefs...)
	for _, build := range []struct {
		name, lang string
		flags      []string
	}{
		{"dynamic", "c", []string{"-O2", "-pthread"}},
		{"glibc-static", "c", []string{"-O2", "-pthread", "-static"}},
		{"glibc-static-pie", "c", []string{"-O2", "-pthread", "-static-pie"}},
		{"musl-static", "c-musl", []string{"-O2", "-static"}},
	} {
		t.Run(build.name, func(t *testing.T) {
			prog := testprog.Build(t, src, build.lang, build.flags...)
			dir := t.TempDir()
			for _, rw := range []struct {
				name  string
				flags []string
			}{
				{"optimize", nil},
				{"int3", []string{"--no-optimize"}},
			} {
				t.Run(rw.name, func(t *testing.T) {
					out := filepath.Join(dir, "fastread."+rw.name)
					rewriteWith(t, prog, out, defs, rw.flags...)
					res := testprog.Run(t, testprog.Cmd{Path: out, Args: []string{"good"},
						Extra: []string{"KPREWRITE_DEBUG=1", "KPREWRITE_TRACE=" + filepath.Join(dir, "debug.trace")}})
					if !strings.Contains(res.Stderr, ", fast reads") {
						t.Fatalf("the runtime does not read fast:\n%s", res.Stderr)
					}
					// without the guard, reads go by system call (and still never crash)
					res = testprog.Run(t, testprog.Cmd{Path: out, Args: []string{"bad"},
						Extra: []string{"KPREWRITE_DEBUG=1", "KPREWRITE_SIGGUARD=off", "KPREWRITE_TRACE=" + filepath.Join(dir, "debug.trace")}})
					if !strings.Contains(res.Stderr, ", reads by system call") || res.Stdout != "bad done\n" || res.Exit != 3 {
						t.Fatalf("KPREWRITE_SIGGUARD=off: %s", res)
					}
					for _, m := range fastreadModes {
						t.Run(m.mode, func(t *testing.T) {
							traces := map[string][]traceLine{}
							for _, read := range []string{"fast", "syscall"} {
								tr := filepath.Join(dir, rw.name+"."+m.mode+"."+read+".trace")
								os.Remove(tr)
								env := []string{"KPREWRITE_TRACE=" + tr}
								if read == "syscall" {
									env = append(env, "KPREWRITE_SAFE_READ=syscall")
								}
								got := sameNoASLR(t, prog, out, m.mode, env)
								if got.Stdout != m.want || !strings.Contains(got.Signal, m.signal) || (m.signal == "" && got.Exit != 3) {
									t.Fatalf("%s reads: %s\nwant stdout %q, signal %q", read, got, m.want, m.signal)
								}
								traces[read] = readTrace(t, tr, out)
							}
							checkFastreadTrace(t, m.mode, traces["fast"])
							if m.mode == "race" {
								checkFastreadTrace(t, m.mode, traces["syscall"])
								return
							}
							if !slices.EqualFunc(traces["fast"], traces["syscall"], func(a, b traceLine) bool { return a.EA() == b.EA() }) {
								t.Errorf("the traces differ:\nfast:\n%s\nsyscall:\n%s", eaLines(traces["fast"]), eaLines(traces["syscall"]))
							}
						})
					}
				})
			}
		})
	}
}

// sameNoASLR runs the original and the rewritten program without address-space
// randomization (so that traces of two runs hold the same addresses) and fails the test
// unless they print the same and end the same way.
func sameNoASLR(t *testing.T, orig, rewritten, mode string, env []string) testprog.Result {
	t.Helper()
	c := noASLR(orig, mode)
	c.Extra = env
	want := testprog.Run(t, c)
	c = noASLR(rewritten, mode)
	c.Extra = env
	got := testprog.Run(t, c)
	if d := want.Diff(got); d != "" {
		t.Fatalf("rewritten %s behaves differently:\n%s\n=== original: %s\n=== rewritten: %s", mode, d, want, got)
	}
	return got
}

func eaLines(ls []traceLine) string {
	var sb strings.Builder
	for _, l := range ls {
		sb.WriteString("  " + l.EA() + "\n")
	}
	return sb.String()
}

// checkFastreadTrace checks the values a mode's trace must hold.
func checkFastreadTrace(t *testing.T, mode string, lines []traceLine) {
	t.Helper()
	byEvent := map[string][]string{}
	for _, l := range lines {
		byEvent[l.Event] = append(byEvent[l.Event], strings.TrimSpace(l.Args))
	}
	switch mode {
	case "good":
		want := []string{
			`s="hello" n=0x%s v=42 bf=7 arr={60,9,8,7} tag=1`,
			`s="" n=0x0 v=-7 bf=1 arr={165,1,2,3} tag=2`,
			`s="a longer string that needs more than one chunk of sixty-four bytes to be read whole" n=0x%s v=42 bf=7 arr={60,9,8,7} tag=3`,
		}
		got := byEvent["peek"]
		if len(got) != len(want) {
			t.Fatalf("fr/peek: %d records, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
		}
		for i, w := range want {
			pre, _, _ := strings.Cut(w, "%s")
			if !strings.HasPrefix(got[i], pre) || (!strings.Contains(w, "%s") && got[i] != w) {
				t.Errorf("fr/peek %d: %s\nwant %s", i, got[i], w)
			}
			if _, post, ok := strings.Cut(w, "%s"); ok && !strings.HasSuffix(got[i], post) {
				t.Errorf("fr/peek %d: %s\nwant %s", i, got[i], w)
			}
		}
		if got := strings.Join(byEvent["nest"], ","); got != "nv=-7 tag=1,nv=0 tag=2,nv=-7 tag=3" {
			t.Errorf("fr/nest: %s", got)
		}
		for _, s := range byEvent["sym"] {
			if s != `g=0xfeedbeef gs="global string"` {
				t.Errorf("fr/sym: %s", s)
			}
		}
		if len(byEvent["sym"]) != 3 || len(byEvent["stk"]) != 3 || len(byEvent["peekr"]) != 3 {
			t.Errorf("records: %d fr/sym, %d fr/stk, %d fr/peekr, want 3 each", len(byEvent["sym"]), len(byEvent["stk"]), len(byEvent["peekr"]))
		}
	case "bad":
		got := byEvent["peek"]
		if len(got) != 7 {
			t.Fatalf("fr/peek: %d records, want 7:\n%s", len(got), strings.Join(got, "\n"))
		}
		for i, s := range got[:6] {
			// every pointer is bad: faulted strings, zero values
			if i == 4 { // the node at the page's end: its first fields are readable, the
				// "string" is the high byte of its val, the next node is in the hole
				if !strings.HasPrefix(s, `s="" n=0x`) || !strings.HasSuffix(s, " v=5 bf=6 arr={120,120,120,120} tag=14") {
					t.Errorf("fr/peek %d: %s", i, s)
				}
				continue
			}
			if !strings.HasPrefix(s, "s=(fault) n=0x0 v=0 bf=0 arr={0,0,0,0} tag=1") {
				t.Errorf("fr/peek %d: %s", i, s)
			}
		}
		// a node that crosses into the hole: its first word is read in part, zero padded
		// (as copy_from_user), the rest faults
		if s := got[6]; s != `s="edge" n=0x78006567 v=0 bf=0 arr={0,0,0,0} tag=16` {
			t.Errorf("fr/peek 6: %s", s)
		}
		for _, s := range byEvent["nest"] {
			if !strings.HasPrefix(s, "nv=0 tag=1") {
				t.Errorf("fr/nest: %s", s)
			}
		}
		for _, s := range byEvent["stk"] {
			if !strings.Contains(s, "us=(fault)") && !strings.Contains(s, `us="edge"`) && !strings.Contains(s, `us=""`) {
				t.Errorf("fr/stk: %s", s)
			}
		}
	case "race":
		// the page is unmapped, mapped (zero) and written ("mapped") again all the while:
		// a string or a word is read whole, in part (torn by the copy) or faults
		got := byEvent["peek"]
		if len(got) != 20000 {
			t.Fatalf("fr/peek: %d records, want 20000", len(got))
		}
		// (strcpy may store its bytes in any order: a word holds any of them, a string
		// a prefix)
		strs := map[string]bool{"s=(fault)": true}
		for i := 0; i <= len("mapped"); i++ {
			strs[`s="`+"mapped"[:i]+`"`] = true
		}
		word := func(f string) bool {
			h, ok := strings.CutPrefix(f, "n=0x")
			v, err := strconv.ParseUint(h, 16, 64)
			if !ok || err != nil {
				return false
			}
			for k := 0; k < 8; k++ {
				b := byte(v >> (8 * k))
				if b != 0 && (k >= len("mapped") || b != "mapped"[k]) {
					return false
				}
			}
			return true
		}
		for _, s := range got {
			f := strings.Fields(s)
			if len(f) < 2 || !strs[f[0]] || !word(f[1]) {
				t.Fatalf("fr/peek: %s", s)
			}
		}
	}
}

// fastreadHandlers reads peek's arguments from a C handler with the kernel's nofault
// helpers (which use the fault-catching copy when fast reads are on), and faults on
// purpose on one call (tag 22: a guard page the program itself catches SIGSEGV on).
const fastreadHandlers = `#include "kprewrite.h"

static int pre(struct kprobe *p, struct pt_regs *regs)
{
	char buf[32];
	unsigned long v = 0;
	long n = strncpy_from_user_nofault(buf, (const void *)regs->di, sizeof buf);
	long r = copy_from_user_nofault(&v, (const void *)regs->si, sizeof v);
	(void)p;
	pr_info("peek tag=%ld str=%ld:%s mem=%ld:%lx\n", (long)regs->dx, n, n > 0 ? buf : "", r, r == 0 ? v & 0xfff : 0);
	if (regs->dx == 22)
		v = *(volatile unsigned long *)regs->si; /* a fault in the handler: ours, not the program's */
	return 0;
}
DEFINE_KPROBE(kp_peek, "peek", .pre_handler = pre);
`

// TestFastReadHandlers: C handlers that read memory get fast reads too; what they read
// is the same both ways, a fault of their own never reaches the program's SIGSEGV
// handler, and the program behaves as the original.
func TestFastReadHandlers(t *testing.T) {
	src := fastreadSource(t)
	prog := testprog.Build(t, src, "c", "-O2", "-pthread")
	dir := t.TempDir()
	hf := filepath.Join(dir, "h.c")
	if err := os.WriteFile(hf, []byte(fastreadHandlers), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "fastread.h")
	if code, stdout, stderr := kp("rewrite", "--handlers", hf, "-o", out, prog); code != 0 {
		t.Fatalf("rewrite: %s%s", stdout, stderr)
	}
	res := testprog.Run(t, testprog.Cmd{Path: out, Args: []string{"good"}, Extra: []string{"KPREWRITE_DEBUG=1", "KPREWRITE_TRACE="}})
	if !strings.Contains(res.Stderr, ", fast reads") {
		t.Fatalf("the runtime does not read fast:\n%s", res.Stderr)
	}
	for _, mode := range []string{"good", "bad", "handler"} {
		var stderr []string
		for _, read := range []string{"fast", "syscall"} {
			if mode == "handler" && read == "syscall" {
				// without fast reads the guard leaves SIGSEGV to the program, whose
				// handler then replaces the runtime's and gets the C handler's fault
				continue
			}
			c := noASLR(prog, mode)
			want := testprog.Run(t, c)
			c = noASLR(out, mode)
			c.Extra = []string{"KPREWRITE_TRACE=", "KPREWRITE_SAFE_READ=" + read}
			got := testprog.Run(t, c)
			if want.Stdout != got.Stdout || want.Exit != got.Exit || want.Signal != got.Signal {
				t.Fatalf("%s %s: rewritten %s, original %s", mode, read, got, want)
			}
			stderr = append(stderr, got.Stderr)
		}
		if len(stderr) == 2 && stderr[0] != stderr[1] {
			t.Errorf("%s: the handler read differently:\nfast:\n%s\nsyscall:\n%s", mode, stderr[0], stderr[1])
		}
		switch mode {
		case "good":
			if !strings.Contains(stderr[0], "peek tag=1 str=6:hello mem=0:") || !strings.Contains(stderr[0], "peek tag=2 str=1: mem=0:0\n") {
				t.Errorf("good: %s", stderr[0])
			}
		case "bad":
			for _, want := range []string{"peek tag=12 str=-14: mem=-14:0\n", "peek tag=13 str=-14: mem=-14:0\n", "peek tag=16 str=5:edge mem=-14:0\n"} {
				if !strings.Contains(stderr[0], want) {
					t.Errorf("bad: no %q in\n%s", want, stderr[0])
				}
			}
		case "handler":
			if !strings.Contains(stderr[0], "kprewrite: a C handler faulted: SIGSEGV") || strings.Count(stderr[0], "a C handler faulted") != 1 {
				t.Errorf("handler: %s", stderr[0])
			}
		}
	}
}
