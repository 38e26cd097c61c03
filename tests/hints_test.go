package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// TestHintLibrarySymbol: a definition on a function the program does not define but a
// library it loads does (malloc) names the library and the definition to write
// (libc.so.6:malloc), exit 1 and no output; the definition it suggests rewrites.
func TestHintLibrarySymbol(t *testing.T) {
	prog := testprog.Build(t, runSrc, "c", "-O1")
	out := filepath.Join(t.TempDir(), "m.kp")
	code, _, stderr := kp("rewrite", "-o", out, "-e", "p:x/m malloc size=%di", prog)
	want := "no symbol malloc in " + prog + "; libc.so.6 defines it: write libc.so.6:malloc"
	if code != 1 || !strings.Contains(stderr, want) {
		t.Errorf("exit %d, stderr %q, want 1 and %q", code, stderr, want)
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("%s written after the error", out)
	}
	if code, _, stderr := kp("rewrite", "-o", out, "-e", "p:x/m libc.so.6:malloc size=%di", prog); code != 0 {
		t.Errorf("the suggested definition: exit %d %s", code, stderr)
	}
}

// TestHintDidYouMean: a function name, a register and an event name one typing error
// away from one that exists are answered with it.
func TestHintDidYouMean(t *testing.T) {
	prog := testprog.Build(t, runSrc, "c", "-O1")
	for _, c := range []struct{ def, want string }{
		{"p:x/w wrok a=%di", "no symbol wrok in " + prog + "; did you mean work?"},
		{"p:x/w work a=%dii", "Invalid register name; did you mean %di?"},
	} {
		code, _, stderr := kp("check", "-e", c.def, prog)
		if code != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("check -e %q: exit %d, stderr %q, want 1 and %q", c.def, code, stderr, c.want)
		}
	}
	kpd, trace := runProg(t)
	runIt(t, kpd, nil, "1")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"enable", trace, "t/x"}, "no event t/x; did you mean t/w?"},
		{[]string{"hist", "--event", "x", trace}, "no event x; did you mean w?"},
	} {
		if code, _, stderr := kp(c.args...); code != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("%q: exit %d, stderr %q, want 1 and %q", c.args, code, stderr, c.want)
		}
	}
	if code, _, stderr := kp("enable", trace, "t/w"); code != 0 {
		t.Errorf("the suggested event: exit %d %s", code, stderr)
	}
}

// TestUnknownFlagOneLine: an unknown flag is said in one line followed by the
// command's usage line, not its 40-odd lines of options; -h still lists them.
func TestUnknownFlagOneLine(t *testing.T) {
	for _, cmd := range []string{"rewrite", "check", "trace", "record", "hist", "profile"} {
		code, stdout, stderr := kp(cmd, "--bogus", "x")
		lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
		if code != 2 || stdout != "" || len(lines) != 2 ||
			lines[0] != "kprewrite "+cmd+": flag provided but not defined: -bogus" ||
			!strings.HasPrefix(lines[1], "usage: kprewrite "+cmd+" ") {
			t.Errorf("%s --bogus: exit %d, stdout %q, stderr %q", cmd, code, stdout, stderr)
		}
		code, stdout, _ = kp(cmd, "-h")
		if code != 0 || !strings.HasPrefix(stdout, "usage: kprewrite "+cmd+" ") || strings.Count(stdout, "\n") < 4 {
			t.Errorf("%s -h: exit %d, %q", cmd, code, stdout)
		}
	}
}
