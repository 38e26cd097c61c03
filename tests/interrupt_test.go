package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// buildKprewrite builds the command into dir.
func buildKprewrite(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "kprewrite")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/kprewrite").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// interrupt starts cmd in a process group of its own, waits until ready reports true
// (polled every millisecond while cmd runs), then sends sig to the group, as a
// terminal's Ctrl-C does. It reports whether the signal was sent before cmd ended.
func interrupt(t *testing.T, cmd *exec.Cmd, sig syscall.Signal, ready func() bool) bool {
	t.Helper()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case <-done:
			return false
		case <-time.After(time.Millisecond):
		}
		if ready() {
			syscall.Kill(-cmd.Process.Pid, sig)
			select {
			case <-done:
			case <-time.After(time.Minute):
				syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				<-done
				t.Fatal("kprewrite did not end after the signal")
			}
			if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != sig {
				t.Errorf("kprewrite ended with %v, want killed by %v", cmd.ProcessState, sig)
			}
			return true
		}
	}
}

// TestInterruptRemovesTemporaryFiles: SIGINT or SIGTERM while the C handlers compile
// or while the output is written leaves no temporary file or directory behind (it
// left .OUT.tmp-NNN and kprewrite-handlers-NNN in 10 runs of 10; issue 13).
func TestInterruptRemovesTemporaryFiles(t *testing.T) {
	testprog.Need(t, "gcc", "go", "sh")
	dir := t.TempDir()
	bin := buildKprewrite(t, dir)

	t.Run("handlers", func(t *testing.T) {
		// a gcc that says it started, then takes its time
		wrap := filepath.Join(dir, "wrap")
		os.Mkdir(wrap, 0o755)
		real, err := exec.LookPath("gcc")
		if err != nil {
			t.Fatal(err)
		}
		marker := filepath.Join(dir, "gcc-started")
		script := "#!/bin/sh\n: > " + marker + "\nsleep 20\nexec " + real + " \"$@\"\n"
		if err := os.WriteFile(filepath.Join(wrap, "gcc"), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		target := filepath.Join(dir, "target")
		if out, err := exec.Command("gcc", "-O1", "-o", target, "../examples/kprobe/target.c").CombinedOutput(); err != nil {
			t.Fatalf("gcc: %v\n%s", err, out)
		}
		for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
			tmp := t.TempDir()
			os.Remove(marker)
			cmd := exec.Command(bin, "rewrite", "--handlers", "../examples/kprobe/kprobe_example.c", "-o", filepath.Join(tmp, "out"), target)
			cmd.Env = append(os.Environ(), "TMPDIR="+tmp, "PATH="+wrap+":"+os.Getenv("PATH"))
			if !interrupt(t, cmd, sig, func() bool { _, err := os.Stat(marker); return err == nil }) {
				t.Fatalf("%v: kprewrite ended before its compiler started", sig)
			}
			if left, _ := filepath.Glob(filepath.Join(tmp, "*")); len(left) != 0 {
				t.Errorf("%v during compilation left %v", sig, left)
			}
		}
	})

	t.Run("output", func(t *testing.T) {
		// the output of a large rewrite is written for a while: node's 147 MB
		node := realBin(t, "node")
		defs := filepath.Join(dir, "node.defs")
		out, err := exec.Command("go", "run", "../scripts/alldefs", node).Output()
		if err != nil {
			t.Fatalf("alldefs: %v", err)
		}
		os.WriteFile(defs, out, 0o644)
		caught := 0
		for try := 0; try < 4 && caught < 2; try++ {
			sig := []syscall.Signal{syscall.SIGINT, syscall.SIGTERM}[caught]
			tmp := t.TempDir()
			cmd := exec.Command(bin, "rewrite", "--skip-refused", "-f", defs, "-o", filepath.Join(tmp, "node.kp"), node)
			seen := func() bool {
				m, _ := filepath.Glob(filepath.Join(tmp, ".node.kp.tmp-*"))
				return len(m) > 0
			}
			if !interrupt(t, cmd, sig, seen) {
				continue // written before a poll saw it: try again
			}
			caught++
			left, _ := filepath.Glob(filepath.Join(tmp, "*"))
			hidden, _ := filepath.Glob(filepath.Join(tmp, ".*"))
			if left = append(left, hidden...); len(left) != 0 {
				t.Errorf("%v while writing left %s", sig, strings.Join(left, " "))
			}
		}
		if caught == 0 {
			t.Skip("every rewrite wrote its output between two polls: nothing was interrupted")
		}
	})
}
