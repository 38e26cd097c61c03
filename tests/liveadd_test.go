package tests

// Events added to a running program (issue 46): a rewrite with --prepare work keeps
// work's original bytes; `kprewrite probe PID|FILE DEF` adds entry and return events
// there while the program runs and `-:EV` removes them, the site back to the original
// bytes when nothing rides it; an event added live prints what the same definition
// given at rewrite time prints, and its hits are its records.

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

func TestLiveProbeAddRemove(t *testing.T) {
	prog := testprog.Build(t, livePhasedSrc, "c", "-O2")
	for _, k := range liveKinds {
		t.Run(k.name, func(t *testing.T) { testLiveAddRemove(t, prog, k.flags, k.armed) })
	}
}

func testLiveAddRemove(t *testing.T, prog string, flags []string, armed byte) {
	bin := filepath.Join(t.TempDir(), "live.kp")
	tr := bin + ".trace"
	rewriteWith(t, prog, bin, []string{"p:t/w work a=%di:s64"}, append(flags, "--disable", "t/w", "--prepare", "work")...)
	if _, list, _ := kp("list", bin); strings.Count(list, "[PREPARED]") != 2 {
		t.Fatalf("list: %q, want the entry and the return placeholders [PREPARED]", list)
	}
	addr, orig := siteOf(t, prog, "work")
	if _, b := siteOf(t, bin, "work"); b != orig {
		t.Fatalf("the rewritten file holds %#x at work, want the original %#x", b, orig)
	}
	p := startPhased(t, bin)
	defer p.cmd.Process.Kill()
	pid := p.cmd.Process.Pid
	run := func(args ...string) string { t.Helper(); return kpOK(t, args...) }
	next := func(phase int) { t.Helper(); p.next(t, phase) }
	p.step(t, 0)
	if b := memByte(t, pid, bin, addr); b != orig {
		t.Fatalf("nothing added: the running program holds %#x at work, want the original %#x", b, orig)
	}
	// by PID: the trace file the program maps
	run("probe", fmt.Sprint(pid), "p:t/n work a=%di:s64", "r:t/r work $retval")
	waitByte(t, pid, bin, addr, armed)
	next(1) // 100 calls: t/n and t/r, not t/w (off)
	run("enable", tr, "t/w")
	next(2) // 50 calls: t/w, t/n, t/r
	run("probe", tr, "-:t/n", "-:t/r")
	if b := memByte(t, pid, bin, addr); b == orig {
		t.Fatal("t/w still on: the site must stay armed")
	}
	run("disable", tr, "t/w")
	waitByte(t, pid, bin, addr, orig)
	next(3) // 25 calls: nothing
	if out := run("list", "-v", tr); strings.Count(out, "[GONE]") != 2 || !strings.Contains(out, "t/n  p:t/n work a=%di:s64") {
		t.Fatalf("list %s: %q, want t/n and t/r [GONE]", tr, out)
	}
	_, probes, _ := kp("probe", tr)
	_, profText, _ := kp("profile", tr)
	t.Logf("probe: %s\nprofile: %s\nthe program's stderr: %s", probes, profText, p.stderr.String()) // (shown when it fails)
	checkLiveRecords(t, readTrace(t, tr, bin))
	prof := profile(t, tr, bin)
	if prof["n"][0] != 150 || prof["r"][0] != 150 || prof["w"][0] != 50 {
		t.Errorf("profile: %v, want t/n and t/r 150 hits, t/w 50", prof)
	}
	p.finish(t, "sum 19700")
}

// checkLiveRecords checks the records of testLiveAddRemove: t/n's 150, each a line
// equal to t/w's for the same call while both ran (the same definition, given live
// and at rewrite time), and t/r's return values work's own (a*3 + phase).
func checkLiveRecords(t *testing.T, recs []traceLine) {
	t.Helper()
	var n, r, w []traceLine
	for _, l := range recs {
		switch l.Event {
		case "n":
			n = append(n, l)
		case "r":
			r = append(r, l)
		case "w":
			w = append(w, l)
		}
	}
	if len(n) != 150 || len(r) != 150 || len(w) != 50 {
		t.Fatalf("%d t/n, %d t/r, %d t/w records; want 150, 150, 50", len(n), len(r), len(w))
	}
	for i := range w {
		if got, want := n[100+i].Head+n[100+i].Args, w[i].Head+w[i].Args; got != want {
			t.Errorf("call %d of phase 2: live t/n %q, rewrite-time t/w %q", i, got, want)
		}
	}
	for i, l := range r {
		a, phase := i, 1
		if i >= 100 {
			a, phase = i-100, 2
		}
		if want := fmt.Sprintf(" arg1=%#x", a*3+phase); l.Args != want {
			t.Fatalf("t/r record %d: %q, want %q", i, l.Args, want)
		}
	}
}

