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

// stackSrc reaches leaf() through known call chains: recursion of a depth given on the
// command line, a call through a function pointer, and a second thread.
// stackSrc is tests/testdata/stack.c (the cases under tests/cases use it too).
var stackSrc = mustReadTestdata("stack.c")

var (
	gdbFrameRE = regexp.MustCompile(`^#\d+\s+(?:0x[0-9a-f]+ in )?(\S+) \(`)
	cloneNumRE = regexp.MustCompile(`(\.[a-z]+)\.\d+$`)
)

// frameName is a function name without the number of a GCC clone ("rec.constprop.3"),
// which gdb leaves out.
func frameName(s string) string { return cloneNumRE.ReplaceAllString(s, "$1") }

// gdbStacks runs prog under gdb with a breakpoint on fn and returns the function names
// of the backtrace at each hit.
func gdbStacks(t *testing.T, prog, fn string, hits int, args ...string) [][]string {
	t.Helper()
	gargs := []string{"-nx", "-batch", "-ex", "set debuginfod enabled off", "-ex", "set startup-with-shell off",
		"-ex", "break " + fn, "-ex", "run"}
	for i := 0; i < hits; i++ {
		gargs = append(gargs, "-ex", "bt", "-ex", "continue")
	}
	gargs = append(gargs, "--args", prog)
	out, err := exec.Command("gdb", append(gargs, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("gdb: %v\n%s", err, out)
	}
	var stacks [][]string
	for _, line := range strings.Split(string(out), "\n") {
		m := gdbFrameRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if strings.HasPrefix(line, "#0 ") {
			stacks = append(stacks, nil)
		}
		if len(stacks) > 0 {
			stacks[len(stacks)-1] = append(stacks[len(stacks)-1], frameName(m[1]))
		}
	}
	if len(stacks) != hits {
		t.Fatalf("gdb gave %d backtraces, want %d:\n%s", len(stacks), hits, out)
	}
	return stacks
}

// ourStacks returns the frames of each stack entry of a trace, up to the first pc
// outside the image (which must be there: the walk reached the C library).
func ourStacks(t *testing.T, lines []traceLine) [][]string {
	t.Helper()
	var out [][]string
	for _, l := range lines {
		if l.Event != "<stack trace>" {
			continue
		}
		fr := strings.Fields(l.Stack)
		k := 0
		for k < len(fr) && !strings.HasPrefix(fr[k], "<") {
			k++
		}
		for i := range fr[:k] {
			fr[i] = frameName(fr[i])
		}
		out = append(out, fr[:k])
	}
	return out
}

// TestStackTraceMatchesGDB: the user stacks stacktrace triggers record are gdb's
// backtraces of the same hits (function names, innermost first, up to the C library),
// at -O0 to -O3 with and without frame pointers, int3 and jump-optimized, with and
// without return probes on the frames in between (whose return addresses are the
// trampoline's), in the main thread and another.
func TestStackTraceMatchesGDB(t *testing.T) {
	testprog.Need(t, "gdb")
	checked := 0
	for _, cflags := range [][]string{{"-O0"}, {"-O2"}, {"-O2", "-fno-omit-frame-pointer"}, {"-O3"}} {
		prog := testprog.Build(t, stackSrc, "c", append(cflags, "-pthread")...)
		want := gdbStacks(t, prog, "leaf", 2)
		for _, w := range want {
			if len(w) < 3 || w[0] != "leaf" {
				t.Fatalf("%v: gdb's backtrace %q does not start at leaf", cflags, w)
			}
		}
		for _, mode := range []string{"int3", "optimize"} {
			for _, ret := range []bool{false, true} {
				name := fmt.Sprintf("%s %s ret=%v", strings.Join(cflags, " "), mode, ret)
				defs := []string{"p:st/leaf leaf n=%di:s32"}
				if ret {
					defs = append(defs, "r:st/rec rec $retval:s32", "r:st/viaptr viaptr")
				}
				flags := []string{"--trigger", "st/leaf:stacktrace"}
				if mode == "int3" {
					flags = append(flags, "--no-optimize")
				}
				out := filepath.Join(t.TempDir(), "stack.kp")
				rewriteWith(t, prog, out, defs, flags...)
				if got, orig := testprog.MustRun(t, out), testprog.MustRun(t, prog); got != orig {
					t.Fatalf("%s: the rewritten program printed %q, the original %q", name, got, orig)
				}
				got := ourStacks(t, readTrace(t, out+".trace", out))
				if len(got) != 2 {
					t.Fatalf("%s: %d stack entries, want 2", name, len(got))
				}
				for k := range want {
					// gdb goes on into the C library (start_thread, __libc_start_call_main);
					// the walk stops at the first pc outside the image
					if len(got[k]) == 0 || len(got[k]) > len(want[k]) || strings.Join(got[k], " ") != strings.Join(want[k][:len(got[k])], " ") ||
						(got[k][len(got[k])-1] != "main" && got[k][len(got[k])-1] != "thr") {
						t.Fatalf("%s: hit %d: stack %q, gdb's %q", name, k, got[k], want[k])
					}
					checked++
				}
			}
		}
	}
	t.Logf("%d stacks equal to gdb's backtraces", checked)
}

// TestStackTraceDepth: `trace --format json` gives the frames of a stack cut at
// runtime.StackMax frames (the text form is tests/cases/stack-depth).
func TestStackTraceDepth(t *testing.T) {
	prog := testprog.Build(t, stackSrc, "c", "-O2", "-pthread")
	out := filepath.Join(t.TempDir(), "stack.kp")
	rewriteWith(t, prog, out, []string{"p:st/leaf leaf n=%di:s32"}, "--trigger", "st/leaf:stacktrace:1")
	testprog.MustRun(t, out, "100")
	code, stdout, stderr := kp("trace", "--format", "json", out+".trace")
	if code != 0 || stderr != "" {
		t.Fatalf("trace --format json: exit %d: %s", code, stderr)
	}
	if n := strings.Count(stdout, `"type":"stack","group":"st","event":"leaf","frames":[{"pc":`); n != 1 {
		t.Fatalf("%d stack objects in the JSON lines, want 1:\n%s", n, stdout)
	}
	if n := strings.Count(stdout, `"func":"rec"`); n != 63 {
		t.Fatalf("%d rec frames in the JSON lines, want 63", n)
	}
}

// TestHistStacktraceKey: hist:keys=stacktrace adds each hit to the entry of its stack
// (the innermost 16 frames in the image, as link-time addresses): three runs of a PIE,
// each at its own load address (ASLR), add to the same two entries, one per call chain,
// printed as the kernel prints stacktrace keys.
func TestHistStacktraceKey(t *testing.T) {
	t.Setenv("KPREWRITE_APPEND", "1") // three runs into one histogram
	prog := testprog.Build(t, stackSrc, "c", "-O2", "-pthread")
	out := filepath.Join(t.TempDir(), "stack.kp")
	rewriteWith(t, prog, out, []string{"p:st/leaf leaf n=%di:s32"}, "--trigger", "st/leaf:hist:keys=stacktrace:vals=n")
	for i := 0; i < 3; i++ {
		testprog.MustRun(t, out, "20")
	}
	code, stdout, stderr := kp("hist", out+".trace")
	if code != 0 || stderr != "" {
		t.Fatalf("kprewrite hist: exit %d: %s", code, stderr)
	}
	// { stacktrace:
	//          leaf+0x0/0x10
	//          ...
	// } hitcount:          3  n:         21
	entries := map[string]string{}
	var frames []string
	in := false
	for _, line := range strings.Split(stdout, "\n") {
		switch {
		case line == "{ stacktrace:":
			in, frames = true, nil
		case in && strings.HasPrefix(line, "}"):
			in = false
			entries[strings.Join(frames, " ")] = strings.Join(strings.Fields(line[1:]), " ")
		case in:
			if !strings.HasPrefix(line, "         ") || !regexp.MustCompile(`^\S+\+0x[0-9a-f]+/0x[0-9a-f]+$`).MatchString(line[9:]) {
				t.Fatalf("frame line %q is not the kernel's %%pS", line)
			}
			name, _, _ := strings.Cut(line[9:], "+")
			frames = append(frames, frameName(name))
		}
	}
	main := "leaf" + strings.Repeat(" rec", 15)           // 22 frames deep: the innermost 16
	thread := "leaf" + strings.Repeat(" rec", 4) + " thr" // then start_thread, outside the image
	want := map[string]string{main: "hitcount: 3 n: 21", thread: "hitcount: 3 n: 27"}
	if len(entries) != 2 || entries[main] != want[main] || entries[thread] != want[thread] {
		t.Fatalf("entries %q, want %q\n%s", entries, want, stdout)
	}
}

// mustReadTestdata is the text of tests/testdata/NAME, a program the Go tests and the
// cases under tests/cases share.
func mustReadTestdata(name string) string {
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		panic(err)
	}
	return string(b)
}
