package tests

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// events is the trace's records as "wa=N"/"oa=N" words (phasedSrc's events)
func events(t *testing.T, tr, bin string) string {
	var got []string
	for _, l := range readTrace(t, tr, bin) {
		got = append(got, l.Event+strings.TrimSpace(l.Args))
	}
	return strings.Join(got, " ")
}

// runPhased runs phasedSrc's rewritten program, running steps[phase] (kprewrite
// commands) after each phase it reports
func runPhased(t *testing.T, bin string, env []string, steps [][][]string) {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), env...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := bufio.NewScanner(out)
	for phase := 0; phase < 4; phase++ {
		if !lines.Scan() || lines.Text() != fmt.Sprintf("phase %d", phase) {
			t.Fatalf("phase %d: program said %q", phase, lines.Text())
		}
		if phase < len(steps) {
			for _, s := range steps[phase] {
				if code, o, e := kp(s...); code != 0 {
					t.Fatalf("kprewrite %v: exit %d\n%s%s", s, code, o, e)
				}
			}
		}
		stdin.Write([]byte{'x'})
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err, stderr.String())
	}
	if stderr.Len() > 0 {
		t.Errorf("the program's stderr: %s", stderr.String())
	}
}

// TestRunTimeFilterTrigger: kprewrite filter and trigger change a running program's
// filters and triggers between its phases (a rewrite's filter replaced and removed, a
// filter added, triggers added and removed, with counts and conditions), the next run
// of the same trace file starts with them, and a KPREWRITE_CONTROL file made by
// kprewrite control gives a fresh trace file its filters, triggers and switches.
func TestRunTimeFilterTrigger(t *testing.T) {
	t.Setenv("KPREWRITE_APPEND", "1") // later runs add to the first run's trace
	prog := testprog.Build(t, phasedSrc, "c", "-O2")
	for _, mode := range []string{"int3", "optimize"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			kpd := filepath.Join(dir, "phased")
			flags := []string{"--filter", "ctl/w:a < 5"}
			if mode == "int3" {
				flags = append(flags, "--no-optimize")
			}
			rewriteWith(t, prog, kpd, []string{"p:ctl/w work a=%di:s32", "p:ctl/o other a=%di:s32"}, flags...)
			tr := kpd + ".trace"
			runPhased(t, kpd, nil, [][][]string{
				{{"filter", tr, "ctl/w", "a >= 105"}, {"trigger", tr, "ctl/o", "disable_event:ctl:w:1 if a == 107"}},
				{{"filter", tr, "o", "a & 1"}, {"trigger", tr, "ctl/o", "!disable_event:ctl:w"}, {"enable", tr, "ctl/w"}},
				{{"filter", tr, "ctl/w", "0"}, {"trigger", tr, "w", "traceoff:1 if a == 304"}},
			})
			var want []string
			for i := 0; i < 10; i++ { // phase 0: the rewrite's filter on w
				if i < 5 {
					want = append(want, fmt.Sprintf("wa=%d", i))
				}
				want = append(want, fmt.Sprintf("oa=%d", i))
			}
			for i := 100; i < 110; i++ { // phase 1: w >= 105 until o(107) disables it
				if i >= 105 && i <= 107 {
					want = append(want, fmt.Sprintf("wa=%d", i))
				}
				want = append(want, fmt.Sprintf("oa=%d", i))
			}
			for i := 200; i < 210; i++ { // phase 2: w enabled again, o odd
				want = append(want, fmt.Sprintf("wa=%d", i))
				if i%2 == 1 {
					want = append(want, fmt.Sprintf("oa=%d", i))
				}
			}
			for i := 300; i <= 304; i++ { // phase 3: w unfiltered until traceoff at 304
				want = append(want, fmt.Sprintf("wa=%d", i))
				if i%2 == 1 && i < 304 {
					want = append(want, fmt.Sprintf("oa=%d", i))
				}
			}
			if got := events(t, tr, kpd); got != strings.Join(want, " ") {
				t.Errorf("records\n%s\nwant\n%s", got, strings.Join(want, " "))
			}
			if hits := profile(t, tr, kpd); hits["w"][0] != 40 || hits["o"][0] != 40 {
				t.Errorf("hits w %d o %d, want 40 each", hits["w"][0], hits["o"][0])
			}
			// what the filter and trigger files say now
			if code, o, e := kp("filter", tr, "all"); code != 0 || o != "ctl/w (prog): none\nctl/o (prog): a & 1\n" {
				t.Errorf("filter FILE all: exit %d\n%s%s", code, o, e)
			}
			// (the kernel's trigger file lists the fires a trigger has left: it fired once)
			if code, o, e := kp("trigger", tr, "ctl/w"); code != 0 || o != "ctl/w (prog):\ntraceoff:count=0 if a == 304\n" {
				t.Errorf("trigger FILE ctl/w: exit %d\n%s%s", code, o, e)
			}

			// the next run of the file starts with them (the traceoff's count is spent)
			if code, o, e := kp("traceon", tr); code != 0 {
				t.Fatalf("traceon: %d %s%s", code, o, e)
			}
			before := len(readTrace(t, tr, kpd))
			if res := testprog.Run(t, testprog.Cmd{Path: kpd, Stdin: "xxxx"}); res.Exit != 0 || res.Stderr != "" {
				t.Fatal(res)
			}
			var second []string
			for phase := 0; phase < 4; phase++ {
				for i := phase * 100; i < phase*100+10; i++ {
					second = append(second, fmt.Sprintf("wa=%d", i))
					if i%2 == 1 {
						second = append(second, fmt.Sprintf("oa=%d", i))
					}
				}
			}
			all := strings.Fields(events(t, tr, kpd))
			if got := strings.Join(all[before:], " "); got != strings.Join(second, " ") {
				t.Errorf("second run's records\n%s\nwant\n%s", got, strings.Join(second, " "))
			}

			// refused changes change nothing
			for _, c := range []struct {
				args []string
				msg  string
			}{
				{[]string{"filter", tr, "ctl/w", "b > 1"}, "filter of ctl/w: Field not found"},
				{[]string{"filter", tr, "ctl/w", "a >"}, "Invalid value"},
				{[]string{"trigger", tr, "ctl/w", "traceoff"}, "EEXIST"},
				{[]string{"trigger", tr, "ctl/w", "hist:keys=a:v=a"}, "histogram variables are linked"},
				{[]string{"trigger", tr, "ctl/w", "stacktrace"}, "no unwind table"},
				{[]string{"trigger", tr, "ctl/w", "enable_event:ctl:nosuch"}, "nosuch"},
				{[]string{"filter", tr, "nosuch", "a > 1"}, "no event nosuch"},
				{[]string{"filter", kpd, "ctl/w", "a > 1"}, "not a kprewrite trace file"},
			} {
				code, o, e := kp(c.args...)
				if code == 0 || !strings.Contains(e, c.msg) {
					t.Errorf("kprewrite %q: exit %d, want an error saying %q\n%s%s", c.args, code, c.msg, o, e)
				}
			}
			if code, o, _ := kp("filter", tr, "all"); code != 0 || o != "ctl/w (prog): none\nctl/o (prog): a & 1\n" {
				t.Errorf("after refused changes: %s", o)
			}

			// KPREWRITE_CONTROL: a fresh trace file starts with the control file's
			ctl := filepath.Join(dir, "run.ctl")
			if code, o, e := kp("control", "-o", ctl, "--filter", "ctl/w:a == 3 || a == 203", "--trigger", "ctl/o:traceoff:1 if a == 205",
				"--disable", "ctl/o", kpd); code != 0 {
				t.Fatalf("control: exit %d\n%s%s", code, o, e)
			}
			os.Remove(tr)
			if res := testprog.Run(t, testprog.Cmd{Path: kpd, Stdin: "xxxx", Extra: []string{"KPREWRITE_CONTROL=" + ctl}}); res.Exit != 0 || res.Stderr != "" {
				t.Fatal(res)
			}
			if got := events(t, tr, kpd); got != "wa=3 wa=203" {
				t.Errorf("with KPREWRITE_CONTROL: %q, want %q", got, "wa=3 wa=203")
			}
			// the same file another build was not made for is ignored, said on stderr
			other := filepath.Join(dir, "other")
			rewriteWith(t, prog, other, []string{"p:ctl/w work a=%di:s64"}, flags...)
			res := testprog.Run(t, testprog.Cmd{Path: other, Stdin: "xxxx", Extra: []string{"KPREWRITE_CONTROL=" + ctl}})
			if res.Exit != 0 || !strings.Contains(res.Stderr, "has no controls for this program") {
				t.Errorf("another build with the control file: %+v", res)
			}
		})
	}
}

