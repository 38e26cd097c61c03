package tests

import (
	"encoding/binary"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/kprewrite/kprewrite"
	"github.com/kprewrite/kprewrite/internal/tracefile"
	kprt "github.com/kprewrite/kprewrite/runtime"
	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// clockIDs are the trace header's values of rewrite --clock's names.
var clockIDs = map[string]uint32{"tsc": kprt.ClockTSC, "mono": kprt.ClockMono, "counter": kprt.ClockCounter}

const clockN, clockThreads = 20000, 3

// TestClocks: each record clock (rewrite --clock; record --clock and KPREWRITE_CLOCK
// on a program rewritten with the default) recorded by recordSrc's threads directly and
// under record, and read back: every call's record once, each thread's times
// non-decreasing in call order (counter: strictly increasing, and no value twice in
// the whole trace), tsc's and mono's within the run's CLOCK_MONOTONIC bounds; trace
// names the clock (and prints counts, not seconds, under counter), report names a clock
// other than tsc and prints no times under counter.
func TestClocks(t *testing.T) {
	testprog.Need(t, "gcc")
	prog := testprog.Build(t, recordSrc, "c", "-O2", "-pthread")
	dir := t.TempDir()
	rewritten := map[string]string{}
	for c := range clockIDs {
		rewritten[c] = filepath.Join(dir, "clk."+c)
		rewriteWith(t, prog, rewritten[c], []string{recordDef}, "--clock", c, "--calls", "run")
	}
	args := []string{strconv.Itoa(clockN), strconv.Itoa(clockThreads)}
	for c := range clockIDs {
		t.Run(c, func(t *testing.T) {
			direct := filepath.Join(dir, c+".direct.trace")
			start := monoNs()
			r := testprog.Run(t, testprog.Cmd{Path: rewritten[c], Args: args, Env: []string{"KPREWRITE_TRACE=" + direct, "KPREWRITE_QUIET=1"}})
			if r.Exit != 7 {
				t.Fatal(r)
			}
			checkClockTrace(t, direct, rewritten[c], c, start, monoNs())
			runs := map[string][]string{"record": {rewritten[c]}, "record --clock": {"--clock", c, rewritten["tsc"]}}
			for name, run := range runs {
				file := filepath.Join(dir, c+"."+strings.ReplaceAll(name, " ", "")+".trace")
				start := monoNs()
				if code, _, stderr := kp(append(append([]string{"record", "-q", "-o", file}, run...), args...)...); code != 7 || stderr != "" {
					t.Fatalf("%s: exit %d: %s", name, code, stderr)
				}
				checkClockTrace(t, file, run[len(run)-1], c, start, monoNs())
			}
		})
	}
	// an unknown clock is a usage error naming it, and no file
	out := filepath.Join(dir, "bad")
	if code, _, stderr := kp("rewrite", "--clock", "jiffies", "-o", out, "-e", recordDef, prog); code != 2 || !strings.Contains(stderr, "--clock jiffies") {
		t.Errorf("rewrite --clock jiffies: exit %d: %s", code, stderr)
	}
	if _, err := syscall.Open(out, syscall.O_RDONLY, 0); err == nil {
		t.Error("rewrite --clock jiffies wrote its output")
	}
}

// checkClockTrace checks the trace file of recordSrc's run under clock (see TestClocks);
// [start, end] bounds the run in CLOCK_MONOTONIC.
func checkClockTrace(t *testing.T, file, bin, clock string, start, end uint64) {
	t.Helper()
	s, _, err := tracefile.OpenStream(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Header.Clock != clockIDs[clock] {
		t.Errorf("%s: header clock %d, want %d (%s)", file, s.Header.Clock, clockIDs[clock], clock)
	}
	times := map[uint64][]uint64{} // thread (its work's a) -> time of call b
	seen := map[uint64]bool{}
	err = s.Each(func(r *tracefile.Record) error {
		if clock == "counter" {
			if seen[r.TsNs] || r.TsNs == 0 {
				t.Fatalf("%s: counter value %d twice (or 0)", file, r.TsNs)
			}
			seen[r.TsNs] = true
		} else if r.TsNs < start || r.TsNs > end {
			t.Fatalf("%s: time %d outside the run's [%d, %d]", file, r.TsNs, start, end)
		}
		if len(r.Data) != 16 { // (calls/run's records)
			return nil
		}
		a, b := binary.LittleEndian.Uint64(r.Data), binary.LittleEndian.Uint64(r.Data[8:])
		if times[a] == nil {
			times[a] = make([]uint64, clockN)
		}
		if b >= clockN || times[a][b] != 0 {
			t.Fatalf("%s: thread %d's call %d: out of range or twice", file, a, b)
		}
		times[a][b] = r.TsNs
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(times) != clockThreads {
		t.Fatalf("%s: records of %d threads, want %d", file, len(times), clockThreads)
	}
	for a, ts := range times {
		for b := 1; b < clockN; b++ {
			if ts[b] == 0 || ts[b] < ts[b-1] || clock == "counter" && ts[b] == ts[b-1] {
				t.Fatalf("%s: thread %d: call %d at %d after call %d at %d (0: no record)", file, a, b, ts[b], b-1, ts[b-1])
			}
		}
	}
	if tr, err := kprewrite.EachRecord(file, func(*kprewrite.Record) error { return nil }, bin); err != nil {
		t.Error(err)
	} else if tr.Clock != clock {
		t.Errorf("%s: the API's Trace.Clock %q, want %s", file, tr.Clock, clock)
	}
	checkClockOutputs(t, file, bin, clock)
}

// checkClockOutputs checks that trace and report say the clock.
func checkClockOutputs(t *testing.T, file, bin, clock string) {
	t.Helper()
	code, out, stderr := kp("trace", "-b", bin, file)
	stamp := `\d+\.\d{6}`
	if clock == "counter" {
		stamp = `\d+`
	}
	line := regexp.MustCompile(`(?m)^\s*\S+-\d+\s+\[\d+\]\s+` + stamp + `: w: `)
	if code != 0 || !strings.Contains(out, "\n# clock: "+clock+"\n") || !line.MatchString(out) {
		t.Errorf("trace %s: exit %d, no '# clock: %s' or no w line with a time like %s: %.600s%s", file, code, clock, stamp, out, stderr)
	}
	code, rep, stderr := kp("report", "-b", bin, file)
	calls := regexp.MustCompile(`(?m)^.*\s` + strconv.Itoa(clockThreads) + `\s+.*\srun$`)
	if code != 0 || !calls.MatchString(rep) {
		t.Fatalf("report %s: exit %d, no line of %d calls of run: %s%s", file, code, clockThreads, rep, stderr)
	}
	hasTimes := regexp.MustCompile(`\d +(ns|us|ms|s) `).MatchString(rep)
	switch clock {
	case "tsc":
		if strings.Contains(rep, "# clock") || !hasTimes {
			t.Errorf("report %s (tsc): a clock line or no times:\n%s", file, rep)
		}
	case "mono":
		if !strings.HasPrefix(rep, "# clock: mono\n") || !hasTimes {
			t.Errorf("report %s: want '# clock: mono' and times:\n%s", file, rep)
		}
	case "counter":
		if !strings.HasPrefix(rep, "# clock: counter:") || hasTimes {
			t.Errorf("report %s: want '# clock: counter' and no times:\n%s", file, rep)
		}
	}
}

// monoNs is CLOCK_MONOTONIC now.
func monoNs() uint64 {
	var ts syscall.Timespec
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 1 /* CLOCK_MONOTONIC */, uintptr(unsafe.Pointer(&ts)), 0)
	return uint64(ts.Sec)*1e9 + uint64(ts.Nsec)
}
