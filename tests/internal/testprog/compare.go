package testprog

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Same runs the original and the rewritten program the same way (c with Path set to
// each) and fails the test unless stdout, stderr and the exit status or signal match.
// norm, when not nil, is applied to both outputs first (to blank timings and the like).
// It returns the rewritten program's result.
func Same(t testing.TB, orig, rewritten string, c Cmd, norm func(string) string) Result {
	t.Helper()
	c.Path = orig
	want := Run(t, c)
	c.Path = rewritten
	got := Run(t, c)
	if norm != nil {
		want.Stdout, want.Stderr = norm(want.Stdout), norm(want.Stderr)
		got.Stdout, got.Stderr = norm(got.Stdout), norm(got.Stderr)
	}
	if d := want.Diff(got); d != "" {
		t.Fatalf("rewritten %s %s behaves differently:\n%s\n=== original: %s\n=== rewritten: %s",
			filepath.Base(orig), strings.Join(c.Args, " "), d, want, got)
	}
	return got
}

// warnLine matches readelf's "readelf: Warning: ..." / "readelf: Error: ...", gdb's
// "warning: ..." and BFD's "BFD: warning: ...".
var warnLine = regexp.MustCompile(`(?i)^(\w+: )*(warning|error)\b`)

// NewWarnings runs tool with args and the file as last argument on the original and on
// the rewritten file, and returns the warning and error lines only the rewritten file
// gets (file paths replaced by FILE). The tool must exit with status 0 on both.
func NewWarnings(t testing.TB, orig, rewritten string, timeout time.Duration, tool string, args ...string) []string {
	t.Helper()
	run := func(path string) map[string]bool {
		r := Run(t, Cmd{Path: tool, Args: append(append([]string(nil), args...), path), Timeout: timeout, Extra: []string{"LC_ALL=C"}})
		if r.Exit != 0 || r.TimedOut {
			t.Fatalf("%s %s %s: %s", tool, strings.Join(args, " "), path, Clip(r.String(), 3000))
		}
		w := map[string]bool{}
		for _, line := range strings.Split(r.Stdout+"\n"+r.Stderr, "\n") {
			if warnLine.MatchString(line) {
				w[strings.ReplaceAll(line, path, "FILE")] = true
			}
		}
		return w
	}
	old := run(orig)
	var fresh []string
	for w := range run(rewritten) {
		if !old[w] {
			fresh = append(fresh, w)
		}
	}
	return fresh
}
