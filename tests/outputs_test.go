package tests

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// dirState is a directory's names and their contents' hashes.
func dirState(t *testing.T, dir string) map[string]string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, e := range ents {
		if e.Type().IsRegular() {
			m[e.Name()] = testprog.HashFile(t, filepath.Join(dir, e.Name()))
		} else {
			m[e.Name()] = e.Type().String()
		}
	}
	return m
}

// TestOutputIsInput: every command that takes -o refuses an output that is one of its
// inputs (the same path, or the same file by another name), exit 1 and one message
// form, and leaves the directory as it was (issue 50). Before, record -o PROG -- PROG
// replaced the program with its ring and then removed it; flamegraph, profile --format
// pprof and trace -o T T replaced the trace with their output; control -o BIN BIN wrote
// over the binary; rewrite -o DEFS -f DEFS over the definitions.
func TestOutputIsInput(t *testing.T) {
	testprog.Need(t, "gcc")
	built := recordProg(t)
	orig := testprog.Build(t, recordSrc, "c", "-O2", "-pthread")
	copyFile := func(from, to string) {
		b, err := os.ReadFile(from)
		if err == nil {
			err = os.WriteFile(to, b, 0o755)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// each case in a directory of its own: prog (rewritten), its trace prog.trace (the
	// implicit binary of trace, profile and flamegraph is prog), link (a hard link to
	// prog), orig (not rewritten), data, defs
	type files struct{ dir, prog, trace, link, orig, data, defs string }
	setUp := func(name string) files {
		d := filepath.Join(t.TempDir(), name)
		os.Mkdir(d, 0o755)
		f := files{d, filepath.Join(d, "prog"), filepath.Join(d, "prog.trace"), filepath.Join(d, "link"),
			filepath.Join(d, "orig"), filepath.Join(d, "data"), filepath.Join(d, "defs")}
		copyFile(built, f.prog)
		copyFile(orig, f.orig)
		if err := os.Link(f.prog, f.link); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(f.data, []byte("some data\n"), 0o644)
		os.WriteFile(f.defs, []byte(recordDef+"\n"), 0o644)
		if r := testprog.Run(t, testprog.Cmd{Path: f.prog, Args: []string{"100", "0"}, Env: []string{"KPREWRITE_TRACE=" + f.trace}}); r.Exit != 7 {
			t.Fatal(r)
		}
		return f
	}
	for i, args := range []func(f files) []string{
		func(f files) []string { return []string{"record", "-o", f.prog, "--", f.prog, "10", "0"} },
		func(f files) []string { return []string{"record", "-o", f.link, "--", f.prog, "10", "0"} },
		func(f files) []string { return []string{"record", "-o", f.data, "--", "cat", f.data} },
		func(f files) []string { return []string{"trace", "--format", "chrome", "-o", f.trace, f.trace} },
		func(f files) []string { return []string{"trace", "-o", f.trace, f.trace} },
		func(f files) []string { return []string{"trace", "-o", f.prog, f.trace} },
		func(f files) []string { return []string{"trace", "-o", f.link, "-b", f.prog, f.trace} },
		func(f files) []string { return []string{"profile", "--format", "pprof", "-o", f.trace, f.trace} },
		func(f files) []string {
			return []string{"profile", "--format", "pprof", "-o", f.prog, "-b", f.prog, f.trace}
		},
		func(f files) []string { return []string{"flamegraph", "-o", f.trace, f.trace} },
		func(f files) []string { return []string{"flamegraph", "--format", "folded", "-o", f.prog, f.trace} },
		func(f files) []string { return []string{"control", "-o", f.prog, f.prog} },
		func(f files) []string { return []string{"control", "-o", f.link, f.prog} },
		func(f files) []string { return []string{"rewrite", "-o", f.orig, f.orig} },
		func(f files) []string { return []string{"rewrite", "-o", f.defs, "-f", f.defs, f.orig} },
	} {
		f := setUp(fmt.Sprint(i))
		args := args(f)
		cmd := "kprewrite " + strings.Join(args, " ")
		before := dirState(t, f.dir)
		code, stdout, stderr := kp(args...)
		if code != 1 || !strings.Contains(stderr, " is the input ") || !strings.Contains(stderr, "kprewrite never modifies its input") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 1 and output ... is the input ...: kprewrite never modifies its input",
				cmd, code, clip(stdout, 200), stderr)
		}
		if after := dirState(t, f.dir); !maps.Equal(before, after) {
			t.Errorf("%s changed the files: before %v, after %v", cmd, before, after)
		}
	}
	// the same commands with another output work; record's program may be given the
	// trace file's name (to follow it, or to find files beside it)
	f := setUp("other")
	other := filepath.Join(f.dir, "out")
	for _, args := range [][]string{
		// (a program that runs a rewritten one: one with no probes is an error)
		{"record", "-q", "-o", f.trace, "--", "sh", "-c", `"$0" 1 0 > /dev/null; true`, f.prog, f.trace},
		{"record", "-q", "-o", other + ".trace", "--", "sh", "-c", `"$0" 1 0 > /dev/null; true`, f.prog, other + ".trace"},
		{"trace", "--format", "chrome", "-o", other, f.trace},
		{"flamegraph", "-o", other, f.trace},
		{"control", "-o", other, f.prog},
	} {
		if code, _, stderr := kp(args...); code != 0 {
			t.Errorf("kprewrite %s: exit %d: %s", strings.Join(args, " "), code, stderr)
		}
	}
}