// liveTwoSrc is livePhasedSrc with a second function, other(), beside work().
var liveTwoSrc = livePhased(`__attribute__((noinline)) long work(long a, long b) { return a * 3 + b; }
__attribute__((noinline)) long other(long a) { return a + 1; }`, `s += work(i, phase) + other(i);`)

// TestLiveOptimizeOffOn: `kprewrite optimize FILE off` turns the jmps of a running
// program's live-capable jump points (a live event's and an always-armed one's) into
// int3s into their detours, `on` puts the jmps back; every hit is recorded in both
// kinds, and list shows the kind of now.
func TestLiveOptimizeOffOn(t *testing.T) {
	prog := testprog.Build(t, liveTwoSrc, "c", "-O2")
	bin := filepath.Join(t.TempDir(), "two.kp")
	tr := bin + ".trace"
	rewriteWith(t, prog, bin, []string{"p:t/w work a=%di:s64", "p:t/o other a=%di:s64"}, "--disable", "t/w")
	wAddr, _ := siteOf(t, prog, "work")
	oAddr, _ := siteOf(t, prog, "other")
	p := startPhased(t, bin)
	defer p.cmd.Process.Kill()
	pid := p.cmd.Process.Pid
	run := func(args ...string) string { t.Helper(); return kpOK(t, args...) }
	next := func(phase int) { t.Helper(); p.next(t, phase) }
	p.step(t, 0)
	run("enable", tr, "t/w")
	waitByte(t, pid, bin, wAddr, 0xe9)
	if b := memByte(t, pid, bin, oAddr); b != 0xe9 {
		t.Fatalf("other: %#x, want the jmp", b)
	}
	next(1) // 100 calls optimized
	if out := run("optimize", fmt.Sprint(pid), "off"); !strings.Contains(out, "optimization off (was on)") {
		t.Fatalf("optimize off: %q", out)
	}
	waitByte(t, pid, bin, wAddr, 0xcc)
	waitByte(t, pid, bin, oAddr, 0xcc)
	if out := run("list", tr); strings.Contains(out, "[OPTIMIZED]") {
		t.Fatalf("list with optimization off: %q", out)
	}
	next(2) // 50 calls through int3s
	run("optimize", tr, "on")
	waitByte(t, pid, bin, wAddr, 0xe9)
	waitByte(t, pid, bin, oAddr, 0xe9)
	if out := run("list", tr); strings.Count(out, "[OPTIMIZED]") != 2 {
		t.Fatalf("list with optimization on: %q", out)
	}
	next(3) // 25 calls optimized again
	recs := readTrace(t, tr, bin)
	n := map[string]int{}
	for _, l := range recs {
		n[l.Event]++
	}
	if n["w"] != 175 || n["o"] != 175 {
		t.Fatalf("records: %v, want 175 of t/w and of t/o", n)
	}
	p.finish(t, "sum 26350")
}

// liveHandlerSrc counts other()'s hits with a C handler, as trace_printk lines.
const liveHandlerSrc = `#include <kprewrite.h>
static int pre(struct kprobe *p, struct pt_regs *regs)
{
	trace_printk("other %ld\n", (long)regs->di);
	return 0;
}
DEFINE_KPROBE(kp, "other", .pre_handler = pre);
`

