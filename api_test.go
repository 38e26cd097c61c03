package kprewrite_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/kprewrite/kprewrite"
)

// TestExternalModule runs the tests of testdata/apiuser, a module of its own that
// requires this one (through a replace directive) and uses only the public API, as
// another project's test suite would.
func TestExternalModule(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("no gcc to compile the module's test program")
	}
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	cmd := exec.Command(goTool, "test", "-count=1", "./...")
	cmd.Dir = "testdata/apiuser"
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ok  \texample.com/apiuser") {
		t.Fatalf("go test in testdata/apiuser: %v\n%s", err, out)
	}
}

// TestRewriteErrors: options that contradict each other, an output that is the input,
// and a definition that does not resolve are errors, and nothing is written.
func TestRewriteErrors(t *testing.T) {
	dir := t.TempDir()
	prog := build(dir)
	out := filepath.Join(dir, "out")
	for _, c := range []struct {
		name string
		in   string
		opt  kprewrite.RewriteOptions
		opts bool // an ErrOptions
		want string
	}{
		{"exits-only alone", prog, kprewrite.RewriteOptions{ExitsOnly: true}, true, "--exits-only needs --count-only"},
		{"single-step", prog, kprewrite.RewriteOptions{SingleStep: "dr7"}, true, "want tf or int3"},
		{"input as output", out, kprewrite.RewriteOptions{}, true, "is the input"},
		{"unknown symbol", prog, kprewrite.RewriteOptions{Definitions: []string{"p:x/y no_such_function"}}, false, `Invalid probed address or symbol (no symbol no_such_function in`},
		{"bad definition", prog, kprewrite.RewriteOptions{Definitions: []string{"p:x/y add a=%zz"}}, false, "-e #1"},
	} {
		if c.in == out {
			os.WriteFile(out, []byte("x"), 0o755)
		}
		_, err := kprewrite.Rewrite(c.in, out, c.opt)
		if err == nil || !strings.Contains(err.Error(), c.want) || errors.Is(err, kprewrite.ErrOptions) != c.opts {
			t.Errorf("%s: error %v, want one saying %q (ErrOptions %v)", c.name, err, c.want, c.opts)
		}
		if c.in != out {
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Errorf("%s: output written", c.name)
			}
		}
		os.Remove(out)
	}
}

// TestOutputMode: the output's mode is what a linker gives: read and write for all,
// execute where the input has it, masked by the umask (issue 13).
func TestOutputMode(t *testing.T) {
	dir := t.TempDir()
	prog := build(dir)
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	for _, c := range []struct {
		in, umask, want os.FileMode
	}{{0o755, 0o022, 0o755}, {0o644, 0o022, 0o644}, {0o700, 0o022, 0o744}, {0o755, 0o077, 0o700}, {0o555, 0o002, 0o775}} {
		if err := os.Chmod(prog, c.in); err != nil {
			t.Fatal(err)
		}
		syscall.Umask(int(c.umask))
		out := filepath.Join(dir, "out")
		os.Remove(out)
		if _, err := kprewrite.Rewrite(prog, out, kprewrite.RewriteOptions{}); err != nil {
			t.Fatal(err)
		}
		if st, err := os.Stat(out); err != nil || st.Mode().Perm() != c.want {
			t.Errorf("input %o, umask %03o: output %v, want %o (%v)", c.in, c.umask, st.Mode().Perm(), c.want, err)
		}
	}
}