// TestRunTimeHist: hist triggers added to a running program's events with kprewrite
// trigger (a table placed in the trace file's counters area), made paused and
// continued, cleared and removed by writing the kernel's forms; a rewrite's histogram
// kept while the event's triggers change; a KPREWRITE_CONTROL file's histogram
// installed once for every run of the same trace file; what cannot be added at run
// time refused with the reason.
func TestRunTimeHist(t *testing.T) {
	t.Setenv("KPREWRITE_APPEND", "1") // later runs add to the first run's trace
	prog := testprog.Build(t, phasedSrc, "c", "-O2")
	for _, mode := range []string{"int3", "optimize"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			kpd := filepath.Join(dir, "phased")
			flags := []string{"--trigger", "ctl/o:hist:keys=a.log2"}
			if mode == "int3" {
				flags = append(flags, "--no-optimize")
			}
			rewriteWith(t, prog, kpd, []string{"p:ctl/w work a=%di:s32", "p:ctl/o other a=%di:s32"}, flags...)
			tr := kpd + ".trace"
			runPhased(t, kpd, nil, [][][]string{
				{{"trigger", tr, "ctl/w", "hist:keys=a:vals=hitcount"}, {"trigger", tr, "ctl/o", "hist:keys=common_pid:vals=a:pause"}},
				{{"trigger", tr, "ctl/o", "hist:keys=common_pid:vals=a:cont"}, {"trigger", tr, "ctl/o", "traceoff:1 if a == 1000"}},
				{{"trigger", tr, "ctl/w", "hist:keys=a:vals=hitcount:clear"}, {"trigger", tr, "ctl/o", "!traceoff"}},
			})
			bs := histOf(t, tr)
			// w's: added after phase 0, cleared after phase 2: phase 3's calls
			want := map[string]uint64{}
			for i := 300; i < 310; i++ {
				want[fmt.Sprintf("a: %d", i)] = 1
			}
			checkCounts(t, findHist(t, bs, "hist:keys=a:vals=hitcount:sort=hitcount:size=2048 [active]"), want, 10)
			// o's own: paused through phase 1, continued for phases 2 and 3
			pid := findHist(t, bs, "hist:keys=common_pid:vals=hitcount,a:sort=hitcount:size=2048 [active]")
			if len(pid.Entries) != 1 || pid.Hits != 20 {
				t.Errorf("o's pid histogram: %v, %d hits; want one pid, 20 hits", pid.Entries, pid.Hits)
			}
			for _, v := range pid.Entries {
				if len(v) != 2 || v[1] != 2045+3045 {
					t.Errorf("o's pid histogram: values %v, want a summing to %d", v, 2045+3045)
				}
			}
			// the rewrite's, kept through every change: all 40 calls
			if b := findHist(t, bs, "hist:keys=a.log2:vals=hitcount"); b.Hits != 40 {
				t.Errorf("the rewrite's histogram: %d hits, want 40", b.Hits)
			}
			if code, o, e := kp("trigger", tr, "ctl/o"); code != 0 || o != "ctl/o (prog):\nhist:keys=common_pid:vals=hitcount,a:sort=hitcount:size=2048 [active]\nhist:keys=a.log2:vals=hitcount:sort=hitcount:size=2048 [active]\n" {
				t.Errorf("trigger FILE ctl/o: exit %d\n%s%s", code, o, e)
			}
			// the next run adds to the same tables; removing one drops it
			if res := testprog.Run(t, testprog.Cmd{Path: kpd, Stdin: "xxxx"}); res.Exit != 0 || res.Stderr != "" {
				t.Fatal(res)
			}
			if b := findHist(t, histOf(t, tr), "hist:keys=common_pid"); b.Hits != 60 || len(b.Entries) != 2 {
				t.Errorf("after a second run: %d hits in %d entries, want 60 in 2 (two pids)", b.Hits, len(b.Entries))
			}
			if code, _, e := kp("trigger", tr, "ctl/w", "!hist:keys=a:vals=hitcount"); code != 0 {
				t.Fatalf("removing w's histogram: %s", e)
			}
			if code, o, _ := kp("hist", "--event", "ctl/w", tr); code == 0 {
				t.Errorf("w's histogram still listed after it was removed:\n%s", o)
			}

			for _, c := range []struct {
				text, msg string
			}{
				{"hist:keys=a:v=a", "histogram variables are linked"},
				{"hist:keys=a:onmatch(ctl.w).trace(foo,$a)", "actions (onmatch, onmax, onchange) are linked"},
				{"hist:name=shared:keys=a", "named histogram"},
				{"hist:keys=stacktrace", "no unwind table"},
				{"hist:keys=a.log2", "Hist trigger already exists"},
				{"hist:keys=a:size=131072", "smaller size"},
				{"hist:keys=nosuch", "nosuch"},
				{"hist:keys=a:vals=hitcount:cont", "nonexistent hist trigger"},
			} {
				code, o, e := kp("trigger", tr, "ctl/o", c.text)
				if code == 0 || !strings.Contains(e, c.msg) {
					t.Errorf("kprewrite trigger ctl/o %q: exit %d, want an error saying %q\n%s%s", c.text, code, c.msg, o, e)
				}
			}

			// KPREWRITE_CONTROL: placed by the first run, added to by the second
			ctl := filepath.Join(dir, "run.ctl")
			if code, o, e := kp("control", "-o", ctl, "--trigger", "ctl/w:hist:keys=a.buckets=100:vals=a", "--trigger", "ctl/o:hist:keys=common_pid:pause", kpd); code != 0 {
				t.Fatalf("control: exit %d\n%s%s", code, o, e)
			}
			if code, _, e := kp("control", "-o", ctl+"2", "--trigger", "ctl/o:hist:keys=a.log2:clear", kpd); code == 0 || !strings.Contains(e, "a trace file holds") {
				t.Errorf("control with :clear of the rewrite's histogram: exit %d %s", code, e)
			}
			os.Remove(tr)
			for run := 0; run < 2; run++ {
				if res := testprog.Run(t, testprog.Cmd{Path: kpd, Stdin: "xxxx", Extra: []string{"KPREWRITE_CONTROL=" + ctl}}); res.Exit != 0 || res.Stderr != "" {
					t.Fatal(res)
				}
			}
			bs = histOf(t, tr)
			want = map[string]uint64{}
			for ph := 0; ph < 4; ph++ {
				want[fmt.Sprintf("a: ~ %d-%d", ph*100, ph*100+99)] = 20
			}
			b := findHist(t, bs, "hist:keys=a.buckets=100:vals=hitcount,a:sort=hitcount:size=2048 [active]")
			checkCounts(t, b, want, 80)
			if v := b.Entries["a: ~ 300-399"]; len(v) != 2 || v[1] != 2*3045 {
				t.Errorf("w's buckets histogram, 300-399: %v, want a summing to %d", v, 2*3045)
			}
			if b := findHist(t, bs, "hist:keys=common_pid:vals=hitcount:sort=hitcount:size=2048 [paused]"); b.Hits != 0 {
				t.Errorf("a histogram made paused counted %d hits", b.Hits)
			}
			if b := findHist(t, bs, "hist:keys=a.log2"); b.Hits != 80 {
				t.Errorf("the rewrite's histogram beside the control file's: %d hits, want 80", b.Hits)
			}
		})
	}
}

