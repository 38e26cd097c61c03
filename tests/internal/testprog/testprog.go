package testprog

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// DefaultTimeout bounds every Run unless Cmd.Timeout says otherwise.
const DefaultTimeout = 2 * time.Minute

// Need skips the test unless every tool is available (a name on $PATH or a path).
func Need(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if strings.ContainsRune(tool, os.PathSeparator) {
			if _, err := os.Stat(tool); err != nil {
				t.Skipf("%s not available: %v", tool, err)
			}
			continue
		}
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not on PATH", tool)
		}
	}
}

// Build compiles src with gcc (lang "c"), musl-gcc (lang "c-musl": skipped when musl-gcc is
// not installed) or g++ (lang "c++") in a fresh temporary
// directory and returns the executable's path. flags are passed to the compiler after
// the source file, so they may hold libraries (-lpthread) as well as options (-O2,
// -static, -no-pie). A compile error fails the test with the compiler's output.
func Build(t testing.TB, src, lang string, flags ...string) string {
	t.Helper()
	var compiler, ext string
	switch lang {
	case "c":
		compiler, ext = "gcc", ".c"
	case "c-musl":
		compiler, ext = "musl-gcc", ".c"
	case "c++", "cxx", "cpp":
		compiler, ext = "g++", ".cc"
	default:
		t.Fatalf("testprog.Build: unknown language %q (want c, c-musl or c++)", lang)
	}
	Need(t, compiler)
	dir := t.TempDir()
	srcPath := filepath.Join(dir, "prog"+ext)
	if err := os.WriteFile(srcPath, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "prog")
	args := append([]string{"-o", out, srcPath}, flags...)
	cmd := exec.Command(compiler, args...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", compiler, strings.Join(args, " "), err, b)
	}
	return out
}

// Quiet is the environment entry that keeps a rewritten program from saying where its
// trace goes (once per run, on stderr). Run adds it first; the tests package's
// TestMain sets it for every other program a test starts.
const Quiet = "KPREWRITE_QUIET=1"

// Cmd describes one program run.
type Cmd struct {
	Path    string
	Args    []string // without argv[0]
	Argv0   string   // argv[0]; Path when empty
	Dir     string   // working directory; the test's when empty
	Env     []string // the whole environment when non-nil, else the test's
	Extra   []string // added to the environment (KEY=value), after Env
	Stdin   string
	Timeout time.Duration // DefaultTimeout when zero
}

// Result is how a run ended. Exit is the exit status, or -1 when the program was
// killed by a signal (then Signal names it).
type Result struct {
	Stdout, Stderr string
	Exit           int
	Signal         string
	TimedOut       bool
}

func (r Result) String() string {
	how := fmt.Sprintf("exit %d", r.Exit)
	if r.Signal != "" {
		how = "signal " + r.Signal
	}
	if r.TimedOut {
		how += " (timed out)"
	}
	return fmt.Sprintf("%s\n--- stdout:\n%s\n--- stderr:\n%s", how, Clip(r.Stdout, 2000), Clip(r.Stderr, 2000))
}

// Diff describes how two runs differ, or returns "" when they behaved the same.
func (r Result) Diff(other Result) string {
	var d []string
	if r.Exit != other.Exit || r.Signal != other.Signal || r.TimedOut != other.TimedOut {
		d = append(d, fmt.Sprintf("status: exit %d signal %q timeout %v vs exit %d signal %q timeout %v",
			r.Exit, r.Signal, r.TimedOut, other.Exit, other.Signal, other.TimedOut))
	}
	if r.Stdout != other.Stdout {
		d = append(d, "stdout differs:\n"+firstDiff(r.Stdout, other.Stdout))
	}
	if r.Stderr != other.Stderr {
		d = append(d, "stderr differs:\n"+firstDiff(r.Stderr, other.Stderr))
	}
	return strings.Join(d, "\n")
}

func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(al) || i < len(bl); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y || i >= len(al) || i >= len(bl) {
			return fmt.Sprintf("  line %d:\n  - %s\n  + %s", i+1, Clip(x, 300), Clip(y, 300))
		}
	}
	return ""
}

// Clip shortens s to about n bytes for messages.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + fmt.Sprintf("... (%d more bytes)", len(s)-n)
}

// Run runs c and returns how it ended. Failing to start the program fails the test;
// a nonzero exit or a signal is a Result, not a failure.
func Run(t testing.TB, c Cmd) Result {
	t.Helper()
	timeout := c.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.Path, c.Args...)
	if c.Argv0 != "" {
		cmd.Args[0] = c.Argv0
	}
	cmd.Dir = c.Dir
	// quiet first (Env or Extra may set it again): a rewritten program that starts a
	// trace says where on stderr, which tests compare with the original's
	if c.Env != nil {
		cmd.Env = append(append([]string{Quiet}, c.Env...), c.Extra...)
	} else {
		cmd.Env = append(append([]string{Quiet}, os.Environ()...), c.Extra...)
	}
	if c.Stdin != "" {
		cmd.Stdin = strings.NewReader(c.Stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	// a program left running when the test binary dies (go test's -timeout panics it)
	// dies with it instead of spinning on
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err := cmd.Run()
	r := Result{Stdout: stdout.String(), Stderr: stderr.String(), TimedOut: ctx.Err() != nil}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.Exit = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			r.Exit, r.Signal = -1, ws.Signal().String()
		}
	case r.TimedOut:
		r.Exit = -1
	default:
		t.Fatalf("run %s: %v", c.Path, err)
	}
	return r
}

// MustRun runs name with args and fails the test unless it exits with status 0. It
// returns standard output.
func MustRun(t testing.TB, name string, args ...string) string {
	t.Helper()
	r := Run(t, Cmd{Path: name, Args: args})
	if r.Exit != 0 || r.Signal != "" {
		t.Fatalf("%s %s: %s", name, strings.Join(args, " "), r)
	}
	return r.Stdout
}

// HashFile returns the SHA-256 of a file's contents in hex.
func HashFile(t testing.TB, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}
