package tests

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	kprt "github.com/kprewrite/kprewrite/runtime"
	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// runSrc calls work(i) N times (argv[1]); with a second argument it then forks a child
// that execs the program again with N = 3, and waits for it.
const runSrc = `#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/wait.h>

__attribute__((noinline)) int work(int a) { return a * 2 + 1; }

int main(int argc, char **argv)
{
	int n = atoi(argv[1]), s = 0;
	for (int i = 0; i < n; i++)
		s += work(i);
	if (argc > 2) {
		pid_t p = fork();
		if (p == 0) {
			execl("/proc/self/exe", argv[0], "3", (char *)0);
			_exit(127);
		}
		waitpid(p, 0, 0);
	}
	printf("%d\n", s);
	return 0;
}
`

// runProg builds runSrc rewritten with an event on work; its trace is prog.kp.trace
// (the rewrite's default) in a directory of its own.
func runProg(t *testing.T) (kpd, trace string) {
	t.Helper()
	prog := testprog.Build(t, runSrc, "c", "-O1")
	kpd = filepath.Join(t.TempDir(), "prog.kp")
	rewriteWith(t, prog, kpd, []string{"p:t/w work a=%di:s32"})
	return kpd, kpd + ".trace"
}

// runIt runs the rewritten program (exit 0 wanted) with extra environment entries and
// returns its stderr.
func runIt(t *testing.T, kpd string, env []string, args ...string) string {
	t.Helper()
	r := testprog.Run(t, testprog.Cmd{Path: kpd, Args: args, Extra: env})
	if r.Exit != 0 {
		t.Fatalf("%s %s: %s", kpd, strings.Join(args, " "), r)
	}
	return r.Stderr
}

// workArgs returns the a= values of the trace's records, in order, by pid.
func workArgs(t *testing.T, trace, kpd string) map[int][]string {
	t.Helper()
	by := map[int][]string{}
	for _, l := range readTrace(t, trace, kpd) {
		by[l.PID] = append(by[l.PID], strings.TrimSpace(l.Args))
	}
	return by
}

// TestDirectRunsStartNewTrace: a rewritten program run twice directly leaves the second
// run's records in its trace and the first run's in FILE.old (perf record's rule), and
// says where the trace goes once per run; KPREWRITE_APPEND=1 adds a run to the trace.
func TestDirectRunsStartNewTrace(t *testing.T) {
	kpd, trace := runProg(t)
	loud := []string{"KPREWRITE_QUIET=0"}
	first := runIt(t, kpd, loud, "4")
	if want := "kprewrite: tracing into " + trace + "\n"; first != want {
		t.Errorf("first run's stderr %q, want %q", first, want)
	}
	second := runIt(t, kpd, loud, "2")
	if want := "kprewrite: tracing into " + trace + " (the previous trace is " + trace + ".old)\n"; second != want {
		t.Errorf("second run's stderr %q, want %q", second, want)
	}
	one := func(file string, want ...string) {
		t.Helper()
		by := workArgs(t, file, kpd)
		if len(by) != 1 {
			t.Fatalf("%s: records of %d processes, want 1: %v", file, len(by), by)
		}
		for _, got := range by {
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("%s: records %q, want %q", file, got, want)
			}
		}
	}
	one(trace, "a=0", "a=1")
	one(trace+".old", "a=0", "a=1", "a=2", "a=3")

	if e := runIt(t, kpd, []string{"KPREWRITE_QUIET=0", "KPREWRITE_APPEND=1"}, "1"); e != "kprewrite: appending this run's trace to "+trace+"\n" {
		t.Errorf("appending run's stderr %q", e)
	}
	if n := len(readTrace(t, trace, kpd)); n != 3 {
		t.Errorf("after an appending run: %d records, want 2 + 1", n)
	}
	one(trace+".old", "a=0", "a=1", "a=2", "a=3") // untouched

	if e := runIt(t, kpd, []string{"KPREWRITE_QUIET=1"}, "1"); e != "" {
		t.Errorf("quiet run's stderr %q, want none", e)
	}
	one(trace, "a=0")
}

// TestForkExecChildJoinsRun: a child that the run's program forks and that execs a
// rewritten program writes into the run's trace: it neither moves the file to .old nor
// says anything.
func TestForkExecChildJoinsRun(t *testing.T) {
	kpd, trace := runProg(t)
	runIt(t, kpd, nil, "2") // a previous run: the next one moves it to .old
	e := runIt(t, kpd, []string{"KPREWRITE_QUIET=0"}, "2", "fork")
	if n := strings.Count(e, "kprewrite: "); n != 1 {
		t.Errorf("stderr %q: %d kprewrite lines, want 1 (the run's parent's)", e, n)
	}
	by := workArgs(t, trace, kpd)
	if len(by) != 2 {
		t.Fatalf("records of %d processes, want the parent's and the child's: %v", len(by), by)
	}
	var got []string
	for _, a := range by {
		got = append(got, strings.Join(a, " "))
	}
	if !(got[0] == "a=0 a=1" && got[1] == "a=0 a=1 a=2") && !(got[1] == "a=0 a=1" && got[0] == "a=0 a=1 a=2") {
		t.Errorf("records %q, want the parent's 2 and the child's 3", got)
	}
	if n := len(readTrace(t, trace+".old", kpd)); n != 2 {
		t.Errorf("%s.old: %d records, want the previous run's 2", trace, n)
	}
}

