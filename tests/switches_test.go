package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

const switchesSrc = `
#include <stdio.h>
__attribute__((noinline)) int work(int a) { return a * 2; }
int main(void) { int s = 0; for (int i = 0; i < 3; i++) s += work(i); printf("%d\n", s); return 0; }
`

// TestRunTimeSwitches: a KPREWRITE_* value the runtime does not understand is said on
// stderr, once, with what is done instead, and the program runs as it would; before,
// KPREWRITE_TRACE_SIZE=100T, -5 and abc were clamped or ignored in silence, and
// KPREWRITE_DEBUG=0 turned debugging on (issue 13).
func TestRunTimeSwitches(t *testing.T) {
	testprog.Need(t, "gcc")
	prog := testprog.Build(t, switchesSrc, "c", "-O1")
	dir := t.TempDir()
	out := filepath.Join(dir, "prog.kp")
	if code, _, stderr := kp("rewrite", "-o", out, "-e", "p:g/w work a=%di", prog); code != 0 {
		t.Fatalf("rewrite: %s", stderr)
	}
	for _, c := range []struct {
		env  []string
		want string // the stderr line; "" = nothing
		size int64  // the new trace file's record area (0: not checked)
	}{
		{[]string{"KPREWRITE_TRACE_SIZE=100T"}, "kprewrite: KPREWRITE_TRACE_SIZE=100T: not a size (N, NK, NM or NG bytes); the rewrite's size is used", 64 << 20},
		{[]string{"KPREWRITE_TRACE_SIZE=-5"}, "kprewrite: KPREWRITE_TRACE_SIZE=-5: not a size", 64 << 20},
		{[]string{"KPREWRITE_TRACE_SIZE=abc"}, "kprewrite: KPREWRITE_TRACE_SIZE=abc: not a size", 64 << 20},
		{[]string{"KPREWRITE_TRACE_SIZE=65G"}, "kprewrite: KPREWRITE_TRACE_SIZE=65G: larger than the 64G", 64 << 20},
		{[]string{"KPREWRITE_TRACE_SIZE=1K"}, "kprewrite: KPREWRITE_TRACE_SIZE=1K: smaller than the 4K", 64 << 20},
		{[]string{"KPREWRITE_TRACE_SIZE=2M"}, "", 2 << 20},
		{[]string{"KPREWRITE_TRACE_SIZE=8KiB"}, "", 8 << 10},
		{[]string{"KPREWRITE_DEBUG=0"}, "", 0},
		{[]string{"KPREWRITE_DEBUG=maybe"}, "kprewrite: KPREWRITE_DEBUG=maybe: want 1 or 0; taken as 1", 0},
		{[]string{"KPREWRITE_SIGGUARD=of"}, "kprewrite: KPREWRITE_SIGGUARD=of: unknown value; want off; ignored", 0},
		{[]string{"KPREWRITE_SAFE_READ=sycall"}, "kprewrite: KPREWRITE_SAFE_READ=sycall: unknown value; want syscall; ignored", 0},
		{[]string{"KPREWRITE_THREADKEY=fs"}, "kprewrite: KPREWRITE_THREADKEY=fs: unknown value; want fs0 or tid; ignored", 0},
	} {
		tr := filepath.Join(dir, "t.trace")
		os.Remove(tr)
		r := testprog.Run(t, testprog.Cmd{Path: out, Extra: append([]string{"KPREWRITE_TRACE=" + tr}, c.env...)})
		if r.Exit != 0 || r.Stdout != "6\n" {
			t.Errorf("%v: %s", c.env, r)
			continue
		}
		var lines []string
		for _, l := range strings.Split(strings.TrimSpace(r.Stderr), "\n") {
			if l != "" && !strings.HasPrefix(l, "kprewrite: runtime up") {
				lines = append(lines, l)
			}
		}
		switch {
		case c.want == "" && len(lines) != 0:
			t.Errorf("%v: stderr %q, want nothing", c.env, lines)
		case c.want != "" && (len(lines) != 1 || !strings.HasPrefix(lines[0], c.want)):
			t.Errorf("%v: stderr %q, want one line starting %q", c.env, lines, c.want)
		}
		debug := strings.Contains(r.Stderr, "runtime up")
		if want := strings.HasSuffix(c.env[0], "maybe"); debug != want {
			t.Errorf("%v: debug output %v, want %v", c.env, debug, want)
		}
		if c.size != 0 {
			code, stdout, stderr := kp("trace", "-b", out, tr)
			if code != 0 {
				t.Errorf("%v: trace: %s", c.env, stderr)
			}
			st, err := os.Stat(tr)
			if err != nil || st.Size() < c.size || st.Size() > c.size+(4<<20) {
				t.Errorf("%v: trace file of %v bytes, want a record area of %d (%v)", c.env, st.Size(), c.size, err)
			}
			if !strings.Contains(stdout, "g/w") && !strings.Contains(stdout, "w: (") {
				t.Errorf("%v: no record in\n%s", c.env, stdout)
			}
		}
	}
}