// TestOutputNotRegular: an output that is a FIFO is refused and left a FIFO, not
// opened (no hang), written or replaced, by every command that takes -o.
func TestOutputNotRegular(t *testing.T) {
	testprog.Need(t, "gcc")
	prog := recordProg(t)
	dir := t.TempDir()
	trace := filepath.Join(dir, "t.trace")
	if r := testprog.Run(t, testprog.Cmd{Path: prog, Args: []string{"100", "0"}, Env: []string{"KPREWRITE_TRACE=" + trace}}); r.Exit != 7 {
		t.Fatal(r)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"record", "-o", fifo, "--", "true"},
		{"trace", "-o", fifo, "-b", prog, trace},
		{"profile", "--format", "pprof", "-o", fifo, "-b", prog, trace},
		{"flamegraph", "-o", fifo, "-b", prog, trace},
		{"control", "-o", fifo, prog},
		{"rewrite", "-o", fifo, "-e", recordDef, testprog.Build(t, recordSrc, "c", "-O2", "-pthread")},
	} {
		code, _, stderr := kp(args...)
		if code != 1 || !strings.Contains(stderr, "not a regular file") {
			t.Errorf("kprewrite %s: exit %d: %q; want exit 1, not a regular file", strings.Join(args, " "), code, stderr)
		}
		if st, err := os.Lstat(fifo); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
			t.Fatalf("kprewrite %s: the FIFO is now %v (%v)", strings.Join(args, " "), st.Mode(), err)
		}
	}
}