// TestLiveDisarmAll: `kprewrite disable TARGET all` is kprobes/enabled = 0: a live
// event's site gets its original bytes back, a C handler stops running; an event
// switched off meanwhile stays off when `enable TARGET all` arms the rest again.
func TestLiveDisarmAll(t *testing.T) {
	prog := testprog.Build(t, liveTwoSrc, "c", "-O2")
	dir := t.TempDir()
	handlers := filepath.Join(dir, "h.c")
	if err := os.WriteFile(handlers, []byte(liveHandlerSrc), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "two.kp")
	tr := bin + ".trace"
	rewriteWith(t, prog, bin, []string{"p:t/w work a=%di:s64"}, "--disable", "t/w", "--handlers", handlers)
	wAddr, orig := siteOf(t, prog, "work")
	p := startPhased(t, bin)
	defer p.cmd.Process.Kill()
	pid := p.cmd.Process.Pid
	run := func(args ...string) string { t.Helper(); return kpOK(t, args...) }
	next := func(phase int) { t.Helper(); p.next(t, phase) }
	count := func() (w, o int) {
		code, out, _ := kp("trace", tr)
		if code != 0 {
			t.Fatalf("trace: exit %d", code)
		}
		return strings.Count(out, " w: ("), strings.Count(out, ": other ")
	}
	p.step(t, 0)
	run("enable", tr, "t/w")
	waitByte(t, pid, bin, wAddr, 0xe9)
	next(1) // 100 calls: both
	if out := run("disable", fmt.Sprint(pid), "all"); !strings.Contains(out, "every probe disarmed (was armed)") {
		t.Fatalf("disable all: %q", out)
	}
	waitByte(t, pid, bin, wAddr, orig)
	if out := run("list", tr); strings.Count(out, "[DISABLED]") != 2 {
		t.Fatalf("list, every probe disarmed: %q", out)
	}
	run("disable", tr, "t/w") // its own switch, kept when the rest is armed again
	next(2)                   // 50 calls: nothing
	if w, o := count(); w != 100 || o != 100 {
		t.Fatalf("disarmed: %d t/w records and %d handler lines, want the 100 of before", w, o)
	}
	run("enable", tr, "all")
	// (enable returns before the live-probe thread has armed the handler's site again)
	oAddr, oOrig := siteOf(t, prog, "other")
	for try := 0; try < 1000 && memByte(t, pid, bin, oAddr) == oOrig; try++ {
		time.Sleep(2 * time.Millisecond)
	}
	next(3) // 25 calls: the handler, not t/w
	if w, o := count(); w != 100 || o != 125 {
		t.Fatalf("armed again: %d t/w records and %d handler lines, want 100 (t/w stays off) and 125", w, o)
	}
	if b := memByte(t, pid, bin, wAddr); b != orig {
		t.Fatalf("t/w off: work holds %#x, want the original %#x", b, orig)
	}
	p.finish(t, "sum 26350")
}

// kpOK runs kprewrite with args and fails the test unless it exits 0; its stdout.
func kpOK(t *testing.T, args ...string) string {
	t.Helper()
	code, o, e := kp(args...)
	if code != 0 {
		t.Fatalf("kprewrite %v: exit %d\n%s%s", args, code, o, e)
	}
	return o
}

// next lets the phased program run its next phase and waits for it to say so.
func (p *phased) next(t *testing.T, phase int) {
	t.Helper()
	p.stdin.Write([]byte{'x'})
	p.step(t, phase)
}

// finish lets the phased program end and checks its result line and its exit.
func (p *phased) finish(t *testing.T, want string) {
	t.Helper()
	p.stdin.Write([]byte{'x'})
	p.stdin.Close()
	if !p.lines.Scan() || p.lines.Text() != want {
		t.Errorf("the program's result: %q, want %s", p.lines.Text(), want)
	}
	if err := p.cmd.Wait(); err != nil || p.stderr.Len() > 0 {
		t.Errorf("the program: %v, stderr %q", err, p.stderr.String())
	}
}