const spinSrc = `
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
static volatile int stop;
__attribute__((noinline)) int work(int a) { __asm__ volatile(""); return a + 1; }
static void *spin(void *arg)
{
	long s = 0, i = (long)arg;
	while (!stop)
		s += work((int)(i++ % 5000));
	return (void *)s;
}
int main(void)
{
	pthread_t t[2];
	char c;
	for (long k = 0; k < 2; k++)
		pthread_create(&t[k], 0, spin, (void *)(k * 7));
	printf("spinning\n");
	fflush(stdout);
	while (read(0, &c, 1) == 1)
		;
	stop = 1;
	for (int k = 0; k < 2; k++)
		pthread_join(t[k], 0);
	return 0;
}
`

// TestRunTimeFilterUnderLoad: filters and triggers changed 40 times while two threads
// hit the event as fast as they can: the program runs on unharmed, and every record
// it wrote passes one of the filters it was given (none is judged by a half-made one).
// Both filters keep a handful of the 5000 values a thread goes round, so the trace
// file does not fill before the second filter is in force however fast the refused
// hits are (an inline filter refuses a hit in a few nanoseconds).
func TestRunTimeFilterUnderLoad(t *testing.T) {
	prog := testprog.Build(t, spinSrc, "c", "-O2", "-pthread")
	for _, mode := range []string{"int3", "optimize"} {
		t.Run(mode, func(t *testing.T) {
			kpd := filepath.Join(t.TempDir(), "spin")
			flags := []string{"--filter", "ctl/w:a < 4"}
			if mode == "int3" {
				flags = append(flags, "--no-optimize")
			}
			rewriteWith(t, prog, kpd, []string{"p:ctl/w work a=%di:s32"}, flags...)
			tr := kpd + ".trace"
			cmd := exec.Command(kpd)
			cmd.Env = append(os.Environ(), "KPREWRITE_TRACE_SIZE=8M")
			stdin, _ := cmd.StdinPipe()
			out, _ := cmd.StdoutPipe()
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			if l := bufio.NewScanner(out); !l.Scan() || l.Text() != "spinning" {
				t.Fatal("the program did not start")
			}
			steps := [][]string{
				{"filter", tr, "ctl/w", "a & 1 && a > 4990"},
				{"trigger", tr, "ctl/w", "enable_event:ctl:w if a == 5"},
				{"filter", tr, "ctl/w", "a < 4"},
				{"trigger", tr, "ctl/w", "!enable_event:ctl:w"},
			}
			for k := 0; k < 40; k++ {
				s := steps[k%len(steps)]
				before := profile(t, tr, kpd)["w"][0]
				if code, o, e := kp(s...); code != 0 {
					t.Fatalf("kprewrite %v: exit %d\n%s%s", s, code, o, e)
				}
				// the first time each filter is in force: hits enough for each thread's
				// values to go round (5000 of them), so both filters see some of theirs
				for k < len(steps) && s[0] == "filter" && profile(t, tr, kpd)["w"][0] < before+12000 {
					time.Sleep(2 * time.Millisecond)
				}
			}
			stdin.Close()
			if err := cmd.Wait(); err != nil || stderr.Len() > 0 {
				t.Fatalf("the program: %v %s", err, stderr.String())
			}
			recs := readTrace(t, tr, kpd)
			if len(recs) == 0 {
				t.Fatal("no records")
			}
			odd, low := 0, 0
			for _, r := range recs {
				var a int
				if _, err := fmt.Sscanf(strings.TrimSpace(r.Args), "a=%d", &a); err != nil || (a >= 4 && (a%2 == 0 || a <= 4990)) {
					t.Fatalf("record %q passes neither filter", r.Args)
				}
				if a > 4990 {
					odd++
				} else if a%2 == 0 {
					low++
				}
			}
			// both filters were in force at some time
			if odd == 0 || low == 0 {
				t.Errorf("%d records: %d odd over 4990, %d even under 4: want some of each", len(recs), odd, low)
			}
			t.Logf("%d records: %d odd over 4990, %d even under 4", len(recs), odd, low)
		})
	}
}