// TestRecordOutputHeld: a second kprewrite record with the output of one that is
// running is refused, saying so, and the first one's file stays the first one's (issue
// 50: the first said "4000000 records written" while the file held the second's).
func TestRecordOutputHeld(t *testing.T) {
	testprog.Need(t, "gcc", "go")
	prog := recordProg(t)
	dir := t.TempDir()
	bin := buildKprewrite(t, dir)
	file := filepath.Join(dir, "held.trace")
	// a record inside the recorded program, on the same file; then the program's calls
	script := fmt.Sprintf(`'%s' record -o "$KPREWRITE_TRACE" -- true; echo "inner exit $?"; exec '%s' 1000 0`, bin, prog)
	code, stdout, stderr := kp("record", "-o", file, "--", "sh", "-c", script)
	if code != 7 || !strings.Contains(stdout, "inner exit 1\n") || !strings.Contains(stderr, "another kprewrite record is writing it") {
		t.Errorf("record inside record: exit %d, stdout %q, stderr %q; want the inner one refused (exit 1, another kprewrite record is writing it)", code, stdout, stderr)
	}
	if m := recordSummary.FindStringSubmatch(stderr); m == nil || m[1] != "1000" {
		t.Errorf("the outer record's summary: %q", stderr)
	}
	if lines := readTrace(t, file, prog); len(lines) != 1000 {
		t.Errorf("%s holds %d records, want the outer record's 1000", file, len(lines))
	}

	// two started at once: one runs, the other is refused before its program starts
	started := filepath.Join(dir, "started")
	os.Mkdir(started, 0o755)
	wait := fmt.Sprintf(`: > '%s'/$$; while [ ! -e '%s'/go ]; do sleep 0.01; done; '%s' 1 0 > /dev/null; true`, started, started, prog)
	type result struct {
		i      int
		err    error
		stderr string
	}
	done := make(chan result, 2)
	var cmds [2]*exec.Cmd
	for i := range cmds {
		cmds[i] = exec.Command(bin, "record", "-o", file, "--", "sh", "-c", wait)
		var e strings.Builder
		cmds[i].Stderr = &e
		if err := cmds[i].Start(); err != nil {
			t.Fatal(err)
		}
		go func(i int) { err := cmds[i].Wait(); done <- result{i, err, e.String()} }(i)
	}
	defer func() { // whatever happened, both end
		os.WriteFile(filepath.Join(started, "go"), nil, 0o644)
	}()
	var first result
	deadline := time.Now().Add(2 * time.Minute)
	for first.stderr == "" && first.err == nil {
		select {
		case first = <-done:
			if first.err == nil {
				t.Fatalf("recorder %d ended first with exit 0: %q", first.i, first.stderr)
			}
		case <-time.After(10 * time.Millisecond):
			if ents, _ := os.ReadDir(started); len(ents) == 2 {
				t.Fatalf("both recorders of %s started their programs", file)
			}
			if time.Now().After(deadline) {
				t.Fatal("neither recorder ended")
			}
		}
	}
	if ee, ok := first.err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(first.stderr, file+": another kprewrite record is writing it") {
		t.Errorf("the refused recorder: %v, %q", first.err, first.stderr)
	}
	os.WriteFile(filepath.Join(started, "go"), nil, 0o644)
	second := <-done
	if second.err != nil || !strings.Contains(second.stderr, "records (") {
		t.Errorf("the recorder that ran: %v, %q", second.err, second.stderr)
	}
	if ents, _ := os.ReadDir(dir); slices.ContainsFunc(ents, func(e os.DirEntry) bool { return strings.HasPrefix(e.Name(), ".held.trace") }) {
		t.Errorf("a temporary file is left in %s", dir)
	}
}

// TestRecordOutputGone: a trace file removed or replaced while kprewrite record runs
// is said to be so, exit 1, not reported as written (issue 50: "2000000 records written
// to X", exit 0, X gone); a replacement is left as it is.
func TestRecordOutputGone(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "gone.trace")
	for _, c := range []struct {
		name, script, want string
	}{
		{"removed", `rm "$KPREWRITE_TRACE"`, "was removed while recording"},
		{"replaced", `echo other > "$KPREWRITE_TRACE.new"; mv "$KPREWRITE_TRACE.new" "$KPREWRITE_TRACE"`, "was replaced by another file while recording"},
	} {
		os.Remove(file)
		code, _, stderr := kp("record", "-o", file, "--", "sh", "-c", c.script)
		if code != 1 || !strings.Contains(stderr, file+": "+c.want) || strings.Contains(stderr, "written to") {
			t.Errorf("%s: exit %d, stderr %q; want exit 1, %q and no written to", c.name, code, stderr, c.want)
		}
		b, err := os.ReadFile(file)
		switch c.name {
		case "removed":
			if !os.IsNotExist(err) {
				t.Errorf("removed: %s exists again (%v)", file, err)
			}
		case "replaced":
			if string(b) != "other\n" {
				t.Errorf("replaced: %s holds %q, want the replacement's other", file, clip(string(b), 40))
			}
		}
	}
}