// TestLiveFilter: `kprewrite filter FILE EV EXPR` on an event added at run time: the
// program records only the hits the filter accepts while it is set, every hit is
// counted, `filter FILE EV` shows it, and `0` removes it.
func TestLiveFilter(t *testing.T) {
	prog := testprog.Build(t, livePhasedSrc, "c", "-O2")
	bin := filepath.Join(t.TempDir(), "live.kp")
	tr := bin + ".trace"
	rewriteWith(t, prog, bin, nil, "--prepare", "work")
	addr, orig := siteOf(t, prog, "work")
	p := startPhased(t, bin)
	defer p.cmd.Process.Kill()
	run := func(args ...string) string { t.Helper(); return kpOK(t, args...) }
	p.step(t, 0)
	run("probe", tr, "p:t/n work a=%di:s64 b=%si:s64")
	waitByte(t, p.cmd.Process.Pid, bin, addr, liveKinds[1].armed) // (jump: the default)
	if out := run("filter", tr, "t/n", "a >= 40 && b == 1"); !strings.Contains(out, "filter a >= 40 && b == 1 (was none)") {
		t.Fatalf("filter: %q", out)
	}
	if out := run("filter", tr, "t/n"); !strings.Contains(out, "t/n (prog): a >= 40 && b == 1") {
		t.Fatalf("filter shown: %q", out)
	}
	p.next(t, 1) // 100 calls, a = 0..99, b = 1: 60 accepted
	run("filter", tr, "t/n", "0")
	p.next(t, 2) // 50 calls, all recorded
	run("probe", tr, "-:t/n")
	waitByte(t, p.cmd.Process.Pid, bin, addr, orig)
	p.next(t, 3)
	var got []string
	for _, l := range readTrace(t, tr, bin) {
		got = append(got, strings.TrimSpace(l.Args))
	}
	if len(got) != 110 || got[0] != "a=40 b=1" || got[59] != "a=99 b=1" || got[60] != "a=0 b=2" || got[109] != "a=49 b=2" {
		t.Fatalf("%d records (want 110: a=40..99 of phase 1, then phase 2's 50): %v", len(got), got)
	}
	if _, list, _ := kp("probe", tr); !strings.Contains(list, "150 hits") {
		t.Errorf("probe: %q, want 150 hits (the filter refuses records, not hits)", list)
	}
	p.finish(t, "sum 19700")
}

// TestLiveTrigger: `kprewrite trigger FILE EV TRIGGER` on an event added at run time:
// counted, conditional traceoff, traceon, snapshot, disable_event and enable_event (of
// t/o, a rewrite-time event of other(), called with the same a as work(), whose filter
// leaves out the calls the switches happen at, so the order of the two calls does not
// matter) fire at the hits their conditions name, in the kernel's order (traceoff after
// the record of the hit that stops tracing); `trigger FILE EV` lists them with the
// fires left; `!CMD` removes one; a second of a kind and the commands live frames do
// not carry are refused, nothing written.
func TestLiveTrigger(t *testing.T) {
	prog := testprog.Build(t, liveTwoSrc, "c", "-O2")
	bin := filepath.Join(t.TempDir(), "live.kp")
	tr := bin + ".trace"
	rewriteWith(t, prog, bin, []string{"p:t/o other a=%di:s64"}, "--prepare", "work", "--filter", "t/o:a != 20 && a != 30")
	p := startPhased(t, bin)
	defer p.cmd.Process.Kill()
	run := func(args ...string) string { t.Helper(); return kpOK(t, args...) }
	p.step(t, 0)
	run("probe", tr, "p:t/n work a=%di:s64 b=%si:s64")
	run("trigger", tr, "t/n", "traceoff:1 if a == 39")
	pid := strconv.Itoa(p.cmd.Process.Pid) // a TARGET is the trace file or the program's PID
	run("trigger", pid, "t/n", "disable_event:t:o:1 if a == 20")
	if out := run("filter", pid, "t/o"); out != "t/o (prog): a != 20 && a != 30\n" {
		t.Errorf("filter PID t/o: %q", out)
	}
	out := run("trigger", tr, "t/n", "snapshot:1 if a == 20")
	if !strings.HasSuffix(out, "  snapshot:count=1 if a == 20\n  disable_event:t:o:count=1 if a == 20\n  traceoff:count=1 if a == 39\n") {
		t.Fatalf("trigger: %q", out)
	}
	for bad, why := range map[string]string{
		"traceon":                      "EEXIST",
		"enable_event:t:o if a == 30":  "EEXIST", // (one per target event)
		"enable_hist:t:o":              "enable_hist triggers are not supported on events added at run time",
		"stacktrace":                   "no unwind table",
		"traceon if nope>1":            "nope",
		"enable_event:t:nosuch if a>1": "no event t:nosuch",
	} {
		if code, o, e := kp("trigger", tr, "t/n", bad); code != 1 || !strings.Contains(e, "t/n") || !strings.Contains(e, why) || o != "" {
			t.Errorf("trigger %q: exit %d, stdout %q, stderr %q; want exit 1 and %q", bad, code, o, e, why)
		}
	}
	// a = 0..99, b = 1: t/n a=0..39 (tracing off after a=39's record), t/o a=0..19
	p.next(t, 1)
	if out := run("trigger", pid, "t/n"); out != "t/n (prog):\nsnapshot:count=0 if a == 20\ndisable_event:t:o:count=0 if a == 20\ntraceoff:count=0 if a == 39\n" {
		t.Fatalf("triggers after phase 1: %q", out)
	}
	run("trigger", tr, "t/n", "!traceoff")
	run("trigger", tr, "t/n", "traceon:1")
	run("trigger", tr, "t/n", "!disable_event:t:o")
	run("trigger", tr, "t/n", "enable_event:t:o:1 if a == 30")
	// a = 0..49, b = 2: traceon at the first hit, t/n all 50; t/o a=31..49
	p.next(t, 2)
	if out := run("trigger", tr, "t/n"); out != "t/n (prog):\nenable_event:t:o:count=0 if a == 30\ntraceon:count=0\nsnapshot:count=0 if a == 20\n" {
		t.Fatalf("triggers after phase 2: %q", out)
	}
	run("probe", tr, "-:t/n")
	p.next(t, 3) // a = 0..24: t/o a != 20
	counts := map[string][]string{}
	for _, l := range readTrace(t, tr, bin) {
		counts[l.Event] = append(counts[l.Event], strings.TrimSpace(l.Args))
	}
	n, w := counts["n"], counts["o"]
	if len(n) != 90 || n[0] != "a=0 b=1" || n[39] != "a=39 b=1" || n[40] != "a=0 b=2" || n[89] != "a=49 b=2" {
		t.Errorf("t/n: %d records (want 90: a=0..39 of phase 1, then phase 2's 50): %v", len(n), n)
	}
	if len(w) != 20+19+24 || w[0] != "a=0" || w[19] != "a=19" || w[20] != "a=31" || w[38] != "a=49" || w[39] != "a=0" {
		t.Errorf("t/o: %d records, want 63 (a=0..19, a=31..49, then phase 3's but a=20): %v", len(w), w)
	}
	// the snapshot taken at a=20 of phase 1 (a conditional one keeps its hit's record)
	snap := map[string]int{}
	for _, l := range readTraceArgs(t, "--snapshot", tr) {
		snap[l.Event]++
	}
	if snap["n"] != 21 || snap["o"] != 20 {
		t.Errorf("the snapshot: %d t/n and %d t/o records, want 21 (a=0..20) and 20 (a=0..19)", snap["n"], snap["o"])
	}
	if _, list, _ := kp("probe", tr); !strings.Contains(list, "150 hits") {
		t.Errorf("probe: %q, want 150 hits of t/n (every hit counted, recorded or not)", list)
	}
	p.finish(t, "sum 26350")
}