// TestRunTimeHistLibrary: a histogram added while python3.11 runs, on the C library's
// malloc that the rewrite probes in its copy of libc.so.6 (a library image's control
// area and the trace file's counters area after it): it holds exactly the calls made
// after it was added, as the records of the same calls say.
func TestRunTimeHistLibrary(t *testing.T) {
	bin := realBin(t, "python3.11")
	dir := t.TempDir()
	kpd := filepath.Join(dir, "py")
	rewriteWith(t, bin, kpd, []string{"p:libc/malloc libc.so.6:malloc size=%di:u64"})
	tr := kpd + ".trace"
	// bytearray(n) takes n+1 bytes from malloc past Python's small-object sizes
	script := `import sys
print("ready", flush=True)
sys.stdin.readline()
keep = [bytearray(100000 + i) for i in range(50)]
print("done", len(keep), flush=True)
`
	cmd := exec.Command(kpd, "-c", script)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := bufio.NewScanner(out)
	if !lines.Scan() || lines.Text() != "ready" {
		t.Fatalf("python said %q", lines.Text())
	}
	if code, o, e := kp("trigger", tr, "libc/malloc", "hist:keys=size if size > 100000 && size <= 100050"); code != 0 {
		t.Fatalf("trigger: exit %d\n%s%s", code, o, e)
	}
	stdin.Write([]byte("go\n"))
	if !lines.Scan() || lines.Text() != "done 50" {
		t.Fatalf("python said %q", lines.Text())
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{}
	var n uint64
	for _, l := range readTrace(t, tr) { // (the descriptions are the file's)
		var size uint64
		if _, err := fmt.Sscanf(strings.TrimSpace(l.Args), "size=%d", &size); err == nil && size > 100000 && size <= 100050 {
			want[fmt.Sprintf("size: %d", size)]++
			n++
		}
	}
	if n < 50 {
		t.Fatalf("%d records of malloc in the range, want at least the 50 bytearrays", n)
	}
	checkCounts(t, findHist(t, histOf(t, tr), "hist:keys=size:vals=hitcount:sort=hitcount:size=2048 if size > 100000 && size <= 100050"), want, n)
}

// TestRunTimeHistUnderLoad: histograms added, cleared, paused and removed 30 times
// while two threads hit a switched-off event as fast as they can (its histograms are
// then updated on the hist-only path): the program runs on unharmed; the rewrite's
// histogram, kept through every change, counts every hit the event's counter counts;
// the histograms left hold well-formed entries, no drop.
func TestRunTimeHistUnderLoad(t *testing.T) {
	prog := testprog.Build(t, spinSrc, "c", "-O2", "-pthread")
	for _, mode := range []string{"int3", "optimize"} {
		t.Run(mode, func(t *testing.T) {
			kpd := filepath.Join(t.TempDir(), "spin")
			flags := []string{"--disable", "ctl/w", "--trigger", "ctl/w:hist:keys=common_pid"}
			if mode == "int3" {
				flags = append(flags, "--no-optimize")
			}
			rewriteWith(t, prog, kpd, []string{"p:ctl/w work a=%di:s32"}, flags...)
			tr := kpd + ".trace"
			cmd := exec.Command(kpd)
			stdin, _ := cmd.StdinPipe()
			out, _ := cmd.StdoutPipe()
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			if l := bufio.NewScanner(out); !l.Scan() || l.Text() != "spinning" {
				t.Fatal("the program did not start")
			}
			a := "hist:keys=a.buckets=1000:size=128"
			b, cond := "hist:keys=a.log2:vals=a:size=128", " if a < 2500"
			steps := [][]string{
				{"trigger", tr, "ctl/w", a},
				{"trigger", tr, "ctl/w", b + cond},
				{"trigger", tr, "ctl/w", a + ":clear"},
				{"trigger", tr, "ctl/w", b + ":pause" + cond},
				{"trigger", tr, "ctl/w", "!" + a},
				{"trigger", tr, "ctl/w", b + ":cont" + cond},
				{"trigger", tr, "ctl/w", "!" + b + cond},
			}
			for k := 0; k < 30; k++ {
				s := steps[k%len(steps)]
				if code, o, e := kp(s...); code != 0 {
					t.Fatalf("kprewrite %v: exit %d\n%s%s", s, code, o, e)
				}
				time.Sleep(time.Millisecond)
			}
			stdin.Close()
			if err := cmd.Wait(); err != nil || stderr.Len() > 0 {
				t.Fatalf("the program: %v %s", err, stderr.String())
			}
			hits := profile(t, tr, kpd)["w"][0]
			bs := histOf(t, tr)
			var sum uint64
			kept := findHist(t, bs, "hist:keys=common_pid:vals=hitcount:")
			for _, v := range kept.Entries {
				sum += v[0]
			}
			if hits == 0 || sum != hits || kept.Hits != hits || len(kept.Entries) != 2 {
				t.Errorf("the rewrite's histogram: %d entries, %d hits (%d in entries); the event counted %d", len(kept.Entries), kept.Hits, sum, hits)
			}
			// 30 steps: a (step 1 of the 7) and b were last added at steps 29 and 30
			left := findHist(t, bs, "hist:keys=a.buckets=1000:")
			var n uint64
			for k, v := range left.Entries {
				var lo int
				if _, err := fmt.Sscanf(k, "a: ~ %d-", &lo); err != nil || lo%1000 != 0 || lo > 4000 {
					t.Errorf("entry %q", k)
				}
				n += v[0]
			}
			if left.Dropped != 0 || n != left.Hits || n == 0 {
				t.Errorf("%s: %d hits, %d in entries, %d dropped", left.Info, left.Hits, n, left.Dropped)
			}
		})
	}
}
