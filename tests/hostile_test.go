package tests

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// hostileSrc calls f ten times and prints the sum (90).
const hostileSrc = `
#include <stdio.h>
__attribute__((noinline)) int f(int x) { return x * 2; }
int main(void) {
	int s = 0;
	for (int i = 0; i < 10; i++)
		s += f(i);
	printf("%d\n", s);
	return 0;
}
`

// hostileProg builds hostileSrc and rewrites it with an event on f whose trace file is
// trace; it returns the rewritten program.
func hostileProg(t *testing.T, dir, trace, event string) string {
	t.Helper()
	orig := testprog.Build(t, hostileSrc, "c", "-O2")
	out := filepath.Join(dir, filepath.Base(event)+".kp")
	if code, _, stderr := kp("rewrite", "-o", out, "--trace", trace, "-e", "p:"+event+" f x=%di", orig); code != 0 {
		t.Fatalf("rewrite: %s", stderr)
	}
	return out
}

// TestFileSizeLimit: under ulimit -f the rewritten program runs as the original does
// (it died of SIGXFSZ before main: the new trace file, 64 MiB or KPREWRITE_TRACE_SIZE's
// plus a 1 MiB counters area, was sized past the limit). The file is made to fit the
// limit, the record area shrinking with one line; with no room at all the run is
// untraced with one line, as on a full disk; a second program registering in a file
// bigger than its limit writes its counters through the mapping (a write past the limit
// fails whatever the file's size) and says its description could not be appended (issue 50).
func TestFileSizeLimit(t *testing.T) {
	testprog.Need(t, "gcc", "sh")
	dir := t.TempDir()
	trace := filepath.Join(dir, "p.trace")
	prog := hostileProg(t, dir, trace, "f")
	run := func(limit string, extra ...string) testprog.Result {
		t.Helper()
		return testprog.Run(t, testprog.Cmd{Path: "sh", Args: []string{"-c", "ulimit -f " + limit + " && exec " + prog},
			Extra: extra})
	}
	for _, c := range []struct {
		name, limit string
		env         []string
		traced      bool
		line        string
	}{
		{"default size", "1024", nil, true, "record area of "},
		{"256K", "1024", []string{"KPREWRITE_TRACE_SIZE=256K"}, true, ""},
		{"no room", "8", nil, false, "bytes); tracing off"},
	} {
		t.Run(c.name, func(t *testing.T) {
			os.Remove(trace)
			r := run(c.limit, c.env...)
			if r.Exit != 0 || r.Signal != "" || r.Stdout != "90\n" {
				t.Fatalf("under ulimit -f %s: %s", c.limit, r)
			}
			lines := strings.Split(strings.TrimSuffix(r.Stderr, "\n"), "\n")
			if c.line == "" && r.Stderr != "" || c.line != "" && (len(lines) != 1 || !strings.Contains(lines[0], c.line)) {
				t.Errorf("stderr %q, want one line with %q", r.Stderr, c.line)
			}
			if !c.traced && !strings.Contains(r.Stderr, "does not fit the file size limit (ulimit -f: ") {
				t.Errorf("stderr %q does not name the limit", r.Stderr)
			}
			st, err := os.Stat(trace)
			if err != nil {
				t.Fatal(err)
			}
			if st.Size() > 1024*1024 {
				t.Errorf("trace file of %d bytes under a 1 MiB limit", st.Size())
			}
			if !c.traced {
				return
			}
			code, out, stderr := kp("trace", trace)
			if code != 0 || strings.Count(out, " f: (") != 10 {
				t.Errorf("trace: %d %s\n%s", code, stderr, out)
			}
		})
	}
	t.Run("bigger file", func(t *testing.T) {
		os.Remove(trace)
		if r := testprog.Run(t, testprog.Cmd{Path: prog}); r.Exit != 0 || r.Stderr != "" {
			t.Fatal(r)
		}
		other := hostileProg(t, dir, trace, "g")
		r := testprog.Run(t, testprog.Cmd{Path: "sh", Args: []string{"-c", "ulimit -f 1024 && exec " + other}})
		if r.Exit != 0 || r.Signal != "" || r.Stdout != "90\n" || !strings.Contains(r.Stderr, "its readers need -b BINARY") {
			t.Fatalf("second program under ulimit -f 1024: %s", r)
		}
		code, out, stderr := kp("profile", "-b", prog, "-b", other, trace)
		if code != 0 || !strings.Contains(out, "f ") || !regexp.MustCompile(`g\s+10\s+0`).MatchString(out) {
			t.Errorf("profile: %d %s\n%s", code, stderr, out)
		}
	})
}