// TestLiveTriggerStack: a stacktrace trigger on an event added at run time, in a
// program whose rewrite carries the unwind table (a stacktrace trigger of its own that
// never fires): the stack follows the record of each hit it fires at, under the live
// event's name, with main among its frames.
func TestLiveTriggerStack(t *testing.T) {
	prog := testprog.Build(t, liveTwoSrc, "c", "-O2")
	bin := filepath.Join(t.TempDir(), "live.kp")
	tr := bin + ".trace"
	rewriteWith(t, prog, bin, []string{"p:t/o other a=%di:s64"}, "--prepare", "work", "--trigger", "t/o:stacktrace if a == 1000")
	p := startPhased(t, bin)
	defer p.cmd.Process.Kill()
	p.step(t, 0)
	kpOK(t, "probe", tr, "p:t/n work a=%di:s64 b=%si:s64")
	kpOK(t, "trigger", tr, "t/n", "stacktrace:2 if a >= 5")
	p.next(t, 1)
	kpOK(t, "probe", tr, "-:t/n")
	p.next(t, 2)
	p.next(t, 3)
	var after []string
	lines := readTrace(t, tr, bin)
	for k, l := range lines {
		if l.Event != "<stack trace>" {
			continue
		}
		if k == 0 || !strings.Contains(l.Stack, "main") {
			t.Errorf("stack %d: %q, want main among its frames", k, l.Stack)
			continue
		}
		after = append(after, lines[k-1].Event+" "+strings.TrimSpace(lines[k-1].Args))
	}
	if strings.Join(after, ", ") != "n a=5 b=1, n a=6 b=1" {
		t.Errorf("stacks after %q, want after t/n's a=5 and a=6 of phase 1", after)
	}
	p.finish(t, "sum 26350")
}