// TestSmallTraceSmallFile: a trace of 10 records takes at most 1 MiB of disk (the file
// is sparse: its 64 MiB record area is given blocks as records reach it; it took all
// 64 MiB before).
func TestSmallTraceSmallFile(t *testing.T) {
	kpd, trace := runProg(t)
	runIt(t, kpd, nil, "10")
	if n := len(readTrace(t, trace, kpd)); n != 10 {
		t.Fatalf("%d records, want 10", n)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(trace, &st); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(trace)
	if disk := st.Blocks * 512; disk > 1<<20 {
		t.Errorf("%s: %d bytes on disk (size %d), want at most 1 MiB", trace, disk, fi.Size())
	} else {
		t.Logf("%d bytes on disk, size %d", disk, fi.Size())
	}
}

// TestRunStartTimeDecidesAncestry: a process joins the run of the trace whose header
// names an ancestor by pid and start time, not by pid alone (a pid the kernel reused for
// an unrelated process must not claim the file). The header's run is set to this test
// process (an ancestor of the next run) with its real start time, then with another.
func TestRunStartTimeDecidesAncestry(t *testing.T) {
	kpd, trace := runProg(t)
	runIt(t, kpd, nil, "2")
	setRun := func(start uint64) {
		t.Helper()
		f, err := os.OpenFile(trace, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var h kprt.RawTraceHeader
		b := make([]byte, 8)
		binary.LittleEndian.PutUint32(b, uint32(os.Getpid()))
		if _, err := f.WriteAt(b[:4], int64(unsafe.Offsetof(h.RunPID))); err != nil {
			t.Fatal(err)
		}
		binary.LittleEndian.PutUint64(b, start)
		if _, err := f.WriteAt(b, int64(unsafe.Offsetof(h.RunStart))); err != nil {
			t.Fatal(err)
		}
	}
	self := procStartTime(t)
	if self == 0 {
		t.Fatal("this process's start time reads 0")
	}
	setRun(self) // an ancestor's run: the next process joins it
	runIt(t, kpd, nil, "3")
	if _, err := os.Stat(trace + ".old"); err == nil {
		t.Fatalf("a run of an ancestor (pid and start time) was moved to .old")
	}
	if n := len(readTrace(t, trace, kpd)); n != 2+3 {
		t.Fatalf("joined run: %d records, want 2 + 3", n)
	}
	setRun(self + 1) // the same pid, another process: a new run
	runIt(t, kpd, nil, "1")
	if n := len(readTrace(t, trace+".old", kpd)); n != 5 {
		t.Errorf("%s.old: %d records, want the 5 of the run a reused pid named", trace, n)
	}
	if n := len(readTrace(t, trace, kpd)); n != 1 {
		t.Errorf("new run: %d records, want 1", n)
	}
}

// procStartTime is this process's start time, /proc/self/stat's field 22.
func procStartTime(t *testing.T) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]) // f[0] is field 3
	v, err := strconv.ParseUint(f[22-3], 10, 64)
	if err != nil {
		t.Fatalf("/proc/self/stat: %v", err)
	}
	return v
}

// exitSrc calls work() argv[1] times (default 1000) and ends with the thread-only exit
// system call (status 3), as a program whose threads all end that way does: glibc's
// exit is never called.
const exitSrc = `#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/syscall.h>

__attribute__((noinline)) long work(long a) { return a * 2 + 1; }

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000, s = 0;
	for (long i = 0; i < n; i++)
		s += work(i);
	printf("%ld\n", s);
	fflush(stdout);
	syscall(SYS_exit, 3);
	return 1;
}
`

// TestRuntimeThreadsEndWithTheProgram: when the program's threads have all ended with
// SYS_exit, the runtime's own threads (the one readying a direct trace file, the
// live-probe thread) end too and the process exits with the program's status; they
// kept it alive for ever before (its leader a zombie, a SIGTERM blocked). "burst"
// records 100,000 events directly, so the readying thread runs when the program ends
// and ends last.
func TestRuntimeThreadsEndWithTheProgram(t *testing.T) {
	prog := testprog.Build(t, exitSrc, "c", "-O1")
	for _, c := range []struct {
		name string
		defs []string
		n    int
	}{{"event", []string{"p:t/w work a=%di:s32"}, 1000}, {"burst", []string{"p:t/w work a=%di:s32"}, 100000}, {"prepared", nil, 1000}} {
		t.Run(c.name, func(t *testing.T) {
			kpd := filepath.Join(t.TempDir(), "prog.kp")
			var flags []string
			if c.defs == nil {
				flags = []string{"--prepare", "work"}
			}
			rewriteWith(t, prog, kpd, c.defs, flags...)
			r := testprog.Run(t, testprog.Cmd{Path: kpd, Args: []string{strconv.Itoa(c.n)}, Timeout: time.Minute})
			if want := strconv.Itoa(c.n*c.n) + "\n"; r.TimedOut || r.Exit != 3 || r.Stdout != want {
				t.Fatalf("%s: %s, want exit 3 and %q", kpd, r, want)
			}
		})
	}
}

// TestRotationKeepsNonRegularOld: a FILE.old that is not a regular file (a FIFO here)
// is never written over: the new run is appended to the trace, saying why, and the FIFO
// stays.
func TestRotationKeepsNonRegularOld(t *testing.T) {
	kpd, trace := runProg(t)
	runIt(t, kpd, nil, "2")
	if err := syscall.Mkfifo(trace+".old", 0o600); err != nil {
		t.Fatal(err)
	}
	e := runIt(t, kpd, []string{"KPREWRITE_QUIET=0"}, "3")
	if !strings.Contains(e, "cannot keep the previous trace as FILE.old (it exists and is not a regular file)") {
		t.Errorf("stderr %q, want the reason the run is appended", e)
	}
	if fi, err := os.Lstat(trace + ".old"); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("%s.old: %v %v, want the FIFO kept", trace, fi, err)
	}
	if n := len(readTrace(t, trace, kpd)); n != 2+3 {
		t.Errorf("%d records, want both runs' 2 + 3", n)
	}
}
