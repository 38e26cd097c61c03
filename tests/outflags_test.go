package tests

// Every command that prints a trace file's contents takes -o OUT (what it would print,
// written atomically) and `trace` takes --event PATTERN (issue 47, item 3).

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

const outFlagsSrc = `#include <stdio.h>
__attribute__((noinline)) long inner(long a) { return a * 2; }
__attribute__((noinline)) long outer(long a) { return inner(a) + 1; }
int main(void) { long s = 0; for (int i = 0; i < 20; i++) s += outer(i); printf("%ld\n", s); return 0; }
`

func TestOutputFlags(t *testing.T) {
	prog := testprog.Build(t, outFlagsSrc, "c", "-O1")
	dir := t.TempDir()
	bin := filepath.Join(dir, "prog.kp")
	rewriteWith(t, prog, bin, []string{"p:t/in inner a=%di:s64"}, "--calls", "outer", "--trigger", "t/in:hist:keys=a")
	tr := filepath.Join(dir, "prog.trace")
	if r := testprog.Run(t, testprog.Cmd{Path: bin, Extra: []string{"KPREWRITE_TRACE=" + tr}}); r.Stdout != "400\n" {
		t.Fatalf("the program: %s", r)
	}
	for _, cmd := range [][]string{{"trace"}, {"report"}, {"profile"}, {"hist"}, {"trace", "--event", "t/*"}} {
		out := filepath.Join(dir, cmd[0]+".out")
		os.Remove(out)
		bins := []string{"-b", bin}
		if cmd[0] == "hist" { // (it reads the file's own descriptions)
			bins = nil
		}
		args := append(append(cmd, bins...), tr)
		want := kpOK(t, args...)
		kpOK(t, append(append(append(cmd, bins...), "-o", out), tr)...)
		got, err := os.ReadFile(out)
		if err != nil || string(got) != want || want == "" {
			t.Errorf("%v -o: %q (%v), stdout gives %q", cmd, got, err, want)
		}
	}
	lines := readTraceArgs(t, "--event", "t/in", "-b", bin, tr)
	if len(lines) != 20 {
		t.Fatalf("trace --event t/in: %d lines, want inner's 20", len(lines))
	}
	for _, l := range lines {
		if l.Event != "in" {
			t.Fatalf("trace --event t/in printed %+v", l)
		}
	}
	if n := len(readTraceArgs(t, "--event", "calls/*", "-b", bin, tr)); n != 40 {
		t.Fatalf("trace --event 'calls/*': %d lines, want outer's 20 entries and 20 returns", n)
	}
}

// readTraceArgs is readTrace with trace's options.
func readTraceArgs(t *testing.T, args ...string) []traceLine {
	t.Helper()
	out := kpOK(t, append([]string{"trace", "--no-header"}, args...)...)
	return parseTraceLines(t, strings.TrimSpace(out)+"\n")
}