// TestLiveProbeBesideEvent: an event added at a prepared site that a rewrite-time event
// keeps armed (so no point of the program is live) records every hit beside it; until
// 2026-11-29 such a program had no live-probe thread and the event recorded nothing.
func TestLiveProbeBesideEvent(t *testing.T) {
	prog := testprog.Build(t, livePhasedSrc, "c", "-O2")
	bin := filepath.Join(t.TempDir(), "live.kp")
	tr := bin + ".trace"
	rewriteWith(t, prog, bin, []string{"p:t/w work a=%di:s64"}, "--prepare", "work")
	p := startPhased(t, bin)
	defer p.cmd.Process.Kill()
	p.step(t, 0)
	kpOK(t, "probe", tr, "p:t/n work a=%di:s64 b=%si:s64")
	p.next(t, 1) // 100 calls: both
	kpOK(t, "probe", tr, "-:t/n")
	p.next(t, 2) // 50: t/w
	p.next(t, 3) // 25: t/w
	counts := map[string]int{}
	for _, l := range readTrace(t, tr, bin) {
		counts[l.Event]++
	}
	if counts["n"] != 100 || counts["w"] != 175 {
		t.Errorf("records %v, want 100 of t/n (phase 1) and 175 of t/w", counts)
	}
	p.finish(t, "sum 19700")
}

// TestLiveTriggerHist: a conditional histogram on an event added at run time, paused and
// continued by writing the kernel's forms: `kprewrite hist --event` reads exactly the hits
// of the phases it was active in; `trigger FILE EV` shows its state; one with a
// variable is refused with the reason.
func TestLiveTriggerHist(t *testing.T) {
	prog := testprog.Build(t, livePhasedSrc, "c", "-O2")
	bin := filepath.Join(t.TempDir(), "live.kp")
	tr := bin + ".trace"
	rewriteWith(t, prog, bin, nil, "--prepare", "work")
	p := startPhased(t, bin)
	defer p.cmd.Process.Kill()
	run := func(args ...string) string { t.Helper(); return kpOK(t, args...) }
	p.step(t, 0)
	run("probe", tr, "p:t/n work a=%di:s64 b=%si:s64")
	run("trigger", tr, "t/n", "hist:keys=b:vals=hitcount,a if a < 10")
	if code, o, e := kp("trigger", tr, "t/n", "hist:keys=b:ts0=common_timestamp.usecs"); code != 1 || o != "" ||
		!strings.Contains(e, `t/n: trigger "hist:keys=b:ts0=common_timestamp.usecs": histogram variables are linked`) {
		t.Errorf("a histogram with a variable: exit %d, stdout %q, stderr %q; want exit 1 and the reason", code, o, e)
	}
	p.next(t, 1) // b = 1, a = 0..99: 10 hits
	run("trigger", tr, "t/n", "hist:keys=b:vals=hitcount,a:pause if a < 10")
	if out := run("trigger", tr, "t/n"); !strings.Contains(out, "hist:keys=b:vals=hitcount,a:sort=hitcount:size=2048 if a < 10 [paused]\n") {
		t.Fatalf("paused: %q", out)
	}
	p.next(t, 2) // paused: nothing
	run("trigger", tr, "t/n", "hist:keys=b:vals=hitcount,a:cont if a < 10")
	p.next(t, 3) // b = 3, a = 0..24: 10 hits
	checkCounts(t, findHist(t, histOf(t, tr, "--event", "t/n"), "hist:keys=b:vals=hitcount,a:sort=hitcount:size=2048 if a < 10 [active]"),
		map[string]uint64{"b: 1": 10, "b: 3": 10}, 20)
	if t.Failed() {
		t.Logf("the program's stderr: %s", p.stderr.String())
	}
	p.finish(t, "sum 19700")
}

