package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

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
		r := testprog.Run(t, testprog.Cmd{Path: "sh", Args: []string{"-c", "ulimit -f 1024 && exec " + other}, Extra: []string{"KPREWRITE_APPEND=1"}})
		if r.Exit != 0 || r.Signal != "" || r.Stdout != "90\n" || !strings.Contains(r.Stderr, "its readers need -b BINARY") {
			t.Fatalf("second program under ulimit -f 1024: %s", r)
		}
		code, out, stderr := kp("profile", "-b", prog, "-b", other, trace)
		if code != 0 || !strings.Contains(out, "f ") || !regexp.MustCompile(`g\s+10\s+0`).MatchString(out) {
			t.Errorf("profile: %d %s\n%s", code, stderr, out)
		}
	})
}

// startIgnoring starts bin with args under sh with the signals sigs ignored (trap ""),
// as a non-interactive script's `cmd &` or nohup starts it; the process is bin's once
// sh has exec'd it.
func startIgnoring(t *testing.T, env []string, sigs string, bin string, args ...string) (*exec.Cmd, chan error) {
	t.Helper()
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = "'" + a + "'"
	}
	cmd := exec.Command("sh", "-c", "trap '' "+sigs+"; exec "+bin+" "+strings.Join(q, " "))
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		if t.Failed() {
			t.Logf("output: %s", out.String())
		}
	})
	return cmd, done
}

// waitFor polls ready every millisecond for up to a minute.
func waitFor(t *testing.T, what string, ready func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !ready(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after a minute", what)
		}
	}
}