// liveGatedSrc's gfn starts with a test and a short js, which its detour's copy of the
// displaced instructions moves (the js becomes a rel32 one): a prepared gfn keeps its
// jmp in the file and its live events switch its detour's gate instead of its bytes.
var liveGatedSrc = livePhased(`__attribute__((noinline)) long slowpath(long a) { return a - 1; }
__attribute__((noinline)) long gfn(long a) { if (__builtin_expect(a < 0, 0)) return slowpath(a); return a * 3 + 1; }
__attribute__((noinline)) int islow(int a) { return a - 1; }
__attribute__((noinline)) int ifn(int a) { if (__builtin_expect(a < 0, 0)) return islow(a); return a * 3 + 1; }
long sfn(long a); /* a loop back to its second instruction: a 21-byte DCR */
__asm__(".text\n.globl sfn\n.type sfn,@function\nsfn:\n\txor %eax,%eax\n1:\tcmp %rdi,%rax\n\tjge 2f\n"
	"\tadd $1,%rax\n\tadd $0,%rdx\n\tadd $0,%rcx\n\tjmp 1b\n2:\txor %eax,%eax\n\tret\n.size sfn,.-sfn\n");
long yfn(long a); /* a loop of five tests: a 27-byte DCR whose copy steps five times, a gated point */
__asm__(".text\n.globl yfn\n.type yfn,@function\nyfn:\n\txor %eax,%eax\n1:\tcmp %edi,%eax\n\tjge 2f\n"
	"\tcmp %edi,%eax\n\tjge 2f\n\tcmp %edi,%eax\n\tjge 2f\n\tcmp %edi,%eax\n\tjge 2f\n\tcmp %edi,%eax\n\tjge 2f\n"
	"\tadd $1,%eax\n\tjmp 1b\n2:\txor %eax,%eax\n\tret\n.size yfn,.-yfn\n");`,
	`s += gfn(i - 5 * phase) + ifn(i - 5 * phase) + sfn(i - 5 * phase) + yfn(i - 5 * phase);`)

// TestLiveGatedPoint: a prepared function whose jmp cannot come and go live (a gated
// point: yfn's loop is its DCR, and its copy moves the loop's instructions by five
// different steps, more than a point's DCR map holds) records nothing until an event is added there, every call
// while it is on (values right) and nothing after its removal; the program's result is
// the original's.
func TestLiveGatedPoint(t *testing.T) {
	liveJumpCycle(t, "yfn", true, []byte{0x31, 0xc0, 0x39, 0xf8, 0x7d}) // xor, cmp %edi,%eax, jge
}

// TestLiveJumpWholeLoop: a prepared function whose DCR is longer than a point's 16
// original bytes (sfn's loop jumps back into its first five bytes, so its DCR is the
// whole loop, 21 bytes, and its copy moves the loop's body) is a live jump point: the
// original bytes while no event is on it, its jmp while one is (the DCR's tail past the
// 16th byte never written).
func TestLiveJumpWholeLoop(t *testing.T) {
	liveJumpCycle(t, "sfn", false, []byte{0x31, 0xc0, 0x48, 0x39, 0xf8, 0x7d}) // xor, cmp %rdi,%rax, jge
}

// TestLiveJumpMovedCopy: a prepared function whose DCR's copy moves an instruction
// (ifn: test, js rel8, lea; the js's rel32 copy moves the lea) is a live jump point all
// the same (its DCR map says where each instruction is in the copy): original bytes
// while no event is on it, its jmp while one is.
func TestLiveJumpMovedCopy(t *testing.T) {
	liveJumpCycle(t, "ifn", false, []byte{0x85, 0xff, 0x78}) // test %edi,%edi; js
}

// TestLiveJumpLongerCopy: a prepared function whose DCR's copy is longer only in its last
// instruction (gfn: test, js rel8; the copy's js is a rel32) keeps every instruction's
// offset, so it is a live jump point: its original bytes in the file and in memory while
// no event is on it, its jmp while one is, the original bytes again after the removal.
func TestLiveJumpLongerCopy(t *testing.T) {
	liveJumpCycle(t, "gfn", false, []byte{0x48, 0x85, 0xff, 0x78}) // test %rdi,%rdi; js
}

// liveJumpCycle runs liveGatedSrc rewritten --prepare fn (whose code starts with
// prefix): an event added at fn, removed, another added; records checked, and fn's first
// byte in the file and in memory: a jmp throughout when gated, else the original's but
// while an event is on it.
func liveJumpCycle(t *testing.T, fn string, gated bool, prefix []byte) {
	prog := testprog.Build(t, liveGatedSrc, "c", "-O2")
	bin := filepath.Join(t.TempDir(), "gated.kp")
	tr := bin + ".trace"
	rewriteWith(t, prog, bin, nil, "--prepare", fn)
	addr, code := siteBytes(t, prog, fn, len(prefix))
	if !bytes.Equal(code, prefix) {
		t.Skipf("%s starts with % x here, not % x: not the DCR this test is about", fn, code, prefix)
	}
	orig := code[0]
	if _, b := siteOf(t, bin, fn); (b == 0xe9) != gated {
		t.Fatalf("%s's site holds %#x in the rewrite (original %#x); gated %v", fn, b, orig, gated)
	}
	want := orig // (while no event is on it)
	if gated {
		want = 0xe9
	}
	p := startPhased(t, bin)
	defer p.cmd.Process.Kill()
	p.step(t, 0)
	if b := memByte(t, p.cmd.Process.Pid, bin, addr); b != want {
		t.Errorf("%s holds %#x before any event, want %#x", fn, b, want)
	}
	kpOK(t, "probe", tr, "p:t/g "+fn+" a=%di:s64")
	p.next(t, 1) // a = -5..94
	if b := memByte(t, p.cmd.Process.Pid, bin, addr); b != 0xe9 {
		t.Errorf("%s holds %#x with an event on it, want its jmp", fn, b)
	}
	kpOK(t, "probe", tr, "-:t/g")
	p.next(t, 2) // 50 calls: none recorded
	if b := memByte(t, p.cmd.Process.Pid, bin, addr); b != want {
		t.Errorf("%s holds %#x after the removal, want %#x", fn, b, want)
	}
	kpOK(t, "probe", tr, "p:t/h "+fn+" a=%di:s64")
	p.next(t, 3) // a = -15..9
	var g, h []string
	for _, l := range readTrace(t, tr, bin) {
		switch l.Event {
		case "g":
			g = append(g, strings.TrimSpace(l.Args))
		case "h":
			h = append(h, strings.TrimSpace(l.Args))
		}
	}
	if len(g) != 100 || g[0] != "a=-5" || g[99] != "a=94" || len(h) != 25 || h[0] != "a=-15" || h[24] != "a=9" {
		t.Errorf("t/g %d records (%v...), t/h %d (%v...); want a=-5..94 and a=-15..9", len(g), first(g), len(h), first(h))
	}
	p.finish(t, "sum "+gatedSum())
}

func first(s []string) []string { return s[:min(len(s), 3)] }

// gatedSum is liveGatedSrc's result, computed as it does.
func gatedSum() string {
	gfn := func(a int64) int64 {
		if a < 0 {
			return a - 1
		}
		return a*3 + 1
	}
	var s int64
	for phase, n := range []int{0, 100, 50, 25} {
		for i := 0; i < n; i++ {
			s += 2 * gfn(int64(i-5*phase)) // (ifn computes the same in 32 bits)
		}
	}
	return strconv.FormatInt(s, 10)
}

// TestDisarmAllWholeLoop: `disable FILE all` on an image with live points disarms its
// other jump points too; one whose DCR is a whole loop longer than the 16 original bytes
// a point keeps (sfn, 21 bytes, armed at rewrite time: the file holds its jmp and int3s
// over the whole DCR) must stay a gated jmp, not have 16 bytes put back before int3s
// (the program's loop would trap on them). The program runs its phases with every
// probe disarmed and again armed, its result the original's.
func TestDisarmAllWholeLoop(t *testing.T) {
	prog := testprog.Build(t, liveGatedSrc, "c", "-O2")
	bin := filepath.Join(t.TempDir(), "loop.kp")
	tr := bin + ".trace"
	rewriteWith(t, prog, bin, []string{"p:t/s sfn a=%di:s64"}, "--prepare", "gfn")
	if _, b := siteOf(t, bin, "sfn"); b != 0xe9 {
		t.Fatalf("sfn's site holds %#x in the rewrite, want its jmp", b)
	}
	orig := testprog.Run(t, testprog.Cmd{Path: prog, Stdin: "xxxx"})
	p := startPhased(t, bin)
	defer p.cmd.Process.Kill()
	p.step(t, 0)
	kpOK(t, "disable", tr, "all")
	time.Sleep(100 * time.Millisecond) // (the live-probe thread disarms asynchronously)
	p.next(t, 1)
	kpOK(t, "enable", tr, "all")
	p.next(t, 2)
	p.next(t, 3)
	p.stdin.Write([]byte{'x'})
	p.stdin.Close()
	if !p.lines.Scan() || !strings.HasSuffix(orig.Stdout, "\n"+p.lines.Text()+"\n") {
		t.Errorf("the program's result: %q, the original's %q (stderr %q)", p.lines.Text(), orig.Stdout, p.stderr.String())
	}
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("the program: %v, stderr %q", err, p.stderr.String())
	}
	n := 0
	for _, l := range readTrace(t, tr, bin) {
		if l.Event == "s" {
			n++
		}
	}
	if n != 75 { // phases 2 and 3 (50 + 25 calls); none while disarmed
		t.Errorf("%d records of t/s, want 75 (phases 2 and 3)", n)
	}
}