// TestIgnoredSignals: kprewrite started with SIGINT or SIGHUP ignored (`cmd &` in a
// script, nohup) goes on ignoring them: a rewrite completes, record ends with its
// program. Before, it caught them anyway, and its re-raise of one to end itself was
// ignored: rewrite removed its handlers' build, then waited forever; record stayed
// after its program had exited (issue 50).
func TestIgnoredSignals(t *testing.T) {
	testprog.Need(t, "gcc", "go", "sh", "sleep")
	dir := t.TempDir()
	bin := buildKprewrite(t, dir)
	// a gcc that says it started, then takes its time
	wrap := filepath.Join(dir, "wrap")
	os.Mkdir(wrap, 0o755)
	real, err := exec.LookPath("gcc")
	if err != nil {
		t.Fatal(err)
	}
	prog := recordProg(t)
	marker := filepath.Join(dir, "gcc-started")
	script := "#!/bin/sh\n: > " + marker + "\nsleep 1\nexec " + real + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(wrap, "gcc"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, "target")
	if out, err := exec.Command("gcc", "-O1", "-o", target, "../examples/kprobe/target.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGHUP} {
		name := map[syscall.Signal]string{syscall.SIGINT: "INT", syscall.SIGHUP: "HUP"}[sig]
		t.Run("rewrite "+name, func(t *testing.T) {
			os.Remove(marker)
			tmp := t.TempDir()
			out := filepath.Join(tmp, "out")
			env := append(os.Environ(), "TMPDIR="+tmp, "PATH="+wrap+":"+os.Getenv("PATH"))
			cmd, done := startIgnoring(t, env, name, bin, "rewrite", "--handlers", "../examples/kprobe/kprobe_example.c", "-o", out, target)
			waitFor(t, "the compiler started", func() bool { _, err := os.Stat(marker); return err == nil })
			syscall.Kill(cmd.Process.Pid, sig)
			select {
			case err := <-done:
				done <- err
				if err != nil {
					t.Fatalf("rewrite with %v ignored, sent %v: %v", sig, sig, err)
				}
			case <-time.After(time.Minute):
				t.Fatalf("rewrite with %v ignored, sent %v: still running after a minute", sig, sig)
			}
			if st, err := os.Stat(out); err != nil || st.Size() == 0 {
				t.Errorf("no output: %v", err)
			}
		})
		t.Run("record "+name, func(t *testing.T) {
			trace := filepath.Join(t.TempDir(), "r.trace")
			// (a program that runs a rewritten one: one with no probes is an error)
			cmd, done := startIgnoring(t, os.Environ(), name, bin, "record", "-q", "-o", trace, "--", "sh", "-c", `sleep 1; "$0" 1 0 > /dev/null; true`, prog)
			waitFor(t, "the trace file", func() bool { _, err := os.Stat(trace); return err == nil })
			syscall.Kill(cmd.Process.Pid, sig)
			select {
			case err := <-done:
				done <- err
				if err != nil {
					t.Fatalf("record with %v ignored, sent %v: %v", sig, sig, err)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("record with %v ignored, sent %v: still running 30 s after, its program ran for 1 s", sig, sig)
			}
		})
	}
}

// TestFIFOInputs: a FIFO (with no writer) given as an input is refused at once, named,
// "not a regular file (a FIFO)", exit 1, no output; the runtime ignores one given as
// KPREWRITE_CONTROL with one line. Before, format, check and rewrite with --debug-file,
// -f, and the program at its start waited forever for a writer; --handlers failed
// naming a temporary file (issue 50).
func TestFIFOInputs(t *testing.T) {
	testprog.Need(t, "gcc")
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	prog := hostileProg(t, dir, filepath.Join(dir, "p.trace"), "f")
	orig := testprog.Build(t, hostileSrc, "c", "-O2", "-g")
	out := filepath.Join(dir, "out")
	for _, args := range [][]string{
		{"format", fifo},
		{"check", "--debug-file", fifo, orig},
		{"check", "--lines", "main", "--debug-file", fifo, orig},
		{"check", "-f", fifo, orig},
		{"rewrite", "-o", out, "--debug-file", fifo, "-e", "p:g main", orig},
		{"rewrite", "-o", out, "-f", fifo, orig},
		{"rewrite", "-o", out, "--handlers", fifo, orig},
	} {
		type result struct {
			code           int
			stdout, stderr string
		}
		done := make(chan result, 1)
		go func() {
			code, stdout, stderr := kp(args...)
			done <- result{code, stdout, stderr}
		}()
		select {
		case r := <-done:
			if r.code != 1 || !strings.Contains(r.stderr, fifo+": not a regular file (a FIFO)") || strings.Count(r.stderr, "\n") != 1 {
				t.Errorf("%s: exit %d\n%s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: still waiting after 20 s", strings.Join(args, " "))
		}
		if _, err := os.Lstat(out); err == nil {
			t.Errorf("%s: wrote %s", strings.Join(args, " "), out)
			os.Remove(out)
		}
	}
	r := testprog.Run(t, testprog.Cmd{Path: prog, Extra: []string{"KPREWRITE_CONTROL=" + fifo}, Timeout: 20 * time.Second})
	if r.Exit != 0 || r.Stdout != "90\n" || r.Stderr != "kprewrite: KPREWRITE_CONTROL "+fifo+": is not a regular file; ignored\n" {
		t.Errorf("KPREWRITE_CONTROL=FIFO: %s", r)
	}
}

// TestRewriteOptionsChecked: --disable with a name or glob no event has, --trace-size
// outside the runtime's 4K to 64G, a size too large to parse: refused with the text
// the user gave, no output. Before, the first three were accepted (the event stayed
// enabled; 1 became 4 KiB; 100G made a 0-byte trace file and a "no space" line at run
// time) and 1000000G was reported as "1000000" (issue 50).
func TestRewriteOptionsChecked(t *testing.T) {
	testprog.Need(t, "gcc")
	dir := t.TempDir()
	orig := testprog.Build(t, hostileSrc, "c", "-O2")
	out := filepath.Join(dir, "out")
	for _, c := range []struct {
		opt  []string
		code int
		want string
	}{
		{[]string{"--disable", "nosuch/ev"}, 1, "--disable nosuch/ev: no event of the definitions matches it"},
		{[]string{"--disable", "uprobes/fx"}, 1, "--disable uprobes/fx: no event of the definitions matches it (did you mean uprobes/f?)"},
		{[]string{"--disable", "uprobe/*"}, 1, "(did you mean uprobes/*?)"},
		{[]string{"--disable", "f,nosuch"}, 1, "--disable nosuch: no event"},
		{[]string{"--trace-size", "1"}, 2, "--trace-size 1: out of range: the runtime's record area is 4K to 64G"},
		{[]string{"--trace-size", "100G"}, 2, "--trace-size 100G: out of range: the runtime's record area is 4K to 64G"},
		{[]string{"--trace-size", "1000000G"}, 2, `bad size "1000000G"`},
	} {
		args := append(append([]string{"rewrite", "-o", out, "-e", "p:f f x=%di"}, c.opt...), orig)
		code, _, stderr := kp(args...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("%s: exit %d, %q; want exit %d and %q", strings.Join(c.opt, " "), code, stderr, c.code, c.want)
		}
		if _, err := os.Lstat(out); err == nil {
			t.Errorf("%s: wrote %s", strings.Join(c.opt, " "), out)
			os.Remove(out)
		}
	}
	for _, ok := range [][]string{{"--disable", "f"}, {"--disable", "uprobes/*"}, {"--disable", "all"}, {"--trace-size", "4K"}, {"--trace-size", "64G"}} {
		if code, _, stderr := kp(append(append([]string{"rewrite", "-o", out, "-e", "p:f f x=%di"}, ok...), orig)...); code != 0 {
			t.Errorf("%s: %s", strings.Join(ok, " "), stderr)
		}
	}
}

// TestFollowNotATrace: trace --follow of a file that is not a trace file fails at once
// with the reason (it waited silently); an empty file, which a starting program is
// about to make a trace file, is still waited for (issue 50).
func TestFollowNotATrace(t *testing.T) {
	testprog.Need(t, "gcc")
	dir := t.TempDir()
	txt := filepath.Join(dir, "txt")
	os.WriteFile(txt, []byte("hello world, not a trace\n"), 0o644)
	elf := testprog.Build(t, hostileSrc, "c", "-O2")
	for path, want := range map[string]string{txt: txt + ": not a kprewrite trace file: 25 bytes", elf: elf + `: not a kprewrite trace file: bad magic "\x7fELF`} {
		type result struct {
			code   int
			stderr string
		}
		done := make(chan result, 1)
		go func() { code, _, stderr := kp("trace", "--follow", path); done <- result{code, stderr} }()
		select {
		case r := <-done:
			if r.code != 1 || !strings.Contains(r.stderr, want) {
				t.Errorf("trace --follow %s: exit %d %q, want %q", path, r.code, r.stderr, want)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("trace --follow %s: still waiting after 20 s", path)
		}
	}
}

// TestRecordLiveReaderGone: record --live | head -1: the recorder no longer dies of
// SIGPIPE when head exits (its program ran on with no one copying its records); it
// says the reader is gone once and records to the file until the program ends, with
// the program's status (issue 50).
func TestRecordLiveReaderGone(t *testing.T) {
	testprog.Need(t, "gcc", "go", "sh", "head")
	dir := t.TempDir()
	bin := buildKprewrite(t, dir)
	slow := testprog.Build(t, `
#include <stdio.h>
#include <unistd.h>
__attribute__((noinline)) int f(int x) { return x * 2; }
int main(void) {
	int s = 0;
	for (int i = 0; i < 1000; i++) {
		s += f(i);
		usleep(1000);
	}
	fprintf(stderr, "sum %d\n", s);
	return 0;
}
`, "c", "-O2")
	prog := filepath.Join(dir, "slow.kp")
	if code, _, stderr := kp("rewrite", "-o", prog, "-e", "p:f f x=%di", slow); code != 0 {
		t.Fatal(stderr)
	}
	trace := filepath.Join(dir, "s.trace")
	status := filepath.Join(dir, "status")
	r := testprog.Run(t, testprog.Cmd{Path: "sh", Args: []string{"-c",
		"(" + bin + " record --live -o " + trace + " -- " + prog + "; echo $? > " + status + ") | head -1"}, Timeout: time.Minute})
	if r.Exit != 0 || strings.Count(r.Stdout, "\n") != 1 || !strings.Contains(r.Stdout, " f: (") {
		t.Fatalf("pipeline: %s", r)
	}
	st, err := os.ReadFile(status)
	if err != nil || string(st) != "0\n" {
		t.Fatalf("record's status %q (%v), want 0\n%s", st, err, r.Stderr)
	}
	if !strings.Contains(r.Stderr, "sum 999000") || strings.Count(r.Stderr, "its reader is gone") != 1 {
		t.Errorf("stderr:\n%s", r.Stderr)
	}
	code, out, stderr := kp("trace", trace)
	if code != 0 || strings.Count(out, " f: (") != 1000 {
		t.Errorf("trace: exit %d, %d records, want 1000\n%s", code, strings.Count(out, " f: ("), stderr)
	}
}
